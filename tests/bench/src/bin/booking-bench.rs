//! `booking-bench`: the benchmark suite of issue 9 (`make bench`), or with `--smoke` a
//! seconds-long check that the harness works (CI; no thresholds).
//!
//! Runs the real binaries of `--bin-dir` (release builds under `make bench`) against real
//! Kubernetes control planes (etcd and kube-apiserver of the tested release, one private pair
//! per API server the bench needs, see [`booking_bench::cluster`]) and moto, and writes the
//! figures to `--out` (`target/bench/results.json`). See BENCHMARKS.md for how to read them.
//!
//! Core sharing (2 cores): with `--server-cpus 0 --client-cpus 1` (the default) the servers
//! under test run on CPU 0 and this process (the load client) and the control planes (idle
//! while load runs) on CPU 1, so the load generator never steals the server's core. The
//! `*_shared_cores` figures run the same load with every process allowed on both cores. While
//! the control planes start and while bookings are created in bulk, they and this process may
//! use every CPU.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context as _, bail, ensure};
use booking_bench::{
    capture::CaptureServer,
    cluster::{self, Cluster},
    fixtures::{self, Layout},
    load::{self, Target},
    stats::{Samples, median},
    sys,
};
use booking_harness::{
    TestDir,
    control_plane::LocalWebhooks,
    free_port,
    process::{ManagedProcess, ProcessBuilder, Readiness},
    tls::{ServerCert, TestCa},
};
use clap::Parser;
use futures::StreamExt as _;
use kube::{Api, api::PostParams, core::DynamicObject};

/// The benchmark suite of the booking operator.
#[derive(Parser, Debug, Clone)]
#[command(name = "booking-bench")]
struct Args {
    /// A seconds-long run with tiny sizes that checks the harness works (no thresholds).
    #[arg(long)]
    smoke: bool,
    /// Folder of `booking-webhook`, `booking-controller` and `booking-bench-echo`.
    #[arg(long, default_value = "target/release")]
    bin_dir: PathBuf,
    /// Where to write the figures.
    #[arg(long, default_value = "target/bench/results.json")]
    out: PathBuf,
    /// Sections to run (comma-separated): webhook, controller, api-load, startup, restarts.
    #[arg(
        long,
        default_value = "webhook,controller,api-load,startup,restarts",
        value_delimiter = ','
    )]
    sections: Vec<String>,
    /// Seconds of booking transitions in each kill campaign of the restarts section (one with
    /// one replica, one with two).
    #[arg(long, default_value_t = 480)]
    campaign_seconds: u64,
    /// Bookings indexed for the webhook figures.
    #[arg(long, default_value_t = 10_000)]
    bookings: usize,
    /// Bookings indexed for the webhook's large-index memory figure
    /// (`webhook_rss_mib_100k_bookings`): after every other webhook figure, bookings are
    /// created on the same API server until it holds this many. 0 skips it.
    #[arg(long, default_value_t = 100_000)]
    bookings_large: usize,
    /// Seconds of each measured load run.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Rounds of each comparison (alternating the servers compared).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Connections of the closed-loop (peak) runs.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Bookings the controller section grows to after the 10,000-booking figures (memory and
    /// start latency with that many bookings stored; 0 or at most 10,000: skipped).
    #[arg(long, default_value_t = 100_000)]
    controller_bookings: usize,
    /// Resource counts of the describe-calls figures (each also one managed instance).
    #[arg(long, default_value = "10,100,1000", value_delimiter = ',')]
    resource_counts: Vec<usize>,
    /// CPUs of the servers under test (a taskset list); empty: no pinning.
    #[arg(long, default_value = "0")]
    server_cpus: String,
    /// CPUs of this process, the load client (a taskset list); empty: no pinning.
    #[arg(long, default_value = "1")]
    client_cpus: String,
    /// Create requests in flight when bookings and Resources are created in bulk.
    #[arg(long, default_value_t = 64)]
    create_concurrency: usize,
    /// Bookings created one after another per round and setting (webhook registered or not)
    /// for the create-latency figures.
    #[arg(long, default_value_t = 500)]
    create_samples: usize,
    /// Pairs of creates of the paired create-latency figures (the goal's
    /// `webhook_added_p{50,99}_ms_real_create_10k`): one create where the webhook is called and
    /// one in a namespace that opts out of it, back to back, alternating which goes first.
    #[arg(long, default_value_t = 5_000)]
    paired_creates: usize,
    /// Ends the controller section after its start-latency parts, without the memory part
    /// (10,000 bookings and a relist): for quick before/after runs of the start figures.
    #[arg(long)]
    skip_controller_memory: bool,
}

type Results = BTreeMap<String, f64>;

#[path = "booking-bench/api_load.rs"]
mod api_load;
#[path = "booking-bench/startup.rs"]
mod startup;

fn main() -> anyhow::Result<()> {
    let mut args = Args::parse();
    if args.smoke {
        args.bookings = args.bookings.min(20);
        args.bookings_large = args.bookings_large.min(200);
        args.seconds = 1;
        args.rounds = 1;
        args.connections = args.connections.min(4);
        args.create_samples = args.create_samples.min(20);
        args.paired_creates = args.paired_creates.min(20);
    }
    if sys::allowed_cpus() < 2 {
        // One CPU: pinning apart is impossible; everything shares it.
        args.server_cpus.clear();
        args.client_cpus.clear();
    }
    if !args.client_cpus.is_empty() {
        // Before the runtime starts, so every worker thread inherits it.
        sys::pin(std::process::id(), &args.client_cpus)?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let dir = TestDir::new("bench")?;
    let mut results = Results::new();
    eprintln!(
        "booking-bench: {} CPUs allowed to the client; servers on {:?}, client on {:?}",
        sys::allowed_cpus(),
        args.server_cpus,
        args.client_cpus
    );
    let mut failures = Vec::new();
    for section in &args.sections {
        let outcome = match section.as_str() {
            "webhook" => webhook::run(&args, &dir, &mut results).await,
            "controller" => controller::run(&args, &dir, &mut results).await,
            "api-load" => api_load::run(&args, &dir, &mut results).await,
            "startup" => startup::run(&args, &dir, &mut results).await,
            "restarts" => restarts::run(&args, &mut results).await,
            other => Err(anyhow::anyhow!("unknown section {other:?}")),
        };
        if let Err(e) = outcome {
            eprintln!("booking-bench: section {section} failed: {e:#}");
            failures.push(section.clone());
        }
        write_results(&args.out, &results)?;
    }
    println!("{}", serde_json::to_string_pretty(&results)?);
    eprintln!("booking-bench: wrote {}", args.out.display());
    // The control planes' folders: deleted now (the last clones), or kept after a failure.
    let planes = std::mem::take(&mut *kept_dirs().lock().unwrap_or_else(|e| e.into_inner()));
    if !failures.is_empty() {
        dir.keep();
        for d in &planes {
            d.keep();
        }
    }
    drop(planes);
    if !failures.is_empty() {
        bail!("sections failed: {failures:?}");
    }
    Ok(())
}

fn write_results(path: &Path, results: &Results) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, serde_json::to_vec_pretty(results)?)
        .with_context(|| format!("writing {}", path.display()))
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// A binary of `--bin-dir`.
fn binary(args: &Args, name: &str) -> anyhow::Result<PathBuf> {
    let path = args.bin_dir.join(name);
    ensure!(
        path.is_file(),
        "{} is missing: build it (make bench builds release binaries)",
        path.display()
    );
    Ok(path)
}

/// A process pinned to the server CPUs (when pinning).
fn server_process(args: &Args, name: &str, program: &Path) -> ProcessBuilder {
    if args.server_cpus.is_empty() {
        ProcessBuilder::new(name, program)
    } else {
        ProcessBuilder::new(name, "taskset")
            .args(["-c", &args.server_cpus])
            .arg(program)
    }
}

/// The folders of the control planes started so far (kept when a section fails).
fn kept_dirs() -> &'static std::sync::Mutex<Vec<TestDir>> {
    static DIRS: std::sync::OnceLock<std::sync::Mutex<Vec<TestDir>>> = std::sync::OnceLock::new();
    DIRS.get_or_init(Default::default)
}

/// Starts one private control plane per label, together. Go sizes its scheduler from the CPUs
/// a process may use when it starts and children inherit this process's affinity, so this
/// process may use every CPU meanwhile; it is pinned back to the client's CPUs after.
async fn start_clusters(args: &Args, labels: &[&str]) -> anyhow::Result<Vec<Cluster>> {
    start_clusters_with(args, labels.iter().map(|l| (*l, Vec::new())).collect()).await
}

/// [`start_clusters`] with extra kube-apiserver flags per control plane.
async fn start_clusters_with(
    args: &Args,
    planes: Vec<(&str, Vec<String>)>,
) -> anyhow::Result<Vec<Cluster>> {
    let all = sys::all_cpus();
    if !args.client_cpus.is_empty() {
        sys::pin(std::process::id(), &all)?;
    }
    let started = futures::future::join_all(
        planes
            .iter()
            .map(|(l, flags)| Cluster::start_with(l, flags.clone())),
    )
    .await;
    if !args.client_cpus.is_empty() {
        sys::pin(std::process::id(), &args.client_cpus)?;
    }
    let mut out = Vec::new();
    for ((label, _), r) in planes.iter().zip(started) {
        let (c, took) = r?;
        kept_dirs()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(c.dir.clone());
        eprintln!(
            "control plane {label}: etcd and kube-apiserver ready in {:.1}s ({})",
            took.as_secs_f64(),
            c.plane.url()
        );
        out.push(c);
    }
    Ok(out)
}

/// Creates objects through the API, `--create-concurrency` at a time; logs what it cost.
async fn create_all(
    args: &Args,
    client: &kube::Client,
    plural: &str,
    kind: &str,
    objects: Vec<serde_json::Value>,
) -> anyhow::Result<cluster::Created> {
    let created =
        cluster::create_all(client, plural, kind, objects, args.create_concurrency).await?;
    if created.count >= 100 {
        eprintln!(
            "created {} {plural} in {:.1}s ({:.0}/s, {} in flight; per request p50 {:.1} ms, p99 {:.1} ms)",
            created.count,
            created.elapsed.as_secs_f64(),
            created.per_second(),
            args.create_concurrency,
            created.latencies.quantile_ms(0.5).unwrap_or(f64::NAN),
            created.latencies.quantile_ms(0.99).unwrap_or(f64::NAN),
        );
    }
    Ok(created)
}

/// Records what a bulk creation cost under `prefix`.
fn record_creation(results: &mut Results, prefix: &str, created: &cluster::Created) {
    results.insert(
        format!("{prefix}_create_seconds"),
        round3(created.elapsed.as_secs_f64()),
    );
    results.insert(
        format!("{prefix}_created_per_second"),
        created.per_second().round(),
    );
}

mod webhook {
    use super::*;

    struct Webhook {
        process: ManagedProcess,
        addr: SocketAddr,
        admin: u16,
    }

    async fn start_webhook(
        args: &Args,
        dir: &TestDir,
        name: &str,
        kubeconfig: &Path,
        cert: &ServerCert,
    ) -> anyhow::Result<Webhook> {
        let bin = binary(args, "booking-webhook")?;
        let port = free_port()?;
        let admin = free_port()?;
        let mut process = server_process(args, name, &bin)
            .env("KUBECONFIG", kubeconfig)
            .env("TLS_CERT_FILE", &cert.cert_path)
            .env("TLS_KEY_FILE", &cert.key_path)
            .env("WEBHOOK_LISTEN_ADDR", format!("127.0.0.1:{port}"))
            .env("WEBHOOK_ADMIN_ADDR", format!("127.0.0.1:{admin}"))
            .env("RUST_LOG", "warn")
            .spawn(dir)?;
        process
            .wait_ready(
                &Readiness::Http(format!("http://127.0.0.1:{admin}/readyz")),
                Duration::from_secs(120),
            )
            .await?;
        Ok(Webhook {
            process,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            admin,
        })
    }

    /// A metric of the webhook's `/metrics`: the sum of the samples named `name` whose labels
    /// contain every one of `labels`.
    async fn metric(webhook: &Webhook, name: &str, labels: &[&str]) -> anyhow::Result<f64> {
        let text = super::controller::http_get(webhook.admin, "/metrics").await?;
        Ok(text
            .lines()
            .filter(|l| {
                l.split([' ', '{']).next() == Some(name) && labels.iter().all(|x| l.contains(x))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum())
    }

    /// The webhook's (mutate, validate) decisions on Bookings so far.
    async fn booking_decisions(webhook: &Webhook) -> anyhow::Result<(f64, f64)> {
        let name = "booking_webhook_admission_decisions_total";
        Ok((
            metric(webhook, name, &["endpoint=\"mutate\"", "kind=\"Booking\""]).await?,
            metric(
                webhook,
                name,
                &["endpoint=\"validate\"", "kind=\"Booking\""],
            )
            .await?,
        ))
    }

    /// Waits until the webhook's index holds `n` bookings, all from its watch of the API
    /// server (`booking_webhook_indexed_bookings`).
    async fn wait_indexed(webhook: &Webhook, n: usize) -> anyhow::Result<Duration> {
        let t0 = std::time::Instant::now();
        loop {
            let indexed = metric(webhook, "booking_webhook_indexed_bookings", &[]).await?;
            if indexed >= n as f64 {
                return Ok(t0.elapsed());
            }
            if t0.elapsed() > Duration::from_secs(120) {
                bail!("the webhook indexed {indexed} of {n} bookings in 120 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The dry-run create that shows whether registered webhooks are in effect: a free slot of
    /// group 1, between its first two bookings (group 0's gap is the one the load runs reserve).
    fn registration_probe(layout: &Layout) -> anyhow::Result<(DynamicObject, PostParams)> {
        let probe = serde_json::from_value(fixtures::booking(
            "probe-registration",
            &Layout::resource(1),
            layout.base + chrono::Duration::minutes(70),
            layout.base + chrono::Duration::minutes(110),
        ))?;
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        Ok((probe, dry_run))
    }

    /// Waits until the API server calls the webhook on a Booking create (both the mutating
    /// and the validating webhook: `registered`), or calls neither (three dry-run creates in a
    /// row), after the configurations were created or deleted: the API server reads them
    /// through an informer, so a change takes effect a little later.
    async fn wait_registration(
        api: &Api<DynamicObject>,
        webhook: &Webhook,
        layout: &Layout,
        registered: bool,
    ) -> anyhow::Result<Duration> {
        let t0 = std::time::Instant::now();
        let (probe, dry_run) = registration_probe(layout)?;
        let mut quiet = 0;
        loop {
            let before = booking_decisions(webhook).await?;
            api.create(&dry_run, &probe)
                .await
                .context("dry-run create of the registration probe")?;
            let after = booking_decisions(webhook).await?;
            let (mutated, validated) = (after.0 > before.0, after.1 > before.1);
            if registered && mutated && validated {
                return Ok(t0.elapsed());
            }
            if !registered && !mutated && !validated {
                quiet += 1;
                if quiet == 3 {
                    return Ok(t0.elapsed());
                }
            } else {
                quiet = 0;
            }
            if t0.elapsed() > Duration::from_secs(60) {
                bail!(
                    "the webhook configurations did not take effect in 60 s (registered: {registered}, mutate called: {mutated}, validate called: {validated})"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Creates `count` bookings one after another (bookings `from..from + count` of the
    /// layout, free slots); the latency of each create, from the request to its answer.
    async fn sequential_creates(
        api: &Api<DynamicObject>,
        layout: &Layout,
        from: usize,
        count: usize,
    ) -> anyhow::Result<Samples> {
        let mut samples = Samples::default();
        for i in from..from + count {
            let obj: DynamicObject = serde_json::from_value(layout.booking(i))?;
            let t = std::time::Instant::now();
            api.create(&PostParams::default(), &obj)
                .await
                .with_context(|| format!("creating booking {i} of the layout"))?;
            samples.push(t.elapsed());
        }
        Ok(samples)
    }

    /// The paired create-latency samples.
    struct Paired {
        /// Creates where the webhook was called.
        with: Samples,
        /// Creates in the namespace that opts out of it.
        without: Samples,
        /// The added p99 (with minus without) of each fifth of the pairs, in order: how much
        /// the figure moves within one run.
        added_p99_by_part: Vec<f64>,
    }

    /// `count` pairs of creates, bookings `from..from + count` of the layout in the 10k
    /// namespace (the webhook called) and the same bookings in the namespace that opts out
    /// ([`fixtures::OPTED_OUT_NAMESPACE`], created here), back to back and alternating which
    /// goes first. Checks first, by the webhook's decision counters, that the API server calls
    /// the webhook for the one and not for the other.
    async fn paired_creates(
        client: &kube::Client,
        webhook: &Webhook,
        layout: &Layout,
        from: usize,
        count: usize,
    ) -> anyhow::Result<Paired> {
        cluster::create_opted_out_namespace(client).await?;
        let hooked = cluster::api(client, "bookings", "Booking");
        let opted_out =
            cluster::api_in(client, fixtures::OPTED_OUT_NAMESPACE, "bookings", "Booking");
        let create = |api: &Api<DynamicObject>, namespace: &'static str, i: usize| {
            let api = api.clone();
            let value = layout.booking_in(namespace, i);
            async move {
                let obj: DynamicObject = serde_json::from_value(value)?;
                let t = std::time::Instant::now();
                api.create(&PostParams::default(), &obj)
                    .await
                    .with_context(|| {
                        format!("creating booking {i} of the layout in {namespace}")
                    })?;
                anyhow::Ok(t.elapsed())
            }
        };
        // The check, which doubles as the warm-up of both namespaces.
        for i in from..from + 5 {
            let before = booking_decisions(webhook).await?;
            create(&opted_out, fixtures::OPTED_OUT_NAMESPACE, i).await?;
            let middle = booking_decisions(webhook).await?;
            create(&hooked, fixtures::NAMESPACE, i).await?;
            let after = booking_decisions(webhook).await?;
            ensure!(
                middle == before,
                "the API server called the webhook for a create in {} (decisions {before:?} -> {middle:?}): the opt-out label no longer matches the shipped configurations",
                fixtures::OPTED_OUT_NAMESPACE
            );
            ensure!(
                after.0 > middle.0 && after.1 > middle.1,
                "the API server did not call both webhooks for a create in {} (decisions {middle:?} -> {after:?})",
                fixtures::NAMESPACE
            );
        }
        let mut paired = Paired {
            with: Samples::default(),
            without: Samples::default(),
            added_p99_by_part: Vec::new(),
        };
        let part = count.div_ceil(5).max(1);
        let (mut part_with, mut part_without) = (Samples::default(), Samples::default());
        for (k, i) in (from + 5..from + 5 + count).enumerate() {
            let (w, o) = if k % 2 == 0 {
                let w = create(&hooked, fixtures::NAMESPACE, i).await?;
                (
                    w,
                    create(&opted_out, fixtures::OPTED_OUT_NAMESPACE, i).await?,
                )
            } else {
                let o = create(&opted_out, fixtures::OPTED_OUT_NAMESPACE, i).await?;
                (create(&hooked, fixtures::NAMESPACE, i).await?, o)
            };
            part_with.push(w);
            part_without.push(o);
            if part_with.len() == part || k + 1 == count {
                if let (Some(a), Some(b)) =
                    (part_with.quantile_ms(0.99), part_without.quantile_ms(0.99))
                {
                    paired.added_p99_by_part.push(round3(a - b));
                }
                paired.with.extend(&part_with);
                paired.without.extend(&part_without);
                part_with = Samples::default();
                part_without = Samples::default();
            }
        }
        Ok(paired)
    }

    /// Checks that the webhook denies a booking overlapping the first indexed one (its index
    /// holds the bookings) and admits the free probe.
    async fn check_index(
        target: &Target,
        layout: &Layout,
        expect_conflict: bool,
    ) -> anyhow::Result<()> {
        let mut probe = target.clone();
        probe.body = layout.conflicting_review().into();
        let answer = load::Connection::open(&probe).await?.send().await?;
        ensure!(
            fixtures::allowed(&answer) == Some(!expect_conflict),
            "overlap probe: expected allowed={}, got {}",
            !expect_conflict,
            String::from_utf8_lossy(&answer)
        );
        let answer = load::Connection::open(target).await?.send().await?;
        ensure!(
            fixtures::allowed(&answer) == Some(true),
            "the benchmark's review is not admitted: {}",
            String::from_utf8_lossy(&answer)
        );
        Ok(())
    }

    pub async fn run(args: &Args, dir: &TestDir, results: &mut Results) -> anyhow::Result<()> {
        let layout = Layout::new(chrono::Utc::now(), 100);
        let ca = TestCa::new(dir, "bench")?;
        let cert = ca.issue_server_cert("webhook", &["localhost", "127.0.0.1"])?;
        let tls = load::client_config(ca.root_store()?)?;

        // A control plane with N bookings, created before the webhook starts (its watch lists
        // them all), and an empty one.
        let mut planes = start_clusters(args, &["webhook-10k", "webhook-0"]).await?;
        let (Some(empty), Some(full)) = (planes.pop(), planes.pop()) else {
            bail!("two control planes expected");
        };
        let all = sys::all_cpus();
        let pinning = !args.client_cpus.is_empty();
        if pinning {
            // The bulk creation has both cores: the API server, etcd and this client.
            full.pin(&all)?;
            sys::pin(std::process::id(), &all)?;
        }
        let objects = (0..args.bookings).map(|i| layout.booking(i)).collect();
        let created = create_all(args, &full.client, "bookings", "Booking", objects).await?;
        record_creation(results, "webhook_bookings", &created);
        if pinning {
            // From here on the control planes share the client's CPUs and stay off the
            // servers' (they are idle while the load runs).
            sys::pin(std::process::id(), &args.client_cpus)?;
            full.pin(&args.client_cpus)?;
            empty.pin(&args.client_cpus)?;
        }
        for (name, mib) in full.rss_mib() {
            let name = name.replace('-', "_");
            results.insert(format!("{name}_rss_mib_10k_bookings"), round3(mib));
        }

        let wh_full =
            start_webhook(args, dir, "webhook-10k", full.kubeconfig_path(), &cert).await?;
        let wh_empty =
            start_webhook(args, dir, "webhook-0", empty.kubeconfig_path(), &cert).await?;
        let took = wait_indexed(&wh_full, args.bookings).await?;
        eprintln!(
            "webhook: {} bookings indexed from the API server's watch, {:.1}s after ready",
            args.bookings,
            took.as_secs_f64()
        );
        let echo_port = free_port()?;
        let mut echo = server_process(args, "tls-echo", &binary(args, "booking-bench-echo")?)
            .args(["--cert", &cert.cert_path.to_string_lossy()])
            .args(["--key", &cert.key_path.to_string_lossy()])
            .args(["--listen", &format!("127.0.0.1:{echo_port}")])
            .spawn(dir)?;
        let echo_addr = SocketAddr::from(([127, 0, 0, 1], echo_port));
        echo.wait_ready(&Readiness::Tcp(echo_addr), Duration::from_secs(20))
            .await?;

        // The shipped configurations, pointing at the 10k webhook: registered for the capture
        // of the load's review and for the create-latency figures.
        let configs = LocalWebhooks::from_manifest(
            &booking_harness::paths::repo_root()
                .join("manifests/webhook/webhook-configurations.yaml"),
            &format!("https://127.0.0.1:{}", wh_full.addr.port()),
            &ca.cert_pem(),
        )?;
        let body = capture_review(&full, &wh_full, &configs, &cert, &ca, &layout, dir).await?;
        let target = |addr| Target {
            addr,
            server_name: "localhost".to_owned(),
            path: "/validate".to_owned(),
            body: body.clone(),
            tls: tls.clone(),
        };
        let t_full = target(wh_full.addr);
        let t_empty = target(wh_empty.addr);
        let t_echo = target(echo_addr);
        check_index(&t_full, &layout, args.bookings > 0).await?;
        check_index(&t_empty, &layout, false).await?;
        results.insert("webhook_bookings_indexed".into(), args.bookings as f64);

        let seconds = Duration::from_secs(args.seconds);
        let warmup = Duration::from_secs(1).min(seconds);

        // (1) Peak throughput, webhook and echo alternating.
        let (mut wh, mut ec) = (Vec::new(), Vec::new());
        for round in 0..args.rounds {
            let w = load::peak(&t_full, args.connections, warmup, seconds).await?;
            let e = load::peak(&t_echo, args.connections, warmup, seconds).await?;
            eprintln!(
                "peak round {round}: webhook {:.0}/s ({} errors, p99 {:.2} ms), echo {:.0}/s ({} errors)",
                w.rps(),
                w.errors,
                w.latencies.quantile_ms(0.99).unwrap_or(f64::NAN),
                e.rps(),
                e.errors
            );
            ensure!(w.completed > 0 && e.completed > 0, "no request completed");
            wh.push(w.rps());
            ec.push(e.rps());
        }
        let (w, e) = (median(&wh).unwrap_or(0.0), median(&ec).unwrap_or(0.0));
        results.insert("webhook_rps_peak".into(), w.round());
        results.insert("tls_echo_rps_peak".into(), e.round());
        results.insert("webhook_rps_ratio_to_tls_echo".into(), round3(w / e));

        // (2) p99 at 200 rps, empty and full index alternating.
        let (mut s0, mut s10) = (
            booking_bench::stats::Samples::default(),
            booking_bench::stats::Samples::default(),
        );
        // The bare TLS server at the same rate: the machine's share of the latency (TLS round
        // trip, timers, waking an idle core), which no webhook can go below.
        let mut se = booking_bench::stats::Samples::default();
        for round in 0..args.rounds {
            let a = load::fixed_rate(&t_empty, 200, 4, seconds).await?;
            let b = load::fixed_rate(&t_full, 200, 4, seconds).await?;
            let e = load::fixed_rate(&t_echo, 200, 4, seconds).await?;
            eprintln!(
                "200 rps round {round}: p99 {:.3} ms (0 bookings, {} errors), {:.3} ms ({} bookings, {} errors), {:.3} ms (TLS echo)",
                a.latencies.quantile_ms(0.99).unwrap_or(f64::NAN),
                a.errors,
                b.latencies.quantile_ms(0.99).unwrap_or(f64::NAN),
                args.bookings,
                b.errors,
                e.latencies.quantile_ms(0.99).unwrap_or(f64::NAN),
            );
            s0.extend(&a.latencies);
            s10.extend(&b.latencies);
            se.extend(&e.latencies);
        }
        results.insert(
            "tls_echo_p99_ms_at_200rps".into(),
            round3(se.quantile_ms(0.99).context("no samples")?),
        );
        results.insert(
            "tls_echo_p50_ms_at_200rps".into(),
            round3(se.quantile_ms(0.5).unwrap_or(0.0)),
        );
        let p0 = s0.quantile_ms(0.99).context("no samples")?;
        let p10 = s10.quantile_ms(0.99).context("no samples")?;
        results.insert("webhook_p99_ms_at_200rps_0_bookings".into(), round3(p0));
        results.insert("webhook_p99_ms_at_200rps_10k_bookings".into(), round3(p10));
        results.insert("webhook_p99_ratio_10k_over_0".into(), round3(p10 / p0));
        results.insert(
            "webhook_p50_ms_at_200rps_0_bookings".into(),
            round3(s0.quantile_ms(0.5).unwrap_or(0.0)),
        );
        results.insert(
            "webhook_p50_ms_at_200rps_10k_bookings".into(),
            round3(s10.quantile_ms(0.5).unwrap_or(0.0)),
        );
        results.insert(
            "webhook_rss_mib_10k_bookings".into(),
            round3(sys::rss_mib(wh_full.process.pid())?),
        );
        results.insert(
            "webhook_rss_mib_0_bookings".into(),
            round3(sys::rss_mib(wh_empty.process.pid())?),
        );

        // (2b) What the webhook adds to a real create: bookings created one at a time through
        // the API server of the 10k webhook, with the shipped webhook configurations
        // registered (pointing at that webhook) and without them, alternating.
        let api = cluster::api(&full.client, "bookings", "Booking");
        let (mut with, mut without) = (Samples::default(), Samples::default());
        let mut next = args.bookings;
        let mut registered = false;
        let mut own = OwnTime::default();
        for round in 0..args.rounds {
            for setting in [round % 2 == 1, round % 2 == 0] {
                if setting != registered {
                    if setting {
                        configs.register(&full.client).await?;
                    } else {
                        configs.unregister(&full.client).await?;
                    }
                    registered = setting;
                    let took = wait_registration(&api, &wh_full, &layout, setting).await?;
                    eprintln!(
                        "create latency: webhook {} in effect after {:.2}s",
                        if setting { "registration" } else { "removal" },
                        took.as_secs_f64()
                    );
                }
                // Warm-up: connections to etcd and (when registered) to the webhook.
                sequential_creates(&api, &layout, next, 5).await?;
                next += 5;
                let before = OwnTime::read(&wh_full).await?;
                let s = sequential_creates(&api, &layout, next, args.create_samples).await?;
                next += args.create_samples;
                if setting {
                    own.add(&before, &OwnTime::read(&wh_full).await?);
                }
                eprintln!(
                    "create latency round {round}, webhook {}: p50 {:.3} ms, p99 {:.3} ms",
                    if setting {
                        "registered"
                    } else {
                        "not registered"
                    },
                    s.quantile_ms(0.5).unwrap_or(f64::NAN),
                    s.quantile_ms(0.99).unwrap_or(f64::NAN),
                );
                if setting {
                    with.extend(&s);
                } else {
                    without.extend(&s);
                }
            }
        }
        let q = |s: &Samples, q: f64| s.quantile_ms(q).context("no create latency samples");
        let (w50, w99, o50, o99) = (
            q(&with, 0.5)?,
            q(&with, 0.99)?,
            q(&without, 0.5)?,
            q(&without, 0.99)?,
        );
        results.insert("booking_create_p50_ms_with_webhook".into(), round3(w50));
        results.insert("booking_create_p99_ms_with_webhook".into(), round3(w99));
        results.insert("booking_create_p50_ms_without_webhook".into(), round3(o50));
        results.insert("booking_create_p99_ms_without_webhook".into(), round3(o99));
        results.insert("webhook_added_create_p50_ms".into(), round3(w50 - o50));
        results.insert("webhook_added_create_p99_ms".into(), round3(w99 - o99));

        // (2c) The same, paired: with the configurations registered, each create where the
        // webhook is called (the 10k namespace) is followed or preceded by one in a namespace
        // that opts out of it by the shipped namespaceSelector, so both settings share the
        // machine's and etcd's moments instead of taking turns in blocks.
        if !registered {
            configs.register(&full.client).await?;
            wait_registration(&api, &wh_full, &layout, true).await?;
            registered = true;
        }
        let paired =
            paired_creates(&full.client, &wh_full, &layout, next, args.paired_creates).await?;
        next += args.paired_creates + 5;
        // The same bookings again in the opted-out namespace: the webhook indexes them too.
        let opted_out_stored = args.paired_creates + 5;
        let (w50, w99, o50, o99) = (
            q(&paired.with, 0.5)?,
            q(&paired.with, 0.99)?,
            q(&paired.without, 0.5)?,
            q(&paired.without, 0.99)?,
        );
        eprintln!(
            "paired creates ({} pairs): with the webhook p50 {w50:.3} ms, p99 {w99:.3} ms; opted out p50 {o50:.3} ms, p99 {o99:.3} ms; added p99 by fifth of the run {:?}",
            paired.with.len(),
            paired.added_p99_by_part
        );
        results.insert(
            "booking_create_p50_ms_with_webhook_paired".into(),
            round3(w50),
        );
        results.insert(
            "booking_create_p99_ms_with_webhook_paired".into(),
            round3(w99),
        );
        results.insert("booking_create_p50_ms_opted_out_paired".into(), round3(o50));
        results.insert("booking_create_p99_ms_opted_out_paired".into(), round3(o99));
        results.insert(
            "webhook_added_p50_ms_real_create_10k".into(),
            round3(w50 - o50),
        );
        results.insert(
            "webhook_added_p99_ms_real_create_10k".into(),
            round3(w99 - o99),
        );
        let parts = &paired.added_p99_by_part;
        if let (Some(lo), Some(hi)) = (
            parts.iter().copied().reduce(f64::min),
            parts.iter().copied().reduce(f64::max),
        ) {
            results.insert(
                "webhook_added_p99_ms_real_create_10k_part_min".into(),
                round3(lo),
            );
            results.insert(
                "webhook_added_p99_ms_real_create_10k_part_max".into(),
                round3(hi),
            );
        }
        results.insert(
            "booking_create_paired_samples".into(),
            paired.with.len() as f64,
        );
        if registered {
            configs.unregister(&full.client).await?;
        }
        // The webhook's own share: its time per review (body read to answer encoded, its
        // admission_duration_seconds histogram) over the registered creates.
        for (endpoint, (seconds, count)) in [("mutate", own.mutate), ("validate", own.validate)] {
            if count > 0.0 {
                results.insert(
                    format!("webhook_own_ms_per_review_{endpoint}_real_create"),
                    round3(seconds * 1000.0 / count),
                );
            }
        }
        eprintln!(
            "create latency: the webhook's own time per review {:.3} ms (mutate, {} reviews), {:.3} ms (validate, {} reviews)",
            own.mutate.0 * 1000.0 / own.mutate.1.max(1.0),
            own.mutate.1,
            own.validate.0 * 1000.0 / own.validate.1.max(1.0),
            own.validate.1,
        );
        results.insert(
            "booking_create_latency_samples".into(),
            (with.len() + without.len()) as f64,
        );

        // (1b) The same peak load with every process allowed on both cores.
        if !args.server_cpus.is_empty() && !args.client_cpus.is_empty() {
            sys::pin(std::process::id(), &all)?;
            sys::pin(wh_full.process.pid(), &all)?;
            sys::pin(echo.pid(), &all)?;
            let (mut wh, mut ec) = (Vec::new(), Vec::new());
            for round in 0..args.rounds {
                let w = load::peak(&t_full, args.connections, warmup, seconds).await?;
                let e = load::peak(&t_echo, args.connections, warmup, seconds).await?;
                eprintln!(
                    "peak round {round}, shared cores: webhook {:.0}/s, echo {:.0}/s",
                    w.rps(),
                    e.rps()
                );
                wh.push(w.rps());
                ec.push(e.rps());
            }
            let (w, e) = (median(&wh).unwrap_or(0.0), median(&ec).unwrap_or(0.0));
            results.insert("webhook_rps_peak_shared_cores".into(), w.round());
            results.insert("tls_echo_rps_peak_shared_cores".into(), e.round());
            results.insert(
                "webhook_rps_ratio_to_tls_echo_shared_cores".into(),
                round3(w / e),
            );
            sys::pin(std::process::id(), &args.client_cpus)?;
        }
        drop(echo);
        drop(wh_empty);
        drop(empty);

        // (3) Memory with a large index: bookings created on the same API server until it
        // holds `--bookings-large`, then the RSS once the index holds them all.
        // The layout's bookings so far, those of the opted-out namespace and the captured probe.
        let stored = next + opted_out_stored + 1;
        if args.bookings_large > stored {
            let more = args.bookings_large - stored;
            if pinning {
                full.pin(&all)?;
                sys::pin(std::process::id(), &all)?;
            }
            let objects = (next..next + more).map(|i| layout.booking(i)).collect();
            let created = create_all(args, &full.client, "bookings", "Booking", objects).await?;
            record_creation(results, "webhook_bookings_large", &created);
            if pinning {
                sys::pin(std::process::id(), &args.client_cpus)?;
                full.pin(&args.client_cpus)?;
            }
            let took = wait_indexed(&wh_full, args.bookings_large).await?;
            eprintln!(
                "webhook: {} bookings indexed, {:.1}s after the creation",
                args.bookings_large,
                took.as_secs_f64()
            );
            let rss = sys::rss_mib(wh_full.process.pid())?;
            eprintln!(
                "webhook RSS with {} bookings: {rss:.1} MiB",
                args.bookings_large
            );
            results.insert("webhook_rss_mib_100k_bookings".into(), round3(rss));
            results.insert(
                "webhook_bookings_indexed_large".into(),
                args.bookings_large as f64,
            );
            for (name, mib) in full.rss_mib() {
                let name = name.replace('-', "_");
                results.insert(format!("{name}_rss_mib_100k_bookings"), round3(mib));
            }
        }
        drop(wh_full);
        drop(full);
        Ok(())
    }

    /// The webhook's own time on reviews (sum of seconds, count) per endpoint, from its
    /// `booking_webhook_admission_duration_seconds` histogram.
    #[derive(Debug, Default, Clone, Copy)]
    struct OwnTime {
        mutate: (f64, f64),
        validate: (f64, f64),
    }

    impl OwnTime {
        async fn read(webhook: &Webhook) -> anyhow::Result<Self> {
            let name = "booking_webhook_admission_duration_seconds";
            let one = |endpoint: &'static str| async move {
                let label = format!("endpoint=\"{endpoint}\"");
                anyhow::Ok((
                    metric(webhook, &format!("{name}_sum"), &[&label]).await?,
                    metric(webhook, &format!("{name}_count"), &[&label]).await?,
                ))
            };
            Ok(Self {
                mutate: one("mutate").await?,
                validate: one("validate").await?,
            })
        }

        fn add(&mut self, before: &Self, after: &Self) {
            self.mutate.0 += after.mutate.0 - before.mutate.0;
            self.mutate.1 += after.mutate.1 - before.mutate.1;
            self.validate.0 += after.validate.0 - before.validate.0;
            self.validate.1 += after.validate.1 - before.validate.1;
        }
    }

    /// The load's review, captured from the real API server: with the shipped configurations
    /// registered (pointing at the 10k webhook) and one more validating webhook pointing at a
    /// capture endpoint of the bench, the bench creates the booking of the free gap as `kubectl
    /// apply` does ([`Layout::free_booking`]); the review of `/validate` the API server sends
    /// for it — after the real mutating webhook filled its defaults — is the load, byte for
    /// byte (also written to `captured-validate-review.json` in the run's folder). Both
    /// registrations are removed before returning.
    async fn capture_review(
        full: &Cluster,
        webhook: &Webhook,
        configs: &LocalWebhooks,
        cert: &ServerCert,
        ca: &TestCa,
        layout: &Layout,
        dir: &TestDir,
    ) -> anyhow::Result<bytes::Bytes> {
        let server = CaptureServer::start(std::sync::Arc::new(cert.server_config()?)).await?;
        let mut capture = LocalWebhooks::from_manifest(
            &booking_harness::paths::repo_root()
                .join("manifests/webhook/webhook-configurations.yaml"),
            &format!("https://127.0.0.1:{}", server.addr.port()),
            &ca.cert_pem(),
        )?;
        capture.mutating.clear();
        for c in &mut capture.validating {
            c.metadata.name = Some("booking-bench-capture".to_owned());
            for w in c.webhooks.iter_mut().flatten() {
                w.name = format!("capture.{}", w.name);
            }
        }
        configs.register(&full.client).await?;
        capture.register(&full.client).await?;
        let api = cluster::api(&full.client, "bookings", "Booking");
        // In effect when a dry-run create reaches the capture endpoint and both webhooks.
        let t0 = std::time::Instant::now();
        let (probe, dry_run) = registration_probe(layout)?;
        loop {
            let before = booking_decisions(webhook).await?;
            api.create(&dry_run, &probe)
                .await
                .context("dry-run create of the registration probe")?;
            let after = booking_decisions(webhook).await?;
            if after.0 > before.0 && after.1 > before.1 && !server.recorded().is_empty() {
                break;
            }
            if t0.elapsed() > Duration::from_secs(60) {
                bail!("the capture webhook configuration did not take effect in 60 s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let object: DynamicObject = serde_json::from_value(layout.free_booking())?;
        let apply = PostParams {
            field_manager: Some(fixtures::KUBECTL_APPLY_MANAGER.to_owned()),
            ..PostParams::default()
        };
        api.create(&apply, &object)
            .await
            .context("creating the booking whose review is the load")?;
        let review = server
            .recorded()
            .into_iter()
            .find(|c| {
                let r = c.request();
                c.path == "/validate"
                    && r["name"] == "probe-free"
                    && r["operation"] == "CREATE"
                    && r["dryRun"] == false
            })
            .context(
                "the API server sent no review of the load's create to the capture endpoint",
            )?;
        capture.unregister(&full.client).await?;
        configs.unregister(&full.client).await?;
        wait_registration(&api, webhook, layout, false).await?;
        let path = dir.path().join("captured-validate-review.json");
        std::fs::write(&path, &review.body)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!(
            "load review: captured from the API server's /validate call for a real create ({} bytes, {})",
            review.body.len(),
            path.display()
        );
        Ok(review.body)
    }
}

mod controller {
    use std::time::{Instant, SystemTime};

    use booking_harness::{aws_query::Service, moto::MotoServer, proxy::FaultProxy};
    use chrono::{DateTime, Utc};

    use super::*;

    /// Seconds between the controller's full inventory refreshes during the benchmark.
    const INTERVAL_SECONDS: u64 = 5;

    fn resource(i: usize) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "manager.kotaico.de/v1",
            "kind": "Resource",
            "metadata": {"name": Layout::resource(i), "namespace": fixtures::NAMESPACE},
            "spec": {"type": "ec2", "tag": format!("group-{i}")},
        })
    }

    /// Sum of the controller's EC2 inventory refreshes so far (`_count` of the histogram).
    async fn refreshes(admin: u16) -> anyhow::Result<f64> {
        let text = http_get(admin, "/metrics").await?;
        Ok(text
            .lines()
            .filter(|l| {
                l.starts_with("booking_controller_inventory_refresh_seconds_count")
                    && l.contains("ec2")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum())
    }

    /// Records the controller's live heap and its allocator's resident pages (the
    /// `booking_controller_heap_*` gauges of its metrics) as `controller_heap_{allocated,resident}_mib_<label>`.
    /// The controller's live heap and the allocator's resident pages (its metrics), and how its
    /// resident set divides: anonymous pages (heap, stacks, the binary's relocated data) and
    /// file pages (the binary's code and read-only data), and its thread count.
    async fn record_heap(
        results: &mut Results,
        pid: u32,
        admin: u16,
        label: &str,
    ) -> anyhow::Result<()> {
        for (field, key) in [("RssAnon", "rss_anon_mib"), ("RssFile", "rss_file_mib")] {
            results.insert(
                format!("controller_{key}_{label}"),
                round3(sys::status_mib(pid, field)?),
            );
        }
        let threads = sys::status_field(pid, "Threads")?;
        results.insert(format!("controller_threads_{label}"), threads);
        let text = http_get(admin, "/metrics").await?;
        for (metric, key) in [
            ("booking_controller_heap_allocated_bytes", "allocated"),
            ("booking_controller_heap_resident_bytes", "resident"),
        ] {
            results.insert(
                format!("controller_heap_{key}_mib_{label}"),
                round3(metric_mib(&text, metric)?),
            );
        }
        Ok(())
    }

    /// Metric `metric` of the controller's metrics `text`, in MiB.
    fn metric_mib(text: &str, metric: &str) -> anyhow::Result<f64> {
        let value = text
            .lines()
            .find(|l| l.split(' ').next() == Some(metric))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .with_context(|| format!("no {metric} in the controller's metrics"))?;
        Ok(value / (1024.0 * 1024.0))
    }

    pub(super) async fn http_get(port: u16, path: &str) -> anyhow::Result<String> {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
        let mut out = String::new();
        s.read_to_string(&mut out).await?;
        Ok(out)
    }

    /// Seeds one running instance per group `from..to`, tagged for the group.
    async fn seed(moto: &MotoServer, from: usize, to: usize) -> anyhow::Result<Vec<String>> {
        let ec2 = moto.ec2();
        let mut stream = futures::stream::iter((from..to).map(|i| {
            let ec2 = ec2.clone();
            async move {
                let tag = format!("group-{i}");
                booking_harness::moto::seed_ec2_instances(
                    &ec2,
                    1,
                    &[
                        ("resource-booking/managed", "true"),
                        ("resource-booking/application", tag.as_str()),
                    ],
                )
                .await
                .map(|ids| (i, ids))
            }
        }))
        .buffer_unordered(8);
        let mut ids = vec![String::new(); to - from];
        while let Some(r) = stream.next().await {
            let (i, mut got) = r?;
            ids[i - from] = got.pop().unwrap_or_default();
        }
        Ok(ids)
    }

    /// Bookings of groups `groups` all starting at `start`, each `minutes` long.
    fn bookings_at(
        prefix: &str,
        groups: impl Iterator<Item = usize>,
        start: impl Fn(usize) -> DateTime<Utc>,
        minutes: i64,
    ) -> Vec<serde_json::Value> {
        groups
            .map(|g| {
                let s = start(g);
                fixtures::booking(
                    &format!("{prefix}-{g}"),
                    &Layout::resource(g),
                    s,
                    s + chrono::Duration::minutes(minutes),
                )
            })
            .collect()
    }

    /// Waits until every instance of `ids` has reached the proxy in a StartInstances request,
    /// or `deadline`; returns each instance's first StartInstances arrival.
    async fn wait_started(
        proxy: &FaultProxy,
        ids: &[String],
        deadline: Duration,
    ) -> BTreeMap<String, SystemTime> {
        let until = Instant::now() + deadline;
        loop {
            let mut first = BTreeMap::new();
            for r in proxy.requests() {
                if r.action.as_deref() == Some("StartInstances") && r.status < 300 {
                    for id in &r.resource_ids {
                        first.entry(id.clone()).or_insert(r.at);
                    }
                }
            }
            let done = ids.iter().all(|id| first.contains_key(id));
            if done || Instant::now() >= until {
                return first;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn latencies_ms(
        ids: &[String],
        starts: &[DateTime<Utc>],
        first: &BTreeMap<String, SystemTime>,
    ) -> (Vec<u64>, usize) {
        let mut micros = Vec::new();
        let mut missing = 0;
        for (id, start) in ids.iter().zip(starts) {
            match first.get(id) {
                Some(at) => {
                    let at: DateTime<Utc> = (*at).into();
                    let d = (at - *start).num_microseconds().unwrap_or(0);
                    micros.push(u64::try_from(d.max(0)).unwrap_or(0));
                }
                None => missing += 1,
            }
        }
        (micros, missing)
    }

    /// Whole second at least `ahead` from now.
    pub(super) fn next_second(ahead: Duration) -> DateTime<Utc> {
        let t = Utc::now() + chrono::Duration::from_std(ahead).unwrap_or_default();
        let secs = t.timestamp() + 1;
        DateTime::from_timestamp(secs, 0).unwrap_or(t)
    }

    pub async fn run(args: &Args, dir: &TestDir, results: &mut Results) -> anyhow::Result<()> {
        // No load generator here: every process may use both cores.
        if !args.client_cpus.is_empty() {
            sys::pin(std::process::id(), "0-1")?;
        }
        let sizes: Vec<usize> = if args.smoke {
            vec![2, 5]
        } else {
            args.resource_counts.clone()
        };
        let simultaneous = if args.smoke { 5 } else { 1000 };
        let staggered = if args.smoke { 3 } else { 24 };
        let rss_bookings = if args.smoke { 20 } else { 10_000 };
        let window = Duration::from_secs(if args.smoke { 5 } else { 3 * INTERVAL_SECONDS });

        let moto = MotoServer::start(dir).await?;
        let proxy = FaultProxy::start(&moto.endpoint_url()).await?;
        let mut server = start_clusters(args, &["controller"])
            .await?
            .pop()
            .context("a control plane")?;
        if !args.client_cpus.is_empty() {
            // `start_clusters` pinned this process back to the client's CPUs.
            sys::pin(std::process::id(), &sys::all_cpus())?;
        }
        let client = server.client.clone();
        let admin = free_port()?;
        let bin = binary(args, "booking-controller")?;
        let mut builder = ProcessBuilder::new("controller", &bin);
        for (k, v) in proxy.env() {
            builder = builder.env(k, v);
        }
        let mut controller = builder
            .env("KUBECONFIG", server.kubeconfig_path())
            .env("NAMESPACE", fixtures::NAMESPACE)
            .env("ADMIN_ADDRESS", format!("127.0.0.1:{admin}"))
            .env("INVENTORY_INTERVAL_SECONDS", INTERVAL_SECONDS.to_string())
            .env("LEADER_ELECT", "false")
            .env("RUST_LOG", "info")
            .spawn(dir)?;
        controller
            .wait_ready(
                &Readiness::Http(format!("http://127.0.0.1:{admin}/readyz")),
                Duration::from_secs(60),
            )
            .await?;
        let pid = controller.pid();

        // (3) DescribeInstances calls per full refresh, at 10, 100, 1000 Resources.
        moto.start_recording().await?;
        let mut instance_ids = Vec::new();
        let mut have = 0;
        for &n in &sizes {
            let t0 = Instant::now();
            instance_ids.extend(seed(&moto, have, n).await?);
            create_all(
                args,
                &client,
                "resources",
                "Resource",
                (have..n).map(resource).collect(),
            )
            .await?;
            have = n;
            eprintln!(
                "controller: {n} Resources and instances in {:.1}s",
                t0.elapsed().as_secs_f64()
            );
            // Let the new Resources settle (targeted refreshes, first reconciles, stops).
            tokio::time::sleep(Duration::from_secs(2 * INTERVAL_SECONDS)).await;
            moto.clear_recording().await?;
            let r0 = refreshes(admin).await?;
            tokio::time::sleep(window).await;
            let calls = moto.action_counts().await?;
            let r1 = refreshes(admin).await?;
            let describes = calls.get(Service::Ec2, "DescribeInstances");
            let refreshed = r1 - r0;
            eprintln!(
                "controller: {n} Resources: {describes} DescribeInstances over {refreshed} refreshes in {}s; all calls {:?}",
                window.as_secs(),
                calls.iter().collect::<Vec<_>>()
            );
            if refreshed > 0.0 {
                results.insert(
                    format!("ec2_describe_calls_per_refresh_{n}_resources"),
                    round3(describes as f64 / refreshed),
                );
            }
            results.insert(
                format!("ec2_describe_calls_per_minute_{n}_resources"),
                round3(describes as f64 * 60.0 / window.as_secs_f64()),
            );
        }
        results.insert(
            "controller_rss_mib_0_bookings".into(),
            round3(sys::rss_mib(pid)?),
        );
        record_heap(results, pid, admin, "0_bookings").await?;

        // (4) Start latency over staggered bookings, one second apart, on groups of their own
        // (so that the simultaneous bookings below start on groups never booked before).
        instance_ids.extend(seed(&moto, have, have + staggered).await?);
        create_all(
            args,
            &client,
            "resources",
            "Resource",
            (have..have + staggered).map(resource).collect(),
        )
        .await?;
        tokio::time::sleep(Duration::from_secs(INTERVAL_SECONDS)).await;
        let first_start = next_second(Duration::from_secs(8));
        let starts: Vec<DateTime<Utc>> = (0..staggered)
            .map(|k| first_start + chrono::Duration::seconds(i64::try_from(k).unwrap_or(0)))
            .collect();
        proxy.clear_requests();
        create_all(
            args,
            &client,
            "bookings",
            "Booking",
            bookings_at("staggered", have..have + staggered, |g| starts[g - have], 5),
        )
        .await?;
        let ids = &instance_ids[have..have + staggered];
        let first = wait_started(&proxy, ids, Duration::from_secs(staggered as u64 + 60)).await;
        let (micros, missing) = latencies_ms(ids, &starts, &first);
        eprintln!("controller: staggered start latencies (us) {micros:?}, {missing} never started");
        if missing == 0 {
            results.insert(
                "start_latency_p50_ms".into(),
                round3(booking_bench::stats::quantile_ms(&micros, 0.5).unwrap_or(0.0)),
            );
            results.insert(
                "start_latency_p99_ms".into(),
                round3(booking_bench::stats::quantile_ms(&micros, 0.99).unwrap_or(0.0)),
            );
            results.insert("start_latency_bookings".into(), micros.len() as f64);
        }

        // (4b) Bookings of `n` groups all starting in the same second.
        let n = simultaneous.min(have);
        let at = next_second(Duration::from_secs(if args.smoke { 5 } else { 20 }));
        proxy.clear_requests();
        let t0 = Instant::now();
        create_all(
            args,
            &client,
            "bookings",
            "Booking",
            bookings_at("together", 0..n, |_| at, 5),
        )
        .await?;
        eprintln!(
            "controller: {n} simultaneous bookings created in {:.1}s, start at {at}",
            t0.elapsed().as_secs_f64()
        );
        let ids = &instance_ids[..n];
        let first = wait_started(
            &proxy,
            ids,
            Duration::from_secs(u64::try_from((at - Utc::now()).num_seconds()).unwrap_or(0) + 60),
        )
        .await;
        let (micros, missing) = latencies_ms(ids, &vec![at; n], &first);
        let starts_calls = proxy.count("StartInstances");
        // Each call's arrival after `at` (ms), its number of IDs, how long its answer took (ms)
        // and the answer's HTTP status.
        let calls: Vec<(i64, usize, u128, u16)> = proxy
            .requests()
            .iter()
            .filter(|r| r.action.as_deref() == Some("StartInstances"))
            .map(|r| {
                let arrived: DateTime<Utc> = r.at.into();
                (
                    (arrived - at).num_milliseconds(),
                    r.resource_ids.len(),
                    r.duration.as_millis(),
                    r.status,
                )
            })
            .collect();
        eprintln!(
            "controller: {n} simultaneous: p50 {:?} p99 {:?} max {:?} ms, {missing} never started, {starts_calls} StartInstances calls (ms after start_at, IDs, ms to answer, status): {calls:?}",
            booking_bench::stats::quantile_ms(&micros, 0.5),
            booking_bench::stats::quantile_ms(&micros, 0.99),
            booking_bench::stats::quantile_ms(&micros, 1.0)
        );
        results.insert(
            format!("start_not_started_in_time_{n}_bookings"),
            missing as f64,
        );
        if missing == 0 {
            results.insert(
                format!("start_latency_p50_ms_{n}_bookings"),
                round3(booking_bench::stats::quantile_ms(&micros, 0.5).unwrap_or(0.0)),
            );
            let key = format!("start_latency_p99_ms_{n}_bookings");
            results.insert(
                key,
                round3(booking_bench::stats::quantile_ms(&micros, 0.99).unwrap_or(0.0)),
            );
            results.insert(
                format!("start_instances_calls_{n}_bookings"),
                starts_calls as f64,
            );
        }
        if args.skip_controller_memory {
            return Ok(());
        }

        // (5) Memory with many bookings, and the peak of a relist.
        let layout = Layout::new(Utc::now() + chrono::Duration::days(30), have);
        let cpu0 = sys::cpu_seconds(pid)?;
        let created = create_all(
            args,
            &client,
            "bookings",
            "Booking",
            (0..rss_bookings)
                .map(|i| {
                    let mut b = fixtures::requested_by(layout.booking(i), "bench-user");
                    b["metadata"]["name"] = serde_json::json!(format!("future-{i:05}"));
                    b
                })
                .collect(),
        )
        .await?;
        record_creation(results, "controller_bookings", &created);
        for (name, mib) in server.rss_mib() {
            let name = name.replace('-', "_");
            results.insert(
                format!("controller_section_{name}_rss_mib_10k_bookings"),
                round3(mib),
            );
        }
        // Busy RSS: right after the creation, while the new bookings are being reconciled.
        results.insert(
            "controller_rss_mib_10k_bookings_busy".into(),
            round3(sys::rss_mib(pid)?),
        );
        // Steady state: once every new booking has been reconciled (the controller uses less
        // than 5 % of a core over 2 s), the cache and what it keeps alive.
        let settled = sys::wait_idle(
            pid,
            0.05,
            Duration::from_secs(2),
            Duration::from_secs(if args.smoke { 20 } else { 300 }),
        )
        .await?;
        match settled {
            Some(took) => {
                eprintln!(
                    "controller: idle {:.1}s after the creation",
                    took.as_secs_f64()
                );
                results.insert(
                    "controller_settle_seconds_10k_bookings".into(),
                    round3(took.as_secs_f64()),
                );
            }
            None => eprintln!("controller: still busy when the RSS was read"),
        }
        let rss = sys::rss_mib(pid)?;
        results.insert("controller_rss_mib_10k_bookings".into(), round3(rss));
        // Its connections to the API server then: the watches, and what the pool kept of the
        // bursts of writes.
        let connections = sys::connections_to(pid, server.plane.port())?;
        eprintln!("controller: {connections} connections to the API server when idle");
        results.insert(
            "controller_api_connections_idle_10k".into(),
            connections as f64,
        );
        record_heap(results, pid, admin, "10k_bookings").await?;
        // CPU the controller spent on the creation and reconciles of the 10,000 bookings.
        results.insert(
            "controller_cpu_seconds_10k_bookings".into(),
            round3(sys::cpu_seconds(pid)? - cpu0),
        );
        // Force every watch to relist: compact etcd (every resourceVersion the controller
        // holds is gone) and restart kube-apiserver (every watch is cut, and the new watch
        // cache starts at etcd's current revision), sampling the RSS meanwhile and for 15 s
        // after the API server is ready again, while the controller lists everything anew.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sampler = {
            let stop = stop.clone();
            // The RSS every 20 ms, the live heap and jemalloc's resident pages every 100 ms:
            // whether a peak is data the controller holds or pages its allocator keeps.
            tokio::spawn(async move {
                let (mut peak, mut allocated, mut resident) = (rss, 0f64, 0f64);
                let mut turn = 0u32;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    if let Ok(now) = sys::rss_mib(pid) {
                        peak = peak.max(now);
                    }
                    if turn.is_multiple_of(5)
                        && let Ok(text) = http_get(admin, "/metrics").await
                    {
                        let heap = |m| metric_mib(&text, m).unwrap_or(0.0);
                        allocated = allocated.max(heap("booking_controller_heap_allocated_bytes"));
                        resident = resident.max(heap("booking_controller_heap_resident_bytes"));
                    }
                    turn = turn.wrapping_add(1);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                (peak, allocated, resident)
            })
        };
        let cpu1 = sys::cpu_seconds(pid)?;
        let t0 = Instant::now();
        server.plane.compact_etcd().await?;
        server.plane.restart_apiserver().await?;
        let restart = t0.elapsed();
        eprintln!(
            "controller: etcd compacted and kube-apiserver restarted in {:.1}s",
            restart.as_secs_f64()
        );
        results.insert(
            "kube_apiserver_restart_seconds".into(),
            round3(restart.as_secs_f64()),
        );
        tokio::time::sleep(Duration::from_secs(15)).await;
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let (peak, allocated, resident) = sampler.await?;
        results.insert("controller_rss_mib_relist_peak".into(), round3(peak));
        results.insert(
            "controller_heap_allocated_mib_relist_peak".into(),
            round3(allocated),
        );
        results.insert(
            "controller_heap_resident_mib_relist_peak".into(),
            round3(resident),
        );
        results.insert(
            "controller_cpu_seconds_relist".into(),
            round3(sys::cpu_seconds(pid)? - cpu1),
        );
        results.insert(
            "controller_relist_peak_over_idle_10k".into(),
            round3(peak / rss),
        );

        // (6) Growing to `--controller-bookings` (100,000): memory, and whether reconciles of
        // unrelated bookings slowed down (the staggered start latency again, on the same groups,
        // with every other booking stored).
        let total = if args.smoke {
            0
        } else {
            args.controller_bookings
        };
        if total > rss_bookings {
            let label = format!("{}k_bookings", total / 1000);
            let cpu0 = sys::cpu_seconds(pid)?;
            let created = create_all(
                args,
                &client,
                "bookings",
                "Booking",
                (rss_bookings..total)
                    .map(|i| {
                        let mut b = fixtures::requested_by(layout.booking(i), "bench-user");
                        b["metadata"]["name"] = serde_json::json!(format!("future-{i:06}"));
                        b
                    })
                    .collect(),
            )
            .await?;
            record_creation(results, &format!("controller_bookings_{label}"), &created);
            results.insert(
                format!("controller_rss_mib_{label}_busy"),
                round3(sys::rss_mib(pid)?),
            );
            let settled =
                sys::wait_idle(pid, 0.05, Duration::from_secs(2), Duration::from_secs(900)).await?;
            if let Some(took) = settled {
                results.insert(
                    format!("controller_settle_seconds_{label}"),
                    round3(took.as_secs_f64()),
                );
            } else {
                eprintln!("controller: still busy with {total} bookings when the RSS was read");
            }
            results.insert(
                format!("controller_rss_mib_{label}"),
                round3(sys::rss_mib(pid)?),
            );
            results.insert(
                format!("controller_cpu_seconds_{label}"),
                round3(sys::cpu_seconds(pid)? - cpu0),
            );
            record_heap(results, pid, admin, &label).await?;
            for (name, mib) in server.rss_mib() {
                let name = name.replace('-', "_");
                results.insert(
                    format!("controller_section_{name}_rss_mib_{label}"),
                    round3(mib),
                );
            }
            // The staggered groups booked again, one second apart, among all those bookings.
            let first_start = next_second(Duration::from_secs(8));
            let starts: Vec<DateTime<Utc>> = (0..staggered)
                .map(|k| first_start + chrono::Duration::seconds(i64::try_from(k).unwrap_or(0)))
                .collect();
            let groups = have..have + staggered;
            proxy.clear_requests();
            create_all(
                args,
                &client,
                "bookings",
                "Booking",
                bookings_at("again", groups.clone(), |g| starts[g - have], 5),
            )
            .await?;
            let ids = &instance_ids[groups];
            let first =
                wait_started(&proxy, ids, Duration::from_secs(staggered as u64 + 120)).await;
            let (micros, missing) = latencies_ms(ids, &starts, &first);
            eprintln!(
                "controller: staggered start latencies with {total} bookings (us) {micros:?}, {missing} never started"
            );
            results.insert(format!("start_not_started_in_time_{label}"), missing as f64);
            if missing == 0 {
                results.insert(
                    format!("start_latency_p50_ms_{label}"),
                    round3(booking_bench::stats::quantile_ms(&micros, 0.5).unwrap_or(0.0)),
                );
                results.insert(
                    format!("start_latency_p99_ms_{label}"),
                    round3(booking_bench::stats::quantile_ms(&micros, 0.99).unwrap_or(0.0)),
                );
            }
        }
        results.insert(
            "controller_rss_mib_lifetime_peak".into(),
            round3(sys::rss_peak_mib(pid)?),
        );
        drop(controller);
        drop(server);
        drop(proxy);
        drop(moto);
        Ok(())
    }
}

/// The kill campaign of `booking_tests::campaign`, longer than the suite's: the release
/// controller killed (SIGKILL, SIGTERM) at random moments while bookings start and end, the
/// API server restarted after an etcd compaction, first with one replica, then with two (the
/// leader killed). The seed is printed (`CAMPAIGN_SEED` replays it); any broken invariant fails
/// the section and is listed.
mod restarts {
    use super::*;
    use booking_tests::campaign::{self, Options};

    pub async fn run(args: &Args, results: &mut Results) -> anyhow::Result<()> {
        let controller = binary(args, "booking-controller")?;
        let window = Duration::from_secs(if args.smoke {
            40
        } else {
            args.campaign_seconds
        });
        let mut broken = Vec::new();
        for (replicas, key) in [(1, "one_replica"), (2, "two_replicas")] {
            let mut options = Options::new(&format!("bench-campaign-{replicas}"), window, replicas);
            options.groups = 12;
            options.apiserver_restarts = 2;
            options.controller = Some(controller.clone());
            let report = campaign::run(&options).await;
            eprintln!("booking-bench: restarts, {replicas} replica(s): {report}");
            let mut put = |name: &str, v: f64| {
                results.insert(format!("restarts_{key}_{name}"), v);
            };
            put("seed", report.seed as f64);
            put("transitions", report.transitions as f64);
            put("bookings", report.bookings as f64);
            put("sigkills", report.sigkills as f64);
            put("sigterms", report.sigterms as f64);
            put("controller_restarts", report.controller_restarts as f64);
            put("exits_on_lost_lease", report.self_exits as f64);
            put("apiserver_restarts", report.apiserver_restarts as f64);
            put("watch_relists_after_410", report.gone_relists as f64);
            put("aws_writes", report.writes as f64);
            put("mails", report.mails as f64);
            put(
                "longest_converge_seconds",
                round3(report.longest_converge.as_secs_f64()),
            );
            put("violations", report.violations.len() as f64);
            broken.extend(
                report
                    .violations
                    .iter()
                    .map(|v| format!("{replicas} replica(s), seed {}: {v}", report.seed)),
            );
        }
        ensure!(
            broken.is_empty(),
            "invariants broken:\n{}",
            broken.join("\n")
        );
        Ok(())
    }
}
