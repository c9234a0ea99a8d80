-- Statements on `deliveries`: each submission of an action, with what became of it.

-- name: select_deliveries
-- The deliveries of an action, oldest first.
-- $1 key: the action's key
SELECT id, action_key, event_id, source, source_version, fingerprint, outcome, received_at
FROM deliveries
WHERE action_key = $1
ORDER BY id;

-- name: insert_deliveries
-- Records deliveries of submissions, each with what became of it.
-- {columns}, {rows}: DELIVERY_ROW
INSERT INTO deliveries ({columns})
VALUES {rows};
