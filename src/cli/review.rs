//! The review console: `review`, in a terminal or replaying a script.

use super::manual::optional_destinations;
use super::redact_url;
use crate::domain::Person;
use crate::error::{Error, exit};
use crate::ledger::Ledger;
use crate::store::{ListFilter, Store};
use clap::Args;

#[derive(Debug, Args)]
pub struct ReviewArgs {
    /// Your name, recorded with every command you run (default: $USER).
    #[arg(long)]
    owner: Option<String>,
    /// Destinations, for lookups, takeover safety and retention windows (default:
    /// actionledger.toml if it exists).
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    /// Run without a terminal: replay the key events in FILE, then print the final screen.
    #[arg(long, value_name = "FILE")]
    script: Option<std::path::PathBuf>,
    /// With --script: exit 3 when the script ends inside an open dialog (it is always reported on
    /// standard error).
    #[arg(long, requires = "script")]
    strict: bool,
    /// Screen size for --script, as WIDTHxHEIGHT.
    #[arg(long, default_value = "100x30", value_parser = parse_size, requires = "script")]
    size: (u16, u16),
    /// How often the console refreshes by itself.
    #[arg(long, default_value = "2s", value_parser = crate::config::duration_text::parse)]
    refresh: std::time::Duration,
}

/// A `--size` that cannot be used.
#[derive(Debug, thiserror::Error)]
enum SizeError {
    #[error("{0:?} is not WIDTHxHEIGHT, e.g. 100x30")]
    NotASize(String),
    #[error("{0:?} is not a width")]
    Width(String),
    #[error("{0:?} is not a height")]
    Height(String),
    #[error("{0} is out of range: use at least 40x12 and at most 1000x500")]
    OutOfRange(String),
}

fn parse_size(text: &str) -> Result<(u16, u16), SizeError> {
    let (w, h) = text.split_once('x').ok_or_else(|| SizeError::NotASize(text.to_owned()))?;
    let (w, h): (u16, u16) = (
        w.parse().map_err(|_| SizeError::Width(w.to_owned()))?,
        h.parse().map_err(|_| SizeError::Height(h.to_owned()))?,
    );
    if w < 40 || h < 12 || w > 1000 || h > 500 {
        return Err(SizeError::OutOfRange(text.to_owned()));
    }
    Ok((w, h))
}

pub(super) async fn review<S: Store>(ledger: &Ledger<S>, args: ReviewArgs, url: &str) -> Result<i32, Error> {
    let owner = args
        .owner
        .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
        .ok_or_else(|| Error::Invalid("give --owner NAME: commands are recorded under a named person".to_owned()))?;
    let owner = Person::parse(&owner)?;
    let destinations = optional_destinations(args.config.as_deref())?;
    // A person with actions routed to them (a destination's or a key prefix's review owner, or
    // assigned by hand) opens on those; the filter line says so, and clearing it shows all.
    let theirs = ListFilter { owner: Some(owner.as_str().to_owned()), limit: 100, ..ListFilter::default() };
    let assigned = ledger
        .list(&theirs)
        .await?
        .iter()
        .any(|a| a.state.needs_person() && a.assignee.as_deref() == Some(owner.as_str()));
    let options = crate::console::ConsoleOptions {
        hint: assigned.then(|| {
            format!(
                "Showing what is assigned to {} (filter `mine`): / then Backspace and Enter shows all",
                owner.as_str()
            )
        }),
        filter: assigned.then(|| "mine".to_owned()),
        owner,
        ledger_label: redact_url(url),
        destinations,
        refresh: args.refresh,
    };
    match args.script {
        Some(path) => {
            let script = read_script(&path)?;
            let (width, height) = args.size;
            let report = crate::console::run_script(ledger, &options, &script, width, height).await?;
            print!("{}", report.screen);
            if let Some(stopped) = &report.stopped {
                eprintln!(
                    "script line {} ({}): {}; the script stopped there",
                    stopped.line,
                    crate::console::safe_text::SafeText::new(&stopped.text),
                    stopped.message
                );
                // A refusal exits 3, a destination that could not be asked 1: as on the command line.
                return Ok(stopped.kind.exit_code());
            }
            if let Some(dialog) = &report.open_dialog {
                eprintln!("the script ended inside an open dialog: {dialog}");
                if args.strict {
                    return Ok(exit::REFUSED);
                }
            }
        }
        None => crate::console::run_terminal(ledger, &options).await?,
    }
    Ok(exit::OK)
}

/// The longest key script read: far more keys than any review takes, and a bound on an endless
/// file (`--script /dev/zero`).
const MAX_SCRIPT_BYTES: u64 = 1024 * 1024;

fn read_script(path: &std::path::Path) -> Result<String, Error> {
    use std::io::Read as _;
    let cannot = |e: &dyn std::fmt::Display| Error::Invalid(format!("cannot read the script {}: {e}", path.display()));
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_SCRIPT_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| cannot(&e))?;
    if bytes.len() as u64 > MAX_SCRIPT_BYTES {
        return Err(cannot(&format!("it is longer than {MAX_SCRIPT_BYTES} bytes")));
    }
    String::from_utf8(bytes).map_err(|e| cannot(&e))
}
