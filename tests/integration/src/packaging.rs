//! What the packaging tests (`tests/packaging_*.rs`) share: the real tools of the tested
//! Kubernetes release, renders of the install as objects, checks of those objects, and a control
//! plane of a test's own with that release's kubectl and helm pointed at it.
//!
//! `kubectl` and `helm` are the control plane's binaries ([`control_plane::binary`]), of the same
//! release as the kube-apiserver the install tests apply to. Those tests install cluster-wide
//! objects (CRDs, ClusterRoles, webhook configurations), so each starts a control plane of its
//! own ([`Plane`]) rather than sharing the run's. A missing tool fails the test with that
//! message, it never skips it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use booking_harness::TestDir;
use booking_harness::control_plane::{self, ControlPlane, ControlPlaneOptions};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PodSpec, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::{output_with_stdin, parse_yaml_documents, repo_root};

/// The operator's namespace in the kustomize base (and the Helm tests' release namespace).
pub const NAMESPACE: &str = "resource-booking-operator-system";
/// The controller's service account (the one the IRSA trust policy names).
pub const CONTROLLER_SA: &str = "resource-booking-operator-controller-manager";
/// The webhook's service account.
pub const WEBHOOK_SA: &str = "resource-booking-operator-webhook";
/// The kinds the product's CRDs serve.
pub const CRD_KINDS: [&str; 5] = [
    "Booking",
    "BookingCalendar",
    "BookingScheduler",
    "Resource",
    "ResourceMonitor",
];
/// The kinds whose status the controller writes (a BookingCalendar has none: it is only read).
pub const STATUS_KINDS: [&str; 4] = ["Booking", "BookingScheduler", "Resource", "ResourceMonitor"];
/// The field manager Argo CD's server-side sync applies with.
pub const ARGO_CD_MANAGER: &str = "argocd-controller";

// === tools ===

/// Runs a command and returns its stdout; panics with the command, status and stderr on failure
/// and with `hint` when the program cannot be started.
pub fn run(cmd: &mut Command, hint: &str) -> String {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {shown}: {e}; {hint}"));
    assert!(
        out.status.success(),
        "{shown} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// A binary of the control plane's release (kubectl, helm), built or found by the harness.
pub fn tool(name: &str) -> PathBuf {
    control_plane::binary(name).unwrap_or_else(|e| panic!("{e}"))
}

/// The release's kubectl, with no kubeconfig of the machine's in reach.
pub fn kubectl_cmd() -> Command {
    let mut c = Command::new(tool("kubectl"));
    c.env("KUBECONFIG", "/dev/null");
    c
}

/// The release's helm, with its caches and configuration in `home` (nothing of the machine's).
pub fn helm_cmd(home: &Path) -> Command {
    let mut c = Command::new(tool("helm"));
    c.env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env("KUBECONFIG", "/dev/null");
    c
}

/// The Kubernetes release of the control plane's binaries (`v1.37.2`), which `helm template` and
/// `helm lint` render for: without a cluster Helm would check the chart's `kubeVersion` against
/// a built-in default instead.
pub fn kube_version() -> &'static str {
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VERSION.get_or_init(|| {
        let out = run(
            kubectl_cmd().args(["version", "--client", "-o", "json"]),
            "kubectl",
        );
        let v: Value = serde_json::from_str(&out).expect("kubectl version prints JSON");
        v["clientVersion"]["gitVersion"]
            .as_str()
            .expect("gitVersion")
            .to_owned()
    })
}

// === renders ===

/// Every YAML document a tool rendered, as JSON values.
pub fn yaml_documents(text: &str) -> Vec<Value> {
    parse_yaml_documents(text, "the rendered output")
}

/// `kubectl kustomize <dir>`, as objects.
pub fn kustomize(dir: &Path) -> Vec<Value> {
    let text = run(
        kubectl_cmd().arg("kustomize").arg(dir),
        "kubectl runs kustomize",
    );
    yaml_documents(&text)
}

/// The kustomize base, `manifests/`, rendered.
pub fn base() -> Vec<Value> {
    kustomize(&repo_root().join("manifests"))
}

/// An overlay of the kustomize base with `components` (names under `manifests/components/`),
/// rendered. kustomize takes only relative paths: the overlay's folder names the base from
/// itself up to `/`, then down.
pub fn base_with_components(components: &[&str]) -> Vec<Value> {
    let dir = TestDir::new("kustomize-overlay").expect("a folder for the overlay");
    let manifests = repo_root().join("manifests").canonicalize().unwrap();
    let up = "../".repeat(dir.path().canonicalize().unwrap().components().count() - 1);
    let base = format!(
        "{up}{}",
        manifests.display().to_string().trim_start_matches('/')
    );
    let mut overlay = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {base}\ncomponents:\n"
    );
    for c in components {
        overlay.push_str(&format!("  - {base}/components/{c}\n"));
    }
    std::fs::write(dir.path().join("kustomization.yaml"), overlay).unwrap();
    kustomize(dir.path())
}

/// An object's kind.
pub fn kind_of(o: &Value) -> &str {
    o["kind"].as_str().expect("every object has a kind")
}

/// An object's name.
pub fn name_of(o: &Value) -> &str {
    o["metadata"]["name"]
        .as_str()
        .expect("every object has a name")
}

/// The object of `kind` named `name`; panics when the render has none.
pub fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| kind_of(o) == kind && name_of(o) == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the render"))
}

/// Every object of `kind`.
pub fn all_of<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| kind_of(o) == kind).collect()
}

/// Deserialises `object` into its typed Kubernetes struct and back: a misspelt or misplaced
/// field (which the typed struct does not know) makes the two differ.
pub fn assert_round_trip<T: DeserializeOwned + Serialize>(object: &Value) {
    let what = format!("{} {}", kind_of(object), name_of(object));
    let typed: T = serde_json::from_value(object.clone())
        .unwrap_or_else(|e| panic!("{what} does not parse as its Kubernetes type: {e}"));
    let back = serde_json::to_value(&typed).unwrap();
    if let Some(diff) = first_difference(&normalise(object), &normalise(&back), "") {
        panic!(
            "{what}: changed by a round trip through its Kubernetes type (unknown or misplaced field?) at {diff}"
        );
    }
}

/// The path of the first place where two JSON values differ, with both sides.
pub fn first_difference(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => x
            .keys()
            .chain(y.keys())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .find_map(|k| {
                first_difference(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    &format!("{path}.{k}"),
                )
            }),
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| first_difference(p, q, &format!("{path}[{i}]"))),
        _ if a == b => None,
        _ => Some(format!("{path}: {a} vs {b}")),
    }
}

/// Drops empty maps and lists, which the typed structs may or may not write back, and writes
/// integral floats (`10080.0`, as typed schema bounds serialise) as integers.
pub fn normalise(v: &Value) -> Value {
    match v {
        Value::Number(n)
            if n.is_f64()
                && n.as_f64()
                    .is_some_and(|f| f.fract() == 0.0 && f.abs() < 1e15) =>
        {
            Value::from(n.as_f64().unwrap() as i64)
        }
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), normalise(v)))
                .filter(|(_, v)| !is_empty(v))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(normalise).collect()),
        other => other.clone(),
    }
}

fn is_empty(v: &Value) -> bool {
    matches!(v, Value::Object(m) if m.is_empty()) || matches!(v, Value::Array(a) if a.is_empty())
}

/// Checks one object of the install against its Kubernetes type or, for cert-manager kinds,
/// against the fields the install relies on.
pub fn assert_well_formed(o: &Value) {
    assert_eq!(
        o["metadata"]["name"].as_str().map(str::is_empty),
        Some(false)
    );
    match (o["apiVersion"].as_str().unwrap_or(""), kind_of(o)) {
        ("v1", "Namespace") => assert_round_trip::<Namespace>(o),
        ("v1", "ServiceAccount") => assert_round_trip::<ServiceAccount>(o),
        ("v1", "Service") => assert_round_trip::<Service>(o),
        ("v1", "Secret") => assert_round_trip::<Secret>(&unwrap_secret_data(o)),
        ("v1", "ConfigMap") => assert_round_trip::<ConfigMap>(o),
        ("apps/v1", "Deployment") => assert_round_trip::<Deployment>(o),
        ("policy/v1", "PodDisruptionBudget") => assert_round_trip::<PodDisruptionBudget>(o),
        ("networking.k8s.io/v1", "NetworkPolicy") => assert_round_trip::<NetworkPolicy>(o),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => assert_round_trip::<ClusterRole>(o),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            assert_round_trip::<ClusterRoleBinding>(o)
        }
        ("rbac.authorization.k8s.io/v1", "Role") => assert_round_trip::<Role>(o),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => assert_round_trip::<RoleBinding>(o),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
            assert_round_trip::<CustomResourceDefinition>(o)
        }
        ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration") => {
            assert_round_trip::<ValidatingWebhookConfiguration>(o)
        }
        ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration") => {
            assert_round_trip::<MutatingWebhookConfiguration>(o)
        }
        ("cert-manager.io/v1", "Issuer") => {
            assert!(o["spec"].is_object(), "Issuer {} has a spec", name_of(o));
        }
        ("cert-manager.io/v1", "Certificate") => {
            // A CA certificate names itself by commonName; a serving one by its DNS names.
            let names = if o["spec"]["isCA"] == true {
                "commonName"
            } else {
                "dnsNames"
            };
            for field in ["secretName", names, "issuerRef"] {
                assert!(
                    !o["spec"][field].is_null(),
                    "Certificate needs spec.{field}"
                );
            }
        }
        // The Prometheus Operator's kinds: their schema is its CRDs', which the monitoring tests
        // apply them against (packaging_monitoring.rs); here, what a scrape and the rules need.
        ("monitoring.coreos.com/v1", "ServiceMonitor") => {
            for field in ["selector", "endpoints"] {
                assert!(
                    !o["spec"][field].is_null(),
                    "ServiceMonitor needs spec.{field}"
                );
            }
        }
        ("monitoring.coreos.com/v1", "PrometheusRule") => {
            assert!(
                o["spec"]["groups"]
                    .as_array()
                    .is_some_and(|g| !g.is_empty()),
                "PrometheusRule {} has rule groups",
                name_of(o)
            );
        }
        (api, kind) => panic!("unexpected object {api} {kind} {}", name_of(o)),
    }
}

/// kustomize wraps generated Secret data at 70 columns; the API server's base64 decoder (Go's)
/// skips the line breaks, k8s-openapi's does not.
pub fn unwrap_secret_data(o: &Value) -> Value {
    let mut o = o.clone();
    if let Some(data) = o["data"].as_object_mut() {
        for v in data.values_mut() {
            *v = Value::String(v.as_str().unwrap().replace('\n', ""));
        }
    }
    o
}

/// An object as its typed Kubernetes struct.
pub fn typed<T: DeserializeOwned>(o: &Value) -> T {
    serde_json::from_value(o.clone()).unwrap()
}

/// The Deployment `name`, typed.
pub fn deployment(objects: &[Value], name: &str) -> Deployment {
    typed(find(objects, "Deployment", name))
}

/// A Deployment's Pod template spec.
pub fn pod_spec(d: &Deployment) -> PodSpec {
    d.spec.clone().template.spec.unwrap()
}

/// Every (service, path) the webhook configurations call, with their caBundles.
pub fn webhook_client_configs(objects: &[Value]) -> Vec<(String, Value)> {
    objects
        .iter()
        .filter(|o| kind_of(o).ends_with("WebhookConfiguration"))
        .flat_map(|o| {
            o["webhooks"]
                .as_array()
                .expect("webhooks")
                .iter()
                .map(move |w| {
                    (
                        format!("{} {}", kind_of(o), w["name"].as_str().unwrap()),
                        w["clientConfig"].clone(),
                    )
                })
        })
        .collect()
}

/// The cert-manager objects form a CA chain: the serving Certificate `serving` is issued by a CA
/// Issuer whose Secret is written by an `isCA` Certificate, itself issued by a self-signed
/// Issuer; and both webhook configurations take their caBundle from that CA certificate
/// (`cert-manager.io/inject-ca-from`), never from the serving certificate, so that renewing the
/// serving certificate never changes the caBundle. Returns the CA Certificate.
pub fn assert_cert_manager_ca_chain<'a>(objects: &'a [Value], serving: &str) -> &'a Value {
    let cert = find(objects, "Certificate", serving);
    assert_ne!(
        cert["spec"]["isCA"], true,
        "the serving certificate is no CA"
    );
    assert_eq!(cert["spec"]["issuerRef"]["kind"], "Issuer");
    let ca_issuer = find(
        objects,
        "Issuer",
        cert["spec"]["issuerRef"]["name"].as_str().unwrap(),
    );
    let ca_secret = ca_issuer["spec"]["ca"]["secretName"]
        .as_str()
        .unwrap_or_else(|| panic!("Issuer {} is a CA issuer: {ca_issuer}", name_of(ca_issuer)));
    let ca = all_of(objects, "Certificate")
        .into_iter()
        .find(|c| c["spec"]["secretName"] == ca_secret)
        .unwrap_or_else(|| panic!("no Certificate writes the CA Secret {ca_secret}"));
    assert_eq!(ca["spec"]["isCA"], true, "{} is a CA", name_of(ca));
    assert_ne!(
        ca["spec"]["secretName"], cert["spec"]["secretName"],
        "the CA and the serving certificate have Secrets of their own"
    );
    let root = find(
        objects,
        "Issuer",
        ca["spec"]["issuerRef"]["name"].as_str().unwrap(),
    );
    assert!(
        root["spec"]["selfSigned"].is_object(),
        "the CA is issued by a self-signed Issuer: {root}"
    );
    let ns = ca["metadata"]["namespace"].as_str().unwrap();
    let configurations: Vec<&Value> = objects
        .iter()
        .filter(|o| kind_of(o).ends_with("WebhookConfiguration"))
        .collect();
    assert_eq!(configurations.len(), 2);
    for o in configurations {
        assert_eq!(
            o["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            format!("{ns}/{}", name_of(ca)),
            "{} {} takes its caBundle from the CA certificate",
            kind_of(o),
            name_of(o)
        );
    }
    ca
}

/// Both Deployments run hardened Pods: non-root with a non-zero UID, seccomp RuntimeDefault, a
/// read-only root, no escalation or privilege, capabilities dropped, requests and limits, pinned
/// images, and HTTP probes `/healthz` and `/readyz` on the plain-HTTP admin port.
pub fn assert_pods_hardened(objects: &[Value]) {
    let deployments = all_of(objects, "Deployment");
    assert_eq!(deployments.len(), 2);
    for d in deployments {
        let d: Deployment = typed(d);
        let name = d.metadata.name.clone().unwrap();
        let pod = pod_spec(&d);
        let psc = pod.security_context.clone().expect("pod securityContext");
        assert_eq!(psc.run_as_non_root, Some(true), "{name}: runAsNonRoot");
        assert!(
            psc.run_as_user.is_some_and(|u| u != 0),
            "{name}: a non-root UID"
        );
        assert_eq!(
            psc.seccomp_profile.map(|s| s.type_),
            Some("RuntimeDefault".to_owned()),
            "{name}: seccomp RuntimeDefault"
        );
        assert!(pod.host_network != Some(true) && pod.host_pid != Some(true));
        for c in &pod.containers {
            let what = format!("{name}/{}", c.name);
            let sc = c
                .security_context
                .clone()
                .expect("container securityContext");
            assert_eq!(
                sc.read_only_root_filesystem,
                Some(true),
                "{what}: read-only root"
            );
            assert_eq!(
                sc.allow_privilege_escalation,
                Some(false),
                "{what}: no escalation"
            );
            assert_ne!(sc.privileged, Some(true), "{what}: not privileged");
            let caps = sc.capabilities.expect("capabilities");
            assert_eq!(caps.drop, Some(vec!["ALL".to_owned()]), "{what}: drop ALL");
            assert!(
                caps.add.unwrap_or_default().is_empty(),
                "{what}: adds no capability"
            );
            let res = c.resources.clone().expect("resources");
            for (kind, map) in [("requests", res.requests), ("limits", res.limits)] {
                let map = map.unwrap_or_else(|| panic!("{what}: {kind}"));
                assert!(
                    map.contains_key("cpu") && map.contains_key("memory"),
                    "{what}: {kind}"
                );
            }
            let image = c.image.clone().unwrap();
            let tag = image.rsplit_once(':').map(|(_, t)| t).unwrap_or("");
            assert!(
                !tag.is_empty() && !tag.contains('/') && tag != "latest",
                "{what}: pinned image {image}"
            );
            // Probes hit the admin port (plain HTTP) on /healthz and /readyz.
            let admin: Vec<_> = c
                .ports
                .clone()
                .unwrap_or_default()
                .into_iter()
                .filter(|p| p.name.as_deref() == Some("http-admin"))
                .collect();
            assert_eq!(admin.len(), 1, "{what}: one admin port");
            for (probe, path) in [
                (&c.liveness_probe, "/healthz"),
                (&c.readiness_probe, "/readyz"),
            ] {
                let get = probe
                    .as_ref()
                    .and_then(|p| p.http_get.clone())
                    .unwrap_or_else(|| panic!("{what}: an HTTP {path} probe"));
                assert_eq!(get.path.as_deref(), Some(path), "{what}");
                assert_eq!(
                    get.port,
                    k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(
                        "http-admin".into()
                    ),
                    "{what}: {path} on the admin port"
                );
                assert_ne!(
                    get.scheme.as_deref(),
                    Some("HTTPS"),
                    "{what}: the admin port is plain HTTP"
                );
            }
        }
    }
}

/// `openssl <args>`; its stdout.
pub fn openssl(args: &[&str]) -> String {
    run(
        Command::new("openssl").args(args),
        "openssl must be on PATH (apt-get install openssl)",
    )
}

// === a control plane of the test's own ===

/// A real control plane (etcd, kube-apiserver with RBAC and PodSecurity admission,
/// kube-controller-manager) owned by one test, with the release's kubectl and helm pointed at
/// it. Stopped when dropped, also when the test fails.
pub struct Plane {
    plane: ControlPlane,
    /// The test's folder: the control plane's files and logs, helm's home.
    pub dir: TestDir,
}

impl Plane {
    /// Starts a control plane in a new test folder named after `label`.
    pub async fn start(label: &str) -> Plane {
        let dir = TestDir::new(label).expect("test directory");
        let started = Instant::now();
        let plane = ControlPlane::start(&dir, ControlPlaneOptions::default())
            .await
            .expect("the control plane starts");
        eprintln!("control plane ready in {:?}", started.elapsed());
        Plane { plane, dir }
    }

    /// The admin kubeconfig of the control plane.
    pub fn kubeconfig(&self) -> &Path {
        self.plane.kubeconfig_path()
    }

    /// The release's kubectl, pointed at the control plane.
    pub fn kubectl(&self) -> Command {
        let mut c = kubectl_cmd();
        c.env("KUBECONFIG", self.kubeconfig());
        c
    }

    /// The release's helm, pointed at the control plane, with its home in the test's folder.
    pub fn helm(&self) -> Command {
        let mut c = helm_cmd(&self.dir.join("helm"));
        c.env("KUBECONFIG", self.kubeconfig());
        c
    }

    /// kubectl with `args`; its stdout, or a panic with its stderr.
    pub fn k(&self, args: &[&str]) -> String {
        run(self.kubectl().args(args), "kubectl")
    }

    /// kubectl with `args` and `stdin`, whatever its outcome.
    pub fn k_output(&self, args: &[&str], stdin: &str) -> Output {
        output_with_stdin(self.kubectl().args(args), stdin)
    }

    /// `kubectl diff --server-side` of `source` with Argo CD's field manager, whatever its
    /// outcome (empty stdout and success: nothing would change).
    pub fn diff(&self, source: &[&str]) -> Output {
        let mut args = vec!["diff", "--server-side", "--field-manager", ARGO_CD_MANAGER];
        args.extend(source);
        self.k_output(&args, "")
    }

    /// `kubectl get <args> -o json`.
    pub fn get(&self, args: &[&str]) -> Value {
        let mut all = vec!["get"];
        all.extend(args);
        all.extend(["-o", "json"]);
        serde_json::from_str(&self.k(&all)).expect("kubectl get prints JSON")
    }

    /// Server-side applies with Argo CD's field manager, as its sync does.
    pub fn apply(&self, source: &[&str]) -> String {
        let mut args = vec!["apply", "--server-side", "--field-manager", ARGO_CD_MANAGER];
        args.extend(source);
        self.k(&args)
    }

    /// cert-manager is not part of these tests: registers its two kinds with open schemas, so
    /// that installs with cert-manager objects apply whole. What the install relies on in them
    /// is checked on the renders ([`assert_well_formed`], [`assert_cert_manager_ca_chain`]).
    pub fn register_cert_manager_kinds(&self) {
        let crd = |kind: &str, plural: &str| {
            json!({
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": format!("{plural}.cert-manager.io")},
                "spec": {
                    "group": "cert-manager.io",
                    "scope": "Namespaced",
                    "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(),
                              "listKind": format!("{kind}List")},
                    "versions": [{"name": "v1", "served": true, "storage": true,
                        "schema": {"openAPIV3Schema": {"type": "object",
                            "x-kubernetes-preserve-unknown-fields": true}}}],
                },
            })
        };
        let list = json!({"apiVersion": "v1", "kind": "List",
            "items": [crd("Certificate", "certificates"), crd("Issuer", "issuers")]});
        let out = self.k_output(&["apply", "--server-side", "-f", "-"], &list.to_string());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.wait_crds_established();
    }

    /// Waits until every CRD is Established.
    pub fn wait_crds_established(&self) {
        self.k(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "customresourcedefinitions",
            "--all",
        ]);
    }

    /// `kubectl auth can-i --as=system:serviceaccount:<ns>:<sa> <check>`: a real
    /// SelfSubjectAccessReview under the service account's identity (and its groups).
    pub fn can_i(&self, ns: &str, sa: &str, check: &str) -> bool {
        let out = self
            .kubectl()
            .args([
                "auth",
                "can-i",
                &format!("--as=system:serviceaccount:{ns}:{sa}"),
            ])
            .args(check.split_whitespace())
            .output()
            .unwrap();
        match String::from_utf8_lossy(&out.stdout).trim() {
            "yes" => true,
            "no" => false,
            other => panic!(
                "kubectl auth can-i {check}: {other} {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }

    /// Each check of `allowed` is allowed to the service account and each of `refused` is not,
    /// decided by the API server's authorizer: one SubjectAccessReview per check (with the
    /// service account's groups, as its token authenticates), created in one `kubectl create`,
    /// and `kubectl auth can-i --as` for the first check of each list.
    pub fn assert_rbac(&self, ns: &str, sa: &str, allowed: &[String], refused: &[String]) {
        let user = format!("system:serviceaccount:{ns}:{sa}");
        let checks: Vec<(&String, bool)> = allowed
            .iter()
            .map(|c| (c, true))
            .chain(refused.iter().map(|c| (c, false)))
            .collect();
        let reviews: Vec<Value> = checks
            .iter()
            .map(|(check, _)| {
                json!({
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview",
                    "spec": {
                        "user": user,
                        "groups": ["system:serviceaccounts",
                            format!("system:serviceaccounts:{ns}"), "system:authenticated"],
                        "resourceAttributes": resource_attributes(check),
                    },
                })
            })
            .collect();
        let list = json!({"apiVersion": "v1", "kind": "List", "items": reviews});
        let out = self.k_output(&["create", "-f", "-", "-o", "json"], &list.to_string());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // One JSON document per created review.
        let answered: Vec<Value> = serde_json::Deserializer::from_slice(&out.stdout)
            .into_iter()
            .collect::<Result<_, _>>()
            .expect("kubectl create prints JSON");
        assert_eq!(answered.len(), checks.len());
        let mut wrong = Vec::new();
        for ((check, expected), review) in checks.iter().zip(&answered) {
            if review["status"]["allowed"].as_bool() != Some(*expected) {
                wrong.push(format!(
                    "{} {check} ({})",
                    if *expected { "refused:" } else { "allowed:" },
                    review["status"]
                ));
            }
        }
        assert!(
            wrong.is_empty(),
            "service account {ns}/{sa}:\n{}",
            wrong.join("\n")
        );
        for (checks, expected) in [(allowed, true), (refused, false)] {
            if let Some(check) = checks.first() {
                assert_eq!(
                    self.can_i(ns, sa, check),
                    expected,
                    "kubectl auth can-i {check}"
                );
            }
        }
    }

    /// Waits until the Deployment's ReplicaSets have created `replicas` Pods (which means
    /// admission, PodSecurity included, let them in); panics with the ReplicaSets' failure
    /// conditions (a refused Pod) otherwise.
    pub fn wait_for_pods(&self, ns: &str, deployment: &str, replicas: usize) -> Vec<Value> {
        let selector =
            self.get(&["deployment", deployment, "-n", ns])["spec"]["selector"]["matchLabels"]
                .as_object()
                .expect("matchLabels")
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap()))
                .collect::<Vec<_>>()
                .join(",");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let pods = self.get(&["pods", "-n", ns, "-l", &selector])["items"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if pods.len() >= replicas {
                return pods;
            }
            if Instant::now() > deadline {
                let sets = self.get(&["replicasets", "-n", ns, "-l", &selector]);
                let failures: Vec<&Value> = sets["items"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .flat_map(|rs| rs["status"]["conditions"].as_array().into_iter().flatten())
                    .collect();
                let events = self.k(&["get", "events", "-n", ns]);
                panic!(
                    "{ns}/{deployment}: {} of {replicas} Pods after 60 s; ReplicaSet conditions \
                     {failures:?}\nevents:\n{events}",
                    pods.len()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Applies `-k <dir>` twice with Argo CD's field manager; `kubectl diff --server-side` must
    /// then find nothing to change.
    pub fn assert_no_drift(&self, kustomization: &Path) {
        let dir = kustomization.to_str().unwrap();
        self.apply(&["-k", dir]);
        let out = self.diff(&["-k", dir]);
        assert!(
            out.status.success() && out.stdout.is_empty(),
            "kubectl diff --server-side after a second apply of {dir} ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The resourceAttributes of a SubjectAccessReview for a `kubectl auth can-i` check:
/// `<verb> <resource>[.<group>][/<name>] [--subresource=<s>] [-n <ns> | -A]`.
fn resource_attributes(check: &str) -> Value {
    let mut words = check.split_whitespace();
    let verb = words.next().expect("a verb");
    let target = words.next().expect("a resource");
    let (resource, name) = target.split_once('/').unwrap_or((target, ""));
    let (resource, group) = resource.split_once('.').unwrap_or((resource, ""));
    let mut attributes = json!({"verb": verb, "resource": resource, "group": group, "name": name});
    while let Some(word) = words.next() {
        match word {
            "-n" => attributes["namespace"] = json!(words.next().expect("a namespace")),
            "-A" => attributes["namespace"] = json!(""),
            w => {
                let sub = w
                    .strip_prefix("--subresource=")
                    .unwrap_or_else(|| panic!("{check}"));
                attributes["subresource"] = json!(sub);
            }
        }
    }
    attributes
}
