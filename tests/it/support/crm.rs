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
