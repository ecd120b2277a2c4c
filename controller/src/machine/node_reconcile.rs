//! The Node controller shell (docs/behaviour.md#node-controller, docs/behaviour.md#machine-safety not-managed nodes): queue `node`.
//!
//! - A Node backed by a Machine (label `node=<node>` on exactly one machine) gets finalizer
//!   `node.machine.sapcloud.io/machine-controller` while the machine is not being deleted (JSON
//!   merge patch of the sorted finalizer list, conditional on the read resourceVersion).
//! - A Node being deleted, or deleted, deletes its Machine (if not already deleting): the
//!   MachineSet then creates a replacement.
//! - Nodes annotated `node.machine.sapcloud.io/not-managed-by-mcm` are ignored.
//!
//! Decisions come from [`mcm_decisions::machine::routing`]; node events are forwarded from the informer to a
//! task (the informer handler runs under its lock and must not read the machine cache).

use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use mcm_api::v1alpha1::Machine;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::machine::context::NodeContext;
use crate::platform::BoxError;
use crate::platform::caches::CacheGate;
use crate::platform::finalizers;
use crate::platform::index;
use crate::platform::informer::Change;
use crate::platform::queue::{Action, Failed, WorkQueue};
use mcm_decisions::machine::routing::{
    NodeControllerAction, NodeRoute, plan_node_controller, route_node_add, route_node_delete,
    route_node_update,
};
use mcm_decisions::vocabulary::Retry;

/// Name of the queue.
pub const QUEUE: &str = "node";

/// What can go wrong in one pass (logged; the key is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A Kubernetes API call failed.
    #[error("{what} for node {node:?} failed: {source}")]
    Api {
        /// The call.
        what: &'static str,
        /// The node.
        node: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Several machines claim the node.
    #[error("node {node:?}: {reason}")]
    Ambiguous {
        /// The node.
        node: String,
        /// Which machines.
        reason: String,
    },
}

enum NodeEvent {
    Added(Arc<Node>),
    Updated(Arc<Node>, Arc<Node>),
    Deleted(Arc<Node>),
}

fn machines_of(context: &NodeContext, node: &str) -> Vec<Machine> {
    index::lookup(
        &context.machines_by_node,
        &context.machines,
        node,
        Machine::node_name,
    )
    .into_iter()
    .map(|machine| (*machine).clone())
    .collect()
}

/// Runs the Node controller until `shutdown`.
pub fn run(
    context: Arc<NodeContext>,
    shutdown: CancellationToken,
) -> BoxFuture<'static, Result<(), BoxError>> {
    Box::pin(async move {
        let queue = WorkQueue::new(QUEUE, Some(context.metrics.clone()));
        if context.target.is_none() {
            shutdown.cancelled().await;
            return Ok(());
        }
        let (sender, receiver) = mpsc::unbounded_channel();
        context.nodes.subscribe(move |change: &Change<Node>| {
            let event = match change {
                Change::Added(node) => NodeEvent::Added(Arc::clone(node)),
                Change::Updated { old, new } => {
                    NodeEvent::Updated(Arc::clone(old), Arc::clone(new))
                }
                Change::Deleted(node) => NodeEvent::Deleted(Arc::clone(node)),
            };
            let _ = sender.send(event);
        });
        tokio::spawn(route_events(
            Arc::clone(&context),
            queue.clone(),
            receiver,
            shutdown.clone(),
        ));
        let workers = context.config.concurrent_syncs.max(1);
        let worker_context = Arc::clone(&context);
        let gate = CacheGate::new(QUEUE)
            .with(&context.machines)
            .with(&context.nodes);
        queue
            .run_gated(workers, shutdown, Some(gate), move |key| {
                let context = Arc::clone(&worker_context);
                async move {
                    reconcile(&context, &key).await.map_err(|error| {
                        tracing::warn!(node = key, %error, "node reconcile failed");
                        Failed
                    })
                }
            })
            .await;
        Ok(())
    })
}

async fn route_events(
    context: Arc<NodeContext>,
    queue: WorkQueue,
    mut receiver: mpsc::UnboundedReceiver<NodeEvent>,
    shutdown: CancellationToken,
) {
    loop {
        let event = tokio::select! {
            () = shutdown.cancelled() => return,
            event = receiver.recv() => match event {
                Some(event) => event,
                None => return,
            },
        };
        let (node, routes) = match &event {
            NodeEvent::Added(node) => (node, route_node_add(node)),
            NodeEvent::Updated(old, new) => {
                let machines = machines_of(&context, new.metadata.name.as_deref().unwrap_or(""));
                (new, route_node_update(old, new, &machines))
            }
            NodeEvent::Deleted(node) => {
                let machines = machines_of(&context, node.metadata.name.as_deref().unwrap_or(""));
                (node, route_node_delete(node, &machines))
            }
        };
        let node_name = node.metadata.name.clone().unwrap_or_default();
        for route in routes {
            match route {
                NodeRoute::EnqueueNode { delay: None } => queue.add(node_name.clone()),
                NodeRoute::EnqueueNode { delay: Some(retry) } => {
                    queue.add(node_name.clone());
                    queue.add_after(node_name.clone(), retry.delay());
                }
                // The Machine controller watches nodes itself.
                NodeRoute::EnqueueMachine(_) => {}
                NodeRoute::DeleteMachine(machine) => {
                    if let Err(error) = delete_machine(&context, &node_name, &machine).await {
                        tracing::warn!(node = node_name, machine, %error, "deleting the machine of a deleted node failed");
                        queue.add_after(node_name.clone(), Retry::Short.delay());
                    }
                }
            }
        }
    }
}

async fn delete_machine(context: &NodeContext, node: &str, machine: &str) -> Result<(), NodeError> {
    let api = context.namespaced::<Machine>();
    match api.delete(machine, &DeleteParams::default()).await {
        Ok(_) => {
            tracing::info!(node, machine, "node deleted: deleting its machine");
            if let Some(object) = context.machines.get(machine) {
                context.event(
                    &*object,
                    false,
                    "NodeDeleted",
                    "Delete",
                    format!("Node {node} was deleted; deleting machine {machine}"),
                );
            }
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(NodeError::Api {
            what: "DELETE machine",
            node: node.to_owned(),
            source,
        }),
    }
}

async fn reconcile(context: &NodeContext, name: &str) -> Result<Action, NodeError> {
    let Some(target) = context.target.clone() else {
        return Ok(Action::AwaitChange);
    };
    let node = context.nodes.get(name);
    let machines = machines_of(context, name);
    match plan_node_controller(node.as_deref(), &machines) {
        NodeControllerAction::Nothing => Ok(Action::AwaitChange),
        NodeControllerAction::Error(reason) => Err(NodeError::Ambiguous {
            node: name.to_owned(),
            reason,
        }),
        NodeControllerAction::DeleteMachine(machine) => {
            delete_machine(context, name, &machine).await?;
            Ok(Action::AwaitChange)
        }
        NodeControllerAction::SetFinalizers(finalizers) => {
            let api: Api<Node> = Api::all(target);
            let resource_version = node
                .as_ref()
                .and_then(|n| n.metadata.resource_version.as_deref());
            let patch = finalizers::patch_of(resource_version, &finalizers);
            match api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    tracing::debug!(node = name, "node finalizer added");
                    Ok(Action::AwaitChange)
                }
                // The cache was stale: try again once it has caught up.
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    Ok(Action::Requeue(Retry::Conflict))
                }
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(Action::AwaitChange),
                Err(source) => Err(NodeError::Api {
                    what: "PATCH finalizers",
                    node: name.to_owned(),
                    source,
                }),
            }
        }
    }
}
