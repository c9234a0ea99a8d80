//! Simulated CRMs behind the kinds of destination the tests declare, and latency that keeps
//! requests in flight.

use actionledger::sim_crm::{Fault, FaultPlan, Options, SimCrm};
use std::collections::VecDeque;

/// How a test declares a destination of the simulated CRM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A lookup (and the CRM's idempotency key).
    Looked,
    /// An idempotency key only.
    Keyed,
    /// Nothing: the CRM also accepts a second record with the same reference.
    Bare,
}

/// The CRM and the destination block for `kind`.
pub async fn crm_for(kind: Kind, name: &str) -> (SimCrm, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let options = match kind {
        Kind::Looked | Kind::Keyed => Options::default(),
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
