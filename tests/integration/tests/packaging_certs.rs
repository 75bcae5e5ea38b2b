//! The development certificates of `certs/`: the script's CA, serving certificate and kustomize
//! overlay (checked with `openssl` and the release's `kubectl kustomize`), and no private key
//! ever committed (`git check-ignore`). Needs `openssl` and `git`; a missing tool fails the test
//! with that message, it never skips it. Helpers: [`booking_tests::packaging`].

use std::process::Command;

use base64::Engine as _;
use booking_tests::packaging::*;
use booking_tests::repo_root;
use k8s_openapi::api::core::v1::Secret;

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
