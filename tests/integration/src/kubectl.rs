//! The real `kubectl` of the control plane's binaries, run as the admin or as another user
//! (`--as`, `--as-group`: the admin in `system:masters` may impersonate, and the API server then
//! authenticates and authorizes the request as that user, RBAC enforced).

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use booking_harness::control_plane;
use tokio::io::AsyncWriteExt;

/// What one kubectl run printed.
#[derive(Debug)]
pub struct Output {
    /// Whether it exited 0.
    pub ok: bool,
    /// Its stdout.
    pub stdout: String,
    /// Its stderr.
    pub stderr: String,
}

/// Runs kubectl with `kubeconfig` as `user` (name and groups; the admin when `None`), feeding
/// `stdin`; at most 60 s.
pub async fn kubectl(
    kubeconfig: &Path,
    user: Option<(&str, &[&str])>,
    args: &[&str],
    stdin: Option<&str>,
) -> Output {
    let bin = control_plane::binary("kubectl").expect("the control plane's kubectl");
    let mut command = tokio::process::Command::new(bin);
    command
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--request-timeout=30s");
    if let Some((name, groups)) = user {
        command.arg(format!("--as={name}"));
        for g in groups {
            command.arg(format!("--as-group={g}"));
        }
    }
    let mut child = command
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl runs");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin is piped");
        pipe.write_all(input.as_bytes())
            .await
            .expect("kubectl reads stdin");
        drop(pipe);
    }
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("kubectl finished within 60 s")
        .expect("kubectl ran");
    Output {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
