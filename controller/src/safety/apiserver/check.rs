//! Shell of the API-server health check (docs/behaviour.md#machine-safety): probe the control and target API servers, feed
//! [`mcm_decisions::safety::apiserver::plan_apiserver_check`], freeze or unfreeze the Machine controller
//! ([`ApiServerContext::set_machine_controller_frozen`], which also sets `mcm_machine_controller_frozen`).
//!
//! On recovery, every `Unknown` machine gets its health timeout reset first
//! ([`mcm_decisions::safety::apiserver::health_timeout_reset`]: a live GET, then a merge patch of the status subresource
//! carrying the read resourceVersion); the unfreeze only happens once all those writes succeeded,
//! as upstream, so a machine is never failed for an outage the controller could not observe.

use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use mcm_api::v1alpha1::{Machine, MachinePhase};

use crate::platform::error::ApiError;
use crate::platform::queue::{Action, Pass};
use crate::safety::context::ApiServerContext;
use crate::safety::period::period;
use mcm_decisions::safety::apiserver::{
    ApiServerSafetySettings, FreezeState, HEALTH_TIMEOUT_RESET, health_timeout_reset,
    plan_apiserver_check,
};
use mcm_decisions::vocabulary::{Retry, phase_of};

/// A name no object has: the probes only care whether the server answers (200 or 404).
const PROBE_NAME: &str = "mcm-safety-apiserver-probe";
/// Shortest probe deadline.
const MIN_PROBE_DEADLINE: Duration = Duration::from_secs(1);

/// The process-local state of the check (upstream keeps it in the controller struct).
#[derive(Debug, Default)]
pub struct ApiServerChecker {
    /// Freeze state carried between checks.
    pub state: FreezeState,
}

/// One check; requeues after the plan's next-check delay.
pub async fn run_once(context: &ApiServerContext, checker: &Mutex<ApiServerChecker>) -> Pass {
    let settings = ApiServerSafetySettings {
        timeout: context.config.safety.apiserver_statuscheck_timeout,
        period: context.config.safety.apiserver_statuscheck_period,
    };
    let deadline = settings
        .timeout
        .to_std()
        .unwrap_or_default()
        .max(MIN_PROBE_DEADLINE);
    let (control_up, target_up) = tokio::join!(
        probe_control(context, deadline),
        probe_target(context, deadline)
    );
    let state = lock(checker).state;
    let decision = plan_apiserver_check(
        state,
        control_up,
        target_up,
        settings,
        jiff::Timestamp::now(),
    );
    if decision.reset_unknown_machines
        && let Err(error) = reset_unknown_machines(context).await
    {
        // Stay frozen: the next check retries the reset.
        tracing::warn!(%error, "API servers are back, but resetting machine health timeouts failed; staying frozen");
        let fifth = period(settings.timeout).as_nanos() / 5;
        return Ok(Action::Requeue(Retry::After(
            mcm_api::duration::Duration::from_nanos(fifth),
        )));
    }
    lock(checker).state = decision.state;
    if decision.state.frozen != context.machine_controller_frozen() {
        context.set_machine_controller_frozen(decision.state.frozen);
    }
    if let Some(transition) = decision.transition {
        if decision.state.frozen {
            tracing::warn!(control_up, target_up, "machine controller {transition}");
        } else {
            tracing::info!("machine controller {transition}");
        }
    } else if !(control_up && target_up) {
        tracing::info!(
            control_up,
            target_up,
            frozen = decision.state.frozen,
            "API server unreachable"
        );
    }
    if let Some(after) = decision.reenqueue_all_after {
        // The Machine controller's own periodic requeue picks the machines up again; this shell
        // has no handle on its queue.
        tracing::info!(
            after_seconds = after.as_secs(),
            "machines are reconciled again after the unfreeze"
        );
    }
    Ok(Action::Requeue(Retry::After(period(decision.next_check))))
}

fn lock(checker: &Mutex<ApiServerChecker>) -> std::sync::MutexGuard<'_, ApiServerChecker> {
    checker
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn probe_control(context: &ApiServerContext, deadline: Duration) -> bool {
    let api: Api<Machine> = context.namespaced();
    probe(api, deadline, "control").await
}

async fn probe_target(context: &ApiServerContext, deadline: Duration) -> bool {
    match &context.target {
        Some(target) => probe(Api::<Node>::all(target.clone()), deadline, "target").await,
        None => true,
    }
}

/// `GET <kind>/<PROBE_NAME>`: up when it answers, found or not.
async fn probe<K>(api: Api<K>, deadline: Duration, cluster: &'static str) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match tokio::time::timeout(deadline, api.get_opt(PROBE_NAME)).await {
        Ok(Ok(_)) => true,
        Ok(Err(error)) => {
            tracing::debug!(cluster, %error, "API server probe failed");
            false
        }
        Err(_) => {
            tracing::debug!(cluster, ?deadline, "API server probe timed out");
            false
        }
    }
}

/// Resets every `Unknown` machine of the cache (live GET first); the first failure aborts.
async fn reset_unknown_machines(context: &ApiServerContext) -> Result<usize, ApiError> {
    let api: Api<Machine> = context.namespaced();
    let candidates = context
        .machines
        .filter(|m| phase_of(m) == Some(MachinePhase::Unknown));
    let mut reset = 0;
    for cached in candidates {
        let name = cached.metadata.name.clone().unwrap_or_default();
        let live = api.get_opt(&name).await.map_err(|source| ApiError::Api {
            action: "get",
            kind: "Machine",
            name: name.clone(),
            source,
        })?;
        let Some(live) = live else { continue };
        let Some(write) = health_timeout_reset(&live, jiff::Timestamp::now()) else {
            continue;
        };
        let status = write.apply(live.status.as_ref());
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": live.metadata.resource_version},
            "status": status,
        });
        let patched = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
        match patched {
            Ok(updated) => {
                reset += 1;
                tracing::info!(machine = %name, "health timeout reset after the API-server outage");
                context.event(
                    &updated,
                    false,
                    "HealthTimeoutReset",
                    "Unfreeze",
                    HEALTH_TIMEOUT_RESET.to_owned(),
                );
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => {
                return Err(ApiError::Api {
                    action: "reset the health timeout of",
                    kind: "Machine",
                    name,
                    source,
                });
            }
        }
    }
    Ok(reset)
}
