#![allow(clippy::unwrap_used)]

use super::*;
use crate::test_support::*;
use crate::vocabulary::{ControllerSettings, effective_settings};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use mcm_api::v1alpha1::MachinePhase as P;

fn run(
    machine: &Machine,
    node: Option<&Node>,
    siblings: &[Machine],
    permit: FailurePermit,
    now: Timestamp,
) -> HealthPlan {
    run_guarded(machine, node, siblings, permit, now, 0.0)
}

fn run_guarded(
    machine: &Machine,
    node: Option<&Node>,
    siblings: &[Machine],
    permit: FailurePermit,
    now: Timestamp,
    meltdown_threshold: f64,
) -> HealthPlan {
    let settings = effective_settings(machine, &ControllerSettings::default());
    let siblings: Vec<std::sync::Arc<Machine>> =
        siblings.iter().cloned().map(std::sync::Arc::new).collect();
    let siblings = siblings.as_slice();
    plan_health(&HealthInput {
        machine,
        node: node.map_or(NodeLookup::NotFound, NodeLookup::Found),
        settings: &settings,
        siblings,
        meltdown_threshold,
        permit,
        now,
    })
}

fn phase_written(plan: &HealthPlan) -> Option<MachinePhase> {
    plan.status
        .as_ref()
        .and_then(|status| status.current_status.phase.clone())
}

fn base() -> Machine {
    machine("shoot-worker-abcde")
        .with_label("node", "n1")
        .with_label("name", "md1")
}

#[test]
fn pending_becomes_running_on_healthy_node_and_first_join_is_recorded() {
    let m = base().with_phase(P::Pending, at(10)).with_operation(
        "Creating machine on cloud provider",
        MachineState::Processing,
        MachineOperationType::Create,
        at(10),
    );
    let n = node(
        "n1",
        healthy_conditions(),
        vec![
            taint(INSTANCE_NOT_READY_TAINT, "NoSchedule"),
            taint("other", "NoSchedule"),
        ],
    );
    let plan = run(&m, Some(&n), &[], FailurePermit::NotRequested, at(100));
    assert_eq!(phase_written(&plan), Some(P::Running));
    let status = plan.status.as_ref().unwrap();
    assert_eq!(
        status.last_operation.description.as_deref(),
        Some("Machine shoot-worker-abcde successfully joined the cluster in 1m40s")
    );
    assert_eq!(
        status.last_operation.type_,
        Some(MachineOperationType::Create)
    );
    assert_eq!(status.conditions.as_ref().unwrap().len(), 5);
    assert_eq!(
        plan.delete_bootstrap_token.as_deref(),
        Some("bootstrap-token-616263")
    );
    assert_eq!(plan.join_duration, Some(Duration::from_secs(100)));
    // Only the startup taint is removed.
    assert_eq!(plan.remove_node_taints.len(), 1);
    assert_eq!(plan.remove_node_taints[0].key, INSTANCE_NOT_READY_TAINT);
    assert!(matches!(
        plan.outcome,
        HealthOutcome::EndPass {
            retry: Retry::Short,
            ..
        }
    ));
}

#[test]
fn critical_components_taint_keeps_pending() {
    let m = base()
        .with_phase(P::Pending, at(10))
        .with_conditions(healthy_conditions());
    let n = node(
        "n1",
        healthy_conditions(),
        vec![taint(
            "node.gardener.cloud/critical-components-not-ready",
            "NoSchedule",
        )],
    );
    let plan = run(&m, Some(&n), &[], FailurePermit::NotRequested, at(100));
    assert_eq!(plan.status, None);
    assert!(matches!(
        plan.outcome,
        HealthOutcome::Continue {
            recheck_after: Some(_)
        }
    ));
    // The same taint does not hold back a machine that is Unknown (re-join).
    let m = base()
        .with_phase(P::Unknown, at(10))
        .with_conditions(healthy_conditions());
    let plan = run(&m, Some(&n), &[], FailurePermit::NotRequested, at(100));
    assert_eq!(phase_written(&plan), Some(P::Running));
    assert!(
        plan.status
            .unwrap()
            .last_operation
            .description
            .unwrap()
            .ends_with("successfully re-joined the cluster")
    );
}

#[test]
fn running_machine_keeps_removing_startup_taint() {
    let m = base()
        .with_phase(P::Running, at(10))
        .with_conditions(healthy_conditions());
    let n = node(
        "n1",
        healthy_conditions(),
        vec![taint(INSTANCE_NOT_READY_TAINT, "NoExecute")],
    );
    let plan = run(&m, Some(&n), &[], FailurePermit::NotRequested, at(100));
    assert_eq!(plan.status, None);
    assert_eq!(plan.remove_node_taints.len(), 1);
}

#[test]
fn configured_conditions_decide_health() {
    let mut conditions = healthy_conditions();
    conditions[2].status = "Unknown".into(); // ReadonlyFilesystem Unknown is unhealthy
    assert!(!is_healthy(&conditions, &["ReadonlyFilesystem".into()]));
    assert!(is_healthy(&conditions, &["DiskPressure".into()]));
    assert!(!is_healthy(&[], &[]));
    let not_ready = vec![condition("Ready", "False", at(0))];
    assert!(!is_healthy(&not_ready, &[]));

    let m = base()
        .with_phase(P::Running, at(10))
        .with_conditions(healthy_conditions());
    let n = node("n1", conditions, vec![]);
    let plan = run(&m, Some(&n), &[], FailurePermit::NotRequested, at(100));
    assert_eq!(phase_written(&plan), Some(P::Unknown));
    assert!(
        plan.status
            .unwrap()
            .last_operation
            .description
            .unwrap()
            .contains("is unhealthy - changing MachinePhase to Unknown. Node conditions: [")
    );
}

#[test]
fn condition_change_rule() {
    let a = healthy_conditions();
    let mut b = a.clone();
    b[0].message = Some("other message".into());
    assert!(!node_conditions_changed(&a, &b));
    b[0].status = "False".into();
    assert!(node_conditions_changed(&a, &b));
    let mut c = a.clone();
    c.push(condition("InPlaceUpdate", "True", at(0)));
    assert!(node_conditions_changed(&a, &c));
    let mut d = c.clone();
    d[5].reason = Some("SelectedForUpdate".into());
    assert!(node_conditions_changed(&c, &d));
    let mut e = a.clone();
    e[1].reason = Some("x".into());
    assert!(!node_conditions_changed(&a, &e));
}

#[test]
fn missing_node_turns_running_into_unknown_keeping_preservation() {
    let m = base()
        .with_phase(P::Running, at(10))
        .with_conditions(healthy_conditions())
        .with_preserve_expiry(Some(at(99_999)));
    let plan = run(&m, None, &[], FailurePermit::NotRequested, at(100));
    let status = plan.status.unwrap();
    assert_eq!(status.current_status.phase, Some(P::Unknown));
    assert_eq!(
        status.current_status.preserve_expiry_time,
        Some(Time(at(99_999)))
    );
    assert!(
        status
            .last_operation
            .description
            .unwrap()
            .starts_with("Node object went missing.")
    );
    // Without conditions nothing happens.
    let m = base().with_phase(P::Running, at(10));
    assert_eq!(
        run(&m, None, &[], FailurePermit::NotRequested, at(100)).status,
        None
    );
}

#[test]
fn unknown_fails_after_health_timeout_with_permit_and_meltdown_check() {
    let m = base()
        .with_phase(P::Unknown, at(0))
        .with_conditions(vec![condition("Ready", "False", at(0))]);
    let n = node("n1", vec![condition("Ready", "False", at(0))], vec![]);
    // Before the timeout: re-check within a minute.
    let plan = run(&m, Some(&n), &[], FailurePermit::NotRequested, at(300));
    assert_eq!(
        plan.outcome,
        HealthOutcome::Continue {
            recheck_after: Some(Retry::After(HEALTH_RECHECK))
        }
    );
    // Close to the deadline the re-check is due just after it, not a minute later.
    let plan = run(&m, Some(&n), &[], FailurePermit::NotRequested, at(590));
    assert_eq!(
        plan.outcome,
        HealthOutcome::Continue {
            recheck_after: Some(Retry::After(Duration::from_secs(11)))
        }
    );

    let late = at(601);
    let plan = run(&m, Some(&n), &[], FailurePermit::NotRequested, late);
    assert_eq!(
        plan.outcome,
        HealthOutcome::NeedsFailurePermit { key: "md1".into() }
    );
    let plan = run(&m, Some(&n), &[], FailurePermit::Busy, late);
    assert!(matches!(
        plan.outcome,
        HealthOutcome::EndPass {
            retry: Retry::Short,
            ..
        }
    ));
    assert_eq!(plan.status, None);

    let plan = run(
        &m,
        Some(&n),
        std::slice::from_ref(&m),
        FailurePermit::Granted,
        late,
    );
    assert_eq!(phase_written(&plan), Some(P::Failed));
    assert!(plan.status.unwrap().last_operation.description.unwrap().starts_with(
        "Machine shoot-worker-abcde health checks failing since last 10m0s minutes. Updating machine phase to Failed."
    ));

    // A sibling already being replaced blocks the failure.
    let sibling = machine("s")
        .with_label("name", "md1")
        .with_phase(P::Pending, at(0));
    let plan = run(
        &m,
        Some(&n),
        &[m.clone(), sibling],
        FailurePermit::Granted,
        late,
    );
    assert_eq!(plan.status, None);
    assert!(
        matches!(plan.outcome, HealthOutcome::EndPass { ref reason, .. } if reason.contains("other machines are getting replaced"))
    );
}

/// With the guard on and too many siblings Unknown, the permit holder does not
/// fail the machine; with the guard off (default) it does.
#[test]
fn meltdown_guard_keeps_unknown_machines_from_being_failed() {
    let m = base()
        .with_phase(P::Unknown, at(0))
        .with_conditions(vec![condition("Ready", "False", at(0))]);
    let n = node("n1", vec![condition("Ready", "False", at(0))], vec![]);
    let other_unknown = machine("s1")
        .with_label("name", "md1")
        .with_phase(P::Unknown, at(0));
    let running = machine("s2")
        .with_label("name", "md1")
        .with_phase(P::Running, at(0));
    let siblings = [m.clone(), other_unknown, running];
    let late = at(601);
    let plan = run_guarded(&m, Some(&n), &siblings, FailurePermit::Granted, late, 0.3);
    assert_eq!(plan.status, None);
    assert!(
        matches!(plan.outcome, HealthOutcome::EndPass { ref reason, .. } if reason.contains("meltdown guard") && reason.contains("2 of 3")),
        "{:?}",
        plan.outcome
    );
    let plan = run(&m, Some(&n), &siblings, FailurePermit::Granted, late);
    assert_eq!(phase_written(&plan), Some(P::Failed));
}

#[test]
fn meltdown_counting() {
    let running = machine("a").with_phase(P::Running, at(0));
    let unknown = machine("b").with_phase(P::Unknown, at(0));
    let preserved_failed = machine("c")
        .with_phase(P::Failed, at(0))
        .with_preserve_expiry(Some(at(9)));
    assert!(can_mark_machine_failed(&[
        running.clone(),
        unknown.clone(),
        preserved_failed
    ]));
    let failed = machine("d").with_phase(P::Failed, at(0));
    assert!(!can_mark_machine_failed(&[running.clone(), failed]));
    // Preserved but terminating still counts once.
    let terminating = machine("e")
        .with_phase(P::Terminating, at(0))
        .with_preserve_expiry(Some(at(9)));
    assert!(!can_mark_machine_failed(&[running, terminating]));
}

#[test]
fn disable_health_timeout_keeps_unknown() {
    let mut m = base()
        .with_phase(P::Unknown, at(0))
        .with_conditions(vec![condition("Ready", "False", at(0))]);
    m.spec.configuration.disable_health_timeout = Some(true);
    let n = node("n1", vec![condition("Ready", "False", at(0))], vec![]);
    let plan = run(&m, Some(&n), &[], FailurePermit::NotRequested, at(100_000));
    assert_eq!(plan.status, None);
    assert_eq!(
        plan.outcome,
        HealthOutcome::Continue {
            recheck_after: None
        }
    );
}

#[test]
fn pending_fails_after_creation_timeout_without_permit() {
    let m = base()
        .with_phase(P::Pending, at(0))
        .with_operation(
            "Creating machine on cloud provider",
            MachineState::Processing,
            MachineOperationType::Create,
            at(0),
        )
        .with_conditions(vec![condition("Ready", "False", at(0))])
        .with_preserve_expiry(Some(at(50_000)));
    let n = node("n1", vec![condition("Ready", "False", at(0))], vec![]);
    let plan = run(
        &m,
        Some(&n),
        &[],
        FailurePermit::NotRequested,
        at(20 * 60 + 1),
    );
    let status = plan.status.as_ref().unwrap();
    assert_eq!(status.current_status.phase, Some(P::Failed));
    assert_eq!(
        status.current_status.preserve_expiry_time,
        Some(Time(at(50_000)))
    );
    assert_eq!(
        status.last_operation.type_,
        Some(MachineOperationType::Create)
    );
    assert_eq!(
        status.last_operation.description.as_deref(),
        Some("Machine shoot-worker-abcde failed to join the cluster in 20m0s minutes.")
    );
    assert!(plan.failed_join);
}

#[test]
fn in_place_results_and_timeout() {
    let m = base()
        .with_phase(P::InPlaceUpdating, at(0))
        .with_conditions(healthy_conditions());
    let mut n = node("n1", healthy_conditions(), vec![]);
    n.metadata.labels = Some([(label::UPDATE_RESULT.to_owned(), "failed".to_owned())].into());
    n.metadata.annotations = Some(
        [(
            mcm_api::keys::annotation::UPDATE_FAILED_REASON.to_owned(),
            "kubelet".to_owned(),
        )]
        .into(),
    );
    let plan = run(&m, Some(&n), &[], FailurePermit::NotRequested, at(10));
    assert_eq!(phase_written(&plan), Some(P::InPlaceUpdateFailed));
    assert!(
        plan.status
            .unwrap()
            .last_operation
            .description
            .unwrap()
            .ends_with("failed to update dependencies: kubelet")
    );

    n.metadata.labels = Some([(label::UPDATE_RESULT.to_owned(), "successful".to_owned())].into());
    let plan = run(&m, Some(&n), &[], FailurePermit::NotRequested, at(10));
    assert_eq!(phase_written(&plan), Some(P::InPlaceUpdateSuccessful));

    n.metadata.labels = None;
    let plan = run(
        &m,
        Some(&n),
        &[],
        FailurePermit::NotRequested,
        at(20 * 60 + 1),
    );
    assert_eq!(phase_written(&plan), Some(P::InPlaceUpdateFailed));
}

#[test]
fn condition_only_change_is_written() {
    let m = base()
        .with_phase(P::Running, at(0))
        .with_conditions(healthy_conditions());
    let mut conditions = healthy_conditions();
    conditions.push(condition("InPlaceUpdate", "True", at(0)));
    let n = node("n1", conditions, vec![]);
    let plan = run(&m, Some(&n), &[], FailurePermit::NotRequested, at(10));
    let status = plan.status.unwrap();
    assert_eq!(status.current_status.phase, Some(P::Running));
    assert_eq!(status.conditions.unwrap().len(), 6);
}
