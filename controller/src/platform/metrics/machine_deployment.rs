//! The MachineDeployment families of docs/behaviour.md#metrics-mcm (machine-controller-manager binary): the
//! scrape-time series replaced from the MachineDeployment cache.

use prometheus_client::encoding::EncodeLabelSet;
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
struct MachineDeploymentInfoLabels {
    name: String,
    namespace: String,
    createdAt: String,
    spec_strategy_type: String,
}

/// One MachineDeployment, for the scrape-time MachineDeployment metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachineDeploymentSample {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// `metadata.creationTimestamp` in unix seconds.
    pub created_at: i64,
    /// `spec.strategy.type`.
    pub strategy_type: String,
    /// `spec.paused`.
    pub paused: bool,
    /// `spec.replicas`.
    pub spec_replicas: i64,
    /// `spec.minReadySeconds`.
    pub min_ready_seconds: i64,
    /// `(maxSurge, maxUnavailable)` as upstream's `IntOrString.IntValue()` (percentages give 0);
    /// only for the RollingUpdate strategy.
    pub rolling_update: Option<(i64, i64)>,
    /// `spec.revisionHistoryLimit`, if set.
    pub revision_history_limit: Option<i64>,
    /// `spec.progressDeadlineSeconds`, if set.
    pub progress_deadline_seconds: Option<i64>,
    /// `spec.rollbackTo.revision`, if set.
    pub rollback_to_revision: Option<i64>,
    /// `status.conditions`.
    pub conditions: Vec<ConditionSample>,
    /// `status.availableReplicas`.
    pub available_replicas: i64,
    /// `status.unavailableReplicas`.
    pub unavailable_replicas: i64,
    /// `status.readyReplicas`.
    pub ready_replicas: i64,
    /// `status.updatedReplicas`.
    pub updated_replicas: i64,
    /// `status.replicas`.
    pub replicas: i64,
    /// `status.collisionCount`, if set.
    pub collision_count: Option<i64>,
    /// `status.failedMachines`.
    pub failed_machines: Vec<FailedMachineSample>,
}

const MACHINE_DEPLOYMENT_GAUGES: &[(&str, &str)] = &[
    (
        "mcm_machine_deployment_info_spec_paused",
        "1 if the MachineDeployment is paused",
    ),
    (
        "mcm_machine_deployment_info_spec_replicas",
        "Desired replicas of the MachineDeployment",
    ),
    (
        "mcm_machine_deployment_info_spec_min_ready_seconds",
        "minReadySeconds of the MachineDeployment",
    ),
    (
        "mcm_machine_deployment_info_spec_rolling_update_max_surge",
        "maxSurge of a RollingUpdate MachineDeployment (percentages count as 0)",
    ),
    (
        "mcm_machine_deployment_info_spec_rolling_update_max_unavailable",
        "maxUnavailable of a RollingUpdate MachineDeployment (percentages count as 0)",
    ),
    (
        "mcm_machine_deployment_info_spec_revision_history_limit",
        "revisionHistoryLimit of the MachineDeployment, if set",
    ),
    (
        "mcm_machine_deployment_info_spec_progress_deadline_seconds",
        "progressDeadlineSeconds of the MachineDeployment, if set",
    ),
    (
        "mcm_machine_deployment_info_spec_rollback_to_revision",
        "rollbackTo.revision of the MachineDeployment, if set",
    ),
    (
        "mcm_machine_deployment_status_available_replicas",
        "Available replicas of the MachineDeployment",
    ),
    (
        "mcm_machine_deployment_status_unavailable_replicas",
        "Unavailable replicas of the MachineDeployment",
    ),
    (
        "mcm_machine_deployment_status_ready_replicas",
        "Ready replicas of the MachineDeployment",
    ),
    (
        "mcm_machine_deployment_status_updated_replicas",
        "Updated replicas of the MachineDeployment",
    ),
    (
        "mcm_machine_deployment_status_replicas",
        "Current replicas of the MachineDeployment",
    ),
    (
        "mcm_machine_deployment_status_collision_count",
        "collisionCount of the MachineDeployment, if set",
    ),
];

/// The MachineDeployment families, registered on the machine-controller-manager's registry.
pub(super) struct MachineDeploymentFamilies {
    items: Gauge,
    info: Family<MachineDeploymentInfoLabels, Gauge>,
    condition: Family<ConditionLabels, Gauge>,
    failed_machines: Family<FailedMachineLabels, Gauge>,
    gauges: ObjectGauges,
}

impl MachineDeploymentFamilies {
    /// Registers the families on `r` (in the order they are exposed).
    pub(super) fn register(r: &mut Registry) -> Self {
        Self {
            items: register(
                r,
                "mcm_machine_deployment_items_total",
                "Count of MachineDeployments in the control namespace",
                Gauge::default(),
            ),
            info: register(
                r,
                "mcm_machine_deployment_info",
                "Information of the MachineDeployments (always 1)",
                Family::default(),
            ),
            condition: register(
                r,
                "mcm_machine_deployment_status_condition",
                "Status conditions of the MachineDeployments: True 1, False 0, Unknown 2",
                Family::default(),
            ),
            failed_machines: register(
                r,
                "mcm_machine_deployment_failed_machines",
                "Failed machines of the MachineDeployments (always 1)",
                Family::default(),
            ),
            gauges: ObjectGauges::register(r, MACHINE_DEPLOYMENT_GAUGES),
        }
    }

    /// See `Metrics::replace_machine_deployments`.
    pub(super) fn replace(&self, deployments: &[MachineDeploymentSample]) {
        self.info.clear();
        self.condition.clear();
        self.failed_machines.clear();
        self.gauges.clear();
        self.items
            .set(i64::try_from(deployments.len()).unwrap_or(i64::MAX));
        for deployment in deployments {
            let object = ObjectLabels {
                name: deployment.name.clone(),
                namespace: deployment.namespace.clone(),
            };
            self.info
                .get_or_create(&MachineDeploymentInfoLabels {
                    name: deployment.name.clone(),
                    namespace: deployment.namespace.clone(),
                    createdAt: deployment.created_at.to_string(),
                    spec_strategy_type: deployment.strategy_type.clone(),
                })
                .set(1);
            let always = [
                (
                    "mcm_machine_deployment_info_spec_paused",
                    i64::from(deployment.paused),
                ),
                (
                    "mcm_machine_deployment_info_spec_replicas",
                    deployment.spec_replicas,
                ),
                (
                    "mcm_machine_deployment_info_spec_min_ready_seconds",
                    deployment.min_ready_seconds,
                ),
                (
                    "mcm_machine_deployment_status_available_replicas",
                    deployment.available_replicas,
                ),
                (
                    "mcm_machine_deployment_status_unavailable_replicas",
                    deployment.unavailable_replicas,
                ),
                (
                    "mcm_machine_deployment_status_ready_replicas",
                    deployment.ready_replicas,
                ),
                (
                    "mcm_machine_deployment_status_updated_replicas",
                    deployment.updated_replicas,
                ),
                (
                    "mcm_machine_deployment_status_replicas",
                    deployment.replicas,
                ),
            ];
            let optional = [
                (
                    "mcm_machine_deployment_info_spec_rolling_update_max_surge",
                    deployment.rolling_update.map(|(surge, _)| surge),
                ),
                (
                    "mcm_machine_deployment_info_spec_rolling_update_max_unavailable",
                    deployment
                        .rolling_update
                        .map(|(_, unavailable)| unavailable),
                ),
                (
                    "mcm_machine_deployment_info_spec_revision_history_limit",
                    deployment.revision_history_limit,
                ),
                (
                    "mcm_machine_deployment_info_spec_progress_deadline_seconds",
                    deployment.progress_deadline_seconds,
                ),
                (
                    "mcm_machine_deployment_info_spec_rollback_to_revision",
                    deployment.rollback_to_revision,
                ),
                (
                    "mcm_machine_deployment_status_collision_count",
                    deployment.collision_count,
                ),
            ];
            for (metric, value) in always {
                self.gauges.set(metric, &object, value);
            }
            for (metric, value) in optional {
                if let Some(value) = value {
                    self.gauges.set(metric, &object, value);
                }
            }
            set_conditions(&self.condition, &object, &deployment.conditions);
            set_failed_machines(&self.failed_machines, &object, &deployment.failed_machines);
        }
    }
}
