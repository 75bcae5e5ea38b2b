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
use std::sync::{Arc, RwLock};

use booking_shared::api::{Booking, BookingPhase, Resource};
use booking_shared::time::Slot;
use chrono::{DateTime, Utc};
use kube::runtime::reflector::ObjectRef;

use booking_shared::arbitration::BookingView;

use crate::fanout::Synced;

/// What a booking holds in the index: its arbitration view without its name (the name is the
/// member's key), parsed once per change of the booking, not once per reconcile.
#[derive(Clone, Debug, PartialEq)]
struct Member {
    created: Option<DateTime<Utc>>,
    user: Box<str>,
    slot: Result<Slot, Box<str>>,
    deleting: bool,
    in_progress: bool,
}

impl Member {
    fn of(b: &Booking) -> Self {
        let view = BookingView::of(b);
        Self {
            created: view.created,
            user: view.user.into_boxed_str(),
            slot: view.slot.map_err(String::into_boxed_str),
            deleting: view.deleting,
            in_progress: b.status.as_ref().and_then(|s| s.status) == Some(BookingPhase::InProgress),
        }
    }

    fn view(&self, name: &str) -> BookingView {
        BookingView {
            name: name.to_owned(),
            created: self.created,
            user: self.user.to_string(),
            slot: self.slot.clone().map_err(String::from),
            deleting: self.deleting,
        }
    }

    /// Whether arbitration between the bookings of one Resource may decide differently with
    /// `other` in place of `self` (creation times never change).
    fn arbitrates_like(&self, other: &Member) -> bool {
        self.slot == other.slot && self.deleting == other.deleting
    }
}

/// A booking's namespace, name, the Resource it names, and its member; `None` without a
/// namespace or a name.
fn parse(b: &Booking) -> Option<(&str, &str, &str, Member)> {
    let ns = b.metadata.namespace.as_deref()?;
    let name = b.metadata.name.as_deref()?;
    Some((ns, name, b.spec.resource_name.as_str(), Member::of(b)))
}

/// The bookings of one namespace. Names are stored as shared or boxed strings, not as
/// `ObjectRef`s (four strings each): each booking costs its name twice and its member, and
/// its namespace and Resource name are shared with the other bookings of the same ones.
#[derive(Default)]
struct Namespace {
    /// Booking name → the name of the Resource it names.
    resource_of: HashMap<Box<str>, Arc<str>>,
    /// Resource name → its bookings by name.
    groups: HashMap<Arc<str>, HashMap<Box<str>, Member>>,
}

#[derive(Default)]
struct Inner {
    namespaces: HashMap<Arc<str>, Namespace>,
    in_progress: usize,
}

impl Inner {
    /// Adds (or replaces) a booking; returns the Resource it named before and its old member.
    fn insert(
        &mut self,
        ns: &str,
        name: &str,
        resource: &str,
        member: Member,
    ) -> Option<(Arc<str>, Member)> {
        let old = self.remove(ns, name);
        self.in_progress += usize::from(member.in_progress);
        let space = match self.namespaces.get_mut(ns) {
            Some(space) => space,
            None => self.namespaces.entry(Arc::from(ns)).or_default(),
        };
        // The Resource's name is shared between its group's key and its bookings' entries.
        let key = match space.groups.get_key_value(resource) {
            Some((k, _)) => k.clone(),
            None => Arc::from(resource),
        };
        space
            .groups
            .entry(key.clone())
            .or_default()
            .insert(Box::from(name), member);
        space.resource_of.insert(Box::from(name), key);
        old
    }

    fn remove(&mut self, ns: &str, name: &str) -> Option<(Arc<str>, Member)> {
        let space = self.namespaces.get_mut(ns)?;
        let resource = space.resource_of.remove(name)?;
        let member = space
            .groups
            .get_mut(&*resource)
            .and_then(|g| g.remove(name));
        if space.groups.get(&*resource).is_some_and(HashMap::is_empty) {
            space.groups.remove(&*resource);
        }
        if space.resource_of.is_empty() {
            self.namespaces.remove(ns);
        }
        let member = member?;
        self.in_progress -= usize::from(member.in_progress);
        Some((resource, member))
    }

    fn resources(&self) -> impl Iterator<Item = ObjectRef<Resource>> + '_ {
        self.namespaces.iter().flat_map(|(ns, space)| {
            space
                .groups
                .keys()
                .map(move |r| ObjectRef::new(r).within(ns))
        })
    }

    fn group(&self, resource: &ObjectRef<Resource>) -> Option<&HashMap<Box<str>, Member>> {
        let ns = resource.namespace.as_deref()?;
        self.namespaces.get(ns)?.groups.get(resource.name.as_str())
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
        let Some((ns, name, resource, member)) = parse(b) else {
            return change;
        };
        let now = ObjectRef::new(resource).within(ns);
        let moved = {
            let mut inner = self.write();
            let kept = member.clone();
            inner
                .insert(ns, name, resource, member)
                .map(|(before, old)| (before, old.arbitrates_like(&kept)))
        };
        change.resources.insert(now.clone());
        if let Some((before, same)) = moved {
            if &*before != resource {
                let before = ObjectRef::new(&before).within(ns);
                change.resources.insert(before.clone());
                change.rearbitrate.insert(before);
                change.rearbitrate.insert(now);
            } else if !same {
                change.rearbitrate.insert(now);
            }
        }
        change
    }

    /// Records a deleted booking.
    pub fn delete(&self, b: &Booking) -> Change {
        let mut change = Change::default();
        let (Some(ns), Some(name)) = (b.metadata.namespace.as_deref(), b.metadata.name.as_deref())
        else {
            return change;
        };
        let removed = self.write().remove(ns, name);
        if let Some((resource, _)) = removed {
            let resource = ObjectRef::new(&resource).within(ns);
            change.resources.insert(resource.clone());
            change.rearbitrate.insert(resource);
        }
        change
    }

    /// Replaces the whole index after a (re)list. The Resources concerned are those whose
    /// bookings differ between the index before and the list (bookings that came, went or
    /// changed while no watch was open): on a first list every Resource named, on a relist
    /// after a watch gap only what the gap changed, so that relisting unchanged bookings wakes
    /// no reconcile.
    pub fn rebuild<'a>(&self, all: impl IntoIterator<Item = &'a Booking>) -> Change {
        let mut fresh = Inner::default();
        for b in all {
            if let Some((ns, name, resource, member)) = parse(b) {
                fresh.insert(ns, name, resource, member);
            }
        }
        let mut inner = self.write();
        // Each Resource named before or after, its bookings compared once.
        let named: HashSet<_> = inner.resources().chain(fresh.resources()).collect();
        let resources: HashSet<_> = named
            .into_iter()
            .filter(|r| inner.group(r) != fresh.group(r))
            .collect();
        *inner = fresh;
        drop(inner);
        self.ready.mark();
        Change {
            rearbitrate: resources.clone(),
            resources,
        }
    }

    /// The bookings naming Resource `resource`.
    pub fn of_resource(&self, resource: &ObjectRef<Resource>) -> Vec<ObjectRef<Booking>> {
        let ns = resource.namespace.as_deref().unwrap_or_default();
        self.read()
            .group(resource)
            .map(|g| g.keys().map(|n| ObjectRef::new(n).within(ns)).collect())
            .unwrap_or_default()
    }

    /// The arbitration views of the bookings naming Resource `resource`.
    pub fn views_of(&self, resource: &ObjectRef<Resource>) -> Vec<BookingView> {
        self.read()
            .group(resource)
            .map(|g| g.iter().map(|(name, m)| m.view(name)).collect())
            .unwrap_or_default()
    }

    /// Every Resource named by at least one booking.
    pub fn resources(&self) -> Vec<ObjectRef<Resource>> {
        self.read().resources().collect()
    }

    /// How many bookings are `IN PROGRESS` by their status.
    pub fn in_progress(&self) -> usize {
        self.read().in_progress
    }

    /// How many bookings are indexed.
    pub fn len(&self) -> usize {
        self.read()
            .namespaces
            .values()
            .map(|space| space.resource_of.len())
            .sum()
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

    /// A relist concerns the Resources whose bookings differ from the index before it, and
    /// only those.
    #[test]
    fn a_relist_concerns_only_the_resources_whose_bookings_changed() {
        let idx = BookingIndex::default();
        let (a, b, c) = (
            booking("a", "r1", S, E),
            booking("b", "r2", S, E),
            booking("c", "r3", S, E),
        );
        let first = idx.rebuild([&a, &b, &c]);
        assert_eq!(first.resources, set(&["r1", "r2", "r3"]));
        assert_eq!(idx.rebuild([&a, &b, &c]), Change::default());
        // During the gap: `b`'s slot moved, `c` went away, `d` came on r4; `a` is untouched.
        let moved = booking("b", "r2", E, LATER);
        let d = booking("d", "r4", S, E);
        let again = idx.rebuild([&a, &moved, &d]);
        assert_eq!(again.resources, set(&["r2", "r3", "r4"]));
        assert_eq!(again.rearbitrate, set(&["r2", "r3", "r4"]));
        // A phase change alone (the Resource's holder) concerns its Resource too.
        let mut started = a.clone();
        started.status = Some(BookingStatus {
            status: Some(BookingPhase::InProgress),
            ..Default::default()
        });
        assert_eq!(idx.rebuild([&started, &moved, &d]).resources, set(&["r1"]));
        assert_eq!(idx.in_progress(), 1);
    }

    #[test]
    fn namespaces_are_kept_apart_and_emptied_ones_leave_nothing() {
        let idx = BookingIndex::default();
        let mut other = booking("a", "r1", S, E);
        other.metadata.namespace = Some("other".into());
        other.spec.user_id = "mallory".into();
        idx.apply(&booking("a", "r1", S, E));
        idx.apply(&other);
        assert_eq!(idx.len(), 2);
        let views = idx.views_of(&res("r1"));
        assert_eq!(views.len(), 1);
        assert_eq!(views[0].user, "");
        let theirs = ObjectRef::<Resource>::new("r1").within("other");
        assert_eq!(idx.views_of(&theirs)[0].user, "mallory");
        assert_eq!(
            idx.of_resource(&theirs)[0].namespace.as_deref(),
            Some("other")
        );
        // Deleting one namespace's booking leaves the other's as it was.
        assert_eq!(idx.delete(&other).resources, [theirs.clone()].into());
        assert!(idx.of_resource(&theirs).is_empty());
        assert_eq!(idx.of_resource(&res("r1")).len(), 1);
        assert_eq!(idx.resources(), vec![res("r1")]);
        assert_eq!(idx.inner.read().unwrap().namespaces.len(), 1);
    }
}
