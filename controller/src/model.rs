//! What the controller observes of AWS: instance kinds, members of a tag group and the state
//! rules of each kind (AWS's own state names).

use std::collections::BTreeMap;

use crate::tags::{ASG_TAG, Key, TagKeys};

/// Provider type of a Resource (`spec.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// EC2 instances.
    Ec2,
    /// RDS DB instances.
    Rds,
}

impl Kind {
    /// Parses `spec.type` (`ec2` or `rds`, as in the CRD's enum).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "ec2" => Some(Self::Ec2),
            "rds" => Some(Self::Rds),
            _ => None,
        }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
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

    /// Whether a member in `state` may be started: only `stopped`, for both kinds.
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

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Identifies one inventory: a provider type in a region.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InventoryKey {
    /// Provider type.
    pub kind: Kind,
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
