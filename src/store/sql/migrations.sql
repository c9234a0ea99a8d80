-- Where the ledger's schema stands, as sqlx records it in `_sqlx_migrations`: read before
-- migrating, so that a build older than the ledger refuses to write, and `migrate --status` can
-- say where the ledger stands without changing it. Then PostgreSQL's move of a ledger made before
-- ledgers had a schema of their own out of `public`.

-- name: postgres_has_migrations
-- PostgreSQL: whether the migrations table exists in the ledger's schema (the session's
-- `search_path`, which holds the ledger's schema only).
SELECT to_regclass('_sqlx_migrations') IS NOT NULL;

-- name: sqlite_has_migrations
-- SQLite: whether the migrations table exists in the ledger file.
SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations');

-- name: applied_migrations
-- The migrations applied to the ledger, oldest first, with how long each took (nanoseconds, as
-- sqlx records it).
SELECT version, description, checksum, execution_time
FROM _sqlx_migrations
WHERE success
ORDER BY version;

-- name: schema_exists
-- PostgreSQL: whether a schema exists.
-- $1 name: the schema's name
SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1);

-- name: ledger_in_public
-- PostgreSQL: whether `public` holds a ledger made before ledgers had a schema of their own: its
-- `actions` table, the guard function only this ledger defines, and a migrations table. An
-- application's own `actions` table or sqlx migrations alone do not look like one.
SELECT to_regclass('public.actions') IS NOT NULL
   AND to_regclass('public._sqlx_migrations') IS NOT NULL
   AND EXISTS (SELECT 1 FROM pg_proc
               WHERE pronamespace = 'public'::regnamespace AND proname = 'actionledger_guard_action');

-- name: public_migrations
-- PostgreSQL: the rows of `public._sqlx_migrations`: the ledger's own are moved with it, any
-- others belong to the application that shares the schema.
SELECT version, description, checksum
FROM public._sqlx_migrations;

-- name: public_functions
-- PostgreSQL: the signatures (`public.name(args)`) of the named functions that `public` holds.
-- $1 names: the functions' names (an array)
SELECT p.oid::regprocedure::text
FROM pg_proc p
WHERE p.pronamespace = 'public'::regnamespace AND p.proname = ANY($1)
ORDER BY 1;

-- name: public_tables
-- PostgreSQL: the named tables that `public` holds.
-- $1 names: the tables' names (an array)
SELECT c.relname::text
FROM pg_class c
WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' AND c.relname = ANY($1)
ORDER BY 1;
