//! TLS to PostgreSQL against throwaway servers started with `ssl=on` and a certificate authority
//! made here: which `sslmode`s connect, and how each refusal is worded (its parameter named, the
//! password hidden, nothing written).

use actionledger::store::{PostgresStore, StoreError, TlsProblem};
use actionledger::testkit::throwaway_pg::{self, CERTIFICATE_ROLE, TlsServer};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use sqlx::Connection as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

const BIN: &str = env!("CARGO_BIN_EXE_actionledger");

/// A password in every URL (the servers trust this host, so it is never checked): no message may
/// show it. Percent-encoded, it holds a `/`.
const PASSWORD: &str = "s3cr%2Fet";

/// The files a client names: the authority that signed the server, another authority, and a
/// client certificate for [`CERTIFICATE_ROLE`].
struct Pki {
    /// The server's directory, removed with it.
    dir: PathBuf,
}

impl Pki {
    /// The server's certificate and key, and the files its clients name, by file name.
    fn make() -> (TlsServer, Vec<(&'static str, String)>) {
        let (ca_pem, ca) = authority("actionledger test authority");
        let (other_pem, _) = authority("some other authority");
        // The server's certificate names `localhost` only: `127.0.0.1` is a wrong host name.
        let (server_cert, server_key) = signed(&ca, vec!["localhost".to_owned()], "localhost");
        let (client_cert, client_key) = signed(&ca, vec![], CERTIFICATE_ROLE);
        let server = TlsServer { certificate: server_cert, key: server_key, client_authority: Some(ca_pem.clone()) };
        let files = vec![
            ("ca.pem", ca_pem),
            ("other-ca.pem", other_pem),
            ("client.crt", client_cert),
            ("client.key", client_key),
        ];
        (server, files)
    }

    fn file(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

fn authority(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let pem = params.self_signed(&key).unwrap().pem();
    (pem, Issuer::new(params, key))
}

fn signed(issuer: &Issuer<'static, KeyPair>, names: Vec<String>, common_name: &str) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(names).unwrap();
    params.distinguished_name.push(DnType::CommonName, common_name);
    (params.signed_by(&key, issuer).unwrap().pem(), key.serialize_pem())
}

/// The TLS server of this test process and its files, started on first use; `None` (after a
/// loud message) when PostgreSQL is missing outside CI, as for every PostgreSQL test.
async fn tls_server() -> Option<&'static (Pki, u16)> {
    static SERVER: tokio::sync::OnceCell<Option<(Pki, u16)>> = tokio::sync::OnceCell::const_new();
    SERVER
        .get_or_init(|| async {
            let (server, files) = Pki::make();
            match throwaway_pg::start_tls_server(&server).await {
                Ok(cluster) => {
                    for (name, contents) in files {
                        std::fs::write(cluster.dir.join(name), contents).unwrap();
                    }
                    Some((Pki { dir: cluster.dir }, cluster.port))
                }
                Err(why) => {
                    assert!(
                        !std::env::var("CI").is_ok_and(|v| v == "true"),
                        "PostgreSQL is required in CI but a TLS server could not be started: {why}"
                    );
                    eprintln!("\n!!! SKIPPING a PostgreSQL test: {why}\n");
                    None
                }
            }
        })
        .await
        .as_ref()
}

/// A fresh database on the TLS server; answers its name.
async fn fresh_database(port: u16) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let name = format!("tls_{}", NEXT.fetch_add(1, Ordering::SeqCst));
    let mut admin = admin(port).await;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut admin).await.unwrap();
    name
}

async fn admin(port: u16) -> sqlx::PgConnection {
    sqlx::PgConnection::connect(&format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=disable"))
        .await
        .unwrap()
}

/// Whether the database holds a ledger: a refused connection must have written nothing.
async fn holds_a_ledger(port: u16, database: &str) -> bool {
    let url = format!("postgres://postgres@127.0.0.1:{port}/{database}?sslmode=disable");
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query_scalar("SELECT to_regclass('actions') IS NOT NULL").fetch_one(&mut conn).await.unwrap()
}

fn url(host: &str, port: u16, database: &str, parameters: &str) -> String {
    format!("postgres://postgres:{PASSWORD}@{host}:{port}/{database}?{parameters}")
}

fn actionledger(dir: &Path, db: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .current_dir(dir)
        .env_remove("ACTIONLEDGER_DB")
        .env_remove("DATABASE_URL")
        .env("NO_COLOR", "1")
        .args(["--db", db])
        .args(args)
        .output()
        .expect("run actionledger")
}

/// The ledger's sessions are encrypted.
async fn encrypted(store: &PostgresStore) -> bool {
    sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(store.pool())
        .await
        .unwrap()
}

async fn refusal(url: &str) -> (TlsProblem, String) {
    let Err(error) = PostgresStore::open(url).await else { panic!("{url} connected") };
    let message = error.to_string();
    assert!(!message.contains("s3cr"), "the password shows: {message}");
    eprintln!("refused as it should be: {message}");
    match error {
        StoreError::Tls { problem, .. } => (*problem, message),
        other => panic!("not a TLS refusal: {other}"),
    }
}

#[tokio::test]
async fn require_and_verify_full_connect_and_the_ledger_works() {
    let Some((pki, port)) = tls_server().await else { return };
    let ca = pki.file("ca.pem");
    let dir = tempfile::tempdir().unwrap();
    for (n, (host, parameters)) in [
        // Encrypted, the certificate unchecked.
        ("127.0.0.1", "sslmode=require".to_owned()),
        // The authority and the host name checked.
        ("localhost", format!("sslmode=verify-full&sslrootcert={ca}")),
    ]
    .into_iter()
    .enumerate()
    {
        let database = fresh_database(*port).await;
        let url = url(host, *port, &database, &parameters);
        let store = PostgresStore::open(&url).await.unwrap_or_else(|e| panic!("{parameters}: {e}"));
        assert!(encrypted(&store).await, "{parameters}: the session is not encrypted");
        // The front end, through the same URL: migrated, then a submission recorded and shown.
        let key = format!("order-{n}");
        let submitted = actionledger(dir.path(), &url, &["submit", "--key", &key, "--payload", "{}"]);
        assert_eq!(
            String::from_utf8_lossy(&submitted.stdout),
            "created\n",
            "{}",
            String::from_utf8_lossy(&submitted.stderr)
        );
        let shown = actionledger(dir.path(), &url, &["show", &key, "--json"]);
        let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
        assert_eq!(shown["action"]["state"], "pending", "{parameters}");
        let count: i64 = sqlx::query_scalar("SELECT count(*) FROM actions").fetch_one(store.pool()).await.unwrap();
        assert_eq!(count, 1, "{parameters}");
    }
}

/// A server whose certificate is self-signed and marked as an authority, as `openssl req -x509`
/// makes it by default (PostgreSQL's own instructions): named as its own sslrootcert it is still
/// refused, and the refusal says why and what to do instead of webpki's bare error name.
#[tokio::test]
async fn a_self_signed_authority_as_the_servers_certificate_is_refused_with_what_to_do() {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, "localhost");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let certificate = params.self_signed(&key).unwrap().pem();
    let server = TlsServer { certificate: certificate.clone(), key: key.serialize_pem(), client_authority: None };
    let cluster = match throwaway_pg::start_tls_server(&server).await {
        Ok(cluster) => cluster,
        Err(why) => {
            assert!(!std::env::var("CI").is_ok_and(|v| v == "true"), "PostgreSQL is required in CI: {why}");
            eprintln!("\n!!! SKIPPING a PostgreSQL test: {why}\n");
            return;
        }
    };
    let root = cluster.dir.join("self-signed.pem");
    std::fs::write(&root, certificate).unwrap();
    let database = fresh_database(cluster.port).await;
    let pinned =
        url("localhost", cluster.port, &database, &format!("sslmode=verify-full&sslrootcert={}", root.display()));
    let (problem, message) = refusal(&pinned).await;
    assert!(matches!(problem, TlsProblem::SelfSignedAuthority), "{problem:?}");
    assert!(message.contains("separate authority") && message.contains("sslmode=require"), "{message}");
    let required = url("localhost", cluster.port, &database, "sslmode=require");
    let store = PostgresStore::open(&required).await.expect("sslmode=require connects to the same server");
    assert!(encrypted(&store).await);
}

#[tokio::test]
async fn verify_full_with_the_wrong_authority_is_refused_and_nothing_is_written() {
    let Some((pki, port)) = tls_server().await else { return };
    let database = fresh_database(*port).await;
    let other = pki.file("other-ca.pem");
    let wrong = url("localhost", *port, &database, &format!("sslmode=verify-full&sslrootcert={other}"));
    let (problem, message) = refusal(&wrong).await;
    assert!(matches!(problem, TlsProblem::UnknownAuthority { .. }), "{problem:?}");
    assert!(
        message.contains("sslmode=verify-full") && message.contains(&format!("sslrootcert `{other}`")),
        "{message}"
    );
    // Without any sslrootcert the platform's roots do not know a private authority either.
    let bare = url("localhost", *port, &database, "sslmode=verify-full");
    let (problem, message) = refusal(&bare).await;
    assert!(matches!(problem, TlsProblem::UnknownAuthority { .. }), "{problem:?}");
    assert!(message.contains("no sslrootcert given"), "{message}");
    assert!(!holds_a_ledger(*port, &database).await, "a refused connection migrated the database");

    // The front end: the same words on standard error, the exit code of a failed connection.
    let dir = tempfile::tempdir().unwrap();
    let listed = actionledger(dir.path(), &wrong, &["list"]);
    let stderr = String::from_utf8_lossy(&listed.stderr);
    assert_eq!(listed.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("not signed by an authority this client trusts") && stderr.contains("postgres:***@"),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cr"), "{stderr}");
    assert!(listed.stdout.is_empty());
}

#[tokio::test]
async fn verify_full_with_a_wrong_host_name_is_refused_where_verify_ca_connects() {
    let Some((pki, port)) = tls_server().await else { return };
    let database = fresh_database(*port).await;
    let ca = pki.file("ca.pem");
    // The certificate names `localhost`, not `127.0.0.1`.
    let (problem, message) =
        refusal(&url("127.0.0.1", *port, &database, &format!("sslmode=verify-full&sslrootcert={ca}"))).await;
    assert!(matches!(&problem, TlsProblem::WrongHostName { host, .. } if host == "127.0.0.1"), "{problem:?}");
    assert!(message.contains("not valid for the host name `127.0.0.1`") && message.contains("verify-ca"), "{message}");
    assert!(!holds_a_ledger(*port, &database).await);
    // verify-ca checks the authority only; `require` with an sslrootcert checks it too, as libpq.
    for mode in ["verify-ca", "require"] {
        let store =
            PostgresStore::open(&url("127.0.0.1", *port, &database, &format!("sslmode={mode}&sslrootcert={ca}")))
                .await
                .unwrap_or_else(|e| panic!("{mode}: {e}"));
        assert!(encrypted(&store).await);
    }
    let other = pki.file("other-ca.pem");
    let (problem, message) =
        refusal(&url("127.0.0.1", *port, &database, &format!("sslmode=require&sslrootcert={other}"))).await;
    assert!(
        matches!(problem, TlsProblem::UnknownAuthority { .. }),
        "require with an sslrootcert checks it: {problem:?}"
    );
    assert!(message.contains("(sslmode=require, checked as verify-ca since sslrootcert is given)"), "{message}");
}

#[tokio::test]
async fn a_server_without_tls_is_refused_under_require() {
    // The shared throwaway server runs without TLS.
    let Some(plain) = crate::support::pg::fresh_database().await else { return };
    let separator = if plain.contains('?') { '&' } else { '?' };
    let required =
        format!("{plain}{separator}sslmode=require").replacen("postgres@", &format!("postgres:{PASSWORD}@"), 1);
    let (problem, message) = refusal(&required).await;
    assert!(matches!(problem, TlsProblem::NotOffered { .. }), "{problem:?}");
    assert!(message.contains("does not offer TLS") && message.contains("sslmode=require"), "{message}");
    let mut conn = sqlx::PgConnection::connect(&plain).await.unwrap();
    let ledger: bool =
        sqlx::query_scalar("SELECT to_regclass('actions') IS NOT NULL").fetch_one(&mut conn).await.unwrap();
    assert!(!ledger, "a refused connection migrated the database");
}

#[tokio::test]
async fn a_client_certificate_logs_in_where_the_server_requires_one() {
    let Some((pki, port)) = tls_server().await else { return };
    let database = fresh_database(*port).await;
    let (ca, cert, key) = (pki.file("ca.pem"), pki.file("client.crt"), pki.file("client.key"));
    let base =
        format!("postgres://{CERTIFICATE_ROLE}@localhost:{port}/{database}?sslmode=verify-full&sslrootcert={ca}");
    let store =
        PostgresStore::open(&format!("{base}&sslcert={cert}&sslkey={key}")).await.expect("the certificate logs in");
    let user: String = sqlx::query_scalar("SELECT current_user::text").fetch_one(store.pool()).await.unwrap();
    assert_eq!(user, CERTIFICATE_ROLE);
    assert!(encrypted(&store).await);
    // Without the certificate the server refuses the role.
    let refused = PostgresStore::open(&base).await.unwrap_err().to_string();
    assert!(refused.contains("certificate"), "{refused}");
    // A key without its certificate is a mistake named before any connection.
    let half = PostgresStore::open(&format!("{base}&sslkey={key}")).await.unwrap_err().to_string();
    assert!(half.contains("sslcert and sslkey go together"), "{half}");
}
