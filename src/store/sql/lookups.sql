-- Statements on `lookups`: what a person's lookup at the destination found.

-- name: select_lookups
-- The lookups of an action, oldest first.
-- $1 key: the action's key
SELECT id, action_key, at, actor, verdict, records, destination_id, response_status,
       response_body, detail
FROM lookups
WHERE action_key = $1
ORDER BY id;

-- name: unknown_lookup_failures
-- For each `unknown` action with lookups that got no answer since it last changed: how many, and
-- when the last one was made. The worker bounds and backs off its lookups by these.
SELECT l.action_key, COUNT(*) AS failures, MAX(l.at) AS last_at
FROM lookups l
JOIN actions a ON a.key = l.action_key
WHERE a.state = 'unknown' AND l.verdict = 'failed' AND l.at >= a.updated_at
GROUP BY l.action_key;

-- name: insert_lookup
-- Records what a lookup at the destination found.
-- {columns}, {rows}: LOOKUP_ROW
INSERT INTO lookups ({columns})
VALUES {rows};
