//! Objects the MachineSet tests share: a MachineSet, its machines, the plan's input and readers
//! of the planned actions.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::machine_set::claim;
use crate::machine_set::expectations::Readiness;
use crate::machine_set::types::*;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use mcm_api::keys::finalizer;
use mcm_api::v1alpha1::{
    ClassSpec, CurrentStatus, Machine, MachinePhase, MachineSet, MachineSetSpec, MachineSpec,
    MachineStatus, MachineTemplateSpec,
};

pub(crate) fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).unwrap()
}

pub(crate) fn sel_labels() -> BTreeMap<String, String> {
    BTreeMap::from([("name".to_owned(), "pool".to_owned())])
}

pub(crate) fn ms(replicas: i32) -> MachineSet {
    let mut ms = MachineSet::new(
        "pool-abcde",
        MachineSetSpec {
            replicas: Some(replicas),
            selector: Some(LabelSelector {
                match_labels: Some(sel_labels()),
                match_expressions: None,
            }),
            template: Some(MachineTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(sel_labels()),
                    ..ObjectMeta::default()
                }),
                spec: Some(MachineSpec {
                    class: Some(ClassSpec {
                        api_group: None,
                        kind: Some("MachineClass".into()),
                        name: Some("small".into()),
                    }),
                    ..MachineSpec::default()
                }),
            }),
            ..MachineSetSpec::default()
        },
    );
    ms.metadata.namespace = Some("ns".into());
    ms.metadata.uid = Some("ms-uid".into());
    ms.metadata.generation = Some(1);
    ms.metadata.finalizers = Some(vec![finalizer::MACHINE_CONTROLLER_MANAGER.into()]);
    ms
}

pub(crate) fn machine(name: &str, phase: Option<MachinePhase>, age: i64) -> Machine {
    let mut m = Machine::new(
        name,
        MachineSpec {
            class: Some(ClassSpec {
                api_group: None,
                kind: Some("MachineClass".into()),
                name: Some("small".into()),
            }),
            ..MachineSpec::default()
        },
    );
    m.metadata.namespace = Some("ns".into());
    m.metadata.uid = Some(format!("uid-{name}"));
    m.metadata.labels = Some(sel_labels());
    m.metadata.creation_timestamp = Some(Time(t(-age)));
    m.metadata.owner_references = Some(vec![claim::owner_reference(KIND, "pool-abcde", "ms-uid")]);
    m.status = Some(MachineStatus {
        current_status: Some(CurrentStatus {
            phase,
            ..CurrentStatus::default()
        }),
        ..MachineStatus::default()
    });
    m
}

pub(crate) fn annotate(mut m: Machine, k: &str, v: &str) -> Machine {
    m.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(k.into(), v.into());
    m
}

pub(crate) fn preserved_until(mut m: Machine, at: Timestamp) -> Machine {
    if let Some(cs) = m.status.as_mut().and_then(|s| s.current_status.as_mut()) {
        cs.preserve_expiry_time = Some(Time(at));
    }
    m
}

/// The plan's input; the machines are shared as the cache shares them (leaked: tests only).
pub(crate) fn input<'a, M: std::borrow::Borrow<Machine>>(
    ms: &'a MachineSet,
    machines: &[M],
    nodes: &'a BTreeMap<String, Option<String>>,
) -> MachineSetInput<'a> {
    let shared: Vec<Arc<Machine>> = machines
        .iter()
        .map(|m| Arc::new(m.borrow().clone()))
        .collect();
    MachineSetInput {
        machine_set: ms,
        machines: Box::leak(shared.into_boxed_slice()),
        node_preserve: nodes,
        readiness: Readiness::Satisfied,
        now: t(0),
    }
}

pub(crate) fn deleted_names(actions: &[MachineSetAction]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            MachineSetAction::DeleteMachines { machines } => {
                Some(machines.iter().map(|m| m.name.clone()).collect::<Vec<_>>())
            }
            _ => None,
        })
        .flatten()
        .collect()
}

pub(crate) fn created_count(actions: &[MachineSetAction]) -> usize {
    actions
        .iter()
        .map(|a| match a {
            MachineSetAction::CreateMachines { count, .. } => *count,
            _ => 0,
        })
        .sum()
}
