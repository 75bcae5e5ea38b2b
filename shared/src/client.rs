//! The Kubernetes API client of every binary of the project (feature `client`).
//!
//! kube's own middleware (the cluster's base URI, its authentication, the extra headers such as
//! impersonation, the retries of 429/503/504 when `Config::default_retry` is set, and the
//! connect/read/write timeouts of the `Config`) over a connection pool sized for a process that
//! runs for weeks:
//!
//! - An idle connection leaves the pool after [`POOL_IDLE_TIMEOUT`]. The API server closes a
//!   connection idle for 90 s (`IdleTimeout` of k8s.io/apiserver's secure serving), and so
//!   does hyper's default pool: at the same instant, a request sent on such a connection fails
//!   with "connection closed before message completed". Closing first, the client never sends
//!   on a connection the server is closing.
//! - At most [`POOL_MAX_IDLE`] idle connections are kept: a burst of concurrent writes opens
//!   more, and those are closed when the burst is over rather than kept with their TLS and
//!   read buffers.
//! - One connection's read buffer grows to at most [`READ_BUFFER_MAX`]; hyper's default
//!   (about 400 KiB) is reached by any connection that once carried a list page, and kept for
//!   its whole life.
//!
//! A `Config` with a proxy URL gets kube's own client unchanged.

use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{ClientBuilder, ConfigExt};
use tower::ServiceBuilder;

/// How long an idle connection stays in the pool: well below the API server's 90 s.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Idle connections kept per API server.
pub const POOL_MAX_IDLE: usize = 4;

/// The largest read buffer of one connection, in bytes.
pub const READ_BUFFER_MAX: usize = 64 * 1024;

/// The pool of a client: [`Pool::default`] is the one of every binary, tests shorten it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool {
    /// How long an idle connection stays in the pool.
    pub idle_timeout: Duration,
    /// Idle connections kept per host.
    pub max_idle: usize,
    /// The largest read buffer of one connection, in bytes (at least 8,192).
    pub read_buffer_max: usize,
}

impl Default for Pool {
    fn default() -> Self {
        Self {
            idle_timeout: POOL_IDLE_TIMEOUT,
            max_idle: POOL_MAX_IDLE,
            read_buffer_max: READ_BUFFER_MAX,
        }
    }
}

/// The client of `config` over the default [`Pool`].
///
/// # Errors
/// What kube reports for an unusable `config` (TLS material, authentication, headers).
pub fn client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    client_with(config, Pool::default())
}

/// The client of `config` over `pool`.
///
/// # Errors
/// What kube reports for an unusable `config` (TLS material, authentication, headers).
pub fn client_with(config: kube::Config, pool: Pool) -> Result<kube::Client, kube::Error> {
    if config.proxy_url.is_some() {
        return kube::Client::try_from(config);
    }
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Fails only when another thread installed one meanwhile, which is as good.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let tls = config.rustls_https_connector_with_connector(http)?;
    let mut connector = hyper_timeout::TimeoutConnector::new(tls);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let hyper_client = hyper_util::client::legacy::Builder::new(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(pool.idle_timeout)
        .pool_max_idle_per_host(pool.max_idle)
        .http1_max_buf_size(pool.read_buffer_max.max(8192))
        .build::<_, kube::client::Body>(connector);
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(hyper_client);
    Ok(ClientBuilder::new(service, config.default_namespace).build())
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// What the test server saw: connections accepted, and connections the client closed.
    #[derive(Default)]
    struct Seen {
        accepted: AtomicUsize,
        closed: AtomicUsize,
    }

    /// An HTTP/1.1 server on 127.0.0.1 answering every request with an empty JSON list after
    /// `delay`; counts its connections.
    async fn server(delay: Duration) -> (String, Arc<Seen>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Seen::default());
        let counts = seen.clone();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                counts.accepted.fetch_add(1, Ordering::SeqCst);
                let counts = counts.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(|_req| async move {
                        tokio::time::sleep(delay).await;
                        Ok::<_, Infallible>(hyper::Response::new(
                            http_body_util::Full::new(hyper::body::Bytes::from_static(
                                br#"{"kind":"NamespaceList","apiVersion":"v1","metadata":{},"items":[]}"#,
                            )),
                        ))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                        .await;
                    counts.closed.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        (url, seen)
    }

    async fn list(client: &kube::Client) {
        let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client.clone());
        api.list(&Default::default()).await.expect("the list");
    }

    fn config(url: &str) -> kube::Config {
        kube::Config::new(url.parse().unwrap())
    }

    #[tokio::test]
    async fn an_idle_connection_is_closed_by_the_client_after_the_idle_timeout() {
        let (url, seen) = server(Duration::ZERO).await;
        let pool = Pool {
            idle_timeout: Duration::from_millis(300),
            ..Pool::default()
        };
        let client = client_with(config(&url), pool).unwrap();
        list(&client).await;
        list(&client).await;
        assert_eq!(
            seen.accepted.load(Ordering::SeqCst),
            1,
            "reused while fresh"
        );
        // The pool's timer closes it; the server sees the client hang up.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(seen.closed.load(Ordering::SeqCst), 1, "closed once idle");
        list(&client).await;
        assert_eq!(seen.accepted.load(Ordering::SeqCst), 2, "a new one after");
    }

    #[tokio::test]
    async fn a_burst_keeps_at_most_max_idle_connections() {
        let (url, seen) = server(Duration::from_millis(200)).await;
        let client = client_with(config(&url), Pool::default()).unwrap();
        futures_join(&client, 10).await;
        assert_eq!(seen.accepted.load(Ordering::SeqCst), 10);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            seen.closed.load(Ordering::SeqCst),
            10 - POOL_MAX_IDLE,
            "the connections beyond the idle limit are closed at once"
        );
    }

    async fn futures_join(client: &kube::Client, n: usize) {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..n {
            let client = client.clone();
            set.spawn(async move { list(&client).await });
        }
        while let Some(r) = set.join_next().await {
            r.unwrap();
        }
    }
}
