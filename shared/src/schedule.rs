//! Cron schedules in an IANA time zone.
//!
//! # Expressions
//!
//! Standard 5-field cron — `minute hour day-of-month month day-of-week` — with `*`, lists, ranges,
//! steps and month/day names, plus the macros `@hourly`, `@daily` (`@midnight`), `@weekly`,
//! `@monthly` and `@yearly` (`@annually`). Day-of-week is `0`–`7` with both `0` and `7` meaning
//! Sunday, as in cron(5). When both day-of-month and day-of-week are restricted (neither starts
//! with `*`), a day matches if **either** matches, as in cron(5) and Kubernetes CronJobs. The
//! matching itself is done by the `cron` crate; this module translates the standard syntax to it.
//!
//! # Time zones and daylight-saving time
//!
//! A schedule matches *local* wall-clock times of its zone. Where a change of offset makes a local
//! time not exist or exist twice, these rules apply (they are those of Kubernetes CronJobs and of
//! Go's `time.Date`, which normalises a skipped time forward):
//!
//! - **Skipped local time** (spring forward, e.g. 02:30 on the last Sunday of March in
//!   Europe/Berlin): the fire happens at the instant the local time would have had with the
//!   offset in force before the change — 02:30 CET becomes 03:30 CEST. A fire that lands on an
//!   instant that is already a fire time is not repeated.
//! - **Repeated local time** (fall back, e.g. 02:30 on the last Sunday of October): the schedule
//!   fires once, at the first occurrence (02:30 CEST); the second pass through the hour does not
//!   fire again.
//!
//! Fire times are therefore strictly increasing instants, and the interval between two
//! consecutive fires may be shorter or longer than in local time around a change (a daily 02:30
//! schedule is 23 h apart across the spring change).

use std::{cmp::Reverse, collections::BinaryHeap, str::FromStr};

use chrono::{DateTime, Duration, LocalResult, NaiveDateTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;

/// Why a schedule or time zone is rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The cron expression does not parse.
    #[error(
        "spec.schedule: {expr:?} is not a valid cron schedule: {reason}; use 5 fields (minute hour day-of-month month day-of-week), e.g. \"0 8 * * 1-5\", or one of @hourly, @daily, @weekly, @monthly, @yearly"
    )]
    Cron {
        /// The expression as written.
        expr: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The time zone is not an IANA zone name.
    #[error(
        "spec.timeZone: {zone:?} is not an IANA time zone name; use a name such as UTC, Europe/Berlin or America/New_York"
    )]
    TimeZone {
        /// The zone as written.
        zone: String,
    },
}

/// Parses an IANA time zone name (`UTC`, `Europe/Berlin`, …).
pub fn parse_time_zone(zone: &str) -> Result<Tz, ScheduleError> {
    Tz::from_str(zone).map_err(|_| ScheduleError::TimeZone {
        zone: zone.to_owned(),
    })
}

/// A parsed cron schedule bound to a time zone.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    expr: String,
    tz: Tz,
    /// Matched if any part matches (two parts for cron(5)'s day-of-month OR day-of-week rule).
    parts: Vec<cron::Schedule>,
}

const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

impl CronSchedule {
    /// Parses a 5-field expression or macro, to be evaluated in `tz`.
    pub fn parse(expr: &str, tz: Tz) -> Result<Self, ScheduleError> {
        let bad = |reason: String| ScheduleError::Cron {
            expr: expr.to_owned(),
            reason,
        };
        let trimmed = expr.trim();
        let expanded = match trimmed.to_ascii_lowercase().as_str() {
            "@hourly" => "0 * * * *",
            "@daily" | "@midnight" => "0 0 * * *",
            "@weekly" => "0 0 * * 0",
            "@monthly" => "0 0 1 * *",
            "@yearly" | "@annually" => "0 0 1 1 *",
            m if m.starts_with('@') => {
                return Err(bad(format!(
                    "unknown macro {trimmed:?} (@reboot and @every are not schedules of bookings)"
                )));
            }
            _ => trimmed,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let [minute, hour, dom, month, dow] = fields[..] else {
            return Err(bad(format!(
                "expected 5 fields (minute hour day-of-month month day-of-week), found {}",
                fields.len()
            )));
        };
        let dow_names = translate_day_of_week(dow).map_err(|r| bad(format!("day-of-week: {r}")))?;
        let compile = |dom: &str, dow: &str| {
            cron::Schedule::from_str(&format!("0 {minute} {hour} {dom} {month} {dow}"))
                .map_err(|e| bad(describe_cron_error(&e.to_string())))
        };
        let either_star = dom.starts_with('*') || dow.starts_with('*');
        let parts = if either_star {
            vec![compile(dom, &dow_names)?]
        } else {
            vec![compile(dom, "*")?, compile("*", &dow_names)?]
        };
        Ok(Self {
            expr: expr.to_owned(),
            tz,
            parts,
        })
    }

    /// Parses `expr` in the zone named `zone` (`None` means UTC).
    pub fn parse_in(expr: &str, zone: Option<&str>) -> Result<Self, ScheduleError> {
        let tz = match zone {
            Some(z) => parse_time_zone(z)?,
            None => Tz::UTC,
        };
        Self::parse(expr, tz)
    }

    /// The expression as written.
    pub fn expression(&self) -> &str {
        &self.expr
    }

    /// The schedule's time zone.
    pub fn time_zone(&self) -> Tz {
        self.tz
    }

    /// The first fire time strictly after `after`.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.fires_after(after).next()
    }

    /// Fire times strictly after `after`, in increasing order.
    pub fn fires_after(&self, after: DateTime<Utc>) -> Fires<'_> {
        Fires::new(self, after)
    }

    /// The most recent fire time at or before `at`, looking back at most `horizon`.
    pub fn last_at_or_before(&self, at: DateTime<Utc>, horizon: Duration) -> Option<DateTime<Utc>> {
        self.fires_after(at - horizon)
            .take_while(|f| *f <= at)
            .last()
    }

    /// The shortest interval between consecutive fires after `from`, looking at up to
    /// `max_fires` fires and no further than `horizon` ahead, or stopping early at the first
    /// interval shorter than `stop_below`. Returns the interval and the two fire times.
    ///
    /// Used to reject schedulers whose bookings would overlap each other: pass the booking
    /// duration as `stop_below`.
    pub fn shortest_interval(
        &self,
        from: DateTime<Utc>,
        max_fires: usize,
        horizon: Duration,
        stop_below: Option<Duration>,
    ) -> Option<(Duration, DateTime<Utc>, DateTime<Utc>)> {
        let end = from + horizon;
        let mut best: Option<(Duration, DateTime<Utc>, DateTime<Utc>)> = None;
        let mut prev: Option<DateTime<Utc>> = None;
        for fire in self.fires_after(from).take(max_fires) {
            if fire > end {
                break;
            }
            if let Some(p) = prev {
                let gap = fire - p;
                if best.is_none_or(|(b, _, _)| gap < b) {
                    best = Some((gap, p, fire));
                    if stop_below.is_some_and(|limit| gap < limit) {
                        break;
                    }
                }
            }
            prev = Some(fire);
        }
        best
    }

    fn next_naive_after(&self, naive: NaiveDateTime) -> Option<NaiveDateTime> {
        let as_utc = Utc.from_utc_datetime(&naive);
        self.parts
            .iter()
            .filter_map(|p| p.after(&as_utc).next())
            .min()
            .map(|t| t.naive_utc())
    }

    /// The instant a matching local time fires at, per the module's DST rules.
    fn instant_of(&self, local: NaiveDateTime) -> DateTime<Utc> {
        match self.tz.from_local_datetime(&local) {
            LocalResult::Single(t) => t.with_timezone(&Utc),
            LocalResult::Ambiguous(first, second) => first.min(second).with_timezone(&Utc),
            LocalResult::None => {
                // Skipped: use the offset in force just before the gap. Gaps are shorter than a
                // day, so the offset a day earlier (as UTC) precedes the change.
                let before = local - Duration::days(1);
                let offset = self
                    .tz
                    .offset_from_utc_datetime(&before)
                    .fix()
                    .local_minus_utc();
                Utc.from_utc_datetime(&(local - Duration::seconds(i64::from(offset))))
            }
        }
    }

    /// Bounds (in seconds) of the zone's UTC offset around `t`, widened by an hour on each side.
    fn offset_bounds(&self, t: DateTime<Utc>) -> (i64, i64) {
        let (mut lo, mut hi) = (i64::MAX, i64::MIN);
        // Daily samples over a little more than a year see every offset of a yearly DST cycle.
        for day in -2..=400 {
            let at = (t + Duration::days(day)).naive_utc();
            let off = i64::from(
                self.tz
                    .offset_from_utc_datetime(&at)
                    .fix()
                    .local_minus_utc(),
            );
            lo = lo.min(off);
            hi = hi.max(off);
        }
        (lo - 3600, hi + 3600)
    }
}

/// Iterator over fire times, see [`CronSchedule::fires_after`].
///
/// Local matches are produced in local order by the `cron` crate; mapping them to instants is
/// monotonic except around offset changes, so candidates wait in a small heap until no later
/// local match can map to an earlier instant.
pub struct Fires<'a> {
    schedule: &'a CronSchedule,
    after: DateTime<Utc>,
    cursor: Option<NaiveDateTime>,
    heap: BinaryHeap<Reverse<DateTime<Utc>>>,
    max_offset: i64,
    exhausted: bool,
}

impl<'a> Fires<'a> {
    fn new(schedule: &'a CronSchedule, after: DateTime<Utc>) -> Self {
        let (min_offset, max_offset) = schedule.offset_bounds(after);
        // A local time L fires at an instant in [L - max_offset, L - min_offset], so matches at
        // or before after + min_offset cannot fire after `after`.
        let start = after.naive_utc() + Duration::seconds(min_offset);
        Self {
            schedule,
            after,
            cursor: Some(start),
            heap: BinaryHeap::new(),
            max_offset,
            exhausted: false,
        }
    }
}

impl Iterator for Fires<'_> {
    type Item = DateTime<Utc>;

    fn next(&mut self) -> Option<DateTime<Utc>> {
        loop {
            if let Some(Reverse(top)) = self.heap.peek().copied() {
                // Every local match not yet pulled is later than the cursor and so fires at or
                // after cursor - max_offset.
                let floor = self
                    .cursor
                    .map(|c| Utc.from_utc_datetime(&c) - Duration::seconds(self.max_offset));
                if self.exhausted || floor.is_some_and(|f| f >= top) {
                    self.heap.pop();
                    // Drop duplicates (a skipped time landing on a regular fire) and the past.
                    while self.heap.peek().is_some_and(|Reverse(t)| *t == top) {
                        self.heap.pop();
                    }
                    if top > self.after {
                        self.after = top;
                        return Some(top);
                    }
                    continue;
                }
            } else if self.exhausted {
                return None;
            }
            match self.cursor.and_then(|c| self.schedule.next_naive_after(c)) {
                Some(local) => {
                    self.cursor = Some(local);
                    self.heap.push(Reverse(self.schedule.instant_of(local)));
                }
                None => self.exhausted = true,
            }
        }
    }
}

/// Rewrites a cron(5) day-of-week field (0–7, 0 and 7 = Sunday, names, ranges, steps) as a list
/// of day names, which the `cron` crate reads unambiguously.
fn translate_day_of_week(field: &str) -> Result<String, String> {
    if field == "*" || field == "?" {
        return Ok("*".to_owned());
    }
    let mut days = [false; 7];
    for item in field.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s
                    .parse()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("step {s:?} must be a positive number"))?;
                (r, step)
            }
            None => (item, 1),
        };
        let (lo, hi) = if range == "*" {
            (0, 6)
        } else if let Some((a, b)) = range.split_once('-') {
            (day_number(a)?, day_number(b)?)
        } else {
            let d = day_number(range)?;
            // `a/n` means from a to the end of the week, as in cron(5).
            (d, if item.contains('/') { 7 } else { d })
        };
        if lo > hi {
            return Err(format!(
                "range {range:?} goes backwards; write e.g. 5-7 or FRI-SUN"
            ));
        }
        for d in (lo..=hi).step_by(step as usize) {
            days[(d % 7) as usize] = true;
        }
    }
    Ok(DAY_NAMES
        .iter()
        .zip(days)
        .filter(|(_, on)| *on)
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(","))
}

fn day_number(s: &str) -> Result<u32, String> {
    if let Ok(n) = s.parse::<u32>() {
        return if n <= 7 {
            Ok(n)
        } else {
            Err(format!("{n} is out of range 0-7 (0 and 7 are Sunday)"))
        };
    }
    DAY_NAMES
        .iter()
        .position(|d| d.eq_ignore_ascii_case(s))
        .map(|p| p as u32)
        .ok_or_else(|| format!("{s:?} is not a day (0-7 or SUN-SAT)"))
}

/// The `cron` crate reports errors against its internal 6-field form (with a seconds field this
/// project does not expose), with a caret line under it: keep only the reason after the caret, so
/// that messages quote the expression as the user wrote it.
fn describe_cron_error(raw: &str) -> String {
    let lines: Vec<&str> = raw.lines().collect();
    let caret = lines
        .iter()
        .rposition(|l| !l.trim().is_empty() && l.trim().chars().all(|c| c == '^'));
    let reason = match caret {
        Some(i) if i + 1 < lines.len() => lines[i + 1..].join(" "),
        _ => raw.replace("Invalid expression: ", ""),
    };
    // cron 0.17 words its inclusive maximum as "must be less than 59" (59 is accepted).
    reason
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace(" must be less than ", " must be at most ")
}
