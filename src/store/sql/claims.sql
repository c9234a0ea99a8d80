-- The worker's path: claiming pending actions and starting their attempts.
--
-- An action is claimable (runnable) when it is pending, its backoff is over, no proposal waits
-- for a person, and the action it must follow (if any) has completed; a claim may be limited to
-- a JSON list of destinations (all when NULL) and, or only, to actions without a destination,
-- and to one action by its key: `{only_key}` is empty for a worker's claim, or `AND a.key = $n`
-- (the statement's last parameter) for an automation beginning one action through `serve`. A
-- hole, not `($n IS NULL OR a.key = $n)`, so that each form keeps a plan of its own: one that
-- reads the key's index, and one that reads the pending rows in order.
-- The picked ids are materialized once: PostgreSQL may otherwise evaluate a LIMIT subquery under
-- IN more than once and claim more rows than asked.
--
-- The statements named `pg_*` are PostgreSQL's only: they write several tables in one statement
-- (data-modifying CTEs, which SQLite lacks) and read the clock inside, so that the worker's
-- per-action path costs few round trips (docs/BENCHMARKS.md, "The drain"). They read the
-- database's clock once per statement, shifted by a test's offset (0 otherwise), as column `now`
-- of a one-row `clock` CTE.

-- name: sqlite_claim
-- SQLite: claims runnable pending actions, oldest first; returns the claimed rows. SQLite has one
-- writer at a time, so there is nothing to lock row by row. PostgreSQL claims with
-- pg_claim_with_audit or pg_claim_and_start, which write the claims' audit entries too.
-- $1 worker: who claims
-- $2 now: the time
-- $3 lease_expires_at: the end of the claims' lease
-- $4 limit: at most this many
-- $5 destinations: JSON list of the destinations claimed for, or NULL for all
-- $6 unassigned: whether actions without a destination are claimed too
-- $7 key: the one action claimed, where {only_key} names it
-- {only_key}: empty, or `AND a.key = $7`
WITH picked AS MATERIALIZED (
    SELECT a.id
    FROM actions a
    WHERE a.state = 'pending'
      AND (a.not_before IS NULL OR a.not_before <= $2)
      AND a.proposed_payload IS NULL
      AND (CAST($5 AS TEXT) IS NULL
           OR a.destination IN (SELECT value FROM json_each($5))
           OR (a.destination IS NULL AND $6))
      AND (a.after_key IS NULL
           OR EXISTS (SELECT 1 FROM actions p WHERE p.key = a.after_key AND p.state = 'completed'))
      {only_key}
    ORDER BY a.id
    LIMIT $4
)
UPDATE actions
SET state = 'in_progress',
    claimed_by = $1,
    ownership_version = ownership_version + 1,
    revision = revision + 1,
    lease_expires_at = $3,
    not_before = NULL,
    updated_at = $2
WHERE id IN (SELECT id FROM picked) AND state = 'pending'
RETURNING id, key, state, payload, fingerprint, proposed_payload, proposed_fingerprint,
          proposed_source_version, resume_state, source, source_version, destination, after_key,
          claimed_by, ownership_version, revision, lease_expires_at, not_before, attempts,
          attempts_in_round, assignee, destination_id, first_sent_at, window_started_at, late_results,
          old_worker_may_act, may_have_written, last_error, created_at, updated_at, payload_revision,
          idempotency_key, updates_key, updates_destination_id;

-- name: pg_claim_with_audit
-- PostgreSQL: the whole claim as one autocommitted statement (one round trip, one commit, no
-- BEGIN or COMMIT of its own): reads the database's clock, claims runnable actions with a lease
-- from that time (as sqlite_claim, skipping rows another worker is claiming at the same moment), and appends each claim's audit entry, with the version and revision the claim
-- gave the action. Returns the claimed rows. The guard triggers fire on each row as they do for
-- separate statements; if any refuses, nothing is claimed.
--
-- The limit is written into the text, not bound: with `LIMIT $n` PostgreSQL planned the
-- statement again at every call (a generic plan's row estimate for a bound limit is a tenth of
-- the table, so it never preferred the generic plan), 0.3 ms of the server's CPU per claim; with
-- a constant it keeps one plan per connection and limit (docs/BENCHMARKS.md, "The drain").
-- $1 worker: who claims, and the audit entries' actor
-- $2 lease_ms: the lease, in milliseconds from the clock
-- $3 shift_ms: the clock's shift
-- $4 destinations: JSON list of the destinations claimed for, or NULL for all
-- $5 unassigned: whether actions without a destination are claimed too
-- $6 actor_kind, $7 event, $8 from_state, $9 to_state: the audit entries', as the ledger says
-- $10 key: the one action claimed, where {only_key} names it
-- {only_key}: empty, or `AND a.key = $10`
-- {limit}: at most this many, written into the text
WITH clock AS MATERIALIZED (
    SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint + CAST($3 AS BIGINT) AS now
),
picked AS MATERIALIZED (
    SELECT a.id
    FROM actions a
    WHERE a.state = 'pending'
      AND (a.not_before IS NULL OR a.not_before <= (SELECT now FROM clock))
      AND a.proposed_payload IS NULL
      AND (CAST($4 AS TEXT) IS NULL
           OR a.destination IN (SELECT json_array_elements_text($4::json))
           OR (a.destination IS NULL AND $5))
      AND (a.after_key IS NULL
           OR EXISTS (SELECT 1 FROM actions p WHERE p.key = a.after_key AND p.state = 'completed'))
      {only_key}
    ORDER BY a.id
    LIMIT {limit}
    FOR UPDATE OF a SKIP LOCKED
),
claimed AS (
    UPDATE actions
    SET state = 'in_progress',
        claimed_by = $1,
        ownership_version = ownership_version + 1,
        revision = revision + 1,
        lease_expires_at = (SELECT now FROM clock) + CAST($2 AS BIGINT),
        not_before = NULL,
        updated_at = (SELECT now FROM clock)
    WHERE id IN (SELECT id FROM picked) AND state = 'pending'
    RETURNING id, key, state, payload, fingerprint, proposed_payload, proposed_fingerprint,
              proposed_source_version, resume_state, source, source_version, destination, after_key,
              claimed_by, ownership_version, revision, lease_expires_at, not_before, attempts,
              attempts_in_round, assignee, destination_id, first_sent_at, window_started_at, late_results,
              old_worker_may_act, may_have_written, last_error, created_at, updated_at, payload_revision,
              idempotency_key, updates_key, updates_destination_id
),
audit AS (
    INSERT INTO audit_trail (action_key, at, actor, actor_kind, event, from_state, to_state,
                             ownership_version, revision, reason)
    SELECT key, updated_at, $1, CAST($6 AS TEXT), CAST($7 AS TEXT), CAST($8 AS TEXT), CAST($9 AS TEXT),
           ownership_version, revision, NULL
    FROM claimed
    ORDER BY id
)
SELECT id, key, state, payload, fingerprint, proposed_payload, proposed_fingerprint,
       proposed_source_version, resume_state, source, source_version, destination, after_key,
       claimed_by, ownership_version, revision, lease_expires_at, not_before, attempts,
       attempts_in_round, assignee, destination_id, first_sent_at, window_started_at, late_results,
       old_worker_may_act, may_have_written, last_error, created_at, updated_at, payload_revision,
       idempotency_key, updates_key, updates_destination_id
FROM claimed;

-- name: pg_claim_and_start
-- PostgreSQL: pg_claim_with_audit, which also starts the attempt of each claimed action whose
-- destination protects against a repeat whatever was sent, in the same statement (one commit
-- where a claim and a start made two); the ledger says which (see StartsAtClaim in the domain).
-- For those rows it does what pg_start_attempts does: counts the attempt, sets the first send
-- time and the start of the window where unset, and inserts the attempt (under the claiming
-- worker and the action's sending key), numbered by that count, at the claim's time. The
-- revision moves one step, as for any one write.
--
-- Each row answers the action as written, with `starts` (1 where the attempt started, else 0),
-- the first send time and window start as they were before (`claimed_first_sent_at`,
-- `claimed_window_started_at`), and the started attempt's `attempt_id` and `attempt_number`.
-- $1 to $9: as in pg_claim_with_audit
-- $10 default_destination: the destination of actions without one
-- $11 always: JSON list of destinations whose claims always start their attempt
-- $12 before_window: JSON list of those whose claims start it only while no idempotency window runs
-- $13 key: the one action claimed, where {only_key} names it
-- {only_key}: empty, or `AND a.key = $13`
-- {limit}: at most this many, written into the text
WITH clock AS MATERIALIZED (
    SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint + CAST($3 AS BIGINT) AS now
),
picked AS MATERIALIZED (
    SELECT a.id
    FROM actions a
    WHERE a.state = 'pending'
      AND (a.not_before IS NULL OR a.not_before <= (SELECT now FROM clock))
      AND a.proposed_payload IS NULL
      AND (CAST($4 AS TEXT) IS NULL
           OR a.destination IN (SELECT json_array_elements_text($4::json))
           OR (a.destination IS NULL AND $5))
      AND (a.after_key IS NULL
           OR EXISTS (SELECT 1 FROM actions p WHERE p.key = a.after_key AND p.state = 'completed'))
      {only_key}
    ORDER BY a.id
    LIMIT {limit}
    FOR UPDATE OF a SKIP LOCKED
),
starting AS (
    SELECT a.id AS picked_id,
           a.first_sent_at AS claimed_first_sent_at,
           a.window_started_at AS claimed_window_started_at,
           CASE WHEN COALESCE(a.destination, CAST($10 AS TEXT)) IN (SELECT json_array_elements_text($11::json))
                  OR (a.window_started_at IS NULL
                      AND COALESCE(a.destination, CAST($10 AS TEXT)) IN (SELECT json_array_elements_text($12::json)))
                THEN CAST(1 AS BIGINT) ELSE CAST(0 AS BIGINT) END AS starts
    FROM actions a
    WHERE a.id IN (SELECT id FROM picked)
),
claimed AS (
    UPDATE actions
    SET state = 'in_progress',
        claimed_by = $1,
        ownership_version = ownership_version + 1,
        revision = revision + 1,
        lease_expires_at = (SELECT now FROM clock) + CAST($2 AS BIGINT),
        not_before = NULL,
        updated_at = (SELECT now FROM clock),
        attempts = attempts + s.starts,
        attempts_in_round = attempts_in_round + s.starts,
        first_sent_at = CASE WHEN s.starts = 1 THEN COALESCE(first_sent_at, (SELECT now FROM clock))
                        ELSE first_sent_at END,
        window_started_at = CASE WHEN s.starts = 1 THEN COALESCE(window_started_at, (SELECT now FROM clock))
                            ELSE window_started_at END
    FROM starting s
    WHERE id = s.picked_id AND state = 'pending'
    RETURNING id, key, state, payload, fingerprint, proposed_payload, proposed_fingerprint,
              proposed_source_version, resume_state, source, source_version, destination, after_key,
              claimed_by, ownership_version, revision, lease_expires_at, not_before, attempts,
              attempts_in_round, assignee, destination_id, first_sent_at, window_started_at, late_results,
              old_worker_may_act, may_have_written, last_error, created_at, updated_at, payload_revision,
              idempotency_key, updates_key, updates_destination_id,
              s.starts, s.claimed_first_sent_at, s.claimed_window_started_at
),
audit AS (
    INSERT INTO audit_trail (action_key, at, actor, actor_kind, event, from_state, to_state,
                             ownership_version, revision, reason)
    SELECT key, updated_at, $1, CAST($6 AS TEXT), CAST($7 AS TEXT), CAST($8 AS TEXT), CAST($9 AS TEXT),
           ownership_version, revision, NULL
    FROM claimed
    ORDER BY id
),
started AS (
    INSERT INTO attempts (action_key, number, worker, ownership_version, started_at, idempotency_key)
    SELECT key, attempts, $1, ownership_version, updated_at, COALESCE(idempotency_key, key)
    FROM claimed
    WHERE starts = 1
    ORDER BY key
    RETURNING action_key, id AS attempt_id, number AS attempt_number
)
SELECT id, key, state, payload, fingerprint, proposed_payload, proposed_fingerprint,
       proposed_source_version, resume_state, source, source_version, destination, after_key,
       claimed_by, ownership_version, revision, lease_expires_at, not_before, attempts,
       attempts_in_round, assignee, destination_id, first_sent_at, window_started_at, late_results,
       old_worker_may_act, may_have_written, last_error, created_at, updated_at, payload_revision,
       idempotency_key, updates_key, updates_destination_id,
       starts, claimed_first_sent_at, claimed_window_started_at, attempt_id, attempt_number
FROM claimed LEFT JOIN started ON action_key = key;

-- name: pg_start_attempts
-- PostgreSQL: starts an attempt under each of a list of claims as one autocommitted statement
-- (one round trip, one commit): reads the database's clock, counts an attempt on each action
-- whose claim (key, ownership version) is still current, setting the first send time and the
-- start of the idempotency window where unset, exactly as count_attempts does, and inserts the
-- attempt of each action counted, numbered by that count, under the worker and idempotency key
-- given with its claim. Returns the key, number, id and start time of each attempt; a claim
-- missing from the answer is no longer current, and nothing was written for it.
--
-- The actions are found by an OR chain of the claims, as in count_attempts, so that each is
-- found by its key index; the list of claims is joined only to the rows counted, for the insert.
-- Joined to the list in the update, PostgreSQL read every action for a batch of 64 (26 ms a
-- statement where the two statements before took 5 ms), or probed the OR chain once per claim
-- (7 ms).
-- $1 shift_ms: the clock's shift
-- {claims}: a row of four parameters per claim from $2 (attempt_start_row: key, ownership
-- version, worker, idempotency key)
-- {current}: `(a.key = $n AND a.ownership_version = $n+1)` per claim, the same parameters, joined by OR
WITH clock AS MATERIALIZED (
    SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint + CAST($1 AS BIGINT) AS now
),
claims (key, ownership_version, worker, idempotency_key) AS (
    VALUES {claims}
),
counted AS (
    UPDATE actions a
    SET attempts = a.attempts + 1,
        attempts_in_round = a.attempts_in_round + 1,
        first_sent_at = COALESCE(a.first_sent_at, (SELECT now FROM clock)),
        window_started_at = COALESCE(a.window_started_at, (SELECT now FROM clock)),
        updated_at = (SELECT now FROM clock),
        revision = a.revision + 1
    WHERE ({current}) AND (a.state = 'in_progress') IS TRUE
    RETURNING a.key, a.attempts, a.ownership_version
)
INSERT INTO attempts (action_key, number, worker, ownership_version, started_at, idempotency_key)
SELECT n.key, n.attempts, c.worker, n.ownership_version, (SELECT now FROM clock), c.idempotency_key
FROM counted n JOIN claims c ON c.key = n.key AND c.ownership_version = n.ownership_version
ORDER BY n.key
RETURNING action_key, number, id, started_at;

-- name: sqlite_start_attempts
-- SQLite: the statements of a transaction that starts an attempt under each of a list of claims,
-- sent as one command, their parameters bound in order: the attempt count of count_attempts on
-- each action whose claim is still current, then the attempt of each action counted, numbered by
-- that count, under the worker and idempotency key of its claim, started at the time bound last.
-- The insert finds the actions counted by the same test as the count (key, ownership version,
-- claimed), which nothing between the two changes. Answers the key, number and id of each
-- attempt, as insert_attempts: a claim missing from the answer is no longer current, and nothing
-- was written for it.
-- ? ? ? now: the time, once per use
-- {current}: `(key = ? AND ownership_version = ?)` per claim, joined by OR
-- {columns}, {rows}: attempt_start_row (key, ownership version, worker, idempotency key)
-- ? now: the attempts' start
UPDATE actions
SET attempts = attempts + 1,
    attempts_in_round = attempts_in_round + 1,
    first_sent_at = COALESCE(first_sent_at, ?),
    window_started_at = COALESCE(window_started_at, ?),
    updated_at = ?,
    revision = revision + 1
WHERE ({current}) AND (state = 'in_progress') IS TRUE;
WITH claims ({columns}) AS (
    VALUES {rows}
)
INSERT INTO attempts (action_key, number, worker, ownership_version, started_at, idempotency_key)
SELECT a.key, a.attempts, c.worker, a.ownership_version, CAST(? AS BIGINT), c.idempotency_key
FROM claims c JOIN actions a ON a.key = c.key AND a.ownership_version = c.ownership_version
WHERE (a.state = 'in_progress') IS TRUE
ORDER BY a.key
RETURNING action_key, number, id;
