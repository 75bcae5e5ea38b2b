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
use std::sync::Arc;

use booking_shared::api::Booking;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, Stream, StreamExt};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use crate::context::Context;
use crate::error::Result;
use crate::index::BookingIndex;
use crate::reconcile::{RETRY_SOON, after_failure, counted};

/// The keys waiting, queued once each, in the order they came.
#[derive(Default)]
struct Waiting {
    order: VecDeque<ObjectRef<Booking>>,
    queued: HashSet<ObjectRef<Booking>>,
    /// Reconciling now; a trigger meanwhile marks the key in `again`.
    running: HashSet<ObjectRef<Booking>>,
    again: HashSet<ObjectRef<Booking>>,
}

impl Waiting {
    fn push(&mut self, key: ObjectRef<Booking>) {
        if self.running.contains(&key) {
            self.again.insert(key);
        } else if self.queued.insert(key.clone()) {
            self.order.push_back(key);
        }
    }

    fn pop(&mut self) -> Option<ObjectRef<Booking>> {
        let key = self.order.pop_front()?;
        self.queued.remove(&key);
        Some(key)
    }

    fn started(&mut self, key: ObjectRef<Booking>) {
        self.running.insert(key);
    }

    fn finished(&mut self, key: &ObjectRef<Booking>) {
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
    let (retry_tx, retry_rx) = futures::channel::mpsc::unbounded::<ObjectRef<Booking>>();
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
            // Deleted meanwhile: never reconciled again.
            let Some(booking) = index.get(&key) else {
                continue;
            };
            let backoff_key = crate::reconcile::retry_key(kind, &booking);
            let reconciling = counted(
                kind,
                backoff_key.clone(),
                reconcile(Arc::new(booking), ctx.clone()),
                ctx.clone(),
            );
            waiting.started(key.clone());
            in_flight.push(async move { (key, backoff_key, reconciling.await) });
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
            Some((key, backoff_key, result)) = in_flight.next(), if !in_flight.is_empty() => {
                waiting.finished(&key);
                let retry = match result {
                    Ok(action) if action == Action::await_change() => None,
                    // The reconcilers run here ask for later runs at an instant through their
                    // wakeups; a delay asked for is a retry soon (the object changed under them).
                    Ok(_) => Some(RETRY_SOON),
                    Err(err) => Some(after_failure(kind, &backoff_key, &err, &ctx)),
                };
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

    fn key(name: &str) -> ObjectRef<Booking> {
        ObjectRef::new(name).within("ns")
    }

    #[test]
    fn a_key_waits_once_and_runs_again_after_a_trigger_while_it_ran() {
        let mut w = Waiting::default();
        w.push(key("a"));
        w.push(key("b"));
        w.push(key("a"));
        assert_eq!(w.pop(), Some(key("a")));
        w.started(key("a"));
        // Triggered while it runs: not queued beside itself, but once more after.
        w.push(key("a"));
        w.push(key("a"));
        assert_eq!(w.pop(), Some(key("b")));
        assert_eq!(w.pop(), None);
        w.finished(&key("a"));
        assert_eq!(w.pop(), Some(key("a")));
        assert_eq!(w.pop(), None);
        // Finished without a trigger meanwhile: nothing more.
        w.started(key("a"));
        w.finished(&key("a"));
        assert_eq!(w.pop(), None);
    }
}
