//! The AWS layer: small traits over the EC2 and RDS calls the controller makes ([`Ec2Api`],
//! [`RdsApi`]), their SDK implementations ([`sdk`]), the shared inventories ([`inventory`]) and
//! the executor that batches starts and stops ([`executor`]).
//!
//! Pagination, batching, retries of single members and the hibernation fallback live above the
//! traits, so they are the same for the SDK and for fakes.

pub mod dry_run;
pub mod executor;
pub mod fence;
pub mod inventory;
pub mod sdk;
#[cfg(test)]
mod test_fakes;

use futures::future::BoxFuture;

use crate::model::Member;

/// An AWS call that failed: the AWS error code (`IncorrectInstanceState`, `Throttling`, …, or
/// a transport error class) and message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct AwsError {
    /// AWS's error code, or `DispatchFailure`/`TimedOut`/`Unknown` when there is none.
    pub code: String,
    /// AWS's message.
    pub message: String,
}

impl AwsError {
    /// An error from a code and message.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
        }
    }

    /// Whether the call may succeed later without any change on our side: transitional states
    /// (`IncorrectInstanceState`, `InvalidDBInstanceState`, `InvalidDBClusterStateFault`) and
    /// throttling. (The SDK's own retry
    /// policy already retried throttling; these are retried again by the plan's backoff.)
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.code.as_str(),
            "IncorrectInstanceState"
                | "InvalidDBInstanceState"
                | "InvalidDBInstanceStateFault"
                | "InvalidDBClusterStateFault"
                | "InvalidDBClusterState"
                | "Throttling"
                | "ThrottlingException"
                | "RequestLimitExceeded"
                | "DispatchFailure"
                | "TimedOut"
        )
    }

    /// Whether the error is about a member of the call rather than the call itself: an unknown
    /// or malformed ID, a member in a state the action does not allow, or one that cannot
    /// hibernate. Only then is a failed batch split, to find the member and let the others go
    /// through. Throttling, server and transport errors (the SDK has already retried them with
    /// backoff) fail the whole batch, which is retried whole by the plan's backoff: splitting it
    /// would multiply the calls exactly when AWS asks for fewer.
    pub fn names_a_member(&self) -> bool {
        self.code.starts_with("InvalidInstanceID")
            || matches!(
                self.code.as_str(),
                "IncorrectInstanceState"
                    | "IncorrectState"
                    | "UnsupportedInstanceType"
                    | "InsufficientInstanceCapacity"
            )
            || self.is_hibernation_unsupported()
    }

    /// Whether AWS refused hibernation for the instance, so a plain stop should be tried.
    pub fn is_hibernation_unsupported(&self) -> bool {
        matches!(
            self.code.as_str(),
            "UnsupportedHibernationConfiguration" | "UnsupportedOperation"
        )
    }
}

/// Result of an AWS call.
pub type AwsResult<T> = Result<T, AwsError>;

/// Which EC2 instances a DescribeInstances call asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ec2Filter {
    /// Instances carrying any of these tag keys (the managed key in both forms): one filter
    /// `tag-key` whose values are ORed by AWS.
    TagKeys(Vec<String>),
    /// Instances carrying a tag with any of these values (a targeted refresh of some groups;
    /// the key form is checked locally so one call covers both key forms). At most
    /// [`MAX_FILTER_VALUES`] values.
    TagValues(Vec<String>),
    /// These instances (one `instance-id` filter: IDs that do not exist are left out of the
    /// answer rather than failing the call, as `InstanceIds` would). At most
    /// [`MAX_FILTER_VALUES`] IDs.
    InstanceIds(Vec<String>),
    /// Every instance of the region, tagged or not (the kubectl plugin's listing).
    All,
}

/// Most filter values EC2 accepts in one DescribeInstances call ("The maximum number of filter
/// values specified on a single call is 200", `FilterLimitExceeded`).
pub const MAX_FILTER_VALUES: usize = 200;

/// One page of a listing and the token of the next page.
pub type Page = (Vec<Member>, Option<String>);

/// Every page of a listing: `page(token)` until AWS gives no next token.
pub async fn paginate<'a, F>(mut page: F) -> AwsResult<Vec<Member>>
where
    F: FnMut(Option<String>) -> BoxFuture<'a, AwsResult<Page>>,
{
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let (members, next) = page(token.take()).await?;
        out.extend(members);
        match next {
            Some(n) => token = Some(n),
            None => return Ok(out),
        }
    }
}

/// The EC2 calls the controller makes. `region` is an AWS region name.
pub trait Ec2Api: Send + Sync {
    /// One page of DescribeInstances (MaxResults 1000) with `filter`, after `token`.
    fn describe_instances<'a>(
        &'a self,
        region: &'a str,
        filter: &'a Ec2Filter,
        token: Option<String>,
    ) -> BoxFuture<'a, AwsResult<Page>>;
    /// StartInstances for up to 1000 IDs.
    fn start_instances<'a>(
        &'a self,
        region: &'a str,
        ids: &'a [String],
    ) -> BoxFuture<'a, AwsResult<()>>;
    /// StopInstances for up to 1000 IDs, with hibernation when `hibernate`.
    fn stop_instances<'a>(
        &'a self,
        region: &'a str,
        ids: &'a [String],
        hibernate: bool,
    ) -> BoxFuture<'a, AwsResult<()>>;
    /// CreateTags on up to 1000 IDs.
    fn create_tags<'a>(
        &'a self,
        region: &'a str,
        ids: &'a [String],
        tags: &'a [(String, String)],
    ) -> BoxFuture<'a, AwsResult<()>>;
    /// DeleteTags (keys only, any value) on up to 1000 IDs.
    fn delete_tags<'a>(
        &'a self,
        region: &'a str,
        ids: &'a [String],
        keys: &'a [String],
    ) -> BoxFuture<'a, AwsResult<()>>;
}

/// The RDS calls the controller makes. RDS has no batch start/stop: one call per DB instance
/// or DB cluster.
pub trait RdsApi: Send + Sync {
    /// One page of DescribeDBInstances (MaxRecords 100) after `marker`; tags from `TagList`,
    /// the cluster of each instance from `DBClusterIdentifier`.
    fn describe_db_instances<'a>(
        &'a self,
        region: &'a str,
        marker: Option<String>,
    ) -> BoxFuture<'a, AwsResult<Page>>;
    /// One page of DescribeDBClusters (MaxRecords 100) after `marker`; tags from `TagList`
    /// (DescribeDBClusters has no tag filter either), members with `is_cluster`.
    fn describe_db_clusters<'a>(
        &'a self,
        region: &'a str,
        marker: Option<String>,
    ) -> BoxFuture<'a, AwsResult<Page>>;
    /// StartDBCluster.
    fn start_db_cluster<'a>(&'a self, region: &'a str, id: &'a str)
    -> BoxFuture<'a, AwsResult<()>>;
    /// StopDBCluster.
    fn stop_db_cluster<'a>(&'a self, region: &'a str, id: &'a str) -> BoxFuture<'a, AwsResult<()>>;
    /// StartDBInstance.
    fn start_db_instance<'a>(
        &'a self,
        region: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, AwsResult<()>>;
    /// StopDBInstance.
    fn stop_db_instance<'a>(&'a self, region: &'a str, id: &'a str)
    -> BoxFuture<'a, AwsResult<()>>;
    /// AddTagsToResource on a DB instance or DB cluster ARN.
    fn add_tags<'a>(
        &'a self,
        region: &'a str,
        arn: &'a str,
        tags: &'a [(String, String)],
    ) -> BoxFuture<'a, AwsResult<()>>;
    /// RemoveTagsFromResource on a DB instance or DB cluster ARN.
    fn remove_tags<'a>(
        &'a self,
        region: &'a str,
        arn: &'a str,
        keys: &'a [String],
    ) -> BoxFuture<'a, AwsResult<()>>;
}
