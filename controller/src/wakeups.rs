//! The instants at which the Booking and notification reconcilers must run again (a booking's
//! start and end, its next notification), in one timer per controller instead of one entry per
//! booking in kube's controller scheduler.
//!
//! kube's scheduler keeps a requeue as a `DelayQueue` entry and a map entry keyed by the whole
//! object reference (about 560 bytes per booking); with 100,000 bookings scheduled weeks ahead
//! that is most of the controller's memory beside the cache itself. A [`Wakeups`] keeps each
//! object's next instant once (about 150 bytes: the instant, and the namespace and name in one
//! shared string) and sends the object's reference to its controller when the instant comes,
//! as a trigger. The controller then reconciles it as it would after a requeue: the instant is
//! computed by the reconciler (time is a parameter of its pure logic), the timer only waits for
//! it, and nothing is polled.
//!
//! Each object has at most one instant: setting a new one replaces the old (a booking that is
//! edited or reaches its start moves on to its next boundary), and `None` or a deleted booking
//! removes it. Failures keep kube's own requeue with backoff (see `reconcile::drive`).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use booking_shared::time::Clock;
use chrono::{DateTime, Utc};
use futures::Stream;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::Notify;

use crate::aws::executor::{Preparing, Turns};

/// The next instant of each object of one controller, in the order they come.
#[derive(Default)]
pub struct Wakeups {
    state: Mutex<State>,
    /// Woken when an instant earlier than every other is set, so that the timer sleeps until it.
    earlier: Notify,
    /// When set, the objects the timer woke are remembered until [`Wakeups::take_fired`], each
    /// with a turn of these reserved for its reconcile from the moment it is woken.
    marks: Option<Turns>,
}

#[derive(Default)]
struct State {
    /// `namespace/name` → its instant.
    by_key: HashMap<Arc<str>, DateTime<Utc>>,
    /// The same entries by instant.
    queue: BTreeSet<(DateTime<Utc>, Arc<str>)>,
    /// The objects the timer woke whose reconcile has not taken the mark yet (only when
    /// `marks`).
    fired: std::collections::HashSet<Arc<str>>,
}

impl State {
    fn set(&mut self, key: &str, at: Option<DateTime<Utc>>) -> bool {
        let old = self.by_key.get_key_value(key).map(|(k, t)| (k.clone(), *t));
        if old.as_ref().map(|(_, t)| *t) == at {
            return false;
        }
        let key = match old {
            Some((k, t)) => {
                self.queue.remove(&(t, k.clone()));
                k
            }
            None => Arc::from(key),
        };
        match at {
            Some(at) => {
                let first = self.queue.first().is_none_or(|(t, _)| at < *t);
                self.queue.insert((at, key.clone()));
                self.by_key.insert(key, at);
                first
            }
            None => {
                self.by_key.remove(&key);
                false
            }
        }
    }

    /// Removes and returns the first entry due at `now`, or the instant of the first one.
    fn pop_due(&mut self, now: DateTime<Utc>) -> Result<Arc<str>, Option<DateTime<Utc>>> {
        match self.queue.first() {
            Some((at, _)) if *at <= now => {
                let (_, key) = self.queue.pop_first().ok_or(None)?;
                self.by_key.remove(&key);
                Ok(key)
            }
            Some((at, _)) => Err(Some(*at)),
            None => Err(None),
        }
    }
}

fn key(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
}

impl Wakeups {
    /// A timer that also remembers which objects it woke, until their reconcile asks
    /// ([`Wakeups::take_fired`]): the Resource reconciler tells a reconcile woken at its
    /// instant (a start or stop may be due) from one woken by a change. Each object woken
    /// reserves one of `turns` at once, before its controller even creates its reconcile.
    pub fn marking_fired(turns: Turns) -> Self {
        Self {
            marks: Some(turns),
            ..Self::default()
        }
    }

    /// The turn reserved for `obj` if the timer woke it since this was last asked (always
    /// `None` unless [`Wakeups::marking_fired`]); asking takes the mark.
    pub fn take_fired<K: kube::Resource>(&self, obj: &K) -> Option<Preparing> {
        let turns = self.marks.as_ref()?;
        let meta = obj.meta();
        let key = key(
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default(),
        );
        let marked = self.lock().fired.remove(key.as_str());
        marked.then(|| turns.claim())
    }

    /// Sets (or, with `None`, removes) the next instant of `namespace/name`.
    pub fn set(&self, ns: &str, name: &str, at: Option<DateTime<Utc>>) {
        let earliest = self.lock().set(&key(ns, name), at);
        if earliest {
            self.earlier.notify_one();
        }
    }

    /// The next instant set for `namespace/name`.
    pub fn get(&self, ns: &str, name: &str) -> Option<DateTime<Utc>> {
        self.lock().by_key.get(key(ns, name).as_str()).copied()
    }

    /// How many objects have an instant.
    pub fn len(&self) -> usize {
        self.lock().by_key.len()
    }

    /// Whether no object has an instant.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What a reconcile of `obj` returns when it must run again at `at` (or only on a change,
    /// with `None`): the instant is kept here and the controller waits for a change or for it.
    pub fn requeue<K: kube::Resource>(&self, obj: &K, at: Option<DateTime<Utc>>) -> Action {
        self.set_of(obj, at);
        Action::await_change()
    }

    /// Removes the instant of `obj` (deleted: it is never reconciled again), and its mark and
    /// turn.
    pub fn forget<K: kube::Resource>(&self, obj: &K) {
        self.set_of(obj, None);
        drop(self.take_fired(obj));
    }

    fn set_of<K: kube::Resource>(&self, obj: &K, at: Option<DateTime<Utc>>) {
        let meta = obj.meta();
        self.set(
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default(),
            at,
        );
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The references of the objects whose instant has come, each when it comes by `clock`:
    /// the triggers of their controller. Ends never; meant for one controller's
    /// `reconcile_on`.
    pub fn due<K>(self: Arc<Self>, clock: Clock) -> impl Stream<Item = ObjectRef<K>> + Send
    where
        K: kube::Resource<DynamicType = ()>,
    {
        futures::stream::unfold(self, move |wakeups| {
            let clock = clock.clone();
            async move {
                loop {
                    // Created before the queue is read: an earlier instant set meanwhile is
                    // not missed (`notify_one` keeps its permit for this waiter).
                    let earlier = wakeups.earlier.notified();
                    let next = {
                        let mut state = wakeups.lock();
                        let next = state.pop_due(clock());
                        if let (Ok(key), Some(turns)) = (&next, &wakeups.marks)
                            && state.fired.insert(key.clone())
                        {
                            turns.reserve();
                        }
                        next
                    };
                    match next {
                        Ok(key) => {
                            drop(earlier);
                            let (ns, name) = key.split_once('/').unwrap_or(("", &key));
                            let obj = ObjectRef::new(name).within(ns);
                            return Some((obj, wakeups));
                        }
                        Err(Some(at)) => {
                            let wait = (at - clock()).to_std().unwrap_or_default();
                            tokio::select! {
                                () = tokio::time::sleep(wait) => {}
                                () = earlier => {}
                            }
                        }
                        Err(None) => earlier.await,
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use booking_shared::api::Booking;
    use futures::StreamExt;

    fn at(s: &str) -> DateTime<Utc> {
        booking_shared::time::parse_rfc3339("t", s).unwrap()
    }

    #[test]
    fn one_instant_per_object_replaced_or_removed() {
        let mut s = State::default();
        assert!(s.set("a/x", Some(at("2031-01-10T10:00:00Z"))));
        assert!(!s.set("a/y", Some(at("2031-01-10T11:00:00Z"))));
        assert!(
            s.set("a/y", Some(at("2031-01-10T09:00:00Z"))),
            "earliest now"
        );
        assert!(!s.set("a/y", Some(at("2031-01-10T09:00:00Z"))), "unchanged");
        assert_eq!(s.queue.len(), 2);
        s.set("a/x", None);
        assert_eq!(s.queue.len(), 1);
        assert_eq!(s.by_key.len(), 1);
        assert_eq!(
            s.pop_due(at("2031-01-10T08:00:00Z")),
            Err(Some(at("2031-01-10T09:00:00Z")))
        );
        assert_eq!(s.pop_due(at("2031-01-10T09:00:00Z")).as_deref(), Ok("a/y"));
        assert_eq!(s.pop_due(at("2031-01-10T09:00:00Z")), Err(None));
        assert!(s.by_key.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn each_object_is_sent_when_its_instant_comes_and_not_before() {
        let start = at("2031-01-10T10:00:00Z");
        let origin = tokio::time::Instant::now();
        let clock: Clock = Arc::new(move || {
            start + chrono::Duration::from_std(origin.elapsed()).unwrap_or_default()
        });
        let w = Arc::new(Wakeups::default());
        w.set("team", "late", Some(at("2031-01-10T10:00:30Z")));
        let mut due = Box::pin(w.clone().due::<Booking>(clock.clone()));
        // An earlier instant set while the timer sleeps for a later one.
        w.set("team", "early", Some(at("2031-01-10T10:00:10Z")));
        w.set("team", "gone", Some(at("2031-01-10T10:00:20Z")));
        w.set("team", "gone", None);
        let first = due.next().await.unwrap();
        assert_eq!(first.name, "early");
        assert_eq!(first.namespace.as_deref(), Some("team"));
        assert_eq!(clock(), at("2031-01-10T10:00:10Z"));
        let second = due.next().await.unwrap();
        assert_eq!(second.name, "late");
        assert_eq!(clock(), at("2031-01-10T10:00:30Z"));
        assert!(w.is_empty());
        let none = tokio::time::timeout(std::time::Duration::from_secs(3600), due.next()).await;
        assert!(none.is_err(), "nothing more is sent");
    }

    #[tokio::test(start_paused = true)]
    async fn objects_woken_by_the_timer_are_told_apart_until_asked() {
        let start = at("2031-01-10T10:00:00Z");
        let origin = tokio::time::Instant::now();
        let clock: Clock = Arc::new(move || {
            start + chrono::Duration::from_std(origin.elapsed()).unwrap_or_default()
        });
        let obj = |name: &str| {
            let mut b = Booking::new(name, Default::default());
            b.metadata.namespace = Some("team".into());
            b
        };
        let turns = Turns::default();
        let w = Arc::new(Wakeups::marking_fired(turns.clone()));
        w.set("team", "a", Some(at("2031-01-10T10:00:10Z")));
        w.set("team", "b", Some(at("2031-01-10T10:00:10Z")));
        w.set("team", "c", Some(at("2031-01-10T10:00:20Z")));
        assert!(w.take_fired(&obj("a")).is_none(), "not woken yet");
        assert_eq!(turns.held(), 0);
        let mut due = Box::pin(w.clone().due::<Booking>(clock.clone()));
        let woken = [due.next().await.unwrap(), due.next().await.unwrap()];
        assert_eq!(woken.map(|o| o.name), ["a", "b"]);
        // Woken: a turn is held for each before any reconcile asks.
        assert_eq!(turns.held(), 2);
        let a = w.take_fired(&obj("a")).expect("woken by the timer");
        assert!(w.take_fired(&obj("a")).is_none(), "asking takes the mark");
        assert_eq!(
            turns.held(),
            2,
            "the reconcile holds the turn reserved for it"
        );
        drop(a);
        assert_eq!(turns.held(), 1);
        assert!(
            w.take_fired(&obj("c")).is_none(),
            "its instant has not come"
        );
        // A deleted object's mark goes with it, and so does its turn.
        w.forget(&obj("b"));
        assert!(w.take_fired(&obj("b")).is_none());
        assert_eq!(turns.held(), 0);
        // Without marking, nothing is remembered.
        let plain = Arc::new(Wakeups::default());
        plain.set("team", "a", Some(at("2031-01-10T10:00:10Z")));
        let mut due = Box::pin(plain.clone().due::<Booking>(clock.clone()));
        assert_eq!(due.next().await.unwrap().name, "a");
        assert!(plain.take_fired(&obj("a")).is_none());
        assert!(plain.lock().fired.is_empty());
    }
}
