//! "Why is this machine stuck?": one condition on every machine that is not
//! Running, saying what it waits for and until when.
//!
//! The condition (type [`CONDITION_TYPE`]) lives in `status.conditions` beside the node
//! conditions upstream copies there, so `kubectl describe machine` shows it under Conditions. Its
//! reason is a short CamelCase word, its message names the blocker (the pods and the disruption
//! budget blocking a drain, the volumes not detached, the driver error and its next retry, a
//! freeze) and the deadline that ends the wait (creation, health, in-place or drain timeout,
//! preservation expiry).
//!
//! [`waiting_condition`] computes it from a snapshot; [`merge_waiting_condition`] puts it into a
//! condition list and says whether anything but the timestamps changed, so the shells write only
//! on a change (mostly inside a status write they make anyway). The node-condition comparisons of
//! the health check ignore this type ([`is_waiting_condition`]).

use jiff::Timestamp;
use k8s_openapi::api::core::v1::NodeCondition;
use mcm_api::keys::last_operation as text;
use mcm_api::v1alpha1::{Machine, MachineOperationType, MachinePhase, MachineState};
use mcm_provider_proto::Code;

use super::backoff::{parse_mark, strip_mark};
use super::creation::resource_exhausted_retry;
use crate::drain::plan::{DrainLedger, EvictionFailure};
use crate::vocabulary::{
    ControllerSettings, EffectiveSettings, StatusWrite, add, current_of, description_of,
    node_name_of, operation_type_of, phase_of, preserve_expiry_of, time,
};

/// Condition type written on the Machine.
pub const CONDITION_TYPE: &str = "Blocked";

/// Freeze reason the shells pass while the API-server safety check freezes the controller.
pub const FROZEN_REASON: &str = "the control or target API server was unreachable";

/// Longest list of pods or volumes named in a message (the rest is counted).
const MAX_NAMED: usize = 5;

/// A pod whose eviction a disruption budget refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockedPod {
    /// `namespace/name`.
    pub pod: String,
    /// `namespace/name` of the budget, when known.
    pub pdb: Option<String>,
}

/// What the drain of the machine's node is waiting for (from the drain's in-memory ledger).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DrainView {
    /// Pods whose eviction a budget refused on the last attempt.
    pub blocked: Vec<BlockedPod>,
    /// Pods still on the node (evicting or terminating).
    pub pending: Vec<String>,
    /// Volume IDs of evicted pods still attached to the node.
    pub volumes: Vec<String>,
    /// When the drain is forced.
    pub deadline: Option<Timestamp>,
}

/// The drain's view from its ledger: pods whose last eviction a budget refused, and the volumes
/// of evicted pods the drain still waits for.
#[must_use]
pub fn drain_view(
    ledger: &DrainLedger,
    pending: &[String],
    deadline: Option<Timestamp>,
) -> DrainView {
    let mut view = DrainView {
        pending: pending.to_vec(),
        deadline,
        ..DrainView::default()
    };
    for (pod, progress) in &ledger.pods {
        match &progress.last_failure {
            Some(EvictionFailure::TooManyRequests) if progress.accepted_at.is_none() => {
                view.blocked.push(BlockedPod {
                    pod: pod.clone(),
                    pdb: None,
                });
            }
            Some(
                EvictionFailure::BlockedByPdb { pdb } | EvictionFailure::MisconfiguredPdb { pdb },
            ) if progress.accepted_at.is_none() => {
                view.blocked.push(BlockedPod {
                    pod: pod.clone(),
                    pdb: Some(pdb.clone()),
                });
            }
            _ => {}
        }
        // An evicted pod with volumes that the drain still lists is waited for until its
        // volumes detach from the node (the drain's serial volume queue).
        if progress.accepted_at.is_some() && pending.contains(pod) {
            view.volumes.extend(progress.volume_ids.iter().cloned());
        }
    }
    view
}

/// Everything the condition is computed from.
pub struct WaitingInput<'a> {
    /// The machine with the status that is (about to be) stored.
    pub machine: &'a Machine,
    /// Its effective settings (timeouts).
    pub settings: &'a EffectiveSettings,
    /// Controller flags (`--resource-exhausted-retry`).
    pub controller: &'a ControllerSettings,
    /// Why the Machine controller is frozen, if it is.
    pub frozen: Option<&'a str>,
    /// The drain's view, during the drain step of a deletion.
    pub drain: Option<&'a DrainView>,
    /// The guard keeping an `Unknown` machine whose health timeout ran out from being marked
    /// Failed ([`crate::machine::health::HealthPlan::held`]), when one holds it.
    pub held: Option<&'a str>,
}

fn listed(items: &[String]) -> String {
    let mut text = items
        .iter()
        .take(MAX_NAMED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > MAX_NAMED {
        text.push_str(&format!(" (+{} more)", items.len() - MAX_NAMED));
    }
    text
}

fn at_text(at: Timestamp) -> String {
    // Whole seconds: the message must not change between two computations of the same state.
    Timestamp::from_second(at.as_second())
        .unwrap_or(at)
        .to_string()
}

fn condition(reason: &str, message: String) -> NodeCondition {
    NodeCondition {
        type_: CONDITION_TYPE.to_owned(),
        status: "True".to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message),
        ..NodeCondition::default()
    }
}

fn drain_condition(node: &str, drain: &DrainView) -> Option<NodeCondition> {
    let until = drain
        .deadline
        .map(|at| format!("; the drain is forced at {}", at_text(at)))
        .unwrap_or_default();
    if !drain.blocked.is_empty() {
        let pods: Vec<String> = drain
            .blocked
            .iter()
            .map(|blocked| match &blocked.pdb {
                Some(pdb) => format!("{} (PodDisruptionBudget {pdb})", blocked.pod),
                None => format!("{} (a PodDisruptionBudget)", blocked.pod),
            })
            .collect();
        return Some(condition(
            "DrainBlockedByPDB",
            format!(
                "drain of node {node} waits for evictions refused by disruption budgets: {}{until}",
                listed(&pods)
            ),
        ));
    }
    if !drain.volumes.is_empty() {
        return Some(condition(
            "VolumesNotDetached",
            format!(
                "drain of node {node} waits for volumes to detach: {}{until}",
                listed(&drain.volumes)
            ),
        ));
    }
    if !drain.pending.is_empty() {
        return Some(condition(
            "DrainInProgress",
            format!(
                "drain of node {node} waits for {} pod(s) to terminate: {}{until}",
                drain.pending.len(),
                listed(&drain.pending)
            ),
        ));
    }
    None
}

/// The condition for the machine, `None` when it waits for nothing (Running, Available).
#[must_use]
pub fn waiting_condition(input: &WaitingInput<'_>) -> Option<NodeCondition> {
    let machine = input.machine;
    let settings = input.settings;
    if let Some(reason) = input.frozen {
        return Some(condition(
            "ControllerFrozen",
            format!(
                "the Machine controller is frozen ({reason}); nothing is done until it unfreezes"
            ),
        ));
    }
    let operation = machine.last_operation();
    let description = description_of(machine);
    let failed = operation.is_some_and(|op| op.state == Some(MachineState::Failed));
    let node = node_name_of(machine).unwrap_or("");
    let current = current_of(machine);
    let since_status = current.last_update_time.as_ref().map(|at| at.0);
    let created = machine.metadata.creation_timestamp.as_ref().map(|at| at.0);
    let mark = parse_mark(description).filter(|_| failed);
    // The stored name of the driver's code, read back as the code the plans decided on.
    let error_code = operation
        .and_then(|op| op.error_code.as_deref())
        .map(Code::from_name);
    let retry_text = |mark: super::backoff::RetryMark| match mark.next_retry_at {
        Some(at) => format!("attempt {}, next retry at {}", mark.attempt, at_text(at)),
        None => format!("attempt {}", mark.attempt),
    };
    let phase = phase_of(machine);
    match phase {
        Some(MachinePhase::Running | MachinePhase::Available) | None => None,
        Some(MachinePhase::Terminating) => {
            if let Some(drain) = input.drain
                && let Some(found) = drain_condition(node, drain)
            {
                return Some(found);
            }
            if let Some(mark) = mark {
                return Some(condition(
                    "DriverErrorBackoff",
                    format!(
                        "DeleteMachine failed: {}; {}",
                        strip_mark(description),
                        retry_text(mark)
                    ),
                ));
            }
            if failed {
                let deadline = machine
                    .metadata
                    .deletion_timestamp
                    .as_ref()
                    .map(|at| add(at.0, settings.drain_timeout));
                let forced = match deadline {
                    Some(at) if description.contains(text::INITIATE_DRAIN) => {
                        format!("; the drain is forced at {}", at_text(at))
                    }
                    _ => String::new(),
                };
                return Some(condition(
                    "DeletionStepFailed",
                    format!("{description}{forced}"),
                ));
            }
            Some(condition(
                "Deleting",
                format!("deletion in progress: {description}"),
            ))
        }
        Some(MachinePhase::Pending) => {
            let deadline = created.map(|at| add(at, settings.creation_timeout));
            Some(condition(
                "WaitingForNode",
                format!(
                    "waiting for node {node} to join and become healthy{}",
                    deadline
                        .map(|at| format!(
                            "; the machine is Failed at {} (creation timeout)",
                            at_text(at)
                        ))
                        .unwrap_or_default()
                ),
            ))
        }
        Some(MachinePhase::CrashLoopBackOff) => {
            let deadline = created
                .map(|at| {
                    format!(
                        "; the machine is Failed at {} (creation timeout)",
                        at_text(add(at, settings.creation_timeout))
                    )
                })
                .unwrap_or_default();
            let retry = match mark {
                Some(mark) => retry_text(mark),
                None if error_code == Some(Code::ResourceExhausted) => {
                    let at = operation
                        .and_then(|op| op.last_update_time.as_ref())
                        .map(|at| add(at.0, resource_exhausted_retry(input.controller).period()));
                    at.map_or_else(
                        || "retried after --resource-exhausted-retry".to_owned(),
                        |at| format!("next retry at {}", at_text(at)),
                    )
                }
                None => "retried".to_owned(),
            };
            let method =
                if description.contains(mcm_api::keys::last_operation::INSTANCE_INITIALIZATION) {
                    "InitializeMachine"
                } else {
                    "CreateMachine"
                };
            Some(condition(
                "DriverErrorBackoff",
                format!(
                    "{method} failed: {}; {retry}{deadline}",
                    strip_mark(description)
                ),
            ))
        }
        Some(MachinePhase::Unknown | MachinePhase::InPlaceUpdateFailed) => {
            let preserved = preserve_expiry_of(machine)
                .map(|at| format!("; preserved until {}", at_text(at.0)))
                .unwrap_or_default();
            let until = if settings.disable_health_timeout {
                "; never marked Failed (disableHealthTimeout)".to_owned()
            } else if let Some(held) = input.held {
                // The deadline is past: say what holds the machine, not a time that went by.
                let passed = since_status
                    .map(|at| format!(" at {}", at_text(add(at, settings.health_timeout))))
                    .unwrap_or_default();
                return Some(condition(
                    "ReplacementHeld",
                    format!(
                        "waiting for node {node} to become healthy again; its health timeout ran out{passed}, but it is not marked Failed (and replaced) while {held}{preserved}"
                    ),
                ));
            } else {
                since_status
                    .map(|at| {
                        format!(
                            "; the machine is Failed at {} (health timeout)",
                            at_text(add(at, settings.health_timeout))
                        )
                    })
                    .unwrap_or_default()
            };
            Some(condition(
                "NodeUnhealthy",
                format!("waiting for node {node} to become healthy again{until}{preserved}"),
            ))
        }
        Some(MachinePhase::InPlaceUpdating) => Some(condition(
            "InPlaceUpdate",
            format!(
                "waiting for the in-place update of node {node}{}",
                since_status
                    .map(|at| format!(
                        "; the machine is Failed at {} (in-place update timeout)",
                        at_text(add(at, settings.in_place_update_timeout))
                    ))
                    .unwrap_or_default()
            ),
        )),
        Some(MachinePhase::Failed) => Some(match preserve_expiry_of(machine) {
            Some(at) => condition(
                "Preserved",
                format!(
                    "Failed and preserved for diagnosis until {}; replaced after that",
                    at_text(at.0)
                ),
            ),
            None => condition(
                "Failed",
                format!(
                    "Failed ({}); waiting for its MachineSet to replace it",
                    if operation_type_of(machine) == Some(MachineOperationType::Create) {
                        "creation"
                    } else {
                        description
                    }
                ),
            ),
        }),
        Some(other) => Some(condition(
            "Waiting",
            format!("phase {other}: {description}"),
        )),
    }
}

/// Whether a condition is the one this module writes.
#[must_use]
pub fn is_waiting_condition(condition: &NodeCondition) -> bool {
    condition.type_ == CONDITION_TYPE
}

/// `conditions` with `wanted` in place of the previous waiting condition (removed when `None`),
/// and whether anything but the timestamps changed. The transition time is kept while the reason
/// stays the same.
#[must_use]
pub fn merge_waiting_condition(
    conditions: &[NodeCondition],
    wanted: Option<NodeCondition>,
    now: Timestamp,
) -> (Vec<NodeCondition>, bool) {
    let previous = conditions.iter().find(|c| is_waiting_condition(c));
    let mut merged: Vec<NodeCondition> = conditions
        .iter()
        .filter(|c| !is_waiting_condition(c))
        .cloned()
        .collect();
    let changed = match (previous, &wanted) {
        (None, None) => false,
        (Some(old), Some(new)) => {
            old.status != new.status || old.reason != new.reason || old.message != new.message
        }
        _ => true,
    };
    if let Some(mut new) = wanted {
        let same_reason = previous.is_some_and(|old| old.reason == new.reason);
        new.last_transition_time = match previous {
            Some(old) if same_reason => old.last_transition_time.clone(),
            _ => Some(time(now)),
        };
        new.last_heartbeat_time = if changed {
            Some(time(now))
        } else {
            previous.and_then(|old| old.last_heartbeat_time.clone())
        };
        merged.push(new);
    }
    (merged, changed)
}

/// Why a pass writes the waiting condition with no other status write to carry it.
#[derive(Debug, Clone, Copy)]
pub enum WaitingOnly<'a> {
    /// The Machine controller is frozen: it writes nothing else, but the machine says why
    /// nothing happens.
    Frozen,
    /// A drain is in progress; it writes no status of its own (upstream), so its ledger (the
    /// pods a budget refuses, the volumes awaited, the deadline) is shown here.
    Draining(&'a DrainView),
    /// The health timeout ran out but a guard (see [`WaitingInput::held`]) keeps the machine
    /// from being marked Failed.
    Held(&'a str),
}

/// The machine as a status write of a pass that started at `now` sends it, complete: `write`
/// applied to its status, with the waiting condition of the result (naming the freeze when the
/// Machine controller is `frozen`), its timestamps from `now`. Every status write of the machine
/// shells sends this, so the condition mostly costs no write of its own.
#[must_use]
pub fn status_to_send(
    machine: &Machine,
    write: &StatusWrite,
    controller: &ControllerSettings,
    frozen: bool,
    now: Timestamp,
) -> Machine {
    let mut updated = machine.clone();
    updated.status = Some(write.apply(machine.status.as_ref()));
    let _ = refresh(
        &mut updated,
        controller,
        frozen.then_some(FROZEN_REASON),
        None,
        None,
        now,
    );
    updated
}

/// The machine with only its waiting condition refreshed for `why` (for a guard, also the
/// `lastOperation` text naming it), from the pass's `now`; `None` when nothing but timestamps
/// would change, so nothing needs writing.
#[must_use]
pub fn waiting_only(
    machine: &Machine,
    controller: &ControllerSettings,
    why: WaitingOnly<'_>,
    now: Timestamp,
) -> Option<Machine> {
    let (frozen, drain, held) = match why {
        WaitingOnly::Frozen => (Some(FROZEN_REASON), None, None),
        WaitingOnly::Draining(view) => (None, Some(view), None),
        WaitingOnly::Held(guard) => (None, None, Some(guard)),
    };
    let mut updated = machine.clone();
    refresh(&mut updated, controller, frozen, drain, held, now).then_some(updated)
}

/// Puts the waiting condition for `machine` (its status as it is about to be stored) into its
/// `status.conditions`, and a guard that holds it into `lastOperation`; true when that changed
/// anything but timestamps.
fn refresh(
    machine: &mut Machine,
    controller: &ControllerSettings,
    frozen: Option<&str>,
    drain: Option<&DrainView>,
    held: Option<&str>,
    now: Timestamp,
) -> bool {
    let settings = crate::vocabulary::effective_settings(machine, controller);
    let wanted = waiting_condition(&WaitingInput {
        machine,
        settings: &settings,
        controller,
        frozen,
        drain,
        held,
    });
    let Some(status) = machine.status.as_mut() else {
        return false;
    };
    let old = status.conditions.clone().unwrap_or_default();
    let (merged, mut changed) = merge_waiting_condition(&old, wanted, now);
    if merged != old {
        status.conditions = (!merged.is_empty()).then_some(merged);
    }
    // `lastOperation` names the guard too: it is what `kubectl get machine -o yaml` readers
    // and dashboards look at first.
    if let Some(held) = held
        && let Some(operation) = status.last_operation.as_mut()
        && let Some(description) =
            held_description(operation.description.as_deref().unwrap_or_default(), held)
    {
        operation.description = Some(description);
        changed = true;
    }
    changed
}

/// What an Unknown machine's `lastOperation.description` says while a guard holds it: the
/// health check's text (upstream's, kept as the prefix) followed by [`HELD_MARK`] and the guard;
/// `None` when it says so already. A previous guard's text is replaced.
#[must_use]
pub fn held_description(description: &str, held: &str) -> Option<String> {
    let base = description
        .split_once(HELD_MARK)
        .map_or(description, |(base, _)| base);
    let wanted = format!("{base}{HELD_MARK}{held}");
    (wanted != description).then_some(wanted)
}

/// Separates the health check's description of an Unknown machine from the guard that holds it.
pub const HELD_MARK: &str = ". Not marked Failed (and replaced) while held by ";

#[cfg(test)]
mod tests;
