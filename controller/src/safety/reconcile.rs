//! The safety controller shells, one per upstream queue (each a controller of its own, so the
//! overshooting check can run in upstream's `machine-controller-manager` share without the two
//! machine-side ones): orphan VM collection and the API-server health freeze (machine side,
//! docs/behaviour.md#machine-safety) and the overshooting freeze of MachineSets and MachineDeployments (docs/behaviour.md#overshooting).
//!
//! Each runs its own single-key work queue (key `""`, as upstream), so at most one run of each is
//! in flight; runs are triggered at start, after their period, and by the informer events the
//! reference names:
//!
//! | Queue | Runs | Triggers |
//! |---|---|---|
//! | `machinesafetyorphanvms` | [`crate::safety::orphans::collect::run_once`] | start, `--machine-safety-orphan-vms-period`, machine delete, `OutOfRange` ([`mcm_decisions::machine::routing::triggers_orphan_collection`]) |
//! | `machinesafetyapiserver` (target only) | [`crate::safety::apiserver::check::run_once`] | start, `--machine-safety-apiserver-statuscheck-period` (timeout/5 while down) |
//! | `machinesafetyovershooting` | [`crate::safety::overshoot::apply::run_once`] | start, `--machine-safety-overshooting-period`, machine add (as upstream), the unfreeze annotation appearing on a set or deployment ([`triggers_overshoot_check`]) |

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::platform::BoxError;
use crate::platform::caches::CacheGate;
use crate::platform::informer::Change;
use crate::platform::queue::WorkQueue;
use crate::safety::apiserver::check::{self as apiserver_check, ApiServerChecker};
use crate::safety::context::{ApiServerContext, OrphanContext, OvershootContext};
use crate::safety::orphans::collect as orphan_collect;
use crate::safety::overshoot::apply as overshoot_apply;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use mcm_decisions::machine::routing::triggers_orphan_collection;
use mcm_decisions::safety::overshoot::triggers_overshoot_check;

/// The single key of every safety queue (upstream uses `""` too).
pub const KEY: &str = "";
/// Queue name of the orphan VM collection.
pub const ORPHAN_QUEUE: &str = "machinesafetyorphanvms";
/// Queue name of the API-server health check.
pub const APISERVER_QUEUE: &str = "machinesafetyapiserver";
/// Queue name of the overshooting check.
pub const OVERSHOOT_QUEUE: &str = "machinesafetyovershooting";

/// Machine adds arrive in bursts (a scale-up); one overshoot run shortly after the burst sees
/// them all instead of one run per machine.
const OVERSHOOT_DEBOUNCE: Duration = Duration::from_millis(200);

/// Machine deletions also arrive in bursts (a scale-down); one orphan run after the burst
/// suffices.
const ORPHAN_DEBOUNCE: Duration = Duration::from_secs(1);

pub use crate::safety::period::period;

/// Runs the orphan VM and orphan Node collection (`machinesafetyorphanvms`) until `shutdown`.
pub fn run_orphans(
    context: Arc<OrphanContext>,
    shutdown: CancellationToken,
) -> BoxFuture<'static, Result<(), BoxError>> {
    Box::pin(async move {
        let orphans = WorkQueue::new(ORPHAN_QUEUE, Some(context.metrics.clone()));
        {
            let orphans = orphans.clone();
            context.machines.subscribe(move |change| match change {
                Change::Added(_) => {}
                Change::Updated { old, new } => {
                    if triggers_orphan_collection(old, new) {
                        orphans.add_after(KEY, ORPHAN_DEBOUNCE);
                    }
                }
                Change::Deleted(_) => orphans.add_after(KEY, ORPHAN_DEBOUNCE),
            });
        }
        orphans.add(KEY);
        // A VM is an orphan when no cached machine claims it: never judged on a stale cache.
        let gate = CacheGate::new(ORPHAN_QUEUE)
            .with(&context.machines)
            .with(&context.machine_classes)
            .with(&context.nodes);
        orphans
            .run_gated(1, shutdown, Some(gate), move |_key| {
                let context = Arc::clone(&context);
                async move { orphan_collect::run_once(&context).await }
            })
            .await;
        Ok(())
    })
}

/// Runs the overshooting check (`machinesafetyovershooting`) until `shutdown`.
pub fn run_overshoot(
    context: Arc<OvershootContext>,
    shutdown: CancellationToken,
) -> BoxFuture<'static, Result<(), BoxError>> {
    Box::pin(async move {
        let overshoot = WorkQueue::new(OVERSHOOT_QUEUE, Some(context.metrics.clone()));
        {
            let overshoot = overshoot.clone();
            context.machines.subscribe(move |change| {
                if let Change::Added(_) = change {
                    overshoot.add_after(KEY, OVERSHOOT_DEBOUNCE);
                }
            });
        }
        // Sets and deployments trigger a run only when the unfreeze annotation appears: a run
        // on any of their changes froze every scale-down (docs/behaviour.md#overshooting).
        {
            let overshoot = overshoot.clone();
            context.machine_sets.subscribe(move |change| {
                if unfreeze_requested(change, |ms| &ms.metadata) {
                    overshoot.add_after(KEY, OVERSHOOT_DEBOUNCE);
                }
            });
        }
        {
            let overshoot = overshoot.clone();
            context.machine_deployments.subscribe(move |change| {
                if unfreeze_requested(change, |md| &md.metadata) {
                    overshoot.add_after(KEY, OVERSHOOT_DEBOUNCE);
                }
            });
        }
        overshoot.add(KEY);
        let gate = CacheGate::new(OVERSHOOT_QUEUE)
            .with(&context.machines)
            .with(&context.machine_sets)
            .with(&context.machine_deployments);
        overshoot
            .run_gated(1, shutdown, Some(gate), move |_key| {
                let context = Arc::clone(&context);
                async move { overshoot_apply::run_once(&context).await }
            })
            .await;
        Ok(())
    })
}

fn unfreeze_requested<K>(change: &Change<K>, meta: impl Fn(&K) -> &ObjectMeta) -> bool {
    match change {
        Change::Added(new) => triggers_overshoot_check(None, meta(new.as_ref())),
        Change::Updated { old, new } => {
            triggers_overshoot_check(Some(meta(old.as_ref())), meta(new.as_ref()))
        }
        Change::Deleted(_) => false,
    }
}

/// Runs the API-server check (`machinesafetyapiserver`) until `shutdown`; idle without a target
/// cluster, as upstream (docs/behaviour.md#q25).
pub fn run_apiserver(
    context: Arc<ApiServerContext>,
    shutdown: CancellationToken,
) -> BoxFuture<'static, Result<(), BoxError>> {
    Box::pin(async move {
        if context.target.is_none() {
            tracing::info!("no target cluster: the API-server safety check is not run");
            shutdown.cancelled().await;
            return Ok(());
        }
        let queue = WorkQueue::new(APISERVER_QUEUE, Some(context.metrics.clone()));
        queue.add(KEY);
        // A new leadership term (the Lease was lost, often in the very outage that froze the
        // controller) starts from the freeze it inherits, so the recovery still resets the
        // health timeouts of Unknown machines before unfreezing.
        let checker = Arc::new(Mutex::new(ApiServerChecker {
            state: mcm_decisions::safety::apiserver::FreezeState {
                frozen: context.machine_controller_frozen(),
                down_since: None,
            },
        }));
        queue
            .run(1, shutdown, move |_key| {
                let context = Arc::clone(&context);
                let checker = Arc::clone(&checker);
                async move { apiserver_check::run_once(&context, &checker).await }
            })
            .await;
        Ok(())
    })
}
