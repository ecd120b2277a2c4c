//! Tests of cleanup of old MachineSets.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use crate::machine_deployment::decide::plan;
use crate::machine_deployment::tests::fixtures::*;
use crate::machine_deployment::types::*;
use mcm_api::keys::annotation;
use mcm_api::v1alpha1::{
    MachineDeploymentStatus, MachineDeploymentStrategyType as Strategy, MachineSetStatus,
};

#[test]
fn cleanup_deletes_oldest_empty_sets_beyond_history_limit() {
    let mut md = deployment(Strategy::RollingUpdate, 2, 1, 0);
    md.spec.revision_history_limit = Some(1);
    let mut oldest = set(&md, "a", 1, 0, 0, 300);
    oldest.status = Some(MachineSetStatus {
        observed_generation: Some(1),
        ..MachineSetStatus::default()
    });
    let mut busy = set(&md, "b", 2, 0, 0, 200);
    busy.status = Some(MachineSetStatus {
        replicas: Some(1),
        observed_generation: Some(1),
        ..MachineSetStatus::default()
    });
    let mut recent = set(&md, "c", 3, 0, 0, 150);
    recent.status = Some(MachineSetStatus {
        observed_generation: Some(1),
        ..MachineSetStatus::default()
    });
    md.spec.template = template("d");
    let current = set(&md, "d", 4, 2, 2, 100);
    md.metadata.annotations = Some(BTreeMap::from([(
        annotation::REVISION.to_owned(),
        "4".to_owned(),
    )]));
    // The previous status says complete.
    md.status = Some(MachineDeploymentStatus {
        observed_generation: Some(1),
        replicas: Some(2),
        updated_replicas: Some(2),
        available_replicas: Some(2),
        ..MachineDeploymentStatus::default()
    });
    let sets = vec![oldest.clone(), busy, recent, current];
    let p = plan(input(&md, &sets, &[])).unwrap();
    let deleted: Vec<String> = p
        .actions
        .iter()
        .filter_map(|a| match a {
            DeploymentAction::DeleteMachineSet(r) => Some(r.name.clone()),
            _ => None,
        })
        .collect();
    // 3 old sets, limit 1: the 2 oldest are candidates; the busy one is kept.
    assert_eq!(deleted, vec![oldest.metadata.name.clone().unwrap()]);
}
