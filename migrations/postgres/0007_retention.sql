-- Retention (rule 7): purge runs, and which actions each one purged.
--
-- A purged action keeps its row in `actions` as its tombstone: key, fingerprint, final state,
-- destination id and settled time (`updated_at`) stay, so a replay of the key is still recognised;
-- the approved payload is replaced by JSON null and the last error emptied. Its deliveries,
-- attempts and lookups are deleted. The audit trail is kept in full. Only the owner role purges:
-- the other roles may read these tables, and have no DELETE anywhere.

-- One row per purge run, with what it removed. Append-only, like the audit trail.
CREATE TABLE purges (
    id             BIGSERIAL PRIMARY KEY,
    at             BIGINT NOT NULL,
    owner          TEXT   NOT NULL,
    reason         TEXT   NOT NULL,
    older_than_ms  BIGINT NOT NULL CHECK (older_than_ms > 0),
    -- Actions settled before this time (database time of the run minus older_than_ms) were purged.
    settled_before BIGINT NOT NULL,
    -- The final states purged, comma-separated.
    states         TEXT   NOT NULL,
    actions        BIGINT NOT NULL CHECK (actions >= 0),
    deliveries     BIGINT NOT NULL CHECK (deliveries >= 0),
    attempts       BIGINT NOT NULL CHECK (attempts >= 0),
    lookups        BIGINT NOT NULL CHECK (lookups >= 0)
);

-- The tombstone marker: which run purged each purged action. Append-only.
CREATE TABLE purged_actions (
    action_key TEXT   PRIMARY KEY REFERENCES actions (key),
    purge_id   BIGINT NOT NULL REFERENCES purges (id)
);
CREATE INDEX purged_actions_run ON purged_actions (purge_id);

CREATE FUNCTION actionledger_refuse_purge_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'actionledger: the purge record is append-only and a purged action stays purged (% refused)', TG_OP;
END;
$$;

CREATE TRIGGER purges_append_only BEFORE UPDATE OR DELETE ON purges
    FOR EACH ROW EXECUTE FUNCTION actionledger_refuse_purge_change();
CREATE TRIGGER purges_no_truncate BEFORE TRUNCATE ON purges
    FOR EACH STATEMENT EXECUTE FUNCTION actionledger_refuse_purge_change();
CREATE TRIGGER purged_actions_append_only BEFORE UPDATE OR DELETE ON purged_actions
    FOR EACH ROW EXECUTE FUNCTION actionledger_refuse_purge_change();
CREATE TRIGGER purged_actions_no_truncate BEFORE TRUNCATE ON purged_actions
    FOR EACH STATEMENT EXECUTE FUNCTION actionledger_refuse_purge_change();

-- A tombstone never changes: a purged key is never claimed, retried, resolved or given a new
-- payload again. It reads purged_actions with its owner's rights, so that a role granted by hand
-- before this migration's grants still updates actions.
CREATE FUNCTION actionledger_guard_purged_action() RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM purged_actions WHERE action_key = OLD.key) THEN
        RAISE EXCEPTION 'actionledger: a purged action never changes (%)', OLD.key;
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER actions_purged_never_change BEFORE UPDATE ON actions
    FOR EACH ROW EXECUTE FUNCTION actionledger_guard_purged_action();

-- Where the ledger is role-managed (0004_roles.sql): every role reads the purge record, only
-- actionledger_owner writes it, and the new objects belong to actionledger_owner like the rest.
-- Safe to run again: an operator who creates the roles by hand runs
-- `SELECT actionledger_grant_roles(); SELECT actionledger_grant_retention();` as the schema owner.
CREATE FUNCTION actionledger_grant_retention() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    item RECORD;
BEGIN
    IF (SELECT count(*) FROM pg_roles WHERE rolname IN
            ('actionledger_owner', 'actionledger_worker', 'actionledger_reviewer', 'actionledger_viewer')) < 4 THEN
        RETURN;
    END IF;
    GRANT SELECT ON purges, purged_actions TO actionledger_worker, actionledger_reviewer, actionledger_viewer;
    BEGIN
        ALTER TABLE purges OWNER TO actionledger_owner;
        ALTER TABLE purged_actions OWNER TO actionledger_owner;
        FOR item IN
            SELECT p.oid::regprocedure AS name FROM pg_proc p
            WHERE p.pronamespace = current_schema()::regnamespace
              AND p.proname IN ('actionledger_refuse_purge_change', 'actionledger_guard_purged_action',
                                'actionledger_grant_retention')
        LOOP
            EXECUTE format('ALTER FUNCTION %s OWNER TO actionledger_owner', item.name);
        END LOOP;
    EXCEPTION
        WHEN insufficient_privilege THEN
            RAISE WARNING 'actionledger: % may not hand the purge tables to actionledger_owner; they stay with %',
                current_user, current_user;
    END;
END;
$$;

SELECT actionledger_grant_retention();
