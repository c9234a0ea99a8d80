//! A SQLite ledger on a read-only filesystem, against the built binary: commands that read read
//! it when its last writer closed it cleanly, and everything else is refused naming the read-only
//! filesystem, never "unable to open database file" alone. The filesystem is made read-only by a
//! read-only bind mount in a private mount namespace (`unshare -m`), which needs root or user
//! namespaces; where that is not possible the test says so and checks nothing.

use std::path::Path;
use std::process::{Command, Output};

/// Runs the binary with `args` while `dir` is mounted read-only, or `None` where no read-only
/// mount can be made here.
fn with_read_only(dir: &Path, args: &[&str]) -> Option<Output> {
    let dir = dir.to_str().expect("a UTF-8 path");
    let script = r#"mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0" || exit 97; shift; exec "$@""#;
    let output = Command::new("unshare")
        .args(["-m", "sh", "-c", script, dir, "--", env!("CARGO_BIN_EXE_actionledger")])
        .args(args)
        .env_remove("ACTIONLEDGER_DB")
        .env_remove("DATABASE_URL")
        .env("NO_COLOR", "1")
        .output()
        .ok()?;
    (output.status.code() != Some(97) && !String::from_utf8_lossy(&output.stderr).starts_with("unshare:"))
        .then_some(output)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_ledger_on_a_read_only_filesystem_is_read_and_every_write_names_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/ledger.db", dir.path().display());
    let created = crate::support::run_cli(&url, &["submit", "--key", "acme:ro:1", "--payload", r#"{"n":1}"#]);
    assert_eq!(created.status.code(), Some(0), "{}", text(&created.stderr));
    let Some(listed) = with_read_only(dir.path(), &["--db", &url, "list"]) else {
        eprintln!("SKIPPED: no read-only mount can be made here (unshare -m needs root or user namespaces)");
        return;
    };
    assert_eq!(listed.status.code(), Some(0), "a clean ledger is read: {}", text(&listed.stderr));
    assert!(text(&listed.stdout).contains("acme:ro:1"), "{}", text(&listed.stdout));
    let shown = with_read_only(dir.path(), &["--db", &url, "show", "acme:ro:1", "--json"]).unwrap();
    assert_eq!(shown.status.code(), Some(0), "{}", text(&shown.stderr));
    let status = with_read_only(dir.path(), &["--db", &url, "migrate", "--status"]).unwrap();
    assert_eq!(status.status.code(), Some(0), "{}", text(&status.stderr));

    let reason = format!("the ledger's directory {} is on a read-only filesystem", dir.path().display());
    let other = format!("sqlite://{}/other.db", dir.path().display());
    for (what, args) in [
        ("a submission", vec!["--db", &url, "submit", "--key", "acme:ro:2", "--payload", "{}"]),
        ("a new ledger", vec!["--db", &other, "submit", "--key", "acme:ro:2", "--payload", "{}"]),
        ("a migration", vec!["--db", &url, "migrate"]),
    ] {
        let refused = with_read_only(dir.path(), &args).unwrap();
        let stderr = text(&refused.stderr);
        assert_eq!(refused.status.code(), Some(1), "{what}: {stderr}");
        assert!(stderr.contains(&reason), "{what} names the read-only filesystem: {stderr}");
        assert!(!stderr.contains("unable to open database file"), "{what}: {stderr}");
    }
    assert!(!dir.path().join("other.db").exists());

    // A -wal file left beside it may hold commits the file does not: reads are refused too,
    // with the same reason, rather than answered from what may be an older state.
    std::fs::write(dir.path().join("ledger.db-wal"), b"").unwrap();
    let refused = with_read_only(dir.path(), &["--db", &url, "list"]).unwrap();
    let stderr = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&reason) && stderr.contains("no -wal file"), "{stderr}");
}
