//! An in-memory index of bookings per (namespace, resource) that answers "which bookings overlap
//! the half-open slot [start, end)?" in O(log n + k) — never a scan and never a LIST per request.
//!
//! Each (namespace, resource) has its own interval tree (`iset::IntervalMap`, a red-black tree
//! whose nodes carry the largest end of their subtree); several bookings with the very same slot
//! share one node. A second map from (namespace, name) to the booking's slot makes updates and
//! deletes O(log n) as well.
//!
//! Compact, because the webhook holds every booking of the cluster: an entry's strings are
//! shared (`Arc<str>`): its name once for the entry, the name map and its tree node, and the
//! namespaces, Resource names and users once for the whole index (interned); bookings with the
//! same slot share a node through a small vector rather than a map (a B-tree's first node holds
//! room for eleven). About 0.4 KiB per booking.
//!
//! The index has two layers:
//!
//! - **stored** bookings, fed by a watch of the API server (the webhook's and the controller's
//!   view of what exists);
//! - **reservations**: slots the webhook has just admitted but the watch has not delivered yet.
//!   They close most of the window in which two simultaneous requests could both be admitted. A
//!   reservation ends when the watch delivers the booking with the reserved slot, or when it
//!   expires (the request may have failed later, e.g. on a conflict). Server-side dry-run
//!   requests reserve nothing. The controller's arbitration (the earlier-created booking holds
//!   the Resource) remains the final guard against races the index cannot see, e.g. two webhook
//!   replicas admitting at the same instant.
//!
//! Time is a parameter: nothing here reads the clock.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use iset::IntervalMap;

use crate::{
    api::Booking,
    time::{Slot, parse_rfc3339},
};

/// What the index knows of one booking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedBooking {
    /// Namespace of the booking.
    pub namespace: Arc<str>,
    /// Name of the booking.
    pub name: Arc<str>,
    /// `spec.resource_name`.
    pub resource_name: Arc<str>,
    /// `spec.user_id`.
    pub user_id: Arc<str>,
    /// `spec.start_at` as written.
    pub start_at: Arc<str>,
    /// `spec.end_at` as written.
    pub end_at: Arc<str>,
    /// The parsed slot.
    pub slot: Slot,
    /// True once `metadata.deletionTimestamp` is set: the booking is going away and no longer
    /// blocks others.
    pub deleting: bool,
}

/// The fields of a booking the index reads (see [`IndexedBooking::new`]).
#[derive(Debug, Clone, Copy)]
pub struct BookingFields<'a> {
    /// `metadata.namespace`.
    pub namespace: &'a str,
    /// `metadata.name`.
    pub name: &'a str,
    /// `spec.resource_name`.
    pub resource_name: &'a str,
    /// `spec.user_id`.
    pub user_id: &'a str,
    /// `spec.start_at`.
    pub start_at: &'a str,
    /// `spec.end_at`.
    pub end_at: &'a str,
    /// Whether `metadata.deletionTimestamp` is set.
    pub deleting: bool,
}

impl IndexedBooking {
    /// The index entry of a booking; `None` when its times do not form a slot (such a booking
    /// can never hold its Resource).
    pub fn new(fields: BookingFields<'_>) -> Option<Self> {
        let start = parse_rfc3339("spec.start_at", fields.start_at).ok()?;
        let end = parse_rfc3339("spec.end_at", fields.end_at).ok()?;
        Some(Self {
            namespace: fields.namespace.into(),
            name: fields.name.into(),
            resource_name: fields.resource_name.into(),
            user_id: fields.user_id.into(),
            start_at: fields.start_at.into(),
            end_at: fields.end_at.into(),
            slot: Slot::new(start, end)?,
            deleting: fields.deleting,
        })
    }

    /// The index entry of a stored booking; `None` when it has no namespace or name, or its
    /// times do not form a slot (such a booking can never hold its Resource).
    pub fn from_booking(booking: &Booking) -> Option<Self> {
        Self::new(BookingFields {
            namespace: booking.metadata.namespace.as_deref()?,
            name: booking.metadata.name.as_deref()?,
            resource_name: &booking.spec.resource_name,
            user_id: &booking.spec.user_id,
            start_at: &booking.spec.start_at,
            end_at: &booking.spec.end_at,
            deleting: booking.metadata.deletion_timestamp.is_some(),
        })
    }
}

/// Named entries by half-open slot: which entries overlap a slot, in O(log n + k). The one
/// interval structure of the project: the webhook's index keeps one per (namespace, resource),
/// and the controller's arbitration ([`crate::arbitration`]) one of the accepted bookings.
///
/// An interval tree (`iset::IntervalMap`, a red-black tree whose nodes carry the largest end of
/// their subtree); entries with the very same slot share one node, in a vector sorted by name.
#[derive(Debug, Clone)]
pub struct SlotMap<V> {
    tree: IntervalMap<DateTime<Utc>, Vec<(Arc<str>, V)>>,
}

impl<V> Default for SlotMap<V> {
    fn default() -> Self {
        Self {
            tree: IntervalMap::new(),
        }
    }
}

impl<V> SlotMap<V> {
    /// Adds (or replaces) the entry `name` with slot `slot`.
    pub fn insert(&mut self, slot: Slot, name: &str, value: V) {
        self.insert_shared(slot, name.into(), value);
    }

    /// [`SlotMap::insert`] with a name the caller shares.
    pub fn insert_shared(&mut self, slot: Slot, name: Arc<str>, value: V) {
        match self.tree.get_mut(slot.start..slot.end) {
            Some(group) => match group.binary_search_by(|(k, _)| (**k).cmp(&*name)) {
                Ok(i) => group[i].1 = value,
                Err(i) => group.insert(i, (name, value)),
            },
            None => {
                self.tree.insert(slot.start..slot.end, vec![(name, value)]);
            }
        }
    }

    /// Removes the entry `name` with slot `slot`.
    pub fn remove(&mut self, slot: Slot, name: &str) -> Option<V> {
        let range = slot.start..slot.end;
        let group = self.tree.get_mut(range.clone())?;
        let i = group.binary_search_by(|(k, _)| (**k).cmp(name)).ok()?;
        let (_, removed) = group.remove(i);
        if group.is_empty() {
            self.tree.remove(range);
        }
        Some(removed)
    }

    /// The entry `name` with slot `slot`.
    pub fn get(&self, slot: Slot, name: &str) -> Option<&V> {
        let group = self.tree.get(slot.start..slot.end)?;
        let i = group.binary_search_by(|(k, _)| (**k).cmp(name)).ok()?;
        Some(&group[i].1)
    }

    /// The entries whose slot overlaps `slot` (back-to-back slots do not overlap).
    pub fn overlapping(&self, slot: Slot) -> impl Iterator<Item = (&str, &V)> + '_ {
        self.tree
            .values(slot.start..slot.end)
            .flat_map(|group| group.iter().map(|(k, v)| (&**k, v)))
    }

    /// Whether no entry is left.
    pub fn is_empty(&self) -> bool {
        self.tree.is_empty()
    }
}

/// Bookings of one (namespace, resource).
type Tree = SlotMap<IndexedBooking>;

/// Of each booking's name: its Resource and slot.
type Placed = HashMap<Arc<str>, (Arc<str>, Slot)>;

/// One layer of the index: interval trees per (namespace, resource) and the Resource and slot
/// of each (namespace, name), both keyed by namespace first so that lookups by `&str` need no
/// allocation.
#[derive(Default, Debug)]
struct Layer {
    trees: HashMap<Arc<str>, HashMap<Arc<str>, Tree>>,
    names: HashMap<Arc<str>, Placed>,
    len: usize,
    /// Whether the maps and trees that a removal empties stay, for the next insert of the same
    /// namespace and Resource to reuse, until [`Layer::prune_empty`]. The reserved layer keeps
    /// them: its entries come and go one create at a time (most creates find it empty again,
    /// their previous reservation confirmed by the watch), and rebuilding the namespace's maps
    /// and the Resource's tree for each one was most of a reservation's cost.
    keep_empty: bool,
}

impl Layer {
    fn insert(&mut self, booking: IndexedBooking) {
        self.remove(&booking.namespace, &booking.name);
        self.names
            .entry(booking.namespace.clone())
            .or_default()
            .insert(
                booking.name.clone(),
                (booking.resource_name.clone(), booking.slot),
            );
        self.len += 1;
        let name = booking.name.clone();
        let slot = booking.slot;
        self.trees
            .entry(booking.namespace.clone())
            .or_default()
            .entry(booking.resource_name.clone())
            .or_default()
            .insert_shared(slot, name, booking);
    }

    fn remove(&mut self, namespace: &str, name: &str) -> Option<IndexedBooking> {
        let names = self.names.get_mut(namespace)?;
        let (resource, slot) = names.remove(name)?;
        if names.is_empty() && !self.keep_empty {
            self.names.remove(namespace);
        }
        self.len -= 1;
        let trees = self.trees.get_mut(namespace)?;
        let tree = trees.get_mut(&*resource)?;
        let removed = tree.remove(slot, name);
        if tree.is_empty() && !self.keep_empty {
            trees.remove(&*resource);
            if trees.is_empty() {
                self.trees.remove(namespace);
            }
        }
        removed
    }

    /// Drops the emptied maps and trees that [`Layer::keep_empty`] kept.
    fn prune_empty(&mut self) {
        self.names.retain(|_, names| !names.is_empty());
        self.trees.retain(|_, trees| {
            trees.retain(|_, tree| !tree.is_empty());
            !trees.is_empty()
        });
    }

    fn get(&self, namespace: &str, name: &str) -> Option<&IndexedBooking> {
        let (resource, slot) = self.names.get(namespace)?.get(name)?;
        self.trees
            .get(namespace)?
            .get(&**resource)?
            .get(*slot, name)
    }

    fn overlapping<'a>(
        &'a self,
        namespace: &str,
        resource: &str,
        slot: Slot,
    ) -> impl Iterator<Item = &'a IndexedBooking> + 'a {
        self.trees
            .get(namespace)
            .and_then(|trees| trees.get(resource))
            .into_iter()
            .flat_map(move |tree| tree.overlapping(slot).map(|(_, b)| b))
    }
}

/// The strings many bookings share (namespaces, Resource names, users), held once.
#[derive(Default, Debug)]
struct Interner(HashSet<Arc<str>>);

impl Interner {
    fn intern(&mut self, s: &mut Arc<str>) {
        match self.0.get(&**s) {
            Some(shared) => *s = shared.clone(),
            None => {
                self.0.insert(s.clone());
            }
        }
    }

    fn share(&mut self, b: &mut IndexedBooking) {
        self.intern(&mut b.namespace);
        self.intern(&mut b.resource_name);
        self.intern(&mut b.user_id);
    }
}

/// The bookings of a list in progress (a watch's initial list, or a relist after it was
/// interrupted), held as compactly as the index holds them until
/// [`OverlapIndex::replace_listed`] swaps them in at once.
#[derive(Default, Debug)]
pub struct Listed {
    layer: Layer,
    strings: Interner,
}

impl Listed {
    /// Forgets every booking listed so far (a list that starts again).
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// Adds a listed booking (a later one of the same namespace and name replaces it).
    pub fn push(&mut self, mut booking: IndexedBooking) {
        self.strings.share(&mut booking);
        self.layer.insert(booking);
    }

    /// Number of bookings listed.
    pub fn len(&self) -> usize {
        self.layer.len
    }

    /// Whether none was listed.
    pub fn is_empty(&self) -> bool {
        self.layer.len == 0
    }
}

/// What a reservation adds to its entry in the reserved layer.
#[derive(Debug)]
struct Reservation {
    /// When it stops blocking others.
    expires: DateTime<Utc>,
    /// Who made it (the requester's user name), shared with [`OverlapIndex::per_requester`].
    requester: Arc<str>,
}

/// The interval index of bookings, see the module documentation.
#[derive(Debug)]
pub struct OverlapIndex {
    stored: Layer,
    reserved: Layer,
    /// Shared strings of the entries; rebuilt at each relist.
    strings: Interner,
    /// Each reservation's expiry and requester, by namespace then name (looked up by `&str`:
    /// reserving and checking allocate no key). A namespace's map stays when emptied, like the
    /// reserved layer's, until the next purge that finds something expired.
    reservations: HashMap<Arc<str>, HashMap<Arc<str>, Reservation>>,
    /// Number of reservations per requester (a requester at 0 stays until that purge too).
    per_requester: HashMap<Arc<str>, usize>,
    /// No reservation expires before this instant (`None`: there is none): a purge before it
    /// has nothing to look at. Dropping reservations leaves it as it is, still a lower bound.
    earliest_expiry: Option<DateTime<Utc>>,
}

impl Default for OverlapIndex {
    fn default() -> Self {
        Self {
            stored: Layer::default(),
            reserved: Layer {
                keep_empty: true,
                ..Layer::default()
            },
            strings: Interner::default(),
            reservations: HashMap::new(),
            per_requester: HashMap::new(),
            earliest_expiry: None,
        }
    }
}

impl OverlapIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of stored bookings (reservations not counted).
    pub fn len(&self) -> usize {
        self.stored.len
    }

    /// Whether no booking is stored.
    pub fn is_empty(&self) -> bool {
        self.stored.len == 0
    }

    /// Number of reservations, expired or not.
    pub fn reservations(&self) -> usize {
        self.reserved.len
    }

    /// The reservation of (namespace, name), if any.
    fn reservation(&self, namespace: &str, name: &str) -> Option<&Reservation> {
        self.reservations.get(namespace)?.get(name)
    }

    /// The (namespace, name) of every reservation that `keep` selects.
    fn reservations_where(
        &self,
        keep: impl Fn(&str, &str, &Reservation) -> bool,
    ) -> Vec<(Arc<str>, Arc<str>)> {
        self.reservations
            .iter()
            .flat_map(|(namespace, names)| {
                names
                    .iter()
                    .filter(|(name, r)| keep(namespace, name, r))
                    .map(|(name, _)| (namespace.clone(), name.clone()))
            })
            .collect()
    }

    /// Adds or replaces a stored booking (a watch event). A reservation of the same booking with
    /// the same slot is confirmed and dropped.
    pub fn upsert(&mut self, mut booking: IndexedBooking) {
        if self
            .reserved
            .get(&booking.namespace, &booking.name)
            .is_some_and(|r| r.slot == booking.slot && r.resource_name == booking.resource_name)
        {
            self.drop_reservation(&booking.namespace, &booking.name);
        }
        self.strings.share(&mut booking);
        self.stored.insert(booking);
    }

    /// Forgets the reservation of (namespace, name), if any.
    fn drop_reservation(&mut self, namespace: &str, name: &str) {
        let Some(names) = self.reservations.get_mut(namespace) else {
            return;
        };
        let Some(dropped) = names.remove(name) else {
            return;
        };
        self.reserved.remove(namespace, name);
        if let Some(n) = self.per_requester.get_mut(&*dropped.requester) {
            *n -= 1;
        }
    }

    /// Number of reservations (expired or not) made by `requester`.
    pub fn reservations_by(&self, requester: &str) -> usize {
        self.per_requester.get(requester).copied().unwrap_or(0)
    }

    /// Removes a stored booking (a watch delete event, or a booking whose times no longer parse)
    /// and any reservation of it. Returns the stored entry.
    pub fn remove(&mut self, namespace: &str, name: &str) -> Option<IndexedBooking> {
        self.drop_reservation(namespace, name);
        self.stored.remove(namespace, name)
    }

    /// The stored entry of a booking.
    pub fn get(&self, namespace: &str, name: &str) -> Option<&IndexedBooking> {
        self.stored.get(namespace, name)
    }

    /// Replaces every stored booking with `bookings` (the initial list of a watch, or a relist
    /// after the watch was interrupted). Reservations stay until confirmed or expired.
    pub fn replace_all(&mut self, bookings: impl IntoIterator<Item = IndexedBooking>) {
        let mut listed = Listed::default();
        for b in bookings {
            listed.push(b);
        }
        self.replace_listed(&mut listed);
    }

    /// [`OverlapIndex::replace_all`] with the bookings of `listed`, which is left empty.
    /// Reservations that the list confirms (same Resource and slot) are dropped.
    pub fn replace_listed(&mut self, listed: &mut Listed) {
        let listed = std::mem::take(listed);
        self.stored = listed.layer;
        self.strings = listed.strings;
        let confirmed = self.reservations_where(|namespace, name, _| {
            match (
                self.reserved.get(namespace, name),
                self.stored.get(namespace, name),
            ) {
                (Some(r), Some(b)) => r.slot == b.slot && r.resource_name == b.resource_name,
                _ => false,
            }
        });
        for (namespace, name) in confirmed {
            self.drop_reservation(&namespace, &name);
        }
    }

    /// Reserves the slot of a booking just admitted for `requester`, until `expires` or until
    /// the watch delivers it with this slot (replacing an earlier reservation of the same
    /// booking). [`OverlapIndex::reservations_by`] counts them per requester.
    pub fn reserve(&mut self, booking: IndexedBooking, expires: DateTime<Utc>, requester: &str) {
        self.drop_reservation(&booking.namespace, &booking.name);
        let requester = match self.per_requester.get_key_value(requester) {
            Some((shared, _)) => shared.clone(),
            None => Arc::from(requester),
        };
        *self.per_requester.entry(requester.clone()).or_default() += 1;
        match self.reservations.get_mut(&*booking.namespace) {
            Some(names) => names.insert(booking.name.clone(), Reservation { expires, requester }),
            None => self
                .reservations
                .entry(booking.namespace.clone())
                .or_default()
                .insert(booking.name.clone(), Reservation { expires, requester }),
        };
        self.earliest_expiry = Some(self.earliest_expiry.map_or(expires, |e| e.min(expires)));
        self.reserved.insert(booking);
    }

    /// Drops the reservations that expired at or before `now`. Returns how many. Costs nothing
    /// before the earliest expiry; a purge that looks also drops the maps that reservations
    /// emptied.
    pub fn purge_expired(&mut self, now: DateTime<Utc>) -> usize {
        if self.earliest_expiry.is_none_or(|e| now < e) {
            return 0;
        }
        let expired = self.reservations_where(|_, _, r| r.expires <= now);
        for (namespace, name) in &expired {
            self.drop_reservation(namespace, name);
        }
        self.reservations.retain(|_, names| !names.is_empty());
        self.per_requester.retain(|_, n| *n > 0);
        self.reserved.prune_empty();
        self.earliest_expiry = self
            .reservations
            .values()
            .flat_map(|names| names.values().map(|r| r.expires))
            .min();
        expired.len()
    }

    /// Stored bookings of `resource` in `namespace` whose slot overlaps `slot` (half-open, so a
    /// booking ending exactly at `slot.start` does not overlap), in O(log n + k), sorted by slot.
    pub fn overlapping<'a>(
        &'a self,
        namespace: &str,
        resource: &str,
        slot: Slot,
    ) -> impl Iterator<Item = &'a IndexedBooking> + 'a {
        self.stored.overlapping(namespace, resource, slot)
    }

    /// The bookings that a booking `name` of `resource` with `slot` would collide with at `now`:
    /// stored bookings and unexpired reservations overlapping the slot, other than `name` itself
    /// (so an update never collides with its own previous version), not being deleted, and not
    /// yet ended at `now`. Sorted by start; a booking is listed once even when it is both stored
    /// and reserved.
    pub fn conflicts(
        &self,
        namespace: &str,
        name: &str,
        resource: &str,
        slot: Slot,
        now: DateTime<Utc>,
    ) -> Vec<&IndexedBooking> {
        let live = |b: &&IndexedBooking| &*b.name != name && !b.deleting && b.slot.end > now;
        let mut out: Vec<&IndexedBooking> = self
            .reserved
            .overlapping(namespace, resource, slot)
            .filter(live)
            .filter(|b| {
                self.reservation(&b.namespace, &b.name)
                    .is_some_and(|r| r.expires > now)
            })
            .collect();
        let reserved_names: Vec<Arc<str>> = out.iter().map(|b| b.name.clone()).collect();
        out.extend(
            self.stored
                .overlapping(namespace, resource, slot)
                .filter(live)
                .filter(|b| !reserved_names.contains(&b.name)),
        );
        out.sort_by(|a, b| (a.slot.start, &a.name).cmp(&(b.slot.start, &b.name)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Duration, TimeZone};

    fn t(h: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2031, 1, 10, 0, 0, 0).unwrap() + Duration::hours(h)
    }

    fn slot(a: i64, b: i64) -> Slot {
        Slot::new(t(a), t(b)).unwrap()
    }

    fn entry(ns: &str, name: &str, res: &str, a: i64, b: i64) -> IndexedBooking {
        IndexedBooking {
            namespace: ns.into(),
            name: name.into(),
            resource_name: res.into(),
            user_id: "ann".into(),
            start_at: crate::time::format_rfc3339(t(a)).into(),
            end_at: crate::time::format_rfc3339(t(b)).into(),
            slot: slot(a, b),
            deleting: false,
        }
    }

    fn names(v: Vec<&IndexedBooking>) -> Vec<&str> {
        v.into_iter().map(|b| &*b.name).collect()
    }

    #[test]
    fn half_open_overlaps_per_namespace_and_resource() {
        let mut idx = OverlapIndex::new();
        idx.upsert(entry("a", "morning", "ec2.x", 1, 2));
        idx.upsert(entry("a", "noon", "ec2.x", 2, 3));
        idx.upsert(entry("a", "other-res", "ec2.y", 1, 3));
        idx.upsert(entry("b", "other-ns", "ec2.x", 1, 3));
        let now = t(0);
        // Back-to-back with both neighbours: nothing.
        assert!(
            idx.conflicts("a", "new", "ec2.x", slot(3, 4), now)
                .is_empty()
        );
        assert!(
            idx.conflicts("a", "new", "ec2.x", slot(0, 1), now)
                .is_empty()
        );
        assert_eq!(
            names(idx.conflicts("a", "new", "ec2.x", slot(1, 3), now)),
            ["morning", "noon"]
        );
        assert_eq!(
            names(idx.conflicts("a", "new", "ec2.x", slot(2, 5), now)),
            ["noon"]
        );
        assert_eq!(idx.len(), 4);
    }

    #[test]
    fn update_never_collides_with_itself_and_moves_its_slot() {
        let mut idx = OverlapIndex::new();
        idx.upsert(entry("a", "mine", "ec2.x", 1, 3));
        let now = t(0);
        assert!(
            idx.conflicts("a", "mine", "ec2.x", slot(2, 6), now)
                .is_empty()
        );
        idx.upsert(entry("a", "mine", "ec2.x", 5, 6));
        assert!(
            idx.conflicts("a", "other", "ec2.x", slot(1, 3), now)
                .is_empty()
        );
        assert_eq!(
            names(idx.conflicts("a", "other", "ec2.x", slot(5, 7), now)),
            ["mine"]
        );
        assert_eq!(idx.len(), 1);
        // Moving to another resource leaves the first one free.
        idx.upsert(entry("a", "mine", "ec2.y", 5, 6));
        assert!(
            idx.conflicts("a", "other", "ec2.x", slot(5, 7), now)
                .is_empty()
        );
        assert_eq!(
            idx.remove("a", "mine").map(|b| b.resource_name),
            Some("ec2.y".into())
        );
        assert!(idx.is_empty());
        assert!(idx.remove("a", "mine").is_none());
    }

    #[test]
    fn identical_slots_share_a_node_and_are_removed_one_by_one() {
        let mut idx = OverlapIndex::new();
        idx.upsert(entry("a", "one", "r", 1, 2));
        idx.upsert(entry("a", "two", "r", 1, 2));
        assert_eq!(
            names(idx.conflicts("a", "x", "r", slot(1, 2), t(0))),
            ["one", "two"]
        );
        idx.remove("a", "one");
        assert_eq!(
            names(idx.conflicts("a", "x", "r", slot(1, 2), t(0))),
            ["two"]
        );
        assert_eq!(idx.get("a", "two").map(|b| b.slot), Some(slot(1, 2)));
    }

    #[test]
    fn ended_and_deleting_bookings_do_not_block() {
        let mut idx = OverlapIndex::new();
        idx.upsert(entry("a", "past", "r", 1, 2));
        let mut going = entry("a", "going", "r", 3, 4);
        going.deleting = true;
        idx.upsert(going);
        // Re-applying an old manifest overlapping a booking that has ended.
        assert!(idx.conflicts("a", "old", "r", slot(1, 2), t(5)).is_empty());
        assert_eq!(
            names(idx.conflicts("a", "old", "r", slot(1, 2), t(1))),
            ["past"]
        );
        assert!(idx.conflicts("a", "new", "r", slot(3, 4), t(0)).is_empty());
    }

    #[test]
    fn reservations_are_counted_per_requester_until_confirmed_expired_or_removed() {
        let mut idx = OverlapIndex::new();
        let ttl = t(0) + Duration::seconds(30);
        idx.reserve(entry("a", "one", "r", 1, 2), ttl, "ann");
        idx.reserve(entry("a", "two", "r", 3, 4), ttl, "ann");
        idx.reserve(
            entry("a", "three", "r", 5, 6),
            t(0) + Duration::seconds(60),
            "bob",
        );
        assert_eq!(
            (idx.reservations_by("ann"), idx.reservations_by("bob")),
            (2, 1)
        );
        // Reserving the same booking again replaces its reservation, counted once.
        idx.reserve(entry("a", "two", "r", 7, 8), ttl, "ann");
        assert_eq!(idx.reservations_by("ann"), 2);
        // Confirmed by the watch, removed, expired: each releases its requester's count.
        idx.upsert(entry("a", "one", "r", 1, 2));
        assert_eq!(idx.reservations_by("ann"), 1);
        idx.remove("a", "two");
        assert_eq!(idx.reservations_by("ann"), 0);
        assert_eq!(idx.purge_expired(t(0) + Duration::seconds(61)), 1);
        assert_eq!((idx.reservations_by("bob"), idx.reservations()), (0, 0));
    }

    #[test]
    fn emptied_reservation_maps_are_reused_until_a_purge_finds_an_expiry() {
        let mut idx = OverlapIndex::new();
        let (early, late) = (t(0) + Duration::seconds(30), t(0) + Duration::seconds(60));
        idx.reserve(entry("a", "one", "r", 1, 2), late, "ann");
        idx.reserve(entry("b", "two", "r", 1, 2), early, "bob");
        // Confirmed by the watch: the namespace's maps and the Resource's tree stay.
        idx.upsert(entry("a", "one", "r", 1, 2));
        assert_eq!((idx.reservations(), idx.reservations_by("ann")), (1, 0));
        assert!(idx.reserved.names.contains_key("a") && idx.reserved.trees.contains_key("a"));
        assert!(idx.reservations.contains_key("a"));
        // Reused by the next reservation of that namespace, which still blocks and is counted.
        idx.reserve(entry("a", "three", "r", 3, 4), late, "ann");
        assert_eq!(
            names(idx.conflicts("a", "rival", "r", slot(3, 4), t(0))),
            ["three"]
        );
        assert_eq!(idx.reservations_by("ann"), 1);
        idx.upsert(entry("a", "three", "r", 3, 4));
        // Before the earliest expiry a purge drops nothing, and keeps the emptied maps.
        assert_eq!(idx.purge_expired(early - Duration::seconds(1)), 0);
        assert!(idx.reserved.names.contains_key("a"));
        // At it, the expired reservation goes, and so does every emptied map.
        assert_eq!(idx.purge_expired(early), 1);
        assert_eq!(idx.reservations(), 0);
        assert!(idx.reserved.names.is_empty() && idx.reserved.trees.is_empty());
        assert!(idx.reservations.is_empty() && idx.per_requester.is_empty());
        assert_eq!(idx.earliest_expiry, None);
        // The stored layer removes emptied maps at once, as before.
        idx.remove("a", "one");
        idx.remove("a", "three");
        assert!(idx.stored.names.is_empty() && idx.stored.trees.is_empty());
        assert!(idx.is_empty());
    }

    #[test]
    fn a_purge_looks_again_at_the_earliest_expiry_left() {
        let mut idx = OverlapIndex::new();
        idx.reserve(
            entry("a", "one", "r", 1, 2),
            t(0) + Duration::seconds(30),
            "ann",
        );
        idx.reserve(
            entry("a", "two", "r", 3, 4),
            t(0) + Duration::seconds(90),
            "ann",
        );
        assert_eq!(idx.purge_expired(t(0) + Duration::seconds(30)), 1);
        assert_eq!(idx.earliest_expiry, Some(t(0) + Duration::seconds(90)));
        // A reservation dropped (confirmed) leaves a bound that is still lower than the rest.
        idx.reserve(
            entry("a", "three", "r", 5, 6),
            t(0) + Duration::seconds(40),
            "ann",
        );
        idx.upsert(entry("a", "three", "r", 5, 6));
        assert_eq!(idx.purge_expired(t(0) + Duration::seconds(50)), 0);
        assert_eq!(idx.earliest_expiry, Some(t(0) + Duration::seconds(90)));
        assert_eq!(idx.purge_expired(t(0) + Duration::seconds(90)), 1);
        assert_eq!((idx.reservations(), idx.earliest_expiry), (0, None));
    }

    #[test]
    fn reservations_block_until_confirmed_or_expired() {
        let mut idx = OverlapIndex::new();
        idx.reserve(
            entry("a", "fresh", "r", 1, 2),
            t(0) + Duration::seconds(30),
            "ann",
        );
        assert_eq!(
            names(idx.conflicts("a", "rival", "r", slot(1, 2), t(0))),
            ["fresh"]
        );
        // Expired: no longer blocks, and purge drops it.
        let later = t(0) + Duration::seconds(31);
        assert!(
            idx.conflicts("a", "rival", "r", slot(1, 2), later)
                .is_empty()
        );
        assert_eq!(idx.purge_expired(later), 1);
        assert_eq!(idx.reservations(), 0);
        // Confirmed by the watch with the same slot: the reservation is dropped, the stored entry
        // blocks, and it is listed once.
        idx.reserve(
            entry("a", "fresh", "r", 1, 2),
            t(0) + Duration::seconds(30),
            "ann",
        );
        idx.upsert(entry("a", "fresh", "r", 1, 2));
        assert_eq!(idx.reservations(), 0);
        assert_eq!(
            names(idx.conflicts("a", "rival", "r", slot(1, 2), t(0))),
            ["fresh"]
        );
        // A reservation of a moved slot keeps the stored one too until confirmed.
        idx.reserve(
            entry("a", "fresh", "r", 5, 6),
            t(0) + Duration::seconds(30),
            "ann",
        );
        assert_eq!(
            names(idx.conflicts("a", "rival", "r", slot(1, 6), t(0))),
            ["fresh"]
        );
        assert_eq!(
            names(idx.conflicts("a", "rival", "r", slot(5, 6), t(0))),
            ["fresh"]
        );
        assert_eq!(
            names(idx.conflicts("a", "rival", "r", slot(1, 2), t(0))),
            ["fresh"]
        );
    }

    #[test]
    fn replace_all_forgets_bookings_missing_from_the_relist() {
        let mut idx = OverlapIndex::new();
        idx.upsert(entry("a", "gone", "r", 1, 2));
        idx.replace_all([entry("a", "kept", "r", 3, 4)]);
        assert!(idx.get("a", "gone").is_none());
        assert!(idx.get("a", "kept").is_some());
        assert_eq!(idx.len(), 1);
    }

    #[test]
    fn a_relist_confirms_the_reservations_it_holds_and_shares_strings() {
        let mut idx = OverlapIndex::new();
        let ttl = t(0) + Duration::seconds(30);
        idx.reserve(entry("a", "listed", "r", 1, 2), ttl, "ann");
        idx.reserve(entry("a", "moved", "r", 3, 4), ttl, "ann");
        let mut listed = Listed::default();
        listed.push(entry("a", "listed", "r", 1, 2));
        listed.push(entry("a", "moved", "r", 5, 6));
        listed.push(entry("a", "other", "r", 7, 8));
        assert_eq!(listed.len(), 3);
        idx.replace_listed(&mut listed);
        assert!(listed.is_empty());
        assert_eq!((idx.len(), idx.reservations()), (3, 1));
        assert_eq!(idx.reservations_by("ann"), 1);
        let (one, two) = (
            idx.get("a", "listed").unwrap(),
            idx.get("a", "other").unwrap(),
        );
        assert!(Arc::ptr_eq(&one.namespace, &two.namespace));
        assert!(Arc::ptr_eq(&one.resource_name, &two.resource_name));
        assert!(Arc::ptr_eq(&one.user_id, &two.user_id));
    }

    #[test]
    fn ten_thousand_bookings_answer_in_logarithmic_time() {
        let mut idx = OverlapIndex::new();
        for i in 0..10_000 {
            idx.upsert(entry("a", &format!("b{i}"), "r", i, i + 1));
        }
        let started = std::time::Instant::now();
        for i in 0..10_000 {
            let got = idx.conflicts("a", "x", "r", slot(i, i + 1), t(0));
            assert_eq!(got.len(), 1);
        }
        // 10,000 queries; a scan per query would be 10^8 comparisons. Generous bound for a
        // debug build on a shared machine.
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn from_booking_reads_times_and_skips_bad_slots() {
        let mut b = Booking::new(
            "x",
            crate::api::BookingSpec {
                resource_name: "r".into(),
                start_at: "2031-01-10T01:00:00Z".into(),
                end_at: "2031-01-10T02:00:00+01:00".into(),
                user_id: "ann".into(),
                notifications: vec![],
            },
        );
        assert!(IndexedBooking::from_booking(&b).is_none(), "no namespace");
        b.metadata.namespace = Some("a".into());
        assert!(IndexedBooking::from_booking(&b).is_none(), "end == start");
        b.spec.end_at = "2031-01-10T02:00:00Z".into();
        let e = IndexedBooking::from_booking(&b).unwrap();
        assert_eq!(e.slot, slot(1, 2));
    }
}
