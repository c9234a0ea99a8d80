//! Commands a person runs on one action (`retry`, `resolve`, `cancel`, `approve`, `reject`,
//! `takeover`, `lookup`, `assign`, `acknowledge`), their shared arguments, and loading the destinations.

use super::{parse_key, render};
use crate::destination::Destinations;
use crate::domain::{ManualCommand, Person, Reason, input::Label};
use crate::error::{Error, exit};
use crate::ledger::{Ledger, ManualRequest};
use crate::store::Store;
use clap::{Args, ValueEnum};

#[derive(Debug, Args)]
pub struct ManualArgs {
    /// The action key.
    key: String,
    /// Your name: the person answerable for this command, recorded in the audit trail.
    #[arg(long)]
    owner: String,
    /// Why, for the audit trail.
    #[arg(long)]
    reason: String,
    /// Refuse unless the action is still at this version (as `show` printed it).
    #[arg(long, value_name = "VERSION")]
    expect_version: Option<i64>,
    /// The destinations, whose declared capabilities decide a takeover and serve a lookup
    /// (default: actionledger.toml if it exists).
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// Confirm that the worker of an expired claim, held because taking it over was unsafe, can no
    /// longer act (its process stopped, or it can no longer reach the destination): `retry`,
    /// `resolve --as not-written` and `approve` need it for such an action.
    #[arg(long)]
    old_worker_stopped: bool,
    /// Print the outcome as one JSON object (errors too: {"error", "exit_code"}).
    #[arg(long)]
    pub(super) json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Resolution {
    /// The destination has the record: give its id with --destination-id.
    Completed,
    /// The destination has no record: back to pending under the same key.
    NotWritten,
}

/// The command `resolve --as` stands for; `--destination-id` goes with `completed` only.
pub(super) fn resolution(resolution: Resolution, destination_id: Option<String>) -> Result<ManualCommand, Error> {
    Ok(match (resolution, destination_id) {
        (Resolution::Completed, Some(id)) => {
            ManualCommand::ResolveCompleted { destination_id: Label::parse("destination id", &id)?.0 }
        }
        (Resolution::Completed, None) => {
            return Err(Error::Invalid(
                "--as completed needs --destination-id: the id of the record you verified at the destination"
                    .to_owned(),
            ));
        }
        (Resolution::NotWritten, Some(_)) => {
            return Err(Error::Invalid(
                "--destination-id goes with --as completed only; a not-written action has no destination id".to_owned(),
            ));
        }
        (Resolution::NotWritten, None) => ManualCommand::ResolveNotWritten,
    })
}

/// The command `assign` stands for: to `--to`, else to `--owner`.
pub(super) fn assignment(args: &ManualArgs, to: Option<&str>) -> Result<ManualCommand, Error> {
    let to = Person::parse(to.unwrap_or(&args.owner))?;
    Ok(ManualCommand::Assign { to: to.as_str().to_owned() })
}

pub(super) async fn manual<S: Store>(
    ledger: &Ledger<S>,
    args: ManualArgs,
    command: ManualCommand,
) -> Result<i32, Error> {
    let destinations = optional_destinations(args.config.as_deref())?;
    let request = ManualRequest {
        key: parse_key(&args.key)?,
        person: Person::parse(&args.owner)?,
        reason: Reason::parse(&args.reason)?,
        expect_version: args.expect_version,
        command,
        old_worker_stopped: args.old_worker_stopped,
    };
    let outcome = ledger.clone().with_destinations(destinations.catalog()).manual(&request).await?;
    render::manual(&request, &outcome, args.json);
    Ok(exit::OK)
}

/// The console's `l`, from the command line: the same lookup, judged and settled the same way.
pub(super) async fn lookup<S: Store>(ledger: &Ledger<S>, args: ManualArgs) -> Result<i32, Error> {
    let destinations = optional_destinations(args.config.as_deref())?;
    let key = parse_key(&args.key)?;
    let person = Person::parse(&args.owner)?;
    let reason = Reason::parse(&args.reason)?;
    let (action, looked) =
        crate::reconcile::look_up_for_person(ledger, &destinations, &key, args.expect_version, &person, &reason)
            .await?;
    render::looked_up(&action, &looked, args.json);
    Ok(match looked.settlement {
        crate::reconcile::Settlement::ChangedMeanwhile => exit::REFUSED,
        _ => exit::OK,
    })
}

/// Reads the configuration and builds its destinations; `required` refuses a file without any.
pub(super) fn load_destinations(
    path: &std::path::Path,
    required: bool,
) -> Result<(crate::config::Config, Destinations), Error> {
    let config = crate::config::Config::load(path)?;
    if required && config.destinations.is_empty() {
        return Err(Error::Invalid(format!(
            "{} configures no destination; add a [destinations.NAME] block (sim-crm --print-config prints one)",
            path.display()
        )));
    }
    let destinations = Destinations::from_config(&config)?;
    Ok((config, destinations))
}

/// The destinations of the file given, else of `actionledger.toml` where it exists, else none.
pub(super) fn optional_destinations(path: Option<&std::path::Path>) -> Result<Destinations, Error> {
    let default = std::path::Path::new(crate::config::DEFAULT_CONFIG_FILE);
    match path {
        Some(path) => Ok(load_destinations(path, false)?.1),
        None if default.exists() => Ok(load_destinations(default, false)?.1),
        None => Ok(Destinations::default()),
    }
}
