//! The termination shell: deleting machines (docs/behaviour.md#deletion-flow) in its OWN bounded worker pool (queue
//! `machinetermination`, `--concurrent-syncs` workers), so draining machines never delay
//! creations (head-of-line blocking, docs/architecture.md#no-head-of-line-blocking).
//!
//! Every pass re-reads the machine live, validates its class (a missing or unfinalized class
//! blocks deletion, as upstream), and runs the stage state machine of
//! [`mcm_decisions::machine::deletion`]: Terminating → GetVMStatus → drain → (force:
//! VolumeAttachments) → DeleteMachine → Node deletion → finalizer removal. Each stage's result is
//! written to `status.lastOperation` before the next stage runs, so a crash resumes where it
//! stopped and the VM deletion intent («Initiate VM deletion») is on the Machine before
//! DeleteMachine is called. Unlike upstream, a pass continues with the next stage right away after
//! a successful step (using the object the API returned) instead of waiting 5 s per stage.
//!
//! The drain deadline comes from the deletionTimestamp, every drain pass is bounded by the time
//! left until it, and the next pass is due no later than the deadline, so the deadline is honoured
//! within one pass even when the API server is slow.
//!
//! A machine whose CreateMachine/InitializeMachine is running (`MachineContext::in_creation_flow`) is
//! not touched: the pass is retried after ShortRetry (upstream: MediumRetry), so a VM created
//! after the deletion started is still deleted and never leaks.
//!
//! Nothing is done while the API-server safety check has frozen the Machine controller.

mod stages;
mod state;
mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Node;
use mcm_api::v1alpha1::{Machine, MachineClass};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use self::state::Termination;
use crate::machine::context::MachineContext;
use crate::platform::BoxError;
use crate::platform::caches::CacheGate;
use crate::platform::index;
use crate::platform::informer::Change;
use crate::platform::queue::{Action, Failed, Pass, WorkQueue};
use mcm_decisions::machine::deletion::{self, DeletionStage};
use mcm_decisions::machine::routing::{self, MachineQueue};

/// Name of the termination work queue (metrics, logs).
pub const QUEUE: &str = "machinetermination";

/// Runs the termination workers until `shutdown`.
pub fn run(
    context: Arc<MachineContext>,
    shutdown: CancellationToken,
) -> BoxFuture<'static, Result<(), BoxError>> {
    Box::pin(async move {
        let queue = WorkQueue::new(QUEUE, Some(context.metrics.clone()));
        let termination = Arc::new(Termination {
            context: Arc::clone(&context),
            drains: Mutex::new(HashMap::new()),
        });
        subscribe(&context, &queue, &shutdown);
        let workers = context.config.concurrent_syncs.max(1);
        let worker = Arc::clone(&termination);
        let gate = CacheGate::new(QUEUE)
            .with(&context.machines)
            .with(&context.machine_classes)
            .with(&context.nodes);
        queue
            .run_gated(workers, shutdown, Some(gate), move |key| {
                let worker = Arc::clone(&worker);
                async move { worker.reconcile(&key).await }
            })
            .await;
        Ok(())
    })
}

fn subscribe(context: &Arc<MachineContext>, queue: &WorkQueue, shutdown: &CancellationToken) {
    let machines_queue = queue.clone();
    context.machines.subscribe(move |change: &Change<Machine>| {
        // Routed as if no creation were running: a deleting machine whose CreateMachine is still
        // in flight must come back here once it ends, and the pass itself waits for that
        // (`MachineContext::in_creation_flow`, ShortRetry). Handing it to the Machine queue instead would
        // lose the deletion until the next resync.
        let route = match change {
            Change::Added(machine) => Some(routing::route_machine_add(machine, false)),
            Change::Updated { old, new } => {
                // Beyond upstream's generation rule: a label change of a deleting machine (a
                // user adding `force-deletion` to cut a stuck drain short) is acted on at once.
                // Status changes are not: our own status writes would re-run a stage before its
                // retry period (e.g. DeleteMachine right after an aborted one).
                routing::route_machine_update(old, new, false, false).or_else(|| {
                    (new.metadata.deletion_timestamp.is_some()
                        && old.metadata.labels != new.metadata.labels)
                        .then_some(MachineQueue::Termination)
                })
            }
            Change::Deleted(_) => Some(routing::route_machine_delete()),
        };
        if route == Some(MachineQueue::Termination)
            && let Some(name) = change.object().metadata.name.as_deref()
        {
            machines_queue.add(name);
        }
    });
    // A class created or fixed resumes the deletions it blocked (a missing or unusable class
    // makes a deletion wait LongRetry = 10 min) at once, as upstream requeues every machine of a
    // changed class. Live machines of the class are the Machine shell's business.
    let class_queue = queue.clone();
    let class_machines = context.machines.clone();
    context
        .machine_classes
        .subscribe(move |change: &Change<MachineClass>| {
            if let Change::Deleted(_) = change {
                return;
            }
            let Some(class_name) = change.object().metadata.name.as_deref() else {
                return;
            };
            let users = class_machines.filter(|machine| {
                routing::class_key_for_machine(machine).as_deref() == Some(class_name)
            });
            for (name, route) in
                routing::route_class_change(class_name, users.iter().map(|machine| &**machine))
            {
                if route == MachineQueue::Termination {
                    class_queue.add(name);
                }
            }
        });
    // A node whose attached volumes changed (a drained pod's volume detached) or that is gone
    // wakes the machine draining it. Other node updates (heartbeats, our own cordon) must not:
    // they would defeat the retry periods of the other stages (e.g. LongRetry after an aborted
    // DeleteMachine). The handler only forwards the node name: looking machines up under the
    // node informer's lock could deadlock against a machine handler reading nodes.
    let (sender, mut receiver) = mpsc::unbounded_channel::<String>();
    context.nodes.subscribe(move |change: &Change<Node>| {
        let relevant = match change {
            Change::Added(_) => false,
            Change::Deleted(_) => true,
            Change::Updated { old, new } => volumes_attached(old) != volumes_attached(new),
        };
        if relevant && let Some(name) = change.object().metadata.name.as_deref() {
            let _ = sender.send(name.to_owned());
        }
    });
    let context = Arc::clone(context);
    let queue = queue.clone();
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        loop {
            let node = tokio::select! {
                () = shutdown.cancelled() => return,
                node = receiver.recv() => match node {
                    Some(node) => node,
                    None => return,
                },
            };
            let on_node = index::lookup(
                &context.machines_by_node,
                &context.machines,
                &node,
                Machine::node_name,
            );
            for machine in on_node.into_iter().filter(|machine| {
                machine.metadata.deletion_timestamp.is_some()
                    && deletion::deletion_stage(machine, false) == DeletionStage::Drain
            }) {
                if let Some(name) = machine.metadata.name.as_deref() {
                    queue.add(name);
                }
            }
        }
    });
}

fn volumes_attached(node: &Node) -> Option<&Vec<k8s_openapi::api::core::v1::AttachedVolume>> {
    node.status
        .as_ref()
        .and_then(|status| status.volumes_attached.as_ref())
}

impl Termination {
    async fn reconcile(&self, key: &str) -> Pass {
        if self.context.machine_controller_frozen() {
            tracing::debug!(
                machine = key,
                "machine controller frozen; termination waits"
            );
            return Ok(Action::Requeue(mcm_decisions::vocabulary::Retry::Short));
        }
        match stages::run_pass(self, key).await {
            Ok(action) => Ok(action),
            Err(error) => {
                tracing::warn!(machine = key, %error, "termination pass failed");
                Err(Failed)
            }
        }
    }
}
