//! Performing and checking actions against the destinations: `worker` and `reconcile`.

use super::manual::load_destinations;
use super::render;
use crate::domain::text::escape_untrusted;
use crate::domain::{Person, input::Label};
use crate::error::{Error, exit};
use crate::ledger::Ledger;
use crate::store::Store;
use clap::Args;

#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The configuration file with the destinations.
    #[arg(long, default_value = crate::config::DEFAULT_CONFIG_FILE)]
    config: std::path::PathBuf,
    /// Actions performed at once, each from its claim until its result commits (default:
    /// worker.concurrency in the file, else 16). On PostgreSQL the worker opens at most
    /// CONCURRENCY/2 + 3 connections (rounded up, at most 16), and one more to hear of new work.
    #[arg(long)]
    concurrency: Option<usize>,
    /// The most actions one claim takes; a claim takes up to the free slots (default: worker.batch
    /// in the file, else 100).
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
    /// Print the summary as JSON (errors too: {"error", "exit_code"}).
    #[arg(long)]
    pub(super) json: bool,
    /// Serve Prometheus metrics at /metrics, liveness at /healthz and readiness at /readyz on
    /// this address, e.g. 127.0.0.1:9464 (port 0: any free port; the address is logged).
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// How often the ledger's figures (actions per state, stale claims, oldest waits) are read
    /// into the metrics, e.g. 10s: one statement each time, however often Prometheus scrapes.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = crate::config::duration_text::parse, requires = "metrics_addr")]
    metrics_refresh: std::time::Duration,
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
    /// Print the reports as one JSON document (errors too: {"error", "exit_code"}).
    #[arg(long)]
    pub(super) json: bool,
}

/// Completes on SIGINT or SIGTERM.
pub(super) async fn shutdown_signal() {
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

/// Completes on SIGTSTP: the worker goes quiet (as Sidekiq's TSTP), claiming nothing more and
/// exiting once what it holds is recorded. Caught, the signal no longer suspends the process, so
/// that a worker never sits stopped with claims whose leases run out.
async fn quiet_signal() {
    let tstp = tokio::signal::unix::SignalKind::from_raw(rustix::process::Signal::TSTP.as_raw());
    match tokio::signal::unix::signal(tstp) {
        Ok(mut signal) => {
            signal.recv().await;
        }
        Err(_) => std::future::pending().await,
    }
}

/// The operations endpoint (`--metrics-addr`: metrics, liveness, readiness) of a worker or of
/// `serve`, started and its address logged; it stops when dropped.
pub(super) async fn metrics_endpoint<S: Store>(
    ledger: &Ledger<S>,
    addr: Option<std::net::SocketAddr>,
    refresh: std::time::Duration,
) -> Result<Option<crate::health::Endpoint>, Error> {
    let Some(addr) = addr else { return Ok(None) };
    let endpoint = crate::health::serve(ledger.clone(), addr, refresh).await?;
    tracing::info!(
        addr = %endpoint.addr,
        "metrics at http://{0}/metrics, liveness at /healthz, readiness at /readyz",
        endpoint.addr
    );
    Ok(Some(endpoint))
}

/// The worker's slots: `--concurrency`, else the file's `worker.concurrency`; read before the
/// ledger is opened, since its pool is sized by them.
pub(super) fn concurrency(args: &WorkerArgs) -> Result<usize, Error> {
    match args.concurrency {
        Some(concurrency) => checked_concurrency(concurrency),
        None => checked_concurrency(crate::config::Config::load(&args.config)?.worker.concurrency),
    }
}

fn checked_concurrency(concurrency: usize) -> Result<usize, Error> {
    if !(1..=256).contains(&concurrency) {
        return Err(Error::Invalid(format!("--concurrency is {concurrency}; give 1 to 256")));
    }
    Ok(concurrency)
}

pub(super) async fn worker<S: Store>(ledger: Ledger<S>, args: WorkerArgs) -> Result<i32, Error> {
    let (config, destinations) = load_destinations(&args.config, true)?;
    let concurrency = checked_concurrency(args.concurrency.unwrap_or(config.worker.concurrency))?;
    let batch = args.batch.unwrap_or(config.worker.batch);
    if !(1..=crate::config::MAX_BATCH).contains(&batch) {
        return Err(Error::Invalid(format!("--batch is {batch}; give 1 to {}", crate::config::MAX_BATCH)));
    }
    if args.metrics_refresh.is_zero() {
        return Err(Error::Invalid("--metrics-refresh is 0; give a period such as 10s".to_owned()));
    }
    let id = match args.worker_id {
        Some(id) => Label::parse("worker id", &id)?.0,
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
        progress: true,
    };
    let at_once = match options.concurrency.min(options.batch) {
        1 => "one at a time".to_owned(),
        claim => format!("{} at once, up to {claim} per claim", options.concurrency),
    };
    // Kept until the worker ends: dropping it stops the endpoint.
    let endpoint = metrics_endpoint(&ledger, args.metrics_addr, args.metrics_refresh).await?;
    tracing::info!(
        worker = %escape_untrusted(&options.id),
        "worker {} performing actions for {} ({at_once}){}; SIGTSTP: claim nothing more and exit once what is \
         held is recorded; SIGINT or SIGTERM: stop now, giving back what is not sent",
        escape_untrusted(&options.id),
        escape_untrusted(&options.destinations.names().collect::<Vec<_>>().join(", ")),
        if options.drain { ", until nothing is left" } else { "" }
    );
    let summary = crate::worker::run_with_quiet(ledger, options, quiet_signal(), shutdown_signal()).await?;
    drop(endpoint);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary).expect("summaries serialize"));
    } else {
        println!("{}", summary.line());
    }
    Ok(exit::OK)
}

pub(super) async fn reconcile<S: Store>(ledger: &Ledger<S>, args: ReconcileArgs) -> Result<i32, Error> {
    let (config, destinations) = load_destinations(&args.config, true)?;
    let chosen: Vec<&crate::destination::Destination> = match &args.destination {
        Some(name) => vec![
            destinations
                .get(name)
                .ok_or_else(|| Error::Invalid(format!("destination {name} is not in {}", args.config.display())))?,
        ],
        None => destinations.all().filter(|d| d.config.lookup.is_some()).collect(),
    };
    let apply = match (&args.owner, args.apply) {
        (Some(owner), true) => Some(crate::reconcile::Apply { person: Person::parse(owner)?.as_str().to_owned() }),
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
