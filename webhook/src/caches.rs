//! The watches that feed the webhook's caches: every Booking of the cluster into the overlap
//! index, every Resource into a kube-runtime reflector store.
//!
//! The booking watch reads each Booking as a [`WatchedBooking`]: the metadata every watch of
//! the project reads ([`watched_meta`]: names, uid, resourceVersion, generation, creation and
//! deletion marks) and the spec's Resource, user and times; the rest of the object
//! (managedFields, status, annotations, notifications) is skipped unread, so that a list of
//! 100,000 Bookings costs the index's entries and one page of objects at a time.
//!
//! The booking watch follows kube-runtime's reflector semantics: the objects of an initial list
//! (or of a relist after the watch was interrupted) are buffered and swapped into the index at
//! once when the list is complete, so the index never shows a half-listed cluster. The webhook
//! reports ready only after both initial lists.

use std::sync::Arc;

use booking_shared::{
    api::{Booking, Resource, watched_meta},
    overlap::{BookingFields, IndexedBooking, Listed},
};
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{
    Api, Client,
    runtime::{
        WatchStreamExt,
        reflector::{self, Store, reflector, store::Writer},
        utils::Backoff as _,
        watcher::{self, Event, watcher},
    },
};
use serde::Deserialize;
use tokio::sync::watch;

use crate::state::State;
use booking_shared::ops::stopped;

/// What the booking watch reads of a Booking: the metadata watches read ([`watched_meta`]; the
/// index uses the names and the deletion mark) and the spec's fields the index keeps;
/// everything else is skipped unread. It is the Booking's API
/// resource (group, version, kind, plural) for kube's watcher.
#[derive(Clone, Debug, Deserialize)]
pub struct WatchedBooking {
    /// What watches read of an object's metadata ([`watched_meta`]): the index reads name,
    /// namespace and deletionTimestamp, the watcher resumes from resourceVersion.
    #[serde(deserialize_with = "watched_meta")]
    pub metadata: ObjectMeta,
    /// The spec's fields the index keeps.
    pub spec: WatchedSpec,
}

/// The fields of a Booking's spec the index keeps (see [`booking_shared::api::BookingSpec`]).
#[derive(Clone, Debug, Deserialize)]
pub struct WatchedSpec {
    /// `spec.resource_name`.
    pub resource_name: String,
    /// `spec.start_at`.
    pub start_at: String,
    /// `spec.end_at`.
    pub end_at: String,
    /// `spec.user_id`.
    #[serde(default)]
    pub user_id: String,
}

booking_shared::watched_resource!(WatchedBooking, Booking);

/// A watched object the index reads: the Booking the webhook's watch delivers
/// ([`WatchedBooking`]), or a whole [`Booking`].
pub trait IndexSource {
    /// Namespace and name.
    fn key(&self) -> (&str, &str);
    /// Its index entry; `None` without namespace or name, or when its times form no slot.
    fn entry(&self) -> Option<IndexedBooking>;
}

impl IndexSource for WatchedBooking {
    fn key(&self) -> (&str, &str) {
        (
            self.metadata.namespace.as_deref().unwrap_or_default(),
            self.metadata.name.as_deref().unwrap_or_default(),
        )
    }

    fn entry(&self) -> Option<IndexedBooking> {
        IndexedBooking::new(BookingFields {
            namespace: self.metadata.namespace.as_deref()?,
            name: self.metadata.name.as_deref()?,
            resource_name: &self.spec.resource_name,
            user_id: &self.spec.user_id,
            start_at: &self.spec.start_at,
            end_at: &self.spec.end_at,
            deleting: self.metadata.deletion_timestamp.is_some(),
        })
    }
}

impl IndexSource for Booking {
    fn key(&self) -> (&str, &str) {
        (
            self.metadata.namespace.as_deref().unwrap_or_default(),
            self.metadata.name.as_deref().unwrap_or_default(),
        )
    }

    fn entry(&self) -> Option<IndexedBooking> {
        IndexedBooking::from_booking(self)
    }
}

/// Applies one watch event of a Booking to the index. `buffer` collects an initial list (or a
/// relist), swapped into the index when it is complete.
pub fn apply_booking_event<B: IndexSource>(state: &State, buffer: &mut Listed, event: Event<B>) {
    match event {
        Event::Init => buffer.clear(),
        Event::InitApply(b) => {
            if let Some(entry) = b.entry() {
                buffer.push(entry);
            }
        }
        Event::InitDone => {
            let listed = buffer.len();
            state.write_index().replace_listed(buffer);
            state.mark_bookings_synced();
            tracing::info!(bookings = listed, "booking index synced");
        }
        Event::Apply(b) => {
            let mut index = state.write_index();
            match b.entry() {
                Some(entry) => index.upsert(entry),
                // Times that no longer form a slot: such a booking blocks nothing.
                None => {
                    let (namespace, name) = b.key();
                    index.remove(namespace, name);
                }
            }
        }
        Event::Delete(b) => {
            let (namespace, name) = b.key();
            state.write_index().remove(namespace, name);
        }
    }
}

/// Watches every Booking of the cluster into the index until `shutdown`.
///
/// Any error of the watch (a failed list, a failed or broken watch request) marks the watch
/// failing ([`State::mark_booking_watch_failed`]) and starts a new watcher after kube's default
/// backoff, which lists again: only a completed list marks it healthy. So a watch that fails for
/// longer than [`State::watch_failure_bound`] makes the webhook unready, and it is ready again
/// once a relist has replaced the index.
pub async fn run_booking_watch(
    client: Client,
    state: Arc<State>,
    mut shutdown: watch::Receiver<bool>,
) {
    let api: Api<WatchedBooking> = Api::all(client);
    let mut backoff = watcher::DefaultBackoff::default();
    loop {
        let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
        let mut buffer = Listed::default();
        loop {
            tokio::select! {
                event = events.next() => match event {
                    Some(Ok(event)) => {
                        let listed = matches!(event, Event::InitDone);
                        apply_booking_event(&state, &mut buffer, event);
                        if listed {
                            state.mark_booking_watch_healthy();
                            backoff.reset();
                        }
                    }
                    Some(Err(e)) => {
                        state.mark_booking_watch_failed(state.now());
                        tracing::warn!(error = %e, "booking watch failed; listing again after a backoff");
                        break;
                    }
                    None => break,
                },
                _ = stopped(&mut shutdown) => return,
            }
        }
        let delay = backoff.next().unwrap_or(std::time::Duration::from_secs(30));
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stopped(&mut shutdown) => return,
        }
    }
}

/// A Resource store and the writer that fills it.
pub fn resource_store() -> (Store<Resource>, Writer<Resource>) {
    reflector::store()
}

/// Watches every Resource of the cluster into `writer`'s store until `shutdown`; marks the
/// state's Resource cache synced after the initial list.
pub async fn run_resource_watch(
    client: Client,
    writer: Writer<Resource>,
    state: Arc<State>,
    mut shutdown: watch::Receiver<bool>,
) {
    let api: Api<Resource> = Api::all(client);
    let reader = writer.as_reader();
    let stream = reflector(writer, watcher(api, watcher::Config::default()))
        .default_backoff()
        .boxed();
    let ready_state = state.clone();
    let synced = async move {
        if reader.wait_until_ready().await.is_ok() {
            ready_state.mark_resources_synced();
            tracing::info!("Resource cache synced");
        }
    };
    let drive = stream.for_each(|event| async move {
        if let Err(e) = event {
            tracing::warn!(error = %e, "Resource watch failed; retrying with backoff");
        }
    });
    tokio::select! {
        _ = futures::future::join(synced, drive) => {}
        _ = stopped(&mut shutdown) => {}
    }
}
