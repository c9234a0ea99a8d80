//! A claim that starts its attempt in the same commit (docs/RULES.md, rule 5): only where the
//! action's destination protects against a repeat whatever was sent (a lookup, or an idempotency
//! key before any window runs), so that "claimed but not sent" and "maybe sent" are recovered the
//! same way. Each test counts rows, and the crash tests count records in the simulated CRM, on
//! SQLite and PostgreSQL.

use crate::support::crm::{Kind, crm_for};
use crate::support::{TestDb, order};
use actionledger::config::Config;
use actionledger::destination::{Destination, Destinations};
use actionledger::domain::{
    ActionKey, ActionRecord, AttemptOutcome, Capabilities, DestinationCatalog, Event, Evidence, RawSubmission, State,
};
use actionledger::ledger::{Claim, Ledger, Outcome, Recovery, Report};
use actionledger::store::Store;
use actionledger::worker::{self, WorkerOptions};
use std::collections::{BTreeMap, HashMap};
use std::os::unix::process::ExitStatusExt as _;
use std::process::{Command, Stdio};
use std::time::Duration;

conformance!(
    a_claim_starts_its_attempt_exactly_where_the_destination_protects_against_a_repeat,
    a_started_attempt_given_back_unsent_ends_as_not_sent_and_spends_no_budget,
    the_idempotency_window_counts_from_the_claim,
    a_takeover_after_a_crash_between_claim_and_send_follows_the_destination,
    a_worker_killed_between_claim_and_send_leaves_one_record_on_each_path,
    a_claim_of_more_than_one_command_holds_claims_audits_and_starts_each_action_once,
);

const LEASE: Duration = Duration::from_secs(30);

fn key(text: &str) -> ActionKey {
    ActionKey::parse(text).unwrap()
}

fn raw(key: &str, destination: Option<&str>) -> RawSubmission {
    RawSubmission {
        key: Some(key.to_owned()),
        payload: b"{}".to_vec(),
        destination: destination.map(str::to_owned),
        ..Default::default()
    }
}

fn report(outcome: Outcome) -> Report {
    Report { outcome, error: None, evidence: Evidence::default() }
}

/// A destination for each kind of declaration: an idempotency key kept an hour (`keyed`), or a
/// minute (`keyed-short`), a lookup (`looked`), nothing (`bare`); no default destination.
fn catalog() -> DestinationCatalog {
    let keyed =
        |retention| Capabilities { idempotency_retention: Some(retention), lookup: false, ..Default::default() };
    DestinationCatalog::new(
        BTreeMap::from([
            ("keyed".to_owned(), keyed(Duration::from_hours(1))),
            ("keyed-short".to_owned(), keyed(Duration::from_mins(1))),
            ("looked".to_owned(), Capabilities { idempotency_retention: None, lookup: true, ..Default::default() }),
            ("bare".to_owned(), Capabilities::default()),
        ]),
        None,
    )
}

fn declared<S: Store>(db: &TestDb<S>) -> Ledger<S> {
    db.ledger.clone().with_destinations(catalog())
}

/// The claims of `claims` by key.
fn by_key(claims: Vec<Claim>) -> HashMap<String, Claim> {
    claims.into_iter().map(|c| (c.key().to_string(), c)).collect()
}

async fn find<S: Store>(db: &TestDb<S>, k: &str) -> ActionRecord {
    db.ledger.store().find(&key(k)).await.unwrap().unwrap()
}

async fn a_claim_starts_its_attempt_exactly_where_the_destination_protects_against_a_repeat<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    // Two actions sent once before (a window runs), claimed, started and retried without a catalogue.
    for (k, d) in [("cs:keyed-again", "keyed"), ("cs:looked-again", "looked")] {
        l.submit(&raw(k, Some(d))).await.unwrap();
    }
    let earlier = l.claim("earlier", LEASE, 2).await.unwrap();
    assert!(earlier.iter().all(|c| c.started.is_none()), "a ledger without a catalogue starts nothing at a claim");
    for claim in &earlier {
        let attempt = l.start_attempt(claim).await.unwrap();
        l.record_result(claim, attempt, &report(Outcome::RetryLater { after: Duration::ZERO })).await.unwrap();
    }
    for (k, d) in
        [("cs:keyed", Some("keyed")), ("cs:looked", Some("looked")), ("cs:bare", Some("bare")), ("cs:none", None)]
    {
        l.submit(&raw(k, d)).await.unwrap();
    }
    let keys = ["cs:keyed-again", "cs:looked-again", "cs:keyed", "cs:looked", "cs:bare", "cs:none"];
    let mut before = HashMap::new();
    for k in keys {
        before.insert(k, find(&db, k).await);
    }
    let attempts_before: HashMap<&str, usize> = {
        let mut counts = HashMap::new();
        for k in keys {
            counts.insert(k, l.store().attempts(&key(k)).await.unwrap().len());
        }
        counts
    };

    // Protected and unprotected actions claimed together, in one claim.
    let ledger = declared(&db);
    let claims = by_key(ledger.claim("w1", LEASE, 10).await.unwrap());
    assert_eq!(claims.len(), keys.len());
    let expected = [
        ("cs:keyed-again", false),
        ("cs:looked-again", true),
        ("cs:keyed", true),
        ("cs:looked", true),
        ("cs:bare", false),
        ("cs:none", false),
    ];
    for (k, starts) in expected {
        assert_eq!(claims[k].started.is_some(), starts, "{k}");
        assert_eq!(
            ledger.destinations().claim_may_start(&before[k]),
            starts,
            "{k}: the store applies the domain's rule"
        );
        claimed_as_a_claim_and_a_start_would_leave_it(&db, k, &claims[k], &before[k]).await;
    }

    // Starting them all: the claims that started theirs answer it, and write nothing.
    let list: Vec<Claim> = keys.iter().map(|k| claims[*k].clone()).collect();
    let started = ledger.start_attempts(&list).await.unwrap();
    for (claim, start) in list.iter().zip(&started) {
        let k = claim.key().to_string();
        let start = start.as_ref().unwrap();
        if let Some(at_claim) = claim.started {
            assert_eq!(*start, at_claim, "{k}");
        }
        let rows = l.store().attempts(claim.key()).await.unwrap().len();
        assert_eq!(rows, attempts_before[k.as_str()] + 1, "{k}: one attempt for this claim, not two");
        assert_eq!(find(&db, &k).await.attempts, before[k.as_str()].attempts + 1, "{k}: counted once");
    }
    assert_eq!(ledger.start_attempt(&claims["cs:looked"]).await.unwrap(), claims["cs:looked"].started.unwrap());
    // And recorded as any other attempt.
    let results: Vec<_> = list
        .iter()
        .zip(started)
        .map(|(c, s)| (c.clone(), s.unwrap(), report(Outcome::Completed { destination_id: format!("D-{}", c.key()) })))
        .collect();
    ledger.record_results(&results).await.unwrap();
    for k in keys {
        assert_eq!(find(&db, k).await.state, State::Completed, "{k}");
        let attempts = l.store().attempts(&key(k)).await.unwrap();
        assert_eq!(attempts.last().unwrap().outcome, Some(AttemptOutcome::Succeeded), "{k}");
    }
}

/// A claim larger than SQLite sends as one command (400 claims) goes through a transaction of
/// separate statements there, and through one statement on PostgreSQL: either way each action is
/// claimed once, with its audit entry, and its attempt started once where its destination allows.
async fn a_claim_of_more_than_one_command_holds_claims_audits_and_starts_each_action_once<S: Store>(db: TestDb<S>) {
    const ACTIONS: usize = 450;
    let ledger = declared(&db);
    let page: Vec<RawSubmission> =
        (0..ACTIONS).map(|n| raw(&format!("big:{n}"), Some(if n % 2 == 0 { "looked" } else { "bare" }))).collect();
    assert!(ledger.submit_many(&page).await.unwrap().iter().all(Result::is_ok));
    let claims = by_key(ledger.claim("big-worker", LEASE, 1000).await.unwrap());
    assert_eq!(claims.len(), ACTIONS, "every pending action claimed, each once");
    assert!(ledger.claim("other", LEASE, 1000).await.unwrap().is_empty(), "nothing left to claim");
    for n in 0..ACTIONS {
        let k = format!("big:{n}");
        let action = find(&db, &k).await;
        assert_eq!((action.state, action.claimed_by.as_deref()), (State::InProgress, Some("big-worker")), "{k}");
        let claimed = ledger.store().audit_trail(&key(&k)).await.unwrap();
        assert_eq!(claimed.iter().filter(|e| e.event == Event::Claimed).count(), 1, "{k}: one audit entry");
        let starts = n % 2 == 0;
        assert_eq!(claims[&k].started.is_some(), starts, "{k}");
        let attempts = ledger.store().attempts(&key(&k)).await.unwrap().len();
        assert_eq!((attempts, action.attempts), if starts { (1, 1) } else { (0, 0) }, "{k}");
    }
}

/// What a claim left of action `k` (read as `was` before it): the claim as every caller knows it,
/// and, where it started the attempt, what a claim and a start would have written.
async fn claimed_as_a_claim_and_a_start_would_leave_it<S: Store>(
    db: &TestDb<S>,
    k: &str,
    claim: &Claim,
    was: &ActionRecord,
) {
    let l = &db.ledger;
    // The claim as every caller knows it: the action before its attempt started.
    assert_eq!(claim.action.attempts, was.attempts, "{k}");
    assert_eq!(claim.action.attempts_in_round, was.attempts_in_round, "{k}");
    assert_eq!(claim.action.first_sent_at, was.first_sent_at, "{k}");
    assert_eq!(claim.action.window_started_at, was.window_started_at, "{k}");
    let now = find(db, k).await;
    let at = claim.action.updated_at;
    let attempts = l.store().attempts(&key(k)).await.unwrap();
    let under_claim: Vec<_> = attempts.iter().filter(|a| a.ownership_version == claim.ownership_version()).collect();
    if let Some(started) = claim.started {
        // What a claim and a start would have written, at the claim's time.
        assert_eq!(now.attempts, was.attempts + 1, "{k}");
        assert_eq!(now.attempts_in_round, was.attempts_in_round + 1, "{k}");
        assert_eq!(now.first_sent_at, was.first_sent_at.or(Some(at)), "{k}");
        assert_eq!(now.window_started_at, was.window_started_at.or(Some(at)), "{k}");
        assert_eq!(under_claim.len(), 1, "{k}: one attempt under the claim");
        let attempt = under_claim[0];
        assert_eq!((attempt.id, attempt.number), (started.id, started.number), "{k}");
        assert_eq!(attempt.number, now.attempts, "{k}: numbered by the count");
        assert_eq!(attempt.worker, "w1");
        assert_eq!(attempt.started_at, at, "{k}: started at the claim's time");
        assert_eq!(attempt.idempotency_key.as_deref(), Some(k), "{k}: the sending key");
        assert_eq!((attempt.ended_at, attempt.outcome), (None, None), "{k}: not ended");
    } else {
        assert_eq!(now.attempts, was.attempts, "{k}");
        assert_eq!(now.first_sent_at, was.first_sent_at, "{k}");
        assert!(under_claim.is_empty(), "{k}: nothing started");
    }
    assert_eq!((now.state, now.ownership_version), (State::InProgress, was.ownership_version + 1), "{k}");
    // The claim's entry only: starting writes none.
    let trail = l.store().audit_trail(&key(k)).await.unwrap();
    let last = trail.last().unwrap();
    assert_eq!((last.event, last.ownership_version), (Event::Claimed, claim.ownership_version()), "{k}");
    assert_eq!(last.at, at, "{k}");
}

async fn a_started_attempt_given_back_unsent_ends_as_not_sent_and_spends_no_budget<S: Store>(db: TestDb<S>) {
    let ledger = declared(&db);
    ledger.submit(&raw("give:looked", Some("looked"))).await.unwrap();
    // More releases than any attempt budget: each claim starts an attempt (a lookup protects
    // whenever asked), and each release ends it as not sent.
    for round in 1..=6 {
        let claim = ledger.claim("w1", LEASE, 1).await.unwrap().pop().unwrap();
        let started = claim.started.expect("started at the claim");
        let released = ledger.release(&claim, "worker shutting down before sending").await.unwrap();
        assert_eq!(released.state, State::Pending, "round {round}");
        assert_eq!(released.attempts, round, "round {round}: each attempt numbered");
        assert_eq!(released.attempts_in_round, 0, "round {round}: a release spends none of the budget");
        assert!(!released.may_have_written, "round {round}: nothing may have been written");
        assert_eq!(find(&db, "give:looked").await, released, "round {round}: as written");
        let attempt = ledger.store().attempts(claim.key()).await.unwrap().pop().unwrap();
        assert_eq!(attempt.id, started.id);
        assert_eq!(attempt.ownership_version, claim.ownership_version(), "under the claim that gave it back");
        assert_eq!(attempt.outcome, Some(AttemptOutcome::FailedBeforeWrite), "round {round}");
        assert_eq!(attempt.error.as_deref(), Some("not sent: worker shutting down before sending"));
        assert!(attempt.ended_at.is_some() && !attempt.stale, "round {round}");
        let trail = ledger.store().audit_trail(claim.key()).await.unwrap();
        assert_eq!(trail.last().unwrap().event, Event::Released, "round {round}");
    }
    // A hold ends it as held, not sent.
    let claim = ledger.claim("w1", LEASE, 1).await.unwrap().pop().unwrap();
    assert!(claim.started.is_some());
    let held = ledger.hold(&claim, "the destination declares no update request").await.unwrap();
    assert_eq!((held.state, held.attempts_in_round, held.may_have_written), (State::Held, 0, false));
    let attempt = ledger.store().attempts(claim.key()).await.unwrap().pop().unwrap();
    assert_eq!(attempt.outcome, Some(AttemptOutcome::Held));
    assert!(!attempt.outcome.unwrap().may_have_written());
    // Every attempt ended: none is left for a takeover to read as a request that may have gone out.
    let detail = ledger.detail(claim.key()).await.unwrap();
    assert_eq!(detail.attempts.len(), 7);
    assert!(detail.attempts.iter().all(|a| a.ended_at.is_some() && !a.outcome.unwrap().may_have_written()));

    // An unprotected claim gives back nothing it did not start.
    ledger.submit(&raw("give:bare", Some("bare"))).await.unwrap();
    let claim = ledger.claim("w1", LEASE, 1).await.unwrap().pop().unwrap();
    assert!(claim.started.is_none());
    let released = ledger.release(&claim, "worker shutting down before sending").await.unwrap();
    assert_eq!((released.attempts, released.attempts_in_round), (0, 0));
    assert!(ledger.store().attempts(claim.key()).await.unwrap().is_empty());
}

async fn the_idempotency_window_counts_from_the_claim<S: Store>(db: TestDb<S>) {
    let ledger = declared(&db);
    ledger.submit(&raw("window:keyed", Some("keyed"))).await.unwrap();
    let claim = ledger.claim("w1", LEASE, 1).await.unwrap().pop().unwrap();
    assert!(claim.started.is_some(), "no window runs yet: the claim starts the attempt");
    let at = claim.action.updated_at;
    let action = find(&db, "window:keyed").await;
    assert_eq!(
        (action.first_sent_at, action.window_started_at),
        (Some(at), Some(at)),
        "the window starts at the claim"
    );
    // Given back unsent, the window keeps running from the claim: the next claim leaves the start
    // to the worker, after rule 4's check.
    let released = ledger.release(&claim, "worker shutting down before sending").await.unwrap();
    assert_eq!(released.window_started_at, Some(at));
    let again = ledger.claim("w2", LEASE, 1).await.unwrap().pop().unwrap();
    assert!(again.started.is_none(), "a running window: no start at the claim");
    assert_eq!(again.action.window_started_at, Some(at));
    let capabilities = catalog().of(&again.action).copied().unwrap();
    assert!(!capabilities.window_passed(again.action.window_started_at, at + chrono::Duration::minutes(59)));
    assert!(capabilities.window_passed(again.action.window_started_at, at + chrono::Duration::minutes(60)));
    let attempt = ledger.start_attempt(&again).await.unwrap();
    assert_eq!(attempt.number, 2);
    assert_eq!(find(&db, "window:keyed").await.window_started_at, Some(at), "a running window is not restarted");
}

async fn a_takeover_after_a_crash_between_claim_and_send_follows_the_destination<S: Store>(db: TestDb<S>) {
    let ledger = declared(&db);
    for (k, d) in [
        ("crashed:looked", "looked"),
        ("crashed:keyed", "keyed"),
        ("crashed:short", "keyed-short"),
        ("crashed:bare", "bare"),
    ] {
        ledger.submit(&raw(k, Some(d))).await.unwrap();
    }
    let claims = by_key(ledger.claim("doomed", LEASE, 10).await.unwrap());
    assert_eq!(claims.len(), 4);
    // The worker dies before sending anything; two minutes pass (the short key's window with them).
    ledger.store().clock().advance(Duration::from_mins(2));
    let recover = |k: &str| {
        let (ledger, claim) = (ledger.clone(), claims[k].clone());
        async move { ledger.recover_expired(claim.key(), claim.ownership_version(), "rescuer", LEASE).await.unwrap() }
    };
    for k in ["crashed:looked", "crashed:keyed"] {
        let Recovery::Claimed(taken) = recover(k).await else { panic!("{k}: protected, taken over") };
        assert!(taken.started.is_none(), "{k}: a takeover starts nothing itself");
        let action = find(&db, k).await;
        assert!(action.may_have_written, "{k}: recovered as a request that may have gone out");
        let trail = ledger.store().audit_trail(taken.key()).await.unwrap();
        let reason = trail.last().unwrap().reason.clone().unwrap();
        assert!(reason.contains("protects against a second effect"), "{k}: {reason}");
        let attempts = ledger.store().attempts(taken.key()).await.unwrap();
        assert_eq!(attempts.len(), 1);
        assert_eq!(attempts[0].outcome, Some(AttemptOutcome::CutOff), "{k}");
    }
    // The short key's window ran from the claim and has closed: a takeover is not safe.
    let Recovery::Held(held) = recover("crashed:short").await else { panic!("window closed: held") };
    assert!(held.old_worker_may_act);
    // Nothing was started for the unprotected one: taken over as before, nothing cut off.
    let Recovery::Claimed(taken) = recover("crashed:bare").await else { panic!("nothing sent: taken over") };
    let trail = ledger.store().audit_trail(taken.key()).await.unwrap();
    assert!(trail.last().unwrap().reason.as_deref().unwrap().contains("nothing was sent under it"));
    assert!(ledger.store().attempts(taken.key()).await.unwrap().is_empty());
    assert!(!find(&db, "crashed:bare").await.may_have_written);
}

async fn a_worker_killed_between_claim_and_send_leaves_one_record_on_each_path<S: Store>(db: TestDb<S>) {
    for point in ["after_claim", "before_send"] {
        for kind in [Kind::Looked, Kind::Keyed, Kind::Bare] {
            let name = format!("{kind:?}{}", point.len()).to_lowercase();
            let (crm, config_text) = crm_for(kind, &name).await;
            let k = format!("killed:{point}:{name}");
            let mut submission = order(&k, r#"{"n":1}"#);
            submission.destination = Some(name.clone());
            db.ledger.submit(&submission).await.unwrap();
            let dir = tempfile::tempdir().unwrap();
            let config = dir.path().join("actionledger.toml");
            std::fs::write(&config, &config_text).unwrap();
            let status = Command::new(env!("CARGO_BIN_EXE_actionledger"))
                .env(actionledger::store::Clock::SHIFT_VARIABLE, db.ledger.store().clock().moved_on_ms())
                .args(["--db", &db.url, "worker", "--drain", "--lease", "1s", "--worker-id", "doomed", "--config"])
                .arg(&config)
                .env(actionledger::testkit::faults::VARIABLE, point)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .unwrap();
            assert_eq!(status.signal(), Some(9), "{point} {kind:?}: killed");
            assert_eq!(crm.stats().requests, 0, "{point} {kind:?}: nothing reached the CRM");
            // The merged claim-and-start for a protected destination, not for an unprotected one.
            let crashed = find(&db, &k).await;
            let started = db.ledger.store().attempts(&key(&k)).await.unwrap();
            let protected = kind != Kind::Bare;
            if protected || point == "before_send" {
                assert_eq!(started.len(), 1, "{point} {kind:?}: one attempt started");
                assert_eq!(started[0].ownership_version, crashed.ownership_version);
            } else {
                assert!(started.is_empty(), "{point} {kind:?}: nothing started before the send");
            }

            // Recovery: the lease runs out, and a new worker drains.
            db.ledger.store().clock().advance(Duration::from_mins(10));
            let parsed = Config::parse(&config_text).unwrap();
            let mut settings = parsed.destinations[&name].clone();
            if let Some(lookup) = settings.lookup.as_mut() {
                lookup.settle = Duration::from_millis(10);
            }
            let options = WorkerOptions {
                id: "rescuer".into(),
                concurrency: 1,
                batch: 100,
                lease: LEASE,
                poll_interval: Duration::from_millis(10),
                drain: true,
                destinations: Destinations::new(
                    BTreeMap::from([(name.clone(), Destination::new(&name, settings).unwrap())]),
                    None,
                ),
                progress: false,
            };
            tokio::time::timeout(
                Duration::from_mins(1),
                worker::run(db.ledger.clone(), options, std::future::pending()),
            )
            .await
            .expect("recovery finished")
            .unwrap();
            let action = find(&db, &k).await;
            // An unprotected destination after a start before the send: a person decides.
            if !protected && point == "before_send" {
                assert_eq!(action.state, State::Held, "{point} {kind:?}");
                assert!(crm.records_for(&k).is_empty(), "{point} {kind:?}: nothing sent");
                continue;
            }
            assert_eq!(action.state, State::Completed, "{point} {kind:?}");
            let records = crm.records_for(&k);
            assert_eq!(records.len(), 1, "{point} {kind:?}: exactly one record");
            assert_eq!(records[0]["id"].as_str(), action.destination_id.as_deref());
        }
    }
}

/// PostgreSQL's guards let a worker's login make the claim that starts its attempt (one step of
/// revision and of the attempt count, a window started where none ran) and end it unsent.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_role_claims_and_starts_in_one_statement_and_gives_back_unsent() {
    let Some(url) = crate::support::pg::fresh_database().await else { return };
    let admin = actionledger::store::PostgresStore::open(&url).await.unwrap();
    let database = url.split('?').next().unwrap().rsplit('/').next().unwrap().to_owned();
    let login = format!("{database}_claimstart");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE ROLE {login} LOGIN PASSWORD 'secret-{login}' IN ROLE actionledger_worker"
    )))
    .execute(admin.pool())
    .await
    .unwrap();
    let scheme_end = url.find("://").unwrap() + 3;
    let rest = &url[scheme_end..];
    let host_start = rest.find('/').map_or(rest.len(), |slash| rest[..slash].rfind('@').map_or(0, |at| at + 1));
    let login_url = format!("{}{login}:secret-{login}@{}", &url[..scheme_end], &rest[host_start..]);
    let store = actionledger::store::PostgresStore::open_with(&login_url, 2).await.unwrap();
    let worker = Ledger::new(store).with_destinations(catalog());

    for k in ["role:keyed", "role:looked"] {
        worker.submit(&raw(k, Some(k.trim_start_matches("role:")))).await.unwrap();
    }
    let claims = by_key(worker.claim("w1", LEASE, 2).await.expect("a worker claims and starts"));
    assert!(claims.values().all(|c| c.started.is_some()));
    worker.release(&claims["role:keyed"], "worker shutting down before sending").await.expect("a worker gives back");
    let claim = &claims["role:looked"];
    let attempt = worker.start_attempt(claim).await.unwrap();
    worker
        .record_result(claim, attempt, &report(Outcome::Completed { destination_id: "D-1".into() }))
        .await
        .expect("a worker records the result");
    let admin = Ledger::new(admin);
    let looked = admin.detail(&key("role:looked")).await.unwrap();
    assert_eq!((looked.action.state, looked.attempts.len()), (State::Completed, 1));
    let keyed = admin.detail(&key("role:keyed")).await.unwrap();
    assert_eq!((keyed.action.state, keyed.action.attempts_in_round), (State::Pending, 0));
    assert_eq!(keyed.attempts[0].outcome, Some(AttemptOutcome::FailedBeforeWrite));
}
