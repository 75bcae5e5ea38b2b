//! Wire compatibility with the original operator and honesty of the committed CRDs.
//!
//! - Every manifest in `../shared/reference/samples/` deserialises into the Rust types and is
//!   accepted by the generated CRDs (structural schema and CEL rules) unchanged.
//! - `manifests/crds/` holds exactly what `crdgen` generates from the types.
//! - The schemas reject the worst input on their own, for clusters without the webhook.

use std::collections::BTreeSet;

use booking_shared::api::{Booking, BookingScheduler, Resource, ResourceMonitor};
use booking_tests::{admission_errors, crd_for_kind, read_yaml_documents, repo_root, shared_dir};
use serde_json::{Value, json};

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
        let kind = doc["kind"].as_str().unwrap();
        // Deserialise strictly into the typed object, then check nothing of the spec was lost.
        let spec_back = match kind {
            "Booking" => {
                serde_json::to_value(serde_json::from_value::<Booking>(doc.clone()).unwrap().spec)
            }
            "Resource" => serde_json::to_value(
                serde_json::from_value::<Resource>(doc.clone())
                    .unwrap()
                    .spec,
            ),
            "ResourceMonitor" => serde_json::to_value(
                serde_json::from_value::<ResourceMonitor>(doc.clone())
                    .unwrap()
                    .spec,
            ),
            "BookingScheduler" => serde_json::to_value(
                serde_json::from_value::<BookingScheduler>(doc.clone())
                    .unwrap()
                    .spec,
            ),
            other => panic!("{path}: unexpected kind {other}"),
        }
        .unwrap();
        assert_eq!(spec_back, doc["spec"], "{path}: spec survives a round trip");
    }
}

#[test]
fn reference_samples_are_accepted_by_the_generated_crds() {
    for (path, doc) in samples() {
        let crd = crd_for_kind(doc["kind"].as_str().unwrap());
        let errors = admission_errors(&crd, &doc);
        assert!(errors.is_empty(), "{path} rejected: {errors:?}");
    }
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
        assert!(
            v.subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "status subresource"
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
            "LOCKED BY",
            "LOCKED UNTIL",
            "INSTANCES",
            "RUNNING",
            "STATUS",
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

#[test]
fn schemas_reject_the_worst_input_without_the_webhook() {
    let booking_crd = crd_for_kind("Booking");
    let ok = json!({"resource_name": "ec2.analytics", "start_at": "2031-01-10T22:35:00Z", "end_at": "2031-01-11T00:35:00+01:00", "user_id": "ann"});
    let bad_cases = [
        // end_at before start_at (CEL rule), including across offsets.
        (
            json!({"resource_name": "ec2.a", "start_at": "2031-01-10T22:35:00Z", "end_at": "2031-01-10T22:00:00Z"}),
            "end_at",
        ),
        (
            json!({"resource_name": "ec2.a", "start_at": "2031-01-10T22:35:00Z", "end_at": "2031-01-10T23:35:00+01:00"}),
            "end_at",
        ),
        // Missing required fields.
        (
            json!({"start_at": "2031-01-10T22:35:00Z", "end_at": "2031-01-10T23:35:00Z"}),
            "resource_name",
        ),
        (
            json!({"resource_name": "ec2.a", "end_at": "2031-01-10T23:35:00Z"}),
            "start_at",
        ),
        // Not a date-time.
        (
            json!({"resource_name": "ec2.a", "start_at": "tomorrow", "end_at": "2031-01-10T23:35:00Z"}),
            "tomorrow",
        ),
        (
            json!({"resource_name": "", "start_at": "2031-01-10T22:35:00Z", "end_at": "2031-01-10T23:35:00Z"}),
            "resource_name",
        ),
    ];
    assert!(admission_errors(&booking_crd, &booking(ok.clone())).is_empty());
    for (spec, needle) in bad_cases {
        let errors = admission_errors(&booking_crd, &booking(spec.clone()));
        assert!(!errors.is_empty(), "{spec} accepted");
        assert!(
            errors.join("\n").contains(needle),
            "{spec}: {errors:?} should mention {needle}"
        );
    }

    let resource = |spec: Value| json!({"apiVersion": "manager.kotaico.de/v1", "kind": "Resource", "metadata": {"name": "r"}, "spec": spec});
    let crd = crd_for_kind("Resource");
    assert!(
        admission_errors(
            &crd,
            &resource(json!({"type": "rds", "tag": "db", "region": "eu-central-1"}))
        )
        .is_empty()
    );
    for spec in [
        json!({"type": "gce", "tag": "a"}),
        json!({"type": "ec2"}),
        json!({"type": "ec2", "tag": "a", "region": "Frankfurt"}),
    ] {
        assert!(
            !admission_errors(&crd, &resource(spec.clone())).is_empty(),
            "{spec} accepted"
        );
    }

    let scheduler = |spec: Value| json!({"apiVersion": "manager.kotaico.de/v1", "kind": "BookingScheduler", "metadata": {"name": "s"}, "spec": spec});
    let crd = crd_for_kind("BookingScheduler");
    let template = json!({"resource_name": "ec2.analytics", "user_id": "ann"});
    assert!(admission_errors(&crd, &scheduler(json!({"schedule": "@daily", "duration": 20, "bookingTemplate": template, "timeZone": "Europe/Berlin"}))).is_empty());
    for spec in [
        json!({"schedule": "@daily", "duration": 0, "bookingTemplate": template}),
        json!({"schedule": "@daily", "duration": -5, "bookingTemplate": template}),
        json!({"schedule": "@daily", "duration": 20}),
        json!({"schedule": "", "duration": 20, "bookingTemplate": template}),
    ] {
        assert!(
            !admission_errors(&crd, &scheduler(spec.clone())).is_empty(),
            "{spec} accepted"
        );
    }

    let crd = crd_for_kind("ResourceMonitor");
    let monitor = |t: &str| json!({"apiVersion": "manager.kotaico.de/v1", "kind": "ResourceMonitor", "metadata": {"name": "m"}, "spec": {"type": t}});
    assert!(admission_errors(&crd, &monitor("ec2")).is_empty());
    assert!(!admission_errors(&crd, &monitor("azure")).is_empty());
}
