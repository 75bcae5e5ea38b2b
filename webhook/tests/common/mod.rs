//! Helpers shared by the webhook's tests: a state with a fixed clock, AdmissionReview bodies.

#![allow(dead_code)]

use std::sync::Arc;

use booking_shared::{
    api::{Booking, Resource},
    validation::Policy,
};
use booking_webhook::{caches, metrics::Metrics, state::State};
use chrono::{DateTime, Duration, TimeZone, Utc};
use kube::runtime::{reflector, watcher::Event};
use serde_json::{Value, json};

/// The fixed "now" of the tests.
pub fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2030, 6, 1, 12, 0, 0).unwrap()
}

/// `now + hours`, RFC 3339.
pub fn at(hours: i64) -> String {
    booking_shared::time::format_rfc3339(now() + Duration::hours(hours))
}

/// A state with the fixed clock, the given stored bookings (synced) and Resources.
pub fn state_with(bookings: &[Value], resources: &[Value]) -> Arc<State> {
    let (reader, mut writer) = reflector::store::<Resource>();
    writer.apply_watcher_event(&Event::Init);
    for r in resources {
        let r: Resource = serde_json::from_value(r.clone()).unwrap();
        writer.apply_watcher_event(&Event::InitApply(r));
    }
    writer.apply_watcher_event(&Event::InitDone);
    let state = Arc::new(State::new(
        Policy::default(),
        Duration::seconds(30),
        Some(reader),
        Arc::new(now),
        Metrics::new(),
    ));
    let mut buffer = Default::default();
    caches::apply_booking_event(
        &state,
        &mut buffer,
        Event::<booking_shared::api::Booking>::Init,
    );
    for b in bookings {
        let b: Booking = serde_json::from_value(b.clone()).unwrap();
        caches::apply_booking_event(&state, &mut buffer, Event::InitApply(b));
    }
    caches::apply_booking_event(
        &state,
        &mut buffer,
        Event::<booking_shared::api::Booking>::InitDone,
    );
    state.mark_resources_synced();
    state
}

/// A Booking object in namespace `ns`.
pub fn booking(ns: &str, name: &str, resource: &str, start: i64, end: i64, user: &str) -> Value {
    let mut spec = json!({"resource_name": resource, "start_at": at(start), "end_at": at(end)});
    if !user.is_empty() {
        spec["user_id"] = json!(user);
    }
    json!({
        "apiVersion": "manager.kotaico.de/v1",
        "kind": "Booking",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    })
}

/// A Resource object.
pub fn resource(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "manager.kotaico.de/v1",
        "kind": "Resource",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"type": "ec2", "tag": "analytics"},
    })
}

/// Options of a review body.
#[derive(Clone)]
pub struct Req {
    pub operation: &'static str,
    pub object: Value,
    pub old: Value,
    pub dry_run: bool,
    pub sub_resource: Option<&'static str>,
    pub user: &'static str,
}

impl Req {
    pub fn create(object: Value) -> Self {
        Self {
            operation: "CREATE",
            object,
            old: Value::Null,
            dry_run: false,
            sub_resource: None,
            user: "ann",
        }
    }

    pub fn update(old: Value, object: Value) -> Self {
        Self {
            operation: "UPDATE",
            old,
            ..Self::create(object)
        }
    }

    /// The AdmissionReview body, as the API server sends it.
    pub fn body(&self) -> Vec<u8> {
        let obj = if self.object.is_null() {
            &self.old
        } else {
            &self.object
        };
        let kind = obj["kind"].as_str().unwrap_or("Booking");
        let plural = match kind {
            "Booking" => "bookings",
            "BookingScheduler" => "bookingschedulers",
            "Resource" => "resources",
            "ResourceMonitor" => "resourcemonitors",
            _ => "others",
        };
        let group = obj["apiVersion"]
            .as_str()
            .and_then(|a| a.split_once('/'))
            .map(|(g, _)| g)
            .unwrap_or("manager.kotaico.de");
        let gvk = json!({"group": group, "version": "v1", "kind": kind});
        let mut request = json!({
            "uid": "0f1e2d3c-0000-4000-8000-000000000001",
            "kind": gvk,
            "resource": {"group": group, "version": "v1", "resource": plural},
            "name": obj["metadata"]["name"],
            "namespace": obj["metadata"]["namespace"],
            "operation": self.operation,
            "userInfo": {"username": self.user, "groups": ["system:authenticated"]},
            "object": self.object,
            "oldObject": self.old,
            "dryRun": self.dry_run,
        });
        if let Some(s) = self.sub_resource {
            request["subResource"] = json!(s);
        }
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": request,
        }))
        .unwrap()
    }
}

/// The `response` of an answer body.
pub fn response_of(body: &[u8]) -> Value {
    let v: Value = serde_json::from_slice(body).expect("the answer is JSON");
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1", "{v}");
    assert_eq!(v["kind"], "AdmissionReview", "{v}");
    v["response"].clone()
}

/// A Booking as the API server stores and sends it: managedFields, labels, annotations, a
/// status, notifications.
pub fn stored_shape(mut object: Value) -> Value {
    let meta = &mut object["metadata"];
    meta["uid"] = json!("9c1b7c1e-5d3a-4c55-9d0a-6d1f7e0b2a11");
    meta["resourceVersion"] = json!("48213");
    meta["generation"] = json!(1);
    meta["creationTimestamp"] = json!("2030-06-01T11:58:02Z");
    meta["labels"] = json!({"app.kubernetes.io/name": "analytics", "team": "data-platform"});
    meta["annotations"] = json!({
        "kubectl.kubernetes.io/last-applied-configuration": "{\"apiVersion\":\"manager.kotaico.de/v1\"}\n",
        "manager.kotaico.de/requested-by": "ann",
    });
    meta["managedFields"] = json!([
        {"manager": "kubectl-client-side-apply", "operation": "Update",
         "apiVersion": "manager.kotaico.de/v1", "time": "2030-06-01T11:58:02Z",
         "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}},
                      "f:spec": {".": {}, "f:end_at": {}, "f:resource_name": {}, "f:start_at": {}}}},
        {"manager": "booking-controller", "operation": "Update", "apiVersion": "manager.kotaico.de/v1",
         "time": "2030-06-01T11:58:03Z", "fieldsType": "FieldsV1", "subresource": "status",
         "fieldsV1": {"f:status": {".": {}, "f:status": {}}}},
    ]);
    meta["finalizers"] = json!(["manager.kotaico.de/release"]);
    object["spec"]["notifications"] = json!([{"type": "email", "recipient": "ann@example.com"}]);
    object["status"] = json!({"status": "SCHEDULED"});
    object
}

/// A review as the API server sends it (requestKind, requestResource, userInfo with groups and
/// extra, options), around `req`'s.
pub fn real_review(req: &Req) -> Vec<u8> {
    let mut review: Value = serde_json::from_slice(&req.body()).unwrap();
    let r = &mut review["request"];
    r["requestKind"] = r["kind"].clone();
    r["requestResource"] = r["resource"].clone();
    r["userInfo"]["groups"] = json!(["system:masters", "system:authenticated"]);
    r["userInfo"]["extra"] =
        json!({"authentication.kubernetes.io/credential-id": ["X509SHA256=ab12"]});
    r["options"] = json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1",
        "fieldManager": "kubectl-client-side-apply", "fieldValidation": "Strict"});
    serde_json::to_vec(&review).unwrap()
}
