-- Reviewed updates and derived idempotency keys (docs/RULES.md, "Changed payloads").
--
-- payload_revision counts the approved payloads of an action, from 1; every approval adds one.
-- idempotency_key is the key requests carry once an approval changed the payload after a request
-- may have been sent (KEY#rev-N); NULL means the action key itself.
-- updates_key and updates_destination_id name, on an update action (KEY#update-N), the completed
-- action it updates and that action's record at the destination (a plain reference, not a foreign
-- key, so that retention may settle the two actions' rows independently).
ALTER TABLE actions
    ADD COLUMN payload_revision       BIGINT NOT NULL DEFAULT 1,
    ADD COLUMN idempotency_key        TEXT,
    ADD COLUMN updates_key            TEXT,
    ADD COLUMN updates_destination_id TEXT;

-- Which idempotency key each attempt's request carried.
ALTER TABLE attempts ADD COLUMN idempotency_key TEXT;

-- The conflict pane also lists actions of any state whose proposed payload awaits a decision.
CREATE INDEX actions_proposed ON actions (id) WHERE proposed_payload IS NOT NULL;

-- Approving a changed payload for a completed action records the update action: a reviewer
-- inserts that one new pending row (the insert guards below and in 0004_roles.sql hold it to an
-- update action, pending, ownership version 0), and nothing else. Safe to run again: an operator
-- who creates the roles by hand runs `SELECT actionledger_grant_roles(); SELECT
-- actionledger_grant_updates();` as the schema owner.
CREATE FUNCTION actionledger_grant_updates() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'actionledger_reviewer') THEN
        RETURN;
    END IF;
    GRANT INSERT ON actions TO actionledger_reviewer;
    GRANT USAGE ON SEQUENCE actions_id_seq TO actionledger_reviewer;
END;
$$;

SELECT actionledger_grant_updates();

-- A session that may review but not work inserts only update actions: everything else a reviewer
-- might insert into actions is a submission, which is a worker's (or a source's) to make.
CREATE FUNCTION actionledger_guard_reviewer_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.updates_key IS NULL AND NOT actionledger_session_may('worker') THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'actionledger: role %s may record only the update action of an approved change, not submit actions',
            current_user);
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER actions_reviewer_inserts_only_updates BEFORE INSERT ON actions
    FOR EACH ROW EXECUTE FUNCTION actionledger_guard_reviewer_insert();
