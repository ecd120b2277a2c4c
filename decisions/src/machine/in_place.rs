//! In-place update, machine side (docs/behaviour.md#in-place-machine): the `InPlaceUpdate` node condition driven by the node's
//! update labels, the drain of a selected node and the hand-off to the node agent.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use mcm_api::keys::{annotation, condition, label, last_operation as text, value};
use mcm_api::v1alpha1::{Machine, MachineOperationType, MachinePhase, MachineState};

use crate::drain::plan::{DrainConfig, DrainOutcome, in_place_drain_config};
use crate::vocabulary::{
    EffectiveSettings, Retry, StatusWrite, current_of, current_status, last_operation, name_of,
    time,
};

fn node_label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

/// The node's `InPlaceUpdate` condition.
#[must_use]
pub fn in_place_condition(node: &Node) -> Option<&NodeCondition> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == condition::IN_PLACE_UPDATE))
}

/// Upstream `CloneAndAddCondition`: keeps the old transition time when status and reason are
/// unchanged.
fn condition_with(
    existing: Option<&NodeCondition>,
    reason: &str,
    message: String,
    now: Timestamp,
) -> NodeCondition {
    let unchanged =
        existing.is_some_and(|c| c.status == "True" && c.reason.as_deref() == Some(reason));
    NodeCondition {
        type_: condition::IN_PLACE_UPDATE.to_owned(),
        status: "True".to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message),
        last_heartbeat_time: Some(time(now)),
        last_transition_time: if unchanged {
            existing.and_then(|c| c.last_transition_time.clone())
        } else {
            Some(time(now))
        },
    }
}

/// `updateNodeConditionBasedOnLabel`: the condition to write into the node's status, if any.
#[must_use]
pub fn plan_in_place_node_condition(node: &Node, now: Timestamp) -> Option<NodeCondition> {
    node_label(node, label::CANDIDATE_FOR_UPDATE)?;
    let existing = in_place_condition(node);
    let reason = existing.and_then(|c| c.reason.as_deref());
    let result = node_label(node, label::UPDATE_RESULT);
    if existing.is_none() || (reason == Some(condition::UPDATE_SUCCESSFUL) && result.is_none()) {
        return Some(condition_with(
            existing,
            condition::CANDIDATE_FOR_UPDATE,
            "Node is a candidate for in-place update".to_owned(),
            now,
        ));
    }
    // A selected node moves Candidate -> Selected and waits while Selected (not drained yet);
    // with any later reason (ReadyForUpdate, DrainSuccessful, ...) the update-result label
    // decides, as upstream falls through to it.
    if node_label(node, label::SELECTED_FOR_UPDATE).is_some() {
        if reason == Some(condition::CANDIDATE_FOR_UPDATE) {
            return Some(condition_with(
                existing,
                condition::SELECTED_FOR_UPDATE,
                "Node is selected for in-place update".to_owned(),
                now,
            ));
        }
        if reason == Some(condition::SELECTED_FOR_UPDATE) {
            return None;
        }
    }
    match result {
        Some(value::UPDATE_SUCCESSFUL) if reason != Some(condition::UPDATE_SUCCESSFUL) => {
            Some(condition_with(
                existing,
                condition::UPDATE_SUCCESSFUL,
                "Node in-place update successful".to_owned(),
                now,
            ))
        }
        // Upstream leaves an UpdateFailed condition alone, even if the failure reason changed.
        Some(value::UPDATE_FAILED) if reason != Some(condition::UPDATE_FAILED) => {
            let why = node
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(annotation::UPDATE_FAILED_REASON))
                .cloned()
                .unwrap_or_default();
            Some(condition_with(
                existing,
                condition::UPDATE_FAILED,
                format!("Node in-place update failed: {why}"),
                now,
            ))
        }
        _ => None,
    }
}

/// Next step of `inPlaceUpdate`.
#[derive(Clone, Debug, PartialEq)]
pub enum InPlaceStep {
    /// Nothing to do: continue the reconcile.
    Continue,
    /// Cordon the node (if schedulable) and run one drain pass with this configuration; call again
    /// with the outcome.
    Drain(DrainConfig),
    /// Write these and end the pass.
    Finish(Box<InPlaceFinish>),
}

/// Writes that end an in-place pass.
#[derive(Clone, Debug, PartialEq)]
pub struct InPlaceFinish {
    /// Machine status write.
    pub status: Option<StatusWrite>,
    /// Node condition write.
    pub node_condition: Option<NodeCondition>,
    /// Next reconcile.
    pub retry: Retry,
    /// Why.
    pub reason: String,
}

/// `inPlaceUpdate` for a machine whose node carries the `InPlaceUpdate` condition.
#[must_use]
pub fn plan_in_place_update(
    machine: &Machine,
    node: &Node,
    settings: &EffectiveSettings,
    pv_detach_timeout: mcm_api::duration::Duration,
    drain: Option<&DrainOutcome>,
    now: Timestamp,
) -> InPlaceStep {
    let node_name = node.metadata.name.as_deref().unwrap_or("");
    let Some(existing) = in_place_condition(node) else {
        return InPlaceStep::Continue;
    };
    let ready = || format!("node {node_name} is ready for in-place update");
    match existing.reason.as_deref() {
        Some(condition::SELECTED_FOR_UPDATE) => {
            let selected_since = existing.last_transition_time.as_ref().map_or(now, |t| t.0);
            match drain {
                None => InPlaceStep::Drain(in_place_drain_config(
                    machine,
                    settings,
                    selected_since,
                    pv_detach_timeout,
                    now,
                )),
                Some(DrainOutcome::InProgress { next_check_at, .. }) => {
                    InPlaceStep::Finish(Box::new(InPlaceFinish {
                        status: None,
                        node_condition: None,
                        retry: Retry::After(crate::vocabulary::elapsed(now, *next_check_at)),
                        reason: "in-place drain in progress".to_owned(),
                    }))
                }
                Some(DrainOutcome::Failed { reason }) => {
                    InPlaceStep::Finish(Box::new(InPlaceFinish {
                        status: Some(StatusWrite::new(
                            last_operation(
                                format!(
                                    "Drain failed due to - {reason}. Will retry in next sync. {}",
                                    text::INITIATE_DRAIN
                                ),
                                MachineState::Processing,
                                MachineOperationType::DrainNode,
                                now,
                            ),
                            current_of(machine),
                        )),
                        node_condition: None,
                        retry: Retry::Short,
                        reason: reason.clone(),
                    }))
                }
                Some(DrainOutcome::Complete) => InPlaceStep::Finish(Box::new(InPlaceFinish {
                    status: Some(StatusWrite::new(
                        last_operation(
                            format!(
                                "Machine {} is undergoing an in-place update",
                                name_of(machine)
                            ),
                            MachineState::Processing,
                            MachineOperationType::InPlaceUpdate,
                            now,
                        ),
                        current_status(MachinePhase::InPlaceUpdating, false, now, None),
                    )),
                    node_condition: Some(condition_with(
                        Some(existing),
                        condition::DRAIN_SUCCESSFUL,
                        "Node draining successful".to_owned(),
                        now,
                    )),
                    retry: Retry::Short,
                    reason: "in-place drain successful".to_owned(),
                })),
            }
        }
        Some(condition::READY_FOR_UPDATE) => InPlaceStep::Finish(Box::new(InPlaceFinish {
            status: None,
            node_condition: None,
            retry: Retry::Medium,
            reason: ready(),
        })),
        Some(condition::DRAIN_SUCCESSFUL) => InPlaceStep::Finish(Box::new(InPlaceFinish {
            status: None,
            node_condition: Some(condition_with(
                Some(existing),
                condition::READY_FOR_UPDATE,
                "Node is ready for in-place update".to_owned(),
                now,
            )),
            retry: Retry::Medium,
            reason: ready(),
        })),
        _ => InPlaceStep::Continue,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::test_support::*;
    use crate::vocabulary::{ControllerSettings, effective_settings};
    use mcm_api::duration::Duration;

    fn labelled(labels: &[(&str, &str)], reason: Option<&str>) -> Node {
        let mut conditions = healthy_conditions();
        if let Some(reason) = reason {
            let mut c = condition(condition::IN_PLACE_UPDATE, "True", at(0));
            c.reason = Some(reason.to_owned());
            conditions.push(c);
        }
        let mut n = node("n1", conditions, vec![]);
        n.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        n
    }

    #[test]
    fn condition_follows_labels() {
        let candidate = (label::CANDIDATE_FOR_UPDATE, "true");
        let selected = (label::SELECTED_FOR_UPDATE, "true");
        assert_eq!(
            plan_in_place_node_condition(&labelled(&[], None), at(1)),
            None
        );
        let c = plan_in_place_node_condition(&labelled(&[candidate], None), at(1)).unwrap();
        assert_eq!(c.reason.as_deref(), Some("CandidateForUpdate"));
        let c = plan_in_place_node_condition(
            &labelled(&[candidate, selected], Some("CandidateForUpdate")),
            at(1),
        )
        .unwrap();
        assert_eq!(c.reason.as_deref(), Some("SelectedForUpdate"));
        assert_eq!(
            plan_in_place_node_condition(
                &labelled(&[candidate, selected], Some("SelectedForUpdate")),
                at(1)
            ),
            None
        );
        let ok = (label::UPDATE_RESULT, "successful");
        let c = plan_in_place_node_condition(
            &labelled(&[candidate, ok], Some("ReadyForUpdate")),
            at(1),
        )
        .unwrap();
        assert_eq!(c.reason.as_deref(), Some("UpdateSuccessful"));
        assert_eq!(
            plan_in_place_node_condition(
                &labelled(&[candidate, ok], Some("UpdateSuccessful")),
                at(1)
            ),
            None
        );
        let failed = (label::UPDATE_RESULT, "failed");
        let c = plan_in_place_node_condition(
            &labelled(&[candidate, failed], Some("ReadyForUpdate")),
            at(1),
        )
        .unwrap();
        assert_eq!(c.reason.as_deref(), Some("UpdateFailed"));
        // A finished update without result label starts a new round.
        let c =
            plan_in_place_node_condition(&labelled(&[candidate], Some("UpdateSuccessful")), at(1))
                .unwrap();
        assert_eq!(c.reason.as_deref(), Some("CandidateForUpdate"));
    }

    #[test]
    fn selected_node_is_drained_then_handed_over() {
        let m = machine("m1")
            .with_label("node", "n1")
            .with_phase(MachinePhase::Running, at(0))
            .with_preserve_expiry(Some(at(99)));
        let settings = effective_settings(&m, &ControllerSettings::default());
        let n = labelled(&[], Some("SelectedForUpdate"));
        let InPlaceStep::Drain(config) =
            plan_in_place_update(&m, &n, &settings, Duration::ZERO, None, at(10))
        else {
            panic!()
        };
        assert!(!config.force_delete_pods);
        // Selected longer than the drain timeout ago: forced.
        let InPlaceStep::Drain(config) =
            plan_in_place_update(&m, &n, &settings, Duration::ZERO, None, at(7201))
        else {
            panic!()
        };
        assert!(config.force_delete_pods);
        assert_eq!(config.max_evict_retries, 1);

        let InPlaceStep::Finish(f) = plan_in_place_update(
            &m,
            &n,
            &settings,
            Duration::ZERO,
            Some(&DrainOutcome::Complete),
            at(10),
        ) else {
            panic!()
        };
        let status = f.status.clone().unwrap();
        assert_eq!(
            status.current_status.phase,
            Some(MachinePhase::InPlaceUpdating)
        );
        assert_eq!(status.current_status.preserve_expiry_time, None);
        assert_eq!(
            f.node_condition.clone().unwrap().reason.as_deref(),
            Some("DrainSuccessful")
        );

        let InPlaceStep::Finish(f) = plan_in_place_update(
            &m,
            &n,
            &settings,
            Duration::ZERO,
            Some(&DrainOutcome::Failed {
                reason: "pdb".into(),
            }),
            at(10),
        ) else {
            panic!()
        };
        assert_eq!(f.retry, Retry::Short);
        assert_eq!(
            f.status
                .clone()
                .unwrap()
                .last_operation
                .description
                .as_deref(),
            Some("Drain failed due to - pdb. Will retry in next sync. Initiate node drain")
        );

        let drained = labelled(&[], Some("DrainSuccessful"));
        let InPlaceStep::Finish(f) =
            plan_in_place_update(&m, &drained, &settings, Duration::ZERO, None, at(10))
        else {
            panic!()
        };
        assert_eq!(
            f.node_condition.clone().unwrap().reason.as_deref(),
            Some("ReadyForUpdate")
        );
        assert_eq!(f.retry, Retry::Medium);
        assert_eq!(
            plan_in_place_update(
                &m,
                &labelled(&[], None),
                &settings,
                Duration::ZERO,
                None,
                at(10)
            ),
            InPlaceStep::Continue
        );
    }
}
