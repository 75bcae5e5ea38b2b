//! Pure time rules: RFC 3339 parsing, booking phases and overlaps. No I/O; the clock is always a
//! parameter.

use std::sync::Arc;

use chrono::{DateTime, Datelike as _, Timelike as _, Utc};

use crate::api::{BookingPhase, BookingSpec};

/// The clock: a function returning "now". The binaries inject [`system_clock`]; tests inject a
/// fixed or moving instant, so every rule and reconciler can be tested at any time without
/// waiting.
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// The real clock (`Utc::now`), the one the binaries inject.
pub fn system_clock() -> Clock {
    Arc::new(Utc::now)
}

/// A clock standing still at `at` (for tests).
pub fn fixed_clock(at: DateTime<Utc>) -> Clock {
    Arc::new(move || at)
}

/// A timestamp field that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{field}: {value:?} is not an RFC 3339 timestamp ({reason}); write it like 2031-01-10T22:35:00Z or 2031-01-10T23:35:00+01:00"
)]
pub struct TimestampError {
    /// Dotted path of the field, e.g. `spec.start_at`.
    pub field: String,
    /// The value as written.
    pub value: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Parses an RFC 3339 timestamp (`YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`) into UTC.
///
/// Any offset and any number of fractional digits are accepted. Accepted are exactly the values
/// the Booking CRD admits ([`crate::api::RFC3339_PATTERN`] on a real calendar date), which are
/// those Kubernetes itself reads as timestamps: the `T` and the `Z` upper-case (RFC 3339 allows
/// lower case, Kubernetes' parser does not), the offset with its colon, and a year from 1000 to
/// 9998 (every instant then lies inside the API server's CEL timestamp range). `field` is used
/// in the error, which names the field, the value and the expected form.
pub fn parse_rfc3339(field: &str, value: &str) -> Result<DateTime<Utc>, TimestampError> {
    let err = |reason: &str| TimestampError {
        field: field.to_owned(),
        value: value.to_owned(),
        reason: reason.to_owned(),
    };
    if value.trim().is_empty() {
        return Err(err("it is empty"));
    }
    let bytes = value.as_bytes();
    if bytes.len() > 10 && bytes[10] == b't' {
        return Err(err("the 'T' between date and time must be upper-case"));
    }
    if bytes.len() > 10 && bytes[10] != b'T' {
        return Err(err("date and time must be separated by 'T'"));
    }
    if bytes.len() > 19 && value.ends_with('z') {
        return Err(err("the 'Z' of UTC must be upper-case"));
    }
    if let Some(fixed) = offset_with_colon(value) {
        return Err(err(&format!("the offset needs its colon, as in {fixed}")));
    }
    let parsed = DateTime::parse_from_rfc3339(value).map_err(|e| {
        let reason = match e.kind() {
            chrono::format::ParseErrorKind::OutOfRange => {
                "a field is out of range, e.g. an impossible date such as February 30".to_owned()
            }
            chrono::format::ParseErrorKind::TooShort => {
                "it is incomplete: seconds and a time zone offset (Z or ±HH:MM) are required"
                    .to_owned()
            }
            _ => e.to_string(),
        };
        err(&reason)
    })?;
    // chrono reads a year of four digits; the CRD's rule admits 1000 to 9998.
    if !(1000..=9998).contains(&parsed.year()) {
        return Err(err("the year must be between 1000 and 9998"));
    }
    // chrono reads `:60` as a leap second; Kubernetes does not.
    if parsed.nanosecond() >= 1_000_000_000 {
        return Err(err("a leap second (:60) cannot be written; use :59"));
    }
    Ok(parsed.with_timezone(&Utc))
}

/// `value` with a colon put into its offset, when it ends in an offset written without one
/// (`+0100`, `-0530`) after a time with seconds: what the user most likely meant.
fn offset_with_colon(value: &str) -> Option<String> {
    let (head, offset) = value.split_at_checked(value.len().checked_sub(5)?)?;
    let (sign, digits) = offset.split_at_checked(1)?;
    let after_seconds = head.len() >= 19 && head.ends_with(|c: char| c.is_ascii_digit());
    (matches!(sign, "+" | "-") && digits.bytes().all(|b| b.is_ascii_digit()) && after_seconds)
        .then(|| format!("{head}{sign}{}:{}", &digits[..2], &digits[2..]))
}

/// A Kubernetes `metav1.Time` (e.g. `metadata.creationTimestamp`) as a chrono instant.
pub fn kube_time(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> DateTime<Utc> {
    DateTime::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond().max(0) as u32)
        .unwrap_or_default()
}

/// A chrono instant as a Kubernetes `metav1.Time` (the inverse of [`kube_time`]).
pub fn to_kube_time(t: DateTime<Utc>) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    let ts = k8s_openapi::jiff::Timestamp::new(t.timestamp(), t.timestamp_subsec_nanos() as i32)
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(ts)
}

/// Formats an instant as RFC 3339 UTC with second precision (`2031-01-10T22:35:00Z`), or with
/// the fractional part when it has one.
pub fn format_rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// A half-open interval of time [start, end).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Slot {
    /// First instant inside the slot.
    pub start: DateTime<Utc>,
    /// First instant after the slot.
    pub end: DateTime<Utc>,
}

/// What a user reads after a booking's `end_at` was refused for not being after its `start_at`
/// (by the webhook, [`SlotError::EndNotAfterStart`], and by the CRD's own rule).
pub const END_AFTER_START_FIX: &str =
    "bookings are the half-open interval [start_at, end_at), so give an end_at later than start_at";

/// Why a booking's times do not form a slot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    /// A timestamp does not parse.
    #[error(transparent)]
    Timestamp(#[from] TimestampError),
    /// `end_at` is not after `start_at`.
    #[error("spec.end_at: {end:?} must be after spec.start_at {start:?}; {END_AFTER_START_FIX}")]
    EndNotAfterStart {
        /// `start_at` as written.
        start: String,
        /// `end_at` as written.
        end: String,
    },
}

impl Slot {
    /// A slot from two instants; `None` unless `start < end`.
    pub fn new(start: DateTime<Utc>, end: DateTime<Utc>) -> Option<Self> {
        (start < end).then_some(Self { start, end })
    }

    /// The slot of a booking spec, with errors naming `spec.start_at` / `spec.end_at`.
    pub fn of_booking(spec: &BookingSpec) -> Result<Self, SlotError> {
        let start = parse_rfc3339("spec.start_at", &spec.start_at)?;
        let end = parse_rfc3339("spec.end_at", &spec.end_at)?;
        Self::new(start, end).ok_or_else(|| SlotError::EndNotAfterStart {
            start: spec.start_at.clone(),
            end: spec.end_at.clone(),
        })
    }

    /// Whether `t` lies in [start, end).
    pub fn contains(&self, t: DateTime<Utc>) -> bool {
        self.start <= t && t < self.end
    }

    /// Whether two slots share an instant. Back-to-back slots (one ends when the other starts)
    /// do not overlap.
    pub fn overlaps(&self, other: &Slot) -> bool {
        self.start < other.end && other.start < self.end
    }

    /// The phase a booking with this slot has at `now`, ignoring arbitration: SCHEDULED before
    /// the start, IN PROGRESS inside the slot, FINISHED from the end on.
    pub fn phase_at(&self, now: DateTime<Utc>) -> BookingPhase {
        if now < self.start {
            BookingPhase::Scheduled
        } else if now < self.end {
            BookingPhase::InProgress
        } else {
            BookingPhase::Finished
        }
    }

    /// The next instant after `now` at which [`Slot::phase_at`] changes, if any: the start
    /// while scheduled, the end while in progress, none once finished.
    pub fn next_boundary(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if now < self.start {
            Some(self.start)
        } else if now < self.end {
            Some(self.end)
        } else {
            None
        }
    }

    /// Length of the slot.
    pub fn duration(&self) -> chrono::Duration {
        self.end - self.start
    }
}
