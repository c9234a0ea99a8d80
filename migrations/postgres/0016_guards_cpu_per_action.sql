-- The same guards, for less of the server's CPU per action (docs/BENCHMARKS.md, "Server CPU per
-- action"). Measured with `perf record -a -g` on the server and pg_stat_user_functions
-- (track_functions = all) during `bench --drain 4000`, the per-action path cost about 1 ms of
-- the server's CPU per action against 0.35-0.4 ms for the raw drain. Three causes, each fixed
-- here with every refusal kept, in the same words:
--
--   * CHECK constraints are re-read from their stored node text (stringToNode) by every
--     statement that inserts into or updates their table: about 10,000 characters per audit
--     entry (the list of events, of states twice, of actor kinds) and 3,500 per update of an
--     action (its state and resume state), whichever columns the update sets. A domain's
--     constraints are read once per connection (the type cache), and checked only where a
--     value of the column is written. The value lists become domains over text with the same
--     values; the columns take them and the old CHECKs go. A column of a domain reads back as
--     text (the server describes it by its base type), and a value outside the list is refused
--     with the same SQLSTATE 23514 (check_violation). The list of events follows in
--     0070_event_domain.sql: migration 0040 replaces its CHECK, and on a new ledger runs after
--     this one.
--   * actionledger_session_duties() (0012) looked up the owner of `actions` with a query
--     (SPI: plan, executor start and end) at every call, about ten calls per action. The owner
--     test now runs only where it can change the answer: a session that holds both duties gets 3
--     whoever owns the tables, and a session that is a member of the owner role always has every
--     grant option on the owner's table, so a session without `TRIGGER WITH GRANT OPTION` on
--     `actions` is not the owner (superusers hold both duties). Same answer for every session,
--     including a ledger that is not role-managed.
--   * actionledger_guard_action_update() (0012) looked up a change of state in
--     state_transitions twice (any transition, then the role's class); it reads the pair's row
--     once. The guards that asked actionledger_session_may() ask for the duties directly (one
--     function call instead of two).

-- The value lists of 0001 and 0011 but the events', as domains. Created without their
-- constraint first: a column moved from text to a domain with no constraint is relabelled in
-- place (binary coercible: the table is not rewritten, and its indexes are kept but for the two
-- partial ones whose predicate reads `state`, actions_claimable and actions_lease, built again
-- over the pending and claimed actions), while a column moved to a domain with a constraint is
-- rewritten (PostgreSQL 15). The constraints are then added to the domains, which checks every
-- existing value once (a scan, no rewrite). The tables are locked (ACCESS EXCLUSIVE) for the
-- length of this migration.
CREATE DOMAIN actionledger_state AS TEXT;
CREATE DOMAIN actionledger_actor_kind AS TEXT;
CREATE DOMAIN actionledger_attempt_outcome AS TEXT;

-- PostgreSQL does not change the type of a column that a trigger's WHEN clause reads: these
-- triggers are dropped here and made again below, as they were (same names, so the same order).
DROP TRIGGER actions_notify_change ON actions;
DROP TRIGGER actions_person_change_recorded ON actions;
DROP TRIGGER actions_purged_never_change ON actions;
DROP TRIGGER attempts_cut_off_guard ON attempts;

ALTER TABLE actions
    DROP CONSTRAINT actions_state_check,
    DROP CONSTRAINT actions_resume_state_known,
    ALTER COLUMN state TYPE actionledger_state,
    ALTER COLUMN resume_state TYPE actionledger_state;
ALTER TABLE audit_trail
    DROP CONSTRAINT audit_trail_from_state_known,
    DROP CONSTRAINT audit_trail_to_state_known,
    DROP CONSTRAINT audit_trail_actor_kind_check,
    ALTER COLUMN from_state TYPE actionledger_state,
    ALTER COLUMN to_state TYPE actionledger_state,
    ALTER COLUMN actor_kind TYPE actionledger_actor_kind;
ALTER TABLE attempts
    DROP CONSTRAINT attempts_outcome_known,
    ALTER COLUMN outcome TYPE actionledger_attempt_outcome;

-- The values of the Rust enums State, ActorKind and AttemptOutcome (tests/it/roles.rs and
-- tests/it/guard_cost.rs keep them equal). A later migration that adds a value drops and adds the
-- domain's constraint: `ALTER DOMAIN actionledger_state DROP CONSTRAINT actionledger_state_known`,
-- then `ALTER DOMAIN actionledger_state ADD CONSTRAINT actionledger_state_known CHECK (...)`.
ALTER DOMAIN actionledger_state ADD CONSTRAINT actionledger_state_known CHECK (VALUE IN (
    'pending', 'in_progress', 'completed', 'failed', 'unknown', 'conflict', 'held', 'cancelled'));
ALTER DOMAIN actionledger_actor_kind ADD CONSTRAINT actionledger_actor_kind_known CHECK (VALUE IN (
    'worker', 'person', 'source'));
ALTER DOMAIN actionledger_attempt_outcome ADD CONSTRAINT actionledger_attempt_outcome_known CHECK (VALUE IN (
    'succeeded', 'failed_before_write', 'failed_permanent', 'unknown', 'held', 'cut_off'));

-- The triggers dropped above, as 0014, 0011 and 0012 made them.
CREATE TRIGGER actions_notify_change AFTER UPDATE ON actions
    FOR EACH ROW WHEN ((OLD.state IS DISTINCT FROM NEW.state
                        AND (OLD.state IN ('failed', 'unknown', 'conflict', 'held')
                             OR NEW.state IN ('failed', 'unknown', 'conflict', 'held')))
                       OR OLD.assignee IS DISTINCT FROM NEW.assignee
                       OR OLD.proposed_fingerprint IS DISTINCT FROM NEW.proposed_fingerprint
                       OR OLD.late_results IS DISTINCT FROM NEW.late_results)
    EXECUTE FUNCTION actionledger_notify_change();
CREATE CONSTRAINT TRIGGER actions_person_change_recorded AFTER UPDATE ON actions
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION actionledger_check_person_entry();
CREATE TRIGGER actions_purged_never_change BEFORE UPDATE ON actions
    FOR EACH ROW WHEN (OLD.state IN ('completed', 'cancelled'))
    EXECUTE FUNCTION actionledger_guard_purged_action();
CREATE TRIGGER attempts_cut_off_guard BEFORE UPDATE ON attempts
    FOR EACH ROW WHEN (NEW.outcome IS DISTINCT FROM OLD.outcome
                       AND NOT (OLD.outcome IS NULL AND OLD.ended_at IS NULL AND NEW.outcome = 'cut_off'))
    EXECUTE FUNCTION actionledger_guard_cut_off();

-- The session's duties as bits, as in 0012: 1 a worker's work, 2 a person's commands; 3 also for
-- a member of the role that owns the tables, and for anyone while the roles do not all exist.
-- The owner's query runs last, and only for a session that may be the owner (see the header).
CREATE OR REPLACE FUNCTION actionledger_session_duties() RETURNS integer LANGUAGE plpgsql STABLE AS $$
DECLARE
    worker_role   oid := to_regrole('actionledger_worker');
    reviewer_role oid := to_regrole('actionledger_reviewer');
    duties        integer;
BEGIN
    IF worker_role IS NULL OR reviewer_role IS NULL THEN
        RETURN 3;
    END IF;
    duties := CASE WHEN pg_has_role(worker_role, 'USAGE') THEN 1 ELSE 0 END
            + CASE WHEN pg_has_role(reviewer_role, 'USAGE') THEN 2 ELSE 0 END;
    IF duties = 3 OR NOT has_table_privilege('actions'::regclass, 'TRIGGER WITH GRANT OPTION') THEN
        RETURN duties;
    END IF;
    IF pg_has_role((SELECT relowner FROM pg_class WHERE oid = 'actions'::regclass), 'USAGE') THEN
        RETURN 3;
    END IF;
    RETURN duties;
END;
$$;

-- As 0012, reading the pair's row of state_transitions once.
CREATE OR REPLACE FUNCTION actionledger_guard_action_update() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    duties         integer;
    may_work       BOOLEAN;
    may_review     BOOLEAN;
    by_a_worker    BOOLEAN;
    by_a_person    BOOLEAN;
BEGIN
    IF NEW.key <> OLD.key OR NEW.ownership_version < OLD.ownership_version THEN
        RAISE EXCEPTION 'actionledger: the key and ownership version of an action never go back';
    END IF;
    IF NEW.state <> OLD.state THEN
        SELECT t.by_automation, t.by_people INTO by_a_worker, by_a_person
          FROM state_transitions t WHERE t.from_state = OLD.state AND t.to_state = NEW.state;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'actionledger: forbidden state transition from % to %', OLD.state, NEW.state;
        END IF;
    END IF;
    duties := actionledger_session_duties();
    IF duties = 3 THEN
        RETURN NEW;
    END IF;
    may_work := duties & 1 = 1;
    may_review := duties & 2 = 2;

    -- 0004: who may make this change of state, and a worker's limits on the payload.
    IF may_work THEN
        IF NEW.state <> OLD.state AND NOT by_a_worker THEN
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
        IF NEW.state <> OLD.state AND NOT by_a_person THEN
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

-- The guards below asked actionledger_session_may('worker'), which is true exactly where the
-- duties have bit 1 (3 has it too); they ask for the duties themselves, with the same messages.
CREATE OR REPLACE FUNCTION actionledger_check_person_entry() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF actionledger_session_duties() & 1 = 1 THEN
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

CREATE OR REPLACE FUNCTION actionledger_guard_cut_off() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.outcome IS DISTINCT FROM OLD.outcome AND actionledger_session_duties() & 1 = 0
       AND NOT (OLD.outcome IS NULL AND OLD.ended_at IS NULL AND NEW.outcome = 'cut_off') THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may only record an unfinished attempt as cut off', current_user);
    END IF;
    RETURN NEW;
END;
$$;

CREATE OR REPLACE FUNCTION actionledger_guard_reviewer_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.updates_key IS NULL AND actionledger_session_duties() & 1 = 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may record only the update action of an approved change, not submit actions',
            current_user);
    END IF;
    RETURN NEW;
END;
$$;

-- As 0008_function_search_path.sql: CREATE OR REPLACE cleared the replaced functions' settings;
-- they find the ledger's tables again.
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

-- The domains belong to actionledger_owner like the tables, so that any member may change them
-- in a later migration; without the right to hand them over they stay with this session.
DO $$
BEGIN
    IF to_regrole('actionledger_owner') IS NOT NULL AND pg_has_role('actionledger_owner', 'MEMBER') THEN
        ALTER DOMAIN actionledger_state OWNER TO actionledger_owner;
        ALTER DOMAIN actionledger_actor_kind OWNER TO actionledger_owner;
        ALTER DOMAIN actionledger_attempt_outcome OWNER TO actionledger_owner;
    END IF;
END;
$$;
