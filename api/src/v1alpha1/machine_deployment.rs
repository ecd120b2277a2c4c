//! `MachineDeployment`: declarative updates of machines through MachineSets.

// The repeated `printcolumn(type_ = ...)` arguments of the kube derive look like duplicated
// attributes to clippy.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::enums::{
    ConditionStatus, MachineDeploymentConditionType, MachineDeploymentStrategyType,
    OrchestrationType,
};
use super::machine::MachineTemplateSpec;
use super::shared::MachineSummary;

/// Specification of the desired behavior of a MachineDeployment.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "machine.sapcloud.io",
    version = "v1alpha1",
    kind = "MachineDeployment",
    plural = "machinedeployments",
    singular = "machinedeployment",
    shortname = "mcd",
    namespaced,
    status = "MachineDeploymentStatus",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas"
    ),
    derive = "PartialEq",
    derive = "Default",
    doc = "MachineDeployment enables declarative updates for machines and MachineSets.",
    printcolumn(
        name = "Ready",
        type_ = "integer",
        json_path = ".status.readyReplicas",
        description = "Total number of ready machines targeted by this machine deployment."
    ),
    printcolumn(
        name = "Desired",
        type_ = "integer",
        json_path = ".spec.replicas",
        description = "Number of desired machines."
    ),
    printcolumn(
        name = "Up-to-date",
        type_ = "integer",
        json_path = ".status.updatedReplicas",
        description = "Total number of non-terminated machines targeted by this machine deployment that have the desired template spec."
    ),
    printcolumn(
        name = "Available",
        type_ = "integer",
        json_path = ".status.availableReplicas",
        description = "Total number of available machines (ready for at least minReadySeconds) targeted by this machine deployment."
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentSpec {
    /// Number of desired machines. Absent means 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// Label selector for machines. Existing MachineSets whose machines are
    /// selected by this will be the ones affected by this MachineDeployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::label_selector")]
    pub selector: Option<LabelSelector>,

    /// Template describes the machines that will be created.
    pub template: MachineTemplateSpec,

    /// The MachineDeployment strategy to use to replace existing machines with new ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<MachineDeploymentStrategy>,

    /// Minimum number of seconds for which a newly created machine should be ready
    /// without any of its container crashing, for it to be considered available.
    /// Defaults to 0 (machine will be considered available as soon as it is ready)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ready_seconds: Option<i32>,

    /// The number of old MachineSets to retain to allow rollback.
    /// Absent means old MachineSets are never cleaned up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_history_limit: Option<i32>,

    /// Indicates that the MachineDeployment is paused and will not be processed by the
    /// MachineDeployment controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,

    /// DEPRECATED.
    /// The config this MachineDeployment is rolling back to. Will be cleared after rollback is done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_to: Option<RollbackConfig>,

    /// The maximum time in seconds for a MachineDeployment to make progress before it
    /// is considered to be failed. Absent means an infinite deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline_seconds: Option<i32>,

    /// The maximum number of failed machines in the machine deployment that can be auto-preserved.
    /// In the gardener context, this number is derived from the AutoPreserveFailedMachineMax set at the worker level, distributed amongst the worker's machine deployments
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_preserve_failed_machine_max: Option<i32>,
}

/// How to replace existing machines with new ones.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentStrategy {
    /// Type of MachineDeployment. Can be "Recreate", "RollingUpdate" or "InPlaceUpdate".
    /// Default: RollingUpdate, set by the mutating webhook (with the maxSurge/maxUnavailable
    /// defaults); without the webhook an absent type fails validation and the
    /// MachineDeployment is not reconciled.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<MachineDeploymentStrategyType>,

    /// Rolling update config params. Present only if MachineDeploymentStrategyType =
    /// RollingUpdate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdateMachineDeployment>,

    /// InPlaceUpdate update config params. Present only if MachineDeploymentStrategyType =
    /// InPlaceUpdate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_update: Option<InPlaceUpdateMachineDeployment>,
}

/// Surge and unavailability limits shared by the rolling and in-place strategies.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateConfiguration {
    /// The maximum number of machines that can be unavailable during the update.
    /// Value can be an absolute number (ex: 5) or a percentage of desired machines (ex: 10%).
    /// Absolute number is calculated from percentage by rounding down.
    /// This can not be 0 if MaxSurge is 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::int_or_string")]
    pub max_unavailable: Option<IntOrString>,

    /// The maximum number of machines that can be scheduled above the desired number of
    /// machines.
    /// Value can be an absolute number (ex: 5) or a percentage of desired machines (ex: 10%).
    /// This can not be 0 if MaxUnavailable is 0.
    /// Absolute number is calculated from percentage by rounding up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::int_or_string")]
    pub max_surge: Option<IntOrString>,
}

/// Parameters of the `RollingUpdate` strategy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdateMachineDeployment {
    /// Surge and unavailability limits, inlined on the wire.
    #[serde(flatten)]
    pub update_configuration: UpdateConfiguration,
}

/// Parameters of the `InPlaceUpdate` strategy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InPlaceUpdateMachineDeployment {
    /// Surge and unavailability limits, inlined on the wire.
    #[serde(flatten)]
    pub update_configuration: UpdateConfiguration,

    /// OrchestrationType specifies the orchestration type for the inplace update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orchestration_type: Option<OrchestrationType>,
}

/// Deprecated rollback request.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollbackConfig {
    /// The revision to rollback to. If set to 0, rollback to the last revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
}

/// Most recently observed status of a MachineDeployment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentStatus {
    /// The generation observed by the MachineDeployment controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Total number of non-terminated machines targeted by this MachineDeployment (their labels match the selector).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// Total number of non-terminated machines targeted by this MachineDeployment that have the desired template spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,

    /// Total number of ready machines targeted by this MachineDeployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,

    /// Total number of available machines (ready for at least minReadySeconds) targeted by this MachineDeployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,

    /// Total number of machines in Failed phase that are preserved, targeted by this MachineDeployment
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserved_failed_replicas: Option<i32>,

    /// Total number of unavailable machines targeted by this MachineDeployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable_replicas: Option<i32>,

    /// Represents the latest available observations of a MachineDeployment's current state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<MachineDeploymentCondition>>,

    /// Count of hash collisions for the MachineDeployment. The MachineDeployment controller uses this
    /// field as a collision avoidance mechanism when it needs to create the name for the
    /// newest MachineSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision_count: Option<i32>,

    /// FailedMachines has summary of machines on which lastOperation Failed
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_machines: Option<Vec<MachineSummary>>,
}

/// State of a MachineDeployment at a certain point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentCondition {
    /// Type of MachineDeployment condition.
    #[serde(rename = "type")]
    pub type_: MachineDeploymentConditionType,

    /// Status of the condition, one of True, False, Unknown.
    pub status: ConditionStatus,

    /// The last time this condition was updated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,

    /// Last time the condition transitioned from one status to another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,

    /// The reason for the condition's last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,

    /// A human readable message indicating details about the transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl MachineDeployment {
    /// `spec.replicas`, with absent meaning 0 (upstream's non-pointer `int32`).
    #[must_use]
    pub fn desired_replicas(&self) -> i32 {
        self.spec.replicas.unwrap_or(0)
    }
}
