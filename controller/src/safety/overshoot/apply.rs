//! Shell of the overshooting safety (docs/behaviour.md#overshooting): snapshot MachineSets, MachineDeployments and machines
//! from the caches, run [`mcm_decisions::safety::overshoot::plan`], execute its actions in order.
//!
//! Each freeze/unfreeze reads the object live, applies the plan's object helper, writes the
//! `Frozen` condition through the status subresource, then the label/annotation change through
//! an update of the object the status write returned (both carry the resourceVersion: a conflict
//! makes the whole run retry with a fresh plan). An action whose live object already has the
//! wanted state writes nothing, so a run on a cache that lags our own writes is harmless.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use mcm_api::keys::{annotation, label, value};
use mcm_api::v1alpha1::{
    MachineDeployment, MachineDeploymentConditionType, MachineSet, MachineSetConditionType,
};

use crate::platform::error::ApiError;
use crate::platform::queue::{Action, Failed, Pass};
use crate::safety::context::OvershootContext;
use crate::safety::period::period;
use mcm_decisions::safety::overshoot::{
    OvershootAction, OvershootConfig, freeze_machine_deployment, freeze_machine_set, plan,
    unfreeze_machine_deployment, unfreeze_machine_set,
};
use mcm_decisions::vocabulary::{Event, EventType, Retry};

/// One overshooting check; requeues after `--machine-safety-overshooting-period`, or retries
/// (rate limited) after an API error.
pub async fn run_once(context: &OvershootContext) -> Pass {
    let period = Retry::After(period(context.config.safety.overshooting_period));
    match check(context).await {
        Ok(()) => Ok(Action::Requeue(period)),
        Err(error) if error.is_conflict() => {
            tracing::debug!(%error, "overshooting check met a conflict; retrying");
            Err(Failed)
        }
        Err(error) => {
            tracing::warn!(%error, "overshooting check failed");
            Err(Failed)
        }
    }
}

/// One run: plan on the caches, execute the actions. Actions after a failed one still run
/// (upstream logs each step's error and returns the last); the first error is returned.
pub async fn check(context: &OvershootContext) -> Result<(), ApiError> {
    // Sorted by name: the cache order is arbitrary, and "at most one overshoot change per run"
    // must pick the same set every time.
    let mut machine_sets: Vec<MachineSet> = context
        .machine_sets
        .list()
        .iter()
        .map(|s| MachineSet::clone(s))
        .collect();
    machine_sets.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut deployments: Vec<MachineDeployment> = context
        .machine_deployments
        .list()
        .iter()
        .map(|d| MachineDeployment::clone(d))
        .collect();
    deployments.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    // Shared, not copied: a copy of every machine per run was the largest transient allocation
    // of a 1,000-machine rollout (docs/performance.md).
    let machines = context.machines.list();
    let config = OvershootConfig {
        safety_up: i32::try_from(context.config.safety.safety_up).unwrap_or(i32::MAX),
        safety_down: i32::try_from(context.config.safety.safety_down).unwrap_or(i32::MAX),
    };
    let outcome = plan(
        &machine_sets,
        &deployments,
        &machines,
        config,
        jiff::Timestamp::now(),
    );
    for error in &outcome.errors {
        tracing::warn!(%error, "overshooting check skipped a MachineSet");
    }
    let mut first_error = None;
    for action in outcome.actions {
        if let Err(error) = execute(context, &action).await {
            tracing::warn!(%error, ?action, "overshooting action failed");
            first_error.get_or_insert(error);
        }
    }
    first_error.map_or(Ok(()), Err)
}

async fn execute(context: &OvershootContext, action: &OvershootAction) -> Result<(), ApiError> {
    let sets: Api<MachineSet> = context.namespaced();
    let deployments: Api<MachineDeployment> = context.namespaced();
    match action {
        OvershootAction::FreezeMachineSet {
            name,
            reason,
            message,
            event,
        } => {
            let changed = write_machine_set(&sets, name, |ms| {
                freeze_machine_set(ms, reason, message, jiff::Timestamp::now());
            })
            .await?;
            if let Some(ms) = changed {
                tracing::warn!(machine_set = %name, %message, "froze MachineSet");
                record(context, &ms, event);
            }
        }
        OvershootAction::UnfreezeMachineSet { name, event } => {
            let changed = write_machine_set(&sets, name, unfreeze_machine_set).await?;
            if let Some(ms) = changed {
                tracing::info!(machine_set = %name, "unfroze MachineSet");
                record(context, &ms, event);
            }
        }
        OvershootAction::FreezeMachineDeployment {
            name,
            reason,
            message,
        } => {
            let changed = write_deployment(&deployments, name, |md| {
                freeze_machine_deployment(md, reason, message, jiff::Timestamp::now());
            })
            .await?;
            if let Some(md) = changed {
                tracing::warn!(machine_deployment = %name, %reason, "froze MachineDeployment");
                context.event(
                    &md,
                    false,
                    "FrozeMachineDeployment",
                    "Freeze",
                    format!(
                        "SafetyController: Froze MachineDeployment {name} ({reason}): {message}"
                    ),
                );
            }
        }
        OvershootAction::UnfreezeMachineDeployment { name, reason } => {
            let changed = write_deployment(&deployments, name, unfreeze_machine_deployment).await?;
            if let Some(md) = changed {
                tracing::info!(machine_deployment = %name, %reason, "unfroze MachineDeployment");
                context.event(
                    &md,
                    false,
                    "UnfrozeMachineDeployment",
                    "Unfreeze",
                    format!("SafetyController: Unfroze MachineDeployment {name} ({reason})"),
                );
            }
        }
        OvershootAction::RequestMachineSetUnfreeze { name } => {
            let patch = serde_json::json!({
                "metadata": {"annotations": {annotation::UNFREEZE: value::TRUE_CAPITALISED}}
            });
            match sets
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.is_not_found() => {}
                Err(source) => {
                    return Err(ApiError::Api {
                        action: "annotate for unfreeze",
                        kind: "MachineSet",
                        name: name.clone(),
                        source,
                    });
                }
            }
        }
    }
    Ok(())
}

fn record(context: &OvershootContext, ms: &MachineSet, event: &Event) {
    let warning = matches!(event.type_, EventType::Warning);
    let action = if event.reason.starts_with("Froze") {
        "Freeze"
    } else {
        "Unfreeze"
    };
    context.event(ms, warning, &event.reason, action, event.message.clone());
}

/// The freeze marks of an object: `freeze` label value, unfreeze annotation, `Frozen` condition.
type Marks = (Option<String>, bool, bool);

fn meta_marks(meta: &ObjectMeta) -> (Option<String>, bool) {
    (
        meta.labels
            .as_ref()
            .and_then(|l| l.get(label::FREEZE))
            .cloned(),
        meta.annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(annotation::UNFREEZE)),
    )
}

fn set_marks(ms: &MachineSet) -> Marks {
    let (label, annotation) = meta_marks(&ms.metadata);
    let condition = ms
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == MachineSetConditionType::Frozen));
    (label, annotation, condition)
}

fn deployment_marks(md: &MachineDeployment) -> Marks {
    let (label, annotation) = meta_marks(&md.metadata);
    let condition = md
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == MachineDeploymentConditionType::Frozen)
        });
    (label, annotation, condition)
}

/// Live GET, `change`, status write (when the `Frozen` condition changes) then object update
/// (when the label or annotation changes); `None` when the object is gone or already has the
/// wanted marks (a freeze of a frozen object keeps its original condition).
async fn write_machine_set(
    api: &Api<MachineSet>,
    name: &str,
    change: impl Fn(&mut MachineSet),
) -> Result<Option<MachineSet>, ApiError> {
    write(api, "MachineSet", name, change, set_marks).await
}

async fn write_deployment(
    api: &Api<MachineDeployment>,
    name: &str,
    change: impl Fn(&mut MachineDeployment),
) -> Result<Option<MachineDeployment>, ApiError> {
    write(api, "MachineDeployment", name, change, deployment_marks).await
}

async fn write<K>(
    api: &Api<K>,
    kind: &'static str,
    name: &str,
    change: impl Fn(&mut K),
    marks: fn(&K) -> Marks,
) -> Result<Option<K>, ApiError>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let api_error = |action: &'static str, source| ApiError::Api {
        action,
        kind,
        name: name.to_owned(),
        source,
    };
    let Some(live) = api.get_opt(name).await.map_err(|e| api_error("get", e))? else {
        return Ok(None);
    };
    let mut wanted = live.clone();
    change(&mut wanted);
    let (before, after) = (marks(&live), marks(&wanted));
    if before == after {
        return Ok(None);
    }
    let after_status = if before.2 == after.2 {
        live
    } else {
        api.replace_status(name, &PostParams::default(), &wanted)
            .await
            .map_err(|e| api_error("update the status of", e))?
    };
    let mut updated = after_status.clone();
    change(&mut updated);
    if (before.0 == after.0) && (before.1 == after.1) {
        return Ok(Some(after_status));
    }
    let updated = api
        .replace(name, &PostParams::default(), &updated)
        .await
        .map_err(|e| api_error("update", e))?;
    Ok(Some(updated))
}
