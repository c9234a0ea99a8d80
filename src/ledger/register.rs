//! The register: an automation that performs its effect itself (a script, a flow in an automation
//! platform) asks the ledger before it acts ([`Ledger::begin`], or [`Ledger::claim_for`] for a
//! queue), keeps its claim alive ([`Ledger::renew`]) and reports what happened
//! ([`Ledger::finish`]), under the same claims, fencing, recovery and review as the worker's sends.
//!
//! Beginning starts the attempt: the caller acts right after the answer, so from then on the
//! destination may have acted, and an expired lease is recovered as a crash after a send (rule 5).

use super::{Claim, Ledger, LedgerError, Outcome, Recorded, Recovery, Report, StartedAttempt, SubmitReport};
use crate::domain::{
    ActionKey, ActionRecord, Attempt, AttemptOutcome, Evidence, RawSubmission, Refusal, RetryPolicy, State,
    SubmitOutcome, Timestamp,
};
use crate::store::{ClaimScope, Store};
use std::time::Duration;

/// How many times [`Ledger::begin`] looks again at an action that moved on while it asked.
const ROUNDS: u64 = 6;

/// What an automation may do with one key, as [`Ledger::begin`] answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Begun {
    /// Claimed for the caller, its attempt started: act now, under this claim.
    Proceed(Box<Holding>),
    /// Already completed: the effect is not performed again; here is what it produced.
    Done {
        action: ActionRecord,
        /// The attempt that completed it, with the destination's answer; `None` where a person
        /// resolved it.
        completed_by: Option<Attempt>,
    },
    /// Not now: another holder's lease runs, a backoff runs, or it waits for another action.
    Wait {
        action: ActionRecord,
        /// When asking again may get another answer, where the ledger knows it.
        until: Option<Timestamp>,
        why: String,
    },
    /// A person decides (unknown, conflict, failed or held).
    Review(ActionRecord),
    /// A person decided it must not happen.
    Cancelled(ActionRecord),
    /// The submission itself is stale or conflicts with the recorded payload, as `submit` says.
    Refused(SubmitReport),
}

impl Begun {
    /// The answer's word, as the register's documents and logs say it.
    pub fn decision(&self) -> &'static str {
        match self {
            Self::Proceed(_) => "proceed",
            Self::Done { .. } => "done",
            Self::Wait { .. } => "wait",
            Self::Review(_) => "review",
            Self::Cancelled(_) => "cancelled",
            Self::Refused(report) => report.outcome.as_str(),
        }
    }
}

/// A claim an automation holds, with the attempt it started and what the submission was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    /// The claim, with the action as claimed (what a finish is recorded against).
    pub claim: Claim,
    /// The action as it stands once the attempt started (its attempts counted, its first send).
    pub action: ActionRecord,
    pub attempt: StartedAttempt,
    /// How the submission that began it was taken (`None` for a claim from [`Ledger::claim_for`]).
    pub submitted: Option<SubmitOutcome>,
    /// The lease's end, by database time.
    pub lease_until: Timestamp,
}

/// What an automation reports it did under its claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// The destination confirmed the effect.
    Completed { destination_id: String },
    /// Known not written. `permanent`: trying again will not help; otherwise the action runs
    /// again after the backoff (at least `retry_after`), while the attempt budget lasts (rule 3).
    NotWritten { permanent: bool, retry_after: Option<Duration> },
    /// The destination may or may not have acted (rule 2).
    Unknown,
}

/// An automation's report of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishReport {
    pub finish: Finish,
    /// Why, in the caller's words (required for anything but a completion by the front ends).
    pub reason: Option<String>,
    pub evidence: Evidence,
}

/// What happened to a finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finished {
    /// Recorded: applied under the current claim, or kept as a late result and sent to review
    /// (rule 8).
    Recorded(Recorded),
    /// This claim's attempt was finished already (a repeated report): nothing changed.
    AlreadyFinished(ActionRecord),
}

impl<S: Store> Ledger<S> {
    /// Records the submission (as [`Ledger::submit`]) and, where the action may run now, claims
    /// it for `holder` under a lease and starts its attempt, in the answer's [`Begun::Proceed`].
    /// An expired claim of another holder is recovered first by rule 5: taken over when the
    /// destination protects against a second effect, else held for a person. Only actions of
    /// `destination` are begun: another destination's is refused.
    pub async fn begin(
        &self,
        raw: &RawSubmission,
        destination: &str,
        holder: &str,
        lease: Duration,
    ) -> Result<Begun, LedgerError> {
        let mut raw = raw.clone();
        let named = raw.destination.get_or_insert_with(|| destination.to_owned());
        if named != destination {
            return Err(other_destination(raw.key.as_deref().unwrap_or_default(), Some(named), destination));
        }
        // An action recorded for another destination is refused before anything is recorded
        // against it: its executor's token may not touch it.
        if let Some(key) = raw.key.as_deref().and_then(|k| ActionKey::parse(k).ok())
            && let Some(existing) = self.store.find(&key).await?
        {
            self.refuse_other_destination(&existing, destination)?;
        }
        let report = self.submit(&raw).await?;
        if matches!(report.outcome, SubmitOutcome::Stale | SubmitOutcome::Conflict) {
            return Ok(Begun::Refused(report));
        }
        self.refuse_other_destination(&report.action, destination)?;
        let submitted = report.outcome;
        let mut action = report.action;
        // Each round either answers or sees the action move on (claimed by another, recovered,
        // changed): a few rounds settle any race.
        for round in 1..=ROUNDS {
            let scope = one_key(destination, &action.key);
            let held = match action.state {
                State::Pending => self.claim_scoped(holder, lease, 1, &scope).await?.pop(),
                State::InProgress => {
                    let now = self.store.now().await?;
                    if action.lease_is_live(now) {
                        return Ok(wait_for_holder(action));
                    }
                    if let Some(at) = self.destinations.lookup_settles_at(&action).filter(|at| *at > now) {
                        return Ok(wait_for_lookup(action, at));
                    }
                    match self.recover_expired(&action.key, action.ownership_version, holder, lease).await? {
                        Recovery::Claimed(claim) => Some(claim),
                        Recovery::Held(held) => return Ok(Begun::Review(held)),
                        Recovery::NotExpired | Recovery::Changed => None,
                    }
                }
                _ => return self.settled_answer(action).await,
            };
            if let Some(claim) = held
                && let Some(holding) = self.hold_for_caller(claim, Some(submitted)).await?
            {
                return Ok(Begun::Proceed(Box::new(holding)));
            }
            let fresh = self.store.find(&action.key).await?.ok_or_else(|| not_found(&action.key))?;
            if fresh.state == State::Pending && fresh.revision == action.revision {
                // Pending as before and not claimed: it waits for something the ledger can name
                // (a backoff, a proposal, the action it follows), or another caller's claim of it
                // has not committed yet (PostgreSQL skips a row another claim locks), which the
                // next round sees.
                if let Some(wait) = self.pending_wait(&fresh).await? {
                    return Ok(wait);
                }
                tokio::time::sleep(Duration::from_millis(10 * round)).await;
            }
            action = fresh;
        }
        Ok(Begun::Wait { why: "another caller is claiming it".to_owned(), until: None, action })
    }

    /// Claims up to `limit` runnable actions of `destination` for `holder`, each under a lease
    /// with its attempt started (Camunda's fetch-and-lock): an automation draining a queue under
    /// the same rules as `actionledger worker`. Expired claims of the destination are recovered
    /// first (rule 5); those taken over are among the claims answered.
    pub async fn claim_for(
        &self,
        destination: &str,
        holder: &str,
        lease: Duration,
        limit: i64,
    ) -> Result<Vec<Holding>, LedgerError> {
        let scope =
            ClaimScope { destinations: Some(vec![destination.to_owned()]), include_unassigned: false, key: None };
        let mut claims = Vec::new();
        let now = self.store.now().await?;
        for expired in self.store.expired_claims(limit, &scope).await? {
            if self.destinations.lookup_settles_at(&expired).is_some_and(|at| at > now) {
                continue;
            }
            if let Recovery::Claimed(claim) =
                self.recover_expired(&expired.key, expired.ownership_version, holder, lease).await?
            {
                claims.push(claim);
            }
        }
        let room = limit - i64::try_from(claims.len()).unwrap_or(i64::MAX);
        if room > 0 {
            claims.extend(self.claim_scoped(holder, lease, room, &scope).await?);
        }
        let mut held = Vec::with_capacity(claims.len());
        for claim in claims {
            if let Some(holding) = self.hold_for_caller(claim, None).await? {
                held.push(holding);
            }
        }
        Ok(held)
    }

    /// Extends the lease of the claim `holder` holds on `key` under `ownership_version`; refused
    /// ([`LedgerError::Fenced`]) once the claim has passed on, and for another destination's
    /// action than the holder's.
    pub async fn renew(
        &self,
        key: &ActionKey,
        ownership_version: i64,
        destination: &str,
        holder: &str,
        lease: Duration,
    ) -> Result<Timestamp, LedgerError> {
        let action = self.store.find(key).await?.ok_or_else(|| not_found(key))?;
        self.refuse_other_destination(&action, destination)?;
        let claim =
            Claim { action: ActionRecord { ownership_version, ..action }, worker: holder.to_owned(), started: None };
        self.heartbeat(&claim, lease).await
    }

    /// Records what the automation holding `key` under `ownership_version` did. Applied only
    /// while that claim is current; from an obsolete version it changes nothing and reaches
    /// review (rule 8). A report repeated for an attempt already finished changes nothing; a report
    /// on another destination's action than the holder's is refused.
    pub async fn finish(
        &self,
        key: &ActionKey,
        ownership_version: i64,
        destination: &str,
        holder: &str,
        report: &FinishReport,
    ) -> Result<Finished, LedgerError> {
        let action = self.store.find(key).await?.ok_or_else(|| not_found(key))?;
        self.refuse_other_destination(&action, destination)?;
        let attempts = self.store.attempts(key).await?;
        let Some(started) = attempts.iter().rev().find(|a| a.ownership_version == ownership_version && !a.stale) else {
            // A purge removed the attempts of a settled action with its other bulk: its tombstone
            // changes for nobody (rule 7), and says so.
            self.refuse_if_purged("finish", &action).await?;
            return Err(LedgerError::Fenced {
                key: key.to_string(),
                held: ownership_version,
                current: action.ownership_version,
                state: action.state.to_string(),
            });
        };
        if started.ended_at.is_some() {
            return Ok(Finished::AlreadyFinished(action));
        }
        let attempt = StartedAttempt { id: started.id, number: started.number };
        let outcome = match &report.finish {
            Finish::Completed { destination_id } => Outcome::Completed { destination_id: destination_id.clone() },
            Finish::NotWritten { permanent: true, .. } => Outcome::Failed { permanent: true },
            Finish::NotWritten { permanent: false, retry_after } => {
                // The attempt was counted in the round when it started.
                let retry = self.destinations.retry_policy(&action);
                not_written(retry, action.attempts_in_round, *retry_after)
            }
            Finish::Unknown => Outcome::Unknown,
        };
        let error = match (&outcome, &report.reason) {
            (Outcome::Failed { permanent: false }, reason) => Some(format!(
                "{} (attempt {} of {}: giving up)",
                reason.as_deref().unwrap_or("not written"),
                action.attempts_in_round,
                self.destinations.retry_policy(&action).max_attempts
            )),
            (_, reason) => reason.clone(),
        };
        let claim = Claim {
            action: ActionRecord { ownership_version, ..action },
            worker: holder.to_owned(),
            started: Some(attempt),
        };
        let report = Report { outcome, error, evidence: report.evidence.clone() };
        Ok(Finished::Recorded(self.record_result(&claim, attempt, &report).await?))
    }

    /// A claim handed to an automation: its attempt started (the claim may have started it
    /// itself), or, where the destination's idempotency window has closed, the action held
    /// instead (rule 4) and `None`.
    async fn hold_for_caller(
        &self,
        claim: Claim,
        submitted: Option<SubmitOutcome>,
    ) -> Result<Option<Holding>, LedgerError> {
        if self.hold_if_window_closed(&claim).await?.is_some() {
            return Ok(None);
        }
        let attempt = match self.start_attempt(&claim).await {
            Ok(attempt) => attempt,
            // Recovered by another between the claim and the start: not this caller's.
            Err(LedgerError::Fenced { .. }) => return Ok(None),
            Err(other) => return Err(other),
        };
        let lease_until = claim.action.lease_expires_at.unwrap_or(claim.action.updated_at);
        let action = self.store.find(claim.key()).await?.unwrap_or_else(|| claim.action.clone());
        Ok(Some(Holding { claim, action, attempt, submitted, lease_until }))
    }

    /// The answer for an action no claim can be made on: completed, cancelled, or waiting for a
    /// person. Also what a front end answers once a lookup settled a beginning it had claimed.
    pub async fn settled_answer(&self, action: ActionRecord) -> Result<Begun, LedgerError> {
        Ok(match action.state {
            State::Completed => {
                let completed_by = self
                    .store
                    .attempts(&action.key)
                    .await?
                    .into_iter()
                    .rev()
                    .find(|a| !a.stale && a.outcome == Some(AttemptOutcome::Succeeded));
                Begun::Done { action, completed_by }
            }
            State::Cancelled => Begun::Cancelled(action),
            _ => Begun::Review(action),
        })
    }

    /// Why a pending action cannot be claimed now, where the ledger can name it.
    async fn pending_wait(&self, action: &ActionRecord) -> Result<Option<Begun>, LedgerError> {
        let now = self.store.now().await?;
        if let Some(until) = action.not_before.filter(|until| *until > now) {
            let why = format!("a backoff runs until {}", until.to_rfc3339());
            return Ok(Some(Begun::Wait { why, until: Some(until), action: action.clone() }));
        }
        if action.proposal.is_some() {
            return Ok(Some(Begun::Review(action.clone())));
        }
        if let Some(after) = &action.after
            && self.store.find(after).await?.is_none_or(|first| first.state != State::Completed)
        {
            let why = format!("it runs after {after}, which has not completed");
            return Ok(Some(Begun::Wait { why, until: None, action: action.clone() }));
        }
        Ok(None)
    }

    fn refuse_other_destination(&self, action: &ActionRecord, destination: &str) -> Result<(), LedgerError> {
        match self.destinations.destination_name(action) {
            Some(name) if name == destination => Ok(()),
            other => Err(other_destination(action.key.as_str(), other, destination)),
        }
    }
}

/// The outcome of a send known not written that may be tried again: back to pending after the
/// backoff (at least the destination's `Retry-After`) while the round's budget lasts, else
/// `failed` (rule 3). `used`: the sends of the round, this one included. The worker's sends and
/// the automations' reports are decided by this one function.
pub fn not_written(retry: RetryPolicy, used: i64, retry_after: Option<Duration>) -> Outcome {
    if retry.spent(used) {
        Outcome::Failed { permanent: false }
    } else {
        Outcome::RetryLater { after: retry.backoff(used, retry_after, fastrand::f64()) }
    }
}

fn one_key(destination: &str, key: &ActionKey) -> ClaimScope {
    ClaimScope { destinations: Some(vec![destination.to_owned()]), include_unassigned: false, key: Some(key.clone()) }
}

fn wait_for_holder(action: ActionRecord) -> Begun {
    let holder = action.claimed_by.clone().unwrap_or_default();
    let until = action.lease_expires_at;
    Begun::Wait { why: format!("{holder} holds it"), until, action }
}

/// An expired claim whose destination's lookup decides what happens to it, before a request its
/// holder sent has had time to land there.
fn wait_for_lookup(action: ActionRecord, at: Timestamp) -> Begun {
    let holder = action.claimed_by.clone().unwrap_or_default();
    let why = format!(
        "the lease of {holder} ended, and a request it sent may still be under way at the destination: its lookup \
         decides at {}",
        at.to_rfc3339()
    );
    Begun::Wait { why, until: Some(at), action }
}

fn not_found(key: &ActionKey) -> LedgerError {
    LedgerError::NotFound(key.to_string())
}

fn other_destination(key: &str, recorded: Option<&str>, asked: &str) -> LedgerError {
    LedgerError::Refused(Refusal::OtherDestination {
        key: key.to_owned(),
        destination: recorded.map(str::to_owned),
        asked: asked.to_owned(),
    })
}
