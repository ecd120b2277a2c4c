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

/// A MachineSet and the machines it owns, by the names they share; the fixtures below and
/// upstream's tables build their objects from one of these, each with its own names.
pub(crate) struct Pool<'a> {
    pub(crate) set: &'a str,
    pub(crate) namespace: &'a str,
    pub(crate) uid: &'a str,
    pub(crate) class: &'a str,
    pub(crate) labels: BTreeMap<String, String>,
}

impl Pool<'_> {
    fn class_spec(&self) -> MachineSpec {
        MachineSpec {
            class: Some(ClassSpec {
                api_group: None,
                kind: Some("MachineClass".into()),
                name: Some(self.class.into()),
            }),
            ..MachineSpec::default()
        }
    }

    /// The MachineSet selecting and templating the pool's labels, with the MCM finalizer.
    pub(crate) fn machine_set(&self, replicas: i32) -> MachineSet {
        let mut ms = MachineSet::new(
            self.set,
            MachineSetSpec {
                replicas: Some(replicas),
                selector: Some(LabelSelector {
                    match_labels: Some(self.labels.clone()),
                    match_expressions: None,
                }),
                template: Some(MachineTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(self.labels.clone()),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(self.class_spec()),
                }),
                ..MachineSetSpec::default()
            },
        );
        ms.metadata.namespace = Some(self.namespace.into());
        ms.metadata.uid = Some(self.uid.into());
        ms.metadata.generation = Some(1);
        ms.metadata.finalizers = Some(vec![finalizer::MACHINE_CONTROLLER_MANAGER.into()]);
        ms
    }

    /// A machine of the pool, created at `created`, in `phase`, owned by the pool's MachineSet.
    pub(crate) fn machine(
        &self,
        name: &str,
        phase: Option<MachinePhase>,
        created: Timestamp,
    ) -> Machine {
        let mut m = Machine::new(name, self.class_spec());
        m.metadata.namespace = Some(self.namespace.into());
        m.metadata.uid = Some(format!("uid-{name}"));
        m.metadata.labels = Some(self.labels.clone());
        m.metadata.creation_timestamp = Some(Time(created));
        m.metadata.owner_references = Some(vec![claim::owner_reference(KIND, self.set, self.uid)]);
        m.status = Some(MachineStatus {
            current_status: Some(CurrentStatus {
                phase,
                ..CurrentStatus::default()
            }),
            ..MachineStatus::default()
        });
        m
    }
}

/// The pool these tests use.
pub(crate) fn pool() -> Pool<'static> {
    Pool {
        set: "pool-abcde",
        namespace: "ns",
        uid: "ms-uid",
        class: "small",
        labels: sel_labels(),
    }
}

pub(crate) fn ms(replicas: i32) -> MachineSet {
    pool().machine_set(replicas)
}

pub(crate) fn machine(name: &str, phase: Option<MachinePhase>, age: i64) -> Machine {
    pool().machine(name, phase, t(-age))
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
