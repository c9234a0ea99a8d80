//! Every statement the stores send, by name: the texts are SQL files in `src/store/sql/`, one per
//! table (and one for the worker's claims, one for migrations, one for PostgreSQL's own), each
//! statement headed by what it does, why, and what its parameters are. This module picks them
//! out at compile time ([`super::sql_text`]) and binds their values.
//!
//! Both dialects accept `$1`-style parameters and `RETURNING`, and both keep times as integer
//! milliseconds of database time, so most statements are written once; the few differences are
//! the two [`Dialect`]s at the top and the statements named `sqlite_*` and `pg_*`. Statements
//! for many rows are templates whose `{holes}` take the parameters of as many rows, from a
//! column list that also binds their values ([`super::batch`]); SQLite's use `?` in order (see
//! [`Params::InOrder`]).
//!
//! Each statement on a hot path must be served by an index: `tests/it/plans.rs` EXPLAINs these same
//! texts (see [`super::hot_statements`]); the snapshots in `src/store/snapshots/` show every text
//! exactly as it is sent, for both dialects.

use super::backend::{Backend, Dialect, Params, Statement};
use super::batch::{Cell, Column, binds_per_row, names, set_from, values, values_from};
use super::sql_text::{Template, named, template};
use super::{AttemptStart, ClaimScope, ListFilter, ListOrder, PageStart};
use crate::domain::{
    ActionKey, ActionRecord, Attempt, AttemptOutcome, AuditEntry, Delivery, LookupRecord, RefusedSubmission, State,
    Timestamp,
};
use Cell::{BigInt, Boolean, Constant, Text};

const ACTIONS: &str = include_str!("sql/actions.sql");
const ATTEMPTS: &str = include_str!("sql/attempts.sql");
const AUDIT: &str = include_str!("sql/audit.sql");
const CLAIMS: &str = include_str!("sql/claims.sql");
const DELIVERIES: &str = include_str!("sql/deliveries.sql");
const LOOKUPS: &str = include_str!("sql/lookups.sql");
const MIGRATIONS: &str = include_str!("sql/migrations.sql");
const POSTGRES_OWN: &str = include_str!("sql/postgres.sql");
const PROPOSALS: &str = include_str!("sql/proposals.sql");
const PURGES: &str = include_str!("sql/purges.sql");
const REFUSED: &str = include_str!("sql/refused.sql");

/// Every statement file, by name: for the tests that check each named statement is sent.
#[cfg(test)]
pub(crate) const FILES: [(&str, &str); 11] = [
    ("actions.sql", ACTIONS),
    ("attempts.sql", ATTEMPTS),
    ("audit.sql", AUDIT),
    ("claims.sql", CLAIMS),
    ("deliveries.sql", DELIVERIES),
    ("lookups.sql", LOOKUPS),
    ("migrations.sql", MIGRATIONS),
    ("postgres.sql", POSTGRES_OWN),
    ("proposals.sql", PROPOSALS),
    ("purges.sql", PURGES),
    ("refused.sql", REFUSED),
];

/// SQLite runs inside this process, as one writer at a time: a write transaction takes the
/// database's write lock as it begins (`BEGIN IMMEDIATE`), so what it reads stays true until it
/// commits and there is nothing left to lock row by row; its clock is this host's, so asking it
/// would be one more statement per transaction for the same answer.
pub(crate) const SQLITE: Dialect = Dialect {
    params: Params::InOrder,
    begin: "BEGIN IMMEDIATE",
    clock: None,
    lock_suffix: "",
    writes_in_one_statement: false,
    statements_in_one_command: true,
    purge_permission: None,
    after_links_lock: None,
    json_texts_of_third: "SELECT value FROM json_each($3)",
};

/// PostgreSQL serves many workers on many machines: rows read for a change are locked
/// `FOR UPDATE`, claims skip rows that another worker is claiming, and time is the server's.
pub(crate) const POSTGRES: Dialect = Dialect {
    params: Params::Numbered,
    begin: "BEGIN",
    clock: Some(named(POSTGRES_OWN, "clock")),
    lock_suffix: "\nFOR UPDATE",
    writes_in_one_statement: true,
    statements_in_one_command: false,
    purge_permission: Some(named(POSTGRES_OWN, "purge_permission")),
    after_links_lock: Some(named(POSTGRES_OWN, "after_links_lock")),
    json_texts_of_third: "SELECT json_array_elements_text($3::json)",
};

/// Whether a serve login acts as the worker and the reviewer on pools of their own (column `split`).
pub(crate) const PG_SERVING_DUTIES: &str = named(POSTGRES_OWN, "serving_duties");
/// Grants a serve login what it needs, in one step (migration 0102).
pub(crate) const PG_GRANT_SERVE: &str = named(POSTGRES_OWN, "grant_serve");

/// `$1, $2, ...` (or `?, ?, ...`): `count` parameters from parameter `first`.
fn param_list(params: Params, first: usize, count: usize) -> String {
    (first..first + count).map(|n| params.at(n)).collect::<Vec<_>>().join(", ")
}

fn bind_keys<'k, B: Backend>(statement: Statement<B>, keys: impl IntoIterator<Item = &'k ActionKey>) -> Statement<B> {
    keys.into_iter().fold(statement, |statement, key| statement.text(key.as_str()))
}

// Actions (sql/actions.sql).

pub(crate) const SELECT_ACTION: &str = named(ACTIONS, "select_action");
pub(crate) const AFTER_LINKS: &str = named(ACTIONS, "after_links");
const LOCK_ACTIONS: Template<2> = template(named(ACTIONS, "lock_actions"), ["{keys}", "{lock}"]);
const PG_LOCK_ACTIONS_NOW: Template<1> = template(named(ACTIONS, "pg_lock_actions_now"), ["{keys}"]);
const INSERT_ACTIONS: Template<2> = template(named(ACTIONS, "insert_actions"), ["{columns}", "{rows}"]);
const UPDATE_ACTIONS: Template<3> = template(named(ACTIONS, "update_actions"), ["{columns}", "{rows}", "{set}"]);
const SQLITE_UPDATE_ACTIONS_RETURNING_ID: Template<3> =
    template(named(ACTIONS, "sqlite_update_actions_returning_id"), ["{columns}", "{rows}", "{set}"]);
const PG_UPDATE_ACTIONS_WITH_DEFERRED: Template<8> = template(
    named(ACTIONS, "pg_update_actions_with_deferred"),
    [
        "{changed_columns}",
        "{changed_rows}",
        "{finished_columns}",
        "{finished_row}",
        "{finished_set}",
        "{audit_columns}",
        "{audit_rows}",
        "{changed_set}",
    ],
);
pub(crate) const RENEW_LEASE: &str = named(ACTIONS, "renew_lease");
const COUNT_ATTEMPTS: Template<4> = template(named(ACTIONS, "count_attempts"), ["{now}", "{now}", "{now}", "{claims}"]);
pub(crate) const COUNT_STALE_CLAIMS: &str = named(ACTIONS, "count_stale_claims");
pub(crate) const COUNT_LATE_RESULTS: &str = named(ACTIONS, "count_late_results");
const EXPIRED_CLAIMS: Template<1> = template(named(ACTIONS, "expired_claims"), ["{destinations}"]);
pub(crate) const PENDING_BACKOFFS: &str = named(ACTIONS, "pending_backoffs");
pub(crate) const LEDGER_STATS: &str = named(ACTIONS, "ledger_stats");
pub(crate) const CLAIMABLE_SINCE_BY_DESTINATION: &str = named(ACTIONS, "claimable_since_by_destination");
pub(crate) const COUNT_BY_STATE: &str = named(ACTIONS, "count_by_state");
const SELECT_STATES: Template<1> = template(named(ACTIONS, "select_states"), ["{keys}"]);
pub(crate) const COUNT_WAITING_BY_AFTER_STATE: &str = named(ACTIONS, "count_waiting_by_after_state");
pub(crate) const COUNT_PROPOSED_ELSEWHERE: &str = named(ACTIONS, "count_proposed_elsewhere");
const LIST_ACTIONS: &str = named(ACTIONS, "list_actions");
const COUNT_MATCHING_BY_STATE: Template<1> = template(named(ACTIONS, "count_matching_by_state"), ["{terms}"]);
const COUNT_MATCHING_NOTICES: Template<2> = template(named(ACTIONS, "count_matching_notices"), ["{now}", "{terms}"]);
pub(crate) const ENFORCED_PAIRS: &str = named(ACTIONS, "enforced_pairs");

/// See `lock_actions` in sql/actions.sql.
pub(crate) fn lock_actions_sql(dialect: Dialect, keys: usize) -> String {
    LOCK_ACTIONS.fill([&param_list(dialect.params, 1, keys), dialect.lock_suffix])
}

pub(crate) fn lock_actions<B: Backend>(keys: &[&ActionKey]) -> Statement<B> {
    bind_keys(Statement::new(lock_actions_sql(B::DIALECT, keys.len())), keys.iter().copied())
}

/// See `select_states` in sql/actions.sql.
pub(crate) fn select_states_sql(params: Params, keys: usize) -> String {
    SELECT_STATES.fill([&param_list(params, 1, keys)])
}

pub(crate) fn select_states<B: Backend>(keys: &[&ActionKey]) -> Statement<B> {
    bind_keys(Statement::new(select_states_sql(B::DIALECT.params, keys.len())), keys.iter().copied())
}

/// See `pg_lock_actions_now` in sql/actions.sql.
pub(crate) fn pg_lock_actions_now_sql(keys: usize) -> String {
    PG_LOCK_ACTIONS_NOW.fill([&param_list(Params::Numbered, 1, keys)])
}

pub(crate) fn pg_lock_actions_now<B: Backend>(keys: &[&ActionKey]) -> Statement<B> {
    bind_keys(Statement::new(pg_lock_actions_now_sql(keys.len())), keys.iter().copied())
}

/// A new action: pending, never claimed or attempted; an update action names the action it
/// updates.
pub(crate) const NEW_ACTION_ROW: &[Column<ActionRecord>] = &[
    ("key", Text(|a| Some(a.key.as_str()))),
    ("state", Constant("'pending'")),
    ("payload", Text(|a| Some(a.payload.canonical()))),
    ("fingerprint", Text(|a| Some(a.payload.fingerprint().as_str()))),
    ("source", Text(|a| a.source.as_deref())),
    ("source_version", BigInt(|a| a.source_version)),
    ("destination", Text(|a| a.destination.as_deref())),
    ("after_key", Text(|a| a.after.as_ref().map(ActionKey::as_str))),
    ("ownership_version", Constant("0")),
    ("revision", Constant("1")),
    ("attempts", Constant("0")),
    ("attempts_in_round", Constant("0")),
    ("payload_revision", Constant("1")),
    ("updates_key", Text(|a| a.updates.as_ref().map(ActionKey::as_str))),
    ("updates_destination_id", Text(|a| a.updates_destination_id.as_deref())),
    ("created_at", BigInt(|a| Some(a.created_at.timestamp_millis()))),
    // Created is the last change so far.
    ("updated_at", BigInt(|a| Some(a.created_at.timestamp_millis()))),
];

/// See `insert_actions` in sql/actions.sql.
pub(crate) fn insert_actions_sql(params: Params, rows: usize) -> String {
    INSERT_ACTIONS.fill([&names(NEW_ACTION_ROW), &values(params, rows, NEW_ACTION_ROW)])
}

pub(crate) fn insert_actions<B: Backend>(actions: &[ActionRecord]) -> Statement<B> {
    Statement::new(insert_actions_sql(B::DIALECT.params, actions.len())).rows(NEW_ACTION_ROW, actions)
}

/// Every mutable column of an action, the id that finds it and the revision it was read at.
pub(crate) const CHANGED_ACTION_ROW: &[Column<ActionRecord>] = &[
    ("id", BigInt(|a| Some(a.id))),
    ("state", Text(|a| Some(a.state.as_str()))),
    ("payload", Text(|a| Some(a.payload.canonical()))),
    ("fingerprint", Text(|a| Some(a.payload.fingerprint().as_str()))),
    ("proposed_payload", Text(|a| a.proposal.as_ref().map(|p| p.payload.canonical()))),
    ("proposed_fingerprint", Text(|a| a.proposal.as_ref().map(|p| p.payload.fingerprint().as_str()))),
    ("proposed_source_version", BigInt(|a| a.proposal.as_ref().and_then(|p| p.source_version))),
    ("resume_state", Text(|a| a.resume_state.map(State::as_str))),
    ("source", Text(|a| a.source.as_deref())),
    ("source_version", BigInt(|a| a.source_version)),
    ("destination", Text(|a| a.destination.as_deref())),
    ("after_key", Text(|a| a.after.as_ref().map(ActionKey::as_str))),
    ("claimed_by", Text(|a| a.claimed_by.as_deref())),
    ("ownership_version", BigInt(|a| Some(a.ownership_version))),
    ("lease_expires_at", BigInt(|a| a.lease_expires_at.map(|t| t.timestamp_millis()))),
    ("not_before", BigInt(|a| a.not_before.map(|t| t.timestamp_millis()))),
    ("attempts", BigInt(|a| Some(a.attempts))),
    ("attempts_in_round", BigInt(|a| Some(a.attempts_in_round))),
    ("assignee", Text(|a| a.assignee.as_deref())),
    ("destination_id", Text(|a| a.destination_id.as_deref())),
    ("first_sent_at", BigInt(|a| a.first_sent_at.map(|t| t.timestamp_millis()))),
    ("window_started_at", BigInt(|a| a.window_started_at.map(|t| t.timestamp_millis()))),
    ("late_results", BigInt(|a| Some(a.late_results))),
    ("old_worker_may_act", Boolean(|a| a.old_worker_may_act)),
    ("may_have_written", Boolean(|a| a.may_have_written)),
    ("last_error", Text(|a| a.last_error.as_deref())),
    ("payload_revision", BigInt(|a| Some(a.payload_revision))),
    ("idempotency_key", Text(|a| a.idempotency_key.as_deref())),
    ("updated_at", BigInt(|a| Some(a.updated_at.timestamp_millis()))),
    ("revision", BigInt(|a| Some(a.revision))),
];

/// The terms that write back [`CHANGED_ACTION_ROW`]: all but the id and revision that find the row.
fn changed_set() -> String {
    set_from("changed", CHANGED_ACTION_ROW, &["id", "revision"])
}

/// See `update_actions` in sql/actions.sql.
pub(crate) fn update_actions_sql(params: Params, rows: usize) -> String {
    UPDATE_ACTIONS.fill([&names(CHANGED_ACTION_ROW), &values(params, rows, CHANGED_ACTION_ROW), &changed_set()])
}

pub(crate) fn update_actions<B: Backend>(actions: &[&ActionRecord]) -> Statement<B> {
    Statement::new(update_actions_sql(B::DIALECT.params, actions.len()))
        .rows(CHANGED_ACTION_ROW, actions.iter().copied())
}

/// See `pg_update_actions_with_deferred` in sql/actions.sql: `rows` actions, one attempt,
/// `entries` audit entries.
pub(crate) fn pg_update_actions_with_deferred_sql(rows: usize, entries: usize) -> String {
    let attempt_param = 1 + rows * binds_per_row(CHANGED_ACTION_ROW);
    let entry_param = attempt_param + binds_per_row(FINISHED_ATTEMPT_ROW);
    PG_UPDATE_ACTIONS_WITH_DEFERRED.fill([
        &names(CHANGED_ACTION_ROW),
        &values(Params::Numbered, rows, CHANGED_ACTION_ROW),
        &names(FINISHED_ATTEMPT_ROW),
        &values_from(Params::Numbered, attempt_param, 1, FINISHED_ATTEMPT_ROW),
        &finished_set(),
        &names(AUDIT_ROW),
        &values_from(Params::Numbered, entry_param, entries, AUDIT_ROW),
        &changed_set(),
    ])
}

pub(crate) fn pg_update_actions_with_deferred<B: Backend>(
    actions: &[&ActionRecord],
    finished: &Attempt,
    entries: &[AuditEntry],
) -> Statement<B> {
    Statement::new(pg_update_actions_with_deferred_sql(actions.len(), entries.len()))
        .rows(CHANGED_ACTION_ROW, actions.iter().copied())
        .rows(FINISHED_ATTEMPT_ROW, [finished])
        .rows(AUDIT_ROW, entries)
}

/// SQLite: what a transaction writes back at the end of a result, as one command (see
/// [`Dialect::statements_in_one_command`]): `sqlite_update_actions_returning_id` for `actions`
/// (in sql/actions.sql), then the ends of `finished` attempts ([`finish_attempts_sql`]) and the
/// audit entries `entries` ([`append_audit`]) that the transaction deferred, each only where it
/// has rows. One hop to SQLite's thread instead of three while the write lock is held.
pub(crate) fn sqlite_update_actions_with_deferred<B: Backend>(
    actions: &[&ActionRecord],
    finished: &[Attempt],
    entries: &[AuditEntry],
) -> Statement<B> {
    Statement::new(sqlite_update_actions_with_deferred_sql(actions.len(), finished.len(), entries.len()))
        .rows(CHANGED_ACTION_ROW, actions.iter().copied())
        .rows(FINISHED_ATTEMPT_ROW, finished)
        .rows(AUDIT_ROW, entries)
}

/// The text of [`sqlite_update_actions_with_deferred`] for `actions` actions, `finished`
/// attempts and `entries` audit entries.
pub(crate) fn sqlite_update_actions_with_deferred_sql(actions: usize, finished: usize, entries: usize) -> String {
    let mut sql = SQLITE_UPDATE_ACTIONS_RETURNING_ID.fill([
        &names(CHANGED_ACTION_ROW),
        &values(Params::InOrder, actions, CHANGED_ACTION_ROW),
        &changed_set(),
    ]);
    if finished > 0 {
        sql.push_str(";\n");
        sql.push_str(&finish_attempts_sql(Params::InOrder, finished));
    }
    if entries > 0 {
        sql.push_str(";\n");
        sql.push_str(&append_audit_sql(Params::InOrder, entries));
    }
    sql
}

/// Most claims one attempt count names: its WHERE clause is an OR chain, and SQLite refuses an
/// expression tree deeper than 1,000.
pub(crate) const CLAIMS_PER_COUNT: usize = 400;

/// `(key = $n AND ownership_version = $n+1) OR ...` for `claims` claims from parameter `first`,
/// each two parameters further on than the last (`step` for statements that bind more per
/// claim), with the actions' table named `table` (a prefix such as `a.`, or nothing).
fn current_claims(params: Params, table: &str, first: usize, step: usize, claims: usize) -> String {
    (0..claims)
        .map(|i| {
            let n = first + step * i;
            format!("({table}key = {} AND {table}ownership_version = {})", params.at(n), params.at(n + 1))
        })
        .collect::<Vec<_>>()
        .join("\n       OR ")
}

/// See `count_attempts` in sql/actions.sql.
pub(crate) fn count_attempts_sql(params: Params, claims: usize) -> String {
    COUNT_ATTEMPTS.fill([&params.at(1), &params.at(2), &params.at(3), &current_claims(params, "", 4, 2, claims)])
}

pub(crate) fn count_attempts<B: Backend>(claims: &[(&ActionKey, i64)], now_ms: i64) -> Statement<B> {
    let statement =
        Statement::new(count_attempts_sql(B::DIALECT.params, claims.len())).int(now_ms).int(now_ms).int(now_ms);
    claims
        .iter()
        .fold(statement, |statement, (key, ownership_version)| statement.text(key.as_str()).int(*ownership_version))
}

/// A page of actions matching a filter, newest first (or oldest first, or most attempts first);
/// with `after_id`, the page before the cursor in that order (the caller turns it round): the
/// text of `list_actions` in sql/actions.sql, then each of the filter's terms with its value.
/// `state` and `destination` have an index with `id`, and the keyset cursors walk it.
pub(crate) fn list_actions<B: Backend>(filter: &ListFilter) -> Statement<B> {
    let mut statement = Statement::new(LIST_ACTIONS);
    match (filter.state, filter.or_proposed) {
        (Some(state), true) => {
            // Each half through its own index (`actions_state`, `actions_proposed`): an `OR` of
            // the two would walk every action on SQLite.
            statement =
                statement.push("\n  AND id IN (SELECT id FROM actions WHERE state = ").push_text(state.as_str());
            statement = statement.push(" UNION SELECT id FROM actions WHERE proposed_payload IS NOT NULL)");
        }
        (Some(state), false) => statement = statement.push("\n  AND state = ").push_text(state.as_str()),
        (None, _) => {}
    }
    if filter.late_results {
        statement = statement.push("\n  AND late_results > 0");
    }
    statement = matching(statement, filter);
    let oldest_first = match (filter.order, filter.state) {
        (ListOrder::MostAttempts, _) => return by_attempts(statement, filter),
        (order, Some(state)) if filter.or_proposed => return by_proposal(statement, filter, state, order),
        (order, _) => order == ListOrder::OldestFirst,
    };
    let (inclusive, last_page) = (filter.start == PageStart::AtCursor, filter.start == PageStart::Last);
    // The page after a cursor in the order shown, and the page before it (read the other way
    // round, and turned round by the caller).
    let (after, before) = match (oldest_first, inclusive) {
        (true, false) => ("\n  AND id > ", "\n  AND id < "),
        (true, true) => ("\n  AND id >= ", "\n  AND id < "),
        (false, false) => ("\n  AND id < ", "\n  AND id > "),
        (false, true) => ("\n  AND id <= ", "\n  AND id > "),
    };
    if let Some(id) = filter.before_id {
        statement = statement.push(after).push_int(id);
    }
    if let Some(id) = filter.after_id {
        statement = statement.push(before).push_int(id);
    }
    let order = if (filter.after_id.is_some() || last_page) == oldest_first {
        "\nORDER BY id DESC\nLIMIT "
    } else {
        "\nORDER BY id ASC\nLIMIT "
    };
    statement.push(order).push_int(filter.limit)
}

/// The rest of [`list_actions`] for the most-attempts order: attempts descending, ties newest
/// first. A cursor is a row id; its place in the order is the row's (attempts, id) as it is now,
/// read by a row-value subquery, so the console's windows stay ids. No index serves this order
/// (one on `attempts` would cost every started attempt its HOT update on PostgreSQL): the
/// pane's rows are scanned through their state's index and the first page kept; see the
/// console benchmark in docs/BENCHMARKS.md for what that costs on a big pane.
fn by_attempts<B: Backend>(mut statement: Statement<B>, filter: &ListFilter) -> Statement<B> {
    let cursor = " (SELECT attempts, id FROM actions WHERE id = ";
    if let Some(id) = filter.before_id {
        let after =
            if filter.start == PageStart::AtCursor { "\n  AND (attempts, id) <=" } else { "\n  AND (attempts, id) <" };
        statement = statement.push(after).push(cursor).push_int(id).push(")");
    }
    if let Some(id) = filter.after_id {
        statement = statement.push("\n  AND (attempts, id) >").push(cursor).push_int(id).push(")");
    }
    let order = if filter.after_id.is_some() || filter.start == PageStart::Last {
        "\nORDER BY attempts ASC, id ASC\nLIMIT "
    } else {
        "\nORDER BY attempts DESC, id DESC\nLIMIT "
    };
    statement.push(order).push_int(filter.limit)
}

/// The rest of [`list_actions`] for a pane of one state that also lists the other actions whose
/// proposal waits (the console's conflict pane): the pane's own state first, then the others;
/// within each, newest proposal first (its latest waiting proposal's `received_at`; an action no
/// waiting proposal explains, such as a conflict a lookup found, by when it last changed), ties by
/// id. Oldest first turns the times and ids round but keeps the pane's own state first. A cursor
/// is a row id; its place is the row's (group, time, id) as it is now, read by a row-value
/// subquery, so the console's windows stay ids and a page never skips or repeats a row. The rows
/// are found through `actions_state` and `actions_proposed` and sorted: no index has this order,
/// and the pane holds only what waits for a person.
fn by_proposal<B: Backend>(
    mut statement: Statement<B>,
    filter: &ListFilter,
    state: State,
    order: ListOrder,
) -> Statement<B> {
    let oldest_first = order == ListOrder::OldestFirst;
    // The group ranks in the direction of the order, so that one row value compares all three.
    let (own, others) = if oldest_first { (0, 1) } else { (1, 0) };
    // A state's name is one of a fixed set of words: written into the text, it needs no parameter.
    let place = |row: &str| {
        [
            format!("CASE WHEN {row}.state = '{}' THEN {own} ELSE {others} END", state.as_str()),
            format!(
                "COALESCE((SELECT MAX(proposals.received_at) FROM proposals WHERE proposals.action_key = {row}.key \
                 AND proposals.decision IS NULL), {row}.updated_at)"
            ),
            format!("{row}.id"),
        ]
    };
    let row = place("actions");
    let cursor = |statement: Statement<B>, op: &str, id: i64| {
        let text = format!(
            "\n  AND ({}) {op} (SELECT {} FROM actions AS cursor_row WHERE cursor_row.id = ",
            row.join(", "),
            place("cursor_row").join(", ")
        );
        statement.push(&text).push_int(id).push(")")
    };
    let inclusive = filter.start == PageStart::AtCursor;
    let (after, before) = match (oldest_first, inclusive) {
        (true, false) => (">", "<"),
        (true, true) => (">=", "<"),
        (false, false) => ("<", ">"),
        (false, true) => ("<=", ">"),
    };
    if let Some(id) = filter.before_id {
        statement = cursor(statement, after, id);
    }
    if let Some(id) = filter.after_id {
        statement = cursor(statement, before, id);
    }
    let ascending = (filter.after_id.is_some() || filter.start == PageStart::Last) != oldest_first;
    let direction = if ascending { "ASC" } else { "DESC" };
    let order = row.iter().map(|term| format!("{term} {direction}")).collect::<Vec<_>>().join(",\n         ");
    statement.push(&format!("\nORDER BY {order}\nLIMIT ")).push_int(filter.limit)
}

/// The terms of a filter a person types (destination, owner or assignee, age, key text, and
/// creation time), added to a statement's `WHERE`.
fn matching<B: Backend>(mut statement: Statement<B>, filter: &ListFilter) -> Statement<B> {
    if let Some(destination) = &filter.destination {
        statement = statement.push("\n  AND destination = ").push_text(destination.as_str());
    }
    if let Some(owner) = &filter.owner {
        statement = statement.push("\n  AND (claimed_by = ").push_text(owner.as_str());
        statement = statement.push(" OR assignee = ").push_text(owner.as_str()).push(")");
    }
    if let Some(since) = filter.created_since {
        statement = statement.push("\n  AND created_at >= ").push_int(since.timestamp_millis());
    }
    if let Some(before) = filter.updated_before {
        statement = statement.push("\n  AND updated_at < ").push_int(before.timestamp_millis());
    }
    if let Some(text) = &filter.key_contains {
        statement = statement.push("\n  AND key LIKE ").push_text(contains_pattern(text).as_str()).push(" ESCAPE '\\'");
    }
    statement
}

/// See `count_matching_by_state` in sql/actions.sql: the filter's terms in its hole.
pub(crate) fn count_matching_by_state<B: Backend>(filter: &ListFilter) -> Statement<B> {
    let ([head], tail) = COUNT_MATCHING_BY_STATE.pieces();
    matching(Statement::new(head), filter).push(tail)
}

/// See `count_matching_notices` in sql/actions.sql: the time, then the filter's terms in its hole.
pub(crate) fn count_matching_notices<B: Backend>(filter: &ListFilter, now: Timestamp) -> Statement<B> {
    // Every parameter pushed in order: SQLite numbers a `$1` and the `?` after it apart.
    let ([head, middle], tail) = COUNT_MATCHING_NOTICES.pieces();
    matching(Statement::new(head).push_int(now.timestamp_millis()).push(middle), filter).push(tail)
}

/// The terms of a filter a person types, as refused submissions have them: the destination, the
/// key as far as it was kept, and the age (from when it was received). A refused submission is
/// nobody's: a filter on an owner or assignee matches none.
fn refused_matching<B: Backend>(mut statement: Statement<B>, filter: &ListFilter) -> Statement<B> {
    if let Some(destination) = &filter.destination {
        statement = statement.push("\n  AND destination = ").push_text(destination.as_str());
    }
    if filter.owner.is_some() {
        statement = statement.push("\n  AND 1 = 0");
    }
    if let Some(before) = filter.updated_before {
        statement = statement.push("\n  AND received_at < ").push_int(before.timestamp_millis());
    }
    if let Some(text) = &filter.key_contains {
        let pattern = contains_pattern(text);
        statement = statement.push("\n  AND key_excerpt LIKE ").push_text(pattern.as_str()).push(" ESCAPE '\\'");
    }
    statement
}

/// A page of refused submissions matching a filter's terms, newest first, older than its
/// `before_id`: the text of `list_refused` in sql/refused.sql, then the terms, cursor and limit.
pub(crate) fn list_refused<B: Backend>(filter: &ListFilter) -> Statement<B> {
    let mut statement = refused_matching(Statement::new(LIST_REFUSED), filter);
    if let Some(id) = filter.before_id {
        statement = statement.push("\n  AND id < ").push_int(id);
    }
    statement.push("\nORDER BY id DESC\nLIMIT ").push_int(filter.limit)
}

/// See `count_refused` in sql/refused.sql: the filter's terms in its hole.
pub(crate) fn count_refused<B: Backend>(filter: &ListFilter) -> Statement<B> {
    let ([head], tail) = COUNT_REFUSED.pieces();
    refused_matching(Statement::new(head), filter).push(tail)
}

/// A LIKE pattern matching `text` anywhere, with LIKE's own wildcards taken literally.
pub(crate) fn contains_pattern(text: &str) -> String {
    let escaped = text.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_");
    format!("%{escaped}%")
}

// The worker's claims and the attempts they start (sql/claims.sql).

/// See `expired_claims` in sql/actions.sql.
pub(crate) fn expired_claims_sql(dialect: Dialect) -> String {
    EXPIRED_CLAIMS.fill([dialect.json_texts_of_third])
}

pub(crate) fn expired_claims<B: Backend>(now: Timestamp, limit: i64, scope: &ClaimScope) -> Statement<B> {
    Statement::new(expired_claims_sql(B::DIALECT))
        .int(now.timestamp_millis())
        .int(limit)
        .text(scope.destinations_json().as_deref())
        .flag(scope.include_unassigned)
}

/// See `sqlite_claim` in sql/claims.sql. PostgreSQL claims with [`pg_claim_with_audit_sql`] or
/// [`pg_claim_and_start_sql`], which write the audit entries in the same statement.
const SQLITE_CLAIM: Template<1> = template(named(CLAIMS, "sqlite_claim"), ["{only_key}"]);

/// See `sqlite_claim` in sql/claims.sql: the text for a worker's claim, or for the claim of one
/// action by its key.
pub(crate) fn sqlite_claim_sql(one_key: bool) -> String {
    SQLITE_CLAIM.fill([only_key(one_key, 7)])
}

pub(crate) fn sqlite_claim<B: Backend>(
    worker: &str,
    now: Timestamp,
    lease_until: Timestamp,
    limit: i64,
    scope: &ClaimScope,
) -> Statement<B> {
    let claim = Statement::new(sqlite_claim_sql(scope.key.is_some()))
        .text(worker)
        .int(now.timestamp_millis())
        .int(lease_until.timestamp_millis())
        .int(limit)
        .text(scope.destinations_json().as_deref())
        .flag(scope.include_unassigned);
    with_only_key(claim, scope)
}

/// The `{only_key}` hole of the claim statements: empty, or the condition on parameter `number`.
fn only_key(one_key: bool, number: u8) -> &'static str {
    match (one_key, number) {
        (false, _) => "",
        (true, 7) => "AND a.key = $7",
        (true, 10) => "AND a.key = $10",
        (true, 13) => "AND a.key = $13",
        (true, _) => unreachable!("the claim statements' key is their 7th, 10th or 13th parameter"),
    }
}

/// Binds the key of a claim of one action, as the statement's last parameter.
pub(crate) fn with_only_key<B: Backend>(claim: Statement<B>, scope: &ClaimScope) -> Statement<B> {
    match &scope.key {
        Some(key) => claim.text(key.as_str()),
        None => claim,
    }
}

const PG_CLAIM_WITH_AUDIT: Template<2> = template(named(CLAIMS, "pg_claim_with_audit"), ["{only_key}", "{limit}"]);
const PG_CLAIM_AND_START: Template<2> = template(named(CLAIMS, "pg_claim_and_start"), ["{only_key}", "{limit}"]);
const PG_START_ATTEMPTS: Template<2> = template(named(CLAIMS, "pg_start_attempts"), ["{claims}", "{current}"]);
const SQLITE_START_ATTEMPTS: Template<3> =
    template(named(CLAIMS, "sqlite_start_attempts"), ["{current}", "{columns}", "{rows}"]);

/// See `pg_claim_with_audit` in sql/claims.sql: the limit is written into the text, and the key
/// where one action is claimed.
pub(crate) fn pg_claim_with_audit_sql(limit: i64, one_key: bool) -> String {
    PG_CLAIM_WITH_AUDIT.fill([only_key(one_key, 10), &limit.max(0).to_string()])
}

/// See `pg_claim_and_start` in sql/claims.sql: the limit is written into the text, and the key
/// where one action is claimed.
pub(crate) fn pg_claim_and_start_sql(limit: i64, one_key: bool) -> String {
    PG_CLAIM_AND_START.fill([only_key(one_key, 13), &limit.max(0).to_string()])
}

/// A claim under which an attempt starts, as `pg_start_attempts` and `sqlite_start_attempts`
/// (in sql/claims.sql) list them (a function, not a constant, for the lifetime of the borrowed
/// claim).
pub(crate) fn attempt_start_row<'a>() -> [Column<AttemptStart<'a>>; 4] {
    [
        ("key", Text(|s| Some(s.key.as_str()))),
        ("ownership_version", BigInt(|s| Some(s.ownership_version))),
        ("worker", Text(|s| Some(s.worker))),
        ("idempotency_key", Text(|s| Some(s.idempotency_key))),
    ]
}

/// See `pg_start_attempts` in sql/claims.sql.
pub(crate) fn pg_start_attempts_sql(claims: usize) -> String {
    let per_claim = binds_per_row(&attempt_start_row());
    PG_START_ATTEMPTS.fill([
        &values_from(Params::Numbered, 2, claims, &attempt_start_row()),
        &current_claims(Params::Numbered, "a.", 2, per_claim, claims),
    ])
}

pub(crate) fn pg_start_attempts<B: Backend>(shift_ms: i64, claims: &[AttemptStart<'_>]) -> Statement<B> {
    Statement::new(pg_start_attempts_sql(claims.len())).int(shift_ms).rows(&attempt_start_row(), claims)
}

/// See `sqlite_start_attempts` in sql/claims.sql.
pub(crate) fn sqlite_start_attempts_sql(claims: usize) -> String {
    SQLITE_START_ATTEMPTS.fill([
        &current_claims(Params::InOrder, "", 4, 2, claims),
        &names(&attempt_start_row()),
        &values(Params::InOrder, claims, &attempt_start_row()),
    ])
}

pub(crate) fn sqlite_start_attempts<B: Backend>(now_ms: i64, claims: &[AttemptStart<'_>]) -> Statement<B> {
    bind_start_attempts(Statement::new(sqlite_start_attempts_sql(claims.len())), now_ms, claims)
}

/// [`sqlite_start_attempts`] after `statement`, in the same command.
pub(crate) fn then_sqlite_start_attempts<B: Backend>(
    statement: Statement<B>,
    now_ms: i64,
    claims: &[AttemptStart<'_>],
) -> Statement<B> {
    bind_start_attempts(statement.push(";\n").push(&sqlite_start_attempts_sql(claims.len())), now_ms, claims)
}

fn bind_start_attempts<B: Backend>(statement: Statement<B>, now_ms: i64, claims: &[AttemptStart<'_>]) -> Statement<B> {
    // The count's values, as [`count_attempts`] binds them, then the insert's.
    let statement = statement.int(now_ms).int(now_ms).int(now_ms);
    claims
        .iter()
        .fold(statement, |statement, claim| statement.text(claim.key.as_str()).int(claim.ownership_version))
        .rows(&attempt_start_row(), claims)
        .int(now_ms)
}

// Attempts (sql/attempts.sql).

pub(crate) const ATTEMPT_STARTED_UNDER: &str = named(ATTEMPTS, "attempt_started_under");
pub(crate) const CUT_OFF_ATTEMPTS: &str = named(ATTEMPTS, "cut_off_attempts");
pub(crate) const SELECT_ATTEMPT: &str = named(ATTEMPTS, "select_attempt");
pub(crate) const SELECT_ATTEMPTS: &str = named(ATTEMPTS, "select_attempts");
const INSERT_ATTEMPTS: Template<2> = template(named(ATTEMPTS, "insert_attempts"), ["{columns}", "{rows}"]);
const FINISH_ATTEMPTS: Template<3> = template(named(ATTEMPTS, "finish_attempts"), ["{columns}", "{rows}", "{set}"]);
const PG_FINISH_ATTEMPTS_WITH_AUDIT: Template<5> = template(
    named(ATTEMPTS, "pg_finish_attempts_with_audit"),
    ["{finished_columns}", "{finished_rows}", "{finished_set}", "{audit_columns}", "{audit_rows}"],
);
pub(crate) const ACKNOWLEDGE_LATE_RESULTS: &str = named(ATTEMPTS, "acknowledge_late_results");

/// An attempt as it starts: what is known before its request goes out. How it ends is written by
/// [`finish_attempts`], into the columns that start empty.
pub(crate) const STARTED_ATTEMPT_ROW: &[Column<Attempt>] = &[
    ("action_key", Text(|a| Some(a.key.as_str()))),
    ("number", BigInt(|a| Some(a.number))),
    ("worker", Text(|a| Some(a.worker.as_str()))),
    ("ownership_version", BigInt(|a| Some(a.ownership_version))),
    ("started_at", BigInt(|a| Some(a.started_at.timestamp_millis()))),
    ("idempotency_key", Text(|a| a.idempotency_key.as_deref())),
];

/// See `insert_attempts` in sql/attempts.sql.
pub(crate) fn insert_attempts_sql(params: Params, rows: usize) -> String {
    INSERT_ATTEMPTS.fill([&names(STARTED_ATTEMPT_ROW), &values(params, rows, STARTED_ATTEMPT_ROW)])
}

pub(crate) fn insert_attempts<B: Backend>(attempts: &[Attempt]) -> Statement<B> {
    Statement::new(insert_attempts_sql(B::DIALECT.params, attempts.len())).rows(STARTED_ATTEMPT_ROW, attempts)
}

/// How an attempt ended, and the id that finds it.
pub(crate) const FINISHED_ATTEMPT_ROW: &[Column<Attempt>] = &[
    ("id", BigInt(|a| Some(a.id))),
    ("ended_at", BigInt(|a| a.ended_at.map(|t| t.timestamp_millis()))),
    ("outcome", Text(|a| a.outcome.map(AttemptOutcome::as_str))),
    ("error", Text(|a| a.error.as_deref())),
    ("response_status", BigInt(|a| a.evidence.status)),
    ("destination_id", Text(|a| a.evidence.destination_id.as_deref())),
    ("response_body", Text(|a| a.evidence.body.as_deref())),
    ("stale", Boolean(|a| a.stale)),
];

/// The terms that write [`FINISHED_ATTEMPT_ROW`]: all but the id that finds the row.
fn finished_set() -> String {
    set_from("finished", FINISHED_ATTEMPT_ROW, &["id"])
}

/// See `finish_attempts` in sql/attempts.sql.
pub(crate) fn finish_attempts_sql(params: Params, rows: usize) -> String {
    FINISH_ATTEMPTS.fill([&names(FINISHED_ATTEMPT_ROW), &values(params, rows, FINISHED_ATTEMPT_ROW), &finished_set()])
}

pub(crate) fn finish_attempts<B: Backend>(attempts: &[Attempt]) -> Statement<B> {
    Statement::new(finish_attempts_sql(B::DIALECT.params, attempts.len())).rows(FINISHED_ATTEMPT_ROW, attempts)
}

/// See `pg_finish_attempts_with_audit` in sql/attempts.sql.
pub(crate) fn pg_finish_attempts_with_audit_sql(finished: usize, entries: usize) -> String {
    let first_entry_param = 1 + finished * binds_per_row(FINISHED_ATTEMPT_ROW);
    PG_FINISH_ATTEMPTS_WITH_AUDIT.fill([
        &names(FINISHED_ATTEMPT_ROW),
        &values(Params::Numbered, finished, FINISHED_ATTEMPT_ROW),
        &finished_set(),
        &names(AUDIT_ROW),
        &values_from(Params::Numbered, first_entry_param, entries, AUDIT_ROW),
    ])
}

pub(crate) fn pg_finish_attempts_with_audit<B: Backend>(attempts: &[Attempt], entries: &[AuditEntry]) -> Statement<B> {
    Statement::new(pg_finish_attempts_with_audit_sql(attempts.len(), entries.len()))
        .rows(FINISHED_ATTEMPT_ROW, attempts)
        .rows(AUDIT_ROW, entries)
}

// Deliveries, lookups, the audit trail (sql/deliveries.sql, sql/lookups.sql, sql/audit.sql).

pub(crate) const SELECT_DELIVERIES: &str = named(DELIVERIES, "select_deliveries");
const INSERT_DELIVERIES: Template<2> = template(named(DELIVERIES, "insert_deliveries"), ["{columns}", "{rows}"]);
pub(crate) const SELECT_LOOKUPS: &str = named(LOOKUPS, "select_lookups");
pub(crate) const UNKNOWN_LOOKUP_FAILURES: &str = named(LOOKUPS, "unknown_lookup_failures");
const INSERT_LOOKUP: Template<2> = template(named(LOOKUPS, "insert_lookup"), ["{columns}", "{rows}"]);
pub(crate) const SELECT_AUDIT: &str = named(AUDIT, "select_audit");
pub(crate) const LATEST_RECORDED_TIME: &str = named(AUDIT, "latest_recorded_time");
const APPEND_AUDIT: Template<2> = template(named(AUDIT, "append_audit"), ["{columns}", "{rows}"]);

pub(crate) const DELIVERY_ROW: &[Column<Delivery>] = &[
    ("action_key", Text(|d| Some(d.key.as_str()))),
    ("event_id", Text(|d| d.event_id.as_deref())),
    ("source", Text(|d| d.source.as_deref())),
    ("source_version", BigInt(|d| d.source_version)),
    ("fingerprint", Text(|d| Some(d.fingerprint.as_str()))),
    ("outcome", Text(|d| Some(d.outcome.as_str()))),
    ("received_at", BigInt(|d| Some(d.received_at.timestamp_millis()))),
];

/// See `insert_deliveries` in sql/deliveries.sql.
pub(crate) fn insert_deliveries_sql(params: Params, rows: usize) -> String {
    INSERT_DELIVERIES.fill([&names(DELIVERY_ROW), &values(params, rows, DELIVERY_ROW)])
}

pub(crate) fn insert_deliveries<B: Backend>(deliveries: &[Delivery]) -> Statement<B> {
    Statement::new(insert_deliveries_sql(B::DIALECT.params, deliveries.len())).rows(DELIVERY_ROW, deliveries)
}

pub(crate) const LOOKUP_ROW: &[Column<LookupRecord>] = &[
    ("action_key", Text(|l| Some(l.key.as_str()))),
    ("at", BigInt(|l| Some(l.at.timestamp_millis()))),
    ("actor", Text(|l| Some(l.actor.as_str()))),
    ("verdict", Text(|l| Some(l.verdict.as_str()))),
    ("records", BigInt(|l| Some(l.records))),
    ("destination_id", Text(|l| l.destination_id.as_deref())),
    ("response_status", BigInt(|l| l.evidence.status)),
    ("response_body", Text(|l| l.evidence.body.as_deref())),
    ("detail", Text(|l| l.detail.as_deref())),
];

/// See `insert_lookup` in sql/lookups.sql.
pub(crate) fn insert_lookup_sql(params: Params) -> String {
    INSERT_LOOKUP.fill([&names(LOOKUP_ROW), &values(params, 1, LOOKUP_ROW)])
}

pub(crate) fn insert_lookup<B: Backend>(lookup: &LookupRecord) -> Statement<B> {
    Statement::new(insert_lookup_sql(B::DIALECT.params)).rows(LOOKUP_ROW, [lookup])
}

pub(crate) const AUDIT_ROW: &[Column<AuditEntry>] = &[
    ("action_key", Text(|e| Some(e.key.as_str()))),
    ("at", BigInt(|e| Some(e.at.timestamp_millis()))),
    ("actor", Text(|e| Some(e.actor.as_str()))),
    ("actor_kind", Text(|e| Some(e.actor_kind.as_str()))),
    ("event", Text(|e| Some(e.event.as_str()))),
    ("from_state", Text(|e| e.from_state.map(State::as_str))),
    ("to_state", Text(|e| Some(e.to_state.as_str()))),
    ("ownership_version", BigInt(|e| Some(e.ownership_version))),
    ("revision", BigInt(|e| Some(e.revision))),
    ("reason", Text(|e| e.reason.as_deref())),
];

/// See `append_audit` in sql/audit.sql.
pub(crate) fn append_audit_sql(params: Params, rows: usize) -> String {
    APPEND_AUDIT.fill([&names(AUDIT_ROW), &values(params, rows, AUDIT_ROW)])
}

pub(crate) fn append_audit<B: Backend>(entries: &[AuditEntry]) -> Statement<B> {
    Statement::new(append_audit_sql(B::DIALECT.params, entries.len())).rows(AUDIT_ROW, entries)
}

// Proposals and refused submissions (sql/proposals.sql, sql/refused.sql).

pub(crate) const SELECT_PROPOSALS: &str = named(PROPOSALS, "select_proposals");
pub(crate) const SELECT_WAITING_PROPOSALS: &str = named(PROPOSALS, "select_waiting_proposals");
pub(crate) const KEEP_PROPOSAL: &str = named(PROPOSALS, "keep_proposal");
pub(crate) const DECIDE_PROPOSAL: &str = named(PROPOSALS, "decide_proposal");
const LIST_REFUSED: &str = named(REFUSED, "list_refused");
const COUNT_REFUSED: Template<1> = template(named(REFUSED, "count_refused"), ["{terms}"]);
const INSERT_REFUSAL: Template<2> = template(named(REFUSED, "insert_refusal"), ["{columns}", "{rows}"]);

pub(crate) const REFUSAL_ROW: &[Column<RefusedSubmission>] = &[
    ("received_at", BigInt(|r| Some(r.received_at.timestamp_millis()))),
    ("key_excerpt", Text(|r| r.key_excerpt.as_deref())),
    ("problem", Text(|r| Some(r.problem.as_str()))),
    ("message", Text(|r| Some(r.message.as_str()))),
    ("event_id", Text(|r| r.event_id.as_deref())),
    ("source", Text(|r| r.source.as_deref())),
    ("destination", Text(|r| r.destination.as_deref())),
];

/// See `insert_refusal` in sql/refused.sql.
pub(crate) fn insert_refusal_sql(params: Params) -> String {
    INSERT_REFUSAL.fill([&names(REFUSAL_ROW), &values(params, 1, REFUSAL_ROW)])
}

pub(crate) fn insert_refusal<B: Backend>(refusal: &RefusedSubmission) -> Statement<B> {
    Statement::new(insert_refusal_sql(B::DIALECT.params)).rows(REFUSAL_ROW, [refusal])
}

// Purges (sql/purges.sql).

/// Most keys one purge statement names: a bounded list of parameters per statement.
pub(crate) const KEYS_PER_PURGE_STATEMENT: usize = 500;

const PURGE_CANDIDATES: Template<3> =
    template(named(PURGES, "purge_candidates"), ["{states}", "{settled_before}", "{lock}"]);
const EMPTY_PURGED_ACTIONS: Template<1> = template(named(PURGES, "empty_purged_actions"), ["{keys}"]);
const DELETE_PURGED_PROPOSALS: Template<1> = template(named(PURGES, "delete_purged_proposals"), ["{keys}"]);
pub(crate) const INSERT_PURGE: &str = named(PURGES, "insert_purge");
const MARK_PURGED: Template<2> = template(named(PURGES, "mark_purged"), ["{purge_id}", "{keys}"]);
pub(crate) const SELECT_PURGE_OF: &str = named(PURGES, "select_purge_of");

/// The deletes of the histories a purge removes, each by the actions' keys, in the order of the
/// counts of [`crate::domain::PurgeCounts`]. The audit trail is not among them: it is kept in
/// full.
pub(crate) const PURGED_HISTORIES: [Template<1>; 3] = [
    template(named(PURGES, "delete_purged_deliveries"), ["{keys}"]),
    template(named(PURGES, "delete_purged_attempts"), ["{keys}"]),
    template(named(PURGES, "delete_purged_lookups"), ["{keys}"]),
];

/// See `purge_candidates` in sql/purges.sql.
pub(crate) fn purge_candidates_sql(dialect: Dialect, states: usize) -> String {
    PURGE_CANDIDATES.fill([&param_list(dialect.params, 1, states), &dialect.params.at(states + 1), dialect.lock_suffix])
}

pub(crate) fn purge_candidates<B: Backend>(states: &[State], settled_before_ms: i64) -> Statement<B> {
    let statement = Statement::new(purge_candidates_sql(B::DIALECT, states.len()));
    states.iter().fold(statement, |statement, state| statement.text(state.as_str())).int(settled_before_ms)
}

/// A statement by the keys of the actions being purged: `template`'s hole holds their parameters.
fn by_keys_sql(params: Params, template: &Template<1>, keys: usize) -> String {
    template.fill([&param_list(params, 1, keys)])
}

/// See `empty_purged_actions` in sql/purges.sql.
pub(crate) fn empty_purged_actions_sql(params: Params, keys: usize) -> String {
    by_keys_sql(params, &EMPTY_PURGED_ACTIONS, keys)
}

pub(crate) fn empty_purged_actions<B: Backend>(keys: &[ActionKey]) -> Statement<B> {
    bind_keys(Statement::new(empty_purged_actions_sql(B::DIALECT.params, keys.len())), keys)
}

/// One of [`PURGED_HISTORIES`] for `keys` keys.
pub(crate) fn delete_purged_history_sql(params: Params, history: &Template<1>, keys: usize) -> String {
    by_keys_sql(params, history, keys)
}

pub(crate) fn delete_purged_history<B: Backend>(history: &Template<1>, keys: &[ActionKey]) -> Statement<B> {
    bind_keys(Statement::new(delete_purged_history_sql(B::DIALECT.params, history, keys.len())), keys)
}

/// See `delete_purged_proposals` in sql/purges.sql.
pub(crate) fn delete_purged_proposals_sql(params: Params, keys: usize) -> String {
    by_keys_sql(params, &DELETE_PURGED_PROPOSALS, keys)
}

pub(crate) fn delete_purged_proposals<B: Backend>(keys: &[ActionKey]) -> Statement<B> {
    bind_keys(Statement::new(delete_purged_proposals_sql(B::DIALECT.params, keys.len())), keys)
}

/// See `mark_purged` in sql/purges.sql.
pub(crate) fn mark_purged_sql(params: Params, keys: usize) -> String {
    MARK_PURGED.fill([&params.at(1), &param_list(params, 2, keys)])
}

pub(crate) fn mark_purged<B: Backend>(purge_id: i64, keys: &[ActionKey]) -> Statement<B> {
    bind_keys(Statement::new(mark_purged_sql(B::DIALECT.params, keys.len())).int(purge_id), keys)
}

// Where the schema stands (sql/migrations.sql).

pub(crate) const POSTGRES_HAS_MIGRATIONS: &str = named(MIGRATIONS, "postgres_has_migrations");
pub(crate) const SQLITE_HAS_MIGRATIONS: &str = named(MIGRATIONS, "sqlite_has_migrations");
pub(crate) const APPLIED_MIGRATIONS: &str = named(MIGRATIONS, "applied_migrations");
pub(crate) const SCHEMA_EXISTS: &str = named(MIGRATIONS, "schema_exists");
pub(crate) const LEDGER_IN_PUBLIC: &str = named(MIGRATIONS, "ledger_in_public");
pub(crate) const PUBLIC_MIGRATIONS: &str = named(MIGRATIONS, "public_migrations");
pub(crate) const PUBLIC_FUNCTIONS: &str = named(MIGRATIONS, "public_functions");
pub(crate) const PUBLIC_TABLES: &str = named(MIGRATIONS, "public_tables");

#[cfg(test)]
mod tests;
