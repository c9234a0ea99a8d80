-- Column guards complete, and every change of state recorded by whoever connects.
--
-- Direct SQL by a worker's or a reviewer's login could still write what no command of theirs
-- writes: a completed action's destination id, `may_have_written = false` on an unknown action,
-- `old_worker_may_act = false` on a held one, a cleared idempotency window, a far backoff, an
-- `updated_at` in the past (which made a fresh action purgeable), acknowledged late results, a
-- proposal decided in another person's name, an ended attempt's evidence rewritten, an audit
-- entry whose change of state the action never made, and a claim with no audit entry. The
-- policy, role by role and column by column, is src/store/pg_guards.rs; docs/RULES.md shows it.
--
-- What changes here, for every login but the owner's (the owner keeps full power: it migrates
-- and purges):
--
-- * actionledger_guard_action_update (written in full; 0093's otherwise): a write that does not
--   move the revision is a worker's renewal of a claim's lease and changes nothing else; `updated_at` moves only to
--   the database's time of the writing transaction or later; the destination id changes only as
--   the action becomes completed; the mark that a request may have written is cleared only as
--   the action goes back to pending or to failed; the mark that an old worker may act changes
--   only with a change of state or owner; an idempotency window is started only under a claim
--   and cleared only as the action goes back to pending; a backoff is set only as the action
--   goes back to pending (a retry scheduled, a lookup that found nothing); late results are acknowledged only to
--   zero, and only once no late attempt is left unacknowledged.
-- * actionledger_check_change_recorded replaces actionledger_check_person_entry (0016), now for
--   every role: a change of state or of owner comes with an audit entry of the same transaction
--   for that action, from the old state to the new one under the new ownership version; and
--   every change a reviewer makes comes with that person's entry.
-- * actionledger_check_entry_matches (new): an audit entry's change of state is one the
--   transition table allows, dated at the database's time of its transaction, and the action is
--   in the entry's state when the transaction commits (unless a later entry of the same transaction moved it on).
-- * actionledger_guard_attempt_update (new): an ended attempt's evidence never changes; an
--   unfinished one changes only by being ended, or marked cut off. actionledger_guard_attempt_insert
--   (new): an attempt is inserted as it starts, without an outcome or evidence.
-- * actionledger_guard_proposal (written in full; 0020's otherwise): a reviewer decides in the
--   name of the login's person, and actionledger_check_decision_recorded (new) requires that
--   person's audit entry for the action in the same transaction.

SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_temp', true);

CREATE OR REPLACE FUNCTION actionledger_guard_action_update()
RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $function$
DECLARE
    duties         integer;
    may_work       BOOLEAN;
    may_review     BOOLEAN;
    by_a_worker    BOOLEAN;
    by_a_person    BOOLEAN;
    -- 0093: an action that needs a person, with nobody assigned, is assigned to its review owner
    -- in the write that moves it, by whoever writes it.
    routed_to_review_owner BOOLEAN := OLD.assignee IS NULL AND NEW.assignee IS NOT NULL
        AND NEW.state IN ('unknown', 'failed', 'held', 'conflict');
    -- 0095: the database's time of this transaction, in the ledger's milliseconds (a statement's
    -- clock is never earlier; one millisecond for the rounding of either).
    transaction_ms bigint := floor(extract(epoch FROM transaction_timestamp()) * 1000)::bigint - 1;
    state_moves    BOOLEAN := NEW.state <> OLD.state;
    back_to_pending BOOLEAN := NEW.state <> OLD.state AND NEW.state = 'pending';
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
           OR (NEW.assignee IS DISTINCT FROM OLD.assignee AND NOT routed_to_review_owner)
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
        -- 0095: a source version changes only by a person's approval (a new action records its
        -- own on insert).
        IF NEW.source_version IS DISTINCT FROM OLD.source_version THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
                'actionledger: role %s may not change an action''s source version: only a person''s approval does '
                'that', current_user);
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

    -- 0095: the rest of each column's policy (src/store/pg_guards.rs).
    IF NEW.revision = OLD.revision AND to_jsonb(NEW) IS DISTINCT FROM to_jsonb(OLD)
       AND NOT (may_work AND OLD.state = 'in_progress'
                AND (to_jsonb(NEW) - 'lease_expires_at') = (to_jsonb(OLD) - 'lease_expires_at')) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may change an action only by moving its revision one step (a worker''s '
            'renewal of a claim''s lease aside)', current_user);
    END IF;
    IF NEW.updated_at IS DISTINCT FROM OLD.updated_at AND NEW.updated_at < transaction_ms THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may set an action''s updated_at only to the database''s time of the change',
            current_user);
    END IF;
    IF NEW.destination_id IS DISTINCT FROM OLD.destination_id
       AND NOT (NEW.state = 'completed' AND OLD.state <> 'completed') THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may set the destination id only as the action becomes completed', current_user);
    END IF;
    IF OLD.may_have_written AND NOT NEW.may_have_written
       AND NOT (state_moves AND NEW.state IN ('pending', 'failed')) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may clear the mark that a request may have written only as a lookup or a '
            'person''s check moves the action back to pending or to failed', current_user);
    END IF;
    IF NEW.old_worker_may_act <> OLD.old_worker_may_act
       AND NOT (state_moves OR NEW.ownership_version <> OLD.ownership_version) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may change whether an old worker may act only with a change of state or owner',
            current_user);
    END IF;
    IF NEW.window_started_at IS DISTINCT FROM OLD.window_started_at
       AND NOT ((NEW.window_started_at IS NULL AND back_to_pending)
                OR (NEW.window_started_at IS NOT NULL AND NEW.state = 'in_progress'
                    AND NEW.window_started_at >= transaction_ms)) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may start an idempotency window only under a claim, and clear one only as the '
            'action goes back to pending', current_user);
    END IF;
    IF NEW.not_before IS NOT NULL AND NEW.not_before IS DISTINCT FROM OLD.not_before AND NOT back_to_pending THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may set a backoff only as the action goes back to pending', current_user);
    END IF;
    IF NEW.late_results < OLD.late_results
       AND (NEW.late_results <> 0 OR EXISTS (
               SELECT 1 FROM attempts
               WHERE action_key = NEW.key AND stale AND acknowledged_by IS NULL)) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may clear late results only by acknowledging every one of them', current_user);
    END IF;
    RETURN NEW;
END;
$function$;

-- Every change of state or of owner, whoever makes it, and every change a person makes, comes
-- with its entry in the same transaction. Checked at the commit: the ledger may write the entry
-- after the row (or in the same statement).
CREATE OR REPLACE FUNCTION actionledger_check_change_recorded()
RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $function$
DECLARE
    duties    integer := actionledger_session_duties();
    this_xact xid := (pg_current_xact_id()::text::bigint % 4294967296)::text::xid;
BEGIN
    IF duties = 3 THEN
        RETURN NULL;
    END IF;
    IF (NEW.state <> OLD.state OR NEW.ownership_version <> OLD.ownership_version) AND NOT EXISTS (
        SELECT 1 FROM audit_trail
        WHERE action_key = NEW.key AND xmin = this_xact
          AND from_state IS NOT DISTINCT FROM OLD.state AND to_state = NEW.state
          AND ownership_version = NEW.ownership_version
    ) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s moved %s from %s to %s (ownership version %s) without its entry in the audit '
            'trail: every change of state or owner is recorded in the same transaction',
            current_user, NEW.key, OLD.state, NEW.state, NEW.ownership_version);
    END IF;
    IF duties & 2 = 2 AND NOT EXISTS (
        SELECT 1 FROM audit_trail
        WHERE action_key = NEW.key AND xmin = this_xact AND actor_kind = 'person'
    ) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s changed %s without a person''s entry in the audit trail: only a person''s '
            'command does that', current_user, NEW.key);
    END IF;
    RETURN NULL;
END;
$function$;

DROP TRIGGER actions_person_change_recorded ON actions;
DROP FUNCTION actionledger_check_person_entry();
-- A worker's count of an attempt (the attempts column moves) needs no entry and costs no call.
CREATE CONSTRAINT TRIGGER actions_change_recorded AFTER UPDATE ON actions
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state
                       OR OLD.ownership_version IS DISTINCT FROM NEW.ownership_version
                       OR (OLD.revision IS DISTINCT FROM NEW.revision AND OLD.attempts = NEW.attempts))
    EXECUTE FUNCTION actionledger_check_change_recorded();

-- An entry says what happened to its action: a change the transition table allows (or none),
-- and the state the action is in at the commit, unless a later entry of the same transaction
-- moved it on.
CREATE OR REPLACE FUNCTION actionledger_check_entry_matches()
RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $function$
DECLARE
    this_xact xid;
BEGIN
    IF actionledger_session_duties() = 3 THEN
        RETURN NULL;
    END IF;
    IF NEW.from_state IS DISTINCT FROM NEW.to_state
       AND NOT (NEW.from_state IS NULL AND NEW.to_state = 'pending')
       AND NOT EXISTS (SELECT 1 FROM state_transitions t
                       WHERE t.from_state = NEW.from_state AND t.to_state = NEW.to_state) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may not record a move of %s from %s to %s: no action moves so',
            current_user, NEW.action_key, NEW.from_state, NEW.to_state);
    END IF;
    IF NEW.at < floor(extract(epoch FROM transaction_timestamp()) * 1000)::bigint - 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may date an audit entry only at the database''s time of it', current_user);
    END IF;
    this_xact := (pg_current_xact_id()::text::bigint % 4294967296)::text::xid;
    IF NOT EXISTS (SELECT 1 FROM audit_trail later
                   WHERE later.action_key = NEW.action_key AND later.id > NEW.id AND later.xmin = this_xact)
       AND NOT EXISTS (SELECT 1 FROM actions a WHERE a.key = NEW.action_key AND a.state = NEW.to_state) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may not record %s %s to %s: the action is not %s',
            current_user, NEW.event, NEW.action_key, NEW.to_state, NEW.to_state);
    END IF;
    RETURN NULL;
END;
$function$;

CREATE CONSTRAINT TRIGGER audit_trail_matches_its_action AFTER INSERT ON audit_trail
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION actionledger_check_entry_matches();

-- An attempt's evidence is written once, when it ends; before that only the mark that its
-- claim was cut off (and, after it, a person's acknowledgement) changes it.
CREATE OR REPLACE FUNCTION actionledger_guard_attempt_update()
RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $function$
BEGIN
    IF actionledger_session_duties() = 3 THEN
        RETURN NEW;
    END IF;
    IF OLD.ended_at IS NOT NULL THEN
        IF (NEW.ended_at, NEW.outcome, NEW.error, NEW.response_status, NEW.destination_id, NEW.response_body,
            NEW.stale)
           IS DISTINCT FROM
           (OLD.ended_at, OLD.outcome, OLD.error, OLD.response_status, OLD.destination_id, OLD.response_body,
            OLD.stale) THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
                'actionledger: role %s may not change an ended attempt''s outcome or evidence', current_user);
        END IF;
    ELSIF NEW.ended_at IS NULL THEN
        IF (NEW.outcome IS DISTINCT FROM OLD.outcome AND NOT (OLD.outcome IS NULL AND NEW.outcome = 'cut_off'))
           OR (NEW.error, NEW.response_status, NEW.destination_id, NEW.response_body, NEW.stale)
              IS DISTINCT FROM (OLD.error, OLD.response_status, OLD.destination_id, OLD.response_body, OLD.stale) THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
                'actionledger: role %s may write an attempt''s evidence only by ending it', current_user);
        END IF;
    ELSIF NEW.ended_at < OLD.started_at OR NEW.outcome IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may end an attempt only with an outcome, after it started', current_user);
    END IF;
    RETURN NEW;
END;
$function$;

-- Called only for what is not an attempt's end (evidence written once, with an outcome, not
-- before its start), so that the worker's path pays nothing for it.
CREATE TRIGGER attempts_evidence_written_once BEFORE UPDATE ON attempts
    FOR EACH ROW WHEN (OLD.ended_at IS NOT NULL OR NEW.ended_at IS NULL OR NEW.ended_at < OLD.started_at
                       OR NEW.outcome IS NULL)
    EXECUTE FUNCTION actionledger_guard_attempt_update();

-- A new attempt has only started: its evidence comes when it ends.
CREATE OR REPLACE FUNCTION actionledger_guard_attempt_insert()
RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $function$
BEGIN
    IF (NEW.ended_at IS NOT NULL OR NEW.outcome IS NOT NULL OR NEW.error IS NOT NULL
        OR NEW.response_status IS NOT NULL OR NEW.destination_id IS NOT NULL OR NEW.response_body IS NOT NULL
        OR NEW.stale OR NEW.acknowledged_by IS NOT NULL OR NEW.acknowledged_at IS NOT NULL)
       AND actionledger_session_duties() <> 3 THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may record an attempt only as it starts: its outcome and evidence come when it '
            'ends', current_user);
    END IF;
    RETURN NEW;
END;
$function$;

CREATE TRIGGER attempts_start_without_evidence BEFORE INSERT ON attempts
    FOR EACH ROW WHEN (NEW.ended_at IS NOT NULL OR NEW.outcome IS NOT NULL OR NEW.error IS NOT NULL
                       OR NEW.response_status IS NOT NULL OR NEW.destination_id IS NOT NULL
                       OR NEW.response_body IS NOT NULL OR NEW.stale OR NEW.acknowledged_by IS NOT NULL
                       OR NEW.acknowledged_at IS NOT NULL)
    EXECUTE FUNCTION actionledger_guard_attempt_insert();

CREATE OR REPLACE FUNCTION actionledger_guard_proposal()
RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $function$
DECLARE
    may_work   BOOLEAN := actionledger_session_may('worker');
    may_review BOOLEAN := actionledger_session_may('reviewer');
BEGIN
    IF may_work AND may_review THEN
        RETURN NEW;
    END IF;
    IF TG_OP = 'INSERT' THEN
        IF NOT may_work OR NEW.decision IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
                'actionledger: role %s may not record a decided proposal: a submission records it pending', current_user);
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.action_key <> OLD.action_key OR NEW.fingerprint <> OLD.fingerprint OR NEW.payload <> OLD.payload THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may not change what a proposal proposes', current_user);
    END IF;
    IF may_work AND NEW.decision IS NULL AND OLD.decision = 'rejected' THEN
        RETURN NEW;
    END IF;
    IF may_review AND OLD.decision IS NULL AND NEW.decision IS NOT NULL
       AND NEW.source IS NOT DISTINCT FROM OLD.source AND NEW.event_id IS NOT DISTINCT FROM OLD.event_id
       AND NEW.source_version IS NOT DISTINCT FROM OLD.source_version AND NEW.received_at = OLD.received_at THEN
        -- 0095: in the name of the login's person, at the database's time of the decision.
        IF NEW.decided_by IS NULL OR NOT actionledger_login_is(NEW.decided_by) THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
                'actionledger: login %s may not decide as %s: a decision names the person of the login',
                session_user, NEW.decided_by);
        END IF;
        IF NEW.decided_at < floor(extract(epoch FROM transaction_timestamp()) * 1000)::bigint - 1 THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
                'actionledger: role %s may date a decision only at the database''s time of it', current_user);
        END IF;
        RETURN NEW;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
        'actionledger: role %s may not change this proposal: only a submission proposes and only a person''s command '
        'decides', current_user);
END;
$function$;

-- A decision is a person's command: its entry is in the same transaction.
CREATE OR REPLACE FUNCTION actionledger_check_decision_recorded()
RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $function$
BEGIN
    IF actionledger_session_duties() = 3 THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM audit_trail
        WHERE action_key = NEW.action_key AND actor_kind = 'person' AND actor = NEW.decided_by
          AND xmin = (pg_current_xact_id()::text::bigint % 4294967296)::text::xid
    ) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s decided a proposal of %s without %s''s entry in the audit trail',
            current_user, NEW.action_key, NEW.decided_by);
    END IF;
    RETURN NULL;
END;
$function$;

CREATE CONSTRAINT TRIGGER proposals_decision_recorded AFTER UPDATE ON proposals
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (OLD.decision IS NULL AND NEW.decision IS NOT NULL)
    EXECUTE FUNCTION actionledger_check_decision_recorded();

-- The new functions belong to actionledger_owner like the others, where this session may hand
-- them over.
DO $$
BEGIN
    IF to_regrole('actionledger_owner') IS NOT NULL AND pg_has_role('actionledger_owner', 'MEMBER') THEN
        ALTER FUNCTION actionledger_check_change_recorded() OWNER TO actionledger_owner;
        ALTER FUNCTION actionledger_check_entry_matches() OWNER TO actionledger_owner;
        ALTER FUNCTION actionledger_guard_attempt_update() OWNER TO actionledger_owner;
        ALTER FUNCTION actionledger_guard_attempt_insert() OWNER TO actionledger_owner;
        ALTER FUNCTION actionledger_check_decision_recorded() OWNER TO actionledger_owner;
    END IF;
END;
$$;
