//! The register's routes, for automations that perform their effect themselves: `:begin` (may I
//! act on this key now?), `:heartbeat` (keep my claim), `:finish` (what happened) and
//! `/v1/claims` (give me work), each asking the ledger's register (`crate::ledger::Begun`) with an
//! `executor:DESTINATION` token, for that destination's actions only.

use super::App;
use super::auth::{Grant, Need};
use super::contract::whole_number;
use super::observe;
use super::problem::Problem;
use super::routes::{Envelope, admit, json_response, parse_key, read_body, read_json};
use crate::config::ExecutorConfig;
use crate::document::{self, time};
use crate::domain::text::truncate;
use crate::domain::{Evidence, record::MAX_EVIDENCE_BODY_BYTES};
use crate::ledger::{Begun, Finish, FinishReport, Finished, Holding, Recorded};
use crate::store::Store;
use axum::body::Body;
use axum::extract::State as With;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The lease an automation holds when it names none.
const DEFAULT_LEASE_SECONDS: u64 = 60;

/// `:begin`'s body: a submission's members (read as a submission, its payload kept byte for byte)
/// and the lease the caller asks for.
fn read_begin(bytes: &[u8]) -> Result<(Envelope, Option<i64>), Problem> {
    super::contract::check("Begin", bytes)?;
    let unreadable = |e: serde_json::Error| Problem::bad_request(format!("the body is not a beginning: {e}"));
    let mut members: BTreeMap<String, Box<RawValue>> = serde_json::from_slice(bytes).map_err(unreadable)?;
    let lease_seconds = match members.remove("lease_seconds") {
        Some(raw) => {
            super::contract::whole_number(&mut serde_json::Deserializer::from_str(raw.get())).map_err(unreadable)?
        }
        None => None,
    };
    let submission = serde_json::to_vec(&members).map_err(unreadable)?;
    Ok((serde_json::from_slice(&submission).map_err(unreadable)?, lease_seconds))
}

/// `:heartbeat`'s body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RenewBody {
    #[serde(deserialize_with = "whole_number")]
    ownership_version: Option<i64>,
    #[serde(default, deserialize_with = "whole_number")]
    lease_seconds: Option<i64>,
}

/// `:finish`'s body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FinishBody {
    #[serde(deserialize_with = "whole_number")]
    ownership_version: Option<i64>,
    outcome: String,
    destination_id: Option<String>,
    #[serde(default)]
    permanent: bool,
    #[serde(default, deserialize_with = "whole_number")]
    retry_after_seconds: Option<i64>,
    reason: Option<String>,
    evidence: Option<EvidenceBody>,
}

/// What the destination answered, as the automation saw it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EvidenceBody {
    #[serde(default, deserialize_with = "whole_number")]
    status: Option<i64>,
    body: Option<String>,
}

/// `/v1/claims`'s body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ClaimsBody {
    destination: Option<String>,
    #[serde(default, deserialize_with = "whole_number")]
    limit: Option<i64>,
    #[serde(default, deserialize_with = "whole_number")]
    lease_seconds: Option<i64>,
}

/// The register's verb a path's last segment ends in, as sent (before percent-decoding): what
/// follows its last colon, where that is `begin`, `heartbeat` or `finish`.
pub(super) fn verb_of(segment: &str) -> Option<&'static str> {
    let (_, verb) = segment.rsplit_once(':')?;
    ["begin", "heartbeat", "finish"].into_iter().find(|known| *known == verb)
}

/// `POST /v1/actions/{key}:VERB`: the register's verbs on one key.
pub(super) async fn on_key<S: Store>(
    app: &App<S>,
    key: &str,
    verb: &str,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    observe::note_action(Some(key), None);
    match verb {
        "begin" => begin(app, key, headers, body).await,
        "heartbeat" => renew(app, key, headers, body).await,
        _ => finish(app, key, headers, body).await,
    }
}

/// The destination an executor's token performs.
fn destination_of(grant: &Grant) -> Result<&str, Problem> {
    grant
        .destination
        .as_deref()
        .ok_or_else(|| Problem::forbidden("only an executor:DESTINATION token performs actions"))
}

/// The lease asked for (the schema bounds it to 1 to 86,400 seconds), or the default.
fn lease(seconds: Option<i64>) -> Duration {
    Duration::from_secs(seconds.and_then(|s| u64::try_from(s).ok()).unwrap_or(DEFAULT_LEASE_SECONDS))
}

/// An ownership version the schema requires.
fn version_of(version: Option<i64>) -> Result<i64, Problem> {
    version.ok_or_else(|| Problem::bad_request("ownership_version is required"))
}

async fn begin<S: Store>(app: &App<S>, key: &str, headers: &HeaderMap, body: Body) -> Result<Response, Problem> {
    let grant = admit(app, headers, Need::Perform)?;
    let destination = destination_of(&grant)?;
    let bytes = read_body(headers, body, app.options.body_limit).await?;
    let (submission, lease_seconds) = read_begin(&bytes)?;
    let mut raw = submission.into_raw(&grant);
    // The key is the path's (the schema has none in the body).
    raw.key = Some(key.to_owned());
    observe::note_action(Some(key), raw.event_id.as_deref());
    let begun = match app.ledger.begin(&raw, destination, &grant.name, lease(lease_seconds)).await? {
        Begun::Proceed(holding) => match looked_first(app, &holding).await? {
            Some(settled) => settled,
            None => Begun::Proceed(holding),
        },
        other => other,
    };
    let answer = begun_json(&begun, app.executors.get(destination));
    observe::note_outcome(begun.decision());
    Ok(json_response(StatusCode::OK, &answer))
}

async fn renew<S: Store>(app: &App<S>, key: &str, headers: &HeaderMap, body: Body) -> Result<Response, Problem> {
    let grant = admit(app, headers, Need::Perform)?;
    let destination = destination_of(&grant)?;
    let bytes = read_body(headers, body, app.options.body_limit).await?;
    let renewal: RenewBody = read_json("Heartbeat", &bytes, "a heartbeat")?;
    let key = parse_key(key)?;
    let version = version_of(renewal.ownership_version)?;
    let until = app.ledger.renew(&key, version, destination, &grant.name, lease(renewal.lease_seconds)).await?;
    observe::note_outcome("renewed");
    Ok(json_response(
        StatusCode::OK,
        &json!({ "key": key.as_str(), "ownership_version": version, "lease_until": time(until) }),
    ))
}

async fn finish<S: Store>(app: &App<S>, key: &str, headers: &HeaderMap, body: Body) -> Result<Response, Problem> {
    let grant = admit(app, headers, Need::Perform)?;
    let destination = destination_of(&grant)?;
    let bytes = read_body(headers, body, app.options.body_limit).await?;
    let body: FinishBody = read_json("Finish", &bytes, "a finish")?;
    let key = parse_key(key)?;
    let version = version_of(body.ownership_version)?;
    let report = finish_report(body.outcome.as_str(), &body)?;
    let finished = app.ledger.finish(&key, version, destination, &grant.name, &report).await?;
    let (status, recorded, action) = match &finished {
        Finished::Recorded(Recorded::Applied(action)) => (StatusCode::OK, "applied", action),
        Finished::AlreadyFinished(action) => (StatusCode::OK, "already_finished", action),
        Finished::Recorded(Recorded::Stale(action)) => {
            observe::note_outcome("late");
            return Err(Problem::new(
                StatusCode::CONFLICT,
                "late_result",
                "Claim passed on",
                format!(
                    "the claim on {key} passed from ownership version {} to {}: your report changed nothing and is kept \
                     as a late result for a person to review; stop acting on it",
                    version, action.ownership_version
                ),
            )
            .with("action", document::action_json(action)));
        }
    };
    observe::note_outcome(recorded);
    Ok(json_response(status, &json!({ "recorded": recorded, "action": document::action_json(action) })))
}

/// The ledger's report from a finish's body; what the body's outcome needs and lacks is a 422.
fn finish_report(outcome: &str, body: &FinishBody) -> Result<FinishReport, Problem> {
    let unusable = |detail: &str| Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "unusable", "Unusable finish", detail);
    let finish = match outcome {
        "completed" => {
            let Some(id) = body.destination_id.clone().filter(|id| !id.trim().is_empty()) else {
                return Err(unusable("a completed finish names the destination's record: destination_id"));
            };
            Finish::Completed { destination_id: id }
        }
        "not_written" => Finish::NotWritten {
            permanent: body.permanent,
            retry_after: body.retry_after_seconds.and_then(|s| u64::try_from(s).ok()).map(Duration::from_secs),
        },
        _ => Finish::Unknown,
    };
    if !matches!(finish, Finish::Completed { .. }) && body.reason.as_deref().is_none_or(|r| r.trim().is_empty()) {
        return Err(unusable("a finish that did not complete says why: reason"));
    }
    let evidence = body.evidence.as_ref();
    Ok(FinishReport {
        reason: body.reason.clone(),
        evidence: Evidence {
            status: evidence.and_then(|e| e.status),
            destination_id: body.destination_id.clone(),
            body: evidence.and_then(|e| e.body.as_deref()).map(|b| truncate(b, MAX_EVIDENCE_BODY_BYTES)),
        },
        finish,
    })
}

/// `POST /v1/claims`: up to `limit` runnable actions of the token's destination, each claimed
/// for the caller with its attempt started.
pub(super) async fn claims<S: Store>(
    With(app): With<Arc<App<S>>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    let grant = admit(&app, &headers, Need::Perform)?;
    let destination = destination_of(&grant)?;
    let bytes = read_body(&headers, body, app.options.body_limit).await?;
    let asked: ClaimsBody = read_json("ClaimRequest", &bytes, "a claim request")?;
    if let Some(named) = asked.destination.as_deref().filter(|named| *named != destination) {
        return Err(Problem::forbidden(format!("this token performs {destination} only, not {named}")));
    }
    let claimed =
        app.ledger.claim_for(destination, &grant.name, lease(asked.lease_seconds), asked.limit.unwrap_or(1)).await?;
    let mut held = Vec::with_capacity(claimed.len());
    for holding in claimed {
        if looked_first(&app, &holding).await?.is_none() {
            held.push(holding);
        }
    }
    observe::note_outcome(if held.is_empty() { "none" } else { "claimed" });
    let executor = app.executors.get(destination);
    let claims: Vec<Value> = held
        .iter()
        .map(|holding| {
            let mut claim = claim_json(holding, executor);
            claim["key"] = Value::from(holding.claim.key().as_str());
            claim["payload"] = holding.claim.action.payload.value();
            claim["action"] = document::action_json(&holding.action);
            claim
        })
        .collect();
    Ok(json_response(StatusCode::OK, &json!({ "claims": claims })))
}

/// Where the caller's claim follows an attempt that may have been performed (a caller that
/// stopped between acting and `:finish`), the executor's lookup settles it first (rule 5): the
/// answer it then gets (`done`, or `review` for anything the lookup cannot settle), or `None`
/// when nothing is there and the caller may act.
async fn looked_first<S: Store>(app: &App<S>, holding: &Holding) -> Result<Option<Begun>, crate::ledger::LedgerError> {
    let settled =
        crate::reconcile::look_before_repeat(&app.ledger, &app.destinations, &holding.claim, holding.attempt).await?;
    Ok(match settled {
        None => None,
        Some(Recorded::Applied(action) | Recorded::Stale(action)) => Some(app.ledger.settled_answer(action).await?),
    })
}

/// The claim an automation holds, with what it sends to the destination.
fn claim_json(holding: &Holding, executor: Option<&ExecutorConfig>) -> Value {
    json!({
        "ownership_version": holding.claim.ownership_version(),
        "attempt": holding.attempt.number,
        "lease_until": time(holding.lease_until),
        "idempotency_key": holding.claim.action.sending_key(),
        "idempotency_header": executor.and_then(|e| e.idempotency.as_ref()).map(|i| i.header.clone()),
        "fencing_header": executor.and_then(|e| e.fencing.as_ref()).map(|f| f.header.clone()),
    })
}

/// A beginning's answer: one document saying what the caller may do.
fn begun_json(begun: &Begun, executor: Option<&ExecutorConfig>) -> Value {
    let action = match begun {
        Begun::Proceed(holding) => &holding.action,
        Begun::Done { action, .. } | Begun::Wait { action, .. } | Begun::Review(action) | Begun::Cancelled(action) => {
            action
        }
        Begun::Refused(report) => &report.action,
    };
    let mut answer = json!({
        "decision": begun.decision(),
        "key": action.key.as_str(),
        "state": action.state,
        "submitted": Value::Null,
        "claim": Value::Null,
        "destination_id": action.destination_id,
        "evidence": Value::Null,
        "until": Value::Null,
        "why": Value::Null,
        "assignee": action.assignee,
        "action": document::action_json(action),
    });
    match begun {
        Begun::Proceed(holding) => {
            answer["submitted"] = json!(holding.submitted.map(crate::domain::SubmitOutcome::as_str));
            answer["claim"] = claim_json(holding, executor);
        }
        Begun::Done { completed_by, .. } => {
            answer["evidence"] = completed_by.as_ref().map_or(Value::Null, |attempt| {
                json!({
                    "status": attempt.evidence.status,
                    "destination_id": attempt.evidence.destination_id,
                    "body": attempt.evidence.body,
                })
            });
        }
        Begun::Wait { until, why, .. } => {
            answer["until"] = until.map_or(Value::Null, |t| Value::from(time(t)));
            answer["why"] = Value::from(why.as_str());
        }
        Begun::Review(action) => {
            answer["why"] = json!(action.last_error.as_deref().unwrap_or("a person decides what happens to it"));
        }
        Begun::Cancelled(_) => {}
        Begun::Refused(report) => {
            answer["submitted"] = Value::from(report.outcome.as_str());
            answer["why"] = Value::from(document::explanation(report));
        }
    }
    answer
}
