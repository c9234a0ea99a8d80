//! Domain types: plain data and pure rules, no I/O.

pub mod blocked;
pub mod capability;
mod exact_json;
#[cfg(test)]
pub(crate) mod generated_section;
pub mod input;
mod jcs;
pub mod key;
pub mod manual;
pub mod payload;
pub mod record;
pub mod refusal;
pub mod retention;
pub mod state;
pub mod text;

pub use blocked::Blocked;
pub use capability::{
    Capabilities, ClaimFacts, DestinationCatalog, LookupDue, RetryPolicy, ReviewOwners, Routing, StartsAtClaim,
    UpdateCondition, UpdateGuard,
};
pub use exact_json::wide_integers_as_text;
pub use input::{InputError, Person, RawSubmission, Reason, Submission, SubmissionRefused};
pub use key::{ActionKey, KeyError};
pub use manual::{ManualCommand, ManualPlan, ProposalChoice};
pub use payload::{FieldChange, Fingerprint, Payload, PayloadChanges, PayloadError};
pub use record::{
    Acknowledgement, ActionRecord, ActorKind, Attempt, AttemptOutcome, AuditEntry, Delivery, Evidence, LookupRecord,
    LookupReport, LookupVerdict, Proposal, ProposalDecision, ProposalRecord, RefusedSubmission, SubmitOutcome,
    Timestamp, Transition,
};
pub use refusal::{Refusal, WayOut};
pub use retention::{PurgeCandidate, PurgeCounts, PurgeRecord, PurgeRequest, RetentionError};
pub use state::{Event, State, StatePair, TransitionRefused};
