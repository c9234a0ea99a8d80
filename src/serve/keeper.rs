//! What an executor's claims and uncertain outcomes become when nobody asks about them again:
//! `serve` sweeps its executors' destinations as a worker sweeps its own, so that an automation
//! that died holding a claim is recovered by rule 5 (held for a person, or settled by the
//! executor's lookup) without waiting for its next `:begin`, and an `unknown` action its lookup
//! can settle is looked up (rule 2).

use crate::destination::Destinations;
use crate::domain::{ActorKind, Evidence, LookupDue};
use crate::ledger::{Claim, Ledger, LedgerError, Recovery};
use crate::reconcile::{self, UnknownLookup};
use crate::store::{ClaimScope, Store};
use std::future::Future;
use std::time::Duration;

/// Who the keeper's takeovers, lookups and releases are recorded as.
pub const KEEPER: &str = "serve";

/// Expired claims recovered per destination per sweep.
const EXPIRED_PER_SWEEP: i64 = 50;

/// How long the keeper's own claim of a recovered action lasts: long enough for one lookup.
const KEEPER_LEASE: Duration = Duration::from_mins(1);

/// What one sweep did, for the log and the tests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// Expired claims held for a person: their destination cannot tell a repeat.
    pub held: u64,
    /// Expired claims settled by the executor's lookup (completed, or `unknown`).
    pub settled: u64,
    /// Expired claims taken over and given back to pending for their automation.
    pub released: u64,
    /// `unknown` actions its lookup settled.
    pub looked_up: u64,
}

/// Sweeps every `every` until `stop` completes. A sweep that fails is logged and the next one
/// tries again: the ledger's transactions leave nothing half done.
pub async fn keep<S: Store>(
    ledger: Ledger<S>,
    destinations: Destinations,
    every: Duration,
    stop: impl Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = &mut stop => return,
            _ = tick.tick() => {}
        }
        match sweep(&ledger, &destinations).await {
            Ok(swept) if swept != Swept::default() => tracing::info!(
                held = swept.held,
                settled = swept.settled,
                released = swept.released,
                looked_up = swept.looked_up,
                "executors' claims and outcomes swept"
            ),
            Ok(_) => {}
            Err(error) => {
                let error = crate::domain::text::escape_untrusted(&error.to_string());
                tracing::warn!(%error, "sweeping the executors' claims failed: {error}; the next sweep tries again");
            }
        }
    }
}

/// One sweep over every executor the ledger's catalogue declares.
pub async fn sweep<S: Store>(ledger: &Ledger<S>, destinations: &Destinations) -> Result<Swept, crate::Error> {
    let catalog = ledger.destinations();
    let mut swept = Swept::default();
    for name in catalog.executor_names() {
        recover_expired(ledger, destinations, name, &mut swept).await?;
    }
    let due = reconcile::lookups_due(ledger, catalog).await?;
    for UnknownLookup { action, due, .. } in due {
        let executor = catalog.destination_name(&action).is_some_and(|name| catalog.is_executor(name));
        // A destination that asked for a pause (`Retry-After`) is looked up once it is over.
        let Some(destination) = destinations.of(&action).filter(|d| executor && due == LookupDue::Now && !d.paused())
        else {
            continue;
        };
        match reconcile::look_up(ledger, destination, &action, KEEPER, ActorKind::Worker, None).await {
            Ok(looked) => {
                if matches!(looked.settlement, reconcile::Settlement::Settled(_)) {
                    swept.looked_up += 1;
                }
            }
            // Kept as evidence, where a person sees it and the next sweep's backoff counts it.
            Err(crate::Error::Destination(failure)) => {
                let failure = format!("lookup failed: {failure}");
                ledger.keep_failed_lookup(&action.key, KEEPER, &failure, &Evidence::default()).await?;
            }
            Err(other) => return Err(other),
        }
    }
    Ok(swept)
}

/// Rule 5 for the expired claims of executor `name`: where the destination cannot tell a repeat
/// the ledger holds the action for a person; where its lookup can, the lookup settles it once the
/// settle delay after the lease has passed; where only an idempotency key protects a repeat, the
/// action goes back to pending for its automation's next `:begin` or claim, under the same key.
async fn recover_expired<S: Store>(
    ledger: &Ledger<S>,
    destinations: &Destinations,
    name: &str,
    swept: &mut Swept,
) -> Result<(), crate::Error> {
    let scope = ClaimScope { destinations: Some(vec![name.to_owned()]), include_unassigned: false, key: None };
    let now = ledger.store().now().await?;
    for expired in ledger.store().expired_claims(EXPIRED_PER_SWEEP, &scope).await? {
        let paused = destinations.of(&expired).is_some_and(crate::destination::Destination::paused);
        if paused || ledger.destinations().lookup_settles_at(&expired).is_some_and(|at| at > now) {
            continue;
        }
        let claim = match ledger.recover_expired(&expired.key, expired.ownership_version, KEEPER, KEEPER_LEASE).await? {
            Recovery::Claimed(claim) => claim,
            Recovery::Held(_) => {
                swept.held += 1;
                continue;
            }
            Recovery::NotExpired | Recovery::Changed => continue,
        };
        if ledger.hold_if_window_closed(&claim).await?.is_some() {
            swept.held += 1;
            continue;
        }
        let (claim, why) = if ledger.destinations().looks_before_repeat(&claim.action) {
            let attempt = match ledger.start_attempt(&claim).await {
                Ok(attempt) => attempt,
                Err(LedgerError::Fenced { .. }) => continue,
                Err(other) => return Err(other.into()),
            };
            // Completed by the record found, or `unknown` for the settler and a person.
            if reconcile::look_before_repeat(ledger, destinations, &claim, attempt).await?.is_some() {
                swept.settled += 1;
                continue;
            }
            let why = "its automation's claim expired and the lookup found no record: it waits for the \
                       automation's next :begin or claim";
            (Claim { started: Some(attempt), ..claim }, why)
        } else {
            let why = "its automation's claim expired; the destination recognises the same idempotency key: it \
                       waits for the automation's next :begin or claim";
            (claim, why)
        };
        ledger.release(&claim, why).await?;
        swept.released += 1;
    }
    Ok(())
}
