//! The kustomize base as users get it, rendered with the real `kubectl kustomize` of the tested
//! Kubernetes release: the whole install and its wiring, hardened and probed Pods, least-privilege
//! RBAC, and how Argo CD syncs it (sync waves, and the health checks of `docs/argocd.md`, run with
//! Lua 5.1 as Argo CD's gopher-lua). Needs `lua5.1` for the health checks; a missing tool fails
//! the test with that message, it never skips it. Helpers: [`booking_tests::packaging`].

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use booking_tests::packaging::*;
use booking_tests::{read_yaml_documents, repo_root};
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::PolicyRule;
use serde_json::Value;

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
    assert_eq!(
        kinds.get("CustomResourceDefinition"),
        Some(&CRD_KINDS.len()),
        "{kinds:?}"
    );
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
    assert_eq!(kinds.get("Certificate"), Some(&2), "{kinds:?}");
    assert_eq!(kinds.get("Issuer"), Some(&2), "{kinds:?}");
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
    assert_eq!(committed.len(), CRD_KINDS.len());
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
    // A CA chain of the install's own; the caBundle comes from the CA.
    let ca = assert_cert_manager_ca_chain(&objects, "booking-webhook");
    assert_eq!(name_of(ca), "booking-webhook-ca");
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
    let expected: BTreeSet<String> = STATUS_KINDS
        .iter()
        .map(|k| format!("{}s", k.to_lowercase()))
        .collect();
    assert_eq!(
        status_writes, expected,
        "the controller writes the status of the four kinds"
    );
}

// === Argo CD ===

/// An object's Argo CD sync wave.
fn sync_wave(o: &Value) -> i64 {
    o["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"]
        .as_str()
        .unwrap_or_else(|| panic!("{} {} has no Argo CD sync wave", kind_of(o), name_of(o)))
        .parse()
        .expect("a sync wave is an integer")
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
    for kind in STATUS_KINDS {
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
