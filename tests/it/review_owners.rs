//! Review owners, on both stores: an action that ends `unknown` (the simulated CRM drops the
//! response after its commit) is assigned, in the same write, to the owner the configuration
//! names, with an `assigned` entry in the audit trail; a key prefix wins over the destination's
//! owner; an action someone already follows keeps its assignee; and `review --owner` opens on
//! what was routed to that person.

use crate::support::{TestDb, order};
use actionledger::Ledger;
use actionledger::config::Config;
use actionledger::destination::Destinations;
use actionledger::domain::{ActionKey, ActorKind, Event, ManualCommand, Person, Reason, State};
use actionledger::ledger::ManualRequest;
use actionledger::sim_crm::{Fault, FaultPlan, Options, SimCrm};
use actionledger::store::{ListFilter, Store};
use actionledger::worker::{self, WorkerOptions};
use std::collections::VecDeque;
use std::time::Duration;

conformance!(an_action_that_ends_unknown_goes_to_its_review_owner_and_an_assignee_is_kept);

async fn crm_dropping_every_response() -> SimCrm {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let faults = FaultPlan { script: VecDeque::from(vec![Fault::DropAfterCommit; 3]), rates: Vec::new() };
    SimCrm::start(listener, Options { faults, ..Options::default() }).unwrap()
}

/// The CRM's block without its lookup (so a lost response stays `unknown`), with a review
/// owner, and a key prefix routed to someone else.
fn configured(crm: &SimCrm) -> Destinations {
    let printed = crm.destination_config("crm");
    let block: Vec<&str> = printed.lines().filter(|l| !l.starts_with("lookup")).collect();
    let text = format!(
        "{}\nreview_owner = \"ana\"\n\n[[review_owners]]\nprefix = \"acme:vip:\"\nowner = \"carla\"\n\n\
         [[review_owners]]\nprefix = \"acme:\"\nowner = \"dora\"\n",
        block.join("\n")
    );
    let config = Config::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    Destinations::from_config(&config).unwrap()
}

async fn action<S: Store>(ledger: &Ledger<S>, key: &str) -> actionledger::ledger::ActionDetail {
    ledger.detail(&ActionKey::parse(key).unwrap()).await.unwrap()
}

async fn an_action_that_ends_unknown_goes_to_its_review_owner_and_an_assignee_is_kept<S: Store>(db: TestDb<S>) {
    let crm = crm_dropping_every_response().await;
    let l = &db.ledger;
    for key in ["ops:ro:1", "ops:ro:followed", "acme:vip:ro:2"] {
        l.submit(&order(key, r#"{"n":1}"#)).await.unwrap();
    }
    let assign = ManualRequest {
        key: ActionKey::parse("ops:ro:followed").unwrap(),
        person: Person::parse("bruno").unwrap(),
        reason: Reason::parse("I know this customer").unwrap(),
        expect_version: None,
        command: ManualCommand::Assign { to: "bruno".to_owned() },
        old_worker_stopped: false,
        confirmed_not_written: false,
    };
    l.manual(&assign).await.unwrap();

    let options = WorkerOptions {
        id: "w".to_owned(),
        concurrency: 1,
        batch: 100,
        lease: Duration::from_secs(30),
        poll_interval: Duration::from_millis(10),
        drain: true,
        destinations: configured(&crm),
        progress: false,
    };
    tokio::time::timeout(Duration::from_mins(2), worker::run(l.clone(), options, std::future::pending()))
        .await
        .expect("the worker drained in time")
        .expect("the worker ran");
    assert_eq!(crm.stats().records, 3, "one record each, nothing sent twice");

    for (key, owner, rule) in
        [("ops:ro:1", "ana", "review owner of destination crm"), ("acme:vip:ro:2", "carla", "key prefix \"acme:vip:\"")]
    {
        let detail = action(l, key).await;
        assert_eq!(detail.action.state, State::Unknown, "{key}");
        assert_eq!(detail.action.assignee.as_deref(), Some(owner), "{key}");
        let assigned: Vec<_> = detail.audit.iter().filter(|e| e.event == Event::Assigned).collect();
        assert_eq!(assigned.len(), 1, "{key}: one assignment in the audit trail");
        let entry = assigned[0];
        assert_eq!((entry.actor.as_str(), entry.actor_kind), ("w", ActorKind::Worker), "{key}");
        assert_eq!((entry.from_state, entry.to_state), (Some(State::Unknown), State::Unknown), "{key}");
        let reason = entry.reason.as_deref().unwrap_or_default();
        assert!(reason.contains(&format!("review owner {owner}")) && reason.contains(rule), "{key}: {reason}");
        // One write moved the action and assigned it: both entries name the revision written.
        let unknown = detail.audit.iter().find(|e| e.event == Event::OutcomeUnknown).expect("moved to unknown");
        assert_eq!((unknown.revision, entry.revision), (detail.action.revision, detail.action.revision), "{key}");
    }

    let followed = action(l, "ops:ro:followed").await;
    assert_eq!(followed.action.state, State::Unknown);
    assert_eq!(followed.action.assignee.as_deref(), Some("bruno"), "an assignee is kept");
    let assignments: Vec<&str> =
        followed.audit.iter().filter(|e| e.event == Event::Assigned).map(|e| e.actor.as_str()).collect();
    assert_eq!(assignments, ["bruno"], "only the person's own assignment");

    // What `review --owner ana` opens on: the list filtered by owner finds what was routed.
    let mine = |owner: &str| ListFilter { owner: Some(owner.to_owned()), limit: 50, ..ListFilter::default() };
    let keys = |actions: Vec<actionledger::domain::ActionRecord>| -> Vec<String> {
        actions.into_iter().map(|a| a.key.to_string()).collect()
    };
    assert_eq!(keys(l.list(&mine("ana")).await.unwrap()), ["ops:ro:1"]);
    assert_eq!(keys(l.list(&mine("carla")).await.unwrap()), ["acme:vip:ro:2"]);
    assert!(l.list(&mine("dora")).await.unwrap().is_empty(), "the longest prefix wins");

    // The console itself, on the real binary: `review --owner ana` opens on what is hers, the
    // filter line saying so; `--owner dora`, with nothing routed to her, opens on everything.
    let script = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(script.path(), "3\n").unwrap();
    let screen = |owner: &str| {
        let script = script.path().to_str().unwrap();
        let out =
            crate::support::run_cli(&db.url, &["review", "--owner", owner, "--script", script, "--size", "100x24"]);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let ana = screen("ana");
    assert!(ana.contains("assigned to ana") && ana.contains("ops:ro:1"), "{ana}");
    assert!(!ana.contains("acme:vip:ro:2") && !ana.contains("ops:ro:followed"), "only hers:\n{ana}");
    let dora = screen("dora");
    assert!(dora.contains("acme:vip:ro:2") && dora.contains("ops:ro:followed"), "everything:\n{dora}");
}
