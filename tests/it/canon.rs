//! Payload identity and conflicts, on both stores: canonical payloads by RFC 8785 (equal values
//! are one payload, whatever number spelling carried them), action keys in Unicode NFC, every
//! distinct proposal kept for review, and `failed` kept for what is known not written when a
//! proposal is rejected.

use crate::support::{TestDb, person_request, protected_by_lookup};
use actionledger::Ledger;
use actionledger::domain::{ActionKey, Evidence, ManualCommand, RawSubmission, State};
use actionledger::ledger::{Outcome, Recorded, Recovery, Report};
use actionledger::store::Store;
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(30);

conformance!(rejecting_a_proposal_never_returns_to_failed_after_a_late_write,);

fn key(text: &str) -> ActionKey {
    ActionKey::parse(text).unwrap()
}

fn raw(key: &str, payload: &str) -> RawSubmission {
    RawSubmission { key: Some(key.to_owned()), payload: payload.as_bytes().to_vec(), ..Default::default() }
}

fn report(outcome: Outcome, status: i64, destination_id: Option<&str>) -> Report {
    Report {
        outcome,
        error: (status >= 400).then(|| format!("{status} from the destination")),
        evidence: Evidence { status: Some(status), destination_id: destination_id.map(str::to_owned), body: None },
    }
}

async fn state_of<S: Store>(l: &Ledger<S>, k: &str) -> actionledger::domain::ActionRecord {
    l.store().find(&key(k)).await.unwrap().unwrap()
}

/// A failed action takes a proposal (conflict, going back to `failed` if it is rejected); then a
/// late result from a worker whose claim was taken over reports that its request wrote. A
/// rejection of the proposal must not call the action `failed`: something may have been written.
async fn rejecting_a_proposal_never_returns_to_failed_after_a_late_write<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let k = "bug:reject-late";
    l.submit(&raw(k, r#"{"n":1}"#)).await.unwrap();
    // Worker A sends and stalls; B takes the claim over (the destination protects against a repeat).
    let a = l.claim("worker-a", LEASE, 1).await.unwrap().pop().unwrap();
    let a_attempt = l.start_attempt(&a).await.unwrap();
    l.store().clock().advance(LEASE * 2);
    let protected = protected_by_lookup(l, &["crm"]);
    let Recovery::Claimed(b) =
        protected.recover_expired(a.key(), a.ownership_version(), "worker-b", LEASE).await.unwrap()
    else {
        panic!("a protected destination allows the takeover")
    };
    // B is refused for good: A's cut-off request may have written, so it is unknown; a person
    // checks the destination, finds nothing, and the next try fails for good: known not written.
    let b_attempt = l.start_attempt(&b).await.unwrap();
    l.record_result(&b, b_attempt, &report(Outcome::Failed { permanent: true }, 422, None)).await.unwrap();
    assert_eq!(state_of(l, k).await.state, State::Unknown);
    l.manual(&person_request(k, ManualCommand::ResolveNotWritten)).await.unwrap();
    let c = l.claim("worker-c", LEASE, 1).await.unwrap().pop().unwrap();
    let c_attempt = l.start_attempt(&c).await.unwrap();
    l.record_result(&c, c_attempt, &report(Outcome::Failed { permanent: true }, 422, None)).await.unwrap();
    assert_eq!(state_of(l, k).await.state, State::Failed);

    // A changed payload: conflict, going back to `failed` on a rejection.
    l.submit(&raw(k, r#"{"n":2}"#)).await.unwrap();
    assert_eq!(state_of(l, k).await.state, State::Conflict);
    // A's late result: its request wrote record crm-1.
    let late = report(Outcome::Completed { destination_id: "crm-1".into() }, 201, Some("crm-1"));
    let Recorded::Stale(_) = l.record_result(&a, a_attempt, &late).await.unwrap() else { panic!("A is late") };
    let action = state_of(l, k).await;
    assert!(action.may_have_written, "the late result reported a write");

    let rejected = l.manual(&person_request(k, ManualCommand::Reject)).await.unwrap();
    let action = state_of(l, k).await;
    assert_ne!(action.state, State::Failed, "failed means known not written, yet crm-1 exists");
    assert_eq!((action.state, rejected.action.state), (State::Conflict, State::Conflict));
    assert!(action.proposal.is_none(), "the proposal is rejected");
    // The person settles it by what the destination holds.
    let resolved =
        l.manual(&person_request(k, ManualCommand::ResolveCompleted { destination_id: "crm-1".into() })).await.unwrap();
    assert_eq!(resolved.action.state, State::Completed);
}
