//! Submitting intended actions: validation, the refusal record, new keys and repeated deliveries
//! (the fingerprint is compared on every path), and `after` chains that would never run.

use super::tx::{Writer, audit_entry, purge_of_settled, write_action};
use super::update::update_in_flight_with;
use super::{DependencyConflict, Ledger, LedgerError, SubmitReport};
use crate::domain::text::{escape_untrusted, truncate};
use crate::domain::{
    ActionKey, ActionRecord, ActorKind, Delivery, DestinationCatalog, Event, ProposalRecord, RawSubmission,
    RefusedSubmission, State, Submission, SubmissionRefused, SubmitOutcome, Timestamp, Transition,
};
use crate::store::{LedgerTx, Store};
use std::collections::{HashMap, HashSet};

impl<S: Store> Ledger<S> {
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
                match submit_in(tx, &self.destinations, &[submission], now)
                    .await?
                    .pop()
                    .expect("one report per submission")
                {
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
                let mut recorded = submit_in(tx, &self.destinations, &valid, now).await?.into_iter();
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
}

/// Records validated submissions inside a transaction, in the order given; see
/// [`Ledger::submit`]. New keys are inserted in one statement, and every delivery is written in
/// one more, in this order. A new action whose `after` chain leads back to it is refused here,
/// where the chain is read: its refusal is returned in its place and nothing of it is written.
pub(super) async fn submit_in<T: LedgerTx>(
    tx: &mut T,
    routing: &DestinationCatalog,
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
            SubmitReport { outcome: SubmitOutcome::Created, action, dependency: None }
        } else {
            submit_existing(tx, routing, submission, &actor, now).await?
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
pub(super) async fn after_cycles<T: LedgerTx>(
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

/// One more delivery of a key that exists: the fingerprint is compared on this path too, never
/// only on insert.
pub(super) async fn submit_existing<T: LedgerTx>(
    tx: &mut T,
    routing: &DestinationCatalog,
    submission: &Submission,
    actor: &str,
    now: Timestamp,
) -> Result<SubmitReport, LedgerError> {
    let mut action =
        tx.lock_action(&submission.key).await?.ok_or_else(|| LedgerError::NotFound(submission.key.to_string()))?;
    // By value: a payload recorded before canonical text followed RFC 8785 is still recognised.
    // The new version an update action is still to perform is the approved one too: a completed
    // action takes it on only once the update completed.
    let same_as_approved = submission.payload.is_same_as(&action.payload)
        || update_in_flight_with(tx, &action, &submission.payload).await?;
    // Every proposal waiting is kept (rule 9): a new payload is compared with each of them.
    let waiting = if same_as_approved { Vec::new() } else { tx.waiting_proposals(&action.key).await? };
    let recorded_version = waiting
        .iter()
        .filter_map(|p| p.source_version)
        .chain(action.source_version)
        .chain(action.proposal.as_ref().and_then(|p| p.source_version))
        .max();
    let fingerprint = submission.payload.fingerprint();
    // A delivery that asks the action to wait for another action than the one recorded is not
    // the same request: dropping the new `after` would run it before what the source now says
    // it depends on.
    let after_differs = submission.after != action.after;
    let outcome = match (submission.source_version, recorded_version) {
        (Some(version), Some(recorded)) if version < recorded => SubmitOutcome::Stale,
        _ if same_as_approved && !after_differs => SubmitOutcome::Duplicate,
        _ => SubmitOutcome::Conflict,
    };
    if outcome == SubmitOutcome::Conflict && same_as_approved {
        return after_conflict(tx, routing, action, submission, actor, now).await;
    }
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
        return Ok(SubmitReport { outcome, action, dependency: None });
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
        let transition = changed_under_review(&mut action, now)?;
        write_action(tx, &mut action, Writer { routing, actor, actor_kind: ActorKind::Source, now }).await?;
        // A proposal carries no dependency of its own: the one recorded stays whatever is approved.
        let dependency = if after_differs {
            format!(
                "; the delivery also asks it to wait for {}, and it keeps waiting for {}",
                after_name(submission.after.as_ref()),
                after_name(action.after.as_ref())
            )
        } else {
            String::new()
        };
        let reason = format!(
            "proposed payload {} differs from approved {}; {} proposal(s) waiting{dependency}",
            fingerprint.short(),
            action.payload.fingerprint().short(),
            waiting.len() + 1
        );
        tx.append_audit(&audit_entry(&action, transition, actor, ActorKind::Source, Some(reason), now)).await?;
    }
    Ok(SubmitReport { outcome, action, dependency: None })
}

/// A delivery of the approved payload that names another `after` than the one recorded: a
/// conflict for a person, never a duplicate. The recorded dependency stays (a recorded action's
/// `after` never changes, so no chain can close a cycle); an action not yet claimed (pending,
/// failed or held) waits in `conflict` so that nothing runs before a person has seen both
/// dependencies, named in the audit entry. An action already running, settling or settled keeps
/// its state, and the entry says what was asked.
async fn after_conflict<T: LedgerTx>(
    tx: &mut T,
    routing: &DestinationCatalog,
    mut action: ActionRecord,
    submission: &Submission,
    actor: &str,
    now: Timestamp,
) -> Result<SubmitReport, LedgerError> {
    let outcome = SubmitOutcome::Conflict;
    let asked = after_name(submission.after.as_ref());
    let recorded = after_name(action.after.as_ref());
    if let Some(purge) = purge_of_settled(tx, &action).await? {
        let reason = format!(
            "a delivery asks this action to wait for {asked}; it was recorded waiting for {recorded} and was purged by \
             purge run {}: nothing changes and nothing runs",
            purge.id
        );
        let transition = Transition { event: Event::PayloadChanged, from: action.state, to: action.state };
        tx.append_audit(&audit_entry(&action, transition, actor, ActorKind::Source, Some(reason), now)).await?;
        let dependency =
            DependencyConflict { asked: submission.after.clone(), recorded: action.after.clone(), purged: true };
        return Ok(SubmitReport { outcome, action, dependency: Some(dependency) });
    }
    let transition = changed_under_review(&mut action, now)?;
    write_action(tx, &mut action, Writer { routing, actor, actor_kind: ActorKind::Source, now }).await?;
    let reason = format!(
        "dependency changed: a delivery of the same payload asks this action to wait for {asked}; it was recorded \
         waiting for {recorded}, which it keeps; a person decides: retry runs it after {recorded}, cancel stops it, \
         and an action waiting for {asked} is submitted under a new key"
    );
    tx.append_audit(&audit_entry(&action, transition, actor, ActorKind::Source, Some(reason), now)).await?;
    let dependency =
        DependencyConflict { asked: submission.after.clone(), recorded: action.after.clone(), purged: false };
    Ok(SubmitReport { outcome, action, dependency: Some(dependency) })
}

/// A delivery asked `action` to change (its payload, or what it waits for): one not yet claimed
/// (pending, failed or held) waits in `conflict` for a person; one in progress, unknown, in
/// conflict or final keeps its state, so that the claim or the outcome being settled is not
/// disturbed, and the change waits beside it.
fn changed_under_review(action: &mut ActionRecord, now: Timestamp) -> Result<Transition, LedgerError> {
    let from = action.state;
    if matches!(from, State::Pending | State::Failed | State::Held) {
        return Ok(action.transition(Event::PayloadChanged, State::Conflict, now)?);
    }
    action.updated_at = now;
    Ok(Transition { event: Event::PayloadChanged, from, to: from })
}

/// An `after` as an audit entry names it.
fn after_name(after: Option<&ActionKey>) -> String {
    after.map_or_else(|| "no other action".to_owned(), ToString::to_string)
}

pub(super) fn refused_submission(
    raw: &RawSubmission,
    refusal: &SubmissionRefused,
    now: Timestamp,
) -> RefusedSubmission {
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
