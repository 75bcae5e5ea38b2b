//! Child processes of a test: spawned with logs captured to files, waited on until ready,
//! and stopped by PID (their whole process group) when dropped, also when a test panics.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;

use crate::error::{Error, Result};
use crate::http_util as http_c;
use crate::paths::TestDir;

/// How long [`ManagedProcess::stop`] waits after SIGTERM before it sends SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(3);
/// How often readiness is probed.
const PROBE_INTERVAL: Duration = Duration::from_millis(50);
/// How many log lines error messages and panic reports show.
const TAIL_LINES: usize = 30;

/// How to tell that a started process is ready to serve.
#[derive(Clone, Debug)]
pub enum Readiness {
    /// A TCP connection to the address succeeds.
    Tcp(SocketAddr),
    /// An HTTP GET of the URL gets any answer below 500 (plain HTTP only).
    Http(String),
}

/// What to run: program, arguments, environment. Build one and [`spawn`](Self::spawn) it.
#[derive(Clone, Debug)]
pub struct ProcessBuilder {
    name: String,
    program: PathBuf,
    args: Vec<OsString>,
    envs: Vec<(OsString, OsString)>,
    current_dir: Option<PathBuf>,
}

impl ProcessBuilder {
    /// A process called `name` (used for log file names and messages) running `program`.
    pub fn new(name: impl Into<String>, program: impl Into<PathBuf>) -> Self {
        ProcessBuilder {
            name: name.into(),
            program: program.into(),
            args: Vec::new(),
            envs: Vec::new(),
            current_dir: None,
        }
    }

    /// Adds one argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Adds several arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets one environment variable (the rest of the environment is inherited).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.envs.push((key.into(), value.into()));
        self
    }

    /// Sets several environment variables.
    pub fn envs<I, K, V>(mut self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<OsString>,
        V: Into<OsString>,
    {
        self.envs
            .extend(vars.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// Runs the process in `dir`.
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.current_dir = Some(dir.into());
        self
    }

    /// Starts the process in a new process group, stdin closed, stdout and stderr appended
    /// to `<test dir>/logs/<name>.stdout.log` and `.stderr.log` (a numeric suffix is added
    /// when the name is already taken in this test directory).
    ///
    /// `BOOKING_HARNESS_PARENT_PID` is set to this process's PID, so the project's Python
    /// helpers exit by themselves should the test process be killed outright.
    ///
    /// # Errors
    /// [`Error::Io`] when the log files cannot be created, [`Error::Spawn`] when the program
    /// cannot be started.
    pub fn spawn(self, dir: &TestDir) -> Result<ManagedProcess> {
        use std::os::unix::process::CommandExt;

        let log_dir = dir.subdir("logs")?;
        let (stdout_path, stderr_path) = unique_log_paths(&log_dir, &self.name);
        let open = |path: &Path| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| Error::io(format!("creating log file {}", path.display()), e))
        };
        let stdout = open(&stdout_path)?;
        let stderr = open(&stderr_path)?;

        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .env("BOOKING_HARNESS_PARENT_PID", std::process::id().to_string())
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0);
        if let Some(cwd) = &self.current_dir {
            command.current_dir(cwd);
        }
        let child = command.spawn().map_err(|source| Error::Spawn {
            name: self.name.clone(),
            program: self.program.clone(),
            source,
        })?;
        tracing::debug!(name = %self.name, pid = child.id(), "started process");
        Ok(ManagedProcess {
            name: self.name,
            child,
            stdout_path,
            stderr_path,
            log_dir,
            _dir: dir.clone(),
            exit: None,
            stopped: false,
        })
    }
}

fn unique_log_paths(log_dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let mut n = 0u32;
    loop {
        let stem = if n == 0 {
            name.to_owned()
        } else {
            format!("{name}-{n}")
        };
        let stdout = log_dir.join(format!("{stem}.stdout.log"));
        if !stdout.exists() {
            return (stdout, log_dir.join(format!("{stem}.stderr.log")));
        }
        n += 1;
    }
}

/// A running child process owned by a test.
///
/// Dropping it stops it (SIGTERM to its process group, SIGKILL after [`STOP_GRACE`]). When
/// the drop happens during a panic, the paths and tails of its logs are printed on stderr and
/// the test directory is kept.
#[derive(Debug)]
pub struct ManagedProcess {
    name: String,
    child: Child,
    stdout_path: PathBuf,
    stderr_path: PathBuf,
    log_dir: PathBuf,
    _dir: TestDir,
    exit: Option<ExitStatus>,
    /// Set once the process group has been signalled after the leader's exit, so a reused
    /// PID is never signalled later.
    stopped: bool,
}

impl ManagedProcess {
    /// The harness's name for this process.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process ID (also its process group ID).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The file receiving the process's stdout.
    pub fn stdout_path(&self) -> &Path {
        &self.stdout_path
    }

    /// The file receiving the process's stderr.
    pub fn stderr_path(&self) -> &Path {
        &self.stderr_path
    }

    /// The last `lines` lines of stdout and of stderr, labelled.
    pub fn log_tail(&self, lines: usize) -> String {
        format!(
            "--- {} stdout (last {lines} lines) ---\n{}--- {} stderr (last {lines} lines) ---\n{}",
            self.name,
            tail(&self.stdout_path, lines),
            self.name,
            tail(&self.stderr_path, lines)
        )
    }

    /// The exit status if the process has exited, without waiting.
    ///
    /// # Errors
    /// [`Error::Io`] when the status cannot be read.
    pub fn try_exit_status(&mut self) -> Result<Option<ExitStatus>> {
        if self.exit.is_none() {
            self.exit = self
                .child
                .try_wait()
                .map_err(|e| Error::io(format!("checking whether {} exited", self.name), e))?;
        }
        Ok(self.exit)
    }

    /// Waits until `readiness` is met, polling every 50 ms, for at most `timeout`.
    ///
    /// # Errors
    /// [`Error::ExitedEarly`] when the process exits meanwhile, [`Error::NotReady`] at the
    /// deadline; both carry the tail of the logs.
    pub async fn wait_ready(&mut self, readiness: &Readiness, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        let client = http_c::client();
        loop {
            if let Some(status) = self.try_exit_status()? {
                return Err(Error::ExitedEarly {
                    name: self.name.clone(),
                    status,
                    log_dir: self.log_dir.clone(),
                    log_tail: self.log_tail(TAIL_LINES),
                });
            }
            let probe = match readiness {
                Readiness::Tcp(addr) => tokio::time::timeout(
                    Duration::from_secs(1),
                    tokio::net::TcpStream::connect(addr),
                )
                .await
                .map_err(|_| format!("connect to {addr} timed out"))
                .and_then(|r| r.map(drop).map_err(|e| format!("connect to {addr}: {e}"))),
                Readiness::Http(url) => tokio::time::timeout(
                    Duration::from_secs(2),
                    http_c::send(&client, Method::GET, url, None, Bytes::new()),
                )
                .await
                .map_err(|_| format!("GET {url} timed out"))
                .and_then(|r| match r {
                    Ok((status, _)) if status.as_u16() < 500 => Ok(()),
                    Ok((status, _)) => Err(format!("GET {url}: status {status}")),
                    Err(e) => Err(e.to_string()),
                }),
            };
            let last_error = match probe {
                Ok(()) => {
                    tracing::debug!(name = %self.name, waited = ?start.elapsed(), "process ready");
                    return Ok(());
                }
                Err(e) => e,
            };
            if start.elapsed() >= timeout {
                return Err(Error::NotReady {
                    name: self.name.clone(),
                    waited: start.elapsed(),
                    last_error,
                    log_dir: self.log_dir.clone(),
                    log_tail: self.log_tail(TAIL_LINES),
                });
            }
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
    }

    /// Stops the process: SIGTERM to its process group, then SIGKILL to the group if it has
    /// not exited after [`STOP_GRACE`]. Returns how it exited. Calling it again is harmless.
    ///
    /// This blocks the calling thread for at most the grace period plus a moment.
    ///
    /// # Errors
    /// [`Error::Io`] when the process's status cannot be read.
    pub fn stop(&mut self) -> Result<ExitStatus> {
        if let (true, Some(status)) = (self.stopped, self.exit) {
            return Ok(status);
        }
        let status = self.stop_group()?;
        self.stopped = true;
        Ok(status)
    }

    /// Sends SIGTERM to the process's group and returns at once, for a test that watches what
    /// the process does while it shuts down (then [`try_exit_status`](Self::try_exit_status)
    /// tells when it has exited, and [`stop`](Self::stop) still ends it for good).
    pub fn terminate(&self) {
        signal_group(self.child.id(), rustix::process::Signal::TERM);
    }

    /// Sends SIGINT to the process's group and returns at once: what Ctrl-C in a terminal does
    /// to the foreground job (every process of the group gets it).
    pub fn interrupt(&self) {
        signal_group(self.child.id(), rustix::process::Signal::INT);
    }

    /// Waits up to `timeout` for the process to exit by itself; `None` if it still runs.
    ///
    /// # Errors
    /// [`Error::Io`] when the process's status cannot be read.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<Option<ExitStatus>> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.try_exit_status()? {
                return Ok(Some(status));
            }
            if start.elapsed() >= timeout {
                return Ok(None);
            }
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
    }

    /// Kills the process's group at once with SIGKILL, as a crash or an OOM kill would, and
    /// waits for the leader to exit. Returns how it exited.
    ///
    /// # Errors
    /// [`Error::Io`] when the process's status cannot be read.
    pub fn kill(&mut self) -> Result<ExitStatus> {
        let exited = self.try_exit_status()?;
        // The group too when the leader has exited: what it started may still run.
        signal_group(self.child.id(), rustix::process::Signal::KILL);
        let status = match exited {
            Some(status) => status,
            None => self.reap()?,
        };
        self.stopped = true;
        Ok(status)
    }

    /// Waits for the (signalled) leader to exit and records how.
    fn reap(&mut self) -> Result<ExitStatus> {
        let status = self
            .child
            .wait()
            .map_err(|e| Error::io(format!("waiting for {} to exit", self.name), e))?;
        self.exit = Some(status);
        Ok(status)
    }

    fn stop_group(&mut self) -> Result<ExitStatus> {
        if let Some(status) = self.try_exit_status()? {
            // The leader is gone; make sure no member of its group lingers.
            signal_group(self.child.id(), rustix::process::Signal::KILL);
            return Ok(status);
        }
        signal_group(self.child.id(), rustix::process::Signal::TERM);
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline {
            if let Some(status) = self.try_exit_status()? {
                signal_group(self.child.id(), rustix::process::Signal::KILL);
                return Ok(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        tracing::warn!(
            name = %self.name,
            grace = ?STOP_GRACE,
            "process had not exited within the grace after SIGTERM; sending SIGKILL"
        );
        signal_group(self.child.id(), rustix::process::Signal::KILL);
        self.reap()
    }
}

impl Drop for ManagedProcess {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("booking-harness: stopping {} failed: {e}", self.name);
        }
        if std::thread::panicking() {
            eprintln!(
                "booking-harness: logs of {} (pid {}) in {}\n{}",
                self.name,
                self.child.id(),
                self.log_dir.display(),
                self.log_tail(TAIL_LINES)
            );
        }
    }
}

/// Sends `signal` to the process group led by `pid`; a group that no longer exists is fine.
fn signal_group(pid: u32, signal: rustix::process::Signal) {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return;
    };
    if let Err(e) = rustix::process::kill_process_group(pid, signal)
        && e != rustix::io::Errno::SRCH
    {
        tracing::warn!(pid = pid.as_raw_nonzero().get(), error = %e, "signalling process group failed");
    }
}

/// The last `lines` lines of a file (lossy UTF-8), or a note when it cannot be read.
pub(crate) fn tail(path: &Path, lines: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            let start = all.len().saturating_sub(lines);
            let mut out = all[start..].join("\n");
            if !out.is_empty() {
                out.push('\n');
            }
            out
        }
        Err(e) => format!("(cannot read {}: {e})\n", path.display()),
    }
}
