//! Prometheus's own checker, `promtool` (Debian's `prometheus` package), on what the binary serves
//! and on the alert rules the docs give; a loud skip where it is not installed, outside CI.

use std::io::Write as _;
use std::process::{Command, Output, Stdio};

/// `promtool check ARGS…` with `input` on its standard input; `None` (after a loud message) when
/// `promtool` is not installed. With `CI=true` a missing `promtool` fails the test instead.
pub fn check(args: &[&str], input: &str) -> Option<Output> {
    let spawned = Command::new("promtool")
        .arg("check")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(why) => {
            assert!(
                !std::env::var("CI").is_ok_and(|v| v == "true"),
                "promtool is required in CI but could not be run: {why}"
            );
            eprintln!(
                "\n!!! SKIPPING a promtool test: {why}\n!!! Install promtool (Debian: apt-get install prometheus).\n"
            );
            return None;
        }
    };
    child.stdin.take().expect("a pipe").write_all(input.as_bytes()).expect("promtool reads its input");
    Some(child.wait_with_output().expect("promtool runs"))
}

/// Fails the test with `promtool`'s words unless `promtool check metrics` passes `scrape` clean:
/// exit 0 and no lint problem.
pub fn assert_metrics_clean(scrape: &str) {
    let Some(output) = check(&["metrics"], scrape) else { return };
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success() && said.trim().is_empty(), "promtool check metrics: {said}\n{scrape}");
}
