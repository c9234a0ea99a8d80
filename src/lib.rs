//! actionledger: a durable ledger that lets automations perform each external action once.
//!
//! Every intended action gets a stable key and a durable record. Exactly one worker at a time may
//! act on it (an atomic claim with a lease, fenced by an ownership version); an uncertain outcome
//! is never guessed but kept for reconciliation and for a named person to decide.
//!
//! The layout of the crate. Dependencies point one way, down this list: a module uses only those
//! above it (the rules the code cites are in `docs/RULES.md`).
//!
//! - [`domain`]: plain data and pure rules, no I/O. Action keys, payloads and their fingerprints,
//!   states and the one transition table, what a person's command will do and why it may be
//!   refused, the capabilities a destination declares and what they make safe, records (attempts,
//!   evidence, audit entries, lookups), input validation, and the escaping of untrusted text.
//! - [`store`]: one store interface, written once over SQLite and PostgreSQL: named statements,
//!   row mapping, the clock a store is opened with. Stores read and write rows, conditionally and
//!   inside short transactions; they decide nothing.
//! - [`ledger`]: every operation and every decision (submit, claim, heartbeat, attempts and
//!   results, recovery of expired claims, manual commands, queries), written once over any store
//!   and made inside its transaction, with its own error type. Front ends ask it; none decides.
//! - [`config`], [`destination`]: destinations declared in `actionledger.toml`, their declared
//!   capabilities (handed to the ledger), templates, the HTTP client and how each outcome is
//!   classified.
//! - [`metrics`]: the process's Prometheus counters and gauges, at the bottom of the crate beside
//!   `faults` so that the ledger and the worker count where things happen; [`health`] serves them
//!   with liveness and readiness for `worker --metrics-addr`, over the ledger. Logs are `tracing`
//!   events, set up once by the binary (`cli::logging`).
//! - [`error`]: what a front end can answer, wrapping the ledger's errors, and the exit code of
//!   each kind.
//! - [`reconcile`]: what a destination holds for an action, judged and settled one way for every
//!   caller; and the comparison of the ledger with a destination.
//! - The front ends, each over the ledger: [`worker`] claims, performs, retries, settles uncertain
//!   outcomes by lookup, recovers expired claims; [`console`] is the review console (Elm-shaped:
//!   pure update, effects performed by a driver, one view file per part of the screen) and its
//!   scripted mode; [`cli`] is the `actionledger` command line, one file per command group.
//! - `testkit`: the simulated CRM, a throwaway PostgreSQL, the benchmarks and the demo, over all of
//!   the above. Not product API: public only with the `testkit` feature that the tests enable. The
//!   crash switch it drives sits at the bottom of the crate (`faults`), and does nothing without
//!   the separate `fault-injection` feature (which also gates moving a store's clock on). The one
//!   edge against the direction: [`error`] names the kit's two error kinds, which the `sim-crm` and
//!   `bench` commands report.
//!
//! Leases and every recorded time come from the database's clock, never a worker's.

pub mod cli;
pub mod config;
pub mod console;
pub mod destination;
pub mod document;
pub mod domain;
pub mod error;
mod faults;
pub mod health;
pub mod ledger;
pub mod metrics;
pub mod reconcile;
pub mod serve;
pub mod store;
#[cfg(feature = "testkit")]
pub mod testkit;
#[cfg(not(feature = "testkit"))]
mod testkit;
pub mod worker;

// The test kit's modules by their short names, for the commands and crash points that use them.
use testkit::{bench, demo, sim_crm, throwaway_pg};

pub use error::Error;
pub use ledger::Ledger;
