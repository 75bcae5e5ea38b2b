//! Test-time certificates (generated with rcgen, never written to the repository): a CA and
//! serving certificates it signs, usable for this server's HTTPS listener and for test webhooks.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A certificate authority generated at test time.
pub struct CertificateAuthority {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A serving certificate and its key.
#[derive(Clone, Debug)]
pub struct ServingCert {
    /// The certificate (PEM).
    pub cert_pem: String,
    /// The PKCS#8 private key (PEM).
    pub key_pem: String,
    /// The certificate (DER).
    pub cert_der: Vec<u8>,
    /// The PKCS#8 private key (DER).
    pub key_der: Vec<u8>,
}

impl CertificateAuthority {
    /// A new CA with the given common name.
    pub fn new(common_name: &str) -> Result<Self, rcgen::Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
        Ok(CertificateAuthority { issuer })
    }

    /// The CA certificate (PEM), e.g. for a webhook's `caBundle` (base64 of this).
    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    /// The CA certificate, base64-encoded PEM, as `caBundle` and kubeconfig want it.
    pub fn ca_bundle(&self) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(self.cert_pem())
    }

    /// Issue a serving certificate for the given DNS names / IP addresses.
    pub fn issue(&self, names: &[&str]) -> Result<ServingCert, rcgen::Error> {
        let key = KeyPair::generate()?;
        let mut params =
            CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())?;
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().copied().unwrap_or("localhost"),
        );
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(ServingCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().to_vec(),
            key_der: key.serialize_der(),
        })
    }
}

impl ServingCert {
    /// A rustls server configuration (aws-lc-rs provider) serving this certificate with the
    /// given ALPN protocols.
    pub fn server_config(
        &self,
        alpn: &[&[u8]],
    ) -> Result<Arc<rustls::ServerConfig>, rustls::Error> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(self.cert_der.clone())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone())),
            )?;
        cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(cfg))
    }
}
