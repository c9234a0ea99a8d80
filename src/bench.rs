//! `actionledger bench`: the ledger's throughput against the raw-SQL limit, measured in the same
//! run on the same database, because the limit (the durable commit) moves with the disk.
//!
//! Cases, per store: the raw lifecycle (insert pending, claim with a version increment,
//! version-checked complete: three hand-written statements) and the library's (submit, claim,
//! start attempt, record result, with deliveries and audit entries) with 1, 4 and 16 workers; the
//! library in batched mode (claims, attempts and results for many actions per commit); a duplicate
//! storm; new keys submitted through the library's own `submit` and through the HTTP intake API
//! (`actionledger serve`, in-process on 127.0.0.1, 16 clients), in the same run; and a recovery
//! sweep of expired claims. Before those, the worker as a user runs it: 16 default workers
//! draining a backlog (against the raw drain, and at two backlog sizes), the time from submit to
//! perform on idle workers, and one worker against the simulated CRM with lost answers.

mod drain;
mod memory;
mod worker;

pub use drain::{PRODUCERS as DRAIN_PRODUCERS, WORKERS as DRAIN_WORKERS};
pub use memory::{MemoryRun, worker_memory};
pub use worker::{LATENCY_RATE, LOST_SHARE, SETTLE as LOST_ANSWERS_SETTLE};

use crate::domain::{Capabilities, DestinationCatalog, Evidence, RawSubmission};
use crate::error::Error;
use crate::ledger::{Claim, Ledger, Outcome, Recovery, Report};
use crate::store::{PostgresStore, SqliteStore, SqliteSynchronous, Store};
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One measured case.
#[derive(Debug, Clone, Serialize)]
pub struct Case {
    pub name: String,
    pub store: String,
    pub workers: usize,
    pub actions_per_sec: f64,
    /// `None` where a case's steps are not seen from outside (the default workers' drains).
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// The slowest action, where a case measures latency itself (submit to perform).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_ms: Option<f64>,
    /// Throughput over the raw per-action baseline with the same store and worker count (for
    /// batched mode and the storm: 16 workers), or over the case `baseline` names.
    pub ratio_to_raw: Option<f64>,
    /// The case the ratio is to, where it is not a raw one (`fault-free`: the same worker
    /// against the simulated CRM without faults, in the same round).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    pub actions: usize,
    /// The database server's CPU time per action, where it was measured (the drain cases on a
    /// PostgreSQL server on this machine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub db_cpu_ms_per_action: Option<f64>,
}

/// A benchmark's own check of what the ledger did, failed: the numbers would mean nothing.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("duplicate storm: {actions} actions for {keys} keys")]
    DuplicateStorm { actions: usize, keys: usize },
    #[error("recovery sweep: found {found} expired claims, made {made}")]
    ClaimsNotFound { found: usize, made: usize },
    #[error("recovery sweep: settled {settled} of {claims}")]
    ClaimsNotSettled { settled: usize, claims: usize },
    #[error("{case}: drained {drained} of {backlog} pending actions")]
    DrainIncomplete { case: String, drained: usize, backlog: usize },
    #[error("{case}: {performed} of {submitted} actions performed, {repeats} performed again")]
    NotPerformedOnce { case: String, submitted: usize, performed: usize, repeats: u32 },
    #[error(
        "{case}: {actions} actions made {records} CRM records (at most {max_per_key} per key) and {completed} \
         completed actions; {dropped} answers dropped"
    )]
    LostAnswers { case: String, actions: usize, records: u64, max_per_key: u64, completed: u64, dropped: u64 },
    /// The worker measured by `--worker-memory` was gone before it could be sampled.
    #[error("the worker exited at once")]
    WorkerExitedAtOnce,
    #[error("the worker failed ({0})")]
    WorkerFailed(std::process::ExitStatus),
    /// The HTTP intake case's request failed, or was not answered 201.
    #[error("HTTP intake: {0}")]
    HttpRequest(#[source] reqwest::Error),
    #[error("HTTP intake: a new key was answered {status}, not 201 created")]
    HttpStatus { status: u16 },
}

/// A failed check of the benchmark's own is not the user's input.
impl From<BenchError> for crate::Error {
    fn from(error: BenchError) -> Self {
        crate::error::FrontendError::new(crate::error::Kind::Error, error).into()
    }
}

/// Which cases a run measures, and how big each is.
#[derive(Debug, Clone)]
pub struct Sizes {
    pub lifecycles: usize,
    pub storm_keys: usize,
    pub sweep_claims: usize,
    pub batch: usize,
    /// The lifecycle, batched, storm, intake and sweep cases.
    pub throughput: bool,
    /// Pending actions in the backlog of each drain case; 0 for no drain cases.
    pub drain: usize,
    /// The backlogs the raw drain and the default workers work off, one size after the other.
    pub backlogs: Vec<usize>,
    /// How long actions are submitted at [`LATENCY_RATE`] a second to idle workers; `None` for
    /// no latency case.
    pub latency: Option<Duration>,
    /// Actions one default worker performs against the simulated CRM, fault-free and with
    /// answers lost; 0 for no such case.
    pub lost_answers: usize,
}

impl Sizes {
    pub fn full() -> Self {
        Self {
            lifecycles: 3000,
            storm_keys: 10_000,
            sweep_claims: 100_000,
            batch: 64,
            throughput: true,
            drain: 10_000,
            backlogs: vec![4000, 100_000],
            latency: Some(Duration::from_secs(10)),
            lost_answers: 1000,
        }
    }

    /// Finishes within a minute, for a smoke check.
    pub fn quick() -> Self {
        Self {
            lifecycles: 300,
            storm_keys: 500,
            sweep_claims: 2000,
            batch: 64,
            throughput: true,
            drain: 1000,
            backlogs: vec![200, 1000],
            latency: Some(Duration::from_secs(1)),
            lost_answers: 100,
        }
    }

    /// No case: the caller names the ones to run, at the full run's sizes otherwise.
    pub fn none() -> Self {
        Self { throughput: false, drain: 0, backlogs: Vec::new(), latency: None, lost_answers: 0, ..Self::full() }
    }
}

const LEASE: Duration = Duration::from_mins(5);
const WORKER_COUNTS: [usize; 3] = [1, 4, 16];

fn percentile_ms(samples: &mut [Duration], percent: usize) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable();
    let index = ((samples.len() - 1) * percent).div_ceil(100);
    Some(samples[index].as_secs_f64() * 1000.0)
}

fn case(name: &str, store: &str, workers: usize, elapsed: Duration, mut latencies: Vec<Duration>) -> Case {
    let mut c = counted(name, store, workers, latencies.len(), elapsed);
    c.p50_ms = percentile_ms(&mut latencies, 50);
    c.p99_ms = percentile_ms(&mut latencies, 99);
    c
}

/// A case of `actions` actions in `elapsed`, whose latencies are not measured.
fn counted(name: &str, store: &str, workers: usize, actions: usize, elapsed: Duration) -> Case {
    Case {
        name: name.to_owned(),
        store: store.to_owned(),
        workers,
        actions_per_sec: f64::from(u32::try_from(actions).unwrap_or(u32::MAX))
            / elapsed.as_secs_f64().max(f64::EPSILON),
        p50_ms: None,
        p99_ms: None,
        max_ms: None,
        ratio_to_raw: None,
        baseline: None,
        actions,
        db_cpu_ms_per_action: None,
    }
}

/// Runs `per_worker` jobs on each of `workers` tasks; returns the wall time and every latency.
async fn concurrently<F, Fut>(workers: usize, per_worker: usize, job: F) -> Result<(Duration, Vec<Duration>), Error>
where
    F: Fn(usize, usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<usize, Error>> + Send,
{
    let job = Arc::new(job);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..workers {
        let job = Arc::clone(&job);
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(per_worker);
            let mut done = 0;
            while done < per_worker {
                let t = Instant::now();
                let n = job(worker, done).await?;
                let each = t.elapsed();
                latencies.extend(std::iter::repeat_n(each, n));
                done += n.max(1);
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

/// The raw baseline (the same table, three autocommitted statements per action, no library
/// code), and a bulk statement with two arguments, for one backend's pool.
macro_rules! raw_sql {
    ($name:ident, $bulk:ident, $pool:ty) => {
        async fn $bulk(pool: $pool, sql: String, n: i64, now: i64) -> Result<(), Error> {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(n)
                .bind(now)
                .execute(&pool)
                .await
                .map(|_| ())
                .map_err(|e| Error::from(crate::store::StoreError::from(e)))
        }

        async fn $name(pool: $pool, prefix: String, workers: usize, per_worker: usize) -> Result<(Duration, Vec<Duration>), Error> {
            concurrently(workers, per_worker, move |worker, n| {
                let pool = pool.clone();
                let key = format!("{prefix}:{worker}:{n}");
                async move {
                    let now = chrono::Utc::now().timestamp_millis();
                    let id: i64 = sqlx::query_scalar(
                        "INSERT INTO actions (key, state, payload, fingerprint, ownership_version, revision, attempts, \
                         attempts_in_round, created_at, updated_at) VALUES ($1, 'pending', '{}', 'f', 0, 1, 0, 0, $2, $2) \
                         RETURNING id",
                    )
                    .bind(&key)
                    .bind(now)
                    .fetch_one(&pool)
                    .await
                    .map_err(crate::store::StoreError::from)?;
                    let version: i64 = sqlx::query_scalar(
                        "UPDATE actions SET state = 'in_progress', claimed_by = 'raw', ownership_version = ownership_version + 1, \
                         lease_expires_at = $2, updated_at = $2 WHERE id = $1 AND state = 'pending' RETURNING ownership_version",
                    )
                    .bind(id)
                    .bind(now + 300_000)
                    .fetch_one(&pool)
                    .await
                    .map_err(crate::store::StoreError::from)?;
                    let done = sqlx::query(
                        "UPDATE actions SET state = 'completed', claimed_by = NULL, lease_expires_at = NULL, \
                         destination_id = 'D', updated_at = $3 WHERE id = $1 AND ownership_version = $2 AND state = 'in_progress'",
                    )
                    .bind(id)
                    .bind(version)
                    .bind(now)
                    .execute(&pool)
                    .await
                    .map_err(crate::store::StoreError::from)?;
                    Ok(usize::try_from(done.rows_affected()).unwrap_or(0))
                }
            })
            .await
        }
    };
}

raw_sql!(raw_sqlite, bulk_sqlite, sqlx::SqlitePool);
raw_sql!(raw_postgres, bulk_postgres, sqlx::PgPool);

fn submission(key: String) -> RawSubmission {
    RawSubmission { key: Some(key), payload: br#"{"order":"bench"}"#.to_vec(), ..RawSubmission::default() }
}

/// Starts the claims' attempts in one transaction and records each as completed in one more:
/// the worker's batched path with a no-op effect. Returns how many results were recorded.
async fn complete_batch<S: Store>(ledger: &Ledger<S>, claims: Vec<Claim>) -> Result<usize, Error> {
    let started = ledger.start_attempts(&claims).await?;
    let results: Vec<_> = claims
        .into_iter()
        .zip(started)
        .filter_map(|(claim, attempt)| attempt.ok().map(|a| (claim, a, completed())))
        .collect();
    Ok(ledger.record_results(&results).await?.len())
}

fn completed() -> Report {
    Report {
        outcome: Outcome::Completed { destination_id: "D".to_owned() },
        error: None,
        evidence: Evidence::default(),
    }
}

/// The library's lifecycle, one action at a time per worker.
async fn library_lifecycle<S: Store>(
    ledger: &Ledger<S>,
    prefix: &str,
    workers: usize,
    per_worker: usize,
) -> Result<(Duration, Vec<Duration>), Error> {
    let (ledger, prefix) = (ledger.clone(), prefix.to_owned());
    concurrently(workers, per_worker, move |worker, n| {
        let ledger = ledger.clone();
        let key = format!("{prefix}:{worker}:{n}");
        let name = format!("bench-{worker}");
        async move {
            ledger.submit(&submission(key)).await?;
            let Some(claim) = ledger.claim(&name, LEASE, 1).await?.pop() else { return Ok(0) };
            let attempt = ledger.start_attempt(&claim).await?;
            ledger.record_result(&claim, attempt, &completed()).await?;
            Ok(1)
        }
    })
    .await
}

/// Batched mode: each worker submits a page of events in one commit, claims a batch in one
/// statement, starts the attempts in one commit and records the results in one group commit.
async fn library_batched<S: Store>(
    ledger: &Ledger<S>,
    prefix: &str,
    workers: usize,
    per_worker: usize,
    batch: usize,
) -> Result<(Duration, Vec<Duration>), Error> {
    let (ledger, prefix) = (ledger.clone(), prefix.to_owned());
    concurrently(workers, per_worker, move |worker, n| {
        let ledger = ledger.clone();
        let prefix = prefix.clone();
        let name = format!("bench-{worker}");
        async move {
            let page: Vec<RawSubmission> =
                (0..batch).map(|i| submission(format!("{prefix}:{worker}:{n}:{i}"))).collect();
            ledger.submit_many(&page).await?;
            let claims = ledger.claim(&name, LEASE, i64::try_from(batch).unwrap_or(i64::MAX)).await?;
            complete_batch(&ledger, claims).await
        }
    })
    .await
}

/// Every key delivered 8 times by 16 concurrent submitters; checks one action per key.
async fn duplicate_storm<S: Store>(
    ledger: &Ledger<S>,
    prefix: &str,
    keys: usize,
) -> Result<(Duration, Vec<Duration>), Error> {
    const SUBMITTERS: usize = 16;
    let per_submitter = keys * 8 / SUBMITTERS;
    let prefix_c = prefix.to_owned();
    let measured = submit_concurrently(ledger, SUBMITTERS, per_submitter, move |submitter, n| {
        format!("{prefix_c}:{}", (n + (submitter % 2) * (keys / 2)) % keys)
    })
    .await?;
    let filter = crate::store::ListFilter {
        key_contains: Some(format!("{prefix}:")),
        limit: i64::try_from(keys * 2).unwrap_or(i64::MAX),
        ..Default::default()
    };
    let actions = ledger.list(&filter).await?.len();
    if actions != keys {
        return Err(BenchError::DuplicateStorm { actions, keys }.into());
    }
    Ok(measured)
}

/// New keys submitted by 16 concurrent submitters through the library's own `submit`.
async fn library_submit<S: Store>(
    ledger: &Ledger<S>,
    prefix: &str,
    keys: usize,
) -> Result<(Duration, Vec<Duration>), Error> {
    let prefix = prefix.to_owned();
    submit_concurrently(ledger, 16, keys.div_ceil(16), move |submitter, n| format!("{prefix}:{submitter}:{n}")).await
}

/// Submits the key `key_of(submitter, n)` names, through the library's own `submit`, as the
/// `n`th of `per_submitter` submissions by each of `submitters` concurrent submitters.
async fn submit_concurrently<S: Store>(
    ledger: &Ledger<S>,
    submitters: usize,
    per_submitter: usize,
    key_of: impl Fn(usize, usize) -> String + Send + Sync + 'static,
) -> Result<(Duration, Vec<Duration>), Error> {
    let ledger = ledger.clone();
    concurrently(submitters, per_submitter, move |submitter, n| {
        let ledger = ledger.clone();
        let key = key_of(submitter, n);
        async move {
            ledger.submit(&submission(key)).await?;
            Ok(1)
        }
    })
    .await
}

/// The same submissions through the HTTP intake API: the server in-process on 127.0.0.1 and 16
/// clients, each request a `POST /v1/actions` with a bearer token, answered 201.
async fn http_submit<S: Store>(
    ledger: &Ledger<S>,
    prefix: &str,
    keys: usize,
) -> Result<(Duration, Vec<Duration>), Error> {
    const TOKEN: &str = "bench-token-not-secret";
    let mut tokens = crate::serve::auth::Tokens::default();
    tokens.insert(TOKEN, crate::serve::auth::Role::Source, "bench").map_err(crate::serve::ServeError::from)?;
    let options = crate::serve::ServeOptions { rate: 0.0, ..crate::serve::ServeOptions::default() };
    let router = crate::serve::App::new(ledger.clone(), tokens, Vec::new(), options).router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| Error::io("cannot listen for the HTTP intake case", e))?;
    let url = format!(
        "http://{}/v1/actions",
        listener.local_addr().map_err(|e| Error::io("cannot read the HTTP intake's address", e))?
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(crate::serve::serve(listener, router, async {
        let _ = stopped.await;
    }));
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let prefix = prefix.to_owned();
    let measured = concurrently(16, keys.div_ceil(16), move |submitter, n| {
        let request = client.post(&url).bearer_auth(TOKEN).header("content-type", "application/json").body(
            serde_json::json!({ "key": format!("{prefix}:{submitter}:{n}"), "payload": { "order": "bench" } })
                .to_string(),
        );
        async move {
            let response = request.send().await.map_err(BenchError::HttpRequest)?;
            match response.status().as_u16() {
                201 => Ok(1),
                status => Err(BenchError::HttpStatus { status }.into()),
            }
        }
    })
    .await;
    let _ = stop.send(());
    let _ = server.await;
    measured
}

/// Expired claims, found and taken over by 16 workers; checks that every one was settled once.
async fn recovery_sweep<S: Store>(ledger: &Ledger<S>, claims: usize) -> Result<(Duration, Vec<Duration>), Error> {
    let expired = ledger
        .store()
        .expired_claims(i64::try_from(claims).unwrap_or(i64::MAX), &crate::store::ClaimScope::any())
        .await?;
    if expired.len() != claims {
        return Err(BenchError::ClaimsNotFound { found: expired.len(), made: claims }.into());
    }
    let expired = Arc::new(expired);
    let workers = 16;
    let per_worker = claims.div_ceil(workers);
    // The benchmark's actions go to a destination that protects against a repeat, so every
    // claim is taken over.
    let protected = Capabilities { idempotency_retention: None, lookup: true, ..Default::default() };
    let ledger = ledger.clone().with_destinations(DestinationCatalog::new(
        std::collections::BTreeMap::from([("bench".to_owned(), protected)]),
        Some("bench".to_owned()),
    ));
    let settled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = Arc::clone(&settled);
    let measured = concurrently(workers, per_worker, move |worker, n| {
        let (ledger, expired, counter) = (ledger.clone(), Arc::clone(&expired), Arc::clone(&counter));
        async move {
            let Some(action) = expired.get(worker * per_worker + n) else { return Ok(1) };
            let recovery = ledger.recover_expired(&action.key, action.ownership_version, "sweeper", LEASE).await?;
            if matches!(recovery, Recovery::Claimed(_) | Recovery::Held(_)) {
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Ok(1)
        }
    })
    .await?;
    let settled = settled.load(std::sync::atomic::Ordering::Relaxed);
    if settled != claims {
        return Err(BenchError::ClaimsNotSettled { settled, claims }.into());
    }
    Ok((measured.0, measured.1.into_iter().take(claims).collect()))
}

/// Makes `n` claims whose leases have expired, in bulk, through legal transitions only.
const EXPIRED_CLAIMS_SQL: [&str; 2] = [
    "INSERT INTO actions (key, state, payload, fingerprint, ownership_version, revision, attempts, attempts_in_round, \
     created_at, updated_at) SELECT 'sweep:' || CAST(n AS TEXT), 'pending', '{}', 'f', 0, 1, 0, 0, $2, $2 FROM SEQ",
    "UPDATE actions SET state = 'in_progress', claimed_by = 'dead-worker', ownership_version = 1, lease_expires_at = $2 \
     WHERE key LIKE 'sweep:%' AND state = 'pending' AND $1 > 0",
];

fn expired_claims_sql(postgres: bool) -> [String; 2] {
    let series = if postgres {
        "generate_series(1, $1::bigint) AS n"
    } else {
        "(WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < $1) SELECT n FROM s)"
    };
    [EXPIRED_CLAIMS_SQL[0].replace("SEQ", series), EXPIRED_CLAIMS_SQL[1].to_owned()]
}

/// Where a run measures.
#[derive(Debug, Clone)]
pub enum Target {
    Sqlite { synchronous: SqliteSynchronous, path: std::path::PathBuf },
    Postgres { url: String },
}

impl Target {
    fn label(&self) -> String {
        match self {
            Self::Sqlite { synchronous: SqliteSynchronous::Full, .. } => "sqlite-full".to_owned(),
            Self::Sqlite { .. } => "sqlite-normal".to_owned(),
            Self::Postgres { .. } => "postgres".to_owned(),
        }
    }
}

/// PostgreSQL connections the benchmark's pool may open: the 16 default workers share it, each
/// with a claim, a start of attempts, a group commit and a settle sweep under way at once.
pub const POSTGRES_POOL: u32 = 64;

/// Runs every case on one target, appending to `cases` as it goes (and printing each line).
pub async fn run_target(target: &Target, sizes: &Sizes, cases: &mut Vec<Case>, print: bool) -> Result<(), Error> {
    let label = target.label();
    match target {
        Target::Sqlite { synchronous, path } => {
            let url = format!("sqlite://{}", path.display());
            let store = SqliteStore::open_with(&url, *synchronous).await?;
            let pool = store.pool().clone();
            let ledger = Ledger::new(store.clone());
            let mut result = worker_and_drain_cases(&ledger, &label, sizes, cases, print, &pool, None).await;
            if result.is_ok() && sizes.throughput {
                result = run_cases(
                    &ledger,
                    &label,
                    sizes,
                    cases,
                    print,
                    false,
                    |prefix, workers, per| raw_sqlite(pool.clone(), prefix, workers, per),
                    |sql, n, now| bulk_sqlite(pool.clone(), sql, n, now),
                )
                .await;
            }
            store.close().await;
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
            }
            if result.is_ok() && print {
                print_against_raw_lifecycle(cases, &label);
            }
            result
        }
        Target::Postgres { url } => {
            let store = PostgresStore::open_with(url, POSTGRES_POOL).await?;
            let pool = store.pool().clone();
            let ledger = Ledger::new(store.clone());
            let cpu = drain::ServerCpu::of(&pool).await;
            let mut result = worker_and_drain_cases(&ledger, &label, sizes, cases, print, &pool, cpu).await;
            if print {
                println!(
                    "{label:<14} pool: at most {POSTGRES_POOL} connections, shared by every case; {} open after the \
                     worker cases",
                    pool.size()
                );
            }
            if result.is_ok() && sizes.throughput {
                result = run_cases(
                    &ledger,
                    &label,
                    sizes,
                    cases,
                    print,
                    true,
                    |prefix, workers, per| raw_postgres(pool.clone(), prefix, workers, per),
                    |sql, n, now| bulk_postgres(pool.clone(), sql, n, now),
                )
                .await;
                if result.is_ok() {
                    result = notification_cost(&ledger, sizes, cases, print).await;
                }
            }
            if result.is_ok() && (sizes.throughput || sizes.latency.is_some()) {
                result = wake_up_cost(&ledger, cases, print).await;
            }
            store.close().await;
            if result.is_ok() && print {
                print_against_raw_lifecycle(cases, &label);
            }
            result
        }
    }
}

/// The cases that drain a backlog or run workers, before the throughput cases: those leave
/// pending actions and claims behind that a worker would take.
async fn worker_and_drain_cases<S: Store>(
    ledger: &Ledger<S>,
    store: &str,
    sizes: &Sizes,
    cases: &mut Vec<Case>,
    print: bool,
    raw: &impl drain::RawSql,
    cpu: Option<drain::ServerCpu>,
) -> Result<(), Error> {
    drain_cases(ledger, store, sizes, cases, print, raw, cpu).await?;
    backlog_cases(ledger, store, sizes, cases, print, raw, cpu).await?;
    latency_cases(ledger, store, sizes, cases, print).await?;
    lost_answer_cases(ledger, store, sizes, cases, print).await
}

/// The issue's measure for SQLite: the default workers' drain against the raw lifecycle (three
/// statements per action, 16 workers) of the same run, where both were measured.
fn print_against_raw_lifecycle(cases: &[Case], store: &str) {
    let of_store = || cases.iter().filter(|c| c.store == store);
    let Some(raw) = of_store().rfind(|c| c.name == "raw lifecycle" && c.workers == 16) else { return };
    let drains: Vec<String> = of_store()
        .filter(|c| c.name.starts_with(&format!("{}, round", DrainCase::Worker.label())))
        .map(|c| format!("{:.0}/s = {:.2}x", c.actions_per_sec, c.actions_per_sec / raw.actions_per_sec))
        .collect();
    if !drains.is_empty() {
        println!(
            "{store:<14} default worker drain against the raw lifecycle (16 workers, {:.0}/s): {}",
            raw.actions_per_sec,
            drains.join(", ")
        );
    }
}

/// One case of the drain, in the order each round runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DrainCase {
    /// Hand-written statements, the baseline of the cases after it.
    Raw,
    /// 16 default workers, for actions to a destination that declares nothing: each attempt's
    /// start commits before the action is performed.
    Worker,
    /// The same for a destination that declares an idempotency key: the claim starts the attempt.
    WorkerKeyed,
    /// The ledger calls of the worker's path, made directly, one action at a time, for actions
    /// without a destination.
    PerAction,
    /// The same for a destination that declares an idempotency key: its claims start their attempts.
    Keyed,
    /// The ledger calls with claims, starts and results in batches of this many.
    Batched(usize),
    /// [`drain::PRODUCERS`] producers insert the backlog by hand, then the raw drain works it off:
    /// the baseline of the end-to-end cases after it.
    RawEndToEnd,
    /// The backlog submitted through the library's `submit`, then drained by 16 default workers.
    WorkerEndToEnd,
    /// The backlog submitted through the library's `submit`, then drained by the ledger calls one
    /// action at a time.
    EndToEnd,
}

impl DrainCase {
    fn label(self) -> String {
        match self {
            Self::Raw => "raw drain".to_owned(),
            Self::Worker => "default worker drain".to_owned(),
            Self::WorkerKeyed => "default worker drain, keyed destination".to_owned(),
            Self::PerAction => "ledger calls drain, per action".to_owned(),
            Self::Keyed => "ledger calls drain, per action, keyed destination".to_owned(),
            Self::Batched(n) => format!("ledger calls drain, batched ({n} per commit)"),
            Self::RawEndToEnd => "raw end to end (enqueue, then drain)".to_owned(),
            Self::WorkerEndToEnd => "default worker end to end".to_owned(),
            Self::EndToEnd => "ledger calls end to end, per action".to_owned(),
        }
    }

    fn name(self, round: usize) -> String {
        format!("{}, round {round}", self.label())
    }

    /// The drain whose rate is this case's baseline, if it has one.
    fn baseline(self) -> Option<Self> {
        match self {
            Self::Raw | Self::RawEndToEnd => None,
            Self::EndToEnd | Self::WorkerEndToEnd => Some(Self::RawEndToEnd),
            _ => Some(Self::Raw),
        }
    }

    fn end_to_end(self) -> bool {
        matches!(self, Self::RawEndToEnd | Self::WorkerEndToEnd | Self::EndToEnd)
    }

    /// The destination of the seeded backlog.
    fn destination(self) -> Option<&'static str> {
        matches!(self, Self::Keyed | Self::WorkerKeyed).then_some(drain::PROTECTED)
    }
}

/// What one drain case measured: its wall time, the latency of each step (none for the default
/// workers, whose steps are not seen from outside) and the actions it drained (for the default
/// workers: the actions their summaries count completed).
struct Drained {
    elapsed: Duration,
    latencies: Vec<Duration>,
    actions: usize,
}

/// Runs one drain case over what is pending (end to end: after enqueueing `backlog` actions
/// keyed `prefix`).
async fn run_drain<S: Store>(
    kind: DrainCase,
    ledger: &Ledger<S>,
    raw: &impl drain::RawSql,
    prefix: &str,
    backlog: usize,
) -> Result<Drained, Error> {
    let by_steps =
        |(elapsed, latencies): (Duration, Vec<Duration>)| Drained { elapsed, actions: latencies.len(), latencies };
    let by_workers = |(elapsed, summary): (Duration, crate::worker::Summary)| Drained {
        elapsed,
        latencies: Vec::new(),
        actions: usize::try_from(summary.completed).unwrap_or(usize::MAX),
    };
    let workers = prefix.to_lowercase();
    Ok(match kind {
        DrainCase::Raw => by_steps(raw.drain().await?),
        DrainCase::Worker => by_workers(worker::drain(ledger, &worker::plain(), &workers).await?),
        DrainCase::WorkerKeyed => by_workers(worker::drain(ledger, &worker::keyed(), &workers).await?),
        DrainCase::PerAction => by_steps(drain::library_drain(ledger, 1).await?),
        DrainCase::Keyed => by_steps(drain::library_drain(&drain::protected(ledger), 1).await?),
        DrainCase::Batched(n) => by_steps(drain::library_drain(ledger, n).await?),
        DrainCase::RawEndToEnd | DrainCase::WorkerEndToEnd | DrainCase::EndToEnd => {
            let (enqueue, mut latencies) = if kind == DrainCase::RawEndToEnd {
                raw.enqueue(prefix.to_owned(), backlog).await?
            } else {
                library_submit(ledger, prefix, backlog).await?
            };
            let drained = match kind {
                DrainCase::RawEndToEnd => by_steps(raw.drain().await?),
                DrainCase::WorkerEndToEnd => by_workers(worker::drain(ledger, &worker::plain(), &workers).await?),
                _ => by_steps(drain::library_drain(ledger, 1).await?),
            };
            // Every action's latency, of its enqueue and of its drain, where the drain's steps
            // are seen; the default workers' are not, and an enqueue's alone would mislead.
            if kind == DrainCase::WorkerEndToEnd {
                latencies.clear();
            } else {
                latencies.extend(drained.latencies);
            }
            // The rate is of the whole: the actions over the enqueue's time and the drain's.
            Drained { elapsed: enqueue + drained.elapsed, latencies, actions: drained.actions }
        }
    })
}

/// Seeds (or, end to end, enqueues) a backlog of `backlog` actions and runs `kind` over it;
/// checks that it drained all of them and returns its case, with the server's CPU per action.
#[allow(clippy::too_many_arguments, reason = "a case's name, place and size, and the backend")]
async fn drain_case<S: Store>(
    kind: DrainCase,
    name: String,
    prefix: &str,
    backlog: usize,
    ledger: &Ledger<S>,
    store: &str,
    raw: &impl drain::RawSql,
    cpu: Option<drain::ServerCpu>,
) -> Result<Case, Error> {
    if !kind.end_to_end() {
        raw.seed(prefix, backlog, kind.destination()).await?;
    }
    let before = cpu.map(drain::ServerCpu::seconds);
    let measured = run_drain(kind, ledger, raw, prefix, backlog).await?;
    let cpu_seconds = cpu.zip(before).map(|(cpu, before)| cpu.seconds() - before);
    if measured.actions != backlog {
        return Err(BenchError::DrainIncomplete { case: name, drained: measured.actions, backlog }.into());
    }
    Ok(drain::drain_case(&name, store, backlog, (measured.elapsed, measured.latencies), cpu_seconds))
}

/// The drain cases, twice each, alternating, so that a slow moment of the disk does not land on
/// one side only: the raw drain, 16 default workers (for a destination that declares nothing, and
/// for one that declares an idempotency key), the ledger calls one action at a time (the same two
/// destinations) and batched, each against the raw drain of its round; then end to end (the
/// backlog enqueued by 16 producers, then drained), the default workers' and the ledger calls'
/// against the raw one of its round.
async fn drain_cases<S: Store>(
    ledger: &Ledger<S>,
    store: &str,
    sizes: &Sizes,
    cases: &mut Vec<Case>,
    print: bool,
    raw: &impl drain::RawSql,
    cpu: Option<drain::ServerCpu>,
) -> Result<(), Error> {
    if sizes.drain == 0 {
        return Ok(());
    }
    // The producers enqueue the same number each.
    let enqueued = sizes.drain.div_ceil(drain::PRODUCERS) * drain::PRODUCERS;
    for round in 1..=2 {
        let mut rates: Vec<(DrainCase, f64)> = Vec::new();
        for kind in [
            DrainCase::Raw,
            DrainCase::Worker,
            DrainCase::WorkerKeyed,
            DrainCase::PerAction,
            DrainCase::Keyed,
            DrainCase::Batched(sizes.batch),
            DrainCase::RawEndToEnd,
            DrainCase::WorkerEndToEnd,
            DrainCase::EndToEnd,
        ] {
            let backlog = if kind.end_to_end() { enqueued } else { sizes.drain };
            let prefix = format!("drain-{round}-{kind:?}");
            let mut c = drain_case(kind, kind.name(round), &prefix, backlog, ledger, store, raw, cpu).await?;
            c.ratio_to_raw = kind
                .baseline()
                .and_then(|base| rates.iter().find(|(k, _)| *k == base))
                .map(|(_, rate)| c.actions_per_sec / rate);
            rates.push((kind, c.actions_per_sec));
            if print {
                println!("{}", line(&c));
            }
            cases.push(c);
        }
    }
    Ok(())
}

/// The raw drain and the default workers over each backlog size in turn, so that a rate that
/// falls as the backlog grows shows; each worker drain against the raw drain of its size.
async fn backlog_cases<S: Store>(
    ledger: &Ledger<S>,
    store: &str,
    sizes: &Sizes,
    cases: &mut Vec<Case>,
    print: bool,
    raw: &impl drain::RawSql,
    cpu: Option<drain::ServerCpu>,
) -> Result<(), Error> {
    // Per size: the raw drain's rate and the default workers'.
    let mut rates: Vec<(usize, f64, f64)> = Vec::new();
    for &size in &sizes.backlogs {
        let mut raw_rate = 0.0;
        for kind in [DrainCase::Raw, DrainCase::Worker] {
            let name = format!("{}, backlog of {size}", kind.label());
            let prefix = format!("backlog-{size}-{kind:?}");
            let mut c = drain_case(kind, name, &prefix, size, ledger, store, raw, cpu).await?;
            if kind == DrainCase::Raw {
                raw_rate = c.actions_per_sec;
            } else {
                c.ratio_to_raw = Some(c.actions_per_sec / raw_rate);
                rates.push((size, raw_rate, c.actions_per_sec));
            }
            if print {
                println!("{}", line(&c));
            }
            cases.push(c);
        }
    }
    if print && let Some(&(smallest, raw_first, worker_first)) = rates.first() {
        for &(size, raw_rate, worker_rate) in &rates[1..] {
            println!(
                "{store:<14} backlog of {size} against {smallest}: default worker drain {:.2}x, raw drain {:.2}x",
                worker_rate / worker_first,
                raw_rate / raw_first
            );
        }
    }
    Ok(())
}

/// Submit to perform on one idle default worker, then on 16.
async fn latency_cases<S: Store>(
    ledger: &Ledger<S>,
    store: &str,
    sizes: &Sizes,
    cases: &mut Vec<Case>,
    print: bool,
) -> Result<(), Error> {
    let Some(duration) = sizes.latency else { return Ok(()) };
    for workers in [1, worker::WORKERS] {
        let c = worker::latency(ledger, store, workers, duration).await?;
        if print {
            println!("{}", line(&c));
        }
        cases.push(c);
    }
    Ok(())
}

/// One default worker against the simulated CRM, fault-free and with [`LOST_SHARE`] of the
/// answers dropped after the CRM committed, twice each, alternating; each lossy run against the
/// fault-free run of its round.
async fn lost_answer_cases<S: Store>(
    ledger: &Ledger<S>,
    store: &str,
    sizes: &Sizes,
    cases: &mut Vec<Case>,
    print: bool,
) -> Result<(), Error> {
    if sizes.lost_answers == 0 {
        return Ok(());
    }
    let actions = sizes.lost_answers;
    for round in 1..=2 {
        let mut fault_free = None;
        for lost in [0.0, LOST_SHARE] {
            let (label, prefix) = if lost > 0.0 {
                (format!("{:.0}% of answers lost", lost * 100.0), format!("lost-{round}-lossy"))
            } else {
                ("fault-free".to_owned(), format!("lost-{round}-fault-free"))
            };
            let name = format!("default worker vs simulated CRM, {label}, round {round}");
            let run = worker::lost_answers(ledger, &name, &prefix, actions, lost).await?;
            let mut c = counted(&name, store, 1, actions, run.elapsed);
            match fault_free {
                None => fault_free = Some(c.actions_per_sec),
                Some(rate) => {
                    c.ratio_to_raw = Some(c.actions_per_sec / rate);
                    c.baseline = Some("fault-free".to_owned());
                }
            }
            if print {
                println!("{}", line(&c));
                if lost > 0.0 {
                    println!(
                        "{store:<14} {} answers dropped, {} actions settled by lookup",
                        run.dropped, run.settled_by_lookup
                    );
                }
            }
            cases.push(c);
        }
    }
    Ok(())
}

/// The triggers that NOTIFY review consoles of changes (migrations 0003 and 0014).
const NOTIFY_TRIGGERS: [(&str, &str); 2] =
    [("actions", "actions_notify_change"), ("refused_submissions", "refused_notify")];

/// What change notifications cost on PostgreSQL: the library lifecycle with 16 workers with the
/// notify triggers on and off, alternating twice so that a slow moment of the disk (autovacuum
/// after the sweep, say) does not land on one side only; each against the raw baseline.
async fn notification_cost(
    ledger: &Ledger<PostgresStore>,
    sizes: &Sizes,
    cases: &mut Vec<Case>,
    print: bool,
) -> Result<(), Error> {
    let raw16 = cases
        .iter()
        .rev()
        .find(|c| c.store == "postgres" && c.name == "raw lifecycle" && c.workers == 16)
        .map(|c| c.actions_per_sec);
    let per = sizes.lifecycles.div_ceil(16);
    let mut measured = Vec::new();
    for (round, notify) in [(1, true), (1, false), (2, true), (2, false)] {
        let prefix = format!("notify-{round}-{notify}");
        let run = library_lifecycle(ledger, &prefix, 16, per);
        let (elapsed, latencies) = with_triggers(ledger.store().pool(), &NOTIFY_TRIGGERS, notify, run).await?;
        let name = format!("library lifecycle, notifications {}, round {round}", if notify { "on" } else { "off" });
        measured.push(case(&name, "postgres", 16, elapsed, latencies));
    }
    for mut c in measured {
        c.ratio_to_raw = raw16.map(|r| c.actions_per_sec / r);
        if print {
            println!("{}", line(&c));
        }
        cases.push(c);
    }
    Ok(())
}

/// Runs `run` with `triggers` enabled or, unless `enabled`, disabled for its length only.
async fn with_triggers<T>(
    pool: &sqlx::PgPool,
    triggers: &[(&str, &str)],
    enabled: bool,
    run: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    if enabled {
        return run.await;
    }
    set_triggers(pool, triggers, false).await?;
    let result = run.await;
    set_triggers(pool, triggers, true).await?;
    result
}

async fn set_triggers(pool: &sqlx::PgPool, triggers: &[(&str, &str)], on: bool) -> Result<(), Error> {
    for (table, trigger) in triggers {
        let switch = if on { "ENABLE" } else { "DISABLE" };
        sqlx::query(sqlx::AssertSqlSafe(format!("ALTER TABLE {table} {switch} TRIGGER {trigger}")))
            .execute(pool)
            .await
            .map_err(crate::store::StoreError::from)?;
    }
    Ok(())
}

/// The triggers that NOTIFY idle workers of new work (migration 0101).
const WAKE_UP_TRIGGERS: [(&str, &str); 2] =
    [("actions", "actions_notify_runnable_inserted"), ("actions", "actions_notify_runnable")];

/// Submissions per run of the wake-up cost case.
const WAKE_UP_COST_SUBMISSIONS: usize = 4000;

/// What waking idle workers costs the submissions on PostgreSQL: 16 submitters through the
/// library's `submit`, one new action per transaction (each one notifies), with migration 0101's
/// triggers on and off, alternating twice; each run's ratio is to the run without them of its
/// round. A notifying commit takes a database-wide lock, so this is where the cost shows.
async fn wake_up_cost(ledger: &Ledger<PostgresStore>, cases: &mut Vec<Case>, print: bool) -> Result<(), Error> {
    let mut measured: Vec<Case> = Vec::new();
    for (round, notify) in [(1, false), (1, true), (2, false), (2, true)] {
        let prefix = format!("wake-{round}-{notify}");
        let run = library_submit(ledger, &prefix, WAKE_UP_COST_SUBMISSIONS);
        let (elapsed, latencies) = with_triggers(ledger.store().pool(), &WAKE_UP_TRIGGERS, notify, run).await?;
        let name = format!("library submit, wake-ups {}, round {round}", if notify { "on" } else { "off" });
        let mut c = case(&name, "postgres", 16, elapsed, latencies);
        if notify {
            c.ratio_to_raw = measured.last().map(|off| c.actions_per_sec / off.actions_per_sec);
            c.baseline = Some("wake-ups off".to_owned());
        }
        measured.push(c);
    }
    for c in measured {
        if print {
            println!("{}", line(&c));
        }
        cases.push(c);
    }
    Ok(())
}

#[allow(clippy::too_many_arguments, reason = "the two raw closures are the only backend-specific parts")]
async fn run_cases<S, R, RF, X, XF>(
    ledger: &Ledger<S>,
    store: &str,
    sizes: &Sizes,
    cases: &mut Vec<Case>,
    print: bool,
    postgres: bool,
    raw: R,
    execute: X,
) -> Result<(), Error>
where
    S: Store,
    R: Fn(String, usize, usize) -> RF,
    RF: std::future::Future<Output = Result<(Duration, Vec<Duration>), Error>>,
    X: Fn(String, i64, i64) -> XF,
    XF: std::future::Future<Output = Result<(), Error>>,
{
    let push = |mut c: Case, raw_rate: Option<f64>, cases: &mut Vec<Case>| {
        c.ratio_to_raw = raw_rate.map(|r| c.actions_per_sec / r);
        if print {
            println!("{}", line(&c));
        }
        cases.push(c);
    };
    let mut raw16 = None;
    for workers in WORKER_COUNTS {
        let per = sizes.lifecycles.div_ceil(workers);
        let (elapsed, latencies) = raw(format!("raw{workers}"), workers, per).await?;
        let raw_case = case("raw lifecycle", store, workers, elapsed, latencies);
        let raw_rate = raw_case.actions_per_sec;
        if workers == 16 {
            raw16 = Some(raw_rate);
        }
        push(raw_case, None, cases);
        let (elapsed, latencies) = library_lifecycle(ledger, &format!("lib{workers}"), workers, per).await?;
        push(case("library lifecycle", store, workers, elapsed, latencies), Some(raw_rate), cases);
    }
    let per = sizes.lifecycles.div_ceil(16).div_ceil(sizes.batch) * sizes.batch;
    let (elapsed, latencies) = library_batched(ledger, "batch", 16, per, sizes.batch).await?;
    push(case(&format!("library batched ({} per commit)", sizes.batch), store, 16, elapsed, latencies), raw16, cases);
    let (elapsed, latencies) = duplicate_storm(ledger, "storm", sizes.storm_keys).await?;
    push(case("duplicate storm (8 deliveries per key)", store, 16, elapsed, latencies), raw16, cases);
    let (elapsed, latencies) = library_submit(ledger, "submit", sizes.storm_keys).await?;
    let library = case("library submit (new keys)", store, 16, elapsed, latencies);
    let library_rate = library.actions_per_sec;
    push(library, raw16, cases);
    let (elapsed, latencies) = http_submit(ledger, "http", sizes.storm_keys).await?;
    let http = case("HTTP intake POST /v1/actions (new keys)", store, 16, elapsed, latencies);
    if print {
        println!(
            "{:<14} HTTP intake: {:.2}x the library's own submit in this run",
            store,
            http.actions_per_sec / library_rate.max(f64::EPSILON)
        );
    }
    push(http, raw16, cases);
    let now = ledger.store().now().await?.timestamp_millis() - 1000;
    for sql in expired_claims_sql(postgres) {
        execute(sql, i64::try_from(sizes.sweep_claims).unwrap_or(i64::MAX), now).await?;
    }
    let (elapsed, latencies) = recovery_sweep(ledger, sizes.sweep_claims).await?;
    push(case("recovery sweep (expired claims)", store, 16, elapsed, latencies), raw16, cases);
    Ok(())
}

/// One line of the human-readable table.
pub fn line(c: &Case) -> String {
    let ms = |value: Option<f64>| value.map_or_else(|| "-".to_owned(), |ms| format!("{ms:.2}"));
    let compared = match (c.ratio_to_raw, &c.baseline, c.max_ms) {
        (Some(ratio), Some(baseline), _) => format!("{ratio:.2}x {baseline}"),
        (Some(ratio), None, _) => format!("{ratio:.2}x raw"),
        (None, _, Some(max)) => format!("max {max:.2} ms"),
        (None, _, None) => "(baseline)".to_owned(),
    };
    format!(
        "{:<14} {:<62} {:>3} workers {:>9.0}/s  p50 {:>7} ms  p99 {:>7} ms  {compared}{}",
        c.store,
        c.name,
        c.workers,
        c.actions_per_sec,
        ms(c.p50_ms),
        ms(c.p99_ms),
        c.db_cpu_ms_per_action.map_or(String::new(), |ms| format!("  db cpu {ms:.3} ms/action"))
    )
}
