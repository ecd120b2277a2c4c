//! `MachineSet`: keeps a number of machines created from one template.

// The repeated `printcolumn(type_ = ...)` arguments of the kube derive look like duplicated
// attributes to clippy.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::enums::{ConditionStatus, MachineSetConditionType};
use super::machine::MachineTemplateSpec;
use super::shared::{ClassSpec, LastOperation, MachineSummary};

/// Specification of a MachineSet.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "machine.sapcloud.io",
    version = "v1alpha1",
    kind = "MachineSet",
    plural = "machinesets",
    singular = "machineset",
    shortname = "mcs",
    namespaced,
    status = "MachineSetStatus",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas"
    ),
    derive = "PartialEq",
    derive = "Default",
    doc = "MachineSet ensures that a specified number of machines replicas are running at any given time.",
    printcolumn(
        name = "Desired",
        type_ = "integer",
        json_path = ".spec.replicas",
        description = "Number of desired replicas."
    ),
    printcolumn(
        name = "Current",
        type_ = "integer",
        json_path = ".status.replicas",
        description = "Number of actual replicas."
    ),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        json_path = ".status.readyReplicas",
        description = "Number of ready replicas for this machine set."
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetSpec {
    /// Number of desired machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// A label selector is a label query over a set of resources. The result of matchLabels and
    /// matchExpressions are ANDed. An empty label selector matches all objects. A null
    /// label selector matches no objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::label_selector")]
    pub selector: Option<LabelSelector>,

    /// Class of the machines (stored, not used by the controllers: the template's class counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_class: Option<ClassSpec>,

    /// Template the machines are created from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<MachineTemplateSpec>,

    /// Minimum number of seconds a new machine must be ready to count as available (stored, not
    /// used for availability upstream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ready_seconds: Option<i32>,

    /// The maximum number of failed machines in the machine set that can be auto-preserved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_preserve_failed_machine_max: Option<i32>,
}

/// Most recently observed status of a MachineSet.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetStatus {
    /// Replicas is the number of actual replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// The number of pods that have labels matching the labels of the pod template of the replicaset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fully_labeled_replicas: Option<i32>,

    /// The number of ready replicas for this replica set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,

    /// The number of available replicas (ready for at least minReadySeconds) for this replica set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,

    /// The number of preserved replicas in Failed phase for this replica set
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserved_failed_replicas: Option<i32>,

    /// ObservedGeneration is the most recent generation observed by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Represents the latest available observations of a replica set's current state.
    ///
    /// Named `machineSetCondition` on the wire (upstream's odd JSON name).
    #[serde(
        default,
        rename = "machineSetCondition",
        skip_serializing_if = "Option::is_none"
    )]
    pub conditions: Option<Vec<MachineSetCondition>>,

    /// LastOperation performed
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<LastOperation>,

    /// FailedMachines has summary of machines on which lastOperation Failed
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_machines: Option<Vec<MachineSummary>>,

    /// The number of failed machines in the machineset that are currently auto-preserved
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_preserve_failed_machine_count: Option<i32>,
}

/// State of a MachineSet at a certain point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetCondition {
    /// Type of machine set condition.
    #[serde(rename = "type")]
    pub type_: MachineSetConditionType,

    /// Status of the condition, one of True, False, Unknown.
    pub status: ConditionStatus,

    /// The last time the condition transitioned from one status to another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,

    /// The reason for the condition's last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,

    /// A human readable message indicating details about the transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl MachineSet {
    /// `spec.replicas`, with absent meaning 0 (upstream's non-pointer `int32`).
    #[must_use]
    pub fn desired_replicas(&self) -> i32 {
        self.spec.replicas.unwrap_or(0)
    }
}
