//! Least privilege on PostgreSQL: each role of migration 0004, connected as a login member of it,
//! does its own work and is refused everything else by the database itself. SQLite has no roles;
//! its file is private to its owner (tests/it/storage.rs).

use crate::support::{self, person_request};
use actionledger::Ledger;
use actionledger::domain::state::{self, StatePair};
use actionledger::domain::{ActionKey, ManualCommand, RawSubmission, State};
use actionledger::ledger::LedgerError;
use actionledger::ledger::{Claim, ManualRequest, Outcome, Report};
use actionledger::store::{PostgresStore, Store};
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(30);

/// A fresh ledger migrated by the test server's superuser, and the name of its database.
pub(crate) async fn ledger() -> Option<(Ledger<PostgresStore>, String)> {
    let url = support::pg::fresh_database().await?;
    let ledger = Ledger::new(PostgresStore::open(&url).await.expect("migrate as the superuser"));
    Some((ledger, url))
}

pub(crate) fn database_name(url: &str) -> &str {
    let path = url.split('?').next().unwrap_or(url);
    path.rsplit('/').next().unwrap_or(path)
}

/// The same server and database, connecting as `role` with `password`.
pub(crate) fn url_as(url: &str, role: &str, password: &str) -> String {
    let scheme_end = url.find("://").expect("a URL") + 3;
    let rest = &url[scheme_end..];
    let host_start = rest.find('/').map_or(rest.len(), |slash| rest[..slash].rfind('@').map_or(0, |at| at + 1));
    format!("{}{role}:{password}@{}", &url[..scheme_end], &rest[host_start..])
}

/// Makes a login role (unique to this test database) that is a member of `group`; returns its
/// URL for the database at `url`.
pub(crate) async fn login_in(admin: &Ledger<PostgresStore>, url: &str, group: &str) -> String {
    let login = format!("{}_{}", database_name(url), group.trim_start_matches("actionledger_"));
    exec(admin, &format!("CREATE ROLE {login} LOGIN PASSWORD 'secret-{login}' IN ROLE {group}")).await.unwrap();
    if group == "actionledger_reviewer" {
        // The person this login signs as (support::person_request's).
        exec(admin, &format!("INSERT INTO person_logins (login, person) VALUES ('{login}', 'Ana Lima')"))
            .await
            .unwrap();
    }
    url_as(url, &login, &format!("secret-{login}"))
}

/// Opens the ledger at `url` as a new login member of `group`.
pub(crate) async fn open_as(admin: &Ledger<PostgresStore>, url: &str, group: &str) -> Ledger<PostgresStore> {
    let login_url = login_in(admin, url, group).await;
    let store = PostgresStore::open_with(&login_url, 4)
        .await
        .unwrap_or_else(|e| panic!("a member of {group} opens the current schema without migrating it: {e}"));
    Ledger::new(store)
}

pub(crate) async fn exec(ledger: &Ledger<PostgresStore>, sql: &str) -> Result<u64, sqlx::Error> {
    sqlx::query(sqlx::AssertSqlSafe(sql.to_owned())).execute(ledger.store().pool()).await.map(|r| r.rows_affected())
}

/// Asserts the database refused `sql` for lack of privilege (SQLSTATE 42501).
async fn refused(ledger: &Ledger<PostgresStore>, sql: &str) {
    match exec(ledger, sql).await {
        Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("42501") => {}
        other => panic!("{sql} must be refused for lack of privilege, got {other:?}"),
    }
}

/// Asserts a ledger operation was refused for lack of privilege, with a message naming why.
fn not_permitted<T: std::fmt::Debug>(result: Result<T, LedgerError>, what: &str, says: &str) {
    match result {
        Err(error) if error.is_not_permitted() => {
            let message = error.to_string();
            assert!(message.contains(says), "{what}: the refusal should say {says:?}: {message}");
        }
        other => panic!("{what} must be refused for lack of privilege, got {other:?}"),
    }
}

fn key(text: &str) -> ActionKey {
    ActionKey::parse(text).unwrap()
}

fn raw(key: &str, payload: &str) -> RawSubmission {
    RawSubmission {
        key: Some(key.to_owned()),
        payload: payload.as_bytes().to_vec(),
        source: Some("shop".into()),
        ..RawSubmission::default()
    }
}

/// An audit entry written by hand, as a role might try to forge one.
fn audit_entry(key: &str, actor: &str, actor_kind: &str, event: &str) -> String {
    format!(
        "INSERT INTO audit_trail (action_key, at, actor, actor_kind, event, to_state, ownership_version, revision) \
         VALUES ('{key}', 0, '{actor}', '{actor_kind}', '{event}', 'completed', 1, 9)"
    )
}

fn report(outcome: Outcome) -> Report {
    Report { outcome, error: None, evidence: actionledger::domain::Evidence::default() }
}

async fn claim_one(ledger: &Ledger<PostgresStore>, worker: &str) -> Claim {
    let mut claims = ledger.claim(worker, LEASE, 1).await.unwrap();
    assert_eq!(claims.len(), 1, "one action should be claimable");
    claims.pop().unwrap()
}

async fn state_of(ledger: &Ledger<PostgresStore>, k: &str) -> State {
    ledger.store().find(&key(k)).await.unwrap().unwrap().state
}

/// Brings `k` to `unknown` through the superuser's ledger.
async fn unknown_action(admin: &Ledger<PostgresStore>, k: &str) {
    admin.submit(&raw(k, "{}")).await.unwrap();
    let claim = claim_one(admin, "setup").await;
    let attempt = admin.start_attempt(&claim).await.unwrap();
    admin.record_result(&claim, attempt, &report(Outcome::Unknown)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_database_knows_who_may_make_each_change_of_state() {
    let Some((admin, _url)) = ledger().await else { return };
    let rows: Vec<(String, String, bool, bool)> =
        sqlx::query_as("SELECT from_state, to_state, by_automation, by_people FROM state_transitions")
            .fetch_all(admin.store().pool())
            .await
            .unwrap();
    let mut enforced: Vec<StatePair> = rows
        .into_iter()
        .map(|(from, to, by_automation, by_people)| StatePair {
            from: from.parse().unwrap(),
            to: to.parse().unwrap(),
            by_automation,
            by_people,
        })
        .collect();
    enforced.sort();
    assert_eq!(enforced, state::state_pairs_by_maker(), "migration 0004 and src/domain/state.rs must agree");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_does_its_work_and_nothing_else() {
    let Some((admin, url)) = ledger().await else { return };
    let worker = open_as(&admin, &url, "actionledger_worker").await;

    worker.submit(&raw("order:1", r#"{"qty":1}"#)).await.expect("a worker submits");
    let claim = claim_one(&worker, "w1").await;
    worker.heartbeat(&claim, LEASE).await.expect("a worker renews its lease");
    let attempt = worker.start_attempt(&claim).await.expect("a worker records an attempt");
    worker.record_result(&claim, attempt, &report(Outcome::Unknown)).await.expect("a worker records a result");
    assert_eq!(state_of(&worker, "order:1").await, State::Unknown);

    for command in [
        ManualCommand::Retry,
        ManualCommand::ResolveCompleted { destination_id: "CRM-1".into() },
        ManualCommand::ResolveNotWritten,
        ManualCommand::Cancel,
    ] {
        let what = command.verb();
        // Confirmed as a person would, so that only the database's refusal stands in the way.
        let request = ManualRequest { confirmed_not_written: true, ..person_request("order:1", command) };
        not_permitted(worker.manual(&request).await, what, "only a person's command");
    }
    not_permitted(
        worker.manual(&person_request("order:1", ManualCommand::Assign { to: "Ana Lima".into() })).await,
        "assign",
        "only a person's command",
    );
    assert_eq!(state_of(&admin, "order:1").await, State::Unknown, "nothing changed");

    // A changed payload waits as a proposal; only a person decides it.
    worker.submit(&raw("order:2", r#"{"qty":1}"#)).await.unwrap();
    worker.submit(&raw("order:2", r#"{"qty":2}"#)).await.expect("a worker records a proposal");
    assert_eq!(state_of(&worker, "order:2").await, State::Conflict);
    not_permitted(
        worker.manual(&person_request("order:2", ManualCommand::Approve { proposal: None })).await,
        "approve",
        "only a person",
    );
    refused(&worker, "UPDATE actions SET proposed_payload = NULL, proposed_fingerprint = NULL WHERE key = 'order:2'")
        .await;
    refused(&worker, "UPDATE actions SET state = 'pending' WHERE key = 'order:2'").await;
    refused(&worker, "UPDATE actions SET payload = '{}' WHERE key = 'order:1'").await;

    // Late results and a hold after an unsafe takeover are facts a worker raises and only a
    // person's command clears (rules 5 and 8).
    exec(&admin, "UPDATE attempts SET stale = true WHERE action_key = 'order:1'").await.unwrap();
    exec(&admin, "UPDATE actions SET late_results = 1, old_worker_may_act = true WHERE key = 'order:1'").await.unwrap();
    refused(&worker, "UPDATE actions SET late_results = 0 WHERE key = 'order:1'").await;
    refused(&worker, "UPDATE actions SET old_worker_may_act = false WHERE key = 'order:1'").await;
    refused(&worker, "UPDATE actions SET first_sent_at = NULL WHERE key = 'order:1'").await;
    refused(&worker, "UPDATE attempts SET acknowledged_by = 'w1', acknowledged_at = 0").await;
    not_permitted(
        worker.manual(&person_request("order:1", ManualCommand::Acknowledge)).await,
        "acknowledge",
        "only a person's command",
    );

    // The audit trail: appended to in its own name only, never changed.
    refused(&worker, "UPDATE audit_trail SET reason = 'rewritten'").await;
    refused(&worker, "DELETE FROM audit_trail").await;
    refused(&worker, "TRUNCATE audit_trail").await;
    refused(&worker, &audit_entry("order:1", "Ana Lima", "person", "resolved_completed")).await;
    refused(&worker, "DELETE FROM actions").await;
    refused(&worker, "DELETE FROM attempts").await;
    refused(&worker, "CREATE TABLE sneaky (id int)").await;
    refused(&worker, "DROP TABLE refused_submissions").await;
    let entries: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_trail WHERE actor_kind = 'person'")
        .fetch_one(admin.store().pool())
        .await
        .unwrap();
    assert_eq!(entries, 0, "no entry in a person's name");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reviewer_changes_only_what_commands_change() {
    let Some((admin, url)) = ledger().await else { return };
    let reviewer = open_as(&admin, &url, "actionledger_reviewer").await;

    unknown_action(&admin, "a:retry").await;
    unknown_action(&admin, "a:resolve").await;
    let checked = ManualRequest { confirmed_not_written: true, ..person_request("a:retry", ManualCommand::Retry) };
    reviewer.manual(&checked).await.expect("a reviewer retries");
    reviewer
        .manual(&person_request("a:resolve", ManualCommand::ResolveCompleted { destination_id: "CRM-7".into() }))
        .await
        .expect("a reviewer resolves");
    admin.submit(&raw("a:approve", r#"{"qty":1}"#)).await.unwrap();
    admin.submit(&raw("a:approve", r#"{"qty":2}"#)).await.unwrap();
    reviewer
        .manual(&person_request("a:approve", ManualCommand::Approve { proposal: None }))
        .await
        .expect("a reviewer approves");
    admin.submit(&raw("a:reject", r#"{"qty":1}"#)).await.unwrap();
    admin.submit(&raw("a:reject", r#"{"qty":2}"#)).await.unwrap();
    reviewer
        .manual(&person_request("a:reject", ManualCommand::Reject { proposal: None }))
        .await
        .expect("a reviewer rejects");
    reviewer
        .manual(&person_request("a:reject", ManualCommand::Assign { to: "Ana Lima".into() }))
        .await
        .expect("a reviewer assigns");
    reviewer.manual(&person_request("a:reject", ManualCommand::Cancel)).await.expect("a reviewer cancels");
    let stale = claim_one(&admin, "gone-worker").await;
    admin.store().clock().advance(Duration::from_mins(1));
    reviewer.store().clock().advance(Duration::from_mins(1));
    reviewer
        .manual(&person_request(stale.key().as_str(), ManualCommand::Takeover))
        .await
        .expect("a reviewer takes over a stale claim");
    assert_eq!(state_of(&admin, "a:retry").await, State::Pending);
    assert_eq!(state_of(&admin, "a:resolve").await, State::Completed);
    assert_eq!(state_of(&admin, "a:reject").await, State::Cancelled);
    exec(&admin, "UPDATE attempts SET stale = true WHERE action_key = 'a:resolve'").await.unwrap();
    exec(&admin, "UPDATE actions SET late_results = 1 WHERE key = 'a:resolve'").await.unwrap();
    reviewer.manual(&person_request("a:resolve", ManualCommand::Acknowledge)).await.expect("a reviewer acknowledges");
    refused(&reviewer, "UPDATE attempts SET acknowledged_by = 'someone else' WHERE action_key = 'a:resolve'").await;
    refused(&reviewer, "UPDATE actions SET first_sent_at = NULL WHERE key = 'a:resolve'").await;

    // Not a worker, not a source.
    not_permitted(reviewer.submit(&raw("a:new", "{}")).await, "submit", "may record only the update action");
    not_permitted(reviewer.claim("r", LEASE, 10).await, "claim", "only a worker does that");
    let claim = claim_one(&admin, "w1").await;
    not_permitted(reviewer.start_attempt(&claim).await, "start an attempt", "except by taking it over");
    refused(&reviewer, &format!("UPDATE actions SET lease_expires_at = 0 WHERE key = '{}'", claim.key())).await;
    refused(&reviewer, "UPDATE audit_trail SET reason = 'rewritten'").await;
    refused(&reviewer, "DELETE FROM audit_trail").await;
    refused(&reviewer, &audit_entry("a:retry", "w1", "worker", "completed")).await;
    refused(&reviewer, "UPDATE attempts SET outcome = 'succeeded'").await;
    refused(&reviewer, "DELETE FROM actions").await;

    // A request may have been sent under the claim: a reviewer's takeover records the unfinished
    // attempt as cut off (rule 2), which is all a reviewer may do to an attempt's outcome.
    admin.start_attempt(&claim).await.unwrap();
    admin.store().clock().advance(Duration::from_mins(1));
    reviewer.store().clock().advance(Duration::from_mins(1));
    reviewer
        .manual(&person_request(claim.key().as_str(), ManualCommand::Takeover))
        .await
        .expect("a reviewer takes over");
    let attempts = admin.store().attempts(claim.key()).await.unwrap();
    assert_eq!(attempts.last().and_then(|a| a.outcome), Some(actionledger::domain::AttemptOutcome::CutOff));
    assert!(admin.store().find(claim.key()).await.unwrap().unwrap().may_have_written);
    refused(&reviewer, &format!("UPDATE attempts SET outcome = 'succeeded' WHERE action_key = '{}'", claim.key()))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reviewer_approves_the_update_of_a_completed_action() {
    let Some((admin, url)) = ledger().await else { return };
    let reviewer = open_as(&admin, &url, "actionledger_reviewer").await;
    unknown_action(&admin, "a:done").await;
    reviewer
        .manual(&person_request("a:done", ManualCommand::ResolveCompleted { destination_id: "CRM-9".into() }))
        .await
        .expect("a reviewer resolves");
    admin.submit(&raw("a:done", r#"{"qty":7}"#)).await.unwrap();
    let approved = reviewer
        .manual(&person_request("a:done", ManualCommand::Approve { proposal: None }))
        .await
        .expect("a reviewer approves");
    let update = approved.update.expect("the update action is recorded by the reviewer");
    assert_eq!((update.key.as_str(), update.updates_destination_id.as_deref()), ("a:done#update-2", Some("CRM-9")));
    assert_eq!(state_of(&admin, "a:done").await, State::Completed);
    assert_eq!(state_of(&admin, "a:done#update-2").await, State::Pending);
    // A source delivers the approved version again while its update is still to run: a duplicate
    // of that approval, recorded by the worker's login (0100), not a refusal of the submission.
    let worker = open_as(&admin, &url, "actionledger_worker").await;
    let again = worker.submit(&raw("a:done", r#"{"qty":7}"#)).await.expect("a worker's login records the delivery");
    assert_eq!(again.outcome, actionledger::domain::SubmitOutcome::Duplicate);
    // A worker whose conditional update the destination refused (the record changed there) sends
    // it to conflict under its own event.
    let claim = claim_one(&worker, "w1").await;
    let attempt = worker.start_attempt(&claim).await.unwrap();
    worker.record_result(&claim, attempt, &report(Outcome::Conflict)).await.expect("a worker records a refused update");
    assert_eq!(state_of(&admin, "a:done#update-2").await, State::Conflict);
    // The insert privilege is for update actions only.
    refused(
        &reviewer,
        "INSERT INTO actions (key, state, payload, fingerprint, created_at, updated_at) \
         VALUES ('a:sneaked', 'pending', '{}', 'x', 0, 0)",
    )
    .await;
}

/// A worker's login completes an update action, and the completed action it updates takes the
/// update's payload on in the same transaction: the column guards must let a worker change a
/// completed action's payload, fingerprint, payload revision and source version to exactly those
/// of its update action `KEY#update-N` completed in that transaction (N the new payload revision,
/// above the old one), and a reviewer the same when resolving the update as completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_completes_an_update_and_its_action_takes_it_on() {
    let Some((admin, url)) = ledger().await else { return };
    let reviewer = open_as(&admin, &url, "actionledger_reviewer").await;
    unknown_action(&admin, "a:upd").await;
    reviewer
        .manual(&person_request("a:upd", ManualCommand::ResolveCompleted { destination_id: "CRM-5".into() }))
        .await
        .expect("a reviewer resolves");
    admin.submit(&raw("a:upd", r#"{"qty":7}"#)).await.unwrap();
    reviewer.manual(&person_request("a:upd", ManualCommand::Approve { proposal: None })).await.expect("approved");
    let worker = open_as(&admin, &url, "actionledger_worker").await;
    let claim = claim_one(&worker, "w1").await;
    assert_eq!(claim.key().as_str(), "a:upd#update-2");
    let attempt = worker.start_attempt(&claim).await.unwrap();
    worker
        .record_result(&claim, attempt, &report(Outcome::Completed { destination_id: "CRM-5".into() }))
        .await
        .expect("a worker records a completed update and its action takes it on");
    let original = admin.store().find(&key("a:upd")).await.unwrap().unwrap();
    assert_eq!((original.payload_revision, original.payload.value()["qty"].as_i64()), (2, Some(7)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reviewer_re_creates_a_completed_action_and_inserts_nothing_else() {
    let Some((admin, url)) = ledger().await else { return };
    let reviewer = open_as(&admin, &url, "actionledger_reviewer").await;
    unknown_action(&admin, "a:gone").await;
    reviewer
        .manual(&person_request("a:gone", ManualCommand::ResolveCompleted { destination_id: "CRM-4".into() }))
        .await
        .expect("a reviewer resolves");
    let outcome =
        reviewer.manual(&person_request("a:gone", ManualCommand::Recreate)).await.expect("a reviewer re-creates");
    let recreated = outcome.recreated.expect("the re-creation is recorded by the reviewer");
    assert_eq!(recreated.key.as_str(), "a:gone#recreate-1");
    assert_eq!(state_of(&admin, "a:gone").await, State::Completed);
    assert_eq!(state_of(&admin, "a:gone#recreate-1").await, State::Pending);
    // The insert privilege covers the re-creation of a completed creation, with its payload, only.
    let sneaked = |key: &str, payload: &str| {
        format!(
            "INSERT INTO actions (key, state, payload, fingerprint, source, created_at, updated_at) \
             SELECT '{key}', 'pending', '{payload}', fingerprint, source, 0, 0 FROM actions WHERE key = 'a:gone'"
        )
    };
    refused(&reviewer, &sneaked("a:gone#recreate-2", r#"{"qty":9}"#)).await;
    refused(&reviewer, &sneaked("a:gone#again", "{}")).await;
    unknown_action(&admin, "a:open").await;
    refused(
        &reviewer,
        "INSERT INTO actions (key, state, payload, fingerprint, source, created_at, updated_at) \
         SELECT 'a:open#recreate-1', 'pending', payload, fingerprint, source, 0, 0 FROM actions WHERE key = 'a:open'",
    )
    .await;
    // As the command writes it: created now, with the person's `submitted` entry.
    let now = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";
    let recreated = format!(
        "WITH created AS (INSERT INTO actions (key, state, payload, fingerprint, source, source_version, created_at, \
         updated_at) SELECT 'a:gone#recreate-2', 'pending', payload, fingerprint, source, source_version, {now}, {now} \
         FROM actions WHERE key = 'a:gone' RETURNING key) \
         INSERT INTO audit_trail (action_key, at, actor, actor_kind, event, to_state, ownership_version, revision) \
         SELECT key, {now}, '{}_reviewer', 'person', 'submitted', 'pending', 0, 1 FROM created",
        database_name(&url)
    );
    exec(&reviewer, &recreated).await.expect("the same payload under the next key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_viewer_reads_and_changes_nothing() {
    let Some((admin, url)) = ledger().await else { return };
    let viewer = open_as(&admin, &url, "actionledger_viewer").await;
    unknown_action(&admin, "v:1").await;
    admin.submit(&raw("v:2", "{}")).await.unwrap();

    let detail = viewer.detail(&key("v:1")).await.expect("a viewer reads an action");
    assert_eq!(detail.audit.len(), 3, "and its audit trail");
    assert_eq!(
        viewer.list(&actionledger::store::ListFilter { limit: 10, ..Default::default() }).await.unwrap().len(),
        2
    );
    assert!(!viewer.counts().await.unwrap().is_empty());

    not_permitted(viewer.submit(&raw("v:3", "{}")).await, "submit", "permission denied");
    not_permitted(viewer.claim("v", LEASE, 10).await, "claim", "permission denied");
    not_permitted(viewer.manual(&person_request("v:1", ManualCommand::Retry)).await, "retry", "permission denied");
    refused(&viewer, "UPDATE actions SET assignee = 'me'").await;
    refused(&viewer, &audit_entry("v:1", "me", "person", "assigned")).await;
    refused(&viewer, "INSERT INTO refused_submissions (received_at, problem, message) VALUES (0, 'x', 'y')").await;
    assert_eq!(state_of(&admin, "v:1").await, State::Unknown);
    assert!(admin.store().find(&key("v:3")).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_owner_role_owns_the_schema_and_each_session_is_told_its_duties() {
    let Some((admin, url)) = ledger().await else { return };
    let owners: Vec<(String, String)> = sqlx::query_as(
        "SELECT relname::text, pg_get_userbyid(relowner)::text FROM pg_class \
         WHERE relnamespace = current_schema()::regnamespace AND relkind = 'r' ORDER BY relname",
    )
    .fetch_all(admin.store().pool())
    .await
    .unwrap();
    let tables: Vec<&str> = owners.iter().map(|(table, _)| table.as_str()).collect();
    for table in ["actions", "deliveries", "attempts", "audit_trail", "lookups", "refused_submissions", "purges"] {
        assert!(tables.contains(&table), "{table} in {owners:?}");
    }
    assert!(tables.contains(&"purged_actions") && tables.contains(&"state_transitions"), "{owners:?}");
    assert!(owners.iter().all(|(_, owner)| owner == "actionledger_owner"), "{owners:?}");

    let owner = open_as(&admin, &url, "actionledger_owner").await;
    let said = owner.store().access_report().await.unwrap().unwrap();
    assert!(said.contains("tables owned by actionledger_owner") && said.ends_with("may do everything (schema owner)"));
    owner.submit(&raw("o:1", "{}")).await.expect("the owner may do a worker's work");
    owner.manual(&person_request("o:1", ManualCommand::Cancel)).await.expect("and a person's");
    for (group, duties) in [
        ("actionledger_worker", "may do a worker's work"),
        ("actionledger_reviewer", "may run people's commands"),
        ("actionledger_viewer", "may read only"),
    ] {
        let ledger = open_as(&admin, &url, group).await;
        let said = ledger.store().access_report().await.unwrap().unwrap();
        assert!(said.ends_with(duties), "{group}: {said}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_schema_owner_without_createrole_migrates_and_keeps_the_tables() {
    let Some((admin, url)) = ledger().await else { return };
    let name = format!("{}_own", database_name(&url));
    exec(&admin, &format!("CREATE ROLE {name} LOGIN PASSWORD 'pw' NOCREATEROLE NOSUPERUSER")).await.unwrap();
    exec(&admin, &format!("CREATE DATABASE {name} OWNER {name}")).await.unwrap();
    let own_url = url_as(&url.replace(database_name(&url), &name), &name, "pw");
    let ledger = Ledger::new(PostgresStore::open(&own_url).await.expect("the database owner migrates"));
    let said = ledger.store().access_report().await.unwrap().unwrap();
    assert!(said.starts_with(&format!("tables owned by {name}")), "{said}");
    ledger.submit(&raw("s:1", "{}")).await.unwrap();
    ledger.manual(&person_request("s:1", ManualCommand::Cancel)).await.expect("the table owner may do everything");

    // The roles are granted in this database too: a worker may work, and no more.
    let worker = open_as(&admin, &own_url, "actionledger_worker").await;
    worker.submit(&raw("s:2", "{}")).await.unwrap();
    claim_one(&worker, "w").await;
    worker.submit(&raw("s:3", "{}")).await.unwrap();
    not_permitted(
        worker.manual(&person_request("s:3", ManualCommand::Cancel)).await,
        "cancel",
        "only a person's command",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_the_owner_migrates_and_others_say_so() {
    let Some((admin, url)) = ledger().await else { return };
    let worker_url = login_in(&admin, &url, "actionledger_worker").await;
    let applied = || async {
        let versions: Vec<i64> = sqlx::query_scalar("SELECT version FROM _sqlx_migrations ORDER BY version")
            .fetch_all(admin.store().pool())
            .await
            .unwrap();
        versions
    };
    let mut expected = applied().await;
    expected.retain(|&version| version != 4);
    // As if this build brought a migration the database has not had yet.
    exec(&admin, "DELETE FROM _sqlx_migrations WHERE version = 4").await.unwrap();
    let error = PostgresStore::open(&worker_url).await.unwrap_err().to_string();
    assert!(
        error.contains("needs migrating and this role may not do it")
            && error.contains("as the schema owner (a member of actionledger_owner)"),
        "{error}"
    );
    assert_eq!(applied().await, expected, "the worker changed nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_ledgers_migrate_at_once_in_one_cluster() {
    let mut urls = Vec::new();
    for _ in 0..8 {
        let Some(url) = support::pg::fresh_database().await else { return };
        urls.push(url);
    }
    let opened = futures_join_all(urls.iter().cloned().map(|url| async move { PostgresStore::open(&url).await })).await;
    for (url, store) in urls.iter().zip(opened) {
        let store = store.unwrap_or_else(|e| panic!("{}: {e}", database_name(url)));
        let said = store.access_report().await.unwrap().unwrap();
        assert!(said.contains("roles actionledger_owner"), "{said}");
    }
}

/// Runs futures concurrently on this runtime and collects their results in order.
async fn futures_join_all<F>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut results = Vec::new();
    for handle in handles {
        results.push(handle.await.expect("task"));
    }
    results
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_command_line_names_what_a_role_may_not_do() {
    let Some((admin, url)) = ledger().await else { return };
    let worker_url = login_in(&admin, &url, "actionledger_worker").await;
    let owner_url = login_in(&admin, &url, "actionledger_owner").await;
    unknown_action(&admin, "cli:1").await;
    let run = |url: &str, args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_actionledger"))
            .env_remove("ACTIONLEDGER_DB")
            .env_remove("DATABASE_URL")
            .args(["--db", url])
            .args(args)
            .output()
            .expect("run actionledger")
    };
    let name = database_name(&url);
    let cancel = ["cancel", "cli:1", "--owner", "Ana Lima", "--reason", "not needed", "--confirm-not-written"];
    let refused = run(&worker_url, &cancel);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(3), "{said}");
    assert!(said.contains(&format!("refused by the database: actionledger: role {name}_worker may not")), "{said}");
    assert!(!said.contains("secret-"), "no password in messages: {said}");
    assert_eq!(state_of(&admin, "cli:1").await, State::Unknown);
    let purge = ["purge", "--older-than", "1ms", "--owner", "Ana Lima", "--reason", "retention", "--dry-run"];
    let refused = run(&worker_url, &purge);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(3), "{said}");
    assert!(said.contains(&format!("role {name}_worker may not purge")), "{said}");
    let dry = run(&owner_url, &purge);
    assert!(dry.status.success(), "{}", String::from_utf8_lossy(&dry.stderr));
    assert!(String::from_utf8_lossy(&dry.stdout).starts_with("dry run: would reduce 0 actions"));

    let migrated = run(&owner_url, &["migrate"]);
    let said = String::from_utf8_lossy(&migrated.stdout);
    assert!(migrated.status.success(), "{}", String::from_utf8_lossy(&migrated.stderr));
    assert!(
        said.contains("access: tables owned by actionledger_owner;") && said.contains("may do everything"),
        "{said}"
    );
}

/// Retention (rule 7): only a member of actionledger_owner purges; a worker, reviewer or viewer
/// is refused with a message naming its role, dry run or not, and nothing is removed. The purge
/// record is append-only even for the owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_the_owner_purges() {
    let Some((admin, url)) = ledger().await else { return };
    let day = Duration::from_hours(24);
    admin.submit(&raw("old:1", "{}")).await.unwrap();
    let claim = claim_one(&admin, "setup").await;
    let attempt = admin.start_attempt(&claim).await.unwrap();
    admin.record_result(&claim, attempt, &report(Outcome::Completed { destination_id: "CRM-1".into() })).await.unwrap();
    let request = |dry_run| {
        actionledger::domain::PurgeRequest::new(
            day * 90,
            &[State::Completed, State::Cancelled],
            actionledger::domain::Person::parse("Ana Lima").unwrap(),
            actionledger::domain::Reason::parse("retention").unwrap(),
            dry_run,
        )
        .unwrap()
    };
    let attempts = |ledger: Ledger<PostgresStore>| async move { ledger.store().attempts(&key("old:1")).await.unwrap() };

    let mut others = Vec::new();
    for group in ["actionledger_worker", "actionledger_reviewer", "actionledger_viewer"] {
        let other = open_as(&admin, &url, group).await;
        others.push(other.clone());
        other.store().clock().advance(day * 91);
        for dry_run in [false, true] {
            not_permitted(other.purge(&request(dry_run)).await, group, "may not purge");
        }
        refused(&other, "DELETE FROM deliveries").await;
        refused(
            &other,
            "INSERT INTO purges (at, owner, reason, older_than_ms, settled_before, states, actions, \
                         deliveries, attempts, lookups) VALUES (0, 'x', 'x', 1, 0, 'completed', 0, 0, 0, 0)",
        )
        .await;
        assert_eq!(attempts(admin.clone()).await.len(), 1, "nothing removed by {group}");
        assert!(admin.store().purge_of(&key("old:1")).await.unwrap().is_none());
    }
    // A worker still changes actions: the tombstone guard reads purged_actions with its rights.
    let worker = &others[0];
    worker.submit(&raw("new:1", "{}")).await.unwrap();
    claim_one(worker, "w1").await;

    let owner = open_as(&admin, &url, "actionledger_owner").await;
    owner.store().clock().advance(day * 91);
    let run = owner.purge(&request(false)).await.expect("the owner purges");
    assert_eq!(run.record.counts.actions, 1);
    assert!(attempts(admin.clone()).await.is_empty());
    assert_eq!(admin.store().purge_of(&key("old:1")).await.unwrap().unwrap().id, run.record.id);
    for change in ["UPDATE purges SET owner = 'someone else'", "DELETE FROM purges", "DELETE FROM purged_actions"] {
        assert!(exec(&owner, change).await.is_err(), "{change} must be refused: the purge record is append-only");
    }
    assert!(exec(&owner, "UPDATE actions SET payload = '{}' WHERE key = 'old:1'").await.is_err(), "a tombstone");
}

/// Asserts the database refused `sql` as a value this version of the code does not know
/// (SQLSTATE 23514, a CHECK constraint).
async fn unknown_value(ledger: &Ledger<PostgresStore>, sql: &str) {
    match exec(ledger, sql).await {
        Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("23514") => {}
        other => panic!("{sql} must be refused as an unknown value, got {other:?}"),
    }
}

/// The values a CHECK constraint accepts (those of migration 0016's domains), from the database's own text of it.
async fn accepted_values(admin: &Ledger<PostgresStore>, constraint: &str) -> std::collections::BTreeSet<String> {
    let definition: String =
        sqlx::query_scalar("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = $1")
            .bind(constraint)
            .fetch_one(admin.store().pool())
            .await
            .unwrap_or_else(|e| panic!("{constraint}: {e}"));
    // The quoted literals: every second piece between single quotes.
    definition.split('\'').skip(1).step_by(2).map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_database_knows_the_values_the_code_knows() {
    let Some((admin, _url)) = ledger().await else { return };
    let names = |values: &mut dyn Iterator<Item = &'static str>| values.map(str::to_owned).collect();
    let events: std::collections::BTreeSet<String> =
        names(&mut actionledger::domain::Event::ALL.into_iter().map(actionledger::domain::Event::as_str));
    let states: std::collections::BTreeSet<String> = names(&mut State::ALL.into_iter().map(State::as_str));
    let outcomes: std::collections::BTreeSet<String> = names(
        &mut actionledger::domain::AttemptOutcome::ALL.into_iter().map(actionledger::domain::AttemptOutcome::as_str),
    );
    // Migration 0016 moved the lists of 0011 and 0040 into domains (tests/it/guard_cost.rs checks
    // which columns are of each).
    assert_eq!(accepted_values(&admin, "actionledger_event_known").await, events, "Event::ALL");
    assert_eq!(accepted_values(&admin, "actionledger_state_known").await, states, "State::ALL");
    assert_eq!(
        accepted_values(&admin, "actionledger_attempt_outcome_known").await,
        outcomes,
        "and AttemptOutcome::ALL"
    );
}

/// Direct SQL outside the library's statements, as each role might try it by hand: refused by
/// the database column by column and actor by actor, with nothing changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn direct_sql_is_refused_column_by_column_and_actor_by_actor() {
    let Some((admin, url)) = ledger().await else { return };
    let reviewer = open_as(&admin, &url, "actionledger_reviewer").await;
    let worker = open_as(&admin, &url, "actionledger_worker").await;
    unknown_action(&admin, "d:1").await;
    let before = admin.store().find(&key("d:1")).await.unwrap().unwrap();

    // A reviewer rewrites the approved payload: the fingerprint would be wrong and a re-delivery
    // of the old payload would answer `duplicate`.
    refused(&reviewer, r#"UPDATE actions SET payload = '{"qty":9}' WHERE key = 'd:1'"#).await;
    refused(&reviewer, "UPDATE actions SET fingerprint = 'forged' WHERE key = 'd:1'").await;
    refused(&reviewer, "UPDATE actions SET revision = revision + 5 WHERE key = 'd:1'").await;
    refused(&reviewer, "UPDATE actions SET key = 'd:other' WHERE key = 'd:1'").await;
    // Another person's name in the audit trail, and a change of state with no one's entry.
    let reviewer_login = format!("{}_reviewer", database_name(&url));
    let bob = "INSERT INTO audit_trail (action_key, at, actor, actor_kind, event, from_state, to_state, \
               ownership_version, revision) VALUES ('d:1', 0, 'bob', 'person', 'cancelled', 'unknown', 'cancelled', 1, 9)";
    refused(&reviewer, bob).await;
    refused(&reviewer, "UPDATE actions SET state = 'cancelled' WHERE key = 'd:1'").await;
    let mut tx = reviewer.store().pool().begin().await.unwrap();
    let forged = async {
        sqlx::query(bob).execute(&mut *tx).await?;
        sqlx::query("UPDATE actions SET state = 'cancelled' WHERE key = 'd:1'").execute(&mut *tx).await?;
        Ok::<_, sqlx::Error>(())
    };
    assert!(forged.await.is_err(), "bob's entry is refused, so the transaction is");
    drop(tx);
    // In its own login's name, a reviewer's entry is its own.
    let own = format!(
        "INSERT INTO audit_trail (action_key, at, actor, actor_kind, event, from_state, to_state, ownership_version, \
         revision) SELECT key, (extract(epoch FROM clock_timestamp()) * 1000)::bigint, '{reviewer_login}', 'person', \
         'assigned', state, state, ownership_version, revision FROM actions WHERE key = 'd:1'"
    );
    assert_eq!(exec(&reviewer, &own).await.unwrap(), 1, "a login signs as its own name");

    // A worker records an event this version cannot read back, or rewrites where a request goes
    // and when one was first sent.
    unknown_value(&worker, &audit_entry("d:1", "w1", "worker", "exploded")).await;
    unknown_value(&worker, "UPDATE attempts SET outcome = 'vanished' WHERE action_key = 'd:1'").await;
    refused(&worker, "UPDATE actions SET first_sent_at = NULL WHERE key = 'd:1'").await;
    refused(&worker, "UPDATE actions SET first_sent_at = 1 WHERE key = 'd:1'").await;
    refused(&worker, "UPDATE actions SET window_started_at = 1 WHERE key = 'd:1'").await;
    refused(&worker, "UPDATE actions SET destination = 'evil' WHERE key = 'd:1'").await;
    refused(&worker, "UPDATE actions SET ownership_version = ownership_version + 2 WHERE key = 'd:1'").await;
    refused(&worker, "UPDATE actions SET attempts = 0 WHERE key = 'd:1'").await;
    refused(&worker, "UPDATE actions SET created_at = 0 WHERE key = 'd:1'").await;
    refused(&worker, "UPDATE attempts SET started_at = 0 WHERE action_key = 'd:1'").await;

    let after = admin.store().find(&key("d:1")).await.unwrap().unwrap();
    assert_eq!(after, before, "nothing changed");
    let detail = admin.detail(&key("d:1")).await.expect("the trail still reads back");
    assert!(detail.audit.iter().all(|entry| entry.actor != "bob"), "{:?}", detail.audit);

    // The library's own commands still pass every guard, as the person of the login.
    let cancel = ManualRequest { confirmed_not_written: true, ..person_request("d:1", ManualCommand::Cancel) };
    reviewer.manual(&cancel).await.expect("a reviewer cancels");
    assert_eq!(state_of(&admin, "d:1").await, State::Cancelled);
}
