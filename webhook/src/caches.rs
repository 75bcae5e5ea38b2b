//! The watches that feed the webhook's caches: every Booking of the cluster into the overlap
//! index, every Resource into a kube-runtime reflector store.
//!
//! The booking watch follows kube-runtime's reflector semantics: the objects of an initial list
//! (or of a relist after the watch was interrupted) are buffered and swapped into the index at
//! once when the list is complete, so the index never shows a half-listed cluster. The webhook
//! reports ready only after both initial lists.

use std::sync::Arc;

use booking_shared::{
    api::{Booking, Resource},
    overlap::IndexedBooking,
};
use futures::StreamExt;
use kube::{
    Api, Client, ResourceExt,
    runtime::{
        WatchStreamExt,
        reflector::{self, Store, reflector, store::Writer},
        utils::Backoff as _,
        watcher::{self, Event, watcher},
    },
};
use tokio::sync::watch;

use crate::state::State;
use booking_shared::ops::stopped;

/// Applies one watch event of a Booking to the index. `buffer` collects an initial list.
pub fn apply_booking_event(state: &State, buffer: &mut Vec<IndexedBooking>, event: Event<Booking>) {
    match event {
        Event::Init => buffer.clear(),
        Event::InitApply(b) => buffer.extend(IndexedBooking::from_booking(&b)),
        Event::InitDone => {
            let listed = buffer.len();
            state.write_index().replace_all(buffer.drain(..));
            state.mark_bookings_synced();
            tracing::info!(bookings = listed, "booking index synced");
        }
        Event::Apply(b) => {
            let mut index = state.write_index();
            match IndexedBooking::from_booking(&b) {
                Some(entry) => index.upsert(entry),
                // Times that no longer form a slot: such a booking blocks nothing.
                None => {
                    index.remove(&b.namespace().unwrap_or_default(), &b.name_any());
                }
            }
        }
        Event::Delete(b) => {
            state
                .write_index()
                .remove(&b.namespace().unwrap_or_default(), &b.name_any());
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
    let api: Api<Booking> = Api::all(client);
    let mut backoff = watcher::DefaultBackoff::default();
    loop {
        let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
        let mut buffer = Vec::new();
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
