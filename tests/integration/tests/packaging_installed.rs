//! The install applied to a real API server: the kustomize base (`kubectl apply --server-side -k`,
//! as Argo CD syncs it) and the Helm chart (`helm install`, `helm upgrade`), each into a control
//! plane of the test's own ([`Plane`]: etcd, kube-apiserver with RBAC and PodSecurity admission,
//! kube-controller-manager), since an install registers cluster-wide CRDs, ClusterRoles and
//! webhook configurations. Accepted, admitted under the restricted Pod Security Standard,
//! least-privileged as the API server's authorizer decides, and drift-free.

use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine as _;
use booking_harness::control_plane;
use booking_shared::api::Booking;
use booking_tests::packaging::*;
use booking_tests::{read_yaml_documents, repo_root};
use serde_json::{Value, json};

// === what the install tests share ===

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
        // A BookingCalendar has no status: the controller only reads it.
        if k.starts_with("bookingcalendars") {
            continue;
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
    for k in ["bookingschedulers", "resourcemonitors", "bookingcalendars"] {
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
    p.register_cert_manager_kinds();
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
    let out = p.diff(&["-n", "team-a", "-f", booking_arg]);
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
