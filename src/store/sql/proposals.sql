-- Statements on `proposals`: changed payloads submitted for an action, waiting for a person or
-- decided.

-- name: select_proposals
-- Every proposal kept for an action, waiting and decided, oldest first: what `show` lists.
-- $1 key: the action's key
SELECT id, action_key, fingerprint, payload, source, event_id, source_version, received_at,
       decision, decided_by, decided_at
FROM proposals
WHERE action_key = $1
ORDER BY id;

-- name: select_waiting_proposals
-- The proposals of an action waiting for a person's decision, oldest first: what a submission
-- compares a new payload with, and what approve and reject choose from.
-- $1 key: the action's key
SELECT id, action_key, fingerprint, payload, source, event_id, source_version, received_at,
       decision, decided_by, decided_at
FROM proposals
WHERE action_key = $1 AND decision IS NULL
ORDER BY id;

-- name: keep_proposal
-- Keeps a proposal. A new one is inserted waiting; one decided before (rejected, or approved and
-- since replaced) waits again, as proposed now; one already waiting stays as it is, since the
-- ledger only keeps a proposal not waiting already. Unique on key and fingerprint: a repeat is
-- never a second row.
-- $1 key: the action's key
-- $2 fingerprint: the proposed payload's
-- $3 payload: the proposed payload
-- $4 source, $5 event_id, $6 source_version: where it came from
-- $7 received_at: when
INSERT INTO proposals (action_key, fingerprint, payload, source, event_id, source_version, received_at)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (action_key, fingerprint) DO UPDATE
SET decision = NULL, decided_by = NULL, decided_at = NULL,
    source = excluded.source, event_id = excluded.event_id,
    source_version = excluded.source_version, received_at = excluded.received_at
WHERE proposals.decision IS NOT NULL;

-- name: decide_proposal
-- A person decides a proposal, only while it still waits: a decision is never changed.
-- $1 decision: approved or rejected
-- $2 person: who decides
-- $3 at: when
-- $4 id: the proposal's id
UPDATE proposals
SET decision = $1, decided_by = $2, decided_at = $3
WHERE id = $4 AND decision IS NULL;
