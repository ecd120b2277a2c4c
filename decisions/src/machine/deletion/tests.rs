#![allow(clippy::unwrap_used)]

use super::*;
use crate::drain::plan::{DrainInput, DrainLedger, deletion_drain_config, plan_drain};
use crate::machine::backoff::{mark_of, parse_mark, strip_mark};
use crate::test_support::*;
use crate::vocabulary::{ControllerSettings, effective_settings};
use k8s_openapi::api::core::v1::{AttachedVolume, NodeStatus};
use mcm_api::duration::Duration;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn terminating(description: &str) -> Machine {
    terminating_with_state(description, MachineState::Processing)
}

fn terminating_with_state(description: &str, state: MachineState) -> Machine {
    machine("m1")
        .with_label("node", "n1")
        .deleting_since(at(0))
        .with_phase(MachinePhase::Terminating, at(0))
        .with_operation(description, state, MachineOperationType::Delete, at(0))
}

fn description(outcome: &DeletionOutcome) -> String {
    outcome
        .status
        .as_ref()
        .unwrap()
        .last_operation
        .description
        .clone()
        .unwrap()
}

fn state(outcome: &DeletionOutcome) -> MachineState {
    outcome
        .status
        .as_ref()
        .unwrap()
        .last_operation
        .state
        .clone()
        .unwrap()
}

#[test]
fn dispatch_follows_description_substrings_in_order() {
    let m = machine("m1").deleting_since(at(0));
    assert_eq!(deletion_stage(&m, true), DeletionStage::InCreationFlow);
    let mut no_finalizer = m.clone();
    no_finalizer.metadata.finalizers = None;
    assert_eq!(
        deletion_stage(&no_finalizer, false),
        DeletionStage::MissingFinalizer
    );
    assert_eq!(
        deletion_stage(&m.clone().with_phase(MachinePhase::Running, at(0)), false),
        DeletionStage::SetTermination { restart: false }
    );
    let table = [
        (
            "Set machine status to termination. Now, getting VM Status",
            DeletionStage::GetVmStatus,
        ),
        (
            "VM was not found at provider. Moving forward to node drain. Initiate node drain",
            DeletionStage::Drain,
        ),
        (
            "Force Drain successful. Delete Volume Attachments",
            DeletionStage::DeleteVolumeAttachments,
        ),
        (
            "Drain successful. Initiate VM deletion",
            DeletionStage::DeleteVm,
        ),
        (
            "VM deletion was successful. Initiate node object deletion",
            DeletionStage::DeleteNode,
        ),
        (
            "Deletion of Node Object \"n1\" is successful. Initiate machine object finalizer removal",
            DeletionStage::RemoveFinalizer,
        ),
        (
            "Deleting machine from cloud provider",
            DeletionStage::SetTermination { restart: true },
        ),
        ("", DeletionStage::SetTermination { restart: true }),
    ];
    for (text, stage) in table {
        assert_eq!(deletion_stage(&terminating(text), false), stage, "{text}");
    }
    assert_eq!(
        plan_blocked(&m, DeletionStage::InCreationFlow)
            .unwrap()
            .retry,
        Retry::Short
    );
    assert_eq!(
        plan_blocked(&m, DeletionStage::MissingFinalizer)
            .unwrap()
            .retry,
        Retry::Long
    );
}

#[test]
fn termination_status_drops_preservation() {
    let m = machine("m1")
        .with_phase(MachinePhase::Failed, at(0))
        .with_preserve_expiry(Some(at(100)));
    let out = plan_set_termination(&m, false, at(5));
    let write = out.status.unwrap();
    assert!(!write.skip_if_similar);
    assert_eq!(write.current_status.phase, Some(MachinePhase::Terminating));
    assert_eq!(write.current_status.preserve_expiry_time, None);
    assert_eq!(
        write.last_operation.description.as_deref(),
        Some("Set machine status to termination. Now, getting VM Status")
    );
    assert_eq!(out.retry, Retry::Short);
}

fn vm_status_step(
    m: &Machine,
    target: bool,
    by_label: Option<&str>,
    driver: Option<Result<MachineStatus, DriverError>>,
    label: Option<Result<(), WriteFailure>>,
) -> VmStatusStep {
    plan_get_vm_status(&VmStatusInput {
        machine: m,
        target_cluster: target,
        node_with_machine_name: by_label,
        driver: driver.as_ref(),
        label_update: label.as_ref(),
        now: at(10),
    })
}

fn finished(step: VmStatusStep) -> DeletionOutcome {
    match step {
        VmStatusStep::Finish(outcome) => *outcome,
        other => panic!("expected Finish, got {other:?}"),
    }
}

#[test]
fn get_vm_status_stage_matrix() {
    let with_label = terminating(text::GET_VM_STATUS);
    let out = finished(vm_status_step(&with_label, true, None, None, None));
    assert_eq!(description(&out), "Initiate node drain");

    let out = finished(vm_status_step(&with_label, false, None, None, None));
    assert_eq!(
        description(&out),
        "Running without target cluster, skipping node drain and volume attachment deletion. Initiate VM deletion"
    );

    let mut unlabelled = with_label.clone();
    unlabelled.metadata.labels = None;
    // A node carrying the machine-name label is used without calling the driver.
    assert_eq!(
        vm_status_step(&unlabelled, true, Some("n9"), None, None),
        VmStatusStep::SetNodeLabel("n9".into())
    );
    assert_eq!(
        vm_status_step(&unlabelled, true, None, None, None),
        VmStatusStep::CallGetMachineStatus
    );
    let ok = Ok(MachineStatus {
        provider_id: "p".into(),
        node_name: "n7".into(),
        addresses: vec![],
    });
    assert_eq!(
        vm_status_step(&unlabelled, true, None, Some(ok.clone()), None),
        VmStatusStep::SetNodeLabel("n7".into())
    );
    let out = finished(vm_status_step(
        &unlabelled,
        true,
        None,
        Some(ok),
        Some(Ok(())),
    ));
    assert_eq!(description(&out), "Initiate node drain");

    let table: Vec<(DriverError, &str, MachineState, Retry)> = vec![
        (
            DriverError::coded(Code::Unimplemented, "x"),
            "Initiate node drain",
            MachineState::Processing,
            Retry::Short,
        ),
        (
            DriverError::coded(Code::NotFound, "x"),
            "VM was not found at provider. Moving forward to node drain. Initiate node drain",
            MachineState::Processing,
            Retry::Short,
        ),
        (
            DriverError::coded(Code::Uninitialized, "x"),
            "VM instance was not initialized. Moving forward to node drain. Initiate node drain",
            MachineState::Processing,
            Retry::Short,
        ),
        (
            DriverError::coded(Code::Unavailable, "x"),
            "Error occurred with decoding machine error status while getting VM status, aborting with retry. Set machine status to termination. Now, getting VM Status",
            MachineState::Failed,
            Retry::Short,
        ),
        (
            DriverError::coded(Code::DeadlineExceeded, "x"),
            "Error occurred with decoding machine error status while getting VM status, aborting with retry. Set machine status to termination. Now, getting VM Status",
            MachineState::Failed,
            Retry::Short,
        ),
        (
            DriverError::coded(Code::ResourceExhausted, "x"),
            "Error occurred with decoding machine error status while getting VM status, aborting without retry. machine code: machine codes error: code = [ResourceExhausted] message = [x] Set machine status to termination. Now, getting VM Status",
            MachineState::Failed,
            Retry::Medium,
        ),
        (
            DriverError::coded(Code::Internal, "x"),
            "Error occurred with decoding machine error status while getting VM status, aborting without retry. machine code: machine codes error: code = [Internal] message = [x] Set machine status to termination. Now, getting VM Status",
            MachineState::Failed,
            Retry::Medium,
        ),
        (
            DriverError::Undecodable("garbage".into()),
            "Error occurred with decoding machine error status while getting VM status, aborting without retry. garbage Set machine status to termination. Now, getting VM Status",
            MachineState::Failed,
            Retry::Long,
        ),
    ];
    for (error, text, st, retry) in table {
        let out = finished(vm_status_step(
            &unlabelled,
            true,
            None,
            Some(Err(error.clone())),
            None,
        ));
        assert_eq!(description(&out), text, "{error:?}");
        assert_eq!(state(&out), st, "{error:?}");
        assert_eq!(out.retry, retry, "{error:?}");
        // Failed rows stay in the GetVMStatus stage.
        let next = terminating(&description(&out));
        let expected = if st == MachineState::Failed {
            DeletionStage::GetVmStatus
        } else {
            DeletionStage::Drain
        };
        assert_eq!(deletion_stage(&next, false), expected, "{error:?}");
    }
}

#[test]
fn delete_machine_matrix() {
    let m = terminating("Drain successful. Initiate VM deletion");
    let ok = plan_delete_vm_result(
        &m,
        &Ok(DeleteMachineResponse {
            last_known_state: "gone".into(),
        }),
        &BackoffSettings::default(),
        at(10),
    );
    assert_eq!(
        description(&ok),
        "VM deletion was successful. Initiate node object deletion"
    );
    assert_eq!(
        ok.status.as_ref().unwrap().last_known_state.as_deref(),
        Some("gone")
    );
    assert_eq!(ok.retry, Retry::Short);

    let table: Vec<(DriverError, MachineState, Retry, DeletionStage)> = vec![
        (
            DriverError::coded(Code::NotFound, "x"),
            MachineState::Processing,
            Retry::Short,
            DeletionStage::DeleteNode,
        ),
        (
            DriverError::coded(Code::Unknown, "x"),
            MachineState::Failed,
            Retry::Short,
            DeletionStage::DeleteVm,
        ),
        (
            DriverError::coded(Code::Aborted, "x"),
            MachineState::Failed,
            Retry::Short,
            DeletionStage::DeleteVm,
        ),
        (
            DriverError::coded(Code::Unimplemented, "x"),
            MachineState::Failed,
            Retry::Long,
            DeletionStage::DeleteVm,
        ),
        (
            DriverError::coded(Code::Uninitialized, "x"),
            MachineState::Failed,
            Retry::Long,
            DeletionStage::DeleteVm,
        ),
        (
            DriverError::coded(Code::ResourceExhausted, "x"),
            MachineState::Failed,
            Retry::Long,
            DeletionStage::DeleteVm,
        ),
        (
            DriverError::coded(Code::Internal, "x"),
            MachineState::Failed,
            Retry::Long,
            DeletionStage::DeleteVm,
        ),
        (
            DriverError::Undecodable("?".into()),
            MachineState::Failed,
            Retry::Long,
            DeletionStage::DeleteVm,
        ),
    ];
    for (error, st, retry, next_stage) in table {
        let backoff = BackoffSettings::default();
        let out = plan_delete_vm_result(&m, &Err(error.clone()), &backoff, at(10));
        assert_eq!(state(&out), st, "{error:?}");
        // Upstream's ShortRetry rows back off per machine; the others keep theirs.
        let expected = if retry == Retry::Short && state(&out) == MachineState::Failed {
            Retry::After(
                next_backoff(
                    &m,
                    mark_of(&m, &MachineOperationType::Delete),
                    RetryClass::Short,
                    &backoff,
                    at(10),
                )
                .delay,
            )
        } else {
            retry
        };
        assert_eq!(out.retry, expected, "{error:?}");
        // lastKnownState is cleared when the response carries none.
        assert_eq!(
            out.status.as_ref().unwrap().last_known_state.as_deref(),
            Some("")
        );
        assert_eq!(
            deletion_stage(&terminating(&description(&out)), false),
            next_stage,
            "{error:?}"
        );
    }
    let out = plan_delete_vm_result(
        &m,
        &Err(DriverError::coded(Code::Unavailable, "down")),
        &BackoffSettings::default(),
        at(10),
    );
    assert_eq!(
        strip_mark(&description(&out)),
        "VM deletion failed due to - machine codes error: code = [Unavailable] message = [down]. However, will re-try in the next resync. Initiate VM deletion"
    );
    let mark = parse_mark(&description(&out)).unwrap();
    assert_eq!(mark.attempt, 1);
    // The next pass waits for the backoff without calling DeleteMachine, then calls again and
    // counts the second attempt.
    let failed = terminating_with_state(&description(&out), MachineState::Failed);
    let due = mark.next_retry_at.unwrap();
    assert!(plan_delete_vm_wait(&failed, at(10)).is_some());
    assert!(plan_delete_vm_wait(&failed, due).is_none());
    let second = plan_delete_vm_result(
        &failed,
        &Err(DriverError::coded(Code::Unavailable, "down")),
        &BackoffSettings::default(),
        due,
    );
    assert_eq!(parse_mark(&description(&second)).unwrap().attempt, 2);
    assert!(!second.status.as_ref().unwrap().skip_if_similar);
}

fn drain_config(m: &Machine, now: Timestamp) -> DrainConfig {
    deletion_drain_config(
        m,
        &effective_settings(m, &ControllerSettings::default()),
        Duration::from_mins(2),
        now,
    )
}

#[test]
fn drain_stage_steps() {
    let m = terminating("Initiate node drain");
    let n = node("n1", healthy_conditions(), vec![]);
    let c = drain_config(&m, at(10));
    let step = |condition: Option<&Result<(), String>>,
                cordon: Option<&Result<(), String>>,
                drain: Option<&DrainOutcome>,
                node: Option<&Node>,
                c: &DrainConfig| {
        plan_drain_stage(&DrainStageInput {
            machine: &m,
            node,
            config: c,
            condition_update: condition,
            cordon,
            drain,
            now: at(10),
        })
    };
    let DrainStageStep::SetNodeCondition(wanted) = step(None, None, None, Some(&n), &c) else {
        panic!()
    };
    assert_eq!(wanted.type_, "Terminating");
    assert_eq!(wanted.reason.as_deref(), Some("ScaleDown"));
    let ok = Ok(());
    assert_eq!(
        step(Some(&ok), None, None, Some(&n), &c),
        DrainStageStep::Cordon
    );
    assert_eq!(
        step(Some(&ok), Some(&ok), None, Some(&n), &c),
        DrainStageStep::RunDrain
    );
    let DrainStageStep::Finish(out) = step(
        Some(&ok),
        Some(&ok),
        Some(&DrainOutcome::Complete),
        Some(&n),
        &c,
    ) else {
        panic!()
    };
    assert_eq!(description(&out), "Drain successful. Initiate VM deletion");

    let failed = DrainOutcome::Failed {
        reason: "pdb".into(),
    };
    let DrainStageStep::Finish(out) = step(Some(&ok), Some(&ok), Some(&failed), Some(&n), &c)
    else {
        panic!()
    };
    assert_eq!(
        description(&out),
        "Drain failed due to - pdb. Will retry in next sync. Initiate node drain"
    );
    assert_eq!(state(&out), MachineState::Failed);

    let mut forced = c.clone();
    forced.force_delete_pods = true;
    forced.force_delete_machine = true;
    let DrainStageStep::Finish(out) = step(Some(&ok), Some(&ok), Some(&failed), Some(&n), &forced)
    else {
        panic!()
    };
    assert_eq!(
        description(&out),
        "Drain failed due to - pdb. However, since it's a force deletion shall continue deletion of VM. Delete Volume Attachments"
    );
    let DrainStageStep::Finish(out) = step(
        Some(&ok),
        Some(&ok),
        Some(&DrainOutcome::Complete),
        Some(&n),
        &forced,
    ) else {
        panic!()
    };
    assert_eq!(
        description(&out),
        "Force Drain successful. Delete Volume Attachments"
    );

    // Condition write failure: fatal unless forced.
    let bad = Err("conflict".to_owned());
    let DrainStageStep::Finish(out) = step(Some(&bad), None, None, Some(&n), &c) else {
        panic!()
    };
    assert!(
        description(&out)
            .starts_with("Drain failed due to failure in update of node conditions - failed to create/update conditions on node \"n1\": conflict.")
    );
    assert_eq!(
        step(Some(&bad), None, None, Some(&n), &forced),
        DrainStageStep::Cordon
    );

    // In progress: no write, come back when the drain plan says.
    let waiting = DrainOutcome::InProgress {
        next_check_at: at(15),
        pending: vec!["a".into()],
    };
    let DrainStageStep::Finish(out) = step(Some(&ok), Some(&ok), Some(&waiting), Some(&n), &c)
    else {
        panic!()
    };
    assert_eq!(out.status, None);
    assert_eq!(out.retry, Retry::After(Duration::from_secs(5)));

    // Node gone: nothing to cordon, drain directly.
    assert_eq!(step(None, None, None, None, &c), DrainStageStep::RunDrain);

    // No node label: skip to VM deletion.
    let mut unlabelled = m.clone();
    unlabelled.metadata.labels = None;
    let DrainStageStep::Finish(out) = plan_drain_stage(&DrainStageInput {
        machine: &unlabelled,
        node: None,
        config: &c,
        condition_update: None,
        cordon: None,
        drain: None,
        now: at(10),
    }) else {
        panic!()
    };
    assert_eq!(
        description(&out),
        "Skipping drain as nodeName is not a valid one for machine. Initiate VM deletion"
    );
}

#[test]
fn terminating_condition_reason_follows_phase() {
    let n = node("n1", healthy_conditions(), vec![]);
    let failed = machine("m").with_phase(MachinePhase::Failed, at(0));
    assert_eq!(
        node_terminating_condition(&failed, &n, at(1))
            .unwrap()
            .reason
            .as_deref(),
        Some("Unhealthy")
    );
    let clbo = machine("m").with_phase(MachinePhase::CrashLoopBackOff, at(0));
    assert_eq!(node_terminating_condition(&clbo, &n, at(1)), None);
    let mut conditions = healthy_conditions();
    conditions.push(condition("Terminating", "True", at(0)));
    let already = node("n1", conditions, vec![]);
    assert_eq!(node_terminating_condition(&failed, &already, at(1)), None);
}

#[test]
fn volume_attachment_stage() {
    let m = terminating("Force Drain successful. Delete Volume Attachments");
    let out = plan_volume_attachments(&m, None, &[], at(1));
    assert_eq!(out.outcome.retry, Retry::Immediate);
    assert!(description(&out.outcome).ends_with("Moving to VM Deletion. Initiate VM deletion"));

    let empty = node("n1", vec![], vec![]);
    let out = plan_volume_attachments(&m, Some(&empty), &[], at(1));
    assert_eq!(
        description(&out.outcome),
        "Node Volumes for node: n1 are already detached. Moving to VM Deletion. Initiate VM deletion"
    );

    let mut with_volumes = empty.clone();
    with_volumes.status = Some(NodeStatus {
        volumes_attached: Some(vec![AttachedVolume {
            name: "v".into(),
            device_path: String::new(),
        }]),
        ..NodeStatus::default()
    });
    let out = plan_volume_attachments(&m, Some(&with_volumes), &["va-1".into()], at(1));
    assert_eq!(out.delete, vec!["va-1".to_owned()]);
    assert_eq!(out.outcome.status, None);
    let out = plan_volume_attachments(&m, Some(&with_volumes), &[], at(1));
    assert_eq!(
        description(&out.outcome),
        "No Live VolumeAttachments for node: n1. Moving to VM Deletion. Initiate VM deletion"
    );
    assert_eq!(out.outcome.retry, Retry::Short);
}

#[test]
fn node_deletion_stage() {
    let m = terminating("VM deletion was successful. Initiate node object deletion");
    assert_eq!(
        plan_node_deletion(&m, &NodeLookupResult::Found, at(1)),
        NodeDeletionStep::RemoveFinalizerAndDelete("n1".into())
    );
    let NodeDeletionStep::Finish(out) = plan_node_deletion(&m, &NodeLookupResult::NotFound, at(1))
    else {
        panic!()
    };
    assert_eq!(
        description(&out),
        "No node object found for \"n1\", continuing deletion flow. Initiate machine object finalizer removal"
    );
    let NodeDeletionStep::Finish(out) =
        plan_node_deletion(&m, &NodeLookupResult::Failed("timeout".into()), at(1))
    else {
        panic!()
    };
    assert_eq!(state(&out), MachineState::Failed);
    assert_eq!(
        deletion_stage(&terminating(&description(&out)), false),
        DeletionStage::DeleteNode
    );
    let out = plan_node_deletion_result(&m, "n1", &NodeDeletionResult::Deleted, at(1));
    assert_eq!(
        description(&out),
        "Deletion of Node Object \"n1\" is successful. Initiate machine object finalizer removal"
    );
    let out = plan_node_deletion_result(
        &m,
        "n1",
        &NodeDeletionResult::FinalizerRemovalFailed("x".into()),
        at(1),
    );
    assert_eq!(
        deletion_stage(&terminating(&description(&out)), false),
        DeletionStage::DeleteNode
    );
    assert_eq!(plan_finalizer_removal_result(&Ok(())).retry, Retry::Long);
    assert_eq!(
        plan_finalizer_removal_result(&Err(WriteFailure {
            conflict: false,
            message: "x".into()
        }))
        .retry,
        Retry::Short
    );
}

fn apply(machine: &mut Machine, outcome: &DeletionOutcome) {
    if let Some(write) = &outcome.status {
        machine.status = Some(write.apply(machine.status.as_ref()));
    }
}

proptest! {
    /// From any starting point, with OK driver results, the flow reaches finalizer removal: failed
    /// drains become forced once the drain timeout passes.
    #[test]
    fn prop_deletion_reaches_finalizer_removal(
        start in prop_oneof![
            Just(""), Just("Deleting machine from cloud provider"), Just(text::GET_VM_STATUS),
            Just("Initiate node drain"), Just("Delete Volume Attachments"), Just("Initiate VM deletion"),
            Just("Initiate node object deletion"), Just("garbage"),
        ],
        start_phase in prop_oneof![Just(MachinePhase::Running), Just(MachinePhase::Terminating), Just(MachinePhase::Failed), Just(MachinePhase::Unknown)],
        has_node_label in any::<bool>(),
        target in any::<bool>(),
        node_exists in any::<bool>(),
        drain_fails in any::<bool>(),
        force_label in any::<bool>(),
        attachments in 0usize..3,
        vm_not_found in any::<bool>(),
    ) {
        let mut m = machine("m1").deleting_since(at(0)).with_phase(start_phase, at(0))
            .with_operation(start, MachineState::Processing, MachineOperationType::Delete, at(0));
        if has_node_label { m = m.with_label("node", "n1"); }
        if force_label { m = m.with_label("force-deletion", "true"); }
        let mut n = node("n1", healthy_conditions(), vec![]);
        n.status.as_mut().unwrap().volumes_attached = Some(vec![AttachedVolume { name: "v".into(), device_path: String::new() }]);
        let mut live: Vec<String> = (0..attachments).map(|i| format!("va-{i}")).collect();
        let mut now = at(1);
        for _ in 0..40 {
            let stage = deletion_stage(&m, false);
            let out = match stage {
                DeletionStage::InCreationFlow | DeletionStage::MissingFinalizer => { prop_assert!(false, "unexpected {stage:?}"); unreachable!() }
                DeletionStage::SetTermination { restart } => plan_set_termination(&m, restart, now),
                DeletionStage::GetVmStatus => {
                    let driver = Ok(MachineStatus { provider_id: "p".into(), node_name: "n1".into(), addresses: vec![] });
                    let mut step = plan_get_vm_status(&VmStatusInput { machine: &m, target_cluster: target, node_with_machine_name: None, driver: None, label_update: None, now });
                    if step == VmStatusStep::CallGetMachineStatus {
                        step = plan_get_vm_status(&VmStatusInput { machine: &m, target_cluster: target, node_with_machine_name: None, driver: Some(&driver), label_update: None, now });
                    }
                    if let VmStatusStep::SetNodeLabel(name) = &step {
                        m = m.clone().with_label("node", name);
                        step = plan_get_vm_status(&VmStatusInput { machine: &m, target_cluster: target, node_with_machine_name: None, driver: Some(&driver), label_update: Some(&Ok(())), now });
                    }
                    match step { VmStatusStep::Finish(out) => *out, other => { prop_assert!(false, "{other:?}"); unreachable!() } }
                }
                DeletionStage::Drain => {
                    let config = drain_config(&m, now);
                    let node = node_exists.then_some(&n);
                    let ok = Ok(());
                    let (mut condition, mut cordon, mut drain) = (None, None, None);
                    let out;
                    loop {
                        match plan_drain_stage(&DrainStageInput { machine: &m, node, config: &config, condition_update: condition, cordon, drain: drain.as_ref(), now }) {
                            DrainStageStep::SetNodeCondition(_) => condition = Some(&ok),
                            DrainStageStep::Cordon => cordon = Some(&ok),
                            DrainStageStep::RunDrain => {
                                let planned = plan_drain(&DrainInput { node_name: "n1", node, pods: &[], volume_ids: &BTreeMap::new(), ledger: &DrainLedger::default(), config: &config, now }).outcome;
                                drain = Some(if drain_fails && !config.force_delete_pods { DrainOutcome::Failed { reason: "pdb".into() } } else { planned });
                            }
                            DrainStageStep::Finish(done) => { out = done; break; }
                        }
                    }
                    out
                }
                DeletionStage::DeleteVolumeAttachments => {
                    let planned = plan_volume_attachments(&m, node_exists.then_some(&n), &live, now);
                    if !planned.delete.is_empty() { live.clear(); }
                    planned.outcome
                }
                DeletionStage::DeleteVm => {
                    let result = if vm_not_found { Err(DriverError::coded(Code::NotFound, "gone")) } else { Ok(DeleteMachineResponse::default()) };
                    plan_delete_vm_result(&m, &result, &BackoffSettings::default(), now)
                }
                DeletionStage::DeleteNode => match plan_node_deletion(&m, &if node_exists { NodeLookupResult::Found } else { NodeLookupResult::NotFound }, now) {
                    NodeDeletionStep::RemoveFinalizerAndDelete(name) => plan_node_deletion_result(&m, &name, &NodeDeletionResult::Deleted, now),
                    NodeDeletionStep::Finish(out) => *out,
                },
                DeletionStage::RemoveFinalizer => return Ok(()),
            };
            apply(&mut m, &out);
            // Time passes an hour per step so a failing drain eventually becomes forced.
            now += jiff::SignedDuration::from_hours(1);
        }
        prop_assert!(false, "deletion did not reach finalizer removal: {:?}", m.last_operation());
    }
}

#[test]
fn only_a_machine_without_a_vm_is_released_without_its_class() {
    let mut bare = machine("ghost-0");
    bare.metadata.finalizers = Some(vec![finalizer::MACHINE_CONTROLLER_MANAGER.into()]);
    assert!(released_without_class(&bare, false));
    // A creation flow may be calling CreateMachine right now.
    assert!(!released_without_class(&bare, true));
    // A provider ID means a VM exists: its deletion needs the class.
    let created = bare.clone().with_provider_id("virtual:///ghost-0");
    assert!(!released_without_class(&created, false));
    // Without the finalizer there is nothing to remove.
    let mut gone = bare;
    gone.metadata.finalizers = None;
    assert!(!released_without_class(&gone, false));
}
