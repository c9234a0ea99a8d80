//! The update, key by key, on a model loaded by hand: no driver, no database.

use super::load::shell_word;
use super::*;
use crate::console::layout::ScrollLimits;
use crate::domain::input::{RawSubmission, Submission};
use crate::domain::{ActionRecord, ManualCommand, Person, State, Timestamp};
use crate::error::Kind;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

fn action(id: i64, key: &str, state: State) -> ActionRecord {
    let raw = RawSubmission { key: Some(key.into()), payload: b"{}".to_vec(), ..Default::default() };
    let mut action = ActionRecord::new_pending(&Submission::validate(&raw).unwrap(), Timestamp::default());
    action.id = id;
    action.state = state;
    action.revision = 4;
    action
}

fn key(code: KeyCode) -> Msg {
    Msg::Key(KeyEvent::new(code, KeyModifiers::NONE))
}

fn chars(model: &mut Model, text: &str) {
    for c in text.chars() {
        update(model, key(KeyCode::Char(c)));
    }
}

/// A model showing `rows` in the failed pane, as if loaded.
fn loaded(rows: Vec<ActionRecord>) -> Model {
    let mut model = Model::new("sqlite://test.db", Person::parse("ana").unwrap(), 80, 24);
    let _ = update(&mut model, key(KeyCode::Char('5')));
    let Some(Effect::Load(request)) = model.start().pop() else { panic!("a load") };
    let snapshot = Snapshot {
        counts: None,
        now: Timestamp::default(),
        rows: Rows::Actions(rows),
        blocked: std::collections::BTreeMap::new(),
    };
    update(&mut model, Msg::Done(Done::Loaded { request, result: Ok(snapshot) }));
    model
}

#[test]
fn switching_panes_loads_one_screen_of_the_new_pane() {
    let mut model = Model::new("x", Person::parse("ana").unwrap(), 80, 24);
    let effects = update(&mut model, key(KeyCode::Char('3')));
    let [Effect::Load(request)] = effects.as_slice() else { panic!("{effects:?}") };
    assert_eq!((request.pane, request.window, request.limit), (Pane::Unknown, Window::Newest, 16));
    assert_eq!(update(&mut model, key(KeyCode::Char('3'))), Vec::new(), "same pane: nothing to load");
    update(&mut model, key(KeyCode::BackTab));
    assert_eq!(model.pane, Pane::InProgress);
    update(&mut model, Msg::Key(KeyEvent::new(KeyCode::BackTab, KeyModifiers::SHIFT)));
    update(&mut model, key(KeyCode::BackTab));
    assert_eq!(model.pane, Pane::All, "wraps around, through the history panes");
}

#[test]
fn a_command_needs_a_reason_and_a_confirmation_and_checks_the_version_seen() {
    let mut model = loaded(vec![action(1, "acme:a", State::Failed)]);
    assert_eq!(update(&mut model, key(KeyCode::Char('r'))), Vec::new());
    let Mode::Dialog(dialog) = &model.mode else { panic!("a dialog opens") };
    assert!(dialog.description.iter().any(|d| d.contains("failed -> pending")), "{:?}", dialog.description);
    assert_eq!(update(&mut model, key(KeyCode::Enter)), Vec::new(), "no reason yet");
    assert_eq!(model.status.as_ref().map(|s| s.kind), Some(StatusKind::Error));
    chars(&mut model, "customer called");
    update(&mut model, key(KeyCode::Enter));
    assert!(matches!(&model.mode, Mode::Dialog(d) if d.stage == DialogStage::Confirm));
    let effects = update(&mut model, key(KeyCode::Char('y')));
    let [Effect::Run(request)] = effects.as_slice() else { panic!("{effects:?}") };
    assert_eq!(request.command, ManualCommand::Retry);
    assert_eq!(request.expect_version, Some(4));
    assert_eq!(request.reason.as_str(), "customer called");
    assert_eq!(request.person.as_str(), "ana");
    assert!(matches!(&model.mode, Mode::Dialog(d) if d.stage == DialogStage::Running));
    let effects = update(&mut model, Msg::Done(Done::Command(Err(Failure::new(Kind::Refused, "it changed")))));
    assert_eq!(model.mode, Mode::List);
    assert!(model.status.as_ref().unwrap().text.as_str().contains("refused: it changed"));
    assert!(matches!(effects.as_slice(), [Effect::Load(_)]), "refreshes after a command");
}

#[test]
fn escape_and_no_cancel_without_any_effect() {
    let mut model = loaded(vec![action(1, "acme:a", State::Failed)]);
    update(&mut model, key(KeyCode::Char('x')));
    chars(&mut model, "dup");
    assert_eq!(update(&mut model, key(KeyCode::Esc)), Vec::new());
    assert_eq!(model.mode, Mode::List);
    update(&mut model, key(KeyCode::Char('x')));
    chars(&mut model, "dup");
    update(&mut model, key(KeyCode::Enter));
    assert_eq!(update(&mut model, key(KeyCode::Char('n'))), Vec::new());
    assert_eq!(model.mode, Mode::List);
}

#[test]
fn a_command_the_state_does_not_allow_says_why_and_opens_nothing() {
    let mut model = loaded(vec![action(1, "acme:a", State::Failed)]);
    update(&mut model, key(KeyCode::Char('a')));
    assert_eq!(model.mode, Mode::List);
    let status = model.status.clone().unwrap();
    assert_eq!(status.kind, StatusKind::Error);
    assert!(status.text.as_str().contains("no proposed payload"), "{}", status.text);
}

#[test]
fn pasted_text_only_lands_in_a_text_field() {
    let mut model = loaded(vec![action(1, "acme:a", State::Failed)]);
    update(&mut model, Msg::Paste("x\ny".into()));
    assert_eq!(model.mode, Mode::List, "a paste while browsing runs no command");
    update(&mut model, key(KeyCode::Char('r')));
    update(&mut model, Msg::Paste("line one\r\nline two\u{1b}[2J".into()));
    let Mode::Dialog(dialog) = &model.mode else { panic!() };
    assert_eq!(dialog.reason, "line oneline two[2J");
}

#[test]
fn refresh_keeps_the_selection_on_the_same_key() {
    let mut model = loaded(vec![
        action(3, "acme:c", State::Failed),
        action(2, "acme:b", State::Failed),
        action(1, "acme:a", State::Failed),
    ]);
    update(&mut model, key(KeyCode::Char('j')));
    assert_eq!(model.selected_action().unwrap().key.as_str(), "acme:b");
    let effects = update(&mut model, Msg::Tick);
    let [Effect::Load(request)] = effects.as_slice() else { panic!("{effects:?}") };
    assert_eq!(request.select, Selection::Key("acme:b".into()));
    let rows = vec![
        action(4, "acme:d", State::Failed),
        action(2, "acme:b", State::Failed),
        action(1, "acme:a", State::Failed),
    ];
    let snapshot = Snapshot {
        counts: None,
        now: Timestamp::default(),
        rows: Rows::Actions(rows),
        blocked: std::collections::BTreeMap::new(),
    };
    update(&mut model, Msg::Done(Done::Loaded { request: request.clone(), result: Ok(snapshot) }));
    assert_eq!(model.selected_action().unwrap().key.as_str(), "acme:b");
    assert_eq!(update(&mut model, Msg::Tick).len(), 1);
    assert_eq!(update(&mut model, Msg::Tick), Vec::new(), "one refresh in flight at a time");
}

#[test]
fn database_errors_show_in_the_status_line() {
    let mut model = loaded(vec![action(1, "acme:a", State::Failed)]);
    let Some(Effect::Load(request)) = update(&mut model, Msg::Tick).pop() else { panic!() };
    update(
        &mut model,
        Msg::Done(Done::Loaded { request, result: Err(Failure::new(Kind::Error, "connection refused")) }),
    );
    assert!(model.status.unwrap().text.as_str().contains("database: connection refused"));
    assert!(!model.quit);
}

#[test]
fn key_releases_are_ignored_and_ctrl_c_quits_from_anywhere() {
    let mut model = loaded(vec![action(1, "acme:a", State::Failed)]);
    let mut release = KeyEvent::new(KeyCode::Char('q'), KeyModifiers::NONE);
    release.kind = KeyEventKind::Release;
    update(&mut model, Msg::Key(release));
    assert!(!model.quit);
    update(&mut model, key(KeyCode::Char('x')));
    update(&mut model, key(KeyCode::Char('q')));
    assert!(!model.quit, "q is text inside a dialog");
    update(&mut model, Msg::Key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)));
    assert!(model.quit);
}

#[test]
fn counts_and_command_words_as_a_person_reads_them() {
    let cases = [(0, "0"), (999, "999"), (1000, "1,000"), (12_345, "12,345"), (1_234_567, "1,234,567")];
    for (n, text) in cases {
        assert_eq!(thousands(n), text);
    }
    assert_eq!(shell_word("crm"), "crm");
    assert_eq!(shell_word("Ana Lima"), "'Ana Lima'");
    assert_eq!(shell_word("it's"), r"'it'\''s'");
    let orders = [Order::NewestFirst, Order::OldestFirst, Order::MostAttempts, Order::NewestFirst];
    for pair in orders.windows(2) {
        assert_eq!(pair[0].next(), pair[1], "s steps through the orders and round again");
    }
}

#[test]
fn moving_past_the_window_loads_the_next_one() {
    let mut model = loaded((1..=16).rev().map(|n| action(n, &format!("acme:{n}"), State::Failed)).collect());
    for _ in 0..15 {
        assert_eq!(update(&mut model, key(KeyCode::Down)), Vec::new());
    }
    let effects = update(&mut model, key(KeyCode::Down));
    let [Effect::Load(request)] = effects.as_slice() else { panic!("{effects:?}") };
    assert_eq!((request.window, &request.select), (Window::Before(1), &Selection::First));
    let effects = update(&mut model, key(KeyCode::Char('G')));
    assert!(matches!(effects.as_slice(), [Effect::Load(LoadRequest { window: Window::Oldest, .. })]));
}

#[test]
fn a_command_that_failed_is_not_called_refused() {
    let mut model = loaded(vec![action(1, "acme:a", State::Unknown)]);
    let failed = Failure::new(Kind::Error, "lookup failed: connection refused");
    update(&mut model, Msg::Done(Done::Command(Err(failed))));
    let status = model.status.clone().unwrap();
    assert_eq!(status.kind, StatusKind::Error);
    assert!(status.text.as_str().starts_with("failed: lookup failed"), "{}", status.text);
    assert_eq!((model.refusals, model.failures, model.stopped), (0, 1, Some(Kind::Error)));
    let refused = Failure::new(Kind::Refused, "it changed");
    update(&mut model, Msg::Done(Done::Command(Err(refused))));
    assert_eq!((model.refusals, model.failures, model.stopped), (1, 1, Some(Kind::Refused)));
}

#[test]
fn scrolling_is_bounded_by_the_limits_the_view_measured() {
    let mut model = loaded(vec![action(1, "acme:a", State::Failed)]);
    update(&mut model, key(KeyCode::Char('?')));
    assert!(model.help);
    model.scroll_limits = ScrollLimits { help: 3, ..ScrollLimits::default() };
    update(&mut model, key(KeyCode::Char('G')));
    assert_eq!(model.help_scroll, 3);
    update(&mut model, key(KeyCode::Char('k')));
    assert_eq!(model.help_scroll, 2, "Up after End moves at once");
    for _ in 0..5 {
        update(&mut model, key(KeyCode::Char('j')));
    }
    assert_eq!(model.help_scroll, 3, "never past the end");
}

#[test]
fn ctrl_z_asks_to_suspend_from_anywhere_and_types_nothing() {
    let ctrl_z = || Msg::Key(KeyEvent::new(KeyCode::Char('z'), KeyModifiers::CONTROL));
    let mut model = loaded(vec![action(1, "acme:a", State::Failed)]);
    assert_eq!(update(&mut model, ctrl_z()), vec![Effect::Suspend]);
    update(&mut model, key(KeyCode::Char('r')));
    chars(&mut model, "called");
    assert_eq!(update(&mut model, ctrl_z()), vec![Effect::Suspend], "inside a dialog's text field too");
    let Mode::Dialog(dialog) = &model.mode else { panic!("the dialog stays open for fg") };
    assert_eq!(dialog.reason, "called", "no z typed");
    assert!(!model.quit);
}

/// This host's time as the driver would hand it over: 14:02 and `seconds`.
fn at(seconds: u32) -> Timestamp {
    chrono::TimeZone::with_ymd_and_hms(&chrono::Utc, 2024, 5, 1, 14, 2, seconds).unwrap()
}

/// A refresh asked for at `now`, and its answer: rows, or a load that could not reach the ledger.
fn refresh_at(model: &mut Model, now: Timestamp, reached: bool) {
    model.clock = Some(now);
    let effects = update(model, Msg::Tick);
    let [Effect::Load(request)] = effects.as_slice() else { panic!("a refresh: {effects:?}") };
    let done = if reached {
        let rows = model.rows.clone();
        let snapshot =
            Snapshot { counts: None, now: Timestamp::default(), rows, blocked: std::collections::BTreeMap::new() };
        Done::Loaded { request: request.clone(), result: Ok(snapshot) }
    } else {
        Done::Unreachable { request: request.clone(), message: "no answer from the ledger within 2s".into() }
    };
    update(model, Msg::Done(done));
}

fn status_text(model: &Model) -> &str {
    model.status.as_ref().map_or("", |s| s.text.as_str())
}

#[test]
fn a_ledger_that_stops_answering_is_said_from_the_first_load_that_cannot_reach_it() {
    let mut model = loaded(vec![action(1, "acme:a", State::Failed)]);
    refresh_at(&mut model, at(5), true);
    assert_eq!((model.connection.refreshed, &model.connection.away), (Some(at(5)), &None));

    refresh_at(&mut model, at(11), false);
    let away = model.connection.away.clone().expect("away");
    assert_eq!((away.since, away.since_text().as_str()), (Some(at(11)), " since 14:02:11 UTC"));
    assert_eq!(model.connection.refreshed, Some(at(5)), "rows last came at 14:02:05");
    assert_eq!(model.status.as_ref().map(|s| s.kind), Some(StatusKind::Error));
    assert_eq!(status_text(&model), "database: no answer from the ledger within 2s (the console keeps trying)");
    assert_eq!(model.selected_action().map(|a| a.key.as_str()), Some("acme:a"), "the rows last read stay");
    assert_eq!(model.failures, 0, "no command failed");

    refresh_at(&mut model, at(13), false);
    assert_eq!(model.connection.away.as_ref().and_then(|a| a.since), Some(at(11)), "since the first failure");
}

#[test]
fn while_the_ledger_is_away_commands_are_held_back_before_their_dialog() {
    let mut model = loaded(vec![action(1, "acme:a", State::Failed)]);
    refresh_at(&mut model, at(11), false);
    let reason = "the ledger cannot be reached since 14:02:11 UTC: nothing was changed; try again once it is back";
    for (n, command) in ['r', 'x', 'o', 'l', '*'].into_iter().enumerate() {
        assert_eq!(update(&mut model, key(KeyCode::Char(command))), Vec::new(), "{command}");
        assert_eq!(model.mode, Mode::List, "{command}: no dialog opens");
        assert_eq!(status_text(&model), reason);
        let n = u64::try_from(n).unwrap() + 1;
        assert_eq!(
            (model.failures, model.refusals, model.stopped),
            (n, 0, Some(Kind::Error)),
            "a failure, not a refusal"
        );
    }
    update(&mut model, key(KeyCode::Char(' ')));
    assert_eq!(model.marks.len(), 1, "marking asks nothing of the ledger");
}

#[test]
fn a_dialog_open_when_the_ledger_went_away_runs_nothing_and_stays_open() {
    let mut model = loaded(vec![action(1, "acme:a", State::Failed)]);
    update(&mut model, key(KeyCode::Char('r')));
    chars(&mut model, "customer called");
    update(&mut model, key(KeyCode::Enter));
    refresh_at(&mut model, at(11), false);
    assert_eq!(update(&mut model, key(KeyCode::Char('y'))), Vec::new(), "no command sent");
    assert!(matches!(&model.mode, Mode::Dialog(d) if d.stage == DialogStage::Confirm && d.reason == "customer called"));
    assert!(status_text(&model).contains("the dialog stays open"), "{}", status_text(&model));
    assert_eq!((model.failures, model.stopped), (1, Some(Kind::Error)));
    refresh_at(&mut model, at(14), true);
    let effects = update(&mut model, key(KeyCode::Char('y')));
    assert!(matches!(effects.as_slice(), [Effect::Run(_)]), "once it is back: {effects:?}");
}

#[test]
fn the_ledger_answering_again_clears_the_outage_and_its_status_line() {
    let mut model = loaded(vec![action(1, "acme:a", State::Failed)]);
    update(&mut model, key(KeyCode::Enter));
    refresh_at(&mut model, at(11), false);
    let effects = update(&mut model, Msg::Tick);
    assert!(
        matches!(effects.as_slice(), [Effect::Load(_)]),
        "while away only the rows ask for the ledger, not the open detail: {effects:?}"
    );
    let Some(Effect::Load(request)) = effects.into_iter().next() else { unreachable!() };
    model.clock = Some(at(15));
    let rows = model.rows.clone();
    let snapshot =
        Snapshot { counts: None, now: Timestamp::default(), rows, blocked: std::collections::BTreeMap::new() };
    let effects = update(&mut model, Msg::Done(Done::Loaded { request, result: Ok(snapshot) }));
    assert!(matches!(effects.as_slice(), [Effect::LoadDetail { .. }]), "the detail is read again: {effects:?}");
    assert_eq!((model.connection.refreshed, &model.connection.away), (Some(at(15)), &None));
    assert_eq!(model.status, None, "the outage's status line is taken down");
    update(&mut model, key(KeyCode::Esc));
    assert_eq!(update(&mut model, key(KeyCode::Char('r'))), Vec::new());
    assert!(matches!(&model.mode, Mode::Dialog(_)), "commands run again");

    // A command held back is the outage's to say, and goes with it; what else was said stays.
    update(&mut model, key(KeyCode::Esc));
    refresh_at(&mut model, at(20), false);
    update(&mut model, key(KeyCode::Char('r')));
    assert!(status_text(&model).starts_with("the ledger cannot be reached"));
    refresh_at(&mut model, at(22), true);
    assert_eq!(model.status, None);
    refresh_at(&mut model, at(30), false);
    update(&mut model, key(KeyCode::Char('u')));
    refresh_at(&mut model, at(32), true);
    assert_eq!(status_text(&model), "0 marks cleared");
}

#[test]
fn a_late_answer_to_an_earlier_load_says_nothing_of_the_connection() {
    let mut model = loaded(vec![action(1, "acme:a", State::Failed)]);
    let Some(Effect::Load(earlier)) = update(&mut model, Msg::Tick).pop() else { panic!("a refresh") };
    let Some(Effect::Load(later)) = update(&mut model, key(KeyCode::Char('G'))).pop() else { panic!("a load") };
    model.clock = Some(at(11));
    let message = "no answer from the ledger within 2s".to_owned();
    update(&mut model, Msg::Done(Done::Unreachable { request: later, message }));
    let rows = model.rows.clone();
    let snapshot =
        Snapshot { counts: None, now: Timestamp::default(), rows, blocked: std::collections::BTreeMap::new() };
    update(&mut model, Msg::Done(Done::Loaded { request: earlier, result: Ok(snapshot) }));
    assert!(model.connection.away.is_some(), "a read sent before the failure proves nothing after it");
}

#[test]
fn news_of_one_pane_is_not_carried_to_the_next_but_an_error_is() {
    let mut model = loaded(vec![action(1, "acme:1", State::Failed)]);
    model.info("acme:2 left the failed pane; the selection is now on acme:1");
    update(&mut model, key(KeyCode::Char('3')));
    assert_eq!(model.status, None, "an action that left the failed pane is not news in the unknown pane");
    model.error("database: no answer");
    update(&mut model, key(KeyCode::Char('5')));
    assert!(model.status.as_ref().is_some_and(|s| s.kind == StatusKind::Error), "an error stays until replaced");
}
