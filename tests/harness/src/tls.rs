//! Certificates generated at test time: a CA and serving certificates signed by it (rcgen,
//! ECDSA P-256), written to the test directory, plus rustls configurations using them.
//!
//! Nothing here is ever committed: keys exist only in memory and in the per-test directory
//! (key files are created with mode 0600).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::error::{Error, Result};
use crate::paths::TestDir;

/// A certificate authority made for one test.
#[derive(Debug)]
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    cert_path: PathBuf,
    dir: PathBuf,
}

impl TestCa {
    /// Generates a CA named `name` and writes its certificate to `<test dir>/tls/<name>-ca.crt`.
    ///
    /// # Errors
    /// [`Error::Certificate`] or [`Error::Io`].
    pub fn new(dir: &TestDir, name: &str) -> Result<Self> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
        let tls_dir = dir.subdir("tls")?;
        let cert_path = tls_dir.join(format!("{name}-ca.crt"));
        write_file(&cert_path, issuer.pem().as_bytes(), false)?;
        Ok(TestCa {
            issuer,
            cert_path,
            dir: tls_dir,
        })
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    /// The CA certificate, DER.
    pub fn cert_der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    /// Where the CA certificate was written.
    pub fn cert_path(&self) -> &Path {
        &self.cert_path
    }

    /// The CA certificate as a Kubernetes `caBundle` (base64 of the PEM).
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.cert_pem())
    }

    /// A rustls root store trusting only this CA.
    ///
    /// # Errors
    /// [`Error::Tls`] if rustls rejects the certificate.
    pub fn root_store(&self) -> Result<rustls::RootCertStore> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.cert_der())?;
        Ok(roots)
    }

    /// A rustls client configuration (aws-lc-rs provider) trusting only this CA.
    ///
    /// # Errors
    /// [`Error::Tls`].
    pub fn client_config(&self) -> Result<rustls::ClientConfig> {
        Ok(rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(self.root_store()?)
        .with_no_client_auth())
    }

    /// Issues a client certificate (extended key usage clientAuth) with common name `name`, as
    /// an API server presents to an admission webhook, and writes `<test dir>/tls/<name>.crt`
    /// (leaf then CA) and `<name>.key` (PKCS#8, mode 0600).
    ///
    /// # Errors
    /// [`Error::Certificate`] or [`Error::Io`].
    pub fn issue_client_cert(&self, name: &str) -> Result<ServerCert> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(name, params)
    }

    /// Issues a serving certificate (extended key usage serverAuth) for `names` — DNS names
    /// or IP addresses, e.g. `["localhost", "127.0.0.1"]` — and writes
    /// `<test dir>/tls/<name>.crt` (leaf then CA) and `<name>.key` (PKCS#8, mode 0600).
    ///
    /// # Errors
    /// [`Error::Certificate`] (e.g. an invalid name) or [`Error::Io`].
    pub fn issue_server_cert(&self, name: &str, names: &[&str]) -> Result<ServerCert> {
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())?;
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().copied().unwrap_or(name).to_owned(),
        );
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(name, params)
    }

    /// Signs `params` with a new key; writes `<name>.crt` (leaf then CA) and `<name>.key`.
    fn sign(&self, name: &str, params: CertificateParams) -> Result<ServerCert> {
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        let cert_pem = cert.pem();
        let chain_pem = format!("{cert_pem}{}", self.cert_pem());
        let key_pem = key.serialize_pem();
        let cert_path = self.dir.join(format!("{name}.crt"));
        let key_path = self.dir.join(format!("{name}.key"));
        write_file(&cert_path, chain_pem.as_bytes(), false)?;
        write_file(&key_path, key_pem.as_bytes(), true)?;
        Ok(ServerCert {
            cert_pem,
            chain_pem,
            key_pem,
            chain_der: vec![cert.der().clone(), self.cert_der()],
            key_der: key.serialize_der(),
            cert_path,
            key_path,
        })
    }
}

/// A serving certificate and its key.
#[derive(Clone, Debug)]
pub struct ServerCert {
    /// The leaf certificate, PEM.
    pub cert_pem: String,
    /// Leaf and CA certificates, PEM (what servers should present).
    pub chain_pem: String,
    /// The private key, PKCS#8 PEM.
    pub key_pem: String,
    /// Leaf and CA certificates, DER.
    pub chain_der: Vec<CertificateDer<'static>>,
    key_der: Vec<u8>,
    /// The file holding `chain_pem`.
    pub cert_path: PathBuf,
    /// The file holding `key_pem` (mode 0600).
    pub key_path: PathBuf,
}

impl ServerCert {
    /// The private key for rustls.
    pub fn private_key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()))
    }

    /// A rustls server configuration (aws-lc-rs provider) presenting this certificate,
    /// offering ALPN `h2` and `http/1.1`.
    ///
    /// # Errors
    /// [`Error::Tls`].
    pub fn server_config(&self) -> Result<rustls::ServerConfig> {
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(self.chain_der.clone(), self.private_key())?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(config)
    }
}

fn write_file(path: &Path, data: &[u8], private: bool) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    if private {
        options.mode(0o600);
    }
    options
        .open(path)
        .and_then(|mut f| f.write_all(data))
        .map_err(|e| Error::io(format!("writing {}", path.display()), e))
}
