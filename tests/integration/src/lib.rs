//! Harness shared by the integration tests: where the project's and the reference's files are,
//! the generated CRDs, YAML documents and commands fed on stdin; the end-to-end helpers
//! ([`e2e`], [`campaign`], [`admission_client`]) and the packaging tests' ([`packaging`]). What an API server accepts
//! is asked of a real one (see `booking_harness::control_plane`), never imitated here.

pub mod admission_client;
pub mod campaign;
pub mod e2e;
pub mod kubectl;
pub mod packaging;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

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
    parse_yaml_documents(&text, &path.display().to_string())
}

/// Every YAML document of `text`, as JSON values (empty documents left out); panics naming
/// `what` when it is not YAML.
pub fn parse_yaml_documents(text: &str, what: &str) -> Vec<serde_json::Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| {
            let v: serde_yaml::Value = serde::Deserialize::deserialize(doc)
                .unwrap_or_else(|e| panic!("{what} is not YAML: {e}"));
            serde_json::to_value(v).expect("YAML maps to JSON")
        })
        .filter(|v| !v.is_null())
        .collect()
}

/// Runs `cmd` with `stdin` written to its standard input and returns its output, whatever its
/// outcome; panics only when it cannot be started.
pub fn output_with_stdin(cmd: &mut Command, stdin: &str) -> Output {
    use std::io::Write as _;
    let shown = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {shown}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The generated CRD serving `kind`.
pub fn crd_for_kind(kind: &str) -> CustomResourceDefinition {
    booking_shared::crd::all()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for kind {kind}"))
}
