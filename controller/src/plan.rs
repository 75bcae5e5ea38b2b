//! The Resource plan: from (spec, the holder decided by arbitration, the observed members of the
//! group, earlier attempts, `now`) to the actions that bring the group to its desired state, the
//! status to report and the instant to look again. Pure: no I/O, the clock is a parameter.
//!
//! Rules (see issue 4 and the original's known defects):
//! - Desired: running iff a booking holds the Resource, or `spec.booked_by`/`spec.booked_until`
//!   hold an unexpired manual booking; otherwise stopped.
//! - Only members in a state that allows it are acted on: start only `stopped`; stop only EC2
//!   `running` / RDS `available`. Members of an Auto Scaling group are never acted on.
//! - An Aurora DB cluster of the group is started and stopped as one member; its DB instances
//!   are counted but never acted on alone. A tagged DB instance whose cluster is not in the
//!   group is left alone too, and `UntaggedCluster` names it, its cluster and the fix.
//! - An unexpired lock not written by this Resource (its `lock-owner` tag; the user it names does
//!   not count, `user_id` being free text) is respected:
//!   the group is left alone and `LockedByOther` names the holder.
//! - A start AWS accepted but that fell back to `stopped` (seen on a later observation) makes the
//!   Resource `Degraded`; it is retried with bounded exponential backoff, as are failed calls.

use std::collections::BTreeMap;

use booking_shared::api::{ResourceSpec, ResourceState};
use booking_shared::time::{format_rfc3339, parse_rfc3339};
use chrono::{DateTime, Utc};

use booking_shared::arbitration::Holder;

use crate::backoff::Backoff;
use crate::conditions::CondSpec;
use crate::model::{Member, ProviderType};
use crate::tags::TagKeys;

mod conditions;
mod members;

use conditions::{
    count, degraded_condition, inventory_pending, ready_condition, synced_condition,
    untagged_cluster_condition,
};
use members::{Locks, MembersOutcome, act_on_members, lock_tags};

/// A start or a stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// StartInstances / StartDBInstance.
    Start,
    /// StopInstances / StopDBInstance.
    Stop,
}

/// The controller's memory of its last action on one member (kept by the executor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// What was done.
    pub op: Op,
    /// Consecutive attempts of `op` that have not reached the target state.
    pub count: u32,
    /// When the last attempt was made.
    pub at: DateTime<Utc>,
    /// The AWS error of the last attempt (`Code: message`), when the call failed.
    pub error: Option<String>,
}

/// Everything the plan looks at.
#[derive(Debug, Clone)]
pub struct PlanInput<'a> {
    /// `<namespace>/<name>` of the Resource: the value of the `lock-owner` tag it writes.
    pub owner: &'a str,
    /// Provider type.
    pub kind: ProviderType,
    /// The Resource's spec (read only; the controller never writes it).
    pub spec: &'a ResourceSpec,
    /// The booking holding the Resource at `now`, from arbitration.
    pub booking_holder: Option<Holder>,
    /// The group's members, or `None` while no inventory of its type and region exists yet.
    pub members: Option<&'a [Member]>,
    /// When the observation of `members` began.
    pub observed_at: DateTime<Utc>,
    /// Earlier attempts by member ID.
    pub attempts: &'a BTreeMap<String, Attempt>,
    /// Tag keys.
    pub keys: &'a TagKeys,
    /// Retry policy.
    pub backoff: Backoff,
    /// The clock.
    pub now: DateTime<Utc>,
}

/// Something worth an Event that is not itself an AWS call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// Warning rather than Normal.
    pub warning: bool,
    /// PascalCase reason.
    pub reason: &'static str,
    /// Human-readable message naming the member and what was seen.
    pub message: String,
    /// What the controller does about it, as said when acting and in dry-run mode (where it
    /// only reports it): e.g. `("stopping it", "would stop it")`.
    pub then: (&'static str, &'static str),
}

impl Note {
    /// The Event's message: what was seen, then what the controller does (or, in dry-run mode,
    /// would do) about it.
    pub fn text(&self, dry_run: bool) -> String {
        let (acting, would) = self.then;
        if dry_run {
            format!("{}; dry-run mode: {would}", self.message)
        } else {
            format!("{}; {acting}", self.message)
        }
    }
}

/// Lock tags to write on members.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LockTags {
    /// Member IDs to tag.
    pub ids: Vec<String>,
    /// `(key, value)` pairs: locked-by, locked-until, lock-owner.
    pub tags: Vec<(String, String)>,
}

/// The status fields the plan computes (conditions separately).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Summary {
    /// Instances counted (not gone), DB instances of Aurora clusters included; clusters not.
    pub instances: u32,
    /// Instances up.
    pub running: u32,
    /// Aurora DB clusters counted (not gone).
    pub clusters: u32,
    /// Aurora DB clusters up (`available`).
    pub clusters_running: u32,
    /// STOPPED / RUNNING / PENDING from the counts of what is started and stopped: instances
    /// outside a cluster of the group, and clusters.
    pub state: Option<ResourceState>,
    /// Lock holder seen on the members.
    pub locked_by: Option<String>,
    /// Lock end seen on the members.
    pub locked_until: Option<String>,
    /// Booking holding the Resource.
    pub active_booking: Option<String>,
    /// The holder's user.
    pub holder_user: Option<String>,
    /// The holder's end, RFC 3339.
    pub holder_until: Option<String>,
}

/// What to do.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// Whether the group should be running.
    pub desired_running: bool,
    /// Members to start.
    pub start: Vec<String>,
    /// Members to stop.
    pub stop: Vec<String>,
    /// Stop with hibernation (EC2, `spec.hibernate`).
    pub hibernate: bool,
    /// Lock tags to write (empty `ids` when none).
    pub lock: LockTags,
    /// Lock tag keys to remove, per member.
    pub unlock: Vec<(String, Vec<String>)>,
    /// Some member is in a transitional state (`pending`, `stopping`, …) on its way to or from
    /// the target: worth observing again soon.
    pub transitional: bool,
    /// Members that reached their target: forget their attempts.
    pub settled: Vec<String>,
    /// Events that are not AWS calls.
    pub notes: Vec<Note>,
    /// Status fields.
    pub summary: Summary,
    /// Conditions `Ready`, `Synced`, `LockedByOther`, `Degraded`.
    pub conditions: Vec<CondSpec>,
    /// When to look again (lock expiry, retry after backoff, end of the hold); `None` when only
    /// a change of bookings or of the inventory matters.
    pub requeue_at: Option<DateTime<Utc>>,
}

/// The manual booking of `spec.booked_by`/`spec.booked_until` at `now`: `Ok(None)` when unused or
/// expired, an error message when `booked_until` does not parse.
pub fn manual_holder(spec: &ResourceSpec, now: DateTime<Utc>) -> Result<Option<Holder>, String> {
    let by = spec.booked_by.as_deref().unwrap_or("").trim();
    let until = spec.booked_until.as_deref().unwrap_or("").trim();
    if by.is_empty() && until.is_empty() {
        return Ok(None);
    }
    if by.is_empty() || until.is_empty() {
        return Err("spec.booked_by and spec.booked_until must be set together".to_owned());
    }
    let until = parse_rfc3339("spec.booked_until", until).map_err(|e| e.to_string())?;
    Ok((until > now).then(|| Holder {
        booking: None,
        user: by.to_owned(),
        until,
    }))
}

/// Computes the plan. See the module documentation for the rules.
pub fn plan(input: &PlanInput<'_>) -> Plan {
    let now = input.now;
    let mut out = Plan::default();
    let mut requeue: Vec<DateTime<Utc>> = Vec::new();
    // Desired state: a booking first, then the manual booking of the spec.
    let manual = manual_holder(input.spec, now);
    let holder = input
        .booking_holder
        .clone()
        .or_else(|| manual.clone().ok().flatten());
    out.desired_running = holder.is_some();
    if let Some(h) = &holder {
        requeue.push(h.until);
        out.summary.active_booking = h.booking.clone();
        out.summary.holder_user = Some(h.user.clone());
        out.summary.holder_until = Some(format_rfc3339(h.until));
    }
    let Some(members) = input.members else {
        out.conditions = inventory_pending();
        out.requeue_at = requeue.into_iter().min();
        return out;
    };
    let kind = input.kind;
    let live: Vec<&Member> = members.iter().filter(|m| !kind.is_gone(&m.state)).collect();
    count(&mut out.summary, kind, &live);
    let locks = Locks::of(input, &live);
    if let Some((_, l)) = locks.foreign().or(locks.all.first()) {
        out.summary.locked_by = Some(l.by.clone());
        out.summary.locked_until = (!l.until_raw.is_empty()).then(|| l.until_raw.clone());
    }
    // Auto Scaling group members and the DB instances of Aurora clusters are never acted on
    // alone (a cluster is started and stopped as a whole).
    let managed: Vec<&Member> = live
        .iter()
        .copied()
        .filter(|m| m.asg().is_none() && !m.in_cluster())
        .collect();
    let mut acted = MembersOutcome::default();
    if let Some((m, l)) = locks.foreign() {
        // Respect the other holder: no start, stop or tag change at all.
        requeue.extend(l.until);
        out.conditions.push(CondSpec::new(
            "LockedByOther",
            true,
            "LockedByOther",
            &format!(
                "{} is locked by {} until {} (seen on {}); the group is left alone until then",
                kind, l.by, l.until_raw, m.id
            ),
        ));
        acted.converged = false;
    } else {
        out.conditions.push(CondSpec::new(
            "LockedByOther",
            false,
            "NotLocked",
            "no foreign lock",
        ));
        acted = act_on_members(
            input,
            &managed,
            &locks,
            holder.is_some(),
            &mut out,
            &mut requeue,
        );
        lock_tags(input, &managed, &locks, holder.as_ref(), &mut out);
    }
    out.hibernate = kind == ProviderType::Ec2 && input.spec.hibernate.unwrap_or(false);
    let foreign = locks.foreign().is_some();
    let ready = ready_condition(
        input,
        out.desired_running,
        &live,
        &managed,
        acted.converged,
        foreign,
    );
    out.conditions.insert(0, ready);
    let spec_problem = manual.as_ref().err().cloned();
    out.conditions.insert(
        1,
        synced_condition(spec_problem.as_deref(), &acted.failing, &live),
    );
    out.conditions
        .push(degraded_condition(kind, &acted.degraded, &mut out.notes));
    out.conditions
        .extend(untagged_cluster_condition(input, &live));
    out.requeue_at = requeue.into_iter().filter(|t| *t > now).min();
    out
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "plan_cluster_tests.rs"]
mod cluster_tests;
