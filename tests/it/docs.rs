//! Every command the README and the guides under `docs/` show is one the command line accepts: a
//! renamed subcommand or a removed flag fails here, not in a reader's shell.
//!
//! The rule for what counts as a command, kept simple enough to predict by reading a guide:
//!
//! - only fenced code blocks whose info string is `sh`, `shell`, `bash` or `console`;
//! - in a `console` block only lines starting with `$ ` (the rest is output), the `$ ` dropped;
//! - a line ending in `\` goes on with the next;
//! - a line whose first word (after indentation) is `actionledger`, or `cargo run` with the
//!   command's arguments after `--`;
//! - its words are split as the shell splits them (quotes and backslashes), up to the first
//!   unquoted `#` comment, redirection, pipe, `&` or `;`; `$VARIABLES` stay as written, as a
//!   value the parser accepts like any other.
//!
//! Each command is then parsed by the crate's own clap definition, [`Cli`], with its value
//! parsers, without running it: parsing through the library checks every subcommand, flag and
//! value in well under a second, where spawning the binary per line would take far longer.

use actionledger::cli::Cli;
use clap::Parser as _;
use clap::error::ErrorKind;
use std::path::{Path, PathBuf};

/// The README and every Markdown file directly under `docs/`.
fn documents() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    files.sort();
    files.insert(0, root.join("README.md"));
    files
}

/// A command shown in a document, with where it is shown.
#[derive(Debug)]
struct Shown {
    file: String,
    line: usize,
    words: Vec<String>,
}

/// What kind of fenced block a line is in.
#[derive(Clone, Copy, PartialEq)]
enum Block {
    Prose,
    Shell,
    Console,
    Other,
}

/// The lines of shell code blocks that are commands, joined across `\` continuations, each with
/// the line number it starts on.
fn shell_lines(text: &str) -> Vec<(usize, String)> {
    let mut lines = Vec::new();
    let mut block = Block::Prose;
    let mut pending: Option<(usize, String)> = None;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            block = match (block, info.trim()) {
                (Block::Prose, "sh" | "shell" | "bash") => Block::Shell,
                (Block::Prose, "console") => Block::Console,
                (Block::Prose, _) => Block::Other,
                _ => Block::Prose,
            };
            lines.extend(pending.take());
            continue;
        }
        let (number, joined) = match (pending.take(), block) {
            (Some((number, mut joined)), _) => {
                joined.push(' ');
                joined.push_str(trimmed);
                (number, joined)
            }
            (None, Block::Shell) => (index + 1, trimmed.to_owned()),
            (None, Block::Console) => match trimmed.strip_prefix("$ ") {
                Some(command) => (index + 1, command.to_owned()),
                None => continue,
            },
            (None, Block::Prose | Block::Other) => continue,
        };
        match joined.strip_suffix('\\') {
            Some(open) => pending = Some((number, open.trim_end().to_owned())),
            None => lines.push((number, joined)),
        }
    }
    lines
}

/// The words of a shell line as the shell would split them, up to the first unquoted comment,
/// redirection, pipe, `&` or `;`.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => words.extend(word.take()),
            '#' if word.is_none() => break,
            '>' | '<' | '|' | '&' | ';' => break,
            '\'' => {
                let text = word.get_or_insert_with(String::new);
                text.extend(chars.by_ref().take_while(|&c| c != '\''));
            }
            '"' => {
                let text = word.get_or_insert_with(String::new);
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => text.extend(chars.next()),
                        c => text.push(c),
                    }
                }
            }
            '\\' => word.get_or_insert_with(String::new).extend(chars.next()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

/// The command line a shell line runs, as `actionledger` and its arguments, if it runs one.
fn command_words(line: &str) -> Option<Vec<String>> {
    let words = shell_words(line);
    match words.first().map(String::as_str) {
        Some("actionledger") => Some(words),
        Some("cargo") if words.get(1).is_some_and(|word| word == "run") => {
            let arguments = words.iter().position(|word| word == "--")?;
            Some(std::iter::once("actionledger".to_owned()).chain(words[arguments + 1..].iter().cloned()).collect())
        }
        _ => None,
    }
}

fn shown_commands() -> Vec<Shown> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    documents()
        .iter()
        .flat_map(|path| {
            let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            let file = path.strip_prefix(root).unwrap().display().to_string();
            shell_lines(&text)
                .into_iter()
                .filter_map(|(line, text)| command_words(&text).map(|words| Shown { file: file.clone(), line, words }))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The words as one line a reader can find in the document, quoting those with spaces.
fn quoted(words: &[String]) -> String {
    let quote = |word: &String| if word.contains(char::is_whitespace) { format!("'{word}'") } else { word.clone() };
    words.iter().map(quote).collect::<Vec<_>>().join(" ")
}

#[test]
fn every_command_the_docs_show_parses() {
    let shown = shown_commands();
    // The guides show well over this many; fewer means the extraction above lost them.
    assert!(shown.len() >= 40, "only {} commands found in the docs: {shown:#?}", shown.len());
    let refused: Vec<String> = shown
        .iter()
        .filter_map(|command| match Cli::try_parse_from(&command.words) {
            Ok(_) => None,
            Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => None,
            Err(e) => Some(format!("{}:{}: {}\n{}", command.file, command.line, quoted(&command.words), e.render())),
        })
        .collect();
    assert!(refused.is_empty(), "commands in the docs that the command line refuses:\n\n{}", refused.join("\n"));
    for file in ["README.md", "docs/cli.md", "docs/review.md", "docs/operators.md", "docs/postgresql.md"] {
        assert!(shown.iter().any(|command| command.file == file), "no command found in {file}");
    }
}

#[test]
fn the_extraction_follows_its_rule() {
    let text = "text\n\n```console\n$ actionledger show KEY \\\n    --json\n{\"error\":\"x\"}\n```\n\n```toml\n\
                actionledger = \"not a command\"\n```\n\n```sh\n# a comment\nactionledger list --refused   # why\n  \
                actionledger submit --payload \"{\\\"a\\\":\\\"$n\\\"}\" --key 'k 1' > out\n\
                cargo run --release -- bench --quick\ncargo test\n```\n";
    let commands: Vec<(usize, Vec<String>)> = shell_lines(text)
        .into_iter()
        .filter_map(|(line, text)| command_words(&text).map(|words| (line, words)))
        .collect();
    let words = |list: &[&str]| list.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        commands,
        vec![
            (4, words(&["actionledger", "show", "KEY", "--json"])),
            (15, words(&["actionledger", "list", "--refused"])),
            (16, words(&["actionledger", "submit", "--payload", "{\"a\":\"$n\"}", "--key", "k 1"])),
            (17, words(&["actionledger", "bench", "--quick"])),
        ]
    );
}
