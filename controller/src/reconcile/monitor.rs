//! The ResourceMonitor reconciler: creates a Resource `<type>.<tag>` (`<type>.<tag>.<region>`
//! outside the default region) for each tag group the inventory shows and no Resource
//! represents yet; optionally prunes the Resources it created whose group disappeared — only on
//! the strength of complete listings.

use std::collections::BTreeSet;
use std::sync::Arc;

use booking_shared::api::{Resource, ResourceMonitor, ResourceMonitorStatus, ResourceSpec};
use booking_shared::time::format_rfc3339;
use chrono::Utc;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ObjectMeta};
use kube::runtime::controller::Action;

use super::{Context, ns_name, patch_status};
use crate::conditions::{CondSpec, merge};
use crate::error::Result;
use crate::model::{InventoryKey, Kind};

/// Label naming the monitor that created a Resource.
pub const MONITOR_LABEL: &str = "manager.kotaico.de/monitor";
/// Standard label marking objects created by the controller.
pub const CREATED_BY_LABEL: &str = "app.kubernetes.io/created-by";
/// Its value.
pub const CREATED_BY: &str = "booking-controller";

/// The Resource name of a group: `<type>.<tag>`, with `.<region>` outside the default region;
/// `None` when the tag cannot form a Kubernetes object name (RFC 1123 subdomain).
pub fn resource_name(kind: Kind, tag: &str, region: &str, default_region: &str) -> Option<String> {
    let name = if region == default_region {
        format!("{}.{}", kind, tag)
    } else {
        format!("{}.{}.{}", kind, tag, region)
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

/// Reconciles one ResourceMonitor.
#[tracing::instrument(skip_all, fields(namespace, name))]
pub async fn reconcile(m: Arc<ResourceMonitor>, ctx: Arc<Context>) -> Result<Action> {
    ctx.metrics.reconciled("ResourceMonitor");
    let (ns, name) = ns_name(m.as_ref())?;
    tracing::Span::current()
        .record("namespace", ns.as_str())
        .record("name", name.as_str());
    let api: Api<ResourceMonitor> = Api::namespaced(ctx.client.clone(), &ns);
    let old = m.status.clone().unwrap_or_default();
    let now = Utc::now();
    let Some(kind) = Kind::parse(&m.spec.type_) else {
        let status = ResourceMonitorStatus {
            conditions: merge(
                &old.conditions,
                &[CondSpec::new(
                    "Ready",
                    false,
                    "InvalidSpec",
                    &format!(
                        "spec.type {:?} is not supported; use ec2 or rds",
                        m.spec.type_
                    ),
                )],
                m.metadata.generation,
                now,
            ),
            observed_generation: m.metadata.generation,
            ..old.clone()
        };
        if m.status.as_ref() != Some(&status) {
            patch_status(&api, &name, &status, &[]).await?;
        }
        return Ok(Action::await_change());
    };
    let explicit_regions = !m.spec.regions.is_empty();
    let regions: Vec<String> = if explicit_regions {
        m.spec.regions.clone()
    } else {
        vec![ctx.default_region.clone()]
    };

    let resources: Api<Resource> = Api::namespaced(ctx.client.clone(), &ns);
    let existing: BTreeSet<String> = ctx
        .resources
        .state()
        .iter()
        .filter(|r| r.namespace().as_deref() == Some(ns.as_str()))
        .map(|r| r.name_any())
        .collect();

    let mut all_complete = true;
    let mut problems: Vec<String> = Vec::new();
    let mut seen_names: BTreeSet<String> = BTreeSet::new();
    let mut groups: Vec<String> = Vec::new();
    let mut oldest_scan = None;
    for region in &regions {
        let key = InventoryKey {
            kind,
            region: region.clone(),
        };
        if let Err(e) = ctx.inventory.ensure(&key).await {
            problems.push(format!("{region}: {e}"));
        }
        let Some(snap) = ctx.inventory.snapshot(&key) else {
            all_complete = false;
            continue;
        };
        if !snap.complete {
            all_complete = false;
            problems.push(format!(
                "{region}: last listing incomplete: {}",
                snap.error.clone().unwrap_or_default()
            ));
        }
        oldest_scan = Some(
            oldest_scan.map_or(snap.observed_at, |t: chrono::DateTime<Utc>| {
                t.min(snap.observed_at)
            }),
        );
        for tag in snap.groups(&ctx.keys) {
            groups.push(if explicit_regions {
                format!("{region}/{tag}")
            } else {
                tag.clone()
            });
            let Some(rname) = resource_name(kind, &tag, region, &ctx.default_region) else {
                problems.push(format!(
                    "tag {tag:?} cannot be a Resource name (lowercase letters, digits, '-' and '.')"
                ));
                continue;
            };
            seen_names.insert(rname.clone());
            if existing.contains(&rname) {
                continue;
            }
            let labels = [
                (CREATED_BY_LABEL.to_owned(), CREATED_BY.to_owned()),
                (MONITOR_LABEL.to_owned(), name.clone()),
            ]
            .into();
            let obj = Resource {
                metadata: ObjectMeta {
                    name: Some(rname.clone()),
                    namespace: Some(ns.clone()),
                    labels: Some(labels),
                    ..Default::default()
                },
                spec: ResourceSpec {
                    type_: kind.as_str().to_owned(),
                    tag: tag.clone(),
                    region: explicit_regions.then(|| region.clone()),
                    ..Default::default()
                },
                status: None,
            };
            match resources.create(&super::post_params(), &obj).await {
                Ok(_) => {
                    ctx.event(
                        m.as_ref(),
                        false,
                        "Created",
                        "Create",
                        format!(
                            "created Resource {rname} for the {kind} group {tag:?} in {region}"
                        ),
                    )
                    .await;
                }
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    if m.spec.prune.unwrap_or(false) {
        if all_complete {
            for r in ctx.resources.state().iter().filter(|r| {
                r.namespace().as_deref() == Some(ns.as_str())
                    && r.labels().get(MONITOR_LABEL) == Some(&name)
                    && !seen_names.contains(&r.name_any())
            }) {
                let rname = r.name_any();
                match resources.delete(&rname, &DeleteParams::default()).await {
                    Ok(_) => {
                        ctx.event(
                            m.as_ref(),
                            false,
                            "Pruned",
                            "Delete",
                            format!("deleted Resource {rname}: its group is gone from AWS"),
                        )
                        .await
                    }
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
            }
        } else {
            problems.push("pruning skipped: not every listing completed".to_owned());
        }
    }

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
    let status = ResourceMonitorStatus {
        groups,
        last_scan_time: oldest_scan.map(format_rfc3339),
        conditions: merge(&old.conditions, &[ready], m.metadata.generation, now),
        observed_generation: m.metadata.generation,
    };
    if m.status.as_ref() != Some(&status) {
        patch_status(&api, &name, &status, &["lastScanTime"]).await?;
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_original_and_reject_invalid_tags() {
        assert_eq!(
            resource_name(Kind::Ec2, "analytics", "eu-central-1", "eu-central-1").as_deref(),
            Some("ec2.analytics")
        );
        assert_eq!(
            resource_name(Kind::Rds, "db", "us-west-2", "eu-central-1").as_deref(),
            Some("rds.db.us-west-2")
        );
        assert_eq!(
            resource_name(Kind::Ec2, "Big Data", "eu-central-1", "eu-central-1"),
            None
        );
        assert_eq!(
            resource_name(Kind::Ec2, "-x", "eu-central-1", "eu-central-1"),
            None
        );
    }
}
