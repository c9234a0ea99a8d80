//! Update actions (`KEY#update-N`): how an approved new version of a completed action is recorded,
//! and what the completed action takes on once its update completed at the destination. Until
//! then it keeps the payload the destination was last known to hold, so that an update that
//! fails, is cancelled or is resolved as not written leaves it as it was.

use super::tx::{Writer, audit_entry, purge_of_settled, write_action};
use super::{Ledger, LedgerError};
use crate::domain::manual::{self, update_number};
use crate::domain::{
    ActionRecord, ActorKind, Event, ManualCommand, Payload, Proposal, Refusal, State, Timestamp, Transition,
};
use crate::store::{LedgerTx, Store};

/// Records the update action of the approved `proposal` for the completed `original` (which
/// keeps its own payload), in the approving person's name, under the first number after the
/// original's payload revision that no earlier update of it took: a failed update keeps its key
/// and its history. Refused when that key is held by an action that updates something else.
async fn record_update_action<T: LedgerTx>(
    tx: &mut T,
    original: &ActionRecord,
    proposal: &Proposal,
    person: &str,
    reason: &str,
    now: Timestamp,
) -> Result<ActionRecord, LedgerError> {
    let mut number = original.payload_revision + 1;
    let update = loop {
        let candidate = manual::update_action(original, proposal, number, now)?;
        match tx.lock_action(&candidate.key).await? {
            None => break candidate,
            Some(earlier) if earlier.updates.as_ref() == Some(&original.key) => number += 1,
            Some(_) => {
                return Err(Refusal::UpdateKeyTaken { key: original.key.clone(), update_key: candidate.key }.into());
            }
        }
    };
    let Some(created) = tx.insert_actions_if_absent(std::slice::from_ref(&update)).await?.pop() else {
        return Err(Refusal::UpdateKeyTaken { key: original.key.clone(), update_key: update.key }.into());
    };
    let creation = Transition { event: Event::Submitted, from: State::Pending, to: State::Pending };
    let detail = format!(
        "update of {} (destination id {}) from payload revision {} ({}) to {} ({}), approved: {reason}",
        original.key,
        original.destination_id.as_deref().unwrap_or("-"),
        original.payload_revision,
        original.payload.fingerprint().short(),
        number,
        created.payload.fingerprint().short()
    );
    tx.append_audit(&audit_entry(&created, creation, person, ActorKind::Person, Some(detail), now)).await?;
    Ok(created)
}

/// What a person's command on `action` (as written) does to update actions: approving
/// `approved`, a new version of a completed action, records its update action, which is returned;
/// resolving an update action as completed (the person verified it at the destination) makes the
/// action it updates take it on, as a worker's confirmation would.
pub(super) async fn updates_after_command<T: LedgerTx>(
    tx: &mut T,
    action: &ActionRecord,
    command: &ManualCommand,
    approved: Option<Proposal>,
    by: Writer<'_>,
    reason: &str,
) -> Result<Option<ActionRecord>, LedgerError> {
    if matches!(command, ManualCommand::ResolveCompleted { .. }) {
        take_on_completed_update(tx, action, by).await?;
    }
    match approved {
        Some(proposal) => Ok(Some(record_update_action(tx, action, &proposal, by.actor, reason, by.now).await?)),
        None => Ok(None),
    }
}

/// After `update`, an update action, completed (a worker's result, a lookup that found it, a
/// person's resolution): the completed action it updates takes its payload as its approved one,
/// with an `update_applied` entry in its audit trail naming the update, in the name of whoever
/// completed the update. An update older than the revision the action holds (a later one
/// completed first) changes nothing, and the entry says that the destination may now hold the
/// older payload. A purged or missing original changes nothing.
pub(super) async fn take_on_completed_update<T: LedgerTx>(
    tx: &mut T,
    update: &ActionRecord,
    by: Writer<'_>,
) -> Result<(), LedgerError> {
    let (Some(original_key), State::Completed) = (&update.updates, update.state) else { return Ok(()) };
    let Some(mut original) = tx.lock_action(original_key).await? else { return Ok(()) };
    if purge_of_settled(tx, &original).await?.is_some() {
        return Ok(());
    }
    let before = (original.payload_revision, original.payload.fingerprint().short().to_owned());
    let number = update_number(update).unwrap_or_default();
    let detail = if manual::take_update(&mut original, update, by.now) {
        write_action(tx, &mut original, by).await?;
        format!(
            "payload revision {} ({}) replaced by revision {number} ({}): update action {} completed at the \
             destination",
            before.0,
            before.1,
            original.payload.fingerprint().short(),
            update.key
        )
    } else {
        format!(
            "update action {} (payload revision {number}, {}) completed after revision {} ({}) was taken on: the \
             destination may now hold revision {number}'s payload; this action keeps revision {}",
            update.key,
            update.payload.fingerprint().short(),
            before.0,
            before.1,
            before.0
        )
    };
    let stays = Transition { event: Event::UpdateApplied, from: original.state, to: original.state };
    tx.append_audit(&audit_entry(&original, stays, by.actor, by.actor_kind, Some(detail), by.now)).await?;
    Ok(())
}

/// Whether `payload`, delivered again for the completed `original`, is the approved new version
/// that one of its update actions is still to perform (pending, claimed, uncertain, held or in
/// conflict): a duplicate of that approval, not a new proposal. An update that failed or was
/// cancelled is not: its payload delivered again is proposed again.
pub(super) async fn update_in_flight_with<T: LedgerTx>(
    tx: &mut T,
    original: &ActionRecord,
    payload: &Payload,
) -> Result<bool, LedgerError> {
    if original.state != State::Completed {
        return Ok(false);
    }
    let mut number = original.payload_revision + 1;
    while let Ok(key) = original.key.update_key(number) {
        let Some(update) = tx.lock_action(&key).await? else { break };
        if update.updates.as_ref() == Some(&original.key)
            && payload.is_same_as(&update.payload)
            && !matches!(update.state, State::Failed | State::Cancelled)
        {
            return Ok(true);
        }
        number += 1;
    }
    Ok(false)
}

impl<S: Store> Ledger<S> {
    /// The update actions recorded for `action` (`KEY#update-2`, `KEY#update-3`, ...), oldest
    /// first, whatever became of them: `show` lists a failed one beside the action it would have
    /// changed. Numbers start above the payload revision the action had at its first approval, so
    /// the numbers up to its revision now (and the one after) may be missing; above those they
    /// follow each other, and the first missing one ends the list.
    pub async fn updates_of(&self, action: &ActionRecord) -> Result<Vec<ActionRecord>, LedgerError> {
        let key = &action.key;
        let mut updates = Vec::new();
        let mut number = 2;
        while let Ok(update_key) = key.update_key(number) {
            match self.store.find(&update_key).await? {
                Some(update) if update.updates.as_ref() == Some(key) => updates.push(update),
                Some(_) => {}
                None if number <= action.payload_revision + 1 => {}
                None => break,
            }
            number += 1;
        }
        Ok(updates)
    }
}
