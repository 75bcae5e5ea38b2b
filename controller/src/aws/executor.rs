//! Performs starts, stops and lock-tag changes.
//!
//! EC2 starts and stops are coalesced across Resources of the same region into batched
//! StartInstances/StopInstances calls of up to 1,000 IDs (AWS throttles StartInstances per
//! account and region at a burst of 5 and 2 per second, so 1,000 bookings starting together must
//! not mean 1,000 requests). There is no gathering window: a lone request for a (region,
//! operation) with no call in flight goes out at once; a burst of requests (the reconciles woken
//! at the same instant send theirs one right after another) goes out as soon as it ends (no new
//! request for a millisecond); requests arriving while a call is in flight wait for its answer
//! and then go out together ("group commit"), so that one (region, operation) has one call per
//! 1,000 IDs in flight at a time. Whether a request is lone or the first of a burst is not
//! guessed from timing alone: every Resource reconcile woken by the Resources' timer holds a
//! [`Preparing`] turn from the moment the timer wakes it (the timer wakes every Resource due at
//! one instant at once, before kube's controller creates the first of their reconciles) until
//! its starts and stops are queued or it has none, and a request is sent at once only when no
//! other reconcile is still preparing. One caller's members reach the batcher in one message, so a
//! Resource's group is never split between calls by the timing of its own request. A batch
//! refused because of one of its members (an unknown ID, a member in the wrong state) is retried
//! member by member, so one failing member never blocks the others; a batch that failed as a whole (throttling, a
//! server or transport error, a timeout — after the SDK's own retries) fails for every member,
//! which the plan retries together, in one batch again, after its backoff. Stopping with
//! hibernation falls back to a plain stop when AWS says the instance cannot hibernate. RDS has
//! no batch calls: one call per DB instance.
//!
//! Lock tags differ per Resource (each names its own booking's user, end and owner), so they
//! cannot share a call across Resources: at most [`MAX_TAG_CALLS_IN_FLIGHT`] tag calls are in
//! flight at once, so that 1,000 Resources starting together send their 1,000 CreateTags one
//! after another within AWS's request rate, instead of all at once beside their one
//! StartInstances.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::{mpsc, oneshot};

use super::{AwsError, AwsResult, Ec2Api, RdsApi};
use crate::model::ProviderType;

/// Most IDs one StartInstances/StopInstances/CreateTags call takes.
pub const MAX_IDS_PER_CALL: usize = 1000;

/// Most tag calls (CreateTags, DeleteTags, AddTagsToResource, RemoveTagsFromResource) in flight
/// at once.
pub const MAX_TAG_CALLS_IN_FLIGHT: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum BatchOp {
    Start,
    Stop { hibernate: bool },
}

/// One caller's request: all its members in one message, so that the batcher never sees part of
/// it (a caller's members always go out in the same call, up to 1,000 IDs).
struct BatchRequest {
    region: String,
    op: BatchOp,
    members: Vec<Member>,
}

/// A member of a request and where its outcome goes.
struct Member {
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
    /// Turns of the tag calls ([`MAX_TAG_CALLS_IN_FLIGHT`]).
    tag_calls: tokio::sync::Semaphore,
}

/// A reconcile's turn to prepare its starts and stops: while any is held, the batcher takes a
/// request for the first of a burst and waits for the others' (see [`gather`]). Released when
/// dropped, which its holder does right after its requests are queued, or on any return that
/// sends none.
#[must_use = "a turn released at once tells the batcher nothing"]
pub struct Preparing(Arc<Count>);

impl Drop for Preparing {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::AcqRel);
        // The batcher, if it waits for the reconciles still preparing, looks again.
        self.0.released.notify_one();
    }
}

/// The turns held or reserved, and the signal of each release.
#[derive(Default)]
struct Count {
    held: AtomicUsize,
    released: tokio::sync::Notify,
}

/// The count of [`Preparing`] turns, shared by whoever hands them out and the batcher that
/// reads it. A turn can be reserved before the reconcile that will hold it exists: the
/// Resources' timer reserves one for each Resource it wakes, at the instant it wakes it, since
/// kube's controller creates the reconciles of one instant over more than one poll of its queue
/// (each trigger is queued with its own `Instant::now()`, and its queue pops by the
/// millisecond), and a turn taken only at creation would let the first reconciles' start go out
/// alone before the others exist.
#[derive(Clone, Default)]
pub struct Turns(Arc<Count>);

impl Turns {
    /// A turn taken now.
    pub fn take(&self) -> Preparing {
        self.reserve();
        self.claim()
    }

    /// Counts a turn for a reconcile still to come; [`Turns::claim`] hands it to that reconcile.
    pub fn reserve(&self) {
        self.0.held.fetch_add(1, Ordering::AcqRel);
    }

    /// The turn of one earlier [`Turns::reserve`], released when dropped.
    pub fn claim(&self) -> Preparing {
        Preparing(self.0.clone())
    }

    /// How many turns are held or reserved.
    pub(crate) fn held(&self) -> usize {
        self.0.held.load(Ordering::Acquire)
    }

    /// Resolves at the next release of a turn (or at once when one was released since the last
    /// call: a release with no one waiting is kept).
    async fn released(&self) {
        self.0.released.notified().await;
    }
}

impl Executor {
    /// An executor with turns of its own; spawns the EC2 batching task on the current Tokio
    /// runtime.
    pub fn new(ec2: Arc<dyn Ec2Api>, rds: Arc<dyn RdsApi>) -> Self {
        Self::with_turns(ec2, rds, Turns::default())
    }

    /// An executor whose batcher reads `turns` (shared with the Resources' timer).
    pub fn with_turns(ec2: Arc<dyn Ec2Api>, rds: Arc<dyn RdsApi>, turns: Turns) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run_batcher(ec2.clone(), rx, turns));
        Self {
            ec2,
            rds,
            batches: tx,
            tag_calls: tokio::sync::Semaphore::new(MAX_TAG_CALLS_IN_FLIGHT),
        }
    }

    async fn batched(&self, region: &str, op: BatchOp, ids: &[String]) -> Outcomes {
        let mut members = Vec::with_capacity(ids.len());
        let waits: Vec<(String, oneshot::Receiver<AwsResult<()>>)> = ids
            .iter()
            .map(|id| {
                let (reply, rx) = oneshot::channel();
                members.push(Member {
                    id: id.clone(),
                    reply,
                });
                (id.clone(), rx)
            })
            .collect();
        if members.is_empty() {
            return Vec::new();
        }
        let _ = self.batches.send(BatchRequest {
            region: region.to_owned(),
            op,
            members,
        });
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
                    let turn = self.tag_calls.acquire().await.ok();
                    let first = self.ec2.create_tags(region, &ids, tags).await;
                    drop(turn);
                    match first {
                        Ok(()) => out.extend(ids.into_iter().map(|id| (id, Ok(())))),
                        Err(e) if ids.len() == 1 || !e.names_a_member() => {
                            out.extend(ids.into_iter().map(|id| (id, Err(e.clone()))));
                        }
                        Err(_) => {
                            for id in ids {
                                let _turn = self.tag_calls.acquire().await.ok();
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
                    let _turn = self.tag_calls.acquire().await.ok();
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
        let _turn = self.tag_calls.acquire().await.ok();
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

/// The requests of one region and operation: one call (per 1,000 IDs) of theirs at a time.
type BatchKey = (String, BatchOp);

/// The batching task: sends what is queued for a (region, operation) as soon as no call of it
/// is in flight, and queues what arrives while one is ("group commit"). No timer: a lone start
/// goes out after one yield to the runtime; requests sent together (the reconciles woken at the
/// same instant) are gathered by [`gather`]; requests arriving during a call go out together
/// when it is answered.
async fn run_batcher(
    ec2: Arc<dyn Ec2Api>,
    mut rx: mpsc::UnboundedReceiver<BatchRequest>,
    preparing: Turns,
) {
    let mut queued: BTreeMap<BatchKey, Vec<Member>> = BTreeMap::new();
    // Calls in flight per key; a key is free when it has none.
    let mut in_flight: BTreeMap<BatchKey, usize> = BTreeMap::new();
    let mut answered = FuturesUnordered::new();
    let mut open = true;
    loop {
        tokio::select! {
            r = rx.recv(), if open => match r {
                Some(r) => {
                    queue(&mut queued, r);
                    gather(&mut rx, &mut queued, &preparing).await;
                }
                None => open = false,
            },
            Some(key) = answered.next(), if !answered.is_empty() => {
                if let Some(n) = in_flight.get_mut(&key) {
                    *n -= 1;
                    if *n == 0 {
                        in_flight.remove(&key);
                    }
                }
                // What arrived during the call, and what is arriving now, goes out together.
                gather(&mut rx, &mut queued, &preparing).await;
            }
            else => break,
        }
        let free: Vec<BatchKey> = queued
            .keys()
            .filter(|k| !in_flight.contains_key(*k))
            .cloned()
            .collect();
        for key in free {
            let mut reqs = queued.remove(&key).unwrap_or_default();
            // Batches of different regions and operations, and the chunks of 1,000 of one,
            // go out concurrently.
            while !reqs.is_empty() {
                let rest = reqs.split_off(reqs.len().min(MAX_IDS_PER_CALL));
                let chunk = std::mem::replace(&mut reqs, rest);
                let (freed, answer) = oneshot::channel();
                tokio::spawn(execute_batch(ec2.clone(), key.clone(), chunk, freed));
                *in_flight.entry(key.clone()).or_default() += 1;
                let key = key.clone();
                // A batch task that ended without saying so (a panic) frees its key too.
                answered.push(async move {
                    let _ = answer.await;
                    key
                });
            }
        }
    }
}

fn queue(queued: &mut BTreeMap<BatchKey, Vec<Member>>, r: BatchRequest) {
    queued
        .entry((r.region, r.op))
        .or_default()
        .extend(r.members);
}

/// Takes the requests already sent and returns:
/// - for a lone request (no other reconcile [`Preparing`], the runtime's global queue empty),
///   after one yield to the runtime (which puts this task behind the tasks queued on its worker)
///   that brings nothing new: microseconds, never a timer;
/// - while other reconciles are preparing (the Resources woken at one instant hold their turns
///   from the moment the timer wakes them, and their reconciles run one after another on their
///   controller's task), once none is left, or once none of them has made progress — sent a
///   request or released its turn — for [`PREPARING_QUIET`] (they are waiting on something
///   slow). This wait sleeps until the next request or release: it takes no CPU from the
///   reconciles it waits for;
/// - after a burst with none left preparing, once no request has arrived for [`BURST_QUIET`],
///   so that a tail sent from elsewhere joins the same call.
async fn gather(
    rx: &mut mpsc::UnboundedReceiver<BatchRequest>,
    queued: &mut BTreeMap<BatchKey, Vec<Member>>,
    preparing: &Turns,
) {
    let runtime = tokio::runtime::Handle::current();
    let mut burst = false;
    let mut last = tokio::time::Instant::now();
    let mut open = true;
    loop {
        let mut got = false;
        while let Ok(r) = rx.try_recv() {
            queue(queued, r);
            got = true;
        }
        if got {
            burst = true;
            last = tokio::time::Instant::now();
        }
        if preparing.held() > 0 {
            let until = last + PREPARING_QUIET;
            tokio::select! {
                biased;
                r = rx.recv(), if open => match r {
                    Some(r) => {
                        queue(queued, r);
                        burst = true;
                        last = tokio::time::Instant::now();
                    }
                    None => open = false,
                },
                () = preparing.released() => last = tokio::time::Instant::now(),
                () = tokio::time::sleep_until(until) => return,
            }
            continue;
        }
        tokio::task::yield_now().await;
        if !rx.is_empty() {
            continue;
        }
        let quiet = last.elapsed();
        let lone = !burst && runtime.metrics().global_queue_depth() == 0;
        if lone || quiet >= BURST_QUIET {
            return;
        }
    }
}

/// How long [`gather`] goes on looking after the last request of a burst (or after a lone
/// request while the runtime's global queue holds tasks that may send more) once no reconcile
/// is preparing: the longest gap between two requests of one burst.
const BURST_QUIET: std::time::Duration = std::time::Duration::from_millis(1);

/// How long [`gather`] waits for progress (a request, a released turn) while other reconciles
/// are still preparing: far above the time one Resource reconcile takes from its start to its
/// request when it reads only caches (tens of microseconds), and above the few milliseconds a
/// thread of a busy two-core machine may wait for its core, so that a burst whose reconciles
/// are polled one after another is not split; and the most a lone start waits beside
/// reconciles that are slow to send nothing.
const PREPARING_QUIET: std::time::Duration = std::time::Duration::from_millis(20);

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

/// One call for `reqs`, then `freed` (the key may be called again), then each member's
/// outcome: the whole call's, or, when AWS refused it because of a member, the member's own.
async fn execute_batch(
    ec2: Arc<dyn Ec2Api>,
    (region, op): BatchKey,
    reqs: Vec<Member>,
    freed: oneshot::Sender<()>,
) {
    let mut by_id: BTreeMap<String, Vec<oneshot::Sender<AwsResult<()>>>> = BTreeMap::new();
    for r in reqs {
        by_id.entry(r.id).or_default().push(r.reply);
    }
    let ids: Vec<String> = by_id.keys().cloned().collect();
    let ec2 = &*ec2;
    let region = region.as_str();
    let whole = call(ec2, region, op, &ids).await;
    // Retries member by member do not hold back the next batch.
    let _ = freed.send(());
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
