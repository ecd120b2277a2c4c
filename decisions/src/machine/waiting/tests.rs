#![allow(clippy::unwrap_used)]

use super::*;
use crate::drain::plan::PodProgress;
use crate::machine::backoff::{RetryMark, with_mark};
use crate::test_support::*;
use crate::vocabulary::effective_settings;
use mcm_api::duration::Duration;
use mcm_provider_proto::Code;
use proptest::prelude::*;

fn compute(
    machine: &Machine,
    frozen: Option<&str>,
    drain: Option<&DrainView>,
) -> Option<NodeCondition> {
    let controller = ControllerSettings::default();
    let settings = effective_settings(machine, &controller);
    waiting_condition(&WaitingInput {
        machine,
        settings: &settings,
        controller: &controller,
        frozen,
        drain,
        held: None,
    })
}

fn reason(found: &Option<NodeCondition>) -> &str {
    found.as_ref().unwrap().reason.as_deref().unwrap()
}

fn message(found: &Option<NodeCondition>) -> &str {
    found.as_ref().unwrap().message.as_deref().unwrap()
}

#[test]
fn running_machines_wait_for_nothing() {
    let m = machine("m1").with_phase(MachinePhase::Running, at(0));
    assert_eq!(compute(&m, None, None), None);
}

#[test]
fn pending_names_the_node_and_the_creation_deadline() {
    let m = machine("m1")
        .with_label("node", "n1")
        .with_phase(MachinePhase::Pending, at(0));
    let c = compute(&m, None, None);
    assert_eq!(reason(&c), "WaitingForNode");
    assert!(message(&c).contains("node n1"), "{}", message(&c));
    // test_support machines are created at 0; the creation timeout is 20m.
    assert!(
        message(&c).contains(&at(20 * 60).to_string()),
        "{}",
        message(&c)
    );
}

#[test]
fn driver_error_names_the_error_attempt_and_next_retry() {
    let text = with_mark(
        "Cloud provider message - machine codes error: code = [Unavailable] message = [down]",
        RetryMark {
            attempt: 3,
            next_retry_at: Some(at(100)),
        },
    );
    let m = machine("m1")
        .with_phase(MachinePhase::CrashLoopBackOff, at(0))
        .with_operation(
            &text,
            MachineState::Failed,
            MachineOperationType::Create,
            at(80),
        );
    let c = compute(&m, None, None);
    assert_eq!(reason(&c), "DriverErrorBackoff");
    let found = message(&c);
    assert!(
        found.starts_with("CreateMachine failed: Cloud provider message"),
        "{found}"
    );
    assert!(found.contains("[Unavailable]"), "{found}");
    assert!(
        found.contains(&format!("attempt 3, next retry at {}", at(100))),
        "{found}"
    );
    assert!(found.contains("creation timeout"), "{found}");
}

/// A ResourceExhausted failure carries no backoff mark: the next retry is the creation plan's
/// period after the failure, and `--resource-exhausted-retry 0` means the long retry there too.
#[test]
fn resource_exhausted_names_the_retry_of_the_creation_plan() {
    let mut m = machine("m1")
        .with_phase(MachinePhase::CrashLoopBackOff, at(0))
        .with_operation(
            "Cloud provider message - machine codes error: code = [ResourceExhausted] message = [quota]",
            MachineState::Failed,
            MachineOperationType::Create,
            at(80),
        );
    if let Some(operation) = m.status.as_mut().and_then(|s| s.last_operation.as_mut()) {
        operation.error_code = Some(Code::ResourceExhausted.name().to_owned());
    }
    let message_with = |retry: Duration| {
        let controller = ControllerSettings {
            resource_exhausted_retry: retry,
            ..ControllerSettings::default()
        };
        let settings = effective_settings(&m, &controller);
        let found = waiting_condition(&WaitingInput {
            machine: &m,
            settings: &settings,
            controller: &controller,
            frozen: None,
            drain: None,
            held: None,
        });
        message(&found).to_owned()
    };
    let found = message_with(Duration::from_mins(2));
    assert!(
        found.contains(&format!("next retry at {}", at(80 + 120))),
        "{found}"
    );
    let found = message_with(Duration::ZERO);
    assert!(
        found.contains(&format!("next retry at {}", at(80 + 600))),
        "{found}"
    );
}

#[test]
fn drain_blocked_by_a_budget_names_pods_budget_and_deadline() {
    let m = machine("m1")
        .with_label("node", "n1")
        .deleting_since(at(0))
        .with_phase(MachinePhase::Terminating, at(0))
        .with_operation(
            "Initiate node drain",
            MachineState::Processing,
            MachineOperationType::Delete,
            at(0),
        );
    let mut ledger = DrainLedger::default();
    ledger.pods.insert(
        "default/web-0".into(),
        PodProgress {
            attempts: 2,
            last_failure: Some(EvictionFailure::BlockedByPdb {
                pdb: "default/web".into(),
            }),
            ..PodProgress::default()
        },
    );
    let view = drain_view(&ledger, &["default/web-0".into()], Some(at(7200)));
    let c = compute(&m, None, Some(&view));
    assert_eq!(reason(&c), "DrainBlockedByPDB");
    let found = message(&c);
    assert!(
        found.contains("default/web-0 (PodDisruptionBudget default/web)"),
        "{found}"
    );
    assert!(
        found.contains(&format!("forced at {}", at(7200))),
        "{found}"
    );
    // Without a drain view the stage's description is used.
    assert_eq!(reason(&compute(&m, None, None)), "Deleting");
}

#[test]
fn evicted_pods_with_volumes_wait_for_detach() {
    let mut ledger = DrainLedger::default();
    ledger.pods.insert(
        "default/db-0".into(),
        PodProgress {
            accepted_at: Some(at(5)),
            volume_ids: vec!["vol-1".into()],
            ..PodProgress::default()
        },
    );
    let view = drain_view(&ledger, &["default/db-0".into()], None);
    assert_eq!(view.volumes, vec!["vol-1".to_owned()]);
    assert!(view.blocked.is_empty());
    let m = machine("m1")
        .with_label("node", "n1")
        .deleting_since(at(0))
        .with_phase(MachinePhase::Terminating, at(0));
    let c = compute(&m, None, Some(&view));
    assert_eq!(reason(&c), "VolumesNotDetached");
    assert!(message(&c).contains("vol-1"));
}

#[test]
fn preserved_failed_and_frozen_machines_say_so() {
    let mut failed = machine("m1").with_phase(MachinePhase::Failed, at(0));
    failed
        .status
        .as_mut()
        .unwrap()
        .current_status
        .as_mut()
        .unwrap()
        .preserve_expiry_time = Some(time(at(3600)));
    let c = compute(&failed, None, None);
    assert_eq!(reason(&c), "Preserved");
    assert!(message(&c).contains(&at(3600).to_string()));
    let c = compute(&failed, Some("API server unreachable"), None);
    assert_eq!(reason(&c), "ControllerFrozen");
    assert!(message(&c).contains("API server unreachable"));
    let unknown = machine("m2").with_phase(MachinePhase::Unknown, at(60));
    let c = compute(&unknown, None, None);
    assert_eq!(reason(&c), "NodeUnhealthy");
    assert!(
        message(&c).contains(&at(60 + 600).to_string()),
        "{}",
        message(&c)
    );
}

#[test]
fn merge_reports_changes_only_and_keeps_node_conditions() {
    let ready = NodeCondition {
        type_: "Ready".into(),
        status: "True".into(),
        ..NodeCondition::default()
    };
    let wanted = super::condition("WaitingForNode", "x".into());
    let (merged, changed) =
        merge_waiting_condition(std::slice::from_ref(&ready), Some(wanted.clone()), at(1));
    assert!(changed);
    assert_eq!(merged.len(), 2);
    assert_eq!(merged[0], ready);
    // Same text later: unchanged, times kept.
    let (again, changed) = merge_waiting_condition(&merged, Some(wanted.clone()), at(50));
    assert!(!changed);
    assert_eq!(again, merged);
    // Removed when the machine waits for nothing.
    let (cleared, changed) = merge_waiting_condition(&merged, None, at(60));
    assert!(changed);
    assert_eq!(cleared, vec![ready]);
    // The node-condition comparison of the health check ignores it.
    assert!(!crate::machine::health::node_conditions_changed(
        &merged, &cleared
    ));
}

proptest! {
    /// Computing twice from the same snapshot at different times gives the same condition, so a
    /// resync never writes.
    #[test]
    fn prop_condition_does_not_depend_on_now(
        phase in prop::sample::select(vec![
            MachinePhase::Pending, MachinePhase::Running, MachinePhase::Unknown,
            MachinePhase::Failed, MachinePhase::CrashLoopBackOff, MachinePhase::Terminating,
        ]),
        later in 0i64..100_000,
    ) {
        let m = machine("m1").with_label("node", "n1").with_phase(phase, at(10));
        let first = compute(&m, None, None);
        let (merged, _) = merge_waiting_condition(&[], first.clone(), at(20));
        let (_, changed) = merge_waiting_condition(&merged, compute(&m, None, None), at(20 + later));
        prop_assert!(!changed);
    }
}

fn health_plan(
    machine: &Machine,
    siblings: &[Machine],
    threshold: f64,
) -> crate::machine::health::HealthPlan {
    use crate::machine::health::{FailurePermit, HealthInput, NodeLookup, plan_health};
    let settings = effective_settings(machine, &ControllerSettings::default());
    let siblings: Vec<std::sync::Arc<Machine>> =
        siblings.iter().cloned().map(std::sync::Arc::new).collect();
    plan_health(&HealthInput {
        machine,
        node: NodeLookup::NotFound,
        settings: &settings,
        siblings: &siblings,
        meltdown_threshold: threshold,
        permit: FailurePermit::Granted,
        // Long past the 10 min health timeout of a machine Unknown since 0.
        now: at(3600),
    })
}

fn held_condition(machine: &Machine, held: Option<&str>) -> Option<NodeCondition> {
    let controller = ControllerSettings::default();
    let settings = effective_settings(machine, &controller);
    waiting_condition(&WaitingInput {
        machine,
        settings: &settings,
        controller: &controller,
        frozen: None,
        drain: None,
        held,
    })
}

/// A machine the meltdown guard keeps from being failed does not claim it "is
/// Failed at" a time long past; its condition names the guard, its flag and the share.
#[test]
fn a_machine_held_by_the_meltdown_guard_names_the_guard() {
    let unknown = |name: &str| {
        machine(name)
            .with_label("name", "md1")
            .with_label("node", name)
            .with_phase(MachinePhase::Unknown, at(0))
    };
    let held = unknown("m1");
    let siblings = [
        held.clone(),
        unknown("m2"),
        machine("m3")
            .with_label("name", "md1")
            .with_phase(MachinePhase::Running, at(0)),
    ];
    let plan = health_plan(&held, &siblings, 0.3);
    assert_eq!(plan.status, None, "the guard must keep the machine Unknown");
    let guard = plan.held.as_deref().expect("the plan names the guard");
    let c = held_condition(&held, Some(guard));
    assert_eq!(reason(&c), "ReplacementHeld");
    let text = message(&c);
    assert!(text.contains("meltdown guard"), "{text}");
    assert!(text.contains("--machine-meltdown-threshold"), "{text}");
    assert!(text.contains("2 of 3"), "{text}");
    assert!(text.contains("node m1"), "{text}");
    assert!(!text.contains("is Failed at"), "{text}");
    // The deadline that passed is still named as such.
    assert!(text.contains(&format!("ran out at {}", at(600))), "{text}");

    // lastOperation names the guard after the health check's own text, once.
    let mut shown = held.clone();
    shown.status.get_or_insert_default().last_operation = Some(mcm_api::v1alpha1::LastOperation {
        description: Some(
            "Machine m1 is unhealthy - changing MachinePhase to Unknown. Node conditions: Ready=False"
                .to_owned(),
        ),
        ..Default::default()
    });
    let shown = waiting_only(
        &shown,
        &ControllerSettings::default(),
        WaitingOnly::Held(guard),
        at(700),
    )
    .expect("the guard changes lastOperation");
    let description = shown
        .status
        .as_ref()
        .and_then(|s| s.last_operation.as_ref())
        .and_then(|o| o.description.clone())
        .unwrap_or_default();
    assert!(
        description.starts_with("Machine m1 is unhealthy - changing MachinePhase to Unknown."),
        "{description}"
    );
    assert!(
        description.contains("held by the meltdown guard"),
        "{description}"
    );
    assert_eq!(held_description(&description, guard), None, "said once");
    assert_eq!(
        held_description(&description, "another guard"),
        Some(format!(
            "Machine m1 is unhealthy - changing MachinePhase to Unknown. Node conditions: Ready=False{HELD_MARK}another guard"
        ))
    );

    // Below the threshold the plan fails the machine and names no guard.
    let plan = health_plan(&held, &siblings, 0.0);
    assert!(plan.status.is_some());
    assert_eq!(plan.held, None);
}

/// Upstream's one-replacement-at-a-time protection holds a machine too, and says so.
#[test]
fn a_machine_held_by_the_one_at_a_time_protection_names_it() {
    let held = machine("m1")
        .with_label("name", "md1")
        .with_label("node", "m1")
        .with_phase(MachinePhase::Unknown, at(0));
    let replaced = machine("m2")
        .with_label("name", "md1")
        .with_phase(MachinePhase::Failed, at(0));
    let plan = health_plan(&held, &[held.clone(), replaced], 0.0);
    assert_eq!(plan.status, None);
    let guard = plan.held.as_deref().expect("the plan names the protection");
    let c = held_condition(&held, Some(guard));
    let text = message(&c);
    assert!(text.contains("meltdown protection"), "{text}");
    assert!(text.contains("one replacement at a time"), "{text}");
    assert!(text.contains("md1"), "{text}");
    assert!(!text.contains("is Failed at"), "{text}");
    // Without a guard the deadline is announced as before.
    let c = held_condition(&held, None);
    assert_eq!(reason(&c), "NodeUnhealthy");
    assert!(message(&c).contains("is Failed at"), "{}", message(&c));
}

fn waiting_of(machine: &Machine) -> Option<NodeCondition> {
    machine
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| is_waiting_condition(c))
        .cloned()
}

#[test]
fn a_status_write_is_sent_with_the_waiting_condition_of_its_result() {
    let running = machine("m1")
        .with_label("node", "n1")
        .with_phase(MachinePhase::Running, at(0));
    // The write moves the machine to Pending: what is sent already waits for its node, from the
    // pass's `now`.
    let pending = machine("m1")
        .with_label("node", "n1")
        .with_phase(MachinePhase::Pending, at(30));
    let status = pending.status.clone().unwrap();
    let write = StatusWrite::new(
        status.last_operation.clone().unwrap_or_default(),
        status.current_status.clone().unwrap(),
    );
    let controller = ControllerSettings::default();
    let sent = status_to_send(&running, &write, &controller, false, at(40));
    assert_eq!(phase_of(&sent), Some(MachinePhase::Pending));
    let found = waiting_of(&sent).expect("a Pending machine waits for its node");
    assert_eq!(found.reason.as_deref(), Some("WaitingForNode"));
    assert_eq!(found.last_transition_time, Some(time(at(40))));
    // A frozen controller's write names the freeze instead.
    let frozen = status_to_send(&running, &write, &controller, true, at(40));
    let found = waiting_of(&frozen).expect("a frozen controller says so");
    assert_eq!(found.reason.as_deref(), Some("ControllerFrozen"));
    assert!(
        found
            .message
            .as_deref()
            .unwrap_or_default()
            .contains(FROZEN_REASON)
    );
    // A write to Running clears the condition.
    let back = running.status.clone().unwrap();
    let write = StatusWrite::new(
        back.last_operation.unwrap_or_default(),
        back.current_status.unwrap(),
    );
    let sent = status_to_send(&frozen, &write, &controller, false, at(50));
    assert_eq!(waiting_of(&sent), None);
}

#[test]
fn waiting_only_writes_when_more_than_timestamps_change() {
    let controller = ControllerSettings::default();
    let running = machine("m1").with_phase(MachinePhase::Running, at(0));
    let frozen = waiting_only(&running, &controller, WaitingOnly::Frozen, at(10))
        .expect("the freeze is new");
    assert_eq!(
        waiting_of(&frozen).and_then(|c| c.reason),
        Some("ControllerFrozen".to_owned())
    );
    // Still frozen a pass later: nothing to write.
    assert!(waiting_only(&frozen, &controller, WaitingOnly::Frozen, at(20)).is_none());
    // The same machine, held by a guard instead: a change.
    assert!(
        waiting_only(
            &frozen,
            &controller,
            WaitingOnly::Held("the meltdown guard"),
            at(20)
        )
        .is_some()
    );
}
