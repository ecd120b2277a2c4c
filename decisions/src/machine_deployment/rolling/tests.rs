//! Tests of the RollingUpdate strategy.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use crate::machine_deployment::decide::plan;
use crate::machine_deployment::new_machine_set::*;
use crate::machine_deployment::revision::{self};
use crate::machine_deployment::status;
use crate::machine_deployment::tests::fixtures::*;
use crate::machine_deployment::types::*;
use crate::machine_set::claim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use mcm_api::keys::{annotation, label};
use mcm_api::v1alpha1::{
    Machine, MachineDeployment, MachineDeploymentConditionType as CondType,
    MachineDeploymentStrategyType as Strategy, MachineSet, MachineSpec,
};

#[test]
fn rolling_creates_named_new_set_with_surge_and_taints_old_nodes() {
    let mut md = deployment(Strategy::RollingUpdate, 3, 1, 0);
    let old = set(&md, "small", 1, 3, 3, 100);
    md.status = Some(status::calculate_status(
        &md,
        &[&old],
        Some(&old),
        0,
        t(-50),
    ));
    md.spec.template = template("large");
    let mut machine = Machine::new("m1", MachineSpec::default());
    machine.metadata.namespace = Some("ns".into());
    machine.metadata.labels = Some(BTreeMap::from([
        ("name".to_owned(), "pool".to_owned()),
        (label::NODE.to_owned(), "node-1".to_owned()),
    ]));
    machine.metadata.owner_references =
        Some(vec![claim::owner_reference("MachineSet", "x", "uid-small")]);
    let sets = vec![old];
    let machines = vec![machine];
    let p = plan(input(&md, &sets, &machines)).unwrap();
    let created: Vec<&MachineSet> = p
        .actions
        .iter()
        .filter_map(|a| match a {
            DeploymentAction::CreateMachineSet(ms) => Some(&**ms),
            _ => None,
        })
        .collect();
    assert_eq!(created.len(), 1);
    let hash = revision::template_hash(&template("large"), None);
    assert_eq!(
        created[0].metadata.name.as_deref(),
        Some(format!("pool-{}", hash.suffix).as_str())
    );
    assert_eq!(created[0].spec.replicas, Some(1));
    assert_eq!(
        created[0].metadata.annotations.as_ref().unwrap()[annotation::REVISION],
        "2"
    );
    assert!(
        p.actions
            .contains(&DeploymentAction::TaintNodesPreferNoSchedule(vec![
                "node-1".into()
            ]))
    );
    assert!(
        p.actions
            .contains(&DeploymentAction::DisableAutoscalerScaleDown(vec![
                "node-1".into()
            ]))
    );
    // Old set marked as tainted, not scaled (maxUnavailable 0 and the new one is not available).
    let old_update = p
        .actions
        .iter()
        .find_map(|a| match a {
            DeploymentAction::UpdateMachineSet(ms) => Some(ms),
            _ => None,
        })
        .unwrap();
    assert_eq!(old_update.spec.replicas, Some(3));
    assert_eq!(
        old_update.metadata.annotations.as_ref().unwrap()[annotation::PREFER_NO_SCHEDULE],
        "True"
    );
    let st = status_written(&p.actions).unwrap();
    let progressing = status::condition(st.conditions.as_ref(), &CondType::Progressing).unwrap();
    assert_eq!(
        progressing.reason.as_deref(),
        Some(REASON_NEW_MACHINE_SET_CREATED)
    );
    // The deployment records the new revision.
    assert!(
        p.actions
            .iter()
            .any(|a| matches!(a, DeploymentAction::UpdateDeployment(d)
        if d.metadata.annotations.as_ref().unwrap()[annotation::REVISION] == "2"))
    );
}

#[test]
fn rolling_scales_old_down_within_max_unavailable() {
    let mut md = deployment(Strategy::RollingUpdate, 4, 1, 1);
    let old = set(&md, "small", 1, 4, 4, 100);
    md.spec.template = template("large");
    let mut new = set(&md, "large", 2, 1, 1, 10);
    new.spec.template = Some(md.spec.template.clone());
    let sets = vec![old.clone(), new];
    let p = plan(input(&md, &sets, &[])).unwrap();
    // Σspec 5, min available 3, new fully available: scale old down by 5-3-0 = 2 capped by
    // available budget 5-3 = 2.
    assert_eq!(scaled(&p.actions)[old.metadata.name.as_deref().unwrap()], 2);
}

#[test]
fn stale_availability_of_a_scaled_down_old_set_is_not_counted_twice() {
    // The old set was just scaled 4 → 3 but its status still reports 4 available (the machine
    // set controller has not caught up). New set: 1 of 2 available; Σspec 5 = replicas + surge,
    // so the new set cannot grow. Minimum available = 4 - 1 = 3.
    let mut md = deployment(Strategy::RollingUpdate, 4, 1, 1);
    let old = set(&md, "small", 1, 3, 4, 100);
    md.spec.template = template("large");
    let mut new = set(&md, "large", 2, 2, 1, 10);
    new.spec.template = Some(md.spec.template.clone());
    let sets = vec![old.clone(), new];
    let p = plan(input(&md, &sets, &[])).unwrap();
    // Counting the stale 4 gives a budget of 4 + 1 - 3 = 2 and old → 1 (really 1 + 1 available);
    // capped at spec, 3 + 1 - 3 = 1 and old → 2 (really 2 + 1 = the minimum).
    assert_eq!(scaled(&p.actions)[old.metadata.name.as_deref().unwrap()], 2);
}

/// Deployment of 5, maxSurge 2, maxUnavailable 0, rolled from `small` to `large`: the new set
/// has 2 machines (booting), the old set has just been scaled 5 → 4 but its fifth machine still
/// exists. Σ spec is 6 < 7, yet 7 machines exist: the new set must not grow.
fn mid_rollout_with_a_terminating_old_machine() -> (MachineDeployment, MachineSet, MachineSet) {
    let mut md = deployment(Strategy::RollingUpdate, 5, 2, 0);
    let mut old = set(&md, "small", 1, 4, 4, 100);
    md.spec.template = template("large");
    let mut new = set(&md, "large", 2, 2, 0, 10);
    new.spec.template = Some(md.spec.template.clone());
    new.status.as_mut().unwrap().replicas = Some(2);
    old.status.as_mut().unwrap().replicas = Some(5);
    (md, old, new)
}

#[test]
fn new_set_does_not_grow_while_old_machines_still_exist() {
    let (md, old, new) = mid_rollout_with_a_terminating_old_machine();
    let new_name = new.metadata.name.clone().unwrap();
    let sets = vec![old, new];
    let p = plan(input(&md, &sets, &[])).unwrap();
    assert_eq!(
        scaled(&p.actions).get(&new_name).copied().unwrap_or(2),
        2,
        "7 machines exist (old status 5 + new 2) = replicas + maxSurge"
    );
}

#[test]
fn new_set_does_not_grow_when_the_cache_sees_more_machines_than_the_status_says() {
    // The old set's status was already rewritten to 4, but the fifth (terminating) machine is
    // still in the cache: it exists, so it counts.
    let (md, mut old, new) = mid_rollout_with_a_terminating_old_machine();
    old.status.as_mut().unwrap().replicas = Some(4);
    let mut machines = machines_of(&old, 5);
    machines[4].metadata.deletion_timestamp = Some(Time(t(-1)));
    let new_name = new.metadata.name.clone().unwrap();
    let sets = vec![old, new];
    let p = plan(input(&md, &sets, &machines)).unwrap();
    assert_eq!(scaled(&p.actions).get(&new_name).copied().unwrap_or(2), 2);
    // Once that machine is gone, the new set takes the freed slot.
    let p = plan(input(&md, &sets, &machines[..4])).unwrap();
    assert_eq!(scaled(&p.actions).get(&new_name).copied(), Some(3));
}

#[test]
fn new_set_counts_issued_creations_before_its_status_catches_up() {
    // The new set was grown to 3 a moment ago; its status still says 0 machines. Σ status is
    // 4 + 0, but 3 creations are on their way: 4 + 3 = 7 is the ceiling already.
    let (md, mut old, mut new) = mid_rollout_with_a_terminating_old_machine();
    old.status.as_mut().unwrap().replicas = Some(4);
    new.spec.replicas = Some(3);
    new.status.as_mut().unwrap().replicas = Some(0);
    let new_name = new.metadata.name.clone().unwrap();
    let sets = vec![old, new];
    let p = plan(input(&md, &sets, &[])).unwrap();
    assert_eq!(scaled(&p.actions).get(&new_name).copied().unwrap_or(3), 3);
}

/// Six machines of `small`, rolled to `large` whose MachineClass does not exist; maxSurge 1,
/// maxUnavailable 1. The surge machine never comes up. Upstream takes one old machine away
/// (capacity 6 → 5 until the class exists); ours keeps all six (docs/behaviour.md#missing-class).
#[test]
fn a_missing_template_class_takes_no_old_machine_away() {
    let mut md = deployment(Strategy::RollingUpdate, 6, 1, 1);
    let old = set(&md, "small", 1, 6, 6, 100);
    md.spec.template = template("large");
    let mut new = set(&md, "large", 2, 1, 0, 10);
    new.spec.template = Some(md.spec.template.clone());
    let sets = vec![old.clone(), new.clone()];
    let old_name = old.metadata.name.clone().unwrap();

    let upstream = plan(input(&md, &sets, &[])).unwrap();
    assert_eq!(scaled(&upstream.actions).get(&old_name), Some(&5));

    let missing = plan(DeploymentInput {
        template_class_missing: true,
        ..input(&md, &sets, &[])
    })
    .unwrap();
    // (`scaled` also lists sets rewritten for annotations, at their replicas.)
    assert!(
        scaled(&missing.actions)
            .get(&old_name)
            .is_none_or(|&r| r == 6)
    );
    // The surge machine itself is still asked for: it shows the missing class on the Machine
    // (MachineClassNotFound) and comes up as soon as the class exists.
    let first = plan(DeploymentInput {
        template_class_missing: true,
        ..input(&md, std::slice::from_ref(&old), &[])
    })
    .unwrap();
    let created = first.actions.iter().find_map(|a| match a {
        DeploymentAction::CreateMachineSet(ms) => Some(ms.spec.replicas),
        _ => None,
    });
    assert_eq!(created, Some(Some(1)));
    assert!(
        scaled(&first.actions)
            .get(&old_name)
            .is_none_or(|&r| r == 6)
    );
}

/// maxSurge 0, maxUnavailable 1: upstream's roll starts by taking an old machine away; with the
/// class missing nothing moves.
#[test]
fn a_missing_template_class_without_surge_leaves_the_fleet_alone() {
    let mut md = deployment(Strategy::RollingUpdate, 4, 0, 1);
    let old = set(&md, "small", 1, 4, 4, 100);
    md.spec.template = template("large");
    let mut new = set(&md, "large", 2, 0, 0, 10);
    new.spec.template = Some(md.spec.template.clone());
    let sets = vec![old.clone(), new];
    let old_name = old.metadata.name.clone().unwrap();
    let upstream = plan(input(&md, &sets, &[])).unwrap();
    assert_eq!(scaled(&upstream.actions).get(&old_name), Some(&3));
    let missing = plan(DeploymentInput {
        template_class_missing: true,
        ..input(&md, &sets, &[])
    })
    .unwrap();
    assert!(
        scaled(&missing.actions)
            .get(&old_name)
            .is_none_or(|&r| r == 4)
    );
}
