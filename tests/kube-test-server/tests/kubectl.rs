//! The real kubectl against the test server: the project's CRDs and the original's samples
//! through apply (client- and server-side), create, get (table, `-o yaml`, `-w`), describe,
//! patch, delete and explain — with the default kubectl and the oldest and newest versioned ones.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::Kubectl;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube_test_server::TestServer;
use serde_json::json;
use tokio::io::AsyncBufReadExt;

fn samples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference/samples")
}

fn crds_yaml() -> String {
    booking_shared::crd::all()
        .iter()
        .map(|c| booking_shared::crd::to_yaml(c).expect("crd renders"))
        .collect::<Vec<_>>()
        .join("---\n")
}

const BAD_RESOURCE: &str = "apiVersion: manager.kotaico.de/v1
kind: Resource
metadata:
  name: bad
spec:
  type: gce
  tag: analytics
";

const UNKNOWN_FIELD: &str = "apiVersion: manager.kotaico.de/v1
kind: Resource
metadata:
  name: typo
spec:
  type: ec2
  tag: analytics
  colour: red
";

/// The flow every kubectl version must handle.
async fn basic_flow(server: &TestServer, k: &Kubectl) {
    let out = k.ok(&["apply", "-f", "-"], Some(&crds_yaml())).await;
    assert!(
        out.contains(
            "customresourcedefinition.apiextensions.k8s.io/bookings.manager.kotaico.de created"
        ),
        "{out}"
    );
    let samples = samples_dir();
    assert!(
        samples.is_dir(),
        "samples expected at {}",
        samples.display()
    );
    let out = k
        .ok(&["apply", "-f", samples.to_str().unwrap()], None)
        .await;
    assert!(
        out.contains("booking.manager.kotaico.de/backup-jan10 created"),
        "{out}"
    );
    assert!(
        out.contains("resource.manager.kotaico.de/ec2.analytics created"),
        "{out}"
    );

    // Re-applying unchanged manifests changes nothing.
    let out = k
        .ok(&["apply", "-f", samples.to_str().unwrap()], None)
        .await;
    assert!(
        out.contains("booking.manager.kotaico.de/backup-jan10 unchanged"),
        "{out}"
    );

    // Tables use the CRD's printer columns.
    let out = k.ok(&["get", "bookings"], None).await;
    let header = out.lines().next().unwrap_or_default();
    for col in ["NAME", "RESOURCE", "START", "END", "STATUS", "AGE"] {
        assert!(header.contains(col), "{out}");
    }
    assert!(
        out.contains("backup-jan10")
            && out.contains("ec2.analytics")
            && out.contains("2023-01-10T22:35:00Z"),
        "{out}"
    );
    let wide = k.ok(&["get", "resources", "-o", "wide"], None).await;
    assert!(
        wide.lines().next().unwrap_or_default().contains("TAG"),
        "{wide}"
    );

    let yaml = k
        .ok(&["get", "booking", "backup-jan10", "-o", "yaml"], None)
        .await;
    assert!(
        yaml.contains("resource_name: ec2.analytics") && yaml.contains("uid:"),
        "{yaml}"
    );

    // Schema errors come back as the real server words them.
    let err = k.fails(&["apply", "-f", "-"], Some(BAD_RESOURCE)).await;
    assert!(
        err.contains("The Resource \"bad\" is invalid: spec.type: Unsupported value: \"gce\": supported values: \"ec2\", \"rds\""),
        "{err}"
    );
    // kubectl validates strictly on the server (no --validate=false needed, unknown fields named).
    let err = k.fails(&["apply", "-f", "-"], Some(UNKNOWN_FIELD)).await;
    assert!(err.contains("unknown field \"spec.colour\""), "{err}");

    // Server-side apply and patch.
    let out = k
        .ok(
            &[
                "apply",
                "--server-side",
                "-f",
                samples
                    .join("manager_v1_resourcemonitor.yaml")
                    .to_str()
                    .unwrap(),
            ],
            None,
        )
        .await;
    assert!(out.contains("serverside-applied"), "{out}");
    let out = k
        .ok(
            &[
                "patch",
                "booking",
                "backup-jan10",
                "--type",
                "merge",
                "-p",
                r#"{"spec":{"user_id":"someone"}}"#,
            ],
            None,
        )
        .await;
    assert!(
        out.contains("booking.manager.kotaico.de/backup-jan10 patched"),
        "{out}"
    );
    let out = k
        .ok(
            &[
                "get",
                "booking",
                "backup-jan10",
                "-o",
                "jsonpath={.spec.user_id} {.metadata.generation}",
            ],
            None,
        )
        .await;
    assert_eq!(out, "someone 2");

    let out = k.ok(&["explain", "booking.spec.resource_name"], None).await;
    assert!(
        out.contains("resource_name") && out.contains("<string>"),
        "{out}"
    );

    let out = k.ok(&["delete", "booking", "backup-jan10"], None).await;
    assert!(
        out.contains("booking.manager.kotaico.de \"backup-jan10\" deleted"),
        "{out}"
    );
    let err = k.fails(&["get", "booking", "backup-jan10"], None).await;
    assert!(
        err.contains(
            "Error from server (NotFound): bookings.manager.kotaico.de \"backup-jan10\" not found"
        ),
        "{err}"
    );
    let _ = server;
}

#[tokio::test]
async fn default_kubectl_works() {
    let server = common::start().await;
    let k = Kubectl::default_for(&server);
    basic_flow(&server, &k).await;

    // Typed generators send protobuf for built-ins.
    let out = k
        .ok(
            &["create", "configmap", "settings", "--from-literal=a=b"],
            None,
        )
        .await;
    assert!(out.contains("configmap/settings created"), "{out}");
    let out = k
        .ok(
            &[
                "create",
                "secret",
                "generic",
                "smtp",
                "--from-literal=password=p",
            ],
            None,
        )
        .await;
    assert!(out.contains("secret/smtp created"), "{out}");
    let out = k.ok(&["create", "namespace", "team-a"], None).await;
    assert!(out.contains("namespace/team-a created"), "{out}");
    let out = k
        .ok(
            &[
                "get",
                "secret",
                "smtp",
                "-o",
                "jsonpath={.type} {.data.password}",
            ],
            None,
        )
        .await;
    assert_eq!(out, "Opaque cA==");
    let out = k
        .ok(
            &["create", "-f", "-"],
            Some("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-file\ndata:\n  x: y\n"),
        )
        .await;
    assert!(out.contains("configmap/from-file created"), "{out}");
    server.shutdown().await;
}

#[tokio::test]
async fn describe_shows_events_and_get_watch_streams_changes() {
    let server = common::start().await;
    let k = Kubectl::default_for(&server);
    k.ok(&["apply", "-f", "-"], Some(&crds_yaml())).await;
    k.ok(
        &[
            "apply",
            "-f",
            samples_dir()
                .join("manager_v1_resource.yaml")
                .to_str()
                .unwrap(),
        ],
        None,
    )
    .await;

    // An event published the way the controller does (events.k8s.io/v1 through kube-rs).
    let client = server.client().await.unwrap();
    let resources: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("manager.kotaico.de", "v1", "Resource"),
            "resources",
        ),
    );
    let res = resources.get("ec2.analytics").await.unwrap();
    let reference = ObjectReference {
        api_version: Some("manager.kotaico.de/v1".into()),
        kind: Some("Resource".into()),
        name: res.metadata.name.clone(),
        namespace: res.metadata.namespace.clone(),
        uid: res.metadata.uid.clone(),
        resource_version: res.metadata.resource_version.clone(),
        field_path: None,
    };
    let recorder =
        kube::runtime::events::Recorder::new(client.clone(), "booking-controller".into());
    recorder
        .publish(
            &kube::runtime::events::Event {
                type_: kube::runtime::events::EventType::Normal,
                reason: "Started".into(),
                note: Some("started 2 instances".into()),
                action: "Start".into(),
                secondary: None,
            },
            &reference,
        )
        .await
        .unwrap();
    let out = k.ok(&["describe", "resource", "ec2.analytics"], None).await;
    assert!(out.contains("Events:"), "{out}");
    assert!(
        out.contains("Started")
            && out.contains("started 2 instances")
            && out.contains("booking-controller"),
        "{out}"
    );

    // kubectl get -w prints the new row when a booking appears.
    let mut child = tokio::process::Command::new(&k.binary)
        .arg("--kubeconfig")
        .arg(&k.kubeconfig)
        .arg("--cache-dir")
        .arg(&k.cache)
        .args(["get", "bookings", "-w"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let bookings: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("manager.kotaico.de", "v1", "Booking"),
            "bookings",
        ),
    );
    let creator = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let b: DynamicObject = serde_json::from_value(json!({"apiVersion": "manager.kotaico.de/v1", "kind": "Booking",
            "metadata": {"name": "watched"},
            "spec": {"resource_name": "ec2.analytics", "start_at": "2031-01-10T22:35:00Z", "end_at": "2031-01-10T23:35:00Z"}}))
        .unwrap();
        bookings.create(&PostParams::default(), &b).await.unwrap();
    });
    let seen = tokio::time::timeout(Duration::from_secs(20), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.starts_with("watched") {
                return line;
            }
        }
        String::new()
    })
    .await
    .expect("kubectl get -w prints the new booking");
    assert!(
        seen.contains("ec2.analytics") && seen.contains("2031-01-10T22:35:00Z"),
        "{seen}"
    );
    creator.await.unwrap();
    child.kill().await.unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn oldest_kubectl_works() {
    let server = common::start().await;
    let k = Kubectl::versioned(&server, "1.27");
    basic_flow(&server, &k).await;
    server.shutdown().await;
}

#[tokio::test]
async fn newest_kubectl_works() {
    let server = common::start().await;
    let k = Kubectl::versioned(&server, "1.33");
    basic_flow(&server, &k).await;
    server.shutdown().await;
}
