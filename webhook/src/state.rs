//! What the admission handlers share: the overlap index, the Resource cache, the policy, the
//! clock, readiness flags and metrics.

use std::sync::{
    RwLock,
    atomic::{AtomicBool, Ordering},
};

use booking_shared::{api::Resource, overlap::OverlapIndex, validation::Policy};
use chrono::{DateTime, Duration, Utc};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::metrics::Metrics;

pub use booking_shared::time::Clock;

/// Shared state of the webhook.
pub struct State {
    /// Bookings of the cluster, fed by a watch (see [`crate::caches`]).
    pub index: RwLock<OverlapIndex>,
    /// Resources of the cluster, for the "Resource does not exist yet" warning. `None` when
    /// the webhook runs without a Resource cache (no warning is given then).
    pub resources: Option<Store<Resource>>,
    /// Cluster settings of the rules.
    pub policy: Policy,
    /// How long a slot admitted by a real (not dry-run) request stays reserved in the index
    /// before the watch delivers the booking.
    pub reservation_ttl: Duration,
    /// The clock.
    pub clock: Clock,
    /// Metrics of the admission handlers.
    pub metrics: Metrics,
    /// The permission check of `--restrict-user-id`; `None` when off.
    pub authorizer: Option<crate::authorize::Authorizer>,
    bookings_synced: AtomicBool,
    resources_synced: AtomicBool,
}

impl State {
    /// New state with an empty index; not ready until [`State::mark_bookings_synced`] and
    /// [`State::mark_resources_synced`] were called (the latter only matters when `resources`
    /// is set).
    pub fn new(
        policy: Policy,
        reservation_ttl: Duration,
        resources: Option<Store<Resource>>,
        clock: Clock,
        metrics: Metrics,
    ) -> Self {
        let no_resource_cache = resources.is_none();
        Self {
            index: RwLock::new(OverlapIndex::new()),
            resources,
            policy,
            reservation_ttl,
            clock,
            metrics,
            authorizer: None,
            bookings_synced: AtomicBool::new(false),
            resources_synced: AtomicBool::new(no_resource_cache),
        }
    }

    /// The state with the permission check of `--restrict-user-id`.
    pub fn with_authorizer(mut self, authorizer: crate::authorize::Authorizer) -> Self {
        self.authorizer = Some(authorizer);
        self
    }

    /// The current instant by the injected clock.
    pub fn now(&self) -> DateTime<Utc> {
        (self.clock)()
    }

    /// Records that the booking index holds the initial list of the watch.
    pub fn mark_bookings_synced(&self) {
        self.bookings_synced.store(true, Ordering::Release);
    }

    /// Records that the Resource cache holds the initial list of its watch.
    pub fn mark_resources_synced(&self) {
        self.resources_synced.store(true, Ordering::Release);
    }

    /// Whether the booking index holds the initial list of its watch: until then an overlap
    /// check could miss any booking, so bookings are not judged (see
    /// [`crate::admission`]).
    pub fn bookings_synced(&self) -> bool {
        self.bookings_synced.load(Ordering::Acquire)
    }

    /// Whether every cache has synced: before that, an overlap check could miss a booking, so
    /// `/readyz` answers 503 and the API server's Service does not route to this replica.
    pub fn ready(&self) -> bool {
        self.bookings_synced.load(Ordering::Acquire)
            && self.resources_synced.load(Ordering::Acquire)
    }

    /// Whether a Resource exists, or `None` when there is no Resource cache.
    pub fn resource_exists(&self, namespace: &str, name: &str) -> Option<bool> {
        let store = self.resources.as_ref()?;
        Some(store.get(&ObjectRef::new(name).within(namespace)).is_some())
    }

    /// Reads the index; a poisoned lock (a panic while writing, which the index code does not
    /// do) is recovered rather than propagated.
    pub fn read_index(&self) -> std::sync::RwLockReadGuard<'_, OverlapIndex> {
        self.index.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes the index, see [`State::read_index`].
    pub fn write_index(&self) -> std::sync::RwLockWriteGuard<'_, OverlapIndex> {
        self.index.write().unwrap_or_else(|e| e.into_inner())
    }
}

impl booking_shared::ops::Probe for State {
    fn ready(&self) -> Result<(), String> {
        if State::ready(self) {
            Ok(())
        } else {
            Err("the booking and Resource caches have not synced yet".to_owned())
        }
    }

    fn metrics(&self) -> String {
        self.metrics
            .indexed_bookings
            .set(i64::try_from(self.read_index().len()).unwrap_or(i64::MAX));
        self.metrics.encode()
    }
}
