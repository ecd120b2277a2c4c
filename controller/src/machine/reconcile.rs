//! The Machine controller shell (creation, health, node sync, hot update, preservation).
//!
//! [`run`] subscribes to the machine, node and class informers, routes changes with
//! [`plan::routing`] (only keys routed to [`MachineQueue::Machine`] are handled here; deletions
//! belong to the termination shell in [`crate::machine::terminate`]) and runs one work queue of
//! machine names with `--concurrent-syncs` workers. Each pass reads the caches, runs the plans in
//! the order of [`plan::order::plan_reconcile_order`] and executes what they return; every pass
//! ends with a requeue after the plan's retry period (the upstream periodic resync).
//!
//! Its writes are the machine shells' [`crate::machine::writes`]. Submodules: [`creation`],
//! [`health`], [`node_sync`], [`hot_update`], [`in_place`] (docs/behaviour.md#in-place-machine),
//! [`preservation`], [`driver`] (timed driver calls) and [`permits`] (the per-MachineDeployment
//! failure permit).

pub mod creation;
pub mod driver;
pub mod health;
pub mod hot_update;
pub mod in_place;
pub mod node_sync;
pub mod permits;
pub mod preservation;

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use mcm_api::keys::finalizer;
use mcm_api::v1alpha1::{Machine, MachineClass};
use tokio_util::sync::CancellationToken;

use self::permits::Permits;
use crate::drain::reconcile::NodeDrainState;
use crate::machine::context::MachineContext;
use crate::machine::writes;
use crate::platform::BoxError;
use crate::platform::caches::CacheGate;
use crate::platform::error::ApiError;
use crate::platform::finalizers;
use crate::platform::index::{self, Index};
use crate::platform::informer::Change;
use crate::platform::metrics::MachineSample;
use crate::platform::overlay::Overlay;
use crate::platform::queue::{Action, Failed, Pass, WorkQueue};
use mcm_decisions::machine as plan;
use mcm_decisions::machine::creation::SecretData;
use mcm_decisions::machine::order::{EntryDecision, ReconcileOrder, ReconcileStep};
use mcm_decisions::machine::routing::{self, MachineQueue, NodeRoute};
use mcm_decisions::machine::waiting::WaitingOnly;
use mcm_decisions::vocabulary;
use mcm_decisions::vocabulary::{ControllerSettings, Event, Retry, name_of};

/// Name of the machine work queue (metric label, logs).
pub const QUEUE_NAME: &str = "machine";

/// The state of one running Machine controller.
pub struct MachineController {
    pub(crate) context: Arc<MachineContext>,
    pub(crate) queue: WorkQueue,
    pub(crate) settings: ControllerSettings,
    pub(crate) permits: Permits,
    /// Hot-updatable providerSpec paths (GetCapabilities, asked once).
    pub(crate) hot_paths: tokio::sync::OnceCell<Vec<String>>,
    /// (machine, class resourceVersion) pairs already told that a new class is needed.
    pub(crate) cold_change_warned: Mutex<HashSet<(String, String)>>,
    /// Drains of preserved failed machines' nodes in progress, by node name.
    pub(crate) drain_states: Mutex<HashMap<String, NodeDrainState>>,
    /// Drains of nodes selected for an in-place update in progress, by node name.
    pub(crate) in_place_drains: Mutex<HashMap<String, NodeDrainState>>,
    /// Each machine as this shell's last pass wrote it, while the cache is older (shared with
    /// the Machine cache's handler, which forgets a write once the cache shows it).
    pub(crate) written: Arc<Overlay<Machine>>,
}

/// The class of a machine and its merged secret data, read by the `ValidateClass` step.
pub(crate) struct ClassContext {
    pub(crate) class: Arc<MachineClass>,
    pub(crate) secret: SecretData,
}

/// What a reconcile step tells the pass: continue with the next step, the pass's final retry at
/// most the wish if any; or break, ending the pass with this retry.
pub(crate) type StepFlow = ControlFlow<Retry, Option<Retry>>;

/// Runs the Machine controller until `shutdown`.
pub fn run(
    context: Arc<MachineContext>,
    shutdown: CancellationToken,
) -> BoxFuture<'static, Result<(), BoxError>> {
    Box::pin(async move {
        let controller = Arc::new(MachineController {
            settings: context.config.machine.clone(),
            queue: WorkQueue::new(QUEUE_NAME, Some(context.metrics.clone())),
            permits: Permits::default(),
            hot_paths: tokio::sync::OnceCell::new(),
            cold_change_warned: Mutex::new(HashSet::new()),
            drain_states: Mutex::new(HashMap::new()),
            in_place_drains: Mutex::new(HashMap::new()),
            written: Arc::default(),
            context,
        });
        controller.subscribe();
        {
            let machines = controller.context.machines.clone();
            tokio::spawn(crate::platform::freeze::requeue_when_unfrozen(
                controller.context.frozen.clone(),
                controller.queue.clone(),
                move || {
                    machines
                        .list()
                        .iter()
                        .filter_map(|machine| machine.metadata.name.clone())
                        .collect()
                },
                shutdown.clone(),
            ));
        }
        let machines = controller.context.machines.clone();
        controller
            .context
            .metrics
            .on_scrape(Box::new(move |metrics| {
                let samples: Vec<MachineSample> = machines
                    .list()
                    .iter()
                    .map(|machine| MachineSample::from_machine(machine))
                    .collect();
                metrics.replace_machines(samples);
            }));
        let workers = controller.context.config.concurrent_syncs.max(1);
        let worker = Arc::clone(&controller);
        let gate = CacheGate::new(QUEUE_NAME)
            .with(&controller.context.machines)
            .with(&controller.context.machine_classes)
            .with(&controller.context.nodes);
        controller
            .queue
            .run_gated(workers, shutdown, Some(gate), move |key| {
                let controller = Arc::clone(&worker);
                async move { controller.process(&key).await }
            })
            .await;
        Ok(())
    })
}

impl MachineController {
    fn subscribe(self: &Arc<Self>) {
        let queue = self.queue.clone();
        // Weak: the informer (owned by the shell) keeps this handler.
        let context = Arc::downgrade(&self.context);
        // Informers call their handlers under their own lock and the Node handler reads the
        // Machine cache, so the Machine handler must not read the Node cache (lock-order
        // inversion): it asks this index of the cached Node names (a leaf lock) instead.
        let cached_nodes = Index::subscribe(&self.context.nodes, own_name);
        let written = Arc::clone(&self.written);
        self.context.machines.subscribe(move |change| {
            // Before the routing: a pass queued by this change finds the cache, not our write.
            written.cache_changed(change);
            let creating = |name: &str| {
                context
                    .upgrade()
                    .is_some_and(|context| context.in_creation_flow(name))
            };
            let route = match change {
                Change::Added(machine) => Some(routing::route_machine_add(
                    machine,
                    creating(name_of(machine)),
                )),
                Change::Updated { old, new } => {
                    let node_in_cache = new
                        .node_name()
                        .is_some_and(|node| cached_nodes.contains(node));
                    routing::route_machine_update(old, new, creating(name_of(new)), node_in_cache)
                }
                Change::Deleted(_) => None,
            };
            if route == Some(MachineQueue::Machine) {
                queue.add(name_of(change.object()));
            }
        });

        let queue = self.queue.clone();
        let machines = self.context.machines.clone();
        let machines_by_node = self.context.machines_by_node.clone();
        self.context.nodes.subscribe(move |change| {
            let node = change.object();
            let Some(node_name) = node.metadata.name.as_deref() else {
                return;
            };
            // Shared, not copied: this runs for every Node event (heartbeats included).
            let owners = index::lookup(&machines_by_node, &machines, node_name, Machine::node_name);
            let routes = match change {
                Change::Updated { old, new } => routing::route_node_update(old, new, &owners),
                // A Node appearing or vanishing matters to the health check of its machine
                // (Pending → Running, Running → Unknown) at once rather than at the next recheck.
                Change::Added(_) | Change::Deleted(_) => {
                    match routing::machine_for_node(node_name, &owners) {
                        Ok(Some(machine)) if !routing::is_not_managed(node) => {
                            vec![NodeRoute::EnqueueMachine(name_of(machine).to_owned())]
                        }
                        _ => Vec::new(),
                    }
                }
            };
            for route in routes {
                if let NodeRoute::EnqueueMachine(name) = route {
                    queue.add(name);
                }
            }
        });

        let queue = self.queue.clone();
        let machines = self.context.machines.clone();
        self.context.machine_classes.subscribe(move |change| {
            if let Change::Deleted(_) = change {
                return;
            }
            let Some(class_name) = change.object().metadata.name.clone() else {
                return;
            };
            // Deleting machines of the class are requeued by the termination shell.
            let users = machines.filter(|machine| {
                routing::class_key_for_machine(machine).as_deref() == Some(class_name.as_str())
            });
            for (name, route) in
                routing::route_class_change(&class_name, users.iter().map(|machine| &**machine))
            {
                if route == MachineQueue::Machine {
                    queue.add(&name);
                }
            }
        });
    }

    /// One pass over machine `key`.
    async fn process(&self, key: &str) -> Pass {
        // A pass queued by the event of the previous pass's first write may start before the
        // cache has that pass's last write: it starts from the write (docs/behaviour.md#stale-caches).
        let Some(machine) = self.written.newest(key, self.context.machines.get(key)) else {
            return Ok(Action::AwaitChange);
        };
        let read_version = machine.metadata.resource_version.clone();
        let machine = Machine::clone(&machine);
        let decision = plan::order::plan_entry(Some(&machine), self.context.in_creation_flow(key));
        let mut machine = match decision {
            EntryDecision::Gone | EntryDecision::RouteToTermination => {
                return Ok(Action::AwaitChange);
            }
            EntryDecision::AddFinalizer => match self.add_finalizer(&machine).await {
                Ok(updated) => updated,
                Err(error) => {
                    tracing::warn!(machine = key, %error, "cannot add the machine finalizer");
                    return to_pass(error.retry());
                }
            },
            EntryDecision::Reconcile => machine,
        };
        let retry = self.reconcile(&mut machine).await;
        // Every step replaces the machine only with the API server's answer to its write.
        if machine.metadata.resource_version != read_version {
            self.written
                .remember(machine, self.context.machines.get(key));
        }
        tracing::debug!(machine = key, ?retry, "machine pass ended");
        to_pass(retry)
    }

    async fn add_finalizer(&self, machine: &Machine) -> Result<Machine, ApiError> {
        let Some(finalizers) = finalizers::list(
            &machine.metadata,
            finalizer::MACHINE_CONTROLLER_MANAGER,
            true,
        ) else {
            return Ok(machine.clone());
        };
        let mut updated = machine.clone();
        updated.metadata.finalizers = Some(finalizers);
        let updated = writes::replace_machine(&self.context, &updated).await?;
        tracing::info!(machine = name_of(machine), "machine finalizer added");
        Ok(updated)
    }

    /// A frozen controller writes nothing else, but the machine must say why nothing happens:
    /// its waiting condition names the freeze, written only when it changes (the
    /// write may fail while the API server is in trouble; the next pass tries again).
    async fn show_freeze(&self, machine: &Machine, now: Timestamp) {
        if let Err(error) =
            writes::write_waiting(&self.context, machine, WaitingOnly::Frozen, now).await
        {
            tracing::debug!(machine = name_of(machine), %error, "cannot show the freeze on the machine");
        }
    }

    /// `reconcileClusterMachine`: runs the planned steps in order; returns the next requeue.
    async fn reconcile(&self, machine: &mut Machine) -> Retry {
        let name = name_of(machine).to_owned();
        let frozen = self.context.machine_controller_frozen();
        let steps = match plan::order::plan_reconcile_order(machine, frozen) {
            ReconcileOrder::Blocked { retry, reason } => {
                tracing::info!(machine = %name, %reason, "machine not reconciled");
                // A frozen controller is visible on its metric; an invalid machine only here.
                if frozen {
                    self.show_freeze(machine, Timestamp::now()).await;
                } else {
                    self.event(machine, &Event::warning("MachineInvalid", reason));
                }
                return retry;
            }
            ReconcileOrder::Steps(steps) => steps,
        };
        let mut retry = Retry::Long;
        let mut class: Option<ClassContext> = None;
        // The machine's node with the machine-name label this pass set, not stored yet: the
        // node-template step stores it with its own changes, in one Node update.
        let mut labelled_node = None;
        let now = Timestamp::now;
        for step in steps {
            let result = match step {
                ReconcileStep::ValidateClass => match self.validate_class(machine).await {
                    Ok(found) => {
                        class = Some(found);
                        Ok(ControlFlow::Continue(None))
                    }
                    Err(end) => Ok(ControlFlow::Break(end)),
                },
                ReconcileStep::Health => self.health(machine, now()).await,
                ReconcileStep::SyncMachineNameToNode => {
                    self.sync_machine_name(machine, &mut labelled_node).await
                }
                ReconcileStep::SyncNodeTemplates => {
                    self.sync_node_templates(machine, class.as_ref(), labelled_node.take())
                        .await
                }
                ReconcileStep::InPlaceNodeCondition => {
                    self.in_place_node_condition(machine, now()).await
                }
                ReconcileStep::InPlaceUpdate => self.in_place_update(machine, now()).await,
                ReconcileStep::HotUpdate => match class.as_ref() {
                    Some(class) => self.hot_update(machine, class, now()).await,
                    None => Ok(ControlFlow::Continue(None)),
                },
                ReconcileStep::Preservation => self.preservation(machine, now()).await,
                ReconcileStep::Creation => match class.as_ref() {
                    Some(class) => {
                        // Leaves the creation flow however the pass ends (upstream's deferred unmark).
                        let _flow = self.context.creation_flows.enter(&name);
                        self.creation(machine, class).await
                    }
                    None => Ok(ControlFlow::Break(Retry::Long)),
                },
            };
            match result {
                Ok(ControlFlow::Continue(wish)) => {
                    if let Some(wish) = wish {
                        retry = retry.min(wish);
                    }
                }
                // An earlier step's wish (e.g. the health check's re-check at a timeout, upstream
                // a separate AddAfter) still holds when a later step ends the pass.
                Ok(ControlFlow::Break(end)) => return end.min(retry),
                Err(error) => {
                    tracing::warn!(machine = %name, ?step, %error, "reconcile step failed");
                    return error.retry().min(retry);
                }
            }
        }
        retry
    }

    /// `ValidateMachineClass`: the class from the cache and its secrets read on demand.
    async fn validate_class(&self, machine: &Machine) -> Result<ClassContext, Retry> {
        let name = name_of(machine);
        let class_name = machine
            .spec
            .class
            .as_ref()
            .and_then(|class| class.name.clone())
            .unwrap_or_default();
        let Some(class) = self.context.machine_classes.get(&class_name) else {
            let (retry, event) = plan::order::machine_class_not_found(machine, &class_name);
            tracing::warn!(machine = name, class = %class_name, "machine class not found");
            self.event(machine, &event);
            return Err(retry);
        };
        if let Err((retry, message)) = plan::order::validate_machine_class(&class) {
            tracing::info!(machine = name, class = %class_name, %message, "machine class not usable yet");
            return Err(retry);
        }
        match writes::class_secret_data(&self.context, &class).await {
            Ok(secret) => Ok(ClassContext { class, secret }),
            Err(error) => {
                tracing::warn!(machine = name, class = %class_name, %error, "cannot read the class secrets");
                Err(Retry::Long)
            }
        }
    }

    /// Records `event` on the machine.
    pub(crate) fn event(&self, machine: &Machine, event: &Event) {
        self.context.event(
            machine,
            event.type_ == vocabulary::EventType::Warning,
            &event.reason,
            "Reconcile",
            event.message.clone(),
        );
    }

    /// Records every event of a plan.
    pub(crate) fn events(&self, machine: &Machine, events: &[Event]) {
        for event in events {
            self.event(machine, event);
        }
    }
}

/// A Node's own name, as the key of the index of cached Nodes.
fn own_name(node: &Node) -> Option<&str> {
    node.metadata.name.as_deref()
}

fn to_pass(retry: Retry) -> Pass {
    // A negative period takes the queue's rate-limited path rather than coming back at once.
    if retry.period().is_negative() {
        Err(Failed)
    } else {
        Ok(Action::Requeue(retry))
    }
}
