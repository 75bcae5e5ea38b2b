//! The plan of an `rds` group with Aurora DB clusters.

use std::collections::BTreeMap;

use chrono::{DateTime, TimeZone, Utc};

use super::*;
use crate::plan::conditions::UNTAGGED_CLUSTER;

const OWNER: &str = "team-a/db";

fn t(h: u32, m: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2031, 1, 10, h, m, 0).unwrap()
}

fn group_tags() -> BTreeMap<String, String> {
    [
        ("resource-booking/managed", "true"),
        ("resource-booking/application", "analytics"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn cluster(id: &str, state: &str) -> Member {
    Member {
        id: id.into(),
        arn: Some(format!("arn:aws:rds:eu-west-1:1:cluster:{id}")),
        state: state.into(),
        tags: group_tags(),
        is_cluster: true,
        ..Default::default()
    }
}

/// A DB instance; `tagged` with the group's tags or not; in `cluster` when given.
fn instance(id: &str, state: &str, tagged: bool, cluster: Option<&str>) -> Member {
    Member {
        id: id.into(),
        arn: Some(format!("arn:aws:rds:eu-west-1:1:db:{id}")),
        state: state.into(),
        tags: if tagged {
            group_tags()
        } else {
            BTreeMap::new()
        },
        db_cluster: cluster.map(str::to_owned),
        ..Default::default()
    }
}

fn plan_of(members: &[Member], held: bool) -> Plan {
    let spec = ResourceSpec {
        type_: "rds".into(),
        tag: "analytics".into(),
        ..Default::default()
    };
    let attempts = BTreeMap::new();
    let keys = TagKeys::default();
    plan(&PlanInput {
        owner: OWNER,
        kind: ProviderType::Rds,
        spec: &spec,
        booking_holder: held.then(|| Holder {
            booking: Some("b-1".into()),
            user: "alice".into(),
            until: t(11, 0),
        }),
        members: Some(members),
        observed_at: t(10, 0),
        attempts: &attempts,
        keys: &keys,
        backoff: Backoff::default(),
        now: t(10, 0),
    })
}

fn group(state: &str) -> Vec<Member> {
    vec![
        cluster("aurora", state),
        instance("aurora-1", state, false, Some("aurora")),
        instance("aurora-2", state, true, Some("aurora")),
        instance("plain", state, true, None),
    ]
}

#[test]
fn a_booked_group_starts_its_cluster_as_a_whole_and_never_its_members() {
    let p = plan_of(&group("stopped"), true);
    assert_eq!(p.start, vec!["aurora", "plain"]);
    assert!(p.stop.is_empty());
    assert_eq!(p.lock.ids, vec!["aurora", "plain"], "locks on the cluster");
    let s = &p.summary;
    assert_eq!(
        (s.instances, s.running, s.clusters, s.clusters_running),
        (3, 0, 1, 0)
    );
    assert_eq!(s.state, Some(ResourceState::Stopped));
    assert!(p.conditions.iter().all(|c| c.type_ != UNTAGGED_CLUSTER));
}

#[test]
fn an_unbooked_group_stops_its_cluster_and_counts_its_members_running() {
    let p = plan_of(&group("available"), false);
    assert_eq!(p.stop, vec!["aurora", "plain"]);
    assert!(p.start.is_empty());
    let s = &p.summary;
    assert_eq!(
        (s.instances, s.running, s.clusters, s.clusters_running),
        (3, 3, 1, 1)
    );
    assert_eq!(s.state, Some(ResourceState::Running));
}

#[test]
fn a_cluster_in_transit_is_waited_for_and_the_state_counts_it() {
    // The cluster starts (its members follow); the plain instance is up.
    let mut members = group("starting");
    members[3].state = "available".into();
    let p = plan_of(&members, true);
    assert!(p.start.is_empty(), "{:?}", p.start);
    assert!(p.transitional);
    assert_eq!(p.summary.state, Some(ResourceState::Pending));
    assert_eq!(cond(&p, "Ready").reason, "Starting");
    // Once the cluster is available, the group is Ready.
    let p = plan_of(&group("available"), true);
    assert!(p.start.is_empty() && p.stop.is_empty());
    assert_eq!(cond(&p, "Ready").reason, "Running");
}

#[test]
fn a_tagged_instance_of_an_untagged_cluster_is_named_and_left_alone() {
    let mut members = group("stopped");
    members.push(instance("other-1", "stopped", true, Some("other")));
    let p = plan_of(&members, true);
    assert_eq!(
        p.start,
        vec!["aurora", "plain"],
        "neither other-1 nor other"
    );
    assert!(!p.lock.ids.iter().any(|id| id.starts_with("other")));
    let c = cond(&p, UNTAGGED_CLUSTER);
    assert!(c.status);
    assert_eq!(c.reason, "ClusterNotTagged");
    for part in [
        "other-1",
        "DB cluster other",
        "resource-booking/managed=true",
        "resource-booking/application=analytics",
    ] {
        assert!(c.message.contains(part), "{part}: {}", c.message);
    }
    assert_eq!(p.summary.instances, 4, "the instance is still counted");
}

fn cond<'a>(p: &'a Plan, type_: &str) -> &'a CondSpec {
    p.conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no condition {type_}"))
}
