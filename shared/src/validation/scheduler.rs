//! The rules and defaults of a BookingScheduler.

use super::*;

/// Validates a BookingScheduler's spec.
///
/// Rules: `timeZone` is an IANA zone; `schedule` parses (the message quotes the expression and
/// the parser's reason); `duration` is at least one minute, within
/// [`Policy::max_booking_duration`] and not longer than the shortest interval between two fires
/// after `now` (else the scheduler's own bookings would overlap); the template is valid as a
/// booking (resource name, user id, notifications); `skipDates` hold at most
/// [`MAX_SCHEDULER_SKIP_DATES`] readable entries, a `fire` still ahead being a fire time of the
/// schedule; `calendars` name at most [`MAX_SCHEDULER_CALENDARS`] distinct BookingCalendars.
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
    check_skip_dates(
        &mut r,
        "spec.skipDates",
        &spec.skip_dates,
        MAX_SCHEDULER_SKIP_DATES,
    );
    if let Some(schedule) = schedule.as_ref().filter(|_| zone.is_some()) {
        check_skipped_fires_are_fires(&mut r, &spec.skip_dates, schedule, now);
    }
    check_calendar_refs(&mut r, &spec.calendars);
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

/// Validates a BookingCalendar's spec: at most [`MAX_CALENDAR_SKIP_DATES`] entries, each
/// readable (see [`parse_skip_date`]).
pub fn validate_booking_calendar(spec: &BookingCalendarSpec) -> Outcome {
    let mut r = Report::default();
    check_skip_dates(
        &mut r,
        "spec.skipDates",
        &spec.skip_dates,
        MAX_CALENDAR_SKIP_DATES,
    );
    r.finish()
}

/// Skip-date entries: at most `max`, each exactly one readable form with a short reason.
fn check_skip_dates(r: &mut Report, field: &str, entries: &[SkipDate], max: usize) {
    if entries.len() > max {
        r.deny(
            field,
            format!(
                "{field}: {} entries are more than the {max} allowed; use ranges (from/to) for consecutive days, or move shared holidays to a BookingCalendar",
                entries.len()
            ),
        );
    }
    for (i, entry) in entries.iter().enumerate() {
        if let Err(e) = parse_skip_date(&format!("{field}[{i}]"), entry) {
            r.deny(e.field, e.message);
        }
    }
}

/// A `fire` entry still ahead must be a fire time of the schedule, else it cancels nothing (a
/// typo in the minute, or the wrong offset). Past entries are not checked: a schedule may have
/// changed since.
fn check_skipped_fires_are_fires(
    r: &mut Report,
    entries: &[SkipDate],
    schedule: &CronSchedule,
    now: DateTime<Utc>,
) {
    for (i, entry) in entries.iter().enumerate() {
        let field = format!("spec.skipDates[{i}].fire");
        let Some(Ok(SkipWhen::Fire(at))) = entry
            .fire
            .as_deref()
            .map(|f| parse_rfc3339(&field, f))
            .map(|f| f.map(SkipWhen::Fire))
        else {
            continue;
        };
        if at <= now || schedule.next_after(at - Duration::seconds(1)) == Some(at) {
            continue;
        }
        let before = schedule.last_at_or_before(at, Duration::days(SCHEDULE_HORIZON_DAYS));
        let after = schedule.next_after(at);
        let around = [before, after]
            .into_iter()
            .flatten()
            .map(format_rfc3339)
            .collect::<Vec<_>>()
            .join(" and ");
        r.deny(
            field.clone(),
            format!(
                "{field}: {:?} is not a fire time of spec.schedule {:?} in its timeZone, so it would cancel nothing; the fires around it are {around}: use one of them",
                entry.fire.as_deref().unwrap_or_default(),
                schedule.expression()
            ),
        );
    }
}

/// Calendar references: at most [`MAX_SCHEDULER_CALENDARS`], each a valid object name, none twice.
fn check_calendar_refs(r: &mut Report, calendars: &[CalendarRef]) {
    if calendars.len() > MAX_SCHEDULER_CALENDARS {
        r.deny(
            "spec.calendars",
            format!(
                "spec.calendars: {} calendars are more than the {MAX_SCHEDULER_CALENDARS} allowed; merge their skip dates into fewer BookingCalendars",
                calendars.len()
            ),
        );
    }
    for (i, c) in calendars.iter().enumerate() {
        let field = format!("spec.calendars[{i}].name");
        if !is_object_name(&c.name) {
            r.deny(
                field.clone(),
                format!(
                    "{field}: {:?} is not a valid BookingCalendar name; use the name of a BookingCalendar in the same namespace: at most 253 lower-case letters, digits, '-' or '.', starting and ending with a letter or digit, e.g. public-holidays",
                    c.name
                ),
            );
        } else if calendars[..i].iter().any(|o| o.name == c.name) {
            r.deny(
                field.clone(),
                format!(
                    "{field}: {:?} is referenced twice; remove the repeated entry",
                    c.name
                ),
            );
        }
    }
}

/// Fills the absent fields of a BookingScheduler: `timeZone: UTC`, `suspend: false`, the template's `user_id`
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
    if scheduler.spec.suspend.is_none() {
        // As a CronJob's: `kubectl get bks` then shows SUSPEND false rather than nothing.
        scheduler.spec.suspend = Some(false);
        out.push(Defaulted::new("spec.suspend", "false"));
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
