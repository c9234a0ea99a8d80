//! `actionledger serve`: runs the HTTP intake API over the ledger until SIGTERM or ctrl-c, and
//! `serve hash-token`, which makes a tokens file's line from a token read on standard input, and
//! `serve grant`, which gives a PostgreSQL login everything `serve` needs.

use super::values::RoleArg;
use crate::error::Error;
use crate::ledger::Ledger;
use crate::serve::auth::{Role, Tokens, hash_token};
use crate::serve::intake::Intake;
use crate::serve::{App, ConnectionLimits, ServeOptions};
use crate::store::Store;
use clap::{Args, Subcommand};
use std::io::Read as _;
use std::path::PathBuf;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ServeArgs {
    #[command(subcommand)]
    command: Option<ServeCommand>,
    /// The address to listen on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    listen: String,
    /// The tokens file: `sha256:HEX ROLE NAME` a line (`serve hash-token` prints one). The same
    /// lines may be given in ACTIONLEDGER_TOKENS.
    #[arg(long, value_name = "FILE", env = "ACTIONLEDGER_TOKENS_FILE")]
    tokens: Option<PathBuf>,
    /// The configuration: its [intake.NAME] blocks map webhooks, its destinations decide
    /// takeovers (default: actionledger.toml if it exists).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Requests a second per token on average (0: no limit).
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// Requests a token may make at once before the rate applies.
    #[arg(long, default_value_t = 200)]
    burst: u32,
    /// How long one request may take before it is answered 503.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = crate::config::duration_text::parse)]
    timeout: std::time::Duration,
    /// How long a connection may take to send a request's headers (and a kept-alive one its next
    /// request's) before it is closed, logged when it never sent a whole request.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = above_zero)]
    header_timeout: std::time::Duration,
    /// Most connections open at once, all clients together; one more is answered 503, closed and
    /// logged. Keep it below the process's file limit (`ulimit -n`).
    #[arg(long, value_name = "N", default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: u32,
    /// Most connections open at once from one client address; one more is answered 503, closed and
    /// logged. Behind a reverse proxy every client has the proxy's address: raise it to the proxy's
    /// own pool.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections_per_address: u32,
    /// Serve Prometheus metrics at /metrics (requests by route and status, latency, refusals by
    /// reason, and the ledger figures the worker's endpoint shows), with /healthz and /readyz, on
    /// this address, e.g. 127.0.0.1:9465: a port of its own, for the scraper only, as the worker's
    /// (port 0: any free port; the address is logged).
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// How often the ledger's figures are read into the metrics, e.g. 10s.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = crate::config::duration_text::parse, requires = "metrics_addr")]
    metrics_refresh: std::time::Duration,
    /// How often the executors' expired claims are recovered (held for a person, or settled by
    /// the executor's lookup) and their uncertain outcomes looked up, when no automation asks
    /// about them again.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = above_zero)]
    sweep_every: std::time::Duration,
}

/// Why a period that must be above zero cannot be used (a header timeout, the sweep's period).
#[derive(Debug, thiserror::Error)]
enum PeriodError {
    #[error(transparent)]
    Text(#[from] crate::config::duration_text::DurationError),
    #[error("give a time above zero, such as 5s")]
    Zero,
}

fn above_zero(text: &str) -> Result<std::time::Duration, PeriodError> {
    let duration = crate::config::duration_text::parse(text)?;
    if duration.is_zero() { Err(PeriodError::Zero) } else { Ok(duration) }
}

#[derive(Debug, Subcommand)]
enum ServeCommand {
    /// Read a token on standard input and print its line for the tokens file (the token itself
    /// is never stored).
    HashToken {
        /// source (submit), reviewer (also a person's commands, as NAME), viewer (read only) or
        /// executor (performs --destination's actions itself, through :begin and :finish).
        #[arg(long)]
        role: RoleArg,
        /// Who holds the token: the source's name, the reviewer's own name, or the automation
        /// (its claims are recorded as held by NAME).
        #[arg(long)]
        name: String,
        /// The one destination an executor's token performs: an [executors.NAME] of the
        /// configuration.
        #[arg(long, value_name = "NAME")]
        destination: Option<String>,
    },
    /// Give a PostgreSQL login everything `serve` needs, in one step: the worker's and the
    /// reviewer's roles, and the right to sign as each reviewer token's name. Run it as a role
    /// that may grant the roles and owns the ledger; again whenever reviewer tokens are added.
    Grant {
        /// The login `serve` connects as (create it first: CREATE ROLE NAME LOGIN PASSWORD ...).
        login: String,
        /// The tokens file `serve` will read; its reviewer tokens' names are the people the login
        /// may sign as. The lines of ACTIONLEDGER_TOKENS are read too.
        #[arg(long, value_name = "FILE", env = "ACTIONLEDGER_TOKENS_FILE")]
        tokens: Option<PathBuf>,
    },
}

/// Why `serve grant` cannot run.
#[derive(Debug, thiserror::Error)]
enum GrantError {
    #[error(
        "serve grant gives a PostgreSQL login its roles; SQLite has no logins (whoever may write the ledger's \
         file may do everything), so there is nothing to grant"
    )]
    NoLogins,
    #[error("the login name is empty; give the name of the PostgreSQL login serve connects as")]
    EmptyLogin,
    #[error("there is no PostgreSQL login {login}; create it first: CREATE ROLE {login} LOGIN PASSWORD '...'")]
    NoSuchLogin { login: String },
}

impl From<GrantError> for Error {
    fn from(error: GrantError) -> Self {
        crate::error::FrontendError::new(crate::error::Kind::Usage, error).into()
    }
}

/// The tokens `serve` reads: the file given, then ACTIONLEDGER_TOKENS's lines.
fn load_tokens(file: Option<&std::path::Path>) -> Result<Tokens, Error> {
    let env_tokens = std::env::var("ACTIONLEDGER_TOKENS").ok().filter(|t| !t.trim().is_empty());
    Ok(Tokens::load(file, env_tokens.as_deref()).map_err(crate::serve::ServeError::from)?)
}

/// `serve grant`: the one step that makes a login fit for `serve` (migration 0102).
pub(super) async fn grant(url: &str, schema: Option<&str>, args: &ServeArgs) -> Result<Option<i32>, Error> {
    let Some(ServeCommand::Grant { login, tokens }) = &args.command else { return Ok(None) };
    if !super::is_postgres(url) {
        return Err(GrantError::NoLogins.into());
    }
    let login = login.trim();
    if login.is_empty() {
        return Err(GrantError::EmptyLogin.into());
    }
    let people = load_tokens(tokens.as_deref())?.reviewers();
    let store = crate::store::PostgresStore::open_in(url, schema, false).await?;
    let granted = store.grant_serve(login, &people).await;
    store.close().await;
    match granted {
        Err(crate::store::StoreError::Database(sqlx::Error::Database(db))) if db.code().as_deref() == Some("42704") => {
            return Err(GrantError::NoSuchLogin { login: login.to_owned() }.into());
        }
        other => other?,
    }
    println!(
        "granted {login} the roles actionledger_worker and actionledger_reviewer (serve acts as each on a pool of its own)"
    );
    if people.is_empty() {
        println!("no reviewer token: {login} signs as nobody; run this again after adding reviewer tokens");
    } else {
        println!("{login} may sign as: {}", people.join(", "));
    }
    Ok(Some(crate::error::exit::OK))
}

/// `serve hash-token`, which needs no ledger; `None` for `serve` itself.
pub(super) fn before_opening(args: &ServeArgs) -> Result<Option<i32>, Error> {
    let Some(ServeCommand::HashToken { role, name, destination }) = &args.command else { return Ok(None) };
    let role = match (role.0, destination) {
        (Role::Executor, Some(destination)) => {
            // Checked before the line is made: a name with a space would shift the line's fields.
            crate::domain::input::validate_destination_name(destination)
                .map_err(|e| Error::Invalid(format!("--destination: {e}")))?;
            format!("executor:{destination}")
        }
        (Role::Executor, None) => {
            return Err(Error::Invalid("--role executor needs --destination: the destination it performs".to_owned()));
        }
        (_, Some(_)) => return Err(Error::Invalid("--destination is for --role executor only".to_owned())),
        (role, None) => role.as_str().to_owned(),
    };
    let mut token = String::new();
    std::io::stdin()
        .read_to_string(&mut token)
        .map_err(|e| Error::io("cannot read the token from standard input", e))?;
    let token = token.trim();
    if token.len() < 16 {
        return Err(Error::Invalid(
            "give a token of at least 16 characters on standard input, e.g. from `openssl rand -hex 32`".to_owned(),
        ));
    }
    let line = format!("{} {role} {}", hash_token(token), name.trim());
    // The line is checked as the server will read it, so a bad name fails here and not at start.
    Tokens::parse(&line, "the new line").map_err(crate::serve::ServeError::from)?;
    println!("{line}");
    Ok(Some(crate::error::exit::OK))
}

/// `serve`, with people's commands through `commands` where the ledger was opened to act as the
/// reviewer's role for them (see `PostgresStore::open_serving`).
pub(super) async fn serve<S: Store>(
    ledger: &Ledger<S>,
    commands: Option<Ledger<S>>,
    args: ServeArgs,
) -> Result<i32, Error> {
    let tokens = load_tokens(args.tokens.as_deref())?;
    let default = std::path::Path::new(crate::config::DEFAULT_CONFIG_FILE);
    let config_path = args.config.as_deref().or(default.exists().then_some(default));
    let (intakes, destinations, executors) = match config_path {
        Some(path) => {
            let (config, destinations) = super::manual::load_destinations(path, false)?;
            let intakes = config
                .intake
                .iter()
                .map(|(name, intake)| Intake::new(name, intake.clone()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(crate::serve::ServeError::from)?;
            (intakes, destinations, config.executors.clone())
        }
        None => (Vec::new(), crate::destination::Destinations::default(), std::collections::BTreeMap::new()),
    };
    // A token for an executor the configuration does not declare could begin nothing: said at
    // start, not at its first request.
    if let Some(destination) = tokens.executor_destinations().find(|d| !executors.contains_key(*d)) {
        return Err(crate::serve::ServeError::UnknownExecutor(destination.to_owned()).into());
    }
    let options = ServeOptions { rate: args.rate, burst: args.burst, timeout: args.timeout, ..ServeOptions::default() };
    if args.metrics_refresh.is_zero() {
        return Err(Error::Invalid("--metrics-refresh is 0; give a period such as 10s".to_owned()));
    }
    let catalog = destinations.catalog();
    let commands = commands.map(|commands| commands.with_destinations(catalog.clone()));
    let ledger = ledger.clone().with_destinations(catalog);
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|e| Error::io(format!("cannot listen on {}", args.listen), e))?;
    let addr = listener.local_addr().map_err(|e| Error::io("cannot read the listening address", e))?;
    let names: Vec<&str> = intakes.iter().map(|i| i.name.as_str()).collect();
    let intake_names = if names.is_empty() { "none".to_owned() } else { names.join(", ") };
    tracing::info!(
        addr = %addr,
        intakes = %intake_names,
        "serving the ledger on http://{addr}/v1 (intakes: {intake_names}); stop with ctrl-c or SIGTERM"
    );
    let limits = ConnectionLimits {
        header_timeout: args.header_timeout,
        max_connections: args.max_connections as usize,
        max_per_address: args.max_connections_per_address as usize,
    };
    // Kept until the server stops: dropping it stops the endpoint.
    let _endpoint = super::worker::metrics_endpoint(&ledger, args.metrics_addr, args.metrics_refresh).await?;
    // Stopped with the server: what it had not swept is swept by the next start.
    let keeper = (!executors.is_empty()).then(|| {
        let (ledger, destinations) = (ledger.clone(), destinations.clone());
        tokio::spawn(crate::serve::keeper::keep(
            ledger,
            destinations,
            args.sweep_every,
            crate::serve::shutdown_signal(),
        ))
    });
    let app = App::new(ledger, tokens, intakes, options).with_executors(executors).with_destinations(destinations);
    let router = match commands {
        Some(commands) => app.with_commands_through(commands),
        None => app,
    }
    .router();
    crate::connections::serve(listener, router, limits, crate::serve::shutdown_signal())
        .await
        .map_err(|e| Error::io("the HTTP server failed", e))?;
    if let Some(keeper) = keeper {
        keeper.abort();
    }
    tracing::info!("stopped: requests in flight finished");
    Ok(crate::error::exit::OK)
}
