//! Drives the built `actionledger` binary: stdout, `--json` shape and exit codes of each command.

use crate::support;
use actionledger::domain::RawSubmission;
use actionledger::ledger::{Outcome, Recorded, Report};
use serde_json::Value;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_actionledger");

fn actionledger(dir: &Path, db: Option<&str>, args: &[&str]) -> Output {
    let mut command = Command::new(BIN);
    command.current_dir(dir).env_remove("ACTIONLEDGER_DB").env_remove("DATABASE_URL").env("NO_COLOR", "1");
    if let Some(db) = db {
        command.args(["--db", db]);
    }
    command.args(args).output().expect("run actionledger")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(output)))
}

struct Workspace {
    dir: tempfile::TempDir,
    db: String,
}

impl Workspace {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let db = format!("sqlite://{}", dir.path().join("ledger.db").display());
        Self { dir, db }
    }

    fn run(&self, args: &[&str]) -> Output {
        actionledger(self.dir.path(), Some(&self.db), args)
    }
}

const KEY: &str = "acme:order:ORD-1042:create-task";

#[test]
fn submit_prints_each_outcome_with_its_exit_code() {
    let ws = Workspace::new();
    let submit = |payload: &str, version: &str| {
        ws.run(&["submit", "--key", KEY, "--payload", payload, "--source", "shop", "--source-version", version])
    };
    let created = submit(r#"{"qty":2}"#, "3");
    assert_eq!((stdout(&created).as_str(), created.status.code()), ("created\n", Some(0)), "{}", stderr(&created));
    let duplicate = submit(r#"{ "qty": 2 }"#, "3");
    assert_eq!((stdout(&duplicate).as_str(), duplicate.status.code()), ("duplicate\n", Some(0)));
    assert!(stderr(&duplicate).contains("nothing else changed"));
    let stale = submit(r#"{"qty":1}"#, "2");
    assert_eq!((stdout(&stale).as_str(), stale.status.code()), ("stale\n", Some(0)));
    let conflict = submit(r#"{"qty":5}"#, "4");
    assert_eq!((stdout(&conflict).as_str(), conflict.status.code()), ("conflict\n", Some(3)));
    assert!(stderr(&conflict).contains("approve"), "{}", stderr(&conflict));

    let shown = json(&ws.run(&["show", KEY, "--json"]));
    assert_eq!(shown["action"]["state"], "conflict");
    assert_eq!(shown["action"]["payload"]["qty"], 2);
    assert_eq!(shown["action"]["proposed_payload"]["qty"], 5);
    assert_eq!(shown["deliveries"].as_array().unwrap().len(), 4);
    assert_eq!(shown["deliveries"][1]["outcome"], "duplicate");
    assert_eq!(shown["audit"][0]["event"], "submitted");

    let as_json = json(&ws.run(&["submit", "--key", "other", "--payload", "{}", "--json"]));
    assert_eq!(as_json["outcome"], "created");
    assert_eq!(as_json["action"]["key"], "other");
    assert_eq!(as_json["action"]["version"], 1);
}

#[test]
fn refused_submissions_exit_3_name_the_problem_and_are_listed() {
    let ws = Workspace::new();
    let cases: [(&[&str], &str); 5] = [
        (&["submit", "--payload", "{}"], "key is missing"),
        (&["submit", "--key", "acme:jane@example.com", "--payload", "{}"], "e-mail address"),
        (&["submit", "--key", "a b", "--payload", "{}"], "whitespace"),
        (&["submit", "--key", "k", "--payload", "{oops"], "not valid JSON"),
        (&["submit", "--key", "k"], "payload is missing"),
    ];
    for (args, problem) in cases {
        let out = ws.run(args);
        assert_eq!(out.status.code(), Some(3), "{args:?}");
        assert!(stderr(&out).contains(problem), "{args:?}: {}", stderr(&out));
        assert!(stdout(&out).is_empty());
    }
    let listed = json(&ws.run(&["list", "--json"]));
    assert_eq!(listed["actions"].as_array().unwrap().len(), 0, "nothing written");
    let refused = json(&ws.run(&["list", "--refused", "--json"]));
    let refused = refused["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 5);
    assert_eq!(refused[3]["key"], "<withheld: contained an e-mail address>");
    assert_eq!(refused[4]["problem"], "key_missing");
    let human = stdout(&ws.run(&["list", "--refused"]));
    assert!(human.contains("key_contains_email") && !human.contains("jane"), "{human}");
}

#[test]
fn payload_from_a_file_and_from_stdin() {
    let ws = Workspace::new();
    let file = ws.dir.path().join("payload.json");
    std::fs::write(&file, br#"{"from":"file"}"#).unwrap();
    let at_file = format!("@{}", file.display());
    assert_eq!(ws.run(&["submit", "--key", "f", "--payload", &at_file]).status.code(), Some(0));
    let mut child = Command::new(BIN)
        .args(["--db", &ws.db, "submit", "--key", "s", "--payload", "@-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(br#"{"from":"stdin"}"#).unwrap();
    assert!(child.wait_with_output().unwrap().status.success());
    assert_eq!(json(&ws.run(&["show", "s", "--json"]))["action"]["payload"]["from"], "stdin");
    let missing = ws.run(&["submit", "--key", "m", "--payload", "@/no/such/file.json"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(stderr(&missing).contains("cannot read the payload file"));
}

#[test]
fn manual_commands_are_refused_with_the_states_that_allow_them() {
    let ws = Workspace::new();
    ws.run(&["submit", "--key", KEY, "--payload", "{}"]);
    let retry = ws.run(&["retry", KEY, "--owner", "ana", "--reason", "customer called"]);
    assert_eq!(retry.status.code(), Some(3));
    let message = stderr(&retry);
    assert!(message.contains("it is pending") && message.contains("failed, unknown, held, conflict"), "{message}");

    let stale = ws.run(&["cancel", KEY, "--owner", "ana", "--reason", "duplicate order", "--expect-version", "7"]);
    assert_eq!(stale.status.code(), Some(3));
    assert!(stderr(&stale).contains("changed since you read it"));

    let cancelled =
        ws.run(&["cancel", KEY, "--owner", "ana", "--reason", "duplicate order", "--expect-version", "1", "--json"]);
    assert_eq!(cancelled.status.code(), Some(0), "{}", stderr(&cancelled));
    let body = json(&cancelled);
    assert_eq!(
        (body["from"].as_str(), body["to"].as_str(), body["by"].as_str()),
        (Some("pending"), Some("cancelled"), Some("ana"))
    );
    assert_eq!(body["action"]["key"], KEY);

    let shown = stdout(&ws.run(&["show", KEY]));
    assert!(
        shown.contains("cancelled") && shown.contains("by person ana") && shown.contains("duplicate order"),
        "{shown}"
    );
}

#[test]
fn usage_errors_exit_2_and_unknown_keys_exit_4() {
    let ws = Workspace::new();
    ws.run(&["submit", "--key", KEY, "--payload", "{}"]);
    let no_owner = ws.run(&["retry", KEY, "--reason", "x"]);
    assert_eq!(no_owner.status.code(), Some(2));
    let no_reason = ws.run(&["retry", KEY, "--owner", "ana", "--reason", "  "]);
    assert_eq!(no_reason.status.code(), Some(2));
    assert!(stderr(&no_reason).contains("reason is required"));
    let no_id = ws.run(&["resolve", KEY, "--owner", "ana", "--reason", "seen", "--as", "completed"]);
    assert_eq!(no_id.status.code(), Some(2));
    assert!(stderr(&no_id).contains("--destination-id"));
    assert_eq!(ws.run(&["list", "--state", "done"]).status.code(), Some(2));
    assert_eq!(ws.run(&["list", "--limit", "0"]).status.code(), Some(2));
    let missing = ws.run(&["show", "acme:nothing"]);
    assert_eq!(missing.status.code(), Some(4));
    assert!(stderr(&missing).contains("no action with key acme:nothing"));
    let bad_url = ws.run(&["--db", "mysql://x", "list"]);
    assert_eq!(bad_url.status.code(), Some(2));
}

#[test]
fn list_pages_newest_first() {
    let ws = Workspace::new();
    for n in 0..5 {
        ws.run(&["submit", "--key", &format!("k{n}"), "--payload", "{}", "--destination", "crm"]);
    }
    let first = json(&ws.run(&["list", "--limit", "2", "--json"]));
    let keys: Vec<&str> = first["actions"].as_array().unwrap().iter().map(|a| a["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["k4", "k3"]);
    let cursor = first["next_before"].as_i64().unwrap().to_string();
    let second = json(&ws.run(&["list", "--limit", "2", "--before", &cursor, "--json"]));
    assert_eq!(second["actions"][0]["key"], "k2");
    let human = stdout(&ws.run(&["list", "--limit", "2", "--state", "pending", "--destination", "crm"]));
    assert!(human.contains("k4") && human.contains("more: --before"), "{human}");
}

#[test]
fn database_url_comes_from_flag_then_environment_then_default() {
    let dir = tempfile::tempdir().unwrap();
    let env_db = format!("sqlite://{}", dir.path().join("env.db").display());
    let fallback_db = format!("sqlite://{}", dir.path().join("fallback.db").display());
    let run = |envs: &[(&str, &str)], args: &[&str]| {
        let mut command = Command::new(BIN);
        command.current_dir(dir.path()).env_remove("ACTIONLEDGER_DB").env_remove("DATABASE_URL");
        for (name, value) in envs {
            command.env(name, value);
        }
        command.args(args).output().unwrap()
    };
    run(&[], &["submit", "--key", "default", "--payload", "{}"]);
    assert!(dir.path().join("actionledger.db").exists(), "default is ./actionledger.db");
    run(
        &[("ACTIONLEDGER_DB", &env_db), ("DATABASE_URL", &fallback_db)],
        &["submit", "--key", "env", "--payload", "{}"],
    );
    run(&[("DATABASE_URL", &fallback_db)], &["submit", "--key", "fallback", "--payload", "{}"]);
    let show = |db: &str, key: &str| run(&[], &["--db", db, "show", key]).status.code();
    assert_eq!(show(&env_db, "env"), Some(0));
    assert_eq!(show(&fallback_db, "fallback"), Some(0));
    assert_eq!(show(&env_db, "fallback"), Some(4));
}

#[test]
fn commands_that_need_a_ledger_never_create_one() {
    let ws = Workspace::new();
    let ledger = ws.dir.path().join("ledger.db");
    let script = ws.dir.path().join("look.keys");
    std::fs::write(&script, "q\n").unwrap();
    let script = script.to_str().unwrap();
    for args in [
        &["list"][..],
        &["show", KEY],
        &["retry", KEY, "--owner", "ana", "--reason", "typo in --db"],
        &["review", "--owner", "ana", "--script", script],
    ] {
        let output = ws.run(args);
        assert_eq!(output.status.code(), Some(4), "{args:?}: {}", stderr(&output));
        let said = stderr(&output);
        assert!(said.contains(&format!("no ledger at {}", ws.db)) && said.contains("actionledger migrate"), "{said}");
        assert!(!ledger.exists(), "{args:?} created the ledger");
    }
    assert_eq!(ws.run(&["submit", "--key", KEY, "--payload", "{}"]).status.code(), Some(0));
    assert_eq!(ws.run(&["list"]).status.code(), Some(0), "a command that writes created it");
}

#[test]
fn the_console_without_a_terminal_says_so_and_writes_nothing_to_the_screen() {
    let ws = Workspace::new();
    ws.run(&["submit", "--key", KEY, "--payload", "{}"]);
    for args in [&["review", "--owner", "ana"][..], &["demo"]] {
        let output = ws.run(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {}", stderr(&output));
        assert!(stderr(&output).contains("needs a terminal"), "{}", stderr(&output));
        assert!(output.stdout.is_empty(), "no escape sequence reaches a redirected output");
    }
}

/// Runs `review --script` with `script` (and `extra` arguments) and returns the output.
fn review_script(ws: &Workspace, script: &str, extra: &[&str]) -> Output {
    let path = ws.dir.path().join("session.keys");
    std::fs::write(&path, script).unwrap();
    let mut args = vec!["review", "--owner", "ana", "--script", path.to_str().unwrap(), "--size", "80x24"];
    args.extend_from_slice(extra);
    ws.run(&args)
}

fn state_of(ws: &Workspace, key: &str) -> String {
    json(&ws.run(&["show", key, "--json"]))["action"]["state"].as_str().unwrap().to_owned()
}

#[test]
fn a_bad_script_is_refused_naming_its_line_and_runs_nothing() {
    let ws = Workspace::new();
    ws.run(&["submit", "--key", KEY, "--payload", "{}"]);
    // Without the check, `<Enter` was typed as text and the `y` below cancelled the action.
    let cases = [
        ("1\nx\norder withdrawn<Enter\n<Enter>\ny\n", "script line 3: `<Enter` is not closed"),
        ("1\nx\norder withdrawn\n<Retrun>\ny\n", "script line 4: unknown key <Retrun>"),
    ];
    for (script, said) in cases {
        let output = review_script(&ws, script, &[]);
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(stderr(&output).contains(said), "{}", stderr(&output));
        assert!(output.stdout.is_empty(), "no screen: nothing ran");
        assert_eq!(state_of(&ws, KEY), "pending");
    }
    // Comments, empty lines, `<#>` and key names in any case.
    let script = "# cancel the duplicate\n\n1\nx\nduplicate of <#>1041<enter>\n# then confirm\nY\n";
    let output = review_script(&ws, script, &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(state_of(&ws, KEY), "cancelled");
    let shown = json(&ws.run(&["show", KEY, "--json"]));
    let reasons = shown["audit"].as_array().unwrap().iter().filter_map(|e| e["reason"].as_str()).collect::<Vec<_>>();
    assert!(reasons.contains(&"duplicate of #1041"), "{reasons:?}");
}

#[test]
fn a_script_whose_command_is_refused_exits_3_and_stops_at_that_line() {
    let ws = Workspace::new();
    ws.run(&["submit", "--key", KEY, "--payload", "{}"]);
    // `r` on a pending action is refused; the cancel after it must not run.
    let output = review_script(&ws, "1\n# retry it\nr\nx\nwithdrawn<Enter>\ny\n", &[]);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let said = stderr(&output);
    assert!(said.contains("script line 3 (r): cannot retry") && said.contains("it is pending"), "{said}");
    assert!(stdout(&output).contains(KEY), "the final screen is printed");
    assert_eq!(state_of(&ws, KEY), "pending");
}

#[test]
fn keys_after_the_console_quit_stop_the_script_with_an_error_and_run_nothing() {
    let ws = Workspace::new();
    ws.run(&["submit", "--key", KEY, "--payload", "{}"]);
    // An indented comment is a comment: typed as keys, its `x` would have opened a cancel.
    let script = "1\n  # then quit, and cancel (never reached)\nq\nx\nwithdrawn<Enter>\ny\n";
    let output = review_script(&ws, script, &[]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let said = stderr(&output);
    assert!(said.contains("script line 4 (x): the console quit at line 3 (q)"), "{said}");
    assert_eq!(state_of(&ws, KEY), "pending");
    // Keys after q on its own line too.
    let output = review_script(&ws, "1\nqx\n", &[]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("the console quit (q) before the 1 key(s) after it"), "{}", stderr(&output));
    // A script that ends with q is fine.
    let output = review_script(&ws, "1\n    # done\nq\n", &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}

#[test]
fn a_script_that_ends_inside_a_dialog_says_so_and_strict_makes_it_fail() {
    let ws = Workspace::new();
    ws.run(&["submit", "--key", KEY, "--payload", "{}"]);
    let script = "1\nx\nhalf a reason\n";
    let output = review_script(&ws, script, &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let said = stderr(&output);
    assert!(said.contains(&format!("ended inside an open dialog: cancel on {KEY}, waiting for a reason")), "{said}");
    assert!(stdout(&output).contains("half a reason"), "the dialog's screen is printed");
    let output = review_script(&ws, script, &["--strict"]);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert!(stderr(&output).contains("ended inside an open dialog"), "{}", stderr(&output));
    let output = review_script(&ws, "1\nx\n<Esc>\n", &["--strict"]);
    assert_eq!(output.status.code(), Some(0), "a closed dialog is fine: {}", stderr(&output));
    assert_eq!(state_of(&ws, KEY), "pending");
}

#[test]
fn the_demo_removes_its_directory_when_it_ends() {
    let tmp = tempfile::tempdir().unwrap();
    let demo_dirs = || {
        std::fs::read_dir(tmp.path())
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .filter(|name| name.starts_with("actionledger-demo-"))
            .collect::<Vec<_>>()
    };
    let output = Command::new(BIN)
        .args(["demo", "--no-ui", "--json"])
        .env("TMPDIR", tmp.path())
        .env("NO_COLOR", "1")
        .env_remove("ACTIONLEDGER_DB")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(json(&output)["crm_records"].as_u64().unwrap() > 0, "the demo ran");
    assert_eq!(demo_dirs(), Vec::<String>::new(), "removed after a normal end");
}

#[test]
fn sixteen_submits_at_once_on_a_new_ledger_all_succeed() {
    let ws = Workspace::new();
    let children: Vec<_> = (0..16)
        .map(|n| {
            Command::new(BIN)
                .current_dir(ws.dir.path())
                .env_remove("ACTIONLEDGER_DB")
                .env_remove("DATABASE_URL")
                .args(["--db", &ws.db, "submit", "--key", &format!("first-day:{n}"), "--payload", "{}"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start actionledger")
        })
        .collect();
    for child in children {
        let output = child.wait_with_output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        assert_eq!(stdout(&output), "created\n");
    }
    let listed = json(&ws.run(&["list", "--json"]));
    assert_eq!(listed["actions"].as_array().unwrap().len(), 16);
}

#[tokio::test]
async fn a_person_resolves_a_failed_and_an_unknown_action_from_the_cli() {
    let ws = Workspace::new();
    {
        let store = actionledger::store::SqliteStore::open(&ws.db).await.unwrap();
        let ledger = actionledger::Ledger::new(store);
        for (key, outcome) in [("acme:failed", Outcome::Failed { permanent: true }), ("acme:unknown", Outcome::Unknown)]
        {
            let raw = RawSubmission { key: Some(key.into()), payload: b"{}".to_vec(), ..Default::default() };
            ledger.submit(&raw).await.unwrap();
            let claim = ledger.claim("worker-1", Duration::from_secs(30), 1).await.unwrap().pop().unwrap();
            let attempt = ledger.start_attempt(&claim).await.unwrap();
            let report =
                Report { outcome, error: Some("HTTP 422".into()), evidence: actionledger::domain::Evidence::default() };
            ledger.record_result(&claim, attempt, &report).await.unwrap();
        }
    }
    let retried = ws.run(&["retry", "acme:failed", "--owner", "ana", "--reason", "fixed the address"]);
    assert_eq!(retried.status.code(), Some(0), "{}", stderr(&retried));
    assert!(stdout(&retried).contains("failed -> pending"));
    let resolved = ws.run(&[
        "resolve",
        "acme:unknown",
        "--owner",
        "ana",
        "--reason",
        "found it in the CRM",
        "--as",
        "completed",
        "--destination-id",
        "CRM-881",
    ]);
    assert_eq!(resolved.status.code(), Some(0), "{}", stderr(&resolved));
    let shown = json(&ws.run(&["show", "acme:unknown", "--json"]));
    assert_eq!(shown["action"]["state"], "completed");
    assert_eq!(shown["action"]["destination_id"], "CRM-881");
    let last = shown["audit"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((last["actor"].as_str(), last["actor_kind"].as_str()), (Some("ana"), Some("person")));
    assert_eq!(last["event"], "resolved_completed");
}

#[tokio::test]
async fn the_cli_works_against_postgresql() {
    let Some(url) = support::pg::fresh_database().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let created = actionledger(dir.path(), Some(&url), &["submit", "--key", KEY, "--payload", "{}"]);
    assert_eq!(stdout(&created), "created\n", "{}", stderr(&created));
    let shown = json(&actionledger(dir.path(), Some(&url), &["show", KEY, "--json"]));
    assert_eq!(shown["action"]["state"], "pending");
    let migrated = actionledger(dir.path(), Some(&url), &["migrate"]);
    assert!(stdout(&migrated).contains("up to date"));
    assert!(!stdout(&migrated).contains("password"), "no secret printed");
}

#[tokio::test]
async fn approve_reject_and_takeover_from_the_cli() {
    let ws = Workspace::new();
    let example = |name: &str| format!("@{}/assets/examples/{name}", env!("CARGO_MANIFEST_DIR"));
    let submit = |key: &str, file: &str| ws.run(&["submit", "--key", key, "--payload", &example(file)]);
    for key in ["acme:approve-me", "acme:reject-me"] {
        assert_eq!(stdout(&submit(key, "order-ORD-1042.json")), "created\n");
        assert_eq!(stdout(&submit(key, "order-ORD-1042-changed.json")), "conflict\n");
    }
    let approved = ws.run(&["approve", "acme:approve-me", "--owner", "ana", "--reason", "qty change confirmed"]);
    assert!(stdout(&approved).contains("conflict -> pending"), "{}", stderr(&approved));
    let shown = json(&ws.run(&["show", "acme:approve-me", "--json"]));
    assert_eq!(shown["action"]["payload"]["items"][0]["qty"], 3);
    let rejected = ws.run(&["reject", "acme:reject-me", "--owner", "ana", "--reason", "old form"]);
    assert!(stdout(&rejected).contains("conflict -> pending"), "{}", stderr(&rejected));
    let shown = json(&ws.run(&["show", "acme:reject-me", "--json"]));
    assert_eq!(shown["action"]["payload"]["items"][0]["qty"], 2);
    assert_eq!(shown["action"]["proposed_payload"], Value::Null);
    let again = ws.run(&["reject", "acme:reject-me", "--owner", "ana", "--reason", "twice"]);
    assert_eq!(again.status.code(), Some(3));
    assert!(stderr(&again).contains("no proposed payload"));

    // A claim whose lease ran out in real time (a short lease, then a short wait).
    let live = ws.run(&["takeover", "acme:approve-me", "--owner", "ana", "--reason", "worker died"]);
    assert_eq!(live.status.code(), Some(3), "pending is not a claim");
    {
        let ledger = actionledger::Ledger::new(actionledger::store::SqliteStore::open(&ws.db).await.unwrap());
        let claim = ledger.claim("worker-1", Duration::from_millis(50), 1).await.unwrap().pop().unwrap();
        ledger.start_attempt(&claim).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(120)).await;
    let taken = ws.run(&["takeover", "acme:approve-me", "--owner", "ana", "--reason", "worker died", "--json"]);
    assert_eq!(taken.status.code(), Some(0), "{}", stderr(&taken));
    let body = json(&taken);
    assert_eq!((body["from"].as_str(), body["to"].as_str()), (Some("in_progress"), Some("held")));
    assert_eq!(body["action"]["ownership_version"], 2);
}

#[tokio::test]
async fn a_new_version_of_a_completed_order_is_approved_as_an_update_from_the_cli() {
    let ws = Workspace::new();
    let submit = |payload: &str| ws.run(&["submit", "--key", KEY, "--payload", payload, "--destination", "crm"]);
    assert_eq!(stdout(&submit(r#"{"qty":1}"#)), "created\n");
    // A worker completes it as record R-1.
    {
        let ledger = actionledger::Ledger::new(actionledger::store::SqliteStore::open(&ws.db).await.unwrap());
        let claim = ledger.claim("worker-1", Duration::from_secs(30), 1).await.unwrap().pop().unwrap();
        let attempt = ledger.start_attempt(&claim).await.unwrap();
        let done = Report {
            outcome: Outcome::Completed { destination_id: "R-1".into() },
            error: None,
            evidence: actionledger::domain::Evidence::default(),
        };
        ledger.record_result(&claim, attempt, &done).await.unwrap();
    }
    let changed = submit(r#"{"qty":2}"#);
    assert_eq!((stdout(&changed).as_str(), changed.status.code()), ("conflict\n", Some(3)));
    assert!(stderr(&changed).contains("the action is completed"), "{}", stderr(&changed));
    let listed = ws.run(&["list"]);
    assert!(stdout(&listed).contains("completed*"), "a proposal is marked in the list:\n{}", stdout(&listed));
    let shown = ws.run(&["show", KEY]);
    assert!(stdout(&shown).contains("approving it records the update action"), "{}", stdout(&shown));

    let approved = ws.run(&["approve", KEY, "--owner", "ana", "--reason", "the customer changed the quantity"]);
    assert_eq!(approved.status.code(), Some(0), "{}", stderr(&approved));
    let update_key = format!("{KEY}#update-2");
    assert!(stdout(&approved).contains(&update_key), "{}", stdout(&approved));

    let original = json(&ws.run(&["show", KEY, "--json"]));
    assert_eq!(original["action"]["state"], "completed");
    assert_eq!(original["action"]["payload"]["qty"], 1, "it keeps what the destination holds");
    assert_eq!(original["action"]["payload_revision"], 1);
    assert_eq!(original["action"]["proposed_payload"], Value::Null);
    assert_eq!(original["updates"][0]["key"].as_str(), Some(format!("{KEY}#update-2").as_str()));
    assert_eq!(original["updates"][0]["state"], "pending");
    let approval = original["audit"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((approval["event"].as_str(), approval["to"].as_str()), (Some("approved"), Some("completed")));
    assert!(approval["reason"].as_str().unwrap().contains("payload revision 1"), "{approval}");

    let update = json(&ws.run(&["show", &update_key, "--json"]));
    assert_eq!(update["action"]["state"], "pending");
    assert_eq!(update["action"]["updates"], KEY);
    assert_eq!(update["action"]["updates_destination_id"], "R-1");
    assert_eq!(update["action"]["destination"], "crm");
    assert_eq!(update["action"]["payload"]["qty"], 2);
    assert_eq!(update["audit"][0]["actor"], "ana");
    let text = stdout(&ws.run(&["show", &update_key]));
    assert!(text.contains(&format!("updates            {KEY} (destination id R-1)")), "{text}");

    let again = submit(r#"{"qty":2}"#);
    assert_eq!((stdout(&again).as_str(), again.status.code()), ("duplicate\n", Some(0)), "the new version is approved");
}

/// Rules 5 and 8 from the command line: a retry after an unsafe takeover needs
/// `--old-worker-stopped`; a late result is marked in `list`, listed in `show` (text and JSON),
/// and acknowledged with `acknowledge`, once.
#[tokio::test]
async fn acknowledge_and_retry_with_the_old_worker_stopped_from_the_cli() {
    let ws = Workspace::new();
    let key = "acme:order:LATE-1:create-task";
    assert_eq!(stdout(&ws.run(&["submit", "--key", key, "--payload", "{}"])), "created\n");
    let ledger = actionledger::Ledger::new(actionledger::store::SqliteStore::open(&ws.db).await.unwrap());
    let claim = ledger.claim("worker-a", Duration::from_millis(50), 1).await.unwrap().pop().unwrap();
    let attempt = ledger.start_attempt(&claim).await.unwrap();
    tokio::time::sleep(Duration::from_millis(120)).await;
    let taken = ws.run(&["takeover", key, "--owner", "ana", "--reason", "worker-a hung"]);
    assert!(stdout(&taken).contains("in_progress -> held"), "{}", stderr(&taken));

    let refused = ws.run(&["retry", key, "--owner", "ana", "--reason", "CRM has nothing"]);
    assert_eq!(refused.status.code(), Some(3), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("the old worker may still send its request"), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("--old-worker-stopped"), "{}", stderr(&refused));
    assert!(json(&ws.run(&["show", key, "--json"]))["action"]["old_worker_may_act"].as_bool().unwrap());
    // The request sent under the claim may have written, and no destination is configured to
    // recognise a repeat: the person's check of the destination is asked for too (rule 6).
    let retry = ["retry", key, "--owner", "ana", "--reason", "CRM has nothing", "--old-worker-stopped"];
    let refused = ws.run(&retry);
    assert_eq!(refused.status.code(), Some(3), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("--confirm-not-written"), "{}", stderr(&refused));
    let retried = ws.run(&[&retry[..], &["--confirm-not-written"]].concat());
    assert!(stdout(&retried).contains("held -> pending"), "{}", stderr(&retried));
    let shown = json(&ws.run(&["show", key, "--json"]));
    assert_eq!(shown["action"]["old_worker_may_act"], false);
    let reason = shown["audit"].as_array().unwrap().last().unwrap()["reason"].as_str().unwrap().to_owned();
    assert!(reason.contains("the person confirmed that the old worker can no longer act"), "{reason}");
    assert!(reason.ends_with("the person confirmed that it holds no record of this action"), "{reason}");
    assert!(!shown["action"]["first_sent_at"].is_null(), "the evidence of the first send stays");

    // Worker A resumes and reports a record: late, and it contradicts a pending action.
    let late = Report {
        outcome: Outcome::Completed { destination_id: "CRM-77".into() },
        error: None,
        evidence: actionledger::domain::Evidence { destination_id: Some("CRM-77".into()), ..Default::default() },
    };
    ledger.record_result(&claim, attempt, &late).await.unwrap();
    let listed = stdout(&ws.run(&["list"]));
    assert!(listed.lines().any(|l| l.contains(key) && l.ends_with("[1 late result]")), "{listed}");
    let shown = stdout(&ws.run(&["show", key]));
    assert!(shown.contains("late results (1) waiting for acknowledgement"), "{shown}");
    assert!(shown.contains("destination id CRM-77"), "{shown}");
    let shown = json(&ws.run(&["show", key, "--json"]));
    assert_eq!(shown["action"]["state"], "conflict");
    assert_eq!(shown["late_results"][0]["evidence"]["destination_id"], "CRM-77");

    let acknowledged = ws.run(&["acknowledge", key, "--owner", "ana", "--reason", "CRM-77 is the one record"]);
    assert_eq!(acknowledged.status.code(), Some(0), "{}", stderr(&acknowledged));
    assert!(stdout(&acknowledged).contains("stays conflict"), "{}", stdout(&acknowledged));
    let shown = json(&ws.run(&["show", key, "--json"]));
    assert_eq!(shown["action"]["late_results"], 0);
    assert_eq!(shown["late_results"].as_array().unwrap().len(), 0);
    assert_eq!(shown["attempts"][0]["acknowledged_by"], "ana");
    assert_eq!(shown["audit"].as_array().unwrap().last().unwrap()["event"], "late_results_acknowledged");
    let again = ws.run(&["acknowledge", key, "--owner", "ana", "--reason", "twice"]);
    assert_eq!(again.status.code(), Some(3));
    assert!(stderr(&again).contains("has no unacknowledged late result"), "{}", stderr(&again));
}

#[test]
fn purge_keeps_a_tombstone_that_show_list_and_submit_still_know() {
    let ws = Workspace::new();
    let purge = |extra: &[&str]| {
        let mut args = vec!["purge", "--owner", "ana", "--reason", "retention policy"];
        args.extend_from_slice(extra);
        ws.run(&args)
    };
    let waiting = "acme:order:ORD-7:create-task";
    ws.run(&["submit", "--key", waiting, "--payload", r#"{"qty":1}"#]);
    ws.run(&["submit", "--key", KEY, "--payload", r#"{"qty":2}"#]);
    let cancelled = ws.run(&["cancel", KEY, "--owner", "ana", "--reason", "duplicate order"]);
    assert_eq!(cancelled.status.code(), Some(0), "{}", stderr(&cancelled));

    for (args, says) in [
        (&["--older-than", "90x"][..], "no known unit"),
        (&["--older-than", "ninety"][..], "not a duration"),
        (&["--older-than", "0d"][..], "longer than zero"),
        // Only final states are values of --states: clap refuses any other word and lists them.
        (&["--older-than", "90d", "--states", "completed,failed"][..], "[possible values: completed, cancelled]"),
        (&["--older-than", "90d", "--states", "done"][..], "invalid value 'done' for '--states <STATES>'"),
    ] {
        let refused = purge(args);
        assert_eq!(refused.status.code(), Some(2), "{args:?}: {}", stderr(&refused));
        assert!(stderr(&refused).contains(says), "{args:?}: {}", stderr(&refused));
        assert!(stdout(&refused).is_empty());
    }
    std::thread::sleep(Duration::from_millis(20));

    let dry = json(&purge(&["--older-than", "1ms", "--dry-run", "--json"]));
    assert_eq!((dry["dry_run"].as_bool(), dry["run"].is_null()), (Some(true), true));
    assert_eq!((dry["counts"]["actions"].as_i64(), dry["counts"]["deliveries"].as_i64()), (Some(1), Some(1)));
    assert!(json(&ws.run(&["show", KEY, "--json"]))["purge"].is_null(), "a dry run changes nothing");

    let run = json(&purge(&["--older-than", "1ms", "--json"]));
    assert_eq!((run["run"].as_i64(), run["counts"]["actions"].as_i64()), (Some(1), Some(1)));
    assert_eq!(run["states"], serde_json::json!(["cancelled", "completed"]));
    let again = purge(&["--older-than", "1ms"]);
    assert_eq!(again.status.code(), Some(0));
    assert!(stdout(&again).starts_with("purge run 2: reduced 0 actions"), "{}", stdout(&again));

    let shown = json(&ws.run(&["show", KEY, "--json"]));
    assert_eq!((shown["purge"]["run"].as_i64(), shown["purge"]["owner"].as_str()), (Some(1), Some("ana")));
    assert_eq!(shown["action"]["state"], "cancelled");
    assert!(shown["deliveries"].as_array().unwrap().is_empty());
    assert_eq!(shown["audit"].as_array().unwrap().len(), 2, "the audit trail is kept in full");
    let text = stdout(&ws.run(&["show", KEY]));
    assert!(text.contains("purged by purge run 1") && text.contains("duplicate order"), "{text}");
    let fingerprint = shown["action"]["fingerprint"].as_str().unwrap();
    assert!(text.contains(&format!("payload fingerprint sha256:{fingerprint}")), "{text}");
    assert!(json(&ws.run(&["show", waiting, "--json"]))["purge"].is_null(), "a pending action is never purged");
    let listed = stdout(&ws.run(&["list", "--state", "cancelled"]));
    assert!(listed.contains(KEY), "{listed}");

    let replay = ws.run(&["submit", "--key", KEY, "--payload", r#"{ "qty": 2 }"#]);
    assert_eq!((stdout(&replay).as_str(), replay.status.code()), ("duplicate\n", Some(0)));
    let changed = ws.run(&["submit", "--key", KEY, "--payload", r#"{"qty":3}"#]);
    assert_eq!((stdout(&changed).as_str(), changed.status.code()), ("conflict\n", Some(3)));
    assert!(stderr(&changed).contains("has been purged") && stderr(&changed).contains("not kept"));
    let retry = ws.run(&["retry", KEY, "--owner", "ana", "--reason", "again"]);
    assert_eq!(retry.status.code(), Some(3));
    assert!(stderr(&retry).contains("was purged by purge run 1"), "{}", stderr(&retry));
}

#[test]
fn a_payload_that_cannot_be_kept_exactly_is_refused_naming_the_field() {
    let ws = Workspace::new();
    let cases = [
        (r#"{"items":[{"qty":1},{"qty":2},{"qty":3,"qty":4}]}"#, "$.items[2].qty", "payload_duplicate_key"),
        (r#"{"id":18446744073709551617}"#, "$.id", "payload_integer_out_of_range"),
        (r#"{"x":[1e400]}"#, "$.x[0]", "payload_number_out_of_range"),
    ];
    for (payload, path, _) in cases {
        let out = ws.run(&["submit", "--key", "acme:exact", "--payload", payload]);
        assert_eq!(out.status.code(), Some(3), "{payload}: {}", stderr(&out));
        assert!(stderr(&out).contains(path), "{payload}: {}", stderr(&out));
        assert!(stdout(&out).is_empty());
    }
    let listed = json(&ws.run(&["list", "--json"]));
    assert_eq!(listed["actions"].as_array().unwrap().len(), 0, "nothing written");
    let refused = json(&ws.run(&["list", "--refused", "--json"]));
    let problems: Vec<&str> =
        refused["refused"].as_array().unwrap().iter().rev().map(|r| r["problem"].as_str().unwrap()).collect();
    assert_eq!(problems, cases.map(|(_, _, problem)| problem));
}

#[tokio::test]
async fn show_prints_lookups_with_untrusted_text_escaped() {
    let ws = Workspace::new();
    {
        let ledger = actionledger::Ledger::new(actionledger::store::SqliteStore::open(&ws.db).await.unwrap());
        let raw = RawSubmission { key: Some("acme:looked-up".into()), payload: b"{}".to_vec(), ..Default::default() };
        ledger.submit(&raw).await.unwrap();
        let claim = ledger.claim("worker-1", Duration::from_secs(30), 1).await.unwrap().pop().unwrap();
        let attempt = ledger.start_attempt(&claim).await.unwrap();
        let report = Report {
            outcome: Outcome::Unknown,
            error: Some("timed out".into()),
            evidence: actionledger::domain::Evidence::default(),
        };
        let Recorded::Applied(unknown) = ledger.record_result(&claim, attempt, &report).await.unwrap() else {
            panic!("the claim was current")
        };
        let found = actionledger::domain::LookupReport {
            verdict: actionledger::domain::LookupVerdict::Found,
            records: 1,
            destination_id: Some("CRM-7\u{202e}".into()),
            evidence: actionledger::domain::Evidence {
                status: Some(200),
                destination_id: None,
                body: Some("{\"records\":[\"\u{1b}[31mred\"]}".into()),
            },
            detail: Some("one record \u{1b}[2J".into()),
        };
        let kind = actionledger::domain::ActorKind::Person;
        ledger.settle_unknown(&unknown.key, unknown.revision, "Ana Lima", kind, &found).await.unwrap().unwrap();
    }
    let text = stdout(&ws.run(&["show", "acme:looked-up"]));
    assert!(text.contains("lookups (1)"), "{text}");
    let line = text.lines().find(|l| l.contains("found")).unwrap_or_else(|| panic!("{text}"));
    for expected in ["1 record(s)", "destination id CRM-7\\u{202e}", "status 200", "by Ana Lima"] {
        assert!(line.contains(expected), "{expected:?} in {line:?}");
    }
    assert!(text.contains("one record \\x1b[2J") && text.contains("body: {\"records\":[\"\\x1b[31mred\"]}"), "{text}");
    assert!(!text.contains(['\u{1b}', '\u{202e}']), "untrusted text escaped: {text:?}");
    assert!(!text.contains("last error"), "a completed action keeps no error: {text}");

    let shown = json(&ws.run(&["show", "acme:looked-up", "--json"]));
    let lookup = &shown["lookups"][0];
    assert_eq!(shown["lookups"].as_array().unwrap().len(), 1);
    assert_eq!((lookup["verdict"].as_str(), lookup["records"].as_i64()), (Some("found"), Some(1)));
    assert_eq!((lookup["actor"].as_str(), lookup["evidence"]["status"].as_i64()), (Some("Ana Lima"), Some(200)));
    assert_eq!(lookup["destination_id"], "CRM-7\u{202e}");
    assert_eq!(lookup["detail"], "one record \u{1b}[2J");
    assert!(lookup["at"].is_string());
    assert_eq!(shown["action"]["last_error"], Value::Null);
}

/// `reconcile` prints each finding, exits 3 while any is unsettled, and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_prints_missing_and_mismatched_records_and_changes_nothing() {
    let ws = Workspace::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let crm = actionledger::sim_crm::SimCrm::start(listener, actionledger::sim_crm::Options::default()).unwrap();
    std::fs::write(ws.dir.path().join("actionledger.toml"), crm.destination_config("crm")).unwrap();
    let held_there = crate::reconcile::record_at_crm_from_elsewhere(&crm, "acme:rc:mismatch").await;
    {
        let ledger = actionledger::Ledger::new(actionledger::store::SqliteStore::open(&ws.db).await.unwrap());
        crate::reconcile::completed_without_sending(&ledger, "acme:rc:missing", "T-404").await;
        crate::reconcile::completed_without_sending(&ledger, "acme:rc:mismatch", "T-999").await;
    }
    let show = |key: &str| json(&ws.run(&["show", key, "--json"]));
    let before = [show("acme:rc:missing"), show("acme:rc:mismatch")];

    let out = ws.run(&["reconcile"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("crm: 2 actions compared, 2 disagreements, 0 lookups failed"), "{text}");
    let missing =
        format!("{:<24} acme:rc:missing (completed): the ledger says completed as T-404", "missing_at_destination");
    let mismatch = format!(
        "{:<24} acme:rc:mismatch (completed): the ledger kept T-999, the destination holds {held_there}",
        "destination_id_mismatch"
    );
    assert!(text.contains(&missing) && text.contains(&mismatch), "{text}");

    let as_json = json(&ws.run(&["reconcile", "--json"]));
    let mut kinds: Vec<&str> = as_json["destinations"][0]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap())
        .collect();
    kinds.sort_unstable();
    assert_eq!(kinds, ["destination_id_mismatch", "missing_at_destination"]);
    assert_eq!([show("acme:rc:missing"), show("acme:rc:mismatch")], before, "nothing changed without --apply");
    assert_eq!(crm.stats().records, 1, "nothing sent");
}

/// Runs the binary in `dir` against `db` with its standard output closed before it starts (a
/// reader that went away, as after `| head -1`), or piped, and a deadline: a command that hangs
/// is killed and reported.
fn run_hostile(dir: &Path, db: &str, args: &[&str], closed_stdout: bool) -> (Option<i32>, String) {
    let mut command = Command::new(BIN);
    command
        .current_dir(dir)
        .env_remove("ACTIONLEDGER_DB")
        .env_remove("DATABASE_URL")
        .env("NO_COLOR", "1")
        .args(["--db", db])
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    if closed_stdout {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        command.stdout(writer);
    } else {
        command.stdout(Stdio::null());
    }
    let mut child = command.spawn().expect("run actionledger");
    let deadline = std::time::Instant::now() + Duration::from_mins(1);
    while child.try_wait().unwrap().is_none() {
        assert!(std::time::Instant::now() < deadline, "{args:?} did not end within a minute");
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    (output.status.code(), stderr(&output))
}

/// No panics: every command given hostile arguments (huge, negative and empty values, garbage,
/// an endless payload file, a closed standard output) ends with one of the documented exit codes
/// 0-4 and a worded error, never exit 101 or a panic report. A closed standard output ends a
/// command quietly with exit 0.
#[test]
fn hostile_arguments_end_with_a_documented_exit_code_never_a_panic() {
    let ws = Workspace::new();
    let ok = ws.run(&["submit", "--key", KEY, "--payload", r#"{"qty":2}"#]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    let garbage = "%s%n{}[]'\"\\;-- DROP TABLE actions; \u{202e}\u{1b}[2J";
    let huge = "99999999999999999999999999";
    let person = ["--owner", "Ana Lima", "--reason", "hostile"];
    let mut cases: Vec<Vec<&str>> = vec![
        vec!["show", KEY],
        vec!["show", KEY, "--json"],
        vec!["list"],
        vec!["list", "--json"],
        vec!["show", ""],
        vec!["show", garbage],
        vec!["show", huge],
        vec!["list", "--limit", "0"],
        vec!["list", "--limit", "-1"],
        vec!["list", "--limit", huge],
        vec!["list", "--before", "-9223372036854775808"],
        vec!["list", "--state", garbage],
        vec!["list", "--owner", ""],
        vec!["submit", "--key", "", "--payload", "{}"],
        vec!["submit", "--key", garbage, "--payload", garbage],
        vec!["submit", "--key", "acme:zero", "--payload", "@/dev/zero"],
        vec!["submit", "--key", "acme:none", "--payload", "@/nonexistent/file"],
        vec!["submit", "--key", "acme:v", "--payload", "{}", "--source-version", huge],
        vec!["submit", "--key", "acme:v", "--payload", "{}", "--source-version", "-1"],
        vec!["submit", "--key", "acme:n", "--payload", "1e999999"],
        vec!["worker", "--drain", "--lease", "10000000000000s"],
        vec!["worker", "--drain", "--lease", "-5s"],
        vec!["worker", "--drain", "--lease", ""],
        vec!["worker", "--drain", "--lease", "18446744073709551615ms"],
        vec!["worker", "--drain", "--config", "/nonexistent.toml"],
        vec!["reconcile", "--since", "10000000000000d"],
        vec!["reconcile", "--since", huge],
        vec!["purge", "--older-than", "10000000000000d", "--owner", "Ana Lima", "--reason", "r", "--dry-run"],
        vec!["purge", "--older-than", "-1d", "--owner", "Ana Lima", "--reason", "r"],
        vec!["purge", "--older-than", "", "--owner", "", "--reason", ""],
        vec!["lookup", KEY],
        vec!["migrate"],
        vec!["review", "--owner", "Ana Lima"],
        vec!["review", "--owner", "Ana Lima", "--script", "/dev/zero"],
        vec!["review", "--owner", "Ana Lima", "--script", "/nonexistent", "--size", "0x0"],
        vec!["completions", "bash"],
        vec!["completions", garbage],
        vec!["manpage"],
        vec!["show", garbage, "--json"],
        vec!["list", "--state", garbage, "--json"],
    ];
    for command in ["retry", "cancel", "approve", "reject", "takeover", "acknowledge", "assign"] {
        cases.push([&[command, KEY][..], &person[..]].concat());
        cases.push(vec![command, garbage, "--owner", "", "--reason", ""]);
        cases.push(vec![command, "", "--owner", garbage, "--reason", huge]);
    }
    cases.push([&["resolve", KEY, "--as", "completed", "--destination-id", ""][..], &person[..]].concat());
    cases.push([&["resolve", KEY, "--as", garbage][..], &person[..]].concat());
    for args in &cases {
        for closed_stdout in [false, true] {
            let (code, stderr) = run_hostile(ws.dir.path(), &ws.db, args, closed_stdout);
            let what = format!("{args:?} (standard output closed: {closed_stdout}): exit {code:?}\n{stderr}");
            assert!(code.is_some_and(|c| (0..=4).contains(&c)), "{what}");
            assert!(!stderr.contains("panicked"), "{what}");
        }
    }
    // A reader that stops early is no error: quiet, exit 0.
    for args in [
        &["show", KEY][..],
        &["list"][..],
        &["show", KEY, "--json"][..],
        &["completions", "zsh"][..],
        &["manpage"][..],
        &["show", "acme:none", "--json"][..],
    ] {
        assert_eq!(run_hostile(ws.dir.path(), &ws.db, args, true), (Some(0), String::new()), "{args:?}");
    }
    // Time overflow and endless payloads are refused with a worded error.
    let (code, stderr) =
        run_hostile(ws.dir.path(), &ws.db, &["worker", "--drain", "--lease", "10000000000000s"], false);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("too long"), "{stderr}");
    let (code, stderr) =
        run_hostile(ws.dir.path(), &ws.db, &["submit", "--key", "acme:zero", "--payload", "@/dev/zero"], false);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("262145 bytes"), "read the limit plus one byte, then refused: {stderr}");
    // An endless standard input, the same.
    let endless = Command::new(BIN)
        .env("NO_COLOR", "1")
        .args(["--db", &ws.db, "submit", "--key", "acme:stdin", "--payload", "@-"])
        .stdin(std::fs::File::open("/dev/zero").unwrap())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&endless.stderr);
    assert_eq!(endless.status.code(), Some(3), "{said}");
    assert!(said.contains("262145 bytes"), "{said}");
}
