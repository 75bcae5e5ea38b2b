//! Tables of every rule, including the shared admission cases that do not need a cluster.

use chrono::TimeZone;

use super::*;
use crate::api::{BookingTemplate, ResourceMonitorSpec};

/// `None`: admitted; `Some((field, substrings))`: denied, naming `field` first.
type Expect = Option<(&'static str, &'static [&'static str])>;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2030, 6, 1, 12, 0, 0).unwrap()
}

fn booking(start: &str, end: &str) -> BookingSpec {
    BookingSpec {
        resource_name: "ec2.analytics".into(),
        start_at: start.into(),
        end_at: end.into(),
        user_id: "ann".into(),
        notifications: vec![],
    }
}

fn ok_booking() -> BookingSpec {
    booking("2030-06-01T13:00:00Z", "2030-06-01T14:00:00Z")
}

fn webhook_from(name: &str, key: &str, recipient: &str) -> Notification {
    Notification {
        type_: "webhook".into(),
        recipient: recipient.into(),
        recipient_from: Some(crate::api::RecipientSource {
            secret_key_ref: crate::api::SecretKeyRef {
                name: name.into(),
                key: key.into(),
            },
        }),
        lead_minutes: None,
        events: vec![],
    }
}

fn email(recipient: &str) -> Notification {
    Notification {
        type_: "email".into(),
        recipient: recipient.into(),
        lead_minutes: None,
        events: vec![],
        recipient_from: None,
    }
}

fn denied(outcome: Outcome) -> Invalid {
    outcome.expect_err("expected a denial")
}

fn scheduler(schedule: &str, duration: u32) -> BookingSchedulerSpec {
    BookingSchedulerSpec {
        schedule: schedule.into(),
        duration,
        booking_template: BookingTemplate {
            resource_name: "ec2.analytics".into(),
            user_id: "ann".into(),
            notifications: vec![],
        },
        ..Default::default()
    }
}

// === Booking ===

#[test]
fn booking_table() {
    struct Case {
        what: &'static str,
        spec: BookingSpec,
        policy: Policy,
        /// `None`: admitted; `Some((field, substrings))`: denied naming `field`.
        denied: Option<(&'static str, &'static [&'static str])>,
        warnings: usize,
    }
    let max4h = Policy {
        max_booking_duration: Some(Duration::hours(4)),
    };
    let with_user = |u: &str| BookingSpec {
        user_id: u.into(),
        ..ok_booking()
    };
    let cases = vec![
        Case {
            what: "well-formed future booking",
            spec: ok_booking(),
            policy: Policy::default(),
            denied: None,
            warnings: 0,
        },
        Case {
            what: "offsets and fractions",
            spec: booking("2030-06-01T15:00:00.5+02:00", "2030-06-01T16:00:00+02:00"),
            policy: Policy::default(),
            denied: None,
            warnings: 0,
        },
        Case {
            what: "end before start (case 03)",
            spec: booking("2030-06-01T14:00:00Z", "2030-06-01T13:00:00Z"),
            policy: Policy::default(),
            denied: Some(("spec.end_at", &["end_at", "2030-06-01T13:00:00Z"])),
            warnings: 0,
        },
        Case {
            what: "end equals start",
            spec: booking("2030-06-01T14:00:00Z", "2030-06-01T14:00:00Z"),
            policy: Policy::default(),
            denied: Some(("spec.end_at", &["end_at"])),
            warnings: 0,
        },
        Case {
            what: "start not RFC 3339 (case 04)",
            spec: booking("2031-01-10 22:35", "2031-01-10T23:35:00Z"),
            policy: Policy::default(),
            denied: Some((
                "spec.start_at",
                &["start_at", "2031-01-10 22:35", "2031-01-10T22:35:00Z"],
            )),
            warnings: 0,
        },
        Case {
            what: "offset without its colon: the field and the corrected value",
            spec: booking("2031-05-01T10:00:00+0100", "2031-05-01T12:00:00+01:00"),
            policy: Policy::default(),
            denied: Some((
                "spec.start_at",
                &[
                    "spec.start_at",
                    "\"2031-05-01T10:00:00+0100\"",
                    "RFC 3339",
                    "2031-05-01T10:00:00+01:00",
                ],
            )),
            warnings: 0,
        },
        Case {
            what: "end offset without its colon names end_at, not start_at",
            spec: booking("2031-05-01T10:00:00+01:00", "2031-05-01T12:00:00-0530"),
            policy: Policy::default(),
            denied: Some((
                "spec.end_at",
                &["spec.end_at", "RFC 3339", "2031-05-01T12:00:00-05:30"],
            )),
            warnings: 0,
        },
        Case {
            what: "lower-case t, which Kubernetes cannot read as a timestamp",
            spec: booking("2031-05-01t10:00:00Z", "2031-05-01T12:00:00Z"),
            policy: Policy::default(),
            denied: Some((
                "spec.start_at",
                &["spec.start_at", "upper-case", "RFC 3339"],
            )),
            warnings: 0,
        },
        Case {
            what: "lower-case z",
            spec: booking("2031-05-01T10:00:00Z", "2031-05-01T12:00:00z"),
            policy: Policy::default(),
            denied: Some(("spec.end_at", &["spec.end_at", "upper-case", "RFC 3339"])),
            warnings: 0,
        },
        Case {
            what: "a year beyond the API server's timestamp range",
            spec: booking("2031-05-01T10:00:00Z", "9999-12-31T23:00:00-05:00"),
            policy: Policy::default(),
            denied: Some(("spec.end_at", &["spec.end_at", "9998"])),
            warnings: 0,
        },
        Case {
            what: "fractional seconds and offsets are fine",
            spec: booking(
                "2031-05-01T10:00:00.123456789+01:00",
                "1000-01-01T00:00:00Z",
            ),
            policy: Policy::default(),
            denied: Some(("spec.end_at", &["end_at", "after"])),
            warnings: 0,
        },
        Case {
            what: "end not RFC 3339",
            spec: booking("2031-01-10T22:35:00Z", "tomorrow"),
            policy: Policy::default(),
            denied: Some(("spec.end_at", &["end_at", "tomorrow"])),
            warnings: 0,
        },
        Case {
            what: "past booking admitted with a warning (case 01)",
            spec: BookingSpec {
                user_id: "cd39ad8bc3".into(),
                ..booking("2023-01-10T22:35:00Z", "2023-01-10T22:45:00Z")
            },
            policy: Policy::default(),
            denied: None,
            warnings: 1,
        },
        Case {
            what: "in progress is not past",
            spec: booking("2030-06-01T11:00:00Z", "2030-06-01T13:00:00Z"),
            policy: Policy::default(),
            denied: None,
            warnings: 0,
        },
        Case {
            what: "longer than the maximum",
            spec: booking("2030-06-01T13:00:00Z", "2030-06-01T18:30:00Z"),
            policy: max4h.clone(),
            denied: Some(("spec.end_at", &["5h30m", "4h", "shorten"])),
            warnings: 0,
        },
        Case {
            what: "exactly the maximum",
            spec: booking("2030-06-01T13:00:00Z", "2030-06-01T17:00:00Z"),
            policy: max4h,
            denied: None,
            warnings: 0,
        },
        Case {
            what: "no maximum by default",
            spec: booking("2030-06-01T13:00:00Z", "2031-06-01T13:00:00Z"),
            policy: Policy::default(),
            denied: None,
            warnings: 0,
        },
        Case {
            what: "empty user",
            spec: with_user(""),
            policy: Policy::default(),
            denied: Some(("spec.user_id", &["user_id", "empty"])),
            warnings: 0,
        },
        Case {
            what: "blank user",
            spec: with_user("  "),
            policy: Policy::default(),
            denied: Some(("spec.user_id", &["user_id"])),
            warnings: 0,
        },
        Case {
            what: "user too long for a tag",
            spec: with_user(&"u".repeat(257)),
            policy: Policy::default(),
            denied: Some(("spec.user_id", &["256"])),
            warnings: 0,
        },
        Case {
            what: "service account user",
            spec: with_user("system:serviceaccount:ci:deployer"),
            policy: Policy::default(),
            denied: None,
            warnings: 0,
        },
        Case {
            what: "resource name with upper case",
            spec: BookingSpec {
                resource_name: "EC2.Analytics".into(),
                ..ok_booking()
            },
            policy: Policy::default(),
            denied: Some(("spec.resource_name", &["EC2.Analytics", "lower-case"])),
            warnings: 0,
        },
        Case {
            what: "empty resource name",
            spec: BookingSpec {
                resource_name: "".into(),
                ..ok_booking()
            },
            policy: Policy::default(),
            denied: Some(("spec.resource_name", &["resource_name"])),
            warnings: 0,
        },
        Case {
            what: "unknown notification type (case 09)",
            spec: BookingSpec {
                notifications: vec![Notification {
                    type_: "pigeon".into(),
                    recipient: "loft-3".into(),
                    lead_minutes: None,
                    events: vec![],
                    recipient_from: None,
                }],
                ..ok_booking()
            },
            policy: Policy::default(),
            denied: Some(("spec.notifications[0].type", &["pigeon", "email, webhook"])),
            warnings: 0,
        },
        Case {
            what: "unknown notification event",
            spec: BookingSpec {
                notifications: vec![Notification {
                    events: vec!["started".into(), "exploded".into()],
                    ..email("ann@example.com")
                }],
                ..ok_booking()
            },
            policy: Policy::default(),
            denied: Some((
                "spec.notifications[0].events[1]",
                &["exploded", "reminder, started, stopped, failed"],
            )),
            warnings: 0,
        },
        Case {
            what: "a notification event listed twice",
            spec: BookingSpec {
                notifications: vec![Notification {
                    events: vec!["stopped".into(), "failed".into(), "stopped".into()],
                    ..email("ann@example.com")
                }],
                ..ok_booking()
            },
            policy: Policy::default(),
            denied: Some(("spec.notifications[0].events[2]", &["stopped", "twice"])),
            warnings: 0,
        },
        Case {
            what: "every notification event, once each",
            spec: BookingSpec {
                notifications: vec![Notification {
                    events: vec![
                        "reminder".into(),
                        "started".into(),
                        "stopped".into(),
                        "failed".into(),
                    ],
                    ..email("ann@example.com")
                }],
                ..ok_booking()
            },
            policy: Policy::default(),
            denied: None,
            warnings: 0,
        },
        Case {
            what: "bad email recipient (case 10)",
            spec: BookingSpec {
                notifications: vec![email("not-an-address")],
                ..ok_booking()
            },
            policy: Policy::default(),
            denied: Some((
                "spec.notifications[0].recipient",
                &["recipient", "not-an-address", "ann@example.com"],
            )),
            warnings: 0,
        },
        Case {
            what: "good email recipient",
            spec: BookingSpec {
                notifications: vec![email("ann@example.com")],
                ..ok_booking()
            },
            policy: Policy::default(),
            denied: None,
            warnings: 0,
        },
        Case {
            what: "second notification is the bad one",
            spec: BookingSpec {
                notifications: vec![email("ann@example.com"), email("@@")],
                ..ok_booking()
            },
            policy: Policy::default(),
            denied: Some(("spec.notifications[1].recipient", &["notifications[1]"])),
            warnings: 0,
        },
        Case {
            what: "webhook URL from a Secret",
            spec: BookingSpec {
                notifications: vec![webhook_from("chat-hooks", "url", "")],
                ..ok_booking()
            },
            policy: Policy::default(),
            denied: None,
            warnings: 0,
        },
        Case {
            what: "webhook URL from a Secret and in recipient",
            spec: BookingSpec {
                notifications: vec![webhook_from(
                    "chat-hooks",
                    "url",
                    "https://hooks.example.com/x",
                )],
                ..ok_booking()
            },
            policy: Policy::default(),
            denied: Some(("spec.notifications[0].recipient", &["not both"])),
            warnings: 0,
        },
        Case {
            what: "webhook Secret reference without a valid name",
            spec: BookingSpec {
                notifications: vec![webhook_from("Chat Hooks", "url", "")],
                ..ok_booking()
            },
            policy: Policy::default(),
            denied: Some((
                "spec.notifications[0].recipient_from.secret_key_ref.name",
                &["\"chat hooks\"", "secret name"],
            )),
            warnings: 0,
        },
        Case {
            what: "webhook Secret reference without a key",
            spec: BookingSpec {
                notifications: vec![webhook_from("chat-hooks", "", "")],
                ..ok_booking()
            },
            policy: Policy::default(),
            denied: Some((
                "spec.notifications[0].recipient_from.secret_key_ref.key",
                &["secret key"],
            )),
            warnings: 0,
        },
        Case {
            what: "email from a Secret",
            spec: BookingSpec {
                notifications: vec![Notification {
                    type_: "email".into(),
                    ..webhook_from("mail", "to", "")
                }],
                ..ok_booking()
            },
            policy: Policy::default(),
            denied: Some(("spec.notifications[0].recipient_from", &["only a webhook"])),
            warnings: 0,
        },
        Case {
            what: "https webhook",
            spec: BookingSpec {
                notifications: vec![Notification {
                    type_: "webhook".into(),
                    recipient: "https://hooks.example.com/x".into(),
                    lead_minutes: Some(5),
                    events: vec![],
                    recipient_from: None,
                }],
                ..ok_booking()
            },
            policy: Policy::default(),
            denied: None,
            warnings: 0,
        },
        Case {
            what: "plain http webhook",
            spec: BookingSpec {
                notifications: vec![Notification {
                    type_: "webhook".into(),
                    recipient: "http://hooks.example.com/x".into(),
                    lead_minutes: None,
                    events: vec![],
                    recipient_from: None,
                }],
                ..ok_booking()
            },
            policy: Policy::default(),
            denied: Some((
                "spec.notifications[0].recipient",
                &["https", "\"http://hooks.example.com\" is not valid"],
            )),
            warnings: 0,
        },
        Case {
            what: "webhook not a URL",
            spec: BookingSpec {
                notifications: vec![Notification {
                    type_: "webhook".into(),
                    recipient: "slack".into(),
                    lead_minutes: None,
                    events: vec![],
                    recipient_from: None,
                }],
                ..ok_booking()
            },
            policy: Policy::default(),
            denied: Some(("spec.notifications[0].recipient", &["not a url"])),
            warnings: 0,
        },
        Case {
            what: "lead longer than the booking warns",
            spec: BookingSpec {
                notifications: vec![Notification {
                    lead_minutes: Some(90),
                    events: vec![],
                    recipient_from: None,
                    ..email("ann@example.com")
                }],
                ..ok_booking()
            },
            policy: Policy::default(),
            denied: None,
            warnings: 1,
        },
        Case {
            what: "lead over a week",
            spec: BookingSpec {
                notifications: vec![Notification {
                    lead_minutes: Some(10_081),
                    events: vec![],
                    recipient_from: None,
                    ..email("ann@example.com")
                }],
                ..ok_booking()
            },
            policy: Policy::default(),
            denied: Some(("spec.notifications[0].leadMinutes", &["10081"])),
            warnings: 0,
        },
    ];
    for c in cases {
        let got = validate_booking(&c.spec, &c.policy, now());
        match (c.denied, got) {
            (None, Ok(w)) => assert_eq!(w.len(), c.warnings, "{}: warnings {w:?}", c.what),
            (Some((field, subs)), Err(e)) => {
                assert_eq!(e.fields()[0], field, "{}: {e}", c.what);
                let msg = e.to_string().to_lowercase();
                for s in subs {
                    assert!(
                        msg.contains(&s.to_lowercase()),
                        "{}: {msg:?} lacks {s:?}",
                        c.what
                    );
                }
            }
            (want, got) => panic!("{}: wanted denial {want:?}, got {got:?}", c.what),
        }
    }
}

#[test]
fn every_violation_is_reported_at_once() {
    let spec = BookingSpec {
        resource_name: "Bad Name".into(),
        start_at: "soon".into(),
        end_at: "later".into(),
        user_id: "".into(),
        notifications: vec![email("x")],
    };
    let e = denied(validate_booking(&spec, &Policy::default(), now()));
    assert_eq!(
        e.fields(),
        [
            "spec.resource_name",
            "spec.user_id",
            "spec.start_at",
            "spec.end_at",
            "spec.notifications[0].recipient"
        ]
    );
    assert!(e.to_string().matches("; ").count() >= 4, "{e}");
}

#[test]
fn past_warning_names_the_end_and_now() {
    let w = validate_booking(
        &booking("2023-01-10T22:35:00Z", "2023-01-10T22:45:00Z"),
        &Policy::default(),
        now(),
    )
    .unwrap();
    assert!(
        w[0].contains("2023-01-10T22:45:00Z") && w[0].contains("2030-06-01T12:00:00Z"),
        "{w:?}"
    );
}

#[test]
fn overlap_message_names_other_booking_user_and_times() {
    let other = crate::overlap::IndexedBooking {
        namespace: "ns".into(),
        name: "first-come".into(),
        resource_name: "ec2.analytics".into(),
        user_id: "ann".into(),
        start_at: "2030-06-01T13:00:00Z".into(),
        end_at: "2030-06-01T15:00:00Z".into(),
        slot: Slot::new(
            Utc.with_ymd_and_hms(2030, 6, 1, 13, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(2030, 6, 1, 15, 0, 0).unwrap(),
        )
        .unwrap(),
        deleting: false,
    };
    let v = overlap_violation(
        &booking("2030-06-01T14:00:00Z", "2030-06-01T16:00:00Z"),
        &other,
    );
    for s in [
        "first-come",
        "ann",
        "2030-06-01T13:00:00Z",
        "2030-06-01T15:00:00Z",
        "ec2.analytics",
        "back-to-back",
    ] {
        assert!(v.message.contains(s), "{} lacks {s}", v.message);
    }
}

// === Booking defaults ===

fn full_booking(spec: BookingSpec) -> Booking {
    let mut b = Booking::new("b", spec);
    b.metadata.namespace = Some("ns".into());
    b
}

#[test]
fn booking_defaults_fill_absent_fields_only() {
    // user_id from the requesting user (case 13), label, lead minutes.
    let mut b = full_booking(BookingSpec {
        user_id: String::new(),
        notifications: vec![
            email("ann@example.com"),
            Notification {
                lead_minutes: Some(5),
                events: vec![],
                recipient_from: None,
                ..email("bob@example.com")
            },
            Notification {
                events: vec!["started".into(), "stopped".into()],
                ..email("cy@example.com")
            },
        ],
        ..ok_booking()
    });
    let filled = default_booking(&mut b, None, "carol");
    assert_eq!(
        b.spec.notifications[2].lead_minutes, None,
        "leadMinutes times the reminder alone: no default without it"
    );
    assert_eq!(b.spec.user_id, "carol");
    assert_eq!(
        b.spec.notifications[0].lead_minutes,
        Some(DEFAULT_NOTIFICATION_LEAD_MINUTES)
    );
    assert_eq!(
        b.spec.notifications[1].lead_minutes,
        Some(5),
        "a written value stays"
    );
    assert_eq!(
        b.metadata.labels.as_ref().unwrap()[RESOURCE_LABEL],
        "ec2.analytics"
    );
    let fields: Vec<&str> = filled.iter().map(|d| d.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "metadata.annotations.manager.kotaico.de/requested-by",
            "spec.user_id",
            "spec.notifications[0].leadMinutes",
            "metadata.labels.manager.kotaico.de/resource"
        ]
    );
    // A second pass changes nothing: idempotent.
    let again = b.clone();
    assert!(default_booking(&mut b, None, "dave").is_empty());
    assert_eq!(
        serde_json::to_value(&b).unwrap(),
        serde_json::to_value(&again).unwrap()
    );
}

#[test]
fn booking_defaults_never_rewrite_user_values() {
    let mut b = full_booking(ok_booking());
    b.metadata.labels = Some([(RESOURCE_LABEL.to_owned(), "custom".to_owned())].into());
    b.metadata.annotations =
        Some([(REQUESTED_BY_ANNOTATION.to_owned(), "carol".to_owned())].into());
    assert!(default_booking(&mut b, None, "carol").is_empty());
    assert_eq!(b.spec.user_id, "ann");
    assert_eq!(
        b.metadata.labels.as_ref().unwrap()[RESOURCE_LABEL],
        "custom"
    );
}

#[test]
fn booking_update_keeps_the_original_user_and_moves_our_label() {
    let mut old = full_booking(ok_booking());
    default_booking(&mut old, None, "x");
    let mut new = old.clone();
    new.spec.user_id = String::new();
    new.spec.resource_name = "ec2.web".into();
    let filled = default_booking(&mut new, Some(&old), "bob");
    assert_eq!(
        new.spec.user_id, "ann",
        "the updater does not take the booking over"
    );
    assert_eq!(
        new.metadata.labels.as_ref().unwrap()[RESOURCE_LABEL],
        "ec2.web"
    );
    assert_eq!(filled.len(), 2);
    // A label someone wrote by hand does not follow.
    let mut hand = old.clone();
    hand.metadata.labels = Some([(RESOURCE_LABEL.to_owned(), "mine".to_owned())].into());
    let mut moved = hand.clone();
    moved.spec.resource_name = "ec2.web".into();
    assert!(default_booking(&mut moved, Some(&hand), "bob").is_empty());
    assert_eq!(
        moved.metadata.labels.as_ref().unwrap()[RESOURCE_LABEL],
        "mine"
    );
}

#[test]
fn anonymous_requests_get_no_user() {
    let mut b = full_booking(BookingSpec {
        user_id: String::new(),
        ..ok_booking()
    });
    default_booking(&mut b, None, "");
    assert!(b.spec.user_id.is_empty());
    assert!(validate_booking(&b.spec, &Policy::default(), now()).is_err());
}

#[test]
fn label_values() {
    assert_eq!(resource_label_value("ec2.analytics"), "ec2.analytics");
    let long = format!("rds.{}", "a".repeat(100));
    let v = resource_label_value(&long);
    assert!(
        is_label_value(&v) && v.len() <= MAX_LABEL_VALUE_LEN && v.starts_with("rds.aaa"),
        "{v}"
    );
    assert_eq!(v, resource_label_value(&long), "stable");
    let other = format!("rds.{}b", "a".repeat(100));
    assert_ne!(
        v,
        resource_label_value(&other),
        "distinct names, distinct values"
    );
    let exactly = "a".repeat(63);
    assert_eq!(resource_label_value(&exactly), exactly);
    let ends_badly = format!("{}-.{}", "a".repeat(51), "b".repeat(30));
    assert!(is_label_value(&resource_label_value(&ends_badly)));
    assert!(is_label_value(&resource_label_value("...")));
    assert!(!is_label_value("-a") && !is_label_value("a-") && !is_label_value("a b"));
}

// === BookingScheduler ===

#[test]
fn scheduler_table() {
    let cases: Vec<(&str, BookingSchedulerSpec, Expect)> = vec![
        ("original sample", scheduler("0 * * * *", 20), None),
        (
            "duration equal to the interval",
            scheduler("*/10 * * * *", 10),
            None,
        ),
        (
            "duration longer than the interval (case 12)",
            scheduler("*/10 * * * *", 15),
            Some(("spec.duration", &["duration", "15", "10m", "*/10 * * * *"])),
        ),
        (
            "bad minute (case 11)",
            scheduler("61 * * * *", 20),
            Some(("spec.schedule", &["61 * * * *"])),
        ),
        (
            "four fields",
            scheduler("0 * * *", 20),
            Some(("spec.schedule", &["0 * * *", "5 fields"])),
        ),
        ("macro", scheduler("@daily", 60), None),
        (
            "daily too long",
            scheduler("@daily", 1441),
            Some(("spec.duration", &["1d"])),
        ),
        (
            "weekdays at 8: one day apart",
            scheduler("0 8 * * 1-5", 24 * 60),
            None,
        ),
        (
            "irregular list",
            scheduler("0,50 * * * *", 15),
            Some(("spec.duration", &["10m"])),
        ),
        (
            "zero duration",
            scheduler("0 * * * *", 0),
            Some(("spec.duration", &["at least 1"])),
        ),
        (
            "bad zone",
            BookingSchedulerSpec {
                time_zone: Some("Mars/Olympus".into()),
                ..scheduler("0 * * * *", 20)
            },
            Some(("spec.timeZone", &["Mars/Olympus", "IANA"])),
        ),
        (
            "good zone",
            BookingSchedulerSpec {
                time_zone: Some("Europe/Berlin".into()),
                ..scheduler("30 2 * * *", 60)
            },
            None,
        ),
        (
            "negative deadline",
            BookingSchedulerSpec {
                starting_deadline_seconds: Some(-1),
                ..scheduler("0 * * * *", 20)
            },
            Some(("spec.startingDeadlineSeconds", &["-1"])),
        ),
        (
            "template without user",
            BookingSchedulerSpec {
                booking_template: BookingTemplate {
                    user_id: "".into(),
                    ..scheduler("0 * * * *", 1).booking_template
                },
                ..scheduler("0 * * * *", 20)
            },
            Some(("spec.bookingTemplate.user_id", &["user_id"])),
        ),
        (
            "template bad resource",
            BookingSchedulerSpec {
                booking_template: BookingTemplate {
                    resource_name: "A_B".into(),
                    ..scheduler("0 * * * *", 1).booking_template
                },
                ..scheduler("0 * * * *", 20)
            },
            Some(("spec.bookingTemplate.resource_name", &["A_B"])),
        ),
        (
            "template bad notification",
            BookingSchedulerSpec {
                booking_template: BookingTemplate {
                    notifications: vec![Notification {
                        type_: "sms".into(),
                        recipient: "1".into(),
                        lead_minutes: None,
                        events: vec![],
                        recipient_from: None,
                    }],
                    ..scheduler("0 * * * *", 1).booking_template
                },
                ..scheduler("0 * * * *", 20)
            },
            Some(("spec.bookingTemplate.notifications[0].type", &["sms"])),
        ),
        (
            "template unknown notification event",
            BookingSchedulerSpec {
                booking_template: BookingTemplate {
                    notifications: vec![Notification {
                        events: vec!["finished".into()],
                        ..email("ann@example.com")
                    }],
                    ..scheduler("0 * * * *", 1).booking_template
                },
                ..scheduler("0 * * * *", 20)
            },
            Some((
                "spec.bookingTemplate.notifications[0].events[0]",
                &["finished", "started"],
            )),
        ),
    ];
    for (what, spec, want) in cases {
        let got = validate_booking_scheduler(&spec, &Policy::default(), now());
        match (want, got) {
            (None, Ok(_)) => {}
            (Some((field, subs)), Err(e)) => {
                assert_eq!(e.fields()[0], field, "{what}: {e}");
                let msg = e.to_string().to_lowercase();
                for s in subs {
                    assert!(
                        msg.contains(&s.to_lowercase()),
                        "{what}: {msg:?} lacks {s:?}"
                    );
                }
            }
            (want, got) => panic!("{what}: wanted {want:?}, got {got:?}"),
        }
    }
}

#[test]
fn cron_errors_quote_the_expression_as_written_on_one_line() {
    let e = denied(validate_booking_scheduler(
        &scheduler("61 * * * *", 20),
        &Policy::default(),
        now(),
    ));
    let m = e.to_string();
    assert!(m.contains("\"61 * * * *\""), "{m}");
    assert!(
        !m.contains('\n') && !m.contains('^') && !m.contains("0 61"),
        "{m}"
    );
    assert!(m.contains("61"), "{m}");
}

#[test]
fn cron_range_errors_state_the_largest_value_allowed() {
    for (expr, want) in [
        ("60 * * * *", "must be at most 59"),
        ("* 24 * * *", "must be at most 23"),
    ] {
        let m = denied(validate_booking_scheduler(
            &scheduler(expr, 20),
            &Policy::default(),
            now(),
        ))
        .to_string();
        assert!(m.contains(want) && !m.contains("less than"), "{expr}: {m}");
    }
    assert!(
        validate_booking_scheduler(&scheduler("59 23 * * *", 20), &Policy::default(), now())
            .is_ok()
    );
}

#[test]
fn scheduler_maximum_duration_policy() {
    let policy = Policy {
        max_booking_duration: Some(Duration::minutes(30)),
    };
    let e = denied(validate_booking_scheduler(
        &scheduler("0 * * * *", 45),
        &policy,
        now(),
    ));
    assert_eq!(e.fields(), ["spec.duration"]);
}

#[test]
fn scheduler_defaults() {
    let mut s = BookingScheduler::new(
        "s",
        BookingSchedulerSpec {
            booking_template: BookingTemplate {
                user_id: String::new(),
                notifications: vec![email("a@b.example")],
                ..scheduler("0 * * * *", 20).booking_template
            },
            ..scheduler("0 * * * *", 20)
        },
    );
    let filled = default_booking_scheduler(&mut s, None, "carol");
    assert_eq!(s.spec.time_zone.as_deref(), Some("UTC"));
    assert_eq!(s.spec.booking_template.user_id, "carol");
    assert_eq!(
        s.spec.booking_template.notifications[0].lead_minutes,
        Some(20)
    );
    assert_eq!(s.spec.suspend, Some(false), "suspend is filled as false");
    assert_eq!(filled.len(), 4);
    assert!(
        default_booking_scheduler(&mut s, None, "dave").is_empty(),
        "idempotent"
    );
    let mut berlin = BookingScheduler::new(
        "s",
        BookingSchedulerSpec {
            time_zone: Some("Europe/Berlin".into()),
            suspend: Some(true),
            ..scheduler("0 * * * *", 20)
        },
    );
    assert!(default_booking_scheduler(&mut berlin, None, "x").is_empty());
    assert_eq!(berlin.spec.time_zone.as_deref(), Some("Europe/Berlin"));
    assert_eq!(berlin.spec.suspend, Some(true), "a given suspend is kept");
}

// === Resource and ResourceMonitor ===

fn resource(type_: &str, tag: &str) -> ResourceSpec {
    ResourceSpec {
        type_: type_.into(),
        tag: tag.into(),
        ..Default::default()
    }
}

#[test]
fn resource_table() {
    let cases: Vec<(&str, ResourceSpec, Expect)> = vec![
        ("ec2", resource("ec2", "analytics"), None),
        ("rds", resource("rds", "analytics"), None),
        (
            "original sample with empty manual booking",
            ResourceSpec {
                booked_by: Some("".into()),
                booked_until: Some("".into()),
                ..resource("ec2", "analytics")
            },
            None,
        ),
        (
            "unknown type lists the supported ones (case 14)",
            resource("gce", "analytics"),
            Some(("spec.type", &["gce", "ec2", "rds"])),
        ),
        (
            "upper-case type",
            resource("EC2", "analytics"),
            Some(("spec.type", &["EC2"])),
        ),
        (
            "empty tag",
            resource("ec2", ""),
            Some(("spec.tag", &["tag"])),
        ),
        (
            "long tag",
            resource("ec2", &"t".repeat(257)),
            Some(("spec.tag", &["256"])),
        ),
        (
            "good region",
            ResourceSpec {
                region: Some("eu-central-1".into()),
                ..resource("ec2", "a")
            },
            None,
        ),
        (
            "gov region",
            ResourceSpec {
                region: Some("us-gov-west-1".into()),
                ..resource("ec2", "a")
            },
            None,
        ),
        (
            "bad region",
            ResourceSpec {
                region: Some("Frankfurt".into()),
                ..resource("ec2", "a")
            },
            Some(("spec.region", &["Frankfurt", "eu-central-1"])),
        ),
        (
            "bad booked_until",
            ResourceSpec {
                booked_until: Some("noon".into()),
                ..resource("ec2", "a")
            },
            Some(("spec.booked_until", &["noon"])),
        ),
    ];
    for (what, spec, want) in cases {
        match (want, validate_resource(&spec)) {
            (None, Ok(_)) => {}
            (Some((field, subs)), Err(e)) => {
                assert_eq!(e.fields()[0], field, "{what}: {e}");
                for s in subs {
                    assert!(e.to_string().contains(s), "{what}: {e} lacks {s:?}");
                }
            }
            (want, got) => panic!("{what}: wanted {want:?}, got {got:?}"),
        }
    }
    let w = validate_resource(&ResourceSpec {
        hibernate: Some(true),
        ..resource("rds", "a")
    })
    .unwrap();
    assert_eq!(w.len(), 1);
}

#[test]
fn resource_monitor_table() {
    assert!(
        validate_resource_monitor(&ResourceMonitorSpec {
            type_: "ec2".into(),
            ..Default::default()
        })
        .is_ok()
    );
    let e = denied(validate_resource_monitor(&ResourceMonitorSpec {
        type_: "azure".into(),
        ..Default::default()
    }));
    assert!(e.to_string().contains("ec2, rds"), "{e}");
    let e = denied(validate_resource_monitor(&ResourceMonitorSpec {
        type_: "rds".into(),
        regions: vec!["eu-west-1".into(), "moon".into()],
        ..Default::default()
    }));
    assert_eq!(e.fields(), ["spec.regions[1]"]);
    let mut r = Resource::new("r", resource("ec2", "a"));
    let before = r.clone();
    assert!(default_resource(&mut r).is_empty());
    assert_eq!(
        serde_json::to_value(&r).unwrap(),
        serde_json::to_value(&before).unwrap()
    );
    let mut m = ResourceMonitor::new(
        "m",
        ResourceMonitorSpec {
            type_: "ec2".into(),
            ..Default::default()
        },
    );
    assert!(default_resource_monitor(&mut m).is_empty());
}

#[test]
fn object_names_and_regions() {
    for ok in ["ec2.analytics", "a", "a-b.c-d", &"a".repeat(253)] {
        assert!(is_object_name(ok), "{ok}");
    }
    for bad in ["", "A", "-a", "a-", "a_b", "a b", &"a".repeat(254)] {
        assert!(!is_object_name(bad), "{bad}");
    }
    for ok in [
        "eu-central-1",
        "us-east-1",
        "ap-southeast-2",
        "us-gov-west-1",
    ] {
        assert!(is_region(ok), "{ok}");
    }
    for bad in [
        "",
        "eu",
        "eu-1",
        "EU-central-1",
        "eu-central-",
        "eu--1",
        "europe-central-1",
    ] {
        assert!(!is_region(bad), "{bad}");
    }
}

#[test]
fn original_samples_are_valid() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/reference/samples");
    let read =
        |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
    let b: Booking = serde_yaml::from_str(&read("manager_v1_booking.yaml")).unwrap();
    assert_eq!(
        validate_booking(&b.spec, &Policy::default(), now())
            .unwrap()
            .len(),
        1,
        "past warning"
    );
    let s: BookingScheduler =
        serde_yaml::from_str(&read("manager_v1_bookingscheduler.yaml")).unwrap();
    assert!(validate_booking_scheduler(&s.spec, &Policy::default(), now()).is_ok());
    let r: Resource = serde_yaml::from_str(&read("manager_v1_resource.yaml")).unwrap();
    assert!(validate_resource(&r.spec).is_ok());
    let m: ResourceMonitor =
        serde_yaml::from_str(&read("manager_v1_resourcemonitor.yaml")).unwrap();
    assert!(validate_resource_monitor(&m.spec).is_ok());
}

#[test]
fn scheduler_validation_is_bounded_for_frequent_and_rare_schedules() {
    for (schedule, duration) in [
        ("* * * * *", 1),
        ("0 0 29 2 *", 60),
        ("*/5 * * * *", 5),
        ("30 2 * * 0", 60),
    ] {
        let started = std::time::Instant::now();
        let outcome =
            validate_booking_scheduler(&scheduler(schedule, duration), &Policy::default(), now());
        let elapsed = started.elapsed();
        assert!(outcome.is_ok(), "{schedule}: {outcome:?}");
        eprintln!("{schedule:>12} duration {duration}: {elapsed:?}");
        assert!(
            elapsed < std::time::Duration::from_secs(2),
            "{schedule}: {elapsed:?}"
        );
    }
}

#[test]
fn the_requester_is_recorded_on_create_and_can_never_change() {
    let mut b = full_booking(ok_booking());
    default_booking(&mut b, None, "carol");
    assert_eq!(requested_by(&b.metadata), Some("carol"));
    // An update never records its own requester: one that leaves the annotation out gets the
    // stored creator back; a stored booking without one stays without.
    let mut later = full_booking(ok_booking());
    default_booking(&mut later, Some(&b), "dave");
    assert_eq!(requested_by(&later.metadata), Some("carol"));
    let mut unannotated = full_booking(ok_booking());
    default_booking(&mut unannotated, Some(&full_booking(ok_booking())), "dave");
    assert_eq!(requested_by(&unannotated.metadata), None);
    // A create may carry only the requester; an update may not set, change or remove it.
    assert!(validate_requested_by(Some("carol"), None, "carol").is_ok());
    assert!(validate_requested_by(None, None, "carol").is_ok());
    let e = validate_requested_by(Some("mallory"), None, "carol").unwrap_err();
    assert_eq!(
        e.fields(),
        ["metadata.annotations[manager.kotaico.de/requested-by]"]
    );
    assert!(
        e.to_string()
            .contains("\"mallory\" is not the user making this request (\"carol\")"),
        "{e}"
    );
    assert!(validate_requested_by(Some("carol"), Some(Some("carol")), "dave").is_ok());
    let e = validate_requested_by(Some("dave"), Some(Some("carol")), "dave").unwrap_err();
    assert!(e.to_string().contains("created by \"carol\""), "{e}");
    let e = validate_requested_by(None, Some(Some("carol")), "carol").unwrap_err();
    assert!(e.to_string().contains("sets it to nothing"), "{e}");
    assert!(validate_requested_by(Some("x"), Some(None), "x").is_err());
}

#[test]
fn notifications_and_ids_are_bounded_and_free_of_control_characters() {
    let policy = Policy::default();
    let now = now();
    let mail = email;
    let spec = |user: &str, notifications: Vec<Notification>| BookingSpec {
        user_id: user.into(),
        notifications,
        ..ok_booking()
    };
    let denied = |s: &BookingSpec| denied(validate_booking(s, &policy, now));
    let e = denied(&spec(
        "ann",
        vec![mail("a@example.com"); MAX_NOTIFICATIONS + 1],
    ));
    assert_eq!(e.fields(), ["spec.notifications"]);
    assert!(
        e.to_string()
            .contains("11 notifications is more than the 10"),
        "{e}"
    );
    assert!(
        validate_booking(
            &spec("ann", vec![mail("a@example.com"); MAX_NOTIFICATIONS]),
            &policy,
            now
        )
        .is_ok()
    );
    let e = denied(&spec("ann\nInjected: header", vec![]));
    assert_eq!(e.fields(), ["spec.user_id"]);
    assert!(
        e.to_string().contains("control character '\\n' at byte 3"),
        "{e}"
    );
    let e = denied(&spec(
        "ann",
        vec![mail("a@example.com\r\nBcc: x@example.com")],
    ));
    assert_eq!(e.fields(), ["spec.notifications[0].recipient"]);
    assert!(e.to_string().contains("control character"), "{e}");
    let long = format!(
        "https://hooks.example.com/{}",
        "a".repeat(MAX_RECIPIENT_LEN)
    );
    let e = denied(&spec(
        "ann",
        vec![Notification {
            type_: "webhook".into(),
            recipient: long,
            recipient_from: None,
            lead_minutes: None,
            events: vec![],
        }],
    ));
    assert_eq!(e.fields(), ["spec.notifications[0].recipient"]);
    assert!(e.to_string().contains("more than the 2048 allowed"), "{e}");
}
