-- Statements on `refused_submissions`: submissions refused before they became actions, for the
-- console's refused pane.

-- name: list_refused
-- A page of refused submissions, newest first. A filter's terms, the cursor (`AND id < ...`) and
-- the limit follow `1 = 1`, each with its own parameter, as `list_refused` in statements.rs adds
-- them.
SELECT id, received_at, key_excerpt, problem, message, event_id, source, destination
FROM refused_submissions
WHERE 1 = 1;

-- name: count_refused
-- How many refused submissions match a filter's terms (all of them without one).
-- {terms}: the filter's terms, each `AND ...` with its own parameter
SELECT COUNT(*) AS count
FROM refused_submissions
WHERE 1 = 1{terms};

-- name: insert_refusal
-- Records a submission refused before it became an action.
-- {columns}, {rows}: REFUSAL_ROW
INSERT INTO refused_submissions ({columns})
VALUES {rows};
