//! The work queue of the Booking and notification reconcilers.
//!
//! kube's `Controller` reconciles only objects it finds in a reflector store, which keeps every
//! Booking whole: about 1.8 KiB of heap each with the store's keys, most of the controller's
//! memory at 10,000 bookings. The booking index keeps each booking compact instead (see
//! `index`), and these two reconcilers take their bookings from it, through this queue.
//!
//! It keeps kube's controller's guarantees: a booking triggered again while it waits is queued
//! once; a booking triggered while its reconcile runs is reconciled once more afterwards, never
//! twice at once; at most `concurrency` reconciles run together (0: no bound); a failed
//! reconcile runs again after its backoff ([`crate::reconcile::after_failure`]); a booking gone
//! from the index when its turn comes is skipped. After the shutdown signal nothing new starts
//! and the reconciles in flight finish. The reconcile is created when the booking leaves the
//! queue, as kube's controller does. Later runs at an instant are the reconcilers' own
//! `Wakeups`, which arrive here as triggers.

use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use booking_shared::api::Booking;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, Stream, StreamExt};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use crate::context::Context;
use crate::error::Result;
use crate::index::BookingIndex;
use crate::reconcile::{RETRY_SOON, after_failure, counted, retry_key};

/// The keys waiting, queued once each, in the order they came.
struct Waiting<T> {
    order: VecDeque<T>,
    queued: HashSet<T>,
    /// Reconciling now; a trigger meanwhile marks the key in `again`.
    running: HashSet<T>,
    again: HashSet<T>,
}

impl<T> Default for Waiting<T> {
    fn default() -> Self {
        Self {
            order: VecDeque::new(),
            queued: HashSet::new(),
            running: HashSet::new(),
            again: HashSet::new(),
        }
    }
}

impl<T: Clone + Eq + Hash> Waiting<T> {
    fn push(&mut self, key: T) {
        if self.running.contains(&key) {
            self.again.insert(key);
        } else if self.queued.insert(key.clone()) {
            self.order.push_back(key);
        }
    }

    fn pop(&mut self) -> Option<T> {
        let key = self.order.pop_front()?;
        self.queued.remove(&key);
        Some(key)
    }

    fn started(&mut self, key: T) {
        self.running.insert(key);
    }

    fn finished(&mut self, key: &T) {
        self.running.remove(key);
        if self.again.remove(key) {
            self.push(key.clone());
        }
    }
}

/// Runs `reconcile` on the bookings of `index` that `triggers` names, under `kind` (the metric
/// label), until `shutdown` resolves and the reconciles in flight have finished.
pub async fn run<F, Fut>(
    kind: &'static str,
    triggers: impl Stream<Item = ObjectRef<Booking>> + Send,
    index: Arc<BookingIndex>,
    reconcile: F,
    ctx: Arc<Context>,
    concurrency: u16,
    shutdown: impl Future<Output = ()> + Send,
) where
    F: Fn(Arc<Booking>, Arc<Context>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action>> + Send + 'static,
{
    let start = move |booking: Booking| {
        let key = retry_key(kind, &booking);
        let ctx = ctx.clone();
        let reconciling = counted(
            kind,
            key.clone(),
            reconcile(Arc::new(booking), ctx.clone()),
            ctx.clone(),
        );
        async move {
            match reconciling.await {
                Ok(action) if action == Action::await_change() => None,
                // The reconcilers run here ask for later runs at an instant through their
                // wakeups; a delay asked for is a retry soon (the object changed under them).
                Ok(_) => Some(RETRY_SOON),
                Err(err) => Some(after_failure(kind, &key, &err, &ctx)),
            }
        }
    };
    drain(triggers, |key| index.get(key), start, concurrency, shutdown).await;
}

/// The queue itself: takes the keys `triggers` names, looks each up with `lookup` when its turn
/// comes (skipped when gone), and runs `start`'s future on it, which tells whether and when to
/// run it again. Ends once `shutdown` has resolved and the runs in flight have finished.
async fn drain<T, V, Fut>(
    triggers: impl Stream<Item = T>,
    lookup: impl Fn(&T) -> Option<V>,
    start: impl Fn(V) -> Fut,
    concurrency: u16,
    shutdown: impl Future<Output = ()>,
) where
    T: Clone + Eq + Hash + Send + 'static,
    Fut: Future<Output = Option<Duration>>,
{
    let (retry_tx, retry_rx) = futures::channel::mpsc::unbounded::<T>();
    let mut incoming = std::pin::pin!(futures::stream::select(triggers, retry_rx));
    let mut incoming_open = true;
    let mut waiting = Waiting::default();
    let mut in_flight = FuturesUnordered::new();
    let mut shutdown = std::pin::pin!(shutdown.fuse());
    let mut stopping = false;
    let bound = usize::from(concurrency);
    loop {
        while !stopping && (bound == 0 || in_flight.len() < bound) {
            let Some(key) = waiting.pop() else { break };
            // Gone meanwhile: never run again.
            let Some(value) = lookup(&key) else {
                continue;
            };
            let running = start(value);
            waiting.started(key.clone());
            in_flight.push(async move { (key, running.await) });
        }
        if stopping && in_flight.is_empty() {
            return;
        }
        tokio::select! {
            () = &mut shutdown, if !stopping => stopping = true,
            next = incoming.next(), if incoming_open && !stopping => match next {
                Some(key) => waiting.push(key),
                None => incoming_open = false,
            },
            Some((key, retry)) = in_flight.next(), if !in_flight.is_empty() => {
                waiting.finished(&key);
                if let Some(after) = retry {
                    let tx = retry_tx.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(after).await;
                        // The queue has shut down when the receiver is gone: nothing to retry.
                        let _ = tx.unbounded_send(key);
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn a_key_waits_once_and_runs_again_after_a_trigger_while_it_ran() {
        let mut w = Waiting::default();
        w.push("a");
        w.push("b");
        w.push("a");
        assert_eq!(w.pop(), Some("a"));
        w.started("a");
        // Triggered while it runs: not queued beside itself, but once more after.
        w.push("a");
        w.push("a");
        assert_eq!(w.pop(), Some("b"));
        assert_eq!(w.pop(), None);
        w.finished(&"a");
        assert_eq!(w.pop(), Some("a"));
        assert_eq!(w.pop(), None);
        // Finished without a trigger meanwhile: nothing more.
        w.started("a");
        w.finished(&"a");
        assert_eq!(w.pop(), None);
    }

    /// What the runs of a test queue did: the keys started, in order, and the most at once.
    #[derive(Default)]
    struct Log {
        started: Vec<&'static str>,
        running: usize,
        most: usize,
    }

    /// A queue over the keys `a`..`e` (`gone` is never found), each run taking 10 ms; `b`
    /// fails its first run (retried after 1 s). Returns the log once the queue has ended.
    async fn queue(
        triggers: impl Stream<Item = &'static str>,
        concurrency: u16,
        shutdown: impl Future<Output = ()>,
    ) -> Log {
        let log = Arc::new(Mutex::new(Log::default()));
        let start = |key: &'static str| {
            let log = log.clone();
            async move {
                {
                    let mut l = log.lock().unwrap();
                    l.started.push(key);
                    l.running += 1;
                    l.most = l.most.max(l.running);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                let mut l = log.lock().unwrap();
                l.running -= 1;
                let first_of_b = key == "b" && l.started.iter().filter(|k| **k == "b").count() == 1;
                first_of_b.then_some(Duration::from_secs(1))
            }
        };
        let lookup = |key: &&'static str| (*key != "gone").then_some(*key);
        drain(triggers, lookup, start, concurrency, shutdown).await;
        Arc::try_unwrap(log).ok().unwrap().into_inner().unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn runs_are_bounded_deduplicated_retried_and_drained_at_shutdown() {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        for key in ["a", "b", "a", "c", "gone", "d", "e", "a"] {
            tx.unbounded_send(key).unwrap();
        }
        let feeder = async move {
            // While `a`'s first run is in flight (t = 0..10 ms), another trigger of it: it runs
            // once more afterwards, not beside itself.
            tokio::time::sleep(Duration::from_millis(5)).await;
            tx.unbounded_send("a").unwrap();
            // The shutdown comes after `b`'s retry (1 s after its failure).
            tokio::time::sleep(Duration::from_secs(2)).await;
            drop(tx);
        };
        let (log, ()) = tokio::join!(
            queue(rx, 2, async {
                tokio::time::sleep(Duration::from_secs(2)).await;
            }),
            feeder
        );
        assert_eq!(log.most, 2, "at most 2 at once");
        assert_eq!(log.started, vec!["a", "b", "c", "d", "e", "a", "b"]);
        assert_eq!(
            log.running, 0,
            "the runs in flight finished before the queue ended"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_starts_after_the_shutdown_signal() {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        tx.unbounded_send("a").unwrap();
        let feeder = async move {
            // After the signal (1 ms), while `a` still runs (until 10 ms).
            tokio::time::sleep(Duration::from_millis(5)).await;
            tx.unbounded_send("c").unwrap();
        };
        let (log, ()) = tokio::join!(
            queue(rx, 0, async {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }),
            feeder
        );
        // `a` was running when the signal came: it finished; `c` never ran.
        assert_eq!(log.started, vec!["a"]);
        assert_eq!(log.running, 0);
    }
}
