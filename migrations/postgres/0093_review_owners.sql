-- Review owners: an action that enters unknown, failed, held or conflict with nobody assigned is
-- assigned to the owner the configuration names (a key prefix, or its destination's review_owner),
-- in the same write that moves it and with an `assigned` entry in the audit trail. Workers and
-- sources write those moves, and until now only a person's command could change the assignee:
-- this lets any writer set it, from nobody to someone, on an action that needs a person. Moving
-- it from one person to another stays a person's command. The function is 0016's otherwise.

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
$function$;
