//! Problem responses (RFC 9457): every error the HTTP API answers is `application/problem+json`
//! with a type, title, status and detail, and the submission's outcome word where there is one.

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
}

impl Problem {
    pub fn new(status: StatusCode, kind: &'static str, title: &'static str, detail: impl Into<String>) -> Self {
        Self { status, kind, title, detail: detail.into(), extra: Map::new(), retry_after: None }
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
            LedgerError::Refused(_) | LedgerError::Fenced { .. } => {
                Self::new(StatusCode::CONFLICT, "refused_change", "Change refused", error.to_string())
            }
            LedgerError::Store(store) => {
                // The database's own words may name tables and hosts: kept in the server's log.
                tracing::error!(error = %store, "the ledger's database failed");
                let mut problem = Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "ledger_unavailable",
                    "Ledger unavailable",
                    "the ledger's database failed; nothing is known to have changed; try again",
                );
                problem.retry_after = Some(1);
                problem
            }
        }
    }
}

impl From<crate::domain::InputError> for Problem {
    fn from(error: crate::domain::InputError) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input", "Invalid input", error.to_string())
    }
}
