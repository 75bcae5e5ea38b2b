//! What the end-to-end tests of the controller share: the controller binary from the target
//! directory, an environment (moto, the run's shared control plane with a namespace of the
//! test's own, the shipped CRDs), fixtures and waits.

use std::path::PathBuf;

use booking_harness::TestDir;
use booking_harness::control_plane::TestCluster;
use booking_harness::kube_proxy::{KubeFault, KubeProxy, Upstream};
use booking_harness::moto::{self, MotoServer};
use booking_harness::process::{ManagedProcess, ProcessBuilder};
use booking_shared::api::{Booking, BookingPhase, BookingSpec, Resource, ResourceSpec};
use booking_shared::time::format_rfc3339;
use chrono::Utc;
use kube::api::{Api, ObjectMeta};

pub const OTHER_REGION: &str = "us-west-2";

/// `target/<profile>/booking-controller`; see [`workspace_binary`].
pub fn controller_binary() -> PathBuf {
    workspace_binary("booking-controller")
}

/// `target/<profile>/booking-webhook`; see [`workspace_binary`].
pub fn webhook_binary() -> PathBuf {
    workspace_binary("booking-webhook")
}

/// The workspace binary `name` in `target/<profile>`, beside the test executable's `deps`
/// folder; fails when it is missing or older than any workspace source file it was built from
/// (per cargo's dep-info file beside it, `<name>.d`: its own crate's and `booking-shared`'s).
pub fn workspace_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let dir = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("the test executable lives in target/<profile>/deps");
    let bin = dir.join(name);
    let rebuild = format!("build it first: cargo build -p {name}");
    let built = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{} is missing ({e}); {rebuild}", bin.display()));
    let dep_info = dir.join(format!("{name}.d"));
    let deps = std::fs::read_to_string(&dep_info)
        .unwrap_or_else(|e| panic!("{} is missing ({e}); {rebuild}", dep_info.display()));
    let root = crate::repo_root().canonicalize().unwrap();
    let sources = deps
        .split_once(": ")
        .map(|(_, list)| list)
        .unwrap_or_default()
        .split_whitespace()
        .map(PathBuf::from)
        .filter(|p| p.starts_with(&root));
    for source in sources {
        let changed = std::fs::metadata(&source).and_then(|m| m.modified());
        if let Ok(changed) = changed {
            assert!(
                changed <= built,
                "{} is older than {}; {rebuild}",
                bin.display(),
                source.display()
            );
        }
    }
    bin
}

/// The real `booking-webhook` serving admission on 127.0.0.1:`port` with `cert` and its admin
/// port (`/readyz`, `/metrics`) on 127.0.0.1:`admin_port`, against the API server of
/// `kubeconfig`, without a drain period; spawn it with [`ProcessBuilder::spawn`].
pub fn webhook_process(
    cert: &booking_harness::tls::ServerCert,
    port: u16,
    admin_port: u16,
    kubeconfig: &std::path::Path,
) -> ProcessBuilder {
    ProcessBuilder::new("booking-webhook", webhook_binary())
        .arg("--tls-cert-file")
        .arg(&cert.cert_path)
        .arg("--tls-key-file")
        .arg(&cert.key_path)
        .arg("--listen-addr")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--admin-addr")
        .arg(format!("127.0.0.1:{admin_port}"))
        .env("KUBECONFIG", kubeconfig)
        .env("RUST_LOG", "info,booking_webhook=debug")
        // No Service routes to it: nothing to drain, it stops at once (a test's
        // `--drain-seconds` overrides this).
        .env("WEBHOOK_DRAIN_SECONDS", "0")
}

pub use booking_harness::{try_wait_for, wait_for};

/// `n` stopped EC2 instances of the managed group `tag` (the `/` key form); their IDs.
pub async fn stopped_group(ec2: &aws_sdk_ec2::Client, n: i32, tag: &str) -> Vec<String> {
    let ids = moto::seed_ec2_instances(
        ec2,
        n,
        &[
            ("resource-booking/managed", "true"),
            ("resource-booking/application", tag),
        ],
    )
    .await
    .unwrap();
    ec2.stop_instances()
        .set_instance_ids(Some(ids.clone()))
        .send()
        .await
        .unwrap();
    ids
}

pub fn ec2_in(moto: &MotoServer, region: &str) -> aws_sdk_ec2::Client {
    let conf = aws_sdk_ec2::config::Builder::from(&moto.sdk_config())
        .region(aws_config::Region::new(region.to_owned()))
        .build();
    aws_sdk_ec2::Client::from_conf(conf)
}

/// (state, tags) per instance ID.
pub async fn instances(
    client: &aws_sdk_ec2::Client,
    ids: &[String],
) -> Vec<(String, Vec<(String, String)>)> {
    let out = client
        .describe_instances()
        .set_instance_ids(Some(ids.to_vec()))
        .send()
        .await
        .expect("DescribeInstances");
    let all: Vec<_> = out
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .cloned()
        .collect();
    ids.iter()
        .map(|id| {
            let i = all
                .iter()
                .find(|i| i.instance_id() == Some(id))
                .expect("instance");
            (
                i.state().unwrap().name().unwrap().as_str().to_owned(),
                i.tags()
                    .iter()
                    .map(|t| (t.key().unwrap().to_owned(), t.value().unwrap().to_owned()))
                    .collect(),
            )
        })
        .collect()
}

pub async fn all_in_state(
    client: &aws_sdk_ec2::Client,
    ids: &[String],
    want: &str,
) -> Result<(), String> {
    let got = instances(client, ids).await;
    let states: Vec<&str> = got.iter().map(|(s, _)| s.as_str()).collect();
    if states.iter().all(|s| *s == want) {
        Ok(())
    } else {
        Err(format!("states {states:?}"))
    }
}

pub async fn db_status(rds: &aws_sdk_rds::Client, id: &str) -> String {
    let out = rds
        .describe_db_instances()
        .db_instance_identifier(id)
        .send()
        .await
        .expect("DescribeDBInstances");
    out.db_instances()[0]
        .db_instance_status()
        .unwrap_or_default()
        .to_owned()
}

pub fn resource(name: &str, type_: &str, tag: &str, region: Option<&str>) -> Resource {
    Resource {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: ResourceSpec {
            type_: type_.into(),
            tag: tag.into(),
            region: region.map(str::to_owned),
            ..Default::default()
        },
        status: None,
    }
}

pub fn booking(
    name: &str,
    resource: &str,
    start: chrono::DateTime<Utc>,
    end: chrono::DateTime<Utc>,
) -> Booking {
    Booking {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: BookingSpec {
            resource_name: resource.into(),
            start_at: format_rfc3339(start),
            end_at: format_rfc3339(end),
            user_id: format!("user-of-{name}"),
            notifications: vec![],
        },
        status: None,
    }
}

pub async fn phase(api: &Api<Booking>, name: &str) -> Option<BookingPhase> {
    api.get(name).await.ok()?.status?.status
}

/// Scrapes one sample of the admin port's metrics: the sum of every series of `name` whose
/// labels contain all of `labels`.
/// Scrapes one sample of the admin port's metrics: the sum of every series of `name` whose
/// labels contain all of `labels`. Panics when the port does not answer.
pub async fn metric(admin: &str, name: &str, labels: &[&str]) -> f64 {
    let text = try_http_get(admin, "/metrics")
        .await
        .unwrap_or_else(|e| panic!("GET http://{admin}/metrics: {e}"));
    sum_of(&text, name, labels)
}

fn sum_of(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && labels.iter().all(|x| l.contains(x)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `GET path` on a plain-HTTP port with one connection, at most 3 s in all.
pub async fn try_http_get(addr: &str, path: &str) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
        let mut out = String::new();
        s.read_to_string(&mut out).await?;
        Ok::<_, std::io::Error>(out)
    };
    match tokio::time::timeout(std::time::Duration::from_secs(3), exchange).await {
        Ok(Ok(out)) => Ok(out),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within 3 s".to_owned()),
    }
}

/// `GET path` on a plain-HTTP port; panics when it does not answer.
pub async fn http_get(addr: &str, path: &str) -> String {
    try_http_get(addr, path)
        .await
        .unwrap_or_else(|e| panic!("GET http://{addr}{path}: {e}"))
}

pub struct Env {
    /// The test's folder (logs, moto's state).
    pub dir: TestDir,
    /// The moto server.
    pub moto: MotoServer,
    /// The shared control plane, attached with a namespace of the test's own.
    pub cluster: TestCluster,
    /// An admin client.
    pub client: kube::Client,
    /// The test's own namespace: its objects, the controller's scope and its Lease.
    pub ns: String,
}

pub async fn env(label: &str) -> Env {
    let dir = TestDir::new(label).expect("test dir");
    let moto = MotoServer::start(&dir).await.expect("moto");
    let cluster = TestCluster::shared(label)
        .await
        .expect("the run's shared control plane");
    cluster.apply_shipped_crds().expect("CRDs applied");
    let client = cluster.client().await.expect("client");
    let ns = cluster.namespace().to_owned();
    Env {
        dir,
        moto,
        cluster,
        client,
        ns,
    }
}

pub fn start_controller(
    e: &Env,
    admin_port: u16,
    identity: &str,
    extra: &[(&str, &str)],
) -> ManagedProcess {
    let mut b = ProcessBuilder::new(format!("controller-{identity}"), controller_binary())
        .envs(e.moto.env())
        .env("KUBECONFIG", e.cluster.kubeconfig_path())
        .env("NAMESPACE", &e.ns)
        .env("ADMIN_ADDRESS", format!("127.0.0.1:{admin_port}"))
        .env("INVENTORY_INTERVAL_SECONDS", "2")
        // Short enough for failover tests, with a renew deadline that a loaded machine still
        // meets: 4 s to renew, each attempt cut before it.
        .env("LEASE_DURATION_SECONDS", "5")
        .env("LEASE_RENEW_DEADLINE_SECONDS", "4")
        .env("LEASE_RENEW_SECONDS", "1")
        .env("POD_NAME", identity)
        .env("RUST_LOG", "info,booking_controller=debug");
    for (k, v) in extra {
        b = b.env(k, v);
    }
    b.spawn(&e.dir).expect("controller starts")
}

/// A controller started as [`start_controller`] starts it, but talking to the API server through
/// a [`KubeProxy`] in front of it that first answers with `faults`: the proxy (what it served,
/// which faults are still pending) and the controller.
pub async fn start_controller_through(
    e: &Env,
    admin_port: u16,
    identity: &str,
    faults: impl IntoIterator<Item = KubeFault>,
) -> (KubeProxy, ManagedProcess) {
    let proxy = KubeProxy::start(
        &e.dir,
        &Upstream::from_kubeconfig(e.cluster.kubeconfig_path()).unwrap(),
    )
    .await
    .expect("API proxy");
    for fault in faults {
        proxy.inject(fault);
    }
    let through_proxy = proxy.kubeconfig_path().display().to_string();
    let controller = start_controller(
        e,
        admin_port,
        identity,
        &[("KUBECONFIG", through_proxy.as_str())],
    );
    (proxy, controller)
}

/// Whether the controller whose admin port is `admin` leads (its leader gauge is 1); `false`
/// when it does not answer (not running, shutting down).
pub async fn leads(admin: &str) -> bool {
    match try_http_get(admin, "/metrics").await {
        Ok(text) => sum_of(&text, "booking_controller_leader", &[]) == 1.0,
        Err(_) => false,
    }
}

pub fn creation_time(b: &Booking) -> chrono::DateTime<Utc> {
    let t = b
        .metadata
        .creation_timestamp
        .as_ref()
        .expect("creationTimestamp");
    chrono::DateTime::from_timestamp(t.0.as_second(), 0).expect("valid time")
}

/// The phase the clock gives a booking that overlaps no other: `SCHEDULED` before its start,
/// `IN PROGRESS` until its end, `FINISHED` afterwards.
pub fn clock_phase(b: &Booking, now: chrono::DateTime<Utc>) -> BookingPhase {
    let at = |s: &str| {
        chrono::DateTime::parse_from_rfc3339(s)
            .unwrap_or_else(|e| {
                panic!(
                    "booking {}: {s}: {e}",
                    b.metadata.name.as_deref().unwrap_or("?")
                )
            })
            .with_timezone(&Utc)
    };
    if now < at(&b.spec.start_at) {
        BookingPhase::Scheduled
    } else if now < at(&b.spec.end_at) {
        BookingPhase::InProgress
    } else {
        BookingPhase::Finished
    }
}

/// `Ok` when every booking listed by `api` (none of which overlaps another) has the phase the
/// clock gives it; otherwise the ones that differ, with what they show and what was due.
pub async fn phases_follow_the_clock(api: &Api<Booking>) -> Result<(), String> {
    let list = api
        .list(&kube::api::ListParams::default())
        .await
        .map_err(|e| format!("listing bookings: {e}"))?;
    let now = Utc::now();
    let wrong: Vec<String> = list
        .items
        .iter()
        .filter_map(|b| {
            let want = clock_phase(b, now);
            let got = b.status.as_ref().and_then(|s| s.status);
            (got != Some(want)).then(|| {
                format!(
                    "{}: {} but due {want} ({} .. {})",
                    b.metadata.name.as_deref().unwrap_or("?"),
                    got.map_or("no phase".to_owned(), |p| p.to_string()),
                    b.spec.start_at,
                    b.spec.end_at
                )
            })
        })
        .collect();
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join("; "))
    }
}
