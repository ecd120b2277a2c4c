//! Preservation (docs/behaviour.md#preservation, docs/behaviour.md#preservation-scope): the `node.machine.sapcloud.io/preserve` annotation on the Node or the
//! Machine (`now`, `when-failed`, `auto-preserved`, `false`; the Node's value wins), the expiry in
//! `status.currentStatus.preserveExpiryTime`, the `Preserved` node condition, the
//! cluster-autoscaler scale-down-disabled annotation with its `-by-mcm` marker, the drain of
//! preserved Failed machines behind the `preserved` NoSchedule taint, release on expiry or `false`,
//! and the auto-preservation budget (`autoPreserveFailedMachineMax`).
//!
//! Contract with the shell: execute [`PreservationPlan::actions`] in order; on
//! [`PreservationOutcome::NeedsDrain`] run one drain pass and call [`plan_preservation`] again with
//! the objects the writes returned and the drain outcome (every action is idempotent against the
//! updated objects, so the second call only adds the condition).

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use mcm_api::keys::{annotation, condition, preserve, taint, value};
use mcm_api::v1alpha1::{CurrentStatus, Machine, MachinePhase};

use crate::drain::plan::{DrainConfig, DrainOutcome, preserved_drain_config};
use crate::vocabulary::{
    EffectiveSettings, Event, Retry, StatusWrite, add, current_of, go_time_string,
    machine_annotation, name_of, node_name_of, phase_of, preserve_expiry_of, time,
};

/// A write the shell performs.
#[derive(Clone, Debug, PartialEq)]
pub enum PreservationAction {
    /// `UpdateStatus` of the machine.
    Status(StatusWrite),
    /// Set (`Some`) or remove (`None`) annotations of the Node.
    NodeAnnotations(BTreeMap<String, Option<String>>),
    /// Set (`Some`) or remove (`None`) annotations of the Machine.
    MachineAnnotations(BTreeMap<String, Option<String>>),
    /// Put this condition into the Node's status (replacing the same type).
    NodeCondition(NodeCondition),
    /// Add a taint to the Node.
    AddNodeTaint(Taint),
    /// Remove the taint with this key and effect from the Node.
    RemoveNodeTaint {
        /// Key.
        key: String,
        /// Effect.
        effect: String,
    },
}

/// What happens after the actions.
#[derive(Clone, Debug, PartialEq)]
pub enum PreservationOutcome {
    /// Done for this pass.
    Done {
        /// Next reconcile.
        retry: Retry,
    },
    /// Run one drain pass of the preserved node with this configuration, then call again.
    NeedsDrain(DrainConfig),
}

/// The result of the preservation step.
#[derive(Clone, Debug, PartialEq)]
pub struct PreservationPlan {
    /// Writes, in order.
    pub actions: Vec<PreservationAction>,
    /// Next.
    pub outcome: PreservationOutcome,
    /// Events on the machine.
    pub events: Vec<Event>,
}

/// Inputs of the preservation step.
pub struct PreservationInput<'a> {
    /// The machine.
    pub machine: &'a Machine,
    /// Its node (`None` without node label or when the node does not exist).
    pub node: Option<&'a Node>,
    /// Effective settings.
    pub settings: &'a EffectiveSettings,
    /// PV detach timeout flag (drain configuration).
    pub pv_detach_timeout: mcm_api::duration::Duration,
    /// Outcome of the drain pass requested by a previous call in this reconcile.
    pub drain: Option<&'a DrainOutcome>,
    /// Current time.
    pub now: Timestamp,
}

fn node_annotation<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(key))
        .map(String::as_str)
}

fn preserved_condition(node: &Node) -> Option<&NodeCondition> {
    node.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == condition::PRESERVED))
}

fn has_preserved_taint(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|spec| spec.taints.as_ref())
        .is_some_and(|taints| {
            taints
                .iter()
                .any(|t| t.key == taint::PRESERVED && t.effect == "NoSchedule")
        })
}

fn remove_preserved_taint() -> PreservationAction {
    PreservationAction::RemoveNodeTaint {
        key: taint::PRESERVED.to_owned(),
        effect: "NoSchedule".to_owned(),
    }
}

fn is_valid(value: &str) -> bool {
    preserve::ALLOWED.contains(&value)
}

/// Whether a preservation is active and not expired at `now`.
#[must_use]
pub fn is_preserved(machine: &Machine, now: Timestamp) -> bool {
    preserve_expiry_of(machine).is_some_and(|expiry| expiry.0 > now)
}

/// The preservation step of one machine (upstream `manageMachinePreservation`).
#[must_use]
pub fn plan_preservation(input: &PreservationInput<'_>) -> PreservationPlan {
    let machine = input.machine;
    let now = input.now;
    let mut plan = PreservationPlan {
        actions: Vec::new(),
        outcome: PreservationOutcome::Done { retry: Retry::Long },
        events: Vec::new(),
    };
    let machine_value = machine_annotation(machine, annotation::PRESERVE).filter(|v| is_valid(v));
    let last_applied =
        machine_annotation(machine, annotation::LAST_APPLIED_NODE_PRESERVE_VALUE).unwrap_or("");
    let node = input.node.filter(|_| node_name_of(machine).is_some());
    let node_value = node.and_then(|node| node_annotation(node, annotation::PRESERVE));
    if let Some(value) = node_value
        && !is_valid(value)
    {
        plan.events.push(Event::warning(
            "InvalidPreserveValue",
            format!(
                "node annotation {}={value:?} is not one of {:?}; preservation handling skipped",
                annotation::PRESERVE,
                preserve::ALLOWED
            ),
        ));
        return plan;
    }
    let expiry = preserve_expiry_of(machine);
    let bound = expiry.is_some()
        || node_value.is_some()
        || machine_value.is_some()
        || !last_applied.is_empty();
    if !bound {
        return plan;
    }
    let effective = match node {
        None => machine_value.unwrap_or(""),
        Some(_) if node_value.is_none() && last_applied.is_empty() => machine_value.unwrap_or(""),
        Some(_) => node_value.unwrap_or(""),
    };
    let expired = expiry.as_ref().is_some_and(|at| at.0 <= now);
    let phase = phase_of(machine);
    let failed = phase == Some(MachinePhase::Failed);

    enum Act {
        Stop { remove_annotations: bool },
        Preserve,
    }
    let act = match effective {
        preserve::WHEN_FAILED if expired => Act::Stop {
            remove_annotations: true,
        },
        preserve::WHEN_FAILED if !failed => Act::Stop {
            remove_annotations: false,
        },
        preserve::WHEN_FAILED => Act::Preserve,
        preserve::NOW if expired => Act::Stop {
            remove_annotations: true,
        },
        preserve::NOW => Act::Preserve,
        preserve::AUTO_PRESERVED if !failed || expired => Act::Stop {
            remove_annotations: true,
        },
        preserve::AUTO_PRESERVED => Act::Preserve,
        _ => Act::Stop {
            remove_annotations: false,
        },
    };
    let mut expiry_after = expiry.clone();
    let mut annotations_removed = false;
    match act {
        Act::Stop { remove_annotations } => {
            // Upstream decides on removal before it knows whether a preservation is active, so a
            // stop that removes annotations skips the annotation sync below even with no expiry.
            annotations_removed = remove_annotations;
            if expiry.is_some() {
                expiry_after = None;
                stop_preservation(input, remove_annotations, &mut plan);
            }
        }
        Act::Preserve => {
            let until = preserve_machine(input, effective, &mut plan);
            expiry_after = Some(until);
        }
    }

    if expiry_after.is_some()
        && phase == Some(MachinePhase::Running)
        && node.is_some_and(has_preserved_taint)
    {
        plan.actions.push(remove_preserved_taint());
    }

    if !annotations_removed {
        let node_annotated = node_value.is_some();
        let skip = (!node_annotated && last_applied.is_empty())
            || (node_value.unwrap_or("") == last_applied && machine_value.is_none());
        if !skip {
            plan.actions
                .push(PreservationAction::MachineAnnotations(BTreeMap::from([
                    (annotation::PRESERVE.to_owned(), None),
                    (
                        annotation::LAST_APPLIED_NODE_PRESERVE_VALUE.to_owned(),
                        Some(node_value.unwrap_or("").to_owned()),
                    ),
                ])));
        }
    }
    plan
}

/// `preserveMachine`; returns the expiry in force.
fn preserve_machine(
    input: &PreservationInput<'_>,
    value: &str,
    plan: &mut PreservationPlan,
) -> Time {
    let machine = input.machine;
    let now = input.now;
    let expiry = match preserve_expiry_of(machine) {
        Some(expiry) => expiry,
        None => {
            let until = time(add(now, input.settings.preserve_timeout));
            let current = current_of(machine);
            let write = StatusWrite::new(
                machine.last_operation().cloned().unwrap_or_default(),
                CurrentStatus {
                    last_update_time: Some(time(now)),
                    preserve_expiry_time: Some(until.clone()),
                    ..current
                },
            );
            plan.actions.push(PreservationAction::Status(write));
            plan.events.push(Event::normal(
                "MachinePreserved",
                format!(
                    "Machine {} preserved until {} ({value})",
                    name_of(machine),
                    until.0
                ),
            ));
            until
        }
    };
    let Some(node) = input.node.filter(|_| node_name_of(machine).is_some()) else {
        return expiry;
    };
    let failed = phase_of(machine) == Some(MachinePhase::Failed);
    let existing = preserved_condition(node);
    let drained = existing.is_some_and(|c| {
        c.message
            .as_deref()
            .is_some_and(|m| m.contains(condition::PRESERVED_NODE_DRAIN_SUCCESSFUL))
    });
    let drain_required = failed && !drained;
    // Checked on every pass (not only until the condition is set, as upstream) so a user who flips
    // the annotation gets it re-asserted while the machine stays preserved.
    if node_annotation(node, annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED)
        != Some(value::TRUE)
    {
        plan.actions
            .push(PreservationAction::NodeAnnotations(BTreeMap::from([
                (
                    annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED.to_owned(),
                    Some(value::TRUE.to_owned()),
                ),
                (
                    annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_BY_MCM.to_owned(),
                    Some(value::TRUE.to_owned()),
                ),
            ])));
    }
    if existing.is_some_and(|c| c.status == "True") && !drain_required {
        return expiry;
    }
    let mut drain_result: Option<Result<(), String>> = None;
    if drain_required {
        if !has_preserved_taint(node) {
            plan.actions.push(PreservationAction::AddNodeTaint(Taint {
                key: taint::PRESERVED.to_owned(),
                effect: "NoSchedule".to_owned(),
                time_added: Some(time(now)),
                value: None,
            }));
        }
        match input.drain {
            None => {
                plan.outcome = PreservationOutcome::NeedsDrain(preserved_drain_config(
                    machine,
                    input.settings,
                    input.pv_detach_timeout,
                    now,
                ));
                return expiry;
            }
            Some(DrainOutcome::InProgress { next_check_at, .. }) => {
                plan.outcome = PreservationOutcome::Done {
                    retry: Retry::After(crate::vocabulary::elapsed(now, *next_check_at)),
                };
                return expiry;
            }
            Some(DrainOutcome::Complete) => drain_result = Some(Ok(())),
            Some(DrainOutcome::Failed { reason }) => drain_result = Some(Err(reason.clone())),
        }
    }
    // Upstream prints the stored expiry (whole seconds) with `%v`: Go's `time.Time.String()`.
    let stored_expiry = Timestamp::from_second(expiry.0.as_second()).unwrap_or(expiry.0);
    let until_text = format!("Machine preserved until {}.", go_time_string(stored_expiry));
    let mut wanted = existing.cloned().unwrap_or_else(|| NodeCondition {
        type_: condition::PRESERVED.to_owned(),
        status: "False".to_owned(),
        last_transition_time: Some(time(now)),
        last_heartbeat_time: Some(time(now)),
        ..NodeCondition::default()
    });
    let message = wanted.message.clone().unwrap_or_default();
    if failed {
        match &drain_result {
            Some(Ok(())) if !message.contains(condition::PRESERVED_NODE_DRAIN_SUCCESSFUL) => {
                wanted.message = Some(format!(
                    "{} {until_text}",
                    condition::PRESERVED_NODE_DRAIN_SUCCESSFUL
                ));
                wanted.status = "True".to_owned();
            }
            Some(Err(_)) if !message.contains(condition::PRESERVED_NODE_DRAIN_UNSUCCESSFUL) => {
                wanted.message = Some(format!(
                    "{} {until_text}",
                    condition::PRESERVED_NODE_DRAIN_UNSUCCESSFUL
                ));
                wanted.status = "False".to_owned();
            }
            _ => {}
        }
    } else if wanted.status != "True" {
        wanted.status = "True".to_owned();
        wanted.message = Some(until_text);
    }
    wanted.reason = Some(
        if value == preserve::AUTO_PRESERVED {
            condition::PRESERVED_BY_MCM
        } else {
            condition::PRESERVED_BY_USER
        }
        .to_owned(),
    );
    if existing != Some(&wanted) {
        if existing.is_some_and(|c| c.status != wanted.status) {
            wanted.last_transition_time = Some(time(now));
        }
        plan.actions.push(PreservationAction::NodeCondition(wanted));
    }
    if let Some(Err(reason)) = drain_result {
        plan.events.push(Event::warning(
            "PreservedNodeDrainFailed",
            format!("Preserved node could not be drained: {reason}"),
        ));
        plan.outcome = PreservationOutcome::Done {
            retry: Retry::Short,
        };
    }
    expiry
}

/// `stopPreservationIfActive` (only called with an expiry set).
fn stop_preservation(
    input: &PreservationInput<'_>,
    remove_annotations: bool,
    plan: &mut PreservationPlan,
) {
    let machine = input.machine;
    let now = input.now;
    let machine_annotations = || {
        PreservationAction::MachineAnnotations(BTreeMap::from([
            (annotation::PRESERVE.to_owned(), None),
            (
                annotation::LAST_APPLIED_NODE_PRESERVE_VALUE.to_owned(),
                None,
            ),
        ]))
    };
    if let Some(node) = input.node.filter(|_| node_name_of(machine).is_some()) {
        plan.actions
            .push(PreservationAction::NodeCondition(NodeCondition {
                type_: condition::PRESERVED.to_owned(),
                status: "False".to_owned(),
                reason: Some(condition::PRESERVATION_STOPPED.to_owned()),
                message: None,
                last_heartbeat_time: Some(time(now)),
                last_transition_time: Some(time(now)),
            }));
        let mut node_changes = BTreeMap::new();
        if node_annotation(
            node,
            annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_BY_MCM,
        ) == Some(value::TRUE)
        {
            node_changes.insert(
                annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED.to_owned(),
                None,
            );
            node_changes.insert(
                annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_BY_MCM.to_owned(),
                None,
            );
        }
        if remove_annotations && node_annotation(node, annotation::PRESERVE).is_some() {
            node_changes.insert(annotation::PRESERVE.to_owned(), None);
        }
        if !node_changes.is_empty() {
            plan.actions
                .push(PreservationAction::NodeAnnotations(node_changes));
        }
        if remove_annotations {
            plan.actions.push(machine_annotations());
        }
        if has_preserved_taint(node) {
            plan.actions.push(remove_preserved_taint());
        }
    } else if remove_annotations {
        plan.actions.push(machine_annotations());
    }
    let current = current_of(machine);
    plan.actions
        .push(PreservationAction::Status(StatusWrite::new(
            machine.last_operation().cloned().unwrap_or_default(),
            CurrentStatus {
                last_update_time: Some(time(now)),
                preserve_expiry_time: None,
                ..current
            },
        )));
    plan.events.push(Event::normal(
        "MachinePreservationStopped",
        format!("Preservation of machine {} stopped", name_of(machine)),
    ));
}

#[cfg(test)]
mod tests;
