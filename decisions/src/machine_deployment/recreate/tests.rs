//! Tests of the Recreate strategy.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use crate::machine_deployment::decide::plan;
use crate::machine_deployment::test_fixtures::*;
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
