//! The ledger: every rule about what may change and when, written once over any [`Store`].
//!
//! Each operation is one short write transaction: read the action (locked), decide with the
//! pure domain rules, write it back conditionally on the revision read, append to the audit
//! trail, commit. Workers, the CLI and the review console all go through these calls.

pub use crate::domain::LookupReport;
use crate::domain::SubmissionRefused;
use crate::domain::{
    ActionKey, ActionRecord, ActorKind, Attempt, AttemptOutcome, AuditEntry, ClaimFacts, Delivery, DestinationCatalog,
    Event, Evidence, LookupRecord, LookupVerdict, ManualCommand, Person, ProposalDecision, ProposalRecord, PurgeRecord,
    PurgeRequest, RawSubmission, Reason, Refusal, RefusedSubmission, State, Submission, SubmitOutcome, Timestamp,
    Transition, manual, record::MAX_EVIDENCE_BODY_BYTES, state, text::truncate,
};
mod error;
mod stats;

use crate::domain::text::escape_untrusted;
use crate::metrics;
use crate::store::{AttemptStart, AttemptStarted, ClaimAudit, ClaimScope, LedgerTx, ListFilter, Store};
pub use error::LedgerError;
pub use stats::{LedgerStats, NotReady, StateCounts};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// How many times a transaction is retried after a serialization failure, deadlock or busy
/// database before the error is reported.
const TRANSIENT_RETRIES: u32 = 5;

/// The body of one write transaction: a future borrowing the transaction; see
/// [`Ledger::transact`].
type TxBody<'t, R> = Pin<Box<dyn Future<Output = Result<R, LedgerError>> + Send + 't>>;

/// Says that what the caller lends a transaction's body (`'a`) outlives its borrow of the
/// transaction (`'t`), which lets the body's future hold both.
type Outlives<'t, 'a> = PhantomData<&'t &'a ()>;

/// The ledger over one store.
#[derive(Debug, Clone)]
pub struct Ledger<S> {
    store: S,
    /// The destinations' declared capabilities, for the decisions that depend on them.
    destinations: Arc<DestinationCatalog>,
}

/// A live claim: the action as claimed, and the worker holding it. The action's ownership
/// version is the fencing token every result write is checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The action as claimed, before any attempt under this claim started.
    pub action: ActionRecord,
    pub worker: String,
    /// The attempt the claim started in its own commit, where the action's destination protects
    /// against a repeat whatever was sent ([`crate::domain::Capabilities::claim_may_start`]):
    /// [`Ledger::start_attempt`] answers it without writing, and a release or hold before the
    /// request went out ends it as not sent.
    pub started: Option<StartedAttempt>,
}

impl Claim {
    pub fn key(&self) -> &ActionKey {
        &self.action.key
    }

    pub fn ownership_version(&self) -> i64 {
        self.action.ownership_version
    }
}

/// An attempt that has been started (recorded before the request is sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartedAttempt {
    pub id: i64,
    pub number: i64,
}

/// What a worker learned from one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The destination confirmed the action.
    Completed { destination_id: String },
    /// Nothing was written and trying again may help: back to pending after `after`.
    RetryLater { after: Duration },
    /// Known not written, and retrying will not help (or attempts are used up).
    Failed { permanent: bool },
    /// The destination may or may not have acted.
    Unknown,
}

/// A worker's report of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub outcome: Outcome,
    pub error: Option<String>,
    pub evidence: Evidence,
}

/// What happened to a result a worker reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// The result was current and the action moved on.
    Applied(ActionRecord),
    /// The claim had passed to a newer ownership version: the result changed nothing but is kept
    /// as a stale attempt, and the action went to `conflict` for review unless it was already in
    /// conflict or final (rule 8).
    Stale(ActionRecord),
}

/// What recovery did with an expired claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    /// Taken over: safe to perform again under a new ownership version.
    Claimed(Claim),
    /// A request may have reached a destination that cannot tell a repeat: taking over is
    /// unsafe, so the action is held for a person.
    Held(ActionRecord),
    /// The lease is still running (by database time): nothing done.
    NotExpired,
    /// The action is no longer the claim that was seen: nothing done.
    Changed,
}

/// A manual command with the person, their reason and the version they saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManualRequest {
    pub key: ActionKey,
    pub person: Person,
    pub reason: Reason,
    /// The revision the person saw; the command is refused if the action changed since.
    pub expect_version: Option<i64>,
    pub command: ManualCommand,
    /// The person confirms that the worker of an expired claim, held because taking it over was
    /// unsafe, can no longer act; a command that would run such an action again needs it (rule 5).
    pub old_worker_stopped: bool,
}

/// The result of a manual command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManualOutcome {
    pub action: ActionRecord,
    /// `None` when the command changed the record without changing its state (a rejected
    /// proposal on an action that had already moved on).
    pub transition: Option<Transition>,
    /// The update action an approval recorded for a completed action (`KEY#update-N`).
    pub update: Option<ActionRecord>,
}

/// What a purge run removed, or with `dry_run` would remove (then nothing changed and nothing
/// was recorded, and the record's id is 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeReport {
    pub record: PurgeRecord,
    pub dry_run: bool,
}

/// The result of a submission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubmitReport {
    pub outcome: SubmitOutcome,
    pub action: ActionRecord,
}

/// Everything the ledger knows about one action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionDetail {
    pub action: ActionRecord,
    /// The purge run that reduced the action to its tombstone, if one did: its payload, last
    /// error, deliveries, attempts and lookups are gone; its audit trail is kept in full.
    pub purge: Option<PurgeRecord>,
    pub deliveries: Vec<Delivery>,
    pub attempts: Vec<Attempt>,
    pub lookups: Vec<LookupRecord>,
    /// Every proposal kept for the action, waiting and decided, oldest first.
    pub proposals: Vec<ProposalRecord>,
    pub audit: Vec<AuditEntry>,
}

impl ActionDetail {
    /// The proposals waiting for a person's decision, oldest first.
    pub fn waiting_proposals(&self) -> impl Iterator<Item = &ProposalRecord> {
        self.proposals.iter().filter(|p| p.decision.is_none())
    }
}

impl ActionDetail {
    /// The late results (stale attempts) that no person has acknowledged yet, oldest first.
    pub fn late_results(&self) -> impl Iterator<Item = &Attempt> {
        self.attempts.iter().filter(|a| a.is_unacknowledged_late_result())
    }

    /// Whether an attempt was started under the action's current claim, as this detail was
    /// read: the fact the ledger establishes again, locked, before a takeover (rule 5).
    pub fn sent_under_current_claim(&self) -> bool {
        self.attempts.iter().any(|a| a.ownership_version == self.action.ownership_version)
    }
}

impl<S: Store> Ledger<S> {
    /// A ledger that knows no destination: every takeover of a claim under which something was
    /// sent is held for a person. Front ends that read a configuration add it with
    /// [`Ledger::with_destinations`].
    pub fn new(store: S) -> Self {
        Self { store, destinations: Arc::default() }
    }

    /// The same ledger, deciding recovery and takeovers (rule 5) from these destinations'
    /// declared capabilities. The worker, the CLI and the console all pass what their
    /// configuration declares, so that each reaches the same decision.
    #[must_use]
    pub fn with_destinations(mut self, destinations: DestinationCatalog) -> Self {
        self.destinations = Arc::new(destinations);
        self
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    /// The destinations this ledger decides with.
    pub fn destinations(&self) -> &DestinationCatalog {
        &self.destinations
    }

    /// Runs `body` as one write transaction, given the transaction and the database time at its
    /// start: commits what it returns, rolls back on any error or refusal, and runs the whole
    /// transaction again after a transient conflict (a serialization failure, a deadlock, a busy
    /// database).
    async fn transact<'a, R, F>(&'a self, body: F) -> Result<R, LedgerError>
    where
        R: Send,
        F: for<'t> FnMut(&'t mut S::Tx, Timestamp, Outlives<'t, 'a>) -> TxBody<'t, R> + Send,
    {
        self.transact_then(true, body).await
    }

    /// [`Ledger::transact`], committing only if `commit`; otherwise what `body` did is rolled back
    /// and only its answer is kept (a dry run).
    async fn transact_then<'a, R, F>(&'a self, commit: bool, mut body: F) -> Result<R, LedgerError>
    where
        R: Send,
        F: for<'t> FnMut(&'t mut S::Tx, Timestamp, Outlives<'t, 'a>) -> TxBody<'t, R> + Send,
    {
        let mut tries = 0;
        loop {
            match self.transact_once(commit, &mut body).await {
                Err(error) if error.is_transient() && tries < TRANSIENT_RETRIES => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(10 * u64::from(tries))).await;
                }
                result => return result,
            }
        }
    }

    async fn transact_once<'a, R, F>(&'a self, commit: bool, body: &mut F) -> Result<R, LedgerError>
    where
        R: Send,
        F: for<'t> FnMut(&'t mut S::Tx, Timestamp, Outlives<'t, 'a>) -> TxBody<'t, R> + Send,
    {
        let mut tx = self.store.begin().await?;
        let result = match tx.now().await {
            Ok(now) => body(&mut tx, now, PhantomData).await,
            Err(error) => Err(error.into()),
        };
        if commit {
            finish(tx, result).await
        } else {
            // Rolled back whatever it answered, and waited for, like a refusal.
            let _ = tx.rollback().await;
            result
        }
    }

    /// Records an intended action, or one more delivery of it. An invalid submission is recorded
    /// as refused (for review) and returned as [`LedgerError::SubmissionRefused`].
    #[tracing::instrument(skip_all, fields(key = %escape_untrusted(raw.key.as_deref().unwrap_or(""))))]
    pub async fn submit(&self, raw: &RawSubmission) -> Result<SubmitReport, LedgerError> {
        let submission = match Submission::validate(raw) {
            Ok(submission) => submission,
            Err(refusal) => {
                let refused = &refusal;
                self.transact(|tx, now, _| {
                    Box::pin(async move { Ok(tx.insert_refusal(&refused_submission(raw, refused, now)).await?) })
                })
                .await?;
                return Err(refusal.into());
            }
        };
        let submission = &submission;
        self.transact(|tx, now, _| {
            Box::pin(async move {
                match submit_in(tx, &[submission], now).await?.pop().expect("one report per submission") {
                    Ok(report) => Ok(Ok(report)),
                    // Refused inside the transaction (an `after` cycle): the refusal is recorded
                    // and committed, and nothing else was written.
                    Err(refusal) => {
                        tx.insert_refusal(&refused_submission(raw, &refusal, now)).await?;
                        Ok(Err(refusal))
                    }
                }
            })
        })
        .await?
        .map_err(LedgerError::from)
    }

    /// Records a delivery that a front end could not make into a submission at all (a webhook
    /// body its intake's mapping cannot use) as refused, for review, exactly as [`Ledger::submit`]
    /// records an invalid one; returns the refusal as [`LedgerError::SubmissionRefused`].
    pub async fn refuse(&self, raw: &RawSubmission, refusal: SubmissionRefused) -> LedgerError {
        let recorded = {
            let refusal = &refusal;
            self.transact(|tx, now, _| {
                Box::pin(async move { Ok(tx.insert_refusal(&refused_submission(raw, refusal, now)).await?) })
            })
            .await
        };
        match recorded {
            Ok(()) => refusal.into(),
            Err(error) => error,
        }
    }

    /// Records many submissions in one transaction (one durable commit), for sources that deliver
    /// events in pages. Each gets its own outcome; an invalid one is recorded as refused and
    /// returned as its own error, without stopping the others.
    #[tracing::instrument(skip_all, fields(submissions = raws.len()))]
    pub async fn submit_many(
        &self,
        raws: &[RawSubmission],
    ) -> Result<Vec<Result<SubmitReport, LedgerError>>, LedgerError> {
        let validated: Vec<Result<Submission, SubmissionRefused>> = raws.iter().map(Submission::validate).collect();
        let keys: Vec<Option<&ActionKey>> = validated.iter().map(|v| v.as_ref().ok().map(|s| &s.key)).collect();
        let mut order: Vec<usize> = (0..raws.len()).collect();
        order.sort_by_key(|&i| keys[i]);
        let (validated, order) = (&validated, &order);
        self.transact(|tx, now, _| {
            Box::pin(async move {
                let valid: Vec<&Submission> = order.iter().filter_map(|&i| validated[i].as_ref().ok()).collect();
                let mut recorded = submit_in(tx, &valid, now).await?.into_iter();
                let mut reports: Vec<Option<Result<SubmitReport, LedgerError>>> = raws.iter().map(|_| None).collect();
                for &index in order {
                    reports[index] = Some(match &validated[index] {
                        Ok(_) => match recorded.next().expect("one report per valid submission") {
                            Ok(report) => Ok(report),
                            Err(refusal) => {
                                tx.insert_refusal(&refused_submission(&raws[index], &refusal, now)).await?;
                                Err(LedgerError::SubmissionRefused(refusal))
                            }
                        },
                        Err(refusal) => {
                            tx.insert_refusal(&refused_submission(&raws[index], refusal, now)).await?;
                            Err(LedgerError::SubmissionRefused(refusal.clone()))
                        }
                    });
                }
                Ok(reports.into_iter().map(|r| r.expect("every submission visited")).collect())
            })
        })
        .await
    }

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
            let claimed = self.store.claim_with_audit(worker, lease, limit, scope, audit, &starts).await?;
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
    #[tracing::instrument(skip_all, fields(key = %claim.key(), ownership_version = claim.ownership_version()))]
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

    /// Records the result of an attempt. Applied only if the claim is still current; otherwise
    /// the result is kept as a stale attempt and the action goes to review (see
    /// [`Recorded::Stale`]).
    pub async fn record_result(
        &self,
        claim: &Claim,
        attempt: StartedAttempt,
        report: &Report,
    ) -> Result<Recorded, LedgerError> {
        let mut recorded = self.record_results_of(&[(claim, attempt, report)]).await?;
        Ok(recorded.pop().expect("one record per result"))
    }

    /// Batched [`Ledger::record_result`]: the results of many attempts in one transaction (a group
    /// commit), each applied only if its own claim is still current. Until it commits nothing is
    /// recorded, and the claims are recovered like any others whose lease expires.
    pub async fn record_results(
        &self,
        results: &[(Claim, StartedAttempt, Report)],
    ) -> Result<Vec<Recorded>, LedgerError> {
        let results: Vec<(&Claim, StartedAttempt, &Report)> = results.iter().map(|(c, a, r)| (c, *a, r)).collect();
        self.record_results_of(&results).await
    }

    #[tracing::instrument(skip_all, fields(results = results.len()))]
    async fn record_results_of(
        &self,
        results: &[(&Claim, StartedAttempt, &Report)],
    ) -> Result<Vec<Recorded>, LedgerError> {
        refuse_repeated_keys(results.iter().map(|(claim, _, _)| claim.key()))?;
        let recorded = retrying(|| self.record_once(results)).await?;
        // A result under an ownership version that moved on is a fenced write: kept, not applied.
        for _ in recorded.iter().filter(|r| matches!(r, Recorded::Stale(_))) {
            metrics::fenced_write();
        }
        Ok(recorded)
    }

    /// One try of [`Ledger::record_results`]: a write transaction that begins by locking the
    /// actions, reading the database's time with them (one round trip for both).
    async fn record_once(&self, results: &[(&Claim, StartedAttempt, &Report)]) -> Result<Vec<Recorded>, LedgerError> {
        let keys: Vec<&ActionKey> = results.iter().map(|(claim, _, _)| claim.key()).collect();
        let mut tx = self.store.begin().await?;
        let recorded = async {
            let (locked, now) = tx.lock_actions_now(&keys).await?;
            let recorded = record_results_in(&mut tx, locked, results, now).await;
            crate::faults::crash_point(crate::faults::DURING_RECORD);
            recorded
        }
        .await;
        finish(tx, recorded).await
    }

    /// Holds an action whose automatic work is no longer permitted, without sending anything.
    pub async fn hold(&self, claim: &Claim, reason: &str) -> Result<ActionRecord, LedgerError> {
        self.give_back(claim, Event::Held, State::Held, reason).await
    }

    /// Gives a claim back before anything was sent (a clean shutdown), for another worker.
    pub async fn release(&self, claim: &Claim, reason: &str) -> Result<ActionRecord, LedgerError> {
        self.give_back(claim, Event::Released, State::Pending, reason).await
    }

    #[tracing::instrument(skip_all, fields(key = %claim.key(), ownership_version = claim.ownership_version(), event = event.as_str()))]
    async fn give_back(
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
                write_action(tx, &mut action).await?;
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
    async fn claim_facts(
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

    /// Settles one expired claim (rule 5): taken over under a new ownership version when nothing
    /// was sent under it or its destination protects against a second effect, otherwise `held`
    /// for a person, since taking over would be unsafe. Decided from the claim as locked, with
    /// the destinations this ledger was given. `seen_ownership_version` is the claim as the
    /// caller found it.
    #[tracing::instrument(skip_all, fields(key = %key, ownership_version = seen_ownership_version))]
    pub async fn recover_expired(
        &self,
        key: &ActionKey,
        seen_ownership_version: i64,
        worker: &str,
        lease: Duration,
    ) -> Result<Recovery, LedgerError> {
        self.transact(|tx, now, _| Box::pin(async move {
            let Some(mut action) = tx.lock_action(key).await? else {
                return Err(LedgerError::NotFound(key.to_string()));
            };
            if action.state != State::InProgress || action.ownership_version != seen_ownership_version {
                return Ok(Recovery::Changed);
            }
            if action.lease_is_live(now) {
                return Ok(Recovery::NotExpired);
            }
            let previous = action.claimed_by.clone().unwrap_or_default();
            let facts = self.claim_facts(tx, &action, now).await?;
            cut_off(tx, &mut action).await?;
            let recovery = if facts.takeover_is_safe() {
                let transition = action.transition(Event::ClaimRecovered, State::InProgress, now)?;
                action.ownership_version += 1;
                action.claimed_by = Some(worker.to_owned());
                action.lease_expires_at = Some(now + lease);
                action.updated_at = now;
                write_action(tx, &mut action).await?;
                let why = if facts.sent_under_claim {
                    "the destination protects against a second effect"
                } else {
                    "nothing was sent under it"
                };
                let reason = format!("lease of {previous} expired; taken over because {why}");
                tx.append_audit(&audit_entry(&action, transition, worker, ActorKind::Worker, Some(reason), now))
                    .await?;
                Recovery::Claimed(Claim { action, worker: worker.to_owned(), started: None })
            } else {
                let transition = action.transition(Event::LeaseExpired, State::Held, now)?;
                let reason = format!(
                    "lease of {previous} expired after a request may have been sent, and the destination cannot tell \
                         a repeat: taking over is unsafe; check the destination, then resolve"
                );
                action.last_error = Some(reason.clone());
                action.old_worker_may_act = true;
                write_action(tx, &mut action).await?;
                tx.append_audit(&audit_entry(&action, transition, worker, ActorKind::Worker, Some(reason), now))
                    .await?;
                Recovery::Held(action)
            };
            Ok(recovery)
        }))
        .await
        .inspect(|recovery| {
            if matches!(recovery, Recovery::Claimed(_)) {
                metrics::claimed(1);
            }
        })
    }

    /// Settles an `unknown` action from what a lookup found: completed when the record is there
    /// and matches, pending when nothing was written, conflict when it differs or is duplicated.
    /// Returns `None` (and changes nothing) if the action changed since `seen_revision`.
    #[tracing::instrument(skip_all, fields(key = %key, verdict = report.verdict.as_str()))]
    pub async fn settle_unknown(
        &self,
        key: &ActionKey,
        seen_revision: i64,
        actor: &str,
        actor_kind: ActorKind,
        report: &LookupReport,
    ) -> Result<Option<ActionRecord>, LedgerError> {
        self.transact(|tx, now, _| {
            Box::pin(async move {
                let mut action = tx.lock_action(key).await?.ok_or_else(|| LedgerError::NotFound(key.to_string()))?;
                if action.state != State::Unknown || action.revision != seen_revision {
                    return Ok(None);
                }
                let (event, target) = match report.verdict {
                    LookupVerdict::Found => (Event::LookupFound, State::Completed),
                    LookupVerdict::NotFound => (Event::LookupNotFound, State::Pending),
                    LookupVerdict::Mismatch | LookupVerdict::Duplicates => (Event::LookupMismatch, State::Conflict),
                };
                let transition = action.transition(event, target, now)?;
                if report.verdict == LookupVerdict::Found {
                    action.destination_id.clone_from(&report.destination_id);
                }
                if report.verdict == LookupVerdict::NotFound {
                    action.attempts_in_round = 0;
                    // Known not written: a failure from here on may again be called `failed`.
                    action.may_have_written = false;
                }
                write_action(tx, &mut action).await?;
                tx.insert_lookup(&lookup_record(&action.key, actor, report, now)).await?;
                tx.append_audit(&audit_entry(&action, transition, actor, actor_kind, report.detail.clone(), now))
                    .await?;
                Ok(Some(action))
            })
        })
        .await
        .inspect(|settled| {
            if settled.is_some() {
                metrics::settled_by_lookup();
            }
        })
    }

    /// Keeps a person's lookup of an action that is not `unknown`: what was found goes into the
    /// action's lookups as evidence and into its audit trail (`looked_up`, in the person's name),
    /// and the state does not change, since only an uncertain outcome is settled by a lookup.
    /// Returns `None` (and keeps nothing) if the action changed since `seen_revision`, or became
    /// `unknown` meanwhile (then it is for [`Ledger::settle_unknown`]).
    pub async fn keep_lookup(
        &self,
        key: &ActionKey,
        seen_revision: i64,
        person: &Person,
        report: &LookupReport,
    ) -> Result<Option<ActionRecord>, LedgerError> {
        self.transact(|tx, now, _| {
            Box::pin(async move {
                let action = tx.lock_action(key).await?.ok_or_else(|| LedgerError::NotFound(key.to_string()))?;
                if action.state == State::Unknown || action.revision != seen_revision {
                    return Ok(None);
                }
                tx.insert_lookup(&lookup_record(&action.key, person.as_str(), report, now)).await?;
                let unchanged = Transition { event: Event::LookedUp, from: action.state, to: action.state };
                let entry =
                    audit_entry(&action, unchanged, person.as_str(), ActorKind::Person, report.detail.clone(), now);
                tx.append_audit(&entry).await?;
                Ok(Some(action))
            })
        })
        .await
    }

    /// Runs a named person's command on one action (rule 6). A takeover is decided like a
    /// worker's recovery (rule 5), from the claim as locked and this ledger's destinations.
    #[tracing::instrument(skip_all, fields(key = %request.key, person = %request.person.as_str(), command = request.command.verb()))]
    pub async fn manual(&self, request: &ManualRequest) -> Result<ManualOutcome, LedgerError> {
        self.manual_then(true, request).await
    }

    /// [`Ledger::manual`] decided in full and rolled back: what the command would do now (a
    /// dry run), or why it would be refused.
    pub async fn manual_dry_run(&self, request: &ManualRequest) -> Result<ManualOutcome, LedgerError> {
        self.manual_then(false, request).await
    }

    /// Bulk triage: [`Ledger::manual`] on each action in turn, each in its own transaction and
    /// checked against the version its request names, so that one refusal stops nothing else
    /// and each is audited in the person's name. With `dry_run`, each is decided and rolled back.
    /// The answers come in the order of the requests.
    pub async fn manual_each(
        &self,
        requests: &[ManualRequest],
        dry_run: bool,
    ) -> Vec<Result<ManualOutcome, LedgerError>> {
        let mut answers = Vec::with_capacity(requests.len());
        for request in requests {
            answers.push(self.manual_then(!dry_run, request).await);
        }
        answers
    }

    async fn manual_then(&self, commit: bool, request: &ManualRequest) -> Result<ManualOutcome, LedgerError> {
        let ManualRequest { key, person, reason, expect_version, command, old_worker_stopped } = request;
        self.transact_then(commit, |tx, now, _| {
            Box::pin(async move {
                let mut action = tx.lock_action(key).await?.ok_or_else(|| LedgerError::NotFound(key.to_string()))?;
                if let Some(purge) = purge_of_settled(tx, &action).await? {
                    return Err(Refusal::Purged {
                        verb: command.verb(),
                        key: action.key.clone(),
                        state: action.state,
                        run: purge.id,
                        at: purge.at,
                    }
                    .into());
                }
                if let Some(expected) = *expect_version
                    && action.revision != expected
                {
                    return Err(Refusal::changed_since_read(command.verb(), &action, expected).into());
                }
                let facts = if matches!(command, ManualCommand::Takeover) && action.state == State::InProgress {
                    self.claim_facts(tx, &action, now).await?
                } else {
                    ClaimFacts::WORST_CASE
                };
                let choice = choose_proposals(tx, &action, command).await?;
                if let Some(approved) = &choice.approved {
                    action.proposal = Some(approved.proposal());
                }
                let proposals_remain = !choice.remaining.is_empty();
                let plan = manual::plan(&action, command, now, facts, *old_worker_stopped, proposals_remain)?;
                let confirmed_stopped = manual::needs_old_worker_stopped(&action, command);
                if matches!(command, ManualCommand::Takeover) {
                    cut_off(tx, &mut action).await?;
                }
                let before = (action.payload_revision, action.payload.fingerprint().short().to_owned());
                let transition = manual::apply(&mut action, command, plan, now)?;
                choice.keep_latest_waiting(&mut action);
                decide_proposals(tx, &choice, person.as_str(), now).await?;
                let acknowledged = if matches!(command, ManualCommand::Acknowledge) {
                    tx.acknowledge_late_results(&action.key, person.as_str(), now).await?
                } else {
                    0
                };
                write_action(tx, &mut action).await?;
                let update = if plan.event == Event::Approved && plan.from == State::Completed {
                    Some(record_update_action(tx, &action, person.as_str(), reason.as_str(), now).await?)
                } else {
                    None
                };
                let settled = proposals_settled(&choice);
                let detail = match command {
                    // The revision history of the payload, kept in the audit trail.
                    ManualCommand::Approve { .. } => {
                        let then = match (&update, &action.idempotency_key) {
                            (Some(update), _) => format!("; performed by update action {}", update.key),
                            (None, Some(sending)) => format!("; requests now carry idempotency key {sending}"),
                            (None, None) => String::new(),
                        };
                        format!(
                            "{}; payload revision {} ({}) replaced by revision {} ({}){then}",
                            reason.as_str(),
                            before.0,
                            before.1,
                            action.payload_revision,
                            action.payload.fingerprint().short()
                        )
                    }
                    ManualCommand::ResolveCompleted { destination_id } => {
                        format!("{} (destination id {destination_id})", reason.as_str())
                    }
                    ManualCommand::Takeover if plan.to == State::Held => {
                        format!(
                            "{}; held: a request may have been sent and the destination cannot tell a repeat",
                            reason.as_str()
                        )
                    }
                    ManualCommand::Acknowledge => {
                        format!("{} ({acknowledged} late result(s) acknowledged)", reason.as_str())
                    }
                    _ if confirmed_stopped => {
                        format!("{}; the person confirmed that the old worker can no longer act", reason.as_str())
                    }
                    _ => reason.as_str().to_owned(),
                };
                let detail = format!("{detail}{settled}");
                let recorded = transition.unwrap_or(Transition { event: plan.event, from: plan.from, to: plan.to });
                let entry = audit_entry(&action, recorded, person.as_str(), ActorKind::Person, Some(detail), now);
                tx.append_audit(&entry).await?;
                Ok(ManualOutcome { action, transition, update })
            })
        })
        .await
    }
    /// Retention (rule 7): reduces the settled actions of `request` to their tombstone, in one
    /// transaction, and records the run with its counts; with `dry_run`, the same transaction
    /// answers the same counts and is rolled back.
    ///
    /// One transaction, not batches: the run's record commits with exactly what it removed, or
    /// nothing does, and the tombstones never hold a half-purged action. It locks only settled
    /// rows, which nothing else changes (on PostgreSQL workers and reviewers go on); on SQLite it
    /// holds the one write lock while it runs, so retention is run often (daily), each run
    /// removing one day's settlements.
    #[tracing::instrument(skip_all, fields(dry_run = request.dry_run))]
    pub async fn purge(&self, request: &PurgeRequest) -> Result<PurgeReport, LedgerError> {
        self.transact_then(!request.dry_run, |tx, now, _| {
            Box::pin(async move {
                tx.check_may_purge().await?;
                let settled_before = request.settled_before(now);
                let keys = tx.purge_candidates(request.states(), settled_before).await?;
                let counts = tx.tombstone(&keys).await?;
                let mut record = PurgeRecord {
                    id: 0,
                    at: now,
                    owner: request.owner.as_str().to_owned(),
                    reason: request.reason.as_str().to_owned(),
                    older_than: request.older_than(),
                    settled_before,
                    states: request.states().to_vec(),
                    counts,
                };
                if !request.dry_run {
                    record.id = tx.record_purge(&record, &keys).await?;
                }
                Ok(PurgeReport { record, dry_run: request.dry_run })
            })
        })
        .await
    }

    /// One action with its deliveries, attempts and audit trail, and the purge run that reduced
    /// it to its tombstone, if one did.
    pub async fn detail(&self, key: &ActionKey) -> Result<ActionDetail, LedgerError> {
        let action = self.store.find(key).await?.ok_or_else(|| LedgerError::NotFound(key.to_string()))?;
        Ok(ActionDetail {
            purge: self.store.purge_of(key).await?,
            action,
            deliveries: self.store.deliveries(key).await?,
            attempts: self.store.attempts(key).await?,
            lookups: self.store.lookups(key).await?,
            proposals: self.store.proposals(key).await?,
            audit: self.store.audit_trail(key).await?,
        })
    }

    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<ActionRecord>, LedgerError> {
        Ok(self.store.list(filter).await?)
    }

    pub async fn list_refused(
        &self,
        before_id: Option<i64>,
        limit: i64,
    ) -> Result<Vec<RefusedSubmission>, LedgerError> {
        Ok(self.store.list_refused(before_id, limit).await?)
    }

    /// A count for every state, zero included, in the order of [`State::ALL`].
    pub async fn counts(&self) -> Result<Vec<(State, i64)>, LedgerError> {
        let found = self.store.count_by_state().await?;
        Ok(State::ALL.into_iter().map(|s| (s, found.iter().find(|(f, _)| *f == s).map_or(0, |(_, n)| *n))).collect())
    }

    /// The ledger's figures now, read in one statement: what `stats`, the worker's metrics and
    /// any other front end report, computed here once.
    #[tracing::instrument(skip_all)]
    pub async fn stats(&self) -> Result<LedgerStats, LedgerError> {
        let now = self.store.now().await?;
        let figures = self.store.state_figures(now).await?;
        Ok(LedgerStats::from_figures(now, &figures))
    }

    /// Whether the ledger can serve a worker now: its database answers and its schema is the one
    /// this build expects (every migration applied, none changed, none newer).
    #[tracing::instrument(skip_all)]
    pub async fn readiness(&self) -> Result<(), NotReady> {
        let status = self.store.schema_status().await.map_err(NotReady::Unreachable)?;
        if !status.newer.is_empty() {
            Err(NotReady::SchemaNewer)
        } else if status.is_current() {
            Ok(())
        } else {
            Err(NotReady::SchemaBehind)
        }
    }

    /// [`Ledger::counts`] of the actions that match `filter`'s terms: pane counts that follow a
    /// filter.
    pub async fn counts_matching(&self, filter: &ListFilter) -> Result<Vec<(State, i64)>, LedgerError> {
        let found = self.store.count_matching(filter).await?;
        Ok(State::ALL.into_iter().map(|s| (s, found.iter().find(|(f, _)| *f == s).map_or(0, |(_, n)| *n))).collect())
    }
}

/// Records the update action for an approved new payload of the completed `original` (already
/// written with that payload as its approved one), in the approving person's name. Refused when
/// its key is taken.
async fn record_update_action<T: LedgerTx>(
    tx: &mut T,
    original: &ActionRecord,
    person: &str,
    reason: &str,
    now: Timestamp,
) -> Result<ActionRecord, LedgerError> {
    let update = manual::update_action(original, now)?;
    let Some(created) = tx.insert_actions_if_absent(std::slice::from_ref(&update)).await?.pop() else {
        return Err(Refusal::UpdateKeyTaken { key: original.key.clone(), update_key: update.key }.into());
    };
    let creation = Transition { event: Event::Submitted, from: State::Pending, to: State::Pending };
    let detail = format!(
        "update of {} (destination id {}) to payload revision {} ({}), approved: {reason}",
        original.key,
        original.destination_id.as_deref().unwrap_or("-"),
        original.payload_revision,
        original.payload.fingerprint().short()
    );
    tx.append_audit(&audit_entry(&created, creation, person, ActorKind::Person, Some(detail), now)).await?;
    Ok(created)
}

/// Records validated submissions inside a transaction, in the order given; see
/// [`Ledger::submit`]. New keys are inserted in one statement, and every delivery is written in
/// one more, in this order. A new action whose `after` chain leads back to it is refused here,
/// where the chain is read: its refusal is returned in its place and nothing of it is written.
async fn submit_in<T: LedgerTx>(
    tx: &mut T,
    submissions: &[&Submission],
    now: Timestamp,
) -> Result<Vec<Result<SubmitReport, SubmissionRefused>>, LedgerError> {
    let cycles = after_cycles(tx, submissions).await?;
    let mut seen = HashSet::new();
    let fresh: Vec<ActionRecord> = submissions
        .iter()
        .filter(|s| !cycles.contains_key(&s.key) && seen.insert(&s.key))
        .map(|s| ActionRecord::new_pending(s, now))
        .collect();
    let mut created: HashMap<ActionKey, ActionRecord> =
        tx.insert_actions_if_absent(&fresh).await?.into_iter().map(|a| (a.key.clone(), a)).collect();
    let mut reports = Vec::with_capacity(submissions.len());
    let mut deliveries = Vec::with_capacity(submissions.len());
    for &submission in submissions {
        if let Some(refusal) = cycles.get(&submission.key) {
            reports.push(Err(refusal.clone()));
            continue;
        }
        let actor = submission.source.clone().unwrap_or_else(|| "submit".to_owned());
        let report = if let Some(action) = created.remove(&submission.key) {
            let creation = Transition { event: Event::Submitted, from: State::Pending, to: State::Pending };
            tx.append_audit(&audit_entry(&action, creation, &actor, ActorKind::Source, None, now)).await?;
            SubmitReport { outcome: SubmitOutcome::Created, action }
        } else {
            submit_existing(tx, submission, &actor, now).await?
        };
        deliveries.push(Delivery {
            id: 0,
            key: submission.key.clone(),
            event_id: submission.event_id.clone(),
            source: submission.source.clone(),
            source_version: submission.source_version,
            fingerprint: submission.payload.fingerprint().as_str().to_owned(),
            outcome: report.outcome,
            received_at: now,
        });
        reports.push(Ok(report));
    }
    tx.insert_deliveries(&deliveries).await?;
    Ok(reports)
}

/// The submissions that would create an action waiting, through its `after` chain, for itself:
/// by key, each with its refusal. Only a new key can close a cycle (a recorded action's `after`
/// never changes), so only submissions of keys not recorded yet are checked, in order, against
/// the links recorded and those of the batch's new actions accepted before them.
async fn after_cycles<T: LedgerTx>(
    tx: &mut T,
    submissions: &[&Submission],
) -> Result<HashMap<ActionKey, SubmissionRefused>, LedgerError> {
    let mut refused = HashMap::new();
    let waiting: Vec<&ActionKey> = submissions.iter().filter(|s| s.after.is_some()).map(|s| &s.key).collect();
    if waiting.is_empty() {
        return Ok(refused);
    }
    let recorded: HashSet<ActionKey> = tx.lock_actions(&waiting).await?.into_iter().map(|a| a.key).collect();
    // Links known so far: read from the database (from each start only once) and the batch's own.
    let mut links: HashMap<ActionKey, ActionKey> = HashMap::new();
    let mut read_from: HashSet<ActionKey> = HashSet::new();
    let mut batch: HashSet<&ActionKey> = HashSet::new();
    for submission in submissions {
        let Some(after) = &submission.after else { continue };
        let key = &submission.key;
        if recorded.contains(key) || refused.contains_key(key) || !batch.insert(key) {
            continue;
        }
        // Walk the chain from `after`; the path walked names the cycle if it comes back to `key`.
        let mut path = vec![key.clone(), after.clone()];
        let mut visited: HashSet<ActionKey> = HashSet::new();
        let mut current = after.clone();
        while &current != key && visited.insert(current.clone()) {
            if !links.contains_key(&current) && read_from.insert(current.clone()) {
                links.extend(tx.after_links(&current).await?);
            }
            let Some(next) = links.get(&current) else { break };
            current = next.clone();
            path.push(current.clone());
        }
        if &current == key {
            refused.insert(key.clone(), SubmissionRefused::after_cycle(&path));
        } else {
            links.insert(key.clone(), after.clone());
        }
    }
    Ok(refused)
}

/// Which waiting proposals a manual command settles (rule 9): approve names one or takes the only
/// one, reject names one or takes all, cancel takes all. Read only where one waits.
async fn choose_proposals<T: LedgerTx>(
    tx: &mut T,
    action: &ActionRecord,
    command: &ManualCommand,
) -> Result<manual::ProposalChoice, LedgerError> {
    let settles =
        matches!(command, ManualCommand::Approve { .. } | ManualCommand::Reject { .. } | ManualCommand::Cancel);
    let waiting =
        if settles && action.proposal.is_some() { tx.waiting_proposals(&action.key).await? } else { Vec::new() };
    Ok(manual::choose_proposals(action, command, waiting)?)
}

/// Records `person`'s decisions on the proposals a command settled.
async fn decide_proposals<T: LedgerTx>(
    tx: &mut T,
    choice: &manual::ProposalChoice,
    person: &str,
    now: Timestamp,
) -> Result<(), LedgerError> {
    if let Some(approved) = &choice.approved {
        tx.decide_proposals(&[approved.id], ProposalDecision::Approved, person, now).await?;
    }
    let rejected: Vec<i64> = choice.rejected.iter().map(|p| p.id).collect();
    tx.decide_proposals(&rejected, ProposalDecision::Rejected, person, now).await?;
    Ok(())
}

/// What a manual command did to the proposals waiting, for its audit entry: each proposal it
/// rejected, and how many still wait.
fn proposals_settled(choice: &manual::ProposalChoice) -> String {
    use std::fmt::Write as _;
    let mut text = String::new();
    if !choice.rejected.is_empty() {
        let rejected: Vec<&str> = choice.rejected.iter().map(|p| p.payload.fingerprint().short()).collect();
        let _ = write!(text, "; proposal(s) rejected: {}", rejected.join(", "));
    }
    if !choice.remaining.is_empty() {
        let _ = write!(text, "; {} proposal(s) still waiting", choice.remaining.len());
    }
    text
}

/// One more delivery of a key that exists: the fingerprint is compared on this path too, never
/// only on insert.
async fn submit_existing<T: LedgerTx>(
    tx: &mut T,
    submission: &Submission,
    actor: &str,
    now: Timestamp,
) -> Result<SubmitReport, LedgerError> {
    let mut action =
        tx.lock_action(&submission.key).await?.ok_or_else(|| LedgerError::NotFound(submission.key.to_string()))?;
    // By value: a payload recorded before canonical text followed RFC 8785 is still recognised.
    let same_as_approved = submission.payload.is_same_as(&action.payload);
    // Every proposal waiting is kept (rule 9): a new payload is compared with each of them.
    let waiting = if same_as_approved { Vec::new() } else { tx.waiting_proposals(&action.key).await? };
    let recorded_version = waiting
        .iter()
        .filter_map(|p| p.source_version)
        .chain(action.source_version)
        .chain(action.proposal.as_ref().and_then(|p| p.source_version))
        .max();
    let fingerprint = submission.payload.fingerprint();
    let outcome = match (submission.source_version, recorded_version) {
        (Some(version), Some(recorded)) if version < recorded => SubmitOutcome::Stale,
        _ if same_as_approved => SubmitOutcome::Duplicate,
        _ => SubmitOutcome::Conflict,
    };
    let already_proposed = waiting.iter().any(|p| submission.payload.is_same_as(&p.payload));
    if outcome == SubmitOutcome::Conflict
        && !already_proposed
        && let Some(purge) = purge_of_settled(tx, &action).await?
    {
        // The tombstone never changes (rule 7): the changed payload is not kept for approval,
        // since nothing could ever run it under this key, and the answer is still `conflict`.
        let reason = format!(
            "proposed payload {} differs from approved {}; the action was purged by purge run {}: the change is not \
             kept and nothing runs; submit it under a new key",
            fingerprint.short(),
            action.payload.fingerprint().short(),
            purge.id
        );
        let transition = Transition { event: Event::PayloadChanged, from: action.state, to: action.state };
        tx.append_audit(&audit_entry(&action, transition, actor, ActorKind::Source, Some(reason), now)).await?;
        return Ok(SubmitReport { outcome, action });
    }
    if outcome == SubmitOutcome::Conflict && !already_proposed {
        let kept = ProposalRecord {
            id: 0,
            key: action.key.clone(),
            payload: submission.payload.clone(),
            source: submission.source.clone(),
            event_id: submission.event_id.clone(),
            source_version: submission.source_version,
            received_at: now,
            decision: None,
            decided_by: None,
            decided_at: None,
        };
        tx.keep_proposal(&kept).await?;
        // The latest proposal is the action's: the claim and the state rules read it.
        action.proposal = Some(kept.proposal());
        let from = action.state;
        let transition = if matches!(from, State::Pending | State::Failed | State::Held) {
            action.transition(Event::PayloadChanged, State::Conflict, now)?
        } else {
            // In progress, unknown, in conflict or final: the proposal waits beside the approved payload
            // without disturbing the claim or the outcome being settled.
            action.updated_at = now;
            Transition { event: Event::PayloadChanged, from, to: from }
        };
        write_action(tx, &mut action).await?;
        let reason = format!(
            "proposed payload {} differs from approved {}; {} proposal(s) waiting",
            fingerprint.short(),
            action.payload.fingerprint().short(),
            waiting.len() + 1
        );
        tx.append_audit(&audit_entry(&action, transition, actor, ActorKind::Source, Some(reason), now)).await?;
    }
    Ok(SubmitReport { outcome, action })
}

fn refused_submission(raw: &RawSubmission, refusal: &SubmissionRefused, now: Timestamp) -> RefusedSubmission {
    let label =
        |value: &Option<String>| value.as_deref().map(|v| crate::domain::text::escape_untrusted(&truncate(v, 255)));
    RefusedSubmission {
        id: 0,
        received_at: now,
        key_excerpt: raw.key_excerpt(refusal),
        problem: refusal.problem.to_owned(),
        message: refusal.message.clone(),
        event_id: label(&raw.event_id),
        source: label(&raw.source),
        destination: label(&raw.destination),
    }
}

/// Records the results of attempts inside a transaction; see [`Ledger::record_results`]. The
/// claims' keys are distinct. Reads every action in one locked statement, then writes the
/// attempts and the actions a statement each.
async fn record_results_in<T: LedgerTx>(
    tx: &mut T,
    locked: Vec<ActionRecord>,
    results: &[(&Claim, StartedAttempt, &Report)],
    now: Timestamp,
) -> Result<Vec<Recorded>, LedgerError> {
    let mut locked: HashMap<ActionKey, ActionRecord> = locked.into_iter().map(|a| (a.key.clone(), a)).collect();
    let mut finished = Vec::with_capacity(results.len());
    let mut decided = Vec::with_capacity(results.len());
    for &(claim, attempt, report) in results {
        let mut action = locked.remove(claim.key()).ok_or_else(|| LedgerError::NotFound(claim.key().to_string()))?;
        // Before a failure is called `failed` (known not written, rule 2): an attempt left
        // unfinished beside this one (started, never reported) may have written. Asked only on
        // that path, so results that cannot end `failed` pay nothing.
        if matches!(report.outcome, Outcome::Failed { .. })
            && !action.may_have_written
            && is_current(&action, claim)
            && tx.cut_off_attempts(&action.key, attempt.id).await? > 0
        {
            action.may_have_written = true;
        }
        // A late result for a purged action changes nothing, not even its note: the tombstone
        // never changes (rule 7). Asked only of settled actions the claim no longer holds.
        let purge = if is_current(&action, claim) { None } else { purge_of_settled(tx, &action).await? };
        let tombstone = purge.map(|purge| (action.clone(), purge));
        let (attempt, mut decision) = decide_result(action, claim, attempt, report, now)?;
        if let Some((action, purge)) = tombstone {
            let note = format!(
                "{}; the action was purged by purge run {}: nothing changes",
                decision.reason.as_deref().unwrap_or("late result"),
                purge.id
            );
            decision = ResultDecision {
                transition: Transition { event: Event::LateResult, from: action.state, to: action.state },
                action,
                reason: Some(note),
                stale: true,
                tombstone: true,
            };
        }
        finished.push(attempt);
        decided.push(decision);
    }
    tx.finish_attempts(&finished).await?;
    // The entries name each action's revision as written (one step on, unless a tombstone that
    // is not written); they are appended before the write, so that a store may send them with
    // it, and a write refused below rolls them back with everything else.
    for (decision, &(claim, _, _)) in decided.iter().zip(results) {
        let mut entry = audit_entry(
            &decision.action,
            decision.transition,
            &claim.worker,
            ActorKind::Worker,
            decision.reason.clone(),
            now,
        );
        if !decision.tombstone {
            entry.revision += 1;
        }
        tx.append_audit(&entry).await?;
    }
    let mut writes: Vec<ActionRecord> = decided.iter().filter(|d| !d.tombstone).map(|d| d.action.clone()).collect();
    write_actions(tx, &mut writes).await?;
    let mut written = writes.into_iter();
    let recorded = decided
        .into_iter()
        .map(|d| {
            let action = if d.tombstone { d.action } else { written.next().expect("one write per change") };
            if d.stale { Recorded::Stale(action) } else { Recorded::Applied(action) }
        })
        .collect();
    Ok(recorded)
}

/// What one result does to its action, decided before anything is written.
struct ResultDecision {
    action: ActionRecord,
    transition: Transition,
    reason: Option<String>,
    /// The claim had passed to a newer ownership version.
    stale: bool,
    /// The action is a purged tombstone: nothing is written to it.
    tombstone: bool,
}

/// Decides what one result does, from the action as locked: the attempt as it ended, and the
/// action as it is to be written.
fn decide_result(
    mut action: ActionRecord,
    claim: &Claim,
    attempt: StartedAttempt,
    report: &Report,
    now: Timestamp,
) -> Result<(Attempt, ResultDecision), LedgerError> {
    let (attempt_outcome, event, target) = match &report.outcome {
        Outcome::Completed { .. } => (AttemptOutcome::Succeeded, Event::Completed, State::Completed),
        Outcome::RetryLater { .. } => (AttemptOutcome::FailedBeforeWrite, Event::RetryScheduled, State::Pending),
        Outcome::Failed { permanent: true } => (AttemptOutcome::FailedPermanent, Event::Failed, State::Failed),
        Outcome::Failed { permanent: false } => (AttemptOutcome::FailedBeforeWrite, Event::Failed, State::Failed),
        Outcome::Unknown => (AttemptOutcome::Unknown, Event::OutcomeUnknown, State::Unknown),
    };
    let current = is_current(&action, claim);
    let mut evidence = report.evidence.clone();
    evidence.body = evidence.body.map(|b| truncate(&b, MAX_EVIDENCE_BODY_BYTES));
    let finished = Attempt {
        id: attempt.id,
        key: action.key.clone(),
        number: attempt.number,
        worker: claim.worker.clone(),
        ownership_version: claim.ownership_version(),
        started_at: now,
        ended_at: Some(now),
        outcome: Some(attempt_outcome),
        error: report.error.clone(),
        evidence,
        idempotency_key: Some(claim.action.sending_key().to_owned()),
        stale: !current,
        acknowledged: None,
    };

    if !current {
        let late_id = match &report.outcome {
            Outcome::Completed { destination_id } => Some(destination_id.as_str()),
            _ => report.evidence.destination_id.as_deref(),
        };
        return Ok((finished, decide_late_result(action, claim, attempt_outcome, late_id, now)?));
    }

    // `failed` means known not written (rule 2): where an earlier request under this action may
    // have written, a failure of this one proves nothing about that one, so the action waits in
    // `unknown` for a lookup or a person instead.
    let unproven = target == State::Failed && action.may_have_written;
    let (event, target) = if unproven { (Event::OutcomeUnknown, State::Unknown) } else { (event, target) };
    let reason = if unproven {
        Some(format!(
            "{}; an earlier request under this action may have written at the destination, so it is unknown, not failed",
            report.error.as_deref().unwrap_or("failed")
        ))
    } else {
        report.error.clone()
    };
    let transition = action.transition(event, target, now)?;
    action.may_have_written |= attempt_outcome.may_have_written() || report.evidence.destination_id.is_some();
    match &report.outcome {
        Outcome::Completed { destination_id } => {
            action.destination_id = Some(destination_id.clone());
        }
        Outcome::RetryLater { after } => action.not_before = Some(now + *after),
        Outcome::Failed { .. } | Outcome::Unknown => {}
    }
    // A completed action keeps no error (see `ActionRecord::transition`); a report's note on a
    // completion still goes to the audit trail below.
    if action.state != State::Completed {
        action.last_error.clone_from(&reason);
    }
    let decision = ResultDecision { action, transition, reason, stale: false, tombstone: false };
    Ok((finished, decision))
}

/// A result from an obsolete owner never changes the action's record (rule 8): no outcome,
/// payload, destination id or error note. It is kept as a stale attempt with its evidence, and
/// always reaches review: it is listed on the action as a late result until a person
/// acknowledges it, and when it contradicts what the ledger holds ([`late_result_contradicts`])
/// the action also goes to `conflict`, where the state allows it (not from `conflict` or
/// `cancelled`).
fn decide_late_result(
    mut action: ActionRecord,
    claim: &Claim,
    outcome: AttemptOutcome,
    late_destination_id: Option<&str>,
    now: Timestamp,
) -> Result<ResultDecision, LedgerError> {
    let note = format!(
        "late result ({}) from {} under ownership version {}; the action is at {} ({})",
        outcome.as_str(),
        claim.worker,
        claim.ownership_version(),
        action.ownership_version,
        action.state
    );
    let from = action.state;
    let (transition, note) = match late_result_contradicts(&action, outcome, late_destination_id) {
        Some(why) if state::check(Event::LateResult, from, State::Conflict).is_ok() => {
            // Only the state moves (a claim in progress ends with it); nothing the late result
            // reported is written into the record.
            (action.transition(Event::LateResult, State::Conflict, now)?, format!("{note}; {why}: to conflict"))
        }
        Some(why) => (Transition { event: Event::LateResult, from, to: from }, format!("{note}; {why}")),
        None => (Transition { event: Event::LateResult, from, to: from }, format!("{note}; it contradicts nothing")),
    };
    // A late result reporting a possible write is evidence like any other (rule 2).
    action.may_have_written |= outcome.may_have_written() || late_destination_id.is_some();
    // The notice: counted on the action until a person acknowledges it. The revision moves with
    // it, so that a person who read the action before it arrived is asked to read it again.
    action.late_results += 1;
    Ok(ResultDecision { action, transition, reason: Some(note), stale: true, tombstone: false })
}

/// The purge run that reduced `action` to its tombstone, if one did. Only settled actions are
/// ever purged, so only they are asked about: no cost on the paths of live actions.
async fn purge_of_settled<T: LedgerTx>(tx: &mut T, action: &ActionRecord) -> Result<Option<PurgeRecord>, LedgerError> {
    if !action.state.is_terminal() {
        return Ok(None);
    }
    Ok(tx.purge_of(&action.key).await?)
}

/// Rule 8: whether a late result contradicts what the ledger holds, and why. It does when the
/// action completed with another destination record than the one the late result names (a second
/// effect), and when it reports a possible write (a success, an unknown outcome, or a
/// destination record) while the action is not completed: waiting to run, running again under a
/// new owner, or waiting for a person who does not know that the old worker may have written. A
/// late result that reports no write (a failure before writing, a permanent refusal), or that
/// names the completed action's own record or none, contradicts nothing.
fn late_result_contradicts(
    action: &ActionRecord,
    outcome: AttemptOutcome,
    late_destination_id: Option<&str>,
) -> Option<String> {
    let possible_write =
        matches!(outcome, AttemptOutcome::Succeeded | AttemptOutcome::Unknown) || late_destination_id.is_some();
    match action.state {
        State::Completed => {
            late_destination_id.filter(|late| action.destination_id.as_deref() != Some(*late)).map(|late| {
                format!("it names destination record {late}, not {}", action.destination_id.as_deref().unwrap_or("?"))
            })
        }
        state if possible_write => Some(format!("it reports a possible write while the action is {state}")),
        _ => None,
    }
}

/// Records the unfinished attempts of `action` as cut off, before a takeover or hold moves its
/// expired claim on: their requests may have been sent, so the action may have
/// written (rule 2), and a crash is not an error before writing, so they do not count towards
/// the round's `max_attempts` (rule 3).
async fn cut_off<T: LedgerTx>(tx: &mut T, action: &mut ActionRecord) -> Result<(), LedgerError> {
    if action.state != State::InProgress {
        return Ok(());
    }
    // Attempt ids start at 1: none is spared.
    let cut = tx.cut_off_attempts(&action.key, 0).await?;
    if cut > 0 {
        action.may_have_written = true;
        action.attempts_in_round = (action.attempts_in_round - cut).max(0);
    }
    Ok(())
}

/// The end of an attempt a claim started that was never sent: the worker gave the claim back
/// (`reason`) before its request went out.
fn not_sent(claim: &Claim, started: StartedAttempt, outcome: AttemptOutcome, reason: &str, now: Timestamp) -> Attempt {
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

/// What a lookup found, as kept with the action: its evidence body cut to the kept size.
fn lookup_record(key: &ActionKey, actor: &str, report: &LookupReport, now: Timestamp) -> LookupRecord {
    let mut evidence = report.evidence.clone();
    evidence.body = evidence.body.map(|b| truncate(&b, MAX_EVIDENCE_BODY_BYTES));
    LookupRecord {
        id: 0,
        key: key.clone(),
        at: now,
        actor: actor.to_owned(),
        verdict: report.verdict,
        records: report.records,
        destination_id: report.destination_id.clone(),
        evidence,
        detail: report.detail.clone(),
    }
}

/// Runs `once` (a write transaction of its own) again after a transient conflict (a
/// serialization failure, a deadlock, a busy database), as [`Ledger::transact`] does.
async fn retrying<R, F, Fut>(mut once: F) -> Result<R, LedgerError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<R, LedgerError>>,
{
    let mut tries = 0;
    loop {
        match once().await {
            Err(error) if error.is_transient() && tries < TRANSIENT_RETRIES => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(10 * u64::from(tries))).await;
            }
            result => return result,
        }
    }
}

/// Counts a write refused because the claim's ownership version moved on.
fn count_fenced(error: &LedgerError) {
    if matches!(error, LedgerError::Fenced { .. }) {
        metrics::fenced_write();
    }
}

fn is_current(action: &ActionRecord, claim: &Claim) -> bool {
    action.state == State::InProgress && action.ownership_version == claim.ownership_version()
}

fn fenced(claim: &Claim, current: Option<&ActionRecord>) -> LedgerError {
    LedgerError::Fenced {
        key: claim.key().to_string(),
        held: claim.ownership_version(),
        current: current.map_or(-1, |a| a.ownership_version),
        state: current.map_or_else(|| "missing".to_owned(), |a| a.state.to_string()),
    }
}

async fn lock_current<T: LedgerTx>(tx: &mut T, claim: &Claim) -> Result<ActionRecord, LedgerError> {
    let action = tx.lock_action(claim.key()).await?;
    match action {
        Some(action) if is_current(&action, claim) => Ok(action),
        other => Err(fenced(claim, other.as_ref())),
    }
}

/// Ends a transaction: commits what succeeded; rolls back, and waits for it, on any error or
/// refusal, so that no row lock outlives the call in a pooled connection.
async fn finish<T: LedgerTx, R>(tx: T, result: Result<R, LedgerError>) -> Result<R, LedgerError> {
    match result {
        Ok(value) => {
            tx.commit().await?;
            Ok(value)
        }
        Err(error) => {
            let _ = tx.rollback().await;
            Err(error)
        }
    }
}

/// Writes the action back, conditional on the revision it was read at.
async fn write_action<T: LedgerTx>(tx: &mut T, action: &mut ActionRecord) -> Result<(), LedgerError> {
    write_actions(tx, std::slice::from_mut(action)).await
}

/// Writes actions back in one statement, each conditional on the revision it was read at; all
/// or none.
async fn write_actions<T: LedgerTx>(tx: &mut T, actions: &mut [ActionRecord]) -> Result<(), LedgerError> {
    let written = tx.update_actions(&actions.iter().collect::<Vec<_>>()).await?;
    if written != actions.len() as u64 {
        return Err(Refusal::ChangedWhileWriting { keys: actions.iter().map(|a| a.key.clone()).collect() }.into());
    }
    for action in actions {
        action.revision += 1;
    }
    Ok(())
}

/// Refuses a batch that names one key twice: one worker never holds two claims on one key, and
/// a batch is written as one set of rows.
fn refuse_repeated_keys<'a>(keys: impl Iterator<Item = &'a ActionKey>) -> Result<(), LedgerError> {
    let mut seen = HashSet::new();
    for key in keys {
        if !seen.insert(key) {
            return Err(Refusal::RepeatedKey { key: key.clone() }.into());
        }
    }
    Ok(())
}

fn audit_entry(
    action: &ActionRecord,
    transition: Transition,
    actor: &str,
    actor_kind: ActorKind,
    reason: Option<String>,
    now: Timestamp,
) -> AuditEntry {
    // The entry that creates an action has no state to come from.
    let from_state = (transition.event != Event::Submitted).then_some(transition.from);
    AuditEntry {
        id: 0,
        key: action.key.clone(),
        at: now,
        actor: actor.to_owned(),
        actor_kind,
        event: transition.event,
        from_state,
        to_state: transition.to,
        ownership_version: action.ownership_version,
        revision: action.revision,
        reason,
    }
}
