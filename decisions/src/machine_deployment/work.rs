//! The working copy of one reconcile pass: the deployment and its claimed MachineSets as the
//! pass changes them, the actions so far, and the bookkeeping that coalesces writes of one
//! object into one action carrying its final state ([`Work::finish`]).

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use mcm_api::v1alpha1::{Machine, MachineDeployment, MachineDeploymentStatus, MachineSet};

use super::types::{DeploymentAction, DeploymentInput, DeploymentPlan, spec_replicas, status_of};
use crate::vocabulary::{Event, Retry};

/// One reconcile pass in progress (built by [`super::decide::plan`]).
pub(super) struct Work<'a> {
    pub(super) input: DeploymentInput<'a>,
    pub(super) md: MachineDeployment,
    pub(super) md_changed: bool,
    pub(super) original_status: MachineDeploymentStatus,
    pub(super) sets: Vec<MachineSet>,
    /// Index of the set created in this pass, if any.
    pub(super) created: Option<usize>,
    pub(super) new: Option<usize>,
    pub(super) max_surge: i32,
    pub(super) max_unavailable: i32,
    pub(super) actions: Vec<DeploymentAction>,
    /// Names of sets written (coalesced at the end).
    pub(super) dirty: BTreeSet<usize>,
    pub(super) machines_by_set: BTreeMap<String, Vec<&'a Machine>>,
    pub(super) requeue_after: Retry,
}

impl<'a> Work<'a> {
    pub(super) fn now(&self) -> Timestamp {
        self.input.now
    }

    pub(super) fn olds(&self) -> Vec<usize> {
        (0..self.sets.len())
            .filter(|&i| Some(i) != self.new)
            .collect()
    }

    pub(super) fn set_name(&self, i: usize) -> String {
        self.sets[i].metadata.name.clone().unwrap_or_default()
    }

    pub(super) fn machines_of(&self, i: usize) -> &[&'a Machine] {
        self.sets[i]
            .metadata
            .uid
            .as_ref()
            .and_then(|u| self.machines_by_set.get(u))
            .map_or(&[], Vec::as_slice)
    }

    pub(super) fn nodes_of(&self, indices: &[usize], skip_preserved: bool) -> Vec<String> {
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

    pub(super) fn event(&mut self, e: Event) {
        self.actions.push(DeploymentAction::Event(e));
    }

    pub(super) fn mark_dirty(&mut self, i: usize) {
        if self.created != Some(i) && self.dirty.insert(i) {
            // Placeholder position; the final object is filled in by `finish`.
            self.actions
                .push(DeploymentAction::UpdateMachineSet(Box::new(
                    self.sets[i].clone(),
                )));
        }
    }

    pub(super) fn set_md_annotations(&mut self, a: BTreeMap<String, String>) {
        if self.md.metadata.annotations.as_ref() != Some(&a) {
            self.md.metadata.annotations = Some(a);
            self.mark_md_dirty();
        }
    }

    pub(super) fn mark_md_dirty(&mut self) {
        if !self.md_changed {
            self.md_changed = true;
            self.actions
                .push(DeploymentAction::UpdateDeployment(Box::new(
                    self.md.clone(),
                )));
        }
    }

    pub(super) fn conditions_mut(
        &mut self,
    ) -> &mut Vec<mcm_api::v1alpha1::MachineDeploymentCondition> {
        self.md
            .status
            .get_or_insert_with(Default::default)
            .conditions
            .get_or_insert_with(Vec::new)
    }

    pub(super) fn all_refs(&self) -> Vec<&MachineSet> {
        self.sets.iter().collect()
    }

    pub(super) fn all_spec_total(&self) -> i32 {
        self.sets.iter().map(spec_replicas).sum()
    }

    /// Machines that exist or are about to, for the surge ceiling: per set the largest of its
    /// spec (creations issued but not yet seen), its `status.replicas` (upstream's count, which
    /// includes terminating machines) and the machines this pass sees owned by it (fresher than a
    /// status the MachineSet controller has not rewritten yet). Counting spec alone let a rollout
    /// create past `replicas + maxSurge` while an old set's scale-down was still draining.
    pub(super) fn existing_total(&self) -> i32 {
        (0..self.sets.len())
            .map(|i| {
                let seen = i32::try_from(self.machines_of(i).len()).unwrap_or(i32::MAX);
                spec_replicas(&self.sets[i])
                    .max(status_of(&self.sets[i]).replicas.unwrap_or(0))
                    .max(seen)
            })
            .fold(0i32, i32::saturating_add)
    }

    /// Replaces placeholder write actions by the final objects and drops the update of a set
    /// that is created in this pass (its creation carries the final object).
    pub(super) fn finish(mut self) -> DeploymentPlan {
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
