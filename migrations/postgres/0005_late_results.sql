-- Late results and manual retries (rules 4, 5 and 8 in docs/RULES.md).
--
-- window_started_at: when the destination's current idempotency window started (the first
--   request after the action was recorded, or after a person restarted the window). Kept apart
--   from first_sent_at, the evidence that a request may ever have reached the destination, which
--   no command clears: a worker looks before it sends again wherever that evidence exists.
-- late_results: results from obsolete ownership versions that no person has acknowledged yet.
-- old_worker_may_act: an expired claim was held because taking it over was unsafe; a person must
--   confirm that the old worker can no longer act before the action runs again.
ALTER TABLE actions
    ADD COLUMN window_started_at  BIGINT,
    ADD COLUMN late_results       BIGINT  NOT NULL DEFAULT 0 CHECK (late_results >= 0),
    ADD COLUMN old_worker_may_act BOOLEAN NOT NULL DEFAULT false;

-- Who acknowledged a late result (a stale attempt), and when.
ALTER TABLE attempts
    ADD COLUMN acknowledged_by TEXT,
    ADD COLUMN acknowledged_at BIGINT;

-- What was recorded before this migration.
UPDATE actions SET window_started_at = first_sent_at;
UPDATE actions SET late_results =
    (SELECT COUNT(*) FROM attempts WHERE attempts.action_key = actions.key AND attempts.stale);
UPDATE actions SET old_worker_may_act = true WHERE state = 'held' AND (
    SELECT event FROM audit_trail WHERE audit_trail.action_key = actions.key AND to_state = 'held'
    ORDER BY id DESC LIMIT 1) IN ('lease_expired', 'taken_over');

-- A worker raises these facts and never clears them: only a person's command (acknowledge, or a
-- retry that confirms the old worker stopped) does. And no role but the owner clears first_sent_at. A separate trigger, so that the action guard
-- of migration 0004 stays as it is.
CREATE FUNCTION actionledger_guard_late_facts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.late_results < OLD.late_results OR (OLD.old_worker_may_act AND NOT NEW.old_worker_may_act))
       AND NOT actionledger_session_may('reviewer') THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may not acknowledge late results or confirm that an old worker stopped: '
            'only a person''s command does that', current_user);
    END IF;
    -- No command forgets that a request may have been sent: only the owner may, by hand.
    IF OLD.first_sent_at IS NOT NULL AND NEW.first_sent_at IS NULL
       AND NOT (actionledger_session_may('worker') AND actionledger_session_may('reviewer')) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may not clear the evidence that a request may have been sent', current_user);
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER actions_late_facts_guard BEFORE UPDATE ON actions
    FOR EACH ROW EXECUTE FUNCTION actionledger_guard_late_facts();

-- Only a person acknowledges a late result, and only that: the attempt's evidence stays as it was.
CREATE FUNCTION actionledger_guard_acknowledgement() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.acknowledged_by IS DISTINCT FROM OLD.acknowledged_by
        OR NEW.acknowledged_at IS DISTINCT FROM OLD.acknowledged_at)
       AND (OLD.acknowledged_by IS NOT NULL OR NOT actionledger_session_may('reviewer')) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may not change who acknowledged a late result: only a person''s command '
            'acknowledges it, once', current_user);
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER attempts_acknowledgement_guard BEFORE UPDATE ON attempts
    FOR EACH ROW EXECUTE FUNCTION actionledger_guard_acknowledgement();

-- A reviewer acknowledges late results: those two columns of attempts, nothing else.
DO $$
BEGIN
    IF (SELECT count(*) FROM pg_roles WHERE rolname = 'actionledger_reviewer') = 1 THEN
        GRANT UPDATE (acknowledged_by, acknowledged_at) ON attempts TO actionledger_reviewer;
    END IF;
END;
$$;

-- The console's late pane lists only these, newest first.
CREATE INDEX actions_late_results ON actions (id) WHERE late_results > 0;
