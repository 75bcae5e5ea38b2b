//! The watches the controllers are fed from: one watch per kind, shared by every controller that
//! reads it. The Resources (and BookingSchedulers) are cached whole in kube's reflector stores
//! (see `fanout` for why not kube's shared streams); the Bookings only in the booking index,
//! each compact (see `index`), which feeds the Booking and notification reconcilers' queues
//! (see `queue`). The triggers are computed from their events (see `triggers`).

use std::sync::Arc;

use booking_shared::api::{
    Booking, BookingScheduler, BookingSpec, BookingStatus, Resource, watched_meta,
};
use futures::channel::mpsc;
use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};

use crate::context::Caches;
use crate::fanout::{Fanout, Synced};
use crate::index::{BookingIndex, Change};
use crate::metrics::Metrics;
use crate::triggers::{ResourceTriggers, bookings_of, of_booking_change};
use crate::wakeups::Wakeups;

/// The API of kind `K` in `namespace`, or in every namespace when it is empty.
pub fn api<K>(client: &kube::Client, namespace: &str) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    if namespace.is_empty() {
        Api::all(client.clone())
    } else {
        Api::namespaced(client.clone(), namespace)
    }
}

/// Drops from a cached object what no reconciler reads: `metadata.managedFields` and the
/// `kubectl.kubernetes.io/last-applied-configuration` annotation (a full copy of the spec).
/// Together they are most of a small object's size.
fn strip_cached<K: kube::Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// A Booking as the controller's watch reads it: its spec and status, and of its metadata only
/// what the reconcilers read ([`watched_meta`]: name, namespace, uid, resourceVersion,
/// generation, creation and deletion timestamps). managedFields, labels, annotations, owner
/// references and finalizers are skipped unread by the decoder, so that a list page holds 500
/// bookings at the size the index keeps, not with the maps of their managedFields. Labels and
/// annotations are never read from the cache: the scheduler lists its own bookings by label
/// from the API server, and the requested-by annotation that phase Events and notifications
/// name the booking's creator by is read from the booking as the status write returns it or as
/// read fresh before a send. The status writer patches `status` alone, so nothing left unread
/// here can be written back. The index stores it compact, its condition texts interned.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct WatchedBooking {
    #[serde(deserialize_with = "watched_meta")]
    metadata: ObjectMeta,
    spec: BookingSpec,
    #[serde(default)]
    status: Option<BookingStatus>,
}

booking_shared::watched_resource!(WatchedBooking, Booking);

impl From<WatchedBooking> for Booking {
    fn from(w: WatchedBooking) -> Self {
        // The index keeps the status's lists as boxed slices of their length.
        Booking {
            metadata: w.metadata,
            spec: w.spec,
            status: w.status,
        }
    }
}

/// A watch event of the projection, as the Booking it holds.
fn booking_event(ev: watcher::Event<WatchedBooking>) -> watcher::Event<Booking> {
    use watcher::Event;
    match ev {
        Event::Apply(b) => Event::Apply(b.into()),
        Event::Delete(b) => Event::Delete(b.into()),
        Event::InitApply(b) => Event::InitApply(b.into()),
        Event::Init => Event::Init,
        Event::InitDone => Event::InitDone,
    }
}

/// The event streams the controllers are fed from, and the triggers computed from them.
pub struct Feeds {
    /// Every booking the watch delivered changed (all of them on a first list), for the
    /// Booking reconciler's queue (see `queue`).
    pub booking_events: mpsc::UnboundedReceiver<ObjectRef<Booking>>,
    /// The same, for the notification reconciler's queue.
    pub notification_events: mpsc::UnboundedReceiver<ObjectRef<Booking>>,
    pub resource_events: mpsc::UnboundedReceiver<Arc<Resource>>,
    /// Every change of a Resource, for the notifications that follow its group's state.
    pub notification_resource_events: mpsc::UnboundedReceiver<Arc<Resource>>,
    pub booking_triggers: mpsc::UnboundedReceiver<ObjectRef<Booking>>,
    pub resource_triggers: mpsc::UnboundedReceiver<ObjectRef<Resource>>,
    /// The BookingSchedulers as the watch applies them to [`Caches::schedulers`], for the
    /// scheduler controller (one watch for both).
    pub scheduler_events: SchedulerEvents,
}

/// The stream of BookingSchedulers applied to the cache.
pub type SchedulerEvents =
    futures::stream::BoxStream<'static, Result<BookingScheduler, watcher::Error>>;

impl Feeds {
    /// Starts the Booking and Resource watches. Cached objects drop what no reconciler reads
    /// (managedFields, the last-applied annotation), which is most of a small object's size.
    /// The cache and the index are updated before any trigger is sent (the fan-out's too), so a
    /// reconcile never decides on a cache older than its trigger (a deleted active booking must
    /// release its group).
    pub fn new(client: &kube::Client, ns: &str, metrics: Metrics) -> (Caches, Self) {
        let (resources_store, resources_writer) = kube::runtime::reflector::store::<Resource>();
        let (schedulers_store, schedulers_writer) =
            kube::runtime::reflector::store::<BookingScheduler>();
        let index = Arc::new(BookingIndex::default());
        metrics.watch_caches(index.clone(), resources_store.clone());
        let wakeups = [Arc::new(Wakeups::default()), Arc::new(Wakeups::default())];
        let resource_turns = crate::aws::executor::Turns::default();
        let resource_wakeups = Arc::new(Wakeups::marking_fired(resource_turns.clone()));
        let resources_synced = Arc::new(Synced::default());
        let (resource_tx, resource_triggers) = mpsc::unbounded::<ObjectRef<Resource>>();
        let (booking_tx, booking_triggers) = mpsc::unbounded::<ObjectRef<Booking>>();
        let (booking_events, notification_events, booking_subscribers) = {
            let (btx, brx) = mpsc::unbounded();
            let (ntx, nrx) = mpsc::unbounded();
            (brx, nrx, [btx, ntx])
        };
        let mut resource_fanout = Fanout::<Resource>::default();
        let wc = watcher::Config::default();
        let scheduler_events =
            cached_watch(schedulers_writer, api(client, ns), wc.clone(), strip_cached)
                .applied_objects()
                .boxed();
        let feeds = Self {
            booking_events,
            notification_events,
            resource_events: resource_fanout.subscribe(),
            notification_resource_events: resource_fanout.subscribe(),
            booking_triggers,
            resource_triggers,
            scheduler_events,
        };
        // Bookings are listed from etcd, never from the API server's watch cache: right after
        // an API server restart that cache can serve a list older than what is stored, and a
        // booking missing from it would read as "no booking" and stop a held group.
        let booking_wc = wc.clone().list_semantic(watcher::ListSemantic::MostRecent);
        let bookings_feed = booking_feed(
            watcher(api::<WatchedBooking>(client, ns), booking_wc)
                .default_backoff()
                .map_ok(booking_event),
            index.clone(),
            wakeups.clone(),
            booking_subscribers,
            Triggers {
                resources: resource_tx.clone(),
                bookings: booking_tx.clone(),
            },
            metrics,
        );
        let resources_feed = resource_feed(
            cached_watch(resources_writer, api(client, ns), wc, strip_cached),
            resources_store.clone(),
            index.clone(),
            resources_synced.clone(),
            resource_wakeups.clone(),
            resource_fanout,
            Triggers {
                resources: resource_tx,
                bookings: booking_tx,
            },
        );
        // The feeds end with the process; the controllers' graceful shutdown stops them first.
        tokio::spawn(bookings_feed);
        tokio::spawn(resources_feed);
        let [booking_wakeups, notification_wakeups] = wakeups;
        let caches = Caches {
            index,
            booking_wakeups,
            notification_wakeups,
            resource_wakeups,
            resource_turns,
            resources: resources_store,
            resources_synced,
            schedulers: schedulers_store,
        };
        (caches, feeds)
    }
}

/// A watch of `api` feeding `writer`'s cache, with kube's default backoff; `project` drops from
/// each object what no reconciler reads before it is cached ([`strip_cached`]).
fn cached_watch<K>(
    writer: kube::runtime::reflector::store::Writer<K>,
    api: Api<K>,
    wc: watcher::Config,
    project: fn(&mut K),
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    K: Send + Sync + 'static,
{
    kube::runtime::reflector(writer, watcher(api, wc).default_backoff().modify(project))
}

/// The Booking feed: the index first (and a deleted booking's instants out of the Booking and
/// notification `wakeups`), then the bookings delivered to the reconcilers' queues, then the
/// triggers its change computes. A (re)list updates the index as it comes and announces, at its
/// end, the bookings that are new or changed and the bookings gone (on a first list, every
/// booking; on a relist after a watch gap, only what changed during the gap, so that a relist
/// of 100,000 unchanged bookings wakes no reconcile). What the gap changed around an unchanged
/// booking (a booking of the same Resource gone) is announced by the index's change.
fn booking_feed(
    events: impl Stream<Item = Result<watcher::Event<Booking>, watcher::Error>> + Send + 'static,
    index: Arc<BookingIndex>,
    wakeups: [Arc<Wakeups>; 2],
    subscribers: [mpsc::UnboundedSender<ObjectRef<Booking>>; 2],
    triggers: Triggers,
    metrics: Metrics,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    // During a (re)list: what it has changed so far, and the bookings it delivered changed.
    let mut listed: Option<(Change, Vec<ObjectRef<Booking>>)> = None;
    let announce = move |keys: Vec<ObjectRef<Booking>>| {
        for s in &subscribers {
            for k in &keys {
                // A subscriber gone means its reconciler has shut down: nothing to tell it.
                let _ = s.unbounded_send(k.clone());
            }
        }
    };
    events.for_each(move |ev| {
        let change = match ev {
            Ok(watcher::Event::Apply(b)) => {
                let key = key_of(&b);
                let change = index.apply(b);
                announce(key.into_iter().collect());
                change
            }
            Ok(watcher::Event::Delete(b)) => {
                // A deleted booking is never reconciled again: its instants go with it.
                for w in &wakeups {
                    w.forget(&b);
                }
                index.delete(&b)
            }
            Ok(watcher::Event::Init) => {
                index.begin_list();
                // A list that restarts (an error part-way) keeps what it has announced so far.
                listed.get_or_insert_with(Default::default);
                Change::default()
            }
            Ok(watcher::Event::InitApply(b)) => {
                let key = key_of(&b);
                if let (Some(c), Some((change, keys))) = (index.list_apply(b), listed.as_mut()) {
                    change.resources.extend(c.resources);
                    change.rearbitrate.extend(c.rearbitrate);
                    keys.extend(key);
                }
                Change::default()
            }
            Ok(watcher::Event::InitDone) => {
                let (mut change, keys) = listed.take().unwrap_or_default();
                let (gone, removed) = index.end_list();
                for r in &removed {
                    for w in &wakeups {
                        w.set(r.namespace.as_deref().unwrap_or_default(), &r.name, None);
                    }
                }
                change.resources.extend(gone.resources);
                change.rearbitrate.extend(gone.rearbitrate);
                announce(keys);
                change
            }
            Err(e) => {
                tracing::warn!(error = %e, "booking watch error; retrying");
                Change::default()
            }
        };
        metrics.set_active_bookings(i64::try_from(index.in_progress()).unwrap_or(i64::MAX));
        let (resources, bookings) = of_booking_change(&index, change);
        for r in resources {
            let _ = triggers.resources.unbounded_send(r);
        }
        for b in bookings {
            let _ = triggers.bookings.unbounded_send(b);
        }
        futures::future::ready(())
    })
}

/// The queue key of booking `b` (its namespace and name only).
fn key_of(b: &Booking) -> Option<ObjectRef<Booking>> {
    Some(ObjectRef::new(b.metadata.name.as_deref()?).within(b.metadata.namespace.as_deref()?))
}

/// Where the feeds send the references of the objects a change concerns: the Resource and
/// Booking controllers' trigger streams.
struct Triggers {
    resources: mpsc::UnboundedSender<ObjectRef<Resource>>,
    bookings: mpsc::UnboundedSender<ObjectRef<Booking>>,
}

/// The Resource feed: marks the first full list (and a deleted Resource's instant out of
/// `wakeups`), then the fan-out, then wakes the bookings of the Resources an event concerns.
fn resource_feed(
    events: impl Stream<Item = Result<watcher::Event<Resource>, watcher::Error>> + Send + 'static,
    store: kube::runtime::reflector::Store<Resource>,
    index: Arc<BookingIndex>,
    synced: Arc<Synced>,
    wakeups: Arc<Wakeups>,
    mut fanout: Fanout<Resource>,
    to: Triggers,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let mut triggers = ResourceTriggers::default();
    // The group each Resource last claimed, to tell when a claimer leaves its group.
    let mut claimed: std::collections::HashMap<ObjectRef<Resource>, (String, String)> =
        Default::default();
    events.for_each(move |ev| {
        // A claimer deleted, or moved to another group: the next claimer of the group it left
        // takes over (see reconcile::resource::claim).
        let left = match &ev {
            Ok(watcher::Event::Delete(gone)) => {
                // A deleted Resource is never reconciled again: its instant goes with it.
                wakeups.forget(gone);
                claimed
                    .remove(&ObjectRef::from_obj(gone))
                    .or_else(|| Some((gone.spec.type_.clone(), gone.spec.tag.clone())))
            }
            Ok(watcher::Event::Apply(r) | watcher::Event::InitApply(r)) => {
                let group = (r.spec.type_.clone(), r.spec.tag.clone());
                claimed
                    .insert(ObjectRef::from_obj(r), group.clone())
                    .filter(|before| *before != group)
            }
            _ => None,
        };
        if let Some((type_, tag)) = left {
            for r in store
                .state()
                .iter()
                .filter(|r| r.spec.type_ == type_ && r.spec.tag == tag)
            {
                let _ = to.resources.unbounded_send(ObjectRef::from_obj(r.as_ref()));
            }
        }
        let concerned = match &ev {
            Ok(ev) => {
                if matches!(ev, watcher::Event::InitDone) {
                    synced.mark();
                }
                let relisted = || {
                    store
                        .state()
                        .iter()
                        .map(|r| ObjectRef::from_obj(r.as_ref()))
                        .collect()
                };
                let concerned = triggers.on_event(ev, relisted);
                fanout.send(&store, ev);
                concerned
            }
            Err(e) => {
                tracing::warn!(error = %e, "resource watch error; retrying");
                Vec::new()
            }
        };
        for b in bookings_of(&index, &concerned) {
            let _ = to.bookings.unbounded_send(b);
        }
        futures::future::ready(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use booking_shared::validation::REQUESTED_BY_ANNOTATION;

    #[test]
    fn the_watched_booking_keeps_what_reconcilers_read_and_no_annotation() {
        // A booking as the API server sends it: annotations, labels, finalizers and
        // managedFields besides what the reconcilers read; a status of three conditions.
        let sent = serde_json::json!({
            "apiVersion": "manager.kotaico.de/v1", "kind": "Booking",
            "metadata": {
                "name": "d", "namespace": "team", "uid": "0a1b2c3d-1111-4222-8333-0123456789ab",
                "resourceVersion": "42", "generation": 3,
                "creationTimestamp": "2026-12-03T09:00:00Z",
                "annotations": {
                    REQUESTED_BY_ANNOTATION: "ann",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}",
                },
                "labels": {"app": "etl"},
                "finalizers": ["x"],
                "managedFields": [{"manager": "kubectl", "operation": "Update",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {".": {}}}}],
            },
            "spec": {"resource_name": "ec2.etl", "start_at": "2026-12-03T11:00:00Z",
                     "end_at": "2026-12-03T12:00:00Z", "user_id": "ann"},
            "status": {"status": "SCHEDULED", "conditions": [
                {"type": "Ready", "status": "True", "reason": "Scheduled", "message": "m",
                 "lastTransitionTime": "2026-12-03T10:00:00Z"},
                {"type": "Conflict", "status": "False", "reason": "NoConflict", "message": "m",
                 "lastTransitionTime": "2026-12-03T10:00:00Z"},
                {"type": "ResourceExists", "status": "True", "reason": "Found", "message": "m",
                 "lastTransitionTime": "2026-12-03T10:00:00Z"},
            ]},
        })
        .to_string();
        let whole: Booking = serde_json::from_str(&sent).unwrap();
        let watched: WatchedBooking = serde_json::from_str(&sent).unwrap();
        let b = Booking::from(watched);

        // Spec and status as sent; of the metadata, what the reconcilers read.
        assert_eq!((&b.spec, &b.status), (&whole.spec, &whole.status));
        let meta = &b.metadata;
        assert_eq!(meta.name, whole.metadata.name);
        assert_eq!(meta.namespace, whole.metadata.namespace);
        assert_eq!(meta.uid, whole.metadata.uid);
        assert_eq!(meta.resource_version, whole.metadata.resource_version);
        assert_eq!(meta.generation, Some(3));
        assert_eq!(meta.creation_timestamp, whole.metadata.creation_timestamp);
        assert_eq!(meta.annotations, None);
        assert_eq!(meta.labels, None);
        assert_eq!(meta.finalizers, None);
        assert_eq!(meta.managed_fields, None);

        // It lists and watches the Bookings' endpoint.
        assert_eq!(
            <WatchedBooking as kube::Resource>::url_path(&(), Some("team")),
            <Booking as kube::Resource>::url_path(&(), Some("team"))
        );
    }
}
