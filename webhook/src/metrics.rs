//! Prometheus metrics of the webhook: requests, latency, denials by rule, converted objects, and
//! connections (open, and closed by a limit).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of a request.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `validate`, `mutate` or `convert`.
    pub endpoint: &'static str,
    /// Kind (`MachineDeployment`, ...; empty for conversion).
    pub kind: &'static str,
    /// `allowed`, `denied`, `patched`, `error`, `converted`.
    pub outcome: &'static str,
}

/// Labels of a latency observation.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    /// `validate`, `mutate` or `convert`.
    pub endpoint: &'static str,
}

/// Labels of a denial.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DenialLabels {
    /// Kind of the denied object.
    pub kind: &'static str,
    /// Rule that produced a field error.
    pub rule: &'static str,
}

/// Labels of a connection closed by a limit.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CloseLabels {
    /// `refused` (connection cap), `tls_handshake_timeout`, `header_read_timeout` or
    /// `idle_timeout`.
    pub reason: &'static str,
}

/// Connection metrics of the HTTPS listener; cheap to clone (the values are shared).
#[derive(Clone, Debug, Default)]
pub struct ConnectionMetrics {
    /// Connections holding a slot (accepted and not yet closed).
    pub open: Gauge,
    /// Connections closed by a limit, by reason.
    pub closed: Family<CloseLabels, Counter>,
}

impl ConnectionMetrics {
    /// Counts one connection closed by the limit `reason`.
    pub fn closed_by(&self, reason: &'static str) {
        self.closed.get_or_create(&CloseLabels { reason }).inc();
    }
}

type HistogramFamily = Family<EndpointLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 100 µs .. ~3.3 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 16))
}

/// All metrics and their registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Requests by endpoint, kind and outcome.
    pub requests: Family<RequestLabels, Counter>,
    /// Handling latency by endpoint.
    pub latency: HistogramFamily,
    /// Field errors by kind and rule (not counted for dry-run requests).
    pub denials: Family<DenialLabels, Counter>,
    /// Objects converted by `/convert`.
    pub converted_objects: Counter,
    /// Connections of the HTTPS listener.
    pub connections: ConnectionMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("machine_webhook");
        let requests = Family::<RequestLabels, Counter>::default();
        let latency: HistogramFamily = Family::new_with_constructor(latency_histogram);
        let denials = Family::<DenialLabels, Counter>::default();
        let converted_objects = Counter::default();
        registry.register(
            "requests",
            "Webhook requests by endpoint, kind and outcome",
            requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time to answer a webhook request",
            latency.clone(),
        );
        registry.register(
            "denials",
            "Field errors that denied a request, by rule",
            denials.clone(),
        );
        registry.register(
            "converted_objects",
            "Objects converted by the conversion webhook",
            converted_objects.clone(),
        );
        let connections = ConnectionMetrics::default();
        registry.register(
            "open_connections",
            "Connections of the HTTPS listener that are open",
            connections.open.clone(),
        );
        registry.register(
            "closed_connections",
            "Connections closed by a limit (cap, handshake, header-read or idle timeout)",
            connections.closed.clone(),
        );
        Self {
            registry,
            requests,
            latency,
            denials,
            converted_objects,
            connections,
        }
    }
}

impl Metrics {
    /// The text exposition of all metrics.
    #[must_use]
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
