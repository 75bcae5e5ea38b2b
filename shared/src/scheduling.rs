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
//!
//! # Skip dates
//!
//! A due fire that a skip date matches (see [`Skips`]) creates no booking and counts as
//! handled: it is never a missed fire. `next` is the next fire that will create a booking.
//!
//! # Suspend
//!
//! `spec.suspend: true` creates nothing. Fires that pass meanwhile are not back-filled: when the
//! scheduler resumes, only the most recent one is considered, under the missed-fire rule above;
//! the ones that could no longer be booked are dropped without a warning.

use chrono::{DateTime, Duration, Utc};

mod skips;

pub use skips::{SkipDateError, SkipWhen, Skips, parse_skip_date};

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

/// How many fire times `status.upcoming` lists.
pub const UPCOMING_FIRES: usize = 5;

/// How many fires are looked through for the next one a skip date does not cancel (a per-minute
/// schedule skipped for a week has 10,080 of them): beyond, `next` is left unknown.
const MAX_FIRES_SEARCHED: usize = 20_000;

/// What a scheduler should do at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerPlan {
    /// The fire to create a booking for now, if any.
    pub create: Option<DateTime<Utc>>,
    /// The most recent due fire when it is not honoured (older than the deadline, or its slot
    /// has ended): to be recorded, and then treated as handled.
    pub skipped: Option<DateTime<Utc>>,
    /// The most recent due fire when a skip date cancels it, with the reason: no booking, to be
    /// recorded (and reported once), and then treated as handled.
    pub cancelled: Option<(DateTime<Utc>, String)>,
    /// Whether `spec.suspend` holds the scheduler: nothing is created; a due fire that could
    /// still be booked stays pending (for a resume within its deadline), one that no longer
    /// could is `skipped`, and must not be warned about (suspension is no fault).
    pub suspended: bool,
    /// The next fire after `now` that will create a booking (none while suspended).
    pub next: Option<DateTime<Utc>>,
    /// When to reconcile again: the next fire (skipped or not), or earlier, while suspended,
    /// the instant a pending fire can no longer be booked.
    pub wake: Option<DateTime<Utc>>,
    /// The next [`UPCOMING_FIRES`] fires after `now`, each with the reason a skip date cancels
    /// it (none while suspended).
    pub upcoming: Vec<(DateTime<Utc>, Option<String>)>,
}

/// Decides which fire, if any, a scheduler must create a booking for at `now`.
///
/// `handled_until` is the latest instant whose fires are already accounted for: the last fire a
/// booking was created (or skipped) for, or the scheduler's creation time when it never fired.
/// Fires in `(handled_until, now]` are due. `skips` are the scheduler's skip dates (its own and
/// its calendars'), evaluated in its `timeZone`.
pub fn plan_scheduler(
    spec: &BookingSchedulerSpec,
    skips: &Skips,
    handled_until: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<SchedulerPlan, ScheduleError> {
    let schedule = CronSchedule::parse_in(&spec.schedule, spec.time_zone.as_deref())?;
    let tz = schedule.time_zone();
    let suspended = spec.suspend == Some(true);
    let duration = Duration::minutes(i64::from(spec.duration));
    let mut plan = SchedulerPlan {
        create: None,
        skipped: None,
        cancelled: None,
        suspended,
        next: None,
        wake: schedule.next_after(now),
        upcoming: Vec::new(),
    };
    if !suspended {
        let mut ahead = schedule.fires_after(now).take(MAX_FIRES_SEARCHED);
        for fire in ahead.by_ref() {
            let reason = skips.skipped(fire, tz).map(str::to_owned);
            let books = reason.is_none();
            if plan.upcoming.len() < UPCOMING_FIRES {
                plan.upcoming.push((fire, reason));
            }
            if books && plan.next.is_none() {
                plan.next = Some(fire);
            }
            if plan.next.is_some() && plan.upcoming.len() >= UPCOMING_FIRES {
                break;
            }
        }
    }
    // Only the most recent due fire matters; older ones are superseded by it, as with CronJobs.
    // A fire missed more than the look-back ago is neither created nor worth reporting.
    let lookback = (now - handled_until).min(Duration::days(MAX_LOOKBACK_DAYS));
    let Some(fire) = schedule
        .last_at_or_before(now, lookback)
        .filter(|f| *f > handled_until)
    else {
        return Ok(plan);
    };
    if let Some(reason) = skips.skipped(fire, tz) {
        plan.cancelled = Some((fire, reason.to_owned()));
        return Ok(plan);
    }
    let deadline = spec
        .starting_deadline_seconds
        .map(|d| fire + Duration::seconds(d.max(0)));
    // The last instant the fire can still be booked: its deadline, and before its slot ends.
    let bookable_until = deadline.map_or(fire + duration, |d| d.min(fire + duration));
    let within_deadline = deadline.is_none_or(|d| now <= d);
    let slot_open = fire + duration > now;
    if !(within_deadline && slot_open) {
        plan.skipped = Some(fire);
    } else if suspended {
        // Pending: booked if resumed in time, else dropped silently at `bookable_until`.
        let expiry = bookable_until + Duration::seconds(1);
        plan.wake = Some(plan.wake.map_or(expiry, |w| w.min(expiry)));
    } else {
        plan.create = Some(fire);
    }
    Ok(plan)
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
