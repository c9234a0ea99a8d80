//! The PostgreSQL store: the shared ledger for many workers and reviewers on many machines.

use super::backend::{Backend, Dialect, Statement};
use super::migration::{AppliedMigration, ExportedMigration, SchemaStatus};
use super::pg_schema;
use super::pg_tls;
use super::sql_store::SqlStore;
use super::statements;
use super::url::redact_url;
use super::wake::{RunnableSignal, Wakeups};
use super::{Clock, StoreError};
use crate::domain::text::escape_untrusted;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArguments, PgConnectOptions, PgConnection, PgListener, PgPoolOptions, PgRow};
use sqlx::{Arguments as _, Postgres};
use std::time::Duration;

/// A ledger in a PostgreSQL database. Rows read for a change are locked `FOR UPDATE`; claims skip
/// rows that another worker is claiming at the same moment.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: sqlx::PgPool,
    clock: Clock,
    /// The schema the ledger lives in, which every pooled connection's `search_path` holds.
    schema: String,
    runnable: RunnableSignal,
}

impl SqlStore for PostgresStore {
    type Backend = Postgres;

    fn connections(&self) -> &sqlx::PgPool {
        &self.pool
    }

    fn clock(&self) -> &Clock {
        &self.clock
    }

    fn runnable(&self) -> &RunnableSignal {
        &self.runnable
    }

    async fn schema_status(&self) -> Result<SchemaStatus, StoreError> {
        let ledger = format!("schema {}", self.schema);
        read_status(&self.pool, &self.schema, ledger, &sqlx::migrate!("migrations/postgres")).await
    }

    async fn access_report(&self) -> Result<Option<String>, StoreError> {
        describe_access(&self.pool).await.map(Some)
    }

    async fn listen_for_changes(&self) -> Result<Option<tokio::sync::mpsc::UnboundedReceiver<()>>, StoreError> {
        let mut listener = sqlx::postgres::PgListener::connect_with(&self.pool).await?;
        listener.listen(CHANGES_CHANNEL).await?;
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            // The listener reconnects by itself after a lost connection; a change may have been
            // missed meanwhile, so every wake-up (and every error) is passed on as a change.
            loop {
                let woke = listener.recv().await;
                if sender.send(()).is_err() {
                    break;
                }
                if woke.is_err() {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        });
        Ok(Some(receiver))
    }

    async fn listen_for_runnable(&self) -> Wakeups {
        let options = self.pool.connect_options();
        // The first LISTEN before the worker's first claim, so that nothing submitted after that
        // claim goes unheard.
        let listener = match listen_runnable(&options).await {
            Ok(listener) => Some(listener),
            Err(error) => {
                warn_not_listening(&error);
                None
            }
        };
        let (relay, database) = tokio::sync::watch::channel(());
        tokio::spawn(relay_runnable(RunnableRelay { options, schema: self.schema.clone(), relay }, listener));
        Wakeups::with_remote(&self.runnable, database)
    }
}

impl Backend for Postgres {
    const DIALECT: Dialect = statements::POSTGRES;

    fn add_text(arguments: &mut PgArguments, value: Option<&str>) -> Result<(), BoxDynError> {
        arguments.add(value)
    }

    fn add_int(arguments: &mut PgArguments, value: Option<i64>) -> Result<(), BoxDynError> {
        arguments.add(value)
    }

    fn add_flag(arguments: &mut PgArguments, value: bool) -> Result<(), BoxDynError> {
        arguments.add(value)
    }

    async fn fetch_all(connection: &mut PgConnection, statement: Statement<Self>) -> Result<Vec<PgRow>, sqlx::Error> {
        let (sql, arguments) = statement.into_parts()?;
        sqlx::query_with(sql, arguments).fetch_all(connection).await
    }

    async fn fetch_optional(
        connection: &mut PgConnection,
        statement: Statement<Self>,
    ) -> Result<Option<PgRow>, sqlx::Error> {
        let (sql, arguments) = statement.into_parts()?;
        sqlx::query_with(sql, arguments).fetch_optional(connection).await
    }

    async fn execute(connection: &mut PgConnection, statement: Statement<Self>) -> Result<u64, sqlx::Error> {
        let (sql, arguments) = statement.into_parts()?;
        Ok(sqlx::query_with(sql, arguments).execute(connection).await?.rows_affected())
    }
}

/// Reads where the ledger's schema stands, changing nothing.
async fn read_status(
    pool: &sqlx::PgPool,
    schema: &str,
    ledger: String,
    migrator: &sqlx::migrate::Migrator,
) -> Result<SchemaStatus, StoreError> {
    let recorded: bool = sqlx::query_scalar(statements::POSTGRES_HAS_MIGRATIONS).fetch_one(pool).await?;
    let applied = if recorded {
        let rows: Vec<(i64, String, Vec<u8>, i64)> =
            sqlx::query_as(statements::APPLIED_MIGRATIONS).fetch_all(pool).await?;
        Some(AppliedMigration::from_rows(rows))
    } else {
        None
    };
    let mut status = SchemaStatus::compare(ledger, migrator, applied);
    let schema_exists: bool = sqlx::query_scalar(statements::SCHEMA_EXISTS).bind(schema).fetch_one(pool).await?;
    if !schema_exists {
        status.preamble.push(format!("CREATE SCHEMA IF NOT EXISTS {schema};"));
    }
    status.preamble.push(format!("SET search_path TO {schema};"));
    if !status.exists && schema != "public" {
        status.in_public = sqlx::query_scalar(statements::LEDGER_IN_PUBLIC).fetch_one(pool).await?;
    }
    Ok(status)
}

/// Describes the roles of migration 0004 as they stand, and what this session may do.
async fn describe_access(pool: &sqlx::PgPool) -> Result<String, StoreError> {
    let (session, owner): (String, String) = sqlx::query_as(
        "SELECT current_user::text, pg_get_userbyid(relowner)::text FROM pg_class WHERE oid = 'actions'::regclass",
    )
    .fetch_one(pool)
    .await?;
    let present: Vec<String> =
        sqlx::query_scalar("SELECT rolname::text FROM pg_roles WHERE rolname LIKE 'actionledger\\_%' ORDER BY rolname")
            .fetch_all(pool)
            .await?;
    let missing: Vec<&str> = ROLES.iter().copied().filter(|role| !present.iter().any(|p| p == role)).collect();
    if !missing.is_empty() {
        return Ok(format!(
            "not role-managed: the roles {} do not exist, so table privileges alone decide who may do what; \
             create them (NOLOGIN) as a role with CREATEROLE, then run `SELECT actionledger_grant_roles();` \
             as {owner}",
            missing.join(", ")
        ));
    }
    let (may_work, may_review): (bool, bool) =
        sqlx::query_as("SELECT actionledger_session_may('worker'), actionledger_session_may('reviewer')")
            .fetch_one(pool)
            .await?;
    let duties = match (may_work, may_review) {
        (true, true) => "may do everything (schema owner)",
        (true, false) => "may do a worker's work",
        (false, true) => "may run people's commands",
        (false, false) => "may read only",
    };
    Ok(format!("tables owned by {owner}; roles {} in place; {session} {duties}", ROLES.join(", ")))
}

/// The roles migration 0004 creates.
pub const ROLES: [&str; 4] =
    ["actionledger_owner", "actionledger_reviewer", "actionledger_viewer", "actionledger_worker"];

/// How long the server lets a session sit inside a transaction without sending anything before it
/// ends the session and rolls back. Every ledger transaction is a few statements with nothing
/// slow between them, so a session idle this long belongs to a client that stopped (a paused VM,
/// SIGSTOP): without a limit, the rows it locked would block their recovery until it resumed.
pub const IDLE_IN_TRANSACTION_LIMIT: &str = "30s";

/// The channel migration 0003 notifies on.
const CHANGES_CHANNEL: &str = "actionledger_changes";

/// The channel migration 0101 notifies on when work becomes claimable, with the ledger's schema
/// as the payload.
const RUNNABLE_CHANNEL: &str = "actionledger_runnable";

/// The longest pause between two tries to LISTEN again after the connection was lost.
const RELISTEN_AT_MOST: Duration = Duration::from_secs(30);

/// A LISTEN on [`RUNNABLE_CHANNEL`], on a connection of its own outside the store's pool: a
/// worker holds it for as long as it runs, and its pool's connections are for its work.
async fn listen_runnable(options: &PgConnectOptions) -> Result<PgListener, sqlx::Error> {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .max_lifetime(None)
        .idle_timeout(None)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(options.clone())
        .await?;
    let mut listener = PgListener::connect_with(&pool).await?;
    // A lost connection is made again here, by a new listener, rather than inside `try_recv`:
    // only then is it known when the LISTEN is back in place.
    listener.eager_reconnect(false);
    listener.listen(RUNNABLE_CHANNEL).await?;
    Ok(listener)
}

fn warn_not_listening(error: &sqlx::Error) {
    let error = escape_untrusted(&super::server_words(error));
    tracing::warn!(
        %error,
        "cannot LISTEN on {RUNNABLE_CHANNEL}: {error}; idle workers find new work by polling until it can, and it \
         keeps trying"
    );
}

/// Where the database's wake-ups go: the worker's [`Wakeups`], and which of the channel's
/// notifications are for this ledger.
struct RunnableRelay {
    options: std::sync::Arc<PgConnectOptions>,
    schema: String,
    relay: tokio::sync::watch::Sender<()>,
}

/// Relays the notifications for this ledger's schema to the worker until its [`Wakeups`] is
/// dropped. A lost connection is listened on again, at once and then at growing intervals, and
/// the worker woken as soon as the LISTEN is back, since a notification may have been missed
/// meanwhile. Warns once per outage that lasts beyond the first try.
async fn relay_runnable(relay: RunnableRelay, mut listener: Option<PgListener>) {
    let RunnableRelay { options, schema, relay } = relay;
    // Set while no LISTEN is in place: how long to wait before the next try.
    let mut pause = listener.is_none().then_some(Duration::from_secs(1));
    let mut warned = listener.is_none();
    loop {
        let Some(active) = listener.as_mut() else {
            let wait = pause.unwrap_or_default();
            tokio::select! {
                () = relay.closed() => return,
                () = tokio::time::sleep(wait) => {}
            }
            match listen_runnable(&options).await {
                Ok(again) => {
                    if warned {
                        tracing::info!("listening on {RUNNABLE_CHANNEL} again: idle workers are woken by new work");
                    }
                    (listener, pause, warned) = (Some(again), None, false);
                    relay.send_replace(());
                }
                Err(error) => {
                    if !warned {
                        warn_not_listening(&error);
                        warned = true;
                    }
                    tracing::debug!(error = %escape_untrusted(&super::server_words(&error)), "LISTEN on {RUNNABLE_CHANNEL} failed again");
                    pause = Some((wait * 2).clamp(Duration::from_secs(1), RELISTEN_AT_MOST));
                }
            }
            continue;
        };
        let received = tokio::select! {
            () = relay.closed() => return,
            received = active.try_recv() => received,
        };
        if let Ok(Some(notification)) = received {
            // Another ledger's, in another schema of the same database, wakes nobody here.
            if notification.payload() == schema {
                relay.send_replace(());
            }
        } else {
            tracing::debug!("the connection listening on {RUNNABLE_CHANNEL} was lost; listening again");
            (listener, pause) = (None, Some(Duration::ZERO));
        }
    }
}

impl PostgresStore {
    /// Connects to and migrates (creating it if need be) the ledger at a `postgres://` URL, in the
    /// schema its `search_path` names, else `actionledger`.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        Self::open_with(url, 16).await
    }

    /// Like [`PostgresStore::open`] with a chosen pool size.
    pub async fn open_with(url: &str, max_connections: u32) -> Result<Self, StoreError> {
        Self::open_at(url, None, true, Pool { max_connections, ..Pool::SHARED }).await
    }

    /// Opens the ledger in `schema` (else the URL's `search_path`, else `actionledger`); creates
    /// it only when `create`: commands that only read never make a schema, and a ledger that is
    /// not there is [`StoreError::Missing`].
    pub async fn open_in(url: &str, schema: Option<&str>, create: bool) -> Result<Self, StoreError> {
        Self::open_at(url, schema, create, Pool::SHARED).await
    }

    /// Like [`PostgresStore::open_in`], for a worker of `concurrency` slots: its pool holds at
    /// most [`worker_connections`] connections, so that many workers fit one server's
    /// `max_connections`.
    pub async fn open_for_worker(
        url: &str,
        schema: Option<&str>,
        create: bool,
        concurrency: usize,
    ) -> Result<Self, StoreError> {
        Self::open_at(url, schema, create, Pool { max_connections: worker_connections(concurrency), ..Pool::SHARED })
            .await
    }

    /// Like [`PostgresStore::open_in`], for a person watching a screen (the review console): a
    /// connection is waited for [`INTERACTIVE_CONNECTION_WAIT`], not 30 s, so that a database that
    /// went away is said at once and seen back within a second or two. Workers keep the long wait,
    /// which rides out a restart.
    pub async fn open_interactive(url: &str, schema: Option<&str>, create: bool) -> Result<Self, StoreError> {
        Self::open_at(url, schema, create, Pool { acquire_timeout: INTERACTIVE_CONNECTION_WAIT, ..Pool::SHARED }).await
    }

    /// Like [`PostgresStore::open_in`], for `serve`: a connection is waited for
    /// [`SERVING_CONNECTION_WAIT`], so that a client of a database that went away is answered
    /// 503 within seconds rather than after 30, while a burst that fills the pool still waits
    /// its turn.
    ///
    /// A login that is a member of both the worker's and the reviewer's roles (as
    /// [`PostgresStore::grant_serve`] makes it) is opened twice, acting as one role on each
    /// pool: the guards hold a session of both duties to neither role's columns, so submissions
    /// and reads go through the worker's pool and people's commands through the reviewer's,
    /// each held to its own duty. Any other login is one pool, as it is.
    pub async fn open_serving(url: &str, schema: Option<&str>, create: bool) -> Result<ServingStores, StoreError> {
        let serving = Pool { acquire_timeout: SERVING_CONNECTION_WAIT, ..Pool::SHARED };
        let store = Self::open_at(url, schema, create, serving).await?;
        let split: bool = sqlx::query_scalar(statements::PG_SERVING_DUTIES).fetch_one(&store.pool).await?;
        if !split {
            return Ok(ServingStores { submissions: store, commands: None });
        }
        store.pool.close().await;
        let schema = Some(schema.unwrap_or(&store.schema));
        let submissions = Self::open_at(url, schema, false, Pool { role: Some(WORKER_ROLE), ..serving }).await?;
        let commands = Self::open_at(url, schema, false, Pool { role: Some(REVIEWER_ROLE), ..serving }).await?;
        Ok(ServingStores { submissions, commands: Some(commands) })
    }

    /// Grants the login `serve_login` what `actionledger serve` needs, in one step: the worker's
    /// and the reviewer's roles, and a row of person_logins for each of `people` (the names of
    /// its reviewer tokens). Run as a role that may grant the roles and write person_logins.
    pub async fn grant_serve(&self, serve_login: &str, people: &[String]) -> Result<(), StoreError> {
        sqlx::query(statements::PG_GRANT_SERVE).bind(serve_login).bind(people).execute(&self.pool).await?;
        Ok(())
    }

    async fn open_at(url: &str, schema: Option<&str>, create: bool, pool: Pool) -> Result<Self, StoreError> {
        let (pool, schema) = connect(url, schema, pool).await?;
        let migrator = sqlx::migrate!("migrations/postgres");
        let status = read_status(&pool, &schema, describe(url, &schema), &migrator).await?;
        status.refuse_newer()?;
        // Only a member of actionledger_owner may migrate; workers, reviewers and viewers open a
        // current schema without touching it.
        if !status.is_current() {
            if status.in_public {
                return Err(StoreError::LedgerInPublic { ledger: status.ledger, schema });
            }
            if !status.exists && !create {
                return Err(StoreError::Missing { ledger: status.ledger });
            }
            let mut migrator = migrator;
            // Made under sqlx's migration lock (an advisory lock on the database), so that many
            // processes opening a new ledger at once neither race nor fail. Only when missing:
            // creating even `IF NOT EXISTS` needs the database's CREATE privilege, which a member
            // of actionledger_owner running a later migration need not have.
            if status.preamble.iter().any(|s| s.starts_with("CREATE SCHEMA")) {
                migrator.create_schema(schema.clone());
            }
            migrator.run(&pool).await.map_err(|error| match &error {
                sqlx::migrate::MigrateError::Execute(sqlx::Error::Database(db))
                | sqlx::migrate::MigrateError::ExecuteMigration(sqlx::Error::Database(db), _)
                    if db.code().as_deref() == Some("42501") =>
                {
                    StoreError::Open(format!(
                        "the ledger schema at {} needs migrating and this role may not do it ({}); run \
                         `actionledger migrate` as the schema owner (a member of actionledger_owner)",
                        describe(url, &schema),
                        db.message()
                    ))
                }
                _ => StoreError::Migrate(error),
            })?;
        }
        Ok(Self { pool, clock: Clock::database(), schema, runnable: RunnableSignal::default() })
    }

    /// The schema the ledger lives in.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Where the ledger's schema stands against this build's migrations; creates and changes
    /// nothing.
    pub async fn schema_status(url: &str, schema: Option<&str>) -> Result<SchemaStatus, StoreError> {
        let (pool, schema) = connect(url, schema, Pool::TOOL).await?;
        let status = read_status(&pool, &schema, describe(url, &schema), &sqlx::migrate!("migrations/postgres")).await;
        pool.close().await;
        status
    }

    /// Every migration this build carries, as scripts another migration tool can run in the
    /// ledger's schema (`--schema`, else the URL's `search_path`, else `actionledger`), each also
    /// recording itself where this build looks: connects to nothing.
    pub fn exported_migrations(url: &str, schema: Option<&str>) -> Result<Vec<ExportedMigration>, StoreError> {
        let options = pg_tls::connect_options(url)?;
        let (schema, _) = pg_schema::choose_schema(options.get_options(), schema)?;
        let preamble = [format!("CREATE SCHEMA IF NOT EXISTS {schema};"), format!("SET search_path TO {schema};")];
        Ok(super::migration::export(
            &preamble,
            &sqlx::migrate!("migrations/postgres"),
            &super::migration::POSTGRES_RECORD,
        ))
    }

    /// The SQL that moves a ledger an earlier version made in the `public` schema into the
    /// ledger's own schema, run in one transaction unless `dry_run`; `None` when `public` holds
    /// no ledger.
    pub async fn move_from_public(
        url: &str,
        schema: Option<&str>,
        dry_run: bool,
    ) -> Result<Option<String>, StoreError> {
        let (pool, schema) = connect(url, schema, Pool::TOOL).await?;
        let sql = pg_schema::move_from_public_sql(&pool, &schema, &sqlx::migrate!("migrations/postgres")).await?;
        if let (Some(sql), false) = (&sql, dry_run) {
            let mut tx = pool.begin().await?;
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone())).execute(&mut *tx).await?;
            tx.commit().await?;
        }
        pool.close().await;
        Ok(sql)
    }

    /// The connection pool, for tools (benchmarks, checks) that need raw SQL.
    pub fn pool(&self) -> &sqlx::PgPool {
        &self.pool
    }
}

/// The ledger as shown to people: the URL without its password, and the schema.
fn describe(url: &str, schema: &str) -> String {
    format!("{} (schema {schema})", redact_url(url))
}

/// How long a person watching the review console waits for a connection before it says the
/// database cannot be reached.
pub const INTERACTIVE_CONNECTION_WAIT: Duration = Duration::from_secs(1);

/// How long `serve` waits for a connection to the ledger's database before it answers 503.
pub const SERVING_CONNECTION_WAIT: Duration = Duration::from_secs(3);

/// The most connections a worker of `concurrency` slots opens to the ledger's database (besides
/// the one it listens for new work on): sends hold none, so it needs one for its claims, one for
/// its group commits, one for lease renewals and lookups, and one for every two slots starting
/// attempts or settling at once; at most 16. Sixteen workers of `--concurrency 4` take 16 x (5 + 1)
/// = 96 connections, within a stock server's 100 less the 3 kept for superusers.
pub fn worker_connections(concurrency: usize) -> u32 {
    u32::try_from(concurrency.div_ceil(2) + 3).unwrap_or(u32::MAX).min(Pool::SHARED.max_connections)
}

/// The size of a store's pool, how long it waits for a connection, and the role its connections
/// act as (the login's own when `None`).
#[derive(Debug, Clone, Copy)]
struct Pool {
    max_connections: u32,
    acquire_timeout: Duration,
    role: Option<&'static str>,
}

/// The roles a serve login acts as, one per pool (migration 0102).
const WORKER_ROLE: &str = "actionledger_worker";
const REVIEWER_ROLE: &str = "actionledger_reviewer";

/// The ledger as `serve` opened it: submissions and reads, and people's commands on a pool of
/// their own where the login holds both duties (see [`PostgresStore::open_serving`]).
#[derive(Debug)]
pub struct ServingStores {
    pub submissions: PostgresStore,
    pub commands: Option<PostgresStore>,
}

impl Pool {
    /// Workers and commands: a restarting server is waited for.
    const SHARED: Self = Self { max_connections: 16, acquire_timeout: Duration::from_secs(30), role: None };
    /// A look at the schema, with nothing else to do.
    const TOOL: Self = Self { max_connections: 2, ..Self::SHARED };
}

/// A pool whose every connection works in the ledger's schema alone, and the schema's name.
async fn connect(url: &str, schema: Option<&str>, settings: Pool) -> Result<(sqlx::PgPool, String), StoreError> {
    // The URL's TLS settings (sslmode, sslrootcert, sslcert, sslkey) are read and checked first.
    let options = pg_tls::connect_options(url)?;
    let (schema, set_search_path) = pg_schema::choose_schema(options.get_options(), schema)?;
    // The schema alone: unqualified names (the migrations', sqlx's `_sqlx_migrations`, every
    // statement's, the guard functions') resolve there and nowhere else.
    let options = if set_search_path { options.options([("search_path", schema.as_str())]) } else { options };
    // An operator's own limit, given in the URL's `options`, is kept.
    let options = if options.get_options().is_some_and(|o| o.contains("idle_in_transaction_session_timeout")) {
        options
    } else {
        options.options([("idle_in_transaction_session_timeout", IDLE_IN_TRANSACTION_LIMIT)])
    };
    // Set as the session starts, as `SET ROLE` would: the guards then see this role's duty alone.
    let options = match settings.role {
        Some(role) => options.options([("role", role)]),
        None => options,
    };
    // One direct connection first: a wrong address, password or certificate fails at once,
    // where the pool would keep retrying until its acquire timeout.
    let mut first =
        sqlx::ConnectOptions::connect(&options).await.map_err(|e| pg_tls::connect_error(url, &options, &e))?;
    pg_tls::warn_if_prefer_fell_back(&mut first, url, &options).await;
    sqlx::Connection::close(first).await.ok();
    let pool = PgPoolOptions::new()
        .max_connections(settings.max_connections)
        .acquire_timeout(settings.acquire_timeout)
        .connect_with(options.clone())
        .await
        .map_err(|e| pg_tls::connect_error(url, &options, &e))?;
    Ok((pool, schema))
}
