-- Every proposal kept (docs/RULES.md, rule 9): each distinct payload proposed for an existing key
-- is a row of its own, until a person approves or rejects it; the audit trail says who and why.
-- A repeat of the same proposal (same key and fingerprint) is the same row. The action's
-- proposed_* columns keep naming the latest pending proposal, which the claim and the state
-- rules read.
--
-- decision: NULL while pending, then 'approved' or 'rejected'; a rejected proposal submitted
-- again is pending again.
CREATE TABLE proposals (
    id             INTEGER PRIMARY KEY,
    action_key     TEXT    NOT NULL REFERENCES actions (key),
    fingerprint    TEXT    NOT NULL,
    payload        TEXT    NOT NULL,
    source         TEXT,
    event_id       TEXT,
    source_version INTEGER,
    received_at    INTEGER NOT NULL,
    decision       TEXT    CHECK (decision IN ('approved', 'rejected')),
    decided_by     TEXT,
    decided_at     INTEGER,
    UNIQUE (action_key, fingerprint),
    CHECK ((decision IS NULL) = (decided_by IS NULL) AND (decision IS NULL) = (decided_at IS NULL))
) STRICT;
CREATE INDEX proposals_pending ON proposals (action_key, id) WHERE decision IS NULL;

-- The proposals waiting when this migration runs: one each, kept by the action until now.
INSERT INTO proposals (action_key, fingerprint, payload, source_version, received_at)
SELECT key, proposed_fingerprint, proposed_payload, proposed_source_version, updated_at
  FROM actions WHERE proposed_payload IS NOT NULL;
