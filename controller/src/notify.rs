//! Notifications sent shortly before a booking ends: email (SMTP via lettre) and webhook (an
//! HTTPS POST of a small JSON document that Slack-compatible incoming webhooks accept).
//!
//! Rendering is pure ([`render`], [`message_id`]); [`Notifiers`] performs the sending. Which
//! notification is due when is decided by `booking_shared::scheduling`; recording what was sent
//! (at most once) is the booking reconciler's job. Every email carries a Message-ID derived from
//! the booking's uid and the notification, so that the rare duplicate after a crash between
//! sending and recording is recognised as the same message by mail clients.

use std::{path::PathBuf, sync::Arc, time::Duration as StdDuration};

mod message;

pub use message::{
    NotificationSubject, Rendered, event_key, message_id, notification_key, redacted_url, render,
    shown_recipient, upgraded_key,
};

use booking_shared::{api::Notification, time::format_rfc3339};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use lettre::{
    AsyncSmtpTransport, AsyncTransport, Message as Email, Tokio1Executor,
    message::{Mailbox, MultiPart},
    transport::smtp::{
        PoolConfig,
        authentication::{Credentials, Mechanism},
        client::{Certificate, Tls, TlsParameters},
    },
};

/// How the SMTP connection is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SmtpSecurity {
    /// Plain connection upgraded with STARTTLS, which is required (port 587).
    Starttls,
    /// TLS from the first byte (implicit TLS, port 465).
    Tls,
    /// No encryption (local relays only). Credentials are refused in this mode.
    None,
}

/// Most bytes of a webhook's answer that are read (the start of an error's explanation); the
/// rest is never read, so an endless or huge answer costs neither memory nor time.
pub const MAX_WEBHOOK_ANSWER: usize = 4096;

/// SMTP settings, read once at start-up (`SMTP_HOST`, `SMTP_PORT`, … as the original documents).
/// Its `Debug` never shows the password.
#[derive(Clone, clap::Args)]
pub struct SmtpSettings {
    /// SMTP server host name; email notifications are disabled when unset.
    #[arg(long = "smtp-host", env = "SMTP_HOST")]
    pub host: Option<String>,
    /// SMTP server port.
    #[arg(long = "smtp-port", env = "SMTP_PORT", default_value_t = 587)]
    pub port: u16,
    /// SMTP user name; with it, the controller always authenticates and never sends without.
    #[arg(long = "smtp-username", env = "SMTP_USERNAME")]
    pub username: Option<String>,
    /// SMTP password.
    #[arg(long = "smtp-password", env = "SMTP_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// File holding the SMTP password (e.g. a mounted Secret's key), read once at start-up;
    /// one trailing newline is ignored. Instead of `SMTP_PASSWORD`.
    #[arg(long = "smtp-password-file", env = "SMTP_PASSWORD_FILE")]
    pub password_file: Option<PathBuf>,
    /// Sender address of notification emails, e.g. `Resource booking <booking@example.com>`.
    #[arg(long = "smtp-sender", env = "SMTP_SENDER")]
    pub sender: Option<String>,
    /// Transport security.
    #[arg(
        long = "smtp-security",
        env = "SMTP_SECURITY",
        value_enum,
        default_value = "starttls"
    )]
    pub security: SmtpSecurity,
    /// Extra PEM CA certificate trusted for the SMTP server (e.g. an internal relay).
    #[arg(long = "smtp-ca-file", env = "SMTP_CA_FILE")]
    pub ca_file: Option<PathBuf>,
}

impl Default for SmtpSettings {
    /// Email notifications disabled (no host); the flags' defaults otherwise.
    fn default() -> Self {
        Self {
            host: None,
            port: 587,
            username: None,
            password: None,
            password_file: None,
            sender: None,
            security: SmtpSecurity::Starttls,
            ca_file: None,
        }
    }
}

impl std::fmt::Debug for SmtpSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmtpSettings")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("password_file", &self.password_file)
            .field("sender", &self.sender)
            .field("security", &self.security)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

impl SmtpSettings {
    /// The password: `SMTP_PASSWORD`, or the content of `SMTP_PASSWORD_FILE` without its
    /// trailing newline.
    fn resolved_password(&self) -> Result<Option<String>, NotifyConfigError> {
        match (&self.password, &self.password_file) {
            (Some(_), Some(_)) => Err(invalid(
                "SMTP_PASSWORD_FILE",
                "is set together with SMTP_PASSWORD; set only one of them".into(),
            )),
            (Some(p), None) => Ok(Some(p.clone())),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    invalid(
                        "SMTP_PASSWORD_FILE",
                        format!("cannot read {}: {e}", path.display()),
                    )
                })?;
                let text = text.strip_suffix('\n').unwrap_or(&text);
                let text = text.strip_suffix('\r').unwrap_or(text);
                Ok(Some(text.to_owned()))
            }
            (None, None) => Ok(None),
        }
    }
}

/// A notification that could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    /// The notification's type is not one this controller can send.
    #[error("notification type {0:?} is not supported; use email or webhook")]
    UnknownType(String),
    /// Email notifications are requested but no SMTP server is configured.
    #[error("email notifications need SMTP_HOST and SMTP_SENDER to be configured")]
    EmailNotConfigured,
    /// The recipient is not usable for its type.
    #[error("recipient {recipient:?} is not valid for a {kind} notification: {reason}")]
    BadRecipient {
        /// The notification type.
        kind: &'static str,
        /// The recipient as written.
        recipient: String,
        /// What is wrong.
        reason: String,
    },
    /// The SMTP exchange failed.
    #[error("SMTP: {0}")]
    Smtp(#[from] lettre::transport::smtp::Error),
    /// The email could not be built.
    #[error("email: {0}")]
    Email(#[from] lettre::error::Error),
    /// The webhook request failed.
    #[error("webhook: {0}")]
    Webhook(String),
    /// The recipient could not be read from its Secret (missing, not readable, no such key);
    /// it may appear later.
    #[error("recipient: {0}")]
    Recipient(String),
    /// The controller runs in dry-run mode: nothing is sent.
    #[error("not sent: the controller runs in dry-run mode (DRY_RUN)")]
    DryRun,
}

impl NotifyError {
    /// Whether trying again later may succeed (server or network trouble) rather than never
    /// (bad configuration or input).
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Smtp(e) => !e.is_permanent(),
            // Sent once dry-run mode is off.
            Self::Webhook(_) | Self::Recipient(_) | Self::DryRun => true,
            Self::UnknownType(_)
            | Self::EmailNotConfigured
            | Self::BadRecipient { .. }
            | Self::Email(_) => false,
        }
    }
}

struct EmailSender {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    domain: String,
}

type HttpsClient = Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Full<Bytes>,
>;

/// Sends notifications; built once at start-up and shared by the reconcilers.
#[derive(Clone)]
pub struct Notifiers {
    email: Option<Arc<EmailSender>>,
    http: HttpsClient,
    timeout: StdDuration,
    dry_run: bool,
}

/// Configuration that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum NotifyConfigError {
    /// A setting is invalid.
    #[error("{setting}: {reason}")]
    Invalid {
        /// The flag / environment variable.
        setting: &'static str,
        /// What is wrong and how to fix it.
        reason: String,
    },
}

fn invalid(setting: &'static str, reason: String) -> NotifyConfigError {
    NotifyConfigError::Invalid { setting, reason }
}

impl EmailSender {
    /// The SMTP sender of `smtp`; `None` without `SMTP_HOST` (email notifications then fail as
    /// not configured).
    fn new(smtp: &SmtpSettings) -> Result<Option<Self>, NotifyConfigError> {
        let (host, sender) = match (&smtp.host, &smtp.sender) {
            (None, _) => return Ok(None),
            (Some(_), None) => {
                return Err(invalid(
                    "SMTP_SENDER",
                    "is required with SMTP_HOST; set it to the From address, e.g. booking@example.com".into(),
                ));
            }
            (Some(host), Some(sender)) => (host, sender),
        };
        let from: Mailbox = sender.parse().map_err(|e| {
            invalid(
                "SMTP_SENDER",
                format!("{sender:?} is not an email address: {e}"),
            )
        })?;
        let domain = from.email.domain().to_owned();
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host)
            .port(smtp.port)
            .timeout(Some(StdDuration::from_secs(20)))
            .pool_config(
                PoolConfig::new()
                    .max_size(4)
                    .idle_timeout(StdDuration::from_secs(60)),
            );
        builder = match smtp.security {
            SmtpSecurity::Starttls => builder.tls(Tls::Required(smtp_tls(smtp, host)?)),
            SmtpSecurity::Tls => builder.tls(Tls::Wrapper(smtp_tls(smtp, host)?)),
            SmtpSecurity::None => builder.tls(Tls::None),
        };
        match (&smtp.username, &smtp.resolved_password()?) {
            (Some(_), _) if smtp.security == SmtpSecurity::None => {
                return Err(invalid(
                    "SMTP_SECURITY",
                    "credentials are never sent over an unencrypted connection; use starttls or tls".into(),
                ));
            }
            (Some(user), Some(password)) => {
                builder = builder
                    .credentials(Credentials::new(user.clone(), password.clone()))
                    .authentication(vec![Mechanism::Plain, Mechanism::Login]);
            }
            (Some(_), None) => {
                return Err(invalid(
                    "SMTP_PASSWORD",
                    "(or SMTP_PASSWORD_FILE) is required with SMTP_USERNAME".into(),
                ));
            }
            (None, _) => {}
        }
        Ok(Some(Self {
            transport: builder.build(),
            from,
            domain,
        }))
    }
}

/// The TLS parameters of the SMTP connection to `host`, trusting `SMTP_CA_FILE` besides the
/// system's roots.
fn smtp_tls(smtp: &SmtpSettings, host: &str) -> Result<TlsParameters, NotifyConfigError> {
    let mut params = TlsParameters::builder(host.to_owned());
    if let Some(path) = &smtp.ca_file {
        let pem = std::fs::read(path).map_err(|e| {
            invalid(
                "SMTP_CA_FILE",
                format!("cannot read {}: {e}", path.display()),
            )
        })?;
        let cert = Certificate::from_pem(&pem).map_err(|e| {
            invalid(
                "SMTP_CA_FILE",
                format!("{} is not a PEM certificate: {e}", path.display()),
            )
        })?;
        params = params.add_root_certificate(cert);
    }
    params
        .build_rustls()
        .map_err(|e| invalid("SMTP_HOST", format!("TLS setup failed: {e}")))
}

/// The HTTPS client of webhook notifications: the public web roots and `roots` (extra PEM CA
/// certificates), HTTPS only.
fn https_client(roots_pem: &[Vec<u8>]) -> Result<HttpsClient, NotifyConfigError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for pem in roots_pem {
        for cert in rustls_pemfile_certs(pem) {
            roots
                .add(cert)
                .map_err(|e| invalid("webhook CA", format!("not a usable CA certificate: {e}")))?;
        }
    }
    let tls = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .build();
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

impl Notifiers {
    /// Builds the senders. `webhook_roots` are extra PEM CA certificates trusted for webhook
    /// notifications, besides the public web roots. Must run inside a Tokio runtime (the SMTP
    /// connection pool starts a task).
    pub fn new(smtp: &SmtpSettings, webhook_roots: &[Vec<u8>]) -> Result<Self, NotifyConfigError> {
        Ok(Self {
            email: EmailSender::new(smtp)?.map(Arc::new),
            http: https_client(webhook_roots)?,
            timeout: StdDuration::from_secs(15),
            dry_run: false,
        })
    }

    /// These senders, refusing every send when `dry_run` (see [`NotifyError::DryRun`]).
    pub fn dry_run(self, dry_run: bool) -> Self {
        Self { dry_run, ..self }
    }

    /// Whether every send is refused (dry-run mode).
    pub fn is_dry_run(&self) -> bool {
        self.dry_run
    }

    /// Sends one notification of a booking.
    pub async fn send(
        &self,
        index: usize,
        notification: &Notification,
        ctx: &NotificationSubject,
    ) -> Result<(), NotifyError> {
        if self.dry_run {
            return Err(NotifyError::DryRun);
        }
        let rendered = render(ctx);
        match notification.type_.as_str() {
            "email" => self.send_email(index, notification, ctx, &rendered).await,
            "webhook" => self.send_webhook(notification, ctx, &rendered).await,
            other => Err(NotifyError::UnknownType(other.to_owned())),
        }
    }

    async fn send_email(
        &self,
        index: usize,
        notification: &Notification,
        ctx: &NotificationSubject,
        rendered: &Rendered,
    ) -> Result<(), NotifyError> {
        let sender = self.email.as_ref().ok_or(NotifyError::EmailNotConfigured)?;
        let to: Mailbox =
            notification
                .recipient
                .parse()
                .map_err(
                    |e: lettre::address::AddressError| NotifyError::BadRecipient {
                        kind: "email",
                        recipient: notification.recipient.clone(),
                        reason: e.to_string(),
                    },
                )?;
        let email = Email::builder()
            .from(sender.from.clone())
            .to(to)
            .subject(&rendered.subject)
            .message_id(Some(message_id(
                &ctx.booking_uid,
                index,
                notification,
                ctx.event,
                &sender.domain,
            )))
            .multipart(MultiPart::alternative_plain_html(
                rendered.text.clone(),
                rendered.html.clone(),
            ))?;
        match sender.transport.send(email.clone()).await {
            Ok(_) => Ok(()),
            // A pooled connection the server dropped fails once; a fresh one is tried at once.
            Err(e) if !e.is_permanent() => {
                tracing::debug!(error = %e, "SMTP send failed, retrying on a fresh connection");
                sender
                    .transport
                    .send(email)
                    .await
                    .map(|_| ())
                    .map_err(Into::into)
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn send_webhook(
        &self,
        notification: &Notification,
        ctx: &NotificationSubject,
        rendered: &Rendered,
    ) -> Result<(), NotifyError> {
        let uri: hyper::Uri =
            notification
                .recipient
                .parse()
                .map_err(
                    |e: hyper::http::uri::InvalidUri| NotifyError::BadRecipient {
                        kind: "webhook",
                        recipient: redacted_url(&notification.recipient),
                        reason: e.to_string(),
                    },
                )?;
        if uri.scheme_str() != Some("https") {
            return Err(NotifyError::BadRecipient {
                kind: "webhook",
                recipient: redacted_url(&notification.recipient),
                reason: "only https URLs are allowed".into(),
            });
        }
        let mut body = serde_json::json!({
            "text": rendered.chat,
            "event": ctx.event.as_str(),
            "booking": {
                "namespace": ctx.namespace,
                "name": ctx.booking,
                "resource": ctx.resource,
                "user": ctx.user,
                "end_at": format_rfc3339(ctx.end),
            },
        });
        if let Some(detail) = &ctx.detail {
            body["detail"] = serde_json::Value::String(detail.clone());
        }
        let request = hyper::Request::post(uri)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(
                hyper::header::USER_AGENT,
                concat!("booking-controller/", env!("CARGO_PKG_VERSION")),
            )
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| NotifyError::Webhook(e.to_string()))?;
        // The whole exchange, the answer's body included, runs under the timeout; at most
        // MAX_WEBHOOK_ANSWER bytes of an error's body are read, a success's body not at all.
        let exchange = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|e| NotifyError::Webhook(e.to_string()))?;
            let status = response.status();
            if status.is_success() {
                return Ok(None);
            }
            let text = match Limited::new(response.into_body(), MAX_WEBHOOK_ANSWER)
                .collect()
                .await
            {
                Ok(b) => String::from_utf8_lossy(&b.to_bytes())
                    .chars()
                    .take(200)
                    .collect::<String>(),
                Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                    format!("(an answer longer than {MAX_WEBHOOK_ANSWER} bytes, not read)")
                }
                Err(e) => format!("(the answer broke off: {e})"),
            };
            Ok(Some(format!("HTTP {status}: {text}")))
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Err(_) => Err(NotifyError::Webhook(format!(
                "no complete answer within {:?}",
                self.timeout
            ))),
            Ok(Err(e)) => Err(e),
            Ok(Ok(None)) => Ok(()),
            Ok(Ok(Some(failure))) => Err(NotifyError::Webhook(failure)),
        }
    }
}

fn rustls_pemfile_certs(pem: &[u8]) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem)
        .filter_map(Result::ok)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};

    fn ctx() -> NotificationSubject {
        NotificationSubject {
            namespace: "team-a".into(),
            booking: "nightly-etl".into(),
            booking_uid: "0b6f8c1e-uid".into(),
            resource: "ec2.analytics".into(),
            user: "ann".into(),
            requested_by: Some("system:serviceaccount:ci:deployer".into()),
            end: DateTime::parse_from_rfc3339("2031-01-10T23:00:00Z")
                .unwrap()
                .with_timezone(&Utc),
            now: DateTime::parse_from_rfc3339("2031-01-10T22:47:30Z")
                .unwrap()
                .with_timezone(&Utc),
            ..Default::default()
        }
    }

    #[test]
    fn one_minute_left_reads_as_one_minute() {
        let mut c = ctx();
        c.now = c.end - chrono::Duration::seconds(40);
        let r = render(&c);
        assert!(r.text.contains("in 1 minute."), "{}", r.text);
        assert!(r.html.contains("in 1 minute."), "{}", r.html);
    }

    #[test]
    fn renders_resource_booking_end_and_extension() {
        let r = render(&ctx());
        assert_eq!(
            r.subject,
            "Booking nightly-etl of ec2.analytics ends in 13 min (2031-01-10T23:00:00Z)"
        );
        for body in [&r.text, &r.html] {
            assert!(
                body.contains("nightly-etl") && body.contains("ec2.analytics"),
                "{body}"
            );
            assert!(body.contains("2031-01-10T23:00:00Z"), "{body}");
            assert!(!body.contains("Z UTC"), "{body}");
            assert!(
                body.contains("13 minutes"),
                "the real time remaining: {body}"
            );
            assert!(
                body.contains("created by") && body.contains("system:serviceaccount:ci:deployer"),
                "the creator is named: {body}"
            );
        }
        assert_eq!(
            r.extend_command,
            r#"kubectl -n team-a patch booking nightly-etl --type merge -p '{"spec":{"end_at":"2031-01-11T00:00:00Z"}}'"#
        );
        assert!(r.text.contains(&r.extend_command));
        assert!(r.html.contains("&quot;end_at&quot;"), "escaped in HTML");
    }

    #[test]
    fn message_ids_are_deterministic_per_booking_and_notification() {
        let n = Notification {
            type_: "email".into(),
            recipient: "ann@example.com".into(),
            lead_minutes: None,
            events: vec![],
            recipient_from: None,
        };
        let m = Notification {
            recipient: "bob@example.com".into(),
            ..n.clone()
        };
        use booking_shared::api::NotificationEvent::{Reminder, Started, Stopped};
        let a = message_id("uid-1", 0, &n, Reminder, "example.com");
        assert_eq!(a, message_id("uid-1", 0, &n, Reminder, "example.com"));
        assert_ne!(a, message_id("uid-2", 0, &n, Reminder, "example.com"));
        assert_ne!(a, message_id("uid-1", 1, &n, Reminder, "example.com"));
        assert_ne!(a, message_id("uid-1", 0, &m, Reminder, "example.com"));
        let started = message_id("uid-1", 0, &n, Started, "example.com");
        assert_ne!(a, started, "each event is a message of its own");
        assert_ne!(started, message_id("uid-1", 0, &n, Stopped, "example.com"));
        assert!(
            a.starts_with("<booking-") && a.ends_with("@example.com>"),
            "{a}"
        );
    }

    #[test]
    fn no_settings_type_prints_the_smtp_password() {
        let args = <crate::config::Args as clap::Parser>::try_parse_from([
            "booking-controller",
            "--smtp-host",
            "smtp.example.com",
            "--smtp-username",
            "booking",
            "--smtp-password",
            "hunter2-very-secret",
        ])
        .unwrap();
        for shown in [
            format!("{args:?}"),
            format!("{:?}", args.smtp),
            format!("{:#?}", args),
        ] {
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(shown.contains("<redacted>"), "{shown}");
            assert!(shown.contains("smtp.example.com"), "{shown}");
        }
    }

    #[test]
    fn the_smtp_password_can_come_from_a_mounted_file() {
        let dir = std::env::temp_dir().join(format!("smtp-password-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("password");
        std::fs::write(&path, "from-the-file\n").unwrap();
        let mut smtp = SmtpSettings {
            password_file: Some(path.clone()),
            ..SmtpSettings::default()
        };
        assert_eq!(
            smtp.resolved_password().unwrap().as_deref(),
            Some("from-the-file")
        );
        assert!(!format!("{smtp:?}").contains("from-the-file"));
        smtp.password = Some("also".into());
        let e = smtp.resolved_password().unwrap_err().to_string();
        assert!(e.starts_with("SMTP_PASSWORD_FILE"), "{e}");
        smtp.password = None;
        smtp.password_file = Some(dir.join("missing"));
        let e = smtp.resolved_password().unwrap_err().to_string();
        assert!(e.contains("cannot read") && e.contains("missing"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn configuration_errors_name_the_setting() {
        let base = SmtpSettings {
            host: Some("smtp.example.com".into()),
            ..SmtpSettings::default()
        };
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let err = Notifiers::new(&base, &[]).err().unwrap().to_string();
        assert!(err.starts_with("SMTP_SENDER"), "{err}");
        let bad_sender = SmtpSettings {
            sender: Some("not an address".into()),
            ..base.clone()
        };
        assert!(
            Notifiers::new(&bad_sender, &[])
                .err()
                .unwrap()
                .to_string()
                .contains("not an email address")
        );
        let plain_with_password = SmtpSettings {
            sender: Some("booking@example.com".into()),
            username: Some("u".into()),
            password: Some("p".into()),
            security: SmtpSecurity::None,
            ..base.clone()
        };
        assert!(
            Notifiers::new(&plain_with_password, &[])
                .err()
                .unwrap()
                .to_string()
                .starts_with("SMTP_SECURITY")
        );
        let no_password = SmtpSettings {
            sender: Some("booking@example.com".into()),
            username: Some("u".into()),
            ..base.clone()
        };
        assert!(
            Notifiers::new(&no_password, &[])
                .err()
                .unwrap()
                .to_string()
                .starts_with("SMTP_PASSWORD")
        );
        let ok = SmtpSettings {
            sender: Some("Booking <booking@example.com>".into()),
            ..base
        };
        assert!(Notifiers::new(&ok, &[]).is_ok());
    }

    #[tokio::test]
    async fn unknown_types_and_bad_recipients_are_errors_not_panics() {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        let smtp = SmtpSettings::default();
        let n = Notifiers::new(&smtp, &[]).unwrap();
        let pigeon = Notification {
            type_: "pigeon".into(),
            recipient: "loft-3".into(),
            lead_minutes: None,
            events: vec![],
            recipient_from: None,
        };
        let err = n.send(0, &pigeon, &ctx()).await.unwrap_err();
        assert!(matches!(err, NotifyError::UnknownType(ref t) if t == "pigeon"));
        assert!(!err.is_transient());
        let email = Notification {
            type_: "email".into(),
            recipient: "ann@example.com".into(),
            lead_minutes: None,
            events: vec![],
            recipient_from: None,
        };
        assert!(matches!(
            n.send(0, &email, &ctx()).await.unwrap_err(),
            NotifyError::EmailNotConfigured
        ));
        let http = Notification {
            type_: "webhook".into(),
            recipient: "http://hooks.example.com/x".into(),
            lead_minutes: None,
            events: vec![],
            recipient_from: None,
        };
        assert!(matches!(
            n.send(0, &http, &ctx()).await.unwrap_err(),
            NotifyError::BadRecipient { .. }
        ));
    }
}
