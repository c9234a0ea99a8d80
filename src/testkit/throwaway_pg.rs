//! A throwaway PostgreSQL server for tests and benchmarks: started once per process with the
//! machine's `initdb` and `pg_ctl` on a free loopback port (as the `postgres` user when running as
//! root, since `initdb` refuses root), and removed by a watchdog when the process ends. Each caller
//! gets a database of its own.

use sqlx::Connection as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Set this to use an existing server instead; its role needs CREATEDB.
pub const URL_VARIABLE: &str = "ACTIONLEDGER_TEST_PG_URL";

/// Why no throwaway database could be made.
#[derive(Debug, thiserror::Error)]
pub enum ThrowawayPgError {
    #[error("no PostgreSQL server binaries (pg_config --bindir, /usr/lib/postgresql/*/bin)")]
    NoServerBinaries,
    #[error("cannot create {}: {source}", path.display())]
    CreateDir { path: PathBuf, source: std::io::Error },
    #[error("chown: {0}")]
    Chown(#[source] std::io::Error),
    #[error("cannot hand the test cluster's directory to the postgres user")]
    ChownFailed,
    #[error("no free port: {0}")]
    NoFreePort(#[source] std::io::Error),
    /// The free port's listener has no local address.
    #[error("{0}")]
    Port(#[source] std::io::Error),
    #[error("cannot run {}: {source}", program.display())]
    Run { program: PathBuf, source: std::io::Error },
    /// A server binary ran and failed; `output` is what it printed.
    #[error("{} failed: {output}", program.display())]
    Failed { program: PathBuf, output: String },
    #[error("cannot connect to {url}: {source}")]
    Connect { url: String, source: sqlx::Error },
    #[error("cannot create a database: {0}")]
    CreateDatabase(#[source] sqlx::Error),
    #[error("cannot create a role: {0}")]
    CreateRole(#[source] sqlx::Error),
    /// The server failed to start earlier in this process; every caller gets that failure.
    #[error(transparent)]
    Start(Arc<ThrowawayPgError>),
}

static ADMIN_URL: OnceLock<Result<String, Arc<ThrowawayPgError>>> = OnceLock::new();
static DURABLE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes the server this process starts commit durably (`fsync`, `synchronous_commit=on`), as
/// benchmarks need; tests leave it off for speed. Call before the first database is made.
pub fn commit_durably() {
    DURABLE.store(true, std::sync::atomic::Ordering::SeqCst);
}
static NEXT_DATABASE: AtomicUsize = AtomicUsize::new(0);

/// Creates an empty database on the throwaway server (started on first use, or the server at
/// `ACTIONLEDGER_TEST_PG_URL`) and returns its URL.
pub async fn fresh_database() -> Result<String, ThrowawayPgError> {
    let admin = admin_url()?;
    let name = format!("al_{}_{}", std::process::id(), NEXT_DATABASE.fetch_add(1, Ordering::SeqCst));
    let mut conn = sqlx::PgConnection::connect(&admin)
        .await
        .map_err(|source| ThrowawayPgError::Connect { url: admin.clone(), source })?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .map_err(ThrowawayPgError::CreateDatabase)?;
    conn.close().await.ok();
    Ok(with_database(&admin, &name))
}

/// The URL of the server's maintenance database, starting the cluster on first use.
fn admin_url() -> Result<String, ThrowawayPgError> {
    ADMIN_URL
        .get_or_init(|| match std::env::var(URL_VARIABLE) {
            Ok(url) if !url.trim().is_empty() => Ok(url),
            _ => start_cluster().map_err(Arc::new),
        })
        .clone()
        .map_err(ThrowawayPgError::Start)
}

fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let server = match base[scheme_end..].find('/') {
        Some(slash) => &base[..scheme_end + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{server}/{name}?{q}"),
        None => format!("{server}/{name}"),
    }
}

fn start_cluster() -> Result<String, ThrowawayPgError> {
    let root = Path::new("/tmp").join(format!("actionledger-test-pg-{}", std::process::id()));
    let port = launch(&root, |_| Ok(String::new()))?;
    Ok(format!("postgres://postgres@127.0.0.1:{port}/postgres"))
}

/// What a throwaway server that speaks TLS is given, as PEM text: its certificate (with any
/// intermediates) and key, and optionally an authority for client certificates.
#[derive(Debug, Clone)]
pub struct TlsServer {
    pub certificate: String,
    pub key: String,
    /// With it the server asks for client certificates signed by this authority (`ssl_ca_file`),
    /// and the role [`CERTIFICATE_ROLE`] may log in over TLS only with one whose common name is
    /// its name (pg_hba `hostssl ... cert`).
    pub client_authority: Option<String>,
}

/// A server [`start_tls_server`] started.
#[derive(Debug, Clone)]
pub struct TlsCluster {
    pub port: u16,
    /// The server's directory, removed with it when the process ends: a place for the client's
    /// certificate files too.
    pub dir: PathBuf,
}

/// The role that logs in to a [`start_tls_server`] server with a client certificate only.
pub const CERTIFICATE_ROLE: &str = "cert_user";

/// The role that logs in to a [`start_tls_server`] server with [`PASSWORD_ROLE_PASSWORD`] only
/// (SCRAM), for the words of a wrong password.
pub const PASSWORD_ROLE: &str = "password_user";
pub const PASSWORD_ROLE_PASSWORD: &str = "the-right-password";

/// A server of its own that speaks TLS (`ssl=on`) on a free loopback port, besides plaintext for
/// every role but [`CERTIFICATE_ROLE`]; removed by a watchdog when the process ends. Answers its
/// port and directory: the tests choose the host name (`localhost`, `127.0.0.1`) and `sslmode` themselves. Not
/// shared with [`fresh_database`], which needs no TLS; each call starts another server.
pub async fn start_tls_server(tls: &TlsServer) -> Result<TlsCluster, ThrowawayPgError> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let root = Path::new("/tmp").join(format!(
        "actionledger-test-pg-{}-tls-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    let port = launch(&root, |root| {
        let mut options = vec![
            "-c ssl=on".to_owned(),
            format!("-c ssl_cert_file={}", write_private(root, "server.crt", &tls.certificate)?.display()),
            format!("-c ssl_key_file={}", write_private(root, "server.key", &tls.key)?.display()),
            format!("-c hba_file={}", write_private(root, "pg_hba.conf", &tls_hba())?.display()),
        ];
        if let Some(client_ca) = &tls.client_authority {
            options.push(format!("-c ssl_ca_file={}", write_private(root, "client-ca.crt", client_ca)?.display()));
        }
        Ok(options.join(" "))
    })?;
    let admin = format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=disable");
    let mut conn = sqlx::PgConnection::connect(&admin)
        .await
        .map_err(|source| ThrowawayPgError::Connect { url: admin.clone(), source })?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE ROLE {CERTIFICATE_ROLE} LOGIN SUPERUSER")))
        .execute(&mut conn)
        .await
        .map_err(ThrowawayPgError::CreateRole)?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE ROLE {PASSWORD_ROLE} LOGIN PASSWORD '{PASSWORD_ROLE_PASSWORD}'")))
        .execute(&mut conn)
        .await
        .map_err(ThrowawayPgError::CreateRole)?;
    conn.close().await.ok();
    Ok(TlsCluster { port, dir: root })
}

/// A server of its own, which a test may stop and start again (a database outage), unlike the
/// shared one of [`fresh_database`]; removed by a watchdog when the process ends.
#[derive(Debug, Clone)]
pub struct PrivateCluster {
    /// The URL of its maintenance database.
    pub url: String,
    port: u16,
    root: PathBuf,
}

/// Starts a [`PrivateCluster`] on a free loopback port.
pub fn start_private_server() -> Result<PrivateCluster, ThrowawayPgError> {
    start_private_server_with("")
}

/// Starts a [`PrivateCluster`] with server options of its own (`-c max_connections=100`), given
/// after the test servers' and so taking their place.
pub fn start_private_server_with(options: &str) -> Result<PrivateCluster, ThrowawayPgError> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let root = Path::new("/tmp").join(format!(
        "actionledger-test-pg-{}-private-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    let port = launch(&root, |_| Ok(options.to_owned()))?;
    Ok(PrivateCluster { url: format!("postgres://postgres@127.0.0.1:{port}/postgres"), port, root })
}

impl PrivateCluster {
    /// Stops the server (fast shutdown: sessions are ended) and waits until it is down.
    pub fn stop(&self) -> Result<(), ThrowawayPgError> {
        let bindir = pg_bindir().ok_or(ThrowawayPgError::NoServerBinaries)?;
        let data = self.root.join("data");
        let args: [&std::ffi::OsStr; 6] =
            ["-D".as_ref(), data.as_os_str(), "-m".as_ref(), "fast".as_ref(), "-w".as_ref(), "stop".as_ref()];
        run(running_as_root(), &bindir.join("pg_ctl"), &args)
    }

    /// Starts the stopped server again on the same port and waits until it accepts connections.
    pub fn start(&self) -> Result<(), ThrowawayPgError> {
        let bindir = pg_bindir().ok_or(ThrowawayPgError::NoServerBinaries)?;
        let data = self.root.join("data");
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off",
            self.port,
            self.root.display()
        );
        let log = self.root.join("server.log");
        let args: [&std::ffi::OsStr; 8] = [
            "-D".as_ref(),
            data.as_os_str(),
            "-o".as_ref(),
            options.as_ref(),
            "-l".as_ref(),
            log.as_os_str(),
            "-w".as_ref(),
            "start".as_ref(),
        ];
        run(running_as_root(), &bindir.join("pg_ctl"), &args)
    }
}

/// Who may log in to a TLS server, and how: everyone on this host without a password, except
/// the certificate role, which needs TLS and a client certificate naming it, and the password
/// role, which needs its password.
fn tls_hba() -> String {
    let mut hba = vec!["local all all trust".to_owned()];
    for network in ["127.0.0.1/32", "::1/128"] {
        hba.push(format!("hostssl all {CERTIFICATE_ROLE} {network} cert"));
        hba.push(format!("host all {CERTIFICATE_ROLE} {network} reject"));
        hba.push(format!("host all {PASSWORD_ROLE} {network} scram-sha-256"));
        hba.push(format!("host all all {network} trust"));
    }
    hba.join("\n") + "\n"
}

/// Writes a file only its owner may read: the server refuses a key others can read.
fn write_private(root: &Path, name: &str, contents: &str) -> Result<PathBuf, ThrowawayPgError> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = root.join(name);
    std::fs::write(&path, contents)
        .and_then(|()| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)))
        .map_err(|source| ThrowawayPgError::CreateDir { path: path.clone(), source })?;
    Ok(path)
}

/// Creates a cluster under `root` and starts it on a free loopback port, which it answers.
/// `prepare` writes its own files into `root` before the directory is handed to the postgres
/// user, and answers extra server options.
fn launch(
    root: &Path,
    prepare: impl FnOnce(&Path) -> Result<String, ThrowawayPgError>,
) -> Result<u16, ThrowawayPgError> {
    let bindir = pg_bindir().ok_or(ThrowawayPgError::NoServerBinaries)?;
    std::fs::create_dir_all(root).map_err(|source| ThrowawayPgError::CreateDir { path: root.to_owned(), source })?;
    let extra = prepare(root)?;
    let as_postgres = running_as_root();
    if as_postgres {
        let status = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(root)
            .status()
            .map_err(ThrowawayPgError::Chown)?;
        if !status.success() {
            return Err(ThrowawayPgError::ChownFailed);
        }
    }
    let data = root.join("data");
    let port = free_port()?;
    run(
        as_postgres,
        &bindir.join("initdb"),
        &[
            "-D".as_ref(),
            data.as_os_str(),
            "--auth=trust".as_ref(),
            "--username=postgres".as_ref(),
            "--encoding=UTF8".as_ref(),
            "--no-sync".as_ref(),
        ],
    )?;
    let durability = if DURABLE.load(std::sync::atomic::Ordering::SeqCst) {
        "-c fsync=on -c synchronous_commit=on"
    } else {
        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    };
    // No autovacuum: with hundreds of short-lived databases its workers visit each one within
    // seconds of its creation, and an ANALYZE of a freshly seeded table deadlocks with a
    // migration's `ALTER TABLE ... OWNER` in the same moment (seen once in a full run). The
    // tests measure the ledger, not the server's housekeeping.
    let options = format!(
        "-p {port} -k {} -c listen_addresses=127.0.0.1 -c max_connections=400 -c autovacuum=off {durability} {extra}",
        root.display()
    );
    run(
        as_postgres,
        &bindir.join("pg_ctl"),
        &[
            "-D".as_ref(),
            data.as_os_str(),
            "-o".as_ref(),
            options.as_ref(),
            "-l".as_ref(),
            root.join("server.log").as_os_str(),
            "-w".as_ref(),
            "start".as_ref(),
        ],
    )?;
    spawn_watchdog(as_postgres, &bindir, root, &data);
    Ok(port)
}

/// `psql` beside the server binaries the throwaway servers run, where it is installed: the tests
/// hold this client's TLS to what libpq does with the same URL.
pub fn psql() -> Option<PathBuf> {
    pg_bindir().map(|dir| dir.join("psql")).filter(|psql| psql.is_file())
}

/// Where the machine's PostgreSQL programs are (`pg_config --bindir`, else the newest installed).
fn pg_bindir() -> Option<PathBuf> {
    let from_pg_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let mut candidates: Vec<PathBuf> = from_pg_config.into_iter().collect();
    if let Ok(entries) = std::fs::read_dir("/usr/lib/postgresql") {
        let mut versions: Vec<PathBuf> = entries.flatten().map(|e| e.path().join("bin")).collect();
        versions.sort();
        candidates.extend(versions.into_iter().rev());
    }
    candidates.into_iter().find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
}

fn running_as_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn free_port() -> Result<u16, ThrowawayPgError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(ThrowawayPgError::NoFreePort)?;
    listener.local_addr().map(|a| a.port()).map_err(ThrowawayPgError::Port)
}

/// Runs a server binary, as the postgres user when the tests run as root (initdb refuses root).
fn run(as_postgres: bool, program: &Path, args: &[&std::ffi::OsStr]) -> Result<(), ThrowawayPgError> {
    let mut command = if as_postgres {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    };
    let output = command
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| ThrowawayPgError::Run { program: program.to_owned(), source })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(ThrowawayPgError::Failed {
            program: program.to_owned(),
            output: format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr)),
        })
    }
}

/// Stops the cluster and removes its files once this test process has exited.
fn spawn_watchdog(as_postgres: bool, bindir: &Path, root: &Path, data: &Path) {
    let stop = format!("{} -D {} stop -m immediate", bindir.join("pg_ctl").display(), data.display());
    let stop = if as_postgres { format!("runuser -u postgres -- {stop}") } else { stop };
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 0.5; done; {stop} >/dev/null 2>&1; rm -rf {root}",
        pid = std::process::id(),
        root = root.display()
    );
    let spawned = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    if let Err(e) = spawned {
        eprintln!("warning: no watchdog for the test cluster at {}: {e}", root.display());
    }
}
