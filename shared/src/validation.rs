//! Admission rules of the four kinds: pure `validate_*` and `default_*` functions.
//!
//! The admission webhook calls them for every request and the controller may call them to
//! confirm that an object it reads is one it can act on. Nothing here performs I/O or reads the
//! clock: `now` is always a parameter.
//!
//! # Messages
//!
//! Every [`Violation`] names the field (a dotted path such as `spec.notifications[0].recipient`),
//! quotes the value as written and says how to fix it, so a denial printed by `kubectl` is
//! enough to correct the manifest.
//!
//! # Defaulting
//!
//! The `default_*` functions fill **absent** fields only and never rewrite a value the user
//! wrote: GitOps tools compare the stored object with the manifest and would report a rewritten
//! field as drift forever. They return what they filled in, so the caller can build a JSON patch
//! (and send none when nothing changed).
//!
//! # What is not checked here
//!
//! Overlaps between bookings depend on the other bookings of the cluster; they are answered by
//! [`crate::overlap::OverlapIndex`] and worded by [`overlap_violation`].

use std::{fmt, str::FromStr};

use chrono::{DateTime, Duration, Utc};

use crate::{
    api::{
        Booking, BookingScheduler, BookingSchedulerSpec, BookingSpec,
        DEFAULT_NOTIFICATION_LEAD_MINUTES, Notification, ProviderType, Resource, ResourceMonitor,
        ResourceMonitorSpec, ResourceSpec, SUPPORTED_NOTIFICATION_TYPES, unsupported_type_message,
    },
    overlap::IndexedBooking,
    schedule::{CronSchedule, parse_time_zone},
    time::{Slot, format_rfc3339, parse_rfc3339},
};

/// Label put on every Booking naming its Resource, so that `kubectl get bookings -l
/// manager.kotaico.de/resource=ec2.analytics` lists the bookings of one Resource.
pub const RESOURCE_LABEL: &str = "manager.kotaico.de/resource";

/// Longest label value Kubernetes accepts (API conventions: 63 characters).
pub const MAX_LABEL_VALUE_LEN: usize = 63;

/// Longest AWS tag value (the user id is written into the instances' `locked-by` tag).
pub const MAX_TAG_VALUE_LEN: usize = 256;

/// Longest notification lead time, in minutes (one week, as the CRD schema).
pub const MAX_LEAD_MINUTES: u32 = 10_080;

/// How far ahead a scheduler's fires are examined for the shortest interval between two of
/// them: a little over a year, which sees every daylight-saving change of every zone.
pub const SCHEDULE_HORIZON_DAYS: i64 = 370;

/// At most this many fires are examined (bounding admission latency for very frequent
/// schedules, whose shortest interval shows up within the first fires anyway).
pub const SCHEDULE_MAX_FIRES: usize = 5_000;

// === Results ==================================================================================

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Dotted path of the offending field, e.g. `spec.end_at`.
    pub field: String,
    /// The full message: field, value as written and the fix.
    pub message: String,
}

impl Violation {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// An object that breaks one or more rules; the message lists every violation, separated by
/// `; `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Invalid(pub Vec<Violation>);

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, v) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            f.write_str(&v.message)?;
        }
        Ok(())
    }
}

impl Invalid {
    /// The offending fields, in the order found.
    pub fn fields(&self) -> Vec<&str> {
        self.0.iter().map(|v| v.field.as_str()).collect()
    }
}

/// Warnings of an admitted object, printed by `kubectl` as `Warning: …`.
pub type Warnings = Vec<String>;

/// The outcome of validating one object: admitted with warnings, or the violations.
pub type Outcome = Result<Warnings, Invalid>;

/// Cluster-wide settings of the rules (flags of the webhook).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// Longest booking allowed; `None` (the default) allows any length.
    pub max_booking_duration: Option<Duration>,
}

/// Collects violations and warnings while an object is checked.
#[derive(Default)]
struct Report {
    violations: Vec<Violation>,
    warnings: Warnings,
}

impl Report {
    fn deny(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.violations.push(Violation::new(field, message));
    }

    fn warn(&mut self, message: impl Into<String>) {
        self.warnings.push(message.into());
    }

    fn finish(self) -> Outcome {
        if self.violations.is_empty() {
            Ok(self.warnings)
        } else {
            Err(Invalid(self.violations))
        }
    }
}

// === Booking ==================================================================================

/// Validates a Booking's spec on its own (everything but overlaps with other bookings).
///
/// Rules: `start_at` and `end_at` are RFC 3339 and `end_at` is after `start_at`; the slot is
/// not longer than [`Policy::max_booking_duration`]; `resource_name` is a valid object name;
/// `user_id` is non-empty (the mutating webhook fills it first) and fits an AWS tag value; each
/// notification has a known type and a recipient valid for it. A booking that has already
/// ended at `now` is admitted with a warning, because GitOps tools re-apply old manifests.
pub fn validate_booking(spec: &BookingSpec, policy: &Policy, now: DateTime<Utc>) -> Outcome {
    let mut r = Report::default();
    check_resource_name(&mut r, "spec.resource_name", &spec.resource_name);
    check_user_id(&mut r, "spec.user_id", &spec.user_id);
    let start = parse_rfc3339("spec.start_at", &spec.start_at);
    let end = parse_rfc3339("spec.end_at", &spec.end_at);
    let slot = match (start, end) {
        (Ok(_), Ok(_)) => match Slot::of_booking(spec) {
            Ok(slot) => Some(slot),
            Err(e) => {
                r.deny("spec.end_at", e.to_string());
                None
            }
        },
        (start, end) => {
            for e in [start.err(), end.err()].into_iter().flatten() {
                r.deny(e.field.clone(), e.to_string());
            }
            None
        }
    };
    if let Some(slot) = slot {
        if let Some(max) = policy.max_booking_duration
            && slot.duration() > max
        {
            r.deny(
                "spec.end_at",
                format!(
                    "spec.end_at: the booking from {} to {} lasts {}, longer than the {} this cluster allows; shorten it or split it into several bookings",
                    spec.start_at,
                    spec.end_at,
                    human_duration(slot.duration()),
                    human_duration(max)
                ),
            );
        }
        if slot.end <= now {
            r.warn(format!(
                "spec.end_at {} is in the past (now {}): admitted, but the booking will never run",
                spec.end_at,
                now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ));
        }
    }
    check_notifications(&mut r, "spec.notifications", &spec.notifications, slot);
    r.finish()
}

/// The violation for a booking that overlaps `other`, naming the other booking, its user and
/// its times, and the slots that would be free.
pub fn overlap_violation(spec: &BookingSpec, other: &IndexedBooking) -> Violation {
    Violation::new(
        "spec.start_at",
        format!(
            "spec.start_at/spec.end_at: the slot [{}, {}) of resource {} overlaps booking {:?} of user {:?} from {} to {}; choose a slot that ends at or before {} or starts at or after {} (back-to-back bookings are allowed), or book another resource",
            spec.start_at,
            spec.end_at,
            spec.resource_name,
            other.name,
            other.user_id,
            other.start_at,
            other.end_at,
            other.start_at,
            other.end_at,
        ),
    )
}

/// The warning for a booking whose Resource does not exist (yet).
pub fn missing_resource_warning(namespace: &str, resource_name: &str) -> String {
    format!(
        "spec.resource_name: Resource {resource_name:?} does not exist in namespace {namespace:?} yet; the booking waits for it"
    )
}

/// Fills the absent fields of a Booking for a request made by `requesting_user`; `old` is the
/// stored object on update.
///
/// - `spec.user_id`: the old object's value on update, else the requesting user's name.
/// - `spec.notifications[*].leadMinutes`: [`DEFAULT_NOTIFICATION_LEAD_MINUTES`].
/// - label [`RESOURCE_LABEL`]: [`resource_label_value`] of `spec.resource_name`. A value this
///   webhook wrote earlier (equal to the value for the old `resource_name`) follows a change of
///   `resource_name`; a value written by anyone else is left alone.
pub fn default_booking(
    booking: &mut Booking,
    old: Option<&Booking>,
    requesting_user: &str,
) -> Vec<Defaulted> {
    let mut out = Vec::new();
    if booking.spec.user_id.is_empty() {
        let inherited = old
            .map(|o| o.spec.user_id.as_str())
            .filter(|u| !u.is_empty());
        if let Some(user) = inherited.or(Some(requesting_user).filter(|u| !u.is_empty())) {
            booking.spec.user_id = user.to_owned();
            out.push(Defaulted::new("spec.user_id", user));
        }
    }
    default_lead_minutes(
        &mut booking.spec.notifications,
        "spec.notifications",
        &mut out,
    );
    if !booking.spec.resource_name.is_empty() {
        let wanted = resource_label_value(&booking.spec.resource_name);
        let labels = booking.metadata.labels.get_or_insert_with(Default::default);
        let ours_before = old.and_then(|o| {
            let before = o.metadata.labels.as_ref()?.get(RESOURCE_LABEL)?;
            (*before == resource_label_value(&o.spec.resource_name)).then_some(before.clone())
        });
        match labels.get(RESOURCE_LABEL) {
            None => {
                labels.insert(RESOURCE_LABEL.to_owned(), wanted.clone());
                out.push(Defaulted::new(
                    format!("metadata.labels.{RESOURCE_LABEL}"),
                    wanted,
                ));
            }
            Some(current) if Some(current) == ours_before.as_ref() && *current != wanted => {
                labels.insert(RESOURCE_LABEL.to_owned(), wanted.clone());
                out.push(Defaulted::new(
                    format!("metadata.labels.{RESOURCE_LABEL}"),
                    wanted,
                ));
            }
            Some(_) => {}
        }
        if labels.is_empty() {
            booking.metadata.labels = None;
        }
    }
    out
}

/// The value of the [`RESOURCE_LABEL`] label for a Resource name.
///
/// A name that is a valid label value (at most 63 characters of `[A-Za-z0-9._-]`, starting and
/// ending alphanumeric) is used as it is. Any other name is shortened to a prefix and the first
/// 10 hex digits of its SHA-256, which keeps the value unique in practice, stable across
/// versions and readable.
pub fn resource_label_value(resource_name: &str) -> String {
    if is_label_value(resource_name) {
        return resource_name.to_owned();
    }
    crate::names::shorten(resource_name, MAX_LABEL_VALUE_LEN, 10)
}

/// Whether `v` is a valid label value (Kubernetes API conventions; the empty value is valid).
pub fn is_label_value(v: &str) -> bool {
    v.is_empty()
        || (v.len() <= MAX_LABEL_VALUE_LEN
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && v.as_bytes()[0].is_ascii_alphanumeric()
            && v.as_bytes()[v.len() - 1].is_ascii_alphanumeric())
}

// === BookingScheduler =========================================================================

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

// === Resource and ResourceMonitor =============================================================

/// Validates a Resource's spec: `type` is supported (the message lists the supported types),
/// `tag` is a non-empty AWS tag value, `region` (if set) is an AWS region name, `booked_until`
/// (if set) is RFC 3339.
pub fn validate_resource(spec: &ResourceSpec) -> Outcome {
    let mut r = Report::default();
    check_resource_type(&mut r, "spec.type", &spec.type_);
    if spec.tag.trim().is_empty() {
        r.deny(
            "spec.tag",
            "spec.tag: \"\" is empty; give the value of the instances' resource-booking/application tag, e.g. analytics",
        );
    } else if spec.tag.chars().count() > MAX_TAG_VALUE_LEN {
        r.deny(
            "spec.tag",
            format!(
                "spec.tag: {:?} is longer than the {MAX_TAG_VALUE_LEN} characters AWS allows in a tag value; use the tag value the instances carry",
                spec.tag
            ),
        );
    }
    if let Some(region) = spec.region.as_deref() {
        check_region(&mut r, "spec.region", region);
    }
    if let Some(until) = spec.booked_until.as_deref().filter(|u| !u.is_empty())
        && let Err(e) = parse_rfc3339("spec.booked_until", until)
    {
        r.deny("spec.booked_until", e.to_string());
    }
    if spec.hibernate == Some(true) && spec.provider_type() == Some(ProviderType::Rds) {
        r.warn("spec.hibernate applies to ec2 only; it is ignored for an rds Resource");
    }
    r.finish()
}

/// Validates a ResourceMonitor's spec: `type` is supported, every region is an AWS region name.
pub fn validate_resource_monitor(spec: &ResourceMonitorSpec) -> Outcome {
    let mut r = Report::default();
    check_resource_type(&mut r, "spec.type", &spec.type_);
    for (i, region) in spec.regions.iter().enumerate() {
        check_region(&mut r, &format!("spec.regions[{i}]"), region);
    }
    r.finish()
}

/// Resources have no defaults filled at admission: an absent `region` means "the controller's
/// region", resolved at run time so that the stored object stays as written. Always empty;
/// present so that every kind has the same pair of functions.
pub fn default_resource(_resource: &mut Resource) -> Vec<Defaulted> {
    Vec::new()
}

/// ResourceMonitors have no defaults filled at admission (absent `regions` means the
/// controller's region, resolved at run time). Always empty.
pub fn default_resource_monitor(_monitor: &mut ResourceMonitor) -> Vec<Defaulted> {
    Vec::new()
}

// === Defaulted ================================================================================

/// A field filled in by a `default_*` function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Defaulted {
    /// Dotted path of the field.
    pub field: String,
    /// The value filled in.
    pub value: String,
}

impl Defaulted {
    fn new(field: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            value: value.into(),
        }
    }
}

fn default_lead_minutes(notifications: &mut [Notification], path: &str, out: &mut Vec<Defaulted>) {
    for (i, n) in notifications.iter_mut().enumerate() {
        if n.lead_minutes.is_none() {
            n.lead_minutes = Some(DEFAULT_NOTIFICATION_LEAD_MINUTES);
            out.push(Defaulted::new(
                format!("{path}[{i}].leadMinutes"),
                DEFAULT_NOTIFICATION_LEAD_MINUTES.to_string(),
            ));
        }
    }
}

// === Field checks =============================================================================

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

fn check_resource_name(r: &mut Report, field: &str, name: &str) {
    if !is_object_name(name) {
        r.deny(
            field,
            format!(
                "{field}: {name:?} is not a valid Resource name; use the name of a Resource in the same namespace: at most 253 lower-case letters, digits, '-' or '.', starting and ending with a letter or digit, e.g. ec2.analytics"
            ),
        );
    }
}

fn check_user_id(r: &mut Report, field: &str, user: &str) {
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
    }
}

fn check_notifications(
    r: &mut Report,
    path: &str,
    notifications: &[Notification],
    slot: Option<Slot>,
) {
    for (i, n) in notifications.iter().enumerate() {
        let at = format!("{path}[{i}]");
        match n.type_.as_str() {
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
        if let Some(lead) = n.lead_minutes {
            if lead > MAX_LEAD_MINUTES {
                r.deny(
                    format!("{at}.leadMinutes"),
                    format!(
                        "{at}.leadMinutes: {lead} is more than {MAX_LEAD_MINUTES} minutes (one week); give the minutes before the booking's end at which to notify"
                    ),
                );
            } else if let Some(slot) = slot
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

fn check_webhook_url(r: &mut Report, field: &str, value: &str) {
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
        r.deny(
            field,
            format!(
                "{field}: {value:?} is not valid for a webhook notification: {problem}; give an https URL such as https://hooks.example.com/services/T000/B000"
            ),
        );
    }
}

fn check_resource_type(r: &mut Report, field: &str, value: &str) {
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

fn check_region(r: &mut Report, field: &str, region: &str) {
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
fn human_duration(d: Duration) -> String {
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

#[cfg(test)]
mod tests;
