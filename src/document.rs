//! The JSON documents the front ends answer with: `show --json`, `list --json` and the other
//! `--json` outputs of the command line, and the same documents over HTTP (`actionledger serve`).
//! Written once here so that both say the same thing in the same shape.

use crate::domain::text::escape_untrusted;
use crate::domain::{
    ActionKey, ActionRecord, Attempt, AuditEntry, Blocked, Delivery, LookupRecord, ProposalRecord, PurgeRecord,
    RefusedSubmission, Timestamp,
};
use crate::ledger::{ActionDetail, ManualOutcome, ManualRequest, SubmitReport};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// A recorded time as the documents show it: RFC 3339 in UTC, to the millisecond.
pub fn time(t: Timestamp) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn opt_time(t: Option<Timestamp>) -> Value {
    t.map_or(Value::Null, |t| Value::String(time(t)))
}

/// The JSON form of an action, shared by every command that returns one.
pub fn action_json(a: &ActionRecord) -> Value {
    json!({
        "id": a.id,
        "key": a.key.as_str(),
        "state": a.state,
        "version": a.revision,
        "ownership_version": a.ownership_version,
        "payload": a.payload.value(),
        "fingerprint": a.payload.fingerprint().as_str(),
        "proposed_payload": a.proposal.as_ref().map(|p| p.payload.value()),
        "proposed_fingerprint": a.proposal.as_ref().map(|p| p.payload.fingerprint().as_str()),
        "proposed_source_version": a.proposal.as_ref().and_then(|p| p.source_version),
        "payload_revision": a.payload_revision,
        "idempotency_key": a.sending_key(),
        "updates": a.updates.as_ref().map(crate::domain::ActionKey::as_str),
        "updates_destination_id": a.updates_destination_id,
        "source": a.source,
        "source_version": a.source_version,
        "destination": a.destination,
        "after": a.after.as_ref().map(crate::domain::ActionKey::as_str),
        "claimed_by": a.claimed_by,
        "lease_expires_at": opt_time(a.lease_expires_at),
        "not_before": opt_time(a.not_before),
        "attempts": a.attempts,
        "assignee": a.assignee,
        "destination_id": a.destination_id,
        "first_sent_at": opt_time(a.first_sent_at),
        "window_started_at": opt_time(a.window_started_at),
        "late_results": a.late_results,
        "old_worker_may_act": a.old_worker_may_act,
        "last_error": a.last_error,
        "created_at": time(a.created_at),
        "updated_at": time(a.updated_at),
    })
}

/// An action as the reads show it (`list`, `show`, the HTTP API's reads): [`action_json`] with
/// `blocked`, `null` or why the action cannot run until a person acts. The answers to a
/// submission or a command leave `blocked` out rather than guess it.
pub fn shown_action_json(a: &ActionRecord, blocked: Option<&Blocked>) -> Value {
    let mut value = action_json(a);
    value["blocked"] = blocked.map_or(
        Value::Null,
        |b| json!({ "after": b.after.as_str(), "after_state": b.after_state, "reason": b.reason() }),
    );
    value
}

pub(crate) fn delivery_json(d: &Delivery) -> Value {
    json!({
        "event_id": d.event_id, "source": d.source, "source_version": d.source_version,
        "fingerprint": d.fingerprint, "outcome": d.outcome, "received_at": time(d.received_at),
    })
}

pub(crate) fn attempt_json(a: &Attempt) -> Value {
    json!({
        "number": a.number, "worker": a.worker, "ownership_version": a.ownership_version,
        "started_at": time(a.started_at), "ended_at": opt_time(a.ended_at), "outcome": a.outcome,
        "error": a.error, "stale": a.stale, "idempotency_key": a.idempotency_key,
        "acknowledged_by": a.acknowledged.as_ref().map(|k| k.by.as_str()),
        "acknowledged_at": opt_time(a.acknowledged.as_ref().map(|k| k.at)),
        "evidence": {
            "status": a.evidence.status, "destination_id": a.evidence.destination_id, "body": a.evidence.body,
        },
    })
}

pub(crate) fn lookup_json(l: &LookupRecord) -> Value {
    json!({
        "at": time(l.at), "actor": l.actor, "verdict": l.verdict, "records": l.records,
        "destination_id": l.destination_id, "detail": l.detail,
        "evidence": { "status": l.evidence.status, "body": l.evidence.body },
    })
}

pub(crate) fn audit_json(e: &AuditEntry) -> Value {
    json!({
        "at": time(e.at), "actor": e.actor, "actor_kind": e.actor_kind, "event": e.event,
        "from": e.from_state, "to": e.to_state, "ownership_version": e.ownership_version,
        "version": e.revision, "reason": e.reason,
    })
}

/// A purge run.
pub fn purge(p: &PurgeRecord) -> Value {
    json!({
        "run": p.id,
        "at": time(p.at),
        "owner": p.owner,
        "reason": p.reason,
        "older_than": crate::config::duration_text::format(p.older_than),
        "settled_before": time(p.settled_before),
        "states": p.states,
        "counts": p.counts,
    })
}

/// A submission's outcome and the action as it now stands (`submit --json`).
pub fn submitted(report: &SubmitReport) -> Value {
    json!({ "outcome": report.outcome, "explanation": explanation(report), "action": action_json(&report.action) })
}

/// What a submission's outcome means, in the words the CLI prints and the HTTP API answers: the
/// facts only, naming no command of either.
pub fn explanation(report: &SubmitReport) -> String {
    let a = &report.action;
    let key = escape_untrusted(a.key.as_str());
    match report.outcome {
        crate::domain::SubmitOutcome::Created => format!("recorded {key} as pending"),
        crate::domain::SubmitOutcome::Duplicate => {
            format!(
                "{key} is already recorded with this payload ({}); delivery recorded, nothing else changed",
                a.state
            )
        }
        crate::domain::SubmitOutcome::Stale => {
            format!("{key} has a newer source version recorded; delivery recorded, nothing changed")
        }
        crate::domain::SubmitOutcome::Conflict if report.dependency.is_some() => {
            let dependency = report.dependency.as_ref().map(dependency_explanation).unwrap_or_default();
            format!("{key} {dependency}")
        }
        // Only a purged action refuses to keep a proposal (rule 7).
        crate::domain::SubmitOutcome::Conflict if a.proposal.is_none() => format!(
            "{key} was {} and has been purged, with a different payload; this one is not kept and nothing runs; \
             submit a changed action under a new key",
            a.state
        ),
        crate::domain::SubmitOutcome::Conflict => format!(
            "{key} is recorded with a different payload; this one is kept as a proposal for a person to approve \
             or reject; the action is {}",
            a.state
        ),
    }
}

/// What a delivery that named another action to wait for changed, after the action's key.
fn dependency_explanation(conflict: &crate::ledger::DependencyConflict) -> String {
    let name = |after: &Option<crate::domain::ActionKey>| {
        after.as_ref().map_or_else(|| "no other action".to_owned(), |k| escape_untrusted(k.as_str()))
    };
    let (asked, recorded) = (name(&conflict.asked), name(&conflict.recorded));
    if conflict.purged {
        format!(
            "was recorded waiting for {recorded} and has been purged; this delivery asks it to wait for {asked}: \
             nothing changed and nothing runs"
        )
    } else {
        format!(
            "is recorded waiting for {recorded}; this delivery of the same payload asks it to wait for {asked}: \
             the dependency it was recorded with stays, and a person decides (the action waits in conflict unless \
             it was already claimed or settled)"
        )
    }
}

/// One page of actions (`list --json`), each marked where it is blocked, with the cursor of the
/// next page when it may have more.
pub fn actions(actions: &[ActionRecord], blocked: &BTreeMap<ActionKey, Blocked>, limit: i64) -> Value {
    let items: Vec<Value> = actions.iter().map(|a| shown_action_json(a, blocked.get(&a.key))).collect();
    json!({ "actions": items, "next_before": next_cursor(actions.len(), limit, actions.last().map(|a| a.id)) })
}

/// One page of refused submissions (`list --refused --json`).
pub fn refused(refused: &[RefusedSubmission], limit: i64) -> Value {
    let items: Vec<Value> = refused
        .iter()
        .map(|r| {
            json!({
                "id": r.id, "received_at": time(r.received_at), "key": r.key_excerpt, "problem": r.problem,
                "message": r.message, "event_id": r.event_id, "source": r.source, "destination": r.destination,
            })
        })
        .collect();
    json!({ "refused": items, "next_before": next_cursor(refused.len(), limit, refused.last().map(|r| r.id)) })
}

/// Everything known about one action (`show --json`).
pub fn detail(d: &ActionDetail) -> Value {
    json!({
        "action": shown_action_json(&d.action, d.blocked.as_ref()),
        "purge": d.purge.as_ref().map(purge),
        "deliveries": d.deliveries.iter().map(delivery_json).collect::<Vec<_>>(),
        "attempts": d.attempts.iter().map(attempt_json).collect::<Vec<_>>(),
        "late_results": d.late_results().map(attempt_json).collect::<Vec<_>>(),
        "lookups": d.lookups.iter().map(lookup_json).collect::<Vec<_>>(),
        "proposals": d.proposals.iter().map(proposal_json).collect::<Vec<_>>(),
        "proposals_waiting": d.waiting_proposals().count(),
        "updates": d.updates.iter().map(|u| json!({
            "key": u.key.as_str(),
            "state": u.state,
            "payload_revision": crate::domain::manual::update_number(u),
            "fingerprint": u.payload.fingerprint().as_str(),
            "last_error": u.last_error,
            "summary": crate::domain::manual::describe_update(u, &d.action),
        })).collect::<Vec<_>>(),
        "audit": d.audit.iter().map(audit_json).collect::<Vec<_>>(),
        "retry_needs_confirm_not_written": d.retry_needs_check,
        "update": d.update_guard.map(|guard| json!({
            "condition": guard.as_str(),
            "overwrites": guard.overwrites(),
            "note": guard.describe(d.action.updates_destination_id.as_deref().unwrap_or("?")),
        })),
    })
}

/// A proposal kept for an action, waiting or decided.
fn proposal_json(p: &ProposalRecord) -> Value {
    json!({
        "fingerprint": p.payload.fingerprint().as_str(),
        "payload": p.payload.value(),
        "source": p.source,
        "event_id": p.event_id,
        "source_version": p.source_version,
        "received_at": time(p.received_at),
        "decision": p.decision,
        "decided_by": p.decided_by,
        "decided_at": opt_time(p.decided_at),
    })
}

/// What a person's command did (`retry --json` and the other commands).
pub fn manual(request: &ManualRequest, outcome: &ManualOutcome) -> Value {
    let a = &outcome.action;
    json!({
        "command": request.command.verb(),
        "by": request.person.as_str(),
        "from": outcome.transition.map(|t| t.from),
        "to": a.state,
        "action": action_json(a),
        "update": outcome.update.as_ref().map(action_json),
        "recreated": outcome.recreated.as_ref().map(action_json),
    })
}

/// The cursor of the next page: the last id shown, when the page is full.
pub fn next_cursor(shown: usize, limit: i64, last_id: Option<i64>) -> Option<i64> {
    (i64::try_from(shown).unwrap_or(i64::MAX) >= limit).then_some(last_id).flatten()
}
