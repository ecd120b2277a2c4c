//! The MachineSet status (docs/behaviour.md#machine-set-status, upstream `calculateMachineSetStatus` and
//! `updateMachineSetStatus`): counts, the `ReplicaFailure` condition and failed machines, when
//! it must be written and how long a counts-only write is held back.

use std::borrow::Borrow;
use std::cmp::Ordering;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use mcm_api::keys::{annotation, preserve};
use mcm_api::v1alpha1::{
    ConditionStatus, Machine, MachinePhase, MachineSet, MachineSetCondition,
    MachineSetConditionType, MachineSetStatus, MachineState, MachineSummary,
};

use super::claim;
use super::semantic_equality;
use super::types::{ReplicaError, annotation_of, labels, phase, preserve_expiry};

/// The status of docs/behaviour.md#machine-set-status for the claimed machines (`claimed` from [`MachineSetPlan::claimed`](super::types::MachineSetPlan::claimed)).
#[must_use]
pub fn machine_set_status<M: Borrow<Machine>>(
    ms: &MachineSet,
    claimed: &[M],
    replica_error: Option<&ReplicaError>,
    now: Timestamp,
) -> MachineSetStatus {
    let claimed: Vec<&Machine> = claimed.iter().map(Borrow::borrow).collect();
    let old = ms.status.clone().unwrap_or_default();
    let template_labels = ms
        .spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let count = |f: &dyn Fn(&Machine) -> bool| {
        i32::try_from(claimed.iter().filter(|m| f(m)).count()).unwrap_or(i32::MAX)
    };
    let fully_labeled = count(&|m| {
        template_labels
            .iter()
            .all(|(k, v)| labels(&m.metadata).and_then(|l| l.get(k)) == Some(v))
    });
    let available = count(&|m| {
        matches!(
            phase(m),
            Some(MachinePhase::Available | MachinePhase::Running)
        )
    });
    let ready = count(&|m| phase(m) == Some(&MachinePhase::Running));
    let preserved_failed =
        |m: &Machine| phase(m) == Some(&MachinePhase::Failed) && preserve_expiry(m).is_some();
    let failed: Vec<MachineSummary> = claimed
        .iter()
        .filter(|m| {
            m.last_operation()
                .is_some_and(|l| l.state == Some(MachineState::Failed))
                && !preserved_failed(m)
        })
        .map(|m| MachineSummary {
            name: m.metadata.name.clone(),
            provider_id: m.spec.provider_id.clone(),
            last_operation: m.last_operation().cloned(),
            owner_ref: claim::controller_ref(&m.metadata).map(|r| r.name.clone()),
        })
        .collect();
    let auto_preserved = count(&|m| {
        annotation_of(&m.metadata, annotation::PRESERVE) == Some(preserve::AUTO_PRESERVED)
    });
    let mut conditions = old.conditions.clone().unwrap_or_default();
    let has_failure = conditions
        .iter()
        .any(|c| c.type_ == MachineSetConditionType::ReplicaFailure);
    match replica_error {
        Some(err) if !has_failure => {
            let replicas = usize::try_from(ms.spec.replicas.unwrap_or(0)).unwrap_or(0);
            let reason = match claimed.len().cmp(&replicas) {
                Ordering::Less => "FailedCreate",
                Ordering::Greater => "FailedDelete",
                Ordering::Equal => "",
            };
            conditions.push(MachineSetCondition {
                type_: MachineSetConditionType::ReplicaFailure,
                status: ConditionStatus::True,
                last_transition_time: Some(Time(now)),
                reason: Some(reason.to_owned()),
                message: Some(err.message.clone()),
            });
        }
        None if has_failure => {
            conditions.retain(|c| c.type_ != MachineSetConditionType::ReplicaFailure);
        }
        _ => {}
    }
    let mut last_operation = old.last_operation.clone().unwrap_or_default();
    last_operation.last_update_time = Some(Time(now));
    MachineSetStatus {
        replicas: Some(count(&|_| true)),
        fully_labeled_replicas: Some(fully_labeled),
        ready_replicas: Some(ready),
        available_replicas: Some(available),
        preserved_failed_replicas: Some(count(&preserved_failed)),
        observed_generation: ms.metadata.generation,
        conditions: (!conditions.is_empty()).then_some(conditions),
        last_operation: Some(last_operation),
        failed_machines: (!failed.is_empty()).then_some(failed),
        auto_preserve_failed_machine_count: Some(auto_preserved),
    }
}

/// Whether `new` must be written (docs/behaviour.md#machine-set-status `updateMachineSetStatus`): any counted field, condition or
/// failed machine differs, or the generation was not observed yet.
#[must_use]
pub fn status_needs_update(ms: &MachineSet, new: &MachineSetStatus) -> bool {
    let old = ms.status.clone().unwrap_or_default();
    let n = |v: Option<i32>| v.unwrap_or(0);
    n(old.replicas) != n(new.replicas)
        || n(old.fully_labeled_replicas) != n(new.fully_labeled_replicas)
        || n(old.ready_replicas) != n(new.ready_replicas)
        || n(old.available_replicas) != n(new.available_replicas)
        || n(old.auto_preserve_failed_machine_count) != n(new.auto_preserve_failed_machine_count)
        || n(old.preserved_failed_replicas) != n(new.preserved_failed_replicas)
        || !semantic_equality::equal(&old.conditions, &new.conditions)
        || !semantic_equality::equal(&old.failed_machines, &new.failed_machines)
        || ms.metadata.generation != old.observed_generation
}

/// Shortest time between two status writes of one MachineSet that only change replica counts.
pub const STATUS_COUNT_WRITE_INTERVAL: SignedDuration = SignedDuration::from_secs(1);

/// How long to hold back writing `new` (which [`status_needs_update`] wants written) when the
/// set's status was last written at `last_written`: `None` writes now.
///
/// While a fleet scales, every machine that turns Running changes the counts, and each count
/// written is also a MachineDeployment status write: at 1,000 machines that was about half a
/// control-cluster write per machine. Counts are therefore written at most once per
/// [`STATUS_COUNT_WRITE_INTERVAL`], the last value always (the shell requeues for it).
/// Conditions, failed machines, a new generation and counts that reached the set's replicas
/// (every machine ready and available: the write a scale-up or a rollout waits for) are written
/// at once.
#[must_use]
pub fn status_write_delay(
    ms: &MachineSet,
    new: &MachineSetStatus,
    last_written: Option<Timestamp>,
    now: Timestamp,
) -> Option<SignedDuration> {
    let old = ms.status.clone().unwrap_or_default();
    let counts_only = semantic_equality::equal(&old.conditions, &new.conditions)
        && semantic_equality::equal(&old.failed_machines, &new.failed_machines)
        && ms.metadata.generation == old.observed_generation;
    if !counts_only || settled(ms, new) {
        return None;
    }
    let since = now.duration_since(last_written?);
    (since >= SignedDuration::ZERO && since < STATUS_COUNT_WRITE_INTERVAL)
        .then(|| STATUS_COUNT_WRITE_INTERVAL - since)
}

/// Whether `new` counts every wanted machine as there, labelled, ready and available: the set
/// has reached its spec, and the MachineDeployment waits for exactly this write.
fn settled(ms: &MachineSet, new: &MachineSetStatus) -> bool {
    let wanted = ms.spec.replicas.unwrap_or(0);
    [
        new.replicas,
        new.fully_labeled_replicas,
        new.ready_replicas,
        new.available_replicas,
    ]
    .iter()
    .all(|count| count.unwrap_or(0) == wanted)
}

#[cfg(test)]
mod tests;
