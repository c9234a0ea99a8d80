//! What the one store implementation needs of each database: where its SQL differs, how it binds
//! a value, and how it runs a statement.

use super::rows::Columns;
use sqlx::error::BoxDynError;
use std::borrow::Cow;
use std::future::Future;

/// The few places where the two dialects' statements differ; everything else is written once in
/// [`super::statements`].
#[derive(Debug, Clone, Copy)]
pub struct Dialect {
    pub params: Params,
    /// Starts a write transaction.
    pub begin: &'static str,
    /// Reads the database's clock in milliseconds, as column `now`; `None` where the database runs
    /// inside this process, so that its clock is this host's.
    pub clock: Option<&'static str>,
    /// Appended to a read of rows about to change, to lock them until the transaction ends.
    pub lock_suffix: &'static str,
    /// Whether one statement may write several tables (data-modifying CTEs, PostgreSQL): then a
    /// claim with its audit entries, and the start of attempts, are each one autocommitted
    /// statement, and a transaction's deferred writes go out as one statement. Where it may not
    /// (SQLite), each is a short transaction of separate statements, which cost no round trip
    /// there: the database runs inside this process.
    pub writes_in_one_statement: bool,
    /// Whether several statements joined by `;` go to the database as one command, their `?`
    /// parameters bound in order across them (sqlx-sqlite runs such a text in one call to the
    /// connection's thread: SQLite). Then a short write transaction is sent with `BEGIN` before
    /// its first statement and `COMMIT` after its last, and a result's writes go together: each
    /// command is a hop to that thread and back while the write lock is held. PostgreSQL's
    /// extended protocol takes one statement per query with parameters.
    pub statements_in_one_command: bool,
    /// Asks whether this session may purge, as column `may`, with its role's name as `role`;
    /// `None` where the database has no roles.
    pub purge_permission: Option<&'static str>,
    /// Makes submissions that wait for another action take turns until their transactions end,
    /// where transactions do not already (see [`super::statements::AFTER_LINKS`]).
    pub after_links_lock: Option<&'static str>,
    /// The texts of the JSON list in parameter `$3`, as a subquery's rows.
    pub json_texts_of_third: &'static str,
}

/// How a dialect writes the parameters of generated statements.
#[derive(Debug, Clone, Copy)]
pub enum Params {
    /// `$1, $2, ...` (PostgreSQL).
    Numbered,
    /// `?`, bound in order of appearance (SQLite). SQLite finds a numbered parameter's name by
    /// walking a list, so binding n numbered parameters takes n²/2 steps: for a page of 1,000
    /// new actions, most of the time of the whole submission.
    InOrder,
}

impl Params {
    /// The `n`th parameter (from 1) of a statement whose parameters appear in order.
    pub fn at(self, n: usize) -> String {
        match self {
            Self::Numbered => format!("${n}"),
            Self::InOrder => "?".to_owned(),
        }
    }
}

/// A ledger database as the shared code sees it. The two implementations (in `sqlite.rs` and
/// `postgres.rs`) only name their dialect and hand statements to sqlx: sqlx's own traits cannot
/// say, for any database, that a connection runs queries or that a string can be bound.
pub trait Backend: sqlx::Database<Row: Columns> {
    const DIALECT: Dialect;

    fn add_text(arguments: &mut Self::Arguments, value: Option<&str>) -> Result<(), BoxDynError>;
    fn add_int(arguments: &mut Self::Arguments, value: Option<i64>) -> Result<(), BoxDynError>;
    fn add_flag(arguments: &mut Self::Arguments, value: bool) -> Result<(), BoxDynError>;

    fn fetch_all(
        connection: &mut Self::Connection,
        statement: Statement<Self>,
    ) -> impl Future<Output = Result<Vec<Self::Row>, sqlx::Error>> + Send;
    fn fetch_optional(
        connection: &mut Self::Connection,
        statement: Statement<Self>,
    ) -> impl Future<Output = Result<Option<Self::Row>, sqlx::Error>> + Send;
    /// Runs a statement that answers exactly one row.
    fn fetch_one(
        connection: &mut Self::Connection,
        statement: Statement<Self>,
    ) -> impl Future<Output = Result<Self::Row, sqlx::Error>> + Send {
        async { Self::fetch_optional(connection, statement).await?.ok_or(sqlx::Error::RowNotFound) }
    }
    /// Runs a statement that returns no rows; answers how many rows it changed.
    fn execute(
        connection: &mut Self::Connection,
        statement: Statement<Self>,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;
}

/// A statement's text and the values bound to its parameters so far, in the dialect of `B`.
pub struct Statement<B: Backend> {
    sql: Cow<'static, str>,
    /// The first value that failed to encode is kept and reported when the statement runs, as
    /// `sqlx::Query::bind` does.
    arguments: Result<B::Arguments, BoxDynError>,
}

impl<B: Backend> std::fmt::Debug for Statement<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bound = self.arguments.as_ref().map(sqlx::Arguments::len);
        f.debug_struct("Statement").field("sql", &self.sql).field("bound", &bound).finish()
    }
}

impl<B: Backend> Statement<B> {
    pub fn new(sql: impl Into<Cow<'static, str>>) -> Self {
        Self { sql: sql.into(), arguments: Ok(B::Arguments::default()) }
    }

    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// Binds the next parameter.
    pub fn text<'v>(self, value: impl Into<Option<&'v str>>) -> Self {
        let value = value.into();
        self.add(|arguments| B::add_text(arguments, value))
    }

    /// Binds the next parameter.
    pub fn int(self, value: impl Into<Option<i64>>) -> Self {
        let value = value.into();
        self.add(|arguments| B::add_int(arguments, value))
    }

    /// Binds the next parameter.
    pub fn flag(self, value: bool) -> Self {
        self.add(|arguments| B::add_flag(arguments, value))
    }

    /// Puts a statement without parameters (a `BEGIN`) before this one, to be sent with it as one
    /// command (see [`Dialect::statements_in_one_command`]).
    pub fn after(mut self, sql: &str) -> Self {
        self.sql = format!("{sql}; {}", self.sql).into();
        self
    }

    /// Appends to the statement's text.
    pub fn push(mut self, sql: &str) -> Self {
        self.sql.to_mut().push_str(sql);
        self
    }

    /// Appends the next parameter to the statement's text and binds it.
    pub fn push_text<'v>(self, value: impl Into<Option<&'v str>>) -> Self {
        self.push_param().text(value)
    }

    /// Appends the next parameter to the statement's text and binds it.
    pub fn push_int(self, value: impl Into<Option<i64>>) -> Self {
        self.push_param().int(value)
    }

    fn push_param(self) -> Self {
        let bound = self.arguments.as_ref().map_or(0, sqlx::Arguments::len);
        let param = B::DIALECT.params.at(bound + 1);
        self.push(&param)
    }

    fn add(mut self, add: impl FnOnce(&mut B::Arguments) -> Result<(), BoxDynError>) -> Self {
        if let Ok(arguments) = &mut self.arguments
            && let Err(error) = add(arguments)
        {
            self.arguments = Err(error);
        }
        self
    }

    /// The text, ready for sqlx, and the bound values.
    pub fn into_parts(self) -> Result<(sqlx::AssertSqlSafe<Cow<'static, str>>, B::Arguments), sqlx::Error> {
        Ok((sqlx::AssertSqlSafe(self.sql), self.arguments.map_err(sqlx::Error::Encode)?))
    }
}
