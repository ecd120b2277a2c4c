//! One reconcile pass of a MachineDeployment (docs/behaviour.md#machine-deployment): validate, add the
//! finalizer, claim MachineSets, handle deletion and the cluster-autoscaler's deletion requests,
//! then pick the path: paused or scaling (`sync`), rollback, or the strategy's rollout.
//!
//! [`plan`] takes the deployment (read live), the MachineSets and machines of its namespace from
//! the cache, the configuration and `now`, and returns the actions of one reconcile pass. The
//! plan works on copies of the claimed MachineSets, so one pass may create the new MachineSet and
//! go on with the rollout; writes of the same object are coalesced into one action carrying the
//! final object. The shell executes actions in order; a failed MachineSet or deployment write
//! stops the pass (rate-limited requeue), node taint/annotation failures are logged and skipped
//! (as upstream).

use std::collections::{BTreeMap, BTreeSet};

use mcm_api::keys::finalizer;
use mcm_api::v1alpha1::{Machine, MachineDeploymentStrategyType as Strategy};

use super::autoscaler;
use super::fencepost;
use super::revision::{self, KIND};
use super::scaling::is_scaling_event;
use super::status;
use super::types::{
    DeploymentAction, DeploymentError, DeploymentInput, DeploymentPlan, RESYNC, md_name,
};
use super::validation::validate;
use super::work::Work;
use crate::machine_set::claim::{self, ClaimDecision, Owner};
use crate::machine_set::types::MachineRef;
use crate::selector;
use crate::vocabulary::{Event, Retry};

/// One reconcile pass of a MachineDeployment (docs/behaviour.md#deployment-reconcile).
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
            "This deployment is selecting all machines. A non-empty selector is required.",
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

    // Cluster-autoscaler deletion requests (docs/behaviour.md#autoscaler-deletion).
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

#[cfg(test)]
mod tests;
