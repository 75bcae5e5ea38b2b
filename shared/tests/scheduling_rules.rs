//! Table tests of BookingScheduler planning and notification timing.

use booking_shared::{
    api::{BookingSchedulerSpec, BookingTemplate, Notification},
    scheduling::{
        Skips, booking_for_fire, booking_name, lead_time, notification_due_at,
        notification_should_send, plan_scheduler,
    },
    time::Slot,
};
use chrono::{DateTime, Duration, Utc};

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn spec(schedule: &str, duration: u32, deadline: Option<i64>) -> BookingSchedulerSpec {
    BookingSchedulerSpec {
        schedule: schedule.into(),
        duration,
        booking_template: BookingTemplate {
            resource_name: "ec2.analytics".into(),
            user_id: "ann".into(),
            notifications: vec![],
        },
        time_zone: None,
        starting_deadline_seconds: deadline,
        ..Default::default()
    }
}

#[test]
fn names_are_deterministic_valid_and_distinct() {
    let fire = utc("2026-11-30T10:00:00Z");
    assert_eq!(booking_name("nightly", fire), "nightly-202611301000");
    assert_eq!(booking_name("nightly", fire), booking_name("nightly", fire));
    assert_ne!(
        booking_name("nightly", fire),
        booking_name("nightly", fire + Duration::minutes(1))
    );
    let long_a = "a".repeat(80);
    let long_b = format!("{}b", "a".repeat(79));
    let (na, nb) = (booking_name(&long_a, fire), booking_name(&long_b, fire));
    assert_ne!(na, nb, "long names keep distinct hashes");
    for n in [&na, &nb] {
        assert!(n.len() <= 63, "{n}");
        assert!(n.ends_with("-202611301000"), "{n}");
        assert!(
            n.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{n}"
        );
    }
    // Truncation never leaves a dash before the hash.
    let dashed = format!("{}-{}", "a".repeat(40), "b".repeat(40));
    let n = booking_name(&dashed, fire);
    assert!(!n.contains("--"), "{n}");
}

#[test]
fn booking_for_fire_starts_at_the_fire_time() {
    let s = spec("0 * * * *", 20, None);
    let b = booking_for_fire(&s, utc("2026-11-30T10:00:00Z"));
    assert_eq!(b.start_at, "2026-11-30T10:00:00Z");
    assert_eq!(b.end_at, "2026-11-30T10:20:00Z");
    assert_eq!(b.resource_name, "ec2.analytics");
    assert_eq!(b.user_id, "ann");
}

#[test]
fn plan_table() {
    // (schedule, duration, deadline, handled_until, now, create, skipped, next)
    type Row = (
        &'static str,
        u32,
        Option<i64>,
        &'static str,
        &'static str,
        Option<&'static str>,
        Option<&'static str>,
        Option<&'static str>,
    );
    let rows: &[Row] = &[
        // Exactly at the fire time: create it.
        (
            "* * * * *",
            1,
            None,
            "2026-11-30T09:59:00Z",
            "2026-11-30T10:00:00Z",
            Some("2026-11-30T10:00:00Z"),
            None,
            Some("2026-11-30T10:01:00Z"),
        ),
        // Just before: nothing, requeue at the fire.
        (
            "0 * * * *",
            20,
            None,
            "2026-11-30T09:00:00Z",
            "2026-11-30T09:59:59Z",
            None,
            None,
            Some("2026-11-30T10:00:00Z"),
        ),
        // Already handled: nothing.
        (
            "0 * * * *",
            20,
            None,
            "2026-11-30T10:00:00Z",
            "2026-11-30T10:05:00Z",
            None,
            None,
            Some("2026-11-30T11:00:00Z"),
        ),
        // Missed by 5 minutes, no deadline, slot still open: honoured (start_at stays the fire).
        (
            "0 * * * *",
            20,
            None,
            "2026-11-30T09:00:00Z",
            "2026-11-30T10:05:00Z",
            Some("2026-11-30T10:00:00Z"),
            None,
            Some("2026-11-30T11:00:00Z"),
        ),
        // Missed by 5 minutes, deadline 60 s: skipped.
        (
            "0 * * * *",
            20,
            Some(60),
            "2026-11-30T09:00:00Z",
            "2026-11-30T10:05:00Z",
            None,
            Some("2026-11-30T10:00:00Z"),
            Some("2026-11-30T11:00:00Z"),
        ),
        // Missed by 5 minutes, deadline 600 s: honoured.
        (
            "0 * * * *",
            20,
            Some(600),
            "2026-11-30T09:00:00Z",
            "2026-11-30T10:05:00Z",
            Some("2026-11-30T10:00:00Z"),
            None,
            Some("2026-11-30T11:00:00Z"),
        ),
        // Missed and its slot has ended: skipped even without a deadline.
        (
            "0 * * * *",
            20,
            None,
            "2026-11-30T09:00:00Z",
            "2026-11-30T10:25:00Z",
            None,
            Some("2026-11-30T10:00:00Z"),
            Some("2026-11-30T11:00:00Z"),
        ),
        // Slot ends exactly now (half-open): skipped.
        (
            "0 * * * *",
            20,
            None,
            "2026-11-30T09:00:00Z",
            "2026-11-30T10:20:00Z",
            None,
            Some("2026-11-30T10:00:00Z"),
            Some("2026-11-30T11:00:00Z"),
        ),
        // Long downtime: only the most recent missed fire is considered.
        (
            "*/10 * * * *",
            5,
            None,
            "2026-11-29T00:00:00Z",
            "2026-11-30T10:12:00Z",
            Some("2026-11-30T10:10:00Z"),
            None,
            Some("2026-11-30T10:20:00Z"),
        ),
        (
            "*/10 * * * *",
            5,
            None,
            "2026-11-29T00:00:00Z",
            "2026-11-30T10:17:00Z",
            None,
            Some("2026-11-30T10:10:00Z"),
            Some("2026-11-30T10:20:00Z"),
        ),
    ];
    for (i, (schedule, duration, deadline, handled, now, create, skipped, next)) in
        rows.iter().enumerate()
    {
        let plan = plan_scheduler(
            &spec(schedule, *duration, *deadline),
            &Skips::default(),
            utc(handled),
            utc(now),
        )
        .unwrap();
        assert_eq!(plan.create, create.map(utc), "row {i}: create");
        assert_eq!(plan.skipped, skipped.map(utc), "row {i}: skipped");
        assert_eq!(plan.next, next.map(utc), "row {i}: next");
    }
}

#[test]
fn plan_in_a_time_zone_and_invalid_schedules() {
    let mut s = spec("0 9 * * *", 30, None);
    s.time_zone = Some("Europe/Berlin".into());
    let plan = plan_scheduler(
        &s,
        &Skips::default(),
        utc("2026-11-30T07:00:00Z"),
        utc("2026-11-30T08:00:00Z"),
    )
    .unwrap();
    assert_eq!(plan.create, Some(utc("2026-11-30T08:00:00Z")));
    s.time_zone = Some("Nowhere/Land".into());
    assert!(
        plan_scheduler(
            &s,
            &Skips::default(),
            utc("2026-11-30T07:00:00Z"),
            utc("2026-11-30T08:00:00Z")
        )
        .is_err()
    );
    let bad = spec("61 * * * *", 30, None);
    assert!(
        plan_scheduler(
            &bad,
            &Skips::default(),
            utc("2026-11-30T07:00:00Z"),
            utc("2026-11-30T08:00:00Z")
        )
        .is_err()
    );
}

#[test]
fn notification_timing() {
    let slot = Slot::new(utc("2026-11-30T10:00:00Z"), utc("2026-11-30T11:00:00Z")).unwrap();
    let n = |lead: Option<u32>| Notification {
        type_: "email".into(),
        recipient: "a@example.com".into(),
        lead_minutes: lead,
        events: vec![],
        recipient_from: None,
    };
    assert_eq!(
        lead_time(&n(None)),
        Duration::minutes(20),
        "the original's 20 minutes"
    );
    assert_eq!(lead_time(&n(Some(5))), Duration::minutes(5));
    let lead = Duration::minutes(20);
    assert_eq!(
        notification_due_at(&slot, lead),
        utc("2026-11-30T10:40:00Z")
    );
    let rows = [
        ("2026-11-30T09:00:00Z", false),
        ("2026-11-30T10:39:59Z", false),
        ("2026-11-30T10:40:00Z", true),
        ("2026-11-30T10:59:59Z", true),
        // Ended: nothing is sent after downtime.
        ("2026-11-30T11:00:00Z", false),
        ("2026-11-30T12:00:00Z", false),
    ];
    for (now, want) in rows {
        assert_eq!(
            notification_should_send(&slot, lead, utc(now)),
            want,
            "{now}"
        );
    }
    // A booking shorter than its lead time notifies as soon as it starts.
    let short = Slot::new(utc("2026-11-30T10:00:00Z"), utc("2026-11-30T10:10:00Z")).unwrap();
    assert_eq!(
        notification_due_at(&short, lead),
        utc("2026-11-30T10:00:00Z")
    );
    assert!(!notification_should_send(
        &short,
        lead,
        utc("2026-11-30T09:59:59Z")
    ));
    assert!(notification_should_send(
        &short,
        lead,
        utc("2026-11-30T10:00:00Z")
    ));
}
