//! What each database itself refuses, whatever code talks to it: forbidden transitions, changes
//! to the audit trail, fencing tokens going back. And SQLite's file-level promises.

use crate::support::{self, TestDb};
use actionledger::domain::ManualCommand;
use actionledger::domain::{ActionKey, RawSubmission};
use actionledger::ledger::ManualRequest;
use actionledger::store::{PostgresStore, SqliteStore, Store};

trait RawSql {
    async fn exec(&self, sql: &'static str) -> Result<u64, String>;
}

impl RawSql for SqliteStore {
    async fn exec(&self, sql: &'static str) -> Result<u64, String> {
        sqlx::query(sql).execute(self.pool()).await.map(|r| r.rows_affected()).map_err(|e| e.to_string())
    }
}

impl RawSql for PostgresStore {
    async fn exec(&self, sql: &'static str) -> Result<u64, String> {
        sqlx::query(sql).execute(self.pool()).await.map(|r| r.rows_affected()).map_err(|e| e.to_string())
    }
}

conformance!(the_database_refuses_what_the_ledger_never_writes);

async fn the_database_refuses_what_the_ledger_never_writes<S: Store + RawSql>(db: TestDb<S>) {
    let l = &db.ledger;
    let raw = RawSubmission { key: Some("k".into()), payload: b"{}".to_vec(), ..Default::default() };
    l.submit(&raw).await.unwrap();
    let store = l.store();

    let forbidden = store.exec("UPDATE actions SET state = 'completed' WHERE key = 'k'").await;
    assert!(forbidden.unwrap_err().contains("forbidden state transition"), "pending -> completed skips the claim");
    let cancel = ManualRequest {
        key: ActionKey::parse("k").unwrap(),
        person: actionledger::domain::Person::parse("ops").unwrap(),
        reason: actionledger::domain::Reason::parse("test").unwrap(),
        expect_version: None,
        command: ManualCommand::Cancel,
        old_worker_stopped: false,
        confirmed_not_written: false,
    };
    l.manual(&cancel).await.unwrap();
    let revived = store.exec("UPDATE actions SET state = 'pending' WHERE key = 'k'").await;
    assert!(revived.is_err(), "cancelled is terminal");
    let back = store.exec("UPDATE actions SET ownership_version = -1 WHERE key = 'k'").await;
    assert!(back.unwrap_err().contains("never go back"));
    let inserted = store
        .exec("INSERT INTO actions (key, state, payload, fingerprint, created_at, updated_at) VALUES ('x', 'completed', '{}', 'f', 0, 0)")
        .await;
    assert!(inserted.unwrap_err().contains("starts pending"));
    let null_key = store
        .exec("INSERT INTO actions (key, state, payload, fingerprint, created_at, updated_at) VALUES (NULL, 'pending', '{}', 'f', 0, 0)")
        .await;
    assert!(null_key.is_err(), "keys are NOT NULL");

    for change in ["UPDATE audit_trail SET actor = 'someone else'", "DELETE FROM audit_trail"] {
        let refused = store.exec(change).await;
        assert!(refused.unwrap_err().contains("append-only"), "{change}");
    }
    let trail = store.audit_trail(&ActionKey::parse("k").unwrap()).await.unwrap();
    assert_eq!(trail.len(), 2, "the trail is intact");
}

#[tokio::test]
async fn postgres_refuses_truncating_the_audit_trail() {
    let Some(db) = support::postgres().await else {
        return;
    };
    let refused = db.ledger.store().exec("TRUNCATE audit_trail").await;
    assert!(refused.unwrap_err().contains("append-only"));
}

/// A client stopped inside a transaction (a paused VM, SIGSTOP) would otherwise hold its row
/// locks, and block the recovery of its claims, until it resumed.
#[tokio::test]
async fn postgres_sessions_end_a_transaction_left_idle() {
    let Some(db) = support::postgres().await else { return };
    let limit: String = sqlx::query_scalar("SHOW idle_in_transaction_session_timeout")
        .fetch_one(db.ledger.store().pool())
        .await
        .unwrap();
    assert_eq!(limit, actionledger::store::IDLE_IN_TRANSACTION_LIMIT);
}

#[tokio::test]
async fn sqlite_ledger_is_private_and_in_wal_mode() {
    use std::os::unix::fs::PermissionsExt as _;
    let db = support::sqlite().await;
    let raw = RawSubmission { key: Some("k".into()), payload: b"{}".to_vec(), ..Default::default() };
    db.ledger.submit(&raw).await.unwrap();
    let path = db.url.trim_start_matches("sqlite://");
    for file in [path.to_owned(), format!("{path}-wal"), format!("{path}-shm")] {
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{file} must be private, is {mode:o}");
    }
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode").fetch_one(db.ledger.store().pool()).await.unwrap();
    assert_eq!(mode, "wal");
    let timeout: i64 = sqlx::query_scalar("PRAGMA busy_timeout").fetch_one(db.ledger.store().pool()).await.unwrap();
    assert!(timeout >= 1000, "busy timeout set: {timeout}");
}

#[tokio::test]
async fn sqlite_refuses_in_memory_and_missing_directories() {
    let in_memory = SqliteStore::open("sqlite::memory:").await.unwrap_err().to_string();
    assert!(in_memory.contains("in-memory"), "{in_memory}");
    let missing =
        SqliteStore::open("sqlite:///nonexistent-dir-for-actionledger/ledger.db").await.unwrap_err().to_string();
    assert!(missing.contains("does not exist"), "{missing}");
}
