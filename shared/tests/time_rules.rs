//! Table tests of the pure time rules: RFC 3339 parsing, slots, phases and overlaps.

use booking_shared::{
    api::{BookingPhase, BookingSpec},
    time::{Slot, SlotError, format_rfc3339, parse_rfc3339},
};
use chrono::{DateTime, TimeZone, Utc};

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

#[test]
fn rfc3339_accepts_any_offset_and_fraction() {
    let cases = [
        ("2023-01-10T22:35:00Z", "2023-01-10T22:35:00Z"),
        ("2023-01-10T23:35:00+01:00", "2023-01-10T22:35:00Z"),
        ("2023-01-10T17:35:00-05:00", "2023-01-10T22:35:00Z"),
        ("2023-01-11T04:05:00+05:30", "2023-01-10T22:35:00Z"),
        ("2023-01-10T22:35:00.5Z", "2023-01-10T22:35:00.500Z"),
        (
            "2023-01-10T22:35:00.123456789Z",
            "2023-01-10T22:35:00.123456789Z",
        ),
        // Offsets that cross a day, a month and a year.
        ("2024-01-01T00:30:00+01:00", "2023-12-31T23:30:00Z"),
        // Leap day of a leap year.
        ("2024-02-29T12:00:00Z", "2024-02-29T12:00:00Z"),
        ("2000-02-29T12:00:00Z", "2000-02-29T12:00:00Z"),
        // The years the API server's CEL can compare whatever the offset.
        ("1000-01-01T00:00:00+01:00", "0999-12-31T23:00:00Z"),
        ("9998-12-31T23:59:59-23:59", "9999-01-01T23:58:59Z"),
    ];
    for (input, want) in cases {
        let got = parse_rfc3339("spec.start_at", input).unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(format_rfc3339(got), want, "{input}");
    }
}

#[test]
fn rfc3339_rejects_with_field_value_and_fix() {
    let cases = [
        ("2031-01-10 22:35", "'T'"),
        ("2031-01-10 22:35:00Z", "'T'"),
        ("2031-01-10T22:35", "incomplete"),
        ("2031-01-10T22:35:00", "incomplete"),
        ("2031-01-10", "incomplete"),
        ("", "empty"),
        ("   ", "empty"),
        ("tomorrow", ""),
        // Impossible dates: no 29 February outside leap years (1900 is not one), no 31 April.
        ("2023-02-29T12:00:00Z", "out of range"),
        ("1900-02-29T12:00:00Z", "out of range"),
        ("2023-04-31T12:00:00Z", "out of range"),
        ("2023-13-01T12:00:00Z", "out of range"),
        ("2023-01-10T24:00:01Z", "out of range"),
        ("2023-01-10T22:60:00Z", "out of range"),
        ("2023-01-10T22:35:00+25:00", ""),
        // What RFC 3339 allows but Kubernetes cannot read as a timestamp (the CRD refuses it).
        ("2023-01-10T22:35:00z", "upper-case"),
        ("2023-01-10t22:35:00Z", "upper-case"),
        ("2023-01-10T23:59:60Z", "leap second"),
        // The offset without its colon: the corrected value.
        ("2031-05-01T10:00:00+0100", "2031-05-01T10:00:00+01:00"),
        (
            "2031-05-01T10:00:00.25-0530",
            "2031-05-01T10:00:00.25-05:30",
        ),
        // Multi-byte characters where an offset would be.
        ("2031-05-01T10:00:00€0100", ""),
        ("2031-05-01T10:00:00+é100", ""),
        ("2031-05-01T10:00:00+01€", ""),
        // Beyond the years the API server's CEL compares.
        ("0999-12-31T23:00:00Z", "1000 and 9998"),
        ("9999-01-01T00:00:00Z", "1000 and 9998"),
    ];
    for (input, reason) in cases {
        let err = parse_rfc3339("spec.start_at", input).expect_err(input);
        let msg = err.to_string();
        assert!(msg.starts_with("spec.start_at: "), "{msg}");
        assert!(msg.contains(&format!("{input:?}")), "{msg}");
        assert!(
            msg.contains("2031-01-10T22:35:00Z"),
            "the fix is shown: {msg}"
        );
        assert!(
            msg.contains(reason),
            "{input}: {msg} should mention {reason}"
        );
    }
}

fn spec(start: &str, end: &str) -> BookingSpec {
    BookingSpec {
        resource_name: "ec2.analytics".into(),
        start_at: start.into(),
        end_at: end.into(),
        user_id: "ann".into(),
        notifications: vec![],
    }
}

#[test]
fn slot_of_booking_names_the_bad_field() {
    let err = Slot::of_booking(&spec("2031-01-10T22:35:00Z", "soon")).unwrap_err();
    assert!(
        err.to_string().starts_with("spec.end_at: \"soon\""),
        "{err}"
    );
    let err = Slot::of_booking(&spec("nope", "2031-01-10T22:35:00Z")).unwrap_err();
    assert!(
        err.to_string().starts_with("spec.start_at: \"nope\""),
        "{err}"
    );
    for (s, e) in [
        ("2031-01-10T22:35:00Z", "2031-01-10T22:35:00Z"),
        ("2031-01-10T22:35:00Z", "2031-01-10T22:34:59Z"),
        // Same instant written with two offsets is still empty.
        ("2031-01-10T23:35:00+01:00", "2031-01-10T22:35:00Z"),
    ] {
        let err = Slot::of_booking(&spec(s, e)).unwrap_err();
        assert!(matches!(err, SlotError::EndNotAfterStart { .. }), "{s} {e}");
        assert!(err.to_string().contains("spec.end_at"), "{err}");
    }
    let ok = Slot::of_booking(&spec(
        "2031-01-10T23:35:00+01:00",
        "2031-01-10T22:35:00.001Z",
    ))
    .unwrap();
    assert_eq!(ok.duration(), chrono::Duration::milliseconds(1));
}

#[test]
fn phase_is_half_open() {
    let slot = Slot::new(utc("2031-01-10T22:00:00Z"), utc("2031-01-10T23:00:00Z")).unwrap();
    let cases = [
        (
            "2031-01-10T21:59:59.999Z",
            BookingPhase::Scheduled,
            Some("2031-01-10T22:00:00Z"),
        ),
        (
            "2031-01-10T22:00:00Z",
            BookingPhase::InProgress,
            Some("2031-01-10T23:00:00Z"),
        ),
        (
            "2031-01-10T22:59:59.999Z",
            BookingPhase::InProgress,
            Some("2031-01-10T23:00:00Z"),
        ),
        ("2031-01-10T23:00:00Z", BookingPhase::Finished, None),
        ("2040-01-01T00:00:00Z", BookingPhase::Finished, None),
    ];
    for (now, phase, next) in cases {
        assert_eq!(slot.phase_at(utc(now)), phase, "{now}");
        assert_eq!(slot.next_boundary(utc(now)), next.map(utc), "{now}");
        assert_eq!(
            slot.contains(utc(now)),
            phase == BookingPhase::InProgress,
            "{now}"
        );
    }
}

#[test]
fn overlap_is_half_open_and_symmetric() {
    let h = |hour: u32| Utc.with_ymd_and_hms(2031, 1, 10, hour, 0, 0).unwrap();
    let s = |a, b| Slot::new(h(a), h(b)).unwrap();
    let cases = [
        (s(1, 3), s(2, 4), true),  // partial
        (s(1, 3), s(3, 4), false), // back to back
        (s(1, 3), s(0, 1), false), // back to back, before
        (s(1, 4), s(2, 3), true),  // containment
        (s(1, 3), s(1, 3), true),  // identical
        (s(1, 2), s(5, 6), false), // disjoint
        (s(0, 23), s(22, 23), true),
    ];
    for (a, b, want) in cases {
        assert_eq!(a.overlaps(&b), want, "{a:?} {b:?}");
        assert_eq!(b.overlaps(&a), want, "{b:?} {a:?}");
    }
    assert!(Slot::new(h(2), h(2)).is_none());
    assert!(Slot::new(h(3), h(2)).is_none());
}
