-- The same guards, at a fraction of the cost per action (docs/BENCHMARKS.md, "The drain").
--
-- Measured with pg_stat_statements over a drain of 6,000 actions (bench --drain): each action's
-- updates ran four BEFORE UPDATE triggers on actions (0004, 0005, 0007, 0011) and two on attempts
-- (0005, 0010), each asking again which roles the session holds: about 22 role lookups per action
-- (`pg_has_role` over `pg_class`, and a count over the `pg_roles` view), about 0.5 ms of the
-- server's CPU per action. Here:
--   * actionledger_session_duties() answers every duty at once, from the role cache, without the
--     pg_roles view;
--   * one BEFORE UPDATE trigger on actions makes the checks of 0004, 0005 and 0011, in that order
--     and with the same messages, asking for the session's duties once per row, and not at all
--     where the change is the owner's;
--   * the other guards run only where the change they judge is made (WHEN clauses), so a
--     worker's ordinary update does not call them.

-- The session's duties as bits: 1 a worker's work, 2 a person's commands; 3 also for the owner of
-- the tables, and for anyone while the roles do not all exist (a ledger that is not role-managed).
CREATE FUNCTION actionledger_session_duties() RETURNS integer LANGUAGE plpgsql STABLE AS $$
DECLARE
    worker_role   oid := to_regrole('actionledger_worker');
    reviewer_role oid := to_regrole('actionledger_reviewer');
BEGIN
    IF worker_role IS NULL OR reviewer_role IS NULL
       OR pg_has_role((SELECT relowner FROM pg_class WHERE oid = 'actions'::regclass), 'USAGE') THEN
        RETURN 3;
    END IF;
    RETURN CASE WHEN pg_has_role(worker_role, 'USAGE') THEN 1 ELSE 0 END
         + CASE WHEN pg_has_role(reviewer_role, 'USAGE') THEN 2 ELSE 0 END;
END;
$$;

-- As before (0004_roles.sql), from the duties above.
CREATE OR REPLACE FUNCTION actionledger_session_may(duty TEXT) RETURNS boolean LANGUAGE plpgsql STABLE AS $$
DECLARE
    duties integer := actionledger_session_duties();
BEGIN
    IF duties = 3 THEN
        RETURN true;
    END IF;
    RETURN CASE duty
        WHEN 'worker' THEN duties & 1 = 1
        WHEN 'reviewer' THEN duties & 2 = 2
        ELSE to_regrole('actionledger_' || duty) IS NOT NULL AND pg_has_role('actionledger_' || duty, 'USAGE')
    END;
END;
$$;

CREATE OR REPLACE FUNCTION actionledger_session_unrestricted() RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT actionledger_session_duties() = 3
$$;

-- Every check on a change to an action but the tombstone's: those of 0004_roles.sql, then
-- 0011_column_guards.sql, then 0005_late_results.sql.
CREATE FUNCTION actionledger_guard_action_update() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    duties     integer;
    may_work   BOOLEAN;
    may_review BOOLEAN;
BEGIN
    IF NEW.key <> OLD.key OR NEW.ownership_version < OLD.ownership_version THEN
        RAISE EXCEPTION 'actionledger: the key and ownership version of an action never go back';
    END IF;
    IF NEW.state <> OLD.state AND NOT EXISTS (
        SELECT 1 FROM state_transitions WHERE from_state = OLD.state AND to_state = NEW.state
    ) THEN
        RAISE EXCEPTION 'actionledger: forbidden state transition from % to %', OLD.state, NEW.state;
    END IF;
    duties := actionledger_session_duties();
    IF duties = 3 THEN
        RETURN NEW;
    END IF;
    may_work := duties & 1 = 1;
    may_review := duties & 2 = 2;

    -- 0004: who may make this change of state, and a worker's limits on the payload.
    IF may_work THEN
        IF NEW.state <> OLD.state AND NOT EXISTS (
            SELECT 1 FROM state_transitions WHERE from_state = OLD.state AND to_state = NEW.state AND by_automation
        ) THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
                'actionledger: role %s may not move an action from %s to %s: only a person''s command does that',
                current_user, OLD.state, NEW.state);
        END IF;
        IF NEW.payload IS DISTINCT FROM OLD.payload OR NEW.fingerprint IS DISTINCT FROM OLD.fingerprint
           OR NEW.assignee IS DISTINCT FROM OLD.assignee
           OR (OLD.proposed_payload IS NOT NULL AND NEW.proposed_payload IS NULL) THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
                'actionledger: role %s may not change the approved payload, the assignee or decide a proposal: '
                'only a person''s command does that', current_user);
        END IF;
    ELSIF may_review THEN
        IF NEW.state <> OLD.state AND NOT EXISTS (
            SELECT 1 FROM state_transitions WHERE from_state = OLD.state AND to_state = NEW.state AND by_people
        ) THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
                'actionledger: role %s may not move an action from %s to %s: only a worker does that',
                current_user, OLD.state, NEW.state);
        END IF;
        IF OLD.state = 'in_progress' AND NEW.state = 'in_progress' THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
                'actionledger: role %s may not change a claimed action except by taking it over', current_user);
        END IF;
    ELSE
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
            MESSAGE = format('actionledger: role %s may not change actions', current_user);
    END IF;

    -- 0011: the columns every command writes back.
    IF NEW.source IS DISTINCT FROM OLD.source OR NEW.destination IS DISTINCT FROM OLD.destination
       OR NEW.after_key IS DISTINCT FROM OLD.after_key THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may not change an action''s source, destination or the action it follows',
            current_user);
    END IF;
    IF NEW.revision NOT IN (OLD.revision, OLD.revision + 1)
       OR NEW.ownership_version NOT IN (OLD.ownership_version, OLD.ownership_version + 1) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may move an action''s revision and ownership version only one step forward',
            current_user);
    END IF;
    IF NEW.first_sent_at IS DISTINCT FROM OLD.first_sent_at AND OLD.first_sent_at IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may not change when a request was first sent', current_user);
    END IF;
    IF NOT may_review THEN
        IF NEW.payload_revision <> OLD.payload_revision
           OR NEW.idempotency_key IS DISTINCT FROM OLD.idempotency_key
           OR (NEW.window_started_at IS DISTINCT FROM OLD.window_started_at AND OLD.window_started_at IS NOT NULL) THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
                'actionledger: role %s may not change the payload revision, the idempotency key or a running '
                'window: only a person''s command does that', current_user);
        END IF;
        IF NEW.attempts NOT IN (OLD.attempts, OLD.attempts + 1) THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
                'actionledger: role %s may count attempts only one at a time', current_user);
        END IF;
    ELSE
        IF (NEW.payload IS DISTINCT FROM OLD.payload OR NEW.fingerprint IS DISTINCT FROM OLD.fingerprint
            OR NEW.payload_revision <> OLD.payload_revision OR NEW.source_version IS DISTINCT FROM OLD.source_version)
           AND NOT (NEW.payload = OLD.proposed_payload AND NEW.fingerprint = OLD.proposed_fingerprint
                    AND NEW.proposed_payload IS NULL AND NEW.payload_revision = OLD.payload_revision + 1
                    AND NEW.source_version IS NOT DISTINCT FROM
                        COALESCE(OLD.proposed_source_version, OLD.source_version)) THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
                'actionledger: role %s may change the approved payload only by approving the proposed one',
                current_user);
        END IF;
        IF (NEW.proposed_payload IS NOT NULL AND NEW.proposed_payload IS DISTINCT FROM OLD.proposed_payload)
           OR (NEW.proposed_payload IS NOT NULL AND NEW.proposed_fingerprint IS DISTINCT FROM OLD.proposed_fingerprint)
           OR (NEW.idempotency_key IS DISTINCT FROM OLD.idempotency_key
               AND (NEW.payload_revision = OLD.payload_revision
                    OR NEW.idempotency_key IS DISTINCT FROM OLD.key || '#rev-' || NEW.payload_revision))
           OR NEW.attempts <> OLD.attempts
           OR (NEW.first_sent_at IS DISTINCT FROM OLD.first_sent_at)
           OR (NEW.window_started_at IS DISTINCT FROM OLD.window_started_at AND NEW.window_started_at IS NOT NULL) THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
                'actionledger: role %s may not propose a payload, choose an idempotency key, count attempts or '
                'record a send: only a worker or a source does that', current_user);
        END IF;
    END IF;

    -- 0005: facts a worker raises and only a person's command clears; no role but the owner
    -- forgets that a request may have been sent.
    IF (NEW.late_results < OLD.late_results OR (OLD.old_worker_may_act AND NOT NEW.old_worker_may_act))
       AND NOT may_review THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may not acknowledge late results or confirm that an old worker stopped: '
            'only a person''s command does that', current_user);
    END IF;
    IF OLD.first_sent_at IS NOT NULL AND NEW.first_sent_at IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may not clear the evidence that a request may have been sent', current_user);
    END IF;
    RETURN NEW;
END;
$$;

-- The insert check of 0001/0004 stays with its function (it returns before asking about roles);
-- updates go to the function above.
DROP TRIGGER actions_guard ON actions;
DROP TRIGGER actions_guard_columns ON actions;
DROP TRIGGER actions_late_facts_guard ON actions;
CREATE TRIGGER actions_guard BEFORE INSERT ON actions
    FOR EACH ROW EXECUTE FUNCTION actionledger_guard_action();
CREATE TRIGGER actions_guard_update BEFORE UPDATE ON actions
    FOR EACH ROW EXECUTE FUNCTION actionledger_guard_action_update();

-- A purged action is completed or cancelled (only those are purged) and never changes again, so
-- only a change to such an action needs the lookup in purged_actions.
DROP TRIGGER actions_purged_never_change ON actions;
CREATE TRIGGER actions_purged_never_change BEFORE UPDATE ON actions
    FOR EACH ROW WHEN (OLD.state IN ('completed', 'cancelled'))
    EXECUTE FUNCTION actionledger_guard_purged_action();

-- The attempt guards of 0005 and 0010, only where what they judge changes.
DROP TRIGGER attempts_acknowledgement_guard ON attempts;
CREATE TRIGGER attempts_acknowledgement_guard BEFORE UPDATE ON attempts
    FOR EACH ROW WHEN (NEW.acknowledged_by IS DISTINCT FROM OLD.acknowledged_by
                       OR NEW.acknowledged_at IS DISTINCT FROM OLD.acknowledged_at)
    EXECUTE FUNCTION actionledger_guard_acknowledgement();
DROP TRIGGER attempts_cut_off_guard ON attempts;
CREATE TRIGGER attempts_cut_off_guard BEFORE UPDATE ON attempts
    FOR EACH ROW WHEN (NEW.outcome IS DISTINCT FROM OLD.outcome
                       AND NOT (OLD.outcome IS NULL AND OLD.ended_at IS NULL AND NEW.outcome = 'cut_off'))
    EXECUTE FUNCTION actionledger_guard_cut_off();

-- The audit guard of 0011, asking for the session's duties once.
CREATE OR REPLACE FUNCTION actionledger_guard_audit_append() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    duties integer := actionledger_session_duties();
BEGIN
    IF duties = 3 THEN
        RETURN NEW;
    END IF;
    IF NEW.actor_kind = 'person' AND duties & 2 = 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may not write to the audit trail in a person''s name: only a person''s command does that',
            current_user);
    END IF;
    IF NEW.actor_kind = 'person' AND NOT actionledger_login_is(NEW.actor) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: login %s may not sign as %s: a person''s entry names the person of the login '
            '(the login''s own name, or a row of person_logins)', session_user, NEW.actor);
    END IF;
    IF NEW.actor_kind <> 'person' AND duties & 1 = 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may not write to the audit trail as a %s: only a worker does that',
            current_user, NEW.actor_kind);
    END IF;
    RETURN NEW;
END;
$$;

-- As 0008_function_search_path.sql: the functions defined above find the ledger's tables.
DO $$
DECLARE
    item RECORD;
BEGIN
    FOR item IN
        SELECT p.oid::regprocedure AS name FROM pg_proc p
        WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'actionledger\_%'
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', item.name, current_schema());
    END LOOP;
END;
$$;

SELECT actionledger_grant_roles();
