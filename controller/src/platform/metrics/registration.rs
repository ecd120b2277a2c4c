//! How a family is registered: the metric types shared by the families and the histogram
//! buckets more than one family uses.

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// A gauge holding seconds (or other fractional values).
pub(super) type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;
/// A histogram family whose histograms share one bucket layout.
pub(super) type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// A histogram family whose series are built by `constructor` (which picks the buckets).
pub(super) fn histogram_family<L: Clone + std::hash::Hash + Eq>(
    constructor: fn() -> Histogram,
) -> HistogramFamily<L> {
    Family::new_with_constructor(constructor)
}

/// 5 ms .. ~82 s: reconciles and driver calls range from cache-only passes to VM creations.
pub(super) fn latency_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

/// 1 s .. 1 h: a machine's creation, join or drain, the figures `kubectl mcm rollout plan` turns
/// into an estimate range (docs/user-guide.md#know-before-you-roll-preview-a-change).
pub(super) fn rollout_step_buckets() -> Histogram {
    Histogram::new([
        1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 450.0,
        600.0, 900.0, 1200.0, 1800.0, 3600.0,
    ])
}

/// Registers `metric` under `name` and `help` and returns the handle that updates it.
pub(super) fn register<M>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M
where
    M: prometheus_client::registry::Metric + Clone,
{
    registry.register(name, help, metric.clone());
    metric
}
