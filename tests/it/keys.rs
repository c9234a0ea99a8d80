//! Keys that cannot split or be steered, on both stores: a webhook number makes one key however
//! it is spelled, a signed intake builds its key only from what the signature covers, a key with
//! an invisible or default-ignorable character is refused by every front end alike, and a key
//! recorded under older rules is still shown escaped by `list`, `show` and the console.

use crate::support::{TestDb, run_cli};
use actionledger::config::Config;
use actionledger::destination::{Destination, Destinations};
use actionledger::domain::{ActionKey, ActionRecord, RawSubmission, State, Submission};
use actionledger::ledger::Ledger;
use actionledger::serve::auth::{Role, Tokens};
use actionledger::serve::intake::Intake;
use actionledger::serve::{App, ServeOptions};
use actionledger::sim_crm::{Options, SimCrm};
use actionledger::store::{LedgerTx as _, ListFilter, Store};
use actionledger::worker::{self, WorkerOptions};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

conformance!(
    four_spellings_of_one_order_number_make_one_action_and_one_record,
    a_signed_intake_naming_an_unsigned_header_refuses_to_start,
    a_key_with_a_variation_selector_is_refused_like_other_bad_keys,
    an_old_key_with_invisible_characters_is_shown_escaped,
);

const SOURCE: &str = "source-token-0123456789";
const VIEWER: &str = "viewer-token-0123456789";

/// A Mongolian free variation selector: default-ignorable, drawn as nothing.
const SELECTOR: char = '\u{180B}';

/// `orders`: a token-authenticated intake whose key holds the order number from the body.
fn config() -> Config {
    Config::parse(
        r#"
        [intake.orders]
        key = "shop:order:{{body.n}}:create-task"
        event_id = "{{header.X-Event-Id}}"
        destination = "crm"
        payload = ["n"]
        "#,
    )
    .expect("the intake parses")
}

/// Serves the ledger on 127.0.0.1 until the test ends; returns its base URL.
async fn start<S: Store>(ledger: &Ledger<S>) -> String {
    let mut tokens = Tokens::default();
    tokens.insert(SOURCE, Role::Source, "shop").unwrap();
    tokens.insert(VIEWER, Role::Viewer, "dashboard").unwrap();
    let intakes = config().intake.into_iter().map(|(name, intake)| Intake::with_secret(&name, intake, None)).collect();
    let options = ServeOptions { rate: 0.0, ..ServeOptions::default() };
    let router = App::new(ledger.clone(), tokens, intakes, options).router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(actionledger::serve::serve(listener, router, std::future::pending()));
    format!("http://{addr}")
}

/// One POST: its status and its body as JSON.
async fn post(url: &str, body: String, headers: &[(&str, String)]) -> (u16, Value) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut request =
        reqwest::Client::new().post(url).bearer_auth(SOURCE).header("content-type", "application/json").body(body);
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, serde_json::from_str(&response.text().await.unwrap()).unwrap_or(Value::Null))
}

/// A page of every action the tests make (a default filter's limit is 0).
fn every_action() -> ListFilter {
    ListFilter { limit: 100, ..ListFilter::default() }
}

/// Runs a worker until nothing is left to do, against a simulated CRM; returns the CRM.
async fn drain<S: Store>(ledger: &Ledger<S>) -> SimCrm {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let crm = SimCrm::start(listener, Options::default()).unwrap();
    let config = Config::parse(&crm.destination_config("crm")).unwrap().destinations["crm"].clone();
    let destinations = BTreeMap::from([("crm".to_owned(), Destination::new("crm", config).unwrap())]);
    let options = WorkerOptions {
        id: "keys-worker".to_owned(),
        concurrency: 2,
        batch: 100,
        lease: Duration::from_mins(1),
        poll_interval: Duration::from_millis(20),
        drain: true,
        destinations: Destinations::new(destinations, None),
        progress: false,
    };
    worker::run(ledger.clone(), options, std::future::pending()).await.unwrap();
    crm
}

/// The issue's report: `7100`, `7100.0`, `7.1e3` and `71e2` were four keys for one order and two
/// CRM records of the same data. Now they are one action, three duplicate deliveries and one
/// record; `-0` is the order `0`, and a number with a fraction is refused naming its field.
async fn four_spellings_of_one_order_number_make_one_action_and_one_record<S: Store>(db: TestDb<S>) {
    let base = start(&db.ledger).await;
    let url = format!("{base}/v1/hooks/orders");
    let mut statuses = Vec::new();
    for (i, number) in ["7100", "7100.0", "7.1e3", "71e2"].into_iter().enumerate() {
        let (status, answer) = post(&url, format!(r#"{{"n": {number}}}"#), &[("X-Event-Id", format!("ev-{i}"))]).await;
        assert_eq!(answer["action"]["key"], "shop:order:7100:create-task", "{number}: {answer}");
        statuses.push(status);
    }
    assert_eq!(statuses, [201, 200, 200, 200], "one created, every other spelling a duplicate");
    let (status, answer) = post(&url, r#"{"n": -0}"#.to_owned(), &[("X-Event-Id", "ev-zero".to_owned())]).await;
    assert_eq!((status, &answer["action"]["key"]), (201, &json!("shop:order:0:create-task")), "{answer}");
    let (status, problem) = post(&url, r#"{"n": 7100.5}"#.to_owned(), &[("X-Event-Id", "ev-half".to_owned())]).await;
    assert_eq!((status, &problem["field"], &problem["problem"]), (422, &json!("body.n"), &json!("hook_unmapped")));
    assert!(problem["detail"].as_str().unwrap().contains("{{body.n}} is the number 7100.5"), "{problem}");

    let crm = drain(&db.ledger).await;
    let actions = db.ledger.list(&every_action()).await.unwrap();
    let keys: Vec<_> = actions.iter().map(|a| (a.key.as_str(), a.state)).collect();
    assert_eq!(
        keys,
        [("shop:order:0:create-task", State::Completed), ("shop:order:7100:create-task", State::Completed)],
        "newest first"
    );
    let order = ActionKey::parse("shop:order:7100:create-task").unwrap();
    assert_eq!(db.ledger.detail(&order).await.unwrap().deliveries.len(), 4, "each spelling is a recorded delivery");
    let at_the_crm = crm.stats();
    assert_eq!((at_the_crm.records, at_the_crm.max_records_per_external_ref), (2, 1), "one CRM record per order");
}

/// A key read from a header the signature does not cover let one signed body be replayed as
/// `X-Order-Ref: A1`, `A2`, `A3` into three actions. Such an intake no longer loads: `serve`
/// refuses to start, naming the header, and nothing reaches the ledger.
async fn a_signed_intake_naming_an_unsigned_header_refuses_to_start<S: Store>(db: TestDb<S>) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("actionledger.toml");
    std::fs::write(
        &config,
        r#"
[intake.signed]
key = "shop:order:{{header.X-Order-Ref}}:create-task"
signature = { secret_env = "SHOP_SECRET", header = "X-Shop-Signature", prefix = "sha256=", timestamp_header = "X-Shop-Timestamp" }
"#,
    )
    .unwrap();
    let tokens = dir.path().join("tokens.txt");
    std::fs::write(&tokens, hashed_token()).unwrap();
    let mut server = std::process::Command::new(env!("CARGO_BIN_EXE_actionledger"))
        .env_remove("ACTIONLEDGER_DB")
        .env_remove("DATABASE_URL")
        .env("SHOP_SECRET", "a-secret")
        .args(["--db", &db.url, "serve", "--listen", "127.0.0.1:0"])
        .args(["--config", config.to_str().unwrap(), "--tokens", tokens.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A server that started would serve until stopped: stop it, and fail, rather than wait.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while server.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if server.try_wait().unwrap().is_none() {
        server.kill().unwrap();
        panic!("serve started with a key read from an unsigned header");
    }
    let output = server.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "a configuration error: {said}");
    assert!(
        said.contains("intake signed: key reads the header X-Order-Ref, which the signature does not cover"),
        "{said}"
    );
    assert!(db.ledger.list(&every_action()).await.unwrap().is_empty());
}

/// A tokens file's line for [`SOURCE`], as `serve hash-token` writes it.
fn hashed_token() -> Vec<u8> {
    use std::io::Write as _;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_actionledger"))
        .args(["serve", "hash-token", "--role", "source", "--name", "shop"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(SOURCE.as_bytes()).unwrap();
    let made = child.wait_with_output().unwrap();
    assert!(made.status.success());
    made.stdout
}

/// U+180B refused as any bad key is: by the command line with exit code 3 (refused), by the API and by a
/// webhook with 422 and the same problem code, each refusal kept for review and nothing created;
/// and a word mixing Latin and Cyrillic letters refused the same way.
async fn a_key_with_a_variation_selector_is_refused_like_other_bad_keys<S: Store>(db: TestDb<S>) {
    let hidden = format!("shop:order:71{SELECTOR}00:create-task");
    let cli = run_cli(&db.url, &["submit", "--key", &hidden, "--payload", "{}"]);
    let said = String::from_utf8_lossy(&cli.stderr);
    let whitespace = run_cli(&db.url, &["submit", "--key", "shop order", "--payload", "{}"]);
    assert_eq!(cli.status.code(), whitespace.status.code(), "the exit code of any bad key: {said}");
    assert_eq!(cli.status.code(), Some(3), "refused: {said}");
    assert!(said.contains("invisible or formatting character") && said.contains("at byte 13"), "{said}");
    assert!(!said.contains(SELECTOR), "the refusal does not print the character itself: {said}");

    let base = start(&db.ledger).await;
    let submission = json!({ "key": hidden, "payload": {}, "destination": "crm" });
    let (status, problem) = post(&format!("{base}/v1/actions"), submission.to_string(), &[]).await;
    assert_eq!((status, &problem["problem"]), (422, &json!("key_invisible_character")), "{problem}");
    let body = json!({ "n": format!("71{SELECTOR}00") }).to_string();
    let (status, problem) = post(&format!("{base}/v1/hooks/orders"), body, &[("X-Event-Id", "ev-1".into())]).await;
    assert_eq!((status, &problem["problem"]), (422, &json!("key_invisible_character")), "{problem}");

    assert!(db.ledger.list(&every_action()).await.unwrap().is_empty(), "no action");
    let refused = db.ledger.list_refused(None, 10).await.unwrap();
    let problems: Vec<_> = refused.iter().map(|r| r.problem.as_str()).collect();
    assert_eq!(
        problems,
        ["key_invisible_character", "key_invisible_character", "key_whitespace", "key_invisible_character"]
    );
    assert!(refused[0].key_excerpt.as_deref().is_some_and(|k| k.contains("\\u{180b}")), "{:?}", refused[0]);

    // A Cyrillic о inside a Latin word passes for an o: refused, where a word in one script is not.
    let lookalike = run_cli(&db.url, &["submit", "--key", "acme:sh\u{043E}p:order-1", "--payload", "{}"]);
    let said = String::from_utf8_lossy(&lookalike.stderr);
    assert_eq!(lookalike.status.code(), Some(3), "{said}");
    assert!(said.contains("mixes Latin and Cyrillic letters in one word at byte 7"), "{said}");
    let one_script =
        run_cli(&db.url, &["submit", "--key", "acme:\u{0437}\u{0430}\u{043A}\u{0430}\u{0437}:1", "--payload", "{}"]);
    assert_eq!(one_script.status.code(), Some(0), "{}", String::from_utf8_lossy(&one_script.stderr));
    assert_eq!(db.ledger.list_refused(None, 10).await.unwrap()[0].problem, "key_mixed_scripts");
    assert_eq!(db.ledger.list(&every_action()).await.unwrap().len(), 1, "only the one-script key");
}

/// An action recorded before the rule, with U+180B and U+0600 in its key, as an earlier version
/// could record it: `list`, `show` and the console print the key with those characters escaped
/// and never raw, and the action can still be named to settle it.
async fn an_old_key_with_invisible_characters_is_shown_escaped<S: Store>(db: TestDb<S>) {
    let old = format!("shop:order:71{SELECTOR}00:\u{0600}create-task");
    let shown = "shop:order:71\\u{180b}00:\\u{0600}create-task";
    let mut submission = Submission::validate(&RawSubmission {
        key: Some("placeholder".to_owned()),
        payload: br#"{"n":7100}"#.to_vec(),
        ..RawSubmission::default()
    })
    .unwrap();
    submission.key = ActionKey::parse_existing(&old).unwrap();
    let store = db.ledger.store();
    let mut tx = store.begin().await.unwrap();
    let now = tx.now().await.unwrap();
    tx.insert_actions_if_absent(&[ActionRecord::new_pending(&submission, now)]).await.unwrap();
    tx.commit().await.unwrap();

    let list = run_cli(&db.url, &["list"]);
    let printed = String::from_utf8_lossy(&list.stdout);
    assert_eq!(list.status.code(), Some(0), "{}", String::from_utf8_lossy(&list.stderr));
    assert!(printed.contains(shown) && !printed.contains(SELECTOR) && !printed.contains('\u{0600}'), "{printed}");
    let show = run_cli(&db.url, &["show", &old]);
    let printed = String::from_utf8_lossy(&show.stdout);
    assert_eq!(show.status.code(), Some(0), "{}", String::from_utf8_lossy(&show.stderr));
    assert!(printed.contains(shown) && !printed.contains(SELECTOR), "{printed}");

    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("look.keys");
    std::fs::write(&script, "q\n").unwrap();
    let review =
        run_cli(&db.url, &["review", "--owner", "Ana Lima", "--script", script.to_str().unwrap(), "--size", "120x30"]);
    let screen = String::from_utf8_lossy(&review.stdout);
    assert_eq!(review.status.code(), Some(0), "{}", String::from_utf8_lossy(&review.stderr));
    assert!(screen.contains("shop:order:71\\u{180b}00") && !screen.contains(SELECTOR), "{screen}");

    // The API reads it by its key too: a path is read as a typed key is, not as a new key.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut url = reqwest::Url::parse(&format!("{}/v1/actions", start(&db.ledger).await)).unwrap();
    url.path_segments_mut().unwrap().push(&old);
    let response = reqwest::Client::new().get(url).bearer_auth(VIEWER).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200, "{}", response.text().await.unwrap());

    // Still an action a person can settle by its key.
    let cancel = run_cli(&db.url, &["cancel", &old, "--owner", "Ana Lima", "--reason", "recorded twice"]);
    assert_eq!(cancel.status.code(), Some(0), "{}", String::from_utf8_lossy(&cancel.stderr));
    let action = db.ledger.detail(&ActionKey::parse_existing(&old).unwrap()).await.unwrap().action;
    assert_eq!(action.state, State::Cancelled);
}
