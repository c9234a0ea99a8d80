//! The pure update: `update(&mut Model, Msg) -> Vec<Effect>`. A key becomes an action through the
//! bindings, an action changes the model and asks for effects; results come back as messages.
//! Nothing here touches the database, the clock or the terminal.

use super::connection;
use super::dialog::{self, on_dialog_key, open_bulk_dialog, open_dialog};
use super::effect::{Done, Effect, LoadRequest, Msg, Selection, Window};
use super::load;
use super::state::{
    DetailSearch, DetailView, DialogStage, FilterTerms, MARK_ALL_LIMIT, Mode, Model, Pane, Rows, StatusKind, text_field,
};
use crate::console::keys::{Action, browse_action, detail_action};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// Applies one message; returns the work it asks the driver to do.
pub fn update(model: &mut Model, msg: Msg) -> Vec<Effect> {
    match msg {
        Msg::Key(key) if key.kind == KeyEventKind::Press => {
            model.hint = None;
            on_key(model, key)
        }
        Msg::Key(_) => Vec::new(),
        Msg::Paste(text) => {
            // Pasted text only ever lands in a text field, flattened to one line.
            let clean: String = text.chars().filter(|c| !c.is_control()).collect();
            if let Some(field) = text_field(model) {
                field.push_str(&clean);
            }
            Vec::new()
        }
        Msg::Resize(width, height) => {
            let grew = height > model.height;
            model.width = width;
            model.height = height;
            if grew { model.refresh() } else { Vec::new() }
        }
        Msg::Tick | Msg::Changed => {
            if model.loading.is_some() || matches!(&model.mode, Mode::Dialog(d) if d.stage == DialogStage::Running) {
                Vec::new()
            } else {
                let mut effects = model.refresh();
                // While the ledger is away only the rows ask for it; the open detail is read again
                // once it answers.
                if model.connection.away.is_some() {
                    effects.retain(|effect| matches!(effect, Effect::Load(_)));
                }
                effects
            }
        }
        Msg::Done(done) => on_done(model, done),
    }
}

fn on_key(model: &mut Model, key: KeyEvent) -> Vec<Effect> {
    if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
        model.quit = true;
        return Vec::new();
    }
    // From anywhere, as Ctrl-C: in a dialog's text field too, where it would otherwise type a z.
    // What is open stays open for `fg`.
    if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('z') {
        return vec![Effect::Suspend];
    }
    if model.result.is_some() {
        let max = model.scroll_limits.result;
        let Some(result) = &mut model.result else { return Vec::new() };
        let page = 10;
        match key.code {
            KeyCode::Esc | KeyCode::Char('q') | KeyCode::Enter => model.result = None,
            KeyCode::Down | KeyCode::Char('j') => result.scroll = result.scroll.min(max).saturating_add(1).min(max),
            KeyCode::Up | KeyCode::Char('k') => result.scroll = result.scroll.min(max).saturating_sub(1),
            KeyCode::PageDown => result.scroll = result.scroll.saturating_add(page).min(max),
            KeyCode::PageUp => result.scroll = result.scroll.min(max).saturating_sub(page),
            KeyCode::End | KeyCode::Char('G') => result.scroll = max,
            KeyCode::Home | KeyCode::Char('g') => result.scroll = 0,
            _ => {}
        }
        return Vec::new();
    }
    if model.help {
        let max = model.scroll_limits.help;
        match key.code {
            KeyCode::Esc | KeyCode::Char('?' | 'q') | KeyCode::Enter => model.help = false,
            KeyCode::Down | KeyCode::Char('j') => {
                model.help_scroll = model.help_scroll.min(max).saturating_add(1).min(max);
            }
            KeyCode::Up | KeyCode::Char('k') => model.help_scroll = model.help_scroll.min(max).saturating_sub(1),
            KeyCode::End | KeyCode::Char('G') | KeyCode::PageDown => model.help_scroll = max,
            KeyCode::Home | KeyCode::Char('g') | KeyCode::PageUp => model.help_scroll = 0,
            _ => {}
        }
        return Vec::new();
    }
    match &model.mode {
        Mode::Filter(_) => on_filter_key(model, key),
        Mode::Dialog(_) => on_dialog_key(model, key),
        Mode::Detail if model.search_line.is_some() => {
            on_search_key(model, key);
            Vec::new()
        }
        Mode::Detail => match detail_action(key, model.detail_search.is_some()) {
            Some(action) => on_action(model, action),
            None => Vec::new(),
        },
        Mode::List => match browse_action(key) {
            Some(action) => on_action(model, action),
            None => Vec::new(),
        },
    }
}

/// The detail's search line: typed in the status line as the filter is; Enter applies it and
/// shows the first match, Esc closes it and leaves the search as it was.
fn on_search_key(model: &mut Model, key: KeyEvent) {
    let Some(line) = &mut model.search_line else { return };
    match key.code {
        KeyCode::Char(c) => line.push(c),
        KeyCode::Backspace => {
            line.pop();
        }
        KeyCode::Esc => model.search_line = None,
        KeyCode::Enter => {
            let text = model.search_line.take().unwrap_or_default();
            if text.is_empty() {
                if model.detail_search.take().is_some() {
                    model.info("search ended");
                }
                return;
            }
            // The view measured the matches of the line as typed, before this key.
            if model.scroll_limits.detail_matches.is_empty() {
                model.detail_search = None;
                model.error(format!("no match for \"{text}\""));
                return;
            }
            model.detail_search = Some(DetailSearch { text, current: 0 });
            show_match(model, None);
        }
        _ => {}
    }
}

/// `v` in an open detail: every value in full, or back to the facts.
fn toggle_values(model: &mut Model) {
    model.detail_view = match model.detail_view {
        DetailView::Facts => DetailView::Values,
        DetailView::Values => DetailView::Facts,
    };
    model.detail_scroll = 0;
    // The search stays applied; its matches are counted again in the other view.
    if let Some(search) = &mut model.detail_search {
        search.current = 0;
    }
}

/// `n` and `N`: the next or previous match of the detail's search, round past either end.
fn step_match(model: &mut Model, action: Action) {
    let count = model.scroll_limits.detail_matches.len();
    let Some(search) = &mut model.detail_search else { return };
    if count == 0 {
        let text = format!("no match for \"{}\"", search.text);
        model.error(text);
        return;
    }
    let at = search.current.min(count - 1);
    let (next, wrapped) = match action {
        Action::PreviousMatch if at == 0 => (count - 1, Some("wrapped to the end")),
        Action::PreviousMatch => (at - 1, None),
        _ if at + 1 == count => (0, Some("wrapped to the top")),
        _ => (at + 1, None),
    };
    search.current = next;
    show_match(model, wrapped);
}

/// Scrolls the detail to the current match, its row at the top where the detail has room below,
/// and says which it is.
fn show_match(model: &mut Model, wrapped: Option<&str>) {
    let Some(search) = &model.detail_search else { return };
    let count = model.scroll_limits.detail_matches.len();
    let Some(&row) = model.scroll_limits.detail_matches.get(search.current) else { return };
    model.detail_scroll = row.min(model.scroll_limits.detail);
    let wrapped = wrapped.map(|w| format!(" ({w})")).unwrap_or_default();
    model.info(format!("match {} of {count} for \"{}\"{wrapped}", search.current + 1, search.text));
}

/// The filter line: it narrows the pane and its counts as it is typed; Enter keeps it, Esc puts
/// back the filter it started from.
fn on_filter_key(model: &mut Model, key: KeyEvent) -> Vec<Effect> {
    let Mode::Filter(text) = &mut model.mode else { return Vec::new() };
    match key.code {
        KeyCode::Char(c) => text.push(c),
        KeyCode::Backspace => {
            text.pop();
        }
        KeyCode::Esc => {
            model.mode = Mode::List;
            let before = model.filter_before_edit.take();
            if before == model.filter {
                return Vec::new();
            }
            model.filter = before;
            model.info("filter put back as it was");
            return vec![filtered_load(model)];
        }
        KeyCode::Enter => {
            let text = text.trim().to_owned();
            let terms = match FilterTerms::parse(&text, &model.owner) {
                Ok(terms) => terms,
                Err(problem) => {
                    model.refuse(problem.to_string());
                    return Vec::new();
                }
            };
            model.filter_before_edit = None;
            model.mode = Mode::List;
            let changed = model.filter.as_ref().map(|f| &f.line) != (!text.is_empty()).then_some(&text);
            model.filter = (!text.is_empty()).then_some(terms);
            match &model.filter {
                Some(f) => {
                    model.info(format!("showing {}; / then Enter on an empty filter clears it", f.describe()));
                }
                None => model.info("filter cleared"),
            }
            return if changed { vec![filtered_load(model)] } else { Vec::new() };
        }
        _ => return Vec::new(),
    }
    // As typed: a line that parses narrows the pane at once; one that does not yet (`age:3`
    // on its way to `age:30m`) leaves it as it was, and the status line says why.
    let line = text.trim().to_owned();
    match FilterTerms::parse(&line, &model.owner) {
        Ok(terms) => {
            let terms = (!line.is_empty()).then_some(terms);
            if terms == model.filter {
                return Vec::new();
            }
            model.filter = terms;
            vec![filtered_load(model)]
        }
        Err(_) => Vec::new(),
    }
}

/// `/` in the list: the filter line, which narrows the pane as it is typed; what Esc puts back
/// is the filter applied now.
fn open_filter(model: &mut Model) -> Vec<Effect> {
    model.filter_before_edit.clone_from(&model.filter);
    model.mode = Mode::Filter(String::new());
    Vec::new()
}

/// The pane's first rows under the filter now set, with the counts, which follow the filter; the
/// selection stays on its action where the filter still shows it.
fn filtered_load(model: &mut Model) -> Effect {
    let select = model.selected_key().map_or(Selection::First, |key| Selection::KeyOr(key, 0));
    model.load_counted(Window::Newest, select)
}

fn on_action(model: &mut Model, action: Action) -> Vec<Effect> {
    let in_detail = model.mode == Mode::Detail;
    match action {
        // Refused before any dialog opens: nothing typed for a command that cannot run.
        Action::Command(_) | Action::MarkAll if connection::hold_back(model, "") => Vec::new(),
        Action::Quit => {
            model.quit = true;
            Vec::new()
        }
        Action::Suspend => vec![Effect::Suspend],
        Action::Help => {
            model.help = true;
            model.help_scroll = 0;
            Vec::new()
        }
        Action::SelectPane(index) if index >= 8 => switch_pane(model, model.history),
        Action::SelectPane(index) => switch_pane(model, Pane::ALL[index]),
        Action::Sort | Action::NextHistory => reorder_or_history(model, action),
        Action::NextPane => switch_pane(model, model.pane.step(1)),
        Action::PreviousPane => switch_pane(model, model.pane.step(-1)),
        Action::Down | Action::Up | Action::PageDown | Action::PageUp | Action::Top | Action::Bottom if in_detail => {
            scroll_detail(model, action);
            Vec::new()
        }
        Action::Down => move_selection(model, 1),
        Action::Up => move_selection(model, -1),
        Action::PageDown => match model.rows.ids().1 {
            Some(last) if model.rows.len() >= model.page() => {
                vec![model.load(Window::Before(last), Selection::Index(model.selected))]
            }
            _ => {
                model.selected = model.rows.len().saturating_sub(1);
                Vec::new()
            }
        },
        Action::PageUp => match model.rows.ids().0 {
            Some(first) if !model.at_newest => vec![model.load(Window::After(first), Selection::Index(model.selected))],
            _ => {
                model.selected = 0;
                Vec::new()
            }
        },
        Action::Top => vec![model.load(Window::Newest, Selection::First)],
        Action::Bottom => vec![model.load(Window::Oldest, Selection::Last)],
        Action::Values if in_detail && model.detail.is_some() => {
            toggle_values(model);
            Vec::new()
        }
        Action::Search => {
            model.search_line = Some(String::new());
            Vec::new()
        }
        Action::NextMatch | Action::PreviousMatch => {
            step_match(model, action);
            Vec::new()
        }
        Action::NextProposal => next_proposal(model, in_detail),
        Action::Values | Action::Open => match model.selected_action().map(|a| a.key.clone()) {
            Some(key) if !in_detail => {
                model.mode = Mode::Detail;
                model.detail_scroll = 0;
                model.detail_search = None;
                model.proposal_shown = 0;
                model.detail_view = if action == Action::Values { DetailView::Values } else { DetailView::Facts };
                model.detail = None;
                vec![model.load_detail(key)]
            }
            Some(_) => Vec::new(),
            None => {
                // A refused submission has no action: its detail shows the row in full.
                if model.pane == Pane::Refused && !in_detail && !model.rows.is_empty() {
                    model.mode = Mode::Detail;
                    model.detail_search = None;
                    model.detail_view = DetailView::Facts;
                    model.detail_scroll = 0;
                    model.detail = None;
                }
                Vec::new()
            }
        },
        Action::Back => {
            if in_detail && model.detail_search.take().is_some() {
                model.info("search ended");
            } else if in_detail && model.detail_view == DetailView::Values {
                model.detail_view = DetailView::Facts;
                model.detail_scroll = 0;
            } else if in_detail {
                model.mode = Mode::List;
                model.detail = None;
            } else if model.filter.take().is_some() {
                model.info("filter cleared");
                return vec![filtered_load(model)];
            }
            Vec::new()
        }
        Action::Filter => open_filter(model),
        Action::Mark | Action::MarkAll | Action::ClearMarks => on_mark(model, action),
        Action::CopyKey | Action::CopyDestinationId => copy(model, action),
        Action::Command(kind) if kind.applies_to_marks() && !model.marks.is_empty() => open_bulk_dialog(model, kind),
        Action::Command(kind) => open_dialog(model, kind),
    }
}

/// Marks for bulk triage: Space, `*` and `u`.
fn on_mark(model: &mut Model, action: Action) -> Vec<Effect> {
    let in_detail = model.mode == Mode::Detail;
    match action {
        Action::Mark => {
            match model.selected_action().cloned() {
                Some(action) => {
                    let key = action.key.to_string();
                    if model.marks.remove(&key).is_none() {
                        model.marks.insert(key, action);
                        if !in_detail {
                            // Down after marking, as in file managers: Space Space Space marks three.
                            return move_selection(model, 1);
                        }
                    }
                }
                None => model.refuse("nothing to mark: only actions can be marked"),
            }
            Vec::new()
        }
        Action::MarkAll => {
            if model.pane == Pane::Refused {
                model.refuse("refused submissions cannot be marked: they are not actions");
                return Vec::new();
            }
            // Not a load of the screen: the screen's own loads are left as they are.
            vec![Effect::MarkAll(LoadRequest {
                id: 0,
                pane: model.pane,
                window: Window::Newest,
                limit: MARK_ALL_LIMIT,
                filter: model.filter.clone().map(Box::new),
                select: Selection::First,
                order: model.list_order(),
                with_counts: false,
            })]
        }
        Action::ClearMarks => {
            let n = model.marks.len();
            model.marks.clear();
            model.info(format!("{n} marks cleared"));
            Vec::new()
        }
        _ => Vec::new(),
    }
}

/// `y` and `Y`: the selected action's key or destination id, to the clipboard.
fn copy(model: &mut Model, action: Action) -> Vec<Effect> {
    let Some(selected) = model.selected_action() else {
        model.refuse("nothing to copy: choose an action first");
        return Vec::new();
    };
    let (what, text) = match action {
        Action::CopyDestinationId => {
            let Some(id) = selected.destination_id.clone() else {
                let text = format!("{} has no destination id yet: nothing copied", selected.key);
                model.refuse(text);
                return Vec::new();
            };
            ("destination id", id)
        }
        _ => ("key", selected.key.to_string()),
    };
    model.info(format!("copied {what} {text} to the clipboard (through the terminal)"));
    vec![Effect::Copy(text)]
}

/// `s` (newest or oldest first) and `h` (the next history pane).
fn reorder_or_history(model: &mut Model, action: Action) -> Vec<Effect> {
    match action {
        Action::Sort => {
            model.order = model.order.next();
            model.info(model.order.title());
            // The selection stays on its action, now shown in the other order.
            let select = model.selected_key().map_or(Selection::First, Selection::Key);
            vec![model.load(Window::Newest, select)]
        }
        Action::NextHistory => {
            let next = if model.pane.is_history() {
                let at = Pane::HISTORY.iter().position(|p| *p == model.pane).unwrap_or(0);
                Pane::HISTORY[(at + 1) % Pane::HISTORY.len()]
            } else {
                model.history
            };
            switch_pane(model, next)
        }
        _ => Vec::new(),
    }
}

/// Scrolls the open detail, bounded by its lines as wrapped at this width, so that `End` shows
/// the end and `Up` after it moves at once.
fn scroll_detail(model: &mut Model, action: Action) {
    let (max, page) = (model.scroll_limits.detail, usize::from(model.scroll_limits.detail_page));
    let scroll = model.detail_scroll.min(max);
    model.detail_scroll = match action {
        Action::Down => scroll.saturating_add(1),
        Action::Up => scroll.saturating_sub(1),
        Action::PageDown => scroll.saturating_add(page),
        Action::PageUp => scroll.saturating_sub(page),
        Action::Top => 0,
        _ => max,
    }
    .min(max);
}

/// Shows the next of the proposals waiting on the open action, round to the first.
fn next_proposal(model: &mut Model, in_detail: bool) -> Vec<Effect> {
    let waiting = model.detail.as_ref().filter(|_| in_detail).map_or(0, |d| d.waiting_proposals().count());
    if waiting > 1 {
        model.proposal_shown = (model.proposal_shown + 1) % waiting;
        model.detail_scroll = 0;
    } else {
        model.refuse("no other proposal waits on this action");
    }
    Vec::new()
}

fn switch_pane(model: &mut Model, pane: Pane) -> Vec<Effect> {
    model.mode = Mode::List;
    model.detail = None;
    if pane == model.pane {
        return Vec::new();
    }
    model.pane = pane;
    // What happened in the pane left behind (an action that left it, a filter shown) is not
    // news in the next one; an error stays until something replaces it.
    if model.status.as_ref().is_some_and(|s| s.kind == StatusKind::Info) {
        model.status = None;
    }
    if pane.is_history() {
        model.history = pane;
    }
    model.selected = 0;
    model.rows = if pane == Pane::Refused { Rows::Refused(Vec::new()) } else { Rows::Actions(Vec::new()) };
    model.at_newest = true;
    vec![model.load(Window::Newest, Selection::First)]
}

fn move_selection(model: &mut Model, by: isize) -> Vec<Effect> {
    let len = model.rows.len();
    let target = model.selected.cast_signed() + by;
    if target >= 0 && target < len.cast_signed() {
        model.selected = usize::try_from(target).unwrap_or(0);
        return Vec::new();
    }
    let (first, last) = model.rows.ids();
    match (by > 0, first, last) {
        (true, _, Some(last)) if len >= model.page() => vec![model.load(Window::Before(last), Selection::First)],
        (false, Some(first), _) if !model.at_newest => vec![model.load(Window::After(first), Selection::Last)],
        _ => Vec::new(),
    }
}

/// An effect's result, to the part of the model it concerns.
fn on_done(model: &mut Model, done: Done) -> Vec<Effect> {
    match done {
        Done::Loaded { request, result } => {
            let mut effects = Vec::new();
            if result.is_ok()
                && connection::answered(model, request.id)
                && model.mode == Mode::Detail
                && let Some(key) = model.selected_action().map(|a| a.key.clone())
            {
                // The open detail was not read while the ledger was away.
                effects.push(model.load_detail(key));
            }
            effects.extend(load::on_loaded(model, &request, result));
            effects
        }
        Done::Unreachable { request, message } => {
            connection::unreachable(model, &request, &message);
            Vec::new()
        }
        Done::DetailLoaded { id, result } => {
            if !dialog::on_evidence_loaded(model, id, &result) {
                load::on_detail_loaded(model, id, result);
            }
            Vec::new()
        }
        Done::FactsLoaded { id, result } => {
            dialog::on_facts_loaded(model, id, result);
            Vec::new()
        }
        Done::Each { verb, results } => dialog::on_each_done(model, verb, results),
        Done::Copied => Vec::new(),
        Done::Marked { request, result } => load::on_marked(model, &request, result),
        Done::Command(result) => dialog::on_command_done(model, result),
    }
}
