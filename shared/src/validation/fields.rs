//! Checks of single fields shared by the kinds, each adding to a report.

use super::*;

/// Whether `name` is a valid Kubernetes object name (RFC 1123 subdomain: at most 253
/// characters of lower-case letters, digits, `-` and `.`, starting and ending alphanumeric).
pub fn is_object_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 253
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'-' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

pub(super) fn check_resource_name(r: &mut Report, field: &str, name: &str) {
    if !is_object_name(name) {
        r.deny(
            field,
            format!(
                "{field}: {name:?} is not a valid Resource name; use the name of a Resource in the same namespace: at most 253 lower-case letters, digits, '-' or '.', starting and ending with a letter or digit, e.g. ec2.analytics"
            ),
        );
    }
}

pub(super) fn check_user_id(r: &mut Report, field: &str, user: &str) {
    if user.trim().is_empty() {
        r.deny(
            field,
            format!(
                "{field}: {user:?} is empty; set it to the person the booking is for (the mutating webhook fills it from the requesting user when it is registered)"
            ),
        );
    } else if user.chars().count() > MAX_TAG_VALUE_LEN {
        r.deny(
            field,
            format!(
                "{field}: {user:?} is longer than {MAX_TAG_VALUE_LEN} characters, the most an AWS tag value can hold; use a shorter user id"
            ),
        );
    } else {
        check_no_control(r, field, user);
    }
}

/// Refuses control characters (newlines, escapes, NUL, …) in a field that ends up in AWS tags,
/// Events, mail headers or logs, where they could forge lines or hide text.
pub(super) fn check_no_control(r: &mut Report, field: &str, value: &str) {
    if let Some((at, c)) = value.char_indices().find(|(_, c)| c.is_control()) {
        r.deny(
            field,
            format!(
                "{field}: {value:?} holds the control character {:?} at byte {at}; remove it (control characters such as newlines and escapes are not allowed here)",
                c
            ),
        );
    }
}

pub(super) fn check_notifications(
    r: &mut Report,
    path: &str,
    notifications: &[Notification],
    slot: Option<Slot>,
) {
    if notifications.len() > MAX_NOTIFICATIONS {
        r.deny(
            path,
            format!(
                "{path}: {} notifications is more than the {MAX_NOTIFICATIONS} a booking may hold; keep at most {MAX_NOTIFICATIONS} (e.g. one mail to a list instead of one per person)",
                notifications.len()
            ),
        );
    }
    for (i, n) in notifications.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let field = format!("{at}.recipient");
        if n.recipient.chars().count() > MAX_RECIPIENT_LEN {
            r.deny(
                &field,
                format!(
                    "{field}: the recipient is {} characters long, more than the {MAX_RECIPIENT_LEN} allowed; give a shorter address or URL",
                    n.recipient.chars().count()
                ),
            );
            continue;
        }
        let before = r.violations.len();
        check_no_control(r, &field, &n.recipient);
        if r.violations.len() > before {
            continue;
        }
        match n.type_.as_str() {
            "email" if n.recipient_from.is_some() => r.deny(
                format!("{at}.recipient_from"),
                format!(
                    "{at}.recipient_from: only a webhook's URL can come from a Secret; write the email address in {at}.recipient"
                ),
            ),
            "webhook" if n.recipient_from.is_some() => {
                check_recipient_from(r, &at, n);
            }
            "email" => {
                if let Err(e) = email_address::EmailAddress::from_str(&n.recipient) {
                    r.deny(
                        format!("{at}.recipient"),
                        format!(
                            "{at}.recipient: {:?} is not a valid email address ({e}); write it like ann@example.com",
                            n.recipient
                        ),
                    );
                }
            }
            "webhook" => check_webhook_url(r, &format!("{at}.recipient"), &n.recipient),
            other => r.deny(
                format!("{at}.type"),
                format!(
                    "{at}.type: {other:?} is not a known notification type; use one of {}",
                    SUPPORTED_NOTIFICATION_TYPES.join(", ")
                ),
            ),
        }
        check_events(r, &at, &n.events);
        if let Some(lead) = n.lead_minutes {
            if lead > MAX_LEAD_MINUTES {
                r.deny(
                    format!("{at}.leadMinutes"),
                    format!(
                        "{at}.leadMinutes: {lead} is more than {MAX_LEAD_MINUTES} minutes (one week); give the minutes before the booking's end at which to notify"
                    ),
                );
            } else if let Some(slot) = slot
                && n.wanted_events().contains(&NotificationEvent::Reminder)
                && Duration::minutes(i64::from(lead)) >= slot.duration()
            {
                r.warn(format!(
                    "{at}.leadMinutes: {lead} minutes is not shorter than the booking ({}); the notification is sent as soon as the booking starts",
                    human_duration(slot.duration())
                ));
            }
        }
    }
}

/// `{at}.events`: known events, each once.
fn check_events(r: &mut Report, at: &str, events: &[String]) {
    for (j, e) in events.iter().enumerate() {
        let field = format!("{at}.events[{j}]");
        if NotificationEvent::parse(e).is_none() {
            r.deny(
                &field,
                format!(
                    "{field}: {e:?} is not a notification event; use one of {} (absent means [reminder])",
                    NOTIFICATION_EVENTS.join(", ")
                ),
            );
        } else if events[..j].contains(e) {
            r.deny(
                &field,
                format!("{field}: {e:?} is listed twice; give each event once"),
            );
        }
    }
}

/// A webhook whose URL comes from a Secret: `recipient` empty, a Secret name and a key.
fn check_recipient_from(r: &mut Report, at: &str, n: &Notification) {
    let Some(from) = &n.recipient_from else {
        return;
    };
    if !n.recipient.is_empty() {
        r.deny(
            format!("{at}.recipient"),
            format!("{at}: set recipient or recipient_from, not both; remove {at}.recipient"),
        );
    }
    let secret = &from.secret_key_ref;
    if !is_object_name(&secret.name) {
        r.deny(
            format!("{at}.recipient_from.secret_key_ref.name"),
            format!(
                "{at}.recipient_from.secret_key_ref.name: {:?} is not a Secret name (lowercase letters, digits, '-' and '.'); name the Secret that holds the URL",
                secret.name
            ),
        );
    }
    let key_ok = !secret.key.is_empty()
        && secret.key.len() <= 253
        && secret
            .key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
    if !key_ok {
        r.deny(
            format!("{at}.recipient_from.secret_key_ref.key"),
            format!(
                "{at}.recipient_from.secret_key_ref.key: {:?} is not a Secret key (letters, digits, '-', '_' and '.'); name the key that holds the URL, e.g. url",
                secret.key
            ),
        );
    }
}

/// What may be shown of a webhook URL (in Events, conditions, logs, status and admission denials): its scheme and
/// host (with the port), never its path or query, which carry the credential of Slack-style
/// incoming webhooks. `<an unparseable URL>` when it is not a URL.
pub fn redacted_url(url: &str) -> String {
    match url.parse::<http::Uri>() {
        Ok(uri) => match (uri.scheme_str(), uri.authority()) {
            (Some(scheme), Some(authority)) => {
                // Credentials in the authority (`user:pass@host`) are not shown either.
                let host = authority.as_str().rsplit('@').next().unwrap_or_default();
                format!("{scheme}://{host}")
            }
            _ => "<a URL without scheme or host>".to_owned(),
        },
        Err(_) => "<an unparseable URL>".to_owned(),
    }
}

pub(super) fn check_webhook_url(r: &mut Report, field: &str, value: &str) {
    let problem = match url::Url::parse(value) {
        Err(e) => Some(format!("it is not a URL ({e})")),
        Ok(u) if u.scheme() != "https" => Some(format!(
            "its scheme is {:?}, and notifications are only sent over https",
            u.scheme()
        )),
        Ok(u) if u.host_str().is_none_or(str::is_empty) => Some("it has no host".to_owned()),
        Ok(_) => None,
    };
    if let Some(problem) = problem {
        // A webhook URL is a secret (Slack-style URLs carry their credential in the path):
        // a denial, which may be logged or shown in a condition, names only scheme and host.
        let shown = redacted_url(value);
        r.deny(
            field,
            format!(
                "{field}: {shown:?} is not valid for a webhook notification: {problem}; give an https URL such as https://hooks.example.com/services/T000/B000"
            ),
        );
    }
}

pub(super) fn check_resource_type(r: &mut Report, field: &str, value: &str) {
    if ProviderType::parse(value).is_none() {
        r.deny(field, unsupported_type_message(field, value));
    }
}

/// Whether `region` looks like an AWS region name (`eu-central-1`, `us-gov-west-1`): two
/// letters, one or more `-word` parts, and a `-number`.
pub fn is_region(region: &str) -> bool {
    let parts: Vec<&str> = region.split('-').collect();
    parts.len() >= 3
        && parts[0].len() == 2
        && parts[0].bytes().all(|b| b.is_ascii_lowercase())
        && parts[1..parts.len() - 1]
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase()))
        && parts
            .last()
            .is_some_and(|n| !n.is_empty() && n.len() <= 3 && n.bytes().all(|b| b.is_ascii_digit()))
}

pub(super) fn check_region(r: &mut Report, field: &str, region: &str) {
    if !is_region(region) {
        r.deny(
            field,
            format!(
                "{field}: {region:?} is not an AWS region name; write it like eu-central-1 or us-east-1, or leave it out to use the controller's region"
            ),
        );
    }
}

/// `90` minutes as `1h30m`, `15` as `15m`, days as `2d`.
pub(super) fn human_duration(d: Duration) -> String {
    let total = d.num_minutes();
    let (days, hours, minutes) = (total / 1440, (total % 1440) / 60, total % 60);
    let mut s = String::new();
    if days > 0 {
        s.push_str(&format!("{days}d"));
    }
    if hours > 0 {
        s.push_str(&format!("{hours}h"));
    }
    if minutes > 0 || s.is_empty() {
        s.push_str(&format!("{minutes}m"));
    }
    s
}
