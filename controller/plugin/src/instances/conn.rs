//! The AWS side of the plugin: the configuration as the AWS CLI finds it (environment,
//! profiles, SSO, the instance's role; `AWS_ENDPOINT_URL`), checked credentials, the regions
//! to look in, and the controller's SDK clients over them.

use std::time::Duration;

use aws_credential_types::provider::ProvideCredentials;
use aws_credential_types::provider::error::CredentialsError;
use booking_controller::aws::AwsError;
use booking_controller::aws::sdk::{SdkClients, load_config};
use booking_controller::metrics::Metrics;
use booking_controller::tags::{TagKeys, is_valid_prefix};
use booking_shared::validation::is_region;

use crate::cli::AwsArgs;
use crate::error::{Error, Result};

/// Longest wait for one AWS call, all retries included.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest wait for one attempt of a call (and for each read of its answer).
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(20);
/// Longest wait for a connection to AWS.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait for the credentials chain (an SSO token refresh or the instance metadata
/// service included).
pub const CREDENTIALS_TIMEOUT: Duration = Duration::from_secs(30);
/// Attempts of one call (the SDK's standard retries of throttling and transport errors).
const MAX_ATTEMPTS: u32 = 3;

/// How to give the plugin credentials, for the messages that lack them.
const CREDENTIALS_HELP: &str = "provide them as for the AWS CLI: AWS_ACCESS_KEY_ID and \
    AWS_SECRET_ACCESS_KEY, a profile (AWS_PROFILE, ~/.aws/credentials or ~/.aws/config, `aws sso \
    login --profile NAME` for SSO), or the role of the instance or pod the plugin runs on";

/// The clients and where to look.
pub struct Aws {
    /// The controller's SDK clients (one per region, every call with the timeouts above).
    pub clients: SdkClients,
    /// `--region`s, else the configuration's region; each once, in the order given.
    pub regions: Vec<String>,
    /// The configuration's region (what a Resource without `spec.region` most likely means).
    pub default_region: Option<String>,
    /// The operator's tag keys.
    pub keys: TagKeys,
}

impl Aws {
    /// Loads the configuration and checks that it has credentials and a region.
    ///
    /// # Errors
    /// [`Error::Usage`] for a bad `--region` or `--tag-prefix`; [`Error::Aws`] when no
    /// credentials or no region can be found, each saying how to provide them.
    pub async fn connect(args: &AwsArgs) -> Result<Self> {
        let keys = tag_keys(&args.tag_prefix)?;
        for r in &args.regions {
            if !is_region(r) {
                return Err(Error::Usage(format!(
                    "--region {r:?} is not an AWS region name; write it like eu-central-1 or us-east-1"
                )));
            }
        }
        let timeouts = aws_config::timeout::TimeoutConfig::builder()
            .operation_timeout(OPERATION_TIMEOUT)
            .operation_attempt_timeout(ATTEMPT_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(ATTEMPT_TIMEOUT)
            .build();
        let config = load_config(None, false, MAX_ATTEMPTS, timeouts).await;
        let default_region = config.region().map(|r| r.to_string());
        let regions = resolve_regions(&args.regions, default_region.as_deref())?;
        check_credentials(&config).await?;
        Ok(Self {
            clients: SdkClients::new(config, Metrics::new()),
            regions,
            default_region,
            keys,
        })
    }
}

/// The tag keys of `prefix`, checked as the controller checks its own.
pub fn tag_keys(prefix: &str) -> Result<TagKeys> {
    if !is_valid_prefix(prefix) {
        return Err(Error::Usage(format!(
            "--tag-prefix {prefix:?} must be 1–100 characters and must not start with \"aws:\" \
             (reserved by AWS); give the controller's --tag-prefix, e.g. resource-booking/"
        )));
    }
    Ok(TagKeys::new(prefix))
}

/// `given` without repeats, else the configuration's region.
pub fn resolve_regions(given: &[String], configured: Option<&str>) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for r in given {
        if !out.contains(r) {
            out.push(r.clone());
        }
    }
    if out.is_empty() {
        match configured.filter(|r| !r.is_empty()) {
            Some(r) => out.push(r.to_owned()),
            None => {
                return Err(Error::Aws(
                    "no AWS region: give --region REGION (repeat it for several), or set \
                     AWS_REGION or the profile's region in ~/.aws/config"
                        .into(),
                ));
            }
        }
    }
    Ok(out)
}

/// Resolves the credentials once, so that their absence is one clear error rather than the
/// same SDK error from every call.
async fn check_credentials(config: &aws_config::SdkConfig) -> Result<()> {
    let Some(provider) = config.credentials_provider() else {
        return Err(Error::Aws(format!(
            "no AWS credentials found; {CREDENTIALS_HELP}"
        )));
    };
    match tokio::time::timeout(CREDENTIALS_TIMEOUT, provider.provide_credentials()).await {
        Ok(Ok(_)) => Ok(()),
        // No source of the chain had any.
        Ok(Err(CredentialsError::CredentialsNotLoaded(_))) => Err(Error::Aws(format!(
            "no AWS credentials found; {CREDENTIALS_HELP}"
        ))),
        // A source that has some failed (an expired SSO session, a bad profile): its reason
        // helps.
        Ok(Err(e)) => Err(Error::Aws(format!(
            "cannot load the AWS credentials: {}; {CREDENTIALS_HELP}",
            causes(&e)
        ))),
        Err(_) => Err(Error::Aws(format!(
            "the AWS credentials were not found within {}s; {CREDENTIALS_HELP}",
            CREDENTIALS_TIMEOUT.as_secs()
        ))),
    }
}

/// `e` and its sources, as sentences joined by `: ` (the SDK's own rendering adds its
/// debug dump).
fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = cause.source();
    }
    out
}

/// An AWS call that failed, as an error: see [`failure`].
pub fn call_failed(op: &str, region: &str, e: &AwsError) -> Error {
    Error::Aws(failure(op, region, e))
}

/// The words of an AWS call that failed: which call, in which region, and AWS's code and
/// message (with how to fix credentials AWS refused or permissions it lacks).
pub fn failure(op: &str, region: &str, e: &AwsError) -> String {
    let auth = matches!(
        e.code.as_str(),
        "AuthFailure"
            | "UnrecognizedClientException"
            | "InvalidClientTokenId"
            | "ExpiredToken"
            | "ExpiredTokenException"
            | "SignatureDoesNotMatch"
            | "InvalidSignatureException"
    );
    let hint = if auth {
        format!("; AWS refused the credentials: {CREDENTIALS_HELP}")
    } else if matches!(
        e.code.as_str(),
        "UnauthorizedOperation" | "AccessDenied" | "AccessDeniedException"
    ) {
        "; the credentials lack this permission: grant it in IAM, or use other credentials".into()
    } else if matches!(e.code.as_str(), "DispatchFailure" | "TimedOut") {
        "; check the network, the region and AWS_ENDPOINT_URL if set".into()
    } else {
        String::new()
    };
    format!(
        "{op} in {region} failed: {}: {}{hint}",
        e.code,
        without_debug_dump(&e.message)
    )
}

/// A transport error's message without the debug rendering the SDK appends to its sentences
/// (` (DispatchFailure(DispatchFailure { … }))`).
fn without_debug_dump(message: &str) -> &str {
    [
        "DispatchFailure",
        "TimeoutError",
        "ConstructionFailure",
        "ResponseError",
    ]
    .iter()
    .find_map(|v| message.find(&format!(" ({v}(")))
    .map_or(message, |at| &message[..at])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_the_flags_once_each_else_the_configured_one() {
        let given = vec![
            "eu-west-1".to_owned(),
            "us-east-1".into(),
            "eu-west-1".into(),
        ];
        assert_eq!(
            resolve_regions(&given, Some("eu-central-1")).unwrap(),
            vec!["eu-west-1", "us-east-1"]
        );
        assert_eq!(
            resolve_regions(&[], Some("eu-central-1")).unwrap(),
            vec!["eu-central-1"]
        );
        let e = resolve_regions(&[], None).unwrap_err().to_string();
        assert!(e.contains("--region") && e.contains("AWS_REGION"), "{e}");
        assert!(resolve_regions(&[], Some("")).is_err());
    }

    #[test]
    fn a_reserved_or_empty_prefix_is_refused_naming_the_flag() {
        for bad in ["", "aws:booking/"] {
            let e = tag_keys(bad).unwrap_err().to_string();
            assert!(e.starts_with("--tag-prefix"), "{e}");
        }
        assert!(tag_keys("acme/").is_ok());
    }

    #[test]
    fn causes_are_joined_without_repeats() {
        let io = std::io::Error::other("request forbidden");
        let e = aws_credential_types::provider::error::CredentialsError::provider_error(io);
        assert_eq!(
            causes(&e),
            "an error occurred while loading credentials: request forbidden"
        );
    }

    #[test]
    fn refused_credentials_say_how_to_provide_others() {
        let e = call_failed(
            "DescribeInstances",
            "eu-west-1",
            &AwsError::new(
                "AuthFailure",
                "AWS was not able to validate the credentials",
            ),
        )
        .to_string();
        assert!(
            e.starts_with("DescribeInstances in eu-west-1 failed: AuthFailure"),
            "{e}"
        );
        assert!(e.contains("AWS_ACCESS_KEY_ID"), "{e}");
        let e = call_failed(
            "CreateTags",
            "eu-west-1",
            &AwsError::new("Throttling", "slow"),
        )
        .to_string();
        assert!(!e.contains("credentials"), "{e}");
        let e = call_failed(
            "DescribeInstances",
            "eu-west-1",
            &AwsError::new(
                "DispatchFailure",
                "dispatch failure: io error: Connection refused (os error 111) \
                 (DispatchFailure(DispatchFailure { source: ConnectorError { kind: Io } }))",
            ),
        )
        .to_string();
        assert_eq!(
            e,
            "DescribeInstances in eu-west-1 failed: DispatchFailure: dispatch failure: io error: \
             Connection refused (os error 111); check the network, the region and \
             AWS_ENDPOINT_URL if set"
        );
    }
}
