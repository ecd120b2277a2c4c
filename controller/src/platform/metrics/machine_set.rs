//! The MachineSet families of docs/behaviour.md#metrics-mcm (machine-controller-manager binary): the
//! scrape-time series replaced from the MachineSet cache and `mcm_machine_stale_machines_total`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::object_series::{
    ConditionLabels, ConditionSample, FailedMachineLabels, FailedMachineSample, ObjectGauges,
    ObjectLabels, set_conditions, set_failed_machines,
};
use super::registration::register;

#[allow(non_snake_case)]
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MachineSetInfoLabels {
    name: String,
    namespace: String,
    createdAt: String,
    spec_machine_class_api_group: String,
    spec_machine_class_kind: String,
    spec_machine_class_name: String,
}

/// One MachineSet, for the scrape-time MachineSet metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachineSetSample {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// `metadata.creationTimestamp` in unix seconds.
    pub created_at: i64,
    /// `spec.machineClass.apiGroup` (usually empty).
    pub class_api_group: String,
    /// `spec.machineClass.kind`.
    pub class_kind: String,
    /// `spec.machineClass.name`.
    pub class_name: String,
    /// `spec.replicas`.
    pub spec_replicas: i64,
    /// `spec.minReadySeconds`.
    pub min_ready_seconds: i64,
    /// `status.conditions`.
    pub conditions: Vec<ConditionSample>,
    /// `status.failedMachines`.
    pub failed_machines: Vec<FailedMachineSample>,
    /// `status.availableReplicas`.
    pub available_replicas: i64,
    /// `status.fullyLabeledReplicas`.
    pub fully_labelled_replicas: i64,
    /// `status.readyReplicas`.
    pub ready_replicas: i64,
    /// `status.replicas`.
    pub replicas: i64,
}

const MACHINE_SET_GAUGES: &[(&str, &str)] = &[
    (
        "mcm_machine_set_info_spec_replicas",
        "Desired replicas of the MachineSet",
    ),
    (
        "mcm_machine_set_info_spec_min_ready_seconds",
        "minReadySeconds of the MachineSet",
    ),
    (
        "mcm_machine_set_status_available_replicas",
        "Available replicas of the MachineSet",
    ),
    (
        "mcm_machine_set_status_fully_labelled_replicas",
        "Fully labelled replicas of the MachineSet",
    ),
    (
        "mcm_machine_set_status_ready_replicas",
        "Ready replicas of the MachineSet",
    ),
    (
        "mcm_machine_set_status_replicas",
        "Current replicas of the MachineSet",
    ),
];

/// The MachineSet families, registered on the machine-controller-manager's registry.
pub(super) struct MachineSetFamilies {
    stale_machines: Counter,
    items: Gauge,
    info: Family<MachineSetInfoLabels, Gauge>,
    condition: Family<ConditionLabels, Gauge>,
    failed_machines: Family<FailedMachineLabels, Gauge>,
    gauges: ObjectGauges,
}

impl MachineSetFamilies {
    /// Registers the families on `r` (in the order they are exposed).
    pub(super) fn register(r: &mut Registry) -> Self {
        Self {
            stale_machines: register(
                r,
                "mcm_machine_stale_machines",
                "Failed machines (health check) deleted by MachineSets",
                Counter::default(),
            ),
            items: register(
                r,
                "mcm_machine_set_items_total",
                "Count of MachineSets in the control namespace",
                Gauge::default(),
            ),
            info: register(
                r,
                "mcm_machine_set_info",
                "Information of the MachineSets (always 1)",
                Family::default(),
            ),
            condition: register(
                r,
                "mcm_machine_set_status_condition",
                "Status conditions of the MachineSets: True 1, False 0, Unknown 2",
                Family::default(),
            ),
            failed_machines: register(
                r,
                "mcm_machine_set_failed_machines",
                "Failed machines of the MachineSets (always 1)",
                Family::default(),
            ),
            gauges: ObjectGauges::register(r, MACHINE_SET_GAUGES),
        }
    }

    /// See `Metrics::stale_machines_deleted`.
    pub(super) fn stale_machines_deleted(&self, count: u64) {
        self.stale_machines.inc_by(count);
    }

    /// See `Metrics::replace_machine_sets`.
    pub(super) fn replace(&self, machine_sets: &[MachineSetSample]) {
        self.info.clear();
        self.condition.clear();
        self.failed_machines.clear();
        self.gauges.clear();
        self.items
            .set(i64::try_from(machine_sets.len()).unwrap_or(i64::MAX));
        for set in machine_sets {
            let object = ObjectLabels {
                name: set.name.clone(),
                namespace: set.namespace.clone(),
            };
            self.info
                .get_or_create(&MachineSetInfoLabels {
                    name: set.name.clone(),
                    namespace: set.namespace.clone(),
                    createdAt: set.created_at.to_string(),
                    spec_machine_class_api_group: set.class_api_group.clone(),
                    spec_machine_class_kind: set.class_kind.clone(),
                    spec_machine_class_name: set.class_name.clone(),
                })
                .set(1);
            for (metric, value) in [
                ("mcm_machine_set_info_spec_replicas", set.spec_replicas),
                (
                    "mcm_machine_set_info_spec_min_ready_seconds",
                    set.min_ready_seconds,
                ),
                (
                    "mcm_machine_set_status_available_replicas",
                    set.available_replicas,
                ),
                (
                    "mcm_machine_set_status_fully_labelled_replicas",
                    set.fully_labelled_replicas,
                ),
                ("mcm_machine_set_status_ready_replicas", set.ready_replicas),
                ("mcm_machine_set_status_replicas", set.replicas),
            ] {
                self.gauges.set(metric, &object, value);
            }
            set_conditions(&self.condition, &object, &set.conditions);
            set_failed_machines(&self.failed_machines, &object, &set.failed_machines);
        }
    }
}
