//! What the scrape-time series of Machines, MachineSets and MachineDeployments share: the
//! `name`/`namespace` labels, status conditions, failed machines and per-object gauges.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels naming one object (names as upstream).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ObjectLabels {
    pub(super) name: String,
    pub(super) namespace: String,
}

/// Labels of a `*_status_condition` series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ConditionLabels {
    name: String,
    namespace: String,
    condition: String,
}

/// Labels of a `*_failed_machines` series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct FailedMachineLabels {
    name: String,
    namespace: String,
    failed_machine_name: String,
    failed_machine_provider_id: String,
    failed_machine_owner_ref: String,
    failed_machine_last_operation_state: String,
    failed_machine_last_operation_machine_operation_type: String,
}

/// A status condition as counted by the `*_status_condition` metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConditionSample {
    /// Condition type (`Ready`, `Available`, ...).
    pub condition_type: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
}

/// A failed machine owned by a MachineSet or MachineDeployment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FailedMachineSample {
    /// Machine name.
    pub name: String,
    /// Provider ID.
    pub provider_id: String,
    /// Name of the owner reference.
    pub owner_ref: String,
    /// `lastOperation.state`.
    pub last_operation_state: String,
    /// `lastOperation.type`.
    pub last_operation_type: String,
}

/// Value of a `*_status_condition` series: True 1, False 0, Unknown (or anything else) 2.
pub fn condition_value(status: &str) -> i64 {
    match status {
        "True" => 1,
        "False" => 0,
        _ => 2,
    }
}

/// Gauges keyed by `name`/`namespace` for one object kind, registered under upstream names.
pub(super) struct ObjectGauges {
    families: Vec<(&'static str, Family<ObjectLabels, Gauge>)>,
}

impl ObjectGauges {
    /// Registers one gauge family per `(name, help)` of `metrics`, in that order.
    pub(super) fn register(
        registry: &mut Registry,
        metrics: &[(&'static str, &'static str)],
    ) -> Self {
        let families = metrics
            .iter()
            .map(|(name, help)| {
                let family = Family::<ObjectLabels, Gauge>::default();
                registry.register(*name, *help, family.clone());
                (*name, family)
            })
            .collect();
        Self { families }
    }

    /// Drops every series.
    pub(super) fn clear(&self) {
        for (_, family) in &self.families {
            family.clear();
        }
    }

    /// Sets the series of `labels` in the family named `metric` (unknown names are ignored).
    pub(super) fn set(&self, metric: &str, labels: &ObjectLabels, value: i64) {
        if let Some((_, family)) = self.families.iter().find(|(name, _)| *name == metric) {
            family.get_or_create(labels).set(value);
        }
    }
}

/// Sets one series per condition of `object`.
pub(super) fn set_conditions(
    family: &Family<ConditionLabels, Gauge>,
    object: &ObjectLabels,
    conditions: &[ConditionSample],
) {
    for condition in conditions {
        family
            .get_or_create(&ConditionLabels {
                name: object.name.clone(),
                namespace: object.namespace.clone(),
                condition: condition.condition_type.clone(),
            })
            .set(condition_value(&condition.status));
    }
}

/// Sets one series (value 1) per failed machine of `owner`.
pub(super) fn set_failed_machines(
    family: &Family<FailedMachineLabels, Gauge>,
    owner: &ObjectLabels,
    failed: &[FailedMachineSample],
) {
    for machine in failed {
        family
            .get_or_create(&FailedMachineLabels {
                name: owner.name.clone(),
                namespace: owner.namespace.clone(),
                failed_machine_name: machine.name.clone(),
                failed_machine_provider_id: machine.provider_id.clone(),
                failed_machine_owner_ref: machine.owner_ref.clone(),
                failed_machine_last_operation_state: machine.last_operation_state.clone(),
                failed_machine_last_operation_machine_operation_type: machine
                    .last_operation_type
                    .clone(),
            })
            .set(1);
    }
}
