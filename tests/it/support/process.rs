//! The binary as a child process: a command kept away from the environment's ledger, and a
//! worker whose output is collected as it is written, stopped by a signal and awaited within a
//! bound, so that a worker that does not stop fails its test instead of hanging it.

use std::io::{BufRead as _, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The binary on the ledger at `db`, run in `dir`, away from any ledger or log filter the
/// environment names, without colour.
pub fn command(dir: &Path, db: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_actionledger"));
    command
        .current_dir(dir)
        .env_remove("ACTIONLEDGER_DB")
        .env_remove("DATABASE_URL")
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .args(["--db", db]);
    command
}

/// What a process wrote to one of its outputs, collected by a thread as it is written.
struct Collected {
    text: Arc<Mutex<Vec<u8>>>,
    reader: Option<JoinHandle<()>>,
}

impl Collected {
    fn from(output: impl Read + Send + 'static) -> Self {
        let text = Arc::new(Mutex::new(Vec::new()));
        let collected = Arc::clone(&text);
        let reader = std::thread::spawn(move || {
            let mut reader = BufReader::new(output);
            let mut line = Vec::new();
            while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
                collected.lock().unwrap().extend_from_slice(&line);
                line.clear();
            }
        });
        Self { text, reader: Some(reader) }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.text.lock().unwrap()).into_owned()
    }

    /// Everything written, once the process has closed the output.
    fn all(&mut self) -> String {
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        self.text()
    }
}

/// How a worker process ended, and what it wrote.
#[derive(Debug)]
pub struct Exited {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// A worker process, killed if its test ends while it runs.
pub struct WorkerProcess {
    child: Child,
    stdout: Collected,
    stderr: Collected,
}

impl WorkerProcess {
    pub fn spawn(mut command: Command) -> Self {
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let stdout = Collected::from(child.stdout.take().unwrap());
        let stderr = Collected::from(child.stderr.take().unwrap());
        Self { child, stdout, stderr }
    }

    /// Its standard error so far.
    pub fn stderr(&self) -> String {
        self.stderr.text()
    }

    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// The address the worker logged for its metrics endpoint.
    pub async fn metrics_addr(&self) -> String {
        let deadline = Instant::now() + Duration::from_mins(1);
        loop {
            let logged = self.stderr();
            if let Some(at) = logged.find("metrics at http://") {
                let rest = &logged[at + "metrics at http://".len()..];
                return rest[..rest.find("/metrics").unwrap()].to_owned();
            }
            assert!(Instant::now() < deadline, "no metrics address logged:\n{logged}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends SIGTERM, as a service manager stops a service.
    pub fn send_sigterm(&self) {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().unwrap();
        assert!(status.success(), "kill -TERM {}", self.child.id());
    }

    /// Sends SIGTSTP, as Ctrl-Z in a terminal or `kill -TSTP` asks a worker to go quiet.
    pub fn send_sigtstp(&self) {
        let status = Command::new("kill").args(["-TSTP", &self.child.id().to_string()]).status().unwrap();
        assert!(status.success(), "kill -TSTP {}", self.child.id());
    }

    /// Sends SIGKILL: no handler runs, nothing is flushed, as in a power cut.
    pub fn send_sigkill(&mut self) {
        self.child.kill().unwrap();
    }

    /// Waits for the process to end, for at most `bound`; past it the process is killed and the
    /// test fails.
    pub async fn exit_within(&mut self, bound: Duration) -> Exited {
        let deadline = Instant::now() + bound;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("the worker did not exit within {bound:?}; killed it. Its log:\n{}", self.stderr.all());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        Exited { status, stdout: self.stdout.all(), stderr: self.stderr.all() }
    }

    /// Stops the worker as a service manager would (SIGTERM), checks that it exits cleanly within
    /// a minute, and returns its standard output.
    pub async fn terminate(mut self) -> String {
        self.send_sigterm();
        let exited = self.exit_within(Duration::from_mins(1)).await;
        assert!(exited.status.success(), "the worker failed ({}):\n{}", exited.status, exited.stderr);
        exited.stdout
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
