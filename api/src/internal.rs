//! The unversioned internal representation ("hub") of every kind.
//!
//! Never served and never written to the API. Every served version converts to and from these
//! types (`mcm-conversion`), and validation and defaulting work on them. The hub holds the union
//! of what the served versions can express, so converting a version into the hub loses nothing.
//!
//! Leaf types whose shape is the same in every version (status, class reference, node template,
//! machine configuration) are shared with [`crate::v1alpha1`].

use k8s_openapi::api::core::v1::SecretReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::v1alpha1::{
    ClassSpec, MachineConfiguration, MachineDeploymentStatus, MachineDeploymentStrategy,
    MachineSetStatus, MachineStatus, NodeTemplate, NodeTemplateSpec, RollbackConfig,
};

/// A machine: one VM backing one Node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Machine {
    /// Object metadata.
    pub metadata: ObjectMeta,
    /// Desired state; `None` for metadata-only objects.
    pub spec: Option<MachineSpec>,
    /// Observed state.
    pub status: Option<MachineStatus>,
}

/// Desired state of a machine.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MachineSpec {
    /// Reference to the machine class.
    pub class: Option<ClassSpec>,
    /// The provider's ID of the VM.
    pub provider_id: Option<String>,
    /// What the Node of this machine gets.
    pub node_template: Option<NodeTemplateSpec>,
    /// Timeouts and health settings (empty when none is set).
    pub configuration: MachineConfiguration,
}

/// Template of the machines of a set or deployment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MachineTemplateSpec {
    /// Metadata of created machines.
    pub metadata: Option<ObjectMeta>,
    /// Spec of created machines.
    pub spec: Option<MachineSpec>,
}

/// A set of machines created from one template.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MachineSet {
    /// Object metadata.
    pub metadata: ObjectMeta,
    /// Desired state; `None` for metadata-only objects.
    pub spec: Option<MachineSetSpec>,
    /// Observed state.
    pub status: Option<MachineSetStatus>,
}

/// Desired state of a machine set.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MachineSetSpec {
    /// Desired number of machines.
    pub replicas: Option<i32>,
    /// Selector of the set's machines.
    pub selector: Option<LabelSelector>,
    /// Legacy class reference outside the template (v1alpha1 `spec.machineClass`).
    pub legacy_machine_class: Option<ClassSpec>,
    /// Machine template.
    pub template: Option<MachineTemplateSpec>,
    /// Seconds before a ready machine counts as available.
    pub min_ready_seconds: Option<i32>,
    /// Maximum number of auto-preserved failed machines.
    pub auto_preserve_failed_machine_max: Option<i32>,
}

/// Declarative updates of machines through machine sets.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MachineDeployment {
    /// Object metadata.
    pub metadata: ObjectMeta,
    /// Desired state; `None` for metadata-only objects.
    pub spec: Option<MachineDeploymentSpec>,
    /// Observed state.
    pub status: Option<MachineDeploymentStatus>,
}

/// Desired state of a machine deployment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MachineDeploymentSpec {
    /// Desired number of machines.
    pub replicas: Option<i32>,
    /// Selector of the deployment's machines.
    pub selector: Option<LabelSelector>,
    /// Machine template.
    pub template: MachineTemplateSpec,
    /// Replacement strategy.
    pub strategy: Option<MachineDeploymentStrategy>,
    /// Seconds before a ready machine counts as available.
    pub min_ready_seconds: Option<i32>,
    /// Number of old machine sets kept.
    pub revision_history_limit: Option<i32>,
    /// Whether reconciliation is paused.
    pub paused: Option<bool>,
    /// Deprecated rollback request (v1alpha1 only).
    pub rollback_to: Option<RollbackConfig>,
    /// Rollout progress deadline.
    pub progress_deadline_seconds: Option<i32>,
    /// Maximum number of auto-preserved failed machines.
    pub auto_preserve_failed_machine_max: Option<i32>,
}

/// Reusable provider configuration.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MachineClass {
    /// Object metadata.
    pub metadata: ObjectMeta,
    /// Provider settings; `None` for metadata-only objects.
    pub spec: Option<MachineClassSpec>,
}

/// Provider settings of a machine class.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MachineClassSpec {
    /// Node capacity and placement.
    pub node_template: Option<NodeTemplate>,
    /// Secret with the cloud credentials.
    pub credentials_secret_ref: Option<SecretReference>,
    /// Provider-specific configuration.
    pub provider_spec: Value,
    /// Provider (driver) name.
    pub provider: Option<String>,
    /// Secret with user data (and legacy credentials).
    pub secret_ref: Option<SecretReference>,
}

/// Hub fields that `v1beta1` cannot hold, stored in the
/// [`crate::keys::annotation::CONVERSION_DATA`] annotation of a `v1beta1` object.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConversionData {
    /// `MachineDeployment.spec.rollbackTo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_to: Option<RollbackConfig>,
    /// `MachineSet.spec.machineClass`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_class: Option<ClassSpec>,
    /// Set when the object had no annotations before this one was added, so removing it
    /// restores "no annotations" rather than an empty map.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_annotations: Option<bool>,
}

impl ConversionData {
    /// True when nothing needs to be kept.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}
