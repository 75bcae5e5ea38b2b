//! The rules and defaults of a BookingScheduler.

use super::*;

/// Validates a BookingScheduler's spec.
///
/// Rules: `timeZone` is an IANA zone; `schedule` parses (the message quotes the expression and
/// the parser's reason); `duration` is at least one minute, within
/// [`Policy::max_booking_duration`] and not longer than the shortest interval between two fires
/// after `now` (else the scheduler's own bookings would overlap); the template is valid as a
/// booking (resource name, user id, notifications).
pub fn validate_booking_scheduler(
    spec: &BookingSchedulerSpec,
    policy: &Policy,
    now: DateTime<Utc>,
) -> Outcome {
    let mut r = Report::default();
    let zone = match spec.time_zone.as_deref() {
        Some(z) => match parse_time_zone(z) {
            Ok(tz) => Some(tz),
            Err(e) => {
                r.deny("spec.timeZone", e.to_string());
                None
            }
        },
        None => Some(chrono_tz::Tz::UTC),
    };
    let schedule = match CronSchedule::parse(&spec.schedule, zone.unwrap_or(chrono_tz::Tz::UTC)) {
        Ok(s) => Some(s),
        Err(e) => {
            r.deny("spec.schedule", e.to_string());
            None
        }
    };
    let duration = Duration::minutes(i64::from(spec.duration));
    if spec.duration == 0 {
        r.deny(
            "spec.duration",
            "spec.duration: 0 minutes is too short; give the length of each booking in minutes, at least 1",
        );
    } else {
        if let Some(max) = policy.max_booking_duration
            && duration > max
        {
            r.deny(
                "spec.duration",
                format!(
                    "spec.duration: {} minutes is longer than the {} this cluster allows for a booking; use a shorter duration",
                    spec.duration,
                    human_duration(max)
                ),
            );
        }
        if let Some(schedule) = schedule.as_ref().filter(|_| zone.is_some())
            && let Some((gap, a, b)) = schedule.shortest_interval(
                now,
                SCHEDULE_MAX_FIRES,
                Duration::days(SCHEDULE_HORIZON_DAYS),
                Some(duration),
            )
            && gap < duration
        {
            r.deny(
                "spec.duration",
                format!(
                    "spec.duration: {} minutes is longer than the {} between two fires of schedule {:?} (at {} and {}), so the scheduler's own bookings would overlap; use a duration of at most {} minutes or a schedule that fires less often",
                    spec.duration,
                    human_duration(gap),
                    spec.schedule,
                    format_rfc3339(a),
                    format_rfc3339(b),
                    gap.num_minutes()
                ),
            );
        }
    }
    if let Some(deadline) = spec.starting_deadline_seconds
        && deadline < 0
    {
        r.deny(
            "spec.startingDeadlineSeconds",
            format!(
                "spec.startingDeadlineSeconds: {deadline} is negative; give a number of seconds of at least 0, or leave it out for no deadline"
            ),
        );
    }
    let t = &spec.booking_template;
    check_resource_name(
        &mut r,
        "spec.bookingTemplate.resource_name",
        &t.resource_name,
    );
    check_user_id(&mut r, "spec.bookingTemplate.user_id", &t.user_id);
    let sample_slot = Slot::new(now, now + duration);
    check_notifications(
        &mut r,
        "spec.bookingTemplate.notifications",
        &t.notifications,
        sample_slot,
    );
    r.finish()
}

/// Fills the absent fields of a BookingScheduler: `timeZone: UTC`, the template's `user_id`
/// (the old object's value on update, else the requesting user's name) and its notifications'
/// `leadMinutes`.
pub fn default_booking_scheduler(
    scheduler: &mut BookingScheduler,
    old: Option<&BookingScheduler>,
    requesting_user: &str,
) -> Vec<Defaulted> {
    let mut out = Vec::new();
    if scheduler.spec.time_zone.is_none() {
        scheduler.spec.time_zone = Some("UTC".to_owned());
        out.push(Defaulted::new("spec.timeZone", "UTC"));
    }
    let t = &mut scheduler.spec.booking_template;
    if t.user_id.is_empty() {
        let inherited = old
            .map(|o| o.spec.booking_template.user_id.as_str())
            .filter(|u| !u.is_empty());
        if let Some(user) = inherited.or(Some(requesting_user).filter(|u| !u.is_empty())) {
            t.user_id = user.to_owned();
            out.push(Defaulted::new("spec.bookingTemplate.user_id", user));
        }
    }
    default_lead_minutes(
        &mut t.notifications,
        "spec.bookingTemplate.notifications",
        &mut out,
    );
    out
}
