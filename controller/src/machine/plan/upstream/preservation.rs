//! `machine_test.go` `#manageMachinePreservation` (both tables).

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use mcm_api::duration::Duration;
use mcm_api::keys::{annotation, condition as reason, label, preserve, taint as taint_key};
use mcm_api::v1alpha1::{Machine, MachinePhase as P};

use crate::drain::plan::DrainOutcome;
use crate::machine::plan::common::{ControllerSettings, Retry, effective_settings, set_entries};
use crate::machine::plan::preservation::{
    PreservationAction, PreservationInput, PreservationOutcome, PreservationPlan, plan_preservation,
};
use crate::machine::plan::test_support::*;

const NOW: i64 = 50_000;

/// Where the machine's node stands.
#[derive(Clone, Copy, PartialEq)]
enum NodeSetup {
    /// Label `node=node-1`, node exists.
    Exists,
    /// No node label (upstream's `nodeName: ""`).
    NoLabel,
    /// Label names a node that does not exist (upstream's `nodeName: "invalid"`).
    Missing,
}

struct Row {
    entry: &'static str,
    machine_value: Option<&'static str>,
    node_value: Option<&'static str>,
    last_applied: Option<&'static str>,
    node: NodeSetup,
    phase: Option<&'static str>,
    /// preserveExpiryTime relative to now, in minutes.
    expiry_in: Option<i64>,
    tainted: bool,
    // Expected.
    expiry_set: bool,
    /// Status of the Preserved node condition, `None` = no such condition.
    condition: Option<&'static str>,
    machine_value_after: &'static str,
    last_applied_after: &'static str,
    tainted_after: bool,
}

const BASE: Row = Row {
    entry: "",
    machine_value: None,
    node_value: None,
    last_applied: None,
    node: NodeSetup::Exists,
    phase: None,
    expiry_in: None,
    tainted: false,
    expiry_set: false,
    condition: None,
    machine_value_after: "",
    last_applied_after: "",
    tainted_after: false,
};

const ROWS: &[Row] = &[
    Row {
        entry: "when no preserve annotation is set on machine and node, should return LongRetry",
        ..BASE
    },
    Row {
        entry: "when preserve annotation 'now' is added to node of Running machine, should successfully start preservation",
        node_value: Some(preserve::NOW),
        phase: Some("Running"),
        expiry_set: true,
        condition: Some("True"),
        last_applied_after: preserve::NOW,
        ..BASE
    },
    Row {
        entry: "when preserve annotation 'when-failed' added to node of Running machine, should not start preservation",
        node_value: Some(preserve::WHEN_FAILED),
        phase: Some("Running"),
        last_applied_after: preserve::WHEN_FAILED,
        ..BASE
    },
    Row {
        entry: "when node of Failed machine has annotation `when-failed`, should start preservation",
        node_value: Some(preserve::WHEN_FAILED),
        phase: Some("Failed"),
        expiry_set: true,
        condition: Some("True"),
        last_applied_after: preserve::WHEN_FAILED,
        tainted_after: true,
        ..BASE
    },
    Row {
        entry: "when node of preserved machine is annotated with preserve value 'false', should stop preservation",
        node_value: Some(preserve::FALSE),
        phase: Some("Running"),
        expiry_in: Some(60),
        // Upstream's fake node never had the condition and its check looks for the condition
        // type only when one is expected; stopping writes Preserved=False (checked below).
        condition: Some("False"),
        last_applied_after: preserve::FALSE,
        ..BASE
    },
    Row {
        entry: "when machine is annotated for auto-preservation by MCM, should start preservation",
        machine_value: Some(preserve::AUTO_PRESERVED),
        phase: Some("Failed"),
        expiry_set: true,
        condition: Some("True"),
        machine_value_after: preserve::AUTO_PRESERVED,
        tainted_after: true,
        ..BASE
    },
    Row {
        entry: "when machine is annotated with preserve=now and preservation times out, should stop preservation, and remove annotation",
        machine_value: Some(preserve::NOW),
        phase: Some("Running"),
        expiry_in: Some(-1),
        condition: Some("False"),
        ..BASE
    },
    Row {
        entry: "when machine is annotated with preserve=when-failed and preservation times out, should stop preservation, and remove annotation",
        machine_value: Some(preserve::WHEN_FAILED),
        phase: Some("Failed"),
        expiry_in: Some(-1),
        tainted: true,
        condition: Some("False"),
        ..BASE
    },
    Row {
        entry: "when invalid preserve annotation is added on machine of un-preserved machine, and node is not annotated should do nothing  ",
        machine_value: Some("invalidValue"),
        phase: Some("Running"),
        machine_value_after: "invalidValue",
        ..BASE
    },
    Row {
        entry: "when invalid preserve annotation is added on node of un-preserved machine, should do nothing",
        node_value: Some("invalidValue"),
        phase: Some("Running"),
        ..BASE
    },
    Row {
        entry: "when a machine is annotated with preserve=now, but has no backing node, should start preservation",
        machine_value: Some(preserve::NOW),
        node: NodeSetup::NoLabel,
        phase: Some("Unknown"),
        expiry_set: true,
        machine_value_after: preserve::NOW,
        ..BASE
    },
    Row {
        entry: "when preservation times out for a machine annotated with preserve=now, but has no backing node, should stop preservation",
        machine_value: Some(preserve::NOW),
        node: NodeSetup::NoLabel,
        phase: Some("Unknown"),
        expiry_in: Some(-1),
        ..BASE
    },
    Row {
        entry: "when a machine has a backing node, but node retrieval fails",
        machine_value: Some(preserve::NOW),
        node: NodeSetup::Missing,
        phase: Some("Unknown"),
        expiry_set: true,
        machine_value_after: preserve::NOW,
        ..BASE
    },
    Row {
        entry: "when auto-preserved machine moves to Running, should stop preservation and remove auto-preserve annotation",
        machine_value: Some(preserve::AUTO_PRESERVED),
        phase: Some("Running"),
        expiry_in: Some(60),
        tainted: true,
        condition: Some("False"),
        ..BASE
    },
    Row {
        entry: "when node is annotated with 'now' and machine is annotated with 'when-failed', should start preservation and remove preserve annotation from machine",
        node_value: Some(preserve::NOW),
        machine_value: Some(preserve::WHEN_FAILED),
        phase: Some("Running"),
        expiry_set: true,
        condition: Some("True"),
        last_applied_after: preserve::NOW,
        ..BASE
    },
    Row {
        entry: "when node and machine are found to be annotated with \"\", and 'now', respectively and last applied node preserve value is 'now', should stop preservation",
        last_applied: Some(preserve::NOW),
        machine_value: Some(preserve::NOW),
        phase: Some("Running"),
        expiry_in: Some(60),
        condition: Some("False"),
        ..BASE
    },
    Row {
        entry: "when preserved machine with preserve=when-failed recovers to Running, should stop preservation and untaint node",
        machine_value: Some(preserve::WHEN_FAILED),
        phase: Some("Running"),
        expiry_in: Some(60),
        tainted: true,
        condition: Some("False"),
        machine_value_after: preserve::WHEN_FAILED,
        ..BASE
    },
    Row {
        entry: "when preserved machine with preserve=when-failed has expired preservation while in Failed phase, should stop preservation and untaint node",
        machine_value: Some(preserve::WHEN_FAILED),
        phase: Some("Failed"),
        expiry_in: Some(-1),
        tainted: true,
        condition: Some("False"),
        ..BASE
    },
    Row {
        entry: "when preserve=when-failed machine is in Failed phase with active preservation and tainted node, node should stay tainted",
        node_value: Some(preserve::WHEN_FAILED),
        phase: Some("Failed"),
        tainted: true,
        expiry_set: true,
        condition: Some("True"),
        last_applied_after: preserve::WHEN_FAILED,
        tainted_after: true,
        ..BASE
    },
    Row {
        entry: "when preserve=now machine is Failed with active preservation and tainted node, node should stay tainted",
        machine_value: Some(preserve::NOW),
        phase: Some("Failed"),
        tainted: true,
        expiry_set: true,
        condition: Some("True"),
        machine_value_after: preserve::NOW,
        tainted_after: true,
        ..BASE
    },
];

fn build(row: &Row) -> (Machine, Option<Node>) {
    let mut m = machine("m1");
    match row.node {
        NodeSetup::Exists => m = m.with_label(label::NODE, "node-1"),
        NodeSetup::Missing => m = m.with_label(label::NODE, "invalid"),
        NodeSetup::NoLabel => {}
    }
    if let Some(value) = row.machine_value {
        m = m.with_annotation(annotation::PRESERVE, value);
    }
    if let Some(value) = row.last_applied {
        m = m.with_annotation(annotation::LAST_APPLIED_NODE_PRESERVE_VALUE, value);
    }
    if let Some(phase) = row.phase {
        m = m.with_phase(P::from(phase), at(NOW));
    }
    m = m.with_preserve_expiry(row.expiry_in.map(|minutes| at(NOW + minutes * 60)));
    let node = (row.node == NodeSetup::Exists).then(|| Node {
        metadata: ObjectMeta {
            name: Some("node-1".to_owned()),
            annotations: Some(
                row.node_value
                    .map(|value| (annotation::PRESERVE.to_owned(), value.to_owned()))
                    .into_iter()
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            taints: Some(if row.tainted {
                vec![taint(taint_key::PRESERVED, "NoSchedule")]
            } else {
                Vec::new()
            }),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            conditions: Some(Vec::new()),
            ..NodeStatus::default()
        }),
    });
    (m, node)
}

/// Executes the plan's writes the way the shell does.
fn apply(plan: &PreservationPlan, machine: &mut Machine, node: &mut Option<Node>) {
    for action in &plan.actions {
        match action {
            PreservationAction::Status(write) => {
                machine.status = Some(write.apply(machine.status.as_ref()));
            }
            PreservationAction::MachineAnnotations(changes) => {
                set_entries(&mut machine.metadata.annotations, changes);
            }
            PreservationAction::NodeAnnotations(changes) => {
                set_entries(&mut node.as_mut().unwrap().metadata.annotations, changes);
            }
            PreservationAction::NodeCondition(wanted) => {
                let status = node
                    .as_mut()
                    .unwrap()
                    .status
                    .get_or_insert_with(NodeStatus::default);
                let conditions = status.conditions.get_or_insert_with(Vec::new);
                conditions.retain(|c| c.type_ != wanted.type_);
                conditions.push(wanted.clone());
            }
            PreservationAction::AddNodeTaint(added) => {
                let spec = node
                    .as_mut()
                    .unwrap()
                    .spec
                    .get_or_insert_with(NodeSpec::default);
                spec.taints.get_or_insert_with(Vec::new).push(added.clone());
            }
            PreservationAction::RemoveNodeTaint { key, effect } => {
                let spec = node
                    .as_mut()
                    .unwrap()
                    .spec
                    .get_or_insert_with(NodeSpec::default);
                spec.taints
                    .get_or_insert_with(Vec::new)
                    .retain(|t: &Taint| !(&t.key == key && &t.effect == effect));
            }
        }
    }
}

/// One `manageMachinePreservation` call: the plan, its writes, and (for a preserved Failed
/// machine) one drain pass of the node, which succeeds as upstream's fake node has no pods.
fn replay(row: &Row) -> (Machine, Option<Node>, Retry) {
    let (mut machine, mut node) = build(row);
    let settings = effective_settings(&machine, &ControllerSettings::default());
    let mut drain: Option<DrainOutcome> = None;
    for _ in 0..2 {
        let plan = plan_preservation(&PreservationInput {
            machine: &machine.clone(),
            node: node.clone().as_ref(),
            settings: &settings,
            pv_detach_timeout: Duration::from_mins(2),
            drain: drain.as_ref(),
            now: at(NOW),
        });
        apply(&plan, &mut machine, &mut node);
        match plan.outcome {
            PreservationOutcome::Done { retry } => return (machine, node, retry),
            PreservationOutcome::NeedsDrain(_) => {
                assert!(drain.is_none(), "{}: drain asked twice", row.entry);
                drain = Some(DrainOutcome::Complete);
            }
        }
    }
    panic!("{}: no end", row.entry)
}

fn annotation_of<'a>(annotations: &'a Option<BTreeMap<String, String>>, key: &str) -> &'a str {
    annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map_or("", String::as_str)
}

fn preserved(node: &Node) -> Option<&NodeCondition> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == reason::PRESERVED))
}

#[test]
fn manage_machine_preservation_table() {
    for row in ROWS {
        let (machine, node, retry) = replay(row);
        let entry = row.entry;
        assert_eq!(retry, Retry::Long, "{entry}");
        let expiry = machine
            .status
            .as_ref()
            .and_then(|s| s.current_status.as_ref())
            .and_then(|c| c.preserve_expiry_time.clone());
        assert_eq!(
            expiry.is_some(),
            row.expiry_set,
            "{entry}: expiry {expiry:?}"
        );
        if let Some(Time(until)) = expiry
            && row.expiry_in.is_none()
        {
            assert_eq!(
                until,
                at(NOW + 96 * 3600),
                "{entry}: default preserve timeout"
            );
        }
        if let Some(node) = &node {
            assert_eq!(
                preserved(node).map(|c| c.status.as_str()),
                row.condition,
                "{entry}"
            );
            let tainted = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| {
                    t.iter()
                        .any(|t| t.key == taint_key::PRESERVED && t.effect == "NoSchedule")
                });
            assert_eq!(tainted, row.tainted_after, "{entry}");
        }
        assert_eq!(
            annotation_of(&machine.metadata.annotations, annotation::PRESERVE),
            row.machine_value_after,
            "{entry}"
        );
        assert_eq!(
            annotation_of(
                &machine.metadata.annotations,
                annotation::LAST_APPLIED_NODE_PRESERVE_VALUE
            ),
            row.last_applied_after,
            "{entry}"
        );
    }
}

/// `(entry, node unschedulable, node exists)`: a machine bound to no preservation is left alone.
const NOT_BOUND: &[(&str, bool, bool)] = &[
    ("node is tainted", true, true),
    ("node is untainted", false, true),
    ("node retrieval fails (node not found)", false, false),
];

#[test]
fn manage_machine_preservation_not_bound_table() {
    for (entry, unschedulable, exists) in NOT_BOUND {
        let machine = machine("m1")
            .with_label(label::NODE, "node-1")
            .with_phase(P::Running, at(NOW));
        let mut node = node("node-1", Vec::new(), Vec::new());
        node.spec.as_mut().unwrap().unschedulable = Some(*unschedulable);
        let settings = effective_settings(&machine, &ControllerSettings::default());
        let plan = plan_preservation(&PreservationInput {
            machine: &machine,
            node: exists.then_some(&node),
            settings: &settings,
            pv_detach_timeout: Duration::from_mins(2),
            drain: None,
            now: at(NOW),
        });
        assert_eq!(plan.actions, Vec::new(), "{entry}");
        assert_eq!(
            plan.outcome,
            PreservationOutcome::Done { retry: Retry::Long },
            "{entry}"
        );
    }
}
