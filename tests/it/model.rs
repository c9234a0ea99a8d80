//! Model-based test: random sequences of submissions, claims, attempts, results, heartbeats,
//! lease expiry (by moving the database clock), recoveries and manual commands, run against each
//! store and against a small reference model of the rules in docs/RULES.md, compared after
//! every step. Attempts and results go through the single and the batched APIs at random, and
//! batches of all of a worker's claims start and finish together. A purge (after two days of
//! database time) reduces every settled action without a proposal to its tombstone, which the
//! model then knows forever: replays and late results change nothing, and commands are refused.
//! Approving a new payload of a completed action records its update action (`KEY#update-N`),
//! which the model claims and finishes like any other; an approval after a send moves requests
//! to a derived idempotency key (`KEY#rev-N`), which the model expects too.
//! The worker pipeline itself (`worker::run`, draining) is one more operation: the model predicts
//! which expired claims it takes over or holds, which actions it claims and sends, how often, and
//! with what result, and the drain is compared with it down to each audit entry, each attempt,
//! each send the effect counted and the worker's summary.
//! Automations that act themselves go through the register too: they begin a key (the answer,
//! proceed, done, wait, review or cancelled, is the model's), renew their claim and report it.
//! Shrinking reduces any disagreement to a short sequence.
//!
//! `ACTIONLEDGER_MODEL_CASES` sets the number of cases (default 1,000 per store).

use crate::support;
use actionledger::Ledger;
use actionledger::domain::{
    ActionKey, AttemptOutcome, Capabilities, DestinationCatalog, Event, Evidence, ManualCommand, Person, PurgeRequest,
    RawSubmission, Reason, Refusal, State,
};
use actionledger::ledger::LedgerError;
use actionledger::ledger::{Begun, Claim, Finish, FinishReport, ManualRequest, Outcome, Report, StartedAttempt};
use actionledger::store::{ClaimScope, Store};
use actionledger::worker::{self, Effect, Stop, Summary, Work, WorkerOptions};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const LEASE: Duration = Duration::from_mins(1);
const KEYS: u8 = 4;
const WORKERS: u8 = 3;
/// Automations that perform actions themselves, through the register (begin, renew, finish).
const CALLERS: u8 = 2;
/// The worker id of the pipeline's runs.
const PIPELINE: &str = "pipeline";
/// How long a keyed destination recognises a repeated key: longer than any case's clock moves
/// (at most fifty purges of two days), so that rule 4 never holds an action here and the model
/// need not follow the window.
const KEY_RETENTION: Duration = Duration::from_hours(24 * 365);

#[derive(Debug, Clone)]
enum Op {
    Submit {
        key: u8,
        payload: u8,
    },
    Claim {
        worker: u8,
    },
    /// `batched`: through the batch API (one commit for many claims) with a batch of one.
    Start {
        worker: u8,
        batched: bool,
    },
    Finish {
        worker: u8,
        outcome: u8,
        batched: bool,
    },
    /// Starts attempts under all of a worker's claims in one batch (the newest claim per key).
    StartBatch {
        worker: u8,
    },
    /// Records one outcome for all of a worker's claims in one batch (the newest claim per key).
    FinishBatch {
        worker: u8,
        outcome: u8,
    },
    Heartbeat {
        worker: u8,
    },
    Expire,
    Recover {
        key: u8,
        protected: bool,
    },
    /// `confirm`: the person confirms that the old worker of an unsafe hold stopped.
    Manual {
        key: u8,
        command: u8,
        confirm: bool,
    },
    /// Two days pass, then a purge of what settled more than a day ago.
    Purge,
    /// An automation begins `key` through the register, with the approved payload (a new key's
    /// first): the ledger's answer (proceed, done, wait, review, cancelled) is the model's.
    Begin {
        caller: u8,
        key: u8,
    },
    /// The automation renews its newest claim through the register.
    Renew {
        caller: u8,
    },
    /// The automation reports its newest claim through the register: completed (0), not written
    /// for good (1), or unknown (3).
    Report {
        caller: u8,
        outcome: u8,
    },
    /// The worker pipeline (`worker::run`, draining) with `slots` send slots, for a destination
    /// that declares an idempotency key (`keyed`) or no protection against a repeat: it recovers
    /// the expired claims and performs everything claimable until nothing is. Each send answers
    /// `first`, and a send of an action this run sent before answers `then` (never a retry, so
    /// that the drain ends).
    Work {
        slots: u8,
        keyed: bool,
        first: u8,
        then: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..KEYS, 0..3u8).prop_map(|(key, payload)| Op::Submit { key, payload }),
        3 => (0..WORKERS).prop_map(|worker| Op::Claim { worker }),
        2 => (0..WORKERS, any::<bool>()).prop_map(|(worker, batched)| Op::Start { worker, batched }),
        3 => (0..WORKERS, 0..4u8, any::<bool>()).prop_map(|(worker, outcome, batched)| Op::Finish { worker, outcome, batched }),
        1 => (0..WORKERS).prop_map(|worker| Op::StartBatch { worker }),
        2 => (0..WORKERS, 0..4u8).prop_map(|(worker, outcome)| Op::FinishBatch { worker, outcome }),
        1 => (0..WORKERS).prop_map(|worker| Op::Heartbeat { worker }),
        1 => Just(Op::Expire),
        1 => (0..KEYS, any::<bool>()).prop_map(|(key, protected)| Op::Recover { key, protected }),
        3 => (0..KEYS, 0..8u8, any::<bool>()).prop_map(|(key, command, confirm)| Op::Manual { key, command, confirm }),
        1 => Just(Op::Purge),
        2 => (0..CALLERS, 0..KEYS).prop_map(|(caller, key)| Op::Begin { caller, key }),
        1 => (0..CALLERS).prop_map(|caller| Op::Renew { caller }),
        2 => (0..CALLERS, prop_oneof![Just(0u8), Just(1), Just(3)]).prop_map(|(caller, outcome)| Op::Report { caller, outcome }),
        2 => (1..=3u8, any::<bool>(), 0..4u8, prop_oneof![Just(0u8), Just(1), Just(3)])
            .prop_map(|(slots, keyed, first, then)| Op::Work { slots, keyed, first, then }),
    ]
}

/// An action of the model: a submitted key (revision 0), or the update action of that key that
/// carries payload revision N (`KEY#update-N`).
type Id = (u8, i64);

/// The reference model of one action.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::struct_excessive_bools, reason = "the model keeps each fact of the record it checks as its own flag")]
struct Modeled {
    state: State,
    ownership_version: i64,
    approved: u8,
    /// Every distinct proposal waiting, in the order proposed (rule 9: each is kept).
    proposed: Vec<u8>,
    /// Where a payload conflict returns when its proposal is rejected.
    resume: Option<State>,
    /// An attempt was started under the current claim.
    sent: bool,
    lease_expired: bool,
    destination_id: Option<String>,
    /// The approved payload's revision, from 1.
    payload_revision: i64,
    /// Attempts ever started: after one, a request may have gone out under the key.
    attempts: u32,
    /// The payload revision whose derived idempotency key requests carry, if not the key.
    derived_key: Option<i64>,
    /// Late results no person has acknowledged.
    late_results: i64,
    /// Held after an unsafe takeover: running it again needs the old worker confirmed stopped.
    old_worker_may_act: bool,
    /// Reduced to its tombstone: it never changes again.
    purged: bool,
    /// A request may have written (a success, an unknown outcome, a late result reporting a
    /// write, an attempt cut off by an expired claim), and no person has since resolved the action
    /// as not written: a failure then ends in `unknown`, not `failed` (rule 2).
    may_have_written: bool,
    /// Attempts numbered up to this one were resolved as not written by a person.
    resolved_through: i64,
    /// More than one attempt was started under one claim and only the newest reported: the
    /// others stay unfinished until a failure or a takeover records them as cut off.
    orphaned: bool,
}

impl Modeled {
    fn new(approved: u8) -> Self {
        Self {
            state: State::Pending,
            ownership_version: 0,
            approved,
            proposed: Vec::new(),
            resume: None,
            sent: false,
            lease_expired: false,
            destination_id: None,
            payload_revision: 1,
            attempts: 0,
            derived_key: None,
            late_results: 0,
            old_worker_may_act: false,
            purged: false,
            may_have_written: false,
            resolved_through: 0,
            orphaned: false,
        }
    }
}

#[derive(Debug, Default)]
struct Model {
    actions: BTreeMap<Id, Modeled>,
    /// Creation order: claims take the oldest pending action.
    order: Vec<Id>,
}

/// What the model expects of an automatic result that would make the action runnable again
/// while a payload is proposed: it waits in conflict instead.
fn settle(action: &mut Modeled, target: State) {
    if !action.proposed.is_empty() && matches!(target, State::Pending | State::Failed | State::Held) {
        action.state = State::Conflict;
        action.resume = Some(target);
    } else {
        action.state = target;
        action.resume = None;
    }
}

impl Model {
    fn submit(&mut self, key: u8, payload: u8) {
        let in_flight = self.update_in_flight(key, payload);
        match self.actions.get_mut(&(key, 0)) {
            None => {
                self.order.push((key, 0));
                self.actions.insert((key, 0), Modeled::new(payload));
            }
            Some(a) if a.approved == payload || a.proposed.contains(&payload) => {}
            // The new version an update action is still to perform is approved already.
            Some(a) if a.state == State::Completed && in_flight => {}
            // A changed payload for a purged key is not kept.
            Some(a) if a.purged => {}
            Some(a) => {
                a.proposed.push(payload);
                if matches!(a.state, State::Pending | State::Failed | State::Held) {
                    a.resume = Some(a.state);
                    a.state = State::Conflict;
                }
            }
        }
    }

    /// Whether an update action of `key` above its payload revision, not failed or cancelled,
    /// carries `payload`.
    fn update_in_flight(&self, key: u8, payload: u8) -> bool {
        let Some(original) = self.actions.get(&(key, 0)) else { return false };
        self.actions
            .range((key, original.payload_revision + 1)..(key, i64::MAX))
            .any(|(_, u)| u.approved == payload && !matches!(u.state, State::Failed | State::Cancelled))
    }

    /// The number of the next update action of `key`: after its payload revision and every
    /// earlier update of it.
    fn next_update(&self, key: u8) -> i64 {
        let revision = self.actions.get(&(key, 0)).map_or(1, |a| a.payload_revision);
        self.actions.range((key, 1)..(key, i64::MAX)).map(|((_, n), _)| *n).chain([revision]).max().unwrap_or(revision)
            + 1
    }

    /// An update action completed: the action it updates takes its payload on, unless purged or
    /// already at a later revision.
    fn take_on(&mut self, (key, number): Id) {
        if number == 0 {
            return;
        }
        let payload = self.actions[&(key, number)].approved;
        let Some(original) = self.actions.get_mut(&(key, 0)) else { return };
        if !original.purged && number > original.payload_revision {
            original.approved = payload;
            original.payload_revision = number;
        }
    }

    /// What the register answers an automation beginning `id` with its approved payload, and the
    /// claim it gets where it may proceed: claimed (a pending action, or an expired claim taken
    /// over because nothing was sent under it) with its attempt started; an expired claim under
    /// which something was sent is held (rule 5: this ledger knows no protection).
    fn begin(&mut self, id: Id) -> (&'static str, Option<i64>) {
        let a = self.actions.get_mut(&id).expect("begun actions exist");
        match a.state {
            State::Pending => {
                a.state = State::InProgress;
                a.ownership_version += 1;
                a.sent = false;
                a.lease_expired = false;
            }
            State::InProgress if !a.lease_expired => return ("wait", None),
            State::InProgress => {
                self.recover(id, false);
                if self.actions[&id].state != State::InProgress {
                    return ("review", None);
                }
            }
            State::Completed => return ("done", None),
            State::Cancelled => return ("cancelled", None),
            _ => return ("review", None),
        }
        self.started(id);
        ("proceed", Some(self.actions[&id].ownership_version))
    }

    fn claim(&mut self) -> Option<(Id, i64)> {
        let key = *self.order.iter().find(|k| self.actions[k].state == State::Pending)?;
        let a = self.actions.get_mut(&key)?;
        a.state = State::InProgress;
        a.ownership_version += 1;
        a.sent = false;
        a.lease_expired = false;
        Some((key, a.ownership_version))
    }

    /// An attempt started under the current claim; one started before it is left unreported.
    fn started(&mut self, key: Id) {
        let a = self.actions.get_mut(&key).expect("claimed");
        a.orphaned |= a.sent;
        a.sent = true;
        a.attempts += 1;
    }

    fn current(&self, key: Id, version: i64) -> bool {
        self.actions.get(&key).is_some_and(|a| a.state == State::InProgress && a.ownership_version == version)
    }

    fn finish(&mut self, key: Id, version: i64, outcome: u8) {
        let current = self.current(key, version);
        let a = self.actions.get_mut(&key).expect("claimed actions exist");
        if a.purged {
            return;
        }
        if current {
            a.lease_expired = false;
            match outcome {
                0 => {
                    a.state = State::Completed;
                    a.resume = None;
                    a.destination_id = Some(format!("D-{version}"));
                    a.may_have_written = true;
                    self.take_on(key);
                }
                // An earlier request may have written: this failure proves nothing about it.
                1 if a.may_have_written || a.orphaned => {
                    a.state = State::Unknown;
                    a.resume = None;
                    a.may_have_written = true;
                    a.orphaned = false;
                }
                1 => settle(a, State::Failed),
                2 => settle(a, State::Pending),
                _ => {
                    a.state = State::Unknown;
                    a.resume = None;
                    a.may_have_written = true;
                }
            }
            return;
        }
        // A late result: always listed for review. It contradicts the ledger when it names
        // another record than a completed action's, or reports a possible write (a success or an
        // unknown outcome) on an action not completed; then the action goes to conflict, unless
        // it is cancelled or already in conflict.
        a.late_results += 1;
        a.may_have_written |= outcome == 0 || outcome == 3;
        let contradicts = match a.state {
            State::Completed => outcome == 0 && a.destination_id.as_deref() != Some(&format!("D-{version}")),
            _ => outcome == 0 || outcome == 3,
        };
        if contradicts && !matches!(a.state, State::Cancelled | State::Conflict) {
            a.state = State::Conflict;
        }
    }

    fn recover(&mut self, id: Id, protected: bool) {
        let Some(a) = self.actions.get_mut(&id) else { return };
        if a.state != State::InProgress || !a.lease_expired {
            return;
        }
        // The attempts left unfinished are cut off: their requests may have been sent.
        a.may_have_written |= a.sent || a.orphaned;
        a.orphaned = false;
        if !a.sent || protected {
            a.ownership_version += 1;
            a.sent = false;
            a.lease_expired = false;
        } else {
            settle(a, State::Held);
            a.old_worker_may_act = true;
        }
    }

    /// One drain of the worker pipeline for a destination that protects against a repeat or not:
    /// every expired claim is taken over (and performed) or held as rule 5 says, then every
    /// claimable action is claimed and performed, oldest first, until none is. The `n`-th send of
    /// an action answers `first` if `n` is 1, else `then`.
    fn drain(&mut self, protected: bool, first: u8, then: u8) -> Drain {
        let mut drain =
            Drain { summary: Summary { worker: PIPELINE.to_owned(), ..Summary::default() }, ..Drain::default() };
        let expired: Vec<Id> = self
            .order
            .iter()
            .copied()
            .filter(|id| self.actions[id].state == State::InProgress && self.actions[id].lease_expired)
            .collect();
        for id in expired {
            self.recover(id, protected);
            let a = &self.actions[&id];
            if a.state == State::InProgress {
                drain.summary.recovered += 1;
                drain.entry(id, (Event::ClaimRecovered, State::InProgress, State::InProgress, a.ownership_version));
                self.perform(id, first, then, &mut drain);
            } else {
                drain.summary.held += 1;
                drain.entry(id, (Event::LeaseExpired, State::InProgress, a.state, a.ownership_version));
            }
        }
        while let Some((id, version)) = self.claim() {
            drain.summary.claimed += 1;
            drain.entry(id, (Event::Claimed, State::Pending, State::InProgress, version));
            self.perform(id, first, then, &mut drain);
        }
        drain
    }

    /// One send of the worker under the current claim of `id`, and its result recorded.
    fn perform(&mut self, id: Id, first: u8, then: u8, drain: &mut Drain) {
        let sends = drain.sends.entry(id).or_default();
        *sends += 1;
        let outcome = if *sends == 1 { first } else { then };
        let version = self.actions[&id].ownership_version;
        self.started(id);
        self.finish(id, version, outcome);
        let state = self.actions[&id].state;
        let event = match outcome {
            0 => Event::Completed,
            1 if state == State::Unknown => Event::OutcomeUnknown,
            1 => Event::Failed,
            2 => Event::RetryScheduled,
            _ => Event::OutcomeUnknown,
        };
        drain.entry(id, (event, State::InProgress, state, version));
        drain.attempts.entry(id).or_default().push((version, attempt_outcome(outcome)));
        let summary = &mut drain.summary;
        match state {
            State::Completed => summary.completed += 1,
            State::Pending => summary.retried += 1,
            State::Failed => summary.failed += 1,
            State::Unknown => summary.unknown += 1,
            State::Conflict => summary.conflict += 1,
            State::Held => summary.held += 1,
            State::InProgress | State::Cancelled => {}
        }
        // A completed update: the action it updates says so, whether it took the payload on or
        // had taken a later one on already, unless purged.
        if outcome == 0 && id.1 != 0 && !self.actions[&(id.0, 0)].purged {
            *drain.updates_applied.entry((id.0, 0)).or_default() += 1;
        }
    }

    /// Every settled action without a proposal or an unacknowledged late result, settled before the
    /// two days that just passed.
    fn purge(&mut self) {
        for a in self.actions.values_mut() {
            // An action a request may have written keeps its attempts unless it completed.
            let keeps_evidence = a.may_have_written && a.state != State::Completed;
            a.purged |= a.state.is_terminal() && a.proposed.is_empty() && a.late_results == 0 && !keeps_evidence;
            a.lease_expired |= a.state == State::InProgress;
        }
    }

    /// Returns whether the command is allowed.
    fn manual(&mut self, key: u8, command: u8, confirm: bool) -> bool {
        let Some(a) = self.actions.get_mut(&(key, 0)) else { return false };
        if a.purged {
            return false;
        }
        let s = a.state;
        let proposal = !a.proposed.is_empty();
        // Approve names no proposal here: it is refused while several wait.
        let one_proposal = a.proposed.len() == 1;
        let review = matches!(s, State::Failed | State::Unknown | State::Held | State::Conflict);
        // Retry, resolve as not written and approve run the action again: after an unsafe hold,
        // only with the old worker confirmed stopped.
        let may_run_again = !a.old_worker_may_act || confirm;
        if matches!(command, 0 | 2 | 4) && !may_run_again {
            return false;
        }
        // A retry after a possible write: this ledger knows no destination, so none recognises a
        // repeat (rule 6); only with the person's word that nothing was written, which it keeps.
        if command == 0 && a.may_have_written && !confirm {
            return false;
        }
        // A cancellation after a possible write: only with the person's word that the
        // destination holds nothing, and the action keeps the sign that it may have been written.
        if command == 3 && a.may_have_written && !confirm {
            return false;
        }
        match command {
            // retry
            0 if review && !proposal => {
                a.state = State::Pending;
                a.may_have_written = false;
            }
            // resolve as completed
            1 if review && !(proposal && s == State::Conflict) => {
                a.state = State::Completed;
                a.destination_id = Some("manual".to_owned());
            }
            // resolve as not written
            2 if matches!(s, State::Unknown | State::Held | State::Conflict) && !proposal => {
                a.state = State::Pending;
                a.may_have_written = false;
            }
            // cancel
            3 if matches!(s, State::Pending | State::Failed | State::Unknown | State::Held | State::Conflict) => {
                a.state = State::Cancelled;
                a.proposed.clear();
            }
            // approve: after a possible send, under a derived idempotency key
            4 if one_proposal && s == State::Conflict => {
                a.approved = a.proposed.pop().expect("checked");
                a.payload_revision += 1;
                if a.attempts > 0 {
                    a.derived_key = Some(a.payload_revision);
                }
                a.state = State::Pending;
            }
            // approve a new version of a completed action: it stays completed, and its update
            // action carries the new payload; the action takes it on once that update completed
            4 if one_proposal && s == State::Completed => {
                let payload = a.proposed.pop().expect("checked");
                let update = (key, self.next_update(key));
                self.order.push(update);
                self.actions.insert(update, Modeled::new(payload));
                return true;
            }
            // reject every proposal waiting: back where the action was, but never to `failed` once a
            // request may have written (rule 2)
            5 if proposal => {
                a.proposed.clear();
                if s == State::Conflict {
                    a.state = match a.resume {
                        Some(State::Failed) if a.may_have_written => State::Conflict,
                        resume => resume.unwrap_or(State::Conflict),
                    };
                }
            }
            // take over (the destination is not known to protect)
            6 if s == State::InProgress && a.lease_expired => {
                a.may_have_written |= a.sent || a.orphaned;
                a.orphaned = false;
                a.ownership_version += 1;
                a.lease_expired = false;
                settle(a, if a.sent { State::Held } else { State::Pending });
                a.old_worker_may_act |= a.sent;
                return true;
            }
            // acknowledge the late results
            7 if a.late_results > 0 => {
                a.late_results = 0;
                return true;
            }
            _ => return false,
        }
        if a.state != State::Conflict {
            a.resume = None;
        }
        if matches!(command, 0 | 2 | 4) {
            a.old_worker_may_act = false;
        }
        true
    }
}

fn manual_command(n: u8) -> ManualCommand {
    match n {
        0 => ManualCommand::Retry,
        1 => ManualCommand::ResolveCompleted { destination_id: "manual".into() },
        2 => ManualCommand::ResolveNotWritten,
        3 => ManualCommand::Cancel,
        4 => ManualCommand::Approve { proposal: None },
        5 => ManualCommand::Reject { proposal: None },
        6 => ManualCommand::Takeover,
        _ => ManualCommand::Acknowledge,
    }
}

fn outcome(n: u8, version: i64) -> Report {
    let outcome = match n {
        0 => Outcome::Completed { destination_id: format!("D-{version}") },
        1 => Outcome::Failed { permanent: true },
        2 => Outcome::RetryLater { after: Duration::ZERO },
        _ => Outcome::Unknown,
    };
    Report { outcome, error: None, evidence: Evidence::default() }
}

/// One worker's claims, newest last, with the attempt started under each.
type Held = Vec<(Id, Claim, Option<StartedAttempt>)>;

/// The positions of the newest claim on each key: a batch names each key once.
fn newest_per_key(held: &Held) -> Vec<usize> {
    let mut seen = std::collections::BTreeSet::new();
    let mut picked: Vec<usize> = (0..held.len()).rev().filter(|&i| seen.insert(held[i].0)).collect();
    picked.reverse();
    picked
}

/// An audit entry as the model predicts it: event, from, to, ownership version.
type Entry = (Event, State, State, i64);

/// What one drain of the worker pipeline is expected to do.
#[derive(Debug, Default)]
struct Drain {
    /// Sends per action, as the effect counts them.
    sends: BTreeMap<Id, u32>,
    /// The audit entries the worker appends to each action, in order, but for `UpdateApplied`.
    entries: BTreeMap<Id, Vec<Entry>>,
    /// `UpdateApplied` entries per original: an update's completion runs beside its original's
    /// own work, so where they fall among its entries, and the state and version they show,
    /// depend on timing; only their number is predicted.
    updates_applied: BTreeMap<Id, usize>,
    /// The attempts the worker adds to each action: ownership version and outcome.
    attempts: BTreeMap<Id, Vec<(i64, AttemptOutcome)>>,
    summary: Summary,
}

impl Drain {
    fn entry(&mut self, id: Id, entry: Entry) {
        self.entries.entry(id).or_default().push(entry);
    }
}

fn attempt_outcome(n: u8) -> AttemptOutcome {
    match n {
        0 => AttemptOutcome::Succeeded,
        1 => AttemptOutcome::FailedPermanent,
        2 => AttemptOutcome::FailedBeforeWrite,
        _ => AttemptOutcome::Unknown,
    }
}

/// The effect the pipeline performs in the model: nothing outside, each send answers the outcome
/// the operation chose, and every send is counted per action. It declares no lookup, so that no
/// settling runs beside the sends and the outcome of a drain does not depend on timing.
struct Scripted {
    catalog: DestinationCatalog,
    first: u8,
    then: u8,
    sends: Arc<Mutex<BTreeMap<String, u32>>>,
}

impl Scripted {
    fn new(destination: &str, keyed: bool, first: u8, then: u8) -> Self {
        let capabilities = Capabilities {
            idempotency_retention: keyed.then_some(KEY_RETENTION),
            lookup: false,
            ..Capabilities::default()
        };
        // No default destination: the pipeline claims this case's actions only.
        let catalog = DestinationCatalog::new(BTreeMap::from([(destination.to_owned(), capabilities)]), None);
        Self { catalog, first, then, sends: Arc::default() }
    }
}

impl Effect for Scripted {
    fn catalog(&self) -> DestinationCatalog {
        self.catalog.clone()
    }

    async fn perform(&self, work: &Work<'_>, _stop: Stop) -> Report {
        let sends = {
            let mut sends = self.sends.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let sends = sends.entry(work.action.key.to_string()).or_default();
            *sends += 1;
            *sends
        };
        outcome(if sends == 1 { self.first } else { self.then }, work.action.ownership_version)
    }
}

/// What a run of the pipeline appended to each action's audit trail and attempts, read after
/// the `before` counts, side by side with the model's `expected` drain.
async fn compare_drain<S: Store>(
    ledger: &Ledger<S>,
    key: impl Fn(Id) -> ActionKey,
    before: &BTreeMap<Id, (usize, usize)>,
    expected: &Drain,
) -> Result<(), String> {
    for (&id, &(entries_before, attempts_before)) in before {
        let trail = ledger.store().audit_trail(&key(id)).await.map_err(|e| e.to_string())?;
        let added = trail.get(entries_before..).unwrap_or_default();
        if let Some(stranger) = added.iter().find(|e| e.actor != PIPELINE) {
            return Err(format!("key {id:?}: an audit entry by {} during the drain: {stranger:?}", stranger.actor));
        }
        let (applied, own): (Vec<_>, Vec<_>) = added.iter().partition(|e| e.event == Event::UpdateApplied);
        let own: Vec<Entry> = own
            .iter()
            .map(|e| (e.event, e.from_state.unwrap_or(e.to_state), e.to_state, e.ownership_version))
            .collect();
        let wanted = expected.entries.get(&id).cloned().unwrap_or_default();
        if own != wanted {
            return Err(format!("key {id:?}: audit entries ledger {own:?}, model {wanted:?}"));
        }
        let wanted = expected.updates_applied.get(&id).copied().unwrap_or_default();
        if applied.len() != wanted || applied.iter().any(|e| e.from_state != Some(e.to_state)) {
            return Err(format!("key {id:?}: update applied entries ledger {applied:?}, model {wanted}"));
        }
        let attempts = ledger.store().attempts(&key(id)).await.map_err(|e| e.to_string())?;
        let added: Vec<(i64, AttemptOutcome)> = attempts
            .get(attempts_before..)
            .unwrap_or_default()
            .iter()
            .map(|t| (t.ownership_version, t.outcome.unwrap_or(AttemptOutcome::CutOff)))
            .collect();
        let wanted = expected.attempts.get(&id).cloned().unwrap_or_default();
        if added != wanted {
            return Err(format!("key {id:?}: attempts added ledger {added:?}, model {wanted:?}"));
        }
    }
    Ok(())
}

static CASE: AtomicUsize = AtomicUsize::new(0);

/// Runs one sequence against the store and the model; returns the first disagreement.
#[allow(clippy::too_many_lines, reason = "one arm per operation, side by side with the model")]
async fn run_case<S: Store>(ledger: &Ledger<S>, ops: &[Op]) -> Result<(), String> {
    let case = CASE.fetch_add(1, Ordering::SeqCst);
    let destination = format!("m{case}");
    let scope = ClaimScope { destinations: Some(vec![destination.clone()]), include_unassigned: false, key: None };
    let key = |(k, update): Id| {
        let text = if update == 0 { format!("model:{case}:{k}") } else { format!("model:{case}:{k}#update-{update}") };
        ActionKey::parse(&text).unwrap()
    };
    let mut model = Model::default();
    let mut claims: BTreeMap<u8, Held> = BTreeMap::new();
    for (step, op) in ops.iter().enumerate() {
        match op {
            Op::Submit { key: k, payload } => {
                let raw = RawSubmission {
                    key: Some(key((*k, 0)).to_string()),
                    payload: format!(r#"{{"p":{payload}}}"#).into_bytes(),
                    destination: Some(destination.clone()),
                    ..RawSubmission::default()
                };
                ledger.submit(&raw).await.map_err(|e| format!("step {step}: submit: {e}"))?;
                model.submit(*k, *payload);
            }
            Op::Claim { worker } => {
                let got =
                    ledger.claim_scoped(&format!("w{worker}"), LEASE, 1, &scope).await.map_err(|e| e.to_string())?;
                let expected = model.claim();
                let got_key = got.first().map(|c| (c.key().clone(), c.ownership_version()));
                if got_key != expected.map(|(k, v)| (key(k), v)) {
                    return Err(format!("step {step}: claim got {got_key:?}, model expected {expected:?}"));
                }
                if let (Some(claim), Some((k, _))) = (got.into_iter().next(), expected) {
                    claims.entry(*worker).or_default().push((k, claim, None));
                }
            }
            Op::Start { worker, batched } => {
                let Some((k, claim, started)) = claims.get_mut(worker).and_then(|c| c.last_mut()) else { continue };
                let result = if *batched {
                    match ledger.start_attempts(std::slice::from_ref(claim)).await {
                        Ok(mut results) => results.pop().expect("one result per claim"),
                        Err(error) => Err(error),
                    }
                } else {
                    ledger.start_attempt(claim).await
                };
                let current = model.current(*k, claim.ownership_version());
                match result {
                    Ok(attempt) if current => {
                        *started = Some(attempt);
                        model.started(*k);
                    }
                    Err(LedgerError::Fenced { .. }) if !current => {}
                    other => return Err(format!("step {step}: start attempt: {other:?}, model current {current}")),
                }
            }
            Op::Finish { worker, outcome: n, batched } => {
                let Some((k, claim, started)) = claims.get_mut(worker).and_then(Vec::pop) else { continue };
                let attempt = started.unwrap_or(StartedAttempt { id: 0, number: 0 });
                let report = outcome(*n, claim.ownership_version());
                let recorded = if *batched {
                    ledger.record_results(&[(claim.clone(), attempt, report)]).await.map(|_| ())
                } else {
                    ledger.record_result(&claim, attempt, &report).await.map(|_| ())
                };
                recorded.map_err(|e| format!("step {step}: record result: {e}"))?;
                model.finish(k, claim.ownership_version(), *n);
            }
            Op::StartBatch { worker } => {
                let Some(held) = claims.get_mut(worker) else { continue };
                let picked = newest_per_key(held);
                let batch: Vec<Claim> = picked.iter().map(|&i| held[i].1.clone()).collect();
                let results =
                    ledger.start_attempts(&batch).await.map_err(|e| format!("step {step}: start batch: {e}"))?;
                for (&i, result) in picked.iter().zip(results) {
                    let (k, claim, started) = &mut held[i];
                    let current = model.current(*k, claim.ownership_version());
                    match result {
                        Ok(attempt) if current => {
                            *started = Some(attempt);
                            model.started(*k);
                        }
                        Err(LedgerError::Fenced { .. }) if !current => {}
                        other => return Err(format!("step {step}: start batch: {other:?}, model current {current}")),
                    }
                }
            }
            Op::FinishBatch { worker, outcome: n } => {
                let Some(held) = claims.get_mut(worker) else { continue };
                let picked = newest_per_key(held);
                let mut taken: Held = picked.iter().rev().map(|&i| held.remove(i)).collect();
                taken.reverse();
                let batch: Vec<_> = taken
                    .iter()
                    .map(|(_, claim, started)| {
                        let attempt = started.unwrap_or(StartedAttempt { id: 0, number: 0 });
                        (claim.clone(), attempt, outcome(*n, claim.ownership_version()))
                    })
                    .collect();
                ledger.record_results(&batch).await.map_err(|e| format!("step {step}: record batch: {e}"))?;
                for (k, claim, _) in &taken {
                    model.finish(*k, claim.ownership_version(), *n);
                }
            }
            Op::Heartbeat { worker } => {
                let Some((k, claim, _)) = claims.get(worker).and_then(|c| c.last()) else { continue };
                let renewed = ledger.heartbeat(claim, LEASE).await.is_ok();
                let current = model.current(*k, claim.ownership_version());
                if renewed != current {
                    return Err(format!("step {step}: heartbeat renewed {renewed}, model current {current}"));
                }
                if current {
                    model.actions.get_mut(k).expect("claimed").lease_expired = false;
                }
            }
            Op::Expire => {
                ledger.store().clock().advance(LEASE * 2);
                for a in model.actions.values_mut().filter(|a| a.state == State::InProgress) {
                    a.lease_expired = true;
                }
            }
            Op::Recover { key: k, protected } => {
                let Some(version) = model.actions.get(&(*k, 0)).map(|a| a.ownership_version) else { continue };
                let decides = if *protected {
                    crate::support::protected_by_lookup(ledger, &[&destination])
                } else {
                    ledger.clone()
                };
                decides
                    .recover_expired(&key((*k, 0)), version, "rescuer", LEASE)
                    .await
                    .map_err(|e| format!("step {step}: recover: {e}"))?;
                model.recover((*k, 0), *protected);
            }
            Op::Work { slots, keyed, first, then } => {
                let mut before = BTreeMap::new();
                for &id in model.actions.keys() {
                    let entries = ledger.store().audit_trail(&key(id)).await.map_err(|e| e.to_string())?.len();
                    let attempts = ledger.store().attempts(&key(id)).await.map_err(|e| e.to_string())?.len();
                    before.insert(id, (entries, attempts));
                }
                let effect = Scripted::new(&destination, *keyed, *first, *then);
                let sends = Arc::clone(&effect.sends);
                let options = WorkerOptions {
                    id: PIPELINE.to_owned(),
                    concurrency: usize::from(*slots),
                    batch: usize::from(*slots),
                    lease: LEASE,
                    poll_interval: Duration::from_millis(2),
                    drain: true,
                    destinations: effect,
                    progress: false,
                };
                // A drain that never ends is a disagreement too, not a hung test.
                let summary = tokio::time::timeout(
                    Duration::from_mins(1),
                    worker::run(ledger.clone(), options, std::future::pending()),
                )
                .await
                .map_err(|_| format!("step {step}: the worker did not finish draining"))?
                .map_err(|e| format!("step {step}: worker: {e}"))?;
                let expected = model.drain(*keyed, *first, *then);
                let sent = sends.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
                let wanted: BTreeMap<String, u32> =
                    expected.sends.iter().map(|(id, n)| (key(*id).to_string(), *n)).collect();
                if sent != wanted {
                    return Err(format!("step {step} ({op:?}): sends per action: effect {sent:?}, model {wanted:?}"));
                }
                if summary != expected.summary {
                    return Err(format!(
                        "step {step} ({op:?}): worker summary {summary:?}, model {:?}",
                        expected.summary
                    ));
                }
                compare_drain(ledger, key, &before, &expected)
                    .await
                    .map_err(|e| format!("step {step} ({op:?}): {e}"))?;
            }
            Op::Begin { caller, key: k } => {
                if model.actions.get(&(*k, 0)).is_some_and(|a| a.purged) {
                    continue;
                }
                let payload = model.actions.get(&(*k, 0)).map_or(0, |a| a.approved);
                let raw = RawSubmission {
                    key: Some(key((*k, 0)).to_string()),
                    payload: format!(r#"{{"p":{payload}}}"#).into_bytes(),
                    ..RawSubmission::default()
                };
                let begun = ledger
                    .begin(&raw, &destination, &format!("c{caller}"), LEASE)
                    .await
                    .map_err(|e| format!("step {step}: begin: {e}"))?;
                model.submit(*k, payload);
                let (expected, version) = model.begin((*k, 0));
                let answered = begun.decision();
                if answered != expected {
                    return Err(format!("step {step}: begin answered {answered}, model expected {expected}"));
                }
                if let Begun::Proceed(holding) = begun {
                    if Some(holding.claim.ownership_version()) != version {
                        return Err(format!("step {step}: begin claimed {holding:?}, model expected {version:?}"));
                    }
                    let held = claims.entry(WORKERS + caller).or_default();
                    held.push(((*k, 0), holding.claim, Some(holding.attempt)));
                }
            }
            Op::Renew { caller } => {
                let Some((k, claim, _)) = claims.get(&(WORKERS + caller)).and_then(|c| c.last()) else { continue };
                let renewed =
                    ledger.renew(claim.key(), claim.ownership_version(), &destination, &claim.worker, LEASE).await;
                let current = model.current(*k, claim.ownership_version());
                match renewed {
                    Ok(_) if current => model.actions.get_mut(k).expect("claimed").lease_expired = false,
                    Err(LedgerError::Fenced { .. }) if !current => {}
                    other => return Err(format!("step {step}: renew: {other:?}, model current {current}")),
                }
            }
            Op::Report { caller, outcome: n } => {
                let Some((k, claim, _)) = claims.get_mut(&(WORKERS + caller)).and_then(Vec::pop) else { continue };
                let version = claim.ownership_version();
                let finish = match n {
                    0 => Finish::Completed { destination_id: format!("D-{version}") },
                    1 => Finish::NotWritten { permanent: true, retry_after: None },
                    _ => Finish::Unknown,
                };
                let report = FinishReport { finish, reason: Some("model".to_owned()), evidence: Evidence::default() };
                // A purge took the attempt with the rest of a settled action's bulk: the report
                // is refused as the purged action's, and changes nothing.
                let purged = model.actions[&k].purged;
                match ledger.finish(claim.key(), version, &destination, &claim.worker, &report).await {
                    Ok(_) if !purged => model.finish(k, version, *n),
                    Err(LedgerError::Refused(Refusal::Purged { .. })) if purged => {}
                    other => return Err(format!("step {step}: finish: {other:?}, model purged {purged}")),
                }
            }
            Op::Purge => {
                ledger.store().clock().advance(Duration::from_hours(48));
                let request = PurgeRequest::new(
                    Duration::from_hours(24),
                    &[State::Completed, State::Cancelled],
                    Person::parse("model").unwrap(),
                    Reason::parse("model-based test").unwrap(),
                    false,
                )
                .unwrap();
                ledger.purge(&request).await.map_err(|e| format!("step {step}: purge: {e}"))?;
                model.purge();
            }
            Op::Manual { key: k, command, confirm } => {
                if !model.actions.contains_key(&(*k, 0)) {
                    continue;
                }
                let request = ManualRequest {
                    key: key((*k, 0)),
                    person: Person::parse("model").unwrap(),
                    reason: Reason::parse("model-based test").unwrap(),
                    expect_version: None,
                    command: manual_command(*command),
                    old_worker_stopped: *confirm,
                    confirmed_not_written: *confirm,
                };
                let purged = model.actions[&(*k, 0)].purged;
                let allowed = model.manual(*k, *command, *confirm);
                match ledger.manual(&request).await {
                    Ok(outcome) if allowed => {
                        // The person's word that nothing was written: resolving so, or a retry
                        // confirmed not written (rule 6).
                        if matches!(request.command, ManualCommand::ResolveNotWritten)
                            || (matches!(request.command, ManualCommand::Retry) && request.confirmed_not_written)
                        {
                            model.actions.get_mut(&(*k, 0)).expect("checked").resolved_through =
                                outcome.action.attempts;
                        }
                    }
                    Err(LedgerError::Refused(Refusal::Purged { .. })) if purged => {}
                    Err(LedgerError::Refused(refusal)) if purged => {
                        return Err(format!(
                            "step {step}: a purged action refused without naming the purge: {refusal}"
                        ));
                    }
                    Err(LedgerError::Refused(_)) if !allowed => {}
                    other => {
                        return Err(format!(
                            "step {step}: {:?}: ledger {other:?}, model allowed {allowed}",
                            request.command
                        ));
                    }
                }
            }
        }
        for (k, expected) in &model.actions {
            let actual = ledger.store().find(&key(*k)).await.map_err(|e| e.to_string())?.ok_or("action missing")?;
            let purged = ledger.store().purge_of(&key(*k)).await.map_err(|e| e.to_string())?.is_some();
            // A tombstone keeps the fingerprint of the approved payload, not the payload.
            let approved =
                if expected.purged { "null".to_owned() } else { format!(r#"{{"p":{}}}"#, expected.approved) };
            let seen = (
                actual.state,
                actual.ownership_version,
                actual.payload.canonical() == approved,
                actual.proposal.is_some(),
                actual.payload_revision,
                actual.sending_key().to_owned(),
                actual.late_results,
                actual.old_worker_may_act,
                actual.may_have_written,
                actual.attempts,
                purged,
            );
            let sending = match expected.derived_key {
                Some(revision) => format!("{}#rev-{revision}", key(*k)),
                None => key(*k).to_string(),
            };
            let wanted = (
                expected.state,
                expected.ownership_version,
                true,
                !expected.proposed.is_empty(),
                expected.payload_revision,
                sending,
                expected.late_results,
                expected.old_worker_may_act,
                expected.may_have_written,
                i64::from(expected.attempts),
                expected.purged,
            );
            if seen != wanted {
                return Err(format!(
                    "after step {step} ({op:?}), key {k:?}: ledger (state, version, approved payload, proposal, \
                     payload revision, idempotency key, late results, old worker may act, may have written, attempts, \
                     purged) \
                     {seen:?}, model {wanted:?}"
                ));
            }
            // Rule 2, asked of the stored attempts themselves: `failed`, by a worker or by a rejected
            // proposal, means that no attempt since a person last resolved the action as not written
            // may have written.
            if actual.state == State::Failed {
                let attempts = ledger.store().attempts(&key(*k)).await.map_err(|e| e.to_string())?;
                if let Some(written) = attempts.iter().find(|t| {
                    t.number > expected.resolved_through
                        && (t.outcome.is_none_or(actionledger::domain::AttemptOutcome::may_have_written)
                            || t.evidence.destination_id.is_some())
                }) {
                    return Err(format!(
                        "after step {step} ({op:?}), key {k:?}: failed, though attempt {} may have written ({:?})",
                        written.number, written.outcome
                    ));
                }
            }
        }
    }
    Ok(())
}

fn cases() -> u32 {
    std::env::var("ACTIONLEDGER_MODEL_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1000)
}

fn check<S: Store>(runtime: &tokio::runtime::Runtime, ledger: &Ledger<S>, store: &str) {
    let config = ProptestConfig {
        cases: cases(),
        max_shrink_iters: 2000,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let (cases_run, steps_run) = (std::cell::Cell::new(0_usize), std::cell::Cell::new(0_usize));
    proptest!(config, |(ops in proptest::collection::vec(op(), 1..=50))| {
        cases_run.set(cases_run.get() + 1);
        steps_run.set(steps_run.get() + ops.len());
        let result = runtime.block_on(run_case(ledger, &ops));
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    });
    println!(
        "model ({store}): {} cases of 1 to 50 steps, {} steps in all, the store and the model agreed after each",
        cases_run.get(),
        steps_run.get()
    );
}

#[test]
fn sqlite_agrees_with_the_model() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let db = runtime.block_on(support::sqlite());
    check(&runtime, &db.ledger, "sqlite");
}

#[test]
fn postgres_agrees_with_the_model() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let Some(db) = runtime.block_on(support::postgres()) else { return };
    check(&runtime, &db.ledger, "postgres");
}
