//! An in-memory Kubernetes API server for tests and the local sandbox.
//!
//! No real kube-apiserver can run on the project's machines, yet the controller, the webhook and
//! the real `kubectl` must be exercised end to end. This crate speaks the Kubernetes REST API
//! closely enough for the **unmodified** kube-rs clients (Api, watcher/reflector, Controller,
//! Lease-based leader election) and kubectl 1.27–1.33 (`apply` client- and server-side,
//! `create`, `get` with tables, `-o yaml`, `-w`, `describe`, `patch`, `delete`, `explain`).
//! Nothing in the product knows this server exists.
//!
//! # Library use
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use kube_test_server::{Options, TestServer};
//! let server = TestServer::start(Options::default()).await?;
//! let client: kube::Client = server.client().await?;          // as the admin user
//! let _alice = server.client_for("alice").await?;              // a user given in Options::users
//! println!("{} {}", server.url(), server.kubeconfig_path().display()); // KUBECONFIG for kubectl
//! server.apply_yaml("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo\n").await?;
//! server.controls().expire_next_watches(1);                    // resilience hooks
//! server.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! - [`TestServer::start`] binds `127.0.0.1` (port 0 = any free port), plain HTTP or HTTPS with
//!   a CA generated at start ([`Options::https`]), and writes a kubeconfig (one context per user,
//!   the first user current). Bearer tokens map to users and groups ([`TokenUser`]), which reach
//!   admission webhooks as `userInfo`. Requests without a token are `system:anonymous`. There is
//!   no authorization: every user may do everything.
//! - kubectl (client-go) sends bearer tokens over TLS only: start with [`Options::https`] when
//!   kubectl's requests must carry a user (admission `userInfo`); kube-rs sends them either way.
//! - [`tls::CertificateAuthority`] makes a CA and serving certificates at test time, e.g. for a
//!   webhook listening on `127.0.0.1` (its `caBundle` is [`tls::CertificateAuthority::ca_bundle`]).
//! - [`TestServer::apply_yaml`] server-side applies a multi-document manifest (CRDs, samples,
//!   webhook configurations) as the admin user.
//! - [`Controls`] (also over HTTP, under `/_testserver/`): make the next N watches answer
//!   410 Gone (`POST /_testserver/watch/expire {"count": N}`), close all open watches
//!   (`POST /_testserver/watch/close`), forget the watch history (`POST
//!   /_testserver/history/compact`), fail the next N requests whose path contains a string
//!   (`POST /_testserver/faults {"pathContains": "/leases/", "method": "PUT", "count": 2,
//!   "code": 500}`), and clear faults (`DELETE /_testserver/faults`).
//! - The binary `kube-test-server --port 6443 --kubeconfig-out PATH --token
//!   TOKEN=user:group1,group2 [--https] [--service-endpoint ns/name=https://127.0.0.1:8443]`
//!   prints `kube-test-server ready at <url> (kubeconfig <path>)` and runs until SIGINT/SIGTERM.
//!
//! # What it serves
//!
//! - Discovery: `/version` (reports v1.33), `/api`, `/apis`, `/api/v1`, `/apis/{g}`,
//!   `/apis/{g}/{v}` (legacy discovery; aggregated discovery is not offered, so clients fall
//!   back, as they do against older servers).
//! - OpenAPI v3: `/openapi/v3` and per group-version documents (PATCH operations with a single
//!   `x-kubernetes-group-version-kind` and the `fieldValidation` parameter, so kubectl validates
//!   server-side with `fieldValidation=Strict`; components for `kubectl explain`). OpenAPI v2
//!   (`/openapi/v2`, protobuf) carries only those PATCH operations and no definitions: kubectl
//!   1.27 reads it before every apply.
//! - Request bodies in JSON or YAML; `application/vnd.kubernetes.protobuf` only for the kinds
//!   kubectl's generators send that way (`create configmap|secret|namespace|serviceaccount`).
//!   Responses are always JSON.
//! - Kinds: Namespace, Secret, ConfigMap, ServiceAccount, Event (core/v1 and events.k8s.io/v1,
//!   one storage, converted), Lease, CustomResourceDefinition (creating one serves its types at
//!   once, with `Established`), Validating/MutatingWebhookConfiguration; Deployment, Service,
//!   Role/RoleBinding/ClusterRole/ClusterRoleBinding and PodDisruptionBudget stored without
//!   behaviour.
//! - Object semantics: uid, creationTimestamp, one global resourceVersion, generation bumped on
//!   changes outside metadata and status, 409 on stale resourceVersion, `metav1.Status` errors
//!   (NotFound, AlreadyExists, Conflict, Invalid with causes), no-op updates keep the
//!   resourceVersion, status subresource, finalizers and deletionTimestamp, namespace deletion
//!   removing contents, label and field selectors, list with `limit`/`continue`, watch with
//!   `resourceVersion`, `allowWatchBookmarks`, `timeoutSeconds`, `sendInitialEvents` and 410 Gone
//!   for compacted versions, `dryRun=All`, `fieldValidation` (Strict/Warn/Ignore).
//! - Tables (`as=Table`) with a CRD's `additionalPrinterColumns`; `PartialObjectMetadata`.
//! - Label keys and values and `metadata.name` are validated with the real server's messages;
//!   background garbage collection follows `ownerReferences`.
//! - Custom resources: unknown fields pruned (or rejected under Strict), schema defaults applied,
//!   structural validation with the real server's messages, CEL `x-kubernetes-validations`
//!   evaluated with `kube::core::cel` (including transition rules on update).
//! - Admission in the real order: mutating webhooks → schema validation → validating webhooks
//!   → persist; rules, scope, namespaceSelector and objectSelector; AdmissionReview v1 over HTTPS
//!   verified against `caBundle`; JSONPatch responses; `reinvocationPolicy`; `timeoutSeconds`;
//!   `failurePolicy`; `sideEffects` with dry run; denials as the real server words them;
//!   warnings as `Warning: 299` headers.
//!
//! # What differs from a real API server
//!
//! - Everything lives in memory; the watch history keeps the last [`Options::history_limit`]
//!   events (older resourceVersions answer 410 Gone). List `resourceVersion`/
//!   `resourceVersionMatch` are ignored (lists are always current); `continue` tokens are
//!   offsets, not snapshots.
//! - No authorization (RBAC objects are stored only), no built-in admission plugins beyond
//!   namespace existence/termination, no controllers (Deployments never get Pods; namespace
//!   deletion is immediate once its contents are gone). Garbage collection is background only
//!   and immediate: removing an owner deletes dependents without another live owner
//!   (`propagationPolicy: Orphan` skips it but leaves their `ownerReferences`; `Foreground` is
//!   treated as background).
//! - Server-side apply is simplified: the applied configuration is merged into the live object
//!   (maps merged, **lists are atomic** — no `x-kubernetes-list-type: map` merging), a field the
//!   same manager applied before and no longer applies is removed unless another manager owns
//!   it, conflicts are detected at leaf level against other managers' fields (`force=true` takes
//!   them over), and `managedFields` are recorded in the `FieldsV1` format at that granularity.
//!   Updates take ownership of the leaf fields they change.
//! - Strategic merge patch (built-in kinds only; custom resources get 415 as on a real server)
//!   uses merge semantics plus the directives `$patch`, `$retainKeys`,
//!   `$deleteFromPrimitiveList` and `$setElementOrder` (whose entries reveal the merge key);
//!   a list without `$setElementOrder` is replaced.
//! - Built-in kinds have no schemas: strict field validation checks only their top-level
//!   fields (and `metadata`), and their OpenAPI documents are minimal.
//! - CEL rules run on `kube::core::cel` (kube-cel), which escapes every `_` in property names
//!   where the real server escapes only `__`; field selections such as `self.end_at` are
//!   rewritten before compiling so that rules written for a real cluster work unchanged.
//!   CEL cost limits are not enforced.
//! - CRD conversion is `None` only (versions differ in `apiVersion` only); CRD status is set
//!   at once; `x-kubernetes-list-type`/`-map-keys` are not enforced; `metadata.generateName`
//!   is resolved before admission.
//! - Webhooks given by `clientConfig.service` are reached only through
//!   [`Options::service_endpoints`] (`namespace/name` → `https://HOST:PORT`; the certificate is
//!   still verified for `<name>.<namespace>.svc`, as in a cluster). A webhook without
//!   `caBundle` fails (no system roots are consulted). Mutating webhooks are not called for
//!   DELETE, and no webhook for deletecollection. `reinvocationPolicy: IfNeeded` re-invokes
//!   once, in order, the webhooks that ran before a later change. `matchPolicy: Equivalent` and
//!   `matchConditions` are not implemented; validating webhooks run one after another, not in
//!   parallel.
//! - Kinds the manifests may also contain but a bare cluster lacks (cert-manager's Certificate
//!   and Issuer) are not served: apply their CRDs first, as on a real cluster.
//! - Aggregated discovery, protobuf responses, CBOR, `/apis/.../watch/...` paths beyond the
//!   resource prefix, `kubectl auth`, `exec`/`logs`/`port-forward` and any Pod behaviour are not
//!   offered.
//!
//! # Tests
//!
//! `cargo nextest run -p kube-test-server` (or `cargo test -p kube-test-server`): unit tests per
//! module, and integration tests with kube-rs (`tests/kube_rs.rs`), the real kubectl — default,
//! 1.27 and 1.33 (`tests/kubectl.rs`), admission webhooks (`tests/admission.rs`) and the binary
//! (`tests/binary.rs`). They take about 10 s once built.

pub mod admission;
mod handlers;
pub mod openapi;
pub mod patch;
pub mod protobuf;
pub mod registry;
pub mod schema;
pub mod selector;
mod server;
pub mod status;
pub mod store;
pub mod table;
pub mod tls;
mod watch;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

pub use admission::UserInfo;
pub use server::FaultRule;

/// The Kubernetes version this server reports (`/version`).
pub const SERVER_GIT_VERSION: &str = "v1.33.0";

/// The `/version` document.
pub fn version_info() -> Value {
    json!({
        "major": "1", "minor": "33", "gitVersion": SERVER_GIT_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.24.0", "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// Errors of starting the server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Binding or I/O failed.
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    /// Generating certificates failed.
    #[error("certificates: {0}")]
    Certificates(String),
    /// A kube client could not be built.
    #[error("kube client: {0}")]
    Kube(String),
    /// A flag or option is invalid.
    #[error("invalid option: {0}")]
    Invalid(String),
}

/// A bearer token and the user it authenticates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenUser {
    /// The bearer token.
    pub token: String,
    /// The user name (also the kubeconfig user and context name).
    pub username: String,
    /// Groups (`system:authenticated` is added).
    pub groups: Vec<String>,
}

impl TokenUser {
    /// A user with a token derived from its name.
    pub fn new(username: &str, groups: &[&str]) -> Self {
        TokenUser {
            token: format!("{username}-token"),
            username: username.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    /// Parse `TOKEN=user:group1,group2` (groups optional).
    pub fn parse(s: &str) -> Result<Self, Error> {
        let (token, rest) = s.split_once('=').ok_or_else(|| {
            Error::Invalid(format!("token {s:?} is not TOKEN=user[:group1,group2]"))
        })?;
        let (user, groups) = rest.split_once(':').unwrap_or((rest, ""));
        if token.is_empty() || user.is_empty() {
            return Err(Error::Invalid(format!(
                "token {s:?} needs a token and a user name"
            )));
        }
        Ok(TokenUser {
            token: token.into(),
            username: user.into(),
            groups: groups
                .split(',')
                .filter(|g| !g.is_empty())
                .map(String::from)
                .collect(),
        })
    }
}

/// How to start the server.
#[derive(Clone, Debug)]
pub struct Options {
    /// Port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// Serve HTTPS with a CA generated at start (its certificate goes into the kubeconfig).
    pub https: bool,
    /// Users by bearer token; the first is the kubeconfig's current context. Default: `admin`
    /// in `system:masters`.
    pub users: Vec<TokenUser>,
    /// Where to write the kubeconfig; default: a file in a fresh temporary directory.
    pub kubeconfig_out: Option<PathBuf>,
    /// Interval of watch bookmarks (the real server sends them about once a minute).
    pub bookmark_interval: Duration,
    /// Events kept for watches.
    pub history_limit: usize,
    /// `namespace/name` of a webhook's `clientConfig.service` → `https://HOST:PORT` to connect to
    /// (the webhook's certificate is verified for `<name>.<namespace>.svc`).
    pub service_endpoints: BTreeMap<String, String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            port: 0,
            https: false,
            users: vec![TokenUser::new("admin", &["system:masters"])],
            kubeconfig_out: None,
            bookmark_interval: Duration::from_secs(5),
            history_limit: 10_000,
            service_endpoints: BTreeMap::new(),
        }
    }
}

/// Handle on the fault-injection hooks (see the crate docs).
#[derive(Clone)]
pub struct Controls {
    shared: Arc<server::Shared>,
}

impl Controls {
    /// The next `n` watches answer with a 410 Gone (`Expired`) error event.
    pub fn expire_next_watches(&self, n: u32) {
        self.shared.faults().expire_watches += n;
    }

    /// Close every open watch now (clients see the stream end and re-watch).
    pub fn close_watches(&self) {
        self.shared.close_watches.send_modify(|v| *v += 1);
    }

    /// Forget the event history: watches from any existing resourceVersion answer 410 Gone.
    pub fn compact_history(&self) {
        self.shared.lock().compact();
    }

    /// Fail requests per `rule`.
    pub fn fail_requests(&self, rule: FaultRule) {
        self.shared.faults().rules.push(rule);
    }

    /// Remove all fault rules and pending watch expiries.
    pub fn clear_faults(&self) {
        let mut f = self.shared.faults();
        f.rules.clear();
        f.expire_watches = 0;
    }

    /// The latest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.lock().rv
    }
}

/// A running server. Dropping it stops the listener (prefer [`TestServer::shutdown`]).
pub struct TestServer {
    url: String,
    addr: SocketAddr,
    kubeconfig_path: PathBuf,
    temp_dir: Option<PathBuf>,
    kubeconfig: kube::config::Kubeconfig,
    users: Vec<TokenUser>,
    ca_pem: Option<String>,
    shared: Arc<server::Shared>,
    shutdown: tokio::sync::watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl TestServer {
    /// Start the server.
    pub async fn start(options: Options) -> Result<TestServer, Error> {
        // The clients and TLS configs built here use aws-lc-rs; make it the process default if
        // nothing else is installed yet.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let users = if options.users.is_empty() {
            Options::default().users
        } else {
            options.users.clone()
        };
        let tokens = users
            .iter()
            .map(|u| {
                let mut groups = u.groups.clone();
                if !groups.iter().any(|g| g == "system:authenticated") {
                    groups.push("system:authenticated".into());
                }
                (
                    u.token.clone(),
                    UserInfo {
                        username: u.username.clone(),
                        groups,
                    },
                )
            })
            .collect();
        let listener = TcpListener::bind(("127.0.0.1", options.port)).await?;
        let addr = listener.local_addr()?;
        let (tls, ca_pem) = if options.https {
            let ca = tls::CertificateAuthority::new("kube-test-server CA")
                .map_err(|e| Error::Certificates(e.to_string()))?;
            let cert = ca
                .issue(&["localhost", "127.0.0.1"])
                .map_err(|e| Error::Certificates(e.to_string()))?;
            let cfg = cert
                .server_config(&[b"http/1.1"])
                .map_err(|e| Error::Certificates(e.to_string()))?;
            (
                Some(tokio_rustls::TlsAcceptor::from(cfg)),
                Some(ca.cert_pem()),
            )
        } else {
            (None, None)
        };
        let scheme = if options.https { "https" } else { "http" };
        let url = format!("{scheme}://{addr}");
        let mut state = store::State::new(options.history_limit.max(1));
        handlers::bootstrap(&mut state);
        let (close_tx, _) = tokio::sync::watch::channel(0u64);
        let shared = Arc::new(server::Shared {
            state: Mutex::new(state),
            tokens,
            services: options.service_endpoints.clone(),
            faults: Mutex::new(server::Faults::default()),
            close_watches: close_tx,
            bookmark_interval: options.bookmark_interval,
            address: Mutex::new(addr.to_string()),
        });
        let (temp_dir, kubeconfig_path) = match &options.kubeconfig_out {
            Some(p) => (None, p.clone()),
            None => {
                let dir = std::env::temp_dir().join(format!(
                    "kube-test-server-{}-{}",
                    std::process::id(),
                    uuid::Uuid::new_v4().simple()
                ));
                std::fs::create_dir_all(&dir)?;
                (Some(dir.clone()), dir.join("kubeconfig"))
            }
        };
        let kubeconfig = make_kubeconfig(&url, ca_pem.as_deref(), &users);
        let yaml = serde_yaml::to_string(&kubeconfig).map_err(|e| Error::Kube(e.to_string()))?;
        if let Some(parent) = kubeconfig_path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
        {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&kubeconfig_path, yaml)?;
        let (shutdown, mut shutdown_rx) = tokio::sync::watch::channel(false);
        let serve_shared = shared.clone();
        let task = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                tokio::select! {
                    _ = shutdown_rx.changed() => break,
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        let shared = serve_shared.clone();
                        let tls = tls.clone();
                        conns.spawn(async move {
                            let svc = service_fn(move |req| server::handle(shared.clone(), req));
                            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                            let result = match tls {
                                Some(acceptor) => match acceptor.accept(stream).await {
                                    Ok(s) => builder.serve_connection(TokioIo::new(s), svc).await,
                                    Err(e) => {
                                        tracing::debug!(error = %e, "TLS handshake failed");
                                        return;
                                    }
                                },
                                None => builder.serve_connection(TokioIo::new(stream), svc).await,
                            };
                            if let Err(e) = result {
                                tracing::debug!(error = %e, "connection ended with an error");
                            }
                        });
                    }
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
            conns.abort_all();
            while conns.join_next().await.is_some() {}
        });
        Ok(TestServer {
            url,
            addr,
            kubeconfig_path,
            temp_dir,
            kubeconfig,
            users,
            ca_pem,
            shared,
            shutdown,
            task: Some(task),
        })
    }

    /// Base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The kubeconfig file written at start (for `KUBECONFIG` / `--kubeconfig`).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// The kubeconfig (one context per user, named after the user).
    pub fn kubeconfig(&self) -> &kube::config::Kubeconfig {
        &self.kubeconfig
    }

    /// The CA certificate (PEM) of an HTTPS server.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// The bearer token of `user`.
    pub fn token_of(&self, user: &str) -> Option<&str> {
        self.users
            .iter()
            .find(|u| u.username == user)
            .map(|u| u.token.as_str())
    }

    /// A kube client as the first (admin) user.
    pub async fn client(&self) -> Result<kube::Client, Error> {
        let first = self
            .users
            .first()
            .map(|u| u.username.clone())
            .unwrap_or_default();
        self.client_for(&first).await
    }

    /// A kube client authenticated as `user` (a user of [`Options::users`]).
    pub async fn client_for(&self, user: &str) -> Result<kube::Client, Error> {
        if self.token_of(user).is_none() {
            return Err(Error::Invalid(format!("no such user {user:?}")));
        }
        let opts = kube::config::KubeConfigOptions {
            context: Some(user.to_string()),
            ..Default::default()
        };
        let config = kube::Config::from_custom_kubeconfig(self.kubeconfig.clone(), &opts)
            .await
            .map_err(|e| Error::Kube(e.to_string()))?;
        kube::Client::try_from(config).map_err(|e| Error::Kube(e.to_string()))
    }

    /// Server-side apply every document of a (multi-document) YAML manifest as the admin user,
    /// with field manager `kube-test-server`; returns the applied objects. Objects without a
    /// namespace land in `default` when their kind is namespaced. Stops at the first error.
    pub async fn apply_yaml(&self, yaml: &str) -> Result<Vec<Value>, Error> {
        use serde::Deserialize;
        let client = self.client().await?;
        let mut out = Vec::new();
        for doc in serde_yaml::Deserializer::from_str(yaml) {
            let value =
                Value::deserialize(doc).map_err(|e| Error::Invalid(format!("manifest: {e}")))?;
            if value.is_null() {
                continue;
            }
            let api_version = value["apiVersion"].as_str().unwrap_or_default();
            let kind = value["kind"].as_str().unwrap_or_default();
            let name = value["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            let t = self
                .shared
                .lock()
                .registry
                .by_kind(group, kind)
                .ok_or_else(|| {
                    Error::Invalid(format!("kind {kind} of {api_version} is not served"))
                })?;
            let gvk = kube::core::GroupVersionKind::gvk(group, version, kind);
            let ar = kube::core::ApiResource::from_gvk_with_plural(&gvk, &t.plural);
            let api: kube::Api<kube::core::DynamicObject> = if t.namespaced {
                let ns = value["metadata"]["namespace"].as_str().unwrap_or("default");
                kube::Api::namespaced_with(client.clone(), ns, &ar)
            } else {
                kube::Api::all_with(client.clone(), &ar)
            };
            let applied = api
                .patch(
                    &name,
                    &kube::api::PatchParams::apply("kube-test-server").force(),
                    &kube::api::Patch::Apply(&value),
                )
                .await
                .map_err(|e| Error::Kube(format!("applying {kind} {name:?}: {e}")))?;
            out.push(serde_json::to_value(applied).map_err(|e| Error::Kube(e.to_string()))?);
        }
        Ok(out)
    }

    /// Fault-injection hooks.
    pub fn controls(&self) -> Controls {
        Controls {
            shared: self.shared.clone(),
        }
    }

    /// Stop listening, close every connection and watch, and remove the temporary kubeconfig.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.cleanup();
    }

    fn cleanup(&mut self) {
        if let Some(dir) = self.temp_dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.cleanup();
    }
}

fn make_kubeconfig(
    url: &str,
    ca_pem: Option<&str>,
    users: &[TokenUser],
) -> kube::config::Kubeconfig {
    use base64::Engine;
    let mut cluster = json!({"server": url});
    if let Some(pem) = ca_pem {
        cluster["certificate-authority-data"] =
            json!(base64::engine::general_purpose::STANDARD.encode(pem));
    }
    let v = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kube-test-server", "cluster": cluster}],
        "users": users.iter().map(|u| json!({"name": u.username, "user": {"token": u.token}})).collect::<Vec<_>>(),
        "contexts": users.iter().map(|u| json!({"name": u.username,
            "context": {"cluster": "kube-test-server", "user": u.username, "namespace": "default"}})).collect::<Vec<_>>(),
        "current-context": users.first().map(|u| u.username.clone()).unwrap_or_default(),
        "preferences": {},
    });
    serde_json::from_value(v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_flags_parse() {
        let t = TokenUser::parse("abc=alice:dev,ops").unwrap();
        assert_eq!(t.token, "abc");
        assert_eq!(t.username, "alice");
        assert_eq!(t.groups, vec!["dev", "ops"]);
        assert_eq!(
            TokenUser::parse("abc=bob").unwrap().groups,
            Vec::<String>::new()
        );
        assert!(TokenUser::parse("nouser").is_err());
        assert!(TokenUser::parse("=x").is_err());
    }
}
