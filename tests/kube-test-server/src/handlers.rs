//! Resource endpoints: get, list, watch, create, update, patch, delete, deletecollection, with the
//! object semantics of the API conventions and the admission chain
//! (mutating webhooks → schema validation → validating webhooks → persist).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use hyper::{Method, Response};
use serde_json::{Value, json};

use crate::admission::{self, Attributes, Webhook};
use crate::patch::{self, PatchKind, Scope};
use crate::registry::{ResourceType, Special, from_crd};
use crate::schema;
use crate::selector::{FieldSelector, LabelSelector, labels_of};
use crate::server::{Body, Req, Shared, error_response, json_response};
use crate::status::{ApiError, Cause};
use crate::store::{State, to_served, to_storage};
use crate::table::{self, IncludeObject};
use crate::watch::{self, Render, WatchRequest};

/// The current time as the API server writes timestamps (RFC 3339, seconds).
pub fn now() -> String {
    let ts = jiff::Timestamp::now();
    jiff::Timestamp::from_second(ts.as_second())
        .map(|t| t.to_string())
        .unwrap_or_else(|_| ts.to_string())
}

struct Ctx {
    shared: Arc<Shared>,
    t: Arc<ResourceType>,
    version: String,
    /// Namespace of the request (empty for cluster-scoped types or all namespaces).
    ns: String,
    name: String,
    sub: String,
    r: Req,
    warnings: Vec<String>,
}

impl Ctx {
    fn q(&self, k: &str) -> Option<&str> {
        self.r.query.get(k).map(String::as_str)
    }

    fn dry_run(&self) -> bool {
        self.q("dryRun") == Some("All")
    }

    fn group(&self) -> &str {
        &self.t.group
    }

    fn served(&self, storage: &Value) -> Value {
        to_served(&self.t, &self.version, storage)
    }

    fn key(&self, name: &str) -> crate::store::ObjectKey {
        State::key(&self.t, &self.ns, name)
    }

    fn field_manager(&self) -> String {
        self.q("fieldManager")
            .map(String::from)
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| {
                let ua = self.r.user_agent.split('/').next().unwrap_or_default();
                if ua.is_empty() {
                    "unknown".into()
                } else {
                    ua.into()
                }
            })
    }

    fn not_found(&self, name: &str) -> ApiError {
        ApiError::not_found(self.group(), &self.t.plural, name)
    }

    fn scope(&self) -> Scope {
        if self.sub == "status" {
            Scope::Status
        } else if self.t.has_status(&self.version) {
            Scope::Main
        } else {
            Scope::All
        }
    }

    fn respond(&self, code: u16, obj: &Value) -> Response<Body> {
        let rendered = if table::wants_table(&self.r.accept) {
            let rv = obj["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            table::render(
                &self.t,
                &self.version,
                std::slice::from_ref(obj),
                &rv,
                IncludeObject::parse(self.q("includeObject")),
            )
        } else if table::wants_metadata(&self.r.accept) {
            table::partial_metadata(obj)
        } else {
            obj.clone()
        };
        json_response(code, &rendered, &self.warnings)
    }
}

/// Serve `/api/v1/...` or `/apis/{group}/{version}/...` below the group-version.
pub async fn resource(
    shared: Arc<Shared>,
    r: Req,
    group: &str,
    version: &str,
    rest: &[&str],
) -> Response<Body> {
    let (watch_prefix, rest) = match rest.split_first() {
        Some((&"watch", tail)) => (true, tail),
        _ => (false, rest),
    };
    let (ns, rest): (Option<&str>, &[&str]) = match rest {
        ["namespaces", ns, tail @ ..]
            if !tail.is_empty() && !matches!(tail, ["status"] | ["finalize"]) =>
        {
            (Some(ns), tail)
        }
        _ => (None, rest),
    };
    let (plural, name, sub) = match rest {
        [p] => (*p, "", ""),
        [p, n] => (*p, *n, ""),
        [p, n, s] => (*p, *n, *s),
        _ => return error_response(&ApiError::path_not_found(), &[]),
    };
    let Some(t) = shared.lock().registry.lookup(group, version, plural) else {
        return error_response(&ApiError::path_not_found(), &[]);
    };
    if (!t.namespaced && ns.is_some())
        || (t.namespaced && ns.is_none() && !(name.is_empty() && r.method == Method::GET))
    {
        return error_response(&ApiError::path_not_found(), &[]);
    }
    let sub = match sub {
        "" => "",
        "status" if t.has_status(version) => "status",
        "finalize" if t.special == Special::Namespace => "",
        _ => return error_response(&ApiError::path_not_found(), &[]),
    };
    let mut ctx = Ctx {
        shared,
        t,
        version: version.to_string(),
        ns: ns.unwrap_or_default().to_string(),
        name: name.to_string(),
        sub: sub.to_string(),
        r,
        warnings: Vec::new(),
    };
    let is_watch = watch_prefix || matches!(ctx.q("watch"), Some("true") | Some("1"));
    let result = match (ctx.r.method.clone(), ctx.name.is_empty()) {
        (Method::GET, true) if is_watch => return start_watch(&ctx),
        (Method::GET, true) => list(&ctx),
        (Method::GET, false) if is_watch => {
            // Watch of one object by name.
            ctx.r.query.insert(
                "fieldSelector".into(),
                format!("metadata.name={}", ctx.name),
            );
            return start_watch(&ctx);
        }
        (Method::GET, false) => get(&ctx),
        (Method::POST, true) => create(&mut ctx).await,
        (Method::PUT, false) => update(&mut ctx).await,
        (Method::PATCH, false) => patch_object(&mut ctx).await,
        (Method::DELETE, false) => delete(&mut ctx).await,
        (Method::DELETE, true) => delete_collection(&mut ctx),
        _ => Err(ApiError::method_not_allowed()),
    };
    match result {
        Ok(resp) => resp,
        Err(e) => error_response(&e, &ctx.warnings),
    }
}

fn selectors(ctx: &Ctx) -> Result<(LabelSelector, FieldSelector), ApiError> {
    Ok((
        LabelSelector::parse(ctx.q("labelSelector").unwrap_or_default())?,
        FieldSelector::parse(ctx.q("fieldSelector").unwrap_or_default())?,
    ))
}

fn start_watch(ctx: &Ctx) -> Response<Body> {
    let (labels, fields) = match selectors(ctx) {
        Ok(s) => s,
        Err(e) => return error_response(&e, &[]),
    };
    let render = if table::wants_table(&ctx.r.accept) {
        Render::Table(IncludeObject::parse(ctx.q("includeObject")))
    } else if table::wants_metadata(&ctx.r.accept) {
        Render::Metadata
    } else {
        Render::Object
    };
    watch::start(
        ctx.shared.clone(),
        WatchRequest {
            t: ctx.t.clone(),
            version: ctx.version.clone(),
            namespace: (!ctx.ns.is_empty()).then(|| ctx.ns.clone()),
            labels,
            fields,
            resource_version: ctx.q("resourceVersion").unwrap_or_default().to_string(),
            bookmarks: ctx.q("allowWatchBookmarks") == Some("true"),
            timeout: ctx
                .q("timeoutSeconds")
                .and_then(|s| s.parse().ok())
                .map(Duration::from_secs),
            send_initial: ctx.q("sendInitialEvents") == Some("true"),
            render,
        },
    )
}

fn get(ctx: &Ctx) -> Result<Response<Body>, ApiError> {
    let st = ctx.shared.lock();
    let obj = st
        .get(&ctx.key(&ctx.name))
        .ok_or_else(|| ctx.not_found(&ctx.name))?;
    let served = ctx.served(obj);
    drop(st);
    Ok(ctx.respond(200, &served))
}

fn list(ctx: &Ctx) -> Result<Response<Body>, ApiError> {
    let (labels, fields) = selectors(ctx)?;
    let (items, rv) = {
        let st = ctx.shared.lock();
        let ns = (!ctx.ns.is_empty()).then_some(ctx.ns.as_str());
        let items: Vec<Value> = st
            .list(&ctx.t.storage, ns)
            .iter()
            .map(|o| ctx.served(o))
            .filter(|o| labels.matches_object(o) && fields.matches(o))
            .collect();
        (items, st.rv.to_string())
    };
    let start: usize = match ctx.q("continue").filter(|c| !c.is_empty()) {
        Some(token) => base64::engine::general_purpose::STANDARD
            .decode(token)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| {
                ApiError::bad_request("continue key is not valid: illegal base64 data")
            })?,
        None => 0,
    };
    let limit: usize = ctx
        .q("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let total = items.len();
    let page: Vec<Value> = items.into_iter().skip(start).take(limit).collect();
    let end = start.saturating_add(page.len());
    let mut meta = json!({"resourceVersion": rv});
    if end < total {
        meta["continue"] = json!(base64::engine::general_purpose::STANDARD.encode(end.to_string()));
        meta["remainingItemCount"] = json!(total - end);
    }
    let body = if table::wants_table(&ctx.r.accept) {
        let mut t = table::render(
            &ctx.t,
            &ctx.version,
            &page,
            &rv,
            IncludeObject::parse(ctx.q("includeObject")),
        );
        t["metadata"] = meta;
        t
    } else if table::wants_metadata(&ctx.r.accept) {
        json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
            "items": page.iter().map(table::partial_metadata).collect::<Vec<_>>()})
    } else {
        json!({"kind": format!("{}List", ctx.t.kind), "apiVersion": ctx.t.api_version(&ctx.version), "metadata": meta, "items": page})
    };
    Ok(json_response(200, &body, &ctx.warnings))
}

fn decode(ctx: &Ctx) -> Result<Value, ApiError> {
    let v: Value = if ctx
        .r
        .content_type
        .starts_with("application/vnd.kubernetes.protobuf")
    {
        if !crate::protobuf::supported(&ctx.t.kind) {
            return Err(ApiError::unsupported_media_type(&[
                "application/json",
                "application/yaml",
            ]));
        }
        crate::protobuf::decode(&ctx.r.body, &ctx.t.api_version(&ctx.version), &ctx.t.kind)
            .map_err(|e| ApiError::bad_request(format!("error decoding protobuf body: {e}")))?
    } else if ctx.r.content_type.contains("yaml") {
        serde_yaml::from_slice(&ctx.r.body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?
    } else {
        serde_json::from_slice(&ctx.r.body).or_else(|e| {
            serde_yaml::from_slice(&ctx.r.body).map_err(|_| {
                ApiError::bad_request(format!(
                    "the object provided is unrecognized (must be of type {}): {e}",
                    ctx.t.kind
                ))
            })
        })?
    };
    if !v.is_object() {
        return Err(ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {})",
            ctx.t.kind
        )));
    }
    Ok(v)
}

fn check_type(ctx: &Ctx, obj: &Value) -> Result<(), ApiError> {
    let want_av = ctx.t.api_version(&ctx.version);
    let kind = obj["kind"].as_str().unwrap_or_default();
    let av = obj["apiVersion"].as_str().unwrap_or_default();
    if (!kind.is_empty() && kind != ctx.t.kind) || (!av.is_empty() && av != want_av) {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({want_av})"
        ))
        .tap_kind(kind, &ctx.t.kind));
    }
    Ok(())
}

trait TapKind {
    fn tap_kind(self, got: &str, want: &str) -> Self;
}

impl TapKind for ApiError {
    fn tap_kind(mut self, got: &str, want: &str) -> Self {
        if !got.is_empty() && got != want {
            self.message =
                format!("the kind in the data ({got}) does not match the expected kind ({want})");
        }
        self
    }
}

/// Unknown fields of a candidate object, as dotted paths.
fn unknown_fields(ctx: &Ctx, obj: &Value) -> Vec<String> {
    let mut out = schema::unknown_metadata_fields(obj);
    if let Some(info) = ctx.t.version_info(&ctx.version) {
        if let Some(s) = &info.schema {
            let mut probe = obj.clone();
            if let Some(m) = probe.get_mut("metadata").and_then(Value::as_object_mut) {
                m.retain(|k, _| schema::OBJECT_META_FIELDS.contains(&k.as_str()));
            }
            out.extend(schema::prune_root(s, &mut probe));
        }
    } else if let (Some(known), Some(m)) = (&ctx.t.known_fields, obj.as_object()) {
        out.extend(m.keys().filter(|k| !known.contains(&k.as_str())).cloned());
    }
    out
}

/// Enforce `fieldValidation` (Strict → error, Warn (default) → warnings, Ignore).
fn field_validation(ctx: &mut Ctx, obj: &Value, apply: bool) -> Result<(), ApiError> {
    let mode = ctx.q("fieldValidation").unwrap_or("Warn").to_string();
    if mode == "Ignore" {
        return Ok(());
    }
    let unknown = unknown_fields(ctx, obj);
    if unknown.is_empty() {
        return Ok(());
    }
    if mode == "Strict" {
        if apply {
            return Err(ApiError::bad_request(format!(
                "failed to create typed patch object ({}/{}; {}, Kind={}): {}",
                ctx.ns,
                obj["metadata"]["name"].as_str().unwrap_or(&ctx.name),
                ctx.t.api_version(&ctx.version),
                ctx.t.kind,
                unknown
                    .iter()
                    .map(|u| format!(".{u}: field not declared in schema"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        return Err(ApiError::bad_request(format!(
            "{kind} in version \"{v}\" cannot be handled as a {kind}: strict decoding error: {}",
            unknown
                .iter()
                .map(|u| format!("unknown field \"{u}\""))
                .collect::<Vec<_>>()
                .join(", "),
            kind = ctx.t.kind,
            v = ctx.version,
        )));
    }
    ctx.warnings
        .extend(unknown.iter().map(|u| format!("unknown field \"{u}\"")));
    Ok(())
}

/// Pruning and defaulting of custom objects, and the built-ins' own normalisation.
fn normalise(ctx: &Ctx, obj: &mut Value) -> Result<(), ApiError> {
    if let Some(s) = ctx
        .t
        .version_info(&ctx.version)
        .and_then(|i| i.schema.clone())
    {
        schema::prune_root(&s, obj);
        *obj = schema::apply_defaults(&s, obj);
    } else if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.retain(|k, _| schema::OBJECT_META_FIELDS.contains(&k.as_str()));
    }
    match ctx.t.special {
        Special::Secret => {
            if let Some(sd) = obj.as_object_mut().and_then(|m| m.remove("stringData"))
                && let Some(sd) = sd.as_object()
            {
                for (k, v) in sd {
                    let enc = base64::engine::general_purpose::STANDARD
                        .encode(v.as_str().unwrap_or_default());
                    if !obj["data"].is_object() {
                        obj["data"] = json!({});
                    }
                    obj["data"][k] = json!(enc);
                }
            }
            if obj["type"].as_str().is_none_or(str::is_empty) {
                obj["type"] = json!("Opaque");
            }
        }
        Special::Namespace => {
            let name = obj["metadata"]["name"].clone();
            if !obj["metadata"]["labels"].is_object() {
                obj["metadata"]["labels"] = json!({});
            }
            obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = name;
            if obj["metadata"]["deletionTimestamp"].is_null() {
                obj["status"] = json!({"phase": "Active"});
            }
            if obj["spec"]["finalizers"].is_null() {
                obj["spec"] = json!({"finalizers": ["kubernetes"]});
            }
        }
        _ => {}
    }
    Ok(())
}

/// Schema, CEL and per-kind validation of the final object.
fn validate(ctx: &Ctx, obj: &Value, old: Option<&Value>) -> Result<(), ApiError> {
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut causes: Vec<Cause> = Vec::new();
    if let Some(c) = schema::name_cause(&name, ctx.t.special == Special::Namespace) {
        causes.push(c);
    }
    causes.extend(schema::label_causes(obj));
    if let Some(info) = ctx.t.version_info(&ctx.version) {
        if let Some(s) = &info.schema {
            let mut scoped = obj.clone();
            if ctx.sub != "status" && ctx.t.has_status(&ctx.version) {
                // Status is validated by /status writes only.
                if let Some(m) = scoped.as_object_mut() {
                    m.remove("status");
                }
            }
            causes.extend(schema::validate_root(s, &scoped));
        }
        if causes.is_empty()
            && let Some(c) = &info.compiled
        {
            causes.extend(schema::validate_cel(c, obj, old));
        }
    }
    if ctx.t.special == Special::Crd {
        match from_crd(obj) {
            Ok(t) => {
                let want = format!("{}.{}", t.plural, t.group);
                if name != want {
                    causes.push(Cause::new(
                        "FieldValueInvalid",
                        "metadata.name",
                        format!(
                            "Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group"
                        ),
                    ));
                }
            }
            Err(e) => {
                let (field, msg) = e.split_once(": ").unwrap_or(("spec", e.as_str()));
                causes.push(Cause::new("FieldValueRequired", field, msg));
            }
        }
    }
    if let Some(old) = old
        && !old["metadata"]["deletionTimestamp"].is_null()
    {
        let before: Vec<&Value> = old["metadata"]["finalizers"]
            .as_array()
            .map(|a| a.iter().collect())
            .unwrap_or_default();
        let added: Vec<String> = obj["metadata"]["finalizers"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|f| !before.contains(f))
                    .map(|f| f.as_str().unwrap_or_default().to_string())
                    .collect()
            })
            .unwrap_or_default();
        if !added.is_empty() {
            causes.push(Cause::new(
                "FieldValueForbidden",
                "metadata.finalizers",
                format!("Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}", added.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>().join(", ")),
            ));
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(ctx.group(), &ctx.t.kind, &name, causes))
    }
}

fn webhooks(ctx: &Ctx) -> Vec<Webhook> {
    if ctx.t.special == Special::WebhookConfiguration {
        return Vec::new();
    }
    let st = ctx.shared.lock();
    let mut out = Vec::new();
    for (plural, mutating) in [
        ("mutatingwebhookconfigurations", true),
        ("validatingwebhookconfigurations", false),
    ] {
        for cfg in st.list(
            &("admissionregistration.k8s.io".into(), plural.into()),
            None,
        ) {
            for w in cfg["webhooks"].as_array().into_iter().flatten() {
                out.push(Webhook {
                    spec: w.clone(),
                    mutating,
                });
            }
        }
    }
    out
}

fn attributes(
    ctx: &Ctx,
    operation: &'static str,
    name: &str,
    object: Option<Value>,
    old: Option<Value>,
) -> Attributes {
    let namespace_labels = if ctx.t.namespaced {
        let st = ctx.shared.lock();
        st.get(&(
            String::new(),
            "namespaces".into(),
            String::new(),
            ctx.ns.clone(),
        ))
        .map(labels_of)
        .unwrap_or_default()
    } else {
        BTreeMap::new()
    };
    Attributes {
        operation,
        group: ctx.t.group.clone(),
        version: ctx.version.clone(),
        kind: ctx.t.kind.clone(),
        resource: ctx.t.plural.clone(),
        subresource: ctx.sub.clone(),
        namespaced: ctx.t.namespaced,
        namespace: ctx.ns.clone(),
        name: name.to_string(),
        namespace_labels,
        object,
        old_object: old,
        dry_run: ctx.dry_run(),
        user: ctx.r.user.clone(),
        field_manager: ctx.q("fieldManager").map(String::from),
    }
}

fn check_namespace(st: &State, t: &ResourceType, ns: &str, name: &str) -> Result<(), ApiError> {
    if !t.namespaced {
        return Ok(());
    }
    match st.get(&(
        String::new(),
        "namespaces".into(),
        String::new(),
        ns.to_string(),
    )) {
        None => Err(ApiError::not_found("", "namespaces", ns)),
        Some(n) if !n["metadata"]["deletionTimestamp"].is_null() => {
            Err(ApiError::forbidden(format!(
                "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                crate::status::qualified(&t.group, &t.plural),
                name,
            )))
        }
        Some(_) => Ok(()),
    }
}

enum WriteError {
    Api(ApiError),
    Stale,
}

impl From<ApiError> for WriteError {
    fn from(e: ApiError) -> Self {
        WriteError::Api(e)
    }
}

/// Admission and persistence of a create (`old` = None) or update.
async fn admit_and_persist(
    ctx: &mut Ctx,
    mut obj: Value,
    old: Option<Value>,
) -> Result<(u16, Value), WriteError> {
    let operation = if old.is_some() { "UPDATE" } else { "CREATE" };
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    normalise(ctx, &mut obj)?;
    let hooks = webhooks(ctx);
    if !hooks.is_empty() {
        let mut attrs = attributes(ctx, operation, &name, Some(obj.clone()), old.clone());
        let services = ctx.shared.services.clone();
        let mut warnings = Vec::new();
        let r = admission::mutate(&hooks, &mut attrs, &mut obj, &services, &mut warnings).await;
        ctx.warnings.extend(warnings);
        r?;
        normalise(ctx, &mut obj)?;
        validate(ctx, &obj, old.as_ref())?;
        attrs.object = Some(obj.clone());
        let mut warnings = Vec::new();
        let r = admission::validate(&hooks, &attrs, &services, &mut warnings).await;
        ctx.warnings.extend(warnings);
        r?;
    } else {
        validate(ctx, &obj, old.as_ref())?;
    }
    let dry_run = ctx.dry_run();
    let mut st = ctx.shared.lock();
    let key = ctx.key(&name);
    let mut storage = to_storage(&ctx.t, &obj);
    match &old {
        None => {
            check_namespace(&st, &ctx.t, &ctx.ns, &name)?;
            if st.get(&key).is_some() {
                return Err(ApiError::already_exists(ctx.group(), &ctx.t.plural, &name).into());
            }
            if ctx.t.special == Special::Crd {
                crd_status(&mut storage);
            }
            if dry_run {
                return Ok((201, ctx.served(&storage)));
            }
            if ctx.t.special == Special::Crd
                && let Ok(t) = from_crd(&storage)
            {
                st.registry.upsert_custom(t);
            }
            let stored = st.put(key, storage, true);
            Ok((201, ctx.served(&stored)))
        }
        Some(old) => {
            let current = st.get(&key).cloned().ok_or_else(|| ctx.not_found(&name))?;
            if current["metadata"]["resourceVersion"] != old["metadata"]["resourceVersion"] {
                return Err(WriteError::Stale);
            }
            if ctx.t.generation && ctx.sub != "status" && spec_of(&current) != spec_of(&storage) {
                let g = current["metadata"]["generation"].as_i64().unwrap_or(1);
                storage["metadata"]["generation"] = json!(g + 1);
            }
            if ctx.t.special == Special::Crd {
                crd_status(&mut storage);
            }
            if without_volatile(&current) == without_volatile(&storage) {
                return Ok((200, ctx.served(&current)));
            }
            if dry_run {
                return Ok((200, ctx.served(&storage)));
            }
            let finished = !storage["metadata"]["deletionTimestamp"].is_null()
                && storage["metadata"]["finalizers"]
                    .as_array()
                    .is_none_or(|f| f.is_empty());
            if finished {
                st.put(key.clone(), storage, false);
                let removed = remove_object(&mut st, &ctx.t, &key, true).unwrap_or_default();
                return Ok((200, ctx.served(&removed)));
            }
            if ctx.t.special == Special::Crd
                && let Ok(t) = from_crd(&storage)
            {
                st.registry.upsert_custom(t);
            }
            let stored = st.put(key, storage, false);
            Ok((200, ctx.served(&stored)))
        }
    }
}

fn spec_of(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
    }
    v
}

fn without_volatile(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v["metadata"].as_object_mut() {
        m.remove("resourceVersion");
        if let Some(Value::Array(entries)) = m.get_mut("managedFields") {
            for e in entries {
                if let Some(e) = e.as_object_mut() {
                    e.remove("time");
                }
            }
        }
    }
    v
}

fn crd_status(crd: &mut Value) {
    let t = now();
    let storage = crd["spec"]["versions"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["storage"].as_bool() == Some(true)))
        .and_then(|v| v["name"].as_str())
        .unwrap_or_default()
        .to_string();
    crd["status"] = json!({
        "acceptedNames": crd["spec"]["names"],
        "storedVersions": [storage],
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": t},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": t},
        ],
    });
}

/// Remove an object for good, with the side effects of its kind; returns it.
fn remove_object(
    st: &mut State,
    t: &ResourceType,
    key: &crate::store::ObjectKey,
    cascade: bool,
) -> Option<Value> {
    let removed = st.remove(key)?;
    if cascade && let Some(uid) = removed["metadata"]["uid"].as_str() {
        collect_garbage(st, uid);
    }
    if t.special == Special::Crd
        && let Ok(ct) = from_crd(&removed)
    {
        st.registry.remove_custom(&ct.group, &ct.plural);
        let keys: Vec<_> = st
            .objects
            .keys()
            .filter(|(g, p, _, _)| *g == ct.group && *p == ct.plural)
            .cloned()
            .collect();
        for k in keys {
            st.remove(&k);
        }
    }
    if !key.2.is_empty() {
        finish_namespace(st, &key.2.clone());
    }
    Some(removed)
}

/// Background garbage collection: delete the dependents of a removed owner (objects whose
/// `ownerReferences` name its uid) that have no other owner left.
fn collect_garbage(st: &mut State, owner_uid: &str) {
    let owned_by = |v: &Value, uid: &str| {
        v["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid))
    };
    let dependents: Vec<crate::store::ObjectKey> = st
        .objects
        .iter()
        .filter(|(_, v)| owned_by(v, owner_uid))
        .map(|(k, _)| k.clone())
        .collect();
    for k in dependents {
        let Some(obj) = st.get(&k) else { continue };
        let other_owners: Vec<String> = obj["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["uid"].as_str())
            .filter(|u| *u != owner_uid)
            .map(String::from)
            .collect();
        let alive = other_owners.iter().any(|u| {
            st.objects
                .values()
                .any(|o| o["metadata"]["uid"].as_str() == Some(u.as_str()))
        });
        if alive {
            continue;
        }
        let t = st
            .registry
            .all()
            .iter()
            .find(|t| t.storage.0 == k.0 && t.storage.1 == k.1)
            .cloned();
        if let Some(t) = t {
            delete_locked(st, &t, &k, true);
        }
    }
}

/// Remove a terminating namespace once it is empty.
fn finish_namespace(st: &mut State, ns: &str) {
    let nkey = (
        String::new(),
        "namespaces".to_string(),
        String::new(),
        ns.to_string(),
    );
    let terminating = st
        .get(&nkey)
        .is_some_and(|n| !n["metadata"]["deletionTimestamp"].is_null());
    if terminating && !st.objects.keys().any(|(_, _, n, _)| n == ns) {
        st.remove(&nkey);
    }
}

/// Delete with finalizer semantics: mark (deletionTimestamp) or remove. Returns the object.
fn delete_locked(
    st: &mut State,
    t: &ResourceType,
    key: &crate::store::ObjectKey,
    cascade: bool,
) -> Option<Value> {
    let mut obj = st.get(key)?.clone();
    let has_finalizers = obj["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty())
        || t.special == Special::Namespace;
    if has_finalizers {
        if obj["metadata"]["deletionTimestamp"].is_null() {
            obj["metadata"]["deletionTimestamp"] = json!(now());
            obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            if t.special == Special::Namespace {
                obj["status"] = json!({"phase": "Terminating"});
            }
            obj = st.put(key.clone(), obj, false);
        }
        if t.special == Special::Namespace {
            let ns = key.3.clone();
            let contents: Vec<_> = st.objects.keys().filter(|k| k.2 == ns).cloned().collect();
            for k in contents {
                let Some(o) = st.get(&k).cloned() else {
                    continue;
                };
                if o["metadata"]["finalizers"]
                    .as_array()
                    .is_some_and(|f| !f.is_empty())
                {
                    if o["metadata"]["deletionTimestamp"].is_null() {
                        let mut o = o;
                        o["metadata"]["deletionTimestamp"] = json!(now());
                        o["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                        st.put(k, o, false);
                    }
                } else {
                    st.remove(&k);
                }
            }
            finish_namespace(st, &ns);
        }
        return Some(obj);
    }
    remove_object(st, t, key, cascade)
}

fn generate_name(prefix: &str) -> String {
    const CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let id = uuid::Uuid::new_v4();
    let suffix: String = id
        .as_bytes()
        .iter()
        .take(5)
        .map(|b| CHARS[*b as usize % CHARS.len()] as char)
        .collect();
    format!("{prefix}{suffix}")
}

async fn create(ctx: &mut Ctx) -> Result<Response<Body>, ApiError> {
    if !ctx.sub.is_empty() {
        return Err(ApiError::method_not_allowed());
    }
    let mut obj = decode(ctx)?;
    check_type(ctx, &obj)?;
    let (code, stored) = create_object(ctx, &mut obj, None).await?;
    Ok(ctx.respond(code, &stored))
}

async fn create_object(
    ctx: &mut Ctx,
    obj: &mut Value,
    apply_manager: Option<&str>,
) -> Result<(u16, Value), ApiError> {
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    if ctx.t.namespaced {
        let body_ns = obj["metadata"]["namespace"].as_str().unwrap_or_default();
        if !body_ns.is_empty() && body_ns != ctx.ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        obj["metadata"]["namespace"] = json!(ctx.ns);
    } else if let Some(m) = obj["metadata"].as_object_mut() {
        m.remove("namespace");
    }
    if obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .is_empty()
    {
        match obj["metadata"]["generateName"]
            .as_str()
            .filter(|g| !g.is_empty())
        {
            Some(prefix) => obj["metadata"]["name"] = json!(generate_name(prefix)),
            None => {
                return Err(ApiError::invalid(
                    ctx.group(),
                    &ctx.t.kind,
                    "",
                    vec![Cause::new(
                        "FieldValueRequired",
                        "metadata.name",
                        "Required value: name or generateName is required",
                    )],
                ));
            }
        }
    }
    if obj["metadata"]["resourceVersion"]
        .as_str()
        .is_some_and(|s| !s.is_empty())
    {
        return Err(ApiError::internal(
            "resourceVersion should not be set on objects to be created",
        ));
    }
    field_validation(ctx, obj, apply_manager.is_some())?;
    {
        let st = ctx.shared.lock();
        check_namespace(
            &st,
            &ctx.t,
            &ctx.ns,
            obj["metadata"]["name"].as_str().unwrap_or_default(),
        )?;
    }
    obj["apiVersion"] = json!(ctx.t.api_version(&ctx.version));
    obj["kind"] = json!(ctx.t.kind);
    if ctx.t.has_status(&ctx.version)
        && ctx.t.is_custom()
        && let Some(m) = obj.as_object_mut()
    {
        m.remove("status");
    }
    let meta = obj["metadata"]
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("metadata must be an object"))?;
    meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    meta.insert("creationTimestamp".into(), json!(now()));
    meta.remove("deletionTimestamp");
    meta.remove("deletionGracePeriodSeconds");
    if ctx.t.generation {
        meta.insert("generation".into(), json!(1));
    } else {
        meta.remove("generation");
    }
    let av = ctx.t.api_version(&ctx.version);
    if apply_manager.is_none() {
        let manager = ctx.field_manager();
        patch::record_update(None, obj, &manager, &av, "", &now());
    }
    match admit_and_persist(ctx, obj.clone(), None).await {
        Ok(r) => Ok(r),
        Err(WriteError::Api(e)) => Err(e),
        Err(WriteError::Stale) => Err(ApiError::already_exists(
            ctx.group(),
            &ctx.t.plural,
            obj["metadata"]["name"].as_str().unwrap_or_default(),
        )),
    }
}

/// Merge a client's new version of an object with the current one per endpoint rules.
fn prepare_update(ctx: &Ctx, current: &Value, mut new: Value) -> Result<Value, ApiError> {
    if !new.is_object() {
        return Err(ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {})",
            ctx.t.kind
        )));
    }
    let name = new["metadata"]["name"].as_str().unwrap_or_default();
    if !name.is_empty() && name != ctx.name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({name}) does not match the name on the URL ({})",
            ctx.name
        )));
    }
    if !new["metadata"].is_object() {
        new["metadata"] = json!({});
    }
    let mut out = match ctx.scope() {
        Scope::Status => {
            let mut o = current.clone();
            o["status"] = new.get("status").cloned().unwrap_or(Value::Null);
            if o["status"].is_null()
                && let Some(m) = o.as_object_mut()
            {
                m.remove("status");
            }
            o
        }
        Scope::Main => {
            let mut o = new;
            match current.get("status") {
                Some(s) => o["status"] = s.clone(),
                None => {
                    if let Some(m) = o.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
            o
        }
        Scope::All => new,
    };
    out["apiVersion"] = json!(ctx.t.api_version(&ctx.version));
    out["kind"] = json!(ctx.t.kind);
    let cm = &current["metadata"];
    let meta = out["metadata"]
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("metadata must be an object"))?;
    meta.insert("name".into(), json!(ctx.name));
    if ctx.t.namespaced {
        meta.insert("namespace".into(), json!(ctx.ns));
    }
    for k in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "resourceVersion",
    ] {
        match cm.get(k) {
            Some(v) => meta.insert(k.into(), v.clone()),
            None => meta.remove(k),
        };
    }
    if !meta.contains_key("managedFields")
        && let Some(mf) = cm.get("managedFields")
    {
        meta.insert("managedFields".into(), mf.clone());
    }
    Ok(out)
}

async fn update(ctx: &mut Ctx) -> Result<Response<Body>, ApiError> {
    let body = decode(ctx)?;
    check_type(ctx, &body)?;
    let explicit_rv = body["metadata"]["resourceVersion"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(String::from);
    field_validation(ctx, &body, false)?;
    for _ in 0..8 {
        let current = {
            let st = ctx.shared.lock();
            st.get(&ctx.key(&ctx.name)).map(|o| ctx.served(o))
        }
        .ok_or_else(|| ctx.not_found(&ctx.name))?;
        if let Some(rv) = &explicit_rv
            && current["metadata"]["resourceVersion"].as_str() != Some(rv)
        {
            return Err(ApiError::stale(ctx.group(), &ctx.t.plural, &ctx.name));
        }
        let mut new = prepare_update(ctx, &current, body.clone())?;
        let av = ctx.t.api_version(&ctx.version);
        let manager = ctx.field_manager();
        patch::record_update(
            Some(&current),
            &mut new,
            &manager,
            &av,
            &ctx.sub.clone(),
            &now(),
        );
        match admit_and_persist(ctx, new, Some(current)).await {
            Ok((code, obj)) => return Ok(ctx.respond(code, &obj)),
            Err(WriteError::Api(e)) => return Err(e),
            Err(WriteError::Stale) if explicit_rv.is_some() => {
                return Err(ApiError::stale(ctx.group(), &ctx.t.plural, &ctx.name));
            }
            Err(WriteError::Stale) => continue,
        }
    }
    Err(ApiError::stale(ctx.group(), &ctx.t.plural, &ctx.name))
}

fn parse_patch_body(ctx: &Ctx, kind: PatchKind) -> Result<Value, ApiError> {
    let parsed: Result<Value, String> = match kind {
        PatchKind::Apply => serde_json::from_slice(&ctx.r.body)
            .or_else(|_| serde_yaml::from_slice(&ctx.r.body))
            .map_err(|e| e.to_string()),
        _ => serde_json::from_slice(&ctx.r.body).map_err(|e| e.to_string()),
    };
    parsed.map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))
}

async fn patch_object(ctx: &mut Ctx) -> Result<Response<Body>, ApiError> {
    let kind = PatchKind::from_content_type(&ctx.r.content_type)
        .ok_or_else(|| ApiError::unsupported_media_type(&patch_types(&ctx.t)))?;
    if kind == PatchKind::Strategic && ctx.t.is_custom() {
        return Err(ApiError::unsupported_media_type(&patch_types(&ctx.t)));
    }
    let body = parse_patch_body(ctx, kind)?;
    let force = ctx.q("force") == Some("true");
    if kind == PatchKind::Apply {
        if ctx.q("fieldManager").is_none_or(str::is_empty) {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "PatchOptions",
                "",
                vec![Cause::new(
                    "FieldValueRequired",
                    "fieldManager",
                    "Required value: is required for apply patch",
                )],
            ));
        }
        check_type(ctx, &body)?;
        if body["apiVersion"].is_null() || body["kind"].is_null() {
            return Err(ApiError::bad_request("invalid object type: /, Kind="));
        }
    } else if force {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "PatchOptions",
            "",
            vec![Cause::new(
                "FieldValueForbidden",
                "force",
                "Forbidden: may not be specified for non-apply patch",
            )],
        ));
    }
    for _ in 0..8 {
        let current = {
            let st = ctx.shared.lock();
            st.get(&ctx.key(&ctx.name)).map(|o| ctx.served(o))
        };
        let Some(current) = current else {
            if kind == PatchKind::Apply && ctx.sub.is_empty() {
                let mut obj = body.clone();
                if !obj["metadata"].is_object() {
                    obj["metadata"] = json!({});
                }
                let body_name = obj["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                if !body_name.is_empty() && body_name != ctx.name {
                    return Err(ApiError::bad_request(format!(
                        "the name of the object ({body_name}) does not match the name on the URL ({})",
                        ctx.name
                    )));
                }
                obj["metadata"]["name"] = json!(ctx.name);
                let av = ctx.t.api_version(&ctx.version);
                let manager = ctx.field_manager();
                let base = json!({"metadata": {}});
                let scope = if ctx.t.has_status(&ctx.version) {
                    Scope::Main
                } else {
                    Scope::All
                };
                let applied = patch::apply(&base, &obj, &manager, &av, scope, force, &now())
                    .map_err(|c| conflict_error(ctx, &c))?;
                let mut merged = obj.clone();
                merged["metadata"]["managedFields"] = applied["metadata"]["managedFields"].clone();
                let (code, stored) = create_object(ctx, &mut merged, Some(&manager)).await?;
                return Ok(ctx.respond(code, &stored));
            }
            return Err(ctx.not_found(&ctx.name));
        };
        let mut patched = current.clone();
        match kind {
            PatchKind::Merge => patch::merge(&mut patched, &body),
            PatchKind::Json => patch::json(&mut patched, &body).map_err(|e| {
                ApiError::new(
                    422,
                    "Invalid",
                    format!("the server rejected our request due to an error in our request: {e}"),
                )
            })?,
            PatchKind::Strategic => patch::strategic(&mut patched, &body),
            PatchKind::Apply => {
                let av = ctx.t.api_version(&ctx.version);
                let manager = ctx.field_manager();
                patched = patch::apply(&current, &body, &manager, &av, ctx.scope(), force, &now())
                    .map_err(|c| conflict_error(ctx, &c))?;
            }
        }
        if let Some(rv) = patched["metadata"]["resourceVersion"].as_str()
            && current["metadata"]["resourceVersion"].as_str() != Some(rv)
        {
            return Err(ApiError::stale(ctx.group(), &ctx.t.plural, &ctx.name));
        }
        let unknown_source = if kind == PatchKind::Apply {
            body.clone()
        } else {
            patched.clone()
        };
        field_validation(ctx, &unknown_source, kind == PatchKind::Apply)?;
        let mut new = prepare_update(ctx, &current, patched)?;
        if kind != PatchKind::Apply {
            let av = ctx.t.api_version(&ctx.version);
            let manager = ctx.field_manager();
            patch::record_update(
                Some(&current),
                &mut new,
                &manager,
                &av,
                &ctx.sub.clone(),
                &now(),
            );
        }
        match admit_and_persist(ctx, new, Some(current)).await {
            Ok((code, obj)) => return Ok(ctx.respond(code, &obj)),
            Err(WriteError::Api(e)) => return Err(e),
            Err(WriteError::Stale) => continue,
        }
    }
    Err(ApiError::stale(ctx.group(), &ctx.t.plural, &ctx.name))
}

/// The patch media types a type accepts (no strategic merge for custom resources).
fn patch_types(t: &ResourceType) -> Vec<&'static str> {
    let mut v = vec![
        "application/json-patch+json",
        "application/merge-patch+json",
        "application/apply-patch+yaml",
    ];
    if !t.is_custom() {
        v.push("application/strategic-merge-patch+json");
    }
    v
}

fn conflict_error(ctx: &Ctx, conflicts: &[patch::Conflict]) -> ApiError {
    let message = if conflicts.len() == 1 {
        let c = &conflicts[0];
        format!(
            "Apply failed with 1 conflict: conflict with {:?} using {}: {}",
            c.manager, c.api_version, c.field
        )
    } else {
        let list: Vec<String> = conflicts
            .iter()
            .map(|c| {
                format!(
                    "conflict with {:?} using {}: {}",
                    c.manager, c.api_version, c.field
                )
            })
            .collect();
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            list.join("\n")
        )
    };
    let mut e = ApiError::new(409, "Conflict", message);
    e.details = Some(json!({
        "name": ctx.name, "group": ctx.t.group, "kind": ctx.t.plural,
        "causes": conflicts.iter().map(|c| json!({"reason": "FieldManagerConflict",
            "message": format!("conflict with {:?} using {}", c.manager, c.api_version), "field": c.field})).collect::<Vec<_>>(),
    }));
    e
}

async fn delete(ctx: &mut Ctx) -> Result<Response<Body>, ApiError> {
    if !ctx.sub.is_empty() {
        return Err(ApiError::method_not_allowed());
    }
    let opts: Value = if ctx.r.body.is_empty() || !ctx.r.body.starts_with(b"{") {
        json!({})
    } else {
        serde_json::from_slice(&ctx.r.body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
    };
    let dry_run = ctx.dry_run()
        || opts["dryRun"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == "All"));
    if dry_run {
        ctx.r.query.insert("dryRun".into(), "All".into());
    }
    let current = {
        let st = ctx.shared.lock();
        st.get(&ctx.key(&ctx.name)).map(|o| ctx.served(o))
    }
    .ok_or_else(|| ctx.not_found(&ctx.name))?;
    let pre = &opts["preconditions"];
    if let Some(uid) = pre["uid"].as_str()
        && current["metadata"]["uid"].as_str() != Some(uid)
    {
        return Err(ApiError::conflict(
            ctx.group(),
            &ctx.t.plural,
            &ctx.name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                current["metadata"]["uid"].as_str().unwrap_or_default()
            ),
        ));
    }
    if let Some(rv) = pre["resourceVersion"].as_str()
        && current["metadata"]["resourceVersion"].as_str() != Some(rv)
    {
        return Err(ApiError::conflict(
            ctx.group(),
            &ctx.t.plural,
            &ctx.name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                current["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
            ),
        ));
    }
    let hooks = webhooks(ctx);
    if !hooks.is_empty() {
        let attrs = attributes(ctx, "DELETE", &ctx.name, None, Some(current.clone()));
        let services = ctx.shared.services.clone();
        let mut warnings = Vec::new();
        let r = admission::validate(&hooks, &attrs, &services, &mut warnings).await;
        ctx.warnings.extend(warnings);
        r?;
    }
    if dry_run {
        return Ok(ctx.respond(200, &current));
    }
    let mut st = ctx.shared.lock();
    let key = ctx.key(&ctx.name);
    let t = ctx.t.clone();
    let cascade = opts["propagationPolicy"].as_str() != Some("Orphan")
        && ctx.q("propagationPolicy") != Some("Orphan");
    let obj = delete_locked(&mut st, &t, &key, cascade).ok_or_else(|| ctx.not_found(&ctx.name))?;
    let served = ctx.served(&obj);
    drop(st);
    Ok(ctx.respond(200, &served))
}

fn delete_collection(ctx: &mut Ctx) -> Result<Response<Body>, ApiError> {
    let (labels, fields) = selectors(ctx)?;
    let mut st = ctx.shared.lock();
    let ns = (!ctx.ns.is_empty()).then_some(ctx.ns.clone());
    let victims: Vec<Value> = st
        .list(&ctx.t.storage, ns.as_deref())
        .into_iter()
        .filter(|o| {
            let s = ctx.served(o);
            labels.matches_object(&s) && fields.matches(&s)
        })
        .collect();
    let mut items = Vec::new();
    for v in victims {
        let name = v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let vns = v["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let key = State::key(&ctx.t, &vns, &name);
        if !ctx.dry_run() {
            if let Some(o) = delete_locked(&mut st, &ctx.t.clone(), &key, true) {
                items.push(ctx.served(&o));
            }
        } else {
            items.push(ctx.served(&v));
        }
    }
    let rv = st.rv.to_string();
    drop(st);
    Ok(json_response(
        200,
        &json!({"kind": format!("{}List", ctx.t.kind), "apiVersion": ctx.t.api_version(&ctx.version),
        "metadata": {"resourceVersion": rv}, "items": items}),
        &ctx.warnings,
    ))
}

/// Create the namespaces every cluster has.
pub fn bootstrap(st: &mut State) {
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let obj = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "uid": uuid::Uuid::new_v4().to_string(), "creationTimestamp": now(),
                "labels": {"kubernetes.io/metadata.name": ns}},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
        st.put(
            (String::new(), "namespaces".into(), String::new(), ns.into()),
            obj,
            true,
        );
    }
}
