//! The reconcilers (Resource, Booking, ResourceMonitor) and what they share: the [`Context`]
//! built once in `main`, status patches and Events.

pub mod booking;
pub mod monitor;
pub mod notification;
pub mod resource;
pub mod scheduler;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use booking_shared::api::{Booking, Resource};
use chrono::{DateTime, Utc};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::arbitration::BookingView;
use crate::aws::executor::Executor;
use crate::aws::inventory::Inventory;
use crate::error::{Error, Result};
use crate::fanout::Synced;
use crate::index::BookingIndex;
use crate::metrics::Metrics;
use crate::plan::{Attempt, Backoff};
use crate::tags::TagKeys;

/// The field manager of every write of the controller, so that `managedFields` (and Argo CD's
/// diff) tell its writes apart from any other client's.
pub const FIELD_MANAGER: &str = "booking-controller";

/// Parameters of the controller's patches: its field manager.
pub fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    }
}

/// Parameters of the controller's creates and replaces: its field manager.
pub fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    }
}

/// Everything the reconcilers use, built once in `main`.
pub struct Context {
    /// Kubernetes client.
    pub client: kube::Client,
    /// Shared AWS inventories.
    pub inventory: Arc<Inventory>,
    /// AWS actions.
    pub executor: Arc<Executor>,
    /// Tag keys.
    pub keys: TagKeys,
    /// Region of Resources without `spec.region`.
    pub default_region: String,
    /// The Bookings of each Resource, kept beside the Booking cache that the Booking and
    /// notification controllers share.
    pub index: Arc<BookingIndex>,
    /// All Resources in scope (the Resource controller's cache).
    pub resources: Store<Resource>,
    /// Whether `resources` holds its first full list.
    pub resources_synced: Arc<Synced>,
    /// Last action per member ID.
    pub attempts: Mutex<BTreeMap<String, Attempt>>,
    /// Last targeted refresh per Resource (`ns/name`), to bound them.
    pub targeted: Mutex<BTreeMap<String, DateTime<Utc>>>,
    /// Minimum time between two targeted refreshes of one Resource.
    pub targeted_min_interval: chrono::Duration,
    /// Retry policy of failed members.
    pub backoff: Backoff,
    /// Metrics.
    pub metrics: Metrics,
    /// Event recorder.
    pub recorder: Recorder,
    /// Bounds the Kubernetes API writes (status patches, Events) of reconciles that are not
    /// bounded themselves (Resources), so that 1,000 Resources acting together open tens of
    /// connections to the API server, not 1,000.
    pub api_writes: tokio::sync::Semaphore,
}

impl Context {
    /// Waits for a turn to write to the Kubernetes API; see [`Context::api_writes`].
    pub async fn api_write_permit(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        // The semaphore is never closed; a closed one would only lift the bound.
        self.api_writes.acquire().await.ok()
    }

    /// Waits until the Booking and Resource caches (and the index of bookings) hold their
    /// first full list: until then an empty cache would read as "no bookings" and stop a group
    /// that is booked. Returns at once afterwards.
    pub async fn caches_ready(&self) -> Result<()> {
        self.index.wait_ready().await;
        self.resources_synced.wait().await;
        Ok(())
    }

    /// The views of the Bookings of Resource `name` in `namespace`, for arbitration.
    pub fn booking_views(&self, namespace: &str, name: &str) -> Vec<BookingView> {
        self.index.views_of(&ObjectRef::new(name).within(namespace))
    }

    /// Publishes an Event about `obj`; a failure to publish is logged (the action it reports
    /// already happened and its outcome is in the status).
    pub async fn event<K>(&self, obj: &K, warning: bool, reason: &str, action: &str, note: String)
    where
        K: kube::Resource<DynamicType = ()>,
    {
        let ev = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_owned(),
            note: Some(truncate(note, 1000)),
            action: action.to_owned(),
            secondary: None,
        };
        let _turn = self.api_write_permit().await;
        if let Err(e) = self.recorder.publish(&ev, &obj.object_ref(&())).await {
            tracing::warn!(error = %e, reason, "could not publish event");
        }
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// The arbitration view of a Booking object.
pub fn view_of(b: &Booking) -> BookingView {
    let created = b
        .metadata
        .creation_timestamp
        .as_ref()
        .map(crate::conditions::chrono_time);
    BookingView::new(
        &b.name_any(),
        created,
        &b.spec,
        b.metadata.deletion_timestamp.is_some(),
    )
}

/// Namespace and name of a namespaced object.
pub fn ns_name<K: kube::Resource>(obj: &K) -> Result<(String, String)> {
    let ns = obj
        .meta()
        .namespace
        .clone()
        .ok_or_else(|| Error::Malformed("object has no namespace".into()))?;
    let name = obj
        .meta()
        .name
        .clone()
        .ok_or_else(|| Error::Malformed("object has no name".into()))?;
    Ok((ns, name))
}

/// Writes `status` with a JSON merge patch on the status subresource (never the spec). Fields in
/// `clearable` that are absent from the serialized status are sent as `null` so that they are
/// removed.
pub async fn patch_status<K, S>(
    api: &Api<K>,
    name: &str,
    status: &S,
    clearable: &[&str],
) -> Result<()>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
    S: Serialize,
{
    let mut value = serde_json::to_value(status).map_err(|e| Error::Malformed(e.to_string()))?;
    if let Some(map) = value.as_object_mut() {
        for key in clearable {
            map.entry(key.to_string())
                .or_insert(serde_json::Value::Null);
        }
    }
    let patch = serde_json::json!({ "status": value });
    api.patch_status(name, &patch_params(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}
