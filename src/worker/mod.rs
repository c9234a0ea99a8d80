//! The worker: claims actions, performs them through its [`Effect`] (the configured HTTP
//! destinations, or a Rust caller's own), and recovers from every failure point by the rules
//! (docs/RULES.md, 2 to 5): uncertain outcomes become `unknown` and are settled only by a lookup or
//! a person; nothing is sent after the idempotency window; an expired claim is taken over only
//! where a repeat cannot take effect twice, and held for a person otherwise (the ledger decides
//! which).
//!
//! One pipeline, whatever the load: each claim takes up to as many actions as the worker has free
//! send slots (one statement), the attempts a claim took start in one commit before any of them is
//! sent, each action is then sent on its own, and its result goes to the worker's group-commit
//! batcher ([`committer`]). Uncertain outcomes are settled beside the sends ([`settle`]). A worker
//! with one slot is the per-action mode: claim one, start it, send it, record it.

mod committer;
mod effect;
mod http;
mod settle;

pub use effect::{Effect, LastWrite, NoOp, Stop, Work};

use crate::destination::Destinations;
use crate::domain::text::escape_untrusted;
use crate::domain::{ActionRecord, DestinationCatalog, LookupDue, State};
use crate::error::Error;
use crate::ledger::{Claim, Ledger, LedgerError, Outcome, Recorded, Recovery, Report, StartedAttempt};
use crate::reconcile::UnknownLookup;
use crate::store::{ClaimScope, Store};
use committer::Committer;
use serde::Serialize;
use settle::Settler;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

/// How long a worker keeps trying while the database fails before it gives up.
const DATABASE_PATIENCE: Duration = Duration::from_mins(2);

/// How a worker runs, and what it performs: `E` is the configured HTTP destinations by default,
/// or any [`Effect`].
#[derive(Debug, Clone)]
pub struct WorkerOptions<E = Destinations> {
    pub id: String,
    /// Send slots: actions being performed at once, from their claim until their result commits.
    pub concurrency: usize,
    /// The most actions one claim takes (it takes up to the free slots).
    pub batch: usize,
    pub lease: Duration,
    pub poll_interval: Duration,
    /// Exit once nothing is claimable (and no backoff or settle is due soon).
    pub drain: bool,
    /// What the worker performs: where actions go, and the one for actions submitted without a
    /// destination.
    pub destinations: E,
    /// Log an `info` event per settled action (`warn` when something went wrong).
    pub progress: bool,
}

/// What a worker run did, counted per action outcome.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub worker: String,
    pub claimed: u64,
    pub completed: u64,
    pub retried: u64,
    pub failed: u64,
    pub unknown: u64,
    pub held: u64,
    pub conflict: u64,
    /// Expired claims taken over (rule 5).
    pub recovered: u64,
    /// Unknown actions settled by a lookup.
    pub settled_by_lookup: u64,
    /// Results refused because the claim had passed to a newer owner.
    pub stale_results: u64,
    /// Claims given back unsent at shutdown, or while their destination is paused.
    pub released: u64,
    pub errors: u64,
}

impl Summary {
    /// Adds another worker's counts to these (the worker's name stays): several workers' run as
    /// one. Every count is named, so that a count added to the summary is added here too.
    pub fn add(&mut self, other: &Self) {
        let Self {
            worker: _,
            claimed,
            completed,
            retried,
            failed,
            unknown,
            held,
            conflict,
            recovered,
            settled_by_lookup,
            stale_results,
            released,
            errors,
        } = other;
        self.claimed += claimed;
        self.completed += completed;
        self.retried += retried;
        self.failed += failed;
        self.unknown += unknown;
        self.held += held;
        self.conflict += conflict;
        self.recovered += recovered;
        self.settled_by_lookup += settled_by_lookup;
        self.stale_results += stale_results;
        self.released += released;
        self.errors += errors;
    }

    pub fn line(&self) -> String {
        format!(
            "worker {}: claimed {}, completed {}, retried {}, failed {}, unknown {}, held {}, conflict {}, \
             recovered {}, settled by lookup {}, stale results {}, released {}, errors {}",
            self.worker,
            self.claimed,
            self.completed,
            self.retried,
            self.failed,
            self.unknown,
            self.held,
            self.conflict,
            self.recovered,
            self.settled_by_lookup,
            self.stale_results,
            self.released,
            self.errors
        )
    }
}

/// One event about `action` by worker `worker`, at `level`: [`Shared::progress`] and
/// [`Shared::trouble`] differ only in the level, and `tracing::event!` takes the level as a
/// constant, so the fields are written once here rather than once per level.
macro_rules! action_event {
    ($level:expr, $worker:expr, $action:expr, $outcome:expr, $what:expr) => {{
        let action: &ActionRecord = $action;
        let key = escape_untrusted(action.key.as_str());
        tracing::event!(
            $level,
            key = %key,
            worker = %escape_untrusted($worker),
            ownership_version = action.ownership_version,
            destination = %escape_untrusted(action.destination.as_deref().unwrap_or("")),
            outcome = $outcome,
            "{key}: {}",
            escape_untrusted($what)
        )
    }};
}

struct Shared<S, E> {
    ledger: Ledger<S>,
    options: WorkerOptions<E>,
    /// What the effect declares, read once: the ledger decides recovery from the same.
    catalog: DestinationCatalog,
    summary: Mutex<Summary>,
    stopping: tokio::sync::watch::Receiver<bool>,
    /// Told to go quiet: it claims nothing more, and ends once what it holds is recorded.
    quiet: std::sync::atomic::AtomicBool,
    /// Send slots, each held from an action's claim until its result commits.
    slots: Arc<Semaphore>,
    /// Told whenever a slot comes free, so that the loop claims again.
    freed: Notify,
    committer: Committer,
    settler: std::sync::OnceLock<Settler>,
}

impl<S: Store, E: Effect> Shared<S, E> {
    fn count(&self, bump: impl FnOnce(&mut Summary)) {
        bump(&mut self.summary.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    }

    /// Logs what became of an action (an `info` event), with its key, this worker, the
    /// ownership version, the destination and the outcome as fields. Every text from outside
    /// (keys, destination names, errors that quote a destination) is escaped as on the terminal.
    fn progress(&self, action: &ActionRecord, outcome: &str, what: &str) {
        if self.options.progress {
            action_event!(tracing::Level::INFO, &self.options.id, action, outcome, what);
        }
    }

    /// Like [`Shared::progress`] for something that went wrong and will be tried again or left
    /// to recovery: a `warn` event.
    fn trouble(&self, action: &ActionRecord, outcome: &str, what: &str) {
        if self.options.progress {
            action_event!(tracing::Level::WARN, &self.options.id, action, outcome, what);
        }
    }

    /// The destination `action` goes to, if this worker performs it.
    fn destination_of<'a>(&'a self, action: &'a ActionRecord) -> Option<&'a str> {
        self.catalog.of(action).and(self.catalog.destination_name(action))
    }

    fn stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    /// Whether the worker may claim no more: it is stopping, or going quiet.
    fn claims_nothing_more(&self) -> bool {
        self.stopping() || self.quiet.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Runs a worker until `shutdown` completes (or, with `drain`, until nothing is left to do).
/// Claims not yet sent at shutdown are given back; requests in flight finish, and their results
/// are committed before it returns.
pub async fn run<S: Store, E: Effect>(
    ledger: Ledger<S>,
    options: WorkerOptions<E>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<Summary, Error> {
    run_with_quiet(ledger, options, std::future::pending(), shutdown).await
}

/// [`run`], and also until `quiet` completes and what the worker holds then is recorded: from
/// then on it claims nothing (nor takes over expired claims), and every action it had claimed is
/// performed and its result committed, none given back, before it returns (Sidekiq's quiet).
/// `shutdown` after `quiet` still stops it at once, as [`run`] does.
pub async fn run_with_quiet<S: Store, E: Effect>(
    ledger: Ledger<S>,
    options: WorkerOptions<E>,
    quiet: impl Future<Output = ()> + Send,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<Summary, Error> {
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let summary = Summary { worker: options.id.clone(), ..Summary::default() };
    // The ledger decides recovery from the capabilities this worker's effect declares.
    let catalog = options.destinations.catalog();
    let ledger = ledger.with_destinations(catalog.clone());
    let (committer, committing) = Committer::start(ledger.clone(), options.id.clone());
    let shared = Arc::new(Shared {
        ledger,
        slots: Arc::new(Semaphore::new(options.concurrency.max(1))),
        options,
        catalog,
        summary: Mutex::new(summary),
        stopping,
        quiet: std::sync::atomic::AtomicBool::new(false),
        freed: Notify::new(),
        committer,
        settler: std::sync::OnceLock::new(),
    });
    let (settler, settling) = settle::start(&shared);
    let _ = shared.settler.set(settler);
    let result = main_loop(&shared, &stop, quiet, shutdown).await;
    let _ = stop.send(true);
    let _ = settling.await;
    // Every claim's task has ended, each after its result committed; what a task that panicked
    // left queued is committed now.
    shared.committer.close();
    let _ = committing.await;
    let summary = shared.summary.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    result.map(|()| summary)
}

async fn main_loop<S: Store, E: Effect>(
    shared: &Arc<Shared<S, E>>,
    stop: &tokio::sync::watch::Sender<bool>,
    quiet: impl Future<Output = ()> + Send,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    let mut tasks: JoinSet<()> = JoinSet::new();
    tokio::pin!(quiet);
    tokio::pin!(shutdown);
    let mut quieting = false;
    let mut failing_since: Option<tokio::time::Instant> = None;
    let mut recovery_due = tokio::time::Instant::now();
    // Opened before the first claim, so that nothing submitted after that claim goes unheard.
    let mut wakeups = shared.ledger.store().listen_for_runnable().await;
    loop {
        while tasks.try_join_next().is_some() {}
        // A SQLite ledger file deleted or replaced under this worker: what it claims from now on
        // is in a file no other command sees, and new submissions go to a file nobody works. It
        // claims nothing more, lets the requests in flight finish (their results go where their
        // claims are), and stops with the error, so that it is restarted on the ledger there is.
        if let Err(moved) = shared.ledger.store().check_file() {
            let error = escape_untrusted(&moved.to_string());
            tracing::error!(
                worker = %escape_untrusted(&shared.options.id),
                %error,
                "worker {}: {error}; claiming nothing more and stopping",
                escape_untrusted(&shared.options.id)
            );
            shared.count(|s| s.errors += 1);
            let _ = stop.send(true);
            while tasks.join_next().await.is_some() {}
            return Err(LedgerError::from(moved).into());
        }
        // A lost connection or a restarting database is waited out: claims in flight expire and
        // are recovered by the rules, so nothing is repeated blindly.
        let busy = match round(shared, &mut tasks, &mut recovery_due).await {
            Ok(busy) => {
                failing_since = None;
                busy
            }
            Err(error) => {
                let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
                shared.count(|s| s.errors += 1);
                if since.elapsed() > DATABASE_PATIENCE || error.is_not_permitted() {
                    let _ = stop.send(true);
                    while tasks.join_next().await.is_some() {}
                    return Err(error);
                }
                let error = escape_untrusted(&error.to_string());
                tracing::warn!(
                    worker = %escape_untrusted(&shared.options.id),
                    %error,
                    "worker {}: {error}; trying again",
                    escape_untrusted(&shared.options.id)
                );
                true
            }
        };
        if failing_since.is_none()
            && shared.options.drain
            && !busy
            && tasks.is_empty()
            && shared.settler.get().is_none_or(Settler::idle)
            && !work_due_soon(shared).await.unwrap_or(true)
        {
            break;
        }
        // Going quiet: every claim's task ends once its result is committed. Lookups of uncertain
        // outcomes hold no claim; what is not looked up yet stays `unknown` for any worker.
        if quieting && tasks.is_empty() {
            break;
        }
        let pause = if busy && failing_since.is_none() { Duration::ZERO } else { shared.options.poll_interval };
        tokio::select! {
            () = &mut shutdown => {
                let _ = stop.send(true);
                break;
            }
            () = &mut quiet, if !quieting => {
                quieting = true;
                shared.quiet.store(true, std::sync::atomic::Ordering::Relaxed);
                tracing::info!(
                    worker = %escape_untrusted(&shared.options.id),
                    held = shared.options.concurrency.max(1) - shared.slots.available_permits(),
                    "worker {}: going quiet; claiming nothing more, and stopping once what it holds is recorded",
                    escape_untrusted(&shared.options.id)
                );
            }
            () = tokio::time::sleep(pause) => {}
            () = shared.freed.notified(), if failing_since.is_none() => {}
            // New work submitted (or given back) while idle: claimed now, not at the next poll.
            () = wakeups.next(), if failing_since.is_none() => {}
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// A send slot: held from an action's claim until its result commits (or it is given back).
/// Giving it back tells the loop, which claims again.
struct Slot<S: Store, E: Effect> {
    _permit: OwnedSemaphorePermit,
    shared: Arc<Shared<S, E>>,
    /// Whether an action held it: a slot a claim took but found nothing for frees quietly,
    /// or an idle worker would claim again at once, and again, for as long as nothing comes.
    used: bool,
}

impl<S: Store, E: Effect> Slot<S, E> {
    /// Gives back a slot no action held, without waking the loop.
    fn unused(mut self) {
        self.used = false;
    }
}

impl<S: Store, E: Effect> Drop for Slot<S, E> {
    fn drop(&mut self) {
        if self.used {
            self.shared.freed.notify_one();
        }
    }
}

/// How many slots must be free before the worker claims again, unless none is busy: claims are
/// shared among several actions rather than made one by one as each slot frees.
fn claim_threshold(concurrency: usize) -> usize {
    (concurrency * 3).div_ceil(10).max(1)
}

/// Takes up to `wanted` free slots.
fn take_slots<S: Store, E: Effect>(shared: &Arc<Shared<S, E>>, wanted: usize) -> Vec<Slot<S, E>> {
    let mut slots = Vec::with_capacity(wanted);
    while slots.len() < wanted {
        let Ok(permit) = Arc::clone(&shared.slots).try_acquire_owned() else { break };
        slots.push(Slot { _permit: permit, shared: Arc::clone(shared), used: true });
    }
    slots
}

/// One round of the main loop: recover expired claims, claim what the free slots can take.
/// Returns whether there was work. Expired claims are looked for at most once per poll
/// interval (while none turn up): a busy worker runs a round each time slots come free.
async fn round<S: Store, E: Effect>(
    shared: &Arc<Shared<S, E>>,
    tasks: &mut JoinSet<()>,
    recovery_due: &mut tokio::time::Instant,
) -> Result<bool, Error> {
    let mut busy = false;
    let concurrency = shared.options.concurrency.max(1);
    let free = shared.slots.available_permits();
    let now = tokio::time::Instant::now();
    // A draining worker looks every round: it must not stop while a claim is due for recovery.
    if free > 0 && (shared.options.drain || now >= *recovery_due) {
        let recovered = recover_expired(shared, tasks, free).await?;
        *recovery_due = if recovered { now } else { now + shared.options.poll_interval };
        busy |= recovered;
    }
    let free = shared.slots.available_permits();
    let idle = free == concurrency;
    if free > 0 && (idle || free >= claim_threshold(concurrency)) && !shared.claims_nothing_more() {
        let slots = take_slots(shared, free.min(shared.options.batch.max(1)));
        let limit = i64::try_from(slots.len()).unwrap_or(i64::MAX);
        let claims =
            shared.ledger.claim_scoped(&shared.options.id, shared.options.lease, limit, &claim_scope(shared)).await?;
        // A claim that got all it asked for suggests more is waiting: claim again at once (as
        // slots allow). One that got less emptied what is claimable: wait for a slot, a wake-up
        // or the poll.
        busy |= claims.len() == slots.len();
        for _ in &claims {
            shared.count(|s| s.claimed += 1);
            crate::faults::crash_point(crate::faults::AFTER_CLAIM);
        }
        let mut slots = slots;
        for unfilled in slots.split_off(claims.len()) {
            unfilled.unused();
        }
        let claimed: Vec<_> = claims.into_iter().zip(slots).collect();
        if !claimed.is_empty() {
            let shared = Arc::clone(shared);
            tasks.spawn(async move { perform(&shared, claimed).await });
        }
    }
    Ok(busy)
}

/// What this worker claims: actions for its destinations, except those paused by a
/// `Retry-After` (their actions wait in the ledger, not in a task holding a claim).
fn claim_scope<S: Store, E: Effect>(shared: &Shared<S, E>) -> ClaimScope {
    let effect = &shared.options.destinations;
    let catalog = &shared.catalog;
    ClaimScope {
        destinations: Some(catalog.names().filter(|name| !effect.paused(name)).map(str::to_owned).collect()),
        include_unassigned: catalog.default_destination().is_some_and(|name| !effect.paused(name)),
        key: None,
    }
}

/// For a draining worker: is a retry waiting out its backoff, or an uncertain outcome about to
/// become settleable, so that waiting finishes the work?
async fn work_due_soon<S: Store, E: Effect>(shared: &Shared<S, E>) -> Result<bool, Error> {
    // A retry of ours waiting out its backoff is work still to do, however long the wait. One
    // that came due a while ago and is still not claimable waits on something else (a
    // predecessor), which draining cannot finish.
    // A destination's pause ends, and its actions are claimable again.
    if shared.catalog.names().any(|name| shared.options.destinations.paused(name)) {
        return Ok(true);
    }
    let store = shared.ledger.store();
    let due_soon_after = store.now().await? - chrono::Duration::seconds(1);
    let ours = |destination: &Option<String>| match destination {
        Some(name) => shared.catalog.names().any(|n| n == name),
        None => shared.catalog.default_destination().is_some(),
    };
    if store.pending_backoffs().await?.iter().any(|(destination, until)| ours(destination) && *until > due_soon_after) {
        return Ok(true);
    }
    // An uncertain outcome a lookup can settle, once its settle delay or the backoff after a
    // failed lookup has passed; not one whose lookups reached their bound.
    Ok(unknown_with_lookups_due(shared).await?.iter().any(|unknown| unknown.due != LookupDue::GivenUp))
}

/// The `unknown` actions this worker could look up, each with when its next automatic lookup may
/// go out.
async fn unknown_with_lookups_due<S: Store, E: Effect>(shared: &Shared<S, E>) -> Result<Vec<UnknownLookup>, Error> {
    crate::reconcile::lookups_due(&shared.ledger, &shared.catalog).await
}

/// Rule 5: hands each expired claim of this worker's destinations to the ledger, which takes it
/// over where a repeat cannot take effect twice and holds it for a person otherwise.
async fn recover_expired<S: Store, E: Effect>(
    shared: &Arc<Shared<S, E>>,
    tasks: &mut JoinSet<()>,
    free: usize,
) -> Result<bool, Error> {
    if shared.claims_nothing_more() {
        return Ok(false);
    }
    let store = shared.ledger.store();
    // Scoped as claims are: expired claims of destinations this worker does not serve must not
    // fill the places its own would take.
    let expired = store.expired_claims(i64::try_from(free).unwrap_or(i64::MAX), &claim_scope(shared)).await?;
    let mut any = false;
    for action in expired {
        if shared.destination_of(&action).is_none() {
            continue;
        }
        let Some(slot) = take_slots(shared, 1).pop() else { break };
        let recovery = shared
            .ledger
            .recover_expired(&action.key, action.ownership_version, &shared.options.id, shared.options.lease)
            .await?;
        match recovery {
            Recovery::Claimed(claim) => {
                any = true;
                shared.count(|s| s.recovered += 1);
                shared.progress(&claim.action, "taken_over", "expired claim taken over");
                let shared = Arc::clone(shared);
                tasks.spawn(async move { perform(&shared, vec![(claim, slot)]).await });
            }
            Recovery::Held(action) => {
                any = true;
                slot.unused();
                shared.count(|s| s.held += 1);
                shared.progress(&action, "held", "expired claim held: a takeover is not safe here");
            }
            Recovery::NotExpired | Recovery::Changed => slot.unused(),
        }
    }
    Ok(any)
}

async fn predecessor<S: Store, E: Effect>(
    shared: &Shared<S, E>,
    action: &ActionRecord,
) -> Result<Option<ActionRecord>, Error> {
    match &action.after {
        Some(key) => Ok(shared.ledger.store().find(key).await?),
        None => Ok(None),
    }
}

/// A claim ready to be sent: what the effect is given with it, and its slot.
struct Ready<S: Store, E: Effect> {
    claim: Claim,
    after: Option<ActionRecord>,
    last_write: Option<LastWrite>,
    slot: Slot<S, E>,
}

/// Performs the actions one claim took: each is prepared, their attempts start in one commit
/// (where the claim did not start them itself), and then each is sent on its own and its result
/// queued for the group commit, without waiting for the others. Their leases are kept alive until
/// each result commits.
async fn perform<S: Store, E: Effect>(shared: &Arc<Shared<S, E>>, claimed: Vec<(Claim, Slot<S, E>)>) {
    let mut ready = Vec::with_capacity(claimed.len());
    for (claim, slot) in claimed {
        let action = claim.action.clone();
        match prepare(shared, claim, slot).await {
            Ok(Some(item)) => ready.push(item),
            Ok(None) => {}
            Err(error) => {
                // Left to expire and be recovered by rule 5.
                shared.count(|s| s.errors += 1);
                shared.trouble(&action, "error", &format!("error: {error}"));
            }
        }
    }
    if ready.is_empty() {
        return;
    }
    let claims: Vec<Claim> = ready.iter().map(|r| r.claim.clone()).collect();
    let live = Arc::new(Mutex::new(claims.clone()));
    let heartbeat = keep_leases(shared, Arc::clone(&live));
    // Claims that started their attempts themselves (a destination that protects against a repeat)
    // are answered without a round trip; where every claim did, none is made.
    let started = match shared.ledger.start_attempts(&claims).await {
        Ok(started) => started,
        Err(error) => {
            heartbeat.abort();
            shared.count(|s| s.errors += 1);
            for item in &ready {
                shared.trouble(&item.claim.action, "error", &format!("error: {error}"));
            }
            return;
        }
    };
    let mut sends = JoinSet::new();
    for (item, attempt) in ready.into_iter().zip(started) {
        match attempt {
            Ok(attempt) => {
                let (shared, live) = (Arc::clone(shared), Arc::clone(&live));
                let key = item.claim.key().clone();
                sends.spawn(async move {
                    send(&shared, item, attempt).await;
                    // Its result is committed (or left to recovery): no more lease to keep.
                    live.lock().unwrap_or_else(std::sync::PoisonError::into_inner).retain(|c| c.key() != &key);
                });
            }
            Err(error) => {
                shared.count(|s| s.errors += 1);
                shared.trouble(&item.claim.action, "not_sent", &format!("not sent: {error}"));
            }
        }
    }
    // A send task that panicked leaves its claim to expire and be recovered by rule 5.
    while sends.join_next().await.is_some() {}
    heartbeat.abort();
}

/// Performs one started attempt through the effect and records its result through the group
/// commit; an uncertain outcome goes to the settler. The slot is given back once the result is
/// committed.
async fn send<S: Store, E: Effect>(shared: &Arc<Shared<S, E>>, item: Ready<S, E>, attempt: StartedAttempt) {
    let Ready { claim, after, last_write, slot } = item;
    let sent_at = std::time::Instant::now();
    let work = Work { action: &claim.action, after: after.as_ref(), last_write: last_write.as_ref() };
    let report = match look_first(shared, &work).await {
        Some(found) => found,
        None => shared.options.destinations.perform(&work, Box::pin(stopped(shared))).await,
    };
    if let Some(destination) = shared.destination_of(&claim.action) {
        crate::metrics::attempt(destination, outcome_label(&report.outcome), sent_at.elapsed());
        crate::metrics::sent(destination, attempt.number);
    }
    let Some(recorded) = shared.committer.record(claim.clone(), attempt, report.clone()).await else {
        shared.count(|s| s.errors += 1);
        shared.trouble(&claim.action, "error", "the result was not recorded; the claim is recovered when it expires");
        return;
    };
    drop(slot);
    if let Some(uncertain) = after_recorded(shared, &claim, &report, recorded)
        && let Some(settler) = shared.settler.get()
    {
        settler.settle(uncertain);
    }
}

/// Looks the action up first where an earlier attempt may have been performed and nothing else
/// protects a repeat (rule 5 took the claim over on that promise). `None`: perform.
async fn look_first<S: Store, E: Effect>(shared: &Shared<S, E>, work: &Work<'_>) -> Option<Report> {
    if !shared.catalog.looks_before_repeat(work.action) {
        return None;
    }
    crate::reconcile::before_repeat(shared.options.destinations.look_up(work.action, work.after).await)
}

/// Settles what must not be sent: a claim with no destination configured here, a shutdown
/// before sending, an idempotency window that has closed, what the effect refuses to perform.
/// `None` when handled.
async fn prepare<S: Store, E: Effect>(
    shared: &Arc<Shared<S, E>>,
    claim: Claim,
    slot: Slot<S, E>,
) -> Result<Option<Ready<S, E>>, Error> {
    let ledger = &shared.ledger;
    let (Some(destination), Some(_)) = (shared.destination_of(&claim.action), shared.catalog.of(&claim.action)) else {
        ledger.release(&claim, "this worker has no configuration for the action's destination").await?;
        return Ok(None);
    };
    if shared.stopping() {
        ledger.release(&claim, "worker shutting down before sending").await?;
        shared.count(|s| s.released += 1);
        return Ok(None);
    }
    // Claimed just before its destination asked for a pause: it waits in the ledger, where
    // this worker does not claim it again until the pause is over, rather than in a task.
    if shared.options.destinations.paused(destination) {
        ledger.release(&claim, "the destination asked for a pause (Retry-After); not sent yet").await?;
        shared.count(|s| s.released += 1);
        return Ok(None);
    }
    if ledger.hold_if_window_closed(&claim).await?.is_some() {
        shared.count(|s| s.held += 1);
        shared.progress(&claim.action, "held", "held: idempotency window passed");
        return Ok(None);
    }
    let after = predecessor(shared, &claim.action).await?;
    let last_write = match claim.action.updates {
        Some(_) => ledger.last_write(&claim.action).await?.map(|(writer, attempt)| LastWrite { writer, attempt }),
        None => None,
    };
    let work = Work { action: &claim.action, after: after.as_ref(), last_write: last_write.as_ref() };
    if let Some(reason) = shared.options.destinations.refusal(&work) {
        ledger.hold(&claim, &reason).await?;
        shared.count(|s| s.held += 1);
        shared.progress(&claim.action, "held", &format!("held: {reason}"));
        return Ok(None);
    }
    Ok(Some(Ready { claim, after, last_write, slot }))
}

/// Renews the leases of the claims in `live` every third of a lease until each is fenced or
/// its result committed (its send removes it).
fn keep_leases<S: Store, E: Effect>(
    shared: &Arc<Shared<S, E>>,
    live: Arc<Mutex<Vec<Claim>>>,
) -> tokio::task::JoinHandle<()> {
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        let every = shared.options.lease / 3;
        loop {
            tokio::time::sleep(every).await;
            let claims = live.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
            if claims.is_empty() {
                return;
            }
            for claim in claims {
                // Fenced: the claim is gone, stop. Any other error: the next beat may get through.
                if matches!(
                    shared.ledger.heartbeat(&claim, shared.options.lease).await,
                    Err(LedgerError::Fenced { .. })
                ) {
                    live.lock().unwrap_or_else(std::sync::PoisonError::into_inner).retain(|c| c.key() != claim.key());
                }
            }
        }
    })
}

/// Counts and reports one recorded result; returns the action if its outcome is uncertain and a
/// lookup may settle it.
fn after_recorded<S: Store, E: Effect>(
    shared: &Shared<S, E>,
    claim: &Claim,
    report: &Report,
    recorded: Recorded,
) -> Option<ActionRecord> {
    let action = match recorded {
        Recorded::Stale(action) => {
            shared.count(|s| s.stale_results += 1);
            shared.progress(
                &claim.action,
                "late_result_refused",
                &format!("late result refused; the action is {}", action.state),
            );
            return None;
        }
        Recorded::Applied(action) => action,
    };
    shared.count(|s| match action.state {
        State::Completed => s.completed += 1,
        State::Pending => s.retried += 1,
        State::Failed => s.failed += 1,
        State::Unknown => s.unknown += 1,
        State::Conflict => s.conflict += 1,
        State::Held => s.held += 1,
        State::InProgress | State::Cancelled => {}
    });
    let detail = match (&action.destination_id, &report.error) {
        (Some(id), _) if action.state == State::Completed => format!("completed as {id}"),
        (_, Some(error)) => format!("{}: {error}", action.state),
        _ => action.state.to_string(),
    };
    shared.progress(&action, action.state.as_str(), &detail);
    let has_lookup = shared.catalog.of(&action).is_some_and(|c| c.lookup);
    (action.state == State::Unknown && has_lookup).then_some(action)
}

/// An attempt's outcome as the metrics name it.
fn outcome_label(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Completed { .. } => "completed",
        Outcome::RetryLater { .. } => "retry",
        Outcome::Failed { .. } => "failed",
        Outcome::Unknown => "unknown",
        Outcome::Conflict => "conflict",
    }
}

/// Completes once the worker is told to stop.
fn stopped<S: Store, E: Effect>(shared: &Shared<S, E>) -> impl Future<Output = ()> + Send + use<S, E> {
    let mut stopping = shared.stopping.clone();
    async move {
        // A closed channel means the worker's loop is gone: as good as stopping.
        let _ = stopping.wait_for(|stop| *stop).await;
    }
}

/// A worker id for this process: host name and process id.
pub fn default_worker_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "worker".to_owned());
    format!("{host}-{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Timestamp;
    use crate::domain::input::{RawSubmission, Submission};
    use std::sync::Arc;

    /// What the events wrote, as the terminal would show it.
    #[derive(Clone, Default)]
    struct Written(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Written {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn an_action_event_has_its_level_and_every_field_escaped() {
        let raw = RawSubmission {
            key: Some("order:1".into()),
            payload: b"{}".to_vec(),
            destination: Some("crm".into()),
            ..Default::default()
        };
        let mut action = ActionRecord::new_pending(&Submission::validate(&raw).unwrap(), Timestamp::default());
        action.ownership_version = 3;
        let written = Written::default();
        let writer = written.clone();
        let subscriber = tracing_subscriber::fmt().with_ansi(false).with_writer(move || writer.clone()).finish();
        tracing::subscriber::with_default(subscriber, || {
            action_event!(tracing::Level::INFO, "w-1", &action, "completed", "completed");
            action_event!(tracing::Level::WARN, "w-\u{1b}[31m", &action, "not_sent", "not sent: \u{1b}[2J");
        });
        let text = String::from_utf8(written.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        for (line, level, outcome, what) in
            [(lines[0], "INFO", "completed", "order:1: completed"), (lines[1], "WARN", "not_sent", "order:1: not sent")]
        {
            assert!(line.contains(level), "{line}");
            assert!(line.contains(what), "{line}");
            assert!(line.contains(&format!("outcome=\"{outcome}\"")), "{line}");
            for field in ["key=order:1", "ownership_version=3", "destination=crm", "worker=w-"] {
                assert!(line.contains(field), "{field} in {line}");
            }
        }
        assert!(!text.contains('\u{1b}'), "text from outside is escaped: {text}");
    }
}
