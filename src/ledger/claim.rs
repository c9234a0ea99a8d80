//! Claims and leases: the atomic claim, heartbeats, attempts started before anything is sent, and a
//! claim given back or held before sending.

use super::tx::{Writer, audit_entry, refuse_repeated_keys, retrying, write_action};
use super::{Claim, Ledger, LedgerError, StartedAttempt};
use crate::domain::text::escape_untrusted;
use crate::domain::{
    ActionKey, ActionRecord, ActorKind, Attempt, AttemptOutcome, ClaimFacts, Event, Evidence, State, Timestamp,
    Transition, state,
};
use crate::metrics;
use crate::store::{AttemptStart, AttemptStarted, ClaimAudit, ClaimRequest, ClaimScope, LedgerTx, Store};
use std::collections::HashMap;
use std::time::Duration;

impl<S: Store> Ledger<S> {
    /// Claims up to `limit` runnable actions for `worker`, each under a new ownership version,
    /// with a lease of `lease` by database time.
    pub async fn claim(&self, worker: &str, lease: Duration, limit: i64) -> Result<Vec<Claim>, LedgerError> {
        self.claim_scoped(worker, lease, limit, &ClaimScope::any()).await
    }

    /// Like [`Ledger::claim`], only for the destinations a worker is configured for.
    #[tracing::instrument(skip_all, fields(worker = %escape_untrusted(worker), limit = limit))]
    pub async fn claim_scoped(
        &self,
        worker: &str,
        lease: Duration,
        limit: i64,
        scope: &ClaimScope,
    ) -> Result<Vec<Claim>, LedgerError> {
        state::check(Event::Claimed, State::Pending, State::InProgress)?;
        self.store.check_clock().await?;
        // The claim and its audit entries are one write transaction of their own, which the store
        // makes one statement where it can: nothing else is read or decided between them.
        let audit = ClaimAudit {
            transition: Transition { event: Event::Claimed, from: State::Pending, to: State::InProgress },
            actor_kind: ActorKind::Worker,
        };
        // Where a takeover after a crash would be safe whether or not the request went out, the
        // claim starts the attempt in its own commit: one commit fewer per action.
        let starts = self.destinations.starts_at_claim();
        retrying(|| async {
            let request = ClaimRequest { worker, lease, limit, scope, audit, starts: &starts };
            let claimed = self.store.claim_with_audit(&request).await?;
            Ok(claimed
                .into_iter()
                .map(|claimed| Claim {
                    action: claimed.action,
                    worker: worker.to_owned(),
                    started: claimed.started.map(|s| StartedAttempt { id: s.id, number: s.number }),
                })
                .collect())
        })
        .await
        .inspect(|claims: &Vec<Claim>| metrics::claimed(claims.len()))
    }

    /// Extends the lease of a claim that is still current; returns the new expiry.
    #[tracing::instrument(skip_all, fields(key = %escape_untrusted(claim.key().as_str()), ownership_version = claim.ownership_version()))]
    pub async fn heartbeat(&self, claim: &Claim, lease: Duration) -> Result<Timestamp, LedgerError> {
        self.transact(|tx, now, _| {
            Box::pin(async move {
                let until = now + lease;
                if !tx.renew_lease(claim.key(), claim.ownership_version(), until).await? {
                    let current = tx.lock_action(claim.key()).await?;
                    return Err(fenced(claim, current.as_ref()));
                }
                crate::faults::crash_point(crate::faults::DURING_HEARTBEAT);
                Ok(until)
            })
        })
        .await
        .inspect(|_| metrics::lease_renewed())
        .inspect_err(count_fenced)
    }

    /// Records that an attempt is about to be sent, under a claim that is still current. From
    /// here on the destination may act, so the idempotency window counts from the first one. A
    /// claim that started its attempt itself ([`Claim::started`]) answers that attempt, and nothing
    /// is written.
    pub async fn start_attempt(&self, claim: &Claim) -> Result<StartedAttempt, LedgerError> {
        self.start_attempts(std::slice::from_ref(claim)).await?.pop().expect("one start per claim")
    }

    /// Batched [`Ledger::start_attempt`]: one transaction (one durable commit) and two statements
    /// for many claims, each still checked against its own ownership version. A fenced claim gets
    /// its own error; the others start. Claims that started their attempt themselves answer it
    /// without a write; where every claim did, nothing is sent to the store.
    #[tracing::instrument(skip_all, fields(claims = claims.len()))]
    pub async fn start_attempts(
        &self,
        claims: &[Claim],
    ) -> Result<Vec<Result<StartedAttempt, LedgerError>>, LedgerError> {
        refuse_repeated_keys(claims.iter().map(Claim::key))?;
        let starts: Vec<AttemptStart<'_>> = claims
            .iter()
            .filter(|claim| claim.started.is_none())
            .map(|claim| AttemptStart {
                key: claim.key(),
                ownership_version: claim.ownership_version(),
                worker: &claim.worker,
                idempotency_key: claim.action.sending_key(),
            })
            .collect();
        // One write transaction of its own (one statement where the store can): the ownership
        // version and state in its conditions are the fencing check, and nothing else is decided.
        let counted = if starts.is_empty() {
            Vec::new()
        } else {
            retrying(|| async { Ok(self.store.start_attempts(&starts).await?) }).await?
        };
        let counted: HashMap<&ActionKey, &AttemptStarted> = counted.iter().map(|s| (&s.key, s)).collect();
        let mut started = Vec::with_capacity(claims.len());
        for claim in claims {
            started.push(match (claim.started, counted.get(claim.key())) {
                (Some(at_claim), _) => Ok(at_claim),
                (None, Some(s)) => Ok(StartedAttempt { id: s.id, number: s.number }),
                (None, None) => Err(fenced(claim, self.store.find(claim.key()).await?.as_ref())),
            });
        }
        for refused in started.iter().filter_map(|start| start.as_ref().err()) {
            count_fenced(refused);
        }
        Ok(started)
    }

    /// Rule 4: holds a claim, before anything is sent under it, whose destination's idempotency
    /// window closed since the window's first send; `None` (and nothing written) otherwise. The
    /// database's time is asked only where a window runs (a destination with an idempotency
    /// retention, and a request sent before), so a first attempt costs no round trip for it.
    /// The window counts from the start of the current one (a person's retry from `held` starts
    /// a new one), not from the first send ever.
    pub async fn hold_if_window_closed(&self, claim: &Claim) -> Result<Option<ActionRecord>, LedgerError> {
        let Some(capabilities) = self.destinations.of(&claim.action) else { return Ok(None) };
        let window_start = claim.action.window_started_at;
        let Some(closes) = capabilities.window_closes(window_start) else { return Ok(None) };
        if !capabilities.window_passed(window_start, self.store.now().await?) {
            return Ok(None);
        }
        let destination = self.destinations.destination_name(&claim.action).unwrap_or_default();
        let reason = format!(
            "the idempotency window of {destination} closed at {}; not sent again automatically",
            closes.to_rfc3339()
        );
        self.hold(claim, &reason).await.map(Some)
    }

    /// Holds an action whose automatic work is no longer permitted, without sending anything.
    pub async fn hold(&self, claim: &Claim, reason: &str) -> Result<ActionRecord, LedgerError> {
        self.give_back(claim, Event::Held, State::Held, reason).await
    }

    /// Gives a claim back before anything was sent (a clean shutdown), for another worker.
    pub async fn release(&self, claim: &Claim, reason: &str) -> Result<ActionRecord, LedgerError> {
        self.give_back(claim, Event::Released, State::Pending, reason).await
    }

    #[tracing::instrument(skip_all, fields(key = %escape_untrusted(claim.key().as_str()), ownership_version = claim.ownership_version(), event = event.as_str()))]
    pub(super) async fn give_back(
        &self,
        claim: &Claim,
        event: Event,
        target: State,
        reason: &str,
    ) -> Result<ActionRecord, LedgerError> {
        self.transact(|tx, now, _| {
            Box::pin(async move {
                let mut action = lock_current(tx, claim).await?;
                let transition = action.transition(event, target, now)?;
                if event == Event::Held {
                    action.last_error = Some(reason.to_owned());
                }
                // The attempt the claim started went nowhere: the worker gives the claim back
                // before sending, by its own account. Ended as not sent under this claim, in the
                // same commit, so that no takeover reads it as a request that may have gone out;
                // and, like a crash before writing, it does not count towards the round's
                // `max_attempts` (rule 3): giving claims back never makes an action `failed`.
                if let Some(started) = claim.started {
                    let outcome =
                        if event == Event::Held { AttemptOutcome::Held } else { AttemptOutcome::FailedBeforeWrite };
                    tx.finish_attempts(&[not_sent(claim, started, outcome, reason, now)]).await?;
                    action.attempts_in_round = (action.attempts_in_round - 1).max(0);
                }
                let by =
                    Writer { routing: &self.destinations, actor: &claim.worker, actor_kind: ActorKind::Worker, now };
                write_action(tx, &mut action, by).await?;
                let entry =
                    audit_entry(&action, transition, &claim.worker, ActorKind::Worker, Some(reason.to_owned()), now);
                tx.append_audit(&entry).await?;
                Ok(action)
            })
        })
        .await
    }

    /// What is known, inside the transaction and from the claim as locked, about taking over
    /// `action`'s current claim: whether anything was sent under it, and whether its destination
    /// (as this ledger's catalogue declares it) makes a repeat harmless.
    pub(super) async fn claim_facts(
        &self,
        tx: &mut S::Tx,
        action: &ActionRecord,
        now: Timestamp,
    ) -> Result<ClaimFacts, LedgerError> {
        Ok(ClaimFacts {
            sent_under_claim: tx.attempt_started_under(&action.key, action.ownership_version).await?,
            repeat_protected: self.destinations.protects_against_repeat(action, now),
        })
    }
}

/// The end of an attempt a claim started that was never sent: the worker gave the claim back
/// (`reason`) before its request went out.
pub(super) fn not_sent(
    claim: &Claim,
    started: StartedAttempt,
    outcome: AttemptOutcome,
    reason: &str,
    now: Timestamp,
) -> Attempt {
    Attempt {
        id: started.id,
        key: claim.key().clone(),
        number: started.number,
        worker: claim.worker.clone(),
        ownership_version: claim.ownership_version(),
        started_at: now,
        ended_at: Some(now),
        outcome: Some(outcome),
        error: Some(format!("not sent: {reason}")),
        evidence: Evidence::default(),
        idempotency_key: Some(claim.action.sending_key().to_owned()),
        stale: false,
        acknowledged: None,
    }
}

/// Counts a write refused because the claim's ownership version moved on.
pub(super) fn count_fenced(error: &LedgerError) {
    if matches!(error, LedgerError::Fenced { .. }) {
        metrics::fenced_write();
    }
}

pub(super) fn is_current(action: &ActionRecord, claim: &Claim) -> bool {
    action.state == State::InProgress && action.ownership_version == claim.ownership_version()
}

pub(super) fn fenced(claim: &Claim, current: Option<&ActionRecord>) -> LedgerError {
    LedgerError::Fenced {
        key: claim.key().to_string(),
        held: claim.ownership_version(),
        current: current.map_or(-1, |a| a.ownership_version),
        state: current.map_or_else(|| "missing".to_owned(), |a| a.state.to_string()),
    }
}

pub(super) async fn lock_current<T: LedgerTx>(tx: &mut T, claim: &Claim) -> Result<ActionRecord, LedgerError> {
    let action = tx.lock_action(claim.key()).await?;
    match action {
        Some(action) if is_current(&action, claim) => Ok(action),
        other => Err(fenced(claim, other.as_ref())),
    }
}
