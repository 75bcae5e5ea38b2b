//! The objects and AdmissionReview bodies the benchmarks send.

use chrono::{DateTime, Duration, SecondsFormat, Timelike as _, Utc};
use serde_json::{Value, json};

/// Namespace of the benchmark's bookings.
pub const NAMESPACE: &str = "bench";

/// A namespace that opts out of both webhooks by the label the shipped configurations'
/// `namespaceSelector` excludes ([`ADMISSION_OPT_OUT`]): the creates without the webhook of the
/// paired create-latency figures, beside creates in [`NAMESPACE`] with it.
pub const OPTED_OUT_NAMESPACE: &str = "bench-admission-disabled";

/// The label (key, value) of a namespace that the shipped webhook configurations skip
/// (`manifests/webhook/webhook-configurations.yaml`).
pub const ADMISSION_OPT_OUT: (&str, &str) = ("manager.kotaico.de/admission", "disabled");

/// Layout of the indexed bookings: `count` bookings spread round-robin over `groups` Resources,
/// each one hour long, two hours apart on its Resource, from `base` on.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    /// First slot start (a whole hour, one day ahead).
    pub base: DateTime<Utc>,
    /// Number of Resources.
    pub groups: usize,
}

impl Layout {
    /// A layout starting on the whole hour one day after `now`.
    pub fn new(now: DateTime<Utc>, groups: usize) -> Self {
        let base = (now + Duration::days(1))
            .with_minute(0)
            .and_then(|t| t.with_second(0))
            .and_then(|t| t.with_nanosecond(0))
            .unwrap_or(now + Duration::days(1));
        Layout {
            base,
            groups: groups.max(1),
        }
    }

    /// The Resource name of group `g`.
    pub fn resource(g: usize) -> String {
        format!("ec2.group-{g}")
    }

    /// Booking number `i` of the layout.
    pub fn booking(&self, i: usize) -> Value {
        self.booking_in(NAMESPACE, i)
    }

    /// Booking number `i` of the layout, in `namespace`.
    pub fn booking_in(&self, namespace: &str, i: usize) -> Value {
        let group = i % self.groups;
        let round = i32::try_from(i / self.groups).unwrap_or(i32::MAX);
        let start = self.base + Duration::hours(2) * round;
        booking_in(
            namespace,
            &format!("b-{i:05}"),
            &Self::resource(group),
            start,
            start + Duration::hours(1),
        )
    }

    /// The booking of group 0 in the free gap between its first two bookings, as `kubectl
    /// apply` sends it ([`applied`]): the object whose real create gives the load's review.
    pub fn free_booking(&self) -> Value {
        applied(booking(
            "probe-free",
            &Self::resource(0),
            self.base + Duration::minutes(70),
            self.base + Duration::minutes(110),
        ))
    }

    /// A CREATE review overlapping the layout's first booking (denied when it is indexed).
    pub fn conflicting_review(&self) -> Vec<u8> {
        let obj = booking(
            "probe-conflict",
            &Self::resource(0),
            self.base + Duration::minutes(30),
            self.base + Duration::minutes(90),
        );
        review(&obj, true)
    }
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A Booking object.
pub fn booking(name: &str, resource: &str, start: DateTime<Utc>, end: DateTime<Utc>) -> Value {
    booking_in(NAMESPACE, name, resource, start, end)
}

/// [`booking`] in `namespace`.
pub fn booking_in(
    namespace: &str,
    name: &str,
    resource: &str,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> Value {
    json!({
        "apiVersion": "manager.kotaico.de/v1",
        "kind": "Booking",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "resource_name": resource,
            "start_at": rfc3339(start),
            "end_at": rfc3339(end),
            "user_id": "bench-user",
            "notifications": [],
        },
    })
}

/// `object` as the API server stores it after a create through the mutating webhook: with the
/// `manager.kotaico.de/requested-by` annotation it fills in on every create (`by`, the
/// requesting user). The controller's memory figures use bookings in this shape, as every
/// booking of a cluster with the webhook installed is.
pub fn requested_by(mut object: Value, by: &str) -> Value {
    object["metadata"]["annotations"][booking_shared::validation::REQUESTED_BY_ANNOTATION] =
        json!(by);
    object
}

/// `object` as `kubectl apply` creates it: with labels and the
/// `kubectl.kubernetes.io/last-applied-configuration` annotation holding the manifest.
pub fn applied(mut object: Value) -> Value {
    object["metadata"]["labels"] = json!({
        "app.kubernetes.io/name": "analytics",
        "app.kubernetes.io/part-of": "bench",
        "team": "data-platform",
    });
    let manifest = object.to_string();
    object["metadata"]["annotations"] =
        json!({"kubectl.kubernetes.io/last-applied-configuration": format!("{manifest}\n")});
    object
}

/// The field manager of `kubectl apply`'s create (client-side apply).
pub const KUBECTL_APPLY_MANAGER: &str = "kubectl-client-side-apply";

/// A hand-made AdmissionReview v1 of a CREATE of `object` (the index probes; the load is a
/// review captured from the real API server, see [`crate::capture`]).
pub fn review(object: &Value, dry_run: bool) -> Vec<u8> {
    let body = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "6b1c3f0e-0000-4000-8000-00000000be4c",
            "kind": {"group": "manager.kotaico.de", "version": "v1", "kind": "Booking"},
            "resource": {"group": "manager.kotaico.de", "version": "v1", "resource": "bookings"},
            "requestKind": {"group": "manager.kotaico.de", "version": "v1", "kind": "Booking"},
            "requestResource": {"group": "manager.kotaico.de", "version": "v1", "resource": "bookings"},
            "name": object["metadata"]["name"],
            "namespace": object["metadata"]["namespace"],
            "operation": "CREATE",
            "userInfo": {"username": "bench-user", "groups": ["system:authenticated"]},
            "object": object,
            "oldObject": null,
            "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    });
    serde_json::to_vec(&body).unwrap_or_default()
}

/// The fixed answer of the bare TLS echo server: an allowed AdmissionReview.
pub fn echo_answer() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "6b1c3f0e-0000-4000-8000-00000000be4c", "allowed": true},
    }))
    .unwrap_or_default()
}

/// Whether an answer body admits the request.
pub fn allowed(body: &[u8]) -> Option<bool> {
    let v: Value = serde_json::from_slice(body).ok()?;
    v["response"]["allowed"].as_bool()
}
