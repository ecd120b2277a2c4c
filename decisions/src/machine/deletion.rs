//! Deletion flow (docs/behaviour.md#deletion-flow): a state machine over `status.lastOperation.description` substrings, with
//! the exact upstream texts and the reaction matrix rows of docs/behaviour.md#reaction-matrix for GetMachineStatus in deletion
//! and DeleteMachine.
//!
//! [`deletion_stage`] dispatches (first matching row wins); each stage has a function that turns
//! the shell's observations into a [`DeletionOutcome`] (status write + retry) or asks for the next
//! observation (a driver call, a node write, the drain).

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use mcm_api::keys::{condition, finalizer, last_operation as text};
use mcm_api::v1alpha1::{Machine, MachineOperationType, MachinePhase, MachineState};
use mcm_provider_proto::{Code, DeleteMachineResponse, MachineStatus};

use super::backoff::{
    BackoffSettings, RetryClass, mark_of, next_backoff, wait_before_retry, with_mark,
};
use crate::drain::plan::{DrainConfig, DrainOutcome};
use crate::vocabulary::{
    DriverError, Event, Retry, StatusWrite, WriteFailure, current_of, current_status,
    description_of, has_finalizer, is_transient, last_operation, name_of, node_name_of,
    operation_type_of, phase_of, provider_id_of, time,
};

/// Whether a machine being deleted whose MachineClass does not exist may lose its finalizer
/// without a driver call: it has no provider ID and no creation flow runs for it.
///
/// CreateMachine is only called with a class that carries the MCM finalizer
/// ([`super::order::validate_machine_class`]), and that finalizer stays while any machine
/// references the class (docs/behaviour.md#q14): a class that does not exist means no VM was
/// ever created for this machine, so there is nothing to drain or delete. Upstream waits for the
/// class (LongRetry) forever, which left a reverted roll to a missing class with machines
/// Terminating until someone created it (docs/behaviour.md#q14).
#[must_use]
pub fn released_without_class(machine: &Machine, in_creation_flow: bool) -> bool {
    !in_creation_flow
        && provider_id_of(machine).is_none()
        && has_finalizer(machine, finalizer::MACHINE_CONTROLLER_MANAGER)
}

/// The event of [`released_without_class`].
#[must_use]
pub fn released_without_class_event(machine: &Machine, class: &str) -> Event {
    Event::normal(
        "DeletedWithoutClass",
        format!(
            "Machine {} had no VM (its MachineClass {class:?} does not exist): finalizer removed without a driver call",
            name_of(machine)
        ),
    )
}

/// Which step of the deletion flow the machine is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeletionStage {
    /// The creation flow is running for this machine: ShortRetry (upstream: MediumRetry).
    InCreationFlow,
    /// The MCM finalizer is gone: LongRetry, nothing to do.
    MissingFinalizer,
    /// Write the termination status (phase Terminating). `restart` when the description matched no
    /// step (the normal path after the MachineSet's «Deleting machine from cloud provider»).
    SetTermination {
        /// The description was not recognised.
        restart: bool,
    },
    /// Find the VM / node name.
    GetVmStatus,
    /// Cordon and drain the node.
    Drain,
    /// Delete the node's VolumeAttachments (after a force drain).
    DeleteVolumeAttachments,
    /// DeleteMachine.
    DeleteVm,
    /// Delete the Node object.
    DeleteNode,
    /// Remove the Machine's finalizer.
    RemoveFinalizer,
}

/// Upstream `triggerDeletionFlow` dispatch.
#[must_use]
pub fn deletion_stage(machine: &Machine, in_creation_flow: bool) -> DeletionStage {
    if in_creation_flow {
        return DeletionStage::InCreationFlow;
    }
    if !has_finalizer(machine, finalizer::MACHINE_CONTROLLER_MANAGER) {
        return DeletionStage::MissingFinalizer;
    }
    if phase_of(machine) != Some(MachinePhase::Terminating) {
        return DeletionStage::SetTermination { restart: false };
    }
    let description = description_of(machine);
    let table = [
        (text::GET_VM_STATUS, DeletionStage::GetVmStatus),
        (text::INITIATE_DRAIN, DeletionStage::Drain),
        (
            text::DEL_VOLUMES_ATTACHMENTS,
            DeletionStage::DeleteVolumeAttachments,
        ),
        (text::INITIATE_VM_DELETION, DeletionStage::DeleteVm),
        (text::INITIATE_NODE_DELETION, DeletionStage::DeleteNode),
        (
            text::INITIATE_FINALIZER_REMOVAL,
            DeletionStage::RemoveFinalizer,
        ),
    ];
    table
        .into_iter()
        .find(|(marker, _)| description.contains(marker))
        .map_or(
            DeletionStage::SetTermination { restart: true },
            |(_, stage)| stage,
        )
}

/// The result of one deletion step.
#[derive(Clone, Debug, PartialEq)]
pub struct DeletionOutcome {
    /// Status write, if any.
    pub status: Option<StatusWrite>,
    /// Next reconcile of the termination key.
    pub retry: Retry,
    /// Why (logged; upstream's requeue error).
    pub reason: String,
    /// Events.
    pub events: Vec<Event>,
}

fn step_write(
    machine: &Machine,
    description: String,
    state: MachineState,
    type_: MachineOperationType,
    now: Timestamp,
) -> StatusWrite {
    StatusWrite::similar_checked(
        last_operation(description, state, type_, now),
        current_of(machine),
    )
}

fn outcome(
    machine: &Machine,
    description: String,
    state: MachineState,
    retry: Retry,
    now: Timestamp,
) -> DeletionOutcome {
    DeletionOutcome {
        status: Some(step_write(
            machine,
            description.clone(),
            state,
            MachineOperationType::Delete,
            now,
        )),
        retry,
        reason: description,
        events: Vec::new(),
    }
}

/// Rows 1–2 and the fallbacks that need no observation.
#[must_use]
pub fn plan_blocked(machine: &Machine, stage: DeletionStage) -> Option<DeletionOutcome> {
    let name = name_of(machine);
    match stage {
        // Upstream waits MediumRetry (3m); a creation call ends within the driver deadline, so
        // re-checking after ShortRetry lets the deletion follow a finished creation promptly.
        DeletionStage::InCreationFlow => Some(DeletionOutcome {
            status: None,
            retry: Retry::Short,
            reason: format!("machine {name:?} is in creation flow. Deletion cannot proceed"),
            events: Vec::new(),
        }),
        DeletionStage::MissingFinalizer => Some(DeletionOutcome {
            status: None,
            retry: Retry::Long,
            reason: format!("Machine {name:?} is missing finalizers. Deletion cannot proceed"),
            events: Vec::new(),
        }),
        _ => None,
    }
}

/// `setMachineTerminationStatus`: phase Terminating (drops preserveExpiryTime), lastOperation
/// GetVMStatus; never similarity-checked.
#[must_use]
///
/// `_restart` (a broken flow re-initiated) changes nothing here; the shell logs it. No event for a
/// deletion starting: the MachineSet's SuccessfulDelete (or the user's own delete) says who
/// started it, and the phase says it is under way.
pub fn plan_set_termination(_machine: &Machine, _restart: bool, now: Timestamp) -> DeletionOutcome {
    let events = Vec::new();
    DeletionOutcome {
        status: Some(StatusWrite::new(
            last_operation(
                text::GET_VM_STATUS,
                MachineState::Processing,
                MachineOperationType::Delete,
                now,
            ),
            current_status(MachinePhase::Terminating, false, now, None),
        )),
        retry: Retry::Short,
        reason: "Machine deletion in process. Phase set to termination".to_owned(),
        events,
    }
}

/// Inputs of the GetVMStatus stage.
pub struct VmStatusInput<'a> {
    /// The machine.
    pub machine: &'a Machine,
    /// A target cluster is configured.
    pub target_cluster: bool,
    /// Name of a Node whose `node.gardener.cloud/machine-name` label is this machine's name.
    pub node_with_machine_name: Option<&'a str>,
    /// Result of GetMachineStatus (if called).
    pub driver: Option<&'a Result<MachineStatus, DriverError>>,
    /// Result of setting the `node` label (if done).
    pub label_update: Option<&'a Result<(), WriteFailure>>,
    /// Current time.
    pub now: Timestamp,
}

/// Next action of the GetVMStatus stage.
#[derive(Clone, Debug, PartialEq)]
pub enum VmStatusStep {
    /// Call GetMachineStatus (only when the node label is missing and no node names the machine).
    CallGetMachineStatus,
    /// Set the machine's `node` label to this node name (Update).
    SetNodeLabel(String),
    /// Done.
    Finish(Box<DeletionOutcome>),
}

/// `updateMachineStatusAndNodeLabel` (GetVMStatus stage).
#[must_use]
pub fn plan_get_vm_status(input: &VmStatusInput<'_>) -> VmStatusStep {
    let machine = input.machine;
    let now = input.now;
    let to_drain = |prefix: &str| {
        VmStatusStep::Finish(Box::new(outcome(
            machine,
            format!("{prefix}{}", text::INITIATE_DRAIN),
            MachineState::Processing,
            Retry::Short,
            now,
        )))
    };
    if !input.target_cluster {
        return VmStatusStep::Finish(Box::new(outcome(
            machine,
            format!(
                "Running without target cluster, skipping node drain and volume attachment deletion. {}",
                text::INITIATE_VM_DELETION
            ),
            MachineState::Processing,
            Retry::Short,
            now,
        )));
    }
    if node_name_of(machine).is_some() {
        return to_drain("");
    }
    let node_name = match (input.node_with_machine_name, input.driver) {
        (Some(name), _) => name.to_owned(),
        (None, None) => return VmStatusStep::CallGetMachineStatus,
        (None, Some(Ok(status))) => status.node_name.clone(),
        (None, Some(Err(error))) => {
            let (description, state, retry) = if !error.is_decodable() {
                (
                    format!(
                        "Error occurred with decoding machine error status while getting VM status, aborting without retry. {error} {}",
                        text::GET_VM_STATUS
                    ),
                    MachineState::Failed,
                    Retry::Long,
                )
            } else {
                match error.code() {
                    Code::Unimplemented => (
                        text::INITIATE_DRAIN.to_owned(),
                        MachineState::Processing,
                        Retry::Short,
                    ),
                    Code::NotFound => (
                        format!(
                            "VM was not found at provider. Moving forward to node drain. {}",
                            text::INITIATE_DRAIN
                        ),
                        MachineState::Processing,
                        Retry::Short,
                    ),
                    Code::Uninitialized => (
                        format!(
                            "VM instance was not initialized. Moving forward to node drain. {}",
                            text::INITIATE_DRAIN
                        ),
                        MachineState::Processing,
                        Retry::Short,
                    ),
                    code if is_transient(code) => (
                        format!(
                            "Error occurred with decoding machine error status while getting VM status, aborting with retry. {}",
                            text::GET_VM_STATUS
                        ),
                        MachineState::Failed,
                        Retry::Short,
                    ),
                    _ => (
                        format!(
                            "Error occurred with decoding machine error status while getting VM status, aborting without retry. machine code: {error} {}",
                            text::GET_VM_STATUS
                        ),
                        MachineState::Failed,
                        Retry::Medium,
                    ),
                }
            };
            let mut done = outcome(machine, description, state, retry, now);
            done.reason = format!("{}: {error}", done.reason);
            return VmStatusStep::Finish(Box::new(done));
        }
    };
    if node_name.is_empty() {
        // No node known anywhere: the drain stage skips straight to VM deletion.
        return to_drain("");
    }
    match input.label_update {
        None => VmStatusStep::SetNodeLabel(node_name),
        Some(Err(failure)) => VmStatusStep::Finish(Box::new(DeletionOutcome {
            status: None,
            retry: Retry::Short,
            reason: format!("setting label node={node_name} failed: {}", failure.message),
            events: Vec::new(),
        })),
        Some(Ok(())) => to_drain(""),
    }
}

/// The `Terminating` condition to put on the node before draining, or `None` when it is already
/// there (upstream rewrites it every time; skipping an identical write keeps the drain stage cheap
/// when it is re-entered every few seconds) or the phase is "" / CrashLoopBackOff.
#[must_use]
pub fn node_terminating_condition(
    machine: &Machine,
    node: &Node,
    now: Timestamp,
) -> Option<NodeCondition> {
    let phase = phase_of(machine);
    if matches!(phase, None | Some(MachinePhase::CrashLoopBackOff)) {
        return None;
    }
    let existing = node
        .status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .and_then(|conditions| {
            conditions
                .iter()
                .find(|condition| condition.type_ == condition::TERMINATING)
        });
    if existing.is_some_and(|condition| condition.status == "True") {
        return None;
    }
    let (reason, message) = match (existing, &phase) {
        (Some(existing), Some(MachinePhase::Terminating)) if existing.reason.is_some() => (
            existing.reason.clone().unwrap_or_default(),
            existing.message.clone().unwrap_or_default(),
        ),
        (_, Some(MachinePhase::Failed)) => (
            condition::REASON_UNHEALTHY.to_owned(),
            condition::MESSAGE_TERMINATING_FAILED.to_owned(),
        ),
        _ => (
            condition::REASON_SCALE_DOWN.to_owned(),
            condition::MESSAGE_SCALING_DOWN.to_owned(),
        ),
    };
    Some(NodeCondition {
        type_: condition::TERMINATING.to_owned(),
        status: "True".to_owned(),
        reason: Some(reason),
        message: Some(message),
        last_heartbeat_time: Some(time(now)),
        last_transition_time: Some(time(now)),
    })
}

/// Inputs of the drain stage.
pub struct DrainStageInput<'a> {
    /// The machine.
    pub machine: &'a Machine,
    /// The node (`None` when it does not exist).
    pub node: Option<&'a Node>,
    /// Drain configuration ([`crate::drain::plan::deletion_drain_config`]).
    pub config: &'a DrainConfig,
    /// Result of writing the Terminating condition, if it was needed and done.
    pub condition_update: Option<&'a Result<(), String>>,
    /// Result of cordoning, if it was needed and done.
    pub cordon: Option<&'a Result<(), String>>,
    /// Outcome of this pass of the drain, if run.
    pub drain: Option<&'a DrainOutcome>,
    /// Current time.
    pub now: Timestamp,
}

/// Next action of the drain stage.
#[derive(Clone, Debug, PartialEq)]
pub enum DrainStageStep {
    /// Write this condition into the node's status.
    SetNodeCondition(NodeCondition),
    /// Set `spec.unschedulable = true` on the node.
    Cordon,
    /// Run one pass of [`crate::drain::plan::plan_drain`].
    RunDrain,
    /// Done for this pass.
    Finish(DeletionOutcome),
}

/// `drainNode` (InitiateDrain stage).
#[must_use]
pub fn plan_drain_stage(input: &DrainStageInput<'_>) -> DrainStageStep {
    let machine = input.machine;
    let now = input.now;
    let config = input.config;
    let finish = |description: String, state: MachineState| {
        DrainStageStep::Finish(outcome(machine, description, state, Retry::Short, now))
    };
    let force_continue = |error: &str| {
        format!(
            "Drain failed due to - {error}. However, since it's a force deletion shall continue deletion of VM. {}",
            text::DEL_VOLUMES_ATTACHMENTS
        )
    };
    let will_retry = |error: &str| {
        format!(
            "Drain failed due to - {error}. Will retry in next sync. {}",
            text::INITIATE_DRAIN
        )
    };
    if node_name_of(machine).is_none() {
        return finish(
            format!(
                "Skipping drain as nodeName is not a valid one for machine. {}",
                text::INITIATE_VM_DELETION
            ),
            MachineState::Processing,
        );
    }
    if let Some(node) = input.node {
        match input.condition_update {
            None => {
                if let Some(wanted) = node_terminating_condition(machine, node, now) {
                    return DrainStageStep::SetNodeCondition(wanted);
                }
            }
            Some(Err(error)) if !config.force_delete_machine => {
                // Upstream's nodeops wraps the API error with the node name.
                let node_name = node.metadata.name.as_deref().unwrap_or_default();
                return finish(
                    format!(
                        "Drain failed due to failure in update of node conditions - failed to create/update conditions on node {node_name:?}: {error}. Will retry in next sync. {}",
                        text::INITIATE_DRAIN
                    ),
                    MachineState::Failed,
                );
            }
            Some(_) => {}
        }
        let unschedulable = node
            .spec
            .as_ref()
            .and_then(|spec| spec.unschedulable)
            .unwrap_or(false);
        match input.cordon {
            None if !unschedulable => return DrainStageStep::Cordon,
            Some(Err(error)) => {
                return if config.force_delete_machine {
                    finish(force_continue(error), MachineState::Processing)
                } else {
                    finish(will_retry(error), MachineState::Failed)
                };
            }
            _ => {}
        }
    }
    match input.drain {
        None => DrainStageStep::RunDrain,
        Some(DrainOutcome::Complete) => {
            let description = if config.force_delete_pods {
                format!("Force Drain successful. {}", text::DEL_VOLUMES_ATTACHMENTS)
            } else {
                format!("Drain successful. {}", text::INITIATE_VM_DELETION)
            };
            finish(description, MachineState::Processing)
        }
        Some(DrainOutcome::InProgress {
            next_check_at,
            pending,
        }) => DrainStageStep::Finish(DeletionOutcome {
            status: None,
            retry: Retry::After(crate::vocabulary::elapsed(now, *next_check_at)),
            reason: format!("drain in progress, {} pod(s) pending", pending.len()),
            events: Vec::new(),
        }),
        Some(DrainOutcome::Failed { reason }) => {
            let mut step = if config.force_delete_machine {
                finish(force_continue(reason), MachineState::Processing)
            } else {
                finish(will_retry(reason), MachineState::Failed)
            };
            if let DrainStageStep::Finish(done) = &mut step {
                done.events
                    .push(Event::warning("DrainFailed", reason.clone()));
            }
            step
        }
    }
}

/// The result of the VolumeAttachment stage.
#[derive(Clone, Debug, PartialEq)]
pub struct VolumeAttachmentPlan {
    /// VolumeAttachments to delete (errors are only logged, the stage repeats).
    pub delete: Vec<String>,
    /// Status/retry.
    pub outcome: DeletionOutcome,
}

/// `deleteNodeVolAttachments`: `live_attachments` are the names of VolumeAttachments whose
/// `spec.nodeName` is the node and that are not being deleted.
#[must_use]
pub fn plan_volume_attachments(
    machine: &Machine,
    node: Option<&Node>,
    live_attachments: &[String],
    now: Timestamp,
) -> VolumeAttachmentPlan {
    let node_name = node_name_of(machine).unwrap_or("");
    let type_ = operation_type_of(machine).unwrap_or(MachineOperationType::Delete);
    let write = |description: String, retry: Retry| DeletionOutcome {
        status: Some(step_write(
            machine,
            description.clone(),
            MachineState::Processing,
            type_.clone(),
            now,
        )),
        retry,
        reason: description,
        events: Vec::new(),
    };
    let Some(node) = node else {
        return VolumeAttachmentPlan {
            delete: Vec::new(),
            outcome: write(
                format!(
                    "Skipping deleteNodeVolAttachments due to - node {node_name:?} not found. Moving to VM Deletion. {}",
                    text::INITIATE_VM_DELETION
                ),
                Retry::Immediate,
            ),
        };
    };
    let attached = node
        .status
        .as_ref()
        .and_then(|status| status.volumes_attached.as_ref())
        .is_some_and(|volumes| !volumes.is_empty());
    if !attached {
        return VolumeAttachmentPlan {
            delete: Vec::new(),
            outcome: write(
                format!(
                    "Node Volumes for node: {node_name} are already detached. Moving to VM Deletion. {}",
                    text::INITIATE_VM_DELETION
                ),
                Retry::Immediate,
            ),
        };
    }
    if !live_attachments.is_empty() {
        return VolumeAttachmentPlan {
            delete: live_attachments.to_vec(),
            outcome: DeletionOutcome {
                status: None,
                retry: Retry::Short,
                reason: format!(
                    "deleting {} VolumeAttachment(s) of node {node_name}",
                    live_attachments.len()
                ),
                events: Vec::new(),
            },
        };
    }
    VolumeAttachmentPlan {
        delete: Vec::new(),
        outcome: write(
            format!(
                "No Live VolumeAttachments for node: {node_name}. Moving to VM Deletion. {}",
                text::INITIATE_VM_DELETION
            ),
            Retry::Short,
        ),
    }
}

/// Before DeleteMachine: while the last transient failure's backoff runs, wait instead of calling
/// the provider (a reconcile may come early from a watch event, a resync or a restart).
#[must_use]
pub fn plan_delete_vm_wait(machine: &Machine, now: Timestamp) -> Option<DeletionOutcome> {
    let mark = mark_of(machine, &MachineOperationType::Delete);
    let wait = wait_before_retry(machine, mark, now)?;
    Some(DeletionOutcome {
        status: None,
        retry: Retry::After(wait),
        reason: format!(
            "machine {:?}: DeleteMachine backing off, next call in {wait}",
            name_of(machine)
        ),
        events: Vec::new(),
    })
}

/// `deleteVM`: reaction to DeleteMachine. Transient errors (upstream: ShortRetry) back off per
/// machine with `backoff`; the attempt and next retry time are appended to upstream's text.
#[must_use]
pub fn plan_delete_vm_result(
    machine: &Machine,
    result: &Result<DeleteMachineResponse, DriverError>,
    backoff: &BackoffSettings,
    now: Timestamp,
) -> DeletionOutcome {
    let (description, state, retry, response_state) = match result {
        Ok(response) => (
            format!(
                "VM deletion was successful. {}",
                text::INITIATE_NODE_DELETION
            ),
            MachineState::Processing,
            Retry::Short,
            response.last_known_state.clone(),
        ),
        Err(error) if !error.is_decodable() => (
            format!(
                "Error occurred while decoding machine error: {error}. {}",
                text::INITIATE_VM_DELETION
            ),
            MachineState::Failed,
            Retry::Long,
            String::new(),
        ),
        Err(error) if error.code() == Code::NotFound => (
            format!(
                "VM not found. Continuing deletion flow. {}",
                text::INITIATE_NODE_DELETION
            ),
            MachineState::Processing,
            Retry::Short,
            String::new(),
        ),
        Err(error) if is_transient(error.code()) => (
            format!(
                "VM deletion failed due to - {error}. However, will re-try in the next resync. {}",
                text::INITIATE_VM_DELETION
            ),
            MachineState::Failed,
            Retry::Short,
            String::new(),
        ),
        Err(error) => (
            format!(
                "VM deletion failed due to - {error}. Aborting operation. {}",
                text::INITIATE_VM_DELETION
            ),
            MachineState::Failed,
            Retry::Long,
            String::new(),
        ),
    };
    let transient = matches!(result, Err(error) if error.is_decodable() && error.code() != Code::NotFound && is_transient(error.code()));
    let (stored, retry) = if transient {
        let next = next_backoff(
            machine,
            mark_of(machine, &MachineOperationType::Delete),
            RetryClass::Short,
            backoff,
            now,
        );
        (with_mark(&description, next.mark), Retry::After(next.delay))
    } else {
        (description.clone(), retry)
    };
    let mut done = outcome(machine, stored, state, retry, now);
    if let Some(write) = done.status.as_mut() {
        write.last_known_state = Some(response_state);
        // The attempt count must be persisted, even when the text is "similar" to the last one.
        write.skip_if_similar &= !transient;
    }
    if result.is_ok() {
        done.reason = format!("Machine deletion in process. {description}");
    } else {
        done.events
            .push(Event::warning("VMDeletionFailed", description));
    }
    done
}

/// Observation of the node before the node-deletion stage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeLookupResult {
    /// The node exists.
    Found,
    /// It does not.
    NotFound,
    /// The lookup failed.
    Failed(String),
}

/// Next action of the node-deletion stage.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeDeletionStep {
    /// Remove the node finalizer (merge patch), then delete the Node; report with
    /// [`plan_node_deletion_result`].
    RemoveFinalizerAndDelete(String),
    /// Done.
    Finish(Box<DeletionOutcome>),
}

/// Result of removing the node finalizer and deleting the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeDeletionResult {
    /// The finalizer could not be removed.
    FinalizerRemovalFailed(String),
    /// Deleted.
    Deleted,
    /// Already gone.
    NotFound,
    /// The delete failed.
    DeleteFailed(String),
}

/// `deleteNodeObject`, first half.
#[must_use]
pub fn plan_node_deletion(
    machine: &Machine,
    lookup: &NodeLookupResult,
    now: Timestamp,
) -> NodeDeletionStep {
    let name = name_of(machine);
    let Some(node_name) = node_name_of(machine) else {
        return NodeDeletionStep::Finish(Box::new(outcome(
            machine,
            format!(
                "Label \"node\" not present on machine {name:?}, continuing deletion flow. {}",
                text::INITIATE_FINALIZER_REMOVAL
            ),
            MachineState::Processing,
            Retry::Short,
            now,
        )));
    };
    match lookup {
        NodeLookupResult::Found => NodeDeletionStep::RemoveFinalizerAndDelete(node_name.to_owned()),
        NodeLookupResult::NotFound => NodeDeletionStep::Finish(Box::new(outcome(
            machine,
            format!(
                "No node object found for {node_name:?}, continuing deletion flow. {}",
                text::INITIATE_FINALIZER_REMOVAL
            ),
            MachineState::Processing,
            Retry::Short,
            now,
        ))),
        NodeLookupResult::Failed(error) => NodeDeletionStep::Finish(Box::new(outcome(
            machine,
            format!(
                "Retrieval of Node Object {node_name:?} failed due to error: {error}, Retrying. {}",
                text::INITIATE_NODE_DELETION
            ),
            MachineState::Failed,
            Retry::Short,
            now,
        ))),
    }
}

/// `deleteNodeObject`, second half.
#[must_use]
pub fn plan_node_deletion_result(
    machine: &Machine,
    node_name: &str,
    result: &NodeDeletionResult,
    now: Timestamp,
) -> DeletionOutcome {
    let (description, state) = match result {
        NodeDeletionResult::FinalizerRemovalFailed(error) => (
            format!(
                "Removal of finalizers from Node Object {node_name:?} failed due to error: {error}, Retrying. {}",
                text::INITIATE_NODE_DELETION
            ),
            MachineState::Failed,
        ),
        NodeDeletionResult::Deleted => (
            format!(
                "Deletion of Node Object {node_name:?} is successful. {}",
                text::INITIATE_FINALIZER_REMOVAL
            ),
            MachineState::Processing,
        ),
        NodeDeletionResult::NotFound => (
            format!(
                "No node object found for {node_name:?}, continuing deletion flow. {}",
                text::INITIATE_FINALIZER_REMOVAL
            ),
            MachineState::Processing,
        ),
        NodeDeletionResult::DeleteFailed(error) => (
            format!(
                "Deletion of Node Object {node_name:?} failed due to error: {error}. {}",
                text::INITIATE_NODE_DELETION
            ),
            MachineState::Failed,
        ),
    };
    outcome(machine, description, state, Retry::Short, now)
}

/// Retry after the finalizer removal (row 9).
#[must_use]
pub fn plan_finalizer_removal_result(result: &Result<(), WriteFailure>) -> DeletionOutcome {
    match result {
        Ok(()) => DeletionOutcome {
            status: None,
            retry: Retry::Long,
            reason: "machine finalizer removed".to_owned(),
            events: Vec::new(),
        },
        Err(failure) => DeletionOutcome {
            status: None,
            retry: Retry::Short,
            reason: format!("removing the machine finalizer failed: {}", failure.message),
            events: Vec::new(),
        },
    }
}

#[cfg(test)]
mod tests;
