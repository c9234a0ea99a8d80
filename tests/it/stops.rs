//! A worker process stopped under load, on both stores: SIGTERM while requests are in flight
//! (every result sent is committed before the exit, every claim not sent is given back), SIGTSTP
//! (it claims nothing more, and exits once every claim it held is performed and recorded), and
//! SIGKILL twice on the same backlog (recovery takes over what the destination protects and holds
//! the rest for a person). Each test serves a destination of every kind at once (a lookup, an
//! idempotency key, nothing), and counts records at the simulated CRM: no result lost, no second
//! effect.

use crate::support::crm::{Kind, crm_for, every_create_delayed};
use crate::support::process::{Exited, WorkerProcess, command};
use crate::support::{TestDb, order};
use actionledger::domain::{ActionRecord, AttemptOutcome, RawSubmission, State};
use actionledger::sim_crm::SimCrm;
use actionledger::store::{Clock, ListFilter, Store};
use std::os::unix::process::ExitStatusExt as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

conformance!(
    a_worker_stopped_by_sigterm_mid_drain_commits_every_result_sent_and_gives_back_the_rest,
    a_worker_quieted_by_sigtstp_claims_nothing_more_and_exits_once_what_it_held_is_recorded,
    a_worker_killed_twice_mid_drain_loses_no_result_and_makes_no_second_effect,
);

/// Actions per destination, submitted in turn so that requests of every kind are in flight
/// together.
const PER_DESTINATION: usize = 100;
/// How long the CRM takes over each create: long enough that a stop lands among requests in
/// flight even when sending it (a `kill` process) is slow on a loaded machine (150 ms was not, once,
/// in a full run), short enough that the backlog drains in seconds.
const CREATE_DELAY_MS: u64 = 400;
const CONCURRENCY: &str = "16";
/// The lease of the killed workers. The database clock is moved past it after each kill rather
/// than waited out: recovery happens at once, and a live worker's heartbeat held up on a busy
/// machine never costs it its own claims.
const LEASE: Duration = Duration::from_secs(10);
/// The longest any wait of these tests lasts: a worker that does not stop fails the test.
const BOUND: Duration = Duration::from_mins(1);

/// One destination of each kind, each at a simulated CRM of its own, and the backlog for them.
struct Backlog {
    destinations: Vec<(Kind, String, SimCrm)>,
    config: PathBuf,
    dir: tempfile::TempDir,
}

impl Backlog {
    async fn submit<S: Store>(db: &TestDb<S>, test: &str) -> Self {
        let mut destinations = Vec::new();
        let mut config = String::new();
        for kind in [Kind::Looked, Kind::Keyed, Kind::Bare] {
            let name = format!("{kind:?}").to_lowercase();
            let (crm, block) = crm_for(kind, &name).await;
            crm.set_faults(every_create_delayed(CREATE_DELAY_MS));
            config.push_str(&block);
            destinations.push((kind, name, crm));
        }
        // An idle worker looks again soon: the drain at the end waits out nothing for it.
        config.push_str("\n[worker]\npoll_interval = \"50ms\"\n");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("actionledger.toml");
        std::fs::write(&path, config).unwrap();
        // A page is recorded in the order of its keys, and claimed in the order recorded: the
        // number leads the key, so that the destinations take turns.
        let page: Vec<RawSubmission> = (0..PER_DESTINATION)
            .flat_map(|n| destinations.iter().map(move |(_, name, _)| (n, name)))
            .map(|(n, name)| RawSubmission {
                destination: Some(name.clone()),
                ..order(&format!("stops:{test}:{n:04}:{name}"), &format!(r#"{{"n":{n}}}"#))
            })
            .collect();
        let submitted = db.ledger.submit_many(&page).await.unwrap();
        assert!(submitted.iter().all(Result::is_ok), "the backlog is recorded");
        Self { destinations, config: path, dir }
    }

    fn total(&self) -> usize {
        self.destinations.len() * PER_DESTINATION
    }

    /// A worker on this backlog's destinations, at the database time the test moved to.
    fn worker<S: Store>(&self, db: &TestDb<S>, id: &str, extra: &[&str]) -> WorkerProcess {
        let mut worker = command(self.dir.path(), &db.url);
        worker
            .env(Clock::SHIFT_VARIABLE, db.ledger.store().clock().moved_on_ms())
            .args(["worker", "--worker-id", id, "--concurrency", CONCURRENCY, "--config"])
            .arg(&self.config)
            .args(extra);
        WorkerProcess::spawn(worker)
    }

    fn kind_and_crm(&self, action: &ActionRecord) -> (Kind, &SimCrm) {
        let (kind, _, crm) = self
            .destinations
            .iter()
            .find(|(_, name, _)| action.destination.as_deref() == Some(name.as_str()))
            .unwrap_or_else(|| panic!("{} is for none of the destinations", action.key));
        (*kind, crm)
    }

    /// Records created at all the CRMs.
    fn records(&self) -> usize {
        self.destinations.iter().map(|(_, _, crm)| usize::try_from(crm.stats().records).unwrap()).sum()
    }

    /// Creates the CRMs are handling. Only where every request is a create that writes a record:
    /// no lookup, no repeat.
    fn creates_in_flight(&self) -> u64 {
        self.destinations
            .iter()
            .map(|(_, _, crm)| {
                let stats = crm.stats();
                stats.requests - stats.records
            })
            .sum()
    }

    /// Waits until no connection is open at any CRM: a killed worker's requests have all been
    /// handled, as they would be long before its lease ran out.
    async fn until_every_request_landed(&self) {
        wait_until("the killed worker's requests to land", None, async || {
            self.destinations.iter().all(|(_, _, crm)| crm.stats().open_connections == 0)
        })
        .await;
    }
}

/// Waits, for at most [`BOUND`], until `ready` says so, while `worker` (if any) keeps running.
async fn wait_until(what: &str, mut worker: Option<&mut WorkerProcess>, mut ready: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + BOUND;
    while !ready().await {
        if let Some(worker) = worker.as_deref_mut() {
            assert!(worker.is_running(), "the worker exited before {what}:\n{}", worker.stderr());
        }
        if Instant::now() >= deadline {
            let log = worker.as_deref().map(WorkerProcess::stderr).unwrap_or_default();
            panic!("waited {BOUND:?} for {what}:\n{log}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn all_actions<S: Store>(db: &TestDb<S>) -> Vec<ActionRecord> {
    db.ledger.list(&ListFilter { limit: 10_000, ..ListFilter::default() }).await.unwrap()
}

fn record_id(record: &serde_json::Value) -> Option<&str> {
    record["id"].as_str()
}

/// A drain to the end: exits 0 within the bound.
async fn drain_to_the_end(mut worker: WorkerProcess) -> Exited {
    let exited = worker.exit_within(BOUND).await;
    assert!(exited.status.success(), "the drain failed ({}):\n{}", exited.status, exited.stderr);
    exited
}

/// SIGTERM lands with requests in flight. A clean stop must leave the ledger as if the worker
/// had stopped between actions: each action either completed with the one record its request
/// created, or pending with nothing sent and nothing in doubt, so that the next worker sends it
/// once, without a lookup or a person. Anything else (a result in flight lost, a claim left
/// behind, an outcome left uncertain) is what a stop must not cost.
async fn a_worker_stopped_by_sigterm_mid_drain_commits_every_result_sent_and_gives_back_the_rest<S: Store>(
    db: TestDb<S>,
) {
    let backlog = Backlog::submit(&db, "term").await;
    let total = backlog.total();
    let mut worker = backlog.worker(&db, "stops-term", &[]);
    // Several creates in flight, so that some are still at the CRM once the signal is delivered.
    let mut in_flight = 0;
    wait_until("a fifth of the backlog at the CRMs, with creates in flight", Some(&mut worker), async || {
        in_flight = backlog.creates_in_flight();
        backlog.records() >= total / 5 && in_flight >= 4
    })
    .await;
    worker.send_sigterm();
    // Taken once the signal is delivered: a record created later answers a request in flight.
    let signalled_at_ms = chrono::Utc::now().timestamp_millis();
    let exited = worker.exit_within(BOUND).await;
    assert_eq!(exited.status.code(), Some(0), "a clean exit after SIGTERM:\n{}", exited.stderr);

    let actions = all_actions(&db).await;
    assert_eq!(actions.len(), total);
    let (mut completed, mut pending, mut landed_after_the_signal) = (0, 0, 0);
    for action in &actions {
        let key = action.key.as_str();
        let (_, crm) = backlog.kind_and_crm(action);
        let records = crm.records_for(key);
        match action.state {
            State::Completed => {
                completed += 1;
                assert_eq!(records.len(), 1, "{key} completed: one record at the CRM");
                assert_eq!(record_id(&records[0]), action.destination_id.as_deref(), "{key}: the record's id");
                if records[0]["created_at_ms"].as_i64().unwrap() >= signalled_at_ms {
                    landed_after_the_signal += 1;
                }
            }
            State::Pending => {
                pending += 1;
                assert!(records.is_empty(), "{key} has a record at the CRM but is pending: its result was lost");
                assert!(!action.may_have_written, "{key} given back as possibly written: {action:?}");
                for attempt in db.ledger.store().attempts(&action.key).await.unwrap() {
                    assert!(attempt.ended_at.is_some(), "{key}: attempt {} left open", attempt.number);
                    let outcome = attempt.outcome.unwrap();
                    assert!(
                        !outcome.may_have_written(),
                        "{key}: attempt {} ended {}",
                        attempt.number,
                        outcome.as_str()
                    );
                }
            }
            other => panic!("{key} is {other} after a clean stop (last error {:?})", action.last_error),
        }
    }
    assert!(landed_after_the_signal > 0, "no request was in flight when SIGTERM landed: nothing was tested");
    assert!(pending > 0, "SIGTERM landed after the backlog was done: nothing was tested");
    for (kind, name, crm) in &backlog.destinations {
        let stats = crm.stats();
        let completed_here = actions
            .iter()
            .filter(|a| a.state == State::Completed && a.destination.as_deref() == Some(name.as_str()))
            .count();
        assert_eq!(usize::try_from(stats.records).unwrap(), completed_here, "{kind:?}: a record per completed action");
        assert_eq!((stats.idempotent_replays, stats.duplicates_refused), (0, 0), "{kind:?}: nothing sent twice");
    }
    println!(
        "SIGTERM with {in_flight} creates in flight: {completed} completed ({landed_after_the_signal} of them landed \
         at the CRM after the signal), {pending} given back; {}",
        exited.stdout.trim()
    );

    let drained = drain_to_the_end(backlog.worker(&db, "stops-term-drain", &["--drain"])).await;
    for action in all_actions(&db).await {
        let key = action.key.as_str();
        let records = backlog.kind_and_crm(&action).1.records_for(key);
        assert_eq!(action.state, State::Completed, "{key} after the drain");
        assert_eq!(records.len(), 1, "{key}: exactly one record at the CRM");
        assert_eq!(record_id(&records[0]), action.destination_id.as_deref(), "{key}: the record's id");
    }
    for (kind, _, crm) in &backlog.destinations {
        let stats = crm.stats();
        assert_eq!(usize::try_from(stats.records).unwrap(), PER_DESTINATION, "{kind:?}: {stats:?}");
        assert_eq!(stats.max_records_per_external_ref, 1, "{kind:?}: {stats:?}");
        assert_eq!((stats.idempotent_replays, stats.duplicates_refused), (0, 0), "{kind:?}: nothing sent twice");
    }
    println!("SIGTERM, then drained: {}", drained.stdout.trim());
}

/// SIGTSTP lands with requests in flight and others waiting for their turn at a paced destination:
/// the worker goes quiet. Every action it held is performed and recorded (none given back, none
/// left in progress or sent back to pending with an attempt), it claims nothing after the signal
/// (so no more records land after it than it had slots), and it exits 0 on its own. The rest
/// waits, never touched, for the next worker.
async fn a_worker_quieted_by_sigtstp_claims_nothing_more_and_exits_once_what_it_held_is_recorded<S: Store>(
    db: TestDb<S>,
) {
    let backlog = Backlog::submit(&db, "quiet").await;
    // One destination paced below what the worker claims for it: some of its claims wait for their
    // turn when the signal lands. A stop would report those not sent; going quiet sends them.
    let config = std::fs::read_to_string(&backlog.config).unwrap();
    let paced =
        config.replace("[destinations.keyed]\n", "[destinations.keyed]\nrate_limit = { per_second = 10, burst = 1 }\n");
    assert_ne!(config, paced, "the keyed destination is in the configuration");
    std::fs::write(&backlog.config, paced).unwrap();
    let total = backlog.total();
    let mut worker = backlog.worker(&db, "stops-quiet", &["--json"]);
    let mut in_flight = 0;
    wait_until("a fifth of the backlog at the CRMs, with creates in flight", Some(&mut worker), async || {
        in_flight = backlog.creates_in_flight();
        backlog.records() >= total / 5 && in_flight >= 4
    })
    .await;
    worker.send_sigtstp();
    let signalled_at_ms = chrono::Utc::now().timestamp_millis();
    let exited = worker.exit_within(BOUND).await;
    assert_eq!(exited.status.code(), Some(0), "a clean exit after SIGTSTP:\n{}", exited.stderr);
    let summary: serde_json::Value = serde_json::from_str(&exited.stdout).expect("the summary as JSON");

    let (mut completed, mut pending, mut landed_after_the_signal) = (0, 0, 0);
    for action in all_actions(&db).await {
        let key = action.key.as_str();
        let records = backlog.kind_and_crm(&action).1.records_for(key);
        match action.state {
            State::Completed => {
                completed += 1;
                assert_eq!(records.len(), 1, "{key} completed: one record at the CRM");
                if records[0]["created_at_ms"].as_i64().unwrap() >= signalled_at_ms {
                    landed_after_the_signal += 1;
                }
            }
            State::Pending => {
                pending += 1;
                assert!(records.is_empty(), "{key} has a record at the CRM but is pending");
                let attempts = db.ledger.store().attempts(&action.key).await.unwrap();
                assert!(attempts.is_empty(), "{key}: claimed and given back by a quiet worker: {attempts:?}");
            }
            other => panic!("{key} is {other} after going quiet (last error {:?})", action.last_error),
        }
    }
    assert!(landed_after_the_signal > 0, "no request was in flight when SIGTSTP landed: nothing was tested");
    assert!(pending > 0, "SIGTSTP landed after the backlog was done: nothing was tested");
    let slots: usize = CONCURRENCY.parse().unwrap();
    assert!(
        landed_after_the_signal <= slots,
        "{landed_after_the_signal} records landed after SIGTSTP, more than the {slots} actions the worker can hold: it \
         claimed after going quiet"
    );
    assert_eq!(summary["released"], 0, "nothing held is given back: {summary}");
    assert_eq!(summary["claimed"], completed, "every action claimed was performed and recorded: {summary}");
    assert!(exited.stderr.contains("going quiet"), "the log says why it stops:\n{}", exited.stderr);
    println!(
        "SIGTSTP with {in_flight} creates in flight: {completed} completed ({landed_after_the_signal} of them landed at \
         the CRM after the signal), {pending} never claimed"
    );

    drain_to_the_end(backlog.worker(&db, "stops-quiet-drain", &["--drain"])).await;
    for (kind, _, crm) in &backlog.destinations {
        let stats = crm.stats();
        assert_eq!(usize::try_from(stats.records).unwrap(), PER_DESTINATION, "{kind:?}: {stats:?}");
        assert_eq!(stats.max_records_per_external_ref, 1, "{kind:?}: {stats:?}");
    }
}

/// SIGKILL lands with requests in flight, twice: the second time in the worker that recovered
/// the first one's claims. Where the destination protects against a repeat, recovery sends again
/// and every action completes with one record; where it does not, an action whose request may
/// have gone out is never sent again but held (or unknown) for a person, with the evidence.
async fn a_worker_killed_twice_mid_drain_loses_no_result_and_makes_no_second_effect<S: Store>(db: TestDb<S>) {
    let backlog = Backlog::submit(&db, "kill").await;
    let total = backlog.total();
    let lease = format!("{}s", LEASE.as_secs());
    let killed = |exited: &Exited, which: &str| {
        assert_eq!(exited.status.signal(), Some(9), "the {which} worker died by SIGKILL:\n{}", exited.stderr);
    };

    let mut first = backlog.worker(&db, "stops-kill-1", &["--lease", &lease]);
    wait_until("a fifth of the backlog at the CRMs", Some(&mut first), async || backlog.records() >= total / 5).await;
    first.send_sigkill();
    killed(&first.exit_within(BOUND).await, "first");
    let at_first_kill = backlog.records();
    backlog.until_every_request_landed().await;
    db.ledger.store().clock().advance(LEASE + Duration::from_secs(1));

    // Restarted at once: it recovers the first worker's claims (their leases have run out), then
    // is killed in turn once it has sent more of the backlog.
    let mut second = backlog.worker(&db, "stops-kill-2", &["--lease", &lease]);
    let left_by_the_first = ListFilter {
        state: Some(State::InProgress),
        owner: Some("stops-kill-1".to_owned()),
        limit: 1,
        ..ListFilter::default()
    };
    wait_until("the first worker's claims recovered and more of the backlog sent", Some(&mut second), async || {
        db.ledger.list(&left_by_the_first).await.unwrap().is_empty() && backlog.records() >= at_first_kill + total / 10
    })
    .await;
    second.send_sigkill();
    killed(&second.exit_within(BOUND).await, "second");
    backlog.until_every_request_landed().await;
    let pending = db.ledger.counts().await.unwrap().into_iter().find(|(s, _)| *s == State::Pending).unwrap().1;
    assert!(pending > 0, "the second kill landed after the backlog was sent: nothing left to drain");
    db.ledger.store().clock().advance(LEASE + Duration::from_secs(1));

    let drained = drain_to_the_end(backlog.worker(&db, "stops-kill-drain", &["--drain", "--lease", &lease])).await;

    let actions = all_actions(&db).await;
    assert_eq!(actions.len(), total);
    let mut cut_off = std::collections::BTreeMap::<String, usize>::new();
    let mut ended = std::collections::BTreeMap::<(String, &str), usize>::new();
    let mut held_with_a_record = 0;
    for action in &actions {
        let key = action.key.as_str();
        let (kind, crm) = backlog.kind_and_crm(action);
        let records = crm.records_for(key);
        let attempts = db.ledger.store().attempts(&action.key).await.unwrap();
        let was_cut_off = attempts.iter().any(|a| a.outcome == Some(AttemptOutcome::CutOff));
        *cut_off.entry(format!("{kind:?}")).or_default() += usize::from(was_cut_off);
        *ended.entry((format!("{kind:?}"), action.state.as_str())).or_default() += 1;
        assert!(records.len() <= 1, "{key} ({kind:?}) has {} records at the CRM: a second effect", records.len());
        match (kind, action.state) {
            (_, State::Completed) => {
                assert_eq!(records.len(), 1, "{key} ({kind:?}) completed: one record at the CRM");
                assert_eq!(record_id(&records[0]), action.destination_id.as_deref(), "{key}: the record's id");
                assert!(
                    kind != Kind::Bare || !was_cut_off,
                    "{key}: a request that may have gone out to a destination with no protection was sent again"
                );
            }
            (Kind::Bare, State::Held | State::Unknown) => {
                held_with_a_record += records.len();
                // The evidence a person resolves it by: an attempt that may have written.
                assert!(action.may_have_written, "{key} is {} without a possible write noted", action.state);
                assert!(
                    attempts.iter().any(|a| a.outcome.is_some_and(AttemptOutcome::may_have_written)),
                    "{key} is {} with no attempt that may have written: {attempts:?}",
                    action.state
                );
            }
            (kind, state) => {
                panic!("{key} ({kind:?}) ended {state} after recovery (last error {:?})", action.last_error)
            }
        }
    }
    for kind in ["Looked", "Keyed", "Bare"] {
        assert!(cut_off.get(kind).is_some_and(|n| *n > 0), "the kills cut off no {kind} attempt: {cut_off:?}");
    }
    for (kind, _, crm) in &backlog.destinations {
        let stats = crm.stats();
        assert!(stats.max_records_per_external_ref <= 1, "{kind:?}: {stats:?}");
        if *kind != Kind::Bare {
            assert_eq!(usize::try_from(stats.records).unwrap(), PER_DESTINATION, "{kind:?}: {stats:?}");
        }
    }
    let replays: Vec<(Kind, u64)> =
        backlog.destinations.iter().map(|(kind, _, crm)| (*kind, crm.stats().idempotent_replays)).collect();
    println!(
        "SIGKILL twice, then drained: attempts cut off {cut_off:?}; ended {ended:?}; {held_with_a_record} held with \
         a record at the CRM; repeats answered from the idempotency key {replays:?}; {}",
        drained.stdout.trim()
    );
}
