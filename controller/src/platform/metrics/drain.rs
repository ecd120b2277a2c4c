//! The drain family of our own: `mcm_drain_volume_reattach_total{result}`, how the waits for an
//! evicted pod's volumes to be attached elsewhere ended. (The drain duration is a machine
//! lifecycle metric: `mcm_machine_drain_duration_seconds` in the machine families.)

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::registration::register;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: String,
}

/// The volume re-attach family, on the machine-controller's registry.
pub(super) struct VolumeReattachFamily {
    results: Family<ResultLabels, Counter>,
}

impl VolumeReattachFamily {
    /// Registers the family on `m`.
    pub(super) fn register(m: &mut Registry) -> Self {
        Self {
            results: register(
                m,
                "mcm_drain_volume_reattach",
                "Re-attach waits of evicted pods' volumes during drains, by result (reattached, timeout)",
                Family::default(),
            ),
        }
    }

    /// See `Metrics::volume_reattach`.
    pub(super) fn record(&self, result: &str) {
        self.results
            .get_or_create(&ResultLabels {
                result: result.to_owned(),
            })
            .inc();
    }

    /// Creates the series of both results at 0.
    pub(super) fn declare(&self) {
        for result in ["reattached", "timeout"] {
            let _ = self.results.get_or_create(&ResultLabels {
                result: result.to_owned(),
            });
        }
    }
}
