//! What a submission may not carry, on both stores: a payload that cannot be kept exactly, and an
//! `after` chain that leads back to the action itself. Each is refused inside the ledger, recorded
//! as a refused submission, and writes no action. And what an action keeps once it completes.

use crate::support::{TestDb, person_request};
use actionledger::Ledger;
use actionledger::domain::{
    ActionKey, Evidence, LookupReport, LookupVerdict, ManualCommand, RawSubmission, State, SubmitOutcome,
};
use actionledger::ledger::{Claim, LedgerError, Outcome, Recorded, Report};
use actionledger::store::{ListFilter, Store};
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(30);

conformance!(
    payloads_that_cannot_be_kept_exactly_are_refused_and_recorded,
    an_after_chain_that_leads_back_is_refused_naming_the_cycle,
    concurrent_submissions_cannot_close_a_cycle_between_them,
    a_completed_action_keeps_no_error,
);

fn raw(key: &str, payload: &str) -> RawSubmission {
    RawSubmission { key: Some(key.to_owned()), payload: payload.as_bytes().to_vec(), ..Default::default() }
}

fn after(key: &str, waits_for: &str) -> RawSubmission {
    RawSubmission { after: Some(waits_for.to_owned()), ..raw(key, "{}") }
}

fn key(text: &str) -> ActionKey {
    ActionKey::parse(text).unwrap()
}

async fn action_count<S: Store>(ledger: &Ledger<S>) -> usize {
    ledger.list(&ListFilter { limit: 1000, ..Default::default() }).await.unwrap().len()
}

/// The refusal's problem code and message, or a panic naming what happened instead.
fn refusal<T: std::fmt::Debug>(result: Result<T, LedgerError>) -> (String, String) {
    match result {
        Err(LedgerError::SubmissionRefused(refusal)) => (refusal.problem.to_owned(), refusal.message),
        other => panic!("expected a refused submission, got {other:?}"),
    }
}

async fn payloads_that_cannot_be_kept_exactly_are_refused_and_recorded<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let cases = [
        (r#"{"items":[{"qty":1},{"qty":2},{"sku":"x","qty":3,"qty":4}]}"#, "payload_duplicate_key", "$.items[2].qty"),
        (r#"{"order":{"total":18446744073709551617}}"#, "payload_integer_out_of_range", "$.order.total"),
        (r#"{"order":{"id":9007199254740993}}"#, "payload_integer_out_of_range", "$.order.id"),
        (r#"{"rate":[0.1,0.12345678901234567890123]}"#, "payload_inexact_number", "$.rate[1]"),
        (r#"{"big":1e400}"#, "payload_number_out_of_range", "$.big"),
    ];
    for (n, (payload, problem, path)) in cases.iter().enumerate() {
        let (code, message) = refusal(l.submit(&raw(&format!("acme:exact:{n}"), payload)).await);
        assert_eq!(code, *problem, "{payload}");
        assert!(message.contains(path), "{message:?} names {path}");
    }
    assert_eq!(action_count(l).await, 0, "no action written");
    let refused = l.list_refused(None, 100).await.unwrap();
    let recorded: Vec<(&str, &str)> = refused.iter().rev().map(|r| (r.problem.as_str(), r.message.as_str())).collect();
    assert_eq!(recorded.len(), cases.len());
    for ((problem, message), (_, expected, path)) in recorded.iter().zip(&cases) {
        assert_eq!(problem, expected);
        assert!(message.contains(path), "{message:?}");
    }
    // The same numbers, kept exactly, are accepted as written.
    let kept = l.submit(&raw("acme:exact:ok", r#"{"total":9007199254740991,"rate":0.1,"big":1e300}"#)).await;
    assert_eq!(kept.unwrap().action.payload.canonical(), r#"{"big":1e+300,"rate":0.1,"total":9007199254740991}"#);
}

async fn an_after_chain_that_leads_back_is_refused_naming_the_cycle<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    // An action may wait for one not submitted yet; submitting that one waiting back closes a cycle.
    assert_eq!(l.submit(&after("a", "b")).await.unwrap().outcome, SubmitOutcome::Created);
    let (problem, message) = refusal(l.submit(&after("b", "a")).await);
    assert_eq!(problem, "after_cycle");
    assert!(message.contains("b -> a -> b"), "{message}");
    // A longer chain: c waits for d, d for e, and e would wait for c.
    l.submit(&after("c", "d")).await.unwrap();
    l.submit(&after("d", "e")).await.unwrap();
    let (problem, message) = refusal(l.submit(&after("e", "c")).await);
    assert_eq!(problem, "after_cycle");
    assert!(message.contains("e -> c -> d -> e"), "{message}");
    // Waiting for itself is refused before the chain is read.
    assert_eq!(refusal(l.submit(&after("f", "f")).await).0, "invalid_after_key");
    // Nothing of a refused submission was written: no action, no delivery.
    for refused in ["b", "e", "f"] {
        assert!(l.store().find(&key(refused)).await.unwrap().is_none(), "{refused} written");
    }
    assert_eq!(action_count(l).await, 3);
    let problems: Vec<String> = l.list_refused(None, 10).await.unwrap().into_iter().map(|r| r.problem).collect();
    assert_eq!(problems, ["invalid_after_key", "after_cycle", "after_cycle"]);
    // A chain that does not come back is accepted, and so is a repeated delivery of a recorded key.
    assert_eq!(l.submit(&after("g", "a")).await.unwrap().outcome, SubmitOutcome::Created);
    assert_eq!(l.submit(&after("a", "b")).await.unwrap().outcome, SubmitOutcome::Duplicate);

    // In one page of submissions (recorded in key order), the later of two actions waiting for
    // each other is refused, on its own: the other and an unrelated one are recorded.
    let page = [after("x", "y"), after("y", "x"), raw("z", "{}")];
    let mut outcomes = l.submit_many(&page).await.unwrap().into_iter();
    assert_eq!(outcomes.next().unwrap().unwrap().outcome, SubmitOutcome::Created);
    let (problem, message) = refusal(outcomes.next().unwrap());
    assert_eq!((problem.as_str(), message.contains("y -> x -> y")), ("after_cycle", true), "{message}");
    assert_eq!(outcomes.next().unwrap().unwrap().outcome, SubmitOutcome::Created);
    assert!(l.store().find(&key("y")).await.unwrap().is_none());
    assert!(l.store().deliveries(&key("y")).await.unwrap().is_empty(), "no delivery of a refused submission");
    assert_eq!(l.list_refused(None, 10).await.unwrap()[0].problem, "after_cycle");
}

/// Many pairs of new actions, each pair submitted at once waiting for each other: in every pair
/// exactly one is recorded, whatever the timing. Without the chain read serialized, PostgreSQL
/// transactions could each miss the other's uncommitted action and record both.
async fn concurrent_submissions_cannot_close_a_cycle_between_them<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    for n in 0..12 {
        let (p, q) = (format!("pair:{n}:p"), format!("pair:{n}:q"));
        let (p_after_q, q_after_p) = (after(&p, &q), after(&q, &p));
        let (first, second) = tokio::join!(l.submit(&p_after_q), l.submit(&q_after_p));
        let refused = [&first, &second].iter().filter(|r| r.is_err()).count();
        assert_eq!(refused, 1, "pair {n}: {first:?} / {second:?}");
        for result in [first, second] {
            if let Err(error) = result {
                assert_eq!(refusal::<()>(Err(error)).0, "after_cycle");
            }
        }
    }
    assert_eq!(action_count(l).await, 12);
}

async fn claim_one<S: Store>(ledger: &Ledger<S>) -> Claim {
    let mut claims = ledger.claim("w", LEASE, 1).await.unwrap();
    assert_eq!(claims.len(), 1, "one action should be claimable");
    claims.pop().unwrap()
}

/// Submits `k` and records one worker result for it, with an error note.
async fn with_result<S: Store>(ledger: &Ledger<S>, k: &str, outcome: Outcome, error: &str) -> State {
    ledger.submit(&raw(k, "{}")).await.unwrap();
    let claim = claim_one(ledger).await;
    let attempt = ledger.start_attempt(&claim).await.unwrap();
    let report = Report { outcome, error: Some(error.to_owned()), evidence: Evidence::default() };
    let Recorded::Applied(action) = ledger.record_result(&claim, attempt, &report).await.unwrap() else {
        panic!("the claim was current")
    };
    assert_eq!(action.last_error.as_deref(), Some(error), "the error is kept while it stands");
    action.state
}

async fn a_completed_action_keeps_no_error<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let last_error = async |k: &str| l.store().find(&key(k)).await.unwrap().unwrap().last_error;

    // Unknown after a timeout, then a lookup finds the record: completed, the timeout gone.
    assert_eq!(with_result(l, "lookup", Outcome::Unknown, "timed out after sending").await, State::Unknown);
    let revision = l.store().find(&key("lookup")).await.unwrap().unwrap().revision;
    let found = LookupReport {
        verdict: LookupVerdict::Found,
        records: 1,
        destination_id: Some("T-1".into()),
        evidence: Evidence::default(),
        detail: Some("one record".into()),
    };
    let worker = actionledger::domain::ActorKind::Worker;
    let settled = l.settle_unknown(&key("lookup"), revision, "reconcile", worker, &found).await.unwrap();
    let settled = settled.expect("unchanged since read");
    assert_eq!((settled.state, settled.last_error.as_deref()), (State::Completed, None));
    assert_eq!(last_error("lookup").await, None, "as stored");

    // Unknown, then a person resolves it as completed.
    assert_eq!(with_result(l, "resolved", Outcome::Unknown, "connection reset").await, State::Unknown);
    let resolve = ManualCommand::ResolveCompleted { destination_id: "T-2".into() };
    let outcome = l.manual(&person_request("resolved", resolve)).await.unwrap();
    assert_eq!((outcome.action.state, outcome.action.last_error), (State::Completed, None));
    assert_eq!(last_error("resolved").await, None);

    // A retry after a 503, then a worker completes it, with a note: the note goes to the audit
    // trail, not to the action's error.
    let retried = with_result(l, "retried", Outcome::RetryLater { after: Duration::ZERO }, "503 from the CRM").await;
    assert_eq!(retried, State::Pending);
    let claim = claim_one(l).await;
    let attempt = l.start_attempt(&claim).await.unwrap();
    let report = Report {
        outcome: Outcome::Completed { destination_id: "T-3".into() },
        error: Some("completed on the second try".into()),
        evidence: Evidence::default(),
    };
    l.record_result(&claim, attempt, &report).await.unwrap();
    assert_eq!(last_error("retried").await, None);
    let audit = l.detail(&key("retried")).await.unwrap().audit;
    assert_eq!(audit.last().unwrap().reason.as_deref(), Some("completed on the second try"));
}
