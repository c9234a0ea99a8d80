//! Retention (rule 7): what a purge may remove, checked before any ledger is touched, and what a
//! purge run records.
//!
//! Only settled actions are purged: those whose state is final (completed, cancelled) and whose
//! settlement is older than the window. What stays of each is its tombstone, the action's own row
//! with the bulk emptied (see `migrations/*/..._retention.sql`), so a replay of the key is still
//! recognised and never performed again.

use super::input::{Person, Reason};
use super::key::ActionKey;
use super::record::Timestamp;
use super::state::{State, join_states};
use std::time::Duration;

/// The states purged when none are named.
pub const DEFAULT_PURGE_STATES: [State; 2] = [State::Completed, State::Cancelled];

/// Why a purge request cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetentionError {
    /// The window is zero: every settled action would go at once, including one settled a
    /// moment ago.
    #[error("the age to purge past must be longer than zero, such as 90d")]
    ZeroWindow,
    /// A state that is not final: its action may still change, and its payload and evidence are
    /// still needed.
    #[error(
        "cannot purge {state} actions: only settled actions are purged, and {state} is not final; name states from {}",
        join_states(&DEFAULT_PURGE_STATES)
    )]
    Unsettled { state: State },
    #[error("no state is named to purge; name states from {}", join_states(&DEFAULT_PURGE_STATES))]
    NoStates,
}

/// A validated purge request: a window longer than zero, and final states only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeRequest {
    older_than: Duration,
    states: Vec<State>,
    pub owner: Person,
    pub reason: Reason,
    /// Count what would be removed, and change nothing.
    pub dry_run: bool,
}

impl PurgeRequest {
    pub fn new(
        older_than: Duration,
        states: &[State],
        owner: Person,
        reason: Reason,
        dry_run: bool,
    ) -> Result<Self, RetentionError> {
        if older_than.is_zero() {
            return Err(RetentionError::ZeroWindow);
        }
        if states.is_empty() {
            return Err(RetentionError::NoStates);
        }
        if let Some(&state) = states.iter().find(|s| !s.is_terminal()) {
            return Err(RetentionError::Unsettled { state });
        }
        let mut states = states.to_vec();
        states.sort_by_key(|s| s.as_str());
        states.dedup();
        Ok(Self { older_than, states, owner, reason, dry_run })
    }

    pub fn older_than(&self) -> Duration {
        self.older_than
    }

    /// The final states to purge, sorted, each once.
    pub fn states(&self) -> &[State] {
        &self.states
    }

    /// Actions settled before this time are purged, by the database time of the run.
    pub fn settled_before(&self, now: Timestamp) -> Timestamp {
        let window = chrono::Duration::from_std(self.older_than).unwrap_or(chrono::Duration::MAX);
        now.checked_sub_signed(window).unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC)
    }
}

/// What a purge run removed (or, dry, would remove).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PurgeCounts {
    /// Actions reduced to their tombstone.
    pub actions: i64,
    pub deliveries: i64,
    pub attempts: i64,
    pub lookups: i64,
}

/// A settled action a purge found old enough: its key, and what decides whether its evidence
/// may go ([`PurgeCandidate::keeps_evidence`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeCandidate {
    pub key: ActionKey,
    pub state: State,
    pub may_have_written: bool,
}

impl PurgeCandidate {
    /// Whether a purge keeps this action whole: an earlier request may have written it and it is
    /// not completed (cancelled, or failed after a write nobody ruled out), so its attempts are
    /// the only record that the effect may exist at the destination (rule 7: the ledger never
    /// forgets an effect that may exist). A cancellation keeps the mark even when the person
    /// confirmed the destination holds nothing: a word that may be wrong does not erase the
    /// evidence, so such an action is kept whole too. A completed action's tombstone keeps its
    /// destination id; an action whose requests are known not to have written keeps nothing that
    /// matters.
    pub fn keeps_evidence(&self) -> bool {
        self.may_have_written && self.state != State::Completed
    }
}

/// One recorded purge run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeRecord {
    pub id: i64,
    pub at: Timestamp,
    pub owner: String,
    pub reason: String,
    pub older_than: Duration,
    pub settled_before: Timestamp,
    pub states: Vec<State>,
    pub counts: PurgeCounts,
}

/// The states of a purge as stored: comma-separated.
pub fn states_text(states: &[State]) -> String {
    states.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(older_than: Duration, states: &[State]) -> Result<PurgeRequest, RetentionError> {
        PurgeRequest::new(older_than, states, Person::parse("ann").unwrap(), Reason::parse("retention").unwrap(), false)
    }

    #[test]
    fn only_final_states_and_a_real_window_are_accepted() {
        let day = Duration::from_hours(24);
        assert_eq!(request(Duration::ZERO, &DEFAULT_PURGE_STATES), Err(RetentionError::ZeroWindow));
        assert_eq!(request(day, &[]), Err(RetentionError::NoStates));
        for state in State::ALL.into_iter().filter(|s| !s.is_terminal()) {
            let refused = request(day, &[State::Completed, state]).unwrap_err();
            assert_eq!(refused, RetentionError::Unsettled { state });
            assert!(refused.to_string().contains("is not final"), "{refused}");
        }
        let accepted = request(day, &[State::Completed, State::Cancelled, State::Completed]).unwrap();
        assert_eq!(accepted.states(), [State::Cancelled, State::Completed]);
    }
}
