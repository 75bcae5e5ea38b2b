//! The bare TLS echo server: hyper + rustls, reads each request body in full and answers a
//! fixed AdmissionReview. Nothing else: no routing, no parsing, no metrics. Against the same
//! load it gives the ceiling of the machine for keep-alive TLS request/response.

use std::{convert::Infallible, sync::Arc};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::{Request, Response, body::Incoming, service::service_fn};
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto,
};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// Serves `listener` forever.
pub async fn serve(listener: TcpListener, tls: Arc<rustls::ServerConfig>, answer: Bytes) {
    let acceptor = TlsAcceptor::from(tls);
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let answer = answer.clone();
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(tcp).await else {
                return;
            };
            let service = service_fn(move |req: Request<Incoming>| {
                let answer = answer.clone();
                async move {
                    // Read the review as a real webhook must, then answer.
                    let _ = req.into_body().collect().await;
                    Ok::<_, Infallible>(
                        Response::builder()
                            .header("content-type", "application/json")
                            .body(Full::new(answer))
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
