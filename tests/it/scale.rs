//! Concurrency at scale, on both stores: 10,000 keys, each delivered 8 times by 16 concurrent
//! submitters, then performed by 4 and by 16 workers against the simulated CRM: exactly one
//! ledger action and one CRM record per key. `ACTIONLEDGER_SCALE_KEYS` changes the size.

use crate::support::{TestDb, order};
use actionledger::config::Config;
use actionledger::destination::{Destination, Destinations};
use actionledger::domain::State;
use actionledger::sim_crm::{Options, SimCrm};
use actionledger::store::{ListFilter, Store};
use actionledger::worker::{self, WorkerOptions};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

conformance!(ten_thousand_keys_eight_deliveries_four_and_sixteen_workers);

const SUBMITTERS: usize = 16;
const DELIVERIES: usize = 8;

fn keys() -> usize {
    std::env::var("ACTIONLEDGER_SCALE_KEYS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000)
}

async fn round<S: Store>(db: &TestDb<S>, workers: usize) {
    let keys = keys();
    let destination = format!("scale{workers}");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let crm = SimCrm::start(listener, Options::default()).unwrap();
    let started = Instant::now();
    let submitters: Vec<_> = (0..SUBMITTERS)
        .map(|s| {
            let ledger = db.ledger.clone();
            let destination = destination.clone();
            tokio::spawn(async move {
                for d in 0..keys * DELIVERIES / SUBMITTERS {
                    // Pairs of submitters walk the keys in step: each key arrives from 8 at once.
                    let n = (d + (s % 2) * (keys / 2)) % keys;
                    let mut raw = order(&format!("{destination}:{n}"), &format!(r#"{{"n":{n}}}"#));
                    raw.destination = Some(destination.clone());
                    ledger.submit(&raw).await.unwrap();
                }
            })
        })
        .collect();
    for s in submitters {
        s.await.unwrap();
    }
    let submitted = started.elapsed();
    let mut config = Config::parse(&crm.destination_config(&destination)).unwrap().destinations[&destination].clone();
    config.max_attempts = 50;
    let destinations = BTreeMap::from([(destination.clone(), Destination::new(&destination, config).unwrap())]);
    let runs: Vec<_> = (0..workers)
        .map(|w| {
            let ledger = db.ledger.clone();
            let options = WorkerOptions {
                id: format!("{destination}-w{w}"),
                concurrency: 4,
                batch: 100,
                lease: Duration::from_mins(1),
                poll_interval: Duration::from_millis(20),
                drain: true,
                destinations: Destinations::new(destinations.clone(), None),
                progress: false,
            };
            tokio::spawn(async move { worker::run(ledger, options, std::future::pending()).await })
        })
        .collect();
    for r in runs {
        r.await.unwrap().unwrap();
    }
    let filter = ListFilter {
        key_contains: Some(format!("{destination}:")),
        limit: i64::try_from(keys * 2).unwrap(),
        ..ListFilter::default()
    };
    let actions = db.ledger.list(&filter).await.unwrap();
    assert_eq!(actions.len(), keys, "exactly one ledger action per key");
    assert!(actions.iter().all(|a| a.state == State::Completed), "every action completed");
    let stats = crm.stats();
    assert_eq!(usize::try_from(stats.records).unwrap(), keys, "one CRM record per key");
    assert_eq!(stats.max_records_per_external_ref, 1);
    println!(
        "scale: {keys} keys x {DELIVERIES} deliveries by {SUBMITTERS} submitters in {:.1}s, performed by {workers} workers in {:.1}s: \
         {} actions, {} CRM records, max {} per key",
        submitted.as_secs_f64(),
        started.elapsed().saturating_sub(submitted).as_secs_f64(),
        actions.len(),
        stats.records,
        stats.max_records_per_external_ref
    );
}

async fn ten_thousand_keys_eight_deliveries_four_and_sixteen_workers<S: Store>(db: TestDb<S>) {
    round(&db, 4).await;
    round(&db, 16).await;
}
