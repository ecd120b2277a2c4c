//! `manageReplicas` (docs/behaviour.md#manage-replicas): create the missing machines from the template in slow-start batches
//! (none while frozen or scale-up is disabled), or delete the surplus ones
//! ([`super::deletion`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use mcm_api::duration::Duration;
use mcm_api::keys::{annotation, label, value};
use mcm_api::v1alpha1::{Machine, MachinePhase, MachineSet};

use super::claim;
use super::deletion::machines_to_delete;
use super::types::{
    BURST_REPLICAS, KIND, MachineSetAction, MachineSetError, SLOW_START_INITIAL_BATCH,
    annotation_of, label_of, name_of, phase,
};

/// Slow-start batch sizes for `count` creations: 1, 2, 4, … capped to what remains (docs/behaviour.md#manage-replicas).
#[must_use]
pub fn slow_start_batches(count: usize, initial: usize) -> Vec<usize> {
    let mut batches = Vec::new();
    let mut remaining = count;
    let mut size = initial.max(1);
    while remaining > 0 {
        let batch = size.min(remaining);
        batches.push(batch);
        remaining -= batch;
        size = size.saturating_mul(2);
    }
    batches
}

/// The machine object to create for `ms` (docs/behaviour.md#machine-from-template). Name comes from `generateName` `<ms>-`.
///
/// # Errors
/// [`MachineSetError::NoTemplateLabels`] when the template has no labels.
pub fn machine_from_template(ms: &MachineSet) -> Result<Machine, MachineSetError> {
    let name = name_of(ms);
    let template = ms.spec.template.clone().unwrap_or_default();
    let tmeta = template.metadata.unwrap_or_default();
    let labels = tmeta.labels.clone().filter(|l| !l.is_empty());
    let Some(labels) = labels else {
        return Err(MachineSetError::NoTemplateLabels { name });
    };
    let mut annotations = tmeta.annotations.clone().unwrap_or_default();
    let timeout = annotation_of(&ms.metadata, annotation::EFFECTIVE_CREATION_TIMEOUT);
    if let Some(t) = timeout {
        annotations.insert(
            annotation::EFFECTIVE_CREATION_TIMEOUT.to_owned(),
            t.to_owned(),
        );
    }
    let mut spec = template.spec.unwrap_or_default();
    if let Some(parsed) = timeout.and_then(|t| t.parse::<Duration>().ok()) {
        spec.configuration.creation_timeout = Some(parsed);
    }
    let uid = ms.metadata.uid.clone().unwrap_or_default();
    Ok(Machine {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-")),
            namespace: ms.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            finalizers: tmeta.finalizers.clone(),
            owner_references: Some(vec![claim::owner_reference(KIND, &name, &uid)]),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    })
}

/// `manageReplicas` (docs/behaviour.md#manage-replicas) over the claimed machines.
///
/// # Errors
/// [`MachineSetError::NoTemplateLabels`] on scale-up with an unlabeled template.
pub fn manage_replicas(
    ms: &MachineSet,
    claimed: &[Arc<Machine>],
    node_preserve: &BTreeMap<String, Option<String>>,
    now: Timestamp,
) -> Result<Vec<MachineSetAction>, MachineSetError> {
    let replicas = usize::try_from(ms.spec.replicas.unwrap_or(0)).unwrap_or(0);
    let non_terminating = claimed
        .iter()
        .filter(|m| phase(m) != Some(&MachinePhase::Terminating))
        .count();
    if non_terminating < replicas {
        let frozen = label_of(&ms.metadata, label::FREEZE) == Some(value::TRUE_CAPITALISED)
            && ms.metadata.deletion_timestamp.is_none();
        let scale_up_disabled = ms
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(label::SCALE_UP_DISABLED));
        if frozen || scale_up_disabled {
            return Ok(Vec::new());
        }
        let count = (replicas - non_terminating).min(BURST_REPLICAS);
        return Ok(vec![MachineSetAction::CreateMachines {
            machine: Box::new(machine_from_template(ms)?),
            count,
            batches: slow_start_batches(count, SLOW_START_INITIAL_BATCH),
        }]);
    }
    let machines = machines_to_delete(ms, claimed, node_preserve, now);
    Ok(if machines.is_empty() {
        Vec::new()
    } else {
        vec![MachineSetAction::DeleteMachines { machines }]
    })
}

#[cfg(test)]
mod tests;
