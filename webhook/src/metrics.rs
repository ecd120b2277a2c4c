//! Prometheus metrics of the webhook: requests, latency, denials by rule, converted objects, and
//! connections (open, and closed or refused by a limit).
//!
//! Every counter family is exported from the start, its label sets at 0 (as Go's client exports
//! its counters), so dashboards and `rate()`/`increase()` see the first event: a series that
//! appears with value 1 has no earlier sample to count the increase from.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::limits::CloseReason;
use crate::request::Kind;

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
    /// A [`CloseReason::label`]: `per_peer_limit`, `global_limit` (refused at accept),
    /// `per_peer_limit_evicted`, `global_limit_evicted_idle` (given up for a new connection),
    /// `tls_handshake_timeout`, `header_read_timeout` or `idle_timeout`.
    pub reason: &'static str,
}

/// Connection metrics of the HTTPS listener; cheap to clone (the values are shared).
#[derive(Clone, Debug)]
pub struct ConnectionMetrics {
    /// Connections being served (accepted and not yet closed).
    pub open: Gauge,
    /// Connections closed or refused by a limit, by reason.
    pub closed: Family<CloseLabels, Counter>,
}

impl Default for ConnectionMetrics {
    /// Every reason at 0.
    fn default() -> Self {
        let closed = Family::<CloseLabels, Counter>::default();
        for reason in CloseReason::ALL {
            let _ = closed.get_or_create(&CloseLabels {
                reason: reason.label(),
            });
        }
        Self {
            open: Gauge::default(),
            closed,
        }
    }
}

impl ConnectionMetrics {
    /// Counts one connection closed or refused by the limit `reason`.
    pub fn closed_by(&self, reason: CloseReason) {
        self.closed
            .get_or_create(&CloseLabels {
                reason: reason.label(),
            })
            .inc();
    }
}

/// The `endpoint`, `kind`, `outcome` combinations the handlers count, to export them at 0.
fn request_label_sets() -> Vec<RequestLabels> {
    let mut sets = Vec::new();
    for kind in Kind::ALL {
        for outcome in ["allowed", "denied", "error"] {
            sets.push(RequestLabels {
                endpoint: "validate",
                kind: kind.name(),
                outcome,
            });
        }
        for outcome in ["allowed", "patched", "denied", "error"] {
            sets.push(RequestLabels {
                endpoint: "mutate",
                kind: kind.name(),
                outcome,
            });
        }
    }
    for outcome in ["converted", "error"] {
        sets.push(RequestLabels {
            endpoint: "convert",
            kind: "",
            outcome,
        });
    }
    sets
}

/// Denial rules every kind can hit: `decode` (a field of the wrong type) and `bad-request` (not
/// an AdmissionReview). The rules of one kind (`docs/webhook-rules.md`) appear with their first
/// denial.
const COMMON_DENIAL_RULES: [&str; 2] = ["decode", "bad-request"];

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
        for labels in request_label_sets() {
            let _ = requests.get_or_create(&labels);
        }
        for endpoint in ["validate", "mutate", "convert"] {
            let _ = latency.get_or_create(&EndpointLabels { endpoint });
        }
        for kind in Kind::ALL {
            for rule in COMMON_DENIAL_RULES {
                let _ = denials.get_or_create(&DenialLabels {
                    kind: kind.name(),
                    rule,
                });
            }
        }
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
            "Connections closed or refused by a limit (per-peer or global cap, eviction for a new connection, handshake, header-read or idle timeout)",
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
