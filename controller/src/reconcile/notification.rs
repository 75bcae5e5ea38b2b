//! The notification reconciler: sends each notification of a booking once per event it asks
//! for — `reminder` shortly before the booking ends (the default), `started`, `stopped` and
//! `failed` as its Resource's group changes state (see `due`) — and records it in the booking's
//! status.
//!
//! It runs as its own controller over Bookings, so a slow or failing SMTP server or webhook never
//! delays the start or stop of any group. It is woken by the clock (the reminder's instant, the
//! start, the end) and by every change of the Resource a booking names that asks for a state
//! change (`triggers::notified_by`); it reads the group's state from the Resource cache, never
//! from AWS. After downtime, an ended booking sends no reminder and no `started`; its `stopped`
//! is sent only within `AFTER_END_WINDOW` after the end.
//!
//! At most once: a notification is recorded in `status.notificationsSent` before it is sent (a
//! crash between the two loses that one mail rather than sending it twice), after a fresh read
//! of the booking; a send that may succeed later gives its record back. The reminder's key is
//! `<index>:<type>:<recipient>` as before; every other event's is `<event>:` followed by it.
//! The Lease is released only after every reconcile in flight has finished, so a successor never
//! sends what its predecessor is sending. Emails carry a Message-ID derived from the booking's
//! uid, the notification and the event. Failures set the condition `NotificationFailed`, publish
//! a Warning Event and are retried with exponential backoff (30 s doubling to 10 min) while the
//! event may be sent; an unknown type or an unusable recipient is reported once and not retried.

use std::sync::Arc;

use booking_shared::{
    api::{Booking, BookingPhase, BookingStatus, Notification, NotificationEvent, SecretKeyRef},
    time::{Slot, format_rfc3339},
};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt, runtime::controller::Action, runtime::reflector::ObjectRef};

use super::{ns_name, write_status};
use crate::{
    conditions::{CondSpec, merge},
    context::Context,
    error::{Error, Result},
    notify::{NotificationSubject, NotifyError, event_key, shown_recipient, upgraded_key},
};

mod due;

pub use due::{
    AFTER_END_WINDOW, Due, DueNow, GroupState, Seen, deadline, due, last_instant, wants_after_end,
};

/// Condition type owned by this reconciler.
pub const CONDITION: &str = "NotificationFailed";

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

/// The state of the group of `b`'s Resource, from the Resource cache.
fn group_of(ctx: &Context, b: &Booking) -> Option<GroupState> {
    let ns = b.namespace().unwrap_or_default();
    ctx.caches
        .resources
        .get(&ObjectRef::new(&b.spec.resource_name).within(&ns))
        .map(|r| GroupState::of(&r))
}

/// Whether a booking's notifications concern the reconciler at all: some, on a valid slot, not
/// deleted, not lost to arbitration (it holds nothing that could start, end or fail).
fn slot_of(b: &Booking, status: &BookingStatus) -> Option<Slot> {
    match Slot::of_booking(&b.spec) {
        Ok(slot)
            if !b.spec.notifications.is_empty()
                && b.metadata.deletion_timestamp.is_none()
                && status.status != Some(BookingPhase::Conflict) =>
        {
            Some(slot)
        }
        _ => None,
    }
}

/// Reconciles the notifications of one Booking.
#[tracing::instrument(skip_all, fields(namespace, name))]
pub async fn reconcile(b: Arc<Booking>, ctx: Arc<Context>) -> Result<Action> {
    let uid = b.uid().unwrap_or_default();
    let status = b.status.clone().unwrap_or_default();
    let wakeups = &ctx.caches.notification_wakeups;
    let Some(slot) = slot_of(&b, &status) else {
        return Ok(wakeups.requeue(b.as_ref(), None));
    };
    let now = ctx.now();
    let last = last_instant(&b.spec.notifications, &slot);
    if now >= last {
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
        return Ok(wakeups.requeue(b.as_ref(), None));
    }
    let group = group_of(&ctx, &b);
    let name = b.name_any();
    let b = remember_held(&ctx, b, group.as_ref(), now).await?;
    let seen = Seen {
        booking: &name,
        held: b.status.as_ref().is_some_and(|s| s.held_at.is_some()),
        group: group.as_ref(),
    };
    // While backing off after a failure, other events (status patches) do not trigger retries.
    if let Some(not_before) = backing_off(&ctx, &uid, now) {
        return Ok(wakeups.requeue(b.as_ref(), Some(not_before.min(last))));
    }
    if let Some(dry) = &ctx.dry_run {
        let sent = upgraded_keys(&status.notifications_sent);
        let due = due(&b.spec.notifications, &sent, &slot, &seen, now);
        would_notify(&ctx, dry, &b, &slot, &due).await;
        return Ok(wakeups.requeue(b.as_ref(), due.next.map(|at| at.min(last))));
    }
    let (current, mut status, due) = match claimed(&ctx, &b, &slot, &seen, now).await? {
        Claimed::Ready(claimed) => *claimed,
        Claimed::Gone => return Ok(wakeups.requeue(b.as_ref(), None)),
        Claimed::Changed => return Ok(Action::requeue(super::RETRY_SOON)),
    };
    // Who created the booking, from the fresh read (the cache keeps no annotations).
    let creator = booking_shared::validation::requested_by(&current.metadata);
    let sent = send_due(&ctx, &b, creator, &slot, &due, &mut status, now).await;
    // The status first (a failed send's claim given back), then the Events: what an Event
    // reports is already what the status shows.
    let recorded = record(&ctx, &b, &current, status, &sent.errors, now).await;
    for e in sent.events {
        ctx.events
            .publish(b.as_ref(), e.warning, e.reason, e.action, e.note)
            .await;
    }
    recorded?;
    let mut wake = due.next;
    if sent.retry {
        let at = failed(&ctx, &uid, now);
        wake = Some(wake.map_or(at, |w| w.min(at)));
    } else {
        forget_failures(&ctx, &uid);
    }
    // Never later than the last instant: nothing is sent after it.
    Ok(wakeups.requeue(b.as_ref(), wake.map(|at| at.min(last))))
}

/// Records in `status.heldAt` that booking `b` holds its group, when a notification of it needs
/// to know that after the end (`stopped`, `failed`) and it is not recorded yet. Returns the
/// booking as written.
async fn remember_held(
    ctx: &Context,
    b: Arc<Booking>,
    group: Option<&GroupState>,
    now: DateTime<Utc>,
) -> Result<Arc<Booking>> {
    let status = b.status.clone().unwrap_or_default();
    let holds = group.is_some_and(|g| g.holder.as_deref() == Some(b.name_any().as_str()));
    if status.held_at.is_some() || !holds || !b.spec.notifications.iter().any(wants_after_end) {
        return Ok(b);
    }
    let status = BookingStatus {
        held_at: Some(format_rfc3339(now)),
        ..status
    };
    // Only this reconciler writes `heldAt`: no resourceVersion guard.
    write_status(ctx, b.as_ref(), &status, None).await?;
    let mut written = (*b).clone();
    written.status = Some(status);
    Ok(Arc::new(written))
}

/// What [`claimed`] found.
enum Claimed {
    /// The booking as claimed, its status with the claims, what is due.
    Ready(Box<(Booking, BookingStatus, Due)>),
    /// The booking is gone (or replaced by one of the same name).
    Gone,
    /// The booking changed between the read and the claim.
    Changed,
}

/// The due notifications, claimed: the booking read again from the API server when any is due
/// (the watch cache may lag behind this reconciler's own last status patch), the keys recorded
/// before anything is sent, guarded by that read's resourceVersion. [`Claimed::Changed`] when
/// the booking changed between the read and the claim (its phase written by the booking
/// reconciler, or another replica's claim): nothing was sent; read again.
async fn claimed(
    ctx: &Context,
    b: &Booking,
    slot: &Slot,
    seen: &Seen<'_>,
    now: DateTime<Utc>,
) -> Result<Claimed> {
    let sent = upgraded_keys(
        &b.status
            .as_ref()
            .map(|s| s.notifications_sent.clone())
            .unwrap_or_default(),
    );
    let mut current = if due(&b.spec.notifications, &sent, slot, seen, now)
        .now
        .is_empty()
    {
        b.clone()
    } else {
        let (ns, name) = ns_name(b)?;
        match Api::<Booking>::namespaced(ctx.client.clone(), &ns)
            .get_opt(&name)
            .await?
        {
            Some(fresh) if fresh.uid() == b.uid() => fresh,
            _ => return Ok(Claimed::Gone),
        }
    };
    let mut status = current.status.clone().unwrap_or_default();
    // Keys recorded by earlier versions held a webhook's whole URL: they are read (and written
    // back) in the current form, which shows only its scheme and host.
    status.notifications_sent = upgraded_keys(&status.notifications_sent);
    let seen = Seen {
        held: seen.held || status.held_at.is_some(),
        ..*seen
    };
    let due = due(
        &b.spec.notifications,
        &status.notifications_sent,
        slot,
        &seen,
        now,
    );
    if !due.now.is_empty() {
        match claim(ctx, &mut current, &mut status, &due).await {
            Ok(()) => {}
            Err(Error::Kube(kube::Error::Api(e))) if e.code == 409 => {
                tracing::debug!("the booking changed since it was read; claiming again");
                return Ok(Claimed::Changed);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Claimed::Ready(Box::new((current, status, due))))
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
        .extend(due.now.iter().map(|d| d.key.clone()));
    // Written with the claim, as if every send succeeds: after a successful send, recording it
    // writes nothing more. A failed send that gives its claim back corrects it then.
    status.notification_sent = all_sent(&current.spec.notifications, status);
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

/// An Event of a send, published once the status records the send's outcome.
struct SendEvent {
    warning: bool,
    reason: &'static str,
    action: &'static str,
    note: String,
}

/// What [`send_due`] did.
struct Sent {
    /// The failures' messages.
    errors: Vec<String>,
    /// Whether a failure may pass (retry).
    retry: bool,
    /// The Events to publish, in order.
    events: Vec<SendEvent>,
}

/// Sends the claimed notifications. A failure that may pass (a timeout, a 4xx of the SMTP
/// server, a webhook error) gives its claim back in `status` and asks for a retry; one that will
/// not (an unknown type, an unusable recipient, no SMTP server configured, a permanent refusal)
/// stays recorded as handled: it is reported, not retried. `creator` is who created the booking
/// (its requested-by annotation), which the messages name.
async fn send_due(
    ctx: &Context,
    b: &Booking,
    creator: Option<&str>,
    slot: &Slot,
    due: &Due,
    status: &mut BookingStatus,
    now: DateTime<Utc>,
) -> Sent {
    let mut errors = Vec::new();
    let mut retry = false;
    let mut events = Vec::new();
    for d in &due.now {
        let key = &d.key;
        // The reads and the claim took a moment: nothing is sent once its time is over.
        if ctx.now() >= deadline(d.event, slot) {
            continue;
        }
        let n = &b.spec.notifications[d.index];
        let subject = NotificationSubject {
            namespace: b.namespace().unwrap_or_default(),
            booking: b.name_any(),
            booking_uid: b.uid().unwrap_or_default(),
            resource: b.spec.resource_name.clone(),
            user: b.spec.user_id.clone(),
            requested_by: creator.map(str::to_owned),
            end: slot.end,
            now,
            event: d.event,
            start: slot.start,
            detail: d.detail.clone(),
        };
        let sent = match resolved(ctx, &subject.namespace, n).await {
            Ok(n) => ctx.notifiers.send(d.index, &n, &subject).await,
            Err(e) => Err(e),
        };
        match sent {
            Ok(()) => {
                ctx.metrics.notification(d.event, true);
                tracing::info!(notification = %key, event = %d.event, "sent notification");
                let note = format!(
                    "sent the {} notification to {}{} (booking ends at {})",
                    n.type_,
                    shown_recipient(n),
                    for_event(d.event),
                    format_rfc3339(slot.end)
                );
                events.push(SendEvent {
                    warning: false,
                    reason: "NotificationSent",
                    action: notify_action(d.event),
                    note,
                });
            }
            Err(e) => {
                ctx.metrics.notification(d.event, false);
                retry |= e.is_transient();
                let message = format!(
                    "{} notification to {}{}: {e}",
                    n.type_,
                    shown_recipient(n),
                    for_event(d.event)
                );
                tracing::warn!(error = %e, notification = %key, "notification failed");
                events.push(SendEvent {
                    warning: true,
                    reason: "NotificationFailed",
                    action: "Notify",
                    note: message.clone(),
                });
                if e.is_transient() {
                    status.notifications_sent.retain(|k| k != key);
                }
                errors.push(message);
            }
        }
    }
    Sent {
        errors,
        retry,
        events,
    }
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
    for d in &due.now {
        if !dry.first_notification(&uid, &d.key) {
            continue;
        }
        let n = &b.spec.notifications[d.index];
        let note = format!(
            "dry-run mode: would send the {} notification{} to {} (booking ends at {}); nothing was sent",
            n.type_,
            for_event(d.event),
            shown_recipient(n),
            format_rfc3339(slot.end)
        );
        tracing::info!(notification = %d.key, "dry-run mode: notification not sent");
        ctx.metrics.would(crate::dry_run::WouldAction::Notify, 1);
        ctx.events
            .publish(b, false, "WouldNotify", "Notify", note)
            .await;
    }
}

/// The action of a sent notification's Event: `Notify` for the reminder (as before),
/// `NotifyStarted`, `NotifyStopped`, `NotifyFailed` for the others. Events of one booking,
/// reason and action are merged into one series that keeps the first note, so each event has
/// an action of its own.
fn notify_action(event: NotificationEvent) -> &'static str {
    match event {
        NotificationEvent::Reminder => "Notify",
        NotificationEvent::Started => "NotifyStarted",
        NotificationEvent::Stopped => "NotifyStopped",
        NotificationEvent::Failed => "NotifyFailed",
    }
}

/// How an Event names the event of a notification: nothing for the reminder (as before).
fn for_event(event: NotificationEvent) -> String {
    match event {
        NotificationEvent::Reminder => String::new(),
        other => format!(" for `{other}`"),
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

/// Whether every wanted notification of `notifications` is recorded in `status` (`failed` is
/// sent only when something fails: it does not count).
fn all_sent(notifications: &[Notification], status: &BookingStatus) -> bool {
    notifications.iter().enumerate().all(|(i, n)| {
        n.wanted_events()
            .into_iter()
            .filter(|e| *e != NotificationEvent::Failed)
            .all(|e| status.notifications_sent.contains(&event_key(i, n, e)))
    })
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
    status.notification_sent = all_sent(&b.spec.notifications, &status);
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
