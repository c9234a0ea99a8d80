//! The benchmark command runs end to end and reports in the documented shape (its figures are
//! read by people, never asserted here: speed is not a test's business).

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_actionledger");

fn run(args: &[&str]) -> serde_json::Value {
    let output = Command::new(BIN).env_remove("ACTIONLEDGER_DB").args(args).output().expect("run actionledger");
    assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("one JSON document")
}

#[test]
fn quick_bench_reports_every_case_with_its_ratio() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("bench.db").display());
    let cases = run(&["--db", &db, "bench", "--quick", "--json"]);
    let cases = cases.as_array().expect("a list of cases");
    let names: Vec<&str> = cases.iter().map(|c| c["name"].as_str().unwrap()).collect();
    for expected in [
        "raw lifecycle",
        "library lifecycle",
        "duplicate storm",
        "library submit",
        "HTTP intake",
        "recovery sweep",
        "default worker drain, round",
        "default worker end to end",
        "raw drain, backlog of 1000",
        "default worker drain, backlog of 1000",
        "submit to perform",
        "default worker vs simulated CRM, fault-free",
        "default worker vs simulated CRM, 30% of answers lost",
    ] {
        assert!(names.iter().any(|n| n.starts_with(expected)), "{expected} missing from {names:?}");
    }
    assert!(names.iter().any(|n| n.starts_with("library batched")), "{names:?}");
    for case in cases {
        for field in ["name", "store", "workers", "actions_per_sec", "p50_ms", "p99_ms", "ratio_to_raw"] {
            assert!(case.get(field).is_some(), "{field} missing from {case}");
        }
        assert!(case["actions_per_sec"].as_f64().unwrap() > 0.0, "{case}");
        // A case without a ratio is a baseline (a raw one, or the worker against the simulated
        // CRM without faults) or measures latency, which it reports up to its slowest action.
        let name = case["name"].as_str().unwrap();
        let is_baseline = name.starts_with("raw ") || name.contains("fault-free");
        let is_latency = case.get("max_ms").is_some();
        assert_eq!(case["ratio_to_raw"].is_null(), is_baseline || is_latency, "{case}");
        if is_latency {
            assert_eq!(case["actions"], 50, "one second at 50/s: {case}");
            assert!(case["p50_ms"].as_f64().unwrap() <= case["max_ms"].as_f64().unwrap(), "{case}");
        }
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "the benchmark removes what it made: {left:?}");
}

#[test]
fn worker_memory_run_performs_every_action_once() {
    // Enough actions that the run outlasts several samples, however fast the machine.
    let run = run(&["bench", "--worker-memory", "3000", "--batch", "16", "--json"]);
    assert_eq!(run["crm_records"], 3000, "{run}");
    assert_eq!(run["max_records_per_key"], 1, "{run}");
    assert!(!run["samples"].as_array().unwrap().is_empty(), "{run}");
}
