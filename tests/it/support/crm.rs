//! Simulated CRMs behind the kinds of destination the tests declare, each stopping a repeat only
//! by what its destination declares, and latency that keeps requests in flight.

use actionledger::sim_crm::{Fault, FaultPlan, Options, SimCrm};
use std::collections::VecDeque;

/// How a test declares a destination of the simulated CRM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A lookup (and the CRM's idempotency key).
    Looked,
    /// An idempotency key only.
    Keyed,
    /// Nothing.
    Bare,
}

/// The CRM and the destination block for `kind`. Every kind's CRM accepts a second record with
/// the same external reference (no destination here declares unique references), so that a repeat
/// the declared protection let through shows as a second record.
pub async fn crm_for(kind: Kind, name: &str) -> (SimCrm, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let options = match kind {
        Kind::Looked | Kind::Keyed => Options { unique_refs: false, ..Options::default() },
        Kind::Bare => Options { retention: None, unique_refs: false, ..Options::default() },
    };
    let crm = SimCrm::start(listener, options).unwrap();
    let mut config = crm.destination_config(name);
    if kind != Kind::Looked {
        config = config.lines().filter(|line| !line.starts_with("lookup =")).collect::<Vec<_>>().join("\n");
    }
    (crm, format!("{config}\n"))
}

/// Every create waits `ms` before it is handled, so that a worker has requests in flight.
pub fn every_create_delayed(ms: u64) -> FaultPlan {
    FaultPlan { script: VecDeque::new(), rates: vec![(Fault::Delay(ms), 1.0)] }
}

/// A simulated CRM of default options as the destination `crm`, and a worker of `concurrency`
/// run in-process until nothing is left to do for it: the CRM, to count its records.
pub async fn drained_at_a_new_crm<S: actionledger::store::Store>(
    ledger: &actionledger::Ledger<S>,
    worker_id: &str,
    concurrency: usize,
) -> SimCrm {
    use actionledger::destination::{Destination, Destinations};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let crm = SimCrm::start(listener, Options::default()).unwrap();
    let config =
        actionledger::config::Config::parse(&crm.destination_config("crm")).unwrap().destinations["crm"].clone();
    let destinations = std::collections::BTreeMap::from([("crm".to_owned(), Destination::new("crm", config).unwrap())]);
    let options = actionledger::worker::WorkerOptions {
        id: worker_id.to_owned(),
        concurrency,
        batch: 100,
        lease: std::time::Duration::from_mins(1),
        poll_interval: std::time::Duration::from_millis(20),
        drain: true,
        destinations: Destinations::new(destinations, None),
        progress: false,
    };
    actionledger::worker::run(ledger.clone(), options, std::future::pending()).await.unwrap();
    crm
}
