//! The dialogs: what a command will do, worded for the person before it runs; its stages (a
//! destination id, a reason, the old worker's stop, a confirmation); and its answer.

use super::connection;
use super::effect::Effect;
use super::state::{
    BulkResult, Dialog, DialogStage, Failure, Mode, Model, NOT_WRITTEN_ANSWER, OLD_WORKER_STOPPED_ANSWER,
    marked_actions, text_field,
};
use crate::console::keys::CommandKind;
use crate::console::safe_text::SafeText;
use crate::domain::manual::{self, Confirmed, ManualCommand};
use crate::domain::{ActionKey, ActionRecord, ClaimFacts, Reason, Refusal, State};
use crate::error::Kind;
use crate::ledger::{ActionDetail, ManualRequest};
use ratatui::crossterm::event::{KeyCode, KeyEvent};

impl Dialog {
    /// Whether this command on this action asks whether the old worker stopped: the ledger
    /// refuses it without that confirmation.
    pub fn asks_old_worker_stopped(&self) -> bool {
        if !self.bulk.is_empty() {
            return !self.bulk_old_worker.is_empty();
        }
        manual_kind(self.command).is_some_and(|command| manual::needs_old_worker_stopped(&self.action, &command))
    }

    pub(super) fn old_worker_confirmed(&self) -> bool {
        self.old_worker_answer.trim() == OLD_WORKER_STOPPED_ANSWER
    }

    /// Whether this command asks whether the destination holds no record: the ledger refuses a
    /// retry that could create a second effect without that confirmation (rule 6).
    pub fn asks_not_written(&self) -> bool {
        !self.not_written_keys.is_empty()
    }

    pub(super) fn not_written_confirmed(&self) -> bool {
        self.not_written_answer.trim() == NOT_WRITTEN_ANSWER
    }
}

/// The keys of `actions` whose `kind` of command could create a second effect, decided by the
/// rule the ledger applies ([`manual::needs_not_written`]) from the destinations as configured
/// here; the ledger decides again, locked, when it runs.
fn needing_not_written(model: &Model, kind: CommandKind, actions: &[ActionRecord]) -> Vec<String> {
    let Some(command) = manual_kind(kind) else { return Vec::new() };
    actions
        .iter()
        .filter(|a| {
            let now = model.now.unwrap_or(a.updated_at);
            manual::needs_not_written(a, &command, model.destinations.retry_recognised(a, now))
        })
        .map(|a| a.key.to_string())
        .collect()
}

/// The warning a cancellation of an action that may have been written shows before the reason
/// is typed: a cancelled action says nothing was done, and the effect may exist.
const MAY_HAVE_WRITTEN: &str = "An earlier request may have written this action: cancelling says nothing was done. \
                                Check the destination; resolve it as completed if it holds the record.";

/// The warning a retry that could create a second effect shows before the reason is typed.
const MAY_WRITE_TWICE: &str =
    "A second record is possible: an earlier request may have written, and the destination cannot tell a repeat.";

/// Why the console does not offer a command on an action.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotOffered {
    /// The ledger would refuse it in the action's state.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// A lookup needs the destinations' configuration, which the console was started without.
    #[error("look up needs the destinations' configuration: start review with --config")]
    NoConfiguration,
    /// The action's destination is not in the configuration.
    #[error("cannot look up {key}: its destination {destination} is not in the configuration")]
    NotConfigured { key: ActionKey, destination: String },
    /// The action's destination declares no lookup.
    #[error("cannot look up {key}: destination {destination} declares no lookup")]
    NoLookup { key: ActionKey, destination: String },
}

/// Whether the action's destination, as configured, can look a record up: `l` is offered only then.
pub fn lookup_offered(model: &Model, action: &ActionRecord) -> Result<(), NotOffered> {
    if model.configured.is_empty() {
        return Err(NotOffered::NoConfiguration);
    }
    let destination = model.destinations.destination_name(action).unwrap_or("(none)").to_owned();
    match model.destinations.of(action) {
        None => Err(NotOffered::NotConfigured { key: action.key.clone(), destination }),
        Some(capabilities) if !capabilities.lookup => {
            Err(NotOffered::NoLookup { key: action.key.clone(), destination })
        }
        Some(_) => Ok(()),
    }
}

/// A destination id the evidence already names, to offer when a person resolves an action as
/// completed: the latest lookup's record id, else the id the latest response names (its
/// evidence, or the destination's configured id pointer on the stored body, e.g. a 409 that
/// names the existing record).
pub fn named_destination_id(model: &Model, detail: &ActionDetail) -> Option<String> {
    if let Some(id) = detail.lookups.iter().rev().find_map(|l| l.destination_id.clone()) {
        return Some(id);
    }
    let pointer = model.destinations.destination_name(&detail.action).and_then(|d| model.id_pointers.get(d));
    detail.attempts.iter().rev().find_map(|attempt| {
        attempt.evidence.destination_id.clone().or_else(|| {
            let body = attempt.evidence.body.as_deref()?;
            crate::destination::id_in_body(body, pointer?)
        })
    })
}

/// What a takeover of this action will come to, decided by the same rule the ledger applies
/// (rule 5: [`ClaimFacts::takeover_is_safe`] through [`manual::plan`]) from the facts as the
/// detail shows them; the ledger decides again, locked, when it runs.
fn takeover_outcome(model: &Model, detail: &ActionDetail) -> Result<String, Refusal> {
    let action = &detail.action;
    let now = model.now.unwrap_or(action.updated_at);
    let facts = ClaimFacts {
        sent_under_claim: detail.sent_under_current_claim(),
        repeat_protected: model.destinations.protects_against_repeat(action, now),
    };
    let planned = manual::plan(action, &ManualCommand::Takeover, now, facts, Confirmed::ALL, false)?;
    Ok(format!("This action will go to {}: {}.", planned.to, facts.takeover_why()))
}

/// What a command will do, for the dialog; or why it cannot run.
fn describe(model: &Model, kind: CommandKind, action: &ActionRecord) -> Result<Vec<String>, NotOffered> {
    let key = &action.key;
    let now = model.now.unwrap_or(action.updated_at);
    let same_key = "The original key is kept.".to_owned();
    // The dialog asks whether the old worker stopped where that is needed, so the description
    // plans as if the person will confirm it; the ledger refuses if they do not.
    let shown = shown_proposal(model, action);
    // Rejecting the proposal shown while others wait keeps the action waiting for them.
    let others_wait = shown.as_ref().is_some_and(|s| s.waiting > 1);
    let plan = |command: &ManualCommand| {
        let remain = others_wait && matches!(command, ManualCommand::Reject { .. });
        manual::plan(action, command, now, ClaimFacts::WORST_CASE, Confirmed::ALL, remain)
    };
    Ok(match kind {
        CommandKind::Lookup => {
            lookup_offered(model, action)?;
            vec![
                format!("Look up {key} at {} now.", action.destination.as_deref().unwrap_or("its destination")),
                if action.state == State::Unknown {
                    "Found and matching: completed. Nothing there: back to pending. Different: conflict.".to_owned()
                } else {
                    format!(
                        "It is {}: the lookup reports what the destination holds, kept as evidence; it stays {}.",
                        action.state, action.state
                    )
                },
            ]
        }
        CommandKind::Takeover => {
            plan(&ManualCommand::Takeover)?;
            let outcome = match model.detail.as_deref().filter(|d| d.action.key == action.key) {
                Some(detail) => takeover_outcome(model, detail)?,
                None => "Reading what was sent under its claim…".to_owned(),
            };
            vec![
                format!(
                    "Take over {key} from {} under ownership version {}.",
                    action.claimed_by.as_deref().unwrap_or("its worker"),
                    action.ownership_version + 1
                ),
                outcome,
                same_key,
            ]
        }
        _ => {
            let Some(command) = manual_command(model, kind, action, String::new()) else { return Ok(Vec::new()) };
            let planned = plan(&command)?;
            let change = if planned.from == planned.to {
                format!("{key} stays {}.", planned.from)
            } else {
                format!("{key}: {} -> {}.", planned.from, planned.to)
            };
            let what = match kind {
                CommandKind::Retry => "Retry it under the same key.".to_owned(),
                CommandKind::ResolveCompleted => "Record that the destination has it, with the id you give.".to_owned(),
                CommandKind::ResolveNotWritten => {
                    "Record that the destination has no record: it runs again.".to_owned()
                }
                CommandKind::Cancel => "Cancel it: it must not happen.".to_owned(),
                CommandKind::Approve if planned.from == State::Completed => format!(
                    "Approve the proposed payload: the update action {key}#update-{} changes the record at the \
                     destination, and the approved payload becomes this one once that update completes.",
                    model
                        .detail
                        .as_deref()
                        .filter(|d| d.action.key == action.key)
                        .map_or(action.payload_revision + 1, ActionDetail::next_update_number)
                ),
                CommandKind::Approve => match &shown {
                    Some(s) if s.waiting > 1 => format!(
                        "Approve proposal {} of {} ({}) in place of the approved payload; the other {} are rejected.",
                        s.index + 1,
                        s.waiting,
                        s.fingerprint,
                        s.waiting - 1
                    ),
                    _ => "Approve the proposed payload in place of the approved one.".to_owned(),
                },
                CommandKind::Reject => match &shown {
                    Some(s) if s.waiting > 1 => format!(
                        "Reject proposal {} of {} ({}); the approved payload stays and the other {} still wait.",
                        s.index + 1,
                        s.waiting,
                        s.fingerprint,
                        s.waiting - 1
                    ),
                    _ => "Reject the proposed payload; the approved one stays.".to_owned(),
                },
                CommandKind::Assign => format!("Assign it to {}.", model.owner.as_str()),
                CommandKind::Acknowledge => format!(
                    "Acknowledge its {} late result(s): results from an obsolete owner, which changed nothing.",
                    action.late_results
                ),
                CommandKind::Takeover | CommandKind::Lookup => String::new(),
            };
            let mut lines = vec![what, change, same_key];
            lines.extend(confirmations_asked(model, kind, action, &command));
            lines
        }
    })
}

/// What the dialog will ask the person to confirm, said before the reason is typed.
fn confirmations_asked(
    model: &Model,
    kind: CommandKind,
    action: &ActionRecord,
    command: &ManualCommand,
) -> Vec<String> {
    let mut lines = Vec::new();
    if !needing_not_written(model, kind, std::slice::from_ref(action)).is_empty() {
        lines.push(if kind == CommandKind::Cancel { MAY_HAVE_WRITTEN } else { MAY_WRITE_TWICE }.to_owned());
    }
    if manual::needs_old_worker_stopped(action, command) {
        lines.push(
            "Its expired claim could not be taken over safely: the old worker may still act. You will be asked to \
             confirm that it stopped."
                .to_owned(),
        );
    }
    lines
}

/// The kind of ledger command behind a console command, whatever its arguments.
fn manual_kind(kind: CommandKind) -> Option<ManualCommand> {
    match kind {
        CommandKind::ResolveCompleted => Some(ManualCommand::ResolveCompleted { destination_id: String::new() }),
        CommandKind::Assign => Some(ManualCommand::Assign { to: String::new() }),
        other => manual_command_with(other, String::new(), String::new()),
    }
}

/// The ledger command behind a console command; `None` for a lookup, which is not one. While
/// several proposals wait on the open action, approve and reject name the one shown.
fn manual_command(
    model: &Model,
    kind: CommandKind,
    action: &ActionRecord,
    destination_id: String,
) -> Option<ManualCommand> {
    let named = shown_proposal(model, action).filter(|s| s.waiting > 1).map(|s| s.full_fingerprint);
    Some(match manual_command_with(kind, destination_id, model.owner.as_str().to_owned())? {
        ManualCommand::Approve { .. } => ManualCommand::Approve { proposal: named },
        ManualCommand::Reject { .. } => ManualCommand::Reject { proposal: named },
        other => other,
    })
}

/// The proposal shown in the open detail of `action`, among those waiting.
#[derive(Debug)]
struct ShownProposal {
    index: usize,
    waiting: usize,
    fingerprint: String,
    full_fingerprint: String,
}

fn shown_proposal(model: &Model, action: &ActionRecord) -> Option<ShownProposal> {
    let detail = model.detail.as_ref().filter(|d| d.action.key == action.key)?;
    let waiting: Vec<_> = detail.waiting_proposals().collect();
    let index = model.proposal_shown.min(waiting.len().checked_sub(1)?);
    let fingerprint = waiting[index].payload.fingerprint();
    Some(ShownProposal {
        index,
        waiting: waiting.len(),
        fingerprint: fingerprint.short().to_owned(),
        full_fingerprint: fingerprint.as_str().to_owned(),
    })
}

fn manual_command_with(kind: CommandKind, destination_id: String, owner: String) -> Option<ManualCommand> {
    Some(match kind {
        CommandKind::Retry => ManualCommand::Retry,
        CommandKind::ResolveCompleted => ManualCommand::ResolveCompleted { destination_id },
        CommandKind::ResolveNotWritten => ManualCommand::ResolveNotWritten,
        CommandKind::Cancel => ManualCommand::Cancel,
        CommandKind::Approve => ManualCommand::Approve { proposal: None },
        CommandKind::Reject => ManualCommand::Reject { proposal: None },
        // The ledger decides, from the claim as locked, whether it may run again (rule 5 in
        // docs/RULES.md).
        CommandKind::Takeover => ManualCommand::Takeover,
        CommandKind::Assign => ManualCommand::Assign { to: owner },
        CommandKind::Acknowledge => ManualCommand::Acknowledge,
        CommandKind::Lookup => return None,
    })
}

/// The commands that apply to an action now, for the footer.
pub fn applicable_commands(model: &Model, action: &ActionRecord) -> Vec<CommandKind> {
    CommandKind::ALL.into_iter().filter(|kind| describe(model, *kind, action).is_ok()).collect()
}

pub(super) fn open_dialog(model: &mut Model, kind: CommandKind) -> Vec<Effect> {
    let Some(action) = model.selected_action().cloned() else {
        model.refuse("nothing selected: choose an action first");
        return Vec::new();
    };
    match describe(model, kind, &action) {
        Err(refusal) => model.refuse(refusal.to_string()),
        Ok(description) => {
            let stage =
                if kind == CommandKind::ResolveCompleted { DialogStage::DestinationId } else { DialogStage::Reason };
            let not_written_keys = needing_not_written(model, kind, std::slice::from_ref(&action));
            let mut dialog = Dialog {
                command: kind,
                action,
                description,
                stage,
                destination_id: String::new(),
                reason: String::new(),
                old_worker_answer: String::new(),
                not_written_answer: String::new(),
                bulk: Vec::new(),
                bulk_old_worker: Vec::new(),
                not_written_keys,
                evidence_request: None,
                offered_id: false,
            };
            // A takeover's outcome and a destination id the evidence names come from the detail:
            // the open one, or one read for the dialog.
            let mut effects = Vec::new();
            if matches!(kind, CommandKind::Takeover | CommandKind::ResolveCompleted) {
                if let Some(detail) = model.detail.clone().filter(|d| d.action.key == dialog.action.key) {
                    with_evidence(model, &mut dialog, &detail);
                } else {
                    let effect = model.load_detail(dialog.action.key.clone());
                    dialog.evidence_request = Some(model.detail_request);
                    effects.push(effect);
                }
            }
            model.mode = Mode::Dialog(Box::new(dialog));
            return effects;
        }
    }
    Vec::new()
}

/// Completes a dialog from the action's detail: the takeover's outcome, a destination id to
/// offer.
fn with_evidence(model: &Model, dialog: &mut Dialog, detail: &ActionDetail) {
    match dialog.command {
        CommandKind::Takeover => {
            let outcome = takeover_outcome(model, detail).unwrap_or_else(|refusal| refusal.to_string());
            if let Some(line) = dialog.description.iter_mut().find(|l| l.starts_with("Reading what was sent")) {
                *line = outcome;
            }
        }
        CommandKind::ResolveCompleted if dialog.destination_id.is_empty() => {
            if let Some(id) = named_destination_id(model, detail) {
                dialog.description.push(format!("The evidence names {id}: Enter takes it, typing replaces it."));
                dialog.destination_id = id;
                dialog.offered_id = true;
            }
        }
        _ => {}
    }
}

fn close_dialog(model: &mut Model) {
    model.mode = if model.detail.is_some() { Mode::Detail } else { Mode::List };
}

pub(super) fn on_dialog_key(model: &mut Model, key: KeyEvent) -> Vec<Effect> {
    let Mode::Dialog(dialog) = &mut model.mode else { return Vec::new() };
    match (dialog.stage, key.code) {
        (DialogStage::Running, _) => Vec::new(),
        (_, KeyCode::Esc) | (DialogStage::Confirm, KeyCode::Char('n' | 'N')) => {
            let verb = dialog.command.label();
            close_dialog(model);
            model.info(format!("{verb}: cancelled, nothing changed"));
            Vec::new()
        }
        (
            DialogStage::DestinationId | DialogStage::Reason | DialogStage::OldWorkerStopped | DialogStage::NotWritten,
            KeyCode::Char(c),
        ) => {
            if dialog.stage == DialogStage::DestinationId && std::mem::take(&mut dialog.offered_id) {
                dialog.destination_id.clear();
            }
            if let Some(field) = text_field(model) {
                field.push(c);
            }
            Vec::new()
        }
        (
            DialogStage::DestinationId | DialogStage::Reason | DialogStage::OldWorkerStopped | DialogStage::NotWritten,
            KeyCode::Backspace,
        ) => {
            if let Some(field) = text_field(model) {
                field.pop();
            }
            Vec::new()
        }
        (DialogStage::DestinationId, KeyCode::Enter) => {
            match crate::domain::input::Label::parse("destination id", &dialog.destination_id) {
                Ok(_) => dialog.stage = DialogStage::Reason,
                Err(problem) => model.error(problem.to_string()),
            }
            Vec::new()
        }
        (DialogStage::Reason, KeyCode::Enter) => {
            match Reason::parse(&dialog.reason) {
                Ok(_) if dialog.asks_old_worker_stopped() => dialog.stage = DialogStage::OldWorkerStopped,
                Ok(_) if dialog.asks_not_written() => dialog.stage = DialogStage::NotWritten,
                Ok(_) => dialog.stage = DialogStage::Confirm,
                Err(problem) => model.error(problem.to_string()),
            }
            Vec::new()
        }
        (DialogStage::OldWorkerStopped, KeyCode::Enter) => {
            if dialog.old_worker_confirmed() {
                dialog.stage = if dialog.asks_not_written() { DialogStage::NotWritten } else { DialogStage::Confirm };
            } else {
                model.error(format!(
                    "type {OLD_WORKER_STOPPED_ANSWER:?} once you have checked that the old worker can no longer act, \
                     or Esc to cancel"
                ));
            }
            Vec::new()
        }
        (DialogStage::NotWritten, KeyCode::Enter) => {
            if dialog.not_written_confirmed() {
                dialog.stage = DialogStage::Confirm;
            } else {
                model.error(format!(
                    "type {NOT_WRITTEN_ANSWER:?} once you have checked that the destination holds no record of it, or \
                     Esc to cancel"
                ));
            }
            Vec::new()
        }
        (DialogStage::Confirm, KeyCode::Char('y' | 'Y')) => confirm(model),
        _ => Vec::new(),
    }
}

fn confirm(model: &mut Model) -> Vec<Effect> {
    // The ledger went away while the dialog was open: what was typed is kept for when it is back.
    if connection::hold_back(model, " (the dialog stays open: y once it is back, or Esc)") {
        return Vec::new();
    }
    let Mode::Dialog(dialog) = &mut model.mode else { return Vec::new() };
    let Ok(reason) = Reason::parse(&dialog.reason) else { return Vec::new() };
    dialog.stage = DialogStage::Running;
    if !dialog.bulk.is_empty() {
        let (kind, actions) = (dialog.command, dialog.bulk.clone());
        // Confirmed for the keys the dialog named, through the same ledger command as one action.
        let stopped: Vec<String> =
            if dialog.old_worker_confirmed() { dialog.bulk_old_worker.clone() } else { Vec::new() };
        let not_written: Vec<String> =
            if dialog.not_written_confirmed() { dialog.not_written_keys.clone() } else { Vec::new() };
        model.info(format!("{} {}: working…", kind.label(), marked_actions(actions.len())));
        // Bulk commands never approve or reject, so no action's shown proposal is named.
        let Some(first) = actions.first() else { return Vec::new() };
        let Some(command) = manual_command(model, kind, first, String::new()) else { return Vec::new() };
        let requests = actions
            .into_iter()
            .map(|action| ManualRequest {
                old_worker_stopped: stopped.iter().any(|k| k == action.key.as_str()),
                confirmed_not_written: not_written.iter().any(|k| k == action.key.as_str()),
                key: action.key,
                person: model.owner.clone(),
                reason: reason.clone(),
                expect_version: Some(action.revision),
                command: command.clone(),
            })
            .collect();
        return vec![Effect::RunEach(requests)];
    }
    let (kind, action, destination_id) =
        (dialog.command, dialog.action.clone(), dialog.destination_id.trim().to_owned());
    let old_worker_stopped = dialog.asks_old_worker_stopped() && dialog.old_worker_confirmed();
    let confirmed_not_written = dialog.asks_not_written() && dialog.not_written_confirmed();
    model.info(format!("{} {}: working…", kind.label(), action.key));
    let Some(command) = manual_command(model, kind, &action, destination_id) else {
        return vec![Effect::Lookup {
            key: action.key,
            revision: action.revision,
            person: model.owner.clone(),
            reason,
        }];
    };
    vec![Effect::Run(ManualRequest {
        key: action.key,
        person: model.owner.clone(),
        reason,
        expect_version: Some(action.revision),
        command,
        old_worker_stopped,
        confirmed_not_written,
    })]
}

/// A detail read for the dialog open arrived: the dialog takes its evidence. `false` when the
/// detail was not read for it.
pub(super) fn on_evidence_loaded(model: &mut Model, id: u64, result: &Result<Box<ActionDetail>, Failure>) -> bool {
    let Mode::Dialog(dialog) = &model.mode else { return false };
    if dialog.evidence_request != Some(id) {
        return false;
    }
    let mut dialog = dialog.clone();
    dialog.evidence_request = None;
    match result {
        Ok(detail) => with_evidence(model, &mut dialog, detail),
        Err(failure) => model.error(format!("database: {}", failure.message)),
    }
    model.mode = Mode::Dialog(dialog);
    true
}

/// A command finished: what happened, or why it did not, in the words of its kind.
pub(super) fn on_command_done(model: &mut Model, result: Result<String, Failure>) -> Vec<Effect> {
    close_dialog(model);
    match result {
        Ok(text) => model.info(text),
        // Only a refusal is called one: a destination that cannot be reached failed.
        Err(failure) => model.did_not_run(failure.kind, failure.to_string()),
    }
    model.refresh()
}

/// Marked actions a bulk dialog lists by name.
const LISTED: usize = 5;

/// A bulk command on the marked actions: one reason, one confirmation; each action is still
/// checked by the ledger against the version the person saw.
pub(super) fn open_bulk_dialog(model: &mut Model, kind: CommandKind) -> Vec<Effect> {
    let actions: Vec<ActionRecord> = model.marks.values().cloned().collect();
    let Some(first) = actions.first().cloned() else { return Vec::new() };
    let mut description = vec![format!(
        "{} {}, each in its own transaction, checked against the version you saw, in your name:",
        capitalized(kind.label()),
        marked_actions(actions.len())
    )];
    let needing: Vec<String> = match manual_kind(kind) {
        Some(command) => actions
            .iter()
            .filter(|a| manual::needs_old_worker_stopped(a, &command))
            .map(|a| a.key.to_string())
            .collect(),
        None => Vec::new(),
    };
    for action in actions.iter().take(LISTED) {
        let line = match describe_one(model, kind, action) {
            Ok(change) => format!("{}: {change}", action.key),
            Err(refusal) => format!("{}: will be refused: {refusal}", action.key),
        };
        description.push(line);
    }
    if actions.len() > LISTED {
        description.push(format!("… and {} more; refused ones stay marked.", actions.len() - LISTED));
    }
    if !needing.is_empty() && needing.len() == actions.len() {
        description.push(format!(
            "{} held because an expired claim could not be taken over safely: the old worker may still act. You \
             will be asked once to confirm that it stopped, for them all.",
            if needing.len() == 1 { "It was".to_owned() } else { format!("All {} were", needing.len()) }
        ));
    } else if !needing.is_empty() {
        description.push(format!(
            "{} of them {} held because an expired claim could not be taken over safely: the old worker may still \
             act ({}). You will be asked once to confirm that it stopped, for them all.",
            needing.len(),
            if needing.len() == 1 { "was" } else { "were" },
            listed_keys(&needing)
        ));
    }
    let not_written_keys = needing_not_written(model, kind, &actions);
    if !not_written_keys.is_empty() && kind == CommandKind::Cancel {
        description.push(format!(
            "{} of {} may have been written by earlier requests: cancelling says nothing was done. Check the \
             destination; you will be asked once whether it holds none.",
            not_written_keys.len(),
            actions.len(),
        ));
    } else if !not_written_keys.is_empty() {
        description.push(format!(
            "{} of {} may create a second record: earlier requests may have written, and the destination cannot \
             tell a repeat. You will be asked once whether it holds none.",
            not_written_keys.len(),
            actions.len(),
        ));
    }
    if kind == CommandKind::Takeover {
        description.push(
            "Those that go to held need a retry afterwards, once you have confirmed that the old worker stopped."
                .to_owned(),
        );
    }
    model.mode = Mode::Dialog(Box::new(Dialog {
        command: kind,
        action: first,
        description,
        stage: DialogStage::Reason,
        destination_id: String::new(),
        reason: String::new(),
        old_worker_answer: String::new(),
        not_written_answer: String::new(),
        bulk: actions,
        bulk_old_worker: needing,
        not_written_keys,
        evidence_request: None,
        offered_id: false,
    }));
    Vec::new()
}

/// Keys for a sentence: all of up to [`LISTED`], else the first ones and how many more.
fn listed_keys(keys: &[String]) -> String {
    let shown = keys.iter().take(LISTED).cloned().collect::<Vec<_>>().join(", ");
    match keys.len().saturating_sub(LISTED) {
        0 => shown,
        more => format!("{shown} and {more} more"),
    }
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

/// One marked action's change, as the ledger's rule plans it.
fn describe_one(model: &Model, kind: CommandKind, action: &ActionRecord) -> Result<String, Refusal> {
    let now = model.now.unwrap_or(action.updated_at);
    let command = manual_command(model, kind, action, String::new()).unwrap_or(ManualCommand::Retry);
    if kind == CommandKind::Takeover {
        // What was sent under each claim is read by the ledger, locked, when it runs: said here
        // from the destination's declared protection alone.
        let protected = ClaimFacts { sent_under_claim: true, repeat_protected: true };
        manual::plan(action, &command, now, protected, Confirmed::NONE, false)?;
        return Ok(if model.destinations.protects_against_repeat(action, now) {
            "in_progress -> pending (the destination protects against a repeat)".to_owned()
        } else {
            "in_progress -> pending if nothing was sent under its claim, else held".to_owned()
        });
    }
    // Bulk commands never approve or reject, so no proposal is left deciding where they go.
    // As if the person confirms that the old worker stopped where the dialog asks it.
    let planned = manual::plan(action, &command, now, ClaimFacts::WORST_CASE, Confirmed::ALL, false)?;
    Ok(if planned.from == planned.to {
        format!("stays {}", planned.from)
    } else {
        format!("{} -> {}", planned.from, planned.to)
    })
}

/// A bulk command finished: every action done, refused or failed, listed; those not done stay
/// marked.
pub(super) fn on_each_done(
    model: &mut Model,
    verb: &'static str,
    results: Vec<(String, Result<String, Failure>)>,
) -> Vec<Effect> {
    close_dialog(model);
    let mut result =
        BulkResult { verb, done: Vec::new(), refused: Vec::new(), failed: Vec::new(), failed_kind: None, scroll: 0 };
    for (key, answer) in results {
        match answer {
            Ok(change) => {
                model.marks.remove(&key);
                result.done.push((SafeText::new(&key), SafeText::new(&change)));
            }
            Err(why) if why.kind == Kind::Refused => {
                result.refused.push((SafeText::new(&key), SafeText::new(&why.message)));
            }
            Err(why) => {
                result.failed_kind.get_or_insert(why.kind);
                result.failed.push((SafeText::new(&key), SafeText::new(&why.to_string())));
            }
        }
    }
    // A stable order whatever order they ran in: by key.
    result.done.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    result.refused.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    result.failed.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    let summary = format!("{}; the result lists each (Esc closes it)", result.summary());
    match result.failed_kind {
        Some(kind) => model.did_not_run(kind, format!("{summary}; those not done stay marked")),
        None if result.refused.is_empty() => model.info(summary),
        None => model.refuse(format!("{summary}; the refused ones stay marked")),
    }
    model.result = Some(Box::new(result));
    model.refresh()
}
