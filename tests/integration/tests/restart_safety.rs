//! Restarts of the controller and of the webhook, on the real control plane and moto: once the
//! controller is back, the AWS side and every Booking's phase are what the clock says, whatever it
//! missed while it was down (the kill campaign of `booking_tests::campaign`, with one replica and
//! with two); a restarted webhook admits no overlap while its index refills.

use std::time::Duration;

use booking_harness::process::Readiness;
use booking_shared::api::{Booking, BookingPhase, Resource};
use booking_shared::time::format_rfc3339;
use booking_tests::e2e::*;
use chrono::Utc;
use kube::api::{Api, ListParams, PostParams};

/// How long after the controller is ready again every phase must be right.
const CONVERGE: Duration = Duration::from_secs(20);

/// A controller starting while its Resource list is slow (the API server answers it with errors
/// three times) reconciles every Booking first and makes them wait for the Resource cache: every
/// one of them must be woken when the list arrives and get its phase. (kube's own readiness
/// wait woke only the last of them: the others never had a phase again in that process.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookings_reconciled_before_the_resource_list_arrives_all_get_their_phase() {
    use booking_harness::kube_proxy::{KubeFault, Method};

    let e = env("restart-slow-resources").await;
    let home = e.moto.ec2();
    let analytics = stopped_group(&home, 1, "analytics").await;
    let pp = PostParams::default();
    Api::<Resource>::namespaced(e.client.clone(), &e.ns)
        .create(&pp, &resource("ec2.analytics", "ec2", "analytics", None))
        .await
        .unwrap();
    let bookings: Api<Booking> = Api::namespaced(e.client.clone(), &e.ns);
    let now = Utc::now();
    let m = chrono::Duration::minutes;
    for i in 0..24 {
        // Eight finished, one in progress, fifteen to come.
        let start = now + m(3 * i - 25);
        bookings
            .create(
                &pp,
                &booking(&format!("b{i:02}"), "ec2.analytics", start, start + m(3)),
            )
            .await
            .unwrap();
    }
    let admin_port = booking_harness::free_port().unwrap();
    let (proxy, mut controller) = start_controller_through(
        &e,
        admin_port,
        "slow-resources",
        [KubeFault::new(Method::GET, "/resources", 500)
            .times(3)
            .message("injected: Resources not listed yet")],
    )
    .await;
    wait_for("every booking's phase", CONVERGE, || {
        phases_follow_the_clock(&bookings)
    })
    .await;
    assert!(
        proxy.pending_faults().is_empty(),
        "the Resource list was refused three times first"
    );
    wait_for("the booked group running", CONVERGE, || {
        all_in_state(&home, &analytics, "running")
    })
    .await;
    controller.stop().expect("stop");
}

/// A handover whose next booking the controller's Booking watch has not delivered (the watch is
/// held unanswered, as a resumed watch is while a restarted API server's watch cache catches
/// up, with no error to tell): at the first booking's end the cache shows no holder, but the
/// group is not stopped — the stop is confirmed with the API server, which knows the next
/// booking — and once the watch delivers it, the group is locked by its user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handover_the_booking_watch_has_not_delivered_never_stops_the_group() {
    use booking_harness::kube_proxy::KubeFault;

    let e = env("restart-lagging-watch").await;
    let home = e.moto.ec2();
    let group = stopped_group(&home, 1, "handover").await;
    let pp = PostParams::default();
    Api::<Resource>::namespaced(e.client.clone(), &e.ns)
        .create(&pp, &resource("ec2.handover", "ec2", "handover", None))
        .await
        .unwrap();
    let bookings: Api<Booking> = Api::namespaced(e.client.clone(), &e.ns);
    let handover_at = Utc::now() + chrono::Duration::seconds(20);
    bookings
        .create(
            &pp,
            &booking(
                "first",
                "ec2.handover",
                handover_at - chrono::Duration::minutes(5),
                handover_at,
            ),
        )
        .await
        .unwrap();
    // The first lists go through; the Booking watch (kube's URL: `bookings?&watch=true&…`) is
    // held until the faults clear. Should that URL change, the check of `next`'s phase below
    // fails rather than the test passing without a lagging watch.
    let (proxy, mut controller) = start_controller_through(
        &e,
        booking_harness::free_port().unwrap(),
        "lagging-watch",
        [KubeFault::stall(
            "/bookings?&watch=true",
            Duration::from_secs(600),
        )],
    )
    .await;
    let locked_by = |user: &'static str| {
        let home = home.clone();
        let group = group.clone();
        move || {
            let (home, group) = (home.clone(), group.clone());
            async move {
                let seen = instances(&home, &group).await;
                let (state, tags) = &seen[0];
                let lock = tags
                    .iter()
                    .find(|(k, _)| k == "resource-booking/locked-by")
                    .map(|(_, v)| v.as_str());
                if state == "running" && lock == Some(user) {
                    Ok(())
                } else {
                    Err(format!("{state}, locked by {lock:?}"))
                }
            }
        }
    };
    wait_for(
        "the first booking's group running",
        CONVERGE,
        locked_by("user-of-first"),
    )
    .await;
    assert!(
        handover_at - Utc::now() > chrono::Duration::seconds(5),
        "the controller took too long to start the first booking for the handover to be tested"
    );
    bookings
        .create(
            &pp,
            &booking(
                "next",
                "ec2.handover",
                handover_at,
                handover_at + chrono::Duration::minutes(5),
            ),
        )
        .await
        .unwrap();
    // From just before the handover until well after it, the instance never leaves `running`.
    while Utc::now() < handover_at + chrono::Duration::seconds(8) {
        let (state, _) = &instances(&home, &group).await[0];
        assert_eq!(
            state,
            "running",
            "the group was stopped at {} though `next` held it from {}",
            format_rfc3339(Utc::now()),
            format_rfc3339(handover_at)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        phase(&bookings, "next").await,
        None,
        "the Booking watch was held: the controller cannot have seen `next` yet"
    );
    proxy.clear_faults();
    wait_for(
        "the group locked by the next booking's user",
        CONVERGE,
        locked_by("user-of-next"),
    )
    .await;
    controller.stop().expect("stop");
}

/// Groups whose bookings end together share the reads that confirm their stops: each read
/// costs the API server a scan of the namespace's bookings, and one per stop, 1,000 at once
/// over 100,000 bookings, saturated it (BENCHMARKS.md, 2026-12-03). With the confirming reads
/// held by the API proxy (one Resource's, or the namespace's page by page), one read of the
/// namespace is in flight at a time, no group stops unconfirmed, and once the reads are
/// answered all four stop after two reads at most (the first, for the stops waiting when it
/// began, then one for all that came during it). Which stops the first read serves depends on
/// how the end's reconciles interleave: alone it is a read of one Resource, with others the
/// namespace's list; both are held and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stops_ending_together_share_their_namespace_reads() {
    use booking_harness::kube_proxy::KubeFault;

    const GROUPS: usize = 4;
    let e = env("restart-stop-reads").await;
    // One Resource's bookings (filtered on the server), or the namespace's, page by page.
    let single = || KubeFault::stall("fieldSelector=spec.resource_name", Duration::from_secs(600));
    let namespace_bookings = format!("/namespaces/{}/bookings?", e.ns);
    let paged =
        || KubeFault::stall(&namespace_bookings, Duration::from_secs(600)).and_contains("limit=");
    let home = e.moto.ec2();
    let pp = PostParams::default();
    // Time to start the controller and the four groups on a loaded machine before their end.
    let end = Utc::now() + chrono::Duration::seconds(30);
    let mut groups = Vec::new();
    for g in 0..GROUPS {
        let tag = format!("together-{g}");
        groups.extend(stopped_group(&home, 1, &tag).await);
        let name = format!("ec2.{tag}");
        Api::<Resource>::namespaced(e.client.clone(), &e.ns)
            .create(&pp, &resource(&name, "ec2", &tag, None))
            .await
            .unwrap();
        Api::<Booking>::namespaced(e.client.clone(), &e.ns)
            .create(
                &pp,
                &booking(&tag, &name, end - chrono::Duration::minutes(5), end),
            )
            .await
            .unwrap();
    }
    let (proxy, mut controller) = start_controller_through(
        &e,
        booking_harness::free_port().unwrap(),
        "stop-reads",
        [single()],
    )
    .await;
    // Any failure below reports the Booking requests the proxy answered and the controller's log.
    let report = |failure: String| -> ! {
        let bookings: Vec<_> = proxy
            .requests()
            .into_iter()
            .filter(|r| r.path.contains("/bookings"))
            .map(|r| {
                format!(
                    "{} {} {} received {} answered {}",
                    r.method,
                    r.path,
                    r.status,
                    format_rfc3339(r.received.into()),
                    format_rfc3339(r.answered.into())
                )
            })
            .collect();
        panic!(
            "{failure}\n(end {}, now {})\nBooking requests:\n{}\n{}",
            format_rfc3339(end),
            format_rfc3339(Utc::now()),
            bookings.join("\n"),
            controller.log_tail(60)
        )
    };
    try_wait_for("the four groups running", CONVERGE, || {
        all_in_state(&home, &groups, "running")
    })
    .await
    .unwrap_or_else(|e| report(e));
    // The namespace's list is also how the controller's Booking watch began: held only now.
    proxy.inject(paged());
    let held_from = std::time::SystemTime::now();
    if end - Utc::now() <= chrono::Duration::seconds(2) {
        report(
            "the controller took too long to start the groups for their common end to be tested"
                .into(),
        );
    }
    // The confirming reads that matched a stall so far (each one held unanswered).
    let held = || -> usize {
        proxy
            .pending_faults()
            .iter()
            .filter(|f| f.stall.is_some())
            .map(|f| usize::MAX - f.remaining)
            .sum()
    };
    let until_end = (end - Utc::now()).to_std().unwrap_or_default();
    try_wait_for("a confirming read held", until_end + CONVERGE, || async {
        match held() {
            0 => Err("no confirming read yet".to_owned()),
            _ => Ok(()),
        }
    })
    .await
    .unwrap_or_else(|e| report(e));
    // A while later: still one (the other stops wait for the namespace's next read), and every
    // group still runs, since none of them had its stop confirmed.
    tokio::time::sleep(Duration::from_secs(3)).await;
    if held() != 1 {
        report(format!(
            "{} confirming reads in flight at once in one namespace",
            held()
        ));
    }
    if let Err(e) = all_in_state(&home, &groups, "running").await {
        report(format!(
            "a group stopped before its stop was confirmed: {e}"
        ));
    }
    proxy.clear_faults();
    try_wait_for("the four groups stopped", CONVERGE, || {
        all_in_state(&home, &groups, "stopped")
    })
    .await
    .unwrap_or_else(|e| report(e));
    // Every read of the namespace's bookings since the hold (whatever its query), not only
    // those the holds matched.
    let reads = proxy
        .requests()
        .into_iter()
        .filter(|r| {
            r.received >= held_from
                && r.path.contains(&namespace_bookings)
                && !r.path.contains("watch=")
        })
        .inspect(|r| {
            eprintln!(
                "confirming read {} {}",
                r.path,
                format_rfc3339(r.received.into())
            )
        })
        .count();
    if !(1..=2).contains(&reads) {
        report(format!(
            "four stops confirmed in {reads} reads, not one or two"
        ));
    }
    controller.stop().expect("stop");
}

/// A relist after a watch gap acts on what the gap changed and on nothing else. The controller
/// is paused (SIGSTOP) while bookings change, etcd is compacted past its last resourceVersion and
/// kube-apiserver restarted, so that its resumed watches get `410 Gone` and list again. Then:
/// the IN PROGRESS booking deleted during the gap releases its group (stopped); the booking
/// that an earlier one, deleted during the gap, held in CONFLICT takes its group (running); the
/// booking created during the gap gets its phase; and the 40 bookings the gap left unchanged are
/// not reconciled again (with a relist announcing every listed object, each of them was).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relist_after_a_watch_gap_acts_on_what_the_gap_changed_only() {
    use booking_harness::TestDir;
    use booking_harness::control_plane::{ControlPlane, ControlPlaneOptions, TestCluster};
    use booking_harness::moto::MotoServer;
    use kube::api::DeleteParams;

    const UNCHANGED: usize = 40;
    let dir = TestDir::new("restart-relist-gap").expect("test dir");
    let moto = MotoServer::start(&dir).await.expect("moto");
    // A private control plane: its kube-apiserver is restarted below.
    let mut plane = ControlPlane::start(&dir, ControlPlaneOptions::default())
        .await
        .expect("control plane");
    let cluster = TestCluster::attach(plane.kubeconfig_path(), "relist-gap")
        .await
        .expect("namespace");
    cluster.apply_shipped_crds().expect("CRDs applied");
    let client = cluster.client().await.expect("client");
    let ns = cluster.namespace().to_owned();
    let e = Env {
        dir,
        moto,
        cluster,
        client,
        ns,
    };
    let home = e.moto.ec2();
    let pp = PostParams::default();
    let resources: Api<Resource> = Api::namespaced(e.client.clone(), &e.ns);
    let bookings: Api<Booking> = Api::namespaced(e.client.clone(), &e.ns);
    let released = stopped_group(&home, 1, "released").await;
    let taken = stopped_group(&home, 1, "taken").await;
    stopped_group(&home, 1, "quiet").await;
    for tag in ["released", "taken", "quiet", "fresh"] {
        resources
            .create(&pp, &resource(&format!("ec2.{tag}"), "ec2", tag, None))
            .await
            .unwrap();
    }
    let now = Utc::now();
    let m = chrono::Duration::minutes;
    let create = |b: Booking| {
        let bookings = bookings.clone();
        async move { bookings.create(&PostParams::default(), &b).await.unwrap() }
    };
    create(booking("running", "ec2.released", now - m(1), now + m(30))).await;
    create(booking("holder", "ec2.taken", now - m(1), now + m(30))).await;
    // Created a second later (creation times have whole seconds; no webhook here): CONFLICT
    // while `holder` exists.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    create(booking("blocked", "ec2.taken", now - m(1), now + m(30))).await;
    for i in 0..UNCHANGED {
        let start = now + m(60 * (24 + i as i64));
        create(booking(
            &format!("far-{i:02}"),
            "ec2.quiet",
            start,
            start + m(30),
        ))
        .await;
    }
    let admin_port = booking_harness::free_port().unwrap();
    let admin = format!("127.0.0.1:{admin_port}");
    let mut controller =
        start_controller(&e, admin_port, "relist-gap", &[("LEADER_ELECT", "false")]);
    wait_for("the first phases", CONVERGE, || async {
        let running = phase(&bookings, "running").await;
        let blocked = phase(&bookings, "blocked").await;
        let far = phase(&bookings, &format!("far-{:02}", UNCHANGED - 1)).await;
        match (running, blocked, far) {
            (
                Some(BookingPhase::InProgress),
                Some(BookingPhase::Conflict),
                Some(BookingPhase::Scheduled),
            ) => Ok(()),
            other => Err(format!("running, blocked, last far: {other:?}")),
        }
    })
    .await;
    wait_for("the released group running", CONVERGE, || {
        all_in_state(&home, &released, "running")
    })
    .await;
    // Quiet: the first reconciles are done and counted.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let reconciled = || {
        metric(
            &admin,
            "booking_controller_reconciles_total",
            &[r#"kind="Booking""#],
        )
    };
    let before = reconciled().await;

    // The gap: the controller paused, three changes, etcd compacted, kube-apiserver restarted.
    let signal = |sig: &str| {
        let status = std::process::Command::new("kill")
            .args([sig, &controller.pid().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {sig}");
    };
    signal("-STOP");
    let dp = DeleteParams::default();
    bookings.delete("running", &dp).await.unwrap();
    bookings.delete("holder", &dp).await.unwrap();
    create(booking("fresh", "ec2.fresh", now + m(90), now + m(120))).await;
    plane.compact_etcd().await.expect("etcd compaction");
    plane
        .restart_apiserver()
        .await
        .expect("kube-apiserver restart");
    signal("-CONT");

    wait_for("the deleted booking's group stopped", CONVERGE, || {
        all_in_state(&home, &released, "stopped")
    })
    .await;
    wait_for("the conflicting booking's group running", CONVERGE, || {
        all_in_state(&home, &taken, "running")
    })
    .await;
    wait_for("the new booking scheduled", CONVERGE, || async {
        match phase(&bookings, "fresh").await {
            Some(BookingPhase::Scheduled) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(
        phase(&bookings, "blocked").await,
        Some(BookingPhase::InProgress)
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let again = reconciled().await - before;
    eprintln!("{again} Booking reconciles after the relist");
    // `blocked` (its Resource's bookings changed) and `fresh` (new), each once or a few times
    // (its own status write comes back through the watch): far below one per unchanged booking.
    assert!(
        again < (UNCHANGED / 2) as f64,
        "{again} Booking reconciles after the relist, for 2 changed bookings and {UNCHANGED} unchanged ones"
    );
    controller.stop().expect("stop");
}

/// The kill campaign with one replica: SIGKILLs and SIGTERMs at random moments, an API server
/// restart after an etcd compaction; every invariant of `booking_tests::campaign` holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_campaign_one_replica_loses_nothing() {
    let options =
        booking_tests::campaign::Options::new("campaign-one", Duration::from_secs(180), 1);
    let report = booking_tests::campaign::run(&options).await;
    report.assert_clean(3);
    assert!(report.apiserver_restarts >= 1, "{report}");
    assert!(
        report.gone_relists >= 1,
        "a running controller's watches resumed from a compacted resourceVersion: {report}"
    );
    assert!(report.transitions >= 60, "{report}");
}

/// The kill campaign with two replicas: the leader is killed at random moments; the same
/// invariants, and no AWS write from a replica that does not hold the Lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_campaign_two_replicas_loses_nothing_and_only_the_leader_writes() {
    let options =
        booking_tests::campaign::Options::new("campaign-two", Duration::from_secs(180), 2);
    let report = booking_tests::campaign::run(&options).await;
    report.assert_clean(3);
    assert!(report.writes > 0, "{report}");
}

/// What one create of the webhook test's load ended with.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Admitted,
    /// Denied for an overlap, naming the other booking.
    Overlap,
    /// Anything else: the webhook unreachable, not ready, an error.
    Failed(String),
}

/// One create of the load: when it ended, whether it overlapped a stored booking, how it ended.
type Attempt = (chrono::DateTime<Utc>, bool, Outcome);

/// The real webhook killed (SIGKILL) and restarted twice under a stream of creates, with 1,500
/// bookings in the cluster for its index to reload: no create fails outside the moment between
/// the kill and the new process's readiness (plus 2 s for the API server to reconnect), and no
/// overlapping booking is ever admitted — not even in the instant the new process listens but
/// has not loaded the bookings yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_webhook_admits_no_overlap_while_its_index_refills() {
    use booking_harness::TestDir;
    use booking_harness::control_plane::{
        ControlPlane, ControlPlaneOptions, LocalWebhooks, TestCluster,
    };
    use booking_harness::tls::TestCa;
    use futures::StreamExt as _;
    use std::sync::{Arc, Mutex};

    let dir = TestDir::new("webhook-restart").unwrap();
    let plane = ControlPlane::start(&dir, ControlPlaneOptions::default())
        .await
        .expect("control plane");
    let cluster = TestCluster::attach(plane.kubeconfig_path(), "webhook-restart")
        .await
        .unwrap();
    cluster.apply_shipped_crds().expect("CRDs");
    let client = cluster.client().await.unwrap();
    let ns = cluster.namespace().to_owned();
    let bookings: Api<Booking> = Api::namespaced(client.clone(), &ns);

    // 50 resources × 30 one-hour slots, stored before the webhook is registered.
    let base = chrono::DateTime::parse_from_rfc3339("2031-03-02T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc);
    let h = chrono::Duration::hours;
    let fixture: Vec<Booking> = (0..50)
        .flat_map(|r| {
            (0..30).map(move |i| {
                booking(
                    &format!("r{r}-{i}"),
                    &format!("ec2.r{r}"),
                    base + h(2 * i),
                    base + h(2 * i + 1),
                )
            })
        })
        .collect();
    futures::stream::iter(fixture.iter().cloned())
        .map(|b| {
            let bookings = bookings.clone();
            async move { bookings.create(&PostParams::default(), &b).await.unwrap() }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;

    let ca = TestCa::new(&dir, "webhook").unwrap();
    let cert = ca
        .issue_server_cert("booking-webhook", &["127.0.0.1"])
        .unwrap();
    let port = booking_harness::free_port().unwrap();
    let admin_port = booking_harness::free_port().unwrap();
    let readyz = Readiness::Http(format!("http://127.0.0.1:{admin_port}/readyz"));
    let spawn = || {
        webhook_process(&cert, port, admin_port, plane.kubeconfig_path())
            .spawn(&dir)
            .expect("booking-webhook starts")
    };
    let mut webhook = spawn();
    webhook
        .wait_ready(&readyz, Duration::from_secs(60))
        .await
        .unwrap();
    let manifest = booking_tests::repo_root().join("manifests/webhook/webhook-configurations.yaml");
    LocalWebhooks::from_manifest(
        &manifest,
        &format!("https://127.0.0.1:{port}"),
        &ca.cert_pem(),
    )
    .unwrap()
    .register(&client)
    .await
    .unwrap();
    let fixture = Arc::new(fixture);
    let overlapping = move |n: usize| {
        let victim = &fixture[(n * 7919) % fixture.len()];
        let start = chrono::DateTime::parse_from_rfc3339(&victim.spec.start_at)
            .unwrap()
            .with_timezone(&Utc);
        booking(
            &format!("overlap-{n}"),
            &victim.spec.resource_name,
            start + chrono::Duration::minutes(30),
            start + chrono::Duration::minutes(90),
        )
    };
    let classify = |r: Result<Booking, kube::Error>| match r {
        Ok(_) => Outcome::Admitted,
        Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains("overlaps booking") => {
            Outcome::Overlap
        }
        Err(e) => Outcome::Failed(e.to_string()),
    };
    // The API server picks the configuration up from its own watch: wait for the first denial.
    wait_for(
        "the webhook called by the API server",
        Duration::from_secs(30),
        || {
            let bookings = bookings.clone();
            let probe = overlapping(0);
            async move {
                let dry = PostParams {
                    dry_run: true,
                    ..PostParams::default()
                };
                match bookings.create(&dry, &probe).await {
                    Err(kube::Error::Api(e)) if e.message.contains("overlaps booking") => Ok(()),
                    other => Err(format!("{:?}", other.map(|b| b.metadata.name))),
                }
            }
        },
    )
    .await;

    // The load: six clients trying overlapping bookings, two booking free slots, until told to
    // stop; every outcome with its time.
    let log: Arc<Mutex<Vec<Attempt>>> = Arc::default();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut load = Vec::new();
    for client_no in 0..8usize {
        let bookings = bookings.clone();
        let log = log.clone();
        let stop = stop_rx.clone();
        let overlapping = overlapping.clone();
        load.push(tokio::spawn(async move {
            let mut n = 0usize;
            while !*stop.borrow() {
                n += 1;
                let is_overlap = client_no < 6;
                let b = if is_overlap {
                    overlapping(client_no * 1_000_000 + n)
                } else {
                    let start = base + chrono::Duration::days(200) + h(i64::try_from(n).unwrap());
                    booking(
                        &format!("free-{client_no}-{n}"),
                        &format!("ec2.free-{client_no}"),
                        start,
                        start + h(1),
                    )
                };
                let outcome = classify(bookings.create(&PostParams::default(), &b).await);
                log.lock().unwrap().push((Utc::now(), is_overlap, outcome));
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }));
    }

    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut windows = Vec::new();
    for _ in 0..2 {
        let killed = Utc::now();
        webhook.kill().unwrap();
        tokio::time::sleep(Duration::from_millis(700)).await;
        webhook = spawn();
        webhook
            .wait_ready(&readyz, Duration::from_secs(30))
            .await
            .expect("the restarted webhook becomes ready");
        let ready = Utc::now();
        eprintln!(
            "webhook down from {} to {} ({:.2} s)",
            format_rfc3339(killed),
            format_rfc3339(ready),
            (ready - killed).as_seconds_f64()
        );
        windows.push((killed, ready + chrono::Duration::seconds(2)));
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    stop_tx.send(true).unwrap();
    for t in load {
        t.await.unwrap();
    }
    webhook.stop().unwrap();

    let log = log.lock().unwrap().clone();
    let admitted_overlaps: Vec<_> = log
        .iter()
        .filter(|(_, overlap, o)| *overlap && *o == Outcome::Admitted)
        .collect();
    assert!(
        admitted_overlaps.is_empty(),
        "overlapping bookings admitted: {admitted_overlaps:?}"
    );
    let outside: Vec<_> = log
        .iter()
        .filter(|(at, _, o)| {
            matches!(o, Outcome::Failed(_)) && !windows.iter().any(|(a, b)| a <= at && at <= b)
        })
        .collect();
    assert!(
        outside.is_empty(),
        "creates failed outside the restarts {windows:?}: {outside:?}"
    );
    let free_admitted = log
        .iter()
        .filter(|(_, overlap, o)| !overlap && *o == Outcome::Admitted)
        .count();
    let denied = log
        .iter()
        .filter(|(_, _, o)| *o == Outcome::Overlap)
        .count();
    let failed = log
        .iter()
        .filter(|(_, _, o)| matches!(o, Outcome::Failed(_)))
        .count();
    eprintln!(
        "{} creates: {free_admitted} free slots admitted, {denied} overlaps denied, {failed} failed while the webhook restarted",
        log.len()
    );
    assert!(free_admitted > 20 && denied > 100, "the load ran");
    // And what is stored never overlaps.
    let mut stored = bookings.list(&ListParams::default()).await.unwrap().items;
    stored.sort_by(|a, b| {
        (&a.spec.resource_name, &a.spec.start_at).cmp(&(&b.spec.resource_name, &b.spec.start_at))
    });
    for pair in stored.windows(2) {
        if pair[0].spec.resource_name == pair[1].spec.resource_name {
            assert!(
                pair[0].spec.end_at <= pair[1].spec.start_at,
                "stored bookings overlap: {:?} and {:?}",
                pair[0].metadata.name,
                pair[1].metadata.name
            );
        }
    }
}
