//! What the console loads and refreshes, and how what arrives is applied: one screen of rows at a
//! time, the selection kept on its key, the marks kept on the version last seen.

use super::effect::{Effect, LoadRequest, MarkedSet, Selection, Snapshot, Window};
use super::state::{Failure, MARK_ALL_LIMIT, Mode, Model, Order, Pane, Rows, Status, thousands};
use crate::console::layout::visible_rows;
use crate::console::safe_text::SafeText;
use crate::domain::{ActionKey, ActionRecord};
use crate::ledger::ActionDetail;
use crate::store::ListOrder;

impl Model {
    /// The first effect: load the first pane, with the counts.
    pub fn start(&mut self) -> Vec<Effect> {
        vec![self.load_counted(Window::Newest, Selection::First)]
    }

    /// The order the store pages the pane in: refused submissions are always newest first.
    pub(super) fn list_order(&self) -> ListOrder {
        match self.order {
            _ if self.pane == Pane::Refused => ListOrder::NewestFirst,
            Order::NewestFirst => ListOrder::NewestFirst,
            Order::OldestFirst => ListOrder::OldestFirst,
            Order::MostAttempts => ListOrder::MostAttempts,
        }
    }

    pub(super) fn page(&self) -> usize {
        visible_rows(self.height)
    }

    /// One screen of the pane's rows: what moving around asks, one indexed page query.
    pub(super) fn load(&mut self, window: Window, select: Selection) -> Effect {
        self.load_rows(window, select, false)
    }

    /// One screen of rows with the counts per state: what the first screen, a refresh and a new
    /// filter ask.
    pub(super) fn load_counted(&mut self, window: Window, select: Selection) -> Effect {
        self.load_rows(window, select, true)
    }

    fn load_rows(&mut self, window: Window, select: Selection, with_counts: bool) -> Effect {
        self.next_request += 1;
        self.loading = Some(self.next_request);
        Effect::Load(LoadRequest {
            id: self.next_request,
            pane: self.pane,
            window,
            limit: i64::try_from(self.page()).unwrap_or(i64::MAX),
            filter: self.filter.clone().map(Box::new),
            select,
            order: self.list_order(),
            with_counts,
        })
    }

    /// Reloads the window on screen, keeping the selection on the same key.
    pub(super) fn refresh(&mut self) -> Vec<Effect> {
        let window = match (self.at_newest, self.rows.ids().0) {
            (false, Some(first)) => Window::From(first),
            _ => Window::Newest,
        };
        let select = self.selected_key().map_or(Selection::First, Selection::Key);
        let mut effects = vec![self.load_counted(window, select)];
        if let (Mode::Detail, Some(detail)) = (&self.mode, &self.detail) {
            let key = detail.action.key.clone();
            effects.push(self.load_detail(key));
        }
        effects
    }

    pub(super) fn load_detail(&mut self, key: ActionKey) -> Effect {
        self.detail_request += 1;
        Effect::LoadDetail { id: self.detail_request, key }
    }

    /// What `command` on each of `actions` will be decided from, read for a bulk dialog under
    /// the same numbering as the details read for dialogs.
    pub(super) fn load_facts(&mut self, command: crate::domain::ManualCommand, actions: Vec<ActionRecord>) -> Effect {
        self.detail_request += 1;
        Effect::LoadFacts { id: self.detail_request, command, actions }
    }
}

/// A window of rows arrived: applied if it is the last one asked for, for the pane shown.
pub(super) fn on_loaded(model: &mut Model, request: &LoadRequest, result: Result<Snapshot, Failure>) -> Vec<Effect> {
    if model.loading == Some(request.id) {
        model.loading = None;
    }
    if request.id != model.next_request || request.pane != model.pane {
        return Vec::new();
    }
    match result {
        Err(failure) => {
            model.error(format!("database: {} (the console keeps trying)", failure.message));
            Vec::new()
        }
        Ok(snapshot) => apply_snapshot(model, request, snapshot),
    }
}

/// The open detail arrived: shown if it is the last one asked for and a detail is still open.
pub(super) fn on_detail_loaded(model: &mut Model, id: u64, result: Result<Box<ActionDetail>, Failure>) {
    if id == model.detail_request && matches!(model.mode, Mode::Detail | Mode::Dialog(_)) {
        match result {
            Ok(detail) => model.detail = Some(detail),
            Err(failure) => model.error(format!("database: {}", failure.message)),
        }
    }
}

/// What `*` found: marked, and said, never silently partial.
pub(super) fn on_marked(model: &mut Model, request: &LoadRequest, result: Result<MarkedSet, Failure>) -> Vec<Effect> {
    match result {
        Ok(set) => {
            let n = set.actions.len();
            for action in set.actions {
                model.marks.insert(action.key.to_string(), action);
            }
            let filter = if model.filter.is_some() { " that match the filter" } else { "" };
            let pane = request.pane.title();
            let marked = model.marks.len();
            if set.capped {
                // Never silently partial: how many were left, and the command line that
                // reaches them all.
                let of = set.total.map_or_else(|| "more than that".to_owned(), thousands);
                model.refuse(format!(
                    "marked {} of {of} matching in the {pane} pane{filter} (at most {} at once); {} \
                     marked in all (u unmarks). {}",
                    thousands(i64::try_from(n).unwrap_or(i64::MAX)),
                    thousands(MARK_ALL_LIMIT),
                    thousands(i64::try_from(marked).unwrap_or(i64::MAX)),
                    cli_equivalent(model, request.pane, set.total)
                ));
            } else {
                model.info(format!("marked all {n} in the {pane} pane{filter}; {marked} marked in all (u unmarks)"));
            }
        }
        Err(failure) => model.error(format!("database: {}", failure.message)),
    }
    Vec::new()
}

/// The command line that selects what `*` would mark in this pane with this filter, for more
/// than `*` marks at once; or why the command line cannot select exactly that.
fn cli_equivalent(model: &Model, pane: Pane, total: Option<i64>) -> String {
    let filter = model.filter.clone().unwrap_or_default();
    let cannot = match pane {
        Pane::LateResults => Some("the late results pane"),
        Pane::Conflict => Some("proposals waiting outside the conflict state"),
        _ if filter.assignee.is_some() => Some("mine (an assignee)"),
        _ => None,
    };
    if let Some(what) = cannot {
        return format!("The command line cannot select {what}: narrow the filter and mark in parts.");
    }
    let mut words = vec!["For more use: actionledger <retry|cancel|takeover|assign>".to_owned()];
    if let Some(state) = pane.state() {
        words.push(format!("--state {state}"));
    }
    if let Some(destination) = &filter.destination {
        words.push(format!("--destination {destination}"));
    }
    if let Some(age) = filter.older_than {
        words.push(format!("--older-than {}", crate::config::duration_text::format(age)));
    }
    if let Some(text) = &filter.key_contains {
        words.push(format!("--key-contains {}", shell_word(text)));
    }
    let limit = total.map_or(100_000, |t| t.clamp(1, 100_000));
    words.push(format!("--owner {} --reason '...' --limit {limit} --dry-run", shell_word(model.owner.as_str())));
    words.join(" ")
}

/// A word as a shell reads it: quoted unless it is plain.
pub(super) fn shell_word(text: &str) -> String {
    if !text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:/@".contains(c)) {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

fn apply_snapshot(model: &mut Model, request: &LoadRequest, snapshot: Snapshot) -> Vec<Effect> {
    let limit = usize::try_from(request.limit).unwrap_or(usize::MAX);
    if let Some(counts) = snapshot.counts {
        model.counts = counts.by_state;
        model.refused = counts.refused;
        model.stale_claims = counts.stale_claims;
        model.proposed_elsewhere = counts.proposed_elsewhere;
        model.late_results = counts.late_results;
    }
    model.now = Some(snapshot.now);
    let short = snapshot.rows.len() < limit;
    if let Window::After(_) = request.window
        && short
    {
        // Near the top a window newer than the selection is short: show the first page instead,
        // on the row this window would have selected (for `k`, the row just above).
        let select = chosen_key(&snapshot.rows, &request.select, model.selected)
            .map_or(Selection::First, |key| Selection::KeyOr(key, 0));
        return vec![reload(model, request, Window::Newest, select)];
    }
    // The selection is a key, never a row number: when the window loaded does not hold it (the
    // screen shrank, rows arrived or left), load the window that starts at it; when that does not
    // hold it either, the action left the pane, and the console says so.
    let mut departed_to = None;
    if let Selection::Key(key) = &request.select
        && !keys_of(&snapshot.rows).contains(key)
    {
        let anchored = id_of(&model.rows, key).map(Window::From);
        if let Some(window) = anchored
            && window != request.window
        {
            return vec![reload(model, request, window, Selection::Key(key.clone()))];
        }
        match departure(model, request, key, anchored == Some(request.window), &snapshot.rows) {
            Departure::Reload(effect) => return vec![effect],
            Departure::Select(successor) => departed_to = Some(successor),
        }
    }
    if snapshot.rows.is_empty() && matches!(request.window, Window::Before(_)) && !model.rows.is_empty() {
        // Nothing older: stay where we are.
        model.selected = model.rows.len() - 1;
        return Vec::new();
    }
    if short && matches!(request.window, Window::Before(_) | Window::From(_)) {
        // The window reached the end of the pane before it filled the screen: show the last full
        // page instead, on the same row, so that the rows above it stay in view.
        let index = departed_to.as_ref().map_or(model.selected, |(_, index)| *index);
        let key = match &departed_to {
            Some((key, _)) => key.clone(),
            None => chosen_key(&snapshot.rows, &request.select, model.selected),
        };
        let select = key.map_or(Selection::Last, |key| Selection::KeyOr(key, index));
        return vec![reload(model, request, Window::Oldest, select)];
    }
    model.at_newest = matches!(request.window, Window::Newest) || (matches!(request.window, Window::Oldest) && short);
    model.rows = snapshot.rows;
    model.blocked = snapshot.blocked;
    if let Rows::Actions(rows) = &model.rows {
        // A marked action as the person now sees it: the version a bulk command is checked against.
        for row in rows {
            if let Some(marked) = model.marks.get_mut(row.key.as_str()) {
                marked.clone_from(row);
            }
        }
    }
    let select = match departed_to {
        Some((Some(key), index)) => Selection::KeyOr(key, index),
        Some((None, index)) => Selection::Index(index),
        None => request.select.clone(),
    };
    model.selected = chosen_key(&model.rows, &select, model.selected)
        .and_then(|key| keys_of(&model.rows).iter().position(|k| *k == key))
        .unwrap_or(0);
    Vec::new()
}

/// What becomes of the selection when its action left the pane.
enum Departure {
    /// Load the window that keeps the rows around the departed one in view.
    Reload(Effect),
    /// The window loaded is the right one: select this row (the key, else the index).
    Select((Option<String>, usize)),
}

/// The selected action left the pane: the row that took its place is selected (the one after it,
/// or before it when it was the last), in the window the person was looking at, and the console
/// says so. `from_departed` says the rows loaded are those from its place on.
fn departure(model: &mut Model, request: &LoadRequest, key: &str, from_departed: bool, rows: &Rows) -> Departure {
    let index = model.selected;
    let on_screen = keys_of(&model.rows);
    let position = on_screen.iter().position(|k| k == key);
    let after = if from_departed { keys_of(rows).into_iter().next() } else { None };
    let before = position.and_then(|at| at.checked_sub(1)).and_then(|at| on_screen.get(at).cloned());
    let successor = after.clone().or(before);
    say_departed(model, key, successor.as_deref());
    let top = model.rows.ids().0;
    let window = if after.is_none() && from_departed {
        // It was the last row of the pane: the last page, ending on the row before it.
        Some(Window::Oldest)
    } else if model.at_newest {
        Some(Window::Newest)
    } else if position != Some(0) {
        // The window the person was looking at: without the departed row it pulls up one more.
        top.map(Window::From)
    } else {
        // It was at the top of the screen: the rows from its place on are the screen.
        None
    };
    let index = if after.is_none() { index.saturating_sub(1) } else { index };
    match window {
        Some(window) => {
            let select = successor.map_or(Selection::Index(index), |key| Selection::KeyOr(key, index));
            Departure::Reload(reload(model, request, window, select))
        }
        None => Departure::Select((successor, index)),
    }
}

/// The key of the row `select` names among `rows`; `selected` is the row selected before.
fn chosen_key(rows: &Rows, select: &Selection, selected: usize) -> Option<String> {
    let keys = keys_of(rows);
    let at = |index: usize| keys.get(index.min(keys.len().checked_sub(1)?)).cloned();
    match select {
        Selection::First => at(0),
        Selection::Last => keys.last().cloned(),
        Selection::Index(index) => at(*index),
        Selection::Key(key) => keys.contains(key).then(|| key.clone()).or_else(|| at(selected)),
        Selection::KeyOr(key, index) => keys.contains(key).then(|| key.clone()).or_else(|| at(*index)),
    }
}

/// The keys of rows, as the selection names them (a refused submission by its id).
fn keys_of(rows: &Rows) -> Vec<String> {
    match rows {
        Rows::Actions(rows) => rows.iter().map(|a| a.key.to_string()).collect(),
        Rows::Refused(rows) => rows.iter().map(|r| r.id.to_string()).collect(),
    }
}

/// The row id of a key among rows, to load a window that starts at it.
fn id_of(rows: &Rows, key: &str) -> Option<i64> {
    match rows {
        Rows::Actions(rows) => rows.iter().find(|a| a.key.as_str() == key).map(|a| a.id),
        Rows::Refused(rows) => rows.iter().find(|r| r.id.to_string() == key).map(|r| r.id),
    }
}

/// Loads another window for the same pane and filter.
fn reload(model: &mut Model, request: &LoadRequest, window: Window, select: Selection) -> Effect {
    model.next_request += 1;
    model.loading = Some(model.next_request);
    Effect::Load(LoadRequest { id: model.next_request, window, select, with_counts: false, ..request.clone() })
}

/// Says that the selected action left the pane, after what the status line already says about it
/// (a command that moved it, typically).
fn say_departed(model: &mut Model, key: &str, now_on: Option<&str>) {
    let filter = if model.filter.is_some() { " (or no longer matches the filter)" } else { "" };
    let now_on = now_on.map(|other| format!("; the selection is now on {other}")).unwrap_or_default();
    let text = format!("{key} left the {} pane{filter}{now_on}", model.pane.title());
    match &model.status {
        // After what the command said about it, or about a bulk command just done.
        Some(status) if status.text.as_str().contains(key) || model.result.is_some() => {
            let (kind, before) = (status.kind, status.text.to_string());
            model.status = Some(Status { kind, text: SafeText::from_ui(format!("{before}. {text}")) });
        }
        _ => model.info(text),
    }
}
