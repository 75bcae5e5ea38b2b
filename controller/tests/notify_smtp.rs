//! Email notifications against a real SMTP server (aiosmtpd from the harness): STARTTLS with
//! AUTH, a server offering only AUTH LOGIN, a server refusing AUTH, and the message's headers
//! and body.

use std::time::Duration;

use booking_controller::notify::{
    NotificationSubject, Notifiers, NotifyError, SmtpSecurity, SmtpSettings, message_id,
};
use booking_harness::{
    TestDir,
    smtp::{AuthMechanism, SmtpOptions, SmtpServer},
    tls::TestCa,
};
use booking_shared::api::Notification;
use chrono::{DateTime, Utc};

fn ctx() -> NotificationSubject {
    let t = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
    NotificationSubject {
        namespace: "team-a".into(),
        booking: "nightly-etl".into(),
        booking_uid: "6a0f4a52-1c1b-4d59-9a57-2e1c4f1e7d10".into(),
        resource: "ec2.analytics".into(),
        user: "ann".into(),
        requested_by: Some("system:serviceaccount:ci:deployer".into()),
        end: t("2031-01-10T23:00:00Z"),
        now: t("2031-01-10T22:40:00Z"),
        ..Default::default()
    }
}

fn email(to: &str) -> Notification {
    Notification {
        type_: "email".into(),
        recipient: to.into(),
        lead_minutes: None,
        events: vec![],
        recipient_from: None,
    }
}

struct Setup {
    dir: TestDir,
    ca: TestCa,
}

fn setup(label: &str) -> Setup {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let dir = TestDir::new(label).expect("test dir");
    let ca = TestCa::new(&dir, "smtp").expect("ca");
    Setup { dir, ca }
}

fn settings(server: &SmtpServer, ca: &TestCa, user: Option<(&str, &str)>) -> SmtpSettings {
    SmtpSettings {
        host: Some("localhost".into()),
        port: server.port(),
        username: user.map(|(u, _)| u.to_owned()),
        password: user.map(|(_, p)| p.to_owned()),
        password_file: None,
        sender: Some("Resource booking <booking@example.com>".into()),
        security: SmtpSecurity::Starttls,
        ca_file: Some(ca.cert_path().to_path_buf()),
    }
}

#[tokio::test]
async fn starttls_with_auth_delivers_a_complete_message() {
    let s = setup("notify-starttls");
    let cert =
        s.ca.issue_server_cert("smtp", &["localhost", "127.0.0.1"])
            .unwrap();
    let server = SmtpServer::start(
        &s.dir,
        SmtpOptions::default()
            .require_auth("booker", "s3cret")
            .require_starttls(&cert),
    )
    .await
    .unwrap();
    let notifiers =
        Notifiers::new(&settings(&server, &s.ca, Some(("booker", "s3cret"))), &[]).unwrap();
    let n = email("ann@example.com");
    notifiers.send(0, &n, &ctx()).await.expect("sent");

    let messages = server
        .wait_for_messages(1, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(messages.len(), 1);
    let m = &messages[0];
    assert_eq!(m.header("To").as_deref(), Some("ann@example.com"));
    assert_eq!(
        m.header("From").as_deref(),
        Some("\"Resource booking\" <booking@example.com>")
    );
    assert_eq!(
        m.header("Subject").as_deref(),
        Some("Booking nightly-etl of ec2.analytics ends in 20 min (2031-01-10T23:00:00Z)")
    );
    assert_eq!(
        m.header("Message-ID"),
        Some(message_id(
            &ctx().booking_uid,
            0,
            &n,
            booking_shared::api::NotificationEvent::Reminder,
            "example.com"
        ))
    );
    let content_type = m.header("Content-Type").unwrap_or_default();
    assert!(
        content_type.starts_with("multipart/alternative"),
        "{content_type}"
    );
    let raw = m.text();
    assert!(raw.contains("Content-Type: text/plain"), "{raw}");
    assert!(raw.contains("Content-Type: text/html"), "{raw}");
    assert!(
        raw.contains("kubectl -n team-a patch booking nightly-etl"),
        "{raw}"
    );
    assert!(
        raw.contains("It was created by system:serviceaccount:ci:deployer."),
        "the mail names who created the booking: {raw}"
    );
}

#[tokio::test]
async fn a_server_offering_only_auth_login_after_starttls_is_handled() {
    let s = setup("notify-login");
    let cert =
        s.ca.issue_server_cert("smtp", &["localhost", "127.0.0.1"])
            .unwrap();
    let server = SmtpServer::start(
        &s.dir,
        SmtpOptions::default()
            .require_auth("booker", "s3cret")
            .mechanisms(&[AuthMechanism::Login])
            .require_starttls(&cert),
    )
    .await
    .unwrap();
    let notifiers =
        Notifiers::new(&settings(&server, &s.ca, Some(("booker", "s3cret"))), &[]).unwrap();
    notifiers
        .send(0, &email("ann@example.com"), &ctx())
        .await
        .expect("sent with AUTH LOGIN");
    assert_eq!(
        server
            .wait_for_messages(1, Duration::from_secs(10))
            .await
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn credentials_are_never_dropped_when_the_server_refuses_auth() {
    let s = setup("notify-refuse");
    let cert =
        s.ca.issue_server_cert("smtp", &["localhost", "127.0.0.1"])
            .unwrap();
    let server = SmtpServer::start(
        &s.dir,
        SmtpOptions::default().refuse_auth().require_starttls(&cert),
    )
    .await
    .unwrap();
    let notifiers =
        Notifiers::new(&settings(&server, &s.ca, Some(("booker", "s3cret"))), &[]).unwrap();
    let err = notifiers
        .send(0, &email("ann@example.com"), &ctx())
        .await
        .unwrap_err();
    assert!(matches!(err, NotifyError::Smtp(_)), "{err}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        server.messages().unwrap().is_empty(),
        "nothing was sent without authentication"
    );
}

#[tokio::test]
async fn wrong_password_is_an_error_and_sends_nothing() {
    let s = setup("notify-badpass");
    let cert =
        s.ca.issue_server_cert("smtp", &["localhost", "127.0.0.1"])
            .unwrap();
    let server = SmtpServer::start(
        &s.dir,
        SmtpOptions::default()
            .require_auth("booker", "s3cret")
            .require_starttls(&cert),
    )
    .await
    .unwrap();
    let notifiers =
        Notifiers::new(&settings(&server, &s.ca, Some(("booker", "wrong"))), &[]).unwrap();
    let err = notifiers
        .send(0, &email("ann@example.com"), &ctx())
        .await
        .unwrap_err();
    assert!(matches!(err, NotifyError::Smtp(_)), "{err}");
    assert!(server.messages().unwrap().is_empty());
}

#[tokio::test]
async fn an_unreachable_server_is_a_transient_error() {
    let s = setup("notify-down");
    let port = booking_harness::paths::free_port().unwrap();
    let settings = SmtpSettings {
        host: Some("localhost".into()),
        port,
        sender: Some("booking@example.com".into()),
        ca_file: Some(s.ca.cert_path().to_path_buf()),
        ..SmtpSettings::default()
    };
    let notifiers = Notifiers::new(&settings, &[]).unwrap();
    let err = notifiers
        .send(0, &email("ann@example.com"), &ctx())
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err}");
}

/// The password from a mounted file (`SMTP_PASSWORD_FILE`, e.g. a Secret volume whose file ends
/// with a newline) authenticates against the real server; a wrong one in the file is refused.
#[tokio::test]
async fn the_password_from_a_mounted_file_authenticates() {
    let s = setup("notify-password-file");
    let cert =
        s.ca.issue_server_cert("smtp", &["localhost", "127.0.0.1"])
            .unwrap();
    let server = SmtpServer::start(
        &s.dir,
        SmtpOptions::default()
            .require_auth("booker", "s3cret")
            .require_starttls(&cert),
    )
    .await
    .unwrap();
    let file = s.dir.join("smtp-password");
    std::fs::write(&file, "s3cret\n").unwrap();
    let from_file = SmtpSettings {
        password: None,
        password_file: Some(file.clone()),
        ..settings(&server, &s.ca, Some(("booker", "unused")))
    };
    assert!(!format!("{from_file:?}").contains("s3cret"));
    let notifiers = Notifiers::new(&from_file, &[]).unwrap();
    notifiers
        .send(0, &email("ann@example.com"), &ctx())
        .await
        .expect("sent with the file's password");
    server
        .wait_for_messages(1, Duration::from_secs(10))
        .await
        .unwrap();

    std::fs::write(&file, "wrong\n").unwrap();
    let notifiers = Notifiers::new(&from_file, &[]).unwrap();
    let err = notifiers
        .send(1, &email("ann@example.com"), &ctx())
        .await
        .unwrap_err();
    assert!(matches!(err, NotifyError::Smtp(_)), "{err}");
    assert!(!err.to_string().contains("wrong"), "{err}");
}
