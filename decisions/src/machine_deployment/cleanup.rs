//! After a complete rollout (upstream `cleanupMachineDeployment` and the end of the rollouts):
//! lift the rollout's node marks and delete old MachineSets beyond `revisionHistoryLimit`.

use super::revision;
use super::types::{DeploymentAction, spec_replicas, status_of};
use super::work::Work;
use crate::machine_set::types::MachineRef;

impl Work<'_> {
    pub(super) fn on_complete(&mut self) {
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

    /// `cleanupMachineDeployment` (docs/behaviour.md#cleanup).
    pub(super) fn cleanup(&mut self) {
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
}

#[cfg(test)]
mod tests;
