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
//! - [`cli`]: the `actionledger` command line.
//! - [`error`]: the error type and the exit code of each kind of error.
//!
//! Leases and every recorded time come from the database's clock, never a worker's.

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
pub mod worker;

pub use error::Error;
pub use ledger::Ledger;
