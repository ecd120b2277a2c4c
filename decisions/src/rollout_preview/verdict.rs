//! The verdicts: what a MachineDeployment or MachineClass update does to the machines.

use std::collections::BTreeSet;

use mcm_api::v1alpha1::{
    Machine, MachineDeployment, MachineDeploymentStrategyType, MachineSet, OrchestrationType,
};

use super::batches::{batch_count, per_batch};
use super::field_diff::{class_changes, deployment_changes};
use super::types::{
    ClassChange, ClassUserVerdict, ClassVerdict, DeploymentChange, DeploymentEffect,
    DeploymentVerdict, FieldEffect, PreviewError, Roll,
};
use crate::machine::hot_update::{HotUpdateInput, HotUpdateStep, plan_hot_update};
use crate::machine_deployment::{fencepost, revision};
use crate::machine_set::claim;
use crate::machine_set::plan::deletion_order;

/// `namespace/name` of an object's metadata.
fn qualified(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or("default"),
        meta.name.as_deref().unwrap_or("")
    )
}

/// Whether `meta`'s controller reference names the owner (by UID when it has one, else by kind
/// and name).
fn controlled_by(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    kind: &str,
    owner: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> bool {
    if meta.namespace != owner.namespace {
        return false;
    }
    claim::controller_ref(meta).is_some_and(|r| match owner.uid.as_deref() {
        Some(uid) if !uid.is_empty() => r.uid == uid,
        _ => r.kind == kind && Some(&r.name) == owner.name.as_ref(),
    })
}

/// The MachineSets the deployment controls.
#[must_use]
pub fn owned_sets<'a>(md: &MachineDeployment, sets: &'a [MachineSet]) -> Vec<&'a MachineSet> {
    sets.iter()
        .filter(|s| controlled_by(&s.metadata, revision::KIND, &md.metadata))
        .collect()
}

/// The live (not terminating) machines `set` controls.
fn machines_of<'a>(set: &MachineSet, machines: &'a [Machine]) -> Vec<&'a Machine> {
    machines
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .filter(|m| controlled_by(&m.metadata, crate::machine_set::plan::KIND, &set.metadata))
        .collect()
}

/// The strategy a template change of `md` runs with, resolved as the controller resolves it.
///
/// # Errors
/// A maxSurge or maxUnavailable that cannot be resolved.
pub fn roll_of(md: &MachineDeployment) -> Result<Roll, PreviewError> {
    let strategy = md.spec.strategy.as_ref().and_then(|s| s.type_.as_ref());
    Ok(match strategy {
        Some(MachineDeploymentStrategyType::Recreate) => Roll::Recreate,
        Some(MachineDeploymentStrategyType::InPlaceUpdate) => {
            let surge = fencepost::update_configuration(md)
                .and_then(|c| c.max_surge.as_ref())
                .map(|v| fencepost::scaled_value(v, fencepost::replicas(md), true))
                .transpose()?
                .unwrap_or(0);
            Roll::InPlace {
                max_surge: surge,
                max_unavailable: fencepost::max_unavailable(md)?,
                manual: md
                    .spec
                    .strategy
                    .as_ref()
                    .and_then(|s| s.in_place_update.as_ref())
                    .and_then(|i| i.orchestration_type.as_ref())
                    == Some(&OrchestrationType::Manual),
            }
        }
        _ => Roll::Rolling {
            max_surge: fencepost::max_surge(md)?,
            max_unavailable: fencepost::max_unavailable(md)?,
        },
    })
}

/// What a MachineDeployment update does to its machines.
///
/// # Errors
/// A strategy whose fenceposts cannot be resolved.
pub fn preview_deployment(
    change: &DeploymentChange<'_>,
) -> Result<DeploymentVerdict, PreviewError> {
    let (old, new) = (change.old, change.new);
    let changes = deployment_changes(old, new);
    let sets = owned_sets(new, change.machine_sets);
    let all_machines: Vec<&Machine> = sets
        .iter()
        .flat_map(|s| machines_of(s, change.machines))
        .collect();
    let rolls = !revision::equal_ignore_hash(&old.spec.template, &new.spec.template);
    let mut order = Vec::new();
    let effect = if rolls {
        let roll = roll_of(new)?;
        let owned: Vec<MachineSet> = sets.iter().map(|s| (*s).clone()).collect();
        // A set that already has the new template stays (a rollback): its machines are kept.
        let kept_set = revision::find_new_machine_set(new, &owned).and_then(|i| owned.get(i));
        let (mut going, kept): (Vec<&Machine>, Vec<&Machine>) =
            all_machines.iter().partition(|m| {
                kept_set.is_none_or(|k| {
                    !controlled_by(&m.metadata, crate::machine_set::plan::KIND, &k.metadata)
                })
            });
        going.sort_by(|a, b| deletion_order(a, b, change.now));
        order = going
            .iter()
            .map(|m| m.metadata.name.clone().unwrap_or_default())
            .collect();
        let machines = if change.observed {
            going.len()
        } else {
            usize::try_from(old.spec.replicas.unwrap_or(0)).unwrap_or(0)
        };
        let width = per_batch(&roll, machines);
        DeploymentEffect::Roll {
            batches: batch_count(machines, width),
            per_batch: width,
            roll,
            machines,
            kept: kept.len(),
        }
    } else if changes.iter().any(|c| c.effect == FieldEffect::Propagated) {
        DeploymentEffect::Propagate {
            machines: if change.observed {
                all_machines.len()
            } else {
                usize::try_from(old.spec.replicas.unwrap_or(0)).unwrap_or(0)
            },
        }
    } else {
        DeploymentEffect::Nothing
    };
    let (before, after) = (old.desired_replicas(), new.desired_replicas());
    Ok(DeploymentVerdict {
        deployment: qualified(&new.metadata),
        changes,
        effect,
        scale: (before != after).then_some((before, after)),
        paused: new.spec.paused == Some(true),
        order,
        estimated: !change.observed,
    })
}

/// Whether `md`'s template references the class named `class`.
fn template_uses(md: &MachineDeployment, class: &str) -> bool {
    md.spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.class.as_ref())
        .and_then(|c| c.name.as_deref())
        == Some(class)
}

fn machine_uses(machine: &Machine, class: &str) -> bool {
    machine.spec.class.as_ref().and_then(|c| c.name.as_deref()) == Some(class)
}

/// What a MachineClass update does to the machines of every deployment that uses it (its
/// template references the class, or machines it owns still run on it). Each machine is judged
/// by the machine controller's own hot-update decision against the new providerSpec.
///
/// # Errors
/// A providerSpec that is not a JSON object.
pub fn preview_class(change: &ClassChange<'_>) -> Result<ClassVerdict, PreviewError> {
    let hot = change.hot_paths.paths();
    let changes = class_changes(change.old, change.new, &hot)?;
    let class_name = change.new.metadata.name.as_deref().unwrap_or("");
    let mut users = Vec::new();
    let mut seen = BTreeSet::new();
    for user in &change.deployments {
        let md = user.deployment;
        if md.metadata.namespace != change.new.metadata.namespace {
            continue;
        }
        let machines: Vec<&Machine> = owned_sets(md, user.machine_sets)
            .into_iter()
            .flat_map(|s| machines_of(s, user.machines))
            .filter(|m| machine_uses(m, class_name))
            .collect();
        if !template_uses(md, class_name) && machines.is_empty() {
            continue;
        }
        if !seen.insert(qualified(&md.metadata)) {
            continue;
        }
        let mut verdict = ClassUserVerdict {
            deployment: qualified(&md.metadata),
            machines: machines.len(),
            hot_updated: 0,
            left_unchanged: 0,
            adopted: 0,
        };
        for machine in machines {
            let step = plan_hot_update(&HotUpdateInput {
                machine,
                provider_spec: &change.new.provider_spec,
                hot_paths: &hot,
                intent_recorded: false,
                update: None,
                now: change.now,
            });
            match step {
                HotUpdateStep::RecordIntent(_)
                | HotUpdateStep::CallUpdateMachine { .. }
                | HotUpdateStep::Finish { .. } => verdict.hot_updated += 1,
                HotUpdateStep::InitialiseAnnotation { .. } => verdict.adopted += 1,
                HotUpdateStep::NewClassNeeded(_) | HotUpdateStep::Nothing => {
                    verdict.left_unchanged += 1;
                }
            }
        }
        users.push(verdict);
    }
    users.sort_by(|a, b| a.deployment.cmp(&b.deployment));
    Ok(ClassVerdict {
        class: qualified(&change.new.metadata),
        changes,
        users,
        hot_paths_source: change.hot_paths.source(),
    })
}
