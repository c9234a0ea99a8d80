//! The records a ledger keeps: actions, deliveries, attempts with their evidence, audit entries
//! and refused submissions. Plain data; the stores read and write them.

use super::key::ActionKey;
use super::payload::Payload;
use super::state::{self, Event, State, TransitionRefused};
use chrono::{DateTime, Utc};

/// One point in time. Every time the ledger records comes from the database's clock.
pub type Timestamp = DateTime<Utc>;

/// Converts a stored millisecond count back to a timestamp.
pub fn from_millis(ms: i64) -> Timestamp {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

/// A payload proposed for an existing key, waiting for a person to approve or reject it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    pub payload: Payload,
    pub source_version: Option<i64>,
}

/// Every distinct payload proposed for an existing key is kept, one record per fingerprint,
/// until a person approves or rejects it (a repeat of it is the same record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProposalRecord {
    pub id: i64,
    pub key: ActionKey,
    pub payload: Payload,
    pub source: Option<String>,
    pub event_id: Option<String>,
    pub source_version: Option<i64>,
    /// When it was last proposed.
    pub received_at: Timestamp,
    /// `None` while it waits for a person.
    pub decision: Option<ProposalDecision>,
    pub decided_by: Option<String>,
    pub decided_at: Option<Timestamp>,
}

impl ProposalRecord {
    /// The proposal as the action carries it while it is the latest one waiting.
    pub fn proposal(&self) -> Proposal {
        Proposal { payload: self.payload.clone(), source_version: self.source_version }
    }
}

/// What a person decided about a proposal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProposalDecision {
    Approved,
    Rejected,
}

impl ProposalDecision {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approved => "approved",
            Self::Rejected => "rejected",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Self::Approved, Self::Rejected].into_iter().find(|d| d.as_str() == text)
    }
}

/// The durable record of one intended action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionRecord {
    pub id: i64,
    pub key: ActionKey,
    pub state: State,
    pub payload: Payload,
    pub proposal: Option<Proposal>,
    /// Where a payload conflict returns when its proposal is rejected.
    pub resume_state: Option<State>,
    pub source: Option<String>,
    pub source_version: Option<i64>,
    pub destination: Option<String>,
    /// The action that must complete before this one may run.
    pub after: Option<ActionKey>,
    /// The worker holding the claim while `in_progress`.
    pub claimed_by: Option<String>,
    /// The fencing token: incremented by every claim and takeover.
    pub ownership_version: i64,
    /// Incremented by every change; manual commands are conditional on it.
    pub revision: i64,
    pub lease_expires_at: Option<Timestamp>,
    pub not_before: Option<Timestamp>,
    /// Attempts ever started.
    pub attempts: i64,
    /// Attempts started in this round: a manual retry, an approval, a resolution as not written
    /// or a lookup that found nothing starts a new one. A worker fails the action once a round
    /// reaches the destination's `max_attempts` (rule 3 in docs/RULES.md).
    pub attempts_in_round: i64,
    pub assignee: Option<String>,
    pub destination_id: Option<String>,
    /// When the first request for this key may have reached the destination: the evidence that
    /// something may have been sent, which no command clears, so that a worker looks before it
    /// sends again wherever the destination offers a lookup (rule 2).
    pub first_sent_at: Option<Timestamp>,
    /// When the destination's current idempotency window started: the first request of the
    /// action, or the first after a person restarted the window (a retry from `held`, a
    /// resolution as not written). Rule 4 counts the retention window from here.
    pub window_started_at: Option<Timestamp>,
    /// Results from obsolete ownership versions that no person has acknowledged yet (rule 8):
    /// listed with their evidence until someone does.
    pub late_results: i64,
    /// An expired claim was held because taking it over was unsafe (rule 5): the old worker may
    /// still act, so the action runs again only once a person confirms that it cannot.
    pub old_worker_may_act: bool,
    /// A request sent under this action may have written at the destination (an outcome that
    /// was unknown or a success, a late result reporting a write, an attempt cut off by a crash),
    /// and no lookup or person has since established that nothing was written. While it holds,
    /// the action never ends `failed`: `failed` means known not written (rule 2).
    pub may_have_written: bool,
    pub last_error: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// Counts the approved payloads, from 1: every approval of a proposed payload adds one.
    pub payload_revision: i64,
    /// The idempotency key requests carry when it is not the action key: set when an approval
    /// changed the payload after a request may have been sent under the old one, so that the
    /// new body never goes out under a key the destination keeps for the old body (rule 9).
    pub idempotency_key: Option<String>,
    /// On an update action: the completed action it updates.
    pub updates: Option<ActionKey>,
    /// On an update action: the updated action's record at the destination.
    pub updates_destination_id: Option<String>,
}

/// One applied transition, as the audit trail records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    pub event: Event,
    pub from: State,
    pub to: State,
}

impl ActionRecord {
    /// A new pending action for a validated submission. The store assigns the id.
    pub fn new_pending(submission: &super::input::Submission, now: Timestamp) -> Self {
        Self {
            source: submission.source.clone(),
            source_version: submission.source_version,
            destination: submission.destination.clone(),
            after: submission.after.clone(),
            ..Self::pending(submission.key.clone(), submission.payload.clone(), now)
        }
    }

    /// A new pending action under `key` with `payload` and nothing else known yet: ownership
    /// version 0, no attempt, no claim. The store assigns the id.
    pub fn pending(key: ActionKey, payload: Payload, now: Timestamp) -> Self {
        Self {
            id: 0,
            key,
            state: State::Pending,
            payload,
            proposal: None,
            resume_state: None,
            source: None,
            source_version: None,
            destination: None,
            after: None,
            claimed_by: None,
            ownership_version: 0,
            revision: 1,
            lease_expires_at: None,
            not_before: None,
            attempts: 0,
            attempts_in_round: 0,
            assignee: None,
            destination_id: None,
            first_sent_at: None,
            window_started_at: None,
            late_results: 0,
            old_worker_may_act: false,
            may_have_written: false,
            last_error: None,
            created_at: now,
            updated_at: now,
            payload_revision: 1,
            idempotency_key: None,
            updates: None,
            updates_destination_id: None,
        }
    }

    /// The idempotency key this action's requests carry: the action key, or the key derived when
    /// an approval changed the payload after a request may have been sent.
    pub fn sending_key(&self) -> &str {
        self.idempotency_key.as_deref().unwrap_or(self.key.as_str())
    }

    /// Applies `event` towards `to` if the transition table allows it. While a proposed payload
    /// awaits a decision, a transition that would make the action runnable again goes to
    /// `conflict` instead, remembering where to resume.
    pub fn transition(&mut self, event: Event, to: State, now: Timestamp) -> Result<Transition, TransitionRefused> {
        let from = self.state;
        state::check(event, from, to)?;
        let diverted = self.proposal.is_some() && state::diverts_while_proposed(event, to);
        let target = if diverted { State::Conflict } else { to };
        self.resume_state = match (target, event) {
            (State::Conflict, _) if diverted => Some(to),
            (State::Conflict, Event::PayloadChanged) if from != State::Conflict => Some(from),
            (State::Conflict, _) => self.resume_state,
            _ => None,
        };
        if from == State::InProgress && target != State::InProgress {
            self.claimed_by = None;
            self.lease_expires_at = None;
        }
        // Completed by any path (a worker's result, a lookup, a person's resolve): an error from an
        // earlier attempt, takeover or hold no longer stands, and kept it would read as if it did.
        if target == State::Completed {
            self.last_error = None;
        }
        self.state = target;
        self.updated_at = now;
        Ok(Transition { event, from, to: target })
    }

    /// True while the claim's lease runs, by the given database time.
    pub fn lease_is_live(&self, now: Timestamp) -> bool {
        self.state == State::InProgress && self.lease_expires_at.is_some_and(|until| until > now)
    }

    /// Whether a worker may claim the action as it was last written, at the time of that write:
    /// pending, with no proposed payload awaiting a decision and no backoff still running. An
    /// action that waits for another (`after`) may still have to wait for it to complete, which
    /// only a read of that action tells; a wake-up for it is at worst one claim that finds
    /// nothing. The same test as migration 0101's notify triggers on PostgreSQL.
    pub fn claimable_as_written(&self) -> bool {
        self.state == State::Pending
            && self.proposal.is_none()
            && self.not_before.is_none_or(|until| until <= self.updated_at)
    }
}

/// How one delivery of a submission was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubmitOutcome {
    /// A new action was recorded.
    Created,
    /// Same key and same payload: the delivery is recorded, nothing else changes.
    Duplicate,
    /// Older than the source version already recorded: changes nothing.
    Stale,
    /// Same key, different payload: kept as a proposal for a person to approve or reject.
    Conflict,
}

impl SubmitOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Duplicate => "duplicate",
            Self::Stale => "stale",
            Self::Conflict => "conflict",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Self::Created, Self::Duplicate, Self::Stale, Self::Conflict].into_iter().find(|o| o.as_str() == text)
    }
}

/// One delivery from a source system, recorded against its action.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Delivery {
    pub id: i64,
    pub key: ActionKey,
    pub event_id: Option<String>,
    pub source: Option<String>,
    pub source_version: Option<i64>,
    pub fingerprint: String,
    pub outcome: SubmitOutcome,
    pub received_at: Timestamp,
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// The destination confirmed the action.
    Succeeded,
    /// Failed before anything was written; may be retried.
    FailedBeforeWrite,
    /// Refused by the destination for good (validation, permission).
    FailedPermanent,
    /// The destination may or may not have acted.
    Unknown,
    /// Not sent: automatic work is not permitted.
    Held,
    /// Cut off: the claim expired (its worker crashed or stalled) with the attempt unfinished,
    /// so its request may have been sent. It does not count towards `max_attempts`; a late
    /// result from its worker still replaces it.
    CutOff,
}

impl AttemptOutcome {
    pub const ALL: [Self; 6] =
        [Self::Succeeded, Self::FailedBeforeWrite, Self::FailedPermanent, Self::Unknown, Self::Held, Self::CutOff];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::FailedBeforeWrite => "failed_before_write",
            Self::FailedPermanent => "failed_permanent",
            Self::Unknown => "unknown",
            Self::Held => "held",
            Self::CutOff => "cut_off",
        }
    }

    /// Whether an attempt that ended this way may have written at the destination.
    pub fn may_have_written(self) -> bool {
        matches!(self, Self::Succeeded | Self::Unknown | Self::CutOff)
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.as_str() == text)
    }
}

/// What the destination said, kept as evidence for people and reconciliation.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Evidence {
    pub status: Option<i64>,
    pub destination_id: Option<String>,
    /// The response body, truncated to [`MAX_EVIDENCE_BODY_BYTES`].
    pub body: Option<String>,
}

/// Response bodies are kept up to this size.
pub const MAX_EVIDENCE_BODY_BYTES: usize = 4096;

/// One execution try.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Attempt {
    pub id: i64,
    pub key: ActionKey,
    pub number: i64,
    pub worker: String,
    pub ownership_version: i64,
    pub started_at: Timestamp,
    pub ended_at: Option<Timestamp>,
    pub outcome: Option<AttemptOutcome>,
    pub error: Option<String>,
    pub evidence: Evidence,
    /// The idempotency key the attempt's request carried.
    pub idempotency_key: Option<String>,
    /// The result arrived after the claim had passed to a newer ownership version: it changed
    /// nothing and is kept here for review.
    pub stale: bool,
    /// The person who acknowledged this late result, and when; `None` while it waits.
    pub acknowledged: Option<Acknowledgement>,
}

/// A person's acknowledgement of a late result.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Acknowledgement {
    pub by: String,
    pub at: Timestamp,
}

impl Attempt {
    /// A late result that no person has acknowledged yet.
    pub fn is_unacknowledged_late_result(&self) -> bool {
        self.stale && self.acknowledged.is_none()
    }
}

/// Who did something.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActorKind {
    Worker,
    Person,
    Source,
}

impl ActorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Worker => "worker",
            Self::Person => "person",
            Self::Source => "source",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Self::Worker, Self::Person, Self::Source].into_iter().find(|k| k.as_str() == text)
    }
}

/// One line of the append-only audit trail.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AuditEntry {
    pub id: i64,
    pub key: ActionKey,
    pub at: Timestamp,
    pub actor: String,
    pub actor_kind: ActorKind,
    pub event: Event,
    /// `None` for the entry that created the action.
    pub from_state: Option<State>,
    pub to_state: State,
    pub ownership_version: i64,
    pub revision: i64,
    pub reason: Option<String>,
}

/// A submission the ledger would not accept, kept so that someone sees it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RefusedSubmission {
    pub id: i64,
    pub received_at: Timestamp,
    /// The key as given, made visible and cut short; withheld when it held an e-mail address.
    pub key_excerpt: Option<String>,
    pub problem: String,
    pub message: String,
    pub event_id: Option<String>,
    pub source: Option<String>,
    pub destination: Option<String>,
}

/// What a lookup at the destination concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LookupVerdict {
    /// Exactly one record, matching the action.
    Found,
    /// No record.
    NotFound,
    /// A record that differs from what the action sends.
    Mismatch,
    /// More than one record for one external reference.
    Duplicates,
    /// The lookup got no answer it could judge (the destination was unreachable, answered an
    /// error, or something unreadable): kept as evidence, it settles nothing.
    Failed,
}

impl LookupVerdict {
    pub const ALL: [Self; 5] = [Self::Found, Self::NotFound, Self::Mismatch, Self::Duplicates, Self::Failed];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Found => "found",
            Self::NotFound => "not_found",
            Self::Mismatch => "mismatch",
            Self::Duplicates => "duplicates",
            Self::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == text)
    }
}

/// One lookup at the destination, kept as evidence.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LookupRecord {
    pub id: i64,
    pub key: ActionKey,
    pub at: Timestamp,
    pub actor: String,
    pub verdict: LookupVerdict,
    pub records: i64,
    pub destination_id: Option<String>,
    pub evidence: Evidence,
    pub detail: Option<String>,
}

/// What a lookup at the destination concluded about an uncertain action, with its evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupReport {
    pub verdict: LookupVerdict,
    pub records: i64,
    pub destination_id: Option<String>,
    pub evidence: Evidence,
    pub detail: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending_at(now: Timestamp) -> ActionRecord {
        let key = ActionKey::parse("shop:order:1").unwrap();
        ActionRecord::pending(key, Payload::parse(b"{}").unwrap(), now)
    }

    #[test]
    fn claimable_as_written_only_pending_with_nothing_proposed_and_no_backoff_running() {
        let now = Timestamp::default() + chrono::TimeDelta::hours(1);
        let new = pending_at(now);
        assert!(new.claimable_as_written());
        let ended = ActionRecord { not_before: Some(now), ..new.clone() };
        assert!(ended.claimable_as_written(), "a backoff ending as it is written");
        let backing_off = ActionRecord { not_before: Some(now + chrono::TimeDelta::seconds(1)), ..new.clone() };
        assert!(!backing_off.claimable_as_written());
        let proposal = Proposal { payload: new.payload.clone(), source_version: None };
        let proposed = ActionRecord { proposal: Some(proposal), ..new.clone() };
        assert!(!proposed.claimable_as_written());
        for state in [State::InProgress, State::Completed, State::Failed, State::Unknown, State::Conflict, State::Held]
        {
            assert!(!ActionRecord { state, ..new.clone() }.claimable_as_written(), "{state}");
        }
    }
}
