-- Statements on `audit_trail`: every change of an action, who made it and why. Kept in full,
-- even by a purge.

-- name: select_audit
-- The audit trail of an action, oldest first.
-- $1 key: the action's key
SELECT id, action_key, at, actor, actor_kind, event, from_state, to_state, ownership_version,
       revision, reason
FROM audit_trail
WHERE action_key = $1
ORDER BY id;

-- name: append_audit
-- Appends entries to the audit trail, in the order given.
-- {columns}, {rows}: AUDIT_ROW
INSERT INTO audit_trail ({columns})
VALUES {rows};

-- name: latest_recorded_time
-- The latest time among the most recent audit entries (by id, the order they were appended
-- in), as column `latest`, or NULL on an empty ledger. On SQLite every writer records its own
-- host's clock: a writer compares its clock with this before it claims or takes over, since a
-- clock behind what the ledger already recorded makes its leases end early for everyone else.
SELECT max(at) AS latest
FROM (SELECT at FROM audit_trail ORDER BY id DESC LIMIT 64) AS recent;
