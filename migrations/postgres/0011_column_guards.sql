-- Roles hold against direct SQL, column by column and actor by actor (docs/RULES.md, "Roles").
--
-- Migration 0004 decides which role may make each change of state; a session that is not the
-- schema owner could still rewrite any other column of an action by hand (the approved payload,
-- its fingerprint, the versions, the first send time, the destination), forge an audit entry in
-- another person's name, or record an event this version of the code cannot read back. This
-- migration closes each:
--   * the value lists: states, events, actor kinds and attempt outcomes are CHECK constraints
--     with the values of the Rust enums (tests/it/roles.rs keeps them equal);
--   * column privileges: no role but the owner may update the columns that name an action (id,
--     key, created_at, the action an update action updates);
--   * a guard for value-dependent rules on the columns every command writes back;
--   * person_logins: which person each login may sign the audit trail as; a reviewer's change of
--     state must come with that person's entry in the same transaction.

ALTER TABLE audit_trail
    ADD CONSTRAINT audit_trail_event_known CHECK (event IN (
        'submitted', 'payload_changed', 'claimed', 'completed', 'failed', 'retry_scheduled', 'outcome_unknown',
        'held', 'released', 'late_result', 'claim_recovered', 'lease_expired', 'lookup_found', 'lookup_not_found',
        'lookup_mismatch', 'retry', 'resolved_completed', 'resolved_not_written', 'cancelled', 'approved',
        'rejected', 'taken_over', 'assigned', 'late_results_acknowledged')),
    ADD CONSTRAINT audit_trail_from_state_known CHECK (from_state IN (
        'pending', 'in_progress', 'completed', 'failed', 'unknown', 'conflict', 'held', 'cancelled')),
    ADD CONSTRAINT audit_trail_to_state_known CHECK (to_state IN (
        'pending', 'in_progress', 'completed', 'failed', 'unknown', 'conflict', 'held', 'cancelled'));

ALTER TABLE actions
    ADD CONSTRAINT actions_resume_state_known CHECK (resume_state IN (
        'pending', 'in_progress', 'completed', 'failed', 'unknown', 'conflict', 'held', 'cancelled'));

ALTER TABLE attempts
    ADD CONSTRAINT attempts_outcome_known CHECK (outcome IN (
        'succeeded', 'failed_before_write', 'failed_permanent', 'unknown', 'held', 'cut_off'));

-- Which people a login signs as. A login whose name is the person's own needs no row. The owner
-- adds rows: `INSERT INTO person_logins (login, person) VALUES ('ana', 'Ana Lima');`.
CREATE TABLE person_logins (
    login  TEXT NOT NULL,
    person TEXT NOT NULL,
    PRIMARY KEY (login, person)
);

-- Whether this session owns the ledger's tables (or the ledger is not role-managed, or the session
-- holds both the worker's and the reviewer's duties): such a session is not held to one role's
-- columns.
CREATE FUNCTION actionledger_session_unrestricted() RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT actionledger_session_may('worker') AND actionledger_session_may('reviewer')
$$;

-- What a person's command, or a worker's step, may write into the columns every command writes
-- back. The checks compare values only; who may change state and the payload's first guards are
-- in 0004_roles.sql, the late facts in 0005_late_results.sql.
CREATE FUNCTION actionledger_guard_columns() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    may_review BOOLEAN;
BEGIN
    IF actionledger_session_unrestricted() THEN
        RETURN NEW;
    END IF;
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
    may_review := actionledger_session_may('reviewer');
    IF NOT may_review THEN
        -- A worker counts attempts one at a time and starts a window only where none runs.
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
        RETURN NEW;
    END IF;
    -- A person: the approved payload changes only by approving the proposal as it was submitted.
    IF (NEW.payload IS DISTINCT FROM OLD.payload OR NEW.fingerprint IS DISTINCT FROM OLD.fingerprint
        OR NEW.payload_revision <> OLD.payload_revision OR NEW.source_version IS DISTINCT FROM OLD.source_version)
       AND NOT (NEW.payload = OLD.proposed_payload AND NEW.fingerprint = OLD.proposed_fingerprint
                AND NEW.proposed_payload IS NULL AND NEW.payload_revision = OLD.payload_revision + 1
                AND NEW.source_version IS NOT DISTINCT FROM COALESCE(OLD.proposed_source_version, OLD.source_version)) THEN
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
    RETURN NEW;
END;
$$;

-- Named to fire after actions_guard (triggers fire in name order), whose refusals say more.
CREATE TRIGGER actions_guard_columns BEFORE UPDATE ON actions
    FOR EACH ROW EXECUTE FUNCTION actionledger_guard_columns();

-- Whether this session may sign the audit trail as `person`: its login is that person's name, or
-- the owner listed it in person_logins. Reads person_logins with its owner's rights.
CREATE FUNCTION actionledger_login_is(person TEXT) RETURNS boolean LANGUAGE sql STABLE
SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT person = session_user::text
        OR EXISTS (SELECT 1 FROM person_logins p WHERE p.login = session_user::text AND p.person = $1)
$$;

-- Each appends to the audit trail only in its own name: a worker as a worker or a source, a
-- reviewer as the person its login is.
CREATE OR REPLACE FUNCTION actionledger_guard_audit_append() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF actionledger_session_unrestricted() THEN
        RETURN NEW;
    END IF;
    IF NEW.actor_kind = 'person' AND NOT actionledger_session_may('reviewer') THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may not write to the audit trail in a person''s name: only a person''s command does that',
            current_user);
    END IF;
    IF NEW.actor_kind = 'person' AND NOT actionledger_login_is(NEW.actor) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: login %s may not sign as %s: a person''s entry names the person of the login '
            '(the login''s own name, or a row of person_logins)', session_user, NEW.actor);
    END IF;
    IF NEW.actor_kind <> 'person' AND NOT actionledger_session_may('worker') THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may not write to the audit trail as a %s: only a worker does that',
            current_user, NEW.actor_kind);
    END IF;
    RETURN NEW;
END;
$$;

-- A person's change of state is recorded in the audit trail, in that person's name, by the same
-- transaction: checked when it commits, since the ledger appends its entries last.
CREATE FUNCTION actionledger_check_person_entry() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF actionledger_session_may('worker') THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM audit_trail
        WHERE action_key = NEW.key AND actor_kind = 'person' AND to_state = NEW.state
          AND xmin = (pg_current_xact_id()::text::bigint % 4294967296)::text::xid
    ) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s moved %s to %s without a person''s entry in the audit trail: only a person''s '
            'command does that', current_user, NEW.key, NEW.state);
    END IF;
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER actions_person_change_recorded AFTER UPDATE ON actions
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION actionledger_check_person_entry();

-- Creates the roles if they are missing and this session may, then grants each its privileges,
-- all of them (this migration's, and those of 0005, 0006, 0007 and 0010), and hands the tables
-- to actionledger_owner. Safe to run again: after creating the roles by hand, an operator runs
-- `SELECT actionledger_grant_roles();` as the schema owner, once.
CREATE OR REPLACE FUNCTION actionledger_grant_roles() RETURNS void LANGUAGE plpgsql AS $$
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
        _sqlx_migrations, purges, purged_actions, person_logins
        TO actionledger_worker, actionledger_reviewer, actionledger_viewer;
    GRANT INSERT ON actions, attempts, deliveries, audit_trail, lookups, refused_submissions TO actionledger_worker;
    GRANT USAGE ON SEQUENCE actions_id_seq, deliveries_id_seq, attempts_id_seq, audit_trail_id_seq, lookups_id_seq,
        refused_submissions_id_seq TO actionledger_worker;
    -- A reviewer inserts only update actions (the guard of 0006_updates.sql).
    GRANT INSERT ON actions, audit_trail, lookups TO actionledger_reviewer;
    GRANT USAGE ON SEQUENCE actions_id_seq, audit_trail_id_seq, lookups_id_seq TO actionledger_reviewer;

    -- Updates, column by column: what identifies an action (id, key, created_at, the action an
    -- update action updates) and how an attempt started are written once, on insert.
    REVOKE UPDATE ON actions, attempts FROM actionledger_worker, actionledger_reviewer, actionledger_viewer;
    GRANT UPDATE (state, payload, fingerprint, proposed_payload, proposed_fingerprint, proposed_source_version,
                  resume_state, source, source_version, destination, after_key, claimed_by, ownership_version,
                  lease_expires_at, not_before, attempts, attempts_in_round, assignee, destination_id, first_sent_at,
                  window_started_at, late_results, old_worker_may_act, may_have_written, last_error,
                  payload_revision, idempotency_key, updated_at, revision)
        ON actions TO actionledger_worker, actionledger_reviewer;
    -- (The acknowledgement columns too, so that the guard of 0005_late_results.sql names why a
    -- worker may not acknowledge.)
    GRANT UPDATE (ended_at, outcome, error, response_status, destination_id, response_body, stale,
                  acknowledged_by, acknowledged_at)
        ON attempts TO actionledger_worker;
    -- A reviewer acknowledges late results and records unfinished attempts as cut off.
    GRANT UPDATE (acknowledged_by, acknowledged_at, outcome) ON attempts TO actionledger_reviewer;

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
                                'state_transitions', '_sqlx_migrations', 'purges', 'purged_actions', 'person_logins')
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
