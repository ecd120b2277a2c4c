//! One reconcile pass of a MachineSet (docs/behaviour.md#machine-set).
//!
//! [`plan`] takes an observed snapshot (the MachineSet as read live, every machine of the
//! namespace from the cache, the preserve annotations of nodes, the expectations readiness and
//! `now`) and returns the actions of one reconcile pass in execution order. The shell executes
//! them, records expectations for creations and deletions, then computes the status with
//! [`super::status::machine_set_status`] from the plan's working copy of the claimed machines and
//! the outcome of the replica actions, and writes it when
//! [`super::status::status_needs_update`] says so.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use mcm_api::keys::finalizer;
use mcm_api::v1alpha1::Machine;

use super::claim::{self, ClaimDecision, Owner};
use super::expectations::Readiness;
use super::machine_updates::{apply_update, auto_preservation, sync_update};
use super::scaling::manage_replicas;
use super::types::{
    KIND, MachineRef, MachineSetAction, MachineSetError, MachineSetInput, MachineSetPlan,
    MachineUpdate, RESYNC, name_of,
};
use super::validation::validate;
use crate::vocabulary::{Retry, go_duration};

fn has_finalizer(meta: &ObjectMeta) -> bool {
    meta.finalizers
        .iter()
        .flatten()
        .any(|f| f == finalizer::MACHINE_CONTROLLER_MANAGER)
}

/// One reconcile pass of a MachineSet (docs/behaviour.md#machine-set-reconcile).
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

#[cfg(test)]
mod tests;
