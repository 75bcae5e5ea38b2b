//! The capture endpoint: an HTTPS admission endpoint registered with a real API server (as one
//! more validating webhook beside the operator's) that records every AdmissionReview the API
//! server sends it, byte for byte, and admits it. The recorded reviews are the load of the
//! webhook figures: what the real kube-apiserver sends for a real create (managedFields,
//! labels, annotations, userInfo with its groups and extra, options, requestKind and
//! requestResource), not a hand-made review.

use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::{Request, Response, body::Incoming, service::service_fn};
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto,
};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// One recorded request: its path and body as received.
#[derive(Debug, Clone)]
pub struct Captured {
    /// The request path (`/validate`, `/mutate`).
    pub path: String,
    /// The request body, as the API server sent it.
    pub body: Bytes,
}

impl Captured {
    /// The review's `request` as JSON (for choosing among the recorded reviews).
    pub fn request(&self) -> Value {
        serde_json::from_slice::<Value>(&self.body)
            .map(|v| v["request"].clone())
            .unwrap_or(Value::Null)
    }
}

/// A running capture endpoint; stops when dropped.
pub struct CaptureServer {
    /// Where it listens (127.0.0.1).
    pub addr: SocketAddr,
    recorded: Arc<Mutex<Vec<Captured>>>,
    task: tokio::task::JoinHandle<()>,
}

impl CaptureServer {
    /// Listens on a free port of 127.0.0.1 with `tls`.
    pub async fn start(tls: Arc<rustls::ServerConfig>) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let recorded = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn(serve(listener, tls, recorded.clone()));
        Ok(Self {
            addr,
            recorded,
            task,
        })
    }

    /// Every request recorded so far.
    pub fn recorded(&self) -> Vec<Captured> {
        self.recorded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for CaptureServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    recorded: Arc<Mutex<Vec<Captured>>>,
) {
    let acceptor = TlsAcceptor::from(tls);
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let acceptor = acceptor.clone();
        let recorded = recorded.clone();
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(tcp).await else {
                return;
            };
            let service = service_fn(move |req: Request<Incoming>| {
                let recorded = recorded.clone();
                async move {
                    let path = req.uri().path().to_owned();
                    let body = req
                        .into_body()
                        .collect()
                        .await
                        .map(|c| c.to_bytes())
                        .unwrap_or_default();
                    // The API server requires the answer to name the request's uid.
                    let uid = serde_json::from_slice::<Value>(&body)
                        .ok()
                        .and_then(|v| v["request"]["uid"].as_str().map(str::to_owned))
                        .unwrap_or_default();
                    recorded
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(Captured { path, body });
                    let answer = json!({
                        "apiVersion": "admission.k8s.io/v1",
                        "kind": "AdmissionReview",
                        "response": {"uid": uid, "allowed": true},
                    });
                    Ok::<_, Infallible>(
                        Response::builder()
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from(answer.to_string())))
                            .unwrap_or_default(),
                    )
                }
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
