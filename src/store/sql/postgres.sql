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
