-- An approved new version of a completed action goes into its update action `KEY#update-N`, and
-- the action keeps its own payload until that update completes (0097, 0098). The reviewer's insert
-- guard of 0096 still required the update action to carry the action's own payload, under the
-- action's payload revision, which approving no longer gives it.
--
-- actionledger_guard_reviewer_insert, written in full (0096's otherwise): an update action is
-- `KEY#update-N` of a completed action, N above the action's payload revision (an approval after
-- a failed update takes the next free number), carrying the payload and fingerprint of a proposal
-- of that action approved in this transaction, the proposal's source version (else the
-- action's), and the action's source, destination and destination id.

SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_temp', true);

CREATE OR REPLACE FUNCTION actionledger_guard_reviewer_insert()
RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $function$
DECLARE
    -- The database's time of this transaction, in the ledger's milliseconds (0095).
    transaction_ms bigint := floor(extract(epoch FROM transaction_timestamp()) * 1000)::bigint - 1;
BEGIN
    IF actionledger_session_duties() & 1 = 1 THEN
        -- 0096: a submission records a new action, never an update of another.
        IF (NEW.updates_key IS NOT NULL OR NEW.updates_destination_id IS NOT NULL)
           AND actionledger_session_duties() <> 3 THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
                'actionledger: role %s may not record an update action: only a person''s approval does that',
                current_user);
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.updates_key IS NOT NULL THEN
        -- 0099: the update action an approval records carries the proposal approved in this
        -- transaction, under the first number above its original's payload revision that is free
        -- (0097: the original keeps its payload until the update completes).
        IF NOT EXISTS (
            SELECT 1 FROM actions original
            JOIN proposals approved ON approved.action_key = original.key
            WHERE original.key = NEW.updates_key AND original.state = 'completed'
              AND NEW.key ~ ('#update-[1-9][0-9]*$')
              AND NEW.key = original.key || '#update-' || substring(NEW.key FROM '#update-([1-9][0-9]*)$')
              AND substring(NEW.key FROM '#update-([1-9][0-9]*)$')::bigint > original.payload_revision
              AND NEW.after_key IS NULL
              AND approved.decision = 'approved' AND approved.decided_at >= transaction_ms
              AND approved.payload = NEW.payload AND approved.fingerprint = NEW.fingerprint
              AND NEW.source_version IS NOT DISTINCT FROM COALESCE(approved.source_version, original.source_version)
              AND original.source IS NOT DISTINCT FROM NEW.source
              AND original.destination IS NOT DISTINCT FROM NEW.destination
              AND original.destination_id IS NOT DISTINCT FROM NEW.updates_destination_id) THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
                'actionledger: role %s may record an update action only as KEY#update-N of a completed action, '
                'above its payload revision, with the proposal approved in the same transaction and the '
                'action''s source, destination and destination id', current_user);
        END IF;
        RETURN NEW;
    END IF;
    IF NOT (
        NEW.key ~ '#recreate-[1-9][0-9]*$' AND NEW.after_key IS NULL AND NEW.updates_destination_id IS NULL
        AND EXISTS (
            SELECT 1 FROM actions original
            WHERE original.key = regexp_replace(NEW.key, '#recreate-[1-9][0-9]*$', '')
              AND original.state = 'completed' AND original.updates_key IS NULL
              AND original.payload = NEW.payload AND original.fingerprint = NEW.fingerprint
              AND original.source IS NOT DISTINCT FROM NEW.source
              AND original.source_version IS NOT DISTINCT FROM NEW.source_version
              AND original.destination IS NOT DISTINCT FROM NEW.destination)) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may record only the update action of an approved change or the re-creation '
            'of a completed action, not submit actions', current_user);
    END IF;
    RETURN NEW;
END;
$function$;
