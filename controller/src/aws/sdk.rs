//! [`Ec2Api`] and [`RdsApi`] over the AWS SDK for Rust.
//!
//! One `SdkConfig` is loaded in `main` (credentials chain, optional `AWS_ASSUME_ROLE_ARN` for
//! both services, `AWS_ENDPOINT_URL`, retry mode); a client per region is derived from it on
//! first use and kept.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use aws_config::{Region, SdkConfig};
use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};
use futures::FutureExt;
use futures::future::BoxFuture;

use super::{AwsError, AwsResult, Ec2Api, Ec2Filter, Page, RdsApi};
use crate::metrics::Metrics;
use crate::model::Member;

/// Converts an SDK error into the AWS code and message.
fn aws_error<E, R>(e: SdkError<E, R>) -> AwsError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let code = e.code().map(str::to_owned).unwrap_or_else(|| {
        match &e {
            SdkError::DispatchFailure(_) => "DispatchFailure",
            SdkError::TimeoutError(_) => "TimedOut",
            SdkError::ConstructionFailure(_) => "ConstructionFailure",
            SdkError::ResponseError(_) => "ResponseError",
            _ => "Unknown",
        }
        .to_owned()
    });
    let message = e
        .message()
        .map(str::to_owned)
        .unwrap_or_else(|| aws_sdk_ec2::error::DisplayErrorContext(&e).to_string());
    AwsError { code, message }
}

/// Records the call's outcome in the metrics and converts the error.
fn observe<T, E, R>(metrics: &Metrics, op: &str, r: Result<T, SdkError<E, R>>) -> AwsResult<T>
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match r {
        Ok(v) => {
            metrics.aws_call(op, "ok");
            Ok(v)
        }
        Err(e) => {
            let e = aws_error(e);
            metrics.aws_call(op, &e.code);
            Err(e)
        }
    }
}

/// Loads the shared SDK configuration: the standard credentials chain (env, profile, IRSA web
/// identity), the given retry mode (throttling, 5xx and transport errors — timeouts included —
/// retried with exponential backoff and jitter, the whole call each time), `timeouts` on every
/// call, and — when `assume_role_arn` is set — credentials of that role, used by EC2 *and* RDS.
/// `AWS_ENDPOINT_URL` is honoured by aws-config itself.
pub async fn load_config(
    assume_role_arn: Option<&str>,
    adaptive_retries: bool,
    max_attempts: u32,
    timeouts: aws_config::timeout::TimeoutConfig,
) -> SdkConfig {
    let retry = if adaptive_retries {
        aws_config::retry::RetryConfig::adaptive()
    } else {
        aws_config::retry::RetryConfig::standard()
    }
    .with_max_attempts(max_attempts);
    let base = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .retry_config(retry.clone())
        .timeout_config(timeouts.clone())
        .load()
        .await;
    match assume_role_arn {
        None => base,
        Some(arn) => {
            let provider = aws_config::sts::AssumeRoleProvider::builder(arn)
                .session_name("booking-controller")
                .configure(&base)
                .build()
                .await;
            aws_config::defaults(aws_config::BehaviorVersion::latest())
                .retry_config(retry)
                .timeout_config(timeouts)
                .credentials_provider(provider)
                .load()
                .await
        }
    }
}

/// EC2 and RDS clients per region from one shared configuration.
pub struct SdkClients {
    config: SdkConfig,
    metrics: Metrics,
    ec2: Mutex<HashMap<String, aws_sdk_ec2::Client>>,
    rds: Mutex<HashMap<String, aws_sdk_rds::Client>>,
}

impl SdkClients {
    /// Clients derived from `config`; calls are counted in `metrics`.
    pub fn new(config: SdkConfig, metrics: Metrics) -> Self {
        Self {
            config,
            metrics,
            ec2: Mutex::default(),
            rds: Mutex::default(),
        }
    }

    /// The region of the configuration (the default region of Resources), if any.
    pub fn default_region(&self) -> Option<String> {
        self.config.region().map(|r| r.to_string())
    }

    fn ec2(&self, region: &str) -> aws_sdk_ec2::Client {
        let mut map = self.ec2.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(region.to_owned())
            .or_insert_with(|| {
                let conf = aws_sdk_ec2::config::Builder::from(&self.config)
                    .region(Region::new(region.to_owned()))
                    .build();
                aws_sdk_ec2::Client::from_conf(conf)
            })
            .clone()
    }

    fn rds(&self, region: &str) -> aws_sdk_rds::Client {
        let mut map = self.rds.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(region.to_owned())
            .or_insert_with(|| {
                let conf = aws_sdk_rds::config::Builder::from(&self.config)
                    .region(Region::new(region.to_owned()))
                    .build();
                aws_sdk_rds::Client::from_conf(conf)
            })
            .clone()
    }
}

impl Ec2Api for SdkClients {
    fn describe_instances<'a>(
        &'a self,
        region: &'a str,
        filter: &'a Ec2Filter,
        token: Option<String>,
    ) -> BoxFuture<'a, AwsResult<Page>> {
        async move {
            use aws_sdk_ec2::types::Filter;
            let filter = match filter {
                Ec2Filter::TagKeys(keys) => Some(("tag-key", keys)),
                Ec2Filter::TagValues(v) => Some(("tag-value", v)),
                Ec2Filter::InstanceIds(ids) => Some(("instance-id", ids)),
                Ec2Filter::All => None,
            }
            .map(|(name, values)| {
                vec![
                    Filter::builder()
                        .name(name)
                        .set_values(Some(values.clone()))
                        .build(),
                ]
            });
            let out = self
                .ec2(region)
                .describe_instances()
                .set_filters(filter)
                .max_results(1000)
                .set_next_token(token)
                .send()
                .await;
            let out = observe(&self.metrics, "DescribeInstances", out)?;
            let members = out
                .reservations()
                .iter()
                .flat_map(|r| r.instances())
                .filter_map(|i| {
                    Some(Member {
                        id: i.instance_id()?.to_owned(),
                        arn: None,
                        state: i
                            .state()
                            .and_then(|s| s.name())
                            .map(|n| n.as_str().to_owned())
                            .unwrap_or_default(),
                        state_reason: i
                            .state_reason()
                            .and_then(|r| r.message().or(r.code()))
                            .map(str::to_owned),
                        tags: i
                            .tags()
                            .iter()
                            .filter_map(|t| Some((t.key()?.to_owned(), t.value()?.to_owned())))
                            .collect::<BTreeMap<_, _>>(),
                        db_cluster: None,
                        is_cluster: false,
                    })
                })
                .collect();
            Ok((
                members,
                out.next_token()
                    .map(str::to_owned)
                    .filter(|t| !t.is_empty()),
            ))
        }
        .boxed()
    }

    fn start_instances<'a>(
        &'a self,
        region: &'a str,
        ids: &'a [String],
    ) -> BoxFuture<'a, AwsResult<()>> {
        async move {
            let out = self
                .ec2(region)
                .start_instances()
                .set_instance_ids(Some(ids.to_vec()))
                .send()
                .await;
            observe(&self.metrics, "StartInstances", out).map(drop)
        }
        .boxed()
    }

    fn stop_instances<'a>(
        &'a self,
        region: &'a str,
        ids: &'a [String],
        hibernate: bool,
    ) -> BoxFuture<'a, AwsResult<()>> {
        async move {
            let out = self
                .ec2(region)
                .stop_instances()
                .set_instance_ids(Some(ids.to_vec()))
                .set_hibernate(hibernate.then_some(true))
                .send()
                .await;
            observe(&self.metrics, "StopInstances", out).map(drop)
        }
        .boxed()
    }

    fn create_tags<'a>(
        &'a self,
        region: &'a str,
        ids: &'a [String],
        tags: &'a [(String, String)],
    ) -> BoxFuture<'a, AwsResult<()>> {
        async move {
            let tags = tags
                .iter()
                .map(|(k, v)| aws_sdk_ec2::types::Tag::builder().key(k).value(v).build())
                .collect();
            let out = self
                .ec2(region)
                .create_tags()
                .set_resources(Some(ids.to_vec()))
                .set_tags(Some(tags))
                .send()
                .await;
            observe(&self.metrics, "CreateTags", out).map(drop)
        }
        .boxed()
    }

    fn delete_tags<'a>(
        &'a self,
        region: &'a str,
        ids: &'a [String],
        keys: &'a [String],
    ) -> BoxFuture<'a, AwsResult<()>> {
        async move {
            let tags = keys
                .iter()
                .map(|k| aws_sdk_ec2::types::Tag::builder().key(k).build())
                .collect();
            let out = self
                .ec2(region)
                .delete_tags()
                .set_resources(Some(ids.to_vec()))
                .set_tags(Some(tags))
                .send()
                .await;
            observe(&self.metrics, "DeleteTags", out).map(drop)
        }
        .boxed()
    }
}

/// The tags of an RDS `TagList`.
fn rds_tags(list: &[aws_sdk_rds::types::Tag]) -> BTreeMap<String, String> {
    list.iter()
        .filter_map(|t| Some((t.key()?.to_owned(), t.value()?.to_owned())))
        .collect()
}

impl RdsApi for SdkClients {
    fn describe_db_instances<'a>(
        &'a self,
        region: &'a str,
        marker: Option<String>,
    ) -> BoxFuture<'a, AwsResult<Page>> {
        async move {
            let out = self
                .rds(region)
                .describe_db_instances()
                .max_records(100)
                .set_marker(marker)
                .send()
                .await;
            let out = observe(&self.metrics, "DescribeDBInstances", out)?;
            let members = out
                .db_instances()
                .iter()
                .filter_map(|db| {
                    Some(Member {
                        id: db.db_instance_identifier()?.to_owned(),
                        arn: db.db_instance_arn().map(str::to_owned),
                        state: db.db_instance_status().unwrap_or_default().to_owned(),
                        state_reason: None,
                        tags: rds_tags(db.tag_list()),
                        db_cluster: db.db_cluster_identifier().map(str::to_owned),
                        is_cluster: false,
                    })
                })
                .collect();
            Ok((
                members,
                out.marker().map(str::to_owned).filter(|m| !m.is_empty()),
            ))
        }
        .boxed()
    }

    fn describe_db_clusters<'a>(
        &'a self,
        region: &'a str,
        marker: Option<String>,
    ) -> BoxFuture<'a, AwsResult<Page>> {
        async move {
            let out = self
                .rds(region)
                .describe_db_clusters()
                .max_records(100)
                .set_marker(marker)
                .send()
                .await;
            let out = observe(&self.metrics, "DescribeDBClusters", out)?;
            let members = out
                .db_clusters()
                .iter()
                .filter_map(|c| {
                    Some(Member {
                        id: c.db_cluster_identifier()?.to_owned(),
                        arn: c.db_cluster_arn().map(str::to_owned),
                        state: c.status().unwrap_or_default().to_owned(),
                        state_reason: None,
                        tags: rds_tags(c.tag_list()),
                        db_cluster: None,
                        is_cluster: true,
                    })
                })
                .collect();
            Ok((
                members,
                out.marker().map(str::to_owned).filter(|m| !m.is_empty()),
            ))
        }
        .boxed()
    }

    fn start_db_cluster<'a>(
        &'a self,
        region: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, AwsResult<()>> {
        async move {
            let out = self
                .rds(region)
                .start_db_cluster()
                .db_cluster_identifier(id)
                .send()
                .await;
            observe(&self.metrics, "StartDBCluster", out).map(drop)
        }
        .boxed()
    }

    fn stop_db_cluster<'a>(&'a self, region: &'a str, id: &'a str) -> BoxFuture<'a, AwsResult<()>> {
        async move {
            let out = self
                .rds(region)
                .stop_db_cluster()
                .db_cluster_identifier(id)
                .send()
                .await;
            observe(&self.metrics, "StopDBCluster", out).map(drop)
        }
        .boxed()
    }

    fn start_db_instance<'a>(
        &'a self,
        region: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, AwsResult<()>> {
        async move {
            let out = self
                .rds(region)
                .start_db_instance()
                .db_instance_identifier(id)
                .send()
                .await;
            observe(&self.metrics, "StartDBInstance", out).map(drop)
        }
        .boxed()
    }

    fn stop_db_instance<'a>(
        &'a self,
        region: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, AwsResult<()>> {
        async move {
            let out = self
                .rds(region)
                .stop_db_instance()
                .db_instance_identifier(id)
                .send()
                .await;
            observe(&self.metrics, "StopDBInstance", out).map(drop)
        }
        .boxed()
    }

    fn add_tags<'a>(
        &'a self,
        region: &'a str,
        arn: &'a str,
        tags: &'a [(String, String)],
    ) -> BoxFuture<'a, AwsResult<()>> {
        async move {
            let tags = tags
                .iter()
                .map(|(k, v)| aws_sdk_rds::types::Tag::builder().key(k).value(v).build())
                .collect();
            let out = self
                .rds(region)
                .add_tags_to_resource()
                .resource_name(arn)
                .set_tags(Some(tags))
                .send()
                .await;
            observe(&self.metrics, "AddTagsToResource", out).map(drop)
        }
        .boxed()
    }

    fn remove_tags<'a>(
        &'a self,
        region: &'a str,
        arn: &'a str,
        keys: &'a [String],
    ) -> BoxFuture<'a, AwsResult<()>> {
        async move {
            let out = self
                .rds(region)
                .remove_tags_from_resource()
                .resource_name(arn)
                .set_tag_keys(Some(keys.to_vec()))
                .send()
                .await;
            observe(&self.metrics, "RemoveTagsFromResource", out).map(drop)
        }
        .boxed()
    }
}
