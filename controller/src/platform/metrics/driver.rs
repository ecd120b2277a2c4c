//! The driver call families: upstream's `mcm_cloud_api_driver_*` of docs/behaviour.md#metrics-mc (by provider
//! and operation) and ours (`mcm_driver_call_duration_seconds{method,code}`, the retry backoff's
//! `mcm_machine_driver_retries_total{method}` and `mcm_machine_driver_retry_backoff_seconds`),
//! recorded around every gRPC driver call.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::registration::{
    FloatGauge, HistogramFamily, histogram_family, latency_buckets, register,
};

/// Buckets of the upstream driver-request histogram (client_golang's default buckets).
const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

fn default_buckets() -> Histogram {
    Histogram::new(DEFAULT_BUCKETS)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderOperationLabels {
    provider: String,
    operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderOperationErrorLabels {
    provider: String,
    operation: String,
    error_code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabels {
    method: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodCodeLabels {
    method: String,
    code: String,
}

/// Upstream's driver request families (`mcm_cloud_api_driver_request_duration_seconds`,
/// `mcm_cloud_api_driver_requests_failed_total`), on the machine-controller's registry.
pub(super) struct DriverRequestFamilies {
    duration: HistogramFamily<ProviderOperationLabels>,
    failed: Family<ProviderOperationErrorLabels, Counter>,
}

impl DriverRequestFamilies {
    /// Registers the families on `m` (in the order they are exposed).
    pub(super) fn register(m: &mut Registry) -> Self {
        Self {
            duration: register(
                m,
                "mcm_cloud_api_driver_request_duration_seconds",
                "Duration of driver calls by provider and operation",
                histogram_family(default_buckets),
            ),
            failed: register(
                m,
                "mcm_cloud_api_driver_requests_failed",
                "Failed driver calls by provider, operation and error code",
                Family::default(),
            ),
        }
    }

    /// One call of `method` to the driver of `provider` ended with `code` after `seconds`;
    /// anything but `OK` also counts as failed.
    pub(super) fn record(&self, provider: &str, method: &str, code: &str, seconds: f64) {
        self.duration
            .get_or_create(&ProviderOperationLabels {
                provider: provider.to_owned(),
                operation: method.to_owned(),
            })
            .observe(seconds);
        if code != "OK" {
            self.failed
                .get_or_create(&ProviderOperationErrorLabels {
                    provider: provider.to_owned(),
                    operation: method.to_owned(),
                    error_code: code.to_owned(),
                })
                .inc();
        }
    }
}

/// Our driver call families: durations by method and code, retries and their backoff, on the
/// machine-controller's registry.
pub(super) struct DriverCallFamilies {
    duration: HistogramFamily<MethodCodeLabels>,
    retries: Family<MethodLabels, Counter>,
    retry_backoff: Family<MethodLabels, FloatGauge>,
}

impl DriverCallFamilies {
    /// Registers the families on `m` (in the order they are exposed).
    pub(super) fn register(m: &mut Registry) -> Self {
        Self {
            duration: register(
                m,
                "mcm_driver_call_duration_seconds",
                "Duration of gRPC driver calls by method and result code",
                histogram_family(latency_buckets),
            ),
            retries: register(
                m,
                "mcm_machine_driver_retries",
                "Failed CreateMachine/InitializeMachine/DeleteMachine calls that were scheduled for a retry with backoff, by method",
                Family::default(),
            ),
            retry_backoff: register(
                m,
                "mcm_machine_driver_retry_backoff_seconds",
                "Backoff delay chosen after the most recent failed driver call, by method",
                Family::default(),
            ),
        }
    }

    /// One call of `method` ended with `code` after `seconds`.
    pub(super) fn record(&self, method: &str, code: &str, seconds: f64) {
        self.duration
            .get_or_create(&MethodCodeLabels {
                method: method.to_owned(),
                code: code.to_owned(),
            })
            .observe(seconds);
    }

    /// See `Metrics::driver_retry_backoff`.
    pub(super) fn retry_backoff(&self, method: &str, seconds: f64) {
        let labels = MethodLabels {
            method: method.to_owned(),
        };
        self.retries.get_or_create(&labels).inc();
        self.retry_backoff.get_or_create(&labels).set(seconds);
    }

    /// Creates the retry series of the retried methods at 0.
    pub(super) fn declare_retries(&self) {
        for method in ["CreateMachine", "InitializeMachine", "DeleteMachine"] {
            let _ = self.retries.get_or_create(&MethodLabels {
                method: method.to_owned(),
            });
        }
    }
}
