//! Harness shared by the integration tests: where the project's and the reference's files are,
//! and the generated CRDs. What an API server accepts is asked of a real one (see
//! `booking_harness::control_plane`), never imitated here.

pub mod campaign;
pub mod e2e;

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
