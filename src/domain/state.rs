//! States of an action and the one transition table that every store obeys.

use std::fmt;

/// Where an action stands. docs/RULES.md says what each state means and who moves it on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Pending,
    InProgress,
    Completed,
    Failed,
    Unknown,
    Conflict,
    Held,
    Cancelled,
}

impl State {
    pub const ALL: [Self; 8] = [
        Self::Pending,
        Self::InProgress,
        Self::Completed,
        Self::Failed,
        Self::Unknown,
        Self::Conflict,
        Self::Held,
        Self::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::InProgress => "in_progress",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Unknown => "unknown",
            Self::Conflict => "conflict",
            Self::Held => "held",
            Self::Cancelled => "cancelled",
        }
    }

    /// Whether an action in this state waits for a person: what the review owners are routed.
    pub fn needs_person(self) -> bool {
        matches!(self, Self::Unknown | Self::Failed | Self::Held | Self::Conflict)
    }

    /// Completed and cancelled actions never change state again.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Cancelled)
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for State {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| format!("unknown state {s:?}; states are {}", join_states(&Self::ALL)))
    }
}

/// What moves an action: automatic work, recovery, or a named person's command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// A new submission recorded the action.
    Submitted,
    /// A changed payload arrived for the same key: a person must approve or reject it.
    PayloadChanged,
    /// A worker claimed the action.
    Claimed,
    /// The destination confirmed the action.
    Completed,
    /// A permanent failure, or attempts used up: known not written.
    Failed,
    /// A temporary failure before any write: back to pending with a not-before time.
    RetryScheduled,
    /// The destination may or may not have acted.
    OutcomeUnknown,
    /// Automatic work is not permitted any more (idempotency window passed).
    Held,
    /// A worker gave its claim back before sending anything.
    Released,
    /// A result arrived from an ownership version that is no longer current.
    LateResult,
    /// A worker took over an expired claim: nothing was sent under it, or the destination
    /// protects against a repeat (rule 5 in docs/RULES.md).
    ClaimRecovered,
    /// An expired claim after a possible send, whose destination cannot tell a repeat: taking
    /// it over is unsafe, so it is held for a person (rule 5).
    LeaseExpired,
    /// A lookup at the destination found the record: the action was performed.
    LookupFound,
    /// A lookup at the destination proved nothing was written.
    LookupNotFound,
    /// A lookup found records that do not match the action, or more than one.
    LookupMismatch,
    /// Manual: controlled retry under the same key.
    Retry,
    /// Manual: a verified outcome, written by the destination.
    ResolvedCompleted,
    /// Manual: the destination has no record.
    ResolvedNotWritten,
    /// Manual: the action must not happen.
    Cancelled,
    /// Manual: the proposed payload replaces the approved one.
    Approved,
    /// Manual: the proposed payload is discarded.
    Rejected,
    /// Manual: a person took over a stale claim.
    TakenOver,
    /// Manual: a person made an action theirs to follow up; the state does not change.
    Assigned,
    /// Manual: a person acknowledged the late results listed on an action; the state does not
    /// change.
    LateResultsAcknowledged,
    /// A person looked an action up at its destination while it was not `unknown`: what was
    /// found is kept as evidence, and the state does not change.
    LookedUp,
    /// A conditional update was refused: the record changed at the destination since the ledger
    /// last wrote it. Nothing was overwritten; a person decides.
    ChangedAtDestination,
    /// Manual: a person re-created a completed action whose record was removed at the
    /// destination, as a new linked action under a derived key; the state does not change.
    Recreated,
    /// An update action of this completed action completed at the destination: its payload is
    /// this action's approved one from now on; the state does not change. Until then the action
    /// keeps the payload the destination was last known to hold.
    UpdateApplied,
}

impl Event {
    /// Every event, in declaration order: the values the database accepts in the audit trail
    /// (PostgreSQL's CHECK constraint of migration 0011; tests/it/roles.rs keeps them equal).
    pub const ALL: [Self; 28] = [
        Self::Submitted,
        Self::PayloadChanged,
        Self::Claimed,
        Self::Completed,
        Self::Failed,
        Self::RetryScheduled,
        Self::OutcomeUnknown,
        Self::Held,
        Self::Released,
        Self::LateResult,
        Self::ClaimRecovered,
        Self::LeaseExpired,
        Self::LookupFound,
        Self::LookupNotFound,
        Self::LookupMismatch,
        Self::Retry,
        Self::ResolvedCompleted,
        Self::ResolvedNotWritten,
        Self::Cancelled,
        Self::Approved,
        Self::Rejected,
        Self::TakenOver,
        Self::Assigned,
        Self::LateResultsAcknowledged,
        Self::LookedUp,
        Self::ChangedAtDestination,
        Self::Recreated,
        Self::UpdateApplied,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Submitted => "submitted",
            Self::PayloadChanged => "payload_changed",
            Self::Claimed => "claimed",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::RetryScheduled => "retry_scheduled",
            Self::OutcomeUnknown => "outcome_unknown",
            Self::Held => "held",
            Self::Released => "released",
            Self::LateResult => "late_result",
            Self::ClaimRecovered => "claim_recovered",
            Self::LeaseExpired => "lease_expired",
            Self::LookupFound => "lookup_found",
            Self::LookupNotFound => "lookup_not_found",
            Self::LookupMismatch => "lookup_mismatch",
            Self::Retry => "retry",
            Self::ResolvedCompleted => "resolved_completed",
            Self::ResolvedNotWritten => "resolved_not_written",
            Self::Cancelled => "cancelled",
            Self::Approved => "approved",
            Self::Rejected => "rejected",
            Self::TakenOver => "taken_over",
            Self::Assigned => "assigned",
            Self::LateResultsAcknowledged => "late_results_acknowledged",
            Self::LookedUp => "looked_up",
            Self::ChangedAtDestination => "changed_at_destination",
            Self::Recreated => "recreated",
            Self::UpdateApplied => "update_applied",
        }
    }
}

impl Event {
    /// Whether only a named person's command makes this event.
    pub fn is_manual(self) -> bool {
        matches!(
            self,
            Self::Retry
                | Self::ResolvedCompleted
                | Self::ResolvedNotWritten
                | Self::Cancelled
                | Self::Approved
                | Self::Rejected
                | Self::TakenOver
                | Self::Assigned
                | Self::LateResultsAcknowledged
                | Self::LookedUp
                | Self::Recreated
        )
    }

    /// Whether a person may make this event: the manual commands, a lookup a person asked for, and
    /// an update taken on by an update action a person resolved as completed.
    pub fn is_made_by_people(self) -> bool {
        self.is_manual()
            || matches!(self, Self::LookupFound | Self::LookupNotFound | Self::LookupMismatch | Self::UpdateApplied)
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

use Event as E;
use State::{Cancelled, Completed, Conflict, Failed, Held, InProgress, Pending, Unknown};

/// Every allowed (event, from, to). A change of state not listed is refused, in Rust before a
/// write and again by a trigger in each database (the migrations list the same state pairs).
/// Events that leave the state as it is are recorded in the audit trail without a row here: a
/// submission, a payload proposed while the action is claimed, unknown or settled, a late result
/// on an action already in conflict or final, or that contradicts nothing, a rejection after the
/// action moved on, an assignment, and an acknowledgement of late results. docs/RULES.md shows this table ([`transitions_markdown`]).
pub const TRANSITIONS: &[(Event, State, State)] = &[
    (E::PayloadChanged, Pending, Conflict),
    (E::PayloadChanged, Failed, Conflict),
    (E::PayloadChanged, Held, Conflict),
    (E::Claimed, Pending, InProgress),
    (E::Completed, InProgress, Completed),
    (E::Failed, InProgress, Failed),
    (E::RetryScheduled, InProgress, Pending),
    (E::OutcomeUnknown, InProgress, Unknown),
    (E::Held, InProgress, Held),
    (E::Released, InProgress, Pending),
    (E::LateResult, Pending, Conflict),
    (E::LateResult, InProgress, Conflict),
    (E::LateResult, Failed, Conflict),
    (E::LateResult, Unknown, Conflict),
    (E::LateResult, Held, Conflict),
    // A completed action stays completed, unless a late result contradicts its evidence.
    (E::LateResult, Completed, Conflict),
    (E::ClaimRecovered, InProgress, InProgress),
    (E::LeaseExpired, InProgress, Held),
    (E::LookupFound, Unknown, Completed),
    (E::LookupNotFound, Unknown, Pending),
    // Rule 3: nothing was written, and the round has no send left.
    (E::LookupNotFound, Unknown, Failed),
    (E::LookupMismatch, Unknown, Conflict),
    (E::ChangedAtDestination, InProgress, Conflict),
    (E::Retry, Failed, Pending),
    (E::Retry, Unknown, Pending),
    (E::Retry, Held, Pending),
    (E::Retry, Conflict, Pending),
    (E::ResolvedCompleted, Failed, Completed),
    (E::ResolvedCompleted, Unknown, Completed),
    (E::ResolvedCompleted, Held, Completed),
    (E::ResolvedCompleted, Conflict, Completed),
    (E::ResolvedNotWritten, Unknown, Pending),
    (E::ResolvedNotWritten, Held, Pending),
    (E::ResolvedNotWritten, Conflict, Pending),
    (E::Cancelled, Pending, Cancelled),
    (E::Cancelled, Failed, Cancelled),
    (E::Cancelled, Unknown, Cancelled),
    (E::Cancelled, Held, Cancelled),
    (E::Cancelled, Conflict, Cancelled),
    (E::Approved, Conflict, Pending),
    (E::Rejected, Conflict, Pending),
    (E::Rejected, Conflict, Failed),
    (E::Rejected, Conflict, Held),
    (E::Rejected, Conflict, Conflict),
    (E::TakenOver, InProgress, Pending),
    (E::TakenOver, InProgress, Held),
];

/// Transitions that would make an action claimable or retryable again go to `conflict` instead
/// while a proposed payload awaits a decision, so the old payload is never sent past it.
pub const DIVERTED_WHILE_PROPOSED: &[State] = &[Pending, Failed, Held];

/// A transition that the table does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{event} is not allowed from {from}; it is allowed from {}", join_states(allowed_from(*event).as_slice()))]
pub struct TransitionRefused {
    pub event: Event,
    pub from: State,
    pub to: State,
}

/// Checks one transition against the table.
pub fn check(event: Event, from: State, to: State) -> Result<(), TransitionRefused> {
    if TRANSITIONS.contains(&(event, from, to)) { Ok(()) } else { Err(TransitionRefused { event, from, to }) }
}

/// Whether a transition to `to` waits in `conflict` while a proposed payload awaits a decision:
/// every way back to work does, except the decision itself.
pub fn diverts_while_proposed(event: Event, to: State) -> bool {
    DIVERTED_WHILE_PROPOSED.contains(&to) && !matches!(event, E::Approved | E::Rejected)
}

/// The states from which an event may start, in table order without repeats.
pub fn allowed_from(event: Event) -> Vec<State> {
    let mut states = Vec::new();
    for &(e, from, _) in TRANSITIONS {
        if e == event && !states.contains(&from) {
            states.push(from);
        }
    }
    states
}

/// Every (from, to) pair a store may write: the table plus diverted results.
pub fn allowed_state_pairs() -> Vec<(State, State)> {
    state_pairs_by_maker().into_iter().map(|pair| (pair.from, pair.to)).collect()
}

/// A change of state a store may write, and who may make it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct StatePair {
    pub from: State,
    pub to: State,
    /// Automatic work (workers and sources) makes it.
    pub by_automation: bool,
    /// A person's command makes it.
    pub by_people: bool,
}

/// Every (from, to) pair a store may write, with who may write it: the database's privileges
/// on PostgreSQL follow this (migration 0004 lists the same pairs).
pub fn state_pairs_by_maker() -> Vec<StatePair> {
    let mut pairs: Vec<StatePair> = Vec::new();
    let changes = TRANSITIONS.iter().flat_map(|&(event, from, to)| {
        let diverted = diverts_while_proposed(event, to).then_some((event, from, Conflict));
        std::iter::once((event, from, to)).chain(diverted)
    });
    for (event, from, to) in changes.filter(|&(_, from, to)| from != to) {
        let index = pairs.iter().position(|p| p.from == from && p.to == to).unwrap_or_else(|| {
            pairs.push(StatePair { from, to, by_automation: false, by_people: false });
            pairs.len() - 1
        });
        let pair = &mut pairs[index];
        pair.by_automation |= !event.is_manual();
        pair.by_people |= event.is_made_by_people();
    }
    pairs.sort();
    pairs
}

/// Who makes an event: a source's delivery, a worker (its results and its recoveries), a person's
/// command, or a lookup, which a worker or a person may ask for.
pub fn made_by(event: Event) -> &'static str {
    match event {
        E::Submitted | E::PayloadChanged => "source",
        _ if event.is_manual() => "person",
        _ if event.is_made_by_people() => "worker or person",
        _ => "worker",
    }
}

/// [`TRANSITIONS`] as a Markdown table, one row per entry in table order, for docs/RULES.md (a
/// test keeps the copy there equal to this).
pub fn transitions_markdown() -> String {
    let rows = TRANSITIONS
        .iter()
        .map(|&(event, from, to)| format!("| `{event}` | `{from}` | `{to}` | {} |\n", made_by(event)));
    std::iter::once("| event | from | to | who |\n|---|---|---|---|\n".to_owned()).chain(rows).collect()
}

pub(crate) fn join_states(states: &[State]) -> String {
    match states {
        [] => "no state".to_owned(),
        _ => states.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Event::ALL` lists every event once: a new variant fails this match until it is listed.
    #[test]
    fn every_event_is_listed_once() {
        let position = |event: Event| match event {
            E::Submitted => 0,
            E::PayloadChanged => 1,
            E::Claimed => 2,
            E::Completed => 3,
            E::Failed => 4,
            E::RetryScheduled => 5,
            E::OutcomeUnknown => 6,
            E::Held => 7,
            E::Released => 8,
            E::LateResult => 9,
            E::ClaimRecovered => 10,
            E::LeaseExpired => 11,
            E::LookupFound => 12,
            E::LookupNotFound => 13,
            E::LookupMismatch => 14,
            E::Retry => 15,
            E::ResolvedCompleted => 16,
            E::ResolvedNotWritten => 17,
            E::Cancelled => 18,
            E::Approved => 19,
            E::Rejected => 20,
            E::TakenOver => 21,
            E::Assigned => 22,
            E::LateResultsAcknowledged => 23,
            E::LookedUp => 24,
            E::ChangedAtDestination => 25,
            E::Recreated => 26,
            E::UpdateApplied => 27,
        };
        for (i, event) in Event::ALL.into_iter().enumerate() {
            assert_eq!(position(event), i, "{event:?}");
            let parsed: Event = serde_json::from_value(serde_json::Value::String(event.as_str().to_owned())).unwrap();
            assert_eq!(parsed, event, "the stored name reads back");
        }
    }

    #[test]
    fn terminal_states_have_no_way_out() {
        for &(event, from, to) in TRANSITIONS {
            let contradicting_evidence = (event, from, to) == (E::LateResult, Completed, Conflict);
            assert!(!from.is_terminal() || contradicting_evidence, "{from} must be terminal");
        }
    }

    #[test]
    fn every_non_terminal_state_can_be_left() {
        for state in State::ALL.into_iter().filter(|s| !s.is_terminal()) {
            assert!(TRANSITIONS.iter().any(|&(_, from, to)| from == state && to != state), "{state} is a trap");
        }
    }

    #[test]
    fn refusal_names_the_allowed_states() {
        let refused = check(E::Retry, Completed, Pending).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "retry is not allowed from completed; it is allowed from failed, unknown, held, conflict"
        );
    }

    #[test]
    fn only_ways_back_to_work_divert() {
        assert!(diverts_while_proposed(E::Failed, Failed));
        assert!(diverts_while_proposed(E::TakenOver, Pending));
        assert!(!diverts_while_proposed(E::Completed, Completed));
        assert!(!diverts_while_proposed(E::Rejected, Pending));
        assert!(allowed_state_pairs().contains(&(InProgress, Conflict)));
    }

    /// The lines around the generated table in docs/RULES.md.
    const TABLE_BEGIN: &str = "<!-- BEGIN TRANSITIONS: generated from TRANSITIONS in src/domain/state.rs -->";
    const TABLE_END: &str = "<!-- END TRANSITIONS -->";

    #[test]
    fn the_rules_document_shows_the_transition_table() {
        crate::domain::generated_section::check(
            "docs/RULES.md",
            TABLE_BEGIN,
            TABLE_END,
            &transitions_markdown(),
            "ACTIONLEDGER_UPDATE_RULES",
            "the transition table (TRANSITIONS in src/domain/state.rs)",
            "cargo test --lib the_rules_document_shows_the_transition_table",
        );
    }

    #[test]
    fn who_makes_each_event() {
        assert_eq!(made_by(E::PayloadChanged), "source");
        assert_eq!(made_by(E::Claimed), "worker");
        assert_eq!(made_by(E::LeaseExpired), "worker");
        assert_eq!(made_by(E::LookupNotFound), "worker or person");
        assert_eq!(made_by(E::TakenOver), "person");
    }

    #[test]
    fn states_round_trip_through_text() {
        for state in State::ALL {
            assert_eq!(state.as_str().parse::<State>(), Ok(state));
        }
        assert!("done".parse::<State>().is_err());
    }
}
