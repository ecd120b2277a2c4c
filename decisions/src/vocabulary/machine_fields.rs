//! Read accessors of Machine fields the plans share (absent and empty values folded the way
//! upstream's Go code sees them) and the one edit of label/annotation maps.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use mcm_api::v1alpha1::{CurrentStatus, Machine, MachineOperationType, MachinePhase};

/// The machine's current status, or an empty one.
#[must_use]
pub fn current_of(machine: &Machine) -> CurrentStatus {
    machine
        .status
        .as_ref()
        .and_then(|status| status.current_status.clone())
        .unwrap_or_default()
}

/// The machine's phase; `None` for "not created yet" (absent or empty text).
#[must_use]
pub fn phase_of(machine: &Machine) -> Option<MachinePhase> {
    machine
        .phase()
        .filter(|phase| !phase.as_str().is_empty())
        .cloned()
}

/// `status.currentStatus.preserveExpiryTime`.
#[must_use]
pub fn preserve_expiry_of(machine: &Machine) -> Option<Time> {
    machine
        .status
        .as_ref()
        .and_then(|status| status.current_status.as_ref())
        .and_then(|current| current.preserve_expiry_time.clone())
}

/// `status.lastOperation.description` (empty when absent).
#[must_use]
pub fn description_of(machine: &Machine) -> &str {
    machine
        .last_operation()
        .and_then(|operation| operation.description.as_deref())
        .unwrap_or("")
}

/// `status.lastOperation.type`.
#[must_use]
pub fn operation_type_of(machine: &Machine) -> Option<MachineOperationType> {
    machine
        .last_operation()
        .and_then(|operation| operation.type_.clone())
}

/// `status.lastKnownState` (empty when absent).
#[must_use]
pub fn last_known_state_of(machine: &Machine) -> String {
    machine
        .status
        .as_ref()
        .and_then(|status| status.last_known_state.clone())
        .unwrap_or_default()
}

/// A label of the machine.
#[must_use]
pub fn label<'a>(machine: &'a Machine, key: &str) -> Option<&'a str> {
    machine
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(key))
        .map(String::as_str)
}

/// An annotation of the machine.
#[must_use]
pub fn machine_annotation<'a>(machine: &'a Machine, key: &str) -> Option<&'a str> {
    machine
        .metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(key))
        .map(String::as_str)
}

/// The machine name (empty when missing; the API server never serves such objects).
#[must_use]
pub fn name_of(machine: &Machine) -> &str {
    machine.metadata.name.as_deref().unwrap_or("")
}

/// The node label value, `None` when absent or empty.
#[must_use]
pub fn node_name_of(machine: &Machine) -> Option<&str> {
    machine.node_name().filter(|name| !name.is_empty())
}

/// `spec.providerID`, `None` when absent or empty.
#[must_use]
pub fn provider_id_of(machine: &Machine) -> Option<&str> {
    machine
        .spec
        .provider_id
        .as_deref()
        .filter(|provider_id| !provider_id.is_empty())
}

/// Whether the machine carries a finalizer.
#[must_use]
pub fn has_finalizer(machine: &Machine, finalizer: &str) -> bool {
    machine
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|finalizers| finalizers.iter().any(|f| f == finalizer))
}

/// Inserts or removes (value `None`) entries of an optional string map; returns whether it changed.
pub fn set_entries(
    map: &mut Option<BTreeMap<String, String>>,
    changes: &BTreeMap<String, Option<String>>,
) -> bool {
    let mut changed = false;
    for (key, value) in changes {
        match value {
            Some(value) => {
                let entries = map.get_or_insert_with(BTreeMap::new);
                if entries.get(key) != Some(value) {
                    entries.insert(key.clone(), value.clone());
                    changed = true;
                }
            }
            None => {
                if let Some(entries) = map.as_mut() {
                    changed |= entries.remove(key).is_some();
                }
            }
        }
    }
    changed
}
