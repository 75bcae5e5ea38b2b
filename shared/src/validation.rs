//! Admission rules of the four kinds: pure `validate_*` and `default_*` functions.
//!
//! The admission webhook calls them for every request and the controller may call them to
//! confirm that an object it reads is one it can act on. Nothing here performs I/O or reads the
//! clock: `now` is always a parameter.
//!
//! # Messages
//!
//! Every [`Violation`] names the field (a dotted path such as `spec.notifications[0].recipient`),
//! quotes the value as written and says how to fix it, so a denial printed by `kubectl` is
//! enough to correct the manifest.
//!
//! # Defaulting
//!
//! The `default_*` functions fill **absent** fields only and never rewrite a value the user
//! wrote: GitOps tools compare the stored object with the manifest and would report a rewritten
//! field as drift forever. They return what they filled in, so the caller can build a JSON patch
//! (and send none when nothing changed).
//!
//! # What is not checked here
//!
//! Overlaps between bookings depend on the other bookings of the cluster; they are answered by
//! [`crate::overlap::OverlapIndex`] and worded by [`overlap_violation`].

use std::{fmt, str::FromStr};

use chrono::{DateTime, Duration, Utc};

use crate::{
    api::{
        Booking, BookingCalendarSpec, BookingScheduler, BookingSchedulerSpec, BookingSpec,
        CalendarRef, DEFAULT_NOTIFICATION_LEAD_MINUTES, MAX_CALENDAR_SKIP_DATES,
        MAX_SCHEDULER_CALENDARS, MAX_SCHEDULER_SKIP_DATES, NOTIFICATION_EVENTS, Notification,
        NotificationEvent, ProviderType, Resource, ResourceMonitor, ResourceMonitorSpec,
        ResourceSpec, SUPPORTED_NOTIFICATION_TYPES, SkipDate, unsupported_type_message,
    },
    overlap::IndexedBooking,
    schedule::{CronSchedule, parse_time_zone},
    scheduling::{SkipWhen, parse_skip_date},
    time::{Slot, format_rfc3339, parse_rfc3339},
};

/// Label put on every Booking naming its Resource, so that `kubectl get bookings -l
/// manager.kotaico.de/resource=ec2.analytics` lists the bookings of one Resource.
pub const RESOURCE_LABEL: &str = "manager.kotaico.de/resource";

/// Longest label value Kubernetes accepts (API conventions: 63 characters).
pub const MAX_LABEL_VALUE_LEN: usize = 63;

/// Longest AWS tag value (the user id is written into the instances' `locked-by` tag).
pub const MAX_TAG_VALUE_LEN: usize = 256;

/// Most notifications one booking (or scheduler template) may hold, as the CRD's `maxItems`:
/// each is a send the controller makes and a key in the booking's status.
pub const MAX_NOTIFICATIONS: usize = 10;

/// Longest notification recipient (an email address or an https URL), as the CRD's `maxLength`.
pub const MAX_RECIPIENT_LEN: usize = 2048;

/// Longest notification lead time, in minutes (one week, as the CRD schema).
pub const MAX_LEAD_MINUTES: u32 = 10_080;

/// How far ahead a scheduler's fires are examined for the shortest interval between two of
/// them: a little over a year, which sees every daylight-saving change of every zone.
pub const SCHEDULE_HORIZON_DAYS: i64 = 370;

/// At most this many fires are examined (bounding admission latency for very frequent
/// schedules, whose shortest interval shows up within the first fires anyway).
pub const SCHEDULE_MAX_FIRES: usize = 5_000;

// === Results ==================================================================================

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Dotted path of the offending field, e.g. `spec.end_at`.
    pub field: String,
    /// The full message: field, value as written and the fix.
    pub message: String,
}

impl Violation {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// An object that breaks one or more rules; the message lists every violation, separated by
/// `; `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Invalid(pub Vec<Violation>);

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, v) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            f.write_str(&v.message)?;
        }
        Ok(())
    }
}

impl Invalid {
    /// The offending fields, in the order found.
    pub fn fields(&self) -> Vec<&str> {
        self.0.iter().map(|v| v.field.as_str()).collect()
    }
}

/// Warnings of an admitted object, printed by `kubectl` as `Warning: …`.
pub type Warnings = Vec<String>;

/// The outcome of validating one object: admitted with warnings, or the violations.
pub type Outcome = Result<Warnings, Invalid>;

/// Cluster-wide settings of the rules (flags of the webhook).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// Longest booking allowed; `None` (the default) allows any length.
    pub max_booking_duration: Option<Duration>,
}

/// Collects violations and warnings while an object is checked.
#[derive(Default)]
struct Report {
    violations: Vec<Violation>,
    warnings: Warnings,
}

impl Report {
    fn deny(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.violations.push(Violation::new(field, message));
    }

    fn warn(&mut self, message: impl Into<String>) {
        self.warnings.push(message.into());
    }

    fn finish(self) -> Outcome {
        if self.violations.is_empty() {
            Ok(self.warnings)
        } else {
            Err(Invalid(self.violations))
        }
    }
}

mod booking;
mod fields;
mod resource;
mod scheduler;

pub use booking::*;
use fields::*;
pub use fields::{is_object_name, is_region, redacted_url};
pub use resource::*;
pub use scheduler::*;

// === Defaulted ================================================================================

/// A field filled in by a `default_*` function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Defaulted {
    /// Dotted path of the field.
    pub field: String,
    /// The value filled in.
    pub value: String,
}

impl Defaulted {
    fn new(field: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            value: value.into(),
        }
    }
}

fn default_lead_minutes(notifications: &mut [Notification], path: &str, out: &mut Vec<Defaulted>) {
    for (i, n) in notifications.iter_mut().enumerate() {
        // `leadMinutes` times the reminder alone: a notification without it gets no default.
        if n.lead_minutes.is_none() && n.wanted_events().contains(&NotificationEvent::Reminder) {
            n.lead_minutes = Some(DEFAULT_NOTIFICATION_LEAD_MINUTES);
            out.push(Defaulted::new(
                format!("{path}[{i}].leadMinutes"),
                DEFAULT_NOTIFICATION_LEAD_MINUTES.to_string(),
            ));
        }
    }
}

#[cfg(test)]
mod tests;
