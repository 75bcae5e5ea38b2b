//! The sandbox's processes: started detached (own process group, stdin closed, output to
//! `logs/<name>.log`) so they outlive `booking-sandbox up`, recorded as `pids/<NN>-<name>.pid`
//! (PID and program), and stopped by those recorded PIDs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// How long `stop_all` waits after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(8);

/// One recorded process.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Sandbox name of the process (`moto`, `controller`, …).
    pub name: String,
    /// Its PID, also its process group ID.
    pub pid: u32,
    /// The program it runs, as started (argv\[0\]).
    pub program: String,
    pid_file: PathBuf,
}

impl Recorded {
    /// Whether the recorded PID still runs the recorded program (not a zombie, not a reused
    /// PID).
    pub fn alive(&self) -> bool {
        process_alive(self.pid, &self.program)
    }

    /// The log file of the process.
    pub fn log_path(&self, dir: &Path) -> PathBuf {
        log_path(dir, &self.name)
    }
}

/// `<dir>/logs/<name>.log`.
pub fn log_path(dir: &Path, name: &str) -> PathBuf {
    dir.join("logs").join(format!("{name}.log"))
}

/// Starts `program` detached from the caller and records its PID. `seq` orders the records
/// (they are stopped in reverse order).
pub fn spawn(
    dir: &Path,
    seq: u32,
    name: &str,
    program: &Path,
    args: &[String],
    envs: &[(String, String)],
) -> Result<Recorded> {
    use std::os::unix::process::CommandExt as _;

    let logs = dir.join("logs");
    let pids = dir.join("pids");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    std::fs::create_dir_all(&pids).with_context(|| format!("creating {}", pids.display()))?;
    let log = log_path(dir, name);
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .with_context(|| format!("opening {}", log.display()))?;
    let err = out.try_clone().context("duplicating the log file handle")?;
    let child = Command::new(program)
        .args(args)
        .envs(envs.iter().map(|(k, v)| (k, v)))
        // The harness's Python helpers would exit with their parent; these must outlive it.
        .env_remove("BOOKING_HARNESS_PARENT_PID")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // A process group of its own: a Ctrl-C in the terminal that ran `up` does not reach it,
        // and `down` stops the whole group.
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {name} ({})", program.display()))?;
    let pid = child.id();
    // Not waited for: the process is meant to outlive this one.
    drop(child);
    let program = program.display().to_string();
    let pid_file = pids.join(format!("{seq:02}-{name}.pid"));
    std::fs::write(&pid_file, format!("{pid}\n{program}\n"))
        .with_context(|| format!("writing {}", pid_file.display()))?;
    Ok(Recorded {
        name: name.to_owned(),
        pid,
        program,
        pid_file,
    })
}

/// Every recorded process, in start order.
pub fn recorded(dir: &Path) -> Result<Vec<Recorded>> {
    let pids = dir.join("pids");
    let entries = match std::fs::read_dir(&pids) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", pids.display())),
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "pid"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        let mut lines = text.lines();
        let pid = lines.next().and_then(|l| l.trim().parse::<u32>().ok());
        let program = lines.next().map(str::to_owned);
        let stem = file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let name = stem
            .split_once('-')
            .map_or(stem.clone(), |(_, n)| n.to_owned());
        match (pid, program) {
            (Some(pid), Some(program)) => out.push(Recorded {
                name,
                pid,
                program,
                pid_file: file,
            }),
            _ => {
                note!("ignoring unreadable PID file {}", file.display());
                let _ = std::fs::remove_file(&file);
            }
        }
    }
    Ok(out)
}

/// Stops every recorded process (SIGTERM to its group, SIGKILL after a grace period) and
/// removes the records. Processes already gone (crashed) are only forgotten. The first one
/// started (etcd, which the API server keeps its data in) is stopped last, once the others
/// exited: an API server whose storage is gone first stalls its shutdown. Returns what was
/// stopped and what had already exited.
pub fn stop_all(dir: &Path) -> Result<StopReport> {
    let mut report = StopReport::default();
    let mut records = recorded(dir)?;
    let first = if records.is_empty() {
        Vec::new()
    } else {
        vec![records.remove(0)]
    };
    records.reverse();
    stop_wave(records, &mut report)?;
    stop_wave(first, &mut report)?;
    Ok(report)
}

/// Stops `records` together: SIGTERM to each running one, SIGKILL after [`STOP_GRACE`].
fn stop_wave(records: Vec<Recorded>, report: &mut StopReport) -> Result<()> {
    let mut running = Vec::new();
    for r in records {
        if r.alive() {
            signal_group(r.pid, rustix::process::Signal::TERM);
            running.push(r);
        } else {
            report.already_gone.push(r.name.clone());
            let _ = std::fs::remove_file(&r.pid_file);
        }
    }
    let deadline = Instant::now() + STOP_GRACE;
    while Instant::now() < deadline && running.iter().any(Recorded::alive) {
        std::thread::sleep(Duration::from_millis(50));
    }
    for r in &running {
        if r.alive() {
            note!(
                "{} (pid {}) had not exited {} s after SIGTERM; sending SIGKILL",
                r.name,
                r.pid,
                STOP_GRACE.as_secs()
            );
            signal_group(r.pid, rustix::process::Signal::KILL);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && running.iter().any(Recorded::alive) {
        std::thread::sleep(Duration::from_millis(50));
    }
    for r in running {
        if r.alive() {
            bail!("{} (pid {}) is still running after SIGKILL", r.name, r.pid);
        }
        let _ = std::fs::remove_file(&r.pid_file);
        report.stopped.push(r.name);
    }
    Ok(())
}

/// What [`stop_all`] did.
#[derive(Debug, Default)]
pub struct StopReport {
    /// Processes that were running and were stopped.
    pub stopped: Vec<String>,
    /// Processes that had exited before (crashed or stopped otherwise).
    pub already_gone: Vec<String>,
}

/// Whether `pid` is a live (not zombie) process running `program`: its argv\[0\], or
/// argv\[1\] for a script started through its `#!` interpreter.
pub fn process_alive(pid: u32, program: &str) -> bool {
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let Ok(stat) = std::fs::read_to_string(proc_dir.join("stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may contain spaces.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    if matches!(state, Some("Z" | "X") | None) {
        return false;
    }
    let Ok(cmdline) = std::fs::read(proc_dir.join("cmdline")) else {
        return false;
    };
    // Right after a spawn the command line can read empty for a moment: the kernel releases
    // the spawning parent before it has set up the new program's arguments.
    cmdline.is_empty()
        || cmdline
            .split(|b| *b == 0)
            .take(2)
            .any(|arg| arg == program.as_bytes())
}

/// Sends `signal` to the process group `pid`; a group that is gone is fine.
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
        note!("signalling process group {pid:?} failed: {e}");
    }
}

/// The last `lines` lines of a log file.
pub fn log_tail(path: &Path, lines: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}
