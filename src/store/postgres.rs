//! The PostgreSQL store: the shared ledger for many workers and reviewers on many machines.

use super::StoreError;
use super::sql::{claim_sql, impl_columns, impl_store};
use sqlx::postgres::{PgPoolOptions, PgRow};
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

/// A ledger in a PostgreSQL database. Rows read for a change are locked `FOR UPDATE`; claims skip
/// rows that another worker is claiming at the same moment.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: sqlx::PgPool,
    clock_offset: Arc<AtomicI64>,
}

/// The claim statement of this dialect.
pub(crate) const CLAIM: &str =
    claim_sql!(" FOR UPDATE OF a SKIP LOCKED", "(SELECT json_array_elements_text($5::json))");

impl_columns!(PgRow);

impl_store! {
    store = PostgresStore,
    tx = PostgresTx,
    database = sqlx::Postgres,
    begin_sql = "BEGIN",
    now_sql = Some("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"),
    lock_suffix = " FOR UPDATE",
    claim_sql = CLAIM,

    async fn listen_for_changes(
        &self,
    ) -> Result<Option<tokio::sync::mpsc::UnboundedReceiver<()>>, StoreError> {
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
}

/// The channel migration 0003 notifies on.
const CHANGES_CHANNEL: &str = "actionledger_changes";

impl PostgresStore {
    /// Connects to and migrates the ledger at a `postgres://` URL.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        Self::open_with(url, 16).await
    }

    /// Like [`PostgresStore::open`] with a chosen pool size.
    pub async fn open_with(url: &str, max_connections: u32) -> Result<Self, StoreError> {
        // One direct connection first: a wrong address or password fails at once, where the
        // pool would keep retrying until its acquire timeout.
        let options: sqlx::postgres::PgConnectOptions = url.parse().map_err(|e| {
            StoreError::Open(format!("{} is not a valid PostgreSQL URL: {e}", crate::cli::redact_url(url)))
        })?;
        let first = sqlx::ConnectOptions::connect(&options)
            .await
            .map_err(|e| StoreError::Open(format!("{}: {e}", crate::cli::redact_url(url))))?;
        sqlx::Connection::close(first).await.ok();
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(30))
            .connect(url)
            .await
            .map_err(|e| StoreError::Open(format!("{}: {e}", crate::cli::redact_url(url))))?;
        sqlx::migrate!("migrations/postgres").run(&pool).await?;
        Ok(Self { pool, clock_offset: Arc::default() })
    }

    /// The connection pool, for tools (benchmarks, checks) that need raw SQL.
    pub fn pool(&self) -> &sqlx::PgPool {
        &self.pool
    }
}
