//! The crate's error type and the process exit code each kind of error maps to.

use crate::bench::BenchError;
use crate::config::ConfigError;
use crate::destination::DestinationError;
use crate::domain::{InputError, RetentionError};
use crate::ledger::LedgerError;
use crate::sim_crm::SimCrmError;
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
    /// The simulated CRM could not start.
    #[error(transparent)]
    SimCrm(#[from] SimCrmError),
    /// A benchmark's own check of what the ledger did failed.
    #[error(transparent)]
    Bench(#[from] BenchError),
    /// A `review --script` file that cannot run: a usage error, found before any key is pressed.
    #[error(transparent)]
    Script(#[from] crate::console::keys::ScriptError),
    /// `serve` cannot start: its tokens or an intake's secret cannot be used: a usage error.
    #[error(transparent)]
    Serve(#[from] crate::serve::ServeError),
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

    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Ledger(LedgerError::Store(e)) if e.is_not_permitted() => exit::REFUSED,
            Self::Ledger(LedgerError::SubmissionRefused(_) | LedgerError::Refused(_) | LedgerError::Fenced { .. }) => {
                exit::REFUSED
            }
            Self::Ledger(
                LedgerError::NotFound(_)
                | LedgerError::Store(StoreError::Missing { .. } | StoreError::LedgerInPublic { .. }),
            ) => exit::NOT_FOUND,
            // The user's input: a sim-crm state file that cannot be used, a command that needed a
            // --config declaring the action's destination, a destination whose declared headers
            // or method cannot be used, a PostgreSQL schema that cannot hold the ledger.
            Self::SimCrm(e) if e.is_usage() => exit::USAGE,
            Self::Ledger(LedgerError::Store(StoreError::InvalidSchema { .. }))
            | Self::Config(_)
            | Self::Input(_)
            | Self::Retention(_)
            | Self::Invalid(_)
            | Self::Script(_)
            | Self::Serve(_)
            | Self::Destination(
                DestinationError::NotConfigured { .. }
                | DestinationError::MissingEnv { .. }
                | DestinationError::HeaderValue { .. }
                | DestinationError::HeaderName { .. }
                | DestinationError::Method { .. },
            ) => exit::USAGE,
            Self::Ledger(LedgerError::Store(_))
            | Self::Destination(_)
            | Self::Io { .. }
            | Self::Task(_)
            | Self::SimCrm(_)
            | Self::Bench(_) => exit::ERROR,
        }
    }

    /// The database refused the session's role; waiting or retrying will not change that.
    pub fn is_not_permitted(&self) -> bool {
        matches!(self, Self::Ledger(e) if e.is_not_permitted())
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
            (Error::from(SimCrmError::Address(io())), exit::ERROR),
            (Error::from(SimCrmError::ReadState { path: "state.json".into(), source: io() }), exit::USAGE),
            (Error::from(BenchError::WorkerExitedAtOnce), exit::ERROR),
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
