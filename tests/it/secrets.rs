//! Destination credentials and database passwords never reach the ledger, the logs or `--json`
//! output: a planted secret is searched for everywhere the tool writes, with every log event on
//! (`RUST_LOG=trace`: the ledger's and destinations' spans, sqlx's statements, the HTTP client's).

use crate::support;
use actionledger::sim_crm::{Options, SimCrm};
use std::process::Command;

const SECRET: &str = "planted-secret-7f3a9c";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_secret_appears_nowhere() {
    let db = support::sqlite().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let crm = SimCrm::start(listener, Options::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("actionledger.toml");
    let block = crm.destination_config("crm");
    std::fs::write(
        &config,
        format!("{block}headers = {{ Authorization = {{ env = \"CRM_TOKEN\", prefix = \"Bearer \" }} }}\n"),
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_actionledger"))
            .args(["--db", &db.url])
            .args(args)
            .env("CRM_TOKEN", SECRET)
            .env("RUST_LOG", "trace")
            .current_dir(dir.path())
            .output()
            .unwrap();
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    };
    let mut written = String::new();
    written += &run(&["submit", "--key", "acme:s:1", "--payload", r#"{"a":1}"#, "--destination", "crm"]);
    written += &run(&["worker", "--drain", "--json", "--config", config.to_str().unwrap()]);
    written += &run(&["show", "acme:s:1", "--json"]);
    written += &run(&["list", "--json"]);
    written += &run(&["reconcile", "--json", "--config", config.to_str().unwrap()]);
    assert!(written.contains("completed"), "the action was performed with the credential:\n{written}");
    assert!(
        written.contains("destination_request") && written.contains("sqlx::query"),
        "the worker logged at trace, its requests and statements included:\n{written}"
    );
    assert!(!written.contains(SECRET), "the secret was printed:\n{written}");
    // The ledger file and its WAL, byte for byte.
    let path = db.url.trim_start_matches("sqlite://");
    for file in [path.to_owned(), format!("{path}-wal")] {
        if let Ok(bytes) = std::fs::read(&file) {
            assert!(!bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()), "the secret is in {file}");
        }
    }
    // A database password in a URL is hidden wherever the URL is shown.
    let with_password = format!("postgres://ledger:{SECRET}@127.0.0.1:1/nowhere");
    let out = Command::new(env!("CARGO_BIN_EXE_actionledger"))
        .args(["--db", &with_password, "list"])
        .env("RUST_LOG", "trace")
        .output()
        .unwrap();
    let shown = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success());
    assert!(!shown.contains(SECRET), "the password was printed: {shown}");

    // A worker on PostgreSQL whose URL carries the password, with every log event on. The test
    // server trusts local connections, so the planted password is accepted and never checked.
    if let Some(url) = support::pg::fresh_database().await
        && let Some(server) = url.strip_prefix("postgres://postgres@")
    {
        let with_password = format!("postgres://postgres:{SECRET}@{server}");
        let out = Command::new(env!("CARGO_BIN_EXE_actionledger"))
            .args(["--db", &with_password, "--log-format", "json", "worker", "--drain"])
            .args(["--config", config.to_str().unwrap()])
            .env("CRM_TOKEN", SECRET)
            .env("RUST_LOG", "trace")
            .current_dir(dir.path())
            .output()
            .unwrap();
        let logged = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{logged}");
        assert!(logged.contains("sqlx::query"), "the statements were logged:\n{logged}");
        assert!(!logged.contains(SECRET), "the password was logged:\n{logged}");

        // Secrets in parameters this client does not use (sqlx logs those it ignores with their
        // values): named in the log, never their values.
        let separator = if server.contains('?') { '&' } else { '?' };
        let planted = format!("{with_password}{separator}sslpassword={SECRET}&unused_parameter=7");
        let out = Command::new(env!("CARGO_BIN_EXE_actionledger"))
            .args(["--db", &planted, "list"])
            .env("RUST_LOG", "trace")
            .output()
            .unwrap();
        let logged = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        // Refused (this client reads no encrypted key), after the URL was parsed.
        assert!(!out.status.success() && logged.contains("sslpassword is not supported"), "{logged}");
        assert!(logged.contains("ignoring the connect parameter sslpassword"), "{logged}");
        assert!(logged.contains("ignoring the connect parameter unused_parameter"), "{logged}");
        assert!(!logged.contains(SECRET), "a parameter's secret was logged:\n{logged}");
    }
}

/// A secret of each kind a user can give, each its own, so that a leak names its source.
const URL_PASSWORD: &str = "planted-url-password-4e1b";
const SSL_PASSWORD: &str = "planted-sslpassword-9c2d";
const SERVE_TOKEN: &str = "planted-serve-token-0123456789ab";
const HEADER_FROM_ENV: &str = "planted-env-header-5a7e";
const HEADER_IN_CONFIG: &str = "planted-config-header-2b6f";
const WEBHOOK_SECRET: &str = "planted-webhook-secret-3f8c";

/// The binary in `dir` with every log event on and the secrets of the environment set.
fn with_secrets(dir: &std::path::Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_actionledger"));
    command
        .args(args)
        .env("CRM_TOKEN", HEADER_FROM_ENV)
        .env("SHOP_SECRET", WEBHOOK_SECRET)
        .env("RUST_LOG", "trace")
        .env("NO_COLOR", "1")
        .env_remove("ACTIONLEDGER_DB")
        .env_remove("ACTIONLEDGER_TOKENS")
        .current_dir(dir);
    command
}

/// All a process wrote, standard output then standard error.
fn everything(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Writes tokens.txt in `dir` with [`SERVE_TOKEN`] as the source `shop`; answers its hash.
fn tokens_file(dir: &std::path::Path) -> String {
    let mut hashing = with_secrets(dir, &["serve", "hash-token", "--role", "source", "--name", "shop"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut hashing.stdin.take().unwrap(), SERVE_TOKEN.as_bytes()).unwrap();
    let line = String::from_utf8(hashing.wait_with_output().unwrap().stdout).unwrap();
    std::fs::write(dir.join("tokens.txt"), &line).unwrap();
    line.split_whitespace().next().expect("a hash").to_owned()
}

/// `serve` with JSON logs, given a submission with the token and a webhook signed with the
/// intake's secret, then stopped with SIGTERM; answers all it wrote.
async fn serve_a_submission_and_a_webhook(dir: &std::path::Path, db: &str, config: &str) -> String {
    use hmac::{KeyInit as _, Mac as _};
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let address = format!("127.0.0.1:{port}");
    let args = ["--db", db, "--log-format", "json", "serve", "--listen", &address, "--tokens", "tokens.txt"];
    let process = with_secrets(dir, &args)
        .args(["--config", config])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let mut up = false;
    for _ in 0..200 {
        if client.get(format!("http://{address}/healthz")).send().await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(up, "serve answers");
    let submitted = client
        .post(format!("http://{address}/v1/actions"))
        .bearer_auth(SERVE_TOKEN)
        .header("Content-Type", "application/json")
        .body(r#"{"key": "api:1", "payload": {}, "destination": "crm", "event_id": "ev-1"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(submitted.status().as_u16(), 201, "{}", submitted.text().await.unwrap());
    let body = br#"{"id": 7}"#;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(WEBHOOK_SECRET.as_bytes()).unwrap();
    mac.update(body);
    let hooked = client
        .post(format!("http://{address}/v1/hooks/shop"))
        .header("X-Sig", format!("sha256={}", hex::encode(mac.finalize().into_bytes())))
        .header("Content-Type", "application/json")
        .body(&body[..])
        .send()
        .await
        .unwrap();
    assert!(hooked.status().is_success(), "{}", hooked.text().await.unwrap());
    let killed = Command::new("kill").args(["-TERM", &process.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let stopped = process.wait_with_output().unwrap();
    assert!(stopped.status.success(), "{}", everything(&stopped));
    everything(&stopped)
}

/// Every process of a PostgreSQL deployment at `RUST_LOG=trace`, text and JSON logs: `migrate`,
/// `serve` taking a token's submission and a signed webhook, the worker performing both with
/// its destination's credentials, and connections that fail (a closed port, an `sslpassword`).
/// Each secret is used (the actions complete) and none is in anything written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_planted_secret_reaches_any_output_of_any_process() {
    let Some(url) = support::pg::fresh_database().await else { return };
    let host = url.strip_prefix("postgres://postgres@").expect("the test server's URL names the postgres role");
    let db = format!("postgres://postgres:{URL_PASSWORD}@{host}");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let crm = SimCrm::start(listener, Options::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("actionledger.toml");
    std::fs::write(
        &config,
        format!(
            "{}headers = {{ Authorization = {{ env = \"CRM_TOKEN\", prefix = \"Bearer \" }}, X-Api-Key = {{ value = \
             \"{HEADER_IN_CONFIG}\" }} }}\nsecret_headers = [\"X-Api-Key\"]\n\n[intake.shop]\nkey = \
             \"shop:{{{{body.id}}}}\"\ndestination = \"crm\"\nsignature = {{ secret_env = \"SHOP_SECRET\", header = \
             \"X-Sig\", prefix = \"sha256=\" }}\n",
            crm.destination_config("crm")
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let run = |args: &[&str]| with_secrets(dir.path(), args).output().unwrap();
    let hash = tokens_file(dir.path());
    let mut written = Vec::new();

    let migrated = run(&["--db", &db, "migrate"]);
    assert!(migrated.status.success(), "{}", everything(&migrated));
    written.push(("migrate", everything(&migrated)));
    let serve_log = serve_a_submission_and_a_webhook(dir.path(), &db, config).await;
    assert!(
        serve_log.contains("\"key\":\"api:1\"") && serve_log.contains("\"key\":\"shop:7\""),
        "serve logged both at trace:\n{serve_log}"
    );
    written.push(("serve", serve_log));
    let drained = run(&["--db", &db, "worker", "--drain", "--json", "--config", config]);
    let worker_log = everything(&drained);
    assert!(drained.status.success(), "{worker_log}");
    assert!(worker_log.contains("sqlx::query") && worker_log.contains("destination_request"), "{worker_log}");
    written.push(("worker", worker_log));
    let actions = everything(&run(&["--db", &db, "list", "--json"]));
    assert_eq!(actions.matches("\"completed\"").count(), 2, "both performed with the credentials: {actions}");
    written.push(("list", actions));

    let closed = format!("postgres://postgres:{URL_PASSWORD}@127.0.0.1:1/nowhere");
    let refused = run(&["--db", &closed, "list"]);
    assert!(!refused.status.success());
    written.push(("a closed port", everything(&refused)));
    let separator = if host.contains('?') { '&' } else { '?' };
    let encrypted_key = format!("{db}{separator}sslmode=require&sslpassword={SSL_PASSWORD}");
    let refused = run(&["--db", &encrypted_key, "--log-format", "json", "worker", "--drain"]);
    assert!(!refused.status.success() && everything(&refused).contains("sslpassword"), "{}", everything(&refused));
    written.push(("sslpassword", everything(&refused)));

    for (process, output) in &written {
        for secret in
            [URL_PASSWORD, SSL_PASSWORD, SERVE_TOKEN, &hash, HEADER_FROM_ENV, HEADER_IN_CONFIG, WEBHOOK_SECRET]
        {
            assert!(!output.contains(secret), "{process} wrote {secret}:\n{output}");
        }
    }
}
