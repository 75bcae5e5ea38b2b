//! What a notification says: its subject (the booking), the rendered text and HTML, the
//! deterministic Message-ID of an email, and the key that records it as sent.

use booking_shared::{api::Notification, time::format_rfc3339};
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

/// What a notification is about.
#[derive(Debug, Clone)]
pub struct NotificationSubject {
    /// Namespace of the booking.
    pub namespace: String,
    /// Name of the booking.
    pub booking: String,
    /// `metadata.uid` of the booking.
    pub booking_uid: String,
    /// The Resource the booking holds.
    pub resource: String,
    /// The booking's user.
    pub user: String,
    /// The authenticated user who created the booking (its `manager.kotaico.de/requested-by`
    /// annotation), when recorded.
    pub requested_by: Option<String>,
    /// End of the booking.
    pub end: DateTime<Utc>,
    /// When the notification is sent (the real time remaining is computed from it).
    pub now: DateTime<Utc>,
}

/// A rendered notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// Email subject.
    pub subject: String,
    /// Plain-text body (also the webhook's `text`).
    pub text: String,
    /// HTML body.
    pub html: String,
    /// The `kubectl patch` command that extends the booking by an hour.
    pub extend_command: String,
}

/// Renders the message for a booking about to end.
pub fn render(ctx: &NotificationSubject) -> Rendered {
    let remaining = (ctx.end - ctx.now).max(chrono::Duration::zero());
    let minutes = (remaining.num_seconds() + 59) / 60;
    let end = format_rfc3339(ctx.end);
    let in_minutes = if minutes == 1 {
        "1 minute".to_owned()
    } else {
        format!("{minutes} minutes")
    };
    let new_end = format_rfc3339(ctx.end + chrono::Duration::hours(1));
    let extend_command = format!(
        "kubectl -n {ns} patch booking {b} --type merge -p '{{\"spec\":{{\"end_at\":\"{new_end}\"}}}}'",
        ns = ctx.namespace,
        b = ctx.booking,
    );
    let subject = format!(
        "Booking {} of {} ends in {minutes} min ({end})",
        ctx.booking, ctx.resource
    );
    let created_by = ctx
        .requested_by
        .as_deref()
        .map(|r| format!("\nIt was created by {r}."))
        .unwrap_or_default();
    let text = format!(
        "Hello {user},\n\nyour booking {b} (namespace {ns}) of resource {r} ends at {end}, in {in_minutes}.\nIts instances are stopped then.{created_by}\n\nTo keep them running for another hour, extend the booking:\n\n  {extend_command}\n",
        user = ctx.user,
        b = ctx.booking,
        ns = ctx.namespace,
        r = ctx.resource,
    );
    let created_by_html = ctx
        .requested_by
        .as_deref()
        .map(|r| format!(" It was created by <b>{}</b>.", html_escape(r)))
        .unwrap_or_default();
    let html = format!(
        "<html><body><p>Hello {user},</p><p>your booking <b>{b}</b> (namespace {ns}) of resource <b>{r}</b> ends at <b>{end}</b>, in {in_minutes}. Its instances are stopped then.{created_by_html}</p><p>To keep them running for another hour, extend the booking:</p><pre>{cmd}</pre></body></html>",
        user = html_escape(&ctx.user),
        b = html_escape(&ctx.booking),
        ns = html_escape(&ctx.namespace),
        r = html_escape(&ctx.resource),
        cmd = html_escape(&extend_command),
    );
    Rendered {
        subject,
        text,
        html,
        extend_command,
    }
}

/// The deterministic Message-ID of an email notification: the same booking uid and
/// notification always give the same identifier.
pub fn message_id(
    booking_uid: &str,
    index: usize,
    notification: &Notification,
    domain: &str,
) -> String {
    let mut h = Sha256::new();
    for part in [
        booking_uid,
        &index.to_string(),
        &notification.type_,
        &notification.recipient,
    ] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    let digest = hex::encode(&h.finalize()[..16]);
    format!("<booking-{digest}@{domain}>")
}

/// Stable key identifying a notification of a booking in its status.
pub fn notification_key(index: usize, notification: &Notification) -> String {
    format!("{index}:{}:{}", notification.type_, notification.recipient)
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
