//! TLS to PostgreSQL against throwaway servers started with `ssl=on` and a certificate authority
//! made here: which `sslmode`s connect, and how each refusal is worded (its parameter named, the
//! password hidden, nothing written).

use actionledger::store::{PostgresStore, StoreError, TlsProblem};
use actionledger::testkit::throwaway_pg::{self, CERTIFICATE_ROLE, PASSWORD_ROLE, PASSWORD_ROLE_PASSWORD, TlsServer};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use sqlx::Connection as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
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
                    // Keys only their owner may read, as libpq requires of sslkey.
                    std::fs::set_permissions(cluster.dir.join("client.key"), std::fs::Permissions::from_mode(0o600))
                        .unwrap();
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

/// PostgreSQL's manual's self-signed server certificate (ssl-tcp.html, "Creating
/// Certificates"), for the host `localhost` where the manual has `dbhost.yourdomain.com`.
const MANUAL_SELF_SIGNED: &str =
    r#"openssl req -new -x509 -days 365 -nodes -text -out server.crt -keyout server.key -subj "/CN=localhost""#;

/// The manual's authority and the server's certificate it signs (version 1: no -extfile), and a
/// client certificate for [`CERTIFICATE_ROLE`] made the same way.
const MANUAL_AUTHORITY: &str = r#"
openssl req -new -nodes -text -out root.csr -keyout root.key -subj "/CN=root.yourdomain.com"
chmod og-rwx root.key
openssl x509 -req -in root.csr -text -days 3650 -extfile /etc/ssl/openssl.cnf -extensions v3_ca -signkey root.key -out root.crt
openssl req -new -nodes -text -out server.csr -keyout server.key -subj "/CN=localhost"
chmod og-rwx server.key
openssl x509 -req -in server.csr -text -days 365 -CA root.crt -CAkey root.key -CAcreateserial -out server.crt
openssl req -new -nodes -text -out client.csr -keyout client.key -subj "/CN=cert_user"
chmod og-rwx client.key
openssl x509 -req -in client.csr -text -days 365 -CA root.crt -CAkey root.key -CAcreateserial -out client.crt
"#;

/// Runs `commands` in `dir` as an operator pastes them into bash.
fn shell(dir: &Path, commands: &str) {
    let out = Command::new("bash").args(["-ec", commands]).current_dir(dir).output().expect("run bash");
    assert!(out.status.success(), "{commands}\n{}", String::from_utf8_lossy(&out.stderr));
}

/// The `openssl` command a refusal gives, between its backquotes: the last one it quotes (the
/// first says what made the certificate).
fn openssl_line(message: &str) -> &str {
    let start = message.rfind("`openssl ").unwrap_or_else(|| panic!("no openssl line in: {message}")) + 1;
    let length = message[start..].find('`').expect("the closing backquote");
    &message[start..start + length]
}

/// Holds psql (libpq) to `connects` with the same URL, where psql is installed; answers what it
/// said. `home` stands for the user's home, so that no `~/.postgresql` file takes part.
fn psql_does(url: &str, home: &Path, connects: bool) -> String {
    let Some(psql) = throwaway_pg::psql() else {
        eprintln!("psql is not installed: {url} is not compared with libpq");
        return String::new();
    };
    let out = Command::new(psql)
        .args([url, "-Atc", "SELECT 1"])
        .env("HOME", home)
        .env("PGCONNECT_TIMEOUT", "10")
        .env_remove("PGSSLMODE")
        .env_remove("PGSSLROOTCERT")
        .env_remove("PGSSLCERT")
        .env_remove("PGSSLKEY")
        .env_remove("PGPASSWORD")
        .output()
        .expect("run psql");
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.success(), connects, "psql with {url}: {said}");
    said
}

/// A server started with `dir`'s server.crt and server.key, asking client certificates of
/// `client_authority`; `None` (after a loud message) when PostgreSQL is missing outside CI.
async fn server_of(dir: &Path, client_authority: Option<&str>) -> Option<throwaway_pg::TlsCluster> {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    let server = TlsServer {
        certificate: read("server.crt"),
        key: read("server.key"),
        client_authority: client_authority.map(read),
    };
    match throwaway_pg::start_tls_server(&server).await {
        Ok(cluster) => Some(cluster),
        Err(why) => {
            assert!(!std::env::var("CI").is_ok_and(|v| v == "true"), "PostgreSQL is required in CI: {why}");
            eprintln!("\n!!! SKIPPING a PostgreSQL test: {why}\n");
            None
        }
    }
}

/// Gives the running server `dir`'s server.crt and server.key, as an operator does: the files
/// replaced, then `SELECT pg_reload_conf()`. Returns once new sessions have the new ones.
async fn reload(cluster: &throwaway_pg::TlsCluster, dir: &Path) {
    for name in ["server.crt", "server.key"] {
        std::fs::write(cluster.dir.join(name), std::fs::read(dir.join(name)).unwrap()).unwrap();
    }
    let loaded_at = "SELECT pg_conf_load_time()::text";
    let before: String = sqlx::query_scalar(loaded_at).fetch_one(&mut admin(cluster.port).await).await.unwrap();
    sqlx::query("SELECT pg_reload_conf()").execute(&mut admin(cluster.port).await).await.unwrap();
    for _ in 0..100 {
        let now: String = sqlx::query_scalar(loaded_at).fetch_one(&mut admin(cluster.port).await).await.unwrap();
        if now != before {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the server did not reload its configuration");
}

async fn connects(url: &str) {
    let store = PostgresStore::open(url).await.unwrap_or_else(|e| panic!("{url}: {e}"));
    assert!(encrypted(&store).await, "{url}: not encrypted");
    store.pool().close().await;
}

/// The manual's self-signed certificate, which is an authority and names its host only as a
/// common name: psql connects with it as its own sslrootcert, this client does under `require`
/// only, and says why elsewhere with the command that reissues it in a form both accept.
#[tokio::test]
async fn the_manuals_self_signed_certificate_where_psql_takes_it() {
    let made = tempfile::tempdir().unwrap();
    let home = made.path();
    shell(home, MANUAL_SELF_SIGNED);
    let Some(cluster) = server_of(home, None).await else { return };
    let database = fresh_database(cluster.port).await;
    let root = home.join("server.crt").display().to_string();
    let required = url("localhost", cluster.port, &database, "sslmode=require");
    psql_does(&required, home, true);
    connects(&required).await;
    let mut reissue = String::new();
    for mode in ["verify-ca", "verify-full"] {
        let pinned = url("localhost", cluster.port, &database, &format!("sslmode={mode}&sslrootcert={root}"));
        psql_does(&pinned, home, true);
        let (problem, message) = refusal(&pinned).await;
        assert!(matches!(&problem, TlsProblem::SelfSignedAuthority { host } if host == "localhost"), "{problem:?}");
        assert!(message.contains("libpq trusts it") && message.contains("sslmode=require"), "{message}");
        reissue = openssl_line(&message).to_owned();
    }
    // The command the refusal gives, run where the manual's was: both clients take the result
    // as its own authority, the host name checked.
    shell(home, &reissue);
    reload(&cluster, home).await;
    let pinned = url("localhost", cluster.port, &database, &format!("sslmode=verify-full&sslrootcert={root}"));
    psql_does(&pinned, home, true);
    connects(&pinned).await;
    let wrong_host = url("127.0.0.1", cluster.port, &database, &format!("sslmode=verify-full&sslrootcert={root}"));
    psql_does(&wrong_host, home, false);
    let (problem, _) = refusal(&wrong_host).await;
    assert!(matches!(problem, TlsProblem::WrongHostName { .. }), "{problem:?}");
}

/// The manual's authority and the version 1 certificates it signs: psql takes them in every
/// mode; this client reads version 3 only and says so, naming the certificate (the server's or
/// its own) and the command that reissues it, after which it connects. A certificate with a
/// common name and no subjectAltName passes verify-full in psql, here verify-ca only. A key
/// others may read is refused by both.
#[tokio::test]
async fn the_manuals_authority_and_version_1_certificates_where_psql_takes_them() {
    let made = tempfile::tempdir().unwrap();
    let home = made.path();
    shell(home, MANUAL_AUTHORITY);
    let Some(cluster) = server_of(home, Some("root.crt")).await else { return };
    let database = fresh_database(cluster.port).await;
    let root = home.join("root.crt").display().to_string();
    let modes = ["sslmode=require".to_owned(), format!("sslmode=verify-ca&sslrootcert={root}")];
    let verify_full = format!("sslmode=verify-full&sslrootcert={root}");
    let mut reissue = String::new();
    // `prefer`, the default, tries TLS and stops at the certificate as `require` does.
    let prefer = "sslmode=prefer".to_owned();
    for parameters in [&prefer].into_iter().chain(&modes).chain([&verify_full]) {
        let url = url("localhost", cluster.port, &database, parameters);
        psql_does(&url, home, true);
        let (problem, message) = refusal(&url).await;
        assert!(matches!(problem, TlsProblem::ServerCertificateVersion1 { .. }), "{parameters}: {problem:?}");
        assert!(message.contains("the server's certificate is X.509 version 1"), "{message}");
        reissue = openssl_line(&message).to_owned();
    }
    assert!(reissue.contains("subjectAltName=DNS:localhost"), "{reissue}");

    // Version 3 with a common name alone.
    shell(
        home,
        "openssl x509 -req -in server.csr -text -days 365 -CA root.crt -CAkey root.key -CAcreateserial -out \
         server.crt -extfile <(printf 'basicConstraints=critical,CA:FALSE\\n')",
    );
    reload(&cluster, home).await;
    let full = url("localhost", cluster.port, &database, &verify_full);
    psql_does(&full, home, true);
    let (problem, message) = refusal(&full).await;
    assert!(matches!(problem, TlsProblem::NoSubjectAltName { .. }), "{problem:?}");
    assert!(message.contains("subjectAltName=DNS:localhost") && message.contains("verify-ca"), "{message}");
    for parameters in &modes {
        connects(&url("localhost", cluster.port, &database, parameters)).await;
    }

    // The refusal's own command: every mode connects.
    shell(home, &reissue);
    reload(&cluster, home).await;
    for parameters in modes.iter().chain([&verify_full]) {
        let url = url("localhost", cluster.port, &database, parameters);
        psql_does(&url, home, true);
        connects(&url).await;
    }

    // The client's version 1 certificate is named as the client's.
    let (cert, key) = (home.join("client.crt"), home.join("client.key"));
    let as_certificate = format!(
        "postgres://{CERTIFICATE_ROLE}@localhost:{}/{database}?{verify_full}&sslcert={}&sslkey={}",
        cluster.port,
        cert.display(),
        key.display()
    );
    psql_does(&as_certificate, home, true);
    let (problem, message) = refusal(&as_certificate).await;
    assert!(matches!(&problem, TlsProblem::ClientCertificateVersion1 { path } if *path == cert), "{problem:?}");
    assert!(message.contains(&format!("sslcert `{}`", cert.display())), "{message}");
    assert!(!message.contains("server's certificate"), "{message}");
    shell(home, openssl_line(&message));
    let store = PostgresStore::open(&as_certificate).await.expect("the reissued certificate logs in");
    let user: String = sqlx::query_scalar("SELECT current_user::text").fetch_one(store.pool()).await.unwrap();
    assert_eq!(user, CERTIFICATE_ROLE);
    store.pool().close().await;

    // The key's permissions, by libpq's rule: a key others may read is refused; one owned by root
    // may be read by its group.
    let chmod = |mode: u32| std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).unwrap();
    chmod(0o644);
    let said = psql_does(&as_certificate, home, false);
    assert!(said.is_empty() || said.contains("group or world access"), "{said}");
    let (problem, message) = refusal(&as_certificate).await;
    assert!(matches!(problem, TlsProblem::KeyReadableByOthers { mode: 0o644, .. }), "{problem:?}");
    assert!(message.contains(&format!("chmod 600 {}", key.display())), "{message}");
    if std::fs::metadata(&key).unwrap().uid() == 0 {
        chmod(0o640);
        psql_does(&as_certificate, home, true);
        PostgresStore::open(&as_certificate).await.expect("a key of root's that its group may read");
    }
}

/// A wrong password is said in the server's words, without the line of the server's C source
/// sqlx adds to them.
#[tokio::test]
async fn a_wrong_password_is_said_without_the_servers_source_line() {
    let Some((_, port)) = tls_server().await else { return };
    let database = fresh_database(*port).await;
    let wrong = format!("postgres://{PASSWORD_ROLE}:not-the-password@127.0.0.1:{port}/{database}?sslmode=require");
    let message = PostgresStore::open(&wrong).await.unwrap_err().to_string();
    assert!(message.contains("password authentication failed"), "{message}");
    assert!(!message.contains(" at line ") && !message.contains("not-the-password"), "{message}");
    let right = wrong.replace("not-the-password", PASSWORD_ROLE_PASSWORD);
    sqlx::PgConnection::connect(&right).await.expect("the right password logs in");
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
