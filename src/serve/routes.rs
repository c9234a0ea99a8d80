//! The HTTP API's routes: each asks the ledger exactly what the command line asks it, and answers
//! the same documents (`crate::document`) with a status for the outcome.

use super::App;
use super::auth::{Grant, Need};
use super::intake::{Screened, Unmapped, ignored_response};
use super::observe::{self, Refusal};
use super::problem::Problem;
use super::signature::Verified;
use crate::document;
use crate::domain::input::Label;
use crate::domain::{ActionKey, ManualCommand, RawSubmission, Reason, State, SubmitOutcome};
use crate::ledger::{LedgerError, ManualRequest, SubmitReport};
use crate::store::{ListFilter, Store};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State as With};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use std::sync::Arc;

/// Every route, as the OpenAPI document lists it (a test keeps the two equal).
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/v1/actions"),
    ("get", "/v1/actions"),
    ("post", "/v1/actions:batch"),
    ("get", "/v1/actions/{key}"),
    ("post", "/v1/actions/{key}/{command}"),
    ("post", "/v1/actions/{key}:begin"),
    ("post", "/v1/actions/{key}:heartbeat"),
    ("post", "/v1/actions/{key}:finish"),
    ("post", "/v1/claims"),
    ("get", "/v1/refused"),
    ("get", "/v1/stats"),
    ("post", "/v1/hooks/{name}"),
    ("get", "/v1/openapi.json"),
    ("get", "/healthz"),
    ("get", "/readyz"),
];

/// The OpenAPI document, written by hand: checked against [`ROUTES`], the request types and the
/// documents the routes answer by tests, and against every JSON body by the server itself.
pub use super::contract::OPENAPI;

/// Most submissions in one batch.
pub const MAX_BATCH: usize = 1000;
/// Most actions one list page returns.
const MAX_LIST_LIMIT: i64 = 1000;

pub(super) fn router<S: Store>(app: Arc<App<S>>) -> Router {
    let api = Router::new()
        .route("/v1/actions", post(submit::<S>).get(list::<S>))
        .route("/v1/actions:batch", post(submit_batch::<S>))
        .route("/v1/actions/{key}", any(on_action::<S>))
        .route("/v1/claims", post(super::register::claims::<S>))
        .route("/v1/actions/{key}/{command}", post(command::<S>))
        .route("/v1/refused", get(refused::<S>))
        .route("/v1/stats", get(stats::<S>))
        .route("/v1/hooks/{name}", post(hook::<S>))
        .route("/v1/openapi.json", get(openapi))
        .fallback(|| async { Problem::not_found("no such route; the routes are listed at /v1/openapi.json") })
        // Whatever the router answers on its own (a path it cannot read) is a problem document too.
        .layer(axum::middleware::from_fn(super::contract::problems_only));
    // Probes, without a token, as load balancers and orchestrators ask them: the same answers
    // (plain text) as the worker's operations endpoint.
    let probes = Router::new().route("/healthz", get(crate::health::alive)).route("/readyz", get(ready::<S>));
    api.merge(probes)
        .method_not_allowed_fallback(|method: axum::http::Method| async move {
            Problem::for_status(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("this route does not take {method}; its methods are in Allow and at /v1/openapi.json"),
            )
        })
        .with_state(app)
}

/// A submission as JSON: the fields `actionledger submit` takes. The payload is kept as the
/// sender wrote it, so that it is fingerprinted exactly as the command line would.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Envelope {
    key: Option<String>,
    payload: Option<Box<RawValue>>,
    event_id: Option<String>,
    source: Option<String>,
    #[serde(default, deserialize_with = "super::contract::whole_number")]
    source_version: Option<i64>,
    destination: Option<String>,
    after: Option<String>,
}

impl Envelope {
    /// The submission; a token's name stands for the source when the envelope names none.
    pub(super) fn into_raw(self, grant: &Grant) -> RawSubmission {
        RawSubmission {
            key: self.key,
            payload: self.payload.map(|p| p.get().as_bytes().to_vec()).unwrap_or_default(),
            event_id: self.event_id,
            source: self.source.or_else(|| Some(grant.name.clone())),
            source_version: self.source_version,
            destination: self.destination,
            after: self.after,
        }
    }
}

/// Checks the token and takes one request from its rate.
pub(super) fn admit<S: Store>(app: &App<S>, headers: &HeaderMap, need: Need) -> Result<Grant, Problem> {
    let grant = app.tokens.authorize(headers, need)?;
    app.limiter.admit(&grant.hash)?;
    Ok(grant)
}

/// Reads a body of at most `limit` bytes (413 beyond), after the caller was admitted.
/// How much of a body past its limit is still read and thrown away, and for how long, before the
/// 413 goes out. A server that answers and closes while the client is still sending leaves unread
/// bytes behind; its system then resets the connection, and the reset can reach the client before
/// the answer does, so the client sees a broken connection instead of the 413. A body larger than
/// this is answered at once: such a sender gets no such courtesy.
const DISCARD_BYTES: usize = 8 * 1024 * 1024;
const DISCARD_TIME: std::time::Duration = std::time::Duration::from_secs(2);

pub(super) async fn read_body(headers: &HeaderMap, mut body: Body, limit: usize) -> Result<Bytes, Problem> {
    super::contract::require_json(headers)?;
    let too_large = || {
        observe::refused(&Refusal::TooLarge { limit });
        Problem::too_large(format!("the body is larger than {limit} bytes"))
    };
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    if declared.is_some_and(|length| length > limit.max(DISCARD_BYTES)) {
        return Err(too_large());
    }
    let mut read = 0usize;
    if declared.is_none_or(|length| length <= limit) {
        let mut kept = Vec::with_capacity(declared.unwrap_or(0));
        loop {
            let Some(data) = next_data(&mut body).await? else { return Ok(Bytes::from(kept)) };
            read += data.len();
            if read > limit {
                break;
            }
            kept.extend_from_slice(&data);
        }
    }
    let discard = async {
        while read <= DISCARD_BYTES {
            match next_data(&mut body).await {
                Ok(Some(data)) => read += data.len(),
                _ => break,
            }
        }
    };
    let _ = tokio::time::timeout(DISCARD_TIME, discard).await;
    Err(too_large())
}

/// The next piece of a body's data (trailers skipped); `None` at its end.
async fn next_data(body: &mut Body) -> Result<Option<Bytes>, Problem> {
    use axum::body::HttpBody as _;
    loop {
        let Some(frame) = std::future::poll_fn(|cx| std::pin::Pin::new(&mut *body).poll_frame(cx)).await else {
            return Ok(None);
        };
        let frame = frame.map_err(|e| Problem::bad_request(format!("the body could not be read: {e}")))?;
        if let Ok(data) = frame.into_data() {
            return Ok(Some(data));
        }
    }
}

pub(super) fn json_response(status: StatusCode, value: &Value) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], value.to_string()).into_response()
}

/// The status and document of one submission's result, as the command line words it.
fn submitted(result: Result<SubmitReport, LedgerError>) -> (StatusCode, Value) {
    match result {
        Ok(report) if report.outcome == SubmitOutcome::Conflict => {
            let problem = Problem::new(
                StatusCode::CONFLICT,
                "conflict",
                "Recorded with a different payload",
                document::explanation(&report),
            )
            .with("outcome", report.outcome.as_str())
            .with("action", document::action_json(&report.action));
            (problem.status, problem.document())
        }
        Ok(report) => {
            let status = if report.outcome == SubmitOutcome::Created { StatusCode::CREATED } else { StatusCode::OK };
            (status, document::submitted(&report))
        }
        Err(error) => {
            let problem = Problem::from(error);
            (problem.status, problem.document())
        }
    }
}

fn submitted_response(result: Result<SubmitReport, LedgerError>) -> Response {
    let (status, document) = submitted(result);
    let mut response = json_response(status, &document);
    if status.is_client_error() || status.is_server_error() {
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, super::problem::PROBLEM_JSON.parse().expect("a media type"));
    }
    response
}

async fn submit<S: Store>(With(app): With<Arc<App<S>>>, headers: HeaderMap, body: Body) -> Result<Response, Problem> {
    let grant = admit(&app, &headers, Need::Submit)?;
    let bytes = read_body(&headers, body, app.options.body_limit).await?;
    let envelope: Envelope = read_json("Submission", &bytes, "a submission")?;
    let raw = envelope.into_raw(&grant);
    observe::note_action(raw.key.as_deref(), raw.event_id.as_deref());
    let result = app.ledger.submit(&raw).await;
    observe::note_outcome(outcome_word(&result));
    Ok(submitted_response(result))
}

/// A body as the document's schema `name` has it (400 naming where it departs), then as the
/// handler's type reads it.
pub(super) fn read_json<T: serde::de::DeserializeOwned>(name: &str, bytes: &[u8], what: &str) -> Result<T, Problem> {
    super::contract::check(name, bytes)?;
    serde_json::from_slice(bytes).map_err(|e| Problem::bad_request(format!("the body is not {what}: {e}")))
}

fn outcome_word(result: &Result<SubmitReport, LedgerError>) -> &'static str {
    match result {
        Ok(report) => report.outcome.as_str(),
        Err(LedgerError::SubmissionRefused(_)) => "refused",
        Err(_) => "error",
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Batch {
    actions: Vec<Box<RawValue>>,
}

async fn submit_batch<S: Store>(
    With(app): With<Arc<App<S>>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    let grant = admit(&app, &headers, Need::Submit)?;
    let bytes = read_body(&headers, body, app.options.batch_body_limit).await?;
    // Too many submissions is a 413 (split the batch), before what each says is read.
    if let Ok(batch) = serde_json::from_slice::<Batch>(&bytes)
        && batch.actions.len() > MAX_BATCH
    {
        observe::refused(&Refusal::TooMany { count: batch.actions.len(), limit: MAX_BATCH });
        return Err(Problem::too_large(format!(
            "the batch has {} submissions; at most {MAX_BATCH} go in one request: split it",
            batch.actions.len()
        )));
    }
    // An item the document refuses refuses the whole batch (its place named), before the ledger
    // is asked; the ledger then answers each of the others.
    let batch: Batch = read_json("Batch", &bytes, "a batch ({\"actions\": [...]})")?;
    let raws = batch
        .actions
        .iter()
        .enumerate()
        .map(|(index, item)| {
            serde_json::from_str::<Envelope>(item.get())
                .map(|e| e.into_raw(&grant))
                .map_err(|e| Problem::bad_request(format!("item {index} is not a submission: {e}")))
        })
        .collect::<Result<Vec<RawSubmission>, Problem>>()?;
    let results: Vec<Value> = app
        .ledger
        .submit_many(&raws)
        .await?
        .into_iter()
        .zip(&raws)
        .map(|(result, raw)| {
            observe::batch_item(raw, outcome_word(&result));
            let (status, mut document) = submitted(result);
            document["status"] = Value::from(status.as_u16());
            document
        })
        .collect();
    Ok(json_response(StatusCode::OK, &serde_json::json!({ "results": results })))
}

/// A key in a path names an action that may have been recorded under older key rules: it is read
/// as the command line reads a typed key, so that such an action can still be read and settled.
pub(super) fn parse_key(text: &str) -> Result<ActionKey, Problem> {
    ActionKey::parse_existing(text).map_err(|e| Problem::not_found(format!("no action can have this key: {e}")))
}

/// `/v1/actions/{key}`: GET reads the action; a POST to `{key}:begin`, `:heartbeat` or `:finish`
/// is the register's. The verb follows the last colon as sent: a key that itself ends in
/// `:begin` is read with its colon percent-encoded (`x%3Abegin`). Each form answers 405 to the
/// methods it does not take, with its own `Allow`.
async fn on_action<S: Store>(
    With(app): With<Arc<App<S>>>,
    Path(target): Path<String>,
    uri: axum::http::Uri,
    method: axum::http::Method,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    let sent = uri.path().rsplit('/').next().unwrap_or_default();
    match super::register::verb_of(sent) {
        Some(verb) if method == axum::http::Method::POST => {
            let key = target.strip_suffix(&format!(":{verb}")).unwrap_or(&target);
            super::register::on_key(&app, key, verb, &headers, body).await
        }
        Some(_) => Err(not_allowed(&method, "POST")),
        None if matches!(method, axum::http::Method::GET | axum::http::Method::HEAD) => {
            show(&app, &target, &headers).await
        }
        // A POST here is most likely a register's verb mistyped (`:finsh`): say which there are.
        None if method == axum::http::Method::POST => Err(Problem::for_status(
            StatusCode::METHOD_NOT_ALLOWED,
            format!(
                "/v1/actions/{{key}} takes GET only, and {sent:?} ends in none of the register's verbs: POST to \
                 KEY:begin, KEY:heartbeat or KEY:finish (see /v1/openapi.json)"
            ),
        )
        .allowing("GET, HEAD")),
        None => Err(not_allowed(&method, "GET, HEAD")),
    }
}

/// 405 with the methods the resource takes.
fn not_allowed(method: &axum::http::Method, allow: &'static str) -> Problem {
    Problem::for_status(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("this route does not take {method}; its methods are in Allow and at /v1/openapi.json"),
    )
    .allowing(allow)
}

async fn show<S: Store>(app: &App<S>, key: &str, headers: &HeaderMap) -> Result<Response, Problem> {
    observe::note_action(Some(key), None);
    admit(app, headers, Need::Read)?;
    let detail = app.ledger.detail(&parse_key(key)?).await?;
    let mut response = json_response(StatusCode::OK, &document::detail(&detail));
    // The version a command sends back in `If-Match` (or as `version`) to say what it read.
    let etag = format!("\"{}\"", detail.action.revision);
    response.headers_mut().insert(header::ETAG, etag.parse().expect("digits and quotes are a header value"));
    Ok(response)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    state: Option<String>,
    destination: Option<String>,
    owner: Option<String>,
    before: Option<i64>,
    limit: Option<i64>,
}

/// A cursor: the id of the last item of the page before, one or more.
fn cursor_of(before: Option<i64>) -> Result<Option<i64>, Problem> {
    match before {
        Some(id) if id < 1 => {
            Err(Problem::bad_request(format!("before is {id}; give the next_before of a page (1 or more)")))
        }
        before => Ok(before),
    }
}

/// A filter's text: absent, or something to match.
fn filter_text(name: &str, value: Option<String>) -> Result<Option<String>, Problem> {
    match value {
        Some(text) if text.is_empty() => {
            Err(Problem::bad_request(format!("{name} is empty; leave it out to list all")))
        }
        value => Ok(value),
    }
}

fn limit_of(limit: Option<i64>) -> Result<i64, Problem> {
    let limit = limit.unwrap_or(50);
    if (1..=MAX_LIST_LIMIT).contains(&limit) {
        Ok(limit)
    } else {
        Err(Problem::bad_request(format!("limit is {limit}; give 1 to {MAX_LIST_LIMIT}")))
    }
}

async fn list<S: Store>(
    With(app): With<Arc<App<S>>>,
    headers: HeaderMap,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, Problem> {
    admit(&app, &headers, Need::Read)?;
    let Query(query) = query.map_err(|e| Problem::bad_request(e.body_text()))?;
    let state = query.state.as_deref().map(str::parse::<State>).transpose().map_err(Problem::bad_request)?;
    let limit = limit_of(query.limit)?;
    let filter = ListFilter {
        state,
        destination: filter_text("destination", query.destination)?,
        owner: filter_text("owner", query.owner)?,
        before_id: cursor_of(query.before)?,
        limit,
        ..ListFilter::default()
    };
    let actions = app.ledger.list(&filter).await?;
    let blocked = app.ledger.blocked_among(&actions).await?;
    Ok(json_response(StatusCode::OK, &document::actions(&actions, &blocked, limit)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RefusedQuery {
    before: Option<i64>,
    limit: Option<i64>,
}

async fn refused<S: Store>(
    With(app): With<Arc<App<S>>>,
    headers: HeaderMap,
    query: Result<Query<RefusedQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, Problem> {
    admit(&app, &headers, Need::Read)?;
    let Query(query) = query.map_err(|e| Problem::bad_request(e.body_text()))?;
    let limit = limit_of(query.limit)?;
    let refused = app.ledger.list_refused(cursor_of(query.before)?, limit).await?;
    Ok(json_response(StatusCode::OK, &document::refused(&refused, limit)))
}

async fn stats<S: Store>(With(app): With<Arc<App<S>>>, headers: HeaderMap) -> Result<Response, Problem> {
    admit(&app, &headers, Need::Read)?;
    Ok(json_response(StatusCode::OK, &stats_document(&app.ledger).await?))
}

/// What `GET /v1/stats` answers: the ledger's figures as `stats --json` prints them (a count per
/// state, zero included, the total, stale claims and the oldest waits), from the one ledger
/// function the worker's metrics read too.
async fn stats_document<S: Store>(ledger: &crate::ledger::Ledger<S>) -> Result<Value, LedgerError> {
    Ok(serde_json::to_value(ledger.stats().await?).expect("figures serialize"))
}

/// A person's command: the version they saw, their reason, and what the command needs.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CommandBody {
    reason: String,
    /// The version the person saw (`version` in the action's document, or its `ETag` sent as
    /// `If-Match`): required, and refused if the action moved on.
    #[serde(default, deserialize_with = "super::contract::whole_number")]
    version: Option<i64>,
    /// `resolve`: `completed` (with `destination_id`) or `not-written`.
    #[serde(rename = "as")]
    resolution: Option<String>,
    destination_id: Option<String>,
    /// `assign`: to whom; the token's person by default.
    to: Option<String>,
    #[serde(default)]
    old_worker_stopped: bool,
    /// `retry`: the person checked the destination and it holds no record (rule 6).
    #[serde(default)]
    confirm_not_written: bool,
    /// `approve` and `reject`: the proposal's fingerprint (or its first characters); `approve`
    /// needs it when several wait, `reject` without it rejects them all.
    proposal: Option<String>,
}

/// The command a route names, as `actionledger COMMAND` would run it.
fn manual_command(name: &str, body: &CommandBody, person: &str) -> Result<ManualCommand, Problem> {
    let invalid =
        |detail: String| Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input", "Invalid input", detail);
    Ok(match name {
        "retry" => ManualCommand::Retry,
        "cancel" => ManualCommand::Cancel,
        "approve" => ManualCommand::Approve { proposal: body.proposal.clone() },
        "reject" => ManualCommand::Reject { proposal: body.proposal.clone() },
        "takeover" => ManualCommand::Takeover,
        "acknowledge" => ManualCommand::Acknowledge,
        "recreate" => ManualCommand::Recreate,
        "assign" => {
            let to = crate::domain::Person::parse(body.to.as_deref().unwrap_or(person))?;
            ManualCommand::Assign { to: to.as_str().to_owned() }
        }
        "resolve" => match (body.resolution.as_deref(), &body.destination_id) {
            (Some("completed"), Some(id)) => {
                ManualCommand::ResolveCompleted { destination_id: Label::parse("destination id", id)?.0 }
            }
            (Some("completed"), None) => {
                return Err(invalid(
                    "\"as\": \"completed\" needs \"destination_id\": the record you verified".to_owned(),
                ));
            }
            (Some("not-written"), None) => ManualCommand::ResolveNotWritten,
            (Some("not-written"), Some(_)) => {
                return Err(invalid("\"destination_id\" goes with \"as\": \"completed\" only".to_owned()));
            }
            _ => return Err(invalid("resolve needs \"as\": \"completed\" or \"not-written\"".to_owned())),
        },
        other => {
            return Err(Problem::not_found(format!(
                "no command {other:?}; use retry, cancel, resolve, assign, approve, reject, takeover, acknowledge or recreate"
            )));
        }
    })
}

/// The version of the action the person read, from the body's `version` or the `If-Match`
/// header (the `ETag` of `GET /v1/actions/{key}`). A command is conditional on what its sender
/// saw, as the console's are (rule 6): without either it is refused 428, before the ledger is
/// asked; one the action has moved on from is then refused 409 by the ledger.
fn version_read(headers: &HeaderMap, in_body: Option<i64>) -> Result<i64, Problem> {
    let mut values = headers.get_all(header::IF_MATCH).iter();
    let in_header = match (values.next(), values.next()) {
        (None, _) => None,
        (Some(value), None) => Some(if_match_version(value)?),
        (Some(_), Some(_)) => {
            return Err(Problem::bad_request("send one If-Match header, with the one version you read"));
        }
    };
    match (in_body, in_header) {
        // Two versions read: at most one is the action's, so the command is refused as one on a
        // version the action moved on from is.
        (Some(body), Some(header)) if body != header => Err(Problem::new(
            StatusCode::CONFLICT,
            "refused_change",
            "Change refused",
            format!(
                "\"version\" is {body} and If-Match is \"{header}\": at most one is the action's version; read it \
                 again (GET /v1/actions/{{key}}) and send the one version you read"
            ),
        )
        .with("way_out", "read_again")),
        (Some(version), _) | (None, Some(version)) => Ok(version),
        (None, None) => Err(Problem::new(
            StatusCode::PRECONDITION_REQUIRED,
            "version_required",
            "The version read is required",
            "a command acts on the version of the action you read: send its \"version\" (from GET \
             /v1/actions/{key}) in the body, or its ETag in If-Match",
        )
        .with("missing", "version")),
    }
}

/// The version in an `If-Match` value: one strong entity tag, `"N"`.
fn if_match_version(value: &axum::http::HeaderValue) -> Result<i64, Problem> {
    let text = value.to_str().unwrap_or_default().trim();
    if text == "*" {
        return Err(Problem::new(
            StatusCode::PRECONDITION_REQUIRED,
            "version_required",
            "The version read is required",
            "If-Match: * names no version: send the ETag of GET /v1/actions/{key} you read",
        )
        .with("missing", "version"));
    }
    // The document's pattern: one to 18 digits (a version never grows past that), in quotes as an
    // entity tag is written, or bare as some clients send a tag they took from a header.
    let digits = text.strip_prefix('"').and_then(|t| t.strip_suffix('"')).or(Some(text));
    let digits = digits.filter(|d| (1..=18).contains(&d.len()) && d.bytes().all(|b| b.is_ascii_digit()));
    digits.and_then(|digits| digits.parse::<i64>().ok()).ok_or_else(|| {
        Problem::bad_request(format!(
            "If-Match is {text:?}; send the ETag GET /v1/actions/{{key}} answered, one version in quotes: \"3\""
        ))
    })
}

async fn command<S: Store>(
    With(app): With<Arc<App<S>>>,
    Path((key, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    observe::note_action(Some(&key), None);
    observe::note_command(&name);
    let grant = admit(&app, &headers, Need::Review)?;
    let bytes = read_body(&headers, body, app.options.body_limit).await?;
    let body: CommandBody = read_json("Command", &bytes, "a command ({\"reason\": ..., \"version\": N})")?;
    let person = grant.person()?;
    let version = version_read(&headers, body.version)?;
    let request = ManualRequest {
        key: parse_key(&key)?,
        command: manual_command(&name, &body, person.as_str())?,
        person,
        reason: Reason::parse(&body.reason)?,
        expect_version: Some(version),
        old_worker_stopped: body.old_worker_stopped,
        confirmed_not_written: body.confirm_not_written,
    };
    let outcome = app.commands.manual(&request).await?;
    Ok(json_response(StatusCode::OK, &document::manual(&request, &outcome)))
}

async fn hook<S: Store>(
    With(app): With<Arc<App<S>>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    observe::note_intake(&name);
    let intake =
        app.intakes.get(&name).ok_or_else(|| Problem::not_found(format!("no intake {name:?} is configured")))?;
    // A signed intake's sender proves itself with the signature; any other needs a token. The
    // rate is taken only from a proven caller, so forged requests cannot use up the sender's.
    let now = chrono::Utc::now().timestamp();
    let (bytes, verified) = if intake.is_signed() {
        let bytes = read_body(&headers, body, app.options.body_limit).await?;
        let verified = intake.verify(&headers, &bytes, now).map_err(|e| {
            observe::refused(&Refusal::Signature { reason: &e });
            Problem::unauthorized(e.to_string())
        })?;
        app.limiter.admit(&format!("hook:{name}"))?;
        (bytes, verified)
    } else {
        admit(&app, &headers, Need::Submit)?;
        (read_body(&headers, body, app.options.body_limit).await?, Verified::default())
    };
    let screened = intake.screen(&headers, &bytes, &verified, now).inspect_err(|replayed| {
        observe::refused(&Refusal::Replay { delivery: &replayed.id });
    })?;
    let delivery = match screened {
        Screened::Ignored { field, value } => {
            observe::note_outcome("ignored");
            return Ok(ignored_response(&name, &field, &value));
        }
        Screened::Deliver(delivery) => delivery,
    };
    let (result, field) = match intake.map(&headers, &bytes) {
        Ok(raw) => {
            observe::note_action(raw.key.as_deref(), raw.event_id.as_deref());
            (app.ledger.submit(&raw).await, None)
        }
        Err(unmapped) => {
            let Unmapped { raw, refusal, field } = *unmapped;
            observe::note_action(raw.key.as_deref(), raw.event_id.as_deref());
            (Err(app.ledger.refuse(&raw, refusal).await), field)
        }
    };
    if let (Err(LedgerError::Store(_)), Some(delivery)) = (&result, &delivery) {
        intake.forget(delivery);
    }
    observe::note_outcome(outcome_word(&result));
    match (result, field) {
        // The problem names the field the sender has to fix.
        (Err(refused), Some(field)) => Err(Problem::from(refused).with("field", field)),
        (result, _) => Ok(submitted_response(result)),
    }
}

/// `/readyz`: 200 when the ledger's database answers and its schema is current, 503 with why.
async fn ready<S: Store>(With(app): With<Arc<App<S>>>) -> Response {
    crate::health::ready_answer(&app.ledger).await.into_response()
}

async fn openapi() -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_openapi_document_lists_exactly_the_routes() {
        let document: Value = serde_json::from_str(OPENAPI).expect("the OpenAPI document is JSON");
        let mut listed: Vec<(String, String)> = document["paths"]
            .as_object()
            .expect("paths")
            .iter()
            .flat_map(|(path, item)| {
                item.as_object().expect("a path item").keys().map(move |method| (method.clone(), path.clone()))
            })
            .filter(|(method, _)| method != "parameters")
            .collect();
        let mut routes: Vec<(String, String)> =
            ROUTES.iter().map(|(m, p)| ((*m).to_owned(), (*p).to_owned())).collect();
        listed.sort();
        routes.sort();
        assert_eq!(listed, routes);
        assert_eq!(document["openapi"], "3.1.0");
    }

    #[test]
    fn the_openapi_document_says_a_command_needs_the_version_read() {
        let document: Value = serde_json::from_str(OPENAPI).expect("the OpenAPI document is JSON");
        let command = &document["paths"]["/v1/actions/{key}/{command}"]["post"];
        assert!(command["responses"]["428"].is_object(), "the 428 is listed");
        let parameters = command["parameters"].as_array().expect("parameters");
        assert!(parameters.iter().any(|p| p["name"] == "If-Match" && p["in"] == "header"));
        let read = &document["paths"]["/v1/actions/{key}"]["get"]["responses"]["200"];
        assert!(read["headers"]["ETag"].is_object(), "a read answers the ETag a command sends back");
        assert_eq!(document["components"]["schemas"]["Problem"]["properties"]["missing"]["enum"][0], "version");
    }

    #[test]
    fn a_command_takes_the_version_read_from_its_body_or_if_match() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::IF_MATCH, value.parse().expect("a header value"));
            headers
        };
        assert_eq!(version_read(&HeaderMap::new(), Some(3)).ok(), Some(3));
        assert_eq!(version_read(&with("\"4\""), None).ok(), Some(4));
        assert_eq!(version_read(&with(" \"4\" "), Some(4)).ok(), Some(4));
        let status = |result: Result<i64, Problem>| result.map_err(|p| p.status.as_u16()).unwrap_err();
        assert_eq!(status(version_read(&HeaderMap::new(), None)), 428);
        assert_eq!(status(version_read(&with("*"), None)), 428);
        assert_eq!(status(version_read(&with("\"4\""), Some(3))), 409);
        assert_eq!(status(version_read(&with("W/\"4\""), None)), 400);
        assert_eq!(status(version_read(&with("\"4\", \"5\""), None)), 400);
        assert_eq!(version_read(&with("4"), None).ok(), Some(4), "the quotes may be left out");
        assert_eq!(status(version_read(&with("\"+4\""), None)), 400);
        assert_eq!(status(version_read(&with("\"4"), None)), 400);
        assert_eq!(status(version_read(&with("\"1234567890123456789\""), None)), 400);
        let mut two = with("\"4\"");
        two.append(header::IF_MATCH, "\"4\"".parse().expect("a header value"));
        assert_eq!(status(version_read(&two, None)), 400);
    }
}
