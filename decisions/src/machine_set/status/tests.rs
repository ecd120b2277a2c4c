//! Tests of the MachineSet status and when it is written.
#![allow(clippy::unwrap_used)]

use crate::machine_set::status::*;
use crate::machine_set::tests::fixtures::*;
use crate::machine_set::types::*;
use jiff::{SignedDuration, Timestamp};
use mcm_api::keys::annotation;
use mcm_api::v1alpha1::{
    ConditionStatus, LastOperation, MachinePhase, MachineSetCondition, MachineSetConditionType,
    MachineSetStatus, MachineState,
};

#[test]
fn status_counts_and_replica_failure_condition() {
    let s = ms(4);
    let mut failed = machine("f", Some(MachinePhase::Failed), 1);
    failed.status.as_mut().unwrap().last_operation = Some(LastOperation {
        state: Some(MachineState::Failed),
        description: Some("boom".into()),
        ..LastOperation::default()
    });
    let preserved = preserved_until(failed.clone(), t(50));
    let machines = vec![
        machine("r", Some(MachinePhase::Running), 1),
        machine("a", Some(MachinePhase::Available), 1),
        machine("p", Some(MachinePhase::Pending), 1),
        failed,
        annotate(preserved, annotation::PRESERVE, "auto-preserved"),
    ];
    let err = ReplicaError {
        message: "quota".into(),
    };
    let st = machine_set_status(&s, &machines, Some(&err), t(0));
    assert_eq!(st.replicas, Some(5));
    assert_eq!(st.ready_replicas, Some(1));
    assert_eq!(st.available_replicas, Some(2));
    assert_eq!(st.fully_labeled_replicas, Some(5));
    assert_eq!(st.preserved_failed_replicas, Some(1));
    assert_eq!(st.auto_preserve_failed_machine_count, Some(1));
    assert_eq!(st.failed_machines.as_ref().unwrap().len(), 1);
    assert_eq!(
        st.failed_machines.as_ref().unwrap()[0].owner_ref.as_deref(),
        Some("pool-abcde")
    );
    let cond = &st.conditions.as_ref().unwrap()[0];
    assert_eq!(cond.reason.as_deref(), Some("FailedDelete"));
    assert!(status_needs_update(&s, &st));
    let mut s2 = s.clone();
    s2.status = Some(st.clone());
    assert!(!status_needs_update(
        &s2,
        &machine_set_status(&s2, &machines, Some(&err), t(9))
    ));
    // Error gone: condition removed.
    let cleared = machine_set_status(&s2, &machines, None, t(10));
    assert!(cleared.conditions.is_none());
    // Generation not observed yet forces a write.
    s2.metadata.generation = Some(2);
    assert!(status_needs_update(&s2, &st));
}

#[test]
fn count_changes_are_written_at_most_once_per_interval_and_others_at_once() {
    let now: Timestamp = "2026-01-01T00:00:10Z".parse().unwrap();
    let mut s = ms(3);
    s.metadata.generation = Some(1);
    s.status = Some(MachineSetStatus {
        replicas: Some(2),
        observed_generation: Some(1),
        ..MachineSetStatus::default()
    });
    let counts = MachineSetStatus {
        replicas: Some(3),
        observed_generation: Some(1),
        ..MachineSetStatus::default()
    };
    // Never written by this process, or written long enough ago: now.
    assert_eq!(status_write_delay(&s, &counts, None, now), None);
    let long_ago = now - SignedDuration::from_secs(5);
    assert_eq!(status_write_delay(&s, &counts, Some(long_ago), now), None);
    // Written 300 ms ago: held back for the rest of the interval.
    let recent = now - SignedDuration::from_millis(300);
    assert_eq!(
        status_write_delay(&s, &counts, Some(recent), now),
        Some(STATUS_COUNT_WRITE_INTERVAL - SignedDuration::from_millis(300))
    );
    // A condition, a failed machine or a new generation is written at once.
    let mut with_condition = counts.clone();
    with_condition.conditions = Some(vec![MachineSetCondition {
        type_: MachineSetConditionType::ReplicaFailure,
        status: ConditionStatus::True,
        last_transition_time: None,
        reason: None,
        message: None,
    }]);
    assert_eq!(
        status_write_delay(&s, &with_condition, Some(recent), now),
        None
    );
    let mut new_generation = s.clone();
    new_generation.metadata.generation = Some(2);
    assert_eq!(
        status_write_delay(&new_generation, &counts, Some(recent), now),
        None
    );
    // Counts that reach the spec (all 3 there, labelled, ready and available) are written at
    // once: a scale-up is complete only when this write lands.
    let settled = MachineSetStatus {
        replicas: Some(3),
        fully_labeled_replicas: Some(3),
        ready_replicas: Some(3),
        available_replicas: Some(3),
        observed_generation: Some(1),
        ..MachineSetStatus::default()
    };
    assert_eq!(status_write_delay(&s, &settled, Some(recent), now), None);
    // One short of it (2 of 3 available) is still held back.
    let almost = MachineSetStatus {
        available_replicas: Some(2),
        ..settled.clone()
    };
    assert_eq!(
        status_write_delay(&s, &almost, Some(recent), now),
        Some(STATUS_COUNT_WRITE_INTERVAL - SignedDuration::from_millis(300))
    );
    // Scaled to zero: no machine left is the settled state too.
    let mut to_zero = ms(0);
    to_zero.metadata.generation = Some(1);
    to_zero.status = s.status.clone();
    let none_left = MachineSetStatus {
        replicas: Some(0),
        observed_generation: Some(1),
        ..MachineSetStatus::default()
    };
    assert_eq!(
        status_write_delay(&to_zero, &none_left, Some(recent), now),
        None
    );
}
