//! Performs starts, stops and lock-tag changes.
//!
//! EC2 starts and stops are coalesced across Resources of the same region into batched
//! StartInstances/StopInstances calls of up to 1,000 IDs gathered over a short window (AWS
//! throttles StartInstances per account and region at a burst of 5 and 2 per second, so 1,000
//! bookings starting together must not mean 1,000 requests). A batch refused because of one of its
//! members (an unknown ID, a member in the wrong state) is retried member by member, so one
//! failing member never blocks the others; a batch that failed as a whole (throttling, a server
//! or transport error, a timeout — after the SDK's own retries) fails for every member, which
//! the plan retries together, in one batch again, after its backoff. Stopping with hibernation falls back to
//! a plain stop when AWS says the instance cannot hibernate. RDS has no batch calls: one call per
//! DB instance.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::{AwsError, AwsResult, Ec2Api, RdsApi};
use crate::model::ProviderType;

/// Most IDs one StartInstances/StopInstances/CreateTags call takes.
pub const MAX_IDS_PER_CALL: usize = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum BatchOp {
    Start,
    Stop { hibernate: bool },
}

struct BatchRequest {
    region: String,
    op: BatchOp,
    id: String,
    reply: oneshot::Sender<AwsResult<()>>,
}

/// A member to act on: its ID and, for RDS, its ARN (tag calls take ARNs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Instance ID or DB instance identifier.
    pub id: String,
    /// DB instance ARN (RDS only).
    pub arn: Option<String>,
}

/// The outcome per member.
pub type Outcomes = Vec<(String, AwsResult<()>)>;

/// Executes AWS actions; cheap to share (`Arc`).
pub struct Executor {
    ec2: Arc<dyn Ec2Api>,
    rds: Arc<dyn RdsApi>,
    batches: mpsc::UnboundedSender<BatchRequest>,
}

impl Executor {
    /// An executor whose EC2 batches gather requests for `window`. Spawns the batching task on
    /// the current Tokio runtime.
    pub fn new(ec2: Arc<dyn Ec2Api>, rds: Arc<dyn RdsApi>, window: Duration) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run_batcher(ec2.clone(), rx, window));
        Self {
            ec2,
            rds,
            batches: tx,
        }
    }

    async fn batched(&self, region: &str, op: BatchOp, ids: &[String]) -> Outcomes {
        let waits: Vec<(String, oneshot::Receiver<AwsResult<()>>)> = ids
            .iter()
            .map(|id| {
                let (reply, rx) = oneshot::channel();
                let _ = self.batches.send(BatchRequest {
                    region: region.to_owned(),
                    op,
                    id: id.clone(),
                    reply,
                });
                (id.clone(), rx)
            })
            .collect();
        let mut out = Vec::with_capacity(waits.len());
        for (id, rx) in waits {
            let r = rx.await.unwrap_or_else(|_| {
                Err(AwsError::new(
                    "Internal",
                    "the EC2 batching task has stopped",
                ))
            });
            out.push((id, r));
        }
        out
    }

    /// Starts members (EC2 batched; RDS one call each, concurrently).
    pub async fn start(&self, kind: ProviderType, region: &str, ids: &[String]) -> Outcomes {
        match kind {
            ProviderType::Ec2 => self.batched(region, BatchOp::Start, ids).await,
            ProviderType::Rds => {
                futures::future::join_all(ids.iter().map(|id| async move {
                    (id.clone(), self.rds.start_db_instance(region, id).await)
                }))
                .await
            }
        }
    }

    /// Stops members; EC2 with hibernation when `hibernate` (falling back to a plain stop).
    pub async fn stop(
        &self,
        kind: ProviderType,
        region: &str,
        ids: &[String],
        hibernate: bool,
    ) -> Outcomes {
        match kind {
            ProviderType::Ec2 => self.batched(region, BatchOp::Stop { hibernate }, ids).await,
            ProviderType::Rds => {
                futures::future::join_all(ids.iter().map(|id| async move {
                    (id.clone(), self.rds.stop_db_instance(region, id).await)
                }))
                .await
            }
        }
    }

    /// Starts Aurora DB clusters: one StartDBCluster each, concurrently.
    pub async fn start_clusters(&self, region: &str, ids: &[String]) -> Outcomes {
        futures::future::join_all(
            ids.iter()
                .map(|id| async move { (id.clone(), self.rds.start_db_cluster(region, id).await) }),
        )
        .await
    }

    /// Stops Aurora DB clusters: one StopDBCluster each, concurrently.
    pub async fn stop_clusters(&self, region: &str, ids: &[String]) -> Outcomes {
        futures::future::join_all(
            ids.iter()
                .map(|id| async move { (id.clone(), self.rds.stop_db_cluster(region, id).await) }),
        )
        .await
    }

    /// Writes `tags` on the targets (EC2: one CreateTags per 1,000 IDs, retried per member when
    /// the error names a member; RDS: AddTagsToResource per DB instance or DB cluster ARN).
    pub async fn tag(
        &self,
        kind: ProviderType,
        region: &str,
        targets: &[Target],
        tags: &[(String, String)],
    ) -> Outcomes {
        match kind {
            ProviderType::Ec2 => {
                let mut out = Vec::new();
                for chunk in targets.chunks(MAX_IDS_PER_CALL) {
                    let ids: Vec<String> = chunk.iter().map(|t| t.id.clone()).collect();
                    match self.ec2.create_tags(region, &ids, tags).await {
                        Ok(()) => out.extend(ids.into_iter().map(|id| (id, Ok(())))),
                        Err(e) if ids.len() == 1 || !e.names_a_member() => {
                            out.extend(ids.into_iter().map(|id| (id, Err(e.clone()))));
                        }
                        Err(_) => {
                            for id in ids {
                                let r = self
                                    .ec2
                                    .create_tags(region, std::slice::from_ref(&id), tags)
                                    .await;
                                out.push((id, r));
                            }
                        }
                    }
                }
                out
            }
            ProviderType::Rds => {
                futures::future::join_all(targets.iter().map(|t| async move {
                    let r = match &t.arn {
                        Some(arn) => self.rds.add_tags(region, arn, tags).await,
                        None => Err(AwsError::new(
                            "MissingArn",
                            "DescribeDBInstances gave no ARN",
                        )),
                    };
                    (t.id.clone(), r)
                }))
                .await
            }
        }
    }

    /// Removes tag `keys` from one member.
    pub async fn untag(
        &self,
        kind: ProviderType,
        region: &str,
        target: &Target,
        keys: &[String],
    ) -> AwsResult<()> {
        match kind {
            ProviderType::Ec2 => {
                self.ec2
                    .delete_tags(region, std::slice::from_ref(&target.id), keys)
                    .await
            }
            ProviderType::Rds => match &target.arn {
                Some(arn) => self.rds.remove_tags(region, arn, keys).await,
                None => Err(AwsError::new(
                    "MissingArn",
                    "DescribeDBInstances gave no ARN",
                )),
            },
        }
    }
}

async fn run_batcher(
    ec2: Arc<dyn Ec2Api>,
    mut rx: mpsc::UnboundedReceiver<BatchRequest>,
    window: Duration,
) {
    while let Some(first) = rx.recv().await {
        let mut pending = vec![first];
        let deadline = tokio::time::Instant::now() + window;
        loop {
            tokio::select! {
                r = rx.recv() => match r {
                    Some(r) => pending.push(r),
                    None => break,
                },
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        let mut groups: BTreeMap<(String, BatchOp), Vec<BatchRequest>> = BTreeMap::new();
        for r in pending {
            groups.entry((r.region.clone(), r.op)).or_default().push(r);
        }
        let mut work = Vec::new();
        for ((region, op), mut reqs) in groups {
            while !reqs.is_empty() {
                let rest = reqs.split_off(reqs.len().min(MAX_IDS_PER_CALL));
                let chunk = std::mem::replace(&mut reqs, rest);
                let ec2 = ec2.clone();
                let region = region.clone();
                work.push(async move { execute_batch(&*ec2, &region, op, chunk).await });
            }
        }
        // Batches of different regions and operations go out concurrently; the next window
        // starts gathering meanwhile.
        tokio::spawn(futures::future::join_all(work));
    }
}

async fn call(ec2: &dyn Ec2Api, region: &str, op: BatchOp, ids: &[String]) -> AwsResult<()> {
    match op {
        BatchOp::Start => ec2.start_instances(region, ids).await,
        BatchOp::Stop { hibernate } => {
            let r = ec2.stop_instances(region, ids, hibernate).await;
            match r {
                Err(e) if hibernate && ids.len() == 1 && e.is_hibernation_unsupported() => {
                    tracing::info!(instance = %ids[0], code = %e.code, "instance cannot hibernate; stopping it instead");
                    ec2.stop_instances(region, ids, false).await
                }
                r => r,
            }
        }
    }
}

async fn execute_batch(ec2: &dyn Ec2Api, region: &str, op: BatchOp, reqs: Vec<BatchRequest>) {
    let mut by_id: BTreeMap<String, Vec<oneshot::Sender<AwsResult<()>>>> = BTreeMap::new();
    for r in reqs {
        by_id.entry(r.id).or_default().push(r.reply);
    }
    let ids: Vec<String> = by_id.keys().cloned().collect();
    let whole = call(ec2, region, op, &ids).await;
    let outcomes: Vec<(String, AwsResult<()>)> = match whole {
        Ok(()) => ids.into_iter().map(|id| (id, Ok(()))).collect(),
        Err(e) if ids.len() == 1 || !e.names_a_member() => {
            if ids.len() > 1 {
                tracing::warn!(code = %e.code, members = ids.len(), "batch failed; retried whole after backoff");
            }
            ids.into_iter().map(|id| (id, Err(e.clone()))).collect()
        }
        Err(e) => {
            tracing::debug!(code = %e.code, members = ids.len(), "a member of the batch failed; retrying member by member");
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                let r = call(ec2, region, op, std::slice::from_ref(&id)).await;
                out.push((id, r));
            }
            out
        }
    };
    for (id, r) in outcomes {
        for reply in by_id.remove(&id).unwrap_or_default() {
            let _ = reply.send(r.clone());
        }
    }
}

#[cfg(test)]
#[path = "executor_tests.rs"]
mod tests;
