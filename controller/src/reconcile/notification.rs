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

use std::sync::Arc;

use booking_shared::{
    api::{Booking, BookingPhase, BookingStatus, Notification, SecretKeyRef},
    scheduling::{lead_time, notification_due_at, notification_should_send},
    time::{Slot, format_rfc3339},
};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt, runtime::controller::Action};

use super::{ns_name, write_status};
use crate::{
    conditions::{CondSpec, merge},
    context::Context,
    error::{Error, Result},
    notify::{NotificationSubject, NotifyError, notification_key, shown_recipient, upgraded_key},
};

/// Condition type owned by this reconciler.
pub const CONDITION: &str = "NotificationFailed";

/// The notifications of a booking to send now, and when the next one falls due. Pure.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Due {
    /// `(index, key)` of the notifications due and not recorded in `sent`.
    pub now: Vec<(usize, String)>,
    /// When the earliest notification not due yet falls due.
    pub next: Option<DateTime<Utc>>,
}

/// Which of `notifications` are due at `now` for a booking with `slot`, given the keys already
/// recorded as `sent`: due `leadMinutes` before the end, never before the start and never after
/// the end.
pub fn due(
    notifications: &[Notification],
    sent: &[String],
    slot: &Slot,
    now: DateTime<Utc>,
) -> Due {
    let mut out = Due::default();
    let sent = upgraded_keys(sent);
    for (index, n) in notifications.iter().enumerate() {
        let key = notification_key(index, n);
        if sent.contains(&key) {
            continue;
        }
        let lead = lead_time(n);
        if notification_should_send(slot, lead, now) {
            out.now.push((index, key));
        } else {
            let at = notification_due_at(slot, lead);
            out.next = Some(out.next.map_or(at, |d| d.min(at)));
        }
    }
    out
}

/// `sent` in the current key form (see [`upgraded_key`]), without duplicates.
fn upgraded_keys(sent: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(sent.len());
    for key in sent.iter().map(|k| upgraded_key(k)) {
        if !out.contains(&key) {
            out.push(key);
        }
    }
    out
}

/// Reconciles the notifications of one Booking.
#[tracing::instrument(skip_all, fields(namespace, name))]
pub async fn reconcile(b: Arc<Booking>, ctx: Arc<Context>) -> Result<Action> {
    let (ns, name) = ns_name(b.as_ref())?;
    let uid = b.uid().unwrap_or_default();
    let status = b.status.clone().unwrap_or_default();
    // A booking that lost arbitration holds nothing that could end; an invalid one is reported
    // by the booking reconciler.
    let slot = match Slot::of_booking(&b.spec) {
        Ok(slot)
            if !b.spec.notifications.is_empty()
                && b.metadata.deletion_timestamp.is_none()
                && status.status != Some(BookingPhase::Conflict) =>
        {
            slot
        }
        _ => return Ok(Action::await_change()),
    };
    let now = ctx.now();
    if now >= slot.end {
        forget_failures(&ctx, &uid);
        // Nothing is sent any more, but keys of earlier versions (a webhook's whole URL) are
        // still rewritten, so that no status keeps a URL.
        let upgraded = upgraded_keys(&status.notifications_sent);
        if upgraded != status.notifications_sent {
            let status = BookingStatus {
                notifications_sent: upgraded,
                ..status
            };
            write_status(&ctx, b.as_ref(), &status, None).await?;
        }
        return Ok(Action::await_change());
    }
    // While backing off after a failure, other events (status patches) do not trigger retries.
    if let Some(not_before) = backing_off(&ctx, &uid, now) {
        return Ok(Action::requeue(ctx.until(not_before.min(slot.end))));
    }
    if let Some(dry) = &ctx.dry_run {
        let due = due(
            &b.spec.notifications,
            &status.notifications_sent,
            &slot,
            now,
        );
        would_notify(&ctx, dry, &b, &slot, &due).await;
        return Ok(match due.next {
            Some(at) => Action::requeue(ctx.until(at.min(slot.end))),
            None => Action::await_change(),
        });
    }
    // The watch cache may lag behind this reconciler's own last status patch. Before anything
    // is sent, read the booking from the API server, so a notification recorded a moment ago is
    // never sent again; the claim is guarded by that read's resourceVersion.
    let current = if due(
        &b.spec.notifications,
        &status.notifications_sent,
        &slot,
        now,
    )
    .now
    .is_empty()
    {
        (*b).clone()
    } else {
        match Api::<Booking>::namespaced(ctx.client.clone(), &ns)
            .get_opt(&name)
            .await?
        {
            Some(fresh) if fresh.uid() == b.uid() => fresh,
            _ => return Ok(Action::await_change()),
        }
    };
    let mut status = current.status.clone().unwrap_or_default();
    // Keys recorded by earlier versions held a webhook's whole URL: they are read (and written
    // back) in the current form, which shows only its scheme and host.
    status.notifications_sent = upgraded_keys(&status.notifications_sent);
    let due = due(
        &b.spec.notifications,
        &status.notifications_sent,
        &slot,
        now,
    );
    let mut current = current;
    if !due.now.is_empty() {
        match claim(&ctx, &mut current, &mut status, &due).await {
            Ok(()) => {}
            // The booking changed between the fresh read and the claim (its phase written by
            // the booking reconciler, or another replica's claim): nothing was sent; read again.
            Err(Error::Kube(kube::Error::Api(e))) if e.code == 409 => {
                tracing::debug!("the booking changed since it was read; claiming again");
                return Ok(Action::requeue(std::time::Duration::from_millis(200)));
            }
            Err(e) => return Err(e),
        }
    }
    let (errors, retry) = send_due(&ctx, &b, &slot, &due, &mut status, now).await;
    record(&ctx, &b, &current, status, &errors, now).await?;
    let mut wake = due.next;
    if retry {
        let at = failed(&ctx, &uid, now);
        wake = Some(wake.map_or(at, |w| w.min(at)));
    } else {
        forget_failures(&ctx, &uid);
    }
    Ok(match wake {
        // Never later than the end: nothing is sent after it.
        Some(at) => Action::requeue(ctx.until(at.min(slot.end))),
        None => Action::await_change(),
    })
}

/// Claims the due notifications before sending them: they are recorded first, so that a crash
/// (or a successor taking over) after the claim can lose one mail but never send one twice. The
/// claim carries the resourceVersion of the fresh read: of two writers that read the same
/// version (a predecessor still finishing and its successor), only one claims; the other gets a
/// conflict and reads again.
async fn claim(
    ctx: &Context,
    current: &mut Booking,
    status: &mut BookingStatus,
    due: &Due,
) -> Result<()> {
    status
        .notifications_sent
        .extend(due.now.iter().map(|(_, key)| key.clone()));
    let version = current.metadata.resource_version.clone();
    write_status(
        ctx,
        current,
        status,
        Some(version.as_deref().unwrap_or_default()),
    )
    .await?;
    current.status = Some(status.clone());
    Ok(())
}

/// Sends the claimed notifications. A failure that may pass (a timeout, a 4xx of the SMTP
/// server, a webhook error) gives its claim back in `status` and asks for a retry; one that will
/// not (an unknown type, an unusable recipient, no SMTP server configured, a permanent refusal)
/// stays recorded as handled: it is reported, not retried. Returns the failures' messages and
/// whether to retry.
async fn send_due(
    ctx: &Context,
    b: &Booking,
    slot: &Slot,
    due: &Due,
    status: &mut BookingStatus,
    now: DateTime<Utc>,
) -> (Vec<String>, bool) {
    let mut errors = Vec::new();
    let mut retry = false;
    for (index, key) in &due.now {
        // The reads and the claim took a moment: nothing is sent once the booking has ended.
        if ctx.now() >= slot.end {
            break;
        }
        let n = &b.spec.notifications[*index];
        let subject = NotificationSubject {
            namespace: b.namespace().unwrap_or_default(),
            booking: b.name_any(),
            booking_uid: b.uid().unwrap_or_default(),
            resource: b.spec.resource_name.clone(),
            user: b.spec.user_id.clone(),
            requested_by: booking_shared::validation::requested_by(&b.metadata).map(str::to_owned),
            end: slot.end,
            now,
        };
        let sent = match resolved(ctx, &subject.namespace, n).await {
            Ok(n) => ctx.notifiers.send(*index, &n, &subject).await,
            Err(e) => Err(e),
        };
        match sent {
            Ok(()) => {
                tracing::info!(notification = %key, "sent notification");
                let note = format!(
                    "sent the {} notification to {} (booking ends at {})",
                    n.type_,
                    shown_recipient(n),
                    format_rfc3339(slot.end)
                );
                ctx.events
                    .publish(b, false, "NotificationSent", "Notify", note)
                    .await;
            }
            Err(e) => {
                retry |= e.is_transient();
                let message = format!("{} notification to {}: {e}", n.type_, shown_recipient(n));
                tracing::warn!(error = %e, notification = %key, "notification failed");
                ctx.events
                    .publish(b, true, "NotificationFailed", "Notify", message.clone())
                    .await;
                if e.is_transient() {
                    status.notifications_sent.retain(|k| k != key);
                }
                errors.push(message);
            }
        }
    }
    (errors, retry)
}

/// Dry-run mode: a Normal Event `WouldNotify` for each due notification, once per booking and
/// notification; nothing is sent or recorded as sent, so that the notifications still due when
/// dry-run mode is turned off are sent then.
async fn would_notify(
    ctx: &Context,
    dry: &crate::dry_run::DryRun,
    b: &Booking,
    slot: &Slot,
    due: &Due,
) {
    let uid = b.uid().unwrap_or_default();
    for (index, key) in &due.now {
        if !dry.first_notification(&uid, key) {
            continue;
        }
        let n = &b.spec.notifications[*index];
        let note = format!(
            "dry-run mode: would send the {} notification to {} (booking ends at {}); nothing was sent",
            n.type_,
            shown_recipient(n),
            format_rfc3339(slot.end)
        );
        tracing::info!(notification = %key, "dry-run mode: notification not sent");
        ctx.metrics.would(crate::dry_run::WouldAction::Notify, 1);
        ctx.events
            .publish(b, false, "WouldNotify", "Notify", note)
            .await;
    }
}

/// `n` with its recipient read from the Secret `recipient_from` names (in the booking's
/// namespace `ns`), or `n` itself when it has none. The Secret's value is never shown.
async fn resolved<'a>(
    ctx: &Context,
    ns: &str,
    n: &'a Notification,
) -> Result<std::borrow::Cow<'a, Notification>, NotifyError> {
    let Some(from) = &n.recipient_from else {
        return Ok(std::borrow::Cow::Borrowed(n));
    };
    let SecretKeyRef { name, key } = &from.secret_key_ref;
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let secret = match secrets.get_opt(name).await {
        Ok(Some(secret)) => secret,
        Ok(None) => {
            return Err(NotifyError::Recipient(format!(
                "Secret {name} not found in namespace {ns}"
            )));
        }
        Err(kube::Error::Api(e)) if e.code == 403 => {
            return Err(NotifyError::Recipient(format!(
                "the controller may not read Secret {name}: grant it get on that Secret (the chart's notificationSecrets, or a Role and RoleBinding as manifests/README.md shows)"
            )));
        }
        Err(e) => return Err(NotifyError::Recipient(format!("Secret {name}: {e}"))),
    };
    let value = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .ok_or_else(|| NotifyError::Recipient(format!("Secret {name} has no key {key}")))?;
    let url = std::str::from_utf8(&value.0)
        .map_err(|_| NotifyError::Recipient(format!("Secret {name}, key {key} is not text")))?;
    Ok(std::borrow::Cow::Owned(Notification {
        recipient: url.trim().to_owned(),
        recipient_from: None,
        ..n.clone()
    }))
}

/// Writes what the sends changed: the recorded keys, `notification_sent` and this reconciler's
/// own condition (every other condition stays as the booking reconciler wrote it).
async fn record(
    ctx: &Context,
    b: &Booking,
    current: &Booking,
    mut status: BookingStatus,
    errors: &[String],
    now: DateTime<Utc>,
) -> Result<()> {
    let condition = if errors.is_empty() {
        CondSpec::new(CONDITION, false, "Sent", "no notification has failed")
    } else {
        CondSpec::new(CONDITION, true, "SendFailed", &errors.join("; "))
    };
    status.notification_sent = b
        .spec
        .notifications
        .iter()
        .enumerate()
        .all(|(i, n)| status.notifications_sent.contains(&notification_key(i, n)));
    let changed = match status.conditions.iter().find(|c| c.type_ == CONDITION) {
        None => !errors.is_empty(),
        Some(c) => (c.status == "True") == errors.is_empty() || c.message != condition.message,
    };
    if changed {
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
        status.conditions = conditions;
    }
    // Only this reconciler writes the notification fields, so no resourceVersion guard is
    // needed (a conflict would make it send again).
    write_status(ctx, current, &status, None).await?;
    Ok(())
}

fn backing_off(ctx: &Context, uid: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let map = ctx
        .notification_failures
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    map.get(uid).map(|(_, t)| *t).filter(|t| now < *t)
}

/// Counts one more failure of the booking `uid` and returns when to try again.
fn failed(ctx: &Context, uid: &str, now: DateTime<Utc>) -> DateTime<Utc> {
    let mut map = ctx
        .notification_failures
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let count = map.get(uid).map_or(0, |(c, _)| *c) + 1;
    let at = now + ctx.notification_backoff.delay_chrono(count);
    map.insert(uid.to_owned(), (count, at));
    at
}

fn forget_failures(ctx: &Context, uid: &str) {
    ctx.notification_failures
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(uid);
}

#[cfg(test)]
mod tests {
    use super::*;
    use booking_shared::time::parse_rfc3339;

    fn at(s: &str) -> DateTime<Utc> {
        parse_rfc3339("t", s).unwrap()
    }

    fn notification(recipient: &str, lead: Option<u32>) -> Notification {
        serde_json::from_value(serde_json::json!({
            "type": "email", "recipient": recipient, "leadMinutes": lead,
        }))
        .unwrap()
    }

    #[test]
    fn due_notifications_at_fixed_instants() {
        let slot = Slot::new(at("2031-01-10T10:00:00Z"), at("2031-01-10T12:00:00Z")).unwrap();
        let ns = [
            notification("a@example.com", None),
            notification("b@example.com", Some(60)),
        ];
        let keys: Vec<String> = ns
            .iter()
            .enumerate()
            .map(|(i, n)| notification_key(i, n))
            .collect();
        // Before the start: nothing due; the earliest is 60 min before the end.
        let d = due(&ns, &[], &slot, at("2031-01-10T09:00:00Z"));
        assert!(d.now.is_empty());
        assert_eq!(d.next, Some(at("2031-01-10T11:00:00Z")));
        // 30 min before the end only the 60-minute one is due; 15 min before, both (the
        // default lead is 20 minutes); recorded ones are not.
        let d = due(&ns, &[], &slot, at("2031-01-10T11:30:00Z"));
        assert_eq!(d.now, [(1, keys[1].clone())]);
        assert_eq!(d.next, Some(at("2031-01-10T11:40:00Z")));
        let d = due(&ns, &[], &slot, at("2031-01-10T11:45:00Z"));
        assert_eq!(d.now, [(0, keys[0].clone()), (1, keys[1].clone())]);
        let d = due(&ns, &keys[1..], &slot, at("2031-01-10T11:45:00Z"));
        assert_eq!(d.now, [(0, keys[0].clone())]);
        // From the end on: nothing, ever.
        let d = due(&ns, &[], &slot, at("2031-01-10T12:00:00Z"));
        assert!(d.now.is_empty());
    }
}
