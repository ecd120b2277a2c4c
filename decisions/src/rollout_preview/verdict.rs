//! The verdicts: what a MachineDeployment or MachineClass update does to the machines.

use std::collections::BTreeSet;

use mcm_api::keys::label;
use mcm_api::v1alpha1::{
    Machine, MachineDeployment, MachineDeploymentStrategyType, MachineSet, MachineTemplateSpec,
    OrchestrationType,
};

use super::batches::{batch_count, per_batch};
use super::field_diff::{class_changes, deployment_changes};
use super::types::{
    ClassChange, ClassUserVerdict, ClassVerdict, DeploymentChange, DeploymentEffect,
    DeploymentVerdict, FieldEffect, PreviewError, Roll, RollbackPlan,
};
use crate::machine::hot_update::{
    HotUpdateInput, HotUpdateStep, LAST_APPLIED_PROVIDER_SPEC, changed_paths, is_hot_updatable,
    plan_hot_update,
};
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

/// The template a `spec.rollbackTo` puts into the deployment, as the controller's rollback
/// resolves it from the deployment's sets (docs/behaviour.md#rollback).
fn rollback_target(
    new: &MachineDeployment,
    owned: &[MachineSet],
) -> Option<(RollbackPlan, Option<MachineTemplateSpec>)> {
    let requested = new.spec.rollback_to.as_ref()?.revision.unwrap_or(0);
    let to = if requested == 0 {
        revision::last_revision(owned)
    } else {
        requested
    };
    let found = (to != 0)
        .then(|| {
            owned
                .iter()
                .find(|s| revision::revision(&s.metadata) == Some(to))
        })
        .flatten();
    let Some(set) = found else {
        return Some((RollbackPlan::NotFound { requested }, None));
    };
    let mut template = set.spec.template.clone().unwrap_or_default();
    if revision::equal_ignore_hash(&template, &new.spec.template) {
        return Some((RollbackPlan::SameTemplate { revision: to }, None));
    }
    if let Some(labels) = template.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        labels.remove(label::MACHINE_TEMPLATE_HASH);
    }
    Some((RollbackPlan::To { revision: to }, Some(template)))
}

/// What a MachineDeployment update does to its machines.
///
/// The template rolled to is the new one, or for a `spec.rollbackTo` the template of the
/// revision it names; a change that resumes a paused deployment rolls out a template changed
/// while it was paused. Machines of the set that already has that template stay, all others go.
///
/// # Errors
/// A strategy whose fenceposts cannot be resolved.
pub fn preview_deployment(
    change: &DeploymentChange<'_>,
) -> Result<DeploymentVerdict, PreviewError> {
    let (old, new) = (change.old, change.new);
    let mut changes = deployment_changes(old, new);
    let sets = owned_sets(new, change.machine_sets);
    let owned: Vec<MachineSet> = sets.iter().map(|s| (*s).clone()).collect();
    let all_machines: Vec<&Machine> = sets
        .iter()
        .flat_map(|s| machines_of(s, change.machines))
        .collect();
    let md_name = qualified(&new.metadata);
    let resumes = old.spec.paused == Some(true) && new.spec.paused != Some(true);
    let mut undetermined = None;
    let mut rollback = None;
    let mut target = new.clone();
    if let Some(to) = new.spec.rollback_to.as_ref() {
        if change.observed {
            let (plan, template) = rollback_target(new, &owned).unzip();
            rollback = plan;
            if let Some(Some(template)) = template {
                target.spec.template = template;
            }
        } else {
            undetermined = Some(format!(
                "spec.rollbackTo rolls machinedeployment {md_name} back to {}; which machines are replaced depends on its MachineSets, which were not read",
                match to.revision.unwrap_or(0) {
                    0 => "the previous revision".to_owned(),
                    n => format!("revision {n}"),
                }
            ));
        }
    } else if resumes && !change.observed {
        undetermined = Some(format!(
            "resuming machinedeployment {md_name} rolls out any template change made while it was paused; whether machines are replaced depends on its MachineSets, which were not read"
        ));
    }
    let kept_set = revision::find_new_machine_set(&target, &owned).and_then(|i| owned.get(i));
    let (mut going, kept): (Vec<&Machine>, Vec<&Machine>) = all_machines.iter().partition(|m| {
        kept_set.is_none_or(|k| {
            !controlled_by(&m.metadata, crate::machine_set::plan::KIND, &k.metadata)
        })
    });
    let template_changes = !revision::equal_ignore_hash(&old.spec.template, &target.spec.template);
    // A resume (or a rollback) rolls whatever the machines do not run yet, also when the change
    // itself leaves the template alone.
    let resumes_pending = resumes && change.observed && !going.is_empty() && !template_changes;
    let rolls = template_changes || resumes_pending;
    let mut order = Vec::new();
    let effect = if let Some(reason) = undetermined {
        DeploymentEffect::Undetermined(reason)
    } else if rolls {
        let roll = roll_of(new)?;
        // The controller scales old sets down oldest first, and each set deletes in the
        // deletion order (ties by name): the same order here.
        let mut by_age: Vec<&MachineSet> = owned.iter().collect();
        by_age.sort_by(|a, b| revision::creation_order(a, b));
        let set_rank = |m: &Machine| {
            by_age
                .iter()
                .position(|s| {
                    controlled_by(&m.metadata, crate::machine_set::plan::KIND, &s.metadata)
                })
                .unwrap_or(usize::MAX)
        };
        going.sort_by(|a, b| {
            set_rank(a)
                .cmp(&set_rank(b))
                .then_with(|| deletion_order(a, b, change.now))
        });
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
    if matches!(effect, DeploymentEffect::Roll { .. }) {
        // The field that starts the roll says so, not "no machine touched".
        for c in &mut changes {
            if c.path.starts_with("spec.rollbackTo") || (resumes_pending && c.path == "spec.paused")
            {
                c.effect = FieldEffect::Rolls;
            }
        }
    }
    let (before, after) = (old.desired_replicas(), new.desired_replicas());
    Ok(DeploymentVerdict {
        deployment: md_name,
        changes,
        effect,
        scale: (before != after).then_some((before, after)),
        paused: new.spec.paused == Some(true),
        order,
        estimated: !change.observed,
        rollback,
        resumes_pending,
    })
}

/// The class name `md`'s template references (none when empty).
#[must_use]
pub fn template_class(md: &MachineDeployment) -> Option<&str> {
    md.spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.class.as_ref())
        .and_then(|c| c.name.as_deref())
        .filter(|name| !name.is_empty())
}

/// Whether `md`'s template references the class named `class`.
fn template_uses(md: &MachineDeployment, class: &str) -> bool {
    template_class(md) == Some(class)
}

/// A machine's last-applied providerSpec, when it has a readable one.
fn last_applied(machine: &Machine) -> Option<serde_json::Value> {
    machine
        .metadata
        .annotations
        .as_ref()?
        .get(LAST_APPLIED_PROVIDER_SPEC)
        .and_then(|text| serde_json::from_str(text).ok())
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
            updated_paths: Vec::new(),
            blocked: 0,
            blocked_by: Vec::new(),
        };
        let (mut updated_paths, mut blocked_by) = (BTreeSet::new(), BTreeSet::new());
        for machine in machines {
            // What the machine controller compares: the machine's last-applied providerSpec
            // with the class's new one, not the class's old one with its new one.
            let drift = last_applied(machine)
                .map(|applied| changed_paths(&applied, &change.new.provider_spec))
                .unwrap_or_default();
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
                | HotUpdateStep::Finish { .. } => {
                    verdict.hot_updated += 1;
                    updated_paths.extend(drift.into_iter().map(|p| format!("providerSpec.{p}")));
                }
                HotUpdateStep::InitialiseAnnotation { .. } => verdict.adopted += 1,
                HotUpdateStep::NewClassNeeded(_) => {
                    verdict.left_unchanged += 1;
                    verdict.blocked += 1;
                    blocked_by.extend(
                        drift
                            .into_iter()
                            .filter(|p| !is_hot_updatable(p, &hot))
                            .map(|p| format!("providerSpec.{p}")),
                    );
                }
                HotUpdateStep::Nothing => verdict.left_unchanged += 1,
            }
        }
        verdict.updated_paths = updated_paths.into_iter().collect();
        verdict.blocked_by = blocked_by.into_iter().collect();
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
