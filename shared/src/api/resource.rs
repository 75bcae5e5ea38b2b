//! The Resource: a group of EC2 instances or RDS databases that share a tag.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::*;

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
    printcolumn = r#"{"name":"HELD BY","type":"string","jsonPath":".status.activeUser"}"#,
    printcolumn = r#"{"name":"UNTIL","type":"string","jsonPath":".status.activeUntil"}"#,
    printcolumn = r#"{"name":"NEXT","type":"string","jsonPath":".status.nextBookingStart"}"#,
    printcolumn = r#"{"name":"LOCKED BY","type":"string","jsonPath":".status.locked_by","priority":1}"#,
    printcolumn = r#"{"name":"LOCKED UNTIL","type":"string","jsonPath":".status.locked_until","priority":1}"#,
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
    /// Number of instances carrying the Resource's tag. For `rds`, every DB instance of the
    /// group's Aurora DB clusters counts too (tagged or not), each with its own state.
    #[serde(default)]
    pub instances: u32,
    /// Number of those instances that are running (`running` for EC2, `available` for RDS).
    #[serde(default)]
    pub running: u32,
    /// `STOPPED` (none running), `RUNNING` (all running) or `PENDING` (otherwise), counting what
    /// is started and stopped: each Aurora DB cluster as one, and the instances outside them.
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
    /// Name of the next Booking that will hold the Resource (accepted, not started yet).
    #[serde(
        rename = "nextBooking",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub next_booking: Option<String>,
    /// Start (RFC 3339) of the next Booking that will hold the Resource.
    #[serde(
        rename = "nextBookingStart",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub next_booking_start: Option<String>,
    /// User of the next Booking that will hold the Resource.
    #[serde(
        rename = "nextBookingUser",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub next_booking_user: Option<String>,
    /// Standard conditions (`Ready`, `Synced`, `LockedByOther`, `Degraded`, `GroupClaimed`;
    /// `UntaggedCluster` while a tagged DB instance belongs to an Aurora cluster outside the group;
    /// `DryRun` in dry-run mode).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// `rds` only: number of Aurora DB clusters carrying the Resource's tag (started and
    /// stopped as a whole with StartDBCluster/StopDBCluster; their DB instances are counted in
    /// `instances`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<u32>,
    /// `rds` only: number of those clusters that are `available`.
    #[serde(
        rename = "clustersRunning",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub clusters_running: Option<u32>,
    /// The `metadata.generation` this status was computed from.
    #[serde(
        rename = "observedGeneration",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub observed_generation: Option<i64>,
}

impl ResourceSpec {
    /// `spec.type` as a provider type; `None` when it names none.
    pub fn provider_type(&self) -> Option<ProviderType> {
        ProviderType::parse(&self.type_)
    }
}
