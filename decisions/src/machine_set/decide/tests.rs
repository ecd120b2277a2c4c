//! Tests of the reconcile pass: expectations, adoption and release, finalizer and deletion.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use crate::machine_set::claim;
use crate::machine_set::decide::plan;
use crate::machine_set::expectations::Expectations;
use crate::machine_set::tests::fixtures::*;
use crate::machine_set::types::*;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use mcm_api::v1alpha1::{Machine, MachinePhase};

#[test]
fn pending_expectations_block_creation_and_deletion() {
    let ms = ms(5);
    let nodes = BTreeMap::new();
    let machines = vec![machine("a", Some(MachinePhase::Running), 1)];
    let mut exp = Expectations::default();
    exp.expect_creations("ns/pool-abcde", 4, t(-10));
    let mut i = input(&ms, &machines, &nodes);
    i.readiness = exp.readiness("ns/pool-abcde", t(0));
    let p = plan(i).unwrap();
    assert_eq!(created_count(&p.actions), 0);
    assert_eq!(
        p.requeue_after.period(),
        mcm_api::duration::Duration::from_secs(290)
    );
    // Once expired the plan acts again.
    i.readiness = exp.readiness("ns/pool-abcde", t(400));
    assert_eq!(created_count(&plan(i).unwrap().actions), 4);
}

#[test]
fn adopts_orphans_releases_unselected_ignores_foreign() {
    let s = ms(3);
    let nodes = BTreeMap::new();
    let mut orphan = machine("orphan", Some(MachinePhase::Running), 1);
    orphan.metadata.owner_references = None;
    let mut unselected = machine("unselected", Some(MachinePhase::Running), 1);
    unselected.metadata.labels = Some(BTreeMap::from([("name".into(), "other".into())]));
    let mut foreign = machine("foreign", Some(MachinePhase::Running), 1);
    foreign.metadata.owner_references = Some(vec![claim::owner_reference(KIND, "x", "other-uid")]);
    let mut other_ns = machine("other-ns", Some(MachinePhase::Running), 1);
    other_ns.metadata.namespace = Some("elsewhere".into());
    let machines = vec![
        orphan,
        unselected,
        foreign,
        other_ns,
        machine("mine", Some(MachinePhase::Running), 1),
    ];
    let p = plan(input(&s, &machines, &nodes)).unwrap();
    assert!(
        matches!(&p.actions[0], MachineSetAction::AdoptMachine { machine, .. } if machine.name == "orphan")
    );
    assert!(
        matches!(&p.actions[1], MachineSetAction::ReleaseMachine { machine } if machine.name == "unselected")
    );
    let claimed: Vec<&str> = p
        .claimed
        .iter()
        .map(|m| m.metadata.name.as_deref().unwrap())
        .collect();
    assert_eq!(claimed, vec!["orphan", "mine"]);
    assert_eq!(created_count(&p.actions), 1);
}

#[test]
fn finalizer_added_once_and_deleting_set_deletes_machines_then_releases_finalizer() {
    let nodes = BTreeMap::new();
    let mut s = ms(2);
    s.metadata.finalizers = None;
    let p = plan(input::<Machine>(&s, &[], &nodes)).unwrap();
    assert_eq!(p.actions[0], MachineSetAction::AddFinalizer);

    let mut s = ms(2);
    s.metadata.deletion_timestamp = Some(Time(t(0)));
    let mut already = machine("b", Some(MachinePhase::Running), 1);
    already.metadata.deletion_timestamp = Some(Time(t(0)));
    let machines = vec![machine("a", Some(MachinePhase::Running), 1), already];
    let p = plan(input(&s, &machines, &nodes)).unwrap();
    assert_eq!(deleted_names(&p.actions), vec!["a"]);
    assert!(!p.actions.contains(&MachineSetAction::AddFinalizer));
    let p = plan(input::<Machine>(&s, &[], &nodes)).unwrap();
    assert_eq!(p.actions, vec![MachineSetAction::RemoveFinalizer]);
}
