//! A person's commands (retry, resolve, cancel, approve, reject, take over, assign, acknowledge,
//! re-create), each conditional on what the person saw and decided by the same rules as automatic
//! work.

use super::recovery::cut_off;
use super::tx::{Writer, audit_entry, purge_of_settled, write_action};
use super::update::updates_after_command;
use super::{Ledger, LedgerError, ManualOutcome, ManualRequest};
use crate::domain::{
    ActionRecord, ActorKind, ClaimFacts, Event, ManualCommand, ProposalDecision, ProposalRecord, Refusal, State,
    Timestamp, Transition,
    manual::{self, Confirmed, update_number},
};
use crate::store::{LedgerTx, Store};

impl<S: Store> Ledger<S> {
    /// Runs a named person's command on one action (rule 6). A takeover is decided like a
    /// worker's recovery (rule 5), from the claim as locked and this ledger's destinations.
    #[tracing::instrument(skip_all, fields(key = %crate::domain::text::escape_untrusted(request.key.as_str()), person = %request.person.as_str(), command = request.command.verb()))]
    pub async fn manual(&self, request: &ManualRequest) -> Result<ManualOutcome, LedgerError> {
        self.check_clock_for(&request.command).await?;
        self.manual_then(true, request).await
    }

    /// A refusal because the action changed since the person read it says who changed it: read
    /// after the refused transaction, from the audit trail, for the person who lost the race.
    async fn naming_the_last_change(&self, error: LedgerError, key: &crate::domain::ActionKey) -> LedgerError {
        match error {
            LedgerError::Refused(refusal @ Refusal::ChangedSinceRead { .. }) => {
                let trail = self.store.audit_trail(key).await.unwrap_or_default();
                LedgerError::Refused(refusal.with_last_change(trail.last()))
            }
            other => other,
        }
    }

    /// [`Ledger::manual`] decided in full and rolled back: what the command would do now (a
    /// dry run), or why it would be refused.
    pub async fn manual_dry_run(&self, request: &ManualRequest) -> Result<ManualOutcome, LedgerError> {
        self.check_clock_for(&request.command).await?;
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
            let checked = self.check_clock_for(&request.command).await;
            answers.push(match checked {
                Ok(()) => self.manual_then(!dry_run, request).await,
                Err(error) => Err(error),
            });
        }
        answers
    }

    /// The facts `command` on `action` is decided from at `now` (rules 5 and 6), given whether an
    /// attempt was started under its current claim (read only where [`reads_claim`] says so).
    pub(super) fn command_facts(
        &self,
        command: &ManualCommand,
        action: &ActionRecord,
        now: Timestamp,
        sent_under_claim: bool,
    ) -> ClaimFacts {
        match command {
            ManualCommand::Takeover if reads_claim(command, action) => ClaimFacts {
                sent_under_claim,
                repeat_protected: self.destinations.protects_against_repeat(action, now),
            },
            // Rule 6: whether the destination would recognise this retry as a repeat.
            ManualCommand::Retry => ClaimFacts {
                repeat_protected: self.destinations.retry_recognised(action, now),
                ..ClaimFacts::WORST_CASE
            },
            _ => ClaimFacts::WORST_CASE,
        }
    }

    /// A takeover decides whether the lease expired, which on SQLite this process's clock
    /// measures: refused when that clock is behind the ledger ([`Store::check_clock`]).
    async fn check_clock_for(&self, command: &ManualCommand) -> Result<(), LedgerError> {
        if matches!(command, ManualCommand::Takeover) {
            self.store.check_clock().await?;
        }
        Ok(())
    }

    pub(super) async fn manual_then(
        &self,
        commit: bool,
        request: &ManualRequest,
    ) -> Result<ManualOutcome, LedgerError> {
        match self.decide_manual(commit, request).await {
            Err(error) => Err(self.naming_the_last_change(error, &request.key).await),
            decided => decided,
        }
    }

    async fn decide_manual(&self, commit: bool, request: &ManualRequest) -> Result<ManualOutcome, LedgerError> {
        let ManualRequest { key, person, reason, expect_version, command, old_worker_stopped, confirmed_not_written } =
            request;
        let confirmed = Confirmed { old_worker_stopped: *old_worker_stopped, not_written: *confirmed_not_written };
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
                let sent_under_claim = reads_claim(command, &action)
                    && tx.attempt_started_under(&action.key, action.ownership_version).await?;
                let facts = self.command_facts(command, &action, now, sent_under_claim);
                let waiting = waiting_proposals(tx, &action, command).await?;
                let (choice, plan) = manual::decide(&action, command, now, facts, confirmed, waiting)?;
                if let Some(approved) = &choice.approved {
                    action.proposal = Some(approved.proposal());
                }
                let confirmed_stopped = manual::needs_old_worker_stopped(&action, command);
                let checked_not_written = manual::needs_not_written(&action, command, facts.repeat_protected);
                if matches!(command, ManualCommand::Takeover) {
                    cut_off(tx, &mut action).await?;
                }
                let before = (action.payload_revision, action.payload.fingerprint().short().to_owned());
                // Approving a new version of a completed action: the update action carries it.
                let approving =
                    action.proposal.clone().filter(|_| plan.event == Event::Approved && plan.from == State::Completed);
                let transition = manual::apply(&mut action, command, plan, now)?;
                if checked_not_written && !matches!(command, ManualCommand::Cancel) {
                    // Known not written, on the person's word: a failure from here on may be
                    // `failed` again, as after a resolution as not written. A cancelled action
                    // keeps the sign that a request may have written: nothing fails after it, and
                    // a purge keeps its attempts as the evidence (rule 7).
                    action.may_have_written = false;
                }
                choice.keep_latest_waiting(&mut action);
                decide_proposals(tx, &choice, person.as_str(), now).await?;
                let acknowledged = if matches!(command, ManualCommand::Acknowledge) {
                    tx.acknowledge_late_results(&action.key, person.as_str(), now).await?
                } else {
                    0
                };
                let by =
                    Writer { routing: &self.destinations, actor: person.as_str(), actor_kind: ActorKind::Person, now };
                write_action(tx, &mut action, by).await?;
                let update = updates_after_command(tx, &action, command, approving, by, reason.as_str()).await?;
                let recreated = if matches!(command, ManualCommand::Recreate) {
                    Some(record_recreate_action(tx, &action, person.as_str(), reason.as_str(), now).await?)
                } else {
                    None
                };
                let settled = proposals_settled(&choice);
                let detail = match command {
                    // The revision history of the payload, kept in the audit trail.
                    ManualCommand::Approve { .. } => {
                        approval_detail(reason.as_str(), &before, &action, update.as_ref())
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
                    ManualCommand::Recreate => {
                        let new = recreated.as_ref().map_or("-", |r| r.key.as_str());
                        format!("re-created as {new}: {}", reason.as_str())
                    }
                    _ => confirmed_detail(reason.as_str(), command, confirmed_stopped, checked_not_written),
                };
                let detail = format!("{detail}{settled}");
                let recorded = transition.unwrap_or(Transition { event: plan.event, from: plan.from, to: plan.to });
                let entry = audit_entry(&action, recorded, person.as_str(), ActorKind::Person, Some(detail), now);
                tx.append_audit(&entry).await?;
                Ok(ManualOutcome { action, transition, update, recreated })
            })
        })
        .await
    }
}

/// An approval's audit detail: the payload's revision history, and how the new one goes out.
fn approval_detail(
    reason: &str,
    (revision, fingerprint): &(i64, String),
    action: &ActionRecord,
    update: Option<&ActionRecord>,
) -> String {
    if let Some(update) = update {
        return format!(
            "{reason}; payload revision {} ({}) approved as update action {}, which changes the record at the \
             destination; this action keeps payload revision {revision} ({fingerprint}) until that update completes",
            update_number(update).unwrap_or_default(),
            update.payload.fingerprint().short(),
            update.key
        );
    }
    let then = match &action.idempotency_key {
        Some(sending) => format!("; requests now carry idempotency key {sending}"),
        None => String::new(),
    };
    format!(
        "{reason}; payload revision {revision} ({fingerprint}) replaced by revision {} ({}){then}",
        action.payload_revision,
        action.payload.fingerprint().short()
    )
}

/// A command's audit detail with what the person confirmed, where the command needed it (rules 5
/// and 6).
fn confirmed_detail(reason: &str, command: &ManualCommand, old_worker_stopped: bool, not_written: bool) -> String {
    let mut detail = reason.to_owned();
    if old_worker_stopped {
        detail.push_str("; the person confirmed that the old worker can no longer act");
    }
    if not_written && matches!(command, ManualCommand::Cancel) {
        detail.push_str(
            "; an earlier request may have written, and the person confirmed that the destination holds no record of \
             this action",
        );
    } else if not_written {
        detail.push_str(
            "; the destination cannot recognise a repeat, and the person confirmed that it holds no record of this \
             action",
        );
    }
    detail
}

/// Records the action that re-creates the completed `original` (its record removed at the
/// destination) under the next free key `KEY#recreate-N`, in the person's name. The original is
/// locked by this transaction, so two re-creations of it cannot choose the same number.
async fn record_recreate_action<T: LedgerTx>(
    tx: &mut T,
    original: &ActionRecord,
    person: &str,
    reason: &str,
    now: Timestamp,
) -> Result<ActionRecord, LedgerError> {
    let mut n = 1;
    let recreate = loop {
        let candidate = manual::recreate_action(original, n, now)?;
        if tx.lock_action(&candidate.key).await?.is_none() {
            break candidate;
        }
        n += 1;
    };
    let Some(created) = tx.insert_actions_if_absent(std::slice::from_ref(&recreate)).await?.pop() else {
        return Err(Refusal::ChangedWhileWriting { keys: vec![recreate.key] }.into());
    };
    let creation = Transition { event: Event::Submitted, from: State::Pending, to: State::Pending };
    let detail = format!(
        "re-creation of {} (completed as destination id {}, payload revision {} ({})), the record being gone at the \
         destination: {reason}",
        original.key,
        original.destination_id.as_deref().unwrap_or("-"),
        original.payload_revision,
        original.payload.fingerprint().short()
    );
    tx.append_audit(&audit_entry(&created, creation, person, ActorKind::Person, Some(detail), now)).await?;
    Ok(created)
}

/// Whether `command` on `action` is decided from what was sent under its current claim: a
/// takeover of a claimed action (rule 5).
pub(super) fn reads_claim(command: &ManualCommand, action: &ActionRecord) -> bool {
    matches!(command, ManualCommand::Takeover) && action.state == State::InProgress
}

/// The waiting proposals a manual command chooses from (rule 9: approve names one or takes the
/// only one, reject names one or takes all, cancel takes all), oldest first. Read only where the
/// command settles proposals and one waits.
pub(super) async fn waiting_proposals<T: LedgerTx>(
    tx: &mut T,
    action: &ActionRecord,
    command: &ManualCommand,
) -> Result<Vec<ProposalRecord>, LedgerError> {
    if settles_proposals(command) && action.proposal.is_some() {
        Ok(tx.waiting_proposals(&action.key).await?)
    } else {
        Ok(Vec::new())
    }
}

/// Whether a command settles the proposals waiting on its action.
pub(super) fn settles_proposals(command: &ManualCommand) -> bool {
    matches!(command, ManualCommand::Approve { .. } | ManualCommand::Reject { .. } | ManualCommand::Cancel)
}

/// Records `person`'s decisions on the proposals a command settled.
pub(super) async fn decide_proposals<T: LedgerTx>(
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
pub(super) fn proposals_settled(choice: &manual::ProposalChoice) -> String {
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
