//! Connections to PostgreSQL as a deployment counts them: sixteen worker processes of
//! `--concurrency 4` drain a backlog on a server with a stock `max_connections` of 100, and a
//! server that is full is named as such.

use crate::support::crm::{Kind, crm_for, every_create_delayed};
use crate::support::order;
use crate::support::process::{WorkerProcess, command};
use actionledger::Ledger;
use actionledger::domain::{RawSubmission, State};
use actionledger::store::{ListFilter, PostgresStore};
use std::time::Duration;

const WORKERS: usize = 16;
const ACTIONS: usize = 480;

/// Sixteen workers of `--concurrency 4` at once fit a stock server's 100 connections (3 of
/// which it keeps for superusers): every one drains to the end, none is refused a connection,
/// and the server never holds more than the workers' documented share.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_workers_of_concurrency_four_fit_a_stock_servers_connections() {
    let Some(cluster) = crate::support::pg::private_server_with("-c max_connections=100") else { return };
    let (crm, block) = crm_for(Kind::Keyed, "crm").await;
    crm.set_faults(every_create_delayed(20));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("actionledger.toml");
    std::fs::write(&config, format!("{block}\n[worker]\npoll_interval = \"50ms\"\n")).unwrap();
    let ledger = Ledger::new(PostgresStore::open_with(&cluster.url, 1).await.unwrap());
    let page: Vec<RawSubmission> = (0..ACTIONS)
        .map(|n| RawSubmission { destination: Some("crm".to_owned()), ..order(&format!("fit:{n:04}"), "{}") })
        .collect();
    assert!(ledger.submit_many(&page).await.unwrap().iter().all(Result::is_ok));

    let mut workers: Vec<WorkerProcess> = (0..WORKERS)
        .map(|n| {
            let mut worker = command(dir.path(), &cluster.url);
            worker.args(["worker", "--drain", "--concurrency", "4", "--worker-id", &format!("fit-{n}"), "--config"]);
            worker.arg(&config);
            WorkerProcess::spawn(worker)
        })
        .collect();
    // The most sessions the server held for the workers at any moment, sampled as they drain.
    let watcher = sqlx::PgPool::connect(&cluster.url).await.unwrap();
    let mut most = 0_i64;
    while workers.iter_mut().any(WorkerProcess::is_running) {
        let held: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
        )
        .fetch_one(&watcher)
        .await
        .unwrap();
        most = most.max(held);
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    for worker in &mut workers {
        let exited = worker.exit_within(Duration::from_mins(2)).await;
        assert!(exited.status.success(), "a worker failed:\n{}", exited.stderr);
        assert!(!exited.stderr.contains("too many clients"), "{}", exited.stderr);
    }
    let per_worker = i64::from(actionledger::store::worker_connections(4)) + 1;
    println!("sessions held at most: {most} (16 workers of at most {per_worker} each, and the test's own)");
    assert!(most <= 16 * per_worker + 1, "the workers held {most} sessions");
    let completed =
        ledger.list(&ListFilter { state: Some(State::Completed), limit: 1000, ..ListFilter::default() }).await.unwrap();
    assert_eq!(completed.len(), ACTIONS, "every action drained");
    assert_eq!(usize::try_from(crm.stats().records).unwrap(), ACTIONS, "one record each");
}

/// A server that holds its `max_connections` already is named as such, with what to change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_server_is_named_with_max_connections() {
    let Some(cluster) =
        crate::support::pg::private_server_with("-c max_connections=6 -c superuser_reserved_connections=0")
    else {
        return;
    };
    let ledger = Ledger::new(PostgresStore::open_with(&cluster.url, 1).await.unwrap());
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(sqlx::PgPool::connect(&cluster.url).await.unwrap().acquire().await.unwrap());
    }
    let dir = tempfile::tempdir().unwrap();
    let refused = command(dir.path(), &cluster.url).args(["list"]).output().unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    assert!(said.contains("already holds its max_connections"), "{said}");
    drop((held, ledger));
}
