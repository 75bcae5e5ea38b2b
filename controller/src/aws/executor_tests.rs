//! The executor against a fake EC2 that records its calls.

use std::sync::Mutex;

use futures::FutureExt;
use futures::future::BoxFuture;

use super::*;
use crate::aws::test_fakes::NoRds;
use crate::aws::{Ec2Filter, Page};

#[derive(Default)]
struct FakeEc2 {
    calls: Mutex<Vec<(String, Vec<String>, bool)>>,
}

impl FakeEc2 {
    fn calls(&self) -> Vec<(String, Vec<String>, bool)> {
        self.calls.lock().unwrap().clone()
    }
    fn check(&self, op: &str, ids: &[String], hibernate: bool) -> AwsResult<()> {
        self.calls
            .lock()
            .unwrap()
            .push((op.to_owned(), ids.to_vec(), hibernate));
        if ids.iter().any(|i| i == "i-bad") {
            return Err(AwsError::new(
                "IncorrectInstanceState",
                "The instance 'i-bad' is not in a state from which it can be started.",
            ));
        }
        if ids.iter().any(|i| i == "i-throttled") {
            return Err(AwsError::new(
                "RequestLimitExceeded",
                "Request limit exceeded.",
            ));
        }
        if hibernate && ids.iter().any(|i| i == "i-nohib") {
            return Err(AwsError::new(
                "UnsupportedHibernationConfiguration",
                "not configured for hibernation",
            ));
        }
        Ok(())
    }
}

impl Ec2Api for FakeEc2 {
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
        ids: &'a [String],
    ) -> BoxFuture<'a, AwsResult<()>> {
        async move { self.check("start", ids, false) }.boxed()
    }
    fn stop_instances<'a>(
        &'a self,
        _: &'a str,
        ids: &'a [String],
        hibernate: bool,
    ) -> BoxFuture<'a, AwsResult<()>> {
        async move { self.check("stop", ids, hibernate) }.boxed()
    }
    fn create_tags<'a>(
        &'a self,
        _: &'a str,
        ids: &'a [String],
        _: &'a [(String, String)],
    ) -> BoxFuture<'a, AwsResult<()>> {
        async move { self.check("tag", ids, false) }.boxed()
    }
    fn delete_tags<'a>(
        &'a self,
        _: &'a str,
        ids: &'a [String],
        _: &'a [String],
    ) -> BoxFuture<'a, AwsResult<()>> {
        async move { self.check("untag", ids, false) }.boxed()
    }
}

fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("i-{prefix}{i:05}")).collect()
}

#[tokio::test]
async fn starts_of_many_groups_are_coalesced_into_batches_of_at_most_1000() {
    let ec2 = Arc::new(FakeEc2::default());
    let exec = Arc::new(Executor::new(
        ec2.clone(),
        Arc::new(NoRds),
        Duration::from_millis(30),
    ));
    // 250 groups of 10 instances each, requested concurrently, plus one group in another region.
    let mut tasks = Vec::new();
    for g in 0..250 {
        let exec = exec.clone();
        tasks.push(tokio::spawn(async move {
            exec.start(
                ProviderType::Ec2,
                "eu-west-1",
                &ids(&format!("{g:03}x"), 10),
            )
            .await
        }));
    }
    let other = exec
        .start(ProviderType::Ec2, "us-east-1", &ids("us", 3))
        .await;
    let mut ok = other.iter().filter(|(_, r)| r.is_ok()).count();
    for t in tasks {
        ok += t.await.unwrap().iter().filter(|(_, r)| r.is_ok()).count();
    }
    assert_eq!(ok, 2503);
    let calls = ec2.calls();
    let sizes: Vec<usize> = calls.iter().map(|(_, ids, _)| ids.len()).collect();
    assert!(sizes.iter().all(|s| *s <= MAX_IDS_PER_CALL), "{sizes:?}");
    assert!(
        calls.len() <= 5,
        "2503 starts took {} calls: {sizes:?}",
        calls.len()
    );
}

#[tokio::test]
async fn one_failing_member_does_not_block_the_others() {
    let ec2 = Arc::new(FakeEc2::default());
    let exec = Executor::new(ec2.clone(), Arc::new(NoRds), Duration::from_millis(10));
    let members = vec!["i-a".to_string(), "i-bad".to_string(), "i-b".to_string()];
    let out = exec.start(ProviderType::Ec2, "eu-west-1", &members).await;
    let errs: Vec<_> = out
        .iter()
        .filter_map(|(id, r)| r.as_ref().err().map(|e| (id.as_str(), e.code.as_str())))
        .collect();
    assert_eq!(errs, vec![("i-bad", "IncorrectInstanceState")]);
    assert_eq!(out.len(), 3);
    // One batch, then one call per member.
    assert_eq!(ec2.calls().len(), 4);
}

#[tokio::test]
async fn hibernation_falls_back_to_a_plain_stop() {
    let ec2 = Arc::new(FakeEc2::default());
    let exec = Executor::new(ec2.clone(), Arc::new(NoRds), Duration::from_millis(10));
    let out = exec
        .stop(
            ProviderType::Ec2,
            "eu-west-1",
            &["i-nohib".to_string(), "i-ok".to_string()],
            true,
        )
        .await;
    assert!(out.iter().all(|(_, r)| r.is_ok()), "{out:?}");
    let calls = ec2.calls();
    assert!(
        calls.contains(&("stop".to_string(), vec!["i-nohib".to_string()], false)),
        "plain stop after the refusal: {calls:?}"
    );
    assert!(calls.contains(&("stop".to_string(), vec!["i-ok".to_string()], true)));
}

#[tokio::test]
async fn a_throttled_batch_fails_whole_and_is_not_split_per_member() {
    let ec2 = Arc::new(FakeEc2::default());
    let exec = Executor::new(ec2.clone(), Arc::new(NoRds), Duration::from_millis(10));
    let members = vec![
        "i-a".to_string(),
        "i-throttled".to_string(),
        "i-b".to_string(),
    ];
    let out = exec.start(ProviderType::Ec2, "eu-west-1", &members).await;
    assert!(
        out.iter()
            .all(|(_, r)| r.as_ref().is_err_and(|e| e.code == "RequestLimitExceeded")),
        "{out:?}"
    );
    // One call with every member, none per member.
    let calls = ec2.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].1.len(), 3);
    let tags = [("k".to_string(), "v".to_string())];
    let targets: Vec<Target> = members
        .iter()
        .map(|id| Target {
            id: id.clone(),
            arn: None,
        })
        .collect();
    let out = exec
        .tag(ProviderType::Ec2, "eu-west-1", &targets, &tags)
        .await;
    assert!(out.iter().all(|(_, r)| r.is_err()), "{out:?}");
    assert_eq!(ec2.calls().len(), 2, "one CreateTags, not one per member");
}

/// An RDS that records the cluster calls reaching it; `bad` is in a state that refuses them.
#[derive(Default)]
struct FakeClusters {
    calls: Mutex<Vec<(String, String)>>,
}

impl FakeClusters {
    fn call(&self, op: &str, id: &str) -> AwsResult<()> {
        self.calls
            .lock()
            .unwrap()
            .push((op.to_owned(), id.to_owned()));
        if id == "bad" {
            return Err(AwsError::new(
                "InvalidDBClusterStateFault",
                "DbCluster bad is in stopping state but expected it to be one of available.",
            ));
        }
        Ok(())
    }
}

impl RdsApi for FakeClusters {
    fn describe_db_instances<'a>(
        &'a self,
        r: &'a str,
        m: Option<String>,
    ) -> BoxFuture<'a, AwsResult<Page>> {
        NoRds.describe_db_instances(r, m)
    }
    fn describe_db_clusters<'a>(
        &'a self,
        r: &'a str,
        m: Option<String>,
    ) -> BoxFuture<'a, AwsResult<Page>> {
        NoRds.describe_db_clusters(r, m)
    }
    fn start_db_cluster<'a>(&'a self, _: &'a str, id: &'a str) -> BoxFuture<'a, AwsResult<()>> {
        async move { self.call("StartDBCluster", id) }.boxed()
    }
    fn stop_db_cluster<'a>(&'a self, _: &'a str, id: &'a str) -> BoxFuture<'a, AwsResult<()>> {
        async move { self.call("StopDBCluster", id) }.boxed()
    }
    fn start_db_instance<'a>(&'a self, _: &'a str, id: &'a str) -> BoxFuture<'a, AwsResult<()>> {
        async move { self.call("StartDBInstance", id) }.boxed()
    }
    fn stop_db_instance<'a>(&'a self, _: &'a str, id: &'a str) -> BoxFuture<'a, AwsResult<()>> {
        async move { self.call("StopDBInstance", id) }.boxed()
    }
    fn add_tags<'a>(
        &'a self,
        r: &'a str,
        a: &'a str,
        t: &'a [(String, String)],
    ) -> BoxFuture<'a, AwsResult<()>> {
        NoRds.add_tags(r, a, t)
    }
    fn remove_tags<'a>(
        &'a self,
        r: &'a str,
        a: &'a str,
        k: &'a [String],
    ) -> BoxFuture<'a, AwsResult<()>> {
        NoRds.remove_tags(r, a, k)
    }
}

#[tokio::test]
async fn clusters_are_started_and_stopped_one_call_each_and_a_refused_one_is_retryable() {
    let rds = Arc::new(FakeClusters::default());
    let exec = Executor::new(
        Arc::new(FakeEc2::default()),
        rds.clone(),
        Duration::from_millis(1),
    );
    let clusters = vec!["a".to_string(), "bad".to_string(), "b".to_string()];
    let out = exec.start_clusters("eu-west-1", &clusters).await;
    let ids: Vec<&str> = out.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["a", "bad", "b"]);
    let errs: Vec<_> = out
        .iter()
        .filter_map(|(id, r)| r.as_ref().err().map(|e| (id.as_str(), e.is_retryable())))
        .collect();
    assert_eq!(errs, vec![("bad", true)], "{out:?}");
    let out = exec.stop_clusters("eu-west-1", &clusters[..1]).await;
    assert!(out[0].1.is_ok());
    let mut calls = rds.calls.lock().unwrap().clone();
    calls.sort();
    assert_eq!(
        calls,
        [
            ("StartDBCluster".to_string(), "a".to_string()),
            ("StartDBCluster".to_string(), "b".to_string()),
            ("StartDBCluster".to_string(), "bad".to_string()),
            ("StopDBCluster".to_string(), "a".to_string()),
        ],
        "one call per cluster, no instance call"
    );
}
