//! Tests of the new MachineSet: its size, revision sync, name collisions and creation failures.
#![allow(clippy::unwrap_used)]

use crate::machine_deployment::decide::plan;
use crate::machine_deployment::new_machine_set::*;
use crate::machine_deployment::revision::{self, KIND};
use crate::machine_deployment::status;
use crate::machine_deployment::tests::fixtures::*;
use crate::machine_deployment::types::*;
use crate::machine_set::claim;
use mcm_api::v1alpha1::{
    ConditionStatus, MachineDeploymentConditionType as CondType,
    MachineDeploymentStrategyType as Strategy, MachineSet, MachineSetSpec,
};

#[test]
fn new_replicas_table() {
    // (strategy, md replicas, surge, Σ spec of all sets, new spec) → new size
    let cases = [
        (Strategy::RollingUpdate, 3, 1, 3, 0, 1),
        (Strategy::RollingUpdate, 3, 1, 4, 1, 1),
        (Strategy::RollingUpdate, 3, 2, 3, 0, 2),
        (Strategy::RollingUpdate, 3, 5, 3, 0, 3),
        (Strategy::RollingUpdate, 3, 1, 2, 2, 3),
        (Strategy::RollingUpdate, 10, 3, 12, 4, 5),
        (Strategy::RollingUpdate, 0, 1, 0, 0, 0),
        (Strategy::Recreate, 7, 0, 3, 0, 7),
    ];
    for (strategy, r, surge, total, new, want) in cases {
        let md = deployment(strategy.clone(), r, surge, 0);
        assert_eq!(
            new_machine_set_replicas(&md, total, new, surge),
            want,
            "{strategy} replicas {r} surge {surge} total {total} new {new}"
        );
    }
}

#[test]
fn in_place_fields_are_pushed_to_the_new_set_without_rollout() {
    let mut md = deployment(Strategy::RollingUpdate, 2, 1, 0);
    let current = set(&md, "small", 1, 2, 2, 100);
    md.spec
        .template
        .spec
        .as_mut()
        .unwrap()
        .configuration
        .drain_timeout = Some("3m".parse().unwrap());
    let sets = vec![current.clone()];
    let p = plan(input(&md, &sets, &[])).unwrap();
    assert!(
        !p.actions
            .iter()
            .any(|a| matches!(a, DeploymentAction::CreateMachineSet(_)))
    );
    let updated = p
        .actions
        .iter()
        .find_map(|a| match a {
            DeploymentAction::UpdateMachineSet(ms) => Some(ms),
            _ => None,
        })
        .unwrap();
    assert_eq!(updated.metadata.name, current.metadata.name);
    assert_eq!(
        updated
            .spec
            .template
            .as_ref()
            .unwrap()
            .spec
            .as_ref()
            .unwrap()
            .configuration
            .drain_timeout,
        Some("3m".parse().unwrap())
    );
}

#[test]
fn collision_with_foreign_set_bumps_count_and_picks_free_name() {
    let md = deployment(Strategy::RollingUpdate, 2, 1, 0);
    let hash = revision::template_hash(&md.spec.template, None);
    let mut foreign = MachineSet::new(
        &revision::machine_set_name("pool", &hash),
        MachineSetSpec::default(),
    );
    foreign.metadata.namespace = Some("ns".into());
    let sets = vec![foreign.clone()];
    let p = plan(input(&md, &sets, &[])).unwrap();
    let created = p
        .actions
        .iter()
        .find_map(|a| match a {
            DeploymentAction::CreateMachineSet(ms) => Some(ms),
            _ => None,
        })
        .unwrap();
    assert_ne!(created.metadata.name, foreign.metadata.name);
    assert_eq!(status_written(&p.actions).unwrap().collision_count, Some(1));
    match create_conflict(&md, &foreign) {
        CreateConflict::BumpCollisionCount(st) => assert_eq!(st.collision_count, Some(1)),
        other => panic!("{other:?}"),
    }
    let mut ours = (**created).clone();
    ours.metadata.owner_references = Some(vec![claim::owner_reference(KIND, "pool", "md-uid")]);
    assert_eq!(create_conflict(&md, &ours), CreateConflict::UseExisting);
}

#[test]
fn create_failure_sets_progressing_false_with_reason() {
    let md = deployment(Strategy::RollingUpdate, 2, 1, 0);
    let (st, event) = create_failure(&md, "pool-abcde", "quota exceeded", t(0));
    let c = status::condition(st.conditions.as_ref(), &CondType::Progressing).unwrap();
    assert_eq!(c.status, ConditionStatus::False);
    assert_eq!(c.reason.as_deref(), Some(REASON_MACHINE_SET_CREATE_ERROR));
    assert_eq!(
        c.message.as_deref(),
        Some("Failed to create new machine set \"pool-abcde\": quota exceeded")
    );
    assert_eq!(event.reason, REASON_MACHINE_SET_CREATE_ERROR);
}
