//! The console's state and its pure update function: `update(&mut Model, Msg) -> Vec<Effect>`.
//! Nothing here touches the database, the clock or the terminal; the driver performs effects and
//! feeds their results back as messages.

use super::keys::{Action, CommandKind, browse_action};
use super::safe_text::SafeText;
use crate::domain::manual::{self, ManualCommand};
use crate::domain::{
    ActionKey, ActionRecord, ClaimFacts, Person, Reason, Refusal, RefusedSubmission, State, Timestamp,
};
use crate::ledger::{ActionDetail, ManualRequest};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// The panes, in the order of their number keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pane {
    Pending,
    InProgress,
    Unknown,
    Conflict,
    Failed,
    Held,
    Refused,
    /// Actions in any state, completed ones included, with late results that no person has
    /// acknowledged yet (rule 8).
    LateResults,
}

impl Pane {
    pub const ALL: [Self; 8] = [
        Self::Pending,
        Self::InProgress,
        Self::Unknown,
        Self::Conflict,
        Self::Failed,
        Self::Held,
        Self::Refused,
        Self::LateResults,
    ];

    /// The state the pane lists; `None` for refused submissions and late results.
    pub fn state(self) -> Option<State> {
        match self {
            Self::Pending => Some(State::Pending),
            Self::InProgress => Some(State::InProgress),
            Self::Unknown => Some(State::Unknown),
            Self::Conflict => Some(State::Conflict),
            Self::Failed => Some(State::Failed),
            Self::Held => Some(State::Held),
            Self::Refused | Self::LateResults => None,
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::InProgress => "in progress",
            Self::Unknown => "unknown",
            Self::Conflict => "conflict",
            Self::Failed => "failed",
            Self::Held => "held",
            Self::Refused => "refused",
            Self::LateResults => "late",
        }
    }

    pub fn index(self) -> usize {
        Self::ALL.iter().position(|p| *p == self).unwrap_or(0)
    }

    fn step(self, by: isize) -> Self {
        let n = Self::ALL.len().cast_signed();
        Self::ALL[usize::try_from((self.index().cast_signed() + by).rem_euclid(n)).unwrap_or(0)]
    }
}

/// Rows of the visible window of a pane.
#[derive(Debug, Clone, PartialEq)]
pub enum Rows {
    Actions(Vec<ActionRecord>),
    Refused(Vec<RefusedSubmission>),
}

impl Rows {
    pub fn len(&self) -> usize {
        match self {
            Self::Actions(rows) => rows.len(),
            Self::Refused(rows) => rows.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn ids(&self) -> (Option<i64>, Option<i64>) {
        match self {
            Self::Actions(rows) => (rows.first().map(|a| a.id), rows.last().map(|a| a.id)),
            Self::Refused(rows) => (rows.first().map(|r| r.id), rows.last().map(|r| r.id)),
        }
    }
}

/// Which rows of a pane to fetch: always just one screen of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    Newest,
    Oldest,
    /// Rows older than this id.
    Before(i64),
    /// Rows newer than this id.
    After(i64),
}

/// What to select once rows arrive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    First,
    Last,
    Index(usize),
    /// The row with this key; if the window does not hold it, the window starting at it.
    Key(String),
    /// The row with this key if the window holds it, else the first (a new filter).
    KeyElseFirst(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadRequest {
    pub id: u64,
    pub pane: Pane,
    pub window: Window,
    pub limit: i64,
    pub filter: Option<String>,
    pub select: Selection,
    /// Also count actions per state: refreshes do, navigation does not, so moving around a
    /// large ledger costs one indexed page query.
    pub with_counts: bool,
}

/// Work for the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    Load(LoadRequest),
    LoadDetail { id: u64, key: ActionKey },
    Run(ManualRequest),
    Lookup { key: ActionKey, revision: i64, person: Person, reason: Reason },
}

/// The header's numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counts {
    pub by_state: Vec<(State, i64)>,
    pub refused: i64,
    pub stale_claims: i64,
    /// Actions outside `conflict` whose proposed payload awaits a decision: the conflict pane
    /// lists them too.
    pub proposed_elsewhere: i64,
    /// Actions with late results waiting for acknowledgement.
    pub late_results: i64,
}

/// One load: the requested window, the database time, and the counts when asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub counts: Option<Counts>,
    pub now: Timestamp,
    pub rows: Rows,
}

/// The result of an effect, fed back to `update`.
#[derive(Debug, Clone, PartialEq)]
pub enum Done {
    Loaded {
        request: LoadRequest,
        result: Result<Snapshot, String>,
    },
    DetailLoaded {
        id: u64,
        result: Result<Box<ActionDetail>, String>,
    },
    /// A command finished: what happened, or why it was refused.
    Command(Result<String, String>),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Msg {
    Key(KeyEvent),
    Paste(String),
    Resize(u16, u16),
    /// Time to refresh.
    Tick,
    /// The database announced a change.
    Changed,
    Done(Done),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DialogStage {
    DestinationId,
    Reason,
    /// Only for an action held because its expired claim could not be taken over safely, and a
    /// command that would run it again: the person types `stopped` to confirm that the old worker
    /// can no longer act (rule 5).
    OldWorkerStopped,
    Confirm,
    Running,
}

/// A command being prepared: what it will do, then a reason, then a confirmation.
#[derive(Debug, Clone, PartialEq)]
pub struct Dialog {
    pub command: CommandKind,
    pub action: ActionRecord,
    /// What will happen, worded for the person.
    pub description: Vec<String>,
    pub stage: DialogStage,
    pub destination_id: String,
    pub reason: String,
    /// What the person typed at the old-worker step.
    pub old_worker_answer: String,
}

/// The word a person types to confirm that the old worker of an unsafely expired claim stopped.
pub const OLD_WORKER_STOPPED_ANSWER: &str = "stopped";

impl Dialog {
    /// Whether this command on this action asks whether the old worker stopped: the ledger
    /// refuses it without that confirmation.
    pub fn asks_old_worker_stopped(&self) -> bool {
        manual_kind(self.command).is_some_and(|command| manual::needs_old_worker_stopped(&self.action, &command))
    }

    fn old_worker_confirmed(&self) -> bool {
        self.old_worker_answer.trim() == OLD_WORKER_STOPPED_ANSWER
    }
}

/// What an open detail shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetailView {
    /// Every section, values cut to a line where they are long.
    Facts,
    /// The full values: payloads, last response, last error (`v`).
    Values,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    List,
    Detail,
    Filter(String),
    Dialog(Box<Dialog>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusKind {
    Info,
    Error,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub kind: StatusKind,
    pub text: SafeText,
}

/// Everything the console shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub ledger_label: SafeText,
    pub owner: Person,
    pub width: u16,
    pub height: u16,
    pub pane: Pane,
    pub rows: Rows,
    pub selected: usize,
    pub at_newest: bool,
    pub counts: Vec<(State, i64)>,
    pub refused: i64,
    pub stale_claims: i64,
    /// See [`Counts::proposed_elsewhere`].
    pub proposed_elsewhere: i64,
    /// Actions with late results waiting for acknowledgement.
    pub late_results: i64,
    /// Database time of the last refresh; ages and lease countdowns are measured from it.
    pub now: Option<Timestamp>,
    pub filter: Option<String>,
    pub mode: Mode,
    pub help: bool,
    pub detail: Option<Box<ActionDetail>>,
    pub detail_scroll: u16,
    /// Which of the proposals waiting on the open action is shown (from 0, oldest first): approve
    /// and reject name it when several wait.
    pub proposal_shown: usize,
    /// What the open detail shows.
    pub detail_view: DetailView,
    pub status: Option<Status>,
    /// A one-line hint shown until the first key (the demo uses it).
    pub hint: Option<String>,
    /// Idempotency retention per destination, from the configuration, to show when a window
    /// closes.
    pub retention: std::collections::BTreeMap<String, std::time::Duration>,
    /// The destinations the configuration declares: one with no retention above declares no
    /// idempotency key, which is not the same as a console started without the configuration.
    pub configured: std::collections::BTreeSet<String>,
    pub quit: bool,
    /// How many commands were refused so far, by the ledger or before their dialog: a scripted
    /// session stops at the first and says which line did it.
    pub refusals: u64,
    next_request: u64,
    loading: Option<u64>,
    detail_request: u64,
}

/// Rows of a pane that fit a terminal of this height: header, tabs, table borders and header,
/// status and footer take 8 lines.
pub fn visible_rows(height: u16) -> usize {
    usize::from(height.saturating_sub(8)).max(1)
}

impl Model {
    pub fn new(ledger_label: &str, owner: Person, width: u16, height: u16) -> Self {
        Self {
            ledger_label: SafeText::new(ledger_label),
            owner,
            width,
            height,
            pane: Pane::Pending,
            rows: Rows::Actions(Vec::new()),
            selected: 0,
            at_newest: true,
            counts: Vec::new(),
            refused: 0,
            stale_claims: 0,
            proposed_elsewhere: 0,
            late_results: 0,
            now: None,
            filter: None,
            mode: Mode::List,
            help: false,
            detail: None,
            detail_scroll: 0,
            proposal_shown: 0,
            detail_view: DetailView::Facts,
            status: None,
            hint: None,
            retention: std::collections::BTreeMap::new(),
            configured: std::collections::BTreeSet::new(),
            quit: false,
            refusals: 0,
            next_request: 0,
            loading: None,
            detail_request: 0,
        }
    }

    /// The first effect: load the first pane, with the counts.
    pub fn start(&mut self) -> Vec<Effect> {
        let mut load = self.load(Window::Newest, Selection::First);
        if let Effect::Load(request) = &mut load {
            request.with_counts = true;
        }
        vec![load]
    }

    /// The action the commands apply to: the open detail, or the selected row.
    pub fn selected_action(&self) -> Option<&ActionRecord> {
        match (&self.mode, &self.detail) {
            (Mode::Detail, Some(detail)) => Some(&detail.action),
            _ => match &self.rows {
                Rows::Actions(rows) => rows.get(self.selected),
                Rows::Refused(_) => None,
            },
        }
    }

    fn selected_key(&self) -> Option<String> {
        match &self.rows {
            Rows::Actions(rows) => rows.get(self.selected).map(|a| a.key.to_string()),
            Rows::Refused(rows) => rows.get(self.selected).map(|r| r.id.to_string()),
        }
    }

    fn page(&self) -> usize {
        visible_rows(self.height)
    }

    fn load(&mut self, window: Window, select: Selection) -> Effect {
        self.next_request += 1;
        self.loading = Some(self.next_request);
        Effect::Load(LoadRequest {
            id: self.next_request,
            pane: self.pane,
            window,
            limit: i64::try_from(self.page()).unwrap_or(i64::MAX),
            filter: self.filter.clone(),
            select,
            with_counts: false,
        })
    }

    /// Reloads the window on screen, keeping the selection on the same key.
    fn refresh(&mut self) -> Vec<Effect> {
        let window = match (self.at_newest, self.rows.ids().0) {
            (false, Some(first)) => Window::Before(first + 1),
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

    fn load_detail(&mut self, key: ActionKey) -> Effect {
        self.detail_request += 1;
        Effect::LoadDetail { id: self.detail_request, key }
    }

    fn info(&mut self, text: impl AsRef<str>) {
        self.status = Some(Status { kind: StatusKind::Info, text: SafeText::from_ui(text) });
    }

    fn error(&mut self, text: impl AsRef<str>) {
        self.status = Some(Status { kind: StatusKind::Error, text: SafeText::from_ui(text) });
    }

    /// A command that did not run: shown like any error, and counted.
    fn refuse(&mut self, text: impl AsRef<str>) {
        self.refusals += 1;
        self.error(text);
    }

    /// The dialog left open, as a sentence: what it would do and what it waits for.
    pub fn open_dialog(&self) -> Option<String> {
        let Mode::Dialog(dialog) = &self.mode else { return None };
        let waiting = match dialog.stage {
            DialogStage::DestinationId => "the destination id",
            DialogStage::Reason => "a reason",
            DialogStage::OldWorkerStopped => "the confirmation that the old worker stopped",
            DialogStage::Confirm => "y to confirm",
            DialogStage::Running => "the ledger's answer",
        };
        Some(format!("{} on {}, waiting for {waiting}", dialog.command.label(), dialog.action.key))
    }
}

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
                model.refresh()
            }
        }
        Msg::Done(done) => on_done(model, done),
    }
}

fn text_field(model: &mut Model) -> Option<&mut String> {
    match &mut model.mode {
        Mode::Filter(text) => Some(text),
        Mode::Dialog(dialog) => match dialog.stage {
            DialogStage::DestinationId => Some(&mut dialog.destination_id),
            DialogStage::Reason => Some(&mut dialog.reason),
            DialogStage::OldWorkerStopped => Some(&mut dialog.old_worker_answer),
            DialogStage::Confirm | DialogStage::Running => None,
        },
        Mode::List | Mode::Detail => None,
    }
}

fn on_key(model: &mut Model, key: KeyEvent) -> Vec<Effect> {
    if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
        model.quit = true;
        return Vec::new();
    }
    if model.help {
        if matches!(key.code, KeyCode::Esc | KeyCode::Char('?' | 'q') | KeyCode::Enter) {
            model.help = false;
        }
        return Vec::new();
    }
    match &model.mode {
        Mode::Filter(_) => on_filter_key(model, key),
        Mode::Dialog(_) => on_dialog_key(model, key),
        Mode::List | Mode::Detail => match browse_action(key) {
            Some(action) => on_action(model, action),
            None => Vec::new(),
        },
    }
}

fn on_filter_key(model: &mut Model, key: KeyEvent) -> Vec<Effect> {
    let Mode::Filter(text) = &mut model.mode else { return Vec::new() };
    match key.code {
        KeyCode::Char(c) => text.push(c),
        KeyCode::Backspace => {
            text.pop();
        }
        KeyCode::Esc => model.mode = Mode::List,
        KeyCode::Enter => {
            let text = text.trim().to_owned();
            model.filter = (!text.is_empty()).then_some(text);
            model.mode = Mode::List;
            match &model.filter {
                Some(f) => {
                    model.info(format!("showing keys that contain {f:?}; / then Enter on an empty filter clears it"));
                }
                None => model.info("filter cleared"),
            }
            let select = model.selected_key().map_or(Selection::First, Selection::KeyElseFirst);
            return vec![model.load(Window::Newest, select)];
        }
        _ => {}
    }
    Vec::new()
}

fn on_action(model: &mut Model, action: Action) -> Vec<Effect> {
    let in_detail = model.mode == Mode::Detail;
    match action {
        Action::Quit => {
            model.quit = true;
            Vec::new()
        }
        Action::Help => {
            model.help = true;
            Vec::new()
        }
        Action::SelectPane(index) => switch_pane(model, Pane::ALL[index.min(Pane::ALL.len() - 1)]),
        Action::NextPane => switch_pane(model, model.pane.step(1)),
        Action::PreviousPane => switch_pane(model, model.pane.step(-1)),
        Action::Down | Action::Up | Action::PageDown | Action::PageUp | Action::Top | Action::Bottom if in_detail => {
            // Bounded by the detail's lines as wrapped at this width, so that `End` shows the end
            // and `Up` after it moves at once.
            let (max, page) = (super::view::detail_max_scroll(model), super::view::detail_page(model));
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
            model.detail_view = match model.detail_view {
                DetailView::Facts => DetailView::Values,
                DetailView::Values => DetailView::Facts,
            };
            model.detail_scroll = 0;
            Vec::new()
        }
        Action::NextProposal => next_proposal(model, in_detail),
        Action::Values | Action::Open => match model.selected_action().map(|a| a.key.clone()) {
            Some(key) if !in_detail => {
                model.mode = Mode::Detail;
                model.detail_scroll = 0;
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
                    model.detail_view = DetailView::Facts;
                    model.detail_scroll = 0;
                    model.detail = None;
                }
                Vec::new()
            }
        },
        Action::Back => {
            if in_detail && model.detail_view == DetailView::Values {
                model.detail_view = DetailView::Facts;
                model.detail_scroll = 0;
            } else if in_detail {
                model.mode = Mode::List;
                model.detail = None;
            } else if model.filter.take().is_some() {
                model.info("filter cleared");
                return vec![model.load(Window::Newest, Selection::First)];
            }
            Vec::new()
        }
        Action::Filter => {
            model.mode = Mode::Filter(String::new());
            Vec::new()
        }
        Action::Command(kind) => open_dialog(model, kind),
    }
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

/// What a command will do, for the dialog; or why it cannot run.
fn describe(model: &Model, kind: CommandKind, action: &ActionRecord) -> Result<Vec<String>, Refusal> {
    let key = &action.key;
    let now = model.now.unwrap_or(action.updated_at);
    let same_key = "The original key is kept.".to_owned();
    // The dialog asks whether the old worker stopped where that is needed, so the description
    // plans as if the person will confirm it; the ledger refuses if they do not.
    let shown = shown_proposal(model, action);
    // Rejecting the proposal shown while others wait keeps the action waiting for them.
    let others_wait = shown.as_ref().is_some_and(|s| s.waiting > 1);
    let plan = |command: &ManualCommand| {
        let remain = others_wait && matches!(command, ManualCommand::Reject { .. });
        manual::plan(action, command, now, ClaimFacts::WORST_CASE, true, remain)
    };
    Ok(match kind {
        CommandKind::Lookup => vec![
            format!("Look up {key} at {} now.", action.destination.as_deref().unwrap_or("its destination")),
            if action.state == State::Unknown {
                "Found and matching: completed. Nothing there: back to pending. Different: conflict.".to_owned()
            } else {
                format!("It is {}: the lookup only reports what the destination holds.", action.state)
            },
        ],
        CommandKind::Takeover => {
            plan(&ManualCommand::Takeover)?;
            vec![
                format!(
                    "Take over {key} from {} under ownership version {}.",
                    action.claimed_by.as_deref().unwrap_or("its worker"),
                    action.ownership_version + 1
                ),
                "Nothing sent under the claim: back to pending. Otherwise, unless the destination protects \
                 against a repeat: held, for you to check."
                    .to_owned(),
                same_key,
            ]
        }
        _ => {
            let Some(command) = manual_command(model, kind, action, String::new()) else { return Ok(Vec::new()) };
            let planned = plan(&command)?;
            let change = if planned.from == planned.to {
                format!("{key} stays {}.", planned.from)
            } else {
                format!("{key}: {} -> {}.", planned.from, planned.to)
            };
            let what = match kind {
                CommandKind::Retry => "Retry it under the same key.".to_owned(),
                CommandKind::ResolveCompleted => "Record that the destination has it, with the id you give.".to_owned(),
                CommandKind::ResolveNotWritten => {
                    "Record that the destination has no record: it runs again.".to_owned()
                }
                CommandKind::Cancel => "Cancel it: it must not happen.".to_owned(),
                CommandKind::Approve if planned.from == State::Completed => format!(
                    "Approve the proposed payload: it becomes the approved one, and the update action \
                     {key}#update-{} changes the record at the destination.",
                    action.payload_revision + 1
                ),
                CommandKind::Approve => match &shown {
                    Some(s) if s.waiting > 1 => format!(
                        "Approve proposal {} of {} ({}) in place of the approved payload; the other {} are rejected.",
                        s.index + 1,
                        s.waiting,
                        s.fingerprint,
                        s.waiting - 1
                    ),
                    _ => "Approve the proposed payload in place of the approved one.".to_owned(),
                },
                CommandKind::Reject => match &shown {
                    Some(s) if s.waiting > 1 => format!(
                        "Reject proposal {} of {} ({}); the approved payload stays and the other {} still wait.",
                        s.index + 1,
                        s.waiting,
                        s.fingerprint,
                        s.waiting - 1
                    ),
                    _ => "Reject the proposed payload; the approved one stays.".to_owned(),
                },
                CommandKind::Assign => format!("Assign it to {}.", model.owner.as_str()),
                CommandKind::Acknowledge => format!(
                    "Acknowledge its {} late result(s): results from an obsolete owner, which changed nothing.",
                    action.late_results
                ),
                CommandKind::Takeover | CommandKind::Lookup => String::new(),
            };
            let mut lines = vec![what, change, same_key];
            if manual::needs_old_worker_stopped(action, &command) {
                lines.push(
                    "Its expired claim could not be taken over safely: the old worker may still act. You will be \
                     asked to confirm that it stopped."
                        .to_owned(),
                );
            }
            lines
        }
    })
}

/// The kind of ledger command behind a console command, whatever its arguments.
fn manual_kind(kind: CommandKind) -> Option<ManualCommand> {
    match kind {
        CommandKind::ResolveCompleted => Some(ManualCommand::ResolveCompleted { destination_id: String::new() }),
        CommandKind::Assign => Some(ManualCommand::Assign { to: String::new() }),
        other => manual_command_with(other, String::new(), String::new()),
    }
}

/// The ledger command behind a console command; `None` for a lookup, which is not one. While
/// several proposals wait on the open action, approve and reject name the one shown.
fn manual_command(
    model: &Model,
    kind: CommandKind,
    action: &ActionRecord,
    destination_id: String,
) -> Option<ManualCommand> {
    let named = shown_proposal(model, action).filter(|s| s.waiting > 1).map(|s| s.full_fingerprint);
    Some(match manual_command_with(kind, destination_id, model.owner.as_str().to_owned())? {
        ManualCommand::Approve { .. } => ManualCommand::Approve { proposal: named },
        ManualCommand::Reject { .. } => ManualCommand::Reject { proposal: named },
        other => other,
    })
}

/// The proposal shown in the open detail of `action`, among those waiting.
#[derive(Debug)]
struct ShownProposal {
    index: usize,
    waiting: usize,
    fingerprint: String,
    full_fingerprint: String,
}

fn shown_proposal(model: &Model, action: &ActionRecord) -> Option<ShownProposal> {
    let detail = model.detail.as_ref().filter(|d| d.action.key == action.key)?;
    let waiting: Vec<_> = detail.waiting_proposals().collect();
    let index = model.proposal_shown.min(waiting.len().checked_sub(1)?);
    let fingerprint = waiting[index].payload.fingerprint();
    Some(ShownProposal {
        index,
        waiting: waiting.len(),
        fingerprint: fingerprint.short().to_owned(),
        full_fingerprint: fingerprint.as_str().to_owned(),
    })
}

fn manual_command_with(kind: CommandKind, destination_id: String, owner: String) -> Option<ManualCommand> {
    Some(match kind {
        CommandKind::Retry => ManualCommand::Retry,
        CommandKind::ResolveCompleted => ManualCommand::ResolveCompleted { destination_id },
        CommandKind::ResolveNotWritten => ManualCommand::ResolveNotWritten,
        CommandKind::Cancel => ManualCommand::Cancel,
        CommandKind::Approve => ManualCommand::Approve { proposal: None },
        CommandKind::Reject => ManualCommand::Reject { proposal: None },
        // The ledger decides, from the claim as locked, whether it may run again (rule 5 in
        // docs/RULES.md).
        CommandKind::Takeover => ManualCommand::Takeover,
        CommandKind::Assign => ManualCommand::Assign { to: owner },
        CommandKind::Acknowledge => ManualCommand::Acknowledge,
        CommandKind::Lookup => return None,
    })
}

/// The commands that apply to an action now, for the footer.
pub fn applicable_commands(model: &Model, action: &ActionRecord) -> Vec<CommandKind> {
    CommandKind::ALL
        .into_iter()
        .filter(|kind| *kind == CommandKind::Lookup || describe(model, *kind, action).is_ok())
        .collect()
}

fn open_dialog(model: &mut Model, kind: CommandKind) -> Vec<Effect> {
    let Some(action) = model.selected_action().cloned() else {
        model.refuse("nothing selected: choose an action first");
        return Vec::new();
    };
    match describe(model, kind, &action) {
        Err(refusal) => model.refuse(refusal.to_string()),
        Ok(description) => {
            let stage =
                if kind == CommandKind::ResolveCompleted { DialogStage::DestinationId } else { DialogStage::Reason };
            model.mode = Mode::Dialog(Box::new(Dialog {
                command: kind,
                action,
                description,
                stage,
                destination_id: String::new(),
                reason: String::new(),
                old_worker_answer: String::new(),
            }));
        }
    }
    Vec::new()
}

fn close_dialog(model: &mut Model) {
    model.mode = if model.detail.is_some() { Mode::Detail } else { Mode::List };
}

fn on_dialog_key(model: &mut Model, key: KeyEvent) -> Vec<Effect> {
    let Mode::Dialog(dialog) = &mut model.mode else { return Vec::new() };
    match (dialog.stage, key.code) {
        (DialogStage::Running, _) => Vec::new(),
        (_, KeyCode::Esc) | (DialogStage::Confirm, KeyCode::Char('n' | 'N')) => {
            let verb = dialog.command.label();
            close_dialog(model);
            model.info(format!("{verb}: cancelled, nothing changed"));
            Vec::new()
        }
        (DialogStage::DestinationId | DialogStage::Reason | DialogStage::OldWorkerStopped, KeyCode::Char(c)) => {
            if let Some(field) = text_field(model) {
                field.push(c);
            }
            Vec::new()
        }
        (DialogStage::DestinationId | DialogStage::Reason | DialogStage::OldWorkerStopped, KeyCode::Backspace) => {
            if let Some(field) = text_field(model) {
                field.pop();
            }
            Vec::new()
        }
        (DialogStage::DestinationId, KeyCode::Enter) => {
            match crate::domain::input::Label::parse("destination id", &dialog.destination_id) {
                Ok(_) => dialog.stage = DialogStage::Reason,
                Err(problem) => model.error(problem.to_string()),
            }
            Vec::new()
        }
        (DialogStage::Reason, KeyCode::Enter) => {
            match Reason::parse(&dialog.reason) {
                Ok(_) if dialog.asks_old_worker_stopped() => dialog.stage = DialogStage::OldWorkerStopped,
                Ok(_) => dialog.stage = DialogStage::Confirm,
                Err(problem) => model.error(problem.to_string()),
            }
            Vec::new()
        }
        (DialogStage::OldWorkerStopped, KeyCode::Enter) => {
            if dialog.old_worker_confirmed() {
                dialog.stage = DialogStage::Confirm;
            } else {
                model.error(format!(
                    "type {OLD_WORKER_STOPPED_ANSWER:?} once you have checked that the old worker can no longer act, \
                     or Esc to cancel"
                ));
            }
            Vec::new()
        }
        (DialogStage::Confirm, KeyCode::Char('y' | 'Y')) => confirm(model),
        _ => Vec::new(),
    }
}

fn confirm(model: &mut Model) -> Vec<Effect> {
    let Mode::Dialog(dialog) = &mut model.mode else { return Vec::new() };
    let Ok(reason) = Reason::parse(&dialog.reason) else { return Vec::new() };
    dialog.stage = DialogStage::Running;
    let (kind, action, destination_id) =
        (dialog.command, dialog.action.clone(), dialog.destination_id.trim().to_owned());
    let old_worker_stopped = dialog.asks_old_worker_stopped() && dialog.old_worker_confirmed();
    model.info(format!("{} {}: working…", kind.label(), action.key));
    let Some(command) = manual_command(model, kind, &action, destination_id) else {
        return vec![Effect::Lookup {
            key: action.key,
            revision: action.revision,
            person: model.owner.clone(),
            reason,
        }];
    };
    vec![Effect::Run(ManualRequest {
        key: action.key,
        person: model.owner.clone(),
        reason,
        expect_version: Some(action.revision),
        command,
        old_worker_stopped,
    })]
}

fn on_done(model: &mut Model, done: Done) -> Vec<Effect> {
    match done {
        Done::Loaded { request, result } => {
            if model.loading == Some(request.id) {
                model.loading = None;
            }
            if request.id != model.next_request || request.pane != model.pane {
                return Vec::new();
            }
            match result {
                Err(error) => {
                    model.error(format!("database: {error} (the console keeps trying)"));
                    Vec::new()
                }
                Ok(snapshot) => apply_snapshot(model, &request, snapshot),
            }
        }
        Done::DetailLoaded { id, result } => {
            if id == model.detail_request && matches!(model.mode, Mode::Detail | Mode::Dialog(_)) {
                match result {
                    Ok(detail) => model.detail = Some(detail),
                    Err(error) => model.error(format!("database: {error}")),
                }
            }
            Vec::new()
        }
        Done::Command(result) => {
            close_dialog(model);
            match result {
                Ok(text) => model.info(text),
                Err(refusal) => model.refuse(format!("refused: {refusal}")),
            }
            model.refresh()
        }
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
        let anchored = id_of(&model.rows, key).map(|id| Window::Before(id + 1));
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
        Some(status) if status.text.as_str().contains(key) => {
            let (kind, before) = (status.kind, status.text.to_string());
            model.status = Some(Status { kind, text: SafeText::from_ui(format!("{before}. {text}")) });
        }
        _ => model.info(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::input::{RawSubmission, Submission};

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
        let snapshot = Snapshot { counts: None, now: Timestamp::default(), rows: Rows::Actions(rows) };
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
        assert_eq!(model.pane, Pane::LateResults, "wraps around");
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
        let effects = update(&mut model, Msg::Done(Done::Command(Err("it changed".into()))));
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
        let snapshot = Snapshot { counts: None, now: Timestamp::default(), rows: Rows::Actions(rows) };
        update(&mut model, Msg::Done(Done::Loaded { request: request.clone(), result: Ok(snapshot) }));
        assert_eq!(model.selected_action().unwrap().key.as_str(), "acme:b");
        assert_eq!(update(&mut model, Msg::Tick).len(), 1);
        assert_eq!(update(&mut model, Msg::Tick), Vec::new(), "one refresh in flight at a time");
    }

    #[test]
    fn database_errors_show_in_the_status_line() {
        let mut model = loaded(vec![action(1, "acme:a", State::Failed)]);
        let Some(Effect::Load(request)) = update(&mut model, Msg::Tick).pop() else { panic!() };
        update(&mut model, Msg::Done(Done::Loaded { request, result: Err("connection refused".into()) }));
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
}
