//! End to end, notifications on state changes: the real `booking-controller` binary against the
//! run's shared control plane and moto (behind the harness's AWS fault proxy where a start must
//! fail), a real SMTP server (aiosmtpd) and a real HTTPS webhook receiver. A booking asking for
//! `started` and `stopped` gets exactly one of each at the right moment; the default sends only
//! the reminder; `failed` names the member and AWS's error; nothing is sent twice across a
//! controller restart.
//!
//! Run inside `booking-control-plane run -- …`; the binary comes from the target directory.

use std::time::Duration;

use booking_harness::process::{ManagedProcess, Readiness};
use booking_harness::proxy::{Fault, FaultProxy};
use booking_harness::smtp::{ReceivedMessage, SmtpOptions, SmtpServer};
use booking_harness::wait_for;
use booking_shared::api::{Booking, Notification, Resource};
use booking_tests::e2e::*;
use chrono::Utc;
use kube::api::{Api, PostParams};

fn email(to: &str, events: &[&str], lead: Option<u32>) -> Notification {
    Notification {
        type_: "email".into(),
        recipient: to.into(),
        recipient_from: None,
        lead_minutes: lead,
        events: events.iter().map(|e| (*e).to_owned()).collect(),
    }
}

/// The SMTP settings of a controller sending to `smtp`.
fn smtp_env(smtp: &SmtpServer) -> Vec<(&'static str, String)> {
    vec![
        ("SMTP_HOST", "127.0.0.1".into()),
        ("SMTP_PORT", smtp.port().to_string()),
        ("SMTP_SENDER", "booking@example.com".into()),
        ("SMTP_SECURITY", "none".into()),
    ]
}

async fn started(e: &Env, identity: &str, extra: &[(&str, String)]) -> ManagedProcess {
    let port = booking_harness::free_port().unwrap();
    let extra: Vec<(&str, &str)> = extra.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut c = start_controller(e, port, identity, &extra);
    c.wait_ready(
        &Readiness::Http(format!("http://127.0.0.1:{port}/readyz")),
        Duration::from_secs(60),
    )
    .await
    .expect("ready");
    c
}

/// The subjects of the mails to `to`.
fn subjects_to(smtp: &SmtpServer, to: &str) -> Vec<String> {
    smtp.messages()
        .unwrap()
        .iter()
        .filter(|m| m.rcpt_tos.iter().any(|r| r == to))
        .map(|m| m.header("Subject").unwrap_or_default())
        .collect()
}

fn mails_to(smtp: &SmtpServer, to: &str) -> Vec<ReceivedMessage> {
    smtp.messages()
        .unwrap()
        .into_iter()
        .filter(|m| m.rcpt_tos.iter().any(|r| r == to))
        .collect()
}

/// A booking of a real group asking for `started` and `stopped` (by mail and by webhook) gets
/// one of each: `started` once every instance runs, `stopped` once after the end when every
/// instance is stopped. A notification without `events` sends only its reminder. A controller
/// restart after the end sends nothing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn started_and_stopped_are_sent_once_each_and_the_default_is_the_reminder_alone() {
    use booking_harness::tls::TestCa;
    use booking_harness::webhook_receiver::WebhookReceiver;

    let e = env("notify-state-changes").await;
    let smtp = SmtpServer::start(&e.dir, SmtpOptions::default())
        .await
        .expect("SMTP server");
    let ca = TestCa::new(&e.dir, "hooks").unwrap();
    let receiver = WebhookReceiver::start(&ca, vec![]).await.expect("receiver");
    let home = e.moto.ec2();
    let ids = stopped_group(&home, 2, "states").await;
    let mut env_vars = smtp_env(&smtp);
    env_vars.push(("NOTIFICATION_CA_FILE", ca.cert_path().display().to_string()));
    let mut c = started(&e, "notify-a", &env_vars).await;
    Api::<Resource>::namespaced(e.client.clone(), &e.ns)
        .create(
            &PostParams::default(),
            &resource("ec2.states", "ec2", "states", None),
        )
        .await
        .unwrap();
    let bookings: Api<Booking> = Api::namespaced(e.client.clone(), &e.ns);
    let now = Utc::now();
    let end = now + chrono::Duration::seconds(75);
    let mut b = booking("states", "ec2.states", now, end);
    b.spec.notifications = vec![
        email("ann@example.com", &["started", "stopped"], None),
        // The original's notification: a reminder one minute before the end, nothing else.
        email("bob@example.com", &[], Some(1)),
        Notification {
            type_: "webhook".into(),
            recipient: format!("https://localhost:{}/hooks/states", receiver.port()),
            recipient_from: None,
            lead_minutes: None,
            events: vec!["started".into(), "stopped".into()],
        },
    ];
    // As the webhook records its creator (this environment runs the controller alone): the
    // mails name it, although the controller's cache keeps no annotation.
    b.metadata.annotations = Some(
        [(
            booking_shared::validation::REQUESTED_BY_ANNOTATION.to_owned(),
            "system:serviceaccount:ci:deployer".to_owned(),
        )]
        .into(),
    );
    bookings.create(&PostParams::default(), &b).await.unwrap();

    wait_for("ann's started mail", Duration::from_secs(60), || async {
        let s = subjects_to(&smtp, "ann@example.com");
        if s.iter().any(|s| s.contains("started")) {
            Ok(())
        } else {
            Err(format!("{s:?}"))
        }
    })
    .await;
    // Sent once every instance runs, while the booking lasts.
    all_in_state(&home, &ids, "running")
        .await
        .expect("the group runs when `started` is sent");
    let mail = mails_to(&smtp, "ann@example.com").remove(0);
    let text = mail.text();
    assert!(
        text.contains("ec2.states") && text.contains("user-of-states"),
        "names the Resource and the holder: {text}"
    );
    assert!(
        text.contains("It was created by system:serviceaccount:ci:deployer."),
        "names who created the booking: {text}"
    );
    assert!(Utc::now() < end, "sent during the booking");

    wait_for("bob's reminder", Duration::from_secs(60), || async {
        match subjects_to(&smtp, "bob@example.com").as_slice() {
            [] => Err("none yet".into()),
            _ => Ok(()),
        }
    })
    .await;
    wait_for("ann's stopped mail", Duration::from_secs(120), || async {
        let s = subjects_to(&smtp, "ann@example.com");
        if s.iter().any(|s| s.contains("stopped")) {
            Ok(())
        } else {
            Err(format!("{s:?}"))
        }
    })
    .await;
    assert!(Utc::now() >= end, "`stopped` is sent after the end");
    all_in_state(&home, &ids, "stopped")
        .await
        .expect("the group is stopped when `stopped` is sent");
    wait_for("both webhook posts", Duration::from_secs(30), || async {
        match receiver.received().len() {
            2 => Ok(()),
            n => Err(format!("{n} posts")),
        }
    })
    .await;

    // A restart after the end sends nothing again.
    c.stop().expect("stop");
    let mut c = started(&e, "notify-b", &env_vars).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let ann = subjects_to(&smtp, "ann@example.com");
    assert_eq!(ann.len(), 2, "one started, one stopped: {ann:?}");
    assert!(ann.iter().any(|s| s.contains("started")), "{ann:?}");
    assert!(ann.iter().any(|s| s.contains("stopped")), "{ann:?}");
    let bob = subjects_to(&smtp, "bob@example.com");
    assert_eq!(bob.len(), 1, "the default is the reminder alone: {bob:?}");
    assert!(bob[0].contains("ends in"), "{bob:?}");
    let posts: Vec<serde_json::Value> = receiver
        .received()
        .iter()
        .map(|r| serde_json::from_str(&r.body).unwrap())
        .collect();
    let posted: Vec<&str> = posts.iter().filter_map(|p| p["event"].as_str()).collect();
    assert_eq!(posted, ["started", "stopped"], "{posts:?}");
    let status = bookings.get("states").await.unwrap().status.unwrap();
    for key in [
        "started:0:email:ann@example.com",
        "stopped:0:email:ann@example.com",
        "1:email:bob@example.com",
    ] {
        assert!(
            status.notifications_sent.iter().any(|k| k == key),
            "{key} in {:?}",
            status.notifications_sent
        );
    }
    assert!(status.held_at.is_some(), "{status:?}");
    c.stop().expect("stop");
}

/// A start AWS refuses for one member sends one `failed` mail naming that member and AWS's
/// error code and message; the start succeeds after the backoff and `started` follows; a
/// controller restart sends neither again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_start_names_the_member_and_the_aws_error_once() {
    let e = env("notify-failed").await;
    let proxy = FaultProxy::start(&e.moto.endpoint_url())
        .await
        .expect("proxy");
    let smtp = SmtpServer::start(&e.dir, SmtpOptions::default())
        .await
        .expect("SMTP server");
    let home = e.moto.ec2();
    let ids = stopped_group(&home, 2, "flaky").await;
    let bad = ids[1].clone();
    proxy.inject(Fault::incorrect_instance_state("StartInstances", &bad).times(2));
    let mut env_vars = smtp_env(&smtp);
    env_vars.push(("AWS_ENDPOINT_URL", proxy.endpoint_url()));
    let mut c = started(&e, "notify-a", &env_vars).await;
    Api::<Resource>::namespaced(e.client.clone(), &e.ns)
        .create(
            &PostParams::default(),
            &resource("ec2.flaky", "ec2", "flaky", None),
        )
        .await
        .unwrap();
    let bookings: Api<Booking> = Api::namespaced(e.client.clone(), &e.ns);
    let now = Utc::now();
    let mut b = booking("flaky", "ec2.flaky", now, now + chrono::Duration::hours(1));
    b.spec.notifications = vec![email("ann@example.com", &["failed", "started"], None)];
    bookings.create(&PostParams::default(), &b).await.unwrap();

    wait_for("the failed mail", Duration::from_secs(60), || async {
        let s = subjects_to(&smtp, "ann@example.com");
        if s.iter().any(|s| s.contains("did not take")) {
            Ok(())
        } else {
            Err(format!("{s:?}"))
        }
    })
    .await;
    let text = mails_to(&smtp, "ann@example.com").remove(0).text();
    assert!(text.contains(&bad), "names the member {bad}: {text}");
    assert!(
        text.contains("IncorrectInstanceState") && text.contains("is not in a state"),
        "AWS's code and message: {text}"
    );
    assert!(!text.contains(&ids[0]), "only the failing member: {text}");
    wait_for("the started mail", Duration::from_secs(60), || async {
        let s = subjects_to(&smtp, "ann@example.com");
        if s.iter().any(|s| s.contains("started")) {
            Ok(())
        } else {
            Err(format!("{s:?}"))
        }
    })
    .await;
    all_in_state(&home, &ids, "running")
        .await
        .expect("the group runs when `started` is sent");

    c.stop().expect("stop");
    let mut c = started(&e, "notify-b", &env_vars).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let s = subjects_to(&smtp, "ann@example.com");
    assert_eq!(s.len(), 2, "one failed, one started, no duplicate: {s:?}");
    c.stop().expect("stop");
}

/// A booking followed at once by another hands the group over without a stop: its `stopped`
/// is sent after its end naming the next booking, while the instances keep running; the next
/// booking, which has not ended, gets no `stopped`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_names_the_next_booking_when_the_group_is_handed_over() {
    let e = env("notify-handover").await;
    let smtp = SmtpServer::start(&e.dir, SmtpOptions::default())
        .await
        .expect("SMTP server");
    let home = e.moto.ec2();
    let ids = stopped_group(&home, 1, "relay").await;
    let mut c = started(&e, "notify-a", &smtp_env(&smtp)).await;
    Api::<Resource>::namespaced(e.client.clone(), &e.ns)
        .create(
            &PostParams::default(),
            &resource("ec2.relay", "ec2", "relay", None),
        )
        .await
        .unwrap();
    let bookings: Api<Booking> = Api::namespaced(e.client.clone(), &e.ns);
    let now = Utc::now();
    let handover = now + chrono::Duration::seconds(40);
    let mut first = booking("first", "ec2.relay", now, handover);
    first.spec.notifications = vec![email("ann@example.com", &["stopped"], None)];
    let mut second = booking(
        "second",
        "ec2.relay",
        handover,
        handover + chrono::Duration::hours(1),
    );
    second.spec.notifications = vec![email("bob@example.com", &["stopped"], None)];
    for b in [&first, &second] {
        bookings.create(&PostParams::default(), b).await.unwrap();
    }
    wait_for("the group runs", Duration::from_secs(30), || {
        all_in_state(&home, &ids, "running")
    })
    .await;
    wait_for("ann's stopped mail", Duration::from_secs(90), || async {
        match subjects_to(&smtp, "ann@example.com").as_slice() {
            [] => Err("none yet".into()),
            _ => Ok(()),
        }
    })
    .await;
    assert!(Utc::now() >= handover, "sent after the end");
    let text = mails_to(&smtp, "ann@example.com").remove(0).text();
    assert!(
        text.contains("handed straight to booking second"),
        "names the next booking: {text}"
    );
    all_in_state(&home, &ids, "running")
        .await
        .expect("the instances were not stopped");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(subjects_to(&smtp, "ann@example.com").len(), 1);
    assert!(
        subjects_to(&smtp, "bob@example.com").is_empty(),
        "the next booking has not ended"
    );
    c.stop().expect("stop");
}

/// A stop AWS refuses after the booking's end sends one `failed` naming the member and AWS's
/// error; once the retried stop takes, `stopped` follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_stop_after_the_end_is_reported_then_stopped_follows() {
    let e = env("notify-failed-stop").await;
    let proxy = FaultProxy::start(&e.moto.endpoint_url())
        .await
        .expect("proxy");
    let smtp = SmtpServer::start(&e.dir, SmtpOptions::default())
        .await
        .expect("SMTP server");
    let home = e.moto.ec2();
    let ids = stopped_group(&home, 2, "sticky").await;
    let bad = ids[0].clone();
    proxy.inject(Fault::incorrect_instance_state("StopInstances", &bad).times(2));
    let mut env_vars = smtp_env(&smtp);
    env_vars.push(("AWS_ENDPOINT_URL", proxy.endpoint_url()));
    let mut c = started(&e, "notify-a", &env_vars).await;
    Api::<Resource>::namespaced(e.client.clone(), &e.ns)
        .create(
            &PostParams::default(),
            &resource("ec2.sticky", "ec2", "sticky", None),
        )
        .await
        .unwrap();
    let bookings: Api<Booking> = Api::namespaced(e.client.clone(), &e.ns);
    let now = Utc::now();
    let end = now + chrono::Duration::seconds(30);
    let mut b = booking("sticky", "ec2.sticky", now, end);
    b.spec.notifications = vec![email("ann@example.com", &["failed", "stopped"], None)];
    bookings.create(&PostParams::default(), &b).await.unwrap();
    wait_for("the group runs", Duration::from_secs(30), || {
        all_in_state(&home, &ids, "running")
    })
    .await;
    wait_for("the failed mail", Duration::from_secs(90), || async {
        let s = subjects_to(&smtp, "ann@example.com");
        if s.iter().any(|s| s.contains("did not take")) {
            Ok(())
        } else {
            Err(format!("{s:?}"))
        }
    })
    .await;
    assert!(Utc::now() >= end, "the stop fails after the end");
    let text = mails_to(&smtp, "ann@example.com").remove(0).text();
    assert!(text.contains("a stop did not take"), "{text}");
    assert!(
        text.contains(&bad) && text.contains("IncorrectInstanceState"),
        "names the member and AWS's error: {text}"
    );
    wait_for("the stopped mail", Duration::from_secs(90), || async {
        let s = subjects_to(&smtp, "ann@example.com");
        if s.iter().any(|s| s.contains("stopped")) {
            Ok(())
        } else {
            Err(format!("{s:?}"))
        }
    })
    .await;
    all_in_state(&home, &ids, "stopped")
        .await
        .expect("the group is stopped when `stopped` is sent");
    assert_eq!(subjects_to(&smtp, "ann@example.com").len(), 2);
    c.stop().expect("stop");
}
