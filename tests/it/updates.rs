//! Changed payloads after the fact, on both stores: a new version of a completed action is a
//! reviewed update (`KEY#update-N`), never a second create; a new body after a possible send goes
//! out under a derived idempotency key (`KEY#rev-N`). docs/RULES.md, "Changed payloads".

use crate::support::{TestDb, person_request};
use actionledger::Ledger;
use actionledger::domain::{
    ActionKey, ActorKind, Event, Evidence, ManualCommand, RawSubmission, Refusal, State, SubmitOutcome,
};
use actionledger::ledger::{LedgerError, Outcome, Report};
use actionledger::store::{ListFilter, Store};
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(30);

conformance!(
    approving_a_new_version_of_a_completed_action_records_a_linked_update,
    the_approved_new_payload_delivered_again_is_a_duplicate,
    rejecting_a_new_version_of_a_completed_action_drops_it,
    an_update_key_that_cannot_be_made_or_is_taken_is_refused_and_nothing_changes,
    a_new_body_after_a_send_carries_a_derived_idempotency_key,
    a_proposal_is_listed_with_the_conflicts_whatever_the_state,
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
    assert_eq!((original.state, original.payload_revision), (State::Completed, 2));
    assert_eq!(original.payload.value()["qty"], 2, "the approved payload is the proposal now");
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
    assert!(reason.contains("payload revision 1") && reason.contains("revision 2"), "{reason}");
    assert!(reason.contains("#update-2"), "{reason}");
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
