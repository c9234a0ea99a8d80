//! The one transaction scaffold every ledger operation runs in: begin, read the database's
//! time, run the body, commit or roll back, and run it all again after a transient conflict; and
//! the writes every operation shares (an action written back conditionally, an audit entry).

use super::{Ledger, LedgerError};
use crate::domain::{
    ActionKey, ActionRecord, ActorKind, AuditEntry, DestinationCatalog, Event, PurgeRecord, Refusal, Timestamp,
    Transition,
};
use crate::store::{LedgerTx, Store};
use std::collections::HashSet;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::time::Duration;

/// How many times a transaction is retried after a serialization failure, deadlock or busy
/// database before the error is reported.
const TRANSIENT_RETRIES: u32 = 5;

/// The body of one write transaction: a future borrowing the transaction; see
/// [`Ledger::transact`].
pub(super) type TxBody<'t, R> = Pin<Box<dyn Future<Output = Result<R, LedgerError>> + Send + 't>>;

/// Says that what the caller lends a transaction's body (`'a`) outlives its borrow of the
/// transaction (`'t`), which lets the body's future hold both.
pub(super) type Outlives<'t, 'a> = PhantomData<&'t &'a ()>;

impl<S: Store> Ledger<S> {
    /// Runs `body` as one write transaction, given the transaction and the database time at its
    /// start: commits what it returns, rolls back on any error or refusal, and runs the whole
    /// transaction again after a transient conflict (a serialization failure, a deadlock, a busy
    /// database).
    pub(super) async fn transact<'a, R, F>(&'a self, body: F) -> Result<R, LedgerError>
    where
        R: Send,
        F: for<'t> Fn(&'t mut S::Tx, Timestamp, Outlives<'t, 'a>) -> TxBody<'t, R> + Send + Sync,
    {
        self.transact_then(true, body).await
    }

    /// [`Ledger::transact`], committing only if `commit`; otherwise what `body` did is rolled back
    /// and only its answer is kept (a dry run).
    pub(super) async fn transact_then<'a, R, F>(&'a self, commit: bool, body: F) -> Result<R, LedgerError>
    where
        R: Send,
        F: for<'t> Fn(&'t mut S::Tx, Timestamp, Outlives<'t, 'a>) -> TxBody<'t, R> + Send + Sync,
    {
        retrying(|| self.transact_once(commit, &body)).await
    }

    async fn transact_once<'a, R, F>(&'a self, commit: bool, body: &F) -> Result<R, LedgerError>
    where
        R: Send,
        F: for<'t> Fn(&'t mut S::Tx, Timestamp, Outlives<'t, 'a>) -> TxBody<'t, R> + Send + Sync,
    {
        let mut tx = self.store.begin().await?;
        let result = match tx.now().await {
            Ok(now) => body(&mut tx, now, PhantomData).await,
            Err(error) => Err(error.into()),
        };
        if commit {
            finish(tx, result).await
        } else {
            // Rolled back whatever it answered, and waited for, like a refusal.
            let _ = tx.rollback().await;
            result
        }
    }
}

/// Runs `once` (a write transaction of its own) again after a transient conflict (a
/// serialization failure, a deadlock, a busy database): the one retry policy of every ledger
/// transaction, [`Ledger::transact`]'s included.
pub(super) async fn retrying<R, F, Fut>(mut once: F) -> Result<R, LedgerError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<R, LedgerError>>,
{
    let mut tries = 0;
    loop {
        match once().await {
            Err(error) if error.is_transient() && tries < TRANSIENT_RETRIES => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(10 * u64::from(tries))).await;
            }
            result => return result,
        }
    }
}

/// Ends a transaction: commits what succeeded; rolls back, and waits for it, on any error or
/// refusal, so that no row lock outlives the call in a pooled connection.
pub(super) async fn finish<T: LedgerTx, R>(tx: T, result: Result<R, LedgerError>) -> Result<R, LedgerError> {
    match result {
        Ok(value) => {
            tx.commit().await?;
            Ok(value)
        }
        Err(error) => {
            let _ = tx.rollback().await;
            Err(error)
        }
    }
}

/// Who writes an action back, and with what rules: named in the audit entry of what the write
/// adds of its own, the assignment of an action that needs a person to its review owner.
#[derive(Debug, Clone, Copy)]
pub(super) struct Writer<'a> {
    /// The destinations as configured, with who reviews what.
    pub routing: &'a DestinationCatalog,
    pub actor: &'a str,
    pub actor_kind: ActorKind,
    pub now: Timestamp,
}

/// Writes the action back, conditional on the revision it was read at; see [`write_actions`].
pub(super) async fn write_action<T: LedgerTx>(
    tx: &mut T,
    action: &mut ActionRecord,
    by: Writer<'_>,
) -> Result<(), LedgerError> {
    write_actions(tx, std::slice::from_mut(action), &[by]).await
}

/// Writes actions back in one statement, each conditional on the revision it was read at; all
/// or none. `by` names the writer of each action (one for all when it holds one).
///
/// An action that needs a person (unknown, failed, held, conflict) and has nobody assigned is
/// assigned here to the owner the review rules name, in the same write: every path that moves
/// an action routes it without knowing of the rules. The assignment is one more audit entry
/// (`assigned`, by the writer, naming the rule) with the same revision as the change that made
/// it, since both are one write of the row.
pub(super) async fn write_actions<T: LedgerTx>(
    tx: &mut T,
    actions: &mut [ActionRecord],
    by: &[Writer<'_>],
) -> Result<(), LedgerError> {
    let writer = |index: usize| by.get(index).or(by.last()).copied();
    let mut routed = Vec::new();
    for (index, action) in actions.iter_mut().enumerate() {
        let Some(by) = writer(index) else { continue };
        if let Some(routing) = by.routing.review_routing(action) {
            let reason = format!(
                "routed to review owner {} by {}: it is {} and nobody was assigned",
                routing.owner, routing.rule, action.state
            );
            action.assignee = Some(routing.owner.to_owned());
            routed.push((index, by, reason));
        }
    }
    let written = tx.update_actions(&actions.iter().collect::<Vec<_>>()).await?;
    if written != actions.len() as u64 {
        return Err(Refusal::ChangedWhileWriting { keys: actions.iter().map(|a| a.key.clone()).collect() }.into());
    }
    for action in actions.iter_mut() {
        action.revision += 1;
    }
    for (index, by, reason) in routed {
        let action = &actions[index];
        let stays = Transition { event: Event::Assigned, from: action.state, to: action.state };
        tx.append_audit(&audit_entry(action, stays, by.actor, by.actor_kind, Some(reason), by.now)).await?;
    }
    Ok(())
}

/// Refuses a batch that names one key twice: one worker never holds two claims on one key, and
/// a batch is written as one set of rows.
pub(super) fn refuse_repeated_keys<'a>(keys: impl Iterator<Item = &'a ActionKey>) -> Result<(), LedgerError> {
    let mut seen = HashSet::new();
    for key in keys {
        if !seen.insert(key) {
            return Err(Refusal::RepeatedKey { key: key.clone() }.into());
        }
    }
    Ok(())
}

pub(super) fn audit_entry(
    action: &ActionRecord,
    transition: Transition,
    actor: &str,
    actor_kind: ActorKind,
    reason: Option<String>,
    now: Timestamp,
) -> AuditEntry {
    // The entry that creates an action has no state to come from.
    let from_state = (transition.event != Event::Submitted).then_some(transition.from);
    AuditEntry {
        id: 0,
        key: action.key.clone(),
        at: now,
        actor: actor.to_owned(),
        actor_kind,
        event: transition.event,
        from_state,
        to_state: transition.to,
        ownership_version: action.ownership_version,
        revision: action.revision,
        reason,
    }
}

/// The purge run that reduced `action` to its tombstone, if one did. Only settled actions are
/// ever purged, so only they are asked about: no cost on the paths of live actions.
pub(super) async fn purge_of_settled<T: LedgerTx>(
    tx: &mut T,
    action: &ActionRecord,
) -> Result<Option<PurgeRecord>, LedgerError> {
    if !action.state.is_terminal() {
        return Ok(None);
    }
    Ok(tx.purge_of(&action.key).await?)
}
