//! What the MachineDeployment plan takes and gives: its input snapshot and flags, the actions of
//! one reconcile pass, the plan itself, why a deployment cannot be planned for, and the accessors
//! the seams share.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use mcm_api::keys::retry;
use mcm_api::v1alpha1::{Machine, MachineDeployment, MachineDeploymentStatus, MachineSet};

use super::fencepost::FencepostError;
use crate::machine_set::types::MachineRef;
use crate::selector::SelectorError;
use crate::vocabulary::{Event, Retry, flag_defaults};

/// Periodic requeue after validation (docs/behaviour.md#requeue-timing).
pub const RESYNC: mcm_api::duration::Duration = retry::LONG;

/// Why a deployment cannot be planned for. Invalid objects are logged and not requeued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeploymentError {
    /// `spec.replicas` is negative.
    #[error("MachineDeployment {name}: spec.replicas: Replicas has to be a whole number")]
    NegativeReplicas {
        /// Deployment name.
        name: String,
    },
    /// Strategy type absent or unknown.
    #[error(
        "MachineDeployment {name}: spec.strategy.type: strategy type must be one of [InPlaceUpdate Recreate RollingUpdate]"
    )]
    InvalidStrategy {
        /// Deployment name.
        name: String,
    },
    /// Surge or unavailability missing or malformed.
    #[error("MachineDeployment {name}: spec.strategy: {source}")]
    Fencepost {
        /// Deployment name.
        name: String,
        /// The problem.
        source: FencepostError,
    },
    /// Selector absent.
    #[error("MachineDeployment {name}: spec.selector is required")]
    MissingSelector {
        /// Deployment name.
        name: String,
    },
    /// Selector malformed.
    #[error("MachineDeployment {name}: {source}")]
    Selector {
        /// Deployment name.
        name: String,
        /// The problem.
        source: SelectorError,
    },
    /// `matchLabels` differ from the template labels.
    #[error(
        "MachineDeployment {name}: spec.selector.matchLabels: is not matching with spec.template.metadata.labels"
    )]
    SelectorTemplateMismatch {
        /// Deployment name.
        name: String,
    },
    /// Template class kind or name missing.
    #[error("MachineDeployment {name}: spec.template.spec.class.{field}: {field} is required")]
    MissingClass {
        /// Deployment name.
        name: String,
        /// `kind` or `name`.
        field: &'static str,
    },
    /// The in-place strategy needs a target cluster.
    #[error(
        "MachineDeployment {name}: in-place updates are not supported if running without a target cluster"
    )]
    InPlaceWithoutTarget {
        /// Deployment name.
        name: String,
    },
}

/// Configuration of the planner (flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeploymentConfig {
    /// `--autoscaler-scaledown-annotation-during-rollout`.
    pub autoscaler_annotations_during_rollout: bool,
    /// Whether a target cluster is configured (the in-place strategy needs one).
    pub target_cluster: bool,
}

impl Default for DeploymentConfig {
    fn default() -> Self {
        Self {
            autoscaler_annotations_during_rollout:
                flag_defaults::AUTOSCALER_SCALEDOWN_ANNOTATION_DURING_ROLLOUT,
            target_cluster: true,
        }
    }
}

/// Snapshot given to [`plan`](super::decide::plan).
#[derive(Debug, Clone, Copy)]
pub struct DeploymentInput<'a> {
    /// The deployment (read live).
    pub deployment: &'a MachineDeployment,
    /// Every MachineSet of the namespace (cache).
    pub machine_sets: &'a [MachineSet],
    /// Every machine of the namespace (cache).
    pub machines: &'a [std::sync::Arc<Machine>],
    /// Flags.
    pub config: DeploymentConfig,
    /// Nodes of the target cluster backing the machines, by name (empty without a target).
    pub nodes: &'a BTreeMap<String, NodeView>,
    /// Current time.
    pub now: Timestamp,
    /// The MachineClass the deployment's template names does not exist (the shell's cache). New
    /// machines of such a class never come up, so the strategies take no old machine away
    /// while it is missing (docs/behaviour.md#missing-class): a deliberate difference from
    /// upstream, which removes up to maxUnavailable (all of them under Recreate).
    pub template_class_missing: bool,
}

/// What the in-place strategy needs to know about a node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeView {
    /// Node labels.
    pub labels: BTreeMap<String, String>,
    /// Reason of the node's `InPlaceUpdate` condition, if any.
    pub in_place_update_reason: Option<String>,
}

/// One step of a deployment reconcile.
#[derive(Debug, Clone, PartialEq)]
pub enum DeploymentAction {
    /// Add finalizer [`mcm_api::keys::finalizer::MACHINE_CONTROLLER_MANAGER`] to the deployment.
    AddFinalizer,
    /// Remove it (deleting, no MachineSet left).
    RemoveFinalizer,
    /// Adopt an orphan MachineSet.
    AdoptMachineSet {
        /// Name and UID of the MachineSet.
        machine_set: MachineRef,
        /// The controller reference to add.
        owner: OwnerReference,
    },
    /// Remove the deployment's controller reference from a MachineSet it no longer selects.
    ReleaseMachineSet {
        /// Name and UID of the MachineSet.
        machine_set: MachineRef,
    },
    /// Create this MachineSet. On `AlreadyExists` call [`create_conflict`](super::new_machine_set::create_conflict).
    CreateMachineSet(Box<MachineSet>),
    /// Update this MachineSet (metadata and spec) with the cached resourceVersion.
    UpdateMachineSet(Box<MachineSet>),
    /// Delete a MachineSet (NotFound ignored).
    DeleteMachineSet(MachineRef),
    /// Update the deployment's metadata/spec (annotations, template after rollback, rollbackTo).
    UpdateDeployment(Box<MachineDeployment>),
    /// Write the deployment status.
    UpdateDeploymentStatus(Box<MachineDeploymentStatus>),
    /// Set annotations on a machine (cluster-autoscaler deletion marks).
    AnnotateMachine {
        /// The machine.
        machine: MachineRef,
        /// Annotations to set.
        annotations: BTreeMap<String, String>,
    },
    /// Add taint `deployment.machine.sapcloud.io/prefer-no-schedule=True:PreferNoSchedule`.
    TaintNodesPreferNoSchedule(Vec<String>),
    /// Remove that taint.
    UntaintNodesPreferNoSchedule(Vec<String>),
    /// Set `cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"` and the `-by-mcm`
    /// marker on nodes where it is not `"true"` yet.
    DisableAutoscalerScaleDown(Vec<String>),
    /// Remove both annotations from nodes that carry the `-by-mcm: "true"` marker.
    EnableAutoscalerScaleDown(Vec<String>),
    /// Set `label` to `value` on these nodes (in-place candidates and selections).
    LabelNodes {
        /// Node names.
        nodes: Vec<String>,
        /// Label key.
        label: String,
        /// Label value.
        value: String,
    },
    /// After a successful in-place update of a new-set machine's node: remove the node labels
    /// candidate/selected/update-result and annotation update-failed-reason, set
    /// `unschedulable: false`, remove the prefer-no-schedule taint and add
    /// `node.gardener.cloud/critical-components-not-ready:NoSchedule` (one node Update).
    CompleteNodeInPlaceUpdate(String),
    /// Remove a label from a machine (merge patch with null).
    RemoveMachineLabel {
        /// The machine.
        machine: MachineRef,
        /// Label key.
        label: String,
    },
    /// Hand an updated machine over to the new MachineSet: replace its controller reference by
    /// `owner` and its labels by `labels` (merge patch with UID precondition).
    TransferMachine {
        /// The machine.
        machine: MachineRef,
        /// New controller reference.
        owner: OwnerReference,
        /// New labels.
        labels: BTreeMap<String, String>,
    },
    /// Set `spec.unschedulable: false` on a node.
    UncordonNode(String),
    /// Record an Event on the deployment.
    Event(Event),
}

/// Result of [`plan`](super::decide::plan).
#[derive(Debug, Clone, PartialEq)]
pub struct DeploymentPlan {
    /// Actions in execution order.
    pub actions: Vec<DeploymentAction>,
    /// When to reconcile again at the latest.
    pub requeue_after: Retry,
}

/// The deployment's name (empty if absent).
pub(super) fn md_name(md: &MachineDeployment) -> String {
    md.metadata.name.clone().unwrap_or_default()
}

/// A MachineSet's `spec.replicas`, absent meaning 0.
pub(super) fn spec_replicas(ms: &MachineSet) -> i32 {
    ms.spec.replicas.unwrap_or(0)
}

/// A MachineSet's status, absent meaning the default.
pub(super) fn status_of(ms: &MachineSet) -> mcm_api::v1alpha1::MachineSetStatus {
    ms.status.clone().unwrap_or_default()
}

/// The value of annotation `key`, if set.
pub(super) fn ann<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}
