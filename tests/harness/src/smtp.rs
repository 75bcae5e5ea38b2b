//! A real SMTP server for tests: `tests/python/smtp_server.py` (aiosmtpd, pinned) run from the
//! project's virtualenv, and the messages it received.
//!
//! Each received message is one RFC 5322 file (`NNNNNN.eml`, headers and body as received)
//! in the server's mail directory, with a `NNNNNN.json` beside it holding the envelope and
//! session facts (sender, recipients, authenticated login, whether TLS was used).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::paths::{TestDir, free_port, python_script, venv_python};
use crate::process::{ManagedProcess, ProcessBuilder, Readiness};
use crate::tls::ServerCert;

/// How long [`SmtpServer::start`] waits for the server to listen.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
const START_ATTEMPTS: usize = 3;

/// A SASL mechanism the server can offer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthMechanism {
    /// `AUTH PLAIN` (RFC 4616).
    Plain,
    /// `AUTH LOGIN`.
    Login,
}

impl AuthMechanism {
    fn name(self) -> &'static str {
        match self {
            AuthMechanism::Plain => "PLAIN",
            AuthMechanism::Login => "LOGIN",
        }
    }
}

/// Whether and how the server authenticates clients.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SmtpAuth {
    /// AUTH offered (PLAIN and LOGIN) but not required; every login fails, mail is accepted
    /// without one.
    Optional,
    /// AUTH required before `MAIL FROM` with these credentials and mechanisms. When STARTTLS
    /// is offered, AUTH is accepted only after it, as on real submission servers.
    Required {
        /// The accepted user name.
        username: String,
        /// The accepted password.
        password: String,
        /// The mechanisms offered.
        mechanisms: Vec<AuthMechanism>,
    },
    /// AUTH not offered at all: no `AUTH` in the EHLO answer, the command answers 502.
    NotOffered,
}

/// Whether and how the server uses TLS.
#[derive(Clone, Debug)]
pub enum SmtpTls {
    /// Plain text only.
    None,
    /// STARTTLS offered with this certificate; `required` refuses mail before it.
    StartTls {
        /// The serving certificate.
        cert: ServerCert,
        /// Refuse commands other than EHLO, STARTTLS and QUIT before TLS.
        required: bool,
    },
    /// TLS from the first byte (SMTPS) with this certificate.
    Implicit {
        /// The serving certificate.
        cert: ServerCert,
    },
}

/// How to run the SMTP server. `SmtpOptions::default()` is plain text, AUTH optional.
#[derive(Clone, Debug)]
pub struct SmtpOptions {
    /// Authentication.
    pub auth: SmtpAuth,
    /// TLS.
    pub tls: SmtpTls,
    /// A fixed port (e.g. to bring a server back where a client expects it); a free one when
    /// unset.
    pub port: Option<u16>,
}

impl Default for SmtpOptions {
    fn default() -> Self {
        SmtpOptions {
            auth: SmtpAuth::Optional,
            tls: SmtpTls::None,
            port: None,
        }
    }
}

impl SmtpOptions {
    /// Listens on `port` instead of a free one.
    #[must_use]
    pub fn on_port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Requires AUTH (PLAIN or LOGIN) with these credentials.
    #[must_use]
    pub fn require_auth(mut self, username: &str, password: &str) -> Self {
        self.auth = SmtpAuth::Required {
            username: username.into(),
            password: password.into(),
            mechanisms: vec![AuthMechanism::Plain, AuthMechanism::Login],
        };
        self
    }

    /// Restricts the mechanisms offered when AUTH is required (e.g. LOGIN only).
    #[must_use]
    pub fn mechanisms(mut self, only: &[AuthMechanism]) -> Self {
        if let SmtpAuth::Required { mechanisms, .. } = &mut self.auth {
            *mechanisms = only.to_vec();
        }
        self
    }

    /// Does not offer AUTH at all.
    #[must_use]
    pub fn refuse_auth(mut self) -> Self {
        self.auth = SmtpAuth::NotOffered;
        self
    }

    /// Offers STARTTLS with `cert`.
    #[must_use]
    pub fn starttls(mut self, cert: &ServerCert) -> Self {
        self.tls = SmtpTls::StartTls {
            cert: cert.clone(),
            required: false,
        };
        self
    }

    /// Offers STARTTLS with `cert` and refuses mail before it.
    #[must_use]
    pub fn require_starttls(mut self, cert: &ServerCert) -> Self {
        self.tls = SmtpTls::StartTls {
            cert: cert.clone(),
            required: true,
        };
        self
    }

    /// Speaks TLS from the first byte with `cert`.
    #[must_use]
    pub fn implicit_tls(mut self, cert: &ServerCert) -> Self {
        self.tls = SmtpTls::Implicit { cert: cert.clone() };
        self
    }

    fn args(&self, port: u16, maildir: &Path) -> Vec<String> {
        let mut args = vec![
            "--host".to_owned(),
            "127.0.0.1".to_owned(),
            "--port".to_owned(),
            port.to_string(),
            "--maildir".to_owned(),
            maildir.display().to_string(),
        ];
        match &self.auth {
            SmtpAuth::Optional => {}
            SmtpAuth::NotOffered => args.push("--no-auth".into()),
            SmtpAuth::Required {
                username,
                password,
                mechanisms,
            } => {
                let names: Vec<&str> = mechanisms.iter().map(|m| m.name()).collect();
                args.extend([
                    "--auth-user".into(),
                    username.clone(),
                    "--auth-password".into(),
                    password.clone(),
                    "--auth-mechanisms".into(),
                    names.join(","),
                ]);
            }
        }
        let mut cert_args = |cert: &ServerCert| {
            args.extend([
                "--tls-cert".into(),
                cert.cert_path.display().to_string(),
                "--tls-key".into(),
                cert.key_path.display().to_string(),
            ]);
        };
        match &self.tls {
            SmtpTls::None => {}
            SmtpTls::StartTls { cert, required } => {
                cert_args(cert);
                if *required {
                    args.push("--require-starttls".into());
                }
            }
            SmtpTls::Implicit { cert } => {
                cert_args(cert);
                args.push("--implicit-tls".into());
            }
        }
        args
    }
}

/// A running SMTP server on 127.0.0.1, stopped when dropped.
#[derive(Debug)]
pub struct SmtpServer {
    process: ManagedProcess,
    port: u16,
    maildir: PathBuf,
}

impl SmtpServer {
    /// Starts the server on a free port with `options`; received mail goes to
    /// `<test dir>/mail/` (or `mail-N/` for further servers in the same test).
    ///
    /// # Errors
    /// [`Error::VenvMissing`] without the virtualenv (run `make venv`); [`Error::NotReady`]
    /// or [`Error::ExitedEarly`] with the server's log tail.
    pub async fn start(dir: &TestDir, options: SmtpOptions) -> Result<Self> {
        let python = venv_python()?;
        let script = python_script("smtp_server.py")?;
        let maildir = (0..)
            .map(|n| {
                if n == 0 {
                    dir.join("mail")
                } else {
                    dir.join(format!("mail-{n}"))
                }
            })
            .find(|p| !p.exists())
            .unwrap_or_else(|| dir.join("mail"));
        std::fs::create_dir_all(&maildir)
            .map_err(|e| Error::io(format!("creating {}", maildir.display()), e))?;
        let mut last_err = None;
        for _ in 0..START_ATTEMPTS {
            let port = match options.port {
                Some(p) => p,
                None => free_port()?,
            };
            let mut process = ProcessBuilder::new("smtp", &python)
                .arg(&script)
                .args(options.args(port, &maildir))
                .spawn(dir)?;
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            match process
                .wait_ready(&Readiness::Tcp(addr), START_TIMEOUT)
                .await
            {
                Ok(()) => {
                    return Ok(SmtpServer {
                        process,
                        port,
                        maildir,
                    });
                }
                Err(e @ Error::ExitedEarly { .. }) => last_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| Error::Protocol {
            what: "smtp".into(),
            message: "did not start".into(),
        }))
    }

    /// The host to connect to (`127.0.0.1`).
    pub fn host(&self) -> &'static str {
        "127.0.0.1"
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory receiving the messages.
    pub fn maildir(&self) -> &Path {
        &self.maildir
    }

    /// The managed process (PID, log paths).
    pub fn process(&self) -> &ManagedProcess {
        &self.process
    }

    /// Every message received so far, in order of arrival.
    ///
    /// # Errors
    /// [`Error::Io`] or [`Error::Protocol`] when the mail directory cannot be read.
    pub fn messages(&self) -> Result<Vec<ReceivedMessage>> {
        read_maildir(&self.maildir)
    }

    /// Waits until at least `count` messages have arrived (polling every 50 ms) and returns
    /// them all.
    ///
    /// # Errors
    /// [`Error::Timeout`] after `timeout`, or as [`messages`](Self::messages).
    pub async fn wait_for_messages(
        &self,
        count: usize,
        timeout: Duration,
    ) -> Result<Vec<ReceivedMessage>> {
        let start = Instant::now();
        loop {
            let messages = self.messages()?;
            if messages.len() >= count {
                return Ok(messages);
            }
            if start.elapsed() >= timeout {
                return Err(Error::Timeout {
                    what: format!(
                        "{count} message(s) in {} ({} arrived)",
                        self.maildir.display(),
                        messages.len()
                    ),
                    waited: start.elapsed(),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// One message the SMTP server received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceivedMessage {
    /// The `.eml` file.
    pub path: PathBuf,
    /// The message as received (RFC 5322: headers, blank line, body).
    pub raw: Vec<u8>,
    /// The envelope sender (`MAIL FROM`).
    pub mail_from: Option<String>,
    /// The envelope recipients (`RCPT TO`).
    pub rcpt_tos: Vec<String>,
    /// Whether the session had authenticated.
    pub authenticated: bool,
    /// The login used, when authenticated.
    pub login: Option<String>,
    /// Whether the session used TLS (STARTTLS or implicit).
    pub tls: bool,
}

#[derive(Deserialize)]
struct Meta {
    mail_from: Option<String>,
    #[serde(default)]
    rcpt_tos: Vec<String>,
    #[serde(default)]
    authenticated: bool,
    login: Option<String>,
    #[serde(default)]
    tls: bool,
}

impl ReceivedMessage {
    /// The message as (lossy) UTF-8 text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.raw).into_owned()
    }

    /// The header section, unfolded: `(name, value)` in order. Values are raw (MIME encoded
    /// words such as `=?utf-8?b?...?=` are not decoded).
    pub fn headers(&self) -> Vec<(String, String)> {
        let text = self.text();
        let head = split_head_body(&text).0;
        let mut headers: Vec<(String, String)> = Vec::new();
        for line in head.lines() {
            if line.starts_with([' ', '\t']) {
                if let Some((_, value)) = headers.last_mut() {
                    value.push(' ');
                    value.push_str(line.trim());
                }
            } else if let Some((name, value)) = line.split_once(':') {
                headers.push((name.trim().to_owned(), value.trim().to_owned()));
            }
        }
        headers
    }

    /// The first header called `name` (case-insensitive), unfolded.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers()
            .into_iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// The body (everything after the blank line), as received.
    pub fn body(&self) -> String {
        split_head_body(&self.text()).1.to_owned()
    }
}

fn split_head_body(text: &str) -> (&str, &str) {
    let crlf = text.find("\r\n\r\n").map(|i| (i, 4));
    let lf = text.find("\n\n").map(|i| (i, 2));
    let split = match (crlf, lf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    };
    match split {
        Some((i, n)) => (&text[..i], &text[i + n..]),
        None => (text, ""),
    }
}

/// Reads the messages of a mail directory written by `smtp_server.py`, oldest first. A
/// message counts once its `.json` file exists (it is renamed into place last).
///
/// # Errors
/// [`Error::Io`] or [`Error::Protocol`] (an unreadable `.json`).
pub fn read_maildir(dir: &Path) -> Result<Vec<ReceivedMessage>> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| Error::io(format!("reading {}", dir.display()), e))?;
    let mut metas: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    metas.sort();
    metas
        .into_iter()
        .map(|meta_path| {
            let meta_text = std::fs::read(&meta_path)
                .map_err(|e| Error::io(format!("reading {}", meta_path.display()), e))?;
            let meta: Meta = serde_json::from_slice(&meta_text).map_err(|e| Error::Protocol {
                what: meta_path.display().to_string(),
                message: e.to_string(),
            })?;
            let path = meta_path.with_extension("eml");
            let raw = std::fs::read(&path)
                .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
            Ok(ReceivedMessage {
                path,
                raw,
                mail_from: meta.mail_from,
                rcpt_tos: meta.rcpt_tos,
                authenticated: meta.authenticated,
                login: meta.login,
                tls: meta.tls,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(raw: &str) -> ReceivedMessage {
        ReceivedMessage {
            path: PathBuf::from("x.eml"),
            raw: raw.as_bytes().to_vec(),
            mail_from: None,
            rcpt_tos: vec![],
            authenticated: false,
            login: None,
            tls: false,
        }
    }

    #[test]
    fn unfolds_headers_and_splits_body() {
        let m = message(
            "Subject: Booking\r\n  starts soon\r\nTo: a@example.com\r\n\r\nHello\r\n\r\nBye\r\n",
        );
        assert_eq!(m.header("subject").as_deref(), Some("Booking starts soon"));
        assert_eq!(m.header("TO").as_deref(), Some("a@example.com"));
        assert_eq!(m.header("From"), None);
        assert_eq!(m.body(), "Hello\r\n\r\nBye\r\n");
    }

    #[test]
    fn tolerates_messages_without_body_or_headers() {
        let m = message("no colon here");
        assert!(m.headers().is_empty());
        assert_eq!(m.body(), "");
        assert_eq!(message("").body(), "");
    }
}
