//! The controller's own identity on a bench control plane, and the API requests it makes, read
//! from kube-apiserver's audit log.
//!
//! The controller runs as the shipped ServiceAccount with the shipped RBAC
//! (`manifests/namespace.yaml`, `manifests/rbac-controller.yaml`, created through the API), from
//! a kubeconfig holding a token of that ServiceAccount (TokenRequest API). The API server writes
//! one audit event per stage of each request of that user, at level `Metadata` (verb, resource,
//! subresource, name, status code, timestamps; no bodies), and nothing for any other user, so the
//! log holds exactly the controller's requests, counted on the server side.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, bail};
use chrono::{DateTime, Utc};
use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    core::v1::ServiceAccount,
};
use kube::{
    Api,
    api::PostParams,
    core::{DynamicObject, GroupVersionKind, TypeMeta},
    discovery::ApiResource,
};
use serde::Deserialize as _;
use serde_json::json;

/// Namespace of the controller's ServiceAccount in the shipped manifests.
pub const CONTROLLER_NAMESPACE: &str = "resource-booking-operator-system";
/// The controller's ServiceAccount in the shipped manifests.
pub const CONTROLLER_ACCOUNT: &str = "resource-booking-operator-controller-manager";

/// The user name the API server gives the controller's ServiceAccount.
pub fn controller_user() -> String {
    format!("system:serviceaccount:{CONTROLLER_NAMESPACE}:{CONTROLLER_ACCOUNT}")
}

/// Writes an audit policy (level `Metadata` for the controller's user, nothing for anyone else;
/// no `RequestReceived` stage) into `dir` and returns the kube-apiserver flags that log to
/// `<dir>/audit.log`, with the log's path.
pub fn apiserver_args(dir: &Path) -> anyhow::Result<(Vec<String>, PathBuf)> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let policy = dir.join("audit-policy.yaml");
    let log = dir.join("audit.log");
    let text = serde_json::to_string_pretty(&json!({
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "Metadata", "users": [controller_user()]},
            {"level": "None"},
        ],
    }))?;
    std::fs::write(&policy, text).with_context(|| format!("writing {}", policy.display()))?;
    Ok((
        vec![
            format!("--audit-policy-file={}", policy.display()),
            format!("--audit-log-path={}", log.display()),
            "--audit-log-format=json".into(),
            // Written as each request completes, not batched.
            "--audit-log-mode=blocking".into(),
            "--audit-log-maxsize=0".into(),
        ],
        log,
    ))
}

/// Creates the shipped namespace, ServiceAccount and RBAC of the controller through the API
/// (as `admin`), requests a token of that ServiceAccount and writes a kubeconfig using it to
/// `path`, for the API server at `server` whose CA is `ca_pem`.
pub async fn controller_kubeconfig(
    admin: &kube::Client,
    server: &str,
    ca_pem: &str,
    path: &Path,
) -> anyhow::Result<()> {
    let root = booking_harness::paths::repo_root();
    for file in ["manifests/namespace.yaml", "manifests/rbac-controller.yaml"] {
        create_manifest(admin, &root.join(file)).await?;
    }
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), CONTROLLER_NAMESPACE);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            // Longer than any run of the bench.
            expiration_seconds: Some(6 * 3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = accounts
        .create_token_request(CONTROLLER_ACCOUNT, &PostParams::default(), &request)
        .await
        .context("requesting a token of the controller's ServiceAccount")?
        .status
        .map(|s| s.token)
        .context("the TokenRequest has no status")?;
    use base64::Engine as _;
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "bench", "cluster": {
            "server": server,
            "certificate-authority-data": base64::engine::general_purpose::STANDARD.encode(ca_pem),
        }}],
        "users": [{"name": "controller", "user": {"token": token}}],
        "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "controller"}}],
        "current-context": "bench",
    });
    std::fs::write(path, serde_json::to_vec_pretty(&config)?)
        .with_context(|| format!("writing {}", path.display()))
}

/// Creates every document of a YAML manifest through the API.
async fn create_manifest(client: &kube::Client, file: &Path) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value = serde_yaml::Value::deserialize(doc)?;
        if value.is_null() {
            continue;
        }
        let obj: DynamicObject = serde_yaml::from_value(value)
            .with_context(|| format!("a document of {}", file.display()))?;
        let types: &TypeMeta = obj
            .types
            .as_ref()
            .with_context(|| format!("a document of {} has no kind", file.display()))?;
        let gvk = GroupVersionKind::try_from(types)?;
        let ar = ApiResource::from_gvk(&gvk);
        let api: Api<DynamicObject> = match obj.metadata.namespace.as_deref() {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        api.create(&PostParams::default(), &obj)
            .await
            .with_context(|| {
                format!(
                    "creating {} {:?} of {}",
                    gvk.kind,
                    obj.metadata.name,
                    file.display()
                )
            })?;
    }
    Ok(())
}

/// One request of the controller, from its audit events.
#[derive(Debug, Clone)]
pub struct Request {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, ...
    pub verb: String,
    /// The resource, with `/<subresource>` when there is one (`bookings/status`).
    pub resource: String,
    /// The object's name, when the request names one.
    pub name: Option<String>,
    /// When the API server received it.
    pub received: DateTime<Utc>,
    /// The answer's status code (0 while a watch is still open).
    pub code: u16,
}

/// Every request of the log, once each (by audit ID), in the order received.
pub fn read(log: &Path) -> anyhow::Result<Vec<Request>> {
    let text = match std::fs::read_to_string(log) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", log.display())),
    };
    let mut by_id: BTreeMap<String, Request> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
            // The last line may be half written.
            continue;
        };
        let Some(id) = event["auditID"].as_str() else {
            bail!("an audit event without auditID: {line}");
        };
        let code = event["responseStatus"]["code"]
            .as_u64()
            .and_then(|c| u16::try_from(c).ok())
            .unwrap_or(0);
        if let Some(seen) = by_id.get_mut(id) {
            seen.code = seen.code.max(code);
            continue;
        }
        let received = event["requestReceivedTimestamp"]
            .as_str()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .with_context(|| format!("no requestReceivedTimestamp in {line}"))?
            .with_timezone(&Utc);
        let object = &event["objectRef"];
        let mut resource = object["resource"]
            .as_str()
            .map_or_else(|| non_resource(&event), str::to_owned);
        if let Some(sub) = object["subresource"].as_str() {
            resource = format!("{resource}/{sub}");
        }
        by_id.insert(
            id.to_owned(),
            Request {
                verb: event["verb"].as_str().unwrap_or("?").to_owned(),
                resource,
                name: object["name"].as_str().map(str::to_owned),
                received,
                code,
            },
        );
    }
    let mut all: Vec<Request> = by_id.into_values().collect();
    all.sort_by_key(|r| r.received);
    Ok(all)
}

fn non_resource(event: &serde_json::Value) -> String {
    let uri = event["requestURI"].as_str().unwrap_or("?");
    uri.split('?').next().unwrap_or(uri).to_owned()
}

/// Requests received in `[from, to)`, counted by verb and by `verb resource`.
#[derive(Debug, Default, Clone)]
pub struct Counts {
    /// Every request.
    pub total: usize,
    /// By verb.
    pub by_verb: BTreeMap<String, usize>,
    /// By `verb resource`.
    pub by_verb_resource: BTreeMap<String, usize>,
}

impl Counts {
    /// Counts the requests of `all` received in `[from, to)`.
    pub fn between(all: &[Request], from: DateTime<Utc>, to: DateTime<Utc>) -> Counts {
        let mut c = Counts::default();
        for r in all.iter().filter(|r| r.received >= from && r.received < to) {
            c.total += 1;
            *c.by_verb.entry(r.verb.clone()).or_default() += 1;
            *c.by_verb_resource
                .entry(format!("{} {}", r.verb, r.resource))
                .or_default() += 1;
        }
        c
    }

    /// Requests of `verb`.
    pub fn verb(&self, verb: &str) -> usize {
        self.by_verb.get(verb).copied().unwrap_or(0)
    }

    /// Requests other than watches.
    pub fn without_watches(&self) -> usize {
        self.total - self.verb("watch")
    }
}
