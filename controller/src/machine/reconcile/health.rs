//! Executes the health check (docs/behaviour.md#health-check) planned by [`plan::health::plan_health`]: status writes,
//! removal of the `instance-not-ready` startup taint, the bootstrap token clean-up, join metrics,
//! the per-MachineDeployment failure permit for Unknown → Failed, and the events of the in-place
//! update results (docs/behaviour.md#in-place-machine).

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams};
use mcm_api::keys::label;
use mcm_api::v1alpha1::{Machine, MachinePhase};

use super::in_place::in_place_phase_event;
use super::permits::PERMIT_WAIT;
use super::{MachineController, StepFlow, writes};
use crate::platform::error::ApiError;
use crate::platform::informer::Informer;
use crate::platform::metrics::MachineDurationLabels;
use mcm_decisions::machine as plan;
use mcm_decisions::machine::creation::BOOTSTRAP_TOKEN_NAMESPACE;
use mcm_decisions::machine::health::{FailurePermit, HealthInput, HealthOutcome, NodeLookup};
use mcm_decisions::machine::waiting::WaitingOnly;
use mcm_decisions::vocabulary::{
    Retry, effective_settings, label as machine_label, name_of, node_name_of, phase_of,
};

/// How long the permit is kept after failing a machine when the cache does not show the write
/// yet (upstream sleeps 10s holding it), so a sibling never decides on a stale "Unknown".
const PERMIT_HOLD: Duration = Duration::from_secs(10);

impl MachineController {
    /// `reconcileMachineHealth`.
    pub(crate) async fn health(
        &self,
        machine: &mut Machine,
        now: Timestamp,
    ) -> Result<StepFlow, ApiError> {
        let name = name_of(machine).to_owned();
        let phase_before = phase_of(machine);
        let settings = effective_settings(machine, &self.settings);
        let node = node_name_of(machine).and_then(|node| self.context.nodes.get(node));
        let deployment = machine_label(machine, label::NAME).map(str::to_owned);
        // Shared with the cache: copying every sibling on every pass cost O(machines²) memory
        // under load (the largest heap consumer of a 300-machine rollout).
        let read_siblings = || -> Vec<Arc<Machine>> {
            match deployment.as_deref() {
                Some(deployment) => self
                    .context
                    .machines
                    .filter(|m| machine_label(m, label::NAME) == Some(deployment)),
                None => Vec::new(),
            }
        };
        // Read only once the permit is granted, the one path that looks at them: copying every
        // sibling of the deployment on every health pass made a scale-up of N machines cost
        // O(N²) (the largest CPU consumer at 5,000).
        let mut siblings: Vec<Arc<Machine>> = Vec::new();
        let mut permit_state = FailurePermit::NotRequested;
        let mut permit = None;
        let plan = loop {
            let lookup = match &node {
                Some(node) => NodeLookup::Found(node),
                None => NodeLookup::NotFound,
            };
            let plan = plan::health::plan_health(&HealthInput {
                machine,
                node: lookup,
                settings: &settings,
                siblings: &siblings,
                meltdown_threshold: self.settings.meltdown_threshold,
                permit: permit_state,
                now,
            });
            if let HealthOutcome::NeedsFailurePermit { key } = &plan.outcome
                && permit_state == FailurePermit::NotRequested
            {
                permit = self.permits.try_acquire(key, PERMIT_WAIT).await;
                permit_state = if permit.is_some() {
                    // The permit may have been waited for while its previous holder failed a
                    // sibling: decide on the siblings as they are now, not as before the wait.
                    siblings = read_siblings();
                    FailurePermit::Granted
                } else {
                    FailurePermit::Busy
                };
                continue;
            }
            break plan;
        };

        self.events(machine, &plan.events);
        if plan.status.is_none()
            && let Some(held) = plan.held.as_deref()
        {
            self.show_held(machine, held, now).await;
        }
        // Before the status write, as upstream does: a pass that ends early after it (a Node
        // write refused with a conflict) would otherwise leave the token, because the next pass
        // sees the machine Running and no longer joining. Deleting again after a failed status
        // write finds nothing, which is fine.
        if let Some(secret) = &plan.delete_bootstrap_token
            && let Some(target) = self.context.target.clone()
        {
            let api: Api<Secret> = Api::namespaced(target, BOOTSTRAP_TOKEN_NAMESPACE);
            match api.delete(secret, &DeleteParams::default()).await {
                Ok(_) => tracing::info!(machine = %name, secret, "bootstrap token deleted"),
                Err(kube::Error::Api(response)) if response.code == 404 => {}
                Err(error) => {
                    tracing::warn!(machine = %name, secret, %error, "cannot delete the bootstrap token");
                }
            }
        }
        if let Some(write) = &plan.status {
            match writes::write_status(&self.context, machine, write, now).await {
                Ok(stored) => {
                    // The in-place result (docs/behaviour.md#in-place-machine) or its timeout: tell the user.
                    if let Some(event) = in_place_phase_event(machine.phase(), &stored) {
                        self.event(&stored, &event);
                    }
                    log_phase_change(&name, phase_before.as_ref(), &stored);
                    *machine = stored;
                }
                Err(error) => return Ok(ControlFlow::Break(error.retry())),
            }
            if let Some(permit) = permit.take() {
                hold_until_cached(self.context.machines.clone(), name.clone(), permit).await;
            }
        }
        drop(permit);

        let instance_type = machine
            .spec
            .class
            .as_ref()
            .and_then(|class| class.name.as_deref())
            .and_then(|class| self.context.machine_classes.get(class))
            .and_then(|class| {
                class
                    .node_template
                    .as_ref()
                    .map(|t| t.instance_type.clone())
            });
        let labels = MachineDurationLabels::for_machine(machine, instance_type.as_deref());
        if let (Some(duration), Some(labels)) = (plan.join_duration, &labels) {
            #[allow(clippy::cast_precision_loss)]
            self.context
                .metrics
                .machine_joined(labels, duration.as_secs() as f64);
        }
        if let (true, Some(labels)) = (plan.failed_join, &labels) {
            self.context.metrics.machine_failed_join(labels);
        }
        if !plan.remove_node_taints.is_empty()
            && let Some(node) = &node
        {
            let remove: Vec<(String, String)> = plan
                .remove_node_taints
                .iter()
                .map(|taint| (taint.key.clone(), taint.effect.clone()))
                .collect();
            match writes::remove_node_taints(&self.context, node, &remove).await {
                Ok(_) => tracing::info!(machine = %name, taints = ?remove, "startup taint removed"),
                // The plan asks again on every healthy pass.
                Err(error) => return Ok(ControlFlow::Break(error.retry())),
            }
        }
        Ok(match plan.outcome {
            HealthOutcome::Continue { recheck_after } => ControlFlow::Continue(recheck_after),
            HealthOutcome::EndPass { retry, reason }
                if plan.status.is_some()
                    && plan::order::steps_follow_health_write(phase_before, phase_of(machine)) =>
            {
                tracing::debug!(machine = %name, %reason, "machine joined; node steps follow in this pass");
                ControlFlow::Continue(Some(retry))
            }
            HealthOutcome::EndPass { retry, reason } => {
                tracing::debug!(machine = %name, %reason, "health pass ended");
                ControlFlow::Break(retry)
            }
            // The loop above always answers the permit question.
            HealthOutcome::NeedsFailurePermit { .. } => ControlFlow::Break(Retry::Short),
        })
    }
}

/// A health pass that moved the machine to another phase says so, as upstream does: a machine
/// losing its Node (Unknown, Failed) as a warning with the Node conditions that decided it, so an
/// operator finds in the log why the fleet's available count fell.
fn log_phase_change(name: &str, before: Option<&MachinePhase>, stored: &Machine) {
    let after = phase_of(stored);
    if after.as_ref() == before {
        return;
    }
    let from = before.map_or("none", MachinePhase::as_str);
    let to = after.as_ref().map_or("none", MachinePhase::as_str);
    let description = stored
        .last_operation()
        .and_then(|operation| operation.description.as_deref())
        .unwrap_or_default();
    if matches!(after, Some(MachinePhase::Unknown | MachinePhase::Failed)) {
        tracing::warn!(machine = %name, from, to, %description, "machine phase changed");
    } else {
        tracing::info!(machine = %name, from, to, "machine phase changed");
    }
}

impl MachineController {
    /// The health timeout ran out but a guard keeps the machine from being marked Failed: its
    /// `Blocked` condition names the guard (written only when it changes; a failed write is
    /// retried by the next pass).
    async fn show_held(&self, machine: &mut Machine, held: &str, now: Timestamp) {
        match writes::write_waiting(&self.context, machine, WaitingOnly::Held(held), now).await {
            Ok(Some(stored)) => *machine = stored,
            Ok(None) => {}
            Err(error) => {
                tracing::debug!(machine = name_of(machine), %error, "cannot show the guard on the machine");
            }
        }
    }
}

fn settled(machines: &Informer<Machine>, name: &str) -> bool {
    machines.get(name).is_none_or(|m| {
        matches!(
            phase_of(&m),
            Some(MachinePhase::Failed | MachinePhase::Terminating)
        )
    })
}

/// Keeps the failure permit until the cache shows the machine Failed (polling 1s in the worker),
/// else up to [`PERMIT_HOLD`] in the background, so siblings see the new phase.
async fn hold_until_cached(
    machines: Informer<Machine>,
    name: String,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    for _ in 0..10 {
        if settled(&machines, &name) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + PERMIT_HOLD;
        while tokio::time::Instant::now() < deadline && !settled(&machines, &name) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        drop(permit);
    });
}
