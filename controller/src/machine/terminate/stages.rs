//! One termination pass: the stage loop and the executor of each stage of
//! [`mcm_decisions::machine::deletion`].

use std::time::Instant;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Node;
use mcm_api::keys::label;
use mcm_api::v1alpha1::{Machine, MachineClass, MachineState};

use super::state::Termination;
use super::support::{
    class_name, class_of, driver_error, driver_metric, record_events, secret_data,
};
use crate::drain::reconcile::drain_pass;
use crate::machine::writes::{
    delete_node, delete_volume_attachments, get_machine, get_node, live_volume_attachments,
    patch_cordon, patch_node_condition, remove_machine_finalizer, replace_machine_status,
    set_machine_node_label, write_status, write_waiting,
};
use crate::platform::error::ApiError;
use crate::platform::index;
use crate::platform::metrics::{DrainLabels, MachineDurationLabels};
use crate::platform::queue::Action;
use mcm_decisions::drain::plan::{
    DrainConfig, DrainOutcome, FORCE_DRAIN_TIMEOUT, deletion_drain_config,
};
use mcm_decisions::machine::deletion::{
    DeletionOutcome, DeletionStage, DrainStageInput, DrainStageStep, NodeDeletionStep,
    NodeLookupResult, VmStatusInput, VmStatusStep, deletion_stage, plan_blocked,
    plan_delete_vm_result, plan_delete_vm_wait, plan_drain_stage, plan_finalizer_removal_result,
    plan_get_vm_status, plan_node_deletion, plan_node_deletion_result, plan_set_termination,
    plan_volume_attachments, released_without_class, released_without_class_event,
};
use mcm_decisions::machine::waiting::{WaitingOnly, drain_view};
use mcm_decisions::vocabulary::{Retry, effective_settings, elapsed};

/// Stages run back to back in one pass at most (a full happy path needs 7).
const MAX_STEPS_PER_PASS: usize = 12;
/// Longest single drain pass when the deadline is further away (a slow API server cannot hold a
/// worker longer than this, nor past the deadline).
const LONGEST_DRAIN_PASS: SignedDuration = SignedDuration::from_secs(60);

/// What to do after one stage.
enum Step {
    /// The stage progressed and was persisted: go on with the object the API returned.
    Continue(Box<Machine>),
    /// The stage progressed in memory only: go on with this object; its status is written with
    /// the next stage's write, or by [`flush`] before the pass stops.
    Deferred(Box<Machine>),
    /// Come back after this retry; the machine's current status is persisted, or the machine is
    /// gone (its finalizer removed): nothing to flush.
    Persisted(Retry),
    /// Come back after this retry.
    Stop(Retry),
}

/// Whether the machine's class is absent from the cache (not merely unusable).
fn class_missing(context: &crate::machine::context::MachineContext, machine: &Machine) -> bool {
    context.machine_classes.get(class_name(machine)).is_none()
}

fn machine_name(machine: &Machine) -> &str {
    machine.metadata.name.as_deref().unwrap_or("")
}

/// Runs the deletion flow of `key` as far as it can go now.
pub(super) async fn run_pass(termination: &Termination, key: &str) -> Result<Action, ApiError> {
    let context = &termination.context;
    let Some(mut machine) = get_machine(context, key).await? else {
        return Ok(Action::AwaitChange);
    };
    if machine.metadata.deletion_timestamp.is_none() {
        // Not being deleted: the Machine controller's business.
        return Ok(Action::AwaitChange);
    }
    let class = match class_of(context, &machine) {
        Ok(class) => class,
        Err(_)
            if class_missing(context, &machine)
                && released_without_class(&machine, context.in_creation_flow(key)) =>
        {
            // No VM can exist: nothing to drain or delete (docs/behaviour.md#q14).
            let class = class_name(&machine).to_owned();
            return match remove_machine_finalizer(context, &machine).await {
                Ok(()) => {
                    let event = released_without_class_event(&machine, &class);
                    tracing::info!(machine = key, %class, "deleted without a class: it had no VM");
                    context.event(
                        &machine,
                        false,
                        &event.reason,
                        "Delete",
                        event.message.clone(),
                    );
                    Ok(Action::AwaitChange)
                }
                Err(error) => Err(error),
            };
        }
        Err((retry, reason)) => {
            tracing::warn!(
                machine = key,
                reason,
                "deletion blocked by the machine class"
            );
            context.event(
                &machine,
                true,
                "DeletionBlocked",
                "Delete",
                format!("Deletion waits for the machine class: {reason}"),
            );
            return Ok(Action::Requeue(retry));
        }
    };
    // Set when stages have progressed without their status written yet (see `apply`).
    let mut unpersisted = false;
    for _ in 0..MAX_STEPS_PER_PASS {
        let now = Timestamp::now();
        // Never delete the VM of a machine whose CreateMachine/InitializeMachine may still be
        // running: the plan answers MediumRetry for that stage.
        let stage = deletion_stage(&machine, context.in_creation_flow(key));
        tracing::debug!(machine = key, ?stage, "termination stage");
        let step = match stage {
            DeletionStage::InCreationFlow | DeletionStage::MissingFinalizer => {
                match plan_blocked(&machine, stage) {
                    Some(outcome) => {
                        tracing::info!(
                            machine = key,
                            reason = outcome.reason,
                            "deletion cannot proceed"
                        );
                        Step::Stop(outcome.retry)
                    }
                    None => Step::Stop(Retry::Long),
                }
            }
            DeletionStage::SetTermination { restart } => {
                if restart {
                    tracing::info!(
                        machine = key,
                        description = machine
                            .last_operation()
                            .and_then(|o| o.description.as_deref())
                            .unwrap_or(""),
                        "unable to decode deletion flow state; re-initiating termination"
                    );
                }
                let outcome = plan_set_termination(&machine, restart, now);
                apply(termination, &machine, outcome, now).await
            }
            DeletionStage::GetVmStatus => {
                get_vm_status(termination, machine.clone(), &class, now).await
            }
            DeletionStage::Drain => drain(termination, &machine, &class, now).await,
            DeletionStage::DeleteVolumeAttachments => {
                volume_attachments(termination, &machine, now).await
            }
            DeletionStage::DeleteVm => match plan_delete_vm_wait(&machine, now) {
                Some(wait) => {
                    tracing::debug!(
                        machine = key,
                        reason = wait.reason,
                        "DeleteMachine backing off"
                    );
                    Step::Stop(wait.retry)
                }
                None => delete_vm(termination, &machine, &class, now).await,
            },
            DeletionStage::DeleteNode => node_deletion(termination, &machine, now).await,
            DeletionStage::RemoveFinalizer => {
                let result = remove_machine_finalizer(context, &machine)
                    .await
                    .map_err(|error| error.as_write_failure());
                let outcome = plan_finalizer_removal_result(&result);
                if result.is_ok() {
                    tracing::info!(
                        machine = key,
                        "machine finalizer removed; deletion complete"
                    );
                    // No event: the object is gone, nobody would see it on `describe`.
                    Step::Persisted(Retry::Long)
                } else {
                    tracing::info!(
                        machine = key,
                        reason = outcome.reason,
                        "finalizer removal failed"
                    );
                    Step::Stop(outcome.retry)
                }
            }
        };
        match step {
            Step::Continue(updated) => {
                machine = *updated;
                unpersisted = false;
            }
            Step::Deferred(updated) => {
                machine = *updated;
                unpersisted = true;
            }
            Step::Persisted(retry) => return Ok(Action::Requeue(retry)),
            Step::Stop(retry) => {
                if unpersisted {
                    flush(termination, &machine).await;
                }
                return Ok(Action::Requeue(retry));
            }
        }
    }
    if unpersisted {
        flush(termination, &machine).await;
    }
    Ok(Action::Requeue(Retry::Immediate))
}

/// Writes the status of stages that completed in memory. Losing it (a failed write, a crash) is
/// safe: every stage is idempotent, so the next pass redoes the ones not recorded.
async fn flush(termination: &Termination, machine: &Machine) {
    if let Err(error) = replace_machine_status(&termination.context, machine).await {
        tracing::info!(
            machine = machine_name(machine),
            %error,
            "deferred termination status not written; the next pass repeats those stages"
        );
    }
}

/// Records the outcome's events and status write; continues only when the machine moved to
/// another stage and the plan asked for a quick retry.
///
/// A step that continues is not written on its own (except the first, which makes the machine
/// `Terminating` for everyone to see): the next stage's write carries it, so a deletion whose
/// stages all succeed at once costs two status writes instead of one per stage. Every stage is
/// idempotent, so a crash before that write only repeats stages.
async fn apply(
    termination: &Termination,
    machine: &Machine,
    outcome: DeletionOutcome,
    now: Timestamp,
) -> Step {
    let context = &termination.context;
    record_events(context, machine, &outcome.events);
    let Some(write) = outcome.status else {
        tracing::debug!(
            machine = machine_name(machine),
            reason = outcome.reason,
            "termination step"
        );
        return Step::Stop(outcome.retry);
    };
    let state = write.last_operation.state.clone();
    let quick = matches!(
        outcome.retry,
        Retry::Short | Retry::Immediate | Retry::Conflict
    );
    let leaving = deletion_stage(machine, false);
    let mut in_memory = machine.clone();
    in_memory.status = Some(write.apply(machine.status.as_ref()));
    let moved = deletion_stage(&in_memory, false) != leaving;
    let continues = quick && moved && state == Some(MachineState::Processing);
    if continues && !matches!(leaving, DeletionStage::SetTermination { .. }) {
        tracing::info!(
            machine = machine_name(machine),
            description = write.last_operation.description.as_deref().unwrap_or(""),
            state = ?state,
            "termination step (written with the next one)"
        );
        return Step::Deferred(Box::new(in_memory));
    }
    match write_status(context, machine, &write, now).await {
        Ok(updated) => {
            tracing::info!(
                machine = machine_name(machine),
                description = write.last_operation.description.as_deref().unwrap_or(""),
                state = ?state,
                "termination step"
            );
            if continues {
                Step::Continue(Box::new(updated))
            } else {
                Step::Persisted(outcome.retry)
            }
        }
        Err(error) => {
            tracing::info!(
                machine = machine_name(machine),
                %error,
                "status write failed"
            );
            Step::Stop(error.retry())
        }
    }
}

async fn get_vm_status(
    termination: &Termination,
    mut machine: Machine,
    class: &MachineClass,
    now: Timestamp,
) -> Step {
    let context = &termination.context;
    let name = machine_name(&machine).to_owned();
    let node_with_machine_name = index::lookup(
        &context.nodes_by_machine_name,
        &context.nodes,
        &name,
        mcm_decisions::machine::node_sync::machine_name_label,
    )
    .first()
    .and_then(|node| node.metadata.name.clone());
    let mut driver = None;
    let mut label_update = None;
    loop {
        let step = plan_get_vm_status(&VmStatusInput {
            machine: &machine,
            target_cluster: context.target.is_some(),
            node_with_machine_name: node_with_machine_name.as_deref(),
            driver: driver.as_ref(),
            label_update: label_update.as_ref(),
            now,
        });
        match step {
            VmStatusStep::CallGetMachineStatus => {
                let secret = match secret_data(context, class).await {
                    Ok(secret) => secret,
                    Err(reason) => {
                        tracing::warn!(machine = name, reason, "cannot read the class secrets");
                        return Step::Stop(Retry::Long);
                    }
                };
                let started = Instant::now();
                let result = context
                    .driver
                    .get_machine_status(&machine, class, &secret)
                    .await;
                let code = result
                    .as_ref()
                    .map_or_else(|error| error.error.code.to_string(), |_| "OK".to_owned());
                driver_metric(context, class, "GetMachineStatus", &code, started);
                driver = Some(result.map_err(|error| driver_error(error.error)));
            }
            VmStatusStep::SetNodeLabel(node) => {
                let result = set_machine_node_label(context, &machine, &node).await;
                label_update = Some(match result {
                    Ok(mut updated) => {
                        // Keep stages that progressed in memory: the label write answers the
                        // persisted status.
                        updated.status = machine.status.take();
                        machine = updated;
                        Ok(())
                    }
                    Err(error) => Err(error.as_write_failure()),
                });
            }
            VmStatusStep::Finish(outcome) => {
                return apply(termination, &machine, *outcome, now).await;
            }
        }
    }
}

async fn drain(
    termination: &Termination,
    machine: &Machine,
    class: &MachineClass,
    now: Timestamp,
) -> Step {
    let context = &termination.context;
    let name = machine_name(machine);
    let settings = effective_settings(machine, &context.config.machine);
    let config = deletion_drain_config(
        machine,
        &settings,
        context.config.machine.pv_detach_timeout,
        now,
    );
    for warning in &config.warnings {
        tracing::warn!(machine = name, warning, "drain configuration");
    }
    let node_name = machine.node_name().unwrap_or("").to_owned();
    let node = if node_name.is_empty() {
        None
    } else {
        match get_node(context, &node_name).await {
            Ok(node) => node,
            Err(error) => {
                tracing::info!(machine = name, node = node_name, %error, "cannot read the node to drain");
                return Step::Stop(Retry::Short);
            }
        }
    };
    let mut condition_update = None;
    let mut cordon_result = None;
    let mut drain_result = None;
    loop {
        let step = plan_drain_stage(&DrainStageInput {
            machine,
            node: node.as_ref(),
            config: &config,
            condition_update: condition_update.as_ref(),
            cordon: cordon_result.as_ref(),
            drain: drain_result.as_ref(),
            now,
        });
        match step {
            DrainStageStep::SetNodeCondition(condition) => {
                // The plan puts the client's text into the lastOperation, as upstream.
                condition_update = Some(
                    patch_node_condition(context, &node_name, &condition)
                        .await
                        .map_err(|error| error.cause()),
                );
            }
            DrainStageStep::Cordon => {
                let result = patch_cordon(context, &node_name)
                    .await
                    .map_err(|error| error.cause());
                if result.is_ok() {
                    // No event: the node's `unschedulable` says it; routine steps of a
                    // deletion are in the machine's lastOperation.
                }
                cordon_result = Some(result);
            }
            DrainStageStep::RunDrain => {
                if config.force_delete_pods {
                    context.event(
                        machine,
                        true,
                        "ForceDrain",
                        "Drain",
                        force_reason(machine, &config, now),
                    );
                }
                let outcome = run_drain(
                    termination,
                    machine,
                    class,
                    &node_name,
                    node.as_ref(),
                    &config,
                    now,
                )
                .await;
                drain_result = Some(outcome);
            }
            DrainStageStep::Finish(outcome) => {
                if let Some(DrainOutcome::InProgress { pending, .. }) = &drain_result {
                    waiting_during_drain(termination, machine, &node_name, pending, &config, now)
                        .await;
                }
                if drain_result == Some(DrainOutcome::Complete) {
                    let state = termination.drain_state(&node_name, now);
                    if let Some(labels) = DrainLabels::for_machine(machine) {
                        let seconds = now.duration_since(state.started).as_secs_f64();
                        context.metrics.machine_drained(&labels, seconds.max(0.0));
                    }
                    termination.forget_drain(&node_name);
                }
                return apply(termination, machine, outcome, now).await;
            }
        }
    }
}

/// A drain in progress writes no status (upstream), so the machine's "why is it stuck" condition
/// is refreshed here from the drain's ledger: the pods a budget refuses, the volumes awaited, and
/// the drain deadline. Written only when it changed.
async fn waiting_during_drain(
    termination: &Termination,
    machine: &Machine,
    node_name: &str,
    pending: &[String],
    config: &DrainConfig,
    now: Timestamp,
) {
    let context = &termination.context;
    let state = termination.drain_state(node_name, now);
    let deadline = (!config.force_delete_pods).then_some(config.deadline);
    let view = drain_view(&state.ledger, pending, deadline);
    match write_waiting(context, machine, WaitingOnly::Draining(&view), now).await {
        Ok(Some(_)) => tracing::info!(
            machine = machine_name(machine),
            node = node_name,
            blocked = view.blocked.len(),
            pending = view.pending.len(),
            "drain waiting condition updated"
        ),
        Ok(None) => {}
        Err(error) => tracing::debug!(
            machine = machine_name(machine),
            %error,
            "cannot update the drain waiting condition"
        ),
    }
}

fn force_reason(machine: &Machine, config: &DrainConfig, now: Timestamp) -> String {
    let labelled = machine
        .metadata
        .labels
        .as_ref()
        .is_some_and(|labels| labels.contains_key(label::FORCE_DELETION));
    let why = if now > config.deadline {
        format!("the drain timeout passed (deadline {})", config.deadline)
    } else if labelled {
        format!("the machine has label {}", label::FORCE_DELETION)
    } else {
        "the node has been NotReady or ReadonlyFilesystem for more than 5 minutes".to_owned()
    };
    format!(
        "Force drain of machine {}: pods are deleted without eviction because {why}",
        machine_name(machine)
    )
}

/// One drain pass, bounded by the time left until the drain deadline (or the force-drain timeout).
async fn run_drain(
    termination: &Termination,
    machine: &Machine,
    class: &MachineClass,
    node_name: &str,
    node: Option<&Node>,
    config: &DrainConfig,
    now: Timestamp,
) -> DrainOutcome {
    let context = &termination.context;
    let Some(client) = context.target.as_ref() else {
        return DrainOutcome::Complete;
    };
    let limit = if config.force_delete_pods {
        FORCE_DRAIN_TIMEOUT.to_signed_duration()
    } else {
        config.deadline.duration_since(now)
    };
    let limit = limit
        .min(LONGEST_DRAIN_PASS)
        .max(SignedDuration::from_secs(1));
    let mut state = termination.drain_state(node_name, now);
    let target = context.drain_target(client, class.provider.as_deref().unwrap_or(""));
    let bound = std::time::Duration::try_from(limit).unwrap_or(std::time::Duration::from_secs(1));
    let outcome = match tokio::time::timeout(
        bound,
        drain_pass(&target, node_name, node, config, &mut state, now),
    )
    .await
    {
        Ok(outcome) => outcome,
        Err(_) => DrainOutcome::Failed {
            reason: format!(
                "drain pass of node {node_name} did not finish within {limit} (bounded by the drain deadline)"
            ),
        },
    };
    termination.store_drain_state(node_name, state);
    tracing::debug!(
        machine = machine_name(machine),
        node = node_name,
        ?outcome,
        "drain pass"
    );
    outcome
}

async fn volume_attachments(termination: &Termination, machine: &Machine, now: Timestamp) -> Step {
    let context = &termination.context;
    let node_name = machine.node_name().unwrap_or("").to_owned();
    let node = match get_node(context, &node_name).await {
        Ok(node) => node,
        Err(error) => {
            tracing::info!(machine = machine_name(machine), %error, "cannot read the node");
            return Step::Stop(Retry::Short);
        }
    };
    let live = if node.is_some() {
        match live_volume_attachments(context, &node_name).await {
            Ok(live) => live,
            Err(error) => {
                tracing::info!(machine = machine_name(machine), %error, "cannot list VolumeAttachments");
                return Step::Stop(Retry::Short);
            }
        }
    } else {
        Vec::new()
    };
    let plan = plan_volume_attachments(machine, node.as_ref(), &live, now);
    if !plan.delete.is_empty() {
        delete_volume_attachments(context, &plan.delete).await;
        context.event(
            machine,
            false,
            "VolumeAttachmentsDeleted",
            "Delete",
            format!(
                "Deleted VolumeAttachment(s) {} of node {node_name} after a force drain",
                plan.delete.join(", ")
            ),
        );
    }
    apply(termination, machine, plan.outcome, now).await
}

async fn delete_vm(
    termination: &Termination,
    machine: &Machine,
    class: &MachineClass,
    now: Timestamp,
) -> Step {
    let context = &termination.context;
    let secret = match secret_data(context, class).await {
        Ok(secret) => secret,
        Err(reason) => {
            tracing::warn!(
                machine = machine_name(machine),
                reason,
                "cannot read the class secrets"
            );
            return Step::Stop(Retry::Long);
        }
    };
    let started = Instant::now();
    let result = context.driver.delete_machine(machine, class, &secret).await;
    let code = result
        .as_ref()
        .map_or_else(|error| error.code.to_string(), |_| "OK".to_owned());
    driver_metric(context, class, "DeleteMachine", &code, started);
    let result = result.map_err(driver_error);
    if result.is_ok()
        && let Some(labels) = MachineDurationLabels::for_machine(
            machine,
            class
                .node_template
                .as_ref()
                .map(|t| t.instance_type.as_str()),
        )
    {
        let since = machine
            .metadata
            .deletion_timestamp
            .as_ref()
            .map_or(now, |at| at.0);
        let seconds = elapsed(since, now).as_secs();
        #[allow(clippy::cast_precision_loss)]
        context.metrics.machine_deleted(&labels, seconds as f64);
    }
    let backoff = context.config.machine.retry_backoff;
    let outcome = plan_delete_vm_result(machine, &result, &backoff, now);
    if let Retry::After(_) = outcome.retry
        && result.is_err()
    {
        context
            .metrics
            .driver_retry_backoff("DeleteMachine", outcome.retry.delay().as_secs_f64());
    }
    apply(termination, machine, outcome, now).await
}

async fn node_deletion(termination: &Termination, machine: &Machine, now: Timestamp) -> Step {
    let context = &termination.context;
    let node_name = machine.node_name().unwrap_or("").to_owned();
    let lookup = if node_name.is_empty() {
        NodeLookupResult::NotFound
    } else {
        match get_node(context, &node_name).await {
            Ok(Some(_)) => NodeLookupResult::Found,
            Ok(None) => NodeLookupResult::NotFound,
            Err(error) => NodeLookupResult::Failed(error.cause()),
        }
    };
    termination.forget_drain(&node_name);
    match plan_node_deletion(machine, &lookup, now) {
        NodeDeletionStep::Finish(outcome) => apply(termination, machine, *outcome, now).await,
        NodeDeletionStep::RemoveFinalizerAndDelete(node) => {
            let result = delete_node(context, &node).await;
            let outcome = plan_node_deletion_result(machine, &node, &result, now);
            apply(termination, machine, outcome, now).await
        }
    }
}
