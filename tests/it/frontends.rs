//! One question, one answer: an expired claim under which a request was sent is taken over through
//! the CLI, the console (a scripted `review`) and a worker, on the real binary, and each front end
//! must reach the ledger's one decision (docs/RULES.md, rule 5): run again where the destination
//! protects against a repeat, held for a person where it cannot tell one.

use crate::support::TestDb;
use actionledger::domain::{ActionKey, ActorKind, AuditEntry, Event, RawSubmission, State};
use actionledger::ledger::ActionDetail;
use actionledger::sim_crm::{Options, SimCrm};
use actionledger::store::Store;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_actionledger");

conformance!(every_front_end_gives_the_ledgers_one_answer);

/// The destination that declares a lookup (and idempotency keys), and the one that declares
/// nothing against a repeat.
const PROTECTED: &str = "looked";
const BLIND: &str = "blind";
const FRONT_ENDS: [&str; 3] = ["cli", "console", "worker"];

fn run(dir: &Path, url: &str, args: &[&str]) -> Output {
    let output = Command::new(BIN)
        .current_dir(dir)
        .env_remove("ACTIONLEDGER_DB")
        .env_remove("DATABASE_URL")
        .env("NO_COLOR", "1")
        .args(["--db", url])
        .args(args)
        .output()
        .expect("run actionledger");
    assert!(
        output.status.success(),
        "actionledger {args:?} exited {:?}\nstdout: {}\nstderr: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn key(front_end: &str, destination: &str) -> String {
    format!("acme:frontends:{front_end}:{destination}")
}

async fn detail<S: Store>(db: &TestDb<S>, key: &str) -> ActionDetail {
    db.ledger.detail(&ActionKey::parse(key).unwrap()).await.unwrap()
}

/// The entry that settled the expired claim: the first one after it was claimed by the worker
/// that went away.
fn settling_entry(detail: &ActionDetail) -> &AuditEntry {
    let claimed = detail.audit.iter().position(|e| e.event == Event::Claimed).expect("claimed once");
    detail
        .audit
        .get(claimed + 1)
        .unwrap_or_else(|| panic!("nothing settled {}: {:#?}", detail.action.key, detail.audit))
}

async fn every_front_end_gives_the_ledgers_one_answer<S: Store>(db: TestDb<S>) {
    let crm = SimCrm::start(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(), Options::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("actionledger.toml");
    let blind = format!(
        "[destinations.{BLIND}]\nbase_url = \"http://{}\"\nexternal_ref = \"{{{{key}}}}\"\n\
         create = {{ url = \"{{{{base_url}}}}/tasks\", body = {{ external_ref = \"{{{{external_ref}}}}\" }} }}\n",
        crm.addr()
    );
    std::fs::write(&config, format!("{}\n{blind}", crm.destination_config(PROTECTED))).unwrap();
    let config = config.to_str().unwrap();

    // Every front end gets one claim per destination, taken by a worker that sent its request
    // and went away before its short lease ran out.
    for front_end in FRONT_ENDS {
        for destination in [PROTECTED, BLIND] {
            let raw = RawSubmission {
                key: Some(key(front_end, destination)),
                payload: br#"{"task":"pack ORD-1042"}"#.to_vec(),
                destination: Some(destination.to_owned()),
                ..RawSubmission::default()
            };
            db.ledger.submit(&raw).await.unwrap();
        }
    }
    let claims = db.ledger.claim("gone-worker", Duration::from_secs(1), 10).await.unwrap();
    assert_eq!(claims.len(), FRONT_ENDS.len() * 2);
    for claim in &claims {
        db.ledger.start_attempt(claim).await.unwrap();
    }
    let expiry = claims.iter().filter_map(|c| c.action.lease_expires_at).max().unwrap();
    while db.ledger.store().now().await.unwrap() <= expiry {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    for destination in [PROTECTED, BLIND] {
        let reason = format!("old worker's host is gone ({destination})");
        let key = key("cli", destination);
        run(dir.path(), &db.url, &["takeover", &key, "--owner", "ana", "--reason", &reason, "--config", config]);
        let key = self::key("console", destination);
        let script = dir.path().join(format!("takeover-{destination}.keys"));
        std::fs::write(&script, ["2", "/", &key, "<Enter>", "t", &reason, "<Enter>", "y", ""].join("\n")).unwrap();
        let screen = run(
            dir.path(),
            &db.url,
            &["review", "--owner", "ana", "--config", config, "--script", script.to_str().unwrap(), "--size", "120x40"],
        );
        let screen = String::from_utf8_lossy(&screen.stdout);
        assert!(screen.contains(&format!("take over {key}")), "the console ran the takeover:\n{screen}");
    }
    // The worker last: it recovers every expired claim of its destinations, and only its own
    // are still expired by now.
    run(dir.path(), &db.url, &["worker", "--config", config, "--drain", "--worker-id", "rescuer"]);

    for destination in [PROTECTED, BLIND] {
        let by_cli = detail(&db, &key("cli", destination)).await;
        let by_console = detail(&db, &key("console", destination)).await;
        let by_worker = detail(&db, &key("worker", destination)).await;
        let (cli, console, worker) = (settling_entry(&by_cli), settling_entry(&by_console), settling_entry(&by_worker));

        // The CLI and the console run the same manual command: the same transition, the same
        // audit entry, word for word.
        let entry =
            |e: &AuditEntry| (e.event, e.from_state, e.to_state, e.actor.clone(), e.actor_kind, e.reason.clone());
        assert_eq!(entry(cli), entry(console), "{destination}: CLI and console recorded different decisions");
        assert_eq!((cli.event, cli.actor_kind), (Event::TakenOver, ActorKind::Person));

        // The worker recovers rather than taking over by hand, but must decide the same way.
        let held = |e: &AuditEntry| e.to_state == State::Held;
        assert_eq!(held(cli), held(worker), "{destination}: the worker decided otherwise: {worker:?}");
        if destination == PROTECTED {
            assert_eq!(cli.to_state, State::Pending, "a lookup protects against a repeat: it may run again");
            assert_eq!((worker.event, worker.to_state), (Event::ClaimRecovered, State::InProgress));
        } else {
            assert_eq!(cli.to_state, State::Held, "nothing protects against a repeat: a person decides");
            assert_eq!((worker.event, worker.to_state), (Event::LeaseExpired, State::Held));
        }
    }
    // The draining worker then performed the two actions taken over by hand as well: one record
    // per protected action, none for the held ones.
    for front_end in FRONT_ENDS {
        assert_eq!(detail(&db, &key(front_end, PROTECTED)).await.action.state, State::Completed);
        assert_eq!(detail(&db, &key(front_end, BLIND)).await.action.state, State::Held);
    }
    let stats = crm.stats();
    assert_eq!((stats.records, stats.max_records_per_external_ref), (3, 1), "{stats:?}");
}
