//! The configured HTTP destinations as the worker's [`Effect`]: the request (a create, or an
//! update of a record this ledger wrote, conditional where the destination declares it), the
//! lookup before anything may go out again, and how each answer is classified (rules 2 and 3).

use super::effect::{Effect, LastWrite, Stop, Work};
use crate::destination::{self, Destination, Destinations, SendOutcome};
use crate::domain::{ActionRecord, DestinationCatalog, Evidence, LookupReport, LookupVerdict, UpdateCondition};
use crate::error::Error;
use crate::ledger::{Outcome, Report};

impl Effect for Destinations {
    fn catalog(&self) -> DestinationCatalog {
        Destinations::catalog(self)
    }

    fn refusal(&self, work: &Work<'_>) -> Option<String> {
        let action = work.action;
        let destination = self.of(action)?;
        let record = action.updates_destination_id.as_deref().unwrap_or("?");
        if let Some(updated) = &action.updates
            && !destination.can_update()
        {
            return Some(format!(
                "destination {} declares no update request: the approved update of {updated} waits for a person \
                 (change record {record} at the destination, then resolve)",
                destination.name
            ));
        }
        if destination.update_condition() == Some(UpdateCondition::IfMatch)
            && action.updates.is_some()
            && let Err(why) = expected_version(destination, work)
        {
            return Some(format!(
                "destination {} updates only with If-Match, and {why}: the update of record {record} waits for a \
                 person (change the record at the destination, then resolve)",
                destination.name
            ));
        }
        None
    }

    async fn perform(&self, work: &Work<'_>, stop: Stop) -> Report {
        match self.of(work.action) {
            Some(destination) => exchange(destination, work, stop).await,
            None => Report {
                outcome: Outcome::Failed { permanent: true },
                error: Some("this worker has no configuration for the action's destination".to_owned()),
                evidence: Evidence::default(),
            },
        }
    }

    async fn look_up(&self, action: &ActionRecord, after: Option<&ActionRecord>) -> Result<LookupReport, Error> {
        let destination = self.require(action)?;
        let found = destination.lookup(action, after).await?;
        Ok(destination.judge(action, after, &found)?)
    }

    fn paused(&self, destination: &str) -> bool {
        self.get(destination).is_some_and(Destination::paused)
    }
}

/// Why a conditional update's expected version is not known: the update is held for a person.
#[derive(Debug, thiserror::Error)]
enum VersionUnknown {
    #[error("no completed write of the record is in this ledger")]
    NothingWritten,
    #[error("{writer}, which wrote the record last, completed without an answer of its own")]
    AnswerMissing { writer: crate::domain::ActionKey },
    #[error("the answer to {writer} attempt {number}, which wrote the record last, names no version")]
    VersionMissing { writer: crate::domain::ActionKey, number: i64 },
}

/// What this ledger last wrote to the record a conditional update changes: the version the
/// destination answered that write with (sent as `If-Match`), and which attempt's evidence holds
/// the answer.
struct Expected {
    version: String,
    written_by: String,
}

/// The version a conditional update expects the record at: the one the destination answered this
/// ledger's last write of it with, or why it is not known, for the hold's reason.
fn expected_version(destination: &Destination, work: &Work<'_>) -> Result<Expected, VersionUnknown> {
    let Some(LastWrite { writer, attempt }) = work.last_write else {
        return Err(VersionUnknown::NothingWritten);
    };
    let Some(attempt) = attempt else {
        return Err(VersionUnknown::AnswerMissing { writer: writer.clone() });
    };
    let version = attempt.evidence.body.as_deref().and_then(|body| destination.version_in(body));
    match version {
        Some(version) => Ok(Expected { version, written_by: format!("{writer} attempt {}", attempt.number) }),
        None => Err(VersionUnknown::VersionMissing { writer: writer.clone(), number: attempt.number }),
    }
}

/// Sends one started attempt and says what the ledger should record. (Where an earlier attempt
/// may have written and nothing protects a repeat, the worker looked first.)
async fn exchange(destination: &Destination, work: &Work<'_>, stop: Stop) -> Report {
    let Work { action, after, .. } = *work;
    // Checked before the attempt started ([`Effect::refusal`]); a version that went missing
    // since is a request that cannot be built.
    let expected = match destination.update_condition() {
        Some(UpdateCondition::IfMatch) if action.updates.is_some() => expected_version(destination, work).ok(),
        _ => None,
    };
    let version = expected.as_ref().map(|e| e.version.as_str());
    let outcome = match destination.send_if_match_or_stop(action, after, version, stop).await {
        Ok(outcome) => outcome,
        Err(template_error) => SendOutcome::Permanent {
            error: format!("cannot build the request: {template_error}"),
            response: destination::Response { status: 0, body: String::new() },
        },
    };
    match outcome {
        SendOutcome::AlreadyExists { response } => resolve_existing(destination, action, after, response).await,
        SendOutcome::PreconditionFailed { response, current_version } => {
            changed_at_destination(action, expected.as_ref(), &response, current_version.as_deref())
        }
        other => to_report(destination, action, other),
    }
}

/// A conditional update refused because the record changed at the destination: `conflict`, with
/// both versions as evidence, the one this ledger last wrote (named, with the attempt whose
/// evidence holds it) and the one the destination holds now (the refusal's answer).
fn changed_at_destination(
    action: &ActionRecord,
    expected: Option<&Expected>,
    refusal: &destination::Response,
    current_version: Option<&str>,
) -> Report {
    let record = action.updates_destination_id.as_deref().unwrap_or("?");
    let expected = expected.map_or_else(
        || "an unknown version".to_owned(),
        |e| format!("version {} (the answer to {})", e.version, e.written_by),
    );
    let current = current_version.map_or_else(|| "another version".to_owned(), |v| format!("version {v}"));
    Report {
        outcome: Outcome::Conflict,
        error: Some(format!(
            "conditional update refused (HTTP {}): record {record} changed at the destination since this ledger last \
             wrote it; expected {expected}, the destination holds {current}; nothing was overwritten",
            refusal.status
        )),
        evidence: Evidence {
            status: Some(i64::from(refusal.status)),
            destination_id: None,
            body: Some(refusal.body.clone()),
        },
    }
}

/// The destination says the external reference exists (409): a lookup tells whether it is this
/// action's record.
async fn resolve_existing(
    destination: &Destination,
    action: &ActionRecord,
    after: Option<&ActionRecord>,
    conflict: destination::Response,
) -> Report {
    let evidence = |response: &destination::Response, id: Option<String>| Evidence {
        status: Some(i64::from(response.status)),
        destination_id: id,
        body: Some(response.body.clone()),
    };
    let unknown = |error: String, response: &destination::Response| Report {
        outcome: Outcome::Unknown,
        error: Some(error),
        evidence: evidence(response, None),
    };
    if destination.config.lookup.is_none() {
        return unknown(
            "the destination reports the external reference exists and offers no lookup".to_owned(),
            &conflict,
        );
    }
    match destination.lookup(action, after).await {
        Err(error) => unknown(format!("the external reference exists; lookup failed: {error}"), &conflict),
        Ok(found) => match destination.judge(action, after, &found) {
            Ok(LookupReport { verdict: LookupVerdict::Found, destination_id: Some(id), .. }) => Report {
                outcome: Outcome::Completed { destination_id: id.clone() },
                error: None,
                evidence: evidence(&found.response, Some(id)),
            },
            Ok(report) => unknown(
                format!("the external reference exists: {}", report.detail.unwrap_or_default()),
                &found.response,
            ),
            Err(error) => unknown(error.to_string(), &found.response),
        },
    }
}

/// Maps a classified send to what the ledger records (rules 2 and 3).
fn to_report(destination: &Destination, action: &ActionRecord, outcome: SendOutcome) -> Report {
    let evidence = |response: Option<&destination::Response>, id: Option<String>| Evidence {
        status: response.map(|r| i64::from(r.status)),
        destination_id: id,
        body: response.map(|r| r.body.clone()),
    };
    match outcome {
        SendOutcome::Created { destination_id, response } => Report {
            outcome: Outcome::Completed { destination_id: destination_id.clone() },
            error: None,
            evidence: evidence(Some(&response), Some(destination_id)),
        },
        SendOutcome::BeforeWrite { error, response, retry_after } => {
            // `attempts_in_round` was counted when this attempt started.
            let used = action.attempts_in_round + 1;
            let retry = destination.capabilities().retry;
            let outcome = crate::ledger::not_written(retry, used, retry_after);
            let error = match outcome {
                Outcome::Failed { .. } => format!("{error} (attempt {used} of {}: giving up)", retry.max_attempts),
                _ => error,
            };
            Report { outcome, error: Some(error), evidence: evidence(response.as_ref(), None) }
        }
        SendOutcome::Permanent { error, response } => {
            let response = (response.status != 0).then_some(response);
            Report {
                outcome: Outcome::Failed { permanent: true },
                error: Some(error),
                evidence: evidence(response.as_ref(), None),
            }
        }
        SendOutcome::Uncertain { error, response } => {
            Report { outcome: Outcome::Unknown, error: Some(error), evidence: evidence(response.as_ref(), None) }
        }
        // Known not sent, by this worker's own account: back to pending, not before the pause
        // the destination asked for ends. Outside the attempt budget's verdict: a stopping
        // worker must not make an action `failed`.
        SendOutcome::Stopped { pause_left } => Report {
            outcome: Outcome::RetryLater { after: pause_left },
            error: Some(
                "not sent: the worker stopped while the request waited for its turn at the destination".to_owned(),
            ),
            evidence: Evidence::default(),
        },
        SendOutcome::AlreadyExists { response } => Report {
            outcome: Outcome::Unknown,
            error: Some("the destination reports the external reference exists".to_owned()),
            evidence: evidence(Some(&response), None),
        },
        SendOutcome::PreconditionFailed { response, current_version } => {
            changed_at_destination(action, None, &response, current_version.as_deref())
        }
    }
}
