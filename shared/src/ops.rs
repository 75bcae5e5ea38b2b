//! What both binaries run beside their work (feature `ops`): the plain-HTTP admin port
//! (`/healthz`, `/readyz`, `/metrics`) and the shutdown signal. One implementation, so that the
//! controller and the webhook answer probes and scrapes the same way.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode, header};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// What the admin port reports of a binary.
pub trait Probe: Send + Sync + 'static {
    /// `Ok` when ready; otherwise why not (the body of the 503).
    fn ready(&self) -> Result<(), String>;
    /// The metrics in the OpenMetrics text format.
    fn metrics(&self) -> String;
}

/// The answer of the admin port to `method` on `path`.
pub fn respond(method: &Method, path: &str, probe: &dyn Probe) -> Response<Full<Bytes>> {
    if method != Method::GET && method != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "use GET\n".into());
    }
    match path {
        "/healthz" => text(StatusCode::OK, "ok\n".into()),
        "/readyz" => match probe.ready() {
            Ok(()) => text(StatusCode::OK, "ok\n".into()),
            Err(why) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: {why}\n"),
            ),
        },
        "/metrics" => {
            let mut response = text(StatusCode::OK, probe.metrics());
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            response
        }
        other => text(
            StatusCode::NOT_FOUND,
            format!("no such path {other:?}; try /healthz, /readyz or /metrics\n"),
        ),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Serves the admin port on `listener` over HTTP/1.1 until `shutdown` turns true; requests must
/// send their headers within 10 s, and open connections get 5 s to finish at shutdown.
pub async fn serve_admin(
    listener: TcpListener,
    probe: Arc<dyn Probe>,
    mut shutdown: watch::Receiver<bool>,
) {
    let graceful = GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10));
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // E.g. too many open files: back off instead of spinning.
                    tracing::warn!(error = %e, "admin port: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stopped(&mut shutdown) => break,
        };
        let probe = probe.clone();
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            let response = respond(req.method(), req.uri().path(), probe.as_ref());
            async move { Ok::<_, Infallible>(response) }
        });
        let watched = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = watched.await {
                tracing::debug!(error = %e, "admin connection ended");
            }
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(Duration::from_secs(5), graceful.shutdown()).await;
}

/// Resolves once the shutdown flag is true (or its sender is gone).
pub async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    while !*shutdown.borrow_and_update() {
        if shutdown.changed().await.is_err() {
            return;
        }
    }
}

/// Resolves on SIGTERM (what the kubelet sends) or SIGINT.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = term => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// Ends the process with what `result` says: status 0, or the error's whole chain on stderr as
/// one line (`Error: …`, as a `main` returning it would print) and status 1. At once: a fatal
/// error such as a lost Lease must stop the process before a standby takes over, so neither a
/// backtrace (symbolizing one takes seconds when `RUST_BACKTRACE` is set) nor the runtime's
/// wait for blocking tasks may delay the exit.
pub fn exit_with<E: std::fmt::Display>(result: Result<(), E>) -> ! {
    match result {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("Error: {e:#}");
            std::process::exit(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Result<(), String>);

    impl Probe for Fixed {
        fn ready(&self) -> Result<(), String> {
            self.0.clone()
        }
        fn metrics(&self) -> String {
            "# EOF\n".into()
        }
    }

    #[test]
    fn probes_scrapes_and_mistakes_get_their_status() {
        let ready = Fixed(Ok(()));
        let starting = Fixed(Err("the caches have not synced yet".into()));
        assert_eq!(
            respond(&Method::GET, "/healthz", &starting).status(),
            StatusCode::OK
        );
        assert_eq!(
            respond(&Method::GET, "/readyz", &ready).status(),
            StatusCode::OK
        );
        assert_eq!(
            respond(&Method::GET, "/readyz", &starting).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        let metrics = respond(&Method::GET, "/metrics", &ready);
        assert!(
            metrics.headers()[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("application/openmetrics-text")
        );
        assert_eq!(
            respond(&Method::GET, "/x", &ready).status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            respond(&Method::POST, "/healthz", &ready).status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
    }
}
