//! What the controller's admin port reports (served by `booking_shared::ops`): `/healthz` (the
//! process serves), `/readyz` (configuration loaded and clients built — a standby replica is
//! ready too, or a rolling update would wait forever for a new pod that cannot lead while the
//! old one holds the Lease; whether a replica leads is the `booking_controller_leader` metric),
//! `/metrics` (Prometheus text format).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use booking_shared::ops::Probe;

use crate::metrics::Metrics;

/// Shared readiness flag.
#[derive(Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Sets readiness.
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::SeqCst);
    }
    /// Reads readiness.
    pub fn get(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// The controller's [`Probe`].
pub struct Admin {
    /// Readiness.
    pub ready: Readiness,
    /// Metrics.
    pub metrics: Metrics,
}

impl Probe for Admin {
    fn ready(&self) -> Result<(), String> {
        if self.ready.get() {
            Ok(())
        } else {
            Err("starting (or shutting down)".to_owned())
        }
    }

    fn metrics(&self) -> String {
        self.metrics.render()
    }
}
