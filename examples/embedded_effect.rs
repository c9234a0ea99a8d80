//! A library user's own effect: the worker pipeline performing something that is not an HTTP
//! request. Here each action writes one message file into an outbox directory, named by the
//! action's key. The effect declares a lookup (a file named by the key either exists or not), so
//! the ledger may take over a claim whose worker died, and settles an uncertain outcome by looking.
//!
//! `cargo run --example embedded_effect`: submits a dozen orders (two of them delivered twice),
//! drains them with a worker of four slots, and lists the outbox: one file per order.

use actionledger::Ledger;
use actionledger::domain::{Capabilities, Evidence, LookupReport, LookupVerdict, RawSubmission};
use actionledger::error::Error;
use actionledger::ledger::{Outcome, Report};
use actionledger::store::SqliteStore;
use actionledger::worker::{self, Effect, Stop, Work, WorkerOptions};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Writes each action's payload to `OUTBOX/<key>.json`, once.
struct Outbox {
    dir: PathBuf,
}

impl Outbox {
    fn file_of(&self, key: &str) -> PathBuf {
        // Keys may hold characters a file name must not: every other byte is percent-encoded, so
        // that two keys never share a file.
        let name: String =
            key.bytes()
                .map(|b| {
                    if b.is_ascii_alphanumeric() || b == b'-' { char::from(b).to_string() } else { format!("%{b:02X}") }
                })
                .collect();
        self.dir.join(format!("{name}.json"))
    }
}

impl Effect for Outbox {
    fn catalog(&self) -> actionledger::domain::DestinationCatalog {
        let declared = Capabilities { lookup: true, ..Capabilities::default() };
        actionledger::domain::DestinationCatalog::new([("outbox".to_owned(), declared)].into(), Some("outbox".into()))
    }

    async fn perform(&self, work: &Work<'_>, _stop: Stop) -> Report {
        let path = self.file_of(work.action.key.as_str());
        // `create_new` makes a repeat harmless: the file is there or it is not.
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|mut file| std::io::Write::write_all(&mut file, work.action.payload.canonical().as_bytes()));
        let id = path.display().to_string();
        match written {
            Ok(()) => completed(id),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => completed(id),
            // A full disk may have left part of a file: the outcome is uncertain, and the lookup
            // (or a person) settles it.
            Err(error) => {
                Report { outcome: Outcome::Unknown, error: Some(error.to_string()), evidence: Evidence::default() }
            }
        }
    }

    async fn look_up(
        &self,
        action: &actionledger::domain::ActionRecord,
        _after: Option<&actionledger::domain::ActionRecord>,
    ) -> Result<LookupReport, Error> {
        let path = self.file_of(action.key.as_str());
        let found = path.exists();
        Ok(LookupReport {
            verdict: if found { LookupVerdict::Found } else { LookupVerdict::NotFound },
            records: i64::from(found),
            destination_id: found.then(|| path.display().to_string()),
            evidence: Evidence::default(),
            detail: None,
        })
    }
}

fn completed(id: String) -> Report {
    Report {
        outcome: Outcome::Completed { destination_id: id.clone() },
        error: None,
        evidence: Evidence { status: None, destination_id: Some(id), body: None },
    }
}

fn order(n: u32) -> RawSubmission {
    RawSubmission {
        key: Some(format!("order:{n}")),
        payload: format!(r#"{{"order":{n},"to":"customer-{n}@example.com"}}"#).into_bytes(),
        ..RawSubmission::default()
    }
}

#[tokio::main]
async fn main() -> color_eyre::Result<()> {
    color_eyre::install()?;
    let dir = tempfile::tempdir()?;
    let outbox = dir.path().join("outbox");
    std::fs::create_dir(&outbox)?;
    let ledger = Ledger::new(SqliteStore::open(&format!("sqlite://{}", dir.path().join("ledger.db").display())).await?);
    for n in 1..=12 {
        ledger.submit(&order(n)).await?;
    }
    // A webhook delivered twice: the ledger keeps one action per key.
    for n in [3, 7] {
        ledger.submit(&order(n)).await?;
    }
    let options = WorkerOptions {
        id: "outbox-worker".into(),
        concurrency: 4,
        batch: 4,
        lease: Duration::from_secs(30),
        poll_interval: Duration::from_millis(50),
        drain: true,
        destinations: Outbox { dir: outbox.clone() },
        progress: false,
    };
    let summary = worker::run(ledger.clone(), options, std::future::pending()).await?;
    println!("{}", summary.line());
    print_outbox(&outbox)?;
    Ok(())
}

fn print_outbox(outbox: &Path) -> std::io::Result<()> {
    let mut files: Vec<_> = std::fs::read_dir(outbox)?.filter_map(Result::ok).map(|e| e.file_name()).collect();
    files.sort();
    println!("{} files in the outbox:", files.len());
    for file in files {
        println!("  {}", file.to_string_lossy());
    }
    Ok(())
}
