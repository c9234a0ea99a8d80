-- The ledger schema for PostgreSQL. Times are integer milliseconds since the Unix epoch, read from
-- the database's clock, as in the SQLite schema, so both stores share one meaning and one codec.
-- Payloads are TEXT, not jsonb: jsonb would reorder keys and reject \u0000, and fingerprints are
-- computed in Rust from the canonical text.

CREATE TABLE actions (
    id                      BIGSERIAL PRIMARY KEY,
    key                     TEXT   NOT NULL UNIQUE CHECK (octet_length(key) BETWEEN 1 AND 255),
    state                   TEXT   NOT NULL CHECK (state IN ('pending', 'in_progress', 'completed', 'failed',
                                                             'unknown', 'conflict', 'held', 'cancelled')),
    payload                 TEXT   NOT NULL,
    fingerprint             TEXT   NOT NULL,
    proposed_payload        TEXT,
    proposed_fingerprint    TEXT,
    proposed_source_version BIGINT,
    resume_state            TEXT,
    source                  TEXT,
    source_version          BIGINT,
    destination             TEXT,
    after_key               TEXT,
    claimed_by              TEXT,
    ownership_version       BIGINT NOT NULL DEFAULT 0,
    revision                BIGINT NOT NULL DEFAULT 1,
    lease_expires_at        BIGINT,
    not_before              BIGINT,
    attempts                BIGINT NOT NULL DEFAULT 0,
    attempts_in_round       BIGINT NOT NULL DEFAULT 0,
    assignee                TEXT,
    destination_id          TEXT,
    first_sent_at           BIGINT,
    last_error              TEXT,
    created_at              BIGINT NOT NULL,
    updated_at              BIGINT NOT NULL,
    CHECK ((proposed_payload IS NULL) = (proposed_fingerprint IS NULL)),
    CHECK (state <> 'in_progress' OR (claimed_by IS NOT NULL AND lease_expires_at IS NOT NULL))
);

CREATE INDEX actions_claimable ON actions (id) WHERE state = 'pending';
CREATE INDEX actions_lease ON actions (lease_expires_at) WHERE state = 'in_progress';
CREATE INDEX actions_state ON actions (state, id);
CREATE INDEX actions_destination ON actions (destination, id);

CREATE TABLE deliveries (
    id             BIGSERIAL PRIMARY KEY,
    action_key     TEXT   NOT NULL REFERENCES actions (key),
    event_id       TEXT,
    source         TEXT,
    source_version BIGINT,
    fingerprint    TEXT   NOT NULL,
    outcome        TEXT   NOT NULL CHECK (outcome IN ('created', 'duplicate', 'stale', 'conflict')),
    received_at    BIGINT NOT NULL
);
CREATE INDEX deliveries_action ON deliveries (action_key, id);

CREATE TABLE attempts (
    id                BIGSERIAL PRIMARY KEY,
    action_key        TEXT    NOT NULL REFERENCES actions (key),
    number            BIGINT  NOT NULL,
    worker            TEXT    NOT NULL,
    ownership_version BIGINT  NOT NULL,
    started_at        BIGINT  NOT NULL,
    ended_at          BIGINT,
    outcome           TEXT,
    error             TEXT,
    response_status   BIGINT,
    destination_id    TEXT,
    response_body     TEXT,
    stale             BOOLEAN NOT NULL DEFAULT false
);
CREATE INDEX attempts_action ON attempts (action_key, ownership_version, id);

CREATE TABLE audit_trail (
    id                BIGSERIAL PRIMARY KEY,
    action_key        TEXT   NOT NULL REFERENCES actions (key),
    at                BIGINT NOT NULL,
    actor             TEXT   NOT NULL,
    actor_kind        TEXT   NOT NULL CHECK (actor_kind IN ('worker', 'person', 'source')),
    event             TEXT   NOT NULL,
    from_state        TEXT,
    to_state          TEXT   NOT NULL,
    ownership_version BIGINT NOT NULL,
    revision          BIGINT NOT NULL,
    reason            TEXT
);
CREATE INDEX audit_trail_action ON audit_trail (action_key, id);

CREATE TABLE refused_submissions (
    id          BIGSERIAL PRIMARY KEY,
    received_at BIGINT NOT NULL,
    key_excerpt TEXT,
    problem     TEXT   NOT NULL,
    message     TEXT   NOT NULL,
    event_id    TEXT,
    source      TEXT,
    destination TEXT
);

-- The state pairs of the transition table in src/domain/state.rs; a test keeps them equal.
CREATE TABLE state_transitions (
    from_state TEXT NOT NULL,
    to_state   TEXT NOT NULL,
    PRIMARY KEY (from_state, to_state)
);
INSERT INTO state_transitions (from_state, to_state) VALUES
    ('pending', 'in_progress'), ('pending', 'conflict'), ('pending', 'cancelled'),
    ('in_progress', 'completed'), ('in_progress', 'failed'), ('in_progress', 'pending'),
    ('in_progress', 'unknown'), ('in_progress', 'held'), ('in_progress', 'conflict'),
    ('failed', 'pending'), ('failed', 'completed'), ('failed', 'conflict'), ('failed', 'cancelled'),
    ('unknown', 'pending'), ('unknown', 'completed'), ('unknown', 'conflict'), ('unknown', 'cancelled'),
    ('held', 'pending'), ('held', 'completed'), ('held', 'conflict'), ('held', 'cancelled'),
    ('conflict', 'pending'), ('conflict', 'completed'), ('conflict', 'failed'), ('conflict', 'held'),
    ('conflict', 'cancelled'), ('completed', 'conflict');

CREATE FUNCTION actionledger_guard_action() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.state <> 'pending' OR NEW.ownership_version <> 0 THEN
            RAISE EXCEPTION 'actionledger: a new action starts pending with ownership version 0';
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.key <> OLD.key OR NEW.ownership_version < OLD.ownership_version THEN
        RAISE EXCEPTION 'actionledger: the key and ownership version of an action never go back';
    END IF;
    IF NEW.state <> OLD.state AND NOT EXISTS (
        SELECT 1 FROM state_transitions WHERE from_state = OLD.state AND to_state = NEW.state
    ) THEN
        RAISE EXCEPTION 'actionledger: forbidden state transition from % to %', OLD.state, NEW.state;
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER actions_guard BEFORE INSERT OR UPDATE ON actions
    FOR EACH ROW EXECUTE FUNCTION actionledger_guard_action();

CREATE FUNCTION actionledger_refuse_audit_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'actionledger: the audit trail is append-only (% refused)', TG_OP;
END;
$$;

CREATE TRIGGER audit_trail_append_only BEFORE UPDATE OR DELETE ON audit_trail
    FOR EACH ROW EXECUTE FUNCTION actionledger_refuse_audit_change();
CREATE TRIGGER audit_trail_no_truncate BEFORE TRUNCATE ON audit_trail
    FOR EACH STATEMENT EXECUTE FUNCTION actionledger_refuse_audit_change();
