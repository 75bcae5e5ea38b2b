//! Starting the whole stack: the control plane (etcd, kube-apiserver, kube-controller-manager),
//! moto, SMTP server, webhook, controller; then seeding AWS, registering the webhook and applying
//! the samples; then writing the env file.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use booking_harness::control_plane::{self, LocalWebhooks};
use booking_shared::api::{Booking, BookingCalendar, BookingScheduler, Resource, ResourceMonitor};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::ApiResource;
use serde_json::json;

use crate::procs::{self, Recorded};

/// The second region of the seeded fleet.
pub const SECOND_REGION: &str = "eu-west-1";
/// The region of everything else.
pub const REGION: &str = booking_harness::moto::REGION;
/// How long each process may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(90);
/// How long kube-apiserver may take to become ready (`/readyz`, the default namespace).
const APISERVER_READY_TIMEOUT: Duration = Duration::from_secs(120);
/// How many consecutive ports the sandbox uses from its port base.
pub const PORT_COUNT: u16 = 9;

/// Where and how the sandbox runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// State directory (`target/sandbox`): env file, PIDs, logs, certificates, mail.
    pub dir: PathBuf,
    /// First of [`PORT_COUNT`] consecutive ports on 127.0.0.1 (see [`Ports`]).
    pub port_base: u16,
    /// Namespace the controller manages and the samples live in.
    pub namespace: String,
    /// AWS tag key prefix.
    pub tag_prefix: String,
    /// Where `booking-controller`, `booking-webhook` and `kubectl-booking` are.
    pub bin_dir: PathBuf,
    /// Apply the demo samples (monitor, RDS resource, booking, scheduler).
    pub samples: bool,
}

/// The ports, in order from `port_base`. The first six are those of the sandbox before it ran
/// a real control plane; the control plane's own three follow.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    /// kube-apiserver's secure port.
    pub api: u16,
    /// moto.
    pub moto: u16,
    /// The SMTP server.
    pub smtp: u16,
    /// The webhook's HTTPS port (admission).
    pub webhook: u16,
    /// The webhook's admin port (health, metrics).
    pub webhook_admin: u16,
    /// The controller's admin port (health, metrics).
    pub controller_admin: u16,
    /// etcd's client port.
    pub etcd: u16,
    /// etcd's peer port.
    pub etcd_peer: u16,
    /// kube-controller-manager's secure port.
    pub controller_manager: u16,
}

impl Ports {
    /// Every port with what uses it, in order.
    pub fn all(&self) -> [(u16, &'static str); PORT_COUNT as usize] {
        [
            (self.api, "kube-apiserver"),
            (self.moto, "moto"),
            (self.smtp, "the SMTP server"),
            (self.webhook, "the webhook's HTTPS port"),
            (self.webhook_admin, "the webhook's admin port"),
            (self.controller_admin, "the controller's admin port"),
            (self.etcd, "etcd's client port"),
            (self.etcd_peer, "etcd's peer port"),
            (self.controller_manager, "kube-controller-manager"),
        ]
    }
}

impl Settings {
    /// The ports, from `port_base` on.
    pub fn ports(&self) -> Ports {
        let b = self.port_base;
        Ports {
            api: b,
            moto: b + 1,
            smtp: b + 2,
            webhook: b + 3,
            webhook_admin: b + 4,
            controller_admin: b + 5,
            etcd: b + 6,
            etcd_peer: b + 7,
            controller_manager: b + 8,
        }
    }

    /// `<dir>/env`.
    pub fn env_file(&self) -> PathBuf {
        self.dir.join("env")
    }

    /// `<dir>/kubeconfig`: the control plane's admin kubeconfig (client certificate in
    /// `system:masters`).
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// `<dir>/control-plane`: certificates, keys and etcd's data.
    fn control_plane_dir(&self) -> PathBuf {
        self.dir.join("control-plane")
    }

    /// `<dir>/mail`.
    pub fn mail_dir(&self) -> PathBuf {
        self.dir.join("mail")
    }

    /// `<dir>/tls`.
    fn tls_dir(&self) -> PathBuf {
        self.dir.join("tls")
    }

    /// The variables written to the env file.
    pub fn env_vars(&self) -> Vec<(&'static str, String)> {
        let p = self.ports();
        vec![
            ("KUBECONFIG", self.kubeconfig().display().to_string()),
            ("NAMESPACE", self.namespace.clone()),
            ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{}", p.moto)),
            ("AWS_REGION", REGION.to_owned()),
            ("AWS_DEFAULT_REGION", REGION.to_owned()),
            (
                "AWS_ACCESS_KEY_ID",
                booking_harness::moto::ACCESS_KEY_ID.to_owned(),
            ),
            (
                "AWS_SECRET_ACCESS_KEY",
                booking_harness::moto::SECRET_ACCESS_KEY.to_owned(),
            ),
            ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
            ("AWS_SECOND_REGION", SECOND_REGION.to_owned()),
            ("TAG_PREFIX", self.tag_prefix.clone()),
            ("MAIL_DIR", self.mail_dir().display().to_string()),
            ("SMTP_HOST", "127.0.0.1".to_owned()),
            ("SMTP_PORT", p.smtp.to_string()),
            ("WEBHOOK_URL", format!("https://127.0.0.1:{}", p.webhook)),
            (
                "WEBHOOK_CA_FILE",
                self.tls_dir().join("ca.crt").display().to_string(),
            ),
            (
                "CONTROLLER_METRICS_URL",
                format!("http://127.0.0.1:{}/metrics", p.controller_admin),
            ),
            (
                "WEBHOOK_METRICS_URL",
                format!("http://127.0.0.1:{}/metrics", p.webhook_admin),
            ),
            ("SANDBOX_DIR", self.dir.display().to_string()),
            // Where the product's binaries are, the kubectl plugin among them (under
            // CARGO_TARGET_DIR when that is set).
            ("BOOKING_BIN_DIR", self.bin_dir.display().to_string()),
        ]
    }
}

/// What `up` found or did.
pub enum UpOutcome {
    /// Everything was already running.
    AlreadyRunning,
    /// Started now.
    Started,
}

/// Starts the stack unless it already runs. On failure, stops whatever it started.
pub async fn up(s: &Settings) -> Result<UpOutcome> {
    let records = procs::recorded(&s.dir)?;
    if !records.is_empty() {
        if records.iter().all(Recorded::alive) && s.env_file().is_file() {
            return Ok(UpOutcome::AlreadyRunning);
        }
        let dead: Vec<&str> = records
            .iter()
            .filter(|r| !r.alive())
            .map(|r| r.name.as_str())
            .collect();
        note!(
            "A previous sandbox is partly running ({} exited); stopping it first.",
            dead.join(", ")
        );
        procs::stop_all(&s.dir)?;
    }
    clean_state(&s.dir)?;
    let binaries = preflight(s).await?;
    match start(s, &binaries).await {
        Ok(()) => Ok(UpOutcome::Started),
        Err(e) => {
            note!("Starting the sandbox failed; stopping what was started.");
            if let Err(stop) = procs::stop_all(&s.dir) {
                note!("stopping failed too: {stop:#}");
            }
            Err(e)
        }
    }
}

/// Removes the state of a previous run (etcd's data included), keeping the logs.
pub fn clean_state(dir: &Path) -> Result<()> {
    for sub in ["tls", "mail", "pids", "control-plane"] {
        let p = dir.join(sub);
        if p.exists() {
            std::fs::remove_dir_all(&p).with_context(|| format!("removing {}", p.display()))?;
        }
    }
    for file in ["env", "kubeconfig"] {
        let p = dir.join(file);
        if p.exists() {
            std::fs::remove_file(&p).with_context(|| format!("removing {}", p.display()))?;
        }
    }
    Ok(())
}

/// The control plane's binaries.
pub struct Binaries {
    /// kubectl of the control plane's release.
    pub kubectl: PathBuf,
}

/// Checks tools and ports before starting anything, and finds (the first time: builds) the
/// control plane's binaries.
async fn preflight(s: &Settings) -> Result<Binaries> {
    for bin in ["booking-webhook", "booking-controller"] {
        let path = s.bin_dir.join(bin);
        if !path.is_file() {
            bail!(
                "{} is missing: build it with `cargo build --workspace --bins --locked` (the \
                 Makefile targets do)",
                path.display()
            );
        }
    }
    // Both say to run `make venv` when the virtualenv is missing.
    booking_harness::paths::venv_bin("moto_server")?;
    booking_harness::paths::venv_python()?;
    for (port, what) in s.ports().all() {
        if let Err(e) = TcpListener::bind(("127.0.0.1", port)) {
            bail!(
                "port 127.0.0.1:{port} (for {what}) is not available: {e}. Stop what uses it, or \
                 choose other ports with SANDBOX_PORT_BASE (now {}; the sandbox uses it and the \
                 {} ports after it)",
                s.port_base,
                PORT_COUNT - 1
            );
        }
    }
    let dir = control_plane_binaries().await?;
    for name in [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kubectl",
    ] {
        control_plane::binary(name)?;
    }
    let kubectl = dir.join("kubectl");
    if which("kubectl").is_none() {
        note!(
            "note: kubectl is not on PATH; use the control plane's own: {}",
            kubectl.display()
        );
    }
    Ok(Binaries { kubectl })
}

/// [`control_plane::binaries`], saying what happens when it takes long: the first time, it
/// builds the binaries from their Go modules (its script prints each one it builds).
async fn control_plane_binaries() -> Result<PathBuf> {
    let task = tokio::task::spawn_blocking(control_plane::binaries);
    tokio::pin!(task);
    let found = tokio::select! {
        r = &mut task => r,
        () = tokio::time::sleep(Duration::from_secs(3)) => {
            note!(
                "Preparing the control plane's binaries (etcd, kube-apiserver, \
                 kube-controller-manager, kubectl): the first run builds them from their Go \
                 modules, about 10 minutes on 2 cores, once; they are cached in \
                 ~/.cache/booking-operator/control-plane. KUBEBUILDER_ASSETS and TEST_ASSET_* \
                 point at prebuilt ones instead (see tests/sandbox/README.md)."
            );
            let started = Instant::now();
            let r = task.await;
            note!(
                "Control plane binaries ready after {:.0} s.",
                started.elapsed().as_secs_f64() + 3.0
            );
            r
        }
    };
    Ok(found.context("finding the control plane's binaries")??)
}

/// The path of `tool` on PATH.
pub fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(tool))
            .find(|p| p.is_file())
    })
}

async fn start(s: &Settings, binaries: &Binaries) -> Result<()> {
    let p = s.ports();
    std::fs::create_dir_all(s.mail_dir())?;
    let started = Instant::now();

    // Certificates for the webhook (rcgen): a CA and a serving certificate for 127.0.0.1, the
    // address the API server calls it at.
    let tls = write_webhook_certs(&s.tls_dir())?;
    // The shipped webhook configurations, calling the local webhook by URL.
    let webhook_configs = LocalWebhooks::from_manifest(
        &booking_harness::paths::repo_root().join("manifests/webhook/webhook-configurations.yaml"),
        &format!("https://127.0.0.1:{}", p.webhook),
        &tls.ca_pem,
    )?;

    // The control plane: certificates, keys, etcd's data folder and the admin kubeconfig under
    // <dir>/control-plane, each component's command line for the sandbox's ports.
    let recipe = control_plane::Recipe::new(
        &s.control_plane_dir(),
        control_plane::Ports {
            etcd: p.etcd,
            etcd_peer: p.etcd_peer,
            apiserver: p.api,
            controller_manager: p.controller_manager,
        },
        &[],
    )?;
    copy_private(&recipe.kubeconfig, &s.kubeconfig())?;
    let kubeconfig = s.kubeconfig();
    let os_args = |args: &[std::ffi::OsString]| -> Vec<String> {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    };

    // 1. etcd.
    let etcd = procs::spawn(
        &s.dir,
        1,
        "etcd",
        &recipe.etcd.0,
        &os_args(&recipe.etcd.1),
        &[],
    )?;
    // 4. moto, straight from the virtualenv (not the harness wrapper, which exits with its
    //    parent).
    let moto_bin = booking_harness::paths::venv_bin("moto_server")?;
    let moto = procs::spawn(
        &s.dir,
        4,
        "moto",
        &moto_bin,
        &[
            "-H".into(),
            "127.0.0.1".into(),
            "-p".into(),
            p.moto.to_string(),
        ],
        &[],
    )?;
    // 5. The SMTP server of the harness (aiosmtpd), one file per message in MAIL_DIR.
    let python = booking_harness::paths::venv_python()?;
    let scripts = booking_harness::paths::repo_root()
        .join("tests")
        .join("python");
    let smtp = procs::spawn(
        &s.dir,
        5,
        "smtp",
        &python,
        &[
            "-c".into(),
            "import asyncio, sys; sys.path.insert(0, sys.argv[1]); import smtp_server; \
             asyncio.run(smtp_server.serve(smtp_server.parse_args(sys.argv[2:])))"
                .into(),
            scripts.display().to_string(),
            "--host".into(),
            "127.0.0.1".into(),
            "--port".into(),
            p.smtp.to_string(),
            "--maildir".into(),
            s.mail_dir().display().to_string(),
        ],
        &[],
    )?;
    wait_ready(&s.dir, &etcd, READY_TIMEOUT, || {
        http_ok(format!("{}/health", recipe.etcd_url))
    })
    .await?;

    // 2. kube-apiserver on etcd; moto is seeded while it starts.
    let api = procs::spawn(
        &s.dir,
        2,
        "kube-apiserver",
        &recipe.apiserver.0,
        &os_args(&recipe.apiserver.1),
        &[],
    )?;
    let api_ready = async {
        wait_ready(&s.dir, &api, APISERVER_READY_TIMEOUT, || async {
            control_plane::probe_ready(&kubeconfig)
                .await
                .map_err(|e| anyhow!(e))
        })
        .await?;
        note!(
            "kube-apiserver ready {:.1} s after the start.",
            started.elapsed().as_secs_f64()
        );
        kube_client(&kubeconfig).await
    };
    let aws_ready = async {
        wait_ready(&s.dir, &moto, READY_TIMEOUT, || {
            http_ok(format!("http://127.0.0.1:{}/moto-api/", p.moto))
        })
        .await?;
        wait_ready(&s.dir, &smtp, READY_TIMEOUT, || tcp_ok(p.smtp)).await?;
        seed_aws(s).await.context("seeding moto")
    };
    let (client, ()) = tokio::try_join!(api_ready, aws_ready)?;

    // 3. kube-controller-manager (namespace deletion, garbage collection), once the API server
    //    it authenticates against is ready.
    let controller_manager = procs::spawn(
        &s.dir,
        3,
        "kube-controller-manager",
        &recipe.controller_manager.0,
        &os_args(&recipe.controller_manager.1),
        &[],
    )?;

    // CRDs, the namespace.
    apply_crds(&client).await?;
    create(
        &Api::<Namespace>::all(client.clone()),
        &serde_json::from_value(json!({"metadata": {"name": s.namespace}}))?,
    )
    .await?;

    // 6. The webhook, exactly as in production but for its addresses and certificate files.
    let kube_env = vec![("KUBECONFIG".to_owned(), kubeconfig.display().to_string())];
    let webhook = procs::spawn(
        &s.dir,
        6,
        "webhook",
        &s.bin_dir.join("booking-webhook"),
        &[],
        &[
            kube_env.clone(),
            vec![
                ("TLS_CERT_FILE".to_owned(), tls.cert.display().to_string()),
                ("TLS_KEY_FILE".to_owned(), tls.key.display().to_string()),
                (
                    "WEBHOOK_LISTEN_ADDR".to_owned(),
                    format!("127.0.0.1:{}", p.webhook),
                ),
                (
                    "WEBHOOK_ADMIN_ADDR".to_owned(),
                    format!("127.0.0.1:{}", p.webhook_admin),
                ),
                ("RUST_LOG".to_owned(), "info".to_owned()),
                // No Service routes here, so there is nothing to drain: stop at once.
                ("WEBHOOK_DRAIN_SECONDS".to_owned(), "0".to_owned()),
            ],
        ]
        .concat(),
    )?;
    wait_ready(&s.dir, &webhook, READY_TIMEOUT, || {
        http_ok(format!("http://127.0.0.1:{}/readyz", p.webhook_admin))
    })
    .await?;
    webhook_configs.register(&client).await?;

    // 7. The controller.
    let mut controller_env: Vec<(String, String)> = s
        .env_vars()
        .into_iter()
        .filter(|(k, _)| {
            matches!(
                *k,
                "NAMESPACE"
                    | "AWS_ENDPOINT_URL"
                    | "AWS_REGION"
                    | "AWS_DEFAULT_REGION"
                    | "AWS_ACCESS_KEY_ID"
                    | "AWS_SECRET_ACCESS_KEY"
                    | "AWS_EC2_METADATA_DISABLED"
                    | "TAG_PREFIX"
                    | "SMTP_HOST"
                    | "SMTP_PORT"
            )
        })
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    controller_env.extend(kube_env);
    controller_env.extend(
        [
            ("SMTP_SECURITY", "none".to_owned()),
            (
                "SMTP_SENDER",
                "Resource booking <booking@sandbox.example>".to_owned(),
            ),
            ("ADMIN_ADDRESS", format!("127.0.0.1:{}", p.controller_admin)),
            // A short inventory interval so the demo reacts to changes made with an AWS
            // client within seconds.
            ("INVENTORY_INTERVAL_SECONDS", "10".to_owned()),
            ("POD_NAME", "booking-controller-sandbox".to_owned()),
            ("RUST_LOG", "info".to_owned()),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    );
    let controller = procs::spawn(
        &s.dir,
        7,
        "controller",
        &s.bin_dir.join("booking-controller"),
        &[],
        &controller_env,
    )?;
    wait_ready(&s.dir, &controller, READY_TIMEOUT, || {
        http_ok(format!("http://127.0.0.1:{}/readyz", p.controller_admin))
    })
    .await?;
    wait_ready(&s.dir, &controller_manager, READY_TIMEOUT, || {
        tcp_ok(p.controller_manager)
    })
    .await?;

    if s.samples {
        apply_samples(s, &client).await?;
    }
    write_env_file(s, binaries)?;
    note!("Sandbox ready in {:.0} s.", started.elapsed().as_secs_f64());
    Ok(())
}

/// Copies `from` to `to`, readable by the owner only (a kubeconfig holds a private key).
fn copy_private(from: &Path, to: &Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let text = std::fs::read(from).with_context(|| format!("reading {}", from.display()))?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(to)
        .with_context(|| format!("writing {}", to.display()))?;
    std::io::Write::write_all(&mut f, &text).with_context(|| format!("writing {}", to.display()))
}

struct WebhookTls {
    ca_pem: String,
    cert: PathBuf,
    key: PathBuf,
}

fn write_webhook_certs(dir: &Path) -> Result<WebhookTls> {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair, KeyUsagePurpose,
    };
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::create_dir_all(dir)?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name
        .push(DnType::CommonName, "booking sandbox CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let issuer = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;
    let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
    leaf.distinguished_name
        .push(DnType::CommonName, "booking-webhook");
    leaf.is_ca = IsCa::ExplicitNoCa;
    leaf.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate()?;
    let cert = leaf.signed_by(&key, &issuer)?;
    let ca_pem = issuer.pem();
    let paths = WebhookTls {
        ca_pem: ca_pem.clone(),
        cert: dir.join("webhook.crt"),
        key: dir.join("webhook.key"),
    };
    std::fs::write(dir.join("ca.crt"), &ca_pem)?;
    std::fs::write(&paths.cert, format!("{}{ca_pem}", cert.pem()))?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&paths.key)?;
    std::io::Write::write_all(&mut f, key.serialize_pem().as_bytes())?;
    Ok(paths)
}

/// Polls `probe` until it succeeds, failing early with the log tail when the process exits.
async fn wait_ready<T, F, Fut>(
    dir: &Path,
    proc: &Recorded,
    timeout: Duration,
    probe: F,
) -> Result<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let start = Instant::now();
    loop {
        if !proc.alive() {
            bail!(
                "{} exited while starting; last lines of {}:\n{}",
                proc.name,
                proc.log_path(dir).display(),
                procs::log_tail(&proc.log_path(dir), 30)
            );
        }
        match tokio::time::timeout(Duration::from_secs(5), probe()).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) if start.elapsed() > timeout => {
                bail!(
                    "{} not ready after {:?}: {e:#}; last lines of {}:\n{}",
                    proc.name,
                    timeout,
                    proc.log_path(dir).display(),
                    procs::log_tail(&proc.log_path(dir), 30)
                )
            }
            Err(_) if start.elapsed() > timeout => {
                bail!(
                    "{} not ready after {timeout:?} (probe timed out)",
                    proc.name
                )
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

async fn tcp_ok(port: u16) -> Result<()> {
    tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    Ok(())
}

/// GET `url` (plain HTTP) and expect a 2xx.
pub async fn http_ok(url: String) -> Result<()> {
    let status = http_get(&url).await?.0;
    if status.is_success() {
        Ok(())
    } else {
        Err(anyhow!("GET {url}: {status}"))
    }
}

/// GET `url` (plain HTTP): status and body.
pub async fn http_get(url: &str) -> Result<(http::StatusCode, bytes::Bytes)> {
    use http_body_util::BodyExt as _;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let resp = client
        .get(url.parse().with_context(|| format!("bad URL {url}"))?)
        .await
        .with_context(|| format!("GET {url}"))?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .with_context(|| format!("reading the answer of GET {url}"))?
        .to_bytes();
    Ok((status, body))
}

/// A client for the sandbox's API server from its kubeconfig; fails until the server answers.
pub async fn kube_client(kubeconfig: &Path) -> Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await?;
    let client = booking_shared::client::client(config)?;
    client.apiserver_version().await?;
    Ok(client)
}

/// The AWS SDK configuration for moto in `region`.
pub fn sdk_config(endpoint: &str, region: &str) -> aws_config::SdkConfig {
    let base = booking_harness::moto::sdk_config(endpoint);
    base.into_builder()
        .region(aws_config::Region::new(region.to_owned()))
        .build()
}

/// The seeded fleet: (region, group, number of EC2 instances).
pub const EC2_GROUPS: [(&str, &str, i32); 3] = [
    (REGION, "web", 2),
    (SECOND_REGION, "analytics", 1),
    (REGION, "batch", 1),
];
/// The Resource the ResourceMonitor creates for the second region's group (named after the
/// region, as it is not the controller's default region).
pub const ANALYTICS_RESOURCE: &str = "ec2.analytics.eu-west-1";
/// The seeded RDS instance and its group.
pub const RDS_INSTANCE: (&str, &str) = ("reporting-db-1", "reporting-db");

async fn seed_aws(s: &Settings) -> Result<()> {
    let endpoint = format!("http://127.0.0.1:{}", s.ports().moto);
    let managed = format!("{}managed", s.tag_prefix);
    let application = format!("{}application", s.tag_prefix);
    for (region, group, count) in EC2_GROUPS {
        let ec2 = aws_sdk_ec2::Client::new(&sdk_config(&endpoint, region));
        let tags = [
            (managed.as_str(), "true"),
            (application.as_str(), group),
            ("Name", group),
        ];
        let ids = booking_harness::moto::seed_ec2_instances(&ec2, count, &tags).await?;
        // Unbooked groups are off: start from a stopped fleet.
        ec2.stop_instances()
            .set_instance_ids(Some(ids))
            .send()
            .await
            .map_err(|e| {
                anyhow!(
                    "StopInstances: {}",
                    aws_sdk_ec2::error::DisplayErrorContext(e)
                )
            })?;
    }
    let rds = aws_sdk_rds::Client::new(&sdk_config(&endpoint, REGION));
    let (id, group) = RDS_INSTANCE;
    booking_harness::moto::seed_rds_instance(
        &rds,
        id,
        &[(managed.as_str(), "true"), (application.as_str(), group)],
    )
    .await?;
    rds.stop_db_instance()
        .db_instance_identifier(id)
        .send()
        .await
        .map_err(|e| {
            anyhow!(
                "StopDBInstance: {}",
                aws_sdk_rds::error::DisplayErrorContext(e)
            )
        })?;
    Ok(())
}

/// Creates `obj`; one that already exists is fine.
async fn create<K>(api: &Api<K>, obj: &K) -> Result<()>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    match api.create(&PostParams::default(), obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| {
            format!(
                "creating {} {}",
                K::kind(&()),
                obj.meta().name.clone().unwrap_or_default()
            )
        }),
    }
}

/// Creates the CRDs and waits until the API server serves them (condition `Established`).
async fn apply_crds(client: &kube::Client) -> Result<()> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let crds = booking_shared::crd::all();
    for crd in &crds {
        create(&api, crd).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for crd in &crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        loop {
            let established = api.get_opt(&name).await?.is_some_and(|c| {
                c.status
                    .and_then(|st| st.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
            if established {
                break;
            }
            if Instant::now() > deadline {
                bail!("CustomResourceDefinition {name} not established within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// RFC 3339, whole seconds, UTC.
pub fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn dynamic<K: kube::Resource<DynamicType = ()>>(
    name: &str,
    ns: &str,
    spec: serde_json::Value,
) -> (ApiResource, DynamicObject) {
    let ar = ApiResource::erase::<K>(&());
    let obj = DynamicObject::new(name, &ar)
        .within(ns)
        .data(json!({ "spec": spec }));
    (ar, obj)
}

async fn create_dynamic(
    client: &kube::Client,
    ns: &str,
    (ar, obj): (ApiResource, DynamicObject),
) -> Result<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let name = obj.metadata.name.clone().unwrap_or_default();
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating {} {name}", ar.kind)),
    }
}

/// Waits until the Resource `name` exists (created by the ResourceMonitor).
pub async fn wait_for_resource(
    client: &kube::Client,
    ns: &str,
    name: &str,
    timeout: Duration,
) -> Result<()> {
    let api = Api::<Resource>::namespaced(client.clone(), ns);
    let start = Instant::now();
    loop {
        if api.get_opt(name).await?.is_some() {
            return Ok(());
        }
        if start.elapsed() > timeout {
            bail!("the ResourceMonitor did not create Resource {name} within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn apply_samples(s: &Settings, client: &kube::Client) -> Result<()> {
    let ns = s.namespace.as_str();
    create_dynamic(
        client,
        ns,
        dynamic::<ResourceMonitor>(
            "ec2-fleet",
            ns,
            json!({"type": "ec2", "regions": [REGION, SECOND_REGION]}),
        ),
    )
    .await?;
    create_dynamic(
        client,
        ns,
        dynamic::<Resource>(
            "rds.reporting-db",
            ns,
            json!({"type": "rds", "tag": RDS_INSTANCE.1, "region": REGION}),
        ),
    )
    .await?;
    for group in ["ec2.web", ANALYTICS_RESOURCE] {
        wait_for_resource(client, ns, group, Duration::from_secs(60)).await?;
    }
    let start = chrono::Utc::now() + chrono::Duration::seconds(15);
    let end = start + chrono::Duration::minutes(2);
    create_dynamic(
        client,
        ns,
        dynamic::<Booking>(
            "demo-web",
            ns,
            json!({
                "resource_name": "ec2.web",
                "start_at": rfc3339(start),
                "end_at": rfc3339(end),
                "user_id": "demo-user",
                "notifications": [
                    {
                        "type": "email",
                        "recipient": "demo-user@sandbox.example",
                        "leadMinutes": 1,
                        "events": ["reminder", "started", "stopped", "failed"]
                    }
                ]
            }),
        ),
    )
    .await?;
    create_dynamic(client, ns, holidays(ns, chrono::Utc::now())).await?;
    create_dynamic(
        client,
        ns,
        dynamic::<BookingScheduler>(
            "analytics-every-minute",
            ns,
            json!({
                "schedule": "* * * * *",
                "timeZone": "UTC",
                "duration": 1,
                "finishedBookingsHistoryLimit": 3,
                "calendars": [{"name": "holidays"}],
                "bookingTemplate": {
                    "resource_name": ANALYTICS_RESOURCE,
                    "user_id": "analytics-team"
                }
            }),
        ),
    )
    .await?;
    Ok(())
}

/// The demo's shared holiday calendar: the coming Christmas days and New Year's Day, which the
/// demo scheduler names in `spec.calendars` (so `kubectl get bks -o yaml` shows them in
/// `status.upcoming` when they are near).
fn holidays(ns: &str, now: chrono::DateTime<chrono::Utc>) -> (ApiResource, DynamicObject) {
    use chrono::Datelike;
    let year = now.year();
    dynamic::<BookingCalendar>(
        "holidays",
        ns,
        json!({"skipDates": [
            {"from": format!("{year}-12-25"), "to": format!("{year}-12-26"), "reason": "Christmas"},
            {"date": format!("{}-01-01", year + 1), "reason": "New Year's Day"}
        ]}),
    )
}

/// Quotes `v` for a POSIX shell when it needs it.
fn shell_value(v: &str) -> String {
    if !v.is_empty()
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-:@%+=,".contains(c))
    {
        v.to_owned()
    } else {
        format!("'{}'", v.replace('\'', r"'\''"))
    }
}

fn write_env_file(s: &Settings, binaries: &Binaries) -> Result<()> {
    let mut text = String::new();
    let kubectl = ("KUBECTL", binaries.kubectl.display().to_string());
    for (k, v) in s.env_vars().into_iter().chain([kubectl]) {
        text.push_str(&format!("{k}={}\n", shell_value(&v)));
    }
    let tmp = s.dir.join("env.tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, s.env_file())?;
    Ok(())
}

/// Reads an env file (`KEY=value` lines, values possibly single-quoted).
pub fn read_env_file(path: &Path) -> Result<BTreeMap<String, String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            let v = v
                .strip_prefix('\'')
                .and_then(|v| v.strip_suffix('\''))
                .map_or_else(|| v.to_owned(), |v| v.replace(r"'\''", "'"));
            (k.to_owned(), v)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_values_round_trip() {
        let dir = std::env::temp_dir().join(format!("sandbox-env-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("env");
        let vals = [
            ("A", "/plain/path"),
            ("B", "Resource booking <x@y>"),
            ("C", "it's"),
        ];
        let text: String = vals
            .iter()
            .map(|(k, v)| format!("{k}={}\n", shell_value(v)))
            .collect();
        std::fs::write(&path, text).unwrap();
        let read = read_env_file(&path).unwrap();
        for (k, v) in vals {
            assert_eq!(read[k], v);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
