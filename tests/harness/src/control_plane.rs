//! A real Kubernetes control plane for tests, as controller-runtime's envtest runs one: etcd on
//! 127.0.0.1 with its data in the test directory, kube-apiserver on a 127.0.0.1 secure port with
//! a serving certificate generated at start, RBAC authorization, service-account keys, and
//! kube-controller-manager so that namespace deletion, garbage collection, ReplicaSets and Pods
//! behave as in a cluster. There is no scheduler and no kubelet: Pods are created and admitted
//! but never run.
//!
//! The binaries come from [`binaries`]: `tests/control-plane/build.sh` builds them from their Go
//! modules once (cached by version), or takes setup-envtest's (`KUBEBUILDER_ASSETS`,
//! `TEST_ASSET_*`).
//!
//! Two ways to use one:
//!
//! - [`TestCluster::shared`]: the run's shared control plane, started once by
//!   `booking-control-plane run -- <test command>` (what `make test` does), with a namespace of
//!   the test's own. Tests that touch cluster-wide objects give them names of their own.
//! - [`ControlPlane::start`]: a control plane owned by one test, for what must not disturb other
//!   tests (restarting the API server, compacting etcd, installing cluster-wide admission
//!   configuration). It is stopped when dropped, also when the test panics.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use http::Method;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::http_util as http_c;
use crate::paths::{TestDir, free_port, repo_root};
use crate::process::{ManagedProcess, ProcessBuilder, Readiness};

/// Environment variable holding the admin kubeconfig of the run's shared control plane; set by
/// `booking-control-plane run` for the command it runs.
pub const SHARED_KUBECONFIG_ENV: &str = "BOOKING_TEST_KUBECONFIG";
/// Environment variable holding the folder of the control plane's binaries (kube-apiserver,
/// kube-controller-manager, kubectl, etcd, helm); set by `booking-control-plane run`, otherwise
/// found with `tests/control-plane/build.sh`.
pub const BIN_DIR_ENV: &str = "BOOKING_CONTROL_PLANE_BIN_DIR";

/// How long the API server may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// The folder holding kube-apiserver, kube-controller-manager, kubectl, etcd and helm.
///
/// `$BOOKING_CONTROL_PLANE_BIN_DIR` when set; otherwise `tests/control-plane/build.sh` is run
/// once per process (it builds what is not cached yet, which the first time takes minutes, and
/// honours `KUBEBUILDER_ASSETS` and `TEST_ASSET_*`).
///
/// # Errors
/// [`Error::ControlPlaneBinaries`] when the script fails, naming what is missing.
pub fn binaries() -> Result<PathBuf> {
    static DIR: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os(BIN_DIR_ENV).filter(|d| !d.is_empty()) {
            return Ok(PathBuf::from(dir));
        }
        let script = repo_root().join("tests/control-plane/build.sh");
        let out = Command::new("bash")
            .arg(&script)
            .stderr(std::process::Stdio::inherit())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if !out.status.success() {
            return Err(format!(
                "{} failed ({}); its messages above say what is missing",
                script.display(),
                out.status
            ));
        }
        let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        Ok(PathBuf::from(dir))
    })
    .clone()
    .map_err(Error::ControlPlaneBinaries)
}

/// One binary of [`binaries`], checked to exist.
///
/// # Errors
/// [`Error::ControlPlaneBinaries`].
pub fn binary(name: &str) -> Result<PathBuf> {
    let path = binaries()?.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::ControlPlaneBinaries(format!(
            "{} is missing; run tests/control-plane/build.sh, or point KUBEBUILDER_ASSETS or \
             TEST_ASSET_* at prebuilt binaries",
            path.display()
        )))
    }
}

/// Certificates and keys of one control plane, PEM.
struct Pki {
    ca_pem: String,
    admin_cert_pem: String,
    admin_key_pem: String,
}

/// A control plane owned by one test (or by `booking-control-plane`).
pub struct ControlPlane {
    dir: TestDir,
    etcd: ManagedProcess,
    etcd_url: String,
    apiserver: Option<ManagedProcess>,
    apiserver_args: Vec<OsString>,
    port: u16,
    controller_manager: Option<ManagedProcess>,
    kubeconfig_path: PathBuf,
    pki: Pki,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("url", &self.url())
            .field("etcd_url", &self.etcd_url)
            .field("kubeconfig", &self.kubeconfig_path)
            .finish_non_exhaustive()
    }
}

/// What to start besides etcd and kube-apiserver.
#[derive(Clone, Debug)]
pub struct ControlPlaneOptions {
    /// Start kube-controller-manager (namespace deletion, garbage collection, ReplicaSets,
    /// service-account tokens). On by default.
    pub controller_manager: bool,
    /// Extra kube-apiserver flags (`--name=value`), appended last.
    pub apiserver_args: Vec<String>,
}

impl Default for ControlPlaneOptions {
    fn default() -> Self {
        ControlPlaneOptions {
            controller_manager: true,
            apiserver_args: Vec::new(),
        }
    }
}

/// Ports of one control plane on 127.0.0.1.
#[derive(Clone, Copy, Debug)]
pub struct Ports {
    /// etcd's client port.
    pub etcd: u16,
    /// etcd's peer port.
    pub etcd_peer: u16,
    /// kube-apiserver's secure port.
    pub apiserver: u16,
    /// kube-controller-manager's secure (metrics) port.
    pub controller_manager: u16,
}

impl Ports {
    /// Four free ports.
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn free() -> Result<Ports> {
        Ok(Ports {
            etcd: free_port()?,
            etcd_peer: free_port()?,
            apiserver: free_port()?,
            controller_manager: free_port()?,
        })
    }
}

/// How to run one control plane: each component's program and flags, with certificates, keys,
/// etcd's data folder and the admin kubeconfig written under one state folder. [`ControlPlane`]
/// runs one for a test; the sandbox runs one in the background with processes of its own.
#[derive(Clone, Debug)]
pub struct Recipe {
    /// etcd: program and arguments.
    pub etcd: (PathBuf, Vec<OsString>),
    /// kube-apiserver: program and arguments.
    pub apiserver: (PathBuf, Vec<OsString>),
    /// kube-controller-manager: program and arguments.
    pub controller_manager: (PathBuf, Vec<OsString>),
    /// The admin kubeconfig (client certificate in `system:masters`).
    pub kubeconfig: PathBuf,
    /// etcd's client URL.
    pub etcd_url: String,
    /// The API server's URL.
    pub url: String,
    /// The cluster CA, PEM.
    pub ca_pem: String,
    /// The admin client certificate and key, PEM.
    pub admin_cert_pem: String,
    /// The admin client key, PEM.
    pub admin_key_pem: String,
}

impl Recipe {
    /// Writes a new CA, serving and client certificates, the service-account key and the admin
    /// kubeconfig under `state`, and returns the components' command lines for `ports`.
    /// `extra_apiserver_args` (`--name=value`) come last.
    ///
    /// # Errors
    /// Missing binaries ([`Error::ControlPlaneBinaries`]), [`Error::Io`], [`Error::Certificate`].
    pub fn new(state: &Path, ports: Ports, extra_apiserver_args: &[String]) -> Result<Recipe> {
        let pki_dir = state.join("pki");
        let data_dir = state.join("etcd");
        for d in [&pki_dir, &data_dir] {
            std::fs::create_dir_all(d)
                .map_err(|e| Error::io(format!("creating {}", d.display()), e))?;
        }
        let pki = write_pki(&pki_dir)?;
        let etcd_url = format!("http://127.0.0.1:{}", ports.etcd);
        let peer_url = format!("http://127.0.0.1:{}", ports.etcd_peer);
        let url = format!("https://127.0.0.1:{}", ports.apiserver);
        let p = |name: &str| pki_dir.join(name).display().to_string();
        let os = |v: Vec<String>| v.into_iter().map(OsString::from).collect::<Vec<_>>();
        let etcd = os(vec![
            format!("--data-dir={}", data_dir.display()),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=default={peer_url}"),
            "--unsafe-no-fsync=true".into(),
            "--log-level=warn".into(),
        ]);
        let mut apiserver = vec![
            format!("--etcd-servers={etcd_url}"),
            "--advertise-address=127.0.0.1".into(),
            // The default reconciler refuses a loopback address for the kubernetes Service.
            "--endpoint-reconciler-type=none".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", ports.apiserver),
            format!("--cert-dir={}", p("apiserver-generated")),
            format!("--tls-cert-file={}", p("apiserver.crt")),
            format!("--tls-private-key-file={}", p("apiserver.key")),
            format!("--client-ca-file={}", p("ca.crt")),
            "--authorization-mode=RBAC".into(),
            format!("--service-account-key-file={}", p("service-account.pub")),
            format!(
                "--service-account-signing-key-file={}",
                p("service-account.key")
            ),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            "--allow-privileged=true".into(),
            "--profiling=false".into(),
            "--v=1".into(),
        ];
        apiserver.extend(extra_apiserver_args.iter().cloned());
        let kubeconfig = state.join("kubeconfig");
        write_kubeconfig(&kubeconfig, &url, &pki)?;
        let k = kubeconfig.display().to_string();
        let controller_manager = os(vec![
            format!("--kubeconfig={k}"),
            format!("--authentication-kubeconfig={k}"),
            format!("--authorization-kubeconfig={k}"),
            "--leader-elect=false".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", ports.controller_manager),
            format!("--cert-dir={}", p("controller-manager-generated")),
            format!("--root-ca-file={}", p("ca.crt")),
            format!(
                "--service-account-private-key-file={}",
                p("service-account.key")
            ),
            "--use-service-account-credentials=true".into(),
            "--controllers=*".into(),
            "--v=1".into(),
        ]);
        Ok(Recipe {
            etcd: (binary("etcd")?, etcd),
            apiserver: (binary("kube-apiserver")?, os(apiserver)),
            controller_manager: (binary("kube-controller-manager")?, controller_manager),
            kubeconfig,
            etcd_url,
            url,
            ca_pem: pki.ca_pem,
            admin_cert_pem: pki.admin_cert_pem,
            admin_key_pem: pki.admin_key_pem,
        })
    }
}

impl ControlPlane {
    /// Starts etcd, kube-apiserver and (by default) kube-controller-manager with their data,
    /// certificates, logs and kubeconfig in `dir`, and waits until the API server is ready
    /// (`/readyz`) and serves the default namespace.
    ///
    /// # Errors
    /// Missing binaries, a process that exits early or is not ready in time (with its logs).
    ///
    /// The ports are picked free just before the processes bind them, so another process of a
    /// parallel test run can take one in between: a process that exits early because its
    /// address is in use is started again on new ports (three tries).
    pub async fn start(dir: &TestDir, options: ControlPlaneOptions) -> Result<ControlPlane> {
        let mut tries = 0;
        loop {
            tries += 1;
            match Self::start_once(dir, options.clone()).await {
                Err(Error::ExitedEarly { log_tail, .. })
                    if tries < 3 && log_tail.contains("address already in use") =>
                {
                    continue;
                }
                other => return other,
            }
        }
    }

    async fn start_once(dir: &TestDir, options: ControlPlaneOptions) -> Result<ControlPlane> {
        let started = Instant::now();
        let ports = Ports::free()?;
        let recipe = Recipe::new(
            &dir.subdir("control-plane")?,
            ports,
            &options.apiserver_args,
        )?;
        let mut etcd = ProcessBuilder::new("etcd", &recipe.etcd.0)
            .args(recipe.etcd.1.clone())
            .spawn(dir)?;
        etcd.wait_ready(
            &Readiness::Http(format!("{}/health", recipe.etcd_url)),
            Duration::from_secs(30),
        )
        .await?;
        let mut plane = ControlPlane {
            dir: dir.clone(),
            etcd,
            etcd_url: recipe.etcd_url.clone(),
            apiserver: None,
            apiserver_args: recipe.apiserver.1.clone(),
            port: ports.apiserver,
            controller_manager: None,
            kubeconfig_path: recipe.kubeconfig.clone(),
            pki: Pki {
                ca_pem: recipe.ca_pem.clone(),
                admin_cert_pem: recipe.admin_cert_pem.clone(),
                admin_key_pem: recipe.admin_key_pem.clone(),
            },
        };
        plane
            .start_apiserver_with(recipe.apiserver.0.clone())
            .await?;
        if options.controller_manager {
            let kcm = ProcessBuilder::new("kube-controller-manager", &recipe.controller_manager.0)
                .args(recipe.controller_manager.1.clone())
                .spawn(dir)?;
            plane.controller_manager = Some(kcm);
        }
        tracing::info!(url = %plane.url(), elapsed = ?started.elapsed(), "control plane ready");
        Ok(plane)
    }

    async fn start_apiserver_with(&mut self, bin: PathBuf) -> Result<()> {
        let mut apiserver = ProcessBuilder::new("kube-apiserver", bin)
            .args(self.apiserver_args.clone())
            .spawn(&self.dir)?;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        apiserver
            .wait_ready(&Readiness::Tcp(addr), READY_TIMEOUT)
            .await?;
        self.apiserver = Some(apiserver);
        self.wait_ready().await
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(p) = self.apiserver.as_mut()
                && let Some(status) = p.try_exit_status()?
            {
                return Err(Error::ExitedEarly {
                    name: "kube-apiserver".into(),
                    status,
                    log_dir: self.dir.join("logs"),
                    log_tail: p.log_tail(40),
                });
            }
            match probe_ready(&self.kubeconfig_path).await {
                Ok(()) => return Ok(()),
                Err(last) if Instant::now() >= deadline => {
                    return Err(Error::NotReady {
                        name: "kube-apiserver".into(),
                        waited: READY_TIMEOUT,
                        last_error: last,
                        log_dir: self.dir.join("logs"),
                        log_tail: self
                            .apiserver
                            .as_ref()
                            .map(|p| p.log_tail(40))
                            .unwrap_or_default(),
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// The API server's URL, `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The API server's secure port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// etcd's client URL.
    pub fn etcd_url(&self) -> &str {
        &self.etcd_url
    }

    /// The admin kubeconfig (a client certificate in `system:masters`).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// The cluster CA, PEM (it signed the serving and the admin client certificates).
    pub fn ca_pem(&self) -> &str {
        &self.pki.ca_pem
    }

    /// The admin client certificate and key, PEM.
    pub fn admin_identity_pem(&self) -> (&str, &str) {
        (&self.pki.admin_cert_pem, &self.pki.admin_key_pem)
    }

    /// A kube client as the admin user.
    ///
    /// # Errors
    /// [`Error::Kube`].
    pub async fn client(&self) -> Result<kube::Client> {
        client_from(&self.kubeconfig_path, None).await
    }

    /// Stops kube-apiserver (SIGTERM, then SIGKILL), leaving etcd and its data.
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn stop_apiserver(&mut self) -> Result<()> {
        if let Some(mut p) = self.apiserver.take() {
            p.stop()?;
        }
        Ok(())
    }

    /// Starts kube-apiserver again on the same port with the same flags (after
    /// [`stop_apiserver`](Self::stop_apiserver)); its watch cache starts from etcd anew, so
    /// watches resumed from older resourceVersions see `410 Gone` once etcd is compacted.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub async fn start_apiserver(&mut self) -> Result<()> {
        if self.apiserver.is_some() {
            return Ok(());
        }
        self.start_apiserver_with(binary("kube-apiserver")?).await
    }

    /// [`stop_apiserver`](Self::stop_apiserver) then [`start_apiserver`](Self::start_apiserver).
    ///
    /// # Errors
    /// As both.
    pub async fn restart_apiserver(&mut self) -> Result<()> {
        self.stop_apiserver()?;
        self.start_apiserver().await
    }

    /// Compacts etcd's history up to its current revision (through etcd's gRPC gateway), so
    /// every older resourceVersion is gone. Returns the revision compacted to.
    ///
    /// # Errors
    /// [`Error::Http`] or [`Error::Protocol`] when etcd does not answer as expected.
    pub async fn compact_etcd(&self) -> Result<i64> {
        compact_etcd(&self.etcd_url).await
    }

    /// The PIDs of the running components, by name.
    pub fn pids(&self) -> BTreeMap<&'static str, u32> {
        let mut pids = BTreeMap::from([("etcd", self.etcd.pid())]);
        if let Some(p) = &self.apiserver {
            pids.insert("kube-apiserver", p.pid());
        }
        if let Some(p) = &self.controller_manager {
            pids.insert("kube-controller-manager", p.pid());
        }
        pids
    }

    /// Stops every component (kube-controller-manager, kube-apiserver, etcd), in that order.
    pub fn stop(&mut self) {
        if let Some(mut p) = self.controller_manager.take() {
            let _ = p.stop();
        }
        let _ = self.stop_apiserver();
        let _ = self.etcd.stop();
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // Stop the API server before etcd so it does not log a storm of connection errors.
        if let Some(mut p) = self.controller_manager.take() {
            let _ = p.stop();
        }
        let _ = self.stop_apiserver();
    }
}

/// One readiness probe of the API server of `kubeconfig`: `/readyz` answers `ok` and the
/// `default` namespace exists (the API server creates it once its post-start hooks ran).
///
/// # Errors
/// What is not ready yet.
pub async fn probe_ready(kubeconfig: &Path) -> std::result::Result<(), String> {
    let client = client_from(kubeconfig, None)
        .await
        .map_err(|e| e.to_string())?;
    let body = client
        .request_text(
            http::Request::get("/readyz")
                .body(Vec::new())
                .expect("static request"),
        )
        .await
        .map_err(|e| e.to_string())?;
    if body.trim() != "ok" {
        return Err(body);
    }
    let ns: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
    match ns.get_opt("default").await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err("namespace default not created yet".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Compacts etcd at `etcd_url` up to its current revision; returns that revision.
///
/// # Errors
/// [`Error::Http`] or [`Error::Protocol`].
pub async fn compact_etcd(etcd_url: &str) -> Result<i64> {
    let client = http_c::client();
    let post = |path: &str, body: Value| {
        let url = format!("{etcd_url}{path}");
        let client = client.clone();
        async move {
            let (status, bytes) = http_c::send(
                &client,
                Method::POST,
                &url,
                Some("application/json"),
                Bytes::from(body.to_string()),
            )
            .await?;
            let v: Value = serde_json::from_slice(&bytes).map_err(|e| Error::Protocol {
                what: url.clone(),
                message: e.to_string(),
            })?;
            if !status.is_success() {
                return Err(Error::Http {
                    method: "POST".into(),
                    url,
                    message: format!("{status}: {v}"),
                });
            }
            Ok(v)
        }
    };
    let key = base64::engine::general_purpose::STANDARD.encode("/");
    let range = post("/v3/kv/range", json!({"key": key, "limit": 1})).await?;
    let revision: i64 = range["header"]["revision"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Error::Protocol {
            what: "etcd /v3/kv/range".into(),
            message: format!("no header.revision in {range}"),
        })?;
    post(
        "/v3/kv/compaction",
        json!({"revision": revision.to_string(), "physical": true}),
    )
    .await?;
    Ok(revision)
}

/// A kube client from a kubeconfig file, optionally impersonating `(user, groups)`.
///
/// # Errors
/// [`Error::Kube`].
pub async fn client_from(
    kubeconfig: &Path,
    impersonate: Option<(&str, &[&str])>,
) -> Result<kube::Client> {
    let err = |e: &dyn std::fmt::Display| Error::Kube(format!("{}: {e}", kubeconfig.display()));
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| err(&e))?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| err(&e))?;
    if let Some((user, groups)) = impersonate {
        config.auth_info.impersonate = Some(user.to_owned());
        config.auth_info.impersonate_groups =
            Some(groups.iter().map(|g| (*g).to_owned()).collect());
    }
    booking_shared::client::client(config).map_err(|e| err(&e))
}

/// Writes a CA, the API server's serving certificate, the admin client certificate (group
/// `system:masters`) and the service-account signing key into `dir`.
fn write_pki(dir: &Path) -> Result<Pki> {
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "booking test cluster CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;

    let mut serving = CertificateParams::new(
        [
            "localhost",
            "127.0.0.1",
            "10.0.0.1",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ]
        .map(str::to_owned)
        .to_vec(),
    )?;
    serving
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    serving.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let serving_key = KeyPair::generate()?;
    let serving_cert = serving.signed_by(&serving_key, &ca)?;

    let mut admin = CertificateParams::new(Vec::<String>::new())?;
    admin.distinguished_name.push(DnType::CommonName, "admin");
    admin
        .distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    admin.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let admin_key = KeyPair::generate()?;
    let admin_cert = admin.signed_by(&admin_key, &ca)?;

    let sa_key = KeyPair::generate()?;

    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| Error::io(format!("writing {}", path.display()), e))
    };
    write("ca.crt", &ca.pem())?;
    write("apiserver.crt", &serving_cert.pem())?;
    write("apiserver.key", &serving_key.serialize_pem())?;
    write("admin.crt", &admin_cert.pem())?;
    write("admin.key", &admin_key.serialize_pem())?;
    write("service-account.key", &sa_key.serialize_pem())?;
    write("service-account.pub", &sa_key.public_key_pem())?;
    Ok(Pki {
        ca_pem: ca.pem(),
        admin_cert_pem: admin_cert.pem(),
        admin_key_pem: admin_key.serialize_pem(),
    })
}

/// Writes an admin kubeconfig for `server`, with the CA and the client identity embedded.
fn write_kubeconfig(path: &Path, server: &str, pki: &Pki) -> Result<()> {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "booking-test", "cluster": {
            "server": server,
            "certificate-authority-data": b64(&pki.ca_pem),
        }}],
        "users": [{"name": "admin", "user": {
            "client-certificate-data": b64(&pki.admin_cert_pem),
            "client-key-data": b64(&pki.admin_key_pem),
        }}],
        "contexts": [{"name": "booking-test", "context": {"cluster": "booking-test", "user": "admin"}}],
        "current-context": "booking-test",
    });
    write_private(path, &serde_json::to_string_pretty(&config).expect("json"))
}

fn write_private(path: &Path, text: &str) -> Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| Error::io(format!("creating {}", parent.display()), e))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    f.write_all(text.as_bytes())
        .map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

/// What one test uses of the run's shared control plane: its admin kubeconfig and a namespace
/// of the test's own, created fresh (`<label>-<random suffix>`).
#[derive(Clone, Debug)]
pub struct TestCluster {
    kubeconfig: PathBuf,
    namespace: String,
}

impl TestCluster {
    /// Attaches to the shared control plane (`$BOOKING_TEST_KUBECONFIG`) and creates a
    /// namespace for the test.
    ///
    /// # Errors
    /// [`Error::NoSharedControlPlane`] when the variable is not set (the test was not run
    /// through `booking-control-plane run`), or [`Error::Kube`].
    pub async fn shared(label: &str) -> Result<TestCluster> {
        let kubeconfig = std::env::var_os(SHARED_KUBECONFIG_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .ok_or(Error::NoSharedControlPlane)?;
        Self::attach(&kubeconfig, label).await
    }

    /// A namespace for the test on the control plane of `kubeconfig`.
    ///
    /// # Errors
    /// [`Error::Kube`].
    pub async fn attach(kubeconfig: &Path, label: &str) -> Result<TestCluster> {
        let namespace = unique_name(label);
        let client = client_from(kubeconfig, None).await?;
        let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
        let ns: k8s_openapi::api::core::v1::Namespace =
            serde_json::from_value(json!({"metadata": {"name": namespace}})).expect("namespace");
        api.create(&kube::api::PostParams::default(), &ns)
            .await
            .map_err(|e| Error::Kube(format!("creating namespace {namespace}: {e}")))?;
        Ok(TestCluster {
            kubeconfig: kubeconfig.to_path_buf(),
            namespace,
        })
    }

    /// The admin kubeconfig.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The test's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// A kube client as the admin user.
    ///
    /// # Errors
    /// [`Error::Kube`].
    pub async fn client(&self) -> Result<kube::Client> {
        client_from(&self.kubeconfig, None).await
    }

    /// A kube client impersonating `user` in `groups` (the admin may impersonate anyone), as the
    /// API server then authorizes, admits and audits the requests.
    ///
    /// # Errors
    /// [`Error::Kube`].
    pub async fn client_as(&self, user: &str, groups: &[&str]) -> Result<kube::Client> {
        client_from(&self.kubeconfig, Some((user, groups))).await
    }

    /// The real `kubectl` of the control plane's release, with `--kubeconfig` set.
    ///
    /// # Errors
    /// [`Error::ControlPlaneBinaries`].
    pub fn kubectl(&self) -> Result<Command> {
        let mut c = Command::new(binary("kubectl")?);
        c.arg("--kubeconfig").arg(&self.kubeconfig);
        Ok(c)
    }

    /// Server-side applies manifest files with `kubectl apply --server-side --force-conflicts`
    /// (field manager `booking-tests`) and, for CustomResourceDefinitions among them, waits
    /// until they are established.
    ///
    /// # Errors
    /// [`Error::Kube`] with kubectl's message.
    pub fn apply_files(&self, files: &[&Path]) -> Result<()> {
        let mut apply = self.kubectl()?;
        apply.args([
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=booking-tests",
        ]);
        for f in files {
            apply.arg("-f").arg(f);
        }
        let out = run(apply)?;
        let crds: Vec<&str> = out
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|n| n.starts_with("customresourcedefinition"))
            .collect();
        if !crds.is_empty() {
            let mut wait = self.kubectl()?;
            wait.args(["wait", "--for=condition=Established", "--timeout=60s"])
                .args(&crds);
            run(wait)?;
        }
        Ok(())
    }

    /// Installs the shipped CustomResourceDefinitions ([`crate::paths::crd_files`]) with
    /// [`TestCluster::apply_files`] and waits until they are established.
    ///
    /// # Errors
    /// As [`TestCluster::apply_files`].
    pub fn apply_shipped_crds(&self) -> Result<()> {
        let files = crate::paths::crd_files();
        let files: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
        self.apply_files(&files)
    }
}

/// Runs a command; its stdout, or [`Error::Kube`] with its stderr.
fn run(mut c: Command) -> Result<String> {
    let out = c
        .output()
        .map_err(|e| Error::io(format!("running {c:?}"), e))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(Error::Kube(format!(
            "{c:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

/// `label` made into a DNS label with a random suffix: `[a-z0-9-]`, at most 63 characters.
pub fn unique_name(label: &str) -> String {
    let mut base: String = label
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    base.truncate(50);
    let base = base.trim_matches('-');
    let suffix: u32 = {
        use std::hash::{BuildHasher as _, Hasher as _};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos(),
        );
        h.write_u32(std::process::id());
        h.finish() as u32
    };
    format!("{base}-{suffix:08x}")
}

/// Webhook configurations registered as shipped, but for where the API server calls the webhook:
/// each webhook's Service reference becomes `clientConfig.url` — `base_url` (the local webhook,
/// `https://127.0.0.1:<port>`) followed by the Service's path — with `caBundle` the CA that
/// signed the local webhook's certificate. Nothing else changes. A control plane on 127.0.0.1
/// has no cluster network to reach a Service through.
#[derive(Clone, Debug)]
pub struct LocalWebhooks {
    /// The mutating configurations.
    pub mutating: Vec<MutatingWebhookConfiguration>,
    /// The validating configurations.
    pub validating: Vec<ValidatingWebhookConfiguration>,
}

impl LocalWebhooks {
    /// Reads the webhook configurations of `manifest` (multi-document YAML) and points them at
    /// `base_url`, trusting `ca_pem`.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be read, [`Error::Protocol`] when it holds something
    /// else, a webhook without a Service path, or no configuration at all.
    pub fn from_manifest(manifest: &Path, base_url: &str, ca_pem: &str) -> Result<LocalWebhooks> {
        use serde::Deserialize as _;
        let bad = |message: String| Error::Protocol {
            what: manifest.display().to_string(),
            message,
        };
        let text = std::fs::read_to_string(manifest)
            .map_err(|e| Error::io(format!("reading {}", manifest.display()), e))?;
        let mut out = LocalWebhooks {
            mutating: Vec::new(),
            validating: Vec::new(),
        };
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let yaml = serde_yaml::Value::deserialize(doc).map_err(|e| bad(e.to_string()))?;
            let mut value = serde_json::to_value(yaml).map_err(|e| bad(e.to_string()))?;
            if value.is_null() {
                continue;
            }
            for webhook in value["webhooks"].as_array_mut().into_iter().flatten() {
                let path = webhook["clientConfig"]["service"]["path"]
                    .as_str()
                    .ok_or_else(|| bad(format!("a webhook calls no Service path: {webhook}")))?
                    .to_owned();
                webhook["clientConfig"] = json!({
                    "url": format!("{base_url}{path}"),
                    "caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem),
                });
            }
            match value["kind"].as_str() {
                Some("MutatingWebhookConfiguration") => out
                    .mutating
                    .push(serde_json::from_value(value).map_err(|e| bad(e.to_string()))?),
                Some("ValidatingWebhookConfiguration") => out
                    .validating
                    .push(serde_json::from_value(value).map_err(|e| bad(e.to_string()))?),
                other => return Err(bad(format!("unexpected kind {other:?}"))),
            }
        }
        if out.mutating.is_empty() && out.validating.is_empty() {
            return Err(bad("no webhook configuration".into()));
        }
        Ok(out)
    }

    /// Every configuration as a JSON document (for `kubectl apply -f -`).
    pub fn documents(&self) -> Vec<Value> {
        let mut docs: Vec<Value> = Vec::new();
        for c in &self.mutating {
            let mut v = serde_json::to_value(c).expect("a configuration serializes");
            v["apiVersion"] = json!("admissionregistration.k8s.io/v1");
            v["kind"] = json!("MutatingWebhookConfiguration");
            docs.push(v);
        }
        for c in &self.validating {
            let mut v = serde_json::to_value(c).expect("a configuration serializes");
            v["apiVersion"] = json!("admissionregistration.k8s.io/v1");
            v["kind"] = json!("ValidatingWebhookConfiguration");
            docs.push(v);
        }
        docs
    }

    /// Registers them (server-side apply, field manager `booking-tests`).
    ///
    /// # Errors
    /// [`Error::Kube`] with the API server's answer.
    pub async fn register(&self, client: &kube::Client) -> Result<()> {
        let params = kube::api::PatchParams::apply("booking-tests").force();
        let named = |name: &Option<String>| name.clone().unwrap_or_default();
        for c in &self.mutating {
            let api: kube::Api<MutatingWebhookConfiguration> = kube::Api::all(client.clone());
            let name = named(&c.metadata.name);
            api.patch(&name, &params, &kube::api::Patch::Apply(c))
                .await
                .map_err(|e| Error::Kube(format!("registering {name}: {e}")))?;
        }
        for c in &self.validating {
            let api: kube::Api<ValidatingWebhookConfiguration> = kube::Api::all(client.clone());
            let name = named(&c.metadata.name);
            api.patch(&name, &params, &kube::api::Patch::Apply(c))
                .await
                .map_err(|e| Error::Kube(format!("registering {name}: {e}")))?;
        }
        Ok(())
    }

    /// Deletes them.
    ///
    /// # Errors
    /// [`Error::Kube`] with the API server's answer.
    pub async fn unregister(&self, client: &kube::Client) -> Result<()> {
        let params = kube::api::DeleteParams::default();
        let named = |name: &Option<String>| name.clone().unwrap_or_default();
        for c in &self.mutating {
            let api: kube::Api<MutatingWebhookConfiguration> = kube::Api::all(client.clone());
            let name = named(&c.metadata.name);
            api.delete(&name, &params)
                .await
                .map_err(|e| Error::Kube(format!("deleting {name}: {e}")))?;
        }
        for c in &self.validating {
            let api: kube::Api<ValidatingWebhookConfiguration> = kube::Api::all(client.clone());
            let name = named(&c.metadata.name);
            api.delete(&name, &params)
                .await
                .map_err(|e| Error::Kube(format!("deleting {name}: {e}")))?;
        }
        Ok(())
    }
}
