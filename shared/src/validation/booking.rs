//! The rules and defaults of a Booking, and the words of its overlaps.

use super::*;

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

/// The key of [`REQUESTED_BY_ANNOTATION`], as a literal for `concat!`.
macro_rules! requested_by_key {
    () => {
        "manager.kotaico.de/requested-by"
    };
}

/// Annotation naming the authenticated user (`request.userInfo.username`) who created a
/// Booking, written by the mutating webhook on CREATE and never changed afterwards.
pub const REQUESTED_BY_ANNOTATION: &str = requested_by_key!();

/// The field path of [`REQUESTED_BY_ANNOTATION`] in the requested-by rule's messages.
const REQUESTED_BY_FIELD: &str = concat!("metadata.annotations[", requested_by_key!(), "]");

/// The [`REQUESTED_BY_ANNOTATION`] of an object's metadata, if set.
pub fn requested_by(meta: &kube::api::ObjectMeta) -> Option<&str> {
    meta.annotations
        .as_ref()?
        .get(REQUESTED_BY_ANNOTATION)
        .map(String::as_str)
}

/// Checks the [`REQUESTED_BY_ANNOTATION`] of a Booking: a CREATE may only carry the requesting
/// user (`requester`) there, and no UPDATE may set, change or remove it (`old` is the stored
/// value on UPDATE: `Some(None)` when the stored booking has none).
pub fn validate_requested_by(
    new: Option<&str>,
    old: Option<Option<&str>>,
    requester: &str,
) -> Result<(), Invalid> {
    let field = REQUESTED_BY_FIELD;
    let problem = match old {
        None => new.filter(|n| *n != requester).map(|n| {
            format!(
                "{field}: {n:?} is not the user making this request ({requester:?}); the annotation records who created the booking and is filled in by the admission webhook: remove it from the manifest"
            )
        }),
        Some(old) if old != new => Some(match old {
            Some(old) => format!(
                "{field}: the booking was created by {old:?} and this annotation cannot be changed or removed (the update sets it to {}); put it back as it was, e.g. remove it from the manifest and apply again",
                new.map_or("nothing".to_owned(), |n| format!("{n:?}"))
            ),
            None => format!(
                "{field}: this booking was created without the annotation and it cannot be added later (the update sets it to {:?}); remove it from the manifest",
                new.unwrap_or_default()
            ),
        }),
        Some(_) => None,
    };
    match problem {
        Some(message) => Err(Invalid(vec![Violation::new(field, message)])),
        None => Ok(()),
    }
}

/// Fills the absent fields of a Booking for a request made by `requesting_user`; `old` is the
/// stored object on update.
///
/// - annotation [`REQUESTED_BY_ANNOTATION`]: on CREATE the requesting user's name, on UPDATE
///   the stored value (an update cannot drop it).
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
    // The creator: the requester on CREATE; on UPDATE the stored value, when an update left
    // it out (server-side apply removes a field its manager no longer sets, and the webhook's
    // additions count as the applier's).
    let creator = match old {
        None => Some(requesting_user).filter(|u| !u.is_empty()),
        Some(o) => requested_by(&o.metadata),
    };
    if let Some(creator) = creator
        && requested_by(&booking.metadata).is_none()
    {
        booking
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(REQUESTED_BY_ANNOTATION.to_owned(), creator.to_owned());
        out.push(Defaulted::new(
            format!("metadata.annotations.{REQUESTED_BY_ANNOTATION}"),
            creator,
        ));
    }
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
