//! The column guards of PostgreSQL (migration 0095, the policy in src/store/pg_guards.rs): a
//! login of each role tries every column of every table by itself, and the forgeries a tester
//! made by direct SQL, each refused with nothing changed; the roles' own commands still pass.
//! SQLite has no roles, so there is nothing to try there.

use crate::roles::{exec, ledger, open_as};
use actionledger::Ledger;
use actionledger::domain::{ActionKey, ManualCommand, RawSubmission, State};
use actionledger::ledger::{Claim, Outcome, Recovery, Report};
use actionledger::store::pg_guards::{self, Change};
use actionledger::store::{PostgresStore, Store};
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(30);

fn key(text: &str) -> ActionKey {
    ActionKey::parse(text).unwrap()
}

fn raw(key: &str, payload: &str) -> RawSubmission {
    RawSubmission {
        key: Some(key.to_owned()),
        payload: payload.as_bytes().to_vec(),
        source: Some("shop".into()),
        source_version: Some(1),
        ..RawSubmission::default()
    }
}

fn report(outcome: Outcome) -> Report {
    Report { outcome, error: None, evidence: actionledger::domain::Evidence::default() }
}

async fn claim_of(ledger: &Ledger<PostgresStore>, k: &str) -> Claim {
    let mut claims = ledger.claim("setup", LEASE, 1).await.unwrap();
    let claim = claims.pop().unwrap_or_else(|| panic!("{k} should be claimable"));
    assert_eq!(claim.key().as_str(), k, "the oldest pending action is the one claimed");
    claim
}

/// Actions in the states the forgeries need, made through the superuser's ledger: pending,
/// claimed, unknown (with an unacknowledged late result), completed, held (an old worker may
/// act), and in conflict with a proposal waiting.
async fn fixture(admin: &Ledger<PostgresStore>) {
    admin.submit(&raw("g:done", "{}")).await.unwrap();
    let done = claim_of(admin, "g:done").await;
    let attempt = admin.start_attempt(&done).await.unwrap();
    admin.record_result(&done, attempt, &report(Outcome::Completed { destination_id: "CRM-1".into() })).await.unwrap();
    admin.submit(&raw("g:unknown", "{}")).await.unwrap();
    let unknown = claim_of(admin, "g:unknown").await;
    let attempt = admin.start_attempt(&unknown).await.unwrap();
    admin.record_result(&unknown, attempt, &report(Outcome::Unknown)).await.unwrap();
    exec(admin, "UPDATE attempts SET stale = true WHERE action_key = 'g:unknown'").await.unwrap();
    exec(admin, "UPDATE actions SET late_results = 1 WHERE key = 'g:unknown'").await.unwrap();
    admin.submit(&raw("g:held", "{}")).await.unwrap();
    claim_of(admin, "g:held").await;
    exec(
        admin,
        "UPDATE actions SET state = 'held', old_worker_may_act = true, claimed_by = NULL, lease_expires_at = NULL \
         WHERE key = 'g:held'",
    )
    .await
    .unwrap();
    admin.submit(&raw("g:claimed", "{}")).await.unwrap();
    claim_of(admin, "g:claimed").await;
    admin.submit(&raw("g:conflict", r#"{"qty":1}"#)).await.unwrap();
    admin.submit(&raw("g:conflict", r#"{"qty":2}"#)).await.unwrap();
    admin.submit(&raw("g:pending", "{}")).await.unwrap();
    assert_eq!(admin.store().find(&key("g:unknown")).await.unwrap().unwrap().state, State::Unknown);
    assert_eq!(admin.store().find(&key("g:conflict")).await.unwrap().unwrap().state, State::Conflict);
}

/// What `show` reads of each action of the fixture.
async fn details(admin: &Ledger<PostgresStore>) -> Vec<actionledger::ledger::ActionDetail> {
    let mut rows = Vec::new();
    for k in ["g:pending", "g:done", "g:unknown", "g:held", "g:conflict", "g:claimed"] {
        rows.push(admin.detail(&key(k)).await.unwrap());
    }
    rows
}

/// Runs `statements` in one transaction of `ledger`'s pool whose deferred checks run at once, then
/// rolls it back: the SQLSTATE of the refusal, or the rows the last statement changed.
async fn attempt(ledger: &Ledger<PostgresStore>, statements: &[&str]) -> Result<u64, String> {
    let mut tx = ledger.store().pool().begin().await.unwrap();
    sqlx::query("SET CONSTRAINTS ALL IMMEDIATE").execute(&mut *tx).await.unwrap();
    let mut changed = 0;
    for statement in statements {
        match sqlx::query(sqlx::AssertSqlSafe(statement.to_string())).execute(&mut *tx).await {
            Ok(done) => changed = done.rows_affected(),
            Err(sqlx::Error::Database(db)) => {
                return Err(format!("{}: {}", db.code().unwrap_or_default(), db.message()));
            }
            Err(other) => panic!("{statement}: {other}"),
        }
    }
    tx.rollback().await.unwrap();
    Ok(changed)
}

/// Asserts that the statements, run as one transaction, are refused for lack of privilege.
async fn refused(ledger: &Ledger<PostgresStore>, what: &str, statements: &[&str]) {
    match attempt(ledger, statements).await {
        Err(refusal) if refusal.starts_with("42501") => {}
        other => panic!("{what}: must be refused for lack of privilege ({statements:?}), got {other:?}"),
    }
}

/// Another value of a column of this type, as SQL over the column's own.
fn another_value(column: &str, data_type: &str, domain: Option<&str>) -> String {
    match (domain, data_type) {
        (Some("actionledger_state"), _) => "'completed'".into(),
        (Some("actionledger_actor_kind"), _) => "'source'".into(),
        (Some("actionledger_attempt_outcome"), _) => "'succeeded'".into(),
        (Some("actionledger_event"), _) => "'retry'".into(),
        (_, "bigint" | "integer") => format!("COALESCE({column}, 0) + 7"),
        (_, "boolean") => format!("NOT COALESCE({column}, false)"),
        (_, "text") => format!("COALESCE({column}, '') || '-forged'"),
        (_, "timestamp with time zone") => "now() - interval '1 day'".into(),
        (_, "bytea") => "'\\x00'::bytea".into(),
        other => panic!("{column}: no other value for a column of type {other:?}"),
    }
}

/// The row of `table` each role's try changes: one the role's own commands write where there is
/// one (a claimed action for a worker, an unknown one for a reviewer).
fn row_of(table: &str, role: &str) -> &'static str {
    match (table, role) {
        ("actions", "worker") => "key = 'g:claimed'",
        ("actions", _) => "key = 'g:unknown'",
        ("attempts", _) => "action_key = 'g:unknown'",
        ("proposals", _) => "action_key = 'g:conflict'",
        _ => "true",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_column_is_guarded_as_the_policy_says() {
    let Some((admin, url)) = ledger().await else { return };
    fixture(&admin).await;
    let columns: Vec<(String, String, String, Option<String>)> = sqlx::query_as(
        "SELECT table_name::text, column_name::text, data_type::text, domain_name::text \
         FROM information_schema.columns c \
         JOIN information_schema.tables t USING (table_schema, table_name) \
         WHERE table_schema = current_schema() AND t.table_type = 'BASE TABLE' \
         ORDER BY table_name, ordinal_position",
    )
    .fetch_all(admin.store().pool())
    .await
    .unwrap();
    let unclassified: Vec<String> = columns
        .iter()
        .filter(|(table, column, _, _)| pg_guards::policy_of(table, column).is_none())
        .map(|(table, column, _, _)| format!("{table}.{column}"))
        .collect();
    assert!(
        unclassified.is_empty(),
        "columns no policy classifies (add them to POLICY in src/store/pg_guards.rs): {unclassified:?}"
    );
    assert_eq!(columns.len(), pg_guards::POLICY.len(), "POLICY names a column the ledger does not have");

    let mut tried = 0;
    for role in ["worker", "reviewer", "viewer"] {
        let login = open_as(&admin, &url, &format!("actionledger_{role}")).await;
        for (table, column, data_type, domain) in &columns {
            let policy = pg_guards::policy_of(table, column).unwrap();
            let change = match role {
                "worker" => policy.worker,
                "reviewer" => policy.reviewer,
                _ => Change::Never,
            };
            let value = another_value(column, data_type, domain.as_deref());
            let sql = format!("UPDATE {table} SET {column} = {value} WHERE {}", row_of(table, role));
            let what = format!("{role} changing {table}.{column} alone ({change:?})");
            if change.accepts_alone() {
                assert_eq!(attempt(&login, &[&sql]).await, Ok(1), "{what}");
            } else {
                refused(&login, &what, &[&sql]).await;
            }
            tried += 1;
        }
    }
    assert_eq!(tried, 3 * columns.len());
}

/// The database's time of the transaction, as the ledger writes it: one value for every column of
/// a statement (a new action's creation and last change are the same instant).
const TX_NOW: &str = "(extract(epoch FROM transaction_timestamp()) * 1000)::bigint";

/// The row a command of `role` inserts into `table` (as column and SQL value), and what else it
/// writes in the same statement: `{row}` is the insert of the row, returning `key` for actions.
/// `None` where the role's commands insert nothing into the table: the worker's row is tried.
fn inserted_row(table: &str, role: &str, login: &str) -> Option<(Vec<(&'static str, String)>, String)> {
    let of = |key: &str, column: &str| format!("(SELECT {column} FROM actions WHERE key = '{key}')");
    let plain = "{row}".to_owned();
    let submitted = |actor: &str, kind: &str| {
        format!(
            "WITH created AS ({{row}} RETURNING key) INSERT INTO audit_trail (action_key, at, actor, actor_kind, \
             event, from_state, to_state, ownership_version, revision) \
             SELECT key, {TX_NOW}, '{actor}', '{kind}', 'submitted', NULL, 'pending', 0, 1 FROM created"
        )
    };
    let new_action = |key: &str, from: &str| {
        vec![
            ("key", format!("'{key}'")),
            ("state", "'pending'".to_owned()),
            ("payload", of(from, "payload")),
            ("fingerprint", of(from, "fingerprint")),
            ("source", of(from, "source")),
            ("source_version", of(from, "source_version")),
            ("destination", of(from, "destination")),
            ("ownership_version", "0".to_owned()),
            ("revision", "1".to_owned()),
            ("attempts", "0".to_owned()),
            ("attempts_in_round", "0".to_owned()),
            ("payload_revision", "1".to_owned()),
            ("created_at", TX_NOW.to_owned()),
            ("updated_at", TX_NOW.to_owned()),
        ]
    };
    let entry = |key: &str, actor: &str, kind: &str, event: &str, state: &str| {
        vec![
            ("action_key", format!("'{key}'")),
            ("at", TX_NOW.to_owned()),
            ("actor", format!("'{actor}'")),
            ("actor_kind", format!("'{kind}'")),
            ("event", format!("'{event}'")),
            ("from_state", format!("'{state}'")),
            ("to_state", format!("'{state}'")),
            ("ownership_version", of(key, "ownership_version")),
            ("revision", of(key, "revision")),
        ]
    };
    // A lookup that got no answer, kept for an unknown action.
    let failed_lookup = |actor: &str| {
        vec![
            ("action_key", "'g:unknown'".to_owned()),
            ("at", TX_NOW.to_owned()),
            ("actor", format!("'{actor}'")),
            ("verdict", "'failed'".to_owned()),
            ("records", "0".to_owned()),
            ("response_status", "503".to_owned()),
            ("response_body", "'busy'".to_owned()),
            ("detail", "'timed out'".to_owned()),
        ]
    };
    Some(match (table, role) {
        ("actions", "reviewer") => (new_action("g:done#recreate-1", "g:done"), submitted(login, "person")),
        ("actions", _) => (new_action("g:new", "g:pending"), submitted("shop", "source")),
        ("audit_trail", "reviewer") => (entry("g:unknown", login, "person", "assigned", "unknown"), plain),
        ("audit_trail", _) => (entry("g:claimed", "w1", "worker", "late_result", "in_progress"), plain),
        ("lookups", "reviewer") => (failed_lookup(login), plain),
        ("lookups", _) => (failed_lookup("w1"), plain),
        (table, _) => (worker_only_row(table)?, plain),
    })
}

/// The row a worker's command inserts into a table only a worker inserts into.
fn worker_only_row(table: &str) -> Option<Vec<(&'static str, String)>> {
    let of = |key: &str, column: &str| format!("(SELECT {column} FROM actions WHERE key = '{key}')");
    Some(match table {
        "attempts" => vec![
            ("action_key", "'g:claimed'".to_owned()),
            ("number", "9".to_owned()),
            ("worker", "'setup'".to_owned()),
            ("ownership_version", of("g:claimed", "ownership_version")),
            ("started_at", TX_NOW.to_owned()),
        ],
        "deliveries" => vec![
            ("action_key", "'g:pending'".to_owned()),
            ("source", "'shop'".to_owned()),
            ("source_version", "1".to_owned()),
            ("fingerprint", of("g:pending", "fingerprint")),
            ("outcome", "'duplicate'".to_owned()),
            ("received_at", TX_NOW.to_owned()),
        ],
        "proposals" => vec![
            ("action_key", "'g:pending'".to_owned()),
            ("fingerprint", r#"encode(sha256(convert_to('{"qty":5}', 'UTF8')), 'hex')"#.to_owned()),
            ("payload", r#"'{"qty":5}'"#.to_owned()),
            ("source", "'shop'".to_owned()),
            ("source_version", "2".to_owned()),
            ("received_at", TX_NOW.to_owned()),
        ],
        "refused_submissions" => vec![
            ("received_at", TX_NOW.to_owned()),
            ("key_excerpt", "'k k'".to_owned()),
            ("problem", "'invalid_key'".to_owned()),
            ("message", "'whitespace in the key'".to_owned()),
        ],
        _ => return None,
    })
}

/// A forged value of `column` of an inserted row, over the command's `value` (`NULL` where the
/// command leaves the column out): another action for a reference, a time a day in the past (or
/// now, for a time the command leaves unset), a value the column's check allows.
fn forged_insert_value(column: &str, data_type: &str, domain: Option<&str>, value: &str) -> String {
    const TIMES: &[&str] = &[
        "at",
        "created_at",
        "updated_at",
        "received_at",
        "started_at",
        "ended_at",
        "decided_at",
        "acknowledged_at",
        "lease_expires_at",
        "not_before",
        "first_sent_at",
        "window_started_at",
    ];
    match column {
        "id" => "9000007".into(),
        "action_key" => "'g:conflict'".into(),
        "outcome" if domain.is_none() => "'created'".into(),
        "verdict" => "'found'".into(),
        "decision" => "'approved'".into(),
        time if TIMES.contains(&time) && value == "NULL" => TX_NOW.into(),
        time if TIMES.contains(&time) => format!("({value}) - 86400000"),
        _ => another_value(&format!("({value})"), data_type, domain),
    }
}

/// The refusals of an insert: for lack of privilege (the guards, the grants), by the check of a
/// new action's first state (0001), or by a check constraint a forged value breaks.
async fn insert_refused(ledger: &Ledger<PostgresStore>, what: &str, statement: &str) {
    match attempt(ledger, &[statement]).await {
        Err(refusal) if ["42501", "P0001", "23514"].iter().any(|code| refusal.starts_with(code)) => {}
        other => panic!("{what}: must be refused ({statement}), got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_inserted_column_is_guarded_as_the_policy_says() {
    let Some((admin, url)) = ledger().await else { return };
    fixture(&admin).await;
    let columns: Vec<(String, String, String, Option<String>)> = sqlx::query_as(
        "SELECT table_name::text, column_name::text, data_type::text, domain_name::text \
         FROM information_schema.columns WHERE table_schema = current_schema() \
           AND table_name IN ('actions', 'attempts', 'audit_trail', 'deliveries', 'lookups', 'proposals', \
                              'refused_submissions') \
         ORDER BY table_name, ordinal_position",
    )
    .fetch_all(admin.store().pool())
    .await
    .unwrap();
    let unclassified: Vec<String> = columns
        .iter()
        .filter(|(table, column, _, _)| pg_guards::insert_policy_of(table, column).is_none())
        .map(|(table, column, _, _)| format!("{table}.{column}"))
        .collect();
    assert!(unclassified.is_empty(), "columns no insert policy classifies (INSERT_POLICY): {unclassified:?}");
    assert_eq!(columns.len(), pg_guards::INSERT_POLICY.len(), "INSERT_POLICY names a column the ledger lacks");

    let mut tried = 0;
    for role in ["worker", "reviewer", "viewer"] {
        let login = open_as(&admin, &url, &format!("actionledger_{role}")).await;
        let person = format!("{}_{role}", crate::roles::database_name(&url));
        let mut tables: Vec<&str> = columns.iter().map(|(table, ..)| table.as_str()).collect();
        tables.dedup();
        for table in tables {
            let (row, statement) = inserted_row(table, role, &person)
                .or_else(|| inserted_row(table, "worker", "w1"))
                .unwrap_or_else(|| panic!("no row of {table} to try"));
            let insert = |forged: Option<(&str, String)>| {
                let mut row = row.clone();
                if let Some((column, value)) = forged {
                    match row.iter_mut().find(|(name, _)| *name == column) {
                        Some(cell) => cell.1 = value,
                        None => row.push((pg_guards::insert_policy_of(table, column).unwrap().column, value)),
                    }
                }
                let names: Vec<&str> = row.iter().map(|(name, _)| *name).collect();
                let values: Vec<&str> = row.iter().map(|(_, value)| value.as_str()).collect();
                let insert = format!("INSERT INTO {table} ({}) SELECT {}", names.join(", "), values.join(", "));
                statement.replace("{row}", &insert)
            };
            let policy_of = |column: &str| {
                let policy = pg_guards::insert_policy_of(table, column).unwrap();
                match role {
                    "worker" => policy.worker,
                    "reviewer" => policy.reviewer,
                    _ => pg_guards::Insert::NotGranted,
                }
            };
            let granted = policy_of("id") != pg_guards::Insert::NotGranted;
            if granted {
                assert_eq!(attempt(&login, &[&insert(None)]).await.map(|_| ()), Ok(()), "{role}: {table} as written");
            }
            for (t, column, data_type, domain) in columns.iter().filter(|(t, ..)| t == table) {
                let command_value = row.iter().find(|(name, _)| name == column).map_or("NULL", |(_, v)| v.as_str());
                let value = forged_insert_value(column, data_type, domain.as_deref(), command_value);
                let sql = insert(Some((column, value)));
                let policy = policy_of(column);
                let what = format!("{role} inserting {t} with {column} forged ({policy:?})");
                if policy.accepts_another() {
                    assert_eq!(attempt(&login, &[&sql]).await.map(|_| ()), Ok(()), "{what}: {sql}");
                } else {
                    insert_refused(&login, &what, &sql).await;
                }
                tried += 1;
            }
        }
    }
    assert_eq!(tried, 3 * columns.len());
}

/// Lookups, deliveries and proposals forged by direct SQL (see [`forged_inserts_are_refused`]):
/// each refused, tried in a transaction that is rolled back.
async fn forged_evidence_is_refused(worker: &Ledger<PostgresStore>, reviewer: &Ledger<PostgresStore>, login: &str) {
    // Lookups: a verdict with evidence for an action the login settles nothing of.
    let lookup = |actor: &str, verdict: &str, key: &str| {
        format!(
            "INSERT INTO lookups (action_key, at, actor, verdict, records, destination_id, response_body) \
             VALUES ('{key}', {TX_NOW}, '{actor}', '{verdict}', 1, 'CRM-9', 'found it')"
        )
    };
    refused(worker, "worker: a found lookup with no entry", &[&lookup("w1", "found", "g:claimed")]).await;
    refused(reviewer, "reviewer: a found lookup with no entry", &[&lookup(login, "found", "g:done")]).await;
    refused(reviewer, "reviewer: a lookup in bob's name", &[&lookup("bob", "failed", "g:unknown")]).await;
    refused(worker, "worker: a failed lookup that found something", &[&lookup("w1", "failed", "g:unknown")]).await;
    refused(
        worker,
        "worker: a lookup dated in the past",
        &["INSERT INTO lookups (action_key, at, actor, verdict, records) VALUES ('g:unknown', 0, 'w1', 'failed', 0)"],
    )
    .await;
    // Deliveries: one that claims to have created an action this transaction did not insert.
    let delivery = |outcome: &str, at: &str| {
        format!(
            "INSERT INTO deliveries (action_key, source, fingerprint, outcome, received_at) \
             SELECT key, 'shop', fingerprint, '{outcome}', {at} FROM actions WHERE key = 'g:done'"
        )
    };
    assert_eq!(attempt(worker, &[&delivery("duplicate", TX_NOW)]).await, Ok(1), "a duplicate delivery");
    refused(worker, "worker: a delivery that created another action", &[&delivery("created", TX_NOW)]).await;
    refused(worker, "worker: a delivery dated in the past", &[&delivery("duplicate", "0")]).await;
    // A proposal whose fingerprint is not its payload's: approving it would run another payload
    // than the one shown.
    refused(
        worker,
        "worker: a proposal with another payload's fingerprint",
        &["INSERT INTO proposals (action_key, fingerprint, payload, received_at) \
           SELECT key, fingerprint, '{\"qty\":99}', (extract(epoch FROM transaction_timestamp()) * 1000)::bigint \
           FROM actions WHERE key = 'g:pending'"],
    )
    .await;
}

/// The inserts a tester forged by direct SQL, each refused with nothing kept: a worker's action
/// created in the past with a destination id, counts, a window, a backoff and an assignee, or
/// with no `submitted` entry; a lookup that settles an action it never recorded; a delivery that
/// claims to have created another action; a proposal under another payload's fingerprint;
/// entries under versions the action does not have.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forged_inserts_are_refused() {
    let Some((admin, url)) = ledger().await else { return };
    fixture(&admin).await;
    let worker = open_as(&admin, &url, "actionledger_worker").await;
    let reviewer = open_as(&admin, &url, "actionledger_reviewer").await;
    let login = format!("{}_reviewer", crate::roles::database_name(&url));
    let before = details(&admin).await;
    // The checks of the commit run at each statement here: the entry is written in the same one.
    let with_entry = |insert: &str| {
        format!(
            "WITH created AS ({insert} RETURNING key) INSERT INTO audit_trail (action_key, at, actor, actor_kind, \
             event, to_state, ownership_version, revision) \
             SELECT key, {TX_NOW}, 'shop', 'source', 'submitted', 'pending', 0, 1 FROM created"
        )
    };
    let action = |extra_columns: &str, extra_values: &str| {
        format!(
            "INSERT INTO actions (key, state, payload, fingerprint, source, created_at, updated_at{extra_columns}) \
             SELECT 'f:1', 'pending', payload, fingerprint, source, {TX_NOW}, {TX_NOW}{extra_values} \
             FROM actions WHERE key = 'g:pending'"
        )
    };
    assert_eq!(attempt(&worker, &[&with_entry(&action("", ""))]).await, Ok(1), "a submission as the ledger writes it");
    refused(&worker, "worker: a new action without its submitted entry", &[&action("", "")]).await;
    for (what, columns, values) in [
        ("created a year ago", ", late_results", ", 0"),
        ("with a destination id", ", destination_id", ", 'CRM-FORGED'"),
        ("with a request that may have written", ", may_have_written", ", true"),
        ("with attempts counted", ", attempts, attempts_in_round", ", 5, 5"),
        ("with late results", ", late_results", ", 2"),
        ("with a window", ", window_started_at", &format!(", {TX_NOW}")),
        ("with a backoff", ", not_before", ", 9000000000000"),
        ("with an assignee", ", assignee", ", 'mallory'"),
        ("with an old worker that may act", ", old_worker_may_act", ", true"),
        ("updating another action", ", updates_key, updates_destination_id", ", 'g:done', 'CRM-1'"),
    ] {
        let mut insert = action(columns, values);
        if what == "created a year ago" {
            insert = insert.replacen(&format!("{TX_NOW}, {TX_NOW}"), "0, 0", 1);
        }
        refused(&worker, &format!("worker: a new action {what}"), &[&with_entry(&insert)]).await;
    }
    forged_evidence_is_refused(&worker, &reviewer, &login).await;
    // Entries under versions the action does not have.
    let versions = |ownership: &str, revision: &str| {
        format!(
            "INSERT INTO audit_trail (action_key, at, actor, actor_kind, event, from_state, to_state, \
             ownership_version, revision) SELECT key, {TX_NOW}, 'w1', 'worker', 'late_result', state, state, \
             {ownership}, {revision} FROM actions WHERE key = 'g:claimed'"
        )
    };
    assert_eq!(attempt(&worker, &[&versions("ownership_version", "revision")]).await, Ok(1), "an entry as written");
    for (what, ownership, revision) in [
        ("an older ownership version", "ownership_version - 1", "revision"),
        ("a later ownership version", "ownership_version + 1", "revision"),
        ("a later revision", "ownership_version", "revision + 5"),
        ("a revision before the entry before", "ownership_version", "0"),
    ] {
        refused(&worker, &format!("worker: an entry under {what}"), &[&versions(ownership, revision)]).await;
    }
    // Committed, not only tried: refused at the commit, nothing kept.
    assert!(exec(&worker, &action("", "")).await.is_err(), "an action without its entry is not kept");
    assert!(admin.store().find(&key("f:1")).await.unwrap().is_none());
    for (now, was) in details(&admin).await.iter().zip(&before) {
        let k = &was.action.key;
        assert_eq!(now.action, was.action, "{k} is as it was");
        assert_eq!(now.audit.len(), was.audit.len(), "{k}: no entry was kept");
        assert_eq!(now.lookups.len(), was.lookups.len(), "{k}: no lookup was kept");
        assert_eq!(now.deliveries.len(), was.deliveries.len(), "{k}: no delivery was kept");
    }
    // The commands still pass: a submission, a person's re-creation of a completed action.
    worker.submit(&raw("g:after", "{}")).await.expect("a worker submits");
    let recreate = crate::support::person_request("g:done", ManualCommand::Recreate);
    reviewer.manual(&recreate).await.expect("a reviewer re-creates a completed action");
    assert_eq!(admin.store().find(&key("g:done#recreate-1")).await.unwrap().unwrap().state, State::Pending);
}

/// The time of the database, as the ledger writes it.
const NOW: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forged_records_are_refused() {
    let Some((admin, url)) = ledger().await else { return };
    fixture(&admin).await;
    let reviewer = open_as(&admin, &url, "actionledger_reviewer").await;
    let worker = open_as(&admin, &url, "actionledger_worker").await;
    let login = format!("{}_reviewer", crate::roles::database_name(&url));
    let before = details(&admin).await;
    // An entry in the reviewer's own name, as a forger would add to look like a command.
    let own_entry = |k: &str| {
        format!(
            "INSERT INTO audit_trail (action_key, at, actor, actor_kind, event, from_state, to_state, \
             ownership_version, revision) SELECT key, {NOW}, '{login}', 'person', 'assigned', state, state, \
             ownership_version, revision + 1 FROM actions WHERE key = '{k}'"
        )
    };
    let step = "revision = revision + 1";

    // A reviewer's login.
    let forgeries: Vec<(&str, String, &str)> = vec![
        ("a completed action's destination id", format!("destination_id = 'CRM-FORGED', {step}"), "g:done"),
        ("an unknown action known not written", format!("may_have_written = false, {step}"), "g:unknown"),
        ("a held action's old worker stopped", format!("old_worker_may_act = false, {step}"), "g:held"),
        ("a window cleared", format!("window_started_at = NULL, {step}"), "g:unknown"),
        ("a backoff far ahead", format!("not_before = 9000000000000, {step}"), "g:unknown"),
        ("updated_at in the past", format!("updated_at = 0, {step}"), "g:pending"),
        ("late results cleared", format!("late_results = 0, {step}"), "g:unknown"),
    ];
    for (what, set, k) in &forgeries {
        let update = format!("UPDATE actions SET {set} WHERE key = '{k}'");
        refused(&reviewer, &format!("reviewer: {what}"), &[&update]).await;
        refused(&reviewer, &format!("reviewer: {what}, with an entry"), &[&own_entry(k), &update]).await;
    }
    let decide = |person: &str| {
        format!(
            "UPDATE proposals SET decision = 'rejected', decided_by = '{person}', decided_at = {NOW} \
             WHERE action_key = 'g:conflict'"
        )
    };
    refused(&reviewer, "reviewer: a decision in bob's name", &[&decide("bob")]).await;
    refused(&reviewer, "reviewer: a decision with no entry", &[&decide(&login)]).await;
    refused(
        &reviewer,
        "reviewer: a bare change of state",
        &["UPDATE actions SET state = 'cancelled' WHERE key = 'g:unknown'"],
    )
    .await;

    worker_forgeries_are_refused(&worker).await;
    // The same forgeries committed, not only tried: refused at the commit, nothing kept.
    assert!(
        exec(
            &worker,
            &format!(
                "UPDATE actions SET state = 'in_progress', claimed_by = 'w9', \
             ownership_version = ownership_version + 1, lease_expires_at = {NOW} + 60000, updated_at = {NOW}, {step} \
             WHERE key = 'g:pending'"
            )
        )
        .await
        .is_err()
    );
    assert!(exec(&reviewer, &decide(&login)).await.is_err());

    for (now, was) in details(&admin).await.iter().zip(&before) {
        let k = &was.action.key;
        assert_eq!(now.action, was.action, "{k} is as it was");
        assert_eq!(now.audit.len(), was.audit.len(), "{k}: no entry was kept");
        assert_eq!(now.attempts, was.attempts, "{k}: its attempts are as they were");
    }
    the_commands_still_pass(&admin, &worker, &reviewer).await;
}

/// A worker's login forges by direct SQL what only a result, a claim or a person writes: each
/// refused (tried in a transaction that is rolled back, with the checks of the commit run at once).
async fn worker_forgeries_are_refused(worker: &Ledger<PostgresStore>) {
    let step = "revision = revision + 1";
    for (what, set, k) in [
        ("a completed action's destination id", format!("destination_id = 'CRM-FORGED', {step}"), "g:done"),
        ("updated_at in the past", format!("updated_at = 0, {step}"), "g:claimed"),
        ("an unknown action known not written", format!("may_have_written = false, {step}"), "g:unknown"),
        ("a source version", format!("source_version = 999, {step}"), "g:pending"),
        ("a backoff on a claimed action", format!("not_before = 9000000000000, {step}"), "g:claimed"),
    ] {
        refused(worker, &format!("worker: {what}"), &[&format!("UPDATE actions SET {set} WHERE key = '{k}'")]).await;
    }
    refused(
        worker,
        "worker: an ended attempt rewritten",
        &["UPDATE attempts SET outcome = 'failed_before_write', response_body = 'nothing here', \
           destination_id = 'CRM-9' WHERE action_key = 'g:unknown'"],
    )
    .await;
    refused(
        worker,
        "worker: an attempt recorded already ended",
        &[&format!(
            "INSERT INTO attempts (action_key, number, worker, ownership_version, started_at, ended_at, outcome, \
             destination_id) VALUES ('g:claimed', 9, 'setup', 1, {NOW}, {NOW}, 'succeeded', 'CRM-9')"
        )],
    )
    .await;
    refused(
        worker,
        "worker: an entry dated in the past",
        &["INSERT INTO audit_trail (action_key, at, actor, actor_kind, event, from_state, to_state, \
           ownership_version, revision) VALUES ('g:claimed', 0, 'w1', 'worker', 'late_result', 'in_progress', \
           'in_progress', 1, 3)"],
    )
    .await;
    refused(
        worker,
        "worker: an entry for a move the action never made",
        &[&format!(
            "INSERT INTO audit_trail (action_key, at, actor, actor_kind, event, from_state, to_state, \
             ownership_version, revision) VALUES ('g:pending', {NOW}, 'w1', 'worker', 'completed', 'in_progress', \
             'completed', 1, 2)"
        )],
    )
    .await;
    refused(
        worker,
        "worker: a claim with no entry",
        &[&format!(
            "UPDATE actions SET state = 'in_progress', claimed_by = 'w9', ownership_version = ownership_version + 1, \
             lease_expires_at = {NOW} + 60000, updated_at = {NOW}, {step} WHERE key = 'g:pending'"
        )],
    )
    .await;
}

/// The roles' own commands still pass every guard after the forgeries of
/// [`forged_records_are_refused`]: a worker's claim, attempt, result and recovery of an expired
/// claim; a reviewer's acknowledgement, resolution, decision and retry of a held action.
async fn the_commands_still_pass(
    admin: &Ledger<PostgresStore>,
    worker: &Ledger<PostgresStore>,
    reviewer: &Ledger<PostgresStore>,
) {
    let claim = claim_of(worker, "g:pending").await;
    let started = worker.start_attempt(&claim).await.expect("a worker starts an attempt");
    worker
        .record_result(&claim, started, &report(Outcome::Completed { destination_id: "CRM-2".into() }))
        .await
        .expect("a worker records a completion");
    let stale = admin.store().find(&key("g:claimed")).await.unwrap().unwrap();
    admin.store().clock().advance(Duration::from_mins(1));
    worker.store().clock().advance(Duration::from_mins(1));
    let recovered = worker.recover_expired(&key("g:claimed"), stale.ownership_version, "w2", LEASE).await;
    assert!(matches!(recovered, Ok(Recovery::Claimed(_))), "a worker takes over an expired claim: {recovered:?}");
    let request = |k: &str, command| crate::support::person_request(k, command);
    reviewer.manual(&request("g:unknown", ManualCommand::Acknowledge)).await.expect("a reviewer acknowledges");
    reviewer
        .manual(&request("g:unknown", ManualCommand::ResolveNotWritten))
        .await
        .expect("a reviewer resolves as not written");
    reviewer
        .manual(&request("g:conflict", ManualCommand::Reject { proposal: None }))
        .await
        .expect("a reviewer rejects");
    let retry = actionledger::ledger::ManualRequest {
        old_worker_stopped: true,
        confirmed_not_written: true,
        ..request("g:held", ManualCommand::Retry)
    };
    reviewer.manual(&retry).await.expect("a reviewer retries a held action");
    assert_eq!(admin.store().find(&key("g:held")).await.unwrap().unwrap().state, State::Pending);
    assert_eq!(admin.store().find(&key("g:unknown")).await.unwrap().unwrap().state, State::Pending);
}

/// Every path of a worker's login that moves an action, beyond a claim and a completion: a retry
/// scheduled, a failure, a late result from an older claim, an expired claim held after a send,
/// and lookups that settle unknown actions both ways. Each passes the guards (its own entry, its
/// own columns) and changes what it should.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_workers_every_move_passes_the_guards() {
    use actionledger::domain::{LookupReport, LookupVerdict};
    let Some((admin, url)) = ledger().await else { return };
    let worker = open_as(&admin, &url, "actionledger_worker").await;
    let result = |outcome| report(outcome);

    worker.submit(&raw("w:retry", "{}")).await.unwrap();
    let claim = claim_of(&worker, "w:retry").await;
    let started = worker.start_attempt(&claim).await.unwrap();
    worker
        .record_result(&claim, started, &result(Outcome::RetryLater { after: Duration::from_hours(1) }))
        .await
        .expect("a worker schedules a retry");
    assert_eq!(admin.store().find(&key("w:retry")).await.unwrap().unwrap().state, State::Pending);

    worker.submit(&raw("w:fail", "{}")).await.unwrap();
    let claim = claim_of(&worker, "w:fail").await;
    let started = worker.start_attempt(&claim).await.unwrap();
    worker
        .record_result(&claim, started, &result(Outcome::Failed { permanent: true }))
        .await
        .expect("a worker records a failure");
    assert_eq!(admin.store().find(&key("w:fail")).await.unwrap().unwrap().state, State::Failed);

    // A send under a claim that then expires: held (nothing protects against a repeat), and the
    // old claim's result arrives late (a conflict for a person).
    worker.submit(&raw("w:late", "{}")).await.unwrap();
    let old = claim_of(&worker, "w:late").await;
    let started = worker.start_attempt(&old).await.unwrap();
    admin.store().clock().advance(Duration::from_mins(1));
    worker.store().clock().advance(Duration::from_mins(1));
    let held = worker.recover_expired(&key("w:late"), old.ownership_version(), "w2", LEASE).await;
    assert!(matches!(held, Ok(Recovery::Held(_))), "an unsafe takeover is held: {held:?}");
    worker
        .record_result(&old, started, &result(Outcome::Completed { destination_id: "CRM-L".into() }))
        .await
        .expect("a late result is kept");
    let late = admin.store().find(&key("w:late")).await.unwrap().unwrap();
    assert_eq!((late.state, late.late_results, late.old_worker_may_act), (State::Conflict, 1, true));

    // Lookups settle unknown actions: nothing there (back to pending, known not written), and
    // the record there (completed, with its id).
    for (k, verdict, destination_id) in
        [("w:absent", LookupVerdict::NotFound, None), ("w:there", LookupVerdict::Found, Some("CRM-T".to_owned()))]
    {
        worker.submit(&raw(k, "{}")).await.unwrap();
        let claim = claim_of(&worker, k).await;
        let started = worker.start_attempt(&claim).await.unwrap();
        worker.record_result(&claim, started, &result(Outcome::Unknown)).await.unwrap();
        let seen = admin.store().find(&key(k)).await.unwrap().unwrap();
        assert!(seen.may_have_written);
        let lookup = LookupReport {
            verdict,
            records: i64::from(destination_id.is_some()),
            destination_id,
            evidence: actionledger::domain::Evidence::default(),
            detail: None,
        };
        let settled = worker
            .settle_unknown(&key(k), seen.revision, "w3", actionledger::domain::ActorKind::Worker, &lookup)
            .await
            .unwrap_or_else(|e| panic!("{k}: a worker settles an unknown action by a lookup: {e}"));
        assert!(settled.is_some(), "{k} is settled");
    }
    // A person's lookup now, from a reviewer's login, that finds nothing: pending after the
    // backoff, known not written.
    let reviewer = open_as(&admin, &url, "actionledger_reviewer").await;
    worker.submit(&raw("w:looked", "{}")).await.unwrap();
    let claim = claim_of(&worker, "w:looked").await;
    let started = worker.start_attempt(&claim).await.unwrap();
    worker.record_result(&claim, started, &result(Outcome::Unknown)).await.unwrap();
    let seen = admin.store().find(&key("w:looked")).await.unwrap().unwrap();
    let nothing = LookupReport {
        verdict: LookupVerdict::NotFound,
        records: 0,
        destination_id: None,
        evidence: actionledger::domain::Evidence::default(),
        detail: None,
    };
    let settled = reviewer
        .settle_unknown(&key("w:looked"), seen.revision, "Ana Lima", actionledger::domain::ActorKind::Person, &nothing)
        .await
        .expect("a person's lookup settles an unknown action");
    assert_eq!(settled.map(|a| (a.state, a.may_have_written)), Some((State::Pending, false)));
    let absent = admin.store().find(&key("w:absent")).await.unwrap().unwrap();
    assert_eq!((absent.state, absent.may_have_written), (State::Pending, false));
    let there = admin.store().find(&key("w:there")).await.unwrap().unwrap();
    assert_eq!((there.state, there.destination_id.as_deref()), (State::Completed, Some("CRM-T")));
}
