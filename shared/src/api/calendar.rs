//! The BookingCalendar: a list of skip dates (holidays) shared by many BookingSchedulers, and
//! the skip-date entry both kinds use.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Most entries of a BookingScheduler's `spec.skipDates` (the CRD's `maxItems`).
pub const MAX_SCHEDULER_SKIP_DATES: usize = 100;
/// Most entries of a BookingCalendar's `spec.skipDates` (the CRD's `maxItems`).
pub const MAX_CALENDAR_SKIP_DATES: usize = 500;
/// Most calendars one BookingScheduler may reference (the CRD's `maxItems`).
pub const MAX_SCHEDULER_CALENDARS: usize = 10;
/// Longest `reason` of a skip date, in characters (the CRD's `maxLength`).
pub const MAX_SKIP_REASON_LEN: usize = 128;

/// One date, range of dates or fire time on which a scheduler creates no booking. Exactly one
/// of `date`, `from`/`to` (both) or `fire` is set.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
pub struct SkipDate {
    /// A whole local day, `YYYY-MM-DD`, in the scheduler's `timeZone`: no fire of that day
    /// creates a booking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 10))]
    pub date: Option<String>,
    /// First local day (`YYYY-MM-DD`, inclusive) of a range of skipped days; with `to`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 10))]
    pub from: Option<String>,
    /// Last local day (`YYYY-MM-DD`, inclusive) of a range of skipped days; with `from`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 10))]
    pub to: Option<String>,
    /// One exact fire time (RFC 3339, e.g. `2031-01-10T08:00:00+01:00`): that single occurrence
    /// creates no booking. The way to cancel one occurrence of a schedule ahead of time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub fire: Option<String>,
    /// Why (e.g. `Christmas`), shown in the scheduler's status and its `SkippedFire` Event. At
    /// most 128 characters, no control characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub reason: Option<String>,
}

/// A list of skip dates (e.g. a country's public holidays) that BookingSchedulers of the same
/// namespace reference by name in `spec.calendars`. Dates are evaluated in each scheduler's own
/// `timeZone`.
#[derive(
    CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema,
)]
#[kube(
    group = "manager.kotaico.de",
    version = "v1",
    kind = "BookingCalendar",
    namespaced,
    shortname = "bkcal",
    category = "resourcebooking",
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct BookingCalendarSpec {
    /// The dates, ranges and fire times no referencing scheduler books (at most 500).
    #[serde(rename = "skipDates", default)]
    #[schemars(length(max = 500))]
    pub skip_dates: Vec<SkipDate>,
}
