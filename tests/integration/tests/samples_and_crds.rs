//! Wire compatibility with the original operator and honesty of the committed CRDs.
//!
//! - Every manifest in `../shared/reference/samples/` deserialises into the Rust types, and it
//!   and every sample of `manifests/samples/` is accepted unchanged by a real kube-apiserver
//!   serving the committed CRDs (its structural-schema and CEL checks; server-side dry run).
//! - `manifests/crds/` holds exactly what `crdgen` generates from the types.
//! - The schemas reject the worst input on their own, for clusters without the webhook: proven
//!   on the real API server, with the messages it prints.
//!
//! - Every sample of `manifests/samples/` parses strictly into the API types, and a real API
//!   server that installed the committed CRDs applies it and serves its spec back unpruned.
//!
//! The tests on the API server use the run's shared control plane (`booking-control-plane run
//! -- cargo test ...`), with a namespace of their own labelled to opt out of the product's
//! webhooks, so that only the CRDs judge; but the one that installs the CRDs for real starts a
//! control plane of its own ([`booking_tests::packaging::Plane`]), since CRDs are cluster-wide.

use std::collections::BTreeSet;

use booking_harness::control_plane::TestCluster;
use booking_shared::api::{Booking, BookingCalendar, BookingScheduler, Resource, ResourceMonitor};
use booking_tests::kubectl::kubectl;
use booking_tests::packaging::{CRD_KINDS, Plane, kind_of, name_of};
use booking_tests::{crd_for_kind, output_with_stdin, read_yaml_documents, repo_root, shared_dir};
use serde_json::{Value, json};

/// A namespace of the shared control plane with the committed CRDs installed (server-side
/// apply, established) and the product's webhooks opted out
/// (`manager.kotaico.de/admission=disabled`, the shipped configurations' namespaceSelector).
async fn crds_only(label: &str) -> TestCluster {
    let cluster = TestCluster::shared(label)
        .await
        .expect("the run's shared control plane: run the tests through `booking-control-plane run -- cargo test ...`");
    cluster.apply_shipped_crds().expect("the CRDs install");
    let out = cluster
        .kubectl()
        .unwrap()
        .args(["label", "namespace", cluster.namespace()])
        .arg("manager.kotaico.de/admission=disabled")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    cluster
}

/// `kubectl create --dry-run=server` of `object` in the cluster's namespace: `Ok(stdout)` when
/// the API server admits it, `Err(stderr)` with what it printed otherwise.
fn dry_run_create(cluster: &TestCluster, object: &Value) -> Result<String, String> {
    let out = output_with_stdin(
        cluster.kubectl().unwrap().args([
            "create",
            "--dry-run=server",
            "-n",
            cluster.namespace(),
            "-f",
            "-",
        ]),
        &object.to_string(),
    );
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// A manifest of one of the five kinds, parsed strictly into its `booking_shared::api` type.
enum ApiObject {
    Booking(Booking),
    BookingScheduler(BookingScheduler),
    BookingCalendar(BookingCalendar),
    Resource(Resource),
    ResourceMonitor(ResourceMonitor),
}

impl ApiObject {
    /// Parses `doc` by its kind; panics naming `what` (where it comes from) on any other kind.
    fn parse(doc: &Value, what: &str) -> ApiObject {
        match doc["kind"].as_str().unwrap() {
            "Booking" => ApiObject::Booking(serde_json::from_value(doc.clone()).unwrap()),
            "BookingScheduler" => {
                ApiObject::BookingScheduler(serde_json::from_value(doc.clone()).unwrap())
            }
            "BookingCalendar" => {
                ApiObject::BookingCalendar(serde_json::from_value(doc.clone()).unwrap())
            }
            "Resource" => ApiObject::Resource(serde_json::from_value(doc.clone()).unwrap()),
            "ResourceMonitor" => {
                ApiObject::ResourceMonitor(serde_json::from_value(doc.clone()).unwrap())
            }
            other => panic!("{what}: unexpected kind {other}"),
        }
    }

    /// The typed spec written back as JSON: the manifest's spec when no field of it was lost.
    fn spec(&self) -> Value {
        match self {
            ApiObject::Booking(b) => serde_json::to_value(&b.spec),
            ApiObject::BookingScheduler(s) => serde_json::to_value(&s.spec),
            ApiObject::BookingCalendar(c) => serde_json::to_value(&c.spec),
            ApiObject::Resource(r) => serde_json::to_value(&r.spec),
            ApiObject::ResourceMonitor(m) => serde_json::to_value(&m.spec),
        }
        .unwrap()
    }
}

fn samples() -> Vec<(String, Value)> {
    let dir = shared_dir().join("reference/samples");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("samples dir") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            for doc in read_yaml_documents(&path) {
                out.push((path.display().to_string(), doc));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn reference_samples_deserialise_and_round_trip() {
    let samples = samples();
    let kinds: BTreeSet<_> = samples
        .iter()
        .map(|(_, d)| d["kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        kinds,
        ["Booking", "BookingScheduler", "Resource", "ResourceMonitor"]
            .map(String::from)
            .into(),
        "the four sample kinds"
    );
    for (path, doc) in samples {
        // Deserialise strictly into the typed object, then check nothing of the spec was lost.
        let spec_back = ApiObject::parse(&doc, &path).spec();
        assert_eq!(spec_back, doc["spec"], "{path}: spec survives a round trip");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn samples_are_accepted_by_the_api_server_serving_the_committed_crds() {
    let cluster = crds_only("samples").await;
    let dir = repo_root().join("manifests/samples");
    let mut all = samples();
    for entry in std::fs::read_dir(&dir).expect("manifests/samples") {
        let path = entry.unwrap().path();
        for doc in read_yaml_documents(&path) {
            all.push((path.display().to_string(), doc));
        }
    }
    let mut kinds = BTreeSet::new();
    for (path, doc) in &all {
        kinds.insert(doc["kind"].as_str().unwrap_or_default().to_owned());
        match dry_run_create(&cluster, doc) {
            Ok(out) => assert!(out.contains("(server dry run)"), "{path}: {out}"),
            Err(err) => panic!("{path} is refused by the API server:\n{err}"),
        }
    }
    assert_eq!(kinds.len(), 5, "samples of the five kinds: {kinds:?}");
}

#[test]
fn committed_crds_match_the_types() {
    let dir = repo_root().join("manifests/crds");
    let mut expected = BTreeSet::new();
    for crd in booking_shared::crd::all() {
        let name = booking_shared::crd::file_name(&crd);
        let want = booking_shared::crd::to_yaml(&crd).unwrap();
        let path = dir.join(&name);
        let got = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            got == want,
            "{} differs from what the types generate; run `make crds` and commit the result",
            path.display()
        );
        expected.insert(name);
    }
    let present: BTreeSet<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect();
    assert_eq!(
        present, expected,
        "manifests/crds holds exactly the generated CRDs"
    );
}

#[test]
fn crds_have_names_columns_and_descriptions() {
    let booking = crd_for_kind("Booking");
    assert_eq!(booking.spec.group, "manager.kotaico.de");
    assert_eq!(booking.spec.scope, "Namespaced");
    for crd in booking_shared::crd::all() {
        assert_eq!(
            crd.spec.names.categories.as_deref(),
            Some(&["resourcebooking".to_owned()][..])
        );
        assert!(
            crd.spec
                .names
                .short_names
                .as_ref()
                .is_some_and(|s| !s.is_empty())
        );
        let v = &crd.spec.versions[0];
        assert!(v.served && v.storage);
        // Every kind the controller reports on has a status subresource; a BookingCalendar has
        // no status (it is only read, by the schedulers naming it).
        assert_eq!(
            v.subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            crd.spec.names.kind != "BookingCalendar",
            "status subresource of {}",
            crd.spec.names.kind
        );
        let cols: Vec<_> = v
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(cols.last(), Some(&"AGE"), "{}", crd.spec.names.kind);
        // Every property of spec and status has a description (kubectl explain shows it).
        let schema = serde_json::to_value(
            v.schema
                .as_ref()
                .unwrap()
                .open_api_v3_schema
                .as_ref()
                .unwrap(),
        )
        .unwrap();
        for part in ["spec", "status"] {
            assert_described(
                &schema["properties"][part],
                &format!("{}.{part}", crd.spec.names.kind),
            );
        }
    }
    let cols = |kind: &str| -> Vec<String> {
        crd_for_kind(kind).spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .filter(|c| c.priority.unwrap_or(0) == 0)
            .map(|c| c.name.clone())
            .collect()
    };
    let booking_cols = cols("Booking");
    for c in ["START", "END", "STATUS", "AGE"] {
        assert!(booking_cols.contains(&c.to_owned()), "Booking column {c}");
    }
    assert_eq!(
        cols("Resource"),
        [
            "HELD BY",
            "UNTIL",
            "NEXT",
            "INSTANCES",
            "RUNNING",
            "STATUS",
            "AGE"
        ]
    );
    assert_eq!(
        cols("BookingScheduler"),
        [
            "SCHEDULE",
            "DURATION",
            "SUSPEND",
            "NEXT",
            "LAST BOOKING",
            "AGE"
        ]
    );
    let start_desc = serde_json::to_value(&booking.spec.versions[0].schema).unwrap()["openAPIV3Schema"]
        ["properties"]["spec"]["properties"]["start_at"]["description"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(start_desc.contains("RFC 3339"), "{start_desc}");
}

fn assert_described(schema: &Value, path: &str) {
    let Some(props) = schema["properties"].as_object() else {
        return;
    };
    for (name, prop) in props {
        let here = format!("{path}.{name}");
        assert!(
            prop["description"].as_str().is_some_and(|d| !d.is_empty()),
            "{here} has no description"
        );
        // Conditions come from k8s-openapi with their own descriptions.
        if name != "conditions" {
            assert_described(prop, &here);
            assert_described(&prop["items"], &here);
        }
    }
}

fn booking(spec: Value) -> Value {
    json!({"apiVersion": "manager.kotaico.de/v1", "kind": "Booking", "metadata": {"name": "b"}, "spec": spec})
}

/// `object` is admitted by the API server.
fn admitted(cluster: &TestCluster, object: &Value) {
    if let Err(err) = dry_run_create(cluster, object) {
        panic!("{object} is refused:\n{err}");
    }
}

/// `object` is refused by the API server with a message containing every one of `needles`.
fn refused(cluster: &TestCluster, object: &Value, needles: &[&str]) {
    match dry_run_create(cluster, object) {
        Ok(out) => panic!("{object} is admitted: {out}"),
        Err(err) => {
            assert!(
                err.contains(" is invalid: "),
                "{object}: not the schema's denial:\n{err}"
            );
            for needle in needles {
                assert!(
                    err.contains(needle),
                    "{object}: {needle:?} is not in:\n{err}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemas_reject_the_worst_input_without_the_webhook() {
    let cluster = crds_only("worst-input").await;
    admitted(
        &cluster,
        &booking(
            json!({"resource_name": "ec2.analytics", "start_at": "2031-01-10T22:35:00Z", "end_at": "2031-01-11T00:35:00+01:00", "user_id": "ann"}),
        ),
    );
    let bad_bookings: [(Value, &[&str]); 8] = [
        // end_at before start_at (CEL rule), including across offsets.
        (
            json!({"resource_name": "ec2.a", "start_at": "2031-01-10T22:35:00Z", "end_at": "2031-01-10T22:00:00Z"}),
            &[
                "spec.end_at: Invalid value",
                r#"end_at "2031-01-10T22:00:00Z" must be after start_at "2031-01-10T22:35:00Z""#,
                "give an end_at later than start_at",
            ],
        ),
        (
            json!({"resource_name": "ec2.a", "start_at": "2031-01-10T22:35:00Z", "end_at": "2031-01-10T23:35:00+01:00"}),
            &[
                "spec.end_at: Invalid value",
                r#"end_at "2031-01-10T23:35:00+01:00" must be after start_at "2031-01-10T22:35:00Z""#,
            ],
        ),
        // Missing required fields.
        (
            json!({"start_at": "2031-01-10T22:35:00Z", "end_at": "2031-01-10T23:35:00Z"}),
            &["spec.resource_name: Required value"],
        ),
        (
            json!({"resource_name": "ec2.a", "end_at": "2031-01-10T23:35:00Z"}),
            &["spec.start_at: Required value"],
        ),
        // Not a date-time: the field, the value and the fix.
        (
            json!({"resource_name": "ec2.a", "start_at": "tomorrow", "end_at": "2031-01-10T23:35:00Z"}),
            &[
                "spec.start_at: Invalid value: \"tomorrow\": must be an RFC 3339 timestamp",
                "2031-01-10T22:35:00Z",
            ],
        ),
        (
            json!({"resource_name": "ec2.a", "start_at": "2031-05-01T10:00:00+0100", "end_at": "2031-05-02T10:00:00Z"}),
            &[
                "spec.start_at: Invalid value: \"2031-05-01T10:00:00+0100\": must be an RFC 3339 timestamp",
                "2031-01-10T23:35:00+01:00",
            ],
        ),
        (
            json!({"resource_name": "ec2.a", "start_at": "2031-05-01T10:00:00Z", "end_at": "2031-05-02T10:00:00+0100"}),
            &[
                "spec.end_at: Invalid value: \"2031-05-02T10:00:00+0100\": must be an RFC 3339 timestamp",
            ],
        ),
        (
            json!({"resource_name": "", "start_at": "2031-01-10T22:35:00Z", "end_at": "2031-01-10T23:35:00Z"}),
            &["spec.resource_name: Invalid value"],
        ),
    ];
    for (spec, needles) in bad_bookings {
        refused(&cluster, &booking(spec), needles);
    }

    let resource = |spec: Value| json!({"apiVersion": "manager.kotaico.de/v1", "kind": "Resource", "metadata": {"name": "r"}, "spec": spec});
    admitted(
        &cluster,
        &resource(json!({"type": "rds", "tag": "db", "region": "eu-central-1"})),
    );
    for (spec, needles) in [
        (
            json!({"type": "gce", "tag": "a"}),
            &[
                "spec.type: Unsupported value: \"gce\"",
                "\"ec2\"",
                "\"rds\"",
            ][..],
        ),
        (json!({"type": "ec2"}), &["spec.tag: Required value"][..]),
        (
            json!({"type": "ec2", "tag": "a", "region": "Frankfurt"}),
            &["spec.region: Invalid value: \"Frankfurt\""][..],
        ),
    ] {
        refused(&cluster, &resource(spec), needles);
    }

    let scheduler = |spec: Value| json!({"apiVersion": "manager.kotaico.de/v1", "kind": "BookingScheduler", "metadata": {"name": "s"}, "spec": spec});
    let template = json!({"resource_name": "ec2.analytics", "user_id": "ann"});
    admitted(
        &cluster,
        &scheduler(
            json!({"schedule": "@daily", "duration": 20, "bookingTemplate": template, "timeZone": "Europe/Berlin"}),
        ),
    );
    for (spec, needle) in [
        (
            json!({"schedule": "@daily", "duration": 0, "bookingTemplate": template}),
            "spec.duration: Invalid value: 0",
        ),
        (
            json!({"schedule": "@daily", "duration": -5, "bookingTemplate": template}),
            "spec.duration: Invalid value: -5",
        ),
        (
            json!({"schedule": "@daily", "duration": 20}),
            "spec.bookingTemplate: Required value",
        ),
        (
            json!({"schedule": "", "duration": 20, "bookingTemplate": template}),
            "spec.schedule: Invalid value",
        ),
    ] {
        refused(&cluster, &scheduler(spec), &[needle]);
    }

    let monitor = |t: &str| json!({"apiVersion": "manager.kotaico.de/v1", "kind": "ResourceMonitor", "metadata": {"name": "m"}, "spec": {"type": t}});
    admitted(&cluster, &monitor("ec2"));
    refused(
        &cluster,
        &monitor("azure"),
        &["spec.type: Unsupported value: \"azure\""],
    );
}

// === the project's samples, installed ===

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
            let object = ApiObject::parse(&doc, &what);
            match &object {
                ApiObject::Booking(b) => {
                    seen_email |= b.spec.notifications.iter().any(|n| n.type_ == "email");
                }
                ApiObject::BookingScheduler(s) => seen_zone |= s.spec.time_zone.is_some(),
                ApiObject::BookingCalendar(_)
                | ApiObject::Resource(_)
                | ApiObject::ResourceMonitor(_) => {}
            }
            let spec_back = object.spec();
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

/// `spec.resource_name` is a selectable field of the Booking CRD: the controller confirms a stop
/// by listing one Resource's bookings with it, and `kubectl get bk --field-selector` lists them
/// (the README's example). Checked with the real kubectl on the API server serving the committed
/// CRDs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookings_are_listed_per_resource_by_the_field_selector() {
    let cluster = crds_only("field-selector").await;
    let (kubeconfig, ns) = (cluster.kubeconfig_path(), cluster.namespace());
    for (name, resource) in [("a1", "ec2.a"), ("a2", "ec2.a"), ("b1", "ec2.b")] {
        let booking = json!({
            "apiVersion": "manager.kotaico.de/v1",
            "kind": "Booking",
            "metadata": {"name": name},
            "spec": {
                "resource_name": resource,
                "start_at": format!("2031-01-10T0{}:00:00Z", &name[1..]),
                "end_at": format!("2031-01-10T0{}:30:00Z", &name[1..]),
                "user_id": "ann",
            },
        });
        let args = ["create", "-n", ns, "-f", "-"];
        let created = kubectl(kubeconfig, None, &args, Some(&booking.to_string())).await;
        assert!(created.ok, "{name}: {}", created.stderr);
    }
    let field = booking_shared::api::RESOURCE_FIELD;
    for (resource, want) in [("ec2.a", "a1 a2"), ("ec2.b", "b1"), ("ec2.c", "")] {
        let selector = format!("{field}={resource}");
        let args = ["get", "bk", "-n", ns, "--field-selector", &selector];
        let names = ["-o", "jsonpath={.items[*].metadata.name}"];
        let got = kubectl(kubeconfig, None, &[&args[..], &names[..]].concat(), None).await;
        assert!(got.ok, "{selector}: {}", got.stderr);
        assert_eq!(got.stdout, want, "{selector}");
    }
}
