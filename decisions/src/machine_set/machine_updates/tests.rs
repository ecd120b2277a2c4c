//! Tests of changes to existing machines: propagation and auto-preservation.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use crate::machine_set::decide::plan;
use crate::machine_set::tests::fixtures::*;
use crate::machine_set::types::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use mcm_api::keys::{annotation, preserve};
use mcm_api::v1alpha1::{MachinePhase, MachineSetStatus, NodeTemplateSpec};

#[test]
fn auto_preserve_newest_failed_up_to_max_and_unpreserve_oldest_when_lowered() {
    let nodes = BTreeMap::new();
    let mut s = ms(3);
    s.spec.auto_preserve_failed_machine_max = Some(1);
    let machines = vec![
        machine("old-failed", Some(MachinePhase::Failed), 100),
        machine("new-failed", Some(MachinePhase::Failed), 1),
        machine("running", Some(MachinePhase::Running), 1),
    ];
    let p = plan(input(&s, &machines, &nodes)).unwrap();
    let annotated: Vec<&str> = p
        .actions
        .iter()
        .filter_map(|a| match a {
            MachineSetAction::UpdateMachine { machine, update }
                if update
                    .set_annotations
                    .get(annotation::PRESERVE)
                    .map(String::as_str)
                    == Some(preserve::AUTO_PRESERVED) =>
            {
                Some(machine.name.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(annotated, vec!["new-failed"]);
    // The same pass sees the annotation: only the old failed machine is replaced.
    assert_eq!(deleted_names(&p.actions), vec!["old-failed"]);

    let mut s = ms(3);
    s.spec.auto_preserve_failed_machine_max = Some(0);
    s.status = Some(MachineSetStatus {
        auto_preserve_failed_machine_count: Some(1),
        ..MachineSetStatus::default()
    });
    let machines = vec![
        annotate(
            machine("ap-old", Some(MachinePhase::Failed), 100),
            annotation::PRESERVE,
            "auto-preserved",
        ),
        annotate(
            machine("ap-new", Some(MachinePhase::Failed), 1),
            annotation::PRESERVE,
            "auto-preserved",
        ),
    ];
    let p = plan(input(&s, &machines, &nodes)).unwrap();
    let removed: Vec<&str> = p
        .actions
        .iter()
        .filter_map(|a| match a {
            MachineSetAction::UpdateMachine { machine, update }
                if update.remove_annotations.contains(annotation::PRESERVE) =>
            {
                Some(machine.name.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(removed, vec!["ap-old"]);
}

#[test]
fn propagates_in_place_fields_to_active_machines_only() {
    let mut s = ms(2);
    if let Some(spec) = s.spec.template.as_mut().and_then(|t| t.spec.as_mut()) {
        spec.node_template = Some(NodeTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(BTreeMap::from([("pool".into(), "x".into())])),
                ..ObjectMeta::default()
            }),
            spec: None,
        });
        spec.configuration.drain_timeout = Some("5m".parse().unwrap());
        spec.class.as_mut().unwrap().kind = Some("AWSMachineClass".into());
    }
    let nodes = BTreeMap::new();
    let machines = vec![
        machine("running", Some(MachinePhase::Running), 1),
        machine("failed", Some(MachinePhase::Failed), 1),
    ];
    let p = plan(input(&s, &machines, &nodes)).unwrap();
    let updates: BTreeMap<&str, &MachineUpdate> = p
        .actions
        .iter()
        .filter_map(|a| match a {
            MachineSetAction::UpdateMachine { machine, update } => {
                Some((machine.name.as_str(), &**update))
            }
            _ => None,
        })
        .collect();
    assert!(updates["running"].node_template.is_some());
    assert!(updates["running"].configuration.is_some());
    assert_eq!(
        updates["running"].class_kind.as_deref(),
        Some("AWSMachineClass")
    );
    assert!(updates["failed"].node_template.is_none());
    assert!(updates["failed"].configuration.is_none());
    assert_eq!(
        updates["failed"].class_kind.as_deref(),
        Some("AWSMachineClass")
    );
    // Converged machines get no update.
    let p2 = plan(input(&s, &p.claimed, &nodes)).unwrap();
    assert!(
        !p2.actions
            .iter()
            .any(|a| matches!(a, MachineSetAction::UpdateMachine { .. }))
    );
}
