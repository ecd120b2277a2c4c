//! The MachineSet controller shell (docs/behaviour.md#machine-set): watches MachineSets and Machines, routes
//! machine changes to their MachineSets, and reconciles each MachineSet with [`plan::plan`].
//!
//! Zero overshoot rests on the [`Expectations`]: creations and deletions are recorded before
//! they are issued, every machine add/delete seen by the watch lowers them, and a pass only
//! creates or deletes when nothing it issued is still unseen. The readiness check and the cache
//! snapshot the plan works on are taken under the same lock, and watch observations are applied
//! by a routing task *after* the informer has put the object into its cache, so "satisfied"
//! always means "the snapshot contains everything issued so far".

mod execute;
mod metrics;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::future::BoxFuture;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use mcm_api::duration::Duration;
use mcm_api::keys::annotation;
use mcm_api::v1alpha1::{Machine, MachinePhase, MachineSet};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::machine_set::context::MachineSetContext;
use crate::platform::BoxError;
use crate::platform::caches::CacheGate;
use crate::platform::error::ApiError;
use crate::platform::informer::Change;
use crate::platform::queue::{Action, Failed, OWNER_SYNC_DEBOUNCE, Pass, WorkQueue};
use mcm_decisions::machine_set::claim::controller_ref;
use mcm_decisions::machine_set::expectations::Expectations;
use mcm_decisions::machine_set::plan::{self, MachineSetAction, MachineSetInput, ReplicaError};
use mcm_decisions::machine_set::routing;
use mcm_decisions::vocabulary::{Retry, go_duration};

/// Name of the work queue (and of the reconcile metrics label).
pub const QUEUE: &str = "machineset";

/// A machine change as the routing task sees it (the informer's [`Change`], owned).
enum MachineChange {
    Added(Arc<Machine>),
    Updated(Arc<Machine>, Arc<Machine>),
    Deleted(Arc<Machine>),
}

/// The controller's state shared by the informer handlers, the routing task and the workers.
pub(crate) struct Controller {
    context: Arc<MachineSetContext>,
    queue: WorkQueue,
    expectations: Mutex<Expectations>,
    /// When each set's status was last written ([`plan::status_write_delay`]).
    status_written: Mutex<HashMap<String, Timestamp>>,
}

/// Runs the MachineSet controller until `shutdown`.
pub fn run(
    context: Arc<MachineSetContext>,
    shutdown: CancellationToken,
) -> BoxFuture<'static, Result<(), BoxError>> {
    Box::pin(async move {
        let controller = Arc::new(Controller {
            queue: WorkQueue::new(QUEUE, Some(context.metrics.clone())),
            context,
            expectations: Mutex::new(Expectations::default()),
            status_written: Mutex::new(HashMap::new()),
        });
        metrics::register(&controller.context);

        let (changes, routed) = mpsc::unbounded_channel();
        // Handlers run under the informer lock: they only hand the change on.
        controller.context.machines.subscribe(move |change| {
            let owned = match change {
                Change::Added(m) => MachineChange::Added(Arc::clone(m)),
                Change::Updated { old, new } => {
                    MachineChange::Updated(Arc::clone(old), Arc::clone(new))
                }
                Change::Deleted(m) => MachineChange::Deleted(Arc::clone(m)),
            };
            // A closed channel means the controller is stopping.
            let _ = changes.send(owned);
        });
        let queue = controller.queue.clone();
        controller.context.machine_sets.subscribe(move |change| {
            if let Change::Updated { old, new } = change
                && old.metadata.resource_version.is_some()
                && old.metadata.resource_version == new.metadata.resource_version
            {
                return;
            }
            if let Some(name) = change.object().metadata.name.as_deref() {
                queue.add(name);
            }
        });

        let router = tokio::spawn(Arc::clone(&controller).route(routed, shutdown.clone()));
        let workers = controller.context.config.concurrent_syncs.max(1);
        let worker = Arc::clone(&controller);
        let gate = CacheGate::new(QUEUE)
            .with(&controller.context.machines)
            .with(&controller.context.machine_sets)
            .with(&controller.context.nodes);
        controller
            .queue
            .run_gated(workers, shutdown.clone(), Some(gate), move |key| {
                let worker = Arc::clone(&worker);
                async move { worker.sync(key).await }
            })
            .await;
        shutdown.cancelled().await;
        router.abort();
        Ok(())
    })
}

impl Controller {
    fn expectations(&self) -> MutexGuard<'_, Expectations> {
        self.expectations
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn status_written(&self) -> MutexGuard<'_, HashMap<String, Timestamp>> {
        self.status_written
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Applies machine changes to the expectations, then enqueues the MachineSets concerned.
    async fn route(
        self: Arc<Self>,
        mut routed: mpsc::UnboundedReceiver<MachineChange>,
        shutdown: CancellationToken,
    ) {
        loop {
            let first = tokio::select! {
                () = shutdown.cancelled() => return,
                change = routed.recv() => match change {
                    Some(change) => change,
                    None => return,
                },
            };
            let mut batch = vec![first];
            while batch.len() < 1024
                && let Ok(change) = routed.try_recv()
            {
                batch.push(change);
            }
            self.observe(&batch);
            // The full MachineSet list is read at most once per batch, and only for orphans.
            let mut all_sets: Option<Vec<MachineSet>> = None;
            for change in &batch {
                // Adds and deletes settle the creation and deletion bookkeeping the next step
                // waits for: at once. Updates (many per machine) share a sync.
                let at_once = !matches!(change, MachineChange::Updated(..));
                for name in self.owners_of(change, &mut all_sets) {
                    if at_once {
                        self.queue.add(name);
                    } else {
                        self.queue.add_after(name, OWNER_SYNC_DEBOUNCE);
                    }
                }
            }
        }
    }

    /// Every machine add/delete observed lowers the expectations of its controller MachineSet.
    fn observe(&self, batch: &[MachineChange]) {
        let mut expectations = self.expectations();
        for change in batch {
            match change {
                MachineChange::Added(m) => {
                    if let Some(owner) = owner_set(&m.metadata) {
                        let name = m.metadata.name.as_deref().unwrap_or_default();
                        expectations.observe_added(owner, name);
                        if m.metadata.deletion_timestamp.is_some() {
                            expectations.observe_deleted(owner, name);
                        }
                    }
                }
                MachineChange::Updated(old, new) => {
                    if new.metadata.deletion_timestamp.is_some()
                        && old.metadata.deletion_timestamp.is_none()
                        && let Some(owner) = owner_set(&new.metadata)
                    {
                        let name = new.metadata.name.as_deref().unwrap_or_default();
                        expectations.observe_deleted(owner, name);
                    }
                }
                MachineChange::Deleted(m) => {
                    if let Some(owner) = owner_set(&m.metadata) {
                        let name = m.metadata.name.as_deref().unwrap_or_default();
                        expectations.observe_deleted(owner, name);
                    }
                }
            }
        }
    }

    fn owners_of(
        &self,
        change: &MachineChange,
        all_sets: &mut Option<Vec<MachineSet>>,
    ) -> Vec<String> {
        let (old, new) = match change {
            MachineChange::Added(m) | MachineChange::Deleted(m) => (None, &m.metadata),
            MachineChange::Updated(old, new) => (Some(&old.metadata), &new.metadata),
        };
        let new_ref = controller_ref(new);
        // Same comparison as `routing::owners_to_sync`: the whole reference.
        let same_controller = old.is_none_or(|o| controller_ref(o) == new_ref);
        match new_ref {
            // Controlled and unchanged: only the controller can be concerned.
            Some(r) if same_controller => {
                let owners: Vec<MachineSet> = self
                    .context
                    .machine_sets
                    .get(&r.name)
                    .map(|ms| (*ms).clone())
                    .into_iter()
                    .collect();
                routing::owners_to_sync(old, new, &owners)
            }
            _ => {
                let owners = all_sets.get_or_insert_with(|| {
                    self.context
                        .machine_sets
                        .list()
                        .iter()
                        .map(|ms| (**ms).clone())
                        .collect()
                });
                routing::owners_to_sync(old, new, owners)
            }
        }
    }

    async fn sync(self: Arc<Self>, name: String) -> Pass {
        self.reconcile(&name).await.map_err(|error| {
            tracing::warn!(machine_set = %name, namespace = %self.context.namespace, %error, "MachineSet reconcile failed");
            Failed
        })?
    }

    /// One pass of docs/behaviour.md#machine-set-reconcile: an API error fails the pass; a pass
    /// that ran but could not create or delete every machine it meant to (already logged) asks
    /// for the queue's backoff as upstream's `manageReplicas` error does.
    async fn reconcile(&self, name: &str) -> Result<Pass, ApiError> {
        let api = self.context.namespaced::<MachineSet>();
        // Step 1: a live read, never the cache.
        let Some(ms) = api
            .get_opt(name)
            .await
            .map_err(|e| ApiError::api("get", "MachineSet", name, e))?
        else {
            self.expectations().forget(name);
            self.status_written().remove(name);
            return Ok(Ok(Action::AwaitChange));
        };
        let uid = ms.metadata.uid.clone().unwrap_or_default();
        let now = Timestamp::now();
        let (machines, readiness) = {
            let mut expectations = self.expectations();
            // Only machines this set controls or nobody controls can be claimed.
            // Shared with the cache, never copied: at 1,000 machines two deep copies per pass
            // were most of the manager's memory while a fleet was scaling.
            let machines: Vec<Arc<Machine>> = self
                .context
                .machines
                .filter(|m| controller_ref(&m.metadata).is_none_or(|r| r.uid == uid));
            let owned: Vec<&Machine> = machines
                .iter()
                .filter(|m| controller_ref(&m.metadata).is_some())
                .map(|m| &**m)
                .collect();
            expectations.observe_snapshot(name, &owned);
            (machines, expectations.readiness(name, now))
        };
        let node_preserve = self.node_preserve(&machines);
        let planned = match plan::plan(MachineSetInput {
            machine_set: &ms,
            machines: &machines,
            node_preserve: &node_preserve,
            readiness,
            now,
        }) {
            Ok(planned) => planned,
            Err(error) => {
                // Upstream skips invalid objects until they change.
                tracing::warn!(machine_set = %name, %error, "invalid MachineSet, not reconciled");
                self.context.event(
                    &ms,
                    true,
                    "InvalidMachineSet",
                    "Validate",
                    error.to_string(),
                );
                return Ok(Ok(Action::AwaitChange));
            }
        };
        let mut ms = ms;
        let mut replica_error: Option<ReplicaError> = None;
        for action in planned.actions {
            match action {
                MachineSetAction::AddFinalizer => ms = self.set_finalizer(&ms, true).await?,
                MachineSetAction::RemoveFinalizer => {
                    self.set_finalizer(&ms, false).await?;
                    self.expectations().forget(name);
                    return Ok(Ok(Action::AwaitChange));
                }
                MachineSetAction::AdoptMachine { machine, owner } => {
                    self.adopt(&ms, &machines, &machine, owner).await?;
                }
                MachineSetAction::ReleaseMachine { machine } => {
                    self.release(&ms, &machines, &machine).await?;
                }
                MachineSetAction::UpdateMachine { machine, update } => {
                    self.update_machine(&ms, &machine, &update).await?;
                }
                MachineSetAction::CreateMachines {
                    machine,
                    count,
                    batches,
                } => {
                    if let Some(error) = self.create_machines(&ms, &machine, count, &batches).await
                    {
                        replica_error.get_or_insert(error);
                    }
                }
                MachineSetAction::DeleteMachines { machines: victims } => {
                    // Termination errors are only logged (upstream `manageReplicas`).
                    self.delete_machines(&ms, &machines, &victims, now).await;
                }
            }
        }
        let status = plan::machine_set_status(&ms, &planned.claimed, replica_error.as_ref(), now);
        let mut requeue_after = planned.requeue_after;
        if plan::status_needs_update(&ms, &status) {
            let last_written = self.status_written().get(name).copied();
            match plan::status_write_delay(&ms, &status, last_written, now) {
                Some(wait) => requeue_after = requeue_after.min(Retry::After(go_duration(wait))),
                None => {
                    self.write_status(ms, status).await?;
                    self.status_written().insert(name.to_owned(), now);
                }
            }
        }
        if replica_error.is_some() {
            return Ok(Err(Failed));
        }
        Ok(Ok(Action::Requeue(
            requeue_after.at_least(Duration::from_millis(100)),
        )))
    }

    /// Preserve annotations of the nodes of Failed machines (the only ones the plan asks about).
    fn node_preserve(&self, machines: &[Arc<Machine>]) -> BTreeMap<String, Option<String>> {
        machines
            .iter()
            .filter(|m| m.phase() == Some(&MachinePhase::Failed))
            .filter_map(|m| m.node_name().filter(|n| !n.is_empty()))
            .filter_map(|node| {
                let found = self.context.nodes.get(node)?;
                let value = found
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(annotation::PRESERVE))
                    .cloned();
                Some((node.to_owned(), value))
            })
            .collect()
    }

    /// Writes `status` through `/status`; after a conflict, once more on a fresh read (docs/behaviour.md#machine-set-status).
    async fn write_status(
        &self,
        ms: MachineSet,
        status: mcm_api::v1alpha1::MachineSetStatus,
    ) -> Result<(), ApiError> {
        let api = self.context.namespaced::<MachineSet>();
        let name = ms.metadata.name.clone().unwrap_or_default();
        let mut current = ms;
        for attempt in 0..2 {
            current.status = Some(status.clone());
            match api
                .replace_status(&name, &PostParams::default(), &current)
                .await
            {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 && attempt == 0 => {
                    current = api
                        .get(&name)
                        .await
                        .map_err(|e| ApiError::api("get", "MachineSet", &name, e))?;
                }
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
                Err(e) => return Err(ApiError::api("update status", "MachineSet", &name, e)),
            }
        }
        Err(ApiError::Conflicts {
            action: "update status",
            kind: "MachineSet",
            name,
            attempts: 2,
        })
    }
}

/// Name of the MachineSet controlling a machine, if its controller is one.
fn owner_set(meta: &ObjectMeta) -> Option<&str> {
    controller_ref(meta)
        .filter(|r| r.kind == plan::KIND)
        .map(|r| r.name.as_str())
}
