-- A person re-creates a completed action whose record was removed at the destination: a new
-- pending action `KEY#recreate-N` carries the original's approved payload, source and destination,
-- and the original stays completed with a `recreated` entry in its audit trail. No state changes,
-- so state_transitions is unchanged; the list of events the database accepts (the domain of 0070)
-- gains the new one.
--
-- A reviewer login records that new action, as it records an approval's update action: the guard
-- of 0016 let a reviewer insert only an action that updates another. It now also lets one insert
-- the re-creation of a completed creation: a key `ORIGINAL#recreate-N`, whose original exists, is
-- completed, updates nothing, and has the same payload, source and destination; the new action
-- updates nothing and waits on nothing. The function is 0016's otherwise.

SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_temp', true);

ALTER DOMAIN actionledger_event DROP CONSTRAINT actionledger_event_known;
ALTER DOMAIN actionledger_event
    ADD CONSTRAINT actionledger_event_known CHECK (VALUE IN (
        'submitted', 'payload_changed', 'claimed', 'completed', 'failed', 'retry_scheduled', 'outcome_unknown',
        'held', 'released', 'late_result', 'claim_recovered', 'lease_expired', 'lookup_found', 'lookup_not_found',
        'lookup_mismatch', 'retry', 'resolved_completed', 'resolved_not_written', 'cancelled', 'approved',
        'rejected', 'taken_over', 'assigned', 'late_results_acknowledged', 'looked_up', 'changed_at_destination',
        'recreated'));

CREATE OR REPLACE FUNCTION actionledger_guard_reviewer_insert()
RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $function$
BEGIN
    IF NEW.updates_key IS NULL AND actionledger_session_duties() & 1 = 0 AND NOT (
        NEW.key ~ '#recreate-[1-9][0-9]*$' AND NEW.after_key IS NULL
        AND EXISTS (
            SELECT 1 FROM actions original
            WHERE original.key = regexp_replace(NEW.key, '#recreate-[1-9][0-9]*$', '')
              AND original.state = 'completed' AND original.updates_key IS NULL
              AND original.payload = NEW.payload AND original.fingerprint = NEW.fingerprint
              AND original.source IS NOT DISTINCT FROM NEW.source
              AND original.destination IS NOT DISTINCT FROM NEW.destination)) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may record only the update action of an approved change or the re-creation '
            'of a completed action, not submit actions', current_user);
    END IF;
    RETURN NEW;
END;
$function$;
