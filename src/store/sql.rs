//! SQL shared by both stores, and the one implementation of the store traits that each backend
//! instantiates with its own connection types and locking clauses.
//!
//! Both dialects accept `$1`-style parameters and `RETURNING`, and both keep times as integer
//! milliseconds of database time, so the statements below are written once.

macro_rules! action_columns {
    () => {
        "id, key, state, payload, fingerprint, proposed_payload, proposed_fingerprint, \
         proposed_source_version, resume_state, source, source_version, destination, after_key, \
         claimed_by, ownership_version, revision, lease_expires_at, not_before, attempts, \
         attempts_in_round, assignee, destination_id, first_sent_at, last_error, created_at, updated_at"
    };
}
pub(crate) use action_columns;

macro_rules! attempt_columns {
    () => {
        "id, action_key, number, worker, ownership_version, started_at, ended_at, outcome, error, \
         response_status, destination_id, response_body, stale"
    };
}

/// One statement that claims up to `$4` runnable pending actions for worker `$1` at database time
/// `$2` with a lease until `$3`, for the destinations in the JSON list `$5` (all when NULL) and,
/// when `$6`, actions without a destination. `$lock` lets PostgreSQL skip rows another worker is
/// claiming; `$in_list` tests membership of `$5` in the dialect's JSON functions.
macro_rules! claim_sql {
    ($lock:literal, $in_list:literal) => {
        // The picked ids are materialized once: PostgreSQL may otherwise evaluate a LIMIT
        // subquery under IN more than once and claim more rows than asked.
        concat!(
            "WITH picked AS MATERIALIZED (SELECT a.id FROM actions a WHERE a.state = 'pending' ",
            "AND (a.not_before IS NULL OR a.not_before <= $2) AND a.proposed_payload IS NULL ",
            "AND (CAST($5 AS TEXT) IS NULL OR a.destination IN ",
            $in_list,
            " OR (a.destination IS NULL AND $6)) ",
            "AND (a.after_key IS NULL OR EXISTS ",
            "(SELECT 1 FROM actions p WHERE p.key = a.after_key AND p.state = 'completed')) ",
            "ORDER BY a.id LIMIT $4",
            $lock,
            ") UPDATE actions SET state = 'in_progress', claimed_by = $1, ",
            "ownership_version = ownership_version + 1, revision = revision + 1, lease_expires_at = $3, ",
            "not_before = NULL, updated_at = $2 ",
            "WHERE id IN (SELECT id FROM picked) AND state = 'pending' RETURNING ",
            $crate::store::sql::action_columns!()
        )
    };
}
pub(crate) use claim_sql;

pub(crate) const SELECT_ACTION: &str = concat!("SELECT ", action_columns!(), " FROM actions WHERE key = $1");

/// What the statements generated for many rows need to know of a dialect.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dialect {
    pub(crate) params: Params,
    /// Appended to a read of rows about to change, to lock them until the transaction ends.
    pub(crate) lock_suffix: &'static str,
}

/// How a dialect writes bound parameters in generated statements.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Params {
    /// `$1, $2, ...` (PostgreSQL).
    Numbered,
    /// `?`, bound in order of appearance (SQLite). SQLite finds a numbered parameter's name by
    /// walking a list, so binding n numbered parameters takes n²/2 steps: for a page of 1,000
    /// new actions, most of the time of the whole submission.
    InOrder,
}

impl Params {
    /// The `n`th parameter (from 1) of a statement whose parameters appear in order.
    fn at(self, n: usize) -> String {
        match self {
            Self::Numbered => format!("${n}"),
            Self::InOrder => "?".to_owned(),
        }
    }
}

/// The statements that write many rows at once. A batch of one uses them too, so that each
/// write has one statement shape whatever the batch size.
///
/// Each value is cast to its column's type: PostgreSQL cannot infer the type of a parameter in a
/// `VALUES` list that is joined rather than inserted.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Cell {
    /// A bound parameter of this SQL type.
    Bind(&'static str),
    /// A constant written into the statement.
    Constant(&'static str),
}

/// One column of a statement written for many rows: its name, and what each row puts in it.
pub(crate) type Column = (&'static str, Cell);

const TEXT: Cell = Cell::Bind("TEXT");
const BIGINT: Cell = Cell::Bind("BIGINT");
const BOOLEAN: Cell = Cell::Bind("BOOLEAN");

/// At most this many bound parameters in one statement: below SQLite's 32,766 and PostgreSQL's
/// 65,535.
pub(crate) const MAX_BINDS_PER_STATEMENT: usize = 30_000;

/// How many rows of `row` fit in one statement.
pub(crate) fn rows_per_statement(row: &[Column]) -> usize {
    let binds = row.iter().filter(|(_, cell)| matches!(cell, Cell::Bind(_))).count().max(1);
    (MAX_BINDS_PER_STATEMENT / binds).max(1)
}

/// `rows` parenthesised rows shaped like `row`, with parameters numbered from `first`.
pub(crate) fn value_rows(params: Params, first: usize, rows: usize, row: &[Column]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let mut n = first;
    for r in 0..rows {
        out.push_str(if r == 0 { "(" } else { ", (" });
        for (c, (_, cell)) in row.iter().enumerate() {
            if c > 0 {
                out.push_str(", ");
            }
            match cell {
                Cell::Bind(ty) => {
                    let _ = write!(out, "CAST({} AS {ty})", params.at(n));
                    n += 1;
                }
                Cell::Constant(text) => out.push_str(text),
            }
        }
        out.push(')');
    }
    out
}

fn names(row: &[Column]) -> String {
    row.iter().map(|(name, _)| *name).collect::<Vec<_>>().join(", ")
}

/// `column = rows.column, ...` for the columns of `row` other than `except`.
fn set_from(rows: &str, row: &[Column], except: &[&str]) -> String {
    row.iter()
        .filter(|(name, _)| !except.contains(name))
        .map(|(name, _)| format!("{name} = {rows}.{name}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `count` parameters, numbered from `first`.
fn placeholders(params: Params, first: usize, count: usize) -> String {
    (first..first + count).map(|n| params.at(n)).collect::<Vec<_>>().join(", ")
}

/// Reads actions by key in key order, so that concurrent batches lock rows in one order.
pub(crate) fn lock_actions_sql(dialect: Dialect, keys: usize) -> String {
    format!(
        "SELECT {} FROM actions WHERE key IN ({}) ORDER BY key{}",
        action_columns!(),
        placeholders(dialect.params, 1, keys),
        dialect.lock_suffix
    )
}

pub(crate) const NEW_ACTION_ROW: &[Column] = &[
    ("key", TEXT),
    ("state", Cell::Constant("'pending'")),
    ("payload", TEXT),
    ("fingerprint", TEXT),
    ("source", TEXT),
    ("source_version", BIGINT),
    ("destination", TEXT),
    ("after_key", TEXT),
    ("ownership_version", Cell::Constant("0")),
    ("revision", Cell::Constant("1")),
    ("attempts", Cell::Constant("0")),
    ("attempts_in_round", Cell::Constant("0")),
    ("created_at", BIGINT),
    ("updated_at", BIGINT),
];

/// Inserts new pending actions, skipping keys that exist; returns the rows inserted.
pub(crate) fn insert_actions_sql(params: Params, rows: usize) -> String {
    format!(
        "INSERT INTO actions ({}) VALUES {} ON CONFLICT (key) DO NOTHING RETURNING {}",
        names(NEW_ACTION_ROW),
        value_rows(params, 1, rows, NEW_ACTION_ROW),
        action_columns!()
    )
}

/// Every mutable column of an action, the id that finds it and the revision it was read at.
pub(crate) const CHANGED_ACTION_ROW: &[Column] = &[
    ("id", BIGINT),
    ("state", TEXT),
    ("payload", TEXT),
    ("fingerprint", TEXT),
    ("proposed_payload", TEXT),
    ("proposed_fingerprint", TEXT),
    ("proposed_source_version", BIGINT),
    ("resume_state", TEXT),
    ("source", TEXT),
    ("source_version", BIGINT),
    ("destination", TEXT),
    ("after_key", TEXT),
    ("claimed_by", TEXT),
    ("ownership_version", BIGINT),
    ("lease_expires_at", BIGINT),
    ("not_before", BIGINT),
    ("attempts", BIGINT),
    ("attempts_in_round", BIGINT),
    ("assignee", TEXT),
    ("destination_id", TEXT),
    ("first_sent_at", BIGINT),
    ("last_error", TEXT),
    ("updated_at", BIGINT),
    ("revision", BIGINT),
];

/// Writes back every mutable field of many actions, each only if its revision is still the one
/// read, and advances their revisions.
pub(crate) fn update_actions_sql(params: Params, rows: usize) -> String {
    format!(
        "WITH changed ({}) AS (VALUES {}) UPDATE actions SET {}, revision = actions.revision + 1 \
         FROM changed WHERE actions.id = changed.id AND actions.revision = changed.revision",
        names(CHANGED_ACTION_ROW),
        value_rows(params, 1, rows, CHANGED_ACTION_ROW),
        set_from("changed", CHANGED_ACTION_ROW, &["id", "revision"])
    )
}

/// Counts an attempt under each claim that is still current (the first two parameters are the
/// time), in one conditional statement whose WHERE clause is the fencing check; returns the key
/// and attempt number of each claim counted.
pub(crate) fn count_attempts_sql(params: Params, claims: usize) -> String {
    let current = (0..claims)
        .map(|i| format!("(key = {} AND ownership_version = {})", params.at(3 + 2 * i), params.at(4 + 2 * i)))
        .collect::<Vec<_>>()
        .join(" OR ");
    format!(
        "UPDATE actions SET attempts = attempts + 1, attempts_in_round = attempts_in_round + 1, \
         first_sent_at = COALESCE(first_sent_at, {}), updated_at = {}, revision = revision + 1 \
         WHERE state = 'in_progress' AND ({current}) RETURNING key, attempts",
        params.at(1),
        params.at(2)
    )
}

pub(crate) const DELIVERY_ROW: &[Column] = &[
    ("action_key", TEXT),
    ("event_id", TEXT),
    ("source", TEXT),
    ("source_version", BIGINT),
    ("fingerprint", TEXT),
    ("outcome", TEXT),
    ("received_at", BIGINT),
];

pub(crate) fn insert_deliveries_sql(params: Params, rows: usize) -> String {
    format!("INSERT INTO deliveries ({}) VALUES {}", names(DELIVERY_ROW), value_rows(params, 1, rows, DELIVERY_ROW))
}

pub(crate) const ATTEMPT_ROW: &[Column] = &[
    ("action_key", TEXT),
    ("number", BIGINT),
    ("worker", TEXT),
    ("ownership_version", BIGINT),
    ("started_at", BIGINT),
    ("ended_at", BIGINT),
    ("outcome", TEXT),
    ("error", TEXT),
    ("response_status", BIGINT),
    ("destination_id", TEXT),
    ("response_body", TEXT),
    ("stale", BOOLEAN),
];

/// Inserts attempts; returns each new id with its action's key.
pub(crate) fn insert_attempts_sql(params: Params, rows: usize) -> String {
    format!(
        "INSERT INTO attempts ({}) VALUES {} RETURNING id, action_key",
        names(ATTEMPT_ROW),
        value_rows(params, 1, rows, ATTEMPT_ROW)
    )
}

/// How an attempt ended, and the id that finds it.
pub(crate) const FINISHED_ATTEMPT_ROW: &[Column] = &[
    ("id", BIGINT),
    ("ended_at", BIGINT),
    ("outcome", TEXT),
    ("error", TEXT),
    ("response_status", BIGINT),
    ("destination_id", TEXT),
    ("response_body", TEXT),
    ("stale", BOOLEAN),
];

/// Records the end of many attempts; an attempt that already ended is left as it was.
pub(crate) fn finish_attempts_sql(params: Params, rows: usize) -> String {
    format!(
        "WITH finished ({}) AS (VALUES {}) UPDATE attempts SET {} \
         FROM finished WHERE attempts.id = finished.id AND attempts.ended_at IS NULL",
        names(FINISHED_ATTEMPT_ROW),
        value_rows(params, 1, rows, FINISHED_ATTEMPT_ROW),
        set_from("finished", FINISHED_ATTEMPT_ROW, &["id"])
    )
}

pub(crate) const RENEW_LEASE: &str = "UPDATE actions SET lease_expires_at = $3 \
     WHERE key = $1 AND ownership_version = $2 AND state = 'in_progress'";

pub(crate) const ATTEMPT_STARTED_UNDER: &str =
    "SELECT COUNT(*) FROM attempts WHERE action_key = $1 AND ownership_version = $2";

pub(crate) const SELECT_ATTEMPT: &str = concat!("SELECT ", attempt_columns!(), " FROM attempts WHERE id = $1");

pub(crate) const SELECT_ATTEMPTS: &str =
    concat!("SELECT ", attempt_columns!(), " FROM attempts WHERE action_key = $1 ORDER BY id");

pub(crate) const INSERT_LOOKUP: &str = "INSERT INTO lookups \
     (action_key, at, actor, verdict, records, destination_id, response_status, response_body, detail) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";

pub(crate) const SELECT_LOOKUPS: &str = "SELECT id, action_key, at, actor, verdict, records, destination_id, \
     response_status, response_body, detail FROM lookups WHERE action_key = $1 ORDER BY id";

pub(crate) const APPEND_AUDIT_ROWS: &str = "INSERT INTO audit_trail \
     (action_key, at, actor, actor_kind, event, from_state, to_state, ownership_version, revision, reason) ";

/// Ten values per row: well within SQLite's 32,766 and PostgreSQL's 65,535 bound parameters.
pub(crate) const AUDIT_ROWS_PER_STATEMENT: usize = 500;

pub(crate) const INSERT_REFUSAL: &str = "INSERT INTO refused_submissions \
     (received_at, key_excerpt, problem, message, event_id, source, destination) \
     VALUES ($1, $2, $3, $4, $5, $6, $7)";

pub(crate) const SELECT_DELIVERIES: &str = "SELECT id, action_key, event_id, source, source_version, fingerprint, \
     outcome, received_at FROM deliveries WHERE action_key = $1 ORDER BY id";

pub(crate) const SELECT_AUDIT: &str = "SELECT id, action_key, at, actor, actor_kind, event, from_state, to_state, \
     ownership_version, revision, reason FROM audit_trail WHERE action_key = $1 ORDER BY id";

pub(crate) const LIST_REFUSED: &str = "SELECT id, received_at, key_excerpt, problem, message, event_id, source, \
     destination FROM refused_submissions WHERE ($1 IS NULL OR id < $1) ORDER BY id DESC LIMIT $2";

pub(crate) const COUNT_REFUSED: &str = "SELECT COUNT(*) FROM refused_submissions";

pub(crate) const COUNT_STALE_CLAIMS: &str =
    "SELECT COUNT(*) FROM actions WHERE state = 'in_progress' AND lease_expires_at <= $1";

/// A LIKE pattern matching `text` anywhere, with LIKE's own wildcards taken literally.
pub(crate) fn contains_pattern(text: &str) -> String {
    let escaped = text.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_");
    format!("%{escaped}%")
}

pub(crate) const COUNT_BY_STATE: &str = "SELECT state, COUNT(*) AS count FROM actions GROUP BY state";

pub(crate) const EXPIRED_CLAIMS: &str = concat!(
    "SELECT ",
    action_columns!(),
    " FROM actions WHERE state = 'in_progress' AND lease_expires_at <= $1 ORDER BY lease_expires_at LIMIT $2"
);

pub(crate) const PENDING_BACKOFFS: &str = "SELECT destination, MAX(not_before) AS until FROM actions \
     WHERE state = 'pending' AND not_before IS NOT NULL GROUP BY destination";

/// The console's page query for one pane, as `list` builds it for a state filter.
pub(crate) const PANE_PAGE: &str = concat!(
    "SELECT ",
    action_columns!(),
    " FROM actions WHERE 1 = 1 AND state = $1 AND id < $2 ORDER BY id DESC LIMIT $3"
);

pub(crate) const ENFORCED_PAIRS: &str = "SELECT from_state, to_state FROM state_transitions";

/// The store implementation, written once. Each backend supplies its store and transaction
/// types and the statements that differ: reading the clock (`None`: the database runs in this
/// process, so its clock is this host's), the [`Dialect`] of generated statements, and claiming.
macro_rules! impl_store {
    (
        store = $store:ty,
        tx = $tx:ident,
        database = $db:ty,
        begin_sql = $begin_sql:literal,
        now_sql = $now_sql:expr,
        dialect = $dialect:expr,
        claim_sql = $claim_sql:expr,
        $($extra:item)*
    ) => {
        /// A write transaction on this backend.
        #[derive(Debug)]
        pub struct $tx {
            tx: sqlx::Transaction<'static, $db>,
            clock_offset_ms: i64,
            /// Audit entries waiting for the commit; nothing in a transaction reads them back.
            audit: Vec<$crate::domain::AuditEntry>,
        }

        impl $tx {
            /// Writes the waiting audit entries, many rows per statement.
            async fn write_audit(&mut self) -> Result<(), $crate::store::StoreError> {
                for chunk in self.audit.chunks($crate::store::sql::AUDIT_ROWS_PER_STATEMENT) {
                    let mut q = sqlx::QueryBuilder::<$db>::new($crate::store::sql::APPEND_AUDIT_ROWS);
                    q.push_values(chunk, |mut row, e| {
                        row.push_bind(e.key.as_str())
                            .push_bind(e.at.timestamp_millis())
                            .push_bind(e.actor.as_str())
                            .push_bind(e.actor_kind.as_str())
                            .push_bind(e.event.as_str())
                            .push_bind(e.from_state.map(|s| s.as_str()))
                            .push_bind(e.to_state.as_str())
                            .push_bind(e.ownership_version)
                            .push_bind(e.revision)
                            .push_bind(e.reason.as_deref());
                    });
                    q.build().execute(&mut *self.tx).await?;
                }
                self.audit.clear();
                Ok(())
            }
        }

        impl $crate::store::LedgerTx for $tx {
            async fn now(&mut self) -> Result<$crate::domain::Timestamp, $crate::store::StoreError> {
                let ms: i64 = match $now_sql {
                    Some(sql) => sqlx::query_scalar(sql).fetch_one(&mut *self.tx).await?,
                    None => chrono::Utc::now().timestamp_millis(),
                };
                Ok($crate::domain::record::from_millis(ms + self.clock_offset_ms))
            }

            async fn lock_actions(
                &mut self,
                keys: &[&$crate::domain::ActionKey],
            ) -> Result<Vec<$crate::domain::ActionRecord>, $crate::store::StoreError> {
                let mut keys = keys.to_vec();
                keys.sort();
                keys.dedup();
                let mut actions = Vec::with_capacity(keys.len());
                for chunk in keys.chunks($crate::store::sql::MAX_BINDS_PER_STATEMENT) {
                    let sql = $crate::store::sql::lock_actions_sql($dialect, chunk.len());
                    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
                    for key in chunk {
                        q = q.bind(key.as_str());
                    }
                    for row in q.fetch_all(&mut *self.tx).await? {
                        actions.push($crate::store::rows::action_from_row(&row)?);
                    }
                }
                Ok(actions)
            }

            async fn insert_actions_if_absent(
                &mut self,
                new: &[$crate::domain::ActionRecord],
            ) -> Result<Vec<$crate::domain::ActionRecord>, $crate::store::StoreError> {
                let mut inserted = Vec::with_capacity(new.len());
                let rows = $crate::store::sql::rows_per_statement($crate::store::sql::NEW_ACTION_ROW);
                for chunk in new.chunks(rows) {
                    let mut q = sqlx::query(sqlx::AssertSqlSafe($crate::store::sql::insert_actions_sql($dialect.params, chunk.len())));
                    for a in chunk {
                        q = q
                            .bind(a.key.as_str())
                            .bind(a.payload.canonical())
                            .bind(a.payload.fingerprint().as_str())
                            .bind(a.source.as_deref())
                            .bind(a.source_version)
                            .bind(a.destination.as_deref())
                            .bind(a.after.as_ref().map(|k| k.as_str()))
                            .bind(a.created_at.timestamp_millis())
                            .bind(a.created_at.timestamp_millis());
                    }
                    for row in q.fetch_all(&mut *self.tx).await? {
                        inserted.push($crate::store::rows::action_from_row(&row)?);
                    }
                }
                Ok(inserted)
            }

            async fn update_actions(
                &mut self,
                changed: &[&$crate::domain::ActionRecord],
            ) -> Result<u64, $crate::store::StoreError> {
                let ms = |t: Option<$crate::domain::Timestamp>| t.map(|t| t.timestamp_millis());
                let mut written = 0;
                let rows = $crate::store::sql::rows_per_statement($crate::store::sql::CHANGED_ACTION_ROW);
                for chunk in changed.chunks(rows) {
                    let mut q = sqlx::query(sqlx::AssertSqlSafe($crate::store::sql::update_actions_sql($dialect.params, chunk.len())));
                    for a in chunk {
                        q = q
                            .bind(a.id)
                            .bind(a.state.as_str())
                            .bind(a.payload.canonical())
                            .bind(a.payload.fingerprint().as_str())
                            .bind(a.proposal.as_ref().map(|p| p.payload.canonical()))
                            .bind(a.proposal.as_ref().map(|p| p.payload.fingerprint().as_str()))
                            .bind(a.proposal.as_ref().and_then(|p| p.source_version))
                            .bind(a.resume_state.map(|s| s.as_str()))
                            .bind(a.source.as_deref())
                            .bind(a.source_version)
                            .bind(a.destination.as_deref())
                            .bind(a.after.as_ref().map(|k| k.as_str()))
                            .bind(a.claimed_by.as_deref())
                            .bind(a.ownership_version)
                            .bind(ms(a.lease_expires_at))
                            .bind(ms(a.not_before))
                            .bind(a.attempts)
                            .bind(a.attempts_in_round)
                            .bind(a.assignee.as_deref())
                            .bind(a.destination_id.as_deref())
                            .bind(ms(a.first_sent_at))
                            .bind(a.last_error.as_deref())
                            .bind(a.updated_at.timestamp_millis())
                            .bind(a.revision);
                    }
                    written += q.execute(&mut *self.tx).await?.rows_affected();
                }
                Ok(written)
            }

            async fn claim_pending(
                &mut self,
                worker: &str,
                now: $crate::domain::Timestamp,
                lease_until: $crate::domain::Timestamp,
                limit: i64,
                scope: &$crate::store::ClaimScope,
            ) -> Result<Vec<$crate::domain::ActionRecord>, $crate::store::StoreError> {
                let destinations = scope.destinations.as_ref().map(|d| serde_json::Value::from(d.clone()).to_string());
                let rows = sqlx::query($claim_sql)
                    .bind(worker)
                    .bind(now.timestamp_millis())
                    .bind(lease_until.timestamp_millis())
                    .bind(limit)
                    .bind(destinations)
                    .bind(scope.include_unassigned)
                    .fetch_all(&mut *self.tx)
                    .await?;
                rows.iter().map($crate::store::rows::action_from_row).collect()
            }

            async fn renew_lease(
                &mut self,
                key: &$crate::domain::ActionKey,
                ownership_version: i64,
                until: $crate::domain::Timestamp,
            ) -> Result<bool, $crate::store::StoreError> {
                let result = sqlx::query($crate::store::sql::RENEW_LEASE)
                    .bind(key.as_str())
                    .bind(ownership_version)
                    .bind(until.timestamp_millis())
                    .execute(&mut *self.tx)
                    .await?;
                Ok(result.rows_affected() == 1)
            }

            async fn count_attempts(
                &mut self,
                claims: &[(&$crate::domain::ActionKey, i64)],
                now: $crate::domain::Timestamp,
            ) -> Result<Vec<($crate::domain::ActionKey, i64)>, $crate::store::StoreError> {
                let mut counted = Vec::with_capacity(claims.len());
                for chunk in claims.chunks($crate::store::sql::MAX_BINDS_PER_STATEMENT / 2) {
                    let sql = $crate::store::sql::count_attempts_sql($dialect.params, chunk.len());
                    let now = now.timestamp_millis();
                    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now).bind(now);
                    for (key, ownership_version) in chunk {
                        q = q.bind(key.as_str()).bind(*ownership_version);
                    }
                    for row in q.fetch_all(&mut *self.tx).await? {
                        counted.push($crate::store::rows::keyed_number(&row, "key", "attempts")?);
                    }
                }
                Ok(counted)
            }

            async fn attempt_started_under(
                &mut self,
                key: &$crate::domain::ActionKey,
                ownership_version: i64,
            ) -> Result<bool, $crate::store::StoreError> {
                let count: i64 = sqlx::query_scalar($crate::store::sql::ATTEMPT_STARTED_UNDER)
                    .bind(key.as_str())
                    .bind(ownership_version)
                    .fetch_one(&mut *self.tx)
                    .await?;
                Ok(count > 0)
            }

            async fn find_attempt(
                &mut self,
                id: i64,
            ) -> Result<Option<$crate::domain::Attempt>, $crate::store::StoreError> {
                let row =
                    sqlx::query($crate::store::sql::SELECT_ATTEMPT).bind(id).fetch_optional(&mut *self.tx).await?;
                row.as_ref().map($crate::store::rows::attempt_from_row).transpose()
            }

            async fn insert_deliveries(
                &mut self,
                deliveries: &[$crate::domain::Delivery],
            ) -> Result<(), $crate::store::StoreError> {
                let rows = $crate::store::sql::rows_per_statement($crate::store::sql::DELIVERY_ROW);
                for chunk in deliveries.chunks(rows) {
                    let sql = $crate::store::sql::insert_deliveries_sql($dialect.params, chunk.len());
                    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
                    for d in chunk {
                        q = q
                            .bind(d.key.as_str())
                            .bind(d.event_id.as_deref())
                            .bind(d.source.as_deref())
                            .bind(d.source_version)
                            .bind(d.fingerprint.as_str())
                            .bind(d.outcome.as_str())
                            .bind(d.received_at.timestamp_millis());
                    }
                    q.execute(&mut *self.tx).await?;
                }
                Ok(())
            }

            async fn insert_attempts(
                &mut self,
                attempts: &[$crate::domain::Attempt],
            ) -> Result<Vec<($crate::domain::ActionKey, i64)>, $crate::store::StoreError> {
                let mut ids = Vec::with_capacity(attempts.len());
                let rows = $crate::store::sql::rows_per_statement($crate::store::sql::ATTEMPT_ROW);
                for chunk in attempts.chunks(rows) {
                    let sql = $crate::store::sql::insert_attempts_sql($dialect.params, chunk.len());
                    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
                    for a in chunk {
                        q = q
                            .bind(a.key.as_str())
                            .bind(a.number)
                            .bind(a.worker.as_str())
                            .bind(a.ownership_version)
                            .bind(a.started_at.timestamp_millis())
                            .bind(a.ended_at.map(|t| t.timestamp_millis()))
                            .bind(a.outcome.map(|o| o.as_str()))
                            .bind(a.error.as_deref())
                            .bind(a.evidence.status)
                            .bind(a.evidence.destination_id.as_deref())
                            .bind(a.evidence.body.as_deref())
                            .bind(a.stale);
                    }
                    for row in q.fetch_all(&mut *self.tx).await? {
                        ids.push($crate::store::rows::keyed_number(&row, "action_key", "id")?);
                    }
                }
                Ok(ids)
            }

            async fn finish_attempts(
                &mut self,
                attempts: &[$crate::domain::Attempt],
            ) -> Result<(), $crate::store::StoreError> {
                let rows = $crate::store::sql::rows_per_statement($crate::store::sql::FINISHED_ATTEMPT_ROW);
                for chunk in attempts.chunks(rows) {
                    let sql = $crate::store::sql::finish_attempts_sql($dialect.params, chunk.len());
                    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
                    for a in chunk {
                        q = q
                            .bind(a.id)
                            .bind(a.ended_at.map(|t| t.timestamp_millis()))
                            .bind(a.outcome.map(|o| o.as_str()))
                            .bind(a.error.as_deref())
                            .bind(a.evidence.status)
                            .bind(a.evidence.destination_id.as_deref())
                            .bind(a.evidence.body.as_deref())
                            .bind(a.stale);
                    }
                    q.execute(&mut *self.tx).await?;
                }
                Ok(())
            }

            async fn insert_lookup(
                &mut self,
                l: &$crate::domain::LookupRecord,
            ) -> Result<(), $crate::store::StoreError> {
                sqlx::query($crate::store::sql::INSERT_LOOKUP)
                    .bind(l.key.as_str())
                    .bind(l.at.timestamp_millis())
                    .bind(l.actor.as_str())
                    .bind(l.verdict.as_str())
                    .bind(l.records)
                    .bind(l.destination_id.as_deref())
                    .bind(l.evidence.status)
                    .bind(l.evidence.body.as_deref())
                    .bind(l.detail.as_deref())
                    .execute(&mut *self.tx)
                    .await?;
                Ok(())
            }

            async fn append_audit(&mut self, e: &$crate::domain::AuditEntry) -> Result<(), $crate::store::StoreError> {
                self.audit.push(e.clone());
                Ok(())
            }

            async fn insert_refusal(
                &mut self,
                r: &$crate::domain::RefusedSubmission,
            ) -> Result<(), $crate::store::StoreError> {
                sqlx::query($crate::store::sql::INSERT_REFUSAL)
                    .bind(r.received_at.timestamp_millis())
                    .bind(r.key_excerpt.as_deref())
                    .bind(r.problem.as_str())
                    .bind(r.message.as_str())
                    .bind(r.event_id.as_deref())
                    .bind(r.source.as_deref())
                    .bind(r.destination.as_deref())
                    .execute(&mut *self.tx)
                    .await?;
                Ok(())
            }

            async fn commit(mut self) -> Result<(), $crate::store::StoreError> {
                self.write_audit().await?;
                self.tx.commit().await?;
                Ok(())
            }

            async fn rollback(self) -> Result<(), $crate::store::StoreError> {
                self.tx.rollback().await?;
                Ok(())
            }
        }

        impl $crate::store::Store for $store {
            type Tx = $tx;

            async fn begin(&self) -> Result<$tx, $crate::store::StoreError> {
                let tx = self.pool.begin_with($begin_sql).await?;
                Ok($tx { tx, clock_offset_ms: self.clock_offset_ms(), audit: Vec::new() })
            }

            async fn now(&self) -> Result<$crate::domain::Timestamp, $crate::store::StoreError> {
                let ms: i64 = match $now_sql {
                    Some(sql) => sqlx::query_scalar(sql).fetch_one(&self.pool).await?,
                    None => chrono::Utc::now().timestamp_millis(),
                };
                Ok($crate::domain::record::from_millis(ms + self.clock_offset_ms()))
            }

            async fn find(
                &self,
                key: &$crate::domain::ActionKey,
            ) -> Result<Option<$crate::domain::ActionRecord>, $crate::store::StoreError> {
                let row = sqlx::query($crate::store::sql::SELECT_ACTION)
                    .bind(key.as_str())
                    .fetch_optional(&self.pool)
                    .await?;
                row.as_ref().map($crate::store::rows::action_from_row).transpose()
            }

            async fn deliveries(
                &self,
                key: &$crate::domain::ActionKey,
            ) -> Result<Vec<$crate::domain::Delivery>, $crate::store::StoreError> {
                let rows =
                    sqlx::query($crate::store::sql::SELECT_DELIVERIES).bind(key.as_str()).fetch_all(&self.pool).await?;
                rows.iter().map($crate::store::rows::delivery_from_row).collect()
            }

            async fn attempts(
                &self,
                key: &$crate::domain::ActionKey,
            ) -> Result<Vec<$crate::domain::Attempt>, $crate::store::StoreError> {
                let rows =
                    sqlx::query($crate::store::sql::SELECT_ATTEMPTS).bind(key.as_str()).fetch_all(&self.pool).await?;
                rows.iter().map($crate::store::rows::attempt_from_row).collect()
            }

            async fn audit_trail(
                &self,
                key: &$crate::domain::ActionKey,
            ) -> Result<Vec<$crate::domain::AuditEntry>, $crate::store::StoreError> {
                let rows =
                    sqlx::query($crate::store::sql::SELECT_AUDIT).bind(key.as_str()).fetch_all(&self.pool).await?;
                rows.iter().map($crate::store::rows::audit_from_row).collect()
            }

            async fn lookups(
                &self,
                key: &$crate::domain::ActionKey,
            ) -> Result<Vec<$crate::domain::LookupRecord>, $crate::store::StoreError> {
                let rows =
                    sqlx::query($crate::store::sql::SELECT_LOOKUPS).bind(key.as_str()).fetch_all(&self.pool).await?;
                rows.iter().map($crate::store::rows::lookup_from_row).collect()
            }

            async fn list(
                &self,
                f: &$crate::store::ListFilter,
            ) -> Result<Vec<$crate::domain::ActionRecord>, $crate::store::StoreError> {
                // Built per filter so that each combination gets a plan that uses its index.
                let mut q = sqlx::QueryBuilder::<$db>::new(concat!(
                    "SELECT ",
                    $crate::store::sql::action_columns!(),
                    " FROM actions WHERE 1 = 1"
                ));
                if let Some(state) = f.state {
                    q.push(" AND state = ").push_bind(state.as_str());
                }
                if let Some(destination) = &f.destination {
                    q.push(" AND destination = ").push_bind(destination.clone());
                }
                if let Some(owner) = &f.owner {
                    q.push(" AND (claimed_by = ").push_bind(owner.clone());
                    q.push(" OR assignee = ").push_bind(owner.clone()).push(")");
                }
                if let Some(id) = f.before_id {
                    q.push(" AND id < ").push_bind(id);
                }
                if let Some(id) = f.after_id {
                    q.push(" AND id > ").push_bind(id);
                }
                if let Some(since) = f.created_since {
                    q.push(" AND created_at >= ").push_bind(since.timestamp_millis());
                }
                if let Some(text) = &f.key_contains {
                    q.push(" AND key LIKE ").push_bind($crate::store::sql::contains_pattern(text)).push(" ESCAPE '\\'");
                }
                let ascending = f.after_id.is_some();
                q.push(if ascending { " ORDER BY id ASC LIMIT " } else { " ORDER BY id DESC LIMIT " }).push_bind(f.limit);
                let rows = q.build().fetch_all(&self.pool).await?;
                let mut actions = rows.iter().map($crate::store::rows::action_from_row).collect::<Result<Vec<_>, _>>()?;
                if ascending {
                    actions.reverse();
                }
                Ok(actions)
            }

            async fn list_refused(
                &self,
                before_id: Option<i64>,
                limit: i64,
            ) -> Result<Vec<$crate::domain::RefusedSubmission>, $crate::store::StoreError> {
                let rows = sqlx::query($crate::store::sql::LIST_REFUSED)
                    .bind(before_id)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter().map($crate::store::rows::refusal_from_row).collect()
            }

            async fn count_by_state(&self) -> Result<Vec<($crate::domain::State, i64)>, $crate::store::StoreError> {
                let rows = sqlx::query($crate::store::sql::COUNT_BY_STATE).fetch_all(&self.pool).await?;
                rows.iter().map($crate::store::rows::state_count_from_row).collect()
            }

            async fn count_refused(&self) -> Result<i64, $crate::store::StoreError> {
                Ok(sqlx::query_scalar($crate::store::sql::COUNT_REFUSED).fetch_one(&self.pool).await?)
            }

            async fn count_stale_claims(&self) -> Result<i64, $crate::store::StoreError> {
                let now = $crate::store::Store::now(self).await?;
                Ok(sqlx::query_scalar($crate::store::sql::COUNT_STALE_CLAIMS)
                    .bind(now.timestamp_millis())
                    .fetch_one(&self.pool)
                    .await?)
            }

            async fn expired_claims(
                &self,
                limit: i64,
            ) -> Result<Vec<$crate::domain::ActionRecord>, $crate::store::StoreError> {
                let now = $crate::store::Store::now(self).await?;
                let rows = sqlx::query($crate::store::sql::EXPIRED_CLAIMS)
                    .bind(now.timestamp_millis())
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter().map($crate::store::rows::action_from_row).collect()
            }

            async fn pending_backoffs(
                &self,
            ) -> Result<Vec<(Option<String>, $crate::domain::Timestamp)>, $crate::store::StoreError> {
                let rows = sqlx::query($crate::store::sql::PENDING_BACKOFFS).fetch_all(&self.pool).await?;
                rows.iter().map($crate::store::rows::backoff_from_row).collect()
            }

            async fn enforced_state_pairs(
                &self,
            ) -> Result<Vec<($crate::domain::State, $crate::domain::State)>, $crate::store::StoreError> {
                let rows = sqlx::query($crate::store::sql::ENFORCED_PAIRS).fetch_all(&self.pool).await?;
                rows.iter().map($crate::store::rows::state_pair_from_row).collect()
            }

            fn advance_clock(&self, by: std::time::Duration) {
                let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
                self.clock_offset.fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
            }

            async fn close(&self) {
                self.pool.close().await;
            }

            $($extra)*
        }

        impl $store {
            fn clock_offset_ms(&self) -> i64 {
                self.clock_offset.load(std::sync::atomic::Ordering::SeqCst)
            }
        }
    };
}
pub(crate) use impl_store;
