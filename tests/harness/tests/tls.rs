//! Test certificates: a CA, serving certificates for DNS names and IPs, rustls configs.

use std::sync::Arc;

use base64::Engine as _;
use booking_harness::TestDir;
use booking_harness::tls::TestCa;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn handshake(
    ca: &TestCa,
    server: Arc<rustls::ServerConfig>,
    name: &str,
) -> Result<String, String> {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let acceptor = tokio_rustls::TlsAcceptor::from(server);
    let server_task = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.expect("accept");
        if let Ok(mut tls) = acceptor.accept(tcp).await {
            let _ = tls.write_all(b"hello over tls").await;
            let _ = tls.shutdown().await;
        }
    });
    let connector =
        tokio_rustls::TlsConnector::from(Arc::new(ca.client_config().expect("client config")));
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let server_name = ServerName::try_from(name.to_owned()).expect("server name");
    let result = match connector.connect(server_name, tcp).await {
        Ok(mut tls) => {
            let mut buf = String::new();
            tls.read_to_string(&mut buf)
                .await
                .map_err(|e| e.to_string())?;
            Ok(buf)
        }
        Err(e) => Err(e.to_string()),
    };
    server_task.abort();
    result
}

#[tokio::test]
async fn issued_certificates_serve_tls_for_names_and_ips() {
    let dir = TestDir::new("tls").expect("test dir");
    let ca = TestCa::new(&dir, "webhook").expect("ca");
    let cert = ca
        .issue_server_cert(
            "webhook",
            &["localhost", "booking-webhook.booking.svc", "127.0.0.1"],
        )
        .expect("cert");

    // Files are in the test directory; the key is private to the owner.
    use std::os::unix::fs::PermissionsExt as _;
    assert!(cert.key_path.starts_with(dir.path()));
    let mode = std::fs::metadata(&cert.key_path)
        .expect("key")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let chain = std::fs::read_to_string(&cert.cert_path).expect("chain");
    assert_eq!(chain.matches("BEGIN CERTIFICATE").count(), 2);
    assert!(
        std::fs::read_to_string(&cert.key_path)
            .expect("key")
            .contains("BEGIN PRIVATE KEY")
    );
    assert_eq!(
        std::fs::read_to_string(ca.cert_path()).expect("ca file"),
        ca.cert_pem()
    );
    let bundle = base64::engine::general_purpose::STANDARD
        .decode(ca.ca_bundle())
        .expect("caBundle is base64");
    assert_eq!(bundle, ca.cert_pem().into_bytes());

    let server = Arc::new(cert.server_config().expect("server config"));
    for name in ["localhost", "booking-webhook.booking.svc", "127.0.0.1"] {
        assert_eq!(
            handshake(&ca, server.clone(), name).await.as_deref(),
            Ok("hello over tls"),
            "{name}"
        );
    }
    // A name not in the certificate is refused.
    let err = handshake(&ca, server.clone(), "evil.example.com")
        .await
        .expect_err("name mismatch");
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    // A client trusting another CA refuses the certificate.
    let other = TestCa::new(&dir, "other").expect("other ca");
    let err = handshake(&other, server, "localhost")
        .await
        .expect_err("unknown issuer");
    assert!(err.to_lowercase().contains("issuer"), "{err}");
}
