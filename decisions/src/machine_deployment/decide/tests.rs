//! Tests of the reconcile pass: deletion, selecting all, the cluster-autoscaler's deletion requests, and a simulation of the whole plan.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};

use crate::machine_deployment::decide::plan;
use crate::machine_deployment::fencepost;
use crate::machine_deployment::revision::{self};
use crate::machine_deployment::tests::fixtures::*;
use crate::machine_deployment::types::*;
use crate::machine_set::claim;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use mcm_api::keys::{annotation, finalizer, label, value};
use mcm_api::v1alpha1::{
    CurrentStatus, Machine, MachineDeployment, MachineDeploymentStrategyType as Strategy,
    MachinePhase, MachineSet, MachineSpec, MachineStatus, RollbackConfig,
};

mod sim;

#[test]
fn deleting_deployment_deletes_sets_then_drops_finalizer() {
    let mut md = deployment(Strategy::RollingUpdate, 2, 1, 0);
    md.metadata.deletion_timestamp = Some(Time(t(0)));
    let s = set(&md, "small", 1, 2, 2, 100);
    let sets = vec![s.clone()];
    let p = plan(input(&md, &sets, &[])).unwrap();
    assert!(p.actions.iter().any(|a| matches!(a, DeploymentAction::DeleteMachineSet(r) if Some(&r.name) == s.metadata.name.as_ref())));
    assert!(!p.actions.contains(&DeploymentAction::AddFinalizer));
    let p = plan(input(&md, &[], &[])).unwrap();
    assert_eq!(p.actions, vec![DeploymentAction::RemoveFinalizer]);
}

#[test]
fn selecting_all_is_refused_with_event() {
    let mut md = deployment(Strategy::RollingUpdate, 2, 1, 0);
    md.spec.selector = Some(LabelSelector::default());
    md.spec.template.metadata = None;
    let p = plan(input(&md, &[], &[])).unwrap();
    assert_eq!(events(&p.actions), vec!["SelectingAll"]);
    assert_eq!(
        status_written(&p.actions).unwrap().observed_generation,
        Some(1)
    );
}

#[test]
fn trigger_deletion_marks_machines() {
    let mut md = deployment(Strategy::RollingUpdate, 2, 1, 0);
    md.metadata.annotations = Some(BTreeMap::from([(
        annotation::TRIGGER_DELETION_BY_MCM.to_owned(),
        "m1".to_owned(),
    )]));
    let s = set(&md, "small", 1, 2, 2, 100);
    let mut m = Machine::new("m1", MachineSpec::default());
    m.metadata.namespace = Some("ns".into());
    m.status = Some(MachineStatus {
        current_status: Some(CurrentStatus {
            phase: Some(MachinePhase::Running),
            ..CurrentStatus::default()
        }),
        ..MachineStatus::default()
    });
    let sets = vec![s];
    let machines = vec![m];
    let p = plan(input(&md, &sets, &machines)).unwrap();
    let d = p
        .actions
        .iter()
        .find_map(|a| match a {
            DeploymentAction::UpdateDeployment(d) => Some(d),
            _ => None,
        })
        .unwrap();
    let a = d.metadata.annotations.as_ref().unwrap();
    assert_eq!(
        a[annotation::TRIGGER_DELETION_BY_MCM],
        "m1~2023-11-14T22:13:20Z"
    );
    assert_eq!(
        a[annotation::LAST_DEPLOYMENT_REPLICA_CHANGE_BY_SCALER_TIME],
        "2023-11-14T22:13:20Z"
    );
    assert!(p.actions.iter().any(
        |a| matches!(a, DeploymentAction::AnnotateMachine { machine, annotations }
        if machine.name == "m1" && annotations[annotation::MACHINE_PRIORITY] == "1")
    ));
}
