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

/// One managed instance as last described by AWS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// EC2 instance ID (`i-…`) or RDS DB instance identifier.
    pub id: String,
    /// RDS DB instance ARN (needed to tag it); `None` for EC2.
    pub arn: Option<String>,
    /// AWS state name (`running`, `stopped`, `available`, …).
    pub state: String,
    /// AWS's reason for the last state change (EC2 `StateReason`), when given.
    pub state_reason: Option<String>,
    /// All tags of the instance.
    pub tags: BTreeMap<String, String>,
}

impl Member {
    /// The Auto Scaling group the instance belongs to, if any.
    pub fn asg(&self) -> Option<&str> {
        self.tags.get(ASG_TAG).map(String::as_str)
    }

    /// The group tag (`application`) of the member under either key form.
    pub fn application<'a>(&'a self, keys: &TagKeys) -> Option<&'a str> {
        keys.get(&self.tags, Key::Application)
    }
}
