//! The binary as it is shipped and run: shell completions and the manual page, the values flags
//! list and clap's answer to a typo, JSON errors under `--json`, a build without the test switches
//! (crash points and clock hook compiled out, the variable ignored), `cargo install` giving a
//! binary with the migrations embedded, and the systemd unit in `examples/`.

use actionledger::cli::Cli;
use actionledger::domain::State;
use actionledger::sim_crm::{Options, SimCrm};
use actionledger::testkit::faults;
use clap::CommandFactory as _;
use serde_json::Value;
use std::io::Write as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// The binary the tests build: with the `fault-injection` feature, which the crate's
/// dev-dependency on itself turns on for every target of the package under `cargo test`.
const BIN: &str = env!("CARGO_BIN_EXE_actionledger");

fn run_in(bin: &Path, dir: &Path, args: &[&str]) -> Output {
    Command::new(bin)
        .current_dir(dir)
        .env_remove("ACTIONLEDGER_DB")
        .env_remove("DATABASE_URL")
        .env_remove(faults::VARIABLE)
        .env("NO_COLOR", "1")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run actionledger")
}

fn run(args: &[&str]) -> Output {
    run_in(Path::new(BIN), &std::env::temp_dir(), args)
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn completions_for_each_shell_name_the_commands_and_the_states() {
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let out = run(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        // Fish names long flags without their dashes (`-l json`).
        for word in ["submit", "worker", "purge", "completions", "manpage", "json", "older-than"] {
            assert!(script.contains(word), "{shell} completions lack {word}");
        }
        if ["bash", "zsh", "fish"].contains(&shell) {
            // PowerShell's and Elvish's scripts complete flags and commands, not their values.
            assert!(script.contains("in_progress"), "{shell} completions lack the states of --state");
        }
    }
    let unknown = run(&["completions", "tcsh"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        stderr(&unknown).contains("[possible values: bash, elvish, fish, powershell, zsh]"),
        "{}",
        stderr(&unknown)
    );
}

#[test]
fn the_manual_page_is_roff_for_section_1() {
    let out = run(&["manpage"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let page = stdout(&out);
    // clap_mangen defines a quote string (`.ie`/`.el`) before the title header.
    let header = page.lines().find(|line| !line.starts_with(".ie") && !line.starts_with(".el")).unwrap_or_default();
    assert!(header.starts_with(".TH actionledger 1"), "{header}");
    for section in [
        ".SH NAME",
        ".SH SYNOPSIS",
        ".SH OPTIONS",
        ".SH COMMANDS",
        ".SH ENVIRONMENT",
        ".SH FILES",
        ".SH \"EXIT STATUS\"",
    ] {
        assert!(page.contains(section), "the manual page lacks {section}");
    }
}

/// One page documents everything: each command (and subcommand) in a subsection of its own with
/// every option it takes, every environment variable the binary reads, its files and every exit
/// status; it names no other page, since none is installed.
#[test]
fn the_manual_page_documents_every_command_option_variable_file_and_exit_status() {
    let page = stdout(&run(&["manpage"]));
    let roff_text = |text: &str| text.replace('-', "\\-");
    let mut cli = Cli::command();
    cli.build();
    let mut commands: Vec<(String, &clap::Command)> =
        cli.get_subcommands().map(|sub| (format!("actionledger {}", sub.get_name()), sub)).collect();
    // clap's own `help` subcommand, which the page has no need to describe.
    commands.retain(|(_, command)| command.get_name() != "help");
    let mut checked = 0;
    while let Some((name, command)) = commands.pop() {
        assert!(!page.contains(&format!("{}(1)", roff_text(&name.replace(' ', "-")))), "names a page {name}(1)");
        let start = page.find(&format!(".SS \"{name}\"")).unwrap_or_else(|| panic!("no subsection for {name}"));
        let section = &page[start..];
        let section = &section[..section[1..].find(".SS ").map_or(section.len(), |end| end + 1)];
        for arg in command.get_arguments().filter(|a| !a.is_global_set() && !a.is_hide_set()) {
            let Some(long) = arg.get_long().filter(|long| *long != "help") else { continue };
            let flag = format!("\\fB{}\\fR", roff_text(&format!("--{long}")));
            assert!(section.contains(&flag), "{name}: --{long} is not documented in its subsection");
        }
        checked += 1;
        commands.extend(
            command
                .get_subcommands()
                .filter(|sub| sub.get_name() != "help")
                .map(|sub| (format!("{name} {}", sub.get_name()), sub)),
        );
    }
    assert!(checked > 25, "only {checked} commands");
    let environment = &page[page.find(".SH ENVIRONMENT").unwrap()..page.find(".SH FILES").unwrap()];
    let read_by_clap = cli
        .get_subcommands()
        .flat_map(clap::Command::get_subcommands)
        .chain(cli.get_subcommands())
        .flat_map(clap::Command::get_arguments)
        .filter_map(|arg| arg.get_env().map(|env| env.to_string_lossy().into_owned()));
    let read_by_the_code =
        ["ACTIONLEDGER_DB", "DATABASE_URL", "ACTIONLEDGER_TOKENS", "RUST_LOG", "NO_COLOR", "PGSSLMODE"];
    for variable in read_by_clap.chain(read_by_the_code.map(str::to_owned)) {
        assert!(environment.contains(&roff_text(&variable)), "ENVIRONMENT lacks {variable}");
    }
    let files = &page[page.find(".SH FILES").unwrap()..page.find(".SH \"EXIT STATUS\"").unwrap()];
    assert!(files.contains("actionledger.toml") && files.contains("actionledger.db"), "{files}");
    let exit_status = &page[page.find(".SH \"EXIT STATUS\"").unwrap()..];
    for code in 0..=6 {
        assert!(exit_status.contains(&format!(".TP\n\\fB{code}\\fR")), "EXIT STATUS lacks {code}");
    }

    // groff (which man runs) reads it without a warning, and man lays it out.
    let Ok(mut groff) =
        Command::new("groff").args(["-man", "-ww", "-z"]).stdin(Stdio::piped()).stderr(Stdio::piped()).spawn()
    else {
        println!("groff is not installed: the page's roff is not checked");
        return;
    };
    groff.stdin.take().unwrap().write_all(page.as_bytes()).unwrap();
    let checked = groff.wait_with_output().unwrap();
    assert!(
        checked.status.success() && checked.stderr.is_empty(),
        "groff warns: {}",
        String::from_utf8_lossy(&checked.stderr)
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &page).unwrap();
    if let Ok(shown) = Command::new("man").env("MANWIDTH", "100").arg("-l").arg(file.path()).output() {
        let shown = String::from_utf8_lossy(&shown.stdout);
        assert!(shown.contains("EXIT STATUS") && shown.contains("actionledger wait"), "{shown}");
    }
}

#[test]
fn state_flags_list_the_domains_states_in_help() {
    let every: Vec<&str> = State::ALL.iter().map(|s| s.as_str()).collect();
    let list = stdout(&run(&["list", "--help"]));
    assert!(list.contains(&format!("[possible values: {}]", every.join(", "))), "{list}");
    let purge = stdout(&run(&["purge", "--help"]));
    assert!(purge.contains("[possible values: completed, cancelled]"), "{purge}");
}

#[test]
fn every_json_flag_says_what_it_does() {
    let mut seen = 0;
    for command in Cli::command().get_subcommands() {
        for arg in command.get_arguments().filter(|a| a.get_id() == "json") {
            seen += 1;
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            assert!(help.contains("JSON"), "{} --json has no help: {help:?}", command.get_name());
        }
    }
    assert!(seen >= 14, "only {seen} commands have --json");
}

#[test]
fn a_mistyped_value_exits_2_with_clap_suggestion() {
    let list = run(&["--db", "sqlite://nowhere.db", "list", "--state", "pendng"]);
    assert_eq!(list.status.code(), Some(2));
    assert!(stderr(&list).contains("invalid value 'pendng' for '--state <STATE>'"), "{}", stderr(&list));
    assert!(stderr(&list).contains("a similar value exists: 'pending'"), "{}", stderr(&list));
    assert!(stdout(&list).is_empty());

    let purge = run(&["purge", "--older-than", "90d", "--owner", "ana", "--reason", "r", "--states", "complete"]);
    assert_eq!(purge.status.code(), Some(2));
    assert!(stderr(&purge).contains("a similar value exists: 'completed'"), "{}", stderr(&purge));
}

#[test]
fn errors_under_json_are_json_on_standard_output_with_their_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("ledger.db").display());
    let migrated = run_in(Path::new(BIN), dir.path(), &["--db", &db, "migrate"]);
    assert_eq!(migrated.status.code(), Some(0), "{}", stderr(&migrated));
    let cases: [(&[&str], i32, &str); 10] = [
        (&["show", "acme:order:1:none", "--json"], 4, "acme:order:1:none"),
        (&["cancel", "acme:order:1:none", "--owner", "ana", "--reason", "r", "--json"], 4, "acme:order:1:none"),
        (&["list", "--limit", "0", "--json"], 2, "--limit is 0"),
        (&["submit", "--key", "acme:order:2:create", "--payload", "{not json", "--json"], 3, "JSON"),
        (&["list", "--state", "pendng", "--json"], 2, "a similar value exists: 'pending'"),
        (&["list", "--json", "--no-such-flag"], 2, "--no-such-flag"),
        (&["purge", "--older-than", "0d", "--owner", "ana", "--reason", "r", "--json"], 2, "longer than zero"),
        (&["--json", "show", "acme:order:1:none"], 4, "acme:order:1:none"),
        (&["--json", "list", "--state", "pendng"], 2, "a similar value exists: 'pending'"),
        (&["--json", "review"], 2, "prints no answer"),
    ];
    for (args, code, says) in cases {
        let mut line = vec!["--db", &db];
        line.extend_from_slice(args);
        let out = run_in(Path::new(BIN), dir.path(), &line);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}{}", stdout(&out), stderr(&out));
        let answer: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}", stdout(&out)));
        assert_eq!(answer["exit_code"], code, "{args:?}");
        let message = answer["error"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{args:?}: {message}");
        assert!(!message.starts_with("error:"), "{args:?}: {message}");
        assert_eq!(answer.as_object().map(serde_json::Map::len), Some(2), "{args:?}: {answer}");
        assert!(stderr(&out).is_empty(), "{args:?}: {}", stderr(&out));
    }
    // Without --json the same error is a line on standard error, and standard output stays empty.
    let plain = run_in(Path::new(BIN), dir.path(), &["--db", &db, "show", "acme:order:1:none"]);
    assert_eq!(plain.status.code(), Some(4));
    assert!(stdout(&plain).is_empty());
    assert!(stderr(&plain).starts_with("error: "), "{}", stderr(&plain));
    // --help is help, not an error, with or without --json.
    let help = run(&["list", "--json", "--help"]);
    assert_eq!(help.status.code(), Some(0));
    assert!(stdout(&help).starts_with("List actions"), "{}", stdout(&help));
}

#[test]
fn json_is_the_same_flag_before_the_subcommand_as_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("ledger.db").display());
    let submitted = run_in(
        Path::new(BIN),
        dir.path(),
        &["--db", &db, "submit", "--key", "acme:order:3:create", "--payload", "{}", "--source", "shop"],
    );
    assert_eq!(submitted.status.code(), Some(0), "{}", stderr(&submitted));
    let answer = |args: &[&str]| {
        let mut line = vec!["--db", db.as_str()];
        line.extend_from_slice(args);
        let out = run_in(Path::new(BIN), dir.path(), &line);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        serde_json::from_slice::<Value>(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}", stdout(&out)))
    };
    for command in [&["stats"][..], &["show", "acme:order:3:create"], &["list", "--limit", "5"]] {
        let before = answer(&[&["--json"][..], command].concat());
        let after = answer(&[command, &["--json"][..]].concat());
        let masked = |value: Value| value.to_string().replace(char::is_numeric, "0");
        assert_eq!(masked(before), masked(after), "{command:?}");
    }
}

/// `--version` names the commit the binary was built from, as `git` names it here, and its date.
#[test]
fn the_version_names_the_commit_it_was_built_from() {
    let version = stdout(&run(&["--version"]));
    let git = |args: &[&str]| {
        let out = Command::new("git").current_dir(env!("CARGO_MANIFEST_DIR")).args(args).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let expected = match (git(&["rev-parse", "--short", "HEAD"]), git(&["log", "-1", "--format=%cs"])) {
        (Some(commit), Some(date)) => {
            let clean = format!("actionledger {} ({commit} {date})", env!("CARGO_PKG_VERSION"));
            let dirty = format!("actionledger {} ({commit}-dirty {date})", env!("CARGO_PKG_VERSION"));
            vec![clean, dirty]
        }
        _ => vec![format!("actionledger {} (unknown)", env!("CARGO_PKG_VERSION"))],
    };
    assert!(expected.contains(&version.trim().to_owned()), "{version:?}, not one of {expected:?}");
}

/// The binary `cargo install --path .` gives: built without the dev-dependency, so without the
/// `fault-injection` and `testkit` features, installed once per test run under
/// `target/nofaults/root/bin`.
///
/// Installing with the release profile would cost a full optimised build of every dependency;
/// `--debug` builds the same features and embeds the same migrations (`sqlx::migrate!` reads them
/// at compile time in every profile). The intermediate artifacts are shared with this test build
/// (`build.build-dir` is the test build's target directory, where every dependency is already
/// compiled; only the crate itself, and a dependency whose features the dev-dependencies widen, is
/// compiled again), while the final binary goes to its own target directory, so the
/// `target/debug/actionledger` the other tests run is never replaced under them.
fn installed_binary() -> &'static Path {
    static INSTALLED: OnceLock<PathBuf> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let target = Path::new(BIN).parent().and_then(Path::parent).expect("the target directory").to_owned();
        let root = target.join("nofaults").join("root");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut install = Command::new(cargo);
        // Cargo gives a test process the variables it sets for a crate's build (CARGO_PKG_NAME,
        // CARGO_MANIFEST_DIR, ...). Build scripts ask to rerun when those change in Cargo's own
        // environment (ring's does), so with them this build would compile ring and all above it
        // again, and the next `cargo test` once more: it runs with the environment `cargo test` had.
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            if name.starts_with("CARGO_PKG_")
                || name.starts_with("CARGO_BIN_EXE_")
                || [
                    "CARGO_MANIFEST_DIR",
                    "CARGO_MANIFEST_PATH",
                    "CARGO_MANIFEST_LINKS",
                    "CARGO_CRATE_NAME",
                    "CARGO_BIN_NAME",
                    "CARGO_PRIMARY_PACKAGE",
                    "CARGO_TARGET_TMPDIR",
                    "CARGO_RUSTC_CURRENT_DIR",
                    "OUT_DIR",
                ]
                .contains(&name.as_ref())
            {
                install.env_remove(name.as_ref());
            }
        }
        let out = install
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["install", "--path", ".", "--debug", "--locked", "--offline", "--force", "--quiet", "--root"])
            .arg(&root)
            .arg("--target-dir")
            .arg(target.join("nofaults"))
            .arg("--config")
            .arg(format!("build.build-dir={:?}", target.display().to_string()))
            .stdin(Stdio::null())
            .output()
            .expect("run cargo install");
        assert!(out.status.success(), "cargo install failed: {}", stderr(&out));
        root.join("bin").join("actionledger")
    })
}

#[test]
fn cargo_install_gives_a_binary_with_the_migrations_embedded() {
    let bin = installed_binary();
    // A directory with no source tree and no migrations directory in sight.
    let elsewhere = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", elsewhere.path().join("fresh.db").display());
    let migrated = run_in(bin, elsewhere.path(), &["--db", &db, "migrate"]);
    assert_eq!(migrated.status.code(), Some(0), "{}", stderr(&migrated));
    assert!(stdout(&migrated).contains("ledger schema is up to date"), "{}", stdout(&migrated));
    let status = run_in(bin, elsewhere.path(), &["--db", &db, "migrate", "--status"]);
    assert_eq!(status.status.code(), Some(0), "{}", stderr(&status));
    let embedded = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/sqlite")).unwrap().count();
    let applied = stdout(&status).lines().filter(|line| line.starts_with("applied ")).count();
    assert_eq!(applied, embedded, "every migration in the tree is applied:\n{}", stdout(&status));
    assert!(!stdout(&status).contains("pending"), "{}", stdout(&status));
    let submitted =
        run_in(bin, elsewhere.path(), &["--db", &db, "submit", "--key", "acme:order:1:create", "--payload", "{}"]);
    assert_eq!(stdout(&submitted), "created\n", "{}", stderr(&submitted));
    assert!(run_in(bin, elsewhere.path(), &["--version"]).status.success());
}

/// One action for the simulated CRM, drained by `bin` with the crash switch set to `point`.
fn drain_with_crash_switch(bin: &Path, dir: &Path, db: &str, config: &Path, key: &str, point: &str) -> Output {
    let submitted = run_in(bin, dir, &["--db", db, "submit", "--key", key, "--payload", "{}", "--destination", "crm"]);
    assert_eq!(stdout(&submitted), "created\n", "{}", stderr(&submitted));
    Command::new(bin)
        .current_dir(dir)
        .env(faults::VARIABLE, point)
        .args(["--db", db, "worker", "--drain", "--lease", "2s", "--worker-id", "w", "--config"])
        .arg(config)
        .stdin(Stdio::null())
        .output()
        .expect("run the worker")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_without_fault_injection_ignores_the_crash_switch() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let crm = SimCrm::start(listener, Options::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("ledger.db").display());
    let config = dir.path().join("actionledger.toml");
    std::fs::write(&config, crm.destination_config("crm")).unwrap();
    let (dir_path, db_text) = (dir.path().to_owned(), db.clone());

    let checked = tokio::task::spawn_blocking(move || {
        // The control, on a ledger of its own: the binary under test has the switch, and it kills
        // the worker.
        let control = format!("sqlite://{}", dir_path.join("control.db").display());
        let killed = drain_with_crash_switch(Path::new(BIN), &dir_path, &control, &config, "acme:k:0:c", "after_claim");
        assert_eq!(killed.status.signal(), Some(9), "the test build's switch kills: {}", stderr(&killed));

        let bin = installed_binary();
        let shipped = std::fs::read(bin).unwrap();
        let tested = std::fs::read(BIN).unwrap();
        let has = |bytes: &[u8], text: &str| bytes.windows(text.len()).any(|w| w == text.as_bytes());
        assert!(has(&tested, faults::VARIABLE), "the test build reads {}", faults::VARIABLE);
        assert!(!has(&shipped, faults::VARIABLE), "the shipped build never names {}", faults::VARIABLE);
        assert!(!has(&shipped, "crash point"), "the shipped build has no crash point");

        let mut keys = Vec::new();
        for (n, point) in faults::ALL.into_iter().enumerate() {
            let key = format!("acme:k:{}:c", n + 1);
            let drained = drain_with_crash_switch(bin, &dir_path, &db_text, &config, &key, point);
            assert_eq!(drained.status.code(), Some(0), "{point}: {}", stderr(&drained));
            keys.push(key);
        }
        keys
    })
    .await
    .unwrap();

    for key in checked {
        let shown = run_in(Path::new(BIN), dir.path(), &["--db", &db, "show", &key, "--json"]);
        let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
        assert_eq!(shown["action"]["state"], "completed", "{key}");
        assert_eq!(crm.records_for(&key).len(), 1, "{key}: one record in the CRM");
    }
    // The control's worker was killed after its claim: its action was never sent.
    assert!(crm.records_for("acme:k:0:c").is_empty());
    assert_eq!(crm.stats().records, faults::ALL.len() as u64);
}

#[test]
fn the_systemd_unit_verifies() {
    let unit = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/actionledger-worker.service"));
    let text = std::fs::read_to_string(unit).unwrap();
    for setting in ["User=actionledger", "Restart=on-failure", "KillSignal=SIGTERM", "EnvironmentFile="] {
        assert!(text.lines().any(|line| line.starts_with(setting)), "the unit lacks {setting}");
    }
    let stop: u64 = text
        .lines()
        .find_map(|line| line.strip_prefix("TimeoutStopSec=")?.strip_suffix('s')?.parse().ok())
        .expect("TimeoutStopSec in seconds");
    // A destination's defaults: how long one request may take unless its block says otherwise.
    let defaults =
        actionledger::config::Config::parse("[destinations.crm]\ncreate = { url = \"http://127.0.0.1:1/tasks\" }\n")
            .unwrap();
    let crm = &defaults.destinations["crm"];
    let longest_request = (crm.timeout + crm.connect_timeout).as_secs();
    assert!(stop > 2 * longest_request, "TimeoutStopSec={stop}s, a request may take {longest_request}s");
    // The example URL's user can log in: a login the comments make, not one of the group roles
    // the migrations create without LOGIN.
    let user = text
        .lines()
        .find_map(|line| line.split_once("ACTIONLEDGER_DB=postgres://")?.1.split_once('@').map(|(user, _)| user))
        .expect("an example URL");
    let groups = ["actionledger_owner", "actionledger_worker", "actionledger_reviewer", "actionledger_viewer"];
    assert!(!groups.contains(&user), "the example URL logs in as {user}, a role that cannot log in");
    assert!(text.contains(&format!("CREATE ROLE {user} LOGIN")), "the unit does not say how {user} is made");

    let Ok(probe) = Command::new("systemd-analyze").arg("--version").output() else {
        println!("SKIPPING the systemd unit check: systemd-analyze is not installed");
        return;
    };
    assert!(probe.status.success());
    // The unit names the installed path; verify checks that ExecStart is executable, so point it at
    // the binary under test.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("actionledger-worker.service");
    std::fs::write(&copy, text.replace("/usr/local/bin/actionledger", BIN)).unwrap();
    let out = Command::new("systemd-analyze").arg("verify").arg(&copy).output().unwrap();
    // A setting systemd cannot parse is only a warning on standard error: none is allowed.
    assert!(out.status.success() && out.stderr.is_empty(), "systemd-analyze verify: {}", stderr(&out));
}

/// The container example (not built here: that needs a registry): two stages, the binary built
/// against the lock file, run by a user other than root, and no secret set in the image or copied
/// into the build.
#[test]
fn the_container_example_runs_unprivileged_and_holds_no_secret() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let file = std::fs::read_to_string(root.join("examples/Containerfile")).unwrap();
    let instructions: Vec<&str> =
        file.lines().filter(|line| !line.starts_with('#') && !line.trim().is_empty()).collect();
    assert_eq!(instructions.iter().filter(|line| line.starts_with("FROM ")).count(), 2, "two stages");
    assert!(file.contains("cargo build --release --locked"), "built against the lock file");
    let user = instructions.iter().rev().find_map(|line| line.strip_prefix("USER ")).expect("a USER");
    let uid: u32 = user.split(':').next().unwrap().parse().expect("the user by number");
    assert_ne!(uid, 0, "runs as root");
    for line in instructions.iter().filter(|line| line.starts_with("ENV ") || line.starts_with("ARG ")) {
        for secret in ["PASSWORD", "TOKEN", "SECRET", "ACTIONLEDGER_DB", "DATABASE_URL"] {
            assert!(!line.to_uppercase().contains(secret), "the image sets {line}");
        }
    }
    assert!(file.contains(r#"ENTRYPOINT ["/usr/local/bin/actionledger"]"#), "{file}");
    let ignored = std::fs::read_to_string(root.join(".dockerignore")).unwrap();
    for kept_out in ["target", "actionledger.toml", "**/*.db"] {
        assert!(ignored.lines().any(|line| line == kept_out), ".dockerignore lacks {kept_out}");
    }
}

/// What only tests use is not in what users install: the throwaway PostgreSQL's starter is in the
/// test build's binary and absent from the installed one.
#[test]
fn the_installed_binary_holds_no_test_kit() {
    const STARTER: &[u8] = b"cannot hand the test cluster's directory to the postgres user";
    let holds = |bin: &Path| std::fs::read(bin).unwrap().windows(STARTER.len()).any(|w| w == STARTER);
    assert!(holds(Path::new(env!("CARGO_BIN_EXE_actionledger"))), "the check finds the kit where it is");
    assert!(!holds(installed_binary()), "the installed binary carries the throwaway PostgreSQL");
}
