-- Statements of a purge: settled actions reduced to their tombstone, their histories deleted,
-- each run recorded in `purges` and each purged action marked in `purged_actions`.
-- A `{keys}` hole holds one parameter per key, at most KEYS_PER_PURGE_STATEMENT of them.

-- name: purge_candidates
-- The settled actions a purge reduces to their tombstone: in one of the final states asked for,
-- settled (last changed) before a time, with no proposed payload and no unacknowledged late
-- result waiting for a person (its evidence is among what a purge removes), and not purged
-- already; their keys in key order, with their state and whether a request may have written
-- them (the ledger keeps those whose attempts are the only sign of an effect), locked (where the
-- dialect locks rows) like lock_actions, so that a submission of one of these keys waits for the
-- purge to end.
-- {states}: one parameter per state
-- {settled_before}: the parameter after them, the time
-- {lock}: the dialect's row lock (` FOR UPDATE` on PostgreSQL, nothing on SQLite)
SELECT a.key, a.state, a.may_have_written
FROM actions a
WHERE a.state IN ({states})
  AND a.updated_at < {settled_before}
  AND a.proposed_payload IS NULL
  AND a.late_results = 0
  AND NOT EXISTS (SELECT 1 FROM purged_actions p WHERE p.action_key = a.key)
ORDER BY a.key{lock};

-- name: empty_purged_actions
-- Empties the bulk of actions about to be purged: the approved payload becomes JSON null (the
-- column stays NOT NULL, and readers still parse it) and the last error goes. Key, fingerprint,
-- state, destination id and settled time (`updated_at`, left as it was) are the tombstone.
-- {keys}: the actions' keys
UPDATE actions
SET payload = 'null', last_error = NULL, revision = revision + 1
WHERE key IN ({keys});

-- name: delete_purged_deliveries
-- Deletes the deliveries of the actions being purged.
-- {keys}: the actions' keys
DELETE FROM deliveries
WHERE action_key IN ({keys});

-- name: delete_purged_attempts
-- Deletes the attempts of the actions being purged.
-- {keys}: the actions' keys
DELETE FROM attempts
WHERE action_key IN ({keys});

-- name: delete_purged_lookups
-- Deletes the lookups of the actions being purged.
-- {keys}: the actions' keys
DELETE FROM lookups
WHERE action_key IN ({keys});

-- name: delete_purged_proposals
-- Deletes the proposals of the actions being purged: their payloads go with the rest of the
-- bulk (a settled action has none waiting; the audit trail keeps each one's fingerprint).
-- {keys}: the actions' keys
DELETE FROM proposals
WHERE action_key IN ({keys});

-- name: insert_purge
-- Records one purge run with what it removed; returns its id.
-- $1 at: when it ran
-- $2 owner: who ran it
-- $3 reason: why
-- $4 older_than_ms, $5 settled_before, $6 states: what it was asked to purge
-- $7 actions, $8 deliveries, $9 attempts, $10 lookups: how many of each it removed
INSERT INTO purges (at, owner, reason, older_than_ms, settled_before, states, actions, deliveries,
                    attempts, lookups)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
RETURNING id;

-- name: mark_purged
-- Marks actions as purged by a run: their tombstone marker.
-- {purge_id}: the first parameter, the run's id
-- {keys}: the parameters after it, the actions' keys
INSERT INTO purged_actions (action_key, purge_id)
SELECT key, {purge_id}
FROM actions
WHERE key IN ({keys});

-- name: select_purge_of
-- The purge run that purged an action, if one did.
-- $1 key: the action's key
SELECT p.id, p.at, p.owner, p.reason, p.older_than_ms, p.settled_before, p.states, p.actions,
       p.deliveries, p.attempts, p.lookups
FROM purged_actions m JOIN purges p ON p.id = m.purge_id
WHERE m.action_key = $1;
