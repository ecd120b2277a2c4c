//! Objects the MachineDeployment tests share: a deployment, its MachineSets, the plan's input
//! and readers of the planned actions.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use crate::machine_deployment::revision;
use crate::machine_deployment::types::{
    DeploymentAction, DeploymentConfig, DeploymentInput, NodeView,
};
use crate::machine_set::claim;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use mcm_api::keys::{finalizer, label};
use mcm_api::v1alpha1::{
    ClassSpec, CurrentStatus, Machine, MachineDeployment, MachineDeploymentSpec,
    MachineDeploymentStatus, MachineDeploymentStrategy, MachineDeploymentStrategyType as Strategy,
    MachinePhase, MachineSet, MachineSetStatus, MachineSpec, MachineStatus, MachineTemplateSpec,
    RollingUpdateMachineDeployment, UpdateConfiguration,
};

pub(crate) static NO_NODES: BTreeMap<String, NodeView> = BTreeMap::new();

pub(crate) fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).unwrap()
}

pub(crate) fn pool_labels() -> BTreeMap<String, String> {
    BTreeMap::from([("name".to_owned(), "pool".to_owned())])
}

pub(crate) fn template(class: &str) -> MachineTemplateSpec {
    MachineTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(pool_labels()),
            ..ObjectMeta::default()
        }),
        spec: Some(MachineSpec {
            class: Some(ClassSpec {
                api_group: None,
                kind: Some("MachineClass".into()),
                name: Some(class.into()),
            }),
            ..MachineSpec::default()
        }),
    }
}

pub(crate) fn deployment(
    strategy: Strategy,
    replicas: i32,
    surge: i32,
    unavailable: i32,
) -> MachineDeployment {
    let mut md = MachineDeployment::new(
        "pool",
        MachineDeploymentSpec {
            replicas: Some(replicas),
            selector: Some(LabelSelector {
                match_labels: Some(pool_labels()),
                match_expressions: None,
            }),
            template: template("small"),
            strategy: Some(MachineDeploymentStrategy {
                type_: Some(strategy),
                rolling_update: Some(RollingUpdateMachineDeployment {
                    update_configuration: UpdateConfiguration {
                        max_surge: Some(IntOrString::Int(surge)),
                        max_unavailable: Some(IntOrString::Int(unavailable)),
                    },
                }),
                in_place_update: None,
            }),
            ..MachineDeploymentSpec::default()
        },
    );
    md.metadata.namespace = Some("ns".into());
    md.metadata.uid = Some("md-uid".into());
    md.metadata.generation = Some(1);
    md.metadata.finalizers = Some(vec![finalizer::MACHINE_CONTROLLER_MANAGER.into()]);
    md
}

/// A MachineSet owned by the deployment for `class`, with `spec` replicas and `available`
/// available (and existing) replicas.
pub(crate) fn set(
    md: &MachineDeployment,
    class: &str,
    rev: i64,
    spec: i32,
    available: i32,
    age: i64,
) -> MachineSet {
    let mut tmpl_md = md.clone();
    tmpl_md.spec.template = template(class);
    let hash = revision::template_hash(&tmpl_md.spec.template, None);
    let mut ms = revision::new_machine_set(&tmpl_md, &hash, rev, spec, 1);
    ms.metadata.uid = Some(format!("uid-{class}"));
    ms.metadata.creation_timestamp = Some(Time(t(-age)));
    ms.metadata.generation = Some(1);
    ms.status = Some(MachineSetStatus {
        replicas: Some(available),
        available_replicas: Some(available),
        ready_replicas: Some(available),
        fully_labeled_replicas: Some(available),
        observed_generation: Some(1),
        ..MachineSetStatus::default()
    });
    ms
}

/// The plan's input; the machines are shared as the cache shares them (leaked: tests only).
pub(crate) fn input<'a>(
    md: &'a MachineDeployment,
    sets: &'a [MachineSet],
    machines: &[Machine],
) -> DeploymentInput<'a> {
    let shared: Vec<std::sync::Arc<Machine>> =
        machines.iter().cloned().map(std::sync::Arc::new).collect();
    DeploymentInput {
        deployment: md,
        machine_sets: sets,
        machines: Box::leak(shared.into_boxed_slice()),
        config: DeploymentConfig::default(),
        nodes: &NO_NODES,
        now: t(0),
        template_class_missing: false,
    }
}

pub(crate) fn scaled(actions: &[DeploymentAction]) -> BTreeMap<String, i32> {
    actions
        .iter()
        .filter_map(|a| match a {
            DeploymentAction::UpdateMachineSet(ms) | DeploymentAction::CreateMachineSet(ms) => {
                Some((
                    ms.metadata.name.clone().unwrap(),
                    ms.spec.replicas.unwrap_or(0),
                ))
            }
            _ => None,
        })
        .collect()
}

pub(crate) fn events(actions: &[DeploymentAction]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            DeploymentAction::Event(e) => Some(e.reason.clone()),
            _ => None,
        })
        .collect()
}

pub(crate) fn status_written(actions: &[DeploymentAction]) -> Option<&MachineDeploymentStatus> {
    actions.iter().find_map(|a| match a {
        DeploymentAction::UpdateDeploymentStatus(s) => Some(&**s),
        _ => None,
    })
}

/// Machines of `ms` on nodes `n-<class>-<i>`, Running.
pub(crate) fn machines_of(ms: &MachineSet, n: usize) -> Vec<Machine> {
    (0..n)
        .map(|i| {
            let name = format!("{}-{i}", ms.metadata.name.as_deref().unwrap());
            let mut m = Machine::new(&name, MachineSpec::default());
            m.metadata.namespace = Some("ns".into());
            m.metadata.uid = Some(format!("uid-{name}"));
            let mut labels = ms
                .spec
                .template
                .as_ref()
                .unwrap()
                .metadata
                .as_ref()
                .unwrap()
                .labels
                .clone()
                .unwrap();
            labels.insert(label::NODE.into(), format!("node-{i}"));
            m.metadata.labels = Some(labels);
            m.metadata.owner_references = Some(vec![claim::owner_reference(
                "MachineSet",
                ms.metadata.name.as_deref().unwrap(),
                ms.metadata.uid.as_deref().unwrap(),
            )]);
            m.status = Some(MachineStatus {
                current_status: Some(CurrentStatus {
                    phase: Some(MachinePhase::Running),
                    ..CurrentStatus::default()
                }),
                ..MachineStatus::default()
            });
            m
        })
        .collect()
}
