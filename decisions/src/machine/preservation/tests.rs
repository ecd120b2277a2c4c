#![allow(clippy::unwrap_used)]

use super::*;
use crate::machine::health::{FailurePermit, HealthInput, NodeLookup, plan_health};
use crate::test_support::*;
use crate::vocabulary::{ControllerSettings, effective_settings};
use mcm_api::duration::Duration;
use mcm_api::v1alpha1::MachinePhase as P;

fn run(
    m: &Machine,
    node: Option<&Node>,
    drain: Option<&DrainOutcome>,
    now: Timestamp,
) -> PreservationPlan {
    let settings = effective_settings(m, &ControllerSettings::default());
    plan_preservation(&PreservationInput {
        machine: m,
        node,
        settings: &settings,
        pv_detach_timeout: Duration::from_mins(2),
        drain,
        now,
    })
}

fn annotated_node(value: Option<&str>) -> Node {
    let mut n = node("n1", healthy_conditions(), vec![]);
    if let Some(value) = value {
        n.metadata.annotations = Some([(annotation::PRESERVE.to_owned(), value.to_owned())].into());
    }
    n
}

fn status_writes(plan: &PreservationPlan) -> Vec<&StatusWrite> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            PreservationAction::Status(w) => Some(w),
            _ => None,
        })
        .collect()
}

fn condition_of(plan: &PreservationPlan) -> Option<&NodeCondition> {
    plan.actions.iter().find_map(|a| match a {
        PreservationAction::NodeCondition(c) => Some(c),
        _ => None,
    })
}

/// Applies the node-side actions to a node (what the shell would write).
fn apply_node(node: &mut Node, plan: &PreservationPlan) {
    for action in &plan.actions {
        match action {
            PreservationAction::NodeAnnotations(changes) => {
                crate::vocabulary::set_entries(&mut node.metadata.annotations, changes);
            }
            PreservationAction::NodeCondition(c) => {
                let conditions = node
                    .status
                    .as_mut()
                    .unwrap()
                    .conditions
                    .get_or_insert_with(Vec::new);
                conditions.retain(|x| x.type_ != c.type_);
                conditions.push(c.clone());
            }
            PreservationAction::AddNodeTaint(t) => node
                .spec
                .as_mut()
                .unwrap()
                .taints
                .get_or_insert_with(Vec::new)
                .push(t.clone()),
            PreservationAction::RemoveNodeTaint { key, effect } => {
                if let Some(taints) = node.spec.as_mut().unwrap().taints.as_mut() {
                    taints.retain(|t| !(t.key == *key && t.effect == *effect));
                }
            }
            _ => {}
        }
    }
}

fn apply_machine(m: &mut Machine, plan: &PreservationPlan) {
    for action in &plan.actions {
        match action {
            PreservationAction::Status(w) => m.status = Some(w.apply(m.status.as_ref())),
            PreservationAction::MachineAnnotations(changes) => {
                crate::vocabulary::set_entries(&mut m.metadata.annotations, changes);
            }
            _ => {}
        }
    }
}

#[test]
fn not_bound_does_nothing() {
    let m = machine("m1")
        .with_label("node", "n1")
        .with_phase(P::Running, at(0));
    let plan = run(&m, Some(&annotated_node(None)), None, at(10));
    assert!(plan.actions.is_empty());
    assert_eq!(
        plan.outcome,
        PreservationOutcome::Done { retry: Retry::Long }
    );
}

/// The Preserved condition prints the expiry as upstream's `%v` of a `metav1.Time` does (Go's
/// `time.Time.String()` of the stored, whole-second value), not RFC 3339.
#[test]
fn preserved_condition_prints_the_expiry_like_go() {
    let m = machine("m1")
        .with_label("node", "n1")
        .with_phase(P::Running, at(0));
    // A clock reading with a fraction: the stored expiry has whole seconds.
    let now = Timestamp::new(1_800_000_010, 750_000_000).unwrap();
    let plan = run(&m, Some(&annotated_node(Some("now"))), None, now);
    assert_eq!(
        condition_of(&plan).unwrap().message.as_deref(),
        Some("Machine preserved until 2027-01-19 08:00:10 +0000 UTC.")
    );

    let failed = machine("m1")
        .with_label("node", "n1")
        .with_phase(P::Failed, at(0))
        .with_preserve_expiry(Some(at(3600)));
    let n = annotated_node(Some("now"));
    for (drain, expected) in [
        (
            DrainOutcome::Complete,
            "Preserved node drained successfully. Machine preserved until 2027-01-15 09:00:00 +0000 UTC.",
        ),
        (
            DrainOutcome::Failed {
                reason: "pdb".into(),
            },
            "Preserved node could not be drained. Machine preserved until 2027-01-15 09:00:00 +0000 UTC.",
        ),
    ] {
        let plan = run(&failed, Some(&n), Some(&drain), at(11));
        assert_eq!(
            condition_of(&plan).unwrap().message.as_deref(),
            Some(expected)
        );
    }
}

#[test]
fn preserve_now_on_running_machine() {
    let m = machine("m1")
        .with_label("node", "n1")
        .with_phase(P::Running, at(0));
    let mut n = annotated_node(Some("now"));
    let plan = run(&m, Some(&n), None, at(10));
    let writes = status_writes(&plan);
    assert_eq!(writes.len(), 1);
    let current = &writes[0].current_status;
    assert_eq!(current.preserve_expiry_time, Some(Time(at(10 + 96 * 3600))));
    assert_eq!(current.phase, Some(P::Running));
    assert_eq!(current.last_update_time, Some(Time(at(10))));
    // CA annotations with the marker.
    assert!(plan.actions.iter().any(|a| matches!(a, PreservationAction::NodeAnnotations(c)
        if c.get(annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED) == Some(&Some("true".into()))
        && c.get(annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_BY_MCM) == Some(&Some("true".into())))));
    let c = condition_of(&plan).unwrap();
    assert_eq!(c.status, "True");
    assert_eq!(c.reason.as_deref(), Some("Preserved by user."));
    // Machine records the adopted node value.
    assert!(
        plan.actions
            .iter()
            .any(|a| matches!(a, PreservationAction::MachineAnnotations(c)
        if c.get(annotation::LAST_APPLIED_NODE_PRESERVE_VALUE) == Some(&Some("now".into()))))
    );
    // No drain for a running machine.
    assert_eq!(
        plan.outcome,
        PreservationOutcome::Done { retry: Retry::Long }
    );

    // Second pass on the written objects: nothing left to do.
    let mut m2 = m.clone();
    apply_machine(&mut m2, &plan);
    apply_node(&mut n, &plan);
    let again = run(&m2, Some(&n), None, at(20));
    assert!(again.actions.is_empty(), "{:?}", again.actions);

    // A user flips the CA annotation: re-asserted.
    n.metadata.annotations.as_mut().unwrap().insert(
        annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED.into(),
        "false".into(),
    );
    let again = run(&m2, Some(&n), None, at(30));
    assert!(matches!(
        &again.actions[..],
        [PreservationAction::NodeAnnotations(_)]
    ));
}

#[test]
fn node_value_wins_over_machine_value() {
    let m = machine("m1")
        .with_label("node", "n1")
        .with_phase(P::Running, at(0))
        .with_annotation(annotation::PRESERVE, "now");
    let plan = run(&m, Some(&annotated_node(Some("false"))), None, at(10));
    assert!(status_writes(&plan).is_empty(), "node says false");
    // Node absent: the machine's value counts.
    let plan = run(&m, None, None, at(10));
    assert_eq!(status_writes(&plan).len(), 1);
}

#[test]
fn invalid_node_value_disables_handling() {
    let m = machine("m1")
        .with_label("node", "n1")
        .with_phase(P::Failed, at(0))
        .with_preserve_expiry(Some(at(5)));
    let plan = run(&m, Some(&annotated_node(Some("yes"))), None, at(10));
    assert!(plan.actions.is_empty());
    assert_eq!(plan.events[0].reason, "InvalidPreserveValue");
    // On the machine an invalid value is ignored (treated as absent).
    let m = machine("m1")
        .with_phase(P::Running, at(0))
        .with_annotation(annotation::PRESERVE, "yes");
    assert!(run(&m, None, None, at(10)).actions.is_empty());
}

#[test]
fn when_failed_preserves_only_failed_and_drains_behind_taint() {
    let running = machine("m1")
        .with_label("node", "n1")
        .with_phase(P::Running, at(0));
    let n = annotated_node(Some("when-failed"));
    let plan = run(&running, Some(&n), None, at(10));
    assert!(status_writes(&plan).is_empty());

    let failed = machine("m1")
        .with_label("node", "n1")
        .with_phase(P::Failed, at(0));
    let plan = run(&failed, Some(&n), None, at(10));
    assert!(plan.actions.iter().any(|a| matches!(a, PreservationAction::AddNodeTaint(t) if t.key == taint::PRESERVED && t.effect == "NoSchedule")));
    let PreservationOutcome::NeedsDrain(config) = &plan.outcome else {
        panic!("{:?}", plan.outcome)
    };
    assert!(!config.force_delete_machine);

    // After the drain: condition says drained, status True.
    let mut m2 = failed.clone();
    apply_machine(&mut m2, &plan);
    let mut n2 = n.clone();
    apply_node(&mut n2, &plan);
    let plan = run(&m2, Some(&n2), Some(&DrainOutcome::Complete), at(11));
    let c = condition_of(&plan).unwrap();
    assert_eq!(c.status, "True");
    assert!(
        c.message
            .as_deref()
            .unwrap()
            .starts_with("Preserved node drained successfully. Machine preserved until ")
    );
    apply_node(&mut n2, &plan);
    // Drained: no more drains.
    let plan = run(&m2, Some(&n2), None, at(12));
    assert!(!matches!(plan.outcome, PreservationOutcome::NeedsDrain(_)));

    // A failed drain is reported and retried.
    let plan = run(
        &m2,
        Some(&n),
        Some(&DrainOutcome::Failed {
            reason: "pdb".into(),
        }),
        at(11),
    );
    let c = condition_of(&plan).unwrap();
    assert_eq!(c.status, "False");
    assert!(
        c.message
            .as_deref()
            .unwrap()
            .starts_with("Preserved node could not be drained.")
    );
    assert_eq!(
        plan.outcome,
        PreservationOutcome::Done {
            retry: Retry::Short
        }
    );
}

#[test]
fn preserved_drain_forced_by_label() {
    let failed = machine("m1")
        .with_label("node", "n1")
        .with_label("force-drain", "True")
        .with_phase(P::Failed, at(0));
    let plan = run(&failed, Some(&annotated_node(Some("now"))), None, at(10));
    let PreservationOutcome::NeedsDrain(config) = plan.outcome else {
        panic!()
    };
    assert!(config.force_delete_pods);
    assert_eq!(config.max_evict_retries, 1);
    // "true" (lower case) is not the magic value for force-drain.
    let failed = machine("m1")
        .with_label("node", "n1")
        .with_label("force-drain", "true")
        .with_phase(P::Failed, at(0));
    let PreservationOutcome::NeedsDrain(config) =
        run(&failed, Some(&annotated_node(Some("now"))), None, at(10)).outcome
    else {
        panic!()
    };
    assert!(!config.force_delete_pods);
}

#[test]
fn release_on_false_and_on_expiry() {
    let mut n = annotated_node(Some("false"));
    n.metadata.annotations.as_mut().unwrap().insert(
        annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED.into(),
        "true".into(),
    );
    n.metadata.annotations.as_mut().unwrap().insert(
        annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_BY_MCM.into(),
        "true".into(),
    );
    n.spec.as_mut().unwrap().taints = Some(vec![taint(taint::PRESERVED, "NoSchedule")]);
    let m = machine("m1")
        .with_label("node", "n1")
        .with_phase(P::Failed, at(0))
        .with_preserve_expiry(Some(at(1000)))
        .with_annotation(annotation::LAST_APPLIED_NODE_PRESERVE_VALUE, "now");
    let plan = run(&m, Some(&n), None, at(10));
    let c = condition_of(&plan).unwrap();
    assert_eq!(c.reason.as_deref(), Some("Preservation stopped."));
    assert!(plan.actions.iter().any(
        |a| matches!(a, PreservationAction::RemoveNodeTaint { key, .. } if key == taint::PRESERVED)
    ));
    assert!(plan.actions.iter().any(|a| matches!(a, PreservationAction::NodeAnnotations(c) if c.get(annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED) == Some(&None))));
    let writes = status_writes(&plan);
    assert_eq!(
        writes.last().unwrap().current_status.preserve_expiry_time,
        None
    );
    // The "false" is adopted as last applied (annotations kept).
    assert!(plan.actions.iter().any(|a| matches!(a, PreservationAction::MachineAnnotations(c) if c.get(annotation::LAST_APPLIED_NODE_PRESERVE_VALUE) == Some(&Some("false".into())))));

    // CA annotations set by someone else stay.
    let mut foreign = n.clone();
    foreign
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .remove(annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_BY_MCM);
    let plan = run(&m, Some(&foreign), None, at(10));
    assert!(!plan.actions.iter().any(|a| matches!(a, PreservationAction::NodeAnnotations(c) if c.contains_key(annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED))));

    // Expired "now": stopped and annotations removed on both objects.
    let n = annotated_node(Some("now"));
    let plan = run(&m, Some(&n), None, at(1000));
    assert!(plan.actions.iter().any(|a| matches!(a, PreservationAction::NodeAnnotations(c) if c.get(annotation::PRESERVE) == Some(&None))));
    assert!(plan.actions.iter().any(|a| matches!(a, PreservationAction::MachineAnnotations(c) if c.get(annotation::PRESERVE) == Some(&None) && c.get(annotation::LAST_APPLIED_NODE_PRESERVE_VALUE) == Some(&None))));
}

#[test]
fn auto_preserved_stops_when_machine_recovers() {
    let m = machine("m1")
        .with_phase(P::Running, at(0))
        .with_preserve_expiry(Some(at(1000)))
        .with_annotation(annotation::PRESERVE, "auto-preserved");
    let plan = run(&m, None, None, at(10));
    assert_eq!(
        status_writes(&plan)
            .last()
            .unwrap()
            .current_status
            .preserve_expiry_time,
        None
    );
    assert!(plan.actions.iter().any(|a| matches!(a, PreservationAction::MachineAnnotations(c) if c.get(annotation::PRESERVE) == Some(&None))));
}

#[test]
fn preserved_failed_machine_whose_node_recovers_becomes_preserved_running() {
    // Failed + preserved ("now"), node tainted and drained, then the node becomes healthy.
    let mut n = annotated_node(Some("now"));
    n.spec.as_mut().unwrap().taints = Some(vec![taint(taint::PRESERVED, "NoSchedule")]);
    let m = machine("m1")
        .with_label("node", "n1")
        .with_phase(P::Failed, at(0))
        .with_conditions(vec![condition("Ready", "False", at(0))])
        .with_preserve_expiry(Some(at(50_000)));
    let settings = effective_settings(&m, &ControllerSettings::default());
    let health = plan_health(&HealthInput {
        machine: &m,
        node: NodeLookup::Found(&n),
        settings: &settings,
        siblings: &[],
        meltdown_threshold: 0.0,
        permit: FailurePermit::NotRequested,
        now: at(100),
    });
    let write = health.status.unwrap();
    assert_eq!(write.current_status.phase, Some(P::Running));
    assert_eq!(
        write.current_status.preserve_expiry_time,
        Some(Time(at(50_000))),
        "health keeps the preservation"
    );
    let mut running = m.clone();
    running.status = Some(write.apply(m.status.as_ref()));
    let plan = run(&running, Some(&n), None, at(101));
    assert!(plan.actions.iter().any(
        |a| matches!(a, PreservationAction::RemoveNodeTaint { key, .. } if key == taint::PRESERVED)
    ));
    assert!(
        !status_writes(&plan)
            .iter()
            .any(|w| w.current_status.preserve_expiry_time.is_none())
    );
}
