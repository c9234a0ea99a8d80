//! Retention: the explicit, audited purge of settled actions, keeping a tombstone per key (rule 7).

use super::{Ledger, LedgerError, PurgeReport};
use crate::domain::{ActionKey, PurgeCandidate, PurgeRecord, PurgeRequest};
use crate::store::{LedgerTx, Store};

impl<S: Store> Ledger<S> {
    /// Retention (rule 7): reduces the settled actions of `request` to their tombstone, in one
    /// transaction, and records the run with its counts; with `dry_run`, the same transaction
    /// answers the same counts and is rolled back.
    ///
    /// An action an earlier request may have written and that is not completed (a cancellation
    /// from `unknown`, say) is kept whole, attempts and all, and reported as kept: its attempts
    /// are the only record that an effect may exist at the destination
    /// ([`PurgeCandidate::keeps_evidence`]).
    ///
    /// One transaction, not batches: the run's record commits with exactly what it removed, or
    /// nothing does, and the tombstones never hold a half-purged action. It locks only settled
    /// rows, which nothing else changes (on PostgreSQL workers and reviewers go on); on SQLite it
    /// holds the one write lock while it runs, so retention is run often (daily), each run
    /// removing one day's settlements.
    #[tracing::instrument(skip_all, fields(dry_run = request.dry_run))]
    pub async fn purge(&self, request: &PurgeRequest) -> Result<PurgeReport, LedgerError> {
        self.transact_then(!request.dry_run, |tx, now, _| {
            Box::pin(async move {
                tx.check_may_purge().await?;
                let settled_before = request.settled_before(now);
                let (kept, purged): (Vec<PurgeCandidate>, Vec<PurgeCandidate>) = tx
                    .purge_candidates(request.states(), settled_before)
                    .await?
                    .into_iter()
                    .partition(PurgeCandidate::keeps_evidence);
                let keys: Vec<ActionKey> = purged.into_iter().map(|c| c.key).collect();
                let counts = tx.tombstone(&keys).await?;
                let mut record = PurgeRecord {
                    id: 0,
                    at: now,
                    owner: request.owner.as_str().to_owned(),
                    reason: request.reason.as_str().to_owned(),
                    older_than: request.older_than(),
                    settled_before,
                    states: request.states().to_vec(),
                    counts,
                };
                if !request.dry_run {
                    record.id = tx.record_purge(&record, &keys).await?;
                }
                let kept_may_have_written = kept.into_iter().map(|c| c.key).collect();
                Ok(PurgeReport { record, dry_run: request.dry_run, kept_may_have_written })
            })
        })
        .await
    }
}
