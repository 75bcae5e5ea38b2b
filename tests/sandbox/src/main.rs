//! `booking-sandbox`: the whole booking operator on one machine, without a cloud account or a
//! cluster.
//!
//! It starts the in-repo test API server (`kube-test-server`), moto (seeded with tagged EC2
//! instances in two regions and a tagged RDS instance), an SMTP server writing every message
//! to a directory, `booking-webhook` (certificates generated with rcgen, registered through
//! the shipped webhook configurations, the API server resolving their Service to the local
//! port) and `booking-controller` — the production binaries, only pointed at local endpoints.
//! It then applies the CRDs and samples adjusted to now.
//!
//! - `demo`: all of it in the foreground with a live view, until Ctrl-C, then stops it.
//! - `up`: in the background; returns once ready and writes `<dir>/env` (`KEY=value` lines).
//! - `down`: stops every recorded process by PID and removes the state (not the logs).
//! - `status`: what runs.
//!
//! Processes are recorded in `<dir>/pids/`, their output goes to `<dir>/logs/<name>.log`.

mod procs;
mod stack;
mod view;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use stack::{Settings, UpOutcome};

/// The booking operator on one machine: API server, moto, SMTP, webhook and controller.
#[derive(Parser, Debug)]
#[command(name = "booking-sandbox", version, about)]
struct Cli {
    /// State directory (env file, PIDs, logs, certificates, mail).
    #[arg(long, env = "SANDBOX_DIR", global = true)]
    dir: Option<PathBuf>,
    /// First of six consecutive ports on 127.0.0.1: API server, moto, SMTP, webhook HTTPS,
    /// webhook admin, controller admin.
    #[arg(
        long,
        env = "SANDBOX_PORT_BASE",
        default_value_t = 17443,
        global = true
    )]
    port_base: u16,
    /// Namespace the controller manages and the samples live in.
    #[arg(
        long,
        env = "SANDBOX_NAMESPACE",
        default_value = "booking-demo",
        global = true
    )]
    namespace: String,
    /// AWS tag key prefix given to the controller and used to seed moto.
    #[arg(
        long,
        env = "SANDBOX_TAG_PREFIX",
        default_value = "resource-booking/",
        global = true
    )]
    tag_prefix: String,
    /// Directory of `booking-controller`, `booking-webhook` and `kube-test-server`; defaults to
    /// this program's directory.
    #[arg(long, env = "SANDBOX_BIN_DIR", global = true)]
    bin_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start everything, show a live view until Ctrl-C, then stop everything.
    Demo,
    /// Start everything in the background and return once ready (idempotent).
    Up {
        /// Do not apply the demo samples (monitor, RDS resource, booking, scheduler).
        #[arg(long)]
        no_samples: bool,
    },
    /// Stop every process `up` started and remove the sandbox's state (logs are kept).
    Down,
    /// Show which processes run.
    Status,
}

fn settings(cli: &Cli, samples: bool) -> Result<Settings> {
    let dir = cli
        .dir
        .clone()
        .unwrap_or_else(|| booking_harness::paths::repo_root().join("target/sandbox"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let dir = dir.canonicalize()?;
    let bin_dir = match &cli.bin_dir {
        Some(d) => d.clone(),
        None => std::env::current_exe()?
            .parent()
            .map(PathBuf::from)
            .context("locating this program's directory")?,
    };
    if cli.port_base > u16::MAX - 6 {
        anyhow::bail!("--port-base {} leaves no room for six ports", cli.port_base);
    }
    Ok(Settings {
        dir,
        port_base: cli.port_base,
        namespace: cli.namespace.clone(),
        tag_prefix: cli.tag_prefix.clone(),
        bin_dir,
        samples,
    })
}

fn print_usage(s: &Settings) {
    let env = s.env_file();
    let p = s.ports();
    println!(
        "\nThe sandbox runs. From another shell:\n\
         \n    set -a; source {env}; set +a\n\
         \n    kubectl get bookings,resources,resourcemonitors,bookingschedulers -n \"$NAMESPACE\"\
         \n    kubectl get events -n \"$NAMESPACE\"\
         \n    aws ec2 describe-instances --region {region}    # AWS_ENDPOINT_URL points at moto\
         \n    ls \"$MAIL_DIR\"                                  # one RFC 5322 file per mail\
         \n    curl -s \"$CONTROLLER_METRICS_URL\" | head\n\
         \nEC2 groups: ec2.web ({region}, booked by demo-web), {analytics} (booked every minute by a\
         \nscheduler), ec2.batch ({region}, free to book); RDS: rds.reporting-db.\
         \nAPI server https://127.0.0.1:{api}, moto http://127.0.0.1:{moto}, SMTP 127.0.0.1:{smtp}, logs in {logs}.",
        env = env.display(),
        region = stack::REGION,
        analytics = stack::ANALYTICS_RESOURCE,
        api = p.api,
        moto = p.moto,
        smtp = p.smtp,
        logs = s.dir.join("logs").display(),
    );
}

fn down(s: &Settings) -> Result<()> {
    let report = procs::stop_all(&s.dir)?;
    stack::clean_state(&s.dir)?;
    if report.stopped.is_empty() && report.already_gone.is_empty() {
        println!("Nothing was running.");
    } else {
        if !report.stopped.is_empty() {
            println!("Stopped: {}.", report.stopped.join(", "));
        }
        if !report.already_gone.is_empty() {
            println!(
                "Had already exited: {} (logs in {}).",
                report.already_gone.join(", "),
                s.dir.join("logs").display()
            );
        }
    }
    Ok(())
}

fn status(s: &Settings) -> Result<bool> {
    let records = procs::recorded(&s.dir)?;
    if records.is_empty() {
        println!("The sandbox is not running.");
        return Ok(false);
    }
    let mut all = true;
    for r in &records {
        let alive = r.alive();
        all &= alive;
        println!(
            "{:<16} pid {:<8} {}",
            r.name,
            r.pid,
            if alive { "running" } else { "EXITED" }
        );
    }
    if s.env_file().is_file() {
        println!("\nenv file {}:", s.env_file().display());
        for (k, v) in stack::read_env_file(&s.env_file())? {
            println!("  {k}={v}");
        }
    }
    Ok(all)
}

async fn demo(s: &Settings) -> Result<()> {
    use std::io::{IsTerminal as _, Write as _};
    if let UpOutcome::AlreadyRunning = stack::up(s).await? {
        println!("(the sandbox was already running; the demo shows it and stops it at the end)");
    }
    print_usage(s);
    let result = async {
        let client = stack::kube_client(&s.kubeconfig()).await?;
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let tty = std::io::stdout().is_terminal();
        tokio::time::sleep(Duration::from_secs(3)).await;
        loop {
            let frame = view::render(s, &client).await;
            let mut out = std::io::stdout().lock();
            if tty {
                // Clear the screen and go home.
                write!(out, "\x1b[2J\x1b[H")?;
            } else {
                writeln!(out, "----------------------------------------")?;
            }
            write!(out, "{frame}")?;
            out.flush()?;
            drop(out);
            for r in procs::recorded(&s.dir)? {
                if !r.alive() {
                    println!(
                        "!! {} exited; last lines of {}:\n{}",
                        r.name,
                        r.log_path(&s.dir).display(),
                        procs::log_tail(&r.log_path(&s.dir), 10)
                    );
                }
            }
            tokio::select! {
                _ = tokio::signal::ctrl_c() => break,
                _ = term.recv() => break,
                () = tokio::time::sleep(Duration::from_secs(2)) => {}
            }
        }
        anyhow::Ok(())
    }
    .await;
    println!("\nStopping the sandbox…");
    down(s)?;
    result
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = async {
        match &cli.command {
            Command::Demo => demo(&settings(&cli, true)?).await,
            Command::Up { no_samples } => {
                let s = settings(&cli, !no_samples)?;
                match stack::up(&s).await? {
                    UpOutcome::AlreadyRunning => {
                        println!("The sandbox is already running.");
                    }
                    UpOutcome::Started => {}
                }
                print_usage(&s);
                Ok(())
            }
            Command::Down => down(&settings(&cli, true)?),
            Command::Status => {
                if status(&settings(&cli, true)?)? {
                    Ok(())
                } else {
                    Err(anyhow::anyhow!("not every sandbox process is running"))
                }
            }
        }
    }
    .await;
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("booking-sandbox: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
