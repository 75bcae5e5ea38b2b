//! Prometheus metrics served on the admin port's `/metrics` (prometheus-client, text format).
//!
//! Every label takes values from a closed set the code fixes (kinds, actions, outcomes, phases),
//! except the Resource gauges' `resource_namespace` and `resource`, which name the Resources in scope: a
//! deleted Resource's series disappear with it, since those gauges are read from the watch cache
//! at each scrape. The operator's alerts and dashboard (manifests/monitoring/) use these names.

use std::sync::{Arc, OnceLock};

use booking_shared::api::{BookingPhase, Resource};
use kube::runtime::reflector::Store;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

/// The `kind` label of reconciliations: the kinds `run` drives.
pub const RECONCILED_KINDS: [&str; 5] = [
    "Booking",
    "Resource",
    "ResourceMonitor",
    "BookingScheduler",
    "Notification",
];

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
    member_actions: Family<ActionLabels, Counter>,
    action_seconds: Family<ActionOnly, Histogram>,
    notifications: Family<NotificationLabels, Counter>,
    scheduler_fires: Family<FireLabels, Counter>,
    caches: Arc<OnceLock<Caches>>,
    registry: std::sync::Arc<Registry>,
}

/// Labels of member starts and stops.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    /// `start` or `stop`.
    action: &'static str,
    /// `ok` or `failed`.
    result: &'static str,
}

/// Labels of the duration of member starts and stops.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionOnly {
    /// `start` or `stop`.
    action: &'static str,
}

/// Labels of sent notifications.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NotificationLabels {
    /// `reminder`, `started`, `stopped` or `failed`.
    event: &'static str,
    /// `sent` or `failed`.
    result: &'static str,
}

/// Labels of a BookingScheduler's fires.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FireLabels {
    /// `booked`, `skipped`, `missed` or `refused`.
    outcome: &'static str,
}

/// What became of a BookingScheduler's fire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FireOutcome {
    /// Its booking was created.
    Booked,
    /// A skip date or the suspension cancelled it.
    Skipped,
    /// It passed while the controller was not running, beyond its deadline.
    Missed,
    /// The API server refused its booking for good (admission: an overlap, a limit).
    Refused,
}

impl FireOutcome {
    fn as_str(self) -> &'static str {
        match self {
            Self::Booked => "booked",
            Self::Skipped => "skipped",
            Self::Missed => "missed",
            Self::Refused => "refused",
        }
    }
}

/// The watch caches the state gauges are read from at each scrape (set once the replica leads).
struct Caches {
    bookings: Arc<crate::index::BookingIndex>,
    resources: Store<Resource>,
}

/// The gauges of the cluster's state: bookings by phase and each Resource's instances, read from
/// the watch caches at each scrape. A standby replica has no caches and reports none.
struct StateCollector(Arc<OnceLock<Caches>>);

impl std::fmt::Debug for StateCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateCollector")
            .field("watching", &self.0.get().is_some())
            .finish()
    }
}

/// The `phase` label of a booking: its status phase, `pending` before the controller wrote one.
fn phase_label(phase: Option<BookingPhase>) -> &'static str {
    match phase {
        None => "pending",
        Some(BookingPhase::Scheduled) => "scheduled",
        Some(BookingPhase::InProgress) => "in_progress",
        Some(BookingPhase::Finished) => "finished",
        Some(BookingPhase::Conflict) => "conflict",
    }
}

const PHASES: [&str; 5] = [
    "pending",
    "scheduled",
    "in_progress",
    "finished",
    "conflict",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    /// Not `namespace`: a scrape's target labels already carry the operator's own.
    resource_namespace: String,
    resource: String,
}

impl Collector for StateCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(caches) = self.0.get() else {
            return Ok(());
        };
        let mut by_phase = [0i64; PHASES.len()];
        caches.bookings.each_phase(|phase| {
            if let Some(i) = PHASES.iter().position(|p| *p == phase_label(phase)) {
                by_phase[i] += 1;
            }
        });
        let gauge = ConstGauge::new(0i64);
        let mut family = encoder.encode_descriptor(
            "bookings",
            "Bookings by phase (pending: no phase written yet)",
            None,
            gauge.metric_type(),
        )?;
        for (&phase, n) in PHASES.iter().zip(by_phase) {
            ConstGauge::new(n).encode(family.encode_family(&PhaseLabels { phase })?)?;
        }
        let mut resources: Vec<(ResourceLabels, i64, i64)> = caches
            .resources
            .state()
            .iter()
            .map(|r| {
                let (instances, running) = r
                    .status
                    .as_ref()
                    .map_or((0, 0), |s| (i64::from(s.instances), i64::from(s.running)));
                let labels = ResourceLabels {
                    resource_namespace: r.metadata.namespace.clone().unwrap_or_default(),
                    resource: r.metadata.name.clone().unwrap_or_default(),
                };
                (labels, instances, running)
            })
            .collect();
        resources.sort_by(|a, b| {
            (&a.0.resource_namespace, &a.0.resource).cmp(&(&b.0.resource_namespace, &b.0.resource))
        });
        let mut family = encoder.encode_descriptor(
            "resource_instances",
            "Instances of each Resource's group, as its status last reported",
            None,
            gauge.metric_type(),
        )?;
        for (labels, instances, _) in &resources {
            ConstGauge::new(*instances).encode(family.encode_family(labels)?)?;
        }
        let mut family = encoder.encode_descriptor(
            "resource_instances_running",
            "Running instances of each Resource's group (running for EC2, available for RDS), as its status last reported",
            None,
            gauge.metric_type(),
        )?;
        for (labels, _, running) in &resources {
            ConstGauge::new(*running).encode(family.encode_family(labels)?)?;
        }
        Ok(())
    }
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
        let member_actions = Family::<ActionLabels, Counter>::default();
        registry.register(
            "member_actions",
            "Starts and stops of group members by action (start, stop) and result (ok, failed): one per member and attempt",
            member_actions.clone(),
        );
        let action_seconds = Family::<ActionOnly, Histogram>::new_with_constructor(
            (|| Histogram::new(exponential_buckets(0.05, 2.0, 12))) as fn() -> Histogram,
        );
        registry.register(
            "member_action_duration_seconds",
            "Time from sending a group's starts or stops to their answers (a batch of other groups' members sent together included), by action",
            action_seconds.clone(),
        );
        let notifications = Family::<NotificationLabels, Counter>::default();
        registry.register(
            "notifications",
            "Notifications by event (reminder, started, stopped, failed) and result (sent, failed)",
            notifications.clone(),
        );
        let scheduler_fires = Family::<FireLabels, Counter>::default();
        registry.register(
            "scheduler_fires",
            "BookingScheduler fires by outcome (booked, skipped by a skip date or the suspension, missed while the controller was down, refused by the API server)",
            scheduler_fires.clone(),
        );
        // Every series of a closed label set exists from the start, at zero: `increase()` and
        // `rate()` then see a counter's first increment (a series born at 1 shows none), and
        // the alerts' and dashboard's series are there before anything happened.
        for kind in RECONCILED_KINDS {
            let _ = reconciles.get_or_create(&vec![("kind", kind.to_owned())]);
            for reason in crate::error::Error::METRIC_LABELS {
                let _ = failures.get_or_create(&vec![
                    ("kind", kind.to_owned()),
                    ("reason", reason.to_owned()),
                ]);
            }
        }
        for action in ["start", "stop"] {
            for result in ["ok", "failed"] {
                let _ = member_actions.get_or_create(&ActionLabels { action, result });
            }
        }
        for event in booking_shared::api::NOTIFICATION_EVENTS {
            for result in ["sent", "failed"] {
                let _ = notifications.get_or_create(&NotificationLabels { event, result });
            }
        }
        for outcome in [
            FireOutcome::Booked,
            FireOutcome::Skipped,
            FireOutcome::Missed,
            FireOutcome::Refused,
        ] {
            let _ = scheduler_fires.get_or_create(&FireLabels {
                outcome: outcome.as_str(),
            });
        }
        let caches = Arc::new(OnceLock::new());
        registry.register_collector(Box::new(StateCollector(caches.clone())));
        registry.register_collector(Box::new(booking_shared::heap::HeapCollector));
        Self {
            member_actions,
            action_seconds,
            notifications,
            scheduler_fires,
            caches,
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

    /// Counts the starts or stops of one group's members: `ok` and `failed` of them.
    pub fn member_actions(&self, op: crate::plan::Op, ok: usize, failed: usize, seconds: f64) {
        let action = match op {
            crate::plan::Op::Start => "start",
            crate::plan::Op::Stop => "stop",
        };
        for (result, n) in [("ok", ok), ("failed", failed)] {
            self.member_actions
                .get_or_create(&ActionLabels { action, result })
                .inc_by(n as u64);
        }
        self.action_seconds
            .get_or_create(&ActionOnly { action })
            .observe(seconds);
    }

    /// Counts a notification sent (`ok`) or failed.
    pub fn notification(&self, event: booking_shared::api::NotificationEvent, ok: bool) {
        self.notifications
            .get_or_create(&NotificationLabels {
                event: event.as_str(),
                result: if ok { "sent" } else { "failed" },
            })
            .inc();
    }

    /// Counts a BookingScheduler's fire by what became of it.
    pub fn scheduler_fire(&self, outcome: FireOutcome) {
        self.scheduler_fires
            .get_or_create(&FireLabels {
                outcome: outcome.as_str(),
            })
            .inc();
    }

    /// Reads the state gauges (bookings by phase, Resources' instances) from these watch caches
    /// from now on; the first call wins.
    pub fn watch_caches(
        &self,
        bookings: Arc<crate::index::BookingIndex>,
        resources: Store<Resource>,
    ) {
        let _ = self.caches.set(Caches {
            bookings,
            resources,
        });
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
    use booking_shared::api::{
        Booking, BookingPhase, BookingStatus, Resource, ResourceSpec, ResourceStatus,
    };
    use kube::api::ObjectMeta;
    use kube::runtime::{reflector, watcher};

    fn meta(name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some("team-a".into()),
            ..ObjectMeta::default()
        }
    }

    fn booking(name: &str, phase: Option<BookingPhase>) -> Booking {
        let mut b = Booking::new(name, Default::default());
        b.metadata = meta(name);
        b.status = phase.map(|p| BookingStatus {
            status: Some(p),
            ..BookingStatus::default()
        });
        b
    }

    #[test]
    fn state_gauges_follow_the_caches_and_counters_start_at_zero() {
        let m = super::Metrics::new();
        let text = m.render();
        // Before the replica leads: no state gauges; the closed counters are there at zero.
        assert!(!text.contains("booking_controller_bookings{"), "{text}");
        for series in [
            r#"booking_controller_member_actions_total{action="start",result="failed"} 0"#,
            r#"booking_controller_notifications_total{event="reminder",result="failed"} 0"#,
            r#"booking_controller_scheduler_fires_total{outcome="missed"} 0"#,
            r#"booking_controller_reconcile_failures_total{kind="Booking",reason="kube"} 0"#,
        ] {
            assert!(text.contains(series), "{series} in {text}");
        }

        let bookings = std::sync::Arc::new(crate::index::BookingIndex::default());
        let (resources, mut rw) = reflector::store::<Resource>();
        for b in [
            booking("a", Some(BookingPhase::InProgress)),
            booking("b", Some(BookingPhase::InProgress)),
            booking("c", Some(BookingPhase::Scheduled)),
            booking("d", None),
        ] {
            bookings.apply(b);
        }
        let mut web = Resource::new("ec2.web", ResourceSpec::default());
        web.metadata = meta("ec2.web");
        web.status = Some(ResourceStatus {
            instances: 3,
            running: 2,
            ..ResourceStatus::default()
        });
        rw.apply_watcher_event(&watcher::Event::Apply(web.clone()));
        m.watch_caches(bookings, resources);
        m.member_actions(crate::plan::Op::Start, 2, 1, 0.3);
        m.notification(booking_shared::api::NotificationEvent::Started, true);
        m.scheduler_fire(super::FireOutcome::Booked);
        let text = m.render();
        for series in [
            r#"booking_controller_bookings{phase="in_progress"} 2"#,
            r#"booking_controller_bookings{phase="scheduled"} 1"#,
            r#"booking_controller_bookings{phase="pending"} 1"#,
            r#"booking_controller_bookings{phase="conflict"} 0"#,
            r#"booking_controller_resource_instances{resource_namespace="team-a",resource="ec2.web"} 3"#,
            r#"booking_controller_resource_instances_running{resource_namespace="team-a",resource="ec2.web"} 2"#,
            r#"booking_controller_member_actions_total{action="start",result="ok"} 2"#,
            r#"booking_controller_member_actions_total{action="start",result="failed"} 1"#,
            r#"booking_controller_member_action_duration_seconds_count{action="start"} 1"#,
            r#"booking_controller_notifications_total{event="started",result="sent"} 1"#,
            r#"booking_controller_scheduler_fires_total{outcome="booked"} 1"#,
        ] {
            assert!(text.contains(series), "{series} in {text}");
        }
        // A deleted Resource's series go with it.
        rw.apply_watcher_event(&watcher::Event::Delete(web));
        assert!(!m.render().contains("ec2.web"));
    }

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
