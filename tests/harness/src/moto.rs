//! The moto AWS emulator (PyPI `moto[server]`, pinned in `tests/requirements.txt`), run as a
//! process from the project's virtualenv, with its reset and request-recorder APIs, AWS SDK
//! configuration pointed at it, and helpers that seed tagged EC2 and RDS instances.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::Method;
use serde::Deserialize;

use crate::aws_query::{QueryRequest, Service};
use crate::error::{Error, Result};
use crate::http_util::{self as h, PlainClient};
use crate::paths::{TestDir, free_port, python_script, venv_python};
use crate::process::{ManagedProcess, ProcessBuilder, Readiness};

/// The fake access key ID the harness gives to clients of moto.
pub const ACCESS_KEY_ID: &str = "testing";
/// The fake secret access key the harness gives to clients of moto.
pub const SECRET_ACCESS_KEY: &str = "testing";
/// The region used in tests.
pub const REGION: &str = "eu-central-1";
/// An AMI ID that moto 5 knows (from its bundled list of default images).
pub const DEFAULT_AMI: &str = "ami-12c6146b";
/// How long [`MotoServer::start`] waits for moto to answer.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
const START_ATTEMPTS: usize = 3;

/// A running moto server on 127.0.0.1, stopped when dropped.
#[derive(Debug)]
pub struct MotoServer {
    process: ManagedProcess,
    port: u16,
    recording: PathBuf,
    client: PlainClient,
}

impl MotoServer {
    /// Starts moto on a free port and waits until it answers (`GET /moto-api/`).
    ///
    /// Requests are recorded into `<test dir>/moto-recording.jsonl` once
    /// [`start_recording`](Self::start_recording) is called.
    ///
    /// # Errors
    /// [`Error::VenvMissing`] without the virtualenv (run `make venv`); [`Error::NotReady`]
    /// or [`Error::ExitedEarly`] with moto's log tail when it does not come up (after three
    /// attempts on different ports).
    pub async fn start(dir: &TestDir) -> Result<Self> {
        let python = venv_python()?;
        let script = python_script("moto_server.py")?;
        let recording = dir.join("moto-recording.jsonl");
        let mut last_err = None;
        for _ in 0..START_ATTEMPTS {
            let port = free_port()?;
            let mut process = ProcessBuilder::new("moto", &python)
                .arg(&script)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .env("MOTO_RECORDER_FILEPATH", &recording)
                .env("MOTO_PORT", port.to_string())
                .spawn(dir)?;
            let url = format!("http://127.0.0.1:{port}/moto-api/");
            match process
                .wait_ready(&Readiness::Http(url), START_TIMEOUT)
                .await
            {
                Ok(()) => {
                    return Ok(MotoServer {
                        process,
                        port,
                        recording,
                        client: h::client(),
                    });
                }
                // Most likely the port was taken between finding and binding it: retry.
                Err(e @ Error::ExitedEarly { .. }) => last_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| Error::Protocol {
            what: "moto".into(),
            message: "did not start".into(),
        }))
    }

    /// The port moto listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The endpoint URL (`http://127.0.0.1:PORT`), for `AWS_ENDPOINT_URL` or an SDK's
    /// `endpoint_url`.
    pub fn endpoint_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The managed process (PID, log paths).
    pub fn process(&self) -> &ManagedProcess {
        &self.process
    }

    /// Environment variables that point an AWS SDK-based process at this moto: see
    /// [`aws_env`].
    pub fn env(&self) -> Vec<(&'static str, String)> {
        aws_env(&self.endpoint_url())
    }

    /// An SDK configuration pointed at this moto: see [`sdk_config`].
    pub fn sdk_config(&self) -> aws_config::SdkConfig {
        sdk_config(&self.endpoint_url())
    }

    /// An EC2 client pointed at this moto.
    pub fn ec2(&self) -> aws_sdk_ec2::Client {
        aws_sdk_ec2::Client::new(&self.sdk_config())
    }

    /// An RDS client pointed at this moto.
    pub fn rds(&self) -> aws_sdk_rds::Client {
        aws_sdk_rds::Client::new(&self.sdk_config())
    }

    /// Forgets every emulated resource (`POST /moto-api/reset`). The recording is kept.
    ///
    /// # Errors
    /// [`Error::Http`] when moto does not accept it.
    pub async fn reset(&self) -> Result<()> {
        self.moto_api("reset").await.map(drop)
    }

    /// Starts recording requests (`POST /moto-api/recorder/start-recording`).
    ///
    /// # Errors
    /// [`Error::Http`] when moto does not accept it.
    pub async fn start_recording(&self) -> Result<()> {
        self.moto_api("recorder/start-recording").await.map(drop)
    }

    /// Stops recording requests (`POST /moto-api/recorder/stop-recording`).
    ///
    /// # Errors
    /// [`Error::Http`] when moto does not accept it.
    pub async fn stop_recording(&self) -> Result<()> {
        self.moto_api("recorder/stop-recording").await.map(drop)
    }

    /// Erases the requests recorded so far (`POST /moto-api/recorder/reset-recording`);
    /// recording goes on if it was on.
    ///
    /// # Errors
    /// [`Error::Http`] when moto does not accept it.
    pub async fn clear_recording(&self) -> Result<()> {
        self.moto_api("recorder/reset-recording").await.map(drop)
    }

    /// The requests recorded so far (`GET /moto-api/recorder/download-recording`), oldest
    /// first.
    ///
    /// # Errors
    /// [`Error::Http`] when moto does not answer; [`Error::Protocol`] when a recorded line
    /// cannot be read.
    pub async fn recorded_requests(&self) -> Result<Vec<RecordedRequest>> {
        if !self.recording.exists() {
            // moto creates the file on the first recorded request; downloading before that
            // makes it fail with a 500.
            return Ok(Vec::new());
        }
        let url = format!(
            "{}/moto-api/recorder/download-recording",
            self.endpoint_url()
        );
        let body = h::send_ok(&self.client, Method::GET, &url, Bytes::new()).await?;
        parse_recording(&body)
    }

    /// How many recorded requests there were for each (service, action).
    ///
    /// # Errors
    /// As [`recorded_requests`](Self::recorded_requests).
    pub async fn action_counts(&self) -> Result<ActionCounts> {
        Ok(ActionCounts::from_requests(
            self.recorded_requests()
                .await?
                .iter()
                .map(RecordedRequest::query),
        ))
    }

    async fn moto_api(&self, path: &str) -> Result<Bytes> {
        let url = format!("{}/moto-api/{path}", self.endpoint_url());
        h::send_ok(&self.client, Method::POST, &url, Bytes::new()).await
    }
}

/// Environment variables for a process that must talk to the emulator at `endpoint_url`:
/// `AWS_ENDPOINT_URL`, fake `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, `AWS_REGION` and
/// `AWS_DEFAULT_REGION` ([`REGION`]) and `AWS_EC2_METADATA_DISABLED=true` (no instance
/// metadata lookups).
pub fn aws_env(endpoint_url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT_URL", endpoint_url.to_owned()),
        ("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID.to_owned()),
        ("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY.to_owned()),
        ("AWS_REGION", REGION.to_owned()),
        ("AWS_DEFAULT_REGION", REGION.to_owned()),
        ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
    ]
}

/// An AWS SDK configuration for `endpoint_url` (moto or the fault proxy) with the fake
/// credentials and [`REGION`], built without reading the environment or profile files.
pub fn sdk_config(endpoint_url: &str) -> aws_config::SdkConfig {
    use aws_sdk_ec2::config::{Credentials, SharedCredentialsProvider};
    aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new(REGION))
        .endpoint_url(endpoint_url)
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            ACCESS_KEY_ID,
            SECRET_ACCESS_KEY,
            None,
            None,
            "booking-harness",
        )))
        .build()
}

// === Recording ===

/// One request as moto's recorder saved it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRequest {
    /// The HTTP method.
    pub method: String,
    /// The full URL as received.
    pub url: String,
    /// The request headers.
    pub headers: BTreeMap<String, String>,
    /// The request body.
    pub body: Vec<u8>,
}

#[derive(Deserialize)]
struct RecordedLine {
    #[serde(default)]
    method: String,
    #[serde(default)]
    url: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    body_encoded: bool,
}

impl RecordedRequest {
    /// A header's value, looked up case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The request read as an AWS Query-protocol call (service, action, parameters).
    pub fn query(&self) -> QueryRequest {
        let query = self.url.split_once('?').map(|(_, q)| q);
        QueryRequest::parse(
            query,
            self.header("content-type"),
            self.header("authorization"),
            &self.body,
        )
    }
}

/// Parses moto's recording format: one JSON object per line, bodies base64-encoded when
/// `body_encoded` is true.
///
/// # Errors
/// [`Error::Protocol`] naming the line that cannot be read.
pub fn parse_recording(text: &[u8]) -> Result<Vec<RecordedRequest>> {
    let text = String::from_utf8_lossy(text);
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |message: String| Error::Protocol {
            what: "moto's recording".into(),
            message: format!("line {}: {message}", n + 1),
        };
        let rec: RecordedLine = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
        let body = match (rec.body, rec.body_encoded) {
            (None, _) => Vec::new(),
            (Some(b), false) => b.into_bytes(),
            (Some(b), true) => base64::engine::general_purpose::STANDARD
                .decode(b.as_bytes())
                .map_err(|e| bad(format!("body is not base64: {e}")))?,
        };
        out.push(RecordedRequest {
            method: rec.method,
            url: rec.url,
            headers: rec.headers,
            body,
        });
    }
    Ok(out)
}

/// Counts of AWS calls by service and action.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActionCounts {
    counts: BTreeMap<(Option<Service>, String), usize>,
}

impl ActionCounts {
    /// Counts the requests that carry an action.
    pub fn from_requests(requests: impl IntoIterator<Item = QueryRequest>) -> Self {
        let mut counts = BTreeMap::new();
        for req in requests {
            if let Some(action) = req.action {
                *counts.entry((req.service, action)).or_insert(0) += 1;
            }
        }
        ActionCounts { counts }
    }

    /// Calls of `action` to `service`.
    pub fn get(&self, service: Service, action: &str) -> usize {
        self.counts
            .get(&(Some(service), action.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    /// Calls of `action`, whatever the service.
    pub fn action(&self, action: &str) -> usize {
        self.counts
            .iter()
            .filter(|((_, a), _)| a == action)
            .map(|(_, n)| n)
            .sum()
    }

    /// All calls counted.
    pub fn total(&self) -> usize {
        self.counts.values().sum()
    }

    /// Every (service, action) with its count, sorted.
    pub fn iter(&self) -> impl Iterator<Item = (Option<Service>, &str, usize)> {
        self.counts.iter().map(|((s, a), n)| (*s, a.as_str(), *n))
    }
}

// === Seeding ===

/// Tags as `(key, value)` pairs.
pub type Tags<'a> = &'a [(&'a str, &'a str)];

/// Launches `count` EC2 instances (t3.micro, [`DEFAULT_AMI`]) tagged with `tags` (may be
/// empty) in one `RunInstances` call — so moto puts them in one reservation — and returns
/// their IDs.
///
/// # Errors
/// [`Error::Aws`] when the call fails; [`Error::Protocol`] when the answer lacks IDs.
pub async fn seed_ec2_instances(
    client: &aws_sdk_ec2::Client,
    count: i32,
    tags: Tags<'_>,
) -> Result<Vec<String>> {
    use aws_sdk_ec2::types::{InstanceType, ResourceType, Tag, TagSpecification};
    let spec = TagSpecification::builder()
        .resource_type(ResourceType::Instance)
        .set_tags(Some(
            tags.iter()
                .map(|(k, v)| Tag::builder().key(*k).value(*v).build())
                .collect(),
        ))
        .build();
    let out = client
        .run_instances()
        .image_id(DEFAULT_AMI)
        .instance_type(InstanceType::T3Micro)
        .min_count(count)
        .max_count(count)
        // EC2 refuses a tag specification without tags.
        .set_tag_specifications((!tags.is_empty()).then(|| vec![spec]))
        .send()
        .await
        .map_err(|e| Error::aws("RunInstances", &e))?;
    let ids: Vec<String> = out
        .instances()
        .iter()
        .filter_map(|i| i.instance_id().map(str::to_owned))
        .collect();
    if ids.len() != usize::try_from(count).unwrap_or(0) {
        return Err(Error::Protocol {
            what: "RunInstances".into(),
            message: format!("asked for {count} instances, got IDs {ids:?}"),
        });
    }
    Ok(ids)
}

/// Creates an RDS DB instance `identifier` (postgres, db.t3.micro) tagged with `tags`, and
/// returns its ARN. moto makes it `available` at once.
///
/// # Errors
/// [`Error::Aws`] when the call fails; [`Error::Protocol`] when the answer lacks the ARN.
pub async fn seed_rds_instance(
    client: &aws_sdk_rds::Client,
    identifier: &str,
    tags: Tags<'_>,
) -> Result<String> {
    use aws_sdk_rds::types::Tag;
    let out = client
        .create_db_instance()
        .db_instance_identifier(identifier)
        .db_instance_class("db.t3.micro")
        .engine("postgres")
        .master_username("booking")
        .master_user_password("booking-test-password")
        .allocated_storage(20)
        .set_tags((!tags.is_empty()).then(|| {
            tags.iter()
                .map(|(k, v)| Tag::builder().key(*k).value(*v).build())
                .collect()
        }))
        .send()
        .await
        .map_err(|e| Error::aws("CreateDBInstance", &e))?;
    out.db_instance()
        .and_then(|db| db.db_instance_arn())
        .map(str::to_owned)
        .ok_or_else(|| Error::Protocol {
            what: "CreateDBInstance".into(),
            message: "answer has no DBInstanceArn".into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_recording_lines() {
        let body = base64::engine::general_purpose::STANDARD
            .encode("Action=StartInstances&Version=2016-11-15&InstanceId.1=i-1");
        let text = format!(
            "{{\"headers\": {{\"Content-Type\": \"application/x-www-form-urlencoded\"}}, \"method\": \"POST\", \"url\": \"http://127.0.0.1:1/\", \"body\": \"{body}\", \"body_encoded\": true}}\n\
             {{\"headers\": {{}}, \"method\": \"GET\", \"url\": \"http://127.0.0.1:1/?Action=DescribeDBInstances&Version=2014-10-31\", \"body\": \"\", \"body_encoded\": false}}\n\n"
        );
        let reqs = parse_recording(text.as_bytes()).expect("valid recording");
        assert_eq!(reqs.len(), 2);
        let counts = ActionCounts::from_requests(reqs.iter().map(RecordedRequest::query));
        assert_eq!(counts.get(Service::Ec2, "StartInstances"), 1);
        assert_eq!(counts.get(Service::Rds, "DescribeDBInstances"), 1);
        assert_eq!(counts.action("StartInstances"), 1);
        assert_eq!(counts.total(), 2);
    }

    #[test]
    fn bad_recording_is_an_error_not_a_panic() {
        let err = parse_recording(b"{\"body\": \"***\", \"body_encoded\": true}\n")
            .expect_err("bad base64");
        assert!(err.to_string().contains("line 1"), "{err}");
        assert!(parse_recording(b"not json").is_err());
    }
}
