-- Statements on `refused_submissions`: submissions refused before they became actions, for the
-- console's refused pane.

-- name: list_refused
-- A page of refused submissions, newest first.
-- $1 before_id: only those older than this id, or NULL for the newest
-- $2 limit: at most this many
SELECT id, received_at, key_excerpt, problem, message, event_id, source, destination
FROM refused_submissions
WHERE ($1 IS NULL OR id < $1)
ORDER BY id DESC
LIMIT $2;

-- name: count_refused
-- How many refused submissions are recorded.
SELECT COUNT(*) AS count
FROM refused_submissions;

-- name: insert_refusal
-- Records a submission refused before it became an action.
-- {columns}, {rows}: REFUSAL_ROW
INSERT INTO refused_submissions ({columns})
VALUES {rows};
