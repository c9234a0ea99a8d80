//! `actionledger serve`: the HTTP intake API, a front end over the ledger like the command line.
//! Submissions (one, a batch, or a webhook mapped by its intake), the same documents as `show` and
//! `list`, the counts, and a person's commands, behind bearer tokens with roles.
//!
//! One file per concern: `routes` (what each route asks the ledger), `auth` (tokens, roles and
//! the rate limit), `intake` (webhook mapping), `signature` (the senders' signature schemes),
//! `replay` (deliveries already accepted), `register` (automations that act themselves: begin,
//! heartbeat, finish, claims), `keeper` (what their expired claims and uncertain outcomes
//! become when nobody asks again), `problem` (error documents), `observe` (each
//! request's log line, refusal warnings and HTTP metrics), `contract` (the OpenAPI document,
//! enforced on every JSON body). Its connections are held by [`crate::connections`], as the
//! metrics endpoint's are.

pub mod auth;
pub mod contract;
pub mod intake;
pub mod keeper;
pub mod observe;
pub mod problem;
pub mod register;
pub mod replay;
pub mod routes;
pub mod signature;

pub use crate::connections::ConnectionLimits;
use crate::domain::payload::MAX_PAYLOAD_BYTES;
use crate::ledger::Ledger;
use crate::store::Store;
use auth::{RateLimiter, Tokens};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use intake::Intake;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Why the server cannot start: the user's input (a usage error).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Tokens(#[from] auth::TokensError),
    #[error(transparent)]
    Intake(#[from] intake::IntakeError),
    #[error(
        "a token is executor:{0}, but the configuration declares no [executors.{0}]: declare what its destination \
         protects against (idempotency, fencing, max_attempts), or correct the token's line"
    )]
    UnknownExecutor(String),
}

impl From<ServeError> for crate::Error {
    fn from(error: ServeError) -> Self {
        crate::error::FrontendError::new(crate::error::Kind::Usage, error).into()
    }
}

/// Room for a submission's other fields and JSON escaping around the largest payload.
pub const ENVELOPE_BYTES: usize = 64 * 1024;

/// How the server runs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The largest body of one submission, command or webhook (413 beyond).
    pub body_limit: usize,
    /// The largest body of a batch (413 beyond).
    pub batch_body_limit: usize,
    /// Requests a second per token (or per signed intake) on average; zero for no limit.
    pub rate: f64,
    /// Requests one token may make at once before the rate applies.
    pub burst: u32,
    /// How long one request may take (503 beyond).
    pub timeout: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            body_limit: MAX_PAYLOAD_BYTES + ENVELOPE_BYTES,
            batch_body_limit: 32 * 1024 * 1024,
            rate: 100.0,
            burst: 200,
            timeout: Duration::from_secs(30),
        }
    }
}

/// What every request shares: the ledger, the tokens, the intakes, the rate limit.
#[derive(Debug)]
pub struct App<S> {
    /// Submissions and reads.
    ledger: Ledger<S>,
    /// People's commands: the same ledger, through a connection that acts as the reviewer's role
    /// where the database login holds both duties (see `PostgresStore::open_serving`).
    commands: Ledger<S>,
    tokens: Tokens,
    intakes: BTreeMap<String, Intake>,
    limiter: RateLimiter,
    options: ServeOptions,
    /// The destinations automations perform through the register, as configured: what `:begin`
    /// tells them to send.
    executors: BTreeMap<String, crate::config::ExecutorConfig>,
    /// The destinations as configured: the executors' lookups, asked before an action a
    /// caller may already have performed is handed out again (rule 5).
    destinations: crate::destination::Destinations,
}

impl<S: Store> App<S> {
    pub fn new(ledger: Ledger<S>, tokens: Tokens, intakes: Vec<Intake>, options: ServeOptions) -> Self {
        Self {
            commands: ledger.clone(),
            ledger,
            tokens,
            intakes: intakes.into_iter().map(|i| (i.name.clone(), i)).collect(),
            limiter: RateLimiter::new(options.rate, options.burst),
            options,
            executors: BTreeMap::new(),
            destinations: crate::destination::Destinations::default(),
        }
    }

    /// The executors' configuration, for what `:begin` and `/v1/claims` tell automations to send
    /// (the ledger's catalogue decides with their capabilities).
    #[must_use]
    pub fn with_executors(mut self, executors: BTreeMap<String, crate::config::ExecutorConfig>) -> Self {
        self.executors = executors;
        self
    }

    /// The destinations as configured, whose executors' lookups the register asks.
    #[must_use]
    pub fn with_destinations(mut self, destinations: crate::destination::Destinations) -> Self {
        self.destinations = destinations;
        self
    }

    /// People's commands go through `commands` (the same ledger, opened to act as the
    /// reviewer's role), submissions and reads through the ledger given to [`App::new`].
    #[must_use]
    pub fn with_commands_through(mut self, commands: Ledger<S>) -> Self {
        self.commands = commands;
        self
    }

    /// The routes, with the request timeout around each, and around that the request's log line
    /// and metrics (so that a request cut off by the timeout is logged with its 503).
    pub fn router(self) -> axum::Router {
        let timeout = self.options.timeout;
        routes::router(Arc::new(self))
            .layer(axum::middleware::from_fn_with_state(timeout, within))
            .layer(axum::middleware::from_fn(observe::observe))
    }
}

/// Answers 503 when a request takes longer than the timeout. The ledger's transactions are
/// all-or-nothing, so a request cut off here leaves nothing half written.
async fn within(State(limit): State<Duration>, request: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => axum::response::IntoResponse::into_response(problem::Problem::timed_out(limit)),
    }
}

/// Serves `router` on `listener` within the default [`ConnectionLimits`] until `shutdown`
/// completes; requests in flight then finish before this returns.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    crate::connections::serve(listener, router, ConnectionLimits::default(), shutdown).await
}

/// Completes on ctrl-c or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}
