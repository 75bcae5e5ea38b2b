//! The four custom resources of group `manager.kotaico.de/v1`.
//!
//! Wire compatibility with the original operator: every field the original had keeps its wire
//! name (the snake_case `resource_name`, `start_at`, `booked_by`, …), so its manifests apply
//! unchanged. Fields this project adds follow the Kubernetes API conventions (camelCase).
//!
//! The doc comment of every field becomes its description in the generated CRD, which is what
//! `kubectl explain` prints.

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

mod booking;
mod calendar;
mod monitor;
mod resource;
mod scheduler;
mod watched;

pub use booking::*;
pub use calendar::*;
pub use monitor::*;
pub use resource::*;
pub use scheduler::*;
pub use watched::watched_meta;

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

/// CEL of the message of [`end_after_start_rule`]: both values as written and the fix
/// ([`crate::time::END_AFTER_START_FIX`], the words of the webhook's own refusal). The API
/// server prints it after `spec.end_at: Invalid value: "object": `. It runs only when the rule fails, so both fields are
/// timestamps then.
fn end_after_start_message() -> String {
    format!(
        "'end_at \"' + self.end_at + '\" must be after start_at \"' + self.start_at + '\"; {}'",
        crate::time::END_AFTER_START_FIX
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
