//! Prometheus metrics served on the admin port's `/metrics` (prometheus-client, text format).

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

/// The controller's metrics. Cheap to clone (handles to shared atomics).
#[derive(Clone)]
pub struct Metrics {
    reconciles: Family<Labels, Counter>,
    reconcile_seconds: Family<Labels, Histogram>,
    failures: Family<Labels, Counter>,
    aws_calls: Family<Labels, Counter>,
    refresh_seconds: Family<Labels, Histogram>,
    active_bookings: Gauge,
    leader: Gauge,
    dry_run_actions: Family<Labels, Counter>,
    registry: std::sync::Arc<Registry>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric under the `booking_controller_` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("booking_controller");
        let reconciles = Family::<Labels, Counter>::default();
        let failures = Family::<Labels, Counter>::default();
        let reconcile_seconds = Family::<Labels, Histogram>::new_with_constructor(
            (|| Histogram::new(exponential_buckets(0.001, 2.0, 16))) as fn() -> Histogram,
        );
        let aws_calls = Family::<Labels, Counter>::default();
        let refresh_seconds = Family::<Labels, Histogram>::new_with_constructor(
            (|| Histogram::new(exponential_buckets(0.005, 2.0, 14))) as fn() -> Histogram,
        );
        let active_bookings = Gauge::default();
        let leader = Gauge::default();
        registry.register("reconciles", "Reconciliations by kind", reconciles.clone());
        registry.register(
            "reconcile_duration_seconds",
            "Duration of a reconciliation by kind, in seconds",
            reconcile_seconds.clone(),
        );
        registry.register(
            "reconcile_failures",
            "Failed reconciliations by kind and reason",
            failures.clone(),
        );
        registry.register(
            "aws_calls",
            "AWS API calls by operation and outcome (ok or the AWS error code)",
            aws_calls.clone(),
        );
        registry.register(
            "inventory_refresh_seconds",
            "Duration of an inventory refresh by type and region, in seconds",
            refresh_seconds.clone(),
        );
        registry.register(
            "active_bookings",
            "Bookings IN PROGRESS",
            active_bookings.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the leader Lease and acts, 0 while it stands by",
            leader.clone(),
        );
        let dry_run_actions = Family::<Labels, Counter>::default();
        registry.register(
            "dry_run_actions",
            "Actions the controller would have made in dry-run mode, by action (start, stop, tag, untag: per member; notify: per notification)",
            dry_run_actions.clone(),
        );
        Self {
            dry_run_actions,
            leader,
            reconciles,
            reconcile_seconds,
            failures,
            aws_calls,
            refresh_seconds,
            active_bookings,
            registry: std::sync::Arc::new(registry),
        }
    }

    /// Counts a reconciliation of `kind` (`Resource`, `Booking`, `ResourceMonitor`).
    pub fn reconciled(&self, kind: &str, seconds: f64) {
        let labels = vec![("kind", kind.to_owned())];
        self.reconciles.get_or_create(&labels).inc();
        self.reconcile_seconds
            .get_or_create(&labels)
            .observe(seconds);
    }

    pub fn failed(&self, kind: &str, reason: &str) {
        self.failures
            .get_or_create(&vec![
                ("kind", kind.to_owned()),
                ("reason", reason.to_owned()),
            ])
            .inc();
    }

    /// Counts an AWS call; `outcome` is `ok` or the AWS error code.
    pub fn aws_call(&self, operation: &str, outcome: &str) {
        self.aws_calls
            .get_or_create(&vec![
                ("operation", operation.to_owned()),
                ("outcome", outcome.to_owned()),
            ])
            .inc();
    }

    /// Records an inventory refresh's duration.
    pub fn refresh_took(&self, kind: &str, region: &str, seconds: f64) {
        self.refresh_seconds
            .get_or_create(&vec![
                ("type", kind.to_owned()),
                ("region", region.to_owned()),
            ])
            .observe(seconds);
    }

    /// Sets the number of bookings IN PROGRESS.
    pub fn set_active_bookings(&self, n: i64) {
        self.active_bookings.set(n);
    }

    /// Records whether this replica leads.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// Counts `n` actions of dry-run mode that were not made.
    pub fn would(&self, action: crate::dry_run::WouldAction, n: usize) {
        self.dry_run_actions
            .get_or_create(&vec![("action", action.as_str().to_owned())])
            .inc_by(n as u64);
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn renders_counters_with_labels() {
        let m = super::Metrics::new();
        m.aws_call("StartInstances", "ok");
        m.reconciled("Resource", 0.01);
        m.refresh_took("ec2", "eu-west-1", 0.02);
        m.would(crate::dry_run::WouldAction::Start, 2);
        let text = m.render();
        assert!(
            text.contains(r#"booking_controller_dry_run_actions_total{action="start"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"booking_controller_aws_calls_total{operation="StartInstances",outcome="ok"} 1"#
            ),
            "{text}"
        );
        assert!(text.contains(r#"booking_controller_reconciles_total{kind="Resource"} 1"#));
        assert!(text.contains("booking_controller_inventory_refresh_seconds_count"));
        assert!(
            text.contains(
                r#"booking_controller_reconcile_duration_seconds_count{kind="Resource"} 1"#
            )
        );
    }
}
