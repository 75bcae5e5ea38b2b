//! Table tests of cron fire times in IANA zones, across DST changes, month ends and macros.

use booking_shared::schedule::{CronSchedule, ScheduleError};
use chrono::{DateTime, Duration, Utc};

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn fires(expr: &str, zone: &str, after: &str, n: usize) -> Vec<String> {
    let s = CronSchedule::parse_in(expr, Some(zone)).unwrap_or_else(|e| panic!("{expr}: {e}"));
    s.fires_after(utc(after))
        .take(n)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .collect()
}

#[test]
fn fire_times() {
    let cases: &[(&str, &str, &str, &[&str])] = &[
        // Plain UTC schedules.
        (
            "*/10 * * * *",
            "UTC",
            "2026-11-30T10:05:00Z",
            &["2026-11-30T10:10:00Z", "2026-11-30T10:20:00Z"],
        ),
        // Strictly after: a fire time itself is not returned again.
        (
            "0 * * * *",
            "UTC",
            "2026-11-30T10:00:00Z",
            &["2026-11-30T11:00:00Z"],
        ),
        // Macros.
        (
            "@hourly",
            "UTC",
            "2026-11-30T10:15:00Z",
            &["2026-11-30T11:00:00Z"],
        ),
        (
            "@daily",
            "UTC",
            "2026-11-30T10:15:00Z",
            &["2026-12-01T00:00:00Z"],
        ),
        (
            "@midnight",
            "UTC",
            "2026-11-30T10:15:00Z",
            &["2026-12-01T00:00:00Z"],
        ),
        (
            "@weekly",
            "UTC",
            "2026-11-30T10:15:00Z",
            &["2026-12-06T00:00:00Z"],
        ),
        (
            "@monthly",
            "UTC",
            "2026-11-30T10:15:00Z",
            &["2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"],
        ),
        (
            "@yearly",
            "UTC",
            "2026-11-30T10:15:00Z",
            &["2027-01-01T00:00:00Z"],
        ),
        (
            "@annually",
            "UTC",
            "2026-11-30T10:15:00Z",
            &["2027-01-01T00:00:00Z"],
        ),
        // Month ends: the 31st skips short months; 29 February waits for a leap year.
        (
            "0 0 31 * *",
            "UTC",
            "2026-01-31T00:00:00Z",
            &["2026-03-31T00:00:00Z", "2026-05-31T00:00:00Z"],
        ),
        (
            "0 0 29 2 *",
            "UTC",
            "2026-01-01T00:00:00Z",
            &["2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"],
        ),
        (
            "59 23 30 11 *",
            "UTC",
            "2026-11-30T23:58:00Z",
            &["2026-11-30T23:59:00Z", "2027-11-30T23:59:00Z"],
        ),
        // Day of week: 0 and 7 are Sunday; ranges; names; steps.
        (
            "0 9 * * 1-5",
            "UTC",
            "2026-12-04T10:00:00Z",
            &["2026-12-07T09:00:00Z"],
        ),
        (
            "0 9 * * 0",
            "UTC",
            "2026-11-30T10:00:00Z",
            &["2026-12-06T09:00:00Z"],
        ),
        (
            "0 9 * * 7",
            "UTC",
            "2026-11-30T10:00:00Z",
            &["2026-12-06T09:00:00Z"],
        ),
        (
            "0 9 * * 5-7",
            "UTC",
            "2026-11-30T10:00:00Z",
            &[
                "2026-12-04T09:00:00Z",
                "2026-12-05T09:00:00Z",
                "2026-12-06T09:00:00Z",
                "2026-12-11T09:00:00Z",
            ],
        ),
        (
            "0 9 * * sat,SUN",
            "UTC",
            "2026-11-30T10:00:00Z",
            &["2026-12-05T09:00:00Z", "2026-12-06T09:00:00Z"],
        ),
        (
            "0 9 * * */3",
            "UTC",
            "2026-11-30T10:00:00Z",
            &[
                "2026-12-02T09:00:00Z",
                "2026-12-05T09:00:00Z",
                "2026-12-06T09:00:00Z",
            ],
        ),
        (
            "0 9 * * 4/2",
            "UTC",
            "2026-11-30T10:00:00Z",
            &[
                "2026-12-03T09:00:00Z",
                "2026-12-05T09:00:00Z",
                "2026-12-10T09:00:00Z",
            ],
        ),
        // Day-of-month OR day-of-week when both are restricted (cron(5)): the 13th or a Friday.
        (
            "0 0 13 * 5",
            "UTC",
            "2026-11-30T00:00:00Z",
            &[
                "2026-12-04T00:00:00Z",
                "2026-12-11T00:00:00Z",
                "2026-12-13T00:00:00Z",
                "2026-12-18T00:00:00Z",
            ],
        ),
        // ... but AND when one of them starts with '*'.
        (
            "0 0 */2 * 5",
            "UTC",
            "2026-11-30T00:00:00Z",
            &["2026-12-11T00:00:00Z", "2026-12-25T00:00:00Z"],
        ),
        // Fixed zones away from UTC.
        (
            "0 8 * * *",
            "Asia/Kolkata",
            "2026-11-30T00:00:00Z",
            &["2026-11-30T02:30:00Z", "2026-12-01T02:30:00Z"],
        ),
        (
            "0 8 * * *",
            "Europe/Berlin",
            "2026-11-30T00:00:00Z",
            &["2026-11-30T07:00:00Z"],
        ),
        // Europe/Berlin, spring forward on 2026-03-29 (02:00 CET -> 03:00 CEST): the skipped
        // 02:30 fires at 03:30 CEST (01:30Z), then daily at 02:30 CEST (00:30Z).
        (
            "30 2 * * *",
            "Europe/Berlin",
            "2026-03-27T12:00:00Z",
            &[
                "2026-03-28T01:30:00Z",
                "2026-03-29T01:30:00Z",
                "2026-03-30T00:30:00Z",
            ],
        ),
        // Half-hourly through the gap: no duplicates, no missing instants.
        (
            "*/30 * * * *",
            "Europe/Berlin",
            "2026-03-29T00:00:00Z",
            &[
                "2026-03-29T00:30:00Z",
                "2026-03-29T01:00:00Z",
                "2026-03-29T01:30:00Z",
                "2026-03-29T02:00:00Z",
            ],
        ),
        // Europe/Berlin, fall back on 2026-10-25 (03:00 CEST -> 02:00 CET): 02:30 exists twice
        // and fires once, at the first occurrence (02:30 CEST = 00:30Z).
        (
            "30 2 * * *",
            "Europe/Berlin",
            "2026-10-24T12:00:00Z",
            &["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"],
        ),
        (
            "*/30 * * * *",
            "Europe/Berlin",
            "2026-10-25T00:00:00Z",
            &[
                "2026-10-25T00:30:00Z",
                "2026-10-25T02:00:00Z",
                "2026-10-25T02:30:00Z",
            ],
        ),
        // Starting inside the repeated hour (02:10 CET) does not fire the hour again.
        (
            "*/30 * * * *",
            "Europe/Berlin",
            "2026-10-25T01:10:00Z",
            &["2026-10-25T02:00:00Z"],
        ),
        // Starting just after a gap fire still sees the fires of skipped times shifted later.
        (
            "45 2 * * *",
            "Europe/Berlin",
            "2026-03-29T01:30:00Z",
            &["2026-03-29T01:45:00Z", "2026-03-30T00:45:00Z"],
        ),
        // America/New_York, spring forward on 2026-03-08 (02:00 EST -> 03:00 EDT).
        (
            "0 2 * * *",
            "America/New_York",
            "2026-03-07T12:00:00Z",
            &["2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z"],
        ),
        (
            "30 2 * * *",
            "America/New_York",
            "2026-03-07T12:00:00Z",
            &["2026-03-08T07:30:00Z", "2026-03-09T06:30:00Z"],
        ),
        // America/New_York, fall back on 2026-11-01 (02:00 EDT -> 01:00 EST): 01:30 twice, once.
        (
            "30 1 * * *",
            "America/New_York",
            "2026-10-31T12:00:00Z",
            &["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"],
        ),
        (
            "0 2 * * *",
            "America/New_York",
            "2026-10-31T12:00:00Z",
            &["2026-11-01T07:00:00Z", "2026-11-02T07:00:00Z"],
        ),
    ];
    for (expr, zone, after, want) in cases {
        assert_eq!(
            fires(expr, zone, after, want.len()),
            *want,
            "{expr:?} in {zone} after {after}"
        );
    }
}

#[test]
fn fires_are_strictly_increasing_through_a_year_of_dst() {
    for zone in [
        "Europe/Berlin",
        "America/New_York",
        "Australia/Lord_Howe",
        "UTC",
    ] {
        for expr in ["*/15 * * * *", "30 2 * * *", "0 1,3 * * *", "@hourly"] {
            let s = CronSchedule::parse_in(expr, Some(zone)).unwrap();
            let all: Vec<_> = s
                .fires_after(utc("2026-01-01T00:00:00Z"))
                .take_while(|t| *t < utc("2027-01-01T00:00:00Z"))
                .collect();
            assert!(all.windows(2).all(|w| w[0] < w[1]), "{expr} in {zone}");
            assert!(!all.is_empty());
        }
    }
}

#[test]
fn rejects_bad_expressions_and_zones() {
    let cases = [
        ("61 * * * *", "61 * * * *"),
        ("* * * *", "found 4"),
        ("* * * * * *", "found 6"),
        ("@reboot", "@reboot"),
        ("@every 5m", "unknown macro"),
        ("0 0 * * 8", "out of range 0-7"),
        ("0 0 * * FUNDAY", "not a day"),
        ("0 0 * * 5-1", "backwards"),
        ("0 0 * * */0", "positive"),
        ("0 25 * * *", "0 25 * * *"),
        ("0 0 32 * *", "0 0 32 * *"),
        ("0 0 * 13 *", "0 0 * 13 *"),
        ("", "found 0"),
    ];
    for (expr, needle) in cases {
        let err = CronSchedule::parse_in(expr, None).expect_err(expr);
        let msg = err.to_string();
        assert!(matches!(err, ScheduleError::Cron { .. }), "{expr}");
        assert!(msg.starts_with("spec.schedule: "), "{msg}");
        assert!(
            msg.contains(&format!("{expr:?}")),
            "quotes the expression: {msg}"
        );
        assert!(
            msg.contains(needle),
            "{expr}: {msg} should mention {needle}"
        );
        assert!(
            !msg.contains('^') && !msg.contains('\n'),
            "no parser internals: {msg}"
        );
    }
    let err = CronSchedule::parse_in("0 * * * *", Some("Mars/Olympus")).unwrap_err();
    assert!(matches!(err, ScheduleError::TimeZone { .. }));
    assert!(
        err.to_string().contains("spec.timeZone: \"Mars/Olympus\""),
        "{err}"
    );
    assert!(
        err.to_string().contains("Europe/Berlin"),
        "suggests a fix: {err}"
    );
}

#[test]
fn shortest_interval_between_fires() {
    let from = utc("2026-01-01T00:00:00Z");
    let year = Duration::days(366);
    let cases = [
        ("*/10 * * * *", "UTC", Duration::minutes(10)),
        ("0 9,17 * * *", "UTC", Duration::hours(8)),
        ("0 0 * * *", "UTC", Duration::hours(24)),
        ("@monthly", "UTC", Duration::days(28)),
        ("0 9 * * 1-5", "UTC", Duration::hours(24)),
        // A daily schedule is 23 h apart across the spring change.
        ("30 2 * * *", "Europe/Berlin", Duration::hours(23)),
        ("0 12 * * *", "America/New_York", Duration::hours(23)),
        // 01:00 CET to 04:00 CEST on the spring day is only 2 h.
        ("0 1,4 * * *", "Europe/Berlin", Duration::hours(2)),
    ];
    for (expr, zone, want) in cases {
        let s = CronSchedule::parse_in(expr, Some(zone)).unwrap();
        let (got, a, b) = s.shortest_interval(from, 20_000, year, None).unwrap();
        assert_eq!(got, want, "{expr} in {zone}: between {a} and {b}");
        assert_eq!(b - a, got);
    }
    // Early exit at the first interval shorter than the booking duration.
    let s = CronSchedule::parse_in("*/10 * * * *", None).unwrap();
    let (gap, a, _) = s
        .shortest_interval(from, 20_000, year, Some(Duration::minutes(15)))
        .unwrap();
    assert_eq!(gap, Duration::minutes(10));
    assert_eq!(a, utc("2026-01-01T00:10:00Z"));
    // A schedule that fires once in the window has no interval.
    let s = CronSchedule::parse_in("0 0 29 2 *", None).unwrap();
    assert!(s.shortest_interval(from, 100, year, None).is_none());
}

#[test]
fn last_fire_at_or_before() {
    let s = CronSchedule::parse_in("*/10 * * * *", None).unwrap();
    let at = utc("2026-11-30T10:25:00Z");
    assert_eq!(
        s.last_at_or_before(at, Duration::hours(1)),
        Some(utc("2026-11-30T10:20:00Z"))
    );
    assert_eq!(
        s.last_at_or_before(utc("2026-11-30T10:20:00Z"), Duration::hours(1)),
        Some(utc("2026-11-30T10:20:00Z"))
    );
    let s = CronSchedule::parse_in("@yearly", None).unwrap();
    assert_eq!(s.last_at_or_before(at, Duration::days(30)), None);
}
