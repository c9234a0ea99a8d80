-- Statements on `actions`: one row per action, read and written by the ledger's transactions.
--
-- Times are integer milliseconds of database time. A `{hole}` is filled by the store for the
-- number of rows a statement is sent for: a list of parameters, or the column names, `VALUES`
-- rows and `SET` terms of a column list in batch.rs (each column with the value it binds).
--
-- An action's columns are listed, never `*`: SQLite re-prepares a statement when another process
-- changes the schema, and a `*` then answers more columns than sqlx-sqlite read when it first
-- prepared it, which panics inside sqlx (16 processes on a new ledger, one migrating while
-- another submits). A listed column a migration has not added yet fails as an error instead.

-- name: select_action
-- One action by its key.
-- $1 key: the action's key
SELECT id, key, state, payload, fingerprint, proposed_payload, proposed_fingerprint,
       proposed_source_version, resume_state, source, source_version, destination, after_key,
       claimed_by, ownership_version, revision, lease_expires_at, not_before, attempts,
       attempts_in_round, assignee, destination_id, first_sent_at, window_started_at, late_results,
       old_worker_may_act, may_have_written, last_error, created_at, updated_at, payload_revision,
       idempotency_key, updates_key, updates_destination_id
FROM actions
WHERE key = $1;

-- name: after_links
-- The `after` links reachable from an action: each action's key and the key it waits for,
-- following the chain (UNION stops at a key seen before, so even a cycle ends). The ledger reads
-- it to refuse a new action whose chain leads back to itself. Each step reads one action by its
-- key, which is indexed.
-- $1 key: where the chain starts
WITH RECURSIVE chain (key) AS (
    SELECT CAST($1 AS TEXT)
    UNION
    SELECT a.after_key FROM actions a JOIN chain c ON a.key = c.key WHERE a.after_key IS NOT NULL
)
SELECT a.key, a.after_key
FROM actions a JOIN chain c ON a.key = c.key
WHERE a.after_key IS NOT NULL;

-- name: lock_actions
-- Reads actions by key and locks them (where the dialect locks rows), in key order, so that
-- concurrent batches lock rows in one order and cannot deadlock.
-- {keys}: one parameter per key
-- {lock}: the dialect's row lock (` FOR UPDATE` on PostgreSQL, nothing on SQLite)
SELECT id, key, state, payload, fingerprint, proposed_payload, proposed_fingerprint,
       proposed_source_version, resume_state, source, source_version, destination, after_key,
       claimed_by, ownership_version, revision, lease_expires_at, not_before, attempts,
       attempts_in_round, assignee, destination_id, first_sent_at, window_started_at, late_results,
       old_worker_may_act, may_have_written, last_error, created_at, updated_at, payload_revision,
       idempotency_key, updates_key, updates_destination_id
FROM actions
WHERE key IN ({keys})
ORDER BY key{lock};

-- name: pg_lock_actions_now
-- PostgreSQL: lock_actions that also reads the database's clock, as column `now` of every row
-- (an uncorrelated subquery: read once), so that a transaction that begins by locking needs no
-- round trip of its own for the time.
-- {keys}: one parameter per key
SELECT id, key, state, payload, fingerprint, proposed_payload, proposed_fingerprint,
       proposed_source_version, resume_state, source, source_version, destination, after_key,
       claimed_by, ownership_version, revision, lease_expires_at, not_before, attempts,
       attempts_in_round, assignee, destination_id, first_sent_at, window_started_at, late_results,
       old_worker_may_act, may_have_written, last_error, created_at, updated_at, payload_revision,
       idempotency_key, updates_key, updates_destination_id,
       (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now
FROM actions
WHERE key IN ({keys})
ORDER BY key
FOR UPDATE;

-- name: insert_actions
-- Inserts new pending actions, skipping keys that exist (a concurrent submission of the same key
-- won); returns the rows inserted.
-- {columns}, {rows}: NEW_ACTION_ROW
INSERT INTO actions ({columns})
VALUES {rows}
ON CONFLICT (key) DO NOTHING
RETURNING id, key, state, payload, fingerprint, proposed_payload, proposed_fingerprint,
          proposed_source_version, resume_state, source, source_version, destination, after_key,
          claimed_by, ownership_version, revision, lease_expires_at, not_before, attempts,
          attempts_in_round, assignee, destination_id, first_sent_at, window_started_at, late_results,
          old_worker_may_act, may_have_written, last_error, created_at, updated_at, payload_revision,
          idempotency_key, updates_key, updates_destination_id;

-- name: update_actions
-- Writes back every mutable field of many actions, each only if its revision is still the one
-- read (a change made meanwhile wins, and the write is not counted), and advances their
-- revisions.
-- {columns}, {rows}, {set}: CHANGED_ACTION_ROW (id and revision find the row)
WITH changed ({columns}) AS (
    VALUES {rows}
)
UPDATE actions
SET {set},
    revision = actions.revision + 1
FROM changed
WHERE actions.id = changed.id AND actions.revision = changed.revision;

-- name: sqlite_update_actions_returning_id
-- SQLite: update_actions answering the id of each action written, the count the ledger checks,
-- when the statement is one of several in one command (whose count is the last statement's).
-- {columns}, {rows}, {set}: CHANGED_ACTION_ROW (id and revision find the row)
WITH changed ({columns}) AS (
    VALUES {rows}
)
UPDATE actions
SET {set},
    revision = actions.revision + 1
FROM changed
WHERE actions.id = changed.id AND actions.revision = changed.revision
RETURNING id;

-- name: pg_update_actions_with_deferred
-- PostgreSQL: update_actions, sending with it the end of one attempt (as finish_attempts) and
-- the audit entries (as append_audit) that the transaction deferred: a result's three writes in
-- one round trip. The count it answers is the actions' alone, as the ledger's check needs; a
-- refused write rolls back the others with it. Parameters are numbered in order: the actions'
-- rows, the attempt's, the entries'.
-- {changed_columns}, {changed_rows}, {changed_set}: CHANGED_ACTION_ROW
-- {finished_columns}, {finished_row}, {finished_set}: FINISHED_ATTEMPT_ROW
-- {audit_columns}, {audit_rows}: AUDIT_ROW
WITH changed ({changed_columns}) AS (
    VALUES {changed_rows}
),
finished ({finished_columns}) AS (
    VALUES {finished_row}
),
ended AS (
    UPDATE attempts
    SET {finished_set}
    FROM finished
    WHERE attempts.id = finished.id AND attempts.ended_at IS NULL
),
noted AS (
    INSERT INTO audit_trail ({audit_columns})
    VALUES {audit_rows}
)
UPDATE actions
SET {changed_set},
    revision = actions.revision + 1
FROM changed
WHERE actions.id = changed.id AND actions.revision = changed.revision;

-- name: renew_lease
-- Extends the lease of the claim on an action, only while the claim's ownership version still
-- holds it: a claim taken over meanwhile stays with its new owner. The state is tested as
-- `(state = 'in_progress') IS TRUE` so that the row is found by its key (see count_attempts).
-- $1 key: the action's key
-- $2 ownership_version: the claim's
-- $3 lease_expires_at: the new end of the lease
UPDATE actions
SET lease_expires_at = $3
WHERE key = $1 AND ownership_version = $2 AND (state = 'in_progress') IS TRUE;

-- name: count_attempts
-- Counts an attempt under each claim (key and ownership version) that is still current, in one
-- conditional statement whose WHERE clause is the fencing check, and sets the first send time
-- and the start of the idempotency window where unset; returns the key and attempt number of
-- each claim counted.
--
-- The state is tested as `(state = 'in_progress') IS TRUE`, which no index serves, so that the
-- row is found by its key: with a plain `state = 'in_progress'`, PostgreSQL chose the state
-- index whenever its statistics said few actions were claimed (as at the start of a drain), and
-- walked every claimed entry, live and dead, of that index for each attempt
-- (docs/BENCHMARKS.md, "The drain").
-- {now}: the time, one parameter per use ($1, $2, $3), since SQLite binds parameters in order
-- {claims}: `(key = $n AND ownership_version = $n+1)` per claim, joined by OR, from $4
UPDATE actions
SET attempts = attempts + 1,
    attempts_in_round = attempts_in_round + 1,
    first_sent_at = COALESCE(first_sent_at, {now}),
    window_started_at = COALESCE(window_started_at, {now}),
    updated_at = {now},
    revision = revision + 1
WHERE ({claims}) AND (state = 'in_progress') IS TRUE
RETURNING key, attempts;

-- name: count_stale_claims
-- How many claims outlived their lease: the console's warning.
-- $1 now: the time
SELECT COUNT(*) AS count
FROM actions
WHERE state = 'in_progress' AND lease_expires_at <= $1;

-- name: count_late_results
-- How many actions have late results that no person has acknowledged: the console's late pane.
SELECT COUNT(*) AS count
FROM actions
WHERE late_results > 0;

-- name: expired_claims
-- The claims whose lease ran out, oldest expiry first: those to recover, for the destinations
-- the recovering worker serves (another destination's expired claims, whose workers may be
-- stopped, never take the places of its own). {destinations} is the dialect's list of the
-- texts in the JSON list $3.
-- $1 now: the time
-- $2 limit: at most this many
-- $3 destinations: JSON list of the destinations recovered for, or NULL for all
-- $4 unassigned: whether claims of actions without a destination are recovered too
SELECT id, key, state, payload, fingerprint, proposed_payload, proposed_fingerprint,
       proposed_source_version, resume_state, source, source_version, destination, after_key,
       claimed_by, ownership_version, revision, lease_expires_at, not_before, attempts,
       attempts_in_round, assignee, destination_id, first_sent_at, window_started_at, late_results,
       old_worker_may_act, may_have_written, last_error, created_at, updated_at, payload_revision,
       idempotency_key, updates_key, updates_destination_id
FROM actions
WHERE state = 'in_progress' AND lease_expires_at <= $1
  AND (CAST($3 AS TEXT) IS NULL
       OR destination IN ({destinations})
       OR (destination IS NULL AND $4))
ORDER BY lease_expires_at
LIMIT $2;

-- name: pending_backoffs
-- For each destination with pending actions waiting out a backoff, when the last wait ends.
SELECT destination, MAX(not_before) AS until
FROM actions
WHERE state = 'pending' AND not_before IS NOT NULL
GROUP BY destination;

-- name: ledger_stats
-- Per state: how many actions there are, when the least recently changed of them last changed,
-- and how many of them are claims whose lease ran out (only `in_progress` has live leases).
-- Every figure of the ledger's statistics in one pass over `actions`, so that a metrics
-- refresher or a cron job costs the database one statement.
-- $1 now: the time
SELECT state, COUNT(*) AS count, MIN(updated_at) AS oldest,
       SUM(CASE WHEN state = 'in_progress' AND lease_expires_at <= $1 THEN 1 ELSE 0 END) AS expired
FROM actions
GROUP BY state;

-- name: claimable_since_by_destination
-- For each destination with claimable actions, when the one that has waited longest became
-- claimable: the queue's latency, as a job queue reports it. Claimable as claims.sql defines it:
-- pending, its backoff over, no proposal waiting for a person, and the action it follows (if any)
-- completed. It became claimable at the latest of when it last changed, when its backoff ended and
-- when the action it follows last changed (completed).
-- $1 now: the time
SELECT destination,
       MIN(CASE WHEN followed_at > since THEN followed_at ELSE since END) AS since
FROM (
    SELECT a.destination AS destination,
           CASE WHEN a.not_before > a.updated_at THEN a.not_before ELSE a.updated_at END AS since,
           p.updated_at AS followed_at
    FROM actions a
    LEFT JOIN actions p ON p.key = a.after_key
    WHERE a.state = 'pending'
      AND (a.not_before IS NULL OR a.not_before <= $1)
      AND a.proposed_payload IS NULL
      AND (a.after_key IS NULL OR p.state = 'completed')
) claimable
GROUP BY destination;

-- name: select_states
-- The state of each recorded action among some keys: what the actions that wait on them are
-- waiting for (a blocked dependent, see domain/blocked.rs). A key not recorded answers no row.
-- {keys}: one parameter per key
SELECT key, state
FROM actions
WHERE key IN ({keys});

-- name: count_waiting_by_after_state
-- How many pending actions wait on an action in each state: `stats` counts those the ledger calls
-- blocked (the states that block are decided in domain/blocked.rs, not here). Each waiting action
-- finds the action it waits on by its key, which is indexed.
SELECT p.state AS state, COUNT(*) AS count
FROM actions a
JOIN actions p ON p.key = a.after_key
WHERE a.state = 'pending' AND a.after_key IS NOT NULL
GROUP BY p.state;

-- name: count_by_state
-- How many actions are in each state.
SELECT state, COUNT(*) AS count
FROM actions
GROUP BY state;

-- name: count_proposed_elsewhere
-- How many actions outside `conflict` have a proposed payload awaiting a decision.
SELECT COUNT(*) AS count
FROM actions
WHERE proposed_payload IS NOT NULL AND state <> 'conflict';

-- name: list_actions
-- A page of actions matching a filter. The filter's terms, the page's cursor, its order and its
-- limit follow `1 = 1`, each with its own parameter, as `list_actions` in statements.rs adds
-- them: per filter rather than with `$n IS NULL OR ...` terms, so that each combination gets a
-- plan that uses its index.
SELECT id, key, state, payload, fingerprint, proposed_payload, proposed_fingerprint,
       proposed_source_version, resume_state, source, source_version, destination, after_key,
       claimed_by, ownership_version, revision, lease_expires_at, not_before, attempts,
       attempts_in_round, assignee, destination_id, first_sent_at, window_started_at, late_results,
       old_worker_may_act, may_have_written, last_error, created_at, updated_at, payload_revision,
       idempotency_key, updates_key, updates_destination_id
FROM actions
WHERE 1 = 1;

-- name: count_matching_by_state
-- How many actions in each state match a filter's terms (its state, cursors and limit aside):
-- the console's pane counts while a filter is applied.
-- {terms}: the filter's terms, each `AND ...` with its own parameter
SELECT state, COUNT(*) AS count
FROM actions
WHERE 1 = 1{terms}
GROUP BY state;

-- name: count_matching_notices
-- Of the actions that match a filter's terms (its state, cursors and limit aside): those outside
-- `conflict` whose proposed payload awaits a decision, those with late results no person has
-- acknowledged, and the claims that outlived their lease: the console's notices while a filter
-- is applied, as `count_proposed_elsewhere`, `count_late_results` and `count_stale_claims` count
-- them without one.
-- {now}: the parameter of the time, the first; the terms' parameters follow it
-- {terms}: the filter's terms, each `AND ...` with its own parameter
SELECT COALESCE(SUM(CASE WHEN proposed_payload IS NOT NULL AND state <> 'conflict' THEN 1 ELSE 0 END), 0)
           AS proposed_elsewhere,
       COALESCE(SUM(CASE WHEN late_results > 0 THEN 1 ELSE 0 END), 0) AS late_results,
       COALESCE(SUM(CASE WHEN state = 'in_progress' AND lease_expires_at <= {now} THEN 1 ELSE 0 END), 0)
           AS stale_claims
FROM actions
WHERE 1 = 1{terms};

-- name: enforced_pairs
-- The (from, to) state pairs the database's trigger accepts.
SELECT from_state, to_state
FROM state_transitions;
