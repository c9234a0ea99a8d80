-- PostgreSQL's own statements for what SQLite answers without asking: the clock, the session's
-- role, and a lock where SQLite's single writer already serializes.

-- name: clock
-- The database's clock, in milliseconds, as column `now`: time is the server's, one clock for
-- every worker on every machine.
SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now;

-- name: purge_permission
-- Whether this session may purge, as column `may`, with its role's name as `role`. Only the
-- owner role purges (migration 0007): the function of migration 0004 answers for a ledger that
-- is not role-managed too.
SELECT actionledger_session_may('owner') AS may, CAST(current_user AS TEXT) AS role;

-- name: after_links_lock
-- A transaction-scoped advisory lock, one number for the whole ledger: two new actions that would
-- wait for each other must not each miss the other's uncommitted row (see after_links).
SELECT pg_advisory_xact_lock(7429916350244813907);

-- name: serving_duties
-- Whether this session's login is a member of both the worker's and the reviewer's roles and does
-- not own the tables, as column `split`: then `serve` acts as each role on a pool of its own
-- (migration 0102). False on a ledger that is not role-managed.
SELECT CASE WHEN to_regrole('actionledger_worker') IS NULL OR to_regrole('actionledger_reviewer') IS NULL THEN false
            ELSE pg_has_role(session_user, 'actionledger_worker', 'MEMBER')
                 AND pg_has_role(session_user, 'actionledger_reviewer', 'MEMBER')
                 AND NOT pg_has_role(session_user, (SELECT relowner FROM pg_class WHERE oid = 'actions'::regclass),
                                     'MEMBER')
       END AS split;

-- name: grant_serve
-- Grants the login $1 both roles serve acts as, and lists the people $2 (a text array) it signs
-- as: migration 0102's function, safe to run again.
SELECT actionledger_grant_serve($1, $2);
