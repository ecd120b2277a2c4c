//! Pure decision logic of the MachineDeployment controller (reference §5.2–§5.12).
//!
//! [`plan`] takes the deployment (read live), the MachineSets and machines of its namespace from
//! the cache, the configuration and `now`, and returns the actions of one reconcile pass. The
//! plan works on copies of the claimed MachineSets, so one pass may create the new MachineSet and
//! go on with the rollout; writes of the same object are coalesced into one action carrying the
//! final object. The shell executes actions in order; a failed MachineSet or deployment write
//! stops the pass (rate-limited requeue), node taint/annotation failures are logged and skipped
//! (as upstream).

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use mcm_api::keys::{annotation, deployment_reason, finalizer, label, retry, value};
use mcm_api::v1alpha1::{
    ConditionStatus, Machine, MachineDeployment, MachineDeploymentConditionType as CondType,
    MachineDeploymentStatus, MachineDeploymentStrategyType as Strategy, MachineSet,
};

use super::autoscaler;
use super::fencepost::{self, FencepostError, replicas};
use super::revision::{self, KIND};
use super::status;
use crate::machine_set::claim::{self, ClaimDecision, Owner};
use crate::machine_set::plan::{Event, MachineRef};
use crate::selector::{self, SelectorError};
use crate::vocabulary::{Retry, go_duration};

/// Progressing reason when the controller created the new MachineSet (not in `mcm_api::keys`).
pub const REASON_NEW_MACHINE_SET_CREATED: &str = "NewMachineSetCreated";
/// Periodic requeue after validation (reference §16).
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
    /// `--autoscaler-scaledown-annotation-during-rollout` (default true).
    pub autoscaler_annotations_during_rollout: bool,
    /// Whether a target cluster is configured (the in-place strategy needs one).
    pub target_cluster: bool,
}

impl Default for DeploymentConfig {
    fn default() -> Self {
        Self {
            autoscaler_annotations_during_rollout: true,
            target_cluster: true,
        }
    }
}

/// Snapshot given to [`plan`].
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
    /// Add finalizer [`finalizer::MACHINE_CONTROLLER_MANAGER`] to the deployment.
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
    /// Create this MachineSet. On `AlreadyExists` call [`create_conflict`].
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

/// Result of [`plan`].
#[derive(Debug, Clone, PartialEq)]
pub struct DeploymentPlan {
    /// Actions in execution order.
    pub actions: Vec<DeploymentAction>,
    /// When to reconcile again at the latest.
    pub requeue_after: Retry,
}

/// What to do when creating the new MachineSet failed with `AlreadyExists`.
#[derive(Debug, Clone, PartialEq)]
pub enum CreateConflict {
    /// The existing MachineSet is ours and equal: use it (nothing to do, next pass finds it).
    UseExisting,
    /// A foreign or different MachineSet holds the name: write this status (collision count + 1).
    BumpCollisionCount(Box<MachineDeploymentStatus>),
}

/// Decision on `AlreadyExists` for the new MachineSet (§5.3 step 4).
#[must_use]
pub fn create_conflict(md: &MachineDeployment, existing: &MachineSet) -> CreateConflict {
    let ours = claim::controller_ref(&existing.metadata)
        .is_some_and(|r| Some(&r.uid) == md.metadata.uid.as_ref());
    let equal = existing
        .spec
        .template
        .as_ref()
        .is_some_and(|t| revision::equal_ignore_hash(t, &md.spec.template));
    if ours && equal {
        return CreateConflict::UseExisting;
    }
    let mut st = md.status.clone().unwrap_or_default();
    st.collision_count = Some(st.collision_count.unwrap_or(0).saturating_add(1));
    CreateConflict::BumpCollisionCount(Box::new(st))
}

/// Progressing reason when creating the new MachineSet failed (not in `mcm_api::keys`).
pub const REASON_MACHINE_SET_CREATE_ERROR: &str = "MachineSetCreateError";

/// Status and Warning event to write when creating the new MachineSet failed with an error other
/// than `AlreadyExists` or a terminating namespace (§5.3 step 4).
#[must_use]
pub fn create_failure(
    md: &MachineDeployment,
    machine_set: &str,
    error: &str,
    now: Timestamp,
) -> (MachineDeploymentStatus, Event) {
    let message = format!("Failed to create new machine set {machine_set:?}: {error}");
    let mut st = md.status.clone().unwrap_or_default();
    status::set_condition(
        st.conditions.get_or_insert_with(Vec::new),
        status::new_condition(
            CondType::Progressing,
            ConditionStatus::False,
            REASON_MACHINE_SET_CREATE_ERROR,
            message.clone(),
            now,
        ),
    );
    (st, Event::warning(REASON_MACHINE_SET_CREATE_ERROR, message))
}

fn md_name(md: &MachineDeployment) -> String {
    md.metadata.name.clone().unwrap_or_default()
}

/// Upstream validation of a deployment (reference §11) plus nil-selector and selector syntax.
///
/// # Errors
/// The first violated rule.
pub fn validate(md: &MachineDeployment) -> Result<(), DeploymentError> {
    let name = md_name(md);
    if replicas(md) < 0 {
        return Err(DeploymentError::NegativeReplicas { name });
    }
    let strategy = md.spec.strategy.as_ref().and_then(|s| s.type_.as_ref());
    match strategy {
        Some(Strategy::Recreate) => {}
        Some(Strategy::RollingUpdate | Strategy::InPlaceUpdate) => {
            let cfg =
                fencepost::update_configuration(md).ok_or_else(|| DeploymentError::Fencepost {
                    name: name.clone(),
                    source: FencepostError::Missing("update configuration"),
                })?;
            fencepost::resolve_fenceposts(
                cfg.max_surge.as_ref(),
                cfg.max_unavailable.as_ref(),
                replicas(md),
            )
            .map_err(|source| DeploymentError::Fencepost {
                name: name.clone(),
                source,
            })?;
            if strategy == Some(&Strategy::InPlaceUpdate) {
                let orchestration = md
                    .spec
                    .strategy
                    .as_ref()
                    .and_then(|s| s.in_place_update.as_ref())
                    .and_then(|i| i.orchestration_type.as_ref());
                if !orchestration.is_some_and(mcm_api::v1alpha1::OrchestrationType::is_known) {
                    return Err(DeploymentError::InvalidStrategy { name });
                }
            }
        }
        _ => return Err(DeploymentError::InvalidStrategy { name }),
    }
    let Some(sel) = md.spec.selector.as_ref() else {
        return Err(DeploymentError::MissingSelector { name });
    };
    selector::validate(sel).map_err(|source| DeploymentError::Selector {
        name: name.clone(),
        source,
    })?;
    let template_labels = md
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.as_ref());
    for (k, v) in sel.match_labels.iter().flatten() {
        if template_labels.and_then(|l| l.get(k)) != Some(v) {
            return Err(DeploymentError::SelectorTemplateMismatch { name });
        }
    }
    let class = md
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.class.as_ref());
    if class
        .and_then(|c| c.kind.as_deref())
        .unwrap_or("")
        .is_empty()
    {
        return Err(DeploymentError::MissingClass {
            name,
            field: "kind",
        });
    }
    if class
        .and_then(|c| c.name.as_deref())
        .unwrap_or("")
        .is_empty()
    {
        return Err(DeploymentError::MissingClass {
            name,
            field: "name",
        });
    }
    Ok(())
}

fn spec_replicas(ms: &MachineSet) -> i32 {
    ms.spec.replicas.unwrap_or(0)
}

fn status_of(ms: &MachineSet) -> mcm_api::v1alpha1::MachineSetStatus {
    ms.status.clone().unwrap_or_default()
}

fn ann<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// `isScalingEvent` (§5.4).
#[must_use]
pub fn is_scaling_event(md: &MachineDeployment, sets: &[MachineSet]) -> bool {
    if revision::find_new_machine_set(md, sets).is_none() {
        return false;
    }
    let active: Vec<&MachineSet> = sets.iter().filter(|s| spec_replicas(s) > 0).collect();
    if active.is_empty() {
        return replicas(md) > 0;
    }
    active.iter().any(|s| {
        ann(&s.metadata, annotation::DESIRED_REPLICAS)
            .and_then(|d| d.parse::<i32>().ok())
            .is_some_and(|d| d != replicas(md))
    })
}

/// `NewISNewReplicas` (§5.3): target size of the new MachineSet. RollingUpdate (and automatic
/// InPlaceUpdate, with its own maxSurge) grows it up to `replicas + maxSurge` counting
/// `existing_total`: every machine of every set that exists or is about to (upstream counts
/// `status.replicas`; we take per set the larger of spec, status and the machines seen), never
/// beyond `replicas`; manual InPlaceUpdate gives 0 (its new set only grows by machines handed
/// over after their update, upstream returns 0 whatever the set holds); Recreate uses `replicas`.
#[must_use]
pub fn new_machine_set_replicas(
    md: &MachineDeployment,
    existing_total: i32,
    new_spec: i32,
    max_surge: i32,
) -> i32 {
    match md.spec.strategy.as_ref().and_then(|s| s.type_.as_ref()) {
        Some(Strategy::InPlaceUpdate)
            if md
                .spec
                .strategy
                .as_ref()
                .and_then(|s| s.in_place_update.as_ref())
                .and_then(|i| i.orchestration_type.as_ref())
                == Some(&mcm_api::v1alpha1::OrchestrationType::Manual) =>
        {
            0
        }
        Some(Strategy::RollingUpdate | Strategy::InPlaceUpdate) => {
            let max_total = replicas(md) + max_surge;
            if existing_total >= max_total {
                return new_spec;
            }
            new_spec + (max_total - existing_total).min(replicas(md) - new_spec)
        }
        _ => replicas(md),
    }
}

/// Go's `math.Round` to int32 (half away from zero), saturating.
fn round_half_away(numerator: i64, denominator: i64) -> i64 {
    if denominator == 0 {
        return 0;
    }
    let (n, d) = if denominator < 0 {
        (-numerator, -denominator)
    } else {
        (numerator, denominator)
    };
    if n >= 0 {
        (2 * n + d) / (2 * d)
    } else {
        -((-2 * n + d) / (2 * d))
    }
}

/// Proportional scale-in (§5.4 step 3, `toAdd < 0`): new sizes for `sets` (active ones), given
/// the deployment's `replicas`, `max_surge` and the fallback `status.replicas`.
///
/// Deviations that keep the total exact: a set never grows during a scale-in (a stale
/// `max-replicas` annotation could make upstream's fraction positive), and a leftover the largest
/// set cannot absorb is taken from the next ones, so the sizes always sum to the allowed total.
#[must_use]
pub fn proportional_scale_in(
    sets: &[(i32, Option<i32>)],
    md_replicas: i32,
    max_surge: i32,
    status_replicas: i32,
) -> Vec<i32> {
    let allowed = if md_replicas == 0 {
        0
    } else {
        md_replicas + max_surge
    };
    let total: i32 = sets.iter().map(|(r, _)| *r).sum();
    let to_add = allowed - total;
    let mut sizes: Vec<i32> = sets.iter().map(|(r, _)| *r).collect();
    if to_add >= 0 {
        return sizes;
    }
    let mut added = 0i32;
    for (i, (size, annotated_max)) in sets.iter().enumerate() {
        if added == to_add {
            break;
        }
        let fraction = if md_replicas == 0 {
            -size
        } else {
            let max = annotated_max.unwrap_or(status_replicas);
            let scaled = round_half_away(i64::from(*size) * i64::from(allowed), i64::from(max));
            i32::try_from(scaled).unwrap_or(i32::MAX) - size
        };
        let proportion = fraction.max(to_add - added).min(0);
        sizes[i] += proportion;
        added += proportion;
    }
    let mut leftover = to_add - added;
    for size in &mut sizes {
        if leftover == 0 {
            break;
        }
        let take = leftover.max(-*size);
        *size += take;
        leftover -= take;
    }
    sizes
}

struct Work<'a> {
    input: DeploymentInput<'a>,
    md: MachineDeployment,
    md_changed: bool,
    original_status: MachineDeploymentStatus,
    sets: Vec<MachineSet>,
    /// Index of the set created in this pass, if any.
    created: Option<usize>,
    new: Option<usize>,
    max_surge: i32,
    max_unavailable: i32,
    actions: Vec<DeploymentAction>,
    /// Names of sets written (coalesced at the end).
    dirty: BTreeSet<usize>,
    machines_by_set: BTreeMap<String, Vec<&'a Machine>>,
    requeue_after: Retry,
}

impl<'a> Work<'a> {
    fn now(&self) -> Timestamp {
        self.input.now
    }

    fn olds(&self) -> Vec<usize> {
        (0..self.sets.len())
            .filter(|&i| Some(i) != self.new)
            .collect()
    }

    fn set_name(&self, i: usize) -> String {
        self.sets[i].metadata.name.clone().unwrap_or_default()
    }

    fn machines_of(&self, i: usize) -> &[&'a Machine] {
        self.sets[i]
            .metadata
            .uid
            .as_ref()
            .and_then(|u| self.machines_by_set.get(u))
            .map_or(&[], Vec::as_slice)
    }

    fn nodes_of(&self, indices: &[usize], skip_preserved: bool) -> Vec<String> {
        let mut nodes: Vec<String> = indices
            .iter()
            .flat_map(|&i| self.machines_of(i).iter())
            .filter(|m| {
                !skip_preserved
                    || m.status
                        .as_ref()
                        .and_then(|s| s.current_status.as_ref())
                        .and_then(|c| c.preserve_expiry_time.as_ref())
                        .is_none()
            })
            .filter_map(|m| m.node_name().filter(|n| !n.is_empty()).map(str::to_owned))
            .collect();
        nodes.sort();
        nodes.dedup();
        nodes
    }

    fn event(&mut self, e: Event) {
        self.actions.push(DeploymentAction::Event(e));
    }

    fn mark_dirty(&mut self, i: usize) {
        if self.created != Some(i) && self.dirty.insert(i) {
            // Placeholder position; the final object is filled in by `finish`.
            self.actions
                .push(DeploymentAction::UpdateMachineSet(Box::new(
                    self.sets[i].clone(),
                )));
        }
    }

    fn set_md_annotations(&mut self, a: BTreeMap<String, String>) {
        if self.md.metadata.annotations.as_ref() != Some(&a) {
            self.md.metadata.annotations = Some(a);
            self.mark_md_dirty();
        }
    }

    fn mark_md_dirty(&mut self) {
        if !self.md_changed {
            self.md_changed = true;
            self.actions
                .push(DeploymentAction::UpdateDeployment(Box::new(
                    self.md.clone(),
                )));
        }
    }

    fn conditions_mut(&mut self) -> &mut Vec<mcm_api::v1alpha1::MachineDeploymentCondition> {
        self.md
            .status
            .get_or_insert_with(Default::default)
            .conditions
            .get_or_insert_with(Vec::new)
    }

    /// `scaleMachineSet`: size plus desired/max annotations; returns whether the size changed.
    fn scale(&mut self, i: usize, size: i32) -> bool {
        let desired = replicas(&self.md);
        let max = desired.saturating_add(self.max_surge);
        let ms = &mut self.sets[i];
        let annotations = ms.metadata.annotations.get_or_insert_with(BTreeMap::new);
        let mut changed = false;
        for (k, v) in [
            (annotation::DESIRED_REPLICAS, desired.to_string()),
            (annotation::MAX_REPLICAS, max.to_string()),
        ] {
            if annotations.get(k) != Some(&v) {
                annotations.insert(k.to_owned(), v);
                changed = true;
            }
        }
        let old = spec_replicas(ms);
        let size_changed = old != size;
        if size_changed || changed {
            ms.spec.replicas = Some(size);
            self.mark_dirty(i);
        }
        if size_changed {
            let direction = if size > old { "up" } else { "down" };
            let name = self.set_name(i);
            self.event(Event::normal(
                "ScalingMachineSet",
                format!("Scaled {direction} machine set {name} to {size}"),
            ));
        }
        size_changed
    }

    fn all_refs(&self) -> Vec<&MachineSet> {
        self.sets.iter().collect()
    }

    fn all_spec_total(&self) -> i32 {
        self.sets.iter().map(spec_replicas).sum()
    }

    /// Machines that exist or are about to, for the surge ceiling: per set the largest of its
    /// spec (creations issued but not yet seen), its `status.replicas` (upstream's count, which
    /// includes terminating machines) and the machines this pass sees owned by it (fresher than a
    /// status the MachineSet controller has not rewritten yet). Counting spec alone let a rollout
    /// create past `replicas + maxSurge` while an old set's scale-down was still draining.
    fn existing_total(&self) -> i32 {
        (0..self.sets.len())
            .map(|i| {
                let seen = i32::try_from(self.machines_of(i).len()).unwrap_or(i32::MAX);
                spec_replicas(&self.sets[i])
                    .max(status_of(&self.sets[i]).replicas.unwrap_or(0))
                    .max(seen)
            })
            .fold(0i32, i32::saturating_add)
    }

    /// `getAllMachineSetsAndSyncRevision` (§5.3).
    fn sync_revision(&mut self, create: bool) {
        let olds_max = {
            let olds: Vec<&MachineSet> = self
                .sets
                .iter()
                .enumerate()
                .filter(|(i, _)| Some(*i) != self.new)
                .map(|(_, s)| s)
                .collect();
            revision::max_revision(olds)
        };
        let new_revision = olds_max + 1;
        if let Some(i) = self.new {
            if let Some(updated) =
                revision::sync_new_machine_set(&self.md, &self.sets[i], new_revision)
            {
                self.sets[i] = updated;
                self.mark_dirty(i);
                return;
            }
            let ms_revision = ann(&self.sets[i].metadata, annotation::REVISION)
                .unwrap_or("")
                .to_owned();
            let mut a = self.md.metadata.annotations.clone().unwrap_or_default();
            if a.get(annotation::REVISION) != Some(&ms_revision) {
                a.insert(annotation::REVISION.to_owned(), ms_revision);
                self.set_md_annotations(a);
            }
            let has_progressing = status::condition(
                self.md.status.as_ref().and_then(|s| s.conditions.as_ref()),
                &CondType::Progressing,
            )
            .is_some();
            if !has_progressing {
                let name = self.set_name(i);
                let now = self.now();
                status::set_condition(
                    self.conditions_mut(),
                    status::new_condition(
                        CondType::Progressing,
                        ConditionStatus::True,
                        deployment_reason::FOUND_NEW_MACHINE_SET,
                        format!("Found new machine set {name:?}"),
                        now,
                    ),
                );
            }
            return;
        }
        if !create {
            return;
        }
        // Pick a name not used by another MachineSet of the namespace, bumping the collision
        // count as upstream does one pass at a time.
        let mut collision = self.md.status.as_ref().and_then(|s| s.collision_count);
        let md_name = md_name(&self.md);
        let namespace = self.md.metadata.namespace.clone();
        let mut hash = revision::template_hash(&self.md.spec.template, collision);
        for _ in 0..100 {
            let name = revision::machine_set_name(&md_name, &hash);
            let taken = self.input.machine_sets.iter().any(|s| {
                s.metadata.namespace == namespace && s.metadata.name.as_deref() == Some(&name)
            });
            if !taken {
                break;
            }
            collision = Some(collision.unwrap_or(0).saturating_add(1));
            hash = revision::template_hash(&self.md.spec.template, collision);
        }
        if collision != self.md.status.as_ref().and_then(|s| s.collision_count) {
            self.md
                .status
                .get_or_insert_with(Default::default)
                .collision_count = collision;
        }
        let surge = if self
            .md
            .spec
            .strategy
            .as_ref()
            .and_then(|s| s.type_.as_ref())
            == Some(&Strategy::InPlaceUpdate)
        {
            in_place::in_place_surge(&self.md)
        } else {
            self.max_surge
        };
        let size = new_machine_set_replicas(&self.md, self.existing_total(), 0, surge);
        let mut ms = revision::new_machine_set(&self.md, &hash, new_revision, size, self.max_surge);
        ms.metadata.creation_timestamp = None;
        let name = ms.metadata.name.clone().unwrap_or_default();
        self.sets.push(ms);
        let i = self.sets.len() - 1;
        self.created = Some(i);
        self.new = Some(i);
        self.actions
            .push(DeploymentAction::CreateMachineSet(Box::new(
                self.sets[i].clone(),
            )));
        if size > 0 {
            self.event(Event::normal(
                "ScalingMachineSet",
                format!("Scaled up machine set {name} to {size}"),
            ));
        }
        let mut a = self.md.metadata.annotations.clone().unwrap_or_default();
        if a.get(annotation::REVISION) != Some(&new_revision.to_string()) {
            a.insert(annotation::REVISION.to_owned(), new_revision.to_string());
            self.set_md_annotations(a);
        }
        let now = self.now();
        status::set_condition(
            self.conditions_mut(),
            status::new_condition(
                CondType::Progressing,
                ConditionStatus::True,
                REASON_NEW_MACHINE_SET_CREATED,
                format!("Created new machine set {name:?}"),
                now,
            ),
        );
    }

    /// `scale` (§5.4).
    fn scale_deployment(&mut self) {
        let active: Vec<usize> = (0..self.sets.len())
            .filter(|&i| spec_replicas(&self.sets[i]) > 0)
            .collect();
        let want = replicas(&self.md);
        if active.len() <= 1 {
            let target = active.first().copied().or(self.new).or_else(|| {
                let mut olds = self.olds();
                olds.sort_by(|&a, &b| revision::creation_order(&self.sets[a], &self.sets[b]));
                olds.last().copied()
            });
            if let Some(i) = target {
                let size = self.grow_within_surge(i, want);
                self.scale(i, size);
            }
            return;
        }
        if let Some(n) = self.new {
            let ms = &self.sets[n];
            let saturated = spec_replicas(ms) == want
                && ann(&ms.metadata, annotation::DESIRED_REPLICAS)
                    .and_then(|d| d.parse::<i32>().ok())
                    == Some(want)
                && status_of(ms).available_replicas.unwrap_or(0) == want;
            if saturated {
                for i in active.into_iter().filter(|&i| i != n) {
                    self.scale(i, 0);
                }
                return;
            }
        }
        if self
            .md
            .spec
            .strategy
            .as_ref()
            .and_then(|s| s.type_.as_ref())
            != Some(&Strategy::RollingUpdate)
        {
            return;
        }
        let allowed = if want == 0 { 0 } else { want + self.max_surge };
        let total: i32 = active.iter().map(|&i| spec_replicas(&self.sets[i])).sum();
        let to_add = allowed - total;
        let mut sizes: BTreeMap<usize, i32> = active
            .iter()
            .map(|&i| (i, spec_replicas(&self.sets[i])))
            .collect();
        if to_add > 0 {
            // Machines of inactive sets that are still terminating occupy surge room too.
            let room = (allowed - self.existing_total()).max(0);
            if let Some(n) = self.new {
                *sizes.entry(n).or_insert(0) += to_add.min(room);
            }
        } else if to_add < 0 {
            // Largest first, ties older first.
            let mut order = active.clone();
            order.sort_by(|&a, &b| {
                spec_replicas(&self.sets[b])
                    .cmp(&spec_replicas(&self.sets[a]))
                    .then_with(|| revision::creation_order(&self.sets[a], &self.sets[b]))
            });
            let inputs: Vec<(i32, Option<i32>)> = order
                .iter()
                .map(|&i| {
                    (
                        spec_replicas(&self.sets[i]),
                        ann(&self.sets[i].metadata, annotation::MAX_REPLICAS)
                            .and_then(|v| v.parse().ok()),
                    )
                })
                .collect();
            let status_replicas = self
                .md
                .status
                .as_ref()
                .and_then(|s| s.replicas)
                .unwrap_or(0);
            let new_sizes = proportional_scale_in(&inputs, want, self.max_surge, status_replicas);
            for (i, size) in order.into_iter().zip(new_sizes) {
                sizes.insert(i, size);
            }
        }
        for (i, size) in sizes {
            self.scale(i, size);
        }
    }

    /// The size set `i` may grow to on its way to `want`: for rolling strategies no further than
    /// the room left under `replicas + maxSurge` by the machines that exist (terminating machines
    /// of sets already scaled to 0 included); later passes grow it as that room frees. Recreate
    /// and shrinking are not capped.
    fn grow_within_surge(&self, i: usize, want: i32) -> i32 {
        let current = spec_replicas(&self.sets[i]);
        let recreate = self
            .md
            .spec
            .strategy
            .as_ref()
            .and_then(|s| s.type_.as_ref())
            == Some(&Strategy::Recreate);
        if recreate || want <= current {
            return want;
        }
        let room = (replicas(&self.md) + self.max_surge - self.existing_total()).max(0);
        current + (want - current).min(room)
    }

    fn old_sets_all_scaled_to_zero(&self) -> bool {
        // Quirk kept from upstream: a set counts as non-zero only if all five counters are.
        self.olds().iter().all(|&i| {
            let s = &self.sets[i];
            let st = status_of(s);
            !(spec_replicas(s) != 0
                && st.available_replicas.unwrap_or(0) != 0
                && st.fully_labeled_replicas.unwrap_or(0) != 0
                && st.ready_replicas.unwrap_or(0) != 0
                && st.replicas.unwrap_or(0) != 0)
        })
    }

    fn autoscaler_annotations_for_rollout(&mut self) {
        if self.input.config.autoscaler_annotations_during_rollout
            && !self.olds().is_empty()
            && !self.old_sets_all_scaled_to_zero()
        {
            let all: Vec<usize> = (0..self.sets.len()).collect();
            let nodes = self.nodes_of(&all, false);
            if !nodes.is_empty() {
                self.actions
                    .push(DeploymentAction::DisableAutoscalerScaleDown(nodes));
            }
        }
    }

    fn taint_old_sets(&mut self) {
        for i in self.olds() {
            if ann(&self.sets[i].metadata, annotation::PREFER_NO_SCHEDULE).is_some() {
                continue;
            }
            let nodes = self.nodes_of(&[i], false);
            if !nodes.is_empty() {
                self.actions
                    .push(DeploymentAction::TaintNodesPreferNoSchedule(nodes));
            }
            self.sets[i]
                .metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(
                    annotation::PREFER_NO_SCHEDULE.to_owned(),
                    value::TRUE_CAPITALISED.to_owned(),
                );
            self.mark_dirty(i);
        }
    }

    fn untaint_set(&mut self, i: usize) {
        if ann(&self.sets[i].metadata, annotation::PREFER_NO_SCHEDULE).is_none() {
            return;
        }
        let nodes = self.nodes_of(&[i], false);
        if !nodes.is_empty() {
            self.actions
                .push(DeploymentAction::UntaintNodesPreferNoSchedule(nodes));
        }
        if let Some(a) = self.sets[i].metadata.annotations.as_mut() {
            a.remove(annotation::PREFER_NO_SCHEDULE);
        }
        self.mark_dirty(i);
    }

    /// `reconcileNewMachineSet` (§5.5 step 4).
    fn reconcile_new(&mut self) -> bool {
        let Some(n) = self.new else {
            return false;
        };
        let want = replicas(&self.md);
        let current = spec_replicas(&self.sets[n]);
        if current == want {
            return false;
        }
        if current > want {
            return self.scale(n, want);
        }
        let target =
            new_machine_set_replicas(&self.md, self.existing_total(), current, self.max_surge);
        self.scale(n, target)
    }

    /// `reconcileOldMachineSets` (§5.5 step 5).
    fn reconcile_old(&mut self) -> bool {
        let mut olds: Vec<usize> = self
            .olds()
            .into_iter()
            .filter(|&i| spec_replicas(&self.sets[i]) > 0)
            .collect();
        if olds.is_empty() {
            return false;
        }
        olds.sort_by(|&a, &b| revision::creation_order(&self.sets[a], &self.sets[b]));
        let min_available = replicas(&self.md) - self.max_unavailable;
        let new_unavailable = self.new.map_or(0, |n| {
            spec_replicas(&self.sets[n]) - status_of(&self.sets[n]).available_replicas.unwrap_or(0)
        });
        let max_scaled_down = self.all_spec_total() - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return false;
        }
        // cleanupUnhealthyReplicas: drop unavailable old replicas first.
        let mut cleaned = 0;
        for &i in &olds {
            if cleaned >= max_scaled_down {
                break;
            }
            let spec = spec_replicas(&self.sets[i]);
            let available = status_of(&self.sets[i]).available_replicas.unwrap_or(0);
            if spec == 0 || spec <= available {
                continue;
            }
            let down = (max_scaled_down - cleaned).min(spec - available);
            self.scale(i, spec - down);
            cleaned += down;
        }
        // scaleDownOldMachineSetsForRollingUpdate. Deviation: a set counts at most its spec
        // replicas as available. Right after a scale-down its status still reports the machines
        // being removed; counting them would let a second pass scale down below the minimum.
        let available: i32 = self
            .sets
            .iter()
            .map(|s| {
                status_of(s)
                    .available_replicas
                    .unwrap_or(0)
                    .min(spec_replicas(s).max(0))
            })
            .sum();
        let mut scaled = 0;
        if available > min_available {
            let budget = available - min_available;
            for &i in &olds {
                if scaled >= budget {
                    break;
                }
                let spec = spec_replicas(&self.sets[i]);
                if spec == 0 {
                    continue;
                }
                let down = spec.min(budget - scaled);
                self.scale(i, spec - down);
                scaled += down;
            }
        }
        cleaned + scaled > 0
    }

    fn previous_status_complete(&self) -> bool {
        status::deployment_complete(&self.md, &self.original_status)
    }

    fn on_complete(&mut self) {
        if self.input.config.autoscaler_annotations_during_rollout {
            let all: Vec<usize> = (0..self.sets.len()).collect();
            let nodes = self.nodes_of(&all, true);
            if !nodes.is_empty() {
                self.actions
                    .push(DeploymentAction::EnableAutoscalerScaleDown(nodes));
            }
        }
        if let Some(n) = self.new {
            self.untaint_set(n);
        }
        self.cleanup();
    }

    /// `cleanupMachineDeployment` (§5.12).
    fn cleanup(&mut self) {
        let Some(limit) = self.md.spec.revision_history_limit else {
            return;
        };
        let mut olds: Vec<usize> = self
            .olds()
            .into_iter()
            .filter(|&i| self.sets[i].metadata.deletion_timestamp.is_none())
            .collect();
        let diff = i64::try_from(olds.len()).unwrap_or(i64::MAX) - i64::from(limit);
        if diff <= 0 {
            return;
        }
        olds.sort_by(|&a, &b| revision::creation_order(&self.sets[a], &self.sets[b]));
        for &i in olds.iter().take(usize::try_from(diff).unwrap_or(0)) {
            let s = &self.sets[i];
            let st = status_of(s);
            if st.replicas.unwrap_or(0) != 0
                || spec_replicas(s) != 0
                || s.metadata.generation > st.observed_generation
            {
                continue;
            }
            self.actions
                .push(DeploymentAction::DeleteMachineSet(MachineRef {
                    name: self.set_name(i),
                    uid: s.metadata.uid.clone().unwrap_or_default(),
                }));
        }
    }

    /// `syncRolloutStatus`.
    fn rollout_status(&mut self) {
        let new = self.new.map(|n| self.sets[n].clone());
        let all = self.all_refs();
        let rs = status::rollout_status(
            &self.md,
            &all,
            new.as_ref(),
            self.max_unavailable,
            self.now(),
        );
        if status::status_update_required(&self.original_status, &rs.status) {
            self.actions
                .push(DeploymentAction::UpdateDeploymentStatus(Box::new(
                    rs.status,
                )));
        } else if let Some(after) = rs.check_deadline_after {
            self.requeue_after = self.requeue_after.min(Retry::After(go_duration(after)));
        }
    }

    /// `syncMachineDeploymentStatus` (scaling path): plain status, written when different.
    fn sync_status(&mut self) {
        let new = self.new.map(|n| self.sets[n].clone());
        let all = self.all_refs();
        let st = status::calculate_status(
            &self.md,
            &all,
            new.as_ref(),
            self.max_unavailable,
            self.now(),
        );
        if !crate::machine_set::semantic::equal(
            &Some(st.clone()),
            &Some(self.original_status.clone()),
        ) {
            self.actions
                .push(DeploymentAction::UpdateDeploymentStatus(Box::new(st)));
        }
    }

    /// `sync` (§5.4): scale, cleanup when paused, status.
    fn sync(&mut self) {
        self.sync_revision(false);
        self.scale_deployment();
        if self.md.spec.paused.unwrap_or(false) && self.md.spec.rollback_to.is_none() {
            self.cleanup();
        }
        self.sync_status();
    }

    fn rolling(&mut self) {
        self.sync_revision(true);
        self.taint_old_sets();
        self.autoscaler_annotations_for_rollout();
        if self.reconcile_new() || self.reconcile_old() {
            self.rollout_status();
            return;
        }
        if self.previous_status_complete() {
            self.on_complete();
        }
        self.rollout_status();
    }

    fn recreate(&mut self) {
        self.sync_revision(false);
        self.autoscaler_annotations_for_rollout();
        let mut scaled = false;
        for i in self.olds() {
            if spec_replicas(&self.sets[i]) > 0 {
                scaled |= self.scale(i, 0);
            }
        }
        if scaled {
            self.rollout_status();
            return;
        }
        let old_status_replicas: i32 = self
            .olds()
            .iter()
            .map(|&i| status_of(&self.sets[i]).replicas.unwrap_or(0))
            .sum();
        let new_uid = self.new.and_then(|n| self.sets[n].metadata.uid.clone());
        let foreign_machines = self
            .machines_by_set
            .iter()
            .any(|(uid, ms)| Some(uid) != new_uid.as_ref() && !ms.is_empty());
        if old_status_replicas > 0 || foreign_machines {
            self.rollout_status();
            return;
        }
        if self.new.is_none() {
            self.sync_revision(true);
        }
        if let Some(n) = self.new {
            self.scale(n, replicas(&self.md));
        }
        if self.previous_status_complete() {
            self.on_complete();
        }
        self.rollout_status();
    }

    /// `rollback` (§5.7).
    fn rollback(&mut self) {
        self.sync_revision(true);
        let requested = self
            .md
            .spec
            .rollback_to
            .as_ref()
            .and_then(|r| r.revision)
            .unwrap_or(0);
        let md_name = md_name(&self.md);
        let to_revision = if requested == 0 {
            revision::last_revision(&self.sets)
        } else {
            requested
        };
        self.md.spec.rollback_to = None;
        self.mark_md_dirty();
        if to_revision == 0 {
            self.event(Event::warning(
                "DeploymentRollbackRevisionNotFound",
                "Unable to find last revision.".into(),
            ));
            return;
        }
        let found = (0..self.sets.len())
            .find(|&i| revision::revision(&self.sets[i].metadata) == Some(to_revision));
        let Some(i) = found else {
            self.event(Event::warning(
                "DeploymentRollbackRevisionNotFound",
                "Unable to find the revision to rollback to.".into(),
            ));
            return;
        };
        self.untaint_set(i);
        let template = self.sets[i].spec.template.clone().unwrap_or_default();
        if revision::equal_ignore_hash(&template, &self.md.spec.template) {
            self.event(Event::warning(
                "DeploymentRollbackTemplateUnchanged",
                format!(
                    "The rollback revision contains the same template as current deployment {md_name:?}"
                ),
            ));
            return;
        }
        let mut template = template;
        if let Some(l) = template.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
            l.remove(label::MACHINE_TEMPLATE_HASH);
        }
        self.md.spec.template = template;
        let mut a: BTreeMap<String, String> = self
            .md
            .metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| annotation::NOT_COPIED_TO_MACHINE_SET.contains(&k.as_str()))
            .collect();
        for (k, v) in self.sets[i].metadata.annotations.iter().flatten() {
            if !annotation::NOT_COPIED_TO_MACHINE_SET.contains(&k.as_str()) {
                a.insert(k.clone(), v.clone());
            }
        }
        self.md.metadata.annotations = Some(a);
        self.event(Event::normal(
            "DeploymentRollback",
            format!("Rolled back deployment {md_name:?} to revision {to_revision}"),
        ));
    }

    /// Replaces placeholder write actions by the final objects and drops the update of a set
    /// that is created in this pass (its creation carries the final object).
    fn finish(mut self) -> DeploymentPlan {
        let sets = &self.sets;
        let by_name: BTreeMap<String, &MachineSet> = sets
            .iter()
            .filter_map(|s| Some((s.metadata.name.clone()?, s)))
            .collect();
        let md = self.md.clone();
        // Conditions changed on the way (paused/resumed, new MachineSet found or created) must be
        // written even on paths that compute no status.
        let wrote_status = self
            .actions
            .iter()
            .any(|a| matches!(a, DeploymentAction::UpdateDeploymentStatus(_)));
        let working_status = md.status.clone().unwrap_or_default();
        if !wrote_status && working_status != self.original_status {
            self.actions
                .push(DeploymentAction::UpdateDeploymentStatus(Box::new(
                    working_status,
                )));
        }
        for a in &mut self.actions {
            match a {
                DeploymentAction::UpdateMachineSet(ms) | DeploymentAction::CreateMachineSet(ms) => {
                    if let Some(latest) = ms.metadata.name.as_ref().and_then(|n| by_name.get(n)) {
                        **ms = (*latest).clone();
                    }
                }
                DeploymentAction::UpdateDeployment(d) => **d = md.clone(),
                _ => {}
            }
        }
        DeploymentPlan {
            actions: self.actions,
            requeue_after: self.requeue_after,
        }
    }
}

/// One reconcile pass of a MachineDeployment (§5.2).
///
/// # Errors
/// An invalid deployment (logged by the shell, not requeued), or the in-place strategy outside
/// scaling events (not implemented).
pub fn plan(input: DeploymentInput<'_>) -> Result<DeploymentPlan, DeploymentError> {
    let md = input.deployment;
    validate(md)?;
    let name = md_name(md);
    let deleting = md.metadata.deletion_timestamp.is_some();
    let has_finalizer = md
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == finalizer::MACHINE_CONTROLLER_MANAGER);
    let mut actions = Vec::new();
    let requeue_after = Retry::After(RESYNC);
    if !deleting && !has_finalizer {
        actions.push(DeploymentAction::AddFinalizer);
    }
    let sel = md.spec.selector.as_ref();
    if sel.is_some_and(selector::is_empty) {
        actions.push(DeploymentAction::Event(Event::warning(
            "SelectingAll",
            "This deployment is selecting all machines. A non-empty selector is required.".into(),
        )));
        let st = md.status.clone().unwrap_or_default();
        if st.observed_generation < md.metadata.generation {
            let mut st = st;
            st.observed_generation = md.metadata.generation;
            actions.push(DeploymentAction::UpdateDeploymentStatus(Box::new(st)));
        }
        return Ok(DeploymentPlan {
            actions,
            requeue_after,
        });
    }
    let max_surge = fencepost::max_surge(md).map_err(|source| DeploymentError::Fencepost {
        name: name.clone(),
        source,
    })?;
    let max_unavailable =
        fencepost::max_unavailable(md).map_err(|source| DeploymentError::Fencepost {
            name: name.clone(),
            source,
        })?;

    // Claim MachineSets.
    let uid = md.metadata.uid.clone().unwrap_or_default();
    let owner = Owner {
        uid: &uid,
        deleting,
        selector: sel,
    };
    let mut sets = Vec::new();
    for ms in input
        .machine_sets
        .iter()
        .filter(|s| s.metadata.namespace == md.metadata.namespace)
    {
        let decision =
            claim::claim(owner, &ms.metadata).map_err(|source| DeploymentError::Selector {
                name: name.clone(),
                source,
            })?;
        let r = MachineRef {
            name: ms.metadata.name.clone().unwrap_or_default(),
            uid: ms.metadata.uid.clone().unwrap_or_default(),
        };
        match decision {
            ClaimDecision::Owned => sets.push(ms.clone()),
            ClaimDecision::Adopt => {
                let owner_ref = claim::owner_reference(KIND, &name, &uid);
                let mut adopted = ms.clone();
                adopted
                    .metadata
                    .owner_references
                    .get_or_insert_with(Vec::new)
                    .push(owner_ref.clone());
                actions.push(DeploymentAction::AdoptMachineSet {
                    machine_set: r,
                    owner: owner_ref,
                });
                sets.push(adopted);
            }
            ClaimDecision::Release => {
                actions.push(DeploymentAction::ReleaseMachineSet { machine_set: r });
            }
            ClaimDecision::Ignore => {}
        }
    }
    sets.sort_by(revision::creation_order);
    let set_uids: BTreeSet<String> = sets.iter().filter_map(|s| s.metadata.uid.clone()).collect();
    let mut machines_by_set: BTreeMap<String, Vec<&Machine>> =
        set_uids.iter().map(|u| (u.clone(), Vec::new())).collect();
    for m in input
        .machines
        .iter()
        .filter(|m| m.metadata.namespace == md.metadata.namespace)
    {
        let selected = selector::matches(sel, m.metadata.labels.as_ref()).unwrap_or(false);
        if let Some(owner_uid) = claim::controller_ref(&m.metadata).map(|r| &r.uid)
            && selected
            && let Some(list) = machines_by_set.get_mut(owner_uid)
        {
            list.push(m);
        }
    }
    let new = revision::find_new_machine_set(md, &sets);
    let mut w = Work {
        input,
        md: md.clone(),
        md_changed: false,
        original_status: md.status.clone().unwrap_or_default(),
        sets,
        created: None,
        new,
        max_surge,
        max_unavailable,
        actions,
        dirty: BTreeSet::new(),
        machines_by_set,
        requeue_after,
    };

    if deleting {
        if !has_finalizer {
            return Ok(w.finish());
        }
        if w.sets.is_empty() {
            w.actions.push(DeploymentAction::RemoveFinalizer);
            return Ok(w.finish());
        }
        for i in 0..w.sets.len() {
            if w.sets[i].metadata.deletion_timestamp.is_none() {
                let r = MachineRef {
                    name: w.set_name(i),
                    uid: w.sets[i].metadata.uid.clone().unwrap_or_default(),
                };
                w.actions.push(DeploymentAction::DeleteMachineSet(r));
            }
        }
        w.sync_status();
        return Ok(w.finish());
    }

    if let Some(conditions) = status::paused_conditions(&w.md, w.now()) {
        w.md.status.get_or_insert_with(Default::default).conditions = Some(conditions);
    }

    // Cluster-autoscaler deletion requests (§5.10).
    if let Some(a) = autoscaler::stamp_trigger_entries(&w.md, w.now()) {
        w.set_md_annotations(a);
    }
    let outcome = autoscaler::apply_trigger_entries(&w.md, input.machines);
    if let Some(a) = outcome.deployment_annotations {
        w.set_md_annotations(a);
    }
    for (machine, annotations) in outcome.machine_annotations {
        let uid = input
            .machines
            .iter()
            .find(|m| m.metadata.name.as_deref() == Some(&machine))
            .and_then(|m| m.metadata.uid.clone())
            .unwrap_or_default();
        w.actions.push(DeploymentAction::AnnotateMachine {
            machine: MachineRef { name: machine, uid },
            annotations,
        });
    }

    if w.md.spec.paused.unwrap_or(false) {
        w.sync();
        return Ok(w.finish());
    }
    if w.md.spec.rollback_to.is_some() {
        w.rollback();
        return Ok(w.finish());
    }
    if is_scaling_event(&w.md, &w.sets) {
        w.sync();
        return Ok(w.finish());
    }
    match w.md.spec.strategy.as_ref().and_then(|s| s.type_.clone()) {
        Some(Strategy::RollingUpdate) => w.rolling(),
        Some(Strategy::Recreate) => w.recreate(),
        _ if !input.config.target_cluster => {
            return Err(DeploymentError::InPlaceWithoutTarget { name });
        }
        _ => w.in_place(),
    }
    Ok(w.finish())
}

#[path = "plan_in_place.rs"]
mod in_place;

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "upstream_tables.rs"]
mod upstream_tables;
