//! The worker's own cases: default workers (`worker::run` in this process, sharing the ledger)
//! draining a backlog, the time from submit to perform on idle workers, and one worker against
//! the simulated CRM with and without lost answers. The ledger-call cases beside them measure the
//! calls a worker makes; these measure the worker as a user runs it.

use super::{BenchError, Case, submission};
use crate::config::{Config, WorkerSettings};
use crate::destination::{Destination, Destinations};
use crate::domain::{Capabilities, DestinationCatalog, RawSubmission};
use crate::error::Error;
use crate::ledger::{Ledger, Report};
use crate::sim_crm::{Fault, FaultPlan, SimCrm};
use crate::store::Store;
use crate::worker::{self, Effect, NoOp, Stop, Summary, Work, WorkerOptions};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Default workers draining the backlog together in the worker cases.
pub const WORKERS: usize = super::drain::WORKERS;

/// The destination of the worker cases: it declares nothing (no idempotency key, no lookup), so
/// each attempt's start commits on its own before the action is performed.
pub const PLAIN: &str = "bench-plain";

/// Submissions per second in the latency case.
pub const LATENCY_RATE: u32 = 50;

/// Share of the simulated CRM's answers dropped after it committed, in the lost-answers case.
pub const LOST_SHARE: f64 = 0.3;

/// The settle delay of the lost-answers case: short, so that a lookup follows a lost answer at
/// once and the case measures the worker, not the wait.
pub const SETTLE: Duration = Duration::from_millis(20);

/// The longest the latency case waits, after its last submission, for every action to be
/// performed.
const PERFORM_PATIENCE: Duration = Duration::from_secs(30);

/// Submissions per commit while loading the lost-answers case's actions.
const LOAD_PAGE: usize = 500;

/// A worker as a user starts one with the defaults (`worker` without options, or the library's
/// defaults): 16 send slots, up to 100 per claim, the default lease and poll interval.
pub(super) fn default_worker<E>(id: String, destinations: E, drain: bool) -> WorkerOptions<E> {
    let defaults = WorkerSettings::default();
    WorkerOptions {
        id,
        concurrency: defaults.concurrency,
        batch: defaults.batch,
        lease: defaults.lease,
        poll_interval: defaults.poll_interval,
        drain,
        destinations,
        progress: false,
    }
}

/// The no-op effect for [`PLAIN`], which declares nothing.
pub(super) fn plain() -> NoOp {
    NoOp::new(PLAIN, Capabilities::default())
}

/// The no-op effect for the keyed destination of the drain cases: the claim starts the attempt,
/// one commit fewer per action.
pub(super) fn keyed() -> NoOp {
    NoOp::new(super::drain::PROTECTED, super::drain::keyed_capabilities())
}

/// Runs [`WORKERS`] default workers with `effect` until the ledger has nothing left for them;
/// returns the wall time and their summaries added up.
pub(super) async fn drain<S: Store, E: Effect + Clone>(
    ledger: &Ledger<S>,
    effect: &E,
    name: &str,
) -> Result<(Duration, Summary), Error> {
    let started = Instant::now();
    let workers: Vec<_> = (0..WORKERS)
        .map(|n| {
            let options = default_worker(format!("{name}-{n}"), effect.clone(), true);
            tokio::spawn(worker::run(ledger.clone(), options, std::future::pending()))
        })
        .collect();
    let mut total = Summary { worker: name.to_owned(), ..Summary::default() };
    for worker in workers {
        total.add(&worker.await??);
    }
    Ok((started.elapsed(), total))
}

/// When an action was first performed, and how many times.
#[derive(Debug, Clone, Copy)]
struct Performed {
    first: Instant,
    times: u32,
}

/// A no-op effect that notes the moment `perform` is called for each action, and how often.
#[derive(Debug, Clone)]
pub(super) struct Recording {
    noop: NoOp,
    performed: Arc<Mutex<HashMap<String, Performed>>>,
}

impl Recording {
    pub(super) fn new(noop: NoOp) -> Self {
        Self { noop, performed: Arc::default() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Performed>> {
        self.performed.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Actions performed at least once.
    fn actions(&self) -> usize {
        self.lock().len()
    }

    /// Performs beyond the first of each action.
    fn repeats(&self) -> u32 {
        self.lock().values().map(|p| p.times - 1).sum()
    }

    fn first(&self, key: &str) -> Option<Instant> {
        self.lock().get(key).map(|p| p.first)
    }
}

impl Effect for Recording {
    fn catalog(&self) -> DestinationCatalog {
        self.noop.catalog()
    }

    async fn perform(&self, work: &Work<'_>, stop: Stop) -> Report {
        let now = Instant::now();
        self.lock()
            .entry(work.action.key.to_string())
            .and_modify(|p| p.times += 1)
            .or_insert(Performed { first: now, times: 1 });
        self.noop.perform(work, stop).await
    }
}

/// Submit to perform: `workers` default workers idle on the ledger (polling, or woken by whatever
/// the worker is woken by), actions submitted through `submit` at [`LATENCY_RATE`] a second for
/// `duration`, each on its own task so that a slow commit does not hold back the next. Each
/// action's latency runs from the start of its submit to the start of its perform.
pub(super) async fn latency<S: Store>(
    ledger: &Ledger<S>,
    store: &str,
    workers: usize,
    duration: Duration,
) -> Result<Case, Error> {
    let name = format!("submit to perform at {LATENCY_RATE}/s, idle default workers");
    let prefix = format!("latency-{workers}");
    let effect = Recording::new(plain());
    let mut stops = Vec::new();
    let running: Vec<_> = (0..workers)
        .map(|n| {
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            stops.push(stop);
            let options = default_worker(format!("{prefix}-{n}"), effect.clone(), false);
            tokio::spawn(worker::run(ledger.clone(), options, async move {
                let _ = stopped.await;
            }))
        })
        .collect();
    // The workers have made their first empty claim and wait as idle workers do.
    tokio::time::sleep(WorkerSettings::default().poll_interval * 2).await;
    let count = usize::try_from(u64::from(LATENCY_RATE) * duration.as_secs()).unwrap_or(usize::MAX).max(1);
    let mut ticks = tokio::time::interval(Duration::from_secs(1) / LATENCY_RATE);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut submits = tokio::task::JoinSet::new();
    let submitting = Instant::now();
    for n in 0..count {
        ticks.tick().await;
        let (ledger, key) = (ledger.clone(), format!("{prefix}:{n}"));
        submits.spawn(async move {
            let started = Instant::now();
            ledger.submit(&submission(key.clone())).await.map(|_| (key, started))
        });
    }
    let mut submitted = Vec::with_capacity(count);
    while let Some(done) = submits.join_next().await {
        submitted.push(done??);
    }
    let submitting = submitting.elapsed();
    let waited = Instant::now();
    while effect.actions() < count && waited.elapsed() < PERFORM_PATIENCE {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for stop in stops {
        let _ = stop.send(());
    }
    for worker in running {
        worker.await??;
    }
    let (performed, repeats) = (effect.actions(), effect.repeats());
    if performed != count || repeats > 0 {
        return Err(BenchError::NotPerformedOnce { case: name, submitted: count, performed, repeats }.into());
    }
    let latencies: Vec<Duration> = submitted
        .iter()
        .filter_map(|(key, started)| effect.first(key).map(|at| at.saturating_duration_since(*started)))
        .collect();
    let max = latencies.iter().max().copied().unwrap_or_default();
    let mut c = super::case(&name, store, workers, submitting, latencies);
    c.max_ms = Some(max.as_secs_f64() * 1000.0);
    Ok(c)
}

/// What one run of the lost-answers case did.
pub(super) struct LostRun {
    /// From the worker's start to its exit, the backlog done.
    pub elapsed: Duration,
    /// Answers the simulated CRM dropped after committing.
    pub dropped: u64,
    pub settled_by_lookup: u64,
}

/// One run of the lost-answers case: a simulated CRM that drops `lost` of its answers after
/// committing, one default worker (16 slots) performing `actions` actions there, the
/// destination declaring its idempotency key and lookup as the CRM's printed configuration does,
/// with a settle delay of [`SETTLE`]. Checks one CRM record per action and every action
/// completed.
pub(super) async fn lost_answers<S: Store>(
    ledger: &Ledger<S>,
    name: &str,
    prefix: &str,
    actions: usize,
    lost: f64,
) -> Result<LostRun, Error> {
    let faults = FaultPlan { rates: vec![(Fault::DropAfterCommit, lost)], ..FaultPlan::default() };
    let listener =
        tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| Error::io("cannot listen on loopback", e))?;
    let crm = SimCrm::start(listener, crate::sim_crm::Options { faults, ..crate::sim_crm::Options::default() })?;
    for first in (0..actions).step_by(LOAD_PAGE) {
        let page: Vec<RawSubmission> = (first..actions.min(first + LOAD_PAGE))
            .map(|n| RawSubmission {
                key: Some(format!("{prefix}:{n}")),
                payload: format!(r#"{{"n":{n}}}"#).into_bytes(),
                destination: Some("crm".to_owned()),
                ..RawSubmission::default()
            })
            .collect();
        ledger.submit_many(&page).await?;
    }
    let destinations = crm_destinations(&crm)?;
    let started = Instant::now();
    let summary =
        worker::run(ledger.clone(), default_worker(prefix.to_owned(), destinations, true), std::future::pending())
            .await?;
    let elapsed = started.elapsed();
    let stats = crm.stats();
    let dropped = stats.faults_injected.values().sum::<u64>();
    let expected = u64::try_from(actions).unwrap_or(u64::MAX);
    if stats.records != expected
        || stats.max_records_per_external_ref != 1
        || summary.completed != expected
        || (lost > 0.0 && dropped == 0)
    {
        return Err(BenchError::LostAnswers {
            case: name.to_owned(),
            actions,
            records: stats.records,
            max_per_key: stats.max_records_per_external_ref,
            completed: summary.completed,
            dropped,
        }
        .into());
    }
    Ok(LostRun { elapsed, dropped, settled_by_lookup: summary.settled_by_lookup })
}

/// The simulated CRM's printed destination block, with the short settle delay.
fn crm_destinations(crm: &SimCrm) -> Result<Destinations, Error> {
    let config = Config::parse(&crm.destination_config("crm"))?;
    let mut by_name = BTreeMap::new();
    for (name, mut destination) in config.destinations {
        if let Some(lookup) = destination.lookup.as_mut() {
            lookup.settle = SETTLE;
        }
        by_name.insert(name.clone(), Destination::new(&name, destination)?);
    }
    Ok(Destinations::new(by_name, None))
}
