//! The live heap a cached booking costs in the booking index and the timer, in process, with
//! the controller's allocator (BENCHMARKS.md, "Bookings cached once, compact").
//!
//! ```text
//! cargo run --release -p booking-controller --example index_heap [BOOKINGS]
//! ```
//!
//! Feeds `BOOKINGS` bookings (default 100,000) over 1,024 Resources to a [`BookingIndex`] and
//! a [`Wakeups`] timer, each shaped as the watch delivers it once the controller has written
//! its first status (the uid, resourceVersion, creation time and generation the API server
//! sets, the three conditions of a `SCHEDULED` booking), projected as the controller
//! projects it, and prints jemalloc's allocated bytes per booking for each. The figure is the
//! whole cost of the structures, spare room of their tables included.

use booking_controller::index::BookingIndex;
use booking_controller::wakeups::Wakeups;
use booking_shared::api::{Booking, BookingPhase, BookingSpec, BookingStatus};
use booking_shared::time::to_kube_time;
use chrono::{Duration, TimeZone, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

booking_shared::global_allocator!();

const RESOURCES: usize = 1_024;

fn allocated() -> u64 {
    booking_shared::heap::stats()
        .expect("jemalloc's statistics")
        .allocated
}

/// Booking `i`, as the watch delivers it after the controller's first status write.
fn booking(i: usize) -> Booking {
    let base = Utc.with_ymd_and_hms(2031, 1, 6, 9, 0, 0).unwrap();
    let created = Utc.with_ymd_and_hms(2026, 12, 6, 15, 0, 0).unwrap();
    let group = i % RESOURCES;
    let round = i64::try_from(i / RESOURCES).unwrap();
    let start = base + Duration::hours(2) * i32::try_from(round).unwrap();
    let name = format!("future-{i:05}");
    let resource = format!("ec2.group-{group:04}");
    let mut b = Booking::new(
        &name,
        BookingSpec {
            resource_name: resource.clone(),
            start_at: booking_shared::time::format_rfc3339(start),
            end_at: booking_shared::time::format_rfc3339(start + Duration::hours(1)),
            user_id: "bench-user".into(),
            notifications: Vec::new(),
        },
    );
    let meta = &mut b.metadata;
    meta.namespace = Some("bench".into());
    meta.uid = Some(format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        i * 7919,
        i % 0xffff,
        i % 0xfff,
        (i * 3) % 0xfff,
        i * 104_729
    ));
    meta.resource_version = Some((1_000_000 + 2 * i).to_string());
    meta.generation = Some(1);
    meta.creation_timestamp = Some(to_kube_time(created));
    let cond = |type_: &str, status: &str, reason: &str, message: String| Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        last_transition_time: to_kube_time(created),
        observed_generation: Some(1),
    };
    b.status = Some(BookingStatus {
        status: Some(BookingPhase::Scheduled),
        conditions: vec![
            cond("Ready", "True", "Scheduled", format!("{name} is SCHEDULED")),
            cond(
                "Conflict",
                "False",
                "NoOverlap",
                "no earlier booking of the resource overlaps this one".into(),
            ),
            cond(
                "ResourceFound",
                "True",
                "Found",
                format!("Resource {resource} exists"),
            ),
        ],
        observed_generation: Some(1),
        ..Default::default()
    });
    b
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("a count of bookings"))
        .unwrap_or(100_000);
    let instants: Vec<_> = (0..n)
        .map(|i| {
            let b = booking(i);
            let start = booking_shared::time::parse_rfc3339("start_at", &b.spec.start_at).unwrap();
            (b.metadata.name.unwrap(), start)
        })
        .collect();

    let index = BookingIndex::default();
    let before = allocated();
    index.begin_list();
    // Each booking is made and handed over in turn: what the index frees of it is what the
    // loop allocated, so the difference is the index's own.
    for i in 0..n {
        index.list_apply(booking(i));
    }
    index.end_list();
    let after = allocated();
    println!(
        "booking index: {n} bookings, {:.1} MiB, {:.0} B per booking",
        (after - before) as f64 / (1024.0 * 1024.0),
        (after - before) as f64 / n as f64
    );

    let wakeups = Wakeups::default();
    let before = allocated();
    for (key, at) in &instants {
        wakeups.set("bench", key, Some(*at));
    }
    let after = allocated();
    println!(
        "timer: {n} instants, {:.1} MiB, {:.0} B per booking",
        (after - before) as f64 / (1024.0 * 1024.0),
        (after - before) as f64 / n as f64
    );
    assert_eq!(index.len(), n);
}
