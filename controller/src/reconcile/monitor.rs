//! The ResourceMonitor reconciler: creates a Resource `<type>.<tag>` (`<type>.<tag>.<region>`
//! outside the default region) for each tag group the inventory shows and no Resource
//! represents yet; optionally prunes the Resources it created whose group disappeared — only on
//! the strength of complete listings.
//!
//! `scan` reads the inventories; [`decide`] (pure) turns the scan and the existing Resources
//! into creations, deletions and the status; [`reconcile`] does them.

use std::collections::BTreeSet;
use std::sync::Arc;

use booking_shared::api::{
    ProviderType, Resource, ResourceMonitor, ResourceMonitorStatus, ResourceSpec,
    unsupported_type_message,
};
use booking_shared::time::format_rfc3339;
use chrono::{DateTime, Utc};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ObjectMeta};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use super::resource::claim;
use super::{ns_name, write_status};
use crate::conditions::{CondSpec, merge};
use crate::context::{Context, post_params};
use crate::error::Result;
use crate::model::InventoryKey;

/// Label naming the monitor that created a Resource.
pub const MONITOR_LABEL: &str = "manager.kotaico.de/monitor";
/// Standard label marking objects created by the controller.
pub const CREATED_BY_LABEL: &str = "app.kubernetes.io/created-by";
/// Its value.
pub const CREATED_BY: &str = "booking-controller";

/// The Resource name of a group: `<type>.<tag>`, with `.<region>` outside the default region;
/// `None` when the tag cannot form a Kubernetes object name (RFC 1123 subdomain).
pub fn resource_name(
    provider: ProviderType,
    tag: &str,
    region: &str,
    default_region: &str,
) -> Option<String> {
    let name = if region == default_region {
        format!("{provider}.{tag}")
    } else {
        format!("{provider}.{tag}.{region}")
    };
    let valid = name.len() <= 253
        && name.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        });
    valid.then_some(name)
}

/// What the inventories show of the monitor's regions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scan {
    /// The tag groups seen, per region.
    pub groups: Vec<(String, Vec<String>)>,
    /// Whether every region's last listing completed.
    pub complete: bool,
    /// Problems of the listings, one per region.
    pub problems: Vec<String>,
    /// When the oldest of the listings began.
    pub oldest: Option<DateTime<Utc>>,
}

/// What the monitor does.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// `(name, tag, region)` of the Resources to create.
    pub create: Vec<(String, String, String)>,
    /// Names of the Resources to delete (pruned).
    pub delete: Vec<String>,
    /// The status, but for its Ready condition's creation problems (added by `reconcile`).
    pub status: ResourceMonitorStatus,
}

/// When a pruning monitor may delete a Resource it created.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pruning {
    /// Consecutive complete listings the group must be missing from.
    pub after_listings: u32,
    /// The Resources a booking that has not ended holds: never pruned.
    pub held: BTreeSet<String>,
}

/// The monitor's creations, deletions and status from `scan`, given the names of the Resources of
/// its namespace (`existing`) and those it created (`owned`). Pure.
#[allow(clippy::too_many_arguments)]
pub fn decide(
    m: &ResourceMonitor,
    provider: ProviderType,
    scan: &Scan,
    existing: &BTreeSet<String>,
    owned: &BTreeSet<String>,
    default_region: &str,
    pruning: &Pruning,
    now: DateTime<Utc>,
) -> Decision {
    let explicit_regions = !m.spec.regions.is_empty();
    let mut problems = scan.problems.clone();
    let mut seen = BTreeSet::new();
    let mut create = Vec::new();
    let mut groups = Vec::new();
    for (region, tags) in &scan.groups {
        for tag in tags {
            groups.push(if explicit_regions {
                format!("{region}/{tag}")
            } else {
                tag.clone()
            });
            let Some(name) = resource_name(provider, tag, region, default_region) else {
                problems.push(format!(
                    "tag {tag:?} cannot be a Resource name (lowercase letters, digits, '-' and '.')"
                ));
                continue;
            };
            seen.insert(name.clone());
            if !existing.contains(&name) {
                create.push((name, tag.clone(), region.clone()));
            }
        }
    }
    let old = m.status.clone().unwrap_or_default();
    let (delete, missing_listings) = if m.spec.prune.unwrap_or(false) {
        if !scan.complete {
            problems.push("pruning skipped: not every listing completed".to_owned());
        }
        prune(&old, scan, owned, &seen, pruning)
    } else {
        (Vec::new(), Default::default())
    };
    groups.sort();
    groups.dedup();
    let ready = if problems.is_empty() {
        CondSpec::new(
            "Ready",
            true,
            "Scanned",
            &format!("{} group(s) seen", groups.len()),
        )
    } else {
        CondSpec::new("Ready", false, "ScanProblems", &problems.join("; "))
    };
    Decision {
        create,
        delete,
        status: ResourceMonitorStatus {
            groups,
            last_scan_time: scan.oldest.map(format_rfc3339),
            conditions: merge(&old.conditions, &[ready], m.metadata.generation, now),
            observed_generation: m.metadata.generation,
            missing_listings,
        },
    }
}

/// The Resources to prune and the new missing counts: a Resource the monitor created (`owned`)
/// whose group is not `seen` counts one more listing each time a complete listing newer than
/// the last counted one (`old.lastScanTime`) misses it; a group seen again starts over. It is
/// pruned once its count reaches `pruning.after_listings`, on a complete listing, and when no
/// booking holds it. Pure.
fn prune(
    old: &ResourceMonitorStatus,
    scan: &Scan,
    owned: &BTreeSet<String>,
    seen: &BTreeSet<String>,
    pruning: &Pruning,
) -> (Vec<String>, std::collections::BTreeMap<String, u32>) {
    let last_counted = old
        .last_scan_time
        .as_deref()
        .and_then(|t| booking_shared::time::parse_rfc3339("status.lastScanTime", t).ok());
    let new_listing = scan.complete
        && scan
            .oldest
            .is_some_and(|t| last_counted.is_none_or(|last| t > last));
    let mut delete = Vec::new();
    let mut missing = std::collections::BTreeMap::new();
    for name in owned.difference(seen) {
        let before = old.missing_listings.get(name).copied().unwrap_or(0);
        let count = if new_listing { before + 1 } else { before };
        if scan.complete && count >= pruning.after_listings && !pruning.held.contains(name) {
            delete.push(name.clone());
        } else if count > 0 {
            missing.insert(name.clone(), count);
        }
    }
    (delete, missing)
}

/// Reads the inventory of `provider` in each region of the monitor.
async fn scan(ctx: &Context, m: &ResourceMonitor, provider: ProviderType) -> Scan {
    let regions: Vec<String> = if m.spec.regions.is_empty() {
        vec![ctx.groups.default_region.clone()]
    } else {
        m.spec.regions.clone()
    };
    let mut out = Scan {
        complete: true,
        ..Scan::default()
    };
    for (i, region) in regions.into_iter().enumerate() {
        // A region outside the operator's allow-list is never listed, so nothing is pruned.
        let field = if m.spec.regions.is_empty() {
            "the controller's region".to_owned()
        } else {
            format!("spec.regions[{i}]")
        };
        if let Err(message) = ctx.groups.allowed_regions.check(&field, &region) {
            out.complete = false;
            out.problems.push(message);
            continue;
        }
        let key = InventoryKey {
            kind: provider,
            region: region.clone(),
        };
        if let Err(e) = ctx.groups.inventory.ensure(&key).await {
            out.problems.push(format!("{region}: {e}"));
        }
        let Some(snap) = ctx.groups.inventory.snapshot(&key) else {
            out.complete = false;
            continue;
        };
        if !snap.complete {
            out.complete = false;
            out.problems.push(format!(
                "{region}: last listing incomplete: {}",
                snap.error.clone().unwrap_or_default()
            ));
        }
        out.oldest = Some(
            out.oldest
                .map_or(snap.observed_at, |t| t.min(snap.observed_at)),
        );
        out.groups
            .push((region, snap.groups(&ctx.groups.keys).into_iter().collect()));
    }
    out
}

/// Reconciles one ResourceMonitor.
#[tracing::instrument(skip_all, fields(namespace, name))]
pub async fn reconcile(m: Arc<ResourceMonitor>, ctx: Arc<Context>) -> Result<Action> {
    let (ns, name) = ns_name(m.as_ref())?;
    let now = ctx.now();
    let old = m.status.clone().unwrap_or_default();
    let Some(provider) = m.spec.provider_type() else {
        let status = ResourceMonitorStatus {
            conditions: merge(
                &old.conditions,
                &[CondSpec::new(
                    "Ready",
                    false,
                    "InvalidSpec",
                    &unsupported_type_message("spec.type", &m.spec.type_),
                )],
                m.metadata.generation,
                now,
            ),
            observed_generation: m.metadata.generation,
            ..old
        };
        write_status(&ctx, m.as_ref(), &status, None).await?;
        return Ok(Action::await_change());
    };
    let scan = scan(&ctx, &m, provider).await;
    let in_namespace: Vec<_> = ctx
        .caches
        .resources
        .state()
        .into_iter()
        .filter(|r| r.namespace().as_deref() == Some(ns.as_str()))
        .collect();
    let existing = in_namespace.iter().map(|r| r.name_any()).collect();
    let owned = in_namespace
        .iter()
        .filter(|r| r.labels().get(MONITOR_LABEL) == Some(&name))
        .map(|r| r.name_any())
        .collect();
    if m.spec.prune.unwrap_or(false) {
        // Which bookings hold a Resource is known only once the Booking cache is filled.
        ctx.caches_ready().await;
    }
    let pruning = Pruning {
        after_listings: ctx.groups.prune_after_listings,
        held: held(&ctx, &ns, &owned, now),
    };
    let decision = decide(
        &m,
        provider,
        &scan,
        &existing,
        &owned,
        &ctx.groups.default_region,
        &pruning,
        now,
    );
    let resources: Api<Resource> = Api::namespaced(ctx.client.clone(), &ns);
    for (rname, tag, region) in &decision.create {
        // Only groups this namespace may claim (one owner per group, the operator's rules).
        if let Some(refusal) = claim::monitor_refusal(&ctx, &ns, rname, provider, tag, region) {
            tracing::debug!(resource = %rname, reason = refusal.reason, message = %refusal.message, "not created");
            continue;
        }
        let obj = new_resource(&m, &ns, provider, rname, tag, region);
        match resources.create(&post_params(), &obj).await {
            Ok(_) => {
                let note = format!(
                    "created Resource {rname} for the {provider} group {tag:?} in {region}"
                );
                ctx.events
                    .publish(m.as_ref(), false, "Created", "Create", note)
                    .await;
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    for rname in &decision.delete {
        match resources.delete(rname, &DeleteParams::default()).await {
            Ok(_) => {
                let note = format!("deleted Resource {rname}: its group is gone from AWS");
                ctx.events
                    .publish(m.as_ref(), false, "Pruned", "Delete", note)
                    .await
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    write_status(&ctx, m.as_ref(), &decision.status, None).await?;
    Ok(Action::await_change())
}

/// The Resources among `names` (of namespace `ns`) a booking that has not ended holds, by the
/// booking index.
fn held(ctx: &Context, ns: &str, names: &BTreeSet<String>, now: DateTime<Utc>) -> BTreeSet<String> {
    names
        .iter()
        .filter(|name| {
            ctx.caches
                .index
                .views_of(&ObjectRef::new(name.as_str()).within(ns))
                .iter()
                .any(|b| !b.deleting && b.slot.as_ref().map_or(true, |s| s.end > now))
        })
        .cloned()
        .collect()
}

/// The Resource monitor `m` creates for a group.
fn new_resource(
    m: &ResourceMonitor,
    ns: &str,
    provider: ProviderType,
    name: &str,
    tag: &str,
    region: &str,
) -> Resource {
    let labels = [
        (CREATED_BY_LABEL.to_owned(), CREATED_BY.to_owned()),
        (MONITOR_LABEL.to_owned(), m.name_any()),
    ]
    .into();
    Resource {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(ns.to_owned()),
            labels: Some(labels),
            ..Default::default()
        },
        spec: ResourceSpec {
            type_: provider.as_str().to_owned(),
            tag: tag.to_owned(),
            region: (!m.spec.regions.is_empty()).then(|| region.to_owned()),
            ..Default::default()
        },
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use booking_shared::api::ResourceMonitorSpec;

    #[test]
    fn names_follow_the_original_and_reject_invalid_tags() {
        assert_eq!(
            resource_name(
                ProviderType::Ec2,
                "analytics",
                "eu-central-1",
                "eu-central-1"
            )
            .as_deref(),
            Some("ec2.analytics")
        );
        assert_eq!(
            resource_name(ProviderType::Rds, "db", "us-west-2", "eu-central-1").as_deref(),
            Some("rds.db.us-west-2")
        );
        assert_eq!(
            resource_name(
                ProviderType::Ec2,
                "Big Data",
                "eu-central-1",
                "eu-central-1"
            ),
            None
        );
        assert_eq!(
            resource_name(ProviderType::Ec2, "-x", "eu-central-1", "eu-central-1"),
            None
        );
    }

    fn monitor(prune: bool) -> ResourceMonitor {
        ResourceMonitor::new(
            "scan",
            ResourceMonitorSpec {
                type_: "ec2".into(),
                regions: vec![],
                prune: Some(prune),
            },
        )
    }

    /// Prunes at the first listing that misses a group (the old behaviour), nothing held.
    fn once() -> Pruning {
        Pruning {
            after_listings: 1,
            held: BTreeSet::new(),
        }
    }

    fn names(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn creates_the_missing_and_prunes_only_on_complete_listings() {
        let now = booking_shared::time::parse_rfc3339("t", "2031-01-10T10:00:00Z").unwrap();
        let scan = Scan {
            groups: vec![(
                "eu-west-1".into(),
                vec!["a".into(), "b".into(), "Bad Tag".into()],
            )],
            complete: true,
            problems: vec![],
            oldest: Some(now),
        };
        let existing = names(&["ec2.a", "ec2.gone", "other"]);
        let owned = names(&["ec2.a", "ec2.gone"]);
        let d = decide(
            &monitor(true),
            ProviderType::Ec2,
            &scan,
            &existing,
            &owned,
            "eu-west-1",
            &once(),
            now,
        );
        assert_eq!(d.create, [("ec2.b".into(), "b".into(), "eu-west-1".into())]);
        assert_eq!(d.delete, ["ec2.gone"]);
        assert_eq!(d.status.groups, ["Bad Tag", "a", "b"]);
        let ready = &d.status.conditions[0];
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "ScanProblems")
        );
        assert!(ready.message.contains("\"Bad Tag\""), "{}", ready.message);

        let partial = Scan {
            complete: false,
            ..scan.clone()
        };
        let d = decide(
            &monitor(true),
            ProviderType::Ec2,
            &partial,
            &existing,
            &owned,
            "eu-west-1",
            &once(),
            now,
        );
        assert!(d.delete.is_empty());
        assert!(d.status.conditions[0].message.contains("pruning skipped"));
        let d = decide(
            &monitor(false),
            ProviderType::Ec2,
            &scan,
            &existing,
            &owned,
            "eu-west-1",
            &once(),
            now,
        );
        assert!(d.delete.is_empty());
    }

    #[test]
    fn a_group_is_pruned_after_n_consecutive_complete_listings_and_never_while_held() {
        let t = |s: &str| booking_shared::time::parse_rfc3339("t", s).unwrap();
        let mut owned = names(&["ec2.a", "ec2.gone", "ec2.held"]);
        let scan_at = |at: &str, complete: bool, tags: &[&str]| Scan {
            groups: vec![(
                "eu-west-1".into(),
                tags.iter().map(|s| s.to_string()).collect(),
            )],
            complete,
            problems: vec![],
            oldest: Some(t(at)),
        };
        let three = Pruning {
            after_listings: 3,
            held: names(&["ec2.held"]),
        };
        let mut m = monitor(true);
        // (listing time, complete, groups seen, pruned, missing counts after it)
        type Row<'a> = (
            &'a str,
            bool,
            &'a [&'a str],
            &'a [&'a str],
            &'a [(&'a str, u32)],
        );
        let table: &[Row] = &[
            (
                "2031-01-10T10:00:00Z",
                true,
                &["a"],
                &[],
                &[("ec2.gone", 1), ("ec2.held", 1)],
            ),
            // The same listing again (another reconcile): not counted twice.
            (
                "2031-01-10T10:00:00Z",
                true,
                &["a"],
                &[],
                &[("ec2.gone", 1), ("ec2.held", 1)],
            ),
            // An incomplete listing proves nothing: counts kept, nothing pruned.
            (
                "2031-01-10T10:00:30Z",
                false,
                &[],
                &[],
                &[("ec2.gone", 1), ("ec2.held", 1)],
            ),
            (
                "2031-01-10T10:01:00Z",
                true,
                &["a"],
                &[],
                &[("ec2.gone", 2), ("ec2.held", 2)],
            ),
            // The third complete listing: pruned, but not the Resource a booking holds.
            (
                "2031-01-10T10:02:00Z",
                true,
                &["a"],
                &["ec2.gone"],
                &[("ec2.held", 3)],
            ),
            // A group seen again starts over.
            ("2031-01-10T10:03:00Z", true, &["a", "held"], &[], &[]),
        ];
        for (i, (at, complete, seen, pruned, counts)) in table.iter().enumerate() {
            let d = decide(
                &m,
                ProviderType::Ec2,
                &scan_at(at, *complete, seen),
                &owned,
                &owned,
                "eu-west-1",
                &three,
                t(at),
            );
            assert_eq!(d.delete, *pruned, "row {i}");
            for gone in &d.delete {
                owned.remove(gone);
            }
            let want: std::collections::BTreeMap<String, u32> =
                counts.iter().map(|(k, v)| (k.to_string(), *v)).collect();
            assert_eq!(d.status.missing_listings, want, "row {i}");
            m.status = Some(d.status);
        }
        // Without a booking the held one goes at its next complete miss.
        let free = Pruning {
            held: BTreeSet::new(),
            ..three
        };
        let mut m = monitor(true);
        m.status.get_or_insert_default().missing_listings = [("ec2.held".to_string(), 2)].into();
        let d = decide(
            &m,
            ProviderType::Ec2,
            &scan_at("2031-01-10T11:00:00Z", true, &["a"]),
            &owned,
            &owned,
            "eu-west-1",
            &free,
            t("2031-01-10T11:00:00Z"),
        );
        assert_eq!(d.delete, ["ec2.held"]);
    }
}
