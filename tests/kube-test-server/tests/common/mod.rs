//! Helpers shared by the integration tests: a server per test, a small test CRD and a kubectl
//! runner (the default `kubectl` or a versioned one beside it).

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use kube::api::{Api, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube_test_server::{Options, TestServer, TokenUser};
use serde_json::{Value, json};

/// Start an HTTPS server (kubectl sends bearer tokens over TLS only) with an admin and an
/// `alice` user and one-second bookmarks.
pub async fn start() -> TestServer {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    TestServer::start(Options {
        users: vec![
            TokenUser::new("admin", &["system:masters"]),
            TokenUser::new("alice", &["dev"]),
        ],
        bookmark_interval: Duration::from_secs(1),
        https: true,
        ..Options::default()
    })
    .await
    .expect("server starts")
}

/// A namespaced test CRD `widgets.example.com` with schema rules, a default, a CEL rule, a
/// status subresource and printer columns.
pub fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "A widget of the test server's tests.",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "description": "What the widget should be.",
                            "required": ["color"],
                            "properties": {
                                "color": {"type": "string", "enum": ["red", "blue"], "description": "Its color."},
                                "size": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
                                "label": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 8},
                                "start_at": {"type": "string", "format": "date-time"},
                                "end_at": {"type": "string", "format": "date-time"}
                            },
                            "x-kubernetes-validations": [{
                                "rule": "!has(self.end_at) || !has(self.start_at) || self.end_at > self.start_at",
                                "message": "end_at must be after start_at", "fieldPath": ".end_at", "reason": "FieldValueInvalid"
                            }]
                        },
                        "status": {"type": "object", "properties": {"phase": {"type": "string"}}}
                    }
                }}
            }]
        }
    })
}

/// The ApiResource of `Widget`.
pub fn widget_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    )
}

/// Create the Widget CRD through kube-rs.
pub async fn install_widget_crd(client: &kube::Client) {
    let crd_api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let crd: DynamicObject = serde_json::from_value(widget_crd()).expect("crd parses");
    crd_api
        .create(&PostParams::default(), &crd)
        .await
        .expect("crd created");
}

/// A Widget object.
pub fn widget(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": name}, "spec": spec}))
    .expect("widget parses")
}

/// The directory of the versioned kubectl binaries (`kubectl.1.27` ...).
pub fn kubectl_dir() -> PathBuf {
    let which = std::process::Command::new("sh")
        .args(["-c", "readlink -f \"$(command -v kubectl)\""])
        .output()
        .expect("sh runs");
    let path = PathBuf::from(String::from_utf8_lossy(&which.stdout).trim());
    path.parent()
        .expect("kubectl has a directory")
        .to_path_buf()
}

/// A kubectl invocation against a server.
pub struct Kubectl {
    /// The binary.
    pub binary: PathBuf,
    /// Kubeconfig path.
    pub kubeconfig: PathBuf,
    /// Discovery cache directory (fresh per runner).
    pub cache: PathBuf,
}

impl Kubectl {
    /// The default `kubectl` on the PATH.
    pub fn default_for(server: &TestServer) -> Self {
        Self::with_binary(server, PathBuf::from("kubectl"))
    }

    /// A versioned kubectl (`1.27` → `kubectl.1.27` beside the default one). Panics when it is
    /// missing: the machines of this project have them, so a missing one is a defect.
    pub fn versioned(server: &TestServer, version: &str) -> Self {
        let binary = kubectl_dir().join(format!("kubectl.{version}"));
        assert!(binary.exists(), "{} is not installed", binary.display());
        Self::with_binary(server, binary)
    }

    fn with_binary(server: &TestServer, binary: PathBuf) -> Self {
        let cache = std::env::temp_dir().join(format!("kts-kubectl-cache-{}", uuid_like()));
        Kubectl {
            binary,
            kubeconfig: server.kubeconfig_path().to_path_buf(),
            cache,
        }
    }

    /// Run with arguments and optional stdin.
    pub async fn run(&self, args: &[&str], stdin: Option<&str>) -> Output {
        use tokio::io::AsyncWriteExt;
        let mut cmd = tokio::process::Command::new(&self.binary);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("kubectl starts");
        if let Some(mut sin) = child.stdin.take() {
            if let Some(input) = stdin {
                sin.write_all(input.as_bytes())
                    .await
                    .expect("stdin written");
            }
            drop(sin);
        }
        tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .expect("kubectl finishes within 60 s")
            .expect("kubectl output")
    }

    /// Run and require success; returns stdout.
    pub async fn ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.run(args, stdin).await;
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Run and require failure; returns stderr.
    pub async fn fails(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.run(args, stdin).await;
        assert!(
            !out.status.success(),
            "kubectl {args:?} unexpectedly succeeded: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}

impl Drop for Kubectl {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.cache);
    }
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Poll `f` until it returns `Some`, for at most `secs` seconds.
pub async fn eventually<T, F, Fut>(secs: u64, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not met within {secs} s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
