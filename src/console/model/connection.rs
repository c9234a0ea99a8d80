//! Whether the ledger answers: the loads that reach it and those that cannot, as the driver
//! reports them, and the commands held back while it is away.

use super::effect::LoadRequest;
use super::state::{Away, Model};
use crate::error::Kind;

/// A load brought rows: the ledger answers, and an outage it ends is over, its status line taken
/// down with it. `true` when it ended one.
pub(super) fn answered(model: &mut Model, request: u64) -> bool {
    if request < model.connection.latest {
        return false;
    }
    model.connection.latest = request;
    model.connection.refreshed = model.clock;
    let Some(away) = model.connection.away.take() else { return false };
    if model.status.as_ref() == Some(&away.status) {
        model.status = None;
    }
    true
}

/// A load could not reach the ledger: from the first, the console says so, and runs no command
/// until a load answers again.
pub(super) fn unreachable(model: &mut Model, request: &LoadRequest, message: &str) {
    if model.loading == Some(request.id) {
        model.loading = None;
    }
    if request.id < model.connection.latest {
        return;
    }
    model.connection.latest = request.id;
    if model.connection.away.is_none() {
        model.error(format!("database: {message} (the console keeps trying)"));
        if let Some(status) = model.status.clone() {
            model.connection.away = Some(Away { since: model.clock, status });
        }
    }
}

/// Why no command can run now, or `None` while the ledger answers.
pub(super) fn refusal(model: &Model) -> Option<String> {
    let away = model.connection.away.as_ref()?;
    Some(format!("the ledger cannot be reached{}: nothing was changed; try again once it is back", away.since_text()))
}

/// Holds a command back while the ledger is away: it did not run, a failure like any other
/// that is not the ledger's refusal. Its line is the outage's own, taken down with it. `true`
/// when it was held back.
pub(super) fn hold_back(model: &mut Model, after: &str) -> bool {
    let Some(reason) = refusal(model) else { return false };
    model.did_not_run(Kind::Error, format!("{reason}{after}"));
    if let (Some(away), Some(status)) = (model.connection.away.as_mut(), model.status.as_ref()) {
        away.status = status.clone();
    }
    true
}
