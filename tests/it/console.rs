//! The review console against a real ledger on both stores: the keys a person presses, then what
//! the screen shows and what the ledger recorded. Plus whole-screen snapshots and hostile text.

use crate::support::{self, TestDb, order as raw};
use actionledger::Ledger;
use actionledger::console::{ConsoleOptions, ScriptedConsole};
use actionledger::destination::Destinations;
use actionledger::domain::{ActionKey, Event, Evidence, ManualCommand, Person, RawSubmission, Reason, State};
use actionledger::ledger::{ManualRequest, Outcome, Report};
use actionledger::store::Store;
use std::collections::BTreeMap;
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(30);

conformance!(
    every_command_from_the_keyboard,
    two_consoles_on_one_action_exactly_one_wins,
    look_up_now_settles_an_unknown_action,
    filter_and_navigation_over_many_actions,
    approving_a_new_version_of_a_completed_action_from_the_keyboard,
    an_update_action_says_whether_it_may_overwrite_a_change_at_the_destination,
    acknowledging_and_confirming_the_old_worker_from_the_keyboard,
    every_section_of_a_detail_is_reachable_at_80x24,
    messages_are_never_cut_at_80_columns,
    the_selection_is_a_key_through_resize_refresh_and_departures,
    the_list_fills_the_pane_around_the_selection_when_an_action_leaves,
    every_count_follows_the_filter_as_it_is_typed,
    a_lookup_that_cannot_reach_its_destination_failed_and_was_not_refused,
);

fn options(owner: &str) -> ConsoleOptions {
    ConsoleOptions {
        owner: Person::parse(owner).unwrap(),
        ledger_label: "test-ledger".to_owned(),
        destinations: Destinations::default(),
        refresh: Duration::from_hours(1),
        hint: None,
        filter: None,
    }
}

/// Puts a fresh action into `state` through the library: the way workers and sources would.
async fn action_in<S: Store>(ledger: &Ledger<S>, key: &str, state: State) {
    ledger.submit(&raw(key, r#"{"qty":1}"#)).await.unwrap();
    let finish = |outcome| async move {
        let claim = ledger.claim("worker-1", LEASE, 1).await.unwrap().pop().unwrap();
        let attempt = ledger.start_attempt(&claim).await.unwrap();
        let report = Report { outcome, error: Some("HTTP 504".into()), evidence: Evidence::default() };
        ledger.record_result(&claim, attempt, &report).await.unwrap();
    };
    match state {
        State::Pending => {}
        State::Failed => finish(Outcome::Failed { permanent: true }).await,
        State::Unknown => finish(Outcome::Unknown).await,
        State::Conflict => {
            ledger.submit(&raw(key, r#"{"qty":2}"#)).await.unwrap();
        }
        State::InProgress => {
            let claim = ledger.claim("worker-1", LEASE, 1).await.unwrap().pop().unwrap();
            ledger.start_attempt(&claim).await.unwrap();
        }
        other => panic!("no setup for {other}"),
    }
}

/// An action completed by worker B after it took over from worker A, whose late result (naming
/// the same record) then arrived: a notice on a completed action.
async fn late_on_completed<S: Store>(ledger: &Ledger<S>, key: &str) {
    ledger.submit(&raw(key, r#"{"qty":1}"#)).await.unwrap();
    let a = ledger.claim("worker-a", LEASE, 1).await.unwrap().pop().unwrap();
    let a_attempt = ledger.start_attempt(&a).await.unwrap();
    ledger.store().clock().advance(LEASE * 2);
    let protected = support::protected_by_lookup(ledger, &["crm"]);
    let recovered = protected.recover_expired(a.key(), 1, "worker-b", LEASE).await.unwrap();
    let actionledger::ledger::Recovery::Claimed(b) = recovered else { panic!("protected: taken over") };
    let done = |id: &str| Report {
        outcome: Outcome::Completed { destination_id: id.to_owned() },
        error: None,
        evidence: Evidence { status: Some(201), destination_id: Some(id.to_owned()), body: None },
    };
    let b_attempt = ledger.start_attempt(&b).await.unwrap();
    ledger.record_result(&b, b_attempt, &done("CRM-5")).await.unwrap();
    ledger.record_result(&a, a_attempt, &done("CRM-5")).await.unwrap();
}

/// An action held because its expired claim, after a send, could not be taken over safely.
async fn held_unsafely<S: Store>(ledger: &Ledger<S>, key: &str) {
    ledger.submit(&raw(key, r#"{"qty":1}"#)).await.unwrap();
    let claim = ledger.claim("worker-1", LEASE, 1).await.unwrap().pop().unwrap();
    ledger.start_attempt(&claim).await.unwrap();
    ledger.store().clock().advance(LEASE * 2);
    let recovered = ledger.recover_expired(claim.key(), 1, "worker-2", LEASE).await.unwrap();
    assert!(matches!(recovered, actionledger::ledger::Recovery::Held(_)), "{recovered:?}");
}

async fn acknowledging_and_confirming_the_old_worker_from_the_keyboard<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    late_on_completed(l, "acme:late:1").await;
    held_unsafely(l, "acme:unsafe:1").await;
    let mut console = ScriptedConsole::start(l, &options("Ana Lima"), 100, 30).await.unwrap();

    // The late pane lists the completed action, marked; e acknowledges its late result.
    let screen = act(&mut console, "8", "acme:late:1", &[]).await;
    assert!(screen.contains("[1 late] acme:late:1"), "{screen}");
    let screen = act(&mut console, "8", "acme:late:1", &["<Enter>"]).await;
    assert!(screen.contains("late results (1)"), "the detail lists it:\n{screen}");
    let screen = act(&mut console, "8", "acme:late:1", &["e", "same record as B's", "<Enter>", "y"]).await;
    let detail = record(l, "acme:late:1").await;
    assert_eq!((detail.action.state, detail.action.late_results), (State::Completed, 0), "{screen}");
    let last = detail.audit.last().unwrap();
    assert_eq!((last.event, last.actor.as_str()), (Event::LateResultsAcknowledged, "Ana Lima"));
    assert!(screen.contains("acknowledge acme:late:1: stays completed"), "{screen}");
    let screen = act(&mut console, "8", "acme:late:1", &["<Esc>", "e"]).await;
    assert!(!screen.contains("[1 late]"), "no longer listed:\n{screen}");

    // Retry of an unsafe hold: the dialog asks whether the old worker stopped, and only the
    // typed answer lets it run.
    let screen = act(&mut console, "6", "acme:unsafe:1", &["r", "CRM has no record", "<Enter>"]).await;
    assert!(screen.contains("Old worker stopped?"), "{screen}");
    console.press("<Esc>").await.unwrap();
    let screen =
        act(&mut console, "6", "acme:unsafe:1", &["r", "CRM has no record", "<Enter>", "yes", "<Enter>"]).await;
    assert!(screen.contains("type \"stopped\""), "a wrong answer is not a confirmation:\n{screen}");
    assert_eq!(record(l, "acme:unsafe:1").await.action.state, State::Held);
    for line in ["<Backspace>", "<Backspace>", "<Backspace>", "stopped", "<Enter>"] {
        console.press(line).await.unwrap();
    }
    // The request sent under the expired claim may have written, and the console knows no
    // destination that could recognise a repeat: it asks for the person's check too (rule 6).
    let screen = console.screen().unwrap();
    assert!(screen.contains("No record at the destination? Check it, then type \"not written\"."), "{screen}");
    for line in ["y", "<Enter>"] {
        console.press(line).await.unwrap();
    }
    let screen = console.screen().unwrap();
    assert!(screen.contains("type \"not written\" once"), "a wrong answer is not a confirmation:\n{screen}");
    assert_eq!(record(l, "acme:unsafe:1").await.action.state, State::Held);
    for line in ["<Backspace>", "not written", "<Enter>", "y"] {
        console.press(line).await.unwrap();
    }
    let detail = record(l, "acme:unsafe:1").await;
    assert_eq!((detail.action.state, detail.action.old_worker_may_act), (State::Pending, false));
    let reason = detail.audit.last().unwrap().reason.clone().unwrap();
    assert!(reason.contains("the person confirmed that the old worker can no longer act"), "{reason}");
    assert!(reason.ends_with("the person confirmed that it holds no record of this action"), "{reason}");
}

async fn record<S: Store>(ledger: &Ledger<S>, key: &str) -> actionledger::ledger::ActionDetail {
    ledger.detail(&ActionKey::parse(key).unwrap()).await.unwrap()
}

/// Selects `key` in `pane` by filtering on it, then presses the script.
async fn act<S: Store>(console: &mut ScriptedConsole<S>, pane: &str, key: &str, script: &[&str]) -> String {
    for line in [pane, "/", key, "<Enter>"].into_iter().chain(script.iter().copied()) {
        console.press(line).await.unwrap();
    }
    console.screen().unwrap()
}

/// A pane key, an action key, its state before, the keys pressed, its state after, the event.
type Case = (&'static str, &'static str, State, &'static [&'static str], State, Event);

async fn every_command_from_the_keyboard<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    // (pane key, action key, setup state, keys pressed, expected state, expected event)
    let cases: [Case; 8] = [
        (
            "5",
            "acme:c1:retry",
            State::Failed,
            &["r", "customer fixed the address", "<Enter>", "y"],
            State::Pending,
            Event::Retry,
        ),
        (
            "3",
            "acme:c2:resolve",
            State::Unknown,
            &["c", "CRM-881", "<Enter>", "found it in the CRM", "<Enter>", "y"],
            State::Completed,
            Event::ResolvedCompleted,
        ),
        (
            "3",
            "acme:c3:notwritten",
            State::Unknown,
            &["n", "CRM has no such record", "<Enter>", "y"],
            State::Pending,
            Event::ResolvedNotWritten,
        ),
        (
            "1",
            "acme:c4:cancel",
            State::Pending,
            &["x", "order withdrawn", "<Enter>", "y"],
            State::Cancelled,
            Event::Cancelled,
        ),
        (
            "4",
            "acme:c5:approve",
            State::Conflict,
            &["a", "quantity change confirmed", "<Enter>", "y"],
            State::Pending,
            Event::Approved,
        ),
        ("4", "acme:c6:reject", State::Conflict, &["d", "stale form", "<Enter>", "y"], State::Pending, Event::Rejected),
        ("5", "acme:c7:assign", State::Failed, &["o"], State::Failed, Event::Assigned),
        (
            "2",
            "acme:c8:takeover",
            State::InProgress,
            &["t", "worker host died", "<Enter>", "y"],
            State::Held,
            Event::TakenOver,
        ),
    ];
    // Claims take the oldest pending action, so pending ones are set up last.
    let (waiting, claimed): (Vec<_>, Vec<_>) = cases.iter().partition(|case| case.2 == State::Pending);
    for (_, key, state, _, _, _) in claimed.into_iter().chain(waiting) {
        action_in(l, key, state).await;
    }
    l.store().clock().advance(LEASE * 2);
    let mut console = ScriptedConsole::start(l, &options("Ana Lima"), 100, 30).await.unwrap();
    for (pane, key, _, keys, expected, event) in cases {
        let before = record(l, key).await.action.revision;
        let screen = act(&mut console, pane, key, keys).await;
        let detail = record(l, key).await;
        assert_eq!(detail.action.state, expected, "{key}\n{screen}");
        assert_eq!(detail.action.revision, before + 1, "{key}: one change, version checked");
        assert_eq!(detail.action.key.as_str(), key, "the original key is kept");
        let last = detail.audit.last().unwrap();
        assert_eq!((last.event, last.actor.as_str()), (event, "Ana Lima"), "{key}");
        assert!(screen.contains("by Ana Lima"), "the status line says what happened:\n{screen}");
        if event == Event::ResolvedCompleted {
            assert_eq!(detail.action.destination_id.as_deref(), Some("CRM-881"));
        }
        if event == Event::Assigned {
            assert_eq!(detail.action.assignee.as_deref(), Some("Ana Lima"));
        }
    }
    // A command the state does not allow shows why, and changes nothing.
    action_in(l, "acme:c9:pending", State::Pending).await;
    let screen = act(&mut console, "1", "acme:c9:pending", &["r"]).await;
    assert!(screen.contains("cannot retry acme:c9:pending: it is pending"), "{screen}");
    assert_eq!(record(l, "acme:c9:pending").await.audit.len(), 1);
}

async fn two_consoles_on_one_action_exactly_one_wins<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    action_in(l, "acme:contested", State::Unknown).await;
    let mut ana = ScriptedConsole::start(l, &options("Ana"), 100, 30).await.unwrap();
    let mut bo = ScriptedConsole::start(l, &options("Bo"), 100, 30).await.unwrap();
    // Both see the action and prepare a command on what they saw.
    act(&mut ana, "3", "acme:contested", &["x", "duplicate order", "<Enter>", "not written", "<Enter>"]).await;
    act(&mut bo, "3", "acme:contested", &["r", "looks retryable", "<Enter>", "not written", "<Enter>"]).await;
    ana.press("y").await.unwrap();
    bo.press("y").await.unwrap();
    let bo_screen = bo.screen().unwrap();
    assert!(bo_screen.contains("refused: cannot retry acme:contested: it changed since you read it"), "{bo_screen}");
    assert!(joined(&bo_screen).contains("last changed by Ana: cancelled at"), "who won is named:\n{bo_screen}");
    let detail = record(l, "acme:contested").await;
    assert_eq!(detail.action.state, State::Cancelled, "Ana's command won");
    let people: Vec<&str> = detail
        .audit
        .iter()
        .filter(|e| e.actor_kind == actionledger::domain::ActorKind::Person)
        .map(|e| e.actor.as_str())
        .collect();
    assert_eq!(people, ["Ana"], "exactly one command was applied");
}

async fn look_up_now_settles_an_unknown_action<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    // A CRM that takes no idempotency key: only its lookup tells whether it has the record.
    let no_idempotency =
        actionledger::sim_crm::Options { retention: None, ..actionledger::sim_crm::Options::default() };
    let crm = actionledger::sim_crm::SimCrm::start(listener, no_idempotency).unwrap();
    let config = actionledger::config::Config::parse(&crm.destination_config("crm")).unwrap();
    let destination = actionledger::destination::Destination::new("crm", config.destinations["crm"].clone()).unwrap();
    action_in(l, "acme:lost", State::Unknown).await;
    // The CRM did write it: the response was what got lost.
    let action = record(l, "acme:lost").await.action;
    destination.send(&action, None).await.unwrap();
    let mut with_config = options("Ana");
    with_config.destinations = Destinations::new(BTreeMap::from([("crm".to_owned(), destination)]), None);
    let mut console = ScriptedConsole::start(l, &with_config, 100, 30).await.unwrap();
    // With the configuration, a destination without an idempotency key is said to have none,
    // not "retention unknown".
    let evidence = act(&mut console, "3", "acme:lost", &["<Enter>", "G"]).await;
    assert!(evidence.contains("(no idempotency key at crm: no retention window)"), "{evidence}");
    assert!(!evidence.contains("retention unknown"), "{evidence}");
    let screen = act(&mut console, "3", "acme:lost", &["<Enter>", "l", "checking the CRM", "<Enter>", "y"]).await;
    assert!(screen.contains("looked up acme:lost: found, record R-000001; now completed"), "{screen}");
    let detail = record(l, "acme:lost").await;
    assert_eq!((detail.action.state, detail.action.destination_id.as_deref()), (State::Completed, Some("R-000001")));
    assert_eq!(detail.lookups.len(), 1);
    assert_eq!(detail.audit.last().unwrap().actor, "Ana");
}

/// The same failure, the same kind and exit code on both front ends: a lookup at a destination
/// that is not listening is an error on the command line (exit 1), and in a scripted console it
/// is shown as failed, never as a refusal, and the script exits 1 too.
async fn a_lookup_that_cannot_reach_its_destination_failed_and_was_not_refused<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    action_in(l, "acme:unreachable", State::Unknown).await;
    // An address nothing listens on: bound, then let go.
    let nowhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("actionledger.toml");
    let options = actionledger::sim_crm::Options::default();
    std::fs::write(&config, actionledger::sim_crm::destination_config("crm", nowhere, &options)).unwrap();
    let config = config.to_str().unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_actionledger"))
            .current_dir(dir.path())
            .env_remove("ACTIONLEDGER_DB")
            .env_remove("DATABASE_URL")
            .env("NO_COLOR", "1")
            .args(["--db", &db.url])
            .args(args)
            .output()
            .expect("run actionledger")
    };
    let said = |output: &std::process::Output| {
        format!(
            "exit {:?}\nstdout: {}\nstderr: {}",
            output.status.code(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    };
    let reason = ["--owner", "ana", "--reason", "checking the CRM", "--config", config];
    let cli = run(&[&["lookup", "acme:unreachable"][..], &reason].concat());
    assert_eq!(cli.status.code(), Some(1), "the command line: an error\n{}", said(&cli));

    let script = dir.path().join("lookup.keys");
    let keys = ["3", "/", "acme:unreachable", "<Enter>", "<Enter>", "l", "checking the CRM", "<Enter>", "y", ""];
    std::fs::write(&script, keys.join("\n")).unwrap();
    let script = script.to_str().unwrap();
    let console = run(&["review", "--owner", "ana", "--config", config, "--script", script, "--size", "120x40"]);
    let what = said(&console);
    assert_eq!(console.status.code(), Some(1), "the console: the same error, the same exit code\n{what}");
    let (screen, stderr) = (String::from_utf8_lossy(&console.stdout), String::from_utf8_lossy(&console.stderr));
    assert!(stderr.contains("script line 9 (y): failed: lookup failed"), "{what}");
    assert!(screen.contains("failed: lookup failed"), "the status line says it failed\n{what}");
    assert!(
        !stderr.contains("refused:") && !screen.contains("refused:"),
        "a failure is never called a refusal\n{what}"
    );
    assert_eq!(record(l, "acme:unreachable").await.action.state, State::Unknown, "nothing changed");
}

async fn filter_and_navigation_over_many_actions<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    for n in 0..60 {
        l.submit(&raw(&format!("acme:nav:{n:03}"), "{}")).await.unwrap();
    }
    let mut console = ScriptedConsole::start(l, &options("Ana"), 80, 24).await.unwrap();
    let first = console.screen().unwrap();
    assert!(first.contains("> acme:nav:059"), "newest first:\n{first}");
    assert!(!first.contains("acme:nav:040"), "only one screen of rows is fetched:\n{first}");
    console.press("G").await.unwrap();
    let last = console.screen().unwrap();
    assert!(last.contains("> acme:nav:000"), "G goes to the oldest:\n{last}");
    console.press("k").await.unwrap();
    assert_eq!(console.model().selected_action().unwrap().key.as_str(), "acme:nav:001");
    console.press("g").await.unwrap();
    for _ in 0..20 {
        console.press("j").await.unwrap();
    }
    assert_eq!(console.model().selected_action().unwrap().key.as_str(), "acme:nav:039", "moved past the first window");
    console.press("<PageUp>").await.unwrap();
    console.press("<PageUp>").await.unwrap();
    assert_eq!(console.model().selected_action().unwrap().key.as_str(), "acme:nav:059");
    for line in ["/", "nav:04", "<Enter>"] {
        console.press(line).await.unwrap();
    }
    let filtered = console.screen().unwrap();
    assert!(
        filtered.contains("acme:nav:049") && filtered.contains("acme:nav:040") && !filtered.contains("acme:nav:050"),
        "{filtered}"
    );
    // A refresh after the ledger changed keeps the selection on the same key.
    console.press("j").await.unwrap();
    l.submit(&raw("acme:nav:045b", "{}")).await.unwrap();
    console.send(actionledger::console::model::Msg::Tick).await.unwrap();
    assert_eq!(console.model().selected_action().unwrap().key.as_str(), "acme:nav:048");
}

/// The screen's text with its lines joined, as a wrapped message reads.
fn joined(screen: &str) -> String {
    screen.split_whitespace().collect::<Vec<_>>().join(" ")
}

async fn every_section_of_a_detail_is_reachable_at_80x24<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    late_on_completed(l, "acme:order:ORD-1047:create-task").await;
    let mut console = ScriptedConsole::start(l, &options("ana"), 80, 24).await.unwrap();
    for line in ["8", "<Enter>"] {
        console.press(line).await.unwrap();
    }
    let top = console.screen().unwrap();
    assert!(!top.contains("audit trail ("), "the detail is longer than the screen:\n{top}");
    let oldest = "submitted";
    // End shows the end of the last section: the oldest audit entry.
    console.press("G").await.unwrap();
    let end = console.screen().unwrap();
    assert!(end.contains("audit trail (") && end.contains(oldest), "{end}");
    // Up moves at once from there, and Down, pressed as often as it takes, reaches every section.
    console.press("k").await.unwrap();
    assert_ne!(console.screen().unwrap(), end, "Up after End scrolls at once");
    console.press("g").await.unwrap();
    let mut seen = console.screen().unwrap();
    for _ in 0..80 {
        console.press("j").await.unwrap();
        seen.push_str(&console.screen().unwrap());
    }
    let sections = ["late results (1)", "deliveries (", "expected payload", "attempts (", "destination evidence"];
    for section in sections.into_iter().chain(["audit trail (", oldest]) {
        assert!(seen.contains(section), "{section:?} never reached by Down");
    }
    assert_eq!(console.screen().unwrap(), end, "Down stops at the same end as End");
    // The footer keeps the way back and the way out.
    assert!(end.lines().last().unwrap().contains("Esc back") && end.contains("q quit"), "{end}");
}

async fn messages_are_never_cut_at_80_columns<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    // A conflict shows each changed field's approved and proposed values in full.
    let street = "Flat 4, 221 Baker Street, Marylebone, London NW1 6XE, United Kingdom (ring twice)";
    let approved = serde_json::json!({ "address": street, "qty": 1 }).to_string();
    let proposed = serde_json::json!({ "address": street.replace("Flat 4", "Flat 5"), "qty": 1 }).to_string();
    l.submit(&raw("acme:conflict:long", &approved)).await.unwrap();
    l.submit(&raw("acme:conflict:long", &proposed)).await.unwrap();
    let mut console = ScriptedConsole::start(l, &options("ana"), 80, 24).await.unwrap();
    let screen = joined(&act(&mut console, "4", "acme:conflict:long", &["<Enter>"]).await);
    assert!(screen.contains(&format!("/address approved \"{street}\"")), "{screen}");
    assert!(screen.contains(&format!("proposed \"{}\"", street.replace("Flat 4", "Flat 5"))), "{screen}");
    assert!(screen.contains("1 field(s) unchanged"), "{screen}");
    // v shows every value in full; v or Esc goes back.
    console.press("v").await.unwrap();
    let values = joined(&console.screen().unwrap());
    assert!(values.contains("full values") && values.contains("proposed payload ("), "{values}");
    assert!(values.contains(&format!("\"address\": \"{}\"", street.replace("Flat 4", "Flat 5"))), "{values}");
    console.press("<Esc>").await.unwrap();
    assert!(joined(&console.screen().unwrap()).contains("what the proposal changes"), "back to the detail");

    // A refused submission's reason is shown in full in its own detail.
    let refusal = l.submit(&raw("acme:contact:jane@example.com", "{}")).await.unwrap_err().to_string();
    let message = l.list_refused(None, 1).await.unwrap().pop().unwrap().message;
    assert!(message.len() > 80, "a message longer than a line: {message} ({refusal})");
    let mut console = ScriptedConsole::start(l, &options("ana"), 80, 24).await.unwrap();
    for line in ["7", "<Enter>"] {
        console.press(line).await.unwrap();
    }
    let screen = console.screen().unwrap();
    assert!(joined(&screen).contains(&joined(&message)), "{message}\n{screen}");
    // A refusal in the status line wraps instead of being cut.
    let key = "acme:order:ORD-2041:create-follow-up-task-for-the-regional-sales-team";
    action_in(l, key, State::Unknown).await;
    let mut bo = ScriptedConsole::start(l, &options("Bo"), 80, 24).await.unwrap();
    act(&mut bo, "3", key, &["r", "looks retryable", "<Enter>", "not written", "<Enter>"]).await;
    let cancel = ManualRequest {
        key: ActionKey::parse(key).unwrap(),
        person: Person::parse("Ana").unwrap(),
        reason: Reason::parse("duplicate").unwrap(),
        expect_version: None,
        command: ManualCommand::Cancel,
        old_worker_stopped: false,
        confirmed_not_written: true,
    };
    l.manual(&cancel).await.unwrap();
    bo.press("y").await.unwrap();
    let screen = bo.screen().unwrap();
    let said = format!("refused: cannot retry {key}: it changed since you read it");
    assert!(joined(&screen).contains(&said), "{screen}");
    // The way out in the console's own terms, never the command line's.
    let status = console_status(&bo);
    assert!(status.contains("since you read it (you saw version 4, it is now at version 5 and cancelled; last changed by Ana: cancelled at "), "{status}");
    assert!(status.contains("); look at it again as it is now, and decide again"), "{status}");
    assert!(!status.contains("actionledger show") && !status.contains("--"), "{status}");
}

/// The status line's whole text, however much of it the screen's width shows.
fn console_status<S: Store>(console: &ScriptedConsole<S>) -> String {
    console.model().status.as_ref().map(|s| s.text.as_str().to_owned()).unwrap_or_default()
}

fn selected<S: Store>(console: &ScriptedConsole<S>) -> String {
    console.model().selected_action().unwrap().key.to_string()
}

async fn the_selection_is_a_key_through_resize_refresh_and_departures<S: Store>(db: TestDb<S>) {
    use actionledger::console::model::Msg;
    let l = &db.ledger;
    for n in 0..60 {
        l.submit(&raw(&format!("acme:sel:{n:03}"), "{}")).await.unwrap();
    }
    // At 120x40 the oldest, then the terminal shrinks to 40x10 and the console refreshes.
    let mut console = ScriptedConsole::start(l, &options("Ana"), 120, 40).await.unwrap();
    console.press("G").await.unwrap();
    assert_eq!(selected(&console), "acme:sel:000");
    console.send(Msg::Resize(40, 10)).await.unwrap();
    console.send(Msg::Tick).await.unwrap();
    assert_eq!(selected(&console), "acme:sel:000", "a resize and a refresh keep the key");
    console.press("k").await.unwrap();
    console.send(Msg::Resize(120, 40)).await.unwrap();
    assert_eq!(selected(&console), "acme:sel:001", "growing back keeps it too");
    console.send(Msg::Resize(40, 10)).await.unwrap();
    console.send(Msg::Tick).await.unwrap();
    console.press("<Enter>").await.unwrap();
    let detail = console.model().detail.as_ref().unwrap().action.key.to_string();
    assert_eq!(detail, "acme:sel:001", "Enter opens the key that was selected");
    console.press("<Esc>").await.unwrap();

    // New rows above the selection do not move it.
    console.send(Msg::Resize(80, 24)).await.unwrap();
    console.press("g").await.unwrap();
    for _ in 0..10 {
        console.press("j").await.unwrap();
    }
    assert_eq!(selected(&console), "acme:sel:049");
    for n in 60..80 {
        l.submit(&raw(&format!("acme:sel:{n:03}"), "{}")).await.unwrap();
    }
    console.send(Msg::Tick).await.unwrap();
    assert_eq!(selected(&console), "acme:sel:049", "twenty new rows later");

    // A filter that still matches the selected key keeps it.
    for line in ["/", "sel:04", "<Enter>"] {
        console.press(line).await.unwrap();
    }
    assert_eq!(selected(&console), "acme:sel:049");

    // The selected action leaves the pane: the console says so instead of silently moving.
    cancelled_elsewhere(l, "acme:sel:049").await;
    console.send(Msg::Tick).await.unwrap();
    let screen = joined(&console.screen().unwrap());
    assert!(screen.contains("acme:sel:049 left the pending pane"), "{screen}");
    assert!(screen.contains(&format!("the selection is now on {}", selected(&console))), "{screen}");
    assert_eq!(selected(&console), "acme:sel:048", "the next one down, and the console named it");
}

/// Cancels `key` as another reviewer would, outside the console.
async fn cancelled_elsewhere<S: Store>(ledger: &Ledger<S>, key: &str) {
    let cancel = ManualRequest {
        key: ActionKey::parse(key).unwrap(),
        person: Person::parse("Bo").unwrap(),
        reason: Reason::parse("duplicate").unwrap(),
        expect_version: None,
        command: ManualCommand::Cancel,
        old_worker_stopped: false,
        confirmed_not_written: false,
    };
    ledger.manual(&cancel).await.unwrap();
}

/// The keys of the pane's rows on screen, top to bottom.
fn rows_on_screen(screen: &str, prefix: &str) -> Vec<String> {
    screen
        .lines()
        .filter_map(|line| line.strip_prefix("  ").or_else(|| line.strip_prefix("> ")))
        .filter_map(|row| row.split_whitespace().next())
        .filter(|word| word.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

async fn the_list_fills_the_pane_around_the_selection_when_an_action_leaves<S: Store>(db: TestDb<S>) {
    use actionledger::console::model::Msg;
    let l = &db.ledger;
    for n in 0..15 {
        l.submit(&raw(&format!("acme:fill:{n:03}"), "{}")).await.unwrap();
    }
    // 15 rows fit the 16 an 80x24 screen shows; the twelfth from the top is selected, then leaves.
    let mut console = ScriptedConsole::start(l, &options("Ana"), 80, 24).await.unwrap();
    for _ in 0..11 {
        console.press("j").await.unwrap();
    }
    assert_eq!(selected(&console), "acme:fill:003");
    cancelled_elsewhere(l, "acme:fill:003").await;
    console.send(Msg::Tick).await.unwrap();
    let screen = console.screen().unwrap();
    let expected: Vec<String> = (0..15).rev().filter(|n| *n != 3).map(|n| format!("acme:fill:{n:03}")).collect();
    assert_eq!(rows_on_screen(&screen, "acme:fill:"), expected, "every row still in view:\n{screen}");
    assert_eq!(selected(&console), "acme:fill:002", "the row that took its place");
    console.press("k").await.unwrap();
    assert_eq!(selected(&console), "acme:fill:004", "k moves to the row above, not to the top");

    // Deep in a longer pane, not at its newest rows: the screen stays full and in place.
    for n in 15..60 {
        l.submit(&raw(&format!("acme:fill:{n:03}"), "{}")).await.unwrap();
    }
    console.press("g").await.unwrap();
    console.press("<PageDown>").await.unwrap();
    console.press("j").await.unwrap();
    console.press("j").await.unwrap();
    let before = rows_on_screen(&console.screen().unwrap(), "acme:fill:");
    assert!(!console.model().at_newest, "a window below the newest rows");
    let leaving = selected(&console);
    let at = before.iter().position(|k| *k == leaving).unwrap();
    cancelled_elsewhere(l, &leaving).await;
    console.send(Msg::Tick).await.unwrap();
    let after = rows_on_screen(&console.screen().unwrap(), "acme:fill:");
    assert_eq!(after.len(), 16, "a full screen: {after:?}");
    assert_eq!(after[..at], before[..at], "the rows above stay where they were");
    assert_eq!(selected(&console), before[at + 1], "the next one down");
    console.press("k").await.unwrap();
    assert_eq!(selected(&console), before[at - 1], "and k goes to the row above it");

    // The last row of the pane leaves: the one before it is selected, the screen still full.
    console.press("G").await.unwrap();
    let before = rows_on_screen(&console.screen().unwrap(), "acme:fill:");
    assert_eq!(selected(&console), "acme:fill:000");
    cancelled_elsewhere(l, "acme:fill:000").await;
    console.send(Msg::Tick).await.unwrap();
    let after = rows_on_screen(&console.screen().unwrap(), "acme:fill:");
    assert_eq!(after.len(), 16, "a full screen: {after:?}");
    assert_eq!(after[1..], before[..15], "the rows above it, one line down");
    assert_eq!(selected(&console), "acme:fill:001");
    let screen = joined(&console.screen().unwrap());
    assert!(screen.contains("acme:fill:000 left the pending pane; the selection is now on acme:fill:001"), "{screen}");

    // A window that starts less than a screen below the top: k from its first row goes to the
    // row just above, not to the pane's first row.
    console.press("g").await.unwrap();
    for _ in 0..16 {
        console.press("j").await.unwrap();
    }
    let first_of_second_page = selected(&console);
    console.send(Msg::Resize(80, 40)).await.unwrap();
    assert_eq!(selected(&console), first_of_second_page);
    // The scripted terminal keeps its size: the rows the model holds are those a 40-line one shows.
    let keys = |console: &ScriptedConsole<S>| match &console.model().rows {
        actionledger::console::model::Rows::Actions(rows) => rows.iter().map(|a| a.key.to_string()).collect::<Vec<_>>(),
        actionledger::console::model::Rows::Refused(_) => Vec::new(),
    };
    assert_eq!(keys(&console).first(), Some(&first_of_second_page), "the window starts at it");
    console.press("k").await.unwrap();
    let screen = keys(&console);
    let at = screen.iter().position(|k| *k == first_of_second_page).unwrap();
    assert_eq!(selected(&console), screen[at - 1], "the row just above: {screen:?}");
    assert_eq!(screen.len(), 32, "and the screen is full");
}

/// A completed action (record R-1) with a new version proposed.
async fn completed_with_a_new_version<S: Store>(ledger: &Ledger<S>, key: &str) {
    ledger.submit(&raw(key, r#"{"qty":1}"#)).await.unwrap();
    let claim = ledger.claim("worker-1", LEASE, 1).await.unwrap().pop().unwrap();
    let attempt = ledger.start_attempt(&claim).await.unwrap();
    let done = Report {
        outcome: Outcome::Completed { destination_id: "R-1".into() },
        error: None,
        evidence: Evidence::default(),
    };
    ledger.record_result(&claim, attempt, &done).await.unwrap();
    ledger.submit(&raw(key, r#"{"qty":2}"#)).await.unwrap();
}

async fn approving_a_new_version_of_a_completed_action_from_the_keyboard<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let key = "acme:order:ORD-1042:create-task";
    completed_with_a_new_version(l, key).await;
    let mut console = ScriptedConsole::start(l, &options("Ana"), 100, 30).await.unwrap();
    console.press("4").await.unwrap();
    let pane = console.screen().unwrap();
    assert!(pane.contains("* acme:order:ORD-1042"), "listed with the conflicts, marked:\n{pane}");
    let screen = act(&mut console, "4", key, &["<Enter>"]).await;
    assert!(screen.contains("approving records the update action"), "{screen}");
    let dialog = act(&mut console, "4", key, &["a", "the customer changed the quantity", "<Enter>"]).await;
    assert!(dialog.contains("#update-2"), "{dialog}");
    console.press("y").await.unwrap();
    let detail = record(l, key).await;
    assert_eq!(
        (detail.action.state, detail.action.payload_revision),
        (State::Completed, 1),
        "it takes the new payload on once its update completed"
    );
    assert_eq!(detail.audit.last().map(|e| (e.event, e.actor.as_str())), Some((Event::Approved, "Ana")));
    let update = record(l, "acme:order:ORD-1042:create-task#update-2").await;
    assert_eq!((update.action.state, update.action.updates_destination_id.as_deref()), (State::Pending, Some("R-1")));
    assert_eq!(update.audit[0].actor, "Ana");
}

/// The detail of an update action says, from the destinations' configuration, whether its request
/// may overwrite a change made at the destination since the ledger wrote the record.
async fn an_update_action_says_whether_it_may_overwrite_a_change_at_the_destination<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let key = "acme:order:ORD-1042:create-task";
    completed_with_a_new_version(l, key).await;
    let approved = l.manual(&support::person_request(key, ManualCommand::Approve { proposal: None })).await.unwrap();
    let update = approved.update.unwrap().key;
    let crm = |update: &str| {
        let text = format!(
            "[destinations.crm]\ncreate = {{ url = \"http://127.0.0.1:9/tasks\" }}\n\
             update = {{ url = \"http://127.0.0.1:9/tasks/{{{{destination_id}}}}\"{update} }}\n"
        );
        let config = actionledger::config::Config::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        ConsoleOptions { destinations: Destinations::from_config(&config).unwrap(), ..options("Ana") }
    };
    let cases = [
        (
            crm(""),
            "update unconditional: the destination declares no conditional update, so this update overwrites whatever record R-1 holds",
        ),
        (
            crm(", conditional = \"if-match\", version_pointer = \"/version\""),
            "update conditional (If-Match): if record R-1 changed at the destination",
        ),
        (options("Ana"), "update not known here"),
    ];
    for (options, expected) in cases {
        let mut console = ScriptedConsole::start(l, &options, 100, 30).await.unwrap();
        let screen = act(&mut console, "1", update.as_str(), &["<Enter>"]).await;
        assert!(joined(&screen).contains(expected), "{expected:?} in:\n{screen}");
    }
}

/// The review of an update: the completed action's new version beside the approved one, and the
/// dialog that says what approving it does.
#[tokio::test]
async fn update_screens() {
    let db = support::sqlite().await;
    let l = &db.ledger;
    completed_with_a_new_version(l, "acme:order:ORD-1042:create-task").await;
    let scenes: [(&str, &[&str]); 2] = [
        ("update_detail", &["4", "<Enter>"]),
        ("update_confirm", &["4", "<Enter>", "a", "the customer changed the quantity", "<Enter>"]),
    ];
    for (width, height) in [(80, 24)] {
        for (name, keys) in scenes {
            let mut console = ScriptedConsole::start(l, &options("ana"), width, height).await.unwrap();
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

/// Whole screens at 80x24 and 120x40, every dialog and the help screen included.
#[tokio::test]
async fn screens() {
    let db = support::sqlite().await;
    let l = &db.ledger;
    action_in(l, "acme:order:ORD-1042:create-task", State::Conflict).await;
    action_in(l, "acme:order:ORD-1043:create-task", State::Unknown).await;
    action_in(l, "acme:order:ORD-1044:create-task", State::Failed).await;
    late_on_completed(l, "acme:order:ORD-1047:create-task").await;
    held_unsafely(l, "acme:order:ORD-1048:create-task").await;
    action_in(l, "acme:order:ORD-1045:create-task", State::InProgress).await;
    action_in(l, "acme:order:ORD-1046:create-task", State::Pending).await;
    l.submit(&RawSubmission { key: Some("acme:contact:jane@example.com".into()), ..raw("x", "{}") }).await.unwrap_err();
    l.store().clock().advance(LEASE * 2);
    let scenes: [(&str, &[&str]); 17] = [
        ("pending", &["1"]),
        ("in_progress_stale", &["2"]),
        ("unknown_detail", &["3", "<Enter>"]),
        ("conflict_detail", &["4", "<Enter>"]),
        ("refused", &["7"]),
        ("retry_reason", &["5", "r", "customer called"]),
        ("resolve_destination_id", &["3", "c", "CRM-1"]),
        ("resolve_confirm", &["3", "c", "CRM-1", "<Enter>", "verified in the CRM", "<Enter>"]),
        ("takeover_dialog", &["2", "t"]),
        ("filter", &["1", "/", "ORD-10"]),
        ("help", &["?"]),
        ("late_results", &["8"]),
        ("late_results_detail", &["8", "<Enter>"]),
        ("old_worker_dialog", &["6", "r", "checked the CRM", "<Enter>", "stop"]),
        ("late_results_detail_end", &["8", "<Enter>", "G"]),
        ("refused_detail", &["7", "<Enter>"]),
        ("unknown_values", &["3", "<Enter>", "v"]),
    ];
    for (width, height) in [(80, 24), (120, 40)] {
        for (name, keys) in scenes {
            let mut console = ScriptedConsole::start(l, &options("ana"), width, height).await.unwrap();
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

/// Payloads, errors and bodies full of escape sequences are drawn as visible text, and nothing
/// of them reaches the terminal as a control byte.
#[tokio::test]
async fn hostile_text_is_drawn_visibly_and_never_reaches_the_terminal() {
    let db = support::sqlite().await;
    let l = &db.ledger;
    let hostile = "\u{1b}]0;owned\u{7}\u{1b}[2J\u{9b}31m\rCR\u{202e}RTL\u{200b}ZW";
    let long_line = "y".repeat(1 << 20);
    let payload = serde_json::json!({ "note": hostile, "long": "z".repeat(200 * 1024) }).to_string();
    l.submit(&raw("acme:hostile", &payload)).await.unwrap();
    let claim = l.claim("worker-1", LEASE, 1).await.unwrap().pop().unwrap();
    let attempt = l.start_attempt(&claim).await.unwrap();
    let report = Report {
        outcome: Outcome::Unknown,
        error: Some(format!("boom {hostile} {long_line}")),
        evidence: Evidence { status: Some(502), destination_id: None, body: Some(format!("body {hostile}")) },
    };
    l.record_result(&claim, attempt, &report).await.unwrap();
    let reason = Reason::parse("checked").unwrap();
    let assign = ManualRequest {
        key: ActionKey::parse("acme:hostile").unwrap(),
        person: Person::parse("ana").unwrap(),
        reason,
        expect_version: None,
        command: ManualCommand::Assign { to: "ana".into() },
        old_worker_stopped: false,
        confirmed_not_written: false,
    };
    l.manual(&assign).await.unwrap();

    let mut console = ScriptedConsole::start(l, &options("ana"), 120, 40).await.unwrap();
    for line in ["3", "<Enter>"] {
        console.press(line).await.unwrap();
    }
    let screen = console.screen().unwrap();
    assert!(screen.contains("\\x1b]0;owned\\x07\\x1b[2J"), "{screen}");
    assert!(screen.contains("\\u{202e}RTL\\u{200b}ZW"), "{screen}");
    assert!(screen.chars().all(|c| c == '\n' || !c.is_control()), "no control character on screen");

    // What a real terminal backend writes: only its own escape sequences, none of the payload's.
    let mut bytes = Vec::new();
    {
        use ratatui::backend::CrosstermBackend;
        let mut terminal = ratatui::Terminal::with_options(
            CrosstermBackend::new(&mut bytes),
            ratatui::TerminalOptions { viewport: ratatui::Viewport::Fixed(ratatui::layout::Rect::new(0, 0, 120, 40)) },
        )
        .unwrap();
        terminal
            .draw(|frame| {
                actionledger::console::view::view(
                    console.model(),
                    actionledger::console::view::Theme::colored(actionledger::console::view::Palette::COLORS_256),
                    frame,
                );
            })
            .unwrap();
    }
    let written = String::from_utf8_lossy(&bytes);
    for forbidden in ["\u{1b}]", "\u{7}", "\u{9b}", "\r", "\u{202e}", "\u{200b}", "\u{1b}[2J"] {
        assert!(!written.contains(forbidden), "{forbidden:?} reached the terminal");
    }
    assert!(written.contains("owned"), "the text itself is shown");
}

/// A refused submission's key, source and event id are kept escaped by the ledger: the refused
/// pane and its detail show each escape once (`\x1b`, never `\\x1b`), and no control byte.
#[tokio::test]
async fn a_refused_submissions_escaped_text_reads_once() {
    let db = support::sqlite().await;
    let l = &db.ledger;
    let hostile = RawSubmission {
        key: Some("acme:\u{1b}[31mred".into()),
        source: Some("shop\u{7}".into()),
        event_id: Some("ev\u{1b}1".into()),
        ..raw("unused", "{}")
    };
    l.submit(&hostile).await.unwrap_err();
    let mut console = ScriptedConsole::start(l, &options("ana"), 80, 24).await.unwrap();
    console.press("7").await.unwrap();
    let list = console.screen().unwrap();
    assert!(list.contains("acme:\\x1b[31mred") && list.contains("shop\\x07"), "{list}");
    console.press("<Enter>").await.unwrap();
    let detail = console.screen().unwrap();
    assert!(detail.contains("key acme:\\x1b[31mred") && detail.contains("event ev\\x1b1"), "{detail}");
    for screen in [&list, &detail] {
        assert!(!screen.contains("\\\\x"), "an escape doubled:\n{screen}");
        assert!(screen.chars().all(|c| c == '\n' || !c.is_control()), "no control character on screen");
    }
}

/// One of each kind the header counts besides states, under `prefix`: a stale claim, a late
/// result, a proposal on a completed action and a refused submission.
async fn one_of_each_notice<S: Store>(ledger: &Ledger<S>, prefix: &str) {
    action_in(ledger, &format!("{prefix}:stale"), State::InProgress).await;
    late_on_completed(ledger, &format!("{prefix}:late")).await;
    completed_with_a_new_version(ledger, &format!("{prefix}:proposed")).await;
    let not_json = RawSubmission { payload: b"{not json".to_vec(), ..raw(&format!("{prefix}:refused"), "{}") };
    ledger.submit(&not_json).await.unwrap_err();
}

async fn every_count_follows_the_filter_as_it_is_typed<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    one_of_each_notice(l, "acme:north").await;
    one_of_each_notice(l, "acme:south").await;
    let mut console = ScriptedConsole::start(l, &options("Ana"), 80, 24).await.unwrap();
    let header = |console: &mut ScriptedConsole<S>| {
        let screen = console.screen().unwrap();
        screen.lines().skip(1).take(2).collect::<Vec<_>>().join("\n")
    };
    let everything = header(&mut console);
    for count in ["STALE CLAIMS 2", "all actions 6", "2prog 2", "4conf 0+2", "7refu 2", "8late 2"] {
        assert!(everything.contains(count), "{count}:\n{everything}");
    }
    // Typed, not yet applied: the pane and every count narrow at once.
    for line in ["/", "acme:north"] {
        console.press(line).await.unwrap();
    }
    let typed = header(&mut console);
    for count in ["STALE CLAIMS 1", "all actions 3  (filtered)", "2prog 1", "4conf 0+1", "7refu 1", "8late 1"] {
        assert!(typed.contains(count), "{count}:\n{typed}");
    }
    // Each pane lists what its tab counts: the conflict pane its one proposal, the refused pane
    // its one refusal.
    for line in ["<Enter>", "4"] {
        console.press(line).await.unwrap();
    }
    let screen = console.screen().unwrap();
    assert!(screen.contains("acme:north:proposed") && !screen.contains("acme:south"), "{screen}");
    console.press("7").await.unwrap();
    let screen = console.screen().unwrap();
    assert!(screen.contains("acme:north:refused") && !screen.contains("acme:south"), "{screen}");
    // Esc on a filter being typed puts back the one applied before, counts and all.
    for line in ["/", "<Backspace>", "<Backspace>", "<Backspace>", "<Backspace>", "<Backspace>", "south"] {
        console.press(line).await.unwrap();
    }
    assert!(console.screen().unwrap().contains("acme:south:refused"), "narrowed as typed");
    console.press("<Esc>").await.unwrap();
    let screen = console.screen().unwrap();
    assert!(screen.contains("acme:north:refused") && !screen.contains("acme:south"), "{screen}");
    // Esc in the list clears the filter: the counts are the whole ledger's again.
    console.press("<Esc>").await.unwrap();
    let cleared = header(&mut console);
    for count in ["STALE CLAIMS 2", "all actions 6", "prog 2", "conf 0+2", "refused 2", "late 2"] {
        assert!(cleared.contains(count) && !cleared.contains("filtered"), "{count}:\n{cleared}");
    }
}
