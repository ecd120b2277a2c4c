//! The RollingUpdate strategy (upstream `deployment_rolling.go`, docs/behaviour.md#rolling-update): grow the new
//! MachineSet within `replicas + maxSurge`, shrink the old ones while at least
//! `replicas - maxUnavailable` machines stay available.

use super::fencepost::replicas;
use super::new_machine_set::new_machine_set_replicas;
use super::revision;
use super::types::{spec_replicas, status_of};
use super::work::Work;

impl Work<'_> {
    pub(super) fn rolling(&mut self) {
        self.sync_revision(true);
        self.taint_old_sets();
        self.autoscaler_annotations_for_rollout();
        if self.reconcile_new() || self.reconcile_old() {
            self.rollout_status();
            return;
        }
        if self.previous_status_complete() {
            self.on_complete();
        }
        self.rollout_status();
    }

    /// `reconcileNewMachineSet` (docs/behaviour.md#rolling-update step 4).
    pub(super) fn reconcile_new(&mut self) -> bool {
        let Some(n) = self.new else {
            return false;
        };
        let want = replicas(&self.md);
        let current = spec_replicas(&self.sets[n]);
        if current == want {
            return false;
        }
        if current > want {
            return self.scale(n, want);
        }
        let target =
            new_machine_set_replicas(&self.md, self.existing_total(), current, self.max_surge);
        self.scale(n, target)
    }

    /// `reconcileOldMachineSets` (docs/behaviour.md#rolling-update step 5).
    pub(super) fn reconcile_old(&mut self) -> bool {
        let mut olds: Vec<usize> = self
            .olds()
            .into_iter()
            .filter(|&i| spec_replicas(&self.sets[i]) > 0)
            .collect();
        if olds.is_empty() {
            return false;
        }
        olds.sort_by(|&a, &b| revision::creation_order(&self.sets[a], &self.sets[b]));
        // A new template whose class is missing never brings a machine up: no old machine may
        // go for it (docs/behaviour.md#missing-class), whatever maxUnavailable allows.
        let max_unavailable = if self.input.template_class_missing {
            0
        } else {
            self.max_unavailable
        };
        let min_available = replicas(&self.md) - max_unavailable;
        let new_unavailable = self.new.map_or(0, |n| {
            spec_replicas(&self.sets[n]) - status_of(&self.sets[n]).available_replicas.unwrap_or(0)
        });
        let max_scaled_down = self.all_spec_total() - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return false;
        }
        // cleanupUnhealthyReplicas: drop unavailable old replicas first.
        let mut cleaned = 0;
        for &i in &olds {
            if cleaned >= max_scaled_down {
                break;
            }
            let spec = spec_replicas(&self.sets[i]);
            let available = status_of(&self.sets[i]).available_replicas.unwrap_or(0);
            if spec == 0 || spec <= available {
                continue;
            }
            let down = (max_scaled_down - cleaned).min(spec - available);
            self.scale(i, spec - down);
            cleaned += down;
        }
        // scaleDownOldMachineSetsForRollingUpdate. Deviation: a set counts at most its spec
        // replicas as available. Right after a scale-down its status still reports the machines
        // being removed; counting them would let a second pass scale down below the minimum.
        let available: i32 = self
            .sets
            .iter()
            .map(|s| {
                status_of(s)
                    .available_replicas
                    .unwrap_or(0)
                    .min(spec_replicas(s).max(0))
            })
            .sum();
        let mut scaled = 0;
        if available > min_available {
            let budget = available - min_available;
            for &i in &olds {
                if scaled >= budget {
                    break;
                }
                let spec = spec_replicas(&self.sets[i]);
                if spec == 0 {
                    continue;
                }
                let down = spec.min(budget - scaled);
                self.scale(i, spec - down);
                scaled += down;
            }
        }
        cleaned + scaled > 0
    }
}

#[cfg(test)]
mod tests;
