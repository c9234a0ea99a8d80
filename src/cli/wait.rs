//! `wait`: blocks until an action is in one of the states named (as `kubectl wait` and `gh run
//! watch` do for theirs), reading it every interval and, where the store sends change
//! notifications, also at each one.

use super::parse_key;
use super::render;
use super::values::StateArg;
use crate::config::duration_text;
use crate::domain::State;
use crate::domain::text::escape_untrusted;
use crate::error::{Error, exit};
use crate::ledger::{Ledger, LedgerError};
use crate::store::Store;
use clap::Args;
use std::time::Duration;

#[derive(Debug, Args)]
pub struct WaitArgs {
    /// The action's key.
    key: String,
    /// The state to wait for, or several separated by commas (e.g. completed,failed).
    #[arg(long = "for", value_name = "STATE", value_delimiter = ',', required = true)]
    states: Vec<StateArg>,
    /// Give up after this long, e.g. 30s or 5m, exiting 6 and saying the action's state (default:
    /// wait as long as it takes).
    #[arg(long, value_name = "DURATION", value_parser = duration_text::parse)]
    timeout: Option<Duration>,
    /// How often the action is read, e.g. 200ms or 5s. On PostgreSQL a change to or from a state
    /// that needs a person (failed, unknown, conflict, held) is also heard at once.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = duration_text::parse)]
    interval: Duration,
    /// Print the action at the end as one JSON document, as `show --json` does (errors too:
    /// {"error", "exit_code"}).
    #[arg(long)]
    pub(super) json: bool,
}

pub(super) async fn wait<S: Store>(ledger: &Ledger<S>, args: WaitArgs) -> Result<i32, Error> {
    let key = parse_key(&args.key)?;
    if args.interval.is_zero() {
        return Err(Error::Invalid("--interval is 0; give a period such as 1s".to_owned()));
    }
    let wanted: Vec<State> = args.states.iter().map(|state| state.0).collect();
    // Listening starts before the first read, so that no change after that read goes unheard.
    // The store notifies only the changes a review console shows at once (the routine ones would
    // cost the worker's commits their shared flushes): the rest are found by the interval's reads.
    let mut changes = ledger.store().listen_for_changes().await.ok().flatten();
    let deadline = args.timeout.map(|timeout| tokio::time::Instant::now() + timeout);
    let reached = loop {
        let action = ledger.store().find(&key).await?.ok_or_else(|| LedgerError::NotFound(key.to_string()))?;
        if wanted.contains(&action.state) {
            break true;
        }
        let woken = async {
            match changes.as_mut() {
                // A listener that ended wakes nothing more: the polls carry on.
                Some(changes) => {
                    if changes.recv().await.is_none() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending().await,
            }
        };
        let timed_out = async {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = woken => {}
            () = tokio::time::sleep(args.interval) => {}
            () = timed_out => break false,
        }
    };
    // The action as it is at the end: on a timeout, the state it was left in (read again, as it
    // may have changed since the last look).
    let detail = ledger.detail(&key).await?;
    let state = detail.action.state;
    let reached = reached || wanted.contains(&state);
    if args.json {
        render::detail(&detail, true);
    } else if reached {
        println!("{}: {state}", escape_untrusted(key.as_str()));
    }
    if reached {
        return Ok(exit::OK);
    }
    let waited_for = wanted.iter().map(|state| state.as_str()).collect::<Vec<_>>().join(" or ");
    eprintln!(
        "timed out after {}: {} is {state}, not {waited_for}",
        duration_text::format(args.timeout.unwrap_or_default()),
        escape_untrusted(key.as_str())
    );
    Ok(exit::TIMED_OUT)
}
