//! The `actionledger` command line: arguments, database resolution, and dispatch to the ledger.
//! Each command group's arguments and body live in their own file.

mod bench;
mod demo;
pub mod logging;
mod manual;
mod migrate;
mod purge;
mod render;
mod review;
mod serve;
mod shell;
mod sim_crm;
mod stats;
mod submit;
mod values;
mod wait;
mod worker;

pub use bench::BenchArgs;
pub use demo::DemoArgs;
pub use manual::{ManualArgs, Resolution};
pub use migrate::MigrateArgs;
pub use purge::PurgeArgs;
pub use review::ReviewArgs;
pub use serve::ServeArgs;
pub use sim_crm::SimCrmArgs;
pub use stats::StatsArgs;
pub use submit::{ListArgs, SubmitArgs};
pub use wait::WaitArgs;
pub use worker::{ReconcileArgs, WorkerArgs};

use crate::domain::{ActionKey, ManualCommand};
use crate::error::{Error, exit};
use crate::ledger::Ledger;
use crate::store::redact_url;
use crate::store::{PostgresStore, SqliteStore, Store};
use clap::{Parser, Subcommand};

/// Installs the report printed on a panic: in colour only on a terminal and without
/// `NO_COLOR`, so a redirected or logged panic carries no escape sequences.
pub fn install_panic_report() {
    use std::io::IsTerminal as _;
    let colour = panic_report_in_colour(std::env::var_os("NO_COLOR").as_deref(), std::io::stderr().is_terminal());
    let hook =
        if colour { color_eyre::config::HookBuilder::default() } else { color_eyre::config::HookBuilder::blank() };
    let _ = hook.install();
}

/// Whether the panic report may use colour.
fn panic_report_in_colour(no_color: Option<&std::ffi::OsStr>, stderr_is_terminal: bool) -> bool {
    stderr_is_terminal && no_color.is_none_or(std::ffi::OsStr::is_empty)
}

#[cfg(test)]
mod json_error_tests {
    use super::{error_json, json_requested};

    #[test]
    fn a_json_error_carries_the_message_and_the_exit_code() {
        let line = error_json("no action \u{1b}[31mk", 4);
        assert!(!line.contains('\u{1b}') && !line.contains('\n'), "{line}");
        let parsed: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(parsed, serde_json::json!({ "error": "no action \u{1b}[31mk", "exit_code": 4 }));
    }

    #[test]
    fn json_is_requested_by_the_flag_only_before_a_double_dash() {
        let args = |list: &[&str]| list.iter().map(Into::into).collect::<Vec<std::ffi::OsString>>();
        assert!(json_requested(args(&["actionledger", "list", "--json", "--state", "x"])));
        assert!(!json_requested(args(&["actionledger", "list", "--state", "x"])));
        assert!(!json_requested(args(&["actionledger", "cancel", "--", "--json"])));
        assert!(!json_requested(args(&["--json", "list"])), "the program's own name is not an argument");
    }
}

#[cfg(test)]
mod panic_report_tests {
    use super::panic_report_in_colour;
    use std::ffi::OsStr;

    #[test]
    fn the_panic_report_has_colour_only_on_a_terminal_without_no_color() {
        assert!(panic_report_in_colour(None, true));
        assert!(panic_report_in_colour(Some(OsStr::new("")), true), "an empty NO_COLOR does not count");
        assert!(!panic_report_in_colour(Some(OsStr::new("1")), true));
        assert!(!panic_report_in_colour(None, false), "a file or a pipe gets no escape sequence");
    }
}

/// The database used when neither `--db`, `ACTIONLEDGER_DB` nor `DATABASE_URL` names one.
pub const DEFAULT_DB_URL: &str = "sqlite://actionledger.db";

/// What `--version` prints after the name: the crate's version, then the commit it was built
/// from and that commit's date (build.rs), e.g. `0.1.0 (abc1234 2026-12-05)`.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("ACTIONLEDGER_BUILD"), ")");

#[derive(Debug, Parser)]
#[command(
    name = "actionledger",
    version = VERSION,
    about = "A durable ledger that lets automations perform each external action once.",
    after_help = "Exit codes: 0 success, 1 error, 2 usage error, 3 refused (conflict, stale version, \
                  invalid transition, invalid submission), 4 not found, 5 schema not current (migrate --status), 6 timed out (wait --timeout)."
)]
pub struct Cli {
    /// Ledger database URL (sqlite://FILE or postgres://...). Default: $ACTIONLEDGER_DB, then
    /// $DATABASE_URL, then sqlite://actionledger.db.
    #[arg(long, global = true, value_name = "URL")]
    pub db: Option<String>,

    /// PostgreSQL: the schema the ledger lives in. Default: the URL's search_path (as in
    /// `?options=-csearch_path%3Dname`), else `actionledger`.
    #[arg(long, global = true, value_name = "NAME", env = "ACTIONLEDGER_SCHEMA")]
    pub schema: Option<String>,

    /// How log events are written to standard error: text, or json (one object per line).
    /// RUST_LOG filters them (default: info), e.g. RUST_LOG=actionledger=debug,sqlx=warn.
    #[arg(long, global = true, value_enum, default_value_t = logging::LogFormat::Text, value_name = "FORMAT")]
    pub log_format: logging::LogFormat,

    /// Print the command's answer as JSON, errors too ({"error", "exit_code"} on standard
    /// output); the same as the subcommand's own --json, written before or after it.
    #[arg(long, global = true)]
    pub json: bool,

    #[command(subcommand)]
    pub command: Command,
}

/// Why a command line cannot be run as written, before anything is opened.
#[derive(Debug, thiserror::Error)]
pub enum CommandLineError {
    #[error("--json: this command prints no answer to put in JSON (review, serve, sim-crm, completions and manpage)")]
    NoJsonAnswer,
}

impl Cli {
    /// Carries a `--json` written before the subcommand (or after one that has none of its own) to
    /// the subcommand, which prints its answer by it. A command with no answer to print refuses it.
    pub fn with_json_given_anywhere(mut self) -> Result<Self, CommandLineError> {
        if self.json {
            *self.command.json_flag().ok_or(CommandLineError::NoJsonAnswer)? = true;
        }
        Ok(self)
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create or upgrade the ledger schema (`submit` and `worker` also do this on first use), or
    /// say where it stands (--status) and what migrating would run (--dry-run).
    Migrate(MigrateArgs),
    /// Record an intended action; prints created, duplicate, stale or conflict.
    Submit(SubmitArgs),
    /// List actions, newest first.
    List(ListArgs),
    /// The ledger's figures once: actions per state, stale claims, and how long the oldest
    /// unknown, held and conflict actions have waited (the figures `worker --metrics-addr` serves).
    Stats(StatsArgs),
    /// Show one action: record, payloads, deliveries, attempts, evidence and audit trail.
    Show {
        key: String,
        /// Print the action as one JSON object (errors too: {"error", "exit_code"}).
        #[arg(long)]
        json: bool,
        /// Destinations, to say whether an update action's request is conditional (default:
        /// actionledger.toml if it exists).
        #[arg(long)]
        config: Option<std::path::PathBuf>,
    },
    /// Wait until an action is in a state (or one of several, e.g. --for completed,failed); exits
    /// 0 then, 6 if --timeout runs out first (saying the state it is in), 4 if there is no such
    /// action.
    Wait(WaitArgs),
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
    /// Accept a proposed payload in place of the approved one; any other proposal waiting is
    /// rejected. With several waiting, name one with --proposal.
    Approve {
        #[command(flatten)]
        manual: ManualArgs,
        /// The proposal to approve: its fingerprint, or enough of its first characters to tell it
        /// apart (`show` lists them); needed when several wait.
        #[arg(long, value_name = "FINGERPRINT")]
        proposal: Option<String>,
    },
    /// Discard a proposed payload, keeping the approved one: the one named with --proposal, or
    /// every one waiting.
    Reject {
        #[command(flatten)]
        manual: ManualArgs,
        /// The proposal to reject: its fingerprint, or enough of its first characters to tell it
        /// apart (`show` lists them); without it, every proposal waiting is rejected.
        #[arg(long, value_name = "FINGERPRINT")]
        proposal: Option<String>,
    },
    /// Take over a stale claim (its lease expired) under a new ownership version: back to
    /// pending where nothing was sent under it or its destination protects against a repeat,
    /// else held for you to check.
    Takeover(ManualArgs),
    /// Ask the action's destination now what it holds; an unknown action is settled by the answer.
    Lookup(ManualArgs),
    /// Acknowledge the late results listed on an action (results from an obsolete owner, which
    /// changed nothing); the state stays as it is.
    Acknowledge(ManualArgs),
    /// Re-create a completed action whose record was removed at the destination (as `reconcile`
    /// reports it missing): a new pending action KEY#recreate-N, linked to this one in the audit
    /// trail, carries the approved payload there again; this one stays completed with its evidence.
    Recreate(ManualArgs),
    /// Make an action a person's to follow up (you, or --to NAME).
    Assign {
        #[command(flatten)]
        manual: ManualArgs,
        /// The person to assign it to (default: --owner).
        #[arg(long, value_name = "NAME")]
        to: Option<String>,
    },
    /// Retention: reduce settled actions older than --older-than to their tombstone (key,
    /// fingerprint, final state, destination id, settled time, audit trail), removing payloads,
    /// deliveries, attempts and lookups. A replay of a purged key is still a duplicate.
    Purge(PurgeArgs),
    /// The review console: triage uncertain actions in the terminal.
    Review(ReviewArgs),
    /// Perform pending actions against the destinations in the configuration file. SIGTSTP makes
    /// it quiet: it claims nothing more and exits 0 once each action it holds is recorded. SIGTERM
    /// or SIGINT stops it now: requests in flight finish and are recorded, the rest is given back.
    Worker(WorkerArgs),
    /// Compare the ledger with a destination: missing, duplicated and mismatched records.
    Reconcile(ReconcileArgs),
    /// The HTTP intake API: submissions, webhooks, actions and a person's commands over HTTP,
    /// behind bearer tokens (`serve hash-token` makes a token's line).
    Serve(ServeArgs),
    /// Run a simulated CRM over HTTP, for demos and tests.
    SimCrm(SimCrmArgs),
    /// A self-contained demonstration: ledger, simulated CRM with faults, workers, console.
    Demo(DemoArgs),
    /// Ledger and worker throughput against the raw-SQL limit, measured in the same run; the
    /// worker's submit-to-perform latency and its rate when answers are lost.
    Bench(BenchArgs),
    /// Print a shell completion script to standard output, e.g. `actionledger completions bash >
    /// /etc/bash_completion.d/actionledger`.
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) to standard output, e.g. `actionledger manpage | man -l -`.
    Manpage,
}

impl Command {
    /// Whether the command draws on the terminal (the review console), where log lines on
    /// standard error would tear the screen: it writes no logs.
    pub fn draws_on_terminal(&self) -> bool {
        matches!(self, Self::Review(_) | Self::Demo(_))
    }

    /// Whether the command needs a ledger that already exists: it only reads, or acts only on
    /// actions already recorded (a person's commands, the console, `reconcile --apply`). Only
    /// `migrate`, `submit`, `worker` and `serve` may create the embedded ledger.
    fn needs_existing_ledger(&self) -> bool {
        !matches!(self, Self::Migrate(_) | Self::Submit(_) | Self::Worker(_) | Self::Serve(_))
    }

    /// Whether the command was asked for JSON (`--json`): its errors are then JSON too. Read
    /// through [`Command::json_flag`], the one place that knows which commands have the flag.
    pub fn json(&mut self) -> bool {
        self.json_flag().is_some_and(|json| *json)
    }

    /// The command's own `--json`, where it has an answer to print as JSON.
    fn json_flag(&mut self) -> Option<&mut bool> {
        match self {
            Self::Submit(args) => Some(&mut args.json),
            Self::List(args) => Some(&mut args.json),
            Self::Show { json, .. } => Some(json),
            Self::Wait(args) => Some(&mut args.json),
            Self::Retry(args)
            | Self::Cancel(args)
            | Self::Approve { manual: args, .. }
            | Self::Reject { manual: args, .. }
            | Self::Takeover(args)
            | Self::Lookup(args)
            | Self::Acknowledge(args)
            | Self::Recreate(args)
            | Self::Resolve { manual: args, .. }
            | Self::Assign { manual: args, .. } => Some(&mut args.json),
            Self::Purge(args) => Some(&mut args.json),
            Self::Migrate(args) => Some(&mut args.json),
            Self::Worker(args) => Some(&mut args.json),
            Self::Reconcile(args) => Some(&mut args.json),
            Self::Demo(args) => Some(&mut args.json),
            Self::Bench(args) => Some(&mut args.json),
            Self::Stats(args) => Some(&mut args.json),
            Self::Review(_) | Self::Serve(_) | Self::SimCrm(_) | Self::Completions { .. } | Self::Manpage => None,
        }
    }
}

/// Whether a command line that clap refused asked for JSON: a `--json` before any `--` (after it,
/// `--json` is an argument's value, not the flag).
pub fn json_requested<I: IntoIterator<Item = std::ffi::OsString>>(args: I) -> bool {
    args.into_iter().skip(1).take_while(|arg| arg != "--").any(|arg| arg == "--json")
}

/// An error as the JSON object printed on standard output under `--json`:
/// `{"error": MESSAGE, "exit_code": CODE}`, one line. JSON escapes control characters, so
/// untrusted text in the message cannot reach a terminal as an escape sequence.
pub fn error_json(message: &str, exit_code: i32) -> String {
    serde_json::json!({ "error": message, "exit_code": exit_code }).to_string()
}

/// An error as the command line says it: the error's own words, then what to do about it in the
/// command line's terms (a flag, a command to run).
pub fn error_text(error: &Error) -> String {
    error.refusal().map_or_else(|| error.to_string(), render::refusal_text)
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
        Command::SimCrm(args) => return sim_crm::sim_crm(args).await,
        Command::Demo(args) => return demo::demo(cli.db, args).await,
        Command::Bench(args) => return bench::bench(cli.db, args).await,
        Command::Completions { shell: name } => return shell::completions(name),
        Command::Manpage => return shell::manpage(),
        Command::Serve(args) => match serve::before_opening(&args)? {
            Some(code) => return Ok(code),
            None => Command::Serve(args),
        },
        other => other,
    };
    let url = resolve_db_url(cli.db);
    let schema = cli.schema.filter(|s| !s.trim().is_empty());
    if let Command::Migrate(args) = &command {
        return migrate::migrate(&url, schema.as_deref(), args).await;
    }
    if let Command::Serve(args) = &command
        && let Some(code) = serve::grant(&url, schema.as_deref(), args).await?
    {
        return Ok(code);
    }
    if url.starts_with("sqlite:") {
        // A mistyped path must not answer "nothing pending" from a new, empty ledger.
        let store = if command.needs_existing_ledger() {
            SqliteStore::open_existing(&url).await?
        } else {
            SqliteStore::open(&url).await?
        };
        execute(Ledger::new(store), command, &url).await
    } else if is_postgres(&url) {
        // Like the embedded ledger's file, a schema is made only by a command that writes.
        let create = !command.needs_existing_ledger();
        if let Command::Serve(args) = command {
            let stores = PostgresStore::open_serving(&url, schema.as_deref(), create).await?;
            let (ledger, commands) = (Ledger::new(stores.submissions), stores.commands.map(Ledger::new));
            let result = serve::serve(&ledger, commands.clone(), args).await;
            ledger.store().close().await;
            if let Some(commands) = commands {
                commands.store().close().await;
            }
            return result;
        }
        let store = match &command {
            Command::Review(_) => PostgresStore::open_interactive(&url, schema.as_deref(), create).await?,
            Command::Worker(args) => {
                PostgresStore::open_for_worker(&url, schema.as_deref(), create, worker::concurrency(args)?).await?
            }
            _ => PostgresStore::open_in(&url, schema.as_deref(), create).await?,
        };
        // What people are shown names the schema too: two ledgers may share a database.
        let shown = format!("{url} (schema {})", store.schema());
        execute(Ledger::new(store), command, &shown).await
    } else {
        Err(Error::Invalid(format!(
            "unsupported database URL {}: use sqlite://FILE or postgres://USER@HOST/DB",
            redact_url(&url)
        )))
    }
}

async fn execute<S: Store>(ledger: Ledger<S>, command: Command, url: &str) -> Result<i32, Error> {
    let result = match command {
        Command::Submit(args) => submit::submit(&ledger, args).await,
        Command::List(args) => submit::list(&ledger, args).await,
        Command::Stats(args) => stats::stats(&ledger, &args).await,
        Command::Show { key, json, config } => {
            submit::show(&ledger, &key, json, config.as_deref()).await?;
            Ok(exit::OK)
        }
        Command::Wait(args) => wait::wait(&ledger, args).await,
        Command::Retry(args) => manual::manual(&ledger, args, ManualCommand::Retry).await,
        Command::Resolve { manual: args, resolution, destination_id } => {
            let command = manual::resolution(resolution, destination_id)?;
            manual::manual(&ledger, args, command).await
        }
        Command::Cancel(args) => manual::manual(&ledger, args, ManualCommand::Cancel).await,
        Command::Approve { manual: args, proposal } => {
            manual::manual(&ledger, args, ManualCommand::Approve { proposal }).await
        }
        Command::Reject { manual: args, proposal } => {
            manual::manual(&ledger, args, ManualCommand::Reject { proposal }).await
        }
        Command::Takeover(args) => manual::manual(&ledger, args, ManualCommand::Takeover).await,
        Command::Lookup(args) => manual::lookup(&ledger, args).await,
        Command::Acknowledge(args) => manual::manual(&ledger, args, ManualCommand::Acknowledge).await,
        Command::Recreate(args) => manual::manual(&ledger, args, ManualCommand::Recreate).await,
        Command::Assign { manual: args, to } => {
            let command = manual::assignment(&args, to.as_deref())?;
            manual::manual(&ledger, args, command).await
        }
        Command::Purge(args) => purge::purge(&ledger, args).await,
        Command::Review(args) => review::review(&ledger, args, url).await,
        Command::Worker(args) => worker::worker(ledger.clone(), args).await,
        Command::Reconcile(args) => worker::reconcile(&ledger, args).await,
        Command::Serve(args) => serve::serve(&ledger, None, args).await,
        Command::Migrate(_)
        | Command::SimCrm(_)
        | Command::Demo(_)
        | Command::Bench(_)
        | Command::Completions { .. }
        | Command::Manpage => {
            unreachable!("handled before the ledger is opened")
        }
    };
    ledger.store().close().await;
    result
}

/// A key naming an existing action: one recorded before keys had to be in NFC is still named as
/// it was recorded (submissions hold new keys to every rule).
fn parse_key(text: &str) -> Result<ActionKey, Error> {
    ActionKey::parse_existing(text).map_err(|e| Error::Invalid(e.to_string()))
}

pub(crate) fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}
