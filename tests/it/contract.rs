//! The HTTP API's contract (`/v1/openapi.json`) against what the server does, on both stores:
//! every answer is the documented one for its status, member for member; the server refuses
//! exactly what the document refuses; schemathesis, a client nobody here wrote, finds nothing
//! against the binary; and a client generated from the document submits, reads and commands.

use crate::serve::{
    EXECUTOR, REVIEWER, SOURCE, VIEWER, actionledger, call, client, get, hash_token, post, start, submission,
    unlimited, written,
};
use crate::support::TestDb;
use actionledger::serve::contract;
use actionledger::store::Store;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

conformance!(every_answer_is_the_documented_one_member_for_member, the_server_refuses_what_the_document_refuses);

/// One answer of the server, as a client saw it.
struct Answer {
    status: u16,
    media_type: String,
    headers: reqwest::header::HeaderMap,
    body: String,
}

async fn send(request: reqwest::RequestBuilder) -> Answer {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let media_type = headers
        .get("content-type")
        .map(|v| v.to_str().unwrap().split(';').next().unwrap().trim().to_owned())
        .unwrap_or_default();
    Answer { status, media_type, headers, body: response.text().await.unwrap() }
}

/// The document's response for `status` of the operation `method path`, its `$ref` resolved.
fn documented_response(method: &str, path: &str, status: u16) -> Option<&'static Value> {
    let response = contract::document()["paths"][path][method]["responses"].get(status.to_string())?;
    Some(contract::resolve(response))
}

/// Asserts that `answer` is what the document says `method path` answers with its status: a
/// documented status, the documented media type and headers, a body its schema allows, and every
/// member the schema names present (the documents the server writes leave none out).
fn assert_documented(method: &str, path: &str, answer: &Answer) {
    let what = format!("{method} {path} answered {}: {}", answer.status, answer.body);
    let response = documented_response(method, path, answer.status).unwrap_or_else(|| panic!("undocumented: {what}"));
    let content = response["content"].as_object().unwrap_or_else(|| panic!("no content documented: {what}"));
    let media = content.get(&answer.media_type).unwrap_or_else(|| {
        panic!("{what}: the media type {:?} is not among {:?}", answer.media_type, content.keys().collect::<Vec<_>>())
    });
    for (name, header) in response["headers"].as_object().into_iter().flatten() {
        if header["required"] == true {
            assert!(answer.headers.contains_key(name.as_str()), "{what}: the header {name} is missing");
        }
    }
    if answer.media_type.ends_with("json") {
        let body: Value = serde_json::from_str(&answer.body).unwrap_or_else(|e| panic!("{what}: not JSON: {e}"));
        let schema = &media["schema"];
        if let Err(mismatch) = contract::check_against(schema, &body) {
            panic!("{what}: the body departs from its schema: {mismatch}");
        }
        every_member_present(schema, &body, "", &what);
    }
}

/// Every member a closed schema names is in the value, all the way down.
fn every_member_present(schema: &Value, value: &Value, at: &str, what: &str) {
    let schema = contract::resolve(schema);
    if let Some(alternatives) = schema.get("anyOf").and_then(Value::as_array) {
        let chosen = alternatives.iter().find(|a| contract::check_against(a, value).is_ok()).expect("one fits");
        return every_member_present(chosen, value, at, what);
    }
    match value {
        Value::Object(members) => {
            if contract::is_closed(schema) && schema.get("properties").is_some_and(|p| p != &json!({})) {
                let required: Vec<&str> = required_of(schema);
                let mut named = contract::member_names(schema);
                named.retain(|n| !members.contains_key(n) && required.contains(&n.as_str()));
                assert!(named.is_empty(), "{what}: at {at:?} the members {named:?} are missing");
            }
            let properties = property_schemas(schema);
            for (name, member) in members {
                if let Some(property) = properties.get(name) {
                    every_member_present(property, member, &format!("{at}/{name}"), what);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter().enumerate() {
                    every_member_present(item_schema, item, &format!("{at}/{index}"), what);
                }
            }
        }
        _ => {}
    }
}

fn required_of(schema: &Value) -> Vec<&str> {
    let mut required: Vec<&str> =
        schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    for part in schema["allOf"].as_array().into_iter().flatten() {
        required.extend(required_of(contract::resolve(part)));
    }
    required
}

fn property_schemas(schema: &Value) -> BTreeMap<String, &Value> {
    let mut properties: BTreeMap<String, &Value> =
        schema["properties"].as_object().into_iter().flatten().map(|(n, s)| (n.clone(), s)).collect();
    for part in schema["allOf"].as_array().into_iter().flatten() {
        properties.extend(property_schemas(contract::resolve(part)));
    }
    properties
}

/// Runs the worker against a simulated CRM until nothing is left to do, so that actions have
/// attempts with the destination's evidence.
async fn work_off<S: Store>(db: &TestDb<S>) {
    crate::support::crm::drained_at_a_new_crm(&db.ledger, "contract-worker", 2).await;
}

/// A POST of `body` as JSON to `base` + `path` with `token`.
fn post_json(client: &reqwest::Client, base: &str, path: &str, token: &str, body: &Value) -> reqwest::RequestBuilder {
    client
        .post(format!("{base}{path}"))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body.to_string())
}

async fn every_answer_is_the_documented_one_member_for_member<S: Store>(db: TestDb<S>) {
    let base = start(&db.ledger, unlimited()).await;
    let client = client();
    let json_post = |path: &str, token: &str, body: &Value| post_json(&client, &base, path, token, body);
    let check = |method: &str, path: &str, answer: &Answer| assert_documented(method, path, answer);
    let submit = "/v1/actions";
    let first = json!({ "key": "shop:order:1:create-task", "payload": { "n": 1 }, "destination": "crm",
        "event_id": "ev-1", "source": "shop", "source_version": 3 });
    check("post", submit, &send(json_post(submit, SOURCE, &first)).await);
    check("post", submit, &send(json_post(submit, SOURCE, &first)).await);
    let batch = json!({ "actions": [submission("shop:order:2:create-task", &json!({ "n": 2 })),
        submission("shop:order:2:create-task", &json!({ "n": 2 })), submission("a key with spaces", &json!({}))] });
    let answer = send(json_post("/v1/actions:batch", SOURCE, &batch)).await;
    check("post", "/v1/actions:batch", &answer);
    work_off(&db).await;
    // A different payload for a settled action: a proposal, answered 409 with the action.
    let changed =
        json!({ "key": "shop:order:1:create-task", "payload": { "n": 10 }, "destination": "crm", "source_version": 4 });
    let answer = send(json_post(submit, SOURCE, &changed)).await;
    assert_eq!(answer.status, 409, "{}", answer.body);
    check("post", submit, &answer);
    let in_batch = send(json_post("/v1/actions:batch", SOURCE, &json!({ "actions": [changed] }))).await;
    assert!(in_batch.body.contains("\"status\":409"), "{}", in_batch.body);
    check("post", "/v1/actions:batch", &in_batch);
    // An action that waits on a cancelled one: blocked.
    let cancelled = submission("shop:order:3:create-task", &json!({ "n": 3 }));
    check("post", submit, &send(json_post(submit, SOURCE, &cancelled)).await);
    let mut waiting = submission("shop:order:3:notify", &json!({ "n": 3 }));
    waiting["after"] = json!("shop:order:3:create-task");
    check("post", submit, &send(json_post(submit, SOURCE, &waiting)).await);
    let command = "/v1/actions/{key}/{command}";
    let cancel = json!({ "reason": "the order was refunded", "version": 1 });
    let answer = send(json_post("/v1/actions/shop:order:3:create-task/cancel", REVIEWER, &cancel)).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    check("post", command, &answer);
    let assign = json!({ "reason": "mine to check", "version": 0, "to": "Bea Costa" });
    let answer = send(json_post("/v1/actions/shop:order:1:create-task/assign", REVIEWER, &assign)).await;
    assert_eq!(answer.status, 409, "a version the action moved on from: {}", answer.body);
    check("post", command, &answer);
    let answer =
        send(json_post("/v1/actions/shop:order:1:create-task/assign", REVIEWER, &json!({ "reason": "mine" }))).await;
    assert_eq!(answer.status, 428, "{}", answer.body);
    check("post", command, &answer);
    let resolve = json!({ "reason": "checked", "version": 1 });
    let answer = send(json_post("/v1/actions/shop:order:2:create-task/resolve", REVIEWER, &resolve)).await;
    assert_eq!(answer.status, 422, "{}", answer.body);
    check("post", command, &answer);
    let answer = send(json_post("/v1/actions/shop:order:2:create-task/archive", REVIEWER, &resolve)).await;
    assert_eq!(answer.status, 404, "{}", answer.body);
    check("post", command, &answer);
    // The reads, with every kind of member filled in somewhere.
    let read = |path: String, token: &str| client.get(format!("{base}{path}")).bearer_auth(token);
    for key in
        ["shop:order:1:create-task", "shop:order:2:create-task", "shop:order:3:notify", "shop:order:3:create-task"]
    {
        let answer = send(read(format!("/v1/actions/{key}"), VIEWER)).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        check("get", "/v1/actions/{key}", &answer);
    }
    let detail: Value =
        serde_json::from_str(&send(read("/v1/actions/shop:order:1:create-task".into(), VIEWER)).await.body).unwrap();
    assert!(!detail["attempts"].as_array().unwrap().is_empty() && !detail["proposals"].as_array().unwrap().is_empty());
    assert!(detail["attempts"][0]["evidence"]["status"].is_i64(), "{detail}");
    let listed = send(read("/v1/actions?limit=10".into(), VIEWER)).await;
    check("get", "/v1/actions", &listed);
    assert!(listed.body.contains("\"after_state\":\"cancelled\""), "a blocked action is listed: {}", listed.body);
    check("get", "/v1/actions", &send(read("/v1/actions?state=pending&limit=1".into(), VIEWER)).await);
    check("get", "/v1/refused", &send(read("/v1/refused".into(), VIEWER)).await);
    check("get", "/v1/stats", &send(read("/v1/stats".into(), VIEWER)).await);
    check("get", "/v1/openapi.json", &send(client.get(format!("{base}/v1/openapi.json"))).await);
    check("get", "/healthz", &send(client.get(format!("{base}/healthz"))).await);
    check("get", "/readyz", &send(client.get(format!("{base}/readyz"))).await);
    let hook = client
        .post(format!("{base}/v1/hooks/orders"))
        .bearer_auth(SOURCE)
        .header("content-type", "application/json")
        .header("X-Event-Id", "hook-1")
        .body(json!({ "n": 7 }).to_string());
    check("post", "/v1/hooks/{name}", &send(hook).await);
    refusals_are_documented_problems(&base, &client, &first).await;
    register_answers_are_documented(&base, &client).await;
}

/// The register's answers, each decision and refusal, as the document has them.
async fn register_answers_are_documented(base: &str, client: &reqwest::Client) {
    let json_post = |path: &str, body: &Value| post_json(client, base, path, EXECUTOR, body);
    let begin = "/v1/actions/{key}:begin";
    let (finish, heartbeat) = ("/v1/actions/{key}:finish", "/v1/actions/{key}:heartbeat");
    let payload = json!({ "payload": { "n": 20 }, "lease_seconds": 30 });
    let proceed = send(json_post("/v1/actions/shop:order:20:mail:begin", &payload)).await;
    assert!(proceed.body.contains("\"decision\":\"proceed\""), "{}", proceed.body);
    assert_documented("post", begin, &proceed);
    let wait = send(json_post("/v1/actions/shop:order:20:mail:begin", &payload)).await;
    assert!(wait.body.contains("\"decision\":\"wait\""), "{}", wait.body);
    assert_documented("post", begin, &wait);
    let conflict = send(json_post("/v1/actions/shop:order:20:mail:begin", &json!({ "payload": { "n": 21 } }))).await;
    assert!(conflict.body.contains("\"decision\":\"conflict\""), "{}", conflict.body);
    assert_documented("post", begin, &conflict);
    let version = serde_json::from_str::<Value>(&proceed.body).unwrap()["claim"]["ownership_version"].clone();
    let renewed =
        send(json_post("/v1/actions/shop:order:20:mail:heartbeat", &json!({ "ownership_version": version }))).await;
    assert_eq!(renewed.status, 200, "{}", renewed.body);
    assert_documented("post", heartbeat, &renewed);
    let lost = send(json_post("/v1/actions/shop:order:20:mail:heartbeat", &json!({ "ownership_version": 9 }))).await;
    assert_eq!(lost.status, 409, "{}", lost.body);
    assert_documented("post", heartbeat, &lost);
    let unusable = json!({ "ownership_version": version, "outcome": "completed" });
    let refused = send(json_post("/v1/actions/shop:order:20:mail:finish", &unusable)).await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert_documented("post", finish, &refused);
    let done = json!({ "ownership_version": version, "outcome": "completed", "destination_id": "r-20",
        "evidence": { "status": 201, "body": "{}" } });
    let applied = send(json_post("/v1/actions/shop:order:20:mail:finish", &done)).await;
    assert_eq!(applied.status, 200, "{}", applied.body);
    assert_documented("post", finish, &applied);
    let again = send(json_post("/v1/actions/shop:order:20:mail:finish", &done)).await;
    assert!(again.body.contains("already_finished"), "{}", again.body);
    assert_documented("post", finish, &again);
    let fenced = json!({ "ownership_version": 7, "outcome": "unknown", "reason": "timed out" });
    let late = send(json_post("/v1/actions/shop:order:20:mail:finish", &fenced)).await;
    assert_eq!(late.status, 409, "{}", late.body);
    assert_documented("post", finish, &late);
    let skipped = send(json_post("/v1/actions/shop:order:20:mail:begin", &payload)).await;
    assert!(skipped.body.contains("\"decision\":\"done\"") && skipped.body.contains("r-20"), "{}", skipped.body);
    assert_documented("post", begin, &skipped);
    let forbidden = send(post_json(client, base, "/v1/actions/shop:order:21:mail:begin", SOURCE, &payload)).await;
    assert_eq!(forbidden.status, 403);
    assert_documented("post", begin, &forbidden);
    let claims = send(json_post("/v1/claims", &json!({ "limit": 3, "lease_seconds": 30 }))).await;
    assert!(claims.body.contains("\"claims\":[{"), "pending crm actions are claimed: {}", claims.body);
    assert_documented("post", "/v1/claims", &claims);
}

/// Each refusal is a problem of its documented status, and a method a route does not take a
/// problem too.
async fn refusals_are_documented_problems(base: &str, client: &reqwest::Client, first: &Value) {
    let submit = "/v1/actions";
    let json_post = |path: &str, token: &str, body: &Value| post_json(client, base, path, token, body);
    let read = |path: String, token: &str| client.get(format!("{base}{path}")).bearer_auth(token);
    // The refusals, each a problem of its documented status.
    let refusals = [
        ("post", submit, send(client.post(format!("{base}{submit}")).body("{}")).await, 401),
        ("post", submit, send(json_post(submit, VIEWER, first)).await, 403),
        ("post", submit, send(json_post(submit, SOURCE, &json!(["shop:order:9", {}]))).await, 400),
        ("post", submit, send(json_post(submit, SOURCE, &submission("key with spaces", &json!({})))).await, 422),
        ("post", submit, send(client.post(format!("{base}{submit}")).bearer_auth(SOURCE).body("{}")).await, 415),
        ("get", "/v1/actions/{key}", send(read("/v1/actions/shop:order:404".into(), VIEWER)).await, 404),
        ("get", "/v1/actions/{key}", send(read("/v1/actions/%FF%FE".into(), VIEWER)).await, 400),
        ("get", "/v1/actions", send(read("/v1/actions?limit=0".into(), VIEWER)).await, 400),
        ("post", "/v1/hooks/{name}", send(json_post("/v1/hooks/nothing", SOURCE, &json!({}))).await, 404),
    ];
    for (method, path, answer, status) in &refusals {
        assert_eq!(answer.status, *status, "{method} {path}: {}", answer.body);
        assert_documented(method, path, answer);
    }
    // A method a route does not take: a problem too, with the methods it does take.
    let answer = send(client.delete(format!("{base}/v1/actions")).bearer_auth(REVIEWER)).await;
    assert_eq!((answer.status, answer.media_type.as_str()), (405, "application/problem+json"), "{}", answer.body);
    let allow = answer.headers.get("allow").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    assert!(allow.contains("GET") && allow.contains("POST"), "Allow: {allow}");
    contract::check_value("Problem", &serde_json::from_str(&answer.body).unwrap()).unwrap();
}

async fn the_server_refuses_what_the_document_refuses<S: Store>(db: TestDb<S>) {
    let base = start(&db.ledger, unlimited()).await;
    let client = client();
    let url = format!("{base}/v1/actions");
    let refuse = |body: Value, pointer: &'static str| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let (status, kind, problem) = post(&client, &url, Some(SOURCE), &body).await;
            assert_eq!((status, kind.as_str()), (400, "application/problem+json"), "{body}: {problem}");
            assert_eq!(problem["pointer"], pointer, "{body}: {problem}");
        }
    };
    let order = |more: Value| {
        let mut body = json!({ "key": "shop:order:1:create-task", "payload": { "n": 1 } });
        body.as_object_mut().unwrap().extend(more.as_object().unwrap().clone());
        body
    };
    refuse(json!(["shop:order:1:create-task", { "n": 1 }]), "").await;
    refuse(json!("shop:order:1:create-task"), "").await;
    refuse(json!({ "key": "shop:order:1:create-task" }), "").await;
    refuse(order(json!({ "colour": "blue" })), "").await;
    for member in ["key", "event_id", "source", "destination", "after"] {
        let mut body = order(json!({}));
        body[member] = json!("");
        refuse(body, if member == "key" { "/key" } else { leak(format!("/{member}")) }).await;
    }
    refuse(order(json!({ "event_id": null })), "/event_id").await;
    refuse(order(json!({ "source_version": -1 })), "/source_version").await;
    let beyond = r#"{"key": "shop:order:1:create-task", "payload": {}, "source_version": 9223372036854775808}"#;
    let (status, _, problem) =
        call(&client, reqwest::Method::POST, &url, Some(SOURCE), Some(beyond.to_owned()), &[]).await;
    assert_eq!((status, &problem["pointer"]), (400, &json!("/source_version")), "{problem}");
    // A batch item without a payload, or with a member the document does not name, refuses the
    // whole batch and names the item.
    let batch = format!("{base}/v1/actions:batch");
    for item in [json!({ "key": "shop:order:2:create-task" }), order(json!({ "colour": "blue" }))] {
        let body = json!({ "actions": [order(json!({})), item] });
        let (status, _, problem) = post(&client, &batch, Some(SOURCE), &body).await;
        assert_eq!((status, &problem["pointer"]), (400, &json!("/actions/1")), "{problem}");
    }
    let (status, _, problem) = post(&client, &batch, Some(SOURCE), &json!({ "actions": [], "more": [] })).await;
    assert_eq!(status, 400, "{problem}");
    // A command's body too.
    let command = format!("{base}/v1/actions/shop:order:1:create-task/cancel");
    for body in [
        json!({ "reason": "", "version": 1 }),
        json!({ "reason": "refunded", "version": 1, "colour": 1 }),
        json!({ "reason": "refunded", "version": -1 }),
        json!({ "reason": "refunded", "as": "done" }),
    ] {
        let (status, _, problem) = post(&client, &command, Some(REVIEWER), &body).await;
        assert_eq!(
            (status, problem["type"].as_str()),
            (400, Some("urn:actionledger:problem:bad_request")),
            "{body}: {problem}"
        );
    }
    // 415: a body that is not sent as JSON.
    let body = order(json!({})).to_string();
    for (name, value) in [("content-type", "text/plain"), ("content-type", "application/x-www-form-urlencoded")] {
        let answer = send(client.post(&url).bearer_auth(SOURCE).header(name, value).body(body.clone())).await;
        assert_eq!((answer.status, answer.media_type.as_str()), (415, "application/problem+json"), "{value}");
    }
    let answer = send(client.post(&url).bearer_auth(SOURCE).body(body.clone())).await;
    assert_eq!(answer.status, 415, "no Content-Type: {}", answer.body);
    let gzip = client
        .post(&url)
        .bearer_auth(SOURCE)
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body(vec![0x1f, 0x8b, 0x08, 0x00]);
    let answer = send(gzip).await;
    assert_eq!((answer.status, answer.media_type.as_str()), (415, "application/problem+json"), "{}", answer.body);
    let charset = client.post(&url).bearer_auth(SOURCE).header("content-type", "application/json; charset=utf-8");
    assert_eq!(send(charset.body(body)).await.status, 201, "JSON with its charset named is JSON");
    // Queries: the limit's range, the states, a filter that names nothing, a cursor below 1.
    for query in ["limit=0", "limit=1001", "state=lost", "state=", "destination=", "owner=", "before=0", "colour=blue"]
    {
        let (status, problem) = get(&client, &format!("{url}?{query}"), Some(VIEWER)).await;
        assert_eq!((status, problem["status"].as_u64()), (400, Some(400)), "{query}: {problem}");
    }
    // The router's own refusals are problems too: a method, a path that is not UTF-8.
    let (status, kind, problem) = call(&client, reqwest::Method::PUT, &url, Some(SOURCE), None, &[]).await;
    assert_eq!((status, kind.as_str(), problem["status"].as_u64()), (405, "application/problem+json", Some(405)));
    let (status, kind, problem) =
        call(&client, reqwest::Method::GET, &format!("{url}/%FF"), Some(VIEWER), None, &[]).await;
    assert_eq!((status, kind.as_str(), problem["status"].as_u64()), (400, "application/problem+json", Some(400)));
    assert_eq!(written(&db.ledger).await, (1, 0), "only the one well-formed submission was recorded");
}

fn leak(text: String) -> &'static str {
    Box::leak(text.into_boxed_str())
}

// ---- schemathesis and a generated client, against the binary ------------------------------------

/// A command-line tool the contract checks need, or `None` (after a loud message) outside CI;
/// with `CI=true` a missing tool fails the test, as a missing PostgreSQL does.
fn tool(name: &str) -> Option<std::path::PathBuf> {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join(name))
        .find(|path| path.is_file());
    if found.is_none() {
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "{name} is required in CI (.ci/run installs it with pip) but is not on PATH"
        );
        eprintln!(
            "\n!!! SKIPPING a contract test: {name} is not on PATH\n!!! Install it: pip install schemathesis openapi-python-client\n"
        );
    }
    found
}

/// `serve` as a child process on `db_url`, with a reviewer token and no rate limit; killed when
/// dropped.
struct Served {
    child: std::process::Child,
    base: String,
    _dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn serve_binary(db_url: &str) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let made = hash_token(dir.path(), &format!("{REVIEWER}\n"), "reviewer", "Ana Lima");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    // The executor of the seeded actions' destination, for the register's run.
    let executor = format!("{} executor:crm crm-flow\n", actionledger::serve::auth::hash_token(EXECUTOR));
    std::fs::write(dir.path().join("tokens.txt"), [made.stdout, executor.into_bytes()].concat()).unwrap();
    std::fs::write(
        dir.path().join("actionledger.toml"),
        "[intake.orders]\nkey = \"hook:{{body.n}}\"\ndestination = \"crm\"\npayload = [\"n\"]\n\n[executors.crm]\n",
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("127.0.0.1:{port}");
    let child = actionledger(dir.path())
        .args(["--db", db_url, "serve", "--listen", &listen, "--tokens", "tokens.txt", "--rate", "0"])
        .args(["--config", "actionledger.toml"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://{listen}");
    let served = Served { child, base, _dir: dir };
    let client = client();
    for _ in 0..200 {
        if client.get(format!("{}/healthz", served.base)).send().await.is_ok() {
            return served;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("serve did not answer on {}", served.base);
}

/// Actions for the generated requests to find: pending ones, and one in each state a command
/// can start from that a submission alone reaches.
async fn seed(base: &str) {
    let client = client();
    for n in [0, 1, 2, 3, 1042] {
        let body = submission(&format!("shop:order:{n}:create-task"), &json!({ "n": n }));
        let (status, _, answer) = post(&client, &format!("{base}/v1/actions"), Some(REVIEWER), &body).await;
        assert_eq!(status, 201, "{answer}");
    }
    let changed = submission("shop:order:0:create-task", &json!({ "n": 100 }));
    let (status, _, answer) = post(&client, &format!("{base}/v1/actions"), Some(REVIEWER), &changed).await;
    assert_eq!(status, 409, "a proposal waits on shop:order:0: {answer}");
}

/// The register's operations, which only an executor's token reaches: schemathesis runs them a
/// second time with one.
const REGISTER_OPERATIONS: [&str; 4] = ["beginAction", "renewClaim", "finishAction", "claimActions"];

/// Runs schemathesis over the served document with every check, positive and negative cases,
/// and asserts it found nothing: with the reviewer's token over every operation, then with the
/// executor's over the register's. Returns its summary lines.
fn schemathesis(st: &std::path::Path, base: &str, examples: u32) -> String {
    let every = schemathesis_as(st, base, examples, REVIEWER, &[]);
    let register: Vec<String> =
        REGISTER_OPERATIONS.iter().flat_map(|id| ["--include-operation-id".to_owned(), (*id).to_owned()]).collect();
    let executor = schemathesis_as(st, base, examples, EXECUTOR, &register);
    format!("{every}; the register as its executor: {executor}")
}

fn schemathesis_as(st: &std::path::Path, base: &str, examples: u32, token: &str, only: &[String]) -> String {
    let report = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let output = std::process::Command::new(st)
        .current_dir(report.path())
        .arg("--config-file")
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/contract/schemathesis.toml"))
        .args(["run", &format!("{base}/v1/openapi.json"), "--checks", "all", "--mode", "all"])
        .args(["--max-examples", &examples.to_string(), "--seed", "29", "--workers", "1", "--no-color"])
        .args(["--header", &format!("Authorization: Bearer {token}"), "--generation-database", "none"])
        .args(only)
        .args(["--request-timeout", "20", "--suppress-health-check", "all"])
        .env("SCHEMATHESIS_HOOKS", "")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "schemathesis found something ({}):\n{text}", output.status);
    let summary = text.lines().filter(|l| l.contains(" generated, ")).map(str::trim).collect::<Vec<_>>().join(" | ");
    format!("{summary} in {:.0} s", started.elapsed().as_secs_f64())
}

/// How many cases schemathesis generates per operation and phase: enough to reach every status,
/// few enough that each store takes a minute or two.
const EXAMPLES: u32 = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_nothing_against_serve_on_sqlite() {
    let Some(st) = tool("st") else { return };
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("ledger.db").display());
    let served = serve_binary(&url).await;
    seed(&served.base).await;
    let base = served.base.clone();
    let summary = tokio::task::spawn_blocking(move || schemathesis(&st, &base, EXAMPLES)).await.unwrap();
    println!("schemathesis on SQLite: {summary}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_nothing_against_serve_on_postgresql() {
    let Some(st) = tool("st") else { return };
    let Some(db) = crate::support::postgres().await else { return };
    let served = serve_binary(&db.url).await;
    seed(&served.base).await;
    let base = served.base.clone();
    let summary = tokio::task::spawn_blocking(move || schemathesis(&st, &base, EXAMPLES)).await.unwrap();
    println!("schemathesis on PostgreSQL: {summary}");
}

/// The script that drives the generated client: one submission, one read and one command, by the
/// names the document's operationIds and schemas give.
const CLIENT_SCRIPT: &str = r#"
import sys
from actionledger_client import AuthenticatedClient
from actionledger_client.api.default import submit_action, show_action, run_command
from actionledger_client.models import Submission, Command, Submitted, Detail, CommandDone

base, token = sys.argv[1], sys.argv[2]
client = AuthenticatedClient(base_url=base, token=token, raise_on_unexpected_status=True)
submitted = submit_action.sync(client=client, body=Submission.from_dict(
    {"key": "client:order:1:create-task", "payload": {"n": 1}, "destination": "crm"}))
assert isinstance(submitted, Submitted), submitted
assert submitted.outcome == "created", submitted.outcome
detail = show_action.sync(key="client:order:1:create-task", client=client)
assert isinstance(detail, Detail), detail
version = detail.action.version
done = run_command.sync(key="client:order:1:create-task", command="assign", client=client,
    body=Command.from_dict({"reason": "mine to follow up", "version": version}))
assert isinstance(done, CommandDone), done
assert done.by == "Ana Lima" and done.action.assignee == "Ana Lima", done.to_dict()
print("submitted", submitted.action.key, "read version", version, "then", done.command, "by", done.by)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_client_submits_reads_and_commands() {
    let Some(generator) = tool("openapi-python-client") else { return };
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("ledger.db").display());
    let served = serve_binary(&url).await;
    let document = dir.path().join("openapi.json");
    let (status, served_document) = get(&client(), &format!("{}/v1/openapi.json", served.base), None).await;
    assert_eq!(status, 200);
    std::fs::write(&document, served_document.to_string()).unwrap();
    let generated = std::process::Command::new(&generator)
        .current_dir(dir.path())
        .args(["generate", "--path", "openapi.json", "--output-path", "actionledger_client", "--meta", "none"])
        .output()
        .unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&generated.stdout), String::from_utf8_lossy(&generated.stderr));
    assert!(generated.status.success(), "the client was not generated:\n{said}");
    assert!(!said.contains("Warning"), "the generator warned about the document:\n{said}");
    // The generator's own Python runs the client (it has the client's dependencies).
    let python = std::fs::read_to_string(&generator)
        .ok()
        .and_then(|script| script.lines().next().and_then(|l| l.strip_prefix("#!")).map(str::to_owned))
        .unwrap_or_else(|| "python3".to_owned());
    std::fs::write(dir.path().join("drive.py"), CLIENT_SCRIPT).unwrap();
    let driven = std::process::Command::new(python.trim())
        .current_dir(dir.path())
        .env("PYTHONPATH", dir.path())
        .args(["drive.py", &served.base, REVIEWER])
        .output()
        .unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&driven.stdout), String::from_utf8_lossy(&driven.stderr));
    assert!(driven.status.success(), "the generated client failed:\n{said}");
    println!("generated client: {said}");
}
