//! The ledger: every rule about what may change and when, written once over any [`Store`].
//!
//! Each operation is one short write transaction: read the action (locked), decide with the
//! pure domain rules, write it back conditionally on the revision read, append to the audit
//! trail, commit. Workers, the CLI and the review console all go through these calls.
//!
//! This file holds the ledger's types; the operations are one file each, all on [`Ledger`]:
//! [`submit`] (record intents and deliveries), [`claim`] (claims, leases, attempts started, claims
//! given back), [`result`] (results and the fencing of late ones), [`recovery`] (expired claims,
//! uncertain outcomes settled by lookup), [`register`] (automations that act themselves: begin,
//! renew, finish, claim through `serve`), [`manual`] (a person's commands), [`update`] (update
//! actions and what their completion changes), [`purge`] (retention) and [`read`] (queries).
//! [`tx`] is the one transaction scaffold they all run in.

mod claim;
mod error;
mod manual;
mod purge;
mod read;
mod recovery;
mod register;
mod result;
mod stats;
mod submit;
mod tx;
mod update;

pub use crate::domain::LookupReport;
use crate::domain::{
    ActionKey, ActionRecord, Attempt, AuditEntry, Delivery, DestinationCatalog, Evidence, LookupRecord, ManualCommand,
    Person, ProposalRecord, PurgeRecord, Reason, SubmitOutcome, Transition, UpdateGuard,
};
use crate::store::Store;
pub use error::LedgerError;
pub use register::{Begun, Finish, FinishReport, Finished, Holding, not_written};
pub use stats::{LedgerStats, NotReady, QueueWait, StateCounts};
use std::sync::Arc;
use std::time::Duration;

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
    /// The destination refused a conditional update: the record changed there since the ledger
    /// last wrote it. Nothing was written; a person decides.
    Conflict,
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
    /// The person checked the destination and confirms it holds no record of the action; a
    /// retry that could create a second effect needs it (rule 6).
    pub confirmed_not_written: bool,
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
    /// The action a re-creation recorded for a completed action whose record was removed at the
    /// destination (`KEY#recreate-N`).
    pub recreated: Option<ActionRecord>,
}

/// What a purge run removed, or with `dry_run` would remove (then nothing changed and nothing
/// was recorded, and the record's id is 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgeReport {
    pub record: PurgeRecord,
    pub dry_run: bool,
    /// Actions old enough that the purge kept whole, since an earlier request may have written
    /// them and their attempts are the evidence (see [`crate::domain::PurgeCandidate`]).
    pub kept_may_have_written: Vec<ActionKey>,
}

/// The result of a submission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubmitReport {
    pub outcome: SubmitOutcome,
    pub action: ActionRecord,
    /// Set when the conflict is over what the action waits for, not over its payload: a delivery
    /// of the approved payload that named another action to wait for.
    pub dependency: Option<DependencyConflict>,
}

/// A delivery that asked an action to wait for another action than the one it was recorded
/// waiting for (`None`: for no other action).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DependencyConflict {
    pub asked: Option<ActionKey>,
    pub recorded: Option<ActionKey>,
    /// The action was purged: nothing changed and nothing runs.
    pub purged: bool,
}

/// Everything the ledger knows about one action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionDetail {
    pub action: ActionRecord,
    /// Why the action cannot run until a person acts, when it waits on one that is cancelled or
    /// failed ([`Ledger::blocked_among`]).
    pub blocked: Option<crate::domain::Blocked>,
    /// The purge run that reduced the action to its tombstone, if one did: its payload, last
    /// error, deliveries, attempts and lookups are gone; its audit trail is kept in full.
    pub purge: Option<PurgeRecord>,
    pub deliveries: Vec<Delivery>,
    pub attempts: Vec<Attempt>,
    pub lookups: Vec<LookupRecord>,
    /// Every proposal kept for the action, waiting and decided, oldest first.
    pub proposals: Vec<ProposalRecord>,
    /// The update actions recorded for it (`KEY#update-N`), oldest first, whatever became of
    /// them: the action takes an update's payload only once it completed, so one that failed is
    /// shown beside it.
    pub updates: Vec<ActionRecord>,
    pub audit: Vec<AuditEntry>,
    /// For an update action, whether its request may overwrite a change made at the destination,
    /// as the destinations this ledger decides with declare it.
    pub update_guard: Option<UpdateGuard>,
    /// A person's retry of the action now could create a second effect (an earlier request may
    /// have written, and its destination cannot recognise a repeat), so the ledger would ask for
    /// their confirmation that the destination holds no record (rule 6): said before they retry.
    pub retry_needs_check: bool,
}

/// What a person's command on one action will be decided from, as read without locking
/// ([`Ledger::decision_facts`]): a front end says from these, through
/// [`crate::domain::manual::decide`], what the command will do before the person confirms it.
/// The ledger reads them again, locked, when the command runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionFacts {
    /// What was sent under its claim and whether its destination recognises a repeat (rules 5
    /// and 6), as the command reads them.
    pub claim: crate::domain::ClaimFacts,
    /// The proposals waiting on it, oldest first, where the command settles proposals (rule 9).
    pub waiting: Vec<ProposalRecord>,
}

impl ActionDetail {
    /// The number N of the update action `KEY#update-N` approving a new version of this
    /// completed action would record now: the first after its payload revision that no earlier
    /// update of it took.
    pub fn next_update_number(&self) -> i64 {
        self.updates
            .iter()
            .filter_map(crate::domain::manual::update_number)
            .chain([self.action.payload_revision])
            .max()
            .unwrap_or(self.action.payload_revision)
            + 1
    }

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
}
