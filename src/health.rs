//! The operations endpoint of the worker and of `serve` (`--metrics-addr`): Prometheus metrics at
//! `/metrics` (text 0.0.4 or OpenMetrics, as the scraper's `Accept` asks; the connection pool read
//! at each scrape), liveness at `/healthz` and readiness at `/readyz`; and the refresher that reads
//! the ledger's figures and the queues' latency (a statement each) and its readiness into the
//! metrics' gauges on an interval, so that however often Prometheus scrapes, the database answers
//! the same few statements per interval.

use crate::domain::State as DomainState;
use crate::error::Error;
use crate::ledger::{Ledger, LedgerStats, NotReady};
use crate::metrics;
use crate::store::Store;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::task::JoinHandle;

/// How long `/readyz` waits for the database before it answers 503: a scrape or a load
/// balancer's probe must get an answer while a pool waits out its own (longer) timeout.
const READY_PATIENCE: Duration = Duration::from_secs(3);

/// A running endpoint; dropping it stops the server and the refresher.
#[derive(Debug)]
pub struct Endpoint {
    /// The address it listens on (the port the system chose, when asked for port 0).
    pub addr: SocketAddr,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Listens on `addr` and serves the endpoint, refreshing the ledger gauges every `refresh`.
pub async fn serve<S: Store>(ledger: Ledger<S>, addr: SocketAddr, refresh: Duration) -> Result<Endpoint, Error> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::io(format!("cannot listen for metrics on {addr}"), e))?;
    let addr = listener.local_addr().map_err(|e| Error::io("cannot read the metrics address", e))?;
    let app = Router::new()
        .route("/metrics", get(scrape::<S>))
        .route("/healthz", get(alive))
        .route("/readyz", get(ready::<S>))
        .with_state(ledger.clone());
    let server = tokio::spawn(async move {
        // The same caps and header timeout as `serve`: a scraper port left open to a network must
        // not be held by clients that never finish their headers.
        let limits = crate::connections::ConnectionLimits::default();
        if let Err(error) = crate::connections::serve(listener, app, limits, std::future::pending()).await {
            tracing::error!(%error, "the metrics endpoint stopped");
        }
    });
    let refresher = tokio::spawn(async move {
        loop {
            metrics::set_ready(readiness(&ledger).await.is_ok());
            match ledger.stats().await {
                Ok(stats) => metrics::set_ledger_gauges(&gauges(&stats)),
                Err(error) => tracing::warn!(%error, "cannot read the ledger figures for the metrics"),
            }
            match ledger.queue_waits().await {
                Ok(waits) => metrics::set_queue_waits(
                    &waits
                        .into_iter()
                        .map(|wait| (wait.destination.unwrap_or_default(), wait.seconds))
                        .collect::<Vec<_>>(),
                ),
                Err(error) => tracing::warn!(%error, "cannot read the queues' latency for the metrics"),
            }
            tokio::time::sleep(refresh).await;
        }
    });
    Ok(Endpoint { addr, tasks: vec![server, refresher] })
}

/// What the gauges show of the ledger's figures.
fn gauges(stats: &LedgerStats) -> metrics::LedgerGauges {
    metrics::LedgerGauges {
        actions: stats.states.0.clone(),
        stale_claims: stats.stale_claims,
        oldest_age_seconds: vec![
            (DomainState::Pending, stats.oldest_pending_seconds),
            (DomainState::Unknown, stats.oldest_unknown_seconds),
            (DomainState::Held, stats.oldest_held_seconds),
            (DomainState::Conflict, stats.oldest_conflict_seconds),
        ],
        read_at_ms: stats.at.timestamp_millis(),
    }
}

/// `/healthz`: the process answers; it asks nothing of the database, so that a probe restarts
/// only a process that is stuck, never one waiting for its database.
pub(crate) async fn alive() -> &'static str {
    "alive\n"
}

/// `/metrics` in the format the `Accept` header asks for, with the connection pool as it is now;
/// `Vary` tells a cache between the two formats that the answer depends on it.
async fn scrape<S: Store>(State(ledger): State<Ledger<S>>, headers: HeaderMap) -> impl IntoResponse {
    let pool = ledger.store().connection_figures();
    metrics::set_connections(pool.open, pool.idle, pool.max);
    let accept = headers.get(header::ACCEPT).and_then(|value| value.to_str().ok());
    let exposition = metrics::Exposition::negotiate(accept);
    ([(header::CONTENT_TYPE, exposition.content_type()), (header::VARY, "accept")], exposition.encode())
}

/// The ledger's readiness, waiting at most [`READY_PATIENCE`].
async fn readiness<S: Store>(ledger: &Ledger<S>) -> Result<(), NotReady> {
    tokio::time::timeout(READY_PATIENCE, ledger.readiness())
        .await
        .unwrap_or(Err(NotReady::TimedOut { seconds: READY_PATIENCE.as_secs() }))
}

/// 200 when the database answers and the schema is current; 503 with the reason otherwise.
async fn ready<S: Store>(State(ledger): State<Ledger<S>>) -> impl IntoResponse {
    ready_answer(&ledger).await
}

/// `/readyz`'s answer, the same on the worker's endpoint and on `serve`: 200 `ready`, or 503 with
/// why, within [`READY_PATIENCE`].
pub(crate) async fn ready_answer<S: Store>(ledger: &Ledger<S>) -> (StatusCode, String) {
    match readiness(ledger).await {
        Ok(()) => (StatusCode::OK, "ready\n".to_owned()),
        Err(reason) => {
            tracing::warn!(%reason, "not ready");
            (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {reason}\n"))
        }
    }
}
