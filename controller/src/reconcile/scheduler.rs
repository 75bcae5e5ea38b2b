//! The BookingScheduler reconciler: one Booking per fire time, created at the fire time.
//!
//! Decisions come from `booking_shared::scheduling::plan_scheduler` (pure, clock injected); this
//! module creates the booking, records the fire in the status, applies the history limit, and
//! requeues exactly at the next fire time. Booking names are derived from the scheduler and the
//! fire time, so a retry, a restart or a second replica can only create the same object
//! (AlreadyExists counts as success). Bookings carry no ownerReference: deleting a scheduler
//! keeps the bookings it created, as the original documents.

use std::{collections::BTreeMap, sync::Arc, time::Duration as StdDuration};

use booking_shared::{
    api::{Booking, BookingPhase, BookingScheduler, BookingSchedulerStatus},
    scheduling::{SCHEDULER_LABEL, booking_for_fire, booking_name, plan_scheduler},
    time::{Slot, format_rfc3339, parse_rfc3339},
};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use kube::{
    Api, Resource as _, ResourceExt,
    api::{DeleteParams, ListParams, ObjectMeta, Patch},
    runtime::{
        Controller,
        controller::Action,
        events::{Event, EventType, Recorder},
    },
};
use sha2::{Digest, Sha256};

use crate::conditions::{CondSpec, chrono_time, merge};

/// The clock: a function returning "now", injected so tests can move time.
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// What the scheduler reconciler needs, built once in `main`.
pub struct SchedulerContext {
    /// Kubernetes client.
    pub client: kube::Client,
    /// Event recorder.
    pub recorder: Recorder,
    /// The clock.
    pub clock: Clock,
}

/// Errors that make a reconcile retry with backoff.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    /// The Kubernetes API failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The object lacks something every stored object has.
    #[error("malformed object: {0}")]
    Malformed(String),
}

/// Runs the scheduler controller `controller` (over BookingSchedulers) until `shutdown`
/// resolves.
pub async fn run(
    controller: Controller<BookingScheduler>,
    ctx: Arc<SchedulerContext>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    controller
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "scheduler reconcile ended in error");
            }
        })
        .await;
}

fn error_policy(
    _: Arc<BookingScheduler>,
    error: &SchedulerError,
    _: Arc<SchedulerContext>,
) -> Action {
    tracing::warn!(error = %error, "scheduler reconcile failed; retrying");
    Action::requeue(StdDuration::from_secs(5))
}

/// A label value (≤ 63 characters) naming the scheduler.
pub fn scheduler_label_value(name: &str) -> String {
    if name.len() <= 63 {
        return name.to_owned();
    }
    let digest = hex::encode(&Sha256::digest(name.as_bytes())[..4]);
    let mut prefix: String = name.chars().take(63 - 9).collect();
    while prefix.ends_with(['-', '.', '_']) {
        prefix.pop();
    }
    format!("{prefix}-{digest}")
}

/// Reconciles one BookingScheduler.
#[tracing::instrument(skip(sched, ctx), fields(name = %sched.name_any(), namespace = sched.namespace().unwrap_or_default()))]
pub async fn reconcile(
    sched: Arc<BookingScheduler>,
    ctx: Arc<SchedulerContext>,
) -> Result<Action, SchedulerError> {
    if sched.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = sched.name_any();
    let ns = sched
        .namespace()
        .ok_or_else(|| SchedulerError::Malformed("BookingScheduler without namespace".into()))?;
    let now = (ctx.clock)();
    let old = sched.status.clone().unwrap_or_default();
    let created = sched
        .metadata
        .creation_timestamp
        .as_ref()
        .map(chrono_time)
        .unwrap_or(now);
    let handled_until = old
        .last_fire_time
        .as_deref()
        .and_then(|t| parse_rfc3339("status.lastFireTime", t).ok())
        .unwrap_or(created);

    let plan = match plan_scheduler(&sched.spec, handled_until, now) {
        Ok(plan) => plan,
        Err(e) => {
            // Only possible when admission was bypassed: report, create nothing, and wait for
            // the spec to change — no crash, no hot loop.
            let conds = [CondSpec::new(
                "Ready",
                false,
                "InvalidSchedule",
                &e.to_string(),
            )];
            let status = BookingSchedulerStatus {
                next: None,
                conditions: merge(&old.conditions, &conds, sched.metadata.generation, now),
                observed_generation: sched.metadata.generation,
                ..old.clone()
            };
            if status != old {
                publish(
                    &ctx,
                    &sched,
                    EventType::Warning,
                    "InvalidSchedule",
                    "Schedule",
                    e.to_string(),
                )
                .await;
                patch_status(&ctx.client, &ns, &name, &status).await?;
            }
            return Ok(Action::await_change());
        }
    };

    let mut status = old.clone();
    let mut ready = CondSpec::new("Ready", true, "Scheduled", "waiting for the next fire time");
    let bookings: Api<Booking> = Api::namespaced(ctx.client.clone(), &ns);

    if let Some(fire) = plan.create {
        let booking_name = booking_name(&name, fire);
        let booking = Booking {
            metadata: ObjectMeta {
                name: Some(booking_name.clone()),
                namespace: Some(ns.clone()),
                labels: Some(BTreeMap::from([(
                    SCHEDULER_LABEL.to_owned(),
                    scheduler_label_value(&name),
                )])),
                ..ObjectMeta::default()
            },
            spec: booking_for_fire(&sched.spec, fire),
            status: None,
        };
        match bookings.create(&super::post_params(), &booking).await {
            Ok(_) => {
                tracing::info!(booking = %booking_name, fire = %fire, "created booking");
                publish(
                    &ctx,
                    &sched,
                    EventType::Normal,
                    "BookingCreated",
                    "CreateBooking",
                    format!(
                        "created booking {booking_name} for the fire at {}",
                        format_rfc3339(fire)
                    ),
                )
                .await;
                ready.message = format!("created booking {booking_name}");
                status.last_booking = Some(booking_name);
            }
            Err(kube::Error::Api(e)) if e.is_already_exists() => {
                status.last_booking = Some(booking_name);
            }
            // Refused by admission (e.g. it overlaps another booking): retrying cannot help, so
            // the fire is recorded as handled and the reason is shown.
            Err(kube::Error::Api(e)) if (400..500).contains(&e.code) => {
                let message = format!(
                    "booking {booking_name} for the fire at {} was refused: {}",
                    format_rfc3339(fire),
                    e.message
                );
                publish(
                    &ctx,
                    &sched,
                    EventType::Warning,
                    "BookingRefused",
                    "CreateBooking",
                    message.clone(),
                )
                .await;
                ready = CondSpec::new("Ready", false, "BookingRefused", &message);
            }
            Err(e) => return Err(e.into()),
        }
        status.last_fire_time = Some(format_rfc3339(fire));
    } else if let Some(missed) = plan.skipped {
        let message = format!(
            "missed the fire at {} (the controller was not running); skipped because {}",
            format_rfc3339(missed),
            if sched.spec.starting_deadline_seconds.is_some() {
                "it is older than startingDeadlineSeconds or its booking would already have ended"
            } else {
                "its booking would already have ended"
            }
        );
        publish(
            &ctx,
            &sched,
            EventType::Warning,
            "MissedFire",
            "CreateBooking",
            message.clone(),
        )
        .await;
        ready = CondSpec::new("Ready", true, "MissedFire", &message);
        status.last_fire_time = Some(format_rfc3339(missed));
    } else if let Some(previous) = old.conditions.iter().find(|c| c.type_ == "Ready") {
        // Keep the last outcome visible until the next fire.
        ready = CondSpec::new(
            "Ready",
            previous.status == "True",
            &previous.reason,
            &previous.message,
        );
    }

    if let Some(limit) = sched.spec.finished_bookings_history_limit {
        prune_history(&bookings, &name, limit as usize, now).await?;
    }

    status.next = plan.next.map(format_rfc3339);
    status.observed_generation = sched.metadata.generation;
    status.conditions = merge(&old.conditions, &[ready], sched.metadata.generation, now);
    if status != old {
        patch_status(&ctx.client, &ns, &name, &status).await?;
    }
    Ok(match plan.next {
        Some(next) => Action::requeue((next - now).to_std().unwrap_or(StdDuration::ZERO)),
        None => Action::await_change(),
    })
}

/// Deletes the oldest FINISHED bookings of a scheduler beyond `keep`.
async fn prune_history(
    bookings: &Api<Booking>,
    scheduler: &str,
    keep: usize,
    now: DateTime<Utc>,
) -> Result<(), SchedulerError> {
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

async fn patch_status(
    client: &kube::Client,
    ns: &str,
    name: &str,
    status: &BookingSchedulerStatus,
) -> Result<(), SchedulerError> {
    let api: Api<BookingScheduler> = Api::namespaced(client.clone(), ns);
    let mut value =
        serde_json::to_value(status).map_err(|e| SchedulerError::Malformed(e.to_string()))?;
    if let Some(map) = value.as_object_mut() {
        // A merge patch only clears a field that is sent as null.
        map.entry("next").or_insert(serde_json::Value::Null);
    }
    api.patch_status(
        name,
        &super::patch_params(),
        &Patch::Merge(serde_json::json!({ "status": value })),
    )
    .await?;
    Ok(())
}

async fn publish(
    ctx: &SchedulerContext,
    sched: &BookingScheduler,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: action.to_owned(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &sched.object_ref(&())).await {
        tracing::warn!(error = %e, reason, "could not publish event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_stay_valid() {
        assert_eq!(scheduler_label_value("nightly"), "nightly");
        let long = "s".repeat(100);
        let v = scheduler_label_value(&long);
        assert!(v.len() <= 63, "{v}");
        assert_ne!(v, scheduler_label_value(&format!("{long}x")));
    }
}
