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
    /// Milliseconds over which EC2 starts and stops of all groups are gathered into one call.
    #[arg(long, env = "BATCH_WINDOW_MS", default_value_t = 50)]
    pub batch_window_ms: u64,
    /// Role to assume for both EC2 and RDS (on top of the standard credentials chain).
    #[arg(long, env = "AWS_ASSUME_ROLE_ARN")]
    pub assume_role_arn: Option<String>,
    /// SDK retry mode.
    #[arg(long, env = "AWS_RETRY_MODE", value_enum, default_value_t = RetryMode::Standard)]
    pub retry_mode: RetryMode,
    /// SDK attempts per call, including the first.
    #[arg(long, env = "AWS_MAX_ATTEMPTS", default_value_t = 5)]
    pub max_attempts: u32,
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
    /// Seconds between renewals (less than the lease duration).
    #[arg(long, env = "LEASE_RENEW_SECONDS", default_value_t = 5)]
    pub lease_renew_seconds: u64,
    /// Identity of this replica; defaults to `POD_NAME`, else the host name and process ID.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
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
        if p.is_empty() || p.len() > 100 || p.starts_with("aws:") {
            return Err(ConfigError(format!(
                "--tag-prefix/TAG_PREFIX {p:?} must be 1–100 characters and must not start with \"aws:\" (reserved by AWS)"
            )));
        }
        if self.aws.inventory_interval_seconds == 0 {
            return Err(ConfigError(
                "--inventory-interval-seconds must be at least 1".into(),
            ));
        }
        if self.aws.batch_window_ms > 1000 {
            return Err(ConfigError(
                "--batch-window-ms must be at most 1000: starts must reach AWS within a second of a booking's start".into(),
            ));
        }
        if self.aws.max_attempts == 0 {
            return Err(ConfigError("--aws-max-attempts must be at least 1".into()));
        }
        if let Some(arn) = &self.aws.assume_role_arn
            && !(arn.starts_with("arn:") && arn.contains(":role/"))
        {
            return Err(ConfigError(format!(
                "AWS_ASSUME_ROLE_ARN {arn:?} is not a role ARN (arn:aws:iam::<account>:role/<name>)"
            )));
        }
        let l = &self.leader;
        if l.leader_elect
            && (l.lease_renew_seconds == 0 || l.lease_renew_seconds >= l.lease_duration_seconds)
        {
            return Err(ConfigError(format!(
                "--lease-renew-seconds ({}) must be at least 1 and less than --lease-duration-seconds ({})",
                l.lease_renew_seconds, l.lease_duration_seconds
            )));
        }
        Ok(())
    }

    /// The inventory refresh interval.
    pub fn inventory_interval(&self) -> Duration {
        Duration::from_secs(self.aws.inventory_interval_seconds)
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
    }
}
