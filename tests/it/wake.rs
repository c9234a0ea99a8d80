//! Idle workers wake on new work: a worker that polls once an hour still performs an action
//! submitted while it waits, counted at the simulated CRM; on PostgreSQL also when the submission
//! comes from another process's connection, and after its listening connection was cut. The
//! database's channel is notified once per transaction that makes work claimable, never for a
//! claim or a result.

use crate::support::{self, TestDb, order};
use actionledger::Ledger;
use actionledger::config::Config;
use actionledger::destination::{Destination, Destinations};
use actionledger::domain::{ActionKey, Evidence, RawSubmission, State};
use actionledger::domain::{Capabilities, DestinationCatalog};
use actionledger::ledger::{Outcome, Report};
use actionledger::sim_crm::{Options, SimCrm};
use actionledger::store::{PostgresStore, Store, Wakeups};
use actionledger::worker::{self, Effect, NoOp, Stop, Summary, Work, WorkerOptions};
use sqlx::postgres::PgListener;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(30);
/// Long enough that a worker relying on its poll never gets there within a test.
const POLL_INTERVAL: Duration = Duration::from_hours(1);
/// How long a wake-up may take before the test calls it missing: generous, since what fails is a
/// worker that never wakes, not a slow one.
const PATIENCE: Duration = Duration::from_secs(30);
const CHANNEL: &str = "actionledger_runnable";

conformance!(
    an_idle_worker_waits_rather_than_claiming_over_and_over,
    an_idle_worker_performs_an_action_submitted_while_it_waits,
    a_claim_given_back_wakes_the_workers_and_claims_and_results_do_not,
);

async fn crm() -> SimCrm {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    SimCrm::start(listener, Options::default()).unwrap()
}

/// A worker for the CRM's `crm` destination that polls once an hour and runs until stopped.
fn idle_worker(crm: &SimCrm) -> WorkerOptions {
    let config = Config::parse(&crm.destination_config("crm")).unwrap();
    let destinations: BTreeMap<String, Destination> = config
        .destinations
        .iter()
        .map(|(name, c)| (name.clone(), Destination::new(name, c.clone()).unwrap()))
        .collect();
    WorkerOptions {
        id: "sleeper".to_owned(),
        concurrency: 2,
        batch: 1,
        lease: LEASE,
        poll_interval: POLL_INTERVAL,
        drain: false,
        destinations: Destinations::new(destinations, None),
        progress: false,
    }
}

/// A running worker and the switch that stops it.
struct Running {
    stop: tokio::sync::oneshot::Sender<()>,
    worker: tokio::task::JoinHandle<Result<Summary, actionledger::error::Error>>,
}

impl Running {
    fn start<S: Store>(ledger: &Ledger<S>, options: WorkerOptions) -> Self {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let worker = tokio::spawn(worker::run(ledger.clone(), options, async move {
            let _ = stopped.await;
        }));
        Self { stop, worker }
    }

    async fn stop(self) -> Summary {
        let _ = self.stop.send(());
        tokio::time::timeout(PATIENCE, self.worker).await.expect("the worker stopped").unwrap().unwrap()
    }
}

/// Waits until the CRM holds `records` records; fails after [`PATIENCE`].
async fn until_records(crm: &SimCrm, records: u64, what: &str) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while crm.stats().records < records {
        assert!(tokio::time::Instant::now() < deadline, "{what}: the CRM holds {} records", crm.stats().records);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Starts a worker and lets it perform a first action, so that it is running and then idle,
/// waiting out its hour-long poll, when the test goes on.
async fn idle_after_first_action<S: Store>(ledger: &Ledger<S>, crm: &SimCrm) -> Running {
    ledger.submit(&order("shop:order:1:create-task", "{}")).await.unwrap();
    let running = Running::start(ledger, idle_worker(crm));
    until_records(crm, 1, "the first action, claimed at the worker's start").await;
    let key = ActionKey::parse("shop:order:1:create-task").unwrap();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while ledger.store().find(&key).await.unwrap().unwrap().state != State::Completed {
        assert!(tokio::time::Instant::now() < deadline, "the first result was never recorded");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Its result recorded, the worker claims once more, finds nothing and waits: a moment for it
    // to get there, so that what follows is found by a wake-up, not by that claim.
    tokio::time::sleep(Duration::from_millis(300)).await;
    running
}

async fn an_idle_worker_performs_an_action_submitted_while_it_waits<S: Store>(db: TestDb<S>) {
    let crm = crm().await;
    let running = idle_after_first_action(&db.ledger, &crm).await;
    db.ledger.submit(&order("shop:order:2:create-task", "{}")).await.unwrap();
    until_records(&crm, 2, "the action submitted while the worker waited").await;
    let summary = running.stop().await;
    assert_eq!(summary.completed, 2, "{summary:?}");
    assert_eq!(crm.stats().requests, 2, "each action sent once");
}

/// A no-op effect that counts the worker's rounds: each round asks, for each destination,
/// whether it is paused, before it looks for expired claims and before it claims.
#[derive(Clone)]
struct CountingRounds {
    noop: NoOp,
    asked: Arc<AtomicUsize>,
}

impl Effect for CountingRounds {
    fn catalog(&self) -> DestinationCatalog {
        self.noop.catalog()
    }

    async fn perform(&self, work: &Work<'_>, stop: Stop) -> Report {
        self.noop.perform(work, stop).await
    }

    fn paused(&self, _destination: &str) -> bool {
        self.asked.fetch_add(1, Ordering::Relaxed);
        false
    }
}

/// A worker with nothing to do claims at its start and then waits for a wake-up or its poll; a
/// claim that finds nothing must not make it claim again at once (the slots it took and found
/// nothing for once did), which kept idle workers claiming back to back.
async fn an_idle_worker_waits_rather_than_claiming_over_and_over<S: Store>(db: TestDb<S>) {
    let asked = Arc::new(AtomicUsize::new(0));
    let effect = CountingRounds { noop: NoOp::new("crm", Capabilities::default()), asked: Arc::clone(&asked) };
    let options = WorkerOptions {
        id: "idle".to_owned(),
        concurrency: 16,
        batch: 100,
        lease: LEASE,
        poll_interval: POLL_INTERVAL,
        drain: false,
        destinations: effect,
        progress: false,
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let worker = tokio::spawn(worker::run(db.ledger.clone(), options, async move {
        let _ = stopped.await;
    }));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rounds = asked.load(Ordering::Relaxed);
    let _ = stop.send(());
    tokio::time::timeout(PATIENCE, worker).await.expect("the worker stopped").unwrap().unwrap();
    assert!(rounds >= 1, "the worker claimed at its start");
    assert!(rounds <= 8, "an idle worker asked {rounds} times in a second, polling once an hour");
}

fn completed() -> Report {
    Report {
        outcome: Outcome::Completed { destination_id: "R-1".to_owned() },
        error: None,
        evidence: Evidence::default(),
    }
}

/// Whether `wakeups` wakes within a short while: for checks that nothing woke it, after which
/// a wake-up that was coming would have come (each comes from a commit already made).
async fn wakes_soon(wakeups: &mut Wakeups) -> bool {
    tokio::time::timeout(Duration::from_millis(500), wakeups.next()).await.is_ok()
}

async fn a_claim_given_back_wakes_the_workers_and_claims_and_results_do_not<S: Store>(db: TestDb<S>) {
    let mut wakeups = db.ledger.store().listen_for_runnable().await;
    for n in 0..2 {
        db.ledger.submit(&order(&format!("shop:order:{n}:create-task"), "{}")).await.unwrap();
    }
    tokio::time::timeout(PATIENCE, wakeups.next()).await.expect("the submissions woke the worker");
    while wakes_soon(&mut wakeups).await {}

    let mut claims = db.ledger.claim("w", LEASE, 2).await.unwrap();
    assert_eq!(claims.len(), 2);
    let done = claims.pop().unwrap();
    let attempt = db.ledger.start_attempt(&done).await.unwrap();
    db.ledger.record_result(&done, attempt, &completed()).await.unwrap();
    assert!(!wakes_soon(&mut wakeups).await, "a claim, an attempt's start and a completion make nothing claimable");

    let retried = claims.pop().unwrap();
    let attempt = db.ledger.start_attempt(&retried).await.unwrap();
    let later = Report { outcome: Outcome::RetryLater { after: POLL_INTERVAL }, ..completed() };
    db.ledger.record_result(&retried, attempt, &later).await.unwrap();
    assert!(!wakes_soon(&mut wakeups).await, "a retry waiting out its backoff is not claimable yet");

    db.ledger.submit(&order("shop:order:9:create-task", "{}")).await.unwrap();
    tokio::time::timeout(PATIENCE, wakeups.next()).await.expect("woken by the submission");
    while wakes_soon(&mut wakeups).await {}
    let claim = db.ledger.claim("w", LEASE, 1).await.unwrap().pop().expect("the new action claimed");
    assert_eq!(claim.key().as_str(), "shop:order:9:create-task");
    assert!(!wakes_soon(&mut wakeups).await, "the claim woke nobody");
    db.ledger.release(&claim, "shutting down").await.unwrap();
    tokio::time::timeout(PATIENCE, wakeups.next()).await.expect("the claim given back woke the worker");
}

/// A second store on the same database, sharing nothing in this process with the first: only the
/// database's notification reaches the first store's worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_an_idle_worker_performs_an_action_submitted_by_another_process() {
    let Some(db) = support::postgres().await else { return };
    let crm = crm().await;
    let running = idle_after_first_action(&db.ledger, &crm).await;
    let elsewhere = Ledger::new(PostgresStore::open(&db.url).await.unwrap());
    elsewhere.submit(&order("shop:order:2:create-task", "{}")).await.unwrap();
    until_records(&crm, 2, "the action another process submitted while the worker waited").await;
    // And from the command line, another process indeed.
    let submitted = support::run_cli(
        &db.url,
        &["submit", "--key", "shop:order:3:create-task", "--destination", "crm", "--payload", "{}"],
    );
    assert!(submitted.status.success(), "{}", String::from_utf8_lossy(&submitted.stderr));
    until_records(&crm, 3, "the action the CLI submitted while the worker waited").await;
    let summary = running.stop().await;
    assert_eq!(summary.completed, 3, "{summary:?}");
    assert_eq!(crm.stats().requests, 3, "each action sent once");
}

/// Sends a mark on the channel and counts this ledger's notifications received before it:
/// notifications arrive in commit order, so the mark comes after any the commits before it sent.
async fn heard_before_mark(listener: &mut PgListener, db: &TestDb<PostgresStore>) -> usize {
    sqlx::query("SELECT pg_notify($1, 'mark')").bind(CHANNEL).execute(db.ledger.store().pool()).await.unwrap();
    let schema = db.ledger.store().schema();
    let mut heard = 0;
    loop {
        let notification =
            tokio::time::timeout(PATIENCE, listener.recv()).await.expect("the mark arrives").expect("a notification");
        match notification.payload() {
            "mark" => return heard,
            payload => {
                assert_eq!(payload, schema, "the payload names the ledger's schema");
                heard += 1;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_notifies_once_per_transaction_that_makes_work_claimable() {
    let Some(db) = support::postgres().await else { return };
    let mut listener = PgListener::connect(&db.url).await.unwrap();
    listener.listen(CHANNEL).await.unwrap();
    let ledger = &db.ledger;

    let page: Vec<RawSubmission> = (0..40).map(|n| order(&format!("shop:order:{n}:create-task"), "{}")).collect();
    ledger.submit_many(&page).await.unwrap();
    assert_eq!(heard_before_mark(&mut listener, &db).await, 1, "forty actions in one transaction: one notification");
    for n in 40..43 {
        ledger.submit(&order(&format!("shop:order:{n}:create-task"), "{}")).await.unwrap();
    }
    assert_eq!(heard_before_mark(&mut listener, &db).await, 3, "one per transaction");
    ledger.submit(&order("shop:order:0:create-task", "{}")).await.unwrap();
    assert_eq!(heard_before_mark(&mut listener, &db).await, 0, "a duplicate delivery adds no work");
    let waiting =
        RawSubmission { after: Some("shop:order:0:create-task".to_owned()), ..order("shop:order:0:email", "{}") };
    ledger.submit(&waiting).await.unwrap();
    assert_eq!(heard_before_mark(&mut listener, &db).await, 0, "an action waiting for a pending one is not claimable");

    let claims = ledger.claim("w", LEASE, 50).await.unwrap();
    assert_eq!(claims.len(), 43, "every action but the one waiting");
    assert_eq!(heard_before_mark(&mut listener, &db).await, 0, "claims notify nothing");
    let (retried, completing) = claims.split_at(1);
    let started = ledger.start_attempts(completing).await.unwrap();
    let results: Vec<_> = completing.iter().cloned().zip(started).map(|(c, a)| (c, a.unwrap(), completed())).collect();
    ledger.record_results(&results).await.unwrap();
    assert_eq!(heard_before_mark(&mut listener, &db).await, 0, "starts and completions notify nothing");

    let attempt = ledger.start_attempt(&retried[0]).await.unwrap();
    let later = Report { outcome: Outcome::RetryLater { after: POLL_INTERVAL }, ..completed() };
    ledger.record_result(&retried[0], attempt, &later).await.unwrap();
    assert_eq!(heard_before_mark(&mut listener, &db).await, 0, "a retry waiting out its backoff is not claimable yet");

    ledger.submit(&order("shop:order:50:create-task", "{}")).await.unwrap();
    let claim = ledger.claim("w", LEASE, 1).await.unwrap().pop().expect("the new action claimed");
    ledger.release(&claim, "shutting down").await.unwrap();
    assert_eq!(heard_before_mark(&mut listener, &db).await, 2, "the submission, then the claim given back");
}

/// The backend holding a store's LISTEN, found by what it last ran.
async fn listening_backends(db: &TestDb<PostgresStore>) -> Vec<i32> {
    sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %actionledger_runnable%'",
    )
    .fetch_all(db.ledger.store().pool())
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_wakeups_survive_a_terminated_listening_connection() {
    let Some(db) = support::postgres().await else { return };
    let mut wakeups = db.ledger.store().listen_for_runnable().await;
    let first = listening_backends(&db).await;
    assert_eq!(first.len(), 1, "one LISTEN: {first:?}");
    let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(first[0])
        .fetch_one(db.ledger.store().pool())
        .await
        .unwrap();
    assert!(terminated);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let now = listening_backends(&db).await;
        if now.len() == 1 && now != first {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "nobody listens again: {now:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Listening again, it wakes the worker once, for what it may have missed meanwhile.
    tokio::time::timeout(PATIENCE, wakeups.next()).await.expect("woken on listening again");
    while wakes_soon(&mut wakeups).await {}

    let elsewhere = Ledger::new(PostgresStore::open(&db.url).await.unwrap());
    elsewhere.submit(&order("shop:order:1:create-task", "{}")).await.unwrap();
    tokio::time::timeout(PATIENCE, wakeups.next()).await.expect("another process's submission woke the worker");
}
