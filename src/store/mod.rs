//! Storage: one store interface, with a SQLite and a PostgreSQL implementation.
//!
//! A [`Store`] hands out short write transactions ([`LedgerTx`]) made of a few primitive
//! statements, makes the two writes of a worker's path that need no decision in between (a claim
//! with its audit entries, and the attempts it starts where the ledger says so; the start of
//! attempts) as transactions of their own, and answers read queries. The rules (what may change, and when) live once in
//! [`crate::ledger`]; the stores only read and write rows, always conditionally on the revision
//! they read, inside transactions that lock what they change.
//!
//! The files:
//!
//! - `statements.rs`: every statement, named and commented, and the two dialects.
//! - `batch.rs`: how rows are written, many per statement, from one column list per kind of row.
//! - `rows.rs`: how rows read back become domain records.
//! - `sql_store.rs`, `sql_tx.rs`: [`Store`] and [`LedgerTx`], written once for both databases.
//! - `pg_guards.rs`: what each PostgreSQL role may change, column by column (the migrations'
//!   guards enforce it; docs/RULES.md shows it).
//! - `backend.rs`: what that shared code needs of a database; `sqlite.rs` and `postgres.rs`
//!   supply it, and open their databases.

mod backend;
mod batch;
mod clock;
mod migration;
mod one_command;
pub mod pg_guards;
mod pg_schema;
mod pg_tls;
mod postgres;
mod rows;
mod sql_store;
mod sql_text;
mod sql_tx;
mod sqlite;
mod statements;
mod url;
mod wake;

pub use clock::Clock;
pub use migration::{AppliedMigration, ExportedMigration, PendingMigration, SchemaStatus};
pub use pg_schema::{DEFAULT_SCHEMA, SchemaProblem};
pub use pg_tls::TlsProblem;
pub(crate) use pg_tls::connect_options as pg_connect_options;
pub use postgres::{
    IDLE_IN_TRANSACTION_LIMIT, INTERACTIVE_CONNECTION_WAIT, PostgresStore, ServingStores, worker_connections,
};
pub use sqlite::SqliteStore;
pub use sqlx::sqlite::SqliteSynchronous;
pub use url::redact_url;
pub use wake::Wakeups;

use crate::domain::{
    ActionKey, ActionRecord, ActorKind, Attempt, AuditEntry, Delivery, LookupRecord, ProposalDecision, ProposalRecord,
    PurgeCandidate, PurgeCounts, PurgeRecord, RefusedSubmission, StartsAtClaim, State, Timestamp, Transition,
};
use std::future::Future;

/// The statements on the hot paths of workers and consoles, by name, in the dialect of the
/// store, as the store sends them: each must be served by an index (`tests/it/plans.rs` checks with
/// EXPLAIN, and checks the lists of [`list_statement`] too). Statements written for many rows are
/// given for a batch of three. For the plan checks only: part of the test kit.
#[cfg(feature = "testkit")]
pub fn hot_statements(postgres: bool) -> Vec<(&'static str, String)> {
    let dialect = if postgres { statements::POSTGRES } else { statements::SQLITE };
    let params = dialect.params;
    let mut hot = vec![
        ("find an action by key", statements::SELECT_ACTION.to_owned()),
        ("lock actions by key", statements::lock_actions_sql(dialect, 3)),
        ("count attempts", statements::count_attempts_sql(params, 3)),
        ("renew a lease", statements::RENEW_LEASE.to_owned()),
        ("write actions back", statements::update_actions_sql(params, 3)),
        ("finish attempts", statements::finish_attempts_sql(params, 3)),
        ("expired claims", statements::expired_claims_sql(dialect)),
        ("stale claim count", statements::COUNT_STALE_CLAIMS.to_owned()),
        ("late results count", statements::COUNT_LATE_RESULTS.to_owned()),
        ("attempt started under a claim", statements::ATTEMPT_STARTED_UNDER.to_owned()),
        ("deliveries of an action", statements::SELECT_DELIVERIES.to_owned()),
        ("attempts of an action", statements::SELECT_ATTEMPTS.to_owned()),
        ("audit trail of an action", statements::SELECT_AUDIT.to_owned()),
        ("lookups of an action", statements::SELECT_LOOKUPS.to_owned()),
        ("proposals waiting on an action", statements::SELECT_WAITING_PROPOSALS.to_owned()),
        ("proposals of an action", statements::SELECT_PROPOSALS.to_owned()),
    ];
    if postgres {
        // The claims PostgreSQL sends, and the per-action path's statements that write several
        // tables at once, PostgreSQL's only.
        hot.extend([
            ("claim with its audit entries", statements::pg_claim_with_audit_sql(3, false)),
            ("claim that starts attempts", statements::pg_claim_and_start_sql(3, false)),
            ("start attempts", statements::pg_start_attempts_sql(3)),
            ("lock actions and read the clock", statements::pg_lock_actions_now_sql(3)),
            ("finish an attempt with its audit entries", statements::pg_finish_attempts_with_audit_sql(1, 2)),
            ("write a result's action, attempt and audit entry", statements::pg_update_actions_with_deferred_sql(1, 1)),
        ]);
    } else {
        hot.push(("claim", statements::sqlite_claim_sql(false)));
    }
    hot
}

/// The text [`Store::list`] sends for `filter`, in the dialect of the store. For the plan checks
/// only: part of the test kit.
#[cfg(feature = "testkit")]
pub fn list_statement(postgres: bool, filter: &ListFilter) -> String {
    if postgres {
        statements::list_actions::<sqlx::Postgres>(filter).sql().to_owned()
    } else {
        statements::list_actions::<sqlx::Sqlite>(filter).sql().to_owned()
    }
}

/// Errors from the database layer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {}", server_words(.0))]
    Database(sqlx::Error),
    /// The session's role lacks the privilege (SQLSTATE 42501); its message names what.
    #[error("refused by the database: {0}")]
    NotPermitted(String),
    /// PostgreSQL holds as many connections as its `max_connections` allows (SQLSTATE 53300).
    #[error(
        "the PostgreSQL server refused a new connection: it already holds its max_connections ({0}); each worker \
         opens at most as many as `actionledger worker --help` says for its --concurrency, plus one to hear of new \
         work: lower --concurrency, run fewer processes, or raise max_connections (docs/postgresql.md, \"Connections\")"
    )]
    ServerFull(String),
    #[error("could not migrate the ledger schema: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("cannot open the ledger database: {0}")]
    Open(String),
    /// A TLS connection to PostgreSQL could not be made; the problem says which parameter to check.
    #[error("cannot open the ledger database at {url} over TLS (sslmode={mode}): {problem}")]
    Tls { url: String, mode: &'static str, problem: Box<TlsProblem> },
    /// A command that only reads found no ledger, and creates none: a mistyped path must not look
    /// like an empty ledger.
    #[error(
        "no ledger at {ledger}: nothing has been recorded there; check --db (or $ACTIONLEDGER_DB), or create it with \
         `actionledger migrate`"
    )]
    Missing { ledger: String },
    /// A newer build migrated the ledger: this one does not know what that schema requires of
    /// writers, and refuses rather than write rows it may get wrong.
    #[error(
        "the ledger at {ledger} has schema version {version} ({description}), newer than this actionledger, which \
         knows versions up to {known}: it refuses to write there; use an actionledger that carries migration {version}"
    )]
    NewerSchema { ledger: String, version: i64, description: String, known: i64 },
    /// The PostgreSQL schema asked for cannot hold the ledger.
    #[error("cannot keep the ledger in schema {name:?}: {problem}")]
    InvalidSchema { name: String, problem: SchemaProblem },
    /// The ledger's schema holds no ledger, but `public` holds one an earlier version made there.
    #[error(
        "no ledger in schema {schema} at {ledger}, but the schema public holds one made by an earlier actionledger; \
         move it with `actionledger migrate --move-from-public` (add --dry-run to see the SQL first), or keep using \
         it where it is with --schema public"
    )]
    LedgerInPublic { ledger: String, schema: String },
    #[error("the database holds a value this version does not understand: {0}")]
    Corrupt(String),
    /// The SQLite ledger cannot be written where it is, and SQLite must write beside it (its
    /// `-wal` and `-shm` files) to open it at all unless its last writer closed it cleanly.
    #[error("cannot open the ledger {ledger}: {reason}")]
    ReadOnly { ledger: String, reason: ReadOnlyReason },
    /// The SQLite ledger file this process opened is no longer at its path: every command started
    /// from now on works another file (or a new, empty one), and this process no longer shares a
    /// ledger with them.
    #[error(
        "the ledger file {path} is not the file this process opened: {problem}; what this process writes from now \
         on no other command sees"
    )]
    FileReplaced { path: String, problem: String },
    /// On SQLite, where each writer's time is its own host's clock: this process's clock reads
    /// earlier than a time the ledger already recorded, so leases it grants would end early in
    /// every other process's eyes (or another writer's clock runs fast).
    #[error(
        "this process's clock reads {}, but the ledger already recorded {}, {}s later: the clocks of the \
         processes sharing this SQLite ledger disagree (one of them runs slow or fast), and leases measured by them \
         would let one worker take over another's live claim; it claims and takes over nothing until they agree",
        now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        latest.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        (*latest - *now).num_seconds()
    )]
    ClockBehind { now: Timestamp, latest: Timestamp },
}

/// Why a SQLite ledger cannot be written where it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadOnlyReason {
    #[error(
        "the ledger's directory {directory} is on a read-only filesystem; commands that write need it writable \
         (remount it read-write, or copy the ledger elsewhere), and commands that read can read it there only when \
         no -wal file is left beside it (its last writer closed it cleanly)"
    )]
    Filesystem { directory: String },
    #[error(
        "this user may not write the ledger file; SQLite keeps the ledger in WAL mode and writes beside it even to \
         read: give this user write access to the file and its directory, or copy the ledger elsewhere"
    )]
    File,
    #[error(
        "this user may not create files in the ledger's directory {directory}; SQLite keeps the ledger in WAL mode \
         and creates its -wal and -shm files there even to read: give this user write access to the directory, \
         or copy the ledger elsewhere"
    )]
    Directory { directory: String },
}

/// How far a SQLite writer's clock may read behind the latest time the ledger recorded: the
/// writers that committed just before it read their clocks after it read its own, by at most the
/// time between the two reads.
pub const CLOCK_TOLERANCE: chrono::TimeDelta = chrono::TimeDelta::seconds(2);

/// sqlx's words for an error, less the line of PostgreSQL's own C source that it appends to the
/// server's message ("password authentication failed for user \"al\" at line 334"): a number
/// about the server's code, which the person reading has no use for.
pub(crate) fn server_words(error: &sqlx::Error) -> String {
    match error {
        sqlx::Error::Database(db) => format!("error returned from database: {}", db.message()),
        other => other.to_string(),
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        match &error {
            sqlx::Error::Database(db) if db.code().as_deref() == Some("42501") => {
                Self::NotPermitted(db.message().to_owned())
            }
            sqlx::Error::Database(db) if db.code().as_deref() == Some("53300") => {
                Self::ServerFull(db.message().to_owned())
            }
            _ => Self::Database(error),
        }
    }
}

impl StoreError {
    /// The database refused for lack of privilege: the session's role may not do this, and
    /// trying again will not help.
    pub fn is_not_permitted(&self) -> bool {
        matches!(self, Self::NotPermitted(_))
    }

    /// The database could not be reached or stopped answering: no connection to be had in time,
    /// one refused, reset or lost, the server shutting down or not yet accepting, a SQLite file
    /// that cannot be opened or read. Not a rule, a privilege or a value: asking again once it is
    /// back may succeed.
    pub fn is_unreachable(&self) -> bool {
        if matches!(self, Self::ServerFull(_)) {
            return true;
        }
        let Self::Database(error) = self else { return false };
        match error {
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => true,
            sqlx::Error::Database(db) => {
                let code = db.code().unwrap_or_default();
                if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                    // SQLITE_IOERR and SQLITE_CANTOPEN, with their extended codes.
                    code.parse::<i32>().is_ok_and(|code| matches!(code & 0xff, 10 | 14))
                } else {
                    // A connection exception (class 08); the server shutting down (57P01, 57P02)
                    // or not yet accepting connections (57P03).
                    code.starts_with("08") || matches!(&*code, "57P01" | "57P02" | "57P03")
                }
            }
            _ => false,
        }
    }

    /// Errors worth retrying the whole transaction for: serialization failures and deadlocks on
    /// PostgreSQL, a busy or locked database on SQLite.
    pub fn is_transient(&self) -> bool {
        let Self::Database(sqlx::Error::Database(db)) = self else {
            return false;
        };
        matches!(db.code().as_deref(), Some("40001" | "40P01" | "5" | "6" | "517" | "262"))
    }
}

/// The lookups of one `unknown` action that got no answer since it last changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupFailures {
    pub key: String,
    pub failures: i64,
    pub last_at: Timestamp,
}

/// Filters for listing actions, newest first.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub state: Option<State>,
    /// With `state`: also actions in any other state whose proposed payload awaits a decision
    /// (the console's conflict pane).
    pub or_proposed: bool,
    pub destination: Option<String>,
    /// Matches the worker holding the claim or the person the action is assigned to.
    pub owner: Option<String>,
    /// Only actions with late results that no person has acknowledged (rule 8).
    pub late_results: bool,
    /// Keyset cursor: only actions with a smaller id (older) than this.
    pub before_id: Option<i64>,
    /// Only actions created at or after this time.
    pub created_since: Option<Timestamp>,
    /// Keyset cursor the other way: only actions newer than this id, oldest of them first
    /// (returned newest first like every page).
    pub after_id: Option<i64>,
    /// The order of the page; the cursors keep their meaning in the order shown: `before_id`
    /// pages on, `after_id` pages back.
    pub order: ListOrder,
    /// Where the page starts: after the cursor, at it, or the last page in the order shown.
    pub start: PageStart,
    /// Only keys containing this text.
    pub key_contains: Option<String>,
    /// Only actions last changed before this time: `--older-than`, and the console's age filter.
    pub updated_before: Option<Timestamp>,
    pub limit: i64,
}

/// What the console's header counts besides states, of the actions a filter matches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Notices {
    /// Actions outside `conflict` whose proposed payload awaits a decision.
    pub proposed_elsewhere: i64,
    /// Actions with late results that no person has acknowledged.
    pub late_results: i64,
    /// Claims that outlived their lease.
    pub stale_claims: i64,
}

/// The order of a page of actions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ListOrder {
    #[default]
    NewestFirst,
    OldestFirst,
    /// Most attempts first, ties newest first (the console's `s`). A cursor's place is the
    /// cursor row's (attempts, id) as it is now.
    MostAttempts,
}

/// Where a page starts, in the order shown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PageStart {
    /// Past `before_id` (or before `after_id`), or at the start without a cursor.
    #[default]
    AfterCursor,
    /// At the `before_id` row itself: the page that starts at a row.
    AtCursor,
    /// The last page (read the other way round, and turned round).
    Last,
}

/// Which pending actions a worker may claim.
/// A store's connection pool at one moment: what `--help` and the docs say a process opens, as
/// the metrics show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionFigures {
    /// Connections open, idle or in use.
    pub open: u32,
    /// Of those, the ones no task holds.
    pub idle: u32,
    /// The most the pool opens.
    pub max: u32,
}

/// One state's figures, as [`Store::state_figures`] reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateFigures {
    pub state: State,
    pub count: i64,
    /// When the least recently changed action in this state last changed.
    pub oldest_change: Option<Timestamp>,
    /// Claims in this state whose lease ran out (only `in_progress` holds leases).
    pub expired_leases: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimScope {
    /// Only these destinations; `None` for any.
    pub destinations: Option<Vec<String>>,
    /// Also actions submitted without a destination.
    pub include_unassigned: bool,
    /// Only this action: an automation beginning it through `serve`.
    pub key: Option<ActionKey>,
}

impl ClaimScope {
    /// Every pending action, whatever its destination.
    pub fn any() -> Self {
        Self { destinations: None, include_unassigned: true, key: None }
    }

    /// The destinations as the claim statements take them: a JSON list, or NULL for any.
    pub(crate) fn destinations_json(&self) -> Option<String> {
        self.destinations.as_deref().map(|names| serde_json::Value::from(names.to_vec()).to_string())
    }
}

/// What the audit entry of each claim records, as the ledger decided it: the transition and the
/// kind of actor; the actor is the claiming worker, the time and versions are the claim's.
#[derive(Debug, Clone, Copy)]
pub struct ClaimAudit {
    pub transition: Transition,
    pub actor_kind: ActorKind,
}

impl ClaimAudit {
    /// The entry for `action` as claimed by `worker`.
    pub(crate) fn entry(self, action: &ActionRecord, worker: &str) -> AuditEntry {
        AuditEntry {
            id: 0,
            key: action.key.clone(),
            at: action.updated_at,
            actor: worker.to_owned(),
            actor_kind: self.actor_kind,
            event: self.transition.event,
            from_state: Some(self.transition.from),
            to_state: self.transition.to,
            ownership_version: action.ownership_version,
            revision: action.revision,
            reason: None,
        }
    }
}

/// An attempt about to be sent under a claim: the claim that must still be current, and what
/// the attempt records of it.
#[derive(Debug, Clone, Copy)]
pub struct AttemptStart<'a> {
    pub key: &'a ActionKey,
    pub ownership_version: i64,
    pub worker: &'a str,
    pub idempotency_key: &'a str,
}

/// An attempt started by [`Store::start_attempts`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptStarted {
    pub key: ActionKey,
    /// The action's attempt count with this one: the attempt's number.
    pub number: i64,
    pub id: i64,
}

/// What a worker asks of [`Store::claim_with_audit`]: up to `limit` runnable pending actions in
/// `scope` for `worker`, each with a lease of `lease`, the audit entry each claim appends, and
/// which claims also start their attempt. Each way a store claims takes it whole.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest<'a> {
    pub worker: &'a str,
    pub lease: std::time::Duration,
    pub limit: i64,
    pub scope: &'a ClaimScope,
    pub audit: ClaimAudit,
    pub starts: &'a StartsAtClaim,
}

/// One action claimed by [`Store::claim_with_audit`]: the action as claimed, as it was before any
/// attempt started (its attempt counts, first send time and window start as a separate start
/// would have found them), and the attempt started in the claim's own commit, where the claim
/// started one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    pub action: ActionRecord,
    pub started: Option<AttemptStarted>,
}

/// A ledger database.
pub trait Store: Clone + Send + Sync + 'static {
    type Tx: LedgerTx;

    /// Starts a write transaction: immediate on SQLite, so that what it reads stays true until
    /// it commits; on PostgreSQL rows are locked as they are read.
    fn begin(&self) -> impl Future<Output = Result<Self::Tx, StoreError>> + Send;

    /// Claims up to `limit` runnable pending actions for `worker`, each under a new ownership
    /// version with a lease of `lease` from database time, skipping rows that other workers are
    /// claiming, and appends each claim's audit entry (`audit`): one write transaction of its own,
    /// which on PostgreSQL is one autocommitted statement (the clock read, the claim and the audit
    /// entries together: one round trip). Returns the claimed actions; each one's `updated_at` is
    /// the database time of the claim.
    ///
    /// Each claimed action that `starts` names ([`StartsAtClaim::starts`], as the ledger decided
    /// from the destinations' declarations) also has its attempt started in the same write
    /// transaction (the same statement on PostgreSQL), exactly as [`Store::start_attempts`] would
    /// start it under the new claim, worker `worker`, at the claim's time.
    fn claim_with_audit(
        &self,
        request: &ClaimRequest<'_>,
    ) -> impl Future<Output = Result<Vec<Claimed>, StoreError>> + Send;

    /// Starts an attempt under each claim that is still current (its key at that ownership
    /// version, in progress): counts it on the action (setting the first send time and the start
    /// of the idempotency window where unset) and inserts it, numbered by that count, at database
    /// time. One write transaction of its own, which on PostgreSQL is one autocommitted statement.
    /// A claim missing from the answer is no longer current, and nothing was written for it. The
    /// claims' keys are distinct.
    fn start_attempts(
        &self,
        starts: &[AttemptStart<'_>],
    ) -> impl Future<Output = Result<Vec<AttemptStarted>, StoreError>> + Send;

    /// The database's clock (plus any simulated offset).
    fn now(&self) -> impl Future<Output = Result<Timestamp, StoreError>> + Send;

    fn find(&self, key: &ActionKey) -> impl Future<Output = Result<Option<ActionRecord>, StoreError>> + Send;
    fn deliveries(&self, key: &ActionKey) -> impl Future<Output = Result<Vec<Delivery>, StoreError>> + Send;
    fn attempts(&self, key: &ActionKey) -> impl Future<Output = Result<Vec<Attempt>, StoreError>> + Send;
    fn audit_trail(&self, key: &ActionKey) -> impl Future<Output = Result<Vec<AuditEntry>, StoreError>> + Send;
    fn lookups(&self, key: &ActionKey) -> impl Future<Output = Result<Vec<LookupRecord>, StoreError>> + Send;
    /// Every proposal kept for action `key`, waiting and decided, oldest first.
    fn proposals(&self, key: &ActionKey) -> impl Future<Output = Result<Vec<ProposalRecord>, StoreError>> + Send;
    /// The purge run that reduced action `key` to its tombstone, if one did.
    fn purge_of(&self, key: &ActionKey) -> impl Future<Output = Result<Option<PurgeRecord>, StoreError>> + Send;
    fn list(&self, filter: &ListFilter) -> impl Future<Output = Result<Vec<ActionRecord>, StoreError>> + Send;
    /// A page of refused submissions, newest first, that match `filter`'s terms (destination,
    /// key text, age; an owner matches none), older than its `before_id`, at most its `limit`.
    fn list_refused(
        &self,
        filter: &ListFilter,
    ) -> impl Future<Output = Result<Vec<RefusedSubmission>, StoreError>> + Send;
    fn count_by_state(&self) -> impl Future<Output = Result<Vec<(State, i64)>, StoreError>> + Send;
    /// The state of each recorded action among `keys` (a key not recorded is left out).
    fn states_of(
        &self,
        keys: &[&ActionKey],
    ) -> impl Future<Output = Result<Vec<(ActionKey, State)>, StoreError>> + Send;
    /// How many pending actions wait (`after`) on an action in each state.
    fn count_waiting_by_after_state(&self) -> impl Future<Output = Result<Vec<(State, i64)>, StoreError>> + Send;
    /// Every state present with its figures, read in one statement at database time `now`.
    fn state_figures(&self, now: Timestamp) -> impl Future<Output = Result<Vec<StateFigures>, StoreError>> + Send;
    /// For each destination (`None`: actions without one) with actions a worker may claim at
    /// database time `now`, when the one that has waited longest became claimable.
    fn claimable_since_by_destination(
        &self,
        now: Timestamp,
    ) -> impl Future<Output = Result<Vec<(Option<String>, Timestamp)>, StoreError>> + Send;
    /// Where the ledger's schema stands against this build's migrations, read on a pooled
    /// connection: fails when the database cannot be reached.
    fn schema_status(&self) -> impl Future<Output = Result<SchemaStatus, StoreError>> + Send;
    /// How many actions in each state match `filter`'s terms (its state, cursors and limit aside).
    fn count_matching(&self, filter: &ListFilter)
    -> impl Future<Output = Result<Vec<(State, i64)>, StoreError>> + Send;
    /// How many refused submissions match `filter`'s terms, as [`Store::list_refused`] lists them
    /// (all of them for the default filter).
    fn count_refused(&self, filter: &ListFilter) -> impl Future<Output = Result<i64, StoreError>> + Send;
    /// Of the actions that match `filter`'s terms: those outside `conflict` with a proposal
    /// waiting, those with late results, and the claims stale at database time `now` (the time
    /// the caller read for the same screen).
    fn count_notices_matching(
        &self,
        filter: &ListFilter,
        now: Timestamp,
    ) -> impl Future<Output = Result<Notices, StoreError>> + Send;
    /// How many actions outside `conflict` have a proposed payload awaiting a decision.
    fn count_proposed_elsewhere(&self) -> impl Future<Output = Result<i64, StoreError>> + Send;
    /// How many actions have late results that no person has acknowledged.
    fn count_late_results(&self) -> impl Future<Output = Result<i64, StoreError>> + Send;
    /// How many claims have outlived their lease by database time.
    fn count_stale_claims(&self) -> impl Future<Output = Result<i64, StoreError>> + Send;
    /// Claims whose lease ran out by database time, oldest expiry first, of the actions `scope`
    /// names.
    fn expired_claims(
        &self,
        limit: i64,
        scope: &ClaimScope,
    ) -> impl Future<Output = Result<Vec<ActionRecord>, StoreError>> + Send;
    /// For each destination with pending actions waiting out a backoff, when the last of those
    /// waits ends.
    fn pending_backoffs(&self) -> impl Future<Output = Result<Vec<(Option<String>, Timestamp)>, StoreError>> + Send;
    /// The lookups of each `unknown` action that got no answer since it last changed.
    fn unknown_lookup_failures(&self) -> impl Future<Output = Result<Vec<LookupFailures>, StoreError>> + Send;
    /// The (from, to) state pairs the database itself will accept.
    fn enforced_state_pairs(&self) -> impl Future<Output = Result<Vec<(State, State)>, StoreError>> + Send;

    /// The clock this store was opened with, which [`Store::now`] and every transaction read.
    fn clock(&self) -> &Clock;

    /// Whether the ledger is still where it was opened: for a SQLite ledger, whether its path
    /// still names the file opened (not deleted, not replaced by another file); a database
    /// server's ledger always is. A process still working a file that was deleted or replaced
    /// works a ledger that every new command misses.
    fn check_file(&self) -> Result<(), StoreError>;

    /// The connection pool's figures now, read from the pool (the database is not asked).
    fn connection_figures(&self) -> ConnectionFigures;

    /// Whether this process's clock may measure leases on this ledger. A database server's clock
    /// always may: every writer reads the server's. On SQLite every writer records its own
    /// host's clock, so the clocks of all the processes sharing the file must agree: a clock that
    /// reads earlier than the latest time the ledger recorded by more than [`CLOCK_TOLERANCE`] is
    /// refused ([`StoreError::ClockBehind`]). A clock running fast is caught by the others once it
    /// has written, never before: from its first write alone, an idle ledger and a fast clock look
    /// the same.
    fn check_clock(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    fn close(&self) -> impl Future<Output = ()> + Send;

    /// Who may do what in this ledger, where the database manages roles (PostgreSQL); `None`
    /// where it does not.
    fn access_report(&self) -> impl Future<Output = Result<Option<String>, StoreError>> + Send;

    /// A signal each time an action changes state, where the database can push one (PostgreSQL's
    /// LISTEN/NOTIFY); `None` where it cannot, and readers poll.
    fn listen_for_changes(
        &self,
    ) -> impl Future<Output = Result<Option<tokio::sync::mpsc::UnboundedReceiver<()>>, StoreError>> + Send;

    /// What an idle worker waits on: wake-ups when new work may be claimable, raised after this
    /// process's commits that made some (through this store or any clone of it), and on
    /// PostgreSQL also by the database for every other process's (LISTEN on the channel of
    /// migration 0101; never the consoles' channel, which every claim and result notifies).
    /// Never fails: where the database cannot be listened to, it says so in a warning and keeps
    /// trying in the background, and the worker's polling finds the work meanwhile.
    fn listen_for_runnable(&self) -> impl Future<Output = Wakeups> + Send;
}

/// One write transaction. Dropping it without [`LedgerTx::commit`] rolls it back.
pub trait LedgerTx: Send {
    fn now(&mut self) -> impl Future<Output = Result<Timestamp, StoreError>> + Send;
    /// Reads actions and holds them against concurrent change until the transaction ends; those
    /// that exist, in key order (the order rows are locked in, so that batches cannot deadlock).
    fn lock_actions(
        &mut self,
        keys: &[&ActionKey],
    ) -> impl Future<Output = Result<Vec<ActionRecord>, StoreError>> + Send;
    /// [`LedgerTx::lock_actions`], and the database's clock (plus any simulated offset) read by
    /// the same statement where it can be: one round trip instead of two at the start of a
    /// transaction that begins by locking.
    fn lock_actions_now(
        &mut self,
        keys: &[&ActionKey],
    ) -> impl Future<Output = Result<(Vec<ActionRecord>, Timestamp), StoreError>> + Send;
    /// [`LedgerTx::lock_actions`] for one key.
    fn lock_action(
        &mut self,
        key: &ActionKey,
    ) -> impl Future<Output = Result<Option<ActionRecord>, StoreError>> + Send {
        async move { Ok(self.lock_actions(&[key]).await?.pop()) }
    }
    /// The `after` links reachable from `from` (each action's key and the key it waits for), in
    /// no particular order. Where the database serves many writers at once, submissions that read
    /// them take turns from here to the end of their transactions, so that two new actions cannot
    /// each miss the other and close a cycle between them.
    fn after_links(
        &mut self,
        from: &ActionKey,
    ) -> impl Future<Output = Result<Vec<(ActionKey, ActionKey)>, StoreError>> + Send;
    /// Inserts new pending actions, skipping keys that exist; returns those inserted.
    fn insert_actions_if_absent(
        &mut self,
        actions: &[ActionRecord],
    ) -> impl Future<Output = Result<Vec<ActionRecord>, StoreError>> + Send;
    /// Writes every mutable field of each action whose revision is still `action.revision`, and
    /// advances its revision. Returns how many were written: one that changed meanwhile is not.
    /// What the transaction deferred to its commit (attempt ends, audit entries) may go with it.
    fn update_actions(&mut self, actions: &[&ActionRecord]) -> impl Future<Output = Result<u64, StoreError>> + Send;
    /// Extends a lease if the claim is still held by `ownership_version`.
    fn renew_lease(
        &mut self,
        key: &ActionKey,
        ownership_version: i64,
        until: Timestamp,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Counts an attempt under each claim (key and ownership version) that is still current, in
    /// one conditional statement, and sets the first send time where unset. Returns the key and
    /// attempt number of each claim counted; a claim missing from the answer is no longer current.
    fn count_attempts(
        &mut self,
        claims: &[(&ActionKey, i64)],
        now: Timestamp,
    ) -> impl Future<Output = Result<Vec<(ActionKey, i64)>, StoreError>> + Send;
    fn attempt_started_under(
        &mut self,
        key: &ActionKey,
        ownership_version: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Marks the unfinished attempts of action `key` but attempt `except` as cut off (their claim
    /// expired or ended without their result); returns how many.
    fn cut_off_attempts(
        &mut self,
        key: &ActionKey,
        except: i64,
    ) -> impl Future<Output = Result<i64, StoreError>> + Send;
    fn find_attempt(&mut self, id: i64) -> impl Future<Output = Result<Option<Attempt>, StoreError>> + Send;
    /// The attempts of an action, oldest first, read inside the transaction.
    fn attempts_of(&mut self, key: &ActionKey) -> impl Future<Output = Result<Vec<Attempt>, StoreError>> + Send;
    fn insert_deliveries(&mut self, deliveries: &[Delivery]) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Records attempts as they start (how each ends is written by [`LedgerTx::finish_attempts`]);
    /// returns each new attempt's id with its action's key.
    fn insert_attempts(
        &mut self,
        attempts: &[Attempt],
    ) -> impl Future<Output = Result<Vec<(ActionKey, i64)>, StoreError>> + Send;
    /// Records how attempts ended; one that already ended is left as it was. Written as the
    /// transaction commits, with the audit entries (nothing in a transaction reads them back).
    fn finish_attempts(&mut self, attempts: &[Attempt]) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Marks every late result of `key` that no one has acknowledged as acknowledged by `person`
    /// at `now`; returns how many.
    fn acknowledge_late_results(
        &mut self,
        key: &ActionKey,
        person: &str,
        now: Timestamp,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;
    fn insert_lookup(&mut self, lookup: &LookupRecord) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// The proposals of action `key` waiting for a person's decision, oldest first.
    fn waiting_proposals(
        &mut self,
        key: &ActionKey,
    ) -> impl Future<Output = Result<Vec<ProposalRecord>, StoreError>> + Send;
    /// Keeps a proposal: inserted waiting, or waiting again if it was decided before; a proposal
    /// already waiting is left as it is.
    fn keep_proposal(&mut self, proposal: &ProposalRecord) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Records `person`'s decision on each proposal (by id) still waiting; returns how many.
    fn decide_proposals(
        &mut self,
        ids: &[i64],
        decision: ProposalDecision,
        person: &str,
        now: Timestamp,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;
    /// Appends an audit entry. Entries are written together, in the order given, as the
    /// transaction commits: one statement for a whole batch.
    fn append_audit(&mut self, entry: &AuditEntry) -> impl Future<Output = Result<(), StoreError>> + Send;
    fn insert_refusal(&mut self, refusal: &RefusedSubmission) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Refuses ([`StoreError::NotPermitted`], naming the role) unless this session may purge:
    /// on PostgreSQL only the owner role may; SQLite has no roles.
    fn check_may_purge(&mut self) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// The settled actions a purge would reduce to their tombstone (see
    /// [`crate::domain::retention`]), in key order, each with what decides whether it is kept
    /// whole, locked until the transaction ends.
    fn purge_candidates(
        &mut self,
        states: &[State],
        settled_before: Timestamp,
    ) -> impl Future<Output = Result<Vec<PurgeCandidate>, StoreError>> + Send;
    /// Reduces these actions to their tombstone: empties their bulk, deletes their deliveries,
    /// attempts and lookups; answers how many rows went.
    fn tombstone(&mut self, keys: &[ActionKey]) -> impl Future<Output = Result<PurgeCounts, StoreError>> + Send;
    /// Records a purge run (its id is assigned) and marks these actions as purged by it; answers
    /// the run's id.
    fn record_purge(
        &mut self,
        run: &PurgeRecord,
        keys: &[ActionKey],
    ) -> impl Future<Output = Result<i64, StoreError>> + Send;
    /// [`Store::purge_of`], inside the transaction.
    fn purge_of(&mut self, key: &ActionKey) -> impl Future<Output = Result<Option<PurgeRecord>, StoreError>> + Send;
    fn commit(self) -> impl Future<Output = Result<(), StoreError>> + Send;
    fn rollback(self) -> impl Future<Output = Result<(), StoreError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::StoreError;
    use std::io::{Error, ErrorKind};

    #[tokio::test]
    async fn a_database_that_cannot_be_reached_is_told_from_one_that_answers() {
        use sqlx::ConnectOptions as _;
        let gone = |kind: ErrorKind| StoreError::Database(sqlx::Error::Io(Error::from(kind)));
        for unreachable in [
            StoreError::Database(sqlx::Error::PoolTimedOut),
            StoreError::Database(sqlx::Error::PoolClosed),
            gone(ErrorKind::ConnectionRefused),
            gone(ErrorKind::ConnectionReset),
            gone(ErrorKind::UnexpectedEof),
        ] {
            assert!(unreachable.is_unreachable(), "{unreachable}");
        }
        let directory = tempfile::tempdir().unwrap();
        let missing = directory.path().join("no such directory").join("ledger.db");
        let options = sqlx::sqlite::SqliteConnectOptions::new().filename(&missing).create_if_missing(true);
        let cannot_open = StoreError::from(options.connect().await.unwrap_err());
        assert!(cannot_open.is_unreachable(), "SQLITE_CANTOPEN: {cannot_open}");
        for answered in [
            StoreError::Database(sqlx::Error::RowNotFound),
            StoreError::NotPermitted("permission denied for table actions".to_owned()),
            StoreError::Corrupt("state \"bogus\"".to_owned()),
        ] {
            assert!(!answered.is_unreachable(), "{answered}");
        }
    }
}
