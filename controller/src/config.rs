//! Command-line and environment configuration, validated once at start-up.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args as ClapArgs, Parser, ValueEnum};

/// Starts and stops tagged EC2 and RDS instance groups for the time slots users book.
#[derive(Parser, Debug, Clone)]
#[command(name = "booking-controller", version, about)]
pub struct Args {
    /// Kubernetes scope.
    #[clap(flatten)]
    pub kube: KubeArgs,
    /// AWS access.
    #[clap(flatten)]
    pub aws: AwsArgs,
    /// Leader election.
    #[clap(flatten)]
    pub leader: LeaderArgs,
    /// Admin port and logs.
    #[clap(flatten)]
    pub ops: OpsArgs,
    /// Email notifications (SMTP).
    #[clap(flatten)]
    pub smtp: crate::notify::SmtpSettings,
    /// Extra PEM CA certificates trusted for webhook notifications, besides the public web
    /// roots (e.g. an internal chat server).
    #[arg(long, env = "NOTIFICATION_CA_FILE")]
    pub notification_ca_file: Option<std::path::PathBuf>,
    /// Who may claim which AWS group.
    #[clap(flatten)]
    pub tenancy: TenancyArgs,
    /// Dry-run mode: plan everything and report what would be done (Events `WouldStart`,
    /// `WouldStop`, `WouldNotify`, the Resource condition `DryRun`, the metric
    /// `booking_controller_dry_run_actions_total`) without any AWS write and without sending notifications.
    /// AWS is still read; Kubernetes objects are still written (statuses, Events, the
    /// Resources of monitors and the Bookings of schedulers).
    #[arg(long, env = "DRY_RUN")]
    pub dry_run: bool,
}

/// Kubernetes scope.
#[derive(ClapArgs, Debug, Clone)]
pub struct KubeArgs {
    /// Namespace to watch; all namespaces when empty.
    #[arg(long, env = "NAMESPACE", default_value = "")]
    pub namespace: String,
    /// Reconciles run at once per controller (Bookings, notifications, ResourceMonitors,
    /// BookingSchedulers); more wait in the controller's queue. Bounds the Kubernetes API
    /// requests in flight, and the memory they hold, when thousands of objects change together
    /// (e.g. after a relist). 0 means unbounded. Resource reconciles are not bounded, so that
    /// their starts and stops join one batched AWS call per instant; their status patches and
    /// Events are, by the same number.
    #[arg(long, env = "MAX_CONCURRENT_RECONCILES", default_value_t = 32)]
    pub max_concurrent_reconciles: u16,
}

/// How AWS is called.
#[derive(ClapArgs, Debug, Clone)]
pub struct AwsArgs {
    /// Prefix of the AWS tag keys (`<prefix>managed`, `<prefix>application`, `<prefix>locked-by`,
    /// `<prefix>locked-until`). The original's hyphenated keys are recognised as well.
    #[arg(long, env = "TAG_PREFIX", default_value = crate::tags::DEFAULT_PREFIX)]
    pub tag_prefix: String,
    /// Seconds between two full inventory refreshes of each (type, region).
    #[arg(long, env = "INVENTORY_INTERVAL_SECONDS", default_value_t = 30)]
    pub inventory_interval_seconds: u64,
    /// Role to assume for both EC2 and RDS (on top of the standard credentials chain).
    #[arg(long, env = "AWS_ASSUME_ROLE_ARN")]
    pub assume_role_arn: Option<String>,
    /// SDK retry mode.
    #[arg(long, env = "AWS_RETRY_MODE", value_enum, default_value_t = RetryMode::Standard)]
    pub retry_mode: RetryMode,
    /// SDK attempts per call, including the first.
    #[arg(long, env = "AWS_MAX_ATTEMPTS", default_value_t = 5)]
    pub max_attempts: u32,
    /// Seconds one AWS call may take in all, its retries and their backoff included.
    #[arg(
        long = "aws-operation-timeout-seconds",
        env = "AWS_OPERATION_TIMEOUT_SECONDS",
        default_value_t = 60
    )]
    pub operation_timeout_seconds: u64,
    /// Seconds one attempt of an AWS call may take (connect, send, read the answer); a stalled
    /// attempt is abandoned then and retried like a transport error.
    #[arg(
        long = "aws-attempt-timeout-seconds",
        env = "AWS_ATTEMPT_TIMEOUT_SECONDS",
        default_value_t = 15
    )]
    pub attempt_timeout_seconds: u64,
    /// Seconds to establish a connection to an AWS endpoint.
    #[arg(
        long = "aws-connect-timeout-seconds",
        env = "AWS_CONNECT_TIMEOUT_SECONDS",
        default_value_t = 5
    )]
    pub connect_timeout_seconds: u64,
    /// Regions Resources and ResourceMonitors may name, comma-separated (e.g.
    /// `eu-west-1,us-west-2`); any region when unset. A Resource or monitor naming another
    /// region gets a condition naming it and this list, and no AWS call is made to it.
    #[arg(long, env = "ALLOWED_REGIONS", value_delimiter = ',')]
    pub allowed_regions: Vec<String>,
    /// Consecutive complete listings a monitor's group must be missing from (and no booking
    /// may hold its Resource) before a pruning monitor deletes its Resource.
    #[arg(long, env = "PRUNE_AFTER_LISTINGS", default_value_t = 3)]
    pub prune_after_listings: u32,
}

impl AwsArgs {
    /// The SDK's timeouts of every call: operation, attempt, connect and read (the read
    /// timeout is the attempt's).
    pub fn timeouts(&self) -> aws_config::timeout::TimeoutConfig {
        let attempt = Duration::from_secs(self.attempt_timeout_seconds);
        aws_config::timeout::TimeoutConfig::builder()
            .operation_timeout(Duration::from_secs(self.operation_timeout_seconds))
            .operation_attempt_timeout(attempt)
            .connect_timeout(Duration::from_secs(self.connect_timeout_seconds))
            .read_timeout(attempt)
            .build()
    }
}

/// The AWS SDK's retry modes.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryMode {
    /// Exponential backoff with jitter.
    Standard,
    /// Standard plus client-side rate limiting on throttling.
    Adaptive,
}

/// Leader election through a coordination.k8s.io Lease.
#[derive(ClapArgs, Debug, Clone)]
pub struct LeaderArgs {
    /// Elect a leader among replicas (disable only for a single replica).
    #[arg(long, env = "LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Name of the Lease.
    #[arg(long, env = "LEASE_NAME", default_value = "booking-controller")]
    pub lease_name: String,
    /// Namespace of the Lease; defaults to `--namespace`, else `default`.
    #[arg(long, env = "LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// Seconds a Lease stays valid without renewal.
    #[arg(long, env = "LEASE_DURATION_SECONDS", default_value_t = 15)]
    pub lease_duration_seconds: u64,
    /// Seconds between attempts to acquire or renew the Lease (the retry period; less than
    /// the renew deadline).
    #[arg(long, env = "LEASE_RENEW_SECONDS", default_value_t = 2)]
    pub lease_renew_seconds: u64,
    /// Identity of this replica; defaults to `POD_NAME`, else the host name and process ID.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Seconds the leader keeps acting without a successful renewal (less than the lease
    /// duration, more than the retry period); defaults to two thirds of the lease duration.
    #[arg(long, env = "LEASE_RENEW_DEADLINE_SECONDS")]
    pub lease_renew_deadline_seconds: Option<u64>,
}

/// Admin port and logging.
#[derive(ClapArgs, Debug, Clone)]
pub struct OpsArgs {
    /// Address of the plain-HTTP admin port (`/healthz`, `/readyz`, `/metrics`).
    #[arg(long, env = "ADMIN_ADDRESS", default_value = "0.0.0.0:8080")]
    pub admin_address: SocketAddr,
    /// Log as JSON lines (filter with `RUST_LOG`).
    #[arg(long, env = "LOG_JSON", default_value_t = false, action = clap::ArgAction::Set)]
    pub log_json: bool,
}

/// Who may claim which AWS group (besides one owner per group, always enforced).
#[derive(ClapArgs, Debug, Clone)]
pub struct TenancyArgs {
    /// Comma-separated namespaces whose Resources may claim groups whose instances carry no
    /// `<prefix>namespace` tag; empty (the default) allows every namespace. A group whose
    /// instances carry the tag may only be claimed from the namespace it names.
    #[arg(long, env = "UNTAGGED_CLAIM_NAMESPACES", value_delimiter = ',', num_args = 0..)]
    pub untagged_claim_namespaces: Vec<String>,
}

/// A configuration problem, reported once at start-up.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct ConfigError(pub String);

impl Args {
    /// Checks values clap cannot check.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let p = &self.aws.tag_prefix;
        if !crate::tags::is_valid_prefix(p) {
            return Err(ConfigError(format!(
                "--tag-prefix/TAG_PREFIX {p:?} must be 1–100 characters and must not start with \"aws:\" (reserved by AWS)"
            )));
        }
        if self.aws.inventory_interval_seconds == 0 {
            return Err(ConfigError(
                "--inventory-interval-seconds must be at least 1".into(),
            ));
        }
        if self.aws.max_attempts == 0 {
            return Err(ConfigError("--aws-max-attempts must be at least 1".into()));
        }
        let a = &self.aws;
        if a.attempt_timeout_seconds == 0
            || a.connect_timeout_seconds == 0
            || a.connect_timeout_seconds > a.attempt_timeout_seconds
            || a.attempt_timeout_seconds > a.operation_timeout_seconds
        {
            return Err(ConfigError(format!(
                "AWS timeouts must satisfy 1 <= AWS_CONNECT_TIMEOUT_SECONDS ({}) <= AWS_ATTEMPT_TIMEOUT_SECONDS ({}) <= AWS_OPERATION_TIMEOUT_SECONDS ({})",
                a.connect_timeout_seconds, a.attempt_timeout_seconds, a.operation_timeout_seconds
            )));
        }
        if let Some(arn) = &self.aws.assume_role_arn
            && !(arn.starts_with("arn:") && arn.contains(":role/"))
        {
            return Err(ConfigError(format!(
                "AWS_ASSUME_ROLE_ARN {arn:?} is not a role ARN (arn:aws:iam::<account>:role/<name>)"
            )));
        }
        if let Some(bad) = self
            .aws
            .allowed_regions
            .iter()
            .map(|r| r.trim())
            .find(|r| !r.is_empty() && !booking_shared::validation::is_region(r))
        {
            return Err(ConfigError(format!(
                "ALLOWED_REGIONS: {bad:?} is not an AWS region name; list regions like eu-west-1,us-west-2"
            )));
        }
        if self.aws.prune_after_listings == 0 {
            return Err(ConfigError(
                "--prune-after-listings must be at least 1".into(),
            ));
        }
        let l = &self.leader;
        let deadline = self.lease_renew_deadline().as_secs();
        if l.leader_elect && !(1..deadline).contains(&l.lease_renew_seconds) {
            return Err(ConfigError(format!(
                "--lease-renew-seconds ({}) must be at least 1 and less than the renew deadline ({deadline} s, --lease-renew-deadline-seconds)",
                l.lease_renew_seconds
            )));
        }
        if l.leader_elect && deadline >= l.lease_duration_seconds {
            return Err(ConfigError(format!(
                "--lease-renew-deadline-seconds ({deadline}) must be less than --lease-duration-seconds ({}): a leader must stop acting before another replica may take the Lease",
                l.lease_duration_seconds
            )));
        }
        Ok(())
    }

    /// The inventory refresh interval.
    pub fn inventory_interval(&self) -> Duration {
        Duration::from_secs(self.aws.inventory_interval_seconds)
    }

    /// The renew deadline: the configured one, else two thirds of the lease duration.
    pub fn lease_renew_deadline(&self) -> Duration {
        let l = &self.leader;
        Duration::from_secs(
            l.lease_renew_deadline_seconds
                .unwrap_or(l.lease_duration_seconds * 2 / 3),
        )
    }

    /// The namespace of the Lease.
    pub fn lease_namespace(&self) -> String {
        self.leader
            .lease_namespace
            .clone()
            .filter(|s| !s.is_empty())
            .or_else(|| Some(self.kube.namespace.clone()).filter(|s| !s.is_empty()))
            .unwrap_or_else(|| "default".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("booking-controller").chain(args.iter().copied()))
            .unwrap()
    }

    #[test]
    fn defaults_validate_and_bad_values_are_named() {
        let a = parse(&[]);
        a.validate().unwrap();
        assert_eq!(a.aws.tag_prefix, "resource-booking/");
        assert_eq!(a.lease_namespace(), "default");
        let e = parse(&["--tag-prefix", "aws:x/"]).validate().unwrap_err();
        assert!(e.to_string().contains("TAG_PREFIX"));
        let e = parse(&["--lease-renew-seconds", "20"])
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("lease"));
        let e = parse(&["--assume-role-arn", "nope"])
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("AWS_ASSUME_ROLE_ARN"));
        assert_eq!(
            parse(&["--namespace", "team-a"]).lease_namespace(),
            "team-a"
        );
        assert!(a.aws.allowed_regions.is_empty(), "any region by default");
        assert_eq!(a.aws.prune_after_listings, 3);
        let two = parse(&["--allowed-regions", "eu-west-1,us-west-2"]);
        two.validate().unwrap();
        assert_eq!(two.aws.allowed_regions, ["eu-west-1", "us-west-2"]);
        let e = parse(&["--allowed-regions", "eu-west-1,mars"])
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("\"mars\""), "{e}");
        let e = parse(&["--aws-attempt-timeout-seconds", "120"])
            .validate()
            .unwrap_err();
        assert!(
            e.to_string().contains("AWS_ATTEMPT_TIMEOUT_SECONDS (120)"),
            "{e}"
        );
    }

    /// retry period < renew deadline < lease duration, the deadline two thirds of the duration
    /// by default.
    #[test]
    fn lease_timings_are_ordered() {
        // (duration, retry, deadline, accepted, derived deadline)
        let cases: &[(&str, &str, Option<&str>, bool, u64)] = &[
            ("15", "2", None, true, 10),
            ("3", "1", None, true, 2),
            ("30", "1", None, true, 20),
            ("15", "2", Some("14"), true, 14),
            ("15", "2", Some("15"), false, 15),
            ("15", "2", Some("2"), false, 2),
            ("15", "0", None, false, 10),
            ("2", "1", None, false, 1),
        ];
        for (duration, retry, deadline, ok, derived) in cases {
            let mut args = vec![
                "--lease-duration-seconds",
                duration,
                "--lease-renew-seconds",
                retry,
            ];
            if let Some(d) = deadline {
                args.extend(["--lease-renew-deadline-seconds", d]);
            }
            let a = parse(&args);
            assert_eq!(a.validate().is_ok(), *ok, "{args:?}: {:?}", a.validate());
            assert_eq!(a.lease_renew_deadline(), Duration::from_secs(*derived));
            if let Err(e) = a.validate() {
                assert!(e.to_string().contains("--lease-renew"), "{e}");
            }
        }
        let mut off = parse(&["--lease-duration-seconds", "2", "--leader-elect", "false"]);
        off.validate().unwrap();
        off.leader.lease_renew_seconds = 0;
        off.validate().unwrap();
    }

    #[test]
    fn dry_run_is_a_flag_and_off_by_default() {
        assert!(!parse(&[]).dry_run);
        assert!(parse(&["--dry-run"]).dry_run);
    }
}
