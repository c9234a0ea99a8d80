-- Late results and manual retries (rules 4, 5 and 8 in docs/RULES.md).
--
-- window_started_at: when the destination's current idempotency window started (the first
--   request after the action was recorded, or after a person restarted the window). Kept apart
--   from first_sent_at, the evidence that a request may ever have reached the destination, which
--   no command clears: a worker looks before it sends again wherever that evidence exists.
-- late_results: results from obsolete ownership versions that no person has acknowledged yet.
-- old_worker_may_act: an expired claim was held because taking it over was unsafe; a person must
--   confirm that the old worker can no longer act before the action runs again.
ALTER TABLE actions ADD COLUMN window_started_at INTEGER;
ALTER TABLE actions ADD COLUMN late_results INTEGER NOT NULL DEFAULT 0 CHECK (late_results >= 0);
ALTER TABLE actions ADD COLUMN old_worker_may_act INTEGER NOT NULL DEFAULT 0 CHECK (old_worker_may_act IN (0, 1));
UPDATE actions SET window_started_at = first_sent_at;

-- Who acknowledged a late result (a stale attempt), and when.
ALTER TABLE attempts ADD COLUMN acknowledged_by TEXT;
ALTER TABLE attempts ADD COLUMN acknowledged_at INTEGER;

-- Late results already recorded are waiting for a person: count them.
UPDATE actions SET late_results =
    (SELECT COUNT(*) FROM attempts WHERE attempts.action_key = actions.key AND attempts.stale = 1);
-- An action held by an unsafe takeover before this migration: the person must still confirm.
UPDATE actions SET old_worker_may_act = 1 WHERE state = 'held' AND (
    SELECT event FROM audit_trail WHERE audit_trail.action_key = actions.key AND to_state = 'held'
    ORDER BY id DESC LIMIT 1) IN ('lease_expired', 'taken_over');

-- The console's late pane lists only these, newest first.
CREATE INDEX actions_late_results ON actions (id) WHERE late_results > 0;
