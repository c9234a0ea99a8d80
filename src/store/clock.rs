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
    /// The database's clock as it is.
    pub fn database() -> Self {
        Self::default()
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
