//! The conformance suite: the rules of docs/RULES.md that the ledger core keeps, written once and
//! run against SQLite and PostgreSQL (`sqlite::name` and `postgres::name`).

use crate::support::{TestDb, person_request};
use actionledger::Ledger;
use actionledger::domain::state::{self, TRANSITIONS};
use actionledger::domain::{
    ActionKey, ActionRecord, ActorKind, AttemptOutcome, Event, Evidence, ManualCommand, RawSubmission, Refusal, State,
    SubmitOutcome,
};
use actionledger::ledger::LedgerError;
use actionledger::ledger::{Claim, ManualRequest, Outcome, Recorded, Recovery, Report};
use actionledger::store::{ListFilter, Store};
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(30);

conformance!(
    submission_outcomes,
    expired_claims_are_found_for_the_destinations_asked,
    duplicate_changes_nothing_but_the_deliveries,
    a_changed_payload_waits_beside_the_approved_one,
    rejecting_a_proposal_returns_to_where_the_action_was,
    a_proposal_during_a_claim_keeps_the_old_payload_from_running_again,
    refused_submissions_write_no_action_and_are_listed,
    manual_commands_follow_the_transition_table,
    manual_commands_check_the_version_the_person_saw,
    worker_results_follow_the_transition_table,
    a_taken_over_worker_cannot_complete,
    leases_expire_by_database_time,
    takeover_of_a_stale_claim,
    heartbeats_extend_only_a_current_claim,
    claims_respect_backoff_dependencies_and_proposals,
    the_database_enforces_the_same_transition_table,
    list_filters_and_keyset_pagination,
    the_audit_trail_names_every_actor,
    batched_attempts_and_results_keep_each_fencing_check,
    one_batch_applies_current_results_and_keeps_late_ones,
    assigning_changes_only_the_assignee,
    a_page_of_submissions_is_one_commit_with_an_outcome_each,
    regression_a_refused_command_leaves_no_row_locked,
    regression_a_takeover_while_a_payload_is_proposed_waits_in_conflict,
    regression_the_largest_worker_batch_starts_and_records,
    failed_means_known_not_written,
    an_attempt_cut_off_by_a_crash_may_have_written_and_does_not_count,
);

fn key(text: &str) -> ActionKey {
    ActionKey::parse(text).unwrap()
}

fn raw(key: &str, payload: &str) -> RawSubmission {
    RawSubmission { key: Some(key.to_owned()), payload: payload.as_bytes().to_vec(), ..Default::default() }
}

fn versioned(key: &str, payload: &str, version: i64) -> RawSubmission {
    RawSubmission { source_version: Some(version), source: Some("shop".into()), ..raw(key, payload) }
}

fn report(outcome: Outcome) -> Report {
    Report { outcome, error: None, evidence: Evidence::default() }
}

async fn state_of<S: Store>(ledger: &Ledger<S>, k: &str) -> State {
    ledger.store().find(&key(k)).await.unwrap().unwrap().state
}

async fn claim_one<S: Store>(ledger: &Ledger<S>, worker: &str) -> Claim {
    let mut claims = ledger.claim(worker, LEASE, 1).await.unwrap();
    assert_eq!(claims.len(), 1, "one action should be claimable");
    claims.pop().unwrap()
}

/// Brings a fresh action with key `k` into `state` through the public API only.
pub(crate) async fn action_in<S: Store>(ledger: &Ledger<S>, k: &str, state: State) {
    ledger.submit(&raw(k, r#"{"n":1}"#)).await.unwrap();
    let finish = |outcome| async move {
        let claim = claim_one(ledger, "setup").await;
        let attempt = ledger.start_attempt(&claim).await.unwrap();
        ledger.record_result(&claim, attempt, &report(outcome)).await.unwrap();
    };
    match state {
        State::Pending => {}
        State::InProgress => {
            claim_one(ledger, "setup").await;
        }
        State::Completed => {
            finish(Outcome::Completed { destination_id: "crm-1".into() }).await;
        }
        State::Failed => finish(Outcome::Failed { permanent: true }).await,
        State::Unknown => finish(Outcome::Unknown).await,
        State::Held => {
            let claim = claim_one(ledger, "setup").await;
            ledger.hold(&claim, "retention window passed").await.unwrap();
        }
        State::Conflict => {
            ledger.submit(&raw(k, r#"{"n":2}"#)).await.unwrap();
        }
        State::Cancelled => {
            ledger.manual(&person_request(k, ManualCommand::Cancel)).await.unwrap();
        }
    }
    assert_eq!(state_of(ledger, k).await, state, "setup of {k}");
}

async fn submission_outcomes<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let k = "acme:order:ORD-1042:create-task";
    assert_eq!(l.submit(&versioned(k, r#"{"qty":2,"sku":"A"}"#, 5)).await.unwrap().outcome, SubmitOutcome::Created);
    // Same content, other whitespace and key order: the same fingerprint.
    assert_eq!(
        l.submit(&versioned(k, r#"{ "sku": "A", "qty": 2 }"#, 5)).await.unwrap().outcome,
        SubmitOutcome::Duplicate
    );
    assert_eq!(l.submit(&versioned(k, r#"{"qty":9,"sku":"A"}"#, 4)).await.unwrap().outcome, SubmitOutcome::Stale);
    assert_eq!(l.submit(&versioned(k, r#"{"qty":3,"sku":"A"}"#, 6)).await.unwrap().outcome, SubmitOutcome::Conflict);
    // Same version, different content: contradicting facts are a conflict too.
    assert_eq!(l.submit(&versioned("k2", r#"{"a":1}"#, 1)).await.unwrap().outcome, SubmitOutcome::Created);
    assert_eq!(l.submit(&versioned("k2", r#"{"a":2}"#, 1)).await.unwrap().outcome, SubmitOutcome::Conflict);

    let detail = l.detail(&key(k)).await.unwrap();
    let outcomes: Vec<SubmitOutcome> = detail.deliveries.iter().map(|d| d.outcome).collect();
    assert_eq!(
        outcomes,
        [SubmitOutcome::Created, SubmitOutcome::Duplicate, SubmitOutcome::Stale, SubmitOutcome::Conflict]
    );
    assert_eq!(detail.action.state, State::Conflict);
    assert_eq!(detail.action.payload.canonical(), r#"{"qty":2,"sku":"A"}"#);
    assert_eq!(detail.action.proposal.as_ref().unwrap().payload.canonical(), r#"{"qty":3,"sku":"A"}"#);
    let listed = l.list(&ListFilter { limit: 10, ..Default::default() }).await.unwrap();
    assert_eq!(listed.len(), 2, "one action per key, whatever the deliveries");
}

async fn duplicate_changes_nothing_but_the_deliveries<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let before = l.submit(&raw("dup", r#"{"a":1}"#)).await.unwrap().action;
    for _ in 0..4 {
        let again = l.submit(&raw("dup", r#"{"a":1}"#)).await.unwrap();
        assert_eq!(again.outcome, SubmitOutcome::Duplicate);
        assert_eq!(again.action, before, "a duplicate changes nothing in the record");
    }
    let detail = l.detail(&key("dup")).await.unwrap();
    assert_eq!(detail.deliveries.len(), 5);
    assert_eq!(detail.audit.len(), 1, "only the creation is a transition");
}

async fn a_changed_payload_waits_beside_the_approved_one<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    l.submit(&versioned("c", r#"{"qty":1}"#, 1)).await.unwrap();
    l.submit(&versioned("c", r#"{"qty":2}"#, 2)).await.unwrap();
    // The same proposal again is still a conflict, and adds no second audit entry.
    assert_eq!(l.submit(&versioned("c", r#"{"qty":2}"#, 2)).await.unwrap().outcome, SubmitOutcome::Conflict);
    assert!(l.claim("w", LEASE, 10).await.unwrap().is_empty(), "a conflict is never claimed");
    let detail = l.detail(&key("c")).await.unwrap();
    assert_eq!(detail.audit.iter().filter(|e| e.event == Event::PayloadChanged).count(), 1);

    let approved = l.manual(&person_request("c", ManualCommand::Approve { proposal: None })).await.unwrap();
    assert_eq!(approved.action.state, State::Pending);
    assert_eq!(approved.action.payload.canonical(), r#"{"qty":2}"#);
    assert_eq!(approved.action.source_version, Some(2));
    assert!(approved.action.proposal.is_none());
    let claim = claim_one(l, "w").await;
    assert_eq!(claim.action.payload.canonical(), r#"{"qty":2}"#, "the worker runs the approved payload");
}

async fn rejecting_a_proposal_returns_to_where_the_action_was<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    action_in(l, "f", State::Failed).await;
    l.submit(&raw("f", r#"{"n":5}"#)).await.unwrap();
    assert_eq!(state_of(l, "f").await, State::Conflict);
    let rejected = l.manual(&person_request("f", ManualCommand::Reject { proposal: None })).await.unwrap();
    assert_eq!(rejected.action.state, State::Failed);
    assert_eq!(rejected.action.payload.canonical(), r#"{"n":1}"#);
    assert!(rejected.action.proposal.is_none());

    // On a completed action the proposal is recorded, the state stays, and reject clears it
    // (approving it records an update action: tests/it/updates.rs).
    action_in(l, "done", State::Completed).await;
    assert_eq!(l.submit(&raw("done", r#"{"n":7}"#)).await.unwrap().outcome, SubmitOutcome::Conflict);
    assert_eq!(state_of(l, "done").await, State::Completed);
    let kept = l.manual(&person_request("done", ManualCommand::Reject { proposal: None })).await.unwrap();
    assert_eq!(kept.transition, None);
    assert_eq!(kept.action.state, State::Completed);
    assert!(kept.action.proposal.is_none());
}

async fn a_proposal_during_a_claim_keeps_the_old_payload_from_running_again<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    l.submit(&raw("p", r#"{"n":1}"#)).await.unwrap();
    let claim = claim_one(l, "w").await;
    assert_eq!(l.submit(&raw("p", r#"{"n":2}"#)).await.unwrap().outcome, SubmitOutcome::Conflict);
    assert_eq!(state_of(l, "p").await, State::InProgress, "the claim is not disturbed");
    let attempt = l.start_attempt(&claim).await.unwrap();
    let recorded =
        l.record_result(&claim, attempt, &report(Outcome::RetryLater { after: Duration::ZERO })).await.unwrap();
    let Recorded::Applied(action) = recorded else { panic!("the claim was current") };
    assert_eq!(action.state, State::Conflict, "a retry of the old payload waits for the decision");
    assert_eq!(action.resume_state, Some(State::Pending));
    assert!(l.claim("w", LEASE, 10).await.unwrap().is_empty());
    let rejected = l.manual(&person_request("p", ManualCommand::Reject { proposal: None })).await.unwrap();
    assert_eq!(rejected.action.state, State::Pending);
}

async fn refused_submissions_write_no_action_and_are_listed<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let big = format!(r#"{{"x":"{}"}}"#, "a".repeat(256 * 1024));
    let cases: Vec<(RawSubmission, &str)> = vec![
        (RawSubmission { key: None, payload: b"{}".to_vec(), ..Default::default() }, "key_missing"),
        (raw("", "{}"), "key_missing"),
        (raw("has space", "{}"), "key_whitespace"),
        (raw("esc\u{1b}[2J", "{}"), "key_control_character"),
        (raw(&"k".repeat(256), "{}"), "key_too_long"),
        (raw("acme:contact:jane.doe@example.com:create", "{}"), "key_contains_email"),
        (raw("ok", "not json"), "payload_not_json"),
        (raw("ok", r#"{"a":"\u0000"}"#), "payload_contains_nul"),
        (raw("ok", &big), "payload_too_large"),
        (RawSubmission { payload: vec![b'"', 0xff, b'"'], ..raw("ok", "") }, "payload_not_utf8"),
    ];
    for (submission, problem) in &cases {
        match l.submit(submission).await {
            Err(LedgerError::SubmissionRefused(refusal)) => assert_eq!(refusal.problem, *problem),
            other => panic!("{problem}: expected a refusal, got {other:?}"),
        }
    }
    assert!(l.list(&ListFilter { limit: 100, ..Default::default() }).await.unwrap().is_empty(), "no action written");
    let refused = l.list_refused(None, 100).await.unwrap();
    assert_eq!(refused.len(), cases.len());
    let problems: Vec<&str> = refused.iter().rev().map(|r| r.problem.as_str()).collect();
    assert_eq!(problems, cases.iter().map(|(_, p)| *p).collect::<Vec<_>>());
    for r in &refused {
        let excerpt = r.key_excerpt.as_deref().unwrap_or_default();
        assert!(!excerpt.contains("jane"), "no personal data kept: {excerpt}");
        assert!(!excerpt.contains('\u{1b}'), "control characters made visible: {excerpt}");
    }
}

/// Puts a fresh action into `conflict` by a late result from an obsolete owner (no proposal).
async fn late_result_conflict<S: Store>(ledger: &Ledger<S>, k: &str) {
    ledger.submit(&raw(k, r#"{"n":1}"#)).await.unwrap();
    let old = claim_one(ledger, "old-owner").await;
    let attempt = ledger.start_attempt(&old).await.unwrap();
    ledger.store().clock().advance(LEASE * 2);
    let recovered = crate::support::protected_by_lookup(ledger, &["crm"])
        .recover_expired(old.key(), old.ownership_version(), "new-owner", LEASE)
        .await
        .unwrap();
    assert!(matches!(recovered, Recovery::Claimed(_)));
    let late = ledger.record_result(&old, attempt, &report(Outcome::Unknown)).await.unwrap();
    assert!(matches!(late, Recorded::Stale(_)));
    assert_eq!(state_of(ledger, k).await, State::Conflict);
}

/// Every manual command against an action in every state (and both kinds of conflict): allowed
/// exactly where the transition table and the proposal rule say.
#[allow(clippy::too_many_lines, reason = "one table-driven test over every state and command")]
async fn manual_commands_follow_the_transition_table<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let commands = [
        (ManualCommand::Retry, Event::Retry),
        (ManualCommand::ResolveCompleted { destination_id: "crm-77".into() }, Event::ResolvedCompleted),
        (ManualCommand::ResolveNotWritten, Event::ResolvedNotWritten),
        (ManualCommand::Cancel, Event::Cancelled),
        (ManualCommand::Approve { proposal: None }, Event::Approved),
        (ManualCommand::Reject { proposal: None }, Event::Rejected),
        (ManualCommand::Takeover, Event::TakenOver),
    ];
    // (state, whether the setup leaves a proposed payload waiting)
    let mut setups: Vec<(State, bool)> = State::ALL.into_iter().map(|s| (s, s == State::Conflict)).collect();
    setups.push((State::Conflict, false));
    for (n, (state, proposal)) in setups.into_iter().enumerate() {
        for (m, (command, event)) in commands.iter().enumerate() {
            let k = format!("m{n}-{m}");
            if state == State::Conflict && !proposal {
                late_result_conflict(l, &k).await;
            } else {
                action_in(l, &k, state).await;
            }
            if state == State::InProgress {
                l.store().clock().advance(LEASE * 2);
            }
            let before = l.detail(&key(&k)).await.unwrap();
            let by_table = state::allowed_from(*event).contains(&state);
            let expected = match command {
                ManualCommand::Approve { proposal: None } | ManualCommand::Reject { proposal: None } => {
                    by_table && proposal
                }
                ManualCommand::Retry | ManualCommand::ResolveCompleted { .. } | ManualCommand::ResolveNotWritten => {
                    by_table && !proposal
                }
                _ => by_table,
            };
            // Decided where a lookup recognises a repeat, so that a retry after a possible write is
            // a matter of the table alone here (tests/it/bounds.rs has the rest of rule 6), and a
            // cancellation after a possible write is confirmed checked (tests/it/evidence.rs).
            let decides = crate::support::protected_by_lookup(l, &["crm"]);
            let checked = ManualRequest { confirmed_not_written: true, ..person_request(&k, command.clone()) };
            let result = decides.manual(&checked).await;
            let after = l.detail(&key(&k)).await.unwrap();
            match result {
                Ok(outcome) => {
                    assert!(expected, "{} from {state} (proposal: {proposal}) must be refused", command.verb());
                    let t = outcome.transition.unwrap();
                    assert!(TRANSITIONS.contains(&(*event, state, t.to)), "{event} {state}->{}", t.to);
                    assert_eq!(after.action.key, before.action.key, "the original key is kept");
                    assert_eq!(after.action.revision, before.action.revision + 1);
                    let entry = after.audit.last().unwrap();
                    assert_eq!((entry.actor.as_str(), entry.actor_kind), ("Ana Lima", ActorKind::Person));
                    assert_eq!(entry.event, *event);
                    assert_eq!(entry.reason.as_deref().map(|r| r.starts_with("checked the CRM by hand")), Some(true));
                }
                Err(LedgerError::Refused(refusal)) => {
                    let message = refusal.to_string();
                    assert!(
                        !expected,
                        "{} from {state} (proposal: {proposal}) must be allowed: {message}",
                        command.verb()
                    );
                    assert!(message.contains(&k), "the refusal names the key: {message}");
                    assert_eq!(after.action, before.action, "a refused command changes nothing");
                    assert_eq!(after.audit.len(), before.audit.len());
                }
                Err(other) => panic!("unexpected error: {other}"),
            }
            // Leave nothing claimable behind for the next case's setup.
            if state_of(l, &k).await == State::Pending {
                let cancel = ManualRequest { confirmed_not_written: true, ..person_request(&k, ManualCommand::Cancel) };
                l.manual(&cancel).await.unwrap();
            }
        }
    }
}

async fn manual_commands_check_the_version_the_person_saw<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    action_in(l, "v", State::Failed).await;
    let seen = l.store().find(&key("v")).await.unwrap().unwrap().revision;
    let mut stale = person_request("v", ManualCommand::Retry);
    stale.expect_version = Some(seen - 1);
    let Err(LedgerError::Refused(refusal @ Refusal::ChangedSinceRead { .. })) = l.manual(&stale).await else {
        panic!("an old version must be refused")
    };
    assert!(refusal.to_string().contains("changed since you read it"), "{refusal}");
    assert_eq!(state_of(l, "v").await, State::Failed);

    let mut current = person_request("v", ManualCommand::Retry);
    current.expect_version = Some(seen);
    let outcome = l.manual(&current).await.unwrap();
    assert_eq!(outcome.action.state, State::Pending);
    // A second person acting on what they saw before the first one: refused.
    let Err(LedgerError::Refused(Refusal::ChangedSinceRead { .. })) =
        l.manual(&ManualRequest { command: ManualCommand::Cancel, ..current.clone() }).await
    else {
        panic!("the second command on the same version must be refused")
    };
    assert!(matches!(l.manual(&person_request("nobody", ManualCommand::Cancel)).await, Err(LedgerError::NotFound(_))));
}

async fn worker_results_follow_the_transition_table<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let cases = [
        (Outcome::Completed { destination_id: "crm-9".into() }, State::Completed, AttemptOutcome::Succeeded),
        (Outcome::Failed { permanent: true }, State::Failed, AttemptOutcome::FailedPermanent),
        (Outcome::Failed { permanent: false }, State::Failed, AttemptOutcome::FailedBeforeWrite),
        (Outcome::Unknown, State::Unknown, AttemptOutcome::Unknown),
        (Outcome::RetryLater { after: Duration::from_mins(1) }, State::Pending, AttemptOutcome::FailedBeforeWrite),
    ];
    for (n, (outcome, expected, attempt_outcome)) in cases.into_iter().enumerate() {
        let k = format!("w{n}");
        l.submit(&raw(&k, "{}")).await.unwrap();
        let claim = claim_one(l, "worker-1").await;
        assert_eq!(claim.ownership_version(), 1);
        let attempt = l.start_attempt(&claim).await.unwrap();
        let result = Report {
            outcome: outcome.clone(),
            error: Some("boom \u{1b}[31m".into()),
            evidence: Evidence {
                status: Some(201),
                destination_id: Some("crm-9".into()),
                body: Some("x".repeat(10_000)),
            },
        };
        let Recorded::Applied(action) = l.record_result(&claim, attempt, &result).await.unwrap() else {
            panic!("current claim")
        };
        assert_eq!(action.state, expected);
        assert_eq!(action.claimed_by, None);
        let detail = l.detail(&key(&k)).await.unwrap();
        let recorded = &detail.attempts[0];
        assert_eq!(recorded.outcome, Some(attempt_outcome));
        assert!(!recorded.stale);
        assert!(recorded.evidence.body.as_ref().unwrap().len() < 4200, "bodies are truncated");
        assert!(detail.action.first_sent_at.is_some(), "the window counts from the first send");
        if let Outcome::Completed { .. } = outcome {
            assert_eq!(detail.action.destination_id.as_deref(), Some("crm-9"));
        }
        // Completed and the rest are final for this claim: a second result is stale.
        let again = l.start_attempt(&claim).await;
        assert!(matches!(again, Err(LedgerError::Fenced { .. })), "{again:?}");
    }
    // Rule 2 (docs/RULES.md): an unknown outcome is never claimed again automatically.
    assert!(l.claim("worker-1", LEASE, 100).await.unwrap().iter().all(|c| c.key().as_str() != "w3"));
    // Held and released without sending.
    l.submit(&raw("h", "{}")).await.unwrap();
    let claim = claim_one(l, "worker-1").await;
    assert_eq!(l.hold(&claim, "retention window passed").await.unwrap().state, State::Held);
    l.submit(&raw("r", "{}")).await.unwrap();
    let claim = claim_one(l, "worker-1").await;
    assert_eq!(l.release(&claim, "shutting down").await.unwrap().state, State::Pending);
    assert_eq!(claim_one(l, "worker-2").await.ownership_version(), 2, "every claim is a new ownership version");
}

async fn a_taken_over_worker_cannot_complete<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    l.submit(&raw("t", r#"{"n":1}"#)).await.unwrap();
    let a = claim_one(l, "worker-a").await;
    let attempt_a = l.start_attempt(&a).await.unwrap();
    l.store().clock().advance(LEASE * 2);
    let Recovery::Claimed(b) =
        crate::support::protected_by_lookup(l, &["crm"]).recover_expired(a.key(), 1, "worker-b", LEASE).await.unwrap()
    else {
        panic!("a protected destination allows the takeover")
    };
    assert_eq!(b.ownership_version(), 2);

    let late = Report {
        outcome: Outcome::Completed { destination_id: "crm-late".into() },
        error: None,
        evidence: Evidence { status: Some(201), destination_id: Some("crm-late".into()), body: Some("{}".into()) },
    };
    let Recorded::Stale(action) = l.record_result(&a, attempt_a, &late).await.unwrap() else {
        panic!("the late result must be refused")
    };
    assert_eq!(action.state, State::Conflict);
    assert_eq!(action.destination_id, None, "the late result never overwrites the record");
    let detail = l.detail(&key("t")).await.unwrap();
    let kept = detail.attempts.iter().find(|at| at.id == attempt_a.id).unwrap();
    assert!(kept.stale);
    assert_eq!(kept.evidence.destination_id.as_deref(), Some("crm-late"), "kept as evidence");
    assert_eq!(detail.audit.last().unwrap().event, Event::LateResult);

    // B's own result is now stale too: the conflict waits for a person.
    let attempt_b = l.start_attempt(&b).await;
    assert!(matches!(attempt_b, Err(LedgerError::Fenced { held: 2, .. })), "{attempt_b:?}");
    assert!(matches!(l.heartbeat(&a, LEASE).await, Err(LedgerError::Fenced { .. })));
}

async fn leases_expire_by_database_time<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    l.submit(&raw("lease", "{}")).await.unwrap();
    let claim = claim_one(l, "w1").await;
    let now = l.store().now().await.unwrap();
    let until = claim.action.lease_expires_at.unwrap();
    assert!((until - now).num_seconds() >= 28 && (until - now).num_seconds() <= 30, "lease from database time");
    assert!(l.store().expired_claims(10, &actionledger::store::ClaimScope::any()).await.unwrap().is_empty());
    assert_eq!(l.recover_expired(claim.key(), 1, "w2", LEASE).await.unwrap(), Recovery::NotExpired);

    l.store().clock().advance(LEASE + Duration::from_secs(1));
    let expired = l.store().expired_claims(10, &actionledger::store::ClaimScope::any()).await.unwrap();
    assert_eq!(expired.len(), 1);
    // Nothing was sent under the expired claim: safe to take over even without protection.
    let Recovery::Claimed(second) = l.recover_expired(claim.key(), 1, "w2", LEASE).await.unwrap() else {
        panic!("nothing was sent")
    };
    assert_eq!(second.ownership_version(), 2);
    assert_eq!(l.recover_expired(claim.key(), 1, "w3", LEASE).await.unwrap(), Recovery::Changed);

    // Something was sent and the destination offers no protection: held, for a person (rule 5).
    l.start_attempt(&second).await.unwrap();
    l.store().clock().advance(LEASE + Duration::from_secs(1));
    let Recovery::Held(action) = l.recover_expired(claim.key(), 2, "w3", LEASE).await.unwrap() else {
        panic!("an unprotected expired claim after a send is held")
    };
    assert_eq!(action.state, State::Held);
    let trail = l.detail(claim.key()).await.unwrap().audit;
    assert_eq!(trail.last().map(|e| e.event), Some(Event::LeaseExpired));
}

async fn takeover_of_a_stale_claim<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    l.submit(&raw("stale", "{}")).await.unwrap();
    let claim = claim_one(l, "w1").await;
    l.start_attempt(&claim).await.unwrap();
    let Err(LedgerError::Refused(refusal @ Refusal::ClaimLive { .. })) =
        l.manual(&person_request("stale", ManualCommand::Takeover)).await
    else {
        panic!("a live claim cannot be taken over")
    };
    assert!(refusal.to_string().contains("is live"), "{refusal}");
    l.store().clock().advance(LEASE * 2);
    let outcome = l.manual(&person_request("stale", ManualCommand::Takeover)).await.unwrap();
    assert_eq!(outcome.action.state, State::Held, "a request may have been sent: held, not a blind retry");
    assert_eq!(outcome.action.ownership_version, 2);
    assert!(matches!(l.heartbeat(&claim, LEASE).await, Err(LedgerError::Fenced { .. })));

    l.submit(&raw("stale2", "{}")).await.unwrap();
    let claim = claim_one(l, "w1").await;
    l.start_attempt(&claim).await.unwrap();
    l.store().clock().advance(LEASE * 2);
    let outcome = crate::support::protected_by_lookup(l, &["crm"])
        .manual(&person_request("stale2", ManualCommand::Takeover))
        .await
        .unwrap();
    assert_eq!(outcome.action.state, State::Pending, "a protected destination may receive the same key again");
}

async fn heartbeats_extend_only_a_current_claim<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    l.submit(&raw("hb", "{}")).await.unwrap();
    let claim = claim_one(l, "w1").await;
    l.store().clock().advance(Duration::from_secs(20));
    let until = l.heartbeat(&claim, LEASE).await.unwrap();
    assert!(until > claim.action.lease_expires_at.unwrap());
    l.store().clock().advance(Duration::from_secs(20));
    assert!(
        l.store().expired_claims(10, &actionledger::store::ClaimScope::any()).await.unwrap().is_empty(),
        "the renewed lease still runs"
    );
    assert_eq!(
        l.store().find(&key("hb")).await.unwrap().unwrap().revision,
        claim.action.revision,
        "renewal is not a change people re-read"
    );
}

async fn claims_respect_backoff_dependencies_and_proposals<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    l.submit(&raw("first", "{}")).await.unwrap();
    l.submit(&RawSubmission { after: Some("first".into()), ..raw("second", "{}") }).await.unwrap();
    l.submit(&RawSubmission { after: Some("not-yet-submitted".into()), ..raw("orphan", "{}") }).await.unwrap();
    let claims = l.claim("w", LEASE, 10).await.unwrap();
    assert_eq!(claims.iter().map(|c| c.key().as_str()).collect::<Vec<_>>(), ["first"]);
    let first = &claims[0];
    let attempt = l.start_attempt(first).await.unwrap();
    l.record_result(first, attempt, &report(Outcome::RetryLater { after: Duration::from_mins(2) })).await.unwrap();
    assert!(l.claim("w", LEASE, 10).await.unwrap().is_empty(), "backoff: not before its time");
    l.store().clock().advance(Duration::from_secs(121));
    let first = claim_one(l, "w").await;
    assert_eq!(first.key().as_str(), "first");
    let attempt = l.start_attempt(&first).await.unwrap();
    l.record_result(&first, attempt, &report(Outcome::Completed { destination_id: "T-1".into() })).await.unwrap();
    let second = claim_one(l, "w").await;
    assert_eq!(second.key().as_str(), "second", "runs once its predecessor completed");
    assert!(l.claim("w", LEASE, 10).await.unwrap().is_empty());
}

/// A worker recovers the expired claims of its own destinations first, whatever else expired
/// before them: the expired claims of a destination nobody serves now never take their places.
async fn expired_claims_are_found_for_the_destinations_asked<S: Store>(db: TestDb<S>) {
    use actionledger::store::ClaimScope;
    let l = &db.ledger;
    for (key, destination) in
        [("other-1", Some("mail")), ("other-2", Some("mail")), ("mine", Some("crm")), ("bare", None)]
    {
        l.submit(&RawSubmission { destination: destination.map(str::to_owned), ..raw(key, "{}") }).await.unwrap();
        claim_one(l, "w1").await;
        l.store().clock().advance(Duration::from_secs(1));
    }
    l.store().clock().advance(LEASE * 2);
    let keys = |expired: Vec<ActionRecord>| expired.into_iter().map(|a| a.key.to_string()).collect::<Vec<_>>();
    let crm = ClaimScope { destinations: Some(vec!["crm".to_owned()]), include_unassigned: false, key: None };
    assert_eq!(keys(l.store().expired_claims(1, &crm).await.unwrap()), ["mine"]);
    let crm_and_bare = ClaimScope { include_unassigned: true, ..crm };
    assert_eq!(keys(l.store().expired_claims(10, &crm_and_bare).await.unwrap()), ["mine", "bare"]);
    let all = keys(l.store().expired_claims(10, &ClaimScope::any()).await.unwrap());
    assert_eq!(all, ["other-1", "other-2", "mine", "bare"], "oldest expiry first");
}

async fn the_database_enforces_the_same_transition_table<S: Store>(db: TestDb<S>) {
    let mut enforced = db.ledger.store().enforced_state_pairs().await.unwrap();
    enforced.sort();
    assert_eq!(enforced, state::allowed_state_pairs(), "migrations and src/domain/state.rs must agree");
}

async fn list_filters_and_keyset_pagination<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    for n in 0..25 {
        let destination = if n % 2 == 0 { "crm" } else { "mail" };
        l.submit(&RawSubmission { destination: Some(destination.into()), ..raw(&format!("k{n:02}"), "{}") })
            .await
            .unwrap();
    }
    claim_one(l, "worker-7").await;
    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let page = l.list(&ListFilter { before_id: before, limit: 10, ..Default::default() }).await.unwrap();
        if page.is_empty() {
            break;
        }
        before = page.last().map(|a| a.id);
        seen.extend(page.into_iter().map(|a| a.key.to_string()));
    }
    let expected: Vec<String> = (0..25).rev().map(|n| format!("k{n:02}")).collect();
    assert_eq!(seen, expected, "newest first, every action exactly once");
    let crm = l.list(&ListFilter { destination: Some("crm".into()), limit: 100, ..Default::default() }).await.unwrap();
    assert_eq!(crm.len(), 13);
    let mine = l.list(&ListFilter { owner: Some("worker-7".into()), limit: 100, ..Default::default() }).await.unwrap();
    assert_eq!(mine.len(), 1);
    let pending = l.list(&ListFilter { state: Some(State::Pending), limit: 100, ..Default::default() }).await.unwrap();
    assert_eq!(pending.len(), 24);
    let counts = l.counts().await.unwrap();
    assert_eq!(counts.iter().find(|(s, _)| *s == State::InProgress), Some(&(State::InProgress, 1)));
    assert_eq!(counts.len(), State::ALL.len());
}

async fn the_audit_trail_names_every_actor<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    l.submit(&RawSubmission { source: Some("forms".into()), ..raw("a", "{}") }).await.unwrap();
    let claim = claim_one(l, "worker-9").await;
    let attempt = l.start_attempt(&claim).await.unwrap();
    l.record_result(&claim, attempt, &report(Outcome::Unknown)).await.unwrap();
    l.manual(&person_request("a", ManualCommand::ResolveCompleted { destination_id: "CRM-5".into() })).await.unwrap();
    let trail = l.detail(&key("a")).await.unwrap().audit;
    let summary: Vec<(Event, Option<State>, State, &str)> =
        trail.iter().map(|e| (e.event, e.from_state, e.to_state, e.actor.as_str())).collect();
    assert_eq!(
        summary,
        [
            (Event::Submitted, None, State::Pending, "forms"),
            (Event::Claimed, Some(State::Pending), State::InProgress, "worker-9"),
            (Event::OutcomeUnknown, Some(State::InProgress), State::Unknown, "worker-9"),
            (Event::ResolvedCompleted, Some(State::Unknown), State::Completed, "Ana Lima"),
        ]
    );
    assert!(trail[3].reason.as_deref().unwrap().contains("CRM-5"));
    let revisions: Vec<i64> = trail.iter().map(|e| e.revision).collect();
    assert!(revisions.windows(2).all(|w| w[0] < w[1]), "each entry records the version it produced: {revisions:?}");
}

async fn batched_attempts_and_results_keep_each_fencing_check<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    for n in 0..5 {
        l.submit(&raw(&format!("batch:{n}"), "{}")).await.unwrap();
    }
    let claims = l.claim("batcher", LEASE, 5).await.unwrap();
    assert_eq!(claims.len(), 5, "one statement claims the batch");
    // One claim is lost to a takeover before the batch starts its attempts.
    l.store().clock().advance(LEASE * 2);
    let lost = claims[2].clone();
    assert!(matches!(
        crate::support::protected_by_lookup(l, &["crm"])
            .recover_expired(lost.key(), 1, "rescuer", LEASE)
            .await
            .unwrap(),
        Recovery::Claimed(_)
    ));
    let started = l.start_attempts(&claims).await.unwrap();
    assert!(matches!(started[2], Err(LedgerError::Fenced { .. })), "{:?}", started[2]);
    let results: Vec<_> = claims
        .iter()
        .zip(&started)
        .filter_map(|(claim, attempt)| {
            attempt.as_ref().ok().map(|a| {
                (claim.clone(), *a, report(Outcome::Completed { destination_id: format!("D-{}", claim.key()) }))
            })
        })
        .collect();
    assert_eq!(results.len(), 4);
    let recorded = l.record_results(&results).await.unwrap();
    assert!(recorded.iter().all(|r| matches!(r, Recorded::Applied(a) if a.state == State::Completed)));
    assert_eq!(state_of(l, "batch:2").await, State::InProgress, "the taken-over claim is untouched");
    // A stale member of a batch is refused on its own and kept as evidence.
    let late =
        vec![(lost.clone(), actionledger::ledger::StartedAttempt { id: 0, number: 1 }, report(Outcome::Unknown))];
    let recorded = l.record_results(&late).await.unwrap();
    assert!(matches!(&recorded[0], Recorded::Stale(a) if a.state == State::Conflict));
}

async fn one_batch_applies_current_results_and_keeps_late_ones<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    for n in 0..4 {
        l.submit(&raw(&format!("mixed:{n}"), "{}")).await.unwrap();
    }
    let claims = l.claim("batcher", LEASE, 4).await.unwrap();
    let started: Vec<_> = l.start_attempts(&claims).await.unwrap().into_iter().map(Result::unwrap).collect();
    assert!(started.iter().all(|a| a.number == 1), "{started:?}");
    // The batch stalls past its lease, and one claim is taken over before its results land.
    l.store().clock().advance(LEASE * 2);
    let lost = &claims[1];
    let takeover = crate::support::protected_by_lookup(l, &["crm"])
        .recover_expired(lost.key(), lost.ownership_version(), "rescuer", LEASE)
        .await
        .unwrap();
    assert!(matches!(takeover, Recovery::Claimed(_)), "{takeover:?}");
    let results: Vec<_> = claims
        .iter()
        .zip(&started)
        .map(|(claim, attempt)| {
            (claim.clone(), *attempt, report(Outcome::Completed { destination_id: format!("D-{}", claim.key()) }))
        })
        .collect();

    let repeated = vec![results[0].clone(), results[0].clone()];
    assert!(
        matches!(l.record_results(&repeated).await, Err(LedgerError::Refused(Refusal::RepeatedKey { .. }))),
        "a key twice in one batch"
    );
    assert_eq!(state_of(l, "mixed:0").await, State::InProgress, "the refused batch wrote nothing");

    let recorded = l.record_results(&results).await.unwrap();
    for (n, recorded) in recorded.iter().enumerate() {
        let detail = l.detail(&key(&format!("mixed:{n}"))).await.unwrap();
        let attempt = &detail.attempts[0];
        let last_entry = detail.audit.last().unwrap();
        let action = match recorded {
            Recorded::Stale(action) => {
                assert_eq!(n, 1, "only the taken-over claim is late");
                assert_eq!(action.state, State::Conflict);
                assert!(attempt.stale, "the late attempt is kept as evidence");
                assert_eq!(last_entry.event, Event::LateResult);
                action
            }
            Recorded::Applied(action) => {
                assert_eq!(
                    (action.state, action.destination_id.clone()),
                    (State::Completed, Some(format!("D-mixed:{n}")))
                );
                assert!(!attempt.stale);
                assert_eq!(last_entry.event, Event::Completed);
                action
            }
        };
        assert_eq!(&detail.action, action, "what the batch returned is what it wrote");
        assert_eq!((attempt.outcome, attempt.ended_at.is_some()), (Some(AttemptOutcome::Succeeded), true));
        assert_eq!(last_entry.revision, action.revision, "the audit entry names the revision written");
    }
}

async fn assigning_changes_only_the_assignee<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    action_in(l, "mine", State::Unknown).await;
    let before = l.store().find(&key("mine")).await.unwrap().unwrap();
    let outcome = l.manual(&person_request("mine", ManualCommand::Assign { to: "Ana Lima".into() })).await.unwrap();
    assert_eq!(outcome.transition, None);
    assert_eq!(outcome.action.state, State::Unknown);
    assert_eq!(outcome.action.assignee.as_deref(), Some("Ana Lima"));
    assert_eq!(outcome.action.revision, before.revision + 1);
    let entry = l.detail(&key("mine")).await.unwrap().audit.pop().unwrap();
    assert_eq!(
        (entry.event, entry.from_state, entry.to_state),
        (Event::Assigned, Some(State::Unknown), State::Unknown)
    );
    action_in(l, "done", State::Completed).await;
    assert!(matches!(
        l.manual(&person_request("done", ManualCommand::Assign { to: "x".into() })).await,
        Err(LedgerError::Refused(Refusal::Final { .. }))
    ));
}

async fn a_page_of_submissions_is_one_commit_with_an_outcome_each<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    l.submit(&raw("page:old", r#"{"a":1}"#)).await.unwrap();
    let page = vec![
        raw("page:1", "{}"),
        raw("page:1", "{}"),
        raw("page:old", r#"{"a":2}"#),
        raw("bad key", "{}"),
        raw("page:2", "{}"),
    ];
    let outcomes = l.submit_many(&page).await.unwrap();
    let summary: Vec<Result<SubmitOutcome, &str>> = outcomes
        .iter()
        .map(|o| match o {
            Ok(report) => Ok(report.outcome),
            Err(LedgerError::SubmissionRefused(refusal)) => Err(refusal.problem),
            Err(other) => panic!("{other}"),
        })
        .collect();
    assert_eq!(
        summary,
        [
            Ok(SubmitOutcome::Created),
            Ok(SubmitOutcome::Duplicate),
            Ok(SubmitOutcome::Conflict),
            Err("key_whitespace"),
            Ok(SubmitOutcome::Created)
        ]
    );
    assert_eq!(l.list_refused(None, 10).await.unwrap().len(), 1);
    assert_eq!(state_of(l, "page:old").await, State::Conflict);
    let outcomes_of = |detail: actionledger::ledger::ActionDetail| -> Vec<SubmitOutcome> {
        detail.deliveries.iter().map(|d| d.outcome).collect()
    };
    assert_eq!(
        outcomes_of(l.detail(&key("page:1")).await.unwrap()),
        [SubmitOutcome::Created, SubmitOutcome::Duplicate],
        "deliveries are kept in the order they were recorded"
    );
    assert_eq!(
        outcomes_of(l.detail(&key("page:old")).await.unwrap()),
        [SubmitOutcome::Created, SubmitOutcome::Conflict]
    );
    assert_eq!(outcomes_of(l.detail(&key("page:2")).await.unwrap()), [SubmitOutcome::Created]);
}

/// Found by the model-based test on PostgreSQL: a command refused after its row was read
/// `FOR UPDATE` left the lock in an idle pooled connection, so claims skipped the action.
async fn regression_a_refused_command_leaves_no_row_locked<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    l.submit(&raw("locked", "{}")).await.unwrap();
    for _ in 0..20 {
        assert!(l.manual(&person_request("locked", ManualCommand::Retry)).await.is_err());
        assert!(
            crate::support::protected_by_lookup(l, &["crm"])
                .recover_expired(&key("locked"), 0, "w", LEASE)
                .await
                .is_ok()
        );
    }
    let claims = l.claim("w", LEASE, 1).await.unwrap();
    assert_eq!(claims.len(), 1, "the action is claimable: nothing holds its row");
}

/// Found by the model-based test: a takeover back to pending while a changed payload awaited a
/// decision left a pending action that no worker could claim and no one could approve.
async fn regression_a_takeover_while_a_payload_is_proposed_waits_in_conflict<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    l.submit(&raw("proposed", r#"{"p":1}"#)).await.unwrap();
    claim_one(l, "w").await;
    l.store().clock().advance(LEASE * 2);
    l.submit(&raw("proposed", r#"{"p":0}"#)).await.unwrap();
    let outcome = l.manual(&person_request("proposed", ManualCommand::Takeover)).await.unwrap();
    assert_eq!(outcome.action.state, State::Conflict);
    assert_eq!(outcome.action.resume_state, Some(State::Pending));
    let approved = l.manual(&person_request("proposed", ManualCommand::Approve { proposal: None })).await.unwrap();
    assert_eq!(approved.action.state, State::Pending);
    assert_eq!(claim_one(l, "w").await.action.payload.canonical(), r#"{"p":0}"#);
}

/// A worker may batch up to `MAX_BATCH` claims; SQLite once refused to count that many attempts in
/// one statement (an expression tree over 1,000 deep).
async fn regression_the_largest_worker_batch_starts_and_records<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let batch = actionledger::config::MAX_BATCH;
    let raws: Vec<RawSubmission> = (0..batch).map(|i| raw(&format!("batch:{i}"), "{}")).collect();
    l.submit_many(&raws).await.unwrap();
    let claims = l.claim("w", LEASE, i64::try_from(batch).unwrap()).await.unwrap();
    assert_eq!(claims.len(), batch);
    let started = l.start_attempts(&claims).await.unwrap();
    assert!(started.iter().all(Result::is_ok), "every claim is current, so every attempt starts");
    let results: Vec<_> = claims
        .into_iter()
        .zip(started)
        .map(|(claim, attempt)| {
            let id = format!("D-{}", claim.key());
            (claim, attempt.unwrap(), report(Outcome::Completed { destination_id: id }))
        })
        .collect();
    let recorded = l.record_results(&results).await.unwrap();
    assert!(recorded.iter().all(|r| matches!(r, Recorded::Applied(a) if a.state == State::Completed)));
}

/// Rule 2: `failed` means known not written. A failure after an earlier request that may have
/// written ends in `unknown`; once a person resolves the action as not written, a failure is
/// `failed` again.
async fn failed_means_known_not_written<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let run = |outcome: Outcome| async move {
        let claim = claim_one(l, "w").await;
        let attempt = l.start_attempt(&claim).await.unwrap();
        l.record_result(&claim, attempt, &report(outcome)).await.unwrap();
        l.store().find(&key("mw")).await.unwrap().unwrap()
    };
    l.submit(&raw("mw", "{}")).await.unwrap();
    let action = run(Outcome::Unknown).await;
    assert_eq!(action.state, State::Unknown);
    assert!(action.may_have_written);
    // Retried where the destination recognises a repeat (a lookup): no person's word that nothing
    // was written, so the earlier request may still have written (rule 6).
    let looked = crate::support::protected_by_lookup(l, &["crm"]);
    looked.manual(&person_request("mw", ManualCommand::Retry)).await.unwrap();
    for outcome in [Outcome::Failed { permanent: false }, Outcome::Failed { permanent: true }] {
        let action = run(outcome).await;
        assert_eq!(action.state, State::Unknown, "an earlier request may have written: not failed");
        looked.manual(&person_request("mw", ManualCommand::Retry)).await.unwrap();
    }
    let attempts = l.store().attempts(&key("mw")).await.unwrap();
    let outcomes: Vec<_> = attempts.iter().map(|a| a.outcome).collect();
    assert_eq!(
        outcomes,
        [Some(AttemptOutcome::Unknown), Some(AttemptOutcome::FailedBeforeWrite), Some(AttemptOutcome::FailedPermanent)],
        "each attempt keeps what its own request did"
    );
    let trail = l.detail(&key("mw")).await.unwrap().audit;
    assert!(trail.iter().any(|e| e.reason.as_deref().is_some_and(|r| r.contains("unknown, not failed"))));

    // A person found nothing at the destination: known not written, so a failure is `failed`.
    let claim = claim_one(l, "w").await;
    let attempt = l.start_attempt(&claim).await.unwrap();
    l.record_result(&claim, attempt, &report(Outcome::Unknown)).await.unwrap();
    l.manual(&person_request("mw", ManualCommand::ResolveNotWritten)).await.unwrap();
    let action = run(Outcome::Failed { permanent: false }).await;
    assert_eq!(action.state, State::Failed);
    assert!(!action.may_have_written);

    // Never sent anything that may have written: a failure is `failed`.
    l.submit(&raw("mw-clean", "{}")).await.unwrap();
    let claim = claim_one(l, "w").await;
    let attempt = l.start_attempt(&claim).await.unwrap();
    l.record_result(&claim, attempt, &report(Outcome::Failed { permanent: false })).await.unwrap();
    assert_eq!(state_of(l, "mw-clean").await, State::Failed);
}

/// Rules 2 and 3: an attempt whose claim expired unfinished (its worker crashed) is recorded as
/// cut off, makes the action one that may have written, and does not count towards the round's
/// `max_attempts`; a later failure ends in `unknown`.
async fn an_attempt_cut_off_by_a_crash_may_have_written_and_does_not_count<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    l.submit(&raw("cut", "{}")).await.unwrap();
    let crashed = claim_one(l, "w1").await;
    l.start_attempt(&crashed).await.unwrap();
    l.store().clock().advance(LEASE * 2);
    let Recovery::Claimed(claim) = crate::support::protected_by_lookup(l, &["crm"])
        .recover_expired(crashed.key(), crashed.ownership_version(), "w2", LEASE)
        .await
        .unwrap()
    else {
        panic!("a protected destination is taken over")
    };
    let action = l.store().find(&key("cut")).await.unwrap().unwrap();
    assert!(action.may_have_written);
    assert_eq!((action.attempts, action.attempts_in_round), (1, 0), "a crash is not a failure before writing");
    let attempts = l.store().attempts(&key("cut")).await.unwrap();
    assert_eq!(attempts[0].outcome, Some(AttemptOutcome::CutOff));
    let attempt = l.start_attempt(&claim).await.unwrap();
    l.record_result(&claim, attempt, &report(Outcome::Failed { permanent: false })).await.unwrap();
    assert_eq!(state_of(l, "cut").await, State::Unknown);

    // A person's takeover records the cut-off attempt too.
    l.submit(&raw("cut2", "{}")).await.unwrap();
    let crashed = claim_one(l, "w1").await;
    l.start_attempt(&crashed).await.unwrap();
    l.store().clock().advance(LEASE * 2);
    let outcome = l.manual(&person_request("cut2", ManualCommand::Takeover)).await.unwrap();
    assert!(outcome.action.may_have_written);
    let attempts = l.store().attempts(&key("cut2")).await.unwrap();
    assert_eq!(attempts[0].outcome, Some(AttemptOutcome::CutOff));
}
