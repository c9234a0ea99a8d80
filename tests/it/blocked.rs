//! Nothing waits unseen: a follow-up submitted `--after` an action that was cancelled or failed
//! never runs by itself, and every front end (`list`, `show`, `stats`, the HTTP document, the
//! console) says it is blocked and why, from the ledger's one answer, on both stores.

use crate::support::{TestDb, order, person_request, run_cli};
use actionledger::console::{ConsoleOptions, ScriptedConsole};
use actionledger::destination::Destinations;
use actionledger::domain::{ActionKey, Evidence, ManualCommand, Person, RawSubmission, State};
use actionledger::ledger::{Ledger, Outcome, Report};
use actionledger::store::{ListFilter, Store};
use serde_json::Value;
use std::time::Duration;

conformance!(
    a_dependent_of_a_cancelled_or_failed_action_is_blocked_on_every_read,
    the_console_marks_a_blocked_action_and_cancels_it,
);

const TASK: &str = "shop:order:1:create-task";
const MAIL: &str = "shop:order:1:send-confirmation";
const FAILED_TASK: &str = "shop:order:2:create-task";
const FAILED_MAIL: &str = "shop:order:2:send-confirmation";
const WAITING_MAIL: &str = "shop:order:3:send-confirmation";

fn after(key: &str, predecessor: &str) -> RawSubmission {
    RawSubmission { after: Some(predecessor.to_owned()), ..order(key, r#"{"mail":"confirmation"}"#) }
}

/// Order 1's task cancelled and order 2's task failed, each with a confirmation waiting on it;
/// order 3's confirmation waits on a task not recorded yet, which is no reason to call it blocked.
async fn blocked_pairs<S: Store>(ledger: &Ledger<S>) {
    ledger.submit(&order(FAILED_TASK, r#"{"task":2}"#)).await.unwrap();
    ledger.submit(&after(FAILED_MAIL, FAILED_TASK)).await.unwrap();
    // The only action a worker can claim: the confirmations wait for their tasks.
    let claim = ledger.claim("worker-1", Duration::from_secs(30), 1).await.unwrap().pop().unwrap();
    assert_eq!(claim.action.key.as_str(), FAILED_TASK);
    let attempt = ledger.start_attempt(&claim).await.unwrap();
    let report = Report {
        outcome: Outcome::Failed { permanent: true },
        error: Some("HTTP 422".into()),
        evidence: Evidence::default(),
    };
    ledger.record_result(&claim, attempt, &report).await.unwrap();
    ledger.submit(&order(TASK, r#"{"task":1}"#)).await.unwrap();
    ledger.submit(&after(MAIL, TASK)).await.unwrap();
    ledger.manual(&person_request(TASK, ManualCommand::Cancel)).await.unwrap();
    ledger.submit(&after(WAITING_MAIL, "shop:order:3:create-task")).await.unwrap();
}

fn json(url: &str, args: &[&str]) -> Value {
    let output = run_cli(url, args);
    assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

fn text(url: &str, args: &[&str]) -> String {
    let output = run_cli(url, args);
    assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

async fn a_dependent_of_a_cancelled_or_failed_action_is_blocked_on_every_read<S: Store>(db: TestDb<S>) {
    blocked_pairs(&db.ledger).await;
    let url = db.url.as_str();
    let reason = |predecessor: &str, state: &str| format!("waits on {predecessor}, which is {state}");

    // The ledger's one answer.
    let actions = db.ledger.list(&ListFilter { limit: 100, ..ListFilter::default() }).await.unwrap();
    let blocked = db.ledger.blocked_among(&actions).await.unwrap();
    let keys: Vec<&str> = blocked.keys().map(ActionKey::as_str).collect();
    assert_eq!(keys, [MAIL, FAILED_MAIL], "only the confirmations waiting on a cancelled or failed task");
    assert_eq!(blocked[&ActionKey::parse(MAIL).unwrap()].after_state, State::Cancelled);

    // `list --json`: every action carries `blocked`, null where it is not.
    let listed = json(url, &["list", "--json"]);
    let listed = listed["actions"].as_array().unwrap();
    let find = |key: &str| listed.iter().find(|a| a["key"] == key).unwrap_or_else(|| panic!("{key} listed"));
    assert_eq!(find(MAIL)["state"], "pending");
    assert_eq!(find(MAIL)["attempts"], 0);
    assert_eq!(find(MAIL)["blocked"]["after"], TASK);
    assert_eq!(find(MAIL)["blocked"]["after_state"], "cancelled");
    assert_eq!(find(MAIL)["blocked"]["reason"], reason(TASK, "cancelled"));
    assert_eq!(find(FAILED_MAIL)["blocked"]["reason"], reason(FAILED_TASK, "failed"));
    for key in [TASK, FAILED_TASK, WAITING_MAIL] {
        assert_eq!(find(key)["blocked"], Value::Null, "{key} is not blocked");
    }
    // The text list marks it after the key.
    let list = text(url, &["list"]);
    let line = list.lines().find(|l| l.contains(MAIL)).unwrap();
    assert!(line.contains(&format!("[BLOCKED: {}]", reason(TASK, "cancelled"))), "{list}");
    assert!(!list.lines().find(|l| l.contains(WAITING_MAIL)).unwrap().contains("BLOCKED"), "{list}");

    // `show --json` and `show`, with what the person can do.
    let shown = json(url, &["show", MAIL, "--json"]);
    assert_eq!(shown["action"]["blocked"]["reason"], reason(TASK, "cancelled"));
    assert_eq!(json(url, &["show", WAITING_MAIL, "--json"])["action"]["blocked"], Value::Null);
    let show = text(url, &["show", MAIL]);
    assert!(show.contains(&reason(TASK, "cancelled")) && show.contains("it can never run: cancel it"), "{show}");
    let show = text(url, &["show", FAILED_MAIL]);
    assert!(show.contains(&format!("retry that (actionledger retry {FAILED_TASK}")), "{show}");
    // What the HTTP API answers is the same document.
    let detail = db.ledger.detail(&ActionKey::parse(MAIL).unwrap()).await.unwrap();
    assert_eq!(actionledger::document::detail(&detail)["action"]["blocked"], shown["action"]["blocked"]);

    // `stats`: the count, as JSON and text.
    let stats = json(url, &["stats", "--json"]);
    assert_eq!((stats["blocked"].as_i64(), stats["states"]["pending"].as_i64()), (Some(2), Some(3)), "{stats}");
    assert!(text(url, &["stats"]).contains("blocked (waiting on a cancelled or failed action): 2"));

    // Retrying the failed task unblocks its confirmation; cancelling the other one ends its wait.
    db.ledger.manual(&person_request(FAILED_TASK, ManualCommand::Retry)).await.unwrap();
    db.ledger.manual(&person_request(MAIL, ManualCommand::Cancel)).await.unwrap();
    assert_eq!(db.ledger.stats().await.unwrap().blocked, 0);
    let shown = json(url, &["show", FAILED_MAIL, "--json"]);
    assert_eq!(shown["action"]["blocked"], Value::Null, "its task is pending again");
}

async fn the_console_marks_a_blocked_action_and_cancels_it<S: Store>(db: TestDb<S>) {
    blocked_pairs(&db.ledger).await;
    let options = ConsoleOptions {
        owner: Person::parse("Ana Lima").unwrap(),
        ledger_label: "test-ledger".to_owned(),
        destinations: Destinations::default(),
        refresh: Duration::from_hours(1),
        hint: None,
        filter: None,
    };
    let mut console = ScriptedConsole::start(&db.ledger, &options, 120, 40).await.unwrap();
    console.press("1").await.unwrap();
    let screen = console.screen().unwrap();
    let marked = |key: &str| screen.lines().any(|l| l.contains(&format!("[BLOCKED] {key}")));
    assert!(marked(MAIL) && marked(FAILED_MAIL), "the pending pane marks both:\n{screen}");
    assert!(!marked(WAITING_MAIL), "a task not recorded yet blocks nothing:\n{screen}");
    for line in ["/", MAIL, "<Enter>", "<Enter>"] {
        console.press(line).await.unwrap();
    }
    let screen = console.screen().unwrap();
    assert!(screen.contains(&format!("BLOCKED: waits on {TASK}, which is cancelled")), "{screen}");
    assert!(screen.contains("cancel it (x)"), "{screen}");
    for line in ["x", "the order was withdrawn", "<Enter>", "y"] {
        console.press(line).await.unwrap();
    }
    let detail = db.ledger.detail(&ActionKey::parse(MAIL).unwrap()).await.unwrap();
    assert_eq!(detail.action.state, State::Cancelled, "{}", console.screen().unwrap());
    assert_eq!(detail.audit.last().unwrap().actor, "Ana Lima");
    assert_eq!(detail.blocked, None);
}
