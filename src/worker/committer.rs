//! The group-commit batcher: one writer per worker records every result that is waiting in one
//! transaction, each row still conditional on its own ownership version. While a commit is under
//! way the next results gather, so an idle worker commits a result at once and a busy one shares
//! each commit among many.

use crate::domain::text::escape_untrusted;
use crate::ledger::{Claim, Ledger, Recorded, Report, StartedAttempt};
use crate::store::Store;
use std::collections::HashSet;
use tokio::sync::{mpsc, oneshot};

/// Results recorded in one commit at most: a bound on the transaction's size and on what one
/// failed commit leaves to recovery.
pub(super) const MAX_RESULTS_PER_COMMIT: usize = 512;

/// A result waiting for the group commit, and where its fate is told: `Some` once committed
/// (applied, or refused as stale), `None` if the commit failed and the claim is left to expire
/// and be recovered as any claim whose result never arrived.
pub(super) struct Queued {
    pub claim: Claim,
    pub attempt: StartedAttempt,
    pub report: Report,
    pub recorded: oneshot::Sender<Option<Recorded>>,
}

/// What the writer is told: a result to record, or that the worker is done.
enum Message {
    Result(Box<Queued>),
    /// Everything queued before this is recorded, then the writer ends.
    Close,
}

/// The sending side: cheap to clone, one per worker.
#[derive(Clone)]
pub(super) struct Committer {
    queue: mpsc::UnboundedSender<Message>,
}

impl Committer {
    /// Starts the writer for `ledger`; it ends after [`Committer::close`], once what was queued
    /// before is committed: results queued before a shutdown are committed before the worker
    /// exits.
    pub(super) fn start<S: Store>(ledger: Ledger<S>, worker: String) -> (Self, tokio::task::JoinHandle<()>) {
        let (queue, waiting) = mpsc::unbounded_channel();
        (Self { queue }, tokio::spawn(write(ledger, worker, waiting)))
    }

    /// Queues a result and waits for its commit.
    pub(super) async fn record(&self, claim: Claim, attempt: StartedAttempt, report: Report) -> Option<Recorded> {
        let (recorded, told) = oneshot::channel();
        self.queue.send(Message::Result(Box::new(Queued { claim, attempt, report, recorded }))).ok()?;
        told.await.ok().flatten()
    }

    /// Tells the writer to commit what is queued and end.
    pub(super) fn close(&self) {
        let _ = self.queue.send(Message::Close);
    }
}

async fn write<S: Store>(ledger: Ledger<S>, worker: String, mut waiting: mpsc::UnboundedReceiver<Message>) {
    // A result whose key is already in the gathering commit (the same action, taken over again
    // by this worker after its first claim expired) waits for the next one: one commit records
    // one result per action.
    let mut held_over: Vec<Queued> = Vec::new();
    let mut closing = false;
    loop {
        let mut batch: Vec<Queued> = Vec::new();
        let mut keys = HashSet::new();
        let mut take = |queued: Queued, batch: &mut Vec<Queued>, held_over: &mut Vec<Queued>| {
            if keys.insert(queued.claim.key().clone()) {
                batch.push(queued);
            } else {
                held_over.push(queued);
            }
        };
        for queued in std::mem::take(&mut held_over) {
            take(queued, &mut batch, &mut held_over);
        }
        if batch.is_empty() {
            if closing {
                return;
            }
            match waiting.recv().await {
                Some(Message::Result(queued)) => take(*queued, &mut batch, &mut held_over),
                Some(Message::Close) => closing = true,
                None => return,
            }
        }
        while batch.len() < MAX_RESULTS_PER_COMMIT
            && let Ok(message) = waiting.try_recv()
        {
            match message {
                Message::Result(queued) => take(*queued, &mut batch, &mut held_over),
                Message::Close => closing = true,
            }
        }
        if batch.is_empty() {
            continue;
        }
        // The results are queued and not committed: a crash here is the crash after a send.
        crate::faults::crash_point(crate::faults::RESULT_QUEUED);
        let results: Vec<_> = batch.iter().map(|q| (q.claim.clone(), q.attempt, q.report.clone())).collect();
        match ledger.record_results(&results).await {
            Ok(recorded) => {
                for (queued, recorded) in batch.into_iter().zip(recorded) {
                    let _ = queued.recorded.send(Some(recorded));
                }
            }
            Err(error) => {
                let error = escape_untrusted(&error.to_string());
                tracing::warn!(
                    worker = %escape_untrusted(&worker),
                    results = batch.len(),
                    %error,
                    "worker {}: {} results not recorded: {error}; their claims expire and are recovered",
                    escape_untrusted(&worker),
                    batch.len()
                );
                for queued in batch {
                    let _ = queued.recorded.send(None);
                }
            }
        }
    }
}
