//! `demo`: a self-contained demonstration on its own ledger.

use super::{is_postgres, redact_url, render};
use crate::domain::Person;
use crate::error::{Error, exit};
use crate::ledger::Ledger;
use crate::store::{PostgresStore, SqliteStore};
use clap::Args;
use std::io::IsTerminal as _;

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Run the scenario without the console and print a summary.
    #[arg(long)]
    no_ui: bool,
    /// With --no-ui, print the summary as JSON (errors too: {"error", "exit_code"}).
    #[arg(long, requires = "no_ui")]
    pub(super) json: bool,
    /// Your name in the console (default: $USER, else "demo").
    #[arg(long)]
    owner: Option<String>,
}

/// The demo's own directory, removed however the demo ends: an error opening the ledger, an
/// error or a panic in the scenario, or a normal end.
struct Temporary(std::path::PathBuf);

impl Drop for Temporary {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The demo runs on its own temporary ledger unless `--db` names one.
pub(super) async fn demo(db: Option<String>, args: DemoArgs) -> Result<i32, Error> {
    let owner = args
        .owner
        .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| "demo".to_owned());
    let owner = Person::parse(&owner)?;
    let has_terminal = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    if !args.no_ui && !has_terminal {
        return Err(Error::Invalid(
            "the demo ends in the review console, which needs a terminal; run `actionledger demo --no-ui` for the \
             scenario and its summary"
                .to_owned(),
        ));
    }
    let temporary =
        db.is_none().then(|| Temporary(std::env::temp_dir().join(format!("actionledger-demo-{}", std::process::id()))));
    let url = match (&db, &temporary) {
        (Some(url), _) => url.clone(),
        (None, Some(Temporary(dir))) => {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
            format!("sqlite://{}", dir.join("demo.db").display())
        }
        (None, None) => unreachable!("one of the two is set"),
    };
    let ui = !args.no_ui;
    let summary = if is_postgres(&url) {
        crate::demo::run(&Ledger::new(PostgresStore::open(&url).await?), &redact_url(&url), owner, ui).await
    } else {
        crate::demo::run(&Ledger::new(SqliteStore::open(&url).await?), &redact_url(&url), owner, ui).await
    };
    drop(temporary);
    let summary = summary?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary).expect("summaries serialize"));
    } else {
        render::demo_summary(&summary);
    }
    Ok(exit::OK)
}
