//! Restarts of the controller while bookings cross their boundaries, on the real control plane
//! and moto: the AWS side and every Booking's phase must be what the clock says once the
//! controller is back, whatever it missed while it was down.

use std::time::Duration;

use booking_harness::process::Readiness;
use booking_harness::smtp::{SmtpOptions, SmtpServer};
use booking_shared::api::{Booking, BookingScheduler, Resource};
use booking_shared::time::format_rfc3339;
use booking_tests::e2e::*;
use chrono::Utc;
use kube::api::{Api, ListParams, PostParams};

/// How long after the controller is ready again every phase must be right.
const CONVERGE: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn booking_phases_follow_the_clock_after_a_controller_was_down_across_boundaries() {
    let e = env("restart-phases").await;
    let smtp = SmtpServer::start(&e.dir, SmtpOptions::default())
        .await
        .expect("SMTP server");
    let smtp_port = smtp.port().to_string();
    let smtp_env = [
        ("SMTP_HOST", "127.0.0.1"),
        ("SMTP_PORT", smtp_port.as_str()),
        ("SMTP_SENDER", "booking@example.com"),
        ("SMTP_SECURITY", "none"),
    ];
    let home = e.moto.ec2();
    let analytics = stopped_group(&home, 1, "analytics").await;
    let reports = stopped_group(&home, 1, "reports").await;
    stopped_group(&home, 1, "nightly").await;
    let resources: Api<Resource> = Api::namespaced(e.client.clone(), &e.ns);
    let pp = PostParams::default();
    for (name, tag) in [
        ("ec2.analytics", "analytics"),
        ("ec2.reports", "reports"),
        ("ec2.nightly", "nightly"),
    ] {
        resources
            .create(&pp, &resource(name, "ec2", tag, None))
            .await
            .unwrap();
    }
    let schedulers: Api<BookingScheduler> = Api::namespaced(e.client.clone(), &e.ns);
    let scheduler: BookingScheduler = serde_json::from_value(serde_json::json!({
        "apiVersion": "manager.kotaico.de/v1",
        "kind": "BookingScheduler",
        "metadata": {"name": "every-minute", "namespace": e.ns},
        "spec": {
            "schedule": "* * * * *",
            "duration": 1,
            "finishedBookingsHistoryLimit": 1,
            "bookingTemplate": {"resource_name": "ec2.nightly", "user_id": "cron"},
        },
    }))
    .unwrap();
    schedulers.create(&pp, &scheduler).await.unwrap();

    let now = Utc::now();
    let s = chrono::Duration::seconds;
    let bookings: Api<Booking> = Api::namespaced(e.client.clone(), &e.ns);
    for b in [
        booking("a1", "ec2.analytics", now - s(60), now + s(15)),
        booking("a2", "ec2.analytics", now + s(25), now + s(45)),
        booking("a3", "ec2.analytics", now + s(55), now + s(140)),
        booking("r1", "ec2.reports", now + s(10), now + s(40)),
        booking("r2", "ec2.reports", now + s(40), now + s(150)),
    ] {
        bookings.create(&pp, &b).await.unwrap();
    }

    let admin_port = booking_harness::free_port().unwrap();
    let admin = format!("http://127.0.0.1:{admin_port}/readyz");
    let mut controller = start_controller(&e, admin_port, "before", &smtp_env);
    controller
        .wait_ready(&Readiness::Http(admin.clone()), Duration::from_secs(30))
        .await
        .expect("controller ready");
    wait_for("a1 in progress", CONVERGE, || {
        phases_follow_the_clock(&bookings)
    })
    .await;
    wait_for("analytics running", CONVERGE, || {
        all_in_state(&home, &analytics, "running")
    })
    .await;

    // A rolling update that takes a while: every booking but a3 and r2 crosses a boundary
    // meanwhile, and the scheduler misses a fire.
    controller.stop().expect("SIGTERM");
    // Meanwhile a backup tool restores the scheduler's history: 30 finished bookings, which the
    // scheduler prunes to its limit as soon as the controller is back — while the Booking
    // controller is still working through the relist that announced them.
    let scheduler_label = booking_shared::scheduling::SCHEDULER_LABEL;
    let restored = now - chrono::Duration::hours(2);
    for i in 0..30 {
        let start = restored + chrono::Duration::minutes(i);
        let mut b = booking(
            &format!("every-minute-restored-{i}"),
            "ec2.nightly",
            start,
            start + chrono::Duration::minutes(1),
        );
        b.metadata.labels = Some([(scheduler_label.to_owned(), "every-minute".to_owned())].into());
        bookings.create(&pp, &b).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(70)).await;
    let mut controller = start_controller(&e, admin_port, "after", &smtp_env);
    controller
        .wait_ready(&Readiness::Http(admin), Duration::from_secs(30))
        .await
        .expect("controller ready again");
    wait_for("every phase right after the restart", CONVERGE, || {
        phases_follow_the_clock(&bookings)
    })
    .await;
    wait_for("both groups running for a3 and r2", CONVERGE, || async {
        all_in_state(&home, &analytics, "running").await?;
        all_in_state(&home, &reports, "running").await
    })
    .await;
    // The phases keep following the clock after the restart: the scheduler's next booking
    // starts and ends, the missed fire's booking (if its slot had not ended) too.
    let until = Utc::now() + chrono::Duration::seconds(75);
    while Utc::now() < until {
        wait_for(
            "every phase right, a while after the restart",
            Duration::from_secs(5),
            || phases_follow_the_clock(&bookings),
        )
        .await;
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let scheduled = bookings
        .list(&ListParams::default().labels(&format!(
            "{}=every-minute",
            booking_shared::scheduling::SCHEDULER_LABEL
        )))
        .await
        .unwrap();
    assert!(
        !scheduled.items.is_empty() && scheduled.items.len() <= 2,
        "the scheduler pruned its history to one finished booking and booked after the restart: {:?}",
        scheduled
            .items
            .iter()
            .map(|b| b.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    controller.stop().expect("stop");
}

/// The kill campaign with one replica: SIGKILLs and SIGTERMs at random moments, an API server
/// restart after an etcd compaction; every invariant of `booking_tests::campaign` holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_campaign_one_replica_loses_nothing() {
    let options =
        booking_tests::campaign::Options::new("campaign-one", Duration::from_secs(150), 1);
    let report = booking_tests::campaign::run(&options).await;
    assert!(
        report.violations.is_empty(),
        "{report}\n{}",
        report.violations.join("\n")
    );
    assert!(report.sigkills + report.sigterms >= 3, "{report}");
    assert!(report.apiserver_restarts >= 1, "{report}");
    assert!(report.transitions >= 60, "{report}");
}

/// The kill campaign with two replicas: the leader is killed at random moments; the same
/// invariants, and no AWS write from a replica that does not hold the Lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_campaign_two_replicas_loses_nothing_and_only_the_leader_writes() {
    let options =
        booking_tests::campaign::Options::new("campaign-two", Duration::from_secs(120), 2);
    let report = booking_tests::campaign::run(&options).await;
    assert!(
        report.violations.is_empty(),
        "{report}\n{}",
        report.violations.join("\n")
    );
    assert!(report.sigkills + report.sigterms >= 3, "{report}");
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
    use booking_harness::process::ProcessBuilder;
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
    let crds = crd_files();
    let crds: Vec<&std::path::Path> = crds.iter().map(std::path::PathBuf::as_path).collect();
    cluster.apply_files(&crds).expect("CRDs");
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
        ProcessBuilder::new("booking-webhook", webhook_binary())
            .arg("--tls-cert-file")
            .arg(&cert.cert_path)
            .arg("--tls-key-file")
            .arg(&cert.key_path)
            .arg("--listen-addr")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--admin-addr")
            .arg(format!("127.0.0.1:{admin_port}"))
            .env("KUBECONFIG", plane.kubeconfig_path())
            .env("RUST_LOG", "info,booking_webhook=debug")
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
