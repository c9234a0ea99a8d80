//! The console's state and its pure update function: `update(&mut Model, Msg) -> Vec<Effect>`.
//! Nothing here touches the database, the clock or the terminal; the driver performs effects and
//! feeds their results back as messages.

use super::keys::{Action, CommandKind, browse_action};
use super::safe_text::SafeText;
use crate::domain::manual::{self, ManualCommand};
use crate::error::exit;
use crate::domain::{
    ActionKey, ActionRecord, ClaimFacts, DestinationCatalog, Person, Reason, Refusal, RefusedSubmission, State,
    Timestamp,
};
use crate::ledger::{ActionDetail, ManualRequest};
use crate::store::ListOrder;
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
    /// History: what was settled, so that a reviewer finds it again.
    Completed,
    Cancelled,
    /// Every action, in any state.
    All,
}

impl Pane {
    pub const ALL: [Self; 11] = [
        Self::Pending,
        Self::InProgress,
        Self::Unknown,
        Self::Conflict,
        Self::Failed,
        Self::Held,
        Self::Refused,
        Self::LateResults,
        Self::Completed,
        Self::Cancelled,
        Self::All,
    ];

    /// The history panes, which share the ninth tab (`9`, then `h` for the next).
    pub const HISTORY: [Self; 3] = [Self::Completed, Self::Cancelled, Self::All];

    pub fn is_history(self) -> bool {
        Self::HISTORY.contains(&self)
    }

    /// The state the pane lists; `None` for refused submissions, late results and all actions.
    pub fn state(self) -> Option<State> {
        match self {
            Self::Pending => Some(State::Pending),
            Self::InProgress => Some(State::InProgress),
            Self::Unknown => Some(State::Unknown),
            Self::Conflict => Some(State::Conflict),
            Self::Failed => Some(State::Failed),
            Self::Held => Some(State::Held),
            Self::Completed => Some(State::Completed),
            Self::Cancelled => Some(State::Cancelled),
            Self::Refused | Self::LateResults | Self::All => None,
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
            Self::Completed => "completed",
            Self::Cancelled => "cancelled",
            Self::All => "all",
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

/// What a filter line asks for. Words are parts of the key; `dest:NAME` keeps one destination's
/// actions, `mine` those assigned to the person reviewing, `age:30m` those unchanged for at
/// least that long.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FilterTerms {
    /// The line as typed.
    pub line: String,
    pub destination: Option<String>,
    pub assignee: Option<String>,
    pub older_than: Option<std::time::Duration>,
    pub key_contains: Option<String>,
}

/// A filter line that cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    #[error("filter age:{text}: {problem}; for example age:30m")]
    Age { text: String, problem: String },
    #[error("filter dest: needs a destination name, for example dest:crm")]
    NoDestination,
}

impl FilterTerms {
    /// Parses a filter line; `owner` is who `mine` means.
    pub fn parse(line: &str, owner: &Person) -> Result<Self, FilterError> {
        let mut terms = Self { line: line.trim().to_owned(), ..Self::default() };
        let mut words = Vec::new();
        for word in line.split_whitespace() {
            if let Some(name) = word.strip_prefix("dest:") {
                if name.is_empty() {
                    return Err(FilterError::NoDestination);
                }
                terms.destination = Some(name.to_owned());
            } else if word == "mine" {
                terms.assignee = Some(owner.as_str().to_owned());
            } else if let Some(age) = word.strip_prefix("age:") {
                let parsed = crate::config::duration_text::parse(age)
                    .map_err(|e| FilterError::Age { text: age.to_owned(), problem: e.to_string() })?;
                terms.older_than = Some(parsed);
            } else {
                words.push(word);
            }
        }
        terms.key_contains = (!words.is_empty()).then(|| words.join(" "));
        Ok(terms)
    }

    /// The filter in words, for the list's title and the status line.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(text) = &self.key_contains {
            parts.push(format!("key contains {text:?}"));
        }
        if let Some(destination) = &self.destination {
            parts.push(format!("destination {destination}"));
        }
        if let Some(assignee) = &self.assignee {
            parts.push(format!("assigned to {assignee}"));
        }
        if let Some(age) = self.older_than {
            parts.push(format!("unchanged for {}+", crate::config::duration_text::format(age)));
        }
        parts.join(", ")
    }
}

/// The order of a pane's rows: by age, or by attempts. `s` steps through them in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    NewestFirst,
    OldestFirst,
    /// Most attempts first, ties newest first: what keeps failing.
    MostAttempts,
}

impl Order {
    pub fn title(self) -> &'static str {
        match self {
            Self::NewestFirst => "newest first",
            Self::OldestFirst => "oldest first",
            Self::MostAttempts => "most attempts first",
        }
    }

    /// The order `s` switches to: oldest first, newest first, most attempts first, round again.
    #[must_use]
    pub fn next(self) -> Self {
        match self {
            Self::NewestFirst => Self::OldestFirst,
            Self::OldestFirst => Self::MostAttempts,
            Self::MostAttempts => Self::NewestFirst,
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
    /// Rows from this id on, itself included: the window that starts at a row.
    From(i64),
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
    pub filter: Option<Box<FilterTerms>>,
    pub select: Selection,
    /// The order shown (`s`), as the store sorts it.
    pub order: ListOrder,
    /// Also count actions per state: refreshes do, navigation does not, so moving around a
    /// large ledger costs one indexed page query.
    pub with_counts: bool,
}

/// Work for the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    Load(LoadRequest),
    LoadDetail {
        id: u64,
        key: ActionKey,
    },
    Run(ManualRequest),
    /// Bulk triage: each command in turn, each in its own transaction against its version seen.
    RunEach(Vec<ManualRequest>),
    /// Mark every action of the pane that matches the filter (up to the request's limit).
    MarkAll(LoadRequest),
    /// Put this text on the person's clipboard, through the terminal.
    Copy(String),
    Lookup {
        key: ActionKey,
        revision: i64,
        person: Person,
        reason: Reason,
    },
}

/// What `*` found: the actions to mark, and whether more matched than it marks.
#[derive(Debug, Clone, PartialEq)]
pub struct MarkedSet {
    pub actions: Vec<ActionRecord>,
    /// More actions matched than [`MARK_ALL_LIMIT`]: only the first ones in the order shown
    /// are marked.
    pub capped: bool,
    /// How many match in all, where one count says it (a pane of one state, or all actions).
    pub total: Option<i64>,
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

/// How an effect's failure is classified: the kinds of the exit codes
/// ([`crate::error::Error::exit_code`]), so that the console and a script say what the command
/// line says about the same failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The ledger refused the command: nothing changed (exit 3).
    Refused,
    /// The action is not in the ledger (exit 4).
    NotFound,
    /// What was given or configured cannot be used (exit 2).
    Usage,
    /// The database or the destination failed: the command may work later (exit 1).
    Error,
}

impl FailureKind {
    /// The kind of an error with this exit code.
    pub fn from_exit_code(code: i32) -> Self {
        match code {
            exit::REFUSED => Self::Refused,
            exit::NOT_FOUND => Self::NotFound,
            exit::USAGE => Self::Usage,
            _ => Self::Error,
        }
    }

    /// The exit code a scripted session ends with when a command failed so.
    pub fn exit_code(self) -> i32 {
        match self {
            Self::Refused => exit::REFUSED,
            Self::NotFound => exit::NOT_FOUND,
            Self::Usage => exit::USAGE,
            Self::Error => exit::ERROR,
        }
    }

    /// The word before the failure's message: only a refusal is called one.
    pub fn word(self) -> &'static str {
        match self {
            Self::Refused => "refused",
            Self::NotFound => "not found",
            Self::Usage => "cannot be used",
            Self::Error => "failed",
        }
    }
}

/// An effect that did not succeed: its kind, and the error's message as the ledger or the
/// destination worded it. The message is untrusted text: it is escaped where it is shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", kind.word())]
pub struct Failure {
    pub kind: FailureKind,
    pub message: String,
}

impl Failure {
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }
}

/// The result of an effect, fed back to `update`.
#[derive(Debug, Clone, PartialEq)]
pub enum Done {
    Loaded {
        request: LoadRequest,
        result: Result<Snapshot, Failure>,
    },
    DetailLoaded {
        id: u64,
        result: Result<Box<ActionDetail>, Failure>,
    },
    /// A command finished: what happened, or why it did not.
    Command(Result<String, Failure>),
    /// A bulk command finished: for each action, what happened or why it did not.
    Each {
        verb: &'static str,
        results: Vec<(String, Result<String, Failure>)>,
    },
    /// A copy went to the clipboard: nothing to do.
    Copied,
    /// The actions that match the pane and filter, to mark.
    Marked {
        request: LoadRequest,
        result: Result<MarkedSet, Failure>,
    },
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
    /// A bulk command: the marked actions as the person saw them (`action` is the first).
    pub bulk: Vec<ActionRecord>,
    /// Of `bulk`, the keys of those held because their expired claim could not be taken over
    /// safely, which this command would run again: the dialog asks once whether their old
    /// workers stopped (rule 5), for them all.
    pub bulk_old_worker: Vec<String>,
    /// The detail being read for this dialog (a takeover's facts, a destination id the evidence
    /// names), when it was opened from the list.
    pub evidence_request: Option<u64>,
    /// The destination id was offered from the evidence: the first character typed replaces it.
    pub offered_id: bool,
}

/// The word a person types to confirm that the old worker of an unsafely expired claim stopped.
pub const OLD_WORKER_STOPPED_ANSWER: &str = "stopped";

impl Dialog {
    /// Whether this command on this action asks whether the old worker stopped: the ledger
    /// refuses it without that confirmation.
    pub fn asks_old_worker_stopped(&self) -> bool {
        if !self.bulk.is_empty() {
            return !self.bulk_old_worker.is_empty();
        }
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

/// What a bulk command did: the actions done, those refused and those that failed otherwise,
/// each sorted by key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkResult {
    pub verb: &'static str,
    /// Each action done, with its change ("failed -> pending (version 5)").
    pub done: Vec<(SafeText, SafeText)>,
    /// Each action refused, with the ledger's reason in full; they stay marked.
    pub refused: Vec<(SafeText, SafeText)>,
    /// Each action whose command failed for another reason (the database, an action no longer
    /// there), with its kind and message; they stay marked.
    pub failed: Vec<(SafeText, SafeText)>,
    /// The kind of the first failure that was not a refusal: what a script's exit code follows.
    pub failed_kind: Option<FailureKind>,
    /// How far the result is scrolled: a long one does not fit a small terminal.
    pub scroll: u16,
}

impl BulkResult {
    /// The one-line summary, for the status line and the result's title.
    pub fn summary(&self) -> String {
        let failed = if self.failed.is_empty() { String::new() } else { format!(", {} failed", self.failed.len()) };
        format!("{}: {} done, {} refused{failed}", self.verb, self.done.len(), self.refused.len())
    }
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
    pub filter: Option<FilterTerms>,
    pub mode: Mode,
    pub help: bool,
    /// The history pane the ninth tab shows (the last one chosen).
    pub history: Pane,
    /// The order lists show actions in (`s` switches).
    pub order: Order,
    /// How far the help screen is scrolled (a short terminal does not show it all).
    pub help_scroll: u16,
    /// The last bulk command's result, open over the list until Esc: every action done and
    /// every one refused, with why.
    pub result: Option<Box<BulkResult>>,
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
    /// What each configured destination declares (lookup, idempotency): the catalogue the
    /// ledger decides with, so that the console offers and describes what the ledger will do.
    pub destinations: DestinationCatalog,
    /// Each configured destination's pointer to a record id in a response body.
    pub id_pointers: std::collections::BTreeMap<String, String>,
    /// Actions marked for a bulk command, by key, as last seen: refreshes keep them (and update
    /// the version seen), so marks survive moving around, filtering and switching panes.
    pub marks: std::collections::BTreeMap<String, ActionRecord>,
    pub quit: bool,
    /// How many commands were refused so far, by the ledger or before their dialog: a scripted
    /// session stops at the first and says which line did it.
    pub refusals: u64,
    /// How many commands failed for another reason (the database, the destination, an action no
    /// longer there): a scripted session stops at these too.
    pub failures: u64,
    /// The kind of the last command that did not run: a scripted session's exit code follows it.
    pub stopped: Option<FailureKind>,
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
            history: Pane::Completed,
            order: Order::NewestFirst,
            help_scroll: 0,
            result: None,
            detail: None,
            detail_scroll: 0,
            proposal_shown: 0,
            detail_view: DetailView::Facts,
            status: None,
            hint: None,
            retention: std::collections::BTreeMap::new(),
            configured: std::collections::BTreeSet::new(),
            destinations: DestinationCatalog::default(),
            id_pointers: std::collections::BTreeMap::new(),
            marks: std::collections::BTreeMap::new(),
            quit: false,
            refusals: 0,
            failures: 0,
            stopped: None,
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

    /// The order the store pages the pane in: refused submissions are always newest first.
    fn list_order(&self) -> ListOrder {
        match self.order {
            _ if self.pane == Pane::Refused => ListOrder::NewestFirst,
            Order::NewestFirst => ListOrder::NewestFirst,
            Order::OldestFirst => ListOrder::OldestFirst,
            Order::MostAttempts => ListOrder::MostAttempts,
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
            filter: self.filter.clone().map(Box::new),
            select,
            order: self.list_order(),
            with_counts: false,
        })
    }

    /// Reloads the window on screen, keeping the selection on the same key.
    fn refresh(&mut self) -> Vec<Effect> {
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

    /// A command that was refused: shown like any error, and counted.
    fn refuse(&mut self, text: impl AsRef<str>) {
        self.did_not_run(FailureKind::Refused, text);
    }

    /// A command that did not run, for the reason `kind` says: shown like any error, and counted
    /// by its kind.
    fn did_not_run(&mut self, kind: FailureKind, text: impl AsRef<str>) {
        if kind == FailureKind::Refused {
            self.refusals += 1;
        } else {
            self.failures += 1;
        }
        self.stopped = Some(kind);
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
        let on = if dialog.bulk.is_empty() { dialog.action.key.to_string() } else { marked_actions(dialog.bulk.len()) };
        Some(format!("{} on {on}, waiting for {waiting}", dialog.command.label()))
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
    if model.result.is_some() {
        let max = super::view::result_max_scroll(model);
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
        let max = super::view::help_max_scroll(model);
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
            let terms = match FilterTerms::parse(&text, &model.owner) {
                Ok(terms) => terms,
                Err(problem) => {
                    model.refuse(problem.to_string());
                    return Vec::new();
                }
            };
            model.filter = (!text.is_empty()).then_some(terms);
            model.mode = Mode::List;
            match &model.filter {
                Some(f) => {
                    model.info(format!("showing {}; / then Enter on an empty filter clears it", f.describe()));
                }
                None => model.info("filter cleared"),
            }
            let select = model.selected_key().map_or(Selection::First, Selection::KeyElseFirst);
            // The pane counts follow the filter at once.
            let mut load = model.load(Window::Newest, select);
            if let Effect::Load(request) = &mut load {
                request.with_counts = true;
            }
            return vec![load];
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

/// A count with thousands separated: 12,345.
pub fn thousands(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
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
fn shell_word(text: &str) -> String {
    if !text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:/@".contains(c)) {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// At most this many actions are marked at once by `*`.
pub const MARK_ALL_LIMIT: i64 = 1000;

/// Marked actions a bulk dialog lists by name.
const LISTED: usize = 5;

/// A bulk command on the marked actions: one reason, one confirmation; each action is still
/// checked by the ledger against the version the person saw.
fn open_bulk_dialog(model: &mut Model, kind: CommandKind) -> Vec<Effect> {
    let actions: Vec<ActionRecord> = model.marks.values().cloned().collect();
    let Some(first) = actions.first().cloned() else { return Vec::new() };
    let mut description = vec![format!(
        "{} {}, each in its own transaction, checked against the version you saw, in your name:",
        capitalized(kind.label()),
        marked_actions(actions.len())
    )];
    let needing: Vec<String> = match manual_kind(kind) {
        Some(command) => actions
            .iter()
            .filter(|a| manual::needs_old_worker_stopped(a, &command))
            .map(|a| a.key.to_string())
            .collect(),
        None => Vec::new(),
    };
    for action in actions.iter().take(LISTED) {
        let line = match describe_one(model, kind, action) {
            Ok(change) => format!("{}: {change}", action.key),
            Err(refusal) => format!("{}: will be refused: {refusal}", action.key),
        };
        description.push(line);
    }
    if actions.len() > LISTED {
        description.push(format!("… and {} more; refused ones stay marked.", actions.len() - LISTED));
    }
    if !needing.is_empty() && needing.len() == actions.len() {
        description.push(format!(
            "{} held because an expired claim could not be taken over safely: the old worker may still act. You \
             will be asked once to confirm that it stopped, for them all.",
            if needing.len() == 1 { "It was".to_owned() } else { format!("All {} were", needing.len()) }
        ));
    } else if !needing.is_empty() {
        description.push(format!(
            "{} of them {} held because an expired claim could not be taken over safely: the old worker may still \
             act ({}). You will be asked once to confirm that it stopped, for them all.",
            needing.len(),
            if needing.len() == 1 { "was" } else { "were" },
            listed_keys(&needing)
        ));
    }
    if kind == CommandKind::Takeover {
        description.push(
            "Those that go to held need a retry afterwards, once you have confirmed that the old worker stopped."
                .to_owned(),
        );
    }
    model.mode = Mode::Dialog(Box::new(Dialog {
        command: kind,
        action: first,
        description,
        stage: DialogStage::Reason,
        destination_id: String::new(),
        reason: String::new(),
        old_worker_answer: String::new(),
        bulk: actions,
        bulk_old_worker: needing,
        evidence_request: None,
        offered_id: false,
    }));
    Vec::new()
}

/// Keys for a sentence: all of up to [`LISTED`], else the first ones and how many more.
fn listed_keys(keys: &[String]) -> String {
    let shown = keys.iter().take(LISTED).cloned().collect::<Vec<_>>().join(", ");
    match keys.len().saturating_sub(LISTED) {
        0 => shown,
        more => format!("{shown} and {more} more"),
    }
}

/// "1 marked action", "5 marked actions".
pub fn marked_actions(n: usize) -> String {
    if n == 1 { "1 marked action".to_owned() } else { format!("{n} marked actions") }
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

/// One marked action's change, as the ledger's rule plans it.
fn describe_one(model: &Model, kind: CommandKind, action: &ActionRecord) -> Result<String, Refusal> {
    let now = model.now.unwrap_or(action.updated_at);
    let command = manual_command(model, kind, action, String::new()).unwrap_or(ManualCommand::Retry);
    if kind == CommandKind::Takeover {
        // What was sent under each claim is read by the ledger, locked, when it runs: said here
        // from the destination's declared protection alone.
        let protected = ClaimFacts { sent_under_claim: true, repeat_protected: true };
        manual::plan(action, &command, now, protected, false, false)?;
        return Ok(if model.destinations.protects_against_repeat(action, now) {
            "in_progress -> pending (the destination protects against a repeat)".to_owned()
        } else {
            "in_progress -> pending if nothing was sent under its claim, else held".to_owned()
        });
    }
    // Bulk commands never approve or reject, so no proposal is left deciding where they go.
    // As if the person confirms that the old worker stopped where the dialog asks it.
    let planned = manual::plan(action, &command, now, ClaimFacts::WORST_CASE, true, false)?;
    Ok(if planned.from == planned.to {
        format!("stays {}", planned.from)
    } else {
        format!("{} -> {}", planned.from, planned.to)
    })
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

/// Why the console does not offer a command on an action.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotOffered {
    /// The ledger would refuse it in the action's state.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// A lookup needs the destinations' configuration, which the console was started without.
    #[error("look up needs the destinations' configuration: start review with --config")]
    NoConfiguration,
    /// The action's destination is not in the configuration.
    #[error("cannot look up {key}: its destination {destination} is not in the configuration")]
    NotConfigured { key: ActionKey, destination: String },
    /// The action's destination declares no lookup.
    #[error("cannot look up {key}: destination {destination} declares no lookup")]
    NoLookup { key: ActionKey, destination: String },
}

/// Whether the action's destination, as configured, can look a record up: `l` is offered only then.
pub fn lookup_offered(model: &Model, action: &ActionRecord) -> Result<(), NotOffered> {
    if model.configured.is_empty() {
        return Err(NotOffered::NoConfiguration);
    }
    let destination = model.destinations.destination_name(action).unwrap_or("(none)").to_owned();
    match model.destinations.of(action) {
        None => Err(NotOffered::NotConfigured { key: action.key.clone(), destination }),
        Some(capabilities) if !capabilities.lookup => {
            Err(NotOffered::NoLookup { key: action.key.clone(), destination })
        }
        Some(_) => Ok(()),
    }
}

/// A destination id the evidence already names, to offer when a person resolves an action as
/// completed: the latest lookup's record id, else the id the latest response names (its
/// evidence, or the destination's configured id pointer on the stored body, e.g. a 409 that
/// names the existing record).
pub fn named_destination_id(model: &Model, detail: &ActionDetail) -> Option<String> {
    if let Some(id) = detail.lookups.iter().rev().find_map(|l| l.destination_id.clone()) {
        return Some(id);
    }
    let pointer = model.destinations.destination_name(&detail.action).and_then(|d| model.id_pointers.get(d));
    detail.attempts.iter().rev().find_map(|attempt| {
        attempt.evidence.destination_id.clone().or_else(|| {
            let body = attempt.evidence.body.as_deref()?;
            crate::destination::id_in_body(body, pointer?)
        })
    })
}

/// What a takeover of this action will come to, decided by the same rule the ledger applies
/// (rule 5: [`ClaimFacts::takeover_is_safe`] through [`manual::plan`]) from the facts as the
/// detail shows them; the ledger decides again, locked, when it runs.
fn takeover_outcome(model: &Model, detail: &ActionDetail) -> Result<String, Refusal> {
    let action = &detail.action;
    let now = model.now.unwrap_or(action.updated_at);
    let facts = ClaimFacts {
        sent_under_claim: detail.sent_under_current_claim(),
        repeat_protected: model.destinations.protects_against_repeat(action, now),
    };
    let planned = manual::plan(action, &ManualCommand::Takeover, now, facts, true, false)?;
    Ok(format!("This action will go to {}: {}.", planned.to, facts.takeover_why()))
}

/// What a command will do, for the dialog; or why it cannot run.
fn describe(model: &Model, kind: CommandKind, action: &ActionRecord) -> Result<Vec<String>, NotOffered> {
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
        CommandKind::Lookup => {
            lookup_offered(model, action)?;
            vec![
                format!("Look up {key} at {} now.", action.destination.as_deref().unwrap_or("its destination")),
                if action.state == State::Unknown {
                    "Found and matching: completed. Nothing there: back to pending. Different: conflict.".to_owned()
                } else {
                    format!(
                        "It is {}: the lookup reports what the destination holds, kept as evidence; it stays {}.",
                        action.state, action.state
                    )
                },
            ]
        }
        CommandKind::Takeover => {
            plan(&ManualCommand::Takeover)?;
            let outcome = match model.detail.as_deref().filter(|d| d.action.key == action.key) {
                Some(detail) => takeover_outcome(model, detail)?,
                None => "Reading what was sent under its claim…".to_owned(),
            };
            vec![
                format!(
                    "Take over {key} from {} under ownership version {}.",
                    action.claimed_by.as_deref().unwrap_or("its worker"),
                    action.ownership_version + 1
                ),
                outcome,
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
    CommandKind::ALL.into_iter().filter(|kind| describe(model, *kind, action).is_ok()).collect()
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
            let mut dialog = Dialog {
                command: kind,
                action,
                description,
                stage,
                destination_id: String::new(),
                reason: String::new(),
                old_worker_answer: String::new(),
                bulk: Vec::new(),
                bulk_old_worker: Vec::new(),
                evidence_request: None,
                offered_id: false,
            };
            // A takeover's outcome and a destination id the evidence names come from the detail:
            // the open one, or one read for the dialog.
            let mut effects = Vec::new();
            if matches!(kind, CommandKind::Takeover | CommandKind::ResolveCompleted) {
                if let Some(detail) = model.detail.clone().filter(|d| d.action.key == dialog.action.key) {
                    with_evidence(model, &mut dialog, &detail);
                } else {
                    let effect = model.load_detail(dialog.action.key.clone());
                    dialog.evidence_request = Some(model.detail_request);
                    effects.push(effect);
                }
            }
            model.mode = Mode::Dialog(Box::new(dialog));
            return effects;
        }
    }
    Vec::new()
}

/// Completes a dialog from the action's detail: the takeover's outcome, a destination id to
/// offer.
fn with_evidence(model: &Model, dialog: &mut Dialog, detail: &ActionDetail) {
    match dialog.command {
        CommandKind::Takeover => {
            let outcome = takeover_outcome(model, detail).unwrap_or_else(|refusal| refusal.to_string());
            if let Some(line) = dialog.description.iter_mut().find(|l| l.starts_with("Reading what was sent")) {
                *line = outcome;
            }
        }
        CommandKind::ResolveCompleted if dialog.destination_id.is_empty() => {
            if let Some(id) = named_destination_id(model, detail) {
                dialog.description.push(format!("The evidence names {id}: Enter takes it, typing replaces it."));
                dialog.destination_id = id;
                dialog.offered_id = true;
            }
        }
        _ => {}
    }
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
            if dialog.stage == DialogStage::DestinationId && std::mem::take(&mut dialog.offered_id) {
                dialog.destination_id.clear();
            }
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
    if !dialog.bulk.is_empty() {
        let (kind, actions) = (dialog.command, dialog.bulk.clone());
        // Confirmed for the keys the dialog named, through the same ledger command as one action.
        let stopped: Vec<String> =
            if dialog.old_worker_confirmed() { dialog.bulk_old_worker.clone() } else { Vec::new() };
        model.info(format!("{} {}: working…", kind.label(), marked_actions(actions.len())));
        // Bulk commands never approve or reject, so no action's shown proposal is named.
        let Some(first) = actions.first() else { return Vec::new() };
        let Some(command) = manual_command(model, kind, first, String::new()) else { return Vec::new() };
        let requests = actions
            .into_iter()
            .map(|action| ManualRequest {
                old_worker_stopped: stopped.iter().any(|k| k == action.key.as_str()),
                key: action.key,
                person: model.owner.clone(),
                reason: reason.clone(),
                expect_version: Some(action.revision),
                command: command.clone(),
            })
            .collect();
        return vec![Effect::RunEach(requests)];
    }
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
                Err(failure) => {
                    model.error(format!("database: {} (the console keeps trying)", failure.message));
                    Vec::new()
                }
                Ok(snapshot) => apply_snapshot(model, &request, snapshot),
            }
        }
        Done::DetailLoaded { id, result } => {
            if let Mode::Dialog(dialog) = &model.mode
                && dialog.evidence_request == Some(id)
            {
                let mut dialog = dialog.clone();
                dialog.evidence_request = None;
                match result {
                    Ok(detail) => with_evidence(model, &mut dialog, &detail),
                    Err(failure) => model.error(format!("database: {}", failure.message)),
                }
                model.mode = Mode::Dialog(dialog);
                return Vec::new();
            }
            if id == model.detail_request && matches!(model.mode, Mode::Detail | Mode::Dialog(_)) {
                match result {
                    Ok(detail) => model.detail = Some(detail),
                    Err(failure) => model.error(format!("database: {}", failure.message)),
                }
            }
            Vec::new()
        }
        Done::Each { verb, results } => {
            close_dialog(model);
            let mut result = BulkResult {
                verb,
                done: Vec::new(),
                refused: Vec::new(),
                failed: Vec::new(),
                failed_kind: None,
                scroll: 0,
            };
            for (key, answer) in results {
                match answer {
                    Ok(change) => {
                        model.marks.remove(&key);
                        result.done.push((SafeText::new(&key), SafeText::new(&change)));
                    }
                    Err(why) if why.kind == FailureKind::Refused => {
                        result.refused.push((SafeText::new(&key), SafeText::new(&why.message)));
                    }
                    Err(why) => {
                        result.failed_kind.get_or_insert(why.kind);
                        result.failed.push((SafeText::new(&key), SafeText::new(&why.to_string())));
                    }
                }
            }
            // A stable order whatever order they ran in: by key.
            result.done.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
            result.refused.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
            result.failed.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
            let summary = format!("{}; the result lists each (Esc closes it)", result.summary());
            match result.failed_kind {
                Some(kind) => model.did_not_run(kind, format!("{summary}; those not done stay marked")),
                None if result.refused.is_empty() => model.info(summary),
                None => model.refuse(format!("{summary}; the refused ones stay marked")),
            }
            model.result = Some(Box::new(result));
            model.refresh()
        }
        Done::Copied => Vec::new(),
        Done::Marked { request, result } => {
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
                        model.info(format!(
                            "marked all {n} in the {pane} pane{filter}; {marked} marked in all (u unmarks)"
                        ));
                    }
                }
                Err(failure) => model.error(format!("database: {}", failure.message)),
            }
            Vec::new()
        }
        Done::Command(result) => {
            close_dialog(model);
            match result {
                Ok(text) => model.info(text),
                // Only a refusal is called one: a destination that cannot be reached failed.
                Err(failure) => model.did_not_run(failure.kind, failure.to_string()),
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
        let effects = update(&mut model, Msg::Done(Done::Command(Err(Failure::new(FailureKind::Refused, "it changed")))));
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
        update(&mut model, Msg::Done(Done::Loaded { request, result: Err(Failure::new(FailureKind::Error, "connection refused")) }));
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
}
