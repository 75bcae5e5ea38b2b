//! The install as users get it, checked with the real tools of the tested Kubernetes release:
//! the kustomize base and its certificate variants (`kubectl kustomize`, `kubectl apply
//! --server-side -k`), the development certificates of `certs/`, the project's samples, the
//! Dockerfiles and the Helm chart (`helm lint`, `helm template`, `helm install`, `helm
//! upgrade`, Helm v3).
//!
//! `kubectl` and `helm` are the control plane's binaries ([`control_plane::binary`]), of the same
//! release as the kube-apiserver the install tests apply to. Those tests install cluster-wide
//! objects (CRDs, ClusterRoles, webhook configurations), so each starts a control plane of its
//! own rather than sharing the run's. Also needs `openssl` and, for the Argo CD health checks,
//! `lua5.1`; a missing tool fails the test with that message, it never skips it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use booking_harness::TestDir;
use booking_harness::control_plane::{self, ControlPlane, ControlPlaneOptions};
use booking_shared::api::{Booking, BookingScheduler, Resource, ResourceMonitor};
use booking_tests::{read_yaml_documents, repo_root};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PodSpec, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

const NAMESPACE: &str = "resource-booking-operator-system";
const CONTROLLER_SA: &str = "resource-booking-operator-controller-manager";
const WEBHOOK_SA: &str = "resource-booking-operator-webhook";
const CRD_KINDS: [&str; 4] = ["Booking", "BookingScheduler", "Resource", "ResourceMonitor"];
/// The field manager Argo CD's server-side sync applies with.
const ARGO_CD_MANAGER: &str = "argocd-controller";

// === helpers ===

/// Runs a command and returns its stdout; panics with the command, status and stderr on failure
/// and with `hint` when the program cannot be started.
fn run(cmd: &mut Command, hint: &str) -> String {
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
fn tool(name: &str) -> PathBuf {
    control_plane::binary(name).unwrap_or_else(|e| panic!("{e}"))
}

/// The release's kubectl, with no kubeconfig of the machine's in reach.
fn kubectl_cmd() -> Command {
    let mut c = Command::new(tool("kubectl"));
    c.env("KUBECONFIG", "/dev/null");
    c
}

/// The release's helm, with its caches and configuration in `home` (nothing of the machine's).
fn helm_cmd(home: &Path) -> Command {
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
fn kube_version() -> &'static str {
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

fn yaml_documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| {
            let v: serde_yaml::Value =
                serde::Deserialize::deserialize(doc).expect("rendered output is YAML");
            serde_json::to_value(v).expect("YAML maps to JSON")
        })
        .filter(|v| !v.is_null())
        .collect()
}

/// `kubectl kustomize <dir>`, as objects.
fn kustomize(dir: &Path) -> Vec<Value> {
    let text = run(
        kubectl_cmd().arg("kustomize").arg(dir),
        "kubectl runs kustomize",
    );
    yaml_documents(&text)
}

fn base() -> Vec<Value> {
    kustomize(&repo_root().join("manifests"))
}

fn kind_of(o: &Value) -> &str {
    o["kind"].as_str().expect("every object has a kind")
}

fn name_of(o: &Value) -> &str {
    o["metadata"]["name"]
        .as_str()
        .expect("every object has a name")
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| kind_of(o) == kind && name_of(o) == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the render"))
}

fn all_of<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| kind_of(o) == kind).collect()
}

/// Deserialises `object` into its typed Kubernetes struct and back: a misspelt or misplaced
/// field (which the typed struct does not know) makes the two differ.
fn assert_round_trip<T: DeserializeOwned + Serialize>(object: &Value) {
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
fn first_difference(a: &Value, b: &Value, path: &str) -> Option<String> {
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
fn normalise(v: &Value) -> Value {
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
fn assert_well_formed(o: &Value) {
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
            for field in ["secretName", "dnsNames", "issuerRef"] {
                assert!(
                    !o["spec"][field].is_null(),
                    "Certificate needs spec.{field}"
                );
            }
        }
        (api, kind) => panic!("unexpected object {api} {kind} {}", name_of(o)),
    }
}

/// kustomize wraps generated Secret data at 70 columns; the API server's base64 decoder (Go's)
/// skips the line breaks, k8s-openapi's does not.
fn unwrap_secret_data(o: &Value) -> Value {
    let mut o = o.clone();
    if let Some(data) = o["data"].as_object_mut() {
        for v in data.values_mut() {
            *v = Value::String(v.as_str().unwrap().replace('\n', ""));
        }
    }
    o
}

fn typed<T: DeserializeOwned>(o: &Value) -> T {
    serde_json::from_value(o.clone()).unwrap()
}

fn deployment(objects: &[Value], name: &str) -> Deployment {
    typed(find(objects, "Deployment", name))
}

fn pod_spec(d: &Deployment) -> PodSpec {
    d.spec.clone().template.spec.unwrap()
}

fn sync_wave(o: &Value) -> i64 {
    o["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"]
        .as_str()
        .unwrap_or_else(|| panic!("{} {} has no Argo CD sync wave", kind_of(o), name_of(o)))
        .parse()
        .expect("a sync wave is an integer")
}

/// Every (service, path) the webhook configurations call, with their caBundles.
fn webhook_client_configs(objects: &[Value]) -> Vec<(String, Value)> {
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

// === the kustomize base ===

#[test]
fn kustomize_base_renders_the_whole_install() {
    let objects = base();
    for o in &objects {
        assert_well_formed(o);
    }
    let kinds: BTreeMap<&str, usize> = objects.iter().fold(BTreeMap::new(), |mut m, o| {
        *m.entry(kind_of(o)).or_default() += 1;
        m
    });
    assert_eq!(kinds.get("Namespace"), Some(&1), "{kinds:?}");
    assert_eq!(kinds.get("CustomResourceDefinition"), Some(&4), "{kinds:?}");
    assert_eq!(kinds.get("Deployment"), Some(&2), "{kinds:?}");
    assert_eq!(kinds.get("ServiceAccount"), Some(&2), "{kinds:?}");
    assert_eq!(
        kinds.get("ValidatingWebhookConfiguration"),
        Some(&1),
        "{kinds:?}"
    );
    assert_eq!(
        kinds.get("MutatingWebhookConfiguration"),
        Some(&1),
        "{kinds:?}"
    );
    assert_eq!(kinds.get("Certificate"), Some(&1), "{kinds:?}");
    assert_eq!(
        kinds.get("Secret"),
        None,
        "the base commits no key material"
    );

    // Every namespaced object lives in the operator's namespace.
    let cluster_scoped = [
        "Namespace",
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ];
    for o in &objects {
        let ns = o["metadata"]["namespace"].as_str();
        if cluster_scoped.contains(&kind_of(o)) {
            assert_eq!(ns, None, "{} {} is cluster-scoped", kind_of(o), name_of(o));
        } else {
            assert_eq!(ns, Some(NAMESPACE), "{} {}", kind_of(o), name_of(o));
        }
    }
    find(&objects, "Namespace", NAMESPACE);

    // The CRDs are the committed ones of manifests/crds (labels and annotations aside; that
    // those match the Rust types is checked by samples_and_crds.rs).
    let mut committed = Vec::new();
    for entry in std::fs::read_dir(repo_root().join("manifests/crds")).unwrap() {
        committed.extend(read_yaml_documents(&entry.unwrap().path()));
    }
    assert_eq!(committed.len(), 4);
    for crd in &committed {
        let rendered = find(&objects, "CustomResourceDefinition", name_of(crd));
        let diff = first_difference(
            &normalise(&crd["spec"]),
            &normalise(&rendered["spec"]),
            "spec",
        );
        assert!(
            diff.is_none(),
            "CRD {} differs from manifests/crds at {diff:?}",
            name_of(crd)
        );
    }
    let kinds_served: BTreeSet<&str> = committed
        .iter()
        .map(|c| c["spec"]["names"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds_served, CRD_KINDS.into());

    // Two identities; the controller's is the one the IRSA trust policy names.
    find(&objects, "ServiceAccount", CONTROLLER_SA);
    find(&objects, "ServiceAccount", WEBHOOK_SA);
    let controller = deployment(&objects, "booking-controller");
    let webhook = deployment(&objects, "booking-webhook");
    assert_eq!(
        pod_spec(&controller).service_account_name.as_deref(),
        Some(CONTROLLER_SA)
    );
    assert_eq!(
        pod_spec(&webhook).service_account_name.as_deref(),
        Some(WEBHOOK_SA)
    );

    // The webhook: two replicas spread over nodes, a PDB keeping one, a Service in front.
    let wspec = webhook.spec.clone();
    assert_eq!(wspec.replicas, Some(2));
    let anti = pod_spec(&webhook)
        .affinity
        .and_then(|a| a.pod_anti_affinity)
        .expect("the webhook has pod anti-affinity");
    let terms = anti
        .preferred_during_scheduling_ignored_during_execution
        .unwrap_or_default();
    assert!(
        terms.iter().any(
            |t| t.pod_affinity_term.topology_key == "kubernetes.io/hostname"
                && t.pod_affinity_term
                    .label_selector
                    .as_ref()
                    .and_then(|s| s.match_labels.clone())
                    == wspec.selector.match_labels
        ),
        "anti-affinity spreads the webhook's own pods over hosts"
    );
    let pdb: PodDisruptionBudget = typed(find(&objects, "PodDisruptionBudget", "booking-webhook"));
    let pdb_spec = pdb.spec.unwrap();
    assert_eq!(
        pdb_spec.selector.unwrap().match_labels,
        wspec.selector.match_labels
    );
    assert!(pdb_spec.min_available.is_some() || pdb_spec.max_unavailable.is_some());
    let service: Service = typed(find(&objects, "Service", "booking-webhook"));
    let sspec = service.spec.unwrap();
    assert_eq!(
        sspec.selector, wspec.selector.match_labels,
        "the Service selects the webhook pods"
    );

    // Every webhook calls this Service, on a port it has, whose target is a container port.
    let container_ports: BTreeSet<String> = pod_spec(&webhook).containers[0]
        .ports
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| p.name)
        .collect();
    let calls = webhook_client_configs(&objects);
    assert!(
        calls.len() >= 2,
        "at least a validating and a mutating webhook"
    );
    for (what, cc) in calls {
        let svc = &cc["service"];
        assert_eq!(
            svc["namespace"], NAMESPACE,
            "{what} calls the Service of this install"
        );
        assert_eq!(svc["name"], "booking-webhook", "{what}");
        let port = svc["port"].as_i64().unwrap_or(443) as i32;
        let sp = sspec
            .ports
            .as_ref()
            .unwrap()
            .iter()
            .find(|p| p.port == port)
            .unwrap_or_else(|| panic!("{what} calls port {port}, which the Service lacks"));
        match sp.target_port.clone().unwrap() {
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(n) => {
                assert!(
                    container_ports.contains(&n),
                    "targetPort {n} is a container port"
                )
            }
            other => panic!("targetPort should name the container port, got {other:?}"),
        }
        assert!(
            ["/validate", "/mutate"].contains(&svc["path"].as_str().unwrap_or("")),
            "{what}: the webhook serves /validate and /mutate"
        );
    }

    // Certificate wiring (cert-manager, the default): the Certificate's Secret is what the
    // webhook mounts, its names are the Service's, and the CA injector reads it.
    let cert = find(&objects, "Certificate", "booking-webhook");
    let secret_name = cert["spec"]["secretName"].as_str().unwrap();
    let volumes = pod_spec(&webhook).volumes.unwrap();
    assert!(
        volumes
            .iter()
            .any(|v| v.secret.as_ref().and_then(|s| s.secret_name.as_deref()) == Some(secret_name)),
        "the webhook mounts the Certificate's Secret {secret_name}"
    );
    let dns: Vec<&str> = cert["spec"]["dnsNames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    assert!(
        dns.contains(&format!("booking-webhook.{NAMESPACE}.svc").as_str()),
        "{dns:?}"
    );
    let issuer = cert["spec"]["issuerRef"]["name"].as_str().unwrap();
    find(&objects, "Issuer", issuer);
    for o in objects
        .iter()
        .filter(|o| kind_of(o).ends_with("WebhookConfiguration"))
    {
        assert_eq!(
            o["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            format!("{NAMESPACE}/booking-webhook"),
            "{} {} takes its caBundle from the Certificate",
            kind_of(o),
            name_of(o)
        );
    }
}

#[test]
fn pods_are_hardened_and_probed_on_their_admin_ports() {
    let objects = base();
    assert_pods_hardened(&objects);
    // The namespace enforces the restricted Pod Security Standard the pods meet.
    assert_eq!(
        find(&objects, "Namespace", NAMESPACE)["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
}

fn assert_pods_hardened(objects: &[Value]) {
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

fn rules_of(objects: &[Value], subject_sa: &str) -> Vec<(String, PolicyRule)> {
    let mut out = Vec::new();
    for b in objects
        .iter()
        .filter(|o| ["ClusterRoleBinding", "RoleBinding"].contains(&kind_of(o)))
    {
        let binds = b["subjects"].as_array().unwrap().iter().any(|s| {
            s["kind"] == "ServiceAccount" && s["name"] == subject_sa && s["namespace"] == NAMESPACE
        });
        if !binds {
            continue;
        }
        let role = find(
            objects,
            b["roleRef"]["kind"].as_str().unwrap(),
            b["roleRef"]["name"].as_str().unwrap(),
        );
        for r in role["rules"].as_array().unwrap() {
            out.push((kind_of(b).to_owned(), typed::<PolicyRule>(r)));
        }
    }
    out
}

#[test]
fn rbac_is_least_privilege_per_deployment() {
    let objects = base();
    // The webhook reads bookings and resources, nothing else.
    let webhook = rules_of(&objects, WEBHOOK_SA);
    assert!(!webhook.is_empty());
    for (_, r) in &webhook {
        assert_eq!(
            r.api_groups.as_deref(),
            Some(&["manager.kotaico.de".to_owned()][..])
        );
        for res in r.resources.as_ref().unwrap() {
            assert!(
                ["bookings", "resources"].contains(&res.as_str()),
                "webhook may read {res}"
            );
        }
        for v in &r.verbs {
            assert!(
                ["get", "list", "watch"].contains(&v.as_str()),
                "webhook may {v}"
            );
        }
    }
    // The controller: no wildcards, no Secrets, never writes a spec, Leases only in its
    // namespace.
    let controller = rules_of(&objects, CONTROLLER_SA);
    let mut status_writes = BTreeSet::new();
    for (binding, r) in &controller {
        let resources = r.resources.clone().unwrap_or_default();
        for field in r
            .verbs
            .iter()
            .chain(&resources)
            .chain(r.api_groups.iter().flatten())
        {
            assert_ne!(field, "*", "no wildcards: {r:?}");
        }
        assert!(
            !resources.iter().any(|x| x == "secrets"),
            "the controller reads no Secrets"
        );
        for res in &resources {
            if CRD_KINDS
                .iter()
                .any(|k| format!("{}s", k.to_lowercase()) == *res)
            {
                assert!(
                    !r.verbs.iter().any(|v| v == "update" || v == "patch"),
                    "the controller never writes the spec of {res}"
                );
            }
            if let Some(base) = res.strip_suffix("/status") {
                status_writes.insert(base.to_owned());
            }
            if res == "leases" {
                assert_eq!(
                    binding, "RoleBinding",
                    "Leases only in the operator's namespace"
                );
            }
        }
    }
    let expected: BTreeSet<String> = CRD_KINDS
        .iter()
        .map(|k| format!("{}s", k.to_lowercase()))
        .collect();
    assert_eq!(
        status_writes, expected,
        "the controller writes the status of the four kinds"
    );
}

#[test]
fn argo_cd_sync_waves_order_the_install() {
    let objects = base();
    let wave = |pred: &dyn Fn(&Value) -> bool| -> BTreeSet<i64> {
        objects.iter().filter(|o| pred(o)).map(sync_wave).collect()
    };
    let ns = wave(&|o| kind_of(o) == "Namespace");
    let crds = wave(&|o| kind_of(o) == "CustomResourceDefinition");
    let identities = wave(&|o| {
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
        ]
        .contains(&kind_of(o))
    });
    let webhook_configs = wave(&|o| kind_of(o).ends_with("WebhookConfiguration"));
    let workloads: BTreeSet<i64> = objects
        .iter()
        .filter(|o| ["Deployment", "Service", "PodDisruptionBudget"].contains(&kind_of(o)))
        .map(|o| {
            o["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"]
                .as_str()
                .map_or(0, |s| s.parse().unwrap())
        })
        .collect();
    let max = |s: &BTreeSet<i64>| *s.last().unwrap();
    let min = |s: &BTreeSet<i64>| *s.first().unwrap();
    assert!(max(&ns) < min(&crds), "namespace before CRDs");
    assert!(max(&crds) < min(&identities), "CRDs before identities");
    assert!(
        max(&identities) < min(&workloads),
        "identities before workloads"
    );
    assert!(
        max(&workloads) < min(&webhook_configs),
        "the webhook runs before it is registered"
    );
}

// === certs/ ===

fn openssl(args: &[&str]) -> String {
    run(
        Command::new("openssl").args(args),
        "openssl must be on PATH (apt-get install openssl)",
    )
}

#[test]
fn dev_certs_script_makes_a_ca_a_serving_cert_and_an_overlay_with_the_ca_bundle() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let script = repo_root().join("certs/make-dev-certs.sh");
    run(
        Command::new(&script).arg("--out-dir").arg(&out),
        "bash must be on PATH",
    );
    let p = |f: &str| out.join(f).display().to_string();

    // The serving certificate chains to the CA and names the Service.
    openssl(&["verify", "-CAfile", &p("ca.crt"), &p("tls.crt")]);
    let text = openssl(&["x509", "-in", &p("tls.crt"), "-noout", "-text"]);
    for dns in [
        format!("DNS:booking-webhook.{NAMESPACE}.svc"),
        format!("DNS:booking-webhook.{NAMESPACE}.svc.cluster.local"),
    ] {
        assert!(
            text.contains(&dns),
            "serving certificate lacks {dns}:\n{text}"
        );
    }
    assert!(
        text.contains("TLS Web Server Authentication"),
        "serverAuth usage"
    );
    assert!(
        text.contains("CA:FALSE"),
        "the serving certificate is no CA"
    );
    // The key matches the certificate.
    assert_eq!(
        openssl(&["pkey", "-in", &p("tls.key"), "-pubout"]),
        openssl(&["x509", "-in", &p("tls.crt"), "-noout", "-pubkey"])
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for key in ["ca.key", "tls.key"] {
            let mode = std::fs::metadata(out.join(key))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "{key} is readable by its owner only");
        }
    }

    // The overlay: the Secret from these files, the CA in every caBundle, no cert-manager.
    let objects = kustomize(&out);
    for o in &objects {
        assert_well_formed(o);
    }
    assert!(all_of(&objects, "Certificate").is_empty() && all_of(&objects, "Issuer").is_empty());
    assert!(
        all_of(&objects, "ConfigMap").is_empty(),
        "the caBundle source stays local"
    );
    let ca_pem = std::fs::read(out.join("ca.crt")).unwrap();
    let calls = webhook_client_configs(&objects);
    assert!(calls.len() >= 2);
    for (what, cc) in &calls {
        let bundle = base64::engine::general_purpose::STANDARD
            .decode(
                cc["caBundle"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{what} has no caBundle")),
            )
            .expect("caBundle is base64");
        assert_eq!(bundle, ca_pem, "{what}: caBundle is the dev CA");
    }
    for o in objects
        .iter()
        .filter(|o| kind_of(o).ends_with("WebhookConfiguration"))
    {
        assert!(o["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].is_null());
    }
    let secrets = all_of(&objects, "Secret");
    assert_eq!(secrets.len(), 1);
    let secret: Secret = typed(&unwrap_secret_data(secrets[0]));
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let data = secret.data.unwrap();
    assert_eq!(
        data["tls.crt"].0,
        std::fs::read(out.join("tls.crt")).unwrap()
    );
    assert_eq!(data["ca.crt"].0, ca_pem);
    assert!(data.contains_key("tls.key"));
    let webhook = deployment(&objects, "booking-webhook");
    assert!(
        pod_spec(&webhook).volumes.unwrap().iter().any(|v| {
            v.secret.as_ref().and_then(|s| s.secret_name.clone()) == secret.metadata.name
        }),
        "the webhook mounts the generated Secret (name with its content hash)"
    );

    // A second run keeps the CA (configurations stay valid) and renews the serving cert;
    // --new-ca replaces the CA.
    let first_cert = std::fs::read(out.join("tls.crt")).unwrap();
    run(Command::new(&script).arg("--out-dir").arg(&out), "bash");
    assert_eq!(std::fs::read(out.join("ca.crt")).unwrap(), ca_pem);
    assert_ne!(std::fs::read(out.join("tls.crt")).unwrap(), first_cert);
    run(
        Command::new(&script)
            .arg("--out-dir")
            .arg(&out)
            .arg("--new-ca"),
        "bash",
    );
    assert_ne!(std::fs::read(out.join("ca.crt")).unwrap(), ca_pem);

    // Bad input is refused with a message.
    let bad = Command::new(&script)
        .args(["--namespace", "Not_A_Label", "--out-dir"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a DNS label"));
}

#[test]
fn private_keys_are_never_committed() {
    // git itself decides: the default output folder and every key file are ignored.
    for path in [
        "certs/out/tls.key",
        "certs/out/ca.key",
        "certs/out/kustomization.yaml",
        "manifests/x/tls.key",
    ] {
        let out = Command::new("git")
            .current_dir(repo_root())
            .args(["check-ignore", "--no-index", "-q", path])
            .status()
            .expect("git must be on PATH");
        assert!(out.success(), "{path} must be gitignored");
    }
    let tracked = run(
        Command::new("git")
            .current_dir(repo_root())
            .args(["ls-files", "certs", "manifests"]),
        "git",
    );
    for f in tracked.lines() {
        let text = std::fs::read_to_string(repo_root().join(f)).unwrap_or_default();
        assert!(
            !text.contains("PRIVATE KEY-----"),
            "{f} holds a private key"
        );
    }
}

// === samples ===

/// Every field of `sample` is in `served` with the same value (the server may add defaults).
fn assert_subset(sample: &Value, served: &Value, path: &str) {
    match (sample, served) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                assert_subset(v, b.get(k).unwrap_or(&Value::Null), &format!("{path}.{k}"));
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                assert_subset(x, y, &format!("{path}[{i}]"));
            }
        }
        _ => assert_eq!(
            sample, served,
            "{path}: changed or pruned by the API server"
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_parse_into_the_api_types_and_pass_the_crd_schemas() {
    let dir = repo_root().join("manifests/samples");
    let mut kinds = BTreeSet::new();
    let mut seen_email = false;
    let mut seen_zone = false;
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("manifests/samples") {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        for doc in read_yaml_documents(&path) {
            let what = path.display().to_string();
            let kind = kind_of(&doc).to_owned();
            let spec_back = match kind.as_str() {
                "Booking" => {
                    let b: Booking = serde_json::from_value(doc.clone()).unwrap();
                    seen_email |= b.spec.notifications.iter().any(|n| n.type_ == "email");
                    serde_json::to_value(b.spec)
                }
                "BookingScheduler" => {
                    let s: BookingScheduler = serde_json::from_value(doc.clone()).unwrap();
                    seen_zone |= s.spec.time_zone.is_some();
                    serde_json::to_value(s.spec)
                }
                "Resource" => serde_json::to_value(
                    serde_json::from_value::<Resource>(doc.clone())
                        .unwrap()
                        .spec,
                ),
                "ResourceMonitor" => serde_json::to_value(
                    serde_json::from_value::<ResourceMonitor>(doc.clone())
                        .unwrap()
                        .spec,
                ),
                other => panic!("{what}: unexpected kind {other}"),
            }
            .unwrap();
            assert_eq!(
                spec_back, doc["spec"],
                "{what}: every field is known to the API types"
            );
            kinds.insert(kind);
        }
        files.push(path);
    }
    assert_eq!(
        kinds,
        CRD_KINDS.map(String::from).into(),
        "a sample of each kind"
    );
    assert!(seen_email, "a Booking sample with an email notification");
    assert!(seen_zone, "a BookingScheduler sample with a time zone");

    // The real API server admits each sample under the committed CRDs' structural schemas and
    // CEL rules, and serves it back without pruning a field. A control plane of the test's own:
    // the CRDs are cluster-wide, and this test must see the committed ones.
    let p = Plane::start("samples").await;
    p.apply(&["-f", repo_root().join("manifests/crds").to_str().unwrap()]);
    p.wait_crds_established();
    p.k(&["create", "namespace", "samples"]);
    for path in files {
        let out = p.apply(&["-n", "samples", "-f", path.to_str().unwrap()]);
        for doc in read_yaml_documents(&path) {
            let resource = format!("{}s.manager.kotaico.de", kind_of(&doc).to_lowercase());
            let served = p.get(&[&resource, name_of(&doc), "-n", "samples"]);
            assert_subset(
                &doc["spec"],
                &served["spec"],
                &format!("{}: spec", path.display()),
            );
            assert!(out.contains(name_of(&doc)), "{out}");
        }
    }
}

// === images ===

/// The FROM images of a Dockerfile with `${ARG}` defaults substituted, stage by stage.
fn dockerfile_stages(text: &str) -> Vec<(String, Vec<String>)> {
    let mut args: BTreeMap<String, String> = BTreeMap::new();
    let mut stages: Vec<(String, Vec<String>)> = Vec::new();
    // Join continuation lines, drop comments.
    let joined = text.replace("\\\n", " ");
    for line in joined
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (instr, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        match instr.to_ascii_uppercase().as_str() {
            "ARG" if stages.is_empty() => {
                if let Some((k, v)) = rest.trim().split_once('=') {
                    args.insert(k.to_owned(), v.trim_matches('"').to_owned());
                }
            }
            "FROM" => {
                let mut image = rest.split_whitespace().next().unwrap().to_owned();
                for (k, v) in &args {
                    image = image
                        .replace(&format!("${{{k}}}"), v)
                        .replace(&format!("${k}"), v);
                }
                stages.push((image, Vec::new()));
            }
            _ => {
                if let Some(s) = stages.last_mut() {
                    s.1.push(line.to_owned());
                }
            }
        }
    }
    stages
}

#[test]
fn dockerfiles_build_the_workspace_binaries_onto_pinned_non_root_shell_less_images() {
    let metadata: Value = serde_json::from_str(&run(
        Command::new(env!("CARGO")).current_dir(repo_root()).args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ]),
        "cargo",
    ))
    .unwrap();
    let bins: BTreeSet<(String, String)> = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| {
            p["targets"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|t| t["kind"][0] == "bin")
                .map(move |t| {
                    (
                        p["name"].as_str().unwrap().to_owned(),
                        t["name"].as_str().unwrap().to_owned(),
                    )
                })
        })
        .collect();
    for name in ["booking-controller", "booking-webhook"] {
        let file = format!("Dockerfile.{}", name.trim_start_matches("booking-"));
        let text = std::fs::read_to_string(repo_root().join(&file)).unwrap();
        let stages = dockerfile_stages(&text);
        assert!(stages.len() >= 2, "{file} is multi-stage");
        for (image, _) in &stages {
            let (repo, pin) = match image.split_once('@') {
                Some((repo, digest)) => {
                    assert!(
                        digest.starts_with("sha256:") && digest.len() == 71,
                        "{file}: digest {digest}"
                    );
                    (repo, "digest")
                }
                None => (image.as_str(), ""),
            };
            let tag = repo
                .rsplit_once(':')
                .map(|(_, t)| t)
                .filter(|t| !t.contains('/'));
            assert!(
                pin == "digest" || tag.is_some(),
                "{file}: {image} is pinned by tag or digest"
            );
            assert!(
                tag != Some("latest") && !image.contains(":latest"),
                "{file}: no latest ({image})"
            );
        }
        let all = stages
            .iter()
            .flat_map(|s| &s.1)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n");
        let build = format!("cargo build --locked --release -p {name}");
        assert!(all.contains(&build), "{file} runs `{build}`");
        assert!(
            bins.contains(&(name.to_owned(), name.to_owned())),
            "the workspace has package and binary {name}"
        );
        // The runtime stage: distroless (no shell, no debug variant) or scratch, non-root.
        let (runtime, lines) = stages.last().unwrap();
        assert!(
            (runtime.starts_with("gcr.io/distroless/") && !runtime.contains("debug"))
                || runtime == "scratch",
            "{file}: runtime {runtime} has no shell"
        );
        let user = lines
            .iter()
            .rev()
            .find_map(|l| l.strip_prefix("USER "))
            .unwrap_or_else(|| panic!("{file}: the runtime stage sets USER"));
        let uid = user.split(':').next().unwrap().trim();
        assert!(
            uid.parse::<u32>().is_ok_and(|u| u != 0),
            "{file}: USER {user} is a numeric non-root UID"
        );
        assert!(
            lines
                .iter()
                .any(|l| l == &format!("ENTRYPOINT [\"/usr/local/bin/{name}\"]")),
            "{file}: exec-form ENTRYPOINT (no shell to run a shell form)"
        );
        assert!(
            lines.iter().any(|l| l.contains(&format!(
                "COPY --from=build /out/{name} /usr/local/bin/{name}"
            ))),
            "{file}: copies the built binary"
        );
        for label in [
            "title",
            "description",
            "source",
            "licenses",
            "version",
            "revision",
        ] {
            assert!(
                text.contains(&format!("org.opencontainers.image.{label}=")),
                "{file}: OCI label {label}"
            );
        }
        // The image's UID is the one the manifests run as.
        let objects = base();
        let d = deployment(&objects, name);
        assert_eq!(
            pod_spec(&d).security_context.unwrap().run_as_user,
            Some(i64::from(uid.parse::<u32>().unwrap())),
            "{name}: manifests and image agree on the UID"
        );
    }
    let ignore = std::fs::read_to_string(repo_root().join(".dockerignore")).unwrap();
    for pattern in ["target/", ".git/", "certs/out/", "**/*.key"] {
        assert!(
            ignore.lines().any(|l| l.trim() == pattern),
            ".dockerignore excludes {pattern}"
        );
    }
}

// === the Helm chart: helm lint and helm template ===

/// `helm template rbo manifests/helm -n <NAMESPACE> --include-crds <args>`; Err carries Helm's
/// message (a `fail` or `required` of the chart).
fn helm(args: &[&str]) -> Result<Vec<Value>, String> {
    let home = tempfile::tempdir().unwrap();
    let out = helm_cmd(home.path())
        .args(["template", "rbo"])
        .arg(repo_root().join("manifests/helm"))
        .args(["--namespace", NAMESPACE, "--include-crds"])
        .args(["--kube-version", kube_version()])
        .args(args)
        .output()
        .expect("helm starts");
    if out.status.success() {
        Ok(yaml_documents(&String::from_utf8(out.stdout).unwrap()))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn helm_ok(args: &[&str]) -> Vec<Value> {
    helm(args).unwrap_or_else(|e| panic!("helm template {args:?} failed: {e}"))
}

#[test]
fn helm_lint_passes_strict_for_defaults_and_each_certificate_mode() {
    let home = tempfile::tempdir().unwrap();
    for set in [
        None,
        Some("webhook.certificate.mode=cert-manager"),
        Some(
            "webhook.certificate.mode=existing-secret,webhook.certificate.existingSecret=tls,webhook.certificate.caBundle=Y2E=",
        ),
        Some("watchNamespace=team-a,smtp.enabled=true,smtp.host=h,smtp.sender=s@example.com"),
    ] {
        let mut lint = helm_cmd(home.path());
        lint.args(["lint", "--strict"])
            .arg(repo_root().join("manifests/helm"))
            .args(["--namespace", NAMESPACE, "--kube-version", kube_version()]);
        if let Some(set) = set {
            lint.args(["--set", set]);
        }
        let out = run(&mut lint, "helm");
        assert!(
            out.contains("1 chart(s) linted, 0 chart(s) failed"),
            "{set:?}: {out}"
        );
    }
}

fn env_of(d: &Deployment) -> BTreeMap<String, k8s_openapi::api::core::v1::EnvVar> {
    pod_spec(d).containers[0]
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name.clone(), e))
        .collect()
}

fn only<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let all = all_of(objects, kind);
    assert_eq!(all.len(), 1, "one {kind}");
    all[0]
}

#[test]
fn helm_chart_defaults_install_two_hardened_deployments_with_a_generated_certificate() {
    let objects = helm_ok(&[]);
    for o in &objects {
        assert_well_formed(o);
    }
    assert_pods_hardened(&objects);
    let deployments = all_of(&objects, "Deployment");
    assert_eq!(deployments.len(), 2);
    let controller = deployment(&objects, "rbo-resource-booking-operator-controller");
    let webhook = deployment(&objects, "rbo-resource-booking-operator-webhook");
    assert_eq!(controller.spec.replicas, Some(1));
    assert_eq!(webhook.spec.replicas, Some(2));
    assert!(
        pod_spec(&webhook)
            .affinity
            .and_then(|a| a.pod_anti_affinity)
            .is_some()
    );
    assert_eq!(
        pod_spec(&controller).service_account_name.as_deref(),
        Some(CONTROLLER_SA)
    );
    find(
        &objects,
        "PodDisruptionBudget",
        "rbo-resource-booking-operator-webhook",
    );
    let env = env_of(&controller);
    assert_eq!(env["NAMESPACE"].value.as_deref(), Some(""));
    assert_eq!(
        env["TAG_PREFIX"].value.as_deref(),
        Some("resource-booking/")
    );
    assert!(!env.contains_key("SMTP_PASSWORD"), "SMTP is off by default");
    let sa = find(&objects, "ServiceAccount", CONTROLLER_SA);
    assert!(
        sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].is_null(),
        "no IRSA annotation unless set"
    );
    // Argo CD sync waves: identities and certificates, then workloads, then registration.
    for o in &objects {
        let wave = o["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"]
            .as_str()
            .map_or(0, |w| w.parse::<i64>().unwrap());
        let expected = match kind_of(o) {
            "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration" => 1,
            "Deployment" | "Service" | "PodDisruptionBudget" | "CustomResourceDefinition" => 0,
            _ => -1,
        };
        assert_eq!(wave, expected, "sync wave of {} {}", kind_of(o), name_of(o));
    }
    for o in &objects {
        let cluster_scoped = matches!(
            kind_of(o),
            "CustomResourceDefinition"
                | "ClusterRole"
                | "ClusterRoleBinding"
                | "ValidatingWebhookConfiguration"
                | "MutatingWebhookConfiguration"
        );
        assert_eq!(
            o["metadata"]["namespace"].is_null(),
            cluster_scoped,
            "{} {}",
            kind_of(o),
            name_of(o)
        );
    }

    // crds/ holds exactly the generated CRDs.
    for entry in std::fs::read_dir(repo_root().join("manifests/crds")).unwrap() {
        let path = entry.unwrap().path();
        let chart_copy = repo_root()
            .join("manifests/helm/crds")
            .join(path.file_name().unwrap());
        assert!(
            std::fs::read_to_string(&path).unwrap()
                == std::fs::read_to_string(&chart_copy).unwrap_or_default(),
            "{} differs from {}: copy manifests/crds/*.yaml to manifests/helm/crds/ after `make crds`",
            chart_copy.display(),
            path.display()
        );
    }
    assert_eq!(all_of(&objects, "CustomResourceDefinition").len(), 4);

    // Self-signed mode: a TLS Secret whose CA is every webhook's caBundle and whose serving
    // certificate names the Service.
    let secret: Secret = typed(only(&objects, "Secret"));
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let data = secret.data.clone().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("ca.crt"), &data["ca.crt"].0).unwrap();
    std::fs::write(tmp.path().join("tls.crt"), &data["tls.crt"].0).unwrap();
    let p = |f: &str| tmp.path().join(f).display().to_string();
    openssl(&["verify", "-CAfile", &p("ca.crt"), &p("tls.crt")]);
    let text = openssl(&["x509", "-in", &p("tls.crt"), "-noout", "-text"]);
    assert!(
        text.contains(&format!(
            "DNS:rbo-resource-booking-operator-webhook.{NAMESPACE}.svc"
        )),
        "{text}"
    );
    assert!(
        pod_spec(&webhook).volumes.unwrap().iter().any(|v| v
            .secret
            .as_ref()
            .and_then(|s| s.secret_name.clone())
            == secret.metadata.name),
        "the webhook mounts the generated Secret"
    );
    let service = find(&objects, "Service", "rbo-resource-booking-operator-webhook");
    for (what, cc) in webhook_client_configs(&objects) {
        let bundle = base64::engine::general_purpose::STANDARD
            .decode(cc["caBundle"].as_str().unwrap())
            .unwrap();
        assert_eq!(
            bundle, data["ca.crt"].0,
            "{what}: caBundle is the generated CA"
        );
        assert_eq!(cc["service"]["name"], service["metadata"]["name"], "{what}");
        assert_eq!(cc["service"]["namespace"], NAMESPACE, "{what}");
    }
}

#[test]
fn helm_values_configure_each_deployment_irsa_smtp_scope_and_the_webhook() {
    let values = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        values.path(),
        "controller:\n  tolerations: [{key: dedicated, operator: Equal, value: ops, effect: NoSchedule}]\n  resources: {requests: {cpu: 10m, memory: 32Mi}, limits: {cpu: 100m, memory: 64Mi}}\nwebhook:\n  tolerations: [{key: edge, operator: Exists}]\n",
    )
    .unwrap();
    let objects = helm_ok(&[
        "-f",
        values.path().to_str().unwrap(),
        "--set",
        "controller.serviceAccount.irsaRoleArn=arn:aws:iam::123456789012:role/booking-operator",
        "--set",
        "smtp.enabled=true,smtp.host=smtp.example.com,smtp.port=2525,smtp.sender=bookings@example.com,smtp.existingSecret=smtp-credentials",
        "--set",
        "tagPrefix=acme/booking-,watchNamespace=team-a",
        "--set",
        "webhook.failurePolicy=Ignore,webhook.timeoutSeconds=12,webhook.replicas=3,controller.replicas=2",
        "--set",
        "controller.image.tag=1.2.3,webhook.image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    ]);
    for o in &objects {
        assert_well_formed(o);
    }
    assert_pods_hardened(&objects);
    let sa = find(&objects, "ServiceAccount", CONTROLLER_SA);
    assert_eq!(
        sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
        "arn:aws:iam::123456789012:role/booking-operator"
    );
    let controller = deployment(&objects, "rbo-resource-booking-operator-controller");
    let webhook = deployment(&objects, "rbo-resource-booking-operator-webhook");
    // Each Deployment takes its own replicas, image, resources and tolerations.
    assert_eq!(controller.spec.replicas, Some(2));
    assert_eq!(webhook.spec.replicas, Some(3));
    assert_eq!(
        pod_spec(&controller).containers[0].image.as_deref(),
        Some("ghcr.io/kotaicode/booking-controller:1.2.3")
    );
    assert!(
        pod_spec(&webhook).containers[0]
            .image
            .as_deref()
            .unwrap()
            .ends_with("@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
    );
    assert_eq!(
        pod_spec(&controller).tolerations.unwrap()[0].key.as_deref(),
        Some("dedicated")
    );
    assert_eq!(
        pod_spec(&webhook).tolerations.unwrap()[0].key.as_deref(),
        Some("edge")
    );
    let limits = pod_spec(&controller).containers[0]
        .resources
        .clone()
        .unwrap()
        .limits
        .unwrap();
    assert_eq!(limits["memory"].0, "64Mi");
    let wlimits = pod_spec(&webhook).containers[0]
        .resources
        .clone()
        .unwrap()
        .limits
        .unwrap();
    assert_eq!(
        wlimits["memory"].0, "256Mi",
        "the webhook keeps its own defaults"
    );
    // SMTP: settings as values, credentials only as references to the existing Secret.
    let env = env_of(&controller);
    assert_eq!(env["SMTP_HOST"].value.as_deref(), Some("smtp.example.com"));
    assert_eq!(env["SMTP_PORT"].value.as_deref(), Some("2525"));
    assert_eq!(
        env["SMTP_SENDER"].value.as_deref(),
        Some("bookings@example.com")
    );
    for (var, key) in [("SMTP_USERNAME", "username"), ("SMTP_PASSWORD", "password")] {
        let r = env[var]
            .value_from
            .clone()
            .and_then(|v| v.secret_key_ref)
            .unwrap_or_else(|| panic!("{var} from a Secret"));
        assert_eq!((r.name.as_str(), r.key.as_str()), ("smtp-credentials", key));
        assert!(env[var].value.is_none());
    }
    assert_eq!(env["TAG_PREFIX"].value.as_deref(), Some("acme/booking-"));
    // Namespace scope: the controller's permissions are a Role in that namespace only.
    assert_eq!(env["NAMESPACE"].value.as_deref(), Some("team-a"));
    let role = find(&objects, "Role", "rbo-resource-booking-operator-controller");
    assert_eq!(role["metadata"]["namespace"], "team-a");
    assert!(
        !objects.iter().any(|o| kind_of(o) == "ClusterRole"
            && name_of(o) == "rbo-resource-booking-operator-controller")
    );
    let binding = find(
        &objects,
        "RoleBinding",
        "rbo-resource-booking-operator-controller",
    );
    assert_eq!(binding["subjects"][0]["namespace"], NAMESPACE);
    // Webhook failurePolicy (Bookings) and timeout, and the namespace restriction.
    for o in objects
        .iter()
        .filter(|o| kind_of(o).ends_with("WebhookConfiguration"))
    {
        for w in o["webhooks"].as_array().unwrap() {
            assert_eq!(w["timeoutSeconds"], 12);
            if w["name"].as_str().unwrap().starts_with("bookings.") {
                assert_eq!(w["failurePolicy"], "Ignore");
            }
            let exprs = w["namespaceSelector"]["matchExpressions"]
                .as_array()
                .unwrap();
            assert!(
                exprs.iter().any(
                    |e| e["key"] == "kubernetes.io/metadata.name" && e["values"][0] == "team-a"
                )
            );
        }
    }
}

#[test]
fn helm_certificate_modes() {
    // cert-manager: Issuer + Certificate, CA injected, no Secret from the chart.
    let objects = helm_ok(&["--set", "webhook.certificate.mode=cert-manager"]);
    for o in &objects {
        assert_well_formed(o);
    }
    assert!(all_of(&objects, "Secret").is_empty());
    let cert = only(&objects, "Certificate");
    let issuer = only(&objects, "Issuer");
    assert_eq!(
        cert["spec"]["issuerRef"]["name"],
        issuer["metadata"]["name"]
    );
    assert_eq!(cert["spec"]["issuerRef"]["kind"], "Issuer");
    assert_eq!(
        cert["spec"]["dnsNames"][0],
        format!("rbo-resource-booking-operator-webhook.{NAMESPACE}.svc")
    );
    let webhook = deployment(&objects, "rbo-resource-booking-operator-webhook");
    assert!(
        pod_spec(&webhook).volumes.unwrap().iter().any(|v| v
            .secret
            .as_ref()
            .and_then(|s| s.secret_name.as_deref())
            == cert["spec"]["secretName"].as_str())
    );
    for o in objects
        .iter()
        .filter(|o| kind_of(o).ends_with("WebhookConfiguration"))
    {
        assert_eq!(
            o["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            format!("{NAMESPACE}/{}", name_of(cert))
        );
    }
    for (what, cc) in webhook_client_configs(&objects) {
        assert!(
            cc["caBundle"].is_null(),
            "{what}: cert-manager injects the caBundle"
        );
    }
    // A cluster issuer of your own.
    let objects = helm_ok(&[
        "--set",
        "webhook.certificate.mode=cert-manager,webhook.certificate.certManager.issuerRef.name=corp-ca,webhook.certificate.certManager.issuerRef.kind=ClusterIssuer",
    ]);
    assert!(all_of(&objects, "Issuer").is_empty());
    assert_eq!(
        only(&objects, "Certificate")["spec"]["issuerRef"]["kind"],
        "ClusterIssuer"
    );

    // existing-secret: the named Secret is mounted, the given CA is the caBundle.
    let ca = base64::engine::general_purpose::STANDARD.encode("-----BEGIN CERTIFICATE-----\n...\n");
    let objects = helm_ok(&[
        "--set",
        &format!(
            "webhook.certificate.mode=existing-secret,webhook.certificate.existingSecret=my-tls,webhook.certificate.caBundle={ca}"
        ),
    ]);
    assert!(all_of(&objects, "Secret").is_empty() && all_of(&objects, "Certificate").is_empty());
    let webhook = deployment(&objects, "rbo-resource-booking-operator-webhook");
    assert!(
        pod_spec(&webhook).volumes.unwrap().iter().any(|v| v
            .secret
            .as_ref()
            .and_then(|s| s.secret_name.as_deref())
            == Some("my-tls"))
    );
    for (what, cc) in webhook_client_configs(&objects) {
        assert_eq!(cc["caBundle"], ca.as_str(), "{what}");
    }
}

#[test]
fn helm_chart_refuses_bad_values_with_a_message() {
    for (set, message) in [
        (
            "webhook.certificate.mode=bogus",
            "use cert-manager, self-signed or existing-secret",
        ),
        (
            "webhook.certificate.mode=existing-secret",
            "existingSecret is required",
        ),
        (
            "webhook.certificate.mode=existing-secret,webhook.certificate.existingSecret=x",
            "caBundle",
        ),
        ("webhook.failurePolicy=Sometimes", "use Fail or Ignore"),
        ("webhook.timeoutSeconds=31", "between 1 and 30"),
        ("controller.image.tag=latest", "latest is not allowed"),
        ("smtp.enabled=true", "smtp.host is required"),
        (
            "smtp.enabled=true,smtp.host=h,smtp.sender=s,smtp.security=ssl",
            "use starttls, tls or none",
        ),
        (
            "controller.serviceAccount.irsaRoleArn=my-role",
            "not an IAM role ARN",
        ),
        ("tagPrefix=aws:x", "reserved by AWS"),
        (
            "controller.replicas=2,controller.leaderElection=false",
            "leaderElection",
        ),
    ] {
        let err = helm(&["--set", set]).expect_err(set);
        assert!(
            err.contains(message),
            "--set {set}: expected {message:?} in {err}"
        );
    }
}

#[test]
fn helm_and_kustomize_register_the_same_webhooks() {
    fn shape(objects: &[Value]) -> BTreeMap<String, Value> {
        objects
            .iter()
            .filter(|o| kind_of(o).ends_with("WebhookConfiguration"))
            .flat_map(|o| {
                o["webhooks"].as_array().unwrap().iter().map(move |w| {
                    let mut w = w.clone();
                    let cc = w.as_object_mut().unwrap().remove("clientConfig").unwrap();
                    w["path"] = cc["service"]["path"].clone();
                    w["port"] = cc["service"]["port"].clone();
                    (format!("{} {}", kind_of(o), w["name"].as_str().unwrap()), w)
                })
            })
            .collect()
    }
    let helm_objects = helm_ok(&[]);
    let kustomize_objects = base();
    assert_eq!(
        shape(&helm_objects),
        shape(&kustomize_objects),
        "the chart's webhook configurations follow manifests/webhook/"
    );
}

// === a control plane of the test's own ===

/// A real control plane (etcd, kube-apiserver with RBAC and PodSecurity admission,
/// kube-controller-manager) owned by one test, with the release's kubectl and helm pointed at
/// it. Stopped when dropped, also when the test fails.
struct Plane {
    plane: ControlPlane,
    dir: TestDir,
}

impl Plane {
    async fn start(label: &str) -> Plane {
        let dir = TestDir::new(label).expect("test directory");
        let started = Instant::now();
        let plane = ControlPlane::start(&dir, ControlPlaneOptions::default())
            .await
            .expect("the control plane starts");
        eprintln!("control plane ready in {:?}", started.elapsed());
        Plane { plane, dir }
    }

    fn kubeconfig(&self) -> &Path {
        self.plane.kubeconfig_path()
    }

    fn kubectl(&self) -> Command {
        let mut c = kubectl_cmd();
        c.env("KUBECONFIG", self.kubeconfig());
        c
    }

    fn helm(&self) -> Command {
        let mut c = helm_cmd(&self.dir.join("helm"));
        c.env("KUBECONFIG", self.kubeconfig());
        c
    }

    /// kubectl with `args`; its stdout, or a panic with its stderr.
    fn k(&self, args: &[&str]) -> String {
        run(self.kubectl().args(args), "kubectl")
    }

    /// kubectl with `args` and `stdin`, whatever its outcome.
    fn k_output(&self, args: &[&str], stdin: &str) -> Output {
        use std::io::Write as _;
        let mut child = self
            .kubectl()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl starts");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }

    /// `kubectl get <args> -o json`.
    fn get(&self, args: &[&str]) -> Value {
        let mut all = vec!["get"];
        all.extend(args);
        all.extend(["-o", "json"]);
        serde_json::from_str(&self.k(&all)).expect("kubectl get prints JSON")
    }

    /// Server-side applies with Argo CD's field manager, as its sync does.
    fn apply(&self, source: &[&str]) -> String {
        let mut args = vec!["apply", "--server-side", "--field-manager", ARGO_CD_MANAGER];
        args.extend(source);
        self.k(&args)
    }

    fn wait_crds_established(&self) {
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
    fn can_i(&self, ns: &str, sa: &str, check: &str) -> bool {
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
    fn assert_rbac(&self, ns: &str, sa: &str, allowed: &[String], refused: &[String]) {
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
    fn wait_for_pods(&self, ns: &str, deployment: &str, replicas: usize) -> Vec<Value> {
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
    fn assert_no_drift(&self, kustomization: &Path) {
        let dir = kustomization.to_str().unwrap();
        self.apply(&["-k", dir]);
        let out = self.k_output(
            &[
                "diff",
                "--server-side",
                "--field-manager",
                ARGO_CD_MANAGER,
                "-k",
                dir,
            ],
            "",
        );
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

/// A namespace whose requests both webhooks skip (the opt-out label of their
/// namespaceSelector): objects are created there while the webhook Pods do not run.
fn opted_out_namespace(p: &Plane, name: &str) {
    p.k(&["create", "namespace", name]);
    p.k(&[
        "label",
        "namespace",
        name,
        "manager.kotaico.de/admission=disabled",
    ]);
}

/// cert-manager is not part of these tests; its two kinds are registered with open schemas so
/// that the base, which includes `components/cert-manager`, applies whole. What the install
/// relies on in the Certificate is checked in `kustomize_base_renders_the_whole_install`.
fn register_cert_manager_kinds(p: &Plane) {
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
    let out = p.k_output(&["apply", "--server-side", "-f", "-"], &list.to_string());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    p.wait_crds_established();
}

/// The served object's managedFields entries of `manager`.
fn managed_by<'a>(object: &'a Value, manager: &str) -> Vec<&'a Value> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["manager"] == manager)
        .collect()
}

// === installed into a real API server ===

/// What the controller's service account may do, as `kubectl auth can-i` arguments, and a
/// sample of what it must not. `ns` is the operator's namespace, `lease` the controller's
/// Lease, `served` a namespace it serves and `other` one it does not (None: it serves all).
fn controller_rbac(
    ns: &str,
    lease: &str,
    served: &str,
    other: Option<&str>,
) -> (Vec<String>, Vec<String>) {
    let kinds = CRD_KINDS.map(|k| format!("{}s.manager.kotaico.de", k.to_lowercase()));
    let mut allowed = Vec::new();
    let mut refused = Vec::new();
    // Outside the served namespaces: refused; across all namespaces: allowed only when it
    // serves them all.
    let mut outside = Vec::new();
    let mut elsewhere = |check: String| {
        if let Some(o) = other {
            outside.push(format!("{check} -n {o}"));
        }
    };
    for k in &kinds {
        for verb in ["get", "list", "watch"] {
            allowed.push(format!("{verb} {k} -n {served}"));
            elsewhere(format!("{verb} {k}"));
        }
        for verb in ["get", "patch", "update"] {
            allowed.push(format!("{verb} {k} --subresource=status -n {served}"));
            elsewhere(format!("{verb} {k} --subresource=status"));
        }
    }
    for k in ["bookings", "resources"] {
        for verb in ["create", "delete"] {
            allowed.push(format!("{verb} {k}.manager.kotaico.de -n {served}"));
            elsewhere(format!("{verb} {k}.manager.kotaico.de"));
        }
    }
    for verb in ["create", "patch"] {
        allowed.push(format!("{verb} events.events.k8s.io -n {served}"));
    }
    refused.append(&mut outside);
    for k in &kinds {
        for verb in ["list", "watch"] {
            let all = format!("{verb} {k} -A");
            if other.is_none() {
                allowed.push(all);
            } else {
                refused.push(all);
            }
        }
        // Never the spec.
        for verb in ["update", "patch", "deletecollection"] {
            refused.push(format!("{verb} {k} -n {served}"));
        }
    }
    for k in ["bookingschedulers", "resourcemonitors"] {
        for verb in ["create", "delete"] {
            refused.push(format!("{verb} {k}.manager.kotaico.de -n {served}"));
        }
    }
    allowed.push(format!("create leases.coordination.k8s.io -n {ns}"));
    for verb in ["get", "update", "patch"] {
        allowed.push(format!("{verb} leases.coordination.k8s.io/{lease} -n {ns}"));
        refused.push(format!(
            "{verb} leases.coordination.k8s.io/someone-else -n {ns}"
        ));
    }
    refused.extend([
        format!("create leases.coordination.k8s.io -n {served}"),
        format!("delete leases.coordination.k8s.io/{lease} -n {ns}"),
        format!("get secrets -n {ns}"),
        format!("list secrets -n {served}"),
        format!("get configmaps -n {ns}"),
        format!("list pods -n {served}"),
        format!("create pods -n {ns}"),
        format!("patch deployments.apps -n {ns}"),
        "create customresourcedefinitions.apiextensions.k8s.io".into(),
        "patch validatingwebhookconfigurations.admissionregistration.k8s.io".into(),
        "create clusterrolebindings.rbac.authorization.k8s.io".into(),
        format!("impersonate serviceaccounts -n {ns}"),
        "list namespaces".into(),
    ]);
    (allowed, refused)
}

/// What the webhook's service account may do (read Bookings and Resources everywhere), and a
/// sample of what it must not.
fn webhook_rbac(ns: &str) -> (Vec<String>, Vec<String>) {
    let mut allowed = Vec::new();
    let mut refused = Vec::new();
    for k in ["bookings", "resources"] {
        for verb in ["get", "list", "watch"] {
            allowed.push(format!("{verb} {k}.manager.kotaico.de -A"));
            allowed.push(format!("{verb} {k}.manager.kotaico.de -n team-a"));
        }
        for verb in ["create", "update", "patch", "delete"] {
            refused.push(format!("{verb} {k}.manager.kotaico.de -n team-a"));
        }
        refused.push(format!(
            "patch {k}.manager.kotaico.de --subresource=status -n team-a"
        ));
    }
    for k in ["bookingschedulers", "resourcemonitors"] {
        refused.push(format!("get {k}.manager.kotaico.de -n team-a"));
        refused.push(format!("list {k}.manager.kotaico.de -A"));
    }
    refused.extend([
        format!("get secrets -n {ns}"),
        "list secrets -A".into(),
        format!("list pods -n {ns}"),
        format!("create leases.coordination.k8s.io -n {ns}"),
        "create events.events.k8s.io -n team-a".into(),
        "create tokenreviews.authentication.k8s.io".into(),
        "list namespaces".into(),
    ]);
    (allowed, refused)
}

/// A Pod that breaks the restricted Pod Security Standard (no securityContext at all).
fn unhardened_pod(ns: &str) -> String {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "unhardened", "namespace": ns},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}})
    .to_string()
}

fn assert_restricted_is_enforced(p: &Plane, ns: &str) {
    // The Pod is admitted (or not) once kube-controller-manager made the namespace's default
    // ServiceAccount, which the ServiceAccount admission plugin looks up first.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !p
        .k_output(&["get", "serviceaccount", "default", "-n", ns], "")
        .status
        .success()
    {
        assert!(
            Instant::now() < deadline,
            "no default ServiceAccount in {ns}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = p.k_output(
        &["create", "--dry-run=server", "-f", "-"],
        &unhardened_pod(ns),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("violates PodSecurity \"restricted:latest\""),
        "namespace {ns} enforces the restricted Pod Security Standard: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kustomize_install_is_accepted_admitted_least_privileged_and_drift_free() {
    // A control plane of this test's own: the install registers cluster-wide webhook
    // configurations (which would call a webhook that is not running for every Booking of
    // other tests), ClusterRoles and CRDs.
    let p = Plane::start("kustomize-install").await;
    register_cert_manager_kinds(&p);
    let manifests = repo_root().join("manifests");
    let manifests_arg = manifests.to_str().unwrap();

    // `kubectl apply --server-side -k manifests/`: every object is accepted, the CRDs by the
    // server's structural-schema and CEL checks.
    p.apply(&["-k", manifests_arg]);
    p.wait_crds_established();
    let objects = base();
    for o in &objects {
        let mut args = vec![kind_of(o).to_lowercase(), name_of(o).to_owned()];
        if !api_group(o).is_empty() {
            args[0] = format!("{}.{}", args[0], api_group(o));
        }
        if let Some(ns) = o["metadata"]["namespace"].as_str() {
            args.extend(["-n".into(), ns.to_owned()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let served = p.get(&args);
        assert_eq!(served["metadata"]["name"], o["metadata"]["name"]);
    }
    for crd in all_of(&objects, "CustomResourceDefinition") {
        let served = p.get(&["crd", name_of(crd)]);
        let conditions = served["status"]["conditions"].as_array().unwrap();
        let status = |t: &str| {
            conditions
                .iter()
                .find(|c| c["type"] == t)
                .map(|c| c["status"].as_str().unwrap().to_owned())
        };
        assert_eq!(
            status("Established").as_deref(),
            Some("True"),
            "{}",
            name_of(crd)
        );
        assert_eq!(
            status("NamesAccepted").as_deref(),
            Some("True"),
            "{}",
            name_of(crd)
        );
        assert_ne!(
            status("NonStructuralSchema").as_deref(),
            Some("True"),
            "{}: {conditions:?}",
            name_of(crd)
        );
    }

    // The Deployments' Pods are created by kube-controller-manager and admitted under the
    // restricted Pod Security Standard the namespace enforces.
    assert_restricted_is_enforced(&p, NAMESPACE);
    for (deployment, replicas, sa) in [
        ("booking-controller", 1, CONTROLLER_SA),
        ("booking-webhook", 2, WEBHOOK_SA),
    ] {
        for pod in p.wait_for_pods(NAMESPACE, deployment, replicas) {
            assert_eq!(pod["spec"]["serviceAccountName"], sa, "{deployment}");
        }
    }

    // Each service account may do what its RBAC promises, and not the rest.
    let (allowed, refused) = controller_rbac(NAMESPACE, "booking-controller", "team-a", None);
    p.assert_rbac(NAMESPACE, CONTROLLER_SA, &allowed, &refused);
    let (allowed, refused) = webhook_rbac(NAMESPACE);
    p.assert_rbac(NAMESPACE, WEBHOOK_SA, &allowed, &refused);

    // Argo CD: a second sync changes nothing.
    p.assert_no_drift(&manifests);

    // Argo CD syncs a Booking; the controller writes its status (its own code, field manager
    // and service account), which leaves Argo CD's fields alone and shows no drift.
    opted_out_namespace(&p, "team-a");
    let booking = repo_root().join("manifests/samples/booking.yaml");
    let booking_arg = booking.to_str().unwrap();
    p.apply(&["-n", "team-a", "-f", booking_arg]);
    let name = name_of(&read_yaml_documents(&booking)[0]).to_owned();
    let user = format!("system:serviceaccount:{NAMESPACE}:{CONTROLLER_SA}");
    let groups = [
        "system:serviceaccounts",
        &format!("system:serviceaccounts:{NAMESPACE}"),
        "system:authenticated",
    ];
    let client = control_plane::client_from(p.kubeconfig(), Some((&user, &groups)))
        .await
        .unwrap();
    let api: kube::Api<Booking> = kube::Api::namespaced(client, "team-a");
    let status: booking_shared::api::BookingStatus = serde_json::from_value(json!({
        "status": "SCHEDULED",
        "notification_sent": false,
        "observedGeneration": 1,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Scheduled",
            "message": "starts at 2031-03-31T16:00:00Z", "lastTransitionTime": "2031-01-01T00:00:00Z",
            "observedGeneration": 1}],
    }))
    .unwrap();
    let stored = api.get(&name).await.expect("the booking as stored");
    booking_controller::reconcile::write_status_with(&api.clone().into_client(), &stored, &status)
        .await
        .expect("the controller's service account writes a Booking's status");
    let served = p.get(&["booking", &name, "-n", "team-a", "--show-managed-fields"]);
    assert_eq!(served["status"]["status"], "SCHEDULED");
    let managers: Vec<&Value> = served["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .collect();
    let argo = managed_by(&served, ARGO_CD_MANAGER);
    assert_eq!(argo.len(), 1, "{managers:?}");
    assert!(argo[0]["fieldsV1"]["f:status"].is_null(), "{managers:?}");
    let controller: Vec<&&Value> = managers
        .iter()
        .filter(|m| m["manager"] != ARGO_CD_MANAGER)
        .collect();
    assert!(!controller.is_empty(), "{managers:?}");
    for m in controller {
        assert_eq!(
            m["manager"],
            booking_controller::context::FIELD_MANAGER,
            "the controller's writes carry its own field manager: {m}"
        );
        assert_eq!(m["subresource"], "status", "{m}");
        let fields: Vec<&String> = m["fieldsV1"].as_object().unwrap().keys().collect();
        assert_eq!(fields, ["f:status"], "the controller owns only status: {m}");
    }
    let out = p.k_output(
        &[
            "diff",
            "--server-side",
            "--field-manager",
            ARGO_CD_MANAGER,
            "-n",
            "team-a",
            "-f",
            booking_arg,
        ],
        "",
    );
    assert!(
        out.status.success() && out.stdout.is_empty(),
        "a status write is no drift: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // The development-certificate variant over it: the Secret of certs/, the dev CA in every
    // caBundle, cert-manager's annotation gone; again without drift.
    let tmp = p.dir.subdir("dev-certs").unwrap();
    let out_dir = tmp.join("out");
    run(
        Command::new(repo_root().join("certs/make-dev-certs.sh"))
            .arg("--out-dir")
            .arg(&out_dir),
        "bash",
    );
    p.apply(&["-k", out_dir.to_str().unwrap()]);
    let ca = std::fs::read(out_dir.join("ca.crt")).unwrap();
    for kind in [
        "validatingwebhookconfiguration",
        "mutatingwebhookconfiguration",
    ] {
        let served = p.get(&[kind, "booking-webhook"]);
        assert!(
            served["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].is_null(),
            "{kind}: {}",
            served["metadata"]["annotations"]
        );
        for w in served["webhooks"].as_array().unwrap() {
            let bundle = base64::engine::general_purpose::STANDARD
                .decode(w["clientConfig"]["caBundle"].as_str().unwrap())
                .unwrap();
            assert_eq!(bundle, ca, "{kind} {}", w["name"]);
        }
    }
    let secrets = p.get(&["secrets", "-n", NAMESPACE]);
    assert!(
        secrets["items"].as_array().unwrap().iter().any(|s| {
            s["type"] == "kubernetes.io/tls"
                && name_of(s).starts_with("booking-webhook-tls")
                && s["data"]["ca.crt"]
                    .as_str()
                    .map(|c| base64::engine::general_purpose::STANDARD.decode(c).unwrap())
                    == Some(ca.clone())
        }),
        "the dev-certs Secret is installed"
    );
    p.wait_for_pods(NAMESPACE, "booking-webhook", 2);
    p.assert_no_drift(&out_dir);
}

fn api_group(o: &Value) -> String {
    o["apiVersion"]
        .as_str()
        .unwrap()
        .rsplit_once('/')
        .map(|(g, _)| g.to_owned())
        .unwrap_or_default()
}

/// The served Secret's `ca.crt` and every webhook's caBundle, of a Helm release `rbo` in `ns`.
fn helm_certificates(p: &Plane, ns: &str) -> (String, Vec<String>) {
    let secret = p.get(&[
        "secret",
        "rbo-resource-booking-operator-webhook-tls",
        "-n",
        ns,
    ]);
    let mut bundles = Vec::new();
    for kind in [
        "validatingwebhookconfiguration",
        "mutatingwebhookconfiguration",
    ] {
        let served = p.get(&[kind, "rbo-resource-booking-operator-webhook"]);
        for w in served["webhooks"].as_array().unwrap() {
            bundles.push(w["clientConfig"]["caBundle"].as_str().unwrap().to_owned());
        }
    }
    (
        secret["data"]["ca.crt"].as_str().unwrap().to_owned(),
        bundles,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_and_upgrade_on_a_real_api_server() {
    // A control plane of this test's own: the chart installs cluster-wide webhook
    // configurations, ClusterRoles and CRDs.
    let p = Plane::start("helm-install").await;
    let chart = repo_root().join("manifests/helm");
    let chart_arg = chart.to_str().unwrap();
    // The namespace enforces the restricted Pod Security Standard, as the kustomize install's.
    p.k(&["create", "namespace", NAMESPACE]);
    p.k(&[
        "label",
        "namespace",
        NAMESPACE,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
    ]);
    assert_restricted_is_enforced(&p, NAMESPACE);

    // helm install: its kubeVersion check reads the real server's version; crds/ first.
    let out = run(
        p.helm().args([
            "install",
            "rbo",
            chart_arg,
            "-n",
            NAMESPACE,
            "--timeout",
            "60s",
        ]),
        "helm",
    );
    assert!(out.contains("STATUS: deployed"), "{out}");
    p.wait_crds_established();
    for kind in CRD_KINDS {
        p.get(&[
            "crd",
            &format!("{}s.manager.kotaico.de", kind.to_lowercase()),
        ]);
    }
    let controller = "rbo-resource-booking-operator-controller";
    let webhook = "rbo-resource-booking-operator-webhook";
    for (deployment, replicas, sa) in [(controller, 1, CONTROLLER_SA), (webhook, 2, webhook)] {
        for pod in p.wait_for_pods(NAMESPACE, deployment, replicas) {
            assert_eq!(pod["spec"]["serviceAccountName"], sa, "{deployment}");
        }
    }
    let (allowed, refused) = controller_rbac(NAMESPACE, controller, "team-a", None);
    p.assert_rbac(NAMESPACE, CONTROLLER_SA, &allowed, &refused);
    let (allowed, refused) = webhook_rbac(NAMESPACE);
    p.assert_rbac(NAMESPACE, webhook, &allowed, &refused);
    let (ca, bundles) = helm_certificates(&p, NAMESPACE);
    assert!(
        bundles.iter().all(|b| *b == ca),
        "every caBundle is the chart's CA"
    );

    // helm upgrade to one served namespace and three webhook replicas: the certificate of the
    // install is kept (the chart's lookup of its Secret), the controller's permissions become a
    // Role in that namespace only, the ClusterRole goes.
    p.k(&["create", "namespace", "team-a"]);
    let out = run(
        p.helm().args([
            "upgrade",
            "rbo",
            chart_arg,
            "-n",
            NAMESPACE,
            "--reuse-values",
            "--set",
            "watchNamespace=team-a,webhook.replicas=3",
        ]),
        "helm",
    );
    assert!(out.contains("REVISION: 2"), "{out}");
    assert_eq!(
        helm_certificates(&p, NAMESPACE),
        (ca.clone(), bundles),
        "helm upgrade keeps the webhook's certificate"
    );
    p.wait_for_pods(NAMESPACE, webhook, 3);
    let gone = p.k_output(&["get", "clusterrole", controller], "");
    assert!(
        !gone.status.success(),
        "the controller's ClusterRole is removed"
    );
    let (allowed, refused) = controller_rbac(NAMESPACE, controller, "team-a", Some("team-b"));
    p.assert_rbac(NAMESPACE, CONTROLLER_SA, &allowed, &refused);
    let (allowed, refused) = webhook_rbac(NAMESPACE);
    p.assert_rbac(NAMESPACE, webhook, &allowed, &refused);
    let status = run(p.helm().args(["status", "rbo", "-n", NAMESPACE]), "helm");
    assert!(status.contains("STATUS: deployed"), "{status}");
}

// === Argo CD health checks (docs/argocd.md), run with Lua 5.1 as Argo CD's gopher-lua ===

/// A JSON value as a Lua table constructor.
fn lua_literal(v: &Value) -> String {
    match v {
        Value::Null => "nil".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Array(a) => format!(
            "{{{}}}",
            a.iter().map(lua_literal).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!("[{k:?}] = {}", lua_literal(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Runs a health script on `obj` and returns (status, message).
fn argo_health(script: &str, obj: &Value) -> (String, String) {
    let program = format!(
        "obj = {}\nlocal function health()\n{script}\nend\nlocal hs = health()\nio.write(hs.status, \"|\", hs.message or \"\")\n",
        lua_literal(obj)
    );
    let out = run(
        Command::new("lua5.1").arg("-e").arg(&program),
        "Lua 5.1 runs the Argo CD health checks: apt-get install lua5.1",
    );
    let (status, message) = out.split_once('|').expect("status|message");
    (status.to_owned(), message.to_owned())
}

#[test]
fn argo_cd_health_checks_of_the_docs_read_the_ready_condition() {
    let doc = std::fs::read_to_string(repo_root().join("docs/argocd.md")).unwrap();
    let block = doc
        .split("```yaml")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .find(|b| b.contains("name: argocd-cm"))
        .expect("docs/argocd.md has the argocd-cm ConfigMap");
    let cm: ConfigMap = serde_yaml::from_str(block).expect("the argocd-cm example is valid YAML");
    let data = cm.data.unwrap();
    for kind in CRD_KINDS {
        let script = data
            .get(&format!(
                "resource.customizations.health.manager.kotaico.de_{kind}"
            ))
            .unwrap_or_else(|| panic!("a health check for {kind}"));
        let object = |status: Value| {
            serde_json::json!({"apiVersion": "manager.kotaico.de/v1", "kind": kind,
                "metadata": {"name": "x", "generation": 3}, "status": status})
        };
        let ready = |s: &str| {
            serde_json::json!({"observedGeneration": 3, "conditions": [
                {"type": "Other", "status": "False", "reason": "R", "message": "ignored"},
                {"type": "Ready", "status": s, "reason": "Because", "message": format!("ready is {s}")}]})
        };
        let cases = [
            (object(Value::Null), "Progressing"),
            (object(serde_json::json!({})), "Progressing"),
            (object(ready("True")), "Healthy"),
            (object(ready("False")), "Degraded"),
            (object(ready("Unknown")), "Progressing"),
            (
                object(
                    serde_json::json!({"observedGeneration": 2, "conditions": [{"type": "Ready", "status": "True"}]}),
                ),
                "Progressing",
            ),
            (
                object(serde_json::json!({"conditions": [{"type": "Synced", "status": "True"}]})),
                "Progressing",
            ),
        ];
        for (obj, expected) in cases {
            let (status, message) = argo_health(script, &obj);
            assert_eq!(status, expected, "{kind} {}: {message}", obj["status"]);
        }
        assert_eq!(
            argo_health(script, &object(ready("False"))).1,
            "ready is False",
            "the condition's message is shown"
        );
    }
}
