//! Problem responses (RFC 9457): every error the HTTP API answers is `application/problem+json`
//! with a type, title, status and detail, and the submission's outcome word where there is one.

use crate::domain::{ActionKey, WayOut};
use crate::ledger::LedgerError;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use std::time::Duration;

/// The media type of a problem document.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// One problem document, and the status it is answered with.
#[derive(Debug, Clone)]
pub struct Problem {
    pub status: StatusCode,
    /// A short stable name; the document's `type` is `urn:actionledger:problem:NAME`.
    pub kind: &'static str,
    pub title: &'static str,
    pub detail: String,
    /// Members beyond the standard ones: `outcome`, `problem`, `action`.
    pub extra: Map<String, Value>,
    /// Seconds the client should wait (`Retry-After`), for 429 and 503.
    pub retry_after: Option<u64>,
    /// The methods the resource takes (`Allow`), for a 405.
    pub allow: Option<&'static str>,
}

impl Problem {
    pub fn new(status: StatusCode, kind: &'static str, title: &'static str, detail: impl Into<String>) -> Self {
        Self { status, kind, title, detail: detail.into(), extra: Map::new(), retry_after: None, allow: None }
    }

    /// The problem, answered with `Allow: methods` (a 405).
    #[must_use]
    pub fn allowing(mut self, methods: &'static str) -> Self {
        self.allow = Some(methods);
        self
    }

    #[must_use]
    pub fn with(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(name.to_owned(), value.into());
        self
    }

    /// 401: no token, an unknown token, or a webhook signature that does not verify.
    pub fn unauthorized(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", "Not authenticated", detail)
    }

    /// 403: a token whose role does not allow the request.
    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", "Not allowed for this token's role", detail)
    }

    /// 400: a request the API cannot read (not JSON, a field of the wrong type).
    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", "Malformed request", detail)
    }

    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", "Not found", detail)
    }

    /// 413: a body larger than the limit, or a batch of too many submissions.
    pub fn too_large(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", "Request too large", detail)
    }

    /// 415: a body that is not plain JSON.
    pub fn unsupported_media_type(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type", "Unsupported media type", detail)
    }

    /// The problem for a status the router answered on its own (a method a route does not take,
    /// a path it cannot read), with its words as the detail.
    pub fn for_status(status: StatusCode, detail: impl Into<String>) -> Self {
        let (kind, title) = super::contract::kind_of(status);
        Self::new(status, kind, title, detail)
    }

    /// 429, with how long to wait.
    pub fn rate_limited(wait: Duration) -> Self {
        // Whole seconds, rounded up, at least one.
        let seconds = (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1);
        let mut problem = Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            "Too many requests",
            format!("this token's request rate is used up; try again in {seconds} s"),
        );
        problem.retry_after = Some(seconds);
        problem
    }

    /// 503: the request took longer than the server's timeout. A submission may have been
    /// recorded before the time ran out; sending it again is safe (it is a duplicate then).
    pub fn timed_out(limit: Duration) -> Self {
        let mut problem = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "timeout",
            "Request timed out",
            format!(
                "the request took longer than {}; it may have been recorded, and sending it again is safe",
                crate::config::duration_text::format(limit)
            ),
        );
        problem.retry_after = Some(1);
        problem
    }

    /// The document, as JSON.
    pub fn document(&self) -> Value {
        let mut document = json!({
            "type": format!("urn:actionledger:problem:{}", self.kind),
            "title": self.title,
            "status": self.status.as_u16(),
            "detail": self.detail,
        });
        if let Value::Object(members) = &mut document {
            members.extend(self.extra.clone());
        }
        document
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let mut response = (self.status, self.document().to_string()).into_response();
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if let Some(methods) = self.allow {
            response.headers_mut().insert(header::ALLOW, HeaderValue::from_static(methods));
        }
        response
    }
}

impl From<LedgerError> for Problem {
    fn from(error: LedgerError) -> Self {
        match error {
            LedgerError::SubmissionRefused(refused) => {
                Self::new(StatusCode::UNPROCESSABLE_ENTITY, "refused", "Submission refused", refused.message.clone())
                    .with("outcome", "refused")
                    .with("problem", refused.problem)
            }
            LedgerError::NotFound(_) => Self::not_found(error.to_string()),
            // Not a change refused for the action's state: this token may never touch it.
            LedgerError::Refused(refusal @ crate::domain::Refusal::OtherDestination { .. }) => {
                Self::forbidden(refusal.to_string())
            }
            LedgerError::Refused(refusal) => {
                let problem = Self::new(StatusCode::CONFLICT, "refused_change", "Change refused", refusal.to_string());
                match refusal.way_out() {
                    Some(way_out) => {
                        let key = refusal.key().map_or("KEY", ActionKey::as_str);
                        let detail = format!("{}; {}", problem.detail, way_out_words(way_out, key));
                        Self { detail, ..problem }.with("way_out", way_out_name(way_out))
                    }
                    None => problem,
                }
            }
            LedgerError::Fenced { .. } => {
                Self::new(StatusCode::CONFLICT, "refused_change", "Change refused", error.to_string())
            }
            // The same refusal the command line exits 3 for: the login's role may not make this
            // change, and no retry will change that. The database's reason is the ledger's own
            // (its guards name the role and what it may not do), so the client is told it.
            LedgerError::Store(crate::store::StoreError::NotPermitted(reason)) => {
                tracing::warn!(reason = %reason, "the ledger's database refused the server's login");
                Self::new(
                    StatusCode::FORBIDDEN,
                    "not_permitted",
                    "Not permitted to the ledger's database login",
                    format!(
                        "the database login this server uses may not make this change: {}; nothing changed, and \
                         trying again will not help",
                        reason.trim_start_matches("actionledger: ")
                    ),
                )
            }
            // Only a database that cannot be reached is worth trying again: anything else it
            // answers would be answered again.
            LedgerError::Store(store) if store.is_unreachable() => {
                // The database's own words may name tables and hosts: kept in the server's log.
                tracing::error!(error = %store, "the ledger's database cannot be reached");
                let mut problem = Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "ledger_unavailable",
                    "Ledger unavailable",
                    "the ledger's database cannot be reached; nothing is known to have changed; try again",
                );
                problem.retry_after = Some(1);
                problem
            }
            LedgerError::Store(store) => {
                tracing::error!(error = %store, "the ledger's database failed");
                Self::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "ledger_error",
                    "Ledger error",
                    "the ledger's database refused the request for a reason of its own (in the server's log); its \
                     transaction was rolled back, so nothing changed",
                )
            }
        }
    }
}

/// A refusal's way out, as a stable name for clients (`way_out`).
fn way_out_name(way_out: WayOut) -> &'static str {
    match way_out {
        WayOut::NameProposal => "name_proposal",
        WayOut::ReadAgain => "read_again",
        WayOut::ConfirmOldWorkerStopped => "confirm_old_worker_stopped",
        WayOut::ConfirmNotWritten => "confirm_not_written",
        WayOut::SeeLateResults => "see_late_results",
    }
}

/// A refusal's way out in the HTTP API's terms: the field to send, the resource to read.
fn way_out_words(way_out: WayOut, key: &str) -> String {
    match way_out {
        WayOut::NameProposal => format!(
            "name one in the command's \"proposal\" field (its first characters are enough; GET /v1/actions/{key} lists \
             them)"
        ),
        WayOut::ReadAgain => format!("read it again (GET /v1/actions/{key}) and send its \"version\""),
        WayOut::ConfirmOldWorkerStopped => "send \"old_worker_stopped\": true with the command".to_owned(),
        WayOut::ConfirmNotWritten => {
            "once the destination is checked and holds no record, send \"confirm_not_written\": true with the command"
                .to_owned()
        }
        WayOut::SeeLateResults => format!("GET /v1/actions/{key} lists its late results and who acknowledged them"),
    }
}

impl From<crate::domain::InputError> for Problem {
    fn from(error: crate::domain::InputError) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input", "Invalid input", error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreError;

    fn answer(error: StoreError) -> (u16, &'static str, Option<u64>, String) {
        let problem = Problem::from(LedgerError::Store(error));
        (problem.status.as_u16(), problem.kind, problem.retry_after, problem.detail)
    }

    /// Only a database that cannot be reached is "try again": a refusal of the login's role is
    /// 403 with the ledger's reason, and any other failure is a 500 that no retry would change.
    #[test]
    fn a_database_failure_is_answered_by_what_trying_again_could_change() {
        let (status, kind, retry_after, detail) = answer(StoreError::NotPermitted(
            "actionledger: login api may not sign as Cy Dale: a person's entry names the person of the login"
                .to_owned(),
        ));
        assert_eq!((status, kind, retry_after), (403, "not_permitted", None));
        assert!(detail.contains("may not make this change: login api may not sign as Cy Dale"), "{detail}");
        assert!(detail.contains("trying again will not help"), "{detail}");

        let (status, kind, retry_after, _) = answer(StoreError::Database(sqlx::Error::PoolTimedOut));
        assert_eq!((status, kind, retry_after), (503, "ledger_unavailable", Some(1)));

        let (status, kind, retry_after, detail) =
            answer(StoreError::Database(sqlx::Error::Protocol("unexpected message".to_owned())));
        assert_eq!((status, kind, retry_after), (500, "ledger_error", None));
        assert!(!detail.contains("unexpected message"), "the database's words stay in the log: {detail}");
    }
}
