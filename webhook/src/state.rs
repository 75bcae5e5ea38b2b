//! What the admission handlers share: the overlap index, the Resource cache, the policy, the
//! clock, readiness flags and metrics.
//!
//! Readiness (`/readyz`) is three facts: every cache has synced; the booking watch has not been
//! failing for longer than [`State::watch_failure_bound`] (else the overlap index may be stale,
//! and booking reviews are refused with 503 as before the first sync, until a relist has
//! completed); and the webhook is not draining for shutdown ([`State::mark_draining`]).

use std::sync::{
    RwLock,
    atomic::{AtomicBool, AtomicI64, Ordering},
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
    /// How long the booking watch may fail (no completed relist since its first error) before
    /// the overlap index counts as stale: unready, and booking reviews refused with 503.
    pub watch_failure_bound: Duration,
    /// How many admitted-but-not-yet-stored reservations one requester (`userInfo.username`)
    /// may hold at once; beyond it a real create or update is refused, naming the bound.
    pub max_reservations_per_requester: usize,
    /// The permission check of `--restrict-user-id`; `None` when off.
    pub authorizer: Option<crate::authorize::Authorizer>,
    bookings_synced: AtomicBool,
    resources_synced: AtomicBool,
    draining: AtomicBool,
    /// Milliseconds since the Unix epoch of the first failure of the booking watch since its
    /// last completed (re)list, or [`NOT_FAILING`].
    watch_failing_since: AtomicI64,
}

const NOT_FAILING: i64 = i64::MIN;

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
            watch_failure_bound: Duration::seconds(30),
            max_reservations_per_requester: 50,
            authorizer: None,
            bookings_synced: AtomicBool::new(false),
            resources_synced: AtomicBool::new(no_resource_cache),
            draining: AtomicBool::new(false),
            watch_failing_since: AtomicI64::new(NOT_FAILING),
        }
    }

    /// Records that the webhook is shutting down: `/readyz` answers 503 from now on (so that
    /// the Service stops routing here), while admission requests are still answered.
    pub fn mark_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// Whether [`State::mark_draining`] was called.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Records a failure of the booking watch at `at`; the first failure since the last
    /// completed list starts the clock of [`State::watch_failure_bound`].
    pub fn mark_booking_watch_failed(&self, at: DateTime<Utc>) {
        let _ = self.watch_failing_since.compare_exchange(
            NOT_FAILING,
            at.timestamp_millis(),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Records that a (re)list of the booking watch completed: the index is current again.
    pub fn mark_booking_watch_healthy(&self) {
        self.watch_failing_since
            .store(NOT_FAILING, Ordering::Release);
    }

    /// How long the booking watch has been failing at `now`, if it is failing.
    pub fn booking_watch_failing_for(&self, now: DateTime<Utc>) -> Option<Duration> {
        match self.watch_failing_since.load(Ordering::Acquire) {
            NOT_FAILING => None,
            since => Some(now - DateTime::from_timestamp_millis(since).unwrap_or(now)),
        }
    }

    /// Whether the booking watch has been failing for longer than the bound at `now`.
    pub fn index_stale(&self, now: DateTime<Utc>) -> bool {
        self.booking_watch_failing_for(now)
            .is_some_and(|d| d > self.watch_failure_bound)
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

    /// Whether the booking index holds the initial list of its watch and is not stale (see
    /// [`State::index_stale`]): otherwise an overlap check could miss any booking, so bookings
    /// are not judged (see [`crate::admission`]).
    pub fn bookings_synced(&self) -> bool {
        self.bookings_synced.load(Ordering::Acquire) && !self.index_stale(self.now())
    }

    /// Whether every cache has synced and is current, and the webhook is not draining: else
    /// `/readyz` answers 503 and the API server's Service does not route to this replica.
    pub fn ready(&self) -> bool {
        self.bookings_synced() && self.resources_synced.load(Ordering::Acquire) && !self.draining()
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
        let now = self.now();
        if self.draining() {
            Err("shutting down: draining open admission requests".to_owned())
        } else if self.index_stale(now) {
            let failing = self.booking_watch_failing_for(now).unwrap_or_default();
            Err(format!(
                "the booking watch has been failing for {} s (bound {} s, --watch-failure-bound-seconds): the overlap index may be stale until a relist completes",
                failing.num_seconds(),
                self.watch_failure_bound.num_seconds()
            ))
        } else if State::ready(self) {
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
