//! The admission port as installed: a NetworkPolicy letting in only the admission port (from
//! any source by default, restrictable to the control plane's CIDRs) and the admin port (from the
//! install's namespace), a `preStop` sleep action (the image has no shell) and a grace period
//! that covers the preStop, the drain and the shutdown grace, and the API server's client CA as
//! an option; in the kustomize base and the chart, rendered by the release's kubectl and helm and
//! applied to a real API server. Helpers: [`booking_tests::packaging`].

use std::collections::BTreeMap;

use booking_tests::packaging::*;
use booking_tests::{parse_yaml_documents, repo_root};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Container;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde_json::Value;

fn helm_render(set: &[&str]) -> Vec<Value> {
    let home = tempfile::tempdir().unwrap();
    let chart = repo_root().join("manifests/helm");
    let mut cmd = helm_cmd(home.path());
    cmd.args(["template", "rbo"]).arg(&chart).args([
        "-n",
        NAMESPACE,
        "--kube-version",
        kube_version(),
    ]);
    for s in set {
        cmd.args(["--set", s]);
    }
    parse_yaml_documents(&run(&mut cmd, "helm"), "helm template")
}

fn webhook_container(d: &Deployment) -> Container {
    pod_spec(d)
        .containers
        .into_iter()
        .find(|c| c.name == "webhook")
        .expect("a container named webhook")
}

fn env(c: &Container) -> BTreeMap<String, String> {
    c.env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect()
}

fn port_of(c: &Container, name: &str) -> i32 {
    c.ports
        .as_ref()
        .unwrap()
        .iter()
        .find(|p| p.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("port {name}"))
        .container_port
}

/// The webhook's NetworkPolicy selects the webhook's pods (and no other Deployment's), governs
/// ingress only, and has exactly two rules: the admission port from `admission_from` (empty:
/// any source) and the admin port from a non-empty `from`. Returns the admin rule's `from`.
fn assert_fenced(objects: &[Value], webhook: &str, admission_from: &Value) -> Value {
    let policies = all_of(objects, "NetworkPolicy");
    assert_eq!(policies.len(), 1, "one NetworkPolicy");
    let policy: NetworkPolicy = typed(policies[0]);
    let spec = policy.spec.unwrap();
    let selector = spec
        .pod_selector
        .and_then(|s| s.match_labels)
        .unwrap_or_default();
    assert!(!selector.is_empty());
    for d in all_of(objects, "Deployment") {
        let d: Deployment = typed(d);
        let labels = d.spec.template.metadata.unwrap().labels.unwrap();
        let selected = selector.iter().all(|(k, v)| labels.get(k) == Some(v));
        assert_eq!(
            selected,
            d.metadata.name.as_deref() == Some(webhook),
            "the policy selects only the webhook's pods, not {:?}",
            d.metadata.name
        );
    }
    assert_eq!(spec.policy_types, Some(vec!["Ingress".to_owned()]));
    let container = webhook_container(&deployment(objects, webhook));
    let (https, admin) = (
        port_of(&container, "https"),
        port_of(&container, "http-admin"),
    );
    let rules = spec.ingress.unwrap();
    assert_eq!(rules.len(), 2, "{rules:?}");
    let port = |r: &k8s_openapi::api::networking::v1::NetworkPolicyIngressRule| {
        let ports = r.ports.clone().unwrap();
        assert_eq!(ports.len(), 1);
        match ports[0].port.clone().unwrap() {
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(p) => p,
            other => panic!("a numeric port, not {other:?}"),
        }
    };
    let admission = rules
        .iter()
        .find(|r| port(r) == https)
        .expect("admission rule");
    assert_eq!(
        serde_json::to_value(admission.from.clone().unwrap_or_default()).unwrap(),
        *admission_from,
        "who may reach the admission port"
    );
    let admin_rule = rules.iter().find(|r| port(r) == admin).expect("admin rule");
    let from = admin_rule.from.clone().unwrap_or_default();
    assert!(
        !from.is_empty(),
        "the admin port is not open to every source"
    );
    serde_json::to_value(from).unwrap()
}

/// The webhook's container stops with the kubelet's `sleep` preStop action (no exec: the
/// distroless image has no shell nor sleep binary), and the pod's grace period covers the
/// preStop sleep, the drain and the shutdown grace.
fn assert_drains(objects: &[Value], webhook: &str) {
    let d = deployment(objects, webhook);
    let c = webhook_container(&d);
    let pre_stop = c.lifecycle.clone().unwrap().pre_stop.unwrap();
    assert!(pre_stop.exec.is_none(), "no exec: the image has no shell");
    let sleep = pre_stop.sleep.expect("a preStop sleep action").seconds;
    assert!(sleep >= 1, "preStop sleeps {sleep} s");
    let env = env(&c);
    let seconds = |k: &str| -> i64 {
        env.get(k)
            .unwrap_or_else(|| panic!("{k} is set"))
            .parse()
            .unwrap()
    };
    let drain = seconds("WEBHOOK_DRAIN_SECONDS");
    let grace = seconds("WEBHOOK_SHUTDOWN_GRACE_SECONDS");
    assert!(drain >= 5, "a drain of {drain} s lets endpoints update");
    let period = pod_spec(&d).termination_grace_period_seconds.unwrap();
    assert!(
        period > sleep + drain + grace,
        "terminationGracePeriodSeconds {period} covers preStop {sleep} + drain {drain} + grace {grace}"
    );
}

#[test]
fn kustomize_base_fences_the_admission_port_and_drains_the_webhook() {
    let objects = base();
    let admin_from = assert_fenced(&objects, "booking-webhook", &serde_json::json!([]));
    assert_eq!(admin_from, serde_json::json!([{"podSelector": {}}]));
    assert_drains(&objects, "booking-webhook");
    // No client CA by default: the original's API server configuration keeps working.
    let c = webhook_container(&deployment(&objects, "booking-webhook"));
    assert!(!env(&c).contains_key("WEBHOOK_CLIENT_CA_FILE"));
}

#[test]
fn helm_chart_fences_the_admission_port_drains_and_can_require_the_client_ca() {
    let webhook = "rbo-resource-booking-operator-webhook";
    let objects = helm_render(&[]);
    assert_fenced(&objects, webhook, &serde_json::json!([]));
    assert_drains(&objects, webhook);

    // Restricted to the control plane's CIDR, the admin port to a monitoring namespace, the
    // client CA required, a longer drain (the grace period follows).
    let objects = helm_render(&[
        "webhook.networkPolicy.admissionFrom[0].ipBlock.cidr=10.0.0.0/24",
        "webhook.networkPolicy.adminFrom[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=monitoring",
        "webhook.clientCA.secretName=apiserver-client-ca",
        "webhook.shutdown.drainSeconds=30",
    ]);
    for o in &objects {
        assert_well_formed(o);
    }
    let admin_from = assert_fenced(
        &objects,
        webhook,
        &serde_json::json!([{"ipBlock": {"cidr": "10.0.0.0/24"}}]),
    );
    assert_eq!(
        admin_from,
        serde_json::json!([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}])
    );
    assert_drains(&objects, webhook);
    let d = deployment(&objects, webhook);
    let c = webhook_container(&d);
    assert_eq!(env(&c)["WEBHOOK_DRAIN_SECONDS"], "30");
    let ca_file = env(&c)["WEBHOOK_CLIENT_CA_FILE"].clone();
    let mount = c
        .volume_mounts
        .unwrap()
        .into_iter()
        .find(|m| ca_file.starts_with(&format!("{}/", m.mount_path)))
        .expect("the client CA file is mounted");
    let volume = pod_spec(&d)
        .volumes
        .unwrap()
        .into_iter()
        .find(|v| v.name == mount.name)
        .unwrap();
    assert_eq!(
        volume.secret.unwrap().secret_name.as_deref(),
        Some("apiserver-client-ca")
    );

    // Disabled: no policy.
    let objects = helm_render(&["webhook.networkPolicy.enabled=false"]);
    assert!(all_of(&objects, "NetworkPolicy").is_empty());
}

/// The chart in cert-manager mode, with the admission port restricted and the client CA
/// required, and the kustomize base: accepted whole by a real API server (server-side apply;
/// cert-manager's kinds registered with open schemas), which serves the NetworkPolicy, the
/// preStop sleep action and the CA chain back as rendered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_policy_prestop_and_ca_chain_apply_on_a_real_api_server() {
    let p = Plane::start("admission-port").await;
    p.register_cert_manager_kinds();

    // kustomize base.
    let manifests = repo_root().join("manifests");
    p.apply(&["-k", manifests.to_str().unwrap()]);
    let served = p.get(&["networkpolicy", "booking-webhook", "-n", NAMESPACE]);
    let rendered = find(&base(), "NetworkPolicy", "booking-webhook").clone();
    assert_eq!(
        normalise(&served["spec"]),
        normalise(&rendered["spec"]),
        "the API server keeps the policy as rendered"
    );
    let d = p.get(&["deployment", "booking-webhook", "-n", NAMESPACE]);
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"],
        5
    );
    for name in ["booking-webhook-ca", "booking-webhook"] {
        p.get(&["certificates.cert-manager.io", name, "-n", NAMESPACE]);
    }
    for name in ["booking-webhook-selfsigned", "booking-webhook-ca"] {
        p.get(&["issuers.cert-manager.io", name, "-n", NAMESPACE]);
    }
    let served = p.get(&["validatingwebhookconfiguration", "booking-webhook"]);
    assert_eq!(
        served["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        format!("{NAMESPACE}/booking-webhook-ca")
    );

    // The chart, in a namespace of its own.
    let ns = "rbo-system";
    p.k(&["create", "namespace", ns]);
    let home = p.dir.join("helm");
    let chart = repo_root().join("manifests/helm");
    let rendered = run(
        helm_cmd(&home)
            .args(["template", "rbo"])
            .arg(&chart)
            .args(["-n", ns, "--kube-version", kube_version()])
            .args([
                "--set",
                "webhook.certificate.mode=cert-manager",
                "--set",
                "webhook.networkPolicy.admissionFrom[0].ipBlock.cidr=10.0.0.0/24",
                "--set",
                "webhook.clientCA.secretName=apiserver-client-ca",
            ]),
        "helm",
    );
    let out = p.k_output(
        &[
            "apply",
            "--server-side",
            "--field-manager",
            ARGO_CD_MANAGER,
            "-n",
            ns,
            "-f",
            "-",
        ],
        &rendered,
    );
    assert!(
        out.status.success(),
        "the chart applies: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let policy = p.get(&[
        "networkpolicy",
        "rbo-resource-booking-operator-webhook",
        "-n",
        ns,
    ]);
    assert_eq!(
        policy["spec"]["ingress"][0]["from"][0]["ipBlock"]["cidr"],
        "10.0.0.0/24"
    );
    let ca = p.get(&[
        "certificates.cert-manager.io",
        "rbo-resource-booking-operator-webhook-ca",
        "-n",
        ns,
    ]);
    assert_eq!(ca["spec"]["isCA"], true);
    let served = p.get(&[
        "mutatingwebhookconfiguration",
        "rbo-resource-booking-operator-webhook",
    ]);
    assert_eq!(
        served["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        format!("{ns}/rbo-resource-booking-operator-webhook-ca")
    );
}
