-- Every send counts towards the round's bound (rule 3), whatever settled the one before: a lookup
-- that proves nothing was written after the round's last send ends the action `failed` (known
-- not written, no send left), where before it went back to `pending` and started the count again.
INSERT INTO state_transitions (from_state, to_state) VALUES ('unknown', 'failed');

-- A lookup that got no answer is kept as evidence beside those that did, so that a person sees
-- every try, and the worker counts them towards their own bound. SQLite cannot change a CHECK
-- constraint in place: the table is made again with the new one and its rows copied over
-- (nothing refers to lookups, so nothing else changes).
CREATE TABLE lookups_with_failures (
    id              INTEGER PRIMARY KEY,
    action_key      TEXT    NOT NULL REFERENCES actions (key),
    at              INTEGER NOT NULL,
    actor           TEXT    NOT NULL,
    verdict         TEXT    NOT NULL CHECK (verdict IN ('found', 'not_found', 'mismatch', 'duplicates', 'failed')),
    records         INTEGER NOT NULL,
    destination_id  TEXT,
    response_status INTEGER,
    response_body   TEXT,
    detail          TEXT
) STRICT;
INSERT INTO lookups_with_failures
    (id, action_key, at, actor, verdict, records, destination_id, response_status, response_body, detail)
SELECT id, action_key, at, actor, verdict, records, destination_id, response_status, response_body, detail
FROM lookups;
DROP TABLE lookups;
ALTER TABLE lookups_with_failures RENAME TO lookups;
CREATE INDEX lookups_action ON lookups (action_key, id);
