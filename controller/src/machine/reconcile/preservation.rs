//! Executes machine preservation (docs/behaviour.md#preservation, docs/behaviour.md#preservation-scope) planned by
//! [`plan::preservation::plan_preservation`]: `preserveExpiryTime`, the `Preserved` node
//! condition, the cluster-autoscaler scale-down-disabled annotation (re-asserted when a user
//! flips it), the preserved NoSchedule taint, and the release on expiry or `false`.
//!
//! Which failed machines are auto-preserved is decided by the MachineSet controller (it sets the
//! `auto-preserved` value); this step only executes the value it finds. A preserved failed
//! machine's node is drained with the shared drain executor ([`crate::drain::reconcile`]).

use std::ops::ControlFlow;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use mcm_api::v1alpha1::Machine;

use super::writes::{self, NodeCopy};
use super::{MachineController, StepFlow};
use crate::drain::reconcile::{NodeDrainState, drain_pass};
use crate::platform::error::ApiError;
use crate::platform::metrics::DrainLabels;
use mcm_decisions::drain::plan::{DrainConfig, DrainOutcome};
use mcm_decisions::machine as plan;
use mcm_decisions::machine::preservation::{
    PreservationAction, PreservationInput, PreservationOutcome, PreservationPlan,
};
use mcm_decisions::vocabulary::{
    Retry, effective_settings, elapsed, name_of, node_name_of, preserve_expiry_of,
};

impl MachineController {
    /// `manageMachinePreservation`.
    pub(crate) async fn preservation(
        &self,
        machine: &mut Machine,
        now: Timestamp,
    ) -> Result<StepFlow, ApiError> {
        let settings = effective_settings(machine, &self.settings);
        let mut node: Option<Node> = node_name_of(machine)
            .and_then(|node| self.context.nodes.get(node))
            .map(|node| Node::clone(&node));
        let plan = plan::preservation::plan_preservation(&PreservationInput {
            machine,
            node: node.as_ref(),
            settings: &settings,
            pv_detach_timeout: self.settings.pv_detach_timeout,
            drain: None,
            now,
        });
        if let Some(end) = self
            .execute_preservation(machine, &mut node, &plan, now)
            .await
        {
            return Ok(end);
        }
        let mut retry = match plan.outcome {
            PreservationOutcome::Done { retry } => retry,
            PreservationOutcome::NeedsDrain(config) => {
                let outcome = self
                    .preserved_drain(machine, node.as_ref(), &config, now)
                    .await;
                let after = plan::preservation::plan_preservation(&PreservationInput {
                    machine,
                    node: node.as_ref(),
                    settings: &settings,
                    pv_detach_timeout: self.settings.pv_detach_timeout,
                    drain: Some(&outcome),
                    now,
                });
                if let Some(end) = self
                    .execute_preservation(machine, &mut node, &after, now)
                    .await
                {
                    return Ok(end);
                }
                match after.outcome {
                    PreservationOutcome::Done { retry } => retry,
                    PreservationOutcome::NeedsDrain(_) => Retry::Short,
                }
            }
        };
        // The release on expiry happens in the first pass after the expiry time.
        if let Some(expiry) = preserve_expiry_of(machine)
            && expiry.0 > now
        {
            let until = elapsed(now, expiry.0);
            let until = mcm_api::duration::Duration::from_nanos(
                until.as_nanos().saturating_add(1_000_000_000),
            );
            retry = retry.min(Retry::After(until));
        }
        Ok(ControlFlow::Continue(Some(retry)))
    }

    /// Records the plan's events and runs its actions in order; `Some` ends the pass.
    async fn execute_preservation(
        &self,
        machine: &mut Machine,
        node: &mut Option<Node>,
        plan: &PreservationPlan,
        now: Timestamp,
    ) -> Option<StepFlow> {
        let name = name_of(machine).to_owned();
        self.events(machine, &plan.events);
        for action in &plan.actions {
            if let Err(error) = self.preservation_action(machine, node, action, now).await {
                if error.is_not_found() {
                    return Some(ControlFlow::Continue(Some(Retry::Long)));
                }
                tracing::info!(machine = %name, %error, ?action, "preservation step failed");
                return Some(ControlFlow::Break(error.retry()));
            }
        }
        if !plan.actions.is_empty() {
            tracing::info!(machine = %name, actions = plan.actions.len(), "preservation updated");
        }
        None
    }

    /// One drain pass of a preserved failed machine's node (the drain state is kept per node
    /// between passes and dropped when the drain ends).
    async fn preserved_drain(
        &self,
        machine: &Machine,
        node: Option<&Node>,
        config: &DrainConfig,
        now: Timestamp,
    ) -> DrainOutcome {
        let (Some(node_name), Some(client)) = (node_name_of(machine), self.context.target.as_ref())
        else {
            return DrainOutcome::Failed {
                reason: "no node or no target cluster to drain".to_owned(),
            };
        };
        let mut state = self
            .drain_states
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(node_name)
            .unwrap_or_else(|| NodeDrainState::new(now));
        let provider = self.context.class_provider(machine);
        let target = self.context.drain_target(client, &provider);
        let outcome = drain_pass(&target, node_name, node, config, &mut state, now).await;
        match &outcome {
            DrainOutcome::InProgress { .. } => {
                self.drain_states
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .insert(node_name.to_owned(), state);
            }
            DrainOutcome::Complete => {
                if let Some(labels) = DrainLabels::for_machine(machine) {
                    let seconds = now.duration_since(state.started).as_secs_f64();
                    self.context.metrics.machine_drained(&labels, seconds);
                }
                tracing::info!(
                    machine = name_of(machine),
                    node = node_name,
                    "preserved node drained"
                );
            }
            DrainOutcome::Failed { reason } => {
                tracing::info!(machine = name_of(machine), node = node_name, %reason, "preserved node drain failed");
            }
        }
        outcome
    }

    async fn preservation_action(
        &self,
        machine: &mut Machine,
        node: &mut Option<Node>,
        action: &PreservationAction,
        now: Timestamp,
    ) -> Result<(), ApiError> {
        match action {
            PreservationAction::Status(write) => {
                *machine = writes::write_status(&self.context, machine, write, now).await?;
            }
            PreservationAction::MachineAnnotations(changes) => {
                *machine = writes::set_machine_annotations(&self.context, machine, changes).await?;
            }
            PreservationAction::NodeAnnotations(changes) => {
                if let Some(current) = node.as_ref() {
                    *node =
                        Some(writes::set_node_annotations(&self.context, current, changes).await?);
                }
            }
            PreservationAction::NodeCondition(condition) => {
                if let Some(current) = node.as_ref() {
                    *node = Some(
                        writes::set_node_condition(
                            &self.context,
                            current,
                            NodeCopy::Cached,
                            condition,
                        )
                        .await?,
                    );
                }
            }
            PreservationAction::AddNodeTaint(taint) => {
                if let Some(current) = node.as_ref() {
                    *node = Some(writes::add_node_taint(&self.context, current, taint).await?);
                }
            }
            PreservationAction::RemoveNodeTaint { key, effect } => {
                if let Some(current) = node.as_ref() {
                    let remove = [(key.clone(), effect.clone())];
                    *node =
                        Some(writes::remove_node_taints(&self.context, current, &remove).await?);
                }
            }
        }
        Ok(())
    }
}
