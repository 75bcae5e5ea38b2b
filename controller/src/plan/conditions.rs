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

pub(super) fn count(summary: &mut Summary, kind: ProviderType, live: &[&Member]) {
    summary.instances = live.len() as u32;
    summary.running = live
        .iter()
        .filter(|m| m.state == kind.running_state())
        .count() as u32;
    summary.state = Some(ResourceState::from_counts(
        summary.instances,
        summary.running,
    ));
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
            message: format!("{kind} {d}; check kms:CreateGrant on encrypted volumes and the instance's state reason; retrying with backoff"),
        });
    }
    CondSpec::new("Degraded", true, "StartFellBack", &degraded.join("; "))
}
