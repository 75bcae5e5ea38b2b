//! CPU pinning and memory readings of processes.

use anyhow::{Context as _, bail};

/// Sets the CPU affinity of every thread of `pid` to `cpus` (a `taskset` list such as `0` or
/// `0-1`). Threads created later inherit it.
pub fn pin(pid: u32, cpus: &str) -> anyhow::Result<()> {
    let out = std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &pid.to_string()])
        .output()
        .context("running taskset (util-linux)")?;
    if !out.status.success() {
        bail!(
            "taskset -a -p -c {cpus} {pid} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// The number of CPUs this process may run on.
pub fn allowed_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A `kB` field of `/proc/<pid>/status` (`VmRSS`, `VmHWM`), in MiB.
pub fn status_mib(pid: u32, field: &str) -> anyhow::Result<f64> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix(field).and_then(|r| r.strip_prefix(':')) {
            let kib: f64 = rest
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .with_context(|| format!("{field} in {path}: {rest:?}"))?;
            return Ok(kib / 1024.0);
        }
    }
    bail!("no {field} in {path}")
}

/// Resident set size of `pid` now, in MiB.
pub fn rss_mib(pid: u32) -> anyhow::Result<f64> {
    status_mib(pid, "VmRSS")
}

/// Peak resident set size of `pid` since it started, in MiB.
pub fn rss_peak_mib(pid: u32) -> anyhow::Result<f64> {
    status_mib(pid, "VmHWM")
}
