//! actionledger: a durable ledger that lets automations perform each external action once.
//!
//! Every intended action gets a stable key and a durable record. Exactly one worker at a time may
//! act on it (an atomic claim with a lease, fenced by an ownership version); an uncertain outcome
//! is never guessed but kept for reconciliation and for a named person to decide.
//!
//! The layout of the crate:
//!
//! - [`domain`]: plain data and pure rules, no I/O. Action keys, payloads and their fingerprints,
//!   states and the one transition table, records (attempts, evidence, audit entries), input
//!   validation, and the escaping of untrusted text.
//! - [`store`]: one store interface with a SQLite and a PostgreSQL implementation. Stores read and
//!   write rows, conditionally and inside short transactions; they decide nothing.
//! - [`ledger`]: every operation (submit, claim, heartbeat, attempts and results, recovery of
//!   expired claims, manual commands, queries), written once over any store.
//! - [`config`], [`destination`]: destinations declared in `actionledger.toml`, with the
//!   capabilities (idempotency keys, lookup, fencing) that decide recovery; templates; the HTTP
//!   client and how each outcome is classified.
//! - [`worker`]: claims, performs, retries, settles uncertain outcomes by lookup, recovers expired
//!   claims. [`reconcile`] compares the ledger with a destination.
//! - [`console`]: the review console (Elm-shaped: pure update, effects performed by a driver,
//!   views one file per pane) and its scripted mode.
//! - [`sim_crm`]: a simulated CRM that counts its real effects, for demos and tests; [`demo`] puts
//!   everything together; [`faults`] is the crash switch the crash tests use;
//!   [`throwaway_pg`] starts a private PostgreSQL for tests and benchmarks.
//! - [`bench`]: throughput against the raw-SQL limit, measured in the same run.
//! - [`cli`]: the `actionledger` command line.
//! - [`error`]: the error type and the exit code of each kind of error.
//!
//! Leases and every recorded time come from the database's clock, never a worker's.

pub mod bench;
pub mod cli;
pub mod config;
pub mod console;
pub mod demo;
pub mod destination;
pub mod domain;
pub mod error;
pub mod faults;
pub mod ledger;
pub mod reconcile;
pub mod sim_crm;
pub mod store;
pub mod throwaway_pg;
pub mod worker;

pub use error::Error;
pub use ledger::Ledger;
