//! A simulated CRM over HTTP, for demos and tests, that counts its real effects.
//!
//! It creates records, updates them (`PATCH /{collection}/{id}`), honours idempotency keys for a
//! retention window (refusing a reused key with a different body, 422, as real destinations do),
//! enforces unique external references, serves lookups, can refuse obsolete ownership versions, and injects faults.
//! Its routes are axum's, served by an accept loop of its own: persistent connections, counted so
//! that connection reuse can be proved, and faults that act on the socket (closing it before the
//! write, or after the commit instead of answering), which no handler can do by answering. A
//! handler asks its connection's task to drop the connection, and the client sees it close with
//! nothing written.
//!
//! Creates take JSON or form bodies (`a[b]=1`, `items[0][sku]=x`, read as nested objects and
//! lists). `?respond=` on a create shapes the answer as other APIs do: `location` (201 with a
//! `Location` and no body), `no-content` (204), `redirect` (303 to the record, after writing it),
//! `big` (201 with `Location` and a body of about 256 KiB).
//!
//! Every record has a version (`"version": 1` in the record, counted up by each change) and every
//! answer naming one record carries it as an `ETag` (`"1"`): creates, updates and
//! `GET /{collection}/{id}`. An update with an `If-Match` that is not the record's ETag (or `*`)
//! is answered 412 with the record as it is, and writes nothing. [`SimCrm::edit_record`] changes a
//! record as someone at the CRM would, moving its version.

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Extension, FromRequest, Path, Request, State as With};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// Largest request body accepted.
const MAX_BODY_BYTES: usize = 1024 * 1024;

/// One injected fault, applied to one create request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// No fault.
    Ok,
    /// Wait this many milliseconds, then handle the request normally.
    Delay(u64),
    /// 503 before anything is written.
    Unavailable,
    /// 429 with `Retry-After` in seconds, before anything is written.
    TooManyRequests(u64),
    /// Close the connection before writing anything.
    CloseBeforeWrite,
    /// Write the record, then close the connection without answering.
    DropAfterCommit,
    /// Write the record, then answer 500.
    ErrorAfterWrite,
    /// Answer 500 without writing anything, keeping that answer for the request's idempotency key
    /// as some destinations do once a request began executing: a repeat of the key gets the same
    /// 500, and the key with another body a 422.
    ErrorBeforeWrite,
    /// Answer 400 without writing, with the request's headers in the error body, as careless
    /// APIs do.
    EchoHeaders,
}

/// A fault or a fault rate the simulated CRM cannot take.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FaultError {
    #[error("{text:?}: {arg:?} is not a number")]
    NotANumber { text: String, arg: String },
    #[error(
        "unknown fault {0:?}; use ok, delay[:MS|:2s], 503, 429[:SECONDS], close-before-write, drop-after-commit, \
         500-after-write, 500-before-write or echo-headers"
    )]
    Unknown(String),
    #[error("{0:?} is not FAULT=PROBABILITY")]
    NotARate(String),
    #[error("{0:?} is not a probability")]
    NotAProbability(String),
    #[error("{0} is not a probability between 0 and 1")]
    OutOfRange(f64),
}

impl std::str::FromStr for Fault {
    type Err = FaultError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (name, arg) = text.trim().split_once(':').map_or((text.trim(), None), |(n, a)| (n, Some(a)));
        let number = |default: u64| -> Result<u64, FaultError> {
            arg.map_or(Ok(default), |a| {
                crate::config::duration_text::parse(a)
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                    .or_else(|_| {
                        a.parse::<u64>()
                            .map_err(|_| FaultError::NotANumber { text: text.to_owned(), arg: a.to_owned() })
                    })
            })
        };
        Ok(match name {
            "ok" => Self::Ok,
            "delay" => Self::Delay(number(1000)?),
            "503" | "unavailable" => Self::Unavailable,
            "429" | "too-many-requests" => Self::TooManyRequests(number(1)?),
            "close-before-write" => Self::CloseBeforeWrite,
            "drop-after-commit" => Self::DropAfterCommit,
            "500-after-write" | "error-after-write" => Self::ErrorAfterWrite,
            "500-before-write" | "error-before-write" => Self::ErrorBeforeWrite,
            "echo-headers" => Self::EchoHeaders,
            _ => return Err(FaultError::Unknown(text.to_owned())),
        })
    }
}

/// Which faults to inject: a scripted sequence first, then per-request probabilities.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FaultPlan {
    #[serde(default)]
    pub script: VecDeque<Fault>,
    #[serde(default)]
    pub rates: Vec<(Fault, f64)>,
}

impl FaultPlan {
    fn next(&mut self) -> Fault {
        if let Some(fault) = self.script.pop_front() {
            return fault;
        }
        let mut roll = fastrand::f64();
        for (fault, rate) in &self.rates {
            if roll < *rate {
                return fault.clone();
            }
            roll -= rate;
        }
        Fault::Ok
    }

    /// Parses `fault=probability` pairs, e.g. `drop-after-commit=0.3`.
    pub fn parse_rate(text: &str) -> Result<(Fault, f64), FaultError> {
        let (fault, rate) = text.rsplit_once('=').ok_or_else(|| FaultError::NotARate(text.to_owned()))?;
        let rate: f64 = rate.parse().map_err(|_| FaultError::NotAProbability(rate.to_owned()))?;
        if !(0.0..=1.0).contains(&rate) {
            return Err(FaultError::OutOfRange(rate));
        }
        Ok((fault.parse()?, rate))
    }
}

/// How the simulated CRM behaves.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long an idempotency key is remembered; `None` ignores idempotency keys.
    pub retention: Option<Duration>,
    /// Refuse a second record with the same external reference (409).
    pub unique_refs: bool,
    /// Refuse writes carrying an ownership version older than one already seen (412).
    pub reject_obsolete: bool,
    /// Keep state in this file across restarts.
    pub state_file: Option<PathBuf>,
    pub faults: FaultPlan,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            retention: Some(Duration::from_hours(24)),
            unique_refs: true,
            reject_obsolete: true,
            state_file: None,
            faults: FaultPlan::default(),
        }
    }
}

/// What the simulated CRM actually did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    pub requests: u64,
    /// Records created.
    pub records: u64,
    /// Records changed by an update request.
    #[serde(default)]
    pub updates: u64,
    /// Requests refused because their idempotency key was used before with a different body.
    #[serde(default)]
    pub reused_keys_refused: u64,
    pub max_records_per_external_ref: u64,
    /// Creates refused because the external reference existed.
    pub duplicates_refused: u64,
    /// Creates answered from the idempotency store without a second write.
    pub idempotent_replays: u64,
    /// Creates refused for an obsolete ownership version.
    pub stale_writes_refused: u64,
    /// Updates refused (412) because their `If-Match` was not the record's ETag: nothing written.
    #[serde(default)]
    pub preconditions_failed: u64,
    /// Records changed by someone at the CRM rather than by a request ([`SimCrm::edit_record`]).
    #[serde(default)]
    pub edits_by_others: u64,
    pub lookups: u64,
    pub faults_injected: BTreeMap<String, u64>,
    /// TCP connections accepted: far fewer than `requests` when clients reuse connections.
    #[serde(default)]
    pub connections: u64,
    /// Connections open now. A connection closes only once every request read from it was
    /// handled, so none open after a client died means that all it had sent has landed.
    #[serde(default)]
    pub open_connections: u64,
    /// The most requests (creates, updates, lookups) received in any one second of the clock.
    #[serde(default)]
    pub busiest_second: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Remembered {
    status: u16,
    body: String,
    fingerprint: String,
    at_ms: i64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    records: Vec<Value>,
    by_ref: HashMap<String, Vec<usize>>,
    idempotency: HashMap<String, Remembered>,
    versions: HashMap<String, i64>,
    stats: Stats,
    /// The second being counted for `busiest_second`, and its requests so far.
    #[serde(skip)]
    this_second: (i64, u64),
}

/// A running simulated CRM.
#[derive(Debug, Clone)]
pub struct SimCrm {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    options: Options,
    state: Mutex<State>,
    faults: Mutex<FaultPlan>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One connection counted open from its accept until its task ends, however it ends.
struct OpenConnection(Arc<Shared>);

impl OpenConnection {
    fn count(shared: Arc<Shared>) -> Self {
        {
            let stats = &mut shared.state().stats;
            stats.connections += 1;
            stats.open_connections += 1;
        }
        Self(shared)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        let stats = &mut self.0.state().stats;
        stats.open_connections = stats.open_connections.saturating_sub(1);
    }
}

/// An answer: its status, the headers beside its JSON content type, its body.
struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
}

/// What a create does: answer, or (a socket fault) have its connection dropped unanswered.
enum Created {
    Answer(Reply),
    DropConnection,
}

fn reply(status: u16, body: &Value) -> Reply {
    Reply { status, headers: Vec::new(), body: body.to_string() }
}

/// Why the simulated CRM could not start.
#[derive(Debug, thiserror::Error)]
pub enum SimCrmError {
    /// The listener has no local address.
    #[error("{0}")]
    Address(#[source] std::io::Error),
    /// The state file named could not be read.
    #[error("cannot read {}: {source}", path.display())]
    ReadState { path: PathBuf, source: std::io::Error },
    /// The state file named holds something else.
    #[error("{} is not a sim-crm state file: {source}", path.display())]
    NotAStateFile { path: PathBuf, source: serde_json::Error },
}

/// A state file that cannot be used is the user's input; a machine that fails is not.
impl From<SimCrmError> for crate::Error {
    fn from(error: SimCrmError) -> Self {
        let kind = if error.is_usage() { crate::error::Kind::Usage } else { crate::error::Kind::Error };
        crate::error::FrontendError::new(kind, error).into()
    }
}

impl SimCrmError {
    /// Whether the user named a state file that cannot be used, rather than the machine failing.
    pub fn is_usage(&self) -> bool {
        matches!(self, Self::ReadState { .. } | Self::NotAStateFile { .. })
    }
}

impl SimCrm {
    /// Starts serving on `listener` in the background.
    pub fn start(listener: TcpListener, options: Options) -> Result<Self, SimCrmError> {
        let addr = listener.local_addr().map_err(SimCrmError::Address)?;
        let mut state: State = match &options.state_file {
            Some(path) if path.exists() => {
                let text = std::fs::read_to_string(path)
                    .map_err(|source| SimCrmError::ReadState { path: path.clone(), source })?;
                serde_json::from_str(&text)
                    .map_err(|source| SimCrmError::NotAStateFile { path: path.clone(), source })?
            }
            _ => State::default(),
        };
        // The connections a saved state counted open closed with the process that saved it.
        state.stats.open_connections = 0;
        let shared = Arc::new(Shared { faults: Mutex::new(options.faults.clone()), options, state: Mutex::new(state) });
        tokio::spawn(accept_connections(listener, router(Arc::clone(&shared)), Arc::clone(&shared)));
        Ok(Self { addr, shared })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn stats(&self) -> Stats {
        self.shared.state().stats.clone()
    }

    /// Replaces the fault plan.
    pub fn set_faults(&self, plan: FaultPlan) {
        *self.shared.faults.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = plan;
    }

    /// Records held for one external reference.
    pub fn records_for(&self, external_ref: &str) -> Vec<Value> {
        let state = self.shared.state();
        state
            .by_ref
            .get(external_ref)
            .map(|ids| ids.iter().map(|&i| state.records[i].clone()).collect())
            .unwrap_or_default()
    }

    /// The record `id` of `collection`, as it is now.
    pub fn record(&self, collection: &str, id: &str) -> Option<Value> {
        let state = self.shared.state();
        state.records.iter().find(|r| r["id"] == id && r["collection"] == collection).cloned()
    }

    /// Someone at the CRM changes record `id` of `collection` (as a person would in its own
    /// screens): the fields of `fields` are set and the version moves on, so an ETag read before
    /// no longer matches. Returns the record as changed, or `None` when there is no such record.
    pub fn edit_record(&self, collection: &str, id: &str, fields: &Value) -> Option<Value> {
        let changed = {
            let state = &mut *self.shared.state();
            let record = state.records.iter_mut().find(|r| r["id"] == id && r["collection"] == collection)?;
            let changed = apply_change(record, fields.as_object()?.clone());
            state.stats.edits_by_others += 1;
            changed
        };
        persist(&self.shared);
        Some(changed)
    }

    /// The `actionledger.toml` block that points a worker at this CRM.
    pub fn destination_config(&self, name: &str) -> String {
        destination_config(name, self.addr, &self.shared.options)
    }
}

/// The `actionledger.toml` block for a simulated CRM at `addr`.
pub fn destination_config(name: &str, addr: SocketAddr, options: &Options) -> String {
    let mut block = format!(
        "[destinations.{name}]\n\
         base_url = \"http://{addr}\"\n\
         external_ref = \"{{{{key}}}}\"\n\
         timeout = \"5s\"\n\
         create = {{ url = \"{{{{base_url}}}}/tasks\", body = {{ external_ref = \"{{{{external_ref}}}}\", data = \"{{{{payload}}}}\" }} }}\n\
         update = {{ url = \"{{{{base_url}}}}/tasks/{{{{destination_id}}}}\", body = {{ data = \"{{{{payload}}}}\" }} }}\n\
         lookup = {{ url = \"{{{{base_url}}}}/tasks?external_ref={{{{external_ref}}}}\", records_pointer = \"/records\", compare = [\"/data\"] }}\n"
    );
    if let Some(retention) = options.retention {
        let _ = writeln!(
            block,
            "idempotency = {{ header = \"Idempotency-Key\", retention = \"{}\" }}",
            crate::config::duration_text::format(retention)
        );
    }
    if options.reject_obsolete {
        block.push_str("fencing = { header = \"X-Ownership-Version\" }\n");
    }
    block.push_str(
        "# rate_limit = { per_second = 10, burst = 5 }    # this worker's pace here, all tasks and lookups\n\
         # max_response_bytes = 65536                      # read at most this much of an answer\n\
         # secret_headers = [\"X-Api-Key\"]                  # masked in evidence, like Authorization\n\
         # Updates that never overwrite a change made at the CRM (its answers name each record's version):\n\
         # update = { url = \"{{base_url}}/tasks/{{destination_id}}\", body = { data = \"{{payload}}\" }, \
         conditional = \"if-match\", version_pointer = \"/version\" }\n\
         # A form body and the id from Location (this CRM answers so with ?respond=location):\n\
         # create = { url = \"{{base_url}}/tasks?respond=location\", format = \"form\", id_header = \"Location\", \
         body = { external_ref = \"{{external_ref}}\", order = \"{{payload.order}}\" } }\n",
    );
    block
}

/// How long a persistent connection may wait for its next request's headers.
const IDLE_CONNECTION: Duration = Duration::from_mins(1);

/// Accepts connections for as long as the process runs, each served on a task of its own.
async fn accept_connections(listener: TcpListener, router: Router, shared: Arc<Shared>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of descriptors: waiting lets connections close before the next try.
                tracing::warn!(%error, "sim-crm cannot accept a connection; trying again in a second");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let open = OpenConnection::count(Arc::clone(&shared));
        tokio::spawn(serve_connection(stream, router.clone(), open));
    }
}

/// A handler's way to have its connection dropped unanswered, as the socket faults need.
#[derive(Clone)]
struct ConnectionDrop(Arc<Notify>);

impl ConnectionDrop {
    /// Has the connection dropped and never completes, so no answer is ever written for it.
    async fn unanswered(&self) -> Response {
        self.0.notify_one();
        std::future::pending().await
    }
}

/// Serves requests on one connection until the client closes it, asks to (`Connection: close`),
/// stays idle, or a fault drops it.
async fn serve_connection(stream: TcpStream, router: Router, open: OpenConnection) {
    let dropped = Arc::new(Notify::new());
    let handle = ConnectionDrop(Arc::clone(&dropped));
    let service = tower::ServiceExt::map_request(router, move |request: Request<hyper::body::Incoming>| {
        let mut request = request.map(axum::body::Body::new);
        request.extensions_mut().insert(handle.clone());
        request
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    // Half-closed connections stay up: a client that sent a create and shut its side (or went
    // away) still gets it handled, and the connection counts open until it was.
    builder.timer(TokioTimer::new()).header_read_timeout(IDLE_CONNECTION).half_close(true);
    let connection = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
    tokio::select! {
        result = connection => {
            if let Err(error) = result {
                tracing::debug!(%error, "a sim-crm connection ended with an error");
            }
        }
        // Dropping the connection closes the socket with the handler's request unanswered.
        () = dropped.notified() => {}
    }
    drop(open);
}

/// The routes, each request counted (and kept alive unless it asked otherwise) on its way in.
fn router(shared: Arc<Shared>) -> Router {
    let no_such_endpoint = || async { respond(reply(404, &json!({"error": "no such endpoint"}))) };
    Router::new()
        .route("/stats", get(stats))
        .route("/_faults", post(replace_faults))
        .route("/{collection}", get(lookup_route).post(create_route))
        .route("/{collection}/{id}", get(read_record_route).patch(update_route).put(update_route))
        .fallback(no_such_endpoint)
        .method_not_allowed_fallback(no_such_endpoint)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&shared), count_request))
        .with_state(shared)
}

/// Counts the request (towards the busiest second too, unless it asks for the stats or sets
/// faults), and says `Connection: keep-alive` on the answer when the client did not ask to close.
async fn count_request(With(shared): With<Arc<Shared>>, request: Request, next: Next) -> Response {
    {
        let state = &mut *shared.state();
        state.stats.requests += 1;
        if !matches!(request.uri().path().trim_matches('/'), "stats" | "_faults") {
            count_in_second(state);
        }
    }
    let closing =
        request.headers().get(header::CONNECTION).is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"close"));
    let mut response = next.run(request).await;
    if !closing {
        response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
    }
    response
}

/// A reply as its HTTP answer, always JSON.
fn respond(reply: Reply) -> Response {
    let Reply { status, headers, body } = reply;
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
    for (name, value) in headers {
        // A value from the request (a collection name in a Location) may not be a header's.
        if let Ok(value) = HeaderValue::try_from(value) {
            response.headers_mut().append(HeaderName::from_static(name), value);
        }
    }
    response
}

/// What a handler reads of one request: its headers, its query and its whole body.
struct Received {
    headers: HeaderMap,
    query: String,
    body: Bytes,
}

impl<S: Send + Sync> FromRequest<S> for Received {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let headers = request.headers().clone();
        let query = request.uri().query().unwrap_or_default().to_owned();
        let body = Bytes::from_request(request, state)
            .await
            .map_err(|refused| respond(reply(refused.status().as_u16(), &json!({"error": refused.body_text()}))))?;
        Ok(Self { headers, query, body })
    }
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    fn query_param(&self, name: &str) -> Option<String> {
        self.query.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            (k == name).then(|| percent_encoding::percent_decode_str(v).decode_utf8_lossy().into_owned())
        })
    }
}

/// Counts a request towards the busiest second.
fn count_in_second(state: &mut State) {
    let second = now_ms().div_euclid(1000);
    if state.this_second.0 == second {
        state.this_second.1 += 1;
    } else {
        state.this_second = (second, 1);
    }
    state.stats.busiest_second = state.stats.busiest_second.max(state.this_second.1);
}

async fn stats(With(shared): With<Arc<Shared>>) -> Response {
    respond(reply(200, &json!(shared.state().stats)))
}

async fn replace_faults(With(shared): With<Arc<Shared>>, request: Received) -> Response {
    respond(match serde_json::from_slice::<FaultPlan>(&request.body) {
        Ok(plan) => {
            *shared.faults.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = plan;
            reply(200, &json!({"ok": true}))
        }
        Err(e) => reply(400, &json!({"error": format!("not a fault plan: {e}")})),
    })
}

async fn lookup_route(With(shared): With<Arc<Shared>>, Path(collection): Path<String>, request: Received) -> Response {
    respond(lookup(&shared, &collection, &request))
}

async fn read_record_route(
    With(shared): With<Arc<Shared>>,
    Path((collection, id)): Path<(String, String)>,
) -> Response {
    respond(read_record(&shared, &collection, &id))
}

async fn create_route(
    With(shared): With<Arc<Shared>>,
    Path(collection): Path<String>,
    Extension(connection): Extension<ConnectionDrop>,
    request: Received,
) -> Response {
    match create(&shared, &collection, &request).await {
        Created::Answer(answer) => respond(answer),
        Created::DropConnection => connection.unanswered().await,
    }
}

async fn update_route(
    With(shared): With<Arc<Shared>>,
    Path((collection, id)): Path<(String, String)>,
    request: Received,
) -> Response {
    let answer = update(&shared, &collection, &id, &request);
    persist(&shared);
    respond(answer)
}

fn lookup(shared: &Shared, collection: &str, request: &Received) -> Reply {
    let Some(external_ref) = request.query_param("external_ref") else {
        return reply(400, &json!({"error": "give ?external_ref="}));
    };
    let mut state = shared.state();
    state.stats.lookups += 1;
    let records: Vec<Value> = state
        .by_ref
        .get(&external_ref)
        .map(|ids| ids.iter().map(|&i| state.records[i].clone()).filter(|r| r["collection"] == collection).collect())
        .unwrap_or_default();
    reply(200, &json!({ "records": records }))
}

/// `GET /{collection}/{id}`: one record, with its ETag.
fn read_record(shared: &Shared, collection: &str, id: &str) -> Reply {
    let state = shared.state();
    match state.records.iter().find(|r| r["id"] == id && r["collection"] == collection) {
        Some(record) => with_etag(200, record),
        None => reply(404, &json!({"error": "no such record", "id": id})),
    }
}

/// A record's entity tag: its version, quoted as HTTP writes entity tags.
fn etag_of(record: &Value) -> String {
    format!("\"{}\"", record["version"].as_i64().unwrap_or(0))
}

/// An answer naming one record: the record as the body, its version as the `ETag`.
fn with_etag(status: u16, record: &Value) -> Reply {
    Reply { status, headers: vec![("etag", etag_of(record))], body: record.to_string() }
}

/// Sets `fields` on `record` (never its id, collection or version) and moves its version on.
fn apply_change(record: &mut Value, fields: serde_json::Map<String, Value>) -> Value {
    let Value::Object(map) = record else { return record.clone() };
    for (name, value) in
        fields.into_iter().filter(|(name, _)| !matches!(name.as_str(), "id" | "collection" | "version"))
    {
        map.insert(name, value);
    }
    let version = map.get("version").and_then(Value::as_i64).unwrap_or(0) + 1;
    map.insert("version".to_owned(), Value::from(version));
    map.insert("updated_at_ms".to_owned(), Value::from(now_ms()));
    record.clone()
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

async fn create(shared: &Shared, collection: &str, request: &Received) -> Created {
    let is_form = request.header("content-type").is_some_and(|t| t.starts_with("application/x-www-form-urlencoded"));
    let body = if is_form {
        form_to_json(&request.body)
    } else {
        let Ok(body) = serde_json::from_slice::<Value>(&request.body) else {
            return Created::Answer(reply(400, &json!({"error": "the body is not JSON"})));
        };
        body
    };
    let Some(external_ref) = body.get("external_ref").and_then(Value::as_str).map(str::to_owned) else {
        return Created::Answer(reply(422, &json!({"error": "external_ref is required"})));
    };
    let fault = shared.faults.lock().unwrap_or_else(std::sync::PoisonError::into_inner).next();
    if fault != Fault::Ok {
        let name = serde_json::to_value(&fault).ok().and_then(|v| match v {
            Value::String(s) => Some(s),
            Value::Object(m) => m.keys().next().cloned(),
            _ => None,
        });
        *shared.state().stats.faults_injected.entry(name.unwrap_or_default()).or_default() += 1;
    }
    match fault {
        Fault::Delay(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
        Fault::Unavailable => return Created::Answer(reply(503, &json!({"error": "temporarily unavailable"}))),
        Fault::TooManyRequests(seconds) => {
            return Created::Answer(Reply {
                status: 429,
                headers: vec![("retry-after", seconds.to_string())],
                body: json!({"error": "slow down"}).to_string(),
            });
        }
        Fault::CloseBeforeWrite => return Created::DropConnection,
        Fault::EchoHeaders => {
            let headers: serde_json::Map<String, Value> = request
                .headers
                .iter()
                .map(|(name, value)| (name.to_string(), String::from_utf8_lossy(value.as_bytes()).into()))
                .collect();
            return Created::Answer(reply(400, &json!({"error": "bad request", "request_headers": headers})));
        }
        Fault::ErrorBeforeWrite => {
            let failure = json!({"error": "internal error before the write"});
            let answer = {
                let state = &mut *shared.state();
                replay_or_refuse(&shared.options, state, request, &body).unwrap_or_else(|| {
                    remember(&shared.options, state, request, &body, 500, &failure.to_string());
                    reply(500, &failure)
                })
            };
            persist(shared);
            return Created::Answer(answer);
        }
        Fault::Ok | Fault::DropAfterCommit | Fault::ErrorAfterWrite => {}
    }
    let answer = write_record(shared, collection, request, &body, &external_ref);
    persist(shared);
    match fault {
        Fault::DropAfterCommit => Created::DropConnection,
        Fault::ErrorAfterWrite => Created::Answer(reply(500, &json!({"error": "internal error after the write"}))),
        _ => Created::Answer(shape(answer, collection, request.query_param("respond").as_deref())),
    }
}

/// A created record's answer in the shape `?respond=` asks for, as other APIs answer.
fn shape(answer: Reply, collection: &str, respond: Option<&str>) -> Reply {
    let Reply { status: 201, mut headers, body } = answer else { return answer };
    let id = serde_json::from_str::<Value>(&body).ok().and_then(|r| r["id"].as_str().map(str::to_owned));
    let (Some(respond), Some(id)) = (respond, id) else { return Reply { status: 201, headers, body } };
    let location = format!("/{collection}/{id}");
    match respond {
        "location" => {
            headers.push(("location", location));
            Reply { status: 201, headers, body: String::new() }
        }
        "no-content" => Reply { status: 204, headers, body: String::new() },
        "redirect" => {
            headers.push(("location", location));
            Reply { status: 303, headers, body: json!({"see": "the record"}).to_string() }
        }
        "big" => {
            headers.push(("location", location));
            let padding = "x".repeat(256 * 1024);
            let body = json!({"id": id, "padding": padding}).to_string();
            Reply { status: 201, headers, body }
        }
        _ => Reply { status: 201, headers, body },
    }
}

/// A form body (`a[b]=1&items[0][sku]=x`) as the nested JSON it stands for: bracketed names
/// are objects, and objects whose keys are 0, 1, 2... are lists. Values stay text.
fn form_to_json(body: &[u8]) -> Value {
    fn insert(target: &mut Value, path: &[String], value: String) {
        let Value::Object(map) = target else { return };
        match path {
            [] => {}
            [last] => {
                map.insert(last.clone(), Value::String(value));
            }
            [first, rest @ ..] => {
                let child = map.entry(first.clone()).or_insert_with(|| Value::Object(serde_json::Map::new()));
                insert(child, rest, value);
            }
        }
    }
    fn lists(value: Value) -> Value {
        match value {
            Value::Object(map) => {
                let is_list = !map.is_empty() && (0..map.len()).all(|i| map.contains_key(&i.to_string()));
                if is_list {
                    let mut map = map;
                    Value::Array((0..map.len()).filter_map(|i| map.remove(&i.to_string())).map(lists).collect())
                } else {
                    Value::Object(map.into_iter().map(|(k, v)| (k, lists(v))).collect())
                }
            }
            other => other,
        }
    }
    let mut root = Value::Object(serde_json::Map::new());
    for (name, value) in url::form_urlencoded::parse(body) {
        let mut path = Vec::new();
        let (head, mut rest) = name.split_once('[').map_or((name.as_ref(), ""), |(h, r)| (h, r));
        path.push(head.to_owned());
        while let Some((part, after)) = rest.split_once(']') {
            path.push(part.to_owned());
            rest = after.strip_prefix('[').unwrap_or(after);
        }
        insert(&mut root, &path, value.into_owned());
    }
    lists(root)
}

/// The write itself, all under one lock: idempotency, fencing, unique reference, insert.
fn write_record(shared: &Shared, collection: &str, request: &Received, body: &Value, external_ref: &str) -> Reply {
    let options = &shared.options;
    let state = &mut *shared.state();
    let now = now_ms();
    if let Some(replay) = replay_or_refuse(options, state, request, body) {
        return replay;
    }
    if options.reject_obsolete
        && let Some(version) = request.header("x-ownership-version").and_then(|v| v.trim().parse::<i64>().ok())
    {
        let newest = *state.versions.entry(external_ref.to_owned()).or_insert(version);
        if version < newest {
            state.stats.stale_writes_refused += 1;
            return reply(412, &json!({"error": "obsolete ownership version", "newest": newest}));
        }
        state.versions.insert(external_ref.to_owned(), version);
    }
    if options.unique_refs
        && let Some(&existing) = state.by_ref.get(external_ref).and_then(|ids| ids.first())
    {
        state.stats.duplicates_refused += 1;
        let id = state.records[existing]["id"].clone();
        return reply(409, &json!({"error": "external_ref exists", "id": id}));
    }
    let index = state.records.len();
    let mut record = body.as_object().cloned().unwrap_or_default();
    record.insert("id".to_owned(), Value::String(format!("R-{:06}", index + 1)));
    record.insert("collection".to_owned(), Value::String(collection.to_owned()));
    record.insert("created_at_ms".to_owned(), Value::from(now));
    record.insert("version".to_owned(), Value::from(1));
    let record = Value::Object(record);
    state.records.push(record.clone());
    let per_ref = state.by_ref.entry(external_ref.to_owned()).or_default();
    per_ref.push(index);
    let count = per_ref.len() as u64;
    state.stats.records += 1;
    state.stats.max_records_per_external_ref = state.stats.max_records_per_external_ref.max(count);
    let response = record.to_string();
    remember(options, state, request, body, 201, &response);
    with_etag(201, &record)
}

/// The answer kept for the request's idempotency key, if it is inside its retention: replayed
/// for the same body, refused (422) for another one.
fn replay_or_refuse(options: &Options, state: &mut State, request: &Received, body: &Value) -> Option<Reply> {
    let retention = options.retention?;
    let key = request.header("idempotency-key")?;
    let retention_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
    let seen = state.idempotency.get(key).filter(|s| now_ms() - s.at_ms < retention_ms).cloned()?;
    if seen.fingerprint != sha256_of(body) {
        state.stats.reused_keys_refused += 1;
        return Some(reply(
            422,
            &json!({"error": "idempotency key reused with a different body: a new body needs a new key", "key": key}),
        ));
    }
    state.stats.idempotent_replays += 1;
    Some(Reply { status: seen.status, headers: vec![("idempotent-replayed", "true".to_owned())], body: seen.body })
}

/// Keeps the answer to a request under its idempotency key, when it carries one.
fn remember(options: &Options, state: &mut State, request: &Received, body: &Value, status: u16, answer: &str) {
    if let (Some(_), Some(key)) = (options.retention, request.header("idempotency-key")) {
        let remembered = Remembered { status, body: answer.to_owned(), fingerprint: sha256_of(body), at_ms: now_ms() };
        state.idempotency.insert(key.to_owned(), remembered);
    }
}

fn sha256_of(body: &Value) -> String {
    crate::domain::payload::sha256_hex(body.to_string().as_bytes())
}

/// Changes the fields the body names in record `id`, once per idempotency key, and only where
/// an `If-Match` it carries is the record's ETag.
fn update(shared: &Shared, collection: &str, id: &str, request: &Received) -> Reply {
    let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(&request.body) else {
        return reply(400, &json!({"error": "the body is not a JSON object"}));
    };
    let body = Value::Object(fields.clone());
    let state = &mut *shared.state();
    if let Some(replay) = replay_or_refuse(&shared.options, state, request, &body) {
        return replay;
    }
    let Some(record) = state.records.iter_mut().find(|r| r["id"] == id && r["collection"] == collection) else {
        return reply(404, &json!({"error": "no such record", "id": id}));
    };
    if let Some(expected) = request.header("if-match").map(str::trim)
        && expected != "*"
        && expected != etag_of(record)
    {
        let current = record.clone();
        state.stats.preconditions_failed += 1;
        let answer =
            json!({"error": "precondition failed: the record changed", "if_match": expected, "record": current});
        return Reply { status: 412, headers: vec![("etag", etag_of(&current))], body: answer.to_string() };
    }
    let changed = apply_change(record, fields);
    let response = changed.to_string();
    state.stats.updates += 1;
    remember(&shared.options, state, request, &body, 200, &response);
    with_etag(200, &changed)
}

/// Saves the state file atomically (write a sibling, then rename), so a crash leaves the old or
/// the new state, never half of one.
fn persist(shared: &Shared) {
    let Some(path) = &shared.options.state_file else { return };
    let text = serde_json::to_string(&*shared.state()).unwrap_or_default();
    let temporary = path.with_extension("tmp");
    if std::fs::write(&temporary, text).is_ok() {
        let _ = std::fs::rename(&temporary, path);
    }
}
