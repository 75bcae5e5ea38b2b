//! The plan's decisions about the members of a group: the locks seen on them, which to start
//! or stop, and the lock tags to write or remove.

use booking_shared::arbitration::Holder;
use booking_shared::time::{format_rfc3339, parse_rfc3339};
use chrono::{DateTime, Utc};

use super::{Note, Op, Plan, PlanInput};
use crate::model::{Member, ProviderType};
use crate::tags::{Key, TagKeys};

/// A lock read from a member's tags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Lock {
    pub(super) by: String,
    pub(super) until: Option<DateTime<Utc>>,
    pub(super) until_raw: String,
    pub(super) owner: Option<String>,
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

/// The locks seen on the live members. A lock is ours only when its owner tag names this
/// Resource: never because its `locked-by` names the holder's user, which is free text that any
/// tenant can write into a booking. An unexpired lock that is not ours is foreign.
pub(super) struct Locks<'a> {
    pub(super) all: Vec<(&'a Member, Lock)>,
    pub(super) owner: &'a str,
    pub(super) now: DateTime<Utc>,
}

impl<'a> Locks<'a> {
    pub(super) fn of(input: &PlanInput<'a>, live: &[&'a Member]) -> Self {
        Self {
            all: live
                .iter()
                .filter_map(|m| lock_of(m, input.keys).map(|l| (*m, l)))
                .collect(),
            owner: input.owner,
            now: input.now,
        }
    }

    pub(super) fn is_foreign(&self, l: &Lock) -> bool {
        let unexpired = l.until.is_some_and(|u| u > self.now);
        let ours = l.owner.as_deref() == Some(self.owner);
        unexpired && !ours
    }

    /// The first foreign lock, if any.
    pub(super) fn foreign(&self) -> Option<&(&'a Member, Lock)> {
        self.all.iter().find(|(_, l)| self.is_foreign(l))
    }

    /// Whether `id` carries a lock of ours.
    pub(super) fn ours_on(&self, id: &str) -> bool {
        self.all
            .iter()
            .any(|(m, l)| m.id == id && !self.is_foreign(l))
    }
}

/// What acting on the managed members found.
pub(super) struct MembersOutcome {
    pub(super) converged: bool,
    pub(super) degraded: Vec<String>,
    pub(super) failing: Vec<String>,
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
pub(super) fn act_on_members(
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
                "{} {} was stopped outside the operator while booked",
                kind, m.id
            ),
            then: ("starting it again", "would start it again"),
        }),
        Op::Stop if !ours => Some(Note {
            warning: true,
            reason: "StartedOutside",
            message: format!(
                "{} {} is {} without a booking (started outside the operator or by AWS)",
                kind, m.id, m.state
            ),
            then: ("stopping it", "would stop it"),
        }),
        _ => None,
    }
}

/// Lock tags: on every managed member while held, removed when no longer held.
pub(super) fn lock_tags(
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

fn push_op(out: &mut Plan, op: Op, id: &str) {
    match op {
        Op::Start => out.start.push(id.to_owned()),
        Op::Stop => out.stop.push(id.to_owned()),
    }
}
