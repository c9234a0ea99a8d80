//! actionledger: a durable ledger that lets automations perform each external action once.
//!
//! Every intended action gets a stable key and a durable record. Exactly one worker at a time may
//! act on it (an atomic claim with a lease, fenced by an ownership version); an uncertain outcome
//! is never guessed but kept for reconciliation and for a named person to decide.
//!
//! The layout of the crate. Dependencies point one way, down this list: a module uses only those
//! above it (`tests/it/layering.rs` fails when an import points up; the rules the code cites are
//! in `docs/RULES.md`).
//!
//! - `faults`: the crash switch, at the bottom so that every layer can crash where things happen.
//!   It does nothing without the `fault-injection` feature (which also gates moving a store's
//!   clock on). Beside it `testkit`: a throwaway PostgreSQL and the crash points, for the test
//!   suites and benchmarks. Not product API and not in a release build: it exists only with the
//!   `testkit` feature that the tests enable.
//! - [`domain`]: plain data and pure rules, no I/O. Action keys, payloads and their fingerprints,
//!   states and the one transition table, what a person's command will do and why it may be
//!   refused, the capabilities a destination declares and what they make safe, records (attempts,
//!   evidence, audit entries, lookups), input validation, and the escaping of untrusted text.
//! - [`metrics`]: the process's Prometheus counters and gauges, low so that the ledger and the
//!   worker count where things happen.
//! - [`store`]: one store interface, written once over SQLite and PostgreSQL: named statements,
//!   row mapping, the clock a store is opened with. Stores read and write rows, conditionally and
//!   inside short transactions; they decide nothing.
//! - [`ledger`]: every operation and every decision (submit, claim, heartbeat, attempts and
//!   results, recovery of expired claims, manual commands, purge, queries), a file each, written
//!   once over any store and made inside its transaction, with its own error type. Front ends ask
//!   it; none decides.
//! - [`template`], [`config`], [`destination`]: `{{placeholder}}` templates; destinations and
//!   webhook intakes declared in `actionledger.toml`; the HTTP client each destination is reached
//!   with, its declared capabilities (handed to the ledger) and how each outcome is classified.
//! - [`error`]: what a front end can answer, wrapping the errors of the layers above, and the
//!   kind (and exit code) of each. A front end's own errors come in with the kind it gives them.
//!   Beside it [`connections`]: the caps on connections and the time to send request headers that
//!   every listening socket (`serve`, the metrics endpoint) is held by.
//! - [`health`], [`reconcile`], [`document`]: liveness, readiness and `/metrics` for
//!   `worker --metrics-addr`; what a destination holds for an action, judged and settled one way
//!   for every caller, and the comparison of the ledger with a destination; the JSON documents
//!   the command line and the HTTP API both answer with.
//! - The front ends, each over the ledger: [`worker`] claims, performs, retries, settles uncertain
//!   outcomes by lookup, recovers expired claims; [`console`] is the review console (Elm-shaped:
//!   pure update, effects performed by a driver, one view file per part of the screen) and its
//!   scripted mode; [`serve`] is the HTTP API (submissions, webhook intake, reads, manual
//!   commands, the register) behind role tokens.
//! - The tools the binary ships: [`sim_crm`], a simulated CRM that counts its real effects;
//!   [`bench`], ledger throughput against the raw-SQL limit in the same run; [`demo`], the
//!   self-contained demonstration over all of the above.
//! - [`cli`]: the `actionledger` command line, one file per command group. Logs are `tracing`
//!   events, set up once here (`cli::logging`).
//!
//! Leases and every recorded time come from the database's clock, never a worker's.

#![deny(clippy::unwrap_used)]

mod faults;
#[cfg(feature = "testkit")]
pub mod testkit;

pub mod domain;

pub mod metrics;
pub mod store;

pub mod ledger;

pub mod template;

pub mod config;

pub mod destination;

pub mod connections;
pub mod error;

pub mod document;
pub mod health;
pub mod reconcile;

pub mod console;
pub mod serve;
pub mod worker;

pub mod sim_crm;

pub mod bench;
pub mod demo;

pub mod cli;

pub use error::Error;
pub use ledger::Ledger;
