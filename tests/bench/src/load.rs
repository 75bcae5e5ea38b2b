//! The load client: keep-alive HTTPS (HTTP/1.1 over rustls) to one endpoint.
//!
//! - [`peak`]: closed loop, `connections` connections each sending its next request as soon
//!   as the previous answer is read; the completed requests per second are the saturation
//!   throughput.
//! - [`fixed_rate`]: open loop, one request every `1/rps` seconds spread over a pool of
//!   connections; each latency runs from the request's *scheduled* time to the end of its
//!   answer, so a stalled server is charged for the requests it delayed.

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::stats::Samples;

/// Where and what to send.
#[derive(Clone)]
pub struct Target {
    /// Server address.
    pub addr: SocketAddr,
    /// TLS server name (certificate name).
    pub server_name: String,
    /// Request path, e.g. `/validate`.
    pub path: String,
    /// Request body (an AdmissionReview).
    pub body: Bytes,
    /// Client TLS configuration trusting the server's CA.
    pub tls: Arc<rustls::ClientConfig>,
}

/// One open keep-alive connection.
pub struct Connection {
    sender: SendRequest<Full<Bytes>>,
    target: Target,
}

impl Connection {
    /// Connects and completes the TLS handshake.
    pub async fn open(target: &Target) -> anyhow::Result<Self> {
        let tcp = TcpStream::connect(target.addr)
            .await
            .with_context(|| format!("connecting to {}", target.addr))?;
        tcp.set_nodelay(true)?;
        let name = ServerName::try_from(target.server_name.clone())?;
        let tls = TlsConnector::from(target.tls.clone())
            .connect(name, tcp)
            .await
            .context("TLS handshake")?;
        let (sender, conn) = http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Connection {
            sender,
            target: target.clone(),
        })
    }

    /// Sends the target's request and reads the whole answer; returns the answer body.
    pub async fn send(&mut self) -> anyhow::Result<Bytes> {
        self.sender.ready().await?;
        let req = http::Request::post(&self.target.path)
            .header("host", &self.target.server_name)
            .header("content-type", "application/json")
            .body(Full::new(self.target.body.clone()))?;
        let resp = self.sender.send_request(req).await?;
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        if !status.is_success() {
            bail!("HTTP {status}: {}", String::from_utf8_lossy(&body));
        }
        Ok(body)
    }
}

/// The TLS client configuration for HTTP/1.1 trusting `roots`.
pub fn client_config(roots: rustls::RootCertStore) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Result of a closed-loop run.
#[derive(Debug, Clone)]
pub struct PeakResult {
    /// Completed requests (2xx, body read).
    pub completed: u64,
    /// Failed requests.
    pub errors: u64,
    /// Measured wall time.
    pub elapsed: Duration,
    /// Latency of each completed request.
    pub latencies: Samples,
}

impl PeakResult {
    /// Completed requests per second.
    pub fn rps(&self) -> f64 {
        self.completed as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Closed loop over `connections` connections for `warmup` (not counted) then `duration`.
pub async fn peak(
    target: &Target,
    connections: usize,
    warmup: Duration,
    duration: Duration,
) -> anyhow::Result<PeakResult> {
    let mut conns = Vec::with_capacity(connections);
    for _ in 0..connections {
        conns.push(Connection::open(target).await?);
    }
    let start = Instant::now();
    let measure_from = start + warmup;
    let end = measure_from + duration;
    let mut tasks = Vec::new();
    for mut conn in conns {
        tasks.push(tokio::spawn(async move {
            let mut completed = 0u64;
            let mut errors = 0u64;
            let mut latencies = Samples::default();
            loop {
                let t0 = Instant::now();
                if t0 >= end {
                    break;
                }
                let ok = conn.send().await.is_ok();
                let t1 = Instant::now();
                if t0 >= measure_from && t1 <= end {
                    if ok {
                        completed += 1;
                        latencies.push(t1 - t0);
                    } else {
                        errors += 1;
                    }
                }
                if !ok {
                    // Reconnect once; a server that keeps failing ends this connection.
                    match Connection::open(&conn.target).await {
                        Ok(c) => conn = c,
                        Err(_) => break,
                    }
                }
            }
            (completed, errors, latencies)
        }));
    }
    let mut result = PeakResult {
        completed: 0,
        errors: 0,
        elapsed: duration,
        latencies: Samples::default(),
    };
    for task in tasks {
        let (c, e, l) = task.await?;
        result.completed += c;
        result.errors += e;
        result.latencies.extend(&l);
    }
    Ok(result)
}

/// Result of an open-loop run.
#[derive(Debug, Clone)]
pub struct RateResult {
    /// Latency of each completed request, from its scheduled send time.
    pub latencies: Samples,
    /// Failed requests.
    pub errors: u64,
    /// Requests scheduled.
    pub scheduled: u64,
}

/// Open loop at `rps` requests per second for `duration`, over `connections` connections.
pub async fn fixed_rate(
    target: &Target,
    rps: u32,
    connections: usize,
    duration: Duration,
) -> anyhow::Result<RateResult> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Instant>(100_000);
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let mut tasks = Vec::new();
    for _ in 0..connections.max(1) {
        let mut conn = Connection::open(target).await?;
        let rx = rx.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Samples::default();
            let mut errors = 0u64;
            loop {
                let next = rx.lock().await.recv().await;
                let Some(scheduled) = next else { break };
                match conn.send().await {
                    Ok(_) => latencies.push(scheduled.elapsed()),
                    Err(_) => {
                        errors += 1;
                        match Connection::open(&conn.target).await {
                            Ok(c) => conn = c,
                            Err(_) => break,
                        }
                    }
                }
            }
            (latencies, errors)
        }));
    }
    let interval = Duration::from_secs_f64(1.0 / f64::from(rps.max(1)));
    let total = (duration.as_secs_f64() * f64::from(rps)).round() as u64;
    let start = Instant::now();
    for i in 0..total {
        let scheduled = start + interval.mul_f64(i as f64);
        tokio::time::sleep_until(scheduled.into()).await;
        if tx.send(scheduled).await.is_err() {
            break;
        }
    }
    drop(tx);
    let mut result = RateResult {
        latencies: Samples::default(),
        errors: 0,
        scheduled: total,
    };
    for task in tasks {
        let (l, e) = task.await?;
        result.latencies.extend(&l);
        result.errors += e;
    }
    Ok(result)
}
