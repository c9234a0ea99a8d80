//! Queries: one action in full, lists, counts and figures, and readiness.

use super::manual::{reads_claim, settles_proposals};
use super::{ActionDetail, DecisionFacts, Ledger, LedgerError, LedgerStats, NotReady, QueueWait};
use crate::domain::blocked::blocks_dependents;
use crate::domain::{
    ActionKey, ActionRecord, Attempt, AttemptOutcome, Blocked, ManualCommand, Refusal, RefusedSubmission, State,
};
use crate::store::{ListFilter, Store};
use std::collections::BTreeMap;

impl<S: Store> Ledger<S> {
    /// One action with its deliveries, attempts and audit trail, and the purge run that reduced
    /// it to its tombstone, if one did.
    pub async fn detail(&self, key: &ActionKey) -> Result<ActionDetail, LedgerError> {
        let action = self.store.find(key).await?.ok_or_else(|| LedgerError::NotFound(key.to_string()))?;
        let blocked = self.blocked_among(std::slice::from_ref(&action)).await?.remove(&action.key);
        let retry_needs_check = self.retry_needs_check(&action).await?;
        let updates = self.updates_of(&action).await?;
        Ok(ActionDetail {
            blocked,
            retry_needs_check,
            update_guard: self.destinations.update_guard(&action),
            purge: self.store.purge_of(key).await?,
            action,
            deliveries: self.store.deliveries(key).await?,
            attempts: self.store.attempts(key).await?,
            lookups: self.store.lookups(key).await?,
            proposals: self.store.proposals(key).await?,
            updates,
            audit: self.store.audit_trail(key).await?,
        })
    }

    /// What `command` on each of `actions` will be decided from, read now without locking, by
    /// key: what was sent under each claim a takeover would take, and the proposals each
    /// approval, rejection or cancellation would settle, with the destinations' declared
    /// protections. What a bulk command says it will do before a person confirms it; each
    /// command reads them again, locked, when it runs. Reads only what the command needs, one
    /// action at a time, with the statements the detail reads.
    pub async fn decision_facts(
        &self,
        actions: &[ActionRecord],
        command: &ManualCommand,
    ) -> Result<BTreeMap<ActionKey, DecisionFacts>, LedgerError> {
        let now = self.store.now().await?;
        let mut facts = BTreeMap::new();
        for action in actions {
            let sent_under_claim = reads_claim(command, action)
                && self
                    .store
                    .attempts(&action.key)
                    .await?
                    .iter()
                    .any(|a| a.ownership_version == action.ownership_version);
            let waiting = if settles_proposals(command) && action.proposal.is_some() {
                self.store.proposals(&action.key).await?.into_iter().filter(|p| p.decision.is_none()).collect()
            } else {
                Vec::new()
            };
            let claim = self.command_facts(command, action, now, sent_under_claim);
            facts.insert(action.key.clone(), DecisionFacts { claim, waiting });
        }
        Ok(facts)
    }

    /// Refuses `verb` on `action` when a purge reduced it to its tombstone (rule 7): a tombstone
    /// keeps no payload and no evidence, so a lookup has nothing to compare the destination's
    /// record with and nothing may be kept beside it. Every front end asks this before it asks
    /// the destination anything; the ledger's writes check it again in their own transaction.
    pub async fn refuse_if_purged(&self, verb: &'static str, action: &ActionRecord) -> Result<(), LedgerError> {
        if !action.state.is_terminal() {
            return Ok(());
        }
        match self.store.purge_of(&action.key).await? {
            Some(purge) => {
                Err(Refusal::Purged { verb, key: action.key.clone(), state: action.state, run: purge.id, at: purge.at }
                    .into())
            }
            None => Ok(()),
        }
    }

    /// Rule 6, asked before a person retries: whether a retry of `action` now would need their
    /// confirmation that the destination holds no record, as [`Ledger::manual`] would decide it.
    pub async fn retry_needs_check(&self, action: &ActionRecord) -> Result<bool, LedgerError> {
        let retryable = crate::domain::state::allowed_from(crate::domain::Event::Retry).contains(&action.state);
        if !retryable || !action.may_have_written {
            return Ok(false);
        }
        let recognised = self.destinations.retry_recognised(action, self.store.now().await?);
        Ok(crate::domain::manual::needs_not_written(action, &crate::domain::ManualCommand::Retry, recognised))
    }

    /// For an update action, the write whose answer says what this ledger last wrote to the
    /// record it changes: the newest completed earlier update of the same action, else the action
    /// that created the record, with its last successful attempt. The attempt is `None` where that
    /// action completed without an answer of its own (a lookup found it, a person resolved it);
    /// the whole is `None` for an action that updates nothing.
    pub async fn last_write(&self, update: &ActionRecord) -> Result<Option<(ActionKey, Option<Attempt>)>, LedgerError> {
        let Some(original) = &update.updates else { return Ok(None) };
        let revision = update
            .key
            .as_str()
            .strip_prefix(original.as_str())
            .and_then(|rest| rest.strip_prefix("#update-"))
            .and_then(|n| n.parse::<i64>().ok())
            .unwrap_or(0);
        let earlier_updates = (2..revision).rev().filter_map(|r| original.update_key(r).ok());
        for key in earlier_updates.chain([original.clone()]) {
            let Some(writer) = self.store.find(&key).await? else { continue };
            if writer.state != State::Completed {
                continue;
            }
            let attempts = self.store.attempts(&key).await?;
            let succeeded = attempts
                .into_iter()
                .filter(|a| a.outcome == Some(AttemptOutcome::Succeeded) && !a.stale)
                .max_by_key(|a| a.number);
            return Ok(Some((key, succeeded)));
        }
        Ok(None)
    }

    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<ActionRecord>, LedgerError> {
        Ok(self.store.list(filter).await?)
    }

    /// Which of `actions` are blocked, by key: pending, and waiting on an action that will not
    /// complete unless a person moves it on ([`Blocked::of`]). Every front end that shows actions
    /// asks this, so that a blocked action reads the same in `list`, `show`, the HTTP API and the
    /// console. One query for the actions waited on, whatever the number of actions.
    pub async fn blocked_among(&self, actions: &[ActionRecord]) -> Result<BTreeMap<ActionKey, Blocked>, LedgerError> {
        let waited_on: Vec<&ActionKey> =
            actions.iter().filter(|a| a.state == State::Pending).filter_map(|a| a.after.as_ref()).collect();
        if waited_on.is_empty() {
            return Ok(BTreeMap::new());
        }
        let states: BTreeMap<ActionKey, State> = self.store.states_of(&waited_on).await?.into_iter().collect();
        Ok(actions
            .iter()
            .filter_map(|a| {
                let after_state = a.after.as_ref().and_then(|after| states.get(after)).copied();
                Blocked::of(a, after_state).map(|blocked| (a.key.clone(), blocked))
            })
            .collect())
    }

    pub async fn list_refused(
        &self,
        before_id: Option<i64>,
        limit: i64,
    ) -> Result<Vec<RefusedSubmission>, LedgerError> {
        let page = ListFilter { before_id, limit, ..ListFilter::default() };
        Ok(self.store.list_refused(&page).await?)
    }

    /// A page of refused submissions that match `filter`'s terms (destination, key text, age),
    /// newest first, older than its `before_id`: the console's refused pane under a filter.
    pub async fn list_refused_matching(&self, filter: &ListFilter) -> Result<Vec<RefusedSubmission>, LedgerError> {
        Ok(self.store.list_refused(filter).await?)
    }

    /// A count for every state, zero included, in the order of [`State::ALL`].
    pub async fn counts(&self) -> Result<Vec<(State, i64)>, LedgerError> {
        let found = self.store.count_by_state().await?;
        Ok(State::ALL.into_iter().map(|s| (s, found.iter().find(|(f, _)| *f == s).map_or(0, |(_, n)| *n))).collect())
    }

    /// The ledger's figures now, read in two statements (the figures per state, and the blocked
    /// actions): what `stats`, the worker's metrics and
    /// any other front end report, computed here once.
    #[tracing::instrument(skip_all)]
    pub async fn stats(&self) -> Result<LedgerStats, LedgerError> {
        let now = self.store.now().await?;
        let figures = self.store.state_figures(now).await?;
        let waiting = self.store.count_waiting_by_after_state().await?;
        let blocked = waiting.iter().filter(|(state, _)| blocks_dependents(*state)).map(|(_, n)| n).sum();
        Ok(LedgerStats::from_figures(now, &figures, blocked))
    }

    /// For each destination with actions a worker may claim now, how long the one that has waited
    /// longest has been claimable (a queue's latency); destinations with nothing claimable are
    /// left out. One statement.
    #[tracing::instrument(skip_all)]
    pub async fn queue_waits(&self) -> Result<Vec<QueueWait>, LedgerError> {
        let now = self.store.now().await?;
        let since = self.store.claimable_since_by_destination(now).await?;
        Ok(since
            .into_iter()
            .map(|(destination, since)| QueueWait { destination, seconds: (now - since).num_seconds().max(0) })
            .collect())
    }

    /// Whether the ledger can serve a worker now: it is still the one opened (a SQLite file not
    /// deleted or replaced, [`Store::check_file`]), its database answers and its schema is the one
    /// this build expects (every migration applied, none changed, none newer).
    #[tracing::instrument(skip_all)]
    pub async fn readiness(&self) -> Result<(), NotReady> {
        self.store.check_file().map_err(NotReady::FileReplaced)?;
        let status = self.store.schema_status().await.map_err(NotReady::Unreachable)?;
        if !status.newer.is_empty() {
            Err(NotReady::SchemaNewer)
        } else if status.is_current() {
            Ok(())
        } else {
            Err(NotReady::SchemaBehind)
        }
    }

    /// [`Ledger::counts`] of the actions that match `filter`'s terms: pane counts that follow a
    /// filter.
    pub async fn counts_matching(&self, filter: &ListFilter) -> Result<Vec<(State, i64)>, LedgerError> {
        let found = self.store.count_matching(filter).await?;
        Ok(State::ALL.into_iter().map(|s| (s, found.iter().find(|(f, _)| *f == s).map_or(0, |(_, n)| *n))).collect())
    }
}
