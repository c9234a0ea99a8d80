//! The worker: claims actions, performs them against their destinations, and recovers from every
//! failure point by the rules (docs/RULES.md, 2 to 5): uncertain outcomes become `unknown` and are
//! settled only by a lookup or a person; nothing is sent after the idempotency window; an expired
//! claim is taken over only where a repeat cannot take effect twice, and held for a person
//! otherwise (the ledger decides which).

use crate::destination::{self, Destination, Destinations, SendOutcome};
use crate::domain::text::escape_untrusted;
use crate::domain::{ActionRecord, ActorKind, Evidence, LookupDue, LookupVerdict, State, UpdateCondition};
use crate::error::Error;
use crate::ledger::{Claim, Ledger, LedgerError, LookupReport, Outcome, Recorded, Recovery, Report};
use crate::reconcile::{self, Settlement};
use crate::store::{ClaimScope, ListFilter, Store};
use serde::Serialize;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinSet;

/// Unknown actions looked at per sweep.
const SETTLE_BATCH: i64 = 50;
/// How long a worker keeps trying while the database fails before it gives up.
const DATABASE_PATIENCE: Duration = Duration::from_mins(2);

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    pub id: String,
    /// Requests (or, with `batch` above one, batches) in flight at once.
    pub concurrency: usize,
    /// Actions claimed, started and recorded together: one commit starts the batch's attempts
    /// and one group commit records its results. One is the per-action mode.
    pub batch: usize,
    pub lease: Duration,
    pub poll_interval: Duration,
    /// Exit once nothing is claimable (and no backoff or settle is due soon).
    pub drain: bool,
    /// Where actions go, and the one for actions submitted without a destination.
    pub destinations: Destinations,
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

struct Shared<S> {
    ledger: Ledger<S>,
    options: WorkerOptions,
    summary: Mutex<Summary>,
    stopping: tokio::sync::watch::Receiver<bool>,
}

impl<S: Store> Shared<S> {
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

    fn destination_of(&self, action: &ActionRecord) -> Option<&Destination> {
        self.options.destinations.of(action)
    }

    fn stopping(&self) -> bool {
        *self.stopping.borrow()
    }
}

/// Runs a worker until `shutdown` completes (or, with `drain`, until nothing is left to do).
/// Claims in flight at shutdown finish their current request; claims not yet sent are released.
pub async fn run<S: Store>(
    ledger: Ledger<S>,
    options: WorkerOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<Summary, Error> {
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let summary = Summary { worker: options.id.clone(), ..Summary::default() };
    // The ledger decides recovery from the capabilities this worker's configuration declares.
    let ledger = ledger.with_destinations(options.destinations.catalog());
    let shared = Arc::new(Shared { ledger, options, summary: Mutex::new(summary), stopping });
    let mut tasks: JoinSet<()> = JoinSet::new();
    tokio::pin!(shutdown);
    let mut failing_since: Option<tokio::time::Instant> = None;
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
        let busy = match round(&shared, &mut tasks).await {
            Ok(busy) => {
                failing_since = None;
                busy
            }
            Err(error) => {
                let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
                shared.count(|s| s.errors += 1);
                if since.elapsed() > DATABASE_PATIENCE || error.is_not_permitted() {
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
            && !work_due_soon(&shared).await.unwrap_or(true)
        {
            break;
        }
        let pause = if busy && failing_since.is_none() { Duration::ZERO } else { shared.options.poll_interval };
        tokio::select! {
            () = &mut shutdown => {
                let _ = stop.send(true);
                break;
            }
            () = tokio::time::sleep(pause) => {}
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    while tasks.join_next().await.is_some() {}
    let summary = shared.summary.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    Ok(summary)
}

/// One round of the main loop: recover expired claims, settle what lookups can, claim what there
/// is room for. Returns whether there was work.
async fn round<S: Store>(shared: &Arc<Shared<S>>, tasks: &mut JoinSet<()>) -> Result<bool, Error> {
    let mut busy = false;
    let free = shared.options.concurrency.saturating_sub(tasks.len());
    if free > 0 {
        busy |= recover_expired(shared, tasks, free).await?;
    }
    busy |= settle_unknowns(shared).await? > 0;
    let free = shared.options.concurrency.saturating_sub(tasks.len());
    if free > 0 && !shared.stopping() {
        let batch = shared.options.batch.max(1);
        let limit = i64::try_from(free * batch).unwrap_or(i64::MAX);
        let mut claims =
            shared.ledger.claim_scoped(&shared.options.id, shared.options.lease, limit, &claim_scope(shared)).await?;
        busy |= !claims.is_empty();
        for _ in &claims {
            shared.count(|s| s.claimed += 1);
            crate::faults::crash_point(crate::faults::AFTER_CLAIM);
        }
        while !claims.is_empty() {
            let rest = claims.split_off(batch.min(claims.len()));
            let shared = Arc::clone(shared);
            tasks.spawn(async move { perform(&shared, claims).await });
            claims = rest;
        }
    }
    Ok(busy)
}

/// What this worker claims: actions for its destinations, except those paused by a
/// `Retry-After` (their actions wait in the ledger, not in a task holding a claim).
fn claim_scope<S: Store>(shared: &Shared<S>) -> ClaimScope {
    let destinations = &shared.options.destinations;
    ClaimScope {
        destinations: Some(destinations.all().filter(|d| !d.paused()).map(|d| d.name.clone()).collect()),
        include_unassigned: destinations
            .default_destination()
            .is_some_and(|name| destinations.get(name).is_none_or(|d| !d.paused())),
    }
}

/// For a draining worker: is a retry waiting out its backoff, or an uncertain outcome about to
/// become settleable, so that waiting finishes the work?
async fn work_due_soon<S: Store>(shared: &Shared<S>) -> Result<bool, Error> {
    // A retry of ours waiting out its backoff is work still to do, however long the wait. One
    // that came due a while ago and is still not claimable waits on something else (a
    // predecessor), which draining cannot finish.
    // A destination's pause ends, and its actions are claimable again.
    if shared.options.destinations.all().any(Destination::paused) {
        return Ok(true);
    }
    let store = shared.ledger.store();
    let due_soon_after = store.now().await? - chrono::Duration::seconds(1);
    let ours = |destination: &Option<String>| match destination {
        Some(name) => shared.options.destinations.get(name).is_some(),
        None => shared.options.destinations.default_destination().is_some(),
    };
    if store.pending_backoffs().await?.iter().any(|(destination, until)| ours(destination) && *until > due_soon_after) {
        return Ok(true);
    }
    // An uncertain outcome a lookup can settle, once its settle delay or the backoff after a
    // failed lookup has passed; not one whose lookups reached their bound.
    Ok(unknown_with_lookups_due(shared).await?.iter().any(|unknown| unknown.due != LookupDue::GivenUp))
}

/// An `unknown` action this worker could look up, with when its next automatic lookup may go out
/// and how many of its lookups got no answer since it became `unknown`.
struct UnknownLookup {
    action: ActionRecord,
    due: LookupDue,
    failures: i64,
}

/// The `unknown` actions this worker could look up (at most [`SETTLE_BATCH`]), each with when
/// its next automatic lookup may go out: after the settle delay, and as
/// [`RetryPolicy::lookup_due`](crate::domain::RetryPolicy::lookup_due) bounds and backs off
/// lookups that got no answer.
async fn unknown_with_lookups_due<S: Store>(shared: &Shared<S>) -> Result<Vec<UnknownLookup>, Error> {
    let store = shared.ledger.store();
    let unknown = shared
        .ledger
        .list(&ListFilter { state: Some(State::Unknown), limit: SETTLE_BATCH, ..ListFilter::default() })
        .await?;
    if unknown.is_empty() {
        return Ok(Vec::new());
    }
    let failures: HashMap<String, (i64, crate::domain::Timestamp)> =
        store.unknown_lookup_failures().await?.into_iter().map(|f| (f.key, (f.failures, f.last_at))).collect();
    let now = store.now().await?;
    Ok(unknown
        .into_iter()
        .filter_map(|action| {
            let destination = shared.destination_of(&action)?;
            let lookup = destination.config.lookup.as_ref()?;
            let (count, last) = failures.get(action.key.as_str()).map_or((0, None), |(n, at)| (*n, Some(*at)));
            // The settle delay after the uncertain send gives a request still in flight at the
            // destination time to land before a lookup concludes anything.
            let settled = action.updated_at + chrono::Duration::from_std(lookup.settle).unwrap_or_default();
            let due = match destination.capabilities().retry.lookup_due(count, last, now) {
                LookupDue::Now if settled > now => LookupDue::After(settled),
                due => due,
            };
            Some(UnknownLookup { action, due, failures: count })
        })
        .collect())
}

/// Rule 5: hands each expired claim of this worker's destinations to the ledger, which takes it
/// over where a repeat cannot take effect twice and holds it for a person otherwise.
async fn recover_expired<S: Store>(
    shared: &Arc<Shared<S>>,
    tasks: &mut JoinSet<()>,
    free: usize,
) -> Result<bool, Error> {
    if shared.stopping() {
        return Ok(false);
    }
    let store = shared.ledger.store();
    let expired = store.expired_claims(i64::try_from(free).unwrap_or(i64::MAX)).await?;
    let mut any = false;
    for action in expired {
        if shared.destination_of(&action).is_none() {
            continue;
        }
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
                tasks.spawn(async move { perform(&shared, vec![claim]).await });
            }
            Recovery::Held(action) => {
                any = true;
                shared.count(|s| s.held += 1);
                shared.progress(&action, "held", "expired claim held: a takeover is not safe here");
            }
            Recovery::NotExpired | Recovery::Changed => {}
        }
    }
    Ok(any)
}

/// Settles `unknown` actions whose destination offers a lookup, once the settle delay after the
/// uncertain send has passed, and the backoff after a lookup that got no answer. Returns how
/// many were settled.
async fn settle_unknowns<S: Store>(shared: &Shared<S>) -> Result<usize, Error> {
    let mut settled = 0;
    for UnknownLookup { action, due, failures } in unknown_with_lookups_due(shared).await? {
        let Some(destination) = shared.destination_of(&action) else { continue };
        // A paused destination is looked up once its pause is over.
        if destination.paused() || due != LookupDue::Now {
            continue;
        }
        match settle_one(shared, destination, &action).await {
            Ok(true) => settled += 1,
            Ok(false) => {}
            Err(error) => lookup_failed(shared, &action, failures, &error).await?,
        }
    }
    Ok(settled)
}

/// Keeps a lookup that got no answer as evidence on the action, where a person sees it and the
/// next sweep counts it towards the bound on lookups; says so in the log, and when the bound is
/// reached, that only a person looks again.
async fn lookup_failed<S: Store>(
    shared: &Shared<S>,
    action: &ActionRecord,
    failed_before: i64,
    error: &Error,
) -> Result<(), Error> {
    let failure = format!("lookup failed: {error}");
    // Only the destination's failure is the lookup's: the ledger's own is the round's error.
    if !matches!(error, Error::Destination(_)) {
        shared.trouble(action, "error", &format!("{failure}; a later sweep tries again"));
        return Ok(());
    }
    if !shared.ledger.keep_failed_lookup(&action.key, &shared.options.id, &failure, &Evidence::default()).await? {
        return Ok(());
    }
    let failures = failed_before + 1;
    let retry = shared.destination_of(action).map(|d| d.capabilities().retry).unwrap_or_default();
    let then = if retry.spent(failures) {
        format!("{failures} lookups got no answer: not looked up again automatically, a person looks or resolves")
    } else {
        format!("lookup {failures} of {} got no answer; tried again after a backoff", retry.max_attempts)
    };
    shared.trouble(action, "lookup_failed", &format!("{failure}; {then}"));
    Ok(())
}

/// Looks one unknown action up and settles it. `Ok(false)` if it changed meanwhile.
async fn settle_one<S: Store>(
    shared: &Shared<S>,
    destination: &Destination,
    action: &ActionRecord,
) -> Result<bool, Error> {
    let looked =
        reconcile::look_up(&shared.ledger, destination, action, &shared.options.id, ActorKind::Worker, None).await?;
    let report = &looked.report;
    let settled = match looked.settlement {
        Settlement::Settled(settled) => Some(*settled),
        Settlement::NotUncertain | Settlement::Kept | Settlement::ChangedMeanwhile => None,
    };
    if let Some(settled) = &settled {
        shared.count(|s| {
            s.settled_by_lookup += 1;
            s.unknown = s.unknown.saturating_sub(1);
            match settled.state {
                State::Completed => s.completed += 1,
                State::Conflict => s.conflict += 1,
                State::Failed => s.failed += 1,
                _ => {}
            }
        });
        shared.progress(
            settled,
            settled.state.as_str(),
            &format!("lookup: {}, now {}", report.verdict.as_str(), settled.state),
        );
    }
    Ok(settled.is_some())
}

async fn predecessor<S: Store>(shared: &Shared<S>, action: &ActionRecord) -> Result<Option<ActionRecord>, Error> {
    match &action.after {
        Some(key) => Ok(shared.ledger.store().find(key).await?),
        None => Ok(None),
    }
}

/// Performs claimed actions together, keeping their leases alive while requests are in flight:
/// their attempts start in one commit, their requests go out at once, and their results are
/// recorded in one group commit. A batch of one is the per-action mode.
async fn perform<S: Store>(shared: &Arc<Shared<S>>, claims: Vec<Claim>) {
    let heartbeat = keep_leases(shared, claims.clone());
    let actions: Vec<ActionRecord> = claims.iter().map(|c| c.action.clone()).collect();
    let result = perform_batch(shared, claims).await;
    heartbeat.abort();
    if let Err(error) = result {
        shared.count(|s| s.errors += 1);
        // Left to expire and be recovered by rule 5.
        for action in &actions {
            shared.trouble(action, "error", &format!("error: {error}"));
        }
    }
}

/// Renews the leases of a batch every third of a lease until each is fenced or the batch ends.
fn keep_leases<S: Store>(shared: &Arc<Shared<S>>, claims: Vec<Claim>) -> tokio::task::JoinHandle<()> {
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        let every = shared.options.lease / 3;
        let mut live = claims;
        while !live.is_empty() {
            tokio::time::sleep(every).await;
            let mut still_ours = Vec::with_capacity(live.len());
            for claim in live {
                // Fenced: the claim is gone, stop. Any other error: the next beat may get through.
                if !matches!(
                    shared.ledger.heartbeat(&claim, shared.options.lease).await,
                    Err(LedgerError::Fenced { .. })
                ) {
                    still_ours.push(claim);
                }
            }
            live = still_ours;
        }
    })
}

/// A claim ready to be sent, with the action it waits on (for `{{after.*}}` in templates), and
/// for a conditional update the version the ledger expects the record to be at.
struct Ready {
    claim: Claim,
    after: Option<ActionRecord>,
    expected: Option<Expected>,
}

/// What this ledger last wrote to the record a conditional update changes: the version the
/// destination answered that write with (sent as `If-Match`), and which attempt's evidence holds
/// the answer.
struct Expected {
    version: String,
    written_by: String,
}

async fn perform_batch<S: Store>(shared: &Arc<Shared<S>>, claims: Vec<Claim>) -> Result<(), Error> {
    let mut ready = Vec::with_capacity(claims.len());
    for claim in claims {
        if let Some(item) = prepare(shared, claim).await? {
            ready.push(item);
        }
    }
    if ready.is_empty() {
        return Ok(());
    }
    let batch: Vec<Claim> = ready.iter().map(|r| r.claim.clone()).collect();
    // Claims that started their attempts themselves (a destination that protects against a repeat)
    // are answered without a round trip; where every claim of the batch did, none is made.
    let started = shared.ledger.start_attempts(&batch).await?;
    let mut exchanges = JoinSet::new();
    for (item, attempt) in ready.into_iter().zip(started) {
        match attempt {
            Ok(attempt) => {
                let shared = Arc::clone(shared);
                exchanges.spawn(async move {
                    let sent_at = std::time::Instant::now();
                    let report = exchange(&shared, &item).await;
                    if let Some(destination) = shared.destination_of(&item.claim.action) {
                        crate::metrics::attempt(&destination.name, outcome_label(&report.outcome), sent_at.elapsed());
                        crate::metrics::sent(&destination.name, attempt.number);
                    }
                    (item.claim, attempt, report)
                });
            }
            Err(error) => {
                shared.count(|s| s.errors += 1);
                shared.trouble(&item.claim.action, "not_sent", &format!("not sent: {error}"));
            }
        }
    }
    let mut results = Vec::with_capacity(exchanges.len());
    while let Some(joined) = exchanges.join_next().await {
        // A request task that panicked leaves its claim to expire and be recovered by rule 5.
        if let Ok(result) = joined {
            results.push(result);
        }
    }
    let recorded = shared.ledger.record_results(&results).await?;
    let mut uncertain = Vec::new();
    for ((claim, _, report), recorded) in results.iter().zip(recorded) {
        if let Some(action) = after_recorded(shared, claim, report, recorded) {
            uncertain.push(action);
        }
    }
    settle_after_send(shared, uncertain).await;
    Ok(())
}

/// Settles what must not be sent: a claim with no destination configured here, a shutdown
/// before sending, an idempotency window that has closed. `None` when handled.
async fn prepare<S: Store>(shared: &Arc<Shared<S>>, claim: Claim) -> Result<Option<Ready>, Error> {
    let ledger = &shared.ledger;
    let Some(destination) = shared.destination_of(&claim.action) else {
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
    if destination.paused() {
        ledger.release(&claim, "the destination asked for a pause (Retry-After); not sent yet").await?;
        shared.count(|s| s.released += 1);
        return Ok(None);
    }
    // Rule 4 counts from the start of the current window (a person's retry from `held` starts a
    // new one), not from the first send ever. The database's time is asked only where a window is
    // running (a destination with an idempotency retention, and a request sent before): a first
    // attempt, the common case, costs no round trip for it.
    let window_start = claim.action.window_started_at;
    let capabilities = destination.capabilities();
    if let Some(closes) = capabilities.window_closes(window_start)
        && capabilities.window_passed(window_start, ledger.store().now().await?)
    {
        let closed = closes.to_rfc3339();
        ledger
            .hold(
                &claim,
                &format!(
                    "the idempotency window of {} closed at {closed}; not sent again automatically",
                    destination.name
                ),
            )
            .await?;
        shared.count(|s| s.held += 1);
        shared.progress(&claim.action, "held", "held: idempotency window passed");
        return Ok(None);
    }
    if let Some(updated) = &claim.action.updates
        && !destination.can_update()
    {
        let reason = format!(
            "destination {} declares no update request: the approved update of {updated} waits for a person \
             (change record {} at the destination, then resolve)",
            destination.name,
            claim.action.updates_destination_id.as_deref().unwrap_or("?")
        );
        ledger.hold(&claim, &reason).await?;
        shared.count(|s| s.held += 1);
        shared.progress(&claim.action, "held", "held: the destination declares no update request");
        return Ok(None);
    }
    let expected = match destination.update_condition() {
        Some(UpdateCondition::IfMatch) if claim.action.updates.is_some() => {
            match expected_version(shared, destination, &claim.action).await? {
                Ok(expected) => Some(expected),
                Err(why) => {
                    let reason = format!(
                        "destination {} updates only with If-Match, and {why}: the update of record {} waits for a \
                         person (change the record at the destination, then resolve)",
                        destination.name,
                        claim.action.updates_destination_id.as_deref().unwrap_or("?")
                    );
                    ledger.hold(&claim, &reason).await?;
                    shared.count(|s| s.held += 1);
                    shared.progress(&claim.action, "held", "held: the version to update from is not known");
                    return Ok(None);
                }
            }
        }
        _ => None,
    };
    let after = predecessor(shared, &claim.action).await?;
    Ok(Some(Ready { claim, after, expected }))
}

/// Why a conditional update's expected version is not known: the update is held for a person.
#[derive(Debug, thiserror::Error)]
enum VersionUnknown {
    #[error("no completed write of the record is in this ledger")]
    NothingWritten,
    #[error("{writer}, which wrote the record last, completed without an answer of its own")]
    AnswerMissing { writer: crate::domain::ActionKey },
    #[error("the answer to {writer} attempt {number}, which wrote the record last, names no version")]
    VersionMissing { writer: crate::domain::ActionKey, number: i64 },
}

/// The version a conditional update expects the record at: the one the destination answered this
/// ledger's last write of it with, or why it is not known, for the hold's reason.
async fn expected_version<S: Store>(
    shared: &Shared<S>,
    destination: &Destination,
    update: &ActionRecord,
) -> Result<Result<Expected, VersionUnknown>, Error> {
    let Some((writer, attempt)) = shared.ledger.last_write(update).await? else {
        return Ok(Err(VersionUnknown::NothingWritten));
    };
    let Some(attempt) = attempt else {
        return Ok(Err(VersionUnknown::AnswerMissing { writer }));
    };
    let version = attempt.evidence.body.as_deref().and_then(|body| destination.version_in(body));
    Ok(match version {
        Some(version) => Ok(Expected { version, written_by: format!("{writer} attempt {}", attempt.number) }),
        None => Err(VersionUnknown::VersionMissing { writer, number: attempt.number }),
    })
}

/// Sends one started attempt (or looks first, where a repeat is not protected) and says what
/// the ledger should record.
async fn exchange<S: Store>(shared: &Shared<S>, item: &Ready) -> Report {
    let Ready { claim, after, expected } = item;
    let Some(destination) = shared.destination_of(&claim.action) else {
        return Report {
            outcome: Outcome::Failed { permanent: true },
            error: Some("this worker has no configuration for the action's destination".to_owned()),
            evidence: Evidence::default(),
        };
    };
    // Something may have been sent before and no idempotency key protects a repeat: look first.
    // A key protects only a repeat inside the window in which the earlier requests went out (it
    // was checked when the batch was prepared); where a person restarted the window, the
    // destination may have forgotten the key, so the evidence of an earlier send alone decides.
    // A derived idempotency key (rule 9) does not protect against the requests sent under the
    // key before it.
    let key_protects = destination.config.idempotency.is_some()
        && claim.action.window_started_at.is_some()
        && claim.action.idempotency_key.is_none();
    let looked = if claim.action.first_sent_at.is_some() && !key_protects && destination.config.lookup.is_some() {
        match destination.lookup(&claim.action, after.as_ref()).await {
            Ok(found) if claim.action.updates.is_some() => update_looked_up(destination, &claim.action, &found),
            Ok(found) if !found.records.is_empty() => Some(SendOutcome::AlreadyExists { response: found.response }),
            Ok(_) => None,
            Err(error) => Some(SendOutcome::Uncertain { error: error.to_string(), response: None }),
        }
    } else {
        None
    };
    let outcome = match looked {
        Some(outcome) => outcome,
        None => match destination
            .send_if_match_or_stop(
                &claim.action,
                after.as_ref(),
                expected.as_ref().map(|e| e.version.as_str()),
                stopped(shared),
            )
            .await
        {
            Ok(outcome) => outcome,
            Err(template_error) => SendOutcome::Permanent {
                error: format!("cannot build the request: {template_error}"),
                response: destination::Response { status: 0, body: String::new() },
            },
        },
    };
    match outcome {
        SendOutcome::AlreadyExists { response } => {
            resolve_existing(destination, &claim.action, after.as_ref(), response).await
        }
        SendOutcome::PreconditionFailed { response, current_version } => {
            changed_at_destination(&claim.action, expected.as_ref(), &response, current_version.as_deref())
        }
        other => to_report(destination, &claim.action, other),
    }
}

/// A conditional update refused because the record changed at the destination: `conflict`, with
/// both versions as evidence, the one this ledger last wrote (named, with the attempt whose
/// evidence holds it) and the one the destination holds now (the refusal's answer).
fn changed_at_destination(
    action: &ActionRecord,
    expected: Option<&Expected>,
    refusal: &destination::Response,
    current_version: Option<&str>,
) -> Report {
    let record = action.updates_destination_id.as_deref().unwrap_or("?");
    let expected = expected.map_or_else(
        || "an unknown version".to_owned(),
        |e| format!("version {} (the answer to {})", e.version, e.written_by),
    );
    let current = current_version.map_or_else(|| "another version".to_owned(), |v| format!("version {v}"));
    Report {
        outcome: Outcome::Conflict,
        error: Some(format!(
            "conditional update refused (HTTP {}): record {record} changed at the destination since this ledger last \
             wrote it; expected {expected}, the destination holds {current}; nothing was overwritten",
            refusal.status
        )),
        evidence: Evidence {
            status: Some(i64::from(refusal.status)),
            destination_id: None,
            body: Some(refusal.body.clone()),
        },
    }
}

/// What a lookup before re-sending an update found: already applied (completed), not applied
/// (`None`: send it), or something a person must look at.
fn update_looked_up(
    destination: &Destination,
    action: &ActionRecord,
    found: &destination::Found,
) -> Option<SendOutcome> {
    match destination.judge(action, None, found) {
        Ok(LookupReport { verdict: LookupVerdict::NotFound, .. }) => None,
        Ok(LookupReport { verdict: LookupVerdict::Found, destination_id: Some(id), .. }) => {
            Some(SendOutcome::Created { destination_id: id, response: found.response.clone() })
        }
        Ok(report) => Some(SendOutcome::Uncertain {
            error: format!("before updating again: {}", report.detail.unwrap_or_default()),
            response: Some(found.response.clone()),
        }),
        Err(error) => Some(SendOutcome::Uncertain { error: error.to_string(), response: None }),
    }
}

/// Counts and reports one recorded result; returns the action if its outcome is uncertain and a
/// lookup may settle it.
fn after_recorded<S: Store>(
    shared: &Shared<S>,
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
    let has_lookup = shared.destination_of(&action).is_some_and(|d| d.config.lookup.is_some());
    (action.state == State::Unknown && has_lookup).then_some(action)
}

/// Looks up uncertain outcomes once their settle delay has passed, giving a request still in
/// flight at the destination time to land before concluding.
async fn settle_after_send<S: Store>(shared: &Shared<S>, uncertain: Vec<ActionRecord>) {
    let settle = uncertain
        .iter()
        .filter_map(|action| shared.destination_of(action)?.config.lookup.as_ref().map(|l| l.settle))
        .max();
    let Some(settle) = settle else { return };
    tokio::time::sleep(settle).await;
    for action in uncertain {
        let Some(destination) = shared.destination_of(&action) else { continue };
        if let Err(error) = settle_one(shared, destination, &action).await
            && let Err(error) = lookup_failed(shared, &action, 0, &error).await
        {
            shared.trouble(&action, "error", &format!("the failed lookup was not kept: {error}"));
        }
    }
}

/// The destination says the external reference exists (409): a lookup tells whether it is this
/// action's record.
async fn resolve_existing(
    destination: &Destination,
    action: &ActionRecord,
    after: Option<&ActionRecord>,
    conflict: destination::Response,
) -> Report {
    let evidence = |response: &destination::Response, id: Option<String>| Evidence {
        status: Some(i64::from(response.status)),
        destination_id: id,
        body: Some(response.body.clone()),
    };
    let unknown = |error: String, response: &destination::Response| Report {
        outcome: Outcome::Unknown,
        error: Some(error),
        evidence: evidence(response, None),
    };
    if destination.config.lookup.is_none() {
        return unknown(
            "the destination reports the external reference exists and offers no lookup".to_owned(),
            &conflict,
        );
    }
    match destination.lookup(action, after).await {
        Err(error) => unknown(format!("the external reference exists; lookup failed: {error}"), &conflict),
        Ok(found) => match destination.judge(action, after, &found) {
            Ok(LookupReport { verdict: LookupVerdict::Found, destination_id: Some(id), .. }) => Report {
                outcome: Outcome::Completed { destination_id: id.clone() },
                error: None,
                evidence: evidence(&found.response, Some(id)),
            },
            Ok(report) => unknown(
                format!("the external reference exists: {}", report.detail.unwrap_or_default()),
                &found.response,
            ),
            Err(error) => unknown(error.to_string(), &found.response),
        },
    }
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
fn stopped<S: Store>(shared: &Shared<S>) -> impl Future<Output = ()> + use<S> {
    let mut stopping = shared.stopping.clone();
    async move {
        // A closed channel means the worker's loop is gone: as good as stopping.
        let _ = stopping.wait_for(|stop| *stop).await;
    }
}

/// Maps a classified send to what the ledger records (rules 2 and 3).
fn to_report(destination: &Destination, action: &ActionRecord, outcome: SendOutcome) -> Report {
    let evidence = |response: Option<&destination::Response>, id: Option<String>| Evidence {
        status: response.map(|r| i64::from(r.status)),
        destination_id: id,
        body: response.map(|r| r.body.clone()),
    };
    match outcome {
        SendOutcome::Created { destination_id, response } => Report {
            outcome: Outcome::Completed { destination_id: destination_id.clone() },
            error: None,
            evidence: evidence(Some(&response), Some(destination_id)),
        },
        SendOutcome::BeforeWrite { error, response, retry_after } => {
            // `attempts_in_round` was counted when this attempt started.
            let used = action.attempts_in_round + 1;
            let retry = destination.capabilities().retry;
            let (outcome, error) = if retry.spent(used) {
                let error = format!("{error} (attempt {used} of {}: giving up)", retry.max_attempts);
                (Outcome::Failed { permanent: false }, error)
            } else {
                (Outcome::RetryLater { after: retry.backoff(used, retry_after, fastrand::f64()) }, error)
            };
            Report { outcome, error: Some(error), evidence: evidence(response.as_ref(), None) }
        }
        SendOutcome::Permanent { error, response } => {
            let response = (response.status != 0).then_some(response);
            Report {
                outcome: Outcome::Failed { permanent: true },
                error: Some(error),
                evidence: evidence(response.as_ref(), None),
            }
        }
        SendOutcome::Uncertain { error, response } => {
            Report { outcome: Outcome::Unknown, error: Some(error), evidence: evidence(response.as_ref(), None) }
        }
        // Known not sent, by this worker's own account: back to pending, not before the pause
        // the destination asked for ends. Outside the attempt budget's verdict: a stopping
        // worker must not make an action `failed`.
        SendOutcome::Stopped { pause_left } => Report {
            outcome: Outcome::RetryLater { after: pause_left },
            error: Some(
                "not sent: the worker stopped while the request waited for its turn at the destination".to_owned(),
            ),
            evidence: Evidence::default(),
        },
        SendOutcome::AlreadyExists { response } => Report {
            outcome: Outcome::Unknown,
            error: Some("the destination reports the external reference exists".to_owned()),
            evidence: evidence(Some(&response), None),
        },
        SendOutcome::PreconditionFailed { response, current_version } => {
            changed_at_destination(action, None, &response, current_version.as_deref())
        }
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
