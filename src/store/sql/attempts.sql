-- Statements on `attempts`: one row per attempt to perform an action, with its evidence.
-- (The attempts a claim starts are in claims.sql.)

-- name: attempt_started_under
-- Whether any attempt was recorded under a claim of an action.
-- $1 key: the action's key
-- $2 ownership_version: the claim's
SELECT COUNT(*) AS count
FROM attempts
WHERE action_key = $1 AND ownership_version = $2;

-- name: cut_off_attempts
-- Marks the unfinished attempts of an action, but one, as cut off: their claim expired or ended
-- without their result, so their requests may have been sent. `ended_at` stays empty, so that a
-- late result from their worker still replaces the mark with what happened.
-- $1 key: the action's key
-- $2 except_id: the attempt left as it is
UPDATE attempts
SET outcome = 'cut_off'
WHERE action_key = $1 AND id <> $2 AND ended_at IS NULL AND outcome IS NULL;

-- name: select_attempt
-- One attempt by its id.
-- $1 id: the attempt's id
SELECT id, action_key, number, worker, ownership_version, started_at, ended_at, outcome, error,
       response_status, destination_id, response_body, stale, acknowledged_by, acknowledged_at,
       idempotency_key
FROM attempts
WHERE id = $1;

-- name: select_attempts
-- The attempts of an action, oldest first.
-- $1 key: the action's key
SELECT id, action_key, number, worker, ownership_version, started_at, ended_at, outcome, error,
       response_status, destination_id, response_body, stale, acknowledged_by, acknowledged_at,
       idempotency_key
FROM attempts
WHERE action_key = $1
ORDER BY id;

-- name: insert_attempts
-- Inserts attempts as they start; returns each new id with its action's key.
-- {columns}, {rows}: STARTED_ATTEMPT_ROW
INSERT INTO attempts ({columns})
VALUES {rows}
RETURNING id, action_key;

-- name: finish_attempts
-- Records the end of many attempts; an attempt that already ended is left as it was, so that a
-- late report cannot overwrite the first.
-- {columns}, {rows}, {set}: FINISHED_ATTEMPT_ROW (id finds the row)
WITH finished ({columns}) AS (
    VALUES {rows}
)
UPDATE attempts
SET {set}
FROM finished
WHERE attempts.id = finished.id AND attempts.ended_at IS NULL;

-- name: pg_finish_attempts_with_audit
-- PostgreSQL: the end of attempts (as finish_attempts) and audit entries (as append_audit) in
-- one statement, the writes a transaction defers to its commit: one round trip instead of two.
-- The attempts' parameters come first.
-- {finished_columns}, {finished_rows}, {finished_set}: FINISHED_ATTEMPT_ROW
-- {audit_columns}, {audit_rows}: AUDIT_ROW
WITH finished ({finished_columns}) AS (
    VALUES {finished_rows}
),
ended AS (
    UPDATE attempts
    SET {finished_set}
    FROM finished
    WHERE attempts.id = finished.id AND attempts.ended_at IS NULL
)
INSERT INTO audit_trail ({audit_columns})
VALUES {audit_rows};

-- name: acknowledge_late_results
-- A person acknowledges every late result (stale attempt) of an action that no one has
-- acknowledged yet; the attempts' evidence stays as it was.
-- $1 key: the action's key
-- $2 person: who acknowledges
-- $3 at: when
UPDATE attempts
SET acknowledged_by = $2, acknowledged_at = $3
WHERE action_key = $1 AND stale AND acknowledged_by IS NULL;
