//! The crate's error type and the process exit code each kind of error maps to.

use crate::domain::SubmissionRefused;
use crate::store::StoreError;

/// Exit codes, as the README documents them.
pub mod exit {
    pub const OK: i32 = 0;
    pub const ERROR: i32 = 1;
    pub const USAGE: i32 = 2;
    pub const REFUSED: i32 = 3;
    pub const NOT_FOUND: i32 = 4;
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The submission was invalid; it was recorded as a refused submission.
    #[error(transparent)]
    SubmissionRefused(#[from] SubmissionRefused),
    #[error("no action with key {0}")]
    NotFound(String),
    /// The ledger refused a change: wrong state, changed since read, or similar.
    #[error("{0}")]
    Refused(String),
    /// A worker's claim passed to a newer ownership version; its write changed nothing.
    #[error(
        "the claim on {key} is no longer yours: you hold ownership version {held}, the action is at {current} ({state})"
    )]
    Fenced { key: String, held: i64, current: i64, state: String },
    /// A destination could not be asked, or its answer could not be used.
    #[error("{0}")]
    Destination(String),
    /// Input that is not a submission (an owner name, a reason, a filter) was invalid.
    #[error("{0}")]
    Invalid(String),
}

impl Error {
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Store(e) if e.is_not_permitted() => exit::REFUSED,
            Self::Store(_) | Self::Destination(_) => exit::ERROR,
            Self::Invalid(_) => exit::USAGE,
            Self::SubmissionRefused(_) | Self::Refused(_) | Self::Fenced { .. } => exit::REFUSED,
            Self::NotFound(_) => exit::NOT_FOUND,
        }
    }

    /// The database refused the session's role; waiting or retrying will not change that.
    pub fn is_not_permitted(&self) -> bool {
        matches!(self, Self::Store(e) if e.is_not_permitted())
    }

    pub(crate) fn is_transient(&self) -> bool {
        matches!(self, Self::Store(e) if e.is_transient())
    }
}
