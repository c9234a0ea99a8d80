//! Logs: `tracing` events on standard error, filtered by `RUST_LOG` (default `info`, PostgreSQL's notices only from `warn`), as text or
//! as one JSON object per line (`--log-format json`). Set up once, by the binary, before any
//! command runs; the library only emits events.

use crate::error::Error;
use tracing_subscriber::EnvFilter;

/// How log events are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One readable line per event.
    #[default]
    Text,
    /// One JSON object per line: timestamp, level, target, the event's fields (key, worker,
    /// ownership_version, destination, outcome where they apply) and the span it happened in.
    Json,
}

/// The filter without `RUST_LOG`: `info`, except PostgreSQL's notices, which sqlx logs at `info`.
/// They are the server's chatter, not the tool's events: processes starting together on a new
/// ledger each got "relation \"_sqlx_migrations\" already exists, skipping" on standard error.
const DEFAULT_FILTER: &str = "info,sqlx::postgres::notice=warn";

/// The filter `RUST_LOG` gives, else [`DEFAULT_FILTER`]. A filter that cannot be read is a usage
/// error: a typo must not silently turn logging off.
fn filter(rust_log: Option<&std::ffi::OsStr>) -> Result<EnvFilter, Error> {
    let Some(directives) = rust_log.filter(|v| !v.is_empty()) else {
        return Ok(EnvFilter::new(DEFAULT_FILTER));
    };
    let directives = directives.to_str().ok_or_else(|| Error::Invalid("RUST_LOG is not valid UTF-8".to_owned()))?;
    EnvFilter::builder()
        .parse(directives)
        .map_err(|e| Error::Invalid(format!("RUST_LOG={directives:?} is not a log filter: {e}")))
}

/// Installs the subscriber that writes log events to standard error. Colour only on a terminal
/// without `NO_COLOR`, as for the panic report.
pub fn init(format: LogFormat) -> Result<(), Error> {
    use std::io::IsTerminal as _;
    let filter = filter(std::env::var_os("RUST_LOG").as_deref())?;
    let colour =
        super::panic_report_in_colour(std::env::var_os("NO_COLOR").as_deref(), std::io::stderr().is_terminal());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder.with_ansi(colour).try_init(),
        LogFormat::Json => builder.json().with_ansi(false).flatten_event(true).with_current_span(true).try_init(),
    };
    // Already installed (a test harness's own): keep it.
    let _ = installed;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::filter;
    use std::ffi::OsStr;

    #[test]
    fn rust_log_filters_and_a_bad_one_is_refused() {
        let default = filter(None).unwrap().to_string();
        assert!(default.contains("info") && default.contains("sqlx::postgres::notice=warn"), "{default}");
        assert_eq!(filter(Some(OsStr::new(""))).unwrap().to_string(), default);
        assert!(filter(Some(OsStr::new("actionledger=debug,sqlx=warn"))).is_ok());
        let refused = filter(Some(OsStr::new("actionledger=loud"))).unwrap_err().to_string();
        assert!(refused.contains("RUST_LOG"), "{refused}");
    }
}
