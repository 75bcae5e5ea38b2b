//! End to end, the controller's dry-run mode and what a Resource's status shows: the real
//! `booking-controller` binary against the run's shared control plane and moto (behind the
//! harness's AWS proxy, which records every call), the real SMTP server (aiosmtpd) and the
//! control plane's real kubectl.
//!
//! Run inside `booking-control-plane run -- …`; the binary comes from the target directory.

use std::time::Duration;

use booking_harness::process::Readiness;
use booking_harness::proxy::FaultProxy;
use booking_harness::smtp::{SmtpOptions, SmtpServer};
use booking_shared::api::{Booking, BookingPhase, Notification, Resource};
use booking_tests::e2e::*;
use booking_tests::kubectl::kubectl;
use chrono::Utc;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, PostParams};

/// The Events of the namespace with `reason`: (regarding kind, note, times it occurred).
async fn events(client: &kube::Client, ns: &str, reason: &str) -> Vec<(String, String, i32)> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|ev| ev.reason.as_deref() == Some(reason))
        .map(|ev| {
            (
                ev.regarding.and_then(|r| r.kind).unwrap_or_default(),
                ev.note.unwrap_or_default(),
                ev.series.map_or(1, |s| s.count),
            )
        })
        .collect()
}

/// The condition `type_` of the Resource `name`: (status, message).
async fn condition(api: &Api<Resource>, name: &str, type_: &str) -> Option<(String, String)> {
    let res = api.get(name).await.ok()?;
    res.status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.message))
}

/// Reconciles of Resources so far, from the controller's metrics.
async fn resource_reconciles(admin: &str) -> f64 {
    metric(
        admin,
        "booking_controller_reconciles_total",
        &[r#"kind="Resource""#],
    )
    .await
}

/// A booking in progress under `--dry-run`: AWS is only read (the proxy records no write), the
/// instances stay stopped and untagged on moto, the Resource reports `WouldStart` then, at the
/// end, `WouldStop` (each once, naming the members and the lock tags), the condition `DryRun`
/// and the metric count them; the reminder reaches no SMTP server but is reported as
/// `WouldNotify`; while nothing changes, no Event repeats and the controller does not poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_plans_and_reports_but_writes_nothing_to_aws_and_sends_nothing() {
    let e = env("dry-run").await;
    let proxy = FaultProxy::start(&e.moto.endpoint_url())
        .await
        .expect("proxy");
    let smtp = SmtpServer::start(&e.dir, SmtpOptions::default())
        .await
        .expect("SMTP server");
    let home = e.moto.ec2();
    let ids = stopped_group(&home, 2, "trial").await;
    let resources: Api<Resource> = Api::namespaced(e.client.clone(), &e.ns);
    resources
        .create(
            &PostParams::default(),
            &resource("ec2.trial", "ec2", "trial", None),
        )
        .await
        .unwrap();
    let now = Utc::now();
    let end = now + chrono::Duration::seconds(75);
    let mut b = booking("trial-now", "ec2.trial", now, end);
    // A lead time longer than the booking: the reminder is due at once.
    b.spec.notifications = vec![
        serde_json::from_value::<Notification>(serde_json::json!({
            "type": "email", "recipient": "ann@example.com", "leadMinutes": 5,
        }))
        .unwrap(),
    ];
    let bookings: Api<Booking> = Api::namespaced(e.client.clone(), &e.ns);
    bookings.create(&PostParams::default(), &b).await.unwrap();

    let port = booking_harness::free_port().unwrap();
    let admin = format!("127.0.0.1:{port}");
    let endpoint = proxy.endpoint_url();
    let smtp_port = smtp.port().to_string();
    let mut c = start_controller(
        &e,
        port,
        "dry-run",
        &[
            ("AWS_ENDPOINT_URL", endpoint.as_str()),
            ("DRY_RUN", "true"),
            ("SMTP_HOST", "127.0.0.1"),
            ("SMTP_PORT", smtp_port.as_str()),
            ("SMTP_SENDER", "booking@example.com"),
            ("SMTP_SECURITY", "none"),
        ],
    );
    c.wait_ready(
        &Readiness::Http(format!("http://{admin}/readyz")),
        Duration::from_secs(30),
    )
    .await
    .expect("ready");

    // What it would do, reported once.
    wait_for("a WouldStart Event", Duration::from_secs(60), || async {
        match events(&e.client, &e.ns, "WouldStart").await.as_slice() {
            [] => Err("none yet".into()),
            _ => Ok(()),
        }
    })
    .await;
    let started = events(&e.client, &e.ns, "WouldStart").await;
    let (kind, note, _) = &started[0];
    assert_eq!(kind, "Resource");
    for id in &ids {
        assert!(note.contains(id.as_str()), "names {id}: {note}");
    }
    assert!(
        note.contains("resource-booking/locked-by=user-of-trial-now")
            && note.contains("resource-booking/locked-until=")
            && note.contains("booking trial-now"),
        "names the lock tags it would write: {note}"
    );
    wait_for("the DryRun condition", Duration::from_secs(30), || async {
        match condition(&resources, "ec2.trial", "DryRun").await {
            Some((s, m)) if s == "True" && m.contains("would start ec2") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    if let Some((status, message)) = condition(&resources, "ec2.trial", "DryRun").await {
        println!("condition DryRun={status}: {message}");
    }
    wait_for("a WouldNotify Event", Duration::from_secs(30), || async {
        match events(&e.client, &e.ns, "WouldNotify").await.as_slice() {
            [] => Err("none yet".into()),
            _ => Ok(()),
        }
    })
    .await;
    assert_eq!(
        phase(&bookings, "trial-now").await,
        Some(BookingPhase::InProgress),
        "Booking phases are computed as usual"
    );
    let would = |action: &'static str| {
        let admin = admin.clone();
        async move {
            metric(
                &admin,
                "booking_controller_dry_run_actions_total",
                &[&format!(r#"action="{action}""#)],
            )
            .await
        }
    };
    assert_eq!(would("start").await, 2.0, "two members would be started");
    assert_eq!(would("tag").await, 2.0, "two members would be tagged");
    assert_eq!(would("notify").await, 1.0);

    // Idle while the booking lasts: no Event repeats, the Resource is not polled (the
    // inventory refreshes every 2 s; a hot loop would reconcile hundreds of times).
    let before = resource_reconciles(&admin).await;
    tokio::time::sleep(Duration::from_secs(12)).await;
    let idle = resource_reconciles(&admin).await - before;
    println!("{idle} Resource reconciles in 12 s of idling in dry-run mode");
    assert!(idle <= 12.0, "{idle} Resource reconciles in 12 s of idling");
    assert_eq!(events(&e.client, &e.ns, "WouldStart").await.len(), 1);

    // At the end, it would stop them and remove the lock tags it would have written.
    let until_end = (end - Utc::now()).to_std().unwrap_or_default();
    wait_for(
        "a WouldStop Event",
        until_end + Duration::from_secs(60),
        || async {
            match events(&e.client, &e.ns, "WouldStop").await.as_slice() {
                [] => Err("none yet".into()),
                _ => Ok(()),
            }
        },
    )
    .await;
    let stopped = events(&e.client, &e.ns, "WouldStop").await;
    for id in &ids {
        assert!(stopped[0].1.contains(id.as_str()), "{stopped:?}");
    }
    assert!(stopped[0].1.contains("remove the lock tags"), "{stopped:?}");
    assert_eq!(would("stop").await, 2.0);
    wait_for(
        "nothing to do after the end",
        Duration::from_secs(30),
        || async {
            match condition(&resources, "ec2.trial", "DryRun").await {
                Some((_, m)) if m.contains("nothing to do") => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    // Idle after the end: nothing more is reported.
    tokio::time::sleep(Duration::from_secs(6)).await;
    for reason in [
        "WouldStart",
        "WouldStop",
        "WouldNotify",
        "WouldLock",
        "WouldUnlock",
    ] {
        let got = events(&e.client, &e.ns, reason).await;
        assert!(
            got.iter().all(|(_, _, count)| *count == 1) && got.len() <= 1,
            "{reason} at most once: {got:?}"
        );
    }

    for reason in ["WouldStart", "WouldStop", "WouldNotify"] {
        for (kind, note, _) in events(&e.client, &e.ns, reason).await {
            println!("{reason} on {kind}: {note}");
        }
    }
    if let Some((status, message)) = condition(&resources, "ec2.trial", "DryRun").await {
        println!("condition DryRun={status}: {message}");
    }

    // No AWS write went out: the proxy saw reads only, and moto's instances are untouched.
    let requests = proxy.requests();
    let actions: Vec<&str> = requests
        .iter()
        .filter_map(|r| r.action.as_deref())
        .collect();
    assert!(actions.contains(&"DescribeInstances"), "{actions:?}");
    assert!(
        actions.iter().all(|a| a.starts_with("Describe")),
        "reads only: {actions:?}"
    );
    for (state, tags) in instances(&home, &ids).await {
        assert_eq!(state, "stopped");
        assert!(
            !tags.iter().any(|(k, _)| k.contains("lock")),
            "no lock tag: {tags:?}"
        );
    }
    // Nothing was sent, nor recorded as sent (so that it is sent once dry-run mode is off).
    assert!(smtp.messages().unwrap().is_empty(), "no mail in dry-run");
    let status = bookings.get("trial-now").await.unwrap().status.unwrap();
    assert!(
        status.notifications_sent.is_empty(),
        "{:?}",
        status.notifications_sent
    );
    c.stop().expect("stop");
}

/// `kubectl get bkres` shows who holds a Resource, until when, and its next booking; the status
/// follows the bookings: a booking created or deleted, and the boundary where the next booking
/// begins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_shows_who_holds_a_resource_until_when_and_its_next_booking() {
    let e = env("resource-columns").await;
    let home = e.moto.ec2();
    stopped_group(&home, 1, "shown").await;
    let resources: Api<Resource> = Api::namespaced(e.client.clone(), &e.ns);
    resources
        .create(
            &PostParams::default(),
            &resource("ec2.shown", "ec2", "shown", None),
        )
        .await
        .unwrap();
    let bookings: Api<Booking> = Api::namespaced(e.client.clone(), &e.ns);
    let now = Utc::now();
    let first_end = now + chrono::Duration::seconds(40);
    let second_start = now + chrono::Duration::seconds(60);
    let second_end = now + chrono::Duration::minutes(10);
    for b in [
        booking("first", "ec2.shown", now, first_end),
        booking("second", "ec2.shown", second_start, second_end),
    ] {
        bookings.create(&PostParams::default(), &b).await.unwrap();
    }
    let port = booking_harness::free_port().unwrap();
    let mut c = start_controller(&e, port, "columns", &[]);
    let shown = |holder: &'static str, next: Option<&'static str>| {
        let resources = resources.clone();
        async move {
            let s = resources
                .get("ec2.shown")
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            let got = (s.active_user.clone(), s.next_booking.clone());
            let want = (Some(holder.to_owned()), next.map(str::to_owned));
            if got == want {
                Ok(s)
            } else {
                Err(format!("holder and next {got:?}, want {want:?}"))
            }
        }
    };
    wait_for(
        "first holds, second next",
        Duration::from_secs(60),
        || async { shown("user-of-first", Some("second")).await.map(|_| ()) },
    )
    .await;
    let s = shown("user-of-first", Some("second")).await.unwrap();
    assert_eq!(
        s.next_booking_start.as_deref(),
        Some(booking_shared::time::format_rfc3339(second_start).as_str())
    );
    assert_eq!(s.next_booking_user.as_deref(), Some("user-of-second"));
    let kubeconfig = e.cluster.kubeconfig_path();
    let get = |wide: bool| {
        let ns = e.ns.clone();
        async move {
            let mut args = vec!["get", "bkres", "-n", ns.as_str()];
            if wide {
                args.extend(["-o", "wide"]);
            }
            let out = kubectl(kubeconfig, None, &args, None).await;
            assert!(out.ok, "kubectl get bkres: {}", out.stderr);
            println!("$ kubectl {}\n{}", args.join(" "), out.stdout);
            out.stdout
        }
    };
    let table = get(false).await;
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap()
        .split("  ")
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "HELD BY",
            "UNTIL",
            "NEXT",
            "INSTANCES",
            "RUNNING",
            "STATUS",
            "AGE"
        ],
        "{table}"
    );
    let row = table.lines().nth(1).unwrap();
    assert!(
        row.contains("user-of-first")
            && row.contains(&booking_shared::time::format_rfc3339(first_end))
            && row.contains(&booking_shared::time::format_rfc3339(second_start)),
        "{table}"
    );
    let wide = get(true).await;
    assert!(
        wide.lines().next().unwrap().contains("LOCKED BY"),
        "the lock columns in -o wide: {wide}"
    );

    // The status follows the bookings: a booking after the next one changes nothing; once the
    // next one is deleted, it is the next; the next one created again is the next again.
    let extra = booking(
        "extra",
        "ec2.shown",
        second_end,
        second_end + chrono::Duration::minutes(10),
    );
    bookings
        .create(&PostParams::default(), &extra)
        .await
        .unwrap();
    bookings
        .delete("second", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("extra is next", Duration::from_secs(20), || async {
        shown("user-of-first", Some("extra")).await.map(|_| ())
    })
    .await;
    let second = booking("second", "ec2.shown", second_start, second_end);
    bookings
        .create(&PostParams::default(), &second)
        .await
        .unwrap();
    wait_for("second is next again", Duration::from_secs(20), || async {
        shown("user-of-first", Some("second")).await.map(|_| ())
    })
    .await;

    // At the boundary, the next booking holds the Resource and none follows.
    let until = (second_start - Utc::now()).to_std().unwrap_or_default();
    wait_for(
        "second holds, extra next",
        until + Duration::from_secs(30),
        || async { shown("user-of-second", Some("extra")).await.map(|_| ()) },
    )
    .await;
    let table = get(false).await;
    assert!(table.contains("user-of-second"), "{table}");
    c.stop().expect("stop");
}
