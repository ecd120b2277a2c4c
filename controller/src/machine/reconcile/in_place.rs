//! Executes the machine side of in-place updates (docs/behaviour.md#in-place-machine): the node's `InPlaceUpdate` condition
//! driven by the update labels ([`plan::in_place::plan_in_place_node_condition`]), and for a
//! selected node the cordon, the drain (shared drain executor) and the hand-off to the node
//! agent ([`plan::in_place::plan_in_place_update`]).
//!
//! The outcome of the update (the node's `update-result` label) and the in-place timeout are
//! read by the health check ([`super::health`]), which moves the machine from `InPlaceUpdating`
//! to `InPlaceUpdateSuccessful`/`InPlaceUpdateFailed` and on to `Running`/`Failed`.

use std::ops::ControlFlow;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use mcm_api::keys::{condition, label};
use mcm_api::v1alpha1::{Machine, MachinePhase};

use super::writes::{self, NodeCopy};
use super::{MachineController, StepFlow};
use crate::drain::reconcile::{NodeDrainState, drain_pass};
use crate::platform::error::ApiError;
use crate::platform::metrics::DrainLabels;
use mcm_decisions::drain::plan::{DrainConfig, DrainOutcome};
use mcm_decisions::machine as plan;
use mcm_decisions::machine::in_place::{InPlaceFinish, InPlaceStep, in_place_condition};
use mcm_decisions::vocabulary::{Event, Retry, effective_settings, name_of, node_name_of};

/// The event that tells a user why the node's `InPlaceUpdate` condition changed.
fn condition_event(node: &str, written: &NodeCondition) -> Event {
    let reason = written.reason.as_deref().unwrap_or_default();
    let message = format!(
        "Node {node}: {}",
        written.message.as_deref().unwrap_or(reason)
    );
    match reason {
        condition::UPDATE_FAILED => Event::warning("NodeUpdateFailed", message),
        condition::UPDATE_SUCCESSFUL => Event::normal("NodeUpdateSuccessful", message),
        condition::SELECTED_FOR_UPDATE => Event::normal("NodeSelectedForUpdate", message),
        condition::CANDIDATE_FOR_UPDATE => Event::normal("NodeCandidateForUpdate", message),
        condition::DRAIN_SUCCESSFUL => Event::normal("NodeDrainedForUpdate", message),
        condition::READY_FOR_UPDATE => Event::normal("NodeReadyForUpdate", message),
        _ => Event::normal("NodeInPlaceUpdateCondition", message),
    }
}

/// The event of an in-place phase the health check moved the machine to (`None` for others).
pub(crate) fn in_place_phase_event(
    before: Option<&MachinePhase>,
    after: &Machine,
) -> Option<Event> {
    let phase = after.phase()?;
    if before == Some(phase) {
        return None;
    }
    let description = after
        .last_operation()
        .and_then(|op| op.description.clone())
        .unwrap_or_default();
    match phase {
        MachinePhase::InPlaceUpdating => Some(Event::normal("InPlaceUpdating", description)),
        MachinePhase::InPlaceUpdateSuccessful => {
            Some(Event::normal("InPlaceUpdateSuccessful", description))
        }
        MachinePhase::InPlaceUpdateFailed => {
            Some(Event::warning("InPlaceUpdateFailed", description))
        }
        _ => None,
    }
}

impl MachineController {
    /// `updateNodeConditionBasedOnLabel`: writes the condition the node's update labels call for.
    pub(crate) async fn in_place_node_condition(
        &self,
        machine: &Machine,
        now: Timestamp,
    ) -> Result<StepFlow, ApiError> {
        let Some(node) = node_name_of(machine).and_then(|node| self.context.nodes.get(node)) else {
            return Ok(ControlFlow::Continue(None));
        };
        let Some(wanted) = plan::in_place::plan_in_place_node_condition(&node, now) else {
            return Ok(ControlFlow::Continue(None));
        };
        let stored =
            writes::set_node_condition(&self.context, &node, NodeCopy::Cached, &wanted).await?;
        let node_name = stored.metadata.name.as_deref().unwrap_or_default();
        tracing::info!(
            machine = name_of(machine),
            node = node_name,
            reason = wanted.reason.as_deref().unwrap_or_default(),
            "in-place update condition set"
        );
        self.event(machine, &condition_event(node_name, &wanted));
        Ok(ControlFlow::Continue(None))
    }

    /// `inPlaceUpdate`: drains a node selected for update and hands it to the node agent.
    pub(crate) async fn in_place_update(
        &self,
        machine: &mut Machine,
        now: Timestamp,
    ) -> Result<StepFlow, ApiError> {
        let Some(node_name) = node_name_of(machine).map(str::to_owned) else {
            return Ok(ControlFlow::Continue(None));
        };
        // The cache only tells whether there is anything to do (a condition, or a candidate
        // label whose condition the previous step may have just written); the decision reads
        // the live condition.
        let involved = self.context.nodes.get(&node_name).is_some_and(|node| {
            in_place_condition(&node).is_some()
                || node
                    .metadata
                    .labels
                    .as_ref()
                    .is_some_and(|labels| labels.contains_key(label::CANDIDATE_FOR_UPDATE))
        });
        let draining = self
            .in_place_drains
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .contains_key(&node_name);
        if !involved && !draining {
            return Ok(ControlFlow::Continue(None));
        }
        let Some(mut node) = writes::nodes_api(&self.context)?
            .get_opt(&node_name)
            .await
            .map_err(|source| ApiError::Api {
                action: "get",
                kind: "Node",
                name: node_name.clone(),
                source,
            })?
        else {
            return Ok(ControlFlow::Continue(None));
        };
        let settings = effective_settings(machine, &self.settings);
        let pv_detach_timeout = self.settings.pv_detach_timeout;
        let finish = match plan::in_place::plan_in_place_update(
            machine,
            &node,
            &settings,
            pv_detach_timeout,
            None,
            now,
        ) {
            InPlaceStep::Continue => {
                self.forget_in_place_drain(&node_name);
                return Ok(ControlFlow::Continue(None));
            }
            InPlaceStep::Finish(finish) => finish,
            InPlaceStep::Drain(config) => {
                let outcome = self.in_place_drain(machine, &mut node, &config, now).await;
                match plan::in_place::plan_in_place_update(
                    machine,
                    &node,
                    &settings,
                    pv_detach_timeout,
                    Some(&outcome),
                    now,
                ) {
                    InPlaceStep::Finish(finish) => finish,
                    // The plan answers every drain outcome with a finish; never loop.
                    InPlaceStep::Continue | InPlaceStep::Drain(_) => {
                        return Ok(ControlFlow::Break(Retry::Short));
                    }
                }
            }
        };
        self.finish_in_place(machine, &node, &finish, now).await
    }

    /// Writes what ends an in-place pass and ends it.
    async fn finish_in_place(
        &self,
        machine: &mut Machine,
        node: &Node,
        finish: &InPlaceFinish,
        now: Timestamp,
    ) -> Result<StepFlow, ApiError> {
        let name = name_of(machine).to_owned();
        let node_name = node.metadata.name.as_deref().unwrap_or_default();
        if let Some(write) = &finish.status {
            match writes::write_status(&self.context, machine, write, now).await {
                Ok(stored) => {
                    if let Some(event) = in_place_phase_event(machine.phase(), &stored) {
                        self.event(&stored, &event);
                    }
                    *machine = stored;
                }
                Err(error) => {
                    tracing::info!(machine = %name, %error, "cannot write the in-place status");
                    return Ok(ControlFlow::Break(error.retry()));
                }
            }
        }
        if let Some(wanted) = &finish.node_condition {
            // `node` was read live at the start of the in-place pass (or is a write's answer).
            match writes::set_node_condition(&self.context, node, NodeCopy::Live, wanted).await {
                Ok(_) => self.event(machine, &condition_event(node_name, wanted)),
                Err(error) => {
                    tracing::info!(machine = %name, node = node_name, %error, "cannot write the in-place node condition");
                    return Ok(ControlFlow::Break(error.retry()));
                }
            }
        }
        tracing::info!(machine = %name, node = node_name, reason = %finish.reason, "in-place update pass ended");
        Ok(ControlFlow::Break(finish.retry))
    }

    /// Cordons the node (`node` becomes the stored object) and runs one drain pass (the drain
    /// state is kept per node between passes and dropped when the drain ends).
    async fn in_place_drain(
        &self,
        machine: &Machine,
        node: &mut Node,
        config: &DrainConfig,
        now: Timestamp,
    ) -> DrainOutcome {
        let name = name_of(machine);
        let node_name = node.metadata.name.clone().unwrap_or_default();
        let node_name = node_name.as_str();
        let Some(client) = self.context.target.as_ref() else {
            return DrainOutcome::Failed {
                reason: "no target cluster to drain".to_owned(),
            };
        };
        match writes::cordon_node(&self.context, node).await {
            Ok(Some(stored)) => {
                *node = stored;
                tracing::info!(
                    machine = name,
                    node = node_name,
                    "node cordoned for in-place update"
                );
                self.event(
                    machine,
                    &Event::normal(
                        "NodeCordoned",
                        format!(
                            "Node {node_name} cordoned for the in-place update of machine {name}"
                        ),
                    ),
                );
            }
            Ok(None) => {}
            Err(error) => {
                return DrainOutcome::Failed {
                    reason: format!("cannot cordon node {node_name}: {error}"),
                };
            }
        }
        let mut state = self
            .in_place_drains
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(node_name)
            .unwrap_or_else(|| NodeDrainState::new(now));
        let provider = self.context.class_provider(machine);
        let target = self.context.drain_target(client, &provider);
        let outcome = drain_pass(&target, node_name, Some(&*node), config, &mut state, now).await;
        match &outcome {
            DrainOutcome::InProgress { .. } => {
                self.in_place_drains
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
                    machine = name,
                    node = node_name,
                    "node drained for in-place update"
                );
            }
            DrainOutcome::Failed { reason } => {
                tracing::info!(machine = name, node = node_name, %reason, "in-place drain failed");
                self.event(
                    machine,
                    &Event::warning(
                        "InPlaceDrainFailed",
                        format!(
                            "Drain of node {node_name} for the in-place update failed: {reason}"
                        ),
                    ),
                );
            }
        }
        outcome
    }

    fn forget_in_place_drain(&self, node: &str) {
        self.in_place_drains
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(node);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use mcm_api::v1alpha1::{MachineOperationType, MachineState};
    use mcm_decisions::test_support::{MachineExt, at, machine};
    use mcm_decisions::vocabulary::EventType;

    fn in_phase(phase: MachinePhase, description: &str) -> Machine {
        machine("m1").with_phase(phase, at(1)).with_operation(
            description,
            MachineState::Processing,
            MachineOperationType::InPlaceUpdate,
            at(1),
        )
    }

    #[test]
    fn entering_an_in_place_phase_is_told_once_with_the_operation_text() {
        let failed = in_phase(MachinePhase::InPlaceUpdateFailed, "failed: kernel mismatch");
        let event = in_place_phase_event(Some(&MachinePhase::InPlaceUpdating), &failed).unwrap();
        assert_eq!(event.reason, "InPlaceUpdateFailed");
        assert_eq!(event.type_, EventType::Warning);
        assert_eq!(event.message, "failed: kernel mismatch");
        // Staying in the phase (a rewrite of the same status) is not news.
        assert!(in_place_phase_event(Some(&MachinePhase::InPlaceUpdateFailed), &failed).is_none());
        let ok = in_place_phase_event(
            Some(&MachinePhase::InPlaceUpdating),
            &in_phase(MachinePhase::InPlaceUpdateSuccessful, "updated"),
        )
        .unwrap();
        assert_eq!(
            (ok.reason.as_str(), ok.type_),
            ("InPlaceUpdateSuccessful", EventType::Normal)
        );
        // Other phases have their own events (health check, creation).
        assert!(
            in_place_phase_event(
                Some(&MachinePhase::InPlaceUpdateSuccessful),
                &in_phase(MachinePhase::Running, "re-joined"),
            )
            .is_none()
        );
        // A machine without a status has no phase to tell about.
        assert!(in_place_phase_event(None, &machine("m2")).is_none());
    }

    #[test]
    fn condition_events_name_the_node_and_warn_only_on_failure() {
        let written = |reason: &str, message: Option<&str>| NodeCondition {
            type_: condition::IN_PLACE_UPDATE.to_owned(),
            status: "True".to_owned(),
            reason: Some(reason.to_owned()),
            message: message.map(str::to_owned),
            ..NodeCondition::default()
        };
        let failed = condition_event(
            "n1",
            &written(
                condition::UPDATE_FAILED,
                Some("Node in-place update failed: x"),
            ),
        );
        assert_eq!(failed.reason, "NodeUpdateFailed");
        assert_eq!(failed.type_, EventType::Warning);
        assert_eq!(failed.message, "Node n1: Node in-place update failed: x");
        let selected = condition_event("n1", &written(condition::SELECTED_FOR_UPDATE, None));
        assert_eq!(selected.reason, "NodeSelectedForUpdate");
        assert_eq!(selected.type_, EventType::Normal);
        assert_eq!(selected.message, "Node n1: SelectedForUpdate");
        let unknown = condition_event("n1", &written("SomethingNew", Some("m")));
        assert_eq!(unknown.reason, "NodeInPlaceUpdateCondition");
    }
}
