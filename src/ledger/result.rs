//! The results of attempts, each applied only under the claim that is still current; a result from
//! an obsolete owner is kept and sent to review (rule 8).

use super::claim::is_current;
use super::tx::{Writer, audit_entry, finish, purge_of_settled, refuse_repeated_keys, retrying, write_actions};
use super::update::take_on_completed_update;
use super::{Claim, Ledger, LedgerError, Outcome, Recorded, Report, StartedAttempt};
use crate::domain::{
    ActionKey, ActionRecord, ActorKind, Attempt, AttemptOutcome, DestinationCatalog, Event, RetryPolicy, State,
    Timestamp, Transition, record::MAX_EVIDENCE_BODY_BYTES, state, text::truncate,
};
use crate::metrics;
use crate::store::{LedgerTx, Store};
use std::collections::HashMap;

impl<S: Store> Ledger<S> {
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
    pub(super) async fn record_results_of(
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
    pub(super) async fn record_once(
        &self,
        results: &[(&Claim, StartedAttempt, &Report)],
    ) -> Result<Vec<Recorded>, LedgerError> {
        let keys: Vec<&ActionKey> = results.iter().map(|(claim, _, _)| claim.key()).collect();
        let mut tx = self.store.begin().await?;
        let recorded = async {
            let (locked, now) = tx.lock_actions_now(&keys).await?;
            let recorded = record_results_in(&mut tx, &self.destinations, locked, results, now).await;
            crate::faults::crash_point(crate::faults::DURING_RECORD);
            recorded
        }
        .await;
        finish(tx, recorded).await
    }
}

/// Records the results of attempts inside a transaction; see [`Ledger::record_results`]. The
/// claims' keys are distinct. Reads every action in one locked statement, then writes the
/// attempts and the actions a statement each.
pub(super) async fn record_results_in<T: LedgerTx>(
    tx: &mut T,
    destinations: &DestinationCatalog,
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
        // A destination that keeps its answer per idempotency key (as Stripe documents) replays a
        // failure to every repeat of the key: the same server error again proves nothing new.
        // Asked only of uncertain server errors under a current claim, where the destination
        // takes an idempotency key.
        let keyed = destinations.of(&action).is_some_and(|c| c.idempotency_retention.is_some());
        let replay_of = if keyed && is_current(&action, claim) && replayable(report) {
            replayed_attempt(&tx.attempts_of(&action.key).await?, claim, attempt, report)
        } else {
            None
        };
        let retry = destinations.retry_policy(&action);
        let (attempt, mut decision) = decide_result(action, claim, attempt, report, replay_of, retry, now)?;
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
    let written_by = decided.iter().zip(results).filter(|(d, _)| !d.tombstone);
    let by: Vec<Writer<'_>> = written_by
        .map(|(_, &(claim, _, _))| Writer {
            routing: destinations,
            actor: &claim.worker,
            actor_kind: ActorKind::Worker,
            now,
        })
        .collect();
    let mut writes: Vec<ActionRecord> = decided.iter().filter(|d| !d.tombstone).map(|d| d.action.clone()).collect();
    let confirmed: Vec<bool> = decided
        .iter()
        .filter(|d| !d.tombstone)
        .map(|d| !d.stale && d.transition.event == Event::Completed && d.action.updates.is_some())
        .collect();
    write_actions(tx, &mut writes, &by).await?;
    // An update confirmed by its destination: the action it updates takes it on, in this
    // transaction, so that neither is ever recorded without the other.
    for ((update, confirmed), by) in writes.iter().zip(confirmed).zip(&by) {
        if confirmed {
            take_on_completed_update(tx, update, *by).await?;
        }
    }
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
pub(super) struct ResultDecision {
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
pub(super) fn decide_result(
    mut action: ActionRecord,
    claim: &Claim,
    attempt: StartedAttempt,
    report: &Report,
    replay_of: Option<i64>,
    retry: RetryPolicy,
    now: Timestamp,
) -> Result<(Attempt, ResultDecision), LedgerError> {
    let (attempt_outcome, event, target) = match &report.outcome {
        Outcome::Completed { .. } => (AttemptOutcome::Succeeded, Event::Completed, State::Completed),
        Outcome::RetryLater { .. } => (AttemptOutcome::FailedBeforeWrite, Event::RetryScheduled, State::Pending),
        Outcome::Failed { permanent: true } => (AttemptOutcome::FailedPermanent, Event::Failed, State::Failed),
        Outcome::Failed { permanent: false } => (AttemptOutcome::FailedBeforeWrite, Event::Failed, State::Failed),
        Outcome::Unknown => (AttemptOutcome::Unknown, Event::OutcomeUnknown, State::Unknown),
        Outcome::Conflict => (AttemptOutcome::FailedPermanent, Event::ChangedAtDestination, State::Conflict),
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
    } else if let Some(number) = replay_of {
        // Rule 3: the round's sends are used up, so that nothing goes out under this key again
        // automatically; a lookup that finds nothing ends the action `failed`, and without a
        // lookup it waits in `unknown` for a person.
        action.attempts_in_round = action.attempts_in_round.max(retry.max_attempts);
        Some(format!(
            "{}; the destination answered exactly as it did to attempt {number} under the same idempotency key: a \
             stored answer replayed, which proves nothing new, so nothing more is sent under this key",
            report.error.as_deref().unwrap_or("unknown")
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
        Outcome::Failed { .. } | Outcome::Unknown | Outcome::Conflict => {}
    }
    // A completed action keeps no error (see `ActionRecord::transition`); a report's note on a
    // completion still goes to the audit trail below.
    if action.state != State::Completed {
        action.last_error.clone_from(&reason);
    }
    let decision = ResultDecision { action, transition, reason, stale: false, tombstone: false };
    Ok((finished, decision))
}

/// Whether a result may be a replayed answer: an uncertain outcome with a server error.
fn replayable(report: &Report) -> bool {
    matches!(report.outcome, Outcome::Unknown) && report.evidence.status.is_some_and(|status| status >= 500)
}

/// The number of an earlier attempt of the action that went out under the same idempotency key
/// and got exactly this answer (status and body, as kept), if any.
fn replayed_attempt(earlier: &[Attempt], claim: &Claim, attempt: StartedAttempt, report: &Report) -> Option<i64> {
    let sending = claim.action.sending_key();
    let body = report.evidence.body.as_deref().map(|b| truncate(b, MAX_EVIDENCE_BODY_BYTES));
    earlier
        .iter()
        .filter(|a| a.id != attempt.id && !a.stale && a.idempotency_key.as_deref() == Some(sending))
        .find(|a| a.evidence.status == report.evidence.status && a.evidence.body == body)
        .map(|a| a.number)
}

/// A result from an obsolete owner never changes the action's record (rule 8): no outcome,
/// payload, destination id or error note. It is kept as a stale attempt with its evidence, and
/// always reaches review: it is listed on the action as a late result until a person
/// acknowledges it, and when it contradicts what the ledger holds ([`late_result_contradicts`])
/// the action also goes to `conflict`, where the state allows it (not from `conflict` or
/// `cancelled`).
pub(super) fn decide_late_result(
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

/// Rule 8: whether a late result contradicts what the ledger holds, and why. It does when the
/// action completed with another destination record than the one the late result names (a second
/// effect), and when it reports a possible write (a success, an unknown outcome, or a
/// destination record) while the action is not completed: waiting to run, running again under a
/// new owner, or waiting for a person who does not know that the old worker may have written. A
/// late result that reports no write (a failure before writing, a permanent refusal), or that
/// names the completed action's own record or none, contradicts nothing.
pub(super) fn late_result_contradicts(
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
