//! TLS to PostgreSQL: the connection options a URL asks for (`sslmode`, `sslrootcert`, `sslcert`,
//! `sslkey`, as libpq reads them), the warning when a password crosses the network in clear, and
//! TLS failures worded so that a person knows which parameter to check.

use super::StoreError;
use super::url::redact_url;
use sqlx::postgres::{PgConnectOptions, PgSslMode};
use std::net::IpAddr;
use std::path::PathBuf;

/// Why a TLS connection to PostgreSQL could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsProblem {
    #[error(
        "the server does not offer TLS, and sslmode={mode} refuses to connect without it; turn `ssl = on` in \
         the server's postgresql.conf, or on the server's own host connect over its Unix socket"
    )]
    NotOffered { mode: &'static str },
    #[error(
        "the server's certificate is not signed by an authority this client trusts ({roots}); check that \
         sslrootcert names the file of the authority that signed it (a managed PostgreSQL's provider publishes \
         its CA bundle)"
    )]
    UnknownAuthority { roots: String },
    #[error(
        "the server's certificate is not valid for the host name `{host}` ({detail}); connect with a name the \
         certificate was issued for, or, with a private authority that names no hosts, use sslmode=verify-ca"
    )]
    WrongHostName { host: String, detail: String },
    #[error(
        "the server presents a self-signed certificate that is also a certificate authority (what `openssl req \
         -x509` makes by default, as in PostgreSQL's manual); libpq trusts it when it is its own sslrootcert, but \
         this client's TLS library (rustls) accepts a server's certificate only from an authority other than \
         itself; reissue it on the server as a self-signed certificate that is not an authority, and name the new \
         server.crt in sslrootcert: `{}`; or use sslmode=require without sslrootcert (encrypted, not verified)",
        reissue_self_signed(host)
    )]
    SelfSignedAuthority { host: String },
    #[error(
        "the server's certificate is X.509 version 1, with no extensions (what `openssl x509 -req` makes without \
         -extfile, as in PostgreSQL's manual); libpq accepts it, but this client's TLS library (rustls) reads \
         version 3 certificates only, under every sslmode, require included; reissue it on the server as version \
         3 from the same request and authority, then reload the server (`SELECT pg_reload_conf()`): `{}`",
        reissue_server_v3(host)
    )]
    ServerCertificateVersion1 { host: String },
    #[error(
        "sslcert `{}` is an X.509 version 1 certificate, with no extensions (what `openssl x509 -req` makes \
         without -extfile, as in PostgreSQL's manual); the server would accept it, but this client's TLS library \
         (rustls) reads version 3 certificates only; reissue it as version 3 from the same request and authority: \
         `{}`",
        path.display(), reissue_client_v3(path)
    )]
    ClientCertificateVersion1 { path: PathBuf },
    #[error(
        "the server's certificate names no host in subjectAltName, only a common name (what `openssl req -subj \
         /CN=...` makes without -addext); libpq then compares the common name with the host, but this client's \
         TLS library (rustls) reads subjectAltName only; reissue the certificate with `subjectAltName={}` (in \
         -extfile or -addext), or use sslmode=verify-ca, which checks the authority and not the name",
        subject_alt_name(host)
    )]
    NoSubjectAltName { host: String },
    #[error(
        "sslkey `{}` may be read by others (mode {mode:04o}); libpq refuses such a key too: `chmod 600 {}` (or, \
         for a key owned by root, `chmod 640`)",
        path.display(), path.display()
    )]
    KeyReadableByOthers { path: PathBuf, mode: u32 },
    #[error("the server's certificate is refused: {detail}; check the certificate the server presents and sslrootcert")]
    BadCertificate { detail: String },
    #[error("the server refused the TLS handshake ({detail}); check sslcert and sslkey (the client certificate)")]
    ClientCertificateRefused { detail: String },
    #[error("cannot read {parameter} `{}`: {source}", path.display())]
    File {
        parameter: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "sslpassword is not supported: this client reads only unencrypted keys; decrypt the key into a file only \
         its owner can read (`openssl pkey -in KEY -out PLAIN`) and name that in sslkey"
    )]
    EncryptedKey,
    #[error("sslcert and sslkey go together: {given} is given without {missing}")]
    HalfAClientCertificate { given: &'static str, missing: &'static str },
    #[error("the TLS handshake failed: {detail}; check sslmode and sslrootcert")]
    Handshake { detail: String },
}

/// The subjectAltName entry that names `host` (`IP:` for an address, else `DNS:`).
fn subject_alt_name(host: &str) -> String {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if bare.parse::<IpAddr>().is_ok() { format!("IP:{bare}") } else { format!("DNS:{bare}") }
}

/// PostgreSQL's manual's self-signed certificate, made a certificate that is not an authority
/// and that names `host` where rustls looks for it.
fn reissue_self_signed(host: &str) -> String {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    format!(
        "openssl req -new -x509 -days 365 -nodes -text -out server.crt -keyout server.key -subj \"/CN={bare}\" \
         -addext \"subjectAltName={}\" -addext \"basicConstraints=critical,CA:FALSE\"",
        subject_alt_name(host)
    )
}

/// PostgreSQL's manual's signing of server.csr by root.crt, with the extensions that make the
/// certificate version 3.
fn reissue_server_v3(host: &str) -> String {
    format!(
        "openssl x509 -req -in server.csr -text -days 365 -CA root.crt -CAkey root.key -CAcreateserial -out \
         server.crt -extfile <(printf 'subjectAltName={}\\nbasicConstraints=critical,CA:FALSE\\n')",
        subject_alt_name(host)
    )
}

/// PostgreSQL's manual's signing of a client's request, as for the server, with an extension
/// that makes the certificate version 3; the request is taken to sit beside the certificate.
fn reissue_client_v3(certificate: &std::path::Path) -> String {
    format!(
        "openssl x509 -req -in {} -text -days 365 -CA root.crt -CAkey root.key -CAcreateserial -out {} -extfile \
         <(printf 'basicConstraints=critical,CA:FALSE\\n')",
        certificate.with_extension("csr").display(),
        certificate.display()
    )
}

/// Whether the first certificate in a PEM file is one rustls refuses to read for being X.509
/// version 1 (`false` for a file it cannot read at all: sqlx reports that one).
fn is_version_1(pem: &[u8]) -> bool {
    use rustls::pki_types::{CertificateDer, pem::PemObject as _};
    let Some(Ok(der)) = CertificateDer::pem_slice_iter(pem).next() else { return false };
    matches!(webpki::EndEntityCert::try_from(&der), Err(webpki::Error::UnsupportedCertVersion))
}

/// libpq's rule for a private key file: none of the group's or others' permissions, except that
/// a key owned by root may be read by its group. Answers the mode that breaks it.
#[cfg(unix)]
fn key_readable_by_others(metadata: &std::fs::Metadata) -> Option<u32> {
    use std::os::unix::fs::MetadataExt as _;
    let mode = metadata.mode() & 0o7777;
    let forbidden = if metadata.uid() == 0 { 0o037 } else { 0o077 };
    (mode & forbidden != 0).then_some(mode)
}

#[cfg(not(unix))]
fn key_readable_by_others(_: &std::fs::Metadata) -> Option<u32> {
    None
}

/// What a URL (or libpq's `PGSSL*` and `PGPASSWORD` variables, which sqlx reads too) says about
/// TLS and the password: the files it names, its `sslmode`, whether a password goes with it.
#[derive(Debug, Default)]
struct TlsFiles {
    root_cert: Option<PathBuf>,
    client_cert: Option<PathBuf>,
    client_key: Option<PathBuf>,
    /// A password in the user info, a `password=` parameter or `PGPASSWORD`.
    password: bool,
    /// The `sslmode` the URL names, lowercase (`PGSSLMODE` where it names none).
    mode: Option<String>,
    /// The URL gives `sslpassword`, for an encrypted key sqlx cannot read (it ignores the
    /// parameter silently).
    key_password: bool,
}

impl TlsFiles {
    fn of(url: &str) -> Self {
        let env_path = |name: &str| {
            std::env::var(name).ok().filter(|v| !v.is_empty() && !v.starts_with("-----BEGIN")).map(PathBuf::from)
        };
        let mut files = Self {
            root_cert: env_path("PGSSLROOTCERT"),
            client_cert: env_path("PGSSLCERT"),
            client_key: env_path("PGSSLKEY"),
            password: std::env::var_os("PGPASSWORD").is_some(),
            mode: std::env::var("PGSSLMODE").ok().map(|mode| mode.to_ascii_lowercase()),
            key_password: false,
        };
        // sqlx parses the URL with the same parser; one it refuses never gets this far.
        let Ok(parsed) = ::url::Url::parse(url) else { return files };
        files.password |= parsed.password().is_some();
        for (key, value) in parsed.query_pairs() {
            match &*key {
                "sslmode" | "ssl-mode" => files.mode = Some(value.to_ascii_lowercase()),
                "sslrootcert" | "ssl-root-cert" | "ssl-ca" => files.root_cert = Some(PathBuf::from(&*value)),
                "sslcert" | "ssl-cert" => files.client_cert = Some(PathBuf::from(&*value)),
                "sslkey" | "ssl-key" => files.client_key = Some(PathBuf::from(&*value)),
                "password" => files.password = true,
                "sslpassword" => files.key_password = true,
                _ => {}
            }
        }
        files
    }

    /// Each named file must be readable, so that a typo is reported with its parameter's name
    /// (sqlx reports only "No such file or directory"); a client certificate rustls cannot read is
    /// named as the client's before sqlx reports it as a certificate refused; a key others may
    /// read is refused as libpq refuses it.
    fn check(&self) -> Result<(), TlsProblem> {
        if self.key_password {
            return Err(TlsProblem::EncryptedKey);
        }
        match (&self.client_cert, &self.client_key) {
            (Some(_), None) => return Err(TlsProblem::HalfAClientCertificate { given: "sslcert", missing: "sslkey" }),
            (None, Some(_)) => return Err(TlsProblem::HalfAClientCertificate { given: "sslkey", missing: "sslcert" }),
            _ => {}
        }
        for (parameter, path) in
            [("sslrootcert", &self.root_cert), ("sslcert", &self.client_cert), ("sslkey", &self.client_key)]
        {
            if let Some(path) = path {
                let file = |source| TlsProblem::File { parameter, path: path.clone(), source };
                let contents = std::fs::read(path).map_err(file)?;
                if parameter == "sslcert" && is_version_1(&contents) {
                    return Err(TlsProblem::ClientCertificateVersion1 { path: path.clone() });
                }
                if parameter == "sslkey"
                    && let Some(mode) = key_readable_by_others(&std::fs::metadata(path).map_err(file)?)
                {
                    return Err(TlsProblem::KeyReadableByOthers { path: path.clone(), mode });
                }
            }
        }
        Ok(())
    }
}

/// The connection options for a `postgres://` URL, with the TLS rules applied:
/// - a Unix socket never uses TLS, as with libpq (the server refuses TLS there);
/// - `sslmode=require` with an `sslrootcert` checks the certificate's authority (libpq's
///   `verify-ca`), since a named authority is there to be checked;
/// - the TLS files named must be readable, the client's certificate one rustls reads, its key
///   one no one else may read (libpq's rule).
///
/// Warns on standard error when a password is about to go in clear to a host that is not this one.
pub(crate) fn connect_options(url: &str) -> Result<PgConnectOptions, StoreError> {
    let options: PgConnectOptions = for_sqlx(url)
        .parse()
        .map_err(|e| StoreError::Open(format!("{} is not a valid PostgreSQL URL: {e}", redact_url(url))))?;
    let files = TlsFiles::of(url);
    if is_unix_socket(&options) {
        return Ok(options.ssl_mode(PgSslMode::Disable));
    }
    let options = if matches!(options.get_ssl_mode(), PgSslMode::Require) && files.root_cert.is_some() {
        options.ssl_mode(PgSslMode::VerifyCa)
    } else {
        options
    };
    if !matches!(options.get_ssl_mode(), PgSslMode::Disable | PgSslMode::Allow) {
        files.check().map_err(|problem| tls_error(url, &options, problem))?;
    }
    if let Some(warning) = plaintext_warning(&options, files.password, Some(false), files.mode.is_some()) {
        eprintln!("warning: {warning}");
    }
    Ok(options)
}

/// The query parameters sqlx's PostgreSQL URL parser reads (sqlx-postgres `options/parse.rs`).
const SQLX_PARAMETERS: &[&str] = &[
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
];

/// `url` without the query parameters sqlx does not read. sqlx logs each one it ignores with its
/// value (`ignoring unrecognized connect parameter key=sslpassword value=...`), which puts a
/// secret such as `sslpassword` in the log; they are logged here by name only. The URL is
/// returned unchanged when it has none, and `TlsFiles` still reads the original.
fn for_sqlx(url: &str) -> String {
    let Ok(mut parsed) = ::url::Url::parse(url) else { return url.to_owned() };
    let (kept, ignored): (Vec<_>, Vec<_>) =
        parsed.query_pairs().into_owned().partition(|(key, _)| SQLX_PARAMETERS.contains(&key.as_str()));
    if ignored.is_empty() {
        return url.to_owned();
    }
    for (key, _) in &ignored {
        tracing::warn!(parameter = %key, "ignoring the connect parameter {key}, which this client does not use (its value is not logged)");
    }
    if kept.is_empty() {
        parsed.set_query(None);
    } else {
        parsed.query_pairs_mut().clear().extend_pairs(kept);
    }
    parsed.into()
}

/// After a first connection under `sslmode=prefer`: warns if the server did not offer TLS, so
/// that the password went in clear.
pub(super) async fn warn_if_prefer_fell_back(
    connection: &mut sqlx::PgConnection,
    url: &str,
    options: &PgConnectOptions,
) {
    if !matches!(options.get_ssl_mode(), PgSslMode::Prefer) || is_this_host(options) {
        return;
    }
    let files = TlsFiles::of(url);
    if !files.password {
        return;
    }
    let encrypted: Option<bool> = sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_optional(connection)
        .await
        .ok()
        .flatten();
    if let Some(warning) = plaintext_warning(options, true, encrypted.map(|tls| !tls), files.mode.is_some()) {
        eprintln!("warning: {warning}");
    }
}

/// The warning for a password sent without TLS to another host, if there is one to give.
/// `fell_back` says whether a `prefer` connection ended up unencrypted (`None`: not known).
fn plaintext_warning(
    options: &PgConnectOptions,
    password: bool,
    fell_back: Option<bool>,
    mode_given: bool,
) -> Option<String> {
    if !password || is_this_host(options) {
        return None;
    }
    let host = options.get_host();
    let fix = "use sslmode=verify-full with the server's authority in sslrootcert (see docs/postgresql.md, TLS)";
    match options.get_ssl_mode() {
        PgSslMode::Disable | PgSslMode::Allow => Some(format!(
            "sslmode={}: the password for {host} is sent without TLS, readable by anyone on the network between; {fix}",
            mode_name(options.get_ssl_mode())
        )),
        PgSslMode::Prefer if fell_back == Some(true) => Some(format!(
            "{host} does not offer TLS, so sslmode=prefer{} fell back to an unencrypted connection and the password \
             was sent in clear; {fix}",
            if mode_given { "" } else { " (the default)" }
        )),
        _ => None,
    }
}

/// A Unix socket (a host that is a directory, or an explicit socket).
fn is_unix_socket(options: &PgConnectOptions) -> bool {
    options.get_socket().is_some() || options.get_host().starts_with('/')
}

/// Traffic to this host never crosses a network: a Unix socket or a loopback address.
fn is_this_host(options: &PgConnectOptions) -> bool {
    if is_unix_socket(options) {
        return true;
    }
    let host = options.get_host().trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.to_ascii_lowercase().ends_with(".localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.to_canonical().is_loopback())
}

fn mode_name(mode: PgSslMode) -> &'static str {
    match mode {
        PgSslMode::Disable => "disable",
        PgSslMode::Allow => "allow",
        PgSslMode::Prefer => "prefer",
        PgSslMode::Require => "require",
        PgSslMode::VerifyCa => "verify-ca",
        PgSslMode::VerifyFull => "verify-full",
    }
}

fn tls_error(url: &str, options: &PgConnectOptions, problem: TlsProblem) -> StoreError {
    let mode = match options.get_ssl_mode() {
        PgSslMode::VerifyCa if TlsFiles::of(url).mode.as_deref() == Some("require") => {
            "require, checked as verify-ca since sslrootcert is given"
        }
        mode => mode_name(mode),
    };
    StoreError::Tls { url: redact_url(url), mode, problem: Box::new(problem) }
}

/// The error for a failed connection: a TLS failure as a [`TlsProblem`] naming what to check,
/// anything else as before.
pub(super) fn connect_error(url: &str, options: &PgConnectOptions, error: &sqlx::Error) -> StoreError {
    match tls_problem(url, options, error) {
        Some(problem) => tls_error(url, options, problem),
        None => match error {
            sqlx::Error::Database(db) if db.code().as_deref() == Some("53300") => {
                StoreError::ServerFull(db.message().to_owned())
            }
            _ => StoreError::Open(format!("{}: {}", redact_url(url), super::server_words(error))),
        },
    }
}

fn tls_problem(url: &str, options: &PgConnectOptions, error: &sqlx::Error) -> Option<TlsProblem> {
    let rustls_error = match error {
        sqlx::Error::Io(io) => io.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()),
        sqlx::Error::Tls(e) => e.downcast_ref::<rustls::Error>(),
        _ => None,
    };
    if let Some(rustls_error) = rustls_error {
        return Some(from_rustls(url, options, rustls_error));
    }
    match error {
        // sqlx's words when the server answers `N` to the request for TLS.
        sqlx::Error::Tls(e) if e.to_string().contains("does not support TLS") => {
            Some(TlsProblem::NotOffered { mode: mode_name(options.get_ssl_mode()) })
        }
        sqlx::Error::Tls(e) => Some(TlsProblem::Handshake { detail: e.to_string() }),
        _ => None,
    }
}

fn from_rustls(url: &str, options: &PgConnectOptions, error: &rustls::Error) -> TlsProblem {
    use rustls::CertificateError as C;
    match error {
        rustls::Error::InvalidCertificate(C::UnknownIssuer) => {
            let roots = match TlsFiles::of(url).root_cert {
                Some(path) => format!("the platform's roots and sslrootcert `{}`", path.display()),
                None => "the platform's roots only: no sslrootcert given".to_owned(),
            };
            TlsProblem::UnknownAuthority { roots }
        }
        // No name in subjectAltName at all: a certificate libpq would judge by its common name.
        rustls::Error::InvalidCertificate(C::NotValidForNameContext { presented, .. }) if presented.is_empty() => {
            TlsProblem::NoSubjectAltName { host: options.get_host().to_owned() }
        }
        rustls::Error::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
            TlsProblem::WrongHostName { host: options.get_host().to_owned(), detail: error.to_string() }
        }
        rustls::Error::InvalidCertificate(C::Other(other)) => match other.0.downcast_ref::<webpki::Error>() {
            // A trust anchor presented as the server's own certificate.
            Some(webpki::Error::CaUsedAsEndEntity) => {
                TlsProblem::SelfSignedAuthority { host: options.get_host().to_owned() }
            }
            // The client's certificate is read before the handshake (`TlsFiles::check`), so an
            // unreadable version here is the server's.
            Some(webpki::Error::UnsupportedCertVersion) => {
                TlsProblem::ServerCertificateVersion1 { host: options.get_host().to_owned() }
            }
            _ => TlsProblem::BadCertificate { detail: error.to_string() },
        },
        rustls::Error::InvalidCertificate(_) => TlsProblem::BadCertificate { detail: error.to_string() },
        rustls::Error::AlertReceived(_) => TlsProblem::ClientCertificateRefused { detail: error.to_string() },
        _ => TlsProblem::Handshake { detail: error.to_string() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(url: &str) -> PgConnectOptions {
        url.parse().unwrap()
    }

    #[test]
    fn sqlx_never_sees_a_parameter_it_would_log_with_its_value() {
        let url = "postgres://al@db.example.com/l?sslmode=require&sslpassword=PLANTED42&host=%2Ftmp%2Fpg&x=PLANTED43";
        let given = for_sqlx(url);
        assert!(!given.contains("PLANTED"), "{given}");
        let options: PgConnectOptions = given.parse().unwrap();
        assert_eq!(options.get_socket(), Some(&std::path::PathBuf::from("/tmp/pg")));
        assert!(matches!(options.get_ssl_mode(), PgSslMode::Require));
        assert_eq!(
            for_sqlx("postgres://al@db.example.com/l?sslmode=require"),
            "postgres://al@db.example.com/l?sslmode=require"
        );
        assert_eq!(for_sqlx("postgres://al@db.example.com/l?sslpassword=k"), "postgres://al@db.example.com/l");
    }

    #[test]
    fn a_password_in_clear_to_another_host_is_warned_about() {
        let remote = options("postgres://al:pw@db.example.com/ledger?sslmode=disable");
        let warning = plaintext_warning(&remote, true, Some(false), true).expect("a warning");
        assert!(warning.contains("sslmode=disable") && warning.contains("db.example.com"), "{warning}");
        assert!(!warning.contains("pw@"), "{warning}");
        // Without a password nothing is sent that a warning would be about.
        assert_eq!(plaintext_warning(&remote, false, Some(false), true), None);
        // This host: loopback addresses, localhost and Unix sockets.
        for here in [
            "postgres://al:pw@127.0.0.1/l?sslmode=disable",
            "postgres://al:pw@localhost/l?sslmode=disable",
            "postgres://al:pw@[::1]:5432/l?sslmode=disable",
            "postgres://al:pw@[::ffff:127.0.0.1]:5432/l?sslmode=disable",
            "postgres://al:pw@127.0.0.2/l?sslmode=disable",
            "postgres://al:pw@%2Fvar%2Frun%2Fpostgresql/l?sslmode=disable",
            "postgres://al:pw@ignored/l?host=/tmp&sslmode=disable",
        ] {
            assert_eq!(plaintext_warning(&options(here), true, Some(false), true), None, "{here}");
        }
    }

    #[test]
    fn prefer_warns_only_when_it_fell_back() {
        let prefer = options("postgres://al:pw@10.0.0.7/ledger");
        assert!(matches!(prefer.get_ssl_mode(), PgSslMode::Prefer));
        let warning = plaintext_warning(&prefer, true, Some(true), false).expect("a warning");
        assert!(warning.contains("(the default)"), "{warning}");
        assert_eq!(plaintext_warning(&prefer, true, Some(false), false), None);
        assert_eq!(plaintext_warning(&prefer, true, None, false), None);
        for verified in ["require", "verify-ca", "verify-full"] {
            let url = format!("postgres://al:pw@10.0.0.7/ledger?sslmode={verified}");
            assert_eq!(plaintext_warning(&options(&url), true, Some(true), true), None, "{url}");
        }
    }

    #[test]
    fn the_url_tls_parameters_reach_the_connection() {
        let dir = tempfile_dir();
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, "").unwrap();
        let url = format!("postgres://al:pw@db.example.com/l?sslmode=require&sslrootcert={}", ca.display());
        // A named authority is checked: require becomes verify-ca, as with libpq.
        let connect = connect_options(&url).unwrap();
        assert!(matches!(connect.get_ssl_mode(), PgSslMode::VerifyCa));
        let files = TlsFiles::of(&format!("{url}&sslcert=/c.pem&sslkey=/k.pem"));
        assert_eq!(files.root_cert.as_deref(), Some(ca.as_path()));
        assert_eq!(files.client_cert.as_deref(), Some(std::path::Path::new("/c.pem")));
        assert_eq!(files.client_key.as_deref(), Some(std::path::Path::new("/k.pem")));
        assert!(files.password && files.mode.is_some());
        // A Unix socket never asks for TLS, whatever the mode says (the server would refuse).
        let socket = connect_options("postgres:///l?host=/tmp&sslmode=verify-full").unwrap();
        assert!(matches!(socket.get_ssl_mode(), PgSslMode::Disable));
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn a_missing_tls_file_is_named_with_its_parameter() {
        let error =
            connect_options("postgres://al:pw@db.example.com/l?sslmode=verify-full&sslrootcert=/nowhere/ca.pem")
                .unwrap_err()
                .to_string();
        assert!(error.contains("sslrootcert `/nowhere/ca.pem`") && error.contains("sslmode=verify-full"), "{error}");
        assert!(!error.contains("pw@"), "{error}");
        let error =
            connect_options("postgres://db.example.com/l?sslmode=require&sslcert=/c.pem").unwrap_err().to_string();
        assert!(error.contains("sslcert and sslkey go together"), "{error}");
        let error =
            connect_options("postgres://db.example.com/l?sslmode=require&sslpassword=k3y").unwrap_err().to_string();
        assert!(error.contains("sslpassword is not supported") && !error.contains("k3y"), "{error}");
    }

    #[cfg(unix)]
    #[test]
    fn a_key_others_may_read_is_refused_as_libpq_refuses_it() {
        use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
        let dir = tempfile_dir();
        let (cert, key) = (dir.join("client.crt"), dir.join("client.key"));
        std::fs::write(&cert, "").unwrap();
        std::fs::write(&key, "").unwrap();
        let url =
            format!("postgres://db.example.com/l?sslmode=require&sslcert={}&sslkey={}", cert.display(), key.display());
        let chmod = |mode: u32| std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).unwrap();
        let owned_by_root = std::fs::metadata(&key).unwrap().uid() == 0;
        for (mode, refused) in [(0o600, false), (0o400, false), (0o604, true), (0o660, true), (0o640, !owned_by_root)] {
            chmod(mode);
            match connect_options(&url) {
                Ok(_) => assert!(!refused, "{mode:o} was accepted"),
                Err(StoreError::Tls { problem, .. }) => {
                    assert!(refused, "{mode:o} was refused");
                    assert!(matches!(*problem, TlsProblem::KeyReadableByOthers { mode: m, .. } if m == mode));
                    assert!(problem.to_string().contains(&format!("chmod 600 {}", key.display())), "{problem}");
                }
                Err(other) => panic!("{other}"),
            }
        }
        std::fs::remove_dir_all(dir).ok();
    }

    fn tempfile_dir() -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("actionledger-pg-tls-{}-{}", std::process::id(), fastrand::u64(..)));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
