//! Dry-run at the AWS client layer: EC2 and RDS clients that refuse every write call (starts,
//! stops, tag writes and removals) before it is sent, and pass reads through. In dry-run mode
//! the executor writes through them (around the leadership fence), as a second guard behind the
//! Resource reconciler, which does not call the executor at all in that mode.
//!
//! A new write call of [`Ec2Api`] or [`RdsApi`] is added here as one line calling
//! [`ReadOnly::refuse`] with its AWS action name.

use std::sync::Arc;

use futures::FutureExt as _;
use futures::future::BoxFuture;

use super::{AwsError, AwsResult, Ec2Api, Ec2Filter, Page, RdsApi};

/// The error code of a write refused because the controller runs in dry-run mode.
pub const DRY_RUN: &str = "DryRun";

/// EC2 and RDS clients that only read.
pub struct ReadOnly<T: ?Sized> {
    inner: Arc<T>,
}

impl<T: ?Sized> ReadOnly<T> {
    /// `inner`, its writes refused.
    pub fn new(inner: Arc<T>) -> Self {
        Self { inner }
    }

    /// Refuses the write `action` without sending anything.
    fn refuse<'a>(action: &'static str) -> BoxFuture<'a, AwsResult<()>> {
        tracing::error!(
            action,
            "AWS write refused: the controller runs in dry-run mode"
        );
        async move {
            Err(AwsError::new(
                DRY_RUN,
                format!("{action} refused: the controller runs in dry-run mode (DRY_RUN)"),
            ))
        }
        .boxed()
    }
}

impl<T: Ec2Api + ?Sized> Ec2Api for ReadOnly<T> {
    fn describe_instances<'a>(
        &'a self,
        region: &'a str,
        filter: &'a Ec2Filter,
        token: Option<String>,
    ) -> BoxFuture<'a, AwsResult<Page>> {
        self.inner.describe_instances(region, filter, token)
    }

    fn start_instances<'a>(&'a self, _: &'a str, _: &'a [String]) -> BoxFuture<'a, AwsResult<()>> {
        Self::refuse("StartInstances")
    }

    fn stop_instances<'a>(
        &'a self,
        _: &'a str,
        _: &'a [String],
        _: bool,
    ) -> BoxFuture<'a, AwsResult<()>> {
        Self::refuse("StopInstances")
    }

    fn create_tags<'a>(
        &'a self,
        _: &'a str,
        _: &'a [String],
        _: &'a [(String, String)],
    ) -> BoxFuture<'a, AwsResult<()>> {
        Self::refuse("CreateTags")
    }

    fn delete_tags<'a>(
        &'a self,
        _: &'a str,
        _: &'a [String],
        _: &'a [String],
    ) -> BoxFuture<'a, AwsResult<()>> {
        Self::refuse("DeleteTags")
    }
}

impl<T: RdsApi + ?Sized> RdsApi for ReadOnly<T> {
    fn describe_db_instances<'a>(
        &'a self,
        region: &'a str,
        marker: Option<String>,
    ) -> BoxFuture<'a, AwsResult<Page>> {
        self.inner.describe_db_instances(region, marker)
    }

    fn describe_db_clusters<'a>(
        &'a self,
        region: &'a str,
        marker: Option<String>,
    ) -> BoxFuture<'a, AwsResult<Page>> {
        self.inner.describe_db_clusters(region, marker)
    }

    fn start_db_cluster<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, AwsResult<()>> {
        Self::refuse("StartDBCluster")
    }

    fn stop_db_cluster<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, AwsResult<()>> {
        Self::refuse("StopDBCluster")
    }

    fn start_db_instance<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, AwsResult<()>> {
        Self::refuse("StartDBInstance")
    }

    fn stop_db_instance<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, AwsResult<()>> {
        Self::refuse("StopDBInstance")
    }

    fn add_tags<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: &'a [(String, String)],
    ) -> BoxFuture<'a, AwsResult<()>> {
        Self::refuse("AddTagsToResource")
    }

    fn remove_tags<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: &'a [String],
    ) -> BoxFuture<'a, AwsResult<()>> {
        Self::refuse("RemoveTagsFromResource")
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::aws::executor::{Executor, Target};
    use crate::model::{Member, ProviderType};

    /// EC2 and RDS that record every call reaching them and accept it.
    #[derive(Default)]
    struct Recording(Mutex<Vec<&'static str>>);

    impl Recording {
        fn call<T: Send + 'static>(&self, action: &'static str, out: T) -> BoxFuture<'_, T> {
            self.0.lock().unwrap().push(action);
            async move { out }.boxed()
        }
        fn calls(&self) -> Vec<&'static str> {
            self.0.lock().unwrap().clone()
        }
    }

    fn member(id: &str) -> Member {
        Member {
            id: id.into(),
            arn: None,
            state: "stopped".into(),
            state_reason: None,
            tags: Default::default(),
            db_cluster: None,
            is_cluster: false,
        }
    }

    impl Ec2Api for Recording {
        fn describe_instances<'a>(
            &'a self,
            _: &'a str,
            _: &'a Ec2Filter,
            _: Option<String>,
        ) -> BoxFuture<'a, AwsResult<Page>> {
            self.call("DescribeInstances", Ok((vec![member("i-1")], None)))
        }
        fn start_instances<'a>(
            &'a self,
            _: &'a str,
            _: &'a [String],
        ) -> BoxFuture<'a, AwsResult<()>> {
            self.call("StartInstances", Ok(()))
        }
        fn stop_instances<'a>(
            &'a self,
            _: &'a str,
            _: &'a [String],
            _: bool,
        ) -> BoxFuture<'a, AwsResult<()>> {
            self.call("StopInstances", Ok(()))
        }
        fn create_tags<'a>(
            &'a self,
            _: &'a str,
            _: &'a [String],
            _: &'a [(String, String)],
        ) -> BoxFuture<'a, AwsResult<()>> {
            self.call("CreateTags", Ok(()))
        }
        fn delete_tags<'a>(
            &'a self,
            _: &'a str,
            _: &'a [String],
            _: &'a [String],
        ) -> BoxFuture<'a, AwsResult<()>> {
            self.call("DeleteTags", Ok(()))
        }
    }

    impl RdsApi for Recording {
        fn describe_db_instances<'a>(
            &'a self,
            _: &'a str,
            _: Option<String>,
        ) -> BoxFuture<'a, AwsResult<Page>> {
            self.call("DescribeDBInstances", Ok((vec![member("db-1")], None)))
        }
        fn describe_db_clusters<'a>(
            &'a self,
            _: &'a str,
            _: Option<String>,
        ) -> BoxFuture<'a, AwsResult<Page>> {
            self.call("DescribeDBClusters", Ok((vec![member("cluster-1")], None)))
        }
        fn start_db_cluster<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, AwsResult<()>> {
            self.call("StartDBCluster", Ok(()))
        }
        fn stop_db_cluster<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, AwsResult<()>> {
            self.call("StopDBCluster", Ok(()))
        }
        fn start_db_instance<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, AwsResult<()>> {
            self.call("StartDBInstance", Ok(()))
        }
        fn stop_db_instance<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, AwsResult<()>> {
            self.call("StopDBInstance", Ok(()))
        }
        fn add_tags<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
            _: &'a [(String, String)],
        ) -> BoxFuture<'a, AwsResult<()>> {
            self.call("AddTagsToResource", Ok(()))
        }
        fn remove_tags<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
            _: &'a [String],
        ) -> BoxFuture<'a, AwsResult<()>> {
            self.call("RemoveTagsFromResource", Ok(()))
        }
    }

    #[tokio::test]
    async fn every_aws_write_is_refused_in_dry_run_and_reads_pass() {
        let fake = Arc::new(Recording::default());
        let exec = Executor::new(
            Arc::new(ReadOnly::new(fake.clone())),
            Arc::new(ReadOnly::new(fake.clone())),
        );
        let ids = vec!["i-1".to_owned()];
        let target = Target {
            id: "db-1".into(),
            arn: Some("arn:aws:rds:eu-west-1:1:db:db-1".into()),
        };
        let tags = vec![("k".to_owned(), "v".to_owned())];
        let keys = vec!["k".to_owned()];
        let mut out = Vec::new();
        for kind in [ProviderType::Ec2, ProviderType::Rds] {
            let r = "eu-west-1";
            out.extend(exec.start(kind, r, &ids).await.into_iter().map(|(_, r)| r));
            let stopped = exec.stop(kind, r, &ids, true).await;
            out.extend(stopped.into_iter().map(|(_, r)| r));
            let tagged = exec
                .tag(kind, r, std::slice::from_ref(&target), &tags)
                .await;
            out.extend(tagged.into_iter().map(|(_, r)| r));
            out.push(exec.untag(kind, r, &target, &keys).await);
        }
        let clusters = vec!["cluster-1".to_owned()];
        let started = exec.start_clusters("eu-west-1", &clusters).await;
        out.extend(started.into_iter().map(|(_, r)| r));
        let stopped = exec.stop_clusters("eu-west-1", &clusters).await;
        out.extend(stopped.into_iter().map(|(_, r)| r));
        assert_eq!(out.len(), 10, "{out:?}");
        assert!(
            out.iter()
                .all(|r| r.as_ref().is_err_and(|e| e.code == DRY_RUN)),
            "{out:?}"
        );
        assert!(fake.calls().is_empty(), "{:?}", fake.calls());
        // Reads still reach AWS.
        let ro = ReadOnly::new(fake.clone());
        let filter = Ec2Filter::TagKeys(vec!["k".into()]);
        let (ec2, _) = Ec2Api::describe_instances(&ro, "r", &filter, None)
            .await
            .unwrap();
        let (rds, _) = RdsApi::describe_db_instances(&ro, "r", None).await.unwrap();
        let (clusters, _) = RdsApi::describe_db_clusters(&ro, "r", None).await.unwrap();
        assert_eq!(
            (
                ec2[0].id.as_str(),
                rds[0].id.as_str(),
                clusters[0].id.as_str()
            ),
            ("i-1", "db-1", "cluster-1")
        );
        assert_eq!(
            fake.calls(),
            [
                "DescribeInstances",
                "DescribeDBInstances",
                "DescribeDBClusters"
            ]
        );
    }
}
