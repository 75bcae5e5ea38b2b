//! Webhook notifications against a real HTTPS receiver: the JSON document a Slack-compatible
//! incoming webhook accepts, certificate verification, and failures reported as transient.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use booking_controller::notify::{NotificationSubject, Notifiers, SmtpSettings};
use booking_harness::{TestDir, tls::TestCa};
use booking_shared::api::Notification;
use chrono::{DateTime, Utc};
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, body::Bytes, service::service_fn};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

type Received = Arc<Mutex<Vec<(String, String, serde_json::Value)>>>;

/// An HTTPS server answering every request with `status`, recording method, path and body.
async fn receiver(ca: &TestCa, status: u16) -> (SocketAddr, Received) {
    let cert = ca
        .issue_server_cert("hooks", &["localhost", "127.0.0.1"])
        .unwrap();
    let tls = tokio_rustls::TlsAcceptor::from(Arc::new(cert.server_config().unwrap()));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let received: Received = Arc::default();
    let log = received.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (tls, log) = (tls.clone(), log.clone());
            tokio::spawn(async move {
                let Ok(stream) = tls.accept(tcp).await else {
                    return;
                };
                let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let log = log.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        let bytes = body
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        let json =
                            serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
                        log.lock().unwrap().push((
                            parts.method.to_string(),
                            parts.uri.path().to_owned(),
                            json,
                        ));
                        Ok::<_, hyper::Error>(
                            Response::builder()
                                .status(status)
                                .body(Full::new(Bytes::from_static(b"ok")))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, received)
}

fn ctx() -> NotificationSubject {
    let t = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
    NotificationSubject {
        namespace: "team-a".into(),
        booking: "nightly-etl".into(),
        booking_uid: "uid-1".into(),
        resource: "ec2.analytics".into(),
        user: "ann".into(),
        requested_by: Some("system:serviceaccount:ci:deployer".into()),
        end: t("2031-01-10T23:00:00Z"),
        now: t("2031-01-10T22:40:00Z"),
        ..Default::default()
    }
}

fn no_smtp() -> SmtpSettings {
    SmtpSettings::default()
}

fn hook(url: String) -> Notification {
    Notification {
        type_: "webhook".into(),
        recipient: url,
        lead_minutes: None,
        events: vec![],
        recipient_from: None,
    }
}

#[tokio::test]
async fn posts_a_slack_compatible_json_document() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let dir = TestDir::new("notify-webhook").unwrap();
    let ca = TestCa::new(&dir, "hooks").unwrap();
    let (addr, received) = receiver(&ca, 200).await;
    let notifiers = Notifiers::new(&no_smtp(), &[ca.cert_pem().into_bytes()]).unwrap();
    let url = format!("https://localhost:{}/services/T000/B000", addr.port());
    notifiers
        .send(0, &hook(url), &ctx())
        .await
        .expect("delivered");

    let got = received.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    let (method, path, body) = &got[0];
    assert_eq!(
        (method.as_str(), path.as_str()),
        ("POST", "/services/T000/B000")
    );
    let text = body["text"].as_str().unwrap();
    assert!(
        text.contains("nightly-etl") && text.contains("ec2.analytics"),
        "{text}"
    );
    assert!(
        text.contains("kubectl -n team-a patch booking nightly-etl"),
        "{text}"
    );
    assert_eq!(body["booking"]["end_at"], "2031-01-10T23:00:00Z");
    assert_eq!(body["booking"]["user"], "ann");
}

#[tokio::test]
async fn an_untrusted_certificate_or_an_error_status_is_a_transient_failure() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let dir = TestDir::new("notify-webhook-fail").unwrap();
    let ca = TestCa::new(&dir, "hooks").unwrap();

    // The receiver's CA is not trusted: nothing is delivered.
    let (addr, received) = receiver(&ca, 200).await;
    let untrusting = Notifiers::new(&no_smtp(), &[]).unwrap();
    let err = untrusting
        .send(
            0,
            &hook(format!("https://localhost:{}/x", addr.port())),
            &ctx(),
        )
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert!(received.lock().unwrap().is_empty());

    // A receiver answering 500 is reported with its status.
    let (addr, _) = receiver(&ca, 500).await;
    let trusting = Notifiers::new(&no_smtp(), &[ca.cert_pem().into_bytes()]).unwrap();
    let err = trusting
        .send(
            0,
            &hook(format!("https://localhost:{}/x", addr.port())),
            &ctx(),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("500"), "{err}");
    assert!(err.is_transient());
}

/// An HTTPS server answering every request with 500 and a body that never ends: sent as fast
/// as the connection takes it (`fast`), or a byte a second.
async fn endless_receiver(
    ca: &TestCa,
    fast: bool,
) -> (SocketAddr, Arc<std::sync::atomic::AtomicU64>) {
    use futures::StreamExt as _;
    use http_body_util::StreamBody;
    use hyper::body::Frame;
    let cert = ca
        .issue_server_cert("hooks", &["localhost", "127.0.0.1"])
        .unwrap();
    let tls = tokio_rustls::TlsAcceptor::from(Arc::new(cert.server_config().unwrap()));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = sent.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (tls, counter) = (tls.clone(), counter.clone());
            tokio::spawn(async move {
                let Ok(stream) = tls.accept(tcp).await else {
                    return;
                };
                let service = service_fn(move |_req: Request<hyper::body::Incoming>| {
                    let counter = counter.clone();
                    async move {
                        let chunk = Bytes::from(vec![b'x'; if fast { 64 * 1024 } else { 1 }]);
                        let body = futures::stream::repeat(chunk).then(move |c| {
                            let counter = counter.clone();
                            async move {
                                if !fast {
                                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                                }
                                counter.fetch_add(
                                    c.len() as u64,
                                    std::sync::atomic::Ordering::Relaxed,
                                );
                                Ok::<_, std::convert::Infallible>(Frame::data(c))
                            }
                        });
                        Ok::<_, hyper::Error>(
                            Response::builder()
                                .status(500)
                                .body(StreamBody::new(body))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, sent)
}

#[tokio::test]
async fn an_endless_or_dripping_answer_is_cut_at_a_size_limit_and_within_the_timeout() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let dir = TestDir::new("notify-webhook-endless").unwrap();
    let ca = TestCa::new(&dir, "hooks").unwrap();
    let notifiers = Notifiers::new(&no_smtp(), &[ca.cert_pem().into_bytes()]).unwrap();
    let (fast, fast_sent) = endless_receiver(&ca, true).await;
    let (slow, _) = endless_receiver(&ca, false).await;
    let began = std::time::Instant::now();
    let bound = std::time::Duration::from_secs(25);
    let subject = ctx();
    let fast_hook = hook(format!("https://localhost:{}/services/T/B/X", fast.port()));
    let slow_hook = hook(format!("https://localhost:{}/services/T/B/Y", slow.port()));
    let (fast_result, slow_result) = tokio::join!(
        tokio::time::timeout(bound, notifiers.send(0, &fast_hook, &subject)),
        tokio::time::timeout(bound, notifiers.send(0, &slow_hook, &subject)),
    );
    // The endless answer: its first bytes are read, then the exchange ends at once.
    let err = fast_result
        .expect("an endless answer ends the exchange within the bound")
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("HTTP 500") && text.contains("longer than 4096 bytes"),
        "{text}"
    );
    assert!(err.is_transient(), "retried later: {err}");
    // The receiver could push only what fits in the buffers before the client hung up.
    let pushed = fast_sent.load(std::sync::atomic::Ordering::Relaxed);
    assert!(pushed < 64 * 1024 * 1024, "{pushed} bytes pushed");
    // The dripping answer: abandoned at the timeout.
    let err = slow_result
        .expect("a dripping answer is abandoned within the bound")
        .unwrap_err();
    assert!(
        err.to_string().contains("no complete answer within"),
        "{err}"
    );
    assert!(err.is_transient());
    assert!(began.elapsed() < bound, "{:?}", began.elapsed());
}
