//! Wake-ups for idle workers: a signal each time new work may have become claimable, so that a
//! worker waiting out its poll interval claims it at once.
//!
//! Two sources feed a worker's [`Wakeups`]. In the process, every store shares one
//! [`RunnableSignal`] among its clones, raised after the commit of a transaction that wrote an
//! action claimable now (a new action, a claim given back, a person's retry...): this alone wakes
//! the workers of a SQLite ledger, which share it only within one process. On PostgreSQL the
//! database adds its own (LISTEN on the channel of migration 0101), which reaches workers in other
//! processes and on other machines.
//!
//! A wake-up is a hint, never a promise: a worker woken claims, and may find nothing (another
//! worker was quicker, the action waits for one not yet completed). Whatever no signal reaches
//! (a backoff running out, an action whose predecessor completed) is found by polling.

use std::sync::Arc;
use tokio::sync::watch;

/// The in-process signal of one store and its clones: raised after a commit that made work
/// claimable now.
#[derive(Debug, Clone)]
pub struct RunnableSignal(Arc<watch::Sender<()>>);

impl Default for RunnableSignal {
    fn default() -> Self {
        Self(Arc::new(watch::Sender::new(())))
    }
}

impl RunnableSignal {
    /// Wakes every [`Wakeups`] of this store, now or, for one not waiting, at its next wait.
    pub(crate) fn raise(&self) {
        self.0.send_replace(());
    }

    /// A receiver that has seen every raise so far.
    fn subscribe(&self) -> watch::Receiver<()> {
        self.0.subscribe()
    }
}

/// What a worker waits on while idle: completes when new work may be claimable. Opened once
/// per worker; a raise while the worker is busy is kept, so that its next wait ends at once
/// rather than missing work submitted between its last claim and the wait.
#[derive(Debug)]
pub struct Wakeups {
    /// Kept so that the in-process signal outlives every store that raises it: a wait on a
    /// signal nobody can raise any more would otherwise end at once, again and again.
    _signal: RunnableSignal,
    local: watch::Receiver<()>,
    /// The database's own wake-ups, where it sends them (PostgreSQL), relayed by a task of their
    /// own: the listener's connection is never read by a future that a worker's `select!` might
    /// drop half-way through a message.
    remote: Option<watch::Receiver<()>>,
}

impl Wakeups {
    /// Wake-ups from this process's commits alone.
    pub(crate) fn in_process(signal: &RunnableSignal) -> Self {
        Self { local: signal.subscribe(), _signal: signal.clone(), remote: None }
    }

    /// Wake-ups from this process's commits and from the database's relay.
    pub(crate) fn with_remote(signal: &RunnableSignal, remote: watch::Receiver<()>) -> Self {
        Self { remote: Some(remote), ..Self::in_process(signal) }
    }

    /// Completes when new work may be claimable: at once if some became so since the last call
    /// (or since the wake-ups were opened). Never fails; may wake for nothing. Safe to drop
    /// before it completes (in a `select!`): no wake-up is lost by that.
    pub async fn next(&mut self) {
        let Self { local, remote, .. } = self;
        let from_database = async {
            let relayed = match remote {
                Some(remote) => remote.changed().await.is_ok(),
                None => false,
            };
            if !relayed {
                // A relay that ended (its task is gone) wakes nobody again; polling remains.
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            changed = local.changed() => {
                if changed.is_err() {
                    // Unreachable while `_signal` holds the sender; never spin on it.
                    std::future::pending::<()>().await;
                }
            }
            () = from_database => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_raise_before_the_wait_is_kept_and_wakes_it_once() {
        let signal = RunnableSignal::default();
        let mut wakeups = Wakeups::in_process(&signal);
        signal.raise();
        signal.raise();
        tokio::time::timeout(Duration::from_secs(30), wakeups.next()).await.expect("the raise before the wait woke it");
        let again = tokio::time::timeout(Duration::from_millis(50), wakeups.next()).await;
        assert!(again.is_err(), "two raises before one wait wake it once");
    }

    #[tokio::test]
    async fn every_clone_of_a_store_raises_for_every_worker() {
        let signal = RunnableSignal::default();
        let (mut first, mut second) = (Wakeups::in_process(&signal), Wakeups::in_process(&signal));
        signal.clone().raise();
        for wakeups in [&mut first, &mut second] {
            tokio::time::timeout(Duration::from_secs(30), wakeups.next()).await.expect("each worker woken");
        }
    }

    #[tokio::test]
    async fn the_relay_wakes_too() {
        let signal = RunnableSignal::default();
        let (relay, remote) = watch::channel(());
        let mut wakeups = Wakeups::with_remote(&signal, remote);
        relay.send_replace(());
        tokio::time::timeout(Duration::from_secs(30), wakeups.next()).await.expect("the relay woke it");
        drop(relay);
        let after = tokio::time::timeout(Duration::from_millis(50), wakeups.next()).await;
        assert!(after.is_err(), "a relay that ended does not wake it again and again");
    }
}
