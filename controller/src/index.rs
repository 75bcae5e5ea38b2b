//! The Bookings of each Resource: the controller's one cache of Bookings.
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

use booking_shared::api::{
    Booking, BookingPhase, BookingSpec, BookingStatus, Notification, Resource,
};
use booking_shared::time::{Slot, format_rfc3339};
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::runtime::reflector::ObjectRef;

use booking_shared::arbitration::BookingView;

use crate::fanout::Synced;

/// What a booking holds in the index: its arbitration view without its name (the name is the
/// member's key), parsed once per change of the booking, not once per reconcile, and the rest
/// of the booking as the watch last delivered it ([`Rest`]). The index is the controller's
/// only copy of a booking: the Booking and notification reconcilers get theirs from it
/// ([`BookingIndex::get`]).
#[derive(Clone, Debug)]
struct Member {
    created: Option<DateTime<Utc>>,
    user: Box<str>,
    slot: Result<Slot, Box<str>>,
    deleting: bool,
    in_progress: bool,
    rest: Box<Rest>,
    /// The (re)list that last delivered the booking ([`BookingIndex::begin_list`]).
    listed: u64,
}

/// The rest of a cached booking, besides its arbitration view: what the reconcilers read of
/// its metadata, its timestamps as written, its notifications and its status. Nothing else
/// of the object is kept (see `feeds::WatchedBooking`).
#[derive(Clone, Debug, PartialEq)]
struct Rest {
    uid: Option<Uid>,
    resource_version: Option<Box<str>>,
    generation: Option<i64>,
    /// The deletion timestamp and grace period (boxed: most bookings are not being deleted).
    deletion: Option<Box<(Time, Option<i64>)>>,
    /// `start_at` and `end_at` as written, kept only when they are not the canonical text of
    /// the member's slot ([`format_rfc3339`]): most are, and are given back from the slot.
    written: Option<Box<(Box<str>, Box<str>)>>,
    notifications: Box<[Notification]>,
    status: Option<Box<CachedStatus>>,
}

/// A booking's uid as cached: the 16 bytes of a UUID when its text is the canonical
/// (lower-case, hyphenated) form the API server writes, the text itself otherwise.
#[derive(Clone, Debug, PartialEq)]
enum Uid {
    Uuid(uuid::Bytes),
    Text(Box<str>),
}

impl Uid {
    fn of(text: String) -> Self {
        match uuid::Uuid::try_parse(&text) {
            Ok(u)
                if *u
                    .hyphenated()
                    .encode_lower(&mut uuid::Uuid::encode_buffer())
                    == *text =>
            {
                Self::Uuid(u.into_bytes())
            }
            _ => Self::Text(text.into_boxed_str()),
        }
    }

    fn text(&self) -> String {
        match self {
            Self::Uuid(bytes) => uuid::Uuid::from_bytes(*bytes).hyphenated().to_string(),
            Self::Text(text) => text.to_string(),
        }
    }
}

/// A booking's status as cached: its lists boxed to their length, its conditions compact
/// ([`CachedCondition`]).
#[derive(Clone, Debug, PartialEq)]
struct CachedStatus {
    phase: Option<BookingPhase>,
    notification_sent: bool,
    notifications_sent: Box<[Box<str>]>,
    held_at: Option<Box<str>>,
    conditions: Box<[CachedCondition]>,
    observed_generation: Option<i64>,
}

/// A status condition as cached: its texts interned together ([`CondText`]), its time and
/// generation its own.
#[derive(Clone, Debug, PartialEq)]
struct CachedCondition {
    text: internment::ArcIntern<CondText>,
    last_transition_time: Time,
    observed_generation: Option<i64>,
}

/// The four texts of a condition, interned: a type, status and reason come from a handful of
/// values, and most conditions are shared by every booking of a Resource ("Resource … exists",
/// "no earlier booking … overlaps this one"). A message that names its own booking ("b-1 is
/// SCHEDULED") is kept with that name cut out (`name_at`: where it goes back), so that it is
/// shared too. Freed with the last condition that holds it.
#[derive(Debug, PartialEq, Eq, Hash)]
struct CondText {
    type_: Box<str>,
    status: Box<str>,
    reason: Box<str>,
    message: Box<str>,
    name_at: Option<u32>,
}

impl CondText {
    /// The texts of `c`, a condition of booking `name`.
    fn of(c: Condition, name: &str) -> Self {
        let cut = (!name.is_empty())
            .then(|| c.message.find(name))
            .flatten()
            .and_then(|at| Some((at, u32::try_from(at).ok()?)));
        let (message, name_at) = match cut {
            Some((at, at32)) => {
                let mut m = c.message;
                m.replace_range(at..at + name.len(), "");
                (m, Some(at32))
            }
            None => (c.message, None),
        };
        Self {
            type_: c.type_.into_boxed_str(),
            status: c.status.into_boxed_str(),
            reason: c.reason.into_boxed_str(),
            message: message.into_boxed_str(),
            name_at,
        }
    }

    /// The message as written, for booking `name`.
    fn message(&self, name: &str) -> String {
        match self.name_at {
            Some(at) => {
                let at = at as usize;
                let mut m = String::with_capacity(self.message.len() + name.len());
                m.push_str(&self.message[..at]);
                m.push_str(name);
                m.push_str(&self.message[at..]);
                m
            }
            None => self.message.to_string(),
        }
    }
}

impl CachedStatus {
    /// The status `s` of booking `name`.
    fn of(s: BookingStatus, name: &str) -> Self {
        Self {
            phase: s.status,
            notification_sent: s.notification_sent,
            notifications_sent: s
                .notifications_sent
                .into_iter()
                .map(String::into_boxed_str)
                .collect(),
            held_at: s.held_at.map(String::into_boxed_str),
            conditions: s
                .conditions
                .into_iter()
                .map(|c| {
                    let last_transition_time = c.last_transition_time.clone();
                    let observed_generation = c.observed_generation;
                    CachedCondition {
                        text: internment::ArcIntern::new(CondText::of(c, name)),
                        last_transition_time,
                        observed_generation,
                    }
                })
                .collect(),
            observed_generation: s.observed_generation,
        }
    }

    /// The status as delivered, of booking `name`.
    fn status(&self, name: &str) -> BookingStatus {
        BookingStatus {
            status: self.phase,
            notification_sent: self.notification_sent,
            notifications_sent: self
                .notifications_sent
                .iter()
                .map(|k| k.to_string())
                .collect(),
            held_at: self.held_at.as_deref().map(str::to_owned),
            conditions: self
                .conditions
                .iter()
                .map(|c| Condition {
                    type_: c.text.type_.to_string(),
                    status: c.text.status.to_string(),
                    reason: c.text.reason.to_string(),
                    message: c.text.message(name),
                    last_transition_time: c.last_transition_time.clone(),
                    observed_generation: c.observed_generation,
                })
                .collect(),
            observed_generation: self.observed_generation,
        }
    }
}

impl Member {
    /// The member of booking `b` named `name`, which it consumes.
    fn of(b: Booking, name: &str) -> Self {
        let view = BookingView::of(&b);
        let Booking {
            metadata,
            spec,
            status,
        } = b;
        let canonical = view.slot.as_ref().is_ok_and(|slot| {
            format_rfc3339(slot.start) == spec.start_at && format_rfc3339(slot.end) == spec.end_at
        });
        let written = (!canonical)
            .then(|| Box::new((spec.start_at.into_boxed_str(), spec.end_at.into_boxed_str())));
        Self {
            created: view.created,
            user: view.user.into_boxed_str(),
            slot: view.slot.map_err(String::into_boxed_str),
            deleting: view.deleting,
            in_progress: status.as_ref().and_then(|s| s.status) == Some(BookingPhase::InProgress),
            rest: Box::new(Rest {
                uid: metadata.uid.map(Uid::of),
                resource_version: metadata.resource_version.map(String::into_boxed_str),
                generation: metadata.generation,
                deletion: metadata
                    .deletion_timestamp
                    .map(|t| Box::new((t, metadata.deletion_grace_period_seconds))),
                written,
                notifications: spec.notifications.into_boxed_slice(),
                status: status.map(|s| Box::new(CachedStatus::of(s, name))),
            }),
            listed: 0,
        }
    }

    /// The booking this member was made of (as `feeds::WatchedBooking` left it).
    fn booking(&self, ns: &str, name: &str, resource: &str) -> Booking {
        let rest = &*self.rest;
        let (start_at, end_at) = match (&rest.written, &self.slot) {
            (Some(written), _) => (written.0.to_string(), written.1.to_string()),
            (None, Ok(slot)) => (format_rfc3339(slot.start), format_rfc3339(slot.end)),
            // Not kept only when the slot is valid.
            (None, Err(_)) => (String::new(), String::new()),
        };
        let mut b = Booking::new(
            name,
            BookingSpec {
                resource_name: resource.to_owned(),
                start_at,
                end_at,
                user_id: self.user.to_string(),
                notifications: rest.notifications.to_vec(),
            },
        );
        let meta = &mut b.metadata;
        meta.namespace = Some(ns.to_owned());
        meta.uid = rest.uid.as_ref().map(Uid::text);
        meta.resource_version = rest.resource_version.as_deref().map(str::to_owned);
        meta.generation = rest.generation;
        meta.creation_timestamp = self.created.map(booking_shared::time::to_kube_time);
        if let Some(deletion) = &rest.deletion {
            meta.deletion_timestamp = Some(deletion.0.clone());
            meta.deletion_grace_period_seconds = deletion.1;
        }
        b.status = rest.status.as_ref().map(|s| s.status(name));
        b
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

    /// Whether `other` is the same booking as cached: what the index answers and what it
    /// gives reconcilers are the same for both.
    fn same(&self, other: &Member) -> bool {
        self == other && self.rest == other.rest
    }
}

/// Members compare by what the index answers about them (their views and phase), not by
/// their [`Rest`]: a Resource's bookings "differ" for the index when arbitration or the
/// holder may.
impl PartialEq for Member {
    fn eq(&self, other: &Self) -> bool {
        self.created == other.created
            && self.user == other.user
            && self.slot == other.slot
            && self.deleting == other.deleting
            && self.in_progress == other.in_progress
    }
}

/// A booking's namespace, name, the Resource it names, and its member, which takes the rest of
/// it; `None` without a namespace or a name.
fn parse(mut b: Booking) -> Option<(String, String, String, Member)> {
    let ns = b.metadata.namespace.take()?;
    let name = b.metadata.name.take()?;
    let resource = std::mem::take(&mut b.spec.resource_name);
    let member = Member::of(b, &name);
    Some((ns, name, resource, member))
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
    /// The current (re)list: members it has not delivered by its end are gone.
    epoch: u64,
}

impl Inner {
    /// Adds (or replaces) a booking, as delivered by the current list; returns the Resource it
    /// named before, its old member and whether both arbitrate alike.
    fn insert(
        &mut self,
        ns: &str,
        name: &str,
        resource: &str,
        mut member: Member,
    ) -> Option<(Arc<str>, Member, bool)> {
        let old = self.remove(ns, name).map(|(r, old)| {
            let same = old.arbitrates_like(&member);
            (r, old, same)
        });
        member.listed = self.epoch;
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

    /// The member `ns/name` and the Resource it names.
    fn member(&self, ns: &str, name: &str) -> Option<(&Arc<str>, &Member)> {
        let space = self.namespaces.get(ns)?;
        let resource = space.resource_of.get(name)?;
        Some((resource, space.groups.get(resource)?.get(name)?))
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
    pub fn apply(&self, b: Booking) -> Change {
        let Some((ns, name, resource, member)) = parse(b) else {
            return Change::default();
        };
        let moved = self.write().insert(&ns, &name, &resource, member);
        Self::change_of(&ns, &resource, moved)
    }

    /// What replacing the member named `before` (with the Resource it named) by `now`'s
    /// member concerns.
    fn change_of(ns: &str, resource: &str, before: Option<(Arc<str>, Member, bool)>) -> Change {
        let mut change = Change::default();
        let now = ObjectRef::new(resource).within(ns);
        change.resources.insert(now.clone());
        if let Some((before, _, same)) = before {
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

    /// A (re)list begins: the bookings it does not deliver before [`BookingIndex::end_list`]
    /// are gone. The index keeps answering meanwhile, each booking as last delivered.
    pub fn begin_list(&self) {
        self.write().epoch += 1;
    }

    /// A booking delivered by the current list. `None` when the index holds it already as
    /// delivered (a relist of an unchanged booking concerns nothing); otherwise what it
    /// concerns, its Resource's bookings to arbitrate again too (what a watch gap changed
    /// around them is not known).
    pub fn list_apply(&self, b: Booking) -> Option<Change> {
        let (ns, name, resource, member) = parse(b)?;
        let moved = {
            let mut inner = self.write();
            let epoch = inner.epoch;
            let namespaces = &mut inner.namespaces;
            let held = namespaces
                .get_mut(ns.as_str())
                .and_then(|space| {
                    let named = space.resource_of.get(name.as_str())?;
                    (**named == *resource).then_some(())?;
                    space
                        .groups
                        .get_mut(resource.as_str())?
                        .get_mut(name.as_str())
                })
                .filter(|held| held.same(&member));
            if let Some(held) = held {
                held.listed = epoch;
                return None;
            }
            inner.insert(&ns, &name, &resource, member)
        };
        let mut change = Self::change_of(&ns, &resource, moved);
        change.rearbitrate.extend(change.resources.iter().cloned());
        Some(change)
    }

    /// The current list has ended: the bookings it did not deliver are removed, and the index
    /// is ready. Returns what their removal concerns and the removed bookings.
    pub fn end_list(&self) -> (Change, Vec<ObjectRef<Booking>>) {
        let mut change = Change::default();
        let mut gone = Vec::new();
        {
            let mut inner = self.write();
            let epoch = inner.epoch;
            let mut stale: Vec<(Arc<str>, Box<str>)> = Vec::new();
            for (ns, space) in &inner.namespaces {
                for group in space.groups.values() {
                    for (name, m) in group {
                        if m.listed != epoch {
                            stale.push((ns.clone(), name.clone()));
                        }
                    }
                }
            }
            for (ns, name) in stale {
                if let Some((resource, _)) = inner.remove(&ns, &name) {
                    let resource = ObjectRef::new(&resource).within(&ns);
                    change.resources.insert(resource.clone());
                    change.rearbitrate.insert(resource);
                    gone.push(ObjectRef::new(&name).within(&ns));
                }
            }
        }
        self.ready.mark();
        (change, gone)
    }

    /// Replaces the whole index by `all`, as a (re)list does.
    #[cfg(test)]
    pub fn rebuild<'a>(&self, all: impl IntoIterator<Item = &'a Booking>) -> Change {
        self.begin_list();
        let mut change = Change::default();
        for b in all {
            if let Some(c) = self.list_apply(b.clone()) {
                change.resources.extend(c.resources);
                change.rearbitrate.extend(c.rearbitrate);
            }
        }
        let (gone, _) = self.end_list();
        change.resources.extend(gone.resources);
        change.rearbitrate.extend(gone.rearbitrate);
        change
    }

    /// Booking `key` as the watch last delivered it (what `feeds::WatchedBooking` keeps).
    pub fn get(&self, key: &ObjectRef<Booking>) -> Option<Booking> {
        let ns = key.namespace.as_deref()?;
        let inner = self.read();
        let (resource, member) = inner.member(ns, &key.name)?;
        Some(member.booking(ns, &key.name, resource))
    }

    /// Calls `f` with the phase of every booking (`None`: no phase written yet).
    pub fn each_phase(&self, mut f: impl FnMut(Option<BookingPhase>)) {
        let inner = self.read();
        for space in inner.namespaces.values() {
            for m in space.groups.values().flat_map(HashMap::values) {
                f(m.rest.status.as_ref().and_then(|s| s.phase));
            }
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

    /// The index keeps the whole booking as the watch delivered it: what a reconciler gets
    /// back is that booking, field for field.
    #[test]
    fn a_booking_comes_back_as_delivered() {
        use booking_shared::api::{Notification, NotificationEvent};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
        let json = |b: Option<Booking>| serde_json::to_value(b).unwrap();
        let idx = BookingIndex::default();
        let at = |s: &str| booking_shared::time::to_kube_time(s.parse().unwrap());
        let mut b = booking("a", "r1", "2031-01-10T11:00:00+01:00", E);
        b.metadata.uid = Some("0b0c5e0e-5b1a-4a4e-9d0a-1f2e3d4c5b6a".into());
        b.metadata.resource_version = Some("1234".into());
        b.metadata.generation = Some(2);
        b.metadata.creation_timestamp = Some(at("2031-01-09T08:00:00Z"));
        b.spec.user_id = "ann".into();
        b.spec.notifications = vec![Notification {
            type_: "email".into(),
            recipient: "ann@example.com".into(),
            lead_minutes: Some(5),
            events: vec![NotificationEvent::Started.to_string()],
            ..Default::default()
        }];
        let condition = |type_: &str, message: &str| Condition {
            type_: type_.into(),
            status: "True".into(),
            reason: "Scheduled".into(),
            message: message.into(),
            last_transition_time: at("2031-01-09T08:00:01Z"),
            observed_generation: Some(2),
        };
        b.status = Some(BookingStatus {
            status: Some(BookingPhase::Scheduled),
            notification_sent: true,
            notifications_sent: vec!["0:email:ann@example.com".into()],
            held_at: Some("2031-01-10T10:00:00Z".into()),
            conditions: vec![
                condition("Ready", "a is SCHEDULED"),
                condition("ResourceFound", "Resource r1 exists"),
            ],
            observed_generation: Some(2),
        });
        idx.apply(b.clone());
        let key = ObjectRef::new("a").within("ns");
        assert_eq!(json(idx.get(&key)), json(Some(b.clone())));
        // Another booking of the same Resource shares its texts, and keeps its own.
        let mut other = b.clone();
        other.metadata.name = Some("o".into());
        other.status.as_mut().unwrap().conditions[0].message = "o is SCHEDULED".into();
        idx.apply(other.clone());
        assert_eq!(
            json(idx.get(&ObjectRef::new("o").within("ns"))),
            json(Some(other))
        );
        assert_eq!(json(idx.get(&key)), json(Some(b.clone())));
        // Being deleted, with its grace period.
        b.metadata.deletion_timestamp = Some(at("2031-01-10T09:00:00Z"));
        b.metadata.deletion_grace_period_seconds = Some(0);
        b.status = None;
        idx.apply(b.clone());
        assert_eq!(json(idx.get(&key)), json(Some(b)));
        assert_eq!(
            json(idx.get(&ObjectRef::new("a").within("other"))),
            json(None)
        );
        let mut phases = Vec::new();
        idx.each_phase(|p| phases.push(p));
        phases.sort_by_key(|p| p.is_some());
        assert_eq!(phases, vec![None, Some(BookingPhase::Scheduled)]);
    }

    /// What the index keeps in a shorter form comes back as written: a uid that is not the
    /// canonical UUID text, times in their canonical text and not, a slot that does not parse,
    /// and a message naming its booking more than once or not at all.
    #[test]
    fn compact_forms_come_back_as_written() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
        let json = |b: Option<Booking>| serde_json::to_value(b).unwrap();
        let idx = BookingIndex::default();
        let cases = [
            ("0B0C5E0E-5B1A-4A4E-9D0A-1F2E3D4C5B6A", S, E, "b is b"),
            ("0b0c5e0e5b1a4a4e9d0a1f2e3d4c5b6a", S, E, "none of its name"),
            ("not-a-uuid", "2031-01-10T10:00:00.000Z", E, ""),
            ("0b0c5e0e-5b1a-4a4e-9d0a-1f2e3d4c5b6a", "tomorrow", E, "b"),
            ("", E, S, "end before start: b"),
        ];
        for (uid, start, end, message) in cases {
            let mut b = booking("b", "r1", start, end);
            b.metadata.uid = Some(uid.into());
            b.status = Some(BookingStatus {
                conditions: vec![Condition {
                    type_: "Ready".into(),
                    status: "False".into(),
                    reason: "Invalid".into(),
                    message: message.into(),
                    last_transition_time: booking_shared::time::to_kube_time(S.parse().unwrap()),
                    observed_generation: None,
                }],
                ..Default::default()
            });
            idx.apply(b.clone());
            assert_eq!(
                json(idx.get(&ObjectRef::new("b").within("ns"))),
                json(Some(b)),
                "{uid} {start} {end} {message}"
            );
        }
    }

    /// A relist applies each booking as it comes, removes at its end the bookings it did not
    /// deliver, and tells which bookings it changed.
    #[test]
    fn a_relist_removes_at_its_end_what_it_did_not_deliver() {
        let idx = BookingIndex::default();
        let (a, b) = (booking("a", "r1", S, E), booking("b", "r2", S, E));
        idx.apply(a.clone());
        idx.apply(b.clone());
        idx.begin_list();
        assert_eq!(idx.list_apply(a.clone()), None);
        // Until the list ends, `b` is still there.
        assert_eq!(idx.len(), 2);
        let (change, gone) = idx.end_list();
        assert_eq!(gone, vec![ObjectRef::new("b").within("ns")]);
        assert_eq!(change.rearbitrate, set(&["r2"]));
        assert_eq!(idx.len(), 1);
        // A list that restarts: only the last one's deliveries count.
        idx.begin_list();
        assert_eq!(idx.list_apply(a.clone()), None);
        idx.begin_list();
        let c = idx.list_apply(b).unwrap();
        assert_eq!(c.rearbitrate, set(&["r2"]));
        let (_, gone) = idx.end_list();
        assert_eq!(gone, vec![ObjectRef::new("a").within("ns")]);
    }

    #[test]
    fn a_new_booking_concerns_its_resource_only() {
        let idx = BookingIndex::default();
        let c = idx.apply(booking("a", "r1", S, E));
        assert_eq!(c.resources, set(&["r1"]));
        assert!(c.rearbitrate.is_empty());
        idx.apply(booking("b", "r2", S, E));
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
        idx.apply(b.clone());
        b.status = Some(BookingStatus {
            status: Some(BookingPhase::InProgress),
            ..Default::default()
        });
        let c = idx.apply(b.clone());
        assert_eq!(c.resources, set(&["r1"]));
        assert!(c.rearbitrate.is_empty());
        assert_eq!(idx.in_progress(), 1);
        b.spec.end_at = LATER.into();
        assert_eq!(idx.apply(b.clone()).rearbitrate, set(&["r1"]));
        b.metadata.deletion_timestamp = Some(Time(Default::default()));
        assert_eq!(idx.apply(b.clone()).rearbitrate, set(&["r1"]));
        assert_eq!(idx.in_progress(), 1);
    }

    #[test]
    fn moving_a_booking_concerns_both_resources() {
        let idx = BookingIndex::default();
        let mut b = booking("a", "r1", S, E);
        idx.apply(b.clone());
        b.spec.resource_name = "r2".into();
        let c = idx.apply(b.clone());
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
        idx.apply(a.clone());
        idx.apply(booking("b", "r2", S, E));
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
        idx.apply(booking("a", "r1", S, E));
        idx.apply(other.clone());
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
