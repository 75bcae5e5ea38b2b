//! Where things are: the repository, its virtualenv and Python helper scripts, and the
//! per-test temporary directory that holds logs, certificates and received mail.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};

/// Environment variable that, when set to a directory, replaces `<repo>/.venv`.
pub const VENV_ENV: &str = "BOOKING_HARNESS_VENV";
/// Environment variable that, when set to `1`, keeps every test directory (not only those of
/// failed tests).
pub const KEEP_ENV: &str = "BOOKING_HARNESS_KEEP";

/// The repository root (the Cargo workspace), found from this crate's location at build time.
pub fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| manifest.to_path_buf())
}

/// The shipped CustomResourceDefinitions: `<repo>/manifests/crds/*.yaml` (not its
/// kustomization), sorted. Panics when there are none: every test that installs them needs them.
pub fn crd_files() -> Vec<PathBuf> {
    let dir = repo_root().join("manifests/crds");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|x| x == "yaml")
                && p.file_name().is_some_and(|n| n != "kustomization.yaml")
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no CRDs in {}", dir.display());
    files
}

/// The project's Python virtualenv: `$BOOKING_HARNESS_VENV` or `<repo>/.venv`.
pub fn venv_dir() -> PathBuf {
    match std::env::var_os(VENV_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => repo_root().join(".venv"),
    }
}

/// An executable of the virtualenv (`<venv>/bin/<name>`).
///
/// # Errors
/// [`Error::VenvMissing`] (telling to run `make venv`) when it does not exist.
pub fn venv_bin(name: &str) -> Result<PathBuf> {
    let path = venv_dir().join("bin").join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::VenvMissing {
            tool: name.to_owned(),
            path,
        })
    }
}

/// The virtualenv's Python interpreter.
///
/// # Errors
/// [`Error::VenvMissing`] when the virtualenv has not been created.
pub fn venv_python() -> Result<PathBuf> {
    venv_bin("python3")
}

/// A helper script of `tests/python/`.
///
/// # Errors
/// [`Error::Io`] when the script does not exist.
pub fn python_script(name: &str) -> Result<PathBuf> {
    let path = repo_root().join("tests").join("python").join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::io(
            format!("helper script {}", path.display()),
            std::io::Error::from(std::io::ErrorKind::NotFound),
        ))
    }
}

/// A per-test temporary directory (logs, certificates, mail, recordings).
///
/// Cheap to clone; the directory lives until the last clone is dropped (processes started in
/// it hold a clone, so their logs outlive them). It is then deleted, **unless** the thread is
/// panicking (a failed test), [`TestDir::keep`] was called, or `BOOKING_HARNESS_KEEP=1` is set:
/// then it is kept and its path is printed on stderr, which the test runner shows with the
/// failure.
#[derive(Clone, Debug)]
pub struct TestDir {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    dir: std::sync::Mutex<Option<tempfile::TempDir>>,
    path: PathBuf,
    keep: std::sync::atomic::AtomicBool,
}

impl TestDir {
    /// Creates a fresh directory under the system temporary directory, named after `label`
    /// (e.g. the test's name).
    ///
    /// # Errors
    /// [`Error::Io`] when the directory cannot be created.
    pub fn new(label: &str) -> Result<Self> {
        let prefix: String = label
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let dir = tempfile::Builder::new()
            .prefix(&format!("booking-{prefix}-"))
            .tempdir()
            .map_err(|e| Error::io("creating the test directory", e))?;
        let path = dir.path().to_path_buf();
        Ok(TestDir {
            inner: Arc::new(Inner {
                dir: std::sync::Mutex::new(Some(dir)),
                path,
                keep: std::sync::atomic::AtomicBool::new(false),
            }),
        })
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// A path inside the directory.
    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.inner.path.join(rel)
    }

    /// Creates (if needed) and returns a subdirectory.
    ///
    /// # Errors
    /// [`Error::Io`] when it cannot be created.
    pub fn subdir(&self, rel: impl AsRef<Path>) -> Result<PathBuf> {
        let path = self.join(rel);
        std::fs::create_dir_all(&path)
            .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
        Ok(path)
    }

    /// Keeps the directory after the test, whatever its outcome.
    pub fn keep(&self) {
        self.inner
            .keep
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let keep = std::thread::panicking()
            || self.keep.load(std::sync::atomic::Ordering::SeqCst)
            || std::env::var(KEEP_ENV).is_ok_and(|v| v == "1");
        let Ok(mut guard) = self.dir.lock() else {
            return;
        };
        // Without `keep`, the TempDir is dropped here, deleting the directory.
        if let Some(dir) = guard.take()
            && keep
        {
            let path = dir.keep();
            eprintln!("booking-harness: test files kept in {}", path.display());
        }
    }
}

/// A free TCP port on 127.0.0.1, below the kernel's ephemeral range (Linux hands out 32768 and
/// up as the source ports of outgoing connections, so a port found by binding port 0 can be
/// taken by any test's next connection before the caller binds it).
///
/// A random port of 20000..32000 that binds now; another process may still take it before the
/// caller binds it, and the starters of this crate retry with a new port when a server fails to
/// start. Falls back to binding port 0.
///
/// # Errors
/// [`Error::Io`] when no socket can be bound.
pub fn free_port() -> Result<u16> {
    let mut rng = fastrand::Rng::new();
    for _ in 0..200 {
        let port = rng.u16(20_000..32_000);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
        .map_err(|e| Error::io("binding 127.0.0.1:0 to find a free port", e))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| Error::io("reading the bound address", e))
}
