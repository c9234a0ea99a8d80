//! Recording and reading actions: `submit`, `list` and `show`.

use super::values::StateArg;
use super::{parse_key, render};
use crate::domain::RawSubmission;
use crate::domain::payload::MAX_PAYLOAD_BYTES;
use crate::error::{Error, exit};
use crate::ledger::Ledger;
use crate::store::{ListFilter, Store};
use clap::Args;
use std::io::Read;

/// Most rows one `list` returns.
const MAX_LIST_LIMIT: i64 = 1000;

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The action key, e.g. acme:order:ORD-1042:create-task.
    #[arg(long)]
    key: Option<String>,
    /// The payload: JSON text, @FILE to read a file, or @- to read standard input.
    #[arg(long, value_name = "JSON|@FILE")]
    payload: Option<String>,
    /// The id of the source event that carried this delivery.
    #[arg(long)]
    event_id: Option<String>,
    /// The source system.
    #[arg(long)]
    source: Option<String>,
    /// Orders versions of the source record; an older one than recorded is stale.
    #[arg(long)]
    source_version: Option<i64>,
    /// The destination that will perform the action.
    #[arg(long)]
    destination: Option<String>,
    /// Run only after the action with this key completed.
    #[arg(long, value_name = "KEY")]
    after: Option<String>,
    /// Print the outcome as one JSON object (errors too: {"error", "exit_code"}).
    #[arg(long)]
    pub(super) json: bool,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only actions in this state.
    #[arg(long, value_enum)]
    state: Option<StateArg>,
    /// Only actions for this destination.
    #[arg(long)]
    destination: Option<String>,
    /// Only actions claimed by this worker or assigned to this person.
    #[arg(long)]
    owner: Option<String>,
    /// How many to show (1 to 1000).
    #[arg(long, default_value_t = 50)]
    limit: i64,
    /// Continue after this id (the cursor the previous page printed).
    #[arg(long, value_name = "ID")]
    before: Option<i64>,
    /// List refused submissions instead of actions.
    #[arg(long)]
    refused: bool,
    /// Print the page as one JSON object (errors too: {"error", "exit_code"}).
    #[arg(long)]
    pub(super) json: bool,
}

/// Reads a payload, but never more than the payload limit plus one byte: enough for the ledger
/// to refuse an oversized payload as it refuses any other, without reading an endless input
/// (`@/dev/zero`, a runaway pipe) until memory runs out.
fn read_bounded(reader: impl Read) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    reader.take(MAX_PAYLOAD_BYTES as u64 + 1).read_to_end(&mut bytes)?;
    Ok(bytes)
}

pub(super) async fn submit<S: Store>(ledger: &Ledger<S>, args: SubmitArgs) -> Result<i32, Error> {
    let payload = match args.payload.as_deref() {
        None => Vec::new(),
        Some("@-") => read_bounded(std::io::stdin().lock())
            .map_err(|e| Error::Invalid(format!("cannot read the payload from standard input: {e}")))?,
        Some(text) => match text.strip_prefix('@') {
            Some(path) => std::fs::File::open(path)
                .and_then(read_bounded)
                .map_err(|e| Error::Invalid(format!("cannot read the payload file {path}: {e}")))?,
            None => text.as_bytes().to_vec(),
        },
    };
    let raw = RawSubmission {
        key: args.key,
        payload,
        event_id: args.event_id,
        source: args.source,
        source_version: args.source_version,
        destination: args.destination,
        after: args.after,
    };
    let report = ledger.submit(&raw).await?;
    render::submitted(&report, args.json);
    Ok(match report.outcome {
        crate::domain::SubmitOutcome::Conflict => exit::REFUSED,
        _ => exit::OK,
    })
}

pub(super) async fn list<S: Store>(ledger: &Ledger<S>, args: ListArgs) -> Result<i32, Error> {
    if !(1..=MAX_LIST_LIMIT).contains(&args.limit) {
        return Err(Error::Invalid(format!("--limit is {}; give 1 to {MAX_LIST_LIMIT}", args.limit)));
    }
    if args.refused {
        if args.state.is_some() || args.destination.is_some() || args.owner.is_some() {
            return Err(Error::Invalid(
                "--refused lists refused submissions, which have no state, destination or owner to filter by"
                    .to_owned(),
            ));
        }
        let refused = ledger.list_refused(args.before, args.limit).await?;
        render::refused(&refused, args.limit, args.json);
        return Ok(exit::OK);
    }
    let filter = ListFilter {
        state: args.state.map(|state| state.0),
        destination: args.destination,
        owner: args.owner,
        before_id: args.before,
        limit: args.limit,
        ..ListFilter::default()
    };
    let actions = ledger.list(&filter).await?;
    let blocked = ledger.blocked_among(&actions).await?;
    render::actions(&actions, &blocked, args.limit, args.json);
    Ok(exit::OK)
}

pub(super) async fn show<S: Store>(
    ledger: &Ledger<S>,
    key: &str,
    json: bool,
    config: Option<&std::path::Path>,
) -> Result<(), Error> {
    // Only what the destinations declare is needed: no credential is read for it.
    let default = std::path::Path::new(crate::config::DEFAULT_CONFIG_FILE);
    let catalog = match config {
        Some(path) => crate::destination::catalog_of(&crate::config::Config::load(path)?),
        None if default.exists() => crate::destination::catalog_of(&crate::config::Config::load(default)?),
        None => crate::domain::DestinationCatalog::default(),
    };
    let ledger = ledger.clone().with_destinations(catalog);
    let detail = ledger.detail(&parse_key(key)?).await?;
    render::detail(&detail, json);
    Ok(())
}
