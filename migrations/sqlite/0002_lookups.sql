-- What lookups at a destination found: the evidence behind settling an uncertain outcome.
CREATE TABLE lookups (
    id              INTEGER PRIMARY KEY,
    action_key      TEXT    NOT NULL REFERENCES actions (key),
    at              INTEGER NOT NULL,
    actor           TEXT    NOT NULL,
    verdict         TEXT    NOT NULL CHECK (verdict IN ('found', 'not_found', 'mismatch', 'duplicates')),
    records         INTEGER NOT NULL,
    destination_id  TEXT,
    response_status INTEGER,
    response_body   TEXT,
    detail          TEXT
) STRICT;
CREATE INDEX lookups_action ON lookups (action_key, id);
CREATE INDEX actions_unknown ON actions (updated_at) WHERE state = 'unknown';
