//! Pure rules of BookingSchedulers and of notification timing. No I/O; the clock is a parameter.
//!
//! # Fires
//!
//! A scheduler creates one Booking per fire time `f` of its schedule: `start_at = f`,
//! `end_at = f + duration`, named deterministically from the scheduler and `f` so that a retry, a
//! restart or a second replica can only ever create the same object (AlreadyExists is success).
//! Bookings are created at their fire time, never in advance.
//!
//! # Missed fires
//!
//! When the controller was not running at a fire time (downtime, leader change), the rule is
//! that of CronJobs: only the most recent missed fire is considered, and it is still honoured when
//! it is at most `startingDeadlineSeconds` old (always, when no deadline is set) **and** its
//! booking has not ended yet. Any other missed fire is skipped and reported.

use chrono::{DateTime, Duration, Utc};

use crate::{
    api::{BookingSchedulerSpec, BookingSpec, DEFAULT_NOTIFICATION_LEAD_MINUTES, Notification},
    schedule::{CronSchedule, ScheduleError},
    time::{Slot, format_rfc3339},
};

/// Label put on every booking a scheduler creates, naming the scheduler.
pub const SCHEDULER_LABEL: &str = "manager.kotaico.de/scheduler";

/// Longest name of a Booking created by a scheduler. Object names may be 253 characters; this
/// stays far below so that names are readable in `kubectl get`.
const MAX_BOOKING_NAME: usize = 63;

/// The name of the Booking a scheduler creates for the fire at `fire`:
/// `<scheduler>-<YYYYMMDDHHMM>` (UTC). A scheduler name too long for that is shortened and given
/// a hash suffix, so that names stay unique and valid.
pub fn booking_name(scheduler: &str, fire: DateTime<Utc>) -> String {
    let stamp = fire.format("%Y%m%d%H%M").to_string();
    let budget = MAX_BOOKING_NAME - stamp.len() - 1;
    if scheduler.len() <= budget {
        return format!("{scheduler}-{stamp}");
    }
    format!("{}-{stamp}", crate::names::shorten(scheduler, budget, 8))
}

/// The value of the [`SCHEDULER_LABEL`] label naming scheduler `name` (a label value has at most
/// 63 characters; a longer name is shortened with a hash suffix).
pub fn scheduler_label_value(name: &str) -> String {
    if name.len() <= 63 {
        return name.to_owned();
    }
    crate::names::shorten(name, 63, 8)
}

/// The booking a scheduler creates for a fire time.
pub fn booking_for_fire(spec: &BookingSchedulerSpec, fire: DateTime<Utc>) -> BookingSpec {
    let template = &spec.booking_template;
    BookingSpec {
        resource_name: template.resource_name.clone(),
        start_at: format_rfc3339(fire),
        end_at: format_rfc3339(fire + Duration::minutes(i64::from(spec.duration))),
        user_id: template.user_id.clone(),
        notifications: template.notifications.clone(),
    }
}

/// How far back missed fires are looked for.
const MAX_LOOKBACK_DAYS: i64 = 400;

/// What a scheduler should do at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerPlan {
    /// The fire to create a booking for now, if any.
    pub create: Option<DateTime<Utc>>,
    /// The most recent due fire when it is not honoured (older than the deadline, or its slot
    /// has ended): to be recorded, and then treated as handled.
    pub skipped: Option<DateTime<Utc>>,
    /// The next fire after `now`: when to reconcile again.
    pub next: Option<DateTime<Utc>>,
}

/// Decides which fire, if any, a scheduler must create a booking for at `now`.
///
/// `handled_until` is the latest instant whose fires are already accounted for: the last fire a
/// booking was created (or skipped) for, or the scheduler's creation time when it never fired.
/// Fires in `(handled_until, now]` are due.
pub fn plan_scheduler(
    spec: &BookingSchedulerSpec,
    handled_until: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<SchedulerPlan, ScheduleError> {
    let schedule = CronSchedule::parse_in(&spec.schedule, spec.time_zone.as_deref())?;
    let duration = Duration::minutes(i64::from(spec.duration));
    let next = schedule.next_after(now);
    // Only the most recent due fire matters; older ones are superseded by it, as with CronJobs.
    // A fire missed more than the look-back ago is neither created nor worth reporting.
    let lookback = (now - handled_until).min(Duration::days(MAX_LOOKBACK_DAYS));
    let Some(fire) = schedule
        .last_at_or_before(now, lookback)
        .filter(|f| *f > handled_until)
    else {
        return Ok(SchedulerPlan {
            create: None,
            skipped: None,
            next,
        });
    };
    let within_deadline = spec
        .starting_deadline_seconds
        .is_none_or(|d| now - fire <= Duration::seconds(d.max(0)));
    let slot_open = fire + duration > now;
    Ok(if within_deadline && slot_open {
        SchedulerPlan {
            create: Some(fire),
            skipped: None,
            next,
        }
    } else {
        SchedulerPlan {
            create: None,
            skipped: Some(fire),
            next,
        }
    })
}

/// The lead time of a notification, in minutes before the booking's end (default 20).
pub fn lead_time(notification: &Notification) -> Duration {
    Duration::minutes(i64::from(
        notification
            .lead_minutes
            .unwrap_or(DEFAULT_NOTIFICATION_LEAD_MINUTES),
    ))
}

/// When a notification of a booking becomes due: `lead` before the end, but never before the
/// start (a booking shorter than its lead time notifies as soon as it starts).
pub fn notification_due_at(slot: &Slot, lead: Duration) -> DateTime<Utc> {
    (slot.end - lead).max(slot.start)
}

/// Whether a notification not yet sent must be sent at `now`: it is due and the booking has not
/// ended (after downtime, an ended booking sends nothing).
pub fn notification_should_send(slot: &Slot, lead: Duration, now: DateTime<Utc>) -> bool {
    now >= notification_due_at(slot, lead) && now < slot.end
}
