//! The executor against a fake EC2 that records its calls.

use std::sync::Mutex;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;

use super::*;
use crate::aws::test_fakes::NoRds;
use crate::aws::{Ec2Filter, Page};

#[derive(Default)]
struct FakeEc2 {
    calls: Mutex<Vec<(String, Vec<String>, bool)>>,
    /// How long each StartInstances takes to be answered.
    start_delay: Duration,
    /// How long each CreateTags takes to be answered.
    tag_delay: Duration,
    /// CreateTags calls in flight now, and the most ever.
    tags_in_flight: std::sync::atomic::AtomicUsize,
    most_tags_in_flight: std::sync::atomic::AtomicUsize,
}

impl FakeEc2 {
    fn answering_starts_after(start_delay: Duration) -> Self {
        Self {
            start_delay,
            ..Default::default()
        }
    }
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
        async move {
            // The call is recorded when it is sent, answered after the delay.
            let r = self.check("start", ids, false);
            if !self.start_delay.is_zero() {
                tokio::time::sleep(self.start_delay).await;
            }
            r
        }
        .boxed()
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
        use std::sync::atomic::Ordering::SeqCst;
        async move {
            let now = self.tags_in_flight.fetch_add(1, SeqCst) + 1;
            self.most_tags_in_flight.fetch_max(now, SeqCst);
            let r = self.check("tag", ids, false);
            if !self.tag_delay.is_zero() {
                tokio::time::sleep(self.tag_delay).await;
            }
            self.tags_in_flight.fetch_sub(1, SeqCst);
            r
        }
        .boxed()
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tag_calls_of_many_resources_take_turns() {
    let ec2 = Arc::new(FakeEc2 {
        tag_delay: Duration::from_millis(5),
        ..Default::default()
    });
    let exec = Arc::new(Executor::new(ec2.clone(), Arc::new(NoRds)));
    // 100 Resources, each writing its own lock tags on its one instance, all at once.
    let outs = futures::future::join_all((0..100).map(|g| {
        let exec = exec.clone();
        tokio::spawn(async move {
            let target = Target {
                id: format!("i-{g:05}"),
                arn: None,
            };
            let tags = [("resource-booking/lock-owner".to_owned(), format!("ns/r{g}"))];
            exec.tag(ProviderType::Ec2, "eu-west-1", &[target], &tags)
                .await
        })
    }))
    .await;
    let outs: Vec<Outcomes> = outs.into_iter().map(Result::unwrap).collect();
    assert!(outs.iter().flatten().all(|(_, r)| r.is_ok()));
    assert_eq!(ec2.calls().len(), 100, "one CreateTags per Resource");
    let most = ec2
        .most_tags_in_flight
        .load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        most <= MAX_TAG_CALLS_IN_FLIGHT && most > 1,
        "{most} tag calls were in flight at once"
    );
}

#[tokio::test]
async fn starts_of_many_groups_are_coalesced_into_batches_of_at_most_1000() {
    let ec2 = Arc::new(FakeEc2::default());
    let exec = Arc::new(Executor::new(ec2.clone(), Arc::new(NoRds)));
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
    // One call per 1,000 IDs of each region: 1,000 + 1,000 + 500 and 3.
    let mut sorted = sizes.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, [3, 500, 1000, 1000], "{sizes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_sent_in_one_pass_of_a_task_join_one_call() {
    // A burst is gathered until it pauses for 1 ms: on a loaded machine the task polling the
    // join can be preempted mid-burst and split it. Every round must deliver every start in
    // calls of at most 1,000 IDs; most rounds (the bench measures the real figure) must make
    // exactly one call per 1,000 IDs.
    let mut optimal = 0;
    for round in 0..20 {
        let ec2 = Arc::new(FakeEc2::default());
        let exec = Arc::new(Executor::new(ec2.clone(), Arc::new(NoRds)));
        // As the Resource reconciles woken at one instant, polled one after another by their
        // controller's task: 1,500 starts of one instance each.
        let outs = tokio::spawn(async move {
            let exec = &exec;
            futures::future::join_all((0..1500).map(|g| async move {
                exec.start(ProviderType::Ec2, "eu-west-1", &ids(&format!("{g:04}y"), 1))
                    .await
            }))
            .await
        })
        .await
        .unwrap();
        assert!(outs.iter().flatten().all(|(_, r)| r.is_ok()));
        // The two calls go out concurrently: their order is not fixed, their sizes are.
        let mut sizes: Vec<usize> = ec2.calls().iter().map(|(_, ids, _)| ids.len()).collect();
        sizes.sort_unstable();
        assert_eq!(
            sizes.iter().sum::<usize>(),
            1500,
            "round {round}: {sizes:?}"
        );
        assert!(
            sizes.iter().all(|s| *s <= MAX_IDS_PER_CALL),
            "round {round}: {sizes:?}"
        );
        if sizes == [500, 1000] {
            optimal += 1;
        }
    }
    assert!(
        optimal >= 10,
        "one call per 1,000 IDs in only {optimal} of 20 rounds"
    );
}

/// A Resource reconcile holding `turn`: after `work`, its start of `id`, then its turn released
/// (as `act` does: the request is queued before the turn goes).
async fn reconcile_starting(
    exec: Arc<Executor>,
    turn: Preparing,
    work: Duration,
    id: &str,
) -> Outcomes {
    tokio::time::sleep(work).await;
    let ids = ids(id, 1);
    let (out, ()) = tokio::join!(
        biased;
        exec.start(ProviderType::Ec2, "eu-west-1", &ids),
        async { drop(turn) },
    );
    out
}

/// A fresh fake EC2, a count of turns, and an executor whose batcher reads that count.
fn executor_with_turns() -> (Arc<FakeEc2>, Turns, Arc<Executor>) {
    let ec2 = Arc::new(FakeEc2::default());
    let turns = Turns::default();
    let exec = Arc::new(Executor::with_turns(
        ec2.clone(),
        Arc::new(NoRds),
        turns.clone(),
    ));
    (ec2, turns, exec)
}

/// Whether the two starts of a round went out in one call (both succeeded, two IDs sent in all).
fn in_one_call(ec2: &FakeEc2, outs: &[Outcomes; 2], round: usize) -> bool {
    assert!(outs.iter().flatten().all(|(_, r)| r.is_ok()), "{outs:?}");
    let sizes: Vec<usize> = ec2.calls().iter().map(|(_, ids, _)| ids.len()).collect();
    assert_eq!(sizes.iter().sum::<usize>(), 2, "round {round}: {sizes:?}");
    sizes == [2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_waits_for_the_reconciles_still_preparing() {
    // Two Resource reconciles created together (both take their turn before either runs): one
    // sends its start at once, the other 2 ms later (its reads took that long). Without the
    // turns the first start was lone and went out alone; with them the batcher waits for the
    // second and both go in one call.
    let mut one_call = 0;
    for round in 0..10 {
        let (ec2, turns, exec) = executor_with_turns();
        let (first, second) = (turns.take(), turns.take());
        let a = tokio::spawn(reconcile_starting(exec.clone(), first, Duration::ZERO, "a"));
        let b = tokio::spawn(reconcile_starting(
            exec.clone(),
            second,
            Duration::from_millis(2),
            "b",
        ));
        if in_one_call(&ec2, &[a.await.unwrap(), b.await.unwrap()], round) {
            one_call += 1;
        }
    }
    // A worker descheduled for more than PREPARING_QUIET may split a round; the turns make it
    // rare.
    assert!(one_call >= 7, "one call in only {one_call} of 10 rounds");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_waits_for_the_resources_woken_with_it_whose_reconciles_come_later() {
    // The Resources' timer wakes a and b at one instant. kube's controller creates a's reconcile
    // at once and b's a tick of its queue later (each trigger is queued with its own
    // `Instant::now()`, and the queue pops by the millisecond): 2 ms here. a's start must wait
    // for b's, so the turn b's reconcile holds is reserved when the timer wakes b, before that
    // reconcile exists. With turns taken only when a reconcile is created, a's start was lone and
    // went out alone.
    use crate::wakeups::Wakeups;
    use booking_shared::api::Booking;
    let object = |name: &str| {
        let mut b = Booking::new(name, Default::default());
        b.metadata.namespace = Some("team".into());
        b
    };
    let mut one_call = 0;
    for round in 0..10 {
        let (ec2, turns, exec) = executor_with_turns();
        let wakeups = Arc::new(Wakeups::marking_fired(turns));
        let instant = chrono::Utc::now();
        wakeups.set("team", "a", Some(instant));
        wakeups.set("team", "b", Some(instant));
        let clock: booking_shared::time::Clock = Arc::new(chrono::Utc::now);
        let mut due = Box::pin(wakeups.clone().due::<Booking>(clock));
        for _ in 0..2 {
            due.next().await.expect("woken");
        }
        let a_turn = wakeups.take_fired(&object("a")).expect("a was woken");
        let a = tokio::spawn(reconcile_starting(
            exec.clone(),
            a_turn,
            Duration::ZERO,
            "a",
        ));
        tokio::time::sleep(Duration::from_millis(2)).await;
        let b_turn = wakeups.take_fired(&object("b")).expect("b was woken");
        let b = tokio::spawn(reconcile_starting(
            exec.clone(),
            b_turn,
            Duration::ZERO,
            "b",
        ));
        if in_one_call(&ec2, &[a.await.unwrap(), b.await.unwrap()], round) {
            one_call += 1;
        }
    }
    // A worker descheduled for more than PREPARING_QUIET may split a round; the turns make it
    // rare.
    assert!(one_call >= 7, "one call in only {one_call} of 10 rounds");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_turn_is_progress_so_the_batcher_waits_on_for_the_rest() {
    // Three Resources woken at one instant: a sends its start at once; b has nothing to start
    // and releases its turn 12 ms later; c sends its start 12 ms after that. c's start comes
    // more than PREPARING_QUIET after a's, but no step comes that long after the one before it,
    // so a's and c's starts go out in one call.
    let step = Duration::from_millis(12);
    assert!(step < PREPARING_QUIET && 2 * step > PREPARING_QUIET);
    let mut one_call = 0;
    for round in 0..10 {
        let (ec2, turns, exec) = executor_with_turns();
        let (a, b, c) = (turns.take(), turns.take(), turns.take());
        let a = tokio::spawn(reconcile_starting(exec.clone(), a, Duration::ZERO, "a"));
        tokio::spawn(async move {
            tokio::time::sleep(step).await;
            drop(b);
        });
        let c = tokio::spawn(reconcile_starting(exec.clone(), c, 2 * step, "c"));
        if in_one_call(&ec2, &[a.await.unwrap(), c.await.unwrap()], round) {
            one_call += 1;
        }
    }
    assert!(one_call >= 7, "one call in only {one_call} of 10 rounds");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_is_not_held_long_by_a_reconcile_that_sends_nothing() {
    let ec2 = Arc::new(FakeEc2::default());
    let turns = Turns::default();
    let exec = Executor::with_turns(ec2.clone(), Arc::new(NoRds), turns.clone());
    // A reconcile still preparing (waiting on a slow read) that will send nothing soon.
    let stalled = turns.take();
    let began = std::time::Instant::now();
    let out = exec
        .start(ProviderType::Ec2, "eu-west-1", &ids("s", 1))
        .await;
    let waited = began.elapsed();
    assert!(out[0].1.is_ok(), "{out:?}");
    assert_eq!(ec2.calls().len(), 1);
    assert!(
        waited >= PREPARING_QUIET && waited < Duration::from_millis(500),
        "the start waited {waited:?} for a reconcile that sent nothing"
    );
    drop(stalled);
}

#[test]
fn a_lone_start_is_sent_at_once_without_a_timer() {
    // A runtime without a time driver: waiting for any timer would panic the batching task,
    // and the start would fail.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let ec2 = Arc::new(FakeEc2::default());
    let out = rt.block_on(async {
        let exec = Executor::new(ec2.clone(), Arc::new(NoRds));
        exec.start(ProviderType::Ec2, "eu-west-1", &ids("a", 1))
            .await
    });
    assert!(out[0].1.is_ok(), "{out:?}");
    assert_eq!(ec2.calls().len(), 1);
}

#[tokio::test]
async fn starts_arriving_during_a_call_go_out_together_when_it_is_answered() {
    const CALL: Duration = Duration::from_millis(400);
    let ec2 = Arc::new(FakeEc2::answering_starts_after(CALL));
    let exec = Arc::new(Executor::new(ec2.clone(), Arc::new(NoRds)));
    let t0 = tokio::time::Instant::now();
    // A start at 0 ms, three more at 50, 100 and 150 ms while the first call is in flight, one
    // in another region at 200 ms, and one more at 1,200 ms, after everything was answered.
    let mut tasks = Vec::new();
    for (k, region) in [
        (0, "eu-west-1"),
        (1, "eu-west-1"),
        (2, "eu-west-1"),
        (3, "eu-west-1"),
        (4, "us-east-1"),
        (24, "eu-west-1"),
    ] {
        let exec = exec.clone();
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50 * k)).await;
            let out = exec
                .start(ProviderType::Ec2, region, &ids(&format!("{k}x"), 1))
                .await;
            assert!(out[0].1.is_ok(), "{out:?}");
            t0.elapsed()
        }));
    }
    let mut answered = Vec::new();
    for t in tasks {
        answered.push(t.await.unwrap());
    }
    let calls: Vec<Vec<String>> = ec2.calls().into_iter().map(|(_, ids, _)| ids).collect();
    assert_eq!(
        calls,
        [
            ids("0x", 1),
            ids("4x", 1),
            [ids("1x", 1), ids("2x", 1), ids("3x", 1)].concat(),
            ids("24x", 1),
        ],
        "one call in flight per region: the first at once, the next three together when it was \
         answered, another region's not held back"
    );
    // The three were sent when the first call was answered, not when they arrived.
    assert!(
        answered[1..4].iter().all(|a| *a >= 2 * CALL),
        "{answered:?}"
    );
}

#[tokio::test]
async fn one_failing_member_does_not_block_the_others() {
    let ec2 = Arc::new(FakeEc2::default());
    let exec = Executor::new(ec2.clone(), Arc::new(NoRds));
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
    let exec = Executor::new(ec2.clone(), Arc::new(NoRds));
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
    let exec = Executor::new(ec2.clone(), Arc::new(NoRds));
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
    let exec = Executor::new(Arc::new(FakeEc2::default()), rds.clone());
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_callers_members_always_share_one_call() {
    // The batcher runs on the other worker and may look between any two sends of a caller:
    // a Resource's group must still go out in one call, whatever the timing.
    for round in 0..200 {
        let ec2 = Arc::new(FakeEc2::default());
        let exec = Executor::new(ec2.clone(), Arc::new(NoRds));
        let out = exec
            .start(ProviderType::Ec2, "eu-west-1", &ids("g", 5))
            .await;
        assert!(out.iter().all(|(_, r)| r.is_ok()), "{out:?}");
        let calls = ec2.calls();
        assert_eq!(calls.len(), 1, "round {round}: {calls:?}");
        assert_eq!(calls[0].1.len(), 5, "round {round}: {calls:?}");
    }
}
