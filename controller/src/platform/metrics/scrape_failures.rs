//! `mcm_misc_scrape_failure_total{kind,binary}`: listing objects for the scrape-time metrics
//! failed. Registered on both registries, as both upstream binaries export it.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::registration::register;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScrapeFailureLabels {
    kind: String,
    binary: String,
}

/// Which object count failed to be listed at scrape time (`mcm_misc_scrape_failure_total{kind}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScrapeKind {
    /// Machines (`Machine-count`, upstream binary `machine-controller-manager-provider`).
    Machine,
    /// MachineSets (`Machineset-count`).
    MachineSet,
    /// MachineDeployments (`Machinedeployment-count`).
    MachineDeployment,
}

impl ScrapeKind {
    /// `(kind, binary)` label values as upstream's two binaries write them.
    fn labels(self) -> ScrapeFailureLabels {
        let (kind, binary) = match self {
            ScrapeKind::Machine => ("Machine-count", "machine-controller-manager-provider"),
            ScrapeKind::MachineSet => ("Machineset-count", "machine-controller-manager"),
            ScrapeKind::MachineDeployment => {
                ("Machinedeployment-count", "machine-controller-manager")
            }
        };
        ScrapeFailureLabels {
            kind: kind.to_owned(),
            binary: binary.to_owned(),
        }
    }
}

/// The scrape failure family (one family shared by both registries).
pub(super) struct ScrapeFailures {
    family: Family<ScrapeFailureLabels, Counter>,
}

impl ScrapeFailures {
    /// Registers the family on the manager's registry `r` and the machine registry `m`.
    pub(super) fn register(r: &mut Registry, m: &mut Registry) -> Self {
        let help = "Failures to list objects while collecting metrics";
        let family = register(r, "mcm_misc_scrape_failure", help, Family::default());
        m.register("mcm_misc_scrape_failure", help, family.clone());
        Self { family }
    }

    /// See `Metrics::scrape_failed`.
    pub(super) fn record(&self, kind: ScrapeKind) {
        self.family.get_or_create(&kind.labels()).inc();
    }

    /// Creates the series of `kind` at 0.
    pub(super) fn declare(&self, kind: ScrapeKind) {
        let _ = self.family.get_or_create(&kind.labels());
    }
}
