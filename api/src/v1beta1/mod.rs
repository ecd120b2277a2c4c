//! `machine.sapcloud.io/v1beta1`: the cleaned-up served version.
//!
//! Differences from [`crate::v1alpha1`] (the storage version):
//! - `MachineClass` has its provider settings under `spec` like every other kind.
//! - The machine configuration (timeouts, eviction retries, node conditions) is nested under
//!   `spec.configuration` instead of being inlined into the machine spec.
//! - `MachineDeployment` has no deprecated `spec.rollbackTo`; `MachineSet` has no legacy
//!   `spec.machineClass` outside the template. Values of those fields written through
//!   `v1alpha1` survive a trip through this version in the
//!   [`crate::keys::annotation::CONVERSION_DATA`] annotation (see `mcm-conversion`).
//!
//! Status types are shared with `v1alpha1`: they have the same shape in both versions.

// The repeated `printcolumn(type_ = ...)` arguments of the kube derive look like duplicated
// attributes to clippy.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::api::core::v1::SecretReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::CustomResource;
use kube::core::ObjectList;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::v1alpha1::{
    ClassSpec, MachineConfiguration, MachineDeploymentStatus, MachineDeploymentStrategy,
    MachineSetStatus, MachineStatus, NodeTemplate, NodeTemplateSpec,
};

/// The API group.
pub const GROUP: &str = "machine.sapcloud.io";
/// This version.
pub const VERSION: &str = "v1beta1";
/// `apiVersion` of objects in this version.
pub const API_VERSION: &str = "machine.sapcloud.io/v1beta1";

/// Desired state of a Machine.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "machine.sapcloud.io",
    version = "v1beta1",
    kind = "Machine",
    plural = "machines",
    singular = "machine",
    shortname = "mc",
    namespaced,
    status = "MachineStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "Machine is the representation of a physical or virtual machine.",
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.currentStatus.phase",
        description = "Current status of the machine."
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time since the object was created."
    ),
    printcolumn(
        name = "Node",
        type_ = "string",
        json_path = ".metadata.labels.node",
        description = "Node backing the machine object"
    ),
    printcolumn(
        name = "ProviderID",
        type_ = "string",
        json_path = ".spec.providerID",
        description = "ProviderID of the infra instance backing the machine object",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    /// Reference to the MachineClass the machine is created from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<ClassSpec>,

    /// The provider's unique ID of the VM backing this machine.
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,

    /// Labels, annotations and taints the Node of this machine gets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_template: Option<NodeTemplateSpec>,

    /// Timeouts and health settings of the machine (inlined in v1alpha1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<MachineConfiguration>,
}

/// The data a machine gets when created from a template.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MachineTemplateSpec {
    /// Metadata of the machines created from this template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::v1alpha1::schema::preserve_unknown_object")]
    pub metadata: Option<ObjectMeta>,

    /// Spec of the machines created from this template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<MachineSpec>,
}

/// Desired state of a MachineSet.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "machine.sapcloud.io",
    version = "v1beta1",
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
        description = "Time since the object was created."
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSetSpec {
    /// Number of desired machines. Absent means 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// Label selector for the machines of this set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::v1alpha1::schema::label_selector")]
    pub selector: Option<LabelSelector>,

    /// Template of the machines of this set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<MachineTemplateSpec>,

    /// Seconds a new machine must be ready before it counts as available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ready_seconds: Option<i32>,

    /// Maximum number of failed machines of this set that are preserved automatically.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_preserve_failed_machine_max: Option<i32>,
}

/// Desired state of a MachineDeployment.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "machine.sapcloud.io",
    version = "v1beta1",
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
        description = "Total number of non-terminated machines that have the desired template spec."
    ),
    printcolumn(
        name = "Available",
        type_ = "integer",
        json_path = ".status.availableReplicas",
        description = "Total number of available machines targeted by this machine deployment."
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time since the object was created."
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MachineDeploymentSpec {
    /// Number of desired machines. Absent means 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// Label selector for machines and MachineSets of this deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::v1alpha1::schema::label_selector")]
    pub selector: Option<LabelSelector>,

    /// Template of the machines.
    pub template: MachineTemplateSpec,

    /// How existing machines are replaced by new ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<MachineDeploymentStrategy>,

    /// Seconds a new machine must be ready before it counts as available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ready_seconds: Option<i32>,

    /// Number of old MachineSets to keep. Absent means all are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_history_limit: Option<i32>,

    /// Whether the deployment is paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,

    /// Seconds a rollout may take to make progress before it is reported as failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline_seconds: Option<i32>,

    /// Maximum number of failed machines of this deployment that are preserved automatically.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_preserve_failed_machine_max: Option<i32>,
}

/// Provider settings of a MachineClass (top-level fields in v1alpha1).
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "machine.sapcloud.io",
    version = "v1beta1",
    kind = "MachineClass",
    plural = "machineclasses",
    singular = "machineclass",
    shortname = "mcc",
    namespaced,
    derive = "PartialEq",
    doc = "MachineClass holds the provider configuration machines are created from."
)]
#[serde(rename_all = "camelCase")]
pub struct MachineClassSpec {
    /// Node capacity and placement, used by the cluster-autoscaler to scale from zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_template: Option<NodeTemplate>,

    /// Secret with the cloud credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::v1alpha1::schema::secret_reference")]
    pub credentials_secret_ref: Option<SecretReference>,

    /// Provider-specific configuration, passed to the driver as is.
    #[schemars(schema_with = "crate::v1alpha1::schema::preserve_unknown_object")]
    pub provider_spec: Value,

    /// Name of the provider (driver) of this class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,

    /// Secret with the user data (and, in legacy setups, the credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::v1alpha1::schema::secret_reference")]
    pub secret_ref: Option<SecretReference>,
}

impl Default for MachineClassSpec {
    fn default() -> Self {
        Self {
            node_template: None,
            credentials_secret_ref: None,
            provider_spec: Value::Object(serde_json::Map::new()),
            provider: None,
            secret_ref: None,
        }
    }
}

/// A list of machines as returned by the API.
pub type MachineList = ObjectList<Machine>;
/// A list of machine classes as returned by the API.
pub type MachineClassList = ObjectList<MachineClass>;
/// A list of machine sets as returned by the API.
pub type MachineSetList = ObjectList<MachineSet>;
/// A list of machine deployments as returned by the API.
pub type MachineDeploymentList = ObjectList<MachineDeployment>;
