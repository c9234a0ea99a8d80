//! What a worker performs for a claimed action: the [`Effect`] trait a library user implements (an
//! SMTP send, a database write), with the capabilities it declares against a second effect. The
//! configured HTTP destinations are one implementation ([`crate::destination::Destinations`]);
//! [`NoOp`] performs nothing, so that a benchmark measures the ledger's own cost.

use crate::domain::{ActionKey, ActionRecord, Attempt, Capabilities, DestinationCatalog, Evidence, LookupReport};
use crate::error::Error;
use crate::ledger::{Outcome, Report};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

/// Completes when the worker is told to stop: an effect waiting for its turn at a destination
/// (a rate limit, a pause the destination asked for) gives up and reports the attempt not sent.
pub type Stop = Pin<Box<dyn Future<Output = ()> + Send>>;

/// What the worker knows about an action when it performs it.
#[derive(Debug, Clone, Copy)]
pub struct Work<'a> {
    /// The action as claimed.
    pub action: &'a ActionRecord,
    /// The action it waits on (`after`), as the ledger holds it now.
    pub after: Option<&'a ActionRecord>,
    /// For an update action, the ledger's last completed write of the record it changes.
    pub last_write: Option<&'a LastWrite>,
}

/// The ledger's last completed write of a record an update action changes: the action that wrote
/// it, and the attempt whose answer holds what the destination said (none where that action
/// completed without an answer of its own, by a person's word).
#[derive(Debug, Clone)]
pub struct LastWrite {
    pub writer: ActionKey,
    pub attempt: Option<Attempt>,
}

/// What a worker performs. Each action is performed under a claim whose attempt the ledger has
/// recorded as started; the worker records the [`Report`] only if the claim is still current.
///
/// The capabilities in [`Effect::catalog`] are a promise the ledger relies on: a destination that
/// declares an idempotency key must not act twice on one key inside the retention, and one that
/// declares a lookup must answer [`Effect::look_up`]. Where neither is declared, an attempt that
/// may have been performed is never repeated automatically: it is held for a person.
pub trait Effect: Send + Sync + 'static {
    /// The destinations this effect performs, what each declares, and the destination of actions
    /// submitted without one. The worker claims only actions for these.
    fn catalog(&self) -> DestinationCatalog;

    /// Why `work` must not be performed and waits for a person instead, checked before its
    /// attempt starts; `None` to go ahead.
    fn refusal(&self, work: &Work<'_>) -> Option<String> {
        let _ = work;
        None
    }

    /// Performs one started attempt and says what the ledger should record: `Unknown` whenever
    /// the effect may or may not have taken place.
    fn perform(&self, work: &Work<'_>, stop: Stop) -> impl Future<Output = Report> + Send;

    /// Looks for the effect of an action whose outcome is uncertain, for a destination that
    /// declares a lookup. An error that is the destination's ([`Error::Destination`]) counts as
    /// a lookup that got no answer.
    fn look_up(
        &self,
        action: &ActionRecord,
        after: Option<&ActionRecord>,
    ) -> impl Future<Output = Result<LookupReport, Error>> + Send {
        let _ = after;
        let name = action.destination.clone().unwrap_or_default();
        async move { Err(crate::destination::DestinationError::NoLookup { name }.into()) }
    }

    /// Whether the destination asked not to be sent anything for now: nothing is claimed or
    /// looked up for it meanwhile.
    fn paused(&self, destination: &str) -> bool {
        let _ = destination;
        false
    }
}

/// An effect that performs nothing and reports every attempt completed (as `noop:KEY`), for the
/// destinations it is given with their declared capabilities: the benchmark's handler, as a
/// queue's no-op job measures the queue alone.
#[derive(Debug, Clone)]
pub struct NoOp {
    catalog: DestinationCatalog,
}

impl NoOp {
    /// Performs actions for `destination` (and those submitted without one), which declares
    /// `capabilities`.
    pub fn new(destination: &str, capabilities: Capabilities) -> Self {
        let by_name = BTreeMap::from([(destination.to_owned(), capabilities)]);
        Self { catalog: DestinationCatalog::new(by_name, Some(destination.to_owned())) }
    }
}

impl Effect for NoOp {
    fn catalog(&self) -> DestinationCatalog {
        self.catalog.clone()
    }

    async fn perform(&self, work: &Work<'_>, _stop: Stop) -> Report {
        let destination_id = format!("noop:{}", work.action.key);
        Report {
            outcome: Outcome::Completed { destination_id: destination_id.clone() },
            error: None,
            evidence: Evidence { status: None, destination_id: Some(destination_id), body: None },
        }
    }
}
