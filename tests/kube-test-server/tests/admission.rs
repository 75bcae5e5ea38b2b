//! Admission webhooks end to end: a tiny HTTPS webhook in the test (certificate from a CA made
//! at test time), registered through kubectl, and kubectl printing denials and warnings exactly as
//! a real cluster would; plus mutation, userInfo, selectors, failure policies and dry run.

mod common;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use base64::Engine;
use bytes::Bytes;
use common::Kubectl;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use kube_test_server::tls::CertificateAuthority;
use serde_json::{Value, json};

/// What the webhook saw: (path, operation, username, object name).
type Seen = Arc<Mutex<Vec<(String, String, String, String)>>>;

fn decide(path: &str, review: &Value) -> Value {
    let req = &review["request"];
    let uid = req["uid"].clone();
    let labels = &req["object"]["metadata"]["labels"];
    let response = match path {
        "/mutate" => {
            let patch = if labels.is_object() {
                json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "true"}])
            } else {
                json!([{"op": "add", "path": "/metadata/labels", "value": {"mutated": "true"}}])
            };
            json!({"uid": uid, "allowed": true, "patchType": "JSONPatch",
                "patch": base64::engine::general_purpose::STANDARD.encode(patch.to_string())})
        }
        "/validate" if labels["deny"] == "yes" => json!({"uid": uid, "allowed": false,
            "status": {"code": 403, "reason": "Forbidden", "message": "configmaps labelled deny=yes are refused"}}),
        // The shape kube-rs' `AdmissionResponse::deny` produces: a message, no code, no reason.
        "/validate" if labels["deny"] == "plain" => json!({"uid": uid, "allowed": false,
            "status": {"message": "plain denial"}}),
        "/validate" if labels.get("owner").is_none() && req["operation"] != "DELETE" => {
            json!({"uid": uid, "allowed": true,
            "warnings": ["configmap has no owner label", "see \"docs\""]})
        }
        _ => json!({"uid": uid, "allowed": true}),
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// Start the webhook on 127.0.0.1 with a certificate for that address; returns its port.
async fn start_webhook(ca: &CertificateAuthority, seen: Seen) -> u16 {
    start_webhook_for(ca, seen, &["127.0.0.1", "localhost"]).await
}

/// Start the webhook on 127.0.0.1 with a certificate for `names`; returns its port.
async fn start_webhook_for(ca: &CertificateAuthority, seen: Seen, names: &[&str]) -> u16 {
    let cert = ca.issue(names).unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(cert.server_config(&[b"http/1.1"]).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let path = req.uri().path().to_string();
                        if path == "/slow" {
                            tokio::time::sleep(std::time::Duration::from_secs(3)).await;
                        }
                        let body = req
                            .into_body()
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        let r = &review["request"];
                        seen.lock().unwrap().push((
                            path.clone(),
                            r["operation"].as_str().unwrap_or_default().to_string(),
                            r["userInfo"]["username"]
                                .as_str()
                                .unwrap_or_default()
                                .to_string(),
                            r["name"].as_str().unwrap_or_default().to_string(),
                        ));
                        let out = decide(&path, &review);
                        Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(
                            out.to_string(),
                        ))))
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    port
}

fn configurations(port: u16, ca_bundle: &str) -> String {
    format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: labels.example.com
webhooks:
- name: observe.example.com
  admissionReviewVersions: ["v1"]
  sideEffects: None
  reinvocationPolicy: IfNeeded
  clientConfig:
    url: https://127.0.0.1:{port}/observe
    caBundle: {ca_bundle}
  rules:
  - operations: ["CREATE"]
    apiGroups: [""]
    apiVersions: ["v1"]
    resources: ["configmaps"]
- name: labels.example.com
  admissionReviewVersions: ["v1"]
  sideEffects: None
  clientConfig:
    url: https://127.0.0.1:{port}/mutate
    caBundle: {ca_bundle}
  rules:
  - operations: ["CREATE", "UPDATE"]
    apiGroups: [""]
    apiVersions: ["v1"]
    resources: ["configmaps"]
  namespaceSelector:
    matchExpressions:
    - key: admission
      operator: NotIn
      values: ["off"]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: deny.example.com
webhooks:
- name: deny.example.com
  admissionReviewVersions: ["v1"]
  sideEffects: None
  timeoutSeconds: 5
  failurePolicy: Fail
  clientConfig:
    url: https://127.0.0.1:{port}/validate
    caBundle: {ca_bundle}
  rules:
  - operations: ["CREATE", "UPDATE", "DELETE"]
    apiGroups: [""]
    apiVersions: ["v1"]
    resources: ["configmaps"]
    scope: Namespaced
  objectSelector:
    matchExpressions:
    - key: skip
      operator: DoesNotExist
"#
    )
}

fn configmap(name: &str, labels: &[(&str, &str)]) -> String {
    let mut s = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n");
    if !labels.is_empty() {
        s.push_str("  labels:\n");
        for (k, v) in labels {
            s.push_str(&format!("    {k}: \"{v}\"\n"));
        }
    }
    s.push_str("data:\n  a: b\n");
    s
}

#[tokio::test]
async fn kubectl_prints_webhook_denials_and_warnings_as_a_real_cluster() {
    let server = common::start().await;
    let ca = CertificateAuthority::new("webhook test CA").unwrap();
    let seen: Seen = Arc::default();
    let port = start_webhook(&ca, seen.clone()).await;
    let k = Kubectl::default_for(&server);
    k.ok(
        &["apply", "-f", "-"],
        Some(&configurations(port, &ca.ca_bundle())),
    )
    .await;

    // A denial with the webhook's code and reason.
    let err = k
        .fails(
            &["apply", "-f", "-"],
            Some(&configmap("refused", &[("deny", "yes"), ("owner", "me")])),
        )
        .await;
    assert_eq!(
        err.trim(),
        "Error from server (Forbidden): error when creating \"STDIN\": admission webhook \"deny.example.com\" denied the request: configmaps labelled deny=yes are refused"
    );
    // A denial without code or reason (kube-rs' deny): the real server answers 400 without a reason.
    let err = k
        .fails(
            &["create", "-f", "-"],
            Some(&configmap("plain", &[("deny", "plain"), ("owner", "me")])),
        )
        .await;
    assert_eq!(
        err.trim(),
        "Error from server: error when creating \"STDIN\": admission webhook \"deny.example.com\" denied the request: plain denial"
    );

    // Admitted with warnings, mutated by the mutating webhook, seen as the kubeconfig's user.
    let out = k
        .run(&["apply", "-f", "-"], Some(&configmap("warned", &[])))
        .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("Warning: configmap has no owner label"),
        "{stderr}"
    );
    assert!(stderr.contains("Warning: see \"docs\""), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("configmap/warned created"));
    let labels = k
        .ok(
            &[
                "get",
                "configmap",
                "warned",
                "-o",
                "jsonpath={.metadata.labels.mutated}",
            ],
            None,
        )
        .await;
    assert_eq!(labels, "true");
    {
        let seen = seen.lock().unwrap();
        assert!(
            seen.iter().any(|(p, op, user, name)| p == "/mutate"
                && op == "CREATE"
                && user == "admin"
                && name == "warned"),
            "{seen:?}"
        );
        assert!(
            seen.iter()
                .any(|(p, _, _, name)| p == "/validate" && name == "warned")
        );
        // Re-invoked once because a later webhook changed the object.
        let observed = seen
            .iter()
            .filter(|(p, _, _, name)| p == "/observe" && name == "warned")
            .count();
        assert_eq!(observed, 2, "{seen:?}");
    }

    // objectSelector: objects labelled skip bypass the validating webhook.
    k.ok(
        &["apply", "-f", "-"],
        Some(&configmap("skipped", &[("deny", "yes"), ("skip", "1")])),
    )
    .await;
    // namespaceSelector: no mutation in namespaces labelled admission=off.
    k.ok(&["create", "namespace", "quiet"], None).await;
    k.ok(&["label", "namespace", "quiet", "admission=off"], None)
        .await;
    k.ok(
        &["apply", "-n", "quiet", "-f", "-"],
        Some(&configmap("plain-ns", &[("owner", "me")])),
    )
    .await;
    let labels = k
        .ok(
            &[
                "get",
                "-n",
                "quiet",
                "configmap",
                "plain-ns",
                "-o",
                "jsonpath={.metadata.labels}",
            ],
            None,
        )
        .await;
    assert!(!labels.contains("mutated"), "{labels}");

    // DELETE goes through the validating webhook with the old object.
    k.ok(&["delete", "configmap", "warned"], None).await;
    assert!(
        seen.lock()
            .unwrap()
            .iter()
            .any(|(p, op, _, name)| p == "/validate" && op == "DELETE" && name == "warned")
    );
    server.shutdown().await;
}

#[tokio::test]
async fn failure_policies_timeouts_and_dry_run() {
    let server = common::start().await;
    let k = Kubectl::default_for(&server);
    let ca = CertificateAuthority::new("unreachable CA").unwrap();
    // Nothing listens on this port.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let cfg = |name: &str, policy: &str, side_effects: &str| {
        format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: {name}\nwebhooks:\n- name: {name}\n  admissionReviewVersions: [\"v1\"]\n  sideEffects: {side_effects}\n  failurePolicy: {policy}\n  timeoutSeconds: 2\n  clientConfig:\n    url: https://127.0.0.1:{closed}/v\n    caBundle: {}\n  rules:\n  - operations: [\"CREATE\"]\n    apiGroups: [\"\"]\n    apiVersions: [\"v1\"]\n    resources: [\"secrets\"]\n",
            ca.ca_bundle()
        )
    };
    k.ok(
        &["apply", "-f", "-"],
        Some(&cfg("ignore.example.com", "Ignore", "None")),
    )
    .await;
    let out = k
        .ok(
            &["create", "secret", "generic", "s1", "--from-literal=a=b"],
            None,
        )
        .await;
    assert!(out.contains("secret/s1 created"), "{out}");

    k.ok(
        &["apply", "-f", "-"],
        Some(&cfg("fail.example.com", "Fail", "Unknown")),
    )
    .await;
    let err = k
        .fails(
            &["create", "-f", "-"],
            Some("apiVersion: v1\nkind: Secret\nmetadata:\n  name: s2\n"),
        )
        .await;
    assert!(
        err.contains(&format!(
            "Error from server (InternalError): error when creating \"STDIN\": Internal error occurred: failed calling webhook \"fail.example.com\": failed to call webhook: Post \"https://127.0.0.1:{closed}/v?timeout=2s\": dial tcp 127.0.0.1:{closed}: connect: connection refused"
        )),
        "{err}"
    );
    // A webhook slower than its timeoutSeconds fails the request (failurePolicy Fail).
    let seen: Seen = Arc::default();
    let port = start_webhook(&ca, seen).await;
    let slow = format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: slow.example.com\nwebhooks:\n- name: slow.example.com\n  admissionReviewVersions: [\"v1\"]\n  sideEffects: None\n  timeoutSeconds: 1\n  clientConfig:\n    url: https://127.0.0.1:{port}/slow\n    caBundle: {}\n  rules:\n  - operations: [\"CREATE\"]\n    apiGroups: [\"\"]\n    apiVersions: [\"v1\"]\n    resources: [\"configmaps\"]\n",
        ca.ca_bundle()
    );
    k.ok(&["apply", "-f", "-"], Some(&slow)).await;
    let err = k
        .fails(
            &["create", "-f", "-"],
            Some("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: late\n"),
        )
        .await;
    assert!(
        err.contains(&format!(
            "failed calling webhook \"slow.example.com\": failed to call webhook: Post \"https://127.0.0.1:{port}/slow?timeout=1s\": context deadline exceeded"
        )),
        "{err}"
    );

    // A webhook with unknown side effects refuses dry runs.
    let err = k
        .fails(
            &[
                "create",
                "secret",
                "generic",
                "s3",
                "--from-literal=a=b",
                "--dry-run=server",
            ],
            None,
        )
        .await;
    assert!(
        err.contains("admission webhook \"fail.example.com\" does not support dry run"),
        "{err}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn service_references_verify_the_service_dns_name() {
    let ca = CertificateAuthority::new("service CA").unwrap();
    let seen: Seen = Arc::default();
    // Like certs/make-dev-certs.sh: DNS names of the service only, no IP address.
    let port = start_webhook_for(&ca, seen.clone(), &["hook", "hook.ops", "hook.ops.svc"]).await;
    let server = kube_test_server::TestServer::start(kube_test_server::Options {
        https: true,
        service_endpoints: [("ops/hook".to_string(), format!("https://127.0.0.1:{port}"))].into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let k = Kubectl::default_for(&server);
    let config = format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: svc.example.com\nwebhooks:\n- name: svc.example.com\n  admissionReviewVersions: [\"v1\"]\n  sideEffects: None\n  clientConfig:\n    service: {{namespace: ops, name: hook, path: /validate, port: 443}}\n    caBundle: {}\n  rules:\n  - operations: [\"CREATE\"]\n    apiGroups: [\"\"]\n    apiVersions: [\"v1\"]\n    resources: [\"configmaps\"]\n",
        ca.ca_bundle()
    );
    k.ok(&["apply", "-f", "-"], Some(&config)).await;
    let err = k
        .fails(
            &["apply", "-f", "-"],
            Some(&configmap("refused", &[("deny", "yes")])),
        )
        .await;
    assert!(err.contains("admission webhook \"svc.example.com\" denied the request: configmaps labelled deny=yes are refused"), "{err}");
    assert!(
        seen.lock()
            .unwrap()
            .iter()
            .any(|(p, _, _, name)| p == "/validate" && name == "refused")
    );
    server.shutdown().await;
}
