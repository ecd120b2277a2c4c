//! The work queue families of docs/behaviour.md#metrics-library: client-go's workqueue metrics with upstream names
//! (`mcm_` prefix, label `name`; `queue` repeats it for dashboards written against our earlier
//! label) and our `mcm_reconcile_duration_seconds{controller}`. One set per registry; each
//! controller's queue feeds the set of its binary's port.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::registration::{
    FloatGauge, HistogramFamily, histogram_family, latency_buckets, register,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

/// Upstream's label is `name`; the issue asked for `queue`. Both carry the queue name, so
/// dashboards written for either keep working.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    name: String,
    queue: String,
}

impl QueueLabels {
    fn of(queue: &str) -> Self {
        Self {
            name: queue.to_owned(),
            queue: queue.to_owned(),
        }
    }
}

/// client-go's workqueue latency buckets: 10 ns times powers of ten, ten of them.
fn workqueue_buckets() -> Histogram {
    Histogram::new(exponential_buckets(10e-9, 10.0, 10))
}

/// The work queue families of one port.
pub(super) struct QueueMetrics {
    depth: Family<QueueLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
    queue_duration: HistogramFamily<QueueLabels>,
    work_duration: HistogramFamily<QueueLabels>,
    unfinished: Family<QueueLabels, FloatGauge>,
    longest: Family<QueueLabels, FloatGauge>,
    retries: Family<QueueLabels, Counter>,
    reconcile_duration: HistogramFamily<ControllerLabels>,
}

impl QueueMetrics {
    /// Registers the families on `r` (in the order they are exposed).
    pub(super) fn register(r: &mut Registry) -> Self {
        Self {
            depth: register(
                r,
                "mcm_workqueue_depth",
                "Current depth of workqueue",
                Family::default(),
            ),
            adds: register(
                r,
                "mcm_workqueue_adds",
                "Total number of adds handled by workqueue",
                Family::default(),
            ),
            queue_duration: register(
                r,
                "mcm_workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested",
                histogram_family(workqueue_buckets),
            ),
            work_duration: register(
                r,
                "mcm_workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes",
                histogram_family(workqueue_buckets),
            ),
            unfinished: register(
                r,
                "mcm_workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been observed by work_duration",
                Family::default(),
            ),
            longest: register(
                r,
                "mcm_workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running",
                Family::default(),
            ),
            retries: register(
                r,
                "mcm_workqueue_retries",
                "Total number of retries handled by workqueue",
                Family::default(),
            ),
            reconcile_duration: register(
                r,
                "mcm_reconcile_duration_seconds",
                "Duration of one reconcile by controller",
                histogram_family(latency_buckets),
            ),
        }
    }

    /// Creates the series of `queue` whose values are known before anything happened (adds,
    /// retries and the gauges), at 0.
    pub(super) fn declare(&self, queue: &str) {
        let labels = QueueLabels::of(queue);
        let _ = self.adds.get_or_create(&labels);
        let _ = self.retries.get_or_create(&labels);
        let _ = self.depth.get_or_create(&labels);
        let _ = self.unfinished.get_or_create(&labels);
        let _ = self.longest.get_or_create(&labels);
    }

    /// See `Metrics::reconcile_finished`.
    pub(super) fn reconcile_finished(&self, controller: &str, duration: std::time::Duration) {
        self.reconcile_duration
            .get_or_create(&ControllerLabels {
                controller: controller.to_owned(),
            })
            .observe(duration.as_secs_f64());
    }

    /// See `Metrics::set_workqueue_depth`.
    pub(super) fn set_depth(&self, queue: &str, depth: usize) {
        self.depth
            .get_or_create(&QueueLabels::of(queue))
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
    }

    /// See `Metrics::workqueue_added`.
    pub(super) fn added(&self, queue: &str) {
        self.adds.get_or_create(&QueueLabels::of(queue)).inc();
    }

    /// See `Metrics::workqueue_started`.
    pub(super) fn started(&self, queue: &str, waited: std::time::Duration) {
        self.queue_duration
            .get_or_create(&QueueLabels::of(queue))
            .observe(waited.as_secs_f64());
    }

    /// See `Metrics::workqueue_finished`.
    pub(super) fn finished(&self, queue: &str, worked: std::time::Duration) {
        self.work_duration
            .get_or_create(&QueueLabels::of(queue))
            .observe(worked.as_secs_f64());
    }

    /// See `Metrics::workqueue_retried`.
    pub(super) fn retried(&self, queue: &str) {
        self.retries.get_or_create(&QueueLabels::of(queue)).inc();
    }

    /// See `Metrics::set_workqueue_in_progress`.
    pub(super) fn set_in_progress(&self, queue: &str, unfinished: f64, longest: f64) {
        let labels = QueueLabels::of(queue);
        self.unfinished.get_or_create(&labels).set(unfinished);
        self.longest.get_or_create(&labels).set(longest);
    }
}
