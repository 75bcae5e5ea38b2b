//! Rust side of the Helm renderer in `main.go`: builds it with the Go toolchain (GOPATH mode
//! against the Go sources Debian installs under `/usr/share/gocode`) and runs it.
//!
//! `main.go` renders a chart as `helm template` does — Go's `text/template` with sprig's
//! function map plus Helm's own functions and built-in objects — so tests can render
//! `manifests/helm/` on machines without a `helm` binary.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// What to install when Go or its libraries are missing.
pub const APT_HINT: &str = "the Helm renderer needs Go with sprig and yaml.v2: apt-get install \
     golang-go golang-github-masterminds-sprig-dev golang-gopkg-yaml.v2-dev";

/// Where Debian's `golang-*-dev` packages put Go library sources.
pub const DEBIAN_GOPATH: &str = "/usr/share/gocode";

/// Builds the renderer once per process into `target_dir/helm-render/` and returns the binary's
/// path. Each process builds (Go's build cache makes that quick) into a private file and renames
/// it into place, so that parallel test processes never run a half-written binary.
///
/// # Panics
///
/// When `go` cannot be run or the build fails; the message names the packages to install.
pub fn binary(target_dir: &Path) -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = target_dir.join("helm-render");
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let tmp = dir.join(format!(".helm-render-{}.tmp", std::process::id()));
        let bin = dir.join("helm-render");
        let out = Command::new("go")
            .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
            .env("GO111MODULE", "off")
            .env("GOPATH", DEBIAN_GOPATH)
            .env("GOCACHE", dir.join("gocache"))
            .env("GOFLAGS", "")
            .arg("build")
            .arg("-o")
            .arg(&tmp)
            .arg(".")
            .output()
            .unwrap_or_else(|e| panic!("cannot run `go` ({e}); {APT_HINT}"));
        assert!(
            out.status.success(),
            "building the Helm renderer failed; {APT_HINT}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::rename(&tmp, &bin)
            .unwrap_or_else(|e| panic!("cannot move the renderer into {}: {e}", bin.display()));
        bin
    })
    .clone()
}

/// Renders `chart` with `args` (the flags of `main.go`: `--release-name`, `--namespace`,
/// `-f`, `--set`, `--set-string`, `--include-crds`, `--notes`). `Ok` holds the manifests as
/// one YAML stream; `Err` the renderer's message (e.g. a chart's `fail` or `required`).
pub fn render(target_dir: &Path, chart: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(binary(target_dir))
        .args(args)
        .arg(chart)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the Helm renderer: {e}"));
    if out.status.success() {
        String::from_utf8(out.stdout).map_err(|e| e.to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}
