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
use crate::domain::{ActionKey, ActionRecord, ClaimFacts, Reason, Refusal, State, WayOut};
use crate::error::Kind;
use crate::ledger::{ActionDetail, DecisionFacts, ManualRequest};
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

/// What a command will do, for the dialog; or why it cannot run. `detail` is the action's, where
/// one was read: a takeover's outcome, the proposal `proposal` (among those waiting) an approval
/// or a rejection acts on, and an update's number come from it.
fn describe(
    model: &Model,
    kind: CommandKind,
    action: &ActionRecord,
    detail: Option<&ActionDetail>,
    proposal: usize,
) -> Result<Vec<String>, NotOffered> {
    let key = &action.key;
    let now = model.now.unwrap_or(action.updated_at);
    let same_key = "The original key is kept.".to_owned();
    let detail = detail.filter(|d| d.action.key == action.key);
    // The dialog asks whether the old worker stopped where that is needed, so the description
    // plans as if the person will confirm it; the ledger refuses if they do not.
    let shown = detail.and_then(|d| shown_in(d, proposal));
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
            let outcome = match detail {
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
            let Some(command) = manual_command(model, kind, String::new(), shown.as_ref()) else {
                return Ok(Vec::new());
            };
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
                    detail.map_or(action.payload_revision + 1, ActionDetail::next_update_number)
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
/// several proposals wait, approve and reject name the one `shown`.
fn manual_command(
    model: &Model,
    kind: CommandKind,
    destination_id: String,
    shown: Option<&ShownProposal>,
) -> Option<ManualCommand> {
    let named = shown.filter(|s| s.waiting > 1).map(|s| s.full_fingerprint.clone());
    Some(match manual_command_with(kind, destination_id, model.owner.as_str().to_owned())? {
        ManualCommand::Approve { .. } => ManualCommand::Approve { proposal: named },
        ManualCommand::Reject { .. } => ManualCommand::Reject { proposal: named },
        other => other,
    })
}

/// The proposal an approval or a rejection acts on, among those waiting.
#[derive(Debug)]
struct ShownProposal {
    index: usize,
    waiting: usize,
    fingerprint: String,
    full_fingerprint: String,
}

/// The proposal `index` (from 0, oldest first, kept in range) among those waiting in `detail`.
fn shown_in(detail: &ActionDetail, index: usize) -> Option<ShownProposal> {
    let waiting: Vec<_> = detail.waiting_proposals().collect();
    let index = index.min(waiting.len().checked_sub(1)?);
    let fingerprint = waiting[index].payload.fingerprint();
    Some(ShownProposal {
        index,
        waiting: waiting.len(),
        fingerprint: fingerprint.short().to_owned(),
        full_fingerprint: fingerprint.as_str().to_owned(),
    })
}

/// The open detail of `action`, if it is open.
fn open_detail<'m>(model: &'m Model, action: &ActionRecord) -> Option<&'m ActionDetail> {
    model.detail.as_deref().filter(|d| d.action.key == action.key)
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
    let detail = open_detail(model, action);
    CommandKind::ALL
        .into_iter()
        .filter(|kind| describe(model, *kind, action, detail, model.proposal_shown).is_ok())
        .collect()
}

/// The reason an assignment to oneself from the console is audited with: it asks for none.
const ASSIGNED_FROM_THE_CONSOLE: &str = "took it to work on from the review console";

pub(super) fn open_dialog(model: &mut Model, kind: CommandKind) -> Vec<Effect> {
    let Some(action) = model.selected_action().cloned() else {
        model.refuse("nothing selected: choose an action first");
        return Vec::new();
    };
    let detail = open_detail(model, &action).cloned().map(Box::new);
    match describe(model, kind, &action, detail.as_deref(), model.proposal_shown) {
        Err(refusal) => model.refuse(refusal.to_string()),
        // Taking an action for oneself changes nothing at the destination and anyone's `o`
        // takes it back: it runs at once, audited in the person's name with the console's reason.
        Ok(_) if kind == CommandKind::Assign => {
            model.info(format!("{} {}: working…", kind.label(), action.key));
            let Ok(reason) = Reason::parse(ASSIGNED_FROM_THE_CONSOLE) else { return Vec::new() };
            return vec![Effect::Run(ManualRequest {
                key: action.key,
                person: model.owner.clone(),
                reason,
                expect_version: Some(action.revision),
                command: ManualCommand::Assign { to: model.owner.as_str().to_owned() },
                old_worker_stopped: false,
                confirmed_not_written: false,
            })];
        }
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
                scroll: 0,
                facts: None,
                evidence: None,
                proposal: model.proposal_shown,
            };
            // A takeover's outcome, a destination id the evidence names and the proposals an
            // approval or a rejection chooses from come from the detail: the open one, or one
            // read for the dialog.
            let mut effects = Vec::new();
            if reads_evidence(kind) {
                if let Some(detail) = detail {
                    with_evidence(model, &mut dialog, &detail);
                } else {
                    let effect = model.load_detail(dialog.action.key.clone());
                    dialog.evidence_request = Some(model.detail_request);
                    if matches!(kind, CommandKind::Approve | CommandKind::Reject) {
                        dialog.proposal = 0;
                        dialog.description.push("Reading the proposals waiting…".to_owned());
                    }
                    effects.push(effect);
                }
            }
            model.mode = Mode::Dialog(Box::new(dialog));
            return effects;
        }
    }
    Vec::new()
}

/// Whether a command's dialog is completed from the action's detail.
fn reads_evidence(kind: CommandKind) -> bool {
    matches!(kind, CommandKind::Takeover | CommandKind::ResolveCompleted | CommandKind::Approve | CommandKind::Reject)
}

/// Completes a dialog from the action's detail: the takeover's outcome, a destination id to
/// offer, the proposals to choose from.
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
        CommandKind::Approve | CommandKind::Reject => {
            dialog.evidence = Some(Box::new(detail.clone()));
            reword_proposal(model, dialog);
        }
        _ => {}
    }
}

/// Words an approval or a rejection for the proposal chosen: what the command does, and what
/// that proposal changes, field by field.
fn reword_proposal(model: &Model, dialog: &mut Dialog) {
    let detail = dialog.evidence.as_deref();
    // The action as the detail read it: a proposal that arrived since changes its version, and
    // the ledger refuses a command on a version the person did not see.
    let action = detail.map_or_else(|| dialog.action.clone(), |d| d.action.clone());
    let mut lines = describe(model, dialog.command, &action, detail, dialog.proposal)
        .unwrap_or_else(|refusal| vec![refusal.to_string()]);
    if let Some(detail) = detail {
        lines.extend(proposal_lines(detail, dialog.proposal));
    }
    dialog.action = action;
    dialog.description = lines;
}

/// The proposal chosen among those waiting, and what it changes of the approved payload.
fn proposal_lines(detail: &ActionDetail, chosen: usize) -> Vec<String> {
    let waiting: Vec<_> = detail.waiting_proposals().collect();
    let Some(last) = waiting.len().checked_sub(1) else { return Vec::new() };
    let proposal = waiting[chosen.min(last)];
    let received = proposal.received_at.format("%Y-%m-%d %H:%M:%S");
    let fingerprint = proposal.payload.fingerprint().short();
    let mut lines = vec![if waiting.len() > 1 {
        format!(
            "Proposal {} of {}, {fingerprint} received {received} (Left/Right: another), changes:",
            chosen.min(last) + 1,
            waiting.len()
        )
    } else {
        format!("The proposal {fingerprint} received {received} changes:")
    }];
    let changes = detail.action.payload.changes_to(&proposal.payload);
    lines.extend(changes.changed.iter().map(|change| format!("  {change}")));
    lines.push(format!("  {} field(s) unchanged", changes.unchanged));
    lines
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
        (_, KeyCode::Up | KeyCode::Down | KeyCode::PageUp | KeyCode::PageDown | KeyCode::Home | KeyCode::End) => {
            let (max, page) = (model.scroll_limits.dialog, model.scroll_limits.dialog_page.max(1));
            let scroll = dialog.scroll.min(max);
            dialog.scroll = match key.code {
                KeyCode::Down => scroll.saturating_add(1),
                KeyCode::Up => scroll.saturating_sub(1),
                KeyCode::PageDown => scroll.saturating_add(page),
                KeyCode::PageUp => scroll.saturating_sub(page),
                KeyCode::Home => 0,
                _ => max,
            }
            .min(max);
            Vec::new()
        }
        (DialogStage::Reason, KeyCode::Left | KeyCode::Right | KeyCode::Tab | KeyCode::BackTab) => {
            choose_proposal(model, matches!(key.code, KeyCode::Right | KeyCode::Tab));
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

/// Left/Right (or Tab) in an approval's or a rejection's dialog: the next or previous of the
/// proposals waiting, round to the first; said when only one waits.
fn choose_proposal(model: &mut Model, forward: bool) {
    let Mode::Dialog(dialog) = &model.mode else { return };
    let waiting = dialog.evidence.as_deref().map_or(0, |d| d.waiting_proposals().count());
    if !matches!(dialog.command, CommandKind::Approve | CommandKind::Reject) || !dialog.bulk.is_empty() {
        return;
    }
    if waiting < 2 {
        model.info("only this proposal waits on this action");
        return;
    }
    let mut dialog = dialog.clone();
    let current = dialog.proposal.min(waiting - 1);
    dialog.proposal = if forward { (current + 1) % waiting } else { (current + waiting - 1) % waiting };
    reword_proposal(model, &mut dialog);
    model.mode = Mode::Dialog(dialog);
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
        // A bulk approval names no proposal: the ledger takes the only one waiting, and refuses
        // where several wait (the person opens that action to choose).
        let Some(command) = manual_command(model, kind, String::new(), None) else { return Vec::new() };
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
    let shown = dialog.evidence.as_deref().and_then(|detail| shown_in(detail, dialog.proposal));
    model.info(format!("{} {}: working…", kind.label(), action.key));
    let Some(command) = manual_command(model, kind, destination_id, shown.as_ref()) else {
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

/// Keys a sentence names before saying how many more.
const LISTED: usize = 5;

/// A bulk command on the marked actions: one reason, one confirmation; each action is still
/// checked by the ledger against the version the person saw. The dialog lists every marked action
/// with what will happen to it, once the ledger has read what each is decided from.
pub(super) fn open_bulk_dialog(model: &mut Model, kind: CommandKind) -> Vec<Effect> {
    let actions: Vec<ActionRecord> = model.marks.values().cloned().collect();
    let Some(first) = actions.first().cloned() else { return Vec::new() };
    let Some(command) = manual_kind(kind) else { return Vec::new() };
    let needing: Vec<String> =
        actions.iter().filter(|a| manual::needs_old_worker_stopped(a, &command)).map(|a| a.key.to_string()).collect();
    let not_written_keys = needing_not_written(model, kind, &actions);
    let load = model.load_facts(command, actions.clone());
    let mut dialog = Dialog {
        command: kind,
        action: first,
        description: Vec::new(),
        stage: DialogStage::Reason,
        destination_id: String::new(),
        reason: String::new(),
        old_worker_answer: String::new(),
        not_written_answer: String::new(),
        bulk: actions,
        bulk_old_worker: needing,
        not_written_keys,
        evidence_request: Some(model.detail_request),
        offered_id: false,
        scroll: 0,
        facts: None,
        evidence: None,
        proposal: 0,
    };
    dialog.description = bulk_description(model, &dialog);
    model.mode = Mode::Dialog(Box::new(dialog));
    vec![load]
}

/// What a bulk dialog says: the command, how many actions each outcome has, what it will ask
/// once for them all, then every marked action with what will happen to it, by outcome.
fn bulk_description(model: &Model, dialog: &Dialog) -> Vec<String> {
    let (kind, actions) = (dialog.command, &dialog.bulk);
    let mut description = vec![format!(
        "{} {}, each in its own transaction, checked against the version you saw, in your name:",
        capitalized(kind.label()),
        marked_actions(actions.len())
    )];
    let mut groups: std::collections::BTreeMap<Outcome, Vec<String>> = std::collections::BTreeMap::new();
    for action in actions {
        let facts = dialog.facts.as_ref().and_then(|facts| facts.get(&action.key));
        let (outcome, line) = bulk_line(model, kind, action, facts);
        groups.entry(outcome).or_default().push(line);
    }
    description.push(if dialog.facts.is_none() {
        "Reading what each will be decided from…".to_owned()
    } else {
        groups.iter().map(|(outcome, lines)| outcome.counted(kind, lines.len())).collect::<Vec<_>>().join(", ")
    });
    let needing = &dialog.bulk_old_worker;
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
            listed_keys(needing)
        ));
    }
    let not_written_keys = &dialog.not_written_keys;
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
    for (outcome, lines) in groups {
        description.push(String::new());
        description.push(format!("{}:", capitalized(&outcome.counted(kind, lines.len()))));
        description.extend(lines.into_iter().map(|line| format!("  {line}")));
    }
    description
}

/// Where a marked action goes in a bulk dialog's list, in the order the list shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Moves(State),
    Stays(State),
    /// The command may create a second record (a retry), or record nothing done where something
    /// may have been written (a cancellation): the dialog asks once whether the destination
    /// holds none.
    MayHaveWritten,
    /// What it is decided from is still being read.
    Reading,
    Refused,
}

impl Outcome {
    /// "12 to pending", as the counts and the group's heading say it.
    fn counted(self, kind: CommandKind, n: usize) -> String {
        match self {
            Self::Moves(state) => format!("{n} to {state}"),
            Self::Stays(state) => format!("{n} stay {state}"),
            Self::MayHaveWritten if kind == CommandKind::Cancel => format!("{n} may have been written"),
            Self::MayHaveWritten => format!("{n} may create a second record"),
            Self::Reading => format!("{n} being read"),
            Self::Refused => format!("{n} will be refused (refused ones stay marked)"),
        }
    }
}

/// One marked action's outcome and line, decided by the rule the ledger applies
/// ([`manual::decide`]) from what the ledger read for it; the ledger decides again, locked, when
/// it runs. As if the person confirms what the dialog asks (the old worker's stop, no record).
fn bulk_line(
    model: &Model,
    kind: CommandKind,
    action: &ActionRecord,
    facts: Option<&DecisionFacts>,
) -> (Outcome, String) {
    let key = &action.key;
    let (Some(facts), Some(command)) = (facts, manual_command(model, kind, String::new(), None)) else {
        return (Outcome::Reading, format!("{key}: reading…"));
    };
    let now = model.now.unwrap_or(action.updated_at);
    match manual::decide(action, &command, now, facts.claim, Confirmed::ALL, facts.waiting.clone()) {
        Err(refusal) => {
            let choose = if refusal.way_out() == Some(WayOut::NameProposal) { "; open it to choose" } else { "" };
            (Outcome::Refused, format!("{key}: {refusal}{choose}"))
        }
        Ok((choice, planned)) => {
            let mut line = if planned.from == planned.to {
                format!("{key}: stays {}", planned.from)
            } else {
                format!("{key}: {} -> {}", planned.from, planned.to)
            };
            let fingerprints = |proposals: &[crate::domain::ProposalRecord]| {
                proposals.iter().map(|p| p.payload.fingerprint().short().to_owned()).collect::<Vec<_>>().join(", ")
            };
            match kind {
                CommandKind::Takeover => line = format!("{line}: {}", facts.claim.takeover_why()),
                CommandKind::Approve => {
                    if let Some(approved) = &choice.approved {
                        line = format!("{line}, approving {}", approved.payload.fingerprint().short());
                    }
                }
                CommandKind::Reject if !choice.rejected.is_empty() => {
                    line = format!("{line}, rejecting {}", fingerprints(&choice.rejected));
                }
                CommandKind::Acknowledge => line = format!("{line}, {} late result(s)", action.late_results),
                _ => {}
            }
            let outcome = if manual::needs_not_written(action, &command, facts.claim.repeat_protected) {
                Outcome::MayHaveWritten
            } else if planned.from == planned.to {
                Outcome::Stays(planned.from)
            } else {
                Outcome::Moves(planned.to)
            };
            (outcome, line)
        }
    }
}

/// What a bulk command's actions are decided from arrived: the dialog lists each outcome, if it
/// is the dialog it was read for.
pub(super) fn on_facts_loaded(
    model: &mut Model,
    id: u64,
    result: Result<std::collections::BTreeMap<ActionKey, DecisionFacts>, Failure>,
) {
    let Mode::Dialog(dialog) = &model.mode else { return };
    if dialog.evidence_request != Some(id) {
        return;
    }
    let mut dialog = dialog.clone();
    dialog.evidence_request = None;
    match result {
        Ok(facts) => {
            dialog.facts = Some(facts);
            dialog.description = bulk_description(model, &dialog);
        }
        Err(failure) => model.error(format!("database: {}", failure.message)),
    }
    model.mode = Mode::Dialog(dialog);
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
