//! What the controller observes of AWS: inventories (a provider type in a region) and the
//! members of a tag group.

use std::collections::BTreeMap;

use crate::tags::{ASG_TAG, Key, TagKeys};

pub use booking_shared::api::ProviderType;

/// Identifies one inventory: a provider type in a region.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InventoryKey {
    /// Provider type.
    pub kind: ProviderType,
    /// AWS region, e.g. `eu-central-1`.
    pub region: String,
}

/// One managed instance (or Aurora DB cluster) as last described by AWS.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Member {
    /// EC2 instance ID (`i-…`), RDS DB instance identifier or DB cluster identifier.
    pub id: String,
    /// RDS DB instance or DB cluster ARN (needed to tag it); `None` for EC2.
    pub arn: Option<String>,
    /// AWS state name (`running`, `stopped`, `available`, …).
    pub state: String,
    /// AWS's reason for the last state change (EC2 `StateReason`), when given.
    pub state_reason: Option<String>,
    /// All tags of the instance.
    pub tags: BTreeMap<String, String>,
    /// RDS DB instance only: the DB cluster it belongs to (`DBClusterIdentifier`). Such an
    /// instance is started and stopped with its cluster, never on its own.
    pub db_cluster: Option<String>,
    /// Whether this member is an RDS DB cluster (Aurora), started and stopped with
    /// StartDBCluster/StopDBCluster, rather than an instance.
    pub is_cluster: bool,
}

impl Member {
    /// The Auto Scaling group the instance belongs to, if any.
    pub fn asg(&self) -> Option<&str> {
        self.tags.get(ASG_TAG).map(String::as_str)
    }

    /// Whether this is a DB instance that belongs to a DB cluster.
    pub fn in_cluster(&self) -> bool {
        !self.is_cluster && self.db_cluster.is_some()
    }

    /// The group tag (`application`) of the member under either key form.
    pub fn application<'a>(&'a self, keys: &TagKeys) -> Option<&'a str> {
        keys.get(&self.tags, Key::Application)
    }
}
