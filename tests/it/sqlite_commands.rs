//! A short write transaction sent to SQLite in few commands (`BEGIN IMMEDIATE` with its first
//! statements, `COMMIT` with its last, a result's writes together; docs/BENCHMARKS.md, "The
//! drain"): a statement that fails in the middle of such a command leaves nothing written and no
//! transaction open, and the ledger goes on writing. The failure is a trigger that refuses one
//! write; the same tests run on PostgreSQL, where each statement goes on its own.

use crate::support::TestDb;
use actionledger::domain::{ActionKey, Capabilities, DestinationCatalog, Event, Evidence, RawSubmission, State};
use actionledger::ledger::{Outcome, Recorded, Report};
use actionledger::store::Store;
use sqlx::Connection as _;
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(30);

/// Long enough for any write here, short against SQLite's busy timeout (30 s): a transaction
/// left open would hold the write lock, and the writes after it would wait that long.
const PATIENCE: Duration = Duration::from_secs(10);

conformance!(
    a_claim_whose_audit_entry_fails_claims_nothing,
    a_start_whose_attempt_fails_counts_nothing,
    a_result_whose_audit_entry_fails_records_nothing,
    a_claim_whose_started_attempt_fails_claims_and_starts_nothing,
);

fn key(text: &str) -> ActionKey {
    ActionKey::parse(text).unwrap()
}

fn raw(key: &str) -> RawSubmission {
    RawSubmission { key: Some(key.to_owned()), payload: b"{}".to_vec(), ..Default::default() }
}

fn completed() -> Report {
    Report {
        outcome: Outcome::Completed { destination_id: "D-1".to_owned() },
        error: None,
        evidence: Evidence::default(),
    }
}

/// Makes the database refuse an insert into `table` of a row where `condition` holds (written
/// for both dialects over the new row `NEW`), through a connection of its own.
async fn refuse<S: Store>(db: &TestDb<S>, table: &str, condition: &str) {
    if db.url.starts_with("postgres") {
        let mut connection = sqlx::PgConnection::connect(&db.url).await.unwrap();
        let sql = format!(
            "SET search_path TO actionledger; CREATE FUNCTION refuse_{table}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
             IF {condition} THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$; \
             CREATE TRIGGER refuse_{table} BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION refuse_{table}()"
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&mut connection).await.unwrap();
    } else {
        let mut connection = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
        let sql = format!(
            "CREATE TRIGGER refuse_{table} BEFORE INSERT ON {table} WHEN {condition} \
             BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&mut connection).await.unwrap();
    }
}

/// Takes the refusal of [`refuse`] away again.
async fn allow<S: Store>(db: &TestDb<S>, table: &str) {
    if db.url.starts_with("postgres") {
        let sql = format!("SET search_path TO actionledger; DROP TRIGGER refuse_{table} ON {table}");
        let mut connection = sqlx::PgConnection::connect(&db.url).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&mut connection).await.unwrap();
    } else {
        let sql = format!("DROP TRIGGER refuse_{table}");
        let mut connection = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&mut connection).await.unwrap();
    }
}

/// More write transactions than the pool has connections, each in time: none of them waits for
/// a transaction that a failed command left open.
async fn writes_go_on<S: Store>(db: &TestDb<S>, prefix: &str) {
    for i in 0..20 {
        let submitted = tokio::time::timeout(PATIENCE, db.ledger.submit(&raw(&format!("{prefix}:{i}")))).await;
        submitted.expect("a write waited for the write lock").unwrap();
    }
}

async fn a_claim_whose_audit_entry_fails_claims_nothing<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    l.submit(&raw("claim:1")).await.unwrap();
    refuse(&db, "audit_trail", "NEW.actor = 'doomed'").await;
    // The claim's update runs (with the BEGIN, on SQLite), then its audit entry is refused.
    assert!(l.claim("doomed", LEASE, 1).await.is_err(), "the refused audit entry fails the claim");
    let action = l.store().find(&key("claim:1")).await.unwrap().unwrap();
    assert_eq!(action.state, State::Pending, "the claim's update was rolled back with its entry");
    assert_eq!(action.ownership_version, 0);
    assert_eq!(action.claimed_by, None);
    writes_go_on(&db, "after-claim").await;
    let claims = tokio::time::timeout(PATIENCE, l.claim("w1", LEASE, 1)).await.unwrap().unwrap();
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0].key(), &key("claim:1"), "the oldest pending action, as if never claimed");
    assert_eq!(claims[0].ownership_version(), 1);
    let trail = l.store().audit_trail(&key("claim:1")).await.unwrap();
    let claimed: Vec<_> = trail.iter().filter(|e| e.event == Event::Claimed).collect();
    assert_eq!(claimed.len(), 1, "one claim entry, the second claim's");
    assert_eq!(claimed[0].actor, "w1");
}

async fn a_start_whose_attempt_fails_counts_nothing<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    l.submit(&raw("start:1")).await.unwrap();
    let claim = l.claim("doomed", LEASE, 1).await.unwrap().pop().unwrap();
    refuse(&db, "attempts", "NEW.worker = 'doomed'").await;
    // The attempt count runs (with the BEGIN, on SQLite), then the attempt's insert is refused.
    assert!(l.start_attempt(&claim).await.is_err(), "the refused attempt fails the start");
    let action = l.store().find(&key("start:1")).await.unwrap().unwrap();
    assert_eq!(action.attempts, 0, "the count was rolled back with the attempt");
    assert_eq!(action.first_sent_at, None);
    assert_eq!(action.revision, claim.action.revision, "nothing written since the claim");
    assert!(l.store().attempts(&key("start:1")).await.unwrap().is_empty());
    writes_go_on(&db, "after-start").await;
    allow(&db, "attempts").await;
    let started = tokio::time::timeout(PATIENCE, l.start_attempt(&claim)).await.unwrap().unwrap();
    assert_eq!(started.number, 1, "the first attempt counted is the first");
    let attempts = l.store().attempts(&key("start:1")).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].id, started.id);
    assert_eq!(l.store().find(&key("start:1")).await.unwrap().unwrap().attempts, 1);
}

async fn a_result_whose_audit_entry_fails_records_nothing<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    l.submit(&raw("record:1")).await.unwrap();
    let claim = l.claim("w1", LEASE, 1).await.unwrap().pop().unwrap();
    let started = l.start_attempt(&claim).await.unwrap();
    let before = l.store().find(&key("record:1")).await.unwrap().unwrap();
    refuse(&db, "audit_trail", "NEW.to_state = 'completed'").await;
    // The action's write-back and the attempt's end run, then the audit entry is refused.
    assert!(l.record_result(&claim, started, &completed()).await.is_err(), "the refused entry fails the result");
    let action = l.store().find(&key("record:1")).await.unwrap().unwrap();
    assert_eq!(action.state, State::InProgress, "the action's write was rolled back with the entry");
    assert_eq!(action, before, "nothing written to the action");
    let attempts = l.store().attempts(&key("record:1")).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].ended_at, None, "the attempt's end was rolled back with the entry");
    writes_go_on(&db, "after-record").await;
    allow(&db, "audit_trail").await;
    let recorded = tokio::time::timeout(PATIENCE, l.record_result(&claim, started, &completed())).await.unwrap();
    assert!(matches!(recorded.unwrap(), Recorded::Applied(_)), "the claim is still current");
    let action = l.store().find(&key("record:1")).await.unwrap().unwrap();
    assert_eq!(action.state, State::Completed);
    let attempts = l.store().attempts(&key("record:1")).await.unwrap();
    assert!(attempts[0].ended_at.is_some());
    let trail = l.store().audit_trail(&key("record:1")).await.unwrap();
    assert_eq!(trail.iter().filter(|e| e.to_state == State::Completed).count(), 1);
}

async fn a_claim_whose_started_attempt_fails_claims_and_starts_nothing<S: Store>(db: TestDb<S>) {
    // A destination with a lookup protects against a repeat: its claims start their attempts.
    let looked = Capabilities { idempotency_retention: None, lookup: true, ..Default::default() };
    let l = db.ledger.clone().with_destinations(DestinationCatalog::new(
        std::collections::BTreeMap::from([("looked".to_owned(), looked)]),
        None,
    ));
    let submission = RawSubmission { destination: Some("looked".to_owned()), ..raw("claim-start:1") };
    l.submit(&submission).await.unwrap();
    refuse(&db, "attempts", "NEW.worker = 'doomed'").await;
    // The claim (with the BEGIN, on SQLite), its audit entry and the attempt count run, then the
    // attempt's insert is refused.
    assert!(l.claim("doomed", LEASE, 1).await.is_err(), "the refused attempt fails the claim");
    let action = l.store().find(&key("claim-start:1")).await.unwrap().unwrap();
    assert_eq!((action.state, action.ownership_version, action.attempts), (State::Pending, 0, 0));
    assert!(l.store().attempts(&key("claim-start:1")).await.unwrap().is_empty());
    let trail = l.store().audit_trail(&key("claim-start:1")).await.unwrap();
    assert!(trail.iter().all(|e| e.event != Event::Claimed), "no claim entry: {trail:?}");
    writes_go_on(&db, "after-claim-start").await;
    allow(&db, "attempts").await;
    let claim = tokio::time::timeout(PATIENCE, l.claim("doomed", LEASE, 1)).await.unwrap().unwrap().pop().unwrap();
    let started = claim.started.expect("the claim starts the attempt");
    assert_eq!(started.number, 1);
    let attempts = l.store().attempts(&key("claim-start:1")).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].id, started.id);
    assert_eq!(l.store().find(&key("claim-start:1")).await.unwrap().unwrap().attempts, 1);
}
