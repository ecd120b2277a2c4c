//! The Recreate strategy (upstream `deployment_recreate.go`, docs/behaviour.md#recreate): scale every old
//! MachineSet to 0, wait until their machines are gone, then scale the new one up.

use super::fencepost::replicas;
use super::types::{spec_replicas, status_of};
use super::work::Work;

impl Work<'_> {
    pub(super) fn recreate(&mut self) {
        self.sync_revision(false);
        self.autoscaler_annotations_for_rollout();
        // Recreate deletes the old machines before the new set exists; with the new template's
        // class missing that would leave the deployment with none until the class appears, so
        // the old machines stay (docs/behaviour.md#missing-class).
        if self.input.template_class_missing
            && self
                .olds()
                .iter()
                .any(|&i| spec_replicas(&self.sets[i]) > 0)
        {
            self.rollout_status();
            return;
        }
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
}

#[cfg(test)]
mod tests;
