//! `purge`: retention (rule 7). Reduces settled actions older than a window to their tombstone
//! and prints what the run removed; the rules are the ledger's ([`Ledger::purge`]).

use super::render;
use super::values::FinalStateArg;
use crate::config::duration_text;
use crate::domain::retention::DEFAULT_PURGE_STATES;
use crate::domain::{Person, PurgeRequest, Reason};
use crate::error::{Error, exit};
use crate::ledger::Ledger;
use crate::store::Store;
use clap::Args;

#[derive(Debug, Args)]
pub struct PurgeArgs {
    /// Purge actions settled longer ago than this, such as 90d or 12h (units ms, s, m, h, d).
    #[arg(long, value_name = "DURATION")]
    older_than: String,
    /// The final states to purge, comma-separated (the default: both). Actions in any other state
    /// are never purged.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "STATES")]
    states: Option<Vec<FinalStateArg>>,
    /// Your name: the person answerable for this purge, recorded with the run.
    #[arg(long)]
    owner: String,
    /// Why, recorded with the run.
    #[arg(long)]
    reason: String,
    /// Print what would be removed, and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print what the run removed as one JSON object (errors too: {"error", "exit_code"}).
    #[arg(long)]
    pub(super) json: bool,
}

/// The request `args` stand for; every problem with them is a usage error, found before the
/// ledger is touched.
fn request(args: &PurgeArgs) -> Result<PurgeRequest, Error> {
    let older_than = duration_text::parse(&args.older_than)
        .map_err(|e| Error::Invalid(format!("--older-than: {e}; for example 90d")))?;
    let states = match &args.states {
        None => DEFAULT_PURGE_STATES.to_vec(),
        Some(states) => states.iter().map(|state| state.0).collect(),
    };
    Ok(PurgeRequest::new(older_than, &states, Person::parse(&args.owner)?, Reason::parse(&args.reason)?, args.dry_run)?)
}

pub(super) async fn purge<S: Store>(ledger: &Ledger<S>, args: PurgeArgs) -> Result<i32, Error> {
    let request = request(&args)?;
    let report = ledger.purge(&request).await?;
    render::purged(&report, args.json);
    Ok(exit::OK)
}
