//! Health check (docs/behaviour.md#health-check): Pending → Running, Running → Unknown, Unknown → Failed (rate limited per
//! MachineDeployment), Pending → Failed on creation timeout, in-place update results, and removal of
//! the `instance-not-ready` startup taint once the machine runs.
//!
//! Rate limiting: upstream holds an in-process permit per machine label `name` while failing a
//! machine. The plan asks for it with [`HealthOutcome::NeedsFailurePermit`]; the shell tries to
//! acquire it (1s) and calls the plan again with [`FailurePermit::Granted`] or
//! [`FailurePermit::Busy`], holding it until its cache shows the write (or 10s, as upstream).

use std::borrow::Borrow;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Taint};
use mcm_api::duration::Duration;
use mcm_api::keys::{condition, label, taint, value};
use mcm_api::v1alpha1::{Machine, MachineOperationType, MachinePhase, MachineState};

use super::creation::{bootstrap_token_id, bootstrap_token_secret_name};
use crate::vocabulary::{
    EffectiveSettings, Event, Retry, StatusWrite, add, current_of, current_status, elapsed, label,
    last_operation, name_of, operation_type_of, phase_of, preserve_expiry_of, render_conditions,
};

/// Startup taint a provider may put on new nodes until the instance is fully set up; removed by
/// the machine controller when the machine becomes Running (our addition; upstream only has it in
/// a proposal).
pub const INSTANCE_NOT_READY_TAINT: &str = mcm_api::keys::taint::INSTANCE_NOT_READY;

/// How often a Pending/Unknown machine is re-checked while its timeout has not passed.
pub const HEALTH_RECHECK: Duration = Duration::from_mins(1);

/// The Node of the machine as seen in the cache.
#[derive(Clone, Copy, Debug)]
pub enum NodeLookup<'a> {
    /// Found.
    Found(&'a Node),
    /// Not in the cache.
    NotFound,
}

/// State of the per-MachineDeployment failure permit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailurePermit {
    /// Not asked for yet.
    NotRequested,
    /// Held by this reconcile.
    Granted,
    /// Another machine of the same deployment holds it (timed out waiting).
    Busy,
}

/// Inputs of the health check.
pub struct HealthInput<'a> {
    /// The machine (label `node` set, phase non-empty).
    pub machine: &'a Machine,
    /// Its node.
    pub node: NodeLookup<'a>,
    /// Effective settings.
    pub settings: &'a EffectiveSettings,
    /// Machines with the same `name` label (the machine itself may be included), shared with the
    /// cache: a health pass must not copy a deployment's machines.
    pub siblings: &'a [Arc<Machine>],
    /// `--machine-meltdown-threshold` (0 = off).
    pub meltdown_threshold: f64,
    /// Permit state.
    pub permit: FailurePermit,
    /// Current time.
    pub now: Timestamp,
}

/// What happens after the health check.
#[derive(Clone, Debug, PartialEq)]
pub enum HealthOutcome {
    /// Nothing written: continue with the next reconcile steps; re-check after the period if given.
    Continue {
        /// Re-check due (a Pending/Unknown timer that has not expired).
        recheck_after: Option<Retry>,
    },
    /// Acquire the failure permit for this key and call the plan again.
    NeedsFailurePermit {
        /// The permit key (machine label `name`).
        key: String,
    },
    /// The pass ends here (a status write was made, or the machine could not be failed).
    EndPass {
        /// Next reconcile.
        retry: Retry,
        /// Why (logged).
        reason: String,
    },
}

/// Result of the health check.
#[derive(Clone, Debug, PartialEq)]
pub struct HealthPlan {
    /// Status write (always written, never similarity-checked).
    pub status: Option<StatusWrite>,
    /// Taints to remove from the Node (key and effect).
    pub remove_node_taints: Vec<Taint>,
    /// Bootstrap token Secret to delete (first join); errors only logged.
    pub delete_bootstrap_token: Option<String>,
    /// Creation-to-join duration to record (metric).
    pub join_duration: Option<Duration>,
    /// Count a failed join (metric `mcm_machine_num_failed_join`).
    pub failed_join: bool,
    /// Events.
    pub events: Vec<Event>,
    /// Set when the health timeout ran out but a guard keeps the machine from being marked
    /// Failed: which guard and why (shown by the machine's `Blocked` condition).
    pub held: Option<String>,
    /// What next.
    pub outcome: HealthOutcome,
}

/// Upstream `isHealthy`: some conditions, `Ready` (if present) `True`, and every configured
/// condition type exactly `False` (`Unknown` is unhealthy).
#[must_use]
pub fn is_healthy(conditions: &[NodeCondition], node_conditions: &[String]) -> bool {
    if conditions.is_empty() {
        return false;
    }
    conditions.iter().all(|condition| {
        if condition.type_ == "Ready" {
            condition.status == "True"
        } else if node_conditions.contains(&condition.type_) {
            condition.status == "False"
        } else {
            true
        }
    })
}

/// Upstream `nodeConditionsHaveChanged`: a type added or removed, a status changed, or the reason of
/// `InPlaceUpdate` changed (messages and times are ignored).
#[must_use]
pub fn node_conditions_changed(old: &[NodeCondition], new: &[NodeCondition]) -> bool {
    // The machine's own "why is it stuck" condition is not a node condition.
    let own = |list: &[NodeCondition]| -> Vec<NodeCondition> {
        list.iter()
            .filter(|condition| !super::waiting::is_waiting_condition(condition))
            .cloned()
            .collect()
    };
    let (old, new) = (&own(old)[..], &own(new)[..]);
    let find = |list: &[NodeCondition], type_: &str| {
        list.iter()
            .find(|condition| condition.type_ == type_)
            .cloned()
    };
    if old.len() != new.len() {
        return true;
    }
    new.iter()
        .any(|condition| match find(old, &condition.type_) {
            None => true,
            Some(previous) => {
                previous.status != condition.status
                    || (condition.type_ == condition::IN_PLACE_UPDATE
                        && previous.reason != condition.reason)
            }
        })
}

/// Whether the node carries a taint with this key (and effect, if given).
#[must_use]
pub fn node_has_taint(node: &Node, key: &str, effect: Option<&str>) -> bool {
    node.spec
        .as_ref()
        .and_then(|spec| spec.taints.as_ref())
        .is_some_and(|taints| {
            taints
                .iter()
                .any(|taint| taint.key == key && effect.is_none_or(|effect| taint.effect == effect))
        })
}

fn node_label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(key))
        .map(String::as_str)
}

fn node_annotation<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(key))
        .map(String::as_str)
}

/// Upstream `canMarkMachineFailed` (meltdown protection, one replacement at a time): siblings not
/// `Unknown`/`Running` count once unless preserved, `Terminating` ones count once more.
#[must_use]
pub fn can_mark_machine_failed<M: Borrow<Machine>>(siblings: &[M]) -> bool {
    let mut count = 0u32;
    for sibling in siblings.iter().map(Borrow::borrow) {
        let phase = phase_of(sibling);
        if matches!(phase, Some(MachinePhase::Unknown | MachinePhase::Running)) {
            continue;
        }
        if preserve_expiry_of(sibling).is_none() {
            count += 1;
        }
        if phase == Some(MachinePhase::Terminating) {
            count += 1;
        }
    }
    count < 1
}

fn instance_not_ready_taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|spec| spec.taints.as_ref())
        .map(|taints| {
            taints
                .iter()
                .filter(|taint| taint.key == INSTANCE_NOT_READY_TAINT)
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// The health check of one machine.
#[must_use]
pub fn plan_health(input: &HealthInput<'_>) -> HealthPlan {
    let machine = input.machine;
    let name = name_of(machine);
    let now = input.now;
    let phase = phase_of(machine);
    let preserve = preserve_expiry_of(machine);
    let mut plan = HealthPlan {
        status: None,
        remove_node_taints: Vec::new(),
        delete_bootstrap_token: None,
        join_duration: None,
        failed_join: false,
        events: Vec::new(),
        held: None,
        outcome: HealthOutcome::Continue {
            recheck_after: None,
        },
    };
    let old_conditions = machine
        .status
        .as_ref()
        .and_then(|status| status.conditions.clone())
        .unwrap_or_default();
    let mut conditions = old_conditions.clone();
    let mut write: Option<StatusWrite> = None;
    let in_place_busy = matches!(
        phase,
        Some(MachinePhase::InPlaceUpdating | MachinePhase::InPlaceUpdateFailed)
    );

    match input.node {
        NodeLookup::NotFound => {
            if !old_conditions.is_empty() && phase == Some(MachinePhase::Running) {
                let description = format!(
                    "Node object went missing. Machine {name} is unhealthy - changing MachinePhase to Unknown"
                );
                write = Some(StatusWrite::new(
                    last_operation(
                        description.clone(),
                        MachineState::Processing,
                        MachineOperationType::HealthCheck,
                        now,
                    ),
                    current_status(MachinePhase::Unknown, true, now, preserve.clone()),
                ));
                plan.events
                    .push(Event::warning("MachineUnhealthy", description));
            }
        }
        NodeLookup::Found(node) => {
            let node_conditions = node
                .status
                .as_ref()
                .and_then(|status| status.conditions.clone())
                .unwrap_or_default();
            let conditions_changed = node_conditions_changed(&old_conditions, &node_conditions);
            if conditions_changed {
                conditions = node_conditions;
            }
            if !in_place_busy {
                let healthy = is_healthy(&conditions, &input.settings.node_conditions);
                let critical_pending = phase == Some(MachinePhase::Pending)
                    && node_has_taint(
                        node,
                        taint::CRITICAL_COMPONENTS_NOT_READY,
                        Some("NoSchedule"),
                    );
                if healthy && phase != Some(MachinePhase::Running) && !critical_pending {
                    let first_join = machine.last_operation().is_some_and(|operation| {
                        operation.type_ == Some(MachineOperationType::Create)
                            && operation.state != Some(MachineState::Successful)
                    });
                    let (description, type_) = if first_join {
                        let created = machine
                            .metadata
                            .creation_timestamp
                            .as_ref()
                            .map_or(now, |at| at.0);
                        let duration = elapsed(created, now);
                        plan.join_duration = Some(duration);
                        plan.delete_bootstrap_token = bootstrap_token_id(name)
                            .ok()
                            .map(|id| bootstrap_token_secret_name(&id));
                        (
                            format!("Machine {name} successfully joined the cluster in {duration}"),
                            MachineOperationType::Create,
                        )
                    } else {
                        (
                            format!("Machine {name} successfully re-joined the cluster"),
                            MachineOperationType::HealthCheck,
                        )
                    };
                    // No event: the phase and lastOperation say it, and an event per machine per
                    // transition was most of the API writes of a large scale-up.
                    write = Some(StatusWrite::new(
                        last_operation(description, MachineState::Successful, type_, now),
                        current_status(MachinePhase::Running, false, now, preserve.clone()),
                    ));
                    plan.remove_node_taints = instance_not_ready_taints(node);
                } else if !healthy && phase == Some(MachinePhase::Running) {
                    let description = format!(
                        "Machine {name} is unhealthy - changing MachinePhase to Unknown. Node conditions: {}",
                        render_conditions(&conditions)
                    );
                    write = Some(StatusWrite::new(
                        last_operation(
                            description.clone(),
                            MachineState::Processing,
                            MachineOperationType::HealthCheck,
                            now,
                        ),
                        current_status(MachinePhase::Unknown, true, now, preserve.clone()),
                    ));
                    plan.events
                        .push(Event::warning("MachineUnhealthy", description));
                } else if healthy && phase == Some(MachinePhase::Running) {
                    // A crash between the Running write and the taint removal leaves the taint;
                    // removing it on every healthy pass makes the step idempotent.
                    plan.remove_node_taints = instance_not_ready_taints(node);
                }
            }
            if write.is_none() && conditions_changed {
                write = Some(StatusWrite::new(
                    machine.last_operation().cloned().unwrap_or_default(),
                    current_of(machine),
                ));
            }
            if write.is_none() && in_place_busy {
                write = in_place_result(machine, node, now);
            }
        }
    }

    if let Some(mut status) = write {
        status.conditions = Some(conditions);
        plan.status = Some(status);
        plan.outcome = HealthOutcome::EndPass {
            retry: Retry::Short,
            reason: "machine creation is successful. Machine Phase/Conditions have been UPDATED"
                .to_owned(),
        };
        return plan;
    }

    timeouts(input, &mut plan);
    plan
}

fn in_place_result(machine: &Machine, node: &Node, now: Timestamp) -> Option<StatusWrite> {
    let name = name_of(machine);
    let phase = phase_of(machine);
    match node_label(node, label::UPDATE_RESULT) {
        Some(result)
            if result == value::UPDATE_SUCCESSFUL
                && phase != Some(MachinePhase::InPlaceUpdateSuccessful) =>
        {
            Some(StatusWrite::new(
                last_operation(
                    format!("Machine {name} successfully updated dependencies"),
                    MachineState::Successful,
                    MachineOperationType::InPlaceUpdate,
                    now,
                ),
                current_status(MachinePhase::InPlaceUpdateSuccessful, false, now, None),
            ))
        }
        Some(result)
            if result == value::UPDATE_FAILED
                && phase != Some(MachinePhase::InPlaceUpdateFailed) =>
        {
            let reason = node_annotation(node, mcm_api::keys::annotation::UPDATE_FAILED_REASON)
                .unwrap_or("");
            Some(StatusWrite::new(
                last_operation(
                    format!("Machine {name} failed to update dependencies: {reason}"),
                    MachineState::Failed,
                    MachineOperationType::InPlaceUpdate,
                    now,
                ),
                current_status(MachinePhase::InPlaceUpdateFailed, false, now, None),
            ))
        }
        _ => None,
    }
}

fn timeouts(input: &HealthInput<'_>, plan: &mut HealthPlan) {
    let machine = input.machine;
    let name = name_of(machine);
    let now = input.now;
    let phase = phase_of(machine);
    let current = current_of(machine);
    let since_status = current.last_update_time.as_ref().map_or(now, |at| at.0);
    let created = machine
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(now, |at| at.0);
    let (timeout, since) = match phase {
        Some(MachinePhase::Pending) => (input.settings.creation_timeout, created),
        Some(MachinePhase::InPlaceUpdating) => {
            (input.settings.in_place_update_timeout, since_status)
        }
        Some(MachinePhase::Unknown | MachinePhase::InPlaceUpdateFailed) => {
            (input.settings.health_timeout, since_status)
        }
        _ => return,
    };
    let deadline = add(since, timeout);
    if now <= deadline {
        let remaining = elapsed(now, deadline);
        // +1s so the re-check lands after the deadline rather than just before it.
        let until_due = Duration::from_nanos(remaining.as_nanos().saturating_add(1_000_000_000));
        plan.outcome = HealthOutcome::Continue {
            recheck_after: Some(Retry::After(until_due.min(HEALTH_RECHECK))),
        };
        return;
    }
    let preserve = preserve_expiry_of(machine);
    let previous_type = operation_type_of(machine).unwrap_or(MachineOperationType::HealthCheck);
    let conditions = machine
        .status
        .as_ref()
        .and_then(|status| status.conditions.clone())
        .unwrap_or_default();
    let write = match phase {
        Some(MachinePhase::Unknown | MachinePhase::InPlaceUpdateFailed) => {
            if input.settings.disable_health_timeout {
                return;
            }
            let key = label(machine, mcm_api::keys::label::NAME)
                .unwrap_or("")
                .to_owned();
            match input.permit {
                FailurePermit::NotRequested => {
                    plan.outcome = HealthOutcome::NeedsFailurePermit { key };
                    return;
                }
                FailurePermit::Busy => {
                    plan.outcome = HealthOutcome::EndPass {
                        retry: Retry::Short,
                        reason: format!("timedout waiting to acquire lock for machine {name:?}"),
                    };
                    return;
                }
                FailurePermit::Granted => {}
            }
            if !can_mark_machine_failed(input.siblings) {
                plan.held = Some(format!(
                    "the meltdown protection (one replacement at a time per MachineDeployment, upstream's maxReplacements = 1): another machine of MachineDeployment {key:?} is being replaced"
                ));
                plan.outcome = HealthOutcome::EndPass {
                    retry: Retry::Short,
                    reason: format!(
                        "machine {name:?} couldn't be marked FAILED, other machines are getting replaced"
                    ),
                };
                return;
            }
            // Meltdown guard: too many siblings down at once; replacing them would
            // only churn VMs. The machine stays Unknown until the share drops.
            if let Some(reason) = super::meltdown::assess(
                input.siblings.iter().map(|sibling| &**sibling),
                input.meltdown_threshold,
            ) {
                plan.held = Some(format!("the meltdown guard: {reason}"));
                plan.outcome = HealthOutcome::EndPass {
                    retry: Retry::Short,
                    reason: format!(
                        "machine {name:?} is not marked FAILED (meltdown guard): {reason}"
                    ),
                };
                return;
            }
            let description = format!(
                "Machine {name} health checks failing since last {timeout} minutes. Updating machine phase to Failed. Node Conditions: {}",
                render_conditions(&conditions)
            );
            plan.events
                .push(Event::warning("MachineHealthTimeout", description.clone()));
            StatusWrite::new(
                last_operation(description, MachineState::Failed, previous_type, now),
                current_status(MachinePhase::Failed, false, now, preserve),
            )
        }
        Some(MachinePhase::InPlaceUpdating) => StatusWrite::new(
            last_operation(
                format!("Machine {name} failed to in-place update in {timeout} minutes."),
                MachineState::Failed,
                MachineOperationType::InPlaceUpdate,
                now,
            ),
            current_status(MachinePhase::InPlaceUpdateFailed, false, now, None),
        ),
        Some(MachinePhase::Pending) => {
            let description =
                format!("Machine {name} failed to join the cluster in {timeout} minutes.");
            plan.failed_join = true;
            plan.events.push(Event::warning(
                "MachineCreationTimeout",
                description.clone(),
            ));
            StatusWrite::new(
                last_operation(description, MachineState::Failed, previous_type, now),
                current_status(MachinePhase::Failed, false, now, preserve),
            )
        }
        _ => return,
    };
    plan.status = Some(write);
    plan.outcome = HealthOutcome::EndPass {
        retry: Retry::Short,
        reason: "machine creation is successful. Machine Phase/Conditions have been UPDATED"
            .to_owned(),
    };
}

#[cfg(test)]
mod tests;
