//! The SQLite store: the embedded default ledger, one file on local disk.

use super::backend::{Backend, Dialect, Statement};
use super::migration::{AppliedMigration, ExportedMigration, SchemaStatus};
use super::sql_store::SqlStore;
use super::statements;
use super::wake::RunnableSignal;
use super::{Clock, ReadOnlyReason, StoreError};
use sqlx::error::BoxDynError;
use sqlx::migrate::MigrateError;
use sqlx::sqlite::{
    SqliteArguments, SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{Arguments as _, ConnectOptions as _, Connection as _, Sqlite};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// How long a writer waits for the single write lock before reporting the database busy.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// A statement (with its wait for the write lock) slower than this is logged as a warning.
const SLOW_STATEMENT: Duration = Duration::from_secs(5);

/// A ledger in one SQLite file, opened in WAL mode with every write transaction immediate.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: sqlx::SqlitePool,
    clock: Clock,
    file: Arc<LedgerFile>,
    runnable: RunnableSignal,
}

/// The ledger file this store opened: its path and the file (device and inode) the path named
/// then. Connections keep the file they opened, whatever later happens to the path, so a file
/// deleted or replaced under a running process leaves it working a ledger nobody else sees.
#[derive(Debug)]
struct LedgerFile {
    path: PathBuf,
    device: u64,
    inode: u64,
}

impl LedgerFile {
    fn identify(path: &Path) -> Result<Self, StoreError> {
        use std::os::unix::fs::MetadataExt as _;
        let metadata = std::fs::metadata(path)
            .map_err(|e| StoreError::Open(format!("cannot read the ledger file {}: {e}", path.display())))?;
        Ok(Self { path: path.to_path_buf(), device: metadata.dev(), inode: metadata.ino() })
    }

    /// Whether the path still names the file opened; the problem otherwise.
    fn check(&self) -> Result<(), StoreError> {
        use std::os::unix::fs::MetadataExt as _;
        let replaced = |problem: String| StoreError::FileReplaced { path: self.path.display().to_string(), problem };
        match std::fs::metadata(&self.path) {
            Ok(now) if (now.dev(), now.ino()) == (self.device, self.inode) => Ok(()),
            Ok(now) => Err(replaced(format!(
                "another file now has its name (device {} inode {}; the one opened was device {} inode {})",
                now.dev(),
                now.ino(),
                self.device,
                self.inode
            ))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(replaced("it was deleted".to_owned())),
            Err(e) => Err(replaced(format!("it can no longer be read: {e}"))),
        }
    }
}

impl SqlStore for SqliteStore {
    type Backend = Sqlite;

    fn connections(&self) -> &sqlx::SqlitePool {
        &self.pool
    }

    fn clock(&self) -> &Clock {
        &self.clock
    }

    fn runnable(&self) -> &RunnableSignal {
        &self.runnable
    }

    fn check_file(&self) -> Result<(), StoreError> {
        self.file.check()
    }

    async fn schema_status(&self) -> Result<SchemaStatus, StoreError> {
        read_status(&self.pool, "the ledger file", &sqlx::migrate!("migrations/sqlite")).await
    }
}

impl Backend for Sqlite {
    const DIALECT: Dialect = statements::SQLITE;

    fn add_text(arguments: &mut SqliteArguments, value: Option<&str>) -> Result<(), BoxDynError> {
        arguments.add(value)
    }

    fn add_int(arguments: &mut SqliteArguments, value: Option<i64>) -> Result<(), BoxDynError> {
        arguments.add(value)
    }

    fn add_flag(arguments: &mut SqliteArguments, value: bool) -> Result<(), BoxDynError> {
        arguments.add(value)
    }

    async fn fetch_all(
        connection: &mut SqliteConnection,
        statement: Statement<Self>,
    ) -> Result<Vec<SqliteRow>, sqlx::Error> {
        let (sql, arguments) = statement.into_parts()?;
        sqlx::query_with(sql, arguments).fetch_all(connection).await
    }

    async fn fetch_optional(
        connection: &mut SqliteConnection,
        statement: Statement<Self>,
    ) -> Result<Option<SqliteRow>, sqlx::Error> {
        let (sql, arguments) = statement.into_parts()?;
        sqlx::query_with(sql, arguments).fetch_optional(connection).await
    }

    async fn execute(connection: &mut SqliteConnection, statement: Statement<Self>) -> Result<u64, sqlx::Error> {
        let (sql, arguments) = statement.into_parts()?;
        Ok(sqlx::query_with(sql, arguments).execute(connection).await?.rows_affected())
    }
}

impl SqliteStore {
    /// Opens (creating if needed, with mode 0600) and migrates the ledger at a `sqlite://` URL.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        Self::open_with(url, SqliteSynchronous::Full).await
    }

    /// Opens the ledger at a `sqlite://` URL only if it exists, for commands that only read:
    /// they never create a file.
    pub async fn open_existing(url: &str) -> Result<Self, StoreError> {
        Self::open_at(url, SqliteSynchronous::Full, false).await
    }

    /// Like [`SqliteStore::open`] with a chosen commit durability: `Full` survives power loss,
    /// `Normal` (in WAL mode) only a crash of the process. Benchmarks compare the two.
    pub async fn open_with(url: &str, synchronous: SqliteSynchronous) -> Result<Self, StoreError> {
        Self::open_at(url, synchronous, true).await
    }

    async fn open_at(url: &str, synchronous: SqliteSynchronous, create: bool) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::Open(format!("{url} is not a valid SQLite URL: {e}")))?;
        let path = options.get_filename().to_path_buf();
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        if in_memory || path.as_os_str().is_empty() {
            return Err(StoreError::Open(
                "an in-memory SQLite ledger would lose every record on exit; give a file, e.g. sqlite://actionledger.db"
                    .to_owned(),
            ));
        }
        if create {
            create_private_file(&path)?;
        } else if !path.exists() {
            return Err(StoreError::Missing { ledger: url.to_owned() });
        }
        // Commands that read read a ledger on a read-only filesystem as it is, if they can
        // (`frozen`); everything else that cannot be written is refused with the reason
        // (`unwritable`).
        let options = if !create && frozen(&path) {
            options.read_only(true).immutable(true)
        } else {
            options.journal_mode(SqliteJournalMode::Wal)
        };
        let options = options
            .create_if_missing(false)
            .synchronous(synchronous)
            .busy_timeout(BUSY_TIMEOUT)
            // A write transaction's first command carries its BEGIN IMMEDIATE, so its time includes
            // the wait for the write lock, which 16 writers at once make up to a second or two:
            // warned of only when the wait is long enough to matter (sqlx's default is 1 s).
            .log_slow_statements(log::LevelFilter::Warn, SLOW_STATEMENT)
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .acquire_timeout(BUSY_TIMEOUT)
            // No ping on every acquire: the database runs inside this process, and the ping is
            // one more hop to the connection's thread for each transaction (a connection whose
            // thread has gone answers its next statement with an error, and is closed then).
            .test_before_acquire(false)
            // When a commit fails on a full disk or an I/O error, SQLite rolls the transaction back by
            // itself; sqlx's own ROLLBACK then fails and it goes on counting the connection as inside a
            // transaction, so every later BEGIN on it would be refused. Such a connection is closed
            // rather than pooled. A dropped transaction's rollback may still be queued when the
            // connection comes back, so it is let run (the ping) before the connection is judged.
            .after_release(|connection, _| {
                Box::pin(async move {
                    if connection.is_in_transaction() {
                        connection.ping().await?;
                    }
                    Ok(!connection.is_in_transaction())
                })
            })
            .connect_with(options)
            .await
            .map_err(|e| unwritable(&path).unwrap_or_else(|| StoreError::Open(format!("{}: {e}", path.display()))))?;
        migrate(&pool, url).await.map_err(|e| unwritable(&path).unwrap_or(e))?;
        let file = Arc::new(LedgerFile::identify(&path)?);
        Ok(Self { pool, clock: Clock::database(), file, runnable: RunnableSignal::default() })
    }

    /// Every migration this build carries, as scripts another migration tool can run, each also
    /// recording itself where this build looks.
    pub fn exported_migrations() -> Vec<ExportedMigration> {
        super::migration::export(&[], &sqlx::migrate!("migrations/sqlite"), &super::migration::SQLITE_RECORD)
    }

    /// Where the ledger's schema stands against this build's migrations; creates and changes
    /// nothing (a ledger file that does not exist has every migration pending).
    pub async fn schema_status(url: &str) -> Result<SchemaStatus, StoreError> {
        let migrator = sqlx::migrate!("migrations/sqlite");
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::Open(format!("{url} is not a valid SQLite URL: {e}")))?;
        let path = options.get_filename().to_path_buf();
        if !path.exists() {
            return Ok(SchemaStatus::compare(url.to_owned(), &migrator, None));
        }
        let options = options.read_only(true).immutable(frozen(&path)).create_if_missing(false);
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options.busy_timeout(BUSY_TIMEOUT))
            .await
            .map_err(|e| unwritable(&path).unwrap_or_else(|| StoreError::Open(format!("{url}: {e}"))))?;
        let status = read_status(&pool, url, &migrator).await.map_err(|e| unwritable(&path).unwrap_or(e));
        pool.close().await;
        status
    }

    /// The connection pool, for tools (benchmarks, checks) that need raw SQL.
    pub fn pool(&self) -> &sqlx::SqlitePool {
        &self.pool
    }
}

/// How long a process waits for another that is creating the same new ledger.
const FIRST_MIGRATION_PATIENCE: Duration = Duration::from_secs(10);

/// Brings the schema up to date. Many processes may open a new ledger at the same moment (an
/// automation's first burst of submissions): SQLite has no migration lock, so two can both find
/// the schema missing and one then fails on a table the other created. That failure rolls back,
/// and the loser looks again: once the other has finished, nothing is left to apply.
///
/// A ledger that a newer build has migrated is refused before anything is written.
async fn migrate(pool: &sqlx::SqlitePool, url: &str) -> Result<(), StoreError> {
    let migrator = sqlx::migrate!("migrations/sqlite");
    let status = read_status(pool, url, &migrator).await?;
    status.refuse_newer()?;
    if status.is_current() {
        return Ok(());
    }
    let started = std::time::Instant::now();
    let mut pause = Duration::from_millis(20);
    loop {
        match migrator.run(pool).await {
            Ok(()) => return Ok(()),
            Err(MigrateError::Execute(_) | MigrateError::ExecuteMigration(..))
                if started.elapsed() < FIRST_MIGRATION_PATIENCE =>
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(500));
            }
            Err(error) => return Err(error.into()),
        }
    }
}

/// Reads where the ledger's schema stands, changing nothing.
async fn read_status(
    pool: &sqlx::SqlitePool,
    url: &str,
    migrator: &sqlx::migrate::Migrator,
) -> Result<SchemaStatus, StoreError> {
    let recorded: bool = sqlx::query_scalar(statements::SQLITE_HAS_MIGRATIONS).fetch_one(pool).await?;
    let applied = if recorded {
        let rows: Vec<(i64, String, Vec<u8>, i64)> =
            sqlx::query_as(statements::APPLIED_MIGRATIONS).fetch_all(pool).await?;
        Some(AppliedMigration::from_rows(rows))
    } else {
        None
    };
    Ok(SchemaStatus::compare(url.to_owned(), migrator, applied))
}

/// Creates the database file readable by its owner only, before SQLite does: the `-wal` and
/// `-shm` files SQLite adds later copy the main file's mode.
fn create_private_file(path: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.is_dir()
    {
        return Err(StoreError::Open(format!(
            "cannot create the ledger {}: the directory {} does not exist",
            path.display(),
            dir.display()
        )));
    }
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::ReadOnlyFilesystem => Err(StoreError::ReadOnly {
            ledger: path.display().to_string(),
            reason: ReadOnlyReason::Filesystem { directory: directory_of(path).display().to_string() },
        }),
        Err(e) => Err(StoreError::Open(format!("cannot create the ledger {}: {e}", path.display()))),
    }
}

/// The ledger at `path` cannot be opened as SQLite needs to, and why, when the filesystem or the
/// permissions say so: read after SQLite failed, so that "unable to open database file" comes
/// with its reason.
fn unwritable(path: &Path) -> Option<StoreError> {
    read_only_reason(path).map(|reason| StoreError::ReadOnly { ledger: path.display().to_string(), reason })
}

/// Why the ledger file at `path` cannot be written where it is, if it cannot: a read-only
/// filesystem, a file this user may not write, or a directory no one may create files in. Opening
/// the file for writing (without creating or truncating it) changes nothing.
fn read_only_reason(path: &Path) -> Option<ReadOnlyReason> {
    let directory = || directory_of(path).display().to_string();
    match std::fs::OpenOptions::new().write(true).open(path) {
        Err(e) if e.kind() == std::io::ErrorKind::ReadOnlyFilesystem => {
            return Some(ReadOnlyReason::Filesystem { directory: directory() });
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return Some(ReadOnlyReason::File),
        _ => {}
    }
    let closed_directory = std::fs::metadata(directory_of(path)).is_ok_and(|m| m.permissions().readonly());
    closed_directory.then(|| ReadOnlyReason::Directory { directory: directory() })
}

/// The directory that holds the ledger file (and its -wal and -shm files).
fn directory_of(path: &Path) -> &Path {
    path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// Whether the existing ledger at `path` is on a read-only filesystem and was closed cleanly by
/// its last writer (no -wal file beside it, so the file holds every commit): it is then read as
/// it is, immutable, without the -shm file SQLite would otherwise have to create. Nothing can
/// change it there.
fn frozen(path: &Path) -> bool {
    matches!(read_only_reason(path), Some(ReadOnlyReason::Filesystem { .. })) && !wal_file(path).exists()
}

/// The write-ahead log SQLite keeps beside the ledger file in WAL mode.
fn wal_file(path: &Path) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-wal");
    name.into()
}
