//! `actionledger bench --worker-memory N`: a real worker process performs N actions against the
//! simulated CRM while its resident memory is sampled, to show it stays flat however long it runs.

use super::BenchError;
use crate::domain::RawSubmission;
use crate::error::Error;
use crate::ledger::Ledger;
use crate::sim_crm::{Options, SimCrm};
use crate::store::{SqliteStore, SqliteSynchronous, Store};
use serde::Serialize;
use std::path::Path;
use std::time::{Duration, Instant};

/// Submissions per commit while loading the ledger.
const LOAD_PAGE: usize = 1000;
/// Growth over the run (after the first tenth) below which memory counts as flat.
const FLAT_WITHIN_KIB: u64 = 8 * 1024;

/// One reading of the worker's memory.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Actions the CRM had recorded when the sample was taken.
    pub done: u64,
    pub rss_kib: u64,
    pub elapsed_s: f64,
}

/// What the run measured.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryRun {
    pub actions: usize,
    pub batch: usize,
    /// One sample per tenth of the run, then the last one before the worker exited.
    pub samples: Vec<Sample>,
    /// Resident memory at the end minus at the first tenth.
    pub growth_kib: i64,
    pub flat: bool,
    pub actions_per_sec: f64,
    pub crm_records: u64,
    pub max_records_per_key: u64,
}

/// Loads `actions` into a SQLite ledger in `scratch`, runs `worker --drain` on them as a child
/// process of this binary, and samples its memory until it exits.
pub async fn worker_memory(scratch: &Path, actions: usize, batch: usize, print: bool) -> Result<MemoryRun, Error> {
    let path = scratch.join("memory.db");
    let url = format!("sqlite://{}", path.display());
    let store = SqliteStore::open_with(&url, SqliteSynchronous::Normal).await?;
    let ledger = Ledger::new(store.clone());
    let listener =
        tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| Error::io("cannot listen on loopback", e))?;
    let crm = SimCrm::start(listener, Options::default())?;
    load(&ledger, actions, print).await?;
    store.close().await;
    let config = scratch.join("memory.toml");
    std::fs::write(&config, crm.destination_config("crm"))
        .map_err(|e| Error::io(format!("cannot write {}", config.display()), e))?;
    let exe = std::env::current_exe().map_err(|e| Error::io("cannot find this program", e))?;
    let mut child = tokio::process::Command::new(exe)
        .arg("--db")
        .arg(&url)
        .args(["worker", "--drain", "--concurrency", "4", "--batch", &batch.to_string(), "--worker-id", "memory"])
        .arg("--config")
        .arg(&config)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Error::io("cannot start a worker", e))?;
    let started = Instant::now();
    let samples = sample_until_exit(&mut child, &crm, actions, print).await?;
    let elapsed = started.elapsed();
    let effects = crm.stats();
    let growth_kib = match (samples.first(), samples.last()) {
        (Some(first), Some(last)) => {
            i64::try_from(last.rss_kib).unwrap_or(i64::MAX) - i64::try_from(first.rss_kib).unwrap_or(0)
        }
        _ => 0,
    };
    let run = MemoryRun {
        actions,
        batch,
        flat: growth_kib < i64::try_from(FLAT_WITHIN_KIB).unwrap_or(i64::MAX),
        growth_kib,
        samples,
        actions_per_sec: f64::from(u32::try_from(effects.records).unwrap_or(u32::MAX))
            / elapsed.as_secs_f64().max(f64::EPSILON),
        crm_records: effects.records,
        max_records_per_key: effects.max_records_per_external_ref,
    };
    if print {
        println!(
            "worker memory: {} CRM records (max {} per key) at {:.0}/s; resident memory grew {} KiB from the first \
             tenth to the end: {}",
            run.crm_records,
            run.max_records_per_key,
            run.actions_per_sec,
            run.growth_kib,
            if run.flat { "flat" } else { "NOT flat" }
        );
    }
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let _ = std::fs::remove_file(&config);
    Ok(run)
}

/// Submits the actions in pages, one commit each.
async fn load<S: Store>(ledger: &Ledger<S>, actions: usize, print: bool) -> Result<(), Error> {
    let loading = Instant::now();
    for first in (0..actions).step_by(LOAD_PAGE) {
        let page: Vec<RawSubmission> = (first..actions.min(first + LOAD_PAGE))
            .map(|n| RawSubmission {
                key: Some(format!("memory:{n:07}")),
                payload: format!(r#"{{"n":{n}}}"#).into_bytes(),
                destination: Some("crm".to_owned()),
                ..RawSubmission::default()
            })
            .collect();
        ledger.submit_many(&page).await?;
    }
    if print {
        println!("worker memory: {actions} actions loaded in {:.1} s", loading.elapsed().as_secs_f64());
    }
    Ok(())
}

/// Samples the worker's memory ten times a second until it exits; keeps one sample per tenth
/// of the actions done, and the last one.
async fn sample_until_exit(
    child: &mut tokio::process::Child,
    crm: &SimCrm,
    actions: usize,
    print: bool,
) -> Result<Vec<Sample>, Error> {
    let pid = child.id().ok_or(BenchError::WorkerExitedAtOnce)?;
    let started = Instant::now();
    let total = u64::try_from(actions).unwrap_or(u64::MAX);
    let mut samples: Vec<Sample> = Vec::new();
    let mut next_tenth = 1;
    let mut last = None;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        let Some(rss_kib) = resident_kib(pid) else { continue };
        let sample = Sample { done: crm.stats().records, rss_kib, elapsed_s: started.elapsed().as_secs_f64() };
        if sample.done * 10 >= total * next_tenth {
            if print {
                println!(
                    "worker memory: {:>8} of {total} done after {:>6.1} s, resident {:>7} KiB",
                    sample.done, sample.elapsed_s, sample.rss_kib
                );
            }
            next_tenth = sample.done * 10 / total.max(1) + 1;
            samples.push(sample.clone());
        }
        last = Some(sample);
    }
    .map_err(|e| Error::io("the worker could not be waited for", e))?;
    if !status.success() {
        return Err(BenchError::WorkerFailed(status).into());
    }
    if let Some(last) = last
        && samples.last().is_none_or(|s| s.done != last.done)
    {
        samples.push(last);
    }
    Ok(samples)
}

/// The resident set of a process, from `/proc` (Linux).
fn resident_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
