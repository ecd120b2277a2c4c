//! API reads and writes of the termination shell: the status of stages that progressed in memory
//! (optimistic concurrency through the resourceVersion of the object read; a plan's status write
//! goes through the machine shells' one `write_status` in `machine::writes`), labels
//! and finalizer, the class and its secrets, the Node in the target cluster and its
//! VolumeAttachments.

use std::time::Instant;

use crate::platform::finalizers;
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use mcm_api::keys::finalizer;
use mcm_api::v1alpha1::{Machine, MachineClass};
use mcm_provider_proto::{MachineError, SecretData};

use super::state::TerminationError;
use crate::machine::context::MachineContext;
use mcm_decisions::machine::order::validate_machine_class;
use mcm_decisions::vocabulary::{DriverError, Event, EventType, Retry, WriteFailure};

pub(super) fn write_failure(error: &kube::Error) -> WriteFailure {
    WriteFailure {
        conflict: matches!(error, kube::Error::Api(status) if status.code == 409),
        message: error.to_string(),
    }
}

pub(super) fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// A live read of the machine (`None` once it is gone).
pub(super) async fn get_machine(
    context: &MachineContext,
    name: &str,
) -> Result<Option<Machine>, TerminationError> {
    context
        .namespaced::<Machine>()
        .get_opt(name)
        .await
        .map_err(|source| TerminationError::Api {
            what: "GET machine".to_owned(),
            machine: name.to_owned(),
            source,
        })
}

/// Writes `machine`'s status as it is (stages that progressed in memory), with its
/// resourceVersion as the precondition.
pub(super) async fn persist_status(
    context: &MachineContext,
    machine: &Machine,
) -> Result<Machine, WriteFailure> {
    let name = machine.metadata.name.as_deref().unwrap_or("");
    context
        .namespaced::<Machine>()
        .replace_status(name, &PostParams::default(), machine)
        .await
        .map_err(|error| write_failure(&error))
}

/// Records the plan's events on the machine.
pub(super) fn record_events(context: &MachineContext, machine: &Machine, events: &[Event]) {
    for event in events {
        context.event(
            machine,
            event.type_ == EventType::Warning,
            &event.reason,
            "Delete",
            event.message.clone(),
        );
    }
}

/// The name of the machine's class (empty when it has none).
pub(super) fn class_name(machine: &Machine) -> &str {
    machine
        .spec
        .class
        .as_ref()
        .and_then(|class| class.name.as_deref())
        .unwrap_or("")
}

/// The machine's class, validated as upstream's `ValidateMachineClass` (docs/behaviour.md#class-validation); `Err` carries the
/// retry and the reason.
pub(super) fn class_of(
    context: &MachineContext,
    machine: &Machine,
) -> Result<MachineClass, (Retry, String)> {
    let name = class_name(machine);
    let Some(class) = context.machine_classes.get(name) else {
        return Err((
            Retry::Long,
            format!(
                "machine class {name:?} of machine {:?} not found",
                machine.metadata.name.as_deref().unwrap_or("")
            ),
        ));
    };
    validate_machine_class(&class)?;
    Ok((*class).clone())
}

/// The class's Secret data (read through the shell's short-lived Secret reuse).
pub(super) async fn secret_data(
    context: &MachineContext,
    class: &MachineClass,
) -> Result<SecretData, String> {
    context
        .class_secret_data(class)
        .await
        .map_err(|error| error.to_string())
}

/// The plans' view of a driver error.
pub(super) fn driver_error(error: MachineError) -> DriverError {
    DriverError::Coded(error)
}

/// Records a driver call in the metrics.
pub(super) fn driver_metric(
    context: &MachineContext,
    class: &MachineClass,
    method: &str,
    code: &str,
    started: Instant,
) {
    context.metrics.driver_call(
        class.provider.as_deref().unwrap_or(""),
        method,
        code,
        started.elapsed(),
    );
}

/// Sets label `node=<node>` on the machine (merge patch; labels of others are kept).
pub(super) async fn set_node_label(
    context: &MachineContext,
    machine: &Machine,
    node: &str,
) -> Result<Machine, WriteFailure> {
    let name = machine.metadata.name.as_deref().unwrap_or("");
    let patch = serde_json::json!({"metadata": {"labels": {mcm_api::keys::label::NODE: node}}});
    context
        .namespaced::<Machine>()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|error| write_failure(&error))
}

/// Removes the MCM finalizer from the machine (full update with the read resourceVersion).
pub(super) async fn remove_machine_finalizer(
    context: &MachineContext,
    machine: &Machine,
) -> Result<(), WriteFailure> {
    let name = machine.metadata.name.as_deref().unwrap_or("");
    let Some(finalizers) = finalizers::list(
        &machine.metadata,
        finalizer::MACHINE_CONTROLLER_MANAGER,
        false,
    ) else {
        return Ok(());
    };
    let mut updated = machine.clone();
    updated.metadata.finalizers = Some(finalizers);
    match context
        .namespaced::<Machine>()
        .replace(name, &PostParams::default(), &updated)
        .await
    {
        Ok(_) => Ok(()),
        Err(error) if is_not_found(&error) => Ok(()),
        Err(error) => Err(write_failure(&error)),
    }
}

/// Live read of a Node in the target cluster.
pub(super) async fn get_node(
    context: &MachineContext,
    name: &str,
) -> Result<Option<Node>, kube::Error> {
    match &context.target {
        Some(target) => Api::<Node>::all(target.clone()).get_opt(name).await,
        None => Ok(None),
    }
}

fn nodes(context: &MachineContext) -> Option<Api<Node>> {
    context.target.clone().map(Api::all)
}

/// Puts the `Terminating` condition into the node's status (strategic merge by condition type, so
/// the kubelet's other conditions stay).
pub(super) async fn set_node_condition(
    context: &MachineContext,
    node: &str,
    condition: &NodeCondition,
) -> Result<(), String> {
    let Some(api) = nodes(context) else {
        return Ok(());
    };
    let patch = serde_json::json!({"status": {"conditions": [condition]}});
    match api
        .patch_status(node, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(error) if is_not_found(&error) => Ok(()),
        Err(error) => Err(error.to_string()),
    }
}

/// Cordons the node.
pub(super) async fn cordon(context: &MachineContext, node: &str) -> Result<(), String> {
    let Some(api) = nodes(context) else {
        return Ok(());
    };
    let patch = serde_json::json!({"spec": {"unschedulable": true}});
    match api
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(error) if is_not_found(&error) => Ok(()),
        Err(error) => Err(error.to_string()),
    }
}

/// Result of removing the node finalizer and deleting the node.
pub(super) async fn delete_node(
    context: &MachineContext,
    node: &str,
) -> mcm_decisions::machine::deletion::NodeDeletionResult {
    use mcm_decisions::machine::deletion::NodeDeletionResult;
    let Some(api) = nodes(context) else {
        return NodeDeletionResult::NotFound;
    };
    match api.get_opt(node).await {
        Ok(Some(found)) => {
            // The patch carries the resourceVersion: a concurrent finalizer change fails it
            // (409) instead of being lost.
            if let Some(patch) = finalizers::ensure_absent(&found.metadata, finalizer::NODE) {
                let result = api
                    .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(|_| ());
                match result {
                    Ok(()) => {}
                    Err(error) if is_not_found(&error) => return NodeDeletionResult::NotFound,
                    Err(error) => {
                        return NodeDeletionResult::FinalizerRemovalFailed(error.to_string());
                    }
                }
            }
        }
        Ok(None) => return NodeDeletionResult::NotFound,
        Err(error) => return NodeDeletionResult::FinalizerRemovalFailed(error.to_string()),
    }
    match api.delete(node, &DeleteParams::default()).await {
        Ok(_) => NodeDeletionResult::Deleted,
        Err(error) if is_not_found(&error) => NodeDeletionResult::NotFound,
        Err(error) => NodeDeletionResult::DeleteFailed(error.to_string()),
    }
}

/// Names of the live (not deleting) VolumeAttachments of `node`.
pub(super) async fn live_volume_attachments(
    context: &MachineContext,
    node: &str,
) -> Result<Vec<String>, kube::Error> {
    let Some(target) = &context.target else {
        return Ok(Vec::new());
    };
    let api: Api<VolumeAttachment> = Api::all(target.clone());
    let list = api.list(&ListParams::default()).await?;
    Ok(list
        .items
        .into_iter()
        .filter(|attachment| {
            attachment.spec.node_name == node && attachment.metadata.deletion_timestamp.is_none()
        })
        .filter_map(|attachment| attachment.metadata.name)
        .collect())
}

/// Deletes VolumeAttachments (errors are only logged, as upstream; the stage repeats).
pub(super) async fn delete_volume_attachments(context: &MachineContext, names: &[String]) {
    let Some(target) = &context.target else {
        return;
    };
    let api: Api<VolumeAttachment> = Api::all(target.clone());
    for name in names {
        if let Err(error) = api.delete(name, &DeleteParams::default()).await
            && !is_not_found(&error)
        {
            tracing::warn!(volume_attachment = name, %error, "deleting a VolumeAttachment failed");
        }
    }
}
