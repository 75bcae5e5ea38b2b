//! Times, durations and zones as the user types them (pure; `now` is a parameter).
//!
//! - Durations: jiff's friendly form (`2h`, `90m`, `1h30m`, `1h 30m`, `-15m`) or ISO 8601
//!   (`PT2H`), read by [`parse_duration`].
//! - Zones: IANA names, read by the shared [`booking_shared::schedule::parse_time_zone`].
//! - Times ([`parse_time`]): RFC 3339 with an offset (read by the shared
//!   [`booking_shared::time::parse_rfc3339`], the rule the CRD applies), or a wall time in the
//!   zone: `2026-12-02 09:00[:ss]`, or `09:00[:ss]` for the next such time. A wall time that
//!   the zone skips (spring forward) or passes twice (fall back) is an error that says so.

use std::str::FromStr;

use booking_shared::schedule::parse_time_zone;
use booking_shared::time::parse_rfc3339;
use chrono::{DateTime, Duration, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;
use k8s_openapi::jiff::{Span, SpanRelativeTo};

use crate::error::{Error, Result};

/// Parses the duration of `flag`; `signed` admits a negative one. Days and weeks count 24 h and
/// 7 × 24 h (`2d` is `48h`); months and years, whose length varies, are refused. A zero duration
/// is refused, as is anything shorter than a second (bookings are written to the second).
pub fn parse_duration(flag: &str, value: &str, signed: bool) -> Result<Duration> {
    let hint = "write it like 2h, 90m or 1h30m (days: 2d)";
    let shorten = if signed { ", or -30m to shorten" } else { "" };
    let span = Span::from_str(value.trim()).map_err(|e| {
        Error::Usage(format!(
            "{flag} {value:?} is not a duration ({e}); {hint}{shorten}"
        ))
    })?;
    if span.get_years() != 0 || span.get_months() != 0 {
        return Err(Error::Usage(format!(
            "{flag} {value:?}: months and years have no fixed length; give days, hours or              minutes ({hint}{shorten})"
        )));
    }
    let too_long = || {
        Error::Usage(format!(
            "{flag} {value:?} is too long to be a booking's length; {hint}{shorten}"
        ))
    };
    let parsed = span
        .to_duration(SpanRelativeTo::days_are_24_hours())
        .map_err(|_| too_long())?;
    let d = Duration::try_seconds(parsed.as_secs())
        .and_then(|s| s.checked_add(&Duration::nanoseconds(i64::from(parsed.subsec_nanos()))))
        .ok_or_else(too_long)?;
    if d.is_zero() || d.num_seconds() == 0 {
        return Err(Error::Usage(format!(
            "{flag} {value:?} is shorter than a second; {hint}"
        )));
    }
    if d < Duration::zero() && !signed {
        return Err(Error::Usage(format!(
            "{flag} {value:?} is negative; give a positive length, {hint}"
        )));
    }
    Ok(d)
}

/// The latest instant a booking may reach: the end of year 9999, the last RFC 3339 can write.
pub fn latest() -> DateTime<Utc> {
    NaiveDate::from_ymd_opt(9999, 12, 31)
        .and_then(|d| d.and_hms_opt(23, 59, 59))
        .unwrap_or_default()
        .and_utc()
}

/// `t + d`, or `None` past [`latest`] (where RFC 3339 cannot write the time).
pub fn checked_add(t: DateTime<Utc>, d: Duration) -> Option<DateTime<Utc>> {
    t.checked_add_signed(d).filter(|t| *t <= latest())
}

/// A duration as the friendly form reads it: `2h`, `1h 30m`, `45m`, `1h 0m 30s`.
pub fn format_duration(d: Duration) -> String {
    let sign = if d < Duration::zero() { "-" } else { "" };
    let s = d.num_seconds().abs();
    let (h, m, sec) = (s / 3600, s / 60 % 60, s % 60);
    let mut parts = Vec::new();
    if h > 0 {
        parts.push(format!("{h}h"));
    }
    if m > 0 || (h > 0 && sec > 0) {
        parts.push(format!("{m}m"));
    }
    if sec > 0 || parts.is_empty() {
        parts.push(format!("{sec}s"));
    }
    format!("{sign}{}", parts.join(" "))
}

/// Parses the IANA zone of `flag`.
pub fn parse_zone(flag: &str, value: &str) -> Result<Tz> {
    parse_time_zone(value).map_err(|_| {
        Error::Usage(format!(
            "{flag} {value:?} is not an IANA time zone name; use a name such as UTC, \
             Europe/Berlin or America/New_York"
        ))
    })
}

/// Parses a local date of `flag` (`YYYY-MM-DD`).
pub fn parse_date(flag: &str, value: &str) -> Result<NaiveDate> {
    NaiveDate::parse_from_str(value.trim(), "%Y-%m-%d").map_err(|e| {
        Error::Usage(format!(
            "{flag} {value:?} is not a date ({e}); write it like 2026-12-02"
        ))
    })
}

/// Parses the time of `flag`: RFC 3339, or a wall time in `tz` (`2026-12-02 09:00`, or `09:00`
/// for the first such time after `now`).
pub fn parse_time(flag: &str, value: &str, tz: Tz, now: DateTime<Utc>) -> Result<DateTime<Utc>> {
    let v = value.trim();
    let forms = "write it as RFC 3339 (2026-12-02T09:00:00Z, 2026-12-02T09:00:00+01:00), or as a \
                 wall time in --tz: \"2026-12-02 09:00\", or 09:00 for the next 09:00";
    if v.len() > 10 && matches!(v.as_bytes()[10], b'T' | b't') {
        return parse_rfc3339(flag, v).map_err(|e| Error::Usage(e.to_string()));
    }
    if let Some(local) = ["%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(v, f).ok())
    {
        return local_instant(flag, value, local, tz);
    }
    if let Some(time) = ["%H:%M", "%H:%M:%S"]
        .iter()
        .find_map(|f| NaiveTime::parse_from_str(v, f).ok())
    {
        let today = now.with_timezone(&tz).date_naive();
        let local = today.and_time(time);
        // Today's, unless it has passed (or does not exist today): then tomorrow's.
        return match local_instant(flag, value, local, tz) {
            Ok(t) if t > now => Ok(t),
            _ => local_instant(flag, value, local + Duration::days(1), tz),
        };
    }
    Err(Error::Usage(format!(
        "{flag} {value:?} is not a time; {forms}"
    )))
}

/// The instant of the wall time `local` in `tz`, or an error naming the DST gap or overlap.
pub fn local_instant(
    flag: &str,
    value: &str,
    local: NaiveDateTime,
    tz: Tz,
) -> Result<DateTime<Utc>> {
    match tz.from_local_datetime(&local) {
        LocalResult::Single(t) => Ok(t.with_timezone(&Utc)),
        LocalResult::Ambiguous(a, b) => Err(Error::Usage(format!(
            "{flag} {value:?}: {} happens twice in {tz} (the clocks go back), at {} and at {}; \
             give the one you mean with its offset, e.g. {}",
            local.format("%Y-%m-%d %H:%M"),
            a.format("%:z"),
            b.format("%:z"),
            a.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        ))),
        LocalResult::None => Err(Error::Usage(format!(
            "{flag} {value:?}: {} does not exist in {tz} (the clocks jump forward over it); \
             pick a time outside the skipped hour or give an RFC 3339 time with an offset",
            local.format("%Y-%m-%d %H:%M")
        ))),
    }
}

/// The first instant of the local date `day` in `tz` (midnight, or the first time after a
/// transition at midnight).
pub fn start_of_day(day: NaiveDate, tz: Tz) -> DateTime<Utc> {
    let midnight = day.and_hms_opt(0, 0, 0).unwrap_or_default();
    // Zones whose clocks skip midnight start the day at the first minute that exists.
    (0..=24 * 60)
        .find_map(|m| {
            tz.from_local_datetime(&(midnight + Duration::minutes(m)))
                .earliest()
        })
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|| midnight.and_utc())
}

/// An instant as RFC 3339 in `tz` to the second: `2026-12-02T09:00:00+01:00`, or with `Z` in
/// UTC.
pub fn rfc3339_in(t: DateTime<Utc>, tz: Tz) -> String {
    t.with_timezone(&tz)
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// An instant as a short wall time in `tz`: `Wed 2026-12-02 09:00`, with the offset when the
/// zone passes that wall time twice (`Sun 2026-10-25 02:30 +02:00`).
pub fn wall_in(t: DateTime<Utc>, tz: Tz) -> String {
    let local = t.with_timezone(&tz);
    let twice = matches!(
        tz.from_local_datetime(&local.naive_local()),
        LocalResult::Ambiguous(..)
    );
    let format = if twice {
        "%a %Y-%m-%d %H:%M %:z"
    } else {
        "%a %Y-%m-%d %H:%M"
    };
    local.format(format).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn berlin() -> Tz {
        parse_zone("--tz", "Europe/Berlin").unwrap()
    }

    #[test]
    fn durations_in_the_friendly_and_iso_forms() {
        for (text, minutes) in [
            ("2h", 120),
            ("90m", 90),
            ("1h30m", 90),
            ("1h 30m", 90),
            ("PT45M", 45),
            ("2 hours", 120),
        ] {
            assert_eq!(
                parse_duration("--for", text, false).unwrap(),
                Duration::minutes(minutes),
                "{text}"
            );
        }
        assert_eq!(
            parse_duration("--by", "-15m", true).unwrap(),
            Duration::minutes(-15)
        );
    }

    #[test]
    fn bad_durations_name_the_flag_the_value_and_the_form() {
        for (flag, text, signed, want) in [
            ("--for", "2x", false, "--for \"2x\" is not a duration"),
            ("--for", "", false, "is not a duration"),
            ("--for", "0m", false, "shorter than a second"),
            ("--for", "-1h", false, "is negative"),
            ("--by", "soon", true, "or -30m to shorten"),
        ] {
            let e = parse_duration(flag, text, signed).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
            assert!(e.contains("1h30m"), "{text}: {e}");
        }
    }

    #[test]
    fn days_and_weeks_are_24_hours_and_no_length_panics_or_leaks_the_parser() {
        assert_eq!(
            parse_duration("--for", "2d", false).unwrap(),
            Duration::hours(48)
        );
        assert_eq!(
            parse_duration("--for", "1w 1d", false).unwrap(),
            Duration::hours(192)
        );
        let e = parse_duration("--for", "1 month", false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--for \"1 month\": months and years have no fixed length"),
            "{e}"
        );
        // Beyond chrono's range (jiff reads up to i64 seconds), and beyond jiff's own.
        for huge in ["10000000000000000s", "99999999999999999999h"] {
            let e = parse_duration("--for", huge, false)
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("--for {huge:?}")), "{e}");
            assert!(!e.contains("jiff::"), "{e}");
        }
        // A length jiff and chrono hold, ending in a year RFC 3339 cannot write.
        let long = parse_duration("--for", "100000000h", false).unwrap();
        let start = utc("2026-12-01T10:00:00Z");
        assert_eq!(checked_add(start, long), None);
        assert_eq!(
            checked_add(start, Duration::hours(1)),
            Some(utc("2026-12-01T11:00:00Z"))
        );
        assert_eq!(checked_add(start, Duration::days(3_000_000)), None);
        assert_eq!(checked_add(start, Duration::MAX), None);
    }

    #[test]
    fn durations_print_in_the_friendly_form() {
        assert_eq!(format_duration(Duration::minutes(120)), "2h");
        assert_eq!(format_duration(Duration::minutes(90)), "1h 30m");
        assert_eq!(format_duration(Duration::minutes(-15)), "-15m");
        assert_eq!(format_duration(Duration::seconds(3630)), "1h 0m 30s");
    }

    #[test]
    fn times_in_rfc3339_and_wall_times_in_the_zone() {
        let now = utc("2026-12-01T10:00:00Z");
        let tz = berlin();
        let cases = [
            ("2026-12-02T09:00:00Z", "2026-12-02T09:00:00Z"),
            ("2026-12-02T09:00:00+01:00", "2026-12-02T08:00:00Z"),
            ("2026-12-02 09:00", "2026-12-02T08:00:00Z"),
            ("2026-12-02 09:00:30", "2026-12-02T08:00:30Z"),
            // 12:00 in Berlin (11:00Z) is still ahead today; 09:00 has passed: tomorrow.
            ("12:00", "2026-12-01T11:00:00Z"),
            ("09:00", "2026-12-02T08:00:00Z"),
        ];
        for (text, want) in cases {
            assert_eq!(
                parse_time("--at", text, tz, now).unwrap(),
                utc(want),
                "{text}"
            );
        }
    }

    #[test]
    fn wall_times_that_dst_skips_or_repeats_are_errors_that_say_so() {
        let tz = berlin();
        let now = utc("2027-03-01T00:00:00Z");
        let skipped = parse_time("--at", "2027-03-28 02:30", tz, now)
            .unwrap_err()
            .to_string();
        assert!(
            skipped.contains("2027-03-28 02:30 does not exist in Europe/Berlin"),
            "{skipped}"
        );
        let twice = parse_time("--at", "2026-10-25 02:30", tz, now)
            .unwrap_err()
            .to_string();
        assert!(
            twice.contains("happens twice in Europe/Berlin")
                && twice.contains("+02:00")
                && twice.contains("+01:00")
                && twice.contains("2026-10-25T02:30:00+02:00"),
            "{twice}"
        );
        // A bare 02:30 on the morning it is skipped is the next day's.
        let next = parse_time("--at", "02:30", tz, utc("2027-03-27T23:00:00Z")).unwrap();
        assert_eq!(next, utc("2027-03-29T00:30:00Z"));
    }

    #[test]
    fn bad_times_and_zones_name_the_flag_and_the_forms() {
        let now = utc("2026-12-01T10:00:00Z");
        let e = parse_time("--at", "tomorrow", Tz::UTC, now)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--at \"tomorrow\" is not a time") && e.contains("2026-12-02 09:00"),
            "{e}"
        );
        let e = parse_time("--at", "2026-12-02T09:00:00", Tz::UTC, now)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--at") && e.contains("offset"), "{e}");
        let e = parse_zone("--tz", "Mars/Olympus").unwrap_err().to_string();
        assert!(
            e.contains("--tz \"Mars/Olympus\" is not an IANA time zone name"),
            "{e}"
        );
        let e = parse_date("--from", "12/02").unwrap_err().to_string();
        assert!(e.contains("--from \"12/02\" is not a date"), "{e}");
    }

    #[test]
    fn days_start_at_local_midnight() {
        let day = NaiveDate::from_ymd_opt(2026, 12, 2).unwrap();
        assert_eq!(start_of_day(day, berlin()), utc("2026-12-01T23:00:00Z"));
        // America/Santiago springs forward at midnight: the day starts at 01:00.
        let santiago = parse_zone("--tz", "America/Santiago").unwrap();
        let day = NaiveDate::from_ymd_opt(2026, 9, 6).unwrap();
        assert_eq!(start_of_day(day, santiago), utc("2026-09-06T04:00:00Z"));
    }
}
