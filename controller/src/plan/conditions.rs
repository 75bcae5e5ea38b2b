//! The plan's counts and conditions: `Ready`, `Synced`, `Degraded`, and those of a group not
//! observed yet.

use booking_shared::api::ResourceState;

use super::{Note, PlanInput, Summary};
use crate::conditions::CondSpec;
use crate::model::{Member, ProviderType};

pub(super) fn inventory_pending() -> Vec<CondSpec> {
    vec![
        CondSpec::new(
            "Ready",
            false,
            "InventoryPending",
            "the group has not been observed in AWS yet",
        ),
        CondSpec::new(
            "Synced",
            false,
            "InventoryPending",
            "waiting for the first inventory of this type and region",
        ),
    ]
}

/// The counts: instances (Aurora clusters' DB instances included, each with its own state),
/// clusters, and the state of what is started and stopped (clusters, and instances outside a
/// cluster of the group).
pub(super) fn count(summary: &mut Summary, kind: ProviderType, live: &[&Member]) {
    let up = |m: &&&Member| m.state == kind.running_state();
    let (clusters, instances): (Vec<&Member>, Vec<&Member>) =
        live.iter().copied().partition(|m| m.is_cluster);
    summary.instances = instances.len() as u32;
    summary.running = instances.iter().filter(up).count() as u32;
    summary.clusters = clusters.len() as u32;
    summary.clusters_running = clusters.iter().filter(up).count() as u32;
    let with_cluster = |m: &&&Member| {
        m.in_cluster()
            && clusters
                .iter()
                .any(|c| m.db_cluster.as_deref() == Some(&c.id))
    };
    let units: Vec<&&Member> = live.iter().filter(|m| !with_cluster(m)).collect();
    summary.state = Some(ResourceState::from_counts(
        units.len() as u32,
        units.iter().filter(|m| up(m)).count() as u32,
    ));
}

/// The condition type naming tagged DB instances whose Aurora cluster is not in the group.
pub const UNTAGGED_CLUSTER: &str = "UntaggedCluster";

/// `UntaggedCluster` when a tagged DB instance of the group belongs to a DB cluster that does
/// not carry the group's tags: neither is started or stopped (a cluster member cannot be
/// started or stopped alone, and the cluster is not the group's). Absent otherwise.
pub(super) fn untagged_cluster_condition(
    input: &PlanInput<'_>,
    live: &[&Member],
) -> Option<CondSpec> {
    let orphans: Vec<String> = live
        .iter()
        .filter(|m| m.in_cluster())
        .filter_map(|m| {
            let cluster = m.db_cluster.as_deref()?;
            let in_group = live.iter().any(|c| c.is_cluster && c.id == cluster);
            (!in_group).then(|| format!("DB instance {} belongs to DB cluster {cluster}", m.id))
        })
        .collect();
    if orphans.is_empty() {
        return None;
    }
    let keys = input.keys;
    Some(CondSpec::new(
        UNTAGGED_CLUSTER,
        true,
        "ClusterNotTagged",
        &format!(
            "{}, which does not carry this group's tags: a DB instance of an Aurora cluster is never started or stopped on its own, and the cluster is left alone; tag the cluster {}=true and {}={} to book it with this group",
            orphans.join("; "),
            keys.key(crate::tags::Key::Managed),
            keys.key(crate::tags::Key::Application),
            input.spec.tag
        ),
    ))
}

pub(super) fn ready_condition(
    input: &PlanInput<'_>,
    desired_running: bool,
    live: &[&Member],
    managed: &[&Member],
    converged: bool,
    foreign: bool,
) -> CondSpec {
    let kind = input.kind;
    let (reason, message) = if foreign {
        ("LockedByOther", "a foreign lock holds the group".to_owned())
    } else if live.is_empty() {
        (
            "NoInstances",
            format!(
                "no managed {kind} instance carries the tag {:?}",
                input.spec.tag
            ),
        )
    } else if converged && desired_running {
        (
            "Running",
            format!(
                "all {} managed members are {}",
                managed.len(),
                kind.running_state()
            ),
        )
    } else if converged {
        ("Stopped", "no managed member is running".to_owned())
    } else if desired_running {
        ("Starting", "members are being started".to_owned())
    } else {
        ("Stopping", "members are being stopped".to_owned())
    };
    let ready = converged && !foreign && !live.is_empty();
    CondSpec::new("Ready", ready, reason, &message)
}

pub(super) fn synced_condition(
    spec_problem: Option<&str>,
    failing: &[String],
    live: &[&Member],
) -> CondSpec {
    if let Some(p) = spec_problem {
        return CondSpec::new("Synced", false, "InvalidSpec", p);
    }
    if !failing.is_empty() {
        return CondSpec::new(
            "Synced",
            false,
            "AwsError",
            &format!("failed: {}; retrying with backoff", failing.join("; ")),
        );
    }
    let mut msg = format!("observed {} member(s)", live.len());
    let asg: Vec<String> = live
        .iter()
        .filter_map(|m| m.asg().map(|g| format!("{} ({g})", m.id)))
        .collect();
    if !asg.is_empty() {
        msg.push_str(&format!(
            "; left alone (Auto Scaling group members): {}",
            asg.join(", ")
        ));
    }
    CondSpec::new("Synced", true, "Observed", &msg)
}

pub(super) fn degraded_condition(
    kind: ProviderType,
    degraded: &[String],
    notes: &mut Vec<Note>,
) -> CondSpec {
    if degraded.is_empty() {
        return CondSpec::new(
            "Degraded",
            false,
            "AsExpected",
            "every started member stayed up",
        );
    }
    for d in degraded {
        notes.push(Note {
            warning: true,
            reason: "StartFailed",
            message: format!("{kind} {d}; check kms:CreateGrant on encrypted volumes and the instance's state reason"),
            then: ("retrying with backoff", "would retry with backoff"),
        });
    }
    CondSpec::new("Degraded", true, "StartFellBack", &degraded.join("; "))
}
