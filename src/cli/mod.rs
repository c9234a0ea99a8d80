//! The `actionledger` command line: arguments, database resolution, and dispatch to the ledger.

mod render;

use crate::domain::{ActionKey, ManualCommand, Person, RawSubmission, Reason, State, input::Label};
use crate::error::{Error, exit};
use crate::ledger::{Ledger, ManualRequest};
use crate::store::redact_url;
use crate::store::{ListFilter, PostgresStore, SqliteStore, Store};
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::io::Read as _;

/// The database used when neither `--db`, `ACTIONLEDGER_DB` nor `DATABASE_URL` names one.
pub const DEFAULT_DB_URL: &str = "sqlite://actionledger.db";

/// Most rows one `list` returns.
const MAX_LIST_LIMIT: i64 = 1000;

#[derive(Debug, Parser)]
#[command(
    name = "actionledger",
    version,
    about = "A durable ledger that lets automations perform each external action once.",
    after_help = "Exit codes: 0 success, 1 error, 2 usage error, 3 refused (conflict, stale version, \
                  invalid transition, invalid submission), 4 not found."
)]
pub struct Cli {
    /// Ledger database URL (sqlite://FILE or postgres://...). Default: $ACTIONLEDGER_DB, then
    /// $DATABASE_URL, then sqlite://actionledger.db.
    #[arg(long, global = true, value_name = "URL")]
    pub db: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create or upgrade the ledger schema (every command also does this on first use).
    Migrate,
    /// Record an intended action; prints created, duplicate, stale or conflict.
    Submit(SubmitArgs),
    /// List actions, newest first.
    List(ListArgs),
    /// Show one action: record, payloads, deliveries, attempts, evidence and audit trail.
    Show {
        key: String,
        #[arg(long)]
        json: bool,
    },
    /// Controlled retry of a failed, unknown, held or conflicting action, under the same key.
    Retry(ManualArgs),
    /// Record a verified outcome: completed (with the destination id) or not written.
    Resolve {
        #[command(flatten)]
        manual: ManualArgs,
        /// The verified outcome.
        #[arg(long = "as", value_enum)]
        resolution: Resolution,
        /// The destination's id of the record (required with --as completed).
        #[arg(long)]
        destination_id: Option<String>,
    },
    /// Decide that the action must not happen.
    Cancel(ManualArgs),
    /// Accept the proposed payload of a conflict in place of the approved one.
    Approve(ManualArgs),
    /// Discard the proposed payload of a conflict, keeping the approved one.
    Reject(ManualArgs),
    /// Take over a stale claim (its lease expired) under a new ownership version.
    Takeover(ManualArgs),
    /// The review console: triage uncertain actions in the terminal.
    Review(ReviewArgs),
    /// Perform pending actions against the destinations in the configuration file.
    Worker(WorkerArgs),
    /// Compare the ledger with a destination: missing, duplicated and mismatched records.
    Reconcile(ReconcileArgs),
    /// Run a simulated CRM over HTTP, for demos and tests.
    SimCrm(SimCrmArgs),
    /// A self-contained demonstration: ledger, simulated CRM with faults, workers, console.
    Demo(DemoArgs),
    /// Ledger throughput against the raw-SQL limit, measured in the same run.
    Bench(BenchArgs),
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// A smaller run that finishes within a minute.
    #[arg(long)]
    quick: bool,
    /// Print the cases as one JSON document.
    #[arg(long)]
    json: bool,
    /// Instead of the throughput cases: run a worker process over this many actions against the
    /// simulated CRM and sample its resident memory.
    #[arg(long, value_name = "ACTIONS")]
    worker_memory: Option<usize>,
    /// With --worker-memory: the worker's batch size.
    #[arg(long, default_value_t = 64, requires = "worker_memory")]
    batch: usize,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Run the scenario without the console and print a summary.
    #[arg(long)]
    no_ui: bool,
    /// With --no-ui, print the summary as JSON.
    #[arg(long, requires = "no_ui")]
    json: bool,
    /// Your name in the console (default: $USER, else "demo").
    #[arg(long)]
    owner: Option<String>,
}

#[derive(Debug, Args)]
pub struct ReviewArgs {
    /// Your name, recorded with every command you run (default: $USER).
    #[arg(long)]
    owner: Option<String>,
    /// Destinations, for lookups, takeover safety and retention windows (default:
    /// actionledger.toml if it exists).
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    /// Run without a terminal: replay the key events in FILE, then print the final screen.
    #[arg(long, value_name = "FILE")]
    script: Option<std::path::PathBuf>,
    /// Screen size for --script, as WIDTHxHEIGHT.
    #[arg(long, default_value = "100x30", value_parser = parse_size, requires = "script")]
    size: (u16, u16),
    /// How often the console refreshes by itself.
    #[arg(long, default_value = "2s", value_parser = crate::config::duration_text::parse)]
    refresh: std::time::Duration,
}

fn parse_size(text: &str) -> Result<(u16, u16), String> {
    let (w, h) = text.split_once('x').ok_or_else(|| format!("{text:?} is not WIDTHxHEIGHT, e.g. 100x30"))?;
    let (w, h): (u16, u16) = (
        w.parse().map_err(|_| format!("{w:?} is not a width"))?,
        h.parse().map_err(|_| format!("{h:?} is not a height"))?,
    );
    if w < 40 || h < 12 || w > 1000 || h > 500 {
        return Err(format!("{text} is out of range: use at least 40x12 and at most 1000x500"));
    }
    Ok((w, h))
}

#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The configuration file with the destinations.
    #[arg(long, default_value = crate::config::DEFAULT_CONFIG_FILE)]
    config: std::path::PathBuf,
    /// Requests (or batches) in flight at once (default: worker.concurrency in the file, else 4).
    #[arg(long)]
    concurrency: Option<usize>,
    /// Actions claimed, started and recorded together, each batch's results in one group commit
    /// (default: worker.batch in the file, else 1).
    #[arg(long)]
    batch: Option<usize>,
    /// Lease length, e.g. 30s (default: worker.lease in the file).
    #[arg(long, value_parser = crate::config::duration_text::parse)]
    lease: Option<std::time::Duration>,
    /// Process until nothing is claimable, then exit.
    #[arg(long)]
    drain: bool,
    /// This worker's name in claims and the audit trail (default: host name and process id).
    #[arg(long)]
    worker_id: Option<String>,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ReconcileArgs {
    #[arg(long, default_value = crate::config::DEFAULT_CONFIG_FILE)]
    config: std::path::PathBuf,
    /// Only this destination (default: every configured destination).
    #[arg(long)]
    destination: Option<String>,
    /// Only actions created within this period, e.g. 24h or 7d (default: all).
    #[arg(long, value_parser = crate::config::duration_text::parse)]
    since: Option<std::time::Duration>,
    /// Settle the unknown actions a lookup can settle (audited under --owner).
    #[arg(long, requires = "owner")]
    apply: bool,
    /// The person answerable for --apply.
    #[arg(long)]
    owner: Option<String>,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
#[allow(clippy::struct_excessive_bools, reason = "each flag is one independent switch of the simulation")]
pub struct SimCrmArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8787")]
    listen: std::net::SocketAddr,
    /// How long idempotency keys are remembered.
    #[arg(long, default_value = "24h", value_parser = crate::config::duration_text::parse)]
    retention: std::time::Duration,
    /// Ignore idempotency keys (a destination without that protection).
    #[arg(long)]
    no_idempotency: bool,
    /// Allow several records with the same external reference.
    #[arg(long)]
    no_unique_refs: bool,
    /// Accept writes from obsolete ownership versions.
    #[arg(long)]
    accept_obsolete: bool,
    /// A fault and its probability per create request, e.g. drop-after-commit=0.3 (repeatable).
    /// Faults: delay[:2s], 503, 429[:SECONDS], close-before-write, drop-after-commit, 500-after-write.
    #[arg(long = "fault", value_parser = crate::sim_crm::FaultPlan::parse_rate)]
    faults: Vec<(crate::sim_crm::Fault, f64)>,
    /// Faults for the first create requests, in order, e.g. "503,drop-after-commit,ok".
    #[arg(long)]
    fault_script: Option<String>,
    /// Keep state in this file across restarts (default: memory only).
    #[arg(long)]
    state: Option<std::path::PathBuf>,
    /// The destination name used in the printed configuration.
    #[arg(long, default_value = "crm")]
    name: String,
    /// Print the destination block for actionledger.toml and exit.
    #[arg(long)]
    print_config: bool,
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The action key, e.g. acme:order:ORD-1042:create-task.
    #[arg(long)]
    key: Option<String>,
    /// The payload: JSON text, @FILE to read a file, or @- to read standard input.
    #[arg(long, value_name = "JSON|@FILE")]
    payload: Option<String>,
    /// The id of the source event that carried this delivery.
    #[arg(long)]
    event_id: Option<String>,
    /// The source system.
    #[arg(long)]
    source: Option<String>,
    /// Orders versions of the source record; an older one than recorded is stale.
    #[arg(long)]
    source_version: Option<i64>,
    /// The destination that will perform the action.
    #[arg(long)]
    destination: Option<String>,
    /// Run only after the action with this key completed.
    #[arg(long, value_name = "KEY")]
    after: Option<String>,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only actions in this state.
    #[arg(long, value_parser = parse_state)]
    state: Option<State>,
    /// Only actions for this destination.
    #[arg(long)]
    destination: Option<String>,
    /// Only actions claimed by this worker or assigned to this person.
    #[arg(long)]
    owner: Option<String>,
    /// How many to show (1 to 1000).
    #[arg(long, default_value_t = 50)]
    limit: i64,
    /// Continue after this id (the cursor the previous page printed).
    #[arg(long, value_name = "ID")]
    before: Option<i64>,
    /// List refused submissions instead of actions.
    #[arg(long)]
    refused: bool,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ManualArgs {
    /// The action key.
    key: String,
    /// Your name: the person answerable for this command, recorded in the audit trail.
    #[arg(long)]
    owner: String,
    /// Why, for the audit trail.
    #[arg(long)]
    reason: String,
    /// Refuse unless the action is still at this version (as `show` printed it).
    #[arg(long, value_name = "VERSION")]
    expect_version: Option<i64>,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Resolution {
    /// The destination has the record: give its id with --destination-id.
    Completed,
    /// The destination has no record: back to pending under the same key.
    NotWritten,
}

fn parse_state(text: &str) -> Result<State, String> {
    text.parse()
}

/// Picks the database URL: `--db`, then `ACTIONLEDGER_DB`, then `DATABASE_URL`, then the default.
pub fn resolve_db_url(flag: Option<String>) -> String {
    let from_env = |name| std::env::var(name).ok().filter(|v: &String| !v.trim().is_empty());
    flag.or_else(|| from_env("ACTIONLEDGER_DB"))
        .or_else(|| from_env("DATABASE_URL"))
        .unwrap_or_else(|| DEFAULT_DB_URL.to_owned())
}

/// Runs one command line; returns the process exit code.
pub async fn run(cli: Cli) -> Result<i32, Error> {
    let command = match cli.command {
        Command::SimCrm(args) => return sim_crm(args).await,
        Command::Demo(args) => return demo(cli.db, args).await,
        Command::Bench(args) => return bench(cli.db, args).await,
        other => other,
    };
    let url = resolve_db_url(cli.db);
    if url.starts_with("sqlite:") {
        execute(Ledger::new(SqliteStore::open(&url).await?), command, &url).await
    } else if is_postgres(&url) {
        execute(Ledger::new(PostgresStore::open(&url).await?), command, &url).await
    } else {
        Err(Error::Invalid(format!(
            "unsupported database URL {}: use sqlite://FILE or postgres://USER@HOST/DB",
            redact_url(&url)
        )))
    }
}

async fn execute<S: Store>(ledger: Ledger<S>, command: Command, url: &str) -> Result<i32, Error> {
    let result = match command {
        Command::Migrate => {
            println!("ledger schema is up to date at {}", redact_url(url));
            if let Some(access) = ledger.store().access_report().await? {
                println!("access: {access}");
            }
            Ok(exit::OK)
        }
        Command::Submit(args) => submit(&ledger, args).await,
        Command::List(args) => list(&ledger, args).await,
        Command::Show { key, json } => {
            let detail = ledger.detail(&parse_key(&key)?).await?;
            render::detail(&detail, json);
            Ok(exit::OK)
        }
        Command::Retry(args) => manual(&ledger, args, ManualCommand::Retry).await,
        Command::Resolve { manual: args, resolution, destination_id } => {
            let command = match (resolution, destination_id) {
                (Resolution::Completed, Some(id)) => ManualCommand::ResolveCompleted {
                    destination_id: Label::parse("destination id", &id).map_err(Error::Invalid)?.0,
                },
                (Resolution::Completed, None) => {
                    return Err(Error::Invalid(
                        "--as completed needs --destination-id: the id of the record you verified at the destination"
                            .to_owned(),
                    ));
                }
                (Resolution::NotWritten, Some(_)) => {
                    return Err(Error::Invalid(
                        "--destination-id goes with --as completed only; a not-written action has no destination id"
                            .to_owned(),
                    ));
                }
                (Resolution::NotWritten, None) => ManualCommand::ResolveNotWritten,
            };
            manual(&ledger, args, command).await
        }
        Command::Cancel(args) => manual(&ledger, args, ManualCommand::Cancel).await,
        Command::Approve(args) => manual(&ledger, args, ManualCommand::Approve).await,
        Command::Reject(args) => manual(&ledger, args, ManualCommand::Reject).await,
        Command::Takeover(args) => manual(&ledger, args, ManualCommand::Takeover { protected: false }).await,
        Command::Review(args) => review(&ledger, args, url).await,
        Command::Worker(args) => worker(ledger.clone(), args).await,
        Command::Reconcile(args) => reconcile(&ledger, args).await,
        Command::SimCrm(_) | Command::Demo(_) | Command::Bench(_) => {
            unreachable!("handled before the ledger is opened")
        }
    };
    ledger.store().close().await;
    result
}

fn parse_key(text: &str) -> Result<ActionKey, Error> {
    ActionKey::parse(text).map_err(|e| Error::Invalid(e.to_string()))
}

async fn submit<S: Store>(ledger: &Ledger<S>, args: SubmitArgs) -> Result<i32, Error> {
    let payload = match args.payload.as_deref() {
        None => Vec::new(),
        Some("@-") => {
            let mut bytes = Vec::new();
            std::io::stdin()
                .read_to_end(&mut bytes)
                .map_err(|e| Error::Invalid(format!("cannot read the payload from standard input: {e}")))?;
            bytes
        }
        Some(text) => match text.strip_prefix('@') {
            Some(path) => {
                std::fs::read(path).map_err(|e| Error::Invalid(format!("cannot read the payload file {path}: {e}")))?
            }
            None => text.as_bytes().to_vec(),
        },
    };
    let raw = RawSubmission {
        key: args.key,
        payload,
        event_id: args.event_id,
        source: args.source,
        source_version: args.source_version,
        destination: args.destination,
        after: args.after,
    };
    let report = ledger.submit(&raw).await?;
    render::submitted(&report, args.json);
    Ok(match report.outcome {
        crate::domain::SubmitOutcome::Conflict => exit::REFUSED,
        _ => exit::OK,
    })
}

async fn list<S: Store>(ledger: &Ledger<S>, args: ListArgs) -> Result<i32, Error> {
    if !(1..=MAX_LIST_LIMIT).contains(&args.limit) {
        return Err(Error::Invalid(format!("--limit is {}; give 1 to {MAX_LIST_LIMIT}", args.limit)));
    }
    if args.refused {
        if args.state.is_some() || args.destination.is_some() || args.owner.is_some() {
            return Err(Error::Invalid(
                "--refused lists refused submissions, which have no state, destination or owner to filter by"
                    .to_owned(),
            ));
        }
        let refused = ledger.list_refused(args.before, args.limit).await?;
        render::refused(&refused, args.limit, args.json);
        return Ok(exit::OK);
    }
    let filter = ListFilter {
        state: args.state,
        destination: args.destination,
        owner: args.owner,
        before_id: args.before,
        limit: args.limit,
        ..ListFilter::default()
    };
    let actions = ledger.list(&filter).await?;
    render::actions(&actions, args.limit, args.json);
    Ok(exit::OK)
}

async fn manual<S: Store>(ledger: &Ledger<S>, args: ManualArgs, command: ManualCommand) -> Result<i32, Error> {
    let request = ManualRequest {
        key: parse_key(&args.key)?,
        person: Person::parse(&args.owner).map_err(Error::Invalid)?,
        reason: Reason::parse(&args.reason).map_err(Error::Invalid)?,
        expect_version: args.expect_version,
        command,
    };
    let outcome = ledger.manual(&request).await?;
    render::manual(&request, &outcome, args.json);
    Ok(exit::OK)
}

type Destinations = std::collections::BTreeMap<String, crate::destination::Destination>;

/// Reads the configuration and builds its destinations; `required` refuses a file without any.
fn load_destinations(path: &std::path::Path, required: bool) -> Result<(crate::config::Config, Destinations), Error> {
    let config = crate::config::Config::load(path).map_err(Error::Invalid)?;
    if required && config.destinations.is_empty() {
        return Err(Error::Invalid(format!(
            "{} configures no destination; add a [destinations.NAME] block (sim-crm --print-config prints one)",
            path.display()
        )));
    }
    let destinations = config
        .destinations
        .iter()
        .map(|(name, c)| crate::destination::Destination::new(name, c.clone()).map(|d| (name.clone(), d)))
        .collect::<Result<_, _>>()
        .map_err(Error::Invalid)?;
    Ok((config, destinations))
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

async fn review<S: Store>(ledger: &Ledger<S>, args: ReviewArgs, url: &str) -> Result<i32, Error> {
    let owner = args
        .owner
        .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
        .ok_or_else(|| Error::Invalid("give --owner NAME: commands are recorded under a named person".to_owned()))?;
    let owner = Person::parse(&owner).map_err(Error::Invalid)?;
    let config_path = args.config.clone().or_else(|| {
        let default = std::path::PathBuf::from(crate::config::DEFAULT_CONFIG_FILE);
        default.exists().then_some(default)
    });
    let (default_destination, destinations) = match &config_path {
        Some(path) => {
            let (config, destinations) = load_destinations(path, false)?;
            (config.worker.default_destination, destinations)
        }
        None => (None, std::collections::BTreeMap::new()),
    };
    let options = crate::console::ConsoleOptions {
        owner,
        ledger_label: redact_url(url),
        destinations,
        default_destination,
        refresh: args.refresh,
        hint: None,
    };
    match args.script {
        Some(path) => {
            let script = std::fs::read_to_string(&path)
                .map_err(|e| Error::Invalid(format!("cannot read the script {}: {e}", path.display())))?;
            let (width, height) = args.size;
            print!("{}", crate::console::run_script(ledger, &options, &script, width, height).await?);
        }
        None => crate::console::run_terminal(ledger, &options).await?,
    }
    Ok(exit::OK)
}

async fn worker<S: Store>(ledger: Ledger<S>, args: WorkerArgs) -> Result<i32, Error> {
    let (config, destinations) = load_destinations(&args.config, true)?;
    let concurrency = args.concurrency.unwrap_or(config.worker.concurrency);
    if !(1..=256).contains(&concurrency) {
        return Err(Error::Invalid(format!("--concurrency is {concurrency}; give 1 to 256")));
    }
    let batch = args.batch.unwrap_or(config.worker.batch);
    if !(1..=crate::config::MAX_BATCH).contains(&batch) {
        return Err(Error::Invalid(format!("--batch is {batch}; give 1 to {}", crate::config::MAX_BATCH)));
    }
    let id = match args.worker_id {
        Some(id) => Label::parse("worker id", &id).map_err(Error::Invalid)?.0,
        None => crate::worker::default_worker_id(),
    };
    let options = crate::worker::WorkerOptions {
        id,
        concurrency,
        batch,
        lease: args.lease.unwrap_or(config.worker.lease),
        poll_interval: config.worker.poll_interval,
        drain: args.drain,
        destinations,
        default_destination: config.worker.default_destination.clone(),
        progress: true,
    };
    let at_once = match options.batch {
        1 => format!("{} at once", options.concurrency),
        batch => format!("{} batches of up to {batch} at once", options.concurrency),
    };
    eprintln!(
        "worker {} performing actions for {} ({at_once}){}",
        options.id,
        options.destinations.keys().cloned().collect::<Vec<_>>().join(", "),
        if options.drain { ", until nothing is left" } else { "; SIGINT or SIGTERM stops it cleanly" }
    );
    let summary = crate::worker::run(ledger, options, shutdown_signal()).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary).expect("summaries serialize"));
    } else {
        println!("{}", summary.line());
    }
    Ok(exit::OK)
}

async fn reconcile<S: Store>(ledger: &Ledger<S>, args: ReconcileArgs) -> Result<i32, Error> {
    let (config, destinations) = load_destinations(&args.config, true)?;
    let chosen: Vec<&crate::destination::Destination> = match &args.destination {
        Some(name) => vec![
            destinations
                .get(name)
                .ok_or_else(|| Error::Invalid(format!("destination {name} is not in {}", args.config.display())))?,
        ],
        None => destinations.values().filter(|d| d.config.lookup.is_some()).collect(),
    };
    let apply = match (&args.owner, args.apply) {
        (Some(owner), true) => {
            Some(crate::reconcile::Apply { person: Person::parse(owner).map_err(Error::Invalid)?.as_str().to_owned() })
        }
        _ => None,
    };
    let since = match args.since {
        Some(period) => {
            Some(ledger.store().now().await? - chrono::Duration::from_std(period).unwrap_or(chrono::TimeDelta::MAX))
        }
        None => None,
    };
    let mut reports = Vec::new();
    for destination in chosen {
        let unassigned = config.worker.default_destination.as_deref() == Some(destination.name.as_str());
        reports.push(crate::reconcile::reconcile(ledger, destination, unassigned, since, apply.as_ref()).await?);
    }
    render::reconciliation(&reports, args.json);
    let disagreements = reports.iter().any(|r| r.findings.iter().any(|f| f.settled_to.is_none()));
    Ok(if disagreements { exit::REFUSED } else { exit::OK })
}

/// Without `--db`: two SQLite files (FULL and NORMAL durability) and a throwaway PostgreSQL. With
/// it: a fresh file beside the SQLite file named, or a fresh schema in the PostgreSQL database
/// named; everything created is removed afterwards.
async fn bench(db: Option<String>, args: BenchArgs) -> Result<i32, Error> {
    use crate::bench::{Sizes, Target};
    let sizes = if args.quick { Sizes::quick() } else { Sizes::full() };
    let scratch = std::env::temp_dir().join(format!("actionledger-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)
        .map_err(|e| Error::Invalid(format!("cannot create {}: {e}", scratch.display())))?;
    if let Some(actions) = args.worker_memory {
        if actions == 0 || !(1..=crate::config::MAX_BATCH).contains(&args.batch) {
            return Err(Error::Invalid(format!(
                "--worker-memory needs at least 1 action and --batch 1 to {}",
                crate::config::MAX_BATCH
            )));
        }
        if db.is_some() {
            return Err(Error::Invalid("--worker-memory makes its own SQLite ledger; leave out --db".to_owned()));
        }
        let run = crate::bench::worker_memory(&scratch, actions, args.batch, !args.json).await;
        let _ = std::fs::remove_dir_all(&scratch);
        let run = run?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&run).expect("runs serialize"));
        }
        return Ok(if run.flat { exit::OK } else { exit::ERROR });
    }
    let mut schema = None;
    let targets: Vec<Target> = match db {
        None => {
            let mut targets = vec![
                Target::Sqlite { synchronous: crate::store::SqliteSynchronous::Full, path: scratch.join("full.db") },
                Target::Sqlite {
                    synchronous: crate::store::SqliteSynchronous::Normal,
                    path: scratch.join("normal.db"),
                },
            ];
            crate::throwaway_pg::commit_durably();
            match crate::throwaway_pg::fresh_database().await {
                Ok(url) => targets.push(Target::Postgres { url }),
                Err(why) => eprintln!("PostgreSQL skipped: {why}"),
            }
            targets
        }
        Some(url) if is_postgres(&url) => {
            let name = format!("actionledger_bench_{}", std::process::id());
            let pool =
                sqlx::PgPool::connect(&url).await.map_err(|e| Error::Invalid(format!("{}: {e}", redact_url(&url))))?;
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {name}")))
                .execute(&pool)
                .await
                .map_err(crate::store::StoreError::from)?;
            let separator = if url.contains('?') { '&' } else { '?' };
            schema = Some((pool, name.clone()));
            vec![Target::Postgres { url: format!("{url}{separator}options=-c%20search_path%3D{name}") }]
        }
        Some(url) => {
            let given = url.trim_start_matches("sqlite://").trim_start_matches("sqlite:");
            let dir = std::path::Path::new(given)
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."));
            vec![Target::Sqlite {
                synchronous: crate::store::SqliteSynchronous::Full,
                path: dir.join(format!("actionledger-bench-{}.db", std::process::id())),
            }]
        }
    };
    if !args.json {
        println!(
            "actionledger bench{}: {} lifecycles per case; each ratio is to the raw SQL baseline measured just before it",
            if args.quick { " --quick" } else { "" },
            sizes.lifecycles
        );
    }
    let mut cases = Vec::new();
    let mut result = Ok(());
    for target in &targets {
        result = crate::bench::run_target(target, sizes, &mut cases, !args.json).await;
        if result.is_err() {
            break;
        }
    }
    if let Some((pool, name)) = schema {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {name} CASCADE"))).execute(&pool).await;
    }
    let _ = std::fs::remove_dir_all(&scratch);
    result?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&cases).expect("cases serialize"));
    }
    Ok(exit::OK)
}

fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// The demo runs on its own temporary ledger unless `--db` names one.
async fn demo(db: Option<String>, args: DemoArgs) -> Result<i32, Error> {
    let owner = args
        .owner
        .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| "demo".to_owned());
    let owner = Person::parse(&owner).map_err(Error::Invalid)?;
    let temporary =
        db.is_none().then(|| std::env::temp_dir().join(format!("actionledger-demo-{}", std::process::id())));
    let url = match (&db, &temporary) {
        (Some(url), _) => url.clone(),
        (None, Some(dir)) => {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::Invalid(format!("cannot create {}: {e}", dir.display())))?;
            format!("sqlite://{}", dir.join("demo.db").display())
        }
        (None, None) => unreachable!("one of the two is set"),
    };
    let ui = !args.no_ui;
    let summary = if is_postgres(&url) {
        crate::demo::run(&Ledger::new(PostgresStore::open(&url).await?), &redact_url(&url), owner, ui).await
    } else {
        crate::demo::run(&Ledger::new(SqliteStore::open(&url).await?), &redact_url(&url), owner, ui).await
    };
    if let Some(dir) = temporary {
        let _ = std::fs::remove_dir_all(dir);
    }
    let summary = summary?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary).expect("summaries serialize"));
    } else {
        render::demo_summary(&summary);
    }
    Ok(exit::OK)
}

async fn sim_crm(args: SimCrmArgs) -> Result<i32, Error> {
    let script = match &args.fault_script {
        Some(text) => text
            .split(',')
            .filter(|f| !f.trim().is_empty())
            .map(str::parse)
            .collect::<Result<_, String>>()
            .map_err(Error::Invalid)?,
        None => std::collections::VecDeque::new(),
    };
    let total: f64 = args.faults.iter().map(|(_, p)| p).sum();
    if total > 1.0 {
        return Err(Error::Invalid(format!("the fault probabilities add up to {total}, more than 1")));
    }
    let options = crate::sim_crm::Options {
        retention: (!args.no_idempotency).then_some(args.retention),
        unique_refs: !args.no_unique_refs,
        reject_obsolete: !args.accept_obsolete,
        state_file: args.state,
        faults: crate::sim_crm::FaultPlan { script, rates: args.faults },
    };
    crate::domain::input::validate_destination_name(&args.name).map_err(Error::Invalid)?;
    if args.print_config {
        print!("{}", crate::sim_crm::destination_config(&args.name, args.listen, &options));
        return Ok(exit::OK);
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| Error::Invalid(format!("cannot listen on {}: {e}", args.listen)))?;
    let crm = crate::sim_crm::SimCrm::start(listener, options).map_err(Error::Invalid)?;
    println!("# paste into actionledger.toml:\n{}", crm.destination_config(&args.name));
    eprintln!("sim-crm listening on http://{} (GET /stats for what it did); Ctrl-C stops it", crm.addr());
    shutdown_signal().await;
    eprintln!("{}", serde_json::to_string(&crm.stats()).expect("stats serialize"));
    Ok(exit::OK)
}
