//! `stats`: the ledger's figures once, for scripts and cron (the same figures the worker's
//! metrics endpoint serves, from the same ledger function).

use super::render;
use crate::error::{Error, exit};
use crate::ledger::Ledger;
use crate::store::Store;
use clap::Args;

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Print the figures as one JSON object (states, stale_claims, oldest_*_seconds; errors too:
    /// {"error", "exit_code"}).
    #[arg(long)]
    pub(super) json: bool,
}

pub(super) async fn stats<S: Store>(ledger: &Ledger<S>, args: &StatsArgs) -> Result<i32, Error> {
    let stats = ledger.stats().await?;
    render::stats(&stats, args.json);
    Ok(exit::OK)
}
