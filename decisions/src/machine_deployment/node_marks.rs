//! What a rollout marks on nodes and sets: the `PreferNoSchedule` taint on the nodes of old
//! MachineSets (and its removal from the set that becomes current) and the cluster-autoscaler's
//! scale-down-disabled annotations while old sets still run machines.

use std::collections::BTreeMap;

use mcm_api::keys::{annotation, value};

use super::types::{DeploymentAction, ann, spec_replicas, status_of};
use super::work::Work;

impl Work<'_> {
    pub(super) fn old_sets_all_scaled_to_zero(&self) -> bool {
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

    pub(super) fn autoscaler_annotations_for_rollout(&mut self) {
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

    pub(super) fn taint_old_sets(&mut self) {
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

    pub(super) fn untaint_set(&mut self, i: usize) {
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
}
