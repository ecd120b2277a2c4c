//! `machine_test.go` `#manageMachinePreservation` (both tables).

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use mcm_api::duration::Duration;
use mcm_api::keys::{annotation, condition as reason, label, preserve, taint as taint_key};
use mcm_api::v1alpha1::{Machine, MachinePhase as P};

use crate::drain::plan::DrainOutcome;
use crate::machine::preservation::{
    PreservationAction, PreservationInput, PreservationOutcome, PreservationPlan, plan_preservation,
};
use crate::test_support::*;
use crate::vocabulary::{ControllerSettings, Retry, effective_settings, set_entries};

const NOW: i64 = 50_000;

/// Where the machine's node stands.
#[derive(Clone, Copy, PartialEq)]
enum NodeSetup {
    // Label `node=node-1`, node exists.
    Exists,
    // No node label (upstream's `nodeName: ""`).
    NoLabel,
    // Label names a node that does not exist (upstream's `nodeName: "invalid"`).
    Missing,
}

struct Row {
    entry: &'static str,
    machine_value: Option<&'static str>,
    node_value: Option<&'static str>,
    last_applied: Option<&'static str>,
    node: NodeSetup,
    phase: Option<&'static str>,
    // preserveExpiryTime relative to now, in minutes.
    expiry_in: Option<i64>,
    tainted: bool,
    // Expected.
    expiry_set: bool,
    // Status of the Preserved node condition, `None` = no such condition.
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

// ---------------------------------------------------------------------------------------------
// machine_util_test.go: #preserveMachine and #stopPreservationIfActive
// ---------------------------------------------------------------------------------------------
//
// Upstream calls these helpers directly with a preserve value; ours has one entry point, so each
// row restates the call as `plan_preservation` input: the value as the machine's annotation (the
// node carries none), or for a stop, inputs that make the plan stop the preservation.

/// Node setup of the helper rows.
#[derive(Clone)]
struct HelperNode {
    // Annotations on the node.
    annotations: &'static [(&'static str, &'static str)],
    // Existing `Preserved` condition `(status, reason, message)`.
    condition: Option<(&'static str, &'static str, &'static str)>,
    user_cordoned: bool,
    tainted: bool,
}

struct HelperRow {
    entry: &'static str,
    phase: &'static str,
    machine_value: Option<&'static str>,
    // `None` = no node label; `Some(None)` = the label names a missing node.
    node: Option<Option<HelperNode>>,
    expiry_before: bool,
    // Seconds from now to the expiry when `expiry_before`.
    expiry_in: i64,
    // Expected.
    expiry_after: bool,
    // `Preserved` condition `(status, reason, message substring)` after.
    condition: Option<(&'static str, &'static str, &'static str)>,
    ca_annotation_after: bool,
    preserve_annotation_after: bool,
    tainted_after: bool,
}

const CA: (&str, &str) = (annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED, "true");

const fn plain_node() -> HelperNode {
    HelperNode {
        annotations: &[],
        condition: None,
        user_cordoned: false,
        tainted: false,
    }
}

fn helper_rows() -> Vec<HelperRow> {
    let user = reason::PRESERVED_BY_USER;
    let drained = reason::PRESERVED_NODE_DRAIN_SUCCESSFUL;
    let base = || HelperRow {
        entry: "",
        phase: "Failed",
        machine_value: Some(preserve::NOW),
        node: Some(Some(plain_node())),
        expiry_before: false,
        expiry_in: 600,
        expiry_after: true,
        condition: Some(("True", user, drained)),
        ca_annotation_after: true,
        preserve_annotation_after: false,
        tainted_after: true,
    };
    vec![
        HelperRow {
            entry: "when preserve=now and there is no backing node",
            phase: "Unknown",
            node: None,
            condition: None,
            ca_annotation_after: false,
            tainted_after: false,
            ..base()
        },
        HelperRow {
            entry: "when preserve=now, the machine is Running, and there is a backing node",
            phase: "Running",
            condition: Some(("True", user, "")),
            tainted_after: false,
            ..base()
        },
        HelperRow {
            entry: "when preserve=now, machine was preserved while Running (NodePreserved=True set without drain), then transitions to Failed: drain and taint must be applied",
            node: Some(Some(HelperNode {
                annotations: &[CA],
                condition: Some(("True", user, "")),
                ..plain_node()
            })),
            expiry_before: true,
            ..base()
        },
        HelperRow {
            entry: "when preserve=now, the machine has Failed, and there is a backing node",
            ..base()
        },
        HelperRow {
            entry: "when preserve=now, the machine has Failed, and the preservation is incomplete after step 1 - adding preserveExpiryTime",
            expiry_before: true,
            ..base()
        },
        HelperRow {
            entry: "when preserve=now, the machine has Failed, and the preservation is incomplete at step 2 - adding CA annotations",
            node: Some(Some(HelperNode {
                annotations: &[CA],
                ..plain_node()
            })),
            expiry_before: true,
            ..base()
        },
        HelperRow {
            entry: "when preserve=now, the machine has Failed, and the preservation is incomplete because of drain failure",
            node: Some(Some(HelperNode {
                annotations: &[CA],
                condition: Some(("False", user, reason::PRESERVED_NODE_DRAIN_UNSUCCESSFUL)),
                ..plain_node()
            })),
            ..base()
        },
        HelperRow {
            entry: "when preserve=when-failed, the machine has Failed, and there is a backing node",
            machine_value: Some(preserve::WHEN_FAILED),
            ..base()
        },
        HelperRow {
            entry: "when preserve=auto-preserved, the machine has Failed, and there is a backing node",
            machine_value: Some(preserve::AUTO_PRESERVED),
            condition: Some(("True", reason::PRESERVED_BY_MCM, drained)),
            ..base()
        },
        HelperRow {
            // Upstream's helper returns `node "err-backing-node" not found` after setting the
            // expiry; its caller (`manageMachinePreservation`, entry "when a machine has a
            // backing node, but node retrieval fails") swallows it (LongRetry, no error).
            entry: "when preserve=now, the machine has Failed, and there is an error fetching backing node",
            node: Some(None),
            condition: None,
            ca_annotation_after: false,
            tainted_after: false,
            ..base()
        },
        HelperRow {
            entry: "when preserve=now, the machine is Running, and the node is user-cordoned, Spec.Unschedulable must remain true",
            phase: "Running",
            node: Some(Some(HelperNode {
                user_cordoned: true,
                ..plain_node()
            })),
            condition: Some(("True", user, "")),
            tainted_after: false,
            ..base()
        },
        HelperRow {
            entry: "when preserve=now, the machine has Failed, and the node is user-cordoned, Spec.Unschedulable must remain true",
            node: Some(Some(HelperNode {
                user_cordoned: true,
                ..plain_node()
            })),
            ..base()
        },
        // #stopPreservationIfActive: the machine is preserved (expiry in 10 minutes) and its node
        // annotated `preserve=now` with the CA annotation and Preserved=True.
        HelperRow {
            // Removal of the preserve annotation is what a timed-out preservation does: the
            // expiry has passed.
            entry: "when stopping preservation on a preserved machine with backing node and preserve annotation needs to be removed",
            machine_value: None,
            expiry_in: -60,
            node: Some(Some(HelperNode {
                annotations: &[
                    (annotation::PRESERVE, preserve::NOW),
                    CA,
                    (
                        annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_BY_MCM,
                        "true",
                    ),
                ],
                condition: Some(("True", user, "")),
                ..plain_node()
            })),
            expiry_before: true,
            expiry_after: false,
            condition: Some(("False", reason::PRESERVATION_STOPPED, "")),
            ca_annotation_after: false,
            preserve_annotation_after: false,
            tainted_after: false,
            ..base()
        },
        HelperRow {
            // A stop without removal: the user's `preserve=false` on the node.
            entry: "when stopping preservation on a preserved machine with backing node and preserve annotation shouldn't be removed",
            machine_value: None,
            node: Some(Some(HelperNode {
                annotations: &[
                    (annotation::PRESERVE, preserve::FALSE),
                    CA,
                    (
                        annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_BY_MCM,
                        "true",
                    ),
                ],
                condition: Some(("True", user, "")),
                ..plain_node()
            })),
            expiry_before: true,
            expiry_after: false,
            condition: Some(("False", reason::PRESERVATION_STOPPED, "")),
            ca_annotation_after: false,
            preserve_annotation_after: true,
            tainted_after: false,
            ..base()
        },
        HelperRow {
            entry: "when stopping preservation on a preserved machine with no backing node",
            machine_value: None,
            node: None,
            expiry_before: true,
            expiry_after: false,
            condition: None,
            ca_annotation_after: false,
            tainted_after: false,
            ..base()
        },
        HelperRow {
            entry: "when stopping preservation on a preserved machine, and the backing node is not found",
            machine_value: None,
            node: Some(None),
            expiry_before: true,
            expiry_after: false,
            condition: None,
            ca_annotation_after: false,
            tainted_after: false,
            ..base()
        },
        HelperRow {
            entry: "when machine recovers to Running and node was not user-cordoned, preservation taint must be removed and Spec.Unschedulable must remain false",
            phase: "Running",
            machine_value: Some(preserve::WHEN_FAILED),
            node: Some(Some(HelperNode {
                annotations: &[
                    CA,
                    (
                        annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_BY_MCM,
                        "true",
                    ),
                ],
                condition: Some(("True", user, "")),
                tainted: true,
                ..plain_node()
            })),
            expiry_before: true,
            expiry_after: false,
            condition: Some(("False", reason::PRESERVATION_STOPPED, "")),
            ca_annotation_after: false,
            tainted_after: false,
            ..base()
        },
        HelperRow {
            entry: "when machine recovers to Running and node was user-cordoned, preservation taint must be removed and Spec.Unschedulable must remain true",
            phase: "Running",
            machine_value: Some(preserve::WHEN_FAILED),
            node: Some(Some(HelperNode {
                annotations: &[
                    CA,
                    (
                        annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_BY_MCM,
                        "true",
                    ),
                ],
                condition: Some(("True", user, "")),
                tainted: true,
                user_cordoned: true,
            })),
            expiry_before: true,
            expiry_after: false,
            condition: Some(("False", reason::PRESERVATION_STOPPED, "")),
            ca_annotation_after: false,
            tainted_after: false,
            ..base()
        },
    ]
}

#[test]
fn preserve_machine_and_stop_preservation_tables() {
    for row in helper_rows() {
        let entry = row.entry;
        let mut machine = machine("machine-1").with_phase(P::from(row.phase), at(NOW));
        if let Some(value) = row.machine_value {
            machine = machine.with_annotation(annotation::PRESERVE, value);
        }
        if row.node.is_some() {
            machine = machine.with_label(label::NODE, "node-1");
        }
        if row.expiry_before {
            machine = machine.with_preserve_expiry(Some(at(NOW + row.expiry_in)));
        }
        let mut node: Option<Node> = row.node.clone().flatten().map(|spec| {
            let mut n = node("node-1", Vec::new(), Vec::new());
            n.metadata.annotations = Some(
                spec.annotations
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            );
            if let Some((status, why, message)) = spec.condition {
                let mut c = condition(reason::PRESERVED, status, at(NOW - 60));
                c.reason = Some(why.to_owned());
                c.message = Some(message.to_owned());
                n.status.as_mut().unwrap().conditions = Some(vec![c]);
            }
            let node_spec = n.spec.as_mut().unwrap();
            node_spec.unschedulable = Some(spec.user_cordoned);
            if spec.tainted {
                node_spec.taints = Some(vec![taint(taint_key::PRESERVED, "NoSchedule")]);
            }
            n
        });
        let cordoned_before = node
            .as_ref()
            .and_then(|n| n.spec.as_ref())
            .and_then(|s| s.unschedulable);
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
                PreservationOutcome::Done { retry } => {
                    assert_eq!(retry, Retry::Long, "{entry}");
                    break;
                }
                PreservationOutcome::NeedsDrain(_) => drain = Some(DrainOutcome::Complete),
            }
        }
        let expiry = machine
            .status
            .as_ref()
            .and_then(|s| s.current_status.as_ref())
            .and_then(|c| c.preserve_expiry_time.clone());
        assert_eq!(expiry.is_some(), row.expiry_after, "{entry}");
        let Some(node) = node else {
            assert!(row.condition.is_none(), "{entry}");
            continue;
        };
        let found = preserved(&node).map(|c| {
            (
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        });
        match (row.condition, found) {
            (None, None) => {}
            (Some((status, why, message)), Some((found_status, found_reason, found_message))) => {
                assert_eq!(
                    (status, why),
                    (found_status.as_str(), found_reason.as_str()),
                    "{entry}"
                );
                assert!(found_message.contains(message), "{entry}: {found_message}");
            }
            (want, got) => panic!("{entry}: condition {want:?} != {got:?}"),
        }
        let annotations = &node.metadata.annotations;
        assert_eq!(
            annotation_of(
                annotations,
                annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED
            ) == "true",
            row.ca_annotation_after,
            "{entry}"
        );
        assert_eq!(
            !annotation_of(annotations, annotation::PRESERVE).is_empty(),
            row.preserve_annotation_after,
            "{entry}"
        );
        let tainted = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == taint_key::PRESERVED));
        assert_eq!(tainted, row.tainted_after, "{entry}");
        assert_eq!(
            node.spec.as_ref().and_then(|s| s.unschedulable),
            cordoned_before,
            "{entry}: preservation must not change spec.unschedulable"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// machine_util_test.go: #computeNewNodePreservedCondition and #shouldPreservedNodeBeDrained
// ---------------------------------------------------------------------------------------------
//
// Upstream prints the expiry with Go's `time.Time.String()` (`%v` of the `*metav1.Time`); the rows
// compare the whole message byte for byte, with the expiry of `preserved_pass` (`at(NOW + 7200)`)
// written out as Go prints it.

/// `at(NOW + 7200)` as Go's `time.Time.String()` prints it (UTC, whole seconds).
const EXPIRY_GO: &str = "2027-01-15 23:53:20 +0000 UTC";

/// A preserved machine (expiry in two hours, `preserve=now` or the given value) whose node has
/// the CA annotations, the preserved taint and optionally a `Preserved` condition; runs one pass
/// with the given drain result and returns the plan.
fn preserved_pass(
    phase: &str,
    value: &str,
    existing: Option<(&str, &str, &str)>,
    drain: Option<DrainOutcome>,
) -> PreservationPlan {
    let machine = machine("machine-1")
        .with_label(label::NODE, "node-1")
        .with_annotation(annotation::PRESERVE, value)
        .with_phase(P::from(phase), at(NOW))
        .with_preserve_expiry(Some(at(NOW + 7200)));
    let mut node = node(
        "node-1",
        Vec::new(),
        vec![taint(taint_key::PRESERVED, "NoSchedule")],
    );
    node.metadata.annotations = Some(
        [
            (
                annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED.to_owned(),
                "true".to_owned(),
            ),
            (
                annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_BY_MCM.to_owned(),
                "true".to_owned(),
            ),
        ]
        .into(),
    );
    if let Some((status, why, message)) = existing {
        let mut c = condition(reason::PRESERVED, status, at(NOW - 60));
        c.reason = Some(why.to_owned());
        c.message = Some(message.to_owned());
        node.status.as_mut().unwrap().conditions = Some(vec![c]);
    }
    let settings = effective_settings(&machine, &ControllerSettings::default());
    plan_preservation(&PreservationInput {
        machine: &machine,
        node: Some(&node),
        settings: &settings,
        pv_detach_timeout: Duration::from_mins(2),
        drain: drain.as_ref(),
        now: at(NOW),
    })
}

fn written_condition(plan: &PreservationPlan) -> Option<&NodeCondition> {
    plan.actions.iter().find_map(|action| match action {
        PreservationAction::NodeCondition(c) => Some(c),
        _ => None,
    })
}

struct ConditionRow {
    entry: &'static str,
    phase: &'static str,
    value: &'static str,
    // Drain result: `Some(true)` succeeded, `Some(false)` failed, `None` not drained (Running).
    drained: Option<bool>,
    existing: Option<(&'static str, &'static str, String)>,
    // Written condition `(status, reason, whole message)`; `None` = no update needed.
    written: Option<(&'static str, &'static str, String)>,
}

#[test]
fn compute_new_node_preserved_condition_table() {
    let user = reason::PRESERVED_BY_USER;
    // Upstream's messages: "Machine preserved until <t>." (Running), "<drain result> Machine
    // preserved until <t>." (Failed); the existing condition of entry 5 has no final period.
    let until = format!("Machine preserved until {EXPIRY_GO}.");
    let drained = format!(
        "{} Machine preserved until {EXPIRY_GO}.",
        reason::PRESERVED_NODE_DRAIN_SUCCESSFUL
    );
    let not_drained = format!(
        "{} Machine preserved until {EXPIRY_GO}.",
        reason::PRESERVED_NODE_DRAIN_UNSUCCESSFUL
    );
    let rows = [
        ConditionRow {
            entry: "when preserve=now, machine is Running, no existing condition",
            phase: "Running",
            value: preserve::NOW,
            drained: None,
            existing: None,
            written: Some(("True", user, until.clone())),
        },
        ConditionRow {
            entry: "when preserve=now, machine is Failed, drain successful, no existing condition",
            phase: "Failed",
            value: preserve::NOW,
            drained: Some(true),
            existing: None,
            written: Some(("True", user, drained.clone())),
        },
        ConditionRow {
            entry: "when preserve=now, machine is Failed, drain is unsuccessful, no existing condition",
            phase: "Failed",
            value: preserve::NOW,
            drained: Some(false),
            existing: None,
            written: Some(("False", user, not_drained.clone())),
        },
        ConditionRow {
            entry: "when machine auto-preserved by MCM, machine is Failed, drain is successful, no existing condition",
            phase: "Failed",
            value: preserve::AUTO_PRESERVED,
            drained: Some(true),
            existing: None,
            written: Some(("True", reason::PRESERVED_BY_MCM, drained.clone())),
        },
        ConditionRow {
            entry: "when preserve=now, machine is Failed, drain is unsuccessful, existing condition present",
            phase: "Failed",
            value: preserve::NOW,
            drained: Some(false),
            existing: Some((
                "False",
                user,
                format!("Machine preserved until {EXPIRY_GO}"),
            )),
            written: Some(("False", user, not_drained.clone())),
        },
        ConditionRow {
            entry: "when preserve=now, machine is Failed, drain is unsuccessful for the second time, existing condition present",
            phase: "Failed",
            value: preserve::NOW,
            drained: Some(false),
            existing: Some(("False", user, not_drained.clone())),
            written: None,
        },
        ConditionRow {
            // Already drained: no drain is asked for, and nothing changes.
            entry: "when preserve=now, machine is Failed, drain is successful, existing condition present and status is true",
            phase: "Failed",
            value: preserve::NOW,
            drained: None,
            existing: Some(("True", user, drained.clone())),
            written: None,
        },
    ];
    for row in rows {
        let entry = row.entry;
        let drain = row.drained.map(|success| {
            if success {
                DrainOutcome::Complete
            } else {
                DrainOutcome::Failed {
                    reason: "test drain error".to_owned(),
                }
            }
        });
        let existing = row
            .existing
            .as_ref()
            .map(|(status, why, message)| (*status, *why, message.as_str()));
        let plan = preserved_pass(row.phase, row.value, existing, drain);
        assert!(
            !matches!(plan.outcome, PreservationOutcome::NeedsDrain(_)),
            "{entry}: {:?}",
            plan.outcome
        );
        let written = written_condition(&plan);
        match (row.written, written) {
            (None, None) => {}
            (Some((status, why, message)), Some(c)) => {
                assert_eq!(c.type_, reason::PRESERVED, "{entry}");
                assert_eq!(
                    (c.status.as_str(), c.reason.as_deref()),
                    (status, Some(why)),
                    "{entry}"
                );
                assert_eq!(c.message.as_deref(), Some(message.as_str()), "{entry}");
            }
            (want, got) => panic!("{entry}: wanted {want:?}, wrote {got:?}"),
        }
    }
}

#[test]
fn should_preserved_node_be_drained_table() {
    let drains = |phase: &str, existing: Option<(&str, &str, &str)>| {
        matches!(
            preserved_pass(phase, preserve::NOW, existing, None).outcome,
            PreservationOutcome::NeedsDrain(_)
        )
    };
    assert!(
        !drains("Running", None),
        "should return false when machine is Running"
    );
    assert!(
        drains("Failed", None),
        "should return true when machine is Failed and there is no existing node condition"
    );
    assert!(
        drains(
            "Failed",
            Some((
                "False",
                reason::PRESERVED_BY_USER,
                reason::PRESERVED_NODE_DRAIN_UNSUCCESSFUL
            ))
        ),
        "should return true when machine is Failed and existing node condition message is PreservedNodeDrainUnsuccessful"
    );
}

// ---------------------------------------------------------------------------------------------
// machine_util_test.go: #removePreservationRelatedAnnotationsOnNode
// ---------------------------------------------------------------------------------------------

/// `(entry, remove the preserve annotation, by-MCM marker present, annotations left)`. The node
/// always has the CA annotation; the stop is restated as plan input: removal = the `now`
/// preservation expired, no removal = a `when-failed` machine back to Running. (Upstream's table
/// also lists "deleted" keys but loops over their indices, so only the kept keys are checked
/// there; the expectations here follow its `removePreservationRelatedAnnotationsOnNode`: the CA
/// annotations go only with MCM's marker.)
#[allow(clippy::type_complexity)]
const REMOVE_ANNOTATIONS: &[(&str, bool, bool, &[&str])] = &[
    (
        "when removePreserveAnnotation is true and ClusterAutoscalerScaleDownDisabledAnnotationByMCM annotation is present, should delete all preservation related annotations",
        true,
        true,
        &[],
    ),
    (
        "when removePreserveAnnotation is false and ClusterAutoscalerScaleDownDisabledAnnotationByMCM annotation is present, should delete only CA annotations ",
        false,
        false,
        &[
            annotation::PRESERVE,
            annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED,
        ],
    ),
    (
        "when removePreserveAnnotation is true and ClusterAutoscalerScaleDownDisabledAnnotationByMCM is not present, should delete only preserve annotation",
        true,
        false,
        &[annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED],
    ),
    (
        "when removePreserveAnnotation is false and ClusterAutoscalerScaleDownDisabledAnnotationByMCM is not present, should not delete any annotations",
        false,
        false,
        &[
            annotation::PRESERVE,
            annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED,
        ],
    ),
];

#[test]
fn remove_preservation_related_annotations_on_node_table() {
    for (entry, remove, marker, left) in REMOVE_ANNOTATIONS {
        let (value, phase, expiry_in) = if *remove {
            (preserve::NOW, "Running", -60)
        } else {
            (preserve::WHEN_FAILED, "Running", 600)
        };
        let mut machine = machine("machine-1")
            .with_label(label::NODE, "node-1")
            .with_phase(P::from(phase), at(NOW))
            .with_preserve_expiry(Some(at(NOW + expiry_in)));
        let mut annotations = BTreeMap::from([
            (annotation::PRESERVE.to_owned(), value.to_owned()),
            (
                annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED.to_owned(),
                "true".to_owned(),
            ),
        ]);
        if *marker {
            annotations.insert(
                annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_BY_MCM.to_owned(),
                "true".to_owned(),
            );
        }
        let mut node = Some(node("node-1", Vec::new(), Vec::new()));
        node.as_mut().unwrap().metadata.annotations = Some(annotations);
        let settings = effective_settings(&machine, &ControllerSettings::default());
        let plan = plan_preservation(&PreservationInput {
            machine: &machine.clone(),
            node: node.clone().as_ref(),
            settings: &settings,
            pv_detach_timeout: Duration::from_mins(2),
            drain: None,
            now: at(NOW),
        });
        apply(&plan, &mut machine, &mut node);
        let keys: Vec<&str> = node
            .as_ref()
            .unwrap()
            .metadata
            .annotations
            .as_ref()
            .map(|a| a.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let mut expected: Vec<&str> = left.to_vec();
        expected.sort_unstable();
        assert_eq!(keys, expected, "{entry}");
    }
}

// ---------------------------------------------------------------------------------------------
// machine_test.go: #getEffectivePreservationAnnotations, #shouldAnnotationsBeUpdatedOnMachine,
// #updatePreserveAnnotationOnMachine
// ---------------------------------------------------------------------------------------------
//
// Upstream's helpers compute the effective preserve value (the node's value wins once it has
// been applied) and keep the machine's `preserve` / `last-applied-node-preserve-value`
// annotations in step with the node. Ours does both inside `plan_preservation`; each row is one
// pass on a Running machine (no expiry unless stated): the effective value shows as "a
// preservation starts" (`now`) or not, the annotation sync as the `MachineAnnotations` write.
// Upstream's abstract values "A"/"B" are `now`/`when-failed` here.

/// One pass; returns the machine after the writes and whether a machine-annotation write
/// setting the last-applied value was made.
fn sync_pass(
    machine_value: Option<&str>,
    last_applied: Option<&str>,
    node_value: Option<&str>,
    expiry_in: Option<i64>,
) -> (Machine, Option<Option<String>>) {
    let mut machine = machine("m1")
        .with_label(label::NODE, "node-1")
        .with_phase(P::Running, at(NOW))
        .with_preserve_expiry(expiry_in.map(|seconds| at(NOW + seconds)));
    if let Some(value) = machine_value {
        machine = machine.with_annotation(annotation::PRESERVE, value);
    }
    if let Some(value) = last_applied {
        machine = machine.with_annotation(annotation::LAST_APPLIED_NODE_PRESERVE_VALUE, value);
    }
    let mut node = Some(node("node-1", Vec::new(), Vec::new()));
    if let Some(value) = node_value {
        node.as_mut().unwrap().metadata.annotations =
            Some([(annotation::PRESERVE.to_owned(), value.to_owned())].into());
    }
    let settings = effective_settings(&machine, &ControllerSettings::default());
    let plan = plan_preservation(&PreservationInput {
        machine: &machine.clone(),
        node: node.clone().as_ref(),
        settings: &settings,
        pv_detach_timeout: Duration::from_mins(2),
        drain: None,
        now: at(NOW),
    });
    let last_applied_write = plan.actions.iter().find_map(|action| match action {
        PreservationAction::MachineAnnotations(changes) => changes
            .get(annotation::LAST_APPLIED_NODE_PRESERVE_VALUE)
            .cloned(),
        _ => None,
    });
    apply(&plan, &mut machine, &mut node);
    (machine, last_applied_write)
}

fn preserving(machine: &Machine) -> bool {
    machine
        .status
        .as_ref()
        .and_then(|s| s.current_status.as_ref())
        .is_some_and(|c| c.preserve_expiry_time.is_some())
}

#[test]
fn get_effective_preservation_annotations_table() {
    const A: &str = preserve::NOW;
    const B: &str = preserve::WHEN_FAILED;
    // `(entry, node value, machine value, last applied, effective, machine preserve after,
    // last applied after)`; "" = absent.
    #[allow(clippy::type_complexity)]
    let rows: [(&str, &str, &str, &str, &str, &str, &str); 7] = [
        (
            "when node is not annotated and laNodeAnnotationValue is empty, should return machine's annotation value and empty string",
            "",
            A,
            "",
            A,
            A,
            "",
        ),
        (
            "when neither node nor machine is not annotated and laNodeAnnotationValue is empty, should return two empty strings",
            "",
            "",
            "",
            "",
            "",
            "",
        ),
        (
            "when neither node nor machine is annotated and laNodeAnnotationValue is \"A\", should return two empty strings",
            "",
            "",
            A,
            "",
            "",
            "",
        ),
        (
            "when node is annotated, laNodeAnnotationValue is empty, and machine is not annotated, should return node's annotation value as effective value and last applied value",
            A,
            "",
            "",
            A,
            "",
            A,
        ),
        (
            "when node is annotated, laNodeAnnotationValue is empty, and machine is annotated differently, should return node's annotation value as effective value and last applied value",
            A,
            B,
            "",
            A,
            "",
            A,
        ),
        (
            "when node, machine annotation values and laNodeAnnotationValue are the same, should return node's annotation value as effective value and last applied value",
            A,
            A,
            A,
            A,
            "",
            A,
        ),
        (
            "when node, machine annotation values are the same and laNodeAnnotationValue differs, should return node's annotation value as effective value and last applied value",
            A,
            A,
            B,
            A,
            "",
            A,
        ),
    ];
    let some = |text: &'static str| (!text.is_empty()).then_some(text);
    for (entry, node_value, machine_value, last, effective, machine_after, last_after) in rows {
        let (machine, _) = sync_pass(some(machine_value), some(last), some(node_value), None);
        assert_eq!(preserving(&machine), effective == A, "{entry}");
        let annotations = &machine.metadata.annotations;
        assert_eq!(
            annotation_of(annotations, annotation::PRESERVE),
            machine_after,
            "{entry}"
        );
        assert_eq!(
            annotation_of(annotations, annotation::LAST_APPLIED_NODE_PRESERVE_VALUE),
            last_after,
            "{entry}"
        );
    }
}

#[test]
fn should_annotations_be_updated_on_machine_table() {
    let now = Some(preserve::NOW);
    let when_failed = Some(preserve::WHEN_FAILED);
    // removeAnnotations=true is a stop with removal (expired `now`): the annotations are removed,
    // not synced to the node's value.
    let (_, write) = sync_pass(None, None, now, Some(-60));
    assert_eq!(
        write,
        Some(None),
        "removeAnnotations=true: always returns false"
    );
    // `(entry, node value, last applied, machine annotated, sync write expected)`.
    #[allow(clippy::type_complexity)]
    let rows: [(&str, Option<&str>, Option<&str>, Option<&str>, bool); 6] = [
        (
            "node not annotated and no lastAppliedNodeValue: returns false",
            None,
            None,
            None,
            false,
        ),
        (
            "node value unchanged and machine not annotated: returns false",
            now,
            now,
            None,
            false,
        ),
        (
            "node value changed: returns true",
            now,
            when_failed,
            None,
            true,
        ),
        (
            "node value unchanged but machine is annotated: returns true",
            now,
            now,
            now,
            true,
        ),
        (
            "lastAppliedNodeValue set without node annotation: returns true (machine annotation present)",
            None,
            now,
            now,
            true,
        ),
        (
            "lastAppliedNodeValue set without node annotation and machine not annotated: returns true (node value drifted from last-applied)",
            None,
            now,
            None,
            true,
        ),
    ];
    for (entry, node_value, last, machine_value, expected) in rows {
        let (_, write) = sync_pass(machine_value, last, node_value, None);
        assert_eq!(
            write.as_ref().is_some_and(Option::is_some),
            expected,
            "{entry}: {write:?}"
        );
        if let Some(Some(value)) = write {
            assert_eq!(value, node_value.unwrap_or(""), "{entry}");
        }
    }
}

#[test]
fn update_preserve_annotation_on_machine_table() {
    // `(entry, machine preserve, last applied, node value, last applied after)`; the machine's
    // preserve annotation is gone after every row.
    #[allow(clippy::type_complexity)]
    let rows: [(&str, Option<&str>, Option<&str>, Option<&str>, &str); 4] = [
        (
            "machine has no annotations and nodeValue='now': should set last-applied='now' and leave no preserve annotation",
            None,
            None,
            Some(preserve::NOW),
            preserve::NOW,
        ),
        (
            "machine has preserve='now' and nodeValue='now': should clear preserve annotation and set last-applied='now'",
            Some(preserve::NOW),
            None,
            Some(preserve::NOW),
            preserve::NOW,
        ),
        (
            "machine has preserve='now' and last-applied='now' and nodeValue='': should clear preserve annotation and set last-applied=''",
            Some(preserve::NOW),
            Some(preserve::NOW),
            None,
            "",
        ),
        (
            "machine has last-applied='now' and nodeValue='when-failed': should clear preserve annotation and overwrite last-applied='when-failed'",
            None,
            Some(preserve::NOW),
            Some(preserve::WHEN_FAILED),
            preserve::WHEN_FAILED,
        ),
    ];
    for (entry, machine_value, last, node_value, last_after) in rows {
        let (machine, write) = sync_pass(machine_value, last, node_value, None);
        assert!(matches!(write, Some(Some(_))), "{entry}: {write:?}");
        let annotations = &machine.metadata.annotations;
        assert_eq!(
            annotation_of(annotations, annotation::LAST_APPLIED_NODE_PRESERVE_VALUE),
            last_after,
            "{entry}"
        );
        assert!(
            annotations
                .as_ref()
                .is_none_or(|a| !a.contains_key(annotation::PRESERVE)),
            "{entry}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// machine_test.go: #isMachinePreservationBound
// ---------------------------------------------------------------------------------------------

/// `(entry, node label, node exists, machine preserve, last applied, expiry, node preserve,
/// bound)`. A bound machine shows as a pass that writes something (start, stop or annotation
/// sync); an unbound one is left alone.
#[allow(clippy::type_complexity)]
const BOUND: &[(
    &str,
    bool,
    bool,
    Option<&str>,
    Option<&str>,
    bool,
    Option<&str>,
    bool,
)] = &[
    (
        "machine has no annotations, no preserveExpiryTime, and node has no preservation annotation",
        true,
        true,
        None,
        None,
        false,
        None,
        false,
    ),
    (
        "machine has no node label and no other preservation markers",
        false,
        false,
        None,
        None,
        false,
        None,
        false,
    ),
    (
        "machine has preserve annotation set",
        true,
        true,
        Some(preserve::NOW),
        None,
        false,
        None,
        true,
    ),
    (
        "machine has a non-nil preserveExpiryTime",
        true,
        true,
        None,
        None,
        true,
        None,
        true,
    ),
    (
        "machine's node has a preservation annotation",
        true,
        true,
        None,
        None,
        false,
        Some(preserve::NOW),
        true,
    ),
    (
        "machine has last-applied node preserve value annotation",
        true,
        true,
        None,
        Some(preserve::NOW),
        false,
        None,
        true,
    ),
    // Upstream's helper also reports `node "node-1" not found`; unbound either way.
    (
        "node is not found and machine has no preservation markers",
        true,
        false,
        None,
        None,
        false,
        None,
        false,
    ),
];

#[test]
fn is_machine_preservation_bound_table() {
    for (entry, labelled, exists, machine_value, last, expiry, node_value, bound) in BOUND {
        let mut machine = machine("m1").with_phase(P::Running, at(NOW));
        if *labelled {
            machine = machine.with_label(label::NODE, "node-1");
        }
        if let Some(value) = machine_value {
            machine = machine.with_annotation(annotation::PRESERVE, value);
        }
        if let Some(value) = last {
            machine = machine.with_annotation(annotation::LAST_APPLIED_NODE_PRESERVE_VALUE, value);
        }
        if *expiry {
            machine = machine.with_preserve_expiry(Some(at(NOW + 3600)));
        }
        let mut node = node("node-1", Vec::new(), Vec::new());
        if let Some(value) = node_value {
            node.metadata.annotations =
                Some([(annotation::PRESERVE.to_owned(), (*value).to_owned())].into());
        }
        let settings = effective_settings(&machine, &ControllerSettings::default());
        let plan = plan_preservation(&PreservationInput {
            machine: &machine,
            node: exists.then_some(&node),
            settings: &settings,
            pv_detach_timeout: Duration::from_mins(2),
            drain: None,
            now: at(NOW),
        });
        assert_eq!(
            !plan.actions.is_empty(),
            *bound,
            "{entry}: {:?}",
            plan.actions
        );
    }
}

// ---------------------------------------------------------------------------------------------
// machine_test.go: #getPreserveStateInfo
// ---------------------------------------------------------------------------------------------
//
// Upstream's helper only gathers five facts (machine preserve value, last-applied node value,
// expiry set, node preserve value, node lookup error); ours reads them inside
// `plan_preservation`. Each row shows every fact the entry sets being read, through what one
// pass on a Running machine does with it: a preservation starting (machine or node value read
// and in force), the expiry being cleared (expiry read, nothing in force), or the last-applied
// value written by the annotation sync (node value / last-applied value read).

/// What one pass does: `(preservation in force after, last-applied value written)`.
type Seen = (bool, Option<&'static str>);

/// `(entry, node label, node exists, machine preserve, last applied, expiry set, node preserve,
/// expected)`.
#[allow(clippy::type_complexity)]
const STATE_INFO: &[(
    &str,
    bool,
    bool,
    Option<&str>,
    Option<&str>,
    bool,
    Option<&str>,
    Seen,
)] = &[
    // Nothing gathered: nothing done.
    (
        "machine has no annotations and no node label",
        false,
        false,
        None,
        None,
        false,
        None,
        (false, None),
    ),
    // machineValue=now: the machine's value is in force (node has none, nothing applied before).
    (
        "machine has preserve annotation and node is not annotated",
        true,
        true,
        Some(preserve::NOW),
        None,
        false,
        None,
        (true, None),
    ),
    // lastAppliedNodeValue=now: the node's (empty) value is in force and synced back.
    (
        "machine has last-applied node preserve value annotation but no preserve annotations on node or machine",
        true,
        true,
        None,
        Some(preserve::NOW),
        false,
        None,
        (false, Some("")),
    ),
    // preserveExpiryTimeSet: bound, no value in force, so the running preservation is stopped.
    (
        "machine has a non-nil preserveExpiryTime",
        true,
        true,
        None,
        None,
        true,
        None,
        (false, None),
    ),
    // nodeValue=when-failed: in force (Running machine, so not preserved) and synced back.
    (
        "node has preserve annotation",
        true,
        true,
        None,
        None,
        false,
        Some(preserve::WHEN_FAILED),
        (false, Some(preserve::WHEN_FAILED)),
    ),
    // The node lookup fails: the machine's value is enforced (getEffectivePreservationAnnotations
    // on NotFound).
    (
        "node not found returns error and partial info",
        true,
        false,
        Some(preserve::NOW),
        None,
        false,
        None,
        (true, None),
    ),
];

fn state_info_pass(
    labelled: bool,
    exists: bool,
    machine_value: Option<&str>,
    last: Option<&str>,
    expiry: bool,
    node_value: Option<&str>,
) -> PreservationPlan {
    let mut machine = machine("m1").with_phase(P::Running, at(NOW));
    if labelled {
        machine = machine.with_label(label::NODE, "node-1");
    }
    if let Some(value) = machine_value {
        machine = machine.with_annotation(annotation::PRESERVE, value);
    }
    if let Some(value) = last {
        machine = machine.with_annotation(annotation::LAST_APPLIED_NODE_PRESERVE_VALUE, value);
    }
    if expiry {
        machine = machine.with_preserve_expiry(Some(at(NOW + 3600)));
    }
    let mut node = node("node-1", Vec::new(), Vec::new());
    if let Some(value) = node_value {
        node.metadata.annotations =
            Some([(annotation::PRESERVE.to_owned(), value.to_owned())].into());
    }
    let settings = effective_settings(&machine, &ControllerSettings::default());
    plan_preservation(&PreservationInput {
        machine: &machine,
        node: exists.then_some(&node),
        settings: &settings,
        pv_detach_timeout: Duration::from_mins(2),
        drain: None,
        now: at(NOW),
    })
}

/// The expiry the plan leaves: `Some(true)` set, `Some(false)` cleared, `None` not written.
fn expiry_written(plan: &PreservationPlan) -> Option<bool> {
    plan.actions.iter().rev().find_map(|action| match action {
        PreservationAction::Status(write) => {
            Some(write.current_status.preserve_expiry_time.is_some())
        }
        _ => None,
    })
}

fn last_applied_written(plan: &PreservationPlan) -> Option<Option<String>> {
    plan.actions.iter().find_map(|action| match action {
        PreservationAction::MachineAnnotations(changes) => changes
            .get(annotation::LAST_APPLIED_NODE_PRESERVE_VALUE)
            .cloned(),
        _ => None,
    })
}

#[test]
fn get_preserve_state_info_table() {
    for &(entry, labelled, exists, machine_value, last, expiry, node_value, (kept, synced)) in
        STATE_INFO
    {
        let plan = state_info_pass(labelled, exists, machine_value, last, expiry, node_value);
        let in_force = match expiry_written(&plan) {
            Some(set) => set,
            None => expiry,
        };
        assert_eq!(in_force, kept, "{entry}: {:?}", plan.actions);
        if expiry && !kept {
            assert_eq!(
                expiry_written(&plan),
                Some(false),
                "{entry}: expiry not cleared"
            );
        }
        assert_eq!(
            last_applied_written(&plan),
            synced.map(|value| Some(value.to_owned())),
            "{entry}: {:?}",
            plan.actions
        );
    }
    // Nothing gathered means nothing written at all.
    assert!(
        state_info_pass(false, false, None, None, false, None)
            .actions
            .is_empty()
    );
}

/// "both machine and node have preserve annotations": machine `now`, last applied `when-failed`,
/// node `auto-preserved`. All three are read: the node's value is in force (an auto-preserved
/// Running machine is not preserved, where the machine's `now` alone would preserve it).
#[test]
fn get_preserve_state_info_both_annotated() {
    let plan = state_info_pass(
        true,
        true,
        Some(preserve::NOW),
        Some(preserve::WHEN_FAILED),
        false,
        Some(preserve::AUTO_PRESERVED),
    );
    assert_eq!(expiry_written(&plan), None, "{:?}", plan.actions);
    // Upstream's manageMachinePreservation sets removeAnnotations for an auto-preserved Running
    // machine and so skips the annotation sync even with no active preservation: nothing is
    // written to the machine's annotations.
    assert!(
        !plan
            .actions
            .iter()
            .any(|action| matches!(action, PreservationAction::MachineAnnotations(_))),
        "{:?}",
        plan.actions
    );
}
