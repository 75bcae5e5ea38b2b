//! The Resource plan: from (spec, the holder decided by arbitration, the observed members of the
//! group, earlier attempts, `now`) to the actions that bring the group to its desired state, the
//! status to report and the instant to look again. Pure: no I/O, the clock is a parameter.
//!
//! Rules (see issue 4 and the original's known defects):
//! - Desired: running iff a booking holds the Resource, or `spec.booked_by`/`spec.booked_until`
//!   hold an unexpired manual booking; otherwise stopped.
//! - Only members in a state that allows it are acted on: start only `stopped`; stop only EC2
//!   `running` / RDS `available`. Members of an Auto Scaling group are never acted on.
//! - An unexpired lock held by another user (or written by another Resource or tool) is respected:
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
use crate::tags::{Key, TagKeys};

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
    /// Human-readable message naming the member.
    pub message: String,
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
    /// Members counted (not gone).
    pub instances: u32,
    /// Members up.
    pub running: u32,
    /// STOPPED / RUNNING / PENDING from the counts.
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

/// A lock read from a member's tags.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Lock {
    by: String,
    until: Option<DateTime<Utc>>,
    until_raw: String,
    owner: Option<String>,
}

fn lock_of(m: &Member, keys: &TagKeys) -> Option<Lock> {
    let by = keys.get(&m.tags, Key::LockedBy)?.trim();
    if by.is_empty() {
        return None;
    }
    let until_raw = keys.get(&m.tags, Key::LockedUntil).unwrap_or("").trim();
    Some(Lock {
        by: by.to_owned(),
        until: parse_rfc3339("locked-until", until_raw).ok(),
        until_raw: until_raw.to_owned(),
        owner: keys.get(&m.tags, Key::LockOwner).map(str::to_owned),
    })
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
    let locks = Locks::of(input, &live, holder.as_ref());
    if let Some((_, l)) = locks.foreign().or(locks.all.first()) {
        out.summary.locked_by = Some(l.by.clone());
        out.summary.locked_until = (!l.until_raw.is_empty()).then(|| l.until_raw.clone());
    }
    let managed: Vec<&Member> = live.iter().copied().filter(|m| m.asg().is_none()).collect();
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
    out.requeue_at = requeue.into_iter().filter(|t| *t > now).min();
    out
}

fn inventory_pending() -> Vec<CondSpec> {
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

fn count(summary: &mut Summary, kind: ProviderType, live: &[&Member]) {
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

/// The locks seen on the live members. A lock is ours when this Resource wrote it, or when it
/// is the holder's own user; an unexpired lock that is not ours is foreign.
struct Locks<'a> {
    all: Vec<(&'a Member, Lock)>,
    owner: &'a str,
    holder_user: Option<&'a str>,
    now: DateTime<Utc>,
}

impl<'a> Locks<'a> {
    fn of(input: &PlanInput<'a>, live: &[&'a Member], holder: Option<&'a Holder>) -> Self {
        Self {
            all: live
                .iter()
                .filter_map(|m| lock_of(m, input.keys).map(|l| (*m, l)))
                .collect(),
            owner: input.owner,
            holder_user: holder.map(|h| h.user.as_str()),
            now: input.now,
        }
    }

    fn is_foreign(&self, l: &Lock) -> bool {
        let unexpired = l.until.is_some_and(|u| u > self.now);
        let ours =
            l.owner.as_deref() == Some(self.owner) || self.holder_user == Some(l.by.as_str());
        unexpired && !ours
    }

    /// The first foreign lock, if any.
    fn foreign(&self) -> Option<&(&'a Member, Lock)> {
        self.all.iter().find(|(_, l)| self.is_foreign(l))
    }

    /// Whether `id` carries a lock of ours.
    fn ours_on(&self, id: &str) -> bool {
        self.all
            .iter()
            .any(|(m, l)| m.id == id && !self.is_foreign(l))
    }
}

/// What acting on the managed members found.
struct MembersOutcome {
    converged: bool,
    degraded: Vec<String>,
    failing: Vec<String>,
}

impl Default for MembersOutcome {
    fn default() -> Self {
        Self {
            converged: true,
            degraded: Vec::new(),
            failing: Vec::new(),
        }
    }
}

/// Starts or stops each managed member not at the target, unless in transit or backing off
/// after an earlier attempt; reports a start that fell back and a call that failed.
fn act_on_members(
    input: &PlanInput<'_>,
    managed: &[&Member],
    locks: &Locks<'_>,
    held: bool,
    out: &mut Plan,
    requeue: &mut Vec<DateTime<Utc>>,
) -> MembersOutcome {
    let kind = input.kind;
    let target = if out.desired_running {
        Op::Start
    } else {
        Op::Stop
    };
    let mut found = MembersOutcome::default();
    for m in managed {
        let (at_target, actionable) = match target {
            Op::Start => (m.state == kind.running_state(), kind.can_start(&m.state)),
            Op::Stop => (m.state == "stopped", kind.can_stop(&m.state)),
        };
        if at_target {
            if input.attempts.contains_key(&m.id) {
                out.settled.push(m.id.clone());
            }
            continue;
        }
        found.converged = false;
        if !actionable {
            // Transitional (pending, stopping, starting, backing-up, …): the next observation
            // tells; the inventory refresh triggers a reconcile.
            out.transitional = true;
            continue;
        }
        let Some(a) = input.attempts.get(&m.id).filter(|a| a.op == target) else {
            if let Some(note) = outside_change(kind, m, target, locks.ours_on(&m.id), held) {
                out.notes.push(note);
            }
            push_op(out, target, &m.id);
            continue;
        };
        let retry_at = a.at + input.backoff.delay_chrono(a.count);
        if let Some(err) = &a.error {
            found.failing.push(format!("{} ({err})", m.id));
        } else if input.observed_at > a.at {
            if target == Op::Start {
                let reason = m
                    .state_reason
                    .as_deref()
                    .unwrap_or("no reason given by AWS");
                found.degraded.push(format!(
                    "{} fell back to {} after a start ({reason})",
                    m.id, m.state
                ));
            }
        } else {
            // Not observed since the last call: wait for the inventory.
            requeue.push(retry_at);
            continue;
        }
        if input.now >= retry_at {
            push_op(out, target, &m.id);
        } else {
            requeue.push(retry_at);
        }
    }
    found
}

/// The Event of a member found off its target without an attempt of ours: stopped outside the
/// operator while booked (our lock on it), or running without a booking.
fn outside_change(
    kind: ProviderType,
    m: &Member,
    target: Op,
    ours: bool,
    held: bool,
) -> Option<Note> {
    match target {
        Op::Start if ours && held => Some(Note {
            warning: true,
            reason: "StoppedOutside",
            message: format!(
                "{} {} was stopped outside the operator while booked; starting it again",
                kind, m.id
            ),
        }),
        Op::Stop if !ours => Some(Note {
            warning: true,
            reason: "StartedOutside",
            message: format!(
                "{} {} is {} without a booking (started outside the operator or by AWS); stopping it",
                kind, m.id, m.state
            ),
        }),
        _ => None,
    }
}

/// Lock tags: on every managed member while held, removed when no longer held.
fn lock_tags(
    input: &PlanInput<'_>,
    managed: &[&Member],
    locks: &Locks<'_>,
    holder: Option<&Holder>,
    out: &mut Plan,
) {
    match holder {
        Some(h) => {
            let want = [
                (input.keys.key(Key::LockedBy), h.user.clone()),
                (input.keys.key(Key::LockedUntil), format_rfc3339(h.until)),
                (input.keys.key(Key::LockOwner), input.owner.to_owned()),
            ];
            for m in managed {
                if want.iter().any(|(k, v)| m.tags.get(k) != Some(v)) {
                    out.lock.ids.push(m.id.clone());
                }
            }
            if !out.lock.ids.is_empty() {
                out.lock.tags = want.to_vec();
            }
        }
        None => {
            for (m, _) in locks.all.iter().filter(|(m, _)| m.asg().is_none()) {
                let keys = input.keys.lock_keys_present(&m.tags);
                if !keys.is_empty() {
                    out.unlock.push((m.id.clone(), keys));
                }
            }
        }
    }
}

fn ready_condition(
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

fn synced_condition(spec_problem: Option<&str>, failing: &[String], live: &[&Member]) -> CondSpec {
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

fn degraded_condition(kind: ProviderType, degraded: &[String], notes: &mut Vec<Note>) -> CondSpec {
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

fn push_op(out: &mut Plan, op: Op, id: &str) {
    match op {
        Op::Start => out.start.push(id.to_owned()),
        Op::Stop => out.stop.push(id.to_owned()),
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
