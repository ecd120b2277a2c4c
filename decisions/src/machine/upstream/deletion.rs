//! `machine_test.go` `#triggerDeletionFlow` / `##table`: one deletion step per entry, replayed
//! through `deletion_stage` and the stage's plan function with the answers upstream's fakes give
//! (driver, node object, node update failures).
//!
//! Upstream's returned error is only logged (and requeues); the rows compare what is stored: the
//! phase, lastOperation description/state/type, the retry class, the finalizer, the node's
//! Terminating condition.

#![allow(clippy::unwrap_used)]

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use mcm_api::duration::Duration;
use mcm_api::keys::{label, last_operation as text};
use mcm_api::v1alpha1::{Machine, MachineOperationType, MachinePhase as P, MachineState};
use mcm_provider_proto::DeleteMachineResponse;

use crate::drain::plan::{DrainOutcome, deletion_drain_config};
use crate::machine::backoff::BackoffSettings;
use crate::machine::deletion::{
    DeletionOutcome, DeletionStage, DrainStageInput, DrainStageStep, NodeDeletionResult,
    NodeDeletionStep, NodeLookupResult, VmStatusInput, VmStatusStep, deletion_stage, plan_blocked,
    plan_delete_vm_result, plan_drain_stage, plan_finalizer_removal_result, plan_get_vm_status,
    plan_node_deletion, plan_node_deletion_result, plan_set_termination,
};
use crate::test_support::*;
use crate::vocabulary::{ControllerSettings, Retry, effective_settings};

const NOW: i64 = 20_000;
const NODE_UPDATE_FAILS: &str = "Failed to update node";

struct Row {
    entry: &'static str,
    phase: &'static str,
    description: &'static str,
    finalizer: bool,
    /// Label `node` ("" = present but empty).
    node_label: &'static str,
    /// Machine conditions `(type, status, minutes since transition)`.
    conditions: &'static [(&'static str, &'static str, i64)],
    /// Label `force-deletion=True`.
    force_label: bool,
    /// Minutes since the deletion timestamp.
    deleted_minutes_ago: i64,
    /// The node named by the label exists.
    node_exists: bool,
    /// Node updates fail with "Failed to update node" (upstream's fake resource action).
    node_updates_fail: bool,
    target_cluster: bool,
    // Expected.
    /// lastOperation `(description, state)` written, `None` = no status write.
    written: Option<(&'static str, MachineState)>,
    retry: Retry,
    /// The node got `Terminating=True`.
    terminating_condition: bool,
}

const BASE: Row = Row {
    entry: "",
    phase: "Terminating",
    description: text::INITIATE_DRAIN,
    finalizer: true,
    node_label: "fakeID-0",
    conditions: &[],
    force_label: false,
    deleted_minutes_ago: 0,
    node_exists: true,
    node_updates_fail: false,
    target_cluster: true,
    written: None,
    retry: Retry::Short,
    terminating_condition: false,
};

const ROWS: &[Row] = &[
    Row {
        entry: "Do not process machine deletion for object without finalizer",
        phase: "Running",
        description: "Machine machine-0 successfully joined the cluster",
        finalizer: false,
        retry: Retry::Long,
        ..BASE
    },
    Row {
        entry: "Change machine phase to termination successfully",
        phase: "Running",
        description: "Machine machine-0 successfully joined the cluster",
        written: Some((text::GET_VM_STATUS, MachineState::Processing)),
        ..BASE
    },
    Row {
        entry: "Checking existance of VM at provider successfully",
        description: text::GET_VM_STATUS,
        written: Some((text::INITIATE_DRAIN, MachineState::Processing)),
        ..BASE
    },
    Row {
        entry: "Drain machine successfully",
        node_label: "fakeNode-0",
        written: Some((
            "Drain successful. Initiate VM deletion",
            MachineState::Processing,
        )),
        terminating_condition: true,
        ..BASE
    },
    Row {
        entry: "Drain skipping as nodeName is not valid",
        node_label: "",
        conditions: &[("Ready", "Unknown", 6)],
        node_exists: false,
        written: Some((
            "Skipping drain as nodeName is not a valid one for machine. Initiate VM deletion",
            MachineState::Processing,
        )),
        ..BASE
    },
    Row {
        entry: "Force Drain as machine is NotReady for a long time (5 minutes)",
        conditions: &[("Ready", "Unknown", 6)],
        written: Some((
            "Force Drain successful. Delete Volume Attachments",
            MachineState::Processing,
        )),
        terminating_condition: true,
        ..BASE
    },
    Row {
        entry: "Force Drain as machine is in ReadonlyFilesystem for a long time (5 minutes)",
        conditions: &[("ReadonlyFilesystem", "True", 6)],
        written: Some((
            "Force Drain successful. Delete Volume Attachments",
            MachineState::Processing,
        )),
        terminating_condition: true,
        ..BASE
    },
    Row {
        entry: "Force Drain as machine is NotReady for a long time(5 min) ,also ReadonlyFilesystem is true for a long time (5 minutes)",
        conditions: &[("ReadonlyFilesystem", "True", 6), ("Ready", "False", 6)],
        written: Some((
            "Force Drain successful. Delete Volume Attachments",
            MachineState::Processing,
        )),
        terminating_condition: true,
        ..BASE
    },
    Row {
        entry: "No Drain skipping as ReadonlyFilesystem is true for a short time(<5min)",
        conditions: &[("ReadonlyFilesystem", "True", 2)],
        written: Some((
            "Drain successful. Initiate VM deletion",
            MachineState::Processing,
        )),
        terminating_condition: true,
        ..BASE
    },
    Row {
        entry: "No Drain skipping as ReadonlyFilesystem is false",
        conditions: &[("ReadonlyFilesystem", "False", 6)],
        written: Some((
            "Drain successful. Initiate VM deletion",
            MachineState::Processing,
        )),
        terminating_condition: true,
        ..BASE
    },
    Row {
        entry: "Drain machine failure, but since force deletion label is present deletion continues",
        force_label: true,
        node_updates_fail: true,
        written: Some((
            "Drain failed due to - Failed to update node. However, since it's a force deletion shall continue deletion of VM. Delete Volume Attachments",
            MachineState::Processing,
        )),
        ..BASE
    },
    Row {
        entry: "Drain machine failure before drain timeout, hence deletion fails",
        node_updates_fail: true,
        written: Some((
            "Drain failed due to failure in update of node conditions - failed to create/update conditions on node \"fakeID-0\": Failed to update node. Will retry in next sync. Initiate node drain",
            MachineState::Failed,
        )),
        ..BASE
    },
    Row {
        entry: "Drain machine failure after drain timeout, hence deletion continues",
        deleted_minutes_ago: 180,
        node_updates_fail: true,
        written: Some((
            "Drain failed due to - Failed to update node. However, since it's a force deletion shall continue deletion of VM. Delete Volume Attachments",
            MachineState::Processing,
        )),
        ..BASE
    },
    Row {
        entry: "Drain machine failure due to node update failure",
        node_label: "fakeNode-0",
        node_updates_fail: true,
        written: Some((
            "Drain failed due to failure in update of node conditions - failed to create/update conditions on node \"fakeNode-0\": Failed to update node. Will retry in next sync. Initiate node drain",
            MachineState::Failed,
        )),
        ..BASE
    },
    Row {
        entry: "Delete VM successfully",
        description: "Drain successful. Initiate VM deletion",
        written: Some((
            "VM deletion was successful. Initiate node object deletion",
            MachineState::Processing,
        )),
        ..BASE
    },
    Row {
        entry: "Delete node object successfully",
        description: "VM deletion was successful. Initiate node object deletion",
        written: Some((
            "Deletion of Node Object \"fakeID-0\" is successful. Initiate machine object finalizer removal",
            MachineState::Processing,
        )),
        ..BASE
    },
    Row {
        entry: "Delete machine finalizer successfully",
        description: "Deletion of Node Object \"fakeID-0\" is successful. Initiate machine object finalizer removal",
        retry: Retry::Long,
        ..BASE
    },
    Row {
        entry: "Unable to decode deletion flow state for machine",
        description: "Some random last op description",
        written: Some((text::GET_VM_STATUS, MachineState::Processing)),
        ..BASE
    },
    Row {
        entry: "without target cluster: checking existence of VM, then jump to VM deletion",
        description: text::GET_VM_STATUS,
        node_label: "",
        node_exists: false,
        target_cluster: false,
        written: Some((
            "Running without target cluster, skipping node drain and volume attachment deletion. Initiate VM deletion",
            MachineState::Processing,
        )),
        ..BASE
    },
    Row {
        entry: "without target cluster: Delete node object successfully",
        description: text::INITIATE_NODE_DELETION,
        node_label: "",
        node_exists: false,
        target_cluster: false,
        written: Some((
            "Label \"node\" not present on machine \"machine-0\", continuing deletion flow. Initiate machine object finalizer removal",
            MachineState::Processing,
        )),
        ..BASE
    },
];

fn build(row: &Row, now: Timestamp) -> Machine {
    let mut m = machine("machine-0")
        .with_provider_id("fakeID")
        .with_phase(P::from(row.phase), now)
        .with_operation(
            row.description,
            MachineState::Processing,
            MachineOperationType::Delete,
            now,
        )
        .with_label(label::NODE, row.node_label)
        .deleting_since(at(NOW - row.deleted_minutes_ago * 60));
    if !row.finalizer {
        m.metadata.finalizers = None;
    }
    if row.force_label {
        m = m.with_label(label::FORCE_DELETION, "True");
    }
    if !row.conditions.is_empty() {
        m = m.with_conditions(
            row.conditions
                .iter()
                .map(|(type_, status, minutes)| condition(type_, status, at(NOW - minutes * 60)))
                .collect(),
        );
    }
    m
}

/// What one upstream `triggerDeletionFlow` call stores: the outcome, and the Terminating
/// condition written on the node (if any).
fn replay(row: &Row) -> (DeletionOutcome, Option<NodeCondition>) {
    let now = at(NOW);
    let machine = build(row, now);
    let node: Option<Node> = row
        .node_exists
        .then(|| node(row.node_label, Vec::new(), Vec::new()));
    let stage = deletion_stage(&machine, false);
    if let Some(blocked) = plan_blocked(&machine, stage) {
        return (blocked, None);
    }
    let node_write = || -> Result<(), String> {
        if row.node_updates_fail {
            Err(NODE_UPDATE_FAILS.to_owned())
        } else {
            Ok(())
        }
    };
    match stage {
        DeletionStage::SetTermination { restart } => {
            (plan_set_termination(&machine, restart, now), None)
        }
        DeletionStage::GetVmStatus => {
            let mut driver = None;
            let status_ok = Ok(mcm_provider_proto::MachineStatus {
                provider_id: "fakeID-0".to_owned(),
                node_name: "fakeNode-0".to_owned(),
                addresses: Vec::new(),
            });
            let label_ok = Ok(());
            let mut label_update = None;
            loop {
                let step = plan_get_vm_status(&VmStatusInput {
                    machine: &machine,
                    target_cluster: row.target_cluster,
                    node_with_machine_name: None,
                    driver,
                    label_update,
                    now,
                });
                match step {
                    VmStatusStep::CallGetMachineStatus => driver = Some(&status_ok),
                    VmStatusStep::SetNodeLabel(_) => label_update = Some(&label_ok),
                    VmStatusStep::Finish(done) => return (*done, None),
                }
            }
        }
        DeletionStage::Drain => {
            let settings = effective_settings(
                &machine,
                &ControllerSettings {
                    drain_timeout: Duration::from_mins(5),
                    ..ControllerSettings::default()
                },
            );
            let config = deletion_drain_config(&machine, &settings, Duration::ZERO, now);
            let (mut condition_update, mut cordon, mut drain) = (None, None, None);
            let mut written = None;
            loop {
                let step = plan_drain_stage(&DrainStageInput {
                    machine: &machine,
                    node: node.as_ref(),
                    config: &config,
                    condition_update: condition_update.as_ref(),
                    cordon: cordon.as_ref(),
                    drain: drain.as_ref(),
                    now,
                });
                match step {
                    DrainStageStep::SetNodeCondition(wanted) => {
                        let result = node_write();
                        if result.is_ok() {
                            written = Some(wanted);
                        }
                        condition_update = Some(result);
                    }
                    DrainStageStep::Cordon => cordon = Some(node_write()),
                    // Upstream's fake node has no pods: the drain completes.
                    DrainStageStep::RunDrain => drain = Some(DrainOutcome::Complete),
                    DrainStageStep::Finish(done) => return (done, written),
                }
            }
        }
        DeletionStage::DeleteVm => (
            plan_delete_vm_result(
                &machine,
                &Ok(DeleteMachineResponse {
                    last_known_state: String::new(),
                }),
                &BackoffSettings::default(),
                now,
            ),
            None,
        ),
        DeletionStage::DeleteNode => {
            let lookup = if row.node_exists {
                NodeLookupResult::Found
            } else {
                NodeLookupResult::NotFound
            };
            match plan_node_deletion(&machine, &lookup, now) {
                NodeDeletionStep::Finish(done) => (*done, None),
                NodeDeletionStep::RemoveFinalizerAndDelete(node_name) => (
                    plan_node_deletion_result(
                        &machine,
                        &node_name,
                        &NodeDeletionResult::Deleted,
                        now,
                    ),
                    None,
                ),
            }
        }
        DeletionStage::RemoveFinalizer => (plan_finalizer_removal_result(&Ok(())), None),
        other => panic!("{}: unexpected stage {other:?}", row.entry),
    }
}

#[test]
fn trigger_deletion_flow_table() {
    for row in ROWS {
        let entry = row.entry;
        let (done, condition) = replay(row);
        assert_eq!(done.retry, row.retry, "{entry}: {}", done.reason);
        let written = done.status.as_ref().map(|write| {
            (
                write.last_operation.description.as_deref().unwrap_or(""),
                write.last_operation.state.clone().unwrap(),
            )
        });
        assert_eq!(
            written,
            row.written
                .as_ref()
                .map(|(text, state)| (*text, state.clone())),
            "{entry}"
        );
        if let Some(write) = &done.status {
            assert_eq!(
                write.last_operation.type_,
                Some(MachineOperationType::Delete),
                "{entry}"
            );
            // Every step of the flow stores phase Terminating.
            assert_eq!(write.current_status.phase, Some(P::Terminating), "{entry}");
        }
        assert_eq!(
            condition
                .as_ref()
                .map(|c| (c.type_.as_str(), c.status.as_str())),
            row.terminating_condition.then_some(("Terminating", "True")),
            "{entry}"
        );
    }
}

#[test]
fn missing_finalizer_reason_matches_upstream_error() {
    // Upstream returns this text as the error (LongRetry, nothing written).
    let m = build(&ROWS[0], at(NOW));
    let done = plan_blocked(&m, deletion_stage(&m, false)).unwrap();
    assert_eq!(
        done.reason,
        "Machine \"machine-0\" is missing finalizers. Deletion cannot proceed"
    );
    assert_eq!(done.status, None);
}

// ---------------------------------------------------------------------------------------------
// machine_test.go: #pendingMachineCreationMap tests / ##table (the deletion entries)
// ---------------------------------------------------------------------------------------------

#[test]
fn pending_machine_creation_map_table() {
    let now = at(NOW);
    let running = || {
        machine("machine-0")
            .with_provider_id("fakeID")
            .with_phase(P::Running, now)
            .with_operation(
                "Machine machine-0 successfully joined the cluster",
                MachineState::Successful,
                MachineOperationType::Create,
                now,
            )
            .with_label(label::NODE, "fakeID-0")
            .deleting_since(now)
    };

    // "Do not process machine deletion for machine present in pendingMachineCreationMap":
    // nothing written, the text of upstream's error. Upstream waits MediumRetry; ours re-checks
    // after ShortRetry (documented retry-timing deviation: a creation call ends within the
    // driver deadline, so the deletion follows a finished creation promptly).
    let m = running();
    let stage = deletion_stage(&m, true);
    assert_eq!(stage, DeletionStage::InCreationFlow);
    let blocked = plan_blocked(&m, stage).unwrap();
    assert_eq!(blocked.status, None);
    assert_eq!(
        blocked.reason,
        "machine \"machine-0\" is in creation flow. Deletion cannot proceed"
    );
    assert_eq!(blocked.retry, Retry::Short);

    // "Proceed with machine deletion for machine not present in pendingMachineCreationMap":
    // another machine is in the creation flow; this one moves to Terminating.
    let m = running();
    let stage = deletion_stage(&m, false);
    assert_eq!(stage, DeletionStage::SetTermination { restart: false });
    let done = plan_set_termination(&m, false, now);
    let write = done.status.unwrap();
    assert_eq!(write.current_status.phase, Some(P::Terminating));
    assert_eq!(
        write.last_operation.description.as_deref(),
        Some(text::GET_VM_STATUS)
    );
    assert_eq!(write.last_operation.state, Some(MachineState::Processing));
    assert_eq!(done.retry, Retry::Short);
    assert_eq!(
        done.reason,
        "Machine deletion in process. Phase set to termination"
    );
}

// ---------------------------------------------------------------------------------------------
// machine_util_test.go: #cordonNode (restated through the drain stage, which cordons)
// ---------------------------------------------------------------------------------------------

#[test]
fn cordon_node_table() {
    let now = at(NOW);
    let machine = machine("machine-0")
        .with_phase(P::Terminating, now)
        .with_operation(
            text::INITIATE_DRAIN,
            MachineState::Processing,
            MachineOperationType::Delete,
            now,
        )
        .with_label(label::NODE, "node-1")
        .deleting_since(now);
    let settings = effective_settings(&machine, &ControllerSettings::default());
    let config = deletion_drain_config(&machine, &settings, Duration::ZERO, now);
    let done = Ok(());
    let step = |node: Option<&Node>| {
        plan_drain_stage(&DrainStageInput {
            machine: &machine,
            node,
            config: &config,
            condition_update: Some(&done),
            cordon: None,
            drain: None,
            now,
        })
    };
    // "when the node does not exist, should succeed without error": nothing to cordon, the drain
    // goes on.
    assert_eq!(step(None), DrainStageStep::RunDrain);
    // "when the node exists and is not yet cordoned, should cordon it".
    let mut node = node("node-1", Vec::new(), Vec::new());
    assert_eq!(step(Some(&node)), DrainStageStep::Cordon);
    // "when the node exists and is already cordoned, should remain cordoned without error".
    node.spec.as_mut().unwrap().unschedulable = Some(true);
    assert_eq!(step(Some(&node)), DrainStageStep::RunDrain);
}
