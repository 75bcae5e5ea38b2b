//! The webhook's admission port under shutdown, foreign clients, abuse and a failing watch: the
//! real `booking-webhook` binary, watching the run's shared control plane (directly or through
//! the harness's fault-injecting API proxy), called by clients written here with hyper and
//! rustls over HTTP/1.1 and HTTP/2, with certificates made by the harness.
//!
//! The webhook is not registered with the API server here (its reviews come from these clients),
//! so the shared control plane is safe to use.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use booking_harness::kube_proxy::{KubeFault, KubeProxy, Method, Upstream};
use booking_harness::process::{ManagedProcess, Readiness};
use booking_harness::tls::{ServerCert, TestCa};
use booking_harness::{TestDir, control_plane::TestCluster, free_port, wait_for};
use booking_tests::admission_client::*;
use booking_tests::e2e::webhook_process;
use bytes::Bytes;

/// A running webhook: its admission and admin addresses, the CA of its serving certificate.
struct Hook {
    process: ManagedProcess,
    addr: SocketAddr,
    admin: SocketAddr,
    ca: TestCa,
    ns: String,
    dir: TestDir,
}

/// Starts the webhook with `args` against the shared control plane (or `kubeconfig`), and waits
/// until it is ready.
async fn start_hook(
    label: &str,
    args: &[&str],
    kubeconfig: Option<&std::path::Path>,
    cluster: &TestCluster,
) -> Hook {
    let dir = TestDir::new(label).expect("a test directory");
    let ca = TestCa::new(&dir, "webhook").expect("a CA");
    let cert: ServerCert = ca
        .issue_server_cert("booking-webhook", &["127.0.0.1"])
        .expect("a serving certificate");
    let kubeconfig = kubeconfig.unwrap_or(cluster.kubeconfig_path());
    // Free ports are picked, not reserved: another process of the machine may take one first,
    // so a webhook that cannot bind is started again on others (twice at most).
    let mut attempt = 0;
    let (process, port, admin_port) = loop {
        attempt += 1;
        let port = free_port().unwrap();
        let admin_port = free_port().unwrap();
        let mut process = webhook_process(&cert, port, admin_port, kubeconfig)
            .args(args.iter().copied())
            .spawn(&dir)
            .expect("booking-webhook starts");
        let ready = process
            .wait_ready(
                &Readiness::Http(format!("http://127.0.0.1:{admin_port}/readyz")),
                Duration::from_secs(60),
            )
            .await;
        match ready {
            Ok(()) => break (process, port, admin_port),
            Err(_)
                if attempt < 3
                    && std::fs::read_to_string(process.stderr_path())
                        .unwrap_or_default()
                        .contains("Address already in use") => {}
            Err(e) => panic!("the webhook becomes ready: {e}"),
        }
    };
    wait_for("/readyz 200", Duration::from_secs(30), || async move {
        match admin_get(SocketAddr::from(([127, 0, 0, 1], admin_port)), "/readyz").await {
            Ok((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    Hook {
        process,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        admin: SocketAddr::from(([127, 0, 0, 1], admin_port)),
        ca,
        ns: cluster.namespace().to_owned(),
        dir,
    }
}

async fn shared_cluster(label: &str) -> TestCluster {
    let cluster = TestCluster::shared(label)
        .await
        .expect("the run's shared control plane");
    cluster.apply_shipped_crds().expect("CRDs applied");
    cluster
}

/// A dry-run review of a free one-hour slot `n` hours from a fixed future day.
fn real_review(ns: &str, n: u64) -> Bytes {
    let day = chrono::DateTime::parse_from_rfc3339("2031-05-01T00:00:00Z").unwrap();
    let start = day + chrono::Duration::hours(i64::try_from(n % 10_000).unwrap());
    let end = start + chrono::Duration::hours(1);
    let object = booking_object(
        ns,
        &format!("real-{n}"),
        "ec2.real",
        &start.to_rfc3339(),
        &end.to_rfc3339(),
    );
    Bytes::from(review(&object, "ann", true))
}

async fn readyz(admin: SocketAddr) -> Result<u16, String> {
    admin_get(admin, "/readyz").await.map(|(s, _)| s)
}

// === 5: the drain ============================================================================

/// SIGTERM while a client keeps sending reviews, over one kept HTTP/2 connection and over new
/// HTTP/1.1 connections: `/readyz` answers 503 at once, every review is answered through the
/// drain period, then the webhook stops accepting and exits cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_fails_readyz_at_once_and_reviews_are_answered_through_the_drain() {
    let cluster = shared_cluster("webhook-drain").await;
    let drain = Duration::from_secs(4);
    let mut hook = start_hook(
        "webhook-drain",
        &["--drain-seconds", "4", "--shutdown-grace-seconds", "5"],
        None,
        &cluster,
    )
    .await;
    let h2_config = tls_config(&hook.ca, None, &[b"h2"]);
    let h1_config = tls_config(&hook.ca, None, &[b"http/1.1"]);
    let kept = h2(hook.addr, h2_config)
        .await
        .expect("an HTTP/2 connection");

    // The load: reviews back to back, alternating the kept connection and new ones; every
    // outcome with its instant.
    let stop = Arc::new(AtomicBool::new(false));
    let (addr, ns) = (hook.addr, hook.ns.clone());
    let load = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut log = Vec::new();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let body = real_review(&ns, n);
                let answer = if n.is_multiple_of(2) {
                    kept.post("/validate", body).await
                } else {
                    h1_post(addr, h1_config.clone(), "/validate", body).await
                };
                let ok = matches!(&answer, Ok((200, b)) if allowed(b) == Some(true));
                log.push((
                    Instant::now(),
                    n.is_multiple_of(2),
                    ok,
                    format!("{answer:?}"),
                ));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            log
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;

    let term = Instant::now();
    hook.process.terminate();
    // /readyz turns 503 at once and stays so through the drain.
    let mut first_503 = None;
    let mut statuses = Vec::new();
    while term.elapsed() < drain - Duration::from_millis(500) {
        let status = readyz(hook.admin).await;
        if status == Ok(503) && first_503.is_none() {
            first_503 = Some(term.elapsed());
        }
        statuses.push((term.elapsed(), status));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let first_503 = first_503.unwrap_or_else(|| panic!("/readyz never answered 503: {statuses:?}"));
    assert!(
        first_503 < Duration::from_millis(500),
        "/readyz answered 503 only {first_503:?} after SIGTERM: {statuses:?}"
    );
    let after: Vec<_> = statuses
        .iter()
        .filter(|(at, _)| *at > first_503)
        .filter(|(_, s)| *s != Ok(503))
        .collect();
    assert!(
        after.is_empty(),
        "/readyz answered otherwise in the drain: {after:?}"
    );
    stop.store(true, Ordering::Relaxed);
    let log = load.await.unwrap();

    // Every review sent before the drain's end was answered, on both kinds of connection.
    let drained: Vec<_> = log
        .iter()
        .filter(|(at, ..)| *at >= term && *at < term + drain - Duration::from_millis(500))
        .collect();
    let failed: Vec<_> = log
        .iter()
        .filter(|(at, ..)| *at < term + drain - Duration::from_millis(500))
        .filter(|(_, _, ok, _)| !ok)
        .collect();
    assert!(
        failed.is_empty(),
        "reviews lost before the drain ended: {failed:?}"
    );
    let kept_n = drained.iter().filter(|(_, kept, ..)| *kept).count();
    let new_n = drained.len() - kept_n;
    assert!(
        kept_n >= 10 && new_n >= 10,
        "reviews answered in the drain: {kept_n} on the kept connection, {new_n} on new ones"
    );

    // Then it stops accepting and exits by itself, cleanly.
    let status = hook
        .process
        .wait_exit(drain + Duration::from_secs(10))
        .await
        .unwrap()
        .expect("the webhook exits after the drain");
    assert!(status.success(), "exit status {status:?}");
    assert!(
        h1_post(
            hook.addr,
            tls_config(&hook.ca, None, &[b"http/1.1"]),
            "/validate",
            real_review(&hook.ns, 0)
        )
        .await
        .is_err(),
        "no longer accepting"
    );
    eprintln!(
        "drain: /readyz 503 after {first_503:?}; {} reviews answered in the drain ({kept_n} kept HTTP/2, {new_n} new HTTP/1.1)",
        drained.len()
    );
    drop(hook.dir);
}

// === 6: the API server's client certificate =================================================

/// With `--client-ca-file`, a TLS client without a certificate, or with one from another CA, is
/// refused at the handshake; one with a certificate from that CA is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_ca_option_refuses_clients_without_a_certificate_from_that_ca() {
    let cluster = shared_cluster("webhook-client-ca").await;
    let dir = TestDir::new("webhook-client-ca-certs").unwrap();
    let apiserver_ca = TestCa::new(&dir, "apiserver-clients").unwrap();
    let apiserver = apiserver_ca.issue_client_cert("kube-apiserver").unwrap();
    let stranger_ca = TestCa::new(&dir, "stranger").unwrap();
    let stranger = stranger_ca.issue_client_cert("stranger").unwrap();
    let ca_file = apiserver_ca.cert_path().display().to_string();
    let hook = start_hook(
        "webhook-client-ca",
        &["--client-ca-file", &ca_file],
        None,
        &cluster,
    )
    .await;
    let review = || real_review(&hook.ns, 1);
    for (who, client) in [
        ("no certificate", None),
        ("another CA's certificate", Some(&stranger)),
    ] {
        for alpn in [&b"http/1.1"[..], &b"h2"[..]] {
            let config = tls_config(&hook.ca, client, &[alpn]);
            let answer = if alpn == b"h2" {
                match h2(hook.addr, config).await {
                    Ok(c) => c.post("/validate", review()).await,
                    Err(e) => Err(e),
                }
            } else {
                h1_post(hook.addr, config, "/validate", review()).await
            };
            let error = answer.expect_err(&format!("a client with {who} is refused"));
            eprintln!("{who} over {}: {error}", String::from_utf8_lossy(alpn));
        }
    }
    for alpn in [&b"http/1.1"[..], &b"h2"[..]] {
        let config = tls_config(&hook.ca, Some(&apiserver), &[alpn]);
        let (status, body) = if alpn == b"h2" {
            h2(hook.addr, config)
                .await
                .unwrap()
                .post("/validate", review())
                .await
                .unwrap()
        } else {
            h1_post(hook.addr, config, "/validate", review())
                .await
                .unwrap()
        };
        assert_eq!((status, allowed(&body)), (200, Some(true)), "{body:?}");
    }
}

// === 7: bounded under abuse =================================================================

/// Flood counters.
#[derive(Default)]
struct Flood {
    connections_opened: AtomicU64,
    sent: AtomicU64,
    answered: AtomicU64,
    refused: AtomicU64,
}

/// A 4 MiB fake review: a booking whose object carries a 4 MiB annotation, of a kind named
/// `kind` (unknown kinds included).
fn big_review(ns: &str, kind: &str, n: u64) -> Bytes {
    let mut object = booking_object(
        ns,
        &format!("big-{n}"),
        "ec2.flood",
        "2031-06-01T00:00:00Z",
        "2031-06-01T01:00:00Z",
    );
    object["kind"] = kind.into();
    // Short keys in a map: what parses into the most memory per byte, short of the size limit.
    let filler: serde_json::Map<String, serde_json::Value> = (0..180_000)
        .map(|i| (format!("k{i:06}"), serde_json::Value::from(i)))
        .collect();
    object["metadata"]["annotations"] = serde_json::Value::Object(filler);
    let mut body = review(&object, "mallory", false);
    body.truncate(4 * 1024 * 1024 - 1);
    if body.len() < 4 * 1024 * 1024 - 4096 {
        // Whatever was cut, the body stays close to the limit.
        body.resize(4 * 1024 * 1024 - 1, b' ');
    }
    Bytes::from(body)
}

/// Many connections, many HTTP/2 streams, 4 MiB bodies and fake reviews of made-up kinds, for
/// about 20 s: the webhook's peak RSS stays under the memory limit of the shipped Deployment,
/// real reviews on the API server's connection are answered within a bound throughout, the
/// connections beyond the limit wait, and the metrics' kinds stay a closed set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_stays_under_the_memory_limit_and_real_reviews_are_still_answered() {
    const MAX_CONNECTIONS: usize = 64;
    // Below the API server's timeout for the webhook in the shipped configurations (5 s).
    const REAL_REVIEW_BOUND: Duration = Duration::from_secs(3);
    let limit_mib = shipped_memory_limit_mib();
    let cluster = shared_cluster("webhook-flood").await;
    let max = MAX_CONNECTIONS.to_string();
    // The shipped limits but a smaller connection cap, so that the test can exceed it quickly.
    let hook = start_hook(
        "webhook-flood",
        &["--max-connections", &max],
        None,
        &cluster,
    )
    .await;
    let pid = hook.process.pid();
    let rss_before = proc_status_mib(pid, "VmRSS");
    let h2_config = tls_config(&hook.ca, None, &[b"h2"]);
    let h1_config = tls_config(&hook.ca, None, &[b"http/1.1"]);

    let stop = Arc::new(AtomicBool::new(false));
    let flood = Arc::new(Flood::default());
    let mut tasks = Vec::new();

    // Real reviews, one every 100 ms, each timed; on a thread and runtime of their own, as the
    // API server is a process of its own (the flood's clients do not slow it down).
    let real = {
        let (stop, ns) = (stop.clone(), hook.ns.clone());
        let (addr, config) = (hook.addr, h2_config.clone());
        let (connected_tx, connected) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(async move {
                    // The API server's connection, open before the flood.
                    let apiserver = h2(addr, config).await.unwrap();
                    connected_tx.send(()).unwrap();
                    let mut latencies = Vec::new();
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        let started = Instant::now();
                        let answer = tokio::time::timeout(
                            REAL_REVIEW_BOUND * 4,
                            apiserver.post("/validate", real_review(&ns, n)),
                        )
                        .await;
                        let took = started.elapsed();
                        let ok = matches!(&answer, Ok(Ok((200, b))) if allowed(b) == Some(true));
                        latencies.push((
                            took,
                            ok,
                            format!("{:?}", answer.map(|a| a.map(|(s, _)| s))),
                        ));
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    latencies
                })
        });
        connected
            .recv()
            .expect("the API server's connection is open");
        thread
    };

    // 1. Connections: twice the limit, held open idle.
    let mut held = Vec::new();
    let mut handshakes = Vec::new();
    for _ in 0..MAX_CONNECTIONS * 2 {
        let config = h1_config.clone();
        let addr = hook.addr;
        handshakes.push(tokio::spawn(async move {
            tokio::time::timeout(Duration::from_secs(3), connect_tls(addr, config)).await
        }));
    }
    for h in handshakes {
        if let Ok(Ok(Ok(conn))) = h.await {
            held.push(conn);
        }
    }
    flood
        .connections_opened
        .store(held.len() as u64, Ordering::Relaxed);
    assert!(
        held.len() < MAX_CONNECTIONS,
        "{} TLS connections were accepted at once; the limit is {MAX_CONNECTIONS} (one held by the API server's)",
        held.len()
    );
    drop(held);

    // 2. Streams: HTTP/2 connections each opening as many streams of 4 MiB bodies as it may,
    //    and small fake reviews of made-up kinds, for 15 s.
    let started = Instant::now();
    for c in 0..12u64 {
        let (stop, flood, config, addr, ns) = (
            stop.clone(),
            flood.clone(),
            h2_config.clone(),
            hook.addr,
            hook.ns.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let Ok(conn) = h2(addr, config).await else {
                return;
            };
            let big = big_review(
                &ns,
                if c.is_multiple_of(2) {
                    "Booking"
                } else {
                    "Evil"
                },
                c,
            );
            let mut streams = Vec::new();
            for s in 0..64u64 {
                let (conn, stop, flood, big, ns) = (
                    conn.clone(),
                    stop.clone(),
                    flood.clone(),
                    big.clone(),
                    ns.clone(),
                );
                streams.push(tokio::spawn(async move {
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        i += 1;
                        let body = if (s + i).is_multiple_of(4) {
                            big.clone()
                        } else {
                            let mut o = booking_object(&ns, "fake", "ec2.flood", "x", "y");
                            o["kind"] = format!("Kind{c}x{s}x{i}").into();
                            Bytes::from(review(&o, &format!("user-{i}"), false))
                        };
                        flood.sent.fetch_add(1, Ordering::Relaxed);
                        match tokio::time::timeout(
                            Duration::from_secs(15),
                            conn.post("/validate", body),
                        )
                        .await
                        {
                            Ok(Ok((200, _))) => flood.answered.fetch_add(1, Ordering::Relaxed),
                            _ => flood.refused.fetch_add(1, Ordering::Relaxed),
                        };
                    }
                }));
            }
            for s in streams {
                let _ = s.await;
            }
        }));
    }
    let mut peak_rss = 0f64;
    while started.elapsed() < Duration::from_secs(15) {
        peak_rss = peak_rss.max(proc_status_mib(pid, "VmRSS"));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let latencies = real.join().unwrap();
    let hwm = proc_status_mib(pid, "VmHWM");

    let (sent, answered, refused) = (
        flood.sent.load(Ordering::Relaxed),
        flood.answered.load(Ordering::Relaxed),
        flood.refused.load(Ordering::Relaxed),
    );
    let slowest = latencies.iter().map(|(d, ..)| *d).max().unwrap_or_default();
    let mut sorted: Vec<Duration> = latencies.iter().map(|(d, ..)| *d).collect();
    sorted.sort();
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or_default();
    eprintln!(
        "flood: {} of {} connections accepted at once; {sent} flood requests ({answered} answered 200, {refused} refused or cut); {} real reviews, median {median:?}, slowest {slowest:?}; RSS {rss_before:.0} MiB before, peak {hwm:.0} MiB (sampled {peak_rss:.0} MiB), limit {limit_mib:.0} MiB",
        flood.connections_opened.load(Ordering::Relaxed),
        MAX_CONNECTIONS * 2,
        latencies.len(),
    );
    assert!(sent > 1_000, "the flood ran ({sent} requests)");
    assert!(
        hwm < limit_mib,
        "peak RSS {hwm:.0} MiB exceeds the Deployment's memory limit {limit_mib:.0} MiB"
    );
    let bad: Vec<_> = latencies
        .iter()
        .filter(|(d, ok, _)| !ok || *d > REAL_REVIEW_BOUND)
        .collect();
    assert!(
        bad.is_empty(),
        "real reviews not answered within {REAL_REVIEW_BOUND:?}: {bad:?}"
    );
    assert!(
        latencies.len() >= 50,
        "real reviews were sent: {}",
        latencies.len()
    );
    assert!(
        median < Duration::from_secs(2),
        "median real review {median:?}"
    );
    // A new connection is served again once the flood is over.
    let (status, body) = h1_post(hook.addr, h1_config, "/validate", real_review(&hook.ns, 0))
        .await
        .unwrap();
    assert_eq!((status, allowed(&body)), (200, Some(true)));
    // Metric labels from a closed set: no made-up kind is a label value.
    let (_, metrics) = admin_get(hook.admin, "/metrics").await.unwrap();
    let kinds: std::collections::BTreeSet<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("booking_webhook_admission_decisions_total{"))
        .filter_map(|l| l.split("kind=\"").nth(1)?.split('"').next())
        .collect();
    assert!(kinds.contains("other"), "{kinds:?}");
    assert!(
        kinds.iter().all(|k| [
            "Booking",
            "BookingScheduler",
            "Resource",
            "ResourceMonitor",
            "BookingCalendar",
            "unknown",
            "other"
        ]
        .contains(k)),
        "kind labels outside the closed set: {kinds:?}"
    );
    assert!(metrics.lines().count() < 400, "the metrics stay small");
}

// === 8: unready while the watch fails =======================================================

/// The webhook's list and watch of bookings fail (503 from the API proxy, the open watch cut):
/// `/readyz` turns 503 after the bound and booking reviews are refused as unjudgeable; once the
/// faults are cleared, a relist makes it ready again and reviews are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_goes_unready_while_its_booking_watch_fails_and_ready_after_a_relist() {
    let cluster = shared_cluster("webhook-watch-fails").await;
    let dir = TestDir::new("webhook-watch-fails-proxy").unwrap();
    let proxy = KubeProxy::start(
        &dir,
        &Upstream::from_kubeconfig(cluster.kubeconfig_path()).unwrap(),
    )
    .await
    .expect("the API proxy");
    let hook = start_hook(
        "webhook-watch-fails",
        &["--watch-failure-bound-seconds", "3"],
        Some(proxy.kubeconfig_path()),
        &cluster,
    )
    .await;
    let h2_config = tls_config(&hook.ca, None, &[b"h2"]);
    let conn = h2(hook.addr, h2_config).await.unwrap();

    proxy.inject(
        KubeFault::new(Method::GET, "/bookings", 503)
            .times(1_000_000)
            .message("injected: bookings unavailable"),
    );
    let failing = Instant::now();
    assert!(proxy.drop_streams() >= 1, "the webhook's watches were open");
    // Within the bound it stays ready (a short outage is no reason to leave the Service).
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        readyz(hook.admin).await,
        Ok(200),
        "still ready within the bound"
    );
    wait_for("/readyz 503", Duration::from_secs(15), || async {
        match readyz(hook.admin).await {
            Ok(503) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let unready_after = failing.elapsed();
    assert!(
        unready_after >= Duration::from_millis(2_500),
        "unready only after the bound of 3 s, not {unready_after:?}"
    );
    let (_, why) = admin_get(hook.admin, "/readyz").await.unwrap();
    assert!(why.contains("booking watch has been failing"), "{why}");
    // A stale index never answers: booking reviews are refused as not judgeable (503).
    let (status, body) = conn
        .post("/validate", real_review(&hook.ns, 7))
        .await
        .unwrap();
    let response: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 200);
    assert_eq!(response["response"]["allowed"], false, "{response}");
    assert_eq!(response["response"]["status"]["code"], 503, "{response}");

    proxy.clear_faults();
    let cleared = Instant::now();
    wait_for(
        "/readyz 200 after a relist",
        Duration::from_secs(60),
        || async {
            match readyz(hook.admin).await {
                Ok(200) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let (status, body) = conn
        .post("/validate", real_review(&hook.ns, 8))
        .await
        .unwrap();
    assert_eq!((status, allowed(&body)), (200, Some(true)), "{body:?}");
    eprintln!(
        "watch failing: unready after {unready_after:?}; ready {:?} after the faults were cleared",
        cleared.elapsed()
    );
}
