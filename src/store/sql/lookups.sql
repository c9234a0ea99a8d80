-- Statements on `lookups`: what a person's lookup at the destination found.

-- name: select_lookups
-- The lookups of an action, oldest first.
-- $1 key: the action's key
SELECT id, action_key, at, actor, verdict, records, destination_id, response_status,
       response_body, detail
FROM lookups
WHERE action_key = $1
ORDER BY id;

-- name: insert_lookup
-- Records what a lookup at the destination found.
-- {columns}, {rows}: LOOKUP_ROW
INSERT INTO lookups ({columns})
VALUES {rows};
