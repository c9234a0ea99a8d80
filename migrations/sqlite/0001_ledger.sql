-- The ledger schema for SQLite. Times are integer milliseconds since the Unix epoch, read from
-- the database's clock. Key columns are NOT NULL because UNIQUE treats NULLs as distinct.

CREATE TABLE actions (
    id                      INTEGER PRIMARY KEY,
    key                     TEXT    NOT NULL UNIQUE CHECK (length(CAST(key AS BLOB)) BETWEEN 1 AND 255),
    state                   TEXT    NOT NULL CHECK (state IN ('pending', 'in_progress', 'completed', 'failed',
                                                              'unknown', 'conflict', 'held', 'cancelled')),
    payload                 TEXT    NOT NULL,
    fingerprint             TEXT    NOT NULL,
    proposed_payload        TEXT,
    proposed_fingerprint    TEXT,
    proposed_source_version INTEGER,
    resume_state            TEXT,
    source                  TEXT,
    source_version          INTEGER,
    destination             TEXT,
    after_key               TEXT,
    claimed_by              TEXT,
    ownership_version       INTEGER NOT NULL DEFAULT 0,
    revision                INTEGER NOT NULL DEFAULT 1,
    lease_expires_at        INTEGER,
    not_before              INTEGER,
    attempts                INTEGER NOT NULL DEFAULT 0,
    attempts_in_round       INTEGER NOT NULL DEFAULT 0,
    assignee                TEXT,
    destination_id          TEXT,
    first_sent_at           INTEGER,
    last_error              TEXT,
    created_at              INTEGER NOT NULL,
    updated_at              INTEGER NOT NULL,
    CHECK ((proposed_payload IS NULL) = (proposed_fingerprint IS NULL)),
    CHECK (state <> 'in_progress' OR (claimed_by IS NOT NULL AND lease_expires_at IS NOT NULL))
) STRICT;

CREATE INDEX actions_claimable ON actions (id) WHERE state = 'pending';
CREATE INDEX actions_lease ON actions (lease_expires_at) WHERE state = 'in_progress';
CREATE INDEX actions_state ON actions (state, id);
CREATE INDEX actions_destination ON actions (destination, id);

CREATE TABLE deliveries (
    id             INTEGER PRIMARY KEY,
    action_key     TEXT    NOT NULL REFERENCES actions (key),
    event_id       TEXT,
    source         TEXT,
    source_version INTEGER,
    fingerprint    TEXT    NOT NULL,
    outcome        TEXT    NOT NULL CHECK (outcome IN ('created', 'duplicate', 'stale', 'conflict')),
    received_at    INTEGER NOT NULL
) STRICT;
CREATE INDEX deliveries_action ON deliveries (action_key, id);

CREATE TABLE attempts (
    id                INTEGER PRIMARY KEY,
    action_key        TEXT    NOT NULL REFERENCES actions (key),
    number            INTEGER NOT NULL,
    worker            TEXT    NOT NULL,
    ownership_version INTEGER NOT NULL,
    started_at        INTEGER NOT NULL,
    ended_at          INTEGER,
    outcome           TEXT,
    error             TEXT,
    response_status   INTEGER,
    destination_id    TEXT,
    response_body     TEXT,
    stale             INTEGER NOT NULL DEFAULT 0 CHECK (stale IN (0, 1))
) STRICT;
CREATE INDEX attempts_action ON attempts (action_key, ownership_version, id);

CREATE TABLE audit_trail (
    id                INTEGER PRIMARY KEY,
    action_key        TEXT    NOT NULL REFERENCES actions (key),
    at                INTEGER NOT NULL,
    actor             TEXT    NOT NULL,
    actor_kind        TEXT    NOT NULL CHECK (actor_kind IN ('worker', 'person', 'source')),
    event             TEXT    NOT NULL,
    from_state        TEXT,
    to_state          TEXT    NOT NULL,
    ownership_version INTEGER NOT NULL,
    revision          INTEGER NOT NULL,
    reason            TEXT
) STRICT;
CREATE INDEX audit_trail_action ON audit_trail (action_key, id);

CREATE TABLE refused_submissions (
    id          INTEGER PRIMARY KEY,
    received_at INTEGER NOT NULL,
    key_excerpt TEXT,
    problem     TEXT    NOT NULL,
    message     TEXT    NOT NULL,
    event_id    TEXT,
    source      TEXT,
    destination TEXT
) STRICT;

-- The state pairs of the transition table in src/domain/state.rs; a test keeps them equal.
CREATE TABLE state_transitions (
    from_state TEXT NOT NULL,
    to_state   TEXT NOT NULL,
    PRIMARY KEY (from_state, to_state)
) STRICT;
INSERT INTO state_transitions (from_state, to_state) VALUES
    ('pending', 'in_progress'), ('pending', 'conflict'), ('pending', 'cancelled'),
    ('in_progress', 'completed'), ('in_progress', 'failed'), ('in_progress', 'pending'),
    ('in_progress', 'unknown'), ('in_progress', 'held'), ('in_progress', 'conflict'),
    ('failed', 'pending'), ('failed', 'completed'), ('failed', 'conflict'), ('failed', 'cancelled'),
    ('unknown', 'pending'), ('unknown', 'completed'), ('unknown', 'conflict'), ('unknown', 'cancelled'),
    ('held', 'pending'), ('held', 'completed'), ('held', 'conflict'), ('held', 'cancelled'),
    ('conflict', 'pending'), ('conflict', 'completed'), ('conflict', 'failed'), ('conflict', 'held'),
    ('conflict', 'cancelled'), ('completed', 'conflict');

CREATE TRIGGER actions_start_pending BEFORE INSERT ON actions
WHEN NEW.state <> 'pending' OR NEW.ownership_version <> 0
BEGIN
    SELECT RAISE(ABORT, 'actionledger: a new action starts pending with ownership version 0');
END;

CREATE TRIGGER actions_transition_guard BEFORE UPDATE OF state ON actions
WHEN NEW.state <> OLD.state
 AND NOT EXISTS (SELECT 1 FROM state_transitions WHERE from_state = OLD.state AND to_state = NEW.state)
BEGIN
    SELECT RAISE(ABORT, 'actionledger: forbidden state transition');
END;

CREATE TRIGGER actions_fencing_guard BEFORE UPDATE ON actions
WHEN NEW.ownership_version < OLD.ownership_version OR NEW.key <> OLD.key
BEGIN
    SELECT RAISE(ABORT, 'actionledger: the key and ownership version of an action never go back');
END;

CREATE TRIGGER audit_trail_no_update BEFORE UPDATE ON audit_trail
BEGIN
    SELECT RAISE(ABORT, 'actionledger: the audit trail is append-only');
END;

CREATE TRIGGER audit_trail_no_delete BEFORE DELETE ON audit_trail
BEGIN
    SELECT RAISE(ABORT, 'actionledger: the audit trail is append-only');
END;
