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

/// A `kB` field of `/proc/<pid>/status` (`VmRSS`, `VmHWM`, `RssAnon`, `RssFile`), in MiB.
pub fn status_mib(pid: u32, field: &str) -> anyhow::Result<f64> {
    Ok(status_field(pid, field)? / 1024.0)
}

/// A numeric field of `/proc/<pid>/status` (`Threads`; `kB` fields in kB).
pub fn status_field(pid: u32, field: &str) -> anyhow::Result<f64> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix(field).and_then(|r| r.strip_prefix(':')) {
            return rest
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .with_context(|| format!("{field} in {path}: {rest:?}"));
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

/// CPU time (user + system) `pid` has used, in seconds, from `/proc/<pid>/stat` (fields 14 and
/// 15, in clock ticks of 1/100 s, the `USER_HZ` every Linux ABI uses).
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    // The command name (field 2) may hold spaces; the fields after its closing parenthesis
    // start with field 3.
    let rest = text
        .rsplit_once(')')
        .map(|(_, r)| r)
        .with_context(|| format!("no command name in {path}"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> anyhow::Result<f64> {
        fields
            .get(i - 3)
            .with_context(|| format!("field {i} missing in {path}"))?
            .parse::<f64>()
            .with_context(|| format!("field {i} of {path}"))
    };
    Ok((ticks(14)? + ticks(15)?) / 100.0)
}

/// Waits until `pid` uses less than `busy` of one CPU over a whole `window`, or `limit` passes.
/// Returns how long it took, or `None` when it was still busy at the limit.
pub async fn wait_idle(
    pid: u32,
    busy: f64,
    window: std::time::Duration,
    limit: std::time::Duration,
) -> anyhow::Result<Option<std::time::Duration>> {
    let t0 = std::time::Instant::now();
    loop {
        let before = cpu_seconds(pid)?;
        tokio::time::sleep(window).await;
        let used = cpu_seconds(pid)? - before;
        if used < busy * window.as_secs_f64() {
            return Ok(Some(t0.elapsed()));
        }
        if t0.elapsed() >= limit {
            return Ok(None);
        }
    }
}

/// Every online CPU of the machine as a taskset list (`0-<last>`), from
/// `/sys/devices/system/cpu/online`.
pub fn all_cpus() -> String {
    let last = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| {
            s.trim()
                .rsplit(['-', ','])
                .next()
                .and_then(|n| n.parse::<usize>().ok())
        })
        .unwrap_or(1);
    format!("0-{last}")
}

/// The TCP connections `pid` holds open to `port` on this machine: its socket descriptors
/// (`/proc/<pid>/fd`) matched by inode against the established connections of
/// `/proc/<pid>/net/tcp` and `tcp6` whose remote port is `port`.
pub fn connections_to(pid: u32, port: u16) -> anyhow::Result<usize> {
    let mut inodes = std::collections::HashSet::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        // A descriptor closed meanwhile is not a connection.
        let Ok(target) = std::fs::read_link(entry?.path()) else {
            continue;
        };
        if let Some(inode) = target
            .to_str()
            .and_then(|t| t.strip_prefix("socket:["))
            .and_then(|t| t.strip_suffix(']'))
        {
            inodes.insert(inode.to_owned());
        }
    }
    let mut count = 0;
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}"))?;
        for line in text.lines().skip(1) {
            // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(remote), Some(state), Some(inode)) =
                (fields.get(2), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let remote_port = remote
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            // State 01 is ESTABLISHED.
            if *state == "01" && remote_port == Some(port) && inodes.contains(*inode) {
                count += 1;
            }
        }
    }
    Ok(count)
}
