//! One watch per kind, fanned out to every controller that reads its cache (the Resources; the
//! Bookings are kept by the booking index and fed to their queues by `feeds`), and the signal
//! that a cache holds its first full list.
//!
//! The watch's reflector updates the cache, then hands each event to [`Fanout::send`], which
//! passes the cached object (an `Arc`, never a copy) to every subscriber: on `Apply` the object
//! itself, on `InitDone` every object the list brought that the cache did not hold at that
//! version (on a first list, every object; on a relist after a watch gap, only what changed
//! during the gap, so that a relist of unchanged objects wakes no reconcile). Each subscriber
//! is the trigger stream of one `Controller` (`Controller::for_shared_stream`), which looks the
//! object up again in the cache when its reconcile runs.
//!
//! Both replace parts of kube-runtime (5.0) that can lose a wake-up, each of which freezes the
//! reconciles of some objects for the rest of the process's life:
//!
//! - `Store::wait_until_ready` keeps a single waker (a shared oneshot receiver): of many
//!   reconciles waiting together for a cache, only the last is woken. At start-up every Booking
//!   is reconciled before the Resource list has arrived, so most of them waited forever, and a
//!   reconcile in flight also swallows every later trigger of its object: their phases froze
//!   after a restart, and no change of the booking woke them. [`Synced`] wakes every waiter.
//! - The subscriber of kube's shared streams (`store_shared` + `subscribe`) answers `Pending`
//!   without registering for a wake-up when the object it was told about has left the cache
//!   meanwhile (a booking deleted, e.g. by a scheduler pruning its history, between the relist
//!   that announced it and the controller reading the announcement); the controller never polls
//!   that stream again. A channel of objects cannot lose a wake-up, and a deleted object's
//!   reconcile is simply skipped by the controller (it is not in the cache any more).

use std::sync::Arc;

use futures::channel::mpsc;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;

/// Whether a cache (or an index fed with it) holds its first full list. Any number of tasks may
/// wait for it at once; all are woken.
pub struct Synced(tokio::sync::watch::Sender<bool>);

impl Default for Synced {
    fn default() -> Self {
        Self(tokio::sync::watch::Sender::new(false))
    }
}

impl Synced {
    /// Records that the first full list is in.
    pub fn mark(&self) {
        self.0.send_replace(true);
    }

    /// Whether the first full list is in.
    pub fn is_synced(&self) -> bool {
        *self.0.borrow()
    }

    /// Waits until [`Synced::mark`] was called; returns at once afterwards.
    pub async fn wait(&self) {
        let mut rx = self.0.subscribe();
        // The sender lives in `self`, so the wait cannot fail.
        let _ = rx.wait_for(|synced| *synced).await;
    }
}

/// The subscribers of one watch.
pub struct Fanout<K: kube::Resource + Clone + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    subscribers: Vec<mpsc::UnboundedSender<Arc<K>>>,
    /// During a (re)list: the objects the cache held when it began (the reflector swaps the
    /// listed objects in at `InitDone` only), to tell what the list changed.
    before: Option<Vec<Arc<K>>>,
}

impl<K> Default for Fanout<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    fn default() -> Self {
        Self {
            subscribers: Vec::new(),
            before: None,
        }
    }
}

impl<K> Fanout<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    /// A new subscriber: the trigger stream of one controller.
    pub fn subscribe(&mut self) -> mpsc::UnboundedReceiver<Arc<K>> {
        let (tx, rx) = mpsc::unbounded();
        self.subscribers.push(tx);
        rx
    }

    /// Passes what `event` changed to every subscriber. Call it after the reflector has applied
    /// the event to `cache` (the order `kube::runtime::reflector` yields in).
    ///
    /// A (re)list announces, at its `InitDone`, the objects that are new or at another
    /// `resourceVersion` than the cache held when the list began. An object the list left
    /// unchanged needs no reconcile: its reconciler saw this very version, and its wake-ups at
    /// later instants are kept by the controllers. What the gap changed around it (a booking of
    /// the same Resource gone, a Resource deleted) is announced by the index's and the
    /// Resource triggers' own comparison of before and after.
    pub fn send(&mut self, cache: &Store<K>, event: &watcher::Event<K>) {
        match event {
            watcher::Event::Apply(obj) => {
                let cached = cache
                    .get(&kube::runtime::reflector::ObjectRef::from_obj(obj))
                    .unwrap_or_else(|| Arc::new(obj.clone()));
                self.to_all(&cached);
            }
            // A list that restarts (an error part-way) keeps the first snapshot: the cache is
            // swapped only at `InitDone`.
            watcher::Event::Init => {
                if self.before.is_none() {
                    self.before = Some(cache.state());
                }
            }
            watcher::Event::InitDone => {
                let before = self.before.take().unwrap_or_default();
                let versions: std::collections::HashMap<
                    (Option<&str>, Option<&str>),
                    Option<&str>,
                > = before
                    .iter()
                    .map(|o| {
                        let meta = o.meta();
                        (
                            (meta.namespace.as_deref(), meta.name.as_deref()),
                            meta.resource_version.as_deref(),
                        )
                    })
                    .collect();
                for obj in cache.state() {
                    let meta = obj.meta();
                    let key = (meta.namespace.as_deref(), meta.name.as_deref());
                    let unchanged = meta.resource_version.is_some()
                        && versions.get(&key) == Some(&meta.resource_version.as_deref());
                    if !unchanged {
                        self.to_all(&obj);
                    }
                }
            }
            watcher::Event::Delete(_) | watcher::Event::InitApply(_) => {}
        }
    }

    fn to_all(&self, obj: &Arc<K>) {
        for s in &self.subscribers {
            // A subscriber gone means its controller has shut down: nothing to tell it.
            let _ = s.unbounded_send(obj.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use kube::runtime::reflector;

    fn cm(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    fn names(got: &[Arc<ConfigMap>]) -> Vec<String> {
        got.iter()
            .map(|c| c.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    /// A relist announces `a`, `a` is deleted before the subscriber reads the announcement, then
    /// `b` is applied: the subscriber still sees `b` (kube's shared-stream subscriber would wait
    /// forever at `a`).
    #[tokio::test]
    async fn an_object_deleted_before_it_is_read_never_stalls_later_events() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let mut fanout = Fanout::default();
        let mut first = fanout.subscribe();
        let mut second = fanout.subscribe();
        let mut feed = |ev: watcher::Event<ConfigMap>| {
            writer.apply_watcher_event(&ev);
            fanout.send(&store, &ev);
        };
        feed(watcher::Event::Init);
        feed(watcher::Event::InitApply(cm("a")));
        feed(watcher::Event::InitDone);
        feed(watcher::Event::Delete(cm("a")));
        feed(watcher::Event::Apply(cm("b")));
        for rx in [&mut first, &mut second] {
            let got: Vec<_> = rx.by_ref().take(2).collect().await;
            assert_eq!(names(&got), ["a", "b"]);
        }
        assert!(
            store
                .get(&reflector::ObjectRef::new("a").within("ns"))
                .is_none()
        );
    }

    /// A hundred reconciles waiting together are all woken when the list is in.
    #[tokio::test]
    async fn every_waiter_is_woken_when_the_first_list_is_in() {
        let synced = Arc::new(Synced::default());
        let waiters: Vec<_> = (0..100)
            .map(|_| {
                let synced = synced.clone();
                tokio::spawn(async move { synced.wait().await })
            })
            .collect();
        tokio::task::yield_now().await;
        assert!(!synced.is_synced());
        synced.mark();
        let all = futures::future::join_all(waiters);
        tokio::time::timeout(std::time::Duration::from_secs(5), all)
            .await
            .expect("every waiter woken");
        assert!(synced.is_synced());
        // And a late waiter returns at once.
        synced.wait().await;
    }

    #[tokio::test]
    async fn a_relist_announces_every_cached_object_and_deletions_announce_nothing() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let mut fanout = Fanout::default();
        let mut rx = fanout.subscribe();
        for ev in [
            watcher::Event::Init,
            watcher::Event::InitApply(cm("x")),
            watcher::Event::InitApply(cm("y")),
            watcher::Event::InitDone,
            watcher::Event::Delete(cm("x")),
        ] {
            writer.apply_watcher_event(&ev);
            fanout.send(&store, &ev);
        }
        drop(fanout);
        let mut got = names(&rx.by_ref().collect::<Vec<_>>().await);
        got.sort();
        assert_eq!(got, ["x", "y"]);
    }

    /// A relist after a watch gap announces only what the gap changed: objects new, or at
    /// another resourceVersion. A list that restarts part-way compares with the cache as it
    /// was before the first attempt.
    #[tokio::test]
    async fn a_relist_announces_only_what_changed_during_the_gap() {
        let at = |name: &str, version: &str| {
            let mut c = cm(name);
            c.metadata.resource_version = Some(version.into());
            c
        };
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let mut fanout = Fanout::default();
        let mut rx = fanout.subscribe();
        let mut feed = |ev: watcher::Event<ConfigMap>| {
            writer.apply_watcher_event(&ev);
            fanout.send(&store, &ev);
        };
        for ev in [
            watcher::Event::Init,
            watcher::Event::InitApply(at("kept", "1")),
            watcher::Event::InitApply(at("changed", "1")),
            watcher::Event::InitApply(at("gone", "1")),
            watcher::Event::InitDone,
        ] {
            feed(ev);
        }
        let mut first = names(&rx.by_ref().take(3).collect::<Vec<_>>().await);
        first.sort();
        assert_eq!(first, ["changed", "gone", "kept"]);
        for ev in [
            watcher::Event::Init,
            watcher::Event::InitApply(at("kept", "1")),
            // The list fails part-way and starts again.
            watcher::Event::Init,
            watcher::Event::InitApply(at("kept", "1")),
            watcher::Event::InitApply(at("changed", "7")),
            watcher::Event::InitApply(at("new", "8")),
            watcher::Event::InitDone,
            watcher::Event::Apply(at("kept", "9")),
        ] {
            feed(ev);
        }
        drop(fanout);
        let got = names(&rx.by_ref().collect::<Vec<_>>().await);
        let (mut relisted, after) = (got[..2].to_vec(), &got[2..]);
        relisted.sort();
        assert_eq!(relisted, ["changed", "new"]);
        assert_eq!(after, ["kept"]);
    }
}
