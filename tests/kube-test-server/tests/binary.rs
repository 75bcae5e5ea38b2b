//! The `kube-test-server` binary: flags, readiness line, kubeconfig with one context per token,
//! the admin API under `/_testserver/`, and a clean exit on SIGTERM.

mod common;

use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use tokio::io::AsyncBufReadExt;

#[tokio::test]
async fn binary_serves_until_sigterm_and_exposes_the_admin_api() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let dir = std::env::temp_dir().join(format!("kts-binary-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kube-test-server"))
        .args([
            "--port",
            "0",
            "--https",
            "--token",
            "t1=admin:system:masters",
            "--token",
            "t2=bob:dev",
        ])
        .arg("--kubeconfig-out")
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("readiness line within 20 s")
        .unwrap()
        .unwrap();
    assert!(
        ready.starts_with("kube-test-server ready at https://127.0.0.1:"),
        "{ready}"
    );
    assert!(ready.contains(kubeconfig.to_str().unwrap()), "{ready}");

    // One context per token; kubectl and kube-rs both use the kubeconfig.
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
    assert_eq!(kc.current_context.as_deref(), Some("admin"));
    assert!(kc.contexts.iter().any(|c| c.name == "bob"));
    let out = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--context", "bob", "get", "namespaces", "-o", "name"])
        .output()
        .await
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("namespace/default"),
        "{out:?}"
    );

    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let rule = r#"{"pathContains": "/configmaps", "method": "GET", "count": 1, "code": 500, "message": "injected"}"#;
    client
        .request_text(
            http::Request::post("/_testserver/faults")
                .body(rule.as_bytes().to_vec())
                .unwrap(),
        )
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let err = cms.list(&ListParams::default()).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 500 && s.message == "injected"),
        "{err:?}"
    );
    cms.list(&ListParams::default()).await.unwrap();
    let expire = client
        .request_text(
            http::Request::post("/_testserver/watch/expire")
                .body(br#"{"count": 2}"#.to_vec())
                .unwrap(),
        )
        .await
        .unwrap();
    assert!(expire.contains("true"));
    let state = client
        .request_text(
            http::Request::get("/_testserver/faults")
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert!(state.contains("\"expireWatches\":2"), "{state}");

    // SIGTERM ends it cleanly.
    let pid = child.id().expect("running").to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("exits within 10 s")
        .unwrap();
    assert!(exit.success(), "{exit:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
