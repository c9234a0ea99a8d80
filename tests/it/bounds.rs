//! Rule 3 and rule 6 at the simulated CRM, on both stores: every send counts towards the round's
//! bound whatever settled the one before, a replayed answer is not sent for again, lookups that
//! get no answer are bounded and kept, and a person's retry that could create a second record
//! needs their word that the destination holds none. Every assertion counts what the CRM did.

use crate::support::{self, TestDb, order};
use actionledger::Ledger;
use actionledger::config::Config;
use actionledger::destination::{Destination, Destinations};
use actionledger::domain::{ActionKey, Event, LookupVerdict, ManualCommand, Refusal, State, WayOut};
use actionledger::ledger::LedgerError;
use actionledger::sim_crm::{Fault, FaultPlan, Options, SimCrm};
use actionledger::store::Store;
use actionledger::worker::{self, Summary, WorkerOptions};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

conformance!(
    a_destination_that_fails_after_every_send_is_sent_to_at_most_max_attempts_times,
    a_replayed_server_error_is_not_sent_for_a_third_time,
    lookups_that_get_no_answer_are_bounded_and_kept_as_evidence,
    a_retry_that_could_create_a_second_record_needs_the_persons_check,
    a_retry_the_destination_can_recognise_needs_no_check_and_makes_no_second_record,
);

async fn crm(options: Options) -> SimCrm {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    SimCrm::start(listener, options).unwrap()
}

fn faults(faults: &[Fault]) -> FaultPlan {
    FaultPlan { script: faults.iter().cloned().collect::<VecDeque<_>>(), rates: Vec::new() }
}

/// The CRM's printed block without the lines starting with any of `dropped`, with `extra` TOML,
/// a short backoff and settle delay so that the tests do not wait.
fn destinations(crm: &SimCrm, dropped: &[&str], extra: &str) -> Destinations {
    let block = crm.destination_config("crm");
    let kept: Vec<&str> = block.lines().filter(|line| !dropped.iter().any(|d| line.starts_with(d))).collect();
    let text = format!("{}\n{extra}", kept.join("\n"));
    let mut config = Config::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    for destination in config.destinations.values_mut() {
        destination.backoff_base = Duration::from_millis(10);
        destination.backoff_max = Duration::from_millis(40);
        if let Some(lookup) = destination.lookup.as_mut() {
            lookup.settle = Duration::from_millis(10);
        }
    }
    let by_name: BTreeMap<String, Destination> = config
        .destinations
        .iter()
        .map(|(name, c)| (name.clone(), Destination::new(name, c.clone()).unwrap()))
        .collect();
    Destinations::new(by_name, None)
}

fn options(destinations: Destinations) -> WorkerOptions {
    WorkerOptions {
        id: "w1".to_owned(),
        concurrency: 2,
        batch: 100,
        lease: Duration::from_secs(30),
        poll_interval: Duration::from_millis(10),
        drain: true,
        destinations,
        progress: false,
    }
}

/// Drains, failing the test if the worker does not stop by itself: an unbounded loop of sends
/// or lookups never would.
async fn drain<S: Store>(ledger: &Ledger<S>, destinations: Destinations) -> Summary {
    tokio::time::timeout(
        Duration::from_mins(1),
        worker::run(ledger.clone(), options(destinations), std::future::pending()),
    )
    .await
    .expect("the draining worker stopped by itself")
    .expect("the worker ran")
}

/// Requests that were sends (creates), not lookups.
fn sends(crm: &SimCrm) -> u64 {
    let stats = crm.stats();
    stats.requests - stats.lookups
}

async fn detail<S: Store>(ledger: &Ledger<S>, key: &str) -> actionledger::ledger::ActionDetail {
    ledger.detail(&ActionKey::parse(key).unwrap()).await.unwrap()
}

/// The issue's reproduction: a 500 without writing, a lookup that finds nothing, `max_attempts =
/// 3`. Before, the action went back to pending after every lookup with its count reset, and was
/// sent every two seconds for as long as the worker ran.
async fn a_destination_that_fails_after_every_send_is_sent_to_at_most_max_attempts_times<S: Store>(db: TestDb<S>) {
    let crm =
        crm(Options { retention: None, faults: faults(&vec![Fault::ErrorBeforeWrite; 10]), ..Options::default() })
            .await;
    let key = "acme:order:500:create-task";
    db.ledger.submit(&order(key, r#"{"n":500}"#)).await.unwrap();
    drain(&db.ledger, destinations(&crm, &["idempotency"], "max_attempts = 3")).await;

    assert_eq!(sends(&crm), 3, "one send per attempt of the round: {:?}", crm.stats());
    assert_eq!(crm.stats().records, 0);
    let detail = detail(&db.ledger, key).await;
    assert_eq!(detail.action.state, State::Failed, "a lookup proved nothing was written, and no send is left");
    assert_eq!(detail.action.attempts, 3);
    assert!(!detail.action.may_have_written);
    let last = detail.audit.last().unwrap();
    assert_eq!((last.event, last.to_state), (Event::LookupNotFound, State::Failed));
    assert!(last.reason.as_deref().unwrap_or_default().contains("no send left (at most 3)"), "{last:?}");
    // Each send after a lookup waited out a backoff: the audit trail shows the next send planned.
    let planned = detail.audit.iter().filter(|e| e.event == Event::LookupNotFound && e.to_state == State::Pending);
    assert_eq!(planned.count(), 2);
}

/// A destination that keeps its answer per idempotency key (as Stripe documents, a 500
/// included): the second send gets the first answer again, which proves nothing new.
async fn a_replayed_server_error_is_not_sent_for_a_third_time<S: Store>(db: TestDb<S>) {
    let crm = crm(Options { faults: faults(&[Fault::ErrorBeforeWrite]), ..Options::default() }).await;
    let key = "acme:order:replay:create-task";
    db.ledger.submit(&order(key, r#"{"n":1}"#)).await.unwrap();
    drain(&db.ledger, destinations(&crm, &[], "max_attempts = 5")).await;

    let stats = crm.stats();
    assert_eq!(sends(&crm), 2, "the first send and one repeat of its key, no third: {stats:?}");
    assert_eq!(stats.idempotent_replays, 1);
    assert_eq!(stats.records, 0);
    let detail = detail(&db.ledger, key).await;
    assert_eq!(detail.action.state, State::Failed, "a lookup proved nothing was written: {:?}", detail.audit);
    let replayed = detail.attempts.last().and_then(|a| a.error.clone()).unwrap_or_default();
    let noted = detail.audit.iter().filter_map(|e| e.reason.as_deref()).any(|r| r.contains("stored answer replayed"));
    assert!(noted, "the audit trail says why nothing more was sent: {:?} {replayed}", detail.audit);
}

/// A response lost after the CRM wrote, and a lookup that never gets an answer (nothing listens
/// where it asks): the lookups are bounded by the round's budget, backed off, and each one is kept
/// on the action, where `show` and the console list it.
async fn lookups_that_get_no_answer_are_bounded_and_kept_as_evidence<S: Store>(db: TestDb<S>) {
    let crm = crm(Options { retention: None, faults: faults(&[Fault::DropAfterCommit]), ..Options::default() }).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nobody = closed.local_addr().unwrap();
    drop(closed);
    let broken_lookup = format!(
        "lookup = {{ url = \"http://{nobody}/tasks?external_ref={{{{external_ref}}}}\", records_pointer = \"/records\" }}\n\
         max_attempts = 3"
    );
    let key = "acme:order:lost:create-task";
    db.ledger.submit(&order(key, r#"{"n":2}"#)).await.unwrap();
    drain(&db.ledger, destinations(&crm, &["lookup", "idempotency"], &broken_lookup)).await;

    let detail = detail(&db.ledger, key).await;
    assert_eq!((detail.action.attempts, crm.stats().records), (1, 1), "one send, which wrote: {:#?}", detail.audit);
    assert_eq!(detail.action.state, State::Unknown, "nothing settled it: the record may be there");
    let failed: Vec<_> = detail.lookups.iter().filter(|l| l.verdict == LookupVerdict::Failed).collect();
    assert_eq!(failed.len(), 3, "three lookups tried, each kept: {:?}", detail.lookups);
    assert!(failed.iter().all(|l| l.detail.as_deref().unwrap_or_default().contains("lookup failed")), "{failed:?}");
    assert!(failed.windows(2).all(|w| w[1].at > w[0].at), "backed off, one after another");
    // Shown where a person looks: the JSON `show` answers with.
    let shown = support::run_cli(&db.url, &["show", key, "--json"]);
    let document: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    let verdicts: Vec<&str> =
        document["lookups"].as_array().unwrap().iter().filter_map(|l| l["verdict"].as_str()).collect();
    assert_eq!(verdicts, ["failed", "failed", "failed"], "{document}");
}

/// An unknown outcome at a destination without a lookup or an idempotency key: the CRM wrote, the
/// answer was lost. A retry here would create a second record; the ledger refuses it until the
/// person confirms the destination holds none, and the CLI says so.
async fn a_retry_that_could_create_a_second_record_needs_the_persons_check<S: Store>(db: TestDb<S>) {
    let crm = crm(Options {
        retention: None,
        unique_refs: false,
        faults: faults(&[Fault::DropAfterCommit]),
        ..Options::default()
    })
    .await;
    let destinations = destinations(&crm, &["lookup", "idempotency"], "");
    let key = "acme:order:blind:create-task";
    db.ledger.submit(&order(key, r#"{"n":3}"#)).await.unwrap();
    drain(&db.ledger, destinations.clone()).await;
    assert_eq!((crm.stats().records, detail(&db.ledger, key).await.action.state), (1, State::Unknown));

    let ledger = db.ledger.clone().with_destinations(destinations.catalog());
    let refused = ledger.manual(&support::person_request(key, ManualCommand::Retry)).await.unwrap_err();
    assert!(matches!(&refused, LedgerError::Refused(Refusal::MayWriteTwice { .. })), "{refused}");
    let LedgerError::Refused(refusal) = &refused else { unreachable!() };
    assert_eq!(refusal.way_out(), Some(WayOut::ConfirmNotWritten));
    assert!(refusal.to_string().contains("creates a second record"), "{refusal}");
    assert_eq!(detail(&db.ledger, key).await.action.state, State::Unknown, "nothing changed");

    // The command line: refused (exit 3), naming the flag that confirms it.
    let config = tempfile::NamedTempFile::new().unwrap();
    let block = crm.destination_config("crm");
    let unprotected: Vec<&str> =
        block.lines().filter(|l| !l.starts_with("lookup") && !l.starts_with("idempotency")).collect();
    std::fs::write(config.path(), unprotected.join("\n")).unwrap();
    let config_path = config.path().to_str().unwrap();
    // Said before anyone retries: `show` (and the HTTP read, the same document) names the risk.
    let shown = support::run_cli(&db.url, &["show", key, "--json", "--config", config_path]);
    let document: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(document["retry_needs_confirm_not_written"], true, "{document}");
    let args = ["retry", key, "--owner", "Ana", "--reason", "customer asked", "--config", config_path];
    let out = support::run_cli(&db.url, &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("--confirm-not-written"), "{stderr}");
    assert_eq!(crm.stats().records, 1);

    // Confirmed: recorded in the audit trail in the person's name, and the retry goes out. The CRM
    // did hold the record, so the person's word made a second one: the check is theirs to make.
    let out = support::run_cli(&db.url, &[&args[..], &["--confirm-not-written"]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let retried = detail(&db.ledger, key).await;
    let entry = retried.audit.last().unwrap();
    assert_eq!((entry.event, entry.actor.as_str()), (Event::Retry, "Ana"));
    assert!(entry.reason.as_deref().unwrap_or_default().contains("confirmed that it holds no record"), "{entry:?}");
    drain(&db.ledger, destinations).await;
    assert_eq!(crm.stats().records, 2);
}

/// The same lost answer where the destination has a lookup: a retry is recognised (the worker
/// looks before it sends again), so no confirmation is asked, and no second record is made.
async fn a_retry_the_destination_can_recognise_needs_no_check_and_makes_no_second_record<S: Store>(db: TestDb<S>) {
    let crm = crm(Options {
        retention: None,
        unique_refs: false,
        faults: faults(&[Fault::DropAfterCommit]),
        ..Options::default()
    })
    .await;
    let key = "acme:order:looked:create-task";
    db.ledger.submit(&order(key, r#"{"n":4}"#)).await.unwrap();
    // The worker that sent knows no lookup, so it leaves the outcome unknown.
    drain(&db.ledger, destinations(&crm, &["lookup", "idempotency"], "")).await;
    assert_eq!(detail(&db.ledger, key).await.action.state, State::Unknown);

    let with_lookup = destinations(&crm, &["idempotency"], "");
    let ledger = db.ledger.clone().with_destinations(with_lookup.catalog());
    let retried = ledger.manual(&support::person_request(key, ManualCommand::Retry)).await;
    assert_eq!(retried.unwrap().action.state, State::Pending);
    drain(&db.ledger, with_lookup).await;
    let done = detail(&db.ledger, key).await;
    assert_eq!((done.action.state, crm.stats().records), (State::Completed, 1), "found by the lookup, not sent again");
}

/// One randomized case: what the destination declares, its budget, and what it answers each
/// send in turn.
#[derive(Debug, Clone)]
struct Case {
    lookup: bool,
    idempotency: bool,
    max_attempts: i64,
    answers: Vec<Fault>,
}

fn case() -> impl proptest::strategy::Strategy<Value = Case> {
    use proptest::prelude::*;
    let answer = prop_oneof![
        Just(Fault::ErrorBeforeWrite),
        Just(Fault::Unavailable),
        Just(Fault::CloseBeforeWrite),
        Just(Fault::DropAfterCommit),
        Just(Fault::ErrorAfterWrite),
        Just(Fault::Ok),
    ];
    (any::<bool>(), any::<bool>(), 1..=4_i64, proptest::collection::vec(answer, 1..=8))
        .prop_map(|(lookup, idempotency, max_attempts, answers)| Case { lookup, idempotency, max_attempts, answers })
}

/// Rule 3 as a property, on a real worker against the CRM: whatever the destination answers and
/// whatever it declares, one round of one action makes at most `max_attempts` sends, the draining
/// worker stops, and where the destination can recognise a repeat there is at most one record.
/// Each case has a destination of its own, so that the actions of earlier cases stay out of it.
fn sends_never_exceed_the_round_budget<S: Store>(runtime: &tokio::runtime::Runtime, ledger: &Ledger<S>, store: &str) {
    use proptest::prelude::*;
    let config = ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() };
    let number = std::cell::Cell::new(0_u32);
    proptest!(config, |(case in case())| {
        number.set(number.get() + 1);
        let name = format!("crm{}", number.get());
        let outcome = runtime.block_on(async {
            let crm = crm(Options {
                retention: case.idempotency.then_some(Duration::from_hours(1)),
                faults: faults(&case.answers),
                ..Options::default()
            })
            .await;
            let mut dropped = Vec::new();
            if !case.lookup { dropped.push("lookup"); }
            if !case.idempotency { dropped.push("idempotency"); }
            let block = crm.destination_config(&name);
            let kept: Vec<&str> = block.lines().filter(|l| !dropped.iter().any(|d| l.starts_with(d))).collect();
            let text = format!("{}\nmax_attempts = {}", kept.join("\n"), case.max_attempts);
            let mut config = Config::parse(&text).unwrap();
            for destination in config.destinations.values_mut() {
                destination.backoff_base = Duration::from_millis(2);
                destination.backoff_max = Duration::from_millis(10);
                if let Some(lookup) = destination.lookup.as_mut() {
                    lookup.settle = Duration::from_millis(2);
                }
            }
            let by_name = config.destinations.iter().map(|(n, c)| (n.clone(), Destination::new(n, c.clone()).unwrap())).collect();
            let key = format!("acme:{name}:create-task");
            let submission = actionledger::domain::RawSubmission { destination: Some(name.clone()), ..order(&key, "{}") };
            ledger.submit(&submission).await.unwrap();
            drain(ledger, Destinations::new(by_name, None)).await;
            let action = detail(ledger, &key).await.action;
            (sends(&crm), crm.stats().max_records_per_external_ref, action)
        });
        let (sent, records, action) = outcome;
        prop_assert!(sent <= u64::try_from(case.max_attempts).unwrap(), "{sent} sends: {case:?} {action:?}");
        prop_assert!(sent >= 1);
        prop_assert!(action.state != State::Pending && action.state != State::InProgress, "drained: {action:?}");
        if case.lookup || case.idempotency {
            prop_assert!(records <= 1, "{records} records for one key: {case:?}");
        }
    });
    println!("bounds ({store}): {} cases, each within its round's budget", number.get());
}

#[test]
fn sqlite_sends_never_exceed_the_round_budget() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let db = runtime.block_on(support::sqlite());
    sends_never_exceed_the_round_budget(&runtime, &db.ledger, "sqlite");
}

#[test]
fn postgres_sends_never_exceed_the_round_budget() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let Some(db) = runtime.block_on(support::postgres()) else { return };
    sends_never_exceed_the_round_budget(&runtime, &db.ledger, "postgres");
}
