//! Pure decision logic of the MachineSet controller (reference §4.3–§4.9).
//!
//! [`plan`] takes an observed snapshot (the MachineSet as read live, every machine of the
//! namespace from the cache, the preserve annotations of nodes, the expectations readiness and
//! `now`) and returns the actions of one reconcile pass in execution order. The shell executes
//! them, records expectations for creations and deletions, then computes the status with
//! [`machine_set_status`] from the plan's working copy of the claimed machines and the outcome of
//! the replica actions, and writes it when [`status_needs_update`] says so.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use mcm_api::duration::Duration;
use mcm_api::keys::{annotation, finalizer, label, last_operation, preserve, retry, value};
use mcm_api::v1alpha1::{
    ConditionStatus, CurrentStatus, LastOperation, Machine, MachineConfiguration,
    MachineOperationType, MachinePhase, MachineSet, MachineSetCondition, MachineSetConditionType,
    MachineSetStatus, MachineState, MachineStatus, MachineSummary, NodeTemplateSpec,
};

use super::claim::{self, ClaimDecision, Owner};
use super::expectations::Readiness;
use super::semantic;
use crate::selector::SelectorError;
use crate::vocabulary::{Retry, go_duration};

/// Kind of the MachineSet owner reference.
pub const KIND: &str = "MachineSet";
/// At most this many machines are created or deleted per pass (upstream `BurstReplicas`).
pub const BURST_REPLICAS: usize = 100;
/// First slow-start batch size (upstream `SlowStartInitialBatchSize`).
pub const SLOW_START_INITIAL_BATCH: usize = 1;
/// Periodic requeue after a successful pass (reference §16).
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

/// Type of a Kubernetes Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

/// An Event to record on the reconciled object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Normal or Warning.
    pub type_: EventType,
    /// CamelCase reason.
    pub reason: String,
    /// Human readable message.
    pub message: String,
}

impl Event {
    /// A `Normal` event.
    #[must_use]
    pub fn normal(reason: &str, message: String) -> Self {
        Self {
            type_: EventType::Normal,
            reason: reason.to_owned(),
            message,
        }
    }
    /// A `Warning` event.
    #[must_use]
    pub fn warning(reason: &str, message: String) -> Self {
        Self {
            type_: EventType::Warning,
            reason: reason.to_owned(),
            message,
        }
    }
}

/// Events the shell records on the MachineSet for the outcome of each create/delete (§4.4, §4.9).
pub mod events {
    use super::Event;

    /// Machines named in one event at most; the rest are counted.
    const NAMED: usize = 5;

    /// `names` joined, the ones past [`NAMED`] counted: "a, b, c, d, e (+12 more)".
    fn list(names: &[String]) -> String {
        let mut text = names
            .iter()
            .take(NAMED)
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ");
        if names.len() > NAMED {
            text.push_str(&format!(" (+{} more)", names.len() - NAMED));
        }
        text
    }

    /// Machines were created in one pass: one event for all of them, worded as upstream's
    /// per-machine event when there is one (a scale-up of 1,000 writes a few events, not 1,000).
    #[must_use]
    pub fn created(machines: &[String]) -> Event {
        match machines {
            [one] => Event::normal("SuccessfulCreate", format!("Created Machine: {one}")),
            _ => Event::normal(
                "SuccessfulCreate",
                format!("Created {} machines: {}", machines.len(), list(machines)),
            ),
        }
    }
    /// A creation failed.
    #[must_use]
    pub fn create_failed(error: &str) -> Event {
        Event::warning("FailedCreate", format!("Error creating: {error}"))
    }
    /// Machines were deleted in one pass: one event for all of them, worded as upstream's
    /// per-machine event when there is one.
    #[must_use]
    pub fn deleted(machines: &[String]) -> Event {
        match machines {
            [one] => Event::normal("SuccessfulDelete", format!("Deleted machine: {one}")),
            _ => Event::normal(
                "SuccessfulDelete",
                format!("Deleted {} machines: {}", machines.len(), list(machines)),
            ),
        }
    }
    /// A deletion failed.
    #[must_use]
    pub fn delete_failed(error: &str) -> Event {
        Event::warning("FailedDelete", format!("Error deleting: {error}"))
    }
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
    fn of(m: &Machine) -> Self {
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
    /// New `spec.nodeTemplate` (propagated from the template, §4.3 step 6).
    pub node_template: Option<Option<NodeTemplateSpec>>,
    /// New inlined machine configuration (§4.3 step 7).
    pub configuration: Option<MachineConfiguration>,
    /// New `spec.class.kind` (§4.3 step 8).
    pub class_kind: Option<String>,
    /// Annotations to set.
    pub set_annotations: BTreeMap<String, String>,
    /// Annotations to remove.
    pub remove_annotations: BTreeSet<String>,
}

/// One step of a MachineSet reconcile, executed in order by the shell.
#[derive(Debug, Clone, PartialEq)]
pub enum MachineSetAction {
    /// Add finalizer [`finalizer::MACHINE_CONTROLLER_MANAGER`] to the MachineSet.
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
    /// [`terminating_status`]; events [`events::deleted`] / [`events::delete_failed`].
    DeleteMachines {
        /// The machines, in deletion order.
        machines: Vec<MachineRef>,
    },
}

/// Snapshot given to [`plan`].
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

/// Result of [`plan`].
#[derive(Debug, Clone, PartialEq)]
pub struct MachineSetPlan {
    /// Actions in execution order.
    pub actions: Vec<MachineSetAction>,
    /// The claimed machines as they will be after the in-place updates (input of the status).
    pub claimed: Vec<Arc<Machine>>,
    /// When to reconcile again at the latest.
    pub requeue_after: Retry,
}

fn name_of(ms: &MachineSet) -> String {
    ms.metadata.name.clone().unwrap_or_default()
}

fn labels(meta: &ObjectMeta) -> Option<&BTreeMap<String, String>> {
    meta.labels.as_ref()
}

fn annotation_of<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

fn label_of<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

fn phase(m: &Machine) -> Option<&MachinePhase> {
    m.phase()
}

fn preserve_expiry(m: &Machine) -> Option<Timestamp> {
    m.status
        .as_ref()?
        .current_status
        .as_ref()?
        .preserve_expiry_time
        .as_ref()
        .map(|t| t.0)
}

/// Upstream validation of a MachineSet (reference §11), plus a nil-selector check where Go
/// panics.
///
/// # Errors
/// The first violated rule.
pub fn validate(ms: &MachineSet) -> Result<(), MachineSetError> {
    let name = name_of(ms);
    if ms.spec.replicas.unwrap_or(0) < 0 {
        return Err(MachineSetError::NegativeReplicas { name });
    }
    let Some(selector) = ms.spec.selector.as_ref() else {
        return Err(MachineSetError::MissingSelector { name });
    };
    crate::selector::validate(selector).map_err(|source| MachineSetError::Selector {
        name: name.clone(),
        source,
    })?;
    let template_labels = ms
        .spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.as_ref());
    for (k, v) in selector.match_labels.iter().flatten() {
        if template_labels.and_then(|l| l.get(k)) != Some(v) {
            return Err(MachineSetError::SelectorTemplateMismatch { name });
        }
    }
    let class = ms
        .spec
        .template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .and_then(|s| s.class.as_ref());
    if class
        .and_then(|c| c.kind.as_deref())
        .unwrap_or("")
        .is_empty()
    {
        return Err(MachineSetError::MissingClass {
            name,
            field: "kind",
            what: "Kind",
        });
    }
    if class
        .and_then(|c| c.name.as_deref())
        .unwrap_or("")
        .is_empty()
    {
        return Err(MachineSetError::MissingClass {
            name,
            field: "name",
            what: "Name",
        });
    }
    Ok(())
}

/// Slow-start batch sizes for `count` creations: 1, 2, 4, … capped to what remains (§4.4).
#[must_use]
pub fn slow_start_batches(count: usize, initial: usize) -> Vec<usize> {
    let mut batches = Vec::new();
    let mut remaining = count;
    let mut size = initial.max(1);
    while remaining > 0 {
        let batch = size.min(remaining);
        batches.push(batch);
        remaining -= batch;
        size = size.saturating_mul(2);
    }
    batches
}

/// Whether the machine is preserved at `now` (`preserveExpiryTime` in the future).
#[must_use]
pub fn is_preserved(m: &Machine, now: Timestamp) -> bool {
    preserve_expiry(m).is_some_and(|t| t > now)
}

/// Rank of a phase in the deletion order (§4.5 step 5; unknown phases rank like Terminating,
/// quirk Q8).
#[must_use]
pub fn phase_rank(phase: Option<&MachinePhase>) -> u8 {
    match phase {
        Some(MachinePhase::Failed) => 1,
        Some(MachinePhase::CrashLoopBackOff) => 2,
        Some(MachinePhase::Unknown) => 3,
        Some(MachinePhase::Pending) => 4,
        Some(MachinePhase::Available) => 5,
        Some(MachinePhase::Running) => 6,
        _ => 0,
    }
}

fn priority(m: &Machine) -> i64 {
    annotation_of(&m.metadata, annotation::MACHINE_PRIORITY)
        .and_then(|p| p.parse().ok())
        .unwrap_or(3)
}

fn marked_time(m: &Machine) -> Option<Timestamp> {
    annotation_of(&m.metadata, annotation::MARKED_FOR_DELETION_TIME)?
        .parse()
        .ok()
}

/// Deletion order of §4.5: `Less` means `a` is deleted before `b`.
#[must_use]
pub fn deletion_order(a: &Machine, b: &Machine, now: Timestamp) -> Ordering {
    let (pa, pb) = (is_preserved(a, now), is_preserved(b, now));
    if pa != pb {
        return pa.cmp(&pb);
    }
    if pa {
        let auto = |m: &Machine| {
            annotation_of(&m.metadata, annotation::PRESERVE) == Some(preserve::AUTO_PRESERVED)
        };
        // auto-preserved first.
        let by_auto = auto(b).cmp(&auto(a));
        if by_auto != Ordering::Equal {
            return by_auto;
        }
        let by_expiry = preserve_expiry(a).cmp(&preserve_expiry(b));
        if by_expiry != Ordering::Equal {
            return by_expiry;
        }
    }
    let by_priority = priority(a).cmp(&priority(b));
    if by_priority != Ordering::Equal {
        return by_priority;
    }
    match (marked_time(a), marked_time(b)) {
        (Some(_), None) => return Ordering::Less,
        (None, Some(_)) => return Ordering::Greater,
        (Some(x), Some(y)) if x != y => return x.cmp(&y),
        _ => {}
    }
    let by_phase = phase_rank(phase(a)).cmp(&phase_rank(phase(b)));
    if by_phase != Ordering::Equal {
        return by_phase;
    }
    let created = |m: &Machine| m.metadata.creation_timestamp.as_ref().map(|t| t.0);
    created(a).cmp(&created(b))
}

/// Whether a Failed machine may be deleted and replaced (§4.6 `shouldFailedMachineBeTerminated`).
///
/// A machine with a node label whose node is not in `node_preserve` counts as a node lookup
/// error, which upstream answers with "terminate".
#[must_use]
pub fn should_failed_machine_be_terminated(
    m: &Machine,
    node_preserve: &BTreeMap<String, Option<String>>,
    now: Timestamp,
) -> bool {
    if let Some(expiry) = preserve_expiry(m) {
        return expiry <= now;
    }
    let machine_value = annotation_of(&m.metadata, annotation::PRESERVE).unwrap_or("");
    let last_applied =
        annotation_of(&m.metadata, annotation::LAST_APPLIED_NODE_PRESERVE_VALUE).unwrap_or("");
    let effective = match m.node_name().filter(|n| !n.is_empty()) {
        None => machine_value,
        Some(node) => match node_preserve.get(node) {
            None => return true,
            Some(node_value) => {
                let node_value = node_value.as_deref().unwrap_or("");
                if node_value.is_empty() && last_applied.is_empty() {
                    machine_value
                } else {
                    node_value
                }
            }
        },
    };
    !matches!(
        effective,
        preserve::WHEN_FAILED | preserve::NOW | preserve::AUTO_PRESERVED
    )
}

/// The machine object to create for `ms` (§4.9). Name comes from `generateName` `<ms>-`.
///
/// # Errors
/// [`MachineSetError::NoTemplateLabels`] when the template has no labels.
pub fn machine_from_template(ms: &MachineSet) -> Result<Machine, MachineSetError> {
    let name = name_of(ms);
    let template = ms.spec.template.clone().unwrap_or_default();
    let tmeta = template.metadata.unwrap_or_default();
    let labels = tmeta.labels.clone().filter(|l| !l.is_empty());
    let Some(labels) = labels else {
        return Err(MachineSetError::NoTemplateLabels { name });
    };
    let mut annotations = tmeta.annotations.clone().unwrap_or_default();
    let timeout = annotation_of(&ms.metadata, annotation::EFFECTIVE_CREATION_TIMEOUT);
    if let Some(t) = timeout {
        annotations.insert(
            annotation::EFFECTIVE_CREATION_TIMEOUT.to_owned(),
            t.to_owned(),
        );
    }
    let mut spec = template.spec.unwrap_or_default();
    if let Some(parsed) = timeout.and_then(|t| t.parse::<Duration>().ok()) {
        spec.configuration.creation_timeout = Some(parsed);
    }
    let uid = ms.metadata.uid.clone().unwrap_or_default();
    Ok(Machine {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-")),
            namespace: ms.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            finalizers: tmeta.finalizers.clone(),
            owner_references: Some(vec![claim::owner_reference(KIND, &name, &uid)]),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    })
}

/// The status the shell writes on a machine it deletes (§4.4 `terminateMachines`), or `None` when
/// the current status already says so (descriptions and timestamps younger than 30 minutes are
/// ignored in that comparison, as upstream).
#[must_use]
pub fn terminating_status(m: &Machine, now: Timestamp) -> Option<MachineStatus> {
    let status = m.status.clone().unwrap_or_default();
    let fresh = |t: Option<&Time>| {
        t.is_some_and(|t| now.duration_since(t.0) < SignedDuration::from_mins(30))
    };
    let cs = status.current_status.as_ref();
    let lo = status.last_operation.as_ref();
    let already = cs.is_some_and(|c| {
        c.phase == Some(MachinePhase::Terminating)
            && !c.timeout_active.unwrap_or(false)
            && fresh(c.last_update_time.as_ref())
    }) && lo.is_some_and(|l| {
        l.state == Some(MachineState::Processing)
            && l.type_ == Some(MachineOperationType::Delete)
            && fresh(l.last_update_time.as_ref())
    });
    if already {
        return None;
    }
    Some(MachineStatus {
        last_operation: Some(LastOperation {
            description: Some(last_operation::DELETING_MACHINE_FROM_CLOUD_PROVIDER.to_owned()),
            error_code: None,
            last_update_time: Some(Time(now)),
            state: Some(MachineState::Processing),
            type_: Some(MachineOperationType::Delete),
        }),
        current_status: Some(CurrentStatus {
            phase: Some(MachinePhase::Terminating),
            timeout_active: Some(false),
            last_update_time: Some(Time(now)),
            // A terminating machine is no longer preserved (reference Q18).
            preserve_expiry_time: None,
        }),
        ..status
    })
}

fn has_finalizer(meta: &ObjectMeta) -> bool {
    meta.finalizers
        .iter()
        .flatten()
        .any(|f| f == finalizer::MACHINE_CONTROLLER_MANAGER)
}

fn is_active(m: &Machine) -> bool {
    !matches!(
        phase(m),
        Some(MachinePhase::Failed | MachinePhase::Terminating)
    )
}

/// Applies `u` to `m` (the shell re-applies it to a freshly read machine after a conflict).
pub fn apply_update(m: &mut Machine, u: &MachineUpdate) {
    if let Some(nt) = &u.node_template {
        m.spec.node_template.clone_from(nt);
    }
    if let Some(c) = &u.configuration {
        m.spec.configuration = c.clone();
    }
    if let Some(kind) = &u.class_kind {
        m.spec.class.get_or_insert_with(Default::default).kind = Some(kind.clone());
    }
    if !u.set_annotations.is_empty() || !u.remove_annotations.is_empty() {
        let a = m.metadata.annotations.get_or_insert_with(BTreeMap::new);
        for k in &u.remove_annotations {
            a.remove(k);
        }
        a.extend(u.set_annotations.clone());
    }
}

/// Propagation of node template, machine configuration and class kind (§4.3 steps 6–8).
fn sync_update(ms: &MachineSet, m: &Machine) -> MachineUpdate {
    let tspec = ms.spec.template.as_ref().and_then(|t| t.spec.as_ref());
    let mut u = MachineUpdate::default();
    if is_active(m) {
        let want_nt = tspec.and_then(|s| s.node_template.clone());
        if !semantic::equal(&m.spec.node_template, &want_nt) {
            u.node_template = Some(want_nt);
        }
        let want_cfg = tspec.map(|s| s.configuration.clone()).unwrap_or_default();
        if !semantic::equal(&m.spec.configuration, &want_cfg) {
            u.configuration = Some(want_cfg);
        }
    }
    let want_kind = tspec
        .and_then(|s| s.class.as_ref())
        .and_then(|c| c.kind.clone())
        .unwrap_or_default();
    let have_kind = m
        .spec
        .class
        .as_ref()
        .and_then(|c| c.kind.clone())
        .unwrap_or_default();
    if want_kind != have_kind {
        u.class_kind = Some(want_kind);
    }
    u
}

/// Auto-preservation of failed machines (§4.6): annotation changes per machine index.
fn auto_preservation(ms: &MachineSet, machines: &[Arc<Machine>]) -> Vec<(usize, MachineUpdate)> {
    let max = i64::from(ms.spec.auto_preserve_failed_machine_max.unwrap_or(0));
    let count = i64::from(
        ms.status
            .as_ref()
            .and_then(|s| s.auto_preserve_failed_machine_count)
            .unwrap_or(0),
    );
    let remaining = max - count;
    let created = |m: &Machine| m.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let mut out = Vec::new();
    match remaining.cmp(&0) {
        Ordering::Equal => {}
        Ordering::Less => {
            let mut auto: Vec<usize> = (0..machines.len())
                .filter(|&i| {
                    annotation_of(&machines[i].metadata, annotation::PRESERVE)
                        == Some(preserve::AUTO_PRESERVED)
                })
                .collect();
            auto.sort_by_key(|&i| created(&machines[i]));
            let n = usize::try_from(-remaining).unwrap_or(usize::MAX);
            for i in auto.into_iter().take(n) {
                let mut u = MachineUpdate::default();
                u.remove_annotations.insert(annotation::PRESERVE.to_owned());
                out.push((i, u));
            }
        }
        Ordering::Greater => {
            let mut failed: Vec<usize> = (0..machines.len())
                .filter(|&i| {
                    let m = &machines[i];
                    phase(m) == Some(&MachinePhase::Failed)
                        && annotation_of(&m.metadata, annotation::PRESERVE)
                            .is_none_or(|v| !preserve::ALLOWED.contains(&v))
                })
                .collect();
            // Newest first.
            failed.sort_by_key(|&i| std::cmp::Reverse(created(&machines[i])));
            let n = usize::try_from(remaining).unwrap_or(usize::MAX);
            for i in failed.into_iter().take(n) {
                let mut u = MachineUpdate::default();
                u.set_annotations.insert(
                    annotation::PRESERVE.to_owned(),
                    preserve::AUTO_PRESERVED.to_owned(),
                );
                out.push((i, u));
            }
        }
    }
    out
}

/// The machines to delete in a non-scale-up pass (§4.4 "Otherwise"), in deletion order.
#[must_use]
pub fn machines_to_delete(
    ms: &MachineSet,
    claimed: &[Arc<Machine>],
    node_preserve: &BTreeMap<String, Option<String>>,
    now: Timestamp,
) -> Vec<MachineRef> {
    let replicas = usize::try_from(ms.spec.replicas.unwrap_or(0)).unwrap_or(0);
    let mut candidates: Vec<&Machine> = claimed
        .iter()
        .map(|m| &**m)
        .filter(|m| phase(m) != Some(&MachinePhase::Terminating))
        .filter(|m| label_of(&m.metadata, label::UPDATE_RESULT) != Some(value::UPDATE_SUCCESSFUL))
        .collect();
    let mut stale: Vec<&Machine> = Vec::new();
    if candidates.len() > replicas {
        let diff = (candidates.len() - replicas).min(BURST_REPLICAS);
        candidates.sort_by(|a, b| deletion_order(a, b, now));
        stale.extend(candidates.iter().take(diff));
    }
    let scaler_time = annotation_of(
        &ms.metadata,
        annotation::LAST_DEPLOYMENT_REPLICA_CHANGE_BY_SCALER_TIME,
    )
    .and_then(|t| t.parse::<Timestamp>().ok());
    if let Some(limit) = scaler_time {
        stale.extend(candidates.iter().filter(|m| {
            annotation_of(&m.metadata, annotation::MACHINE_PRIORITY)
                == Some(value::MACHINE_PRIORITY_TRIGGERED_FOR_DELETION)
                && marked_time(m).is_some_and(|t| t <= limit)
        }));
    }
    stale.extend(candidates.iter().filter(|m| {
        phase(m) == Some(&MachinePhase::Failed)
            && should_failed_machine_be_terminated(m, node_preserve, now)
    }));
    let mut seen = BTreeSet::new();
    stale
        .into_iter()
        .filter(|m| seen.insert(m.metadata.name.clone()))
        .take(BURST_REPLICAS)
        .map(MachineRef::of)
        .collect()
}

/// One reconcile pass of a MachineSet (§4.3).
///
/// # Errors
/// An invalid MachineSet (the shell logs it and does not requeue).
pub fn plan(input: MachineSetInput<'_>) -> Result<MachineSetPlan, MachineSetError> {
    let ms = input.machine_set;
    validate(ms)?;
    let name = name_of(ms);
    let deleting = ms.metadata.deletion_timestamp.is_some();
    let mut actions = Vec::new();
    if !deleting && !has_finalizer(&ms.metadata) {
        actions.push(MachineSetAction::AddFinalizer);
    }
    let uid = ms.metadata.uid.clone().unwrap_or_default();
    let owner = Owner {
        uid: &uid,
        deleting,
        selector: ms.spec.selector.as_ref(),
    };
    let namespace = ms.metadata.namespace.as_deref();
    // Shared with the cache: a machine is copied only when this pass changes it.
    let mut claimed: Vec<Arc<Machine>> = Vec::new();
    for m in input
        .machines
        .iter()
        .filter(|m| m.metadata.namespace.as_deref() == namespace)
    {
        let decision =
            claim::claim(owner, &m.metadata).map_err(|source| MachineSetError::Selector {
                name: name.clone(),
                source,
            })?;
        match decision {
            ClaimDecision::Owned => claimed.push(Arc::clone(m)),
            ClaimDecision::Adopt => {
                let owner_ref = claim::owner_reference(KIND, &name, &uid);
                actions.push(MachineSetAction::AdoptMachine {
                    machine: MachineRef::of(m),
                    owner: owner_ref.clone(),
                });
                let mut adopted = (**m).clone();
                adopted
                    .metadata
                    .owner_references
                    .get_or_insert_with(Vec::new)
                    .push(owner_ref);
                claimed.push(Arc::new(adopted));
            }
            ClaimDecision::Release => actions.push(MachineSetAction::ReleaseMachine {
                machine: MachineRef::of(m),
            }),
            ClaimDecision::Ignore => {}
        }
    }

    // Steps 6–9: in-place propagation and auto-preservation, merged per machine.
    let mut updates: Vec<MachineUpdate> = claimed.iter().map(|m| sync_update(ms, m)).collect();
    for (i, u) in auto_preservation(ms, &claimed) {
        updates[i].set_annotations.extend(u.set_annotations);
        updates[i].remove_annotations.extend(u.remove_annotations);
    }
    for (m, u) in claimed.iter_mut().zip(updates) {
        if u != MachineUpdate::default() {
            apply_update(Arc::make_mut(m), &u);
            actions.push(MachineSetAction::UpdateMachine {
                machine: MachineRef::of(m),
                update: Box::new(u),
            });
        }
    }

    let mut requeue_after = Retry::After(RESYNC);
    if deleting {
        if claimed.is_empty() {
            if has_finalizer(&ms.metadata) {
                actions.push(MachineSetAction::RemoveFinalizer);
            }
        } else if has_finalizer(&ms.metadata) {
            let machines: Vec<MachineRef> = claimed
                .iter()
                .filter(|m| m.metadata.deletion_timestamp.is_none())
                .map(|m| MachineRef::of(m))
                .collect();
            if !machines.is_empty() && input.readiness.may_act() {
                actions.push(MachineSetAction::DeleteMachines { machines });
            }
        }
    } else if let Readiness::Pending { retry_in } = input.readiness {
        // Never act twice on a stale cache: wait for the issued operations to show up.
        requeue_after = requeue_after.min(Retry::After(go_duration(retry_in)));
    } else {
        actions.extend(manage_replicas(
            ms,
            &claimed,
            input.node_preserve,
            input.now,
        )?);
    }
    Ok(MachineSetPlan {
        actions,
        claimed,
        requeue_after,
    })
}

/// `manageReplicas` (§4.4) over the claimed machines.
///
/// # Errors
/// [`MachineSetError::NoTemplateLabels`] on scale-up with an unlabeled template.
pub fn manage_replicas(
    ms: &MachineSet,
    claimed: &[Arc<Machine>],
    node_preserve: &BTreeMap<String, Option<String>>,
    now: Timestamp,
) -> Result<Vec<MachineSetAction>, MachineSetError> {
    let replicas = usize::try_from(ms.spec.replicas.unwrap_or(0)).unwrap_or(0);
    let non_terminating = claimed
        .iter()
        .filter(|m| phase(m) != Some(&MachinePhase::Terminating))
        .count();
    if non_terminating < replicas {
        let frozen = label_of(&ms.metadata, label::FREEZE) == Some(value::TRUE_CAPITALISED)
            && ms.metadata.deletion_timestamp.is_none();
        let scale_up_disabled = ms
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(label::SCALE_UP_DISABLED));
        if frozen || scale_up_disabled {
            return Ok(Vec::new());
        }
        let count = (replicas - non_terminating).min(BURST_REPLICAS);
        return Ok(vec![MachineSetAction::CreateMachines {
            machine: Box::new(machine_from_template(ms)?),
            count,
            batches: slow_start_batches(count, SLOW_START_INITIAL_BATCH),
        }]);
    }
    let machines = machines_to_delete(ms, claimed, node_preserve, now);
    Ok(if machines.is_empty() {
        Vec::new()
    } else {
        vec![MachineSetAction::DeleteMachines { machines }]
    })
}

/// Outcome of the replica actions, as the shell saw it (drives the `ReplicaFailure` condition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaError {
    /// The first error text.
    pub message: String,
}

/// The status of §4.8 for the claimed machines (`claimed` from [`MachineSetPlan::claimed`]).
#[must_use]
pub fn machine_set_status<M: Borrow<Machine>>(
    ms: &MachineSet,
    claimed: &[M],
    replica_error: Option<&ReplicaError>,
    now: Timestamp,
) -> MachineSetStatus {
    let claimed: Vec<&Machine> = claimed.iter().map(Borrow::borrow).collect();
    let old = ms.status.clone().unwrap_or_default();
    let template_labels = ms
        .spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let count = |f: &dyn Fn(&Machine) -> bool| {
        i32::try_from(claimed.iter().filter(|m| f(m)).count()).unwrap_or(i32::MAX)
    };
    let fully_labeled = count(&|m| {
        template_labels
            .iter()
            .all(|(k, v)| labels(&m.metadata).and_then(|l| l.get(k)) == Some(v))
    });
    let available = count(&|m| {
        matches!(
            phase(m),
            Some(MachinePhase::Available | MachinePhase::Running)
        )
    });
    let ready = count(&|m| phase(m) == Some(&MachinePhase::Running));
    let preserved_failed =
        |m: &Machine| phase(m) == Some(&MachinePhase::Failed) && preserve_expiry(m).is_some();
    let failed: Vec<MachineSummary> = claimed
        .iter()
        .filter(|m| {
            m.last_operation()
                .is_some_and(|l| l.state == Some(MachineState::Failed))
                && !preserved_failed(m)
        })
        .map(|m| MachineSummary {
            name: m.metadata.name.clone(),
            provider_id: m.spec.provider_id.clone(),
            last_operation: m.last_operation().cloned(),
            owner_ref: claim::controller_ref(&m.metadata).map(|r| r.name.clone()),
        })
        .collect();
    let auto_preserved = count(&|m| {
        annotation_of(&m.metadata, annotation::PRESERVE) == Some(preserve::AUTO_PRESERVED)
    });
    let mut conditions = old.conditions.clone().unwrap_or_default();
    let has_failure = conditions
        .iter()
        .any(|c| c.type_ == MachineSetConditionType::ReplicaFailure);
    match replica_error {
        Some(err) if !has_failure => {
            let replicas = usize::try_from(ms.spec.replicas.unwrap_or(0)).unwrap_or(0);
            let reason = match claimed.len().cmp(&replicas) {
                Ordering::Less => "FailedCreate",
                Ordering::Greater => "FailedDelete",
                Ordering::Equal => "",
            };
            conditions.push(MachineSetCondition {
                type_: MachineSetConditionType::ReplicaFailure,
                status: ConditionStatus::True,
                last_transition_time: Some(Time(now)),
                reason: Some(reason.to_owned()),
                message: Some(err.message.clone()),
            });
        }
        None if has_failure => {
            conditions.retain(|c| c.type_ != MachineSetConditionType::ReplicaFailure);
        }
        _ => {}
    }
    let mut last_operation = old.last_operation.clone().unwrap_or_default();
    last_operation.last_update_time = Some(Time(now));
    MachineSetStatus {
        replicas: Some(count(&|_| true)),
        fully_labeled_replicas: Some(fully_labeled),
        ready_replicas: Some(ready),
        available_replicas: Some(available),
        preserved_failed_replicas: Some(count(&preserved_failed)),
        observed_generation: ms.metadata.generation,
        conditions: (!conditions.is_empty()).then_some(conditions),
        last_operation: Some(last_operation),
        failed_machines: (!failed.is_empty()).then_some(failed),
        auto_preserve_failed_machine_count: Some(auto_preserved),
    }
}

/// Whether `new` must be written (§4.8 `updateMachineSetStatus`): any counted field, condition or
/// failed machine differs, or the generation was not observed yet.
#[must_use]
pub fn status_needs_update(ms: &MachineSet, new: &MachineSetStatus) -> bool {
    let old = ms.status.clone().unwrap_or_default();
    let n = |v: Option<i32>| v.unwrap_or(0);
    n(old.replicas) != n(new.replicas)
        || n(old.fully_labeled_replicas) != n(new.fully_labeled_replicas)
        || n(old.ready_replicas) != n(new.ready_replicas)
        || n(old.available_replicas) != n(new.available_replicas)
        || n(old.auto_preserve_failed_machine_count) != n(new.auto_preserve_failed_machine_count)
        || n(old.preserved_failed_replicas) != n(new.preserved_failed_replicas)
        || !semantic::equal(&old.conditions, &new.conditions)
        || !semantic::equal(&old.failed_machines, &new.failed_machines)
        || ms.metadata.generation != old.observed_generation
}

/// Shortest time between two status writes of one MachineSet that only change replica counts.
pub const STATUS_COUNT_WRITE_INTERVAL: SignedDuration = SignedDuration::from_secs(1);

/// How long to hold back writing `new` (which [`status_needs_update`] wants written) when the
/// set's status was last written at `last_written`: `None` writes now.
///
/// While a fleet scales, every machine that turns Running changes the counts, and each count
/// written is also a MachineDeployment status write: at 1,000 machines that was about half a
/// control-cluster write per machine. Counts are therefore written at most once per
/// [`STATUS_COUNT_WRITE_INTERVAL`], the last value always (the shell requeues for it).
/// Conditions, failed machines and a new generation are written at once.
#[must_use]
pub fn status_write_delay(
    ms: &MachineSet,
    new: &MachineSetStatus,
    last_written: Option<Timestamp>,
    now: Timestamp,
) -> Option<SignedDuration> {
    let old = ms.status.clone().unwrap_or_default();
    let counts_only = semantic::equal(&old.conditions, &new.conditions)
        && semantic::equal(&old.failed_machines, &new.failed_machines)
        && ms.metadata.generation == old.observed_generation;
    if !counts_only {
        return None;
    }
    let since = now.duration_since(last_written?);
    (since >= SignedDuration::ZERO && since < STATUS_COUNT_WRITE_INTERVAL)
        .then(|| STATUS_COUNT_WRITE_INTERVAL - since)
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "upstream_tables.rs"]
mod upstream_tables;
