//! What the ledger must never lose sight of: a re-delivery naming another `after`, a cancellation
//! of an action that may have been written and the attempts that show it, a SQLite ledger file
//! deleted under a running worker, and a SQLite writer whose clock disagrees with the ledger.

use crate::support::{self, TestDb, person_request};
use actionledger::Ledger;
use actionledger::console::{ConsoleOptions, ScriptedConsole};
use actionledger::destination::Destinations;
use actionledger::domain::{
    ActionKey, Evidence, ManualCommand, Person, PurgeRequest, RawSubmission, Reason, Refusal, State, SubmitOutcome,
    WayOut,
};
use actionledger::ledger::{LedgerError, ManualRequest, NotReady, Outcome, Recorded, Report};
use actionledger::store::{SqliteStore, Store, StoreError};
use actionledger::worker::{self, WorkerOptions};
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(30);
const DAY: Duration = Duration::from_hours(24);

conformance!(
    a_re_delivery_naming_another_after_is_a_conflict_showing_both,
    cancelling_an_action_that_may_have_been_written_says_so_first,
    a_purge_keeps_a_cancelled_action_that_may_have_been_written,
    the_console_says_a_cancel_may_leave_an_effect_before_it_is_confirmed,
);

fn key(text: &str) -> ActionKey {
    ActionKey::parse(text).unwrap()
}

fn raw(key: &str, after: Option<&str>) -> RawSubmission {
    RawSubmission {
        key: Some(key.to_owned()),
        payload: br#"{"mail":"confirmation"}"#.to_vec(),
        after: after.map(str::to_owned),
        ..RawSubmission::default()
    }
}

async fn a_re_delivery_naming_another_after_is_a_conflict_showing_both<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    assert_eq!(l.submit(&raw("mail", Some("task:1"))).await.unwrap().outcome, SubmitOutcome::Created);
    // The same `after`, or none on both, stays a duplicate.
    assert_eq!(l.submit(&raw("mail", Some("task:1"))).await.unwrap().outcome, SubmitOutcome::Duplicate);
    assert_eq!(l.submit(&raw("plain", None)).await.unwrap().outcome, SubmitOutcome::Created);
    assert_eq!(l.submit(&raw("plain", None)).await.unwrap().outcome, SubmitOutcome::Duplicate);
    assert_eq!(l.store().find(&key("plain")).await.unwrap().unwrap().state, State::Pending);

    // Another `after`: a conflict for a person, who sees both dependencies; the recorded one stays.
    let changed = l.submit(&raw("mail", Some("task:2"))).await.unwrap();
    assert_eq!(changed.outcome, SubmitOutcome::Conflict);
    // What the command line prints and the API answers says what changed, and nothing false
    // (not "purged", not "a different payload").
    let said = actionledger::document::explanation(&changed);
    assert!(said.contains("waiting for task:1") && said.contains("wait for task:2"), "{said}");
    assert!(!said.contains("purged") && !said.contains("different payload"), "{said}");
    let action = l.store().find(&key("mail")).await.unwrap().unwrap();
    assert_eq!(action.state, State::Conflict, "nothing runs before a person has looked");
    assert_eq!(action.after, Some(key("task:1")));
    let detail = l.detail(&key("mail")).await.unwrap();
    let reason = detail.audit.last().unwrap().reason.clone().unwrap();
    assert!(reason.contains("task:1") && reason.contains("task:2"), "{reason}");
    let outcomes: Vec<SubmitOutcome> = detail.deliveries.iter().map(|d| d.outcome).collect();
    assert_eq!(outcomes, [SubmitOutcome::Created, SubmitOutcome::Duplicate, SubmitOutcome::Conflict]);

    // Dropping the `after` a delivery named before is a change too.
    assert_eq!(l.submit(&raw("after:dropped", Some("task:1"))).await.unwrap().outcome, SubmitOutcome::Created);
    assert_eq!(l.submit(&raw("after:dropped", None)).await.unwrap().outcome, SubmitOutcome::Conflict);

    // The person decides: a retry runs it after the recorded dependency.
    let retried = l.manual(&person_request("mail", ManualCommand::Retry)).await.unwrap().action;
    assert_eq!((retried.state, retried.after), (State::Pending, Some(key("task:1"))));
}

/// Submits `k`, claims it and records an unknown outcome: a request may have written it.
async fn unknown<S: Store>(l: &Ledger<S>, k: &str) {
    l.submit(&raw(k, None)).await.unwrap();
    let claim = l.claim("w", LEASE, 1).await.unwrap().pop().expect("claimable");
    let attempt = l.start_attempt(&claim).await.unwrap();
    let report = Report { outcome: Outcome::Unknown, error: Some("timed out".into()), evidence: Evidence::default() };
    let Recorded::Applied(action) = l.record_result(&claim, attempt, &report).await.unwrap() else { panic!("current") };
    assert_eq!((action.state, action.may_have_written), (State::Unknown, true));
}

fn checked(k: &str) -> ManualRequest {
    ManualRequest { confirmed_not_written: true, ..person_request(k, ManualCommand::Cancel) }
}

async fn cancelling_an_action_that_may_have_been_written_says_so_first<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    unknown(l, "sent").await;
    let refused = l.manual(&person_request("sent", ManualCommand::Cancel)).await;
    let Err(LedgerError::Refused(refusal)) = refused else { panic!("refused: {refused:?}") };
    assert!(matches!(refusal, Refusal::CancelMayHaveWritten { .. }), "{refusal}");
    assert_eq!(refusal.way_out(), Some(WayOut::ConfirmNotWritten));
    assert!(refusal.to_string().contains("may have written"), "{refusal}");
    // A dry run says the same before anything is confirmed.
    assert!(l.manual_dry_run(&person_request("sent", ManualCommand::Cancel)).await.is_err());
    assert_eq!(l.store().find(&key("sent")).await.unwrap().unwrap().state, State::Unknown, "nothing changed");

    // Once the person checked the destination, the cancellation goes through, said in the audit
    // trail, and the action keeps the sign that a request may have written.
    let cancelled = l.manual(&checked("sent")).await.unwrap().action;
    assert_eq!((cancelled.state, cancelled.may_have_written), (State::Cancelled, true));
    let reason = l.detail(&key("sent")).await.unwrap().audit.last().unwrap().reason.clone().unwrap();
    assert!(reason.contains("confirmed that the destination holds no record"), "{reason}");

    // An action never sent is cancelled without a question.
    l.submit(&raw("never-sent", None)).await.unwrap();
    let cancelled = l.manual(&person_request("never-sent", ManualCommand::Cancel)).await.unwrap().action;
    assert_eq!(cancelled.state, State::Cancelled);
}

async fn a_purge_keeps_a_cancelled_action_that_may_have_been_written<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    unknown(l, "written").await;
    l.manual(&checked("written")).await.unwrap();
    l.submit(&raw("not-sent", None)).await.unwrap();
    l.manual(&person_request("not-sent", ManualCommand::Cancel)).await.unwrap();
    let attempts_before = l.detail(&key("written")).await.unwrap().attempts.len();
    assert_eq!(attempts_before, 1);
    l.store().clock().advance(DAY * 3);

    let request = |dry_run| {
        PurgeRequest::new(
            DAY,
            &[State::Completed, State::Cancelled],
            Person::parse("Ana Lima").unwrap(),
            Reason::parse("retention").unwrap(),
            dry_run,
        )
        .unwrap()
    };
    let dry = l.purge(&request(true)).await.unwrap();
    assert_eq!((dry.record.counts.actions, dry.kept_may_have_written.clone()), (1, vec![key("written")]));
    let report = l.purge(&request(false)).await.unwrap();
    assert_eq!(report.record.counts.actions, 1, "only the action never sent is purged");
    assert_eq!(report.kept_may_have_written, [key("written")]);
    // The evidence stays: the attempt, the payload, and no tombstone.
    let detail = l.detail(&key("written")).await.unwrap();
    assert_eq!(detail.attempts.len(), attempts_before);
    assert!(l.store().purge_of(&key("written")).await.unwrap().is_none());
    assert!(l.store().purge_of(&key("not-sent")).await.unwrap().is_some());
    // A later run keeps it still.
    assert_eq!(l.purge(&request(false)).await.unwrap().kept_may_have_written, [key("written")]);
}

async fn the_console_says_a_cancel_may_leave_an_effect_before_it_is_confirmed<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    unknown(l, "acme:sent").await;
    let options = ConsoleOptions {
        owner: Person::parse("Ana").unwrap(),
        ledger_label: "test-ledger".to_owned(),
        destinations: Destinations::default(),
        refresh: Duration::from_hours(1),
        hint: None,
        filter: None,
    };
    let mut console = ScriptedConsole::start(l, &options, 160, 40).await.unwrap();
    let mut press = async |keys: &[&str]| {
        for line in keys {
            console.press(line).await.unwrap();
        }
        console.screen().unwrap()
    };
    // Said with the command, before the reason is asked.
    let screen = press(&["3", "/", "acme:sent", "<Enter>", "x"]).await;
    assert!(screen.contains("An earlier request may have written this action"), "{screen}");
    let screen = press(&["duplicate order", "<Enter>"]).await;
    assert!(screen.contains("No record at the destination?"), "{screen}");
    let screen = press(&["not written", "<Enter>", "y"]).await;
    assert!(!screen.contains("refused:"), "{screen}");
    let detail = l.detail(&key("acme:sent")).await.unwrap();
    assert_eq!(detail.action.state, State::Cancelled);
    let reason = detail.audit.last().unwrap().reason.clone().unwrap();
    assert!(reason.contains("confirmed that the destination holds no record"), "{reason}");
}

fn idle_worker(id: &str) -> WorkerOptions {
    WorkerOptions {
        id: id.to_owned(),
        concurrency: 1,
        batch: 100,
        lease: LEASE,
        poll_interval: Duration::from_millis(20),
        drain: false,
        destinations: Destinations::new(std::collections::BTreeMap::new(), None),
        progress: false,
    }
}

fn ledger_path(url: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(url.trim_start_matches("sqlite://"))
}

/// A SQLite ledger file deleted under a running worker: it is not ready, says why, and stops
/// instead of working a file nobody else sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stops_when_its_sqlite_ledger_file_is_deleted() {
    let db = support::sqlite().await;
    db.ledger.readiness().await.expect("ready on the file it opened");
    let running = tokio::spawn(worker::run(db.ledger.clone(), idle_worker("w"), std::future::pending()));
    tokio::time::sleep(Duration::from_millis(200)).await;
    std::fs::remove_file(ledger_path(&db.url)).unwrap();

    let stopped = tokio::time::timeout(Duration::from_secs(10), running).await.expect("the worker stops").unwrap();
    let error = stopped.expect_err("a worker on a deleted file stops with an error").to_string();
    assert!(error.contains("was deleted") && error.contains("ledger.db"), "{error}");
    let not_ready = db.ledger.readiness().await.expect_err("not ready");
    assert!(matches!(not_ready, NotReady::FileReplaced(_)), "{not_ready}");
}

/// A SQLite ledger file replaced by another file of the same name: not ready, naming both files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_ledger_replaced_under_a_process_is_not_ready() {
    let db = support::sqlite().await;
    let path = ledger_path(&db.url);
    let other = path.with_file_name("other.db");
    std::fs::copy(&path, &other).unwrap();
    std::fs::rename(&other, &path).unwrap();
    let not_ready = db.ledger.readiness().await.expect_err("not ready").to_string();
    assert!(not_ready.contains("another file now has its name"), "{not_ready}");
    let claimed = worker::run(db.ledger.clone(), idle_worker("w"), std::future::pending()).await;
    assert!(claimed.is_err_and(|e| e.to_string().contains("not the file this process opened")));
}

/// Two processes on one SQLite ledger whose clocks disagree by an hour: the one behind the
/// times the ledger recorded claims and takes over nothing, and says which times disagree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_writer_whose_clock_is_behind_the_ledger_claims_nothing() {
    let db = support::sqlite().await;
    let honest = &db.ledger;
    let fast = Ledger::new(SqliteStore::open(&db.url).await.unwrap());
    fast.store().clock().advance(Duration::from_hours(1));
    for k in ["a", "b"] {
        honest.submit(&raw(k, None)).await.unwrap();
    }
    // Before anything was recorded by the fast clock, the clocks look alike.
    let claim = fast.claim("fast", LEASE, 1).await.unwrap().pop().expect("claimed");

    let refused = honest.claim("honest", LEASE, 1).await;
    let Err(LedgerError::Store(StoreError::ClockBehind { now, latest })) = &refused else {
        panic!("refused for the clock: {refused:?}")
    };
    assert!(*latest - *now > chrono::TimeDelta::minutes(59), "{now} {latest}");
    let message = refused.unwrap_err().to_string();
    assert!(message.contains("clocks of the processes sharing this SQLite ledger disagree"), "{message}");
    let takeover = honest.recover_expired(claim.key(), claim.ownership_version(), "honest", LEASE).await;
    assert!(matches!(takeover, Err(LedgerError::Store(StoreError::ClockBehind { .. }))), "{takeover:?}");
    assert_eq!(honest.store().find(&key("b")).await.unwrap().unwrap().state, State::Pending, "b stays unclaimed");
}
