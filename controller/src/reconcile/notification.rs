//! The notification reconciler: sends each notification of a booking once, shortly before the
//! booking ends, and records it in the booking's status.
//!
//! It runs as its own controller over Bookings, so a slow or failing SMTP server or webhook never
//! delays the start or stop of any group. Timing comes from `booking_shared::scheduling` (pure,
//! clock injected): a notification is due `leadMinutes` (default 20) before the end, never before
//! the start and never after the end — after downtime, an ended booking sends nothing.
//!
//! At most once: a notification is recorded in `status.notificationsSent` before it is sent (a
//! crash between the two loses that one mail rather than sending it twice), after a fresh read
//! of the booking; a send that may succeed later gives its record back. The Lease is released
//! only after every reconcile in flight has finished, so a successor never sends what its
//! predecessor is sending. Emails carry a Message-ID derived from the booking's uid and the
//! notification. Failures set the condition
//! `NotificationFailed`, publish a Warning Event and are retried with exponential backoff
//! (30 s doubling to 10 min) while the booking lasts; an unknown type or an unusable recipient
//! is reported once and not retried.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration as StdDuration,
};

use booking_shared::{
    api::{Booking, BookingPhase},
    scheduling::{lead_time, notification_due_at, notification_should_send},
    time::{Slot, format_rfc3339},
};
use chrono::{DateTime, Duration, Utc};
use futures::StreamExt;
use kube::{
    Api, Resource as _, ResourceExt,
    api::Patch,
    runtime::{
        Controller,
        controller::Action,
        events::{Event, EventType, Recorder},
    },
};

use super::scheduler::Clock;
use crate::{
    conditions::{CondSpec, merge},
    notify::{NotificationContext, Notifiers, notification_key},
};

/// Condition type owned by this reconciler.
pub const CONDITION: &str = "NotificationFailed";

/// What the notification reconciler needs, built once in `main`.
pub struct NotificationReconcilerContext {
    /// Kubernetes client.
    pub client: kube::Client,
    /// Event recorder.
    pub recorder: Recorder,
    /// The clock.
    pub clock: Clock,
    /// The senders.
    pub notifiers: Notifiers,
    /// Consecutive failures per booking uid and when the next attempt may happen.
    pub failures: Mutex<BTreeMap<String, (u32, DateTime<Utc>)>>,
}

/// Errors that make a reconcile retry with backoff.
#[derive(Debug, thiserror::Error)]
pub enum NotificationReconcileError {
    /// The Kubernetes API failed (including a conflict on the status patch).
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

/// Runs the notification controller `controller` (over Bookings) until `shutdown` resolves.
pub async fn run(
    controller: Controller<Booking>,
    ctx: Arc<NotificationReconcilerContext>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    controller
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {})
        .await;
}

fn error_policy(
    _: Arc<Booking>,
    error: &NotificationReconcileError,
    _: Arc<NotificationReconcilerContext>,
) -> Action {
    tracing::warn!(error = %error, "notification reconcile failed; retrying");
    Action::requeue(StdDuration::from_secs(2))
}

/// Backoff after `failures` consecutive failures: 30 s, doubling, at most 10 min.
pub fn retry_delay(failures: u32) -> Duration {
    let secs = 30i64.saturating_mul(1i64 << failures.saturating_sub(1).min(5));
    Duration::seconds(secs.min(600))
}

/// Reconciles the notifications of one Booking.
#[tracing::instrument(skip(b, ctx), fields(name = %b.name_any(), namespace = b.namespace().unwrap_or_default()))]
pub async fn reconcile(
    b: Arc<Booking>,
    ctx: Arc<NotificationReconcilerContext>,
) -> Result<Action, NotificationReconcileError> {
    let uid = b.uid().unwrap_or_default();
    let (Some(ns), false) = (b.namespace(), b.spec.notifications.is_empty()) else {
        return Ok(Action::await_change());
    };
    if b.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    // A booking that lost arbitration holds nothing that could end.
    let status = b.status.clone().unwrap_or_default();
    if status.status == Some(BookingPhase::Conflict) {
        return Ok(Action::await_change());
    }
    let Ok(slot) = Slot::of_booking(&b.spec) else {
        // Reported by the booking reconciler.
        return Ok(Action::await_change());
    };
    let now = (ctx.clock)();
    if now >= slot.end {
        ctx.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&uid);
        return Ok(Action::await_change());
    }

    // While backing off after a failure, other events (status patches) do not trigger retries.
    let backoff = ctx
        .failures
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&uid)
        .copied();
    if let Some((_, not_before)) = backoff.filter(|(_, t)| now < *t) {
        return Ok(Action::requeue(
            (not_before.min(slot.end) - now)
                .to_std()
                .unwrap_or(StdDuration::ZERO),
        ));
    }

    // The watch cache may lag behind this reconciler's own last status patch. Before anything
    // is sent, read the booking from the API server, so a notification recorded a moment ago is
    // never sent again.
    let due_unsent = b.spec.notifications.iter().enumerate().any(|(i, n)| {
        !status.notifications_sent.contains(&notification_key(i, n))
            && notification_should_send(&slot, lead_time(n), now)
    });
    let api: Api<Booking> = Api::namespaced(ctx.client.clone(), &ns);
    let (status, fresh_version) = if due_unsent {
        match api.get_opt(&b.name_any()).await? {
            Some(fresh) if fresh.uid() == b.uid() => (
                fresh.status.unwrap_or_default(),
                fresh.metadata.resource_version,
            ),
            _ => return Ok(Action::await_change()),
        }
    } else {
        (status, None)
    };

    let mut sent = status.notifications_sent.clone();
    let mut errors: Vec<String> = Vec::new();
    let mut retry = false;
    let mut next_due: Option<chrono::DateTime<chrono::Utc>> = None;
    let mut due = Vec::new();
    for (index, n) in b.spec.notifications.iter().enumerate() {
        let key = notification_key(index, n);
        if sent.contains(&key) {
            continue;
        }
        let lead = lead_time(n);
        if notification_should_send(&slot, lead, now) {
            due.push((index, n, key));
        } else {
            let due_at = notification_due_at(&slot, lead);
            next_due = Some(next_due.map_or(due_at, |d| d.min(due_at)));
        }
    }
    // Claim before sending: the notifications about to be sent are recorded first, so that a
    // crash (or a successor taking over) after the claim can lose one mail but never send one
    // twice. A send that fails and may succeed later gives its claim back below.
    // The claim is guarded by the resourceVersion of the fresh read: of two writers that read the
    // same version (a predecessor still finishing and its successor), only one claims; the
    // other gets a conflict and reads again.
    let mut recorded = status.notifications_sent.clone();
    if !due.is_empty() {
        sent.extend(due.iter().map(|(_, _, key)| key.clone()));
        let patch = serde_json::json!({
            "metadata": { "resourceVersion": fresh_version },
            "status": { "notificationsSent": sent },
        });
        api.patch_status(&b.name_any(), &super::patch_params(), &Patch::Merge(&patch))
            .await?;
        recorded.clone_from(&sent);
    }
    for (index, n, key) in due {
        // The reads and the claim took a moment: nothing is sent once the booking has ended.
        if (ctx.clock)() >= slot.end {
            break;
        }
        let msg_ctx = NotificationContext {
            namespace: ns.clone(),
            booking: b.name_any(),
            booking_uid: uid.clone(),
            resource: b.spec.resource_name.clone(),
            user: b.spec.user_id.clone(),
            end: slot.end,
            now,
        };
        match ctx.notifiers.send(index, n, &msg_ctx).await {
            Ok(()) => {
                tracing::info!(notification = %key, "sent notification");
                publish(
                    &ctx,
                    &b,
                    EventType::Normal,
                    "NotificationSent",
                    format!(
                        "sent the {} notification to {} (booking ends at {})",
                        n.type_,
                        n.recipient,
                        format_rfc3339(slot.end)
                    ),
                )
                .await;
            }
            Err(e) => {
                retry |= e.is_transient();
                let message = format!("{} notification to {}: {e}", n.type_, n.recipient);
                tracing::warn!(error = %e, notification = %key, "notification failed");
                publish(
                    &ctx,
                    &b,
                    EventType::Warning,
                    "NotificationFailed",
                    message.clone(),
                )
                .await;
                // A failure that may pass (a timeout, a 4xx of the SMTP server, a webhook error)
                // gives its claim back and is retried with backoff. One that will not (an
                // unknown type, an unusable recipient, no SMTP server configured, a permanent
                // refusal) stays recorded as handled: it is reported, not retried.
                if e.is_transient() {
                    sent.retain(|k| k != &key);
                }
                errors.push(message);
            }
        }
    }

    let condition = if errors.is_empty() {
        CondSpec::new(CONDITION, false, "Sent", "no notification has failed")
    } else {
        CondSpec::new(CONDITION, true, "SendFailed", &errors.join("; "))
    };
    let all_sent = b
        .spec
        .notifications
        .iter()
        .enumerate()
        .all(|(i, n)| sent.contains(&notification_key(i, n)));
    let old_condition = status.conditions.iter().find(|c| c.type_ == CONDITION);
    let condition_changed = match old_condition {
        None => !errors.is_empty(),
        Some(c) => (c.status == "True") == errors.is_empty() || c.message != condition.message,
    };
    if sent != recorded || all_sent != status.notification_sent || condition_changed {
        // Keep every other condition as the booking reconciler wrote it.
        let mut conditions: Vec<_> = status
            .conditions
            .iter()
            .filter(|c| c.type_ != CONDITION)
            .cloned()
            .collect();
        conditions.extend(merge(
            &status.conditions,
            &[condition],
            b.metadata.generation,
            now,
        ));
        // Only this reconciler writes the notification fields, so no resourceVersion guard is
        // needed (a conflict would make it send again); conditions are sent only when its own
        // condition changed.
        let mut body = serde_json::json!({ "notification_sent": all_sent });
        if sent != recorded {
            body["notificationsSent"] = serde_json::json!(sent);
        }
        if condition_changed {
            body["conditions"] = serde_json::to_value(&conditions).unwrap_or_default();
        }
        let patch = serde_json::json!({ "status": body });
        api.patch_status(&b.name_any(), &super::patch_params(), &Patch::Merge(&patch))
            .await?;
    }

    let mut wake = next_due;
    {
        let mut map = ctx.failures.lock().unwrap_or_else(|p| p.into_inner());
        if retry {
            let count = map.get(&uid).map_or(0, |(c, _)| *c) + 1;
            let at = now + retry_delay(count);
            map.insert(uid.clone(), (count, at));
            wake = Some(wake.map_or(at, |w| w.min(at)));
        } else {
            map.remove(&uid);
        }
    }
    Ok(match wake {
        // Never later than the end: nothing is sent after it.
        Some(at) => Action::requeue(
            (at.min(slot.end) - now)
                .to_std()
                .unwrap_or(StdDuration::ZERO),
        ),
        None => Action::await_change(),
    })
}

async fn publish(
    ctx: &NotificationReconcilerContext,
    b: &Booking,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: "Notify".to_owned(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &b.object_ref(&())).await {
        tracing::warn!(error = %e, reason, "could not publish event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_bounded() {
        let secs: Vec<i64> = (1..=8).map(|f| retry_delay(f).num_seconds()).collect();
        assert_eq!(secs, [30, 60, 120, 240, 480, 600, 600, 600]);
    }
}
