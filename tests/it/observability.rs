//! Logs, metrics, health and `stats`: a worker process scraped over HTTP while it drains against
//! the simulated CRM, readiness following a PostgreSQL outage, `stats --json` against a ledger set
//! up by hand on both stores, JSON log lines, and untrusted text escaped in the log bytes.

use crate::support::crm::every_create_delayed;
use crate::support::process::{WorkerProcess, command};
use crate::support::{self, TestDb, order};
use actionledger::domain::Evidence;
use actionledger::ledger::{Outcome, Report};
use actionledger::sim_crm::{FaultPlan, Options, SimCrm, Stats};
use actionledger::store::Store;
use serde_json::Value;
use std::time::{Duration, Instant};

async fn crm(faults: FaultPlan) -> SimCrm {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    SimCrm::start(listener, Options { faults, ..Options::default() }).unwrap()
}

async fn get(url: &str) -> (u16, String) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let response = reqwest::get(url).await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// The value of one sample line (`name{labels} value`) in a scrape, as written; "" when absent.
fn sample<'s>(scrape: &'s str, series: &str) -> &'s str {
    scrape.lines().find_map(|line| line.strip_prefix(series).and_then(|rest| rest.strip_prefix(' '))).unwrap_or("")
}

/// The sum of every sample of a counter whose labels include `with` (e.g. `outcome="completed"`).
fn sum_of(scrape: &str, metric: &str, with: &str) -> u64 {
    scrape
        .lines()
        .filter(|line| line.starts_with(&format!("{metric}{{")) && line.contains(with))
        .map(|line| line.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

/// `url` answers Prometheus text 0.0.4 unless asked for OpenMetrics, and OpenMetrics when asked as
/// Prometheus asks, each by its own rules (a counter's family named with or without `_total`).
pub(crate) async fn scrapes_follow_accept(url: &str) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let prometheus_asks = "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,\
                           text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
    for (accept, content_type, counter_family, openmetrics) in [
        (None, "text/plain; version=0.0.4", "# TYPE actionledger_claims_total counter\n", false),
        (Some("text/plain"), "text/plain; version=0.0.4", "# TYPE actionledger_claims_total counter\n", false),
        (
            Some(prometheus_asks),
            "application/openmetrics-text; version=1.0.0",
            "# TYPE actionledger_claims counter\n",
            true,
        ),
    ] {
        let mut request = client.get(url);
        if let Some(accept) = accept {
            request = request.header("Accept", accept);
        }
        let response = request.send().await.unwrap();
        let answered = response.headers()["content-type"].to_str().unwrap().to_owned();
        let body = response.text().await.unwrap();
        assert!(answered.starts_with(content_type), "{accept:?}: {answered}");
        assert!(body.contains(counter_family), "{accept:?}: {body}");
        assert_eq!(
            body.ends_with("# EOF\n"),
            openmetrics,
            "OpenMetrics ends with its marker, text 0.0.4 has none: {body}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_from_a_draining_worker_match_what_the_crm_received() {
    const ACTIONS: u64 = 12;
    let db = support::sqlite().await;
    // Slow answers, so that the scrape below happens while the worker is still draining.
    let crm = crm(every_create_delayed(150)).await;
    for n in 0..ACTIONS {
        db.ledger.submit(&order(&format!("obs:metrics:{n}"), r#"{"n":1}"#)).await.unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("actionledger.toml"), crm.destination_config("crm")).unwrap();
    let mut worker = command(dir.path(), &db.url);
    worker.args([
        "worker",
        "--worker-id",
        "obs-1",
        "--concurrency",
        "2",
        "--metrics-addr",
        "127.0.0.1:0",
        "--metrics-refresh",
        "200ms",
    ]);
    let worker = WorkerProcess::spawn(worker);
    let addr = worker.metrics_addr().await;
    assert_eq!(get(&format!("http://{addr}/healthz")).await.0, 200);
    assert_eq!(get(&format!("http://{addr}/readyz")).await.0, 200);

    // Mid-drain: some requests counted, not all.
    let deadline = Instant::now() + Duration::from_mins(1);
    let mid = loop {
        let (status, scrape) = get(&format!("http://{addr}/metrics")).await;
        assert_eq!(status, 200);
        let sent = sum_of(&scrape, "actionledger_attempts_total", "destination=\"crm\"");
        if sent >= 1 {
            break scrape;
        }
        assert!(Instant::now() < deadline, "no attempt counted:\n{scrape}\n{}", worker.stderr());
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mid_completed = sum_of(&mid, "actionledger_attempts_total", "outcome=\"completed\"");
    assert!(mid_completed < ACTIONS, "the scrape was not mid-drain:\n{mid}");
    println!("scrape of /metrics mid-drain:\n{mid}");
    // The refresher's first reading, as the worker started, found the queue full.
    assert!(!sample(&mid, "actionledger_oldest_pending_seconds{destination=\"crm\"}").is_empty(), "{mid}");
    support::promtool::assert_metrics_clean(&mid);

    // Drained: every count agrees with what the CRM saw, and the gauges caught up.
    let done = loop {
        let (_, scrape) = get(&format!("http://{addr}/metrics")).await;
        if sample(&scrape, "actionledger_actions{state=\"completed\"}") == ACTIONS.to_string()
            && sample(&scrape, "actionledger_oldest_pending_seconds{destination=\"crm\"}") == "0"
        {
            break scrape;
        }
        assert!(Instant::now() < deadline, "the gauges never showed the drain:\n{scrape}\n{}", worker.stderr());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (_, crm_stats) = get(&format!("http://{}/stats", crm.addr())).await;
    let crm_stats: Stats = serde_json::from_str(&crm_stats).unwrap();
    assert_eq!(crm_stats.records, ACTIONS);
    let records = crm_stats.records.to_string();
    let completed = sample(&done, "actionledger_attempts_total{destination=\"crm\",outcome=\"completed\"}");
    assert_eq!(completed, records, "{done}");
    assert_eq!(sum_of(&done, "actionledger_attempts_total", "destination=\"crm\""), crm_stats.records, "{done}");
    assert_eq!(sample(&done, "actionledger_request_duration_seconds_count{destination=\"crm\"}"), records);
    let seconds: f64 = sample(&done, "actionledger_request_duration_seconds_sum{destination=\"crm\"}").parse().unwrap();
    assert!(seconds >= 1.5, "twelve requests of at least 150 ms each: {seconds}");
    assert_eq!(sample(&done, "actionledger_claims_total"), ACTIONS.to_string());
    assert_eq!(sample(&done, "actionledger_actions{state=\"pending\"}"), "0");
    assert_eq!(sample(&done, "actionledger_stale_claims"), "0");
    assert_eq!(sample(&done, "actionledger_fenced_writes_total"), "0");
    assert_eq!(sample(&done, "actionledger_ready"), "1");
    assert!(done.contains("actionledger_oldest_action_age_seconds{state=\"unknown\"} 0"), "{done}");
    assert!(done.contains("actionledger_oldest_action_age_seconds{state=\"pending\"} 0"), "{done}");
    // Each action sent once: every send was the first of its action.
    assert_eq!(sample(&done, "actionledger_sends_per_action_count{destination=\"crm\"}"), records);
    assert_eq!(sample(&done, "actionledger_sends_per_action_bucket{destination=\"crm\",le=\"1\"}"), records);
    let commit = env!("ACTIONLEDGER_BUILD").split(' ').next().unwrap();
    let build = format!("actionledger_build_info{{version=\"{}\",commit=\"{commit}\"}}", env!("CARGO_PKG_VERSION"));
    assert_eq!(sample(&done, &build), "1", "{done}");
    let pool_max: u32 = sample(&done, "actionledger_database_connections_max").parse().unwrap();
    let open: u32 = ["in_use", "idle"]
        .iter()
        .map(|state| {
            sample(&done, &format!("actionledger_database_connections{{state=\"{state}\"}}")).parse::<u32>().unwrap()
        })
        .sum();
    assert!(pool_max > 0 && (1..=pool_max).contains(&open), "{open} of {pool_max} connections:\n{done}");
    let resident: u64 = sample(&done, "process_resident_memory_bytes").parse().unwrap();
    assert!(resident > 1 << 20, "the worker's resident memory: {resident} bytes");
    support::promtool::assert_metrics_clean(&done);
    scrapes_follow_accept(&format!("http://{addr}/metrics")).await;

    let summary = worker.terminate().await;
    assert!(summary.contains(&format!("completed {ACTIONS}")), "{summary}");
}

/// The metrics endpoint is held as `serve` is: a client that never finishes its request headers is
/// closed at the header timeout (10 s by default) and logged, and the endpoint answers others
/// meanwhile. Without the timeout such a connection stays open for as long as the client likes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_endpoint_closes_a_client_that_never_finishes_its_headers() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let db = support::sqlite().await;
    let crm = crm(FaultPlan::default()).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("actionledger.toml"), crm.destination_config("crm")).unwrap();
    let mut worker = command(dir.path(), &db.url);
    worker.args(["worker", "--metrics-addr", "127.0.0.1:0"]);
    let worker = WorkerProcess::spawn(worker);
    let addr = worker.metrics_addr().await;
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"GET /metr").await.unwrap();
    let opened = Instant::now();
    assert_eq!(get(&format!("http://{addr}/healthz")).await.0, 200, "others are answered meanwhile");
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), slow.read_to_end(&mut rest)).await;
    let held = opened.elapsed();
    assert!(read.is_ok(), "the slow client was still connected after 30 s:\n{}", worker.stderr());
    assert!(held >= Duration::from_secs(9), "closed after {held:?}, before the header timeout");
    // The worker's standard error is read by a thread of its own: the line may follow the close.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !worker.stderr().contains("no complete request headers within 10s") {
        assert!(Instant::now() < deadline, "the closed client was not logged:\n{}", worker.stderr());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.terminate().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_database_down_and_back() {
    let cluster = match actionledger::testkit::throwaway_pg::start_private_server() {
        Ok(cluster) => cluster,
        Err(error) if std::env::var("CI").is_err() => {
            eprintln!("SKIPPED: no PostgreSQL server of its own for this test: {error}");
            return;
        }
        Err(error) => panic!("{error}"),
    };
    let crm = crm(FaultPlan::default()).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("actionledger.toml"), crm.destination_config("crm")).unwrap();
    let mut worker = command(dir.path(), &cluster.url);
    worker.args(["worker", "--metrics-addr", "127.0.0.1:0", "--metrics-refresh", "200ms"]);
    let worker = WorkerProcess::spawn(worker);
    let addr = worker.metrics_addr().await;
    let ready = format!("http://{addr}/readyz");
    let until = |want: u16| {
        let ready = ready.clone();
        async move {
            let deadline = Instant::now() + Duration::from_mins(1);
            loop {
                let (status, body) = get(&ready).await;
                if status == want {
                    return body;
                }
                assert!(Instant::now() < deadline, "/readyz stayed {status} ({body}), wanted {want}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    until(200).await;
    cluster.stop().unwrap();
    let said = until(503).await;
    assert!(said.contains("not ready"), "{said}");
    let deadline = Instant::now() + Duration::from_mins(1);
    while sample(&get(&format!("http://{addr}/metrics")).await.1, "actionledger_ready") != "0" {
        assert!(Instant::now() < deadline, "the ready gauge never fell");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(get(&format!("http://{addr}/healthz")).await.0, 200, "the process is alive all along");
    cluster.start().unwrap();
    until(200).await;
    let deadline = Instant::now() + Duration::from_mins(1);
    while sample(&get(&format!("http://{addr}/metrics")).await.1, "actionledger_ready") != "1" {
        assert!(Instant::now() < deadline, "the ready gauge never rose again");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    worker.terminate().await;
}

/// `stats --json` reports the figures of a ledger set up by hand: two pending actions, one claim
/// whose lease expired, one unknown, one held.
async fn stats_json_reports_the_ledger<S: Store>(db: TestDb<S>) {
    let ledger = &db.ledger;
    for n in 0..5 {
        ledger.submit(&order(&format!("obs:stats:{n}"), r#"{"n":1}"#)).await.unwrap();
    }
    let long = Duration::from_hours(1);
    let unknown = ledger.claim("w-stats", long, 1).await.unwrap().remove(0);
    let attempt = ledger.start_attempt(&unknown).await.unwrap();
    let report = Report { outcome: Outcome::Unknown, error: Some("timed out".into()), evidence: Evidence::default() };
    ledger.record_result(&unknown, attempt, &report).await.unwrap();
    let held = ledger.claim("w-stats", long, 1).await.unwrap().remove(0);
    ledger.hold(&held, "checked by hand").await.unwrap();
    ledger.claim("w-stats", Duration::from_millis(1), 1).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;

    let dir = tempfile::tempdir().unwrap();
    let output = command(dir.path(), &db.url).args(["stats", "--json"]).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stats: Value = serde_json::from_slice(&output.stdout).unwrap();
    let by_state = &stats["states"];
    let counts: Vec<(&str, i64)> = ["pending", "in_progress", "completed", "failed", "unknown", "conflict", "held"]
        .into_iter()
        .map(|s| (s, by_state[s].as_i64().unwrap()))
        .collect();
    assert_eq!(
        counts,
        [
            ("pending", 2),
            ("in_progress", 1),
            ("completed", 0),
            ("failed", 0),
            ("unknown", 1),
            ("conflict", 0),
            ("held", 1)
        ],
        "{stats}"
    );
    assert_eq!(stats["total"], 5);
    assert_eq!(stats["stale_claims"], 1, "{stats}");
    assert!(stats["oldest_unknown_seconds"].as_i64().is_some_and(|s| (0..600).contains(&s)), "{stats}");
    assert!(stats["oldest_held_seconds"].as_i64().is_some(), "{stats}");
    assert!(stats["oldest_conflict_seconds"].is_null(), "no conflict: {stats}");
    // The same figures from the library, as the metrics refresher reads them.
    let direct = ledger.stats().await.unwrap();
    assert_eq!((direct.total, direct.stale_claims), (5, 1));

    let text = command(dir.path(), &db.url).arg("stats").output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("stale claims (lease expired): 1"), "{text}");
    assert!(text.contains("oldest conflict: none"), "{text}");
}

/// Readiness reads the schema through the ledger's own pool: current is ready; a migration missing
/// or one this build does not know is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_wants_the_schema_this_build_expects() {
    use actionledger::ledger::NotReady;
    let db = support::sqlite().await;
    db.ledger.readiness().await.unwrap();
    let pool = db.ledger.store().pool();
    let newest: i64 = sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations").fetch_one(pool).await.unwrap();
    let row: (String, Vec<u8>) = sqlx::query_as("SELECT description, checksum FROM _sqlx_migrations WHERE version = ?")
        .bind(newest)
        .fetch_one(pool)
        .await
        .unwrap();
    sqlx::query("DELETE FROM _sqlx_migrations WHERE version = ?").bind(newest).execute(pool).await.unwrap();
    assert!(matches!(db.ledger.readiness().await, Err(NotReady::SchemaBehind)));
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, installed_on, success, checksum, execution_time) \
         VALUES (?, ?, CURRENT_TIMESTAMP, 1, ?, 0), (99999, 'from a newer build', CURRENT_TIMESTAMP, 1, x'00', 0)",
    )
    .bind(newest)
    .bind(&row.0)
    .bind(&row.1)
    .execute(pool)
    .await
    .unwrap();
    let newer = db.ledger.readiness().await.unwrap_err();
    assert!(matches!(newer, NotReady::SchemaNewer), "{newer}");
}

/// The value of a counter in this process's metrics.
fn counter(name: &str) -> u64 {
    sample(&actionledger::metrics::encode_text(), name).parse().unwrap()
}

/// The ledger counts claims, renewals, fenced writes and settlements by lookup where they happen.
/// Other tests in this process count too, so each count is checked to have grown by at least
/// what this test did.
async fn the_ledger_counts_claims_renewals_fenced_writes_and_lookups<S: Store>(db: TestDb<S>) {
    use actionledger::domain::{ActorKind, LookupReport, LookupVerdict};
    let ledger = &db.ledger;
    let before: Vec<u64> = ["claims_total", "lease_renewals_total", "fenced_writes_total", "settled_by_lookup_total"]
        .iter()
        .map(|name| counter(&format!("actionledger_{name}")))
        .collect();
    ledger.submit(&order("obs:count:1", r#"{"n":1}"#)).await.unwrap();
    let first = ledger.claim("w-old", Duration::from_millis(1), 1).await.unwrap().remove(0);
    tokio::time::sleep(Duration::from_millis(20)).await;
    // Nothing was sent under the first claim: taken over, a second claim.
    let recovered = ledger.recover_expired(first.key(), first.ownership_version(), "w-new", Duration::from_hours(1));
    let actionledger::ledger::Recovery::Claimed(second) = recovered.await.unwrap() else { panic!("taken over") };
    ledger.heartbeat(&second, Duration::from_hours(1)).await.unwrap();
    // The first owner's renewal is refused: fenced.
    assert!(ledger.heartbeat(&first, Duration::from_hours(1)).await.is_err());
    let attempt = ledger.start_attempt(&second).await.unwrap();
    let report = Report { outcome: Outcome::Unknown, error: Some("timed out".into()), evidence: Evidence::default() };
    ledger.record_result(&second, attempt, &report).await.unwrap();
    let unknown = ledger.store().find(second.key()).await.unwrap().unwrap();
    let found = LookupReport {
        verdict: LookupVerdict::Found,
        records: 1,
        destination_id: Some("R-1".into()),
        evidence: Evidence::default(),
        detail: None,
    };
    let settled = ledger.settle_unknown(&unknown.key, unknown.revision, "w-new", ActorKind::Worker, &found).await;
    assert!(settled.unwrap().is_some());
    let after: Vec<u64> = ["claims_total", "lease_renewals_total", "fenced_writes_total", "settled_by_lookup_total"]
        .iter()
        .map(|name| counter(&format!("actionledger_{name}")))
        .collect();
    for ((name, grew), at_least) in ["claims", "renewals", "fenced", "settled"]
        .into_iter()
        .zip(after.iter().zip(&before).map(|(a, b)| a - b))
        .zip([2, 1, 1, 1])
    {
        assert!(grew >= at_least, "{name} grew by {grew}, not {at_least}");
    }
}

/// Each destination's queue latency in seconds, as the refresher reads it.
async fn waits<S: Store>(ledger: &actionledger::ledger::Ledger<S>) -> Vec<(Option<String>, i64)> {
    let mut waits: Vec<_> =
        ledger.queue_waits().await.unwrap().into_iter().map(|w| (w.destination, w.seconds)).collect();
    waits.sort();
    waits
}

/// The queues' latency counts only what a worker may claim, from when it became claimable: an
/// action waiting out a backoff waits for no worker until its backoff ends, nor does one that
/// follows an action not yet completed, until that action completes.
async fn the_queue_latency_counts_what_a_worker_may_claim_from_when_it_could<S: Store>(db: TestDb<S>) {
    use actionledger::store::ClaimScope;
    let ledger = &db.ledger;
    let clock = ledger.store().clock();
    let crm = ClaimScope { destinations: Some(vec!["crm".to_owned()]), include_unassigned: false, key: None };
    let in_a_while = |seconds: i64| seconds..seconds + 5;
    assert_eq!(waits(ledger).await, [], "an empty ledger has no queue");
    let erp = actionledger::domain::RawSubmission { destination: Some("erp".to_owned()), ..order("lat:erp", "{}") };
    let loose = actionledger::domain::RawSubmission { destination: None, ..order("lat:loose", "{}") };
    let next = actionledger::domain::RawSubmission { after: Some("lat:first".to_owned()), ..order("lat:next", "{}") };
    for submission in [erp, loose, order("lat:first", "{}"), next] {
        ledger.submit(&submission).await.unwrap();
    }
    clock.advance(Duration::from_mins(10));
    let first = waits(ledger).await;
    let destinations: Vec<Option<&str>> = first.iter().map(|(d, _)| d.as_deref()).collect();
    assert_eq!(destinations, [None, Some("crm"), Some("erp")], "{first:?}");
    assert!(first.iter().all(|(_, seconds)| in_a_while(600).contains(seconds)), "{first:?}");

    // lat:first waits out an hour's backoff, and lat:next follows it: crm has nothing claimable.
    let claim = ledger.claim_scoped("w-lat", Duration::from_mins(5), 1, &crm).await.unwrap().remove(0);
    assert_eq!(claim.key().as_str(), "lat:first");
    let attempt = ledger.start_attempt(&claim).await.unwrap();
    let retry = Report {
        outcome: Outcome::RetryLater { after: Duration::from_hours(1) },
        error: None,
        evidence: Evidence::default(),
    };
    ledger.record_result(&claim, attempt, &retry).await.unwrap();
    assert!(waits(ledger).await.iter().all(|(d, _)| d.as_deref() != Some("crm")), "{:?}", waits(ledger).await);

    // Two hours on, lat:first has been claimable for the hour since its backoff ended.
    clock.advance(Duration::from_hours(2));
    let backed_off = waits(ledger).await;
    assert!(
        backed_off.iter().any(|(d, s)| d.as_deref() == Some("crm") && in_a_while(3600).contains(s)),
        "{backed_off:?}"
    );
    assert!(
        backed_off.iter().any(|(d, s)| d.as_deref() == Some("erp") && in_a_while(7800).contains(s)),
        "{backed_off:?}"
    );

    // lat:first completes: lat:next, submitted over two hours ago, has been claimable only since.
    let claim = ledger.claim_scoped("w-lat", Duration::from_mins(5), 1, &crm).await.unwrap().remove(0);
    assert_eq!(claim.key().as_str(), "lat:first");
    let attempt = ledger.start_attempt(&claim).await.unwrap();
    let completed = Outcome::Completed { destination_id: "crm-lat".into() };
    ledger
        .record_result(&claim, attempt, &Report { outcome: completed, error: None, evidence: Evidence::default() })
        .await
        .unwrap();
    clock.advance(Duration::from_mins(1));
    let followed = waits(ledger).await;
    assert!(followed.iter().any(|(d, s)| d.as_deref() == Some("crm") && in_a_while(60).contains(s)), "{followed:?}");
}

/// The pool's figures, as each scrape reads them: a transaction held is a connection in use.
async fn the_pool_figures_show_a_connection_held<S: Store>(db: TestDb<S>) {
    let store = db.ledger.store();
    let before = store.connection_figures();
    assert!(before.max > 0 && before.idle <= before.open && before.open <= before.max, "{before:?}");
    let held = store.begin().await.unwrap();
    let holding = store.connection_figures();
    assert!(holding.open - holding.idle >= 1, "a transaction holds a connection: {holding:?}");
    drop(held);
    assert_eq!(holding.max, before.max);
}

conformance!(
    stats_json_reports_the_ledger,
    the_pool_figures_show_a_connection_held,
    the_ledger_counts_claims_renewals_fenced_writes_and_lookups,
    the_queue_latency_counts_what_a_worker_may_claim_from_when_it_could
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_log_line_carries_the_action_fields() {
    let db = support::sqlite().await;
    let crm = crm(FaultPlan::default()).await;
    db.ledger.submit(&order("obs:json:1", r#"{"n":1}"#)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("actionledger.toml"), crm.destination_config("crm")).unwrap();
    let output = command(dir.path(), &db.url)
        .args(["--log-format", "json", "worker", "--drain", "--worker-id", "obs-json"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(String::from_utf8_lossy(&output.stdout).contains("completed 1"), "the summary stays on standard output");
    let stderr = String::from_utf8(output.stderr).unwrap();
    let lines: Vec<Value> = stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not one JSON object ({e}): {line}")))
        .collect();
    let completed = lines
        .iter()
        .find(|line| line["outcome"] == "completed")
        .unwrap_or_else(|| panic!("no completion logged:\n{stderr}"));
    println!("a JSON log line: {}", serde_json::to_string(completed).unwrap());
    assert!(completed["timestamp"].as_str().is_some_and(|t| t.contains('T')), "{completed}");
    assert_eq!(completed["level"], "INFO");
    assert_eq!(completed["target"], "actionledger::worker");
    assert_eq!(completed["key"], "obs:json:1");
    assert_eq!(completed["worker"], "obs-json");
    assert_eq!(completed["ownership_version"], 1);
    assert_eq!(completed["destination"], "crm");
    assert!(lines.iter().any(|line| line["message"].as_str().is_some_and(|m| m.contains("performing actions"))));

    // A filter that cannot be read is refused, not taken as "log nothing".
    let refused = command(dir.path(), &db.url).env("RUST_LOG", "actionledger=loud").arg("stats").output().unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", String::from_utf8_lossy(&refused.stderr));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("RUST_LOG"));
}

/// A destination that answers every request with HTTP 500 and `body`.
async fn hostile_destination(body: &'static str) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                // Read the whole request (head and body) before answering.
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                loop {
                    let Ok(n) = stream.read(&mut buffer).await else { return };
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buffer[..n]);
                    let text = String::from_utf8_lossy(&request).to_lowercase();
                    if let Some(head_end) = text.find("\r\n\r\n") {
                        let length = text[..head_end]
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .map_or(0, |v| v.trim().parse::<usize>().unwrap());
                        if request.len() >= head_end + 4 + length {
                            break;
                        }
                    }
                }
                let answer = format!(
                    "HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\
                     connection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_error_body_reaches_the_log_escaped() {
    const HOSTILE: &str = "\u{1b}[2J\u{1b}]52;c;cm0gLXJmIH4=\u{7}failed \u{9b}31m";
    let addr = hostile_destination(HOSTILE).await;
    let block = format!(
        "[destinations.crm]\nbase_url = \"http://{addr}\"\nexternal_ref = \"{{{{key}}}}\"\ntimeout = \"5s\"\n\
         create = {{ url = \"{{{{base_url}}}}/tasks\", body = {{ external_ref = \"{{{{external_ref}}}}\" }} }}\n"
    );
    for format in ["text", "json"] {
        let db = support::sqlite().await;
        db.ledger.submit(&order("obs:hostile:1", r#"{"n":1}"#)).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("actionledger.toml"), &block).unwrap();
        let output = command(dir.path(), &db.url)
            .env("RUST_LOG", "trace")
            .args(["--log-format", format, "worker", "--drain"])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let logged = String::from_utf8_lossy(&output.stderr);
        assert!(logged.contains("x1b]52;c;cm0gLXJmIH4="), "{format}: the body was logged, escaped:\n{logged}");
        for (byte, name) in [(0x1b_u8, "ESC"), (0x07, "BEL")] {
            assert!(!output.stderr.contains(&byte), "{format}: an {name} byte reached the log:\n{logged}");
        }
        assert!(!logged.contains('\u{9b}'), "{format}: a C1 CSI reached the log");
    }
}

/// Every alert rule group the README and the guides give (a YAML block with `alert:`) passes
/// `promtool check rules`, and names only metrics the binary serves.
#[test]
fn the_alert_rules_the_docs_give_pass_promtool() {
    use actionledger::domain::State;
    use actionledger::metrics;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    // A series in every family the refresher sets, as a worker's first refresh leaves them.
    let states = State::ALL.into_iter().map(|state| (state, 0)).collect();
    let ages = [State::Pending, State::Unknown, State::Held, State::Conflict].map(|state| (state, None)).to_vec();
    let refreshed = metrics::LedgerGauges { actions: states, stale_claims: 0, oldest_age_seconds: ages, read_at_ms: 0 };
    metrics::set_ledger_gauges(&refreshed);
    metrics::set_queue_waits(&[("rules-test".to_owned(), 0)]);
    metrics::set_ready(true);
    let served = metrics::encode_text();
    let mut groups = 0;
    for document in ["README.md", "docs/operators.md"] {
        let text = std::fs::read_to_string(root.join(document)).unwrap();
        let blocks = text.split("```yaml\n").skip(1).filter_map(|rest| rest.split_once("```").map(|(block, _)| block));
        for block in blocks.filter(|block| block.contains("alert:")) {
            groups += 1;
            for word in block.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if word.starts_with("actionledger_") {
                    assert!(
                        served.contains(&format!("# TYPE {word} ")),
                        "{document} alerts on {word}, which is not served"
                    );
                }
            }
            let dir = tempfile::tempdir().unwrap();
            let rules = dir.path().join("rules.yml");
            std::fs::write(&rules, block).unwrap();
            let Some(output) = support::promtool::check(&["rules", rules.to_str().unwrap()], "") else { return };
            let said =
                format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
            assert!(output.status.success() && said.contains("SUCCESS"), "{document}: promtool check rules: {said}");
        }
    }
    assert!(groups > 0, "no alert rules found in the docs");
}
