//! The test kit: a simulated CRM that counts its real effects, a throwaway PostgreSQL, the crash
//! switch, the benchmark harness and the demonstration built on them.
//!
//! None of it is product API. The binary carries the simulated CRM, the demo and the benchmarks
//! for its `sim-crm`, `demo` and `bench` commands; the crash switch acts only in builds with the
//! `fault-injection` feature, and the `testkit` feature makes this module public for the test
//! suites, benchmarks and examples (they enable both through the crate's dev-dependency on itself).
//! A release build has neither.

// Without the feature only what the binary's commands use is reached; the rest serves the test
// suites.
#![cfg_attr(not(feature = "testkit"), allow(dead_code, unused_imports))]

pub mod bench;
pub mod demo;
pub mod sim_crm;
pub mod throwaway_pg;

/// The crash switch's variable and points, for the crash tests. The switch itself sits at the
/// bottom of the crate, where the ledger, the destinations and the worker reach it, and exists
/// only with the `fault-injection` feature.
#[cfg(feature = "fault-injection")]
pub mod faults {
    pub use crate::faults::{AFTER_CLAIM, AFTER_RESPONSE, ALL, BEFORE_SEND, DURING_HEARTBEAT, DURING_RECORD, VARIABLE};
}
