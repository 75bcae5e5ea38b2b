//! The serving certificate: read from PEM files and swapped in place when the files change
//! (cert-manager rotates them in the mounted Secret), without dropping connections.
//!
//! [`ReloadingCert`] is a rustls [`ResolvesServerCert`]: every new TLS handshake takes the
//! current certificate, and connections already established keep theirs. A background task
//! ([`ReloadingCert::watch`]) polls both files and swaps the key only when the new pair loads and
//! matches; a half-written or mismatched pair keeps the old certificate in service (and is
//! retried at the next poll). Polling works through the symlink swaps of Kubernetes Secret
//! volumes, where file-change notifications are unreliable.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use arc_swap::ArcSwap;
use rustls::{
    ServerConfig,
    crypto::CryptoProvider,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    server::{ClientHello, ResolvesServerCert},
    sign::CertifiedKey,
};
use tokio::sync::watch;

use crate::metrics::{Metrics, ReloadLabels};

/// Why a certificate could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}; check --tls-cert-file / --tls-key-file")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The certificate file holds no PEM certificate.
    #[error("{path} holds no PEM certificate (-----BEGIN CERTIFICATE-----): {reason}")]
    Certificate {
        /// The file.
        path: PathBuf,
        /// What the PEM parser said.
        reason: String,
    },
    /// The key file holds no PEM private key.
    #[error("{path} holds no PEM private key (PKCS#8, PKCS#1 or SEC1): {reason}")]
    Key {
        /// The file.
        path: PathBuf,
        /// What the PEM parser said.
        reason: String,
    },
    /// The key is unusable or does not belong to the certificate.
    #[error("the key in {key} does not fit the certificate in {cert}: {reason}")]
    Mismatch {
        /// Certificate file.
        cert: PathBuf,
        /// Key file.
        key: PathBuf,
        /// What rustls said.
        reason: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// A certificate and key pair read from PEM bytes.
pub fn certified_key(
    cert_pem: &[u8],
    key_pem: &[u8],
    cert_path: &Path,
    key_path: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Certificate {
            path: cert_path.to_owned(),
            reason: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::Certificate {
            path: cert_path.to_owned(),
            reason: "the file is empty".to_owned(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::Key {
        path: key_path.to_owned(),
        reason: e.to_string(),
    })?;
    CertifiedKey::from_der(chain, key, provider).map_err(|e| TlsError::Mismatch {
        cert: cert_path.to_owned(),
        key: key_path.to_owned(),
        reason: e.to_string(),
    })
}

/// The serving certificate, swapped when its files change.
#[derive(Debug)]
pub struct ReloadingCert {
    cert_path: PathBuf,
    key_path: PathBuf,
    provider: Arc<CryptoProvider>,
    current: ArcSwap<CertifiedKey>,
    /// The file contents the current certificate was loaded from.
    loaded_from: std::sync::Mutex<(Vec<u8>, Vec<u8>)>,
}

impl ReloadingCert {
    /// Loads the pair once; fails when it cannot (the webhook must not start without one).
    pub async fn load(
        cert_path: PathBuf,
        key_path: PathBuf,
        provider: Arc<CryptoProvider>,
    ) -> Result<Arc<Self>, TlsError> {
        let (cert_pem, key_pem) = read_pair(&cert_path, &key_path).await?;
        let key = certified_key(&cert_pem, &key_pem, &cert_path, &key_path, &provider)?;
        Ok(Arc::new(Self {
            cert_path,
            key_path,
            provider,
            current: ArcSwap::from_pointee(key),
            loaded_from: std::sync::Mutex::new((cert_pem, key_pem)),
        }))
    }

    /// Re-reads the files; swaps the certificate when they changed and load. Returns whether a
    /// new certificate is now served.
    pub async fn reload(&self) -> Result<bool, TlsError> {
        let (cert_pem, key_pem) = read_pair(&self.cert_path, &self.key_path).await?;
        {
            let loaded = self.loaded_from.lock().unwrap_or_else(|e| e.into_inner());
            if loaded.0 == cert_pem && loaded.1 == key_pem {
                return Ok(false);
            }
        }
        let key = certified_key(
            &cert_pem,
            &key_pem,
            &self.cert_path,
            &self.key_path,
            &self.provider,
        )?;
        self.current.store(Arc::new(key));
        *self.loaded_from.lock().unwrap_or_else(|e| e.into_inner()) = (cert_pem, key_pem);
        Ok(true)
    }

    /// Polls the files every `interval` until `shutdown` changes, reloading on change.
    pub async fn watch(
        self: Arc<Self>,
        interval: Duration,
        metrics: Metrics,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = shutdown.changed() => return,
            }
            match self.reload().await {
                Ok(false) => {}
                Ok(true) => {
                    tracing::info!(cert = %self.cert_path.display(), "serving certificate reloaded");
                    metrics
                        .certificate_reloads
                        .get_or_create(&ReloadLabels { result: "success" })
                        .inc();
                }
                Err(e) => {
                    tracing::warn!(error = %e, "serving certificate not reloaded; the previous one stays in use");
                    metrics
                        .certificate_reloads
                        .get_or_create(&ReloadLabels { result: "failure" })
                        .inc();
                }
            }
        }
    }

    /// A rustls server configuration (TLS 1.2 and 1.3, HTTP/2 and HTTP/1.1 by ALPN) that takes
    /// its certificate from this resolver at every handshake.
    pub fn server_config(self: &Arc<Self>) -> Result<ServerConfig, TlsError> {
        self.server_config_with_client_ca(None)
    }

    /// [`ReloadingCert::server_config`], and with `client_ca` (a PEM file of CA certificates)
    /// every client must present a certificate signed by one of them (rustls'
    /// `WebPkiClientVerifier`): a handshake without one is refused.
    pub fn server_config_with_client_ca(
        self: &Arc<Self>,
        client_ca: Option<&Path>,
    ) -> Result<ServerConfig, TlsError> {
        let builder = ServerConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
        let builder = match client_ca {
            None => builder.with_no_client_auth(),
            Some(path) => builder.with_client_cert_verifier(client_verifier(path, &self.provider)?),
        };
        let mut config = builder.with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(config)
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// A verifier accepting only client certificates signed by a CA of the PEM file `path`.
pub fn client_verifier(
    path: &Path,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let pem = std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })?;
    let bad = |reason: String| TlsError::Certificate {
        path: path.to_owned(),
        reason: format!("{reason} (--client-ca-file)"),
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        roots
            .add(cert.map_err(|e| bad(e.to_string()))?)
            .map_err(|e| bad(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(bad("no certificate found".to_owned()));
    }
    rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| bad(e.to_string()))
}

async fn read_pair(cert: &Path, key: &Path) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
    let read = |path: &Path| {
        let path = path.to_owned();
        async move {
            tokio::fs::read(&path)
                .await
                .map_err(|source| TlsError::Read { path, source })
        }
    };
    Ok((read(cert).await?, read(key).await?))
}
