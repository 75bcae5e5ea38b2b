//! `booking-control-plane`: the real Kubernetes control plane (etcd, kube-apiserver,
//! kube-controller-manager) that the test suite shares.
//!
//! - `booking-control-plane run -- <command>…` starts it, runs the command with
//!   `BOOKING_TEST_KUBECONFIG` (the admin kubeconfig) and `BOOKING_CONTROL_PLANE_BIN_DIR` (the
//!   folder with kubectl and helm of the same release) set, stops everything it started, and
//!   exits with the command's status. `make test` runs the suite this way.
//! - `booking-control-plane up` starts it and keeps it running until SIGINT or SIGTERM, printing
//!   the two variables to export (also written to `--env-file`).
//! - `booking-control-plane build` only builds (or finds) the binaries and prints their folder.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use booking_harness::TestDir;
use booking_harness::control_plane::{
    self, BIN_DIR_ENV, ControlPlane, ControlPlaneOptions, SHARED_KUBECONFIG_ENV,
};
use clap::{Parser, Subcommand};
use tokio::signal::unix::{SignalKind, signal};

#[derive(Parser, Debug)]
#[command(
    name = "booking-control-plane",
    about = "The tests' real Kubernetes control plane"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Start the control plane, run a command against it, stop it; exit with the command's status.
    Run {
        /// The command and its arguments.
        #[arg(trailing_var_arg = true, required = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Start the control plane and keep it running until SIGINT or SIGTERM.
    Up {
        /// Also write the variables to export to this file (`KEY=value` lines).
        #[arg(long)]
        env_file: Option<PathBuf>,
    },
    /// Build (or find) the binaries and print their folder.
    Build,
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,kube_client=off".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match run(cli.command).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("booking-control-plane: {e}");
            ExitCode::from(2)
        }
    }
}

async fn run(cmd: Cmd) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let bin_dir = tokio::task::spawn_blocking(control_plane::binaries).await??;
    if let Cmd::Build = cmd {
        println!("{}", bin_dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let dir = TestDir::new("control-plane")?;
    let started = Instant::now();
    let mut plane = ControlPlane::start(&dir, ControlPlaneOptions::default()).await?;
    eprintln!(
        "booking-control-plane: Kubernetes {} control plane ready at {} in {:.1} s (data and logs in {})",
        release(&plane).await,
        plane.url(),
        started.elapsed().as_secs_f64(),
        dir.path().display()
    );
    let vars = [
        (SHARED_KUBECONFIG_ENV, plane.kubeconfig_path().to_path_buf()),
        (BIN_DIR_ENV, bin_dir.clone()),
    ];
    let code = match cmd {
        Cmd::Run { command } => {
            let mut child = tokio::process::Command::new(&command[0])
                .args(&command[1..])
                .envs(vars.iter().map(|(k, v)| (k, v.as_os_str())))
                .spawn()
                .map_err(|e| format!("cannot run {:?}: {e}", command[0]))?;
            let status = tokio::select! {
                s = child.wait() => s?,
                _ = sigint.recv() => { forward(&child, rustix::process::Signal::INT); child.wait().await? }
                _ = sigterm.recv() => { forward(&child, rustix::process::Signal::TERM); child.wait().await? }
            };
            ExitCode::from(status.code().map_or(1, |c| u8::try_from(c).unwrap_or(1)))
        }
        Cmd::Up { env_file } => {
            let text: String = vars
                .iter()
                .map(|(k, v)| format!("{k}={}\n", v.display()))
                .collect();
            if let Some(path) = env_file {
                std::fs::write(&path, &text)?;
            }
            print!("{text}");
            tokio::select! {
                _ = sigint.recv() => {}
                _ = sigterm.recv() => {}
            }
            ExitCode::SUCCESS
        }
        Cmd::Build => unreachable!("handled above"),
    };
    plane.stop();
    Ok(code)
}

/// The release the API server reports (`/version`).
async fn release(plane: &ControlPlane) -> String {
    let Ok(client) = plane.client().await else {
        return "(unknown)".into();
    };
    client
        .apiserver_version()
        .await
        .map(|v| v.git_version)
        .unwrap_or_else(|_| "(unknown)".into())
}

fn forward(child: &tokio::process::Child, sig: rustix::process::Signal) {
    if let Some(pid) = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(pid, sig);
    }
}
