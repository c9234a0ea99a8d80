//! The ledger's figures at one moment (states, stale claims, how long uncertain actions have
//! waited), decided once here for `stats`, the worker's metrics and any other front end.

use crate::domain::{State, Timestamp};
use crate::store::{StateFigures, StoreError};
use serde::ser::SerializeMap as _;

/// The ledger's figures, read at database time `at`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LedgerStats {
    /// Database time the figures were read at.
    pub at: Timestamp,
    /// Every state with its count, zero included.
    pub states: StateCounts,
    /// Every action, whatever its state.
    pub total: i64,
    /// Claims whose lease ran out without a result (rule 5 recovers them; none should stay).
    pub stale_claims: i64,
    /// Seconds since the least recently changed `pending` action last changed (was submitted,
    /// or put back to wait out a backoff): how long the queue's oldest work has waited; `None`
    /// when nothing is pending.
    pub oldest_pending_seconds: Option<i64>,
    /// Seconds since the least recently changed `unknown` action last changed; `None` when no
    /// action is unknown.
    pub oldest_unknown_seconds: Option<i64>,
    /// Likewise for `held`.
    pub oldest_held_seconds: Option<i64>,
    /// Likewise for `conflict`.
    pub oldest_conflict_seconds: Option<i64>,
    /// Pending actions that wait on an action that is cancelled or failed: they run only once a
    /// person moves that action on, or cancels them (domain/blocked.rs).
    pub blocked: i64,
}

/// A count for every state, in the order of [`State::ALL`]; written as one JSON object
/// (`{"pending": 3, ...}`), so that a script reads `.states.unknown`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateCounts(pub Vec<(State, i64)>);

impl StateCounts {
    pub fn get(&self, state: State) -> i64 {
        self.0.iter().find(|(s, _)| *s == state).map_or(0, |(_, n)| *n)
    }
}

impl serde::Serialize for StateCounts {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (state, count) in &self.0 {
            map.serialize_entry(state.as_str(), count)?;
        }
        map.end()
    }
}

impl LedgerStats {
    /// The figures from what the store read per state at `now`, and the count of blocked actions.
    pub(super) fn from_figures(now: Timestamp, figures: &[StateFigures], blocked: i64) -> Self {
        let of = |state: State| figures.iter().find(|f| f.state == state);
        let age = |state: State| of(state).and_then(|f| f.oldest_change).map(|t| (now - t).num_seconds().max(0));
        Self {
            at: now,
            states: StateCounts(State::ALL.into_iter().map(|s| (s, of(s).map_or(0, |f| f.count))).collect()),
            total: figures.iter().map(|f| f.count).sum(),
            stale_claims: figures.iter().map(|f| f.expired_leases).sum(),
            oldest_pending_seconds: age(State::Pending),
            oldest_unknown_seconds: age(State::Unknown),
            oldest_held_seconds: age(State::Held),
            oldest_conflict_seconds: age(State::Conflict),
            blocked,
        }
    }
}

/// How long a destination's longest-waiting claimable action has been claimable: its queue's
/// latency, which grows when its workers are stopped, too few or held back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueWait {
    /// `None` for actions submitted without a destination.
    pub destination: Option<String>,
    pub seconds: i64,
}

/// Why the ledger cannot serve a worker now.
#[derive(Debug, thiserror::Error)]
pub enum NotReady {
    #[error("the database does not answer: {0}")]
    Unreachable(#[source] StoreError),
    #[error("the database did not answer within {seconds}s")]
    TimedOut { seconds: u64 },
    #[error("the ledger schema is not current: run `actionledger migrate`")]
    SchemaBehind,
    #[error("a newer build has migrated the ledger schema")]
    SchemaNewer,
    /// The SQLite ledger file was deleted or replaced under this process.
    #[error("{0}")]
    FileReplaced(#[source] StoreError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::record::from_millis;

    #[test]
    fn figures_become_counts_ages_and_stale_claims() {
        let now = from_millis(1_000_000);
        let figures = [
            StateFigures {
                state: State::Unknown,
                count: 2,
                oldest_change: Some(from_millis(400_000)),
                expired_leases: 0,
            },
            StateFigures { state: State::InProgress, count: 3, oldest_change: Some(from_millis(0)), expired_leases: 1 },
        ];
        let stats = LedgerStats::from_figures(now, &figures, 4);
        assert_eq!(stats.states.get(State::Unknown), 2);
        assert_eq!(stats.states.get(State::Pending), 0);
        assert_eq!(stats.states.0.len(), State::ALL.len());
        assert_eq!((stats.total, stats.stale_claims), (5, 1));
        assert_eq!(stats.oldest_unknown_seconds, Some(600));
        assert_eq!(stats.oldest_held_seconds, None);
        let json = serde_json::to_value(&stats).unwrap();
        assert_eq!(json["states"]["in_progress"], 3);
        assert_eq!(json["oldest_conflict_seconds"], serde_json::Value::Null);
        assert_eq!(json["blocked"], 4);
    }
}
