//! The real binary in a real terminal: tmux with a private socket and a fixed 80x24 window,
//! polling `capture-pane` until the expected text appears.

use crate::support;
use actionledger::domain::{ActionKey, RawSubmission, State};
use actionledger::ledger::{Outcome, Report};
use actionledger::store::Store as _;
use std::process::Command;
use std::time::{Duration, Instant};

pub(crate) struct Tmux {
    pub(crate) socket: std::path::PathBuf,
}

impl Tmux {
    /// Starts `actionledger --db URL review --owner ana EXTRA...` in a detached `width`x`height`
    /// window with a private socket in `dir`; when the console exits the shell prints
    /// `CONSOLE-EXITED-<code>` and stays, so the last screen can be read.
    pub(crate) fn review(dir: &std::path::Path, url: &str, extra: &str, width: u16, height: u16) -> Self {
        let tmux = Self { socket: dir.join("tmux.sock") };
        let command = format!(
            "{} --db {url} review --owner ana {extra}; echo CONSOLE-EXITED-$?; sleep 30",
            env!("CARGO_BIN_EXE_actionledger"),
        );
        let (cwd, width, height) = (dir.to_str().unwrap(), width.to_string(), height.to_string());
        let started =
            tmux.run(&["new-session", "-d", "-s", "review", "-x", &width, "-y", &height, "-c", cwd, &command]);
        assert!(started.status.success(), "{}", String::from_utf8_lossy(&started.stderr));
        tmux
    }

    pub(crate) fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux").arg("-S").arg(&self.socket).args(args).output().expect("run tmux")
    }

    pub(crate) fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "review"]).stdout).into_owned()
    }

    pub(crate) fn wait_for(&self, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let screen = self.screen();
            if screen.contains(text) {
                return screen;
            }
            assert!(Instant::now() < deadline, "waited 20s for {text:?}; the screen is:\n{screen}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub(crate) fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "review"];
        args.extend_from_slice(keys);
        assert!(self.run(&args).status.success());
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

pub(crate) fn tmux_available() -> bool {
    let found = Command::new("tmux").arg("-V").output().is_ok_and(|o| o.status.success());
    assert!(found || !std::env::var("CI").is_ok_and(|v| v == "true"), "tmux is required in CI");
    if !found {
        eprintln!("\n!!! SKIPPING the tmux test: tmux is not installed\n");
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_retries_an_action_in_a_real_terminal_and_quits_cleanly() {
    if !tmux_available() {
        return;
    }
    let db = support::sqlite().await;
    let raw = RawSubmission { key: Some("acme:tmux:1".into()), payload: br#"{"n":1}"#.to_vec(), ..Default::default() };
    db.ledger.submit(&raw).await.unwrap();
    let claim = db.ledger.claim("worker-1", Duration::from_secs(30), 1).await.unwrap().pop().unwrap();
    let attempt = db.ledger.start_attempt(&claim).await.unwrap();
    let failed = Report {
        outcome: Outcome::Failed { permanent: true },
        error: Some("HTTP 422".into()),
        evidence: actionledger::domain::Evidence::default(),
    };
    db.ledger.record_result(&claim, attempt, &failed).await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let tmux = Tmux::review(dir.path(), &db.url, "", 80, 24);

    tmux.wait_for("5 fail 1");
    tmux.keys(&["5"]);
    tmux.wait_for("> acme:tmux:1");
    tmux.keys(&["r"]);
    tmux.wait_for("reason:");
    tmux.keys(&["-l", "fixed in the CRM"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("Confirm? y yes");
    tmux.keys(&["y"]);
    let screen = tmux.wait_for("retry acme:tmux:1: failed -> pending (version 5), by ana");
    assert!(!screen.contains("Confirm?"), "the dialog closed:\n{screen}");
    tmux.keys(&["q"]);
    let after = tmux.wait_for("CONSOLE-EXITED-0");
    assert!(!after.contains("actionledger review"), "the alternate screen is gone after quitting:\n{after}");

    let action = db.ledger.store().find(&ActionKey::parse("acme:tmux:1").unwrap()).await.unwrap().unwrap();
    assert_eq!(action.state, State::Pending);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resizing_the_terminal_keeps_the_selection_on_the_same_key() {
    if !tmux_available() {
        return;
    }
    let db = support::sqlite().await;
    for n in 0..60 {
        let raw = RawSubmission { key: Some(format!("acme:r:{n:03}")), payload: b"{}".to_vec(), ..Default::default() };
        db.ledger.submit(&raw).await.unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let tmux = Tmux::review(dir.path(), &db.url, "--refresh 200ms", 120, 40);
    tmux.wait_for("> acme:r:059");
    tmux.keys(&["G"]);
    tmux.wait_for("> acme:r:000");
    let resized = tmux.run(&["resize-window", "-t", "review", "-x", "60", "-y", "10"]);
    assert!(resized.status.success(), "{}", String::from_utf8_lossy(&resized.stderr));
    // Several refreshes at the new size, then Enter.
    std::thread::sleep(Duration::from_secs(1));
    let screen = tmux.wait_for("> acme:r:000");
    assert!(!screen.contains("> acme:r:001"), "{screen}");
    tmux.keys(&["Enter"]);
    let detail = tmux.wait_for("version 1");
    assert!(detail.contains("acme:r:000") && !detail.contains("acme:r:001"), "the detail of the same key:\n{detail}");
    tmux.keys(&["q"]);
    tmux.wait_for("CONSOLE-EXITED-0");
}

impl Tmux {
    /// A tmux format of the pane (`#{alternate_on}`, `#{cursor_flag}`, `#{pane_tty}`...).
    fn pane(&self, format: &str) -> String {
        let shown = self.run(&["display-message", "-p", "-t", "review", format]);
        String::from_utf8_lossy(&shown.stdout).trim().to_owned()
    }

    /// What the terminal is left in, as the next program there finds it: the alternate screen
    /// left, the cursor shown, and the line discipline cooked and echoing, not raw.
    /// (Only where no interactive shell reads the terminal: readline sets its own modes.)
    fn assert_terminal_given_back(&self, after: &str) {
        assert_eq!(self.pane("#{alternate_on}"), "0", "still on the alternate screen {after}");
        assert_eq!(self.pane("#{cursor_flag}"), "1", "the cursor left hidden {after}");
        let tty = self.pane("#{pane_tty}");
        let modes = Command::new("stty").args(["-F", &tty, "-a"]).output().expect("run stty");
        let modes = String::from_utf8_lossy(&modes.stdout);
        let set: Vec<&str> = modes.split_whitespace().collect();
        for mode in ["icanon", "echo", "isig"] {
            assert!(set.contains(&mode), "{mode} unset {after}: the terminal was left raw:\n{modes}");
        }
    }
}

/// The review console's process: the child of the pane's shell.
fn console_pid(tmux: &Tmux) -> String {
    let shell = tmux.pane("#{pane_pid}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let found = Command::new("pgrep").args(["-P", &shell]).output().expect("run pgrep");
        let pids = String::from_utf8_lossy(&found.stdout).trim().to_owned();
        if let Some(pid) = pids.lines().next() {
            return pid.to_owned();
        }
        assert!(Instant::now() < deadline, "no review console under the pane's shell {shell}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A service manager's SIGTERM and a dropped SSH link's SIGHUP end the console as `q` does: the
/// terminal is given back whole, as after a panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_and_sighup_give_the_terminal_back() {
    if !tmux_available() {
        return;
    }
    for signal in ["-TERM", "-HUP", "-INT"] {
        let db = support::sqlite().await;
        let dir = tempfile::tempdir().unwrap();
        let tmux = Tmux::review(dir.path(), &db.url, "", 80, 24);
        tmux.wait_for("actionledger review");
        assert_eq!(tmux.pane("#{alternate_on}"), "1", "the console runs on the alternate screen");
        let pid = console_pid(&tmux);
        assert!(Command::new("kill").args([signal, &pid]).status().unwrap().success());
        let after = tmux.wait_for("CONSOLE-EXITED-0");
        assert!(!after.contains("actionledger review"), "the console's screen is gone after {signal}:\n{after}");
        tmux.assert_terminal_given_back(&format!("after kill {signal}"));
    }
}

/// Ctrl-Z gives the terminal back to the shell as it found it and stops the console; what is typed
/// at the shell meanwhile goes to the shell; `fg` brings the console back drawn whole, answering
/// keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_z_suspends_to_the_shell_and_fg_redraws_the_console() {
    if !tmux_available() {
        return;
    }
    let db = support::sqlite().await;
    for n in 0..3 {
        let raw = RawSubmission { key: Some(format!("acme:z:{n}")), payload: b"{}".to_vec(), ..Default::default() };
        db.ledger.submit(&raw).await.unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let tmux = Tmux::shell(dir.path(), 80, 24);
    tmux.keys(&["-l", &format!("{} --db {} review --owner ana", env!("CARGO_BIN_EXE_actionledger"), db.url)]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("> acme:z:2");
    assert_eq!(tmux.pane("#{alternate_on}"), "1", "the console runs on the alternate screen");

    tmux.keys(&["C-z"]);
    let shell = tmux.wait_for("Stopped");
    assert!(!shell.contains("> acme:z:"), "the console's screen is gone while it is stopped:\n{shell}");
    tmux.wait_for_prompts(2);
    tmux.assert_terminal_given_back("after Ctrl-Z");
    // Typed at the shell while the console is stopped: the shell runs it, the console never sees it.
    tmux.keys(&["-l", "echo TYPED-AT-THE-$((6*7))-SHELL"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("TYPED-AT-THE-42-SHELL");

    tmux.keys(&["-l", "fg"]);
    tmux.keys(&["Enter"]);
    let back = tmux.wait_for("> acme:z:2");
    assert_eq!(tmux.pane("#{alternate_on}"), "1", "back on the alternate screen:\n{back}");
    assert_eq!(tmux.pane("#{cursor_flag}"), "0", "the cursor hidden again:\n{back}");
    for drawn in ["actionledger review", "1 pending 3", "acme:z:0", "q quit"] {
        assert!(back.contains(drawn), "{drawn:?} drawn again after fg:\n{back}");
    }
    for residue in ["TYPED-AT", "SHELL-READY", "Stopped"] {
        assert!(!back.contains(residue), "the shell's {residue:?} left on the console's screen:\n{back}");
    }
    tmux.keys(&["j"]);
    tmux.wait_for("> acme:z:1");
    tmux.keys(&["q"]);
    tmux.wait_for_prompts(3);
    tmux.assert_terminal_given_back("after q, once resumed");
    tmux.keys(&["-l", "echo CONSOLE-EXITED-$?"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("CONSOLE-EXITED-0");
}

impl Tmux {
    /// An interactive `sh` (dash: job control, and no line editing that would set the terminal's
    /// modes itself) in a detached `width`x`height` window with a private socket in `dir`, its
    /// prompt `SHELL-READY $ `.
    fn shell(dir: &std::path::Path, width: u16, height: u16) -> Self {
        let tmux = Self { socket: dir.join("tmux.sock") };
        let command = "env PS1='SHELL-READY $ ' sh -i";
        let (cwd, width, height) = (dir.to_str().unwrap(), width.to_string(), height.to_string());
        let started = tmux.run(&["new-session", "-d", "-s", "review", "-x", &width, "-y", &height, "-c", cwd, command]);
        assert!(started.status.success(), "{}", String::from_utf8_lossy(&started.stderr));
        tmux.wait_for("SHELL-READY");
        tmux
    }

    /// Waits until the shell's prompt is on screen `count` times, off the alternate screen.
    fn wait_for_prompts(&self, count: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let screen = self.screen();
            if screen.matches("SHELL-READY").count() >= count && self.pane("#{alternate_on}") == "0" {
                return screen;
            }
            assert!(Instant::now() < deadline, "waited 20s for prompt {count}; the screen is:\n{screen}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The review console on a PostgreSQL server that stops and starts again (a server of its own, so
/// that no other test loses its database): the header says the database is unreachable within
/// about 3 s of the stop, and clears by itself within about 3 s of the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_header_follows_postgresql_stopping_and_starting_again() {
    if !tmux_available() {
        return;
    }
    let Some(cluster) = crate::support::pg::private_server() else { return };
    let store = actionledger::store::PostgresStore::open(&cluster.url).await.unwrap();
    let ledger = actionledger::Ledger::new(store);
    for n in 0..3 {
        let raw = RawSubmission { key: Some(format!("acme:pg:{n}")), payload: b"{}".to_vec(), ..Default::default() };
        ledger.submit(&raw).await.unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let tmux = Tmux::review(dir.path(), &cluster.url, "", 80, 24);
    let header = |screen: &str| screen.lines().nth(1).unwrap_or_default().to_owned();
    let connected = tmux.wait_for("refreshed");
    assert!(connected.contains("> acme:pg:2"), "{connected}");

    cluster.stop().unwrap();
    let stopped = Instant::now();
    let away = tmux.wait_for("DATABASE UNREACHABLE since");
    let told = stopped.elapsed();
    assert!(header(&away).starts_with("DATABASE UNREACHABLE since "), "in the header:\n{away}");
    assert!(told <= Duration::from_millis(3500), "said {told:?} after the stop:\n{away}");
    assert!(away.contains("> acme:pg:2"), "the rows last read stay:\n{away}");
    tmux.keys(&["o"]);
    let held = tmux.wait_for("nothing was changed");
    assert!(held.contains("the ledger cannot be reached since"), "{held}");

    cluster.start().unwrap();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(20);
    let back = loop {
        let screen = tmux.screen();
        if header(&screen).contains("refreshed") {
            break screen;
        }
        assert!(Instant::now() < deadline, "still away 20s after the start:\n{screen}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let seen = started.elapsed();
    assert!(seen <= Duration::from_millis(3500), "seen back {seen:?} after the start:\n{back}");
    for gone in ["UNREACHABLE", "database:", "cannot be reached"] {
        assert!(!back.contains(gone), "{gone:?} stayed once the database was back:\n{back}");
    }
    tmux.keys(&["j"]);
    tmux.wait_for("> acme:pg:1");
    tmux.keys(&["q"]);
    tmux.wait_for("CONSOLE-EXITED-0");
    eprintln!("the console said the database was away {told:?} after the stop, and back {seen:?} after the start");
}
