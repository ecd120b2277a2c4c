//! Tests of the Recreate strategy.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use crate::machine_deployment::decide::plan;
use crate::machine_deployment::tests::fixtures::*;
use crate::machine_deployment::types::*;
use mcm_api::v1alpha1::{MachineDeploymentStrategyType as Strategy, MachineSetStatus};

#[test]
fn recreate_scales_old_to_zero_then_waits_then_creates_full_size() {
    let mut md = deployment(Strategy::Recreate, 3, 0, 0);
    let old = set(&md, "small", 1, 3, 3, 100);
    md.spec.template = template("large");
    let sets = vec![old.clone()];
    let p = plan(input(&md, &sets, &[])).unwrap();
    assert_eq!(
        scaled(&p.actions),
        BTreeMap::from([(old.metadata.name.clone().unwrap(), 0)])
    );
    // Old scaled to zero but its machines still exist: wait.
    let mut drained = old.clone();
    drained.spec.replicas = Some(0);
    let sets = vec![drained.clone()];
    let p = plan(input(&md, &sets, &[])).unwrap();
    assert!(
        !p.actions
            .iter()
            .any(|a| matches!(a, DeploymentAction::CreateMachineSet(_)))
    );
    // Gone: the new set is created at full size.
    drained.status = Some(MachineSetStatus::default());
    let sets = vec![drained];
    let p = plan(input(&md, &sets, &[])).unwrap();
    let created = p.actions.iter().find_map(|a| match a {
        DeploymentAction::CreateMachineSet(ms) => Some(ms),
        _ => None,
    });
    assert_eq!(created.unwrap().spec.replicas, Some(3));
    assert!(
        !p.actions
            .iter()
            .any(|a| matches!(a, DeploymentAction::TaintNodesPreferNoSchedule(_)))
    );
}

/// Recreate to a class that does not exist: upstream deletes every old machine first and the
/// deployment has none until the class appears; ours keeps them (docs/behaviour.md#missing-class),
/// and recreates as usual once the class exists.
#[test]
fn recreate_to_a_missing_class_keeps_the_old_machines() {
    let mut md = deployment(Strategy::Recreate, 3, 0, 0);
    let old = set(&md, "small", 1, 3, 3, 100);
    md.spec.template = template("large");
    let sets = vec![old.clone()];
    let missing = plan(DeploymentInput {
        template_class_missing: true,
        ..input(&md, &sets, &[])
    })
    .unwrap();
    assert!(scaled(&missing.actions).is_empty());
    assert!(
        !missing
            .actions
            .iter()
            .any(|a| matches!(a, DeploymentAction::CreateMachineSet(_)))
    );
    let present = plan(input(&md, &sets, &[])).unwrap();
    assert_eq!(
        scaled(&present.actions),
        BTreeMap::from([(old.metadata.name.clone().unwrap(), 0)])
    );
}
