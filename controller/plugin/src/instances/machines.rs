//! The machines of the AWS account: EC2 instances, RDS DB instances and DB clusters as the
//! controller's AWS layer describes them, with the operator's tags read as the controller
//! reads them (both key forms), the order they are shown in, and the lookup of IDs.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use booking_controller::aws::{Ec2Api, Ec2Filter, MAX_FILTER_VALUES, RdsApi, paginate};
use booking_controller::model::{Member, ProviderType};
use booking_controller::tags::{Key, TagKeys};
use futures::future::try_join_all;
use serde::Serialize;

use super::conn::{Aws, call_failed};
use crate::error::Result;

/// What a machine is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Kind {
    /// An EC2 instance.
    #[serde(rename = "ec2")]
    Ec2,
    /// An RDS DB instance (on its own, or a member of a DB cluster).
    #[serde(rename = "rds")]
    Rds,
    /// An RDS DB cluster (Aurora), started and stopped as one.
    #[serde(rename = "aurora-cluster")]
    AuroraCluster,
}

impl Kind {
    /// The Resource type that books it.
    pub fn provider(self) -> ProviderType {
        match self {
            Kind::Ec2 => ProviderType::Ec2,
            Kind::Rds | Kind::AuroraCluster => ProviderType::Rds,
        }
    }

    /// As shown in the TYPE column.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Ec2 => "ec2",
            Kind::Rds => "rds",
            Kind::AuroraCluster => "aurora-cluster",
        }
    }
}

/// One machine and its booking tags.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Machine {
    /// EC2 instance ID, RDS DB instance identifier or DB cluster identifier.
    pub id: String,
    /// What it is.
    #[serde(rename = "type")]
    pub kind: Kind,
    /// Its AWS region.
    pub region: String,
    /// AWS's state name (`running`, `stopped`, `available`, …).
    pub state: String,
    /// Whether the operator manages it: its managed tag is `true`, or (for a DB instance of a
    /// cluster) its cluster's is.
    pub managed: bool,
    /// The managed tag's value as written, under either key form.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub managed_tag: Option<String>,
    /// The application tag: the group a Resource's `spec.tag` names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// For a DB instance of a DB cluster: the cluster, with which it is started and stopped
    /// (by its cluster's group, never alone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The Resource holding its group (its cluster's group for a cluster's DB instance):
    /// `name`, or `namespace/name` across namespaces.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// The lock tag: who holds the machine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locked_by: Option<String>,
    /// The lock tag: until when (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locked_until: Option<String>,
    /// The lock tag: the Resource (`namespace/name`) that wrote the lock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_owner: Option<String>,
    /// RDS: the ARN its tags are written on.
    #[serde(skip)]
    pub arn: Option<String>,
    /// Every tag.
    #[serde(skip)]
    pub tags: BTreeMap<String, String>,
}

impl Machine {
    /// A described member of region `region`, with its tags read by `keys`.
    pub fn new(kind: Kind, region: &str, m: Member, keys: &TagKeys) -> Self {
        let get = |k| keys.get(&m.tags, k).map(str::to_owned);
        Self {
            kind,
            region: region.to_owned(),
            state: m.state.clone(),
            managed: keys.is_managed(&m.tags),
            managed_tag: get(Key::Managed),
            group: get(Key::Application),
            cluster: if m.in_cluster() {
                m.db_cluster.clone()
            } else {
                None
            },
            resource: None,
            locked_by: get(Key::LockedBy),
            locked_until: get(Key::LockedUntil),
            lock_owner: get(Key::LockOwner),
            id: m.id,
            arn: m.arn,
            tags: m.tags,
        }
    }

    /// Whether it is terminated or being deleted.
    pub fn is_gone(&self) -> bool {
        self.kind.provider().is_gone(&self.state)
    }

    /// The group it is booked with and the kind of Resource that books it: its own tag, or
    /// its cluster's for a cluster's DB instance (`None` when the cluster is not listed).
    pub fn booked_group<'a>(&'a self, all: &'a [Machine]) -> Option<&'a str> {
        match &self.cluster {
            None => self.group.as_deref(),
            Some(c) => all
                .iter()
                .find(|m| m.kind == Kind::AuroraCluster && &m.id == c && m.region == self.region)
                .and_then(|m| m.group.as_deref()),
        }
    }
}

/// The order machines are shown in: by region, EC2 before RDS, by ID — a DB cluster's
/// instances right after their cluster. Total, so the order is the same on every run.
pub fn display_order(a: &Machine, b: &Machine) -> Ordering {
    let key = |m: &Machine| {
        (
            m.region.clone(),
            m.kind.provider() == ProviderType::Rds,
            m.cluster.clone().unwrap_or_else(|| m.id.clone()),
            m.cluster.is_some(),
            m.id.clone(),
            m.kind,
        )
    };
    key(a).cmp(&key(b))
}

/// Every machine of `aws`'s regions (only those of `only`, when given), sorted by
/// [`display_order`]; cluster instances get their cluster's managed state.
///
/// # Errors
/// [`crate::error::Error::Aws`] naming the call and region that failed.
pub async fn list_all(aws: &Aws, only: Option<ProviderType>) -> Result<Vec<Machine>> {
    let per_region = aws.regions.iter().map(|region| async move {
        let mut out = Vec::new();
        if only.is_none_or(|p| p == ProviderType::Ec2) {
            out.extend(ec2(aws, region, &Ec2Filter::All).await?);
        }
        if only.is_none_or(|p| p == ProviderType::Rds) {
            out.extend(rds(aws, region).await?);
        }
        Ok::<_, crate::error::Error>(out)
    });
    let mut all: Vec<Machine> = try_join_all(per_region).await?.concat();
    inherit_cluster_management(&mut all);
    all.sort_by(display_order);
    Ok(all)
}

/// The machines of `aws`'s regions whose ID is one of `ids`: EC2 instances (`i-…`) by an
/// `instance-id` filter, the rest among the region's DB instances and DB clusters.
///
/// # Errors
/// As [`list_all`].
pub async fn find(aws: &Aws, ids: &[String]) -> Result<Vec<Machine>> {
    let (ec2_ids, rds_ids): (Vec<String>, Vec<String>) =
        ids.iter().cloned().partition(|id| is_ec2_id(id));
    let per_region = aws.regions.iter().map(|region| {
        let ec2_ids = &ec2_ids;
        let rds_ids = &rds_ids;
        async move {
            let mut out = Vec::new();
            for chunk in ec2_ids.chunks(MAX_FILTER_VALUES) {
                let filter = Ec2Filter::InstanceIds(chunk.to_vec());
                out.extend(ec2(aws, region, &filter).await?);
            }
            if !rds_ids.is_empty() {
                out.extend(rds(aws, region).await?);
            }
            Ok::<_, crate::error::Error>(out)
        }
    });
    let mut all: Vec<Machine> = try_join_all(per_region).await?.concat();
    inherit_cluster_management(&mut all);
    all.retain(|m| ids.contains(&m.id));
    all.sort_by(display_order);
    Ok(all)
}

/// Whether `id` is an EC2 instance ID: `i-` and 8 or 17 hexadecimal digits. (An RDS
/// identifier may also start with `i-`, but then not with hex digits only of these lengths.)
pub fn is_ec2_id(id: &str) -> bool {
    id.strip_prefix("i-").is_some_and(|hex| {
        matches!(hex.len(), 8 | 17) && hex.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

async fn ec2(aws: &Aws, region: &str, filter: &Ec2Filter) -> Result<Vec<Machine>> {
    let api: &dyn Ec2Api = &aws.clients;
    let members = paginate(|t| api.describe_instances(region, filter, t))
        .await
        .map_err(|e| call_failed("DescribeInstances", region, &e))?;
    Ok(members
        .into_iter()
        .map(|m| Machine::new(Kind::Ec2, region, m, &aws.keys))
        .collect())
}

async fn rds(aws: &Aws, region: &str) -> Result<Vec<Machine>> {
    let api: &dyn RdsApi = &aws.clients;
    let (instances, clusters) = futures::try_join!(
        async {
            paginate(|m| api.describe_db_instances(region, m))
                .await
                .map_err(|e| call_failed("DescribeDBInstances", region, &e))
        },
        async {
            paginate(|m| api.describe_db_clusters(region, m))
                .await
                .map_err(|e| call_failed("DescribeDBClusters", region, &e))
        },
    )?;
    let instances = instances
        .into_iter()
        .map(|m| Machine::new(Kind::Rds, region, m, &aws.keys));
    let clusters = clusters
        .into_iter()
        .map(|m| Machine::new(Kind::AuroraCluster, region, m, &aws.keys));
    Ok(instances.chain(clusters).collect())
}

/// A DB instance of a managed cluster is managed with it (the controller counts it in its
/// cluster's group whatever its own tags say).
fn inherit_cluster_management(all: &mut [Machine]) {
    let managed: Vec<(String, String)> = all
        .iter()
        .filter(|m| m.kind == Kind::AuroraCluster && m.managed)
        .map(|m| (m.region.clone(), m.id.clone()))
        .collect();
    for m in all.iter_mut() {
        if let Some(c) = &m.cluster
            && managed.contains(&(m.region.clone(), c.clone()))
        {
            m.managed = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, tags: &[(&str, &str)], cluster: Option<&str>) -> Member {
        Member {
            id: id.into(),
            state: "available".into(),
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            db_cluster: cluster.map(str::to_owned),
            ..Default::default()
        }
    }

    #[test]
    fn ec2_ids_are_told_from_rds_identifiers() {
        assert!(is_ec2_id("i-0123456789abcdef0"));
        assert!(is_ec2_id("i-0123abcd"));
        assert!(!is_ec2_id("i-reporting"));
        assert!(!is_ec2_id("i-0123"));
        assert!(!is_ec2_id("reporting-db"));
    }

    #[test]
    fn tags_are_read_under_both_key_forms_and_cluster_instances_follow_their_cluster() {
        let keys = TagKeys::default();
        let legacy = Machine::new(
            Kind::Ec2,
            "eu-west-1",
            member(
                "i-0123abcd",
                &[
                    ("resource-booking-managed", "true"),
                    ("resource-booking-application", "web"),
                    ("resource-booking/locked-by", "alice"),
                ],
                None,
            ),
            &keys,
        );
        assert!(legacy.managed);
        assert_eq!(legacy.group.as_deref(), Some("web"));
        assert_eq!(legacy.locked_by.as_deref(), Some("alice"));

        let mut all = vec![
            Machine::new(
                Kind::Rds,
                "eu-west-1",
                member("ledger-1", &[], Some("ledger")),
                &keys,
            ),
            Machine::new(
                Kind::AuroraCluster,
                "eu-west-1",
                member(
                    "ledger",
                    &[
                        ("resource-booking/managed", "true"),
                        ("resource-booking/application", "books"),
                    ],
                    None,
                ),
                &keys,
            ),
            Machine::new(Kind::Rds, "eu-west-1", member("aaa", &[], None), &keys),
            Machine::new(Kind::Rds, "eu-west-1", member("zzz", &[], None), &keys),
            legacy,
        ];
        inherit_cluster_management(&mut all);
        all.sort_by(display_order);
        let ids: Vec<&str> = all.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["i-0123abcd", "aaa", "ledger", "ledger-1", "zzz"]);
        let member = &all[3];
        assert!(member.managed, "managed with its cluster");
        assert_eq!(member.group, None, "its own tags as they are");
        assert_eq!(member.booked_group(&all), Some("books"));
    }
}
