//! The MachineDeployment controller shell (docs/behaviour.md#machine-deployment): watches deployments, their MachineSets
//! and machines, reads the deployment live, calls [`mcm_decisions::machine_deployment::plan::plan`] and executes its actions.
//!
//! - Routing (docs/behaviour.md#deployment-routing): deployment changes enqueue the deployment; MachineSet changes enqueue their
//!   controlling deployment (orphans: every deployment whose selector matches); machine changes
//!   enqueue the deployment owning the machine's MachineSet (availability feeds the status).
//! - Cache lag: the MachineSets this shell wrote, created or deleted are laid over the informer's
//!   until it has caught up ([`Overlay`]), so the next pass plans on what the API server returned,
//!   not on an older cached copy (a rolling update never decides twice on the same stale sizes).
//! - Writes use optimistic concurrency (resourceVersion); a 409 ends the pass with a
//!   rate-limited retry. Status goes through `/status`.
//! - Metrics: a scrape hook fills `mcm_machine_deployment_*` from the deployment cache.

mod apply;
mod deployment_metrics;
mod reconciler;

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use mcm_api::duration::Duration;
use mcm_api::keys::{label, value};
use mcm_api::v1alpha1::{
    Machine, MachineClass, MachineDeployment, MachineDeploymentStrategyType as Strategy, MachineSet,
};
use mcm_decisions::rollout_preview::verdict::template_class;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use self::reconciler::Reconciler;
use crate::machine_deployment::context::MachineDeploymentContext;
use crate::platform::BoxError;
use crate::platform::caches::CacheGate;
use crate::platform::informer::Change;
use crate::platform::overlay::Overlay;
use crate::platform::queue::{Action, Failed, OWNER_SYNC_DEBOUNCE, Pass, WorkQueue};
use mcm_decisions::machine_deployment::hash_label_migration::{self, LegacyStep};
use mcm_decisions::machine_deployment::ownership::deployment_for_machine;
use mcm_decisions::machine_deployment::plan::{self, DeploymentConfig, DeploymentInput, NodeView};
use mcm_decisions::machine_set::claim::controller_ref;
use mcm_decisions::machine_set::routing::owners_to_sync;
use mcm_decisions::selector;
use mcm_decisions::vocabulary::Retry;

pub use apply::ApplyError;

/// Pause between the steps of a legacy MachineSet migration (the cache catches up meanwhile).
const LEGACY_STEP_RETRY: Retry = Retry::After(Duration::from_millis(500));
/// How long a MachineSet we wrote may stand in for the cache at most (a watch that never
/// delivers it).
const WRITTEN_TTL: std::time::Duration = std::time::Duration::from_secs(30);
/// Soonest periodic requeue, whatever the plan asks.
const MIN_REQUEUE: Duration = Duration::from_millis(100);

/// Name of the work queue (and of the reconcile metrics label).
pub const QUEUE: &str = "machinedeployment";

/// Errors of one reconcile pass of a deployment.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Reading the deployment failed.
    #[error("MachineDeployment {namespace}/{name}: cannot read it: {source}")]
    Read {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// API error.
        source: kube::Error,
    },
    /// Executing an action failed.
    #[error(transparent)]
    Apply(#[from] ApplyError),
}

/// Runs the MachineDeployment controller until `shutdown`.
pub fn run(
    context: Arc<MachineDeploymentContext>,
    shutdown: CancellationToken,
) -> BoxFuture<'static, Result<(), BoxError>> {
    Box::pin(async move {
        let queue = WorkQueue::new(QUEUE, Some(context.metrics.clone()));
        let written = Arc::new(Overlay::new(WRITTEN_TTL));
        subscribe(&context, &queue, &written, &shutdown);
        deployment_metrics::register(&context);
        let reconciler = Arc::new(Reconciler {
            context: Arc::clone(&context),
            written,
        });
        let workers = context.config.concurrent_syncs;
        let gate = CacheGate::new(QUEUE)
            .with(&context.machines)
            .with(&context.machine_sets)
            .with(&context.machine_deployments)
            .with(&context.machine_classes)
            .with(&context.nodes);
        queue
            .run_gated(workers, shutdown.clone(), Some(gate), move |key| {
                let reconciler = Arc::clone(&reconciler);
                async move { reconcile_key(&reconciler, &key).await }
            })
            .await;
        shutdown.cancelled().await;
        Ok(())
    })
}

/// A MachineSet or machine change handed from an informer handler to the router.
enum Routed {
    /// A MachineSet was added or deleted (`old` = `None`) or updated.
    Set {
        old: Option<Arc<MachineSet>>,
        new: Arc<MachineSet>,
    },
    /// A machine changed.
    Machine(Arc<Machine>),
    /// A MachineClass of this name appeared or went.
    Class(String),
}

/// Routes watch events to deployment keys (docs/behaviour.md#deployment-routing). Handlers run under their informer's lock, so
/// the MachineSet and machine handlers only pass the change on; [`route`] resolves owners
/// outside any informer lock (no lock-order cycles with other shells' handlers).
fn subscribe(
    context: &Arc<MachineDeploymentContext>,
    queue: &WorkQueue,
    written: &Arc<Overlay<MachineSet>>,
    shutdown: &CancellationToken,
) {
    let q = queue.clone();
    context
        .machine_deployments
        .subscribe(move |change: &Change<MachineDeployment>| {
            if let Change::Updated { old, new } = change
                && old.metadata.resource_version == new.metadata.resource_version
            {
                return;
            }
            if let Some(name) = change.object().metadata.name.as_deref() {
                q.add(name);
            }
        });
    let (changes, routed) = mpsc::unbounded_channel();
    // A class that appears or goes changes what a rollout to it may take away
    // (docs/behaviour.md#missing-class): its deployments are found by the router.
    let classes_tx = changes.clone();
    context
        .machine_classes
        .subscribe(move |change: &Change<MachineClass>| {
            if let Change::Added(class) | Change::Deleted(class) = change
                && let Some(name) = class.metadata.name.clone()
            {
                let _ = classes_tx.send(Routed::Class(name));
            }
        });
    let sets_tx = changes.clone();
    let written = Arc::clone(written);
    context
        .machine_sets
        .subscribe(move |change: &Change<MachineSet>| {
            // Before the routing: a pass queued by this change finds the cache, not our write.
            written.cache_changed(change);
            let routed = match change {
                Change::Added(ms) | Change::Deleted(ms) => Routed::Set {
                    old: None,
                    new: Arc::clone(ms),
                },
                Change::Updated { old, new } => Routed::Set {
                    old: Some(Arc::clone(old)),
                    new: Arc::clone(new),
                },
            };
            // A closed channel means the controller is stopping.
            let _ = sets_tx.send(routed);
        });
    context.machines.subscribe(move |change: &Change<Machine>| {
        if let Change::Updated { old, new } = change
            && old.metadata.resource_version == new.metadata.resource_version
        {
            return;
        }
        let _ = changes.send(Routed::Machine(Arc::clone(change.object())));
    });
    tokio::spawn(route(
        Arc::clone(context),
        queue.clone(),
        routed,
        shutdown.clone(),
    ));
}

/// Enqueues the deployments concerned by MachineSet and machine changes until `shutdown`.
async fn route(
    context: Arc<MachineDeploymentContext>,
    queue: WorkQueue,
    mut routed: mpsc::UnboundedReceiver<Routed>,
    shutdown: CancellationToken,
) {
    loop {
        let change = tokio::select! {
            () = shutdown.cancelled() => return,
            change = routed.recv() => match change {
                Some(change) => change,
                None => return,
            },
        };
        match change {
            Routed::Set { old, new } => {
                let owners: Vec<MachineDeployment> = context
                    .machine_deployments
                    .list()
                    .iter()
                    .map(|d| (**d).clone())
                    .collect();
                let old = old.as_ref().map(|o| &o.metadata);
                for name in owners_to_sync(old, &new.metadata, &owners) {
                    queue.add(name);
                }
            }
            Routed::Class(class) => {
                for md in context
                    .machine_deployments
                    .filter(|md| template_class(md) == Some(class.as_str()))
                {
                    if let Some(name) = md.metadata.name.as_deref() {
                        queue.add(name);
                    }
                }
            }
            Routed::Machine(machine) => {
                if let Some(name) = deployment_for_machine(
                    &machine.metadata,
                    |set| context.machine_sets.get(set),
                    |md| context.machine_deployments.get(md),
                ) {
                    queue.add_after(name, OWNER_SYNC_DEBOUNCE);
                }
            }
        }
    }
}

async fn reconcile_key(reconciler: &Reconciler, name: &str) -> Pass {
    match reconcile(reconciler, name).await {
        Ok(action) => Ok(action),
        Err(error) => {
            if error.is_conflict() {
                tracing::debug!(machine_deployment = name, %error, "conflict; retrying");
            } else {
                tracing::warn!(machine_deployment = name, %error, "reconcile failed");
            }
            Err(Failed)
        }
    }
}

impl ReconcileError {
    /// Whether the pass ended on an optimistic-concurrency conflict (expected under races).
    #[must_use]
    pub fn is_conflict(&self) -> bool {
        match self {
            ReconcileError::Apply(e) => e.is_conflict(),
            ReconcileError::Read { .. } => false,
        }
    }
}

/// One pass for deployment `name` (docs/behaviour.md#deployment-reconcile).
async fn reconcile(reconciler: &Reconciler, name: &str) -> Result<Action, ReconcileError> {
    let context = &reconciler.context;
    let api: Api<MachineDeployment> = context.namespaced();
    let Some(md) = read_deployment(reconciler, &api, name).await? else {
        reconciler.written.forget_where(|ms| {
            controller_ref(&ms.metadata).is_some_and(|owner| owner.name == name)
        });
        return Ok(Action::AwaitChange);
    };
    if md.metadata.deletion_timestamp.is_none()
        && md
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(label::FREEZE))
            .is_some_and(|v| v == value::TRUE_CAPITALISED)
    {
        tracing::debug!(
            machine_deployment = name,
            "frozen by the overshooting safety controller; reconciled normally"
        );
    }

    let machine_sets: Vec<MachineSet> = reconciler
        .written
        .view(
            context
                .machine_sets
                .filter(|s| s.metadata.namespace.as_deref() == Some(context.namespace.as_str())),
        )
        .iter()
        .map(|ms| MachineSet::clone(ms))
        .collect();
    let sel = md.spec.selector.clone();
    // Shared with the cache, never copied (see the MachineSet shell).
    let machines: Vec<Arc<Machine>> = context
        .machines
        .filter(|m| selector::matches(sel.as_ref(), m.metadata.labels.as_ref()).unwrap_or(false));
    let in_place =
        md.spec.strategy.as_ref().and_then(|s| s.type_.as_ref()) == Some(&Strategy::InPlaceUpdate);
    let nodes = if in_place {
        node_views(context, &machines)
    } else {
        BTreeMap::new()
    };
    let input = DeploymentInput {
        deployment: &md,
        machine_sets: &machine_sets,
        machines: &machines,
        config: DeploymentConfig {
            autoscaler_annotations_during_rollout: context
                .config
                .autoscaler_scaledown_annotation_during_rollout,
            target_cluster: context.target.is_some(),
        },
        nodes: &nodes,
        now: Timestamp::now(),
        template_class_missing: template_class(&md)
            .is_some_and(|class| context.machine_classes.get(class).is_none()),
    };
    for ms in &machine_sets {
        if let Some(step) = hash_label_migration::next_step(&md, ms, &machines) {
            migrate_legacy(reconciler, name, step).await?;
            // One step per pass; the next pass sees its result.
            return Ok(Action::Requeue(LEGACY_STEP_RETRY));
        }
    }
    let planned = match plan::plan(input) {
        Ok(p) => p,
        Err(error) => {
            // Invalid objects are ignored until they change (upstream: no periodic requeue).
            tracing::warn!(machine_deployment = name, %error, "cannot reconcile");
            return Ok(Action::AwaitChange);
        }
    };
    tracing::debug!(
        machine_deployment = name,
        actions = planned.actions.len(),
        "planned"
    );
    let meltdown = mcm_decisions::machine::meltdown::assess(
        machines.iter().map(|m| &**m),
        context.config.machine.meltdown_threshold,
    );
    let had_condition = meltdown_condition_present(&md);
    let mut executor = apply::Executor::new(reconciler, md, &machine_sets, &machines);
    for action in planned.actions {
        executor.execute(action).await?;
    }
    if meltdown.is_some() || had_condition {
        show_meltdown(reconciler, name, meltdown.as_deref()).await?;
    }
    Ok(Action::Requeue(planned.requeue_after.at_least(MIN_REQUEUE)))
}

async fn read_deployment(
    reconciler: &Reconciler,
    api: &Api<MachineDeployment>,
    name: &str,
) -> Result<Option<MachineDeployment>, ReconcileError> {
    api.get_opt(name)
        .await
        .map_err(|source| ReconcileError::Read {
            namespace: reconciler.context.namespace.clone(),
            name: name.to_owned(),
            source,
        })
}

fn meltdown_condition_present(md: &MachineDeployment) -> bool {
    md.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_.as_str() == mcm_decisions::machine::meltdown::CONDITION_TYPE)
        })
}

/// Meltdown guard: the Machine controller keeps unhealthy machines from being
/// replaced; the deployment says so in its `MeltdownProtection` condition and an event, written
/// only when the verdict changes. Read afresh because the plan's actions may have written status.
async fn show_meltdown(
    reconciler: &Reconciler,
    name: &str,
    verdict: Option<&str>,
) -> Result<(), ReconcileError> {
    let context = &reconciler.context;
    let api: Api<MachineDeployment> = context.namespaced();
    let Some(mut md) = read_deployment(reconciler, &api, name).await? else {
        return Ok(());
    };
    let Some(change) =
        mcm_decisions::machine::meltdown::condition_change(&md, verdict, Timestamp::now())
    else {
        return Ok(());
    };
    md.status.get_or_insert_with(Default::default).conditions =
        (!change.conditions.is_empty()).then_some(change.conditions);
    match api
        .replace_status(name, &kube::api::PostParams::default(), &md)
        .await
    {
        Ok(stored) => {
            if change.warning {
                tracing::warn!(machine_deployment = name, message = %change.message, "meltdown guard holds replacements");
            } else {
                tracing::info!(machine_deployment = name, "meltdown guard lifted");
            }
            context.event(
                &stored,
                change.warning,
                change.reason,
                "MeltdownGuard",
                change.message,
            );
        }
        // The next pass recomputes the verdict.
        Err(error) => {
            tracing::info!(machine_deployment = name, %error, "cannot write the meltdown condition");
        }
    }
    Ok(())
}

/// Executes one step of a legacy MachineSet migration (docs/behaviour.md#revisions step 1).
async fn migrate_legacy(
    reconciler: &Reconciler,
    md: &str,
    step: LegacyStep,
) -> Result<(), ApplyError> {
    let fail =
        |what: &'static str, kind: &'static str, name: &str, source: kube::Error| ApplyError::Api {
            deployment: md.to_owned(),
            what,
            kind,
            name: name.to_owned(),
            source,
        };
    match step {
        LegacyStep::UpdateSet(ms) => {
            let name = ms.metadata.name.clone().unwrap_or_default();
            tracing::info!(machine_deployment = md, machine_set = %name, "adding the template hash to a legacy MachineSet");
            let api: Api<MachineSet> = reconciler.context.namespaced();
            let written = api
                .replace(&name, &PostParams::default(), &ms)
                .await
                .map_err(|e| fail("update", "MachineSet", &name, e))?;
            reconciler.remember(written);
        }
        LegacyStep::LabelMachines { machines, value } => {
            let api: Api<Machine> = reconciler.context.namespaced();
            for m in machines {
                let patch = serde_json::json!({"metadata": {
                    "uid": m.uid,
                    "labels": {label::MACHINE_TEMPLATE_HASH: value},
                }});
                match api
                    .patch(&m.name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(fail("label", "Machine", &m.name, e)),
                }
            }
        }
    }
    Ok(())
}

/// What the in-place strategy needs to know about the nodes of `machines`.
fn node_views(
    context: &MachineDeploymentContext,
    machines: &[Arc<Machine>],
) -> BTreeMap<String, NodeView> {
    machines
        .iter()
        .filter_map(|m| m.node_name())
        .filter_map(|n| context.nodes.get(n).map(|node| (n.to_owned(), view(&node))))
        .collect()
}

fn view(node: &Node) -> NodeView {
    NodeView {
        labels: node.metadata.labels.clone().unwrap_or_default(),
        in_place_update_reason: node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| {
                c.iter()
                    .find(|c| c.type_ == mcm_api::keys::condition::IN_PLACE_UPDATE)
            })
            .and_then(|c| c.reason.clone()),
    }
}
