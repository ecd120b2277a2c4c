//! Which machines a MachineSet deletes and in which order (upstream `getMachinesToDelete` and
//! `getMachinesToDeleteByPriority`, docs/behaviour.md#manage-replicas "Otherwise" and docs/behaviour.md#deletion-order): surplus machines by preservation,
//! priority, deletion mark, phase and age, plus machines the cluster-autoscaler marked and failed
//! machines that may be replaced; and the status written on a machine being deleted.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use mcm_api::keys::{annotation, label, last_operation, preserve, value};
use mcm_api::v1alpha1::{
    CurrentStatus, LastOperation, Machine, MachineOperationType, MachinePhase, MachineSet,
    MachineState, MachineStatus,
};

use super::types::{BURST_REPLICAS, MachineRef, annotation_of, label_of, phase, preserve_expiry};

/// Whether the machine is preserved at `now` (`preserveExpiryTime` in the future).
#[must_use]
pub fn is_preserved(m: &Machine, now: Timestamp) -> bool {
    preserve_expiry(m).is_some_and(|t| t > now)
}

/// Rank of a phase in the deletion order (docs/behaviour.md#deletion-order step 5; unknown phases rank like Terminating,
/// quirk docs/behaviour.md#q8).
#[must_use]
pub fn phase_rank(phase: Option<&MachinePhase>) -> u8 {
    match phase {
        Some(MachinePhase::Failed) => 1,
        Some(MachinePhase::CrashLoopBackOff) => 2,
        Some(MachinePhase::Unknown) => 3,
        Some(MachinePhase::Pending) => 4,
        Some(MachinePhase::Available) => 5,
        Some(MachinePhase::Running) => 6,
        _ => 0,
    }
}

fn priority(m: &Machine) -> i64 {
    annotation_of(&m.metadata, annotation::MACHINE_PRIORITY)
        .and_then(|p| p.parse().ok())
        .unwrap_or(3)
}

fn marked_time(m: &Machine) -> Option<Timestamp> {
    annotation_of(&m.metadata, annotation::MARKED_FOR_DELETION_TIME)?
        .parse()
        .ok()
}

/// Deletion order of docs/behaviour.md#deletion-order: `Less` means `a` is deleted before `b`.
#[must_use]
pub fn deletion_order(a: &Machine, b: &Machine, now: Timestamp) -> Ordering {
    let (pa, pb) = (is_preserved(a, now), is_preserved(b, now));
    if pa != pb {
        return pa.cmp(&pb);
    }
    if pa {
        let auto = |m: &Machine| {
            annotation_of(&m.metadata, annotation::PRESERVE) == Some(preserve::AUTO_PRESERVED)
        };
        // auto-preserved first.
        let by_auto = auto(b).cmp(&auto(a));
        if by_auto != Ordering::Equal {
            return by_auto;
        }
        let by_expiry = preserve_expiry(a).cmp(&preserve_expiry(b));
        if by_expiry != Ordering::Equal {
            return by_expiry;
        }
    }
    let by_priority = priority(a).cmp(&priority(b));
    if by_priority != Ordering::Equal {
        return by_priority;
    }
    match (marked_time(a), marked_time(b)) {
        (Some(_), None) => return Ordering::Less,
        (None, Some(_)) => return Ordering::Greater,
        (Some(x), Some(y)) if x != y => return x.cmp(&y),
        _ => {}
    }
    let by_phase = phase_rank(phase(a)).cmp(&phase_rank(phase(b)));
    if by_phase != Ordering::Equal {
        return by_phase;
    }
    let created = |m: &Machine| m.metadata.creation_timestamp.as_ref().map(|t| t.0);
    // Upstream leaves ties to Go's unstable sort (in effect the lister's order); the name makes
    // the order the controller's and the rollout preview's alike (docs/behaviour.md#deletion-order).
    created(a)
        .cmp(&created(b))
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// Whether a Failed machine may be deleted and replaced (docs/behaviour.md#auto-preservation `shouldFailedMachineBeTerminated`).
///
/// A machine with a node label whose node is not in `node_preserve` counts as a node lookup
/// error, which upstream answers with "terminate".
#[must_use]
pub fn should_failed_machine_be_terminated(
    m: &Machine,
    node_preserve: &BTreeMap<String, Option<String>>,
    now: Timestamp,
) -> bool {
    if let Some(expiry) = preserve_expiry(m) {
        return expiry <= now;
    }
    let machine_value = annotation_of(&m.metadata, annotation::PRESERVE).unwrap_or("");
    let last_applied =
        annotation_of(&m.metadata, annotation::LAST_APPLIED_NODE_PRESERVE_VALUE).unwrap_or("");
    let effective = match m.node_name().filter(|n| !n.is_empty()) {
        None => machine_value,
        Some(node) => match node_preserve.get(node) {
            None => return true,
            Some(node_value) => {
                let node_value = node_value.as_deref().unwrap_or("");
                if node_value.is_empty() && last_applied.is_empty() {
                    machine_value
                } else {
                    node_value
                }
            }
        },
    };
    !matches!(
        effective,
        preserve::WHEN_FAILED | preserve::NOW | preserve::AUTO_PRESERVED
    )
}

/// The status the shell writes on a machine it deletes (docs/behaviour.md#manage-replicas `terminateMachines`), or `None` when
/// the current status already says so (descriptions and timestamps younger than 30 minutes are
/// ignored in that comparison, as upstream).
#[must_use]
pub fn terminating_status(m: &Machine, now: Timestamp) -> Option<MachineStatus> {
    let status = m.status.clone().unwrap_or_default();
    let fresh = |t: Option<&Time>| {
        t.is_some_and(|t| now.duration_since(t.0) < SignedDuration::from_mins(30))
    };
    let cs = status.current_status.as_ref();
    let lo = status.last_operation.as_ref();
    let already = cs.is_some_and(|c| {
        c.phase == Some(MachinePhase::Terminating)
            && !c.timeout_active.unwrap_or(false)
            && fresh(c.last_update_time.as_ref())
    }) && lo.is_some_and(|l| {
        l.state == Some(MachineState::Processing)
            && l.type_ == Some(MachineOperationType::Delete)
            && fresh(l.last_update_time.as_ref())
    });
    if already {
        return None;
    }
    Some(MachineStatus {
        last_operation: Some(LastOperation {
            description: Some(last_operation::DELETING_MACHINE_FROM_CLOUD_PROVIDER.to_owned()),
            error_code: None,
            last_update_time: Some(Time(now)),
            state: Some(MachineState::Processing),
            type_: Some(MachineOperationType::Delete),
        }),
        current_status: Some(CurrentStatus {
            phase: Some(MachinePhase::Terminating),
            timeout_active: Some(false),
            last_update_time: Some(Time(now)),
            // A terminating machine is no longer preserved (docs/behaviour.md#q18).
            preserve_expiry_time: None,
        }),
        ..status
    })
}

/// The machines to delete in a non-scale-up pass (docs/behaviour.md#manage-replicas "Otherwise"), in deletion order.
#[must_use]
pub fn machines_to_delete(
    ms: &MachineSet,
    claimed: &[Arc<Machine>],
    node_preserve: &BTreeMap<String, Option<String>>,
    now: Timestamp,
) -> Vec<MachineRef> {
    let replicas = usize::try_from(ms.spec.replicas.unwrap_or(0)).unwrap_or(0);
    let mut candidates: Vec<&Machine> = claimed
        .iter()
        .map(|m| &**m)
        .filter(|m| phase(m) != Some(&MachinePhase::Terminating))
        .filter(|m| label_of(&m.metadata, label::UPDATE_RESULT) != Some(value::UPDATE_SUCCESSFUL))
        .collect();
    let mut stale: Vec<&Machine> = Vec::new();
    if candidates.len() > replicas {
        let diff = (candidates.len() - replicas).min(BURST_REPLICAS);
        candidates.sort_by(|a, b| deletion_order(a, b, now));
        stale.extend(candidates.iter().take(diff));
    }
    let scaler_time = annotation_of(
        &ms.metadata,
        annotation::LAST_DEPLOYMENT_REPLICA_CHANGE_BY_SCALER_TIME,
    )
    .and_then(|t| t.parse::<Timestamp>().ok());
    if let Some(limit) = scaler_time {
        stale.extend(candidates.iter().filter(|m| {
            annotation_of(&m.metadata, annotation::MACHINE_PRIORITY)
                == Some(value::MACHINE_PRIORITY_TRIGGERED_FOR_DELETION)
                && marked_time(m).is_some_and(|t| t <= limit)
        }));
    }
    stale.extend(candidates.iter().filter(|m| {
        phase(m) == Some(&MachinePhase::Failed)
            && should_failed_machine_be_terminated(m, node_preserve, now)
    }));
    let mut seen = BTreeSet::new();
    stale
        .into_iter()
        .filter(|m| seen.insert(m.metadata.name.clone()))
        .take(BURST_REPLICAS)
        .map(MachineRef::of)
        .collect()
}

#[cfg(test)]
mod tests;
