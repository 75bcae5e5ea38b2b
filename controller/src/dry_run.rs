//! Dry-run mode (`--dry-run`, `DRY_RUN`): the controller plans everything as usual but makes no
//! AWS write and sends no notification; it reports what it would do instead (Events
//! `WouldStart`, `WouldStop`, `WouldLock`, `WouldUnlock`, `WouldNotify`, the Resource condition
//! `DryRun`, the metric `dry_run_actions_total`).
//!
//! No hot loop: a group never changes in dry-run, so a plan made from AWS's state alone would
//! ask for the same start at every reconcile. The Resource reconciler therefore acts on a
//! *simulated* group: AWS's members with what the dry run would have done applied on top
//! ([`DryRun::simulated`]). Once a start would have been made, the simulated members are up and
//! carry the lock tags, so the plan waits for the next boundary; at the end of the booking it
//! would stop them, once. The status still reports AWS's real state, and the condition says what
//! a controller out of dry-run would do now.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use crate::conditions::CondSpec;
use crate::model::{Member, ProviderType};
use crate::plan::Plan;

/// The condition type of a Resource reconciled in dry-run mode.
pub const CONDITION: &str = "DryRun";

/// The would-be actions counted by the metric `dry_run_actions_total` (its closed label set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WouldAction {
    /// A member would be started.
    Start,
    /// A member would be stopped.
    Stop,
    /// Lock tags would be written on a member.
    Tag,
    /// Lock tags would be removed from a member.
    Untag,
    /// A notification would be sent.
    Notify,
}

impl WouldAction {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Stop => "stop",
            Self::Tag => "tag",
            Self::Untag => "untag",
            Self::Notify => "notify",
        }
    }
}

/// What the dry run would have changed on one member: its state and tags (`None`: removed).
#[derive(Debug, Clone, Default)]
struct Change {
    state: Option<String>,
    tags: BTreeMap<String, Option<String>>,
}

/// The dry run's memory: what it would have done to each member, and the notifications it
/// would have sent (by booking uid and notification key). Lost on restart: a restarted
/// controller reports its would-be actions once more.
#[derive(Debug, Default)]
pub struct DryRun {
    changes: Mutex<BTreeMap<String, Change>>,
    notified: Mutex<BTreeSet<String>>,
}

impl DryRun {
    /// `members` as they would be had the would-be actions been made.
    pub fn simulated(&self, members: &[Member]) -> Vec<Member> {
        let changes = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        members
            .iter()
            .map(|m| {
                let mut m = m.clone();
                if let Some(c) = changes.get(&m.id) {
                    if let Some(state) = &c.state {
                        m.state = state.clone();
                    }
                    for (k, v) in &c.tags {
                        match v {
                            Some(v) => m.tags.insert(k.clone(), v.clone()),
                            None => m.tags.remove(k),
                        };
                    }
                }
                m
            })
            .collect()
    }

    /// Remembers the actions of `p` as made.
    pub fn record(&self, kind: ProviderType, p: &Plan) {
        let mut changes = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        fn change<'a>(changes: &'a mut BTreeMap<String, Change>, id: &str) -> &'a mut Change {
            changes.entry(id.to_owned()).or_default()
        }
        for id in &p.start {
            change(&mut changes, id).state = Some(kind.running_state().to_owned());
        }
        for id in &p.stop {
            change(&mut changes, id).state = Some("stopped".to_owned());
        }
        for id in &p.lock.ids {
            let c = change(&mut changes, id);
            for (k, v) in &p.lock.tags {
                c.tags.insert(k.clone(), Some(v.clone()));
            }
        }
        for (id, keys) in &p.unlock {
            let c = change(&mut changes, id);
            for k in keys {
                c.tags.insert(k.clone(), None);
            }
        }
    }

    /// Whether the notification `key` of the booking `uid` would be sent for the first time
    /// (and remembers it).
    pub fn first_notification(&self, uid: &str, key: &str) -> bool {
        let mut notified = self.notified.lock().unwrap_or_else(|p| p.into_inner());
        notified.insert(format!("{uid}/{key}"))
    }
}

/// The condition `DryRun` of a Resource whose plan against AWS's real state is `p`: what a
/// controller out of dry-run would do now. Pure.
pub fn condition(kind: ProviderType, p: &Plan) -> CondSpec {
    let mut would = Vec::new();
    if !p.start.is_empty() {
        would.push(format!("start {kind} {}", p.start.join(", ")));
    }
    if !p.stop.is_empty() {
        would.push(format!("stop {kind} {}", p.stop.join(", ")));
    }
    if !p.lock.ids.is_empty() {
        would.push(format!(
            "write the lock tags {} on {}",
            tag_list(&p.lock.tags),
            p.lock.ids.join(", ")
        ));
    }
    if !p.unlock.is_empty() {
        let ids: Vec<&str> = p.unlock.iter().map(|(id, _)| id.as_str()).collect();
        would.push(format!("remove the lock tags from {}", ids.join(", ")));
    }
    let message = if would.is_empty() {
        "dry-run mode: nothing to do now; no AWS write is made".to_owned()
    } else {
        format!(
            "dry-run mode: would {} now; no AWS write is made",
            would.join("; ")
        )
    };
    let reason = if would.is_empty() {
        "NothingToDo"
    } else {
        "WouldAct"
    };
    CondSpec::new(CONDITION, true, reason, &message)
}

/// `key=value, …`.
pub fn tag_list(tags: &[(String, String)]) -> String {
    tags.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::LockTags;

    fn member(id: &str, state: &str) -> Member {
        Member {
            id: id.into(),
            arn: None,
            state: state.into(),
            state_reason: None,
            tags: [("app".to_owned(), "x".to_owned())].into(),
            db_cluster: None,
            is_cluster: false,
        }
    }

    #[test]
    fn the_simulated_group_carries_the_would_be_actions() {
        let dry = DryRun::default();
        let real = [member("i-1", "stopped"), member("i-2", "stopped")];
        let start = Plan {
            start: vec!["i-1".into(), "i-2".into()],
            lock: LockTags {
                ids: vec!["i-1".into()],
                tags: vec![("locked-by".into(), "ann".into())],
            },
            ..Default::default()
        };
        let c = condition(ProviderType::Ec2, &start);
        assert_eq!((c.type_.as_str(), c.status), (CONDITION, true));
        assert!(
            c.message
                .contains("would start ec2 i-1, i-2; write the lock tags locked-by=ann on i-1"),
            "{}",
            c.message
        );
        dry.record(ProviderType::Ec2, &start);
        let sim = dry.simulated(&real);
        assert_eq!(sim[0].state, "running");
        assert_eq!(
            sim[0].tags.get("locked-by").map(String::as_str),
            Some("ann")
        );
        assert_eq!(sim[1].tags.get("locked-by"), None);
        let stop = Plan {
            stop: vec!["i-1".into()],
            unlock: vec![("i-1".into(), vec!["locked-by".into()])],
            ..Default::default()
        };
        dry.record(ProviderType::Ec2, &stop);
        let sim = dry.simulated(&real);
        assert_eq!(
            (sim[0].state.as_str(), sim[1].state.as_str()),
            ("stopped", "running")
        );
        assert_eq!(sim[0].tags.get("locked-by"), None);
        assert_eq!(sim[0].tags.get("app").map(String::as_str), Some("x"));
        // AWS's members themselves are untouched.
        assert_eq!(real[0].state, "stopped");
        let idle = condition(ProviderType::Rds, &Plan::default());
        assert_eq!(idle.reason, "NothingToDo");
        assert!(dry.first_notification("u", "0:email"));
        assert!(!dry.first_notification("u", "0:email"));
        assert!(dry.first_notification("v", "0:email"));
    }
}
