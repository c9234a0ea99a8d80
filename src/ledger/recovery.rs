//! Recovery: expired claims taken over or held (rule 5), and uncertain outcomes settled by what a
//! lookup found (rule 2).

use super::tx::{Writer, audit_entry, purge_of_settled, write_action};
use super::update::take_on_completed_update;
use super::{Claim, Ledger, LedgerError, LookupReport, Recovery};
use crate::domain::{
    ActionKey, ActionRecord, ActorKind, Event, LookupRecord, LookupVerdict, Person, Refusal, State, Timestamp,
    Transition, record::MAX_EVIDENCE_BODY_BYTES, text::truncate,
};
use crate::metrics;
use crate::store::{LedgerTx, Store};
use std::time::Duration;

impl<S: Store> Ledger<S> {
    /// Settles one expired claim (rule 5): taken over under a new ownership version when nothing
    /// was sent under it or its destination protects against a second effect, otherwise `held`
    /// for a person, since taking over would be unsafe. Decided from the claim as locked, with
    /// the destinations this ledger was given. `seen_ownership_version` is the claim as the
    /// caller found it.
    #[tracing::instrument(skip_all, fields(key = %crate::domain::text::escape_untrusted(key.as_str()), ownership_version = seen_ownership_version))]
    pub async fn recover_expired(
        &self,
        key: &ActionKey,
        seen_ownership_version: i64,
        worker: &str,
        lease: Duration,
    ) -> Result<Recovery, LedgerError> {
        // Whether the lease expired is measured by this process's clock on SQLite.
        self.store.check_clock().await?;
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
            let by = Writer { routing: &self.destinations, actor: worker, actor_kind: ActorKind::Worker, now };
            let facts = self.claim_facts(tx, &action, now).await?;
            cut_off(tx, &mut action).await?;
            let recovery = if facts.takeover_is_safe() {
                let transition = action.transition(Event::ClaimRecovered, State::InProgress, now)?;
                action.ownership_version += 1;
                action.claimed_by = Some(worker.to_owned());
                action.lease_expires_at = Some(now + lease);
                action.updated_at = now;
                write_action(tx, &mut action, by).await?;
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
                write_action(tx, &mut action, by).await?;
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
    /// and matches; when nothing was written, pending after the backoff while the round has a
    /// send left, else failed (rule 3); conflict when it differs or is duplicated. Returns `None`
    /// (and changes nothing) if the action changed since `seen_revision`, or the lookup got no
    /// answer.
    #[tracing::instrument(skip_all, fields(key = %crate::domain::text::escape_untrusted(key.as_str()), verdict = report.verdict.as_str()))]
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
                // Rule 3: the sends of the round stay counted. A lookup that found nothing proves
                // the last send did not write, not that the next one will: it goes out after the
                // backoff, and only while the round has a send left.
                let retry = self.destinations.retry_policy(&action);
                let round_spent = retry.spent(action.attempts_in_round);
                let (event, target) = match report.verdict {
                    LookupVerdict::Found => (Event::LookupFound, State::Completed),
                    LookupVerdict::NotFound if round_spent => (Event::LookupNotFound, State::Failed),
                    LookupVerdict::NotFound => (Event::LookupNotFound, State::Pending),
                    LookupVerdict::Mismatch | LookupVerdict::Duplicates => (Event::LookupMismatch, State::Conflict),
                    // No answer settles nothing: it is kept by `keep_failed_lookup`, and nothing
                    // is applied here.
                    LookupVerdict::Failed => return Ok(None),
                };
                let transition = action.transition(event, target, now)?;
                let mut detail = report.detail.clone();
                if report.verdict == LookupVerdict::Found {
                    action.destination_id.clone_from(&report.destination_id);
                }
                if report.verdict == LookupVerdict::NotFound {
                    // Known not written: a failure from here on may again be called `failed`.
                    action.may_have_written = false;
                    let sends = action.attempts_in_round;
                    let then = if action.state == State::Failed {
                        format!("not written, and the round has no send left (at most {})", retry.max_attempts)
                    } else {
                        let wait = retry.backoff(sends, None, fastrand::f64());
                        action.not_before = Some(now + wait);
                        format!(
                            "not written; send {} of {} after {} ms",
                            sends + 1,
                            retry.max_attempts,
                            wait.as_millis()
                        )
                    };
                    if action.state == State::Failed {
                        action.last_error = Some(format!("a lookup found nothing: {then}"));
                    }
                    detail = Some(match detail {
                        Some(found) => format!("{found}; {then}"),
                        None => then,
                    });
                }
                let by = Writer { routing: &self.destinations, actor, actor_kind, now };
                write_action(tx, &mut action, by).await?;
                tx.insert_lookup(&lookup_record(&action.key, actor, report, now)).await?;
                tx.append_audit(&audit_entry(&action, transition, actor, actor_kind, detail, now)).await?;
                // An update found at the destination is taken on by the action it updates.
                take_on_completed_update(tx, &action, by).await?;
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

    /// Keeps a lookup of an `unknown` action that got no answer it could judge, as evidence
    /// beside the others (verdict `failed`): it settles nothing and changes nothing else, and the
    /// worker counts such lookups towards their own bound ([`crate::domain::RetryPolicy::lookup_due`]).
    /// Returns `false` (and keeps nothing) when the action is no longer `unknown`.
    pub async fn keep_failed_lookup(
        &self,
        key: &ActionKey,
        actor: &str,
        failure: &str,
        evidence: &crate::domain::Evidence,
    ) -> Result<bool, LedgerError> {
        self.transact(|tx, now, _| {
            Box::pin(async move {
                let action = tx.lock_action(key).await?.ok_or_else(|| LedgerError::NotFound(key.to_string()))?;
                if action.state != State::Unknown {
                    return Ok(false);
                }
                let report = LookupReport {
                    verdict: LookupVerdict::Failed,
                    records: 0,
                    destination_id: None,
                    evidence: evidence.clone(),
                    detail: Some(failure.to_owned()),
                };
                tx.insert_lookup(&lookup_record(&action.key, actor, &report, now)).await?;
                Ok(true)
            })
        })
        .await
    }

    /// Keeps a person's lookup of an action that is not `unknown`: what was found goes into the
    /// action's lookups as evidence and into its audit trail (`looked_up`, in the person's name),
    /// and the state does not change, since only an uncertain outcome is settled by a lookup.
    /// Returns `None` (and keeps nothing) if the action changed since `seen_revision`, or became
    /// `unknown` meanwhile (then it is for [`Ledger::settle_unknown`]); refused when a purge
    /// reduced it to its tombstone ([`Ledger::refuse_if_purged`]).
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
                if let Some(purge) = purge_of_settled(tx, &action).await? {
                    return Err(Refusal::Purged {
                        verb: "look up",
                        key: action.key.clone(),
                        state: action.state,
                        run: purge.id,
                        at: purge.at,
                    }
                    .into());
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
}

/// Records the unfinished attempts of `action` as cut off, before a takeover or hold moves its
/// expired claim on: their requests may have been sent, so the action may have
/// written (rule 2), and a crash is not an error before writing, so they do not count towards
/// the round's `max_attempts` (rule 3).
pub(super) async fn cut_off<T: LedgerTx>(tx: &mut T, action: &mut ActionRecord) -> Result<(), LedgerError> {
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

/// What a lookup found, as kept with the action: its evidence body cut to the kept size.
pub(super) fn lookup_record(key: &ActionKey, actor: &str, report: &LookupReport, now: Timestamp) -> LookupRecord {
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
