//! What the update and the driver say to each other: the [`Effect`]s the update asks for, and
//! the messages ([`Msg`], with an effect's result as [`Done`]) that come back to it.

use super::state::{Failure, FilterTerms, Pane, Rows};
use crate::domain::ManualCommand;
use crate::domain::{ActionKey, ActionRecord, Blocked, Person, Reason, State, Timestamp};
use crate::ledger::{ActionDetail, DecisionFacts, ManualRequest};
use crate::store::ListOrder;
use ratatui::crossterm::event::KeyEvent;
use std::collections::BTreeMap;

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
    /// The row with this key if the window holds it, else the row at this index: the first for
    /// a new filter, the one that took its place for an action that left the pane.
    KeyOr(String, usize),
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
    /// What a bulk command on each of these actions will be decided from, for its dialog.
    LoadFacts {
        id: u64,
        command: ManualCommand,
        actions: Vec<ActionRecord>,
    },
    Run(ManualRequest),
    /// Bulk triage: each command in turn, each in its own transaction against its version seen.
    RunEach(Vec<ManualRequest>),
    /// Mark every action of the pane that matches the filter (up to the request's limit).
    MarkAll(LoadRequest),
    /// Put this text on the person's clipboard, through the terminal.
    Copy(String),
    /// Give the terminal back to the shell and stop (Ctrl-Z), until `fg` continues the console,
    /// which then takes the terminal again and draws the whole screen anew.
    Suspend,
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
    /// Which of the rows are blocked, as the ledger decides it.
    pub blocked: BTreeMap<ActionKey, Blocked>,
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
    /// What a bulk command will be decided from, by key.
    FactsLoaded {
        id: u64,
        result: Result<BTreeMap<ActionKey, DecisionFacts>, Failure>,
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
    /// A load that could not reach the ledger: no answer within the driver's bound, or the
    /// connection failed (refused, reset, lost, no connection to be had). `message` says which.
    Unreachable {
        request: LoadRequest,
        message: String,
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
