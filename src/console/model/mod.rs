//! The console's state and its pure update function: `update(&mut Model, Msg) -> Vec<Effect>`.
//! Nothing here touches the database, the clock or the terminal; the driver performs effects and
//! feeds their results back as messages.
//!
//! Cut along its seams, each part importing only those before it: [`state`] (the model and what
//! it holds), [`effect`] (what the update asks for and what comes back), `connection` (whether
//! the ledger answers), `load` (what is loaded and how it is applied), `dialog` (the commands'
//! dialogs, from description to answer) and `update` (keys and messages, dispatched to the
//! others).

mod connection;
mod dialog;
pub mod effect;
mod load;
pub mod state;
mod update;

pub use dialog::{NotOffered, applicable_commands, lookup_offered, named_destination_id};
pub use effect::{Counts, Done, Effect, LoadRequest, MarkedSet, Msg, Selection, Snapshot, Window};
pub use state::{
    Away, BulkResult, Connection, DetailSearch, DetailView, Dialog, DialogStage, Failure, FilterError, FilterTerms,
    MARK_ALL_LIMIT, Mode, Model, NOT_WRITTEN_ANSWER, OLD_WORKER_STOPPED_ANSWER, Order, Pane, Rows, Status, StatusKind,
    marked_actions, thousands,
};
pub use update::update;

#[cfg(test)]
mod tests;
