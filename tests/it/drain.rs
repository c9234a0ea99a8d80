//! `bench --drain`: a backlog of pending actions worked off raw, by 16 default workers and by the
//! ledger calls one action at a time (for actions without a destination, and for one declaring an
//! idempotency key, whose claims start their attempts) and batched, on each store, and end to end
//! (enqueued by 16 producers, then drained), every action drained exactly once, with the server's
//! CPU per action on PostgreSQL.

use crate::support;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_actionledger");
const BACKLOG: u64 = 200;

fn drain(db: &str) -> Vec<serde_json::Value> {
    let output = Command::new(BIN)
        .env_remove("ACTIONLEDGER_DB")
        .args(["--db", db, "bench", "--drain", &BACKLOG.to_string(), "--json"])
        .output()
        .expect("run actionledger");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let cases: serde_json::Value = serde_json::from_slice(&output.stdout).expect("one JSON document");
    cases.as_array().expect("a list of cases").clone()
}

/// Each case drained the whole backlog (the bench refuses to report otherwise, and says so), the
/// raw drain is each round's baseline for the drains, the raw end to end for the library's end to
/// end, and each ratio is the rate over its baseline's. The server's CPU is measured exactly when
/// `cpu_measured` says (`None`: a server given by URL, which may or may not run on this machine).
fn check(cases: &[serde_json::Value], cpu_measured: Option<bool>) {
    let names: Vec<&str> = cases.iter().map(|c| c["name"].as_str().unwrap()).collect();
    let rate = |name: &str| {
        let case = cases.iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("{name} missing from {names:?}"));
        case["actions_per_sec"].as_f64().unwrap()
    };
    // The 16 producers enqueue the same number each.
    let enqueued = BACKLOG.div_ceil(16) * 16;
    for round in 1..=2 {
        for (case, baseline) in [
            ("raw drain", None),
            ("default worker drain", Some("raw drain")),
            ("default worker drain, keyed destination", Some("raw drain")),
            ("ledger calls drain, per action", Some("raw drain")),
            ("ledger calls drain, per action, keyed destination", Some("raw drain")),
            ("ledger calls drain, batched (64 per commit)", Some("raw drain")),
            ("raw end to end (enqueue, then drain)", None),
            ("default worker end to end", Some("raw end to end (enqueue, then drain)")),
            ("ledger calls end to end, per action", Some("raw end to end (enqueue, then drain)")),
        ] {
            let name = format!("{case}, round {round}");
            let measured = cases.iter().find(|c| c["name"] == name.as_str());
            let measured = measured.unwrap_or_else(|| panic!("{name} missing from {names:?}"));
            let end_to_end = case.contains("end to end");
            assert_eq!(measured["actions"], if end_to_end { enqueued } else { BACKLOG }, "{measured}");
            assert_eq!(measured["workers"], 16, "{measured}");
            match baseline {
                None => assert!(measured["ratio_to_raw"].is_null(), "{measured}"),
                Some(baseline) => {
                    let ratio = measured["ratio_to_raw"].as_f64().unwrap();
                    let expected = rate(&name) / rate(&format!("{baseline}, round {round}"));
                    assert!((ratio - expected).abs() < 1e-9, "{name}: ratio {ratio}, expected {expected}");
                }
            }
        }
    }
    assert_eq!(cases.len(), 18, "{names:?}");
    if let Some(measured) = cpu_measured {
        for case in cases {
            assert_eq!(case.get("db_cpu_ms_per_action").is_some(), measured, "{case}");
        }
    }
}

#[test]
fn sqlite_drain_works_off_the_whole_backlog_in_each_case() {
    let dir = tempfile::tempdir().unwrap();
    let cases = drain(&format!("sqlite://{}", dir.path().join("bench.db").display()));
    check(&cases, Some(false));
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "the benchmark removes what it made: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_drain_works_off_the_whole_backlog_and_counts_the_servers_cpu() {
    let Some(url) = support::pg::fresh_database().await else { return };
    let cases = tokio::task::spawn_blocking(move || drain(&url)).await.unwrap();
    // The throwaway server runs here, so its CPU is read from /proc; one given by URL may not.
    let given = std::env::var_os(support::pg::URL_VARIABLE).is_some_and(|url| !url.is_empty());
    check(&cases, (!given).then_some(true));
}
