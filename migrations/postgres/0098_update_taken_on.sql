-- A completed action takes on an approved new version only when its update action completed
-- (0097): then a worker (the update's result, or a lookup that found it) or a person (resolving the
-- update as completed) writes the update's payload onto the action, with an `update_applied` audit
-- entry. The guard of 0095 let neither role change an approved payload that way.
--
-- actionledger_guard_action_update, written in full (0095's otherwise): the payload, fingerprint,
-- payload revision and source version of an action may change, for a worker or a reviewer, to
-- those of its update action `KEY#update-N` when that action exists, updates this one, is
-- completed and carries exactly that payload; N becomes the payload revision and only moves
-- forward, the source version becomes the greater of the two, and the state, proposal and
-- idempotency key stay as they were. The check runs only when the payload changes, so the hot
-- path pays nothing for it.

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
    -- 0098: the action takes on the payload of its update action KEY#update-N, which completed
    -- (written earlier in this transaction); decided below only when the payload changes.
    takes_on_update BOOLEAN := false;
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
    IF NEW.payload IS DISTINCT FROM OLD.payload OR NEW.fingerprint IS DISTINCT FROM OLD.fingerprint
       OR NEW.payload_revision <> OLD.payload_revision OR NEW.source_version IS DISTINCT FROM OLD.source_version THEN
        takes_on_update := NEW.state = OLD.state AND NEW.payload_revision > OLD.payload_revision
            AND NEW.proposed_payload IS NOT DISTINCT FROM OLD.proposed_payload
            AND NEW.idempotency_key IS NOT DISTINCT FROM OLD.idempotency_key
            AND EXISTS (
                SELECT 1 FROM actions u
                WHERE u.key = OLD.key || '#update-' || NEW.payload_revision AND u.updates_key = OLD.key
                  AND u.state = 'completed' AND u.payload = NEW.payload AND u.fingerprint = NEW.fingerprint
                  AND NEW.source_version IS NOT DISTINCT FROM GREATEST(OLD.source_version, u.source_version));
    END IF;

    -- 0004: who may make this change of state, and a worker's limits on the payload.
    IF may_work THEN
        IF NEW.state <> OLD.state AND NOT by_a_worker THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
                'actionledger: role %s may not move an action from %s to %s: only a person''s command does that',
                current_user, OLD.state, NEW.state);
        END IF;
        IF ((NEW.payload IS DISTINCT FROM OLD.payload OR NEW.fingerprint IS DISTINCT FROM OLD.fingerprint)
            AND NOT takes_on_update)
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
        IF (NEW.payload_revision <> OLD.payload_revision AND NOT takes_on_update)
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
        IF NEW.source_version IS DISTINCT FROM OLD.source_version AND NOT takes_on_update THEN
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
                        COALESCE(OLD.proposed_source_version, OLD.source_version))
           AND NOT takes_on_update THEN
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
