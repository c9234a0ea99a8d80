//! Row mapping: turns the rows the statements return into domain records, reading every column by
//! name, so that the order of a statement's columns never matters.

use super::{LookupFailures, StoreError};
use crate::domain::record::from_millis;
use crate::domain::{
    Acknowledgement, ActionKey, ActionRecord, ActorKind, Attempt, AttemptOutcome, AuditEntry, Delivery, Event,
    Evidence, LookupRecord, LookupVerdict, Payload, Proposal, ProposalDecision, ProposalRecord, PurgeCounts,
    PurgeRecord, RefusedSubmission, State, SubmitOutcome, Timestamp,
};

/// Typed access to a result row by column name.
pub trait Columns {
    fn int(&self, column: &str) -> Result<i64, sqlx::Error>;
    fn opt_int(&self, column: &str) -> Result<Option<i64>, sqlx::Error>;
    fn text(&self, column: &str) -> Result<String, sqlx::Error>;
    fn opt_text(&self, column: &str) -> Result<Option<String>, sqlx::Error>;
    fn flag(&self, column: &str) -> Result<bool, sqlx::Error>;
}

fn corrupt(what: &str, value: &str) -> StoreError {
    StoreError::Corrupt(format!("{what} {value:?}"))
}

fn state(text: &str) -> Result<State, StoreError> {
    text.parse().map_err(|_| corrupt("state", text))
}

/// An action's key and a number from one row: attempts counted, attempt ids inserted.
pub(crate) fn keyed_number(
    row: &impl Columns,
    key_column: &str,
    number_column: &str,
) -> Result<(ActionKey, i64), StoreError> {
    Ok((key(&row.text(key_column)?)?, row.int(number_column)?))
}

/// One `after` link: an action's key and the key it waits for.
pub(crate) fn after_link(row: &impl Columns) -> Result<(ActionKey, ActionKey), StoreError> {
    Ok((key(&row.text("key")?)?, key(&row.text("after_key")?)?))
}

fn key(text: &str) -> Result<ActionKey, StoreError> {
    ActionKey::parse_existing(text).map_err(|_| corrupt("action key", text))
}

/// A row of PostgreSQL's claim that starts attempts ([`super::statements::pg_claim_and_start_sql`]):
/// the action as claimed, before its attempt started (the claim as every caller knows it), and the
/// attempt started with it.
/// An attempt as the statements that start attempts answer it: its action's key, number and id.
pub(crate) fn attempt_started_from_row(row: &impl Columns) -> Result<super::AttemptStarted, StoreError> {
    let (key, number) = keyed_number(row, "action_key", "number")?;
    Ok(super::AttemptStarted { key, number, id: row.int("id")? })
}

pub(crate) fn claimed_from_row(row: &impl Columns) -> Result<super::Claimed, StoreError> {
    let mut action = action_from_row(row)?;
    if row.int("starts")? == 0 {
        return Ok(super::Claimed { action, started: None });
    }
    let started = super::AttemptStarted {
        key: action.key.clone(),
        number: row.int("attempt_number")?,
        id: row.int("attempt_id")?,
    };
    action.attempts -= 1;
    action.attempts_in_round -= 1;
    action.first_sent_at = row.opt_int("claimed_first_sent_at")?.map(from_millis);
    action.window_started_at = row.opt_int("claimed_window_started_at")?.map(from_millis);
    Ok(super::Claimed { action, started: Some(started) })
}

pub(crate) fn action_from_row(row: &impl Columns) -> Result<ActionRecord, StoreError> {
    let proposal = match (row.opt_text("proposed_payload")?, row.opt_text("proposed_fingerprint")?) {
        (Some(payload), Some(fingerprint)) => Some(Proposal {
            payload: Payload::from_stored(payload, fingerprint),
            source_version: row.opt_int("proposed_source_version")?,
        }),
        _ => None,
    };
    Ok(ActionRecord {
        id: row.int("id")?,
        key: key(&row.text("key")?)?,
        state: state(&row.text("state")?)?,
        payload: Payload::from_stored(row.text("payload")?, row.text("fingerprint")?),
        proposal,
        resume_state: row.opt_text("resume_state")?.as_deref().map(state).transpose()?,
        source: row.opt_text("source")?,
        source_version: row.opt_int("source_version")?,
        destination: row.opt_text("destination")?,
        after: row.opt_text("after_key")?.as_deref().map(key).transpose()?,
        claimed_by: row.opt_text("claimed_by")?,
        ownership_version: row.int("ownership_version")?,
        revision: row.int("revision")?,
        lease_expires_at: row.opt_int("lease_expires_at")?.map(from_millis),
        not_before: row.opt_int("not_before")?.map(from_millis),
        attempts: row.int("attempts")?,
        attempts_in_round: row.int("attempts_in_round")?,
        assignee: row.opt_text("assignee")?,
        destination_id: row.opt_text("destination_id")?,
        first_sent_at: row.opt_int("first_sent_at")?.map(from_millis),
        window_started_at: row.opt_int("window_started_at")?.map(from_millis),
        late_results: row.int("late_results")?,
        old_worker_may_act: row.flag("old_worker_may_act")?,
        may_have_written: row.flag("may_have_written")?,
        last_error: row.opt_text("last_error")?,
        created_at: from_millis(row.int("created_at")?),
        updated_at: from_millis(row.int("updated_at")?),
        payload_revision: row.int("payload_revision")?,
        idempotency_key: row.opt_text("idempotency_key")?,
        updates: row.opt_text("updates_key")?.as_deref().map(key).transpose()?,
        updates_destination_id: row.opt_text("updates_destination_id")?,
    })
}

pub(crate) fn delivery_from_row(row: &impl Columns) -> Result<Delivery, StoreError> {
    let outcome = row.text("outcome")?;
    Ok(Delivery {
        id: row.int("id")?,
        key: key(&row.text("action_key")?)?,
        event_id: row.opt_text("event_id")?,
        source: row.opt_text("source")?,
        source_version: row.opt_int("source_version")?,
        fingerprint: row.text("fingerprint")?,
        outcome: SubmitOutcome::parse(&outcome).ok_or_else(|| corrupt("delivery outcome", &outcome))?,
        received_at: from_millis(row.int("received_at")?),
    })
}

pub(crate) fn proposal_from_row(row: &impl Columns) -> Result<ProposalRecord, StoreError> {
    let decision = row.opt_text("decision")?;
    Ok(ProposalRecord {
        id: row.int("id")?,
        key: key(&row.text("action_key")?)?,
        payload: Payload::from_stored(row.text("payload")?, row.text("fingerprint")?),
        source: row.opt_text("source")?,
        event_id: row.opt_text("event_id")?,
        source_version: row.opt_int("source_version")?,
        received_at: from_millis(row.int("received_at")?),
        decision: decision
            .as_deref()
            .map(|d| ProposalDecision::parse(d).ok_or_else(|| corrupt("proposal decision", d)))
            .transpose()?,
        decided_by: row.opt_text("decided_by")?,
        decided_at: row.opt_int("decided_at")?.map(from_millis),
    })
}

pub(crate) fn attempt_from_row(row: &impl Columns) -> Result<Attempt, StoreError> {
    let outcome = row
        .opt_text("outcome")?
        .map(|o| AttemptOutcome::parse(&o).ok_or_else(|| corrupt("attempt outcome", &o)))
        .transpose()?;
    Ok(Attempt {
        id: row.int("id")?,
        key: key(&row.text("action_key")?)?,
        number: row.int("number")?,
        worker: row.text("worker")?,
        ownership_version: row.int("ownership_version")?,
        started_at: from_millis(row.int("started_at")?),
        ended_at: row.opt_int("ended_at")?.map(from_millis),
        outcome,
        error: row.opt_text("error")?,
        evidence: Evidence {
            status: row.opt_int("response_status")?,
            destination_id: row.opt_text("destination_id")?,
            body: row.opt_text("response_body")?,
        },
        idempotency_key: row.opt_text("idempotency_key")?,
        stale: row.flag("stale")?,
        acknowledged: match (row.opt_text("acknowledged_by")?, row.opt_int("acknowledged_at")?) {
            (Some(by), Some(at)) => Some(Acknowledgement { by, at: from_millis(at) }),
            _ => None,
        },
    })
}

pub(crate) fn audit_from_row(row: &impl Columns) -> Result<AuditEntry, StoreError> {
    let kind = row.text("actor_kind")?;
    let event_text = row.text("event")?;
    let event: Event = serde_json::from_value(serde_json::Value::String(event_text.clone()))
        .map_err(|_| corrupt("audit event", &event_text))?;
    Ok(AuditEntry {
        id: row.int("id")?,
        key: key(&row.text("action_key")?)?,
        at: from_millis(row.int("at")?),
        actor: row.text("actor")?,
        actor_kind: ActorKind::parse(&kind).ok_or_else(|| corrupt("actor kind", &kind))?,
        event,
        from_state: row.opt_text("from_state")?.as_deref().map(state).transpose()?,
        to_state: state(&row.text("to_state")?)?,
        ownership_version: row.int("ownership_version")?,
        revision: row.int("revision")?,
        reason: row.opt_text("reason")?,
    })
}

pub(crate) fn refusal_from_row(row: &impl Columns) -> Result<RefusedSubmission, StoreError> {
    Ok(RefusedSubmission {
        id: row.int("id")?,
        received_at: from_millis(row.int("received_at")?),
        key_excerpt: row.opt_text("key_excerpt")?,
        problem: row.text("problem")?,
        message: row.text("message")?,
        event_id: row.opt_text("event_id")?,
        source: row.opt_text("source")?,
        destination: row.opt_text("destination")?,
    })
}

pub(crate) fn lookup_from_row(row: &impl Columns) -> Result<LookupRecord, StoreError> {
    let verdict = row.text("verdict")?;
    Ok(LookupRecord {
        id: row.int("id")?,
        key: key(&row.text("action_key")?)?,
        at: from_millis(row.int("at")?),
        actor: row.text("actor")?,
        verdict: LookupVerdict::parse(&verdict).ok_or_else(|| corrupt("lookup verdict", &verdict))?,
        records: row.int("records")?,
        destination_id: row.opt_text("destination_id")?,
        evidence: Evidence {
            status: row.opt_int("response_status")?,
            destination_id: row.opt_text("destination_id")?,
            body: row.opt_text("response_body")?,
        },
        detail: row.opt_text("detail")?,
    })
}

pub(crate) fn purge_from_row(row: &impl Columns) -> Result<PurgeRecord, StoreError> {
    let states = row.text("states")?;
    let older_than_ms = row.int("older_than_ms")?;
    Ok(PurgeRecord {
        id: row.int("id")?,
        at: from_millis(row.int("at")?),
        owner: row.text("owner")?,
        reason: row.text("reason")?,
        older_than: std::time::Duration::from_millis(
            u64::try_from(older_than_ms).map_err(|_| corrupt("purge window", &older_than_ms.to_string()))?,
        ),
        settled_before: from_millis(row.int("settled_before")?),
        states: states.split(',').map(state).collect::<Result<_, _>>()?,
        counts: PurgeCounts {
            actions: row.int("actions")?,
            deliveries: row.int("deliveries")?,
            attempts: row.int("attempts")?,
            lookups: row.int("lookups")?,
        },
    })
}

pub(crate) fn state_pair_from_row(row: &impl Columns) -> Result<(State, State), StoreError> {
    Ok((state(&row.text("from_state")?)?, state(&row.text("to_state")?)?))
}

/// When the last backoff of a destination's pending actions ends.
pub(crate) fn backoff_from_row(row: &impl Columns) -> Result<(Option<String>, Timestamp), StoreError> {
    Ok((row.opt_text("destination")?, from_millis(row.int("until")?)))
}

/// A destination and when its longest-waiting claimable action became claimable, from
/// `claimable_since_by_destination`.
pub(crate) fn claimable_since_from_row(row: &impl Columns) -> Result<(Option<String>, Timestamp), StoreError> {
    Ok((row.opt_text("destination")?, from_millis(row.int("since")?)))
}

pub(crate) fn lookup_failures_from_row(row: &impl Columns) -> Result<LookupFailures, StoreError> {
    Ok(LookupFailures {
        key: row.text("action_key")?,
        failures: row.int("failures")?,
        last_at: from_millis(row.int("last_at")?),
    })
}

pub(crate) fn state_count_from_row(row: &impl Columns) -> Result<(State, i64), StoreError> {
    Ok((state(&row.text("state")?)?, row.int("count")?))
}

/// An action's key and state, from `select_states`.
pub(crate) fn key_state_from_row(row: &impl Columns) -> Result<(ActionKey, State), StoreError> {
    Ok((key(&row.text("key")?)?, state(&row.text("state")?)?))
}

/// One state's figures from [`super::statements::LEDGER_STATS`].
pub(crate) fn state_figures_from_row(row: &impl Columns) -> Result<super::StateFigures, StoreError> {
    Ok(super::StateFigures {
        state: state(&row.text("state")?)?,
        count: row.int("count")?,
        oldest_change: row.opt_int("oldest")?.map(from_millis),
        expired_leases: row.opt_int("expired")?.unwrap_or(0),
    })
}

/// Every sqlx row type whose database decodes these Rust types.
impl<R> Columns for R
where
    R: sqlx::Row,
    for<'c> &'c str: sqlx::ColumnIndex<R>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> bool: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    fn int(&self, column: &str) -> Result<i64, sqlx::Error> {
        self.try_get(column)
    }
    fn opt_int(&self, column: &str) -> Result<Option<i64>, sqlx::Error> {
        self.try_get(column)
    }
    fn text(&self, column: &str) -> Result<String, sqlx::Error> {
        self.try_get(column)
    }
    fn opt_text(&self, column: &str) -> Result<Option<String>, sqlx::Error> {
        self.try_get(column)
    }
    fn flag(&self, column: &str) -> Result<bool, sqlx::Error> {
        self.try_get(column)
    }
}
