//! Crash points: a worker process killed with SIGKILL at each point of an action's life, then
//! recovery. Repeated runs per point, on both stores, counting records in the simulated CRM: no
//! action lost, no second effect, every ambiguous case `unknown` or `held`, and nothing left
//! claimed once recovery ran. Odd runs give the worker a slot per action (one claim takes them
//! all and starts them in one commit; their results share the group commit), even runs one slot
//! (one action at a time). `ACTIONLEDGER_CRASH_RUNS` sets the runs
//! per point (default 4).

use crate::support::{TestDb, order};
use actionledger::config::Config;
use actionledger::destination::{Destination, Destinations};
use actionledger::domain::{ActionKey, State};
use actionledger::sim_crm::{Fault, FaultPlan, Options, SimCrm};
use actionledger::store::Store;
use actionledger::worker::{self, WorkerOptions};
use std::os::unix::process::ExitStatusExt as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

conformance!(every_crash_point_recovers_without_a_second_effect);

const ACTIONS: usize = 3;

/// The crash switch's points, plus one the test makes itself: killed while the request is out.
const POINTS: [&str; 7] =
    ["after_claim", "before_send", "in_flight", "after_response", "result_queued", "during_record", "during_heartbeat"];

fn runs() -> usize {
    std::env::var("ACTIONLEDGER_CRASH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(4)
}

async fn crash_once<S: Store>(db: &TestDb<S>, point: &str, run: usize) -> String {
    let slots = if run % 2 == 1 { ACTIONS } else { 1 };
    // Requests are slow where the worker must be caught with one in flight or renewing a lease.
    let slow = matches!(point, "in_flight" | "during_heartbeat");
    let faults =
        if slow { FaultPlan { script: [Fault::Delay(2500)].into(), rates: Vec::new() } } else { FaultPlan::default() };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let crm = SimCrm::start(listener, Options { faults, ..Options::default() }).unwrap();
    let destination = format!("crm{run}{}", point.len());
    let keys: Vec<String> = (0..ACTIONS).map(|n| format!("crash:{point}:{run}:{n}")).collect();
    for key in &keys {
        let mut raw = order(key, &format!(r#"{{"n":"{key}"}}"#));
        raw.destination = Some(destination.clone());
        db.ledger.submit(&raw).await.unwrap();
    }
    let config_text = crm.destination_config(&destination);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("actionledger.toml");
    std::fs::write(&config, format!("{config_text}\nmax_attempts = 20\n")).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_actionledger"));
    command
        .env(actionledger::store::Clock::SHIFT_VARIABLE, db.ledger.store().clock().moved_on_ms())
        .args([
            "--db",
            &db.url,
            "worker",
            "--drain",
            "--concurrency",
            &slots.to_string(),
            "--lease",
            "1s",
            "--worker-id",
            "doomed",
            "--config",
        ])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if point != "in_flight" {
        command.env(actionledger::testkit::faults::VARIABLE, point);
    }
    let mut child = command.spawn().unwrap();
    if point == "in_flight" {
        let deadline = Instant::now() + Duration::from_secs(20);
        while crm.stats().requests == 0 {
            assert!(Instant::now() < deadline, "the worker sent nothing");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        child.kill().unwrap();
    }
    let status = tokio::task::spawn_blocking(move || child.wait()).await.unwrap().unwrap();
    assert_eq!(status.signal(), Some(9), "{point}: the worker died by SIGKILL");

    // Recovery: the leases run out (the database clock moves), and a new worker drains.
    db.ledger.store().clock().advance(Duration::from_mins(10));
    let parsed = Config::parse(&config_text).unwrap();
    let mut destinations = std::collections::BTreeMap::new();
    let mut settings = parsed.destinations[&destination].clone();
    if let Some(lookup) = settings.lookup.as_mut() {
        lookup.settle = Duration::from_millis(10);
    }
    settings.backoff_base = Duration::from_millis(5);
    settings.backoff_max = Duration::from_millis(20);
    destinations.insert(destination.clone(), Destination::new(&destination, settings).unwrap());
    let options = WorkerOptions {
        id: "rescuer".into(),
        concurrency: slots,
        batch: slots,
        lease: Duration::from_secs(30),
        poll_interval: Duration::from_millis(10),
        drain: true,
        destinations: Destinations::new(destinations, None),
        progress: false,
    };
    tokio::time::timeout(Duration::from_mins(1), worker::run(db.ledger.clone(), options, std::future::pending()))
        .await
        .expect("recovery finished")
        .unwrap();

    let mut ended = Vec::new();
    for key in &keys {
        let action = db.ledger.store().find(&ActionKey::parse(key).unwrap()).await.unwrap();
        let action = action.unwrap_or_else(|| panic!("{point}: {key} was lost"));
        assert!(
            matches!(action.state, State::Completed | State::Unknown | State::Held),
            "{point} run {run}: {key} ended {}",
            action.state
        );
        let records = crm.records_for(key);
        assert!(records.len() <= 1, "{point}: {key} has {} records", records.len());
        if action.state == State::Completed {
            assert_eq!(records.len(), 1, "{point}: {key} completed without a record");
            assert_eq!(records[0]["id"].as_str(), action.destination_id.as_deref());
        }
        ended.push(action.state.as_str());
    }
    let effects = crm.stats();
    format!(
        "{point} run {run} ({slots} slots): {} records, {} idempotent replays, states {ended:?}",
        effects.records, effects.idempotent_replays
    )
}

async fn every_crash_point_recovers_without_a_second_effect<S: Store>(db: TestDb<S>) {
    for point in POINTS {
        for run in 0..runs() {
            let line = crash_once(&db, point, run).await;
            println!("crash: {line}");
        }
    }
    let counts = db.ledger.counts().await.unwrap();
    let in_progress = counts.iter().find(|(s, _)| *s == State::InProgress).map_or(0, |(_, n)| *n);
    assert_eq!(in_progress, 0, "nothing left claimed after recovery: {counts:?}");
}
