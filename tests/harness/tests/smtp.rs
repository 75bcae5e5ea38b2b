//! The SMTP server: AUTH PLAIN/LOGIN, refusal, STARTTLS and implicit TLS, one file per
//! message — exercised with lettre (the product's mail client) and raw SMTP exchanges.

use std::time::Duration;

use booking_harness::TestDir;
use booking_harness::smtp::{AuthMechanism, SmtpOptions, SmtpServer};
use booking_harness::tls::{ServerCert, TestCa};
use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(10);

fn install_provider() {
    // Ignore "already installed" from a parallel test.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
}

fn booking_mail(subject: &str) -> Message {
    Message::builder()
        .from(
            "Booking Operator <booking@example.com>"
                .parse()
                .expect("from"),
        )
        .to("Dev <dev@example.com>".parse().expect("to"))
        .subject(subject)
        .body(String::from(
            "Your booking of ec2.analytics starts at 09:00.\n",
        ))
        .expect("message")
}

fn transport(server: &SmtpServer) -> lettre::transport::smtp::AsyncSmtpTransportBuilder {
    AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(server.host())
        .port(server.port())
        .timeout(Some(WAIT))
}

fn tls_params(ca: &TestCa) -> TlsParameters {
    TlsParameters::builder("localhost".to_owned())
        .add_root_certificate(Certificate::from_pem(ca.cert_pem().as_bytes()).expect("ca pem"))
        .build_rustls()
        .expect("tls parameters")
}

fn server_cert(dir: &TestDir) -> (TestCa, ServerCert) {
    let ca = TestCa::new(dir, "smtp").expect("ca");
    let cert = ca
        .issue_server_cert("smtp", &["localhost", "127.0.0.1"])
        .expect("cert");
    (ca, cert)
}

/// A raw SMTP client: sends a line, reads the (possibly multi-line) reply.
struct Raw {
    stream: BufReader<TcpStream>,
}

impl Raw {
    async fn connect(server: &SmtpServer) -> (Raw, String) {
        let stream = TcpStream::connect((server.host(), server.port()))
            .await
            .expect("connect");
        let mut raw = Raw {
            stream: BufReader::new(stream),
        };
        let greeting = raw.reply().await;
        (raw, greeting)
    }

    async fn reply(&mut self) -> String {
        let mut all = String::new();
        loop {
            let mut line = String::new();
            let n = tokio::time::timeout(WAIT, self.stream.read_line(&mut line))
                .await
                .expect("reply in time")
                .expect("read");
            assert!(n > 0, "connection closed; got so far: {all}");
            all.push_str(&line);
            if line.as_bytes().get(3) != Some(&b'-') {
                return all;
            }
        }
    }

    async fn cmd(&mut self, line: &str) -> String {
        self.stream
            .get_mut()
            .write_all(format!("{line}\r\n").as_bytes())
            .await
            .expect("write");
        self.reply().await
    }
}

#[tokio::test]
async fn auth_plain_and_login_deliver_one_file_per_message() {
    install_provider();
    let dir = TestDir::new("smtp-auth").expect("test dir");
    let server = SmtpServer::start(
        &dir,
        SmtpOptions::default().require_auth("mailer", "s3cret"),
    )
    .await
    .expect("smtp");

    for (mechanism, subject) in [
        (Mechanism::Plain, "via PLAIN"),
        (Mechanism::Login, "via LOGIN"),
    ] {
        transport(&server)
            .credentials(Credentials::new("mailer".into(), "s3cret".into()))
            .authentication(vec![mechanism])
            .build()
            .send(booking_mail(subject))
            .await
            .expect("delivered");
    }
    let messages = server
        .wait_for_messages(2, WAIT)
        .await
        .expect("two messages");
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0].header("Subject").as_deref(), Some("via PLAIN"));
    assert_eq!(messages[1].header("Subject").as_deref(), Some("via LOGIN"));
    for m in &messages {
        assert!(m.authenticated);
        assert_eq!(m.login.as_deref(), Some("mailer"));
        assert!(!m.tls);
        assert_eq!(m.mail_from.as_deref(), Some("booking@example.com"));
        assert_eq!(m.rcpt_tos, vec!["dev@example.com".to_owned()]);
        assert!(m.body().contains("ec2.analytics starts at 09:00"));
        assert_eq!(m.path.extension().and_then(|e| e.to_str()), Some("eml"));
        assert!(m.path.starts_with(server.maildir()));
    }

    // Wrong password: 535, nothing delivered.
    let err = transport(&server)
        .credentials(Credentials::new("mailer".into(), "wrong".into()))
        .build()
        .send(booking_mail("nope"))
        .await
        .expect_err("bad credentials");
    assert!(err.is_permanent(), "{err}");
    assert_eq!(err.status().map(|c| c.to_string()).as_deref(), Some("535"));
    // No AUTH at all: 530 at MAIL FROM.
    let err = transport(&server)
        .build()
        .send(booking_mail("nope"))
        .await
        .expect_err("auth required");
    assert_eq!(err.status().map(|c| c.to_string()).as_deref(), Some("530"));
    assert_eq!(server.messages().expect("messages").len(), 2);
}

#[tokio::test]
async fn login_only_server_rejects_plain() {
    install_provider();
    let dir = TestDir::new("smtp-login").expect("test dir");
    let server = SmtpServer::start(
        &dir,
        SmtpOptions::default()
            .require_auth("mailer", "pw")
            .mechanisms(&[AuthMechanism::Login]),
    )
    .await
    .expect("smtp");

    let (mut raw, greeting) = Raw::connect(&server).await;
    assert!(greeting.starts_with("220"), "{greeting}");
    let ehlo = raw.cmd("EHLO client.test").await;
    assert!(ehlo.contains("AUTH LOGIN\r\n"), "{ehlo}");
    assert!(!ehlo.contains("PLAIN"), "{ehlo}");
    let reply = raw.cmd("AUTH PLAIN AG1haWxlcgBwdw==").await;
    assert!(reply.starts_with("504"), "{reply}");
    raw.cmd("QUIT").await;

    let err = transport(&server)
        .credentials(Credentials::new("mailer".into(), "pw".into()))
        .authentication(vec![Mechanism::Plain])
        .build()
        .send(booking_mail("plain"))
        .await
        .expect_err("PLAIN not offered");
    assert!(
        err.to_string().to_lowercase().contains("mechanism"),
        "{err}"
    );

    transport(&server)
        .credentials(Credentials::new("mailer".into(), "pw".into()))
        .authentication(vec![Mechanism::Login])
        .build()
        .send(booking_mail("login"))
        .await
        .expect("LOGIN works");
    let messages = server.wait_for_messages(1, WAIT).await.expect("message");
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].login.as_deref(), Some("mailer"));
}

#[tokio::test]
async fn refused_auth_is_not_advertised_and_answers_502() {
    install_provider();
    let dir = TestDir::new("smtp-noauth").expect("test dir");
    let server = SmtpServer::start(&dir, SmtpOptions::default().refuse_auth())
        .await
        .expect("smtp");
    let (mut raw, _) = Raw::connect(&server).await;
    let ehlo = raw.cmd("EHLO client.test").await;
    assert!(!ehlo.contains("AUTH"), "{ehlo}");
    let reply = raw.cmd("AUTH PLAIN AGEAYg==").await;
    assert!(reply.starts_with("502"), "{reply}");
    raw.cmd("QUIT").await;

    // A client configured with credentials cannot authenticate here…
    let err = transport(&server)
        .credentials(Credentials::new("a".into(), "b".into()))
        .build()
        .send(booking_mail("with credentials"))
        .await
        .expect_err("no AUTH offered");
    assert!(
        err.to_string().to_lowercase().contains("mechanism"),
        "{err}"
    );
    // …and one without credentials delivers.
    transport(&server)
        .build()
        .send(booking_mail("anonymous"))
        .await
        .expect("delivered");
    let messages = server.wait_for_messages(1, WAIT).await.expect("message");
    assert_eq!(messages.len(), 1);
    assert!(!messages[0].authenticated);
    assert_eq!(messages[0].login, None);
}

#[tokio::test]
async fn starttls_required_before_auth_and_mail() {
    install_provider();
    let dir = TestDir::new("smtp-starttls").expect("test dir");
    let (ca, cert) = server_cert(&dir);
    let server = SmtpServer::start(
        &dir,
        SmtpOptions::default()
            .require_auth("mailer", "pw")
            .require_starttls(&cert),
    )
    .await
    .expect("smtp");

    let (mut raw, _) = Raw::connect(&server).await;
    let ehlo = raw.cmd("EHLO client.test").await;
    assert!(ehlo.contains("STARTTLS"), "{ehlo}");
    assert!(!ehlo.contains("AUTH"), "AUTH only after STARTTLS: {ehlo}");
    let reply = raw.cmd("MAIL FROM:<a@example.com>").await;
    assert!(reply.starts_with("530"), "{reply}");
    raw.cmd("QUIT").await;

    transport(&server)
        .tls(Tls::Required(tls_params(&ca)))
        .credentials(Credentials::new("mailer".into(), "pw".into()))
        .build()
        .send(booking_mail("over STARTTLS"))
        .await
        .expect("delivered over STARTTLS");
    let messages = server.wait_for_messages(1, WAIT).await.expect("message");
    assert!(messages[0].tls);
    assert!(messages[0].authenticated);

    // A client trusting another CA refuses the server's certificate.
    let other = TestCa::new(&dir, "other").expect("ca");
    let err = transport(&server)
        .tls(Tls::Required(tls_params(&other)))
        .credentials(Credentials::new("mailer".into(), "pw".into()))
        .build()
        .send(booking_mail("untrusted"))
        .await
        .expect_err("untrusted certificate");
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );
    assert_eq!(server.messages().expect("messages").len(), 1);
}

#[tokio::test]
async fn implicit_tls_delivers() {
    install_provider();
    let dir = TestDir::new("smtp-smtps").expect("test dir");
    let (ca, cert) = server_cert(&dir);
    let server = SmtpServer::start(
        &dir,
        SmtpOptions::default()
            .require_auth("mailer", "pw")
            .implicit_tls(&cert),
    )
    .await
    .expect("smtp");
    transport(&server)
        .tls(Tls::Wrapper(tls_params(&ca)))
        .credentials(Credentials::new("mailer".into(), "pw".into()))
        .build()
        .send(booking_mail("over SMTPS"))
        .await
        .expect("delivered");
    let messages = server.wait_for_messages(1, WAIT).await.expect("message");
    assert!(messages[0].tls);
    assert_eq!(messages[0].login.as_deref(), Some("mailer"));
    assert_eq!(messages[0].header("subject").as_deref(), Some("over SMTPS"));
}
