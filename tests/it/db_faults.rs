//! Database faults: PostgreSQL connections terminated by the server while workers and a console
//! run; SQLite with many contending writers, and worker processes killed mid-write. No lost or
//! duplicated transition, the worker and console carry on, SQLite's integrity check passes.

use crate::support::crm::every_create_delayed;
use crate::support::{self, TestDb, order};
use actionledger::Ledger;
use actionledger::config::Config;
use actionledger::console::{ConsoleOptions, ScriptedConsole, model::Msg};
use actionledger::destination::{Destination, Destinations};
use actionledger::domain::{Person, State};
use actionledger::error::Kind;
use actionledger::sim_crm::{Options, SimCrm};
use actionledger::store::{ListFilter, PostgresStore, SqliteStore, Store};
use actionledger::worker::{self, WorkerOptions};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

conformance!(the_console_says_when_the_ledger_cannot_be_reached_and_when_it_is_back);

/// A store whose pool can be emptied: every connection taken and kept, so that the ledger answers
/// no one else, as a database that stopped handing out connections.
pub(crate) trait Starve {
    async fn take_every_connection(&self) -> Vec<Box<dyn Send>>;
}

async fn take_all<DB: sqlx::Database>(pool: &sqlx::Pool<DB>) -> Vec<Box<dyn Send>> {
    let mut held: Vec<Box<dyn Send>> = Vec::new();
    for _ in 0..pool.options().get_max_connections() {
        held.push(Box::new(pool.acquire().await.unwrap()));
    }
    held
}

impl Starve for SqliteStore {
    async fn take_every_connection(&self) -> Vec<Box<dyn Send>> {
        take_all(self.pool()).await
    }
}

impl Starve for PostgresStore {
    async fn take_every_connection(&self) -> Vec<Box<dyn Send>> {
        take_all(self.pool()).await
    }
}

/// The second line of the header, masked: connected, or the ledger unreachable.
fn header_state(screen: &str) -> String {
    support::mask_times(screen.lines().nth(1).unwrap_or_default())
}

/// A console whose loads stop getting an answer says so in its header within the bound of one
/// read, holds every command back with the reason (a failure, not a refusal), keeps trying, and
/// clears it all when the ledger answers again.
async fn the_console_says_when_the_ledger_cannot_be_reached_and_when_it_is_back<S: Store + Starve>(db: TestDb<S>) {
    for n in 0..3 {
        db.ledger.submit(&order(&format!("away:{n}"), r#"{"n":1}"#)).await.unwrap();
    }
    let options = ConsoleOptions {
        owner: Person::parse("ana").unwrap(),
        ledger_label: "test-ledger".into(),
        destinations: Destinations::default(),
        refresh: Duration::from_hours(1),
        hint: None,
        filter: None,
    };
    let mut console = ScriptedConsole::start(&db.ledger, &options, 80, 24).await.unwrap();
    let connected = console.screen().unwrap();
    assert!(header_state(&connected).ends_with("  refreshed Ns ago"), "{connected}");
    insta::assert_snapshot!("ledger_connected_80x24", support::mask_times(&connected));

    let held = db.ledger.store().take_every_connection().await;
    let asked = Instant::now();
    console.send(Msg::Tick).await.unwrap();
    assert!(asked.elapsed() < Duration::from_secs(5), "told after {:?}, not after the pool's wait", asked.elapsed());
    let away = console.screen().unwrap();
    assert_eq!(
        header_state(&away),
        "DATABASE UNREACHABLE since hh:mm:ss UTC, retrying; rows shown are Ns old",
        "\n{away}"
    );
    assert!(away.contains("> away:2"), "the rows last read stay:\n{away}");
    assert!(away.contains("database: no answer from the ledger within 2s (the console keeps trying)"), "{away}");
    insta::assert_snapshot!("ledger_unreachable_80x24", support::mask_times(&away));
    assert!(away.lines().last().unwrap_or_default().contains("commands wait for the ledger"), "{away}");

    console.press("o").await.unwrap();
    let refused = console.screen().unwrap().replace('\n', " ");
    assert!(!refused.contains("reason:"), "no dialog opens:\n{refused}");
    assert!(
        refused.contains("the ledger cannot be reached since")
            && refused.contains("nothing was changed; try again once it is back"),
        "{refused}"
    );
    let model = console.model();
    assert_eq!((model.failures, model.refusals, model.stopped), (1, 0, Some(Kind::Error)));

    drop(held);
    console.send(Msg::Tick).await.unwrap();
    let back = console.screen().unwrap();
    assert!(header_state(&back).ends_with("  refreshed Ns ago"), "{back}");
    for gone in ["database:", "UNREACHABLE", "cannot be reached"] {
        assert!(!back.contains(gone), "the outage's {gone:?} is gone:\n{back}");
    }
    insta::assert_snapshot!("ledger_back_80x24", support::mask_times(&back));
    for line in ["o"] {
        console.press(line).await.unwrap();
    }
    let action = db.ledger.store().find(&"away:2".parse().unwrap()).await.unwrap().unwrap();
    assert_eq!(action.assignee.as_deref(), Some("ana"), "commands run again once it is back");
}

async fn crm(delay_ms: u64) -> SimCrm {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    SimCrm::start(listener, Options { faults: every_create_delayed(delay_ms), ..Options::default() }).unwrap()
}

fn worker_options(id: &str, crm: &SimCrm, drain: bool) -> WorkerOptions {
    let mut config = Config::parse(&crm.destination_config("crm")).unwrap().destinations["crm"].clone();
    config.backoff_base = Duration::from_millis(10);
    config.backoff_max = Duration::from_millis(50);
    config.max_attempts = 50;
    if let Some(lookup) = config.lookup.as_mut() {
        lookup.settle = Duration::from_millis(20);
    }
    WorkerOptions {
        id: id.to_owned(),
        concurrency: 4,
        batch: 100,
        lease: Duration::from_secs(2),
        poll_interval: Duration::from_millis(20),
        drain,
        destinations: Destinations::new(
            BTreeMap::from([("crm".to_owned(), Destination::new("crm", config).unwrap())]),
            None,
        ),
        progress: false,
    }
}

/// Every key has one action, in a settled state, and the CRM one record at most.
async fn check_settled<S: Store>(ledger: &Ledger<S>, crm: &SimCrm, keys: usize) {
    let actions = ledger.list(&ListFilter { limit: 10_000, ..ListFilter::default() }).await.unwrap();
    assert_eq!(actions.len(), keys, "one action per key");
    for action in &actions {
        assert!(
            matches!(action.state, State::Completed | State::Unknown | State::Held),
            "{} ended {}",
            action.key,
            action.state
        );
        let records = crm.records_for(action.key.as_str());
        assert!(records.len() <= 1, "{} has {} records", action.key, records.len());
        if action.state == State::Completed {
            assert_eq!(records.len(), 1, "{}", action.key);
        }
    }
    assert_eq!(crm.stats().max_records_per_external_ref, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_connections_terminated_while_workers_and_a_console_run() {
    use sqlx::Connection as _;
    const KEYS: usize = 120;
    let Some(db) = support::postgres().await else { return };
    let crm = crm(20).await;
    for n in 0..KEYS {
        db.ledger.submit(&order(&format!("term:{n}"), r#"{"n":1}"#)).await.unwrap();
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let workers: Vec<_> = (0..2)
        .map(|w| {
            let ledger = db.ledger.clone();
            let options = worker_options(&format!("w{w}"), &crm, false);
            let mut stopped = stopped.clone();
            tokio::spawn(async move {
                worker::run(ledger, options, async move {
                    let _ = stopped.wait_for(|s| *s).await;
                })
                .await
            })
        })
        .collect();
    let options = ConsoleOptions {
        owner: Person::parse("ops").unwrap(),
        ledger_label: "pg".into(),
        destinations: Destinations::default(),
        refresh: Duration::from_hours(1),
        hint: None,
        filter: None,
    };
    let mut console = ScriptedConsole::start(&db.ledger, &options, 100, 30).await.unwrap();
    let mut admin = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let mut terminated = 0i64;
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let killed: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .fetch_all(&mut admin)
        .await
        .unwrap();
        terminated += i64::try_from(killed.iter().filter(|k| **k).count()).unwrap();
        console.send(Msg::Tick).await.unwrap();
        console.screen().unwrap();
    }
    assert!(terminated > 0, "connections were really terminated");
    // The workers carry on; claims cut off mid-way expire and are recovered.
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let counts = db.ledger.counts().await.unwrap();
        let open =
            counts.iter().filter(|(s, _)| matches!(s, State::Pending | State::InProgress)).map(|(_, n)| n).sum::<i64>();
        if open == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "work did not finish after the terminations: {counts:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = stop.send(true);
    for w in workers {
        w.await.unwrap().unwrap();
    }
    check_settled(&db.ledger, &crm, KEYS).await;
    console.send(Msg::Tick).await.unwrap();
    let screen = console.screen().unwrap();
    assert!(screen.contains(&format!("all actions {KEYS}")), "the console recovered:\n{screen}");
    println!("terminated {terminated} backends; CRM {:?}", crm.stats());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_with_many_contending_writers_loses_nothing() {
    let db = support::sqlite().await;
    let tasks: Vec<_> = (0..32)
        .map(|t| {
            let ledger = db.ledger.clone();
            tokio::spawn(async move {
                for n in 0..40 {
                    ledger.submit(&order(&format!("busy:{}", (t * 7 + n) % 300), "{}")).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let actions = db.ledger.list(&ListFilter { limit: 1000, ..ListFilter::default() }).await.unwrap();
    let deliveries: usize = {
        let mut total = 0;
        for a in &actions {
            total += db.ledger.store().deliveries(&a.key).await.unwrap().len();
        }
        total
    };
    assert_eq!(deliveries, 32 * 40, "every delivery recorded under contention");
    let keys: std::collections::HashSet<_> = (0..32).flat_map(|t| (0..40).map(move |n| (t * 7 + n) % 300)).collect();
    assert_eq!(actions.len(), keys.len(), "one action per key");
}

/// SQLite ends a transaction by itself when its commit fails (a full disk, an I/O error); sqlx's
/// rollback then fails too and leaves the connection counted as inside a transaction. The
/// same state is made here by ending the transaction behind sqlx's back before its commit.
/// Every pooled connection is left that way, and the ledger must still work.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_connection_whose_commit_failed_is_not_reused() {
    use sqlx::Connection as _;
    let db = support::sqlite().await;
    let pool = db.ledger.store().pool().clone();
    let mut held = Vec::new();
    while let Ok(Ok(connection)) = tokio::time::timeout(Duration::from_millis(200), pool.acquire()).await {
        held.push(connection);
    }
    assert!(!held.is_empty(), "the pool gave out connections");
    for connection in &mut held {
        let mut tx = sqlx::Connection::begin(&mut **connection).await.unwrap();
        sqlx::query("ROLLBACK").execute(&mut *tx).await.unwrap();
        let commit = tx.commit().await;
        assert!(commit.is_err(), "the commit of a transaction SQLite already ended fails");
        assert!(connection.is_in_transaction(), "sqlx still counts the connection as inside a transaction");
    }
    let stuck = held.len();
    drop(held);
    for n in 0..3 * stuck {
        db.ledger
            .submit(&order(&format!("after-failed-commit:{n}"), "{}"))
            .await
            .unwrap_or_else(|error| panic!("submission {n} after {stuck} connections' commits failed: {error}"));
    }
    assert_eq!(db.ledger.list(&ListFilter { limit: 100, ..ListFilter::default() }).await.unwrap().len(), 3 * stuck);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_survives_workers_killed_mid_write() {
    const KEYS: usize = 60;
    let db = support::sqlite().await;
    let crm = crm(5).await;
    for n in 0..KEYS {
        db.ledger.submit(&order(&format!("kill:{n}"), r#"{"n":1}"#)).await.unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("actionledger.toml");
    std::fs::write(&config, crm.destination_config("crm")).unwrap();
    for round in 0..5u64 {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_actionledger"))
            .env(actionledger::store::Clock::SHIFT_VARIABLE, db.ledger.store().clock().moved_on_ms())
            .args(["--db", &db.url, "worker", "--concurrency", "4", "--lease", "1s", "--config"])
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(150 + 70 * round)).await;
        child.kill().unwrap();
        child.wait().unwrap();
        let check: String =
            sqlx::query_scalar("PRAGMA integrity_check").fetch_one(db.ledger.store().pool()).await.unwrap();
        assert_eq!(check, "ok", "round {round}");
    }
    db.ledger.store().clock().advance(Duration::from_mins(10));
    let summary = tokio::time::timeout(
        Duration::from_mins(1),
        worker::run(db.ledger.clone(), worker_options("rescuer", &crm, true), std::future::pending()),
    )
    .await
    .unwrap()
    .unwrap();
    println!("after 5 kills: {summary:?}; CRM {:?}", crm.stats());
    check_settled(&db.ledger, &crm, KEYS).await;
}
