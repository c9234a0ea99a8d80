//! The process's own figures under the names every Prometheus client gives them (`process_*`):
//! CPU time, memory, file descriptors and start time, read from `/proc` at each scrape.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use std::path::{Path, PathBuf};

/// Encodes the process's figures at each scrape; a scrape where `/proc` cannot be read shows none
/// of them rather than failing the others.
#[derive(Debug)]
pub(super) struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let figures = match ProcessFigures::read() {
            Ok(figures) => figures,
            Err(error) => {
                tracing::debug!(%error, "no process metrics in this scrape");
                return Ok(());
            }
        };
        let cpu = ConstCounter::new(figures.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds.",
            None,
            cpu.metric_type(),
        )?)?;
        let gauges = [
            ("process_resident_memory_bytes", "Resident memory size in bytes.", figures.resident_bytes),
            ("process_virtual_memory_bytes", "Virtual memory size in bytes.", figures.virtual_bytes),
            ("process_open_fds", "Number of open file descriptors.", figures.open_fds),
        ];
        for (name, help, value) in gauges {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        if let Some(max_fds) = figures.max_fds {
            let gauge = ConstGauge::new(max_fds);
            let help = "Maximum number of open file descriptors.";
            gauge.encode(encoder.encode_descriptor("process_max_fds", help, None, gauge.metric_type())?)?;
        }
        let started = ConstGauge::new(figures.start_time_seconds);
        let help = "Start time of the process since unix epoch in seconds.";
        started.encode(encoder.encode_descriptor(
            "process_start_time_seconds",
            help,
            None,
            started.metric_type(),
        )?)?;
        Ok(())
    }
}

/// Why the process's figures could not be read.
#[derive(Debug, thiserror::Error)]
pub(super) enum ProcessFiguresError {
    #[error("cannot read {path}: {source}", path = path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not laid out as Linux writes it", path = path.display())]
    Unexpected { path: PathBuf },
}

/// The process's figures at one moment.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ProcessFigures {
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    pub open_fds: u64,
    /// The soft limit; `None` when there is none.
    pub max_fds: Option<u64>,
    pub start_time_seconds: f64,
}

/// What `/proc/self/stat` says of the process, in the kernel's units.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stat {
    /// User and system CPU time, in clock ticks.
    cpu_ticks: u64,
    /// Clock ticks from the system's boot to the process's start.
    start_ticks: u64,
    virtual_bytes: u64,
    resident_pages: u64,
}

impl ProcessFigures {
    pub(super) fn read() -> Result<Self, ProcessFiguresError> {
        let stat_path = Path::new("/proc/self/stat");
        let stat = parse_stat(&read(stat_path)?).ok_or_else(|| unexpected(stat_path))?;
        let system_path = Path::new("/proc/stat");
        let boot_seconds = parse_boot_time(&read(system_path)?).ok_or_else(|| unexpected(system_path))?;
        let fd_path = Path::new("/proc/self/fd");
        let open_fds = std::fs::read_dir(fd_path)
            .map_err(|source| ProcessFiguresError::Read { path: fd_path.to_owned(), source })?;
        let ticks = rustix::param::clock_ticks_per_second();
        let page_bytes = u64::try_from(rustix::param::page_size()).unwrap_or(u64::MAX);
        #[allow(clippy::cast_precision_loss)] // tick counts stay far below 2^52
        let seconds = |ticks_counted: u64| ticks_counted as f64 / ticks as f64;
        #[allow(clippy::cast_precision_loss)] // seconds since 1970 stay far below 2^52
        let boot_seconds = boot_seconds as f64;
        Ok(Self {
            cpu_seconds: seconds(stat.cpu_ticks),
            resident_bytes: stat.resident_pages.saturating_mul(page_bytes),
            virtual_bytes: stat.virtual_bytes,
            open_fds: u64::try_from(open_fds.count()).unwrap_or(u64::MAX),
            max_fds: rustix::process::getrlimit(rustix::process::Resource::Nofile).current,
            start_time_seconds: boot_seconds + seconds(stat.start_ticks),
        })
    }
}

fn read(path: &Path) -> Result<String, ProcessFiguresError> {
    std::fs::read_to_string(path).map_err(|source| ProcessFiguresError::Read { path: path.to_owned(), source })
}

fn unexpected(path: &Path) -> ProcessFiguresError {
    ProcessFiguresError::Unexpected { path: path.to_owned() }
}

/// The figures of `/proc/PID/stat` (proc(5)). The command name, field 2, is in parentheses and may
/// itself hold spaces and parentheses, so the fields are counted from after its last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `fields[0]` is field 3 (state): field N is at N - 3.
    let field = |number: usize| fields.get(number - 3)?.parse::<u64>().ok();
    Some(Stat {
        cpu_ticks: field(14)?.checked_add(field(15)?)?,
        start_ticks: field(22)?,
        virtual_bytes: field(23)?,
        resident_pages: field(24)?,
    })
}

/// The system's boot time in seconds since 1970, the `btime` line of `/proc/stat`.
fn parse_boot_time(text: &str) -> Option<u64> {
    text.lines().find_map(|line| line.strip_prefix("btime "))?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stat_fields_are_counted_after_the_command_name_whatever_it_holds() {
        let line = "4242 (a) b (c) S 1 4242 4242 0 -1 4194304 900 0 0 0 250 75 0 0 20 0 5 0 123456 \
                    104857600 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
        let stat = parse_stat(line).unwrap();
        assert_eq!(
            stat,
            Stat { cpu_ticks: 325, start_ticks: 123_456, virtual_bytes: 104_857_600, resident_pages: 2048 }
        );
        assert_eq!(parse_stat("4242 (cut off) S 1 2"), None);
    }

    #[test]
    fn the_boot_time_is_the_btime_line() {
        let text = "cpu  1 2 3 4\nintr 5\nctxt 6\nbtime 1764900000\nprocesses 7\n";
        assert_eq!(parse_boot_time(text), Some(1_764_900_000));
        assert_eq!(parse_boot_time("cpu 1 2 3\n"), None);
    }

    #[test]
    fn this_process_reads_as_running_with_memory_and_open_files() {
        let figures = ProcessFigures::read().unwrap();
        assert!(figures.resident_bytes > 0 && figures.virtual_bytes >= figures.resident_bytes, "{figures:?}");
        assert!(figures.open_fds >= 3, "standard input, output and error at least: {figures:?}");
        assert!(figures.max_fds.is_none_or(|max| max >= figures.open_fds), "{figures:?}");
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        let age = now - figures.start_time_seconds;
        assert!((0.0..3600.0).contains(&age), "started {age} s ago: {figures:?}");
    }
}
