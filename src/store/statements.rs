//! Every statement the stores send, named, with what it does and why.
//!
//! Both dialects accept `$1`-style parameters and `RETURNING`, and both keep times as integer
//! milliseconds of database time, so each statement is written once; the few differences are
//! the two [`Dialect`]s at the top. Then come the statements on actions, on attempts, and on the
//! other tables. Statements for many rows are generated for a number of rows, from a column list
//! that also binds their values ([`super::batch`]); SQLite's use `?` in order (see
//! [`Params::InOrder`]).
//!
//! The statements named `pg_*` are PostgreSQL's only: they write several tables in one statement
//! (data-modifying CTEs, which SQLite lacks) and read the clock inside, so that the worker's
//! per-action path costs few round trips (docs/BENCHMARKS.md, "The drain").
//!
//! Each statement on a hot path must be served by an index: `tests/it/plans.rs` EXPLAINs these same
//! texts (see [`super::hot_statements`]).

use super::backend::{Backend, Dialect, Params, Statement};
use super::batch::{Cell, Column, binds_per_row, insert_sql, names, set_from, values, values_from};
use super::{AttemptStart, ListFilter, ListOrder, PageStart};
use crate::domain::{
    ActionKey, ActionRecord, Attempt, AttemptOutcome, AuditEntry, Delivery, LookupRecord, RefusedSubmission, State,
};
use Cell::{BigInt, Boolean, Constant, Text};

/// Every column of `actions`, as read back.
macro_rules! action_columns {
    () => {
        "id, key, state, payload, fingerprint, proposed_payload, proposed_fingerprint, \
         proposed_source_version, resume_state, source, source_version, destination, after_key, \
         claimed_by, ownership_version, revision, lease_expires_at, not_before, attempts, \
         attempts_in_round, assignee, destination_id, first_sent_at, window_started_at, late_results, \
         old_worker_may_act, may_have_written, last_error, created_at, updated_at, payload_revision, \
         idempotency_key, updates_key, updates_destination_id"
    };
}

/// Every column of `attempts`, as read back.
macro_rules! attempt_columns {
    () => {
        "id, action_key, number, worker, ownership_version, started_at, ended_at, outcome, error, \
         response_status, destination_id, response_body, stale, acknowledged_by, acknowledged_at, idempotency_key"
    };
}

/// The pending actions worker-claimable at database time `$now`, oldest first, up to `$limit`:
/// for the destinations in the JSON list `$dests` (all when NULL) and, when `$unassigned`,
/// actions without a destination. Runnable: its backoff is over, no proposal waits for a person,
/// and the action it must follow (if any) has completed.
///
/// `$lock` lets PostgreSQL skip rows another worker is claiming at the same moment; `$in_list`
/// tests membership of `$dests` with the dialect's JSON functions.
macro_rules! runnable {
    ($now:literal, $limit:literal, $dests:literal, $unassigned:literal, $lock:literal, $in_list:literal) => {
        concat!(
            "SELECT a.id FROM actions a WHERE a.state = 'pending' ",
            "AND (a.not_before IS NULL OR a.not_before <= ",
            $now,
            ") AND a.proposed_payload IS NULL ",
            "AND (CAST(",
            $dests,
            " AS TEXT) IS NULL OR a.destination IN ",
            $in_list,
            " OR (a.destination IS NULL AND ",
            $unassigned,
            ")) ",
            "AND (a.after_key IS NULL OR EXISTS ",
            "(SELECT 1 FROM actions p WHERE p.key = a.after_key AND p.state = 'completed')) ",
            "ORDER BY a.id LIMIT ",
            $limit,
            $lock
        )
    };
}

/// Claims up to `$4` runnable pending actions (see `runnable!`, with the destinations `$5` and
/// `$6`) for worker `$1` at database time `$2` with a lease until `$3`; returns the claimed rows.
macro_rules! claim {
    ($lock:literal, $in_list:literal) => {
        // The picked ids are materialized once: PostgreSQL may otherwise evaluate a LIMIT
        // subquery under IN more than once and claim more rows than asked.
        concat!(
            "WITH picked AS MATERIALIZED (",
            runnable!("$2", "$4", "$5", "$6", $lock, $in_list),
            ") UPDATE actions SET state = 'in_progress', claimed_by = $1, ",
            "ownership_version = ownership_version + 1, revision = revision + 1, lease_expires_at = $3, ",
            "not_before = NULL, updated_at = $2 ",
            "WHERE id IN (SELECT id FROM picked) AND state = 'pending' RETURNING ",
            action_columns!()
        )
    };
}

/// The database's clock in milliseconds, plus the shift `$shift` (a test's; nothing otherwise), as
/// column `now` of a one-row `clock` CTE: read once per statement, however often it is used.
macro_rules! pg_clock {
    ($shift:literal) => {
        concat!(
            "clock AS MATERIALIZED (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint + CAST(",
            $shift,
            " AS BIGINT) AS now)"
        )
    };
}

/// PostgreSQL's claim statements begin alike: the database's clock (shifted by `$3`) and the
/// runnable actions they claim (see `runnable!`, with the destinations `$4` and `$5`), up to
/// `{limit}` (written into the text), locked and skipped by other claims.
macro_rules! pg_clock_and_picked {
    () => {
        concat!(
            "WITH ",
            pg_clock!("$3"),
            ", picked AS MATERIALIZED (",
            runnable!(
                "(SELECT now FROM clock)",
                "{limit}",
                "$4",
                "$5",
                " FOR UPDATE OF a SKIP LOCKED",
                "(SELECT json_array_elements_text($4::json))"
            ),
        )
    };
}

/// PostgreSQL: the whole claim as one autocommitted statement (one round trip, one commit, no
/// BEGIN or COMMIT of its own): reads the database's clock, claims up to `limit` runnable actions
/// (see `runnable!`, with the destinations `$4` and `$5`) for worker `$1` with a lease of `$2`
/// milliseconds from that time, and appends each claim's audit entry (actor `$1`, of kind `$6`,
/// event `$7`, from state `$8` to `$9`, as the ledger says), with the version and revision the
/// claim gave the action. `$3` is the clock's shift. Returns the claimed rows. The guard triggers
/// fire on each row as they do for separate statements; if any refuses, nothing is claimed.
///
/// The limit is written into the text, not bound: with `LIMIT $n` PostgreSQL planned the
/// statement again at every call (a generic plan's row estimate for a bound limit is a tenth of
/// the table, so it never preferred the generic plan), 0.3 ms of the server's CPU per claim; with
/// a constant it keeps one plan per connection and limit (docs/BENCHMARKS.md, "The drain").
pub(crate) fn pg_claim_with_audit_sql(limit: i64) -> String {
    const TEXT: &str = concat!(
        pg_clock_and_picked!(),
        "), claimed AS (UPDATE actions SET state = 'in_progress', claimed_by = $1, ",
        "ownership_version = ownership_version + 1, revision = revision + 1, ",
        "lease_expires_at = (SELECT now FROM clock) + CAST($2 AS BIGINT), ",
        "not_before = NULL, updated_at = (SELECT now FROM clock) ",
        "WHERE id IN (SELECT id FROM picked) AND state = 'pending' RETURNING ",
        action_columns!(),
        "), audit AS (INSERT INTO audit_trail (action_key, at, actor, actor_kind, event, from_state, to_state, ",
        "ownership_version, revision, reason) SELECT key, updated_at, $1, CAST($6 AS TEXT), CAST($7 AS TEXT), ",
        "CAST($8 AS TEXT), CAST($9 AS TEXT), ownership_version, revision, NULL FROM claimed ORDER BY id) ",
        "SELECT ",
        action_columns!(),
        " FROM claimed"
    );
    TEXT.replace("{limit}", &limit.max(0).to_string())
}

/// PostgreSQL: [`pg_claim_with_audit_sql`], which also starts the attempt of each claimed action
/// whose destination protects against a repeat whatever was sent, in the same statement (one
/// commit where a claim and a start made two): the ledger says which (`$10` the destination of
/// actions without one, `$11` the JSON list of destinations whose claims always start their
/// attempt, `$12` of those whose claims start it only while no idempotency window runs; see
/// [`crate::domain::StartsAtClaim`]). For those rows the statement does what
/// [`pg_start_attempts_sql`] does: counts the attempt, sets the first send time and the start of
/// the window where unset, and inserts the attempt (worker `$1`, the action's sending key),
/// numbered by that count, at the claim's time. The revision moves one step, as for any one write.
///
/// Each row answers the action as written, with `starts` (1 where the attempt started, else 0),
/// the first send time and window start as they were before (`claimed_first_sent_at`,
/// `claimed_window_started_at`), and the started attempt's `attempt_id` and `attempt_number`.
pub(crate) fn pg_claim_and_start_sql(limit: i64) -> String {
    const TEXT: &str = concat!(
        pg_clock_and_picked!(),
        "), starting AS (SELECT a.id AS picked_id, a.first_sent_at AS claimed_first_sent_at, ",
        "a.window_started_at AS claimed_window_started_at, CASE WHEN ",
        "COALESCE(a.destination, CAST($10 AS TEXT)) IN (SELECT json_array_elements_text($11::json)) ",
        "OR (a.window_started_at IS NULL ",
        "AND COALESCE(a.destination, CAST($10 AS TEXT)) IN (SELECT json_array_elements_text($12::json))) ",
        "THEN CAST(1 AS BIGINT) ELSE CAST(0 AS BIGINT) END AS starts FROM actions a ",
        "WHERE a.id IN (SELECT id FROM picked)), ",
        "claimed AS (UPDATE actions SET state = 'in_progress', claimed_by = $1, ",
        "ownership_version = ownership_version + 1, revision = revision + 1, ",
        "lease_expires_at = (SELECT now FROM clock) + CAST($2 AS BIGINT), ",
        "not_before = NULL, updated_at = (SELECT now FROM clock), ",
        "attempts = attempts + s.starts, attempts_in_round = attempts_in_round + s.starts, ",
        "first_sent_at = CASE WHEN s.starts = 1 THEN COALESCE(first_sent_at, (SELECT now FROM clock)) ",
        "ELSE first_sent_at END, ",
        "window_started_at = CASE WHEN s.starts = 1 THEN COALESCE(window_started_at, (SELECT now FROM clock)) ",
        "ELSE window_started_at END ",
        "FROM starting s WHERE id = s.picked_id AND state = 'pending' RETURNING ",
        action_columns!(),
        ", s.starts, s.claimed_first_sent_at, s.claimed_window_started_at",
        "), audit AS (INSERT INTO audit_trail (action_key, at, actor, actor_kind, event, from_state, to_state, ",
        "ownership_version, revision, reason) SELECT key, updated_at, $1, CAST($6 AS TEXT), CAST($7 AS TEXT), ",
        "CAST($8 AS TEXT), CAST($9 AS TEXT), ownership_version, revision, NULL FROM claimed ORDER BY id), ",
        "started AS (INSERT INTO attempts (action_key, number, worker, ownership_version, started_at, ",
        "idempotency_key) SELECT key, attempts, $1, ownership_version, updated_at, COALESCE(idempotency_key, key) ",
        "FROM claimed WHERE starts = 1 ORDER BY key RETURNING action_key, id AS attempt_id, number AS attempt_number) ",
        "SELECT ",
        action_columns!(),
        ", starts, claimed_first_sent_at, claimed_window_started_at, attempt_id, attempt_number ",
        "FROM claimed LEFT JOIN started ON action_key = key"
    );
    TEXT.replace("{limit}", &limit.max(0).to_string())
}

/// SQLite runs inside this process, as one writer at a time: a write transaction takes the
/// database's write lock as it begins (`BEGIN IMMEDIATE`), so what it reads stays true until it
/// commits and there is nothing left to lock row by row; its clock is this host's, so asking it
/// would be one more statement per transaction for the same answer.
pub(crate) const SQLITE: Dialect = Dialect {
    params: Params::InOrder,
    begin: "BEGIN IMMEDIATE",
    clock: None,
    lock_suffix: "",
    claim: claim!("", "(SELECT value FROM json_each($5))"),
    writes_in_one_statement: false,
    statements_in_one_command: true,
    purge_permission: None,
    after_links_lock: None,
};

/// PostgreSQL serves many workers on many machines: rows read for a change are locked
/// `FOR UPDATE`, claims skip rows that another worker is claiming, and time is the server's.
pub(crate) const POSTGRES: Dialect = Dialect {
    params: Params::Numbered,
    begin: "BEGIN",
    clock: Some("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now"),
    lock_suffix: " FOR UPDATE",
    claim: claim!(" FOR UPDATE OF a SKIP LOCKED", "(SELECT json_array_elements_text($5::json))"),
    writes_in_one_statement: true,
    statements_in_one_command: false,
    // Only the owner role purges (migration 0007): the function of migration 0004 answers for a
    // ledger that is not role-managed too.
    purge_permission: Some("SELECT actionledger_session_may('owner') AS may, CAST(current_user AS TEXT) AS role"),
    // A transaction-scoped advisory lock, one number for the whole ledger: two new actions that
    // would wait for each other must not each miss the other's uncommitted row.
    after_links_lock: Some("SELECT pg_advisory_xact_lock(7429916350244813907)"),
};

/// One action by key `$1`.
pub(crate) const SELECT_ACTION: &str = concat!("SELECT ", action_columns!(), " FROM actions WHERE key = $1");

/// The `after` links reachable from key `$1`: each action's key and the key it waits for,
/// following the chain from `$1` (UNION stops at a key seen before, so even a cycle ends). The
/// ledger reads it to refuse a new action whose chain leads back to itself. The key column is
/// indexed, and each step reads one action by it.
pub(crate) const AFTER_LINKS: &str = "WITH RECURSIVE chain (key) AS (SELECT CAST($1 AS TEXT) \
     UNION SELECT a.after_key FROM actions a JOIN chain c ON a.key = c.key WHERE a.after_key IS NOT NULL) \
     SELECT a.key, a.after_key FROM actions a JOIN chain c ON a.key = c.key WHERE a.after_key IS NOT NULL";

/// Reads actions by key and locks them (where the dialect locks rows), in key order, so that
/// concurrent batches lock rows in one order and cannot deadlock.
pub(crate) fn lock_actions_sql(dialect: Dialect, keys: usize) -> String {
    let params = (1..=keys).map(|n| dialect.params.at(n)).collect::<Vec<_>>().join(", ");
    format!("SELECT {} FROM actions WHERE key IN ({params}) ORDER BY key{}", action_columns!(), dialect.lock_suffix)
}

/// PostgreSQL: [`lock_actions_sql`] that also reads the database's clock, as column `now` of
/// every row (an uncorrelated subquery: read once), so that a transaction that begins by locking
/// needs no round trip of its own for the time.
pub(crate) fn pg_lock_actions_now_sql(keys: usize) -> String {
    let params = (1..=keys).map(|n| format!("${n}")).collect::<Vec<_>>().join(", ");
    format!(
        "SELECT {}, (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now \
         FROM actions WHERE key IN ({params}) ORDER BY key FOR UPDATE",
        action_columns!()
    )
}

pub(crate) fn pg_lock_actions_now<B: Backend>(keys: &[&ActionKey]) -> Statement<B> {
    let statement = Statement::new(pg_lock_actions_now_sql(keys.len()));
    keys.iter().fold(statement, |statement, key| statement.text(key.as_str()))
}

pub(crate) fn lock_actions<B: Backend>(keys: &[&ActionKey]) -> Statement<B> {
    let statement = Statement::new(lock_actions_sql(B::DIALECT, keys.len()));
    keys.iter().fold(statement, |statement, key| statement.text(key.as_str()))
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

/// Inserts new pending actions, skipping keys that exist (a concurrent submission of the same key
/// won); returns the rows inserted.
pub(crate) fn insert_actions_sql(params: Params, rows: usize) -> String {
    let insert = insert_sql("actions", params, rows, NEW_ACTION_ROW);
    format!("{insert} ON CONFLICT (key) DO NOTHING RETURNING {}", action_columns!())
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

/// Writes back every mutable field of many actions, each only if its revision is still the one
/// read (a change made meanwhile wins, and the write is not counted), and advances their revisions.
pub(crate) fn update_actions_sql(params: Params, rows: usize) -> String {
    format!(
        "WITH changed ({}) AS (VALUES {}) UPDATE actions SET {}, revision = actions.revision + 1 \
         FROM changed WHERE actions.id = changed.id AND actions.revision = changed.revision",
        names(CHANGED_ACTION_ROW),
        values(params, rows, CHANGED_ACTION_ROW),
        set_from("changed", CHANGED_ACTION_ROW, &["id", "revision"])
    )
}

/// PostgreSQL: [`update_actions_sql`] for `rows` actions, sending with it the end of one attempt
/// (as [`finish_attempts_sql`]) and `entries` audit entries (as [`append_audit`]) that the
/// transaction deferred: a result's three writes in one round trip. The count it answers is the
/// actions' alone, as the ledger's check needs; a refused write rolls back the others with it.
/// Bound in order: the actions' rows, the attempt's, the entries'.
pub(crate) fn pg_update_actions_with_deferred_sql(rows: usize, entries: usize) -> String {
    let attempt_param = 1 + rows * binds_per_row(CHANGED_ACTION_ROW);
    let entry_param = attempt_param + binds_per_row(FINISHED_ATTEMPT_ROW);
    format!(
        "WITH changed ({}) AS (VALUES {}), finished ({}) AS (VALUES {}), \
         ended AS (UPDATE attempts SET {} FROM finished WHERE attempts.id = finished.id AND attempts.ended_at IS NULL), \
         noted AS (INSERT INTO audit_trail ({}) VALUES {}) \
         UPDATE actions SET {}, revision = actions.revision + 1 \
         FROM changed WHERE actions.id = changed.id AND actions.revision = changed.revision",
        names(CHANGED_ACTION_ROW),
        values(Params::Numbered, rows, CHANGED_ACTION_ROW),
        names(FINISHED_ATTEMPT_ROW),
        values_from(Params::Numbered, attempt_param, 1, FINISHED_ATTEMPT_ROW),
        set_from("finished", FINISHED_ATTEMPT_ROW, &["id"]),
        names(AUDIT_ROW),
        values_from(Params::Numbered, entry_param, entries, AUDIT_ROW),
        set_from("changed", CHANGED_ACTION_ROW, &["id", "revision"])
    )
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

pub(crate) fn update_actions<B: Backend>(actions: &[&ActionRecord]) -> Statement<B> {
    Statement::new(update_actions_sql(B::DIALECT.params, actions.len()))
        .rows(CHANGED_ACTION_ROW, actions.iter().copied())
}

/// Extends lease `$3` of the claim on action `$1`, only while ownership version `$2` still holds
/// it: a claim taken over meanwhile stays with its new owner. Found by its key, as
/// [`count_attempts_sql`] says why.
pub(crate) const RENEW_LEASE: &str = "UPDATE actions SET lease_expires_at = $3 \
     WHERE key = $1 AND ownership_version = $2 AND (state = 'in_progress') IS TRUE";

/// Most claims one attempt count names: its WHERE clause is an OR chain, and SQLite refuses an
/// expression tree deeper than 1,000.
pub(crate) const CLAIMS_PER_COUNT: usize = 400;

/// Counts an attempt under each claim (key and ownership version) that is still current, in one
/// conditional statement whose WHERE clause is the fencing check, and sets the first send time
/// and the start of the idempotency window where unset (the first three parameters are the time,
/// once per use, since SQLite's parameters are bound in order); returns the key and attempt
/// number of each claim counted.
///
/// The state is tested as `(state = 'in_progress') IS TRUE`, which no index serves, so that the
/// row is found by its key: with a plain `state = 'in_progress'`, PostgreSQL chose the state
/// index whenever its statistics said few actions were claimed (as at the start of a drain), and
/// walked every claimed entry, live and dead, of that index for each attempt
/// (docs/BENCHMARKS.md, "The drain").
pub(crate) fn count_attempts_sql(params: Params, claims: usize) -> String {
    format!("{} RETURNING key, attempts", count_attempts_update(params, claims))
}

/// [`count_attempts_sql`] without its answer.
fn count_attempts_update(params: Params, claims: usize) -> String {
    let current = (0..claims)
        .map(|i| format!("(key = {} AND ownership_version = {})", params.at(4 + 2 * i), params.at(5 + 2 * i)))
        .collect::<Vec<_>>()
        .join(" OR ");
    format!(
        "UPDATE actions SET attempts = attempts + 1, attempts_in_round = attempts_in_round + 1, \
         first_sent_at = COALESCE(first_sent_at, {}), window_started_at = COALESCE(window_started_at, {}), \
         updated_at = {}, revision = revision + 1 \
         WHERE ({current}) AND (state = 'in_progress') IS TRUE",
        params.at(1),
        params.at(2),
        params.at(3)
    )
}

pub(crate) fn count_attempts<B: Backend>(claims: &[(&ActionKey, i64)], now_ms: i64) -> Statement<B> {
    let statement =
        Statement::new(count_attempts_sql(B::DIALECT.params, claims.len())).int(now_ms).int(now_ms).int(now_ms);
    claims
        .iter()
        .fold(statement, |statement, (key, ownership_version)| statement.text(key.as_str()).int(*ownership_version))
}

/// PostgreSQL: starts an attempt under each of `claims` claims as one autocommitted statement
/// (one round trip, one commit): reads the database's clock (plus the shift `$1`), counts an
/// attempt on each action whose claim (key, ownership version) is still current, setting the first
/// send time and the start of the idempotency window where unset, exactly as [`count_attempts_sql`]
/// does, and inserts the attempt of each action counted, numbered by that count, under the worker
/// and idempotency key given with its claim. The claims are rows of four parameters from `$2`:
/// key, ownership version, worker, idempotency key. Returns the key, number, id and start time of
/// each attempt; a claim missing from the answer is no longer current, and nothing was written for
/// it.
///
/// The actions are found by an OR chain of the claims, as in [`count_attempts_sql`], so that each
/// is found by its key index; the list of claims is joined only to the rows counted, for the
/// insert. Joined to the list in the update, PostgreSQL read every action for a batch of 64
/// (26 ms a statement where the two statements before took 5 ms), or probed the OR chain once per
/// claim (7 ms).
pub(crate) fn pg_start_attempts_sql(claims: usize) -> String {
    let current = (0..claims)
        .map(|i| format!("(a.key = ${} AND a.ownership_version = ${})", 2 + 4 * i, 3 + 4 * i))
        .collect::<Vec<_>>()
        .join(" OR ");
    let rows = (0..claims)
        .map(|i| {
            let n = 2 + 4 * i;
            format!(
                "(CAST(${} AS TEXT), CAST(${} AS BIGINT), CAST(${} AS TEXT), CAST(${} AS TEXT))",
                n,
                n + 1,
                n + 2,
                n + 3
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "WITH {}, claims (key, ownership_version, worker, idempotency_key) AS (VALUES {rows}), \
         counted AS (UPDATE actions a SET attempts = a.attempts + 1, attempts_in_round = a.attempts_in_round + 1, \
         first_sent_at = COALESCE(a.first_sent_at, (SELECT now FROM clock)), \
         window_started_at = COALESCE(a.window_started_at, (SELECT now FROM clock)), \
         updated_at = (SELECT now FROM clock), revision = a.revision + 1 \
         WHERE ({current}) AND (a.state = 'in_progress') IS TRUE \
         RETURNING a.key, a.attempts, a.ownership_version) \
         INSERT INTO attempts (action_key, number, worker, ownership_version, started_at, idempotency_key) \
         SELECT n.key, n.attempts, c.worker, n.ownership_version, (SELECT now FROM clock), c.idempotency_key \
         FROM counted n JOIN claims c ON c.key = n.key AND c.ownership_version = n.ownership_version \
         ORDER BY n.key RETURNING action_key, number, id, started_at",
        pg_clock!("$1")
    )
}

pub(crate) fn pg_start_attempts<B: Backend>(shift_ms: i64, claims: &[AttemptStart<'_>]) -> Statement<B> {
    let statement = Statement::new(pg_start_attempts_sql(claims.len())).int(shift_ms);
    claims.iter().fold(statement, |statement, claim| {
        statement.text(claim.key.as_str()).int(claim.ownership_version).text(claim.worker).text(claim.idempotency_key)
    })
}

/// A claim under which an attempt starts, as [`sqlite_start_attempts_sql`] lists them (a function,
/// not a constant, for the lifetime of the borrowed claim).
pub(crate) fn attempt_start_row<'a>() -> [Column<AttemptStart<'a>>; 4] {
    [
        ("key", Text(|s| Some(s.key.as_str()))),
        ("ownership_version", BigInt(|s| Some(s.ownership_version))),
        ("worker", Text(|s| Some(s.worker))),
        ("idempotency_key", Text(|s| Some(s.idempotency_key))),
    ]
}

/// SQLite: the statements of a transaction that starts an attempt under each of `claims` claims,
/// sent as one command (see [`Dialect::statements_in_one_command`]): the attempt count of
/// [`count_attempts_sql`] on each action whose claim is still current, then the attempt of each
/// action counted, numbered by that count, under the worker and idempotency key of its claim
/// ([`attempt_start_row`]), started at the time bound last. The insert finds the actions counted
/// by the same test as the count (key, ownership version, claimed), which nothing between the two
/// changes. Answers the key, number and id of each attempt, as [`insert_attempts_sql`]: a claim
/// missing from the answer is no longer current, and nothing was written for it.
pub(crate) fn sqlite_start_attempts_sql(claims: usize) -> String {
    format!(
        "{}; WITH claims ({}) AS (VALUES {}) \
         INSERT INTO attempts (action_key, number, worker, ownership_version, started_at, idempotency_key) \
         SELECT a.key, a.attempts, c.worker, a.ownership_version, CAST(? AS BIGINT), c.idempotency_key \
         FROM claims c JOIN actions a ON a.key = c.key AND a.ownership_version = c.ownership_version \
         WHERE (a.state = 'in_progress') IS TRUE ORDER BY a.key RETURNING action_key, number, id",
        count_attempts_update(Params::InOrder, claims),
        names(&attempt_start_row()),
        values(Params::InOrder, claims, &attempt_start_row())
    )
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
    bind_start_attempts(statement.push("; ").push(&sqlite_start_attempts_sql(claims.len())), now_ms, claims)
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

/// SQLite: what a transaction writes back at the end of a result, as one command (see
/// [`Dialect::statements_in_one_command`]): [`update_actions_sql`] for `actions`, answering the id of
/// each action written (the count the ledger checks), then the ends of `finished` attempts
/// ([`finish_attempts_sql`]) and the audit entries `entries` ([`append_audit`]) that the
/// transaction deferred, each only where it has rows. One hop to SQLite's thread instead of three
/// while the write lock is held.
pub(crate) fn sqlite_update_actions_with_deferred<B: Backend>(
    actions: &[&ActionRecord],
    finished: &[Attempt],
    entries: &[AuditEntry],
) -> Statement<B> {
    let mut statement = Statement::new(format!("{} RETURNING id", update_actions_sql(Params::InOrder, actions.len())))
        .rows(CHANGED_ACTION_ROW, actions.iter().copied());
    if !finished.is_empty() {
        statement = statement.push("; ").push(&finish_attempts_sql(Params::InOrder, finished.len()));
        statement = statement.rows(FINISHED_ATTEMPT_ROW, finished);
    }
    if !entries.is_empty() {
        statement = statement.push("; ").push(&insert_sql("audit_trail", Params::InOrder, entries.len(), AUDIT_ROW));
        statement = statement.rows(AUDIT_ROW, entries);
    }
    statement
}

/// How many claims outlived their lease by time `$1`: the console's warning.
pub(crate) const COUNT_STALE_CLAIMS: &str =
    "SELECT COUNT(*) AS count FROM actions WHERE state = 'in_progress' AND lease_expires_at <= $1";

/// How many actions have late results that no person has acknowledged: the console's late pane.
pub(crate) const COUNT_LATE_RESULTS: &str = "SELECT COUNT(*) AS count FROM actions WHERE late_results > 0";

/// Up to `$2` claims whose lease ran out by time `$1`, oldest expiry first: those to recover.
pub(crate) const EXPIRED_CLAIMS: &str = concat!(
    "SELECT ",
    action_columns!(),
    " FROM actions WHERE state = 'in_progress' AND lease_expires_at <= $1 ORDER BY lease_expires_at LIMIT $2"
);

/// For each destination with pending actions waiting out a backoff, when the last wait ends.
pub(crate) const PENDING_BACKOFFS: &str = "SELECT destination, MAX(not_before) AS until FROM actions \
     WHERE state = 'pending' AND not_before IS NOT NULL GROUP BY destination";

/// Per state: how many actions there are, when the least recently changed of them last changed,
/// and how many of them are claims whose lease ran out by time `$1` (only `in_progress` has live
/// leases). Every figure of the ledger's statistics in one pass over `actions`, so that a metrics
/// refresher or a cron job costs the database one statement.
pub(crate) const LEDGER_STATS: &str = "SELECT state, COUNT(*) AS count, MIN(updated_at) AS oldest, \
     SUM(CASE WHEN state = 'in_progress' AND lease_expires_at <= $1 THEN 1 ELSE 0 END) AS expired \
     FROM actions GROUP BY state";

/// How many actions are in each state.
pub(crate) const COUNT_BY_STATE: &str = "SELECT state, COUNT(*) AS count FROM actions GROUP BY state";

/// A page of actions matching a filter, newest first (or oldest first, or most attempts first); with `after_id`, the
/// page before the cursor in that order (the caller turns it round). Built per filter rather than with `$n IS NULL OR ...`
/// terms, so that each combination gets a plan that uses its index: `state` and `destination`
/// have one with `id`, and the keyset cursors walk it.
pub(crate) fn list_actions<B: Backend>(filter: &ListFilter) -> Statement<B> {
    let mut statement = Statement::new(concat!("SELECT ", action_columns!(), " FROM actions WHERE 1 = 1"));
    match (filter.state, filter.or_proposed) {
        (Some(state), true) => {
            statement = statement.push(" AND (state = ").push_text(state.as_str());
            statement = statement.push(" OR proposed_payload IS NOT NULL)");
        }
        (Some(state), false) => statement = statement.push(" AND state = ").push_text(state.as_str()),
        (None, _) => {}
    }
    if filter.late_results {
        statement = statement.push(" AND late_results > 0");
    }
    statement = matching(statement, filter);
    let oldest_first = match filter.order {
        ListOrder::MostAttempts => return by_attempts(statement, filter),
        order => order == ListOrder::OldestFirst,
    };
    let (inclusive, last_page) = (filter.start == PageStart::AtCursor, filter.start == PageStart::Last);
    // The page after a cursor in the order shown, and the page before it (read the other way
    // round, and turned round by the caller).
    let (after, before) = match (oldest_first, inclusive) {
        (true, false) => (" AND id > ", " AND id < "),
        (true, true) => (" AND id >= ", " AND id < "),
        (false, false) => (" AND id < ", " AND id > "),
        (false, true) => (" AND id <= ", " AND id > "),
    };
    if let Some(id) = filter.before_id {
        statement = statement.push(after).push_int(id);
    }
    if let Some(id) = filter.after_id {
        statement = statement.push(before).push_int(id);
    }
    let order = if (filter.after_id.is_some() || last_page) == oldest_first {
        " ORDER BY id DESC LIMIT "
    } else {
        " ORDER BY id ASC LIMIT "
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
            if filter.start == PageStart::AtCursor { " AND (attempts, id) <=" } else { " AND (attempts, id) <" };
        statement = statement.push(after).push(cursor).push_int(id).push(")");
    }
    if let Some(id) = filter.after_id {
        statement = statement.push(" AND (attempts, id) >").push(cursor).push_int(id).push(")");
    }
    let order = if filter.after_id.is_some() || filter.start == PageStart::Last {
        " ORDER BY attempts ASC, id ASC LIMIT "
    } else {
        " ORDER BY attempts DESC, id DESC LIMIT "
    };
    statement.push(order).push_int(filter.limit)
}

/// The terms of a filter a person types (destination, owner or assignee, age, key text, and
/// creation time), added to a statement's `WHERE`.
fn matching<B: Backend>(mut statement: Statement<B>, filter: &ListFilter) -> Statement<B> {
    if let Some(destination) = &filter.destination {
        statement = statement.push(" AND destination = ").push_text(destination.as_str());
    }
    if let Some(owner) = &filter.owner {
        statement = statement.push(" AND (claimed_by = ").push_text(owner.as_str());
        statement = statement.push(" OR assignee = ").push_text(owner.as_str()).push(")");
    }
    if let Some(since) = filter.created_since {
        statement = statement.push(" AND created_at >= ").push_int(since.timestamp_millis());
    }
    if let Some(before) = filter.updated_before {
        statement = statement.push(" AND updated_at < ").push_int(before.timestamp_millis());
    }
    if let Some(text) = &filter.key_contains {
        statement = statement.push(" AND key LIKE ").push_text(contains_pattern(text).as_str()).push(" ESCAPE '\\'");
    }
    statement
}

/// How many actions in each state match a filter's terms (its state, cursors and limit aside):
/// the console's pane counts while a filter is applied.
pub(crate) fn count_matching_by_state<B: Backend>(filter: &ListFilter) -> Statement<B> {
    matching(Statement::new("SELECT state, COUNT(*) AS count FROM actions WHERE 1 = 1"), filter).push(" GROUP BY state")
}

/// A LIKE pattern matching `text` anywhere, with LIKE's own wildcards taken literally.
pub(crate) fn contains_pattern(text: &str) -> String {
    let escaped = text.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_");
    format!("%{escaped}%")
}

/// The (from, to) state pairs the database's trigger accepts.
pub(crate) const ENFORCED_PAIRS: &str = "SELECT from_state, to_state FROM state_transitions";

/// Whether any attempt was recorded under ownership version `$2` of action `$1`.
pub(crate) const ATTEMPT_STARTED_UNDER: &str =
    "SELECT COUNT(*) AS count FROM attempts WHERE action_key = $1 AND ownership_version = $2";

/// Marks the unfinished attempts of action `$1`, but attempt `$2`, as cut off: their claim
/// expired or ended without their result, so their requests may have been sent. `ended_at` stays
/// empty, so that a late result from their worker still replaces the mark with what happened.
pub(crate) const CUT_OFF_ATTEMPTS: &str = "UPDATE attempts SET outcome = 'cut_off' \
     WHERE action_key = $1 AND id <> $2 AND ended_at IS NULL AND outcome IS NULL";

/// One attempt by id `$1`.
pub(crate) const SELECT_ATTEMPT: &str = concat!("SELECT ", attempt_columns!(), " FROM attempts WHERE id = $1");

/// The attempts of action `$1`, oldest first.
pub(crate) const SELECT_ATTEMPTS: &str =
    concat!("SELECT ", attempt_columns!(), " FROM attempts WHERE action_key = $1 ORDER BY id");

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

/// Inserts attempts as they start; returns each new id with its action's key.
pub(crate) fn insert_attempts_sql(params: Params, rows: usize) -> String {
    format!("{} RETURNING id, action_key", insert_sql("attempts", params, rows, STARTED_ATTEMPT_ROW))
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

/// Records the end of many attempts; an attempt that already ended is left as it was, so that a
/// late report cannot overwrite the first.
pub(crate) fn finish_attempts_sql(params: Params, rows: usize) -> String {
    format!(
        "WITH finished ({}) AS (VALUES {}) UPDATE attempts SET {} \
         FROM finished WHERE attempts.id = finished.id AND attempts.ended_at IS NULL",
        names(FINISHED_ATTEMPT_ROW),
        values(params, rows, FINISHED_ATTEMPT_ROW),
        set_from("finished", FINISHED_ATTEMPT_ROW, &["id"])
    )
}

pub(crate) fn finish_attempts<B: Backend>(attempts: &[Attempt]) -> Statement<B> {
    Statement::new(finish_attempts_sql(B::DIALECT.params, attempts.len())).rows(FINISHED_ATTEMPT_ROW, attempts)
}

/// PostgreSQL: the end of `finished` attempts (as [`finish_attempts_sql`]) and `entries` audit
/// entries (as [`append_audit`]) in one statement, the writes a transaction defers to its commit:
/// one round trip instead of two. The attempts' rows are bound first.
pub(crate) fn pg_finish_attempts_with_audit_sql(finished: usize, entries: usize) -> String {
    let first_entry_param = 1 + finished * binds_per_row(FINISHED_ATTEMPT_ROW);
    format!(
        "WITH finished ({}) AS (VALUES {}), ended AS (UPDATE attempts SET {} \
         FROM finished WHERE attempts.id = finished.id AND attempts.ended_at IS NULL) \
         INSERT INTO audit_trail ({}) VALUES {}",
        names(FINISHED_ATTEMPT_ROW),
        values(Params::Numbered, finished, FINISHED_ATTEMPT_ROW),
        set_from("finished", FINISHED_ATTEMPT_ROW, &["id"]),
        names(AUDIT_ROW),
        values_from(Params::Numbered, first_entry_param, entries, AUDIT_ROW)
    )
}

pub(crate) fn pg_finish_attempts_with_audit<B: Backend>(attempts: &[Attempt], entries: &[AuditEntry]) -> Statement<B> {
    Statement::new(pg_finish_attempts_with_audit_sql(attempts.len(), entries.len()))
        .rows(FINISHED_ATTEMPT_ROW, attempts)
        .rows(AUDIT_ROW, entries)
}

/// Person `$2` acknowledges, at `$3`, every late result (stale attempt) of action `$1` that no
/// one has acknowledged yet; the attempts' evidence stays as it was.
pub(crate) const ACKNOWLEDGE_LATE_RESULTS: &str = "UPDATE attempts SET acknowledged_by = $2, acknowledged_at = $3 \
     WHERE action_key = $1 AND stale AND acknowledged_by IS NULL";

/// The deliveries of action `$1`, oldest first.
pub(crate) const SELECT_DELIVERIES: &str = "SELECT id, action_key, event_id, source, source_version, fingerprint, \
     outcome, received_at FROM deliveries WHERE action_key = $1 ORDER BY id";

pub(crate) const DELIVERY_ROW: &[Column<Delivery>] = &[
    ("action_key", Text(|d| Some(d.key.as_str()))),
    ("event_id", Text(|d| d.event_id.as_deref())),
    ("source", Text(|d| d.source.as_deref())),
    ("source_version", BigInt(|d| d.source_version)),
    ("fingerprint", Text(|d| Some(d.fingerprint.as_str()))),
    ("outcome", Text(|d| Some(d.outcome.as_str()))),
    ("received_at", BigInt(|d| Some(d.received_at.timestamp_millis()))),
];

/// Records deliveries of submissions, each with what became of it.
pub(crate) fn insert_deliveries<B: Backend>(deliveries: &[Delivery]) -> Statement<B> {
    Statement::new(insert_sql("deliveries", B::DIALECT.params, deliveries.len(), DELIVERY_ROW))
        .rows(DELIVERY_ROW, deliveries)
}

/// The lookups of action `$1`, oldest first.
pub(crate) const SELECT_LOOKUPS: &str = "SELECT id, action_key, at, actor, verdict, records, destination_id, \
     response_status, response_body, detail FROM lookups WHERE action_key = $1 ORDER BY id";

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

/// Records what a lookup at the destination found.
pub(crate) fn insert_lookup<B: Backend>(lookup: &LookupRecord) -> Statement<B> {
    Statement::new(insert_sql("lookups", B::DIALECT.params, 1, LOOKUP_ROW)).rows(LOOKUP_ROW, [lookup])
}

/// The audit trail of action `$1`, oldest first.
pub(crate) const SELECT_AUDIT: &str = "SELECT id, action_key, at, actor, actor_kind, event, from_state, to_state, \
     ownership_version, revision, reason FROM audit_trail WHERE action_key = $1 ORDER BY id";

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

/// Appends entries to the audit trail, in the order given.
pub(crate) fn append_audit<B: Backend>(entries: &[AuditEntry]) -> Statement<B> {
    Statement::new(insert_sql("audit_trail", B::DIALECT.params, entries.len(), AUDIT_ROW)).rows(AUDIT_ROW, entries)
}

/// Every column of `proposals`, as read back.
macro_rules! proposal_columns {
    () => {
        "id, action_key, fingerprint, payload, source, event_id, source_version, received_at, decision, decided_by, \
         decided_at"
    };
}

/// Every proposal kept for action `$1`, waiting and decided, oldest first: what `show` lists.
pub(crate) const SELECT_PROPOSALS: &str =
    concat!("SELECT ", proposal_columns!(), " FROM proposals WHERE action_key = $1 ORDER BY id");

/// The proposals of action `$1` waiting for a person's decision, oldest first: what a submission
/// compares a new payload with, and what approve and reject choose from.
pub(crate) const SELECT_WAITING_PROPOSALS: &str =
    concat!("SELECT ", proposal_columns!(), " FROM proposals WHERE action_key = $1 AND decision IS NULL ORDER BY id");

/// Keeps proposal `$2` (fingerprint) of action `$1` with payload `$3`, source `$4`, event id `$5`,
/// source version `$6`, received at `$7`. A new one is inserted waiting; one decided before (rejected,
/// or approved and since replaced) waits again, as proposed now; one already waiting stays as it
/// is, since the ledger only keeps a proposal not waiting already. Unique on key and
/// fingerprint: a repeat is never a second row.
pub(crate) const KEEP_PROPOSAL: &str = "INSERT INTO proposals (action_key, fingerprint, payload, source, event_id, \
     source_version, received_at) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (action_key, fingerprint) DO UPDATE \
     SET decision = NULL, decided_by = NULL, decided_at = NULL, source = excluded.source, event_id = excluded.event_id, \
     source_version = excluded.source_version, received_at = excluded.received_at WHERE proposals.decision IS NOT NULL";

/// Person `$2` decides `$1` (approved or rejected) at `$3` on proposal id `$4`, only while it
/// still waits: a decision is never changed.
pub(crate) const DECIDE_PROPOSAL: &str = "UPDATE proposals SET decision = $1, decided_by = $2, decided_at = $3 \
     WHERE id = $4 AND decision IS NULL";

/// Up to `$2` refused submissions older than id `$1` (all when NULL), newest first.
pub(crate) const LIST_REFUSED: &str = "SELECT id, received_at, key_excerpt, problem, message, event_id, source, \
     destination FROM refused_submissions WHERE ($1 IS NULL OR id < $1) ORDER BY id DESC LIMIT $2";

/// How many actions outside `conflict` have a proposed payload awaiting a decision.
pub(crate) const COUNT_PROPOSED_ELSEWHERE: &str =
    "SELECT COUNT(*) AS count FROM actions WHERE proposed_payload IS NOT NULL AND state <> 'conflict'";

/// How many refused submissions are recorded.
pub(crate) const COUNT_REFUSED: &str = "SELECT COUNT(*) AS count FROM refused_submissions";

pub(crate) const REFUSAL_ROW: &[Column<RefusedSubmission>] = &[
    ("received_at", BigInt(|r| Some(r.received_at.timestamp_millis()))),
    ("key_excerpt", Text(|r| r.key_excerpt.as_deref())),
    ("problem", Text(|r| Some(r.problem.as_str()))),
    ("message", Text(|r| Some(r.message.as_str()))),
    ("event_id", Text(|r| r.event_id.as_deref())),
    ("source", Text(|r| r.source.as_deref())),
    ("destination", Text(|r| r.destination.as_deref())),
];

/// Records a submission refused before it became an action, for the console's refused pane.
pub(crate) fn insert_refusal<B: Backend>(refusal: &RefusedSubmission) -> Statement<B> {
    Statement::new(insert_sql("refused_submissions", B::DIALECT.params, 1, REFUSAL_ROW)).rows(REFUSAL_ROW, [refusal])
}

/// Most keys one purge statement names: a bounded list of parameters per statement.
pub(crate) const KEYS_PER_PURGE_STATEMENT: usize = 500;

/// Settled actions a purge reduces to their tombstone: in one of the final `states`, settled
/// (last changed) before `settled_before`, with no proposed payload and no unacknowledged late
/// result waiting for a person (its evidence is among what a purge removes), and not purged
/// already; their keys in key order, locked (where the dialect locks rows) like
/// [`lock_actions_sql`], so that a submission of one of these keys waits for the purge to end.
pub(crate) fn purge_candidates<B: Backend>(states: &[State], settled_before_ms: i64) -> Statement<B> {
    let mut statement = Statement::new("SELECT a.key FROM actions a WHERE a.state IN (");
    for (i, state) in states.iter().enumerate() {
        statement = statement.push(if i == 0 { "" } else { ", " }).push_text(state.as_str());
    }
    statement
        .push(") AND a.updated_at < ")
        .push_int(settled_before_ms)
        .push(
            " AND a.proposed_payload IS NULL AND a.late_results = 0 \
             AND NOT EXISTS (SELECT 1 FROM purged_actions p WHERE p.action_key = a.key) ORDER BY a.key",
        )
        .push(B::DIALECT.lock_suffix)
}

/// `column IN (...)` over `keys.len()` parameters, starting at parameter `first`.
fn keys_in(params: Params, column: &str, first: usize, keys: usize) -> String {
    let list = (0..keys).map(|i| params.at(first + i)).collect::<Vec<_>>().join(", ");
    format!("{column} IN ({list})")
}

fn bind_keys<B: Backend>(statement: Statement<B>, keys: &[ActionKey]) -> Statement<B> {
    keys.iter().fold(statement, |statement, key| statement.text(key.as_str()))
}

/// Empties the bulk of actions about to be purged: the approved payload becomes JSON null (the
/// column stays NOT NULL, and readers still parse it) and the last error goes. Key, fingerprint,
/// state, destination id and settled time (`updated_at`, left as it was) are the tombstone.
pub(crate) fn empty_purged_actions_sql(params: Params, keys: usize) -> String {
    format!(
        "UPDATE actions SET payload = 'null', last_error = NULL, revision = revision + 1 WHERE {}",
        keys_in(params, "key", 1, keys)
    )
}

pub(crate) fn empty_purged_actions<B: Backend>(keys: &[ActionKey]) -> Statement<B> {
    bind_keys(Statement::new(empty_purged_actions_sql(B::DIALECT.params, keys.len())), keys)
}

/// The histories a purge deletes, each with the action's key in `action_key`, in the order of
/// the counts of [`crate::domain::PurgeCounts`]. The audit trail is not among them: it is kept in
/// full.
pub(crate) const PURGED_HISTORIES: [&str; 3] = ["deliveries", "attempts", "lookups"];

/// Deletes the rows of one of [`PURGED_HISTORIES`] that belong to the actions being purged.
pub(crate) fn delete_purged_history_sql(params: Params, table: &str, keys: usize) -> String {
    assert!(PURGED_HISTORIES.contains(&table), "{table} is not a history a purge deletes");
    format!("DELETE FROM {table} WHERE {}", keys_in(params, "action_key", 1, keys))
}

pub(crate) fn delete_purged_history<B: Backend>(table: &str, keys: &[ActionKey]) -> Statement<B> {
    bind_keys(Statement::new(delete_purged_history_sql(B::DIALECT.params, table, keys.len())), keys)
}

/// Records one purge run with what it removed; returns its id.
pub(crate) const INSERT_PURGE: &str = "INSERT INTO purges (at, owner, reason, older_than_ms, settled_before, \
     states, actions, deliveries, attempts, lookups) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id";

/// Deletes the proposals of the actions being purged: their payloads go with the rest of the
/// bulk (a settled action has none waiting; the audit trail keeps each one's fingerprint).
pub(crate) fn delete_purged_proposals<B: Backend>(keys: &[ActionKey]) -> Statement<B> {
    let sql = format!("DELETE FROM proposals WHERE {}", keys_in(B::DIALECT.params, "action_key", 1, keys.len()));
    bind_keys(Statement::new(sql), keys)
}

/// Marks actions as purged by run `$1`: their tombstone marker.
pub(crate) fn mark_purged_sql(params: Params, keys: usize) -> String {
    format!(
        "INSERT INTO purged_actions (action_key, purge_id) SELECT key, {} FROM actions WHERE {}",
        params.at(1),
        keys_in(params, "key", 2, keys)
    )
}

pub(crate) fn mark_purged<B: Backend>(purge_id: i64, keys: &[ActionKey]) -> Statement<B> {
    bind_keys(Statement::new(mark_purged_sql(B::DIALECT.params, keys.len())).int(purge_id), keys)
}

/// The purge run that purged action `$1`, if one did.
pub(crate) const SELECT_PURGE_OF: &str = "SELECT p.id, p.at, p.owner, p.reason, p.older_than_ms, \
     p.settled_before, p.states, p.actions, p.deliveries, p.attempts, p.lookups \
     FROM purged_actions m JOIN purges p ON p.id = m.purge_id WHERE m.action_key = $1";

// The schema's own version, as sqlx records it in `_sqlx_migrations`: read before migrating, so
// that a build older than the ledger refuses to write, and `migrate --status` can say where the
// ledger stands without changing it.

/// Whether the migrations table exists in the ledger's schema (PostgreSQL: the session's
/// `search_path`, which holds the ledger's schema only).
pub(crate) const POSTGRES_HAS_MIGRATIONS: &str = "SELECT to_regclass('_sqlx_migrations') IS NOT NULL";

/// Whether the migrations table exists in the ledger file (SQLite).
pub(crate) const SQLITE_HAS_MIGRATIONS: &str =
    "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations')";

/// The migrations applied to the ledger, oldest first.
pub(crate) const APPLIED_MIGRATIONS: &str =
    "SELECT version, description, checksum FROM _sqlx_migrations WHERE success ORDER BY version";

/// Whether a schema of name `$1` exists (PostgreSQL).
pub(crate) const SCHEMA_EXISTS: &str = "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)";

/// Whether `public` holds a ledger made before ledgers had a schema of their own: its `actions`
/// table, the guard function only this ledger defines, and a migrations table. An application's
/// own `actions` table or sqlx migrations alone do not look like one.
pub(crate) const LEDGER_IN_PUBLIC: &str = "SELECT to_regclass('public.actions') IS NOT NULL \
     AND to_regclass('public._sqlx_migrations') IS NOT NULL \
     AND EXISTS (SELECT 1 FROM pg_proc WHERE pronamespace = 'public'::regnamespace \
                 AND proname = 'actionledger_guard_action')";

/// Rows of `public._sqlx_migrations`: the ledger's own are moved with it, any others belong to
/// the application that shares the schema.
pub(crate) const PUBLIC_MIGRATIONS: &str = "SELECT version, description, checksum FROM public._sqlx_migrations";

/// The signatures (`public.name(args)`) of the functions named in `$1` that `public` holds.
pub(crate) const PUBLIC_FUNCTIONS: &str = "SELECT p.oid::regprocedure::text FROM pg_proc p \
     WHERE p.pronamespace = 'public'::regnamespace AND p.proname = ANY($1) ORDER BY 1";

/// The tables of the names in `$1` that `public` holds.
pub(crate) const PUBLIC_TABLES: &str = "SELECT c.relname::text FROM pg_class c \
     WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' AND c.relname = ANY($1) ORDER BY 1";
