//! Pure decision logic of the overshooting safety controller (docs/behaviour.md#overshooting, quirks docs/behaviour.md#q12, docs/behaviour.md#q13).
//!
//! [`plan`] takes every MachineSet, MachineDeployment and machine of the namespace from the cache
//! plus the `--safety-up`/`--safety-down` flags, and returns freeze/unfreeze actions in execution
//! order. The shell executes each with a live GET, the object helpers of this module
//! ([`freeze_machine_set`], [`unfreeze_machine_set`], [`freeze_machine_deployment`],
//! [`unfreeze_machine_deployment`]) and `UpdateStatus` (condition) then `Update` (label,
//! annotation), and re-runs after `--machine-safety-overshooting-period` and on every machine add.
//!
//! Differences from upstream: a MachineDeployment without surge configuration (Recreate) counts
//! with a surge of 0 instead of aborting the check of every other MachineSet, a malformed
//! surge only skips the MachineSet it concerns, and machines being deleted are not counted (a
//! scale-down never freezes). Like upstream, at most one overshoot freeze or
//! unfreeze happens per run (steps 2–4 always run).

use std::borrow::Borrow;
use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use mcm_api::keys::{annotation, label, value};
use mcm_api::v1alpha1::{
    ConditionStatus, Machine, MachineDeployment, MachineDeploymentCondition,
    MachineDeploymentConditionType, MachineSet, MachineSetCondition, MachineSetConditionType,
};

use crate::machine_deployment::fencepost;
use crate::machine_set::claim;
use crate::selector;
use crate::vocabulary::{Event, flag_defaults};

/// Reason of an overshoot freeze.
pub const REASON_OVERSHOOTING: &str = "OverShootingReplicaCount";
/// Reason of the deployment unfreeze when the count is back within bounds.
pub const REASON_UNDERSHOOTING: &str = "UnderShootingReplicaCount";
/// Reason of a deployment freeze/unfreeze that re-aligns it with its MachineSets.
pub const REASON_STATE_SYNC: &str = "MachineDeploymentStateSync";
/// Reason of an unfreeze requested by the operator's annotation.
pub const REASON_UNFREEZE_ANNOTATION: &str = "UnfreezeAnnotation";
/// Message of a state-sync freeze.
pub const MESSAGE_STATE_SYNC: &str = "MachineDeployment State was inconsistent, hence safety controller has fixed this and frozen it";

/// Flags of the overshooting check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OvershootConfig {
    /// `--safety-up`.
    pub safety_up: i32,
    /// `--safety-down`.
    pub safety_down: i32,
}

impl Default for OvershootConfig {
    fn default() -> Self {
        Self {
            safety_up: flag_defaults::SAFETY_UP,
            safety_down: flag_defaults::SAFETY_DOWN,
        }
    }
}

/// One freeze/unfreeze step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OvershootAction {
    /// Freeze a MachineSet ([`freeze_machine_set`]) and record `event` on it.
    FreezeMachineSet {
        /// MachineSet name.
        name: String,
        /// Condition reason.
        reason: String,
        /// Condition message.
        message: String,
        /// Event on the MachineSet.
        event: Event,
    },
    /// Unfreeze a MachineSet ([`unfreeze_machine_set`]) and record `event` on it.
    UnfreezeMachineSet {
        /// MachineSet name.
        name: String,
        /// Event on the MachineSet.
        event: Event,
    },
    /// Freeze a MachineDeployment ([`freeze_machine_deployment`]).
    FreezeMachineDeployment {
        /// Deployment name.
        name: String,
        /// Condition reason.
        reason: String,
        /// Condition message.
        message: String,
    },
    /// Unfreeze a MachineDeployment ([`unfreeze_machine_deployment`]).
    UnfreezeMachineDeployment {
        /// Deployment name.
        name: String,
        /// Why (logged).
        reason: String,
    },
    /// Set annotation `safety.machine.sapcloud.io/unfreeze: "True"` on a MachineSet.
    RequestMachineSetUnfreeze {
        /// MachineSet name.
        name: String,
    },
}

/// A problem that skipped one MachineSet (reported, the run goes on).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OvershootError {
    /// The surge of the owning deployment cannot be resolved.
    #[error(
        "MachineSet {machine_set}: cannot resolve maxSurge of MachineDeployment {deployment}: {source}"
    )]
    Surge {
        /// MachineSet name.
        machine_set: String,
        /// Deployment name.
        deployment: String,
        /// The problem.
        source: fencepost::FencepostError,
    },
}

/// Result of [`plan`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OvershootPlan {
    /// Actions in execution order.
    pub actions: Vec<OvershootAction>,
    /// MachineSets skipped, with why.
    pub errors: Vec<OvershootError>,
}

fn label_is_true(meta: &ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(label::FREEZE))
        .map(String::as_str)
        == Some(value::TRUE_CAPITALISED)
}

fn has_unfreeze_annotation(meta: &ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(annotation::UNFREEZE))
}

fn set_frozen_condition(ms: &MachineSet) -> bool {
    ms.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == MachineSetConditionType::Frozen))
}

fn deployment_frozen_condition(md: &MachineDeployment) -> bool {
    md.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == MachineDeploymentConditionType::Frozen)
        })
}

fn is_set_frozen(ms: &MachineSet) -> bool {
    label_is_true(&ms.metadata) || set_frozen_condition(ms)
}

/// Whether a MachineSet or MachineDeployment change runs the check before its period: only when
/// the operator's unfreeze annotation appears (`old` is `None` for an added object).
///
/// Upstream runs the check at start, on Machine add and every period only; any other change of a
/// set or deployment (a scale-down above all: its machines drain while the limit has already
/// dropped) must not trigger it (docs/behaviour.md#overshooting). The annotation is an
/// operator waiting for an unfreeze, which upstream makes wait up to a period.
#[must_use]
pub fn triggers_overshoot_check(old: Option<&ObjectMeta>, new: &ObjectMeta) -> bool {
    has_unfreeze_annotation(new) && !old.is_some_and(has_unfreeze_annotation)
}

/// Sets the `Frozen` condition and the `freeze` label on a MachineSet.
pub fn freeze_machine_set(ms: &mut MachineSet, reason: &str, message: &str, now: Timestamp) {
    let conditions = ms
        .status
        .get_or_insert_with(Default::default)
        .conditions
        .get_or_insert_with(Vec::new);
    conditions.retain(|c| c.type_ != MachineSetConditionType::Frozen);
    conditions.push(MachineSetCondition {
        type_: MachineSetConditionType::Frozen,
        status: ConditionStatus::True,
        last_transition_time: Some(Time(now)),
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
    });
    ms.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(label::FREEZE.to_owned(), value::TRUE_CAPITALISED.to_owned());
}

/// Removes the `Frozen` condition, the `freeze` label and the unfreeze annotation.
pub fn unfreeze_machine_set(ms: &mut MachineSet) {
    if let Some(c) = ms.status.as_mut().and_then(|s| s.conditions.as_mut()) {
        c.retain(|c| c.type_ != MachineSetConditionType::Frozen);
    }
    unfreeze_meta(&mut ms.metadata);
}

fn unfreeze_meta(meta: &mut ObjectMeta) {
    if let Some(l) = meta.labels.as_mut() {
        l.remove(label::FREEZE);
    }
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(annotation::UNFREEZE);
    }
}

/// Sets the `Frozen` condition and the `freeze` label on a MachineDeployment.
pub fn freeze_machine_deployment(
    md: &mut MachineDeployment,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    let conditions = md
        .status
        .get_or_insert_with(Default::default)
        .conditions
        .get_or_insert_with(Vec::new);
    conditions.retain(|c| c.type_ != MachineDeploymentConditionType::Frozen);
    conditions.push(MachineDeploymentCondition {
        type_: MachineDeploymentConditionType::Frozen,
        status: ConditionStatus::True,
        last_update_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
    });
    md.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(label::FREEZE.to_owned(), value::TRUE_CAPITALISED.to_owned());
}

/// Removes the `Frozen` condition, the `freeze` label and the unfreeze annotation.
pub fn unfreeze_machine_deployment(md: &mut MachineDeployment) {
    if let Some(c) = md.status.as_mut().and_then(|s| s.conditions.as_mut()) {
        c.retain(|c| c.type_ != MachineDeploymentConditionType::Frozen);
    }
    unfreeze_meta(&mut md.metadata);
}

/// Machines counted for a MachineSet: labels contain the template labels and an owner reference
/// (any kind) names the set; a machine with two such references counts twice (as upstream).
///
/// A machine being deleted is not counted (upstream counts it): it is capacity on its way out,
/// never an overshoot, and counting it froze every scale-down whose deletions were still
/// draining when a run came (docs/behaviour.md#q12).
#[must_use]
pub fn machine_count<M: Borrow<Machine>>(ms: &MachineSet, machines: &[M]) -> usize {
    let name = ms.metadata.name.as_deref().unwrap_or("");
    let template_labels = ms
        .spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    machines
        .iter()
        .map(Borrow::borrow)
        .filter(|m: &&Machine| m.metadata.namespace == ms.metadata.namespace)
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .filter(|m| {
            let labels = m.metadata.labels.as_ref();
            template_labels
                .iter()
                .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
        })
        .map(|m| {
            m.metadata
                .owner_references
                .iter()
                .flatten()
                .filter(|r| r.name == name)
                .count()
        })
        .sum()
}

/// The first deployment of the namespace whose selector matches the set's labels.
fn owning_deployment<'a>(
    ms: &MachineSet,
    mds: &'a [MachineDeployment],
) -> Option<&'a MachineDeployment> {
    mds.iter()
        .filter(|d| d.metadata.namespace == ms.metadata.namespace)
        .find(|d| {
            d.spec
                .selector
                .as_ref()
                .is_some_and(|s| !selector::is_empty(s))
                && selector::matches(d.spec.selector.as_ref(), ms.metadata.labels.as_ref())
                    .unwrap_or(false)
        })
}

/// Freeze threshold of a set: `md.replicas + surge + safetyUp`, or `2 × ms.replicas + safetyUp`
/// without a deployment.
///
/// # Errors
/// A malformed surge on the deployment.
pub fn high_threshold(
    ms: &MachineSet,
    md: Option<&MachineDeployment>,
    config: OvershootConfig,
) -> Result<i64, OvershootError> {
    let up = i64::from(config.safety_up);
    match md {
        None => Ok(2 * i64::from(ms.spec.replicas.unwrap_or(0)) + up),
        Some(md) => {
            let surge = fencepost::safety_surge(md).map_err(|source| OvershootError::Surge {
                machine_set: ms.metadata.name.clone().unwrap_or_default(),
                deployment: md.metadata.name.clone().unwrap_or_default(),
                source,
            })?;
            Ok(i64::from(fencepost::replicas(md)) + i64::from(surge.unwrap_or(0)) + up)
        }
    }
}

fn name(meta: &ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

/// One run of the overshooting safety controller (docs/behaviour.md#overshooting steps 1–4).
#[must_use]
pub fn plan<M: Borrow<Machine>>(
    machine_sets: &[MachineSet],
    deployments: &[MachineDeployment],
    machines: &[M],
    config: OvershootConfig,
    now: Timestamp,
) -> OvershootPlan {
    let mut out = OvershootPlan::default();
    let mut sets = machine_sets.to_vec();
    let mut mds = deployments.to_vec();

    // Step 1: at most one overshoot freeze or unfreeze.
    for set in &mut sets {
        let md_index = owning_deployment(set, &mds).and_then(|d| {
            mds.iter().position(|x| {
                x.metadata.uid == d.metadata.uid && x.metadata.name == d.metadata.name
            })
        });
        let high = match high_threshold(set, md_index.map(|j| &mds[j]), config) {
            Ok(h) => h,
            Err(e) => {
                out.errors.push(e);
                continue;
            }
        };
        let low = high - i64::from(config.safety_down);
        let count = i64::try_from(machine_count(set, machines)).unwrap_or(i64::MAX);
        let ms_name = name(&set.metadata);
        if !label_is_true(&set.metadata) && count >= high {
            let message = format!(
                "The number of machines backing MachineSet: {ms_name} is {count} >= {high} which is the Max-ScaleUp-Limit"
            );
            freeze_machine_set(set, REASON_OVERSHOOTING, &message, now);
            out.actions.push(OvershootAction::FreezeMachineSet {
                name: ms_name.clone(),
                reason: REASON_OVERSHOOTING.to_owned(),
                message: message.clone(),
                event: Event::normal(
                    "FrozeMachineSet",
                    format!(
                        "SafetyController: Froze MachineSet {ms_name} due to replica overshooting"
                    ),
                ),
            });
            if let Some(j) = md_index {
                freeze_machine_deployment(&mut mds[j], REASON_OVERSHOOTING, &message, now);
                out.actions.push(OvershootAction::FreezeMachineDeployment {
                    name: name(&mds[j].metadata),
                    reason: REASON_OVERSHOOTING.to_owned(),
                    message,
                });
            }
            break;
        }
        if count <= low && is_set_frozen(set) {
            if let Some(j) = md_index {
                unfreeze_machine_deployment(&mut mds[j]);
                out.actions
                    .push(OvershootAction::UnfreezeMachineDeployment {
                        name: name(&mds[j].metadata),
                        reason: REASON_UNDERSHOOTING.to_owned(),
                    });
            }
            unfreeze_machine_set(set);
            out.actions.push(OvershootAction::UnfreezeMachineSet {
                name: ms_name.clone(),
                event: unfroze_event(&ms_name),
            });
            break;
        }
    }

    // Step 2: deployments follow their sets.
    for md in &mut mds {
        let uid = md.metadata.uid.clone();
        let owned: Vec<&MachineSet> = sets
            .iter()
            .filter(|s| s.metadata.namespace == md.metadata.namespace)
            .filter(|s| claim::controller_ref(&s.metadata).map(|r| &r.uid) == uid.as_ref())
            .collect();
        let any_frozen = owned.iter().any(|s| is_set_frozen(s));
        let md_label = label_is_true(&md.metadata);
        let md_condition = deployment_frozen_condition(md);
        if any_frozen && !(md_label && md_condition) {
            freeze_machine_deployment(md, REASON_STATE_SYNC, MESSAGE_STATE_SYNC, now);
            out.actions.push(OvershootAction::FreezeMachineDeployment {
                name: name(&md.metadata),
                reason: REASON_STATE_SYNC.to_owned(),
                message: MESSAGE_STATE_SYNC.to_owned(),
            });
        } else if !any_frozen && (md_label || md_condition) {
            unfreeze_machine_deployment(md);
            out.actions
                .push(OvershootAction::UnfreezeMachineDeployment {
                    name: name(&md.metadata),
                    reason: REASON_STATE_SYNC.to_owned(),
                });
        }
    }

    // Step 3: operator unfreeze of deployments, propagated to their sets.
    for md in &mut mds {
        if !has_unfreeze_annotation(&md.metadata) {
            continue;
        }
        unfreeze_machine_deployment(md);
        out.actions
            .push(OvershootAction::UnfreezeMachineDeployment {
                name: name(&md.metadata),
                reason: REASON_UNFREEZE_ANNOTATION.to_owned(),
            });
        let uid = md.metadata.uid.clone();
        for s in sets.iter_mut().filter(|s| {
            s.metadata.namespace == md.metadata.namespace
                && claim::controller_ref(&s.metadata).map(|r| &r.uid) == uid.as_ref()
        }) {
            s.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(
                    annotation::UNFREEZE.to_owned(),
                    value::TRUE_CAPITALISED.to_owned(),
                );
            out.actions
                .push(OvershootAction::RequestMachineSetUnfreeze {
                    name: name(&s.metadata),
                });
        }
    }

    // Step 4: operator unfreeze of sets.
    for s in &mut sets {
        if has_unfreeze_annotation(&s.metadata) {
            unfreeze_machine_set(s);
            let n = name(&s.metadata);
            out.actions.push(OvershootAction::UnfreezeMachineSet {
                event: unfroze_event(&n),
                name: n,
            });
        }
    }
    out
}

fn unfroze_event(ms: &str) -> Event {
    Event::normal(
        "UnfrozeMachineSet",
        format!("SafetyController: Unfroze MachineSet {ms}"),
    )
}

#[cfg(test)]
mod tests;
