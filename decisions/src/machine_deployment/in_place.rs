//! The InPlaceUpdate strategy (docs/behaviour.md#in-place-rollout, `rolloutInPlace`): old machines are updated in
//! place by a node agent and handed over to the new MachineSet instead of being replaced.
//!
//! Machines of a MachineSet are those it controls (upstream lists them by the set's
//! `matchLabels`; the controller reference is equivalent for claimed machines and never picks a
//! foreign one).

use std::collections::BTreeMap;

use mcm_api::keys::{condition, label, value};
use mcm_api::v1alpha1::{Machine, MachineDeployment, MachinePhase, OrchestrationType};

use super::fencepost::replicas;
use super::types::{DeploymentAction, NodeView, spec_replicas, status_of};
use super::work::Work;
use crate::machine_set::claim;
use crate::machine_set::types::MachineRef;

fn is_manual(md: &MachineDeployment) -> bool {
    md.spec
        .strategy
        .as_ref()
        .and_then(|s| s.in_place_update.as_ref())
        .and_then(|i| i.orchestration_type.as_ref())
        == Some(&OrchestrationType::Manual)
}

fn machine_update_successful(m: &Machine) -> bool {
    m.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == condition::IN_PLACE_UPDATE))
        .and_then(|c| c.reason.as_deref())
        == Some(condition::UPDATE_SUCCESSFUL)
}

fn label_is(labels: Option<&BTreeMap<String, String>>, key: &str, want: &str) -> bool {
    labels.and_then(|l| l.get(key)).map(String::as_str) == Some(want)
}

fn machine_ref(m: &Machine) -> MachineRef {
    MachineRef {
        name: m.metadata.name.clone().unwrap_or_default(),
        uid: m.metadata.uid.clone().unwrap_or_default(),
    }
}

/// Whether `node` carries label `key`, whatever its value (upstream tests presence for the
/// selected-for-update and candidate-for-update labels when counting and selecting).
fn node_has_key(nodes: &BTreeMap<String, NodeView>, node: &str, key: &str) -> bool {
    nodes.get(node).is_some_and(|n| n.labels.contains_key(key))
}

/// `getMachinesUndergoingUpdate`: how many of `machines` have a node carrying the
/// selected-for-update label. Machines without a node (or whose node is not known) do not count.
pub(super) fn machines_undergoing_update<'m>(
    machines: impl IntoIterator<Item = &'m Machine>,
    nodes: &BTreeMap<String, NodeView>,
) -> i32 {
    let count = machines
        .into_iter()
        .filter(|m| {
            m.node_name()
                .filter(|n| !n.is_empty())
                .is_some_and(|node| node_has_key(nodes, node, label::SELECTED_FOR_UPDATE))
        })
        .count();
    i32::try_from(count).unwrap_or(i32::MAX)
}

/// `getMachinesForDrain`: the first `count` of `machines` whose node is a candidate for update
/// and not selected yet.
pub(super) fn machines_for_drain<'m>(
    machines: &[&'m Machine],
    nodes: &BTreeMap<String, NodeView>,
    count: usize,
) -> Vec<&'m Machine> {
    machines
        .iter()
        .copied()
        .filter(|m| {
            m.node_name().filter(|n| !n.is_empty()).is_some_and(|node| {
                node_has_key(nodes, node, label::CANDIDATE_FOR_UPDATE)
                    && !node_has_key(nodes, node, label::SELECTED_FOR_UPDATE)
            })
        })
        .take(count)
        .collect()
}

impl Work<'_> {
    fn node_update_successful(&self, node: &str) -> bool {
        self.input.nodes.get(node).is_some_and(|n| {
            n.in_place_update_reason.as_deref() == Some(condition::UPDATE_SUCCESSFUL)
                && label_is(
                    Some(&n.labels),
                    label::UPDATE_RESULT,
                    value::UPDATE_SUCCESSFUL,
                )
        })
    }

    fn node_has_label(&self, node: &str, key: &str) -> bool {
        self.input
            .nodes
            .get(node)
            .is_some_and(|n| label_is(Some(&n.labels), key, value::TRUE))
    }

    fn old_spec_total(&self) -> i32 {
        self.olds()
            .iter()
            .map(|&i| spec_replicas(&self.sets[i]))
            .sum()
    }

    /// `rolloutInPlace`.
    pub(super) fn in_place(&mut self) {
        self.sync_revision(true);
        if !self.olds().is_empty() && !self.old_sets_all_scaled_to_zero() {
            for i in self.olds() {
                let labels = self.sets[i]
                    .metadata
                    .labels
                    .get_or_insert_with(BTreeMap::new);
                if labels.get(label::SCALE_UP_DISABLED).map(String::as_str) != Some(value::TRUE) {
                    labels.insert(label::SCALE_UP_DISABLED.to_owned(), value::TRUE.to_owned());
                    self.mark_dirty(i);
                }
            }
            self.autoscaler_annotations_for_rollout();
        }
        self.taint_old_sets();
        let olds = self.olds();
        let candidates: Vec<String> = self
            .nodes_of(&olds, false)
            .into_iter()
            .filter(|n| !self.node_has_label(n, label::CANDIDATE_FOR_UPDATE))
            .collect();
        if !candidates.is_empty() {
            self.actions.push(DeploymentAction::LabelNodes {
                nodes: candidates,
                label: label::CANDIDATE_FOR_UPDATE.to_owned(),
                value: value::TRUE.to_owned(),
            });
        }
        self.sync_in_place_sets();
        if self.reconcile_new_in_place() || self.reconcile_old_in_place() {
            self.rollout_status();
            return;
        }
        if self.previous_status_complete() {
            self.on_complete();
        }
        self.rollout_status();
    }

    /// `syncMachineSets`.
    pub(super) fn sync_in_place_sets(&mut self) {
        if let Some(n) = self.new {
            let machines: Vec<&Machine> = self.machines_of(n).to_vec();
            let updated: Vec<&Machine> = machines
                .iter()
                .copied()
                .filter(|m| {
                    label_is(
                        m.metadata.labels.as_ref(),
                        label::UPDATE_RESULT,
                        value::UPDATE_SUCCESSFUL,
                    ) && machine_update_successful(m)
                })
                .collect();
            let count = i32::try_from(machines.len()).unwrap_or(i32::MAX);
            let spec = spec_replicas(&self.sets[n]);
            if !updated.is_empty() && count > spec {
                let extra = i32::try_from(updated.len())
                    .unwrap_or(i32::MAX)
                    .min(count - spec);
                self.scale(n, spec + extra);
            }
            for m in &updated {
                self.actions.push(DeploymentAction::RemoveMachineLabel {
                    machine: machine_ref(m),
                    label: label::UPDATE_RESULT.to_owned(),
                });
            }
            for m in &machines {
                if let Some(node) = m.node_name().filter(|n| !n.is_empty())
                    && self.node_update_successful(node)
                {
                    self.actions
                        .push(DeploymentAction::CompleteNodeInPlaceUpdate(node.to_owned()));
                }
            }
        }
        for i in self.olds() {
            let count = i32::try_from(self.machines_of(i).len()).unwrap_or(i32::MAX);
            if count < spec_replicas(&self.sets[i]) {
                self.scale(i, count);
            }
        }
    }

    /// `reconcileNewMachineSetInPlace`: returns whether anything was scaled or moved.
    pub(super) fn reconcile_new_in_place(&mut self) -> bool {
        let Some(n) = self.new else {
            return false;
        };
        let want = replicas(&self.md);
        let new_spec = spec_replicas(&self.sets[n]);
        if new_spec == want {
            return false;
        }
        if new_spec > want {
            return self.scale(n, want);
        }
        let old_total = self.old_spec_total();
        if old_total == 0 {
            return self.scale(n, want);
        }
        if old_total + new_spec < want {
            return self.scale(n, want - old_total);
        }
        // Transfer the machines whose in-place update succeeded.
        let Some(new_set) = self.sets.get(n) else {
            return false;
        };
        let new_name = new_set.metadata.name.clone().unwrap_or_default();
        let new_uid = new_set.metadata.uid.clone().unwrap_or_default();
        let new_selector = new_set
            .spec
            .selector
            .as_ref()
            .and_then(|s| s.match_labels.clone())
            .unwrap_or_default();
        let owner = claim::owner_reference(crate::machine_set::types::KIND, &new_name, &new_uid);
        let mut moved_total = 0;
        for i in self.olds() {
            let old_selector = self.sets[i]
                .spec
                .selector
                .as_ref()
                .and_then(|s| s.match_labels.clone())
                .unwrap_or_default();
            let movable: Vec<&Machine> = self
                .machines_of(i)
                .iter()
                .copied()
                .filter(|m| {
                    m.node_name().is_some_and(|node| {
                        self.input.nodes.contains_key(node) && self.node_update_successful(node)
                    }) && machine_update_successful(m)
                        && m.phase() != Some(&MachinePhase::InPlaceUpdating)
                })
                .collect();
            if movable.is_empty() {
                continue;
            }
            for m in &movable {
                let mut labels: BTreeMap<String, String> = m
                    .metadata
                    .labels
                    .clone()
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|(k, _)| !old_selector.contains_key(k))
                    .collect();
                labels.extend(new_selector.clone());
                labels.insert(
                    label::UPDATE_RESULT.to_owned(),
                    value::UPDATE_SUCCESSFUL.to_owned(),
                );
                self.actions.push(DeploymentAction::TransferMachine {
                    machine: machine_ref(m),
                    owner: owner.clone(),
                    labels,
                });
                if let Some(node) = m.node_name() {
                    self.actions
                        .push(DeploymentAction::UncordonNode(node.to_owned()));
                }
            }
            let moved = i32::try_from(movable.len()).unwrap_or(i32::MAX);
            let spec = spec_replicas(&self.sets[i]);
            self.scale(i, (spec - moved).max(0));
            moved_total += moved;
        }
        if moved_total == 0 {
            return false;
        }
        self.scale(n, new_spec + moved_total);
        true
    }

    /// `reconcileOldMachineSetsInPlace`: selects nodes for update within the availability budget;
    /// returns whether anything was scaled or selected.
    pub(super) fn reconcile_old_in_place(&mut self) -> bool {
        let old_total = self.old_spec_total();
        if old_total == 0 {
            return false;
        }
        let want = replicas(&self.md);
        let Some(n) = self.new else {
            return false;
        };
        let new_spec = spec_replicas(&self.sets[n]);
        if new_spec == want {
            // Upstream scales every old set to 0 at once here, which with maxSurge ≥ 1 deletes
            // available old machines before the surge machines are up. We scale them down like a
            // rolling update instead, within maxUnavailable.
            return self.reconcile_old();
        }
        if is_manual(&self.md) {
            return false;
        }
        let mut olds = self.olds();
        olds.sort_by(|&a, &b| super::revision::creation_order(&self.sets[a], &self.sets[b]));
        let undergoing = machines_undergoing_update(
            olds.iter()
                .flat_map(|&i| self.machines_of(i).iter().copied()),
            self.input.nodes,
        );
        if undergoing + new_spec >= want {
            return false;
        }
        let min_available = want - self.max_unavailable;
        let new_unavailable =
            (new_spec - status_of(&self.sets[n]).available_replicas.unwrap_or(0)).max(0);
        let max_update_possible =
            self.all_spec_total() - min_available - new_unavailable - undergoing;
        if max_update_possible <= 0 {
            return false;
        }
        let available: i32 = self
            .sets
            .iter()
            .map(|s| status_of(s).available_replicas.unwrap_or(0))
            .sum::<i32>()
            - undergoing;
        if available <= min_available {
            return false;
        }
        let max_selectable =
            usize::try_from((available - min_available).min((want - new_spec).max(0))).unwrap_or(0);
        // `selectNumOfMachineForUpdate`: oldest set first, from each at most its spec replicas.
        let mut selected: Vec<String> = Vec::new();
        for &i in &olds {
            if selected.len() >= max_selectable {
                break;
            }
            let spec = usize::try_from(spec_replicas(&self.sets[i])).unwrap_or(0);
            if spec == 0 {
                continue;
            }
            let count = spec.min(max_selectable - selected.len());
            for m in machines_for_drain(self.machines_of(i), self.input.nodes, count) {
                if let Some(node) = m.node_name()
                    && !selected.iter().any(|s| s == node)
                {
                    selected.push(node.to_owned());
                }
            }
        }
        if selected.is_empty() {
            return false;
        }
        self.actions.push(DeploymentAction::LabelNodes {
            nodes: selected,
            label: label::SELECTED_FOR_UPDATE.to_owned(),
            value: value::TRUE.to_owned(),
        });
        true
    }
}

#[cfg(test)]
mod tests;
