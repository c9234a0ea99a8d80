//! Why the ledger refuses a change: one kind per reason, each carrying the facts it is worded
//! from, so that callers can tell the kinds apart and people read which key, why, and when the
//! change would be allowed.
//!
//! The words are the facts alone, the same through every front end. What the person can do about
//! a refusal is a [`WayOut`], which each front end says in its own terms: a flag on the command
//! line, a key in the console, a field of the HTTP API's JSON.

use super::key::{ActionKey, KeyError};
use super::record::{ActionRecord, Timestamp};
use super::state::{State, TransitionRefused, join_states};

/// A change the ledger refused. Every kind exits with [`crate::error::exit::REFUSED`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The command is not allowed from the state the action is in.
    #[error("cannot {verb} {key}: it is {state}; {verb} is allowed only when it is {}", condition(allowed, *requirement))]
    StateForbids {
        verb: &'static str,
        key: ActionKey,
        state: State,
        /// The states the command may start from.
        allowed: Vec<State>,
        /// What else those states need, such as an expired lease.
        requirement: Option<&'static str>,
    },
    /// A proposed payload awaits a decision, and the command would settle or send the approved
    /// one past it.
    #[error("cannot {verb} {key}: a proposed payload is waiting for a decision; approve or reject it first")]
    ProposalWaiting { verb: &'static str, key: ActionKey },
    /// Approving or rejecting an action that has no proposed payload.
    #[error("cannot {verb} {key}: it has no proposed payload to decide on")]
    NoProposal { verb: &'static str, key: ActionKey },
    /// Approving without naming a proposal while several wait: which one is meant cannot be told.
    #[error(
        "cannot {verb} {key}: {} proposed payloads are waiting ({}) and none was named; which one is meant cannot be \
         told",
        waiting.len(),
        waiting.join(", ")
    )]
    ProposalNotChosen { verb: &'static str, key: ActionKey, waiting: Vec<String> },
    /// The fingerprint named matches no waiting proposal, or more than one.
    #[error(
        "cannot {verb} {key}: {named:?} names {} of the proposed payloads waiting ({}); give more of the fingerprint",
        if *matches == 0 { "none" } else { "more than one" },
        waiting.join(", ")
    )]
    ProposalNotFound { verb: &'static str, key: ActionKey, named: String, matches: usize, waiting: Vec<String> },
    /// An automation's token for one destination asked about an action of another: it may
    /// never begin, renew or finish another destination's action.
    #[error(
        "{key} is {}, and this executor performs {asked} only",
        destination.as_deref().map_or_else(|| "recorded without a destination".to_owned(), |d| format!("for destination {d}"))
    )]
    OtherDestination { key: String, destination: Option<String>, asked: String },
    /// Assigning an action whose state is final.
    #[error("cannot assign {key}: it is {state}, which is final; there is nothing to follow up")]
    Final { key: ActionKey, state: State },
    /// Taking over a claim whose lease is still running.
    #[error(
        "cannot take over {key}: the claim by {} is live for {seconds_left} more seconds (until {}); only a stale \
         claim, whose lease has expired, can be taken over",
        claimed_by.as_deref().unwrap_or("?"),
        until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    )]
    ClaimLive { key: ActionKey, claimed_by: Option<String>, seconds_left: i64, until: Timestamp },
    /// The action is no longer at the version the person saw.
    #[error(
        "cannot {verb} {key}: it changed since you read it (you saw version {seen}, it is now at version {current} \
         and {state}{})",
        by_whom(last_change.as_deref())
    )]
    ChangedSinceRead {
        verb: &'static str,
        key: ActionKey,
        seen: i64,
        current: i64,
        state: State,
        /// Who made the last change and what it was ("Bo Diaz: approved at 12:01:05"), so that
        /// the person who lost the race knows who won it; `None` where it was not read.
        last_change: Option<String>,
    },
    /// Another transaction wrote the actions after they were read in this one.
    #[error("{} changed while this change was being written; read it again", join_keys(keys))]
    ChangedWhileWriting { keys: Vec<ActionKey> },
    /// Approving a changed payload needs a derived key (`KEY#update-N` for an update action,
    /// `KEY#rev-N` for an idempotency key) that would break the key rules, e.g. be too long.
    #[error(
        "cannot approve {key}: the {what} it needs, {derived:?}, is refused: {problem}; settle the change at the \
         destination by hand and reject the proposal"
    )]
    DerivedKeyRefused { key: ActionKey, what: &'static str, derived: String, problem: KeyError },
    /// The key of the update action an approval would record is already taken by another action.
    #[error(
        "cannot approve {key}: its update action {update_key} already exists; reject the proposal, or settle {update_key} \
         first"
    )]
    UpdateKeyTaken { key: ActionKey, update_key: ActionKey },
    /// Re-creating a completed action needs the key `KEY#recreate-N`, which would break the key
    /// rules, e.g. be too long.
    #[error(
        "cannot re-create {key}: the key of the new action, {derived:?}, is refused: {problem}; create the record at \
         the destination by hand"
    )]
    RecreateKeyRefused { key: ActionKey, derived: String, problem: KeyError },
    /// Re-creating an update action: the record it updated is the original action's, which
    /// carries the latest approved payload.
    #[error(
        "cannot re-create {key}: it is an update of {original}, not a creation; re-create {original}, which carries \
         the latest approved payload"
    )]
    RecreateOfUpdate { key: ActionKey, original: ActionKey },
    /// The action was purged (rule 7): only its tombstone is left, and it never changes again.
    #[error(
        "cannot {verb} {key}: it is {state} and was purged by purge run {run} on {}; only its tombstone is kept, \
         and a purged action is never claimed, retried or resolved again",
        at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    )]
    Purged { verb: &'static str, key: ActionKey, state: State, run: i64, at: Timestamp },
    /// A batch named one key twice.
    #[error("{key} appears twice in one batch")]
    RepeatedKey { key: ActionKey },
    /// Acknowledging late results on an action that has none waiting.
    #[error(
        "cannot acknowledge {key}: it has no unacknowledged late result; its late results, and who acknowledged \
         them, are kept with the action"
    )]
    NothingToAcknowledge { key: ActionKey },
    /// Running an action again that was held because its expired claim could not be taken over
    /// safely, without the person's confirmation that the old worker can no longer act (rule 5).
    #[error(
        "cannot {verb} {key}: it was held because its expired claim could not be taken over safely, and the old \
         worker may still send its request; check that the worker process that held the claim has stopped (or can \
         no longer reach the destination) and what the destination holds for this key, then confirm it"
    )]
    OldWorkerMayAct { verb: &'static str, key: ActionKey },
    /// A retry that could create a second effect, without the person's confirmation that the
    /// destination holds no record (rule 6): an earlier request may have written, and the
    /// destination can recognise a repeat neither by a lookup nor by an idempotency key.
    #[error(
        "cannot {verb} {key} yet: an earlier request may have written at the destination, and the destination \
         cannot recognise a repeat (no lookup, no idempotency key that still covers the earlier requests); if the \
         first request was written, this creates a second record: check the destination for it first, then \
         confirm that it holds none, or resolve the action as completed if it does"
    )]
    MayWriteTwice { verb: &'static str, key: ActionKey },
    /// A cancellation of an action an earlier request may have written, without the person's
    /// confirmation that the destination holds no record: a cancelled action says that nothing was
    /// done, and the effect may exist.
    #[error(
        "cannot cancel {key} yet: an earlier request may have written at the destination, and a cancelled action \
         says that nothing was done; check the destination first: if it holds a record, resolve the action as \
         completed with its id; if it holds none, confirm that"
    )]
    CancelMayHaveWritten { key: ActionKey },
    /// The transition table does not allow the change.
    #[error(transparent)]
    Transition(#[from] TransitionRefused),
}

/// What a person can do about a refusal, beyond what its words say. Each front end words it in its
/// own terms (`cli::render`, the console's result line, the HTTP API's `way_out` member).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WayOut {
    /// Name one of the waiting proposals by its fingerprint (its first characters are enough).
    NameProposal,
    /// Read the action again, and decide on what it is now.
    ReadAgain,
    /// Confirm, as part of the command, that the old worker can no longer act (rule 5).
    ConfirmOldWorkerStopped,
    /// Confirm, as part of the command, that the destination holds no record of the action
    /// (rule 6).
    ConfirmNotWritten,
    /// The action's detail lists its late results and who acknowledged them.
    SeeLateResults,
}

impl Refusal {
    /// What the person can do about this refusal, where its words alone do not say how.
    pub fn way_out(&self) -> Option<WayOut> {
        match self {
            Self::ProposalNotChosen { .. } | Self::ProposalNotFound { .. } => Some(WayOut::NameProposal),
            Self::ChangedSinceRead { .. } | Self::ChangedWhileWriting { .. } => Some(WayOut::ReadAgain),
            Self::OldWorkerMayAct { .. } => Some(WayOut::ConfirmOldWorkerStopped),
            Self::MayWriteTwice { .. } | Self::CancelMayHaveWritten { .. } => Some(WayOut::ConfirmNotWritten),
            Self::NothingToAcknowledge { .. } => Some(WayOut::SeeLateResults),
            _ => None,
        }
    }

    /// The action the refusal is about (the first, for a batch), where it names one.
    pub fn key(&self) -> Option<&ActionKey> {
        match self {
            Self::StateForbids { key, .. }
            | Self::ProposalWaiting { key, .. }
            | Self::NoProposal { key, .. }
            | Self::ProposalNotChosen { key, .. }
            | Self::ProposalNotFound { key, .. }
            | Self::Final { key, .. }
            | Self::ClaimLive { key, .. }
            | Self::ChangedSinceRead { key, .. }
            | Self::DerivedKeyRefused { key, .. }
            | Self::UpdateKeyTaken { key, .. }
            | Self::RecreateKeyRefused { key, .. }
            | Self::RecreateOfUpdate { key, .. }
            | Self::Purged { key, .. }
            | Self::RepeatedKey { key }
            | Self::NothingToAcknowledge { key }
            | Self::OldWorkerMayAct { key, .. }
            | Self::MayWriteTwice { key, .. }
            | Self::CancelMayHaveWritten { key } => Some(key),
            Self::ChangedWhileWriting { keys } => keys.first(),
            Self::Transition(_) | Self::OtherDestination { .. } => None,
        }
    }

    /// `verb` refused on `action` because it is no longer at the revision `seen` the person read.
    pub fn changed_since_read(verb: &'static str, action: &ActionRecord, seen: i64) -> Self {
        Self::ChangedSinceRead {
            verb,
            key: action.key.clone(),
            seen,
            current: action.revision,
            state: action.state,
            last_change: None,
        }
    }

    /// The same refusal, saying who made the last change to its action (from its newest audit
    /// entry) where it is one that names no one yet.
    #[must_use]
    pub fn with_last_change(mut self, entry: Option<&super::AuditEntry>) -> Self {
        if let (Self::ChangedSinceRead { last_change, .. }, Some(entry)) = (&mut self, entry) {
            *last_change = Some(format!(
                "{}: {} at {}",
                entry.actor,
                entry.event.as_str().replace('_', " "),
                entry.at.format("%H:%M:%S UTC")
            ));
        }
        self
    }
}

fn condition(allowed: &[State], requirement: Option<&str>) -> String {
    match requirement {
        Some(requirement) => format!("{} {requirement}", join_states(allowed)),
        None => join_states(allowed),
    }
}

fn join_keys(keys: &[ActionKey]) -> String {
    keys.iter().map(ActionKey::as_str).collect::<Vec<_>>().join(", ")
}

/// ", last changed by NAME: EVENT at TIME", where the change was read.
fn by_whom(last_change: Option<&str>) -> String {
    last_change.map(|change| format!("; last changed by {change}")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Event, state};
    use chrono::TimeZone as _;

    fn key(text: &str) -> ActionKey {
        ActionKey::parse(text).unwrap()
    }

    #[test]
    fn each_kind_reads_as_a_sentence_with_its_facts() {
        let until = chrono::Utc.with_ymd_and_hms(2030, 1, 2, 3, 4, 5).unwrap();
        let cases = [
            (
                Refusal::StateForbids {
                    verb: "take over",
                    key: key("k"),
                    state: State::Pending,
                    allowed: vec![State::InProgress],
                    requirement: Some("with an expired lease"),
                },
                "cannot take over k: it is pending; take over is allowed only when it is in_progress with an expired \
                 lease",
            ),
            (
                Refusal::ProposalWaiting { verb: "retry", key: key("k") },
                "cannot retry k: a proposed payload is waiting for a decision; approve or reject it first",
            ),
            (
                Refusal::NoProposal { verb: "approve", key: key("k") },
                "cannot approve k: it has no proposed payload to decide on",
            ),
            (
                Refusal::Final { key: key("k"), state: State::Cancelled },
                "cannot assign k: it is cancelled, which is final; there is nothing to follow up",
            ),
            (
                Refusal::ClaimLive { key: key("k"), claimed_by: Some("w1".into()), seconds_left: 30, until },
                "cannot take over k: the claim by w1 is live for 30 more seconds (until 2030-01-02T03:04:05Z); only \
                 a stale claim, whose lease has expired, can be taken over",
            ),
            (
                Refusal::ChangedSinceRead {
                    verb: "look up",
                    key: key("k"),
                    seen: 3,
                    current: 5,
                    state: State::Unknown,
                    last_change: None,
                },
                "cannot look up k: it changed since you read it (you saw version 3, it is now at version 5 and \
                 unknown)",
            ),
            (
                Refusal::ChangedSinceRead {
                    verb: "retry",
                    key: key("k"),
                    seen: 3,
                    current: 5,
                    state: State::Cancelled,
                    last_change: Some("Ana Lima: cancelled at 12:01:05 UTC".into()),
                },
                "cannot retry k: it changed since you read it (you saw version 3, it is now at version 5 and \
                 cancelled; last changed by Ana Lima: cancelled at 12:01:05 UTC)",
            ),
            (
                Refusal::ChangedWhileWriting { keys: vec![key("a"), key("b")] },
                "a, b changed while this change was being written; read it again",
            ),
            (Refusal::RepeatedKey { key: key("k") }, "k appears twice in one batch"),
            (
                Refusal::RecreateOfUpdate { key: key("k#update-2"), original: key("k") },
                "cannot re-create k#update-2: it is an update of k, not a creation; re-create k, which carries the \
                 latest approved payload",
            ),
            (
                Refusal::Purged { verb: "retry", key: key("k"), state: State::Completed, run: 7, at: until },
                "cannot retry k: it is completed and was purged by purge run 7 on 2030-01-02T03:04:05Z; only its \
                 tombstone is kept, and a purged action is never claimed, retried or resolved again",
            ),
            (
                Refusal::NothingToAcknowledge { key: key("k") },
                "cannot acknowledge k: it has no unacknowledged late result; its late results, and who acknowledged \
                 them, are kept with the action",
            ),
            (
                Refusal::OldWorkerMayAct { verb: "retry", key: key("k") },
                "cannot retry k: it was held because its expired claim could not be taken over safely, and the old \
                 worker may still send its request; check that the worker process that held the claim has stopped \
                 (or can no longer reach the destination) and what the destination holds for this key, then confirm \
                 it",
            ),
            (
                Refusal::Transition(state::check(Event::Completed, State::Pending, State::Completed).unwrap_err()),
                "completed is not allowed from pending; it is allowed from in_progress",
            ),
        ];
        for (refusal, message) in cases {
            assert_eq!(refusal.to_string(), message);
        }
    }

    /// The domain's words are every front end's: none names a flag, a key binding or a field.
    #[test]
    fn no_refusal_names_a_front_end() {
        let waiting = vec!["ab12".to_owned(), "cd34".to_owned()];
        let refusals = [
            Refusal::ProposalNotChosen { verb: "approve", key: key("k"), waiting: waiting.clone() },
            Refusal::ProposalNotFound { verb: "approve", key: key("k"), named: "ef".into(), matches: 0, waiting },
            Refusal::ChangedSinceRead {
                verb: "retry",
                key: key("k"),
                seen: 1,
                current: 2,
                state: State::Failed,
                last_change: None,
            },
            Refusal::OldWorkerMayAct { verb: "retry", key: key("k") },
            Refusal::NothingToAcknowledge { key: key("k") },
            Refusal::CancelMayHaveWritten { key: key("k") },
        ];
        for refusal in refusals {
            let text = refusal.to_string();
            assert!(!text.contains("--") && !text.contains("actionledger ") && !text.contains('`'), "{text}");
            assert!(refusal.way_out().is_some(), "{refusal:?} says what to do only through its way out");
        }
    }
}
