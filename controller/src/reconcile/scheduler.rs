//! The BookingScheduler reconciler: one Booking per fire time, created at the fire time.
//!
//! Decisions come from `booking_shared::scheduling::plan_scheduler` (pure, clock injected); this
//! module creates the booking, records the fire in the status, applies the history limit, and
//! requeues exactly at the next fire time. Booking names are derived from the scheduler and the
//! fire time, so a retry, a restart or a second replica can only create the same object
//! (AlreadyExists counts as success). Bookings carry no ownerReference: deleting a scheduler
//! keeps the bookings it created, as the original documents.

use std::{collections::BTreeMap, sync::Arc};

use booking_shared::{
    api::{
        Booking, BookingCalendar, BookingPhase, BookingScheduler, BookingSchedulerStatus,
        SkippedFire, UpcomingFire,
    },
    scheduling::{
        SCHEDULER_LABEL, SchedulerPlan, SkipDateError, Skips, booking_for_fire, booking_name,
        plan_scheduler, scheduler_label_value,
    },
    time::{Slot, format_rfc3339, kube_time, parse_rfc3339},
};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Api, Resource as _, ResourceExt,
    api::{DeleteParams, ListParams, ObjectMeta},
    runtime::controller::Action,
};

use super::{ns_name, write_status};
use crate::conditions::{CondSpec, merge};
use crate::context::{Context, post_params};
use crate::error::Result;
use crate::metrics::FireOutcome;

/// Reconciles one BookingScheduler.
#[tracing::instrument(skip_all, fields(namespace, name))]
pub async fn reconcile(sched: Arc<BookingScheduler>, ctx: Arc<Context>) -> Result<Action> {
    if sched.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let (ns, name) = ns_name(sched.as_ref())?;
    let now = ctx.now();
    let old = sched.status.clone().unwrap_or_default();
    let created = sched
        .metadata
        .creation_timestamp
        .as_ref()
        .map(kube_time)
        .unwrap_or(now);
    let handled_until = old
        .last_fire_time
        .as_deref()
        .and_then(|t| parse_rfc3339("status.lastFireTime", t).ok())
        .unwrap_or(created);
    let skips = match skips_of(&ctx, &sched, &ns).await? {
        Ok(skips) => skips,
        Err(refusal) => return hold(&ctx, &sched, &old, refusal, now).await,
    };
    let plan = match plan_scheduler(&sched.spec, &skips, handled_until, now) {
        Ok(plan) => plan,
        Err(e) => {
            // Only possible when admission was bypassed: report, create nothing, and wait for
            // the spec to change — no crash, no hot loop.
            let refusal = Refusal {
                reason: "InvalidSchedule",
                message: e.to_string(),
                event: Some("Schedule"),
            };
            return hold(&ctx, &sched, &old, refusal, now).await;
        }
    };
    let bookings: Api<Booking> = Api::namespaced(ctx.client.clone(), &ns);
    let mut status = old.clone();
    let ready = fire(&ctx, &sched, &bookings, &plan, &mut status).await?;
    if let Some(limit) = sched.spec.finished_bookings_history_limit {
        prune_history(&bookings, &name, limit as usize, now).await?;
    }
    status.next = plan.next.map(format_rfc3339);
    status.upcoming = plan
        .upcoming
        .iter()
        .map(|(at, reason)| UpcomingFire {
            fire_time: format_rfc3339(*at),
            skipped: reason.is_some(),
            reason: reason.clone(),
        })
        .collect();
    status.observed_generation = sched.metadata.generation;
    status.conditions = merge(&old.conditions, &[ready], sched.metadata.generation, now);
    write_status(&ctx, sched.as_ref(), &status, None).await?;
    Ok(match plan.wake {
        Some(wake) => Action::requeue(ctx.until(wake)),
        None => Action::await_change(),
    })
}

/// Why a scheduler creates nothing until its spec or a calendar changes: Ready=False with this
/// reason and message, and a Warning Event (action `event`) when the status changes.
struct Refusal {
    reason: &'static str,
    message: String,
    event: Option<&'static str>,
}

/// Records a [`Refusal`]: no booking, no next fire, and fires stay pending (they are judged by
/// the normal missed-fire rule once the cause is fixed). Waits for a change: calendars are
/// watched, so one that appears wakes the scheduler.
async fn hold(
    ctx: &Context,
    sched: &BookingScheduler,
    old: &BookingSchedulerStatus,
    refusal: Refusal,
    now: DateTime<Utc>,
) -> Result<Action> {
    let conds = [CondSpec::new(
        "Ready",
        false,
        refusal.reason,
        &refusal.message,
    )];
    let status = BookingSchedulerStatus {
        next: None,
        upcoming: Vec::new(),
        conditions: merge(&old.conditions, &conds, sched.metadata.generation, now),
        observed_generation: sched.metadata.generation,
        ..old.clone()
    };
    if write_status(ctx, sched, &status, None).await?.is_some()
        && let Some(action) = refusal.event
    {
        ctx.events
            .publish(sched, true, refusal.reason, action, refusal.message)
            .await;
    }
    Ok(Action::await_change())
}

/// The scheduler's skip dates: its own `spec.skipDates` and those of every BookingCalendar it
/// references (read from the API server, so a calendar just created or changed counts at
/// once). A refusal when a calendar does not exist (fail safe: a holiday must not be booked) or
/// an entry cannot be read (only when admission was bypassed).
async fn skips_of(
    ctx: &Context,
    sched: &BookingScheduler,
    ns: &str,
) -> Result<std::result::Result<Skips, Refusal>> {
    let unreadable = |e: SkipDateError| Refusal {
        reason: "InvalidSkipDates",
        message: e.message,
        event: Some("SkipDates"),
    };
    let mut skips = Skips::default();
    if let Err(e) = skips.add("spec.skipDates", "spec.skipDates", &sched.spec.skip_dates) {
        return Ok(Err(unreadable(e)));
    }
    let calendars: Api<BookingCalendar> = Api::namespaced(ctx.client.clone(), ns);
    let mut missing = Vec::new();
    for reference in &sched.spec.calendars {
        let Some(calendar) = calendars.get_opt(&reference.name).await? else {
            missing.push(reference.name.as_str());
            continue;
        };
        let source = format!("calendar {}", reference.name);
        let prefix = format!("BookingCalendar {}: spec.skipDates", reference.name);
        if let Err(e) = skips.add(&prefix, &source, &calendar.spec.skip_dates) {
            return Ok(Err(unreadable(e)));
        }
    }
    if !missing.is_empty() {
        let message = format!(
            "spec.calendars names BookingCalendar {} that does not exist in namespace {ns}; no fire creates a booking until it does (a holiday must not be booked): create it, or remove it from spec.calendars",
            missing.join(", ")
        );
        return Ok(Err(Refusal {
            reason: "CalendarNotFound",
            message,
            event: Some("ReadCalendar"),
        }));
    }
    Ok(Ok(skips))
}

/// The Ready condition while `spec.suspend` is true.
fn suspended() -> CondSpec {
    CondSpec::new(
        "Ready",
        true,
        "Suspended",
        "spec.suspend is true: no fire creates a booking; set it to false to resume (only the most recent fire missed meanwhile is booked, within startingDeadlineSeconds and while its slot is open)",
    )
}

/// Acts on the plan's fire: creates its booking, records a fire a skip date cancels, or records
/// a missed fire. Records the fire in `status` and returns the Ready condition.
async fn fire(
    ctx: &Context,
    sched: &BookingScheduler,
    bookings: &Api<Booking>,
    plan: &SchedulerPlan,
    status: &mut BookingSchedulerStatus,
) -> Result<CondSpec> {
    if let Some(fire) = plan.create {
        let ready = create_booking(ctx, sched, bookings, fire, status).await?;
        status.last_fire_time = Some(format_rfc3339(fire));
        return Ok(ready);
    }
    if let Some((at, reason)) = &plan.cancelled {
        ctx.metrics.scheduler_fire(FireOutcome::Skipped);
        let message = format!(
            "skipped the fire at {}: {reason}; no booking created",
            format_rfc3339(*at)
        );
        ctx.events
            .publish_related(
                sched,
                Some(booking_ref(sched, *at)),
                false,
                "SkippedFire",
                "CreateBooking",
                message.clone(),
            )
            .await;
        status.last_fire_time = Some(format_rfc3339(*at));
        status.last_skipped = Some(SkippedFire {
            fire_time: format_rfc3339(*at),
            reason: reason.clone(),
        });
        return Ok(if plan.suspended {
            suspended()
        } else {
            CondSpec::new("Ready", true, "SkippedFire", &message)
        });
    }
    if let Some(missed) = plan.skipped {
        // Last seen suspended: the fire passed during the suspension (the resume came after
        // its deadline), which is no fault.
        let was_suspended = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.reason == "Suspended");
        status.last_fire_time = Some(format_rfc3339(missed));
        if plan.suspended {
            // Not booked because of the suspension: no fault, no warning.
            return Ok(suspended());
        }
        if was_suspended {
            return Ok(CondSpec::new(
                "Ready",
                true,
                "Scheduled",
                "resumed; the fire missed while suspended is not booked (beyond startingDeadlineSeconds or its slot ended)",
            ));
        }
        return Ok(missed_fire(ctx, sched, missed).await);
    }
    if plan.suspended {
        return Ok(suspended());
    }
    // Keep the last outcome visible until the next fire; a cause that is gone (suspension, a
    // missing calendar, an unreadable entry) gives way to the schedule.
    let gone = [
        "Suspended",
        "CalendarNotFound",
        "InvalidSkipDates",
        "InvalidSchedule",
    ];
    Ok(
        match status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready" && !gone.contains(&c.reason.as_str()))
        {
            Some(previous) => CondSpec::new(
                "Ready",
                previous.status == "True",
                &previous.reason,
                &previous.message,
            ),
            None => CondSpec::new("Ready", true, "Scheduled", "waiting for the next fire time"),
        },
    )
}

/// Reports a fire missed while the controller was not running, and returns the Ready condition.
async fn missed_fire(ctx: &Context, sched: &BookingScheduler, missed: DateTime<Utc>) -> CondSpec {
    ctx.metrics.scheduler_fire(FireOutcome::Missed);
    let message = format!(
        "missed the fire at {} (the controller was not running); skipped because {}",
        format_rfc3339(missed),
        if sched.spec.starting_deadline_seconds.is_some() {
            "it is older than startingDeadlineSeconds or its booking would already have ended"
        } else {
            "its booking would already have ended"
        }
    );
    ctx.events
        .publish_related(
            sched,
            Some(booking_ref(sched, missed)),
            true,
            "MissedFire",
            "CreateBooking",
            message.clone(),
        )
        .await;
    CondSpec::new("Ready", true, "MissedFire", &message)
}

/// Creates the booking of the fire at `fire`; AlreadyExists counts as created (a retry, a
/// restart or a second replica can only create the same object).
async fn create_booking(
    ctx: &Context,
    sched: &BookingScheduler,
    bookings: &Api<Booking>,
    fire: DateTime<Utc>,
    status: &mut BookingSchedulerStatus,
) -> Result<CondSpec> {
    let name = sched.name_any();
    let booking_name = booking_name(&name, fire);
    let booking = Booking {
        metadata: ObjectMeta {
            name: Some(booking_name.clone()),
            namespace: sched.namespace(),
            labels: Some(BTreeMap::from([(
                SCHEDULER_LABEL.to_owned(),
                scheduler_label_value(&name),
            )])),
            ..ObjectMeta::default()
        },
        spec: booking_for_fire(&sched.spec, fire),
        status: None,
    };
    let at = format_rfc3339(fire);
    match bookings.create(&post_params(), &booking).await {
        Ok(_) => {
            ctx.metrics.scheduler_fire(FireOutcome::Booked);
            tracing::info!(booking = %booking_name, fire = %fire, "created booking");
            let note = format!("created booking {booking_name} for the fire at {at}");
            ctx.events
                .publish_related(
                    sched,
                    Some(booking_ref(sched, fire)),
                    false,
                    "BookingCreated",
                    "CreateBooking",
                    note,
                )
                .await;
            let message = format!("created booking {booking_name}");
            status.last_booking = Some(booking_name);
            Ok(CondSpec::new("Ready", true, "Scheduled", &message))
        }
        Err(kube::Error::Api(e)) if e.is_already_exists() => {
            status.last_booking = Some(booking_name);
            Ok(CondSpec::new(
                "Ready",
                true,
                "Scheduled",
                "waiting for the next fire time",
            ))
        }
        // Refused for good (e.g. admission says it overlaps another booking): retrying cannot
        // help, so the fire is recorded as handled and the reason is shown. Anything else
        // (throttling, a server or transport failure, an expired credential) fails the
        // reconcile, which is retried with the per-object backoff; the fire stays pending.
        Err(kube::Error::Api(e)) if refusal_is_permanent(e.code) => {
            ctx.metrics.scheduler_fire(FireOutcome::Refused);
            let message = format!(
                "booking {booking_name} for the fire at {at} was refused: {}",
                e.message
            );
            ctx.events
                .publish(
                    sched,
                    true,
                    "BookingRefused",
                    "CreateBooking",
                    message.clone(),
                )
                .await;
            Ok(CondSpec::new("Ready", false, "BookingRefused", &message))
        }
        Err(e) => Err(e.into()),
    }
}

/// The Booking of `sched`'s fire at `fire` (created, or that would have been): the `related`
/// object of the fire's Event, so that each fire's Event is one of its own rather than a repeat
/// of the first one's note.
fn booking_ref(sched: &BookingScheduler, fire: DateTime<Utc>) -> ObjectReference {
    ObjectReference {
        api_version: Some(Booking::api_version(&()).into_owned()),
        kind: Some(Booking::kind(&()).into_owned()),
        name: Some(booking_name(&sched.name_any(), fire)),
        namespace: sched.namespace(),
        ..ObjectReference::default()
    }
}

/// Whether an API server answer of HTTP `code` to a booking create refuses the fire for good:
/// 400 (malformed), 403 (forbidden, or denied by an admission webhook) and 422 (invalid, e.g.
/// the validating webhook's overlap refusal). Every other code — 429 (throttled), 5xx, 401 (a
/// credential being rotated), 404/409 of a namespace being created — may pass, so the fire is
/// retried with backoff.
pub fn refusal_is_permanent(code: u16) -> bool {
    matches!(code, 400 | 403 | 422)
}

/// Deletes the oldest FINISHED bookings of a scheduler beyond `keep`.
async fn prune_history(
    bookings: &Api<Booking>,
    scheduler: &str,
    keep: usize,
    now: DateTime<Utc>,
) -> Result<()> {
    let selector = format!("{SCHEDULER_LABEL}={}", scheduler_label_value(scheduler));
    let list = bookings
        .list(&ListParams::default().labels(&selector))
        .await?;
    let mut finished: Vec<(DateTime<Utc>, String)> = list
        .items
        .iter()
        .filter_map(|b| {
            let slot = Slot::of_booking(&b.spec).ok()?;
            let done = b.status.as_ref().and_then(|s| s.status) == Some(BookingPhase::Finished)
                || slot.end <= now;
            done.then(|| (slot.end, b.name_any()))
        })
        .collect();
    finished.sort();
    let excess = finished.len().saturating_sub(keep);
    for (_, name) in finished.into_iter().take(excess) {
        match bookings.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {
                tracing::info!(booking = %name, "deleted finished booking beyond the history limit")
            }
            Err(kube::Error::Api(e)) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::refusal_is_permanent;

    #[test]
    fn only_400_403_and_422_refuse_a_fire_for_good() {
        let table = [
            (400, true),
            (401, false),
            (403, true),
            (404, false),
            (408, false),
            (409, false),
            (422, true),
            (429, false),
            (500, false),
            (502, false),
            (503, false),
            (504, false),
        ];
        for (code, permanent) in table {
            assert_eq!(refusal_is_permanent(code), permanent, "HTTP {code}");
        }
    }
}
