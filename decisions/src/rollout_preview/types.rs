//! The snapshot a preview reads and the verdicts it returns.

use jiff::{SignedDuration, Timestamp};
use mcm_api::v1alpha1::{Machine, MachineClass, MachineDeployment, MachineSet};

use crate::machine_deployment::fencepost::FencepostError;

/// The providerSpec paths a provider can change on a running VM, and where we learned them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HotPaths {
    /// Published by the manager from the driver's `GetCapabilities`.
    Published(Vec<String>),
    /// The manager published nothing: the providerSpec rules ([`RULE_HOT_PATHS`]) apply.
    Rules,
}

/// The providerSpec paths taken as hot-updatable when no capabilities are published: `tags`, the
/// path every provider of this project declares (provider-virtual, the conformance fixture).
pub const RULE_HOT_PATHS: &[&str] = &["tags"];

impl HotPaths {
    /// The paths to test changes against.
    #[must_use]
    pub fn paths(&self) -> Vec<String> {
        match self {
            Self::Published(paths) => paths.clone(),
            Self::Rules => RULE_HOT_PATHS.iter().map(|p| (*p).to_owned()).collect(),
        }
    }

    /// Where the paths come from, as printed.
    #[must_use]
    pub fn source(&self) -> &'static str {
        match self {
            Self::Published(_) => "the driver's GetCapabilities",
            Self::Rules => "the providerSpec rules (no capabilities published)",
        }
    }
}

/// Durations the manager measured recently, used for the estimate: a typical figure per step
/// (the median of its distribution, or the average of the latest values when only those are
/// published) and, when a distribution was measured, a slow one (its 90th percentile).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MeasuredDurations {
    /// Creating a machine until its VM exists.
    pub creation: Option<SignedDuration>,
    /// VM created until the node joined and became ready.
    pub join: Option<SignedDuration>,
    /// Draining a node.
    pub drain: Option<SignedDuration>,
    /// The slow end of `creation`, `join` and `drain` (90th percentiles), when measured.
    pub slow: Option<SlowDurations>,
    /// Where the figures come from (printed with the estimate).
    pub source: String,
}

/// The 90th percentiles of the steps of [`MeasuredDurations`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlowDurations {
    /// Creating a machine until its VM exists.
    pub creation: SignedDuration,
    /// VM created until the node joined and became ready.
    pub join: SignedDuration,
    /// Draining a node.
    pub drain: SignedDuration,
}

/// A roll's estimated duration: typical, and slow when the steps' distributions are known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Estimate {
    /// Every step at its typical duration.
    pub typical: SignedDuration,
    /// Every step at its 90th percentile.
    pub slow: Option<SignedDuration>,
    /// How the figure was made and where the durations come from.
    pub why: String,
}

/// A MachineDeployment update to preview.
#[derive(Debug, Clone, Copy)]
pub struct DeploymentChange<'a> {
    /// The deployment as stored.
    pub old: &'a MachineDeployment,
    /// The deployment as it would be.
    pub new: &'a MachineDeployment,
    /// MachineSets of the namespace (those the deployment controls are picked out).
    pub machine_sets: &'a [MachineSet],
    /// Machines of the namespace (those the deployment's sets control are picked out).
    pub machines: &'a [Machine],
    /// Whether `machine_sets` and `machines` were read; `false` estimates from `spec.replicas`.
    pub observed: bool,
    /// Current time (the deletion order depends on preservation expiry).
    pub now: Timestamp,
}

/// A deployment that uses a class, with what it owns.
#[derive(Debug, Clone, Copy)]
pub struct ClassUser<'a> {
    /// The deployment.
    pub deployment: &'a MachineDeployment,
    /// MachineSets of its namespace.
    pub machine_sets: &'a [MachineSet],
    /// Machines of its namespace.
    pub machines: &'a [Machine],
}

/// A MachineClass update to preview.
#[derive(Debug, Clone)]
pub struct ClassChange<'a> {
    /// The class as stored.
    pub old: &'a MachineClass,
    /// The class as it would be.
    pub new: &'a MachineClass,
    /// Every MachineDeployment of the namespace (the users are picked out by class name).
    pub deployments: Vec<ClassUser<'a>>,
    /// Hot-updatable paths.
    pub hot_paths: HotPaths,
    /// Current time.
    pub now: Timestamp,
}

/// What a changed field does to the machines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldEffect {
    /// Part of the template identity: a new MachineSet, the machines roll (replaced, or updated in
    /// place by the node agent under the InPlaceUpdate strategy).
    Rolls,
    /// Propagated to the MachineSets and machines without replacing them (nodeTemplate, machine
    /// configuration, class kind).
    Propagated,
    /// A hot-updatable providerSpec path: `UpdateMachine` on the running machines.
    HotUpdate,
    /// Not hot-updatable: running machines keep the old value, only new machines get it.
    NewMachinesOnly,
    /// Changes the number of machines.
    Scales,
    /// Touches no machine (strategy, pause, minReadySeconds, ...).
    NoMachineEffect,
}

/// One changed field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldChange {
    /// Dotted path (`spec.template.spec.class.name`, `providerSpec.tags.team`).
    pub path: String,
    /// What it does.
    pub effect: FieldEffect,
}

/// How a template change reaches the machines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Roll {
    /// RollingUpdate: new machines come up while old ones go, within the fenceposts.
    Rolling {
        /// Resolved maxSurge.
        max_surge: i32,
        /// Resolved maxUnavailable.
        max_unavailable: i32,
    },
    /// Recreate: every old machine goes first, then the new ones are created.
    Recreate,
    /// InPlaceUpdate: the node agent updates the machines, none is replaced.
    InPlace {
        /// Resolved maxSurge of the in-place configuration.
        max_surge: i32,
        /// Resolved maxUnavailable.
        max_unavailable: i32,
        /// Manual orchestration: nothing starts until nodes are selected by hand.
        manual: bool,
    },
}

/// What a deployment change does to its machines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeploymentEffect {
    /// No machine is touched.
    Nothing,
    /// The template identity changes.
    Roll {
        /// The strategy.
        roll: Roll,
        /// Machines replaced (Rolling, Recreate) or updated in place (InPlace).
        machines: usize,
        /// Machines that already run the new template (a rollback to an existing MachineSet).
        kept: usize,
        /// Machines changed at a time.
        per_batch: usize,
        /// Number of batches.
        batches: usize,
    },
    /// Only fields propagated in place changed.
    Propagate {
        /// Machines that receive them.
        machines: usize,
    },
    /// Machines may be replaced, but which depends on objects that were not read (a rollback's
    /// target revision, a resumed deployment's pending template): says why.
    Undetermined(String),
}

/// A `spec.rollbackTo` the change sets, as the deployment controller will carry it out
/// (docs/behaviour.md#rollback).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RollbackPlan {
    /// The template of this revision's MachineSet replaces the deployment's.
    To {
        /// The revision rolled back to (0 resolved to the last one).
        revision: i64,
    },
    /// No MachineSet carries the revision (0: there is no earlier one): the controller clears
    /// `spec.rollbackTo` with the event `DeploymentRollbackRevisionNotFound`, nothing else.
    NotFound {
        /// The revision asked for (0: the last one).
        requested: i64,
    },
    /// The revision's template is the current one: `spec.rollbackTo` is cleared with the event
    /// `DeploymentRollbackTemplateUnchanged`, nothing else.
    SameTemplate {
        /// The revision.
        revision: i64,
    },
}

/// The verdict on a MachineDeployment update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeploymentVerdict {
    /// `namespace/name`.
    pub deployment: String,
    /// The changed fields.
    pub changes: Vec<FieldChange>,
    /// What happens to the machines.
    pub effect: DeploymentEffect,
    /// `(old, new)` `spec.replicas` when it changes.
    pub scale: Option<(i32, i32)>,
    /// The deployment is (and stays) paused: nothing happens until it is resumed.
    pub paused: bool,
    /// Machines in the order they go (replaced or updated), first first.
    pub order: Vec<String>,
    /// The machine counts come from `spec.replicas` (sets and machines were not read).
    pub estimated: bool,
    /// The rollback the change asks for (`spec.rollbackTo` set), when its sets were read.
    pub rollback: Option<RollbackPlan>,
    /// The change resumes a paused deployment whose machines do not all run its template: the
    /// template changed while it was paused rolls out now.
    pub resumes_pending: bool,
}

/// What a class change does to one deployment that uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassUserVerdict {
    /// `namespace/name` of the deployment.
    pub deployment: String,
    /// Machines of the deployment that run on the class.
    pub machines: usize,
    /// Of those, updated in place through `UpdateMachine`.
    pub hot_updated: usize,
    /// Of those, left unchanged because a change is not hot-updatable.
    pub left_unchanged: usize,
    /// Of those, adopting the new providerSpec without a driver call (no last-applied record).
    pub adopted: usize,
    /// The providerSpec paths the hot updates change (each machine's last-applied providerSpec
    /// against the new one; an earlier change not yet applied is among them).
    pub updated_paths: Vec<String>,
    /// Machines whose last-applied providerSpec differs from the new one at a path that is not
    /// hot-updatable: the machine controller updates none of them.
    pub blocked: usize,
    /// Those paths (`providerSpec.<path>`), also when the change itself did not touch them.
    pub blocked_by: Vec<String>,
}

/// The verdict on a MachineClass update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassVerdict {
    /// `namespace/name` of the class.
    pub class: String,
    /// The changed fields.
    pub changes: Vec<FieldChange>,
    /// Every deployment whose template references the class.
    pub users: Vec<ClassUserVerdict>,
    /// Where the hot-updatable paths come from.
    pub hot_paths_source: &'static str,
}

/// Why a preview cannot be given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PreviewError {
    /// maxSurge or maxUnavailable cannot be resolved.
    #[error("the update strategy cannot be resolved: {0}")]
    Fencepost(#[from] FencepostError),
    /// The providerSpec is not a JSON object.
    #[error("providerSpec is not an object but {0}")]
    ProviderSpec(&'static str),
    /// An object cannot be represented as JSON for the field diff.
    #[error("cannot compare the objects: {0}")]
    Diff(String),
}
