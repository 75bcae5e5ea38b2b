//! A client of the webhook's admission port for the tests of the port itself (drain, client
//! certificates, floods, readiness): hyper's HTTP/1.1 and HTTP/2 client connections over rustls,
//! trusting the test's CA and presenting a client certificate when given; AdmissionReview bodies
//! as the API server sends them; the webhook's admin port; its memory from `/proc`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use booking_harness::tls::{ServerCert, TestCa};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_rustls::{TlsConnector, client::TlsStream};

/// A rustls client configuration trusting only `ca`, offering `alpn` (e.g. `[b"h2"]`), with
/// `client` as its client certificate when given.
pub fn tls_config(
    ca: &TestCa,
    client: Option<&ServerCert>,
    alpn: &[&[u8]],
) -> Arc<rustls::ClientConfig> {
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(ca.root_store().expect("the CA"));
    let mut config = match client {
        Some(cert) => builder
            .with_client_auth_cert(cert.chain_der.clone(), cert.private_key())
            .expect("a client certificate"),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// A TLS connection to `addr` (server name 127.0.0.1), or the error of the connect or handshake.
pub async fn connect_tls(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> Result<TlsStream<TcpStream>, String> {
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    let name = ServerName::try_from("127.0.0.1").expect("an IP server name");
    TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS handshake: {e}"))
}

/// An HTTP/2 connection: cheap to clone, every clone sends its own streams.
#[derive(Clone)]
pub struct H2 {
    sender: hyper::client::conn::http2::SendRequest<Full<Bytes>>,
}

/// An HTTP/2 connection over TLS (ALPN h2) to `addr`.
pub async fn h2(addr: SocketAddr, config: Arc<rustls::ClientConfig>) -> Result<H2, String> {
    let tls = connect_tls(addr, config).await?;
    let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake(TokioIo::new(tls))
        .await
        .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(H2 { sender })
}

/// How long [`H2::post`] and [`h1_post`] wait for their whole answer. A connection the server
/// closed right after the TLS handshake (a refused client certificate) can leave hyper's sender
/// waiting for a connection that is gone: that is no answer, and is reported as such instead of
/// hanging the test.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

impl H2 {
    /// POSTs `body` to `path` on a new stream; the status and the whole answer, or an error when
    /// none comes within [`ANSWER_TIMEOUT`].
    pub async fn post(&self, path: &str, body: Bytes) -> Result<(u16, Bytes), String> {
        answered_within(self.post_untimed(path, body)).await
    }

    async fn post_untimed(&self, path: &str, body: Bytes) -> Result<(u16, Bytes), String> {
        let mut sender = self.sender.clone();
        sender.ready().await.map_err(|e| e.to_string())?;
        let req = http::Request::post(format!("https://127.0.0.1{path}"))
            .header("content-type", "application/json")
            .body(Full::new(body))
            .map_err(|e| e.to_string())?;
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((status, body))
    }
}

/// `answer`, or an error when it does not come within [`ANSWER_TIMEOUT`].
async fn answered_within(
    answer: impl std::future::Future<Output = Result<(u16, Bytes), String>>,
) -> Result<(u16, Bytes), String> {
    tokio::time::timeout(ANSWER_TIMEOUT, answer)
        .await
        .map_err(|_| format!("no answer within {ANSWER_TIMEOUT:?}"))?
}

/// One HTTP/1.1 request over a new TLS connection (ALPN http/1.1): the status and the answer, or
/// an error when none comes within [`ANSWER_TIMEOUT`].
pub async fn h1_post(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    path: &str,
    body: Bytes,
) -> Result<(u16, Bytes), String> {
    answered_within(h1_post_untimed(addr, config, path, body)).await
}

async fn h1_post_untimed(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    path: &str,
    body: Bytes,
) -> Result<(u16, Bytes), String> {
    let tls = connect_tls(addr, config).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| format!("HTTP/1.1 handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = http::Request::post(path)
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .body(Full::new(body))
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, body))
}

/// A Booking of `resource` in `ns` from `start` to `end`.
pub fn booking_object(ns: &str, name: &str, resource: &str, start: &str, end: &str) -> Value {
    json!({
        "apiVersion": "manager.kotaico.de/v1",
        "kind": "Booking",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"resource_name": resource, "start_at": start, "end_at": end, "user_id": "ann"},
    })
}

/// An AdmissionReview v1 of a CREATE of `object` by `user`, as the API server sends it.
pub fn review(object: &Value, user: &str, dry_run: bool) -> Vec<u8> {
    let kind = object["kind"].as_str().unwrap_or("Booking");
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": format!("{:032x}", fastrand::u128(..)),
            "kind": {"group": "manager.kotaico.de", "version": "v1", "kind": kind},
            "resource": {"group": "manager.kotaico.de", "version": "v1", "resource": "bookings"},
            "name": object["metadata"]["name"],
            "namespace": object["metadata"]["namespace"],
            "operation": "CREATE",
            "userInfo": {"username": user, "groups": ["system:authenticated"]},
            "object": object,
            "oldObject": null,
            "dryRun": dry_run,
        },
    }))
    .expect("JSON")
}

/// `response.allowed` of an answer, `None` when the answer is no AdmissionReview.
pub fn allowed(body: &[u8]) -> Option<bool> {
    let v: Value = serde_json::from_slice(body).ok()?;
    v["response"]["allowed"].as_bool()
}

/// The status and body of `GET http://<admin><path>`, or the error.
pub async fn admin_get(admin: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let tcp = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(admin))
        .await
        .map_err(|_| "connect timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = http::Request::get(path)
        .header("host", "127.0.0.1")
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    let resp = tokio::time::timeout(Duration::from_secs(5), sender.send_request(req))
        .await
        .map_err(|_| "no answer within 5 s".to_owned())?
        .map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// A `kB` field of `/proc/<pid>/status` (`VmRSS`, `VmHWM`: the peak), in MiB.
pub fn proc_status_mib(pid: u32, field: &str) -> f64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/<pid>/status");
    let kib: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field}"))
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kib / 1024.0
}

/// The memory limit of the webhook's container in the shipped Deployment
/// (`manifests/webhook.yaml`), in MiB.
pub fn shipped_memory_limit_mib() -> f64 {
    let docs = crate::read_yaml_documents(&crate::repo_root().join("manifests/webhook.yaml"));
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("the webhook Deployment");
    let limit =
        deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
            .as_str()
            .expect("a memory limit");
    let (n, unit) = limit.split_at(
        limit
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(limit.len()),
    );
    let n: f64 = n.parse().expect("a number");
    match unit {
        "Mi" => n,
        "Gi" => n * 1024.0,
        "Ki" => n / 1024.0,
        other => panic!("memory limit unit {other:?} of {limit}"),
    }
}
