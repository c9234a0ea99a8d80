//! What an operator sees of `serve`: one log line per request (its method, route, status and time,
//! and the caller, action key and event id where there are), a warning for every refusal of a
//! token, a role, a rate, a body size or a webhook signature, and the counts behind the
//! `actionledger_http_*` metrics that `serve --metrics-addr` serves.
//!
//! Handlers note what they learn (the token's name, the key) with the `note_*` functions, and the
//! request's layer ([`observe`]) writes the line once the answer is known, whichever way the
//! handler ended. Nothing a caller proves itself with (a token, a signature, a secret) is noted.

use crate::domain::RawSubmission;
use crate::domain::text::escape_untrusted;
use axum::extract::{ConnectInfo, MatchedPath, Request};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use std::cell::RefCell;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tracing::Instrument as _;
use tracing::field::display;

/// The route of a request that no route matched: one label for every unknown path, so that a
/// client sending random paths cannot grow the metrics without bound.
pub const UNMATCHED: &str = "unmatched";

/// What the handlers learned of one request, escaped as all text from outside is in logs.
#[derive(Debug, Default)]
struct Noted {
    token: Option<String>,
    intake: Option<String>,
    key: Option<String>,
    event_id: Option<String>,
    command: Option<String>,
    outcome: Option<&'static str>,
}

tokio::task_local! {
    static NOTED: RefCell<Noted>;
}

fn note(write: impl FnOnce(&mut Noted)) {
    // Outside a request's layer (a unit test calling `authorize` itself) there is no line to note for.
    let _ = NOTED.try_with(|noted| write(&mut noted.borrow_mut()));
}

/// The name of the token the request was made with (never the token).
pub fn note_token(name: &str) {
    note(|noted| noted.token = Some(escape_untrusted(name)));
}

/// The webhook intake the request was sent to.
pub fn note_intake(name: &str) {
    note(|noted| noted.intake = Some(escape_untrusted(name)));
}

/// The action key and event id the request names, as the client sent them.
pub fn note_action(key: Option<&str>, event_id: Option<&str>) {
    note(|noted| {
        noted.key = key.map(escape_untrusted).or(noted.key.take());
        noted.event_id = event_id.map(escape_untrusted).or(noted.event_id.take());
    });
}

/// The person's command the request names.
pub fn note_command(name: &str) {
    note(|noted| noted.command = Some(escape_untrusted(name)));
}

/// The submission's outcome word (`created`, `duplicate`, `refused`, ...).
pub fn note_outcome(outcome: &'static str) {
    note(|noted| noted.outcome = Some(outcome));
}

/// Logs one submission of a batch (INFO), with the token's name, its key and event id as sent, and
/// its outcome: a batch is one request, and each of its submissions is searched for by its own key.
pub fn batch_item(raw: &RawSubmission, outcome: &'static str) {
    let token = NOTED.try_with(|noted| noted.borrow().token.clone()).ok().flatten();
    tracing::info!(
        token = token.map(display),
        key = raw.key.as_deref().map(|key| display(escape_untrusted(key))),
        event_id = raw.event_id.as_deref().map(|id| display(escape_untrusted(id))),
        outcome = %outcome,
        "recorded a batch's submission"
    );
}

/// The method as a metric label: the methods HTTP defines, and `_OTHER` for any other token a
/// client makes up, so that the series stay bounded.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "_OTHER",
    }
}

/// The layer around every route: logs the request's line (INFO) and counts it, by its route's
/// template, never the path sent. Whatever is logged while the request is answered (a refusal, a
/// database failure) is in its span, `request`, with the method, route and client address; behind
/// a proxy the client is the proxy, and the `X-Forwarded-For` the request carried is logged too.
pub async fn observe(request: Request, next: Next) -> Response {
    let method = method_label(request.method());
    let route = request.extensions().get::<MatchedPath>().map_or(UNMATCHED, MatchedPath::as_str).to_owned();
    let client = request.extensions().get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(addr)| *addr);
    let forwarded_for = request
        .headers()
        .get("x-forwarded-for")
        .map(|value| escape_untrusted(&String::from_utf8_lossy(value.as_bytes())));
    let span = tracing::info_span!(
        "request",
        method = %method,
        route = %route,
        client = client.map(display),
        forwarded_for = forwarded_for.map(display),
    );
    let started = Instant::now();
    let answered = NOTED.scope(RefCell::new(Noted::default()), async move {
        let response = next.run(request).await;
        (response, NOTED.with(RefCell::take))
    });
    let (response, noted) = answered.instrument(span.clone()).await;
    let took = started.elapsed();
    let status = response.status().as_u16();
    crate::metrics::http_request(method, &route, status, took);
    span.in_scope(|| {
        tracing::info!(
            status,
            duration_ms = milliseconds(took),
            token = noted.token.map(display),
            intake = noted.intake.map(display),
            key = noted.key.map(display),
            event_id = noted.event_id.map(display),
            command = noted.command.map(display),
            outcome = noted.outcome.map(display),
            "answered"
        );
    });
    response
}

/// A duration in milliseconds, to a tenth.
fn milliseconds(took: Duration) -> f64 {
    (took.as_secs_f64() * 10_000.0).round() / 10.0
}

/// A request refused before the ledger was asked, and what its warning says.
#[derive(Debug)]
pub enum Refusal<'a> {
    /// 401: no bearer token.
    NoToken,
    /// 401: a token that no line of the tokens file has. `hash` is its line's hash
    /// (`sha256:HEX`); only its first digits are logged.
    UnknownToken { hash: &'a str },
    /// 403: the token's role does not allow the request: what it does, and the roles that may.
    Role { role: &'static str, doing: &'static str, needs: &'static str },
    /// 429: the caller's rate is used up.
    Rate { wait: Duration },
    /// 413: a body over its limit.
    TooLarge { limit: usize },
    /// 413: a batch of more submissions than one request takes.
    TooMany { count: usize, limit: usize },
    /// 401: a webhook whose signature does not verify, and why (the reason the sender is told,
    /// which names headers and times, never the secret or the signature).
    Signature { reason: &'a dyn std::error::Error },
    /// 409: a signed webhook delivery already accepted with the same signed timestamp.
    Replay { delivery: &'a str },
}

/// How many hex digits of an unknown token's hash a warning shows: enough to match it against the
/// lines of an old tokens file (a token still in use after a rotation), far too few to test
/// guesses of the token against.
const HASH_DIGITS_SHOWN: usize = 8;

impl Refusal<'_> {
    /// The `reason` label of `actionledger_http_refusals_total`, and the warning's `refusal` field.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NoToken => "no_token",
            Self::UnknownToken { .. } => "unknown_token",
            Self::Role { .. } => "role",
            Self::Rate { .. } => "rate",
            Self::TooLarge { .. } | Self::TooMany { .. } => "too_large",
            Self::Signature { .. } => "signature",
            Self::Replay { .. } => "replay",
        }
    }
}

/// Logs a refusal (WARN) with the caller where it is known (the token's name, or the intake) and
/// the key the request named, and counts it.
pub fn refused(refusal: &Refusal<'_>) {
    crate::metrics::http_refused(refusal.reason());
    let (token, intake, key) = NOTED
        .try_with(|noted| {
            let noted = noted.borrow();
            (noted.token.clone(), noted.intake.clone(), noted.key.clone())
        })
        .unwrap_or_default();
    let refusal_reason = refusal.reason();
    let (token, intake, key) = (token.map(display), intake.map(display), key.map(display));
    match refusal {
        Refusal::NoToken => {
            tracing::warn!(refusal = %refusal_reason, intake, key, "refused a request without a bearer token (401)");
        }
        Refusal::UnknownToken { hash } => {
            let shown = hash.get(.."sha256:".len() + HASH_DIGITS_SHOWN).unwrap_or_default();
            tracing::warn!(
                refusal = %refusal_reason,
                token_hash = %shown,
                intake,
                key,
                "refused a request whose bearer token is not known (401); its hash starts {shown}"
            );
        }
        Refusal::Role { role, doing, needs } => tracing::warn!(
            refusal = %refusal_reason,
            token,
            role = %role,
            key,
            "refused a {role} token's request (403): {doing} needs {needs}"
        ),
        Refusal::Rate { wait } => {
            let who = match (&token, &intake) {
                (Some(token), _) => format!("the token {token}"),
                (None, Some(intake)) => format!("the intake {intake}"),
                (None, None) => "the caller".to_owned(),
            };
            tracing::warn!(
                refusal = %refusal_reason,
                token,
                intake,
                key,
                retry_after_ms = milliseconds(*wait),
                "refused a request over the rate of {who} (429)"
            );
        }
        Refusal::TooLarge { limit } => tracing::warn!(
            refusal = %refusal_reason,
            token,
            intake,
            limit_bytes = limit,
            "refused a body larger than {limit} bytes (413)"
        ),
        Refusal::TooMany { count, limit } => tracing::warn!(
            refusal = %refusal_reason,
            token,
            submissions = count,
            "refused a batch of {count} submissions, over {limit} (413)"
        ),
        Refusal::Signature { reason } => tracing::warn!(
            refusal = %refusal_reason,
            intake,
            reason = %reason,
            "refused a webhook whose signature does not verify (401): {reason}"
        ),
        Refusal::Replay { delivery } => {
            let delivery = display(delivery.to_string());
            tracing::warn!(
                refusal = %refusal_reason,
                intake,
                delivery = %delivery,
                "refused a webhook delivery already accepted with the same signature (409): {delivery}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::body::Body;
    use axum::routing::get;
    use std::sync::{Arc, Mutex};
    use tower::ServiceExt as _;

    /// A log writer whose lines a test reads back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("not poisoned").extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().expect("not poisoned")).into_owned()
        }
    }

    /// Answers `requests` through a router with the layer, on this thread, and returns the log.
    fn log_of(requests: Vec<axum::http::Request<Body>>) -> String {
        let router = Router::new()
            .route(
                "/observe-test/{key}",
                get(|axum::extract::Path(key): axum::extract::Path<String>| async move {
                    note_token("shop");
                    note_action(Some(&key), Some("evt-\u{1b}[31m"));
                    note_outcome("created");
                    refused(&Refusal::Rate { wait: Duration::from_millis(1500) });
                    "ok"
                }),
            )
            .layer(axum::middleware::from_fn(observe));
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).finish();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        tracing::subscriber::with_default(subscriber, || {
            runtime.block_on(async {
                for request in requests {
                    router.clone().oneshot(request).await.expect("the router answers");
                }
            });
        });
        captured.text()
    }

    fn get_request(path: &str) -> axum::http::Request<Body> {
        axum::http::Request::get(path).body(Body::empty()).expect("a request")
    }

    #[test]
    fn a_request_leaves_one_line_with_its_route_template_status_and_key() {
        let log = log_of(vec![get_request("/observe-test/shop:order:7")]);
        let answered: Vec<&str> = log.lines().filter(|line| line.contains("answered")).collect();
        assert_eq!(answered.len(), 1, "{log}");
        let line = answered[0];
        for part in [" INFO ", "method=GET", "route=/observe-test/{key}", "status=200", "duration_ms=", "token=shop"] {
            assert!(line.contains(part), "{part} in {line}");
        }
        assert!(line.contains("key=shop:order:7") && line.contains("outcome=created"), "{line}");
        assert!(line.contains(r"event_id=evt-\x1b[31m"), "text from outside is escaped: {line}");
        let warning = log.lines().find(|line| line.contains("refusal=rate")).expect("the refusal is logged");
        assert!(warning.contains(" WARN ") && warning.contains("the token shop"), "{warning}");
        assert!(warning.contains("route=/observe-test/{key}") && warning.contains("key=shop:order:7"), "{warning}");
    }

    #[test]
    fn an_unknown_path_is_counted_under_one_route_whatever_was_sent() {
        let log = log_of(vec![get_request("/no/such/path-1"), get_request("/no/such/path-2")]);
        let unmatched = log.lines().filter(|line| line.contains("route=unmatched") && line.contains("status=404"));
        assert_eq!(unmatched.count(), 2, "{log}");
        assert!(!log.contains("path-1"), "the path sent is not a label: {log}");
        let text = crate::metrics::encode_text();
        assert!(!text.contains("path-1") && !text.contains("path-2"), "{text}");
        let series = r#"actionledger_http_requests_total{method="GET",route="unmatched",status="404"}"#;
        assert!(text.contains(series), "{text}");
    }

    #[test]
    fn a_made_up_method_is_one_label() {
        assert_eq!(method_label(&Method::from_bytes(b"BREW").expect("a method token")), "_OTHER");
        assert_eq!(method_label(&Method::POST), "POST");
    }

    #[test]
    fn only_the_first_digits_of_an_unknown_tokens_hash_are_shown() {
        let hash = crate::serve::auth::hash_token("an-unknown-token-0123456789");
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).finish();
        tracing::subscriber::with_default(subscriber, || refused(&Refusal::UnknownToken { hash: &hash }));
        let log = captured.text();
        assert!(log.contains(&hash[..15]) && !log.contains(&hash[..16]), "{log}");
        assert!(!log.contains("an-unknown-token"), "{log}");
    }
}
