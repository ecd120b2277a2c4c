//! What the MachineSet plan takes and gives: its input snapshot, the actions of one reconcile
//! pass, the plan itself, why a MachineSet cannot be planned for, and the accessors the seams
//! share.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use mcm_api::duration::Duration;
use mcm_api::keys::retry;
use mcm_api::v1alpha1::{
    Machine, MachineConfiguration, MachinePhase, MachineSet, NodeTemplateSpec,
};

use super::expectations::Readiness;
use crate::selector::SelectorError;
use crate::vocabulary::Retry;

/// Kind of the MachineSet owner reference.
pub const KIND: &str = "MachineSet";
/// At most this many machines are created or deleted per pass (upstream `BurstReplicas`).
pub const BURST_REPLICAS: usize = 100;
/// First slow-start batch size (upstream `SlowStartInitialBatchSize`).
pub const SLOW_START_INITIAL_BATCH: usize = 1;
/// Periodic requeue after a successful pass (docs/behaviour.md#requeue-timing).
pub const RESYNC: Duration = retry::LONG;

/// Why a MachineSet cannot be planned for. The shell logs it and does not requeue (upstream
/// silently skips invalid objects until they change).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MachineSetError {
    /// `spec.replicas` is negative.
    #[error("MachineSet {name}: spec.replicas: Replicas has to be a whole number")]
    NegativeReplicas {
        /// MachineSet name.
        name: String,
    },
    /// `spec.selector` is absent.
    #[error("MachineSet {name}: spec.selector is required")]
    MissingSelector {
        /// MachineSet name.
        name: String,
    },
    /// A `matchLabels` entry differs from the template labels.
    #[error(
        "MachineSet {name}: spec.selector.matchLabels: is not matching with spec.template.metadata.labels"
    )]
    SelectorTemplateMismatch {
        /// MachineSet name.
        name: String,
    },
    /// The template has no class kind or name.
    #[error("MachineSet {name}: spec.template.spec.class.{field}: {what} is required")]
    MissingClass {
        /// MachineSet name.
        name: String,
        /// `kind` or `name`.
        field: &'static str,
        /// `Kind` or `Name`.
        what: &'static str,
    },
    /// The selector cannot be evaluated.
    #[error("MachineSet {name}: {source}")]
    Selector {
        /// MachineSet name.
        name: String,
        /// The selector problem.
        source: SelectorError,
    },
    /// The template has no labels, so created machines could never be selected.
    #[error("MachineSet {name}: unable to create machines, no labels")]
    NoTemplateLabels {
        /// MachineSet name.
        name: String,
    },
}

/// A machine addressed by name and UID (the UID is a precondition for writes and deletes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineRef {
    /// Machine name.
    pub name: String,
    /// Machine UID (empty if the cache had none).
    pub uid: String,
}

impl MachineRef {
    /// The name and UID of `m`.
    pub(super) fn of(m: &Machine) -> Self {
        Self {
            name: m.metadata.name.clone().unwrap_or_default(),
            uid: m.metadata.uid.clone().unwrap_or_default(),
        }
    }
}

/// Fields of an existing machine the MachineSet controller changes in place (read-modify-write
/// with conflict retry by the shell).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MachineUpdate {
    /// New `spec.nodeTemplate` (propagated from the template, docs/behaviour.md#machine-set-reconcile step 6).
    pub node_template: Option<Option<NodeTemplateSpec>>,
    /// New inlined machine configuration (docs/behaviour.md#machine-set-reconcile step 7).
    pub configuration: Option<MachineConfiguration>,
    /// New `spec.class.kind` (docs/behaviour.md#machine-set-reconcile step 8).
    pub class_kind: Option<String>,
    /// Annotations to set.
    pub set_annotations: BTreeMap<String, String>,
    /// Annotations to remove.
    pub remove_annotations: BTreeSet<String>,
}

/// One step of a MachineSet reconcile, executed in order by the shell.
#[derive(Debug, Clone, PartialEq)]
pub enum MachineSetAction {
    /// Add finalizer [`mcm_api::keys::finalizer::MACHINE_CONTROLLER_MANAGER`] to the MachineSet.
    AddFinalizer,
    /// Remove that finalizer (deleting and no machine left).
    RemoveFinalizer,
    /// Set `owner` as the controller reference of an orphan machine (UID precondition).
    AdoptMachine {
        /// The machine.
        machine: MachineRef,
        /// The controller reference to add.
        owner: OwnerReference,
    },
    /// Remove the MachineSet's controller reference from a machine it no longer selects.
    ReleaseMachine {
        /// The machine.
        machine: MachineRef,
    },
    /// Change fields of a claimed machine.
    UpdateMachine {
        /// The machine.
        machine: MachineRef,
        /// What to change.
        update: Box<MachineUpdate>,
    },
    /// Create `count` machines from `machine` (uses `generateName`) in slow-start `batches`:
    /// all creations of a batch concurrently, stop after the first batch with an error, report
    /// the skipped ones to the expectations. Record `count` expected creations first.
    CreateMachines {
        /// The object to create.
        machine: Box<Machine>,
        /// How many.
        count: usize,
        /// Batch sizes summing to `count`.
        batches: Vec<usize>,
    },
    /// Delete these machines (record expected deletions first) and set their status to
    /// [`terminating_status`](super::deletion::terminating_status); events [`events::deleted`](super::events::deleted) / [`events::delete_failed`](super::events::delete_failed).
    DeleteMachines {
        /// The machines, in deletion order.
        machines: Vec<MachineRef>,
    },
}

/// Snapshot given to [`plan`](super::decide::plan).
#[derive(Debug, Clone, Copy)]
pub struct MachineSetInput<'a> {
    /// The MachineSet (read live).
    pub machine_set: &'a MachineSet,
    /// Every machine of the namespace from the cache.
    pub machines: &'a [Arc<Machine>],
    /// Nodes known to the cache: name → value of their preserve annotation (absent key: node not
    /// found).
    pub node_preserve: &'a BTreeMap<String, Option<String>>,
    /// Whether the expectations of this MachineSet allow creating or deleting.
    pub readiness: Readiness,
    /// Current time.
    pub now: Timestamp,
}

/// Result of [`plan`](super::decide::plan).
#[derive(Debug, Clone, PartialEq)]
pub struct MachineSetPlan {
    /// Actions in execution order.
    pub actions: Vec<MachineSetAction>,
    /// The claimed machines as they will be after the in-place updates (input of the status).
    pub claimed: Vec<Arc<Machine>>,
    /// When to reconcile again at the latest.
    pub requeue_after: Retry,
}

/// Outcome of the replica actions, as the shell saw it (drives the `ReplicaFailure` condition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaError {
    /// The first error text.
    pub message: String,
}

pub(super) fn name_of(ms: &MachineSet) -> String {
    ms.metadata.name.clone().unwrap_or_default()
}

pub(super) fn labels(meta: &ObjectMeta) -> Option<&BTreeMap<String, String>> {
    meta.labels.as_ref()
}

pub(super) fn annotation_of<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

pub(super) fn label_of<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

pub(super) fn phase(m: &Machine) -> Option<&MachinePhase> {
    m.phase()
}

pub(super) fn preserve_expiry(m: &Machine) -> Option<Timestamp> {
    m.status
        .as_ref()?
        .current_status
        .as_ref()?
        .preserve_expiry_time
        .as_ref()
        .map(|t| t.0)
}
