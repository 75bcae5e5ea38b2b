//! Fencing: the EC2 and RDS clients the executor writes through. Every write call (starts,
//! stops, tag writes and removals) first asks [`Leadership`] whether this replica still leads
//! and is refused with `NotLeader` when it does not; a call that was allowed is cut at the end
//! of the leadership's validity, so no retry of the SDK goes out after it. Reads pass through.

use std::sync::Arc;

use futures::FutureExt as _;
use futures::future::BoxFuture;

use super::{AwsError, AwsResult, Ec2Api, Ec2Filter, Page, RdsApi};
use crate::leader::Leadership;

/// The error code of a write refused because this replica does not lead.
pub const NOT_LEADER: &str = "NotLeader";

/// EC2 and RDS clients whose writes are fenced by a [`Leadership`].
pub struct Fenced<T: ?Sized> {
    inner: Arc<T>,
    leadership: Leadership,
}

impl<T: ?Sized + Send + Sync> Fenced<T> {
    /// `inner`, its writes fenced by `leadership`.
    pub fn new(inner: Arc<T>, leadership: Leadership) -> Self {
        Self { inner, leadership }
    }

    /// Runs the write `call` (named `action`) when this replica leads now, cut at the end of
    /// its leadership; refuses it otherwise.
    fn write<'a>(
        &'a self,
        action: &'static str,
        call: BoxFuture<'a, AwsResult<()>>,
    ) -> BoxFuture<'a, AwsResult<()>> {
        async move {
            let now = tokio::time::Instant::now();
            let until = match self.leadership.check(now) {
                Ok(until) => until,
                Err(why) => {
                    tracing::warn!(action, %why, "AWS write refused: this replica does not lead");
                    return Err(AwsError::new(
                        NOT_LEADER,
                        format!("{action} refused: {why}"),
                    ));
                }
            };
            match until {
                None => call.await,
                Some(until) => match tokio::time::timeout_at(until, call).await {
                    Ok(r) => r,
                    Err(_) => {
                        tracing::warn!(action, "AWS write cut: leadership ended while it ran");
                        Err(AwsError::new(
                            NOT_LEADER,
                            format!("{action} cut: this replica's leadership ended while it ran"),
                        ))
                    }
                },
            }
        }
        .boxed()
    }
}

impl<T: Ec2Api + ?Sized> Ec2Api for Fenced<T> {
    fn describe_instances<'a>(
        &'a self,
        region: &'a str,
        filter: &'a Ec2Filter,
        token: Option<String>,
    ) -> BoxFuture<'a, AwsResult<Page>> {
        self.inner.describe_instances(region, filter, token)
    }

    fn start_instances<'a>(
        &'a self,
        region: &'a str,
        ids: &'a [String],
    ) -> BoxFuture<'a, AwsResult<()>> {
        self.write("StartInstances", self.inner.start_instances(region, ids))
    }

    fn stop_instances<'a>(
        &'a self,
        region: &'a str,
        ids: &'a [String],
        hibernate: bool,
    ) -> BoxFuture<'a, AwsResult<()>> {
        self.write(
            "StopInstances",
            self.inner.stop_instances(region, ids, hibernate),
        )
    }

    fn create_tags<'a>(
        &'a self,
        region: &'a str,
        ids: &'a [String],
        tags: &'a [(String, String)],
    ) -> BoxFuture<'a, AwsResult<()>> {
        self.write("CreateTags", self.inner.create_tags(region, ids, tags))
    }

    fn delete_tags<'a>(
        &'a self,
        region: &'a str,
        ids: &'a [String],
        keys: &'a [String],
    ) -> BoxFuture<'a, AwsResult<()>> {
        self.write("DeleteTags", self.inner.delete_tags(region, ids, keys))
    }
}

impl<T: RdsApi + ?Sized> RdsApi for Fenced<T> {
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

    fn start_db_cluster<'a>(
        &'a self,
        region: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, AwsResult<()>> {
        self.write("StartDBCluster", self.inner.start_db_cluster(region, id))
    }

    fn stop_db_cluster<'a>(&'a self, region: &'a str, id: &'a str) -> BoxFuture<'a, AwsResult<()>> {
        self.write("StopDBCluster", self.inner.stop_db_cluster(region, id))
    }

    fn start_db_instance<'a>(
        &'a self,
        region: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, AwsResult<()>> {
        self.write("StartDBInstance", self.inner.start_db_instance(region, id))
    }

    fn stop_db_instance<'a>(
        &'a self,
        region: &'a str,
        id: &'a str,
    ) -> BoxFuture<'a, AwsResult<()>> {
        self.write("StopDBInstance", self.inner.stop_db_instance(region, id))
    }

    fn add_tags<'a>(
        &'a self,
        region: &'a str,
        arn: &'a str,
        tags: &'a [(String, String)],
    ) -> BoxFuture<'a, AwsResult<()>> {
        self.write("AddTagsToResource", self.inner.add_tags(region, arn, tags))
    }

    fn remove_tags<'a>(
        &'a self,
        region: &'a str,
        arn: &'a str,
        keys: &'a [String],
    ) -> BoxFuture<'a, AwsResult<()>> {
        self.write(
            "RemoveTagsFromResource",
            self.inner.remove_tags(region, arn, keys),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;
    use crate::aws::executor::{Executor, Target};
    use crate::leader::Validity;
    use crate::model::ProviderType;

    /// EC2 and RDS that record the write calls reaching them, each taking `delay`.
    #[derive(Default)]
    struct Recording {
        writes: Mutex<Vec<&'static str>>,
        delay: Duration,
    }

    impl Recording {
        fn write(&self, action: &'static str) -> BoxFuture<'_, AwsResult<()>> {
            async move {
                tokio::time::sleep(self.delay).await;
                self.writes.lock().unwrap().push(action);
                Ok(())
            }
            .boxed()
        }
        fn writes(&self) -> Vec<&'static str> {
            self.writes.lock().unwrap().clone()
        }
    }

    impl Ec2Api for Recording {
        fn describe_instances<'a>(
            &'a self,
            _: &'a str,
            _: &'a Ec2Filter,
            _: Option<String>,
        ) -> BoxFuture<'a, AwsResult<Page>> {
            async { Ok((vec![], None)) }.boxed()
        }
        fn start_instances<'a>(
            &'a self,
            _: &'a str,
            _: &'a [String],
        ) -> BoxFuture<'a, AwsResult<()>> {
            self.write("StartInstances")
        }
        fn stop_instances<'a>(
            &'a self,
            _: &'a str,
            _: &'a [String],
            _: bool,
        ) -> BoxFuture<'a, AwsResult<()>> {
            self.write("StopInstances")
        }
        fn create_tags<'a>(
            &'a self,
            _: &'a str,
            _: &'a [String],
            _: &'a [(String, String)],
        ) -> BoxFuture<'a, AwsResult<()>> {
            self.write("CreateTags")
        }
        fn delete_tags<'a>(
            &'a self,
            _: &'a str,
            _: &'a [String],
            _: &'a [String],
        ) -> BoxFuture<'a, AwsResult<()>> {
            self.write("DeleteTags")
        }
    }

    impl RdsApi for Recording {
        fn describe_db_instances<'a>(
            &'a self,
            _: &'a str,
            _: Option<String>,
        ) -> BoxFuture<'a, AwsResult<Page>> {
            async { Ok((vec![], None)) }.boxed()
        }
        fn describe_db_clusters<'a>(
            &'a self,
            _: &'a str,
            _: Option<String>,
        ) -> BoxFuture<'a, AwsResult<Page>> {
            async { Ok((vec![], None)) }.boxed()
        }
        fn start_db_cluster<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, AwsResult<()>> {
            self.write("StartDBCluster")
        }
        fn stop_db_cluster<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, AwsResult<()>> {
            self.write("StopDBCluster")
        }
        fn start_db_instance<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, AwsResult<()>> {
            self.write("StartDBInstance")
        }
        fn stop_db_instance<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, AwsResult<()>> {
            self.write("StopDBInstance")
        }
        fn add_tags<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
            _: &'a [(String, String)],
        ) -> BoxFuture<'a, AwsResult<()>> {
            self.write("AddTagsToResource")
        }
        fn remove_tags<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
            _: &'a [String],
        ) -> BoxFuture<'a, AwsResult<()>> {
            self.write("RemoveTagsFromResource")
        }
    }

    /// Every write path of the executor, for both kinds: each member's outcome in order.
    async fn every_write(exec: &Executor) -> Vec<AwsResult<()>> {
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
            out.extend(
                exec.stop(kind, r, &ids, false)
                    .await
                    .into_iter()
                    .map(|(_, r)| r),
            );
            let tagged = exec
                .tag(kind, r, std::slice::from_ref(&target), &tags)
                .await;
            out.extend(tagged.into_iter().map(|(_, r)| r));
            out.push(exec.untag(kind, r, &target, &keys).await);
        }
        let clusters = vec!["aurora-1".to_owned()];
        let r = "eu-west-1";
        out.extend(
            exec.start_clusters(r, &clusters)
                .await
                .into_iter()
                .map(|(_, r)| r),
        );
        out.extend(
            exec.stop_clusters(r, &clusters)
                .await
                .into_iter()
                .map(|(_, r)| r),
        );
        out
    }

    fn fenced(delay: Duration) -> (Arc<Recording>, watch::Sender<Validity>, Executor) {
        let fake = Arc::new(Recording {
            delay,
            ..Default::default()
        });
        let (tx, leadership) = Leadership::channel();
        let exec = Executor::new(
            Arc::new(Fenced::new(fake.clone(), leadership.clone())),
            Arc::new(Fenced::new(fake.clone(), leadership)),
        );
        (fake, tx, exec)
    }

    use tokio::sync::watch;
    use tokio::time::Instant;

    #[tokio::test]
    async fn every_aws_write_of_the_executor_needs_a_valid_leadership() {
        let (fake, validity, exec) = fenced(Duration::ZERO);
        // Not (yet, or any more) leading: nothing reaches AWS, each member fails NotLeader.
        for v in [Validity::Never, Validity::Until(Instant::now())] {
            validity.send_replace(v);
            let out = every_write(&exec).await;
            assert_eq!(out.len(), 10);
            assert!(
                out.iter()
                    .all(|r| r.as_ref().is_err_and(|e| e.code == NOT_LEADER)),
                "{v:?}: {out:?}"
            );
            assert!(fake.writes().is_empty(), "{v:?}: {:?}", fake.writes());
        }
        validity.send_replace(Validity::Until(Instant::now() + Duration::from_secs(60)));
        let out = every_write(&exec).await;
        assert!(out.iter().all(Result::is_ok), "{out:?}");
        assert_eq!(
            fake.writes(),
            [
                "StartInstances",
                "StopInstances",
                "CreateTags",
                "DeleteTags",
                "StartDBInstance",
                "StopDBInstance",
                "AddTagsToResource",
                "RemoveTagsFromResource",
                "StartDBCluster",
                "StopDBCluster"
            ]
        );
        // Without election the fence is open.
        let fake = Arc::new(Recording::default());
        let open = Fenced::new(fake.clone(), Leadership::unfenced());
        open.start_instances("r", &[]).await.unwrap();
        assert_eq!(fake.writes(), ["StartInstances"]);
    }

    #[tokio::test]
    async fn a_write_running_when_the_leadership_ends_is_cut_there() {
        let (fake, validity, exec) = fenced(Duration::from_secs(5));
        let began = Instant::now();
        validity.send_replace(Validity::Until(began + Duration::from_millis(300)));
        let out = exec
            .start(ProviderType::Rds, "r", &["db-1".to_owned()])
            .await;
        assert!(
            out[0]
                .1
                .as_ref()
                .is_err_and(|e| e.code == NOT_LEADER && e.message.contains("cut")),
            "{out:?}"
        );
        assert!(
            began.elapsed() < Duration::from_secs(2),
            "cut at the end of the validity"
        );
        assert!(fake.writes().is_empty());
    }
}
