//! `actionledger wait KEY --for STATE` on both stores: it returns once the action reaches a state
//! waited for (on PostgreSQL, a state that needs a person is heard by notification, well before
//! the next read), reports the state it was left in when its timeout runs out, and exits 4 for a
//! key the ledger does not hold.

use crate::support::process::command;
use crate::support::{TestDb, order};
use actionledger::store::Store;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

conformance!(
    wait_returns_once_the_action_reaches_a_state_waited_for,
    wait_hears_a_state_that_needs_a_person_without_waiting_for_its_next_read_on_postgresql,
    wait_times_out_with_the_state_the_action_is_in,
    wait_for_a_key_the_ledger_does_not_hold_exits_4,
);

const KEY: &str = "acme:order:ORD-7:create-task";
/// How soon after the change the waiting command must have ended.
const WOKEN_WITHIN: Duration = Duration::from_secs(5);

async fn submitted<S: Store>(db: &TestDb<S>) -> tempfile::TempDir {
    db.ledger.submit(&order(KEY, r#"{"qty":1}"#)).await.unwrap();
    tempfile::tempdir().unwrap()
}

fn run<S: Store>(db: &TestDb<S>, dir: &std::path::Path, args: &[&str]) -> Output {
    command(dir, &db.url).args(args).output().unwrap()
}

async fn wait_returns_once_the_action_reaches_a_state_waited_for<S: Store>(db: TestDb<S>) {
    let dir = submitted(&db).await;
    let already = run(&db, dir.path(), &["wait", KEY, "--for", "pending"]);
    assert_eq!(already.status.code(), Some(0), "{already:?}");
    assert_eq!(String::from_utf8_lossy(&already.stdout).trim(), format!("{KEY}: pending"));

    let waiting = Waiting::start(&db, dir.path(), &["--for", "completed,cancelled", "--timeout", "2m", "--json"]).await;
    let cancel = run(&db, dir.path(), &["cancel", KEY, "--owner", "ana", "--reason", "order withdrawn"]);
    assert_eq!(cancel.status.code(), Some(0), "{cancel:?}");
    let document = waiting.ended_soon().await;
    assert_eq!(document["action"]["key"], KEY);
    assert_eq!(document["action"]["state"], "cancelled", "{document}");
}

/// On PostgreSQL the interval between reads is a minute: only the notification can end the wait
/// in time. SQLite has none, and is read every 100ms.
async fn wait_hears_a_state_that_needs_a_person_without_waiting_for_its_next_read_on_postgresql<S: Store>(
    db: TestDb<S>,
) {
    let dir = submitted(&db).await;
    let interval = if db.url.starts_with("postgres") { "1m" } else { "100ms" };
    let waiting = Waiting::start(&db, dir.path(), &["--for", "conflict", "--interval", interval, "--json"]).await;
    let changed = actionledger::domain::RawSubmission { source_version: Some(2), ..order(KEY, r#"{"qty":9}"#) };
    db.ledger.submit(&changed).await.unwrap();
    let document = waiting.ended_soon().await;
    assert_eq!(document["action"]["state"], "conflict", "{document}");
}

/// A `wait` running in the background.
struct Waiting {
    child: std::process::Child,
}

impl Waiting {
    async fn start<S: Store>(db: &TestDb<S>, dir: &std::path::Path, args: &[&str]) -> Self {
        let mut child = command(dir, &db.url)
            .args(["wait", KEY])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Long enough for it to have read the action once and to be waiting.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(child.try_wait().unwrap().is_none(), "wait returned before the action changed");
        Self { child }
    }

    /// Waits for it to exit 0 within [`WOKEN_WITHIN`]; returns the document it printed.
    async fn ended_soon(self) -> serde_json::Value {
        let Self { child: mut waiting } = self;
        let changed = Instant::now();
        let exited = loop {
            if let Some(status) = waiting.try_wait().unwrap() {
                break status;
            }
            if changed.elapsed() > WOKEN_WITHIN {
                waiting.kill().unwrap();
                let output = waiting.wait_with_output().unwrap();
                panic!("wait still running {WOKEN_WITHIN:?} after the action was cancelled: {output:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let output = waiting.wait_with_output().unwrap();
        assert_eq!(exited.code(), Some(0), "{output:?}");
        serde_json::from_slice(&output.stdout).unwrap()
    }
}

async fn wait_times_out_with_the_state_the_action_is_in<S: Store>(db: TestDb<S>) {
    let dir = submitted(&db).await;
    let started = Instant::now();
    let timed_out = run(&db, dir.path(), &["wait", KEY, "--for", "completed", "--timeout", "700ms"]);
    assert!(started.elapsed() >= Duration::from_millis(700), "returned before its timeout");
    assert_eq!(timed_out.status.code(), Some(6), "{timed_out:?}");
    let said = String::from_utf8_lossy(&timed_out.stderr);
    assert!(said.contains(&format!("{KEY} is pending, not completed")), "{said}");
    assert!(timed_out.stdout.is_empty(), "{timed_out:?}");

    let as_json = run(&db, dir.path(), &["wait", KEY, "--for", "completed", "--timeout", "300ms", "--json"]);
    assert_eq!(as_json.status.code(), Some(6), "{as_json:?}");
    let document: serde_json::Value = serde_json::from_slice(&as_json.stdout).unwrap();
    assert_eq!(document["action"]["state"], "pending", "{document}");
}

async fn wait_for_a_key_the_ledger_does_not_hold_exits_4<S: Store>(db: TestDb<S>) {
    let dir = submitted(&db).await;
    let missing = run(&db, dir.path(), &["wait", "acme:order:nope", "--for", "completed", "--json"]);
    assert_eq!(missing.status.code(), Some(4), "{missing:?}");
    let error: serde_json::Value = serde_json::from_slice(&missing.stdout).unwrap();
    assert_eq!(error["exit_code"], 4, "{error}");
    let unknown_state = run(&db, dir.path(), &["wait", KEY, "--for", "finished"]);
    assert_eq!(unknown_state.status.code(), Some(2), "{unknown_state:?}");
}
