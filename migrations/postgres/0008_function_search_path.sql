-- Every function of the ledger finds its tables in the ledger's schema, whoever calls it. A
-- trigger runs in the session that writes; a session other than actionledger's own (psql with the
-- default search_path, say) would otherwise resolve `actions` or `state_transitions` to another
-- schema's tables of those names, such as an application's, and the guards would judge by them.
-- This covers the functions defined so far; a later migration that defines a function gives it
-- the same `SET search_path` clause itself.
DO $$
DECLARE
    item RECORD;
BEGIN
    FOR item IN
        SELECT p.oid::regprocedure AS name FROM pg_proc p
        WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'actionledger\_%'
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', item.name, current_schema());
    END LOOP;
END;
$$;
