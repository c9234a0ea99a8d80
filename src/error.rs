//! The crate's error type, the kind each error is answered as, and the exit code of each kind.
//!
//! The layers below the front ends have their variants here. A front end's own errors (a console
//! script, `serve`'s tokens, the simulated CRM, a benchmark's check) live with the front end and
//! come in as [`Error::Frontend`] with the kind their front end gives them, so that this module
//! names nothing above it.

use crate::config::ConfigError;
use crate::destination::DestinationError;
use crate::domain::{InputError, RetentionError};
use crate::ledger::LedgerError;
use crate::store::StoreError;

/// Exit codes, as the README documents them.
pub mod exit {
    pub const OK: i32 = 0;
    pub const ERROR: i32 = 1;
    pub const USAGE: i32 = 2;
    pub const REFUSED: i32 = 3;
    pub const NOT_FOUND: i32 = 4;
    /// `migrate --status`: the ledger's schema is not the one this build expects.
    pub const NOT_CURRENT: i32 = 5;
    /// `wait --timeout`: the time ran out before the action reached a state waited for.
    pub const TIMED_OUT: i32 = 6;
}

/// How a front end answers an error: the same classification everywhere (the command line's exit
/// code, the console's result line and a script's exit code, the HTTP API's status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Something failed that is not the user's input: a database, a destination, a file.
    Error,
    /// The input cannot be used: an option, a configuration, a name, a script.
    Usage,
    /// The ledger refused the change: a rule, a stale version, a fenced claim, a role's limits.
    Refused,
    /// No such action.
    NotFound,
}

impl Kind {
    /// How a front end answers what the ledger answered.
    pub fn of_ledger(error: &LedgerError) -> Self {
        match error {
            LedgerError::Store(e) if e.is_not_permitted() => Self::Refused,
            LedgerError::SubmissionRefused(_) | LedgerError::Refused(_) | LedgerError::Fenced { .. } => Self::Refused,
            LedgerError::NotFound(_)
            | LedgerError::Store(StoreError::Missing { .. } | StoreError::LedgerInPublic { .. }) => Self::NotFound,
            // A PostgreSQL schema that cannot hold the ledger: the user's input.
            LedgerError::Store(StoreError::InvalidSchema { .. }) => Self::Usage,
            LedgerError::Store(_) => Self::Error,
        }
    }

    pub fn exit_code(self) -> i32 {
        match self {
            Self::Error => exit::ERROR,
            Self::Usage => exit::USAGE,
            Self::Refused => exit::REFUSED,
            Self::NotFound => exit::NOT_FOUND,
        }
    }
}

/// A front end's own error, with the kind its front end answers it as.
#[derive(Debug)]
pub struct FrontendError {
    kind: Kind,
    error: Box<dyn std::error::Error + Send + Sync>,
}

impl FrontendError {
    pub fn new(kind: Kind, error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self { kind, error: Box::new(error) }
    }

    /// The error as its front end made it, to tell its kinds apart.
    pub fn inner(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.error
    }
}

impl std::fmt::Display for FrontendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for FrontendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// What the ledger answered: a refusal, a fenced claim, a missing action, a database error.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// A destination could not be asked, or its answer could not be used.
    #[error(transparent)]
    Destination(#[from] DestinationError),
    /// The configuration cannot be used: the user's input, a usage error.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A name, label or reason a person gave was invalid: a usage error.
    #[error(transparent)]
    Input(#[from] InputError),
    /// A purge that cannot be run as asked (a zero window, a state that is not final): a usage
    /// error.
    #[error(transparent)]
    Retention(#[from] RetentionError),
    /// A file, socket, terminal or child process failed. Not the user's input: exit 1.
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    /// A background task panicked or was cancelled.
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
    /// A front end's own error (a `review --script` file, `serve`'s tokens, the simulated CRM's
    /// state file, a benchmark's check), with the kind its front end gave it.
    #[error(transparent)]
    Frontend(#[from] FrontendError),
    /// A usage error: an option, a combination of options or an argument the command cannot
    /// take.
    #[error("{0}")]
    Invalid(String),
}

impl Error {
    /// An I/O failure, with what was being done: `cannot read FILE`, `cannot draw on the terminal`.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io { what: what.into(), source }
    }

    /// How every front end answers this error.
    pub fn kind(&self) -> Kind {
        match self {
            Self::Ledger(e) => Kind::of_ledger(e),
            Self::Frontend(e) => e.kind,
            // The user's input: a command that needed a --config declaring the action's
            // destination, a destination whose declared headers or method cannot be used.
            Self::Config(_)
            | Self::Input(_)
            | Self::Retention(_)
            | Self::Invalid(_)
            | Self::Destination(
                DestinationError::NotConfigured { .. }
                | DestinationError::MissingEnv { .. }
                | DestinationError::HeaderValue { .. }
                | DestinationError::HeaderName { .. }
                | DestinationError::Method { .. },
            ) => Kind::Usage,
            Self::Destination(_) | Self::Io { .. } | Self::Task(_) => Kind::Error,
        }
    }

    pub fn exit_code(&self) -> i32 {
        self.kind().exit_code()
    }

    /// The ledger's refusal, if that is what this error is.
    pub fn refusal(&self) -> Option<&crate::domain::Refusal> {
        match self {
            Self::Ledger(LedgerError::Refused(refusal)) => Some(refusal),
            _ => None,
        }
    }

    /// The database refused the session's role; waiting or retrying will not change that.
    pub fn is_not_permitted(&self) -> bool {
        matches!(self, Self::Ledger(e) if e.is_not_permitted())
    }

    /// The database could not be reached or stopped answering; asking again once it is back may
    /// succeed.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Self::Ledger(e) if e.is_unreachable())
    }
}

// A store error outside a ledger operation (opening the database) is reported as the ledger's,
// so that each kind has one place.
impl From<StoreError> for Error {
    fn from(error: StoreError) -> Self {
        Self::Ledger(error.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{ActionKey, Person, Refusal, State};

    #[test]
    fn the_exit_code_follows_the_kind() {
        let io = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let refusal = Refusal::RepeatedKey { key: ActionKey::parse("k").unwrap() };
        let cases = [
            (Error::from(LedgerError::from(refusal)), exit::REFUSED),
            (Error::from(Person::parse("").unwrap_err()), exit::USAGE),
            (Error::from(crate::config::Config::parse("[worker]\nlease = \"0s\"").unwrap_err()), exit::USAGE),
            (Error::from(DestinationError::LookupStatus { status: 500 }), exit::ERROR),
            (Error::io("cannot draw on the terminal", io()), exit::ERROR),
            (Error::from(FrontendError::new(Kind::Usage, io())), exit::USAGE),
            (Error::from(FrontendError::new(Kind::Error, io())), exit::ERROR),
            (Error::Invalid("--limit is 0; give 1 to 1000".to_owned()), exit::USAGE),
            (Error::from(RetentionError::Unsettled { state: State::Unknown }), exit::USAGE),
            (Error::from(LedgerError::NotFound("k".to_owned())), exit::NOT_FOUND),
            (Error::from(StoreError::LedgerInPublic { ledger: "l".into(), schema: "s".into() }), exit::NOT_FOUND),
            (
                Error::from(StoreError::InvalidSchema {
                    name: "A".into(),
                    problem: crate::store::SchemaProblem::NotAName,
                }),
                exit::USAGE,
            ),
            (
                Error::from(StoreError::NewerSchema {
                    ledger: "l".into(),
                    version: 9,
                    description: "d".into(),
                    known: 8,
                }),
                exit::ERROR,
            ),
            (
                Error::from(LedgerError::from(
                    crate::domain::state::check(crate::domain::Event::Retry, State::Completed, State::Pending)
                        .unwrap_err(),
                )),
                exit::REFUSED,
            ),
        ];
        for (error, code) in cases {
            assert_eq!(error.exit_code(), code, "{error:?}");
        }
    }

    #[test]
    fn an_io_error_says_what_was_being_done() {
        let error = Error::io("cannot write memory.toml", std::io::Error::other("disk full"));
        assert_eq!(error.to_string(), "cannot write memory.toml: disk full");
    }
}
