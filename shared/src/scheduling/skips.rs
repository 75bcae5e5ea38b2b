//! Skip dates: the dates, ranges of dates and single fire times on which a scheduler creates no
//! booking, from its own `spec.skipDates` and from the BookingCalendars it references.
//!
//! A `date` or a `from`/`to` range names local days, evaluated in the scheduler's `timeZone`
//! (a calendar shared by schedulers of several zones means each one's local day); a `fire` names
//! one instant, matched exactly.

use chrono::{DateTime, NaiveDate, Utc};
use chrono_tz::Tz;

use crate::{
    api::{MAX_SKIP_REASON_LEN, SkipDate},
    time::{format_rfc3339, parse_rfc3339},
};

/// What one entry skips.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipWhen {
    /// Every fire of one local day.
    Day(NaiveDate),
    /// Every fire of the local days from the first to the second, both included.
    Days(NaiveDate, NaiveDate),
    /// The fire at exactly this instant.
    Fire(DateTime<Utc>),
}

impl SkipWhen {
    /// Whether a fire at `fire` is skipped, its local day taken in `tz`.
    pub fn matches(&self, fire: DateTime<Utc>, tz: Tz) -> bool {
        let day = || fire.with_timezone(&tz).date_naive();
        match *self {
            Self::Day(d) => day() == d,
            Self::Days(from, to) => (from..=to).contains(&day()),
            Self::Fire(at) => at == fire,
        }
    }

    fn describe(&self) -> String {
        match self {
            Self::Day(d) => d.to_string(),
            Self::Days(from, to) => format!("{from} to {to}"),
            Self::Fire(at) => format!("the fire at {}", format_rfc3339(*at)),
        }
    }
}

/// A skip-date entry that cannot be read: the dotted field and the full message (field, value
/// as written and the fix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkipDateError {
    /// Dotted path of the offending field, e.g. `spec.skipDates[2].from`.
    pub field: String,
    /// The message.
    pub message: String,
}

fn local_day(field: &str, value: &str) -> Result<NaiveDate, SkipDateError> {
    let valid = value.len() == 10 && value.as_bytes()[4] == b'-' && value.as_bytes()[7] == b'-';
    NaiveDate::parse_from_str(value, "%Y-%m-%d")
        .ok()
        .filter(|_| valid)
        .ok_or_else(|| SkipDateError {
            field: field.to_owned(),
            message: format!(
                "{field}: {value:?} is not a calendar date; write it as YYYY-MM-DD, e.g. 2031-12-25 (a local day in the scheduler's timeZone)"
            ),
        })
}

/// Reads one entry at `at` (e.g. `spec.skipDates[2]`): exactly one of `date`, `from`/`to` or
/// `fire`, each well-formed, `from` not after `to`, and a `reason` of at most
/// [`MAX_SKIP_REASON_LEN`] characters without control characters.
pub fn parse_skip_date(at: &str, entry: &SkipDate) -> Result<SkipWhen, SkipDateError> {
    let err = |field: &str, message: String| SkipDateError {
        field: format!("{at}{field}"),
        message,
    };
    if let Some(reason) = &entry.reason {
        if reason.chars().count() > MAX_SKIP_REASON_LEN {
            return Err(err(
                ".reason",
                format!(
                    "{at}.reason: {reason:?} is longer than {MAX_SKIP_REASON_LEN} characters; use a shorter reason (it is shown in status and Events)"
                ),
            ));
        }
        if let Some(c) = reason.chars().find(|c| c.is_control()) {
            return Err(err(
                ".reason",
                format!(
                    "{at}.reason: {reason:?} holds the control character {c:?}; remove it (control characters such as newlines are not allowed in a reason)"
                ),
            ));
        }
    }
    let forms: Vec<&str> = [
        entry.date.as_ref().map(|_| "date"),
        (entry.from.is_some() || entry.to.is_some()).then_some("from/to"),
        entry.fire.as_ref().map(|_| "fire"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if forms.len() != 1 {
        let (found, fix) = if forms.is_empty() {
            ("none of them".to_owned(), "set one of them")
        } else {
            (forms.join(" and "), "split it into one entry per form")
        };
        return Err(err(
            "",
            format!(
                "{at}: an entry sets exactly one of date (a day), from/to (a range of days) or fire (one fire time); this one sets {found}: {fix}"
            ),
        ));
    }
    if let Some(date) = &entry.date {
        return local_day(&format!("{at}.date"), date).map(SkipWhen::Day);
    }
    if let Some(fire) = &entry.fire {
        return parse_rfc3339(&format!("{at}.fire"), fire)
            .map(SkipWhen::Fire)
            .map_err(|e| err(".fire", e.to_string()));
    }
    let (Some(from), Some(to)) = (&entry.from, &entry.to) else {
        let missing = if entry.from.is_none() { "from" } else { "to" };
        return Err(err(
            &format!(".{missing}"),
            format!(
                "{at}.{missing} is missing; a range needs both from and to (YYYY-MM-DD, both included); for one day use date"
            ),
        ));
    };
    let first = local_day(&format!("{at}.from"), from)?;
    let last = local_day(&format!("{at}.to"), to)?;
    if first > last {
        return Err(err(
            ".from",
            format!(
                "{at}.from: {from:?} is after {at}.to {to:?}; a range runs from its first day to its last: swap them"
            ),
        ));
    }
    Ok(SkipWhen::Days(first, last))
}

/// One readable entry and the reason shown when it skips a fire.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SkipRule {
    when: SkipWhen,
    reason: String,
}

/// Every skip date that applies to a scheduler: its own and its calendars'.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Skips {
    rules: Vec<SkipRule>,
}

impl Skips {
    /// Adds the entries of `source` (`spec.skipDates`, or `calendar holidays`); each field path
    /// starts with `prefix` (e.g. `spec.skipDates`). Fails on the first unreadable entry.
    pub fn add(
        &mut self,
        prefix: &str,
        source: &str,
        entries: &[SkipDate],
    ) -> Result<(), SkipDateError> {
        for (i, entry) in entries.iter().enumerate() {
            let when = parse_skip_date(&format!("{prefix}[{i}]"), entry)?;
            let what = entry
                .reason
                .as_deref()
                .filter(|r| !r.trim().is_empty())
                .map_or_else(|| when.describe(), str::to_owned);
            self.rules.push(SkipRule {
                when,
                reason: format!("{what} ({source})"),
            });
        }
        Ok(())
    }

    /// The reason the fire at `fire` is skipped (the first matching entry's), or `None`.
    pub fn skipped(&self, fire: DateTime<Utc>, tz: Tz) -> Option<&str> {
        self.rules
            .iter()
            .find(|r| r.when.matches(fire, tz))
            .map(|r| r.reason.as_str())
    }
}
