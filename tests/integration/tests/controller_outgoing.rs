//! End to end, the controller's outgoing calls under faults: the real `booking-controller`
//! binary against the run's shared control plane and moto behind the harness's AWS proxy
//! ([`booking_harness::proxy`]), which throttles and stalls chosen calls.
//!
//! Run inside `booking-control-plane run -- …`; the binary comes from the target directory.

use std::collections::BTreeSet;
use std::time::Duration;

use booking_harness::aws_query::Service;
use booking_harness::process::Readiness;
use booking_harness::proxy::{Fault, FaultProxy};
use booking_shared::api::{Booking, Resource};
use booking_tests::e2e::*;
use chrono::Utc;
use kube::api::{Api, PostParams};

/// A throttled batch is retried whole (the SDK's backoff, then the plan's), never split into
/// one call per member; an attempt that stalls is abandoned at the attempt timeout and retried;
/// the group ends running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_or_stalled_batch_is_retried_whole_under_timeouts() {
    let e = env("outgoing-aws-faults").await;
    let proxy = FaultProxy::start(&e.moto.endpoint_url())
        .await
        .expect("proxy");
    let home = e.moto.ec2();
    let ids = stopped_group(&home, 3, "burst").await;
    // Both attempts of the first call are throttled (the SDK gives up after 2 here); the
    // next call stalls for far longer than an attempt may take.
    let stall = Duration::from_secs(20);
    proxy.inject(Fault::throttle(Service::Ec2, "StartInstances").times(2));
    proxy.inject(Fault::stall(Service::Ec2, "StartInstances", stall));

    let port = booking_harness::free_port().unwrap();
    let endpoint = proxy.endpoint_url();
    let mut c = start_controller(
        &e,
        port,
        "replica-a",
        &[
            ("AWS_ENDPOINT_URL", endpoint.as_str()),
            ("AWS_MAX_ATTEMPTS", "2"),
            ("AWS_ATTEMPT_TIMEOUT_SECONDS", "2"),
            ("AWS_CONNECT_TIMEOUT_SECONDS", "1"),
            ("AWS_OPERATION_TIMEOUT_SECONDS", "10"),
        ],
    );
    c.wait_ready(
        &Readiness::Http(format!("http://127.0.0.1:{port}/readyz")),
        Duration::from_secs(30),
    )
    .await
    .expect("ready");
    Api::<Resource>::namespaced(e.client.clone(), &e.ns)
        .create(
            &PostParams::default(),
            &resource("ec2.burst", "ec2", "burst", None),
        )
        .await
        .unwrap();
    let now = Utc::now();
    Api::<Booking>::namespaced(e.client.clone(), &e.ns)
        .create(
            &PostParams::default(),
            &booking(
                "burst-now",
                "ec2.burst",
                now,
                now + chrono::Duration::hours(1),
            ),
        )
        .await
        .unwrap();
    wait_for("the group runs", Duration::from_secs(40), || {
        all_in_state(&home, &ids, "running")
    })
    .await;

    let starts: Vec<_> = proxy
        .requests()
        .into_iter()
        .filter(|r| r.action.as_deref() == Some("StartInstances"))
        .collect();
    let group: BTreeSet<&str> = ids.iter().map(String::as_str).collect();
    for r in &starts {
        let named: BTreeSet<&str> = r.resource_ids.iter().map(String::as_str).collect();
        assert_eq!(
            named, group,
            "every call carries the whole batch: {starts:#?}"
        );
    }
    let throttled = starts
        .iter()
        .filter(|r| r.injected.as_deref() == Some("RequestLimitExceeded"))
        .count();
    assert_eq!(throttled, 2, "{starts:#?}");
    let stalled = starts
        .iter()
        .position(|r| {
            r.injected
                .as_deref()
                .is_some_and(|i| i.starts_with("stalled"))
        })
        .expect("the stalled call");
    let retry = starts
        .get(stalled + 1)
        .unwrap_or_else(|| panic!("a call after the stalled one: {starts:#?}"));
    let gap = retry.since_start - starts[stalled].since_start;
    assert!(
        gap >= Duration::from_millis(1900) && gap < Duration::from_secs(8),
        "the stalled attempt abandoned at the 2 s attempt timeout, then retried: {gap:?}"
    );
    assert_eq!(retry.status, 200, "{retry:?}");
    // The throttled batch came back after the plan's backoff, not at once.
    let first_ok = starts.iter().position(|r| r.injected.is_none()).unwrap();
    assert!(first_ok > stalled, "{starts:#?}");
    c.stop().expect("stop");
}

/// A pruning monitor deletes the Resource of a vanished group only after the group has been
/// missing from `PRUNE_AFTER_LISTINGS` consecutive complete listings, and never while a
/// booking holds it; a Resource naming a region outside `ALLOWED_REGIONS` gets a condition
/// naming the region and the list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monitor_prunes_only_after_n_listings_and_never_a_held_resource() {
    use booking_harness::moto;
    use booking_shared::api::{ResourceMonitor, ResourceMonitorSpec};
    use kube::api::{DeleteParams, ObjectMeta};

    let e = env("outgoing-prune").await;
    let home = e.moto.ec2();
    let managed = |tag: &'static str| {
        [
            ("resource-booking/managed", "true"),
            ("resource-booking/application", tag),
        ]
    };
    let held_ids = moto::seed_ec2_instances(&home, 2, &managed("held"))
        .await
        .unwrap();
    let free_ids = moto::seed_ec2_instances(&home, 1, &managed("free"))
        .await
        .unwrap();
    let port = booking_harness::free_port().unwrap();
    let allowed = moto::REGION;
    let mut c = start_controller(
        &e,
        port,
        "replica-a",
        &[("PRUNE_AFTER_LISTINGS", "3"), ("ALLOWED_REGIONS", allowed)],
    );
    let resources: Api<Resource> = Api::namespaced(e.client.clone(), &e.ns);
    let monitors: Api<ResourceMonitor> = Api::namespaced(e.client.clone(), &e.ns);
    let bookings: Api<Booking> = Api::namespaced(e.client.clone(), &e.ns);
    let pp = PostParams::default();
    monitors
        .create(
            &pp,
            &ResourceMonitor {
                metadata: ObjectMeta {
                    name: Some("scan".into()),
                    ..Default::default()
                },
                spec: ResourceMonitorSpec {
                    type_: "ec2".into(),
                    prune: Some(true),
                    ..Default::default()
                },
                status: None,
            },
        )
        .await
        .unwrap();
    wait_for(
        "both Resources created",
        Duration::from_secs(30),
        || async {
            let held = resources.get_opt("ec2.held").await.unwrap();
            let free = resources.get_opt("ec2.free").await.unwrap();
            match (held, free) {
                (Some(_), Some(_)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let now = Utc::now();
    bookings
        .create(
            &pp,
            &booking("holds", "ec2.held", now, now + chrono::Duration::hours(1)),
        )
        .await
        .unwrap();
    // Both groups vanish from the listings: their instances lose the group tag (as when a team
    // retags its machines; terminating them in moto races with the start and stop the
    // controller makes, which bring a terminated moto instance back).
    let all: Vec<String> = held_ids.iter().chain(&free_ids).cloned().collect();
    home.delete_tags()
        .set_resources(Some(all))
        .tags(
            aws_sdk_ec2::types::Tag::builder()
                .key("resource-booking/application")
                .build(),
        )
        .send()
        .await
        .unwrap();

    // Poll the monitor: the free group's Resource stays while its count is below 3.
    let missing = |name: &'static str| {
        let monitors = monitors.clone();
        async move {
            monitors
                .get("scan")
                .await
                .unwrap()
                .status
                .unwrap_or_default()
                .missing_listings
                .get(name)
                .copied()
                .unwrap_or(0)
        }
    };
    let mut seen_counts = std::collections::BTreeSet::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    loop {
        let count = missing("ec2.free").await;
        let present = resources.get_opt("ec2.free").await.unwrap().is_some();
        if !present {
            break;
        }
        seen_counts.insert(count);
        assert!(
            count < 3,
            "ec2.free still there at {count} missing listings"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "ec2.free never pruned: {seen_counts:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        seen_counts.contains(&1) && seen_counts.contains(&2),
        "kept through the first two listings that missed it: {seen_counts:?}"
    );
    // The held group is past the threshold, yet its Resource stays while the booking lasts.
    wait_for(
        "ec2.held missing from 4 listings",
        Duration::from_secs(30),
        || async {
            match missing("ec2.held").await {
                n if n >= 4 => Ok(()),
                n => Err(format!("{n} listings")),
            }
        },
    )
    .await;
    assert!(
        resources.get_opt("ec2.held").await.unwrap().is_some(),
        "never pruned while a booking holds it"
    );
    bookings
        .delete("holds", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "ec2.held pruned once free",
        Duration::from_secs(30),
        || async {
            match resources.get_opt("ec2.held").await.unwrap() {
                None => Ok(()),
                Some(_) => Err("still there".into()),
            }
        },
    )
    .await;

    // A region outside ALLOWED_REGIONS: refused with a condition, nothing else.
    resources
        .create(&pp, &resource("ec2.far", "ec2", "far", Some(OTHER_REGION)))
        .await
        .unwrap();
    wait_for("the region refused", Duration::from_secs(20), || async {
        let s = resources
            .get("ec2.far")
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        match s.conditions.iter().find(|c| c.type_ == "Ready") {
            Some(c)
                if c.status == "False"
                    && c.reason == "RegionNotAllowed"
                    && c.message.contains(OTHER_REGION)
                    && c.message.contains(allowed) =>
            {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // A monitor naming that region: the region is not listed, so nothing is pruned there.
    monitors
        .create(
            &pp,
            &ResourceMonitor {
                metadata: ObjectMeta {
                    name: Some("far".into()),
                    ..Default::default()
                },
                spec: ResourceMonitorSpec {
                    type_: "ec2".into(),
                    regions: vec![allowed.into(), OTHER_REGION.into()],
                    prune: Some(true),
                },
                status: None,
            },
        )
        .await
        .unwrap();
    wait_for(
        "the monitor's region refused",
        Duration::from_secs(20),
        || async {
            let s = monitors
                .get("far")
                .await
                .unwrap()
                .status
                .unwrap_or_default();
            match s.conditions.iter().find(|c| c.type_ == "Ready") {
                Some(c)
                    if c.status == "False"
                        && c.message
                            .contains(&format!("spec.regions[1]: region \"{OTHER_REGION}\""))
                        && c.message.contains("pruning skipped") =>
                {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    c.stop().expect("stop");
}

/// Webhook notifications against a real HTTPS receiver: an error answer whose body never ends
/// is cut at the size limit (the controller's memory stays bounded), recorded as failed and
/// retried; a URL kept in a Secret (`recipient_from`) is delivered; no Event, status or log
/// line shows a URL's path or query.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_answers_are_bounded_and_webhook_urls_never_shown() {
    use booking_harness::tls::TestCa;
    use booking_harness::webhook_receiver::{Answer, WebhookReceiver};
    use booking_shared::api::{Notification, RecipientSource, SecretKeyRef};
    use k8s_openapi::api::core::v1::{Event, Secret};
    use kube::api::{ListParams, ObjectMeta};

    let e = env("outgoing-webhooks").await;
    let ca = TestCa::new(&e.dir, "hooks").unwrap();
    // The first request gets an endless error body, every later one 200.
    let receiver = WebhookReceiver::start(&ca, vec![Answer::EndlessError])
        .await
        .expect("receiver");
    let base = format!("https://localhost:{}", receiver.port());
    let inline = format!("{base}/services/T0SECRET/B0SECRET/inline?token=QUERYSECRET");
    let in_secret = format!("{base}/services/T0SECRET/B0SECRET/from-secret?token=QUERYSECRET");
    let secrets: Api<Secret> = Api::namespaced(e.client.clone(), &e.ns);
    secrets
        .create(
            &PostParams::default(),
            &Secret {
                metadata: ObjectMeta {
                    name: Some("chat-hooks".into()),
                    ..Default::default()
                },
                string_data: Some([("url".to_string(), in_secret.clone())].into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let port = booking_harness::free_port().unwrap();
    let ca_file = ca.cert_path().display().to_string();
    let mut c = start_controller(
        &e,
        port,
        "replica-a",
        &[("NOTIFICATION_CA_FILE", ca_file.as_str())],
    );
    let bookings: Api<Booking> = Api::namespaced(e.client.clone(), &e.ns);
    let now = Utc::now();
    let mut b = booking("chat", "ec2.none", now, now + chrono::Duration::minutes(30));
    b.spec.notifications = vec![
        Notification {
            type_: "webhook".into(),
            recipient: inline.clone(),
            recipient_from: None,
            lead_minutes: Some(30),
            events: vec![],
        },
        Notification {
            type_: "webhook".into(),
            recipient: String::new(),
            recipient_from: Some(RecipientSource {
                secret_key_ref: SecretKeyRef {
                    name: "chat-hooks".into(),
                    key: "url".into(),
                },
            }),
            lead_minutes: Some(30),
            events: vec![],
        },
    ];
    bookings.create(&PostParams::default(), &b).await.unwrap();

    let status = || async {
        bookings
            .get("chat")
            .await
            .unwrap()
            .status
            .unwrap_or_default()
    };
    // Recorded as failed: a Warning Event (the condition may be overwritten meanwhile by the
    // booking reconciler's own status write, so the Event is what is waited for).
    let events_api: Api<Event> = Api::namespaced(e.client.clone(), &e.ns);
    wait_for(
        "the endless answer recorded as a failure",
        Duration::from_secs(30),
        || async {
            let failed = events_api
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter(|ev| ev.reason.as_deref() == Some("NotificationFailed"))
                .filter_map(|ev| ev.message)
                .collect::<Vec<_>>();
            if failed.iter().any(|m| m.contains("longer than 4096 bytes")) {
                Ok(())
            } else {
                Err(format!("{failed:?}"))
            }
        },
    )
    .await;
    let rss_kib = || {
        std::fs::read_to_string(format!("/proc/{}/status", c.pid()))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap()
    };
    assert!(rss_kib() < 200 * 1024, "controller RSS {} KiB", rss_kib());
    assert!(
        receiver.pushed_bytes() < 64 * 1024 * 1024,
        "the controller stopped reading: {} bytes pushed",
        receiver.pushed_bytes()
    );
    // The failed one is retried after the backoff (30 s) and delivered. The receiver is waited
    // for, not the status alone: the status records a notification as sent when it is claimed,
    // just before it is sent, so right after the failure's Event it may still show the first
    // attempt's claim until the failure gives it back.
    let inline_received = || {
        receiver
            .received()
            .iter()
            .filter(|r| r.path_and_query.contains("/inline"))
            .count()
    };
    wait_for("both delivered", Duration::from_secs(60), || async {
        let s = status().await;
        if inline_received() >= 2 && s.notification_sent && s.notifications_sent.len() == 2 {
            Ok(())
        } else {
            Err(format!("{} inline posts; {s:?}", inline_received()))
        }
    })
    .await;
    let paths: Vec<String> = receiver
        .received()
        .into_iter()
        .map(|r| r.path_and_query)
        .collect();
    let from_secret = paths.iter().filter(|p| p.contains("/from-secret")).count();
    let inline_posts = paths.iter().filter(|p| p.contains("/inline")).count();
    assert_eq!((inline_posts, from_secret), (2, 1), "{paths:?}");
    assert!(rss_kib() < 200 * 1024, "controller RSS {} KiB", rss_kib());

    // Nothing shows the URLs' paths or queries: status, Events, logs.
    let secrets_in = |text: &str| text.contains("SECRET") || text.contains("/services");
    let status_json = serde_json::to_string(&status().await).unwrap();
    assert!(!secrets_in(&status_json), "{status_json}");
    assert!(
        status_json.contains(&format!("0:webhook:{base}#")),
        "{status_json}"
    );
    assert!(
        status_json.contains("1:webhook:secret:chat-hooks/url"),
        "{status_json}"
    );
    let events: Vec<String> = Api::<Event>::namespaced(e.client.clone(), &e.ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|ev| ev.message)
        .collect();
    assert!(
        events
            .iter()
            .any(|m| m.contains("sent the webhook notification to")),
        "{events:?}"
    );
    for m in &events {
        assert!(!secrets_in(m), "Event: {m}");
    }
    c.stop().expect("stop");
    let logs: String = [c.stdout_path(), c.stderr_path()]
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    assert!(
        logs.contains("sent notification"),
        "the log speaks of notifications"
    );
    let shown: Vec<&str> = logs.lines().filter(|l| secrets_in(l)).collect();
    assert!(
        shown.is_empty(),
        "controller log lines with a URL's path: {shown:#?}"
    );
}
