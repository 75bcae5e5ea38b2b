//! End to end: the real `booking-controller` binary against a real Kubernetes control plane
//! (kube-apiserver, etcd and kube-controller-manager, shared by the run, with a namespace per
//! test that is also the controller's scope and holds its Lease) and the real moto server.
//! Bookings in the past, now and in the future; instances really change state; lock tags appear
//! and disappear; deleting an active booking stops the group; a monitor discovers groups;
//! describe calls per refresh do not grow with the number of Resources; leader election and
//! failover; a new leader whose first Booking lists fail (through the harness's API proxy).
//!
//! The binary is taken from the target directory (`cargo build -p booking-controller`; `make
//! test` builds every binary of the workspace first). A missing or stale binary fails the test.
//! Run the tests inside `booking-control-plane run -- …` (what `make test` does).

use std::time::{Duration, Instant};

use booking_harness::aws_query::Service;
use booking_harness::kube_proxy::{KubeFault, Method};
use booking_harness::moto;
use booking_harness::process::Readiness;
use booking_shared::api::{Booking, BookingPhase, Resource, ResourceMonitor, ResourceMonitorSpec};
use booking_tests::e2e::*;
use chrono::Utc;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Event;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookings_drive_real_instances_through_the_controller() {
    let e = env("controller-e2e").await;
    let home = e.moto.ec2();
    let away = ec2_in(&e.moto, OTHER_REGION);
    let rds = e.moto.rds();
    let managed = |tag: &'static str| {
        [
            ("resource-booking/managed", "true"),
            ("resource-booking/application", tag),
        ]
    };
    let analytics = stopped_group(&home, 2, "analytics").await;
    // The original's hyphenated keys, in another region, running without a booking.
    let web = moto::seed_ec2_instances(
        &away,
        1,
        &[
            ("resource-booking-managed", "true"),
            ("resource-booking-application", "web"),
        ],
    )
    .await
    .unwrap();
    moto::seed_rds_instance(&rds, "reports-db", &managed("reports"))
        .await
        .unwrap();
    rds.stop_db_instance()
        .db_instance_identifier("reports-db")
        .send()
        .await
        .unwrap();

    let admin_port = booking_harness::free_port().unwrap();
    let admin = format!("127.0.0.1:{admin_port}");
    let mut controller = start_controller(&e, admin_port, "replica-a", &[]);
    controller
        .wait_ready(
            &Readiness::Http(format!("http://{admin}/readyz")),
            Duration::from_secs(30),
        )
        .await
        .expect("controller ready");

    let resources: Api<Resource> = Api::namespaced(e.client.clone(), &e.ns);
    let bookings: Api<Booking> = Api::namespaced(e.client.clone(), &e.ns);
    let pp = PostParams::default();
    // The original's sample Resource (ec2.analytics, empty manual booking), applied unchanged
    // with the real kubectl.
    let sample = booking_tests::shared_dir().join("reference/samples/manager_v1_resource.yaml");
    let out = e
        .cluster
        .kubectl()
        .expect("kubectl")
        .args(["apply", "-n", &e.ns, "-f"])
        .arg(&sample)
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for r in [
        resource("ec2.web", "ec2", "web", Some(OTHER_REGION)),
        resource("rds.reports", "rds", "reports", None),
    ] {
        resources.create(&pp, &r).await.unwrap();
    }
    let now = Utc::now();
    let h = chrono::Duration::hours(1);
    bookings
        .create(&pp, &booking("past", "ec2.analytics", now - h * 2, now - h))
        .await
        .unwrap();
    // As the webhook records its creator (this environment runs the controller alone).
    let mut current = booking(
        "current",
        "ec2.analytics",
        now - chrono::Duration::minutes(1),
        now + h,
    );
    current.metadata.annotations = Some(
        [(
            booking_shared::validation::REQUESTED_BY_ANNOTATION.to_owned(),
            "system:serviceaccount:ci:deployer".to_owned(),
        )]
        .into(),
    );
    bookings.create(&pp, &current).await.unwrap();
    let db_start = now + chrono::Duration::seconds(8);
    let db_end = db_start + chrono::Duration::seconds(6);
    bookings
        .create(&pp, &booking("future-db", "rds.reports", db_start, db_end))
        .await
        .unwrap();
    // Overlaps "current", created later: CONFLICT, naming the winner.
    bookings
        .create(&pp, &booking("late", "ec2.analytics", now, now + h))
        .await
        .unwrap();
    bookings
        .create(&pp, &booking("orphan", "ec2.missing", now - h, now + h))
        .await
        .unwrap();

    // Booking now: the group runs, locked for the booking's user until its end.
    wait_for("analytics running", Duration::from_secs(15), || {
        all_in_state(&home, &analytics, "running")
    })
    .await;
    wait_for(
        "lock tags on analytics",
        Duration::from_secs(10),
        || async {
            let got = instances(&home, &analytics).await;
            let want = (
                "resource-booking/locked-by".to_string(),
                "user-of-current".to_string(),
            );
            if got.iter().all(|(_, tags)| tags.contains(&want)) {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        },
    )
    .await;
    // Unbooked group in the other region (original's tag keys) is stopped.
    wait_for("web stopped", Duration::from_secs(15), || {
        all_in_state(&away, &web, "stopped")
    })
    .await;

    wait_for("booking phases", Duration::from_secs(10), || async {
        let got = (
            phase(&bookings, "past").await,
            phase(&bookings, "current").await,
            phase(&bookings, "future-db").await,
            phase(&bookings, "late").await,
        );
        if got
            == (
                Some(BookingPhase::Finished),
                Some(BookingPhase::InProgress),
                Some(BookingPhase::Scheduled),
                Some(BookingPhase::Conflict),
            )
        {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    })
    .await;
    let late = bookings.get("late").await.unwrap();
    let conflict = late
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Conflict")
        .unwrap();
    assert!(conflict.message.contains("current"), "{conflict:?}");
    let orphan = bookings.get("orphan").await.unwrap().status.unwrap();
    assert!(
        orphan
            .conditions
            .iter()
            .any(|c| c.reason == "ResourceNotFound"),
        "{orphan:?}"
    );
    // The orphan's Resource appears, then goes away: its booking follows both.
    let found = |want: &'static str| {
        let bookings = bookings.clone();
        move || {
            let bookings = bookings.clone();
            async move {
                let status = bookings.get("orphan").await.unwrap().status.unwrap();
                match status
                    .conditions
                    .iter()
                    .find(|c| c.type_ == "ResourceFound")
                {
                    Some(c) if c.status == want => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }
        }
    };
    resources
        .create(&pp, &resource("ec2.missing", "ec2", "missing", None))
        .await
        .unwrap();
    wait_for(
        "orphan finds its Resource",
        Duration::from_secs(10),
        found("True"),
    )
    .await;
    resources
        .delete("ec2.missing", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "orphan loses its Resource",
        Duration::from_secs(10),
        found("False"),
    )
    .await;

    wait_for("analytics status", Duration::from_secs(10), || async {
        let s = resources
            .get("ec2.analytics")
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        let ready = s
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if s.instances == 2
            && s.running == 2
            && ready
            && s.active_booking.as_deref() == Some("current")
            && s.locked_by.as_deref() == Some("user-of-current")
        {
            Ok(())
        } else {
            Err(format!("{s:?}"))
        }
    })
    .await;
    let res = resources.get("ec2.analytics").await.unwrap();
    assert_eq!(
        (
            res.spec.booked_by.as_deref(),
            res.spec.booked_until.as_deref()
        ),
        (Some(""), Some("")),
        "the controller never writes spec (Argo CD sees no drift)"
    );

    // Future booking of the RDS group: started on time, stopped on time.
    let started = {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if db_status(&rds, "reports-db").await == "available" {
                break Utc::now();
            }
            assert!(Instant::now() < deadline, "the DB never started");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let lateness = (started - db_start).num_milliseconds();
    eprintln!("DB seen available {lateness} ms after start_at (polled every 100 ms)");
    assert!(
        (0..1500).contains(&lateness),
        "DB started {lateness} ms after start_at"
    );
    let stopped = {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if db_status(&rds, "reports-db").await == "stopped" {
                break Utc::now();
            }
            assert!(Instant::now() < deadline, "the DB never stopped");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let lateness = (stopped - db_end).num_milliseconds();
    eprintln!("DB seen stopped {lateness} ms after end_at (polled every 100 ms)");
    assert!(
        (0..1500).contains(&lateness),
        "DB stopped {lateness} ms after end_at"
    );
    wait_for("future-db finished", Duration::from_secs(5), || async {
        match phase(&bookings, "future-db").await {
            Some(BookingPhase::Finished) => Ok(()),
            p => Err(format!("{p:?}")),
        }
    })
    .await;

    // Deleting the active booking hands the group to the booking it had rejected (now the
    // first-created booking of that slot); deleting that one too stops the group and removes
    // the locks — no finalizer involved.
    bookings
        .delete("current", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("late takes over", Duration::from_secs(10), || async {
        let got = instances(&home, &analytics).await;
        let want = (
            "resource-booking/locked-by".to_string(),
            "user-of-late".to_string(),
        );
        let p = phase(&bookings, "late").await;
        if p == Some(BookingPhase::InProgress)
            && got
                .iter()
                .all(|(s, tags)| s == "running" && tags.contains(&want))
        {
            Ok(())
        } else {
            Err(format!("{p:?} {got:?}"))
        }
    })
    .await;
    bookings
        .delete("late", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("analytics stopped", Duration::from_secs(15), || {
        all_in_state(&home, &analytics, "stopped")
    })
    .await;
    wait_for("locks removed", Duration::from_secs(10), || async {
        let got = instances(&home, &analytics).await;
        if got
            .iter()
            .all(|(_, tags)| !tags.iter().any(|(k, _)| k.contains("locked")))
        {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    })
    .await;

    // Events for the AWS actions.
    let events: Api<Event> = Api::namespaced(e.client.clone(), &e.ns);
    let listed = events.list(&ListParams::default()).await.unwrap().items;
    // The phase Event of a booking names its creator (the reconciler reads it from its cache).
    let started = listed
        .iter()
        .find(|ev| {
            ev.reason.as_deref() == Some("Started")
                && ev.involved_object.kind.as_deref() == Some("Booking")
                && ev.involved_object.name.as_deref() == Some("current")
        })
        .and_then(|ev| ev.message.clone());
    assert!(
        started
            .as_deref()
            .is_some_and(|m| m.ends_with("(booking created by system:serviceaccount:ci:deployer)")),
        "{started:?}"
    );
    let reasons: Vec<String> = listed.into_iter().filter_map(|ev| ev.reason).collect();
    for want in ["Started", "Stopped", "Locked", "Unlocked", "Conflict"] {
        assert!(
            reasons.iter().any(|r| r == want),
            "no {want} event in {reasons:?}"
        );
    }

    // A monitor discovers a new group (exactly one create) and leaves existing Resources alone.
    let batch = moto::seed_ec2_instances(&home, 1, &managed("batch"))
        .await
        .unwrap();
    let monitors: Api<ResourceMonitor> = Api::namespaced(e.client.clone(), &e.ns);
    let before = resources
        .get("ec2.analytics")
        .await
        .unwrap()
        .metadata
        .resource_version;
    monitors
        .create(
            &pp,
            &ResourceMonitor {
                metadata: ObjectMeta {
                    name: Some("ec2".into()),
                    ..Default::default()
                },
                spec: ResourceMonitorSpec {
                    type_: "ec2".into(),
                    ..Default::default()
                },
                status: None,
            },
        )
        .await
        .unwrap();
    wait_for("ec2.batch created", Duration::from_secs(10), || async {
        match resources.get_opt("ec2.batch").await.unwrap() {
            Some(r)
                if r.spec.tag == "batch"
                    && r.labels()
                        .get("manager.kotaico.de/monitor")
                        .map(String::as_str)
                        == Some("ec2") =>
            {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    wait_for(
        "the unbooked batch group is stopped",
        Duration::from_secs(15),
        || all_in_state(&home, &batch, "stopped"),
    )
    .await;
    wait_for("monitor status", Duration::from_secs(10), || async {
        let s = monitors
            .get("ec2")
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        if s.groups == vec!["analytics", "batch"] && s.last_scan_time.is_some() {
            Ok(())
        } else {
            Err(format!("{s:?}"))
        }
    })
    .await;
    // Pruning (opt-in) deletes the Resource the monitor created once its group is gone.
    monitors
        .patch(
            "ec2",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"prune": true}})),
        )
        .await
        .unwrap();
    home.delete_tags()
        .resources(&batch[0])
        .tags(
            aws_sdk_ec2::types::Tag::builder()
                .key("resource-booking/application")
                .build(),
        )
        .send()
        .await
        .unwrap();
    wait_for("ec2.batch pruned", Duration::from_secs(15), || async {
        match resources.get_opt("ec2.batch").await.unwrap() {
            None => Ok(()),
            Some(_) => Err("still there".into()),
        }
    })
    .await;
    assert!(
        resources.get_opt("ec2.web").await.unwrap().is_some(),
        "not created by the monitor: kept"
    );
    let after = resources.get("ec2.analytics").await.unwrap();
    assert!(
        after.labels().get("manager.kotaico.de/monitor").is_none(),
        "existing Resource untouched"
    );
    assert_eq!(
        after.spec,
        resources.get("ec2.analytics").await.unwrap().spec
    );
    let _ = before;

    // Describe calls per refresh do not grow with the number of Resources: 3 more Resources
    // (each triggers at most one targeted refresh when created), then a window of steady state.
    let per_refresh = |calls: f64, refreshes: f64| calls / refreshes.max(1.0);
    let window = |label: &'static str| {
        let moto = &e.moto;
        let admin = admin.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(3)).await; // settle
            let r0 = metric(
                &admin,
                "booking_controller_inventory_refresh_seconds_count",
                &["type=\"ec2\""],
            )
            .await;
            moto.clear_recording().await.unwrap();
            moto.start_recording().await.unwrap();
            tokio::time::sleep(Duration::from_secs(5)).await;
            let counts = moto.action_counts().await.unwrap();
            let r1 = metric(
                &admin,
                "booking_controller_inventory_refresh_seconds_count",
                &["type=\"ec2\""],
            )
            .await;
            let describes = counts.get(Service::Ec2, "DescribeInstances") as f64;
            eprintln!(
                "{label}: {describes} DescribeInstances over {} EC2 refreshes",
                r1 - r0
            );
            assert!(r1 - r0 >= 2.0, "{label}: refreshes happen on the interval");
            per_refresh(describes, r1 - r0)
        }
    };
    let few = window("3 Resources").await;
    for i in 0..3 {
        resources
            .create(
                &pp,
                &resource(&format!("ec2.extra-{i}"), "ec2", "analytics", None),
            )
            .await
            .unwrap();
    }
    let many = window("6 Resources").await;
    assert!(
        few <= 1.5 && many <= 1.5,
        "one page per refresh: {few} vs {many}"
    );

    // Graceful shutdown releases the Lease.
    let status = controller.stop().expect("stop");
    eprintln!("controller exited: {status:?}");
    let leases: Api<Lease> = Api::namespaced(e.client.clone(), &e.ns);
    let lease = leases.get("booking-controller").await.unwrap();
    assert_eq!(
        lease.spec.unwrap().holder_identity,
        None,
        "lease released on SIGTERM"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_never_both_act_and_fail_over_in_seconds() {
    let e = env("controller-e2e-leader").await;
    let home = e.moto.ec2();
    let ids = moto::seed_ec2_instances(
        &home,
        1,
        &[
            ("resource-booking/managed", "true"),
            ("resource-booking/application", "ha"),
        ],
    )
    .await
    .unwrap();
    let ports = [
        booking_harness::free_port().unwrap(),
        booking_harness::free_port().unwrap(),
    ];
    let admins: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let mut a = start_controller(&e, ports[0], "replica-a", &[]);
    a.wait_ready(
        &Readiness::Http(format!("http://{}/readyz", admins[0])),
        Duration::from_secs(30),
    )
    .await
    .expect("first replica serves");
    // Ready is not leading (a standby is ready too): the second replica starts once the first
    // holds the Lease, else under load it may win the first create.
    wait_for(
        "the first replica leading",
        Duration::from_secs(15),
        || async {
            if leads(&admins[0]).await {
                Ok(())
            } else {
                Err("not leading".into())
            }
        },
    )
    .await;
    let mut b = start_controller(&e, ports[1], "replica-b", &[]);
    b.wait_ready(
        &Readiness::Http(format!("http://{}/healthz", admins[1])),
        Duration::from_secs(30),
    )
    .await
    .expect("second replica serves its admin port");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(leads(&admins[0]).await, "the first replica still leads");
    assert!(!leads(&admins[1]).await, "the standby does not lead");
    assert!(
        http_get(&admins[1], "/readyz")
            .await
            .starts_with("HTTP/1.1 200"),
        "a standby is ready (rolling updates must not wait on it)"
    );

    let resources: Api<Resource> = Api::namespaced(e.client.clone(), &e.ns);
    resources
        .create(
            &PostParams::default(),
            &resource("ec2.ha", "ec2", "ha", None),
        )
        .await
        .unwrap();
    wait_for(
        "unbooked group stopped by the leader",
        Duration::from_secs(15),
        || all_in_state(&home, &ids, "stopped"),
    )
    .await;
    assert_eq!(
        metric(&admins[1], "booking_controller_aws_calls_total", &[]).await,
        0.0,
        "the standby made no AWS call"
    );

    // The leader dies without releasing the Lease; the standby takes over once it expires.
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &a.pid().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let t0 = Instant::now();
    wait_for("standby leads", Duration::from_secs(15), || async {
        if leads(&admins[1]).await {
            Ok(())
        } else {
            Err("not ready".into())
        }
    })
    .await;
    let failover = t0.elapsed();
    eprintln!("failover took {failover:?}");
    assert!(
        failover < Duration::from_secs(10),
        "failover took {failover:?}"
    );

    // The new leader acts: a booking now starts the group.
    let bookings: Api<Booking> = Api::namespaced(e.client.clone(), &e.ns);
    let now = Utc::now();
    bookings
        .create(
            &PostParams::default(),
            &booking("ha-now", "ec2.ha", now, now + chrono::Duration::hours(1)),
        )
        .await
        .unwrap();
    wait_for(
        "new leader starts the group",
        Duration::from_secs(15),
        || all_in_state(&home, &ids, "running"),
    )
    .await;
    let leases: Api<Lease> = Api::namespaced(e.client.clone(), &e.ns);
    let spec = leases
        .get("booking-controller")
        .await
        .unwrap()
        .spec
        .unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("replica-b"));
    assert!(spec.lease_transitions.unwrap_or(0) >= 1);

    // A restart during a booking never stops the booked group: a new leader reconciles only
    // once its caches hold the bookings, so it never reads "no bookings" from an empty cache.
    // Its first lists of Bookings fail, so its Resources are listed seconds before them.
    e.moto.start_recording().await.unwrap();
    e.moto.clear_recording().await.unwrap();
    b.stop().expect("stop");
    let (proxy, mut c) = start_controller_through(
        &e,
        ports[0],
        "replica-c",
        [KubeFault::new(Method::GET, "/bookings", 500)
            .times(3)
            .message("injected: bookings not listed yet")],
    )
    .await;
    c.wait_ready(
        &Readiness::Http(format!("http://{}/readyz", admins[0])),
        Duration::from_secs(30),
    )
    .await
    .expect("a new replica leads");
    let refreshes = || {
        metric(
            &admins[0],
            "booking_controller_inventory_refresh_seconds_count",
            &[],
        )
    };
    // While its Booking lists fail, the new leader has its Resources and their inventory.
    wait_for(
        "the new leader refreshes its inventory",
        Duration::from_secs(15),
        || async {
            match refreshes().await {
                n if n >= 2.0 => Ok(()),
                n => Err(format!("{n} refreshes")),
            }
        },
    )
    .await;
    // Then every injected failure is used up and a Booking request is served.
    wait_for(
        "the Booking lists refused three times, then served",
        Duration::from_secs(30),
        || async {
            let pending = proxy.pending_faults();
            let served = proxy.requests().iter().any(|r| {
                r.method == Method::GET
                    && r.path.contains("/bookings")
                    && !r.injected
                    && r.status == 200
            });
            if pending.is_empty() && served {
                Ok(())
            } else {
                Err(format!("pending {pending:?}, served {served}"))
            }
        },
    )
    .await;
    // Two more refreshes, each followed by reconciles of every Resource, now with the Bookings.
    let cached = refreshes().await;
    wait_for(
        "two refreshes with the Bookings cached",
        Duration::from_secs(15),
        || async {
            match refreshes().await {
                n if n >= cached + 2.0 => Ok(()),
                n => Err(format!("{} refreshes since", n - cached)),
            }
        },
    )
    .await;
    let calls = e.moto.action_counts().await.unwrap();
    assert_eq!(
        calls.get(Service::Ec2, "StopInstances"),
        0,
        "no stop across the restart: {calls:?}"
    );
    all_in_state(&home, &ids, "running")
        .await
        .expect("the booked group still runs");
    c.stop().expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_member_is_retried_alone_with_backoff_while_the_others_run() {
    use booking_harness::proxy::{Fault, FaultProxy};
    let e = env("controller-e2e-faults").await;
    let proxy = FaultProxy::start(&e.moto.endpoint_url())
        .await
        .expect("proxy");
    let home = e.moto.ec2();
    let ids = stopped_group(&home, 3, "flaky").await;
    let bad = ids[1].clone();
    // AWS refuses to start this one twice (a transitional state), then accepts.
    proxy.inject(Fault::incorrect_instance_state("StartInstances", &bad).times(2));

    let port = booking_harness::free_port().unwrap();
    let admin = format!("127.0.0.1:{port}");
    let endpoint = proxy.endpoint_url();
    let mut c = start_controller(
        &e,
        port,
        "replica-a",
        &[("AWS_ENDPOINT_URL", endpoint.as_str())],
    );
    c.wait_ready(
        &Readiness::Http(format!("http://{admin}/readyz")),
        Duration::from_secs(30),
    )
    .await
    .expect("ready");
    let resources: Api<Resource> = Api::namespaced(e.client.clone(), &e.ns);
    let bookings: Api<Booking> = Api::namespaced(e.client.clone(), &e.ns);
    resources
        .create(
            &PostParams::default(),
            &resource("ec2.flaky", "ec2", "flaky", None),
        )
        .await
        .unwrap();
    let now = Utc::now();
    bookings
        .create(
            &PostParams::default(),
            &booking(
                "flaky-now",
                "ec2.flaky",
                now,
                now + chrono::Duration::hours(1),
            ),
        )
        .await
        .unwrap();

    let good = vec![ids[0].clone(), ids[2].clone()];
    wait_for("the healthy members run", Duration::from_secs(10), || {
        all_in_state(&home, &good, "running")
    })
    .await;
    wait_for(
        "the failure is reported",
        Duration::from_secs(10),
        || async {
            let s = resources
                .get("ec2.flaky")
                .await
                .unwrap()
                .status
                .unwrap_or_default();
            match s.conditions.iter().find(|c| c.type_ == "Synced") {
                Some(c)
                    if c.status == "False"
                        && c.message.contains(&bad)
                        && c.message.contains("IncorrectInstanceState") =>
                {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    wait_for(
        "the failing member runs after backoff",
        Duration::from_secs(20),
        || all_in_state(&home, std::slice::from_ref(&bad), "running"),
    )
    .await;
    wait_for("Ready again", Duration::from_secs(10), || async {
        let s = resources
            .get("ec2.flaky")
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        let ready = s
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let synced = s
            .conditions
            .iter()
            .any(|c| c.type_ == "Synced" && c.status == "True");
        if ready && synced && s.running == 3 {
            Ok(())
        } else {
            Err(format!("{s:?}"))
        }
    })
    .await;

    // No hot loop: the refused member was tried in the batch, alone, and once more after the
    // backoff — with seconds between the last refusal and the retry.
    let starts: Vec<_> = proxy
        .requests()
        .into_iter()
        .filter(|r| r.action.as_deref() == Some("StartInstances") && r.resource_ids.contains(&bad))
        .collect();
    assert!(
        starts.len() <= 4,
        "{} StartInstances naming {bad}: {starts:?}",
        starts.len()
    );
    let refused: Vec<_> = starts.iter().filter(|r| r.injected.is_some()).collect();
    assert_eq!(refused.len(), 2);
    let accepted = starts
        .iter()
        .find(|r| r.injected.is_none())
        .expect("a successful start");
    let gap = accepted.since_start - refused[1].since_start;
    assert!(gap >= Duration::from_secs(4), "retried after {gap:?}");
    let events: Api<Event> = Api::namespaced(e.client.clone(), &e.ns);
    let notes: Vec<String> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|ev| ev.reason.as_deref() == Some("StartFailed"))
        .filter_map(|ev| ev.message)
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains(&bad) && n.contains("IncorrectInstanceState")),
        "{notes:?}"
    );
    c.stop().expect("stop");
}

/// The real binary, in real time: a per-minute scheduler creates exactly one booking per minute,
/// starting on the minute; killing the controller between two fires and starting a new one
/// creates no duplicate booking and no second email.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_minute_scheduler_books_each_minute_once_across_a_restart() {
    use booking_harness::smtp::{SmtpOptions, SmtpServer};
    use booking_shared::api::BookingScheduler;
    use booking_shared::scheduling::SCHEDULER_LABEL;

    let e = env("controller-e2e-scheduler").await;
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
    // A group for the bookings: one stopped instance. Back-to-back bookings of the scheduler
    // must hand it over without stopping it in between.
    let home = e.moto.ec2();
    stopped_group(&home, 1, "analytics").await;
    Api::<Resource>::namespaced(e.client.clone(), &e.ns)
        .create(
            &PostParams::default(),
            &resource("ec2.analytics", "ec2", "analytics", None),
        )
        .await
        .unwrap();
    e.moto.start_recording().await.unwrap();

    let schedulers: Api<BookingScheduler> = Api::namespaced(e.client.clone(), &e.ns);
    let scheduler: BookingScheduler = serde_json::from_value(serde_json::json!({
        "apiVersion": "manager.kotaico.de/v1",
        "kind": "BookingScheduler",
        "metadata": {"name": "every-minute", "namespace": e.ns},
        "spec": {
            "schedule": "* * * * *",
            "duration": 1,
            // A lead time as long as the booking: the email is due at its start.
            "bookingTemplate": {
                "resource_name": "ec2.analytics",
                "user_id": "ann",
                "notifications": [{"type": "email", "recipient": "ann@example.com", "leadMinutes": 1}],
            },
        },
    }))
    .unwrap();
    schedulers
        .create(&PostParams::default(), &scheduler)
        .await
        .unwrap();

    let admin = booking_harness::free_port().unwrap();
    let mut controller = start_controller(&e, admin, "sched-a", &smtp_env);
    let bookings: Api<Booking> = Api::namespaced(e.client.clone(), &e.ns);
    let selector = ListParams::default().labels(&format!("{SCHEDULER_LABEL}=every-minute"));
    let created = || async {
        bookings
            .list(&selector)
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    };
    wait_for(
        "the first scheduled booking",
        Duration::from_secs(75),
        || async {
            match created().await.len() {
                0 => Err("none yet".into()),
                _ => Ok(()),
            }
        },
    )
    .await;
    let first = created().await.remove(0);
    let start = chrono::DateTime::parse_from_rfc3339(&first.spec.start_at).unwrap();
    assert_eq!(
        start.timestamp() % 60,
        0,
        "start_at on the minute: {}",
        first.spec.start_at
    );
    assert_eq!(
        first.name_any(),
        format!("every-minute-{}", start.format("%Y%m%d%H%M"))
    );
    let created_at = creation_time(&first);
    let lag = created_at - start.with_timezone(&Utc);
    assert!(
        lag < chrono::Duration::seconds(3),
        "created at the fire time, not later: {lag}"
    );
    smtp.wait_for_messages(1, Duration::from_secs(20))
        .await
        .expect("the first booking's email");

    // Kill the controller between fires and start a new one.
    controller.stop().expect("stop");
    let mut restarted = start_controller(&e, admin, "sched-b", &smtp_env);
    let second_name = format!(
        "every-minute-{}",
        (start + chrono::Duration::minutes(1)).format("%Y%m%d%H%M")
    );
    wait_for(
        "the second scheduled booking",
        Duration::from_secs(75),
        || async {
            if created().await.iter().any(|b| b.name_any() == second_name) {
                Ok(())
            } else {
                Err("not yet".into())
            }
        },
    )
    .await;
    smtp.wait_for_messages(2, Duration::from_secs(20))
        .await
        .expect("the second booking's email");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let names: Vec<String> = created().await.iter().map(|b| b.name_any()).collect();
    assert_eq!(
        names.len(),
        2,
        "one booking per minute, no duplicate: {names:?}"
    );
    let mails = smtp.messages().unwrap();
    assert_eq!(mails.len(), 2, "one email per booking, none twice");
    // The group ran through the handover at the second fire: started, never stopped.
    let counts = e.moto.action_counts().await.unwrap();
    assert!(
        counts.get(Service::Ec2, "StartInstances") >= 1,
        "the group was started"
    );
    assert_eq!(
        counts.get(Service::Ec2, "StopInstances"),
        0,
        "no stop between back-to-back bookings of the scheduler"
    );
    restarted.stop().expect("stop");
}
