-- Least privilege. Four group roles (NOLOGIN, shared by every ledger in the cluster); an operator
-- grants them to login roles:
--   actionledger_owner     owns the schema and runs migrations;
--   actionledger_worker    submits, claims, records attempts, results and lookups, appends its
--                          own entries to the audit trail;
--   actionledger_reviewer  runs people's commands: changes actions only as they do, appends
--                          entries in a person's name;
--   actionledger_viewer    reads.
-- Table privileges cannot tell a claim from a retry (both update one row), so the action guard
-- also asks which of these roles the session holds, and the transition table says who may make
-- each change of state.

ALTER TABLE state_transitions
    ADD COLUMN by_automation BOOLEAN NOT NULL DEFAULT false,
    ADD COLUMN by_people     BOOLEAN NOT NULL DEFAULT false;

-- The same classes as state_pairs_by_maker() in src/domain/state.rs; a test keeps them equal.
UPDATE state_transitions SET by_automation = true WHERE (from_state, to_state) IN (VALUES
    ('pending', 'in_progress'), ('pending', 'conflict'),
    ('in_progress', 'pending'), ('in_progress', 'completed'), ('in_progress', 'failed'),
    ('in_progress', 'unknown'), ('in_progress', 'conflict'), ('in_progress', 'held'),
    ('completed', 'conflict'), ('failed', 'conflict'),
    ('unknown', 'pending'), ('unknown', 'completed'), ('unknown', 'conflict'),
    ('held', 'conflict'));
UPDATE state_transitions SET by_people = true WHERE (from_state, to_state) IN (VALUES
    ('pending', 'cancelled'),
    ('in_progress', 'pending'), ('in_progress', 'conflict'), ('in_progress', 'held'),
    ('failed', 'pending'), ('failed', 'completed'), ('failed', 'conflict'), ('failed', 'cancelled'),
    ('unknown', 'pending'), ('unknown', 'completed'), ('unknown', 'conflict'), ('unknown', 'cancelled'),
    ('conflict', 'pending'), ('conflict', 'completed'), ('conflict', 'failed'), ('conflict', 'held'),
    ('conflict', 'cancelled'),
    ('held', 'pending'), ('held', 'completed'), ('held', 'conflict'), ('held', 'cancelled'));

-- Whether this session may do the work of `duty` ('worker' or 'reviewer'). The owner of the
-- tables may do everything, and so may anyone while the roles do not all exist: such a ledger
-- is not managed by roles, only by table privileges.
CREATE FUNCTION actionledger_session_may(duty TEXT) RETURNS boolean LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF pg_has_role((SELECT relowner FROM pg_class WHERE oid = 'actions'::regclass), 'USAGE') THEN
        RETURN true;
    END IF;
    IF (SELECT count(*) FROM pg_roles WHERE rolname IN ('actionledger_worker', 'actionledger_reviewer')) < 2 THEN
        RETURN true;
    END IF;
    RETURN pg_has_role('actionledger_' || duty, 'USAGE');
END;
$$;

CREATE OR REPLACE FUNCTION actionledger_guard_action() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    may_work   BOOLEAN;
    may_review BOOLEAN;
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
    may_work := actionledger_session_may('worker');
    may_review := actionledger_session_may('reviewer');
    IF may_work AND may_review THEN
        RETURN NEW;
    END IF;
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
        RETURN NEW;
    END IF;
    IF may_review THEN
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
        RETURN NEW;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
        MESSAGE = format('actionledger: role %s may not change actions', current_user);
END;
$$;

-- Each appends to the audit trail only in its own name: a worker as a worker or a source, a
-- reviewer as a person.
CREATE FUNCTION actionledger_guard_audit_append() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.actor_kind = 'person' AND NOT actionledger_session_may('reviewer') THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may not write to the audit trail in a person''s name: only a person''s command does that',
            current_user);
    END IF;
    IF NEW.actor_kind <> 'person' AND NOT actionledger_session_may('worker') THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may not write to the audit trail as a %s: only a worker does that',
            current_user, NEW.actor_kind);
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER audit_trail_appended_in_own_name BEFORE INSERT ON audit_trail
    FOR EACH ROW EXECUTE FUNCTION actionledger_guard_audit_append();

-- Creates the roles if they are missing and this session may, then grants each its privileges
-- and hands the tables to actionledger_owner. Safe to run again: after creating the roles by
-- hand, an operator runs `SELECT actionledger_grant_roles();` as the schema owner.
CREATE FUNCTION actionledger_grant_roles() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    duty    TEXT;
    missing TEXT[] := '{}';
    item    RECORD;
BEGIN
    FOREACH duty IN ARRAY ARRAY['owner', 'worker', 'reviewer', 'viewer'] LOOP
        CONTINUE WHEN EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'actionledger_' || duty);
        BEGIN
            EXECUTE format('CREATE ROLE %I NOLOGIN', 'actionledger_' || duty);
        EXCEPTION
            -- Another ledger's migration in the same cluster made it at the same moment.
            WHEN duplicate_object OR unique_violation THEN NULL;
            WHEN insufficient_privilege THEN missing := missing || ('actionledger_' || duty);
        END;
    END LOOP;
    IF cardinality(missing) > 0 THEN
        RAISE WARNING 'actionledger: the roles % do not exist and % may not create them; the ledger is not role-managed',
            array_to_string(missing, ', '), current_user
            USING HINT = 'Create them (NOLOGIN) as a role with CREATEROLE, then run SELECT actionledger_grant_roles(); as the schema owner.';
        RETURN;
    END IF;

    EXECUTE format('GRANT USAGE ON SCHEMA %I TO actionledger_worker, actionledger_reviewer, actionledger_viewer',
                   current_schema());
    GRANT SELECT ON actions, deliveries, attempts, audit_trail, lookups, refused_submissions, state_transitions,
        _sqlx_migrations TO actionledger_worker, actionledger_reviewer, actionledger_viewer;
    GRANT INSERT, UPDATE ON actions, attempts TO actionledger_worker;
    GRANT INSERT ON deliveries, audit_trail, lookups, refused_submissions TO actionledger_worker;
    GRANT USAGE ON SEQUENCE actions_id_seq, deliveries_id_seq, attempts_id_seq, audit_trail_id_seq, lookups_id_seq,
        refused_submissions_id_seq TO actionledger_worker;
    GRANT UPDATE ON actions TO actionledger_reviewer;
    GRANT INSERT ON audit_trail, lookups TO actionledger_reviewer;
    GRANT USAGE ON SEQUENCE audit_trail_id_seq, lookups_id_seq TO actionledger_reviewer;

    -- The tables move to actionledger_owner, with the session that migrates as a member, so any
    -- member may run later migrations. Without the right to do so, they stay with this session.
    BEGIN
        IF NOT pg_has_role('actionledger_owner', 'USAGE') THEN
            EXECUTE format('GRANT actionledger_owner TO %I', current_user);
        END IF;
        EXECUTE format('GRANT USAGE, CREATE ON SCHEMA %I TO actionledger_owner', current_schema());
        FOR item IN
            SELECT c.oid::regclass AS name FROM pg_class c
            WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
              AND c.relname IN ('actions', 'deliveries', 'attempts', 'audit_trail', 'lookups', 'refused_submissions',
                                'state_transitions', '_sqlx_migrations')
        LOOP
            EXECUTE format('ALTER TABLE %s OWNER TO actionledger_owner', item.name);
        END LOOP;
        FOR item IN
            SELECT p.oid::regprocedure AS name FROM pg_proc p
            WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'actionledger\_%'
        LOOP
            EXECUTE format('ALTER FUNCTION %s OWNER TO actionledger_owner', item.name);
        END LOOP;
    EXCEPTION
        WHEN insufficient_privilege OR duplicate_object OR unique_violation THEN
            RAISE WARNING 'actionledger: % may not hand the tables to actionledger_owner; they stay with %',
                current_user, current_user;
    END;
END;
$$;

SELECT actionledger_grant_roles();
