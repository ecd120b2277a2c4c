#![allow(clippy::unwrap_used)]

//! Builders for plan tests.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use mcm_api::keys::finalizer;
use mcm_api::v1alpha1::{
    CurrentStatus, LastOperation, Machine, MachineOperationType, MachinePhase, MachineSpec,
    MachineState, MachineStatus,
};

/// A fixed instant plus `seconds`.
pub fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).unwrap()
}

/// A machine named `name` created at `at(0)` with the MCM finalizer.
pub fn machine(name: &str) -> Machine {
    let mut machine = Machine::new(name, MachineSpec::default());
    machine.metadata.namespace = Some("shoot".into());
    machine.metadata.creation_timestamp = Some(Time(at(0)));
    machine.metadata.finalizers = Some(vec![finalizer::MACHINE_CONTROLLER_MANAGER.to_owned()]);
    machine
}

/// Builder-style helpers on machines.
pub trait MachineExt {
    /// Sets the phase (and lastUpdateTime of currentStatus).
    fn with_phase(self, phase: MachinePhase, since: Timestamp) -> Self;
    /// Sets lastOperation.
    fn with_operation(
        self,
        description: &str,
        state: MachineState,
        type_: MachineOperationType,
        at: Timestamp,
    ) -> Self;
    /// Adds a label.
    fn with_label(self, key: &str, value: &str) -> Self;
    /// Adds an annotation.
    fn with_annotation(self, key: &str, value: &str) -> Self;
    /// Sets spec.providerID.
    fn with_provider_id(self, provider_id: &str) -> Self;
    /// Sets status.conditions.
    fn with_conditions(self, conditions: Vec<NodeCondition>) -> Self;
    /// Sets the deletion timestamp.
    fn deleting_since(self, at: Timestamp) -> Self;
    /// Sets preserveExpiryTime.
    fn with_preserve_expiry(self, at: Option<Timestamp>) -> Self;
}

impl MachineExt for Machine {
    fn with_phase(mut self, phase: MachinePhase, since: Timestamp) -> Self {
        let status = self.status.get_or_insert_with(MachineStatus::default);
        let current = status
            .current_status
            .get_or_insert_with(CurrentStatus::default);
        current.phase = Some(phase);
        current.last_update_time = Some(Time(since));
        self
    }

    fn with_operation(
        mut self,
        description: &str,
        state: MachineState,
        type_: MachineOperationType,
        at: Timestamp,
    ) -> Self {
        let status = self.status.get_or_insert_with(MachineStatus::default);
        status.last_operation = Some(LastOperation {
            description: Some(description.to_owned()),
            error_code: None,
            last_update_time: Some(Time(at)),
            state: Some(state),
            type_: Some(type_),
        });
        self
    }

    fn with_label(mut self, key: &str, value: &str) -> Self {
        self.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_owned(), value.to_owned());
        self
    }

    fn with_annotation(mut self, key: &str, value: &str) -> Self {
        self.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_owned(), value.to_owned());
        self
    }

    fn with_provider_id(mut self, provider_id: &str) -> Self {
        self.spec.provider_id = Some(provider_id.to_owned());
        self
    }

    fn with_conditions(mut self, conditions: Vec<NodeCondition>) -> Self {
        self.status
            .get_or_insert_with(MachineStatus::default)
            .conditions = Some(conditions);
        self
    }

    fn deleting_since(mut self, at: Timestamp) -> Self {
        self.metadata.deletion_timestamp = Some(Time(at));
        self
    }

    fn with_preserve_expiry(mut self, at: Option<Timestamp>) -> Self {
        let status = self.status.get_or_insert_with(MachineStatus::default);
        let current = status
            .current_status
            .get_or_insert_with(CurrentStatus::default);
        current.preserve_expiry_time = at.map(Time);
        self
    }
}

/// A node condition.
pub fn condition(type_: &str, status: &str, since: Timestamp) -> NodeCondition {
    NodeCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        last_transition_time: Some(Time(since)),
        ..NodeCondition::default()
    }
}

/// Conditions of a healthy node (default node-conditions list all False).
pub fn healthy_conditions() -> Vec<NodeCondition> {
    let mut conditions = vec![condition("Ready", "True", at(0))];
    for type_ in [
        "KernelDeadlock",
        "ReadonlyFilesystem",
        "DiskPressure",
        "NetworkUnavailable",
    ] {
        conditions.push(condition(type_, "False", at(0)));
    }
    conditions
}

/// A node with the given conditions and taints.
pub fn node(name: &str, conditions: Vec<NodeCondition>, taints: Vec<Taint>) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            creation_timestamp: Some(Time(at(0))),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            taints: (!taints.is_empty()).then_some(taints),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            conditions: Some(conditions),
            ..NodeStatus::default()
        }),
    }
}

/// A taint.
pub fn taint(key: &str, effect: &str) -> Taint {
    Taint {
        key: key.to_owned(),
        effect: effect.to_owned(),
        ..Taint::default()
    }
}
