//! The drain cases: a backlog of pending actions (the situation after an outage), worked off by
//! 16 workers, first by two hand-written statements per action (the raw baseline, on the same
//! database just before), then by 16 default workers (`worker::run`, [`super::worker`]), then
//! by the ledger calls a worker makes, made directly one action at a time (claim, start attempt,
//! record result: three commits), the same for a destination that declares an idempotency key
//! (the claim starts the attempt: two commits), then in batches; and end to end: 16 producers
//! enqueue the backlog (by hand, or through `submit`), then 16 workers drain it (by hand, the
//! default workers, or the ledger calls one action at a time). On PostgreSQL each case also
//! reports the database server's CPU time per action.

use super::{Case, LEASE, case, completed};
use crate::error::Error;
use crate::ledger::Ledger;
use crate::store::{Store, StoreError};
use std::time::Duration;

/// Workers draining the backlog in each case.
pub const WORKERS: usize = 16;

/// Puts `$1` pending actions in the backlog, keyed `PREFIX:n`, created at `$2`, for destination
/// `$3` (none where NULL): the rows a submission would have made, in one statement.
fn seed_sql(postgres: bool, prefix: &str) -> String {
    let series = if postgres {
        "generate_series(1, $1::bigint) AS n"
    } else {
        "(WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < $1) SELECT n FROM s)"
    };
    format!(
        "INSERT INTO actions (key, state, payload, fingerprint, ownership_version, revision, attempts, \
         attempts_in_round, created_at, updated_at, destination) SELECT '{prefix}:' || CAST(n AS TEXT), 'pending', \
         '{{}}', 'f', 0, 1, 0, 0, $2, $2, CAST($3 AS TEXT) FROM {series}"
    )
}

/// The destination of the protected per-action case: it declares an idempotency key, so that
/// each claim starts its attempt in the same commit (a first attempt: no window runs yet).
pub const PROTECTED: &str = "bench-keyed";

/// What [`PROTECTED`] declares: an idempotency key, kept a day.
pub(super) fn keyed_capabilities() -> crate::domain::Capabilities {
    crate::domain::Capabilities {
        idempotency_retention: Some(Duration::from_hours(24)),
        lookup: false,
        ..Default::default()
    }
}

/// The ledger of the protected per-action case: `ledger`, knowing that [`PROTECTED`] takes an
/// idempotency key.
pub(super) fn protected<S: Store>(ledger: &Ledger<S>) -> Ledger<S> {
    ledger.clone().with_destinations(crate::domain::DestinationCatalog::new(
        std::collections::BTreeMap::from([(PROTECTED.to_owned(), keyed_capabilities())]),
        None,
    ))
}

/// The raw drain's claim: the oldest pending action, with an ownership version increment
/// (PostgreSQL skips rows another worker is claiming).
fn raw_claim_sql(postgres: bool) -> String {
    format!(
        "UPDATE actions SET state = 'in_progress', claimed_by = $1, ownership_version = ownership_version + 1, \
         lease_expires_at = $2, updated_at = $3 WHERE id = (SELECT id FROM actions WHERE state = 'pending' \
         ORDER BY id LIMIT 1{}) AND state = 'pending' RETURNING id, ownership_version",
        if postgres { " FOR UPDATE SKIP LOCKED" } else { "" }
    )
}

/// The raw drain's completion, checked against the version claimed.
const RAW_COMPLETE: &str = "UPDATE actions SET state = 'completed', claimed_by = NULL, lease_expires_at = NULL, \
     destination_id = 'D', updated_at = $3 WHERE id = $1 AND ownership_version = $2 AND state = 'in_progress'";

/// The raw enqueue of the end-to-end case: one autocommitted insert of a pending action per
/// key, by [`PRODUCERS`] producers.
const RAW_ENQUEUE: &str = "INSERT INTO actions (key, state, payload, fingerprint, ownership_version, revision, \
     attempts, attempts_in_round, created_at, updated_at) VALUES ($1, 'pending', '{}', 'f', 0, 1, 0, 0, $2, $2)";

/// Producers enqueueing in the end-to-end cases, before the workers drain.
pub const PRODUCERS: usize = 16;

/// The raw drain (two autocommitted statements per action), its enqueue (one insert per action)
/// and the seeding statement, for one backend's pool.
macro_rules! raw_drain {
    ($drain:ident, $enqueue:ident, $seed:ident, $pool:ty, $postgres:expr) => {
        async fn $enqueue(pool: $pool, prefix: String, actions: usize) -> Result<(Duration, Vec<Duration>), Error> {
            super::concurrently(PRODUCERS, actions.div_ceil(PRODUCERS), move |producer, n| {
                let pool = pool.clone();
                let key = format!("{prefix}:{producer}:{n}");
                async move {
                    sqlx::query(RAW_ENQUEUE)
                        .bind(key)
                        .bind(chrono::Utc::now().timestamp_millis() - 1000)
                        .execute(&pool)
                        .await
                        .map_err(StoreError::from)?;
                    Ok(1)
                }
            })
            .await
        }

        async fn $seed(pool: &$pool, prefix: &str, actions: usize, destination: Option<&str>) -> Result<(), Error> {
            let now = chrono::Utc::now().timestamp_millis() - 1000;
            sqlx::query(sqlx::AssertSqlSafe(seed_sql($postgres, prefix)))
                .bind(i64::try_from(actions).unwrap_or(i64::MAX))
                .bind(now)
                .bind(destination.map(str::to_owned))
                .execute(pool)
                .await
                .map_err(StoreError::from)?;
            Ok(())
        }

        async fn $drain(pool: $pool) -> Result<(Duration, Vec<Duration>), Error> {
            let claim = raw_claim_sql($postgres);
            until_empty(move |worker| {
                let (pool, claim) = (pool.clone(), claim.clone());
                async move {
                    let now = chrono::Utc::now().timestamp_millis();
                    let claimed: Option<(i64, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(claim))
                        .bind(format!("raw-{worker}"))
                        .bind(now + 300_000)
                        .bind(now)
                        .fetch_optional(&pool)
                        .await
                        .map_err(StoreError::from)?;
                    let Some((id, version)) = claimed else { return Ok(None) };
                    let done = sqlx::query(RAW_COMPLETE)
                        .bind(id)
                        .bind(version)
                        .bind(now)
                        .execute(&pool)
                        .await
                        .map_err(StoreError::from)?;
                    Ok(Some(usize::try_from(done.rows_affected()).unwrap_or(0)))
                }
            })
            .await
        }
    };
}

raw_drain!(raw_drain_sqlite, raw_enqueue_sqlite, seed_sqlite, sqlx::SqlitePool, false);
raw_drain!(raw_drain_postgres, raw_enqueue_postgres, seed_postgres, sqlx::PgPool, true);

/// The hand-written statements of one backend, for the cases that need a backlog or a baseline.
pub(super) trait RawSql {
    /// Puts `actions` pending actions keyed `PREFIX:n` in the backlog, for `destination`.
    async fn seed(&self, prefix: &str, actions: usize, destination: Option<&str>) -> Result<(), Error>;
    /// The raw drain of whatever is pending, by [`WORKERS`] tasks.
    async fn drain(&self) -> Result<(Duration, Vec<Duration>), Error>;
    /// The raw enqueue of the end-to-end case, by [`PRODUCERS`] producers.
    async fn enqueue(&self, prefix: String, actions: usize) -> Result<(Duration, Vec<Duration>), Error>;
}

impl RawSql for sqlx::SqlitePool {
    async fn seed(&self, prefix: &str, actions: usize, destination: Option<&str>) -> Result<(), Error> {
        seed_sqlite(self, prefix, actions, destination).await
    }

    async fn drain(&self) -> Result<(Duration, Vec<Duration>), Error> {
        raw_drain_sqlite(self.clone()).await
    }

    async fn enqueue(&self, prefix: String, actions: usize) -> Result<(Duration, Vec<Duration>), Error> {
        raw_enqueue_sqlite(self.clone(), prefix, actions).await
    }
}

impl RawSql for sqlx::PgPool {
    async fn seed(&self, prefix: &str, actions: usize, destination: Option<&str>) -> Result<(), Error> {
        seed_postgres(self, prefix, actions, destination).await?;
        // Each case starts from a table without the dead rows of the last.
        plain_postgres(self, "VACUUM ANALYZE actions").await
    }

    async fn drain(&self) -> Result<(Duration, Vec<Duration>), Error> {
        raw_drain_postgres(self.clone()).await
    }

    async fn enqueue(&self, prefix: String, actions: usize) -> Result<(Duration, Vec<Duration>), Error> {
        raw_enqueue_postgres(self.clone(), prefix, actions).await
    }
}

/// Runs one statement without parameters (PostgreSQL's VACUUM between cases).
pub(super) async fn plain_postgres(pool: &sqlx::PgPool, sql: &str) -> Result<(), Error> {
    sqlx::query(sqlx::AssertSqlSafe(sql.to_owned())).execute(pool).await.map_err(StoreError::from)?;
    Ok(())
}

/// Runs a step on each of [`WORKERS`] tasks until the backlog is empty (a step answers `None`);
/// returns the wall time and, per action, the latency of the step that drained it.
async fn until_empty<F, Fut>(job: F) -> Result<(Duration, Vec<Duration>), Error>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Option<usize>, Error>> + Send,
{
    let job = std::sync::Arc::new(job);
    let started = std::time::Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..WORKERS {
        let job = std::sync::Arc::clone(&job);
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let t = std::time::Instant::now();
                let Some(n) = job(worker).await? else { break };
                latencies.extend(std::iter::repeat_n(t.elapsed(), n));
            }
            Ok::<_, Error>(latencies)
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await??);
    }
    Ok((started.elapsed(), all))
}

/// The ledger calls of a worker, made directly: claim up to `batch`, start the attempts, record
/// the results (one action: `claim(1)`, `start_attempt`, `record_result`).
pub(super) async fn library_drain<S: Store>(
    ledger: &Ledger<S>,
    batch: usize,
) -> Result<(Duration, Vec<Duration>), Error> {
    let ledger = ledger.clone();
    let limit = i64::try_from(batch).unwrap_or(i64::MAX);
    until_empty(move |worker| {
        let ledger = ledger.clone();
        let name = format!("drain-{worker}");
        async move {
            let claims = ledger.claim(&name, LEASE, limit).await?;
            if claims.is_empty() {
                return Ok(None);
            }
            if let [claim] = claims.as_slice() {
                let attempt = ledger.start_attempt(claim).await?;
                ledger.record_result(claim, attempt, &completed()).await?;
                return Ok(Some(1));
            }
            Ok(Some(super::complete_batch(&ledger, claims).await?))
        }
    })
    .await
}

/// CPU time (user and system) of a PostgreSQL server on this machine: the postmaster and its
/// children (backends, WAL writer, checkpointer, ...), read from `/proc`, with the children the
/// postmaster has already reaped.
#[derive(Debug, Clone, Copy)]
pub(super) struct ServerCpu {
    postmaster: u32,
}

/// Clock ticks per second of `/proc/<pid>/stat` times (`USER_HZ`, 100 on Linux).
const TICKS_PER_SEC: f64 = 100.0;

impl ServerCpu {
    /// The server of a connection of `pool`, if it runs on this machine and `/proc` shows it.
    pub(super) async fn of(pool: &sqlx::PgPool) -> Option<Self> {
        let backend: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(pool).await.ok()?;
        let stat = proc_stat(u32::try_from(backend).ok()?)?;
        (stat.comm == "postgres").then_some(Self { postmaster: stat.ppid })
    }

    /// CPU seconds the server has used so far.
    pub(super) fn seconds(self) -> f64 {
        let Ok(entries) = std::fs::read_dir("/proc") else { return 0.0 };
        let mut ticks = 0u64;
        for entry in entries.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else { continue };
            let Some(stat) = proc_stat(pid) else { continue };
            if pid == self.postmaster {
                ticks += stat.own + stat.reaped;
            } else if stat.ppid == self.postmaster {
                ticks += stat.own;
            }
        }
        #[allow(clippy::cast_precision_loss, reason = "CPU ticks of one benchmark run")]
        let seconds = ticks as f64 / TICKS_PER_SEC;
        seconds
    }
}

/// The fields of `/proc/<pid>/stat` the CPU count needs.
struct ProcStat {
    comm: String,
    ppid: u32,
    /// utime + stime.
    own: u64,
    /// cutime + cstime: children waited for.
    reaped: u64,
}

fn proc_stat(pid: u32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself hold spaces: split after the last ')'.
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text[open + 1..close].to_owned();
    let fields: Vec<&str> = text[close + 2..].split(' ').collect();
    // Field 3 (state) is fields[0]; ppid is field 4, utime 14, stime 15, cutime 16, cstime 17.
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    Some(ProcStat {
        comm,
        ppid: u32::try_from(field(4)?).ok()?,
        own: field(14)? + field(15)?,
        reaped: field(16)? + field(17)?,
    })
}

/// A drain case's line for `actions` actions, with the server's CPU per action where it was
/// measured. The latencies are of each step that moved an action (end to end, an action has
/// two: its enqueue's and its drain's).
pub(super) fn drain_case(
    name: &str,
    store: &str,
    actions: usize,
    measured: (Duration, Vec<Duration>),
    cpu_seconds: Option<f64>,
) -> Case {
    let (elapsed, latencies) = measured;
    let mut c = case(name, store, WORKERS, elapsed, latencies);
    #[allow(clippy::cast_precision_loss, reason = "an action count")]
    let actions_f = actions.max(1) as f64;
    c.actions = actions;
    c.actions_per_sec = actions_f / elapsed.as_secs_f64().max(f64::EPSILON);
    c.db_cpu_ms_per_action = cpu_seconds.map(|s| s * 1000.0 / actions_f);
    c
}
