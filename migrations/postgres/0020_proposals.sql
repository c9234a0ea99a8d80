-- Every proposal kept (docs/RULES.md, rule 9): each distinct payload proposed for an existing key
-- is a row of its own, until a person approves or rejects it; the audit trail says who and why.
-- A repeat of the same proposal (same key and fingerprint) is the same row. The action's
-- proposed_* columns keep naming the latest pending proposal, which the claim and the state
-- rules read.
--
-- decision: NULL while pending, then 'approved' or 'rejected'; a rejected proposal submitted
-- again is pending again.
CREATE TABLE proposals (
    id             BIGSERIAL PRIMARY KEY,
    action_key     TEXT   NOT NULL REFERENCES actions (key),
    fingerprint    TEXT   NOT NULL,
    payload        TEXT   NOT NULL,
    source         TEXT,
    event_id       TEXT,
    source_version BIGINT,
    received_at    BIGINT NOT NULL,
    decision       TEXT   CHECK (decision IN ('approved', 'rejected')),
    decided_by     TEXT,
    decided_at     BIGINT,
    UNIQUE (action_key, fingerprint),
    CHECK ((decision IS NULL) = (decided_by IS NULL) AND (decision IS NULL) = (decided_at IS NULL))
);
CREATE INDEX proposals_pending ON proposals (action_key, id) WHERE decision IS NULL;

-- The proposals waiting when this migration runs: one each, kept by the action until now.
INSERT INTO proposals (action_key, fingerprint, payload, source_version, received_at)
SELECT key, proposed_fingerprint, proposed_payload, proposed_source_version, updated_at
  FROM actions WHERE proposed_payload IS NOT NULL;

-- Proposals are written by automation (a submission) and settled by people. A worker inserts a
-- pending proposal, or makes a rejected one pending again when it is submitted again; it never
-- decides one. A reviewer decides a pending proposal, in its own name, and changes nothing else.
CREATE FUNCTION actionledger_guard_proposal() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
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
        RETURN NEW;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
        'actionledger: role %s may not change this proposal: only a submission proposes and only a person''s command '
        'decides', current_user);
END;
$$;

CREATE TRIGGER proposals_guard BEFORE INSERT OR UPDATE ON proposals
    FOR EACH ROW EXECUTE FUNCTION actionledger_guard_proposal();

-- Grants like those of migration 0004, for the new table; it and its functions belong to
-- actionledger_owner like the rest. Safe to run again: after creating the roles by hand, an
-- operator runs `SELECT actionledger_grant_proposals();` as the schema owner.
CREATE FUNCTION actionledger_grant_proposals() RETURNS void LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
DECLARE
    item RECORD;
BEGIN
    IF (SELECT count(*) FROM pg_roles WHERE rolname IN
            ('actionledger_owner', 'actionledger_worker', 'actionledger_reviewer', 'actionledger_viewer')) < 4 THEN
        RETURN;
    END IF;
    GRANT SELECT ON proposals TO actionledger_worker, actionledger_reviewer, actionledger_viewer;
    GRANT INSERT, UPDATE ON proposals TO actionledger_worker;
    GRANT UPDATE (decision, decided_by, decided_at) ON proposals TO actionledger_reviewer;
    GRANT USAGE ON SEQUENCE proposals_id_seq TO actionledger_worker;
    BEGIN
        ALTER TABLE proposals OWNER TO actionledger_owner;
        FOR item IN
            SELECT p.oid::regprocedure AS name FROM pg_proc p
            WHERE p.pronamespace = current_schema()::regnamespace
              AND p.proname IN ('actionledger_guard_proposal', 'actionledger_grant_proposals')
        LOOP
            EXECUTE format('ALTER FUNCTION %s OWNER TO actionledger_owner', item.name);
        END LOOP;
    EXCEPTION
        WHEN insufficient_privilege THEN
            RAISE WARNING 'actionledger: % may not hand the proposals table to actionledger_owner; it stays with %',
                current_user, current_user;
    END;
END;
$$;

SELECT actionledger_grant_proposals();
