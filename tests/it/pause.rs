//! Fencing under pauses: a worker process stopped with SIGSTOP past its lease while its request is
//! out, taken over, then resumed with SIGCONT. Every stale write is refused and kept as evidence,
//! ownership versions only grow, and the CRM holds one record. `ACTIONLEDGER_PAUSE_RUNS` sets the
//! number of pauses (default 3).

use crate::support::{TestDb, order};
use actionledger::domain::{ActionKey, State};
use actionledger::ledger::Recovery;
use actionledger::sim_crm::{Fault, FaultPlan, Options, SimCrm};
use actionledger::store::Store;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

conformance!(a_paused_worker_is_fenced_when_it_resumes);

fn signal(pid: u32, name: &str) {
    assert!(Command::new("kill").args([name, &pid.to_string()]).status().unwrap().success());
}

/// Stops the worker while it waits for its response, but not inside one of its short ledger
/// transactions (a heartbeat, a claim poll), trying again until it is caught outside. A process
/// stopped while holding SQLite's single write lock blocks every writer until it resumes, and one
/// stopped inside a PostgreSQL transaction blocks its rows until the server ends the session
/// (`IDLE_IN_TRANSACTION_LIMIT`): both are documented, and neither is what this test is about.
async fn pause_outside_a_transaction(pid: u32, url: &str) {
    for _ in 0..50 {
        signal(pid, "-STOP");
        // A statement in flight finishes at the server before the session shows as idle.
        tokio::time::sleep(Duration::from_millis(50)).await;
        if !inside_a_transaction(url).await {
            return;
        }
        signal(pid, "-CONT");
        tokio::time::sleep(Duration::from_millis(fastrand::u64(5..30))).await;
    }
    panic!("the worker was inside a transaction at each of 50 pauses");
}

/// Whether some other session holds a write transaction open on the ledger.
async fn inside_a_transaction(url: &str) -> bool {
    use sqlx::Connection as _;
    if url.starts_with("sqlite") {
        let options: sqlx::sqlite::SqliteConnectOptions = url.parse().unwrap();
        let mut probe = sqlx::SqliteConnection::connect_with(&options.busy_timeout(Duration::ZERO)).await.unwrap();
        let locked = sqlx::query("BEGIN IMMEDIATE").execute(&mut probe).await.is_err();
        if !locked {
            sqlx::query("ROLLBACK").execute(&mut probe).await.unwrap();
        }
        locked
    } else {
        let mut probe = sqlx::PgConnection::connect(url).await.unwrap();
        let open: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND pid <> pg_backend_pid() AND xact_start IS NOT NULL",
        )
        .fetch_one(&mut probe)
        .await
        .unwrap();
        open > 0
    }
}

async fn a_paused_worker_is_fenced_when_it_resumes<S: Store>(db: TestDb<S>) {
    let runs: usize = std::env::var("ACTIONLEDGER_PAUSE_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    for run in 0..runs {
        // The first request waits 1.5 s at the CRM before it writes, so the worker is caught with
        // its request out.
        let faults = FaultPlan { script: [Fault::Delay(1500)].into(), rates: Vec::new() };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let crm = SimCrm::start(listener, Options { faults, ..Options::default() }).unwrap();
        let destination = format!("paused{run}");
        let key = format!("pause:{run}");
        let mut raw = order(&key, r#"{"n":1}"#);
        raw.destination = Some(destination.clone());
        db.ledger.submit(&raw).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("actionledger.toml");
        std::fs::write(&config, crm.destination_config(&destination)).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_actionledger"))
            .args(["--db", &db.url, "worker", "--drain", "--lease", "1s", "--worker-id", "sleeper", "--config"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while crm.stats().requests == 0 {
            assert!(Instant::now() < deadline, "the worker sent nothing");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        pause_outside_a_transaction(child.id(), &db.url).await;
        // Past the lease by the database's clock (the worker's process shares it, so no jumps).
        let action_key = ActionKey::parse(&key).unwrap();
        let paused = db.ledger.store().find(&action_key).await.unwrap().unwrap();
        let until = paused.lease_expires_at.unwrap();
        while db.ledger.store().now().await.unwrap() <= until {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let declared = actionledger::config::Config::parse(&crm.destination_config(&destination)).unwrap();
        let declared = actionledger::destination::Destinations::from_config(&declared).unwrap();
        let Recovery::Claimed(rescue) = db
            .ledger
            .clone()
            .with_destinations(declared.catalog())
            .recover_expired(&action_key, paused.ownership_version, "rescuer", Duration::from_secs(30))
            .await
            .unwrap()
        else {
            panic!("run {run}: the destination protects against a repeat, so the takeover happens")
        };
        assert!(rescue.ownership_version() > paused.ownership_version, "ownership versions only grow");
        let attempt = db.ledger.start_attempt(&rescue).await.unwrap();
        let destination_settings = actionledger::config::Config::parse(&crm.destination_config(&destination)).unwrap();
        let dest = actionledger::destination::Destination::new(
            &destination,
            destination_settings.destinations[&destination].clone(),
        )
        .unwrap();
        let actionledger::destination::SendOutcome::Created { destination_id, .. } =
            dest.send(&rescue.action, None).await.unwrap()
        else {
            panic!("run {run}: the rescuer's request succeeds")
        };
        let report = actionledger::ledger::Report {
            outcome: actionledger::ledger::Outcome::Completed { destination_id },
            error: None,
            evidence: actionledger::domain::Evidence::default(),
        };
        db.ledger.record_result(&rescue, attempt, &report).await.unwrap();
        signal(child.id(), "-CONT");
        let status = tokio::task::spawn_blocking(move || child.wait()).await.unwrap().unwrap();
        assert!(status.success(), "run {run}: the resumed worker finishes cleanly");

        let detail = db.ledger.detail(&action_key).await.unwrap();
        assert_eq!(detail.action.state, State::Completed, "run {run}");
        let late: Vec<_> = detail.attempts.iter().filter(|a| a.worker == "sleeper").collect();
        assert_eq!(late.len(), 1, "run {run}: the paused worker's attempt is kept");
        assert!(late[0].stale, "run {run}: its result was refused as stale");
        assert!(late[0].outcome.is_some(), "run {run}: with what it learned, as evidence");
        // Seed 003: the late result goes to review, and does not overwrite the saved record.
        assert_eq!(detail.action.late_results, 1, "run {run}: listed on the action for review");
        assert_eq!(detail.late_results().count(), 1, "run {run}: with its evidence, unacknowledged");
        assert_eq!(detail.action.last_error, None, "run {run}: the late result wrote nothing into the record");
        let versions: Vec<i64> = detail.audit.iter().map(|e| e.ownership_version).collect();
        assert!(versions.windows(2).all(|w| w[0] <= w[1]), "run {run}: {versions:?}");
        let effects = crm.stats();
        assert_eq!(effects.max_records_per_external_ref, 1, "run {run}: one record");
        println!(
            "pause run {run}: records {}, idempotent replays {}, stale writes refused {}",
            effects.records, effects.idempotent_replays, effects.stale_writes_refused
        );
    }
}
