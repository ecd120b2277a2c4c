//! API reads and writes of the machine shells, all failing with the shells' one [`ApiError`].
//! Updates carry the resourceVersion of the object they were computed from, so a concurrent change
//! answers 409 (the caller requeues after ConflictRetry) instead of being overwritten. Shared by
//! the Machine controller and the termination shell; the termination flow's own writes (patches
//! that tolerate a gone object, Node and VolumeAttachment deletion) are at the end.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Taint};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use mcm_api::keys::finalizer;
use mcm_api::v1alpha1::{Machine, MachineClass};

use crate::machine::context::MachineContext;
use crate::platform::error::ApiError;
use crate::platform::{finalizers, node_cache};
use mcm_decisions::machine::creation::SecretData;
use mcm_decisions::machine::deletion::{NodeDeletionResult, deletion_stage};
use mcm_decisions::machine::waiting::{WaitingOnly, status_to_send, waiting_only};
use mcm_decisions::vocabulary::{StatusWrite, name_of, set_entries};

fn api_error(
    action: &'static str,
    kind: &'static str,
    name: &str,
) -> impl FnOnce(kube::Error) -> ApiError {
    let name = name.to_owned();
    move |source| ApiError::Api {
        action,
        kind,
        name,
        source,
    }
}

/// `Update` of a Machine (metadata and spec) with its resourceVersion; returns the stored object.
pub(crate) async fn replace_machine(
    context: &MachineContext,
    machine: &Machine,
) -> Result<Machine, ApiError> {
    let name = name_of(machine);
    context
        .namespaced::<Machine>()
        .replace(name, &PostParams::default(), machine)
        .await
        .map_err(api_error("update", "Machine", name))
}

/// `UpdateStatus` of a Machine with `write` applied to its status, complete as
/// [`status_to_send`] decides it from the pass's `now`; returns the stored object. The one status write of both machine shells: it skips a write its plan marked
/// skippable when the result is "similar" (docs/behaviour.md#machine-reconcile), but never one
/// that changes the deletion stage, so a similar-looking text can never stall the deletion flow.
pub(crate) async fn write_status(
    context: &MachineContext,
    machine: &Machine,
    write: &StatusWrite,
    now: Timestamp,
) -> Result<Machine, ApiError> {
    let name = name_of(machine);
    let updated = status_to_send(
        machine,
        write,
        &context.config.machine,
        context.machine_controller_frozen(),
        now,
    );
    if write.is_redundant(machine, now)
        && deletion_stage(machine, false) == deletion_stage(&updated, false)
    {
        return Ok(machine.clone());
    }
    let stored = context
        .namespaced::<Machine>()
        .replace_status(name, &PostParams::default(), &updated)
        .await
        .map_err(api_error("update status of", "Machine", name))?;
    tracing::debug!(
        machine = name,
        phase = ?write.current_status.phase,
        description = write.last_operation.description.as_deref().unwrap_or(""),
        "machine status written"
    );
    Ok(stored)
}

/// Sets or removes (`None`) Machine annotations; returns the machine unchanged when nothing
/// changes.
pub(crate) async fn set_machine_annotations(
    context: &MachineContext,
    machine: &Machine,
    changes: &BTreeMap<String, Option<String>>,
) -> Result<Machine, ApiError> {
    let mut updated = machine.clone();
    if !set_entries(&mut updated.metadata.annotations, changes) {
        return Ok(machine.clone());
    }
    replace_machine(context, &updated).await
}

/// Like [`set_machine_annotations`], but a conflicting write is retried on the Machine read live
/// (a few times): for a record of something already done, such as the providerSpec a VM was just
/// updated to, which must not be lost to a concurrent writer of the object.
pub(crate) async fn set_machine_annotations_reread_on_conflict(
    context: &MachineContext,
    machine: &Machine,
    changes: &BTreeMap<String, Option<String>>,
) -> Result<Machine, ApiError> {
    let name = name_of(machine).to_owned();
    let mut current = machine.clone();
    let mut attempt = 0;
    loop {
        match set_machine_annotations(context, &current, changes).await {
            Err(error) if error.is_conflict() && attempt < 4 => {
                attempt += 1;
                current = context
                    .namespaced::<Machine>()
                    .get(&name)
                    .await
                    .map_err(api_error("get", "Machine", &name))?;
            }
            result => return result,
        }
    }
}

/// The merged data of the class's `secretRef` and `credentialsSecretRef` (the latter wins), read
/// from the control cluster on demand (Secrets are not cached). A missing Secret counts as empty,
/// as upstream.
pub(crate) async fn class_secret_data(
    context: &MachineContext,
    class: &MachineClass,
) -> Result<SecretData, ApiError> {
    context
        .class_secret_data(class)
        .await
        .map_err(|error| api_error("get", "Secret", &error.name)(error.source))
}

/// The target cluster's Nodes API.
pub(crate) fn nodes_api(context: &MachineContext) -> Result<Api<Node>, ApiError> {
    context
        .target
        .clone()
        .map(Api::all)
        .ok_or(ApiError::NoTarget {
            what: "a Node write",
        })
}

/// `Update` of a Node with its resourceVersion.
pub(crate) async fn replace_node(context: &MachineContext, node: &Node) -> Result<Node, ApiError> {
    let name = node.metadata.name.clone().unwrap_or_default();
    nodes_api(context)?
        .replace(&name, &PostParams::default(), node)
        .await
        .map_err(api_error("update", "Node", &name))
}

/// Where the Node a status write starts from was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NodeCopy {
    /// From the Node cache, which leaves out the status fields no controller reads
    /// (`platform::node_cache`).
    Cached,
    /// From the API server (a GET, or the answer to a write): complete.
    Live,
}

/// `UpdateStatus` of a Node with its resourceVersion. A cached Node lacks the status fields no
/// controller reads; they are taken from a live read first, so the update does not erase them.
/// A live Node newer than `node` makes the update conflict, as it would have without the read.
pub(crate) async fn replace_node_status(
    context: &MachineContext,
    node: &Node,
    copy: NodeCopy,
) -> Result<Node, ApiError> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let api = nodes_api(context)?;
    let mut outgoing = node.clone();
    if copy == NodeCopy::Cached {
        let live = api
            .get(&name)
            .await
            .map_err(api_error("get", "Node", &name))?;
        node_cache::restore_pruned_status(&mut outgoing, &live);
    }
    api.replace_status(&name, &PostParams::default(), &outgoing)
        .await
        .map_err(api_error("update status of", "Node", &name))
}

/// Sets or removes Node annotations (Update; no-op when nothing changes).
pub(crate) async fn set_node_annotations(
    context: &MachineContext,
    node: &Node,
    changes: &BTreeMap<String, Option<String>>,
) -> Result<Node, ApiError> {
    let mut updated = node.clone();
    if !set_entries(&mut updated.metadata.annotations, changes) {
        return Ok(node.clone());
    }
    replace_node(context, &updated).await
}

/// Removes the taints with these (key, effect) pairs (Update; no-op when none is present).
pub(crate) async fn remove_node_taints(
    context: &MachineContext,
    node: &Node,
    remove: &[(String, String)],
) -> Result<Node, ApiError> {
    let mut updated = node.clone();
    let Some(taints) = updated.spec.as_mut().and_then(|spec| spec.taints.as_mut()) else {
        return Ok(node.clone());
    };
    let before = taints.len();
    taints.retain(|taint| {
        !remove
            .iter()
            .any(|(key, effect)| &taint.key == key && &taint.effect == effect)
    });
    if taints.len() == before {
        return Ok(node.clone());
    }
    replace_node(context, &updated).await
}

/// Adds `taint` unless a taint with its key and effect is present.
pub(crate) async fn add_node_taint(
    context: &MachineContext,
    node: &Node,
    taint: &Taint,
) -> Result<Node, ApiError> {
    let mut updated = node.clone();
    let taints = updated
        .spec
        .get_or_insert_with(Default::default)
        .taints
        .get_or_insert_with(Vec::new);
    if taints
        .iter()
        .any(|t| t.key == taint.key && t.effect == taint.effect)
    {
        return Ok(node.clone());
    }
    taints.push(taint.clone());
    replace_node(context, &updated).await
}

/// Sets the node condition of `condition.type_` (UpdateStatus).
pub(crate) async fn set_node_condition(
    context: &MachineContext,
    node: &Node,
    copy: NodeCopy,
    condition: &NodeCondition,
) -> Result<Node, ApiError> {
    let mut updated = node.clone();
    let conditions = updated
        .status
        .get_or_insert_with(Default::default)
        .conditions
        .get_or_insert_with(Vec::new);
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        Some(existing) if existing == condition => return Ok(node.clone()),
        Some(existing) => *existing = condition.clone(),
        None => conditions.push(condition.clone()),
    }
    replace_node_status(context, &updated, copy).await
}

/// Cordons the node (`spec.unschedulable = true`) unless it is; the stored node when it wrote.
pub(crate) async fn cordon_node(
    context: &MachineContext,
    node: &Node,
) -> Result<Option<Node>, ApiError> {
    if node
        .spec
        .as_ref()
        .and_then(|spec| spec.unschedulable)
        .unwrap_or(false)
    {
        return Ok(None);
    }
    let mut updated = node.clone();
    updated
        .spec
        .get_or_insert_with(Default::default)
        .unschedulable = Some(true);
    replace_node(context, &updated).await.map(Some)
}

// The termination flow's writes. Unlike the Node writes above (Update with the read
// resourceVersion, for the Machine controller's read-modify-write of a Node it keeps), these patch
// without a resourceVersion and count a gone object as done: a deleting machine's Node may vanish
// at any time, and the next pass reads afresh.

/// A live read of the machine (`None` once it is gone).
pub(crate) async fn get_machine(
    context: &MachineContext,
    name: &str,
) -> Result<Option<Machine>, ApiError> {
    context
        .namespaced::<Machine>()
        .get_opt(name)
        .await
        .map_err(api_error("get", "Machine", name))
}

/// `UpdateStatus` of `machine` as it is (stages that progressed in memory), with its
/// resourceVersion as the precondition.
pub(crate) async fn replace_machine_status(
    context: &MachineContext,
    machine: &Machine,
) -> Result<Machine, ApiError> {
    let name = name_of(machine);
    context
        .namespaced::<Machine>()
        .replace_status(name, &PostParams::default(), machine)
        .await
        .map_err(api_error("update status of", "Machine", name))
}

/// Writes the machine's waiting condition alone, for a pass that writes no other status (see
/// [`WaitingOnly`]): `Ok(None)` when nothing but its timestamps would change, so nothing is sent.
pub(crate) async fn write_waiting(
    context: &MachineContext,
    machine: &Machine,
    why: WaitingOnly<'_>,
    now: Timestamp,
) -> Result<Option<Machine>, ApiError> {
    match waiting_only(machine, &context.config.machine, why, now) {
        Some(updated) => replace_machine_status(context, &updated).await.map(Some),
        None => Ok(None),
    }
}

/// Sets label `node=<node>` on the machine (merge patch; labels of others are kept).
pub(crate) async fn set_machine_node_label(
    context: &MachineContext,
    machine: &Machine,
    node: &str,
) -> Result<Machine, ApiError> {
    let name = name_of(machine);
    let patch = serde_json::json!({"metadata": {"labels": {mcm_api::keys::label::NODE: node}}});
    context
        .namespaced::<Machine>()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(api_error("patch", "Machine", name))
}

/// Removes the MCM finalizer from the machine (Update with the read resourceVersion; no write
/// when it is already gone, and a gone machine counts as done).
pub(crate) async fn remove_machine_finalizer(
    context: &MachineContext,
    machine: &Machine,
) -> Result<(), ApiError> {
    let Some(finalizers) = finalizers::list(
        &machine.metadata,
        finalizer::MACHINE_CONTROLLER_MANAGER,
        false,
    ) else {
        return Ok(());
    };
    let mut updated = machine.clone();
    updated.metadata.finalizers = Some(finalizers);
    match replace_machine(context, &updated).await {
        Err(error) if error.is_not_found() => Ok(()),
        result => result.map(|_| ()),
    }
}

/// Live read of a Node in the target cluster (`None` when it is gone or there is no target).
pub(crate) async fn get_node(
    context: &MachineContext,
    name: &str,
) -> Result<Option<Node>, ApiError> {
    match &context.target {
        Some(target) => Api::<Node>::all(target.clone())
            .get_opt(name)
            .await
            .map_err(api_error("get", "Node", name)),
        None => Ok(None),
    }
}

/// Puts `condition` into the node's status by a strategic merge patch keyed by condition type, so
/// the kubelet's other conditions stay; a gone node (or no target) counts as done.
pub(crate) async fn patch_node_condition(
    context: &MachineContext,
    node: &str,
    condition: &NodeCondition,
) -> Result<(), ApiError> {
    let Some(target) = &context.target else {
        return Ok(());
    };
    let patch = serde_json::json!({"status": {"conditions": [condition]}});
    match Api::<Node>::all(target.clone())
        .patch_status(node, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(error) if is_not_found(&error) => Ok(()),
        Err(error) => Err(ApiError::api("patch status of", "Node", node, error)),
    }
}

/// Cordons the node by a merge patch of `spec.unschedulable`; a gone node (or no target) counts
/// as done.
pub(crate) async fn patch_cordon(context: &MachineContext, node: &str) -> Result<(), ApiError> {
    let Some(target) = &context.target else {
        return Ok(());
    };
    let patch = serde_json::json!({"spec": {"unschedulable": true}});
    match Api::<Node>::all(target.clone())
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(error) if is_not_found(&error) => Ok(()),
        Err(error) => Err(ApiError::api("patch", "Node", node, error)),
    }
}

/// Removes the Node finalizer and deletes the node. The failures carry the client's own text, as
/// upstream puts it into the machine's lastOperation.
pub(crate) async fn delete_node(context: &MachineContext, node: &str) -> NodeDeletionResult {
    let Some(target) = &context.target else {
        return NodeDeletionResult::NotFound;
    };
    let api = Api::<Node>::all(target.clone());
    match api.get_opt(node).await {
        Ok(Some(found)) => {
            // The patch carries the resourceVersion: a concurrent finalizer change fails it
            // (409) instead of being lost.
            if let Some(patch) = finalizers::ensure_absent(&found.metadata, finalizer::NODE) {
                match api
                    .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => {}
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

/// Names of the live (not deleting) VolumeAttachments of `node` (none without a target).
pub(crate) async fn live_volume_attachments(
    context: &MachineContext,
    node: &str,
) -> Result<Vec<String>, ApiError> {
    let Some(target) = &context.target else {
        return Ok(Vec::new());
    };
    let list = Api::<VolumeAttachment>::all(target.clone())
        .list(&ListParams::default())
        .await
        .map_err(api_error("list", "VolumeAttachment", ""))?;
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
pub(crate) async fn delete_volume_attachments(context: &MachineContext, names: &[String]) {
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

fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}
