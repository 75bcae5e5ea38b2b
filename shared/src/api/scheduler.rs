//! The BookingScheduler: a Booking for each fire time of a cron schedule.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::*;

/// Creates a Booking at every fire time of a cron schedule.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "manager.kotaico.de",
    version = "v1",
    kind = "BookingScheduler",
    namespaced,
    status = "BookingSchedulerStatus",
    shortname = "bks",
    category = "resourcebooking",
    printcolumn = r#"{"name":"SCHEDULE","type":"string","jsonPath":".spec.schedule"}"#,
    printcolumn = r#"{"name":"DURATION","type":"integer","jsonPath":".spec.duration"}"#,
    printcolumn = r#"{"name":"SUSPEND","type":"boolean","jsonPath":".spec.suspend"}"#,
    printcolumn = r#"{"name":"NEXT","type":"string","jsonPath":".status.next"}"#,
    printcolumn = r#"{"name":"LAST BOOKING","type":"string","jsonPath":".status.lastBooking"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct BookingSchedulerSpec {
    /// Standard 5-field cron expression (minute hour day-of-month month day-of-week) or one of
    /// `@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`, evaluated in `timeZone`.
    #[schemars(length(min = 1, max = 256))]
    pub schedule: String,
    /// Length of each booking, in minutes (at least 1, and not longer than the shortest interval
    /// between two fires).
    #[schemars(range(min = 1, max = 525600))]
    pub duration: u32,
    /// Booking created at each fire time: `start_at` is the fire time, `end_at` is
    /// `start_at + duration`.
    #[serde(rename = "bookingTemplate")]
    pub booking_template: BookingTemplate,
    /// IANA time zone of the schedule, e.g. `Europe/Berlin`. Defaults to `UTC`.
    #[serde(rename = "timeZone", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub time_zone: Option<String>,
    /// As for CronJobs: a fire missed while the controller was down is still honoured when it
    /// is at most this many seconds old (and its slot has not ended). Unset: no deadline.
    #[serde(
        rename = "startingDeadlineSeconds",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0))]
    pub starting_deadline_seconds: Option<i64>,
    /// How many FINISHED bookings created by this scheduler to keep. Unset: keep all.
    #[serde(
        rename = "finishedBookingsHistoryLimit",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0))]
    pub finished_bookings_history_limit: Option<u32>,
    /// `true` stops new fires. Fires missed while suspended are not back-filled: on resume
    /// only the most recent one may still be booked, under the `startingDeadlineSeconds` rule
    /// (and while its slot is open); the others are dropped without a `MissedFire` warning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    /// Dates (`date`), ranges of dates (`from`/`to`) and single fire times (`fire`) on which no
    /// booking is created; dates are local days in `timeZone` (at most 100 entries).
    #[serde(rename = "skipDates", default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub skip_dates: Vec<SkipDate>,
    /// BookingCalendars of this namespace whose skip dates apply too (at most 10). While one
    /// does not exist, due fires create nothing (a holiday must not be booked).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub calendars: Vec<CalendarRef>,
}

/// A reference to a BookingCalendar of the scheduler's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
pub struct CalendarRef {
    /// Name of the BookingCalendar.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// A fire that created no booking because a skip date matched it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
pub struct SkippedFire {
    /// The fire time (RFC 3339, UTC).
    #[serde(rename = "fireTime")]
    pub fire_time: String,
    /// Which entry matched and why (its `reason`, else the entry itself).
    pub reason: String,
}

/// One of the next fire times, and whether a skip date cancels it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
pub struct UpcomingFire {
    /// The fire time (RFC 3339, UTC).
    #[serde(rename = "fireTime")]
    pub fire_time: String,
    /// `true` when a skip date cancels this fire.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skipped: bool,
    /// Which entry cancels it and why, when skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The fields of a booking without its times.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
pub struct BookingTemplate {
    /// Name of the Resource each booking runs.
    #[schemars(length(min = 1, max = 253))]
    pub resource_name: String,
    /// Who the bookings are for. When absent, the admission webhook fills in the requesting
    /// user's name. At most 256 characters, no control characters.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 256))]
    pub user_id: String,
    /// Notifications of each booking (at most 10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub notifications: Vec<Notification>,
}

/// Observed state of a BookingScheduler, written only by the controller.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct BookingSchedulerStatus {
    /// Next fire time that will create a booking (RFC 3339, UTC): skipped fires are passed
    /// over. Absent while suspended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// Last fire time handled (RFC 3339, UTC): a booking was created for it, or it was missed
    /// beyond `startingDeadlineSeconds` and skipped.
    #[serde(
        rename = "lastFireTime",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub last_fire_time: Option<String>,
    /// Name of the last booking created.
    #[serde(
        rename = "lastBooking",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub last_booking: Option<String>,
    /// Standard conditions (`Ready`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status was computed from.
    #[serde(
        rename = "observedGeneration",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub observed_generation: Option<i64>,
    /// The last fire a skip date cancelled, and why.
    #[serde(
        rename = "lastSkipped",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub last_skipped: Option<SkippedFire>,
    /// The next few fire times (at most 5), each marked when a skip date cancels it. Empty
    /// while suspended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upcoming: Vec<UpcomingFire>,
}
