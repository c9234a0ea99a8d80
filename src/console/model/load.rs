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
        let mut load = self.load(Window::Newest, Selection::First);
        if let Effect::Load(request) = &mut load {
            request.with_counts = true;
        }
        vec![load]
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

    pub(super) fn load(&mut self, window: Window, select: Selection) -> Effect {
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
            with_counts: false,
        })
    }

    /// Reloads the window on screen, keeping the selection on the same key.
    pub(super) fn refresh(&mut self) -> Vec<Effect> {
        let window = match (self.at_newest, self.rows.ids().0) {
            (false, Some(first)) => Window::From(first),
            _ => Window::Newest,
        };
        let select = self.selected_key().map_or(Selection::First, Selection::Key);
        let mut load = self.load(window, select);
        if let Effect::Load(request) = &mut load {
            request.with_counts = true;
        }
        let mut effects = vec![load];
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
        // Near the top a window newer than the selection is short: show a full first page instead.
        model.next_request += 1;
        model.loading = Some(model.next_request);
        let key = match &snapshot.rows {
            Rows::Actions(rows) => rows.first().map(|a| a.key.to_string()),
            Rows::Refused(rows) => rows.first().map(|r| r.id.to_string()),
        };
        return vec![Effect::Load(LoadRequest {
            id: model.next_request,
            window: Window::Newest,
            select: key.map_or(Selection::First, Selection::Key),
            ..request.clone()
        })];
    }
    // The selection is a key, never a row number: when the window loaded does not hold it (the
    // screen shrank, rows arrived or left), load the window that starts at it; when that does not
    // hold it either, the action left the pane, and the console says so.
    let mut departed = None;
    if let Selection::Key(key) = &request.select
        && !keys_of(&snapshot.rows).contains(key)
    {
        let anchored = id_of(&model.rows, key).map(Window::From);
        if let Some(window) = anchored
            && window != request.window
        {
            return vec![reload(model, request, window, Selection::Key(key.clone()))];
        }
        if snapshot.rows.is_empty() && !model.rows.is_empty() {
            // It was the oldest row of the pane: show the oldest rows instead.
            say_departed(model, key, None);
            return vec![reload(model, request, Window::Oldest, Selection::Last)];
        }
        departed = Some(key.clone());
    }
    if snapshot.rows.is_empty() && matches!(request.window, Window::Before(_)) && !model.rows.is_empty() {
        // Nothing older: stay where we are.
        model.selected = model.rows.len() - 1;
        return Vec::new();
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
    let len = model.rows.len();
    model.selected = match &request.select {
        _ if len == 0 => 0,
        Selection::First => 0,
        Selection::Last => len - 1,
        Selection::Index(i) => (*i).min(len - 1),
        Selection::Key(_) if departed.is_some() => 0,
        Selection::Key(key) | Selection::KeyElseFirst(key) => {
            keys_of(&model.rows).iter().position(|k| k == key).unwrap_or(0)
        }
    };
    if let Some(key) = departed {
        let now_on = model.selected_key();
        say_departed(model, &key, now_on.as_deref());
    }
    Vec::new()
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
