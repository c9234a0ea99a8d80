//! Failure injection for crash tests. Off unless the environment variable
//! `ACTIONLEDGER_CRASH_AT` names a crash point, in which case the process kills itself with
//! SIGKILL the first time it reaches that point: no destructor, no flush, as a power cut would.
//! Only builds with the `fault-injection` feature (the test suites', through the crate's
//! dev-dependency on itself) have the switch: in `cargo build`, a release build or `cargo install`
//! every crash point is an empty function and the variable is never read, so no environment
//! variable can kill a worker.

#[cfg(feature = "fault-injection")]
use std::sync::OnceLock;

#[cfg(feature = "fault-injection")]
pub const VARIABLE: &str = "ACTIONLEDGER_CRASH_AT";

/// After a claim committed, before anything else.
pub const AFTER_CLAIM: &str = "after_claim";
/// After the attempt was recorded, before the request leaves.
pub const BEFORE_SEND: &str = "before_send";
/// After the destination answered, before the ledger records the result.
pub const AFTER_RESPONSE: &str = "after_response";
/// Inside a lease renewal, before it commits.
pub const DURING_HEARTBEAT: &str = "during_heartbeat";
/// Inside the transaction that records a result, after its writes and before it commits.
pub const DURING_RECORD: &str = "during_record";
/// After results were queued for the group commit, before their transaction began.
pub const RESULT_QUEUED: &str = "result_queued";

/// Every crash point, for the crash tests.
#[cfg(feature = "fault-injection")]
pub const ALL: [&str; 6] = [AFTER_CLAIM, BEFORE_SEND, AFTER_RESPONSE, RESULT_QUEUED, DURING_HEARTBEAT, DURING_RECORD];

#[cfg(feature = "fault-injection")]
fn armed() -> Option<&'static str> {
    static ARMED: OnceLock<Option<String>> = OnceLock::new();
    ARMED.get_or_init(|| std::env::var(VARIABLE).ok().filter(|v| !v.is_empty())).as_deref()
}

/// Kills this process at `point` if the switch names it.
#[cfg(feature = "fault-injection")]
pub fn crash_point(point: &str) {
    if armed() == Some(point) {
        eprintln!("crash point {point}: killing this process with SIGKILL");
        let _ = std::process::Command::new("kill").args(["-9", &std::process::id().to_string()]).status();
        // SIGKILL cannot be caught; should `kill` be missing, still stop dead.
        std::process::abort();
    }
}

/// Without the feature there is no switch.
#[cfg(not(feature = "fault-injection"))]
#[inline]
pub fn crash_point(_point: &str) {}
