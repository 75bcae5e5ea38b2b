//! The plain-HTTP admin port: `/healthz` (the process serves), `/readyz` (configuration loaded
//! and clients built — a standby replica is ready too, or a rolling update would wait forever
//! for a new pod that cannot lead while the old one holds the Lease; whether a replica leads is
//! the `booking_controller_leader` metric), `/metrics` (Prometheus text format).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::metrics::Metrics;

/// Shared readiness flag.
#[derive(Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Sets readiness.
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::SeqCst);
    }
    /// Reads readiness.
    pub fn get(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

fn respond(path: &str, ready: &Readiness, metrics: &Metrics) -> Response<Full<Bytes>> {
    let (status, ctype, body) = match path {
        "/healthz" => (StatusCode::OK, "text/plain", "ok".to_owned()),
        "/readyz" if ready.get() => (StatusCode::OK, "text/plain", "ready".to_owned()),
        "/readyz" => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "starting".to_owned(),
        ),
        "/metrics" => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics.render(),
        ),
        _ => (StatusCode::NOT_FOUND, "text/plain", "not found".to_owned()),
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    if let Ok(v) = ctype.parse() {
        resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    resp
}

/// Binds `addr` (fails at start-up if it cannot).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves the admin port until `shutdown` fires.
pub async fn serve(
    listener: TcpListener,
    ready: Readiness,
    metrics: Metrics,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let (stream, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "admin port: accept failed");
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let ready = ready.clone();
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let resp = respond(req.uri().path(), &ready, &metrics);
                async move { Ok::<_, Infallible>(resp) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await
            {
                tracing::debug!(error = %e, "admin connection ended");
            }
        });
    }
}
