//! Prometheus metrics of the webhook (prometheus-client), served on the admin port's
//! `/metrics`.

use std::sync::{Arc, Mutex};

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

/// Labels of an admission decision.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// `validate` or `mutate`.
    pub endpoint: &'static str,
    /// Kind of the reviewed object ([`kind_label`]: a served kind, `unknown` or `other`).
    pub kind: &'static str,
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT` or `UNKNOWN`.
    pub operation: &'static str,
    /// `allowed`, `denied` or `error`.
    pub result: &'static str,
}

/// The `kind` label of a decision: one of the served kinds, `unknown` (unreadable) or `other`
/// (any other kind a review names), so that reviews cannot grow the label set.
pub fn kind_label(kind: &str) -> &'static str {
    match kind {
        "Booking" => "Booking",
        "BookingScheduler" => "BookingScheduler",
        "Resource" => "Resource",
        "ResourceMonitor" => "ResourceMonitor",
        "BookingCalendar" => "BookingCalendar",
        "unknown" => "unknown",
        _ => "other",
    }
}

/// Labels of the latency histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    /// `validate` or `mutate`.
    pub endpoint: &'static str,
}

/// Labels of certificate reloads.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    /// `success` or `failure`.
    pub result: &'static str,
}

fn latency_histogram() -> Histogram {
    // 0.25 ms … about 4 s: admission must answer well within the API server's timeout.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.000_25, 2.0, 15,
    ))
}

/// All metrics; cheap to clone (the handles share their values).
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Mutex<Registry>>,
    /// Decisions by endpoint, kind, operation and result.
    pub decisions: Family<DecisionLabels, Counter>,
    /// Admission latency in seconds, from the full body to the encoded answer.
    pub latency: Family<EndpointLabels, Histogram, fn() -> Histogram>,
    /// Bookings held by the overlap index.
    pub indexed_bookings: Gauge,
    /// Certificate reloads by result.
    pub certificate_reloads: Family<ReloadLabels, Counter>,
    /// Requests rejected before admission (body too large, timeouts, wrong method or path).
    pub rejected_requests: Family<ReasonLabels, Counter>,
}

/// Every `reason` of [`ReasonLabels`].
pub const REJECT_REASONS: [&str; 9] = [
    "body_too_large",
    "body_timeout",
    "not_found",
    "method_not_allowed",
    "body_error",
    "connection_limit",
    "in_flight_limit",
    "body_budget",
    "reservation_limit",
];

/// Labels of requests rejected before admission.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// `body_too_large`, `body_timeout`, `not_found`, `method_not_allowed`, `body_error`,
    /// `connection_limit`, `in_flight_limit`, `body_budget`, `reservation_limit`.
    pub reason: String,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every metric registered under the `booking_webhook` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("booking_webhook");
        let decisions = Family::<DecisionLabels, Counter>::default();
        let latency: Family<EndpointLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(latency_histogram);
        let indexed_bookings = Gauge::default();
        let certificate_reloads = Family::<ReloadLabels, Counter>::default();
        let rejected_requests = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "admission_decisions",
            "Admission decisions by endpoint, kind, operation and result",
            decisions.clone(),
        );
        registry.register(
            "admission_duration_seconds",
            "Time to judge one AdmissionReview, by endpoint",
            latency.clone(),
        );
        registry.register(
            "indexed_bookings",
            "Bookings held by the overlap index",
            indexed_bookings.clone(),
        );
        registry.register(
            "certificate_reloads",
            "Reloads of the serving certificate after its files changed, by result",
            certificate_reloads.clone(),
        );
        registry.register(
            "rejected_requests",
            "HTTP requests rejected before admission, by reason",
            rejected_requests.clone(),
        );
        // The closed label sets exist from the start, at zero, so that `increase()` and `rate()`
        // see a counter's first increment (a series born at 1 shows none).
        for result in ["success", "failure"] {
            let _ = certificate_reloads.get_or_create(&ReloadLabels { result });
        }
        for reason in REJECT_REASONS {
            let _ = rejected_requests.get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            });
        }
        registry.register_collector(Box::new(booking_shared::heap::HeapCollector));
        Self {
            registry: Arc::new(Mutex::new(registry)),
            decisions,
            latency,
            indexed_bookings,
            certificate_reloads,
            rejected_requests,
        }
    }

    /// Counts a request rejected before admission.
    pub fn reject(&self, reason: &str) {
        self.rejected_requests
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &registry);
        out
    }
}
