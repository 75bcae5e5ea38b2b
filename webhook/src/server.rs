//! The two listeners: the admission server (HTTPS, `POST /validate` and `POST /mutate`) and the
//! plain-HTTP admin server (`/healthz`, `/readyz`, `/metrics`).
//!
//! Protection against bad input: TLS handshakes, request headers and request bodies each have a
//! deadline, bodies have a size limit, and every answer on an admission path is an
//! AdmissionReview (an error result for input that cannot be judged) — never a 500. On shutdown
//! the listeners stop accepting and open connections finish their requests, within a grace
//! period.
//!
//! Bounded under abuse (each bound a flag, see [`Limits`]): open connections (a semaphore taken
//! before `accept`; beyond it new connections wait in the listen backlog), HTTP/2 streams per
//! connection and the bytes a connection may buffer (flow-control windows), admission requests
//! in flight, and the bytes of large bodies held at once. Small bodies (every real review is a
//! few KiB) never wait for the large-body budget, so a flood of 4 MiB bodies does not hold real
//! reviews back beyond the CPU it takes. Memory is then bounded by about
//! `connections × (streams × 8 KiB + 64 KiB) + in-flight body bytes × the parse expansion +
//! in-flight × 64 KiB`.

use std::{convert::Infallible, sync::Arc, time::Duration};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited, combinators::BoxBody};
use hyper::body::Body as _;
use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    server::{conn::auto, graceful::GracefulShutdown},
};
use rustls::ServerConfig;
use tokio::{
    net::TcpListener,
    sync::{Semaphore, watch},
};
use tokio_rustls::TlsAcceptor;

use crate::{
    admission::{self, Decision, Endpoint, ReviewResult},
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
    /// Deadline for reading a request body, and for waiting for a place among the requests in
    /// flight.
    pub body_read_timeout: Duration,
    /// How long open connections may take to finish after shutdown starts.
    pub shutdown_grace: Duration,
    /// Most open connections; further ones wait in the listen backlog.
    pub max_connections: usize,
    /// Most concurrent HTTP/2 streams per connection.
    pub max_concurrent_streams: u32,
    /// Most requests being read or judged at once.
    pub max_in_flight_requests: usize,
    /// Most bytes of large bodies (over [`SMALL_BODY_BYTES`] or of unknown length) held at once.
    pub max_in_flight_body_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 4 * 1024 * 1024,
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(20),
            max_connections: 128,
            max_concurrent_streams: 32,
            max_in_flight_requests: 128,
            max_in_flight_body_bytes: 16 * 1024 * 1024,
        }
    }
}

/// Bodies of at most this many bytes (declared by `Content-Length`) do not count against
/// [`Limits::max_in_flight_body_bytes`].
pub const SMALL_BODY_BYTES: u64 = 64 * 1024;

/// HTTP/2 flow control: what one stream may have sent but not yet read (a real review fits in
/// it). The connection's window is this times the streams allowed, so that streams waiting for a
/// place never use up the window of the stream being read; it bounds what one connection
/// buffers (256 KiB with 32 streams).
const STREAM_WINDOW_BYTES: u32 = 8 * 1024;

fn connection_window(limits: &Limits) -> u32 {
    limits
        .max_concurrent_streams
        .saturating_mul(STREAM_WINDOW_BYTES)
        .max(65_535)
}

/// The places shared by every connection: requests in flight, and the large-body budget (in
/// KiB).
#[derive(Clone)]
struct Gates {
    requests: Arc<Semaphore>,
    body_kib: Arc<Semaphore>,
    body_kib_total: u32,
}

impl Gates {
    fn new(limits: &Limits) -> Self {
        let body_kib_total = u32::try_from(limits.max_in_flight_body_bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .min(u32::try_from(Semaphore::MAX_PERMITS).unwrap_or(u32::MAX));
        Self {
            requests: Arc::new(Semaphore::new(limits.max_in_flight_requests)),
            body_kib: Arc::new(Semaphore::new(body_kib_total as usize)),
            body_kib_total,
        }
    }

    /// KiB of the large-body budget a body with this size hint takes (0 for a small body).
    fn body_cost(&self, hint: &hyper::body::SizeHint, max_body_bytes: usize) -> u32 {
        let max = max_body_bytes as u64;
        let bytes = match hint.upper() {
            Some(n) if n <= SMALL_BODY_BYTES => return 0,
            Some(n) => n.min(max),
            None => max,
        };
        u32::try_from(bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .min(self.body_kib_total)
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

fn busy(state: &State, reason: &'static str, what: &str, limits: &Limits) -> Response<Body> {
    state.metrics.reject(reason);
    let decision = Decision::malformed(format!(
        "the webhook is busy: no room for {what} within {:?}; retry",
        limits.body_read_timeout
    ));
    review_response(StatusCode::SERVICE_UNAVAILABLE, &decision)
}

/// Takes a place among the requests in flight and, for a large body, room in the large-body
/// budget (each waited for up to the body deadline, else 503), then answers the request.
async fn gated_admission(
    req: Request<Incoming>,
    state: Arc<State>,
    limits: Limits,
    gates: Gates,
) -> Result<Response<Body>, Infallible> {
    let deadline = limits.body_read_timeout;
    // The large-body budget first: a large body waiting for room holds no place among the
    // requests in flight, which small (real) reviews need.
    let cost = gates.body_cost(&req.body().size_hint(), limits.max_body_bytes);
    let _body = if cost == 0 {
        None
    } else {
        match tokio::time::timeout(deadline, gates.body_kib.acquire_many(cost)).await {
            Ok(Ok(permit)) => Some(permit),
            _ => {
                return Ok(busy(
                    &state,
                    "body_budget",
                    &format!("a body of up to {cost} KiB"),
                    &limits,
                ));
            }
        }
    };
    let Ok(Ok(_request)) = tokio::time::timeout(deadline, gates.requests.acquire()).await else {
        return Ok(busy(&state, "in_flight_limit", "another request", &limits));
    };
    admit_request(req, state, limits).await
}

async fn admit_request(
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
    let decision = judge(&state, endpoint, bytes).await;
    let response = review_response(StatusCode::OK, &decision);
    observe(&state, endpoint, &decision, started);
    Ok(response)
}

/// The decision on one review body: the permission check of `--restrict-user-id`, then the
/// rules, a large body's on the blocking pool.
async fn judge(state: &Arc<State>, endpoint: Endpoint, bytes: Bytes) -> Decision {
    if let Some(refusal) = admission::authorization_refusal(state, endpoint, &bytes).await {
        refusal
    } else if bytes.len() as u64 > SMALL_BODY_BYTES {
        // Parsing a large body takes long: on the blocking pool, so that the runtime's workers
        // stay free for small reviews (the large-body budget bounds how many run at once).
        let state = state.clone();
        match tokio::task::spawn_blocking(move || admission::admit(&state, endpoint, &bytes)).await
        {
            Ok(decision) => decision,
            Err(e) => Decision::malformed(format!("the review could not be judged: {e}")),
        }
    } else {
        admission::admit(state, endpoint, &bytes)
    }
}

/// Counts, times and logs one answered review.
fn observe(state: &State, endpoint: Endpoint, decision: &Decision, started: std::time::Instant) {
    state
        .metrics
        .latency
        .get_or_create(&EndpointLabels {
            endpoint: endpoint.as_str(),
        })
        .observe(started.elapsed().as_secs_f64());
    state
        .metrics
        .decisions
        .get_or_create(&DecisionLabels {
            endpoint: endpoint.as_str(),
            kind: crate::metrics::kind_label(&decision.kind),
            operation: decision.operation,
            result: decision.verdict.as_str(),
        })
        .inc();
    // A denial or an error is what an operator looks for in the log; an admitted review is
    // the common case, counted by the metric above and logged at debug only, so that the
    // default level costs no formatted line per review.
    macro_rules! log_review {
        ($level:ident) => {
            tracing::$level!(
                endpoint = endpoint.as_str(),
                kind = %decision.kind,
                operation = decision.operation,
                result = decision.verdict.as_str(),
                uid = decision.uid(),
                "admission review"
            )
        };
    }
    match decision.verdict {
        ReviewResult::Allowed => log_review!(debug),
        ReviewResult::Denied | ReviewResult::Error => log_review!(info),
    }
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
    let gates = Gates::new(&limits);
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(64 * 1024);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .max_concurrent_streams(limits.max_concurrent_streams)
        .initial_stream_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(connection_window(&limits))
        .max_header_list_size(64 * 1024)
        .max_pending_accept_reset_streams(Some(20))
        .max_local_error_reset_streams(Some(256));
    loop {
        // A place among the open connections, taken before accepting: at the limit, new
        // connections wait in the listen backlog.
        let permit = match connections.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                state.metrics.reject("connection_limit");
                tokio::select! {
                    permit = connections.clone().acquire_owned() => match permit {
                        Ok(permit) => permit,
                        Err(_) => break,
                    },
                    _ = booking_shared::ops::stopped(&mut shutdown) => break,
                }
            }
        };
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
        let gates = gates.clone();
        tokio::spawn(async move {
            let _permit = permit;
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
            let service = hyper::service::service_fn(move |req| {
                gated_admission(req, state.clone(), limits, gates.clone())
            });
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
