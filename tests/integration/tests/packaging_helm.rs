//! The Helm chart (`manifests/helm`, Helm v3), rendered with the release's `helm lint` and `helm
//! template`: defaults, values, the certificate modes, refused values, and the same webhooks as
//! the kustomize base. Needs `openssl`; a missing tool fails the test with that message, it never
//! skips it. Helpers: [`booking_tests::packaging`].

use std::collections::BTreeMap;

use base64::Engine as _;
use booking_tests::packaging::*;
use booking_tests::repo_root;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use serde_json::Value;

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
    assert_eq!(
        all_of(&objects, "CustomResourceDefinition").len(),
        CRD_KINDS.len()
    );

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
    let r = env["SMTP_USERNAME"]
        .value_from
        .clone()
        .and_then(|v| v.secret_key_ref)
        .expect("SMTP_USERNAME from a Secret");
    assert_eq!(
        (r.name.as_str(), r.key.as_str()),
        ("smtp-credentials", "username")
    );
    // The password never sits in the environment: a file of the Secret, mounted read-only.
    assert!(!env.contains_key("SMTP_PASSWORD"));
    let pod = pod_spec(&controller);
    let file = env["SMTP_PASSWORD_FILE"]
        .value
        .clone()
        .expect("a password file");
    let mount = pod.containers[0]
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| file.starts_with(&format!("{}/", m.mount_path)))
        .expect("the password file is mounted");
    assert_eq!(mount.read_only, Some(true));
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)
        .and_then(|v| v.secret.clone())
        .expect("a Secret volume");
    assert_eq!(volume.secret_name.as_deref(), Some("smtp-credentials"));
    let item = &volume.items.as_ref().expect("one key")[0];
    assert_eq!(item.key, "password");
    assert!(file.ends_with(&format!("/{}", item.path)));
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
    // A CA chain of the chart's own; the caBundle comes from the CA, not the serving certificate.
    let ca = assert_cert_manager_ca_chain(&objects, "rbo-resource-booking-operator-webhook");
    assert_eq!(name_of(ca), "rbo-resource-booking-operator-webhook-ca");
    let cert = find(
        &objects,
        "Certificate",
        "rbo-resource-booking-operator-webhook",
    );
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
    for (what, cc) in webhook_client_configs(&objects) {
        assert!(
            cc["caBundle"].is_null(),
            "{what}: cert-manager injects the caBundle"
        );
    }
    // A cluster issuer of your own: no chain from the chart; the serving certificate's ca.crt
    // (that issuer's CA) is injected.
    let objects = helm_ok(&[
        "--set",
        "webhook.certificate.mode=cert-manager,webhook.certificate.certManager.issuerRef.name=corp-ca,webhook.certificate.certManager.issuerRef.kind=ClusterIssuer",
    ]);
    assert!(all_of(&objects, "Issuer").is_empty());
    let cert = only(&objects, "Certificate");
    assert_eq!(cert["spec"]["issuerRef"]["kind"], "ClusterIssuer");
    for o in objects
        .iter()
        .filter(|o| kind_of(o).ends_with("WebhookConfiguration"))
    {
        assert_eq!(
            o["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            format!("{NAMESPACE}/{}", name_of(cert))
        );
    }

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

/// Webhook URLs kept in Secrets: by default the controller reads no Secret; each entry of
/// `notificationSecrets` lets it get exactly the named Secrets of one namespace, nothing more.
#[test]
fn helm_notification_secrets_grant_get_of_named_secrets_only() {
    let none = helm_ok(&[]);
    for o in &none {
        let rules = o["rules"].as_array().cloned().unwrap_or_default();
        assert!(
            !rules
                .iter()
                .any(|r| r["resources"].to_string().contains("secrets")),
            "no Secret access by default: {o}"
        );
    }
    let objects = helm_ok(&[
        "--set",
        "notificationSecrets[0].namespace=team-a",
        "--set",
        "notificationSecrets[0].names={chat-hooks}",
    ]);
    let name = "rbo-resource-booking-operator-controller-notification-secrets";
    let role = all_of(&objects, "Role")
        .into_iter()
        .find(|r| r["metadata"]["name"] == name)
        .expect("the Role");
    assert_eq!(role["metadata"]["namespace"], "team-a");
    assert_eq!(
        role["rules"],
        serde_json::json!([{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["chat-hooks"], "verbs": ["get"]}])
    );
    let binding = all_of(&objects, "RoleBinding")
        .into_iter()
        .find(|r| r["metadata"]["name"] == name)
        .expect("the RoleBinding");
    assert_eq!(binding["metadata"]["namespace"], "team-a");
    assert_eq!(binding["roleRef"]["name"], name);
    assert_eq!(binding["subjects"][0]["name"], CONTROLLER_SA);
    assert_eq!(binding["subjects"][0]["namespace"], NAMESPACE);
    let e = helm(&["--set", "notificationSecrets[0].namespace=team-a"]).unwrap_err();
    assert!(e.contains("notificationSecrets[0].names"), "{e}");
}

/// `controller.dryRun` sets the controller's `DRY_RUN`; off (absent) by default.
#[test]
fn helm_controller_dry_run_value_sets_dry_run() {
    let controller = |args: &[&str]| {
        let objects = helm_ok(args);
        env_of(&deployment(
            &objects,
            "rbo-resource-booking-operator-controller",
        ))
    };
    assert!(!controller(&[]).contains_key("DRY_RUN"));
    let env = controller(&["--set", "controller.dryRun=true"]);
    assert_eq!(env["DRY_RUN"].value.as_deref(), Some("true"));
}
