//! The live heap one decoded list page of Bookings holds, read whole and as the controller's
//! watch reads it, in process, with the controller's allocator (BENCHMARKS.md, "The Bookings
//! read as a projection").
//!
//! ```text
//! cargo run --release -p booking-controller --example list_page_heap [PAGE]
//! ```
//!
//! Builds the body of a list page of `PAGE` Bookings (default 500, kube's watcher's page) as
//! the API server sends them once the controller has written their first status: the
//! requested-by annotation, the `managedFields` of their creator and of the controller's status
//! write, the three conditions of a `SCHEDULED` booking. Decodes it as a list of whole
//! [`Booking`]s, as a watch of Bookings did, and as a list of [`WatchedBooking`]s, as the
//! controller's watch does, and prints jemalloc's allocated bytes held by each decoded page.

use booking_controller::feeds::WatchedBooking;
use booking_shared::api::Booking;
use kube::core::ObjectList;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

booking_shared::global_allocator!();

fn allocated() -> u64 {
    booking_shared::heap::stats()
        .expect("jemalloc's statistics")
        .allocated
}

/// The `fieldsV1` of a condition of type `t`.
fn condition_fields(t: &str) -> (String, Value) {
    (
        format!("k:{{\"type\":\"{t}\"}}"),
        json!({".": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:observedGeneration": {},
               "f:reason": {}, "f:status": {}, "f:type": {}}),
    )
}

/// Booking `i` as the API server sends it after the controller's first status write.
fn booking(i: usize) -> Value {
    let name = format!("future-{i:05}");
    let resource = format!("ec2.group-{:04}", i % 1024);
    let mut conditions = serde_json::Map::new();
    conditions.insert(".".into(), json!({}));
    for t in ["Ready", "Conflict", "ResourceExists"] {
        let (k, v) = condition_fields(t);
        conditions.insert(k, v);
    }
    let condition = |t: &str, s: &str, r: &str, m: String| {
        json!({"type": t, "status": s, "reason": r, "message": m,
               "lastTransitionTime": "2026-12-06T15:00:00Z", "observedGeneration": 1})
    };
    json!({
        "apiVersion": "manager.kotaico.de/v1", "kind": "Booking",
        "metadata": {
            "name": name, "namespace": "bench",
            "uid": format!("{:08x}-1111-4222-8333-{:012x}", i * 7919, i * 104_729),
            "resourceVersion": (1_000_000 + 2 * i).to_string(), "generation": 1,
            "creationTimestamp": "2026-12-06T15:00:00Z",
            "annotations": {"manager.kotaico.de/requested-by": "bench-user"},
            "managedFields": [
                {"manager": "booking-bench", "operation": "Update",
                 "apiVersion": "manager.kotaico.de/v1", "time": "2026-12-06T15:00:00Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {
                    "f:metadata": {"f:annotations": {".": {},
                        "f:manager.kotaico.de/requested-by": {}}},
                    "f:spec": {".": {}, "f:end_at": {}, "f:resource_name": {}, "f:start_at": {},
                               "f:user_id": {}}}},
                {"manager": "booking-controller", "operation": "Update",
                 "apiVersion": "manager.kotaico.de/v1", "time": "2026-12-06T15:00:00Z",
                 "fieldsType": "FieldsV1", "subresource": "status", "fieldsV1": {
                    "f:status": {".": {}, "f:conditions": conditions,
                                 "f:observedGeneration": {}, "f:status": {}}}},
            ],
        },
        "spec": {"resource_name": resource, "start_at": "2031-01-06T09:00:00Z",
                 "end_at": "2031-01-06T10:00:00Z", "user_id": "bench-user"},
        "status": {"status": "SCHEDULED", "observedGeneration": 1, "conditions": [
            condition("Ready", "True", "Scheduled", format!("{name} is SCHEDULED")),
            condition("Conflict", "False", "NoOverlap",
                      "no earlier booking of the resource overlaps this one".into()),
            condition("ResourceExists", "True", "Found", format!("Resource {resource} exists")),
        ]},
    })
}

/// The live heap held by `body` decoded as a list of `K`.
fn held<K: DeserializeOwned + Clone>(body: &[u8]) -> u64 {
    let before = allocated();
    let page: ObjectList<K> = serde_json::from_slice(body).expect("the page decodes");
    let after = allocated();
    drop(page);
    after.saturating_sub(before)
}

fn main() {
    let page: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("PAGE is a number"))
        .unwrap_or(500)
        .max(1);
    let items: Vec<Value> = (0..page).map(booking).collect();
    let body = serde_json::to_vec(&json!({
        "apiVersion": "manager.kotaico.de/v1", "kind": "BookingList",
        "metadata": {"resourceVersion": "2000000"}, "items": items,
    }))
    .expect("the page encodes");
    drop(items);
    println!(
        "a page of {page} bookings: body {:.1} KiB",
        body.len() as f64 / 1024.0
    );
    for (what, bytes) in [
        ("whole Bookings", held::<Booking>(&body)),
        ("WatchedBookings", held::<WatchedBooking>(&body)),
    ] {
        println!(
            "decoded as {what}: {:.1} KiB held, {} B per booking",
            bytes as f64 / 1024.0,
            bytes / page as u64
        );
    }
}
