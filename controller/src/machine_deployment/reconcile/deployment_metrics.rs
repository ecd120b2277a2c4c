//! Scrape-time `mcm_machine_deployment_*` metrics from the deployment cache (docs/behaviour.md#metrics-mcm): the
//! hook that samples every cached deployment before a scrape.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use mcm_api::v1alpha1::{MachineDeployment, MachineDeploymentStrategyType as Strategy};
use serde::Serialize;

use crate::machine_deployment::context::MachineDeploymentContext;
use crate::platform::metrics::{ConditionSample, FailedMachineSample, MachineDeploymentSample};

/// Registers the hook that replaces the deployment series before every scrape.
pub(super) fn register(context: &Arc<MachineDeploymentContext>) {
    let deployments = context.machine_deployments.clone();
    context.metrics.on_scrape(Box::new(move |metrics| {
        let samples: Vec<MachineDeploymentSample> =
            deployments.list().iter().map(|d| sample(d)).collect();
        metrics.replace_machine_deployments(&samples);
    }));
}

/// The wire name of a serde enum (`"RollingUpdate"`, `"Failed"`, ...), empty if none.
fn wire<T: Serialize>(v: Option<&T>) -> String {
    v.and_then(|v| serde_json::to_value(v).ok())
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Upstream's `IntOrString.IntValue()`: percentages (and garbage) count as 0.
fn int_value(v: Option<&IntOrString>) -> i64 {
    match v {
        Some(IntOrString::Int(i)) => i64::from(*i),
        Some(IntOrString::String(s)) => s.parse().unwrap_or(0),
        None => 0,
    }
}

/// The metrics snapshot of one deployment.
pub(crate) fn sample(md: &MachineDeployment) -> MachineDeploymentSample {
    let spec = &md.spec;
    let status = md.status.clone().unwrap_or_default();
    let strategy = spec.strategy.as_ref();
    let rolling_update =
        (strategy.and_then(|s| s.type_.as_ref()) == Some(&Strategy::RollingUpdate)).then(|| {
            let cfg = strategy.and_then(|s| s.rolling_update.as_ref());
            let cfg = cfg.map(|c| &c.update_configuration);
            (
                int_value(cfg.and_then(|c| c.max_surge.as_ref())),
                int_value(cfg.and_then(|c| c.max_unavailable.as_ref())),
            )
        });
    MachineDeploymentSample {
        name: md.metadata.name.clone().unwrap_or_default(),
        namespace: md.metadata.namespace.clone().unwrap_or_default(),
        created_at: md
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| t.0.as_second()),
        strategy_type: wire(strategy.and_then(|s| s.type_.as_ref())),
        paused: spec.paused.unwrap_or(false),
        spec_replicas: i64::from(spec.replicas.unwrap_or(0)),
        min_ready_seconds: i64::from(spec.min_ready_seconds.unwrap_or(0)),
        rolling_update,
        revision_history_limit: spec.revision_history_limit.map(i64::from),
        progress_deadline_seconds: spec.progress_deadline_seconds.map(i64::from),
        rollback_to_revision: spec.rollback_to.as_ref().and_then(|r| r.revision),
        conditions: status
            .conditions
            .iter()
            .flatten()
            .map(|c| ConditionSample {
                condition_type: wire(Some(&c.type_)),
                status: wire(Some(&c.status)),
            })
            .collect(),
        available_replicas: i64::from(status.available_replicas.unwrap_or(0)),
        unavailable_replicas: i64::from(status.unavailable_replicas.unwrap_or(0)),
        ready_replicas: i64::from(status.ready_replicas.unwrap_or(0)),
        updated_replicas: i64::from(status.updated_replicas.unwrap_or(0)),
        replicas: i64::from(status.replicas.unwrap_or(0)),
        collision_count: status.collision_count.map(i64::from),
        failed_machines: status
            .failed_machines
            .iter()
            .flatten()
            .map(|m| {
                let op = m.last_operation.as_ref();
                FailedMachineSample {
                    name: m.name.clone().unwrap_or_default(),
                    provider_id: m.provider_id.clone().unwrap_or_default(),
                    owner_ref: m.owner_ref.clone().unwrap_or_default(),
                    last_operation_state: wire(op.and_then(|o| o.state.as_ref())),
                    last_operation_type: wire(op.and_then(|o| o.type_.as_ref())),
                }
            })
            .collect(),
    }
}
