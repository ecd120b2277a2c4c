//! client-go's leader-election gauge (component-base): `leader_election_master_status{name}`,
//! on both registries.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::registration::register;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabels {
    name: String,
}

/// The leader-election family (one family shared by both registries).
pub(super) struct LeaderElectionFamily {
    family: Family<LeaseLabels, Gauge>,
}

impl LeaderElectionFamily {
    /// Registers the family on the manager's registry `r` and the machine registry `m`.
    pub(super) fn register(r: &mut Registry, m: &mut Registry) -> Self {
        let help = "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease.";
        let family = register(r, "leader_election_master_status", help, Family::default());
        m.register("leader_election_master_status", help, family.clone());
        Self { family }
    }

    /// See `Metrics::set_leader`.
    pub(super) fn set(&self, lease: &str, leading: bool) {
        self.family
            .get_or_create(&LeaseLabels {
                name: lease.to_owned(),
            })
            .set(i64::from(leading));
    }
}
