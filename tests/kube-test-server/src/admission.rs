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

/// Where webhooks given as `clientConfig.service` are reached: `namespace/name` → base URL
/// (e.g. `https://127.0.0.1:8443`), since there is no cluster network.
pub type ServiceEndpoints = BTreeMap<String, String>;

fn webhook_url(webhook: &Value, services: &ServiceEndpoints) -> Result<String, String> {
    let cc = &webhook["clientConfig"];
    if let Some(url) = cc["url"].as_str() {
        return Ok(url.to_string());
    }
    if let Some(svc) = cc.get("service").filter(|s| s.is_object()) {
        let key = format!(
            "{}/{}",
            svc["namespace"].as_str().unwrap_or_default(),
            svc["name"].as_str().unwrap_or_default()
        );
        let base = services.get(&key).ok_or_else(|| {
            format!("service {key:?} has no endpoint (the test server reaches services only through configured service endpoints)")
        })?;
        let path = svc["path"].as_str().unwrap_or("/");
        return Ok(format!("{}{}", base.trim_end_matches('/'), path));
    }
    Err("clientConfig has neither url nor service".into())
}

async fn post(
    url: &str,
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
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .build();
    let client: hyper_util::client::legacy::Client<_, Full<Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(https);
    let authority = url
        .parse::<hyper::Uri>()
        .ok()
        .and_then(|u| u.authority().map(|a| a.to_string()))
        .unwrap_or_default();
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
    let url = match webhook_url(&w.spec, services) {
        Ok(u) => {
            let sep = if u.contains('?') { '&' } else { '?' };
            format!("{u}{sep}timeout={timeout}s")
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
    let result = post(
        &url,
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

/// Run the matching mutating webhooks in order, applying their JSON patches to `object`.
pub async fn mutate(
    webhooks: &[Webhook],
    a: &mut Attributes,
    object: &mut Value,
    services: &ServiceEndpoints,
    warnings: &mut Vec<String>,
) -> Result<(), ApiError> {
    for w in webhooks.iter().filter(|w| w.mutating) {
        a.object = Some(object.clone());
        if !rules_match(&w.spec, a) || !selectors_match(&w.spec, a).map_err(ApiError::internal)? {
            continue;
        }
        match call(w, a, Some(object), services, warnings).await? {
            Outcome::Denied(e) => return Err(e),
            Outcome::Allowed { patch: Some(p) } => {
                crate::patch::json(object, &p).map_err(|e| {
                    ApiError::internal(format!(
                        "failed calling webhook {:?}: the server rejected the JSON patch: {e}",
                        w.spec["name"].as_str().unwrap_or_default()
                    ))
                })?;
            }
            Outcome::Allowed { patch: None } => {}
        }
    }
    Ok(())
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
