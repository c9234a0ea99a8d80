//! `bench`: ledger throughput against the raw-SQL limit (and the HTTP intake against the library's own
//! submit), the default worker's drain, latency and lost answers, and a worker's memory over a long
//! run.

use super::{is_postgres, redact_url};
use crate::error::{Error, exit};
use clap::Args;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// A smaller run that finishes within a minute.
    #[arg(long)]
    quick: bool,
    /// Print the cases as one JSON document (errors too: {"error", "exit_code"}).
    #[arg(long)]
    pub(super) json: bool,
    /// Instead of the throughput cases: run a worker process over this many actions against the
    /// simulated CRM and sample its resident memory.
    #[arg(long, value_name = "ACTIONS")]
    worker_memory: Option<usize>,
    /// Only the drain cases (and the others named): a backlog of this many pending actions worked
    /// off by 16 workers: raw, by 16 default workers in this process (for a destination declaring
    /// nothing, and for one declaring an idempotency key, whose claims start their attempts), and
    /// by the ledger calls a worker makes, made directly (one action at a time, also for the keyed
    /// destination; and batched); and end to end (16 producers enqueue the backlog, then the raw
    /// drain, the default workers or the ledger calls drain it), twice each.
    #[arg(long, value_name = "ACTIONS", conflicts_with = "worker_memory")]
    drain: Option<usize>,
    /// Only the backlog cases (and the others named): the raw drain and 16 default workers each
    /// work off a backlog of each size, smallest first, to show whether the rate falls as the
    /// backlog grows (the full run: 4000,100000).
    #[arg(long, value_name = "SIZES", value_delimiter = ',', conflicts_with = "worker_memory")]
    backlog: Vec<usize>,
    /// Only the latency case (and the others named): actions submitted through `submit` at 50 a
    /// second for this long to one idle default worker, then to 16, in this process; the time from
    /// each submit's start to its perform's start, p50, p99 and max, whatever wakes the worker.
    #[arg(
        long,
        value_name = "SECONDS",
        num_args = 0..=1,
        default_missing_value = "10",
        conflicts_with = "worker_memory"
    )]
    latency: Option<u64>,
    /// Only the lost-answers case (and the others named): one default worker (16 send slots)
    /// performs this many actions against the simulated CRM, fault-free and with 30% of the
    /// answers dropped after the CRM committed (the lookup settles them, 20 ms after), twice each.
    #[arg(
        long,
        value_name = "ACTIONS",
        num_args = 0..=1,
        default_missing_value = "1000",
        conflicts_with = "worker_memory"
    )]
    lost_answers: Option<usize>,
    /// With --worker-memory: the worker's batch size.
    #[arg(long, default_value_t = 64, requires = "worker_memory")]
    batch: usize,
}

/// Without `--db`: two SQLite files (FULL and NORMAL durability), and in a test build a throwaway
/// PostgreSQL. With
/// it: a fresh file beside the SQLite file named, or a fresh schema in the PostgreSQL database
/// named; everything created is removed afterwards.
pub(super) async fn bench(db: Option<String>, args: BenchArgs) -> Result<i32, Error> {
    use crate::bench::Target;
    let sizes = sizes(&args)?;
    let scratch = std::env::temp_dir().join(format!("actionledger-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).map_err(|e| Error::io(format!("cannot create {}", scratch.display()), e))?;
    if let Some(actions) = args.worker_memory {
        if actions == 0 || !(1..=crate::config::MAX_BATCH).contains(&args.batch) {
            return Err(Error::Invalid(format!(
                "--worker-memory needs at least 1 action and --batch 1 to {}",
                crate::config::MAX_BATCH
            )));
        }
        if db.is_some() {
            return Err(Error::Invalid("--worker-memory makes its own SQLite ledger; leave out --db".to_owned()));
        }
        let run = crate::bench::worker_memory(&scratch, actions, args.batch, !args.json).await;
        let _ = std::fs::remove_dir_all(&scratch);
        let run = run?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&run).expect("runs serialize"));
        }
        return Ok(if run.flat { exit::OK } else { exit::ERROR });
    }
    let mut schema = None;
    let targets: Vec<Target> = match db {
        None => {
            let mut targets = vec![
                Target::Sqlite { synchronous: crate::store::SqliteSynchronous::Full, path: scratch.join("full.db") },
                Target::Sqlite {
                    synchronous: crate::store::SqliteSynchronous::Normal,
                    path: scratch.join("normal.db"),
                },
            ];
            targets.extend(throwaway_postgres().await.map(|url| Target::Postgres { url }));
            targets
        }
        Some(url) if is_postgres(&url) => {
            let name = format!("actionledger_bench_{}", std::process::id());
            // Through the ledger's own reading of the URL: sqlx's would log an unknown parameter's value.
            let options = crate::store::pg_connect_options(&url)?;
            let pool = sqlx::PgPool::connect_with(options)
                .await
                .map_err(|e| Error::Invalid(format!("{}: {}", redact_url(&url), crate::store::server_words(&e))))?;
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {name}")))
                .execute(&pool)
                .await
                .map_err(crate::store::StoreError::from)?;
            let separator = if url.contains('?') { '&' } else { '?' };
            schema = Some((pool, name.clone()));
            vec![Target::Postgres { url: format!("{url}{separator}options=-c%20search_path%3D{name}") }]
        }
        Some(url) => {
            let given = url.trim_start_matches("sqlite://").trim_start_matches("sqlite:");
            let dir = std::path::Path::new(given)
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."));
            vec![Target::Sqlite {
                synchronous: crate::store::SqliteSynchronous::Full,
                path: dir.join(format!("actionledger-bench-{}.db", std::process::id())),
            }]
        }
    };
    if !args.json {
        print_header(&args, &sizes);
    }
    let mut cases = Vec::new();
    let mut result = Ok(());
    for target in &targets {
        result = crate::bench::run_target(target, &sizes, &mut cases, !args.json).await;
        if result.is_err() {
            break;
        }
    }
    if let Some((pool, name)) = schema {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {name} CASCADE"))).execute(&pool).await;
    }
    let _ = std::fs::remove_dir_all(&scratch);
    result?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&cases).expect("cases serialize"));
    }
    Ok(exit::OK)
}

/// The cases the flags name, or every case (smaller with `--quick`) where none is named.
fn sizes(args: &BenchArgs) -> Result<crate::bench::Sizes, Error> {
    use crate::bench::Sizes;
    if args.drain.is_none() && args.backlog.is_empty() && args.latency.is_none() && args.lost_answers.is_none() {
        return Ok(if args.quick { Sizes::quick() } else { Sizes::full() });
    }
    if args.drain == Some(0) {
        return Err(Error::Invalid("--drain needs at least 1 action".to_owned()));
    }
    if args.backlog.contains(&0) {
        return Err(Error::Invalid("--backlog needs sizes of at least 1 action".to_owned()));
    }
    if args.latency == Some(0) {
        return Err(Error::Invalid("--latency needs at least 1 second".to_owned()));
    }
    if args.lost_answers == Some(0) {
        return Err(Error::Invalid("--lost-answers needs at least 1 action".to_owned()));
    }
    Ok(Sizes {
        drain: args.drain.unwrap_or(0),
        backlogs: args.backlog.clone(),
        latency: args.latency.map(std::time::Duration::from_secs),
        lost_answers: args.lost_answers.unwrap_or(0),
        ..Sizes::none()
    })
}

/// The lines above the human-readable table: what each case measures.
fn print_header(args: &BenchArgs, sizes: &crate::bench::Sizes) {
    if sizes.drain > 0 && !sizes.throughput {
        println!(
            "actionledger bench --drain {}: a backlog of {} pending actions per case, {} workers; each ratio is to \
             the raw drain measured just before it (end to end: {} producers enqueue the backlog, then the \
             workers drain it; the ratio is to the raw end to end)",
            sizes.drain,
            sizes.drain,
            crate::bench::DRAIN_WORKERS,
            crate::bench::DRAIN_PRODUCERS
        );
    }
    if sizes.throughput {
        println!(
            "actionledger bench{}: {} lifecycles per case; each ratio is to the raw SQL baseline measured just before \
             it; before them, a drain of {} pending actions per case as `bench --drain` runs it, and the cases below",
            if args.quick { " --quick" } else { "" },
            sizes.lifecycles,
            sizes.drain
        );
    }
    if !sizes.backlogs.is_empty() {
        let list: Vec<String> = sizes.backlogs.iter().map(usize::to_string).collect();
        println!(
            "backlog {}: the raw drain, then {} default workers, over each backlog in turn; each worker drain's ratio \
             is to the raw drain of its size",
            list.join(","),
            crate::bench::DRAIN_WORKERS
        );
    }
    if let Some(duration) = sizes.latency {
        println!(
            "latency: actions submitted at {}/s for {} s to 1, then {}, idle default workers in this process; from each \
             submit's start to its perform's start",
            crate::bench::LATENCY_RATE,
            duration.as_secs(),
            crate::bench::DRAIN_WORKERS
        );
    }
    if sizes.lost_answers > 0 {
        println!(
            "lost answers: one default worker (16 send slots) performs {} actions against the simulated CRM, \
             fault-free, then with {:.0}% of the answers dropped after the CRM committed (lookup declared, settled \
             {} ms after), twice each; each lossy run's ratio is to the fault-free run of its round",
            sizes.lost_answers,
            crate::bench::LOST_SHARE * 100.0,
            crate::bench::LOST_ANSWERS_SETTLE.as_millis()
        );
    }
}

/// The PostgreSQL round of a `bench` without `--db`: a throwaway cluster, which only test builds
/// carry (the test kit starts it from the PostgreSQL installed).
#[cfg(feature = "testkit")]
async fn throwaway_postgres() -> Option<String> {
    crate::testkit::throwaway_pg::commit_durably();
    match crate::testkit::throwaway_pg::fresh_database().await {
        Ok(url) => Some(url),
        Err(why) => {
            eprintln!("PostgreSQL skipped: {why}");
            None
        }
    }
}

/// A release build starts no database of its own: PostgreSQL is measured in the database the user
/// names.
#[cfg(not(feature = "testkit"))]
#[allow(clippy::unused_async)]
async fn throwaway_postgres() -> Option<String> {
    eprintln!(
        "PostgreSQL skipped: give --db postgres://USER@HOST/DATABASE to measure it (in a fresh schema, dropped \
         afterwards)"
    );
    None
}
