//! The ResourceMonitor: creates a Resource for each tag group found in AWS.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::*;

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
    /// Delete Resources this monitor created when their tag group disappears from AWS: once
    /// the group is missing from several consecutive complete listings (the controller's
    /// `PRUNE_AFTER_LISTINGS`, 3 by default) and no booking that has not ended holds the
    /// Resource. Off by default.
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
    /// Per Resource this monitor created whose group is missing from AWS: the number of
    /// consecutive complete listings it has been missing from (see `spec.prune`).
    #[serde(
        rename = "missingListings",
        default,
        skip_serializing_if = "std::collections::BTreeMap::is_empty"
    )]
    pub missing_listings: std::collections::BTreeMap<String, u32>,
}

impl ResourceMonitorSpec {
    /// `spec.type` as a provider type; `None` when it names none.
    pub fn provider_type(&self) -> Option<ProviderType> {
        ProviderType::parse(&self.type_)
    }
}
