//! Retention (rule 7): a purge reduces settled actions older than its window to their tombstone,
//! records the run with its counts, and a purged key is still recognised and never performed or
//! changed again. Run against SQLite and PostgreSQL.

use crate::conformance::action_in;
use crate::support::{TestDb, person_request};
use actionledger::Ledger;
use actionledger::domain::{
    ActionKey, ActionRecord, ActorKind, Evidence, LookupReport, LookupVerdict, ManualCommand, Person, PurgeCounts,
    PurgeRequest, RawSubmission, Reason, Refusal, State, SubmitOutcome,
};
use actionledger::ledger::{Claim, LedgerError, Outcome, PurgeReport, Recorded, Recovery, Report, StartedAttempt};
use actionledger::store::{ListFilter, Store};
use std::time::Duration;

conformance!(
    a_purge_keeps_the_tombstone_and_removes_the_bulk,
    a_replay_of_a_purged_key_is_a_duplicate_and_creates_nothing,
    a_purged_action_is_never_claimed_retried_resolved_or_changed,
    unsettled_recent_and_proposed_actions_are_untouched,
    a_dry_run_counts_the_same_and_changes_nothing,
    every_run_is_recorded_with_its_counts,
);

const DAY: Duration = Duration::from_hours(24);
const LEASE: Duration = Duration::from_secs(30);

fn key(text: &str) -> ActionKey {
    ActionKey::parse(text).unwrap()
}

fn raw(key: &str, payload: &str) -> RawSubmission {
    RawSubmission { key: Some(key.to_owned()), payload: payload.as_bytes().to_vec(), ..Default::default() }
}

fn report(outcome: Outcome) -> Report {
    Report { outcome, error: None, evidence: Evidence::default() }
}

fn request(days: u64, states: &[State], dry_run: bool) -> PurgeRequest {
    PurgeRequest::new(
        DAY * u32::try_from(days).unwrap(),
        states,
        Person::parse("Ana Lima").unwrap(),
        Reason::parse("retention policy: 90 days").unwrap(),
        dry_run,
    )
    .unwrap()
}

async fn purge<S: Store>(ledger: &Ledger<S>, days: u64) -> PurgeReport {
    ledger.purge(&request(days, &[State::Completed, State::Cancelled], false)).await.unwrap()
}

async fn find<S: Store>(ledger: &Ledger<S>, k: &str) -> ActionRecord {
    ledger.store().find(&key(k)).await.unwrap().unwrap()
}

/// How many deliveries, attempts, lookups and audit entries action `k` has.
async fn rows<S: Store>(ledger: &Ledger<S>, k: &str) -> [usize; 4] {
    let store = ledger.store();
    let k = key(k);
    [
        store.deliveries(&k).await.unwrap().len(),
        store.attempts(&k).await.unwrap().len(),
        store.lookups(&k).await.unwrap().len(),
        store.audit_trail(&k).await.unwrap().len(),
    ]
}

/// A completed action settled by a lookup: one delivery, one attempt, one lookup.
async fn completed_by_lookup<S: Store>(ledger: &Ledger<S>, k: &str) {
    action_in(ledger, k, State::Unknown).await;
    let action = find(ledger, k).await;
    let found = LookupReport {
        verdict: LookupVerdict::Found,
        records: 1,
        destination_id: Some("crm-found".into()),
        evidence: Evidence { status: Some(200), destination_id: Some("crm-found".into()), body: Some("{}".into()) },
        detail: Some("found by external reference".into()),
    };
    let settled = ledger.settle_unknown(&action.key, action.revision, "reconciler", ActorKind::Worker, &found).await;
    assert_eq!(settled.unwrap().unwrap().state, State::Completed);
}

async fn a_purge_keeps_the_tombstone_and_removes_the_bulk<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    action_in(l, "done", State::Completed).await;
    l.submit(&raw("done", r#"{"n":1}"#)).await.unwrap();
    action_in(l, "dropped", State::Cancelled).await;
    completed_by_lookup(l, "looked-up").await;
    let before = [find(l, "done").await, find(l, "dropped").await, find(l, "looked-up").await];
    assert_eq!(rows(l, "done").await[..3], [2, 1, 0]);
    assert_eq!(rows(l, "looked-up").await[..3], [1, 1, 1]);
    let audit_before = [rows(l, "done").await[3], rows(l, "dropped").await[3], rows(l, "looked-up").await[3]];

    l.store().clock().advance(DAY * 91);
    let run = purge(l, 90).await;
    assert!(!run.dry_run);
    assert!(run.record.id > 0);
    assert_eq!(run.record.counts, PurgeCounts { actions: 3, deliveries: 4, attempts: 2, lookups: 1 });

    for (old, audit) in before.iter().zip(audit_before) {
        let k = old.key.as_str();
        let now = find(l, k).await;
        assert_eq!(rows(l, k).await, [0, 0, 0, audit], "{k}: histories removed, audit trail kept in full");
        assert_eq!(now.payload.fingerprint(), old.payload.fingerprint(), "{k}: the fingerprint is the tombstone's");
        assert_eq!(now.payload.canonical(), "null", "{k}: the payload is gone");
        assert_eq!((now.state, &now.destination_id), (old.state, &old.destination_id), "{k}");
        assert_eq!(now.updated_at, old.updated_at, "{k}: the settled time is kept");
        assert_eq!(now.last_error, None);
        let detail = l.detail(&key(k)).await.unwrap();
        let purge = detail.purge.expect("show says it was purged");
        assert_eq!((purge.id, purge.owner.as_str()), (run.record.id, "Ana Lima"));
    }
    assert_eq!(find(l, "looked-up").await.destination_id.as_deref(), Some("crm-found"));
    // `list` still lists them in their final state.
    let completed = l.list(&ListFilter { state: Some(State::Completed), limit: 10, ..ListFilter::default() }).await;
    assert_eq!(completed.unwrap().len(), 2);
}

async fn a_replay_of_a_purged_key_is_a_duplicate_and_creates_nothing<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    action_in(l, "done", State::Completed).await;
    let old = find(l, "done").await;
    l.store().clock().advance(DAY * 91);
    assert_eq!(purge(l, 90).await.record.counts.actions, 1);
    let tombstone = find(l, "done").await;

    let replay = l.submit(&raw("done", r#"{"n":1}"#)).await.unwrap();
    assert_eq!(replay.outcome, SubmitOutcome::Duplicate);
    assert_eq!(replay.action.id, old.id, "the same action, never a new one");
    assert!(l.claim("w", LEASE, 10).await.unwrap().is_empty(), "nothing to perform");

    let changed = l.submit(&raw("done", r#"{"n":2}"#)).await.unwrap();
    assert_eq!(changed.outcome, SubmitOutcome::Conflict);
    let after = find(l, "done").await;
    assert_eq!(after, tombstone, "a changed payload for a purged key is not kept: the tombstone never changes");
    assert!(l.claim("w", LEASE, 10).await.unwrap().is_empty(), "nothing to perform");
    let audit = l.store().audit_trail(&key("done")).await.unwrap();
    let last = audit.last().unwrap();
    assert!(last.reason.as_deref().unwrap_or_default().contains("purged by purge run"), "{last:?}");

    let counts = l.counts().await.unwrap();
    assert_eq!(counts.iter().map(|(_, n)| n).sum::<i64>(), 1, "still one action: {counts:?}");
    // The replays after the purge are recorded as deliveries of the tombstone.
    assert_eq!(rows(l, "done").await[0], 2);
}

async fn a_purged_action_is_never_claimed_retried_resolved_or_changed<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    // A claim whose owner lost it, then completed by the new owner: the old owner's late result
    // arrives after the purge.
    let (old, old_attempt) = completed_by_a_new_owner(l, "late").await;
    action_in(l, "dropped", State::Cancelled).await;

    l.store().clock().advance(DAY * 91);
    let run = purge(l, 90).await;
    assert_eq!(run.record.counts.actions, 2);
    let tombstones = [find(l, "late").await, find(l, "dropped").await];

    let other_record = report(Outcome::Completed { destination_id: "crm-2".into() });
    let late = l.record_result(&old, old_attempt, &other_record).await.unwrap();
    assert!(matches!(late, Recorded::Stale(_)), "{late:?}");
    assert_eq!(find(l, "late").await, tombstones[0], "a late result changes nothing, not even to conflict");

    let commands = [
        ManualCommand::Retry,
        ManualCommand::ResolveCompleted { destination_id: "crm-9".into() },
        ManualCommand::ResolveNotWritten,
        ManualCommand::Cancel,
        ManualCommand::Approve { proposal: None },
        ManualCommand::Reject { proposal: None },
        ManualCommand::Takeover,
        ManualCommand::Assign { to: "Ana Lima".into() },
    ];
    for k in ["late", "dropped"] {
        for command in &commands {
            match l.manual(&person_request(k, command.clone())).await {
                Err(LedgerError::Refused(refusal @ Refusal::Purged { run: id, .. })) => {
                    assert_eq!(id, run.record.id);
                    assert!(refusal.to_string().contains("was purged by purge run"), "{refusal}");
                }
                other => panic!("{} on purged {k} must be refused naming the purge: {other:?}", command.verb()),
            }
        }
    }
    assert_eq!([find(l, "late").await, find(l, "dropped").await], tombstones);
    assert!(l.claim("w", LEASE, 10).await.unwrap().is_empty());
}

async fn unsettled_recent_and_proposed_actions_are_untouched<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let unsettled = [State::Pending, State::InProgress, State::Unknown, State::Conflict, State::Held, State::Failed];
    // Pending, backing off past the end of the test, so that no later claim takes it.
    l.submit(&raw("old-pending", r#"{"n":1}"#)).await.unwrap();
    let claim = l.claim("w", LEASE, 1).await.unwrap().pop().unwrap();
    let attempt = l.start_attempt(&claim).await.unwrap();
    l.record_result(&claim, attempt, &report(Outcome::RetryLater { after: DAY * 1000 })).await.unwrap();
    for &state in &unsettled[1..] {
        action_in(l, &format!("old-{state}"), state).await;
    }
    // A settled action with a proposed payload waiting for a person.
    action_in(l, "proposed", State::Completed).await;
    assert_eq!(l.submit(&raw("proposed", r#"{"n":2}"#)).await.unwrap().outcome, SubmitOutcome::Conflict);
    // A completed action with a late result no person has acknowledged yet.
    let (old, old_attempt) = completed_by_a_new_owner(l, "late-noted").await;
    l.record_result(&old, old_attempt, &report(Outcome::Failed { permanent: false })).await.unwrap();
    let noted = find(l, "late-noted").await;
    assert_eq!((noted.state, noted.late_results), (State::Completed, 1));
    action_in(l, "old-done", State::Completed).await;
    l.store().clock().advance(DAY * 60);
    action_in(l, "recent", State::Completed).await;
    l.store().clock().advance(DAY * 31);

    let mut keys: Vec<String> = unsettled.iter().map(|s| format!("old-{s}")).collect();
    keys.extend(["proposed".to_owned(), "late-noted".to_owned(), "recent".to_owned()]);
    let mut before = Vec::new();
    for k in &keys {
        before.push((find(l, k).await, rows(l, k).await));
    }
    let run = purge(l, 90).await;
    assert_eq!(run.record.counts.actions, 1, "only old-done is settled, older than 90 days, with nothing waiting");
    for (k, before) in keys.iter().zip(before) {
        assert_eq!((find(l, k).await, rows(l, k).await), before, "{k} untouched");
        assert!(l.detail(&key(k)).await.unwrap().purge.is_none(), "{k}");
    }
    assert!(l.detail(&key("old-done")).await.unwrap().purge.is_some());
    // Naming only cancelled leaves the completed alone.
    l.store().clock().advance(DAY * 90);
    let cancelled_only = l.purge(&request(90, &[State::Cancelled], false)).await.unwrap();
    assert_eq!(cancelled_only.record.counts.actions, 0);
    assert!(l.detail(&key("recent")).await.unwrap().purge.is_none());
}

async fn a_dry_run_counts_the_same_and_changes_nothing<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    action_in(l, "done", State::Completed).await;
    action_in(l, "dropped", State::Cancelled).await;
    completed_by_lookup(l, "looked-up").await;
    l.store().clock().advance(DAY * 91);
    let keys = ["done", "dropped", "looked-up"];
    let mut before = Vec::new();
    for k in keys {
        before.push((find(l, k).await, rows(l, k).await));
    }
    let dry = l.purge(&request(90, &[State::Completed, State::Cancelled], true)).await.unwrap();
    assert!(dry.dry_run);
    assert_eq!(dry.record.id, 0, "a dry run is not recorded");
    for (k, before) in keys.iter().zip(before) {
        assert_eq!((find(l, k).await, rows(l, k).await), before, "{k} unchanged by a dry run");
        assert!(l.detail(&key(k)).await.unwrap().purge.is_none());
    }
    let real = purge(l, 90).await;
    assert_eq!(dry.record.counts, real.record.counts);
    assert_eq!(real.record.counts, PurgeCounts { actions: 3, deliveries: 3, attempts: 2, lookups: 1 });
}

async fn every_run_is_recorded_with_its_counts<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    action_in(l, "first", State::Completed).await;
    l.store().clock().advance(DAY * 10);
    action_in(l, "second", State::Cancelled).await;
    l.store().clock().advance(DAY * 85);
    let first = purge(l, 90).await;
    assert_eq!(first.record.counts.actions, 1);
    let nothing = purge(l, 90).await;
    assert_eq!(nothing.record.counts, PurgeCounts::default(), "a run that finds nothing is recorded too");
    assert!(nothing.record.id > first.record.id);
    l.store().clock().advance(DAY * 10);
    let second = purge(l, 90).await;
    assert_eq!(second.record.counts.actions, 1);

    let recorded = l.store().purge_of(&key("first")).await.unwrap().unwrap();
    assert_eq!(recorded.id, first.record.id);
    assert_eq!(recorded.counts, first.record.counts);
    assert_eq!((recorded.owner.as_str(), recorded.reason.as_str()), ("Ana Lima", "retention policy: 90 days"));
    assert_eq!(recorded.older_than, DAY * 90);
    assert_eq!(recorded.states, [State::Cancelled, State::Completed]);
    assert_eq!(recorded.settled_before, first.record.settled_before);
    assert_eq!(l.store().purge_of(&key("second")).await.unwrap().unwrap().id, second.record.id);
}

/// The database itself keeps the purge record append-only and the tombstone unchanged (the
/// PostgreSQL twin is `roles::only_the_owner_purges`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_keeps_the_purge_record_and_the_tombstones() {
    let db = crate::support::sqlite().await;
    let l = &db.ledger;
    action_in(l, "done", State::Completed).await;
    l.store().clock().advance(DAY * 91);
    assert_eq!(purge(l, 90).await.record.counts.actions, 1);
    for change in [
        "UPDATE purges SET owner = 'someone else'",
        "DELETE FROM purges",
        "UPDATE purged_actions SET purge_id = 2",
        "DELETE FROM purged_actions",
        "UPDATE actions SET payload = '{}' WHERE key = 'done'",
        "UPDATE actions SET state = 'conflict' WHERE key = 'done'",
    ] {
        let result = sqlx::query(sqlx::AssertSqlSafe(change)).execute(l.store().pool()).await;
        assert!(result.is_err(), "{change} must be refused");
    }
    assert!(l.detail(&key("done")).await.unwrap().purge.is_some());
}

/// An action whose first owner lost its claim (the lease expired after it started an attempt)
/// and which the new owner then completed: the first owner's claim and attempt, whose result is
/// now late.
async fn completed_by_a_new_owner<S: Store>(l: &Ledger<S>, key: &str) -> (Claim, StartedAttempt) {
    l.submit(&raw(key, r#"{"n":1}"#)).await.unwrap();
    let old = l.claim("old-owner", LEASE, 1).await.unwrap().pop().unwrap();
    let old_attempt = l.start_attempt(&old).await.unwrap();
    l.store().clock().advance(LEASE * 2);
    let recovered = crate::support::protected_by_lookup(l, &["crm"])
        .recover_expired(old.key(), old.ownership_version(), "new-owner", LEASE)
        .await
        .unwrap();
    let Recovery::Claimed(new) = recovered else { panic!("taken over: {recovered:?}") };
    let attempt = l.start_attempt(&new).await.unwrap();
    l.record_result(&new, attempt, &report(Outcome::Completed { destination_id: "crm-1".into() })).await.unwrap();
    (old, old_attempt)
}
