//! The simulated CRM on its own, and the worker process's clean shutdown.

use crate::support;
use actionledger::config::Config;
use actionledger::sim_crm::{Fault, FaultPlan, Options, SimCrm, Stats};
use std::process::{Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_actionledger");

async fn start(options: Options) -> SimCrm {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    SimCrm::start(listener, options).unwrap()
}

async fn post(crm: &SimCrm, key: &str, body: &str) -> (u16, String) {
    send(crm, reqwest::Method::POST, "tasks", key, body).await
}

/// One request to the simulated CRM with an idempotency key: its status and body.
async fn send(crm: &SimCrm, method: reqwest::Method, path: &str, key: &str, body: &str) -> (u16, String) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let response = reqwest::Client::new()
        .request(method, format!("http://{}/{path}", crm.addr()))
        .header("Idempotency-Key", key)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

#[tokio::test]
async fn state_survives_a_restart_and_keys_are_still_honoured() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options { state_file: Some(dir.path().join("crm.json")), ..Options::default() };
    let first = start(options.clone()).await;
    let (status, created) = post(&first, "k1", r#"{"external_ref":"r1","data":1}"#).await;
    assert_eq!(status, 201);
    drop(first);
    let second = start(options).await;
    let (status, replayed) = post(&second, "k1", r#"{"external_ref":"r1","data":1}"#).await;
    assert_eq!((status, replayed), (201, created), "the key is remembered across the restart");
    let (status, _) = post(&second, "k2", r#"{"external_ref":"r1","data":1}"#).await;
    assert_eq!(status, 409, "the external reference is still unique");
    let effects = second.stats();
    assert_eq!((effects.records, effects.idempotent_replays, effects.duplicates_refused), (1, 1, 1));
    // The state was saved with the first server's connection open; that connection is not this one's.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while second.stats().open_connections != 0 {
        assert!(std::time::Instant::now() < deadline, "connections still counted open: {:?}", second.stats());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A connection counts open until every request read from it was handled: once a client that
/// dropped its connection with a create in flight sees none open, the record is written.
#[tokio::test]
async fn a_connection_counts_open_until_its_requests_were_handled() {
    use tokio::io::AsyncWriteExt as _;
    let crm = start(Options { faults: support::crm::every_create_delayed(300), ..Options::default() }).await;
    let mut client = tokio::net::TcpStream::connect(crm.addr()).await.unwrap();
    let body = r#"{"external_ref":"in-flight"}"#;
    let request = format!(
        "POST /tasks HTTP/1.1\r\nhost: crm\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    client.write_all(request.as_bytes()).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while crm.stats().requests == 0 {
        assert!(std::time::Instant::now() < deadline, "the request never arrived");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(client);
    let open = crm.stats();
    assert_eq!((open.connections, open.open_connections, open.records), (1, 1, 0), "the create is still waiting");
    while crm.stats().open_connections != 0 {
        assert!(std::time::Instant::now() < deadline, "the connection never closed: {:?}", crm.stats());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(crm.stats().records, 1, "the create sent before the client went away was handled first");
}

/// The socket faults close the connection with nothing written: before the write (no record) and
/// after the commit (the record is there).
#[tokio::test]
async fn socket_faults_close_the_connection_with_nothing_written() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let script = [Fault::CloseBeforeWrite, Fault::DropAfterCommit].into();
    let crm = start(Options { faults: FaultPlan { script, rates: Vec::new() }, ..Options::default() }).await;
    for (n, records) in [(1, 0), (2, 1)] {
        let mut client = tokio::net::TcpStream::connect(crm.addr()).await.unwrap();
        let body = format!(r#"{{"external_ref":"dropped-{n}"}}"#);
        let request = format!(
            "POST /tasks HTTP/1.1\r\nhost: crm\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        client.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut answer)).await.unwrap().unwrap();
        assert!(answer.is_empty(), "fault {n} answered: {}", String::from_utf8_lossy(&answer));
        assert_eq!(crm.stats().records, records, "fault {n}");
    }
    assert_eq!(crm.stats().connections, 2);
}

#[tokio::test]
async fn a_body_over_a_mebibyte_is_refused_and_writes_nothing() {
    let crm = start(Options::default()).await;
    let padding = "x".repeat(1024 * 1024);
    let (status, answer) = post(&crm, "big", &format!(r#"{{"external_ref":"big","padding":"{padding}"}}"#)).await;
    assert_eq!(status, 413, "{answer}");
    assert!(serde_json::from_str::<serde_json::Value>(&answer).is_ok(), "answered in JSON: {answer}");
    assert_eq!(crm.stats().records, 0);
}

#[tokio::test]
async fn stats_report_real_effects_over_http() {
    let crm = start(Options {
        faults: FaultPlan { script: [Fault::Unavailable].into(), rates: Vec::new() },
        ..Options::default()
    })
    .await;
    assert_eq!(post(&crm, "k", r#"{"external_ref":"r"}"#).await.0, 503);
    assert_eq!(post(&crm, "k", r#"{"external_ref":"r"}"#).await.0, 201);
    assert_eq!(
        post(&crm, "k", r#"{"external_ref":"r","changed":true}"#).await.0,
        422,
        "a reused key with another body"
    );
    let text = reqwest::get(format!("http://{}/stats", crm.addr())).await.unwrap().text().await.unwrap();
    let stats: Stats = serde_json::from_str(&text).unwrap();
    assert_eq!((stats.records, stats.max_records_per_external_ref), (1, 1));
    assert_eq!(stats.faults_injected.get("unavailable"), Some(&1));
    for field in ["records", "max_records_per_external_ref", "duplicates_refused", "idempotent_replays"] {
        assert!(text.contains(field), "{field} in {text}");
    }
}

#[test]
fn the_printed_configuration_is_a_working_destination_block() {
    let out = Command::new(BIN).args(["sim-crm", "--listen", "127.0.0.1:9911", "--print-config"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let config = Config::parse(&text).unwrap();
    let crm = &config.destinations["crm"];
    assert_eq!(crm.base_url.as_deref(), Some("http://127.0.0.1:9911"));
    assert!(crm.idempotency.is_some() && crm.lookup.is_some() && crm.fencing.is_some() && crm.update.is_some());
    let bad = Command::new(BIN).args(["sim-crm", "--fault", "meteor=0.5", "--print-config"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown fault"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_a_worker_cleanly_with_no_claim_left() {
    let crm = start(Options {
        faults: FaultPlan { script: std::collections::VecDeque::new(), rates: vec![(Fault::Delay(300), 1.0)] },
        ..Options::default()
    })
    .await;
    let db = support::sqlite().await;
    for n in 0..10 {
        let raw = actionledger::domain::RawSubmission {
            key: Some(format!("acme:slow:{n}")),
            payload: b"{}".to_vec(),
            destination: Some("crm".into()),
            ..Default::default()
        };
        db.ledger.submit(&raw).await.unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("actionledger.toml");
    std::fs::write(&config, crm.destination_config("crm")).unwrap();
    let child = Command::new(BIN)
        .args(["--db", &db.url, "worker", "--concurrency", "2", "--json", "--config"])
        .arg(&config)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Stop it part way: once the first action is done.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while db.ledger.counts().await.unwrap().iter().all(|(s, n)| *s != actionledger::domain::State::Completed || *n == 0)
    {
        assert!(std::time::Instant::now() < deadline, "the worker completed nothing in 30s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output()).await.unwrap().unwrap();
    assert_eq!(out.status.code(), Some(0), "a clean exit");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let counts = db.ledger.counts().await.unwrap();
    let in_progress = counts.iter().find(|(s, _)| *s == actionledger::domain::State::InProgress).unwrap().1;
    assert_eq!(in_progress, 0, "no claim left behind: {counts:?}");
    let completed = counts.iter().find(|(s, _)| *s == actionledger::domain::State::Completed).unwrap().1;
    assert!((1..10).contains(&completed), "stopped part way: {counts:?}");
    assert_eq!(summary["completed"].as_i64(), Some(completed));
    assert_eq!(crm.stats().records, u64::try_from(completed).unwrap(), "every request in flight was recorded");
}

#[tokio::test]
async fn obsolete_ownership_versions_are_refused() {
    let crm = start(Options::default()).await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let send = |key: &'static str, version: &'static str| {
        let url = format!("http://{}/tasks", crm.addr());
        async move {
            reqwest::Client::new()
                .post(url)
                .header("Idempotency-Key", key)
                .header("X-Ownership-Version", version)
                .body(r#"{"external_ref":"shared"}"#)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(send("a", "2").await, 201);
    assert_eq!(send("b", "1").await, 412, "an older owner's write is refused");
    assert_eq!(crm.stats().stale_writes_refused, 1);
}

async fn patch(crm: &SimCrm, path: &str, key: &str, body: &str) -> (u16, String) {
    send(crm, reqwest::Method::PATCH, path, key, body).await
}

#[tokio::test]
async fn records_are_updated_once_per_key_and_a_kept_failure_is_replayed() {
    let crm = start(Options {
        faults: FaultPlan { script: [Fault::ErrorBeforeWrite].into(), rates: Vec::new() },
        ..Options::default()
    })
    .await;
    // The first create fails before writing, and the CRM keeps that answer for the key.
    assert_eq!(post(&crm, "k", r#"{"external_ref":"r","data":1}"#).await.0, 500);
    assert_eq!(post(&crm, "k", r#"{"external_ref":"r","data":1}"#).await.0, 500, "replayed, not retried");
    assert_eq!(post(&crm, "k", r#"{"external_ref":"r","data":2}"#).await.0, 422, "another body, same key");
    assert_eq!(crm.stats().records, 0);
    let (status, created) = post(&crm, "k#rev-2", r#"{"external_ref":"r","data":2}"#).await;
    assert_eq!(status, 201, "a new key for the new body: {created}");

    assert_eq!(patch(&crm, "tasks/R%2D000001", "u1", r#"{"data":3}"#).await.0, 200, "the id is percent-decoded");
    let (status, replayed) = patch(&crm, "tasks/R-000001", "u1", r#"{"data":3}"#).await;
    assert_eq!(status, 200);
    assert!(replayed.contains(r#""data":3"#), "{replayed}");
    assert_eq!(patch(&crm, "tasks/R-000001", "u1", r#"{"data":4}"#).await.0, 422);
    assert_eq!(patch(&crm, "tasks/R-000009", "u2", r#"{"data":4}"#).await.0, 404);
    let effects = crm.stats();
    assert_eq!((effects.records, effects.updates, effects.reused_keys_refused), (1, 1, 2));
    assert_eq!(crm.records_for("r")[0]["data"], 3, "updated in place, once");
}

/// Every record has a version, answered as its `ETag` by a create, an update and a read; an update
/// whose `If-Match` is not the record's ETag is refused (412) with the record as it is, and writes
/// nothing; someone else's change at the CRM moves the version.
#[tokio::test]
async fn records_carry_versions_as_etags_and_a_stale_if_match_writes_nothing() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let crm = start(Options::default()).await;
    let client = reqwest::Client::new();
    let url = |path: &str| format!("http://{}/{path}", crm.addr());
    let etag = |response: &reqwest::Response| response.headers()["etag"].to_str().unwrap().to_owned();
    let created = client.post(url("tasks")).body(r#"{"external_ref":"r","data":1}"#).send().await.unwrap();
    assert_eq!((created.status().as_u16(), etag(&created)), (201, "\"1\"".to_owned()));
    let read = client.get(url("tasks/R-000001")).send().await.unwrap();
    assert_eq!((read.status().as_u16(), etag(&read)), (200, "\"1\"".to_owned()));
    assert_eq!(client.get(url("tasks/R-000009")).send().await.unwrap().status().as_u16(), 404);

    let update = |tag: &'static str, data: i64| {
        client.patch(url("tasks/R-000001")).header("If-Match", tag).body(format!(r#"{{"data":{data}}}"#)).send()
    };
    let updated = update("\"1\"", 2).await.unwrap();
    assert_eq!((updated.status().as_u16(), etag(&updated)), (200, "\"2\"".to_owned()));
    crm.edit_record("tasks", "R-000001", &serde_json::json!({"note": "call first"})).unwrap();
    let refused = update("\"2\"", 3).await.unwrap();
    assert_eq!((refused.status().as_u16(), etag(&refused)), (412, "\"3\"".to_owned()));
    let body: serde_json::Value = serde_json::from_str(&refused.text().await.unwrap()).unwrap();
    assert_eq!(
        (&body["record"]["note"], &body["record"]["data"]),
        (&serde_json::json!("call first"), &serde_json::json!(2))
    );
    assert_eq!(update("*", 4).await.unwrap().status().as_u16(), 200, "If-Match: * takes any version");

    let record = crm.record("tasks", "R-000001").unwrap();
    assert_eq!(
        (&record["data"], &record["note"], &record["version"]),
        (&serde_json::json!(4), &serde_json::json!("call first"), &serde_json::json!(4))
    );
    let stats = crm.stats();
    assert_eq!((stats.records, stats.updates, stats.preconditions_failed, stats.edits_by_others), (1, 2, 1, 1));
}
