//! The Bookings of each Resource, kept beside the shared Booking cache.
//!
//! Every reconcile of a Resource or a Booking needs the bookings of one Resource (for
//! arbitration); a scan of the whole cache would make each of them cost O(all bookings), and
//! 10,000 bookings reconciled once each O(n²). The index answers in O(bookings of the Resource)
//! and, fed by the same watch events as the cache, tells which Resources a change concerns, so
//! a booking's change triggers only its own Resource (and, when the slot changed or the booking
//! went away, the other bookings of that Resource, whose arbitration may change) instead of
//! every Resource of the namespace.

use std::collections::{HashMap, HashSet};
use std::sync::RwLock;

use booking_shared::api::{Booking, BookingPhase, Resource};
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use booking_shared::arbitration::BookingView;

use crate::fanout::Synced;

/// What a booking holds in the index: the Resource it names and its arbitration view (parsed
/// once per change of the booking, not once per reconcile).
#[derive(Clone, Debug, PartialEq)]
struct Entry {
    resource: ObjectRef<Resource>,
    view: BookingView,
    in_progress: bool,
}

impl Entry {
    fn of(b: &Booking) -> Option<(ObjectRef<Booking>, Self)> {
        let ns = b.namespace()?;
        let entry = Entry {
            resource: ObjectRef::new(&b.spec.resource_name).within(&ns),
            view: BookingView::of(b),
            in_progress: b.status.as_ref().and_then(|s| s.status) == Some(BookingPhase::InProgress),
        };
        // Keys without `extra` (resourceVersion, uid): the index compares names only, and two
        // strings fewer per key and per Resource set is much of its size.
        Some((ObjectRef::new(&b.name_any()).within(&ns), entry))
    }

    /// Whether arbitration between the bookings of one Resource may decide differently with
    /// `other` in place of `self` (creation times never change).
    fn arbitrates_like(&self, other: &Entry) -> bool {
        self.view.slot == other.view.slot && self.view.deleting == other.view.deleting
    }
}

#[derive(Default)]
struct Inner {
    bookings: HashMap<ObjectRef<Booking>, Entry>,
    by_resource: HashMap<ObjectRef<Resource>, HashSet<ObjectRef<Booking>>>,
    in_progress: usize,
}

impl Inner {
    fn insert(&mut self, key: ObjectRef<Booking>, entry: Entry) -> Option<Entry> {
        let old = self.remove(&key);
        self.in_progress += usize::from(entry.in_progress);
        self.by_resource
            .entry(entry.resource.clone())
            .or_default()
            .insert(key.clone());
        self.bookings.insert(key, entry);
        old
    }

    fn remove(&mut self, key: &ObjectRef<Booking>) -> Option<Entry> {
        let old = self.bookings.remove(key)?;
        self.in_progress -= usize::from(old.in_progress);
        if let Some(set) = self.by_resource.get_mut(&old.resource) {
            set.remove(key);
            if set.is_empty() {
                self.by_resource.remove(&old.resource);
            }
        }
        Some(old)
    }
}

/// Which objects a watch event concerns.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Change {
    /// Resources whose bookings changed in any way (spec, status, existence): reconcile them.
    pub resources: HashSet<ObjectRef<Resource>>,
    /// Resources whose bookings' arbitration may have changed (a slot changed, a booking was
    /// deleted): reconcile every booking of them.
    pub rearbitrate: HashSet<ObjectRef<Resource>>,
}

/// The index of Bookings by Resource. Cheap to share behind an `Arc`; every method but
/// [`BookingIndex::wait_ready`] takes a short lock and never awaits.
#[derive(Default)]
pub struct BookingIndex {
    inner: RwLock<Inner>,
    /// Whether the first full list has been indexed.
    ready: Synced,
    /// Whether the watch failed since the last full list (see [`BookingIndex::is_stale`]).
    stale: std::sync::atomic::AtomicBool,
}

impl BookingIndex {
    /// Waits until the first full list has been indexed ([`BookingIndex::rebuild`]); until
    /// then the index reads as "no bookings anywhere". Returns at once afterwards.
    pub async fn wait_ready(&self) {
        self.ready.wait().await;
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Records an added or modified booking.
    pub fn apply(&self, b: &Booking) -> Change {
        let mut change = Change::default();
        let Some((key, entry)) = Entry::of(b) else {
            return change;
        };
        let now = entry.clone();
        let old = self.write().insert(key, entry);
        change.resources.insert(now.resource.clone());
        if let Some(old) = old {
            if old.resource != now.resource {
                change.resources.insert(old.resource.clone());
                change.rearbitrate.insert(old.resource);
                change.rearbitrate.insert(now.resource);
            } else if !old.arbitrates_like(&now) {
                change.rearbitrate.insert(now.resource);
            }
        }
        change
    }

    /// Records a deleted booking.
    pub fn delete(&self, b: &Booking) -> Change {
        let mut change = Change::default();
        let Some((key, _)) = Entry::of(b) else {
            return change;
        };
        if let Some(old) = self.write().remove(&key) {
            change.resources.insert(old.resource.clone());
            change.rearbitrate.insert(old.resource);
        }
        change
    }

    /// Replaces the whole index after a (re)list: every Resource named before or after is
    /// concerned, since bookings may have come and gone while no watch was open.
    pub fn rebuild<'a>(&self, all: impl IntoIterator<Item = &'a Booking>) -> Change {
        let mut fresh = Inner::default();
        for b in all {
            if let Some((key, entry)) = Entry::of(b) {
                fresh.insert(key, entry);
            }
        }
        let mut inner = self.write();
        let resources: HashSet<_> = inner
            .by_resource
            .keys()
            .chain(fresh.by_resource.keys())
            .cloned()
            .collect();
        *inner = fresh;
        drop(inner);
        self.stale
            .store(false, std::sync::atomic::Ordering::Release);
        self.ready.mark();
        Change {
            rearbitrate: resources.clone(),
            resources,
        }
    }

    /// Records that the watch failed: until the next full list ([`BookingIndex::rebuild`]),
    /// bookings created meanwhile may be missing.
    pub fn mark_stale(&self) {
        self.stale.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether the watch failed since the last full list. A watch that resumed without a relist
    /// delivers what it missed, but nothing tells when it has caught up; so the index stays
    /// "stale" until the next full list, and what cannot be undone (a stop) is confirmed with
    /// the API server meanwhile.
    pub fn is_stale(&self) -> bool {
        self.stale.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The bookings naming Resource `resource`.
    pub fn of_resource(&self, resource: &ObjectRef<Resource>) -> Vec<ObjectRef<Booking>> {
        self.read()
            .by_resource
            .get(resource)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The arbitration views of the bookings naming Resource `resource`.
    pub fn views_of(&self, resource: &ObjectRef<Resource>) -> Vec<BookingView> {
        let inner = self.read();
        inner
            .by_resource
            .get(resource)
            .map(|keys| {
                keys.iter()
                    .filter_map(|k| inner.bookings.get(k))
                    .map(|e| e.view.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every Resource named by at least one booking.
    pub fn resources(&self) -> Vec<ObjectRef<Resource>> {
        self.read().by_resource.keys().cloned().collect()
    }

    /// How many bookings are `IN PROGRESS` by their status.
    pub fn in_progress(&self) -> usize {
        self.read().in_progress
    }

    /// How many bookings are indexed.
    pub fn len(&self) -> usize {
        self.read().bookings.len()
    }

    /// Whether no booking is indexed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use booking_shared::api::{BookingSpec, BookingStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    const S: &str = "2031-01-10T10:00:00Z";
    const E: &str = "2031-01-10T11:00:00Z";
    const LATER: &str = "2031-01-10T12:00:00Z";

    fn booking(name: &str, resource: &str, start: &str, end: &str) -> Booking {
        let mut b = Booking::new(
            name,
            BookingSpec {
                resource_name: resource.into(),
                start_at: start.into(),
                end_at: end.into(),
                ..Default::default()
            },
        );
        b.metadata.namespace = Some("ns".into());
        b
    }

    fn res(name: &str) -> ObjectRef<Resource> {
        ObjectRef::new(name).within("ns")
    }

    fn set(names: &[&str]) -> HashSet<ObjectRef<Resource>> {
        names.iter().map(|n| res(n)).collect()
    }

    #[test]
    fn a_new_booking_concerns_its_resource_only() {
        let idx = BookingIndex::default();
        let c = idx.apply(&booking("a", "r1", S, E));
        assert_eq!(c.resources, set(&["r1"]));
        assert!(c.rearbitrate.is_empty());
        idx.apply(&booking("b", "r2", S, E));
        assert_eq!(idx.of_resource(&res("r1")).len(), 1);
        assert_eq!(idx.of_resource(&res("r2"))[0].name, "b");
        assert!(idx.of_resource(&res("r3")).is_empty());
        let views = idx.views_of(&res("r1"));
        assert_eq!(views.len(), 1);
        assert_eq!(views[0].name, "a");
        assert!(views[0].slot.is_ok());
        assert_eq!(idx.len(), 2);
    }

    #[test]
    fn a_status_change_does_not_rearbitrate_but_a_slot_change_does() {
        let idx = BookingIndex::default();
        let mut b = booking("a", "r1", S, E);
        idx.apply(&b);
        b.status = Some(BookingStatus {
            status: Some(BookingPhase::InProgress),
            ..Default::default()
        });
        let c = idx.apply(&b);
        assert_eq!(c.resources, set(&["r1"]));
        assert!(c.rearbitrate.is_empty());
        assert_eq!(idx.in_progress(), 1);
        b.spec.end_at = LATER.into();
        assert_eq!(idx.apply(&b).rearbitrate, set(&["r1"]));
        b.metadata.deletion_timestamp = Some(Time(Default::default()));
        assert_eq!(idx.apply(&b).rearbitrate, set(&["r1"]));
        assert_eq!(idx.in_progress(), 1);
    }

    #[test]
    fn moving_a_booking_concerns_both_resources() {
        let idx = BookingIndex::default();
        let mut b = booking("a", "r1", S, E);
        idx.apply(&b);
        b.spec.resource_name = "r2".into();
        let c = idx.apply(&b);
        assert_eq!(c.resources, set(&["r1", "r2"]));
        assert_eq!(c.rearbitrate, set(&["r1", "r2"]));
        assert!(idx.of_resource(&res("r1")).is_empty());
        assert_eq!(idx.resources(), vec![res("r2")]);
    }

    #[test]
    fn delete_and_rebuild() {
        let idx = BookingIndex::default();
        let mut a = booking("a", "r1", S, E);
        a.status = Some(BookingStatus {
            status: Some(BookingPhase::InProgress),
            ..Default::default()
        });
        idx.apply(&a);
        idx.apply(&booking("b", "r2", S, E));
        let c = idx.delete(&a);
        assert_eq!(c.resources, set(&["r1"]));
        assert_eq!(c.rearbitrate, set(&["r1"]));
        assert_eq!(idx.in_progress(), 0);
        // Deleting what is not there concerns nothing.
        assert_eq!(idx.delete(&a), Change::default());
        assert!(!idx.ready.is_synced());
        let c = idx.rebuild([&booking("c", "r3", S, E)]);
        assert!(idx.ready.is_synced());
        assert_eq!(c.resources, set(&["r2", "r3"]));
        assert_eq!(c.rearbitrate, set(&["r2", "r3"]));
        assert_eq!(idx.len(), 1);
        assert!(idx.of_resource(&res("r2")).is_empty());
    }
}
