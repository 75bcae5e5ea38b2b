//! HTTP plumbing: shared state, authentication, fault injection, routing, discovery and the
//! admin endpoints under `/_testserver/`.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};

use crate::admission::{ServiceEndpoints, UserInfo};
use crate::registry::api_resources;
use crate::status::ApiError;
use crate::store::State;

/// Response body: a full JSON document or a watch stream.
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// One fault rule: the next `remaining` requests whose path contains `path_contains` (and whose
/// method is `method`, if given) are answered with `code`.
#[derive(Clone, Debug, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultRule {
    /// Substring of the request path (query excluded).
    pub path_contains: String,
    /// HTTP method (`GET`, `PATCH`, ...), any when absent.
    #[serde(default)]
    pub method: Option<String>,
    /// How many requests fail.
    #[serde(default = "one")]
    pub count: u32,
    /// The HTTP status code (default 500); the body is a matching `metav1.Status`.
    #[serde(default = "five_hundred")]
    pub code: u16,
    /// The message of the status.
    #[serde(default)]
    pub message: Option<String>,
}

fn one() -> u32 {
    1
}
fn five_hundred() -> u16 {
    500
}

/// Fault-injection state.
#[derive(Debug, Default)]
pub struct Faults {
    /// The next this-many watches answer 410 Gone.
    pub expire_watches: u32,
    /// Request failure rules, first match wins.
    pub rules: Vec<FaultRule>,
}

/// State shared by all connections.
pub struct Shared {
    /// Objects, types, history.
    pub state: Mutex<State>,
    /// Bearer token → user.
    pub tokens: BTreeMap<String, UserInfo>,
    /// Service references of webhooks → base URL.
    pub services: ServiceEndpoints,
    /// Fault injection.
    pub faults: Mutex<Faults>,
    /// Bumped to close every open watch.
    pub close_watches: tokio::sync::watch::Sender<u64>,
    /// Interval of watch bookmarks.
    pub bookmark_interval: Duration,
    /// `host:port` the server listens on.
    pub address: Mutex<String>,
}

impl Shared {
    /// Lock the state (a poisoned lock is recovered: the state is plain data).
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lock the fault state.
    pub fn faults(&self) -> MutexGuard<'_, Faults> {
        self.faults.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A JSON response with optional `Warning` headers.
pub fn json_response(code: u16, body: &Value, warnings: &[String]) -> Response<Body> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut b = Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", "application/json")
        .header("cache-control", "no-cache, private");
    for w in warnings {
        let escaped = w.replace('\\', "\\\\").replace('"', "\\\"");
        b = b.header("warning", format!("299 - \"{escaped}\""));
    }
    b.body(Full::new(Bytes::from(bytes)).boxed_unsync())
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed_unsync()))
}

/// The response of an error.
pub fn error_response(e: &ApiError, warnings: &[String]) -> Response<Body> {
    json_response(e.code, &e.to_status(), warnings)
}

/// A parsed request, as the handlers see it.
pub struct Req {
    /// HTTP method.
    pub method: Method,
    /// Path without query.
    pub path: String,
    /// Query parameters (last value wins).
    pub query: BTreeMap<String, String>,
    /// `Accept` header.
    pub accept: String,
    /// `Content-Type` header.
    pub content_type: String,
    /// `User-Agent` header.
    pub user_agent: String,
    /// Request body.
    pub body: Bytes,
    /// Authenticated user.
    pub user: UserInfo,
}

const MAX_BODY: usize = 3 * 1024 * 1024;

/// Serve one HTTP request.
pub async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query: BTreeMap<String, String> = req
        .uri()
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let accept = header("accept");
    let content_type = header("content-type");
    let user_agent = header("user-agent");
    let auth = header("authorization");
    let user = match auth.strip_prefix("Bearer ") {
        Some(token) => match shared.tokens.get(token.trim()) {
            Some(u) => u.clone(),
            None => return Ok(error_response(&ApiError::unauthorized(), &[])),
        },
        None => UserInfo {
            username: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
        },
    };
    tracing::debug!(%method, %path, user = %user.username, "request");
    if !path.starts_with("/_testserver/")
        && let Some(e) = injected_fault(&shared, &method, &path)
    {
        return Ok(error_response(&e, &[]));
    }
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return Ok(error_response(
                &ApiError::bad_request(format!("reading body: {e}")),
                &[],
            ));
        }
    };
    if body.len() > MAX_BODY {
        return Ok(error_response(
            &ApiError::new(
                413,
                "RequestEntityTooLarge",
                "Request entity too large: limit is 3145728",
            ),
            &[],
        ));
    }
    let r = Req {
        method,
        path,
        query,
        accept,
        content_type,
        user_agent,
        body,
        user,
    };
    Ok(route(shared, r).await)
}

fn injected_fault(shared: &Shared, method: &Method, path: &str) -> Option<ApiError> {
    let mut f = shared.faults();
    let idx = f.rules.iter().position(|r| {
        r.count > 0
            && path.contains(&r.path_contains)
            && r.method
                .as_deref()
                .is_none_or(|m| m.eq_ignore_ascii_case(method.as_str()))
    })?;
    let rule = &mut f.rules[idx];
    rule.count -= 1;
    let code = rule.code;
    let message = rule
        .message
        .clone()
        .unwrap_or_else(|| "injected fault from the test server".into());
    if rule.count == 0 {
        f.rules.remove(idx);
    }
    let reason = match code {
        429 => "TooManyRequests",
        409 => "Conflict",
        404 => "NotFound",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    };
    Some(ApiError::new(code, reason, message))
}

async fn route(shared: Arc<Shared>, r: Req) -> Response<Body> {
    let segs: Vec<String> = r
        .path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    let get = r.method == Method::GET;
    match s.as_slice() {
        ["version"] if get => json_response(200, &crate::version_info(), &[]),
        ["healthz"] | ["readyz"] | ["livez"] if get => Response::builder()
            .header("content-type", "text/plain")
            .body(Full::new(Bytes::from_static(b"ok")).boxed_unsync())
            .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed_unsync())),
        ["_testserver", rest @ ..] => admin(&shared, &r, rest),
        ["api"] if get => {
            let addr = shared.address.lock().map(|a| a.clone()).unwrap_or_default();
            json_response(
                200,
                &json!({"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}]}),
                &[],
            )
        }
        ["apis"] if get => {
            let reg = shared.lock().registry.clone();
            let groups: Vec<Value> = reg
                .groups()
                .into_iter()
                .map(|(g, vs)| group_json(&g, &vs))
                .collect();
            json_response(
                200,
                &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}),
                &[],
            )
        }
        ["apis", g] if get => {
            let reg = shared.lock().registry.clone();
            match reg.groups().into_iter().find(|(name, _)| name == g) {
                Some((g, vs)) => {
                    let mut v = group_json(&g, &vs);
                    v["kind"] = json!("APIGroup");
                    v["apiVersion"] = json!("v1");
                    json_response(200, &v, &[])
                }
                None => error_response(&ApiError::path_not_found(), &[]),
            }
        }
        ["api", v] if get => resource_list(&shared, "", v),
        ["apis", g, v] if get => resource_list(&shared, g, v),
        ["openapi", "v3"] if get => {
            let reg = shared.lock().registry.clone();
            json_response(200, &crate::openapi::index(&reg), &[])
        }
        ["openapi", "v2"] if get => {
            let reg = shared.lock().registry.clone();
            Response::builder()
                .header("content-type", "application/octet-stream")
                .body(Full::new(Bytes::from(crate::openapi::v2_protobuf(&reg))).boxed_unsync())
                .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed_unsync()))
        }
        ["openapi", "v3", "api", v] if get => openapi_doc(&shared, "", v),
        ["openapi", "v3", "apis", g, v] if get => openapi_doc(&shared, g, v),
        ["api", v, rest @ ..] => crate::handlers::resource(shared.clone(), r, "", v, rest).await,
        ["apis", g, v, rest @ ..] => crate::handlers::resource(shared.clone(), r, g, v, rest).await,
        _ => error_response(&ApiError::path_not_found(), &[]),
    }
}

fn group_json(g: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
        .collect();
    json!({"name": g, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
}

fn resource_list(shared: &Shared, group: &str, version: &str) -> Response<Body> {
    let reg = shared.lock().registry.clone();
    if !reg.serves_group_version(group, version) {
        return error_response(&ApiError::path_not_found(), &[]);
    }
    let resources: Vec<Value> = reg
        .all()
        .iter()
        .filter(|t| t.group == group && t.versions.iter().any(|v| v == version))
        .flat_map(|t| api_resources(t, version))
        .collect();
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    json_response(
        200,
        &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
        &[],
    )
}

fn openapi_doc(shared: &Shared, group: &str, version: &str) -> Response<Body> {
    let reg = shared.lock().registry.clone();
    if !reg.serves_group_version(group, version) {
        return error_response(&ApiError::path_not_found(), &[]);
    }
    json_response(200, &crate::openapi::gv_document(&reg, group, version), &[])
}

fn admin(shared: &Shared, r: &Req, rest: &[&str]) -> Response<Body> {
    let ok = json!({"ok": true});
    match (r.method.as_str(), rest) {
        ("POST", ["watch", "expire"]) => {
            let n = serde_json::from_slice::<Value>(&r.body)
                .ok()
                .and_then(|v| v["count"].as_u64())
                .unwrap_or(1) as u32;
            shared.faults().expire_watches += n;
            json_response(200, &ok, &[])
        }
        ("POST", ["watch", "close"]) => {
            shared.close_watches.send_modify(|v| *v += 1);
            json_response(200, &ok, &[])
        }
        ("POST", ["history", "compact"]) => {
            shared.lock().compact();
            json_response(200, &ok, &[])
        }
        ("POST", ["faults"]) => match serde_json::from_slice::<FaultRule>(&r.body) {
            Ok(rule) => {
                shared.faults().rules.push(rule);
                json_response(200, &ok, &[])
            }
            Err(e) => error_response(
                &ApiError::bad_request(format!("invalid fault rule: {e}")),
                &[],
            ),
        },
        ("DELETE", ["faults"]) => {
            let mut f = shared.faults();
            f.rules.clear();
            f.expire_watches = 0;
            json_response(200, &ok, &[])
        }
        ("GET", ["faults"]) => {
            let f = shared.faults();
            json_response(
                200,
                &json!({"expireWatches": f.expire_watches, "rules": f.rules}),
                &[],
            )
        }
        _ => error_response(&ApiError::path_not_found(), &[]),
    }
}
