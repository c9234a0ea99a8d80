-- Two corrections to the guards of 0096 and 0099, for update actions (0097):
--
-- * actionledger_guard_delivery, written in full (0096's otherwise): a source that delivers again
--   the approved new version an update action `KEY#update-N` is still to perform records a
--   `duplicate` for KEY, under that version's fingerprint. The action keeps its own payload until
--   the update completes, so 0096 (a duplicate only of the action's own payload) refused the
--   delivery, and with it the source's whole submission. A duplicate may now also carry the
--   fingerprint of an update action of KEY that has not failed or been cancelled.
-- * actionledger_guard_reviewer_insert, written in full (0099's otherwise): "the proposal approved
--   in this transaction" is the proposal whose decision this transaction wrote (its row's xmin),
--   not one whose decision time is at least this transaction's: a decision time is written by the
--   login, and one dated in the future would otherwise pass in every later transaction.

SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_temp', true);

CREATE OR REPLACE FUNCTION actionledger_guard_delivery()
RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $function$
DECLARE
    transaction_ms bigint := floor(extract(epoch FROM transaction_timestamp()) * 1000)::bigint - 1;
BEGIN
    IF NEW.received_at >= transaction_ms
       AND (NEW.outcome NOT IN ('created', 'duplicate') OR EXISTS (
               SELECT 1 FROM actions a
               WHERE a.key = NEW.action_key AND a.fingerprint = NEW.fingerprint
                 AND (NEW.outcome = 'duplicate'
                      OR a.xmin = (pg_current_xact_id()::text::bigint % 4294967296)::text::xid))
           -- 0100: a duplicate of the approved new version an update action of this one is still
           -- to perform (the action keeps its own payload until that update completes).
           OR (NEW.outcome = 'duplicate' AND EXISTS (
               SELECT 1 FROM actions u
               WHERE u.updates_key = NEW.action_key AND u.fingerprint = NEW.fingerprint
                 AND u.state NOT IN ('failed', 'cancelled')))) THEN
        RETURN NEW;
    END IF;
    IF actionledger_session_duties() = 3 THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
        'actionledger: role %s may record a delivery of %s only as a submission does: at the database''s time, '
        'created only with the action it inserts, a duplicate only of the approved payload or of an update still to run', current_user,
        NEW.action_key);
END;
$function$;

CREATE OR REPLACE FUNCTION actionledger_guard_reviewer_insert()
RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $function$
DECLARE
    -- 0100: this transaction, as a row's xmin names the transaction that wrote it.
    this_xact xid := (pg_current_xact_id()::text::bigint % 4294967296)::text::xid;
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
        -- 0099, 0100: the update action an approval records carries the proposal approved in
        -- this transaction (the row its decision wrote), under the first number above its original's payload revision that is free
        -- (0097: the original keeps its payload until the update completes).
        IF NOT EXISTS (
            SELECT 1 FROM actions original
            JOIN proposals approved ON approved.action_key = original.key
            WHERE original.key = NEW.updates_key AND original.state = 'completed'
              AND NEW.key ~ ('#update-[1-9][0-9]*$')
              AND NEW.key = original.key || '#update-' || substring(NEW.key FROM '#update-([1-9][0-9]*)$')
              AND substring(NEW.key FROM '#update-([1-9][0-9]*)$')::bigint > original.payload_revision
              AND NEW.after_key IS NULL
              AND approved.decision = 'approved' AND approved.xmin = this_xact
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
