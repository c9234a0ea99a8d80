-- Retention (rule 7): purge runs, and which actions each one purged.
--
-- A purged action keeps its row in `actions` as its tombstone: key, fingerprint, final state,
-- destination id and settled time (`updated_at`) stay, so a replay of the key is still recognised;
-- the approved payload is replaced by JSON null and the last error emptied. Its deliveries,
-- attempts and lookups are deleted. The audit trail is kept in full.

-- One row per purge run, with what it removed. Append-only, like the audit trail.
CREATE TABLE purges (
    id             INTEGER PRIMARY KEY,
    at             INTEGER NOT NULL,
    owner          TEXT    NOT NULL,
    reason         TEXT    NOT NULL,
    older_than_ms  INTEGER NOT NULL CHECK (older_than_ms > 0),
    -- Actions settled before this time (database time of the run minus older_than_ms) were purged.
    settled_before INTEGER NOT NULL,
    -- The final states purged, comma-separated.
    states         TEXT    NOT NULL,
    actions        INTEGER NOT NULL CHECK (actions >= 0),
    deliveries     INTEGER NOT NULL CHECK (deliveries >= 0),
    attempts       INTEGER NOT NULL CHECK (attempts >= 0),
    lookups        INTEGER NOT NULL CHECK (lookups >= 0)
) STRICT;

-- The tombstone marker: which run purged each purged action. Append-only.
CREATE TABLE purged_actions (
    action_key TEXT    PRIMARY KEY REFERENCES actions (key),
    purge_id   INTEGER NOT NULL REFERENCES purges (id)
) STRICT;
CREATE INDEX purged_actions_run ON purged_actions (purge_id);

CREATE TRIGGER purges_no_update BEFORE UPDATE ON purges
BEGIN
    SELECT RAISE(ABORT, 'actionledger: the purge record is append-only');
END;

CREATE TRIGGER purges_no_delete BEFORE DELETE ON purges
BEGIN
    SELECT RAISE(ABORT, 'actionledger: the purge record is append-only');
END;

CREATE TRIGGER purged_actions_no_update BEFORE UPDATE ON purged_actions
BEGIN
    SELECT RAISE(ABORT, 'actionledger: a purged action stays purged');
END;

CREATE TRIGGER purged_actions_no_delete BEFORE DELETE ON purged_actions
BEGIN
    SELECT RAISE(ABORT, 'actionledger: a purged action stays purged');
END;

-- A tombstone never changes: a purged key is never claimed, retried, resolved or given a new
-- payload again.
CREATE TRIGGER actions_purged_never_change BEFORE UPDATE ON actions
WHEN EXISTS (SELECT 1 FROM purged_actions WHERE action_key = OLD.key)
BEGIN
    SELECT RAISE(ABORT, 'actionledger: a purged action never changes');
END;
