//! `reconcile` against the simulated CRM, on both stores: a completed action whose record is
//! missing at the destination, and one whose record there has another id, are each reported, and
//! nothing changes, with or without `--apply` (only `unknown` actions are settled). A person then
//! re-creates a missing one under a derived key, and a worker creates its record once more.

use crate::support::{self, TestDb, order, run_cli};
use actionledger::Ledger;
use actionledger::config::Config;
use actionledger::destination::{Destination, Destinations};
use actionledger::domain::{ActionKey, Event, Evidence, LookupVerdict, Person, PurgeRequest, Reason, Refusal, State};
use actionledger::ledger::{LedgerError, Outcome, Recorded, Report};
use actionledger::reconcile::{self, Apply, FindingKind};
use actionledger::sim_crm::{Options, SimCrm};
use actionledger::store::{ListFilter, Store};
use actionledger::worker::{self, WorkerOptions};
use std::collections::BTreeMap;
use std::time::Duration;

conformance!(
    missing_and_mismatched_records_are_reported_and_nothing_changes,
    a_record_changed_at_the_destination_is_reported_with_its_fields_as_the_lookup_judges_it,
    a_record_removed_at_the_destination_is_re_created_by_a_person_under_a_derived_key,
    a_lookup_of_a_purged_action_is_refused_and_keeps_nothing,
);

const LEASE: Duration = Duration::from_secs(30);

async fn crm() -> SimCrm {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    SimCrm::start(listener, Options::default()).unwrap()
}

fn destinations(crm: &SimCrm) -> BTreeMap<String, Destination> {
    let config = Config::parse(&crm.destination_config("crm")).unwrap();
    config.destinations.iter().map(|(name, c)| (name.clone(), Destination::new(name, c.clone()).unwrap())).collect()
}

/// Records `key` as completed under `destination_id` through a worker's result, without any
/// request reaching the CRM.
pub async fn completed_without_sending<S: Store>(ledger: &Ledger<S>, key: &str, destination_id: &str) {
    ledger.submit(&order(key, "{}")).await.unwrap();
    let claim = ledger.claim("w", LEASE, 1).await.unwrap().pop().expect("one claimable action");
    assert_eq!(claim.key().as_str(), key);
    let attempt = ledger.start_attempt(&claim).await.unwrap();
    let report = Report {
        outcome: Outcome::Completed { destination_id: destination_id.to_owned() },
        error: None,
        evidence: Evidence::default(),
    };
    assert!(matches!(ledger.record_result(&claim, attempt, &report).await.unwrap(), Recorded::Applied(_)));
}

/// Makes the CRM hold a record for `key` by running a worker of another ledger: this one never
/// learns the record's id.
pub async fn record_at_crm_from_elsewhere(crm: &SimCrm, key: &str) -> String {
    let other = support::sqlite().await;
    other.ledger.submit(&order(key, "{}")).await.unwrap();
    let options = WorkerOptions {
        id: "elsewhere".to_owned(),
        concurrency: 1,
        batch: 100,
        lease: LEASE,
        poll_interval: Duration::from_millis(10),
        drain: true,
        destinations: Destinations::new(destinations(crm), None),
        progress: false,
    };
    tokio::time::timeout(Duration::from_mins(1), worker::run(other.ledger.clone(), options, std::future::pending()))
        .await
        .expect("the worker drained in time")
        .expect("the worker ran");
    let records = crm.records_for(key);
    assert_eq!(records.len(), 1);
    records[0]["id"].as_str().unwrap().to_owned()
}

async fn missing_and_mismatched_records_are_reported_and_nothing_changes<S: Store>(db: TestDb<S>) {
    let crm = crm().await;
    let dests = destinations(&crm);
    let l = &db.ledger;
    let held_there = record_at_crm_from_elsewhere(&crm, "acme:rc:mismatch").await;
    completed_without_sending(l, "acme:rc:missing", "T-404").await;
    completed_without_sending(l, "acme:rc:mismatch", "T-999").await;
    let snapshot = async || {
        let actions = l.list(&ListFilter { limit: 10, ..Default::default() }).await.unwrap();
        let mut details = Vec::new();
        for key in ["acme:rc:missing", "acme:rc:mismatch"] {
            let d = l.detail(&ActionKey::parse(key).unwrap()).await.unwrap();
            details.push((d.attempts, d.lookups, d.audit));
        }
        (actions, details)
    };
    let before = snapshot().await;
    let records_before = crm.stats().records;

    let apply = Apply { person: "Ana Lima".into() };
    for apply in [None, Some(&apply)] {
        let report = reconcile::reconcile(l, &dests["crm"], false, None, apply).await.unwrap();
        assert_eq!((report.checked, report.lookup_errors), (2, 0));
        let mut findings: Vec<(String, FindingKind, String)> =
            report.findings.iter().map(|f| (f.key.clone(), f.kind, f.detail.clone())).collect();
        findings.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            findings,
            [
                (
                    "acme:rc:mismatch".to_owned(),
                    FindingKind::DestinationIdMismatch,
                    format!("the ledger kept T-999, the destination holds {held_there}")
                ),
                (
                    "acme:rc:missing".to_owned(),
                    FindingKind::MissingAtDestination,
                    "the ledger says completed as T-404".to_owned()
                ),
            ]
        );
        assert!(report.findings.iter().all(|f| f.settled_to.is_none()), "a person decides these");
        assert_eq!(snapshot().await, before, "nothing changed in the ledger (apply: {})", apply.is_some());
        assert_eq!(crm.stats().records, records_before, "nothing sent to the CRM");
    }
}

/// A record changed at the destination after the ledger completed its action: `reconcile`
/// reports it as changed, naming the `compare` field that differs, and the lookup of the same
/// action calls it a `mismatch`; an untouched one beside it is no finding. Nothing changes.
async fn a_record_changed_at_the_destination_is_reported_with_its_fields_as_the_lookup_judges_it<S: Store>(
    db: TestDb<S>,
) {
    let crm = crm().await;
    let dests = destinations(&crm);
    let l = &db.ledger;
    for key in ["acme:rc:changed", "acme:rc:same"] {
        l.submit(&order(key, r#"{"qty":1}"#)).await.unwrap();
    }
    let options = WorkerOptions {
        id: "w".to_owned(),
        concurrency: 1,
        batch: 100,
        lease: LEASE,
        poll_interval: Duration::from_millis(10),
        drain: true,
        destinations: Destinations::new(destinations(&crm), None),
        progress: false,
    };
    tokio::time::timeout(Duration::from_mins(1), worker::run(l.clone(), options, std::future::pending()))
        .await
        .expect("the worker drained in time")
        .expect("the worker ran");
    let changed = l.store().find(&ActionKey::parse("acme:rc:changed").unwrap()).await.unwrap().unwrap();
    assert_eq!(changed.state, State::Completed);
    let id = changed.destination_id.clone().unwrap();
    // Someone edits the record at the CRM.
    let edited = reqwest::Client::new()
        .patch(format!("http://{}/tasks/{id}", crm.addr()))
        .header("content-type", "application/json")
        .body(r#"{"data":{"qty":7}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(edited.status().as_u16(), 200);
    let records_before = crm.stats().records;
    let audit_before = l.detail(&changed.key).await.unwrap().audit;

    let report = reconcile::reconcile(l, &dests["crm"], false, None, None).await.unwrap();
    assert_eq!((report.checked, report.lookup_errors), (2, 0));
    let found: Vec<(&str, FindingKind, &[String])> =
        report.findings.iter().map(|f| (f.key.as_str(), f.kind, f.fields.as_slice())).collect();
    assert_eq!(found, [("acme:rc:changed", FindingKind::ChangedAtDestination, &["/data".to_owned()][..])]);
    assert_eq!(report.findings[0].detail, format!("record {id} differs from what the ledger sent at /data"));
    let json = serde_json::to_value(&report.findings[0]).unwrap();
    assert_eq!((json["kind"].as_str(), json["fields"][0].as_str()), (Some("changed_at_destination"), Some("/data")));

    // The lookup of the same action judges it the same way.
    let inspection = reconcile::inspect(l, &dests["crm"], &changed).await.unwrap();
    assert_eq!(inspection.report.verdict, LookupVerdict::Mismatch);
    assert_eq!(inspection.changed_fields, ["/data"]);
    let same = l.store().find(&ActionKey::parse("acme:rc:same").unwrap()).await.unwrap().unwrap();
    assert_eq!(reconcile::inspect(l, &dests["crm"], &same).await.unwrap().report.verdict, LookupVerdict::Found);

    assert_eq!(crm.stats().records, records_before, "nothing sent to the CRM");
    assert_eq!(l.detail(&changed.key).await.unwrap().audit, audit_before, "nothing changed in the ledger");
    assert_eq!(l.store().find(&changed.key).await.unwrap().unwrap(), changed);
}

/// Runs a worker on `l` against `crm` until nothing is left to do.
async fn drain<S: Store>(l: &Ledger<S>, crm: &SimCrm) {
    let options = WorkerOptions {
        id: "w".to_owned(),
        concurrency: 1,
        batch: 100,
        lease: LEASE,
        poll_interval: Duration::from_millis(10),
        drain: true,
        destinations: Destinations::new(destinations(crm), None),
        progress: false,
    };
    tokio::time::timeout(Duration::from_mins(1), worker::run(l.clone(), options, std::future::pending()))
        .await
        .expect("the worker drained in time")
        .expect("the worker ran");
}

/// The documented policy for a record removed at the destination: `reconcile` reports it
/// missing, a person re-creates the completed action with `recreate` (conditional on the version
/// seen), and a worker creates exactly one new record under `KEY#recreate-1`; the original stays
/// completed with its evidence, both audit trails name the other action, and a second
/// re-creation is `KEY#recreate-2`. An action that is not completed is refused and nothing
/// changes.
async fn a_record_removed_at_the_destination_is_re_created_by_a_person_under_a_derived_key<S: Store>(db: TestDb<S>) {
    let crm = crm().await;
    let dests = destinations(&crm);
    let l = &db.ledger;
    let gone = ActionKey::parse("acme:rc:gone").unwrap();
    completed_without_sending(l, gone.as_str(), "T-404").await;
    let report = reconcile::reconcile(l, &dests["crm"], false, None, None).await.unwrap();
    let kinds: Vec<(&str, FindingKind)> = report.findings.iter().map(|f| (f.key.as_str(), f.kind)).collect();
    assert_eq!(kinds, [(gone.as_str(), FindingKind::MissingAtDestination)]);

    let version = l.store().find(&gone).await.unwrap().unwrap().revision;
    let recreate = |expect: i64| {
        let expect = expect.to_string();
        let args = ["recreate", gone.as_str(), "--owner", "Ana Lima", "--reason", "deleted in the CRM"];
        run_cli(&db.url, &[&args[..], &["--expect-version", &expect]].concat())
    };
    let stale = recreate(version - 1);
    assert_eq!(stale.status.code(), Some(3), "{}", String::from_utf8_lossy(&stale.stderr));
    let first = ActionKey::parse("acme:rc:gone#recreate-1").unwrap();
    assert!(l.store().find(&first).await.unwrap().is_none(), "a refused re-creation records nothing");
    let out = recreate(version);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("acme:rc:gone#recreate-1 (pending)"), "{stdout}");

    let records_before = crm.stats().records;
    drain(l, &crm).await;
    assert_eq!(crm.stats().records, records_before + 1, "exactly one new record at the CRM");
    let created = crm.records_for(first.as_str());
    assert_eq!(created.len(), 1, "the record is created under the derived key");
    let new = l.store().find(&first).await.unwrap().unwrap();
    assert_eq!(
        (new.state, new.destination_id.as_ref()),
        (State::Completed, created[0]["id"].as_str().map(str::to_owned).as_ref())
    );
    let original = l.store().find(&gone).await.unwrap().unwrap();
    assert_eq!((original.state, original.destination_id.as_deref()), (State::Completed, Some("T-404")));

    let audit = l.detail(&gone).await.unwrap().audit;
    let entry = audit.iter().find(|e| e.event == Event::Recreated).expect("the original's audit names the re-creation");
    assert_eq!(
        (entry.actor.as_str(), entry.to_state, entry.reason.as_deref()),
        ("Ana Lima", State::Completed, Some("re-created as acme:rc:gone#recreate-1: deleted in the CRM"))
    );
    let created_by = &l.detail(&first).await.unwrap().audit[0];
    assert_eq!(created_by.actor, "Ana Lima");
    assert!(created_by.reason.as_deref().unwrap().starts_with("re-creation of acme:rc:gone "), "{created_by:?}");

    let version = l.store().find(&gone).await.unwrap().unwrap().revision;
    assert_eq!(recreate(version).status.code(), Some(0));
    let second = l.store().find(&ActionKey::parse("acme:rc:gone#recreate-2").unwrap()).await.unwrap();
    assert_eq!(second.map(|a| a.state), Some(State::Pending));

    // Not completed: refused, and nothing changes.
    l.submit(&order("acme:rc:waiting", "{}")).await.unwrap();
    let waiting = ActionKey::parse("acme:rc:waiting").unwrap();
    let before = (l.store().find(&waiting).await.unwrap(), l.detail(&waiting).await.unwrap().audit);
    let out = run_cli(&db.url, &["recreate", waiting.as_str(), "--owner", "Ana Lima", "--reason", "r"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("re-create is allowed only when it is completed"), "{stderr}");
    assert_eq!((l.store().find(&waiting).await.unwrap(), l.detail(&waiting).await.unwrap().audit), before);
    let recreated = l.store().find(&ActionKey::parse("acme:rc:waiting#recreate-1").unwrap()).await.unwrap();
    assert!(recreated.is_none());
}

/// A purged action keeps only its tombstone (no payload): a person's lookup of it is refused
/// naming the purge, before the destination is asked, and keeps nothing; `reconcile` passes it
/// over instead of calling the destination's record a difference.
async fn a_lookup_of_a_purged_action_is_refused_and_keeps_nothing<S: Store>(db: TestDb<S>) {
    let crm = crm().await;
    let dests = destinations(&crm);
    let l = &db.ledger;
    let key = ActionKey::parse("acme:rc:purged").unwrap();
    l.submit(&order(key.as_str(), r#"{"n":1}"#)).await.unwrap();
    drain(l, &crm).await;
    assert_eq!(crm.records_for(key.as_str()).len(), 1);
    l.store().clock().advance(Duration::from_hours(24 * 91));
    let purge = PurgeRequest::new(
        Duration::from_hours(24 * 90),
        &[State::Completed],
        Person::parse("Ana Lima").unwrap(),
        Reason::parse("retention").unwrap(),
        false,
    )
    .unwrap();
    let run = l.purge(&purge).await.unwrap();
    assert_eq!(run.record.counts.actions, 1);
    let tombstone = l.store().find(&key).await.unwrap().unwrap();
    let audit_before = l.detail(&key).await.unwrap().audit;
    let requests_before = crm.stats().requests;

    let destinations = Destinations::new(dests.clone(), None);
    let person = Person::parse("Ana Lima").unwrap();
    let reason = Reason::parse("does the CRM still hold it?").unwrap();
    let looked =
        reconcile::look_up_for_person(l, &destinations, &key, Some(tombstone.revision), &person, &reason).await;
    match looked {
        Err(actionledger::Error::Ledger(LedgerError::Refused(refusal @ Refusal::Purged { .. }))) => {
            assert!(refusal.to_string().starts_with("cannot look up acme:rc:purged: it is completed and was purged"));
        }
        other => panic!("a lookup of a purged action must be refused naming the purge: {other:?}"),
    }
    assert_eq!(crm.stats().requests, requests_before, "the destination was not asked");
    let detail = l.detail(&key).await.unwrap();
    assert!(detail.lookups.is_empty(), "no lookup kept on the tombstone: {:?}", detail.lookups);
    assert_eq!(detail.audit, audit_before);
    assert_eq!(l.store().find(&key).await.unwrap().unwrap(), tombstone);

    // The same refusal inside the ledger's transaction, for a front end that skipped the check.
    let report = actionledger::ledger::LookupReport {
        verdict: LookupVerdict::Mismatch,
        records: 1,
        destination_id: None,
        evidence: Evidence::default(),
        detail: None,
    };
    let kept = l.keep_lookup(&key, tombstone.revision, &person, &report).await;
    assert!(matches!(kept, Err(LedgerError::Refused(Refusal::Purged { .. }))), "{kept:?}");
    assert!(l.detail(&key).await.unwrap().lookups.is_empty());

    let out = run_cli(&db.url, &["lookup", key.as_str(), "--owner", "Ana Lima", "--reason", "check"]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));

    let compared = reconcile::reconcile(l, &dests["crm"], false, None, None).await.unwrap();
    assert_eq!((compared.checked, compared.purged), (0, 1));
    assert!(compared.findings.is_empty(), "{:?}", compared.findings);
}
