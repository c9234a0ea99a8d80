//! `bench`: ledger throughput against the raw-SQL limit (and the HTTP intake against the library's own
//! submit), and a worker's memory over a long run.

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
    /// Only the drain cases: a backlog of this many pending actions worked off by 16 workers, raw
    /// and through the worker's path (one action at a time, also for a destination declaring an
    /// idempotency key, whose claims start their attempts; and batched), and end to end (16
    /// producers enqueue the backlog, then 16 workers drain it), twice each.
    #[arg(long, value_name = "ACTIONS", conflicts_with = "worker_memory")]
    drain: Option<usize>,
    /// With --worker-memory: the worker's batch size.
    #[arg(long, default_value_t = 64, requires = "worker_memory")]
    batch: usize,
}

/// Without `--db`: two SQLite files (FULL and NORMAL durability), and in a test build a throwaway
/// PostgreSQL. With
/// it: a fresh file beside the SQLite file named, or a fresh schema in the PostgreSQL database
/// named; everything created is removed afterwards.
pub(super) async fn bench(db: Option<String>, args: BenchArgs) -> Result<i32, Error> {
    use crate::bench::{Sizes, Target};
    let sizes = match args.drain {
        Some(0) => return Err(Error::Invalid("--drain needs at least 1 action".to_owned())),
        Some(actions) => Sizes::drain_only(actions),
        None if args.quick => Sizes::quick(),
        None => Sizes::full(),
    };
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
            let pool =
                sqlx::PgPool::connect(&url).await.map_err(|e| Error::Invalid(format!("{}: {e}", redact_url(&url))))?;
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
        print_header(&args, sizes);
    }
    let mut cases = Vec::new();
    let mut result = Ok(());
    for target in &targets {
        result = crate::bench::run_target(target, sizes, &mut cases, !args.json).await;
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

/// The line above the human-readable table: what each case measures.
fn print_header(args: &BenchArgs, sizes: crate::bench::Sizes) {
    if sizes.drain_only {
        println!(
            "actionledger bench --drain {}: a backlog of {} pending actions per case, {} workers; each ratio is to \
             the raw drain measured just before it (end to end: {} producers enqueue the backlog, then the \
             workers drain it; the ratio is to the raw end to end)",
            sizes.drain,
            sizes.drain,
            crate::bench::DRAIN_WORKERS,
            crate::bench::DRAIN_PRODUCERS
        );
    } else {
        println!(
            "actionledger bench{}: {} lifecycles per case; each ratio is to the raw SQL baseline measured just before it",
            if args.quick { " --quick" } else { "" },
            sizes.lifecycles
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
