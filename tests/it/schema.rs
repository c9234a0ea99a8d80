//! The ledger's schema on the real binary: on PostgreSQL it keeps to a schema of its own beside an
//! application's tables; commands that only read never create a ledger; `migrate --status` and
//! `--dry-run` change nothing; a build older than the ledger refuses to write; many first
//! submissions at once on a new ledger all succeed; a ledger an earlier version left in `public`
//! is found and moved.

use crate::support;
use actionledger::sim_crm::{Options, SimCrm};
use sqlx::Connection as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_actionledger");

fn command(dir: &Path, url: &str, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .current_dir(dir)
        .env_remove("ACTIONLEDGER_DB")
        .env_remove("DATABASE_URL")
        .env_remove("ACTIONLEDGER_SCHEMA")
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .args(["--db", url])
        .args(args);
    command
}

fn run(dir: &Path, url: &str, args: &[&str]) -> Output {
    command(dir, url, args).output().expect("run actionledger")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs a command that must succeed; its standard output.
fn ok(dir: &Path, url: &str, args: &[&str]) -> String {
    let output = run(dir, url, args);
    assert_eq!(
        output.status.code(),
        Some(0),
        "actionledger {args:?}\nstdout: {}\nstderr: {}",
        text(&output.stdout),
        text(&output.stderr)
    );
    text(&output.stdout)
}

/// The URL with a password the trust-authenticated test server ignores, so that messages can be
/// checked for hiding it.
fn with_password(url: &str) -> String {
    url.replacen("postgres@", "postgres:hunter2@", 1)
}

/// A plain session on the database, in its default `search_path` as an application has it.
async fn application_session(url: &str) -> sqlx::PgConnection {
    sqlx::PgConnection::connect(url).await.unwrap()
}

async fn strings(conn: &mut sqlx::PgConnection, sql: &'static str) -> Vec<String> {
    sqlx::query_scalar(sql).fetch_all(conn).await.unwrap()
}

/// Everything of the application's: its rows, and every object in `public`, row for row.
async fn application_state(conn: &mut sqlx::PgConnection) -> Vec<String> {
    let mut state = strings(conn, "SELECT 'actions: ' || row_to_json(a)::text FROM public.actions a ORDER BY id").await;
    state.extend(
        strings(
            conn,
            "SELECT '_sqlx_migrations: ' || row_to_json(m)::text FROM public._sqlx_migrations m ORDER BY version",
        )
        .await,
    );
    state.extend(
        strings(
            conn,
            "SELECT 'state_transitions: ' || row_to_json(t)::text FROM public.state_transitions t ORDER BY 1",
        )
        .await,
    );
    state.extend(
        strings(
            conn,
            "SELECT 'object: ' || relkind::text || ' ' || relname::text FROM pg_class \
             WHERE relnamespace = 'public'::regnamespace ORDER BY relname",
        )
        .await,
    );
    state.extend(
        strings(conn, "SELECT 'function: ' || proname::text FROM pg_proc WHERE pronamespace = 'public'::regnamespace")
            .await,
    );
    state
}

const APPLICATION_SCHEMA: &str = "
    CREATE TABLE actions (id serial PRIMARY KEY, name text NOT NULL, state text NOT NULL);
    INSERT INTO actions (name, state) VALUES ('send invoice 7', 'pending'), ('close ticket 9', 'done');
    CREATE TABLE _sqlx_migrations (version BIGINT PRIMARY KEY, description TEXT NOT NULL,
        installed_on TIMESTAMPTZ NOT NULL DEFAULT now(), success BOOLEAN NOT NULL, checksum BYTEA NOT NULL,
        execution_time BIGINT NOT NULL);
    INSERT INTO _sqlx_migrations VALUES (1, 'app init', '2026-01-02T03:04:05Z', true, '\\x0101', 5),
        (20260101000000, 'app orders', '2026-01-03T03:04:05Z', true, '\\x0202', 7);
    CREATE TABLE state_transitions (from_state text NOT NULL, to_state text NOT NULL);
    INSERT INTO state_transitions VALUES ('completed', 'pending');";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_postgres_ledger_leaves_an_applications_tables_as_they_were_row_for_row() {
    let Some(url) = support::pg::fresh_database().await else { return };
    let mut app = application_session(&url).await;
    sqlx::raw_sql(APPLICATION_SCHEMA).execute(&mut app).await.unwrap();
    let before = application_state(&mut app).await;

    let dir = tempfile::tempdir().unwrap();
    let crm = SimCrm::start(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(), Options::default()).unwrap();
    let config = dir.path().join("actionledger.toml");
    std::fs::write(&config, crm.destination_config("crm")).unwrap();
    let config = config.to_str().unwrap();
    let dir = dir.path();
    print!("{}", ok(dir, &url, &["migrate"]));
    for n in 0..3 {
        let key = format!("acme:order:{n}:create-task");
        ok(dir, &url, &["submit", "--key", &key, "--payload", r#"{"task":"pack"}"#, "--destination", "crm"]);
    }
    ok(dir, &url, &["worker", "--config", config, "--drain", "--worker-id", "w1"]);
    assert_eq!(crm.stats().records, 3, "the worker performed every action");

    let after = application_state(&mut app).await;
    println!("before:\n  {}\nafter:\n  {}", before.join("\n  "), after.join("\n  "));
    assert_eq!(after, before, "the application's tables and migration rows changed");
    let completed: i64 = sqlx::query_scalar("SELECT count(*) FROM actionledger.actions WHERE state = 'completed'")
        .fetch_one(&mut app)
        .await
        .unwrap();
    assert_eq!(completed, 3, "the ledger's rows are in its own schema");
    let versions: Vec<i64> = sqlx::query_scalar("SELECT version FROM actionledger._sqlx_migrations ORDER BY version")
        .fetch_all(&mut app)
        .await
        .unwrap();
    assert_eq!(versions.first(), Some(&1), "the ledger's migrations are recorded in its own schema");
    let outside: Vec<String> = strings(
        &mut app,
        "SELECT n.nspname || '.' || p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
         WHERE p.proname LIKE 'actionledger%' AND n.nspname <> 'actionledger' \
         UNION ALL SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE c.relname IN ('deliveries', 'attempts', 'audit_trail', 'lookups', 'refused_submissions') \
         AND n.nspname <> 'actionledger'",
    )
    .await;
    assert!(outside.is_empty(), "ledger objects outside its schema: {outside:?}");

    // A session in the application's search_path that writes to the ledger is still judged by the
    // ledger's own transition table, not by the application's table of the same name.
    let refused = sqlx::query("UPDATE actionledger.actions SET state = 'pending' WHERE state = 'completed'")
        .execute(&mut app)
        .await
        .expect_err("the guard let a completed action go back to pending");
    assert!(refused.to_string().contains("forbidden state transition from completed to pending"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_schema_named_by_flag_or_url_holds_the_ledger() {
    let Some(url) = support::pg::fresh_database().await else { return };
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    ok(dir, &url, &["--schema", "ops_ledger", "submit", "--key", "k:1", "--payload", "{}"]);
    let in_url = format!("{url}?options=-csearch_path%3Dops_ledger");
    let listed = ok(dir, &in_url, &["list", "--json"]);
    assert!(listed.contains("k:1"), "{listed}");
    // The default schema has no ledger: it was never made.
    let missing = run(dir, &url, &["list"]);
    assert_eq!(missing.status.code(), Some(4), "{}", text(&missing.stderr));
    let clash = run(dir, &in_url, &["--schema", "other", "list"]);
    assert_eq!(clash.status.code(), Some(2), "{}", text(&clash.stderr));
    assert!(text(&clash.stderr).contains("the URL's search_path names ops_ledger"), "{}", text(&clash.stderr));
    let mut app = application_session(&url).await;
    let schemas = strings(&mut app, "SELECT nspname::text FROM pg_namespace WHERE nspname LIKE '%ledger%'").await;
    assert_eq!(schemas, ["ops_ledger"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commands_that_only_read_never_create_a_postgres_ledger() {
    let Some(url) = support::pg::fresh_database().await else { return };
    let url = with_password(&url);
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("look.keys");
    std::fs::write(&script, "q\n").unwrap();
    let script = script.to_str().unwrap();
    let dir = dir.path();
    for args in [
        &["list"][..],
        &["show", "k:1"],
        &["review", "--owner", "ana", "--script", script],
        &["reconcile", "--config", "absent.toml"],
        &["retry", "k:1", "--owner", "ana", "--reason", "wrong database"],
    ] {
        let output = run(dir, &url, args);
        let said = text(&output.stderr);
        assert_eq!(output.status.code(), Some(4), "{args:?}: {said}");
        assert!(
            said.contains("no ledger at postgres://postgres:***@")
                && said.contains("(schema actionledger)")
                && said.contains("actionledger migrate")
                && !said.contains("hunter2"),
            "{args:?}: {said}"
        );
    }
    let mut app = application_session(&url).await;
    let made = strings(&mut app, "SELECT nspname::text FROM pg_namespace WHERE nspname = 'actionledger'").await;
    assert!(made.is_empty(), "a command that only reads made the schema");
    ok(dir, &url, &["migrate"]);
    assert_eq!(ok(dir, &url, &["list"]), "no actions\n", "after migrate the empty ledger answers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_submits_at_once_on_a_new_postgres_ledger_all_succeed() {
    let Some(url) = support::pg::fresh_database().await else { return };
    let dir = tempfile::tempdir().unwrap();
    let children: Vec<_> = (0..16)
        .map(|n| {
            command(dir.path(), &url, &["submit", "--key", &format!("first-day:{n}"), "--payload", "{}"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start actionledger")
        })
        .collect();
    let mut codes = Vec::new();
    for child in children {
        let output = child.wait_with_output().unwrap();
        codes.push(output.status.code());
        assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
        assert_eq!(text(&output.stdout), "created\n");
        let said = text(&output.stderr);
        assert_eq!(
            said.lines().filter(|l| !l.starts_with("recorded first-day:")).collect::<Vec<_>>(),
            Vec::<&str>::new(),
            "standard error says what was recorded and nothing else (no server notice): {said}"
        );
    }
    println!("exit codes of 16 first submissions at once: {codes:?}");
    let mut app = application_session(&url).await;
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM actionledger.actions").fetch_one(&mut app).await.unwrap();
    assert_eq!(count, 16);
}

/// `migrate --status` and `--dry-run` on a ledger that does not exist yet, then on one that does:
/// they list and print, and create or change nothing.
fn status_and_dry_run_change_nothing(dir: &Path, url: &str, exists: &dyn Fn() -> bool) {
    let pending = run(dir, url, &["migrate", "--status"]);
    assert_eq!(pending.status.code(), Some(5), "--status exits 5 while migrations are pending");
    let status = text(&pending.stdout);
    assert!(status.contains("no ledger there yet") && status.contains("pending  0001  ledger"), "{status}");
    assert!(!status.contains("applied"), "{status}");
    let dry_run = ok(dir, url, &["migrate", "--dry-run"]);
    assert!(dry_run.contains("-- migration 0001 ledger") && dry_run.contains("CREATE TABLE actions"), "{dry_run}");
    assert!(!exists(), "--status or --dry-run created the ledger");
    let listed: serde_json::Value =
        serde_json::from_slice(&run(dir, url, &["migrate", "--status", "--json"]).stdout).unwrap();
    assert_eq!((listed["exists"].as_bool(), listed["current"].as_bool()), (Some(false), Some(false)), "{listed}");
    assert_eq!(listed["pending"][0], serde_json::json!({"version": 1, "description": "ledger"}), "{listed}");

    let migrated = ok(dir, url, &["migrate"]);
    let carried = listed["pending"].as_array().unwrap().len();
    let applied: Vec<&str> = migrated.lines().filter(|l| l.starts_with("applied  ")).collect();
    assert_eq!(applied.len(), carried, "each migration applied is said: {migrated}");
    assert!(applied[0].starts_with("applied  0001  ledger  (") && applied[0].ends_with(" ms)"), "{migrated}");
    assert!(migrated.contains(&format!("({carried} migrations applied)")), "{migrated}");
    let again: serde_json::Value = serde_json::from_str(&ok(dir, url, &["migrate", "--json"])).unwrap();
    assert_eq!((again["applied"].as_array().map(Vec::len), again["current"].as_bool()), (Some(0), Some(true)));
    let status = ok(dir, url, &["migrate", "--status"]);
    assert!(status.contains("applied  0001  ledger") && !status.contains("pending"), "{status}");
    let dry_run = ok(dir, url, &["migrate", "--dry-run"]);
    assert!(dry_run.contains("up to date; migrating runs nothing") && !dry_run.contains("CREATE"), "{dry_run}");
}

#[test]
fn sqlite_migrate_status_and_dry_run_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ledger.db");
    let url = format!("sqlite://{}", file.display());
    status_and_dry_run_change_nothing(dir.path(), &url, &|| file.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_migrate_status_and_dry_run_change_nothing() {
    let Some(url) = support::pg::fresh_database().await else { return };
    let dir = tempfile::tempdir().unwrap();
    let dry_run = ok(dir.path(), &url, &["migrate", "--dry-run"]);
    assert!(dry_run.contains("CREATE SCHEMA IF NOT EXISTS actionledger;"), "{dry_run}");
    let check = url.clone();
    let exists = move || {
        std::thread::scope(|s| {
            s.spawn(|| {
                tokio::runtime::Runtime::new().unwrap().block_on(async {
                    let mut app = application_session(&check).await;
                    !strings(&mut app, "SELECT nspname::text FROM pg_namespace WHERE nspname = 'actionledger'")
                        .await
                        .is_empty()
                })
            })
            .join()
            .unwrap()
        })
    };
    status_and_dry_run_change_nothing(dir.path(), &url, &exists);
}

/// `migrate --export DIR` writes every migration as a file another tool runs; a ledger made by
/// running them (here each in its own transaction, as Flyway does) is current to this build, and
/// works.
fn exported_migrations_make_a_current_ledger(url: &str, run_file: &dyn Fn(&Path) -> Result<(), String>) {
    let dir = tempfile::tempdir().unwrap();
    let said = ok(dir.path(), url, &["migrate", "--export", "out"]);
    assert!(said.starts_with("wrote ") && said.contains("V0001__ledger.sql"), "{said}");
    let mut files: Vec<_> = std::fs::read_dir(dir.path().join("out")).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    for file in &files {
        run_file(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    }
    let status = run(dir.path(), url, &["migrate", "--status"]);
    assert_eq!(status.status.code(), Some(0), "{}{}", text(&status.stdout), text(&status.stderr));
    assert!(!text(&status.stdout).contains("pending"), "{}", text(&status.stdout));
    ok(dir.path(), url, &["submit", "--key", "acme:order:1:create", "--payload", "{}"]);
    let again = run(dir.path(), url, &["migrate", "--export", "out"]);
    assert_eq!(again.status.code(), Some(2), "an export never mixes with older files");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_exported_migrations_make_a_current_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("ledger.db").display());
    let pool = sqlx::SqlitePool::connect(&format!("{url}?mode=rwc")).await.unwrap();
    let run_file = |file: &Path| {
        let sql = std::fs::read_to_string(file).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                tokio::runtime::Runtime::new().unwrap().block_on(async {
                    let mut tx = pool.begin().await.map_err(|e| e.to_string())?;
                    sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&mut *tx).await.map_err(|e| e.to_string())?;
                    tx.commit().await.map_err(|e| e.to_string())
                })
            })
            .join()
            .unwrap()
        })
    };
    exported_migrations_make_a_current_ledger(&url, &run_file);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_exported_migrations_run_by_psql_make_a_current_ledger() {
    let Some(url) = support::pg::fresh_database().await else { return };
    let psql = actionledger::testkit::throwaway_pg::psql().expect("psql beside PostgreSQL's server programs");
    let run_file = |file: &Path| {
        let output = Command::new(&psql)
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "--single-transaction", "-d", &url, "-f"])
            .arg(file)
            .output()
            .map_err(|e| e.to_string())?;
        if output.status.success() { Ok(()) } else { Err(text(&output.stderr)) }
    };
    exported_migrations_make_a_current_ledger(&url, &run_file);
}

/// After a newer build's migration is recorded, this build refuses to write, says which schema
/// version it would need, and writes nothing.
fn an_older_build_refuses(dir: &Path, url: &str) {
    let refused = run(dir, url, &["submit", "--key", "k:2", "--payload", "{}"]);
    let said = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    assert!(
        said.contains("has schema version 99990101000000 (from a newer build)")
            && said.contains("refuses to write")
            && said.contains("carries migration 99990101000000"),
        "{said}"
    );
    let newer = run(dir, url, &["migrate", "--status"]);
    assert_eq!(newer.status.code(), Some(5), "a newer schema is not current to this build");
    let status = text(&newer.stdout);
    assert!(status.contains("(newer than this actionledger)"), "{status}");
    let migrate = run(dir, url, &["migrate"]);
    assert_eq!(migrate.status.code(), Some(1), "migrate refuses too: {}", text(&migrate.stderr));
}

const FUTURE_MIGRATION: &str = "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
     VALUES (99990101000000, 'from a newer build', true, x'00', 1)";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_an_older_build_refuses_a_newer_ledger() {
    let db = support::sqlite().await;
    db.ledger.submit(&support_submission("k:1")).await.unwrap();
    sqlx::query(FUTURE_MIGRATION).execute(db.ledger.store().pool()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    an_older_build_refuses(dir.path(), &db.url);
    let count: i64 =
        sqlx::query_scalar("SELECT count(*) FROM actions").fetch_one(db.ledger.store().pool()).await.unwrap();
    assert_eq!(count, 1, "nothing was written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_an_older_build_refuses_a_newer_ledger() {
    let Some(db) = support::postgres().await else { return };
    db.ledger.submit(&support_submission("k:1")).await.unwrap();
    sqlx::query(FUTURE_MIGRATION.replace("x'00'", "'\\x00'").leak() as &'static str)
        .execute(db.ledger.store().pool())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    an_older_build_refuses(dir.path(), &db.url);
    let count: i64 =
        sqlx::query_scalar("SELECT count(*) FROM actions").fetch_one(db.ledger.store().pool()).await.unwrap();
    assert_eq!(count, 1, "nothing was written");
}

fn support_submission(key: &str) -> actionledger::domain::RawSubmission {
    actionledger::domain::RawSubmission {
        key: Some(key.to_owned()),
        payload: b"{}".to_vec(),
        ..actionledger::domain::RawSubmission::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_ledger_an_earlier_version_left_in_public_is_found_and_moved() {
    let Some(url) = support::pg::fresh_database().await else { return };
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    // As the earlier version made it: everything in public, sharing sqlx's migrations table with
    // the application's own rows.
    ok(dir, &url, &["--schema", "public", "submit", "--key", "old:1", "--payload", "{}"]);
    let mut app = application_session(&url).await;
    sqlx::query("INSERT INTO _sqlx_migrations VALUES (20260101000000, 'app orders', now(), true, '\\x02', 7)")
        .execute(&mut app)
        .await
        .unwrap();

    for args in [&["list"][..], &["submit", "--key", "new:1", "--payload", "{}"]] {
        let found = run(dir, &url, args);
        let said = text(&found.stderr);
        assert_eq!(found.status.code(), Some(4), "{args:?}: {said}");
        assert!(said.contains("the schema public holds one") && said.contains("--move-from-public"), "{said}");
    }
    let dry_run = ok(dir, &url, &["migrate", "--move-from-public", "--dry-run"]);
    assert!(
        dry_run.contains("ALTER TABLE public.actions SET SCHEMA actionledger;")
            && dry_run.contains("ALTER FUNCTION public.actionledger_guard_action() SET SCHEMA actionledger;")
            && dry_run.contains("DELETE FROM public._sqlx_migrations WHERE version IN (1, 2, 3, 4"),
        "{dry_run}"
    );
    assert_eq!(run(dir, &url, &["list"]).status.code(), Some(4), "--dry-run moved nothing");

    ok(dir, &url, &["migrate", "--move-from-public"]);
    let listed = ok(dir, &url, &["list"]);
    assert!(listed.contains("old:1"), "{listed}");
    ok(dir, &url, &["submit", "--key", "new:1", "--payload", "{}"]);
    let left = strings(&mut app, "SELECT version::text FROM public._sqlx_migrations ORDER BY version").await;
    assert_eq!(left, ["20260101000000"], "only the application's migration stays in public");
    let in_public = strings(
        &mut app,
        "SELECT relname::text FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind = 'r' \
         UNION ALL SELECT proname::text FROM pg_proc WHERE pronamespace = 'public'::regnamespace",
    )
    .await;
    assert_eq!(in_public, ["_sqlx_migrations"], "the ledger left nothing else in public");
}
