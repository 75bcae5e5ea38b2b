//! End to end: skip dates, shared BookingCalendars and suspend of BookingSchedulers, with the
//! real `booking-controller` binary against the run's real control plane (a namespace of each
//! test's own), in real time; and their admission rules through the real `kubectl`, the real
//! kube-apiserver and the real `booking-webhook`, registered by the shipped webhook
//! configurations (on a control plane of that test's own: the configurations are cluster-wide).
//!
//! Schedules fire every minute, so the tests wait for real fire times; the waits are bounds, and
//! where a test needs to act early or late within a minute it waits for that part of the minute.
//! Run inside `booking-control-plane run -- …` after `cargo build --workspace --bins`.

use std::time::Duration;

use booking_harness::{
    TestDir,
    control_plane::{ControlPlane, ControlPlaneOptions, LocalWebhooks},
    free_port,
    process::Readiness,
    tls::TestCa,
};
use booking_shared::api::{BookingCalendar, BookingScheduler, BookingSchedulerStatus};
use booking_shared::scheduling::SCHEDULER_LABEL;
use booking_shared::time::format_rfc3339;
use booking_tests::e2e::*;
use booking_tests::kubectl::kubectl;
use chrono::{
    DateTime, Datelike, Duration as Span, DurationRound, NaiveDate, TimeZone, Timelike, Utc,
};
use k8s_openapi::api::core::v1::Event;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

// === helpers ==================================================================================

fn scheduler(ns: &str, name: &str, spec: Value) -> BookingScheduler {
    let mut spec = spec;
    spec["bookingTemplate"] = json!({"resource_name": "ec2.analytics", "user_id": "ann"});
    serde_json::from_value(json!({
        "apiVersion": "manager.kotaico.de/v1",
        "kind": "BookingScheduler",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }))
    .unwrap()
}

fn calendar(ns: &str, name: &str, skip_dates: Value) -> BookingCalendar {
    serde_json::from_value(json!({
        "apiVersion": "manager.kotaico.de/v1",
        "kind": "BookingCalendar",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"skipDates": skip_dates},
    }))
    .unwrap()
}

/// Creates `s` and checks that the API server kept every field of its spec: right after the
/// test applied the CRDs, a server may still serve the previous schema of the kind and prune
/// the new fields; such an object is deleted and created again, for at most 30 s.
async fn create_scheduler(api: &Api<BookingScheduler>, s: &BookingScheduler) {
    wait_for(
        "a scheduler stored with every field",
        Duration::from_secs(30),
        || async {
            let name = s.name_any();
            let stored = match api.create(&PostParams::default(), s).await {
                Ok(stored) => stored,
                Err(e) => return Err(e.to_string()),
            };
            if stored.spec == s.spec {
                return Ok(());
            }
            let _ = api.delete(&name, &DeleteParams::default()).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
            Err(format!("stored as {:?}", stored.spec))
        },
    )
    .await;
}

async fn status(api: &Api<BookingScheduler>, name: &str) -> BookingSchedulerStatus {
    api.get(name)
        .await
        .ok()
        .and_then(|s| s.status)
        .unwrap_or_default()
}

/// The Ready condition's status and reason and message ("" when absent).
fn ready(s: &BookingSchedulerStatus) -> (String, String, String) {
    s.conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        .unwrap_or_default()
}

/// The names of the bookings scheduler `name` created.
async fn bookings_of(e: &Env, name: &str) -> Vec<String> {
    let api: Api<booking_shared::api::Booking> = Api::namespaced(e.client.clone(), &e.ns);
    let selector = ListParams::default().labels(&format!("{SCHEDULER_LABEL}={name}"));
    let mut names: Vec<String> = api
        .list(&selector)
        .await
        .map(|l| l.items.iter().map(|b| b.name_any()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// The messages of the Events of reason `reason` about scheduler `name`, each prefixed with its
/// type (`Normal: …`, `Warning: …`).
async fn events(e: &Env, name: &str, reason: &str) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(e.client.clone(), &e.ns);
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|ev| ev.involved_object.name.as_deref() == Some(name))
        .filter(|ev| ev.reason.as_deref() == Some(reason))
        .map(|ev| {
            format!(
                "{}: {}",
                ev.type_.unwrap_or_default(),
                ev.message.unwrap_or_default()
            )
        })
        .collect()
}

/// Waits until the second of the current minute is within `from..=to`.
async fn second_within(from: u32, to: u32) {
    loop {
        let s = Utc::now().second();
        if (from..=to).contains(&s) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn minute_of(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(Span::minutes(1)).unwrap()
}

fn booking_of(name: &str, fire: DateTime<Utc>) -> String {
    format!("{name}-{}", fire.format("%Y%m%d%H%M"))
}

async fn set_suspend(api: &Api<BookingScheduler>, name: &str, suspend: bool) {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"suspend": suspend}})),
    )
    .await
    .unwrap();
}

async fn kubectl_get_bks(e: &Env) -> String {
    let out = kubectl(
        e.cluster.kubeconfig_path(),
        None,
        &["get", "bks", "-n", &e.ns],
        None,
    )
    .await;
    assert!(out.ok, "kubectl get bks: {}", out.stderr);
    out.stdout
}

// === skip dates ===============================================================================

/// A scheduler in Asia/Kolkata (UTC+05:30) whose local today and tomorrow are skip dates: its
/// per-minute fires create no booking, each is reported once as a Normal `SkippedFire` Event
/// and in `status.lastSkipped`, never as missed; `status.next` is the first fire after the
/// skipped days and `status.upcoming` marks the next fires skipped with the reason; `kubectl get
/// bks` shows the new columns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skipped_date_creates_no_booking_and_is_reported_once() {
    let e = env("sched-skip-date").await;
    let tz = booking_shared::schedule::parse_time_zone("Asia/Kolkata").unwrap();
    let today = (Utc::now() + Span::seconds(90))
        .with_timezone(&tz)
        .date_naive();
    let tomorrow = today.succ_opt().unwrap();
    let schedulers: Api<BookingScheduler> = Api::namespaced(e.client.clone(), &e.ns);
    let s = scheduler(
        &e.ns,
        "holiday",
        json!({
            "schedule": "* * * * *", "duration": 1, "timeZone": "Asia/Kolkata",
            "skipDates": [
                {"date": today.to_string(), "reason": "Diwali"},
                {"from": tomorrow.to_string(), "to": tomorrow.to_string()},
            ],
        }),
    );
    create_scheduler(&schedulers, &s).await;
    let admin = free_port().unwrap();
    let mut controller = start_controller(&e, admin, "sched-skip", &[]);

    wait_for(
        "a skipped fire in status",
        Duration::from_secs(100),
        || async {
            match status(&schedulers, "holiday").await.last_skipped {
                Some(_) => Ok(()),
                None => Err("no lastSkipped yet".into()),
            }
        },
    )
    .await;
    let st = status(&schedulers, "holiday").await;
    let skipped = st.last_skipped.clone().unwrap();
    let fire = DateTime::parse_from_rfc3339(&skipped.fire_time)
        .unwrap()
        .with_timezone(&Utc);
    assert_eq!(
        fire.timestamp() % 60,
        0,
        "a fire time: {}",
        skipped.fire_time
    );
    assert!(
        skipped.reason.contains("Diwali") || skipped.reason.contains(&tomorrow.to_string()),
        "the entry's reason: {}",
        skipped.reason
    );
    assert_eq!(
        st.last_fire_time.as_deref(),
        Some(skipped.fire_time.as_str())
    );
    let (ok, reason, _) = ready(&st);
    assert_eq!((ok.as_str(), reason.as_str()), ("True", "SkippedFire"));
    // The next fire that books is the first of the day after tomorrow, local time.
    let after = tz
        .from_local_datetime(&tomorrow.succ_opt().unwrap().and_hms_opt(0, 0, 0).unwrap())
        .unwrap()
        .with_timezone(&Utc);
    assert_eq!(st.next.as_deref(), Some(format_rfc3339(after).as_str()));
    assert_eq!(st.upcoming.len(), 5, "{:?}", st.upcoming);
    assert!(
        st.upcoming
            .iter()
            .all(|u| u.skipped && u.reason.as_deref().is_some_and(|r| !r.is_empty())),
        "{:?}",
        st.upcoming
    );
    // One Normal SkippedFire Event for that fire; no booking; nothing missed.
    wait_for("the SkippedFire Event", Duration::from_secs(20), || async {
        let notes = events(&e, "holiday", "SkippedFire").await;
        let normal = |n: &&String| n.starts_with("Normal: ") && n.contains(&skipped.fire_time);
        match notes.iter().filter(normal).count() {
            1 => Ok(()),
            n => Err(format!("{n} Events for the fire: {notes:?}")),
        }
    })
    .await;
    // A second fire is skipped too (and reported once more), still without a booking.
    wait_for("a second skipped fire", Duration::from_secs(75), || async {
        match status(&schedulers, "holiday").await.last_skipped {
            Some(s) if s.fire_time != skipped.fire_time => Ok(()),
            _ => Err("not yet".into()),
        }
    })
    .await;
    let notes = events(&e, "holiday", "SkippedFire").await;
    assert_eq!(
        notes
            .iter()
            .filter(|n| n.contains(&skipped.fire_time))
            .count(),
        1,
        "each skipped fire is reported once: {notes:?}"
    );
    assert!(bookings_of(&e, "holiday").await.is_empty());
    assert!(events(&e, "holiday", "MissedFire").await.is_empty());
    let table = kubectl_get_bks(&e).await;
    println!("kubectl get bks:\n{table}");
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME", "SCHEDULE", "DURATION", "SUSPEND", "NEXT", "LAST", "BOOKING", "AGE"
        ],
        "{table}"
    );
    assert!(table.contains(&format_rfc3339(after)), "{table}");
    controller.stop().expect("stop");
}

/// One BookingCalendar skips for two schedulers of different zones; a scheduler naming a
/// calendar that does not exist books nothing and says so (Ready=False CalendarNotFound), and
/// books again once it appears (the most recent fire too, its slot still open); deleting,
/// re-creating and changing a calendar re-reconciles a yearly scheduler at once (no fire of its
/// own could have woken it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_calendar_skips_for_two_schedulers_and_its_changes_re_reconcile() {
    let e = env("sched-calendar").await;
    let today = Utc::now().date_naive();
    let days = |from: NaiveDate, to: NaiveDate| json!([{"from": from.to_string(), "to": to.to_string(), "reason": "plant closed"}]);
    let calendars: Api<BookingCalendar> = Api::namespaced(e.client.clone(), &e.ns);
    let holidays = calendar(
        &e.ns,
        "holidays",
        days(today.pred_opt().unwrap(), today + Span::days(2)),
    );
    // The run's control plane may have been given the BookingCalendar CRD just now: wait until
    // it is served.
    wait_for(
        "the BookingCalendar kind served",
        Duration::from_secs(30),
        || async {
            calendars
                .create(&PostParams::default(), &holidays)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    )
    .await;
    let schedulers: Api<BookingScheduler> = Api::namespaced(e.client.clone(), &e.ns);
    let refs = |names: &[&str]| names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>();
    for (name, zone, schedule, calendars) in [
        ("utc", "UTC", "* * * * *", refs(&["holidays"])),
        ("tokyo", "Asia/Tokyo", "* * * * *", refs(&["holidays"])),
        ("waiting", "UTC", "* * * * *", refs(&["absent"])),
        ("yearly", "UTC", "0 0 1 1 *", refs(&["holidays"])),
    ] {
        let s = scheduler(
            &e.ns,
            name,
            json!({"schedule": schedule, "duration": 1, "timeZone": zone, "calendars": calendars}),
        );
        create_scheduler(&schedulers, &s).await;
    }
    let admin = free_port().unwrap();
    let mut controller = start_controller(&e, admin, "sched-cal", &[]);

    for name in ["utc", "tokyo"] {
        wait_for(
            &format!("{name}: a fire skipped by the calendar"),
            Duration::from_secs(100),
            || async {
                match status(&schedulers, name).await.last_skipped {
                    Some(s) if s.reason == "plant closed (calendar holidays)" => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    }
    // The missing calendar: nothing booked across a fire, and the condition names it.
    let st = status(&schedulers, "waiting").await;
    let (ok, reason, message) = ready(&st);
    assert_eq!(
        (ok.as_str(), reason.as_str()),
        ("False", "CalendarNotFound")
    );
    assert!(
        message.contains("absent") && message.contains("create it"),
        "{message}"
    );
    assert_eq!(st.next, None);
    for name in ["utc", "tokyo", "waiting"] {
        assert!(bookings_of(&e, name).await.is_empty(), "{name} booked");
    }
    assert!(!events(&e, "waiting", "CalendarNotFound").await.is_empty());
    // The calendar appears early in a minute: the fire of that minute (slot still open) is
    // booked at once, under the missed-fire rule.
    second_within(5, 25).await;
    let appeared = Utc::now();
    calendars
        .create(
            &PostParams::default(),
            &calendar(&e.ns, "absent", json!([])),
        )
        .await
        .unwrap();
    let expected = booking_of("waiting", minute_of(appeared));
    wait_for(
        "the booking of the fire missed while the calendar was missing",
        Duration::from_secs(30),
        || async {
            let names = bookings_of(&e, "waiting").await;
            if names.contains(&expected) {
                Ok(())
            } else {
                Err(format!("{names:?}"))
            }
        },
    )
    .await;
    assert_eq!(ready(&status(&schedulers, "waiting").await).0, "True");

    // The yearly scheduler is woken by the calendar alone.
    let yearly_ready = |want: &'static str| {
        let schedulers = schedulers.clone();
        move || {
            let schedulers = schedulers.clone();
            async move {
                let (ok, reason, _) = ready(&status(&schedulers, "yearly").await);
                if ok == want {
                    Ok(())
                } else {
                    Err(format!("{ok} {reason}"))
                }
            }
        }
    };
    wait_for(
        "yearly ready",
        Duration::from_secs(30),
        yearly_ready("True"),
    )
    .await;
    calendars
        .delete("holidays", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "yearly: CalendarNotFound after the deletion",
        Duration::from_secs(30),
        yearly_ready("False"),
    )
    .await;
    calendars
        .create(&PostParams::default(), &holidays)
        .await
        .unwrap();
    wait_for(
        "yearly: ready again after the re-creation",
        Duration::from_secs(30),
        yearly_ready("True"),
    )
    .await;
    // Cancelling its next fire in the calendar moves its next booking a year on.
    let next_new_year = format!("{}-01-01", today.year_ce().1 + 1);
    let following = format!("{}-01-01T00:00:00Z", today.year_ce().1 + 2);
    calendars
        .patch(
            "holidays",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"skipDates": [{"date": next_new_year}]}})),
        )
        .await
        .unwrap();
    wait_for(
        "yearly: next moved by the calendar change",
        Duration::from_secs(30),
        || async {
            let st = status(&schedulers, "yearly").await;
            let first = st.upcoming.first().cloned();
            if st.next.as_deref() == Some(following.as_str()) && first.is_some_and(|u| u.skipped) {
                Ok(())
            } else {
                Err(format!("next {:?}, upcoming {:?}", st.next, st.upcoming))
            }
        },
    )
    .await;
    controller.stop().expect("stop");
}

// === suspend ==================================================================================

/// A scheduler created suspended books nothing, has no next fire and says it is suspended;
/// resumed beyond `startingDeadlineSeconds` of the last fire it back-fills nothing (and warns of
/// no missed fire), then books its next fire; suspended across a fire and resumed within the
/// deadline it books that fire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_stops_fires_and_resume_books_only_within_the_deadline() {
    let e = env("sched-suspend").await;
    let schedulers: Api<BookingScheduler> = Api::namespaced(e.client.clone(), &e.ns);
    let s = scheduler(
        &e.ns,
        "paused",
        json!({"schedule": "* * * * *", "duration": 1, "startingDeadlineSeconds": 40, "suspend": true}),
    );
    create_scheduler(&schedulers, &s).await;
    let created = Utc::now();
    let admin = free_port().unwrap();
    let mut controller = start_controller(&e, admin, "sched-suspend", &[]);
    wait_for("suspended", Duration::from_secs(30), || async {
        let st = status(&schedulers, "paused").await;
        match ready(&st) {
            (ok, reason, _) if ok == "True" && reason == "Suspended" && st.next.is_none() => Ok(()),
            other => Err(format!("{other:?}, next {:?}", st.next)),
        }
    })
    .await;
    let table = kubectl_get_bks(&e).await;
    println!("kubectl get bks (suspended):\n{table}");
    assert!(
        table.lines().nth(1).unwrap().contains("true"),
        "SUSPEND column: {table}"
    );

    // Past a fire, late in the minute: more than 40 s after the last fire.
    while minute_of(Utc::now()) <= minute_of(created) {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    second_within(45, 55).await;
    assert!(
        bookings_of(&e, "paused").await.is_empty(),
        "booked while suspended"
    );
    let late = minute_of(Utc::now());
    set_suspend(&schedulers, "paused", false).await;
    wait_for("resumed", Duration::from_secs(20), || async {
        let st = status(&schedulers, "paused").await;
        match (ready(&st).1.as_str(), st.next.as_deref()) {
            ("Suspended", _) | (_, None) => Err(format!("{st:?}")),
            _ => Ok(()),
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let names = bookings_of(&e, "paused").await;
    assert!(
        !names.contains(&booking_of("paused", late)),
        "back-filled beyond the deadline: {names:?}"
    );
    // Its next fire is booked.
    let next = late + Span::minutes(1);
    wait_for(
        "the next fire after resuming",
        Duration::from_secs(90),
        || async {
            let names = bookings_of(&e, "paused").await;
            if names.contains(&booking_of("paused", next)) {
                Ok(())
            } else {
                Err(format!("{names:?}"))
            }
        },
    )
    .await;

    // Suspended across the following fire, resumed early in its minute: that fire is booked.
    set_suspend(&schedulers, "paused", true).await;
    let held = next + Span::minutes(1);
    while Utc::now() < held {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    second_within(2, 12).await;
    assert!(
        !bookings_of(&e, "paused")
            .await
            .contains(&booking_of("paused", held)),
        "booked while suspended"
    );
    set_suspend(&schedulers, "paused", false).await;
    wait_for(
        "the held fire booked on resume within the deadline",
        Duration::from_secs(25),
        || async {
            let names = bookings_of(&e, "paused").await;
            if names.contains(&booking_of("paused", held)) {
                Ok(())
            } else {
                Err(format!("{names:?}"))
            }
        },
    )
    .await;
    assert!(
        events(&e, "paused", "MissedFire").await.is_empty(),
        "no missed fire is warned about for a suspension"
    );
    // The scheduler records the booking in its status in a write of its own, after the create.
    let held_name = booking_of("paused", held);
    wait_for(
        "LAST BOOKING names the held fire",
        Duration::from_secs(10),
        || async {
            let table = kubectl_get_bks(&e).await;
            if table.contains(&held_name) {
                println!("kubectl get bks (resumed):\n{table}");
                Ok(())
            } else {
                Err(table)
            }
        },
    )
    .await;
    controller.stop().expect("stop");
}

// === admission ================================================================================

/// Bad skip dates and calendar references are denied through the real kubectl, the real API
/// server and the real webhook, each denial naming the field; the CRD bounds the lists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_skip_dates_and_calendars_are_denied_naming_the_field() {
    let dir = TestDir::new("sched-admission").expect("a test directory");
    let plane = ControlPlane::start(&dir, ControlPlaneOptions::default())
        .await
        .expect("the control plane starts");
    let kc = plane.kubeconfig_path().to_owned();
    let crds = booking_tests::repo_root().join("manifests/crds");
    let out = kubectl(&kc, None, &["apply", "-f", &crds.to_string_lossy()], None).await;
    assert!(out.ok, "{}", out.stderr);
    let out = kubectl(
        &kc,
        None,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "-f",
            &crds.to_string_lossy(),
        ],
        None,
    )
    .await;
    assert!(out.ok, "{}", out.stderr);
    let ca = TestCa::new(&dir, "webhook").unwrap();
    let cert = ca
        .issue_server_cert("booking-webhook", &["127.0.0.1"])
        .unwrap();
    let (port, admin_port) = (free_port().unwrap(), free_port().unwrap());
    let mut webhook = webhook_process(&cert, port, admin_port, &kc)
        .spawn(&dir)
        .expect("booking-webhook starts");
    webhook
        .wait_ready(
            &Readiness::Http(format!("http://127.0.0.1:{admin_port}/readyz")),
            Duration::from_secs(60),
        )
        .await
        .expect("booking-webhook ready");
    let manifest = booking_tests::repo_root().join("manifests/webhook/webhook-configurations.yaml");
    let local = LocalWebhooks::from_manifest(
        &manifest,
        &format!("https://127.0.0.1:{port}"),
        &ca.cert_pem(),
    )
    .unwrap();
    for config in local.documents() {
        let out = kubectl(&kc, None, &["apply", "-f", "-"], Some(&config.to_string())).await;
        assert!(out.ok, "{}", out.stderr);
    }
    let apply = |object: Value| {
        let kc = kc.clone();
        async move {
            kubectl(
                &kc,
                None,
                &["create", "--dry-run=server", "-f", "-"],
                Some(&object.to_string()),
            )
            .await
        }
    };
    let sched = |spec_extra: Value| {
        let mut spec = json!({"schedule": "0 8 * * *", "duration": 30, "timeZone": "Europe/Berlin",
            "bookingTemplate": {"resource_name": "ec2.analytics", "user_id": "ann"}});
        for (k, v) in spec_extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        json!({"apiVersion": "manager.kotaico.de/v1", "kind": "BookingScheduler",
            "metadata": {"name": "s", "namespace": "default"}, "spec": spec})
    };
    let cal = |entries: Value| {
        json!({"apiVersion": "manager.kotaico.de/v1", "kind": "BookingCalendar",
            "metadata": {"name": "c", "namespace": "default"}, "spec": {"skipDates": entries}})
    };
    // The webhook answers once the API server has picked up the configurations.
    let probe = sched(json!({"skipDates": [{"date": "2031-13-01"}]}));
    wait_for("the webhook is called", Duration::from_secs(30), || async {
        let out = apply(probe.clone()).await;
        if !out.ok && out.stderr.contains("spec.skipDates[0].date") {
            Ok(())
        } else {
            Err(format!("{}{}", out.stdout, out.stderr))
        }
    })
    .await;
    let cases: Vec<(&str, Value, &[&str])> = vec![
        (
            "malformed date",
            sched(json!({"skipDates": [{"date": "2031-02-30"}]})),
            &["spec.skipDates[0].date", "2031-02-30", "YYYY-MM-DD"],
        ),
        (
            "from after to",
            sched(
                json!({"skipDates": [{"date": "2031-05-01"}, {"from": "2031-12-31", "to": "2031-12-24"}]}),
            ),
            &["spec.skipDates[1].from", "swap"],
        ),
        (
            "several forms",
            sched(
                json!({"skipDates": [{"date": "2031-12-25", "fire": "2031-12-25T08:00:00+01:00"}]}),
            ),
            &["spec.skipDates[0]", "exactly one"],
        ),
        (
            "a reason with a control character",
            sched(json!({"skipDates": [{"date": "2031-12-25", "reason": "a\u{1b}[31m"}]})),
            &["spec.skipDates[0].reason", "control character"],
        ),
        (
            "a reason too long",
            sched(json!({"skipDates": [{"date": "2031-12-25", "reason": "x".repeat(129)}]})),
            &["spec.skipDates[0].reason"],
        ),
        (
            "a fire that is no fire time",
            sched(json!({"skipDates": [{"fire": "2031-12-25T08:05:00+01:00"}]})),
            &["spec.skipDates[0].fire", "not a fire time"],
        ),
        (
            "too many entries",
            sched(json!({"skipDates": vec![json!({"date": "2031-12-25"}); 101]})),
            &["spec.skipDates", "100"],
        ),
        (
            "bad calendar name",
            sched(json!({"calendars": [{"name": "Public_Holidays"}]})),
            &["spec.calendars[0].name", "Public_Holidays"],
        ),
        (
            "a calendar with a bad range",
            cal(json!([{"from": "2031-12-26", "to": "2031-12-24", "reason": "Christmas"}])),
            &["spec.skipDates[0].from", "after"],
        ),
        (
            "a calendar entry without a form",
            cal(json!([{"date": "2031-12-25"}, {"reason": "nothing"}])),
            &["spec.skipDates[1]", "exactly one"],
        ),
    ];
    for (what, object, words) in cases {
        let out = apply(object).await;
        assert!(!out.ok, "{what}: admitted:\n{}", out.stdout);
        for w in words {
            assert!(
                out.stderr.contains(w),
                "{what}: {w:?} not in:\n{}",
                out.stderr
            );
        }
    }
    // Good ones pass.
    for object in [
        sched(
            json!({"suspend": true, "calendars": [{"name": "public-holidays-de"}],
            "skipDates": [{"date": "2031-12-25", "reason": "Christmas"},
                          {"from": "2031-12-27", "to": "2031-12-31"},
                          {"fire": "2031-12-22T08:00:00+01:00"}]}),
        ),
        cal(json!([{"date": "2031-01-01", "reason": "New Year"}])),
    ] {
        let out = apply(object).await;
        assert!(out.ok, "{}", out.stderr);
    }
    webhook.stop().expect("stop");
}
