//! Decisions of the MachineClass/Secret controller (upstream `reconcileClusterMachineClass` and
//! `reconcileClusterSecret`): which finalizers a class and its Secrets carry, and how a class's
//! Secrets fold into the data a driver receives.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use mcm_api::keys::finalizer;
use mcm_api::v1alpha1::MachineClass;

use crate::vocabulary::finalizers_with;

/// Whether any class references the Secret `name` by name (upstream ignores the namespace).
#[must_use]
pub fn secret_is_referenced(name: &str, classes: &[Arc<MachineClass>]) -> bool {
    classes.iter().any(|class| {
        [&class.secret_ref, &class.credentials_secret_ref]
            .into_iter()
            .flatten()
            .any(|reference| reference.name.as_deref() == Some(name))
    })
}

/// What one pass over a MachineClass decides (upstream `reconcileClusterMachineClass`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClassStep {
    /// The class is being deleted while machines still use it: keep it and retry after
    /// ShortRetry (upstream returns "Retry as machine objects are still referring the
    /// machineclass").
    DeletionBlocked,
    /// Write these finalizers (`true`: the MCM finalizer was added, `false`: removed).
    SetFinalizers(Vec<String>, bool),
    /// Nothing to write; re-check after LongRetry.
    Nothing,
}

/// Decides one pass over a MachineClass from whether it is being deleted, how many machines
/// reference it, and its finalizers. The class keeps the MCM finalizer while a machine uses it
/// and loses it when none does, deleted or not; a deleted class still in use is blocked.
#[must_use]
pub fn plan_class(deleting: bool, users: usize, finalizers: &[String]) -> ClassStep {
    if users > 0 && deleting {
        return ClassStep::DeletionBlocked;
    }
    let wanted = users > 0;
    match finalizers_with(finalizers, finalizer::MACHINE_CONTROLLER_MANAGER, wanted) {
        Some(next) => ClassStep::SetFinalizers(next, wanted),
        None => ClassStep::Nothing,
    }
}

/// The finalizers to write on a Secret of the control namespace (upstream
/// `reconcileClusterSecret`: `addSecretFinalizers` when some class references it by name,
/// `deleteSecretFinalizers` otherwise); `None` when nothing changes. A Secret being deleted
/// cannot get new finalizers, so only removal applies to it.
#[must_use]
pub fn plan_secret(referenced: bool, deleting: bool, finalizers: &[String]) -> Option<Vec<String>> {
    let has = finalizers
        .iter()
        .any(|f| f == finalizer::MACHINE_CONTROLLER);
    let wanted = referenced && (!deleting || has);
    finalizers_with(finalizers, finalizer::MACHINE_CONTROLLER, wanted)
}

/// Folds one referenced Secret into the class's secret data (later references win per key;
/// `stringData` is folded in for servers that do not). A Secret that does not exist contributes
/// nothing and is no error, as upstream's `getSecretData`.
pub fn merge_secret_data(data: &mut BTreeMap<String, Vec<u8>>, secret: Option<&Secret>) {
    let Some(secret) = secret else {
        return;
    };
    for (key, value) in secret.data.clone().unwrap_or_default() {
        data.insert(key, value.0);
    }
    for (key, value) in secret.string_data.clone().unwrap_or_default() {
        data.insert(key, value.into_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(secret: Option<&str>, credentials: Option<&str>) -> Arc<MachineClass> {
        let mut value = serde_json::json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "MachineClass",
            "metadata": {"name": "c", "namespace": "ns"},
            "providerSpec": {},
        });
        if let Some(name) = secret {
            value["secretRef"] = serde_json::json!({"name": name, "namespace": "ns"});
        }
        if let Some(name) = credentials {
            value["credentialsSecretRef"] = serde_json::json!({"name": name, "namespace": "other"});
        }
        Arc::new(serde_json::from_value(value).unwrap_or_else(|error| panic!("{error}")))
    }

    #[test]
    fn secrets_are_referenced_by_name_through_either_ref() {
        let classes = vec![class(Some("s1"), None), class(None, Some("s2"))];
        assert!(secret_is_referenced("s1", &classes));
        // Upstream matches by name only, whatever the namespace of the reference.
        assert!(secret_is_referenced("s2", &classes));
        assert!(!secret_is_referenced("s3", &classes));
        assert!(!secret_is_referenced("s1", &[]));
    }
}
