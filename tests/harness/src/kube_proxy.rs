//! A fault-injecting reverse proxy in front of a real kube-apiserver.
//!
//! The product talks plain HTTP to the proxy on 127.0.0.1 (through the kubeconfig the proxy
//! writes); the proxy forwards every request to the API server over TLS, authenticated with the
//! admin client certificate, so the API server still authenticates, authorizes (impersonation
//! headers pass through), admits and stores everything. Request and response bodies are
//! streamed, never buffered: a watch stays one long-lived chunked response end to end.
//!
//! At run time a test can
//!
//! - make requests matching a method and a substring of their path and query answer a given
//!   status with a `metav1.Status` body, a number of times ([`KubeProxy::inject`]), as an API
//!   server under load or behind a failing load balancer does;
//! - cut every response still open, watches included ([`KubeProxy::drop_streams`]), as a
//!   broken connection does;
//! - stall requests matching a method and path: hold them unanswered for a while or until the
//!   faults are cleared, then forward them ([`KubeFault::stall`]), as a partitioned network or
//!   an overloaded API server does;
//! - read what went through ([`KubeProxy::requests`]).
//!
//! Connection upgrades (`exec`, `port-forward`) are not proxied.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use http::Method;

use crate::control_plane::ControlPlane;
use crate::error::{Error, Result};
use crate::http_util::error_chain;
use crate::paths::TestDir;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;
type UpstreamClient = Client<HttpsConnector<HttpConnector>, Incoming>;

/// Where the proxy forwards to: the API server's URL, the CA that signed its serving
/// certificate, and the client identity the proxy presents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upstream {
    /// `https://host:port` of the API server.
    pub url: String,
    /// The CA certificate(s), PEM.
    pub ca_pem: String,
    /// The client certificate, PEM.
    pub client_cert_pem: String,
    /// The client key, PEM.
    pub client_key_pem: String,
}

impl Upstream {
    /// The API server of a private control plane, as its admin.
    pub fn of(plane: &ControlPlane) -> Upstream {
        let (cert, key) = plane.admin_identity_pem();
        Upstream {
            url: plane.url(),
            ca_pem: plane.ca_pem().to_owned(),
            client_cert_pem: cert.to_owned(),
            client_key_pem: key.to_owned(),
        }
    }

    /// The cluster and user of the current context of a kubeconfig that authenticates with a
    /// client certificate (embedded `*-data` fields or file paths), such as the shared control
    /// plane's admin kubeconfig ([`crate::control_plane::TestCluster::kubeconfig_path`]).
    ///
    /// # Errors
    /// [`Error::Io`] when a file cannot be read, [`Error::Protocol`] when the kubeconfig lacks
    /// what is needed.
    pub fn from_kubeconfig(path: &Path) -> Result<Upstream> {
        let what = path.display().to_string();
        let bad = |message: String| Error::Protocol {
            what: what.clone(),
            message,
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        let config: serde_yaml::Value =
            serde_yaml::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let current = config["current-context"]
            .as_str()
            .ok_or_else(|| bad("no current-context".into()))?;
        let named = |list: &str, name: &str| -> Result<serde_yaml::Value> {
            config[list]
                .as_sequence()
                .and_then(|items| items.iter().find(|i| i["name"].as_str() == Some(name)))
                .cloned()
                .ok_or_else(|| bad(format!("no {list} entry named {name:?}")))
        };
        let context = named("contexts", current)?;
        let cluster_name = context["context"]["cluster"]
            .as_str()
            .ok_or_else(|| bad(format!("context {current:?} names no cluster")))?;
        let user_name = context["context"]["user"]
            .as_str()
            .ok_or_else(|| bad(format!("context {current:?} names no user")))?;
        let cluster = named("clusters", cluster_name)?;
        let user = named("users", user_name)?;
        let base = path.parent().unwrap_or(Path::new("."));
        let pem = |section: &serde_yaml::Value, field: &str| -> Result<String> {
            if let Some(data) = section[format!("{field}-data").as_str()].as_str() {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(data.trim())
                    .map_err(|e| bad(format!("{field}-data: {e}")))?;
                return String::from_utf8(bytes).map_err(|e| bad(format!("{field}-data: {e}")));
            }
            if let Some(file) = section[field].as_str() {
                let file = base.join(file);
                return std::fs::read_to_string(&file)
                    .map_err(|e| Error::io(format!("reading {}", file.display()), e));
            }
            Err(bad(format!("neither {field} nor {field}-data")))
        };
        let url = cluster["cluster"]["server"]
            .as_str()
            .ok_or_else(|| bad(format!("cluster {cluster_name:?} has no server")))?
            .trim_end_matches('/')
            .to_owned();
        Ok(Upstream {
            url,
            ca_pem: pem(&cluster["cluster"], "certificate-authority")?,
            client_cert_pem: pem(&user["user"], "client-certificate")?,
            client_key_pem: pem(&user["user"], "client-key")?,
        })
    }

    fn client(&self) -> Result<UpstreamClient> {
        let tls_err = |what: &str, e: &dyn std::fmt::Display| Error::Protocol {
            what: format!("the upstream {what}"),
            message: e.to_string(),
        };
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_slice_iter(self.ca_pem.as_bytes()) {
            roots.add(ca.map_err(|e| tls_err("CA", &e))?)?;
        }
        let chain = CertificateDer::pem_slice_iter(self.client_cert_pem.as_bytes())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| tls_err("client certificate", &e))?;
        let key = PrivateKeyDer::from_pem_slice(self.client_key_pem.as_bytes())
            .map_err(|e| tls_err("client key", &e))?;
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)?;
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(config)
            .https_only()
            .enable_http1()
            .build();
        Ok(Client::builder(TokioExecutor::new()).build(connector))
    }
}

/// A rule: answer matching requests with an error status and a `metav1.Status` body, a number
/// of times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeFault {
    /// Only requests of this method match; any method when `None`.
    pub method: Option<Method>,
    /// A substring of the request's path and query (`/api/v1/namespaces/x/pods?watch=true`).
    pub path_contains: String,
    /// More substrings the path and query must all contain ([`and_contains`](Self::and_contains)).
    pub also_contains: Vec<String>,
    /// The HTTP status, also the Status's `code`.
    pub status: u16,
    /// The Status's `reason` (`InternalError`, `ServiceUnavailable`, ...).
    pub reason: String,
    /// The Status's `message`.
    pub message: String,
    /// How many matching requests still get the error.
    pub remaining: usize,
    /// When set, matching requests get no error: they are held unanswered this long (or until
    /// [`KubeProxy::clear_faults`]), then forwarded.
    pub stall: Option<Duration>,
}

impl KubeFault {
    /// Answers `method` requests whose path and query contain `path_contains` with `status`,
    /// once, with the reason the API server uses for that status.
    pub fn new(method: Method, path_contains: &str, status: u16) -> KubeFault {
        KubeFault {
            method: Some(method),
            path_contains: path_contains.to_owned(),
            also_contains: Vec::new(),
            status,
            reason: reason_of(status).to_owned(),
            message: format!("injected by the test's API proxy: {status}"),
            remaining: 1,
            stall: None,
        }
    }

    /// Holds every request of any method whose path and query contain `path_contains` for
    /// `hold` (or until [`KubeProxy::clear_faults`]) without answering, then forwards it: the
    /// client sees no answer at all, neither success nor error. Applies to every matching
    /// request until cleared (narrow it with [`times`](Self::times)).
    pub fn stall(path_contains: &str, hold: Duration) -> KubeFault {
        KubeFault {
            method: None,
            stall: Some(hold),
            remaining: usize::MAX,
            message: format!("stalled by the test's API proxy for {hold:?}"),
            ..KubeFault::new(Method::GET, path_contains, 200)
        }
    }

    /// As [`new`](Self::new), for requests of any method.
    pub fn any_method(path_contains: &str, status: u16) -> KubeFault {
        KubeFault {
            method: None,
            ..KubeFault::new(Method::GET, path_contains, status)
        }
    }

    /// Narrows the fault to paths and queries that also contain `part` (a query parameter
    /// whatever its place: `limit=`).
    #[must_use]
    pub fn and_contains(mut self, part: &str) -> KubeFault {
        self.also_contains.push(part.to_owned());
        self
    }

    /// Applies the fault `n` times (0 disables it).
    #[must_use]
    pub fn times(mut self, n: usize) -> KubeFault {
        self.remaining = n;
        self
    }

    /// Sets the Status's message.
    #[must_use]
    pub fn message(mut self, message: &str) -> KubeFault {
        message.clone_into(&mut self.message);
        self
    }

    /// The `metav1.Status` body answered.
    pub fn body(&self) -> String {
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.status,
        })
        .to_string()
    }

    fn matches(&self, method: &Method, path_and_query: &str) -> bool {
        self.remaining > 0
            && self.method.as_ref().is_none_or(|m| m == method)
            && path_and_query.contains(&self.path_contains)
            && self
                .also_contains
                .iter()
                .all(|part| path_and_query.contains(part.as_str()))
    }
}

/// The `reason` kube-apiserver gives a Status of this HTTP code.
fn reason_of(status: u16) -> &'static str {
    match status {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Expired",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    }
}

/// One request that went through the proxy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeRequest {
    /// The method.
    pub method: Method,
    /// Path and query.
    pub path: String,
    /// The status answered (502 when the API server could not be reached).
    pub status: u16,
    /// Whether the proxy answered it with an injected fault.
    pub injected: bool,
    /// When the proxy received it.
    pub received: std::time::SystemTime,
    /// When the head of its answer was sent.
    pub answered: std::time::SystemTime,
}

#[derive(Debug, Default)]
struct State {
    faults: VecDeque<KubeFault>,
    requests: Vec<KubeRequest>,
}

struct Shared {
    upstream: Uri,
    client: UpstreamClient,
    state: Mutex<State>,
    /// Bumped to cut every open response.
    cut: watch::Sender<u64>,
    /// Bumped to release every stalled request.
    released: watch::Sender<u64>,
    open: Arc<AtomicUsize>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Plain pushes and decrements: a poisoned lock still holds a consistent state.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The running proxy, listening on 127.0.0.1; stopped when dropped (every connection with it).
pub struct KubeProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
    kubeconfig: PathBuf,
}

impl std::fmt::Debug for KubeProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.shared.upstream)
            .field("kubeconfig", &self.kubeconfig)
            .finish_non_exhaustive()
    }
}

impl KubeProxy {
    /// Starts a proxy on a free port of 127.0.0.1 forwarding to `upstream`, and writes a
    /// kubeconfig pointing at it into `dir`. Must be called inside a Tokio runtime.
    ///
    /// # Errors
    /// [`Error::Io`] when it cannot listen or write, [`Error::Tls`] or [`Error::Protocol`]
    /// when the upstream's certificates are unusable.
    pub async fn start(dir: &TestDir, upstream: &Upstream) -> Result<KubeProxy> {
        let upstream_uri: Uri = upstream.url.parse().map_err(|e| Error::Protocol {
            what: "the upstream URL".into(),
            message: format!("{}: {e}", upstream.url),
        })?;
        let client = upstream.client()?;
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| Error::io("binding the API proxy", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("reading the API proxy's address", e))?;
        let kubeconfig = dir.join(format!("kube-proxy-{}.kubeconfig", addr.port()));
        write_kubeconfig(&kubeconfig, &format!("http://{addr}"))?;
        let shared = Arc::new(Shared {
            upstream: upstream_uri,
            client,
            state: Mutex::new(State::default()),
            cut: watch::Sender::new(0),
            released: watch::Sender::new(0),
            open: Arc::new(AtomicUsize::new(0)),
        });
        let task = tokio::spawn(accept_loop(listener, shared.clone()));
        Ok(KubeProxy {
            addr,
            shared,
            task,
            kubeconfig,
        })
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig whose server is the proxy (no credentials: the proxy presents its own).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// Adds a fault. Faults are tried in the order added; a request takes the first that
    /// matches and uses up one of its applications.
    pub fn inject(&self, fault: KubeFault) {
        self.shared.lock().faults.push_back(fault);
    }

    /// Removes every fault; requests being stalled are forwarded at once.
    pub fn clear_faults(&self) {
        self.shared.lock().faults.clear();
        self.shared.released.send_modify(|g| *g += 1);
    }

    /// The faults with applications left.
    pub fn pending_faults(&self) -> Vec<KubeFault> {
        self.shared
            .lock()
            .faults
            .iter()
            .filter(|f| f.remaining > 0)
            .cloned()
            .collect()
    }

    /// Every request seen so far (recorded when its answer's head was sent), in that order.
    pub fn requests(&self) -> Vec<KubeRequest> {
        self.shared.lock().requests.clone()
    }

    /// Forgets the requests seen so far.
    pub fn clear_requests(&self) {
        self.shared.lock().requests.clear();
    }

    /// How many answers are being streamed right now (open watches among them).
    pub fn open_streams(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }

    /// Cuts every answer still being streamed, watches included: its connection breaks
    /// mid-body, as when a load balancer or the network drops it. Later requests are served
    /// as before. Returns how many were open.
    pub fn drop_streams(&self) -> usize {
        let open = self.open_streams();
        self.shared.cut.send_modify(|g| *g += 1);
        open
    }
}

impl Drop for KubeProxy {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every connection task.
        self.task.abort();
    }
}

fn write_kubeconfig(path: &Path, server: &str) -> Result<()> {
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "booking-test-proxy", "cluster": {"server": server}}],
        "users": [{"name": "through-proxy", "user": {}}],
        "contexts": [{"name": "booking-test-proxy", "context": {
            "cluster": "booking-test-proxy", "user": "through-proxy"}}],
        "current-context": "booking-test-proxy",
    });
    std::fs::write(path, serde_json::to_string_pretty(&config).expect("json"))
        .map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!(error = %e, "API proxy: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
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
                tracing::debug!(error = %e, "API proxy: connection ended with an error");
            }
        });
    }
}

async fn handle(req: Request<Incoming>, shared: &Shared) -> Response<ProxyBody> {
    let method = req.method().clone();
    let received = std::time::SystemTime::now();
    let path = req
        .uri()
        .path_and_query()
        .map_or_else(|| "/".to_owned(), |pq| pq.as_str().to_owned());
    let injected = {
        let mut state = shared.lock();
        state
            .faults
            .iter_mut()
            .find(|f| f.matches(&method, &path))
            .map(|f| {
                f.remaining -= 1;
                f.clone()
            })
    };
    let response = match &injected {
        Some(KubeFault {
            stall: Some(hold), ..
        }) => {
            let mut released = shared.released.subscribe();
            tokio::select! {
                _ = tokio::time::sleep(*hold) => {}
                _ = released.changed() => {}
            }
            forward(req, &path, shared).await
        }
        Some(fault) => {
            let mut resp = Response::new(full(Bytes::from(fault.body())));
            *resp.status_mut() =
                StatusCode::from_u16(fault.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            resp.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            resp
        }
        None => forward(req, &path, shared).await,
    };
    shared.lock().requests.push(KubeRequest {
        method,
        path,
        status: response.status().as_u16(),
        injected: injected.is_some_and(|f| f.stall.is_none()),
        received,
        answered: std::time::SystemTime::now(),
    });
    response
}

async fn forward(req: Request<Incoming>, path: &str, shared: &Shared) -> Response<ProxyBody> {
    let (mut parts, body) = req.into_parts();
    let uri = {
        let mut b = Uri::builder().path_and_query(path);
        if let Some(scheme) = shared.upstream.scheme() {
            b = b.scheme(scheme.clone());
        }
        if let Some(authority) = shared.upstream.authority() {
            b = b.authority(authority.clone());
        }
        b.build()
    };
    parts.uri = match uri {
        Ok(u) => u,
        Err(e) => return bad_gateway(format!("cannot build the upstream URI of {path}: {e}")),
    };
    // HTTP/2 clients send no Host; the upstream connection is HTTP/1.1.
    parts.version = http::Version::HTTP_11;
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.remove(http::header::HOST);
    let upstream = match shared
        .client
        .request(Request::from_parts(parts, body))
        .await
    {
        Ok(r) => r,
        Err(e) => return bad_gateway(format!("upstream {path}: {}", error_chain(&e))),
    };
    let (mut parts, body) = upstream.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    let cut = {
        let mut rx = shared.cut.subscribe();
        Box::pin(async move {
            // An error means the proxy is gone: cut as well.
            let _ = rx.changed().await;
        })
    };
    shared.open.fetch_add(1, Ordering::SeqCst);
    let body = Cuttable {
        inner: body,
        cut,
        open: shared.open.clone(),
    };
    Response::from_parts(parts, body.boxed_unsync())
}

/// A streamed upstream body that fails (breaking the client's connection) once the proxy is
/// told to cut open streams.
struct Cuttable {
    inner: Incoming,
    cut: Pin<Box<dyn Future<Output = ()> + Send>>,
    open: Arc<AtomicUsize>,
}

impl Drop for Cuttable {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Body for Cuttable {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.cut.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err("stream cut by the test's API proxy".into())));
        }
        Pin::new(&mut this.inner)
            .poll_frame(cx)
            .map_err(|e| Box::new(e) as BoxError)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

fn strip_hop_by_hop(headers: &mut http::HeaderMap) {
    for name in [
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
    ] {
        headers.remove(name);
    }
}

fn full(bytes: Bytes) -> ProxyBody {
    Full::new(bytes)
        .map_err(|never| match never {})
        .boxed_unsync()
}

fn bad_gateway(message: String) -> Response<ProxyBody> {
    tracing::debug!(%message, "API proxy: upstream failed");
    let mut resp = Response::new(full(Bytes::from(message)));
    *resp.status_mut() = StatusCode::BAD_GATEWAY;
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_match_method_and_path() {
        let f = KubeFault::new(Method::GET, "/bookings", 500).times(2);
        assert!(f.matches(&Method::GET, "/apis/x/v1/namespaces/n/bookings?limit=500"));
        assert!(!f.matches(&Method::POST, "/apis/x/v1/namespaces/n/bookings"));
        assert!(!f.matches(&Method::GET, "/apis/x/v1/namespaces/n/resources"));
        assert!(KubeFault::any_method("/bookings", 503).matches(&Method::PATCH, "/a/bookings/b"));
        assert!(!f.clone().times(0).matches(&Method::GET, "/bookings"));
        let body: serde_json::Value = serde_json::from_str(&f.body()).unwrap();
        assert_eq!(body["kind"], "Status");
        assert_eq!(body["code"], 500);
        assert_eq!(body["reason"], "InternalError");
        assert_eq!(
            KubeFault::new(Method::GET, "/", 503).reason,
            "ServiceUnavailable"
        );
    }

    #[test]
    fn a_stall_matches_every_method_until_cleared() {
        let f = KubeFault::stall("/leases/", Duration::from_secs(5));
        assert_eq!(f.stall, Some(Duration::from_secs(5)));
        for m in [Method::GET, Method::PUT, Method::PATCH] {
            assert!(f.matches(&m, "/apis/coordination.k8s.io/v1/namespaces/n/leases/l"));
        }
        assert!(!f.matches(
            &Method::POST,
            "/apis/coordination.k8s.io/v1/namespaces/n/leases"
        ));
        assert_eq!(f.remaining, usize::MAX);
        assert_eq!(KubeFault::new(Method::GET, "/", 500).stall, None);
    }

    #[test]
    fn every_extra_part_must_be_contained_wherever_it_stands() {
        let f = KubeFault::stall("/namespaces/n/bookings?", Duration::from_secs(5))
            .and_contains("limit=");
        assert!(f.matches(&Method::GET, "/apis/g/v1/namespaces/n/bookings?&limit=500"));
        assert!(f.matches(
            &Method::GET,
            "/apis/g/v1/namespaces/n/bookings?watch=1&limit=5"
        ));
        assert!(!f.matches(
            &Method::GET,
            "/apis/g/v1/namespaces/n/bookings?&fieldSelector=x"
        ));
        assert!(!f.matches(&Method::GET, "/apis/g/v1/namespaces/m/bookings?&limit=500"));
    }
}
