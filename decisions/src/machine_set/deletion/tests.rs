//! Tests of which machines are deleted and in which order, and the status of a deleted machine.
#![allow(clippy::unwrap_used)]

use std::cmp::Ordering;
use std::collections::BTreeMap;

use crate::machine_set::decide::plan;
use crate::machine_set::deletion::*;
use crate::machine_set::tests::fixtures::*;
use mcm_api::keys::{annotation, label, last_operation};
use mcm_api::v1alpha1::{Machine, MachinePhase};

#[test]
fn deletes_in_reference_order_and_never_preserved_first() {
    let s = ms(2);
    let nodes = BTreeMap::new();
    let machines = vec![
        preserved_until(machine("preserved", Some(MachinePhase::Pending), 1), t(100)),
        machine("running-old", Some(MachinePhase::Running), 50),
        machine("running-new", Some(MachinePhase::Running), 5),
        machine("pending", Some(MachinePhase::Pending), 5),
        annotate(
            machine("prio", Some(MachinePhase::Running), 5),
            annotation::MACHINE_PRIORITY,
            "1",
        ),
    ];
    let p = plan(input(&s, &machines, &nodes)).unwrap();
    assert_eq!(
        deleted_names(&p.actions),
        vec!["prio", "pending", "running-old"]
    );
}

#[test]
fn deletion_order_table() {
    let now = t(0);
    let base = || machine("x", Some(MachinePhase::Running), 10);
    let cases: Vec<(Machine, Machine)> = vec![
        // (deleted first, deleted later)
        (base(), preserved_until(base(), t(10))),
        (
            annotate(
                preserved_until(base(), t(99)),
                annotation::PRESERVE,
                "auto-preserved",
            ),
            preserved_until(base(), t(10)),
        ),
        (
            preserved_until(base(), t(10)),
            preserved_until(base(), t(20)),
        ),
        // Expired preservation counts as not preserved.
        (
            preserved_until(base(), t(-1)),
            annotate(base(), annotation::MACHINE_PRIORITY, "5"),
        ),
        (annotate(base(), annotation::MACHINE_PRIORITY, "2"), base()),
        (
            annotate(base(), annotation::MACHINE_PRIORITY, "x"),
            annotate(base(), annotation::MACHINE_PRIORITY, "4"),
        ),
        (
            annotate(
                base(),
                annotation::MARKED_FOR_DELETION_TIME,
                "2024-01-01T00:00:00Z",
            ),
            base(),
        ),
        (
            annotate(
                base(),
                annotation::MARKED_FOR_DELETION_TIME,
                "2024-01-01T00:00:00Z",
            ),
            annotate(
                base(),
                annotation::MARKED_FOR_DELETION_TIME,
                "2024-02-01T00:00:00Z",
            ),
        ),
        (
            machine("x", Some(MachinePhase::Failed), 1),
            machine("x", Some(MachinePhase::CrashLoopBackOff), 1),
        ),
        (
            machine("x", Some(MachinePhase::Unknown), 1),
            machine("x", Some(MachinePhase::Pending), 1),
        ),
        (
            machine("x", Some(MachinePhase::Available), 1),
            machine("x", Some(MachinePhase::Running), 1),
        ),
        (
            machine("x", None, 1),
            machine("x", Some(MachinePhase::Failed), 1),
        ),
        (
            machine("x", Some(MachinePhase::InPlaceUpdating), 1),
            machine("x", Some(MachinePhase::Failed), 1),
        ),
        (
            machine("x", Some(MachinePhase::Running), 9),
            machine("x", Some(MachinePhase::Running), 1),
        ),
    ];
    for (i, (first, later)) in cases.iter().enumerate() {
        assert_eq!(
            deletion_order(first, later, now),
            Ordering::Less,
            "case {i}"
        );
        assert_eq!(
            deletion_order(later, first, now),
            Ordering::Greater,
            "case {i} reversed"
        );
    }
}

#[test]
fn deletes_ca_marked_machines_even_without_replica_diff() {
    let mut s = ms(2);
    s.metadata.annotations = Some(BTreeMap::from([(
        annotation::LAST_DEPLOYMENT_REPLICA_CHANGE_BY_SCALER_TIME.to_owned(),
        "2024-01-02T00:00:00Z".to_owned(),
    )]));
    let nodes = BTreeMap::new();
    let marked = |name: &str, when: &str| {
        annotate(
            annotate(
                machine(name, Some(MachinePhase::Running), 1),
                annotation::MACHINE_PRIORITY,
                "1",
            ),
            annotation::MARKED_FOR_DELETION_TIME,
            when,
        )
    };
    let machines = vec![
        marked("before", "2024-01-01T00:00:00Z"),
        marked("after", "2024-01-03T00:00:00Z"),
    ];
    let p = plan(input(&s, &machines, &nodes)).unwrap();
    assert_eq!(deleted_names(&p.actions), vec!["before"]);
}

#[test]
fn failed_machines_replaced_unless_preservation_pending() {
    let s = ms(5);
    let nodes = BTreeMap::from([
        ("n-now".to_owned(), Some("now".to_owned())),
        ("n-plain".to_owned(), None),
    ]);
    let on_node = |name: &str, node: &str| {
        let mut m = machine(name, Some(MachinePhase::Failed), 1);
        m.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(label::NODE.into(), node.into());
        m
    };
    let machines = vec![
        on_node("node-says-now", "n-now"),
        on_node("plain", "n-plain"),
        on_node("node-missing", "n-gone"),
        annotate(
            machine("machine-when-failed", Some(MachinePhase::Failed), 1),
            annotation::PRESERVE,
            "when-failed",
        ),
        preserved_until(machine("expired", Some(MachinePhase::Failed), 1), t(-5)),
    ];
    let mut names = deleted_names(&plan(input(&s, &machines, &nodes)).unwrap().actions);
    names.sort();
    // No replica diff: only the failed-machine rule deletes.
    assert_eq!(names, vec!["expired", "node-missing", "plain"]);
}

#[test]
fn terminating_status_written_once() {
    let m = machine("a", Some(MachinePhase::Running), 1);
    let st = terminating_status(&m, t(0)).unwrap();
    assert_eq!(
        st.current_status.as_ref().unwrap().phase,
        Some(MachinePhase::Terminating)
    );
    assert_eq!(
        st.last_operation.as_ref().unwrap().description.as_deref(),
        Some(last_operation::DELETING_MACHINE_FROM_CLOUD_PROVIDER)
    );
    let mut m2 = m.clone();
    m2.status = Some(st);
    assert!(terminating_status(&m2, t(60)).is_none());
    assert!(terminating_status(&m2, t(3600)).is_some());
}
