//! A small plain-HTTP client for talking to test servers (readiness probes, moto's API).

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::error::{Error, Result};

/// The client type used throughout the harness for plain HTTP.
pub(crate) type PlainClient = Client<HttpConnector, Full<Bytes>>;

/// A new plain-HTTP client (HTTP/1.1).
pub(crate) fn client() -> PlainClient {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

/// Sends one request and returns the status and the whole body.
pub(crate) async fn send(
    client: &PlainClient,
    method: Method,
    url: &str,
    content_type: Option<&str>,
    body: Bytes,
) -> Result<(StatusCode, Bytes)> {
    let err = |message: String| Error::Http {
        method: method.to_string(),
        url: url.to_owned(),
        message,
    };
    let mut builder = Request::builder().method(method.clone()).uri(url);
    if let Some(ct) = content_type {
        builder = builder.header(http::header::CONTENT_TYPE, ct);
    }
    let request = builder
        .body(Full::new(body))
        .map_err(|e| err(e.to_string()))?;
    let response = client
        .request(request)
        .await
        .map_err(|e| err(error_chain(&e)))?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| err(e.to_string()))?
        .to_bytes();
    Ok((status, body))
}

/// Sends one request and fails unless the status is a success.
pub(crate) async fn send_ok(
    client: &PlainClient,
    method: Method,
    url: &str,
    body: Bytes,
) -> Result<Bytes> {
    let (status, body) = send(client, method.clone(), url, None, body).await?;
    if status.is_success() {
        Ok(body)
    } else {
        Err(Error::Http {
            method: method.to_string(),
            url: url.to_owned(),
            message: format!("status {status}: {}", String::from_utf8_lossy(&body)),
        })
    }
}

/// An error and its sources on one line.
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}
