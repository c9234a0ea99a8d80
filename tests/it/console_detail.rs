//! The open detail on both stores: every byte of a long value reachable and searchable in `v`,
//! who settled an action and how, and every attempt with its own error.

use crate::support::{self, TestDb, order as raw, person_request};
use actionledger::Ledger;
use actionledger::console::view::Theme;
use actionledger::console::{ConsoleOptions, ScriptedConsole};
use actionledger::destination::Destinations;
use actionledger::domain::{Evidence, ManualCommand, Person};
use actionledger::ledger::{Outcome, Report};
use actionledger::store::Store;
use ratatui::style::Modifier;
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(30);

conformance!(
    every_byte_of_a_long_value_is_reached_with_g_and_found_by_search,
    n_and_n_shifted_move_between_matches_round_both_ends,
    every_attempt_shows_its_own_error,
    a_detail_says_who_settled_it_when_and_how,
    a_payload_reads_its_json_escapes_once,
);

fn options() -> ConsoleOptions {
    ConsoleOptions {
        owner: Person::parse("ana").unwrap(),
        ledger_label: "test-ledger".to_owned(),
        destinations: Destinations::default(),
        refresh: Duration::from_hours(1),
        hint: None,
        filter: None,
    }
}

const END: &str = "END-OF-VALUE-7f3a";

/// A pending action whose note is about 100 KB of words, with `markers` spread through it and
/// [`END`] as its last characters.
async fn long_value<S: Store>(ledger: &Ledger<S>, key: &str, markers: &[&str]) {
    let chunk = "lorem ipsum dolor sit amet ".repeat(1000);
    let mut note = String::new();
    for marker in markers {
        note.push_str(&chunk);
        note.push_str(marker);
        note.push(' ');
    }
    while note.len() < 100 * 1024 {
        note.push_str(&chunk);
    }
    note.push_str(END);
    let payload = serde_json::json!({ "note": note }).to_string();
    ledger.submit(&raw(key, &payload)).await.unwrap();
}

async fn press<S: Store>(console: &mut ScriptedConsole<S>, keys: &[&str]) -> String {
    for line in keys {
        console.press(line).await.unwrap();
    }
    console.screen().unwrap()
}

/// The status line: the row above the footer.
fn status(screen: &str) -> String {
    let rows: Vec<&str> = screen.lines().collect();
    rows[rows.len().saturating_sub(4)..rows.len() - 1].join(" ")
}

async fn every_byte_of_a_long_value_is_reached_with_g_and_found_by_search<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    long_value(l, "acme:long:1", &[]).await;
    let mut console = ScriptedConsole::start(l, &options(), 80, 24).await.unwrap();
    let screen = press(&mut console, &["1", "<Enter>", "v"]).await;
    assert!(screen.contains("full values") && !screen.contains(END), "{screen}");
    // G: the end of the value, not a cut two kilobytes in.
    let end = press(&mut console, &["G"]).await;
    assert!(end.contains(END), "G shows the value's last characters:\n{end}");
    assert!(!end.contains("more bytes"), "nothing is cut:\n{end}");
    // Back to the top, then a search for it, in any case: the view goes there and marks it.
    let top = press(&mut console, &["g"]).await;
    assert!(!top.contains(END));
    let typing = press(&mut console, &["/", "end-of-value"]).await;
    assert!(typing.contains("/end-of-value_"), "the search line is typed in the status line:\n{typing}");
    let found = press(&mut console, &["<Enter>"]).await;
    assert!(found.contains(END), "{found}");
    assert!(status(&found).contains("match 1 of 1 for \"end-of-value\""), "{found}");
    let buffer = console.render(Theme::PLAIN).unwrap();
    let marked: String = buffer
        .content()
        .iter()
        .filter(|cell| cell.modifier.contains(Modifier::REVERSED))
        .map(ratatui::buffer::Cell::symbol)
        .collect();
    assert!(marked.contains("END-OF-VALUE"), "the match is marked: {marked:?}");
    // A search for what is not there says so and moves nothing.
    let missing = press(&mut console, &["g", "/", "absent-7f3a", "<Enter>"]).await;
    assert!(status(&missing).contains("no match for \"absent-7f3a\""), "{missing}");
    // The facts are searchable too: the payload there is cut, its key is not.
    let facts = press(&mut console, &["v", "/", "ACME:LONG", "<Enter>"]).await;
    assert!(status(&facts).contains("match 1 of"), "{facts}");
}

async fn n_and_n_shifted_move_between_matches_round_both_ends<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    long_value(l, "acme:long:2", &["MARK-ONE", "MARK-TWO", "MARK-THREE"]).await;
    let mut console = ScriptedConsole::start(l, &options(), 80, 24).await.unwrap();
    let first = press(&mut console, &["1", "<Enter>", "v", "/", "mark-", "<Enter>"]).await;
    assert!(first.contains("MARK-ONE") && status(&first).contains("match 1 of 3"), "{first}");
    let second = press(&mut console, &["n"]).await;
    assert!(second.contains("MARK-TWO") && status(&second).contains("match 2 of 3"), "{second}");
    let third = press(&mut console, &["n"]).await;
    assert!(third.contains("MARK-THREE") && status(&third).contains("match 3 of 3"), "{third}");
    let round = press(&mut console, &["n"]).await;
    assert!(
        round.contains("MARK-ONE") && status(&round).contains("match 1 of 3 for \"mark-\" (wrapped to the top)"),
        "{round}"
    );
    let back = press(&mut console, &["N"]).await;
    assert!(
        back.contains("MARK-THREE") && status(&back).contains("match 3 of 3 for \"mark-\" (wrapped to the end)"),
        "{back}"
    );
    // While a search is applied n is the search's; Esc ends it and n resolves as not written
    // again (refused here: a pending action), as it does in the list.
    assert!(!back.contains("not-written"), "the footer does not offer n for two things:\n{back}");
    let ended = press(&mut console, &["<Esc>"]).await;
    assert!(status(&ended).contains("search ended") && ended.contains("full values"), "{ended}");
    let refused = press(&mut console, &["n"]).await;
    assert!(status(&refused).contains("cannot resolve as not written acme:long:2"), "{refused}");
}

/// A report of a failed attempt with its own error and answer.
fn failed(error: &str, status: i64, body: &str) -> Report {
    Report {
        outcome: Outcome::RetryLater { after: Duration::ZERO },
        error: Some(error.to_owned()),
        evidence: Evidence { status: Some(status), destination_id: None, body: Some(body.to_owned()) },
    }
}

/// An action retried twice after failures with different errors, then failed for good.
async fn retried_twice<S: Store>(ledger: &Ledger<S>, key: &str) {
    ledger.submit(&raw(key, r#"{"qty":1}"#)).await.unwrap();
    let reports = [
        failed("HTTP 503 from the CRM: maintenance window", 503, r#"{"error":"maintenance"}"#),
        failed("HTTP 502 from the CRM: bad gateway at the proxy", 502, "<html>bad gateway</html>"),
        Report {
            outcome: Outcome::Failed { permanent: true },
            error: Some("HTTP 422 from the CRM: the e-mail field is invalid".to_owned()),
            evidence: Evidence { status: Some(422), destination_id: None, body: Some(r#"{"field":"email"}"#.into()) },
        },
    ];
    for report in reports {
        let claim = ledger.claim("worker-1", LEASE, 1).await.unwrap().pop().unwrap();
        let attempt = ledger.start_attempt(&claim).await.unwrap();
        ledger.record_result(&claim, attempt, &report).await.unwrap();
        ledger.store().clock().advance(Duration::from_secs(1));
    }
}

async fn every_attempt_shows_its_own_error<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    retried_twice(l, "acme:retried:1").await;
    let mut console = ScriptedConsole::start(l, &options(), 80, 24).await.unwrap();
    let mut seen = press(&mut console, &["5", "<Enter>"]).await;
    for _ in 0..60 {
        seen.push_str(&press(&mut console, &["j"]).await);
    }
    let joined = seen.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(joined.contains("attempts (3), newest first"), "{seen}");
    for error in ["maintenance window", "bad gateway at the proxy", "the e-mail field is invalid"] {
        assert!(joined.contains(error), "{error:?} is in the detail:\n{seen}");
    }
    for evidence in ["status 503", "status 502", "status 422", r#"body {"error":"maintenance"}"#] {
        assert!(joined.contains(evidence), "{evidence:?} is in the detail:\n{seen}");
    }
    for number in ["#1 by worker-1 under ownership version 1", "#2 by worker-1 under ownership version 2"] {
        assert!(joined.contains(number), "{number:?}:\n{seen}");
    }
    // Every answer in full in v, each under its attempt.
    let mut values = press(&mut console, &["v"]).await;
    for _ in 0..40 {
        values.push_str(&press(&mut console, &["j"]).await);
    }
    for heading in ["attempt #3 by worker-1", "attempt #2 by worker-1", "<html>bad gateway</html>"] {
        assert!(values.contains(heading), "{heading:?} in v:\n{values}");
    }
}

async fn a_detail_says_who_settled_it_when_and_how<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    // Resolved by a person: who, when and the command with its reason.
    l.submit(&raw("acme:resolved:1", r#"{"qty":1}"#)).await.unwrap();
    let claim = l.claim("worker-1", LEASE, 1).await.unwrap().pop().unwrap();
    let attempt = l.start_attempt(&claim).await.unwrap();
    let unknown = Report { outcome: Outcome::Unknown, error: Some("timed out".into()), evidence: Evidence::default() };
    l.record_result(&claim, attempt, &unknown).await.unwrap();
    l.manual(&person_request("acme:resolved:1", ManualCommand::ResolveCompleted { destination_id: "CRM-77".into() }))
        .await
        .unwrap();
    // Completed by a worker: the worker, its claim and the destination's answer.
    l.submit(&raw("acme:done:1", r#"{"qty":1}"#)).await.unwrap();
    let claim = l.claim("worker-2", LEASE, 1).await.unwrap().pop().unwrap();
    let attempt = l.start_attempt(&claim).await.unwrap();
    let done = Report {
        outcome: Outcome::Completed { destination_id: "R-123".into() },
        error: None,
        evidence: Evidence { status: Some(201), destination_id: Some("R-123".into()), body: Some("{}".into()) },
    };
    l.record_result(&claim, attempt, &done).await.unwrap();

    let mut console = ScriptedConsole::start(l, &options(), 80, 24).await.unwrap();
    let resolved = press(&mut console, &["9", "/", "acme:resolved", "<Enter>", "<Enter>"]).await;
    let joined = resolved.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(joined.contains("settled: resolved completed by Ana Lima at "), "{resolved}");
    assert!(joined.contains("record CRM-77, reason: checked the CRM by hand"), "{resolved}");
    let worker = press(&mut console, &["<Esc>", "<Esc>", "/", "acme:done", "<Enter>", "<Enter>"]).await;
    let joined = worker.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(joined.contains("settled: completed by worker-2 (ownership 1) at "), "{worker}");
    assert!(joined.contains("— HTTP 201, record R-123"), "{worker}");
}

/// The detail of an action retried twice and then failed, at 80x24: how it came to fail, and
/// (found by a search) its attempts newest first, each with its error and evidence.
#[tokio::test]
async fn retried_detail_screens() {
    let db = support::sqlite().await;
    retried_twice(&db.ledger, "acme:order:ORD-1050:create-task").await;
    let scenes: [(&str, &[&str]); 2] = [
        ("retried_detail", &["5", "<Enter>"]),
        ("retried_detail_attempts", &["5", "<Enter>", "/", "attempts (", "<Enter>"]),
    ];
    for (name, keys) in scenes {
        let mut console = ScriptedConsole::start(&db.ledger, &options(), 80, 24).await.unwrap();
        let screen = press(&mut console, keys).await;
        insta::assert_snapshot!(format!("{name}_80x24"), support::mask_times(&screen));
    }
}

async fn a_payload_reads_its_json_escapes_once<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let approved = serde_json::json!({ "note": "\u{1b}[2Jwiped", "path": "c:\\temp" }).to_string();
    let proposed = serde_json::json!({ "note": "\u{1b}[31mred", "path": "c:\\temp" }).to_string();
    l.submit(&raw("acme:escaped:1", &approved)).await.unwrap();
    l.submit(&raw("acme:escaped:1", &proposed)).await.unwrap();
    let mut console = ScriptedConsole::start(l, &options(), 80, 24).await.unwrap();
    let facts = press(&mut console, &["4", "<Enter>"]).await;
    assert!(facts.contains(r#"approved  "\u001b[2Jwiped""#), "{facts}");
    assert!(facts.contains(r#"proposed  "\u001b[31mred""#), "{facts}");
    let values = press(&mut console, &["v"]).await;
    assert!(values.contains(r#""note": "\u001b[2Jwiped""#), "{values}");
    assert!(values.contains(r#""path": "c:\\temp""#), "a backslash of the data is JSON's \\\\:\n{values}");
    for screen in [&facts, &values] {
        assert!(!screen.contains(r"\\u001b"), "no escape doubled:\n{screen}");
        assert!(screen.chars().all(|c| c == '\n' || !c.is_control()), "no control character on screen");
    }
}
