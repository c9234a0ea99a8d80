//! The review console's sort by attempts, bulk results that name what was done and what was
//! refused, the old-worker question asked once for a marked set, the `*` cap said on screen, and
//! the tabs at 80 columns; and the CLI's bulk output, on both stores.

use crate::support::{self, TestDb, order as raw};
use actionledger::Ledger;
use actionledger::console::{ConsoleOptions, ScriptedConsole};
use actionledger::destination::Destinations;
use actionledger::domain::{ActionKey, Evidence, ManualCommand, State};
use actionledger::ledger::{ActionDetail, Outcome, Report};
use actionledger::store::{ListFilter, ListOrder, PageStart, Store};
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(30);

conformance!(sorting_by_attempts_comes_from_the_store_and_pages_both_ways,);

fn options(owner: &str) -> ConsoleOptions {
    ConsoleOptions {
        owner: actionledger::domain::Person::parse(owner).unwrap(),
        ledger_label: "test-ledger".to_owned(),
        destinations: Destinations::default(),
        refresh: Duration::from_hours(1),
        hint: None,
    }
}

async fn record<S: Store>(ledger: &Ledger<S>, key: &str) -> ActionDetail {
    ledger.detail(&ActionKey::parse(key).unwrap()).await.unwrap()
}

/// A new action that failed `attempts` times (each time retried by a person but the last), so
/// that it ends `failed` with that many attempts; none leaves it pending.
async fn failed_after<S: Store>(l: &Ledger<S>, key: &str, attempts: usize) {
    l.submit(&raw(key, r#"{"qty":1}"#)).await.unwrap();
    for n in 0..attempts {
        let claim = l.claim("worker-1", LEASE, 1).await.unwrap().pop().unwrap();
        assert_eq!(claim.key().as_str(), key);
        let attempt = l.start_attempt(&claim).await.unwrap();
        let report = Report {
            outcome: Outcome::Failed { permanent: true },
            error: Some("HTTP 422".into()),
            evidence: Evidence::default(),
        };
        l.record_result(&claim, attempt, &report).await.unwrap();
        if n + 1 < attempts {
            l.manual(&support::person_request(key, ManualCommand::Retry)).await.unwrap();
        }
    }
}

async fn sorting_by_attempts_comes_from_the_store_and_pages_both_ways<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    for (n, attempts) in [(1, 2), (2, 1), (3, 3), (4, 1), (5, 3)] {
        failed_after(l, &format!("acme:a:{n}"), attempts).await;
    }
    // The store's order: most attempts first, ties newest first.
    let by_store = |filter: ListFilter| async move {
        l.list(&filter).await.unwrap().into_iter().map(|a| a.key.to_string()).collect::<Vec<_>>()
    };
    let all =
        ListFilter { state: Some(State::Failed), order: ListOrder::MostAttempts, limit: 10, ..ListFilter::default() };
    let expected = ["acme:a:5", "acme:a:3", "acme:a:1", "acme:a:4", "acme:a:2"];
    assert_eq!(by_store(all.clone()).await, expected);
    let attempts: Vec<i64> = l.list(&all).await.unwrap().iter().map(|a| a.attempts).collect();
    assert_eq!(attempts, [3, 3, 2, 1, 1], "the order is the attempts the ledger counted");
    // Keyset pages: after acme:a:3 (3 attempts), and before acme:a:4 (1), in the order shown.
    let id = |key: &str| {
        let key = key.to_owned();
        async move { record(l, &key).await.action.id }
    };
    let after = ListFilter { before_id: Some(id("acme:a:3").await), limit: 2, ..all.clone() };
    assert_eq!(by_store(after).await, ["acme:a:1", "acme:a:4"]);
    let before = ListFilter { after_id: Some(id("acme:a:4").await), limit: 2, ..all.clone() };
    assert_eq!(by_store(before).await, ["acme:a:3", "acme:a:1"]);
    let last = ListFilter { start: PageStart::Last, limit: 2, ..all.clone() };
    assert_eq!(by_store(last).await, ["acme:a:4", "acme:a:2"]);
    let from =
        ListFilter { before_id: Some(id("acme:a:1").await), start: PageStart::AtCursor, limit: 2, ..all.clone() };
    assert_eq!(by_store(from).await, ["acme:a:1", "acme:a:4"]);

    // The console: two rows a page (10 lines), s twice, and every page comes from the store.
    let mut console = ScriptedConsole::start(l, &options("Ana"), 80, 10).await.unwrap();
    let selected = |console: &ScriptedConsole<S>| console.model().selected_action().unwrap().key.to_string();
    console.press("5").await.unwrap();
    assert_eq!(selected(&console), "acme:a:5", "newest first");
    console.press("s").await.unwrap();
    console.press("s").await.unwrap();
    let screen = console.screen().unwrap();
    assert!(screen.contains("failed — most attempts first"), "the pane says its order:\n{screen}");
    assert!(screen.contains("most attempts first"), "{screen}");
    let walk = [
        ("g", "acme:a:5"),
        ("j", "acme:a:3"),
        ("j", "acme:a:1"),
        ("j", "acme:a:4"),
        ("j", "acme:a:2"),
        ("k", "acme:a:4"),
        ("k", "acme:a:1"),
        ("G", "acme:a:2"),
        ("k", "acme:a:4"),
        ("k", "acme:a:1"),
        ("<PageUp>", "acme:a:5"),
    ];
    for (key, expected) in walk {
        console.press(key).await.unwrap();
        assert_eq!(selected(&console), expected, "{key}\n{}", console.screen().unwrap());
    }
    // Another attempt moves an action up the order at the next refresh; the selection stays on
    // its key.
    console.press("j").await.unwrap();
    console.press("j").await.unwrap();
    assert_eq!(selected(&console), "acme:a:1");
    for _ in 0..3 {
        l.manual(&support::person_request("acme:a:2", ManualCommand::Retry)).await.unwrap();
        let claim = l.claim("worker-1", LEASE, 1).await.unwrap().pop().unwrap();
        let attempt = l.start_attempt(&claim).await.unwrap();
        let report =
            Report { outcome: Outcome::Failed { permanent: true }, error: None, evidence: Evidence::default() };
        l.record_result(&claim, attempt, &report).await.unwrap();
    }
    console.send(actionledger::console::model::Msg::Tick).await.unwrap();
    assert_eq!(selected(&console), "acme:a:1", "{}", console.screen().unwrap());
    console.press("g").await.unwrap();
    assert_eq!(selected(&console), "acme:a:2", "4 attempts now: the first");
    // s again: newest first.
    console.press("s").await.unwrap();
    assert!(console.screen().unwrap().contains("failed — newest first"));
}
