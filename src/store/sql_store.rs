//! [`Store`] written once for both databases: each store names its pool, and the rest follows.

use super::backend::{Backend, Statement};
use super::one_command::OneCommandTx;
use super::rows::{
    Columns as _, action_from_row, attempt_from_row, attempt_started_from_row, audit_from_row, backoff_from_row,
    claimable_since_from_row, claimed_from_row, delivery_from_row, key_state_from_row, lookup_failures_from_row,
    lookup_from_row, proposal_from_row, purge_from_row, refusal_from_row, state_count_from_row, state_figures_from_row,
    state_pair_from_row,
};
use super::sql_tx::SqlTx;
use super::statements as sql;
use super::wake::{RunnableSignal, Wakeups};
use super::{
    AttemptStart, AttemptStarted, ClaimRequest, ClaimScope, Claimed, Clock, ConnectionFigures, LedgerTx, ListFilter,
    LookupFailures, Notices, SchemaStatus, StateFigures, Store, StoreError,
};
use crate::domain::record::from_millis;
use crate::domain::{
    ActionKey, ActionRecord, Attempt, AuditEntry, Delivery, LookupRecord, ProposalRecord, PurgeRecord,
    RefusedSubmission, StartsAtClaim, State, Timestamp,
};
use crate::domain::{Evidence, Transition};
use std::future::Future;

/// A store on one of the databases: what the shared [`Store`] implementation needs of it, and the
/// features only some databases have.
pub trait SqlStore: Clone + Send + Sync + 'static {
    type Backend: Backend;

    fn connections(&self) -> &sqlx::Pool<Self::Backend>;

    /// See [`Store::clock`].
    fn clock(&self) -> &Clock;

    /// The signal this store and its clones raise after a commit that made work claimable.
    fn runnable(&self) -> &RunnableSignal;

    /// See [`Store::schema_status`].
    fn schema_status(&self) -> impl Future<Output = Result<SchemaStatus, StoreError>> + Send;

    /// See [`Store::check_file`].
    fn check_file(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// See [`Store::access_report`].
    fn access_report(&self) -> impl Future<Output = Result<Option<String>, StoreError>> + Send {
        async { Ok(None) }
    }

    /// See [`Store::listen_for_changes`].
    fn listen_for_changes(
        &self,
    ) -> impl Future<Output = Result<Option<tokio::sync::mpsc::UnboundedReceiver<()>>, StoreError>> + Send {
        async { Ok(None) }
    }

    /// See [`Store::listen_for_runnable`]: this process's commits alone, unless the database
    /// sends wake-ups of its own.
    fn listen_for_runnable(&self) -> impl Future<Output = Wakeups> + Send {
        let wakeups = Wakeups::in_process(self.runnable());
        async { wakeups }
    }
}

impl<S: SqlStore> Store for S {
    type Tx = SqlTx<S::Backend>;

    async fn begin(&self) -> Result<Self::Tx, StoreError> {
        let tx = self.connections().begin_with(S::Backend::DIALECT.begin).await?;
        Ok(SqlTx::new(tx, SqlStore::clock(self).shift_ms(), self.runnable().clone()))
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        let ms = match S::Backend::DIALECT.clock {
            Some(clock) => read_one(self, Statement::new(clock)).await?.int("now")?,
            None => chrono::Utc::now().timestamp_millis(),
        };
        Ok(from_millis(ms + SqlStore::clock(self).shift_ms()))
    }

    async fn claim_with_audit(&self, request: &ClaimRequest<'_>) -> Result<Vec<Claimed>, StoreError> {
        let ClaimRequest { worker, lease, limit, scope, audit, starts } = *request;
        if S::Backend::DIALECT.writes_in_one_statement {
            let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
            let destinations = scope.destinations_json();
            let Transition { event, from, to } = audit.transition;
            let one_key = scope.key.is_some();
            let sql = if starts.is_empty() {
                sql::pg_claim_with_audit_sql(limit, one_key)
            } else {
                sql::pg_claim_and_start_sql(limit, one_key)
            };
            let claim = Statement::new(sql)
                .text(worker)
                .int(lease_ms)
                .int(SqlStore::clock(self).shift_ms())
                .text(destinations.as_deref())
                .flag(scope.include_unassigned)
                .text(audit.actor_kind.as_str())
                .text(event.as_str())
                .text(from.as_str())
                .text(to.as_str());
            if starts.is_empty() {
                let rows = autocommitted(self, sql::with_only_key(claim, scope)).await?;
                return rows.iter().map(|row| Ok(Claimed { action: action_from_row(row)?, started: None })).collect();
            }
            let (always, before_window) = (json_list(&starts.always), json_list(&starts.before_window));
            let claim =
                claim.text(starts.default_destination.as_deref()).text(always.as_str()).text(before_window.as_str());
            let claim = sql::with_only_key(claim, scope);
            return autocommitted(self, claim).await?.iter().map(claimed_from_row).collect();
        }
        if S::Backend::DIALECT.statements_in_one_command
            && usize::try_from(limit).is_ok_and(|limit| limit <= sql::CLAIMS_PER_COUNT)
        {
            return claim_in_two_commands(self, request).await;
        }
        // Any other store that cannot write the claims and their audit entries in one statement
        // (SQLite, for a claim of more than fits one command): one transaction of statements.
        let mut tx = self.begin().await?;
        let claimed = async {
            let now = tx.now().await?;
            let claimed = tx.sqlite_claim(worker, now, now + lease, limit, scope).await?;
            for action in &claimed {
                tx.append_audit(&audit.entry(action, worker)).await?;
            }
            // The attempts the claim starts, in the same transaction, as a start would make them.
            let starting = starting_at_claim(&claimed, starts, worker);
            let started = start_in_tx(&mut tx, &starting, now).await?;
            Ok::<_, StoreError>(with_started(claimed, started))
        }
        .await;
        match claimed {
            Ok(claimed) => tx.commit().await.map(|()| claimed),
            Err(error) => {
                let _ = tx.rollback().await;
                Err(error)
            }
        }
    }

    async fn start_attempts(&self, starts: &[AttemptStart<'_>]) -> Result<Vec<AttemptStarted>, StoreError> {
        let mut starts = starts.to_vec();
        // In key order, as rows are locked everywhere else, so that batches cannot deadlock.
        starts.sort_by(|a, b| a.key.cmp(b.key));
        if S::Backend::DIALECT.writes_in_one_statement {
            match start_in_one_statement(self, &starts).await {
                // A session that may not start attempts is refused before any row is read: the
                // database checks every table's privileges as the statement starts. The
                // statements one by one give the refusal of the guard that judges the change
                // (what a reviewer is told, say), and still write nothing.
                // One chunk only, so that nothing was committed before the refusal.
                Err(error) if error.is_not_permitted() && starts.len() <= sql::CLAIMS_PER_COUNT => {}
                started => return started,
            }
        }
        if S::Backend::DIALECT.statements_in_one_command && (1..=sql::CLAIMS_PER_COUNT).contains(&starts.len()) {
            return start_in_one_command(self, &starts).await;
        }
        let mut tx = self.begin().await?;
        let started = async {
            let now = tx.now().await?;
            start_in_tx(&mut tx, &starts, now).await
        }
        .await;
        match started {
            Ok(started) => tx.commit().await.map(|()| started),
            Err(error) => {
                let _ = tx.rollback().await;
                Err(error)
            }
        }
    }

    async fn find(&self, key: &ActionKey) -> Result<Option<ActionRecord>, StoreError> {
        let row = read_optional(self, Statement::new(sql::SELECT_ACTION).text(key.as_str())).await?;
        row.as_ref().map(action_from_row).transpose()
    }

    async fn proposals(&self, key: &ActionKey) -> Result<Vec<ProposalRecord>, StoreError> {
        read_history(self, sql::SELECT_PROPOSALS, key, proposal_from_row).await
    }

    async fn deliveries(&self, key: &ActionKey) -> Result<Vec<Delivery>, StoreError> {
        read_history(self, sql::SELECT_DELIVERIES, key, delivery_from_row).await
    }

    async fn attempts(&self, key: &ActionKey) -> Result<Vec<Attempt>, StoreError> {
        read_history(self, sql::SELECT_ATTEMPTS, key, attempt_from_row).await
    }

    async fn audit_trail(&self, key: &ActionKey) -> Result<Vec<AuditEntry>, StoreError> {
        read_history(self, sql::SELECT_AUDIT, key, audit_from_row).await
    }

    async fn lookups(&self, key: &ActionKey) -> Result<Vec<LookupRecord>, StoreError> {
        read_history(self, sql::SELECT_LOOKUPS, key, lookup_from_row).await
    }

    async fn purge_of(&self, key: &ActionKey) -> Result<Option<PurgeRecord>, StoreError> {
        let row = read_optional(self, Statement::new(sql::SELECT_PURGE_OF).text(key.as_str())).await?;
        row.as_ref().map(purge_from_row).transpose()
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<ActionRecord>, StoreError> {
        let rows = autocommitted(self, sql::list_actions(filter)).await?;
        let mut actions = rows.iter().map(action_from_row).collect::<Result<Vec<_>, _>>()?;
        if filter.after_id.is_some() || filter.start == super::PageStart::Last {
            actions.reverse();
        }
        Ok(actions)
    }

    async fn list_refused(&self, filter: &ListFilter) -> Result<Vec<RefusedSubmission>, StoreError> {
        autocommitted(self, sql::list_refused(filter)).await?.iter().map(refusal_from_row).collect()
    }

    async fn count_by_state(&self) -> Result<Vec<(State, i64)>, StoreError> {
        autocommitted(self, Statement::new(sql::COUNT_BY_STATE)).await?.iter().map(state_count_from_row).collect()
    }

    async fn states_of(&self, keys: &[&ActionKey]) -> Result<Vec<(ActionKey, State)>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        autocommitted(self, sql::select_states(keys)).await?.iter().map(key_state_from_row).collect()
    }

    async fn count_waiting_by_after_state(&self) -> Result<Vec<(State, i64)>, StoreError> {
        let statement = Statement::new(sql::COUNT_WAITING_BY_AFTER_STATE);
        autocommitted(self, statement).await?.iter().map(state_count_from_row).collect()
    }

    async fn state_figures(&self, now: Timestamp) -> Result<Vec<StateFigures>, StoreError> {
        let statement = Statement::new(sql::LEDGER_STATS).int(now.timestamp_millis());
        autocommitted(self, statement).await?.iter().map(state_figures_from_row).collect()
    }

    async fn claimable_since_by_destination(
        &self,
        now: Timestamp,
    ) -> Result<Vec<(Option<String>, Timestamp)>, StoreError> {
        let statement = Statement::new(sql::CLAIMABLE_SINCE_BY_DESTINATION).int(now.timestamp_millis());
        autocommitted(self, statement).await?.iter().map(claimable_since_from_row).collect()
    }

    fn schema_status(&self) -> impl Future<Output = Result<SchemaStatus, StoreError>> + Send {
        SqlStore::schema_status(self)
    }

    async fn count_matching(&self, filter: &ListFilter) -> Result<Vec<(State, i64)>, StoreError> {
        autocommitted(self, sql::count_matching_by_state(filter)).await?.iter().map(state_count_from_row).collect()
    }

    async fn count_refused(&self, filter: &ListFilter) -> Result<i64, StoreError> {
        Ok(read_one(self, sql::count_refused(filter)).await?.int("count")?)
    }

    async fn count_notices_matching(&self, filter: &ListFilter, now: Timestamp) -> Result<Notices, StoreError> {
        let row = read_one(self, sql::count_matching_notices(filter, now)).await?;
        Ok(Notices {
            proposed_elsewhere: row.int("proposed_elsewhere")?,
            late_results: row.int("late_results")?,
            stale_claims: row.int("stale_claims")?,
        })
    }

    async fn count_proposed_elsewhere(&self) -> Result<i64, StoreError> {
        Ok(read_one(self, Statement::new(sql::COUNT_PROPOSED_ELSEWHERE)).await?.int("count")?)
    }

    async fn count_stale_claims(&self) -> Result<i64, StoreError> {
        let now = Store::now(self).await?;
        let count = Statement::new(sql::COUNT_STALE_CLAIMS).int(now.timestamp_millis());
        Ok(read_one(self, count).await?.int("count")?)
    }

    async fn count_late_results(&self) -> Result<i64, StoreError> {
        Ok(read_one(self, Statement::new(sql::COUNT_LATE_RESULTS)).await?.int("count")?)
    }

    async fn expired_claims(&self, limit: i64, scope: &ClaimScope) -> Result<Vec<ActionRecord>, StoreError> {
        let now = Store::now(self).await?;
        let expired = sql::expired_claims(now, limit, scope);
        autocommitted(self, expired).await?.iter().map(action_from_row).collect()
    }

    async fn pending_backoffs(&self) -> Result<Vec<(Option<String>, Timestamp)>, StoreError> {
        autocommitted(self, Statement::new(sql::PENDING_BACKOFFS)).await?.iter().map(backoff_from_row).collect()
    }

    async fn unknown_lookup_failures(&self) -> Result<Vec<LookupFailures>, StoreError> {
        let failures = Statement::new(sql::UNKNOWN_LOOKUP_FAILURES);
        autocommitted(self, failures).await?.iter().map(lookup_failures_from_row).collect()
    }

    async fn enforced_state_pairs(&self) -> Result<Vec<(State, State)>, StoreError> {
        autocommitted(self, Statement::new(sql::ENFORCED_PAIRS)).await?.iter().map(state_pair_from_row).collect()
    }

    fn clock(&self) -> &Clock {
        SqlStore::clock(self)
    }

    fn check_file(&self) -> Result<(), StoreError> {
        SqlStore::check_file(self)
    }

    fn connection_figures(&self) -> ConnectionFigures {
        let pool = self.connections();
        ConnectionFigures {
            open: pool.size(),
            idle: u32::try_from(pool.num_idle()).unwrap_or(u32::MAX),
            max: pool.options().get_max_connections(),
        }
    }

    async fn check_clock(&self) -> Result<(), StoreError> {
        if S::Backend::DIALECT.clock.is_some() {
            // The database's own clock: one for every writer, on every machine.
            return Ok(());
        }
        let now = Store::now(self).await?;
        let latest = read_one(self, Statement::new(sql::LATEST_RECORDED_TIME)).await?.opt_int("latest")?;
        match latest.map(from_millis) {
            Some(latest) if latest - now > super::CLOCK_TOLERANCE => Err(StoreError::ClockBehind { now, latest }),
            _ => Ok(()),
        }
    }

    async fn close(&self) {
        self.connections().close().await;
    }

    fn access_report(&self) -> impl Future<Output = Result<Option<String>, StoreError>> + Send {
        SqlStore::access_report(self)
    }

    fn listen_for_changes(
        &self,
    ) -> impl Future<Output = Result<Option<tokio::sync::mpsc::UnboundedReceiver<()>>, StoreError>> + Send {
        SqlStore::listen_for_changes(self)
    }

    fn listen_for_runnable(&self) -> impl Future<Output = Wakeups> + Send {
        SqlStore::listen_for_runnable(self)
    }
}

/// Starts an attempt under each claim that is still current, inside transaction `tx` at time
/// `now`: counts it on the action and inserts it, numbered by that count (the statements one by
/// one of [`Store::start_attempts`], and the attempts a SQLite claim starts). The claims in key
/// order.
async fn start_in_tx<T: LedgerTx>(
    tx: &mut T,
    starts: &[AttemptStart<'_>],
    now: Timestamp,
) -> Result<Vec<AttemptStarted>, StoreError> {
    if starts.is_empty() {
        return Ok(Vec::new());
    }
    let current: Vec<(&ActionKey, i64)> = starts.iter().map(|s| (s.key, s.ownership_version)).collect();
    let counted = tx.count_attempts(&current, now).await?;
    let numbers: std::collections::HashMap<&ActionKey, i64> =
        counted.iter().map(|(key, number)| (key, *number)).collect();
    let attempts: Vec<Attempt> = starts
        .iter()
        .filter_map(|start| {
            numbers.get(start.key).map(|&number| Attempt {
                id: 0,
                key: start.key.clone(),
                number,
                worker: start.worker.to_owned(),
                ownership_version: start.ownership_version,
                started_at: now,
                ended_at: None,
                outcome: None,
                error: None,
                evidence: Evidence::default(),
                idempotency_key: Some(start.idempotency_key.to_owned()),
                stale: false,
                acknowledged: None,
            })
        })
        .collect();
    let ids = tx.insert_attempts(&attempts).await?;
    let ids: std::collections::HashMap<&ActionKey, i64> = ids.iter().map(|(key, id)| (key, *id)).collect();
    Ok(attempts
        .iter()
        .filter_map(|a| ids.get(&a.key).map(|&id| AttemptStarted { key: a.key.clone(), number: a.number, id }))
        .collect())
}

/// [`Store::start_attempts`] as one autocommitted statement per chunk of claims (PostgreSQL).
async fn start_in_one_statement<S: SqlStore>(
    store: &S,
    starts: &[AttemptStart<'_>],
) -> Result<Vec<AttemptStarted>, StoreError> {
    let mut started = Vec::with_capacity(starts.len());
    for chunk in starts.chunks(sql::CLAIMS_PER_COUNT) {
        let statement = sql::pg_start_attempts(SqlStore::clock(store).shift_ms(), chunk);
        for row in autocommitted(store, statement).await? {
            started.push(attempt_started_from_row(&row)?);
        }
    }
    Ok(started)
}

/// [`Store::claim_with_audit`] as two commands (SQLite, see [`OneCommandTx`]): the claim with the
/// transaction's `BEGIN`; then the audit entries of what it claimed, the attempts it starts (as
/// [`sql::sqlite_start_attempts_sql`], for the claims `starts` names) and the `COMMIT`. At most
/// [`sql::CLAIMS_PER_COUNT`] claims, so that the attempts' statements fit one command.
///
/// The time is this host's (SQLite's clock), read before the write lock is taken: a claim that
/// waited for the lock has a lease shorter by that wait, never longer, and an action whose backoff
/// ended during the wait is left for the next claim.
async fn claim_in_two_commands<S: SqlStore>(store: &S, request: &ClaimRequest<'_>) -> Result<Vec<Claimed>, StoreError> {
    let ClaimRequest { worker, lease, limit, scope, audit, starts } = *request;
    let now = Store::now(store).await?;
    let claim = sql::sqlite_claim(worker, now, now + lease, limit, scope);
    let mut tx = OneCommandTx::acquire(store.connections()).await?;
    let claimed: Vec<ActionRecord> =
        tx.begin_with(claim).await?.iter().map(action_from_row).collect::<Result<_, _>>()?;
    let entries: Vec<AuditEntry> = claimed.iter().map(|action| audit.entry(action, worker)).collect();
    // The attempts the claim starts, in the same transaction, as a start would make them.
    let starting = starting_at_claim(&claimed, starts, worker);
    let mut last = (!entries.is_empty()).then(|| sql::append_audit(&entries));
    if let Some(append) = last.take_if(|_| !starting.is_empty()) {
        last = Some(sql::then_sqlite_start_attempts(append, now.timestamp_millis(), &starting));
    }
    let started = tx.commit_with(last).await?.iter().map(attempt_started_from_row).collect::<Result<Vec<_>, _>>()?;
    Ok(with_started(claimed, started))
}

/// Each claimed action with the attempt its claim started, if it started one.
fn with_started(claimed: Vec<ActionRecord>, started: Vec<AttemptStarted>) -> Vec<Claimed> {
    let mut started: std::collections::HashMap<ActionKey, AttemptStarted> =
        started.into_iter().map(|s| (s.key.clone(), s)).collect();
    claimed.into_iter().map(|action| Claimed { started: started.remove(&action.key), action }).collect()
}

/// [`Store::start_attempts`] as one command (SQLite, see [`OneCommandTx`] and
/// [`sql::sqlite_start_attempts_sql`]), at this host's time read before the write lock is taken.
async fn start_in_one_command<S: SqlStore>(
    store: &S,
    starts: &[AttemptStart<'_>],
) -> Result<Vec<AttemptStarted>, StoreError> {
    let now = Store::now(store).await?;
    let statement = sql::sqlite_start_attempts(now.timestamp_millis(), starts);
    let rows = OneCommandTx::acquire(store.connections()).await?.run(statement).await?;
    rows.iter().map(attempt_started_from_row).collect()
}

/// Names as a JSON list, as the claim statements take them.
fn json_list(names: &[String]) -> String {
    serde_json::Value::from(names.to_vec()).to_string()
}

/// Runs a statement on a connection from the pool, as a transaction of its own (autocommitted):
/// a read, or a write that needs nothing else in its transaction; returns its rows.
async fn autocommitted<S: SqlStore>(
    store: &S,
    statement: Statement<S::Backend>,
) -> Result<Vec<<S::Backend as sqlx::Database>::Row>, sqlx::Error> {
    let mut connection = store.connections().acquire().await?;
    S::Backend::fetch_all(&mut *connection, statement).await
}

/// The rows one of an action's histories (deliveries, attempts, audit trail, lookups) holds for
/// `key`, each turned into its record by `record`.
async fn read_history<S: SqlStore, T>(
    store: &S,
    statement: &'static str,
    key: &ActionKey,
    record: fn(&<S::Backend as sqlx::Database>::Row) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    autocommitted(store, Statement::new(statement).text(key.as_str())).await?.iter().map(record).collect()
}

/// Runs a read that answers at most one row on a connection from the pool.
async fn read_optional<S: SqlStore>(
    store: &S,
    statement: Statement<S::Backend>,
) -> Result<Option<<S::Backend as sqlx::Database>::Row>, sqlx::Error> {
    let mut connection = store.connections().acquire().await?;
    S::Backend::fetch_optional(&mut *connection, statement).await
}

/// Runs a read that answers exactly one row on a connection from the pool.
async fn read_one<S: SqlStore>(
    store: &S,
    statement: Statement<S::Backend>,
) -> Result<<S::Backend as sqlx::Database>::Row, sqlx::Error> {
    let mut connection = store.connections().acquire().await?;
    S::Backend::fetch_one(&mut *connection, statement).await
}

/// The attempts a claim by `worker` starts for the actions it claimed (those `starts` names), by
/// key, as a start of their own would make them.
fn starting_at_claim<'a>(
    claimed: &'a [ActionRecord],
    starts: &StartsAtClaim,
    worker: &'a str,
) -> Vec<AttemptStart<'a>> {
    let mut starting: Vec<AttemptStart<'a>> = claimed
        .iter()
        .filter(|action| starts.starts(action))
        .map(|action| AttemptStart {
            key: &action.key,
            ownership_version: action.ownership_version,
            worker,
            idempotency_key: action.sending_key(),
        })
        .collect();
    starting.sort_by(|a, b| a.key.cmp(b.key));
    starting
}
