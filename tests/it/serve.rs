//! The HTTP intake API (`actionledger serve`) on both stores, driven by a real HTTP client against
//! the router served in-process: a storm of concurrent deliveries through `/v1/actions` and a
//! webhook intake, every refusal code with nothing written, signed webhooks, each role, the
//! request timeout, a request in flight at shutdown, commands without the version read, slow
//! clients against the header timeout and the connection caps, and the binary with a hashed token
//! file (and refusing one that lies), its log line per request and refusal, and its metrics.

use crate::support::TestDb;
use actionledger::config::Config;
use actionledger::domain::State;
use actionledger::ledger::Ledger;
use actionledger::serve::auth::{Role, Tokens};
use actionledger::serve::intake::{Intake, sign};
use actionledger::serve::{App, ConnectionLimits, ServeOptions};
use actionledger::store::{ListFilter, Store};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

conformance!(
    the_probes_answer_without_a_token_and_readiness_follows_the_database,
    a_storm_through_the_api_and_a_webhook_gives_one_action_and_one_record_per_key,
    every_refusal_code_writes_nothing,
    an_oversized_body_still_being_sent_gets_its_413,
    a_signed_webhook_with_a_wrong_or_stale_signature_is_refused,
    a_webhook_value_that_names_nothing_is_refused_naming_its_field,
    each_role_is_refused_what_it_may_not_do,
    a_batch_answers_each_submission,
    every_route_of_the_openapi_document_answers,
    a_request_in_flight_finishes_when_the_server_stops,
    a_request_past_the_timeout_is_answered_503_with_nothing_written,
    a_command_without_the_version_read_is_refused_428_and_if_match_carries_it,
    slow_clients_are_closed_at_the_header_timeout_and_capped_while_others_are_served,
    the_binary_logs_and_counts_each_request_and_each_refusal,
);

pub(crate) const SOURCE: &str = "source-token-0123456789";
pub(crate) const REVIEWER: &str = "reviewer-token-0123456789";
pub(crate) const VIEWER: &str = "viewer-token-0123456789";
/// An automation that performs `crm`'s actions itself, through the register.
pub(crate) const EXECUTOR: &str = "executor-token-0123456789";
const SECRET: &[u8] = b"shop-secret";

/// The intakes the tests use: `orders` (a token, the key and payload from the body) and `signed`
/// (an HMAC over `TIMESTAMP.BODY` in `X-Shop-Signature`, hex after `sha256=`).
fn config() -> Config {
    Config::parse(
        r#"
        [intake.orders]
        key = "storm:{{body.n}}"
        event_id = "{{header.X-Event-Id}}"
        destination = "crm"
        payload = ["n"]

        [intake.signed]
        key = "shop:order:{{body.id}}:create-task"
        source_version = "{{body.version}}"
        destination = "crm"
        signature = { secret_env = "UNUSED_IN_TESTS", header = "X-Shop-Signature", prefix = "sha256=", timestamp_header = "X-Shop-Timestamp", tolerance = "5m" }
        "#,
    )
    .expect("the intakes parse")
}

/// Serves the ledger on 127.0.0.1 (until the test ends); returns its base URL.
pub(crate) async fn start<S: Store>(ledger: &Ledger<S>, options: ServeOptions) -> String {
    format!("http://{}", start_within(ledger, options, ConnectionLimits::default()).await)
}

/// Serves the ledger on 127.0.0.1 within `limits` (until the test ends); returns its address.
async fn start_within<S: Store>(
    ledger: &Ledger<S>,
    options: ServeOptions,
    limits: ConnectionLimits,
) -> std::net::SocketAddr {
    let mut tokens = Tokens::default();
    tokens.insert(SOURCE, Role::Source, "shop").unwrap();
    tokens.insert(REVIEWER, Role::Reviewer, "Ana Lima").unwrap();
    tokens.insert(VIEWER, Role::Viewer, "dashboard").unwrap();
    tokens.insert_executor(EXECUTOR, "crm", "crm-flow").unwrap();
    let intakes = config()
        .intake
        .into_iter()
        .map(|(name, intake)| {
            let secret = intake.signature.is_some().then_some(SECRET);
            Intake::with_secret(&name, intake, secret)
        })
        .collect();
    let router = App::new(ledger.clone(), tokens, intakes, options).router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(actionledger::connections::serve(listener, router, limits, std::future::pending()));
    addr
}

pub(crate) fn unlimited() -> ServeOptions {
    ServeOptions { rate: 0.0, ..ServeOptions::default() }
}

pub(crate) fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// One request: its status, its content type and its body as JSON (`null` if not JSON).
pub(crate) async fn call(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    token: Option<&str>,
    body: Option<String>,
    headers: &[(&str, String)],
) -> (u16, String, Value) {
    let mut request = client.request(method, url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.header("content-type", "application/json").body(body);
    }
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let kind = response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let text = response.text().await.unwrap();
    (status, kind, serde_json::from_str(&text).unwrap_or(Value::Null))
}

pub(crate) async fn post(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    body: &Value,
) -> (u16, String, Value) {
    call(client, reqwest::Method::POST, url, token, Some(body.to_string()), &[]).await
}

pub(crate) async fn get(client: &reqwest::Client, url: &str, token: Option<&str>) -> (u16, Value) {
    let (status, _, body) = call(client, reqwest::Method::GET, url, token, None, &[]).await;
    (status, body)
}

/// What the ledger holds: actions and refused submissions.
pub(crate) async fn written<S: Store>(ledger: &Ledger<S>) -> (i64, usize) {
    let actions = ledger.counts().await.unwrap().iter().map(|(_, n)| n).sum();
    (actions, ledger.list_refused(None, 1000).await.unwrap().len())
}

pub(crate) fn submission(key: &str, payload: &Value) -> Value {
    json!({ "key": key, "payload": payload, "destination": "crm", "event_id": format!("ev-{key}") })
}

const KEYS: usize = 500;
const DELIVERIES: usize = 8;

async fn a_storm_through_the_api_and_a_webhook_gives_one_action_and_one_record_per_key<S: Store>(db: TestDb<S>) {
    let base = start(&db.ledger, unlimited()).await;
    let started = Instant::now();
    // Eight concurrent senders each deliver every key: four through /v1/actions and four through
    // the webhook intake, which maps the same body to the same key and payload.
    let senders: Vec<_> = (0..DELIVERIES)
        .map(|s| {
            let base = base.clone();
            tokio::spawn(async move {
                let client = client();
                let mut statuses = BTreeMap::<u16, usize>::new();
                for i in 0..KEYS {
                    let n = (i + s * 61) % KEYS;
                    let (status, _, _) = if s % 2 == 0 {
                        post(
                            &client,
                            &format!("{base}/v1/actions"),
                            Some(SOURCE),
                            &submission(&format!("storm:{n}"), &json!({ "n": n })),
                        )
                        .await
                    } else {
                        call(
                            &client,
                            reqwest::Method::POST,
                            &format!("{base}/v1/hooks/orders"),
                            Some(SOURCE),
                            Some(json!({ "n": n, "sent_by": s }).to_string()),
                            &[("X-Event-Id", format!("hook-{s}-{n}"))],
                        )
                        .await
                    };
                    *statuses.entry(status).or_default() += 1;
                }
                statuses
            })
        })
        .collect();
    let mut statuses = BTreeMap::<u16, usize>::new();
    for sender in senders {
        for (status, n) in sender.await.unwrap() {
            *statuses.entry(status).or_default() += n;
        }
    }
    let submitted = started.elapsed();
    assert_eq!(statuses.get(&201), Some(&KEYS), "one created per key: {statuses:?}");
    assert_eq!(statuses.get(&200), Some(&(KEYS * (DELIVERIES - 1))), "every other delivery a duplicate: {statuses:?}");
    let crm = crate::support::crm::drained_at_a_new_crm(&db.ledger, "storm-worker", 8).await;
    let filter = ListFilter { key_contains: Some("storm:".to_owned()), limit: 2000, ..ListFilter::default() };
    let actions = db.ledger.list(&filter).await.unwrap();
    assert_eq!(actions.len(), KEYS, "one action per key");
    assert!(actions.iter().all(|a| a.state == State::Completed));
    let deliveries = db.ledger.detail(&actions[0].key).await.unwrap().deliveries.len();
    assert_eq!(deliveries, DELIVERIES, "every delivery of a key is recorded on its one action");
    let stats = crm.stats();
    assert_eq!(usize::try_from(stats.records).unwrap(), KEYS, "one CRM record per key");
    assert_eq!(stats.max_records_per_external_ref, 1);
    let requests = KEYS * DELIVERIES;
    println!(
        "serve storm ({}): {requests} deliveries of {KEYS} keys by {DELIVERIES} concurrent senders (half through \
         /v1/actions, half through a webhook intake) in {:.2}s ({:.0} requests/s): {} actions, {} CRM records, \
         at most {} per reference",
        db.url.split(':').next().unwrap_or_default(),
        submitted.as_secs_f64(),
        f64::from(u32::try_from(requests).unwrap()) / submitted.as_secs_f64(),
        actions.len(),
        stats.records,
        stats.max_records_per_external_ref
    );
}

/// A client sends an oversized body in pieces, as a slow link does, and only then reads the
/// answer. A server that answered at once and closed would have its system reset the connection
/// under the client's next write (the 413 lost with it); the body is read and thrown away first.
async fn an_oversized_body_still_being_sent_gets_its_413<S: Store>(db: TestDb<S>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let base = start(&db.ledger, unlimited()).await;
    let addr = base.trim_start_matches("http://").to_owned();
    let body = submission("slow:1", &json!({ "blob": "x".repeat(400 * 1024) })).to_string();
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /v1/actions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {SOURCE}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    for piece in body.as_bytes().chunks(32 * 1024) {
        stream.write_all(piece).await.expect("the server still reads the body it will refuse");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    while !String::from_utf8_lossy(&answer).contains("\r\n\r\n") {
        let n = stream.read(&mut buffer).await.expect("the answer arrives, not a reset connection");
        assert!(n > 0, "the connection closed before an answer: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buffer[..n]);
    }
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert_eq!(written(&db.ledger).await, (0, 0), "nothing recorded");
}

async fn every_refusal_code_writes_nothing<S: Store>(db: TestDb<S>) {
    let base = start(&db.ledger, unlimited()).await;
    let client = client();
    let url = format!("{base}/v1/actions");
    let order = submission("shop:order:1:create-task", &json!({ "total": 10 }));
    for (token, status) in [(None, 401), (Some("not-a-token-at-all"), 401), (Some(VIEWER), 403)] {
        let (got, kind, problem) = post(&client, &url, token, &order).await;
        assert_eq!((got, kind.as_str()), (status, "application/problem+json"), "{problem}");
        assert_eq!(problem["status"], status);
        assert!(problem["detail"].as_str().is_some_and(|d| !d.is_empty()) && problem["type"].is_string());
    }
    assert_eq!(written(&db.ledger).await, (0, 0), "refused callers wrote nothing");
    // 413: a body past the payload limit plus envelope, and a batch of more than 1,000.
    let huge = submission("shop:order:2:create-task", &json!({ "blob": "x".repeat(400 * 1024) }));
    let (status, _, problem) = post(&client, &url, Some(SOURCE), &huge).await;
    assert_eq!(status, 413, "{problem}");
    let batch = json!({ "actions": (0..1001).map(|n| submission(&format!("b:{n}"), &json!({}))).collect::<Vec<_>>() });
    let (status, _, problem) = post(&client, &format!("{base}/v1/actions:batch"), Some(SOURCE), &batch).await;
    assert_eq!(status, 413, "{problem}");
    assert!(problem["detail"].as_str().unwrap().contains("at most 1000"), "{problem}");
    assert_eq!(written(&db.ledger).await, (0, 0), "oversized requests wrote nothing");
    // 422: an invalid submission is kept under refused submissions, and no action is recorded.
    let invalid = submission("shop order with spaces", &json!({ "total": 10 }));
    let (status, kind, problem) = post(&client, &url, Some(SOURCE), &invalid).await;
    assert_eq!((status, kind.as_str()), (422, "application/problem+json"), "{problem}");
    assert_eq!(problem["outcome"], "refused");
    assert_eq!(problem["problem"], "key_whitespace");
    assert_eq!(written(&db.ledger).await, (0, 1), "no action; the refusal is kept for review");
    // 409: a different payload under a recorded key is kept as a proposal, nothing else changes.
    let (status, _, created) = post(&client, &url, Some(SOURCE), &order).await;
    assert_eq!((status, created["outcome"].as_str()), (201, Some("created")), "{created}");
    assert_eq!(created["explanation"], "recorded shop:order:1:create-task as pending");
    let changed = submission("shop:order:1:create-task", &json!({ "total": 11 }));
    let (status, kind, problem) = post(&client, &url, Some(SOURCE), &changed).await;
    assert_eq!((status, kind.as_str()), (409, "application/problem+json"), "{problem}");
    assert_eq!(problem["outcome"], "conflict");
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.contains("kept as a proposal") && !detail.contains("actionledger "), "{problem}");
    assert_eq!(written(&db.ledger).await, (1, 1));
    let key = actionledger::domain::ActionKey::parse("shop:order:1:create-task").unwrap();
    let action = db.ledger.detail(&key).await.unwrap().action;
    assert_eq!(action.payload.value(), json!({ "total": 10 }), "the approved payload is unchanged");
    assert_eq!(action.proposal.map(|p| p.payload.value()), Some(json!({ "total": 11 })), "the proposal is kept");
    // 429: a token past its rate is refused with Retry-After, and its submission is not recorded.
    let limited = start(&db.ledger, ServeOptions { rate: 0.01, burst: 2, ..ServeOptions::default() }).await;
    let url = format!("{limited}/v1/actions");
    for n in 0..2 {
        let (status, _, _) = post(&client, &url, Some(SOURCE), &submission(&format!("rate:{n}"), &json!({}))).await;
        assert_eq!(status, 201);
    }
    let response = client
        .post(&url)
        .bearer_auth(SOURCE)
        .header("content-type", "application/json")
        .body(submission("rate:2", &json!({})).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 429);
    let wait: u64 = response.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(wait >= 1, "Retry-After in whole seconds");
    assert_eq!(written(&db.ledger).await, (3, 1), "the rate-limited submission was not recorded");
    let (status, _) = get(&client, &format!("{limited}/v1/stats"), Some(VIEWER)).await;
    assert_eq!(status, 200, "another token has its own bucket");
}

/// The `signed` intake's headers for `body` signed at `at` with `secret`.
fn signed(secret: &[u8], at: i64, body: &str) -> Vec<(&'static str, String)> {
    let config = config().intake["signed"].signature.clone().unwrap();
    vec![("X-Shop-Signature", sign(secret, &config, Some(at), body.as_bytes())), ("X-Shop-Timestamp", at.to_string())]
}

async fn a_signed_webhook_with_a_wrong_or_stale_signature_is_refused<S: Store>(db: TestDb<S>) {
    let base = start(&db.ledger, unlimited()).await;
    let client = client();
    let url = format!("{base}/v1/hooks/signed");
    let body = r#"{"id": 1042, "version": 3, "total": 99.5}"#;
    let now = chrono::Utc::now().timestamp();
    let send = |headers: Vec<(&'static str, String)>, body: &str| {
        let (client, url, body) = (client.clone(), url.clone(), body.to_owned());
        async move { call(&client, reqwest::Method::POST, &url, None, Some(body), &headers).await }
    };
    let refusals = [
        ("no signature", Vec::new()),
        ("a wrong secret", signed(b"not-the-secret", now, body)),
        ("another body's signature", signed(SECRET, now, r#"{"id": 1042, "version": 4}"#)),
        ("a stale timestamp", signed(SECRET, now - 600, body)),
        ("a timestamp from the future", signed(SECRET, now + 600, body)),
    ];
    for (what, headers) in refusals {
        let (status, kind, problem) = send(headers, body).await;
        assert_eq!((status, kind.as_str()), (401, "application/problem+json"), "{what}: {problem}");
    }
    let mut replayed = signed(SECRET, now, body);
    replayed[1].1 = (now - 1).to_string();
    assert_eq!(send(replayed, body).await.0, 401, "the timestamp is signed with the body");
    assert_eq!(written(&db.ledger).await, (0, 0), "an unproven sender writes nothing, not even a refusal");
    let (status, _, created) = send(signed(SECRET, now, body), body).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["action"]["key"], "shop:order:1042:create-task");
    assert_eq!(created["action"]["source"], "signed");
    assert_eq!(created["action"]["source_version"], 3);
    assert_eq!(created["action"]["payload"]["total"], 99.5, "the whole body is the payload");
    // A proven sender's body that the mapping cannot use is refused and kept for review.
    let unusable = r#"{"order": 1042}"#;
    let (status, _, problem) = send(signed(SECRET, now, unusable), unusable).await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(problem["problem"], "hook_unmapped");
    assert!(problem["detail"].as_str().unwrap().contains("the body has no field id"), "{problem}");
    assert_eq!(written(&db.ledger).await, (1, 1));
    let refused = db.ledger.list_refused(None, 10).await.unwrap();
    assert_eq!((refused[0].problem.as_str(), refused[0].source.as_deref()), ("hook_unmapped", Some("signed")));
    // Without a token the unsigned intake is closed.
    let (status, _, _) =
        call(&client, reqwest::Method::POST, &format!("{base}/v1/hooks/orders"), None, Some("{}".into()), &[]).await;
    assert_eq!(status, 401);
    let (status, _, _) =
        call(&client, reqwest::Method::POST, &format!("{base}/v1/hooks/nope"), Some(SOURCE), Some("{}".into()), &[])
            .await;
    assert_eq!(status, 404);
    assert_eq!(written(&db.ledger).await, (1, 1));
}

/// A key part or event id that is absent, null, empty, a boolean, an object or an array would
/// make a key that names no record (`storm:null`, `storm:`), under which unrelated orders merge
/// as duplicates: each is refused with a 422 naming the field, kept for review with the event id
/// when that could be read, and no action is made.
async fn a_webhook_value_that_names_nothing_is_refused_naming_its_field<S: Store>(db: TestDb<S>) {
    let base = start(&db.ledger, unlimited()).await;
    let client = client();
    let url = format!("{base}/v1/hooks/orders");
    let cases = [
        (r#"{"n": null}"#, "is null"),
        // Twice: a second order with an empty id is refused too, not taken for a duplicate.
        (r#"{"n": ""}"#, "is empty"),
        (r#"{"n": ""}"#, "is empty"),
        (r#"{"n": "   "}"#, "is empty"),
        (r#"{"n": {"id": 1}}"#, "is an object"),
        (r#"{"n": [1]}"#, "is an array"),
        (r#"{"n": true}"#, "is a boolean"),
        (r#"{"m": 1}"#, "has no field n"),
    ];
    for (i, (body, words)) in cases.iter().enumerate() {
        let event = [("X-Event-Id", format!("ev-missing-{i}"))];
        let (status, kind, problem) =
            call(&client, reqwest::Method::POST, &url, Some(SOURCE), Some((*body).to_owned()), &event).await;
        assert_eq!((status, kind.as_str()), (422, "application/problem+json"), "{body}: {problem}");
        assert_eq!(problem["problem"], "hook_unmapped", "{body}");
        assert_eq!(problem["outcome"], "refused", "{body}");
        assert_eq!(problem["field"], "body.n", "{body}: {problem}");
        assert!(problem["detail"].as_str().unwrap().contains(words), "{body}: {problem}");
    }
    // An event id header sent empty is refused the same way; the key it could read is kept.
    let empty_event = [("X-Event-Id", String::new())];
    let (status, _, problem) =
        call(&client, reqwest::Method::POST, &url, Some(SOURCE), Some(r#"{"n": 5}"#.into()), &empty_event).await;
    assert_eq!((status, &problem["field"]), (422, &json!("header.X-Event-Id")), "{problem}");
    assert_eq!(written(&db.ledger).await, (0, cases.len() + 1), "no action, every refusal kept");
    let refused = db.ledger.list_refused(None, 100).await.unwrap();
    assert!(refused.iter().all(|r| r.problem == "hook_unmapped" && r.source.as_deref() == Some("orders")));
    // Newest first: the empty event id, then the cases in reverse.
    assert_eq!((refused[0].event_id.as_deref(), refused[0].key_excerpt.as_deref()), (None, Some("storm:5")));
    assert!(refused[0].message.contains("header X-Event-Id is empty"), "{}", refused[0].message);
    for (i, (body, words)) in cases.iter().enumerate() {
        let record = &refused[cases.len() - i];
        assert_eq!(record.event_id, Some(format!("ev-missing-{i}")), "{body}: the event id is kept");
        assert_eq!(record.key_excerpt, None, "{body}: no key was made");
        assert!(record.message.contains(words) && record.message.contains("field n"), "{body}: {}", record.message);
    }
    // A usable value still makes its action.
    let event = [("X-Event-Id", "ev-usable".to_owned())];
    let (status, _, created) =
        call(&client, reqwest::Method::POST, &url, Some(SOURCE), Some(r#"{"n": "ORD-1"}"#.into()), &event).await;
    assert_eq!((status, &created["action"]["key"]), (201, &json!("storm:ORD-1")), "{created}");
    assert_eq!(written(&db.ledger).await, (1, cases.len() + 1));
}

async fn each_role_is_refused_what_it_may_not_do<S: Store>(db: TestDb<S>) {
    let base = start(&db.ledger, unlimited()).await;
    let client = client();
    let key = "shop:order:7:create-task";
    let (status, _, _) =
        post(&client, &format!("{base}/v1/actions"), Some(SOURCE), &submission(key, &json!({ "n": 7 }))).await;
    assert_eq!(status, 201);
    let show = format!("{base}/v1/actions/{key}");
    let cancel = format!("{base}/v1/actions/{key}/cancel");
    let reason = json!({ "reason": "the order was refunded", "version": 1 });
    // A source submits and nothing else.
    for url in [
        show.clone(),
        format!("{base}/v1/actions?state=pending"),
        format!("{base}/v1/stats"),
        format!("{base}/v1/refused"),
    ] {
        assert_eq!(get(&client, &url, Some(SOURCE)).await.0, 403, "a source token reads nothing: {url}");
    }
    assert_eq!(post(&client, &cancel, Some(SOURCE), &reason).await.0, 403);
    // A viewer reads and nothing else.
    assert_eq!(post(&client, &format!("{base}/v1/actions"), Some(VIEWER), &submission("v:1", &json!({}))).await.0, 403);
    assert_eq!(
        post(&client, &format!("{base}/v1/actions:batch"), Some(VIEWER), &json!({ "actions": [] })).await.0,
        403
    );
    let (status, _, _) = call(
        &client,
        reqwest::Method::POST,
        &format!("{base}/v1/hooks/orders"),
        Some(VIEWER),
        Some(r#"{"n":1}"#.into()),
        &[],
    )
    .await;
    assert_eq!(status, 403);
    assert_eq!(post(&client, &cancel, Some(VIEWER), &reason).await.0, 403);
    assert_eq!(written(&db.ledger).await, (1, 0), "the refused roles wrote nothing");
    let action = db.ledger.detail(&actionledger::domain::ActionKey::parse(key).unwrap()).await.unwrap();
    assert_eq!(action.action.state, State::Pending);
    assert_eq!(action.audit.len(), 1, "only the submission is in the audit trail");
    // What a viewer reads is the `show --json` and `list --json` document.
    let (status, shown) = get(&client, &show, Some(VIEWER)).await;
    assert_eq!(status, 200);
    assert_eq!(shown, actionledger::document::detail(&action));
    let (status, page) = get(&client, &format!("{base}/v1/actions?state=pending&destination=crm"), Some(VIEWER)).await;
    assert_eq!((status, page["actions"][0]["key"].as_str()), (200, Some(key)));
    let (status, counts) = get(&client, &format!("{base}/v1/stats"), Some(VIEWER)).await;
    assert_eq!((status, &counts["states"]["pending"], &counts["total"]), (200, &json!(1), &json!(1)));
    // A reviewer's command is recorded in the token's person's name, against the version seen.
    let (status, _, problem) =
        post(&client, &cancel, Some(REVIEWER), &json!({ "reason": "refunded", "version": 9 })).await;
    assert_eq!(status, 409, "a stale version is refused: {problem}");
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.contains("changed since you read it"), "{problem}");
    // The way out in the API's terms: the resource to read and the field to send, no flag.
    assert_eq!(problem["way_out"], json!("read_again"), "{problem}");
    assert!(detail.ends_with(&format!("read it again (GET /v1/actions/{key}) and send its \"version\"")), "{problem}");
    assert!(!detail.contains("--") && !detail.contains("actionledger "), "{problem}");
    let (status, _, done) = post(&client, &cancel, Some(REVIEWER), &reason).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!((done["by"].as_str(), done["to"].as_str()), (Some("Ana Lima"), Some("cancelled")));
    let (status, _, problem) = post(&client, &format!("{base}/v1/actions/{key}/retry"), Some(REVIEWER), &reason).await;
    assert_eq!(status, 409, "the ledger's refusal, worded: {problem}");
    let audit = db.ledger.detail(&actionledger::domain::ActionKey::parse(key).unwrap()).await.unwrap().audit;
    let last = audit.last().unwrap();
    assert_eq!((last.actor.as_str(), last.reason.as_deref()), ("Ana Lima", Some("the order was refunded")));
}

async fn a_batch_answers_each_submission<S: Store>(db: TestDb<S>) {
    let base = start(&db.ledger, unlimited()).await;
    let client = client();
    let url = format!("{base}/v1/actions:batch");
    // An item the document refuses (here a member it does not know) refuses the whole batch,
    // naming the item, before anything is recorded.
    let unreadable = json!({ "actions": [
        submission("batch:1", &json!({ "n": 1 })),
        { "key": "batch:3", "payload": {}, "colour": "blue" },
    ] });
    let (status, kind, problem) = post(&client, &url, Some(SOURCE), &unreadable).await;
    assert_eq!((status, kind.as_str(), &problem["pointer"]), (400, "application/problem+json", &json!("/actions/1")));
    assert!(problem["detail"].as_str().unwrap().contains("\"colour\""), "{problem}");
    assert_eq!(written(&db.ledger).await, (0, 0), "nothing of a refused batch is recorded");
    let batch = json!({ "actions": [
        submission("batch:1", &json!({ "n": 1 })),
        submission("batch:1", &json!({ "n": 1 })),
        submission("batch 2", &json!({ "n": 2 })),
        submission("batch:4", &json!({ "n": 4 })),
    ] });
    let (status, _, answer) = post(&client, &url, Some(SOURCE), &batch).await;
    assert_eq!(status, 200, "{answer}");
    let results = answer["results"].as_array().unwrap();
    let statuses: Vec<u64> = results.iter().map(|r| r["status"].as_u64().unwrap()).collect();
    assert_eq!(statuses, [201, 200, 422, 201], "{answer}");
    let outcomes: Vec<&str> = results.iter().map(|r| r["outcome"].as_str().unwrap_or("-")).collect();
    assert_eq!(outcomes, ["created", "duplicate", "refused", "created"]);
    assert_eq!(written(&db.ledger).await, (2, 1), "two actions; the one the ledger refused kept as refused");
}

async fn every_route_of_the_openapi_document_answers<S: Store>(db: TestDb<S>) {
    let base = start(&db.ledger, unlimited()).await;
    let client = client();
    let (status, document) = get(&client, &format!("{base}/v1/openapi.json"), None).await;
    assert_eq!(status, 200);
    assert_eq!(document, serde_json::from_str::<Value>(actionledger::serve::routes::OPENAPI).unwrap());
    post(&client, &format!("{base}/v1/actions"), Some(SOURCE), &submission("route:1", &json!({}))).await;
    for (method, path) in actionledger::serve::routes::ROUTES {
        let url = format!(
            "{base}{}",
            path.replace("{key}", "route:1").replace("{command}", "assign").replace("{name}", "orders")
        );
        let (status, _, body) = if *method == "get" {
            call(&client, reqwest::Method::GET, &url, Some(REVIEWER), None, &[]).await
        } else {
            // The register's routes in the order listed: begin claims route:1 (its first
            // ownership version), the heartbeat and the finish go under that claim.
            let (token, body) = match *path {
                "/v1/actions:batch" => (REVIEWER, json!({ "actions": [] })),
                "/v1/actions/{key}/{command}" => (REVIEWER, json!({ "reason": "mine to follow up", "version": 1 })),
                "/v1/hooks/{name}" => (REVIEWER, json!({ "n": 5 })),
                "/v1/actions/{key}:begin" => (EXECUTOR, json!({ "payload": {} })),
                "/v1/actions/{key}:heartbeat" => (EXECUTOR, json!({ "ownership_version": 1 })),
                "/v1/actions/{key}:finish" => {
                    (EXECUTOR, json!({ "ownership_version": 1, "outcome": "completed", "destination_id": "r-1" }))
                }
                "/v1/claims" => (EXECUTOR, json!({ "limit": 2 })),
                _ => (REVIEWER, submission("route:2", &json!({}))),
            };
            let event = [("X-Event-Id", "route-5".to_owned())];
            call(&client, reqwest::Method::POST, &url, Some(token), Some(body.to_string()), &event).await
        };
        assert!((200..300).contains(&status), "{method} {path}: {status} {body}");
    }
    let (status, _, problem) =
        call(&client, reqwest::Method::GET, &format!("{base}/v2/nothing"), Some(REVIEWER), None, &[]).await;
    assert_eq!((status, problem["status"].as_u64()), (404, Some(404)));
}

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_actionledger");

pub(crate) fn actionledger(dir: &std::path::Path) -> std::process::Command {
    let mut command = std::process::Command::new(BIN);
    command
        .current_dir(dir)
        .env_remove("ACTIONLEDGER_DB")
        .env_remove("ACTIONLEDGER_TOKENS")
        .env_remove("ACTIONLEDGER_TOKENS_FILE");
    command
}

/// `serve hash-token` makes a tokens file's line from a token on standard input.
pub(crate) fn hash_token(dir: &std::path::Path, token: &str, role: &str, name: &str) -> std::process::Output {
    hash_token_with(dir, token, &["--role", role, "--name", name])
}

/// `serve hash-token` with `args`, `token` on its standard input.
pub(crate) fn hash_token_with(dir: &std::path::Path, token: &str, args: &[&str]) -> std::process::Output {
    use std::io::Write as _;
    let mut child = actionledger(dir)
        .args(["serve", "hash-token"])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(token.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_hashed_tokens_and_finishes_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let made = hash_token(dir.path(), "a-token-of-the-shop-0123456789\n", "source", "shop");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let line = String::from_utf8(made.stdout).unwrap();
    assert!(line.starts_with("sha256:") && line.trim_end().ends_with(" source shop"), "{line}");
    assert!(!line.contains("a-token-of-the-shop"), "the token itself is never written");
    let short = hash_token(dir.path(), "short", "source", "shop");
    assert_eq!(short.status.code(), Some(2), "a short token is a usage error");
    let refused = actionledger(dir.path())
        .args(["--db", "sqlite://ledger.db", "serve", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "no token configured");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("no token is configured"));
    std::fs::write(dir.path().join("tokens.txt"), &line).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("127.0.0.1:{port}");
    let server = actionledger(dir.path())
        .args(["--db", "sqlite://ledger.db", "serve", "--listen", &listen, "--tokens", "tokens.txt"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let client = client();
    let url = format!("http://{listen}/v1/actions");
    let mut answer = None;
    for _ in 0..200 {
        if client.get(format!("http://{listen}/v1/openapi.json")).send().await.is_ok() {
            answer = Some(
                post(&client, &url, Some("a-token-of-the-shop-0123456789"), &submission("bin:1", &json!({}))).await,
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, _, created) = answer.expect("the server answered");
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["action"]["source"], "shop", "the token's name stands for the source");
    let killed = std::process::Command::new("kill").args(["-TERM", &server.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let stopped = server.wait_with_output().unwrap();
    assert!(stopped.status.success(), "SIGTERM ends serve cleanly: {}", String::from_utf8_lossy(&stopped.stderr));
    let log = String::from_utf8_lossy(&stopped.stderr);
    assert!(log.contains("requests in flight finished"), "{log}");
    let started = log.lines().find(|l| l.contains("serving the ledger on http://")).expect("the start is logged");
    assert!(started.contains("INFO"), "the start line is a log event like the worker's: {started}");
    let after = actionledger(dir.path()).args(["--db", "sqlite://ledger.db", "list", "--json"]).output().unwrap();
    let page: Value = serde_json::from_slice(&after.stdout).unwrap();
    assert_eq!(page["actions"][0]["key"], "bin:1");
}

/// The binary refuses a tokens file that would let one token act under another's name, and logs
/// every connection it refuses or closes for late headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_refuses_lying_tokens_and_logs_what_it_refuses() {
    use tokio::io::AsyncWriteExt as _;
    let dir = tempfile::tempdir().unwrap();
    let line = |token: &str, role: &str, name: &str| {
        let made = hash_token(dir.path(), token, role, name);
        assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
        String::from_utf8(made.stdout).unwrap()
    };
    let viewer = line("a-token-of-the-dashboard-0123", "viewer", "dashboard");
    let twin = viewer.replace(" viewer dashboard", " reviewer Evil Twin");
    let shop = line("a-token-of-the-shop-0123456789", "source", "shop");
    for (tokens, says) in [
        (format!("{viewer}{twin}"), "tokens.txt line 2 has the token hash tokens.txt line 1 already has"),
        (format!("{shop}{}", line("another-token-0123456789", "viewer", "Shop")), "one name holds one role"),
        (format!("{shop}sha256:00 viewer x\n"), "tokens.txt line 2: the hash must be sha256:"),
    ] {
        std::fs::write(dir.path().join("tokens.txt"), &tokens).unwrap();
        let refused = actionledger(dir.path())
            .args(["--db", "sqlite://ledger.db", "serve", "--listen", "127.0.0.1:0", "--tokens", "tokens.txt"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "a usage error: {stderr}");
        assert!(stderr.contains(says), "{stderr}");
    }
    std::fs::write(dir.path().join("tokens.txt"), &shop).unwrap();
    let zeros = [
        ["--max-connections", "0"],
        ["--max-connections-per-address", "0"],
        ["--header-timeout", "0s"],
        ["--sweep-every", "0s"],
    ];
    for zero in zeros {
        let refused = actionledger(dir.path())
            .args(["--db", "sqlite://ledger.db", "serve", "--tokens", "tokens.txt"])
            .args(zero)
            .output()
            .unwrap();
        assert_eq!(refused.status.code(), Some(2), "{zero:?}: {}", String::from_utf8_lossy(&refused.stderr));
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("127.0.0.1:{port}");
    let server = actionledger(dir.path())
        .args(["--db", "sqlite://ledger.db", "serve", "--listen", &listen, "--tokens", "tokens.txt"])
        .args(["--header-timeout", "1s", "--max-connections-per-address", "2", "--max-connections", "10"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let addr: std::net::SocketAddr = listen.parse().unwrap();
    let mut up = false;
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(up, "the server listens");
    // Let the probe connections close before the slow clients take the address's places.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut slow = Vec::new();
    for _ in 0..2 {
        slow.push(slow_client("127.0.0.1", addr).await);
    }
    let mut refused = connect_from("127.0.0.1", addr).await;
    let (answer, _) = until_closed(&mut refused, Duration::from_secs(2)).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
    for (stream, _) in &mut slow {
        until_closed(stream, Duration::from_secs(5)).await;
        let _ = stream.shutdown().await;
    }
    let killed = std::process::Command::new("kill").args(["-TERM", &server.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let stopped = server.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&stopped.stderr);
    assert!(stopped.status.success(), "{log}");
    let refusals: Vec<&str> = log.lines().filter(|l| l.contains("refused a connection from 127.0.0.1")).collect();
    assert_eq!(refusals.len(), 1, "the refusal is logged once: {log}");
    assert!(refusals[0].contains("WARN") && refusals[0].contains("the most one address may hold"), "{log}");
    let late: Vec<&str> = log.lines().filter(|l| l.contains("no complete request headers within 1s")).collect();
    assert!(late.len() >= 2 && late.iter().all(|l| l.contains("WARN")), "each slow client is logged: {log}");
}

async fn a_request_in_flight_finishes_when_the_server_stops<S: Store>(db: TestDb<S>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut tokens = Tokens::default();
    tokens.insert(SOURCE, Role::Source, "shop").unwrap();
    let router = App::new(db.ledger.clone(), tokens, Vec::new(), unlimited()).router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(actionledger::serve::serve(listener, router, async {
        let _ = stopped.await;
    }));
    // A submission whose body is still arriving when the server is told to stop.
    let body = submission("inflight:1", &json!({ "n": 1 })).to_string();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/actions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {SOURCE}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body.as_bytes()[..10]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!server.is_finished(), "the server waits for the request in flight");
    assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "no new connection is accepted");
    stream.write_all(&body.as_bytes()[10..]).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    tokio::time::timeout(Duration::from_secs(5), server).await.expect("the server stops").unwrap().unwrap();
    assert_eq!(written(&db.ledger).await, (1, 0), "the request in flight was recorded");
}

async fn a_request_past_the_timeout_is_answered_503_with_nothing_written<S: Store>(db: TestDb<S>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let options = ServeOptions { timeout: Duration::from_millis(300), ..unlimited() };
    let base = start(&db.ledger, options).await;
    let addr = base.trim_start_matches("http://").to_owned();
    // A sender that stops halfway through its body holds no server task past the timeout.
    let body = submission("slow:1", &json!({ "n": 1 })).to_string();
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /v1/actions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {SOURCE}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body.as_bytes()[..10]).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut answer))
        .await
        .expect("answered without the rest of the body")
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("content-type: application/problem+json"), "{answer}");
    assert!(answer.contains("urn:actionledger:problem:timeout"), "{answer}");
    assert_eq!(written(&db.ledger).await, (0, 0));
}

/// A change the database refuses the server's login (a viewer's login, whose role may not write)
/// is the refusal the command line exits 3 for: 403 `not_permitted`, nothing changed, and no
/// Retry-After, since trying again cannot help.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_change_the_database_login_may_not_make_is_refused_never_try_again() {
    let Some((admin, url)) = crate::roles::ledger().await else { return };
    let key = "acme:order:ORD-7:create-task";
    admin.submit(&crate::support::order(key, r#"{"n":1}"#)).await.unwrap();
    let login = crate::roles::login_in(&admin, &url, "actionledger_viewer").await;
    let viewer = Ledger::new(actionledger::store::PostgresStore::open_with(&login, 2).await.unwrap());
    let base = start(&viewer, unlimited()).await;
    let response = client()
        .post(format!("{base}/v1/actions/{key}/cancel"))
        .bearer_auth(REVIEWER)
        .header("content-type", "application/json")
        .body(json!({ "reason": "the order was refunded", "version": 1 }).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 403);
    assert!(response.headers().get("retry-after").is_none(), "{:?}", response.headers());
    let problem: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    assert_eq!(problem["type"], json!("urn:actionledger:problem:not_permitted"), "{problem}");
    assert!(problem["detail"].as_str().unwrap().contains("trying again will not help"), "{problem}");
    let detail = admin.detail(&actionledger::domain::ActionKey::parse(key).unwrap()).await.unwrap();
    assert_eq!((detail.action.state, detail.audit.len()), (State::Pending, 1), "nothing changed");
}

async fn a_command_without_the_version_read_is_refused_428_and_if_match_carries_it<S: Store>(db: TestDb<S>) {
    let base = start(&db.ledger, unlimited()).await;
    let client = client();
    let key = "shop:order:8:create-task";
    let (status, _, _) =
        post(&client, &format!("{base}/v1/actions"), Some(SOURCE), &submission(key, &json!({ "n": 8 }))).await;
    assert_eq!(status, 201);
    let show = format!("{base}/v1/actions/{key}");
    let cancel = format!("{base}/v1/actions/{key}/cancel");
    let read = client.get(&show).bearer_auth(VIEWER).send().await.unwrap();
    let etag = read.headers().get("etag").expect("a read answers the version as its ETag").to_str().unwrap().to_owned();
    let document: Value = serde_json::from_str(&read.text().await.unwrap()).unwrap();
    assert_eq!(etag, format!("\"{}\"", document["action"]["version"]), "the ETag is the action's version");
    let unchanged = |db: &TestDb<S>| {
        let ledger = db.ledger.clone();
        async move {
            let detail = ledger.detail(&actionledger::domain::ActionKey::parse(key).unwrap()).await.unwrap();
            (detail.action.state, detail.audit.len())
        }
    };
    // Without the version read: 428, naming what is missing, and nothing changed.
    let reason = json!({ "reason": "the order was refunded" });
    for headers in [vec![], vec![("If-Match", "*".to_owned())]] {
        let (status, kind, problem) =
            call(&client, reqwest::Method::POST, &cancel, Some(REVIEWER), Some(reason.to_string()), &headers).await;
        assert_eq!((status, kind.as_str()), (428, "application/problem+json"), "{headers:?}: {problem}");
        assert_eq!(problem["type"], json!("urn:actionledger:problem:version_required"), "{problem}");
        assert_eq!(problem["missing"], json!("version"), "{problem}");
        assert!(problem["detail"].as_str().unwrap().contains("If-Match"), "{problem}");
    }
    assert_eq!(unchanged(&db).await, (State::Pending, 1), "a command without the version changed nothing");
    // Two different versions read: at most one is the action's, refused as a stale one is.
    let with_both = json!({ "reason": "refunded", "version": 1 }).to_string();
    let two = [("If-Match", "\"2\"".to_owned())];
    let (status, _, problem) =
        call(&client, reqwest::Method::POST, &cancel, Some(REVIEWER), Some(with_both), &two).await;
    assert_eq!((status, &problem["way_out"]), (409, &json!("read_again")), "{problem}");
    // An If-Match that is not one version is malformed.
    let weak = [("If-Match", "W/\"1\"".to_owned())];
    let (status, _, problem) =
        call(&client, reqwest::Method::POST, &cancel, Some(REVIEWER), Some(reason.to_string()), &weak).await;
    assert_eq!(status, 400, "{problem}");
    // A stale If-Match is the ledger's refusal, as a stale "version" is.
    let stale = [("If-Match", "\"9\"".to_owned())];
    let (status, _, problem) =
        call(&client, reqwest::Method::POST, &cancel, Some(REVIEWER), Some(reason.to_string()), &stale).await;
    assert_eq!((status, &problem["way_out"]), (409, &json!("read_again")), "{problem}");
    assert_eq!(unchanged(&db).await, (State::Pending, 1), "refused commands changed nothing");
    // The ETag read is enough: the command acts on what was read, in the token's person's name.
    let assign = format!("{base}/v1/actions/{key}/assign");
    let read_etag = [("If-Match", etag.clone())];
    let (status, _, done) =
        call(&client, reqwest::Method::POST, &assign, Some(REVIEWER), Some(reason.to_string()), &read_etag).await;
    assert_eq!(status, 200, "{done}");
    // The assignment moved the action on, so the same ETag no longer holds for a cancel.
    let (status, _, problem) =
        call(&client, reqwest::Method::POST, &cancel, Some(REVIEWER), Some(reason.to_string()), &read_etag).await;
    assert_eq!(status, 409, "{problem}");
    let again = client.get(&show).bearer_auth(VIEWER).send().await.unwrap();
    let fresh = again.headers().get("etag").unwrap().to_str().unwrap().to_owned();
    assert_ne!(fresh, etag);
    let (status, _, done) =
        call(&client, reqwest::Method::POST, &cancel, Some(REVIEWER), Some(reason.to_string()), &[("If-Match", fresh)])
            .await;
    assert_eq!((status, done["to"].as_str()), (200, Some("cancelled")), "{done}");
    let detail = db.ledger.detail(&actionledger::domain::ActionKey::parse(key).unwrap()).await.unwrap();
    assert_eq!(detail.action.state, State::Cancelled);
    assert_eq!(detail.audit.last().unwrap().actor, "Ana Lima");
}

/// A connection from `from` (any 127.x.y.z address reaches the server on 127.0.0.1) to `addr`.
async fn connect_from(from: &str, addr: std::net::SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(addr).await.unwrap()
}

/// A client that sends half a request line and then nothing.
async fn slow_client(from: &str, addr: std::net::SocketAddr) -> (tokio::net::TcpStream, Instant) {
    use tokio::io::AsyncWriteExt as _;
    let mut stream = connect_from(from, addr).await;
    stream.write_all(b"POST /v1/acti").await.unwrap();
    (stream, Instant::now())
}

/// Everything the server sends until it closes the connection, and how long that took.
async fn until_closed(stream: &mut tokio::net::TcpStream, within: Duration) -> (String, Instant) {
    use tokio::io::AsyncReadExt as _;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(within, stream.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the server closed the connection within {within:?}");
    (String::from_utf8_lossy(&answer).into_owned(), Instant::now())
}

/// One whole request over a fresh connection from `from`: the answer's text.
async fn whole_request(from: &str, addr: std::net::SocketAddr, request: &str) -> String {
    use tokio::io::AsyncWriteExt as _;
    let mut stream = connect_from(from, addr).await;
    stream.write_all(request.as_bytes()).await.unwrap();
    until_closed(&mut stream, Duration::from_secs(10)).await.0
}

async fn slow_clients_are_closed_at_the_header_timeout_and_capped_while_others_are_served<S: Store>(db: TestDb<S>) {
    let header_timeout = Duration::from_secs(1);
    let limits = ConnectionLimits { header_timeout, max_connections: 5, max_per_address: 3 };
    let addr = start_within(&db.ledger, unlimited(), limits).await;
    let submit = |key: &str| {
        let body = submission(key, &json!({ "n": 1 })).to_string();
        format!(
            "POST /v1/actions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {SOURCE}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    // One address holds its most connections, each sending its request line slowly.
    let mut slow = Vec::new();
    for _ in 0..3 {
        slow.push(slow_client("127.0.0.1", addr).await);
    }
    // One more from that address is answered 503 at once and closed (it sends nothing: a client
    // whose bytes are unread when the server closes may get a reset instead of the answer).
    let mut refused = connect_from("127.0.0.1", addr).await;
    let (answer, _) = until_closed(&mut refused, Duration::from_millis(500)).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "refused at once: {answer:?}");
    assert!(answer.contains("urn:actionledger:problem:too_many_connections"), "{answer}");
    // Another client is served meanwhile, and what it submits is recorded.
    let answer = whole_request("127.0.0.2", addr, &submit("slow:served")).await;
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    assert_eq!(written(&db.ledger).await, (1, 0));
    // Once the served connection has given its place back, two more slow ones fill the server,
    // and a client from yet another address is refused too: the cap in all.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..2 {
        slow.push(slow_client("127.0.0.3", addr).await);
    }
    let mut refused = connect_from("127.0.0.4", addr).await;
    let (answer, _) = until_closed(&mut refused, Duration::from_millis(500)).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "the cap in all: {answer:?}");
    // Every slow client is closed once the header timeout has passed, not before, and unanswered.
    for (stream, opened) in &mut slow {
        let (answer, closed) = until_closed(stream, header_timeout * 5).await;
        let held = closed.duration_since(*opened);
        assert!(held + Duration::from_millis(50) >= header_timeout, "closed after {held:?}: {answer:?}");
        assert!(!answer.contains("503"), "a slow client was accepted, then timed out: {answer:?}");
    }
    // Their places are given back: the first address is served again.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let answer = whole_request("127.0.0.1", addr, &submit("slow:after")).await;
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    assert_eq!(written(&db.ledger).await, (2, 0), "only the two whole requests were recorded");
}

async fn the_probes_answer_without_a_token_and_readiness_follows_the_database<S: Store + crate::db_faults::Starve>(
    db: TestDb<S>,
) {
    let base = start(&db.ledger, unlimited()).await;
    let client = client();
    let probe = |path: &'static str| {
        let (client, url) = (client.clone(), format!("{base}{path}"));
        async move {
            let response = client.get(url).send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    assert_eq!(probe("/healthz").await, (200, "alive\n".to_owned()), "no token needed");
    assert_eq!(probe("/readyz").await, (200, "ready\n".to_owned()));
    // A database that hands out no connection: not ready, said within the probe's patience, and
    // still alive (a restart would not help).
    let held = db.ledger.store().take_every_connection().await;
    let asked = std::time::Instant::now();
    let (status, why) = probe("/readyz").await;
    assert_eq!(status, 503, "{why}");
    assert!(why.starts_with("not ready: "), "{why}");
    assert!(asked.elapsed() < Duration::from_secs(5), "answered after {:?}", asked.elapsed());
    assert_eq!(probe("/healthz").await.0, 200);
    drop(held);
    assert_eq!(probe("/readyz").await, (200, "ready\n".to_owned()), "ready again");
}

/// `serve` on PostgreSQL that stops: a request is answered 503 with `Retry-After` within seconds
/// (not after the pool's 30 s), `/readyz` says not ready, and both recover once it is back. On a
/// server of its own, so that no other test loses its database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_503_within_seconds_while_postgresql_is_down_and_recovers() {
    let Some(cluster) = crate::support::pg::private_server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let made = hash_token(dir.path(), "a-token-of-the-board-0123456789\n", "viewer", "board");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    std::fs::write(dir.path().join("tokens.txt"), &made.stdout).unwrap();
    let migrated = actionledger(dir.path()).args(["--db", &cluster.url, "migrate"]).output().unwrap();
    assert!(migrated.status.success(), "{}", String::from_utf8_lossy(&migrated.stderr));
    let (_server, base) = serving(dir.path(), &cluster.url).await;
    let client = client();
    let figures = format!("{base}/v1/stats");
    let ask = |url: String| {
        let client = client.clone();
        async move {
            let asked = Instant::now();
            let response = client.get(url).bearer_auth("a-token-of-the-board-0123456789").send().await.unwrap();
            let retry_after = response.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
            (response.status().as_u16(), retry_after, asked.elapsed())
        }
    };
    assert_eq!(ask(figures.clone()).await.0, 200);

    cluster.stop().unwrap();
    let (status, retry_after, took) = ask(figures.clone()).await;
    assert_eq!((status, retry_after.as_deref()), (503, Some("1")), "unavailable, try again");
    assert!(took < Duration::from_secs(8), "answered after {took:?}, not the pool's 30 s");
    let (status, _, took) = ask(format!("{base}/readyz")).await;
    assert_eq!(status, 503);
    assert!(took < Duration::from_secs(5), "readiness answered after {took:?}");

    cluster.start().unwrap();
    let mut back = None;
    for _ in 0..50 {
        let (status, _, _) = ask(figures.clone()).await;
        if status == 200 {
            back = Some(status);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(back, Some(200), "answers again once PostgreSQL is back");
}

/// The binary serving the ledger at `db` with the tokens of `dir/tokens.txt`, once it answers; its
/// base URL.
pub(crate) async fn serving(dir: &std::path::Path, db: &str) -> (KilledOnDrop, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("127.0.0.1:{port}");
    let server = KilledOnDrop(
        actionledger(dir)
            .args(["--db", db, "serve", "--listen", &listen, "--tokens", "tokens.txt"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let base = format!("http://{listen}");
    for _ in 0..200 {
        if client().get(format!("{base}/healthz")).send().await.is_ok() {
            return (server, base);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("serve did not start on {db}");
}

/// A child process that is killed when the test ends, however it ends.
pub(crate) struct KilledOnDrop(pub(crate) std::process::Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The login `serve grant` makes is all `serve` needs on a role-managed ledger: it submits as a
/// worker and runs each reviewer token's commands as a reviewer signing as that token's name,
/// and the database still holds each to its own duty. A reviewer token the grant did not name is
/// refused 403 with the ledger's reason, never a 5xx to try again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_granted_by_serve_grant_is_all_serve_needs_and_its_refusals_are_403() {
    let Some((admin, admin_url)) = crate::roles::ledger().await else { return };
    let login = format!("{}_api", crate::roles::database_name(&admin_url));
    crate::roles::exec(&admin, &format!("CREATE ROLE {login} LOGIN PASSWORD 'api-secret'")).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut lines = String::new();
    for (token, role, name) in [
        ("a-token-of-the-shop-0123456789", "source", "shop"),
        ("a-token-of-ana-lima-0123456789", "reviewer", "Ana Lima"),
    ] {
        let made = hash_token(dir.path(), token, role, name);
        assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
        lines.push_str(&String::from_utf8(made.stdout).unwrap());
    }
    std::fs::write(dir.path().join("granted.txt"), &lines).unwrap();
    let granted = actionledger(dir.path())
        .args(["--db", &admin_url, "serve", "grant", &login, "--tokens", "granted.txt"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&granted.stdout);
    assert!(granted.status.success(), "{said}{}", String::from_utf8_lossy(&granted.stderr));
    assert!(said.contains(&format!("{login} may sign as: Ana Lima")), "{said}");
    let again = actionledger(dir.path())
        .args(["--db", &admin_url, "serve", "grant", &login, "--tokens", "granted.txt"])
        .output()
        .unwrap();
    assert!(again.status.success(), "granting again is safe: {}", String::from_utf8_lossy(&again.stderr));
    let nobody = actionledger(dir.path())
        .args(["--db", &admin_url, "serve", "grant", "no_such_login", "--tokens", "granted.txt"])
        .output()
        .unwrap();
    assert_eq!(nobody.status.code(), Some(2), "a usage error: {nobody:?}");
    assert!(
        String::from_utf8_lossy(&nobody.stderr).contains("there is no PostgreSQL login no_such_login"),
        "{nobody:?}"
    );
    let on_sqlite = actionledger(dir.path())
        .args(["--db", "sqlite://ledger.db", "serve", "grant", &login, "--tokens", "granted.txt"])
        .output()
        .unwrap();
    assert_eq!(on_sqlite.status.code(), Some(2), "a usage error: {on_sqlite:?}");
    assert!(String::from_utf8_lossy(&on_sqlite.stderr).contains("SQLite has no logins"), "{on_sqlite:?}");
    assert!(!dir.path().join("ledger.db").exists(), "nothing created");

    // A reviewer token added after the grant: its name is not one the login may sign as.
    let late = hash_token(dir.path(), "a-token-of-cy-dale-0123456789", "reviewer", "Cy Dale");
    lines.push_str(&String::from_utf8(late.stdout).unwrap());
    std::fs::write(dir.path().join("tokens.txt"), &lines).unwrap();
    let api_url = crate::roles::url_as(&admin_url, &login, "api-secret");
    let (_server, base) = serving(dir.path(), &api_url).await;
    let client = client();
    let key = "acme:order:ORD-9:create-task";
    let (status, _, created) = post(
        &client,
        &format!("{base}/v1/actions"),
        Some("a-token-of-the-shop-0123456789"),
        &submission(key, &json!({"n": 1})),
    )
    .await;
    assert_eq!(status, 201, "{created}");

    let cancel = |token: &'static str, reason: &'static str| {
        let client = client.clone();
        let url = format!("{base}/v1/actions/{key}/cancel");
        async move {
            let response = client
                .post(url)
                .bearer_auth(token)
                .header("content-type", "application/json")
                .body(json!({ "reason": reason, "version": 1 }).to_string())
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let retry_after = response.headers().get("retry-after").cloned();
            (status, retry_after, serde_json::from_str::<Value>(&response.text().await.unwrap()).unwrap())
        }
    };
    let (status, retry_after, problem) = cancel("a-token-of-cy-dale-0123456789", "not my order").await;
    assert_eq!((status, retry_after), (403, None), "{problem}");
    assert_eq!(problem["type"], json!("urn:actionledger:problem:not_permitted"), "{problem}");
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.contains(&format!("login {login} may not sign as Cy Dale")), "the ledger's reason: {detail}");
    let action = admin.detail(&actionledger::domain::ActionKey::parse(key).unwrap()).await.unwrap();
    assert_eq!((action.action.state, action.audit.len()), (State::Pending, 1), "nothing changed");

    let (status, _, done) = cancel("a-token-of-ana-lima-0123456789", "the order was refunded").await;
    assert_eq!(status, 200, "{done}");
    let action = admin.detail(&actionledger::domain::ActionKey::parse(key).unwrap()).await.unwrap();
    assert_eq!(action.action.state, State::Cancelled);
    let entry = action.audit.last().unwrap();
    assert_eq!(entry.actor, "Ana Lima", "signed as the token's name: {entry:?}");
}

/// The value of one sample (`name{labels} value`) in a scrape, as written; "" when absent.
fn sample<'s>(scrape: &'s str, series: &str) -> &'s str {
    scrape.lines().find_map(|line| line.strip_prefix(series).and_then(|rest| rest.strip_prefix(' '))).unwrap_or("")
}

const OBSERVED_SHOP: &str = "obs-shop-token-0123456789";
const OBSERVED_FEED: &str = "obs-feed-token-0123456789";
const OBSERVED_DASHBOARD: &str = "obs-dashboard-token-0123456789";
const OBSERVED_UNKNOWN: &str = "obs-unknown-token-0123456789";
const OBSERVED_HOOK_SECRET: &str = "obs-hook-secret-0123456789";

/// The binary serving the ledger at `db` from `dir` with JSON logs, a rate of 2 requests per
/// token, the tokens `shop` and `feed` (source) and `dashboard` (viewer), a signed intake `signed`,
/// and `--metrics-addr`; returns it once it answers, with its address and its metrics' address.
async fn observed_serve(
    dir: &std::path::Path,
    db: &str,
) -> (crate::support::process::WorkerProcess, std::net::SocketAddr, String) {
    use crate::support::process::{WorkerProcess, command};
    let hash = actionledger::serve::auth::hash_token;
    let tokens = format!(
        "{} source shop\n{} source feed\n{} viewer dashboard\n",
        hash(OBSERVED_SHOP),
        hash(OBSERVED_FEED),
        hash(OBSERVED_DASHBOARD)
    );
    std::fs::write(dir.join("tokens.txt"), tokens).unwrap();
    std::fs::write(
        dir.join("actionledger.toml"),
        r#"
        [intake.signed]
        key = "shop:order:{{body.id}}:create-task"
        signature = { secret_env = "OBS_HOOK_SECRET", header = "X-Shop-Signature", prefix = "sha256=" }
        "#,
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut serve = command(dir, db);
    serve
        .args(["--log-format", "json", "serve", "--listen", &addr.to_string(), "--tokens", "tokens.txt"])
        .args(["--config", "actionledger.toml", "--rate", "0.001", "--burst", "2", "--metrics-addr", "127.0.0.1:0"])
        .env("OBS_HOOK_SECRET", OBSERVED_HOOK_SECRET);
    let server = WorkerProcess::spawn(serve);
    let metrics = server.metrics_addr().await;
    let deadline = Instant::now() + Duration::from_mins(1);
    while client().get(format!("http://{addr}/healthz")).send().await.is_err() {
        assert!(Instant::now() < deadline, "serve never answered: {}", server.stderr());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (server, addr, metrics)
}

/// An operator can see each request and each refusal: the binary, with JSON logs and
/// `--metrics-addr`, answers a submission, a duplicate, a 429, two 401s, a 403, a 413, a webhook
/// with a bad signature and an unknown path. Each leaves a log line searchable by its key, token
/// name or intake, the counters at `/metrics` count each by route and status and each refusal by
/// reason, and no token, secret or signature is anywhere in the log.
async fn the_binary_logs_and_counts_each_request_and_each_refusal<S: Store>(db: TestDb<S>) {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, addr, metrics) = observed_serve(dir.path(), &db.url).await;
    let bad_signature = "5ab7".repeat(16);
    let client = client();
    let base = format!("http://{addr}");
    let order = json!({ "key": "obs:serve:1", "payload": {"n": 1}, "event_id": "evt-obs-1", "destination": "crm" });
    let actions = format!("{base}/v1/actions");
    let forwarded = [("X-Forwarded-For", "203.0.113.9".to_owned())];
    let (created, ..) =
        call(&client, reqwest::Method::POST, &actions, Some(OBSERVED_SHOP), Some(order.to_string()), &forwarded).await;
    assert_eq!(created, 201);
    assert_eq!(post(&client, &actions, Some(OBSERVED_SHOP), &order).await.0, 200, "a duplicate");
    assert_eq!(post(&client, &actions, Some(OBSERVED_SHOP), &order).await.0, 429, "the burst of 2 is used up");
    assert_eq!(get(&client, &actions, Some(OBSERVED_UNKNOWN)).await.0, 401);
    assert_eq!(get(&client, &actions, None).await.0, 401);
    assert_eq!(post(&client, &actions, Some(OBSERVED_DASHBOARD), &order).await.0, 403);
    let oversized = format!(
        "POST /v1/actions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {OBSERVED_FEED}\r\n\
         Content-Type: application/json\r\nContent-Length: 999999999\r\n\r\n"
    );
    let answer = whole_request("127.0.0.1", addr, &oversized).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    let signed = [("X-Shop-Signature", format!("sha256={bad_signature}"))];
    let hook = format!("{base}/v1/hooks/signed");
    let (refused, ..) =
        call(&client, reqwest::Method::POST, &hook, None, Some(r#"{"id":7}"#.to_owned()), &signed).await;
    assert_eq!(refused, 401);
    assert_eq!(get(&client, &format!("{base}/v1/no-such-route-x7"), Some(OBSERVED_SHOP)).await.0, 404);

    let scrape = client.get(format!("http://{metrics}/metrics")).send().await.unwrap().text().await.unwrap();
    the_scrape_counts_each_request_and_refusal(&scrape);
    crate::support::promtool::assert_metrics_clean(&scrape);
    crate::observability::scrapes_follow_accept(&format!("http://{metrics}/metrics")).await;

    server.send_sigterm();
    let exited = server.exit_within(Duration::from_mins(1)).await;
    assert!(exited.status.success(), "{}", exited.stderr);
    let log = exited.stderr;
    let hash = actionledger::serve::auth::hash_token;
    for secret in [OBSERVED_SHOP, OBSERVED_FEED, OBSERVED_DASHBOARD, OBSERVED_UNKNOWN, OBSERVED_HOOK_SECRET] {
        assert!(!log.contains(secret), "{secret} is in the log:\n{log}");
        assert!(!log.contains(&hash(secret)[..20]), "more than the first digits of a hash is in the log:\n{log}");
    }
    assert!(!log.contains(&bad_signature), "the signature sent is in the log:\n{log}");
    the_log_shows_each_request_and_refusal(&log);
}

/// The counters of the requests and refusals `the_binary_logs_and_counts_...` makes, exactly,
/// and a scrape every line of which is a comment or a sample.
fn the_scrape_counts_each_request_and_refusal(scrape: &str) {
    let requests = |labels: &str| sample(scrape, &format!("actionledger_http_requests_total{{{labels}}}")).to_owned();
    for (labels, count) in [
        (r#"method="POST",route="/v1/actions",status="201""#, "1"),
        (r#"method="POST",route="/v1/actions",status="200""#, "1"),
        (r#"method="POST",route="/v1/actions",status="429""#, "1"),
        (r#"method="GET",route="/v1/actions",status="401""#, "2"),
        (r#"method="POST",route="/v1/actions",status="403""#, "1"),
        (r#"method="POST",route="/v1/actions",status="413""#, "1"),
        (r#"method="POST",route="/v1/hooks/{name}",status="401""#, "1"),
        (r#"method="GET",route="unmatched",status="404""#, "1"),
    ] {
        assert_eq!(requests(labels), count, "{labels}:\n{scrape}");
    }
    for (reason, count) in [
        ("rate", "1"),
        ("unknown_token", "1"),
        ("no_token", "1"),
        ("role", "1"),
        ("too_large", "1"),
        ("signature", "1"),
    ] {
        let series = format!("actionledger_http_refusals_total{{reason=\"{reason}\"}}");
        assert_eq!(sample(scrape, &series), count, "{series}:\n{scrape}");
    }
    let latencies = r#"actionledger_http_request_duration_seconds_count{method="POST",route="/v1/actions"}"#;
    assert_eq!(sample(scrape, latencies), "5", "{scrape}");
    assert!(!scrape.contains("no-such-route"), "a path sent is never a label");
    for line in scrape.lines().filter(|line| !line.starts_with('#')) {
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("not a sample: {line}"));
        assert!(value.parse::<f64>().is_ok() && !series.is_empty(), "not a sample: {line}");
    }
}

/// The JSON log of the requests `the_binary_logs_and_counts_...` makes: a line for each, found by
/// the key, the token's name or the intake a person would search for.
fn the_log_shows_each_request_and_refusal(log: &str) {
    let lines: Vec<Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not one JSON object ({e}): {line}")))
        .collect();
    let find = |what: &str, matches: &dyn Fn(&Value) -> bool| -> Value {
        lines.iter().find(|line| matches(line)).cloned().unwrap_or_else(|| panic!("no line for {what}:\n{log}"))
    };
    // A submission, searched for by its key.
    let by_key: Vec<&Value> = lines.iter().filter(|line| line["key"] == "obs:serve:1").collect();
    assert!(by_key.len() >= 2, "the 201 and the 200 name the key: {by_key:?}");
    let submitted = find("the submission", &|line| line["key"] == "obs:serve:1" && line["status"] == 201);
    println!("a request's line: {submitted}");
    assert_eq!(submitted["level"], "INFO");
    assert_eq!(submitted["message"], "answered");
    assert_eq!(submitted["event_id"], "evt-obs-1");
    assert_eq!(submitted["token"], "shop");
    assert_eq!(submitted["outcome"], "created");
    assert_eq!(submitted["span"]["method"], "POST");
    assert_eq!(submitted["span"]["route"], "/v1/actions");
    assert_eq!(submitted["span"]["forwarded_for"], "203.0.113.9");
    assert!(submitted["span"]["client"].as_str().is_some_and(|c| c.starts_with("127.0.0.1:")), "{submitted}");
    assert!(submitted["duration_ms"].as_f64().is_some(), "{submitted}");
    // A 429, searched for by the token's name.
    let over_rate = find("the 429", &|line| line["refusal"] == "rate");
    println!("a refusal's line: {over_rate}");
    assert_eq!(over_rate["level"], "WARN");
    assert_eq!(over_rate["token"], "shop");
    assert!(over_rate["message"].as_str().unwrap().contains("the token shop (429)"), "{over_rate}");
    find("the 429's answer", &|line| line["status"] == 429 && line["token"] == "shop");
    // A bad signature, searched for by the intake's name.
    let forged = find("the bad signature", &|line| line["refusal"] == "signature");
    println!("a signature's refusal: {forged}");
    assert_eq!((forged["level"].as_str(), forged["intake"].as_str()), (Some("WARN"), Some("signed")));
    assert!(forged["reason"].as_str().unwrap().contains("does not match"), "{forged}");
    assert_eq!(forged["span"]["route"], "/v1/hooks/{name}");
    find("the bad signature's answer", &|line| line["status"] == 401 && line["intake"] == "signed");
    // The other refusals.
    let unknown = find("the unknown token", &|line| line["refusal"] == "unknown_token");
    assert_eq!(unknown["token_hash"], &actionledger::serve::auth::hash_token(OBSERVED_UNKNOWN)[..15]);
    find("no token", &|line| line["refusal"] == "no_token" && line["level"] == "WARN");
    find("the role", &|line| line["refusal"] == "role" && line["token"] == "dashboard");
    find("the body size", &|line| line["refusal"] == "too_large" && line["token"] == "feed");
    find("the unknown path", &|line| line["status"] == 404 && line["span"]["route"] == "unmatched");
}
