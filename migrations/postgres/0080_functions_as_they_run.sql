-- The ledger's functions as they run (migrations/README.md, "Rules for a new migration").
--
-- Migration 0012 moved the checks on a change to an action into actionledger_guard_action_update()
-- and its own trigger, and dropped the triggers of the functions it replaced, not the functions:
--   * actionledger_guard_columns() (0011) and actionledger_guard_late_facts() (0005) are called by
--     no trigger; their checks run in actionledger_guard_action_update();
--   * actionledger_session_unrestricted() (0011) was called by actionledger_guard_columns() alone;
--   * actionledger_guard_action() kept its checks on updates, but its trigger, actions_guard,
--     fires before an insert only.
-- Migration 0012's actionledger_grant_roles() grants everything that actionledger_grant_updates()
-- (0006) and actionledger_grant_retention() (0007) grant and hands over what they hand over; it is
-- the one an operator who creates the roles by hand runs (README, "Roles: least privilege"), and
-- nothing calls the other two.

DROP FUNCTION actionledger_guard_columns();
DROP FUNCTION actionledger_guard_late_facts();
DROP FUNCTION actionledger_session_unrestricted();
DROP FUNCTION actionledger_grant_updates();
DROP FUNCTION actionledger_grant_retention();

-- The insert check of 0001, alone. CREATE OR REPLACE keeps the function's owner and privileges
-- and replaces its settings with those given here: the search_path that 0008 gave it, the
-- ledger's schema then pg_temp, taken FROM CURRENT since the schema's name is the operator's
-- choice (set for this migration's transaction only).
SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_temp', true);

CREATE OR REPLACE FUNCTION actionledger_guard_action() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
BEGIN
    IF NEW.state <> 'pending' OR NEW.ownership_version <> 0 THEN
        RAISE EXCEPTION 'actionledger: a new action starts pending with ownership version 0';
    END IF;
    RETURN NEW;
END;
$$;
