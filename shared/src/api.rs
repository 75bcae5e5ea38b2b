//! The four custom resources of group `manager.kotaico.de/v1`.
//!
//! Wire compatibility with the original operator: every field the original had keeps its wire
//! name (the snake_case `resource_name`, `start_at`, `booked_by`, …), so its manifests apply
//! unchanged. Fields this project adds follow the Kubernetes API conventions (camelCase).
//!
//! The doc comment of every field becomes its description in the generated CRD, which is what
//! `kubectl explain` prints.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of all four kinds.
pub const GROUP: &str = "manager.kotaico.de";
/// API version of all four kinds.
pub const VERSION: &str = "v1";
/// The `kubectl get <category>` name that lists all four kinds.
pub const CATEGORY: &str = "resourcebooking";

/// Provider types a Resource or ResourceMonitor may name (the CRD's enum of `spec.type`).
pub const SUPPORTED_RESOURCE_TYPES: [&str; 2] =
    [ProviderType::ALL[0].as_str(), ProviderType::ALL[1].as_str()];
/// The provider type of a Resource or ResourceMonitor (`spec.type`), with AWS's own state names.
///
/// `spec.type` stays a string on the wire: an object written with an unknown type (admission
/// bypassed, a newer API) still reads, and is reported by the field that is wrong rather than
/// failing to deserialize. [`ResourceSpec::provider_type`] and
/// [`ResourceMonitorSpec::provider_type`] are the one place it is parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProviderType {
    /// EC2 instances.
    Ec2,
    /// RDS DB instances.
    Rds,
}

impl ProviderType {
    /// Every provider type.
    pub const ALL: [Self; 2] = [Self::Ec2, Self::Rds];

    /// Parses a `spec.type` value (`ec2` or `rds`, as in the CRD's enum).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Ec2 => "ec2",
            Self::Rds => "rds",
        }
    }

    /// The state AWS reports for a member that is up: EC2 `running`, RDS `available`.
    pub fn running_state(self) -> &'static str {
        match self {
            Self::Ec2 => "running",
            Self::Rds => "available",
        }
    }

    /// Whether a member in `state` may be started: only `stopped`, for both types.
    pub fn can_start(self, state: &str) -> bool {
        state == "stopped"
    }

    /// Whether a member in `state` may be stopped: EC2 only `running`, RDS only `available`.
    pub fn can_stop(self, state: &str) -> bool {
        state == self.running_state()
    }

    /// Whether a member in `state` is gone or going (EC2 `shutting-down`/`terminated`, RDS
    /// `deleting`): such members are not counted and never acted on.
    pub fn is_gone(self, state: &str) -> bool {
        match self {
            Self::Ec2 => matches!(state, "shutting-down" | "terminated"),
            Self::Rds => matches!(state, "deleting" | "deleted"),
        }
    }
}

impl std::fmt::Display for ProviderType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The message of an unsupported `spec.type` (the webhook's and the controller's).
pub fn unsupported_type_message(field: &str, value: &str) -> String {
    format!(
        "{field}: {value:?} is not a supported resource type; use one of {}",
        SUPPORTED_RESOURCE_TYPES.join(", ")
    )
}

/// Notification types the controller knows how to send.
pub const SUPPORTED_NOTIFICATION_TYPES: [&str; 2] = ["email", "webhook"];
/// Default notification lead time, in minutes before the booking's end (as the original).
pub const DEFAULT_NOTIFICATION_LEAD_MINUTES: u32 = 20;

// ---------------------------------------------------------------------------------------------
// Booking
// ---------------------------------------------------------------------------------------------

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
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = Rule::new(end_after_start_rule())
    .message("end_at must be after start_at: bookings are the half-open interval [start_at, end_at)")
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
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user_id: String,
    /// Notifications sent shortly before the booking ends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notifications: Vec<Notification>,
}

/// One notification of a booking.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
pub struct Notification {
    /// How to notify: `email` (recipient is an email address) or `webhook` (recipient is an
    /// `https` URL that receives a JSON POST, e.g. a Slack incoming webhook).
    #[serde(rename = "type")]
    pub type_: String,
    /// Who receives the notification; its form depends on `type`.
    pub recipient: String,
    /// Minutes before the booking's end at which the notification is sent. Defaults to 20.
    #[serde(
        rename = "leadMinutes",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0, max = 10080))]
    pub lead_minutes: Option<u32>,
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
    /// True once every notification of the booking has been sent.
    #[serde(default)]
    pub notification_sent: bool,
    /// Notifications already sent, as `<index>:<type>:<recipient>` keys, so that each is sent
    /// at most once.
    #[serde(
        rename = "notificationsSent",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub notifications_sent: Vec<String>,
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

// ---------------------------------------------------------------------------------------------
// Resource
// ---------------------------------------------------------------------------------------------

/// A group of cloud instances that share a tag, started and stopped together by bookings.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "manager.kotaico.de",
    version = "v1",
    kind = "Resource",
    namespaced,
    status = "ResourceStatus",
    shortname = "bkres",
    category = "resourcebooking",
    printcolumn = r#"{"name":"TYPE","type":"string","jsonPath":".spec.type","priority":1}"#,
    printcolumn = r#"{"name":"TAG","type":"string","jsonPath":".spec.tag","priority":1}"#,
    printcolumn = r#"{"name":"LOCKED BY","type":"string","jsonPath":".status.locked_by"}"#,
    printcolumn = r#"{"name":"LOCKED UNTIL","type":"string","jsonPath":".status.locked_until"}"#,
    printcolumn = r#"{"name":"INSTANCES","type":"integer","jsonPath":".status.instances"}"#,
    printcolumn = r#"{"name":"RUNNING","type":"integer","jsonPath":".status.running"}"#,
    printcolumn = r#"{"name":"STATUS","type":"string","jsonPath":".status.status"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct ResourceSpec {
    /// Provider type: `ec2` (EC2 instances) or `rds` (RDS DB instances).
    #[serde(rename = "type")]
    #[schemars(schema_with = "resource_type_schema")]
    pub type_: String,
    /// Value of the instances' `resource-booking/application` tag that groups them.
    #[schemars(length(min = 1, max = 256))]
    pub tag: String,
    /// Manual booking kept for compatibility with the original: the user holding the group
    /// until `booked_until`. Empty when unused; prefer Booking objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub booked_by: Option<String>,
    /// End of the manual booking, RFC 3339. Empty when unused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub booked_until: Option<String>,
    /// AWS region of the instances, e.g. `eu-central-1`. Defaults to the controller's region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z]{2}(-[a-z]+)+-\d+$"))]
    pub region: Option<String>,
    /// EC2 only: stop with hibernation where the instance supports it (falls back to a plain
    /// stop otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hibernate: Option<bool>,
}

/// Aggregate state of a Resource's instances.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ResourceState {
    /// No instance is running.
    #[serde(rename = "STOPPED")]
    Stopped,
    /// Every instance is running.
    #[serde(rename = "RUNNING")]
    Running,
    /// Some, but not all, instances are running.
    #[serde(rename = "PENDING")]
    Pending,
}

impl ResourceState {
    /// STOPPED when none of `instances` runs, RUNNING when all do, PENDING otherwise
    /// (the original's rule; an empty group is STOPPED).
    pub fn from_counts(instances: u32, running: u32) -> Self {
        if running == 0 {
            Self::Stopped
        } else if running >= instances {
            Self::Running
        } else {
            Self::Pending
        }
    }
}

/// Observed state of a Resource, written only by the controller.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct ResourceStatus {
    /// Number of instances carrying the Resource's tag.
    #[serde(default)]
    pub instances: u32,
    /// Number of those instances that are running (`running` for EC2, `available` for RDS).
    #[serde(default)]
    pub running: u32,
    /// `STOPPED` (none running), `RUNNING` (all running) or `PENDING` (otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ResourceState>,
    /// User holding the group's lock tag, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locked_by: Option<String>,
    /// End of the lock (RFC 3339), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locked_until: Option<String>,
    /// Name of the Booking currently holding the Resource.
    #[serde(
        rename = "activeBooking",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub active_booking: Option<String>,
    /// User of the booking (or manual booking) currently holding the Resource.
    #[serde(
        rename = "activeUser",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub active_user: Option<String>,
    /// End (RFC 3339) of the booking currently holding the Resource.
    #[serde(
        rename = "activeUntil",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub active_until: Option<String>,
    /// Standard conditions (`Ready`, `Synced`, `LockedByOther`, `Degraded`).
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

// ---------------------------------------------------------------------------------------------
// ResourceMonitor
// ---------------------------------------------------------------------------------------------

/// Discovers tagged instance groups of one provider type and creates a Resource for each.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "manager.kotaico.de",
    version = "v1",
    kind = "ResourceMonitor",
    namespaced,
    status = "ResourceMonitorStatus",
    shortname = "bkmon",
    category = "resourcebooking",
    printcolumn = r#"{"name":"TYPE","type":"string","jsonPath":".spec.type"}"#,
    printcolumn = r#"{"name":"LAST SCAN","type":"date","jsonPath":".status.lastScanTime"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct ResourceMonitorSpec {
    /// Provider type to scan: `ec2` or `rds`. Created Resources are named `<type>.<tag>`.
    #[serde(rename = "type")]
    #[schemars(schema_with = "resource_type_schema")]
    pub type_: String,
    /// AWS regions to scan. Defaults to the controller's region.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regions: Vec<String>,
    /// Delete Resources this monitor created when their tag group disappears from AWS.
    /// Off by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prune: Option<bool>,
}

/// Observed state of a ResourceMonitor, written only by the controller.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct ResourceMonitorStatus {
    /// Tag groups seen in the last complete scan.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// When the last complete scan finished (RFC 3339).
    #[serde(
        rename = "lastScanTime",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub last_scan_time: Option<String>,
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

// ---------------------------------------------------------------------------------------------
// BookingScheduler
// ---------------------------------------------------------------------------------------------

/// Creates a Booking at every fire time of a cron schedule.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "manager.kotaico.de",
    version = "v1",
    kind = "BookingScheduler",
    namespaced,
    status = "BookingSchedulerStatus",
    shortname = "bks",
    category = "resourcebooking",
    printcolumn = r#"{"name":"SCHEDULE","type":"string","jsonPath":".spec.schedule"}"#,
    printcolumn = r#"{"name":"DURATION","type":"integer","jsonPath":".spec.duration"}"#,
    printcolumn = r#"{"name":"NEXT","type":"string","jsonPath":".status.next"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct BookingSchedulerSpec {
    /// Standard 5-field cron expression (minute hour day-of-month month day-of-week) or one of
    /// `@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`, evaluated in `timeZone`.
    #[schemars(length(min = 1, max = 256))]
    pub schedule: String,
    /// Length of each booking, in minutes (at least 1, and not longer than the shortest interval
    /// between two fires).
    #[schemars(range(min = 1, max = 525600))]
    pub duration: u32,
    /// Booking created at each fire time: `start_at` is the fire time, `end_at` is
    /// `start_at + duration`.
    #[serde(rename = "bookingTemplate")]
    pub booking_template: BookingTemplate,
    /// IANA time zone of the schedule, e.g. `Europe/Berlin`. Defaults to `UTC`.
    #[serde(rename = "timeZone", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub time_zone: Option<String>,
    /// As for CronJobs: a fire missed while the controller was down is still honoured when it
    /// is at most this many seconds old (and its slot has not ended). Unset: no deadline.
    #[serde(
        rename = "startingDeadlineSeconds",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0))]
    pub starting_deadline_seconds: Option<i64>,
    /// How many FINISHED bookings created by this scheduler to keep. Unset: keep all.
    #[serde(
        rename = "finishedBookingsHistoryLimit",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0))]
    pub finished_bookings_history_limit: Option<u32>,
}

/// The fields of a booking without its times.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
pub struct BookingTemplate {
    /// Name of the Resource each booking runs.
    #[schemars(length(min = 1, max = 253))]
    pub resource_name: String,
    /// Who the bookings are for. When absent, the admission webhook fills in the requesting
    /// user's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user_id: String,
    /// Notifications of each booking.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notifications: Vec<Notification>,
}

/// Observed state of a BookingScheduler, written only by the controller.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct BookingSchedulerStatus {
    /// Next fire time (RFC 3339, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// Last fire time handled (RFC 3339, UTC): a booking was created for it, or it was missed
    /// beyond `startingDeadlineSeconds` and skipped.
    #[serde(
        rename = "lastFireTime",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub last_fire_time: Option<String>,
    /// Name of the last booking created.
    #[serde(
        rename = "lastBooking",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub last_booking: Option<String>,
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

// ---------------------------------------------------------------------------------------------
// Schema helpers
// ---------------------------------------------------------------------------------------------

/// The timestamps a Booking's `start_at` and `end_at` may hold, as an RE2 pattern (what CEL's
/// `matches` speaks): `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` with an upper-case `T` and `Z`,
/// the offset with its colon, and a year from 1000 to 9998. The same set as
/// [`crate::time::parse_rfc3339`] accepts once the calendar is checked too.
///
/// Why the schema does not simply say `format: date-time`: the API server's format check
/// answers `must be of type date-time` without saying what the right form is, skips every CEL
/// rule of the object, and lets through values (a lower-case `t` or `z`) that its CEL runtime
/// then cannot convert, so the object's rules fail with an evaluation error on the wrong field.
/// The years keep every instant, whatever its offset, inside CEL's timestamp range (years 1 to
/// 9999): beyond it, `timestamp()` fails with an overflow.
pub const RFC3339_PATTERN: &str = r"^([1-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$";

/// What the CRD answers for a `start_at` or `end_at` that is not an RFC 3339 timestamp; the API
/// server prints it after the field's path and the value, e.g. `spec.start_at: Invalid value:
/// "2031-05-01T10:00:00+0100": must be …`.
pub const RFC3339_MESSAGE: &str = "must be an RFC 3339 timestamp with seconds and an explicit offset, written like 2031-01-10T22:35:00Z or 2031-01-10T23:35:00+01:00 (upper-case T and Z, the offset with its colon)";

/// CEL: whether the string `value` (an expression) is a timestamp of [`RFC3339_PATTERN`] on a
/// real calendar date (`format.datetime()` rejects February 30). When it holds, CEL's
/// `timestamp(value)` cannot fail.
fn cel_is_rfc3339(value: &str) -> String {
    let pattern = RFC3339_PATTERN.replace('\\', "\\\\");
    format!("{value}.matches('{pattern}') && !format.datetime().validate({value}).hasValue()")
}

/// CEL of the Booking spec: `end_at` after `start_at`, compared as instants (offsets differ).
/// Evaluated only when both are timestamps, so the rule never fails with an evaluation error;
/// an unreadable time is reported by its own field's rule instead.
fn end_after_start_rule() -> String {
    format!(
        "!({} && {}) || timestamp(self.end_at) > timestamp(self.start_at)",
        cel_is_rfc3339("self.start_at"),
        cel_is_rfc3339("self.end_at")
    )
}

fn rfc3339_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "maxLength": 64,
        "x-kubernetes-validations": [{
            "rule": cel_is_rfc3339("self"),
            "message": RFC3339_MESSAGE,
            "reason": "FieldValueInvalid",
        }],
    })
}

fn resource_type_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "enum": SUPPORTED_RESOURCE_TYPES,
    })
}

impl ResourceSpec {
    /// `spec.type` as a provider type; `None` when it names none.
    pub fn provider_type(&self) -> Option<ProviderType> {
        ProviderType::parse(&self.type_)
    }
}

impl ResourceMonitorSpec {
    /// `spec.type` as a provider type; `None` when it names none.
    pub fn provider_type(&self) -> Option<ProviderType> {
        ProviderType::parse(&self.type_)
    }
}
