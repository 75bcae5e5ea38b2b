//! The two listeners: the admission server (HTTPS, `POST /validate` and `POST /mutate`) and the
//! plain-HTTP admin server (`/healthz`, `/readyz`, `/metrics`).
//!
//! Protection against bad input: TLS handshakes, request headers and request bodies each have a
//! deadline, bodies have a size limit, and every answer on an admission path is an
//! AdmissionReview (an error result for input that cannot be judged) — never a 500. On shutdown
//! the listeners stop accepting and open connections finish their requests, within a grace
//! period.

use std::{convert::Infallible, sync::Arc, time::Duration};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited, combinators::BoxBody};
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::{conn::auto, graceful::GracefulShutdown},
};
use rustls::ServerConfig;
use tokio::{net::TcpListener, sync::watch};
use tokio_rustls::TlsAcceptor;

use crate::{
    admission::{self, Decision, Endpoint},
    metrics::{DecisionLabels, EndpointLabels},
    state::State,
};

/// Limits and deadlines of the admission server.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Deadline for a TLS handshake.
    pub handshake_timeout: Duration,
    /// Deadline for reading request headers (HTTP/1.1).
    pub header_read_timeout: Duration,
    /// Deadline for reading a request body.
    pub body_read_timeout: Duration,
    /// How long open connections may take to finish after shutdown starts.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 4 * 1024 * 1024,
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(20),
        }
    }
}

type Body = BoxBody<Bytes, Infallible>;

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Full::new(body.into()).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn review_response(status: StatusCode, decision: &Decision) -> Response<Body> {
    let body = decision.to_json();
    let mut response = Response::new(Full::new(Bytes::from(body)).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

/// Answers one request on the admission port.
pub async fn handle_admission(
    req: Request<Incoming>,
    state: Arc<State>,
    limits: Limits,
) -> Result<Response<Body>, Infallible> {
    let endpoint = match req.uri().path() {
        "/validate" => Endpoint::Validate,
        "/mutate" => Endpoint::Mutate,
        other => {
            state.metrics.reject("not_found");
            return Ok(text(
                StatusCode::NOT_FOUND,
                format!(
                    "no such path {other:?}; admission reviews go to POST /validate or POST /mutate\n"
                ),
            ));
        }
    };
    if req.method() != Method::POST {
        state.metrics.reject("method_not_allowed");
        let mut response = text(
            StatusCode::METHOD_NOT_ALLOWED,
            format!(
                "{} is not allowed; send admission reviews with POST\n",
                req.method()
            ),
        );
        response
            .headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("POST"));
        return Ok(response);
    }
    let body = Limited::new(req.into_body(), limits.max_body_bytes);
    let bytes = match tokio::time::timeout(limits.body_read_timeout, body.collect()).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e))
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            state.metrics.reject("body_too_large");
            let decision = Decision::malformed(format!(
                "the request body exceeds {} bytes; an AdmissionReview of a booking object is far smaller (raise --max-body-bytes if needed)",
                limits.max_body_bytes
            ));
            return Ok(review_response(StatusCode::PAYLOAD_TOO_LARGE, &decision));
        }
        Ok(Err(e)) => {
            state.metrics.reject("body_error");
            let decision = Decision::malformed(format!("the request body could not be read: {e}"));
            return Ok(review_response(StatusCode::BAD_REQUEST, &decision));
        }
        Err(_) => {
            state.metrics.reject("body_timeout");
            let decision = Decision::malformed(format!(
                "the request body did not arrive within {:?}",
                limits.body_read_timeout
            ));
            return Ok(review_response(StatusCode::REQUEST_TIMEOUT, &decision));
        }
    };
    let started = std::time::Instant::now();
    let decision = admission::review(&state, endpoint, &bytes).await;
    let response = review_response(StatusCode::OK, &decision);
    state
        .metrics
        .latency
        .get_or_create(&EndpointLabels {
            endpoint: endpoint.as_str().to_owned(),
        })
        .observe(started.elapsed().as_secs_f64());
    state
        .metrics
        .decisions
        .get_or_create(&DecisionLabels {
            endpoint: endpoint.as_str().to_owned(),
            kind: decision.kind.clone(),
            operation: decision.operation.to_owned(),
            result: decision.verdict.as_str().to_owned(),
        })
        .inc();
    let uid = decision
        .review
        .response
        .as_ref()
        .map(|r| r.uid.as_str())
        .unwrap_or_default();
    tracing::info!(
        endpoint = endpoint.as_str(),
        kind = %decision.kind,
        operation = decision.operation,
        result = decision.verdict.as_str(),
        uid,
        "admission review"
    );
    Ok(response)
}

/// Serves admission reviews over TLS on `listener` until `shutdown` turns true, then lets open
/// connections finish within [`Limits::shutdown_grace`].
pub async fn serve_admission(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    state: Arc<State>,
    limits: Limits,
    mut shutdown: watch::Receiver<bool>,
) {
    let acceptor = TlsAcceptor::from(tls);
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)));
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // E.g. too many open files: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = booking_shared::ops::stopped(&mut shutdown) => break,
        };
        let acceptor = acceptor.clone();
        let watcher = graceful.watcher();
        let builder = builder.clone();
        let state = state.clone();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(stream))
                .await
            {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let service =
                hyper::service::service_fn(move |req| handle_admission(req, state.clone(), limits));
            let conn = builder.serve_connection(TokioIo::new(tls), service);
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(%peer, error = %e, "connection closed with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the shutdown grace period; closing them");
    }
}
