//! Harness shared by the integration tests: where the project's and the reference's files are,
//! and how a custom object is checked against a generated CRD as an API server would.

use std::path::{Path, PathBuf};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `../shared` beside the checkout: the reference material and the behaviour cases. Panics with
/// a clear message when it is missing — tests that need it must fail, not skip.
pub fn shared_dir() -> PathBuf {
    let dir = repo_root().join("../shared");
    assert!(
        dir.join("reference/samples").is_dir(),
        "{} must hold reference/samples (the project's ../shared folder beside the checkout)",
        dir.display()
    );
    dir
}

/// Every YAML document of a file, as JSON values.
pub fn read_yaml_documents(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| {
            let v: serde_yaml::Value = serde::Deserialize::deserialize(doc)
                .unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()));
            serde_json::to_value(v).expect("YAML maps to JSON")
        })
        .filter(|v| !v.is_null())
        .collect()
}

/// The generated CRD serving `kind`.
pub fn crd_for_kind(kind: &str) -> CustomResourceDefinition {
    booking_shared::crd::all()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for kind {kind}"))
}

/// Errors an API server would report for `object` under the CRD's structural schema and its
/// CEL rules (`x-kubernetes-validations`). Empty when the object is accepted.
pub fn admission_errors(crd: &CustomResourceDefinition, object: &serde_json::Value) -> Vec<String> {
    let version = &crd.spec.versions[0];
    let schema = serde_json::to_value(
        version
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .expect("CRD has a schema"),
    )
    .expect("schema serialises");
    // The structural part: OpenAPI v3 schemas are JSON Schema for the keywords CRDs allow.
    let mut errors: Vec<String> = match jsonschema::draft4::new(&strip_extensions(&schema)) {
        Ok(validator) => validator
            .iter_errors(object)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect(),
        Err(e) => vec![format!("schema does not compile: {e}")],
    };
    // The CEL rules, evaluated with Kubernetes' CEL library as the API server does, only when
    // the structural validation passed.
    if errors.is_empty()
        && let Err(cel_errors) =
            kube::core::cel::Validator::new().validate(&kube_cel_escaping(&schema), object, None)
    {
        errors.extend(cel_errors.into_vec().into_iter().map(|e| e.to_string()));
    }
    errors
}

/// The API server escapes only `__` in property names seen from CEL (`start_at` stays
/// `self.start_at`), whereas kube's client-side CEL validator escapes every `_` (`start__at`).
/// Rewrite the rules' field accesses to the client-side form so that rules written for a real
/// cluster evaluate the same here.
fn kube_cel_escaping(v: &serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(m) => m
            .iter()
            .map(|(k, v)| match (k.as_str(), v) {
                ("rule", serde_json::Value::String(rule)) => (
                    k.clone(),
                    serde_json::Value::String(escape_field_accesses(rule)),
                ),
                _ => (k.clone(), kube_cel_escaping(v)),
            })
            .collect(),
        serde_json::Value::Array(a) => a.iter().map(kube_cel_escaping).collect(),
        other => other.clone(),
    }
}

fn escape_field_accesses(rule: &str) -> String {
    let mut out = String::with_capacity(rule.len());
    let mut after_dot = false;
    for ch in rule.chars() {
        if ch == '_' && after_dot {
            out.push_str("__");
            continue;
        }
        if ch == '.' {
            after_dot = true;
        } else if !(ch.is_ascii_alphanumeric() || ch == '_') {
            after_dot = false;
        }
        out.push(ch);
    }
    out
}

/// JSON Schema validators do not know the `x-kubernetes-*` keywords; drop them (they carry no
/// structural constraint, and the CEL rules are checked separately).
fn strip_extensions(v: &serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(m) => m
            .iter()
            .filter(|(k, _)| !k.starts_with("x-kubernetes-"))
            .map(|(k, v)| (k.clone(), strip_extensions(v)))
            .collect(),
        serde_json::Value::Array(a) => a.iter().map(strip_extensions).collect(),
        other => other.clone(),
    }
}
