//! Payload identity and conflicts, on both stores: canonical payloads by RFC 8785 (equal values
//! are one payload, whatever number spelling carried them), action keys in Unicode NFC, every
//! distinct proposal kept for review, and `failed` kept for what is known not written when a
//! proposal is rejected.

use crate::support::{TestDb, person_request, protected_by_lookup};
use actionledger::Ledger;
use actionledger::domain::payload::sha256_hex;
use actionledger::domain::{
    ActionKey, Evidence, ManualCommand, ProposalDecision, RawSubmission, Refusal, State, SubmitOutcome, WayOut,
};
use actionledger::ledger::{LedgerError, Outcome, Recorded, Recovery, Report};
use actionledger::store::Store;
use std::time::Duration;

const LEASE: Duration = Duration::from_secs(30);

conformance!(
    rejecting_a_proposal_never_returns_to_failed_after_a_late_write,
    equal_payloads_written_differently_are_duplicates,
    a_redelivery_of_a_payload_recorded_before_rfc_8785_is_a_duplicate,
    a_key_not_in_nfc_is_refused_and_nothing_is_written,
    twenty_concurrent_conflicting_submissions_keep_twenty_proposals,
    rejecting_one_proposal_keeps_the_others_waiting,
    cancelling_rejects_every_proposal_waiting,
    the_console_shows_each_proposal_and_approves_the_one_shown,
);

fn key(text: &str) -> ActionKey {
    ActionKey::parse(text).unwrap()
}

fn raw(key: &str, payload: &str) -> RawSubmission {
    RawSubmission { key: Some(key.to_owned()), payload: payload.as_bytes().to_vec(), ..Default::default() }
}

fn report(outcome: Outcome, status: i64, destination_id: Option<&str>) -> Report {
    Report {
        outcome,
        error: (status >= 400).then(|| format!("{status} from the destination")),
        evidence: Evidence { status: Some(status), destination_id: destination_id.map(str::to_owned), body: None },
    }
}

async fn state_of<S: Store>(l: &Ledger<S>, k: &str) -> actionledger::domain::ActionRecord {
    l.store().find(&key(k)).await.unwrap().unwrap()
}

/// A failed action takes a proposal (conflict, going back to `failed` if it is rejected); then a
/// late result from a worker whose claim was taken over reports that its request wrote. A
/// rejection of the proposal must not call the action `failed`: something may have been written.
async fn rejecting_a_proposal_never_returns_to_failed_after_a_late_write<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let k = "bug:reject-late";
    l.submit(&raw(k, r#"{"n":1}"#)).await.unwrap();
    // Worker A sends and stalls; B takes the claim over (the destination protects against a repeat).
    let a = l.claim("worker-a", LEASE, 1).await.unwrap().pop().unwrap();
    let a_attempt = l.start_attempt(&a).await.unwrap();
    l.store().clock().advance(LEASE * 2);
    let protected = protected_by_lookup(l, &["crm"]);
    let Recovery::Claimed(b) =
        protected.recover_expired(a.key(), a.ownership_version(), "worker-b", LEASE).await.unwrap()
    else {
        panic!("a protected destination allows the takeover")
    };
    // B is refused for good: A's cut-off request may have written, so it is unknown; a person
    // checks the destination, finds nothing, and the next try fails for good: known not written.
    let b_attempt = l.start_attempt(&b).await.unwrap();
    l.record_result(&b, b_attempt, &report(Outcome::Failed { permanent: true }, 422, None)).await.unwrap();
    assert_eq!(state_of(l, k).await.state, State::Unknown);
    l.manual(&person_request(k, ManualCommand::ResolveNotWritten)).await.unwrap();
    let third = l.claim("worker-c", LEASE, 1).await.unwrap().pop().unwrap();
    let c_attempt = l.start_attempt(&third).await.unwrap();
    l.record_result(&third, c_attempt, &report(Outcome::Failed { permanent: true }, 422, None)).await.unwrap();
    assert_eq!(state_of(l, k).await.state, State::Failed);

    // A changed payload: conflict, going back to `failed` on a rejection.
    l.submit(&raw(k, r#"{"n":2}"#)).await.unwrap();
    assert_eq!(state_of(l, k).await.state, State::Conflict);
    // A's late result: its request wrote record crm-1.
    let late = report(Outcome::Completed { destination_id: "crm-1".into() }, 201, Some("crm-1"));
    let Recorded::Stale(_) = l.record_result(&a, a_attempt, &late).await.unwrap() else { panic!("A is late") };
    let action = state_of(l, k).await;
    assert!(action.may_have_written, "the late result reported a write");

    let rejected = l.manual(&person_request(k, ManualCommand::Reject { proposal: None })).await.unwrap();
    let action = state_of(l, k).await;
    assert_ne!(action.state, State::Failed, "failed means known not written, yet crm-1 exists");
    assert_eq!((action.state, rejected.action.state), (State::Conflict, State::Conflict));
    assert!(action.proposal.is_none(), "the proposal is rejected");
    // The person settles it by what the destination holds.
    let resolved =
        l.manual(&person_request(k, ManualCommand::ResolveCompleted { destination_id: "crm-1".into() })).await.unwrap();
    assert_eq!(resolved.action.state, State::Completed);
}

/// Runs one statement on the test database directly, as its owner: how a row written by an
/// earlier version of actionledger is made here.
async fn execute(url: &str, sql: String) {
    if url.starts_with("sqlite:") {
        let pool = sqlx::SqlitePool::connect(url).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&pool).await.unwrap();
        pool.close().await;
    } else {
        let pool = sqlx::PgPool::connect(url).await.unwrap();
        let sql = format!("SET search_path TO {}; {sql}", actionledger::store::DEFAULT_SCHEMA);
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&pool).await.unwrap();
        pool.close().await;
    }
}

async fn equal_payloads_written_differently_are_duplicates<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let k = "jcs:numbers";
    let created = l.submit(&raw(k, r#"{"qty":1.0,"price":1e2,"discount":-0,"rate":0.50}"#)).await.unwrap();
    assert_eq!(created.outcome, SubmitOutcome::Created);
    assert_eq!(created.action.payload.canonical(), r#"{"discount":0,"price":100,"qty":1,"rate":0.5}"#);
    for spelling in [
        r#"{"rate":0.5,"qty":1,"price":100,"discount":0}"#,
        r#"{"qty":1e0,"price":100.000,"discount":0.0,"rate":5e-1}"#,
        r#"{"qty":10E-1,"price":1E+2,"discount":-0e7,"rate":0.5000}"#,
    ] {
        assert_eq!(l.submit(&raw(k, spelling)).await.unwrap().outcome, SubmitOutcome::Duplicate, "{spelling}");
    }
    let action = state_of(l, k).await;
    assert_eq!((action.state, action.proposal.is_none()), (State::Pending, true), "no conflict was raised");
    assert_eq!(l.store().deliveries(&key(k)).await.unwrap().len(), 4, "each delivery is recorded");
    // A different value is still a conflict.
    assert_eq!(
        l.submit(&raw(k, r#"{"qty":2,"price":100,"discount":0,"rate":0.5}"#)).await.unwrap().outcome,
        SubmitOutcome::Conflict
    );
}

/// An action recorded by an earlier version, whose canonical text kept `1.0` as Rust writes it,
/// with the fingerprint of that text: a re-delivery of the same payload is a duplicate, however
/// its numbers are spelt, and a different payload is still a conflict.
async fn a_redelivery_of_a_payload_recorded_before_rfc_8785_is_a_duplicate<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let k = "jcs:earlier";
    l.submit(&raw(k, r#"{"amount":7}"#)).await.unwrap();
    let earlier = r#"{"amount":1.0,"big":1e+16}"#;
    execute(
        &db.url,
        format!(
            "UPDATE actions SET payload = '{earlier}', fingerprint = '{}' WHERE key = '{k}'",
            sha256_hex(earlier.as_bytes())
        ),
    )
    .await;
    let recorded = state_of(l, k).await;
    assert_eq!(recorded.payload.canonical(), earlier);
    for spelling in [r#"{"amount":1.0,"big":1e+16}"#, r#"{"big":1e16,"amount":1}"#, r#"{"amount":1e0,"big":1.0e16}"#] {
        assert_eq!(l.submit(&raw(k, spelling)).await.unwrap().outcome, SubmitOutcome::Duplicate, "{spelling}");
    }
    let after = state_of(l, k).await;
    assert_eq!((after.state, after.proposal.is_none(), after.payload.canonical()), (State::Pending, true, earlier));
    assert_eq!(l.submit(&raw(k, r#"{"amount":1.5,"big":1e16}"#)).await.unwrap().outcome, SubmitOutcome::Conflict);
}

async fn a_key_not_in_nfc_is_refused_and_nothing_is_written<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let decomposed = "acme:cafe\u{301}:create";
    let composed = "acme:caf\u{e9}:create";
    let Err(LedgerError::SubmissionRefused(refusal)) = l.submit(&raw(decomposed, "{}")).await else {
        panic!("a decomposed key is refused")
    };
    assert_eq!(refusal.problem, "key_not_nfc");
    assert!(refusal.message.ends_with(&format!("use {composed}")), "{}", refusal.message);
    assert!(l.store().find(&ActionKey::parse_existing(decomposed).unwrap()).await.unwrap().is_none());
    let refused = l.list_refused(None, 10).await.unwrap();
    assert_eq!(refused.iter().map(|r| r.problem.as_str()).collect::<Vec<_>>(), ["key_not_nfc"]);
    // The NFC form is an ordinary key; the two spellings can never be two actions.
    assert_eq!(l.submit(&raw(composed, "{}")).await.unwrap().outcome, SubmitOutcome::Created);
    assert!(l.submit(&raw(decomposed, "{}")).await.is_err());
}

fn proposal(key: &str, n: usize) -> RawSubmission {
    RawSubmission {
        event_id: Some(format!("evt-{n}")),
        source: Some("shop".to_owned()),
        ..raw(key, &format!(r#"{{"n":{n}}}"#))
    }
}

fn refusal(error: LedgerError) -> Refusal {
    match error {
        LedgerError::Refused(refusal) => refusal,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Twenty submitters propose twenty different payloads for one key at the same moment: each was
/// told "kept as a proposal", so each is kept, with its source and event, for a person to see.
async fn twenty_concurrent_conflicting_submissions_keep_twenty_proposals<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let k = "proposals:storm";
    l.submit(&raw(k, r#"{"n":0}"#)).await.unwrap();
    let mut tasks = Vec::new();
    for n in 1..=20 {
        let ledger = l.clone();
        tasks.push(tokio::spawn(async move { ledger.submit(&proposal(k, n)).await.expect("submission").outcome }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), SubmitOutcome::Conflict);
    }
    // A repeat of one of them is the same proposal, not a twenty-first.
    assert_eq!(l.submit(&proposal(k, 7)).await.unwrap().outcome, SubmitOutcome::Conflict);

    let detail = l.detail(&key(k)).await.unwrap();
    let waiting: Vec<_> = detail.waiting_proposals().collect();
    assert_eq!(waiting.len(), 20, "every distinct proposal is kept");
    let mut values: Vec<i64> = waiting.iter().map(|p| p.payload.value()["n"].as_i64().unwrap()).collect();
    values.sort_unstable();
    assert_eq!(values, (1..=20).collect::<Vec<_>>());
    assert!(waiting.iter().all(|p| p.source.as_deref() == Some("shop") && p.event_id.is_some()));
    assert_eq!(detail.action.state, State::Conflict);
    assert_eq!(detail.action.payload.canonical(), r#"{"n":0}"#, "the approved payload is unchanged");

    // Approving without naming one cannot tell which is meant: refused, nothing changes.
    let refused = refusal(l.manual(&person_request(k, ManualCommand::Approve { proposal: None })).await.unwrap_err());
    assert!(matches!(&refused, Refusal::ProposalNotChosen { waiting, .. } if waiting.len() == 20), "{refused}");
    assert_eq!(refused.way_out(), Some(WayOut::NameProposal), "{refused}");
    assert_eq!(l.detail(&key(k)).await.unwrap().waiting_proposals().count(), 20);

    // Naming one (by the short fingerprint `show` prints) approves it and rejects the others.
    let chosen = waiting.iter().find(|p| p.payload.value()["n"] == 13).unwrap().payload.clone();
    let approve = ManualCommand::Approve { proposal: Some(chosen.fingerprint().short().to_owned()) };
    let approved = l.manual(&person_request(k, approve)).await.unwrap();
    assert_eq!((approved.action.state, approved.action.payload.canonical()), (State::Pending, r#"{"n":13}"#));
    assert!(approved.action.proposal.is_none());
    let after = l.detail(&key(k)).await.unwrap();
    assert_eq!(after.waiting_proposals().count(), 0);
    let decided = |d: ProposalDecision| after.proposals.iter().filter(|p| p.decision == Some(d)).count();
    assert_eq!((decided(ProposalDecision::Approved), decided(ProposalDecision::Rejected)), (1, 19));
    assert!(after.proposals.iter().all(|p| p.decided_by.as_deref() == Some("Ana Lima")));
    let entry = after.audit.last().unwrap();
    assert!(entry.reason.as_deref().unwrap_or_default().contains("proposal(s) rejected"), "{entry:?}");
}

async fn rejecting_one_proposal_keeps_the_others_waiting<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let k = "proposals:reject-one";
    l.submit(&raw(k, r#"{"n":0}"#)).await.unwrap();
    for n in 1..=3 {
        assert_eq!(l.submit(&proposal(k, n)).await.unwrap().outcome, SubmitOutcome::Conflict);
    }
    let fingerprint = |n: usize| {
        actionledger::domain::Payload::parse(format!(r#"{{"n":{n}}}"#).as_bytes()).unwrap().fingerprint().clone()
    };
    // A name that matches none is refused, naming what waits.
    let unknown = ManualCommand::Reject { proposal: Some("0000000000".into()) };
    let refused = refusal(l.manual(&person_request(k, unknown)).await.unwrap_err());
    assert!(matches!(refused, Refusal::ProposalNotFound { matches: 0, .. }), "{refused}");

    let reject_two = ManualCommand::Reject { proposal: Some(fingerprint(2).as_str().to_owned()) };
    let rejected = l.manual(&person_request(k, reject_two)).await.unwrap();
    assert_eq!(rejected.action.state, State::Conflict, "the others still wait");
    let latest = rejected.action.proposal.as_ref().unwrap();
    assert_eq!(latest.payload.fingerprint(), &fingerprint(3), "the latest one waiting is the action's");
    let detail = l.detail(&key(k)).await.unwrap();
    let waiting: Vec<_> = detail.waiting_proposals().map(|p| p.payload.fingerprint().clone()).collect();
    assert_eq!(waiting, [fingerprint(1), fingerprint(3)]);
    // The worker runs nothing while proposals wait.
    assert!(l.claim("w", LEASE, 10).await.unwrap().is_empty());

    // Rejecting without a name rejects every one waiting: back where the action was.
    let all = l.manual(&person_request(k, ManualCommand::Reject { proposal: None })).await.unwrap();
    assert_eq!((all.action.state, all.action.proposal.is_none()), (State::Pending, true));
    let detail = l.detail(&key(k)).await.unwrap();
    assert_eq!((detail.waiting_proposals().count(), detail.proposals.len()), (0, 3));

    // Proposed again, a rejected proposal waits again: the same row.
    assert_eq!(l.submit(&proposal(k, 2)).await.unwrap().outcome, SubmitOutcome::Conflict);
    let detail = l.detail(&key(k)).await.unwrap();
    assert_eq!((detail.waiting_proposals().count(), detail.proposals.len()), (1, 3));
    // With only one waiting, approve needs no name.
    let approved = l.manual(&person_request(k, ManualCommand::Approve { proposal: None })).await.unwrap();
    assert_eq!(approved.action.payload.fingerprint(), &fingerprint(2));
}

async fn cancelling_rejects_every_proposal_waiting<S: Store>(db: TestDb<S>) {
    let l = &db.ledger;
    let k = "proposals:cancel";
    l.submit(&raw(k, r#"{"n":0}"#)).await.unwrap();
    for n in 1..=2 {
        l.submit(&proposal(k, n)).await.unwrap();
    }
    let cancelled = l.manual(&person_request(k, ManualCommand::Cancel)).await.unwrap();
    assert_eq!((cancelled.action.state, cancelled.action.proposal.is_none()), (State::Cancelled, true));
    let detail = l.detail(&key(k)).await.unwrap();
    assert_eq!(detail.waiting_proposals().count(), 0);
    assert!(detail.proposals.iter().all(|p| p.decision == Some(ProposalDecision::Rejected)));
}

/// On PostgreSQL, proposals are written by automation and settled by people, and the database
/// holds each role to that against direct SQL.
mod roles {
    use super::{person_request, proposal, raw};
    use actionledger::Ledger;
    use actionledger::domain::ManualCommand;
    use actionledger::store::PostgresStore;

    async fn exec(ledger: &Ledger<PostgresStore>, sql: &str) -> Result<u64, sqlx::Error> {
        sqlx::query(sqlx::AssertSqlSafe(sql.to_owned())).execute(ledger.store().pool()).await.map(|r| r.rows_affected())
    }

    async fn refused(ledger: &Ledger<PostgresStore>, sql: &str) {
        match exec(ledger, sql).await {
            Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("42501") => {}
            other => panic!("{sql} must be refused for lack of privilege, got {other:?}"),
        }
    }

    /// A ledger at `url` opened as a new login member of `group`.
    async fn open_as(admin: &Ledger<PostgresStore>, url: &str, group: &str) -> Ledger<PostgresStore> {
        let path = url.split('?').next().unwrap_or(url);
        let login =
            format!("{}_{}", path.rsplit('/').next().unwrap_or(path), group.trim_start_matches("actionledger_"));
        exec(admin, &format!("CREATE ROLE {login} LOGIN PASSWORD 'secret-{login}' IN ROLE {group}")).await.unwrap();
        // A person's entries name the person of the login.
        exec(admin, &format!("INSERT INTO person_logins (login, person) VALUES ('{login}', 'Ana Lima')"))
            .await
            .unwrap();
        let scheme_end = url.find("://").unwrap() + 3;
        let rest = &url[scheme_end..];
        let host_start = rest.find('/').map_or(rest.len(), |slash| rest[..slash].rfind('@').map_or(0, |at| at + 1));
        let login_url = format!("{}{login}:secret-{login}@{}", &url[..scheme_end], &rest[host_start..]);
        Ledger::new(PostgresStore::open_with(&login_url, 4).await.unwrap())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_worker_proposes_and_only_a_person_decides() {
        let Some(url) = crate::support::pg::fresh_database().await else { return };
        let admin = Ledger::new(PostgresStore::open(&url).await.unwrap());
        let worker = open_as(&admin, &url, "actionledger_worker").await;
        let reviewer = open_as(&admin, &url, "actionledger_reviewer").await;
        let k = "roles:proposals";
        worker.submit(&raw(k, r#"{"n":0}"#)).await.unwrap();
        worker.submit(&proposal(k, 1)).await.expect("a worker records a proposal");
        worker.submit(&proposal(k, 2)).await.expect("and another");

        refused(&worker, "UPDATE proposals SET decision = 'approved', decided_by = 'bob', decided_at = 0").await;
        refused(&worker, "UPDATE proposals SET payload = '{\"n\":9}'").await;
        refused(&worker, "DELETE FROM proposals").await;
        refused(&reviewer, "INSERT INTO proposals (action_key, fingerprint, payload, received_at) VALUES ('roles:proposals', 'f', '{}', 0)").await;
        refused(&reviewer, "UPDATE proposals SET payload = '{\"n\":9}'").await;
        refused(&reviewer, "DELETE FROM proposals").await;

        let reject_one = ManualCommand::Reject { proposal: None };
        reviewer.manual(&person_request(k, reject_one)).await.expect("a reviewer rejects");
        // A decision is never changed, not even by a reviewer.
        refused(&reviewer, "UPDATE proposals SET decision = 'approved'").await;
        // Proposed again, a rejected proposal waits again: the worker may re-open it.
        worker.submit(&proposal(k, 1)).await.expect("a worker proposes it again");
        let waiting = admin.detail(&super::key(k)).await.unwrap().waiting_proposals().count();
        assert_eq!(waiting, 1);
    }
}

/// In the review console, an action with two proposals shows one at a time with its place among
/// them; `p` shows the next, and approve acts on the one shown (the other is rejected).
async fn the_console_shows_each_proposal_and_approves_the_one_shown<S: Store>(db: TestDb<S>) {
    use actionledger::console::{ConsoleOptions, ScriptedConsole};
    let l = &db.ledger;
    let k = "proposals:console";
    l.submit(&raw(k, r#"{"qty":1}"#)).await.unwrap();
    l.submit(&raw(k, r#"{"qty":2}"#)).await.unwrap();
    l.submit(&raw(k, r#"{"qty":3}"#)).await.unwrap();
    let options = ConsoleOptions {
        owner: actionledger::domain::Person::parse("Ana Lima").unwrap(),
        ledger_label: "test-ledger".to_owned(),
        destinations: actionledger::destination::Destinations::default(),
        refresh: Duration::from_hours(1),
        hint: None,
        filter: None,
    };
    let mut console = ScriptedConsole::start(l, &options, 100, 40).await.unwrap();
    for line in ["4", "/", k, "<Enter>", "<Enter>"] {
        console.press(line).await.unwrap();
    }
    let screen = console.screen().unwrap();
    assert!(screen.contains("what proposal 1 of 2 changes"), "{screen}");
    console.press("p").await.unwrap();
    let screen = console.screen().unwrap();
    assert!(screen.contains("what proposal 2 of 2 changes"), "{screen}");
    console.press("a").await.unwrap();
    let screen = console.screen().unwrap();
    assert!(screen.contains("Approve proposal 2 of 2") && screen.contains("the other 1 are rejected"), "{screen}");
    for line in ["qty 3 is the current order", "<Enter>", "y"] {
        console.press(line).await.unwrap();
    }
    let detail = l.detail(&key(k)).await.unwrap();
    assert_eq!((detail.action.state, detail.action.payload.canonical()), (State::Pending, r#"{"qty":3}"#));
    let decisions: Vec<_> = detail.proposals.iter().map(|p| (p.payload.canonical().to_owned(), p.decision)).collect();
    assert_eq!(
        decisions,
        [
            (r#"{"qty":2}"#.to_owned(), Some(ProposalDecision::Rejected)),
            (r#"{"qty":3}"#.to_owned(), Some(ProposalDecision::Approved))
        ]
    );
}

/// From the command line: `show` lists every proposal waiting, `approve` without `--proposal` is
/// refused while several wait (exit 3, nothing changes), and `--proposal` with the short
/// fingerprint approves that one.
#[test]
fn the_cli_lists_every_proposal_and_approves_the_one_named() {
    use std::process::Command;
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("ledger.db").display());
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_actionledger"))
            .current_dir(dir.path())
            .env_remove("ACTIONLEDGER_DB")
            .env("NO_COLOR", "1")
            .args(["--db", &db])
            .args(args)
            .output()
            .unwrap()
    };
    let k = "acme:order:ORD-7:create-task";
    for (qty, event) in [(1, "evt-1"), (2, "evt-2"), (3, "evt-3")] {
        let payload = format!(r#"{{"qty":{qty}.0}}"#);
        run(&["submit", "--key", k, "--payload", &payload, "--source", "shop", "--event-id", event]);
    }
    let shown = String::from_utf8_lossy(&run(&["show", k]).stdout).into_owned();
    assert!(shown.contains("2 proposed payloads waiting"), "{shown}");
    assert!(shown.contains("proposed payload 1 of 2") && shown.contains("proposed payload 2 of 2"), "{shown}");
    let json: serde_json::Value = serde_json::from_slice(&run(&["show", k, "--json"]).stdout).unwrap();
    assert_eq!(json["proposals_waiting"], 2);
    let third = json["proposals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["payload"]["qty"] == 3)
        .and_then(|p| p["fingerprint"].as_str())
        .unwrap()
        .to_owned();

    let refused = run(&["approve", k, "--owner", "ana", "--reason", "which one?"]);
    assert_eq!(refused.status.code(), Some(3));
    let message = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(message.contains("2 proposed payloads are waiting") && message.contains("--proposal"), "{message}");

    let approved = run(&["approve", k, "--owner", "ana", "--reason", "qty 3", "--proposal", &third[..12]]);
    assert_eq!(approved.status.code(), Some(0), "{}", String::from_utf8_lossy(&approved.stderr));
    let json: serde_json::Value = serde_json::from_slice(&run(&["show", k, "--json"]).stdout).unwrap();
    assert_eq!(json["action"]["payload"], serde_json::json!({ "qty": 3 }));
    assert_eq!(json["proposals_waiting"], 0);
    let decisions: Vec<&str> =
        json["proposals"].as_array().unwrap().iter().map(|p| p["decision"].as_str().unwrap()).collect();
    assert_eq!(decisions, ["rejected", "approved"]);
}
