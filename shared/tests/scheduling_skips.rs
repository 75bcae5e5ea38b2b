//! Skip dates and suspend of BookingSchedulers: pure planning with the clock injected, in a
//! non-UTC zone and across daylight-saving changes, and the admission rules of the entries.

use booking_shared::{
    api::{BookingCalendarSpec, BookingSchedulerSpec, BookingTemplate, CalendarRef, SkipDate},
    scheduling::{Skips, plan_scheduler},
    validation::{Policy, validate_booking_calendar, validate_booking_scheduler},
};
use chrono::{DateTime, Utc};

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn spec(schedule: &str, duration: u32, zone: &str) -> BookingSchedulerSpec {
    BookingSchedulerSpec {
        schedule: schedule.into(),
        duration,
        booking_template: BookingTemplate {
            resource_name: "ec2.analytics".into(),
            user_id: "ann".into(),
            notifications: vec![],
        },
        time_zone: Some(zone.into()),
        ..Default::default()
    }
}

fn day(d: &str, reason: Option<&str>) -> SkipDate {
    SkipDate {
        date: Some(d.into()),
        reason: reason.map(Into::into),
        ..Default::default()
    }
}

fn range(from: &str, to: &str) -> SkipDate {
    SkipDate {
        from: Some(from.into()),
        to: Some(to.into()),
        ..Default::default()
    }
}

fn fire(at: &str) -> SkipDate {
    SkipDate {
        fire: Some(at.into()),
        ..Default::default()
    }
}

fn skips(entries: &[SkipDate]) -> Skips {
    let mut s = Skips::default();
    s.add("spec.skipDates", "spec.skipDates", entries).unwrap();
    s
}

/// A date is a local day of the scheduler's zone: at 00:30 in Berlin on Christmas Day it is
/// still the 24th in UTC, and that fire is skipped; the fire of the 24th is not.
#[test]
fn a_date_skips_the_local_day_of_the_zone_not_the_utc_day() {
    let s = spec("30 0 * * *", 60, "Europe/Berlin");
    let k = skips(&[day("2031-12-25", Some("Christmas"))]);
    // The fire of the 24th (23:30 UTC on the 23rd) is booked.
    let p = plan_scheduler(
        &s,
        &k,
        utc("2031-12-23T00:00:00Z"),
        utc("2031-12-23T23:30:00Z"),
    )
    .unwrap();
    assert_eq!(p.create, Some(utc("2031-12-23T23:30:00Z")));
    // Its next booking fire passes over the 25th (23:30 UTC on the 24th).
    assert_eq!(p.next, Some(utc("2031-12-25T23:30:00Z")));
    assert_eq!(
        p.upcoming[0],
        (
            utc("2031-12-24T23:30:00Z"),
            Some("Christmas (spec.skipDates)".into())
        )
    );
    assert_eq!(p.upcoming[1], (utc("2031-12-25T23:30:00Z"), None));
    assert_eq!(p.upcoming.len(), 5);
    // At the skipped fire: no booking, no missed fire, the reason.
    let p = plan_scheduler(
        &s,
        &k,
        utc("2031-12-23T23:30:00Z"),
        utc("2031-12-24T23:30:00Z"),
    )
    .unwrap();
    assert_eq!(p.create, None);
    assert_eq!(p.skipped, None);
    assert_eq!(
        p.cancelled,
        Some((
            utc("2031-12-24T23:30:00Z"),
            "Christmas (spec.skipDates)".into()
        ))
    );
    assert_eq!(p.wake, Some(utc("2031-12-25T23:30:00Z")));
    // The same date in UTC skips the other fire.
    let s_utc = spec("30 0 * * *", 60, "UTC");
    let p = plan_scheduler(
        &s_utc,
        &k,
        utc("2031-12-24T00:00:00Z"),
        utc("2031-12-25T00:30:00Z"),
    )
    .unwrap();
    assert!(p.cancelled.is_some() && p.create.is_none());
}

/// A range includes both ends and is evaluated in local days across the spring change: the
/// 02:30 fire of the change day (03:30 CEST, 01:30 UTC) is in the range, the next day's is not.
#[test]
fn a_range_covers_both_ends_across_the_spring_change() {
    let s = spec("30 2 * * *", 60, "Europe/Berlin");
    let k = skips(&[range("2031-03-29", "2031-03-30")]);
    let p = plan_scheduler(
        &s,
        &k,
        utc("2031-03-27T00:00:00Z"),
        utc("2031-03-28T12:00:00Z"),
    )
    .unwrap();
    let got: Vec<_> = p
        .upcoming
        .iter()
        .map(|(f, why)| (f.to_rfc3339(), why.is_some()))
        .collect();
    assert_eq!(
        got[..3],
        [
            ("2031-03-29T01:30:00+00:00".to_owned(), true),
            ("2031-03-30T01:30:00+00:00".to_owned(), true),
            ("2031-03-31T00:30:00+00:00".to_owned(), false),
        ]
    );
    assert_eq!(p.next, Some(utc("2031-03-31T00:30:00Z")));
    assert_eq!(
        p.upcoming[0].1.as_deref(),
        Some("2031-03-29 to 2031-03-30 (spec.skipDates)"),
        "without a reason, the entry itself is shown"
    );
    // The fall-back day in New York: the repeated hour fires once, and the date skips it.
    let ny = spec("30 1 * * *", 30, "America/New_York");
    let k = skips(&[day("2031-11-02", None)]);
    let p = plan_scheduler(
        &ny,
        &k,
        utc("2031-11-01T12:00:00Z"),
        utc("2031-11-02T05:30:00Z"),
    )
    .unwrap();
    assert_eq!(p.cancelled.map(|c| c.0), Some(utc("2031-11-02T05:30:00Z")));
    assert_eq!(p.next, Some(utc("2031-11-03T06:30:00Z")));
}

/// A `fire` entry cancels exactly one occurrence of a sub-daily schedule, whatever offset it is
/// written with; the fires around it are booked.
#[test]
fn a_fire_entry_cancels_one_occurrence() {
    let s = spec("0 * * * *", 60, "Europe/Berlin");
    let k = skips(&[fire("2031-01-10T09:00:00+01:00")]);
    let p = plan_scheduler(
        &s,
        &k,
        utc("2031-01-10T06:30:00Z"),
        utc("2031-01-10T07:00:00Z"),
    )
    .unwrap();
    assert_eq!(p.create, Some(utc("2031-01-10T07:00:00Z")));
    assert_eq!(p.next, Some(utc("2031-01-10T09:00:00Z")));
    assert_eq!(p.wake, Some(utc("2031-01-10T08:00:00Z")));
    let p = plan_scheduler(
        &s,
        &k,
        utc("2031-01-10T07:00:00Z"),
        utc("2031-01-10T08:00:00Z"),
    )
    .unwrap();
    assert_eq!(p.create, None);
    assert_eq!(
        p.cancelled.map(|c| c.1),
        Some("the fire at 2031-01-10T08:00:00Z (spec.skipDates)".into())
    );
    let p = plan_scheduler(
        &s,
        &k,
        utc("2031-01-10T08:00:00Z"),
        utc("2031-01-10T09:00:00Z"),
    )
    .unwrap();
    assert_eq!(p.create, Some(utc("2031-01-10T09:00:00Z")));
}

/// A fire skipped while the controller was down is still a skip, never a missed fire.
#[test]
fn a_skipped_fire_found_late_is_not_missed() {
    let mut s = spec("0 8 * * *", 30, "UTC");
    s.starting_deadline_seconds = Some(60);
    let k = skips(&[day("2031-01-10", None)]);
    let p = plan_scheduler(
        &s,
        &k,
        utc("2031-01-09T08:00:00Z"),
        utc("2031-01-10T12:00:00Z"),
    )
    .unwrap();
    assert_eq!(p.skipped, None);
    assert_eq!(p.cancelled.map(|c| c.0), Some(utc("2031-01-10T08:00:00Z")));
}

/// Suspended: nothing is created and nothing is next; the last fire is held while it could
/// still be booked (woken at the instant it no longer can), then dropped as handled. Resuming
/// within the deadline books it; resuming beyond it books nothing.
#[test]
fn suspend_stops_fires_and_resume_honours_only_the_deadline() {
    let none = Skips::default();
    let mut s = spec("*/10 * * * *", 5, "UTC");
    s.starting_deadline_seconds = Some(120);
    s.suspend = Some(true);
    let handled = utc("2031-01-10T08:00:00Z");
    // Suspended at 08:10:30: the 08:10 fire is held, not created, and woken at its deadline.
    let p = plan_scheduler(&s, &none, handled, utc("2031-01-10T08:10:30Z")).unwrap();
    assert!(p.suspended);
    assert_eq!((p.create, p.skipped, p.next), (None, None, None));
    assert!(p.upcoming.is_empty());
    assert_eq!(p.wake, Some(utc("2031-01-10T08:12:01Z")));
    // Resumed within the deadline: the held fire is booked.
    let mut resumed = s.clone();
    resumed.suspend = Some(false);
    let p = plan_scheduler(&resumed, &none, handled, utc("2031-01-10T08:11:30Z")).unwrap();
    assert_eq!(p.create, Some(utc("2031-01-10T08:10:00Z")));
    assert_eq!(p.next, Some(utc("2031-01-10T08:20:00Z")));
    // Still suspended past the deadline: the fire is handled, as a suspended one (no warning).
    let p = plan_scheduler(&s, &none, handled, utc("2031-01-10T08:12:01Z")).unwrap();
    assert!(p.suspended);
    assert_eq!(p.skipped, Some(utc("2031-01-10T08:10:00Z")));
    assert_eq!(p.create, None);
    assert_eq!(p.wake, Some(utc("2031-01-10T08:20:00Z")));
    // Resumed at 08:45 after that: only the 08:40 fire is considered — it is within the
    // deadline and booked; the 08:20 and 08:30 fires are never back-filled.
    let p = plan_scheduler(
        &resumed,
        &none,
        utc("2031-01-10T08:10:00Z"),
        utc("2031-01-10T08:41:00Z"),
    )
    .unwrap();
    assert_eq!(p.create, Some(utc("2031-01-10T08:40:00Z")));
    // Resumed beyond the deadline of the last fire: nothing is created.
    let p = plan_scheduler(
        &resumed,
        &none,
        utc("2031-01-10T08:10:00Z"),
        utc("2031-01-10T08:44:00Z"),
    )
    .unwrap();
    assert_eq!(p.create, None);
    assert_eq!(p.skipped, Some(utc("2031-01-10T08:40:00Z")));
    // Without a deadline, a held fire is bookable until its slot ends.
    s.starting_deadline_seconds = None;
    let p = plan_scheduler(&s, &none, handled, utc("2031-01-10T08:11:00Z")).unwrap();
    assert_eq!(p.wake, Some(utc("2031-01-10T08:15:01Z")));
}

fn denied_fields(outcome: booking_shared::validation::Outcome) -> Vec<(String, String)> {
    outcome
        .expect_err("expected a denial")
        .0
        .into_iter()
        .map(|v| (v.field, v.message))
        .collect()
}

#[test]
fn bad_skip_dates_and_calendars_are_denied_by_field() {
    let now = utc("2031-01-01T00:00:00Z");
    let policy = Policy::default();
    let with = |entries: Vec<SkipDate>| BookingSchedulerSpec {
        skip_dates: entries,
        ..spec("0 8 * * *", 30, "Europe/Berlin")
    };
    let cases: Vec<(&str, Vec<SkipDate>, &str, &[&str])> = vec![
        (
            "malformed date",
            vec![day("2031-02-30", None)],
            "spec.skipDates[0].date",
            &["2031-02-30", "YYYY-MM-DD"],
        ),
        (
            "date without zero padding",
            vec![day("2031-2-3", None)],
            "spec.skipDates[0].date",
            &["YYYY-MM-DD"],
        ),
        (
            "from after to",
            vec![day("2031-05-01", None), range("2031-12-31", "2031-12-24")],
            "spec.skipDates[1].from",
            &["after", "swap"],
        ),
        (
            "several forms",
            vec![SkipDate {
                date: Some("2031-12-25".into()),
                fire: Some("2031-12-25T08:00:00+01:00".into()),
                ..Default::default()
            }],
            "spec.skipDates[0]",
            &["exactly one", "date and fire"],
        ),
        (
            "no form",
            vec![SkipDate {
                reason: Some("nothing".into()),
                ..Default::default()
            }],
            "spec.skipDates[0]",
            &["none of them", "set one of them"],
        ),
        (
            "range without its end",
            vec![SkipDate {
                from: Some("2031-12-24".into()),
                ..Default::default()
            }],
            "spec.skipDates[0].to",
            &["missing"],
        ),
        (
            "bad fire",
            vec![fire("2031-12-25 08:00")],
            "spec.skipDates[0].fire",
            &["RFC 3339"],
        ),
        (
            "a fire that is no fire time",
            vec![fire("2031-12-25T08:05:00+01:00")],
            "spec.skipDates[0].fire",
            &["not a fire time", "2031-12-25T07:00:00Z"],
        ),
        (
            "control character in reason",
            vec![day("2031-12-25", Some("Christ\nmas"))],
            "spec.skipDates[0].reason",
            &["control character"],
        ),
        (
            "reason too long",
            vec![day("2031-12-25", Some(&"x".repeat(129)))],
            "spec.skipDates[0].reason",
            &["longer than 128"],
        ),
        (
            "too many entries",
            (0..101).map(|_| day("2031-12-25", None)).collect(),
            "spec.skipDates",
            &["101 entries", "100"],
        ),
    ];
    for (what, entries, field, words) in cases {
        let denials = denied_fields(validate_booking_scheduler(&with(entries), &policy, now));
        let (_, message) = denials
            .iter()
            .find(|(f, _)| f == field)
            .unwrap_or_else(|| panic!("{what}: no denial of {field}: {denials:?}"));
        for w in words {
            assert!(message.contains(w), "{what}: {message}");
        }
    }
    // A valid mix is allowed, and a past fire entry is not checked against the schedule.
    let ok = with(vec![
        day("2031-12-25", Some("Christmas")),
        range("2031-12-27", "2031-12-31"),
        fire("2031-12-22T08:00:00+01:00"),
        fire("2030-06-01T08:03:00Z"),
    ]);
    assert!(validate_booking_scheduler(&ok, &policy, now).is_ok());
    // Calendar names.
    let refs = |names: &[&str]| BookingSchedulerSpec {
        calendars: names
            .iter()
            .map(|n| CalendarRef { name: (*n).into() })
            .collect(),
        ..spec("0 8 * * *", 30, "UTC")
    };
    let d = denied_fields(validate_booking_scheduler(
        &refs(&["Holidays_DE"]),
        &policy,
        now,
    ));
    assert_eq!(d[0].0, "spec.calendars[0].name");
    assert!(d[0].1.contains("Holidays_DE"), "{}", d[0].1);
    let d = denied_fields(validate_booking_scheduler(
        &refs(&["de", "de"]),
        &policy,
        now,
    ));
    assert_eq!(d[0].0, "spec.calendars[1].name");
    let eleven: Vec<String> = (0..11).map(|i| format!("c{i}")).collect();
    let eleven: Vec<&str> = eleven.iter().map(String::as_str).collect();
    let d = denied_fields(validate_booking_scheduler(&refs(&eleven), &policy, now));
    assert_eq!(d[0].0, "spec.calendars");
    assert!(validate_booking_scheduler(&refs(&["holidays.de", "plant-1"]), &policy, now).is_ok());
    // A calendar: the same entries, up to 500.
    let cal = |entries: Vec<SkipDate>| BookingCalendarSpec {
        skip_dates: entries,
    };
    assert!(validate_booking_calendar(&cal(vec![day("2031-12-25", None)])).is_ok());
    let d = denied_fields(validate_booking_calendar(&cal(vec![range(
        "2031-12-26",
        "2031-12-25",
    )])));
    assert_eq!(d[0].0, "spec.skipDates[0].from");
    let d = denied_fields(validate_booking_calendar(&cal((0..501)
        .map(|_| day("2031-12-25", None))
        .collect())));
    assert_eq!(d[0].0, "spec.skipDates");
}
