//! The review console's offers and triage against a real ledger on both stores: `l` only where
//! a destination declares a lookup, a lookup's records kept as evidence, `c` offering the id the
//! evidence names, the takeover dialog saying where the action will go, and whole screens.

use crate::support::{self, TestDb, order as raw};
use actionledger::Ledger;
use actionledger::console::{ConsoleOptions, ScriptedConsole};
use actionledger::destination::{Destination, Destinations};
use actionledger::domain::{ActionKey, Event, Evidence, State};
use actionledger::ledger::{ActionDetail, Outcome, Report};
use actionledger::sim_crm::{self, SimCrm};
use actionledger::store::Store;
use std::collections::BTreeMap;
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(30);

conformance!(
    lookup_is_offered_only_where_a_destination_declares_one,
    a_lookup_on_a_settled_action_is_kept_as_evidence_with_its_record_ids,
    resolving_offers_the_destination_id_the_evidence_names,
    the_takeover_dialog_says_where_the_action_will_go_and_the_ledger_agrees,
    bulk_takeover_of_marked_stale_claims_checks_each_version_and_keeps_refused_ones_marked,
    marks_are_keys_that_survive_panes_filters_and_refreshes,
    cli_bulk_retry_selects_by_filter_with_a_dry_run,
    filters_by_destination_mine_age_and_text_and_the_counts_follow,
    history_panes_and_copying_a_key_or_destination_id,
    sorting_by_age_pages_both_ways_and_keeps_the_selection,
    long_keys_are_told_apart_and_stale_claims_say_whether_a_repeat_is_safe,
);

fn options(owner: &str, destinations: Destinations) -> ConsoleOptions {
    ConsoleOptions {
        owner: actionledger::domain::Person::parse(owner).unwrap(),
        ledger_label: "test-ledger".to_owned(),
        destinations,
        refresh: Duration::from_hours(1),
        hint: None,
        filter: None,
    }
}

/// The `crm` destination as configured for a simulated CRM at `addr` (which need not be
/// running), with or without its lookup.
fn crm_at(addr: std::net::SocketAddr, lookup: bool) -> Destinations {
    let no_idempotency = sim_crm::Options { retention: None, ..sim_crm::Options::default() };
    let text = sim_crm::destination_config("crm", addr, &no_idempotency);
    let text = text.lines().filter(|l| lookup || !l.starts_with("lookup")).collect::<Vec<_>>().join("\n");
    let config = actionledger::config::Config::parse(&text).unwrap();
    let destination = Destination::new("crm", config.destinations["crm"].clone()).unwrap();
    Destinations::new(BTreeMap::from([("crm".to_owned(), destination)]), None)
}

async fn crm() -> SimCrm {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    SimCrm::start(listener, sim_crm::Options { retention: None, ..sim_crm::Options::default() }).unwrap()
}

const NOWHERE: &str = "127.0.0.1:9";

/// Puts a fresh action into `state` through the library, its one attempt ending with `evidence`.
async fn action_in<S: Store>(ledger: &Ledger<S>, key: &str, state: State, evidence: Evidence) {
    ledger.submit(&raw(key, r#"{"qty":1}"#)).await.unwrap();
    let claim = ledger.claim("worker-1", LEASE, 1).await.unwrap().pop().unwrap();
    if state == State::InProgress && evidence == Evidence::default() {
        return;
    }
    let attempt = ledger.start_attempt(&claim).await.unwrap();
    let outcome = match state {
        State::Failed => Outcome::Failed { permanent: true },
        State::Unknown => Outcome::Unknown,
        State::InProgress => return,
        other => panic!("no setup for {other}"),
    };
    let report = Report { outcome, error: Some("HTTP 409".into()), evidence };
    ledger.record_result(&claim, attempt, &report).await.unwrap();
}

async fn record<S: Store>(ledger: &Ledger<S>, key: &str) -> ActionDetail {
    ledger.detail(&ActionKey::parse(key).unwrap()).await.unwrap()
}

/// Selects `key` in `pane` by filtering on it, then presses the script.
async fn act<S: Store>(console: &mut ScriptedConsole<S>, pane: &str, key: &str, script: &[&str]) -> String {
    for line in [pane, "/", key, "<Enter>"].into_iter().chain(script.iter().copied()) {
        console.press(line).await.unwrap();
    }
    console.screen().unwrap()
}

/// The footer: the screen's last line.
fn footer(screen: &str) -> &str {
    screen.lines().last().unwrap_or_default()
}

async fn lookup_is_offered_only_where_a_destination_declares_one<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    action_in(l, "acme:u1", State::Unknown, Evidence::default()).await;
    let nowhere = NOWHERE.parse().unwrap();
    let cases = [
        (Destinations::default(), "look up needs the destinations' configuration: start review with --config"),
        (crm_at(nowhere, false), "cannot look up acme:u1: destination crm declares no lookup"),
    ];
    for (destinations, why) in cases {
        let mut console = ScriptedConsole::start(l, &options("Ana", destinations), 100, 30).await.unwrap();
        let screen = act(&mut console, "3", "acme:u1", &[]).await;
        assert!(!footer(&screen).contains("lookup"), "not offered:\n{screen}");
        let screen = act(&mut console, "3", "acme:u1", &["l"]).await;
        assert!(screen.contains(why), "says why instead of asking for a reason:\n{screen}");
        assert!(!screen.contains("reason:"), "no dialog:\n{screen}");
        let screen = act(&mut console, "3", "acme:u1", &["?"]).await;
        assert!(!screen.contains("look it up at its destination now"), "help does not list it:\n{screen}");
    }
    let mut console = ScriptedConsole::start(l, &options("Ana", crm_at(nowhere, true)), 100, 30).await.unwrap();
    let screen = act(&mut console, "3", "acme:u1", &[]).await;
    assert!(footer(&screen).contains("l lookup"), "offered with a lookup:\n{screen}");
    let screen = act(&mut console, "3", "acme:u1", &["?"]).await;
    assert!(screen.contains("look it up at its destination now"), "{screen}");
    assert_eq!(record(l, "acme:u1").await.audit.len(), 3, "nothing was recorded by the refusals");
}

async fn a_lookup_on_a_settled_action_is_kept_as_evidence_with_its_record_ids<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let crm = crm().await;
    let destinations = crm_at(crm.addr(), true);
    action_in(l, "acme:f1", State::Failed, Evidence::default()).await;
    // The CRM has the record all the same (a failure the worker misread).
    let action = record(l, "acme:f1").await.action;
    destinations.get("crm").unwrap().send(&action, None).await.unwrap();
    let mut console = ScriptedConsole::start(l, &options("Ana", destinations), 100, 30).await.unwrap();
    let before = record(l, "acme:f1").await;
    let screen = act(&mut console, "5", "acme:f1", &["l", "does the CRM have it?", "<Enter>", "y"]).await;
    assert!(
        screen.contains("looked up acme:f1: found, record R-000001; kept as evidence, it stays failed"),
        "{screen}"
    );
    let after = record(l, "acme:f1").await;
    assert_eq!((after.action.state, after.action.revision), (State::Failed, before.action.revision), "no change");
    assert_eq!(after.lookups.len(), 1, "kept as evidence");
    assert_eq!(after.lookups[0].destination_id.as_deref(), Some("R-000001"));
    assert_eq!(after.lookups[0].actor, "Ana");
    let last = after.audit.last().unwrap();
    assert_eq!((last.event, last.actor.as_str()), (Event::LookedUp, "Ana"));
    assert_eq!((last.from_state, last.to_state), (Some(State::Failed), State::Failed));
    assert!(last.reason.as_deref().unwrap().starts_with("does the CRM have it?"), "{last:?}");
    assert_eq!(after.audit.len(), before.audit.len() + 1);
    // The detail shows the lookup with the id found, and `c` now offers it.
    let screen = act(&mut console, "5", "acme:f1", &["<Enter>", "G"]).await;
    assert!(screen.contains("found (1 records, id R-000001)"), "{screen}");
    let screen = act(&mut console, "5", "acme:f1", &["c"]).await;
    assert!(screen.contains("destination id: R-000001"), "{screen}");
    console.press("<Esc>").await.unwrap();
    act(&mut console, "5", "acme:f1", &["c", "<Enter>", "the lookup found it", "<Enter>", "y"]).await;
    let done = record(l, "acme:f1").await.action;
    assert_eq!((done.state, done.destination_id.as_deref()), (State::Completed, Some("R-000001")));
    assert_eq!(crm.stats().records, 1, "the lookups wrote nothing at the CRM");
}

async fn resolving_offers_the_destination_id_the_evidence_names<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    // A 409 whose body names the record that already exists, at the configured id pointer.
    let conflict = Evidence {
        status: Some(409),
        destination_id: None,
        body: Some(r#"{"error": "external_ref exists", "id": "R-000042"}"#.to_owned()),
    };
    action_in(l, "acme:dup", State::Unknown, conflict).await;
    let nowhere = NOWHERE.parse().unwrap();
    let mut console = ScriptedConsole::start(l, &options("Ana", crm_at(nowhere, false)), 100, 30).await.unwrap();
    let screen = act(&mut console, "3", "acme:dup", &["c"]).await;
    assert!(screen.contains("destination id: R-000042_"), "offered from the 409 body:\n{screen}");
    assert!(screen.contains("The evidence names R-000042"), "{screen}");
    // Typing replaces the offer; Esc leaves everything as it was.
    let screen = act(&mut console, "3", "acme:dup", &["<Esc>", "c", "R-7"]).await;
    assert!(screen.contains("destination id: R-7_"), "{screen}");
    act(&mut console, "3", "acme:dup", &["<Esc>", "c", "<Enter>", "the 409 names it", "<Enter>", "y"]).await;
    let detail = record(l, "acme:dup").await;
    assert_eq!((detail.action.state, detail.action.destination_id.as_deref()), (State::Completed, Some("R-000042")));
    assert_eq!(detail.audit.last().unwrap().event, Event::ResolvedCompleted);
    // Without the configuration the pointer is unknown: nothing is offered.
    action_in(
        l,
        "acme:dup2",
        State::Unknown,
        Evidence { body: Some(r#"{"id": "R-9"}"#.into()), ..Evidence::default() },
    )
    .await;
    let mut bare = ScriptedConsole::start(l, &options("Ana", Destinations::default()), 100, 30).await.unwrap();
    let screen = act(&mut bare, "3", "acme:dup2", &["c"]).await;
    assert!(screen.contains("destination id: _"), "{screen}");
}

async fn the_takeover_dialog_says_where_the_action_will_go_and_the_ledger_agrees<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let sent = Evidence { status: None, destination_id: None, body: None };
    // Sent under the claim (an attempt started), quiet (claimed, nothing sent), and sent again
    // but to a destination whose lookup protects against a repeat.
    l.submit(&raw("acme:t:sent", r#"{"qty":1}"#)).await.unwrap();
    let claim = l.claim("worker-1", LEASE, 1).await.unwrap().pop().unwrap();
    l.start_attempt(&claim).await.unwrap();
    action_in(l, "acme:t:quiet", State::InProgress, sent.clone()).await;
    l.submit(&raw("acme:t:looked", r#"{"qty":1}"#)).await.unwrap();
    let claim = l.claim("worker-1", LEASE, 1).await.unwrap().pop().unwrap();
    l.start_attempt(&claim).await.unwrap();
    l.store().clock().advance(LEASE * 2);
    let nowhere = NOWHERE.parse().unwrap();
    let cases = [
        (
            "acme:t:sent",
            Destinations::default(),
            State::Held,
            "This action will go to held: a request may have been sent, and the destination cannot tell a repeat",
        ),
        (
            "acme:t:quiet",
            Destinations::default(),
            State::Pending,
            "This action will go to pending: nothing was sent under its claim",
        ),
        (
            "acme:t:looked",
            crm_at(nowhere, true),
            State::Pending,
            "This action will go to pending: a request may have been sent, but the destination protects against a repeat",
        ),
    ];
    for (key, destinations, expected, says) in cases {
        let mut console = ScriptedConsole::start(l, &options("Ana", destinations), 120, 40).await.unwrap();
        let screen = act(&mut console, "2", key, &["t"]).await;
        assert!(joined(&screen).contains(says), "{key}:\n{screen}");
        act(&mut console, "2", key, &["worker host died", "<Enter>", "y"]).await;
        let detail = record(l, key).await;
        assert_eq!(detail.action.state, expected, "{key}: the ledger decided as the dialog said");
        assert_eq!(detail.audit.last().unwrap().event, Event::TakenOver);
    }
}

/// The keys marked in the console, in order.
fn marked<S: Store>(console: &ScriptedConsole<S>) -> Vec<String> {
    console.model().marks.keys().cloned().collect()
}

async fn bulk_takeover_of_marked_stale_claims_checks_each_version_and_keeps_refused_ones_marked<S: Store>(
    db: TestDb<S>,
) {
    let l = &db.ledger;
    for n in 1..=6 {
        l.submit(&raw(&format!("acme:stale:{n}"), r#"{"qty":1}"#)).await.unwrap();
        let claim = l.claim("worker-1", LEASE, 1).await.unwrap().pop().unwrap();
        if n % 2 == 0 {
            l.start_attempt(&claim).await.unwrap();
        }
    }
    l.store().clock().advance(LEASE * 2);
    let mut console = ScriptedConsole::start(l, &options("Ana", Destinations::default()), 120, 40).await.unwrap();
    // Mark all six, then let another person take one of them over first.
    for line in ["2", "*"] {
        console.press(line).await.unwrap();
    }
    assert_eq!(marked(&console).len(), 6, "{}", console.screen().unwrap());
    let first = support::person_request("acme:stale:6", actionledger::domain::ManualCommand::Takeover);
    l.manual(&first).await.unwrap();
    let before: Vec<usize> = futures_len(l).await;
    for line in ["t", "worker host died", "<Enter>"] {
        console.press(line).await.unwrap();
    }
    let screen = console.screen().unwrap();
    assert!(joined(&screen).contains("take over 6 marked actions"), "one dialog for the set:\n{screen}");
    // Each one's outcome, from what the ledger read was sent under its claim.
    let words = joined(&screen);
    assert!(words.contains("3 to pending, 3 to held"), "the counts:\n{screen}");
    assert!(
        words.contains("acme:stale:1: in_progress -> pending: nothing was sent under its claim"),
        "nothing sent under the claim: pending\n{screen}"
    );
    assert!(
        words.contains(
            "acme:stale:2: in_progress -> held: a request may have been sent, and the destination cannot tell a \
             repeat: a person checks first"
        ),
        "a request sent under the claim: held\n{screen}"
    );
    console.press("y").await.unwrap();
    let screen = console.screen().unwrap();
    assert!(joined(&screen).contains("take over: 5 done, 1 refused"), "{screen}");
    assert!(joined(&screen).contains("acme:stale:6"), "the refusal names its action:\n{screen}");
    assert_eq!(marked(&console), ["acme:stale:6"], "only the refused one stays marked");
    for n in 1..=5 {
        let detail = record(l, &format!("acme:stale:{n}")).await;
        let expected = if n % 2 == 0 { State::Held } else { State::Pending };
        assert_eq!(detail.action.state, expected, "acme:stale:{n}: sent under the claim or not");
        let last = detail.audit.last().unwrap();
        assert_eq!((last.event, last.actor.as_str()), (Event::TakenOver, "Ana"));
        assert_eq!(last.reason.as_deref().map(|r| r.starts_with("worker host died")), Some(true));
    }
    let after: Vec<usize> = futures_len(l).await;
    assert_eq!(after[5], before[5], "the action that changed meanwhile was not touched again");
    // Esc closes the result; u clears the marks.
    console.press("<Esc>").await.unwrap();
    console.press("u").await.unwrap();
    assert!(marked(&console).is_empty());
}

/// The audit trail length of acme:stale:1..6.
async fn futures_len<S: Store>(l: &Ledger<S>) -> Vec<usize> {
    let mut out = Vec::new();
    for n in 1..=6 {
        out.push(record(l, &format!("acme:stale:{n}")).await.audit.len());
    }
    out
}

async fn marks_are_keys_that_survive_panes_filters_and_refreshes<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    for n in 1..=4 {
        action_in(l, &format!("acme:m:{n}"), State::Unknown, Evidence::default()).await;
    }
    let mut console = ScriptedConsole::start(l, &options("Ana", Destinations::default()), 100, 30).await.unwrap();
    // Space marks and moves down: two presses mark the two newest.
    for line in ["3", "<Space>", "<Space>"] {
        console.press(line).await.unwrap();
    }
    assert_eq!(marked(&console), ["acme:m:3", "acme:m:4"]);
    let screen = console.screen().unwrap();
    assert!(screen.contains("+ acme:m:4") && screen.contains("+ acme:m:3"), "{screen}");
    assert!(screen.contains("2 marked"), "{screen}");
    // A new row, a refresh, another pane and a filter leave the marks on their keys.
    action_in(l, "acme:m:5", State::Unknown, Evidence::default()).await;
    console.send(actionledger::console::model::Msg::Tick).await.unwrap();
    for line in ["1", "3", "/", "m:1", "<Enter>", "<Space>", "<Esc>"] {
        console.press(line).await.unwrap();
    }
    assert_eq!(marked(&console), ["acme:m:1", "acme:m:3", "acme:m:4"]);
    let screen = console.screen().unwrap();
    assert!(screen.contains("+ acme:m:4") && !screen.contains("+ acme:m:5"), "{screen}");
    // Space on a marked row unmarks it; n resolves the marked set as not written.
    for line in ["/", "m:1", "<Enter>", "<Space>", "<Esc>", "n", "CRM has none of them", "<Enter>", "y"] {
        console.press(line).await.unwrap();
    }
    for (n, expected) in [(1, State::Unknown), (2, State::Unknown), (3, State::Pending), (4, State::Pending)] {
        assert_eq!(record(l, &format!("acme:m:{n}")).await.action.state, expected, "acme:m:{n}");
    }
    assert!(marked(&console).is_empty(), "done ones are unmarked");
}

/// The tabs' line.
fn tabs(screen: &str) -> &str {
    screen.lines().nth(2).unwrap_or_default()
}

async fn filters_by_destination_mine_age_and_text_and_the_counts_follow<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    action_in(l, "acme:f:1", State::Unknown, Evidence::default()).await;
    let erp = actionledger::domain::RawSubmission { destination: Some("erp".into()), ..raw("acme:f:2", "{}") };
    l.submit(&erp).await.unwrap();
    let claim = l.claim("worker-1", LEASE, 1).await.unwrap().pop().unwrap();
    let attempt = l.start_attempt(&claim).await.unwrap();
    let unknown = Report { outcome: Outcome::Unknown, error: None, evidence: Evidence::default() };
    l.record_result(&claim, attempt, &unknown).await.unwrap();
    action_in(l, "acme:f:3", State::Failed, Evidence::default()).await;
    let mut assign =
        support::person_request("acme:f:3", actionledger::domain::ManualCommand::Assign { to: "Ana".into() });
    assign.person = actionledger::domain::Person::parse("Ana").unwrap();
    l.manual(&assign).await.unwrap();
    l.store().clock().advance(Duration::from_hours(2));
    action_in(l, "acme:f:4", State::Unknown, Evidence::default()).await;
    let mut console = ScriptedConsole::start(l, &options("Ana", Destinations::default()), 120, 40).await.unwrap();
    let visible = |screen: &str| -> Vec<String> {
        (1..=4).map(|n| format!("acme:f:{n}")).filter(|k| screen.contains(k.as_str())).collect()
    };
    console.press("3").await.unwrap();
    assert!(tabs(&console.screen().unwrap()).contains("unknown 3"), "{}", console.screen().unwrap());
    // What the filter means is shown while it is typed.
    for line in ["/", "dest:crm"] {
        console.press(line).await.unwrap();
    }
    let screen = console.screen().unwrap();
    assert!(screen.contains("/dest:crm_  (shows destination crm)"), "{screen}");
    console.press("<Enter>").await.unwrap();
    let screen = console.screen().unwrap();
    assert_eq!(visible(&screen), ["acme:f:1", "acme:f:4"], "{screen}");
    console.send(actionledger::console::model::Msg::Tick).await.unwrap();
    let screen = console.screen().unwrap();
    assert!(tabs(&screen).contains("unknown 2") && tabs(&screen).contains("failed 1"), "counts follow:\n{screen}");
    // mine: assigned to the person reviewing; age: unchanged for at least that long; text.
    let cases: [(&str, &str, &[&str]); 4] = [
        ("5", "mine", &["acme:f:3"]),
        ("3", "age:1h", &["acme:f:1", "acme:f:2"]),
        ("3", "f:4", &["acme:f:4"]),
        ("3", "dest:erp age:1h", &["acme:f:2"]),
    ];
    for (pane, filter, expected) in cases {
        for line in [pane, "/", "<Backspace>".repeat(30).as_str(), filter, "<Enter>"] {
            console.press(line).await.unwrap();
        }
        let screen = console.screen().unwrap();
        assert_eq!(visible(&screen), expected, "{filter}:\n{screen}");
    }
    console.send(actionledger::console::model::Msg::Tick).await.unwrap();
    let screen = console.screen().unwrap();
    assert!(tabs(&screen).contains("unknown 1") && tabs(&screen).contains("failed 0"), "{screen}");
    // A filter that cannot be applied says why and changes nothing.
    for line in ["/", "<Backspace>".repeat(30).as_str(), "age:soon", "<Enter>"] {
        console.press(line).await.unwrap();
    }
    let screen = console.screen().unwrap();
    assert!(joined(&screen).contains("filter age:soon:"), "{screen}");
    assert_eq!(console.model().refusals, 1);
}

async fn history_panes_and_copying_a_key_or_destination_id<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    action_in(l, "acme:h:done", State::Unknown, Evidence::default()).await;
    action_in(l, "acme:h:dropped", State::Failed, Evidence::default()).await;
    action_in(l, "acme:h:open", State::Unknown, Evidence::default()).await;
    let resolve = actionledger::domain::ManualCommand::ResolveCompleted { destination_id: "R-77".into() };
    l.manual(&support::person_request("acme:h:done", resolve)).await.unwrap();
    l.manual(&support::person_request("acme:h:dropped", actionledger::domain::ManualCommand::Cancel)).await.unwrap();
    let mut console = ScriptedConsole::start(l, &options("Ana", Destinations::default()), 120, 40).await.unwrap();
    let listed = |screen: &str| -> Vec<&str> {
        ["acme:h:done", "acme:h:dropped", "acme:h:open"].into_iter().filter(|k| screen.contains(k)).collect()
    };
    console.press("9").await.unwrap();
    let screen = console.screen().unwrap();
    assert_eq!(listed(&screen), ["acme:h:done"], "{screen}");
    assert!(tabs(&screen).contains("[9 completed 1]"), "{screen}");
    console.press("h").await.unwrap();
    assert_eq!(listed(&console.screen().unwrap()), ["acme:h:dropped"]);
    console.press("h").await.unwrap();
    let screen = console.screen().unwrap();
    assert_eq!(listed(&screen), ["acme:h:done", "acme:h:dropped", "acme:h:open"], "{screen}");
    assert!(tabs(&screen).contains("[9 all 3]"), "{screen}");
    // 9 goes back to the history pane chosen last.
    for line in ["1", "9"] {
        console.press(line).await.unwrap();
    }
    assert!(tabs(&console.screen().unwrap()).contains("[9 all 3]"));
    // y copies the selected key, Y its destination id.
    for line in ["/", "acme:h:done", "<Enter>", "y", "Y"] {
        console.press(line).await.unwrap();
    }
    assert_eq!(console.copied(), ["acme:h:done", "R-77"]);
    assert!(console.screen().unwrap().contains("copied destination id R-77 to the clipboard"));
    for line in ["/", "<Backspace>".repeat(20).as_str(), "acme:h:open", "<Enter>", "Y"] {
        console.press(line).await.unwrap();
    }
    assert!(console.screen().unwrap().contains("acme:h:open has no destination id yet: nothing copied"));
    assert_eq!(console.copied().len(), 2);
}

async fn sorting_by_age_pages_both_ways_and_keeps_the_selection<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    for n in 0..40 {
        l.submit(&raw(&format!("acme:s:{n:02}"), "{}")).await.unwrap();
    }
    let mut console = ScriptedConsole::start(l, &options("Ana", Destinations::default()), 80, 24).await.unwrap();
    let selected = |console: &ScriptedConsole<S>| console.model().selected_action().unwrap().key.to_string();
    console.press("1").await.unwrap();
    assert_eq!(selected(&console), "acme:s:39", "newest first");
    console.press("s").await.unwrap();
    assert_eq!(selected(&console), "acme:s:39", "the selection stays on its key");
    let screen = console.screen().unwrap();
    assert!(screen.contains("pending — oldest first"), "{screen}");
    let expectations = [("g", "acme:s:00"), ("<PageDown>", "acme:s:16"), ("j", "acme:s:17"), ("G", "acme:s:39")];
    for (key, expected) in expectations {
        console.press(key).await.unwrap();
        assert_eq!(selected(&console), expected, "{key}\n{}", console.screen().unwrap());
    }
    let screen = console.screen().unwrap();
    assert!(screen.contains("acme:s:38") && !screen.contains("acme:s:20"), "the last page, in order:\n{screen}");
    for (key, expected) in [("<PageUp>", "acme:s:23"), ("k", "acme:s:22"), ("g", "acme:s:00")] {
        console.press(key).await.unwrap();
        assert_eq!(selected(&console), expected, "{key}\n{}", console.screen().unwrap());
    }
    // A refresh keeps the order and the selection.
    console.press("j").await.unwrap();
    console.send(actionledger::console::model::Msg::Tick).await.unwrap();
    assert_eq!(selected(&console), "acme:s:01");
    for (key, expected) in [("s", "acme:s:01"), ("g", "acme:s:39")] {
        console.press(key).await.unwrap();
        assert_eq!(selected(&console), expected, "{key}");
    }
}

async fn cli_bulk_retry_selects_by_filter_with_a_dry_run<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    for key in ["acme:b:1", "acme:b:2", "acme:b:3"] {
        action_in(l, key, State::Unknown, Evidence::default()).await;
    }
    let elsewhere = actionledger::domain::RawSubmission { destination: Some("erp".into()), ..raw("acme:e:1", "{}") };
    l.submit(&elsewhere).await.unwrap();
    let claim = l.claim("worker-1", LEASE, 1).await.unwrap().pop().unwrap();
    let attempt = l.start_attempt(&claim).await.unwrap();
    let unknown = Report { outcome: Outcome::Unknown, error: None, evidence: Evidence::default() };
    l.record_result(&claim, attempt, &unknown).await.unwrap();
    // A new payload proposed for acme:b:2: a retry would send the old one, so it is refused.
    l.submit(&raw("acme:b:2", r#"{"qty":2}"#)).await.unwrap();
    let url = db.url.clone();
    // Their requests may have written and no destination is configured to recognise a repeat:
    // without the person's check, each is refused (rule 6), naming the flag.
    let unchecked = ["--state", "unknown", "--destination", "crm", "--owner", "Ana", "--reason", "CRM back up"];
    let blind = tokio::task::spawn_blocking({
        let url = url.clone();
        move || support::run_cli(&url, &[&["retry"][..], &unchecked, &["--dry-run"]].concat())
    })
    .await
    .unwrap();
    let out = String::from_utf8_lossy(&blind.stdout).into_owned();
    assert_eq!(blind.status.code(), Some(3), "{out}");
    assert!(out.contains("retry: 3 selected, 0 would change, 3 refused"), "{out}");
    assert!(out.contains("--confirm-not-written"), "{out}");
    let selection = [&unchecked[..], &["--confirm-not-written"]].concat();
    let dry = tokio::task::spawn_blocking({
        let url = url.clone();
        let selection = selection.clone();
        move || support::run_cli(&url, &[&["retry"][..], &selection, &["--dry-run"]].concat())
    })
    .await
    .unwrap();
    let out = String::from_utf8_lossy(&dry.stdout).into_owned();
    assert_eq!(dry.status.code(), Some(3), "a refusal in the dry run exits 3:\n{out}");
    assert!(out.contains("would retry: acme:b:1 unknown -> pending"), "{out}");
    assert!(out.contains("would retry: acme:b:3 unknown -> pending"), "{out}");
    assert!(out.contains("refused: acme:b:2:"), "{out}");
    assert!(!out.contains("acme:e:1"), "another destination is not selected:\n{out}");
    assert!(out.contains("retry: 3 selected, 2 would change, 1 refused; nothing was changed (--dry-run)"), "{out}");
    for key in ["acme:b:1", "acme:b:2", "acme:b:3"] {
        assert_eq!(record(l, key).await.action.state, State::Unknown, "the dry run changed nothing");
    }
    // Too recent for --older-than 1h: nothing selected.
    let old = tokio::task::spawn_blocking({
        let url = url.clone();
        let selection = selection.clone();
        move || support::run_cli(&url, &[&["retry"][..], &selection, &["--older-than", "1h"]].concat())
    })
    .await
    .unwrap();
    assert!(String::from_utf8_lossy(&old.stdout).contains("retry: 0 selected, 0 done, 0 refused"));
    let real = tokio::task::spawn_blocking({
        let url = url.clone();
        let selection = selection.clone();
        move || support::run_cli(&url, &[&["retry"][..], &selection, &["--json"]].concat())
    })
    .await
    .unwrap();
    assert_eq!(real.status.code(), Some(3));
    let answer: serde_json::Value = serde_json::from_slice(&real.stdout).unwrap();
    assert_eq!(answer["done"].as_array().unwrap().len(), 2, "{answer}");
    assert_eq!(answer["refused"][0]["key"], "acme:b:2", "{answer}");
    for (key, expected) in [("acme:b:1", State::Pending), ("acme:b:2", State::Unknown), ("acme:b:3", State::Pending)] {
        let detail = record(l, key).await;
        assert_eq!(detail.action.state, expected, "{key}");
        if expected == State::Pending {
            let last = detail.audit.last().unwrap();
            assert_eq!((last.event, last.actor.as_str()), (Event::Retry, "Ana"));
            let reason = last.reason.as_deref().unwrap_or_default();
            assert!(
                reason.starts_with("CRM back up; ") && reason.ends_with("holds no record of this action"),
                "{reason}"
            );
        }
    }
    assert_eq!(record(l, "acme:e:1").await.action.state, State::Unknown);
    // A command decided one action at a time refuses a selection, before touching anything.
    let approve = tokio::task::spawn_blocking(move || {
        support::run_cli(&url, &["approve", "--state", "conflict", "--owner", "Ana", "--reason", "all of them"])
    })
    .await
    .unwrap();
    assert_eq!(approve.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&approve.stderr).contains("approve takes one action key"));
}

/// Whole screens at 80x24 and 120x40: the takeover dialog and the offered destination id.
#[tokio::test]
async fn screens() {
    let db = support::sqlite().await;
    let l = &db.ledger;
    let conflict = Evidence { status: Some(409), destination_id: None, body: Some(r#"{"id": "R-000042"}"#.to_owned()) };
    action_in(l, "acme:order:ORD-2001:create-task", State::Unknown, conflict).await;
    l.submit(&raw("acme:order:ORD-2002:create-task", r#"{"qty":1}"#)).await.unwrap();
    let claim = l.claim("worker-1", LEASE, 1).await.unwrap().pop().unwrap();
    l.start_attempt(&claim).await.unwrap();
    l.store().clock().advance(LEASE * 2);
    let nowhere = NOWHERE.parse().unwrap();
    let scenes: [(&str, &[&str]); 6] = [
        ("help_end", &["?", "G"]),
        ("offered_destination_id", &["3", "c"]),
        ("takeover_outcome", &["2", "t"]),
        ("lookup_not_offered", &["3", "l"]),
        ("marked", &["3", "<Space>"]),
        ("bulk_takeover", &["2", "*", "t", "lease expired hours ago"]),
    ];
    for (width, height) in [(80, 24), (120, 40)] {
        for (name, keys) in scenes {
            let mut console =
                ScriptedConsole::start(l, &options("ana", crm_at(nowhere, false)), width, height).await.unwrap();
            for line in keys {
                console.press(line).await.unwrap();
            }
            insta::assert_snapshot!(
                format!("{name}_{width}x{height}"),
                support::mask_times(&console.screen().unwrap())
            );
        }
    }
}

/// Each run of coloured text on a screen, row by row: what a palette changes.
fn colour_runs(buffer: &ratatui::buffer::Buffer) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for y in 0..buffer.area.height {
        let mut runs: Vec<(ratatui::style::Color, String)> = Vec::new();
        for x in 0..buffer.area.width {
            let cell = &buffer[(x, y)];
            if cell.fg == ratatui::style::Color::Reset {
                continue;
            }
            match runs.last_mut() {
                Some((fg, text)) if *fg == cell.fg => text.push_str(cell.symbol()),
                _ => runs.push((cell.fg, cell.symbol().to_owned())),
            }
        }
        for (fg, text) in runs {
            let _ = writeln!(out, "{y:>2} {fg:?}: {}", support::mask_times(text.trim()));
        }
    }
    out
}

/// The same screen under each palette: 256 colours, and the 16 of `TERM=xterm`, `screen` or
/// `linux`, where every colour is one of the basic eight.
#[tokio::test]
async fn palettes() {
    use actionledger::console::view::{Palette, Theme};
    let db = support::sqlite().await;
    let l = &db.ledger;
    action_in(l, "acme:order:ORD-3001:create-task", State::Unknown, Evidence::default()).await;
    l.submit(&raw("acme:order:ORD-3002:create-task", r#"{"qty":1}"#)).await.unwrap();
    l.claim("worker-1", LEASE, 1).await.unwrap();
    l.store().clock().advance(LEASE * 2);
    let mut console = ScriptedConsole::start(l, &options("ana", Destinations::default()), 80, 24).await.unwrap();
    console.press("3").await.unwrap();
    for (name, term) in [("256", "xterm-256color"), ("16", "xterm"), ("16", "screen"), ("16", "linux")] {
        let buffer = console.render(Theme::colored(Palette::for_terminal(Some(term), None))).unwrap();
        insta::assert_snapshot!(format!("palette_{name}_80x24"), colour_runs(&buffer));
    }
}

/// The screen's words in order, box borders left out: a wrapped sentence reads whole.
fn joined(screen: &str) -> String {
    screen.replace(['│', '─'], " ").split_whitespace().collect::<Vec<_>>().join(" ")
}

async fn long_keys_are_told_apart_and_stale_claims_say_whether_a_repeat_is_safe<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let stem = "acme-corporation-emea:salesforce-opportunity:OPP-0012345";
    let (create, confirm) = (format!("{stem}:create-task"), format!("{stem}:send-confirmation"));
    for key in [&create, &confirm] {
        l.submit(&raw(key, r#"{"qty":1}"#)).await.unwrap();
    }
    let mut console = ScriptedConsole::start(l, &options("Ana", Destinations::default()), 80, 24).await.unwrap();
    let screen = console.screen().unwrap();
    let rows: Vec<&str> = screen.lines().filter(|line| line.contains("acme-corp")).collect();
    assert_eq!(rows.len(), 2, "{screen}");
    assert_ne!(rows[0].split_whitespace().nth(1), rows[1].split_whitespace().nth(1), "told apart:\n{screen}");
    for row in &rows {
        assert!(row.contains('…'), "a cut is marked: {row}");
        assert!(row.contains(":create-task") || row.contains("confirmation"), "the end is kept: {row}");
    }
    // The detail's title names the whole key, wrapped rather than cut.
    console.press("<Enter>").await.unwrap();
    let detail = joined(&console.screen().unwrap());
    assert!(detail.contains(&confirm) || detail.contains(&create), "the full key:\n{detail}");
    console.press("<Esc>").await.unwrap();

    // Two stale claims: which one a takeover may send again is in the pane, by the destination's
    // declaration, without opening either.
    for key in [&create, &confirm] {
        let claim = l.claim("worker-1", LEASE, 1).await.unwrap().pop().unwrap();
        l.start_attempt(&claim).await.unwrap();
        assert_eq!(claim.key().as_str(), key.as_str());
    }
    l.store().clock().advance(LEASE * 2);
    let nowhere = NOWHERE.parse().unwrap();
    for (destinations, says) in
        [(crm_at(nowhere, true), "protected"), (crm_at(nowhere, false), "UNSAFE"), (Destinations::default(), "unknown")]
    {
        let mut console = ScriptedConsole::start(l, &options("Ana", destinations), 80, 24).await.unwrap();
        console.press("2").await.unwrap();
        let screen = console.screen().unwrap();
        let rows: Vec<&str> = screen.lines().filter(|line| line.contains("acme-corp")).collect();
        assert_eq!(rows.len(), 2, "{screen}");
        for row in rows {
            let words: Vec<&str> = row.split_whitespace().collect();
            assert!(words.contains(&"crm") && words.contains(&says), "{says}: {row}");
            assert!(row.contains("STALE"), "{row}");
        }
    }
}
