//! A fault-injecting HTTP proxy in front of moto.
//!
//! moto never throttles and accepts state transitions real AWS refuses. Tests put this proxy
//! between the product and moto, then tell it at run time to answer a chosen action (for
//! example `StartInstances`) with an AWS-shaped error a given number of times — optionally
//! only when the request names one instance — and to forward everything else unchanged. It
//! also records every request: when it came, its service, action, named instances, the
//! status answered and how long the answer took.
//!
//! Error shapes are those of the AWS Query protocol as the SDKs parse them: EC2's
//! `<Response><Errors><Error><Code>…` and RDS's `<ErrorResponse><Error><Type>…<Code>…`, with
//! the HTTP status AWS uses (EC2 `RequestLimitExceeded` is 503, RDS `Throttling` is 400).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::aws_query::{QueryRequest, Service};
use crate::error::{Error, Result};
use crate::http_util::{self, PlainClient};

/// An AWS error answer: HTTP status, error code and message, in the service's XML shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AwsError {
    /// The service whose error shape is used.
    pub service: Service,
    /// The HTTP status.
    pub status: u16,
    /// The AWS error code (e.g. `RequestLimitExceeded`).
    pub code: String,
    /// The human-readable message.
    pub message: String,
}

impl AwsError {
    /// The throttling error of `service`: EC2 `RequestLimitExceeded` (HTTP 503), RDS
    /// `Throttling` (HTTP 400).
    pub fn throttling(service: Service) -> Self {
        match service {
            Service::Ec2 => AwsError {
                service,
                status: 503,
                code: "RequestLimitExceeded".into(),
                message: "Request limit exceeded.".into(),
            },
            Service::Rds => AwsError {
                service,
                status: 400,
                code: "Throttling".into(),
                message: "Rate exceeded".into(),
            },
        }
    }

    /// EC2's `IncorrectInstanceState` (HTTP 400) for `instance_id`.
    pub fn incorrect_instance_state(instance_id: &str) -> Self {
        AwsError {
            service: Service::Ec2,
            status: 400,
            code: "IncorrectInstanceState".into(),
            message: format!(
                "The instance '{instance_id}' is not in a state from which the requested \
                 operation can be performed."
            ),
        }
    }

    /// RDS's `InvalidDBInstanceState` (HTTP 400) for `identifier`.
    pub fn invalid_db_instance_state(identifier: &str) -> Self {
        AwsError {
            service: Service::Rds,
            status: 400,
            code: "InvalidDBInstanceState".into(),
            message: format!(
                "DB instance {identifier} is not in a valid state for this operation."
            ),
        }
    }

    /// Any error: `service`'s shape with this status, code and message.
    pub fn new(service: Service, status: u16, code: &str, message: &str) -> Self {
        AwsError {
            service,
            status,
            code: code.into(),
            message: message.into(),
        }
    }

    /// The XML body AWS sends for this error.
    pub fn body(&self, request_id: &str) -> String {
        let code = xml_escape(&self.code);
        let message = xml_escape(&self.message);
        match self.service {
            Service::Ec2 => format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error>\
                 <Code>{code}</Code><Message>{message}</Message></Error></Errors>\
                 <RequestID>{request_id}</RequestID></Response>"
            ),
            Service::Rds => {
                let kind = if self.status >= 500 {
                    "Receiver"
                } else {
                    "Sender"
                };
                format!(
                    "<ErrorResponse xmlns=\"http://rds.amazonaws.com/doc/2014-10-31/\">\
                     <Error><Type>{kind}</Type><Code>{code}</Code><Message>{message}</Message>\
                     </Error><RequestId>{request_id}</RequestId></ErrorResponse>"
                )
            }
        }
    }
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// A rule: answer matching requests with an error, a number of times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// The action to fail (e.g. `StartInstances`).
    pub action: String,
    /// The error to answer with; its service also restricts which requests match.
    pub error: AwsError,
    /// How many matching requests still get the error.
    pub remaining: usize,
    /// When set, only requests naming this instance ID / DB identifier match.
    pub resource_id: Option<String>,
    /// When set, matching requests are not answered with `error`: they are held this long,
    /// then forwarded (a stalled connection, as a black-holed endpoint or an overloaded load
    /// balancer gives).
    pub stall: Option<Duration>,
}

impl Fault {
    /// Fails `action` of `error.service` once with `error`.
    pub fn new(action: &str, error: AwsError) -> Self {
        Fault {
            action: action.into(),
            error,
            remaining: 1,
            resource_id: None,
            stall: None,
        }
    }

    /// Holds requests of `action` of `service` for `stall` before forwarding them, once.
    pub fn stall(service: Service, action: &str, stall: Duration) -> Self {
        Fault {
            stall: Some(stall),
            ..Fault::throttle(service, action)
        }
    }

    /// Throttles `action` of `service` once (see [`AwsError::throttling`]).
    pub fn throttle(service: Service, action: &str) -> Self {
        Fault::new(action, AwsError::throttling(service))
    }

    /// Fails `action` (e.g. `StartInstances`) with `IncorrectInstanceState` for requests
    /// naming `instance_id`, once.
    pub fn incorrect_instance_state(action: &str, instance_id: &str) -> Self {
        Fault::new(action, AwsError::incorrect_instance_state(instance_id))
            .for_resource(instance_id)
    }

    /// Applies the fault `n` times (0 disables it).
    #[must_use]
    pub fn times(mut self, n: usize) -> Self {
        self.remaining = n;
        self
    }

    /// Matches only requests that name `id` (EC2 `InstanceId.N`, RDS `DBInstanceIdentifier`).
    #[must_use]
    pub fn for_resource(mut self, id: &str) -> Self {
        self.resource_id = Some(id.into());
        self
    }

    fn matches(&self, req: &QueryRequest) -> bool {
        self.remaining > 0
            && req.action.as_deref() == Some(self.action.as_str())
            && req.service.is_none_or(|s| s == self.error.service)
            && self
                .resource_id
                .as_deref()
                .is_none_or(|id| req.resource_ids().contains(&id))
    }
}

/// One request that went through the proxy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxiedRequest {
    /// Wall-clock time of arrival.
    pub at: SystemTime,
    /// Arrival time since the proxy started (monotonic; use it for latencies).
    pub since_start: Duration,
    /// How long the answer took (forwarding included).
    pub duration: Duration,
    /// The service, when it can be told.
    pub service: Option<Service>,
    /// The `Action` parameter.
    pub action: Option<String>,
    /// Instance IDs / DB identifiers the request names.
    pub resource_ids: Vec<String>,
    /// The HTTP status answered; 0 for a stalled request (recorded on arrival).
    pub status: u16,
    /// The error code when the proxy injected a fault (`stalled <duration>` for a stall),
    /// `None` when it forwarded.
    pub injected: Option<String>,
}

/// A rule: hold matching requests for a while before forwarding them (a slow AWS answer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delay {
    /// The action to delay (e.g. `StartInstances`).
    pub action: String,
    /// How long each matching request is held before it is forwarded.
    pub by: Duration,
    /// How many matching requests are still delayed.
    pub remaining: usize,
}

#[derive(Debug)]
struct State {
    faults: VecDeque<Fault>,
    delays: VecDeque<Delay>,
    requests: Vec<ProxiedRequest>,
}

#[derive(Debug)]
struct Shared {
    upstream: String,
    started: Instant,
    state: Mutex<State>,
    client: PlainClient,
    request_ids: AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave State inconsistent (plain pushes and
        // decrements), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The running proxy, listening on 127.0.0.1; stopped when dropped.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy on a free port of 127.0.0.1 forwarding to `upstream` (e.g. moto's
    /// [`endpoint_url`](crate::moto::MotoServer::endpoint_url)). Must be called inside a
    /// Tokio runtime.
    ///
    /// # Errors
    /// [`Error::Io`] when it cannot listen.
    pub async fn start(upstream: &str) -> Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| Error::io("binding the fault proxy", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("reading the fault proxy's address", e))?;
        let shared = Arc::new(Shared {
            upstream: upstream.trim_end_matches('/').to_owned(),
            started: Instant::now(),
            state: Mutex::new(State {
                faults: VecDeque::new(),
                delays: VecDeque::new(),
                requests: Vec::new(),
            }),
            client: http_util::client(),
            request_ids: AtomicU64::new(1),
        });
        let task = tokio::spawn(accept_loop(listener, shared.clone()));
        Ok(FaultProxy { addr, shared, task })
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The proxy's URL, to use as the AWS endpoint URL.
    pub fn endpoint_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Environment for a process that must use the proxy: see [`crate::moto::aws_env`].
    pub fn env(&self) -> Vec<(&'static str, String)> {
        crate::moto::aws_env(&self.endpoint_url())
    }

    /// An SDK configuration pointed at the proxy: see [`crate::moto::sdk_config`].
    pub fn sdk_config(&self) -> aws_config::SdkConfig {
        crate::moto::sdk_config(&self.endpoint_url())
    }

    /// An EC2 client through the proxy.
    pub fn ec2(&self) -> aws_sdk_ec2::Client {
        aws_sdk_ec2::Client::new(&self.sdk_config())
    }

    /// An RDS client through the proxy.
    pub fn rds(&self) -> aws_sdk_rds::Client {
        aws_sdk_rds::Client::new(&self.sdk_config())
    }

    /// Adds a fault. Faults are tried in the order added; a request takes the first that
    /// matches and uses up one of its applications.
    pub fn inject(&self, fault: Fault) {
        self.shared.lock().faults.push_back(fault);
    }

    /// Holds the next `times` requests of `action` for `by` each before forwarding them (the
    /// request is recorded at its arrival; its `duration` includes the wait).
    pub fn delay(&self, action: &str, by: Duration, times: usize) {
        self.shared.lock().delays.push_back(Delay {
            action: action.into(),
            by,
            remaining: times,
        });
    }

    /// The delays with applications left.
    pub fn pending_delays(&self) -> Vec<Delay> {
        let state = self.shared.lock();
        state
            .delays
            .iter()
            .filter(|d| d.remaining > 0)
            .cloned()
            .collect()
    }

    /// Removes every fault.
    pub fn clear_faults(&self) {
        self.shared.lock().faults.clear();
    }

    /// The faults still to apply (those with applications left).
    pub fn pending_faults(&self) -> Vec<Fault> {
        self.shared
            .lock()
            .faults
            .iter()
            .filter(|f| f.remaining > 0)
            .cloned()
            .collect()
    }

    /// Every request seen so far, in order of arrival.
    pub fn requests(&self) -> Vec<ProxiedRequest> {
        self.shared.lock().requests.clone()
    }

    /// How many requests of `action` were seen (injected or forwarded).
    pub fn count(&self, action: &str) -> usize {
        self.shared
            .lock()
            .requests
            .iter()
            .filter(|r| r.action.as_deref() == Some(action))
            .count()
    }

    /// Forgets the requests seen so far.
    pub fn clear_requests(&self) {
        self.shared.lock().requests.clear();
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every connection task.
        self.task.abort();
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!(error = %e, "fault proxy: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Reap finished connection tasks so the set does not grow without bound.
        while connections.try_join_next().is_some() {}
        let shared = shared.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(handle(req, &shared).await) }
            });
            if let Err(e) = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(error = %e, "fault proxy: connection ended with an error");
            }
        });
    }
}

async fn handle(req: Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    let arrived = Instant::now();
    let at = SystemTime::now();
    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return plain(
                StatusCode::BAD_REQUEST,
                format!("cannot read the request body: {e}"),
            );
        }
    };
    let header =
        |name: http::header::HeaderName| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let query = QueryRequest::parse(
        parts.uri.query(),
        header(http::header::CONTENT_TYPE),
        header(http::header::AUTHORIZATION),
        &body,
    );

    let injected = {
        let mut state = shared.lock();
        state
            .faults
            .iter_mut()
            .find(|f| f.matches(&query))
            .map(|f| {
                f.remaining -= 1;
                (f.error.clone(), f.stall)
            })
    };
    let (injected, stalled) = match injected {
        Some((_, Some(stall))) => (None, Some(stall)),
        Some((error, None)) => (Some(error), None),
        None => (None, None),
    };
    if let Some(stall) = stalled {
        // Recorded on arrival: the client may give up and close the connection, which ends
        // this handler before it answers.
        shared.lock().requests.push(ProxiedRequest {
            at,
            since_start: arrived.duration_since(shared.started),
            duration: stall,
            service: query.service,
            action: query.action.clone(),
            resource_ids: query
                .resource_ids()
                .into_iter()
                .map(str::to_owned)
                .collect(),
            status: 0,
            injected: Some(format!("stalled {stall:?}")),
        });
        tokio::time::sleep(stall).await;
        return forward(parts, body, shared).await;
    }

    let delay = {
        let mut state = shared.lock();
        state
            .delays
            .iter_mut()
            .find(|d| d.remaining > 0 && query.action.as_deref() == Some(d.action.as_str()))
            .map(|d| {
                d.remaining -= 1;
                d.by
            })
    };
    if let Some(by) = delay {
        tokio::time::sleep(by).await;
    }

    let response = match &injected {
        Some(error) => {
            let n = shared.request_ids.fetch_add(1, Ordering::Relaxed);
            let request_id = format!("00000000-0000-4000-8000-{n:012x}");
            let mut resp = Response::new(Full::new(Bytes::from(error.body(&request_id))));
            *resp.status_mut() =
                StatusCode::from_u16(error.status).unwrap_or(StatusCode::BAD_REQUEST);
            let headers = resp.headers_mut();
            headers.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("text/xml;charset=UTF-8"),
            );
            if let Ok(v) = HeaderValue::from_str(&request_id) {
                headers.insert("x-amzn-requestid", v);
            }
            resp
        }
        None => forward(parts, body, shared).await,
    };

    let record = ProxiedRequest {
        at,
        since_start: arrived.duration_since(shared.started),
        duration: arrived.elapsed(),
        service: query.service,
        action: query.action.clone(),
        resource_ids: query
            .resource_ids()
            .into_iter()
            .map(str::to_owned)
            .collect(),
        status: response.status().as_u16(),
        injected: injected.map(|e| e.code),
    };
    shared.lock().requests.push(record);
    response
}

async fn forward(
    parts: http::request::Parts,
    body: Bytes,
    shared: &Shared,
) -> Response<Full<Bytes>> {
    let path = parts
        .uri
        .path_and_query()
        .map(|pq| pq.as_str())
        .unwrap_or("/");
    let url = format!("{}{path}", shared.upstream);
    let mut builder = Request::builder().method(parts.method.clone()).uri(&url);
    for (name, value) in &parts.headers {
        if !is_hop_by_hop(name) {
            builder = builder.header(name, value);
        }
    }
    let request = match builder.body(Full::new(body)) {
        Ok(r) => r,
        Err(e) => return plain(StatusCode::BAD_GATEWAY, format!("cannot build {url}: {e}")),
    };
    let upstream = match shared.client.request(request).await {
        Ok(r) => r,
        Err(e) => {
            return plain(
                StatusCode::BAD_GATEWAY,
                format!("upstream {url}: {}", http_util::error_chain(&e)),
            );
        }
    };
    let (mut parts, body) = upstream.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return plain(StatusCode::BAD_GATEWAY, format!("upstream body: {e}")),
    };
    let hop: Vec<_> = parts
        .headers
        .keys()
        .filter(|n| is_hop_by_hop(n) || *n == http::header::CONTENT_LENGTH)
        .cloned()
        .collect();
    for name in hop {
        parts.headers.remove(name);
    }
    Response::from_parts(parts, Full::new(body))
}

fn is_hop_by_hop(name: &http::header::HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
    )
}

fn plain(status: StatusCode, message: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(message)));
    *resp.status_mut() = status;
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_have_the_service_shapes() {
        let ec2 = AwsError::throttling(Service::Ec2).body("req-1");
        assert!(ec2.contains("<Response><Errors><Error><Code>RequestLimitExceeded</Code>"));
        assert!(ec2.contains("<RequestID>req-1</RequestID>"));
        let rds = AwsError::throttling(Service::Rds).body("req-2");
        assert!(rds.contains("<Error><Type>Sender</Type><Code>Throttling</Code>"));
        assert!(rds.contains("<RequestId>req-2</RequestId>"));
        let odd = AwsError::new(Service::Ec2, 400, "X<&>", "a \"b\"").body("r");
        assert!(odd.contains("<Code>X&lt;&amp;&gt;</Code>"), "{odd}");
    }

    #[test]
    fn faults_match_action_service_and_resource() {
        let req = QueryRequest::parse(
            Some("Action=StartInstances&Version=2016-11-15&InstanceId.1=i-a&InstanceId.2=i-b"),
            None,
            None,
            b"",
        );
        assert!(Fault::throttle(Service::Ec2, "StartInstances").matches(&req));
        assert!(!Fault::throttle(Service::Rds, "StartInstances").matches(&req));
        assert!(!Fault::throttle(Service::Ec2, "StopInstances").matches(&req));
        assert!(Fault::incorrect_instance_state("StartInstances", "i-b").matches(&req));
        assert!(!Fault::incorrect_instance_state("StartInstances", "i-c").matches(&req));
        assert!(
            !Fault::throttle(Service::Ec2, "StartInstances")
                .times(0)
                .matches(&req)
        );
    }
}
