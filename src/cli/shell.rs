//! `completions` and `manpage`: shell completion scripts and the manual page, generated from the
//! command line's own definition, so they list exactly the commands, flags and values it takes.

use super::Cli;
use crate::error::{Error, exit};
use clap::CommandFactory as _;
use roff::{Roff, bold, italic, roman};
use std::io::Write as _;

/// Prints the completion script for `shell`.
pub(super) fn completions(shell: clap_complete::Shell) -> Result<i32, Error> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "actionledger", &mut script);
    print(&script, "cannot write the completion script")
}

/// Prints the manual page (roff, for `man -l -` or a file under `man1/`).
pub(super) fn manpage() -> Result<i32, Error> {
    let page = manual_page().map_err(|e| Error::io("cannot render the manual page", e))?;
    print(&page, "cannot write the manual page")
}

/// The whole manual in one page: the global options, then a subsection per command (and per
/// subcommand of one) with its synopsis and every option, then the environment, the files and the
/// exit status. clap_mangen renders each part from the definition; one page rather than one per
/// command, so that nothing it names is a page that is not installed.
fn manual_page() -> std::io::Result<Vec<u8>> {
    let command = Cli::command();
    let man = clap_mangen::Man::new(command.clone());
    let mut page = Vec::new();
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    man.render_synopsis_section(&mut page)?;
    man.render_description_section(&mut page)?;
    man.render_options_section(&mut page)?;
    page.extend(Roff::new().control("SH", ["COMMANDS"]).render().as_bytes());
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        command_section(&mut page, "actionledger", sub)?;
    }
    page.extend(closing_sections().render().as_bytes());
    man.render_version_section(&mut page)?;
    Ok(page)
}

/// One command's subsection: its name, what it does, its synopsis and its options, then its own
/// subcommands' subsections.
fn command_section(page: &mut Vec<u8>, parent: &str, sub: &clap::Command) -> std::io::Result<()> {
    let name = format!("{parent} {}", sub.get_name());
    let alone = sub.clone().bin_name(&name).disable_help_flag(true).disable_help_subcommand(true);
    let man = clap_mangen::Man::new(alone.clone());
    let mut heading = Roff::new();
    heading.control("SS", [name.as_str()]);
    if let Some(about) = sub.get_long_about().or_else(|| sub.get_about()) {
        heading.text([roman(about.to_string())]);
    }
    page.extend(heading.render().as_bytes());
    // Each part comes under a section heading of its own; within a command's subsection the
    // synopsis and the options need none, and a group of options keeps its name in bold.
    let mut part = Vec::new();
    man.render_synopsis_section(&mut part)?;
    man.render_options_section(&mut part)?;
    for line in String::from_utf8_lossy(&part).lines() {
        match line.strip_prefix(".SH ") {
            Some("SYNOPSIS" | "OPTIONS") => page.extend(b".PP\n"),
            Some(group) => {
                let group = group.trim_matches('"');
                page.extend(Roff::new().control("PP", []).text([bold(format!("{group}:"))]).render().as_bytes());
            }
            None => {
                page.extend(line.as_bytes());
                page.push(b'\n');
            }
        }
    }
    for nested in alone.get_subcommands().filter(|nested| !nested.is_hide_set()) {
        command_section(page, &name, nested)?;
    }
    Ok(())
}

/// The variables every command may read, in the order a person sets them up.
const ENVIRONMENT: &[(&str, &str)] = &[
    ("ACTIONLEDGER_DB", "The ledger database URL when --db is not given (sqlite://FILE or postgres://...)."),
    ("DATABASE_URL", "The ledger database URL when neither --db nor ACTIONLEDGER_DB names one."),
    ("ACTIONLEDGER_SCHEMA", "PostgreSQL: the schema the ledger lives in, as --schema."),
    (
        "PGSSLMODE, PGSSLROOTCERT, PGSSLCERT, PGSSLKEY, PGPASSWORD",
        "PostgreSQL: TLS mode, certificates, key and password where the URL gives none, as libpq reads them.",
    ),
    (
        "ACTIONLEDGER_TOKENS",
        "serve: bearer token lines (sha256:HEX ROLE NAME, one a line), in addition to the tokens file.",
    ),
    ("ACTIONLEDGER_TOKENS_FILE", "serve: the tokens file, as --tokens."),
    ("RUST_LOG", "Which log events are written to standard error (default: info), e.g. actionledger=debug,sqlx=warn."),
    ("NO_COLOR", "When set and not empty: no colour in logs, panic reports or the review console."),
    ("TERM, COLORTERM", "The review console's colours: how many the terminal shows."),
    ("USER", "review and demo: the person commands are recorded under when --owner is not given."),
    ("HOSTNAME", "worker: its name in claims (with the process id) when /etc/hostname names none."),
];

/// ENVIRONMENT, FILES and EXIT STATUS, from the lists above and the exit codes the binary uses.
fn closing_sections() -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["ENVIRONMENT"]);
    for (name, meaning) in ENVIRONMENT {
        roff.control("TP", []).text([bold(*name)]).text([roman(*meaning)]);
    }
    roff.control("PP", []).text([
        roman("Destination headers in the configuration file may name variables of their own ("),
        italic("env = \"CRM_TOKEN\""),
        roman("), read by the commands that send."),
    ]);
    roff.control("SH", ["FILES"]);
    for (file, meaning) in [
        (
            crate::config::DEFAULT_CONFIG_FILE,
            "In the current directory: the destinations and the worker's settings (--config), read by worker, \
             reconcile, serve, review, show, lookup and the other commands that ask a destination.",
        ),
        ("actionledger.db", "In the current directory: the SQLite ledger used when no database URL is given."),
        ("tokens file", "serve --tokens: one line per bearer token, as serve hash-token prints it."),
        ("~/.pgpass", "PostgreSQL passwords, as libpq reads them, where the URL gives none."),
    ] {
        roff.control("TP", []).text([bold(file)]).text([roman(meaning)]);
    }
    roff.control("SH", ["EXIT STATUS"]);
    for (code, meaning) in [
        (exit::OK, "Success."),
        (exit::ERROR, "Error: a database unreachable, a destination that cannot be asked, a file that fails."),
        (exit::USAGE, "Usage error: a missing or invalid argument, name, reason or configuration."),
        (
            exit::REFUSED,
            "Refused: a conflict, a stale --expect-version, a transition the action's state does not allow, an \
             invalid submission, something the database role may not do; reconcile: disagreements found.",
        ),
        (exit::NOT_FOUND, "Not found: no such action (or no ledger at the URL)."),
        (exit::NOT_CURRENT, "migrate --status: the ledger's schema is not the one this build expects."),
        (exit::TIMED_OUT, "wait --timeout: the time ran out before the action reached a state waited for."),
    ] {
        roff.control("TP", []).text([bold(code.to_string())]).text([roman(meaning)]);
    }
    roff.control("PP", [])
        .text([roman("Under --json an error is one JSON object on standard output, with the same exit status.")]);
    roff
}

/// Writes the whole text to standard output. A reader that closed it early (`| head`) is no error,
/// as for every other command.
fn print(text: &[u8], what: &str) -> Result<i32, Error> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text).and_then(|()| out.flush()) {
        Ok(()) => Ok(exit::OK),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(exit::OK),
        Err(e) => Err(Error::io(what, e)),
    }
}
