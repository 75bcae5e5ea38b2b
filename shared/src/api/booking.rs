//! The Booking: a slot of one Resource for one user, with its notifications.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::*;

/// The field selector label of `spec.resource_name` (a selectable field of the CRD): the
/// bookings of one Resource are listed with `fieldSelector=spec.resource_name=<name>`, e.g.
/// `kubectl get bookings --field-selector spec.resource_name=ec2.analytics`.
pub const RESOURCE_FIELD: &str = "spec.resource_name";

/// A time slot during which the instances of one Resource run.
///
/// The slot is the half-open interval [start_at, end_at): the group is started at `start_at` and
/// stopped at `end_at`, and a booking may start exactly when another one ends.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "manager.kotaico.de",
    version = "v1",
    kind = "Booking",
    namespaced,
    status = "BookingStatus",
    shortname = "bk",
    category = "resourcebooking",
    printcolumn = r#"{"name":"RESOURCE","type":"string","jsonPath":".spec.resource_name"}"#,
    printcolumn = r#"{"name":"START","type":"string","jsonPath":".spec.start_at"}"#,
    printcolumn = r#"{"name":"END","type":"string","jsonPath":".spec.end_at"}"#,
    printcolumn = r#"{"name":"STATUS","type":"string","jsonPath":".status.status"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    selectable = ".spec.resource_name"
)]
#[x_kube(validation = Rule::new(end_after_start_rule())
    .message(kube::core::cel::Message::Expression(end_after_start_message()))
    .field_path(".end_at")
    .reason(Reason::FieldValueInvalid))]
pub struct BookingSpec {
    /// Name of the Resource (in the booking's namespace) whose instances this booking runs,
    /// e.g. `ec2.analytics`.
    #[schemars(length(min = 1, max = 253))]
    pub resource_name: String,
    /// Start of the slot: an RFC 3339 timestamp with an explicit offset, e.g.
    /// `2031-01-10T22:35:00Z` or `2031-01-10T23:35:00+01:00`; fractional seconds allowed.
    /// The group is started at this instant.
    #[schemars(schema_with = "rfc3339_schema")]
    pub start_at: String,
    /// End of the slot (exclusive): an RFC 3339 timestamp after `start_at`. The group is stopped
    /// at this instant.
    #[schemars(schema_with = "rfc3339_schema")]
    pub end_at: String,
    /// Who the booking is for. Written into the instances' `locked-by` tag while the booking is
    /// in progress. When absent, the admission webhook fills in the requesting user's name.
    /// At most 256 characters (an AWS tag value), no control characters.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 256))]
    pub user_id: String,
    /// Notifications of the booking (at most 10): by default shortly before it ends; each may
    /// also (or instead) ask for `started`, `stopped` and `failed` (see `events`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub notifications: Vec<Notification>,
}

/// One notification of a booking.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
pub struct Notification {
    /// How to notify: `email` (recipient is an email address) or `webhook` (recipient is an
    /// `https` URL that receives a JSON POST, e.g. a Slack incoming webhook).
    #[serde(rename = "type")]
    pub type_: String,
    /// Who receives the notification; its form depends on `type`. Empty when `recipient_from`
    /// gives it. At most 2048 characters, no control characters.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 2048))]
    pub recipient: String,
    /// Where the controller reads a webhook's URL instead of `recipient`, so that the URL (a
    /// secret for Slack-style webhooks) is kept in a Secret of the booking's namespace:
    /// `recipient_from: {secret_key_ref: {name: chat-hooks, key: url}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipient_from: Option<RecipientSource>,
    /// Minutes before the booking's end at which the notification is sent. Defaults to 20.
    #[serde(
        rename = "leadMinutes",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0, max = 10080))]
    pub lead_minutes: Option<u32>,
    /// When to notify: `reminder` (`leadMinutes` before the end), `started` (once the booking
    /// holds its Resource and every member runs), `stopped` (once after the end, when the group
    /// has stopped or was handed straight to the following booking) and `failed` (a start or
    /// stop for this booking that AWS refused or that did not take, naming the member and
    /// AWS's error). Absent or empty: `[reminder]`. Each at most once per booking.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "notification_events_schema")]
    pub events: Vec<String>,
}

/// What a notification is sent for (see [`Notification::events`]).
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default,
)]
#[serde(rename_all = "lowercase")]
pub enum NotificationEvent {
    /// `leadMinutes` before the booking's end (the original's only notification).
    #[default]
    Reminder,
    /// The booking holds its Resource and the group's start took.
    Started,
    /// After the booking's end, the group's stop took (or the group went to the next booking).
    Stopped,
    /// A start or stop for this booking did not take.
    Failed,
}

/// The values of `events`, in the order the CRD's enum lists them.
pub const NOTIFICATION_EVENTS: [&str; 4] = ["reminder", "started", "stopped", "failed"];

impl NotificationEvent {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reminder => "reminder",
            Self::Started => "started",
            Self::Stopped => "stopped",
            Self::Failed => "failed",
        }
    }

    /// The event named `s`, if any.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "reminder" => Some(Self::Reminder),
            "started" => Some(Self::Started),
            "stopped" => Some(Self::Stopped),
            "failed" => Some(Self::Failed),
            _ => None,
        }
    }
}

impl std::fmt::Display for NotificationEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Notification {
    /// The events this notification is sent for: `events` without unknown values and
    /// duplicates (the webhook denies both), `[reminder]` when none is given.
    pub fn wanted_events(&self) -> Vec<NotificationEvent> {
        let mut out: Vec<NotificationEvent> = Vec::new();
        for e in self
            .events
            .iter()
            .filter_map(|e| NotificationEvent::parse(e))
        {
            if !out.contains(&e) {
                out.push(e);
            }
        }
        if self.events.is_empty() {
            out.push(NotificationEvent::Reminder);
        }
        out
    }

    /// Whether this notification is sent for `event`.
    pub fn wants(&self, event: NotificationEvent) -> bool {
        self.wanted_events().contains(&event)
    }
}

fn notification_events_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "maxItems": 4,
        "items": {"type": "string", "enum": NOTIFICATION_EVENTS},
    })
}

/// Where a notification's recipient is read from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
pub struct RecipientSource {
    /// A key of a Secret in the booking's namespace; its value is the recipient.
    pub secret_key_ref: SecretKeyRef,
}

/// A key of a Secret in the namespace of the object that names it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
pub struct SecretKeyRef {
    /// The Secret's name.
    pub name: String,
    /// The key in the Secret's `data`.
    pub key: String,
}

/// Phase of a booking, as written to `status.status`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum BookingPhase {
    /// Before `start_at`.
    #[serde(rename = "SCHEDULED")]
    Scheduled,
    /// In [start_at, end_at) and holding its Resource.
    #[serde(rename = "IN PROGRESS")]
    InProgress,
    /// At or after `end_at`.
    #[serde(rename = "FINISHED")]
    Finished,
    /// In its slot but overlapping an earlier-created booking of the same Resource, which holds
    /// the Resource instead.
    #[serde(rename = "CONFLICT")]
    Conflict,
}

impl BookingPhase {
    /// The wire string, as `kubectl get` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scheduled => "SCHEDULED",
            Self::InProgress => "IN PROGRESS",
            Self::Finished => "FINISHED",
            Self::Conflict => "CONFLICT",
        }
    }
}

impl std::fmt::Display for BookingPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Observed state of a Booking, written only by the controller.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct BookingStatus {
    /// `SCHEDULED`, `IN PROGRESS`, `FINISHED` or `CONFLICT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<BookingPhase>,
    /// True once every notification of the booking has been sent (for each event it asks for but
    /// `failed`, which is sent only when something fails). Like `notificationsSent`, it counts a
    /// notification from the moment its send begins; a send that fails for a reason that may
    /// pass is taken back (and retried) before its `NotificationFailed` Event is published.
    #[serde(default)]
    pub notification_sent: bool,
    /// Notifications sent or being sent, as `<index>:<type>:<recipient>` keys (for a webhook,
    /// whose URL is a secret, `<index>:webhook:<scheme>://<host>#<digest of the URL>`), so that
    /// each is sent at most once: a key is recorded just before its send and removed again when
    /// the send fails for a reason that may pass. The reminder is recorded by that key, every other event by
    /// `<event>:` followed by it (e.g. `started:0:email:ann@example.com`).
    #[serde(
        rename = "notificationsSent",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub notifications_sent: Vec<String>,
    /// When the notification reconciler first saw the booking's Resource held by this booking
    /// (RFC 3339). Recorded only for bookings with a `stopped` or `failed` notification: those
    /// are sent after the end only for a booking that held its group.
    #[serde(rename = "heldAt", default, skip_serializing_if = "Option::is_none")]
    pub held_at: Option<String>,
    /// Standard conditions (`Ready`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status was computed from.
    #[serde(
        rename = "observedGeneration",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub observed_generation: Option<i64>,
}
