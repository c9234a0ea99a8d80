//! The review console's sort by attempts, bulk dialogs that list every marked action with what
//! will happen to it, bulk results that name what was done and what was refused, the old-worker
//! question asked once for a marked set, bulk approval, the choice among proposals, the conflict
//! pane's order, the `*` cap said on screen, and the tabs at 80 columns; and the CLI's bulk
//! output, on both stores.

use crate::support::{self, TestDb, order as raw};
use actionledger::Ledger;
use actionledger::console::{ConsoleOptions, ScriptedConsole};
use actionledger::destination::Destinations;
use actionledger::domain::{ActionKey, Evidence, ManualCommand, State};
use actionledger::ledger::{ActionDetail, Outcome, Report};
use actionledger::store::{ListFilter, ListOrder, PageStart, Store};
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(30);

conformance!(
    sorting_by_attempts_comes_from_the_store_and_pages_both_ways,
    bulk_takeover_then_retry_asks_once_whether_the_old_workers_stopped_and_lists_each_result,
    cli_bulk_lists_done_and_refused_by_key_and_takes_the_old_worker_flag,
    keystrokes_for_the_common_settlements,
    marking_all_says_when_it_stops_at_the_cap_and_the_command_line_that_reaches_the_rest,
    bulk_screens,
    a_bulk_dialog_lists_every_marked_action_at_80x24_by_scrolling_with_the_counts,
    bulk_approve_takes_each_only_proposal_and_refuses_where_several_wait,
    the_approve_dialog_lets_the_person_choose_among_the_proposals_waiting,
    the_conflict_pane_lists_conflicts_first_newest_proposal_first_and_pages_without_skipping,
);

fn options(owner: &str) -> ConsoleOptions {
    ConsoleOptions {
        owner: actionledger::domain::Person::parse(owner).unwrap(),
        ledger_label: "test-ledger".to_owned(),
        destinations: Destinations::default(),
        refresh: Duration::from_hours(1),
        hint: None,
        filter: None,
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

/// `n` claims by worker-1 whose leases ran out after a request may have been sent (an attempt
/// started under each): no destination protects them, so a takeover holds them (rule 5).
async fn unprotected_stale_claims<S: Store>(l: &Ledger<S>, prefix: &str, n: usize) {
    for i in 1..=n {
        l.submit(&raw(&format!("{prefix}:{i}"), r#"{"qty":1}"#)).await.unwrap();
        let claim = l.claim("worker-1", LEASE, 1).await.unwrap().pop().unwrap();
        l.start_attempt(&claim).await.unwrap();
    }
    l.store().clock().advance(LEASE * 2);
}

/// The keys of a script: every key pressed, and how many of them type free text (a reason, a
/// destination id, the word `stopped`). Counted from the script the session runs.
fn keystrokes(script: &[&str]) -> (usize, usize) {
    let parsed = actionledger::console::keys::parse_script(&script.join("\n")).unwrap();
    let total = parsed.iter().map(|l| l.keys.len()).sum();
    let text = parsed.iter().filter(|l| l.keys.len() > 1 && !l.text.starts_with('<')).map(|l| l.keys.len()).sum();
    (total, text)
}

async fn run<S: Store>(console: &mut ScriptedConsole<S>, script: &[&str]) {
    for line in script {
        console.press(line).await.unwrap();
    }
}

/// The words inside a box drawn over the list (a dialog, a result): what shows beside it left out.
fn boxed(screen: &str) -> String {
    let inside = screen.lines().filter_map(|line| {
        let (start, end) = (line.find('│')?, line.rfind('│')?);
        (end > start).then(|| &line[start + '│'.len_utf8()..end])
    });
    inside.flat_map(str::split_whitespace).collect::<Vec<_>>().join(" ")
}

fn joined(screen: &str) -> String {
    screen.replace(['│', '─', '┌', '┐', '└', '┘'], " ").split_whitespace().collect::<Vec<_>>().join(" ")
}

async fn bulk_takeover_then_retry_asks_once_whether_the_old_workers_stopped_and_lists_each_result<S: Store>(
    db: TestDb<S>,
) {
    let l = &db.ledger;
    failed_after(l, "acme:w:0", 1).await;
    unprotected_stale_claims(l, "acme:w", 5).await;
    let mut console = ScriptedConsole::start(l, &options("Ana"), 80, 24).await.unwrap();
    // Take over all five: nothing protects them, so all five are held; the dialog says so.
    run(&mut console, &["2", "*", "t", "worker host died", "<Enter>"]).await;
    let screen = joined(&console.screen().unwrap());
    assert!(screen.contains("Those that go to held need a retry afterwards"), "{screen}");
    console.press("y").await.unwrap();
    let screen = console.screen().unwrap();
    assert!(joined(&screen).contains("take over: 5 done, 0 refused"), "{screen}");
    for n in 1..=5 {
        assert!(screen.contains(&format!("acme:w:{n}: in_progress -> held")), "each one named:\n{screen}");
        let detail = record(l, &format!("acme:w:{n}")).await;
        assert_eq!((detail.action.state, detail.action.old_worker_may_act), (State::Held, true));
    }
    console.press("<Esc>").await.unwrap();
    assert!(console.model().result.is_none() && console.model().marks.is_empty());
    // Retry the five held ones: the dialog names which need the old worker confirmed, and asks
    // once. Meanwhile another person cancels one of them: it is refused, and says why.
    // With them, a failed action marked in its own pane, which needs no such confirmation.
    run(&mut console, &["6", "*", "5", "<Space>", "r"]).await;
    let screen = boxed(&console.screen().unwrap());
    assert!(screen.contains("Retry 6 marked actions"), "{screen}");
    assert!(
        screen.contains(
            "5 of them were held because an expired claim could not be taken over safely: the old worker may still \
             act (acme:w:1, acme:w:2, acme:w:3, acme:w:4, acme:w:5). You will be asked once to confirm that it \
             stopped, for them all."
        ),
        "the dialog says how many and which:\n{screen}"
    );
    l.manual(&support::checked_cancel("acme:w:3")).await.unwrap();
    run(&mut console, &["worker host is gone", "<Enter>"]).await;
    let screen = console.screen().unwrap();
    assert!(joined(&screen).contains("Old worker stopped? Check it, then type \"stopped\"."), "{screen}");
    // Anything but the word keeps asking.
    run(&mut console, &["yes", "<Enter>"]).await;
    let screen = console.screen().unwrap();
    assert!(joined(&screen).contains("type \"stopped\" once you have checked"), "{screen}");
    run(&mut console, &["<Backspace><Backspace><Backspace>stopped", "<Enter>"]).await;
    // Their requests may have written, and nothing here recognises a repeat: asked once more, for
    // them all (rule 6); the failed one wrote nothing and needs neither.
    let screen = console.screen().unwrap();
    assert!(joined(&screen).contains("No record at the destination? Check it, then type \"not written\"."), "{screen}");
    run(&mut console, &["not written", "<Enter>", "y"]).await;
    let screen = console.screen().unwrap();
    let words = joined(&screen);
    assert!(words.contains("retry: 5 done, 1 refused"), "{screen}");
    assert!(words.contains("acme:w:0: failed -> pending"), "{screen}");
    assert!(words.contains("acme:w:1: held -> pending"), "{screen}");
    assert!(words.contains("acme:w:3: cannot retry acme:w:3"), "the refusal and why:\n{screen}");
    let done_at = screen.find("acme:w:1:").unwrap();
    assert!(screen.find("acme:w:2:").unwrap() > done_at && screen.find("acme:w:5:").unwrap() > done_at, "by key");
    assert_eq!(console.model().marks.keys().collect::<Vec<_>>(), ["acme:w:3"], "the refused one stays marked");
    let failed = record(l, "acme:w:0").await;
    assert_eq!(failed.action.state, State::Pending);
    assert_eq!(failed.audit.last().unwrap().reason.as_deref(), Some("worker host is gone"), "nothing to confirm");
    for n in [1, 2, 4, 5] {
        let detail = record(l, &format!("acme:w:{n}")).await;
        assert_eq!((detail.action.state, detail.action.old_worker_may_act), (State::Pending, false), "acme:w:{n}");
        let last = detail.audit.last().unwrap();
        assert_eq!((last.event, last.actor.as_str()), (actionledger::domain::Event::Retry, "Ana"));
        assert_eq!(
            last.reason.as_deref(),
            Some(
                "worker host is gone; the person confirmed that the old worker can no longer act; the destination \
                 cannot recognise a repeat, and the person confirmed that it holds no record of this action"
            ),
            "both confirmations went through the ledger's own command, audited"
        );
    }
    assert_eq!(record(l, "acme:w:3").await.action.state, State::Cancelled);
    // Esc closes the result; the status line still says what happened.
    console.press("<Esc>").await.unwrap();
    let screen = console.screen().unwrap();
    assert!(joined(&screen).contains("retry: 5 done, 1 refused"), "{screen}");
}

async fn cli(url: &str, args: Vec<&str>) -> (Option<i32>, String) {
    let (url, args): (String, Vec<String>) = (url.to_owned(), args.iter().map(|a| (*a).to_owned()).collect());
    let out = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        support::run_cli(&url, &args)
    })
    .await
    .unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
}

async fn cli_bulk_lists_done_and_refused_by_key_and_takes_the_old_worker_flag<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    // Submitted in an order that is not the keys' order.
    // The command line reads the database's own clock: leases that run out in real time.
    for key in ["acme:k:c", "acme:k:a", "acme:k:d", "acme:k:b"] {
        l.submit(&raw(key, r#"{"qty":1}"#)).await.unwrap();
        let claim = l.claim("worker-1", Duration::from_millis(1), 1).await.unwrap().pop().unwrap();
        l.start_attempt(&claim).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let selection = ["--state", "in_progress", "--owner", "Ana", "--reason", "worker host died"];
    let (code, out) = cli(&db.url, [&["takeover"][..], &selection].concat()).await;
    assert_eq!(code, Some(0), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[..4],
        [
            "take over: acme:k:a in_progress -> held",
            "take over: acme:k:b in_progress -> held",
            "take over: acme:k:c in_progress -> held",
            "take over: acme:k:d in_progress -> held",
        ],
        "{out}"
    );
    // Held, with the old worker perhaps still acting: a retry without the flag is refused, each
    // saying why; the dry run lists the same; with the flag each runs again.
    l.manual(&support::checked_cancel("acme:k:b")).await.unwrap();
    let held = ["--state", "held", "--owner", "Ana", "--reason", "old worker gone"];
    let (code, out) = cli(&db.url, [&["retry"][..], &held, &["--dry-run"]].concat()).await;
    assert_eq!(code, Some(3), "{out}");
    let refused: Vec<&str> = out.lines().filter(|l| l.starts_with("refused: ")).collect();
    assert_eq!(refused.len(), 3, "{out}");
    assert!(refused[0].starts_with("refused: acme:k:a: ") && refused[2].starts_with("refused: acme:k:d: "), "{out}");
    assert!(refused[0].contains("--old-worker-stopped"), "says what is needed:\n{out}");
    let (code, out) = cli(
        &db.url,
        [&["retry"][..], &held, &["--old-worker-stopped", "--confirm-not-written", "--dry-run", "--json"]].concat(),
    )
    .await;
    assert_eq!(code, Some(0), "{out}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    let keys = |list: &str| -> Vec<String> {
        doc[list].as_array().unwrap().iter().map(|d| d["key"].as_str().unwrap().to_owned()).collect()
    };
    assert_eq!(keys("done"), ["acme:k:a", "acme:k:c", "acme:k:d"], "{doc}");
    assert!(keys("refused").is_empty());
    assert_eq!(doc["dry_run"], true);
    for key in ["acme:k:a", "acme:k:c", "acme:k:d"] {
        assert_eq!(record(l, key).await.action.state, State::Held, "the dry run changed nothing");
    }
    // For real, one of them changed meanwhile by another person's hand: done and refused, both
    // lists by key in one document.
    l.manual(&support::person_request("acme:k:c", ManualCommand::Assign { to: "Bo".into() })).await.unwrap();
    let (code, out) =
        cli(&db.url, [&["retry"][..], &held, &["--old-worker-stopped", "--confirm-not-written", "--json"]].concat())
            .await;
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(
        doc["done"].as_array().unwrap().iter().map(|d| d["key"].as_str().unwrap()).collect::<Vec<_>>(),
        ["acme:k:a", "acme:k:c", "acme:k:d"],
        "{doc}"
    );
    for key in ["acme:k:a", "acme:k:c", "acme:k:d"] {
        let detail = record(l, key).await;
        assert_eq!((detail.action.state, detail.action.old_worker_may_act), (State::Pending, false), "{key}");
        assert_eq!(detail.audit.last().unwrap().actor.as_str(), "Ana");
    }
}

async fn keystrokes_for_the_common_settlements<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    // An unknown action whose 409 names the record: c offers the id, Enter takes it.
    l.submit(&raw("acme:ks:unknown", r#"{"qty":1}"#)).await.unwrap();
    let claim = l.claim("worker-1", LEASE, 1).await.unwrap().pop().unwrap();
    let attempt = l.start_attempt(&claim).await.unwrap();
    let report = Report {
        outcome: Outcome::Unknown,
        error: Some("HTTP 409".into()),
        evidence: Evidence { status: Some(409), destination_id: Some("R-000001".into()), body: None },
    };
    l.record_result(&claim, attempt, &report).await.unwrap();
    // A conflict: a new payload for a pending action.
    l.submit(&raw("acme:ks:conflict", r#"{"qty":1}"#)).await.unwrap();
    l.submit(&raw("acme:ks:conflict", r#"{"qty":2}"#)).await.unwrap();
    unprotected_stale_claims(l, "acme:ks:stale", 5).await;

    let settle: &[&str] = &["3", "c", "<Enter>", "CRM has R-000001", "<Enter>", "y"];
    let approve: &[&str] = &["4", "a", "customer changed qty", "<Enter>", "y"];
    let takeover: &[&str] = &[
        "2",
        "*",
        "t",
        "worker host died",
        "<Enter>",
        "y",
        "<Esc>",
        "6",
        "*",
        "r",
        "worker host is gone",
        "<Enter>",
        "stopped",
        "<Enter>",
        "not written",
        "<Enter>",
        "y",
        "<Esc>",
    ];
    for (name, script) in [("settle an unknown action with a destination id", settle), ("approve a conflict", approve)]
    {
        let mut console = ScriptedConsole::start(l, &options("Ana"), 80, 24).await.unwrap();
        run(&mut console, script).await;
        let refusals = console.model().refusals;
        assert_eq!(refusals, 0, "{}", console.screen().unwrap());
        let (total, text) = keystrokes(script);
        eprintln!("keystrokes: {name}: {total} ({text} of them typing free text)");
    }
    let done = record(l, "acme:ks:unknown").await.action;
    assert_eq!((done.state, done.destination_id.as_deref()), (State::Completed, Some("R-000001")));
    assert_eq!(record(l, "acme:ks:conflict").await.action.proposal, None, "approved");
    let mut console = ScriptedConsole::start(l, &options("Ana"), 80, 24).await.unwrap();
    run(&mut console, takeover).await;
    let refusals = console.model().refusals;
    assert_eq!(refusals, 0, "{}", console.screen().unwrap());
    let (total, text) = keystrokes(takeover);
    eprintln!(
        "keystrokes: take over 5 unprotected stale claims, then retry them with the old-worker and not-written \
         questions: {total} \
         ({text} of them typing free text)"
    );
    for n in 1..=5 {
        let detail = record(l, &format!("acme:ks:stale:{n}")).await;
        assert_eq!((detail.action.state, detail.action.old_worker_may_act), (State::Pending, false), "{n}");
    }
}

/// Whole screens at 80x24 and 120x40, the same on both stores: a bulk takeover's result, the
/// old-worker question asked once for a marked set, and a long result with refusals, at its top
/// and its end.
async fn bulk_screens<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    for (width, height) in [(80, 24), (120, 40)] {
        let prefix = if width == 80 { "ORD-30" } else { "ORD-31" };
        for n in 1..=12 {
            l.submit(&raw(&format!("acme:order:{prefix}{n:02}:create-task"), r#"{"qty":1}"#)).await.unwrap();
            let claim = l.claim("worker-1", LEASE, 1).await.unwrap().pop().unwrap();
            l.start_attempt(&claim).await.unwrap();
        }
        l.store().clock().advance(LEASE * 2);
        let mut console = ScriptedConsole::start(l, &options("ana"), width, height).await.unwrap();
        let snap = async |console: &mut ScriptedConsole<_>, name: &str, script: &[&str]| {
            run(console, script).await;
            insta::assert_snapshot!(
                format!("{name}_{width}x{height}"),
                support::mask_times(&console.screen().unwrap())
            );
        };
        snap(&mut console, "bulk_takeover_result", &["2", "*", "t", "worker host died", "<Enter>", "y"]).await;
        snap(&mut console, "bulk_old_worker", &["<Esc>", "6", "*", "r", "worker host is gone", "<Enter>"]).await;
        for n in [4, 9] {
            let key = format!("acme:order:{prefix}{n:02}:create-task");
            l.manual(&support::checked_cancel(&key)).await.unwrap();
        }
        snap(&mut console, "bulk_result", &["stopped", "<Enter>", "not written", "<Enter>", "y"]).await;
        snap(&mut console, "bulk_result_end", &["G"]).await;
        // Out of the next round's way: its claims take the oldest pending actions first.
        for n in (1..=12).filter(|n| ![4, 9].contains(n)) {
            let key = format!("acme:order:{prefix}{n:02}:create-task");
            l.manual(&support::checked_cancel(&key)).await.unwrap();
        }
    }
}

async fn marking_all_says_when_it_stops_at_the_cap_and_the_command_line_that_reaches_the_rest<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let raws: Vec<_> = (0..1005).map(|n| raw(&format!("acme:cap:{n:04}"), "{}")).collect();
    for chunk in raws.chunks(100) {
        l.submit_many(chunk).await.unwrap();
    }
    let other = actionledger::domain::RawSubmission { destination: Some("erp".into()), ..raw("acme:cap:erp", "{}") };
    l.submit(&other).await.unwrap();
    let mut console = ScriptedConsole::start(l, &options("Ana"), 80, 24).await.unwrap();
    run(&mut console, &["1", "/", "dest:crm", "<Enter>", "*"]).await;
    let screen = console.screen().unwrap();
    let words = joined(&screen);
    let said = "marked 1,000 of 1,005 matching in the pending pane that match the filter (at most 1,000 at once); 1,000 \
                marked in all (u unmarks). For more use: actionledger <retry|cancel|takeover|assign> --state pending \
                --destination crm --owner Ana --reason '...' --limit 1005 --dry-run";
    assert!(words.contains(said), "never silently partial:\n{screen}");
    assert_eq!(console.model().marks.len(), 1000);
    assert_eq!(console.model().refusals, 1, "a script stops there");
    // The command printed selects all 1,005, and only them.
    let (code, out) = cli(
        &db.url,
        vec![
            "cancel",
            "--state",
            "pending",
            "--destination",
            "crm",
            "--owner",
            "Ana",
            "--reason",
            "...",
            "--limit",
            "1005",
            "--dry-run",
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("cancel: 1005 selected, 1005 would change, 0 refused"), "{out}");
    assert!(!out.contains("acme:cap:erp"));
    // Under the cap, all are marked and it says so.
    run(&mut console, &["u", "/", "<Backspace>".repeat(10).as_str(), "cap:000", "<Enter>", "*"]).await;
    let screen = console.screen().unwrap();
    assert!(joined(&screen).contains("marked all 10 in the pending pane that match the filter"), "{screen}");
    assert_eq!(console.model().marks.len(), 10);
}

/// The real binary in tmux at 80x24: a filter shown while typed, two actions marked with Space
/// and retried with one reason and one confirmation (checked in the ledger afterwards), the
/// history pane, and the sort key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_triage_in_a_real_terminal() {
    use crate::tmux::{Tmux, tmux_available};
    if !tmux_available() {
        return;
    }
    let db = support::sqlite().await;
    let l = &db.ledger;
    l.submit(&raw("acme:tmux:h:done", "{}")).await.unwrap();
    l.manual(&support::checked_cancel("acme:tmux:h:done")).await.unwrap();
    for n in 1..=3 {
        failed_after(l, &format!("acme:tmux:b:{n}"), n).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let tmux = Tmux::review(dir.path(), &db.url, "", 80, 24);
    tmux.wait_for("[1 pending 0]");
    tmux.keys(&["5"]);
    tmux.wait_for("> acme:tmux:b:3");
    // The filter and what it means, while it is typed.
    tmux.keys(&["/"]);
    tmux.keys(&["-l", "b:"]);
    tmux.wait_for("/b:_  (shows key contains \"b:\")");
    tmux.keys(&["-l", "3"]);
    tmux.wait_for("/b:3_  (shows key contains \"b:3\")");
    tmux.keys(&["BSpace", "Enter"]);
    tmux.wait_for("failed — newest first — key contains \"b:\"");
    // Space marks and moves down: two presses, the two newest.
    tmux.keys(&["Space"]);
    tmux.wait_for("1 marked");
    tmux.keys(&["Space"]);
    let screen = tmux.wait_for("2 marked");
    assert!(screen.contains("+ acme:tmux:b:3") && screen.contains("+ acme:tmux:b:2"), "{screen}");
    tmux.keys(&["r"]);
    tmux.wait_for("retry 2 marked actions");
    tmux.keys(&["-l", "CRM fixed"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("Confirm? y yes");
    tmux.keys(&["y"]);
    let screen = tmux.wait_for("retry: 2 done, 0 refused");
    assert!(screen.contains("acme:tmux:b:2: failed -> pending") && screen.contains("acme:tmux:b:3: failed -> pending"));
    tmux.keys(&["Escape"]);
    for (key, state) in
        [("acme:tmux:b:1", State::Failed), ("acme:tmux:b:2", State::Pending), ("acme:tmux:b:3", State::Pending)]
    {
        let detail = record(l, key).await;
        assert_eq!(detail.action.state, state, "{key}");
        if state == State::Pending {
            let last = detail.audit.last().unwrap();
            assert_eq!((last.actor.as_str(), last.reason.as_deref()), ("ana", Some("CRM fixed")), "{key}");
        }
    }
    // The history pane, then the orders of s.
    // Esc alone (Esc then a key at once reads as Alt and the key): the filter is cleared.
    tmux.keys(&["Escape"]);
    tmux.wait_for("filter cleared");
    tmux.keys(&["9"]);
    tmux.wait_for("[9 completed 0]");
    tmux.keys(&["h"]);
    let screen = tmux.wait_for("> acme:tmux:h:done");
    assert!(screen.contains("cancelled — newest first"), "{screen}");
    tmux.keys(&["s"]);
    tmux.wait_for("cancelled — oldest first");
    tmux.keys(&["s"]);
    tmux.wait_for("cancelled — most attempts first");
    tmux.keys(&["q"]);
    tmux.wait_for("CONSOLE-EXITED-0");
}

/// The keys of the marked actions a bulk dialog shows on this screen, each listed on a line of
/// its own ("  KEY: ...").
fn listed_keys(screen: &str) -> Vec<String> {
    screen
        .lines()
        .filter_map(|line| {
            let inside = line.split('│').nth(1)?;
            let key = inside.strip_prefix("  ")?.split(": ").next()?;
            key.starts_with("acme:").then(|| key.to_owned())
        })
        .collect()
}

async fn a_bulk_dialog_lists_every_marked_action_at_80x24_by_scrolling_with_the_counts<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    for n in 1..=27 {
        failed_after(l, &format!("acme:many:{n:02}"), 1).await;
    }
    for n in 28..=30 {
        l.submit(&raw(&format!("acme:many:{n:02}"), r#"{"qty":1}"#)).await.unwrap();
        l.manual(&support::checked_cancel(&format!("acme:many:{n:02}"))).await.unwrap();
    }
    let mut console = ScriptedConsole::start(l, &options("Ana"), 80, 24).await.unwrap();
    // 27 failed marked in their pane, 3 cancelled in theirs: marks survive switching panes.
    run(&mut console, &["5", "*", "9", "h", "*", "r"]).await;
    assert_eq!(console.model().marks.len(), 30);
    let screen = console.screen().unwrap();
    let words = joined(&screen);
    assert!(words.contains("27 to pending, 3 will be refused (refused ones stay marked)"), "the counts:\n{screen}");
    assert!(words.contains("lines 1-"), "it says the list scrolls:\n{screen}");
    let lines: Vec<&str> = screen.lines().collect();
    assert!(lines[22].contains("marked all 3 in the cancelled pane"), "the status line stays in view:\n{screen}");
    assert!(lines[23].contains("Esc cancel"), "the footer stays in view:\n{screen}");
    // Down, PageDown and End reach every one; the reason typed meanwhile is kept.
    let mut seen: std::collections::BTreeSet<String> = listed_keys(&screen).into_iter().collect();
    run(&mut console, &["because"]).await;
    for key in ["<Down>", "<PageDown>", "<PageDown>", "<PageDown>", "<End>"] {
        console.press(key).await.unwrap();
        seen.extend(listed_keys(&console.screen().unwrap()));
    }
    let all: std::collections::BTreeSet<String> = (1..=30).map(|n| format!("acme:many:{n:02}")).collect();
    assert_eq!(seen, all, "every marked action is listed");
    let end = console.screen().unwrap();
    assert!(joined(&end).contains("acme:many:30: cannot retry acme:many:30"), "with why it will be refused:\n{end}");
    assert!(joined(&end).contains("reason: because_"), "{end}");
    console.press("<Home>").await.unwrap();
    assert!(joined(&console.screen().unwrap()).contains("Retry 30 marked actions"));
    run(&mut console, &["<Enter>", "y"]).await;
    assert!(joined(&console.screen().unwrap()).contains("retry: 27 done, 3 refused"));
    assert_eq!(record(l, "acme:many:01").await.action.state, State::Pending, "the ledger agrees");
    assert_eq!(record(l, "acme:many:30").await.action.state, State::Cancelled);

    // A bulk of N hand-picked: the pane, N marks, the command, the reason's Enter and y. (The
    // retried ones out of the way first: a claim takes the oldest pending action.)
    for n in 1..=27 {
        l.manual(&support::checked_cancel(&format!("acme:many:{n:02}"))).await.unwrap();
    }
    for n in 1..=3 {
        failed_after(l, &format!("acme:picked:{n}"), 1).await;
    }
    let script: &[&str] = &["5", "<Space>", "<Space>", "<Space>", "r", "CRM fixed", "<Enter>", "y"];
    let mut console = ScriptedConsole::start(l, &options("Ana"), 80, 24).await.unwrap();
    run(&mut console, script).await;
    assert!(joined(&console.screen().unwrap()).contains("retry: 3 done, 0 refused"), "{}", console.screen().unwrap());
    let (total, text) = keystrokes(script);
    assert_eq!(total - text, 3 + 4, "N+4 keys and the reason");
}

/// A pending action given a second payload: a conflict with one proposal waiting; `more` more
/// payloads make as many more proposals wait.
async fn conflict_with<S: Store>(l: &Ledger<S>, key: &str, more: usize) {
    l.submit(&raw(key, r#"{"qty":1}"#)).await.unwrap();
    for qty in 2..=2 + more {
        l.submit(&raw(key, &format!(r#"{{"qty":{qty}}}"#))).await.unwrap();
    }
}

async fn bulk_approve_takes_each_only_proposal_and_refuses_where_several_wait<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    for n in 1..=3 {
        conflict_with(l, &format!("acme:one:{n}"), 0).await;
    }
    conflict_with(l, "acme:two:1", 1).await;
    assert_eq!(record(l, "acme:two:1").await.waiting_proposals().count(), 2);
    let mut console = ScriptedConsole::start(l, &options("Ana"), 80, 24).await.unwrap();
    run(&mut console, &["4", "*", "a"]).await;
    let screen = console.screen().unwrap();
    let words = joined(&screen);
    assert!(words.contains("3 to pending, 1 will be refused"), "the counts:\n{screen}");
    assert!(words.contains("acme:one:1: conflict -> pending, approving"), "{screen}");
    console.press("<End>").await.unwrap();
    let end = joined(&console.screen().unwrap());
    assert!(
        end.contains("acme:two:1: cannot approve acme:two:1: 2 proposed payloads are waiting")
            && end.contains("open it to choose"),
        "the ledger's refusal, said before the reason:\n{end}"
    );
    run(&mut console, &["customer changed qty", "<Enter>", "y"]).await;
    let screen = console.screen().unwrap();
    let words = joined(&screen);
    assert!(words.contains("approve: 3 done, 1 refused"), "{screen}");
    assert!(words.contains("acme:two:1: cannot approve acme:two:1"), "refused with the reason:\n{screen}");
    assert_eq!(console.model().marks.keys().collect::<Vec<_>>(), ["acme:two:1"], "the refused one stays marked");
    for n in 1..=3 {
        let detail = record(l, &format!("acme:one:{n}")).await;
        assert_eq!((detail.action.state, detail.action.payload.canonical()), (State::Pending, r#"{"qty":2}"#));
        let last = detail.audit.last().unwrap();
        assert_eq!(last.actor.as_str(), "Ana");
        assert!(last.reason.as_deref().unwrap().starts_with("customer changed qty"), "{last:?}");
    }
    let two = record(l, "acme:two:1").await;
    assert_eq!((two.action.state, two.waiting_proposals().count()), (State::Conflict, 2), "untouched");
}

async fn the_approve_dialog_lets_the_person_choose_among_the_proposals_waiting<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    conflict_with(l, "acme:choose:1", 1).await;
    let mut console = ScriptedConsole::start(l, &options("Ana"), 80, 24).await.unwrap();
    // From the list: the dialog reads the proposals and offers them, with what each changes.
    run(&mut console, &["4", "a"]).await;
    let screen = console.screen().unwrap();
    let words = joined(&screen);
    assert!(words.contains("Approve proposal 1 of 2"), "{screen}");
    assert!(words.contains("Proposal 1 of 2") && words.contains("qty: 1 -> 2"), "{screen}");
    run(&mut console, &["<Right>"]).await;
    let screen = console.screen().unwrap();
    let words = joined(&screen);
    assert!(words.contains("Approve proposal 2 of 2") && words.contains("the other 1 are rejected"), "{screen}");
    assert!(words.contains("Proposal 2 of 2") && words.contains("qty: 1 -> 3"), "{screen}");
    insta::assert_snapshot!("approve_choice_80x24", support::mask_times(&screen));
    run(&mut console, &["the customer's last word", "<Enter>", "y"]).await;
    let refusals = console.model().refusals;
    assert_eq!(refusals, 0, "{}", console.screen().unwrap());
    let detail = record(l, "acme:choose:1").await;
    assert_eq!((detail.action.state, detail.action.payload.canonical()), (State::Pending, r#"{"qty":3}"#));
    assert_eq!(detail.waiting_proposals().count(), 0, "the other was rejected");
    // Left goes round the other way, from the detail too: the one chosen is the one approved.
    conflict_with(l, "acme:choose:2", 2).await;
    let mut console = ScriptedConsole::start(l, &options("Ana"), 80, 24).await.unwrap();
    run(&mut console, &["4", "<Enter>", "a", "<Left>"]).await;
    assert!(joined(&console.screen().unwrap()).contains("Proposal 3 of 3"), "{}", console.screen().unwrap());
    run(&mut console, &["reject the last", "<Enter>"]).await;
    console.press("<Esc>").await.unwrap();
    run(&mut console, &["d", "<Left>", "not this one", "<Enter>", "y"]).await;
    let detail = record(l, "acme:choose:2").await;
    let waiting: Vec<String> = detail.waiting_proposals().map(|p| p.payload.canonical().to_owned()).collect();
    assert_eq!(waiting, [r#"{"qty":2}"#, r#"{"qty":3}"#], "only the one chosen was rejected");
}

async fn the_conflict_pane_lists_conflicts_first_newest_proposal_first_and_pages_without_skipping<S: Store>(
    db: TestDb<S>,
) {
    let l = &db.ledger;
    // Completed actions with a new version proposed: listed after every conflict.
    for n in 1..=3 {
        let key = format!("acme:done:{n}");
        l.submit(&raw(&key, r#"{"qty":1}"#)).await.unwrap();
        let claim = l.claim("worker-1", LEASE, 1).await.unwrap().pop().unwrap();
        let attempt = l.start_attempt(&claim).await.unwrap();
        let done = Report {
            outcome: Outcome::Completed { destination_id: format!("R-{n}") },
            error: None,
            evidence: Evidence::default(),
        };
        l.record_result(&claim, attempt, &done).await.unwrap();
    }
    let keys: Vec<String> = (0..105).map(|n| format!("acme:order:{n:03}")).collect();
    let first: Vec<_> = keys.iter().map(|k| raw(k, r#"{"qty":1}"#)).collect();
    l.submit_many(&first).await.unwrap();
    // Proposals arrive in chunks, newest ids first, a second apart: proposal time is not id order.
    for chunk in keys.rchunks(20) {
        l.store().clock().advance(Duration::from_secs(1));
        let second: Vec<_> = chunk.iter().map(|k| raw(k, r#"{"qty":2}"#)).collect();
        l.submit_many(&second).await.unwrap();
    }
    for n in 1..=3 {
        l.store().clock().advance(Duration::from_secs(1));
        l.submit(&raw(&format!("acme:done:{n}"), r#"{"qty":2}"#)).await.unwrap();
    }
    // The oldest conflict gets a third payload last of all: it comes first.
    l.store().clock().advance(Duration::from_secs(1));
    l.submit(&raw("acme:order:000", r#"{"qty":3}"#)).await.unwrap();
    // The order, from each action's proposals as its detail lists them.
    let mut expected = Vec::new();
    for key in keys.iter().chain(&["acme:done:1".to_owned(), "acme:done:2".to_owned(), "acme:done:3".to_owned()]) {
        let detail = record(l, key).await;
        let newest = detail.waiting_proposals().map(|p| p.received_at).max().unwrap();
        expected.push((detail.action.state == State::Conflict, newest, detail.action.id, key.clone()));
    }
    expected.sort_by_key(|e| std::cmp::Reverse((e.0, e.1, e.2)));
    let expected: Vec<String> = expected.into_iter().map(|e| e.3).collect();
    assert_eq!(expected[0], "acme:order:000");
    assert_eq!(&expected[105..], ["acme:done:3", "acme:done:2", "acme:done:1"]);
    // The store, page by page of 10 either way: never a row skipped or repeated.
    let conflicts = ListFilter { state: Some(State::Conflict), or_proposed: true, limit: 10, ..ListFilter::default() };
    let (mut forward, mut before_id) = (Vec::new(), None);
    loop {
        let page = l.list(&ListFilter { before_id, ..conflicts.clone() }).await.unwrap();
        let Some(last) = page.last() else { break };
        before_id = Some(last.id);
        forward.extend(page.iter().map(|a| a.key.to_string()));
    }
    assert_eq!(forward, expected, "newest first, page after page");
    let mut backward: Vec<String> = Vec::new();
    let mut after_id = None;
    let last = ListFilter { start: PageStart::Last, ..conflicts.clone() };
    let mut page = l.list(&last).await.unwrap();
    while !page.is_empty() {
        after_id = page.first().map(|a| a.id).or(after_id);
        backward.splice(0..0, page.iter().map(|a| a.key.to_string()));
        page = l.list(&ListFilter { after_id, ..conflicts.clone() }).await.unwrap();
    }
    assert_eq!(backward, expected, "and back again from the last page");
    let oldest = l.list(&ListFilter { order: ListOrder::OldestFirst, limit: 200, ..conflicts.clone() }).await.unwrap();
    let oldest: Vec<String> = oldest.iter().map(|a| a.key.to_string()).collect();
    let conflicts_reversed: Vec<String> = expected[..105].iter().rev().cloned().collect();
    assert_eq!(oldest[..105], conflicts_reversed, "oldest first: the conflicts still first");
    // The console walks the same order with j, PageDown and G.
    let mut console = ScriptedConsole::start(l, &options("Ana"), 80, 24).await.unwrap();
    console.press("4").await.unwrap();
    let selected = |console: &ScriptedConsole<S>| console.model().selected_action().unwrap().key.to_string();
    let mut walked = vec![selected(&console)];
    for _ in 1..expected.len() {
        console.press("j").await.unwrap();
        walked.push(selected(&console));
    }
    assert_eq!(walked, expected, "j through every page");
    console.press("g").await.unwrap();
    assert_eq!(selected(&console), "acme:order:000");
    console.press("G").await.unwrap();
    assert_eq!(selected(&console), "acme:done:1");
}
