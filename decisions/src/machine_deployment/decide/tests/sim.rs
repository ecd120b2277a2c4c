//! A tiny pure simulator: the deployment plan and the real MachineSet plan applied to a model
//! fleet in which new machines become Running (available) `ready_after` steps after creation.
//! The invariants of the issue are checked at every step for random replicas, maxSurge,
//! maxUnavailable, template changes and scale events. Deleted machines linger as Terminating for
//! `terminate_after` steps (drain and VM deletion take time), and MachineSet statuses are
//! rewritten only every `status_every` steps (a MachineSet controller that lags behind), so the
//! deployment plan decides on the same stale, interleaved views as the real one.

use super::*;
use crate::machine_set::expectations::Readiness;
use crate::machine_set::plan as set_plan;
use proptest::prelude::{ProptestConfig, TestCaseError, prop_assert, prop_oneof, proptest};
use proptest::strategy::Strategy as ArbStrategy;

struct Fleet {
    md: MachineDeployment,
    sets: Vec<MachineSet>,
    /// Machines with the number of steps they have been Pending.
    machines: Vec<(Machine, u32)>,
    ready_after: u32,
    /// Steps a deleted machine stays (Terminating) before it is gone.
    terminate_after: u32,
    /// MachineSet statuses are rewritten every this many steps only.
    status_every: i64,
    /// Terminating machines by name, with the steps they have been terminating.
    terminating: BTreeMap<String, u32>,
    step: i64,
    serial: u64,
    /// Target-cluster nodes (one per machine, named like it) as the in-place strategy sees them.
    nodes: BTreeMap<String, NodeView>,
    /// Steps the node agent needs for an in-place update.
    update_steps: u32,
}

#[derive(Debug, Clone)]
enum UserChange {
    Template(usize),
    Scale(i32),
}

const CLASSES: [&str; 3] = ["small", "medium", "large"];

impl Fleet {
    fn new(md: MachineDeployment, ready_after: u32) -> Self {
        Self {
            md,
            sets: Vec::new(),
            machines: Vec::new(),
            ready_after,
            terminate_after: 0,
            status_every: 1,
            terminating: BTreeMap::new(),
            step: 0,
            serial: 0,
            nodes: BTreeMap::new(),
            update_steps: 1,
        }
    }

    fn next_serial(&mut self) -> u64 {
        self.serial += 1;
        self.serial
    }

    fn now(&self) -> Timestamp {
        t(self.step * 10)
    }

    fn owned_by<'a>(&'a self, uid: &'a str) -> impl Iterator<Item = &'a Machine> + 'a {
        self.machines
            .iter()
            .map(|(m, _)| m)
            .filter(move |m| claim::controller_ref(&m.metadata).is_some_and(|r| r.uid == uid))
    }

    fn refresh_set_status(&mut self) {
        let now = self.now();
        for i in 0..self.sets.len() {
            if self.step % self.status_every != 0 && self.sets[i].status.is_some() {
                continue;
            }
            let uid = self.sets[i].metadata.uid.clone().unwrap_or_default();
            let claimed: Vec<Machine> = self.owned_by(&uid).cloned().collect();
            let st = set_plan::machine_set_status(&self.sets[i], &claimed, None, now);
            self.sets[i].status = Some(st);
        }
    }

    fn machine_list(&self) -> Vec<Machine> {
        self.machines.iter().map(|(m, _)| m.clone()).collect()
    }

    fn deployment_step(&mut self) -> DeploymentPlan {
        self.refresh_set_status();
        let machines: Vec<std::sync::Arc<Machine>> = self
            .machine_list()
            .into_iter()
            .map(std::sync::Arc::new)
            .collect();
        let nodes = self.nodes.clone();
        let input = DeploymentInput {
            deployment: &self.md,
            machine_sets: &self.sets,
            machines: &machines,
            config: DeploymentConfig::default(),
            nodes: &nodes,
            now: self.now(),
            template_class_missing: false,
        };
        let p = plan(input).unwrap();
        for a in &p.actions {
            match a {
                DeploymentAction::AddFinalizer => {
                    self.md.metadata.finalizers =
                        Some(vec![finalizer::MACHINE_CONTROLLER_MANAGER.into()]);
                }
                DeploymentAction::CreateMachineSet(ms) => {
                    let mut ms = (**ms).clone();
                    assert!(
                        !self
                            .sets
                            .iter()
                            .any(|s| s.metadata.name == ms.metadata.name),
                        "name clash on create"
                    );
                    let n = self.next_serial();
                    ms.metadata.uid = Some(format!("set-{n}"));
                    ms.metadata.creation_timestamp = Some(Time(self.now()));
                    ms.metadata.generation = Some(1);
                    self.sets.push(ms);
                }
                DeploymentAction::UpdateMachineSet(ms) => {
                    let s = self
                        .sets
                        .iter_mut()
                        .find(|s| s.metadata.name == ms.metadata.name)
                        .unwrap();
                    if s.spec != ms.spec {
                        s.metadata.generation = Some(s.metadata.generation.unwrap_or(1) + 1);
                    }
                    s.spec = ms.spec.clone();
                    s.metadata.annotations.clone_from(&ms.metadata.annotations);
                    s.metadata.labels.clone_from(&ms.metadata.labels);
                }
                DeploymentAction::DeleteMachineSet(r) => {
                    self.sets
                        .retain(|s| s.metadata.name.as_deref() != Some(&r.name));
                    self.machines.retain(|(m, _)| {
                        claim::controller_ref(&m.metadata).is_none_or(|o| o.uid != r.uid)
                    });
                }
                DeploymentAction::UpdateDeployment(d) => {
                    if self.md.spec != d.spec {
                        self.md.metadata.generation =
                            Some(self.md.metadata.generation.unwrap_or(1) + 1);
                    }
                    self.md.spec = d.spec.clone();
                    self.md
                        .metadata
                        .annotations
                        .clone_from(&d.metadata.annotations);
                }
                DeploymentAction::UpdateDeploymentStatus(s) => self.md.status = Some((**s).clone()),
                DeploymentAction::LabelNodes {
                    nodes,
                    label,
                    value,
                } => {
                    for n in nodes {
                        if let Some(v) = self.nodes.get_mut(n) {
                            v.labels.insert(label.clone(), value.clone());
                        }
                    }
                }
                DeploymentAction::CompleteNodeInPlaceUpdate(n) => {
                    if let Some(v) = self.nodes.get_mut(n) {
                        for l in [
                            label::CANDIDATE_FOR_UPDATE,
                            label::SELECTED_FOR_UPDATE,
                            label::UPDATE_RESULT,
                        ] {
                            v.labels.remove(l);
                        }
                        v.in_place_update_reason = None;
                    }
                }
                DeploymentAction::RemoveMachineLabel { machine, label } => {
                    if let Some((m, _)) = self
                        .machines
                        .iter_mut()
                        .find(|(m, _)| m.metadata.name.as_deref() == Some(&machine.name))
                        && let Some(l) = m.metadata.labels.as_mut()
                    {
                        l.remove(label);
                    }
                }
                DeploymentAction::TransferMachine {
                    machine,
                    owner,
                    labels,
                } => {
                    let (m, _) = self
                        .machines
                        .iter_mut()
                        .find(|(m, _)| m.metadata.name.as_deref() == Some(&machine.name))
                        .unwrap();
                    m.metadata.owner_references = Some(vec![owner.clone()]);
                    m.metadata.labels = Some(labels.clone());
                }
                _ => {}
            }
        }
        p
    }

    fn set_step(&mut self) {
        self.refresh_set_status();
        let nodes = BTreeMap::new();
        for i in 0..self.sets.len() {
            let machines: Vec<std::sync::Arc<Machine>> = self
                .machine_list()
                .into_iter()
                .map(std::sync::Arc::new)
                .collect();
            let input = set_plan::MachineSetInput {
                machine_set: &self.sets[i],
                machines: &machines,
                node_preserve: &nodes,
                readiness: Readiness::Satisfied,
                now: self.now(),
            };
            let p = set_plan::plan(input).unwrap();
            for a in p.actions {
                match a {
                    set_plan::MachineSetAction::AddFinalizer => {
                        self.sets[i].metadata.finalizers =
                            Some(vec![finalizer::MACHINE_CONTROLLER_MANAGER.into()]);
                    }
                    set_plan::MachineSetAction::CreateMachines { machine, count, .. } => {
                        for _ in 0..count {
                            let n = self.next_serial();
                            let mut m = (*machine).clone();
                            m.metadata.name = Some(format!("m-{n}"));
                            m.metadata.uid = Some(format!("m-uid-{n}"));
                            m.metadata.creation_timestamp = Some(Time(self.now()));
                            let node = format!("m-{n}");
                            m.metadata
                                .labels
                                .get_or_insert_with(BTreeMap::new)
                                .insert(label::NODE.into(), node.clone());
                            self.nodes.insert(node, NodeView::default());
                            m.status = Some(MachineStatus {
                                current_status: Some(CurrentStatus {
                                    phase: Some(MachinePhase::Pending),
                                    ..CurrentStatus::default()
                                }),
                                ..MachineStatus::default()
                            });
                            self.machines.push((m, 0));
                        }
                    }
                    set_plan::MachineSetAction::DeleteMachines { machines } => {
                        let names: BTreeSet<String> =
                            machines.into_iter().map(|m| m.name).collect();
                        let now = self.now();
                        for (m, _) in &mut self.machines {
                            let name = m.metadata.name.clone().unwrap_or_default();
                            if names.contains(&name) && m.metadata.deletion_timestamp.is_none() {
                                m.metadata.deletion_timestamp = Some(Time(now));
                                if let Some(cs) =
                                    m.status.as_mut().and_then(|s| s.current_status.as_mut())
                                {
                                    cs.phase = Some(MachinePhase::Terminating);
                                }
                                self.terminating.insert(name, 0);
                            }
                        }
                        self.remove_terminated();
                    }
                    _ => {}
                }
            }
        }
    }

    /// The node agent: selected nodes are updated in `update_steps` steps (machine unavailable
    /// meanwhile); a completed node lets its machine run again.
    fn run_node_agent(&mut self) {
        for (m, counter) in &mut self.machines {
            let node = m.node_name().unwrap_or_default().to_owned();
            let Some(view) = self.nodes.get_mut(&node) else {
                continue;
            };
            let phase = m.phase().cloned();
            let cs = m
                .status
                .as_mut()
                .and_then(|s| s.current_status.as_mut())
                .unwrap();
            match phase {
                Some(MachinePhase::Running)
                    if view.labels.contains_key(label::SELECTED_FOR_UPDATE)
                        && !view.labels.contains_key(label::UPDATE_RESULT) =>
                {
                    cs.phase = Some(MachinePhase::InPlaceUpdating);
                    *counter = 0;
                }
                Some(MachinePhase::InPlaceUpdating) => {
                    *counter += 1;
                    if *counter >= self.update_steps {
                        cs.phase = Some(MachinePhase::InPlaceUpdateSuccessful);
                        view.labels
                            .insert(label::UPDATE_RESULT.into(), value::UPDATE_SUCCESSFUL.into());
                        view.in_place_update_reason =
                            Some(mcm_api::keys::condition::UPDATE_SUCCESSFUL.into());
                        m.status.as_mut().unwrap().conditions =
                            Some(vec![k8s_openapi::api::core::v1::NodeCondition {
                                type_: mcm_api::keys::condition::IN_PLACE_UPDATE.into(),
                                status: "True".into(),
                                reason: Some(mcm_api::keys::condition::UPDATE_SUCCESSFUL.into()),
                                ..Default::default()
                            }]);
                    }
                }
                Some(MachinePhase::InPlaceUpdateSuccessful)
                    if !view.labels.contains_key(label::UPDATE_RESULT) =>
                {
                    cs.phase = Some(MachinePhase::Running);
                }
                _ => {}
            }
        }
    }

    /// Machines terminating for `terminate_after` steps are gone.
    fn remove_terminated(&mut self) {
        let limit = self.terminate_after;
        let gone: BTreeSet<String> = self
            .terminating
            .iter()
            .filter(|(_, steps)| **steps >= limit)
            .map(|(n, _)| n.clone())
            .collect();
        self.machines
            .retain(|(m, _)| !gone.contains(m.metadata.name.as_deref().unwrap_or("")));
        self.terminating.retain(|n, _| !gone.contains(n));
    }

    fn age_machines(&mut self) {
        for steps in self.terminating.values_mut() {
            *steps += 1;
        }
        self.remove_terminated();
        let ready_after = self.ready_after;
        for (m, pending) in &mut self.machines {
            if m.phase() == Some(&MachinePhase::Pending) {
                *pending += 1;
                if *pending >= ready_after
                    && let Some(cs) = m.status.as_mut().and_then(|s| s.current_status.as_mut())
                {
                    cs.phase = Some(MachinePhase::Running);
                }
            }
        }
        self.step += 1;
    }

    fn available(&self) -> i32 {
        i32::try_from(
            self.machines
                .iter()
                .filter(|(m, _)| m.phase() == Some(&MachinePhase::Running))
                .count(),
        )
        .unwrap()
    }

    fn total(&self) -> i32 {
        i32::try_from(self.machines.len()).unwrap()
    }

    fn spec_total(&self) -> i32 {
        self.sets.iter().map(|s| s.spec.replicas.unwrap_or(0)).sum()
    }

    fn apply(&mut self, change: &UserChange) {
        match change {
            UserChange::Template(c) => self.md.spec.template = template(CLASSES[*c]),
            UserChange::Scale(n) => self.md.spec.replicas = Some(*n),
        }
        self.md.metadata.generation = Some(self.md.metadata.generation.unwrap_or(1) + 1);
    }

    fn new_set(&self) -> Option<&MachineSet> {
        revision::find_new_machine_set(&self.md, &self.sets).map(|i| &self.sets[i])
    }

    fn converged(&self) -> bool {
        let r = self.md.spec.replicas.unwrap_or(0);
        let Some(new) = self.new_set() else {
            return r == 0 && self.machines.is_empty();
        };
        let new_uid = new.metadata.uid.clone().unwrap_or_default();
        new.spec.replicas == Some(r)
            && self.available() == r
            && self.total() == r
            && self.owned_by(&new_uid).count() == usize::try_from(r).unwrap()
            && self
                .sets
                .iter()
                .filter(|s| s.metadata.uid != new.metadata.uid)
                .all(|s| s.spec.replicas.unwrap_or(0) == 0)
    }
}

fn arb_changes() -> impl ArbStrategy<Value = Vec<(i64, UserChange)>> {
    proptest::collection::vec(
        (
            1i64..40,
            prop_oneof![
                (0usize..3).prop_map(UserChange::Template),
                (0i32..9).prop_map(UserChange::Scale),
            ],
        ),
        0..4,
    )
    .prop_map(|mut v| {
        v.sort_by_key(|(at, _)| *at);
        v
    })
}

/// How fast the model fleet moves.
#[derive(Debug, Clone, Copy)]
struct Timing {
    /// Steps from creation to Running.
    ready_after: u32,
    /// Steps a deleted machine stays Terminating.
    terminate_after: u32,
    /// MachineSet statuses are rewritten every this many steps.
    status_every: i64,
}

impl Timing {
    fn quick(ready_after: u32) -> Self {
        Self {
            ready_after,
            terminate_after: 0,
            status_every: 1,
        }
    }
}

/// Runs a scenario, checking the rolling invariants at every step, until it converges after the
/// last change.
fn run_rolling(
    replicas: i32,
    surge: i32,
    unavailable: i32,
    timing: Timing,
    changes: &[(i64, UserChange)],
) -> Result<(), TestCaseError> {
    let md = deployment(Strategy::RollingUpdate, replicas, surge, unavailable);
    let mut fleet = Fleet::new(md, timing.ready_after);
    fleet.terminate_after = timing.terminate_after;
    fleet.status_every = timing.status_every;
    let last_change = changes.last().map_or(0, |(at, _)| *at);
    let mut floor_reached = false;
    let mut history: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for step in 0..(last_change + 200) {
        let before = fleet.total();
        for (_, change) in changes.iter().filter(|(at, _)| *at == step) {
            if matches!(change, UserChange::Scale(_)) {
                floor_reached = false;
            }
            fleet.apply(change);
        }
        fleet.deployment_step();
        fleet.set_step();
        let r = fleet.md.spec.replicas.unwrap_or(0);
        let (s, u) = fencepost::resolve_fenceposts(
            Some(&IntOrString::Int(surge)),
            Some(&IntOrString::Int(unavailable)),
            r,
        )
        .unwrap();
        let ceiling = r + s;
        prop_assert!(
            fleet.spec_total() <= ceiling,
            "step {step}: Σ spec {} > {ceiling}",
            fleet.spec_total()
        );
        // Every Machine object counts, terminating ones included. After a scale-down the fleet
        // may be above the new ceiling until the removed machines are gone, but the controllers
        // must never add to it then.
        prop_assert!(
            fleet.total() <= ceiling.max(before),
            "step {step}: {} machines > {ceiling} (and {before} before this step)",
            fleet.total()
        );
        let floor = r - u.min(r);
        if floor_reached {
            prop_assert!(
                fleet.available() >= floor,
                "step {step}: available {} < {floor}",
                fleet.available()
            );
        } else if fleet.available() >= floor {
            floor_reached = true;
        }
        if step > last_change + 2 {
            let new_uid = fleet.new_set().and_then(|n| n.metadata.uid.clone());
            for set in &fleet.sets {
                let uid = set.metadata.uid.clone().unwrap_or_default();
                let h = history.entry(uid.clone()).or_default();
                let size = set.spec.replicas.unwrap_or(0);
                if let Some(prev) = h.last() {
                    if Some(&uid) == new_uid.as_ref() {
                        prop_assert!(size >= *prev, "step {step}: new set shrank {prev} → {size}");
                    } else {
                        prop_assert!(size <= *prev, "step {step}: old set grew {prev} → {size}");
                    }
                }
                h.push(size);
            }
        }
        fleet.age_machines();
        if step > last_change && fleet.converged() {
            return Ok(());
        }
    }
    prop_assert!(
        false,
        "did not converge: replicas {replicas} surge {surge} unavailable {unavailable} sets {:?}",
        fleet
            .sets
            .iter()
            .map(|s| (s.metadata.name.clone(), s.spec.replicas, s.status.clone()))
            .collect::<Vec<_>>()
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// RollingUpdate, with slow terminations and lagging MachineSet statuses: Σ spec and the
    /// Machine objects (terminating ones included) never exceed replicas + maxSurge; once reached,
    /// availability never drops below replicas − maxUnavailable (until the next scale event);
    /// after the last change the new set only grows and old ones only shrink (no flapping); the
    /// fleet converges on the new template.
    #[test]
    fn prop_rolling_update_invariants(
        replicas in 0i32..8,
        surge in 0i32..4,
        unavailable in 0i32..4,
        ready_after in 1u32..4,
        terminate_after in 0u32..4,
        status_every in 1i64..4,
        changes in arb_changes(),
    ) {
        let mut changes = changes;
        // Always roll out at least once.
        changes.insert(0, (1, UserChange::Template(2)));
        changes.sort_by_key(|(at, _)| *at);
        let timing = Timing { ready_after, terminate_after, status_every };
        run_rolling(replicas, surge, unavailable, timing, &changes)?;
    }

    /// Recreate: machines of two templates never coexist, and the fleet converges.
    #[test]
    fn prop_recreate_never_mixes(replicas in 0i32..6, ready_after in 1u32..4, changes in arb_changes()) {
        let md = deployment(Strategy::Recreate, replicas, 0, 0);
        let mut fleet = Fleet::new(md, ready_after);
        let last_change = changes.last().map_or(0, |(at, _)| *at);
        let mut converged = false;
        for step in 0..(last_change + 100) {
            for (_, change) in changes.iter().filter(|(at, _)| *at == step) {
                fleet.apply(change);
            }
            fleet.deployment_step();
            fleet.set_step();
            let owners: BTreeSet<String> = fleet
                .machines
                .iter()
                .filter_map(|(m, _)| claim::controller_ref(&m.metadata).map(|r| r.uid.clone()))
                .collect();
            let templates: BTreeSet<String> = owners
                .iter()
                .filter_map(|uid| fleet.sets.iter().find(|s| s.metadata.uid.as_ref() == Some(uid)))
                .map(|s| s.spec.template.as_ref().and_then(|t| t.spec.as_ref()).and_then(|s| s.class.as_ref()).and_then(|c| c.name.clone()).unwrap_or_default())
                .collect();
            prop_assert!(templates.len() <= 1, "step {step}: templates {templates:?} coexist");
            fleet.age_machines();
            if step > last_change && fleet.converged() {
                converged = true;
                break;
            }
        }
        prop_assert!(converged);
    }
}

#[test]
fn scale_in_the_middle_of_a_rollout_converges() {
    for (r0, r1) in [(5, 2), (2, 7), (6, 0), (0, 4)] {
        let changes = vec![(1, UserChange::Template(1)), (3, UserChange::Scale(r1))];
        run_rolling(r0, 1, 1, Timing::quick(3), &changes).unwrap();
        let slow = Timing {
            ready_after: 3,
            terminate_after: 3,
            status_every: 2,
        };
        run_rolling(r0, 1, 1, slow, &changes).unwrap();
    }
}

#[test]
fn rollback_restores_previous_template() {
    let md = deployment(Strategy::RollingUpdate, 3, 1, 0);
    let mut fleet = Fleet::new(md, 1);
    let run = |fleet: &mut Fleet| {
        for _ in 0..60 {
            fleet.deployment_step();
            fleet.set_step();
            fleet.age_machines();
            if fleet.converged() && fleet.md.spec.rollback_to.is_none() {
                return;
            }
        }
        panic!("did not converge");
    };
    run(&mut fleet);
    let first = fleet.new_set().unwrap().metadata.name.clone();
    fleet.apply(&UserChange::Template(2));
    run(&mut fleet);
    assert_ne!(fleet.new_set().unwrap().metadata.name, first);
    fleet.md.spec.rollback_to = Some(RollbackConfig { revision: Some(0) });
    run(&mut fleet);
    assert!(revision::equal_ignore_hash(
        &fleet.md.spec.template,
        &template("small")
    ));
    assert_eq!(
        fleet.new_set().unwrap().metadata.name,
        first,
        "the original set is reused"
    );
    let revision = fleet
        .new_set()
        .unwrap()
        .metadata
        .annotations
        .as_ref()
        .unwrap()[annotation::REVISION]
        .clone();
    assert_eq!(revision, "3");
    assert_eq!(
        fleet
            .new_set()
            .unwrap()
            .metadata
            .annotations
            .as_ref()
            .unwrap()[annotation::REVISION_HISTORY],
        "1"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Automatic InPlaceUpdate: machines are updated in place and handed over, never more than
    /// replicas + maxSurge exist, availability stays at replicas − maxUnavailable once reached,
    /// and every machine ends up Running under the new set.
    #[test]
    fn prop_in_place_update_invariants(
        replicas in 1i32..7,
        surge in 0i32..2,
        unavailable in 0i32..3,
        update_steps in 1u32..4,
    ) {
        let mut md = deployment(Strategy::InPlaceUpdate, replicas, surge, unavailable);
        let strategy = md.spec.strategy.as_mut().unwrap();
        strategy.in_place_update = Some(mcm_api::v1alpha1::InPlaceUpdateMachineDeployment {
            update_configuration: strategy.rolling_update.take().unwrap().update_configuration,
            orchestration_type: Some(mcm_api::v1alpha1::OrchestrationType::Auto),
        });
        let mut fleet = Fleet::new(md, 1);
        fleet.update_steps = update_steps;
        let (s, u) = fencepost::resolve_fenceposts(
            Some(&IntOrString::Int(surge)),
            Some(&IntOrString::Int(unavailable)),
            replicas,
        )
        .unwrap();
        let floor = replicas - u.min(replicas);
        let mut reached = false;
        let mut converged = false;
        for step in 0..200 {
            if step == 5 {
                fleet.apply(&UserChange::Template(1));
            }
            fleet.deployment_step();
            fleet.set_step();
            prop_assert!(fleet.total() <= replicas + s, "step {step}: {} machines", fleet.total());
            if reached {
                prop_assert!(fleet.available() >= floor, "step {step}: available {} < {floor}", fleet.available());
            } else if fleet.available() >= floor {
                reached = true;
            }
            fleet.run_node_agent();
            fleet.age_machines();
            let nodes_clean = fleet.machines.iter().all(|(m, _)| {
                fleet.nodes.get(m.node_name().unwrap_or_default()).is_none_or(|n| n.labels.is_empty())
            });
            if step > 5 && fleet.converged() && nodes_clean {
                converged = true;
                break;
            }
        }
        prop_assert!(converged, "did not converge: {:?}", fleet.sets.iter().map(|s| (s.metadata.name.clone(), s.spec.replicas)).collect::<Vec<_>>());
    }
}
