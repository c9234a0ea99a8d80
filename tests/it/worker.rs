//! Workers against the simulated CRM over loopback HTTP, on both stores. Each check of the seed
//! articles is a named test, and every assertion counts effects in the CRM, not log lines.

use crate::support::{self, TestDb, order};
use actionledger::Ledger;
use actionledger::config::Config;
use actionledger::destination::{Destination, Destinations};
use actionledger::domain::{ActionKey, ManualCommand, RawSubmission, State, WayOut};
use actionledger::ledger::{LedgerError, Outcome, Recorded, Report};
use actionledger::sim_crm::{Fault, FaultPlan, Options, SimCrm};
use actionledger::store::Store;
use actionledger::worker::{self, Summary, WorkerOptions};
use std::collections::{BTreeMap, VecDeque};
use std::os::unix::process::ExitStatusExt as _;
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(30);

conformance!(
    the_same_event_sent_five_times_creates_one_record,
    two_workers_started_together_one_claim_succeeds,
    a_paused_worker_taken_over_has_no_second_effect_where_the_destination_protects,
    a_paused_worker_taken_over_is_held_where_the_destination_cannot_protect,
    a_paused_workers_late_result_reaches_review_while_its_successor_runs,
    a_retry_after_an_unsafe_takeover_looks_up_before_sending_again,
    a_worker_killed_after_the_crm_committed_recovers_without_a_second_effect,
    a_different_event_for_the_same_action_has_no_second_effect,
    a_missing_key_and_a_changed_payload_reach_review_and_a_new_order_is_not_blocked,
    a_replay_after_the_retention_window_is_held_not_sent,
    a_two_step_workflow_retries_only_the_failed_step,
    a_person_resolves_a_failed_and_an_unknown_action_with_the_cli,
    lost_responses_are_settled_by_lookup,
    reconcile_reports_and_settles,
    regression_a_failure_after_a_possible_write_is_unknown_not_failed,
    a_reviewed_update_changes_the_one_record_once,
    an_update_the_destination_cannot_perform_is_held_for_a_person,
    a_new_body_approved_after_a_send_goes_out_under_a_derived_key,
    a_lost_update_response_is_settled_by_lookup_without_a_second_update,
);

async fn crm(options: Options) -> SimCrm {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    SimCrm::start(listener, options).unwrap()
}

fn script(faults: &[Fault]) -> FaultPlan {
    FaultPlan { script: faults.iter().cloned().collect::<VecDeque<_>>(), rates: Vec::new() }
}

/// The destinations a test worker uses: the CRM's own printed block, with a short settle delay
/// and backoff so tests do not wait, plus `extra` TOML.
fn destinations(crm: &SimCrm, extra: &str) -> BTreeMap<String, Destination> {
    let text = format!("{}\n{extra}", crm.destination_config("crm"));
    let mut config = Config::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    for destination in config.destinations.values_mut() {
        destination.backoff_base = Duration::from_millis(10);
        destination.backoff_max = Duration::from_millis(50);
        if let Some(lookup) = destination.lookup.as_mut() {
            lookup.settle = Duration::from_millis(20);
        }
    }
    config.destinations.iter().map(|(name, c)| (name.clone(), Destination::new(name, c.clone()).unwrap())).collect()
}

fn options(id: &str, destinations: BTreeMap<String, Destination>) -> WorkerOptions {
    WorkerOptions {
        id: id.to_owned(),
        concurrency: 4,
        batch: 100,
        lease: LEASE,
        poll_interval: Duration::from_millis(10),
        drain: true,
        destinations: Destinations::new(destinations, None),
        progress: false,
    }
}

async fn drain<S: Store>(ledger: &Ledger<S>, options: WorkerOptions) -> Summary {
    tokio::time::timeout(Duration::from_mins(2), worker::run(ledger.clone(), options, std::future::pending()))
        .await
        .expect("the worker drained in time")
        .expect("the worker ran")
}

async fn state<S: Store>(ledger: &Ledger<S>, key: &str) -> actionledger::domain::ActionRecord {
    ledger.store().find(&ActionKey::parse(key).unwrap()).await.unwrap().unwrap()
}

async fn the_same_event_sent_five_times_creates_one_record<S: Store>(db: TestDb<S>) {
    let crm = crm(Options::default()).await;
    let key = "acme:order:ORD-1042:create-task";
    for _ in 0..5 {
        let event = RawSubmission { event_id: Some("evt-77".into()), ..order(key, r#"{"order":"ORD-1042"}"#) };
        db.ledger.submit(&event).await.unwrap();
    }
    drain(&db.ledger, options("w1", destinations(&crm, ""))).await;
    drain(&db.ledger, options("w2", destinations(&crm, ""))).await;
    assert_eq!(crm.stats().records, 1);
    let detail = db.ledger.detail(&ActionKey::parse(key).unwrap()).await.unwrap();
    assert_eq!(detail.deliveries.len(), 5);
    assert_eq!(detail.action.state, State::Completed);
    assert_eq!(detail.action.destination_id.as_deref(), Some("R-000001"));
}

async fn two_workers_started_together_one_claim_succeeds<S: Store>(db: TestDb<S>) {
    let crm = crm(Options::default()).await;
    db.ledger.submit(&order("acme:order:1:create-task", "{}")).await.unwrap();
    let (a, b) = tokio::join!(
        drain(&db.ledger, options("worker-a", destinations(&crm, ""))),
        drain(&db.ledger, options("worker-b", destinations(&crm, "")))
    );
    assert_eq!(a.claimed + b.claimed, 1, "exactly one claim succeeded");
    assert_eq!(crm.stats().records, 1);
    assert_eq!(crm.stats().requests, 1, "the losing worker sent nothing");
}

async fn a_paused_worker_taken_over_has_no_second_effect_where_the_destination_protects<S: Store>(db: TestDb<S>) {
    let crm = crm(Options::default()).await;
    let key = "acme:order:2:create-task";
    db.ledger.submit(&order(key, r#"{"n":2}"#)).await.unwrap();
    let dests = destinations(&crm, "");
    // Worker A claims, records its attempt, and pauses before its request.
    let a = db.ledger.claim("worker-a", LEASE, 1).await.unwrap().pop().unwrap();
    let a_attempt = db.ledger.start_attempt(&a).await.unwrap();
    db.ledger.store().clock().advance(LEASE * 2);
    // Worker B finds the expired claim; the key is inside its idempotency window: takeover.
    let b = drain(&db.ledger, options("worker-b", dests.clone())).await;
    assert_eq!((b.recovered, b.completed), (1, 1));
    let after_b = state(&db.ledger, key).await;
    assert_eq!(after_b.ownership_version, 2);
    // A resumes and sends with the same key: the CRM answers from its idempotency store.
    let sent = dests["crm"].send(&a.action, None).await.unwrap();
    let actionledger::destination::SendOutcome::Created { destination_id, response } = sent else {
        panic!("the replayed create answers as the first one did: {sent:?}")
    };
    let late = Report {
        outcome: Outcome::Completed { destination_id: destination_id.clone() },
        error: None,
        evidence: actionledger::domain::Evidence {
            status: Some(i64::from(response.status)),
            destination_id: Some(destination_id.clone()),
            body: Some(response.body),
        },
    };
    let recorded = db.ledger.record_result(&a, a_attempt, &late).await.unwrap();
    assert!(matches!(recorded, Recorded::Stale(_)), "A's late result is refused");
    let stats = crm.stats();
    assert_eq!((stats.records, stats.idempotent_replays), (1, 1), "one effect");
    let detail = db.ledger.detail(&ActionKey::parse(key).unwrap()).await.unwrap();
    assert_eq!(detail.action.state, State::Completed, "the same record: nothing contradicts");
    assert_eq!(detail.action.destination_id, after_b.destination_id, "the late result did not overwrite");
    assert!(detail.attempts.iter().any(|at| at.stale && at.worker == "worker-a"), "kept as evidence");
    assert_eq!(detail.audit.last().unwrap().event, actionledger::domain::Event::LateResult);
    // Seed 003: the late result from worker A goes to review, and overwrites nothing.
    let expected = actionledger::domain::ActionRecord { late_results: 1, revision: after_b.revision + 1, ..after_b };
    assert_eq!(detail.action, expected, "the saved record is unchanged but for the notice");
    assert_eq!(detail.late_results().map(|at| at.worker.as_str()).collect::<Vec<_>>(), ["worker-a"], "in review");
}

async fn a_paused_workers_late_result_reaches_review_while_its_successor_runs<S: Store>(db: TestDb<S>) {
    let crm = crm(Options::default()).await;
    let key = "acme:order:20:create-task";
    db.ledger.submit(&order(key, r#"{"n":20}"#)).await.unwrap();
    let dests = destinations(&crm, "");
    let a = db.ledger.claim("worker-a", LEASE, 1).await.unwrap().pop().unwrap();
    let a_attempt = db.ledger.start_attempt(&a).await.unwrap();
    db.ledger.store().clock().advance(LEASE * 2);
    // Worker B takes the claim over and starts its attempt; A resumes before B has an answer.
    let catalog = Destinations::new(dests.clone(), None).catalog();
    let recovery =
        db.ledger.clone().with_destinations(catalog).recover_expired(a.key(), 1, "worker-b", LEASE).await.unwrap();
    let actionledger::ledger::Recovery::Claimed(b) = recovery else { panic!("the CRM protects: takeover") };
    let b_attempt = db.ledger.start_attempt(&b).await.unwrap();
    let running = state(&db.ledger, key).await;
    let sent = dests["crm"].send(&a.action, None).await.unwrap();
    let actionledger::destination::SendOutcome::Created { destination_id, .. } = sent else { panic!("{sent:?}") };
    let late = Report {
        outcome: Outcome::Completed { destination_id: destination_id.clone() },
        error: None,
        evidence: actionledger::domain::Evidence { destination_id: Some(destination_id), ..Default::default() },
    };
    let Recorded::Stale(action) = db.ledger.record_result(&a, a_attempt, &late).await.unwrap() else {
        panic!("A's result is late")
    };
    // A reports a write while B runs the action again: a contradiction, in review as a conflict.
    assert_eq!((action.state, action.late_results), (State::Conflict, 1));
    assert_eq!((action.destination_id, action.payload), (None, running.payload), "nothing overwritten");
    assert_eq!(crm.stats().records, 1, "one effect");
    // B's own answer is late now too, and listed beside A's.
    let b_sent = dests["crm"].send(&b.action, None).await.unwrap();
    let actionledger::destination::SendOutcome::Created { destination_id, .. } = b_sent else { panic!("{b_sent:?}") };
    let b_report = Report {
        outcome: Outcome::Completed { destination_id },
        error: None,
        evidence: actionledger::domain::Evidence::default(),
    };
    assert!(matches!(db.ledger.record_result(&b, b_attempt, &b_report).await.unwrap(), Recorded::Stale(_)));
    let detail = db.ledger.detail(&ActionKey::parse(key).unwrap()).await.unwrap();
    assert_eq!((detail.action.state, detail.late_results().count()), (State::Conflict, 2));
    assert_eq!(crm.stats().max_records_per_external_ref, 1, "the CRM's protection held");
}

async fn a_retry_after_an_unsafe_takeover_looks_up_before_sending_again<S: Store>(db: TestDb<S>) {
    // A CRM that neither remembers idempotency keys nor refuses a second record for one
    // reference: only a lookup before sending again prevents a duplicate.
    let crm = crm(Options { retention: None, unique_refs: false, reject_obsolete: false, ..Options::default() }).await;
    let key = "acme:order:21:create-task";
    db.ledger.submit(&order(key, r#"{"n":21}"#)).await.unwrap();
    let dests = destinations(&crm, "");
    let a = db.ledger.claim("worker-a", LEASE, 1).await.unwrap().pop().unwrap();
    db.ledger.start_attempt(&a).await.unwrap();
    let sent = dests["crm"].send(&a.action, None).await.unwrap();
    assert!(matches!(sent, actionledger::destination::SendOutcome::Created { .. }), "{sent:?}");
    db.ledger.store().clock().advance(LEASE * 2);
    // A person takes the claim over without the configuration: unprotected, so held (rule 5).
    let k = ActionKey::parse(key).unwrap();
    let request = |command, old_worker_stopped| actionledger::ledger::ManualRequest {
        old_worker_stopped,
        ..support::person_request(key, command)
    };
    let held = db.ledger.manual(&request(ManualCommand::Takeover, false)).await.unwrap().action;
    assert_eq!((held.state, held.old_worker_may_act), (State::Held, true));
    let refused = db.ledger.manual(&request(ManualCommand::Retry, false)).await.unwrap_err();
    assert!(
        matches!(&refused, LedgerError::Refused(r) if r.way_out() == Some(WayOut::ConfirmOldWorkerStopped)),
        "{refused}"
    );
    // Decided with the configuration, whose lookup recognises a repeat: the worker will look
    // before it sends again, so no check of the destination is asked (rule 6).
    let configured = db.ledger.clone().with_destinations(Destinations::new(dests.clone(), None).catalog());
    let retried = configured.manual(&request(ManualCommand::Retry, true)).await.unwrap().action;
    assert_eq!(retried.state, State::Pending);
    assert_eq!(retried.first_sent_at, held.first_sent_at, "the retry keeps the evidence of the first send");

    let summary = drain(&db.ledger, options("worker-b", dests)).await;
    assert_eq!(summary.completed, 1);
    let stats = crm.stats();
    assert_eq!(stats.records, 1, "the worker looked first and found A's record: no second");
    assert!(stats.lookups >= 1, "{stats:?}");
    let done = db.ledger.store().find(&k).await.unwrap().unwrap();
    assert_eq!((done.state, done.destination_id.as_deref()), (State::Completed, Some("R-000001")));
    assert!(done.window_started_at > done.first_sent_at, "the retry from held started a new window");
}

async fn a_paused_worker_taken_over_is_held_where_the_destination_cannot_protect<S: Store>(db: TestDb<S>) {
    let unprotected = Options { retention: None, unique_refs: false, reject_obsolete: false, ..Options::default() };
    let crm = crm(unprotected).await;
    let text =
        crm.destination_config("crm").lines().filter(|l| !l.starts_with("lookup")).collect::<Vec<_>>().join("\n");
    let config = Config::parse(&text).unwrap();
    let dests: BTreeMap<String, Destination> =
        config.destinations.iter().map(|(n, c)| (n.clone(), Destination::new(n, c.clone()).unwrap())).collect();
    let key = "acme:order:3:create-task";
    db.ledger.submit(&order(key, r#"{"n":3}"#)).await.unwrap();
    let a = db.ledger.claim("worker-a", LEASE, 1).await.unwrap().pop().unwrap();
    let a_attempt = db.ledger.start_attempt(&a).await.unwrap();
    db.ledger.store().clock().advance(LEASE * 2);
    let b = drain(&db.ledger, options("worker-b", dests.clone())).await;
    assert_eq!((b.recovered, b.held), (0, 1), "no takeover where a repeat could take effect twice");
    assert_eq!(crm.stats().requests, 0, "B sent nothing");
    assert_eq!(state(&db.ledger, key).await.state, State::Held);
    // A resumes: its request lands (the only effect), and its result goes to review.
    let sent = dests["crm"].send(&a.action, None).await.unwrap();
    let actionledger::destination::SendOutcome::Created { destination_id, .. } = sent else { panic!("{sent:?}") };
    let late = Report {
        outcome: Outcome::Completed { destination_id },
        error: None,
        evidence: actionledger::domain::Evidence::default(),
    };
    assert!(matches!(db.ledger.record_result(&a, a_attempt, &late).await.unwrap(), Recorded::Stale(_)));
    assert_eq!(crm.stats().records, 1);
    let action = state(&db.ledger, key).await;
    assert_eq!(action.state, State::Conflict, "the late result goes to review");
    assert_eq!(action.destination_id, None, "and does not overwrite the record");
    assert_eq!(action.late_results, 1, "listed with its evidence until a person acknowledges it");
}

async fn a_worker_killed_after_the_crm_committed_recovers_without_a_second_effect<S: Store>(db: TestDb<S>) {
    let crm = crm(Options::default()).await;
    let key = "acme:order:4:create-task";
    db.ledger.submit(&order(key, r#"{"n":4}"#)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("actionledger.toml");
    std::fs::write(&config, crm.destination_config("crm")).unwrap();
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_actionledger"))
        .env(actionledger::store::Clock::SHIFT_VARIABLE, db.ledger.store().clock().moved_on_ms())
        .args(["--db", &db.url, "worker", "--drain", "--worker-id", "doomed", "--config"])
        .arg(&config)
        .env(actionledger::testkit::faults::VARIABLE, actionledger::testkit::faults::AFTER_RESPONSE)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.signal(), Some(9), "the worker was killed with SIGKILL at the crash point");
    assert_eq!(crm.stats().records, 1, "the CRM committed");
    let stuck = state(&db.ledger, key).await;
    assert_eq!((stuck.state, stuck.claimed_by.as_deref()), (State::InProgress, Some("doomed")));

    db.ledger.store().clock().advance(Duration::from_mins(2));
    let rescue = drain(&db.ledger, options("rescuer", destinations(&crm, ""))).await;
    assert_eq!((rescue.recovered, rescue.completed), (1, 1));
    let crm_stats = crm.stats();
    assert_eq!(
        (crm_stats.records, crm_stats.idempotent_replays),
        (1, 1),
        "recovery found the record: no second effect"
    );
    let done = state(&db.ledger, key).await;
    assert_eq!((done.state, done.destination_id.as_deref()), (State::Completed, Some("R-000001")));
}

async fn a_different_event_for_the_same_action_has_no_second_effect<S: Store>(db: TestDb<S>) {
    let crm = crm(Options::default()).await;
    let key = "acme:order:ORD-1042:create-task";
    let from_forms =
        RawSubmission { event_id: Some("form-1".into()), source: Some("forms".into()), ..order(key, r#"{"o":1}"#) };
    let from_payments =
        RawSubmission { event_id: Some("pay-9".into()), source: Some("payments".into()), ..order(key, r#"{"o":1}"#) };
    db.ledger.submit(&from_forms).await.unwrap();
    drain(&db.ledger, options("w", destinations(&crm, ""))).await;
    let outcome = db.ledger.submit(&from_payments).await.unwrap().outcome;
    assert_eq!(outcome, actionledger::domain::SubmitOutcome::Duplicate);
    drain(&db.ledger, options("w", destinations(&crm, ""))).await;
    assert_eq!(crm.stats().records, 1);
    assert_eq!(crm.stats().requests, 1);
}

async fn a_missing_key_and_a_changed_payload_reach_review_and_a_new_order_is_not_blocked<S: Store>(db: TestDb<S>) {
    let crm = crm(Options::default()).await;
    let keyless = RawSubmission { key: None, ..order("unused", r#"{"o":5}"#) };
    assert!(db.ledger.submit(&keyless).await.is_err());
    db.ledger.submit(&order("acme:order:6:create-task", r#"{"qty":1}"#)).await.unwrap();
    db.ledger.submit(&order("acme:order:6:create-task", r#"{"qty":2}"#)).await.unwrap();
    db.ledger.submit(&order("acme:order:7:create-task", r#"{"qty":1}"#)).await.unwrap();
    drain(&db.ledger, options("w", destinations(&crm, ""))).await;
    assert_eq!(db.ledger.list_refused(None, 10).await.unwrap().len(), 1, "the missing key is in review");
    assert_eq!(state(&db.ledger, "acme:order:6:create-task").await.state, State::Conflict, "the change is in review");
    assert_eq!(
        state(&db.ledger, "acme:order:7:create-task").await.state,
        State::Completed,
        "a new order is not blocked"
    );
    assert_eq!(crm.stats().records, 1, "only the valid new order reached the CRM");
}

async fn a_replay_after_the_retention_window_is_held_not_sent<S: Store>(db: TestDb<S>) {
    let crm = crm(Options {
        retention: Some(Duration::from_hours(1)),
        faults: script(&[Fault::Unavailable]),
        ..Options::default()
    })
    .await;
    let key = "acme:order:8:create-task";
    db.ledger.submit(&order(key, "{}")).await.unwrap();
    let mut first = options("w", destinations(&crm, ""));
    first.drain = true;
    // The first send is refused with 503; before the retry, the one-hour window passes.
    let claim = db.ledger.claim("w", LEASE, 1).await.unwrap().pop().unwrap();
    let attempt = db.ledger.start_attempt(&claim).await.unwrap();
    let outcome = first.destinations.get("crm").unwrap().send(&claim.action, None).await.unwrap();
    assert!(matches!(outcome, actionledger::destination::SendOutcome::BeforeWrite { .. }), "{outcome:?}");
    let retry = Report {
        outcome: Outcome::RetryLater { after: Duration::ZERO },
        error: Some("503".into()),
        evidence: actionledger::domain::Evidence::default(),
    };
    db.ledger.record_result(&claim, attempt, &retry).await.unwrap();
    db.ledger.store().clock().advance(Duration::from_hours(2));
    let summary = drain(&db.ledger, first).await;
    assert_eq!(summary.held, 1);
    let action = state(&db.ledger, key).await;
    assert_eq!(action.state, State::Held);
    assert!(action.last_error.unwrap().contains("idempotency window"));
    assert_eq!(crm.stats().requests, 1, "not sent again after the window");
    assert_eq!(crm.stats().records, 0);
}

async fn a_two_step_workflow_retries_only_the_failed_step<S: Store>(db: TestDb<S>) {
    // The task is created by the first request; the confirmation's first request fails.
    let crm = crm(Options { faults: script(&[Fault::Ok, Fault::Unavailable]), ..Options::default() }).await;
    let mail = r#"
[destinations.mail]
base_url = "BASE"
create = { url = "{{base_url}}/emails", body = { external_ref = "{{external_ref}}", data = "{{payload}}", task = "{{after.destination_id}}" } }
lookup = { url = "{{base_url}}/emails?external_ref={{external_ref}}", records_pointer = "/records", compare = ["/data"] }
idempotency = { header = "Idempotency-Key", retention = "24h" }
"#
    .replace("BASE", &format!("http://{}", crm.addr()));
    let task = "acme:order:9:create-task";
    let confirmation = "acme:order:9:send-confirmation";
    let second = RawSubmission {
        after: Some(task.into()),
        destination: Some("mail".into()),
        ..order(confirmation, r#"{"to":"c-9"}"#)
    };
    db.ledger.submit(&second).await.unwrap();
    db.ledger.submit(&order(task, r#"{"order":9}"#)).await.unwrap();
    let summary = drain(&db.ledger, options("w", destinations(&crm, &mail))).await;
    assert_eq!(summary.retried, 1);
    let task_record = state(&db.ledger, task).await;
    let confirmation_record = state(&db.ledger, confirmation).await;
    assert_eq!((task_record.state, task_record.attempts), (State::Completed, 1), "the task is created once");
    assert_eq!(
        (confirmation_record.state, confirmation_record.attempts),
        (State::Completed, 2),
        "only the email is retried"
    );
    assert_eq!(crm.stats().records, 2);
    let sent = crm.records_for(confirmation);
    assert_eq!(sent[0]["task"].as_str(), task_record.destination_id.as_deref(), "the email knows its task");
}

async fn a_person_resolves_a_failed_and_an_unknown_action_with_the_cli<S: Store>(db: TestDb<S>) {
    // No lookup here, so an uncertain outcome stays unknown for a person.
    let crm =
        crm(Options { faults: script(&[Fault::Unavailable, Fault::DropAfterCommit]), ..Options::default() }).await;
    let text =
        crm.destination_config("crm").lines().filter(|l| !l.starts_with("lookup")).collect::<Vec<_>>().join("\n")
            + "\nmax_attempts = 1\n";
    let config = Config::parse(&text).unwrap();
    let dests = config.destinations.iter().map(|(n, c)| (n.clone(), Destination::new(n, c.clone()).unwrap())).collect();
    db.ledger.submit(&order("acme:failed", r#"{"a":1}"#)).await.unwrap();
    db.ledger.submit(&order("acme:unknown", r#"{"a":2}"#)).await.unwrap();
    let mut one_at_a_time = options("w", dests);
    one_at_a_time.concurrency = 1;
    drain(&db.ledger, one_at_a_time).await;
    assert_eq!(state(&db.ledger, "acme:failed").await.state, State::Failed);
    assert_eq!(state(&db.ledger, "acme:unknown").await.state, State::Unknown);

    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_actionledger"))
            .env(actionledger::store::Clock::SHIFT_VARIABLE, db.ledger.store().clock().moved_on_ms())
            .arg("--db")
            .arg(&db.url)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    cli(&["retry", "acme:failed", "--owner", "Ana Lima", "--reason", "CRM was down; retrying"]);
    cli(&[
        "resolve",
        "acme:unknown",
        "--owner",
        "Ana Lima",
        "--reason",
        "record R-000001 is in the CRM",
        "--as",
        "completed",
        "--destination-id",
        "R-000001",
    ]);
    for (key, event) in [("acme:failed", "retry"), ("acme:unknown", "resolved_completed")] {
        let trail = db.ledger.detail(&ActionKey::parse(key).unwrap()).await.unwrap().audit;
        let last = trail.last().unwrap();
        assert_eq!((last.actor.as_str(), last.event.as_str()), ("Ana Lima", event));
    }
    assert_eq!(state(&db.ledger, "acme:unknown").await.destination_id.as_deref(), Some("R-000001"));
}

async fn lost_responses_are_settled_by_lookup<S: Store>(db: TestDb<S>) {
    let crm = crm(Options {
        faults: script(&[Fault::DropAfterCommit, Fault::CloseBeforeWrite, Fault::ErrorAfterWrite]),
        ..Options::default()
    })
    .await;
    for n in 0..3 {
        db.ledger.submit(&order(&format!("acme:lost:{n}"), &format!(r#"{{"n":{n}}}"#))).await.unwrap();
    }
    let mut serial = options("w", destinations(&crm, ""));
    serial.concurrency = 1;
    let summary = drain(&db.ledger, serial).await;
    assert_eq!(summary.settled_by_lookup, 3, "{summary:?}");
    for n in 0..3 {
        let action = state(&db.ledger, &format!("acme:lost:{n}")).await;
        assert_eq!(action.state, State::Completed, "acme:lost:{n}");
    }
    let stats = crm.stats();
    assert_eq!((stats.records, stats.max_records_per_external_ref), (3, 1));
}

async fn reconcile_reports_and_settles<S: Store>(db: TestDb<S>) {
    let crm = crm(Options { faults: script(&[Fault::DropAfterCommit]), ..Options::default() }).await;
    db.ledger.submit(&order("acme:r:1", r#"{"n":1}"#)).await.unwrap();
    db.ledger.submit(&order("acme:r:2", r#"{"n":2}"#)).await.unwrap();
    // A worker without lookup leaves the lost response unknown.
    let text =
        crm.destination_config("crm").lines().filter(|l| !l.starts_with("lookup")).collect::<Vec<_>>().join("\n");
    let config = Config::parse(&text).unwrap();
    let blind = config.destinations.iter().map(|(n, c)| (n.clone(), Destination::new(n, c.clone()).unwrap())).collect();
    let mut serial = options("w", blind);
    serial.concurrency = 1;
    drain(&db.ledger, serial).await;
    assert_eq!(state(&db.ledger, "acme:r:1").await.state, State::Unknown);
    let dests = destinations(&crm, "");
    let report = actionledger::reconcile::reconcile(&db.ledger, &dests["crm"], false, None, None).await.unwrap();
    assert_eq!(report.checked, 2);
    assert_eq!(report.findings.len(), 1);
    assert_eq!(report.findings[0].kind, actionledger::reconcile::FindingKind::Settleable);
    assert_eq!(state(&db.ledger, "acme:r:1").await.state, State::Unknown, "nothing applied without --apply");
    let apply = actionledger::reconcile::Apply { person: "Ana Lima".into() };
    let report =
        actionledger::reconcile::reconcile(&db.ledger, &dests["crm"], false, None, Some(&apply)).await.unwrap();
    assert_eq!(report.findings[0].settled_to, Some(State::Completed));
    let detail = db.ledger.detail(&ActionKey::parse("acme:r:1").unwrap()).await.unwrap();
    assert_eq!(detail.audit.last().unwrap().actor, "Ana Lima");
    assert_eq!(detail.lookups.len(), 1);
}

/// 1,000 actions, 30% of responses dropped after the commit and 10% 503s, 4 workers: exactly one
/// CRM record per key, and every action completed or visibly unknown or held.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn load_sqlite() {
    load(support::sqlite().await, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn load_postgres() {
    let Some(db) = support::postgres().await else { return };
    load(db, 1).await;
}

/// The same load with 16 slots per worker: claims of up to 16 actions whose attempts start in one
/// commit, results sharing group commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn load_batched_sqlite() {
    load(support::sqlite().await, 16).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn load_batched_postgres() {
    let Some(db) = support::postgres().await else { return };
    load(db, 16).await;
}

async fn load<S: Store>(db: TestDb<S>, batch: usize) {
    const ACTIONS: usize = 1000;
    let plan =
        FaultPlan { script: VecDeque::new(), rates: vec![(Fault::DropAfterCommit, 0.3), (Fault::Unavailable, 0.1)] };
    let crm = crm(Options { faults: plan, ..Options::default() }).await;
    for n in 0..ACTIONS {
        db.ledger.submit(&order(&format!("acme:load:{n:05}"), &format!(r#"{{"n":{n}}}"#))).await.unwrap();
    }
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let ledger = db.ledger.clone();
            let mut opts = options(&format!("load-{w}"), destinations(&crm, "max_attempts = 20\n"));
            opts.concurrency = opts.concurrency.max(batch);
            opts.batch = batch;
            tokio::spawn(async move { drain(&ledger, opts).await })
        })
        .collect();
    let mut total = Summary::default();
    for worker in workers {
        let s = worker.await.unwrap();
        total.completed += s.completed;
        total.settled_by_lookup += s.settled_by_lookup;
        total.retried += s.retried;
    }
    let counts = db.ledger.counts().await.unwrap();
    let count = |state| counts.iter().find(|(s, _)| *s == state).map_or(0, |(_, n)| *n);
    let stats = crm.stats();
    let store = std::any::type_name::<S>().rsplit("::").next().unwrap_or_default();
    println!(
        "load ({store}, batch {batch}): {ACTIONS} actions, CRM records {}, max records per key {}, idempotent replays {}, faults {:?}, \
         completed {}, unknown {}, held {}, settled by lookup {}, retries {}",
        stats.records,
        stats.max_records_per_external_ref,
        stats.idempotent_replays,
        stats.faults_injected,
        count(State::Completed),
        count(State::Unknown),
        count(State::Held),
        total.settled_by_lookup,
        total.retried,
    );
    assert_eq!(stats.max_records_per_external_ref, 1, "never two records for one key");
    let completed = usize::try_from(count(State::Completed)).unwrap();
    let visible = usize::try_from(count(State::Unknown) + count(State::Held)).unwrap();
    assert_eq!(completed + visible, ACTIONS, "every action completed or visibly unknown or held: {counts:?}");
    for n in 0..ACTIONS {
        let key = format!("acme:load:{n:05}");
        let action = state(&db.ledger, &key).await;
        let records = crm.records_for(&key);
        if action.state == State::Completed {
            assert_eq!(records.len(), 1, "{key}");
            assert_eq!(records[0]["id"].as_str(), action.destination_id.as_deref(), "{key}");
        } else {
            assert!(records.len() <= 1, "{key}");
        }
    }
    assert!(
        stats.faults_injected.values().sum::<u64>() > 300,
        "the faults really happened: {:?}",
        stats.faults_injected
    );
}

/// Rule 2, end to end: the first send writes and answers 500, a person retries, and two 503s
/// exhaust `max_attempts`. The CRM holds the record from the first send, so the action is
/// `unknown` for a person, never `failed` ("known not written").
async fn regression_a_failure_after_a_possible_write_is_unknown_not_failed<S: Store>(db: TestDb<S>) {
    let faults = [Fault::ErrorAfterWrite, Fault::Unavailable, Fault::Unavailable, Fault::Unavailable];
    let crm = crm(Options { faults: script(&faults), ..Options::default() }).await;
    // An idempotency key, no lookup: nothing settles the first outcome automatically.
    let text =
        crm.destination_config("crm").lines().filter(|l| !l.starts_with("lookup")).collect::<Vec<_>>().join("\n")
            + "\nmax_attempts = 2\n";
    let config = Config::parse(&text).unwrap();
    let dests = || -> BTreeMap<String, Destination> {
        config.destinations.iter().map(|(n, c)| (n.clone(), Destination::new(n, c.clone()).unwrap())).collect()
    };
    let key = "acme:written-then-503";
    db.ledger.submit(&order(key, r#"{"a":1}"#)).await.unwrap();
    drain(&db.ledger, options("w1", dests())).await;
    assert_eq!(state(&db.ledger, key).await.state, State::Unknown);
    assert_eq!(crm.stats().records, 1, "the first send wrote");

    // The person's retry, decided with the configuration: its idempotency key still covers the
    // first request, so a repeat is recognised and no check of the destination is asked.
    let configured = db.ledger.clone().with_destinations(Destinations::new(dests(), None).catalog());
    configured.manual(&support::person_request(key, ManualCommand::Retry)).await.unwrap();
    drain(&db.ledger, options("w2", dests())).await;
    let action = state(&db.ledger, key).await;
    assert_eq!(crm.stats().records, 1, "the CRM holds the record from the first send");
    assert_eq!(action.attempts, 3, "one send, then two 503s");
    assert_eq!(action.state, State::Unknown, "not failed: the destination may hold the record");
    assert!(action.may_have_written);
    assert!(action.last_error.as_deref().unwrap_or_default().contains("unknown, not failed"), "{action:?}");
}

/// A destination block without the lines starting with any of `dropped`.
fn destinations_without(crm: &SimCrm, dropped: &[&str]) -> BTreeMap<String, Destination> {
    let text = crm
        .destination_config("crm")
        .lines()
        .filter(|line| !dropped.iter().any(|d| line.starts_with(d)))
        .collect::<Vec<_>>()
        .join("\n");
    let config = Config::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    config.destinations.iter().map(|(n, c)| (n.clone(), Destination::new(n, c.clone()).unwrap())).collect()
}

/// The seed: "a new version does not automatically mean create a second customer"; it is a
/// reviewed update of the existing record, performed once.
async fn a_reviewed_update_changes_the_one_record_once<S: Store>(db: TestDb<S>) {
    let crm = crm(Options::default()).await;
    let key = "acme:order:ORD-1042:create-task";
    db.ledger.submit(&order(key, r#"{"qty":1}"#)).await.unwrap();
    drain(&db.ledger, options("w1", destinations(&crm, ""))).await;
    assert_eq!(state(&db.ledger, key).await.state, State::Completed);
    let changed = db.ledger.submit(&order(key, r#"{"qty":2}"#)).await.unwrap();
    assert_eq!(changed.outcome, actionledger::domain::SubmitOutcome::Conflict);
    // Nothing runs on a proposal until a person decides.
    drain(&db.ledger, options("w1", destinations(&crm, ""))).await;
    assert_eq!((crm.stats().records, crm.stats().updates), (1, 0));

    let approved = db
        .ledger
        .manual(&support::person_request(key, actionledger::domain::ManualCommand::Approve { proposal: None }))
        .await;
    let update = approved.unwrap().update.expect("an update action");
    let redelivered = db.ledger.submit(&order(key, r#"{"qty":2}"#)).await.unwrap();
    assert_eq!(redelivered.outcome, actionledger::domain::SubmitOutcome::Duplicate);
    let summary = drain(&db.ledger, options("w2", destinations(&crm, ""))).await;
    assert_eq!(summary.completed, 1, "{summary:?} {:?}", db.ledger.detail(&update.key).await.unwrap());
    drain(&db.ledger, options("w3", destinations(&crm, ""))).await;

    let stats = crm.stats();
    assert_eq!((stats.records, stats.updates, stats.reused_keys_refused), (1, 1, 0), "one record, updated once");
    let records = crm.records_for(key);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["data"]["qty"], 2, "the record carries the new quantity");
    let done = db.ledger.detail(&update.key).await.unwrap();
    assert_eq!(done.action.state, State::Completed);
    assert_eq!(done.action.destination_id.as_deref(), Some("R-000001"), "the same record");
    assert_eq!(done.attempts.len(), 1);
    assert_eq!(done.attempts[0].idempotency_key.as_deref(), Some("acme:order:ORD-1042:create-task#update-2"));
    let original = state(&db.ledger, key).await;
    assert_eq!((original.state, original.payload_revision), (State::Completed, 2));
}

async fn an_update_the_destination_cannot_perform_is_held_for_a_person<S: Store>(db: TestDb<S>) {
    let crm = crm(Options::default()).await;
    let key = "acme:order:12:create-task";
    let no_update = || destinations_without(&crm, &["update"]);
    db.ledger.submit(&order(key, r#"{"qty":1}"#)).await.unwrap();
    drain(&db.ledger, options("w1", no_update())).await;
    db.ledger.submit(&order(key, r#"{"qty":2}"#)).await.unwrap();
    let approved = db
        .ledger
        .manual(&support::person_request(key, actionledger::domain::ManualCommand::Approve { proposal: None }))
        .await;
    let update = approved.unwrap().update.unwrap();
    let summary = drain(&db.ledger, options("w2", no_update())).await;
    assert_eq!((summary.claimed, summary.held), (1, 1));
    let held = state(&db.ledger, update.key.as_str()).await;
    assert_eq!(held.state, State::Held);
    let reason = held.last_error.unwrap_or_default();
    assert!(reason.contains("declares no update request") && reason.contains("R-000001"), "{reason}");
    assert_eq!((crm.stats().records, crm.stats().updates, crm.stats().requests), (1, 0, 1), "nothing sent");
}

/// Rule 9: a destination that keeps idempotency keys refuses a reused key with another body
/// (422). The first request under the key answered 500 and the CRM kept that answer for the key;
/// a lookup showed nothing written; the person approved a changed payload. The worker looks
/// first (the new key does not cover the earlier request), finds nothing, and sends under
/// `KEY#rev-2`: one record, with the new body, and no 422.
async fn a_new_body_approved_after_a_send_goes_out_under_a_derived_key<S: Store>(db: TestDb<S>) {
    let crm = crm(Options { faults: script(&[Fault::ErrorBeforeWrite]), ..Options::default() }).await;
    let key = "acme:order:13:create-task";
    db.ledger.submit(&order(key, r#"{"qty":1}"#)).await.unwrap();
    // Without a lookup the uncertain outcome stays unknown for a person.
    let first = drain(&db.ledger, options("w1", destinations_without(&crm, &["lookup"]))).await;
    assert_eq!(first.unknown, 1);
    let changed = db.ledger.submit(&order(key, r#"{"qty":2}"#)).await.unwrap();
    assert_eq!(
        (changed.outcome, changed.action.state),
        (actionledger::domain::SubmitOutcome::Conflict, State::Unknown)
    );
    // A person looks: nothing was written. The proposal keeps it from running again unreviewed.
    let dests = destinations(&crm, "");
    let action = state(&db.ledger, key).await;
    let looked = actionledger::reconcile::look_up(
        &db.ledger,
        &dests["crm"],
        &action,
        "Ana Lima",
        actionledger::domain::ActorKind::Person,
        None,
    )
    .await
    .unwrap();
    assert_eq!(looked.report.verdict, actionledger::domain::LookupVerdict::NotFound);
    assert_eq!(state(&db.ledger, key).await.state, State::Conflict);
    let approved = db
        .ledger
        .manual(&support::person_request(key, actionledger::domain::ManualCommand::Approve { proposal: None }))
        .await;
    assert_eq!(approved.unwrap().action.sending_key(), "acme:order:13:create-task#rev-2");

    let lookups_before = crm.stats().lookups;
    let second = drain(&db.ledger, options("w2", destinations(&crm, ""))).await;
    assert_eq!(second.completed, 1);
    let stats = crm.stats();
    assert_eq!(stats.reused_keys_refused, 0, "no 422: the new body went out under a new key");
    assert_eq!(stats.records, 1, "one record for the order");
    assert!(stats.lookups > lookups_before, "the worker looked before sending under the new key");
    assert_eq!(crm.records_for(key)[0]["data"]["qty"], 2);
    let detail = db.ledger.detail(&ActionKey::parse(key).unwrap()).await.unwrap();
    let keys: Vec<Option<&str>> = detail.attempts.iter().map(|a| a.idempotency_key.as_deref()).collect();
    assert_eq!(keys, vec![Some(key), Some("acme:order:13:create-task#rev-2")]);
    assert_eq!(detail.action.key.as_str(), key, "the action key itself never changes");

    // The same body under the old key is what the CRM would have refused.
    let mut under_the_old_key = detail.action.clone();
    under_the_old_key.idempotency_key = None;
    let refused = dests["crm"].send(&under_the_old_key, None).await.unwrap();
    assert!(
        matches!(&refused, actionledger::destination::SendOutcome::Permanent { response, .. } if response.status == 422),
        "{refused:?}"
    );
}

/// An update is looked up like any action: its response lost, the lookup finds the record carrying
/// the new data and settles it `completed`, with no second update request.
async fn a_lost_update_response_is_settled_by_lookup_without_a_second_update<S: Store>(db: TestDb<S>) {
    let crm = crm(Options::default()).await;
    let key = "acme:order:14:create-task";
    db.ledger.submit(&order(key, r#"{"qty":1}"#)).await.unwrap();
    drain(&db.ledger, options("w1", destinations(&crm, ""))).await;
    db.ledger.submit(&order(key, r#"{"qty":2}"#)).await.unwrap();
    let approved = db
        .ledger
        .manual(&support::person_request(key, actionledger::domain::ManualCommand::Approve { proposal: None }))
        .await;
    let update = approved.unwrap().update.unwrap();
    // A worker sends the update; the CRM applies it, and the answer is lost on the way back.
    let dests = destinations(&crm, "");
    let claim = db.ledger.claim("w-lost", LEASE, 1).await.unwrap().pop().unwrap();
    assert_eq!(claim.key(), &update.key);
    let attempt = db.ledger.start_attempt(&claim).await.unwrap();
    let sent = dests["crm"].send(&claim.action, None).await.unwrap();
    assert!(matches!(sent, actionledger::destination::SendOutcome::Created { .. }), "{sent:?}");
    let lost = Report {
        outcome: Outcome::Unknown,
        error: Some("connection lost".into()),
        evidence: actionledger::domain::Evidence::default(),
    };
    db.ledger.record_result(&claim, attempt, &lost).await.unwrap();
    let summary = drain(&db.ledger, options("w2", dests)).await;
    assert_eq!(summary.settled_by_lookup, 1);
    let detail = db.ledger.detail(&update.key).await.unwrap();
    assert_eq!((detail.action.state, detail.action.destination_id.as_deref()), (State::Completed, Some("R-000001")));
    assert_eq!(detail.lookups.last().unwrap().verdict, actionledger::domain::LookupVerdict::Found);
    assert_eq!((crm.stats().records, crm.stats().updates), (1, 1), "updated once");
}
