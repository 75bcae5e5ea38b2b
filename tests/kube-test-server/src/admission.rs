//! Dynamic admission: calls the webhooks of Mutating/ValidatingWebhookConfigurations with
//! `admission.k8s.io/v1` AdmissionReviews over HTTPS (verified against `caBundle`), in the real
//! server's order and with its matching rules, failure policies and error shapes.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};

use crate::selector::LabelSelector;
use crate::status::ApiError;

/// The authenticated user of a request (`authentication.k8s.io/v1` UserInfo).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserInfo {
    /// User name.
    pub username: String,
    /// Groups.
    pub groups: Vec<String>,
}

impl UserInfo {
    /// The `userInfo` object of an AdmissionReview.
    pub fn to_json(&self) -> Value {
        json!({"username": self.username, "uid": format!("uid-{}", self.username), "groups": self.groups})
    }
}

/// What is being admitted.
#[derive(Clone, Debug)]
pub struct Attributes {
    /// `CREATE`, `UPDATE` or `DELETE`.
    pub operation: &'static str,
    /// API group.
    pub group: String,
    /// Version the request was made in.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Plural resource.
    pub resource: String,
    /// Subresource (`status`) or empty.
    pub subresource: String,
    /// Whether the type is namespaced.
    pub namespaced: bool,
    /// Namespace (empty for cluster-scoped objects).
    pub namespace: String,
    /// Object name.
    pub name: String,
    /// Labels of the object's namespace (for `namespaceSelector`).
    pub namespace_labels: BTreeMap<String, String>,
    /// The new object (absent for DELETE).
    pub object: Option<Value>,
    /// The old object (UPDATE and DELETE).
    pub old_object: Option<Value>,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// The requesting user.
    pub user: UserInfo,
    /// Field manager of the request, if any.
    pub field_manager: Option<String>,
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn resource_matches(pattern: &str, resource: &str, sub: &str) -> bool {
    let (pr, ps) = pattern.split_once('/').unwrap_or((pattern, ""));
    let res_ok = pr == "*" || pr == resource;
    let sub_ok = if sub.is_empty() {
        ps.is_empty()
    } else {
        ps == "*" || ps == sub
    };
    res_ok && sub_ok
}

/// Whether a webhook's `rules` match the request.
pub fn rules_match(webhook: &Value, a: &Attributes) -> bool {
    let Some(rules) = webhook["rules"].as_array() else {
        return false;
    };
    rules.iter().any(|r| {
        let has =
            |field: &str, want: &str| strings(&r[field]).iter().any(|x| *x == "*" || *x == want);
        let scope = r["scope"].as_str().unwrap_or("*");
        let scope_ok = match scope {
            "Cluster" => !a.namespaced,
            "Namespaced" => a.namespaced,
            _ => true,
        };
        has("operations", a.operation)
            && has("apiGroups", &a.group)
            && has("apiVersions", &a.version)
            && strings(&r["resources"])
                .iter()
                .any(|p| resource_matches(p, &a.resource, &a.subresource))
            && scope_ok
    })
}

/// Whether `namespaceSelector` and `objectSelector` match; an invalid selector is an error.
pub fn selectors_match(webhook: &Value, a: &Attributes) -> Result<bool, String> {
    let ns_sel = LabelSelector::from_object(&webhook["namespaceSelector"])?;
    let ns_ok = if a.kind == "Namespace" && a.group.is_empty() {
        let obj = a.object.as_ref().or(a.old_object.as_ref());
        obj.is_none_or(|o| ns_sel.matches_object(o))
    } else if a.namespaced {
        ns_sel.matches(&a.namespace_labels)
    } else {
        true
    };
    let obj_sel = LabelSelector::from_object(&webhook["objectSelector"])?;
    let obj_ok = [a.object.as_ref(), a.old_object.as_ref()]
        .into_iter()
        .flatten()
        .any(|o| obj_sel.matches_object(o))
        || (a.object.is_none() && a.old_object.is_none());
    Ok(ns_ok && obj_ok)
}

fn review(a: &Attributes, uid: &str, object: Option<&Value>) -> Value {
    let gvk = json!({"group": a.group, "version": a.version, "kind": a.kind});
    let gvr = json!({"group": a.group, "version": a.version, "resource": a.resource});
    let options_kind = match a.operation {
        "CREATE" => "CreateOptions",
        "UPDATE" => "UpdateOptions",
        _ => "DeleteOptions",
    };
    let mut options = json!({"kind": options_kind, "apiVersion": "meta.k8s.io/v1"});
    if let Some(fm) = &a.field_manager
        && a.operation != "DELETE"
    {
        options["fieldManager"] = json!(fm);
    }
    if a.dry_run {
        options["dryRun"] = json!(["All"]);
    }
    let mut req = json!({
        "uid": uid,
        "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": a.name,
        "operation": a.operation,
        "userInfo": a.user.to_json(),
        "object": object.cloned().unwrap_or(Value::Null),
        "oldObject": a.old_object.clone().unwrap_or(Value::Null),
        "dryRun": a.dry_run,
        "options": options,
    });
    if !a.subresource.is_empty() {
        req["subResource"] = json!(a.subresource);
        req["requestSubResource"] = json!(a.subresource);
    }
    if a.namespaced {
        req["namespace"] = json!(a.namespace);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
}

/// Where webhooks given as `clientConfig.service` are reached: `namespace/name` →
/// `https://HOST:PORT` (e.g. `https://127.0.0.1:8443`), since there is no cluster network.
pub type ServiceEndpoints = BTreeMap<String, String>;

/// Where a webhook is called: the request URL, the URL as error messages show it, and for
/// service references the address the service name resolves to.
#[derive(Clone, Debug, PartialEq)]
struct Target {
    url: String,
    display: String,
    resolve_to: Option<(String, u16)>,
}

/// A resolver that maps every name to one endpoint `host:port` (service references), or uses
/// the system resolver for the name itself.
#[derive(Clone)]
struct Resolver(Option<(String, u16)>);

impl tower_service::Service<hyper_util::client::legacy::connect::dns::Name> for Resolver {
    type Response = std::vec::IntoIter<std::net::SocketAddr>;
    type Error = std::io::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: hyper_util::client::legacy::connect::dns::Name) -> Self::Future {
        let fixed = self.0.clone();
        Box::pin(async move {
            let addrs: Vec<std::net::SocketAddr> = match fixed {
                Some((host, port)) => tokio::net::lookup_host((host.as_str(), port))
                    .await?
                    .collect(),
                None => tokio::net::lookup_host((name.as_str(), 0)).await?.collect(),
            };
            Ok(addrs.into_iter())
        })
    }
}

/// The target of a webhook. A `clientConfig.service` is called as
/// `https://<name>.<namespace>.svc<path>` (so the certificate is verified for the service's DNS
/// name, as in a cluster) while connecting to the configured endpoint.
fn webhook_target(webhook: &Value, services: &ServiceEndpoints) -> Result<Target, String> {
    let cc = &webhook["clientConfig"];
    if let Some(url) = cc["url"].as_str() {
        return Ok(Target {
            url: url.to_string(),
            display: url.to_string(),
            resolve_to: None,
        });
    }
    if let Some(svc) = cc.get("service").filter(|s| s.is_object()) {
        let (ns, name) = (
            svc["namespace"].as_str().unwrap_or_default(),
            svc["name"].as_str().unwrap_or_default(),
        );
        let key = format!("{ns}/{name}");
        let base = services.get(&key).ok_or_else(|| {
            format!("service {key:?} has no endpoint (the test server reaches services only through configured service endpoints)")
        })?;
        let endpoint = base
            .parse::<hyper::Uri>()
            .ok()
            .and_then(|u| {
                Some((
                    u.host()?.trim_matches(['[', ']']).to_string(),
                    u.port_u16()?,
                ))
            })
            .ok_or_else(|| {
                format!("service endpoint {base:?} of {key:?} is not https://HOST:PORT")
            })?;
        let path = svc["path"].as_str().unwrap_or("/");
        let port = svc["port"].as_u64().unwrap_or(443);
        return Ok(Target {
            url: format!("https://{name}.{ns}.svc{path}"),
            display: format!("https://{name}.{ns}.svc:{port}{path}"),
            resolve_to: Some(endpoint),
        });
    }
    Err("clientConfig has neither url nor service".into())
}

async fn post(
    target: &Target,
    ca_bundle: Option<&str>,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<Value, String> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_bundle {
        Some(b64) => {
            let pem = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| format!("invalid caBundle: {e}"))?;
            let certs: Vec<_> = rustls_pemfile_certs(&pem)?;
            for c in certs {
                roots.add(c).map_err(|e| format!("invalid caBundle: {e}"))?;
            }
        }
        None => {
            return Err(
                "no caBundle: the test server verifies webhooks only against caBundle".into(),
            );
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new_with_resolver(Resolver(
        target.resolve_to.clone(),
    ));
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .wrap_connector(http);
    let client: hyper_util::client::legacy::Client<_, Full<Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(https);
    let url = target.url.as_str();
    let authority = match &target.resolve_to {
        Some((host, port)) => format!("{host}:{port}"),
        None => url
            .parse::<hyper::Uri>()
            .ok()
            .and_then(|u| u.authority().map(|a| a.to_string()))
            .unwrap_or_default(),
    };
    let req = hyper::Request::post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let fut = async {
        let resp = client.request(req).await.map_err(|e| {
            let mut msg = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                if let Some(io) = s.downcast_ref::<std::io::Error>()
                    && io.kind() == std::io::ErrorKind::ConnectionRefused
                {
                    // As Go's net package words it.
                    return format!("dial tcp {authority}: connect: connection refused");
                }
                msg = format!("{msg}: {s}");
                src = s.source();
            }
            msg
        })?;
        let status = resp.status();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        if !status.is_success() {
            return Err(format!(
                "expected response.status 200, got {}: {}",
                status.as_u16(),
                String::from_utf8_lossy(&bytes)
            ));
        }
        serde_json::from_slice::<Value>(&bytes).map_err(|e| format!("cannot decode response: {e}"))
    };
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err("context deadline exceeded".into()),
    }
}

fn rustls_pemfile_certs(
    pem: &[u8],
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("invalid caBundle: {e}"))
}

/// One configured webhook: its configuration object's webhook entry.
#[derive(Clone, Debug)]
pub struct Webhook {
    /// The entry from `webhooks[]`.
    pub spec: Value,
    /// Whether it comes from a MutatingWebhookConfiguration.
    pub mutating: bool,
}

/// The outcome of calling one webhook.
enum Outcome {
    Allowed { patch: Option<Value> },
    Denied(ApiError),
}

async fn call(
    w: &Webhook,
    a: &Attributes,
    object: Option<&Value>,
    services: &ServiceEndpoints,
    warnings: &mut Vec<String>,
) -> Result<Outcome, ApiError> {
    let name = w.spec["name"].as_str().unwrap_or_default().to_string();
    let fail_open = w.spec["failurePolicy"].as_str() == Some("Ignore");
    let timeout = w.spec["timeoutSeconds"].as_u64().unwrap_or(10).clamp(1, 30);
    if a.dry_run {
        let se = w.spec["sideEffects"].as_str().unwrap_or("Unknown");
        if !matches!(se, "None" | "NoneOnDryRun") {
            return Err(ApiError::bad_request(format!(
                "admission webhook {name:?} does not support dry run"
            )));
        }
    }
    let uid = uuid::Uuid::new_v4().to_string();
    let body = review(a, &uid, object);
    let target = match webhook_target(&w.spec, services) {
        Ok(mut t) => {
            let sep = if t.url.contains('?') { '&' } else { '?' };
            t.url = format!("{}{sep}timeout={timeout}s", t.url);
            t.display = format!("{}{sep}timeout={timeout}s", t.display);
            t
        }
        Err(e) => {
            if fail_open {
                return Ok(Outcome::Allowed { patch: None });
            }
            return Err(ApiError::internal(format!(
                "failed calling webhook {name:?}: {e}"
            )));
        }
    };
    let ca = w.spec["clientConfig"]["caBundle"].as_str();
    let url = target.display.clone();
    let result = post(
        &target,
        ca,
        serde_json::to_vec(&body).unwrap_or_default(),
        Duration::from_secs(timeout),
    )
    .await;
    let resp = match result {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(webhook = %name, error = %e, "webhook call failed");
            if fail_open {
                return Ok(Outcome::Allowed { patch: None });
            }
            return Err(ApiError::internal(format!(
                "failed calling webhook {name:?}: failed to call webhook: Post {url:?}: {e}"
            )));
        }
    };
    let r = &resp["response"];
    if r["uid"].as_str() != Some(uid.as_str()) {
        let e = format!(
            "expected response.uid={uid:?}, got {:?}",
            r["uid"].as_str().unwrap_or_default()
        );
        if fail_open {
            return Ok(Outcome::Allowed { patch: None });
        }
        return Err(ApiError::internal(format!(
            "failed calling webhook {name:?}: {e}"
        )));
    }
    if let Some(ws) = r["warnings"].as_array() {
        warnings.extend(ws.iter().filter_map(Value::as_str).map(String::from));
    }
    if r["allowed"].as_bool() != Some(true) {
        return Ok(Outcome::Denied(denial(&name, &r["status"])));
    }
    let patch = match (r["patch"].as_str(), w.mutating) {
        (Some(p), true) => {
            if r["patchType"].as_str() != Some("JSONPatch") {
                return Err(ApiError::internal(format!(
                    "failed calling webhook {name:?}: unsupported patch type {:?}",
                    r["patchType"]
                )));
            }
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(p)
                .map_err(|e| {
                    ApiError::internal(format!(
                        "failed calling webhook {name:?}: invalid patch: {e}"
                    ))
                })?;
            Some(serde_json::from_slice(&bytes).map_err(|e| {
                ApiError::internal(format!(
                    "failed calling webhook {name:?}: invalid patch: {e}"
                ))
            })?)
        }
        _ => None,
    };
    Ok(Outcome::Allowed { patch })
}

/// The status a denial reaches the client with (`webhookerrors.ToStatusErr` of the real server):
/// the webhook's code (at least 400) and reason, and the message
/// `admission webhook "<name>" denied the request: <message>`.
pub fn denial(name: &str, status: &Value) -> ApiError {
    let code = status["code"].as_u64().unwrap_or(0) as u16;
    let code = if code < 400 { 400 } else { code };
    let reason = status["reason"].as_str().unwrap_or_default();
    let message = status["message"].as_str().unwrap_or_default();
    let denied_by = format!("admission webhook {name:?} denied the request");
    let msg = if !message.is_empty() {
        format!("{denied_by}: {message}")
    } else if !reason.is_empty() {
        format!("{denied_by}: {reason}")
    } else {
        format!("{denied_by} without explanation")
    };
    let mut e = ApiError::new(code, reason, msg);
    if let Some(d) = status.get("details").filter(|d| d.is_object()) {
        e.details = Some(d.clone());
    }
    e
}

/// Run the matching mutating webhooks in order, applying their JSON patches to `object`; then
/// re-invoke, once and in order, the webhooks with `reinvocationPolicy: IfNeeded` that ran
/// before a later webhook changed the object.
pub async fn mutate(
    webhooks: &[Webhook],
    a: &mut Attributes,
    object: &mut Value,
    services: &ServiceEndpoints,
    warnings: &mut Vec<String>,
) -> Result<(), ApiError> {
    let mutating: Vec<&Webhook> = webhooks.iter().filter(|w| w.mutating).collect();
    let mut invoked = Vec::new();
    let mut last_change = None;
    for (i, w) in mutating.iter().enumerate() {
        if let Some(changed) = invoke(w, a, object, services, warnings).await? {
            invoked.push(i);
            if changed {
                last_change = Some(i);
            }
        }
    }
    if let Some(last) = last_change {
        for i in invoked.into_iter().filter(|i| *i < last) {
            let w = mutating[i];
            if w.spec["reinvocationPolicy"].as_str() == Some("IfNeeded") {
                invoke(w, a, object, services, warnings).await?;
            }
        }
    }
    Ok(())
}

/// Call one mutating webhook if it matches: `None` when it does not, else whether it changed
/// the object.
async fn invoke(
    w: &Webhook,
    a: &mut Attributes,
    object: &mut Value,
    services: &ServiceEndpoints,
    warnings: &mut Vec<String>,
) -> Result<Option<bool>, ApiError> {
    a.object = Some(object.clone());
    if !rules_match(&w.spec, a) || !selectors_match(&w.spec, a).map_err(ApiError::internal)? {
        return Ok(None);
    }
    match call(w, a, Some(object), services, warnings).await? {
        Outcome::Denied(e) => Err(e),
        Outcome::Allowed { patch: Some(p) } => {
            let before = object.clone();
            crate::patch::json(object, &p).map_err(|e| {
                ApiError::internal(format!(
                    "failed calling webhook {:?}: the server rejected the JSON patch: {e}",
                    w.spec["name"].as_str().unwrap_or_default()
                ))
            })?;
            Ok(Some(*object != before))
        }
        Outcome::Allowed { patch: None } => Ok(Some(false)),
    }
}

/// Run the matching validating webhooks; the first denial wins.
pub async fn validate(
    webhooks: &[Webhook],
    a: &Attributes,
    services: &ServiceEndpoints,
    warnings: &mut Vec<String>,
) -> Result<(), ApiError> {
    for w in webhooks.iter().filter(|w| !w.mutating) {
        if !rules_match(&w.spec, a) || !selectors_match(&w.spec, a).map_err(ApiError::internal)? {
            continue;
        }
        if let Outcome::Denied(e) = call(w, a, a.object.as_ref(), services, warnings).await? {
            return Err(e);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs() -> Attributes {
        Attributes {
            operation: "CREATE",
            group: "manager.kotaico.de".into(),
            version: "v1".into(),
            kind: "Booking".into(),
            resource: "bookings".into(),
            subresource: String::new(),
            namespaced: true,
            namespace: "ns".into(),
            name: "b".into(),
            namespace_labels: [("team".to_string(), "a".to_string())].into(),
            object: Some(json!({"metadata": {"labels": {"x": "y"}}})),
            old_object: None,
            dry_run: false,
            user: UserInfo {
                username: "u".into(),
                groups: vec![],
            },
            field_manager: None,
        }
    }

    #[test]
    fn rules_and_selectors() {
        let a = attrs();
        let w = json!({"rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": ["manager.kotaico.de"], "apiVersions": ["v1"], "resources": ["bookings"], "scope": "Namespaced"}]});
        assert!(rules_match(&w, &a));
        let status_only = json!({"rules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["bookings/status"]}]});
        assert!(!rules_match(&status_only, &a));
        let cluster = json!({"rules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "scope": "Cluster"}]});
        assert!(!rules_match(&cluster, &a));
        assert!(
            selectors_match(
                &json!({"namespaceSelector": {"matchLabels": {"team": "a"}}}),
                &a
            )
            .unwrap()
        );
        assert!(
            !selectors_match(&json!({"objectSelector": {"matchLabels": {"x": "z"}}}), &a).unwrap()
        );
    }

    #[test]
    fn reviews_deserialize_into_kube_admission_types() {
        use kube::core::DynamicObject;
        use kube::core::admission::{AdmissionRequest, AdmissionReview, Operation};
        let mut a = attrs();
        a.object = Some(
            json!({"apiVersion": "manager.kotaico.de/v1", "kind": "Booking", "metadata": {"name": "b", "namespace": "ns"}, "spec": {}}),
        );
        let parsed: AdmissionReview<DynamicObject> =
            serde_json::from_value(review(&a, "u-1", a.object.as_ref())).unwrap();
        let req: AdmissionRequest<DynamicObject> = parsed.try_into().unwrap();
        assert_eq!(req.uid, "u-1");
        assert_eq!(req.operation, Operation::Create);
        assert_eq!(req.user_info.username.as_deref(), Some("u"));
        assert_eq!(req.namespace.as_deref(), Some("ns"));
        assert!(req.object.is_some() && req.old_object.is_none());
        let mut del = attrs();
        del.operation = "DELETE";
        del.old_object = del.object.take();
        let parsed: AdmissionReview<DynamicObject> =
            serde_json::from_value(review(&del, "u-2", None)).unwrap();
        let req: AdmissionRequest<DynamicObject> = parsed.try_into().unwrap();
        assert_eq!(req.operation, Operation::Delete);
        assert!(req.object.is_none() && req.old_object.is_some());
    }

    #[test]
    fn service_references_use_configured_endpoints() {
        let services: ServiceEndpoints = [(
            "ops/booking-webhook".to_string(),
            "https://127.0.0.1:9443".to_string(),
        )]
        .into();
        let w = json!({"clientConfig": {"service": {"namespace": "ops", "name": "booking-webhook", "path": "/validate"}}});
        let t = webhook_target(&w, &services).unwrap();
        assert_eq!(t.url, "https://booking-webhook.ops.svc/validate");
        assert_eq!(t.display, "https://booking-webhook.ops.svc:443/validate");
        assert_eq!(t.resolve_to, Some(("127.0.0.1".to_string(), 9443)));
        let named: ServiceEndpoints = [(
            "ops/booking-webhook".to_string(),
            "https://localhost:9443".to_string(),
        )]
        .into();
        assert_eq!(
            webhook_target(&w, &named).unwrap().resolve_to,
            Some(("localhost".to_string(), 9443))
        );
        let bad: ServiceEndpoints =
            [("ops/booking-webhook".to_string(), "localhost".to_string())].into();
        assert!(webhook_target(&w, &bad).is_err());
        let unknown = json!({"clientConfig": {"service": {"namespace": "ops", "name": "other"}}});
        assert!(
            webhook_target(&unknown, &services)
                .unwrap_err()
                .contains("\"ops/other\" has no endpoint")
        );
        let url =
            webhook_target(&json!({"clientConfig": {"url": "https://x/y"}}), &services).unwrap();
        assert_eq!((url.url.as_str(), url.resolve_to), ("https://x/y", None));
    }

    #[test]
    fn denial_shape_matches_the_real_server() {
        let e = denial(
            "bookings.kotaico.de",
            &json!({"code": 403, "reason": "Forbidden", "message": "overlaps"}),
        );
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "admission webhook \"bookings.kotaico.de\" denied the request: overlaps"
        );
        let e = denial("w", &json!({}));
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "admission webhook \"w\" denied the request without explanation"
        );
    }
}
