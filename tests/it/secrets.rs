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
