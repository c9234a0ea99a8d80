//! Settling uncertain outcomes beside the sends: an `unknown` action is looked up once its settle
//! delay has passed, by tasks bounded on their own, so that a destination that loses answers slows
//! only its own actions and never holds a send slot.

use super::effect::Effect;
use super::{Shared, unknown_with_lookups_due};
use crate::domain::{ActionRecord, ActorKind, Evidence, LookupDue, State};
use crate::error::Error;
use crate::ledger::LedgerError;
use crate::reconcile::Settlement;
use crate::reconcile::UnknownLookup;
use crate::store::Store;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;

/// Lookups in flight at once, per worker, across all its destinations.
const LOOKUPS_AT_ONCE: usize = 8;

/// The sending side: the worker hands over each action its send left `unknown`.
#[derive(Clone)]
pub(super) struct Settler {
    queue: mpsc::UnboundedSender<ActionRecord>,
    /// Keys being looked up (or waiting for their delay): a sweep does not look them up twice.
    busy: Arc<Mutex<HashSet<String>>>,
}

impl Settler {
    /// Hands an action whose outcome is uncertain to the settler.
    pub(super) fn settle(&self, action: ActionRecord) {
        self.lock().insert(action.key.to_string());
        let _ = self.queue.send(action);
    }

    /// Whether a lookup is under way or waiting for its delay.
    pub(super) fn idle(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.busy.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Starts the settler of a worker: it looks up what sends left uncertain, and sweeps the ledger
/// every poll interval for `unknown` actions whose next lookup is due. It stops with the worker;
/// what it had not looked up stays `unknown` for the next sweep, by any worker.
pub(super) fn start<S: Store, E: Effect>(shared: &Arc<Shared<S, E>>) -> (Settler, tokio::task::JoinHandle<()>) {
    let (queue, mut handed) = mpsc::unbounded_channel::<ActionRecord>();
    let settler = Settler { queue, busy: Arc::default() };
    let shared = Arc::clone(shared);
    let own = settler.clone();
    let task = tokio::spawn(async move {
        let permits = Arc::new(Semaphore::new(LOOKUPS_AT_ONCE));
        let mut lookups = JoinSet::new();
        let stopped = super::stopped(&shared);
        tokio::pin!(stopped);
        let mut sweep = tokio::time::interval(shared.options.poll_interval);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            while lookups.try_join_next().is_some() {}
            tokio::select! {
                () = &mut stopped => break,
                Some(action) = handed.recv() => {
                    let (shared, permits, own) = (Arc::clone(&shared), Arc::clone(&permits), own.clone());
                    lookups.spawn(async move {
                        // The delay gives a request still under way at the destination time to land.
                        tokio::time::sleep(shared.catalog.lookup_settle(&action)).await;
                        if let Ok(_permit) = permits.acquire().await {
                            settle_or_keep_failure(&shared, &action, 0).await;
                        }
                        own.lock().remove(action.key.as_str());
                    });
                }
                _ = sweep.tick() => {
                    if let Err(error) = sweep_due(&shared, &own, &permits, &mut lookups).await {
                        shared.count(|s| s.errors += 1);
                        let error = crate::domain::text::escape_untrusted(&error.to_string());
                        tracing::warn!(worker = %crate::domain::text::escape_untrusted(&shared.options.id), %error, "settling: {error}; the next sweep tries again");
                    }
                }
            }
        }
        lookups.abort_all();
        own.lock().clear();
    });
    (settler, task)
}

/// One sweep: every `unknown` action of this worker's destinations whose lookup is due now and
/// that no task of this settler is looking up already.
async fn sweep_due<S: Store, E: Effect>(
    shared: &Arc<Shared<S, E>>,
    settler: &Settler,
    permits: &Arc<Semaphore>,
    lookups: &mut JoinSet<()>,
) -> Result<(), Error> {
    for UnknownLookup { action, due, failures } in unknown_with_lookups_due(shared).await? {
        let Some(name) = shared.catalog.destination_name(&action) else { continue };
        // A paused destination is looked up once its pause is over.
        if shared.options.destinations.paused(name) || due != LookupDue::Now {
            continue;
        }
        if !settler.lock().insert(action.key.to_string()) {
            continue;
        }
        let (shared, permits, settler) = (Arc::clone(shared), Arc::clone(permits), settler.clone());
        lookups.spawn(async move {
            if let Ok(_permit) = permits.acquire().await {
                settle_or_keep_failure(&shared, &action, failures).await;
            }
            settler.lock().remove(action.key.as_str());
        });
    }
    Ok(())
}

/// Looks `action` up and settles it; a lookup that got no answer is kept as evidence, counted
/// after the `failures` before it.
async fn settle_or_keep_failure<S: Store, E: Effect>(shared: &Shared<S, E>, action: &ActionRecord, failures: i64) {
    if let Err(error) = settle_one(shared, action).await
        && let Err(error) = lookup_failed(shared, action, failures, &error).await
    {
        shared.trouble(action, "error", &format!("the failed lookup was not kept: {error}"));
    }
}

/// Looks one unknown action up and settles it. `Ok(false)` if it changed meanwhile.
pub(super) async fn settle_one<S: Store, E: Effect>(
    shared: &Shared<S, E>,
    action: &ActionRecord,
) -> Result<bool, Error> {
    let after = super::predecessor(shared, action).await?;
    let report = shared.options.destinations.look_up(action, after.as_ref()).await?;
    let verdict = report.verdict;
    let settlement =
        crate::reconcile::settle_reported(&shared.ledger, action, report, &shared.options.id, ActorKind::Worker)
            .await?;
    let Settlement::Settled(settled) = settlement else { return Ok(false) };
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
    shared.progress(&settled, settled.state.as_str(), &format!("lookup: {}, now {}", verdict.as_str(), settled.state));
    Ok(true)
}

/// Keeps a lookup that got no answer as evidence on the action, where a person sees it and the
/// next sweep counts it towards the bound on lookups; says so in the log, and when the bound is
/// reached, that only a person looks again.
async fn lookup_failed<S: Store, E: Effect>(
    shared: &Shared<S, E>,
    action: &ActionRecord,
    failed_before: i64,
    error: &Error,
) -> Result<(), LedgerError> {
    let failure = format!("lookup failed: {error}");
    // Only the destination's failure is the lookup's: the ledger's own is the sweep's error.
    if !matches!(error, Error::Destination(_)) {
        shared.trouble(action, "error", &format!("{failure}; a later sweep tries again"));
        return Ok(());
    }
    if !shared.ledger.keep_failed_lookup(&action.key, &shared.options.id, &failure, &Evidence::default()).await? {
        return Ok(());
    }
    let failures = failed_before + 1;
    let retry = shared.catalog.retry_policy(action);
    let then = if retry.spent(failures) {
        format!("{failures} lookups got no answer: not looked up again automatically, a person looks or resolves")
    } else {
        format!("lookup {failures} of {} got no answer; tried again after a backoff", retry.max_attempts)
    };
    shared.trouble(action, "lookup_failed", &format!("{failure}; {then}"));
    Ok(())
}
