//! Commands a person runs on one action (`retry`, `resolve`, `cancel`, `approve`, `reject`,
//! `takeover`, `lookup`, `assign`, `acknowledge`, `recreate`) or, for bulk triage, on every action a filter
//! selects; their shared arguments, and loading the destinations.

use super::{parse_key, render};
use crate::config::duration_text;
use crate::destination::Destinations;
use crate::domain::{ManualCommand, Person, Reason, input::Label};
use crate::error::{Error, Kind, exit};
use crate::ledger::{Ledger, LedgerError, ManualRequest};
use crate::store::{ListFilter, Store};
use clap::{Args, ValueEnum};

#[derive(Debug, Args)]
pub struct ManualArgs {
    /// The action key; or, to act on many, select them with --state, --destination,
    /// --older-than and --key-contains instead.
    #[arg(required_unless_present_any = ["state", "destination", "older_than", "key_contains"])]
    key: Option<String>,
    /// Bulk: the actions in this state.
    #[arg(long, conflicts_with = "key", help_heading = "Bulk triage")]
    state: Option<super::values::StateArg>,
    /// Bulk: the actions going to this destination.
    #[arg(long, value_name = "NAME", conflicts_with = "key", help_heading = "Bulk triage")]
    destination: Option<String>,
    /// Bulk: the actions that have not changed for at least this long (e.g. 30m, 2h).
    #[arg(long, value_name = "DURATION", conflicts_with = "key", help_heading = "Bulk triage")]
    older_than: Option<String>,
    /// Bulk: the actions whose key contains this text.
    #[arg(long, value_name = "TEXT", conflicts_with = "key", help_heading = "Bulk triage")]
    key_contains: Option<String>,
    /// Bulk: at most this many actions, newest first.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(i64).range(1..=100_000), help_heading = "Bulk triage")]
    limit: i64,
    /// Decide everything and change nothing: list what would change and what would be refused.
    #[arg(long)]
    dry_run: bool,
    /// Your name: the person answerable for this command, recorded in the audit trail.
    #[arg(long)]
    owner: String,
    /// Why, for the audit trail.
    #[arg(long)]
    reason: String,
    /// Refuse unless the action is still at this version (as `show` printed it).
    #[arg(long, value_name = "VERSION", requires = "key")]
    expect_version: Option<i64>,
    /// The destinations, whose declared capabilities decide a takeover and serve a lookup
    /// (default: actionledger.toml if it exists).
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    #[command(flatten)]
    confirmed: Confirmations,
    /// Print the outcome as one JSON object (errors too: {"error", "exit_code"}).
    #[arg(long)]
    pub(super) json: bool,
}

/// What the person confirms with a command that needs it.
#[derive(Debug, Args)]
struct Confirmations {
    /// Confirm that the worker of an expired claim, held because taking it over was unsafe, can no
    /// longer act (its process stopped, or it can no longer reach the destination): `retry`,
    /// `resolve --as not-written` and `approve` need it for such an action.
    #[arg(long)]
    old_worker_stopped: bool,
    /// Confirm that you checked the destination and it holds no record of the action: `retry`
    /// needs it where an earlier request may have written and the destination cannot recognise
    /// a repeat (no lookup, no idempotency key that still covers the earlier requests), since a
    /// retry there creates a second record if the first was written; `cancel` needs it where an
    /// earlier request may have written, since a cancelled action says nothing was done.
    #[arg(long)]
    confirm_not_written: bool,
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

impl ManualArgs {
    /// The one action key, for a command that takes no selection.
    fn one_key(&self, verb: &str) -> Result<crate::domain::ActionKey, Error> {
        match &self.key {
            Some(key) => parse_key(key),
            None => Err(Error::Invalid(format!(
                "{verb} takes one action key: it is decided one action at a time, not for a selection"
            ))),
        }
    }
}

/// Whether a command may be run on a selection: those whose one reason fits every action
/// selected. A destination id, a proposed payload or late results are each one action's own.
fn bulk_allowed(command: &ManualCommand) -> bool {
    matches!(
        command,
        ManualCommand::Retry
            | ManualCommand::Cancel
            | ManualCommand::Takeover
            | ManualCommand::ResolveNotWritten
            | ManualCommand::Assign { .. }
    )
}

pub(super) async fn manual<S: Store>(
    ledger: &Ledger<S>,
    args: ManualArgs,
    command: ManualCommand,
) -> Result<i32, Error> {
    if args.key.is_none() {
        return bulk(ledger, args, command).await;
    }
    let destinations = optional_destinations(args.config.as_deref())?;
    let ledger = ledger.clone().with_destinations(destinations.catalog());
    let request = ManualRequest {
        key: args.one_key(command.verb())?,
        person: Person::parse(&args.owner)?,
        reason: Reason::parse(&args.reason)?,
        expect_version: args.expect_version,
        command,
        old_worker_stopped: args.confirmed.old_worker_stopped,
        confirmed_not_written: args.confirmed.confirm_not_written,
    };
    if args.dry_run {
        let answer = ledger.manual_dry_run(&request).await;
        let refused = answer.is_err();
        render::bulk(&request.command, std::slice::from_ref(&request.key), &[answer], true, args.json);
        return Ok(if refused { exit::REFUSED } else { exit::OK });
    }
    let outcome = ledger.manual(&request).await?;
    render::manual(&request, &outcome, args.json);
    Ok(exit::OK)
}

/// Bulk triage: the command on every action the filter selects, through one ledger query, each
/// then run (or, with --dry-run, decided and rolled back) in its own transaction against the
/// version the query read, audited in the person's name. Exit 3 if any was refused.
async fn bulk<S: Store>(ledger: &Ledger<S>, args: ManualArgs, command: ManualCommand) -> Result<i32, Error> {
    if !bulk_allowed(&command) {
        args.one_key(command.verb())?;
    }
    let older_than = match &args.older_than {
        Some(text) => Some(
            duration_text::parse(text).map_err(|e| Error::Invalid(format!("--older-than: {e}; for example 30m")))?,
        ),
        None => None,
    };
    let person = Person::parse(&args.owner)?;
    let reason = Reason::parse(&args.reason)?;
    let destinations = optional_destinations(args.config.as_deref())?;
    let ledger = ledger.clone().with_destinations(destinations.catalog());
    let now = ledger.store().now().await?;
    let updated_before = older_than.map(|age| now - chrono::Duration::from_std(age).unwrap_or(chrono::TimeDelta::MAX));
    let selected = ledger
        .list(&ListFilter {
            state: args.state.map(|s| s.0),
            destination: args.destination.clone(),
            key_contains: args.key_contains.clone(),
            updated_before,
            limit: args.limit,
            ..ListFilter::default()
        })
        .await?;
    let requests: Vec<ManualRequest> = selected
        .iter()
        .map(|action| ManualRequest {
            key: action.key.clone(),
            person: person.clone(),
            reason: reason.clone(),
            expect_version: Some(action.revision),
            command: command.clone(),
            old_worker_stopped: args.confirmed.old_worker_stopped,
            confirmed_not_written: args.confirmed.confirm_not_written,
        })
        .collect();
    let answers = ledger.manual_each(&requests, args.dry_run).await;
    let keys: Vec<_> = requests.into_iter().map(|r| r.key).collect();
    render::bulk(&command, &keys, &answers, args.dry_run, args.json);
    if i64::try_from(keys.len()).unwrap_or(i64::MAX) >= args.limit && !args.json {
        eprintln!("note: --limit {} reached; run again for the rest", args.limit);
    }
    Ok(bulk_exit_code(&answers))
}

/// The exit code of a bulk command's gravest answer: a failure before a refusal, a refusal before
/// success.
fn bulk_exit_code<T>(answers: &[Result<T, LedgerError>]) -> i32 {
    let kinds: Vec<Kind> = answers.iter().filter_map(|a| a.as_ref().err()).map(Kind::of_ledger).collect();
    let gravest = kinds.iter().find(|kind| **kind != Kind::Refused).or(kinds.first());
    gravest.map_or(exit::OK, |kind| kind.exit_code())
}

/// The console's `l`, from the command line: the same lookup, judged and settled the same way.
pub(super) async fn lookup<S: Store>(ledger: &Ledger<S>, args: ManualArgs) -> Result<i32, Error> {
    let destinations = optional_destinations(args.config.as_deref())?;
    let key = args.one_key("lookup")?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{ActionKey, Refusal};
    use crate::store::StoreError;

    #[test]
    fn a_bulk_command_exits_with_its_gravest_answer() {
        let refused = || LedgerError::from(Refusal::RepeatedKey { key: ActionKey::parse("k").unwrap() });
        let failed = || LedgerError::Store(StoreError::Database(sqlx::Error::PoolTimedOut));
        assert_eq!(bulk_exit_code::<()>(&[Ok(()), Ok(())]), exit::OK);
        assert_eq!(bulk_exit_code(&[Ok(()), Err(refused())]), exit::REFUSED);
        assert_eq!(bulk_exit_code::<()>(&[Err(refused()), Err(failed()), Err(refused())]), exit::ERROR);
    }
}
