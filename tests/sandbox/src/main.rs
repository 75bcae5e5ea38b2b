//! `booking-sandbox`: the whole booking operator on one machine, without a cloud account or a
//! cluster.
//!
//! It starts a real Kubernetes control plane — etcd, kube-apiserver and kube-controller-manager
//! of the release the tests use, from `tests/control-plane/build.sh` (built from their Go modules
//! once and cached, or setup-envtest's binaries through `KUBEBUILDER_ASSETS` / `TEST_ASSET_*`) —
//! moto (seeded with tagged EC2 instances in two regions and a tagged RDS instance), an SMTP
//! server writing every message to a directory, `booking-webhook` (certificates generated with
//! rcgen, registered through the shipped webhook configurations with the local webhook's URL in
//! place of their Service) and `booking-controller` — the production binaries, only pointed at
//! local endpoints. It then applies the CRDs and samples adjusted to now.
//!
//! - `demo`: all of it in the foreground with a live view, until Ctrl-C, then stops it.
//! - `up`: in the background; returns once ready and writes `<dir>/env` (`KEY=value` lines).
//! - `down`: stops every recorded process by PID and removes the state (not the logs).
//! - `status`: what runs.
//!
//! Processes are recorded in `<dir>/pids/`, their output goes to `<dir>/logs/<name>.log`. They
//! run in process groups of their own, so a Ctrl-C or a closing terminal reaches only this
//! program: on SIGINT, SIGTERM or SIGHUP, and when its output is gone (a closed terminal, a
//! pipe whose reader exited), `demo` stops every process it started by PID; `up` does so when
//! interrupted before the stack is ready. Nothing here panics on a failed write.

#[macro_use]
mod output;
mod procs;
mod stack;
mod view;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use tokio::signal::unix::{Signal, SignalKind, signal};

use stack::{PORT_COUNT, Settings, UpOutcome};

/// The booking operator on one machine: a real control plane, moto, SMTP, webhook and
/// controller.
#[derive(Parser, Debug)]
#[command(name = "booking-sandbox", version, about)]
struct Cli {
    /// State directory (env file, PIDs, logs, certificates, etcd's data, mail).
    #[arg(long, env = "SANDBOX_DIR", global = true)]
    dir: Option<PathBuf>,
    /// First of nine consecutive ports on 127.0.0.1: kube-apiserver, moto, SMTP, webhook HTTPS,
    /// webhook admin, controller admin, etcd client, etcd peer, kube-controller-manager.
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
    /// Directory of `booking-controller` and `booking-webhook`; defaults to this program's
    /// directory.
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
    if cli.port_base > u16::MAX - PORT_COUNT {
        bail!(
            "--port-base {} leaves no room for {PORT_COUNT} ports",
            cli.port_base
        );
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

/// The signals that end the sandbox's foreground work: Ctrl-C, `kill`, a closed terminal.
/// Once installed, none of them ends the process by itself, so stopping the stack is never
/// cut short (a second Ctrl-C while it stops is ignored).
struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl Signals {
    fn install() -> Result<Signals> {
        Ok(Signals {
            int: signal(SignalKind::interrupt()).context("handling SIGINT")?,
            term: signal(SignalKind::terminate()).context("handling SIGTERM")?,
            hup: signal(SignalKind::hangup()).context("handling SIGHUP")?,
        })
    }

    /// The next signal's name.
    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.int.recv() => "SIGINT",
            _ = self.term.recv() => "SIGTERM",
            _ = self.hup.recv() => "SIGHUP",
        }
    }
}

/// Stops every recorded process when dropped while armed: the stack started in the
/// foreground does not outlive this program, also when it panics.
struct StopGuard<'a> {
    dir: &'a Path,
    armed: bool,
}

impl<'a> StopGuard<'a> {
    fn new(dir: &'a Path) -> Self {
        StopGuard { dir, armed: true }
    }

    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for StopGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            note!("booking-sandbox: stopping what it started");
            if let Err(e) = procs::stop_all(self.dir) {
                note!("booking-sandbox: stopping failed: {e:#}");
            }
            let _ = stack::clean_state(self.dir);
        }
    }
}

/// Starts the stack unless it runs; a signal meanwhile stops what was started.
async fn up_or_interrupted(s: &Settings, signals: &mut Signals) -> Result<UpOutcome> {
    let mut guard = StopGuard::new(&s.dir);
    tokio::select! {
        outcome = stack::up(s) => {
            // `up` stops what it started when it fails.
            guard.disarm();
            outcome
        }
        sig = signals.recv() => {
            say!("\n{sig} while starting: stopping what was started…");
            guard.disarm();
            down(s)?;
            bail!("interrupted by {sig} while starting")
        }
    }
}

fn print_usage(s: &Settings) {
    let env = s.env_file();
    let p = s.ports();
    let kubectl = stack::read_env_file(&env)
        .ok()
        .and_then(|vars| vars.get("KUBECTL").cloned())
        .unwrap_or_else(|| "kubectl".to_owned());
    say!(
        "\nThe sandbox runs. From another shell:\n\
         \n    set -a; source {env}; set +a\n\
         \n    \"$KUBECTL\" get bookings,resources,resourcemonitors,bookingschedulers -n \"$NAMESPACE\"\
         \n    \"$KUBECTL\" get bookings -n \"$NAMESPACE\" -w    # watch phases change\
         \n    \"$KUBECTL\" get events -n \"$NAMESPACE\"\
         \n    aws ec2 describe-instances --region {region}    # AWS_ENDPOINT_URL points at moto\
         \n    ls \"$MAIL_DIR\"                                  # one RFC 5322 file per mail\
         \n    curl -s \"$CONTROLLER_METRICS_URL\" | head\n\
         \n$KUBECTL is the control plane's own kubectl, {kubectl}; any kubectl within one\
         \nminor version of v1.37 works with $KUBECONFIG as well.\
         \nEC2 groups: ec2.web ({region}, booked by demo-web), {analytics} (booked every minute by a\
         \nscheduler), ec2.batch ({region}, free to book); RDS: rds.reporting-db.\
         \nkube-apiserver https://127.0.0.1:{api} (etcd http://127.0.0.1:{etcd}), moto http://127.0.0.1:{moto},\
         \nSMTP 127.0.0.1:{smtp}, logs in {logs}.",
        env = env.display(),
        region = stack::REGION,
        analytics = stack::ANALYTICS_RESOURCE,
        api = p.api,
        etcd = p.etcd,
        moto = p.moto,
        smtp = p.smtp,
        logs = s.dir.join("logs").display(),
    );
}

fn down(s: &Settings) -> Result<()> {
    let report = procs::stop_all(&s.dir)?;
    stack::clean_state(&s.dir)?;
    if report.stopped.is_empty() && report.already_gone.is_empty() {
        say!("Nothing was running.");
    } else {
        if !report.stopped.is_empty() {
            say!("Stopped: {}.", report.stopped.join(", "));
        }
        if !report.already_gone.is_empty() {
            say!(
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
        say!("The sandbox is not running.");
        return Ok(false);
    }
    let mut all = true;
    for r in &records {
        let alive = r.alive();
        all &= alive;
        say!(
            "{:<24} pid {:<8} {}",
            r.name,
            r.pid,
            if alive { "running" } else { "EXITED" }
        );
    }
    if s.env_file().is_file() {
        say!("\nenv file {}:", s.env_file().display());
        for (k, v) in stack::read_env_file(&s.env_file())? {
            say!("  {k}={v}");
        }
    }
    Ok(all)
}

/// Why the demo's view ended.
enum DemoEnd {
    /// A signal, by name.
    Signal(&'static str),
    /// Writing to stdout failed: the terminal closed or the pipe's reader is gone.
    OutputClosed,
}

async fn demo(s: &Settings, signals: &mut Signals) -> Result<()> {
    // Armed until the stack is stopped below: a panic must not leave it running either.
    let mut guard = StopGuard::new(&s.dir);
    if let UpOutcome::AlreadyRunning = up_or_interrupted(s, signals).await? {
        say!("(the sandbox was already running; the demo shows it and stops it at the end)");
    }
    print_usage(s);
    let ended = view_until_stopped(s, signals).await;
    match &ended {
        Ok(DemoEnd::Signal(sig)) => say!("\n{sig}: stopping the sandbox…"),
        Ok(DemoEnd::OutputClosed) => {
            note!("booking-sandbox: its output is closed; stopping the sandbox");
        }
        Err(e) => say!("\nThe view failed ({e:#}); stopping the sandbox…"),
    }
    guard.disarm();
    down(s)?;
    ended.map(drop)
}

/// Redraws the view every two seconds until a signal or until stdout is gone. On a terminal
/// every frame replaces the last; into a file or a pipe (`make demo | tee demo.log`) a frame is
/// written only when something besides its clock changed, so a long run's log holds each state
/// once.
async fn view_until_stopped(s: &Settings, signals: &mut Signals) -> Result<DemoEnd> {
    use std::io::IsTerminal as _;
    let client = stack::kube_client(&s.kubeconfig()).await?;
    let tty = std::io::stdout().is_terminal();
    let mut pause = Duration::from_secs(3);
    let mut last_shown: Option<String> = None;
    loop {
        tokio::select! {
            sig = signals.recv() => return Ok(DemoEnd::Signal(sig)),
            () = tokio::time::sleep(pause) => {}
        }
        pause = Duration::from_secs(2);
        let frame = view::render(s, &client).await;
        if tty {
            // Clear the screen and go home.
            output::stdout_text(&format!("\x1b[2J\x1b[H{frame}"));
        } else if view::changed(last_shown.as_deref(), &frame) {
            output::stdout_text(&format!(
                "----------------------------------------\n{frame}"
            ));
            last_shown = Some(frame);
        } else {
            // Nothing written: a reader that is gone shows on stdout itself.
            output::check_stdout();
        }
        for r in procs::recorded(&s.dir)? {
            if !r.alive() {
                say!(
                    "!! {} exited; last lines of {}:\n{}",
                    r.name,
                    r.log_path(&s.dir).display(),
                    procs::log_tail(&r.log_path(&s.dir), 10)
                );
            }
        }
        if output::stdout_broken() {
            return Ok(DemoEnd::OutputClosed);
        }
    }
}

async fn run(cli: &Cli) -> Result<()> {
    match &cli.command {
        Command::Demo => {
            let mut signals = Signals::install()?;
            demo(&settings(cli, true)?, &mut signals).await
        }
        Command::Up { no_samples } => {
            let mut signals = Signals::install()?;
            let s = settings(cli, !no_samples)?;
            if let UpOutcome::AlreadyRunning = up_or_interrupted(&s, &mut signals).await? {
                say!("The sandbox is already running.");
            }
            print_usage(&s);
            Ok(())
        }
        Command::Down => down(&settings(cli, true)?),
        Command::Status => {
            if status(&settings(cli, true)?)? {
                Ok(())
            } else {
                bail!("not every sandbox process is running")
            }
        }
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            note!("booking-sandbox: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(&cli));
    // A build of the control plane's binaries interrupted by a signal may still run on a
    // blocking thread; do not wait for it.
    runtime.shutdown_background();
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            note!("booking-sandbox: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
