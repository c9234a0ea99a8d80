//! The test kit: a throwaway PostgreSQL for the test suites and benchmarks, and the crash
//! switch's points for the crash tests.
//!
//! None of it is product API, and none of it is in a release build: the module exists only with
//! the `testkit` feature, which the test suites, benchmarks and examples enable through the crate's
//! dev-dependency on itself (with `fault-injection`, which arms the crash switch). What the binary
//! ships to users, the simulated CRM, the demo and the benchmarks, lives beside the other front
//! ends ([`crate::sim_crm`], [`crate::demo`], [`crate::bench`]).

pub mod throwaway_pg;

/// The crash switch's variable and points, for the crash tests. The switch itself sits at the
/// bottom of the crate, where the ledger, the destinations and the worker reach it, and exists
/// only with the `fault-injection` feature.
#[cfg(feature = "fault-injection")]
pub mod faults {
    pub use crate::faults::{
        AFTER_CLAIM, AFTER_RESPONSE, ALL, BEFORE_SEND, DURING_HEARTBEAT, DURING_RECORD, RESULT_QUEUED, VARIABLE,
    };
}
