//! Leadership under faults, on the real control plane and moto: two replicas, each talking to
//! the API server through its own [`KubeProxy`] and to AWS through its own recording
//! [`FaultProxy`]. A leader whose Lease calls stall stops writing to AWS before the standby can
//! take over; a leader told to stop finishes its reconcile in flight, then releases the Lease
//! so that the standby takes over at once instead of after the lease duration.

use std::time::{Duration, SystemTime};

use booking_harness::kube_proxy::{KubeFault, KubeProxy, Upstream};
use booking_harness::proxy::{FaultProxy, ProxiedRequest};
use booking_harness::{free_port, wait_for};
use booking_shared::api::{Booking, Resource};
use booking_tests::e2e::*;
use chrono::Utc;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};

/// The Lease both replicas compete for (the controller's default name).
const LEASE: &str = "booking-controller";

/// AWS calls that change something.
fn is_write(q: &ProxiedRequest) -> bool {
    matches!(
        q.action.as_deref(),
        Some(
            "StartInstances"
                | "StopInstances"
                | "CreateTags"
                | "DeleteTags"
                | "StartDBInstance"
                | "StopDBInstance"
                | "AddTagsToResource"
                | "RemoveTagsFromResource"
        )
    )
}

/// One replica: its API proxy, its AWS recording proxy, its admin address and the process.
struct Replica {
    kube: KubeProxy,
    aws: FaultProxy,
    admin: String,
    process: booking_harness::process::ManagedProcess,
}

async fn replica(e: &Env, identity: &str, extra: &[(&str, &str)]) -> Replica {
    let kube = KubeProxy::start(
        &e.dir,
        &Upstream::from_kubeconfig(e.cluster.kubeconfig_path()).unwrap(),
    )
    .await
    .expect("API proxy");
    let aws = FaultProxy::start(&e.moto.endpoint_url())
        .await
        .expect("AWS proxy");
    let port = free_port().unwrap();
    let kubeconfig = kube.kubeconfig_path().display().to_string();
    let aws_env = aws.env();
    let mut env: Vec<(&str, &str)> = vec![("KUBECONFIG", kubeconfig.as_str())];
    env.extend(aws_env.iter().map(|(k, v)| (*k, v.as_str())));
    env.extend_from_slice(extra);
    let process = start_controller(e, port, identity, &env);
    Replica {
        kube,
        aws,
        admin: format!("127.0.0.1:{port}"),
        process,
    }
}

/// The instant process `pid` exits (turns into a zombie, or is gone once reaped), seen by a
/// thread of its own that looks every 2 ms: an API call of the test that takes long under load
/// does not delay it. `None` when it still runs after `within`.
fn watch_exit(pid: u32, within: Duration) -> std::thread::JoinHandle<Option<SystemTime>> {
    std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + within;
        while std::time::Instant::now() < deadline {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).map(|stat| {
                // `pid (comm) S …`: the state follows the command's closing parenthesis.
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.trim_start().chars().next())
            });
            if !matches!(state, Ok(Some(c)) if c != 'Z' && c != 'X') {
                return Some(SystemTime::now());
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        None
    })
}

/// The Lease's holder and acquire time, `None` holder when it is free or absent.
async fn holder(leases: &Api<Lease>) -> (Option<String>, Option<SystemTime>) {
    let spec = leases
        .get_opt(LEASE)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec);
    let holder = spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .filter(|h| !h.is_empty());
    (
        holder,
        spec.and_then(|s| s.acquire_time)
            .map(|t| SystemTime::from(t.0)),
    )
}

async fn wait_holder(leases: &Api<Lease>, who: &str, within: Duration) {
    wait_for(&format!("{who} holding the Lease"), within, || async {
        match holder(leases).await.0 {
            Some(h) if h == who => Ok(()),
            other => Err(format!("holder {other:?}")),
        }
    })
    .await;
}

/// The leader's Lease calls stall (its API proxy holds every `/leases/` request unanswered,
/// while everything else it asks goes through): the standby takes the Lease over once it has
/// seen no change of it for the lease duration, and from that moment on the old leader's AWS
/// proxy records no write at all, although bookings that start right then keep demanding
/// starts and lock tags (which the new leader makes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lease_calls_stall_writes_nothing_once_the_standby_took_over() {
    let e = env("leader-stall").await;
    let home = e.moto.ec2();
    let first = stopped_group(&home, 2, "first").await;
    let second = stopped_group(&home, 2, "second").await;
    let pp = PostParams::default();
    let resources: Api<Resource> = Api::namespaced(e.client.clone(), &e.ns);
    for tag in ["first", "second"] {
        resources
            .create(&pp, &resource(&format!("ec2.{tag}"), "ec2", tag, None))
            .await
            .unwrap();
    }
    let leases: Api<Lease> = Api::namespaced(e.client.clone(), &e.ns);
    let mut a = replica(&e, "replica-a", &[]).await;
    wait_holder(&leases, "replica-a", Duration::from_secs(20)).await;
    let mut b = replica(&e, "replica-b", &[]).await;
    wait_for("replica-b standing by", Duration::from_secs(20), || async {
        match try_http_get(&b.admin, "/metrics").await {
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        }
    })
    .await;

    // Bookings that start while the old leader's Lease calls stall: one about when its lease
    // would end, one well after the standby took over.
    let bookings: Api<Booking> = Api::namespaced(e.client.clone(), &e.ns);
    let now = Utc::now();
    let s = chrono::Duration::seconds;
    bookings
        .create(
            &pp,
            &booking("early", "ec2.first", now + s(3), now + s(600)),
        )
        .await
        .unwrap();
    bookings
        .create(
            &pp,
            &booking("late", "ec2.second", now + s(8), now + s(600)),
        )
        .await
        .unwrap();
    a.kube
        .inject(KubeFault::stall("/leases/", Duration::from_secs(60)));
    let stalled_at = SystemTime::now();
    // The old leader's exit is watched meanwhile: it must stop before the takeover.
    let a_exit = watch_exit(a.process.pid(), Duration::from_secs(25));

    // The takeover: the first moment the Lease is seen held by B, or its acquire time when that
    // is earlier (B's clock at the start of the winning attempt, before the write itself).
    let mut seen = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        let polled = SystemTime::now();
        if let (Some(h), acquired) = holder(&leases).await
            && h == "replica-b"
        {
            let acquired = acquired.unwrap_or(polled);
            seen = Some(polled.min(acquired));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took_over = seen.expect("replica-b took the Lease over within 20 s of the stall");
    assert!(
        took_over.duration_since(stalled_at).unwrap_or_default() >= Duration::from_secs(2),
        "the standby waited for the lease duration without a change"
    );

    let exited_at = a_exit.join().expect("exit watch").unwrap_or_else(|| {
        panic!(
            "the old leader still ran 25 s after its Lease calls stalled\n{}",
            a.process.log_tail(30)
        )
    });
    assert!(
        exited_at <= took_over,
        "the old leader exited at {exited_at:?}, after the standby took over at {took_over:?}\n{}",
        a.process.log_tail(30)
    );
    let status = a
        .process
        .try_exit_status()
        .expect("exit status")
        .expect("the old leader has exited");
    assert!(
        !status.success(),
        "a lost leadership is an error exit: {status:?}"
    );
    let log = std::fs::read_to_string(a.process.stderr_path()).unwrap_or_default()
        + &std::fs::read_to_string(a.process.stdout_path()).unwrap_or_default();
    assert!(
        log.contains("leadership lost") && log.contains("renew deadline"),
        "the old leader says why it stopped:\n{log}"
    );

    wait_for("both groups running", Duration::from_secs(30), || async {
        all_in_state(&home, &first, "running").await?;
        all_in_state(&home, &second, "running").await
    })
    .await;
    let late_writes: Vec<ProxiedRequest> = a
        .aws
        .requests()
        .into_iter()
        .filter(|q| is_write(q) && q.at >= took_over)
        .collect();
    assert!(
        late_writes.is_empty(),
        "the old leader wrote to AWS after the standby took over at {took_over:?}: {late_writes:#?}\n{}",
        a.process.log_tail(40)
    );
    let b_writes = b.aws.requests().into_iter().filter(is_write).count();
    assert!(
        b_writes > 0,
        "the bookings demanded writes, made by the new leader"
    );
    a.kube.clear_faults();
    let _ = a.process.stop();
    b.process.stop().expect("stop");
}

/// SIGTERM to the leader while its StartInstances is in flight (its AWS proxy holds the call
/// for 4 s): the call still completes, the group runs, the process exits cleanly, and the Lease
/// — 30 s long — is released, so the standby holds it within a few seconds of the exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_told_to_stop_finishes_its_reconcile_then_releases_the_lease() {
    let e = env("leader-drain").await;
    let home = e.moto.ec2();
    let group = stopped_group(&home, 2, "drained").await;
    let pp = PostParams::default();
    Api::<Resource>::namespaced(e.client.clone(), &e.ns)
        .create(&pp, &resource("ec2.drained", "ec2", "drained", None))
        .await
        .unwrap();
    let long_lease = [
        ("LEASE_DURATION_SECONDS", "30"),
        ("LEASE_RENEW_DEADLINE_SECONDS", "20"),
        ("LEASE_RENEW_SECONDS", "1"),
    ];
    let leases: Api<Lease> = Api::namespaced(e.client.clone(), &e.ns);
    let a = replica(&e, "drain-a", &long_lease).await;
    wait_holder(&leases, "drain-a", Duration::from_secs(20)).await;
    let mut b = replica(&e, "drain-b", &long_lease).await;
    a.aws.delay("StartInstances", Duration::from_secs(4), 1);

    let now = Utc::now();
    let s = chrono::Duration::seconds;
    Api::<Booking>::namespaced(e.client.clone(), &e.ns)
        .create(
            &pp,
            &booking("drain", "ec2.drained", now + s(2), now + s(600)),
        )
        .await
        .unwrap();
    wait_for(
        "the leader's StartInstances held",
        Duration::from_secs(20),
        || async {
            if a.aws.pending_delays().is_empty() {
                Ok(())
            } else {
                Err("no StartInstances yet".into())
            }
        },
    )
    .await;

    let Replica {
        aws: a_aws,
        mut process,
        ..
    } = a;
    process.terminate();
    let signalled = std::time::Instant::now();
    let status = loop {
        if let Some(status) = process.try_exit_status().expect("exit status") {
            break status;
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(25),
            "the leader still runs 25 s after SIGTERM\n{}",
            process.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let exited = SystemTime::now();
    assert!(
        status.success(),
        "the leader exits cleanly after its drain: {status:?}\n{}",
        process.log_tail(40)
    );
    let starts: Vec<ProxiedRequest> = a_aws
        .requests()
        .into_iter()
        .filter(|q| q.action.as_deref() == Some("StartInstances"))
        .collect();
    assert!(
        starts.iter().any(|q| q.status == 200),
        "the StartInstances in flight was answered before the exit: {starts:#?}"
    );
    all_in_state(&home, &group, "running")
        .await
        .expect("the drained start took effect");
    wait_holder(&leases, "drain-b", Duration::from_secs(8)).await;
    let handed = SystemTime::now().duration_since(exited).unwrap_or_default();
    assert!(
        handed < Duration::from_secs(10),
        "the standby took over {handed:?} after the exit: the Lease (30 s) was released"
    );
    b.process.stop().expect("stop");
}
