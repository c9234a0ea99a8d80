-- Inserts held to what the commands insert, as 0095 held updates.
--
-- A worker's login inserting an action was checked only for "pending with ownership version
-- 0": it could write a creation time in the past, a destination id, the mark that a request may
-- have written, counts of attempts and late results, a window, a backoff, an assignee, and skip
-- the `submitted` entry. A lookup could be recorded with any verdict for any action, a delivery
-- dated in the past, and an audit entry could carry any ownership version and revision.
--
-- What changes here, for every login but the owner's (the owner keeps full power):
--
-- * actionledger_guard_action (written in full; 0001's otherwise): a new action carries every
--   column a submission (or a reviewer's update or re-creation) leaves at its initial value at
--   that value, its fingerprint is the SHA-256 of its payload, and it is created at the
--   database's time of its transaction (or later), with `updated_at` the same.
-- * actionledger_guard_reviewer_insert (written in full; 0094's otherwise): an update action is
--   `KEY#update-N` of a completed action, with that action's payload, payload revision N, source,
--   source version, destination and destination id.
-- * actionledger_check_creation_recorded (new): a new action comes with its `submitted` entry of
--   the same transaction (none before it, pending, ownership version 0, revision 1).
-- * actionledger_check_entry_matches (written in full; 0095's otherwise): an entry carries the
--   action's ownership version and revision as the change left them: never past the action's,
--   never before the entry before it, and the last entry of a transaction has the ownership
--   version the action has at the commit.
-- * actionledger_guard_delivery (new): a delivery is dated at the database's time, a `created`
--   one is of an action this transaction inserted, a `duplicate` one has its action's fingerprint.
-- * actionledger_check_lookup_recorded (new): a lookup is dated at the database's time, a
--   person's lookup names the person of the login, a lookup that got no answer (`failed`) is of
--   an unknown action and records nothing found, and any other verdict comes with the lookup's
--   entry by the same actor in the same transaction.
-- * actionledger_guard_proposal_insert (new): a proposal carries the fingerprint of its payload
--   and is received at the database's time.

SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_temp', true);

-- Everything a new action starts with. The check runs first, with no call: a login's duties are
-- asked only of an insert that departs from it, so that a submission pays no more than before.
CREATE OR REPLACE FUNCTION actionledger_guard_action()
RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $function$
DECLARE
    -- The database's time of this transaction, in the ledger's milliseconds (one millisecond
    -- for the rounding of either, as 0095).
    transaction_ms bigint := floor(extract(epoch FROM transaction_timestamp()) * 1000)::bigint - 1;
BEGIN
    IF NEW.state <> 'pending' OR NEW.ownership_version <> 0 THEN
        RAISE EXCEPTION 'actionledger: a new action starts pending with ownership version 0';
    END IF;
    IF NEW.revision = 1 AND NEW.attempts = 0 AND NEW.attempts_in_round = 0 AND NEW.payload_revision = 1
       AND NEW.late_results = 0 AND NOT NEW.old_worker_may_act AND NOT NEW.may_have_written
       AND NEW.proposed_payload IS NULL AND NEW.proposed_fingerprint IS NULL
       AND NEW.proposed_source_version IS NULL AND NEW.resume_state IS NULL AND NEW.claimed_by IS NULL
       AND NEW.lease_expires_at IS NULL AND NEW.not_before IS NULL AND NEW.assignee IS NULL
       AND NEW.destination_id IS NULL AND NEW.first_sent_at IS NULL AND NEW.last_error IS NULL
       AND NEW.window_started_at IS NULL AND NEW.idempotency_key IS NULL
       AND NEW.created_at >= transaction_ms AND NEW.updated_at = NEW.created_at
       AND NEW.fingerprint = encode(sha256(convert_to(NEW.payload, 'UTF8')), 'hex') THEN
        RETURN NEW;
    END IF;
    IF actionledger_session_duties() = 3 THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
        'actionledger: role %s may insert %s only as a submission records it: pending, never claimed, sent or '
        'attempted, with nothing proposed, assigned or found, the fingerprint of its payload, and created at the '
        'database''s time', current_user, NEW.key);
END;
$function$;

CREATE OR REPLACE FUNCTION actionledger_guard_reviewer_insert()
RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $function$
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
        -- 0096: the update action an approval records carries its original as it was approved.
        IF NOT EXISTS (
            SELECT 1 FROM actions original
            WHERE original.key = NEW.updates_key AND original.state = 'completed'
              AND NEW.key = original.key || '#update-' || original.payload_revision
              AND NEW.after_key IS NULL
              AND original.payload = NEW.payload AND original.fingerprint = NEW.fingerprint
              AND original.source IS NOT DISTINCT FROM NEW.source
              AND original.source_version IS NOT DISTINCT FROM NEW.source_version
              AND original.destination IS NOT DISTINCT FROM NEW.destination
              AND original.destination_id IS NOT DISTINCT FROM NEW.updates_destination_id) THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
                'actionledger: role %s may record an update action only as KEY#update-N of a completed action, with '
                'its approved payload, source, destination and destination id', current_user);
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

-- A new action is recorded as submitted, by whoever inserts it, in the same transaction. Checked
-- at the commit: the ledger writes the entry after the row.
CREATE OR REPLACE FUNCTION actionledger_check_creation_recorded()
RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $function$
BEGIN
    IF actionledger_session_duties() = 3 THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM audit_trail
        WHERE action_key = NEW.key AND xmin = (pg_current_xact_id()::text::bigint % 4294967296)::text::xid
          AND event = 'submitted' AND from_state IS NULL AND to_state = 'pending'
          AND ownership_version = 0 AND revision = 1
    ) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s inserted %s without its submitted entry in the audit trail: every new action is '
            'recorded in the same transaction', current_user, NEW.key);
    END IF;
    RETURN NULL;
END;
$function$;

CREATE CONSTRAINT TRIGGER actions_creation_recorded AFTER INSERT ON actions
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION actionledger_check_creation_recorded();

-- An entry says what happened to its action: a change the transition table allows (or none),
-- the state the action is in at the commit, unless a later entry of the same transaction moved
-- it on, and (0096) the ownership version and revision the change left it with.
CREATE OR REPLACE FUNCTION actionledger_check_entry_matches()
RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $function$
DECLARE
    this_xact xid;
    last_of_transaction BOOLEAN;
    action_now actions%ROWTYPE;
    entry_before audit_trail%ROWTYPE;
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
    last_of_transaction := NOT EXISTS (
        SELECT 1 FROM audit_trail later
        WHERE later.action_key = NEW.action_key AND later.id > NEW.id AND later.xmin = this_xact);
    SELECT * INTO action_now FROM actions a WHERE a.key = NEW.action_key;
    IF last_of_transaction AND action_now.state IS DISTINCT FROM NEW.to_state THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may not record %s %s to %s: the action is not %s',
            current_user, NEW.event, NEW.action_key, NEW.to_state, NEW.to_state);
    END IF;
    -- 0096: the versions the change left. A later write of the same transaction that needs no
    -- entry (an attempt counted after a claim) may move the revision on, never the owner.
    SELECT * INTO entry_before FROM audit_trail earlier
    WHERE earlier.action_key = NEW.action_key AND earlier.id < NEW.id
    ORDER BY earlier.id DESC LIMIT 1;
    IF NEW.ownership_version > action_now.ownership_version OR NEW.revision > action_now.revision
       OR (last_of_transaction AND NEW.ownership_version <> action_now.ownership_version)
       OR NEW.ownership_version < entry_before.ownership_version OR NEW.revision < entry_before.revision THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may not record %s of %s under ownership version %s and revision %s: an entry '
            'carries the ownership version and revision the action has after the change', current_user, NEW.event,
            NEW.action_key, NEW.ownership_version, NEW.revision);
    END IF;
    RETURN NULL;
END;
$function$;

-- A delivery is the record of a submission as it arrives: dated now, and true to its action.
-- Deliveries are a worker's alone (a reviewer has no grant on them).
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
                      OR a.xmin = (pg_current_xact_id()::text::bigint % 4294967296)::text::xid))) THEN
        RETURN NEW;
    END IF;
    IF actionledger_session_duties() = 3 THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
        'actionledger: role %s may record a delivery of %s only as a submission does: at the database''s time, '
        'created only with the action it inserts, a duplicate only of the approved payload', current_user,
        NEW.action_key);
END;
$function$;

CREATE TRIGGER deliveries_as_submitted BEFORE INSERT ON deliveries
    FOR EACH ROW EXECUTE FUNCTION actionledger_guard_delivery();

-- A lookup is evidence of what one actor found now. One that settles or is kept for an action
-- comes with its entry (lookup_found, lookup_not_found, lookup_mismatch, looked_up) by the same
-- actor in the same transaction; only a lookup that got no answer is kept alone, and only for
-- an unknown action. Checked at the commit: the ledger writes the entry after the lookup.
CREATE OR REPLACE FUNCTION actionledger_check_lookup_recorded()
RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $function$
DECLARE
    duties integer := actionledger_session_duties();
BEGIN
    IF duties = 3 THEN
        RETURN NULL;
    END IF;
    IF NEW.at < floor(extract(epoch FROM transaction_timestamp()) * 1000)::bigint - 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may date a lookup only at the database''s time of it', current_user);
    END IF;
    IF duties & 1 = 0 AND NOT actionledger_login_is(NEW.actor) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: login %s may not record a lookup as %s: a person''s lookup names the person of the login',
            session_user, NEW.actor);
    END IF;
    IF NEW.verdict = 'failed' THEN
        IF NEW.destination_id IS NOT NULL OR NEW.records <> 0 OR NOT EXISTS (
            SELECT 1 FROM actions a WHERE a.key = NEW.action_key AND a.state = 'unknown') THEN
            RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
                'actionledger: role %s may keep a lookup that got no answer only for an unknown action, and with '
                'nothing found', current_user);
        END IF;
        RETURN NULL;
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM audit_trail
        WHERE action_key = NEW.action_key AND actor = NEW.actor
          AND event IN ('lookup_found', 'lookup_not_found', 'lookup_mismatch', 'looked_up')
          AND xmin = (pg_current_xact_id()::text::bigint % 4294967296)::text::xid
    ) THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s recorded a lookup of %s without %s''s lookup entry in the audit trail: a lookup '
            'is kept by the command that settles or records it', current_user, NEW.action_key, NEW.actor);
    END IF;
    RETURN NULL;
END;
$function$;

CREATE CONSTRAINT TRIGGER lookups_recorded AFTER INSERT ON lookups
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION actionledger_check_lookup_recorded();

-- A proposal is a submitted payload as it arrives: its fingerprint is the SHA-256 of it, and it
-- is received now. Called only for a row that departs from that, so that a submission pays no
-- call for it.
CREATE OR REPLACE FUNCTION actionledger_guard_proposal_insert()
RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $function$
BEGIN
    IF actionledger_session_duties() = 3 THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
        'actionledger: role %s may keep a proposal of %s only as a submission does: with the fingerprint of its '
        'payload, received at the database''s time', current_user, NEW.action_key);
END;
$function$;

CREATE TRIGGER proposals_as_submitted BEFORE INSERT ON proposals
    FOR EACH ROW WHEN (NEW.fingerprint <> encode(sha256(convert_to(NEW.payload, 'UTF8')), 'hex')
                       OR NEW.received_at < floor(extract(epoch FROM transaction_timestamp()) * 1000)::bigint - 1)
    EXECUTE FUNCTION actionledger_guard_proposal_insert();

-- The new functions belong to actionledger_owner like the others, where this session may hand
-- them over.
DO $$
BEGIN
    IF to_regrole('actionledger_owner') IS NOT NULL AND pg_has_role('actionledger_owner', 'MEMBER') THEN
        ALTER FUNCTION actionledger_check_creation_recorded() OWNER TO actionledger_owner;
        ALTER FUNCTION actionledger_guard_delivery() OWNER TO actionledger_owner;
        ALTER FUNCTION actionledger_check_lookup_recorded() OWNER TO actionledger_owner;
        ALTER FUNCTION actionledger_guard_proposal_insert() OWNER TO actionledger_owner;
    END IF;
END;
$$;
