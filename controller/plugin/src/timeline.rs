//! The timeline of one Resource: a row per local day, its half-hours drawn as a bar, and its
//! free slots (pure; `now` and the bookings are parameters).
//!
//! A bar has one character per half-hour of wall-clock time (48 per day, `00:00` at the left),
//! so that the hours line up under the ruler on every row whatever the zone does: on the day
//! the clocks jump forward the skipped half-hours stay blank, on the day they go back the
//! repeated half-hours show who holds either of their two occurrences, and the row says how
//! long the day is (`23 h`, `25 h`). Only the bookings that hold the Resource are drawn (the
//! shared arbitration rule decides which: a booking that overlaps an earlier-created one never
//! holds it), each with the letter of its line in the legend.

use booking_shared::api::BookingPhase;
use booking_shared::arbitration::{BookingView, Verdict};
use booking_shared::time::Slot;
use chrono::{DateTime, Duration, NaiveDate, Timelike, Utc};
use chrono_tz::Tz;
use serde::Serialize;

use crate::output::table;
use crate::when::{format_duration, rfc3339_in, start_of_day, wall_in};

/// Characters per day: one per half-hour.
pub const COLUMNS: usize = 48;
const COLUMN_MINUTES: u32 = 30;
/// The letters of the legend, in the order of the bookings' starts.
const KEYS: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
/// A half-hour of two or more holders.
const SEVERAL: char = '*';
/// A half-hour of no holder.
const FREE: char = '.';
/// A bar after more bookings than [`KEYS`] has letters.
const UNKEYED: char = '#';

/// One booking of the Resource, as arbitration judged it at `now`.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// `metadata.name`.
    pub name: String,
    /// `spec.user_id`.
    pub user: String,
    /// Its slot.
    pub slot: Slot,
    /// Its phase at `now`.
    pub phase: Option<BookingPhase>,
    /// The accepted booking it overlaps, when arbitration rejected it.
    pub conflicts_with: Option<String>,
    /// Whether it is being deleted.
    pub deleting: bool,
}

impl Entry {
    /// Whether the booking holds the Resource during its slot.
    pub fn holds(&self) -> bool {
        self.conflicts_with.is_none() && !self.deleting
    }
}

/// The entries of bookings whose slot is valid, from their views and verdicts (as
/// [`booking_shared::arbitration::arbitrate`] returns them, in the same order), by start.
pub fn entries(views: &[BookingView], verdicts: &[Verdict]) -> Vec<Entry> {
    let mut out: Vec<Entry> = views
        .iter()
        .zip(verdicts)
        .filter_map(|(b, v)| {
            let slot = *b.slot.as_ref().ok()?;
            Some(Entry {
                name: b.name.clone(),
                user: b.user.clone(),
                slot,
                phase: v.phase,
                conflicts_with: v.conflicts_with.clone(),
                deleting: b.deleting,
            })
        })
        .collect();
    out.sort_by(|a, b| (a.slot.start, &a.name).cmp(&(b.slot.start, &b.name)));
    out
}

/// The days shown: `days` local dates from `from`, in `tz`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// The first day.
    pub from: NaiveDate,
    /// How many days.
    pub days: u32,
    /// The zone of the days.
    pub tz: Tz,
}

impl Window {
    /// The local date of day `i`.
    pub fn day(&self, i: u32) -> NaiveDate {
        self.from + Duration::days(i64::from(i))
    }

    /// The first instant of the window.
    pub fn start(&self) -> DateTime<Utc> {
        start_of_day(self.from, self.tz)
    }

    /// The first instant after the window.
    pub fn end(&self) -> DateTime<Utc> {
        start_of_day(self.day(self.days), self.tz)
    }

    /// The window as a slot.
    pub fn slot(&self) -> Slot {
        Slot {
            start: self.start(),
            end: self.end(),
        }
    }
}

/// One booking of the legend, as `-o json|yaml` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LegendLine {
    /// Its letter in the bars; `-` for a booking that never holds the Resource.
    pub key: String,
    /// The Booking's name.
    pub booking: String,
    /// Its user.
    pub user: String,
    /// Its start, RFC 3339 in the window's zone.
    pub start: String,
    /// Its end, RFC 3339 in the window's zone.
    pub end: String,
    /// Its phase at `now`.
    pub phase: String,
    /// Whether it holds the Resource during its slot.
    pub holds: bool,
    /// The booking holding the Resource instead, for one that overlaps it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conflicts_with: Option<String>,
}

/// The timeline as `-o json|yaml` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Timeline {
    /// The Resource's namespace.
    pub namespace: String,
    /// The Resource.
    pub resource: String,
    /// The zone of the days.
    pub time_zone: String,
    /// The first instant of the window, RFC 3339 in the zone.
    pub start: String,
    /// The first instant after the window, RFC 3339 in the zone.
    pub end: String,
    /// The bookings that overlap the window, by start.
    pub bookings: Vec<LegendLine>,
}

/// The legend of the bookings that overlap the window, with their letters.
pub fn legend(entries: &[Entry], window: &Window) -> Vec<LegendLine> {
    let shown = window.slot();
    let mut keys = KEYS.chars();
    entries
        .iter()
        .filter(|e| e.slot.overlaps(&shown))
        .map(|e| {
            let key = if e.holds() {
                keys.next().unwrap_or(UNKEYED)
            } else {
                '-'
            };
            LegendLine {
                key: key.to_string(),
                booking: e.name.clone(),
                user: e.user.clone(),
                start: rfc3339_in(e.slot.start, window.tz),
                end: rfc3339_in(e.slot.end, window.tz),
                phase: e.phase.map_or_else(String::new, |p| p.to_string()),
                holds: e.holds(),
                conflicts_with: e.conflicts_with.clone(),
            }
        })
        .collect()
}

/// The structured timeline (`-o json|yaml`).
pub fn timeline(namespace: &str, resource: &str, entries: &[Entry], window: &Window) -> Timeline {
    Timeline {
        namespace: namespace.to_owned(),
        resource: resource.to_owned(),
        time_zone: window.tz.name().to_owned(),
        start: rfc3339_in(window.start(), window.tz),
        end: rfc3339_in(window.end(), window.tz),
        bookings: legend(entries, window),
    }
}

/// The drawn timeline (`-o table`): a header, the ruler, a row per day with a `^ now` line
/// under today's, and the legend.
pub fn render(
    namespace: &str,
    resource: &str,
    entries: &[Entry],
    window: &Window,
    now: DateTime<Utc>,
) -> String {
    let tz = window.tz;
    let first = window.from.format("%a %Y-%m-%d").to_string();
    let days = match window.days {
        1 => first,
        n => format!("{first} to {}", window.day(n - 1).format("%a %Y-%m-%d")),
    };
    let mut s = format!(
        "Resource {resource} in {namespace}, {days}, times in {}; one character per 30 min\n",
        tz.name()
    );
    let label_width = "Mon 2026-12-07".len() + 3;
    let ruler: String = (0..24)
        .step_by(3)
        .map(|h| format!("{h:<6}", h = format!("{h:02}")))
        .collect();
    s.push_str(&format!("{:label_width$}{}\n", "", ruler.trim_end()));
    let lines = legend(entries, window);
    // The holding entries in legend order, with their letters.
    let holders: Vec<(&Entry, char)> = entries
        .iter()
        .filter(|e| e.holds() && e.slot.overlaps(&window.slot()))
        .zip(lines.iter().filter(|l| l.holds))
        .map(|(e, l)| (e, l.key.chars().next().unwrap_or(UNKEYED)))
        .collect();
    for i in 0..window.days {
        let day = window.day(i);
        let (start, end) = (
            start_of_day(day, tz),
            start_of_day(day + Duration::days(1), tz),
        );
        let bar = bar(&holders, start, end, tz);
        let length = match (end - start).num_minutes() {
            1440 => String::new(),
            m => format!("   {} h", m / 60),
        };
        let row = format!(
            "{:label_width$}{bar}{length}",
            day.format("%a %Y-%m-%d").to_string()
        );
        s.push_str(row.trim_end());
        s.push('\n');
        if start <= now && now < end {
            let local = now.with_timezone(&tz);
            let column = ((local.hour() * 60 + local.minute()) / COLUMN_MINUTES) as usize;
            s.push_str(&format!(
                "{:width$}^ now {}\n",
                "",
                local.format("%H:%M"),
                width = label_width + column
            ));
        }
    }
    s.push_str(&format!(
        "\n{FREE} free   {SEVERAL} several holders in one half-hour   blank: a time the zone \
         skips\n\n"
    ));
    if lines.is_empty() {
        s.push_str("No bookings in these days.\n");
        return s;
    }
    let rows: Vec<Vec<String>> = entries
        .iter()
        .filter(|e| e.slot.overlaps(&window.slot()))
        .zip(&lines)
        .map(|(e, l)| {
            let note = match (&e.conflicts_with, e.deleting) {
                (_, true) => "being deleted: holds nothing".to_owned(),
                (Some(other), _) => format!("overlaps {other}: never holds"),
                (None, false) => String::new(),
            };
            vec![
                l.key.clone(),
                e.name.clone(),
                e.user.clone(),
                wall_in(e.slot.start, tz),
                wall_in(e.slot.end, tz),
                l.phase.clone(),
                note,
            ]
        })
        .collect();
    s.push_str(&table(
        &["KEY", "BOOKING", "USER", "START", "END", "PHASE", "NOTE"],
        &rows,
    ));
    s
}

/// The bar of the day [start, end): each real minute of it lands in the column of its wall
/// time, and a column shows the holders of its minutes.
fn bar(holders: &[(&Entry, char)], start: DateTime<Utc>, end: DateTime<Utc>, tz: Tz) -> String {
    // Per column: whether any minute lands there, and the holders seen.
    let mut seen: Vec<(bool, Vec<char>)> = vec![(false, Vec::new()); COLUMNS];
    let mut t = start;
    while t < end {
        let minute = Slot {
            start: t,
            end: t + Duration::minutes(1),
        };
        let local = t.with_timezone(&tz);
        let column = ((local.hour() * 60 + local.minute()) / COLUMN_MINUTES) as usize;
        if let Some((any, keys)) = seen.get_mut(column) {
            *any = true;
            for (e, key) in holders {
                if e.slot.overlaps(&minute) && !keys.contains(key) {
                    keys.push(*key);
                }
            }
        }
        t += Duration::minutes(1);
    }
    seen.into_iter()
        .map(|(any, keys)| match (any, keys.as_slice()) {
            (false, _) => ' ',
            (true, []) => FREE,
            (true, [one]) => *one,
            (true, _) => SEVERAL,
        })
        .collect()
}

/// A free slot, as `--free` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FreeSlot {
    /// RFC 3339 in the window's zone.
    pub start: String,
    /// RFC 3339 in the window's zone.
    pub end: String,
    /// Its length, e.g. `2h 30m`.
    pub length: String,
}

/// The free slots of the window from `max(now, window start)`: the gaps between the slots of
/// the bookings that hold the Resource, at least `min` long.
pub fn free_slots(
    entries: &[Entry],
    window: &Window,
    now: DateTime<Utc>,
    min: Duration,
) -> Vec<Slot> {
    let (from, to) = (now.max(window.start()), window.end());
    let mut busy: Vec<Slot> = entries
        .iter()
        .filter(|e| e.holds())
        .map(|e| e.slot)
        .collect();
    busy.sort_by_key(|s| s.start);
    let mut out = Vec::new();
    let mut cursor = from;
    for b in busy {
        if b.start > cursor {
            out.extend(Slot::new(cursor, b.start.min(to)));
        }
        cursor = cursor.max(b.end);
        if cursor >= to {
            break;
        }
    }
    if cursor < to {
        out.extend(Slot::new(cursor, to));
    }
    out.retain(|s| s.duration() >= min);
    out
}

/// The free slots as printed rows.
pub fn free_rows(slots: &[Slot], tz: Tz) -> Vec<FreeSlot> {
    slots
        .iter()
        .map(|s| FreeSlot {
            start: rfc3339_in(s.start, tz),
            end: rfc3339_in(s.end, tz),
            length: format_duration(s.duration()),
        })
        .collect()
}

/// The free slots as a table.
pub fn free_table(slots: &[Slot], tz: Tz) -> String {
    if slots.is_empty() {
        return "No free slot of that length in these days.\n".to_owned();
    }
    let rows: Vec<Vec<String>> = slots
        .iter()
        .map(|s| {
            vec![
                wall_in(s.start, tz),
                wall_in(s.end, tz),
                format_duration(s.duration()),
            ]
        })
        .collect();
    table(&["START", "END", "LENGTH"], &rows)
}

#[cfg(test)]
mod tests;
