-- Rule 2: `failed` means known not written. An action remembers whether a request sent under it
-- may have written at the destination (an outcome that was unknown or a success, a late result
-- reporting a write, an attempt cut off by a crash) until a lookup or a person establishes that
-- nothing was written; while it does, exhausting attempts on errors before writing ends in
-- `unknown`, never `failed`.
ALTER TABLE actions ADD COLUMN may_have_written BOOLEAN NOT NULL DEFAULT false;

-- Actions recorded before this column: any attempt that may have written counts.
UPDATE actions SET may_have_written = true
 WHERE key IN (SELECT action_key FROM attempts
                WHERE outcome IS NULL OR outcome IN ('succeeded', 'unknown') OR destination_id IS NOT NULL);

-- A person's takeover of an expired claim records its unfinished attempts as cut off: a
-- reviewer may change attempts' outcome, but only that way (an unfinished attempt with no
-- outcome becomes `cut_off`); every other outcome is a worker's report.
CREATE FUNCTION actionledger_guard_cut_off() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.outcome IS DISTINCT FROM OLD.outcome AND NOT actionledger_session_may('worker')
       AND NOT (OLD.outcome IS NULL AND OLD.ended_at IS NULL AND NEW.outcome = 'cut_off') THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may only record an unfinished attempt as cut off', current_user);
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER attempts_cut_off_guard BEFORE UPDATE ON attempts
    FOR EACH ROW EXECUTE FUNCTION actionledger_guard_cut_off();

DO $$
BEGIN
    IF (SELECT count(*) FROM pg_roles WHERE rolname = 'actionledger_reviewer') = 1 THEN
        GRANT UPDATE (outcome) ON attempts TO actionledger_reviewer;
    END IF;
END;
$$;
