//! A real HTTPS endpoint for webhook notifications: it records every request (path with query,
//! body) and answers them in turn with the [`Answer`]s it was given, then `200 ok` — including
//! the answers a hostile or broken receiver gives, such as a body that never ends.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::StreamExt as _;
use http::{Request, Response};
use http_body_util::{BodyExt, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::error::{Error, Result};
use crate::tls::TestCa;

/// How the receiver answers one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// This status with the body `ok`.
    Status(u16),
    /// 500 with a body of `x` that never ends, sent as fast as the connection takes it.
    EndlessError,
}

/// One request the receiver got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// Path and query.
    pub path_and_query: String,
    /// The body, as text.
    pub body: String,
}

#[derive(Default)]
struct State {
    answers: std::collections::VecDeque<Answer>,
    received: Vec<Received>,
}

/// The receiver, serving on 127.0.0.1 until dropped.
pub struct WebhookReceiver {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    pushed: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl WebhookReceiver {
    /// Serves HTTPS with a certificate of `ca` for `localhost` and `127.0.0.1`, answering
    /// requests with `answers` in turn, then with 200.
    ///
    /// # Errors
    /// [`Error::Io`] when no port can be bound, [`Error::Protocol`] for a TLS setup failure.
    pub async fn start(ca: &TestCa, answers: Vec<Answer>) -> Result<Self> {
        let cert = ca.issue_server_cert("webhook-receiver", &["localhost", "127.0.0.1"])?;
        let tls = tokio_rustls::TlsAcceptor::from(Arc::new(cert.server_config()?));
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| Error::io("binding the webhook receiver", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("the webhook receiver's address", e))?;
        let state = Arc::new(Mutex::new(State {
            answers: answers.into(),
            received: Vec::new(),
        }));
        let pushed = Arc::new(AtomicU64::new(0));
        let (s, p) = (state.clone(), pushed.clone());
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (tls, state, pushed) = (tls.clone(), s.clone(), p.clone());
                tokio::spawn(async move {
                    let Ok(stream) = tls.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                        answer(req, state.clone(), pushed.clone())
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Self {
            addr,
            state,
            pushed,
            task,
        })
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The requests received so far.
    pub fn received(&self) -> Vec<Received> {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .received
            .clone()
    }

    /// Bytes of endless bodies pushed into connections so far.
    pub fn pushed_bytes(&self) -> u64 {
        self.pushed.load(Ordering::Relaxed)
    }
}

impl Drop for WebhookReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type AnswerBody = UnsyncBoxBody<Bytes, Infallible>;

async fn answer(
    req: Request<Incoming>,
    state: Arc<Mutex<State>>,
    pushed: Arc<AtomicU64>,
) -> std::result::Result<Response<AnswerBody>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
        .unwrap_or_default();
    let next = {
        let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
        state.received.push(Received {
            path_and_query: parts
                .uri
                .path_and_query()
                .map(|p| p.as_str().to_owned())
                .unwrap_or_default(),
            body,
        });
        state.answers.pop_front().unwrap_or(Answer::Status(200))
    };
    let (status, body): (u16, AnswerBody) = match next {
        Answer::Status(status) => (
            status,
            http_body_util::Full::new(Bytes::from_static(b"ok")).boxed_unsync(),
        ),
        Answer::EndlessError => {
            let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
            let stream = futures::stream::repeat(chunk).map(move |c| {
                pushed.fetch_add(c.len() as u64, Ordering::Relaxed);
                Ok::<_, Infallible>(Frame::data(c))
            });
            (500, StreamBody::new(stream).boxed_unsync())
        }
    };
    let mut response = Response::new(body);
    *response.status_mut() = http::StatusCode::from_u16(status).unwrap_or_default();
    Ok(response)
}
