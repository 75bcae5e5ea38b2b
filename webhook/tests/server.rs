//! The HTTPS admission server and the admin server, in process, with generated certificates.

mod common;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use booking_webhook::{
    server::{self, Limits},
    state::State,
    tls::ReloadingCert,
};
use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::{
    ClientConfig, RootCertStore, SupportedProtocolVersion,
    pki_types::{CertificateDer, ServerName, pem::PemObject},
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
};
use tokio_rustls::{TlsConnector, client::TlsStream};

struct Pem {
    cert: String,
    key: String,
}

fn generate() -> Pem {
    let c = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    Pem {
        cert: c.cert.pem(),
        key: c.signing_key.serialize_pem(),
    }
}

struct Running {
    addr: SocketAddr,
    admin: SocketAddr,
    stop: watch::Sender<bool>,
    served: tokio::task::JoinHandle<()>,
    cert: Arc<ReloadingCert>,
    dir: tempfile::TempDir,
    state: Arc<State>,
}

impl Running {
    fn write(&self, pem: &Pem) {
        std::fs::write(self.dir.path().join("tls.crt"), &pem.cert).unwrap();
        std::fs::write(self.dir.path().join("tls.key"), &pem.key).unwrap();
    }
}

fn limits() -> Limits {
    Limits {
        max_body_bytes: 64 * 1024,
        handshake_timeout: Duration::from_secs(2),
        header_read_timeout: Duration::from_secs(2),
        body_read_timeout: Duration::from_secs(1),
        shutdown_grace: Duration::from_secs(5),
        ..Limits::default()
    }
}

async fn start(state: Arc<State>, pem: &Pem) -> Running {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tls.crt"), &pem.cert).unwrap();
    std::fs::write(dir.path().join("tls.key"), &pem.key).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let cert = ReloadingCert::load(
        dir.path().join("tls.crt"),
        dir.path().join("tls.key"),
        provider,
    )
    .await
    .unwrap();
    let config = Arc::new(cert.server_config().unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let admin = admin_listener.local_addr().unwrap();
    let (stop, shutdown) = watch::channel(false);
    let served = tokio::spawn(server::serve_admission(
        listener,
        config,
        state.clone(),
        limits(),
        shutdown.clone(),
    ));
    tokio::spawn(booking_shared::ops::serve_admin(
        admin_listener,
        state.clone(),
        shutdown,
    ));
    Running {
        addr,
        admin,
        stop,
        served,
        cert,
        dir,
        state,
    }
}

async fn tls_connect(
    addr: SocketAddr,
    trusted: &[&Pem],
    versions: &[&'static SupportedProtocolVersion],
) -> TlsStream<TcpStream> {
    let mut roots = RootCertStore::empty();
    for p in trusted {
        roots
            .add(CertificateDer::from_pem_slice(p.cert.as_bytes()).unwrap())
            .unwrap();
    }
    let config = ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_protocol_versions(versions)
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = TcpStream::connect(addr).await.unwrap();
    TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap()
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn http1(stream: TlsStream<TcpStream>) -> Sender {
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

async fn send(sender: &mut Sender, method: &str, path: &str, body: Vec<u8>) -> (u16, Vec<u8>) {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    (status, body)
}

async fn admin_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = http::Request::builder()
        .uri(path)
        .header("host", "localhost")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn validate_and_mutate_over_tls_1_2_and_1_3() {
    let pem = generate();
    let run = start(
        state_with(&[booking("ns", "first-come", "r", 1, 3, "ann")], &[]),
        &pem,
    )
    .await;
    for versions in [
        &[&rustls::version::TLS12][..],
        &[&rustls::version::TLS13][..],
    ] {
        let mut s = http1(tls_connect(run.addr, &[&pem], versions).await).await;
        let (status, body) = send(
            &mut s,
            "POST",
            "/validate",
            Req::create(booking("ns", "second", "r", 2, 4, "bob")).body(),
        )
        .await;
        assert_eq!(status, 200);
        let r = response_of(&body);
        assert_eq!(r["allowed"], false);
        assert!(
            r["status"]["message"]
                .as_str()
                .unwrap()
                .contains("first-come")
        );
        let (status, body) = send(
            &mut s,
            "POST",
            "/mutate",
            Req::create(booking("ns", "x", "r", 5, 6, "")).body(),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(response_of(&body)["patchType"], "JSONPatch");
    }
    let _ = run.stop.send(true);
}

#[tokio::test]
async fn bad_requests_get_clear_answers_never_a_500() {
    let pem = generate();
    let run = start(state_with(&[], &[]), &pem).await;
    let mut s = http1(tls_connect(run.addr, &[&pem], &[&rustls::version::TLS13]).await).await;
    let (status, _) = send(&mut s, "GET", "/validate", vec![]).await;
    assert_eq!(status, 405);
    let (status, _) = send(&mut s, "POST", "/elsewhere", vec![]).await;
    assert_eq!(status, 404);
    let (status, body) = send(&mut s, "POST", "/validate", b"{not json".to_vec()).await;
    assert_eq!(status, 200);
    assert_eq!(response_of(&body)["status"]["code"], 400);
    let (status, body) = send(&mut s, "POST", "/mutate", vec![b' '; 100 * 1024]).await;
    assert_eq!(status, 413);
    assert_eq!(response_of(&body)["allowed"], false);
    // The counters saw it all.
    let (_, metrics) = admin_get(run.admin, "/metrics").await;
    for line in [
        "booking_webhook_rejected_requests_total{reason=\"body_too_large\"} 1",
        "booking_webhook_rejected_requests_total{reason=\"method_not_allowed\"} 1",
        "booking_webhook_admission_decisions_total{endpoint=\"validate\",kind=\"unknown\",operation=\"UNKNOWN\",result=\"error\"} 1",
        "booking_webhook_admission_duration_seconds_count{endpoint=\"validate\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }
    let _ = run.stop.send(true);
}

#[tokio::test]
async fn a_body_that_never_arrives_times_out() {
    let pem = generate();
    let run = start(state_with(&[], &[]), &pem).await;
    let mut tls = tls_connect(run.addr, &[&pem], &[&rustls::version::TLS13]).await;
    tls.write_all(
        b"POST /validate HTTP/1.1\r\nhost: localhost\r\ncontent-length: 100\r\n\r\n{\"a\"",
    )
    .await
    .unwrap();
    let mut buf = vec![0; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), tls.read(&mut buf))
        .await
        .expect("answered within the body deadline")
        .unwrap();
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    let _ = run.stop.send(true);
}

#[tokio::test]
async fn the_certificate_is_swapped_without_dropping_connections() {
    let first = generate();
    let second = generate();
    let run = start(state_with(&[], &[]), &first).await;
    let both = [&first, &second];
    let old_conn = tls_connect(run.addr, &both, &[&rustls::version::TLS13]).await;
    let served_first = old_conn.get_ref().1.peer_certificates().unwrap()[0].clone();
    assert_eq!(
        served_first,
        CertificateDer::from_pem_slice(first.cert.as_bytes()).unwrap()
    );
    let mut old = http1(old_conn).await;

    // Unchanged files: nothing to do. A broken key: the old certificate stays.
    assert!(!run.cert.reload().await.unwrap());
    std::fs::write(run.dir.path().join("tls.key"), "not a key").unwrap();
    assert!(run.cert.reload().await.is_err());
    let c = tls_connect(run.addr, &both, &[&rustls::version::TLS13]).await;
    assert_eq!(c.get_ref().1.peer_certificates().unwrap()[0], served_first);

    // A key that does not fit the certificate is refused too.
    std::fs::write(run.dir.path().join("tls.key"), &second.key).unwrap();
    assert!(run.cert.reload().await.is_err());

    // The rotated pair is served to new connections by the background watch.
    run.write(&second);
    let (_stop, shutdown) = watch::channel(false);
    tokio::spawn(run.cert.clone().watch(
        Duration::from_millis(50),
        run.state.metrics.clone(),
        shutdown,
    ));
    let want = CertificateDer::from_pem_slice(second.cert.as_bytes()).unwrap();
    let mut swapped = false;
    for _ in 0..100 {
        let c = tls_connect(run.addr, &both, &[&rustls::version::TLS12]).await;
        if c.get_ref().1.peer_certificates().unwrap()[0] == want {
            swapped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(swapped, "the new certificate was never served");
    // The connection opened before the swap still works.
    let (status, _) = send(
        &mut old,
        "POST",
        "/validate",
        Req::create(booking("ns", "b", "r", 1, 2, "ann")).body(),
    )
    .await;
    assert_eq!(status, 200);
    let (_, metrics) = admin_get(run.admin, "/metrics").await;
    assert!(
        metrics.contains("booking_webhook_certificate_reloads_total{result=\"success\"} 1"),
        "{metrics}"
    );
    let _ = run.stop.send(true);
}

#[tokio::test]
async fn readiness_follows_the_caches_and_health_is_always_ok() {
    let pem = generate();
    let state = Arc::new(State::new(
        Default::default(),
        chrono::Duration::seconds(30),
        None,
        Arc::new(now),
        Default::default(),
    ));
    let run = start(state.clone(), &pem).await;
    assert_eq!(admin_get(run.admin, "/healthz").await.0, 200);
    assert_eq!(admin_get(run.admin, "/readyz").await.0, 503);
    state.mark_bookings_synced();
    assert_eq!(admin_get(run.admin, "/readyz").await.0, 200);
    assert_eq!(admin_get(run.admin, "/nothing").await.0, 404);
    let _ = run.stop.send(true);
}

/// `/readyz` fails once the booking watch has been failing for longer than the bound (the index
/// may be stale, and booking reviews are refused meanwhile), is ready again after a completed
/// relist, and fails for good once the webhook drains for shutdown.
#[tokio::test]
async fn readiness_fails_past_the_watch_failure_bound_and_while_draining() {
    let pem = generate();
    let state = state_with(&[], &[]);
    let run = start(state.clone(), &pem).await;
    assert_eq!(admin_get(run.admin, "/readyz").await.0, 200);
    // Failing for 29 s at the fixed clock's now: within the bound of 30 s.
    state.mark_booking_watch_failed(now() - chrono::Duration::seconds(29));
    assert_eq!(
        admin_get(run.admin, "/readyz").await.0,
        200,
        "within the bound"
    );
    state.mark_booking_watch_healthy();
    state.mark_booking_watch_failed(now() - chrono::Duration::seconds(31));
    let (status, why) = admin_get(run.admin, "/readyz").await;
    assert_eq!(status, 503);
    assert!(why.contains("failing for 31 s (bound 30 s"), "{why}");
    assert!(!state.bookings_synced(), "booking reviews are not judged");
    // A later failure does not restart the clock; a completed relist does.
    state.mark_booking_watch_failed(now());
    assert_eq!(admin_get(run.admin, "/readyz").await.0, 503);
    state.mark_booking_watch_healthy();
    assert_eq!(admin_get(run.admin, "/readyz").await.0, 200);
    state.mark_draining();
    let (status, why) = admin_get(run.admin, "/readyz").await;
    assert_eq!(status, 503);
    assert!(why.contains("draining"), "{why}");
    let _ = run.stop.send(true);
}

#[tokio::test]
async fn shutdown_lets_open_connections_finish_and_stops_accepting() {
    let pem = generate();
    let run = start(state_with(&[], &[]), &pem).await;
    let mut s = http1(tls_connect(run.addr, &[&pem], &[&rustls::version::TLS13]).await).await;
    let (status, _) = send(
        &mut s,
        "POST",
        "/validate",
        Req::create(booking("ns", "b", "r", 1, 2, "ann")).body(),
    )
    .await;
    assert_eq!(status, 200);
    let _ = run.stop.send(true);
    tokio::time::timeout(Duration::from_secs(5), run.served)
        .await
        .expect("the server stopped within its grace period")
        .unwrap();
    assert!(
        TcpStream::connect(run.addr).await.is_err(),
        "the listener is closed"
    );
}
