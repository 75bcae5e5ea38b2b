//! What a notification says: its subject (the booking), the rendered text and HTML, the
//! deterministic Message-ID of an email, and the key that records it as sent.

use booking_shared::{
    api::{Notification, NotificationEvent},
    time::format_rfc3339,
};
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

/// What a notification is about.
#[derive(Debug, Clone, Default)]
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
    /// What the notification is sent for.
    pub event: NotificationEvent,
    /// Start of the booking.
    pub start: DateTime<Utc>,
    /// For `failed`: what did not take, naming the member and AWS's error; for `stopped`: the
    /// booking the group was handed to, when it was not stopped.
    pub detail: Option<String>,
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
    /// The short text of a webhook (a chat message): the subject and what to do or what failed.
    pub chat: String,
}

/// Renders the message of `ctx.event`.
pub fn render(ctx: &NotificationSubject) -> Rendered {
    match ctx.event {
        NotificationEvent::Reminder => render_reminder(ctx),
        event => render_change(ctx, event),
    }
}

/// The `kubectl patch` command that extends the booking of `ctx` by an hour.
fn extend_command(ctx: &NotificationSubject) -> String {
    let new_end = format_rfc3339(ctx.end + chrono::Duration::hours(1));
    format!(
        "kubectl -n {ns} patch booking {b} --type merge -p '{{\"spec\":{{\"end_at\":\"{new_end}\"}}}}'",
        ns = ctx.namespace,
        b = ctx.booking,
    )
}

/// Renders the message of a change of the group's state: `started`, `stopped` or `failed`.
fn render_change(ctx: &NotificationSubject, event: NotificationEvent) -> Rendered {
    let (b, r, ns) = (&ctx.booking, &ctx.resource, &ctx.namespace);
    let (start, end) = (format_rfc3339(ctx.start), format_rfc3339(ctx.end));
    let extend_command = extend_command(ctx);
    let detail = ctx.detail.clone().unwrap_or_default();
    let (subject, says, then) = match event {
        NotificationEvent::Started => (
            format!("Booking {b} of {r} started: its instances run until {end}"),
            format!("has started: every instance of {r} runs (booking from {start} to {end})."),
            format!(
                "They are stopped at {end}. To keep them running for another hour, extend the booking:\n\n  {extend_command}"
            ),
        ),
        NotificationEvent::Stopped if !detail.is_empty() => (
            format!("Booking {b} of {r} ended at {end}: {detail}"),
            format!("ended at {end} (it began at {start}): {detail}."),
            "Nothing is left to do.".to_owned(),
        ),
        NotificationEvent::Stopped => (
            format!("Booking {b} of {r} ended at {end}: its instances are stopped"),
            format!("ended at {end} (it began at {start}): every instance of {r} is stopped."),
            "Nothing is left to do.".to_owned(),
        ),
        _ => (
            format!("Booking {b} of {r}: {detail}"),
            format!("(from {start} to {end}) hit an AWS failure: {detail}."),
            "The controller retries with backoff; `kubectl describe resource` shows the attempts."
                .to_owned(),
        ),
    };
    let created_by = ctx
        .requested_by
        .as_deref()
        .map(|c| format!("\nIt was created by {c}."))
        .unwrap_or_default();
    let text = format!(
        "Hello {user},\n\nyour booking {b} (namespace {ns}) of resource {r} {says}{created_by}\n\n{then}\n",
        user = ctx.user,
    );
    let html = format!(
        "<html><body><p>Hello {user},</p><p>your booking <b>{b}</b> (namespace {ns}) of resource <b>{r}</b> {says}{created_by}</p><pre>{then}</pre></body></html>",
        user = html_escape(&ctx.user),
        b = html_escape(b),
        ns = html_escape(ns),
        r = html_escape(r),
        says = html_escape(&says),
        created_by = html_escape(&created_by),
        then = html_escape(&then),
    );
    let chat = match event {
        NotificationEvent::Started => format!("{subject}\n{extend_command}"),
        _ => subject.clone(),
    };
    Rendered {
        subject,
        text,
        html,
        extend_command,
        chat,
    }
}

/// Renders the message for a booking about to end.
fn render_reminder(ctx: &NotificationSubject) -> Rendered {
    let remaining = (ctx.end - ctx.now).max(chrono::Duration::zero());
    let minutes = (remaining.num_seconds() + 59) / 60;
    let end = format_rfc3339(ctx.end);
    let in_minutes = if minutes == 1 {
        "1 minute".to_owned()
    } else {
        format!("{minutes} minutes")
    };
    let extend_command = extend_command(ctx);
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
        chat: format!("{subject}\n{extend_command}"),
        subject,
        text,
        html,
        extend_command,
    }
}

/// The deterministic Message-ID of an email notification: the same booking uid and
/// notification always give the same identifier; each event of a state change (`started`, …)
/// its own (the reminder's is the one earlier versions sent).
pub fn message_id(
    booking_uid: &str,
    index: usize,
    notification: &Notification,
    event: NotificationEvent,
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
    if event != NotificationEvent::Reminder {
        h.update(event.as_str().as_bytes());
        h.update([0]);
    }
    let digest = hex::encode(&h.finalize()[..16]);
    format!("<booking-{digest}@{domain}>")
}

/// Stable key identifying a notification of a booking in its status: `<index>:<type>:<recipient>`
/// for an email; for a webhook, whose URL is a secret (a Slack-style URL carries its
/// credential in its path), `<index>:webhook:<scheme>://<host>#<first 16 hex digits of the
/// URL's SHA-256>`, so a changed URL is a new notification and the status never shows the
/// URL's path or query.
pub fn notification_key(index: usize, notification: &Notification) -> String {
    if let Some(from) = &notification.recipient_from {
        let secret = &from.secret_key_ref;
        return format!(
            "{index}:{}:secret:{}/{}",
            notification.type_, secret.name, secret.key
        );
    }
    match notification.type_.as_str() {
        "webhook" => webhook_key(index, &notification.recipient),
        _ => format!("{index}:{}:{}", notification.type_, notification.recipient),
    }
}

/// The key recording that notification `index` was sent for `event`: the reminder's is
/// [`notification_key`] (as earlier versions recorded it), every other event's is
/// `<event>:` followed by it, e.g. `started:0:email:ann@example.com`.
pub fn event_key(index: usize, notification: &Notification, event: NotificationEvent) -> String {
    match event {
        NotificationEvent::Reminder => notification_key(index, notification),
        other => format!("{other}:{}", notification_key(index, notification)),
    }
}

fn webhook_key(index: usize, url: &str) -> String {
    let digest = hex::encode(&Sha256::digest(url.as_bytes())[..8]);
    format!("{index}:webhook:{}#{digest}", redacted_url(url))
}

/// A key as recorded in `status.notificationsSent`, in the current form: a webhook's key
/// recorded by earlier versions (`<index>:webhook:<the whole URL>`) becomes the key
/// [`notification_key`] gives that notification now, so nothing is sent twice and the status
/// written next holds no URL. Every other key is returned as is.
pub fn upgraded_key(key: &str) -> String {
    let mut parts = key.splitn(3, ':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(index), Some("webhook"), Some(url))
            if !url.starts_with("secret:") && !is_current_webhook_key(url) =>
        {
            match index.parse::<usize>() {
                Ok(index) => webhook_key(index, url),
                Err(_) => key.to_owned(),
            }
        }
        _ => key.to_owned(),
    }
}

/// Whether the part of a webhook key after `<index>:webhook:` is `<scheme>://<host>#<16 hex>`.
fn is_current_webhook_key(rest: &str) -> bool {
    let Some((url, digest)) = rest.rsplit_once('#') else {
        return false;
    };
    digest.len() == 16
        && digest.bytes().all(|b| b.is_ascii_hexdigit())
        && url
            .split_once("://")
            .is_some_and(|(_, host)| !host.contains(['/', '?', '#']))
}

pub use booking_shared::validation::redacted_url;

/// The recipient of a notification as it may be shown: an email address as written, a
/// webhook's URL as [`redacted_url`] shows it.
pub fn shown_recipient(notification: &Notification) -> String {
    if let Some(from) = &notification.recipient_from {
        let secret = &from.secret_key_ref;
        return format!("the URL in Secret {}, key {}", secret.name, secret.key);
    }
    match notification.type_.as_str() {
        "webhook" => redacted_url(&notification.recipient),
        _ => notification.recipient.clone(),
    }
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn webhook(url: &str) -> Notification {
        Notification {
            type_: "webhook".into(),
            recipient: url.into(),
            lead_minutes: None,
            events: vec![],
            recipient_from: None,
        }
    }

    #[test]
    fn webhook_keys_and_shown_recipients_hold_only_scheme_and_host() {
        let url = "https://hooks.slack.com/services/T0001/B0001/XXXXSECRET?token=abc";
        let n = webhook(url);
        let key = notification_key(2, &n);
        assert!(
            key.starts_with("2:webhook:https://hooks.slack.com#"),
            "{key}"
        );
        assert!(!key.contains("services") && !key.contains("SECRET") && !key.contains("token"));
        assert_ne!(
            key,
            notification_key(
                2,
                &webhook("https://hooks.slack.com/services/T0001/B0001/OTHER")
            )
        );
        assert_eq!(shown_recipient(&n), "https://hooks.slack.com");
        assert_eq!(
            redacted_url("https://user:pw@chat.example.com:8443/hook/x?y=z"),
            "https://chat.example.com:8443"
        );
        assert_eq!(redacted_url("not a url"), "<an unparseable URL>");
        let email = Notification {
            type_: "email".into(),
            recipient: "ann@example.com".into(),
            lead_minutes: None,
            events: vec![],
            recipient_from: None,
        };
        assert_eq!(notification_key(0, &email), "0:email:ann@example.com");
        assert_eq!(shown_recipient(&email), "ann@example.com");
    }

    fn subject(event: NotificationEvent, detail: Option<&str>) -> NotificationSubject {
        let t = |s: &str| {
            chrono::DateTime::parse_from_rfc3339(s)
                .unwrap()
                .with_timezone(&Utc)
        };
        NotificationSubject {
            namespace: "team-a".into(),
            booking: "nightly-etl".into(),
            booking_uid: "uid-1".into(),
            resource: "ec2.analytics".into(),
            user: "ann".into(),
            requested_by: None,
            end: t("2031-01-10T23:00:00Z"),
            now: t("2031-01-10T22:00:05Z"),
            event,
            start: t("2031-01-10T22:00:00Z"),
            detail: detail.map(str::to_owned),
        }
    }

    #[test]
    fn each_state_change_names_the_resource_the_holder_the_times_and_what_failed() {
        let started = render(&subject(NotificationEvent::Started, None));
        assert_eq!(
            started.subject,
            "Booking nightly-etl of ec2.analytics started: its instances run until 2031-01-10T23:00:00Z"
        );
        let stopped = render(&subject(NotificationEvent::Stopped, None));
        assert!(stopped.subject.contains("ended at 2031-01-10T23:00:00Z"));
        assert!(stopped.subject.contains("stopped"), "{}", stopped.subject);
        let handed = render(&subject(
            NotificationEvent::Stopped,
            Some("its instances were handed straight to booking next, which keeps them running"),
        ));
        assert!(
            handed.subject.contains("booking next"),
            "{}",
            handed.subject
        );
        let failed = render(&subject(
            NotificationEvent::Failed,
            Some("a start did not take: i-0abc (IncorrectInstanceState: not now)"),
        ));
        assert!(failed.subject.contains("i-0abc"), "{}", failed.subject);
        for r in [&started, &stopped, &handed, &failed] {
            for body in [&r.text, &r.html] {
                assert!(
                    body.contains("ec2.analytics") && body.contains("ann"),
                    "{body}"
                );
                assert!(body.contains("2031-01-10T22:00:00Z"), "the start: {body}");
                assert!(body.contains("2031-01-10T23:00:00Z"), "the end: {body}");
            }
        }
        assert!(failed.text.contains("IncorrectInstanceState: not now"));
        assert!(started.chat.contains(&started.extend_command));
        // The reminder reads as before.
        let reminder = render(&subject(NotificationEvent::Reminder, None));
        assert!(
            reminder.subject.contains("ends in 60 min"),
            "{}",
            reminder.subject
        );
        assert_eq!(
            reminder.chat,
            format!("{}\n{}", reminder.subject, reminder.extend_command)
        );
    }

    #[test]
    fn each_event_has_its_own_key_and_the_reminder_keeps_the_old_one() {
        let n = webhook("https://hooks.example.com/x");
        let reminder = event_key(0, &n, NotificationEvent::Reminder);
        assert_eq!(reminder, notification_key(0, &n));
        let started = event_key(0, &n, NotificationEvent::Started);
        assert_eq!(started, format!("started:{reminder}"));
        assert_ne!(started, event_key(0, &n, NotificationEvent::Stopped));
        // Not mistaken for a key of an earlier version.
        assert_eq!(upgraded_key(&started), started);
    }

    #[test]
    fn keys_stored_by_earlier_versions_are_upgraded_once() {
        let url = "https://hooks.slack.com/services/T0001/B0001/XXXXSECRET";
        let legacy = format!("1:webhook:{url}");
        let current = notification_key(1, &webhook(url));
        assert_eq!(upgraded_key(&legacy), current);
        assert_eq!(upgraded_key(&current), current, "idempotent");
        assert_eq!(
            upgraded_key("0:email:ann@example.com"),
            "0:email:ann@example.com"
        );
        assert_eq!(upgraded_key("garbage"), "garbage");
        let from = Notification {
            recipient_from: Some(booking_shared::api::RecipientSource {
                secret_key_ref: booking_shared::api::SecretKeyRef {
                    name: "chat-hooks".into(),
                    key: "url".into(),
                },
            }),
            ..webhook("")
        };
        let key = notification_key(3, &from);
        assert_eq!(key, "3:webhook:secret:chat-hooks/url");
        assert_eq!(upgraded_key(&key), key);
        assert_eq!(
            shown_recipient(&from),
            "the URL in Secret chat-hooks, key url"
        );
    }
}
