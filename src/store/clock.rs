//! A store's clock: the database's own, by which every lease and recorded time is measured, given
//! to the store when it is opened. Only a build with the `fault-injection` feature (the test
//! suites') can move it on, so that tests of lease expiry need not sleep; a release build has no
//! way to shift it.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// The database's clock, shifted by what a test moved it on (always nothing in a release build).
/// Clones share one shift: every connection and every clone of a store reads the same time.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    shift_ms: Arc<AtomicI64>,
}

impl Clock {
    /// Names the variable a test build reads at start for how far its clock is moved on, in
    /// milliseconds: a test that moved its own clock on passes it to the processes it starts,
    /// so that every process sharing a SQLite ledger reads one time, as on one host.
    #[cfg(feature = "fault-injection")]
    pub const SHIFT_VARIABLE: &str = "ACTIONLEDGER_TEST_CLOCK_SHIFT_MS";

    /// The database's clock as it is (in a test build, moved on by [`Clock::SHIFT_VARIABLE`]).
    pub fn database() -> Self {
        #[cfg(feature = "fault-injection")]
        if let Some(ms) = std::env::var(Self::SHIFT_VARIABLE).ok().and_then(|v| v.parse::<i64>().ok()) {
            return Self { shift_ms: Arc::new(AtomicI64::new(ms)) };
        }
        Self::default()
    }

    /// How far a test moved this clock on, in milliseconds, as [`Clock::SHIFT_VARIABLE`] takes it.
    #[cfg(feature = "fault-injection")]
    pub fn moved_on_ms(&self) -> String {
        self.shift_ms().to_string()
    }

    /// Milliseconds to add to what the database says.
    pub(crate) fn shift_ms(&self) -> i64 {
        self.shift_ms.load(Ordering::SeqCst)
    }

    /// Moves this clock on by `by`, for tests of lease expiry that must not sleep.
    #[cfg(feature = "fault-injection")]
    pub fn advance(&self, by: std::time::Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.shift_ms.fetch_add(ms, Ordering::SeqCst);
    }
}
