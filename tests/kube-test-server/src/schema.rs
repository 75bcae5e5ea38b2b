//! Structural-schema handling of custom objects, as the apiextensions API server does it:
//! unknown-field detection (for `fieldValidation=Strict`), pruning, defaulting, OpenAPI value
//! validation (types, required, enum, pattern, format, bounds, lengths, item counts) and CEL
//! rules (`x-kubernetes-validations`, evaluated by `kube::core::cel`).

use serde_json::{Map, Value};

use crate::status::Cause;

/// The fields of `metav1.ObjectMeta` a client may send.
pub const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn preserves_unknown(schema: &Value) -> bool {
    schema["x-kubernetes-preserve-unknown-fields"].as_bool() == Some(true)
}

/// Unknown fields of `metadata` (every kind).
pub fn unknown_metadata_fields(obj: &Value) -> Vec<String> {
    obj.get("metadata")
        .and_then(Value::as_object)
        .map(|m| {
            m.keys()
                .filter(|k| !OBJECT_META_FIELDS.contains(&k.as_str()))
                .map(|k| format!("metadata.{k}"))
                .collect()
        })
        .unwrap_or_default()
}

/// Prune `obj` against the root `schema` of a custom resource; returns the paths of the removed
/// unknown fields (null values of non-nullable fields are dropped silently, as the real server).
pub fn prune_root(schema: &Value, obj: &mut Value) -> Vec<String> {
    let mut removed = Vec::new();
    if let Some(m) = obj.as_object_mut() {
        if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            let unknown: Vec<String> = meta
                .keys()
                .filter(|k| !OBJECT_META_FIELDS.contains(&k.as_str()))
                .cloned()
                .collect();
            for k in unknown {
                meta.remove(&k);
                removed.push(format!("metadata.{k}"));
            }
        }
        let props = schema["properties"].as_object();
        let keys: Vec<String> = m.keys().cloned().collect();
        for k in keys {
            if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            match props.and_then(|p| p.get(&k)) {
                Some(sub) => {
                    if m[&k].is_null() && sub["nullable"].as_bool() != Some(true) {
                        m.remove(&k);
                        continue;
                    }
                    if let Some(v) = m.get_mut(&k) {
                        prune(sub, v, &k, &mut removed);
                    }
                }
                None if preserves_unknown(schema) => {}
                None => {
                    m.remove(&k);
                    removed.push(k);
                }
            }
        }
    }
    removed
}

fn prune(schema: &Value, value: &mut Value, path: &str, removed: &mut Vec<String>) {
    match value {
        Value::Object(m) => {
            if schema["x-kubernetes-embedded-resource"].as_bool() == Some(true) {
                // apiVersion, kind and metadata of embedded objects are kept.
            }
            let props = schema["properties"].as_object();
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                let sub = props.and_then(|p| p.get(&k)).or(additional);
                match sub {
                    Some(sub) => {
                        if m[&k].is_null() && sub["nullable"].as_bool() != Some(true) {
                            m.remove(&k);
                            continue;
                        }
                        if let Some(v) = m.get_mut(&k) {
                            prune(sub, v, &join(path, &k), removed);
                        }
                    }
                    None => {
                        let embedded_meta = schema["x-kubernetes-embedded-resource"].as_bool()
                            == Some(true)
                            && matches!(k.as_str(), "apiVersion" | "kind" | "metadata");
                        if !(preserves_unknown(schema)
                            || embedded_meta
                            || schema.get("additionalProperties") == Some(&Value::Bool(true)))
                        {
                            m.remove(&k);
                            removed.push(join(path, &k));
                        }
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune(item_schema, item, &format!("{path}[{i}]"), removed);
                }
            }
        }
        _ => {}
    }
}

/// Apply the schema's defaults (`kube::core::cel::apply_defaults`).
pub fn apply_defaults(schema: &Value, obj: &Value) -> Value {
    kube::core::cel::apply_defaults(schema, obj)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn quote(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

/// Validate `obj` against the root schema; the returned causes name fields as the real server.
pub fn validate_root(schema: &Value, obj: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    if let (Some(props), Some(m)) = (schema["properties"].as_object(), obj.as_object()) {
        for (k, sub) in props {
            if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            if let Some(v) = m.get(k) {
                validate(sub, v, k, &mut out);
            }
        }
        if let Some(req) = schema["required"].as_array() {
            for r in req.iter().filter_map(Value::as_str) {
                if !m.contains_key(r) {
                    out.push(Cause::new("FieldValueRequired", r, "Required value"));
                }
            }
        }
    }
    out
}

fn number_matches(v: &Value, want: &str) -> bool {
    match want {
        "integer" => v.as_i64().is_some() || v.as_u64().is_some(),
        "number" => v.is_number(),
        _ => false,
    }
}

fn validate(schema: &Value, v: &Value, path: &str, out: &mut Vec<Cause>) {
    if v.is_null() {
        if schema["nullable"].as_bool() == Some(true) {
            return;
        }
        if let Some(t) = schema["type"].as_str() {
            out.push(Cause::new(
                "FieldValueTypeInvalid",
                path,
                format!("Invalid value: \"null\": {path} in body must be of type {t}: \"null\""),
            ));
        }
        return;
    }
    let int_or_string = schema["x-kubernetes-int-or-string"].as_bool() == Some(true);
    if int_or_string {
        if !(v.is_string() || number_matches(v, "integer")) {
            out.push(Cause::new(
                "FieldValueTypeInvalid",
                path,
                format!(
                    "Invalid value: \"{}\": {path} in body must be of type integer,string: \"{}\"",
                    type_name(v),
                    type_name(v)
                ),
            ));
            return;
        }
    } else if let Some(t) = schema["type"].as_str() {
        let ok = match t {
            "string" => v.is_string(),
            "boolean" => v.is_boolean(),
            "object" => v.is_object(),
            "array" => v.is_array(),
            "integer" | "number" => number_matches(v, t),
            _ => true,
        };
        if !ok {
            out.push(Cause::new(
                "FieldValueTypeInvalid",
                path,
                format!(
                    "Invalid value: \"{}\": {path} in body must be of type {t}: \"{}\"",
                    type_name(v),
                    type_name(v)
                ),
            ));
            return;
        }
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(v)
    {
        out.push(Cause::new(
            "FieldValueNotSupported",
            path,
            format!(
                "Unsupported value: {}: supported values: {}",
                quote(v),
                allowed.iter().map(quote).collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    match v {
        Value::String(s) => validate_string(schema, s, path, out),
        Value::Number(n) => validate_number(schema, n, v, path, out),
        Value::Array(items) => {
            let n = items.len() as u64;
            if let Some(max) = schema["maxItems"].as_u64()
                && n > max
            {
                out.push(Cause::new(
                    "FieldValueTooMany",
                    path,
                    format!("Too many: {n}: must have at most {max} items"),
                ));
            }
            if let Some(min) = schema["minItems"].as_u64()
                && n < min
            {
                out.push(Cause::new(
                    "FieldValueInvalid",
                    path,
                    format!("Invalid value: {n}: {path} in body should have at least {min} items"),
                ));
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    validate(item_schema, item, &format!("{path}[{i}]"), out);
                }
            }
        }
        Value::Object(m) => validate_object(schema, m, path, out),
        _ => {}
    }
}

fn validate_object(schema: &Value, m: &Map<String, Value>, path: &str, out: &mut Vec<Cause>) {
    if let Some(req) = schema["required"].as_array() {
        for r in req.iter().filter_map(Value::as_str) {
            if !m.contains_key(r) {
                out.push(Cause::new(
                    "FieldValueRequired",
                    &join(path, r),
                    "Required value",
                ));
            }
        }
    }
    let props = schema["properties"].as_object();
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    for (k, v) in m {
        if let Some(sub) = props.and_then(|p| p.get(k)).or(additional) {
            validate(sub, v, &join(path, k), out);
        }
    }
    let n = m.len() as u64;
    if let Some(max) = schema["maxProperties"].as_u64()
        && n > max
    {
        out.push(Cause::new(
            "FieldValueTooMany",
            path,
            format!("Too many: {n}: must have at most {max} items"),
        ));
    }
    if let Some(min) = schema["minProperties"].as_u64()
        && n < min
    {
        out.push(Cause::new(
            "FieldValueInvalid",
            path,
            format!("Invalid value: {n}: {path} in body should have at least {min} properties"),
        ));
    }
}

fn validate_string(schema: &Value, s: &str, path: &str, out: &mut Vec<Cause>) {
    let len = s.chars().count() as u64;
    if let Some(max) = schema["maxLength"].as_u64()
        && len > max
    {
        out.push(Cause::new(
            "FieldValueTooLong",
            path,
            format!("Too long: may not be more than {max} bytes"),
        ));
    }
    if let Some(min) = schema["minLength"].as_u64()
        && len < min
    {
        out.push(Cause::new(
            "FieldValueInvalid",
            path,
            format!("Invalid value: {s:?}: {path} in body should be at least {min} chars long"),
        ));
    }
    if let Some(p) = schema["pattern"].as_str() {
        match regex::Regex::new(p) {
            Ok(re) if !re.is_match(s) => out.push(Cause::new(
                "FieldValueInvalid",
                path,
                format!("Invalid value: {s:?}: {path} in body should match '{p}'"),
            )),
            Ok(_) => {}
            Err(_) => out.push(Cause::new(
                "FieldValueInvalid",
                path,
                format!("Invalid value: {p:?}: the schema's pattern does not compile"),
            )),
        }
    }
    if let Some(f) = schema["format"].as_str()
        && !format_ok(f, s)
    {
        out.push(Cause::new(
            "FieldValueInvalid",
            path,
            format!("Invalid value: {s:?}: {path} in body must be of type {f}: {s:?}"),
        ));
    }
}

/// Whether `s` satisfies the OpenAPI string `format` (the formats the real server checks that
/// matter here; unknown formats pass, as there).
pub fn format_ok(format: &str, s: &str) -> bool {
    match format {
        "date-time" | "datetime" => s.parse::<jiff::Timestamp>().is_ok(),
        "date" => s.len() == 10 && s.parse::<jiff::civil::Date>().is_ok(),
        "byte" => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.decode(s).is_ok()
        }
        "uuid" => uuid::Uuid::parse_str(s).is_ok(),
        "email" => {
            let mut parts = s.splitn(2, '@');
            matches!((parts.next(), parts.next()), (Some(a), Some(b)) if !a.is_empty() && b.contains('.') && !b.starts_with('.') && !b.ends_with('.'))
        }
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "hostname" => is_dns_subdomain(s),
        _ => true,
    }
}

fn validate_number(
    schema: &Value,
    n: &serde_json::Number,
    v: &Value,
    path: &str,
    out: &mut Vec<Cause>,
) {
    let x = n.as_f64().unwrap_or(0.0);
    if let Some(min) = schema["minimum"].as_f64() {
        let excl = schema["exclusiveMinimum"].as_bool() == Some(true);
        if (excl && x <= min) || (!excl && x < min) {
            out.push(Cause::new(
                "FieldValueInvalid",
                path,
                format!(
                    "Invalid value: {v}: {path} in body should be greater than {}{}",
                    if excl { "" } else { "or equal to " },
                    schema["minimum"]
                ),
            ));
        }
    }
    if let Some(max) = schema["maximum"].as_f64() {
        let excl = schema["exclusiveMaximum"].as_bool() == Some(true);
        if (excl && x >= max) || (!excl && x > max) {
            out.push(Cause::new(
                "FieldValueInvalid",
                path,
                format!(
                    "Invalid value: {v}: {path} in body should be less than {}{}",
                    if excl { "" } else { "or equal to " },
                    schema["maximum"]
                ),
            ));
        }
    }
}

/// Compile a schema's CEL rules with `kube::core::cel`, first rewriting field selections of
/// property names that contain `_` (`self.end_at`) to the form kube-cel expects (`self.end__at`):
/// kube-cel escapes every `_` while the real API server escapes only `__`, so rules written for
/// a real cluster would otherwise fail with "No such key".
pub fn compile_cel(schema: &Value) -> kube::core::cel::CompiledSchema {
    let mut names = std::collections::BTreeSet::new();
    collect_underscored(schema, &mut names);
    if names.is_empty() {
        return kube::core::cel::compile_schema(schema);
    }
    let mut rewritten = schema.clone();
    rewrite_rules(&mut rewritten, &names);
    kube::core::cel::compile_schema(&rewritten)
}

fn collect_underscored(v: &Value, out: &mut std::collections::BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            if let Some(props) = m.get("properties").and_then(Value::as_object) {
                out.extend(
                    props
                        .keys()
                        .filter(|k| k.contains('_') && !k.contains("__"))
                        .cloned(),
                );
            }
            m.values().for_each(|x| collect_underscored(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| collect_underscored(x, out)),
        _ => {}
    }
}

fn rewrite_rules(v: &mut Value, names: &std::collections::BTreeSet<String>) {
    let Ok(re) = regex::Regex::new(r"\.([A-Za-z_][A-Za-z0-9_]*)") else {
        return;
    };
    fn walk(v: &mut Value, re: &regex::Regex, names: &std::collections::BTreeSet<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::Array(rules)) = m.get_mut("x-kubernetes-validations") {
                    for r in rules.iter_mut() {
                        for field in ["rule", "messageExpression"] {
                            if let Some(Value::String(text)) = r.get_mut(field) {
                                *text = re
                                    .replace_all(text, |c: &regex::Captures<'_>| {
                                        if names.contains(&c[1]) {
                                            format!(".{}", c[1].replace('_', "__"))
                                        } else {
                                            c[0].to_string()
                                        }
                                    })
                                    .into_owned();
                            }
                        }
                    }
                }
                m.values_mut().for_each(|x| walk(x, re, names));
            }
            Value::Array(a) => a.iter_mut().for_each(|x| walk(x, re, names)),
            _ => {}
        }
    }
    walk(v, &re, names);
}

/// Evaluate the CEL rules of a compiled schema (`old` for transition rules).
pub fn validate_cel(
    compiled: &kube::core::cel::CompiledSchema,
    obj: &Value,
    old: Option<&Value>,
) -> Vec<Cause> {
    let validator = kube::core::cel::Validator::new();
    match validator.validate_compiled(compiled, obj, old) {
        Ok(()) => Vec::new(),
        Err(errors) => errors
            .into_vec()
            .into_iter()
            .map(|e| {
                let value_type = lookup_path(obj, &e.field_path)
                    .map(type_name)
                    .unwrap_or("object");
                let reason = match e.reason.as_deref() {
                    Some("FieldValueForbidden") => "FieldValueForbidden",
                    Some("FieldValueRequired") => "FieldValueRequired",
                    Some("FieldValueDuplicate") => "FieldValueDuplicate",
                    _ => "FieldValueInvalid",
                };
                let body = match reason {
                    "FieldValueForbidden" => format!("Forbidden: {}", e.message),
                    "FieldValueRequired" => format!("Required value: {}", e.message),
                    "FieldValueDuplicate" => format!("Duplicate value: {}", e.message),
                    _ => format!("Invalid value: \"{value_type}\": {}", e.message),
                };
                Cause::new(reason, &e.field_path, body)
            })
            .collect(),
    }
}

fn lookup_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = obj;
    if path.is_empty() {
        return Some(cur);
    }
    for seg in path.split('.') {
        let (name, index) = match seg.split_once('[') {
            Some((n, rest)) => (n, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (seg, None),
        };
        cur = cur.get(name)?;
        if let Some(i) = index {
            cur = cur.get(i)?;
        }
    }
    Some(cur)
}

/// RFC 1123 subdomain (`metadata.name` of most kinds).
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// RFC 1123 label (`metadata.name` of Namespaces).
pub fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && !s.contains('.') && is_dns_subdomain(s)
}

const LABEL_PART: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";

/// Causes for invalid `metadata.labels` keys and values (the real server's messages).
pub fn label_causes(obj: &Value) -> Vec<Cause> {
    let Some(labels) = obj["metadata"]["labels"].as_object() else {
        return Vec::new();
    };
    let Ok(part) = regex::Regex::new(&format!("^{LABEL_PART}$")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (k, v) in labels {
        let (prefix, name) = k
            .rsplit_once('/')
            .map(|(p, n)| (Some(p), n))
            .unwrap_or((None, k.as_str()));
        if name.len() > 63 || !part.is_match(name) {
            out.push(Cause::new(
                "FieldValueInvalid",
                "metadata.labels",
                format!("Invalid value: {k:?}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '{LABEL_PART}')"),
            ));
        } else if let Some(p) = prefix
            && !is_dns_subdomain(p)
        {
            out.push(Cause::new(
                "FieldValueInvalid",
                "metadata.labels",
                format!("Invalid value: {k:?}: prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"),
            ));
        }
        let value = v.as_str().unwrap_or_default();
        if !v.is_string() || value.len() > 63 || !(value.is_empty() || part.is_match(value)) {
            out.push(Cause::new(
                "FieldValueInvalid",
                "metadata.labels",
                format!("Invalid value: {value:?}: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '({LABEL_PART})?')"),
            ));
        }
    }
    out
}

/// The cause for an invalid `metadata.name`, if it is one.
pub fn name_cause(name: &str, label: bool) -> Option<Cause> {
    if label && !is_dns_label(name) {
        return Some(Cause::new(
            "FieldValueInvalid",
            "metadata.name",
            format!(
                "Invalid value: {name:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            ),
        ));
    }
    if !label && !is_dns_subdomain(name) {
        return Some(Cause::new(
            "FieldValueInvalid",
            "metadata.name",
            format!(
                "Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["type"], "properties": {
                "type": {"type": "string", "enum": ["ec2", "rds"]},
                "tag": {"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 5},
                "start": {"type": "string", "format": "date-time"},
                "count": {"type": "integer", "minimum": 1, "maximum": 3, "default": 1},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "items": {"type": "array", "maxItems": 1, "items": {"type": "object", "properties": {"a": {"type": "string"}}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
            },
            "x-kubernetes-validations": [{"rule": "self.type != 'rds' || has(self.tag)", "message": "rds needs a tag"}]},
            "status": {"type": "object", "nullable": true}
        }})
    }

    #[test]
    fn validation_messages_name_fields() {
        let obj = json!({"spec": {"type": "gce", "tag": "A", "start": "yesterday", "count": 0, "items": [{}, {}], "labels": {"x": 1}}});
        let causes: Vec<String> = validate_root(&schema(), &obj)
            .iter()
            .map(Cause::display)
            .collect();
        assert!(
            causes.contains(
                &"spec.type: Unsupported value: \"gce\": supported values: \"ec2\", \"rds\""
                    .to_string()
            ),
            "{causes:?}"
        );
        assert!(causes.contains(
            &"spec.tag: Invalid value: \"A\": spec.tag in body should match '^[a-z]+$'".to_string()
        ));
        assert!(
            causes.contains(
                &"spec.tag: Invalid value: \"A\": spec.tag in body should be at least 2 chars long"
                    .to_string()
            )
        );
        assert!(causes.contains(&"spec.start: Invalid value: \"yesterday\": spec.start in body must be of type date-time: \"yesterday\"".to_string()));
        assert!(causes.contains(&"spec.count: Invalid value: 0: spec.count in body should be greater than or equal to 1".to_string()));
        assert!(causes.contains(&"spec.items: Too many: 2: must have at most 1 items".to_string()));
        assert!(causes.contains(&"spec.labels.x: Invalid value: \"integer\": spec.labels.x in body must be of type string: \"integer\"".to_string()));
        let missing: Vec<String> = validate_root(&schema(), &json!({"spec": {}}))
            .iter()
            .map(Cause::display)
            .collect();
        assert_eq!(missing, vec!["spec.type: Required value".to_string()]);
        assert!(
            validate_root(
                &schema(),
                &json!({"spec": {"type": "ec2", "count": 3}, "status": null})
            )
            .is_empty()
        );
    }

    #[test]
    fn pruning_and_defaults() {
        let mut obj = json!({"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "x", "bogus": 1},
            "spec": {"type": "ec2", "extra": true, "free": {"anything": 1}, "items": [{"a": "b", "c": 1}], "tag": null}, "top": 1});
        let mut removed = prune_root(&schema(), &mut obj);
        removed.sort();
        assert_eq!(
            removed,
            vec!["metadata.bogus", "spec.extra", "spec.items[0].c", "top"]
        );
        assert_eq!(obj["spec"]["free"]["anything"], 1);
        assert!(obj["spec"].get("tag").is_none());
        let defaulted = apply_defaults(&schema(), &obj);
        assert_eq!(defaulted["spec"]["count"], 1);
    }

    #[test]
    fn cel_rules_are_evaluated() {
        let compiled = compile_cel(&schema());
        let bad = validate_cel(&compiled, &json!({"spec": {"type": "rds"}}), None);
        assert_eq!(bad.len(), 1);
        assert_eq!(
            bad[0].display(),
            "spec: Invalid value: \"object\": rds needs a tag"
        );
        assert!(
            validate_cel(
                &compiled,
                &json!({"spec": {"type": "rds", "tag": "ab"}}),
                None
            )
            .is_empty()
        );
    }

    #[test]
    fn cel_rules_on_snake_case_fields() {
        let s = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"start_at": {"type": "string", "format": "date-time"}, "end_at": {"type": "string", "format": "date-time"}},
            "x-kubernetes-validations": [{"rule": "self.end_at > self.start_at", "fieldPath": ".end_at", "message": "end_at must be after start_at", "reason": "FieldValueInvalid"}]}}});
        let c = compile_cel(&s);
        let ok =
            json!({"spec": {"start_at": "2023-01-10T22:35:00Z", "end_at": "2023-01-10T22:45:00Z"}});
        assert!(validate_cel(&c, &ok, None).is_empty());
        let bad =
            json!({"spec": {"start_at": "2023-01-10T22:35:00Z", "end_at": "2023-01-10T22:00:00Z"}});
        let causes = validate_cel(&c, &bad, None);
        assert_eq!(causes.len(), 1);
        assert_eq!(
            causes[0].display(),
            "spec.end_at: Invalid value: \"string\": end_at must be after start_at"
        );
    }

    #[test]
    fn labels_are_validated() {
        assert!(
            label_causes(
                &json!({"metadata": {"labels": {"app.kubernetes.io/name": "booking", "a": ""}}})
            )
            .is_empty()
        );
        let bad = label_causes(
            &json!({"metadata": {"labels": {"bad key": "x", "k": "bad value", "Upper.Case/x": "y"}}}),
        );
        assert_eq!(bad.len(), 3, "{bad:?}");
        assert!(
            bad.iter().any(|c| c.display().starts_with(
                "metadata.labels: Invalid value: \"bad value\": a valid label must be"
            ))
        );
    }

    #[test]
    fn names() {
        assert!(is_dns_subdomain("ec2.analytics"));
        assert!(!is_dns_subdomain("Ec2"));
        assert!(!is_dns_label("a.b"));
        assert!(name_cause("-x", false).is_some());
        assert!(format_ok("date-time", "2023-01-10T22:35:00Z"));
        assert!(!format_ok("date-time", "2023-01-10 22:35"));
    }
}
