//! Late results (rule 8) and people's retries after a send (rules 2, 4 and 5), on both stores: a
//! result from an obsolete owner never changes the record and always reaches review, and a
//! person's retry keeps the evidence that something may have been sent.

use crate::support::{TestDb, person_request, protected_by_lookup};
use actionledger::Ledger;
use actionledger::domain::{
    ActionKey, ActorKind, Event, Evidence, ManualCommand, RawSubmission, Refusal, State, WayOut,
};
use actionledger::ledger::{Claim, LedgerError, ManualRequest, Outcome, Recorded, Recovery, Report};
use actionledger::store::{ListFilter, Store};
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(30);

conformance!(
    a_late_result_that_agrees_is_listed_and_changes_nothing_else,
    acknowledging_clears_the_notice_and_is_audited,
    a_late_result_that_contradicts_goes_to_conflict,
    a_retry_from_held_keeps_the_evidence_of_a_send_and_restarts_the_window,
    an_unsafe_hold_runs_again_only_once_the_old_worker_is_confirmed_stopped,
);

fn key(text: &str) -> ActionKey {
    ActionKey::parse(text).unwrap()
}

fn raw(key: &str) -> RawSubmission {
    RawSubmission { key: Some(key.to_owned()), payload: br#"{"n":1}"#.to_vec(), ..Default::default() }
}

fn completed(destination_id: &str) -> Report {
    Report {
        outcome: Outcome::Completed { destination_id: destination_id.to_owned() },
        error: None,
        evidence: Evidence {
            status: Some(201),
            destination_id: Some(destination_id.to_owned()),
            body: Some(format!(r#"{{"id":"{destination_id}"}}"#)),
        },
    }
}

fn before_write() -> Report {
    Report {
        outcome: Outcome::RetryLater { after: Duration::ZERO },
        error: Some("503 from the destination".into()),
        evidence: Evidence { status: Some(503), ..Evidence::default() },
    }
}

/// Worker A claims `k` and starts its attempt; its lease expires; worker B takes the claim over
/// on a destination that protects against a repeat. Returns A's claim and attempt, and B's claim.
async fn taken_over<S: Store>(l: &Ledger<S>, k: &str) -> (Claim, actionledger::ledger::StartedAttempt, Claim) {
    l.submit(&raw(k)).await.unwrap();
    let a = l.claim("worker-a", LEASE, 1).await.unwrap().pop().unwrap();
    let attempt = l.start_attempt(&a).await.unwrap();
    l.store().clock().advance(LEASE * 2);
    let protected = protected_by_lookup(l, &["crm"]);
    let recovered = protected.recover_expired(a.key(), a.ownership_version(), "worker-b", LEASE).await.unwrap();
    let Recovery::Claimed(b) = recovered else { panic!("a protected destination allows the takeover") };
    (a, attempt, b)
}

async fn a_late_result_that_agrees_is_listed_and_changes_nothing_else<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    // B completed with record crm-1; A's late result names the same record.
    let (a, a_attempt, b) = taken_over(l, "late:same").await;
    let b_attempt = l.start_attempt(&b).await.unwrap();
    l.record_result(&b, b_attempt, &completed("crm-1")).await.unwrap();
    let before = l.store().find(&key("late:same")).await.unwrap().unwrap();
    let Recorded::Stale(_) = l.record_result(&a, a_attempt, &completed("crm-1")).await.unwrap() else {
        panic!("A's result is late")
    };
    let after = l.store().find(&key("late:same")).await.unwrap().unwrap();
    // The record is the same but for the notice and its revision (bumped so that a person who
    // read it before is asked to read it again).
    let expected = actionledger::domain::ActionRecord { late_results: 1, revision: before.revision + 1, ..before };
    assert_eq!(after, expected, "a late result changes nothing in the record but the notice");
    assert_eq!(after.last_error, None, "not even the error note");

    // In review: listed among the actions with late results, with its evidence.
    let listed = l.list(&ListFilter { late_results: true, limit: 10, ..ListFilter::default() }).await.unwrap();
    assert_eq!(listed.iter().map(|x| x.key.as_str()).collect::<Vec<_>>(), ["late:same"]);
    let detail = l.detail(&key("late:same")).await.unwrap();
    let late: Vec<_> = detail.late_results().collect();
    assert_eq!(late.len(), 1);
    assert_eq!((late[0].worker.as_str(), late[0].evidence.destination_id.as_deref()), ("worker-a", Some("crm-1")));
    let entry = detail.audit.last().unwrap();
    assert_eq!(
        (entry.event, entry.from_state, entry.to_state),
        (Event::LateResult, Some(State::Completed), State::Completed)
    );

    // A late failure before writing, while the new owner is still running, contradicts nothing
    // either: listed, and the new owner's claim carries on.
    let (a, a_attempt, b) = taken_over(l, "late:running").await;
    let running = l.store().find(&key("late:running")).await.unwrap().unwrap();
    l.record_result(&a, a_attempt, &before_write()).await.unwrap();
    let after = l.store().find(&key("late:running")).await.unwrap().unwrap();
    assert_eq!(
        after,
        actionledger::domain::ActionRecord { late_results: 1, revision: running.revision + 1, ..running }
    );
    let b_attempt = l.start_attempt(&b).await.expect("the new owner's claim is intact");
    let Recorded::Applied(done) = l.record_result(&b, b_attempt, &completed("crm-9")).await.unwrap() else {
        panic!("B's result is current")
    };
    assert_eq!((done.state, done.late_results), (State::Completed, 1), "the notice stays until acknowledged");
}

async fn acknowledging_clears_the_notice_and_is_audited<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let (a, a_attempt, b) = taken_over(l, "late:ack").await;
    let b_attempt = l.start_attempt(&b).await.unwrap();
    l.record_result(&b, b_attempt, &completed("crm-1")).await.unwrap();
    l.record_result(&a, a_attempt, &completed("crm-1")).await.unwrap();

    let outcome = l.manual(&person_request("late:ack", ManualCommand::Acknowledge)).await.unwrap();
    assert_eq!(outcome.transition, None, "the state does not change");
    assert_eq!((outcome.action.state, outcome.action.late_results), (State::Completed, 0));
    let detail = l.detail(&key("late:ack")).await.unwrap();
    assert_eq!(detail.late_results().count(), 0);
    let stale = detail.attempts.iter().find(|at| at.stale).unwrap();
    assert_eq!(stale.acknowledged.as_ref().map(|k| k.by.as_str()), Some("Ana Lima"), "who acknowledged it");
    assert!(stale.evidence.destination_id.is_some(), "the evidence stays");
    let entry = detail.audit.last().unwrap();
    assert_eq!(
        (entry.event, entry.actor.as_str(), entry.actor_kind, entry.to_state),
        (Event::LateResultsAcknowledged, "Ana Lima", ActorKind::Person, State::Completed)
    );
    assert!(entry.reason.as_deref().unwrap().contains("checked the CRM by hand (1 late result(s) acknowledged)"));
    let listed = l.list(&ListFilter { late_results: true, limit: 10, ..ListFilter::default() }).await.unwrap();
    assert!(listed.is_empty(), "no longer listed");

    // Nothing left to acknowledge: refused, and nothing written.
    let revision = detail.action.revision;
    let refused = l.manual(&person_request("late:ack", ManualCommand::Acknowledge)).await;
    assert!(matches!(refused, Err(LedgerError::Refused(Refusal::NothingToAcknowledge { .. }))), "{refused:?}");
    let after = l.detail(&key("late:ack")).await.unwrap();
    assert_eq!((after.action.revision, after.audit.len()), (revision, detail.audit.len()));
    l.submit(&raw("late:none")).await.unwrap();
    let refused = l.manual(&person_request("late:none", ManualCommand::Acknowledge)).await.unwrap_err();
    assert!(refused.to_string().contains("has no unacknowledged late result"), "{refused}");
}

async fn a_late_result_that_contradicts_goes_to_conflict<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    // B completed with crm-1; A's late result names crm-2: a second effect.
    let (a, a_attempt, b) = taken_over(l, "late:other").await;
    let b_attempt = l.start_attempt(&b).await.unwrap();
    l.record_result(&b, b_attempt, &completed("crm-1")).await.unwrap();
    let Recorded::Stale(action) = l.record_result(&a, a_attempt, &completed("crm-2")).await.unwrap() else {
        panic!("A's result is late")
    };
    assert_eq!(action.state, State::Conflict);
    assert_eq!(action.destination_id.as_deref(), Some("crm-1"), "the record keeps what B confirmed");
    assert_eq!((action.late_results, action.last_error), (1, None));
    let reason = l.detail(&key("late:other")).await.unwrap().audit.last().unwrap().reason.clone().unwrap();
    assert!(reason.contains("names destination record crm-2, not crm-1"), "{reason}");

    // A reports a possible write while B is running the action again: conflict, and B's claim
    // ends with it (its result will be late too).
    let (a, a_attempt, b) = taken_over(l, "late:while-running").await;
    let unknown = Report {
        outcome: Outcome::Unknown,
        error: Some("timed out after sending".into()),
        evidence: Evidence::default(),
    };
    let Recorded::Stale(action) = l.record_result(&a, a_attempt, &unknown).await.unwrap() else { panic!("late") };
    assert_eq!((action.state, action.claimed_by.as_deref(), action.late_results), (State::Conflict, None, 1));
    assert!(matches!(l.start_attempt(&b).await, Err(LedgerError::Fenced { .. })));
}

async fn a_retry_from_held_keeps_the_evidence_of_a_send_and_restarts_the_window<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    l.submit(&raw("window")).await.unwrap();
    let claim = l.claim("w1", LEASE, 1).await.unwrap().pop().unwrap();
    l.start_attempt(&claim).await.unwrap();
    let sent = l.store().find(&key("window")).await.unwrap().unwrap();
    assert!(sent.first_sent_at.is_some() && sent.window_started_at == sent.first_sent_at);
    l.hold(&claim, "the idempotency window closed").await.unwrap();
    l.store().clock().advance(Duration::from_hours(2));

    let retried = l.manual(&person_request("window", ManualCommand::Retry)).await.unwrap().action;
    assert_eq!(retried.state, State::Pending);
    assert_eq!(retried.first_sent_at, sent.first_sent_at, "something may have been sent: the evidence stays");
    assert_eq!(retried.window_started_at, None, "a retry from held starts a new window");
    let again = l.claim("w2", LEASE, 1).await.unwrap().pop().unwrap();
    assert_eq!(again.action.first_sent_at, sent.first_sent_at, "the worker sees the evidence and looks first");
    l.start_attempt(&again).await.unwrap();
    let restarted = l.store().find(&key("window")).await.unwrap().unwrap();
    assert_eq!(restarted.first_sent_at, sent.first_sent_at);
    assert!(restarted.window_started_at > sent.window_started_at, "the window counts from the new first request");

    // A resolution as not written keeps the evidence too, and restarts the window.
    let unknown = Report { outcome: Outcome::Unknown, error: None, evidence: Evidence::default() };
    let attempt = {
        let detail = l.detail(&key("window")).await.unwrap();
        let last = detail.attempts.last().unwrap();
        actionledger::ledger::StartedAttempt { id: last.id, number: last.number }
    };
    l.record_result(&again, attempt, &unknown).await.unwrap();
    let resolved = l.manual(&person_request("window", ManualCommand::ResolveNotWritten)).await.unwrap().action;
    assert_eq!(
        (resolved.state, resolved.first_sent_at, resolved.window_started_at),
        (State::Pending, sent.first_sent_at, None)
    );
}

async fn an_unsafe_hold_runs_again_only_once_the_old_worker_is_confirmed_stopped<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    // A person's takeover that goes to held needs the same confirmation.
    l.submit(&raw("unsafe:takeover")).await.unwrap();
    let claim = l.claim("old-worker", LEASE, 1).await.unwrap().pop().unwrap();
    l.start_attempt(&claim).await.unwrap();
    l.store().clock().advance(LEASE * 2);
    let held = l.manual(&person_request("unsafe:takeover", ManualCommand::Takeover)).await.unwrap().action;
    assert_eq!((held.state, held.old_worker_may_act), (State::Held, true));
    let refused = l.manual(&person_request("unsafe:takeover", ManualCommand::Retry)).await;
    assert!(matches!(refused, Err(LedgerError::Refused(Refusal::OldWorkerMayAct { .. }))), "{refused:?}");
    // A cancel needs no word on the old worker, since nothing runs again; but a request may have
    // written, so it needs the destination checked first.
    let cancel = person_request("unsafe:takeover", ManualCommand::Cancel);
    let refused = l.manual(&cancel).await;
    assert!(matches!(refused, Err(LedgerError::Refused(Refusal::CancelMayHaveWritten { .. }))), "{refused:?}");
    l.manual(&ManualRequest { confirmed_not_written: true, ..cancel }).await.unwrap();

    for k in ["unsafe:retry", "unsafe:not-written"] {
        l.submit(&raw(k)).await.unwrap();
        let claim = l.claim("old-worker", LEASE, 1).await.unwrap().pop().unwrap();
        l.start_attempt(&claim).await.unwrap();
        l.store().clock().advance(LEASE * 2);
        // No destination declared: taking over after a send is unsafe (rule 5).
        let Recovery::Held(held) = l.recover_expired(claim.key(), 1, "rescuer", LEASE).await.unwrap() else {
            panic!("held")
        };
        assert!(held.old_worker_may_act);
    }
    for (k, command) in
        [("unsafe:retry", ManualCommand::Retry), ("unsafe:not-written", ManualCommand::ResolveNotWritten)]
    {
        let before = l.detail(&key(k)).await.unwrap();
        let refused = l.manual(&person_request(k, command.clone())).await;
        let Err(LedgerError::Refused(refusal @ Refusal::OldWorkerMayAct { .. })) = refused else {
            panic!("{k}: refused without the confirmation, got {refused:?}")
        };
        assert_eq!(refusal.way_out(), Some(WayOut::ConfirmOldWorkerStopped), "{refusal}");
        let after = l.detail(&key(k)).await.unwrap();
        assert_eq!((after.action, after.audit.len()), (before.action, before.audit.len()), "{k}: nothing written");

        // The retry also needs the person's check that nothing was written (rule 6): its request
        // may have written, and no destination here recognises a repeat. Resolving as not written
        // is that statement itself.
        let stopped = ManualRequest { old_worker_stopped: true, ..person_request(k, command.clone()) };
        let confirmed = if matches!(command, ManualCommand::Retry) {
            let refused = l.manual(&stopped).await;
            assert!(matches!(refused, Err(LedgerError::Refused(Refusal::MayWriteTwice { .. }))), "{refused:?}");
            ManualRequest { confirmed_not_written: true, ..stopped }
        } else {
            stopped
        };
        let outcome = l.manual(&confirmed).await.unwrap();
        assert_eq!((outcome.action.state, outcome.action.old_worker_may_act), (State::Pending, false));
        let entry = l.detail(&key(k)).await.unwrap().audit.pop().unwrap();
        assert!(
            entry.reason.as_deref().unwrap().contains("the person confirmed that the old worker can no longer act"),
            "{k}: the confirmation is audited: {entry:?}"
        );
    }
}
