// Pins the prometheus-operator release whose CustomResourceDefinitions (ServiceMonitor,
// PrometheusRule, from example/prometheus-operator-crd/) the monitoring tests install, so that
// the rendered objects are validated against the real schema. Nothing is built from it.
module booking.test/monitoring/prometheus-operator

go 1.26.0

require github.com/prometheus-operator/prometheus-operator v0.85.0
