//! The write transaction of both stores: [`LedgerTx`] written once, over any [`Backend`].

use super::backend::{Backend, Statement};
use super::batch::{MAX_BINDS_PER_STATEMENT, rows_per_statement};
use super::rows::{
    Columns as _, action_from_row, after_link, attempt_from_row, keyed_number, proposal_from_row, purge_from_row,
};
use super::statements as sql;
use super::wake::RunnableSignal;
use super::{ClaimScope, LedgerTx, StoreError};
use crate::domain::record::from_millis;
use crate::domain::retention::states_text;
use crate::domain::{
    ActionKey, ActionRecord, Attempt, AuditEntry, Delivery, LookupRecord, ProposalDecision, ProposalRecord,
    PurgeCandidate, PurgeCounts, PurgeRecord, RefusedSubmission, State, Timestamp,
};

/// A write transaction on a ledger database.
pub struct SqlTx<B: Backend> {
    tx: sqlx::Transaction<'static, B>,
    clock_offset_ms: i64,
    /// Audit entries waiting for the commit; nothing in a transaction reads them back.
    audit: Vec<AuditEntry>,
    /// Ends of attempts waiting for the commit, for the same reason: written with the audit
    /// entries, in one statement where the database allows.
    finished: Vec<Attempt>,
    /// Raised once the transaction commits, if it wrote an action claimable now.
    runnable: RunnableSignal,
    wrote_claimable: bool,
}

impl<B: Backend> std::fmt::Debug for SqlTx<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlTx")
            .field("database", &B::NAME)
            .field("clock_offset_ms", &self.clock_offset_ms)
            .field("audit", &self.audit)
            .field("finished", &self.finished)
            .field("wrote_claimable", &self.wrote_claimable)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> SqlTx<B> {
    pub(crate) fn new(tx: sqlx::Transaction<'static, B>, clock_offset_ms: i64, runnable: RunnableSignal) -> Self {
        Self { tx, clock_offset_ms, audit: Vec::new(), finished: Vec::new(), runnable, wrote_claimable: false }
    }

    /// Notes the actions this transaction writes that a worker may claim once it commits.
    fn note_claimable<'a>(&mut self, written: impl IntoIterator<Item = &'a ActionRecord>) {
        self.wrote_claimable = self.wrote_claimable || written.into_iter().any(ActionRecord::claimable_as_written);
    }

    /// Writes what waits for the commit: the ends of attempts, then the audit entries, many rows
    /// per statement; on PostgreSQL, one attempt's end and its entries (the per-action path) in
    /// one statement. A batch shares its round trips among its actions already, and its attempts
    /// are ended by their own statement: joined in one statement with the entries, 64 of them took
    /// ten times as long (docs/BENCHMARKS.md, "The drain").
    async fn write_deferred(&mut self) -> Result<(), StoreError> {
        let finished = std::mem::take(&mut self.finished);
        let audit = std::mem::take(&mut self.audit);
        if B::DIALECT.writes_in_one_statement
            && finished.len() == 1
            && !audit.is_empty()
            && audit.len() <= rows_per_statement(sql::AUDIT_ROW) / 2
        {
            B::execute(&mut *self.tx, sql::pg_finish_attempts_with_audit(&finished, &audit)).await?;
            return Ok(());
        }
        for chunk in finished.chunks(rows_per_statement(sql::FINISHED_ATTEMPT_ROW)) {
            B::execute(&mut *self.tx, sql::finish_attempts(chunk)).await?;
        }
        for chunk in audit.chunks(rows_per_statement(sql::AUDIT_ROW)) {
            B::execute(&mut *self.tx, sql::append_audit(chunk)).await?;
        }
        Ok(())
    }

    /// Claims up to `limit` runnable pending actions with `sqlite_claim`, for a store whose
    /// statements cannot also write the claims' audit entries
    /// ([`super::backend::Dialect::writes_in_one_statement`]): SQLite, one writer at a time.
    pub(crate) async fn sqlite_claim(
        &mut self,
        worker: &str,
        now: Timestamp,
        lease_until: Timestamp,
        limit: i64,
        scope: &ClaimScope,
    ) -> Result<Vec<ActionRecord>, StoreError> {
        let claim = sql::sqlite_claim(worker, now, lease_until, limit, scope);
        B::fetch_all(&mut *self.tx, claim).await?.iter().map(action_from_row).collect()
    }
}

impl<B: Backend> LedgerTx for SqlTx<B> {
    async fn now(&mut self) -> Result<Timestamp, StoreError> {
        let ms = match B::DIALECT.clock {
            Some(clock) => B::fetch_one(&mut *self.tx, Statement::new(clock)).await?.int("now")?,
            None => chrono::Utc::now().timestamp_millis(),
        };
        Ok(from_millis(ms + self.clock_offset_ms))
    }

    async fn lock_actions(&mut self, keys: &[&ActionKey]) -> Result<Vec<ActionRecord>, StoreError> {
        let mut keys = keys.to_vec();
        keys.sort();
        keys.dedup();
        let mut actions = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(MAX_BINDS_PER_STATEMENT) {
            for row in B::fetch_all(&mut *self.tx, sql::lock_actions(chunk)).await? {
                actions.push(action_from_row(&row)?);
            }
        }
        Ok(actions)
    }

    async fn lock_actions_now(&mut self, keys: &[&ActionKey]) -> Result<(Vec<ActionRecord>, Timestamp), StoreError> {
        if B::DIALECT.clock.is_none() || keys.is_empty() || keys.len() > MAX_BINDS_PER_STATEMENT {
            let now = self.now().await?;
            return Ok((self.lock_actions(keys).await?, now));
        }
        let mut keys = keys.to_vec();
        keys.sort();
        keys.dedup();
        let rows = B::fetch_all(&mut *self.tx, sql::pg_lock_actions_now(&keys)).await?;
        let Some(first) = rows.first() else {
            // Nothing to lock, and so no row to carry the time.
            return Ok((Vec::new(), self.now().await?));
        };
        let now = from_millis(first.int("now")? + self.clock_offset_ms);
        Ok((rows.iter().map(action_from_row).collect::<Result<_, _>>()?, now))
    }

    async fn after_links(&mut self, from: &ActionKey) -> Result<Vec<(ActionKey, ActionKey)>, StoreError> {
        if let Some(lock) = B::DIALECT.after_links_lock {
            B::execute(&mut *self.tx, Statement::new(lock)).await?;
        }
        let links = B::fetch_all(&mut *self.tx, Statement::new(sql::AFTER_LINKS).text(from.as_str())).await?;
        links.iter().map(after_link).collect()
    }

    async fn insert_actions_if_absent(&mut self, new: &[ActionRecord]) -> Result<Vec<ActionRecord>, StoreError> {
        let mut inserted = Vec::with_capacity(new.len());
        for chunk in new.chunks(rows_per_statement(sql::NEW_ACTION_ROW)) {
            for row in B::fetch_all(&mut *self.tx, sql::insert_actions(chunk)).await? {
                inserted.push(action_from_row(&row)?);
            }
        }
        self.note_claimable(&inserted);
        Ok(inserted)
    }

    async fn update_actions(&mut self, changed: &[&ActionRecord]) -> Result<u64, StoreError> {
        self.note_claimable(changed.iter().copied());
        // One result's writes (the per-action path): its action, its attempt's end and its audit
        // entries in one statement on PostgreSQL, rather than this and one more at the commit.
        if B::DIALECT.writes_in_one_statement
            && changed.len() == 1
            && self.finished.len() == 1
            && !self.audit.is_empty()
            && self.audit.len() <= rows_per_statement(sql::AUDIT_ROW) / 2
        {
            let statement = sql::pg_update_actions_with_deferred(changed, &self.finished[0], &self.audit);
            let written = B::execute(&mut *self.tx, statement).await?;
            self.finished.clear();
            self.audit.clear();
            return Ok(written);
        }
        // The same on SQLite as one command of separate statements: a hop to its thread each.
        if B::DIALECT.statements_in_one_command
            && !changed.is_empty()
            && !(self.finished.is_empty() && self.audit.is_empty())
            && changed.len() <= rows_per_statement(sql::CHANGED_ACTION_ROW)
            && self.finished.len() <= rows_per_statement(sql::FINISHED_ATTEMPT_ROW)
            && self.audit.len() <= rows_per_statement(sql::AUDIT_ROW)
        {
            let statement = sql::sqlite_update_actions_with_deferred(changed, &self.finished, &self.audit);
            let written = B::fetch_all(&mut *self.tx, statement).await?.len();
            self.finished.clear();
            self.audit.clear();
            return Ok(u64::try_from(written).unwrap_or(u64::MAX));
        }
        let mut written = 0;
        for chunk in changed.chunks(rows_per_statement(sql::CHANGED_ACTION_ROW)) {
            written += B::execute(&mut *self.tx, sql::update_actions(chunk)).await?;
        }
        Ok(written)
    }

    async fn renew_lease(
        &mut self,
        key: &ActionKey,
        ownership_version: i64,
        until: Timestamp,
    ) -> Result<bool, StoreError> {
        let renew =
            Statement::new(sql::RENEW_LEASE).text(key.as_str()).int(ownership_version).int(until.timestamp_millis());
        Ok(B::execute(&mut *self.tx, renew).await? == 1)
    }

    async fn count_attempts(
        &mut self,
        claims: &[(&ActionKey, i64)],
        now: Timestamp,
    ) -> Result<Vec<(ActionKey, i64)>, StoreError> {
        let mut counted = Vec::with_capacity(claims.len());
        // The claims are an OR chain, and SQLite refuses an expression more than 1,000 deep: a
        // worker batch of 1,000 is counted in two statements.
        for chunk in claims.chunks(sql::CLAIMS_PER_COUNT) {
            for row in B::fetch_all(&mut *self.tx, sql::count_attempts(chunk, now.timestamp_millis())).await? {
                counted.push(keyed_number(&row, "key", "attempts")?);
            }
        }
        Ok(counted)
    }

    async fn attempt_started_under(&mut self, key: &ActionKey, ownership_version: i64) -> Result<bool, StoreError> {
        let count = Statement::new(sql::ATTEMPT_STARTED_UNDER).text(key.as_str()).int(ownership_version);
        Ok(B::fetch_one(&mut *self.tx, count).await?.int("count")? > 0)
    }

    async fn cut_off_attempts(&mut self, key: &ActionKey, except: i64) -> Result<i64, StoreError> {
        let mark = Statement::new(sql::CUT_OFF_ATTEMPTS).text(key.as_str()).int(except);
        Ok(i64::try_from(B::execute(&mut *self.tx, mark).await?).unwrap_or(i64::MAX))
    }

    async fn find_attempt(&mut self, id: i64) -> Result<Option<Attempt>, StoreError> {
        let row = B::fetch_optional(&mut *self.tx, Statement::new(sql::SELECT_ATTEMPT).int(id)).await?;
        row.as_ref().map(attempt_from_row).transpose()
    }

    async fn attempts_of(&mut self, key: &ActionKey) -> Result<Vec<Attempt>, StoreError> {
        let rows = B::fetch_all(&mut *self.tx, Statement::new(sql::SELECT_ATTEMPTS).text(key.as_str())).await?;
        rows.iter().map(attempt_from_row).collect()
    }

    async fn insert_deliveries(&mut self, deliveries: &[Delivery]) -> Result<(), StoreError> {
        for chunk in deliveries.chunks(rows_per_statement(sql::DELIVERY_ROW)) {
            B::execute(&mut *self.tx, sql::insert_deliveries(chunk)).await?;
        }
        Ok(())
    }

    async fn insert_attempts(&mut self, attempts: &[Attempt]) -> Result<Vec<(ActionKey, i64)>, StoreError> {
        let mut ids = Vec::with_capacity(attempts.len());
        for chunk in attempts.chunks(rows_per_statement(sql::STARTED_ATTEMPT_ROW)) {
            for row in B::fetch_all(&mut *self.tx, sql::insert_attempts(chunk)).await? {
                ids.push(keyed_number(&row, "action_key", "id")?);
            }
        }
        Ok(ids)
    }

    async fn finish_attempts(&mut self, attempts: &[Attempt]) -> Result<(), StoreError> {
        self.finished.extend_from_slice(attempts);
        Ok(())
    }

    async fn waiting_proposals(&mut self, key: &ActionKey) -> Result<Vec<ProposalRecord>, StoreError> {
        let rows =
            B::fetch_all(&mut *self.tx, Statement::new(sql::SELECT_WAITING_PROPOSALS).text(key.as_str())).await?;
        rows.iter().map(proposal_from_row).collect()
    }

    async fn keep_proposal(&mut self, p: &ProposalRecord) -> Result<(), StoreError> {
        let keep = Statement::new(sql::KEEP_PROPOSAL)
            .text(p.key.as_str())
            .text(p.payload.fingerprint().as_str())
            .text(p.payload.canonical())
            .text(p.source.as_deref())
            .text(p.event_id.as_deref())
            .int(p.source_version)
            .int(p.received_at.timestamp_millis());
        B::execute(&mut *self.tx, keep).await?;
        Ok(())
    }

    async fn decide_proposals(
        &mut self,
        ids: &[i64],
        decision: ProposalDecision,
        person: &str,
        now: Timestamp,
    ) -> Result<u64, StoreError> {
        let mut decided = 0;
        for &id in ids {
            let decide = Statement::new(sql::DECIDE_PROPOSAL)
                .text(decision.as_str())
                .text(person)
                .int(now.timestamp_millis())
                .int(id);
            decided += B::execute(&mut *self.tx, decide).await?;
        }
        Ok(decided)
    }

    async fn acknowledge_late_results(
        &mut self,
        key: &ActionKey,
        person: &str,
        now: Timestamp,
    ) -> Result<u64, StoreError> {
        let acknowledge =
            Statement::new(sql::ACKNOWLEDGE_LATE_RESULTS).text(key.as_str()).text(person).int(now.timestamp_millis());
        Ok(B::execute(&mut *self.tx, acknowledge).await?)
    }

    async fn insert_lookup(&mut self, lookup: &LookupRecord) -> Result<(), StoreError> {
        B::execute(&mut *self.tx, sql::insert_lookup(lookup)).await?;
        Ok(())
    }

    async fn append_audit(&mut self, entry: &AuditEntry) -> Result<(), StoreError> {
        self.audit.push(entry.clone());
        Ok(())
    }

    async fn insert_refusal(&mut self, refusal: &RefusedSubmission) -> Result<(), StoreError> {
        B::execute(&mut *self.tx, sql::insert_refusal(refusal)).await?;
        Ok(())
    }

    async fn check_may_purge(&mut self) -> Result<(), StoreError> {
        let Some(ask) = B::DIALECT.purge_permission else {
            return Ok(());
        };
        let row = B::fetch_one(&mut *self.tx, Statement::new(ask)).await?;
        if row.flag("may")? {
            return Ok(());
        }
        Err(StoreError::NotPermitted(format!(
            "actionledger: role {} may not purge: only a member of actionledger_owner removes what retention allows",
            row.text("role")?
        )))
    }

    async fn purge_candidates(
        &mut self,
        states: &[State],
        settled_before: Timestamp,
    ) -> Result<Vec<PurgeCandidate>, StoreError> {
        let candidates = sql::purge_candidates(states, settled_before.timestamp_millis());
        let rows = B::fetch_all(&mut *self.tx, candidates).await?;
        rows.iter()
            .map(|row| {
                let key = row.text("key")?;
                let state_text = row.text("state")?;
                Ok(PurgeCandidate {
                    key: ActionKey::parse_existing(&key)
                        .map_err(|_| StoreError::Corrupt(format!("action key {key:?}")))?,
                    state: state_text.parse().map_err(|_| StoreError::Corrupt(format!("state {state_text:?}")))?,
                    may_have_written: row.flag("may_have_written")?,
                })
            })
            .collect()
    }

    async fn tombstone(&mut self, keys: &[ActionKey]) -> Result<PurgeCounts, StoreError> {
        let mut counts = PurgeCounts::default();
        for chunk in keys.chunks(sql::KEYS_PER_PURGE_STATEMENT) {
            counts.actions += count(B::execute(&mut *self.tx, sql::empty_purged_actions(chunk)).await?);
            B::execute(&mut *self.tx, sql::delete_purged_proposals(chunk)).await?;
            // In the order of PURGED_HISTORIES.
            let PurgeCounts { deliveries, attempts, lookups, .. } = &mut counts;
            for (history, removed) in sql::PURGED_HISTORIES.iter().zip([deliveries, attempts, lookups]) {
                *removed += count(B::execute(&mut *self.tx, sql::delete_purged_history(history, chunk)).await?);
            }
        }
        Ok(counts)
    }

    async fn record_purge(&mut self, run: &PurgeRecord, keys: &[ActionKey]) -> Result<i64, StoreError> {
        let older_than_ms = i64::try_from(run.older_than.as_millis()).unwrap_or(i64::MAX);
        let insert = Statement::new(sql::INSERT_PURGE)
            .int(run.at.timestamp_millis())
            .text(run.owner.as_str())
            .text(run.reason.as_str())
            .int(older_than_ms)
            .int(run.settled_before.timestamp_millis())
            .text(states_text(&run.states).as_str())
            .int(run.counts.actions)
            .int(run.counts.deliveries)
            .int(run.counts.attempts)
            .int(run.counts.lookups);
        let id = B::fetch_one(&mut *self.tx, insert).await?.int("id")?;
        for chunk in keys.chunks(sql::KEYS_PER_PURGE_STATEMENT) {
            B::execute(&mut *self.tx, sql::mark_purged(id, chunk)).await?;
        }
        Ok(id)
    }

    async fn purge_of(&mut self, key: &ActionKey) -> Result<Option<PurgeRecord>, StoreError> {
        let row = B::fetch_optional(&mut *self.tx, Statement::new(sql::SELECT_PURGE_OF).text(key.as_str())).await?;
        row.as_ref().map(purge_from_row).transpose()
    }

    async fn commit(mut self) -> Result<(), StoreError> {
        self.write_deferred().await?;
        self.tx.commit().await?;
        // After the commit, never before: a worker woken earlier would claim before the work
        // is there to see, and then wait out its whole poll interval.
        if self.wrote_claimable {
            self.runnable.raise();
        }
        Ok(())
    }

    async fn rollback(self) -> Result<(), StoreError> {
        self.tx.rollback().await?;
        Ok(())
    }
}

/// A count of rows changed, as the records keep counts.
fn count(rows: u64) -> i64 {
    i64::try_from(rows).unwrap_or(i64::MAX)
}
