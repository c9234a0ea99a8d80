//! Changed payloads after the fact, on both stores: a new version of a completed action is a
//! reviewed update (`KEY#update-N`), never a second create; a new body after a possible send goes
//! out under a derived idempotency key (`KEY#rev-N`). docs/RULES.md, "Changed payloads".
//! Against the simulated CRM: a conditional update (`If-Match`) never overwrites a change made at
//! the CRM since the ledger last wrote the record; an unconditional one says so before it runs.

use crate::support::{TestDb, checked_cancel, order, person_request, run_cli};
use actionledger::Ledger;
use actionledger::config::Config;
use actionledger::destination::Destinations;
use actionledger::domain::{
    ActionKey, ActorKind, AttemptOutcome, Event, Evidence, ManualCommand, RawSubmission, Refusal, State, SubmitOutcome,
    UpdateCondition, UpdateGuard,
};
use actionledger::ledger::{LedgerError, Outcome, Report};
use actionledger::sim_crm::{Options, SimCrm};
use actionledger::store::{ListFilter, Store};
use actionledger::worker::{self, Summary, WorkerOptions};
use serde_json::{Value, json};
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(30);

conformance!(
    approving_a_new_version_of_a_completed_action_records_a_linked_update,
    the_approved_new_payload_delivered_again_is_a_duplicate,
    rejecting_a_new_version_of_a_completed_action_drops_it,
    an_update_key_that_cannot_be_made_or_is_taken_is_refused_and_nothing_changes,
    a_new_body_after_a_send_carries_a_derived_idempotency_key,
    a_proposal_is_listed_with_the_conflicts_whatever_the_state,
    a_conditional_update_of_a_record_changed_at_the_crm_goes_to_conflict_and_overwrites_nothing,
    a_conditional_update_of_an_unchanged_record_completes_and_the_next_expects_its_version,
    an_update_without_a_condition_overwrites_and_show_says_so,
    a_conditional_update_whose_last_written_version_is_not_known_is_held_and_not_sent,
    a_failed_update_leaves_its_action_as_it_was_and_a_completed_one_is_taken_on,
    an_uncertain_update_is_taken_on_when_a_lookup_finds_it_or_a_person_resolves_it,
    an_update_numbered_above_a_revision_approved_before_completion_is_shown,
);

fn key(text: &str) -> ActionKey {
    ActionKey::parse(text).unwrap()
}

fn raw(key: &str, payload: &str) -> RawSubmission {
    RawSubmission { key: Some(key.to_owned()), payload: payload.as_bytes().to_vec(), ..Default::default() }
}

/// A submitted action with key `k`, claimed, attempted and confirmed by the destination as `id`.
async fn completed<S: Store>(ledger: &Ledger<S>, k: &str, payload: &str, id: &str) {
    ledger.submit(&raw(k, payload)).await.unwrap();
    let claim = ledger.claim("w1", LEASE, 1).await.unwrap().pop().expect("claimable");
    let attempt = ledger.start_attempt(&claim).await.unwrap();
    let report = Report {
        outcome: Outcome::Completed { destination_id: id.to_owned() },
        error: None,
        evidence: Evidence::default(),
    };
    ledger.record_result(&claim, attempt, &report).await.unwrap();
}

async fn approving_a_new_version_of_a_completed_action_records_a_linked_update<S: Store>(db: TestDb<S>) {
    let ledger = &db.ledger;
    let k = "acme:order:ORD-1042:create-task";
    completed(ledger, k, r#"{"qty":1}"#, "R-1").await;
    let changed = ledger.submit(&raw(k, r#"{"qty":2}"#)).await.unwrap();
    assert_eq!((changed.outcome, changed.action.state), (SubmitOutcome::Conflict, State::Completed));
    assert!(changed.action.proposal.is_some(), "the proposal waits beside the completed action");

    let approved = ledger.manual(&person_request(k, ManualCommand::Approve { proposal: None })).await.unwrap();
    assert_eq!(approved.transition, None, "the completed action stays completed");
    let original = ledger.store().find(&key(k)).await.unwrap().unwrap();
    assert_eq!((original.state, original.payload_revision), (State::Completed, 1));
    assert_eq!(original.payload.value()["qty"], 1, "it keeps what the destination holds until the update completes");
    assert!(original.proposal.is_none());
    assert_eq!(original.destination_id.as_deref(), Some("R-1"), "the record it created is unchanged");

    let update = approved.update.expect("an update action");
    let stored = ledger.store().find(&update.key).await.unwrap().expect("the update action is recorded");
    assert_eq!(stored.key.as_str(), "acme:order:ORD-1042:create-task#update-2");
    assert_eq!((stored.state, stored.ownership_version), (State::Pending, 0));
    assert_eq!(stored.updates.as_ref(), Some(&key(k)), "it names the action it updates");
    assert_eq!(stored.updates_destination_id.as_deref(), Some("R-1"), "and carries its destination id");
    assert_eq!(stored.payload.value()["qty"], 2);

    // The revision history is in the audit trail of the original; the update names its person.
    let audit = ledger.detail(&key(k)).await.unwrap().audit;
    let approval = audit.last().unwrap();
    assert_eq!(
        (approval.event, approval.from_state, approval.to_state),
        (Event::Approved, Some(State::Completed), State::Completed)
    );
    let reason = approval.reason.as_deref().unwrap();
    assert!(reason.contains("payload revision 2") && reason.contains("keeps payload revision 1"), "{reason}");
    assert!(reason.contains("approved as update action acme:order:ORD-1042:create-task#update-2"), "{reason}");
    assert!(!reason.contains("performed by"), "nothing is performed yet: {reason}");
    let created = ledger.detail(&stored.key).await.unwrap().audit;
    assert_eq!(created.len(), 1);
    assert_eq!((created[0].actor.as_str(), created[0].actor_kind), ("Ana Lima", ActorKind::Person));

    // The update is claimed and fenced like any action.
    let claim = ledger.claim("w2", LEASE, 10).await.unwrap();
    assert_eq!(claim.iter().map(|c| c.key().as_str()).collect::<Vec<_>>(), vec![stored.key.as_str()]);
    assert_eq!(claim[0].ownership_version(), 1);
}

async fn the_approved_new_payload_delivered_again_is_a_duplicate<S: Store>(db: TestDb<S>) {
    let ledger = &db.ledger;
    let k = "acme:order:7:create-task";
    completed(ledger, k, r#"{"qty":1}"#, "R-7").await;
    ledger.submit(&raw(k, r#"{"qty":2}"#)).await.unwrap();
    ledger.manual(&person_request(k, ManualCommand::Approve { proposal: None })).await.unwrap();
    let again = ledger.submit(&raw(k, r#"{"qty":2}"#)).await.unwrap();
    assert_eq!(again.outcome, SubmitOutcome::Duplicate, "the new version is the approved one now");
    assert!(again.action.proposal.is_none());
    let third = ledger.submit(&raw(k, r#"{"qty":3}"#)).await.unwrap();
    assert_eq!(third.outcome, SubmitOutcome::Conflict, "a further change needs a new review");
    let next = ledger.manual(&person_request(k, ManualCommand::Approve { proposal: None })).await.unwrap();
    assert_eq!(next.update.unwrap().key.as_str(), "acme:order:7:create-task#update-3");
}

async fn rejecting_a_new_version_of_a_completed_action_drops_it<S: Store>(db: TestDb<S>) {
    let ledger = &db.ledger;
    let k = "acme:order:8:create-task";
    completed(ledger, k, r#"{"qty":1}"#, "R-8").await;
    ledger.submit(&raw(k, r#"{"qty":2}"#)).await.unwrap();
    let rejected = ledger.manual(&person_request(k, ManualCommand::Reject { proposal: None })).await.unwrap();
    assert_eq!((rejected.transition, rejected.update), (None, None));
    let action = ledger.store().find(&key(k)).await.unwrap().unwrap();
    assert_eq!((action.state, action.payload_revision, action.proposal.is_none()), (State::Completed, 1, true));
    assert_eq!(action.payload.value()["qty"], 1);
    assert!(ledger.store().find(&key("acme:order:8:create-task#update-2")).await.unwrap().is_none());
    let refused = ledger.manual(&person_request(k, ManualCommand::Approve { proposal: None })).await.unwrap_err();
    assert!(matches!(refused, LedgerError::Refused(Refusal::NoProposal { .. })), "{refused}");
}

async fn an_update_key_that_cannot_be_made_or_is_taken_is_refused_and_nothing_changes<S: Store>(db: TestDb<S>) {
    let ledger = &db.ledger;
    let long = "k".repeat(250);
    completed(ledger, &long, r#"{"qty":1}"#, "R-1").await;
    ledger.submit(&raw(&long, r#"{"qty":2}"#)).await.unwrap();
    let refused = ledger.manual(&person_request(&long, ManualCommand::Approve { proposal: None })).await.unwrap_err();
    assert!(matches!(refused, LedgerError::Refused(Refusal::DerivedKeyRefused { .. })), "{refused}");
    let message = refused.to_string();
    assert!(message.contains("259 bytes long; at most 255"), "{message}");
    let action = ledger.store().find(&key(&long)).await.unwrap().unwrap();
    assert_eq!((action.payload_revision, action.proposal.is_some()), (1, true), "nothing changed");

    let k = "acme:order:9:create-task";
    completed(ledger, k, r#"{"qty":1}"#, "R-9").await;
    ledger.submit(&raw("acme:order:9:create-task#update-2", "{}")).await.unwrap();
    ledger.submit(&raw(k, r#"{"qty":2}"#)).await.unwrap();
    let taken = ledger.manual(&person_request(k, ManualCommand::Approve { proposal: None })).await.unwrap_err();
    assert!(matches!(taken, LedgerError::Refused(Refusal::UpdateKeyTaken { .. })), "{taken}");
    let action = ledger.store().find(&key(k)).await.unwrap().unwrap();
    assert_eq!((action.payload_revision, action.proposal.is_some()), (1, true), "rolled back whole");
    assert_eq!(ledger.detail(&key(k)).await.unwrap().audit.last().unwrap().event, Event::PayloadChanged);
}

async fn a_new_body_after_a_send_carries_a_derived_idempotency_key<S: Store>(db: TestDb<S>) {
    let ledger = &db.ledger;
    // Approved before anything was sent: the action key is still unused, and stays the key.
    let fresh = "acme:order:10:create-task";
    ledger.submit(&raw(fresh, r#"{"qty":1}"#)).await.unwrap();
    ledger.submit(&raw(fresh, r#"{"qty":2}"#)).await.unwrap();
    ledger.manual(&person_request(fresh, ManualCommand::Approve { proposal: None })).await.unwrap();
    let approved = ledger.store().find(&key(fresh)).await.unwrap().unwrap();
    assert_eq!((approved.sending_key(), approved.payload_revision), (fresh, 2));
    ledger.manual(&person_request(fresh, ManualCommand::Cancel)).await.unwrap();

    // Sent once (a temporary failure), then changed and approved: a new key for the new body.
    let k = "acme:order:11:create-task";
    ledger.submit(&raw(k, r#"{"qty":1}"#)).await.unwrap();
    let claim = ledger.claim("w1", LEASE, 1).await.unwrap().pop().unwrap();
    let attempt = ledger.start_attempt(&claim).await.unwrap();
    let later =
        Report { outcome: Outcome::RetryLater { after: Duration::ZERO }, error: None, evidence: Evidence::default() };
    ledger.record_result(&claim, attempt, &later).await.unwrap();
    ledger.submit(&raw(k, r#"{"qty":2}"#)).await.unwrap();
    let approved = ledger.manual(&person_request(k, ManualCommand::Approve { proposal: None })).await.unwrap();
    assert_eq!(approved.action.state, State::Pending);
    assert_eq!(approved.action.key.as_str(), k, "the action key never changes");
    assert_eq!(approved.action.sending_key(), "acme:order:11:create-task#rev-2");
    let reason = ledger.detail(&key(k)).await.unwrap().audit.last().unwrap().reason.clone().unwrap();
    assert!(reason.contains("idempotency key acme:order:11:create-task#rev-2"), "{reason}");

    let claim = ledger.claim("w1", LEASE, 1).await.unwrap().pop().unwrap();
    ledger.start_attempt(&claim).await.unwrap();
    let attempts = ledger.detail(&key(k)).await.unwrap().attempts;
    let keys: Vec<Option<&str>> = attempts.iter().map(|a| a.idempotency_key.as_deref()).collect();
    assert_eq!(keys, vec![Some(k), Some("acme:order:11:create-task#rev-2")], "each attempt states its key");
}

async fn a_proposal_is_listed_with_the_conflicts_whatever_the_state<S: Store>(db: TestDb<S>) {
    let ledger = &db.ledger;
    completed(ledger, "a:done", r#"{"qty":1}"#, "R-1").await;
    ledger.submit(&raw("a:done", r#"{"qty":2}"#)).await.unwrap();
    ledger.submit(&raw("a:pending", "{}")).await.unwrap();
    ledger.submit(&raw("a:conflict", "{}")).await.unwrap();
    ledger.submit(&raw("a:conflict", "[]")).await.unwrap();
    let pane = ListFilter { state: Some(State::Conflict), or_proposed: true, limit: 10, ..ListFilter::default() };
    let listed: Vec<String> = ledger.list(&pane).await.unwrap().iter().map(|a| a.key.to_string()).collect();
    assert_eq!(listed, vec!["a:conflict".to_owned(), "a:done".to_owned()]);
    let by_state = ListFilter { or_proposed: false, ..pane };
    assert_eq!(ledger.list(&by_state).await.unwrap().len(), 1, "the state alone lists the conflict only");
}

/// The simulated CRM's own destination block; with `conditional`, its update request carries
/// `If-Match` with the version the CRM answered the last write with.
fn crm_config(crm: &SimCrm, conditional: bool) -> String {
    let block = crm.destination_config("crm");
    if conditional {
        block.replace("update = { ", "update = { conditional = \"if-match\", version_pointer = \"/version\", ")
    } else {
        block
    }
}

async fn start_crm() -> SimCrm {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    SimCrm::start(listener, Options::default()).unwrap()
}

async fn drain<S: Store>(ledger: &Ledger<S>, config: &str) -> Summary {
    let config = Config::parse(config).unwrap_or_else(|e| panic!("{e}\n{config}"));
    let options = WorkerOptions {
        id: "w1".to_owned(),
        concurrency: 2,
        batch: 100,
        lease: LEASE,
        poll_interval: Duration::from_millis(10),
        drain: true,
        destinations: Destinations::from_config(&config).unwrap(),
        progress: false,
    };
    tokio::time::timeout(Duration::from_mins(2), worker::run(ledger.clone(), options, std::future::pending()))
        .await
        .expect("the worker drained in time")
        .expect("the worker ran")
}

/// Submits `payload` as a new version of the completed action `k` and approves it: the update
/// action it records.
async fn approve_new_version<S: Store>(ledger: &Ledger<S>, k: &str, payload: &str) -> ActionKey {
    let changed = ledger.submit(&order(k, payload)).await.unwrap();
    assert_eq!(changed.outcome, SubmitOutcome::Conflict);
    let approved = ledger.manual(&person_request(k, ManualCommand::Approve { proposal: None })).await.unwrap();
    approved.update.expect("an update action").key
}

/// The seed's If-Match: someone adds a note at the CRM after the ledger created the record; the
/// approved new version must not wipe it. The update is refused by the CRM (412), nothing is
/// written, and the update waits in `conflict` with both versions as evidence.
async fn a_conditional_update_of_a_record_changed_at_the_crm_goes_to_conflict_and_overwrites_nothing<S: Store>(
    db: TestDb<S>,
) {
    let crm = start_crm().await;
    let config = crm_config(&crm, true);
    let k = "acme:order:ORD-1042:create-task";
    db.ledger.submit(&order(k, r#"{"qty":1}"#)).await.unwrap();
    drain(&db.ledger, &config).await;
    assert_eq!(crm.record("tasks", "R-000001").unwrap()["version"], 1);
    let edited = crm.edit_record("tasks", "R-000001", &json!({"data": {"qty": 1, "note": "call before delivery"}}));
    assert_eq!(edited.unwrap()["version"], 2, "someone else's change moved the version");

    let update = approve_new_version(&db.ledger, k, r#"{"qty":2}"#).await;
    let summary = drain(&db.ledger, &config).await;
    assert_eq!(summary.conflict, 1, "{summary:?}");

    // The CRM was asked once, refused, and still holds the other person's change.
    let stats = crm.stats();
    assert_eq!((stats.records, stats.updates, stats.preconditions_failed), (1, 0, 1), "{stats:?}");
    let record = crm.record("tasks", "R-000001").unwrap();
    assert_eq!(record["data"], json!({"qty": 1, "note": "call before delivery"}), "nothing was overwritten");
    assert_eq!(record["version"], 2);

    let detail = db.ledger.detail(&update).await.unwrap();
    assert_eq!(detail.action.state, State::Conflict);
    let attempt = detail.attempts.last().unwrap();
    assert_eq!((attempt.outcome, attempt.evidence.status), (Some(AttemptOutcome::FailedPermanent), Some(412)));
    // What the destination holds now: the refusal's answer, with the note and its version.
    let held: Value = serde_json::from_str(attempt.evidence.body.as_deref().unwrap()).unwrap();
    assert_eq!(
        (held["record"]["data"]["note"].as_str(), &held["record"]["version"]),
        (Some("call before delivery"), &json!(2))
    );
    // What the ledger last wrote: named in the error, and kept as the create's own evidence.
    let error = attempt.error.as_deref().unwrap();
    assert!(error.contains(r#"expected version "1""#) && error.contains(r#"holds version "2""#), "{error}");
    assert!(error.contains(&format!("{k} attempt 1")) && error.contains("nothing was overwritten"), "{error}");
    let (writer, written) = db.ledger.last_write(&detail.action).await.unwrap().unwrap();
    assert_eq!(writer.as_str(), k);
    let written: Value = serde_json::from_str(written.unwrap().evidence.body.as_deref().unwrap()).unwrap();
    assert_eq!((&written["version"], &written["data"]), (&json!(1), &json!({"qty": 1})));
    let entry = detail.audit.last().unwrap();
    assert_eq!(
        (entry.event, entry.from_state, entry.to_state),
        (Event::ChangedAtDestination, Some(State::InProgress), State::Conflict)
    );
    assert_eq!(detail.action.last_error.as_deref(), Some(error));

    // Nothing runs it again by itself, and a person's retry is refused by the CRM the same way.
    drain(&db.ledger, &config).await;
    assert_eq!(crm.stats().requests, stats.requests, "nothing more was sent");
    db.ledger.manual(&person_request(update.as_str(), ManualCommand::Retry)).await.unwrap();
    drain(&db.ledger, &config).await;
    assert_eq!((crm.stats().updates, crm.stats().preconditions_failed), (0, 2));
    assert_eq!(db.ledger.store().find(&update).await.unwrap().unwrap().state, State::Conflict);
    assert_eq!(crm.record("tasks", "R-000001").unwrap()["data"]["note"], "call before delivery");
}

/// An unchanged record is updated once under `If-Match`, and the next update expects the version
/// that update was answered with, not the create's.
async fn a_conditional_update_of_an_unchanged_record_completes_and_the_next_expects_its_version<S: Store>(
    db: TestDb<S>,
) {
    let crm = start_crm().await;
    let config = crm_config(&crm, true);
    let k = "acme:order:7:create-task";
    db.ledger.submit(&order(k, r#"{"qty":1}"#)).await.unwrap();
    drain(&db.ledger, &config).await;
    let second = approve_new_version(&db.ledger, k, r#"{"qty":2}"#).await;
    let summary = drain(&db.ledger, &config).await;
    assert_eq!(summary.completed, 1, "{summary:?}");
    let record = crm.record("tasks", "R-000001").unwrap();
    assert_eq!((&record["data"], &record["version"]), (&json!({"qty": 2}), &json!(2)));

    let third = approve_new_version(&db.ledger, k, r#"{"qty":3}"#).await;
    let (writer, _) =
        db.ledger.last_write(&db.ledger.store().find(&third).await.unwrap().unwrap()).await.unwrap().unwrap();
    assert_eq!(writer, second, "the last write is the update before it");
    drain(&db.ledger, &config).await;
    let stats = crm.stats();
    assert_eq!((stats.records, stats.updates, stats.preconditions_failed), (1, 2, 0), "{stats:?}");
    let record = crm.record("tasks", "R-000001").unwrap();
    assert_eq!((&record["data"], &record["version"]), (&json!({"qty": 3}), &json!(3)));
    for key in [&second, &third] {
        assert_eq!(db.ledger.store().find(key).await.unwrap().unwrap().state, State::Completed);
    }

    // show says the update is conditional, from the configuration's declaration alone.
    let catalog = actionledger::destination::catalog_of(&Config::parse(&config).unwrap());
    let shown = db.ledger.clone().with_destinations(catalog).detail(&third).await.unwrap();
    assert_eq!(shown.update_guard, Some(UpdateGuard::Conditional(UpdateCondition::IfMatch)));
    let document = actionledger::document::detail(&shown);
    assert_eq!(
        (document["update"]["condition"].as_str(), &document["update"]["overwrites"]),
        (Some("if-match"), &json!(false))
    );
}

/// A destination that declares no condition still updates, overwriting a change made at the CRM,
/// and `show` (text and JSON) says beforehand that the update is unconditional.
async fn an_update_without_a_condition_overwrites_and_show_says_so<S: Store>(db: TestDb<S>) {
    let crm = start_crm().await;
    let config = crm_config(&crm, false);
    let k = "acme:order:8:create-task";
    db.ledger.submit(&order(k, r#"{"qty":1}"#)).await.unwrap();
    drain(&db.ledger, &config).await;
    crm.edit_record("tasks", "R-000001", &json!({"data": {"qty": 1, "note": "call before delivery"}})).unwrap();
    let update = approve_new_version(&db.ledger, k, r#"{"qty":2}"#).await;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("actionledger.toml");
    std::fs::write(&path, &config).unwrap();
    let path = path.to_str().unwrap();
    let text = run_cli(&db.url, &["show", update.as_str(), "--config", path]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("update             unconditional:"), "{text}");
    assert!(text.contains("overwrites whatever record R-000001 holds at the destination"), "{text}");
    let json_out = run_cli(&db.url, &["show", update.as_str(), "--json", "--config", path]);
    let document: Value = serde_json::from_slice(&json_out.stdout).unwrap();
    assert_eq!(
        (document["update"]["condition"].as_str(), &document["update"]["overwrites"]),
        (Some("unconditional"), &json!(true)),
        "{document}"
    );
    // Without the configuration, show does not guess.
    let unknown = run_cli(&db.url, &["show", update.as_str(), "--json"]);
    let unknown: Value = serde_json::from_slice(&unknown.stdout).unwrap();
    assert_eq!(unknown["update"]["condition"], "unknown");

    let summary = drain(&db.ledger, &config).await;
    assert_eq!(summary.completed, 1, "{summary:?}");
    let stats = crm.stats();
    assert_eq!((stats.records, stats.updates, stats.preconditions_failed), (1, 1, 0), "{stats:?}");
    assert_eq!(crm.record("tasks", "R-000001").unwrap()["data"], json!({"qty": 2}), "the note was overwritten");
}

/// The create completed without an answer naming a version (as when a lookup or a person settles
/// it): the update is held for a person rather than sent without its condition.
async fn a_conditional_update_whose_last_written_version_is_not_known_is_held_and_not_sent<S: Store>(db: TestDb<S>) {
    let crm = start_crm().await;
    let k = "acme:order:9:create-task";
    completed(&db.ledger, k, r#"{"qty":1}"#, "R-000001").await;
    db.ledger.submit(&raw(k, r#"{"qty":2}"#)).await.unwrap();
    let approved = db.ledger.manual(&person_request(k, ManualCommand::Approve { proposal: None })).await.unwrap();
    let update = approved.update.unwrap().key;
    // The update action goes to the CRM like the action it updates (which named no destination).
    let config = crm_config(&crm, true) + "[worker]\ndefault_destination = \"crm\"\n";
    let summary = drain(&db.ledger, &config).await;
    assert_eq!(summary.held, 1, "{summary:?}");
    assert_eq!(crm.stats().requests, 0, "nothing was sent");
    let held = db.ledger.store().find(&update).await.unwrap().unwrap();
    assert_eq!(held.state, State::Held);
    let reason = held.last_error.unwrap_or_default();
    assert!(reason.contains("updates only with If-Match") && reason.contains("names no version"), "{reason}");
}

/// The action an update changes takes the new payload on only when the update completed at the
/// destination. An update that fails (the CRM answers 404) leaves the action's payload, payload
/// revision and audit trail as they were, the CRM's record unchanged, and `show` lists the failed
/// update beside the action. The next approval takes the next key; once that update completes,
/// the action holds its payload and its audit trail says which update performed it.
async fn a_failed_update_leaves_its_action_as_it_was_and_a_completed_one_is_taken_on<S: Store>(db: TestDb<S>) {
    let crm = start_crm().await;
    let config = crm_config(&crm, false);
    let failing = config.replace("/tasks/{{destination_id}}", "/gone/{{destination_id}}");
    assert_ne!(failing, config);
    let l = &db.ledger;
    let k = "acme:order:ORD-77:create-task";
    l.submit(&order(k, r#"{"qty":1}"#)).await.unwrap();
    drain(l, &config).await;
    let id = l.store().find(&key(k)).await.unwrap().unwrap().destination_id.unwrap();
    let before = l.store().find(&key(k)).await.unwrap().unwrap();
    let audit_before = l.detail(&key(k)).await.unwrap().audit;

    let first = approve_new_version(l, k, r#"{"qty":2}"#).await;
    assert_eq!(first.as_str(), "acme:order:ORD-77:create-task#update-2");
    let summary = drain(l, &failing).await;
    assert_eq!(summary.failed, 1, "{summary:?}");
    let failed = l.store().find(&first).await.unwrap().unwrap();
    assert_eq!(failed.state, State::Failed);
    assert_eq!(crm.stats().updates, 0, "nothing was changed at the CRM");
    assert_eq!(crm.record("tasks", &id).unwrap()["data"], json!({"qty": 1}));

    let after = l.store().find(&key(k)).await.unwrap().unwrap();
    assert_eq!(after.payload.value(), before.payload.value(), "the action keeps the payload the CRM holds");
    assert_eq!((after.payload_revision, after.state), (1, State::Completed));
    let audit = l.detail(&key(k)).await.unwrap().audit;
    assert_eq!(audit.len(), audit_before.len() + 2, "the proposal and its approval, nothing more");
    assert!(audit.iter().all(|e| e.event != Event::UpdateApplied), "{audit:?}");
    assert!(audit.iter().all(|e| !e.reason.as_deref().unwrap_or_default().contains("performed by")), "{audit:?}");

    let detail = l.detail(&key(k)).await.unwrap();
    assert_eq!(
        detail.updates.iter().map(|u| (u.key.clone(), u.state)).collect::<Vec<_>>(),
        [(first.clone(), State::Failed)]
    );
    let shown = run_cli(&db.url, &["show", k]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(text.contains("update acme:order:ORD-77:create-task#update-2 failed: "), "{text}");
    assert!(text.contains("acme:order:ORD-77:create-task keeps payload revision 1"), "{text}");
    let json_out = run_cli(&db.url, &["show", k, "--json"]);
    let document: Value = serde_json::from_slice(&json_out.stdout).unwrap();
    assert_eq!(document["updates"][0]["state"], "failed", "{document}");
    assert_eq!(document["action"]["payload"], json!({"qty": 1}));

    // The approved version delivered again after its update failed is proposed again.
    let again = l.submit(&order(k, r#"{"qty":2}"#)).await.unwrap();
    assert_eq!(again.outcome, SubmitOutcome::Conflict);
    l.manual(&person_request(k, ManualCommand::Reject { proposal: None })).await.unwrap();

    let second = approve_new_version(l, k, r#"{"qty":3}"#).await;
    assert_eq!(second.as_str(), "acme:order:ORD-77:create-task#update-3", "a failed update keeps its key");
    let pending = l.submit(&order(k, r#"{"qty":3}"#)).await.unwrap();
    assert_eq!(pending.outcome, SubmitOutcome::Duplicate, "the version its update is to perform is approved");
    let summary = drain(l, &config).await;
    assert_eq!(summary.completed, 1, "{summary:?}");
    assert_eq!(crm.stats().updates, 1);
    assert_eq!(crm.record("tasks", &id).unwrap()["data"], json!({"qty": 3}));
    let taken = l.store().find(&key(k)).await.unwrap().unwrap();
    assert_eq!((taken.payload.value()["qty"].as_i64(), taken.payload_revision), (Some(3), 3));
    let entry = l.detail(&key(k)).await.unwrap().audit.pop().unwrap();
    assert_eq!((entry.event, entry.actor.as_str(), entry.to_state), (Event::UpdateApplied, "w1", State::Completed));
    let reason = entry.reason.unwrap();
    assert!(reason.starts_with("payload revision 1 ("), "{reason}");
    assert!(
        reason.contains("update action acme:order:ORD-77:create-task#update-3 completed at the destination"),
        "{reason}"
    );
    assert!(reason.contains("replaced by revision 3"), "{reason}");
}

/// An update whose outcome is uncertain changes nothing on its action until it is settled: a
/// lookup that finds it (by the worker) or a person's resolution as completed makes the action take
/// it on, in that actor's name; a resolution as not written leaves the action as it was.
async fn an_uncertain_update_is_taken_on_when_a_lookup_finds_it_or_a_person_resolves_it<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let uncertain = async |k: &str| {
        completed(l, k, r#"{"qty":1}"#, "R-1").await;
        l.submit(&raw(k, r#"{"qty":2}"#)).await.unwrap();
        let update = l.manual(&person_request(k, ManualCommand::Approve { proposal: None })).await.unwrap().update;
        let update = update.unwrap().key;
        let claim = l.claim("w1", LEASE, 1).await.unwrap().pop().unwrap();
        assert_eq!(claim.key(), &update);
        let attempt = l.start_attempt(&claim).await.unwrap();
        let lost = Report { outcome: Outcome::Unknown, error: None, evidence: Evidence::default() };
        l.record_result(&claim, attempt, &lost).await.unwrap();
        assert_eq!(l.store().find(&key(k)).await.unwrap().unwrap().payload_revision, 1, "not taken on while unknown");
        update
    };
    let taken_on = async |k: &str| {
        let action = l.store().find(&key(k)).await.unwrap().unwrap();
        let entry = l.detail(&key(k)).await.unwrap().audit.pop().unwrap();
        (action.payload_revision, action.payload.value()["qty"].as_i64(), entry.event, entry.actor)
    };

    let found = uncertain("acme:order:U-1:create-task").await;
    let version = l.store().find(&found).await.unwrap().unwrap().revision;
    let report = actionledger::ledger::LookupReport {
        verdict: actionledger::domain::LookupVerdict::Found,
        records: 1,
        destination_id: Some("R-1".into()),
        evidence: Evidence::default(),
        detail: None,
    };
    l.settle_unknown(&found, version, "w1", ActorKind::Worker, &report).await.unwrap().expect("settled");
    assert_eq!(taken_on("acme:order:U-1:create-task").await, (2, Some(2), Event::UpdateApplied, "w1".to_owned()));

    let resolved = uncertain("acme:order:U-2:create-task").await;
    let command = ManualCommand::ResolveCompleted { destination_id: "R-1".into() };
    l.manual(&person_request(resolved.as_str(), command)).await.unwrap();
    assert_eq!(taken_on("acme:order:U-2:create-task").await, (2, Some(2), Event::UpdateApplied, "Ana Lima".to_owned()));

    let not_written = uncertain("acme:order:U-3:create-task").await;
    l.manual(&checked_cancel(not_written.as_str())).await.unwrap();
    let (revision, qty, event, _) = taken_on("acme:order:U-3:create-task").await;
    assert_eq!((revision, qty), (1, Some(1)), "a cancelled update leaves its action as it was");
    assert_ne!(event, Event::UpdateApplied);
    let detail = l.detail(&key("acme:order:U-3:create-task")).await.unwrap();
    assert_eq!(detail.updates.iter().map(|u| u.state).collect::<Vec<_>>(), [State::Cancelled]);
}

/// An action whose changed payload was approved before it completed (payload revision 2) gets
/// `KEY#update-3` as its first update: `show` still lists it, though no `KEY#update-2` exists.
async fn an_update_numbered_above_a_revision_approved_before_completion_is_shown<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let k = "acme:order:ORD-88:create-task";
    l.submit(&raw(k, r#"{"qty":1}"#)).await.unwrap();
    assert_eq!(l.submit(&raw(k, r#"{"qty":2}"#)).await.unwrap().outcome, SubmitOutcome::Conflict);
    l.manual(&person_request(k, ManualCommand::Approve { proposal: None })).await.unwrap();
    let claim = l.claim("w1", LEASE, 1).await.unwrap().pop().expect("claimable");
    let attempt = l.start_attempt(&claim).await.unwrap();
    let done = Report {
        outcome: Outcome::Completed { destination_id: "R-8".to_owned() },
        error: None,
        evidence: Evidence::default(),
    };
    l.record_result(&claim, attempt, &done).await.unwrap();
    assert_eq!(l.store().find(&key(k)).await.unwrap().unwrap().payload_revision, 2);

    let update = approve_new_version(l, k, r#"{"qty":3}"#).await;
    assert_eq!(update.as_str(), "acme:order:ORD-88:create-task#update-3");
    let detail = l.detail(&key(k)).await.unwrap();
    assert_eq!(detail.updates.iter().map(|u| (u.key.clone(), u.state)).collect::<Vec<_>>(), [(update, State::Pending)]);
}
