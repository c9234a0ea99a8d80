//! The console's state: the [`Model`] and the types it holds, what a person sees and is doing.
//! Nothing here decides what a key does (`update`) or what to load (`load`).

use crate::console::keys::CommandKind;
use crate::console::layout::ScrollLimits;
use crate::console::safe_text::SafeText;
use crate::domain::{ActionRecord, DestinationCatalog, Person, RefusedSubmission, State, Timestamp};
use crate::error::Kind;
use crate::ledger::ActionDetail;

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

    pub(super) fn step(self, by: isize) -> Self {
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

    pub(super) fn ids(&self) -> (Option<i64>, Option<i64>) {
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

/// The word the console puts before a failure's message, by the kind every front end gives it
/// ([`crate::error::Kind`]): only a refusal is called one.
fn failure_word(kind: Kind) -> &'static str {
    match kind {
        Kind::Refused => "refused",
        Kind::NotFound => "not found",
        Kind::Usage => "cannot be used",
        Kind::Error => "failed",
    }
}

/// An effect that did not succeed: its kind, and the error's message as the ledger or the
/// destination worded it. The message is untrusted text: it is escaped where it is shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", failure_word(*kind))]
pub struct Failure {
    pub kind: Kind,
    pub message: String,
}

impl Failure {
    pub fn new(kind: Kind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DialogStage {
    DestinationId,
    Reason,
    /// Only for an action held because its expired claim could not be taken over safely, and a
    /// command that would run it again: the person types `stopped` to confirm that the old worker
    /// can no longer act (rule 5).
    OldWorkerStopped,
    /// Only for a retry that could create a second effect (the destination cannot recognise a
    /// repeat, and an earlier request may have written): the person types `not written` to
    /// confirm that they checked the destination and it holds no record (rule 6).
    NotWritten,
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
    /// What the person typed at the not-written step.
    pub not_written_answer: String,
    /// A bulk command: the marked actions as the person saw them (`action` is the first).
    pub bulk: Vec<ActionRecord>,
    /// Of `bulk`, the keys of those held because their expired claim could not be taken over
    /// safely, which this command would run again: the dialog asks once whether their old
    /// workers stopped (rule 5), for them all.
    pub bulk_old_worker: Vec<String>,
    /// The keys (of the one action, or of `bulk`) whose retry could create a second effect: the
    /// dialog asks once whether the destination holds no record (rule 6), for them all.
    pub not_written_keys: Vec<String>,
    /// The detail being read for this dialog (a takeover's facts, a destination id the evidence
    /// names), when it was opened from the list.
    pub evidence_request: Option<u64>,
    /// The destination id was offered from the evidence: the first character typed replaces it.
    pub offered_id: bool,
    /// How far the description is scrolled: a bulk command lists every marked action.
    pub scroll: u16,
    /// What a bulk command on each marked action will be decided from, by key, as the ledger
    /// read it for this dialog; `None` until it arrives.
    pub facts: Option<std::collections::BTreeMap<crate::domain::ActionKey, crate::ledger::DecisionFacts>>,
    /// The action's detail an approval or a rejection chooses its proposal from: the open
    /// detail, or one read for the dialog.
    pub evidence: Option<Box<ActionDetail>>,
    /// Which of the proposals waiting (from 0, oldest first) an approval or a rejection acts on.
    pub proposal: usize,
}

/// The word a person types to confirm that the old worker of an unsafely expired claim stopped.
pub const OLD_WORKER_STOPPED_ANSWER: &str = "stopped";

/// The words a person types to confirm that the destination holds no record of an action whose
/// retry could otherwise create a second one.
pub const NOT_WRITTEN_ANSWER: &str = "not written";

/// What an open detail shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetailView {
    /// Every section, values cut to a line where they are long.
    Facts,
    /// Every value in full, however long (`v`): payloads, each attempt's error and response
    /// body, each lookup's answer, the last error.
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

/// Whether the ledger answers the console's loads, as the driver reports their results.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Connection {
    /// When a load last brought rows, by [`Model::clock`]: what "refreshed 3s ago" counts from.
    pub refreshed: Option<Timestamp>,
    /// Set while loads cannot reach the ledger.
    pub away: Option<Away>,
    /// The latest load whose result this follows: an earlier one answering late says nothing.
    pub(super) latest: u64,
}

/// Loads cannot reach the ledger: none answered within the console's bound, or the connection
/// failed. The console keeps trying, and runs no command meanwhile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Away {
    /// When the first load that could not reach it came back, by [`Model::clock`].
    pub since: Option<Timestamp>,
    /// What the status line last said of it (that it went away, or a command held back):
    /// taken down when the ledger answers again, unless something else was said since.
    pub(super) status: Status,
}

impl Away {
    /// " since 14:02:11 UTC", or nothing when the driver gave no time.
    pub fn since_text(&self) -> String {
        self.since.map(|t| format!(" since {} UTC", t.format("%H:%M:%S"))).unwrap_or_default()
    }
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
    pub failed_kind: Option<Kind>,
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
    /// Which of the rows shown are blocked (pending, waiting on a cancelled or failed action).
    pub blocked: std::collections::BTreeMap<crate::domain::ActionKey, crate::domain::Blocked>,
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
    /// How far the open detail is scrolled, in rows: a value shown in full can run to more rows
    /// than a `u16` counts.
    pub detail_scroll: usize,
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
    pub stopped: Option<Kind>,
    /// How far the open detail, the help and a bulk result scroll at most on this screen, as the
    /// view measured them before the key being handled: the update bounds scrolling by them.
    pub scroll_limits: ScrollLimits,
    pub(super) next_request: u64,
    pub(super) loading: Option<u64>,
    pub(super) detail_request: u64,
    /// The filter applied when the filter line was opened: Esc puts it back.
    pub(super) filter_before_edit: Option<FilterTerms>,
    /// The search applied to the open detail (`/` then Enter): its matches are marked, and `n`
    /// and `N` move between them.
    pub detail_search: Option<DetailSearch>,
    /// The search line being typed in the open detail, until Enter or Esc.
    pub search_line: Option<String>,
    /// This host's time when the driver handed over the message being handled: what the
    /// connection's times are measured by (not the database's, which may be what is away). The
    /// driver sets it; the update never reads a clock.
    pub clock: Option<Timestamp>,
    /// Whether the ledger answers, since when it does not, and when rows last came.
    pub connection: Connection,
}

/// A search applied to the open detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetailSearch {
    /// The text searched for, as typed; case is ignored.
    pub text: String,
    /// Which match is shown, from 0 in reading order.
    pub current: usize,
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
            blocked: std::collections::BTreeMap::new(),
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
            scroll_limits: ScrollLimits::default(),
            next_request: 0,
            loading: None,
            detail_request: 0,
            filter_before_edit: None,
            detail_search: None,
            search_line: None,
            clock: None,
            connection: Connection::default(),
        }
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

    pub(super) fn selected_key(&self) -> Option<String> {
        match &self.rows {
            Rows::Actions(rows) => rows.get(self.selected).map(|a| a.key.to_string()),
            Rows::Refused(rows) => rows.get(self.selected).map(|r| r.id.to_string()),
        }
    }

    pub(super) fn info(&mut self, text: impl AsRef<str>) {
        self.status = Some(Status { kind: StatusKind::Info, text: SafeText::from_ui(text) });
    }

    pub(super) fn error(&mut self, text: impl AsRef<str>) {
        self.status = Some(Status { kind: StatusKind::Error, text: SafeText::from_ui(text) });
    }

    /// A command that was refused: shown like any error, and counted.
    pub(super) fn refuse(&mut self, text: impl AsRef<str>) {
        self.did_not_run(Kind::Refused, text);
    }

    /// A command that did not run, for the reason `kind` says: shown like any error, and counted
    /// by its kind.
    pub(super) fn did_not_run(&mut self, kind: Kind, text: impl AsRef<str>) {
        if kind == Kind::Refused {
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
            DialogStage::NotWritten => "the confirmation that the destination holds no record",
            DialogStage::Confirm => "y to confirm",
            DialogStage::Running => "the ledger's answer",
        };
        let on = if dialog.bulk.is_empty() { dialog.action.key.to_string() } else { marked_actions(dialog.bulk.len()) };
        Some(format!("{} on {on}, waiting for {waiting}", dialog.command.label()))
    }
}

pub(super) fn text_field(model: &mut Model) -> Option<&mut String> {
    match &mut model.mode {
        Mode::Filter(text) => Some(text),
        Mode::Dialog(dialog) => match dialog.stage {
            DialogStage::DestinationId => Some(&mut dialog.destination_id),
            DialogStage::Reason => Some(&mut dialog.reason),
            DialogStage::OldWorkerStopped => Some(&mut dialog.old_worker_answer),
            DialogStage::NotWritten => Some(&mut dialog.not_written_answer),
            DialogStage::Confirm | DialogStage::Running => None,
        },
        Mode::Detail => model.search_line.as_mut(),
        Mode::List => None,
    }
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

/// "1 marked action", "5 marked actions".
pub fn marked_actions(n: usize) -> String {
    if n == 1 { "1 marked action".to_owned() } else { format!("{n} marked actions") }
}

/// At most this many actions are marked at once by `*`.
pub const MARK_ALL_LIMIT: i64 = 1000;
