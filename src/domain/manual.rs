//! Manual commands: what a named person may do to an action, decided without I/O so that the CLI
//! and the review console can say in advance what a command will do, and refuse it the same way.

use super::capability::ClaimFacts;
use super::key::{ActionKey, KeyError};
use super::record::{ActionRecord, Proposal, ProposalRecord, Timestamp, Transition};
use super::refusal::Refusal;
use super::state::{self, Event, State};

/// A command a named person runs on one action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManualCommand {
    Retry,
    ResolveCompleted {
        destination_id: String,
    },
    ResolveNotWritten,
    Cancel,
    /// Approve a proposed payload: the one whose fingerprint starts with `proposal`, or, when none
    /// is named, the only one waiting (refused when several wait). The others waiting are rejected.
    Approve {
        proposal: Option<String>,
    },
    /// Reject the proposed payload whose fingerprint starts with `proposal`, or every one waiting.
    Reject {
        proposal: Option<String>,
    },
    /// Take over a stale claim; whether it may run again is decided by the ledger from the
    /// claim as locked and the destination's declared capabilities.
    Takeover,
    /// Make the action this person's to follow up.
    Assign {
        to: String,
    },
    /// Acknowledge the late results listed on the action (rule 8); the state does not change.
    Acknowledge,
    /// Re-create a completed action whose record was removed at the destination: a new linked
    /// action `KEY#recreate-N` carries the approved payload there again, and this one stays
    /// completed with its evidence.
    Recreate,
}

impl ProposalChoice {
    /// After [`apply`]: the latest proposal still waiting stays the action's proposal.
    pub fn keep_latest_waiting(&self, action: &mut ActionRecord) {
        if let Some(latest) = self.remaining.iter().max_by_key(|p| (p.received_at, p.id)) {
            action.proposal = Some(latest.proposal());
        }
    }
}

impl ManualCommand {
    pub fn verb(&self) -> &'static str {
        match self {
            Self::Retry => "retry",
            Self::ResolveCompleted { .. } => "resolve as completed",
            Self::ResolveNotWritten => "resolve as not written",
            Self::Cancel => "cancel",
            Self::Approve { .. } => "approve",
            Self::Reject { .. } => "reject",
            Self::Takeover => "take over",
            Self::Assign { .. } => "assign",
            Self::Acknowledge => "acknowledge",
            Self::Recreate => "re-create",
        }
    }

    pub fn event(&self) -> Event {
        match self {
            Self::Retry => Event::Retry,
            Self::ResolveCompleted { .. } => Event::ResolvedCompleted,
            Self::ResolveNotWritten => Event::ResolvedNotWritten,
            Self::Cancel => Event::Cancelled,
            Self::Approve { .. } => Event::Approved,
            Self::Reject { .. } => Event::Rejected,
            Self::Takeover => Event::TakenOver,
            Self::Assign { .. } => Event::Assigned,
            Self::Acknowledge => Event::LateResultsAcknowledged,
            Self::Recreate => Event::Recreated,
        }
    }

    /// Commands that would send the approved payload again: never while another payload is
    /// proposed, whatever the state, or the old payload would run past the decision.
    fn sends_again(&self) -> bool {
        matches!(self, Self::Retry | Self::ResolveNotWritten)
    }

    /// Commands that make the action runnable again: on an action held because its expired
    /// claim could not be taken over safely, only once the person confirms that the old worker
    /// can no longer act (rule 5).
    pub fn runs_again(&self) -> bool {
        self.sends_again() || matches!(self, Self::Approve { .. })
    }
}

/// Whether `command` on `action` needs the person's confirmation that the old worker can no
/// longer act: the front ends ask for it exactly when this is true.
pub fn needs_old_worker_stopped(action: &ActionRecord, command: &ManualCommand) -> bool {
    action.old_worker_may_act && command.runs_again()
}

/// Whether `command` on `action` needs the person's confirmation that the destination holds no
/// record. Rule 6: a retry of an action an earlier request may have written, whose destination
/// cannot recognise the repeat (`repeat_recognised`, as the ledger establishes it:
/// [`crate::domain::DestinationCatalog::retry_recognised`]), could create a second effect. And a
/// cancellation of an action an earlier request may have written would record that nothing was
/// done while the effect may exist: the person checks first (and resolves it as completed if the
/// destination holds it). The front ends ask for it exactly when this is true.
pub fn needs_not_written(action: &ActionRecord, command: &ManualCommand, repeat_recognised: bool) -> bool {
    match command {
        ManualCommand::Retry => action.may_have_written && !repeat_recognised,
        ManualCommand::Cancel => action.may_have_written,
        _ => false,
    }
}

/// What the person confirmed with a command, where the command needs it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Confirmed {
    /// The worker of an unsafely expired claim can no longer act (rule 5).
    pub old_worker_stopped: bool,
    /// The destination holds no record of the action (rule 6).
    pub not_written: bool,
}

impl Confirmed {
    pub const NONE: Self = Self { old_worker_stopped: false, not_written: false };
    /// Both, for describing a command before the person is asked.
    pub const ALL: Self = Self { old_worker_stopped: true, not_written: true };
}

/// What a manual command will do, decided before anything is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManualPlan {
    pub event: Event,
    pub from: State,
    /// Equal to `from` when the command changes the record but not its state (rejecting a
    /// proposal that arrived after the action had moved on).
    pub to: State,
}

/// Which waiting proposals a command settles, decided from the proposals waiting (oldest first)
/// before the command is planned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProposalChoice {
    /// The proposal an approval makes the approved payload.
    pub approved: Option<ProposalRecord>,
    /// The proposals the command rejects: those a rejection names (or all), the others an approval
    /// passes over, every one a cancellation leaves.
    pub rejected: Vec<ProposalRecord>,
    /// The proposals still waiting afterwards, oldest first: the latest of them stays the
    /// action's proposal.
    pub remaining: Vec<ProposalRecord>,
}

/// Chooses the proposals `command` settles among those `waiting` (oldest first). An approval
/// names one by the first characters of its fingerprint, or takes the only one waiting, and is
/// refused when several wait and none was named; a rejection names one or rejects all; a
/// cancellation rejects all. Other commands settle none. With none waiting, [`plan`] refuses an
/// approval or rejection.
pub fn choose_proposals(
    action: &ActionRecord,
    command: &ManualCommand,
    waiting: Vec<ProposalRecord>,
) -> Result<ProposalChoice, Refusal> {
    let (verb, key) = (command.verb(), &action.key);
    let named = match command {
        ManualCommand::Approve { proposal } | ManualCommand::Reject { proposal } => proposal.as_deref(),
        ManualCommand::Cancel => None,
        _ => return Ok(ProposalChoice { remaining: waiting, ..ProposalChoice::default() }),
    };
    if waiting.is_empty() {
        return Ok(ProposalChoice::default());
    }
    let shown =
        |waiting: &[ProposalRecord]| waiting.iter().map(|p| p.payload.fingerprint().short().to_owned()).collect();
    let chosen = match named {
        Some(named) => {
            let wanted = named.trim().trim_start_matches("sha256:").to_ascii_lowercase();
            let matching: Vec<usize> = (0..waiting.len())
                .filter(|&i| !wanted.is_empty() && waiting[i].payload.fingerprint().as_str().starts_with(&wanted))
                .collect();
            if matching.len() != 1 {
                return Err(Refusal::ProposalNotFound {
                    verb,
                    key: key.clone(),
                    named: named.to_owned(),
                    matches: matching.len(),
                    waiting: shown(&waiting),
                });
            }
            Some(matching[0])
        }
        None if matches!(command, ManualCommand::Approve { .. }) && waiting.len() > 1 => {
            return Err(Refusal::ProposalNotChosen { verb, key: key.clone(), waiting: shown(&waiting) });
        }
        None if matches!(command, ManualCommand::Approve { .. }) => Some(0),
        None => None,
    };
    let mut choice = ProposalChoice::default();
    for (i, proposal) in waiting.into_iter().enumerate() {
        match (command, chosen) {
            (ManualCommand::Approve { .. }, Some(c)) if c == i => choice.approved = Some(proposal),
            (ManualCommand::Reject { .. }, Some(c)) if c != i => choice.remaining.push(proposal),
            _ => choice.rejected.push(proposal),
        }
    }
    Ok(choice)
}

/// A command decided as the ledger decides it: the waiting proposals it settles
/// ([`choose_proposals`]), then its plan ([`plan`]) against the action carrying the proposal it
/// approves. The ledger calls this with what it locked; a front end that says in advance what a
/// command will do calls it with what it read, so that both reach the same answer.
pub fn decide(
    action: &ActionRecord,
    command: &ManualCommand,
    now: Timestamp,
    claim: ClaimFacts,
    confirmed: Confirmed,
    waiting: Vec<ProposalRecord>,
) -> Result<(ProposalChoice, ManualPlan), Refusal> {
    let choice = choose_proposals(action, command, waiting)?;
    let remain = !choice.remaining.is_empty();
    let planned = match &choice.approved {
        Some(approved) => {
            let mut approving = action.clone();
            approving.proposal = Some(approved.proposal());
            plan(&approving, command, now, claim, confirmed, remain)?
        }
        None => plan(action, command, now, claim, confirmed, remain)?,
    };
    Ok((choice, planned))
}

/// Decides a command against the action as read, at database time `now`. `claim` is what the
/// ledger established about the current claim (for a takeover) and whether the destination
/// recognises a repeat (for a takeover and a retry); `confirmed` is what the person confirmed;
/// `proposals_remain` says that proposals still wait after this command ([`choose_proposals`]).
/// The error is the refusal, worded for the person: which key, why, and when it would be allowed.
pub fn plan(
    action: &ActionRecord,
    command: &ManualCommand,
    now: Timestamp,
    claim: ClaimFacts,
    confirmed: Confirmed,
    proposals_remain: bool,
) -> Result<ManualPlan, Refusal> {
    let (verb, key, from, event) = (command.verb(), &action.key, action.state, command.event());
    if matches!(command, ManualCommand::Acknowledge) {
        // Any state, final ones included: a late result on a completed action is the case that
        // most needs a person's eyes.
        if action.late_results == 0 {
            return Err(Refusal::NothingToAcknowledge { key: key.clone() });
        }
        return Ok(ManualPlan { event, from, to: from });
    }
    if matches!(command, ManualCommand::Recreate) {
        return plan_recreate(action).map(|()| ManualPlan { event, from, to: from });
    }
    let proposal_waits = action.proposal.is_some() && (from == State::Conflict || command.sends_again());
    let settles_payload = command.sends_again() || matches!(command, ManualCommand::ResolveCompleted { .. });
    if proposal_waits && settles_payload {
        return Err(Refusal::ProposalWaiting { verb, key: key.clone() });
    }
    if matches!(command, ManualCommand::Approve { .. } | ManualCommand::Reject { .. }) && action.proposal.is_none() {
        return Err(Refusal::NoProposal { verb, key: key.clone() });
    }
    if matches!(command, ManualCommand::Approve { .. }) {
        let derive = |what: &'static str, derived: Result<ActionKey, KeyError>, text: String| {
            derived.map_err(|problem| Refusal::DerivedKeyRefused { key: key.clone(), what, derived: text, problem })
        };
        let next = action.payload_revision + 1;
        if from == State::Completed {
            // A new version of a completed action is not a second create: the approval records a
            // linked update action, and the completed action stays completed.
            derive("update action key", key.update_key(next), format!("{key}#update-{next}"))?;
            return Ok(ManualPlan { event, from, to: from });
        }
        if derives_idempotency_key(action) {
            derive("idempotency key", key.revision_key(next), format!("{key}#rev-{next}"))?;
        }
    }
    let to = match command {
        ManualCommand::Retry | ManualCommand::ResolveNotWritten | ManualCommand::Approve { .. } => State::Pending,
        ManualCommand::ResolveCompleted { .. } => State::Completed,
        ManualCommand::Cancel => State::Cancelled,
        // Rejecting one proposal of several: the action waits on for the others, where it is.
        ManualCommand::Reject { .. } if from != State::Conflict || proposals_remain => {
            return Ok(ManualPlan { event, from, to: from });
        }
        ManualCommand::Assign { .. } if from.is_terminal() => {
            return Err(Refusal::Final { key: key.clone(), state: from });
        }
        ManualCommand::Assign { .. } => return Ok(ManualPlan { event, from, to: from }),
        ManualCommand::Acknowledge | ManualCommand::Recreate => unreachable!("decided above"),
        // `failed` means known not written (rule 2): a conflict entered from `failed` does not go
        // back there once something (a late result reporting a write) showed that a request may
        // have written. It stays in conflict, where the late result alone would have put it, for
        // the person to settle by a lookup, a resolution or a retry.
        ManualCommand::Reject { .. } => match action.resume_state {
            Some(State::Failed) if action.may_have_written => State::Conflict,
            resume => resume.unwrap_or(State::Conflict),
        },
        ManualCommand::Takeover => {
            if action.lease_is_live(now) {
                let until = action.lease_expires_at.unwrap_or(now);
                return Err(Refusal::ClaimLive {
                    key: key.clone(),
                    claimed_by: action.claimed_by.clone(),
                    seconds_left: (until - now).num_seconds().max(1),
                    until,
                });
            }
            // Rule 5 (docs/RULES.md): repeat only what cannot take effect twice.
            if claim.takeover_is_safe() { State::Pending } else { State::Held }
        }
    };
    state::check(event, from, to).map_err(|_| Refusal::StateForbids {
        verb,
        key: key.clone(),
        state: from,
        allowed: state::allowed_from(event),
        requirement: match command {
            ManualCommand::Takeover => Some("with an expired lease"),
            ManualCommand::Approve { .. } => Some("with a proposed payload"),
            _ => None,
        },
    })?;
    // Rule 5: after the state check, so that a command the state forbids says so first.
    if needs_old_worker_stopped(action, command) && !confirmed.old_worker_stopped {
        return Err(Refusal::OldWorkerMayAct { verb, key: key.clone() });
    }
    // Rule 6: a retry follows the automatic rules; where they would not send again, the person
    // checked the destination.
    if needs_not_written(action, command, claim.repeat_protected) && !confirmed.not_written {
        return Err(match command {
            ManualCommand::Cancel => Refusal::CancelMayHaveWritten { key: key.clone() },
            _ => Refusal::MayWriteTwice { verb, key: key.clone() },
        });
    }
    Ok(ManualPlan { event, from, to })
}

/// Applies a plan to the record. Returns the transition, or `None` when the state stays.
pub fn apply(
    action: &mut ActionRecord,
    command: &ManualCommand,
    plan: ManualPlan,
    now: Timestamp,
) -> Result<Option<Transition>, state::TransitionRefused> {
    let keeps_state = matches!(
        plan.event,
        Event::Rejected | Event::Assigned | Event::LateResultsAcknowledged | Event::Approved | Event::Recreated
    );
    let transition = if plan.to == plan.from && keeps_state {
        action.updated_at = now;
        None
    } else {
        Some(action.transition(plan.event, plan.to, now)?)
    };
    if command.runs_again() {
        // Planned, so the person confirmed that the old worker stopped wherever that was needed.
        action.old_worker_may_act = false;
    }
    match command {
        ManualCommand::Retry => {
            // A retry from `held` starts a new idempotency window: the person has checked the
            // destination (the window passed, or a takeover was unsafe), and past the window it has
            // forgotten the key. From any other state the window keeps counting (rule 4). Either
            // way `first_sent_at` stays: something may have been sent, so a worker looks before it
            // sends again where the destination has a lookup, as it would after any automatic retry.
            if plan.from == State::Held {
                action.window_started_at = None;
            }
            action.attempts_in_round = 0;
            action.not_before = None;
        }
        ManualCommand::ResolveCompleted { destination_id } => {
            action.destination_id = Some(destination_id.clone());
        }
        ManualCommand::ResolveNotWritten => {
            // The person found nothing at the destination: the next request starts a new window.
            // The evidence that something may have been sent stays, so a worker that can look
            // still looks first: the record may only have been slow to appear.
            action.window_started_at = None;
            action.attempts_in_round = 0;
            action.not_before = None;
            // Known not written, on the person's word: a failure from here on may be `failed`.
            action.may_have_written = false;
        }
        ManualCommand::Cancel | ManualCommand::Reject { .. } => action.proposal = None,
        // A completed action keeps the payload the destination holds: the approved one goes out
        // in its update action ([`update_action`]), and is this action's only once that update
        // completed ([`take_update`]). An update that fails leaves it as it was.
        ManualCommand::Approve { .. } if plan.from == State::Completed => action.proposal = None,
        ManualCommand::Approve { .. } => {
            // Rule 9: once a request may have gone out under the current key, the new body goes
            // out under a key of its own, which `plan` checked can be made.
            let derived = derives_idempotency_key(action);
            if let Some(proposal) = action.proposal.take() {
                action.payload = proposal.payload;
                action.source_version = proposal.source_version.or(action.source_version);
                action.payload_revision += 1;
            }
            if derived && let Ok(key) = action.key.revision_key(action.payload_revision) {
                action.idempotency_key = Some(key.as_str().to_owned());
            }
            action.attempts_in_round = 0;
        }
        ManualCommand::Takeover => {
            action.ownership_version += 1;
            // Held because taking over was unsafe: the old worker may still act (rule 5).
            action.old_worker_may_act |= plan.to == State::Held;
        }
        ManualCommand::Assign { to } => action.assignee = Some(to.clone()),
        ManualCommand::Acknowledge => action.late_results = 0,
        // The original keeps its state, its destination id and its evidence: the new action
        // ([`recreate_action`]) does the work.
        ManualCommand::Recreate => {}
    }
    Ok(transition)
}

/// Whether approving a changed payload moves requests to a derived idempotency key: a request may
/// already have reached the destination under the current one (rule 9).
fn derives_idempotency_key(action: &ActionRecord) -> bool {
    action.first_sent_at.is_some() || action.attempts > 0
}

/// The update action that approving `proposal`, a changed payload of the completed `original`,
/// records as its `number`th: its own key `KEY#update-N`, pending, with the proposal's payload and
/// the original's destination and destination id. The original keeps its approved payload until
/// this update completes ([`take_update`]).
pub fn update_action(
    original: &ActionRecord,
    proposal: &Proposal,
    number: i64,
    now: Timestamp,
) -> Result<ActionRecord, Refusal> {
    let key = original.key.update_key(number).map_err(|problem| Refusal::DerivedKeyRefused {
        key: original.key.clone(),
        what: "update action key",
        derived: format!("{}#update-{number}", original.key),
        problem,
    })?;
    Ok(ActionRecord {
        source: original.source.clone(),
        source_version: proposal.source_version.or(original.source_version),
        destination: original.destination.clone(),
        updates: Some(original.key.clone()),
        updates_destination_id: original.destination_id.clone(),
        ..ActionRecord::pending(key, proposal.payload.clone(), now)
    })
}

/// The number N of an update action `KEY#update-N`, read from its key; `None` for an action that
/// updates nothing.
pub fn update_number(update: &ActionRecord) -> Option<i64> {
    let original = update.updates.as_ref()?;
    update.key.as_str().strip_prefix(original.as_str())?.strip_prefix("#update-")?.parse().ok()
}

/// How an update action of `original` stands, in one line for a person: the same words in
/// `show`, its JSON and the console. The original takes an update's payload only once the update
/// completed, so one that failed or was cancelled says that the original kept its own.
pub fn describe_update(update: &ActionRecord, original: &ActionRecord) -> String {
    let number = update_number(update).unwrap_or_default();
    let kept = format!("{} keeps payload revision {}", original.key, original.payload_revision);
    match update.state {
        State::Completed if number == original.payload_revision => {
            format!("update {} completed: payload revision {number} taken on", update.key)
        }
        State::Completed => format!("update {} completed (payload revision {number}); {kept}", update.key),
        State::Failed => format!(
            "update {} failed: {}; {kept}",
            update.key,
            update.last_error.as_deref().unwrap_or("no error was kept")
        ),
        State::Cancelled => format!("update {} cancelled; {kept}", update.key),
        state => format!("update {} is {state}; {kept} until it completes", update.key),
    }
}

/// What the completed `original` does when its update action `update` completed at the
/// destination: the update's payload becomes its approved one, at the update's number as its
/// payload revision. An update older than the revision the original holds (a later update
/// completed first) changes nothing, and `false` says so.
pub fn take_update(original: &mut ActionRecord, update: &ActionRecord, now: Timestamp) -> bool {
    let Some(number) = update_number(update) else { return false };
    if number <= original.payload_revision {
        return false;
    }
    original.payload = update.payload.clone();
    original.payload_revision = number;
    original.source_version = original.source_version.max(update.source_version);
    original.updated_at = now;
    true
}

/// Whether a completed action may be re-created: only a completed creation (an update action's
/// record is its original's, which carries the latest approved payload), and never past a
/// proposed payload waiting for a decision, which the re-created record would pass over.
fn plan_recreate(action: &ActionRecord) -> Result<(), Refusal> {
    let (verb, key) = (ManualCommand::Recreate.verb(), &action.key);
    if action.state != State::Completed {
        return Err(Refusal::StateForbids {
            verb,
            key: key.clone(),
            state: action.state,
            allowed: vec![State::Completed],
            requirement: None,
        });
    }
    if let Some(original) = &action.updates {
        return Err(Refusal::RecreateOfUpdate { key: key.clone(), original: original.clone() });
    }
    if action.proposal.is_some() {
        return Err(Refusal::ProposalWaiting { verb, key: key.clone() });
    }
    Ok(())
}

/// The action that re-creates the completed `original` as its `n`th re-creation: its own key
/// `KEY#recreate-N`, pending, with the original's approved payload, source and destination, and
/// nothing of the original's claim, attempts or destination id, so that a worker creates the
/// record at the destination again under the new key.
pub fn recreate_action(original: &ActionRecord, n: i64, now: Timestamp) -> Result<ActionRecord, Refusal> {
    let key = original.key.recreate_key(n).map_err(|problem| Refusal::RecreateKeyRefused {
        key: original.key.clone(),
        derived: format!("{}#recreate-{n}", original.key),
        problem,
    })?;
    Ok(ActionRecord {
        source: original.source.clone(),
        source_version: original.source_version,
        destination: original.destination.clone(),
        ..ActionRecord::pending(key, original.payload.clone(), now)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::input::{RawSubmission, Submission};
    use chrono::Duration;

    /// The plan of a command as the person saw the action: nothing established about its claim,
    /// nothing confirmed, no proposal left waiting.
    fn planned(action: &ActionRecord, command: &ManualCommand, now: Timestamp) -> Result<ManualPlan, Refusal> {
        plan(action, command, now, ClaimFacts::WORST_CASE, Confirmed::NONE, false)
    }

    fn action(state: State) -> ActionRecord {
        let raw = RawSubmission { key: Some("k".into()), payload: b"{}".to_vec(), ..Default::default() };
        let mut action = ActionRecord::new_pending(&Submission::validate(&raw).unwrap(), Timestamp::default());
        action.state = state;
        action
    }

    #[test]
    fn a_refusal_says_which_states_allow_the_command() {
        let refused = planned(&action(State::Completed), &ManualCommand::Cancel, Timestamp::default());
        assert_eq!(
            refused.unwrap_err().to_string(),
            "cannot cancel k: it is completed; cancel is allowed only when it is pending, failed, unknown, held, conflict"
        );
    }

    #[test]
    fn takeover_repeats_only_what_cannot_take_effect_twice() {
        let now = Timestamp::default() + Duration::minutes(5);
        let mut claimed = action(State::InProgress);
        claimed.claimed_by = Some("w".into());
        claimed.lease_expires_at = Some(now - Duration::seconds(1));
        let takeover = |repeat_protected, sent_under_claim| {
            plan(
                &claimed,
                &ManualCommand::Takeover,
                now,
                ClaimFacts { sent_under_claim, repeat_protected },
                Confirmed::NONE,
                false,
            )
            .unwrap()
            .to
        };
        assert_eq!(takeover(false, true), State::Held);
        assert_eq!(takeover(true, true), State::Pending);
        assert_eq!(takeover(false, false), State::Pending);
        claimed.lease_expires_at = Some(now + Duration::seconds(30));
        let live = planned(&claimed, &ManualCommand::Takeover, now).unwrap_err().to_string();
        assert!(live.contains("live for 30 more seconds"), "{live}");
    }

    fn proposed(mut action: ActionRecord, payload: &str) -> ActionRecord {
        let raw = RawSubmission { key: Some("k".into()), payload: payload.as_bytes().to_vec(), ..Default::default() };
        let payload = Submission::validate(&raw).unwrap().payload;
        action.proposal = Some(crate::domain::record::Proposal { payload, source_version: None });
        action
    }

    #[test]
    fn approving_on_a_completed_action_keeps_it_completed_and_derives_the_update() {
        let now = Timestamp::default();
        let mut done = proposed(action(State::Completed), r#"{"q":2}"#);
        done.destination_id = Some("R-1".into());
        let p = planned(&done, &ManualCommand::Approve { proposal: None }, now).unwrap();
        assert_eq!((p.from, p.to), (State::Completed, State::Completed));
        assert_eq!(apply(&mut done, &ManualCommand::Approve { proposal: None }, p, now).unwrap(), None);
        assert_eq!((done.state, done.payload_revision, done.proposal.is_none()), (State::Completed, 1, true));
        assert_eq!(done.payload.canonical(), "{}", "it keeps what the destination holds until the update completes");
        assert_eq!(done.idempotency_key, None, "a completed action sends nothing again");
        let approved = proposed(action(State::Completed), r#"{"q":2}"#).proposal.unwrap();
        let update = update_action(&done, &approved, 2, now).unwrap();
        assert_eq!(update.key.as_str(), "k#update-2");
        assert_eq!((update.updates.as_ref(), update.updates_destination_id.as_deref()), (Some(&done.key), Some("R-1")));
        assert_eq!((update.state, update.ownership_version), (State::Pending, 0));
        assert_eq!((update.payload.value()["q"].as_i64(), update_number(&update)), (Some(2), Some(2)));

        let mut later = update_action(&done, &approved, 3, now).unwrap();
        assert!(take_update(&mut done, &later, now));
        assert_eq!((done.payload_revision, done.payload.value()["q"].as_i64()), (3, Some(2)));
        assert!(!take_update(&mut done, &update, now), "an older update completing later changes nothing");
        later.updates = None;
        assert_eq!(update_number(&later), None);

        let mut long = proposed(action(State::Completed), r#"{"q":2}"#);
        long.key = ActionKey::parse(&"k".repeat(250)).unwrap();
        let refused = planned(&long, &ManualCommand::Approve { proposal: None }, now).unwrap_err().to_string();
        assert!(refused.contains("is 259 bytes long; at most 255"), "{refused}");
    }

    #[test]
    fn approving_after_a_send_derives_an_idempotency_key() {
        let now = Timestamp::default();
        let mut fresh = proposed(action(State::Conflict), r#"{"q":2}"#);
        let p = planned(&fresh, &ManualCommand::Approve { proposal: None }, now).unwrap();
        apply(&mut fresh, &ManualCommand::Approve { proposal: None }, p, now).unwrap();
        assert_eq!((fresh.sending_key(), fresh.payload_revision), ("k", 2), "nothing was sent: the key is unused");

        let mut sent = proposed(action(State::Conflict), r#"{"q":2}"#);
        sent.first_sent_at = Some(now);
        sent.attempts = 1;
        let p = planned(&sent, &ManualCommand::Approve { proposal: None }, now).unwrap();
        apply(&mut sent, &ManualCommand::Approve { proposal: None }, p, now).unwrap();
        assert_eq!((sent.state, sent.sending_key(), sent.key.as_str()), (State::Pending, "k#rev-2", "k"));
    }

    #[test]
    fn a_retry_after_the_window_starts_a_new_one() {
        let sent = Some(Timestamp::default());
        let mut held = action(State::Held);
        (held.first_sent_at, held.window_started_at) = (sent, sent);
        let p = planned(&held, &ManualCommand::Retry, Timestamp::default()).unwrap();
        apply(&mut held, &ManualCommand::Retry, p, Timestamp::default()).unwrap();
        assert_eq!((held.state, held.window_started_at), (State::Pending, None), "a new window");
        assert_eq!(held.first_sent_at, sent, "the evidence that something may have been sent stays");

        let mut unknown = action(State::Unknown);
        (unknown.first_sent_at, unknown.window_started_at) = (sent, sent);
        let p = planned(&unknown, &ManualCommand::Retry, Timestamp::default()).unwrap();
        apply(&mut unknown, &ManualCommand::Retry, p, Timestamp::default()).unwrap();
        assert_eq!(unknown.window_started_at, sent, "inside the window the destination still knows the key");

        let mut unknown = action(State::Unknown);
        (unknown.first_sent_at, unknown.window_started_at) = (sent, sent);
        let command = ManualCommand::ResolveNotWritten;
        let p = planned(&unknown, &command, Timestamp::default()).unwrap();
        apply(&mut unknown, &command, p, Timestamp::default()).unwrap();
        assert_eq!((unknown.first_sent_at, unknown.window_started_at), (sent, None));
    }

    #[test]
    fn an_unsafe_hold_runs_again_only_once_the_old_worker_is_confirmed_stopped() {
        let now = Timestamp::default();
        let mut held = action(State::Held);
        held.old_worker_may_act = true;
        for command in [ManualCommand::Retry, ManualCommand::ResolveNotWritten] {
            let refused = planned(&held, &command, now).unwrap_err();
            assert!(matches!(refused, Refusal::OldWorkerMayAct { .. }), "{refused}");
            assert_eq!(refused.way_out(), Some(crate::domain::WayOut::ConfirmOldWorkerStopped), "{refused}");
        }
        assert!(planned(&held, &ManualCommand::Cancel, now).is_ok(), "cancel needs none");
        let p = plan(
            &held,
            &ManualCommand::Retry,
            now,
            ClaimFacts::WORST_CASE,
            Confirmed { old_worker_stopped: true, not_written: false },
            false,
        )
        .unwrap();
        apply(&mut held, &ManualCommand::Retry, p, now).unwrap();
        assert!(!held.old_worker_may_act, "confirmed once, for good");
    }

    #[test]
    fn rejecting_never_returns_to_failed_once_a_write_may_have_happened() {
        let now = Timestamp::default();
        let mut conflict = proposed(action(State::Conflict), r#"{"q":2}"#);
        conflict.resume_state = Some(State::Failed);
        let p = planned(&conflict, &ManualCommand::Reject { proposal: None }, now).unwrap();
        assert_eq!(p.to, State::Failed, "known not written: back to failed");
        conflict.may_have_written = true;
        let p = planned(&conflict, &ManualCommand::Reject { proposal: None }, now).unwrap();
        assert_eq!(p.to, State::Conflict, "a request may have written: not failed");
        conflict.resume_state = Some(State::Held);
        let p = planned(&conflict, &ManualCommand::Reject { proposal: None }, now).unwrap();
        assert_eq!(p.to, State::Held, "other states are honest whatever was written");
    }

    #[test]
    fn approve_chooses_one_proposal_and_reject_one_or_all() {
        let conflict = proposed(action(State::Conflict), r#"{"q":3}"#);
        let waiting: Vec<ProposalRecord> = [r#"{"q":2}"#, r#"{"q":3}"#]
            .iter()
            .enumerate()
            .map(|(i, text)| {
                let p = proposed(action(State::Conflict), text).proposal.unwrap();
                ProposalRecord {
                    id: i64::try_from(i).unwrap() + 1,
                    key: conflict.key.clone(),
                    payload: p.payload,
                    source: None,
                    event_id: None,
                    source_version: None,
                    received_at: Timestamp::default(),
                    decision: None,
                    decided_by: None,
                    decided_at: None,
                }
            })
            .collect();
        let choose = |command: ManualCommand| choose_proposals(&conflict, &command, waiting.clone());
        let refused = choose(ManualCommand::Approve { proposal: None }).unwrap_err();
        assert!(matches!(&refused, Refusal::ProposalNotChosen { waiting, .. } if waiting.len() == 2), "{refused}");
        let second = waiting[1].payload.fingerprint().as_str()[..8].to_owned();
        let approved = choose(ManualCommand::Approve { proposal: Some(second.clone()) }).unwrap();
        assert_eq!(approved.approved.as_ref().map(|p| p.id), Some(2));
        assert_eq!((approved.rejected.len(), approved.remaining.len()), (1, 0));
        let one = choose(ManualCommand::Reject { proposal: Some(format!("sha256:{second}")) }).unwrap();
        assert_eq!((one.rejected[0].id, one.remaining[0].id), (2, 1));
        let all = choose(ManualCommand::Reject { proposal: None }).unwrap();
        assert_eq!((all.rejected.len(), all.remaining.len()), (2, 0));
        let none = choose(ManualCommand::Reject { proposal: Some("zz".into()) }).unwrap_err();
        assert!(matches!(none, Refusal::ProposalNotFound { matches: 0, .. }));
        let p = plan(
            &conflict,
            &ManualCommand::Reject { proposal: None },
            Timestamp::default(),
            ClaimFacts::WORST_CASE,
            Confirmed::NONE,
            true,
        )
        .unwrap();
        assert_eq!(p.to, State::Conflict, "others still wait");
    }

    #[test]
    fn acknowledging_needs_a_late_result_and_keeps_the_state() {
        let now = Timestamp::default();
        let mut completed = action(State::Completed);
        let refused = planned(&completed, &ManualCommand::Acknowledge, now).unwrap_err();
        assert!(matches!(refused, Refusal::NothingToAcknowledge { .. }));
        completed.late_results = 2;
        let p = planned(&completed, &ManualCommand::Acknowledge, now).unwrap();
        assert_eq!(apply(&mut completed, &ManualCommand::Acknowledge, p, now).unwrap(), None);
        assert_eq!((completed.state, completed.late_results), (State::Completed, 0));
    }

    #[test]
    fn only_a_completed_creation_is_re_created_and_it_stays_completed() {
        let now = Timestamp::default();
        let mut done = action(State::Completed);
        done.destination_id = Some("R-1".into());
        let p = planned(&done, &ManualCommand::Recreate, now).unwrap();
        assert_eq!((p.event, p.from, p.to), (Event::Recreated, State::Completed, State::Completed));
        assert_eq!(apply(&mut done, &ManualCommand::Recreate, p, now).unwrap(), None);
        assert_eq!((done.state, done.destination_id.as_deref()), (State::Completed, Some("R-1")));
        let again = recreate_action(&done, 2, now).unwrap();
        assert_eq!(
            (again.key.as_str(), again.state, again.destination_id.as_ref()),
            ("k#recreate-2", State::Pending, None)
        );
        assert_eq!((again.payload.fingerprint(), again.updates.as_ref()), (done.payload.fingerprint(), None));

        let refused = planned(&action(State::Pending), &ManualCommand::Recreate, now).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "cannot re-create k: it is pending; re-create is allowed only when it is completed"
        );
        let mut update = action(State::Completed);
        update.updates = Some(ActionKey::parse("j").unwrap());
        let refused = planned(&update, &ManualCommand::Recreate, now).unwrap_err();
        assert!(matches!(refused, Refusal::RecreateOfUpdate { .. }), "{refused}");
        let waiting = proposed(action(State::Completed), r#"{"q":2}"#);
        let refused = planned(&waiting, &ManualCommand::Recreate, now).unwrap_err();
        assert!(matches!(refused, Refusal::ProposalWaiting { .. }), "{refused}");
        let mut long = action(State::Completed);
        long.key = ActionKey::parse(&"k".repeat(250)).unwrap();
        assert!(matches!(recreate_action(&long, 1, now), Err(Refusal::RecreateKeyRefused { .. })));
    }

    #[test]
    fn a_retry_that_could_write_twice_needs_the_persons_check() {
        let now = Timestamp::default();
        let mut unknown = action(State::Unknown);
        unknown.may_have_written = true;
        let blind = ClaimFacts { sent_under_claim: true, repeat_protected: false };
        let refused = plan(&unknown, &ManualCommand::Retry, now, blind, Confirmed::NONE, false).unwrap_err();
        assert!(matches!(refused, Refusal::MayWriteTwice { .. }), "{refused}");
        assert_eq!(refused.way_out(), Some(crate::domain::WayOut::ConfirmNotWritten));
        let checked = Confirmed { not_written: true, ..Confirmed::NONE };
        assert_eq!(plan(&unknown, &ManualCommand::Retry, now, blind, checked, false).unwrap().to, State::Pending);
        let recognised = ClaimFacts { repeat_protected: true, ..blind };
        assert!(plan(&unknown, &ManualCommand::Retry, now, recognised, Confirmed::NONE, false).is_ok());
        // Only a retry sends blind: resolving asks nothing more of the destination. A cancellation
        // would say nothing was done, so it needs the destination checked, whatever it recognises.
        let refused = plan(&unknown, &ManualCommand::Cancel, now, recognised, Confirmed::NONE, false).unwrap_err();
        assert!(matches!(refused, Refusal::CancelMayHaveWritten { .. }), "{refused}");
        assert_eq!(plan(&unknown, &ManualCommand::Cancel, now, blind, checked, false).unwrap().to, State::Cancelled);
        assert!(plan(&unknown, &ManualCommand::ResolveNotWritten, now, blind, Confirmed::NONE, false).is_ok());
        // Nothing can have been written: nothing to check.
        unknown.may_have_written = false;
        assert!(plan(&unknown, &ManualCommand::Retry, now, blind, Confirmed::NONE, false).is_ok());
    }
}
