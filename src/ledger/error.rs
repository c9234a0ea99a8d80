//! What a ledger operation can answer instead of its result. It knows only the store and the
//! domain: the front ends wrap it in [`crate::error::Error`] with their own kinds.

use crate::domain::{Refusal, SubmissionRefused, TransitionRefused};
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The submission was invalid; it was recorded as a refused submission.
    #[error(transparent)]
    SubmissionRefused(#[from] SubmissionRefused),
    #[error("no action with key {0}")]
    NotFound(String),
    /// The ledger refused a change: wrong state, changed since read, or similar.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// A worker's claim passed to a newer ownership version; its write changed nothing.
    #[error(
        "the claim on {key} is no longer yours: you hold ownership version {held}, the action is at {current} ({state})"
    )]
    Fenced { key: String, held: i64, current: i64, state: String },
}

impl LedgerError {
    /// The database refused the session's role; waiting or retrying will not change that.
    pub fn is_not_permitted(&self) -> bool {
        matches!(self, Self::Store(e) if e.is_not_permitted())
    }

    /// The database could not be reached or stopped answering ([`StoreError::is_unreachable`]).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Self::Store(e) if e.is_unreachable())
    }

    /// Worth running the whole transaction again: a serialization failure, a deadlock, a busy
    /// database.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Store(e) if e.is_transient())
    }
}

impl From<TransitionRefused> for LedgerError {
    fn from(refused: TransitionRefused) -> Self {
        Self::Refused(Refusal::Transition(refused))
    }
}
