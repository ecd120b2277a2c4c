//! Tests of the InPlaceUpdate strategy.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use crate::machine_deployment::decide::plan;
use crate::machine_deployment::status;
use crate::machine_deployment::tests::fixtures::*;
use crate::machine_deployment::types::*;
use mcm_api::keys::{annotation, condition, label, value};
use mcm_api::v1alpha1::{MachineDeployment, MachineDeploymentStrategyType as Strategy};

fn in_place_md(replicas: i32, surge: i32, unavailable: i32, manual: bool) -> MachineDeployment {
    let mut md = deployment(Strategy::InPlaceUpdate, replicas, surge, unavailable);
    let strategy = md.spec.strategy.as_mut().unwrap();
    strategy.in_place_update = Some(mcm_api::v1alpha1::InPlaceUpdateMachineDeployment {
        update_configuration: strategy.rolling_update.take().unwrap().update_configuration,
        orchestration_type: Some(if manual {
            mcm_api::v1alpha1::OrchestrationType::Manual
        } else {
            mcm_api::v1alpha1::OrchestrationType::Auto
        }),
    });
    md
}

fn node_view(labels: &[(&str, &str)], reason: Option<&str>) -> NodeView {
    NodeView {
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        in_place_update_reason: reason.map(str::to_owned),
    }
}

#[test]
fn in_place_manual_creates_empty_new_set_disables_old_scale_up_and_marks_candidates() {
    let mut md = in_place_md(2, 1, 0, true);
    let old = set(&md, "small", 1, 2, 2, 100);
    md.status = Some(status::calculate_status(
        &md,
        &[&old],
        Some(&old),
        0,
        t(-50),
    ));
    md.spec.template = template("large");
    let machines = machines_of(&old, 2);
    let nodes = BTreeMap::from([
        ("node-0".to_owned(), node_view(&[], None)),
        (
            "node-1".to_owned(),
            node_view(&[(label::CANDIDATE_FOR_UPDATE, "true")], None),
        ),
    ]);
    let sets = vec![old.clone()];
    let mut i = input(&md, &sets, &machines);
    i.nodes = &nodes;
    let p = plan(i).unwrap();
    let created = p.actions.iter().find_map(|a| match a {
        DeploymentAction::CreateMachineSet(ms) => Some(ms),
        _ => None,
    });
    assert_eq!(created.unwrap().spec.replicas, Some(0));
    let old_update = p
        .actions
        .iter()
        .find_map(|a| match a {
            DeploymentAction::UpdateMachineSet(ms) if ms.metadata.name == old.metadata.name => {
                Some(ms)
            }
            _ => None,
        })
        .unwrap();
    assert_eq!(
        old_update.metadata.labels.as_ref().unwrap()[label::SCALE_UP_DISABLED],
        "true"
    );
    assert!(p.actions.contains(&DeploymentAction::LabelNodes {
        nodes: vec!["node-0".into()],
        label: label::CANDIDATE_FOR_UPDATE.into(),
        value: "true".into()
    }));
    // Manual: nothing selected.
    assert!(!p.actions.iter().any(|a| matches!(a, DeploymentAction::LabelNodes { label, .. } if label == label::SELECTED_FOR_UPDATE)));
}

#[test]
fn in_place_auto_selects_nodes_within_unavailability_budget() {
    let mut md = in_place_md(3, 0, 1, false);
    let old = set(&md, "small", 1, 3, 3, 100);
    md.spec.template = template("large");
    let new = set(&md, "large", 2, 0, 0, 10);
    md.metadata.annotations = Some(BTreeMap::from([(
        annotation::REVISION.to_owned(),
        "2".to_owned(),
    )]));
    let machines = machines_of(&old, 3);
    let candidate = [(label::CANDIDATE_FOR_UPDATE, "true")];
    let nodes: BTreeMap<String, NodeView> = (0..3)
        .map(|i| (format!("node-{i}"), node_view(&candidate, None)))
        .collect();
    let sets = vec![old, new];
    let mut i = input(&md, &sets, &machines);
    i.nodes = &nodes;
    let p = plan(i).unwrap();
    assert!(
        p.actions.contains(&DeploymentAction::LabelNodes {
            nodes: vec!["node-0".into()],
            label: label::SELECTED_FOR_UPDATE.into(),
            value: "true".into()
        }),
        "{:?}",
        p.actions
    );
    // One node already undergoing the update: the budget is used up.
    let mut busy = nodes.clone();
    busy.insert(
        "node-0".into(),
        node_view(
            &[
                (label::CANDIDATE_FOR_UPDATE, "true"),
                (label::SELECTED_FOR_UPDATE, "true"),
            ],
            None,
        ),
    );
    let mut i = input(&md, &sets, &machines);
    i.nodes = &busy;
    let p = plan(i).unwrap();
    assert!(!p.actions.iter().any(|a| matches!(a, DeploymentAction::LabelNodes { label, .. } if label == label::SELECTED_FOR_UPDATE)));
}

#[test]
fn in_place_transfers_updated_machines_to_the_new_set() {
    let mut md = in_place_md(2, 0, 1, false);
    let old = set(&md, "small", 1, 2, 2, 100);
    md.spec.template = template("large");
    let new = set(&md, "large", 2, 0, 0, 10);
    md.metadata.annotations = Some(BTreeMap::from([(
        annotation::REVISION.to_owned(),
        "2".to_owned(),
    )]));
    let mut machines = machines_of(&old, 2);
    machines[0].status.as_mut().unwrap().conditions =
        Some(vec![k8s_openapi::api::core::v1::NodeCondition {
            type_: condition::IN_PLACE_UPDATE.into(),
            status: "True".into(),
            reason: Some(condition::UPDATE_SUCCESSFUL.into()),
            ..Default::default()
        }]);
    let nodes = BTreeMap::from([
        (
            "node-0".to_owned(),
            node_view(
                &[
                    (label::UPDATE_RESULT, value::UPDATE_SUCCESSFUL),
                    (label::SELECTED_FOR_UPDATE, "true"),
                ],
                Some(condition::UPDATE_SUCCESSFUL),
            ),
        ),
        (
            "node-1".to_owned(),
            node_view(&[(label::CANDIDATE_FOR_UPDATE, "true")], None),
        ),
    ]);
    let sets = vec![old.clone(), new.clone()];
    let mut i = input(&md, &sets, &machines);
    i.nodes = &nodes;
    let p = plan(i).unwrap();
    let (owner, labels) = p
        .actions
        .iter()
        .find_map(|a| match a {
            DeploymentAction::TransferMachine {
                machine,
                owner,
                labels,
            } if machine.name == machines[0].metadata.name.clone().unwrap() => {
                Some((owner, labels))
            }
            _ => None,
        })
        .unwrap();
    assert_eq!(Some(&owner.uid), new.metadata.uid.as_ref());
    let new_hash = &new
        .spec
        .selector
        .as_ref()
        .unwrap()
        .match_labels
        .as_ref()
        .unwrap()[label::MACHINE_TEMPLATE_HASH];
    assert_eq!(&labels[label::MACHINE_TEMPLATE_HASH], new_hash);
    assert_eq!(labels[label::UPDATE_RESULT], value::UPDATE_SUCCESSFUL);
    assert_eq!(labels[label::NODE], "node-0");
    assert!(
        p.actions
            .contains(&DeploymentAction::UncordonNode("node-0".into()))
    );
    let sizes = scaled(&p.actions);
    assert_eq!(sizes[old.metadata.name.as_deref().unwrap()], 1);
    assert_eq!(sizes[new.metadata.name.as_deref().unwrap()], 1);
}

#[test]
fn in_place_completes_updated_nodes_of_the_new_set_and_needs_a_target() {
    let mut md = in_place_md(1, 0, 1, false);
    md.spec.template = template("large");
    let new = set(&md, "large", 2, 1, 1, 10);
    md.metadata.annotations = Some(BTreeMap::from([(
        annotation::REVISION.to_owned(),
        "2".to_owned(),
    )]));
    let machines = machines_of(&new, 1);
    let nodes = BTreeMap::from([(
        "node-0".to_owned(),
        node_view(
            &[(label::UPDATE_RESULT, value::UPDATE_SUCCESSFUL)],
            Some(condition::UPDATE_SUCCESSFUL),
        ),
    )]);
    let sets = vec![new];
    let mut i = input(&md, &sets, &machines);
    i.nodes = &nodes;
    let p = plan(i).unwrap();
    assert!(
        p.actions
            .contains(&DeploymentAction::CompleteNodeInPlaceUpdate(
                "node-0".into()
            ))
    );
    i.config.target_cluster = false;
    assert!(matches!(
        plan(i),
        Err(DeploymentError::InPlaceWithoutTarget { .. })
    ));
}
