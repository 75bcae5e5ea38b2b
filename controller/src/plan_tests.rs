//! Table-driven tests of the Resource plan with an injected clock.

use super::*;
use chrono::TimeZone;

const OWNER: &str = "team-a/ec2.analytics";

fn t(h: u32, m: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2031, 1, 10, h, m, 0).unwrap()
}

fn member(id: &str, state: &str, extra: &[(&str, &str)]) -> Member {
    let mut tags: BTreeMap<String, String> = [
        ("resource-booking/managed", "true"),
        ("resource-booking/application", "analytics"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, v) in extra {
        tags.insert(k.to_string(), v.to_string());
    }
    Member {
        id: id.into(),
        arn: None,
        state: state.into(),
        state_reason: None,
        tags,
        ..Default::default()
    }
}

fn spec() -> ResourceSpec {
    ResourceSpec {
        type_: "ec2".into(),
        tag: "analytics".into(),
        ..Default::default()
    }
}

fn holder(user: &str, until: DateTime<Utc>) -> Option<Holder> {
    Some(Holder {
        booking: Some("b1".into()),
        user: user.into(),
        until,
    })
}

fn our_lock(user: &str, until: &str) -> Vec<(&'static str, String)> {
    vec![
        ("resource-booking/locked-by", user.to_owned()),
        ("resource-booking/locked-until", until.to_owned()),
        ("resource-booking/lock-owner", OWNER.to_owned()),
    ]
}

struct Case {
    what: &'static str,
    kind: ProviderType,
    spec: ResourceSpec,
    holder: Option<Holder>,
    members: Vec<Member>,
    attempts: BTreeMap<String, Attempt>,
    now: DateTime<Utc>,
    start: Vec<&'static str>,
    stop: Vec<&'static str>,
    lock: Vec<&'static str>,
    unlock: Vec<&'static str>,
    ready: (bool, &'static str),
    locked_by_other: bool,
    degraded: bool,
    requeue_at: Option<DateTime<Utc>>,
}

impl Default for Case {
    fn default() -> Self {
        Self {
            what: "",
            kind: ProviderType::Ec2,
            spec: spec(),
            holder: None,
            members: vec![],
            attempts: BTreeMap::new(),
            now: t(10, 0),
            start: vec![],
            stop: vec![],
            lock: vec![],
            unlock: vec![],
            ready: (false, ""),
            locked_by_other: false,
            degraded: false,
            requeue_at: None,
        }
    }
}

fn with_tags(id: &str, state: &str, tags: Vec<(&'static str, String)>) -> Member {
    let pairs: Vec<(&str, &str)> = tags.iter().map(|(k, v)| (*k, v.as_str())).collect();
    member(id, state, &pairs)
}

fn cond<'a>(p: &'a Plan, type_: &str) -> &'a CondSpec {
    p.conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no condition {type_}"))
}

#[test]
fn plan_table() {
    let start_attempt = |at| Attempt {
        op: Op::Start,
        count: 1,
        at,
        error: None,
    };
    let cases = vec![
        Case {
            what: "booked: start only the stopped members of a mixed group and lock all",
            holder: holder("alice", t(11, 0)),
            members: vec![
                member("i-1", "stopped", &[]),
                member("i-2", "running", &[]),
                member("i-3", "pending", &[]),
                member("i-4", "stopping", &[]),
                member("i-5", "terminated", &[]),
                member("i-6", "shutting-down", &[]),
            ],
            start: vec!["i-1"],
            lock: vec!["i-1", "i-2", "i-3", "i-4"],
            ready: (false, "Starting"),
            requeue_at: Some(t(11, 0)),
            ..Default::default()
        },
        Case {
            what: "unbooked: stop only running members and remove our locks",
            members: vec![
                with_tags("i-1", "running", our_lock("alice", "2031-01-10T11:00:00Z")),
                member("i-2", "stopped", &[]),
                member("i-3", "pending", &[]),
            ],
            stop: vec!["i-1"],
            unlock: vec!["i-1"],
            ready: (false, "Stopping"),
            ..Default::default()
        },
        Case {
            what: "deleted active booking: our unexpired lock does not hold the group",
            members: vec![with_tags(
                "i-1",
                "running",
                our_lock("alice", "2031-01-10T12:00:00Z"),
            )],
            stop: vec!["i-1"],
            unlock: vec!["i-1"],
            ready: (false, "Stopping"),
            ..Default::default()
        },
        Case {
            what: "converged and running: nothing to do",
            holder: holder("alice", t(11, 0)),
            members: vec![with_tags(
                "i-1",
                "running",
                our_lock("alice", "2031-01-10T11:00:00Z"),
            )],
            ready: (true, "Running"),
            requeue_at: Some(t(11, 0)),
            ..Default::default()
        },
        Case {
            what: "converged and stopped: nothing to do",
            members: vec![member("i-1", "stopped", &[])],
            ready: (true, "Stopped"),
            ..Default::default()
        },
        Case {
            what: "foreign unexpired lock (the original's hyphenated tags) is respected",
            holder: holder("alice", t(11, 0)),
            members: vec![
                member(
                    "i-1",
                    "stopped",
                    &[
                        ("resource-booking-locked-by", "bob"),
                        ("resource-booking-locked-until", "2031-01-10T10:30:00Z"),
                    ],
                ),
                member("i-2", "stopped", &[]),
            ],
            ready: (false, "LockedByOther"),
            locked_by_other: true,
            requeue_at: Some(t(10, 30)),
            ..Default::default()
        },
        Case {
            what: "foreign lock keeps an unbooked group running too",
            members: vec![member(
                "i-1",
                "running",
                &[
                    ("resource-booking/locked-by", "bob"),
                    ("resource-booking/locked-until", "2031-01-10T10:30:00Z"),
                    ("resource-booking/lock-owner", "team-b/ec2.analytics"),
                ],
            )],
            ready: (false, "LockedByOther"),
            locked_by_other: true,
            requeue_at: Some(t(10, 30)),
            ..Default::default()
        },
        Case {
            what: "expired foreign lock is overwritten",
            holder: holder("alice", t(11, 0)),
            members: vec![member(
                "i-1",
                "stopped",
                &[
                    ("resource-booking-locked-by", "bob"),
                    ("resource-booking-locked-until", "2031-01-10T09:59:59Z"),
                ],
            )],
            start: vec!["i-1"],
            lock: vec!["i-1"],
            ready: (false, "Starting"),
            requeue_at: Some(t(11, 0)),
            ..Default::default()
        },
        Case {
            what: "a lock of the same user without an owner tag is foreign: user_id is free text",
            holder: holder("alice", t(11, 0)),
            members: vec![member(
                "i-1",
                "running",
                &[
                    ("resource-booking-locked-by", "alice"),
                    ("resource-booking-locked-until", "2031-01-10T11:00:00Z"),
                ],
            )],
            ready: (false, "LockedByOther"),
            locked_by_other: true,
            requeue_at: Some(t(11, 0)),
            ..Default::default()
        },
        Case {
            what: "a lock of the same user written by another Resource is foreign",
            holder: holder("alice", t(11, 0)),
            members: vec![member(
                "i-1",
                "stopped",
                &[
                    ("resource-booking/locked-by", "alice"),
                    ("resource-booking/locked-until", "2031-01-10T10:30:00Z"),
                    ("resource-booking/lock-owner", "team-b/ec2.analytics"),
                ],
            )],
            ready: (false, "LockedByOther"),
            locked_by_other: true,
            requeue_at: Some(t(10, 30)),
            ..Default::default()
        },
        Case {
            what: "a lock this Resource wrote is ours, whoever it names",
            holder: holder("alice", t(11, 0)),
            members: vec![member(
                "i-1",
                "running",
                &[
                    ("resource-booking/locked-by", "bob"),
                    ("resource-booking/locked-until", "2031-01-10T10:30:00Z"),
                    ("resource-booking/lock-owner", OWNER),
                ],
            )],
            lock: vec!["i-1"],
            ready: (true, "Running"),
            requeue_at: Some(t(11, 0)),
            ..Default::default()
        },
        Case {
            what: "unexpired manual booking starts the group",
            spec: ResourceSpec {
                booked_by: Some("carol".into()),
                booked_until: Some("2031-01-10T12:00:00Z".into()),
                ..spec()
            },
            members: vec![member("i-1", "stopped", &[])],
            start: vec!["i-1"],
            lock: vec!["i-1"],
            ready: (false, "Starting"),
            requeue_at: Some(t(12, 0)),
            ..Default::default()
        },
        Case {
            what: "expired manual booking stops the group",
            spec: ResourceSpec {
                booked_by: Some("carol".into()),
                booked_until: Some("2031-01-10T09:00:00Z".into()),
                ..spec()
            },
            members: vec![with_tags(
                "i-1",
                "running",
                our_lock("carol", "2031-01-10T09:00:00Z"),
            )],
            stop: vec!["i-1"],
            unlock: vec!["i-1"],
            ready: (false, "Stopping"),
            ..Default::default()
        },
        Case {
            what: "empty manual booking of the original's sample is unused",
            spec: ResourceSpec {
                booked_by: Some(String::new()),
                booked_until: Some(String::new()),
                ..spec()
            },
            members: vec![member("i-1", "stopped", &[])],
            ready: (true, "Stopped"),
            ..Default::default()
        },
        Case {
            what: "Auto Scaling group members are never acted on",
            holder: holder("alice", t(11, 0)),
            members: vec![
                member("i-1", "stopped", &[("aws:autoscaling:groupName", "asg-1")]),
                member("i-2", "stopped", &[]),
            ],
            start: vec!["i-2"],
            lock: vec!["i-2"],
            ready: (false, "Starting"),
            requeue_at: Some(t(11, 0)),
            ..Default::default()
        },
        Case {
            what: "RDS: stop only available, start only stopped",
            kind: ProviderType::Rds,
            spec: ResourceSpec {
                type_: "rds".into(),
                ..spec()
            },
            members: vec![
                member("db-1", "available", &[]),
                member("db-2", "starting", &[]),
                member("db-3", "backing-up", &[]),
                member("db-4", "stopped", &[]),
            ],
            stop: vec!["db-1"],
            ready: (false, "Stopping"),
            ..Default::default()
        },
        Case {
            what: "RDS restarted by AWS after 7 days is stopped again while unbooked",
            kind: ProviderType::Rds,
            spec: ResourceSpec {
                type_: "rds".into(),
                ..spec()
            },
            members: vec![member("db-1", "available", &[])],
            stop: vec!["db-1"],
            ready: (false, "Stopping"),
            ..Default::default()
        },
        Case {
            what: "start accepted but fell back to stopped: degraded, retried after backoff",
            holder: holder("alice", t(11, 0)),
            members: vec![
                with_tags("i-1", "stopped", our_lock("alice", "2031-01-10T11:00:00Z")),
                with_tags("i-2", "running", our_lock("alice", "2031-01-10T11:00:00Z")),
            ],
            attempts: [(
                "i-1".to_string(),
                start_attempt(t(9, 59) + chrono::Duration::seconds(58)),
            )]
            .into(),
            degraded: true,
            ready: (false, "Starting"),
            requeue_at: Some(t(9, 59) + chrono::Duration::seconds(63)),
            ..Default::default()
        },
        Case {
            what: "backoff elapsed: the fallen-back member is retried alone",
            holder: holder("alice", t(11, 0)),
            members: vec![
                with_tags("i-1", "stopped", our_lock("alice", "2031-01-10T11:00:00Z")),
                with_tags("i-2", "running", our_lock("alice", "2031-01-10T11:00:00Z")),
            ],
            attempts: [("i-1".to_string(), start_attempt(t(9, 58)))].into(),
            start: vec!["i-1"],
            degraded: true,
            ready: (false, "Starting"),
            requeue_at: Some(t(11, 0)),
            ..Default::default()
        },
        Case {
            what: "no observation since the start: wait, no second call",
            holder: holder("alice", t(11, 0)),
            members: vec![with_tags(
                "i-1",
                "stopped",
                our_lock("alice", "2031-01-10T11:00:00Z"),
            )],
            attempts: [("i-1".to_string(), start_attempt(t(10, 0)))].into(),
            ready: (false, "Starting"),
            requeue_at: Some(t(10, 0) + chrono::Duration::seconds(5)),
            ..Default::default()
        },
    ];
    for c in cases {
        let observed_at = c.now - chrono::Duration::seconds(1);
        let keys = TagKeys::default();
        let input = PlanInput {
            owner: OWNER,
            kind: c.kind,
            spec: &c.spec,
            booking_holder: c.holder.clone(),
            members: Some(&c.members),
            observed_at,
            attempts: &c.attempts,
            keys: &keys,
            backoff: Backoff::default(),
            now: c.now,
        };
        let p = plan(&input);
        assert_eq!(p.start, c.start, "start: {}", c.what);
        assert_eq!(p.stop, c.stop, "stop: {}", c.what);
        assert_eq!(p.lock.ids, c.lock, "lock: {}", c.what);
        let unlocked: Vec<&str> = p.unlock.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(unlocked, c.unlock, "unlock: {}", c.what);
        let ready = cond(&p, "Ready");
        assert_eq!(
            (ready.status, ready.reason.as_str()),
            c.ready,
            "ready: {}",
            c.what
        );
        assert_eq!(
            cond(&p, "LockedByOther").status,
            c.locked_by_other,
            "locked: {}",
            c.what
        );
        assert_eq!(
            cond(&p, "Degraded").status,
            c.degraded,
            "degraded: {}",
            c.what
        );
        assert_eq!(p.requeue_at, c.requeue_at, "requeue: {}", c.what);
    }
}

#[test]
fn foreign_lock_is_named_in_condition_and_status() {
    let members = vec![member(
        "i-1",
        "stopped",
        &[
            ("resource-booking-locked-by", "bob"),
            ("resource-booking-locked-until", "2031-01-10T10:30:00Z"),
        ],
    )];
    let attempts = BTreeMap::new();
    let keys = TagKeys::default();
    let s = spec();
    let p = plan(&PlanInput {
        owner: OWNER,
        kind: ProviderType::Ec2,
        spec: &s,
        booking_holder: holder("alice", t(11, 0)),
        members: Some(&members),
        observed_at: t(10, 0),
        attempts: &attempts,
        keys: &keys,
        backoff: Backoff::default(),
        now: t(10, 0),
    });
    assert!(cond(&p, "LockedByOther").message.contains("bob"));
    assert_eq!(p.summary.locked_by.as_deref(), Some("bob"));
    assert_eq!(
        p.summary.locked_until.as_deref(),
        Some("2031-01-10T10:30:00Z")
    );
    assert!(p.lock.ids.is_empty() && p.start.is_empty());
}

#[test]
fn lock_tags_carry_user_end_and_owner() {
    let members = vec![member("i-1", "stopped", &[])];
    let attempts = BTreeMap::new();
    let keys = TagKeys::default();
    let s = spec();
    let p = plan(&PlanInput {
        owner: OWNER,
        kind: ProviderType::Ec2,
        spec: &s,
        booking_holder: holder("alice", t(11, 0)),
        members: Some(&members),
        observed_at: t(10, 0),
        attempts: &attempts,
        keys: &keys,
        backoff: Backoff::default(),
        now: t(10, 0),
    });
    assert_eq!(
        p.lock.tags,
        vec![
            (
                "resource-booking/locked-by".to_string(),
                "alice".to_string()
            ),
            (
                "resource-booking/locked-until".to_string(),
                "2031-01-10T11:00:00Z".to_string()
            ),
            ("resource-booking/lock-owner".to_string(), OWNER.to_string()),
        ]
    );
    assert_eq!(p.summary.instances, 1);
    assert_eq!(p.summary.state, Some(ResourceState::Stopped));
    assert_eq!(p.summary.active_booking.as_deref(), Some("b1"));
}

#[test]
fn failed_call_is_reported_with_its_code_and_retried_after_backoff() {
    let members = vec![member("i-1", "running", &[])];
    let attempts: BTreeMap<String, Attempt> = [(
        "i-1".to_string(),
        Attempt {
            op: Op::Stop,
            count: 3,
            at: t(10, 0),
            error: Some("IncorrectInstanceState: not in a state to stop".into()),
        },
    )]
    .into();
    let keys = TagKeys::default();
    let s = spec();
    let input = |now| PlanInput {
        owner: OWNER,
        kind: ProviderType::Ec2,
        spec: &s,
        booking_holder: None,
        members: Some(&members),
        observed_at: t(10, 0),
        attempts: &attempts,
        keys: &keys,
        backoff: Backoff::default(),
        now,
    };
    let early = plan(&input(t(10, 0) + chrono::Duration::seconds(10)));
    assert!(early.stop.is_empty(), "third failure waits 20 s");
    assert_eq!(
        early.requeue_at,
        Some(t(10, 0) + chrono::Duration::seconds(20))
    );
    let synced = cond(&early, "Synced");
    assert!(!synced.status);
    assert!(synced.message.contains("i-1") && synced.message.contains("IncorrectInstanceState"));
    let later = plan(&input(t(10, 0) + chrono::Duration::seconds(20)));
    assert_eq!(later.stop, vec!["i-1"]);
}

#[test]
fn no_inventory_yet_means_no_action() {
    let attempts = BTreeMap::new();
    let keys = TagKeys::default();
    let s = spec();
    let p = plan(&PlanInput {
        owner: OWNER,
        kind: ProviderType::Ec2,
        spec: &s,
        booking_holder: holder("alice", t(11, 0)),
        members: None,
        observed_at: t(10, 0),
        attempts: &attempts,
        keys: &keys,
        backoff: Backoff::default(),
        now: t(10, 0),
    });
    assert!(p.start.is_empty());
    assert_eq!(cond(&p, "Synced").reason, "InventoryPending");
}

#[test]
fn manual_holder_rules() {
    let mut s = spec();
    s.booked_by = Some("carol".into());
    s.booked_until = Some("not a time".into());
    assert!(
        manual_holder(&s, t(10, 0))
            .unwrap_err()
            .contains("booked_until")
    );
    s.booked_until = None;
    assert!(manual_holder(&s, t(10, 0)).is_err());
    s.booked_until = Some("2031-01-10T10:00:00Z".into());
    assert_eq!(
        manual_holder(&s, t(10, 0)),
        Ok(None),
        "expires at its end instant"
    );
}

#[test]
fn members_in_transit_ask_for_an_early_look() {
    let attempts = BTreeMap::new();
    let keys = TagKeys::default();
    let s = spec();
    let run = |members: Vec<Member>, holder_: Option<Holder>| {
        plan(&PlanInput {
            owner: OWNER,
            kind: ProviderType::Ec2,
            spec: &s,
            booking_holder: holder_,
            members: Some(&members),
            observed_at: t(10, 0),
            attempts: &attempts,
            keys: &keys,
            backoff: Backoff::default(),
            now: t(10, 0),
        })
        .transitional
    };
    // Back-to-back: the previous booking's stop is still in progress when the next one starts.
    assert!(run(
        vec![member("i-1", "stopping", &[])],
        holder("alice", t(11, 0))
    ));
    assert!(!run(
        vec![member("i-1", "running", &[])],
        holder("alice", t(11, 0))
    ));
    assert!(!run(vec![member("i-1", "stopped", &[])], None));
}

#[test]
fn a_member_running_without_a_booking_is_reported_with_what_is_done_or_would_be() {
    let members = vec![member("i-1", "running", &[])];
    let attempts = BTreeMap::new();
    let keys = TagKeys::default();
    let s = spec();
    let p = plan(&PlanInput {
        owner: OWNER,
        kind: ProviderType::Ec2,
        spec: &s,
        booking_holder: None,
        members: Some(&members),
        observed_at: t(10, 0),
        attempts: &attempts,
        keys: &keys,
        backoff: Backoff::default(),
        now: t(10, 0),
    });
    assert_eq!(p.stop, ["i-1"]);
    let note = p
        .notes
        .iter()
        .find(|n| n.reason == "StartedOutside")
        .expect("a StartedOutside note");
    assert!(note.warning);
    assert_eq!(
        note.text(false),
        "ec2 i-1 is running without a booking (started outside the operator or by AWS); stopping it"
    );
    assert_eq!(
        note.text(true),
        "ec2 i-1 is running without a booking (started outside the operator or by AWS); dry-run mode: would stop it"
    );
}
