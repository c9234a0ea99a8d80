//! Console benchmark: a ledger of 1,000,000 actions on SQLite and PostgreSQL; time to first
//! frame, time per navigation key and per pane switch (median and p99), and the console's memory
//! against a ledger a hundred times smaller, measured in the same run.
//!
//! `cargo bench --bench console` (add `-- --actions 100000` for a quicker run, `--store sqlite`
//! or `--store postgres` for one store). Figures go to standard output.

use actionledger::Ledger;
use actionledger::console::model::Pane;
use actionledger::console::{ConsoleOptions, ScriptedConsole};
use actionledger::destination::Destinations;
use actionledger::domain::Person;
use actionledger::store::{PostgresStore, SqliteStore, Store};
use std::time::{Duration, Instant};

/// Loads `n` actions in bulk, spread over the states like a busy ledger: almost all completed,
/// a few in each review pane, some claims stale, 0 to 6 attempts each (for the most-attempts
/// order). Only transitions the schema allows are used.
const SQLITE_LOAD: [&str; 7] = [
    "WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < $1) \
     INSERT INTO actions (key, state, payload, fingerprint, destination, ownership_version, revision, attempts, \
     attempts_in_round, created_at, updated_at) \
     SELECT 'bench:order:' || n, 'pending', '{\"n\":' || n || '}', 'f' || n, 'crm', 0, 1, n % 7, 0, $2 + n, $2 + n FROM seq",
    "UPDATE actions SET state = 'in_progress', claimed_by = 'bench-worker', ownership_version = 1, \
     lease_expires_at = CASE WHEN id % 200 = 5 THEN $2 ELSE $2 + 100000000000 END WHERE id % 100 <> 0",
    "UPDATE actions SET state = 'completed', claimed_by = NULL, lease_expires_at = NULL, destination_id = 'R-' || id \
     WHERE state = 'in_progress' AND id % 100 > 5",
    "UPDATE actions SET state = 'unknown', claimed_by = NULL, lease_expires_at = NULL WHERE state = 'in_progress' AND id % 100 IN (1, 2)",
    "UPDATE actions SET state = 'failed', claimed_by = NULL, lease_expires_at = NULL WHERE state = 'in_progress' AND id % 100 = 3",
    "UPDATE actions SET state = 'held', claimed_by = NULL, lease_expires_at = NULL WHERE state = 'in_progress' AND id % 100 = 4",
    "UPDATE actions SET state = 'conflict', proposed_payload = '{}', proposed_fingerprint = 'p', resume_state = 'pending' \
     WHERE state = 'pending' AND id % 200 = 0",
];

fn postgres_load() -> Vec<String> {
    SQLITE_LOAD
        .iter()
        .map(|sql| {
            sql.replace(
                "WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < $1)",
                "WITH seq(n) AS (SELECT generate_series(1, $1::bigint))",
            )
            .replace("'bench:order:' || n", "'bench:order:' || n::text")
            .replace("'{\"n\":' || n || '}'", "'{\"n\":' || n::text || '}'")
            .replace("'f' || n", "'f' || n::text")
            .replace("'R-' || id", "'R-' || id::text")
        })
        .collect()
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The `percent`th percentile in milliseconds (nearest rank).
fn percentile(samples: &mut [Duration], percent: usize) -> f64 {
    samples.sort();
    let index = ((samples.len() - 1) * percent).div_ceil(100);
    samples[index].as_secs_f64() * 1000.0
}

struct Figures {
    first_frame_ms: f64,
    navigation: Vec<Duration>,
    pane_switch: Vec<Duration>,
    /// Each key of a filter typed: its page and the pane counts that follow it, at every key.
    filter_apply: Vec<Duration>,
    /// Moving around a filtered pane, or one sorted oldest first.
    filtered_navigation: Vec<Duration>,
    /// `s` to most attempts first, each pane: its first page, sorted by the store.
    attempts_sort: Vec<Duration>,
    /// Moving around panes sorted by most attempts, the largest (completed) included.
    attempts_navigation: Vec<Duration>,
    console_rss_growth_kib: u64,
}

async fn measure<S: Store>(ledger: &Ledger<S>) -> Figures {
    let options = ConsoleOptions {
        owner: Person::parse("bench").unwrap(),
        ledger_label: "bench".to_owned(),
        destinations: Destinations::default(),
        refresh: Duration::from_hours(1),
        hint: None,
        filter: None,
    };
    let before = rss_kib();
    let started = Instant::now();
    let mut console = ScriptedConsole::start(ledger, &options, 80, 24).await.unwrap();
    console.screen().unwrap();
    let first_frame_ms = started.elapsed().as_secs_f64() * 1000.0;
    let mut navigation = Vec::new();
    for key in ["2"].iter().chain(["j"; 300].iter()).chain(["<PageDown>"; 50].iter()).chain(["k"; 100].iter()) {
        let t = Instant::now();
        console.press(key).await.unwrap();
        console.screen().unwrap();
        navigation.push(t.elapsed());
    }
    navigation.remove(0);
    let mut pane_switch = Vec::new();
    for round in 0..20 {
        // The review panes, then the history panes (completed, cancelled, all).
        for pane in ["1", "2", "3", "4", "5", "6", "7", "9", "h", "h"] {
            let t = Instant::now();
            console.press(pane).await.unwrap();
            console.screen().unwrap();
            if round > 0 {
                pane_switch.push(t.elapsed());
            }
        }
    }
    let mut filter_apply = Vec::new();
    let mut filtered_navigation = Vec::new();
    for (pane, filter) in
        [("3", "dest:crm"), ("3", "order:5"), ("9", "age:1m"), ("9", "dest:crm order:9"), ("2", "mine"), ("9", "")]
    {
        console.press(pane).await.unwrap();
        console.press("/").await.unwrap();
        // The filter narrows the pane, counts and all, at each key typed: each key is a filter
        // applied (the empty line too, which clears the one before).
        let typed: Vec<String> =
            filter.chars().map(|c| if c == '<' { "<lt>".to_owned() } else { c.to_string() }).collect();
        for key in typed.iter().map(String::as_str).chain(["<Enter>"]) {
            let t = Instant::now();
            console.press(key).await.unwrap();
            console.screen().unwrap();
            filter_apply.push(t.elapsed());
        }
        for key in ["j"; 40].iter().chain(["<PageDown>"; 10].iter()) {
            let t = Instant::now();
            console.press(key).await.unwrap();
            console.screen().unwrap();
            filtered_navigation.push(t.elapsed());
        }
    }
    // Oldest first (`s`) over the largest pane, completed actions: the far end of the index.
    to_completed(&mut console).await;
    console.press("s").await.unwrap();
    for key in ["j"; 40].iter().chain(["<PageDown>"; 10].iter()).chain(["G", "g"].iter()) {
        let t = Instant::now();
        console.press(key).await.unwrap();
        console.screen().unwrap();
        filtered_navigation.push(t.elapsed());
    }
    // Most attempts first (`s` once more): no index serves this order, so each page scans the
    // pane's rows; the completed pane holds almost all of them.
    let mut attempts_sort = Vec::new();
    let mut attempts_navigation = Vec::new();
    to_completed(&mut console).await;
    // The sort key on the completed pane, then the cancelled pane, all actions, and each review
    // pane in that order.
    for key in ["s", "h", "h", "2", "3", "1"] {
        let t = Instant::now();
        console.press(key).await.unwrap();
        console.screen().unwrap();
        attempts_sort.push(t.elapsed());
        assert!(console.screen().unwrap().contains("most attempts first"));
        for key in ["j"; 20].iter().chain(["<PageDown>"; 5].iter()).chain(["G", "g"].iter()) {
            let t = Instant::now();
            console.press(key).await.unwrap();
            console.screen().unwrap();
            attempts_navigation.push(t.elapsed());
        }
    }
    let console_rss_growth_kib = rss_kib().saturating_sub(before);
    Figures {
        first_frame_ms,
        navigation,
        pane_switch,
        filter_apply,
        filtered_navigation,
        attempts_sort,
        attempts_navigation,
        console_rss_growth_kib,
    }
}

/// Shows the completed pane: `9`, then `h` until it is the history pane shown.
async fn to_completed<S: Store>(console: &mut ScriptedConsole<S>) {
    console.press("9").await.unwrap();
    while console.model().pane != Pane::Completed {
        console.press("h").await.unwrap();
    }
}

fn report(store: &str, actions: u64, load_s: f64, mut f: Figures) {
    println!(
        "{store:<10} {actions:>9} actions (loaded in {load_s:.1}s): first frame {:.1} ms | navigation p50 {:.2} ms p99 {:.2} ms | \
         pane switch p50 {:.2} ms p99 {:.2} ms | filtered or oldest-first navigation p50 {:.2} ms p99 {:.2} ms | \
         filter typed, each key with its counts, p50 {:.1} ms max {:.1} ms | most-attempts first page (completed, cancelled, \
         all, in progress, unknown, pending) {} | most-attempts navigation p50 {:.2} ms p99 {:.2} ms | console RSS growth {} KiB",
        f.first_frame_ms,
        percentile(&mut f.navigation, 50),
        percentile(&mut f.navigation, 99),
        percentile(&mut f.pane_switch, 50),
        percentile(&mut f.pane_switch, 99),
        percentile(&mut f.filtered_navigation, 50),
        percentile(&mut f.filtered_navigation, 99),
        percentile(&mut f.filter_apply, 50),
        percentile(&mut f.filter_apply, 100),
        f.attempts_sort.iter().map(|d| format!("{:.1} ms", d.as_secs_f64() * 1000.0)).collect::<Vec<_>>().join(" / "),
        percentile(&mut f.attempts_navigation, 50),
        percentile(&mut f.attempts_navigation, 99),
        f.console_rss_growth_kib
    );
}

async fn sqlite(actions: u64) {
    let dir = std::env::temp_dir().join(format!("actionledger-bench-console-{}-{actions}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("bench.db").display());
    let store = SqliteStore::open(&url).await.unwrap();
    let now = store.now().await.unwrap().timestamp_millis() - i64::try_from(actions).unwrap();
    let t = Instant::now();
    let mut tx = store.pool().begin().await.unwrap();
    for sql in SQLITE_LOAD {
        sqlx::query(sql).bind(i64::try_from(actions).unwrap()).bind(now).execute(&mut *tx).await.unwrap();
    }
    tx.commit().await.unwrap();
    sqlx::query("ANALYZE").execute(store.pool()).await.unwrap();
    let load_s = t.elapsed().as_secs_f64();
    let figures = measure(&Ledger::new(store.clone())).await;
    report("sqlite", actions, load_s, figures);
    store.close().await;
    let _ = std::fs::remove_dir_all(dir);
}

async fn postgres(actions: u64) {
    let url = match actionledger::testkit::throwaway_pg::fresh_database().await {
        Ok(url) => url,
        Err(why) => {
            println!("postgres: skipped ({why})");
            return;
        }
    };
    let store = PostgresStore::open(&url).await.unwrap();
    let now = store.now().await.unwrap().timestamp_millis() - i64::try_from(actions).unwrap();
    let t = Instant::now();
    let mut tx = store.pool().begin().await.unwrap();
    for sql in postgres_load() {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(i64::try_from(actions).unwrap())
            .bind(now)
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    // What autovacuum does to a ledger that has settled down: statistics and a visibility map.
    sqlx::query("VACUUM ANALYZE").execute(store.pool()).await.unwrap();
    let load_s = t.elapsed().as_secs_f64();
    let figures = measure(&Ledger::new(store.clone())).await;
    report("postgres", actions, load_s, figures);
    store.close().await;
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let actions: u64 = value("--actions").map_or(1_000_000, |v| v.parse().expect("--actions takes a number"));
    let store = value("--store").unwrap_or_else(|| "both".to_owned());
    println!(
        "console benchmark: 80x24, one page of rows per query; targets: first frame < 200 ms, navigation p99 < 16 ms, pane switch p99 < 50 ms"
    );
    for size in [actions / 100, actions] {
        if store == "both" || store == "sqlite" {
            sqlite(size).await;
        }
        if store == "both" || store == "postgres" {
            postgres(size).await;
        }
    }
}
