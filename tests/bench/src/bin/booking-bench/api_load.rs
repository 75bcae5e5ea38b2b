//! Section `api-load`: the Kubernetes API requests the controller makes, counted by the API
//! server (its audit log, filtered to the controller's own ServiceAccount), over one booking's
//! whole life (create, start, reminder, finish) and per idle minute with 10,000 bookings stored.

use std::time::{Duration, Instant};

use booking_bench::audit::{self, Counts};
use booking_harness::{
    moto::MotoServer,
    proxy::FaultProxy,
    smtp::{SmtpOptions, SmtpServer},
};
use chrono::Utc;

use super::controller::next_second;

use super::*;

/// Seconds between the controller's full inventory refreshes in these sections, as in the
/// controller section.
pub(super) const INTERVAL_SECONDS: u64 = 5;

/// Groups the stored bookings are spread over (each a Resource with one stopped instance).
pub(super) const GROUPS: usize = 100;

/// The verbs reported one by one (every one of them, zero included).
const VERBS: [&str; 8] = [
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

/// A private control plane whose API server audits the controller's requests, with the
/// controller's shipped identity: the control plane, its audit log and the controller's
/// kubeconfig.
pub(super) async fn start_cluster(
    args: &Args,
    dir: &TestDir,
    label: &str,
) -> anyhow::Result<(Cluster, PathBuf, PathBuf)> {
    let (flags, log) = audit::apiserver_args(&dir.subdir(format!("{label}-audit"))?)?;
    let cluster = start_clusters_with(args, vec![(label, flags)])
        .await?
        .pop()
        .context("a control plane")?;
    // No load generator in these sections: every process may use both cores.
    if !args.client_cpus.is_empty() {
        sys::pin(std::process::id(), &sys::all_cpus())?;
    }
    eprintln!(
        "control plane {label}: auditing {}",
        audit::controller_user()
    );
    let kubeconfig = dir.join(format!("{label}-controller.kubeconfig"));
    audit::controller_kubeconfig(
        &cluster.client,
        &cluster.plane.url(),
        cluster.plane.ca_pem(),
        &kubeconfig,
    )
    .await?;
    Ok((cluster, log, kubeconfig))
}

/// A Resource of group `tag`.
pub(super) fn resource(name: &str, tag: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "manager.kotaico.de/v1",
        "kind": "Resource",
        "metadata": {"name": name, "namespace": fixtures::NAMESPACE},
        "spec": {"type": "ec2", "tag": tag},
    })
}

/// One stopped managed instance tagged for group `tag`; its ID.
pub(super) async fn stopped_instance(
    ec2: &aws_sdk_ec2::Client,
    tag: &str,
) -> anyhow::Result<String> {
    let id = booking_harness::moto::seed_ec2_instances(
        ec2,
        1,
        &[
            ("resource-booking/managed", "true"),
            ("resource-booking/application", tag),
        ],
    )
    .await?
    .pop()
    .context("an instance")?;
    ec2.stop_instances()
        .instance_ids(&id)
        .send()
        .await
        .with_context(|| format!("stopping {id}"))?;
    Ok(id)
}

/// The state name of instance `id` in moto.
pub(super) async fn instance_state(ec2: &aws_sdk_ec2::Client, id: &str) -> anyhow::Result<String> {
    let out = ec2.describe_instances().instance_ids(id).send().await?;
    Ok(out
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .find_map(|i| i.state()?.name().map(|n| n.as_str().to_owned()))
        .unwrap_or_default())
}

/// The stored groups (`GROUPS` Resources `ec2.group-<g>`, one stopped instance each) and the
/// layout of `count` far-future bookings over them.
pub(super) async fn store_groups(
    args: &Args,
    client: &kube::Client,
    moto: &MotoServer,
) -> anyhow::Result<()> {
    let ec2 = moto.ec2();
    let mut seeded = futures::stream::iter((0..GROUPS).map(|g| {
        let ec2 = ec2.clone();
        async move { stopped_instance(&ec2, &format!("group-{g}")).await }
    }))
    .buffer_unordered(8);
    while let Some(r) = seeded.next().await {
        r?;
    }
    create_all(
        args,
        client,
        "resources",
        "Resource",
        (0..GROUPS)
            .map(|g| resource(&Layout::resource(g), &format!("group-{g}")))
            .collect(),
    )
    .await?;
    Ok(())
}

/// Creates `count` never-due bookings ([`future_bookings`]) and records their creation's cost
/// under `key`.
pub(super) async fn store_future_bookings(
    args: &Args,
    client: &kube::Client,
    results: &mut Results,
    key: &str,
    count: usize,
) -> anyhow::Result<()> {
    let created = create_all(args, client, "bookings", "Booking", future_bookings(count)).await?;
    record_creation(results, key, &created);
    Ok(())
}

/// What both sections start from: a private control plane auditing the controller (its log and
/// the controller's kubeconfig), moto behind a recording proxy, the stored groups, and one more
/// Resource `ec2.<group>` with one stopped instance (its ID).
pub(super) struct World {
    pub cluster: Cluster,
    pub log: PathBuf,
    pub kubeconfig: PathBuf,
    pub moto: MotoServer,
    pub proxy: FaultProxy,
    pub instance: String,
}

/// Starts the [`World`] of section `label`, with the extra group `group`.
pub(super) async fn world(
    args: &Args,
    dir: &TestDir,
    label: &str,
    group: &str,
) -> anyhow::Result<World> {
    let (cluster, log, kubeconfig) = start_cluster(args, dir, label).await?;
    let moto = MotoServer::start(dir).await?;
    let proxy = FaultProxy::start(&moto.endpoint_url()).await?;
    let instance = stopped_instance(&moto.ec2(), group).await?;
    store_groups(args, &cluster.client, &moto).await?;
    create_all(
        args,
        &cluster.client,
        "resources",
        "Resource",
        vec![resource(&format!("ec2.{group}"), group)],
    )
    .await?;
    Ok(World {
        cluster,
        log,
        kubeconfig,
        moto,
        proxy,
        instance,
    })
}

/// `count` bookings of the layout over the stored groups, 30 days ahead (never due).
pub(super) fn future_bookings(count: usize) -> Vec<serde_json::Value> {
    let layout = Layout::new(Utc::now() + chrono::Duration::days(30), GROUPS);
    (0..count).map(|i| layout.booking(i)).collect()
}

/// The controller as a process: the release binary, as the shipped ServiceAccount, AWS through
/// `proxy`, leader election off.
pub(super) fn controller_process(
    args: &Args,
    kubeconfig: &Path,
    proxy: &FaultProxy,
    admin: u16,
    extra: &[(&str, String)],
) -> anyhow::Result<ProcessBuilder> {
    let mut builder = ProcessBuilder::new("controller", binary(args, "booking-controller")?);
    for (k, v) in proxy.env() {
        builder = builder.env(k, v);
    }
    for (k, v) in extra {
        builder = builder.env(k, v);
    }
    Ok(builder
        .env("KUBECONFIG", kubeconfig)
        .env("NAMESPACE", fixtures::NAMESPACE)
        .env("ADMIN_ADDRESS", format!("127.0.0.1:{admin}"))
        .env("INVENTORY_INTERVAL_SECONDS", INTERVAL_SECONDS.to_string())
        .env("LEADER_ELECT", "false")
        .env("RUST_LOG", "info"))
}

/// Waits until `check` holds, polling every 200 ms, for at most `limit`.
async fn until<F, Fut>(what: &str, limit: Duration, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let t0 = Instant::now();
    while !check().await? {
        if t0.elapsed() > limit {
            bail!("{what}: not within {}s", limit.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Records `counts` under `key` (the total) and `key_<verb>` for each verb, and logs them.
fn record(results: &mut Results, key: &str, counts: &Counts, scale: f64) {
    results.insert(key.into(), round3(counts.total as f64 * scale));
    for verb in VERBS
        .iter()
        .copied()
        .chain(counts.by_verb.keys().map(String::as_str))
    {
        results.insert(
            format!("{key}_{verb}"),
            round3(counts.verb(verb) as f64 * scale),
        );
    }
    eprintln!(
        "api-load: {key}: {} requests ({} without watches); by verb and resource {:?}",
        counts.total,
        counts.without_watches(),
        counts.by_verb_resource
    );
}

/// The status phase of booking `name` (`SCHEDULED`, `IN PROGRESS`, `FINISHED`), if any.
async fn phase(client: &kube::Client, name: &str) -> anyhow::Result<Option<String>> {
    let b = cluster::api(client, "bookings", "Booking")
        .get(name)
        .await?;
    Ok(b.data["status"]["status"].as_str().map(str::to_owned))
}

/// Logs the Events of the bench namespace (what the lifecycle's Event writes were), with
/// their counts.
async fn log_events(client: &kube::Client) -> anyhow::Result<()> {
    let events: kube::Api<k8s_openapi::api::events::v1::Event> =
        kube::Api::namespaced(client.clone(), fixtures::NAMESPACE);
    for e in events.list(&Default::default()).await?.items {
        let regarding = e.regarding.as_ref();
        eprintln!(
            "api-load: event {} of {} {}: {} {} (series count {:?}, deprecated count {:?}): {}",
            e.metadata.name.as_deref().unwrap_or("-"),
            regarding.and_then(|r| r.kind.as_deref()).unwrap_or("-"),
            regarding.and_then(|r| r.name.as_deref()).unwrap_or("-"),
            e.reason.as_deref().unwrap_or("-"),
            e.action.as_deref().unwrap_or("-"),
            e.series.as_ref().map(|s| s.count),
            e.deprecated_count,
            e.note.as_deref().unwrap_or("-"),
        );
    }
    Ok(())
}

pub async fn run(args: &Args, dir: &TestDir, results: &mut Results) -> anyhow::Result<()> {
    // No load generator here: every process may use both cores.
    if !args.client_cpus.is_empty() {
        sys::pin(std::process::id(), &sys::all_cpus())?;
    }
    let stored = if args.smoke { 20 } else { 10_000 };
    let idle_window = Duration::from_secs(if args.smoke { 5 } else { 60 });
    // The booking's slot, with its reminder one minute (the smallest lead) before the end:
    // under --smoke the reminder falls due 4 s after the start.
    let slot = Duration::from_secs(if args.smoke { 64 } else { 150 });
    let lead = 1;

    let World {
        cluster,
        log,
        kubeconfig,
        moto,
        proxy,
        instance: life,
    } = world(args, dir, "api-load", "life").await?;
    let client = cluster.client.clone();
    let smtp = SmtpServer::start(dir, SmtpOptions::default()).await?;
    let ec2 = moto.ec2();

    let admin = free_port()?;
    let smtp_env = [
        ("SMTP_HOST", "127.0.0.1".to_owned()),
        ("SMTP_PORT", smtp.port().to_string()),
        ("SMTP_SENDER", "booking@example.com".to_owned()),
        ("SMTP_SECURITY", "none".to_owned()),
    ];
    let mut controller =
        controller_process(args, &kubeconfig, &proxy, admin, &smtp_env)?.spawn(dir)?;
    controller
        .wait_ready(
            &Readiness::Http(format!("http://127.0.0.1:{admin}/readyz")),
            Duration::from_secs(60),
        )
        .await?;
    let pid = controller.pid();
    // The first reconciles of every Resource (their status), then quiet.
    sys::wait_idle(pid, 0.05, Duration::from_secs(2), Duration::from_secs(60)).await?;
    tokio::time::sleep(Duration::from_secs(INTERVAL_SECONDS)).await;

    // (a) One booking's life: created, started, reminded, finished (its instance stopped).
    let start = next_second(Duration::from_secs(if args.smoke { 3 } else { 10 }));
    let end = start + chrono::Duration::from_std(slot)?;
    let mut booking = fixtures::booking("life", "ec2.life", start, end);
    booking["spec"]["notifications"] = serde_json::json!([{
        "type": "email", "recipient": "ann@example.com", "leadMinutes": lead,
    }]);
    let t0 = Utc::now();
    create_all(args, &client, "bookings", "Booking", vec![booking]).await?;
    let limit = slot + Duration::from_secs(120);
    until("the booking's instance running", limit, || async {
        anyhow::Ok(instance_state(&ec2, &life).await? == "running")
    })
    .await?;
    until("the reminder mail", limit, || async {
        anyhow::Ok(!smtp.messages()?.is_empty())
    })
    .await?;
    until("the booking FINISHED", limit, || async {
        anyhow::Ok(phase(&client, "life").await?.as_deref() == Some("FINISHED"))
    })
    .await?;
    until("the booking's instance stopped", limit, || async {
        anyhow::Ok(instance_state(&ec2, &life).await? == "stopped")
    })
    .await?;
    // What follows the stop (the Resource's status once the inventory sees it stopped).
    tokio::time::sleep(Duration::from_secs(2 * INTERVAL_SECONDS)).await;
    let t1 = Utc::now();
    let all = audit::read(&log)?;
    let lifecycle = Counts::between(&all, t0, t1);
    for r in all.iter().filter(|r| r.received >= t0 && r.received < t1) {
        eprintln!(
            "api-load: lifecycle +{:.3}s {} {} {} -> {}",
            (r.received - t0).num_milliseconds() as f64 / 1000.0,
            r.verb,
            r.resource,
            r.name.as_deref().unwrap_or("-"),
            r.code
        );
    }
    log_events(&client).await?;
    record(
        results,
        "controller_api_requests_per_booking_lifecycle",
        &lifecycle,
        1.0,
    );
    let status_writes = |c: &Counts, resource: &str| {
        ["patch", "update"]
            .iter()
            .map(|v| {
                c.by_verb_resource
                    .get(&format!("{v} {resource}"))
                    .copied()
                    .unwrap_or(0)
            })
            .sum::<usize>() as f64
    };
    results.insert(
        "controller_api_requests_per_booking_lifecycle_booking_status_writes".into(),
        status_writes(&lifecycle, "bookings/status"),
    );
    results.insert(
        "controller_api_requests_per_booking_lifecycle_resource_status_writes".into(),
        status_writes(&lifecycle, "resources/status"),
    );
    results.insert(
        "controller_api_requests_per_booking_lifecycle_events".into(),
        lifecycle
            .by_verb_resource
            .iter()
            .filter(|(k, _)| k.ends_with(" events"))
            .map(|(_, n)| *n)
            .sum::<usize>() as f64,
    );
    results.insert(
        "controller_api_requests_lifecycle_seconds".into(),
        round3((t1 - t0).num_milliseconds() as f64 / 1000.0),
    );

    // (b) Idle, with 10,000 bookings stored.
    store_future_bookings(args, &client, results, "api_load_bookings", stored).await?;
    let settled = sys::wait_idle(
        pid,
        0.05,
        Duration::from_secs(2),
        Duration::from_secs(if args.smoke { 20 } else { 300 }),
    )
    .await?;
    eprintln!("api-load: controller idle after the creation: {settled:?}");
    let t0 = Utc::now();
    tokio::time::sleep(idle_window).await;
    let t1 = Utc::now();
    let idle = Counts::between(&audit::read(&log)?, t0, t1);
    let per_minute = 60.0 / (t1 - t0).num_milliseconds().max(1) as f64 * 1000.0;
    record(
        results,
        "controller_api_requests_per_idle_minute_10k",
        &idle,
        per_minute,
    );
    drop(controller);
    drop(smtp);
    drop(proxy);
    drop(moto);
    drop(cluster);
    Ok(())
}
