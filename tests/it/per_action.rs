//! The per-action path in few round trips (docs/BENCHMARKS.md, "The drain"): a claim writes its
//! audit entries in the same commit (one statement on PostgreSQL), an attempt starts in one
//! commit only under a current claim, and a result's attempt end and audit entry commit with it.
//! Each test counts the rows written, on SQLite and PostgreSQL.

use crate::support::{TestDb, protected_by_lookup};
use actionledger::domain::{ActionKey, ActorKind, AttemptOutcome, Event, Evidence, RawSubmission, State};
use actionledger::ledger::{LedgerError, Outcome, Recorded, Recovery, Report};
use actionledger::store::Store;
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(30);

conformance!(
    a_claim_and_its_audit_entries_commit_together,
    a_claim_reads_the_time_and_the_lease_from_the_database_clock,
    an_attempt_starts_only_under_a_current_claim,
    a_result_ends_its_attempt_and_writes_its_entry_in_one_commit,
    a_batch_of_results_ends_every_attempt_and_writes_every_entry,
    regression_an_empty_batch_starts_and_records_nothing,
);

fn key(text: &str) -> ActionKey {
    ActionKey::parse(text).unwrap()
}

fn raw(key: &str) -> RawSubmission {
    RawSubmission { key: Some(key.to_owned()), payload: b"{}".to_vec(), ..Default::default() }
}

fn completed(id: &str) -> Report {
    Report { outcome: Outcome::Completed { destination_id: id.to_owned() }, error: None, evidence: Evidence::default() }
}

/// How many audit entries of `event` the actions `keys` have.
async fn entries<S: Store>(db: &TestDb<S>, keys: &[&str], event: Event) -> usize {
    let mut n = 0;
    for k in keys {
        n += db.ledger.store().audit_trail(&key(k)).await.unwrap().iter().filter(|e| e.event == event).count();
    }
    n
}

async fn a_claim_and_its_audit_entries_commit_together<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let keys = ["claim:1", "claim:2", "claim:3"];
    for k in keys {
        l.submit(&raw(k)).await.unwrap();
    }
    let claims = l.claim("w1", LEASE, 2).await.unwrap();
    assert_eq!(claims.len(), 2, "the limit holds");
    assert_eq!(entries(&db, &keys, Event::Claimed).await, 2, "one entry per claim, none for the action left");
    for claim in &claims {
        let action = l.store().find(claim.key()).await.unwrap().unwrap();
        assert_eq!(action, claim.action, "the claim returns the row as written");
        assert_eq!(action.state, State::InProgress);
        assert_eq!(action.claimed_by.as_deref(), Some("w1"));
        assert_eq!(action.ownership_version, 1);
        let trail = l.store().audit_trail(claim.key()).await.unwrap();
        let entry = trail.last().unwrap();
        assert_eq!(entry.event, Event::Claimed);
        assert_eq!((entry.actor.as_str(), entry.actor_kind), ("w1", ActorKind::Worker));
        assert_eq!((entry.from_state, entry.to_state), (Some(State::Pending), State::InProgress));
        assert_eq!((entry.ownership_version, entry.revision), (action.ownership_version, action.revision));
        assert_eq!(entry.at, action.updated_at, "the entry carries the claim's database time");
    }
    // Another limit (PostgreSQL writes the limit into the statement): the one left, and then none.
    let rest = l.claim("w2", LEASE, 5).await.unwrap();
    assert_eq!(rest.len(), 1);
    assert!(l.claim("w3", LEASE, 1).await.unwrap().is_empty());
    assert_eq!(entries(&db, &keys, Event::Claimed).await, 3, "an empty claim writes no entry");
}

async fn a_claim_reads_the_time_and_the_lease_from_the_database_clock<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    l.submit(&raw("clock:1")).await.unwrap();
    let before = l.store().now().await.unwrap();
    // The store's clock moved on an hour: the claim's time and lease follow it, not the host's.
    l.store().clock().advance(Duration::from_hours(1));
    let claim = l.claim("w1", LEASE, 1).await.unwrap().pop().expect("claimed");
    let at = claim.action.updated_at;
    assert!(at >= before + Duration::from_hours(1), "claimed at {at}, an hour after {before}");
    assert_eq!(claim.action.lease_expires_at, Some(at + LEASE));
    let started = l.start_attempt(&claim).await.unwrap();
    let attempt = &l.store().attempts(claim.key()).await.unwrap()[0];
    assert_eq!(attempt.id, started.id);
    assert!(attempt.started_at >= at, "started at {} before the claim at {at}", attempt.started_at);
}

async fn an_attempt_starts_only_under_a_current_claim<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    l.submit(&raw("start:1")).await.unwrap();
    let claim = l.claim("w1", LEASE, 1).await.unwrap().pop().expect("claimed");
    let first = l.start_attempt(&claim).await.unwrap();
    assert_eq!(first.number, 1);
    let attempts = l.store().attempts(claim.key()).await.unwrap();
    assert_eq!(attempts.len(), 1);
    let attempt = &attempts[0];
    assert_eq!((attempt.id, attempt.number), (first.id, 1));
    assert_eq!((attempt.worker.as_str(), attempt.ownership_version), ("w1", claim.ownership_version()));
    assert_eq!(attempt.idempotency_key.as_deref(), Some("start:1"));
    assert_eq!((attempt.ended_at, attempt.outcome), (None, None));
    let action = l.store().find(claim.key()).await.unwrap().unwrap();
    assert_eq!(action.attempts, 1);
    assert_eq!(action.first_sent_at, Some(attempt.started_at), "the first send time is the attempt's");
    assert_eq!(action.window_started_at, Some(attempt.started_at));
    let second = l.start_attempt(&claim).await.unwrap();
    assert_eq!(second.number, 2);
    let action = l.store().find(claim.key()).await.unwrap().unwrap();
    assert_eq!((action.attempts, action.first_sent_at), (2, Some(attempt.started_at)), "set once");
    // Taken over after its lease: the old claim starts nothing, and writes nothing.
    l.store().clock().advance(LEASE * 2);
    let takeover = protected_by_lookup(l, &["crm"])
        .recover_expired(claim.key(), claim.ownership_version(), "rescuer", LEASE)
        .await
        .unwrap();
    assert!(matches!(takeover, Recovery::Claimed(_)), "{takeover:?}");
    let fenced = l.start_attempt(&claim).await;
    assert!(
        matches!(&fenced, Err(LedgerError::Fenced { held: 1, current: 2, .. })),
        "a start under a lost claim is fenced: {fenced:?}"
    );
    assert_eq!(l.store().attempts(claim.key()).await.unwrap().len(), 2, "no attempt row for the fenced start");
    assert_eq!(l.store().find(claim.key()).await.unwrap().unwrap().attempts, 2, "and no count");
}

async fn a_result_ends_its_attempt_and_writes_its_entry_in_one_commit<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    l.submit(&raw("result:1")).await.unwrap();
    let claim = l.claim("w1", LEASE, 1).await.unwrap().pop().expect("claimed");
    let started = l.start_attempt(&claim).await.unwrap();
    let recorded = l.record_result(&claim, started, &completed("D-1")).await.unwrap();
    let Recorded::Applied(action) = recorded else { panic!("applied: {recorded:?}") };
    assert_eq!(action.state, State::Completed);
    assert_eq!(l.store().find(claim.key()).await.unwrap().unwrap(), action, "the row as returned");
    let attempts = l.store().attempts(claim.key()).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].outcome, Some(AttemptOutcome::Succeeded));
    assert!(attempts[0].ended_at.is_some_and(|t| t >= attempts[0].started_at));
    let trail = l.store().audit_trail(claim.key()).await.unwrap();
    let entry = trail.last().unwrap();
    assert_eq!(entry.event, Event::Completed);
    assert_eq!((entry.from_state, entry.to_state), (Some(State::InProgress), State::Completed));
    assert_eq!((entry.ownership_version, entry.revision), (action.ownership_version, action.revision));
    assert_eq!(Some(entry.at), attempts[0].ended_at, "one database time for the whole result");
    assert_eq!(trail.iter().filter(|e| e.event == Event::Completed).count(), 1);
    // Another result for the same attempt is late: kept, not applied, and the attempt keeps its
    // first end.
    let unknown = Report { outcome: Outcome::Unknown, error: None, evidence: Evidence::default() };
    let again = l.record_result(&claim, started, &unknown).await.unwrap();
    assert!(matches!(again, Recorded::Stale(_)), "{again:?}");
    let after = l.store().attempts(claim.key()).await.unwrap();
    assert_eq!((after[0].outcome, after[0].ended_at), (attempts[0].outcome, attempts[0].ended_at));
}

async fn a_batch_of_results_ends_every_attempt_and_writes_every_entry<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let keys: Vec<String> = (0..70).map(|n| format!("batch:{n}")).collect();
    for k in &keys {
        l.submit(&raw(k)).await.unwrap();
    }
    let claims = l.claim("w1", LEASE, 70).await.unwrap();
    assert_eq!(claims.len(), 70);
    let started = l.start_attempts(&claims).await.unwrap();
    let results: Vec<_> = claims
        .iter()
        .zip(started)
        .map(|(claim, started)| (claim.clone(), started.unwrap(), completed(&format!("D-{}", claim.key()))))
        .collect();
    let recorded = l.record_results(&results).await.unwrap();
    assert!(recorded.iter().all(|r| matches!(r, Recorded::Applied(a) if a.state == State::Completed)));
    let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    assert_eq!(entries(&db, &key_refs, Event::Completed).await, 70);
    for claim in &claims {
        let attempts = l.store().attempts(claim.key()).await.unwrap();
        assert_eq!(attempts.len(), 1);
        assert_eq!(attempts[0].outcome, Some(AttemptOutcome::Succeeded), "{}", claim.key());
    }
}

/// A batch with nothing in it (every claim of a batch lost before its start, say) sends nothing:
/// PostgreSQL's lock that reads the clock once had no key to name.
async fn regression_an_empty_batch_starts_and_records_nothing<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    l.submit(&raw("empty:1")).await.unwrap();
    assert!(l.start_attempts(&[]).await.unwrap().is_empty());
    assert!(l.record_results(&[]).await.unwrap().is_empty());
    let action = l.store().find(&key("empty:1")).await.unwrap().unwrap();
    assert_eq!((action.state, action.attempts), (State::Pending, 0));
}
