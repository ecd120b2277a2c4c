//! Upstream `pkg/controller` table tests replayed against the pure MachineSet plan.
//!
//! Sources: `machineset_test.go` and `controller_utils_test.go` of gardener/machine-controller-manager.
//! Every test function below covers one upstream `Describe`; every row names the upstream `It` or
//! `Entry` it ports, so a failure points at the upstream case. The observed objects and expected
//! outcomes are restated as data (our own code, no upstream code): what the fake clients of the
//! Go test observed (machines created or deleted, annotations written, the boolean returned)
//! is what our plan functions must decide. The full mapping, with the upstream cases that have
//! no counterpart here, is `docs/upstream-conformance.md` (part 2).
#![allow(clippy::unwrap_used)]

use crate::machine_set::plan::*;
use std::collections::BTreeMap;

use crate::machine_set::claim;
use crate::machine_set::expectations::Readiness;
use crate::machine_set::machine_updates::auto_preservation;
use crate::machine_set::tests::fixtures::Pool;
use crate::machine_set::types::annotation_of;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use mcm_api::keys::{annotation, label, last_operation, preserve, value};
use mcm_api::v1alpha1::{
    LastOperation, Machine, MachineOperationType, MachinePhase, MachineSet, MachineSetStatus,
    MachineState,
};
use std::sync::Arc;

/// The reconcile time of every row; upstream's `time.Now()` offsets are relative to it.
fn now() -> Timestamp {
    Timestamp::from_second(1_750_000_000).unwrap()
}

fn at(offset_secs: i64) -> Timestamp {
    now() + SignedDuration::from_secs(offset_secs)
}

fn rfc3339(offset_secs: i64) -> String {
    at(offset_secs).to_string()
}

fn pool() -> BTreeMap<String, String> {
    BTreeMap::from([("test-label".to_owned(), "test-label".to_owned())])
}

/// Upstream's `testMachineSet` and its machines: `MachineSet-test`, UID 1234567, selector and
/// template label `test-label`.
fn upstream_pool() -> Pool<'static> {
    Pool {
        set: "MachineSet-test",
        namespace: "test",
        uid: "1234567",
        class: "test-machine-class",
        labels: pool(),
    }
}

/// Upstream's `testMachineSet`, which also carries the pool's labels itself.
fn machine_set(replicas: i32) -> MachineSet {
    let mut ms = upstream_pool().machine_set(replicas);
    ms.metadata.labels = Some(pool());
    ms
}

/// A machine of the pool, created `age_secs` before [`now`], owned by `MachineSet-test`.
fn machine(name: &str, phase: Option<MachinePhase>, age_secs: i64) -> Machine {
    upstream_pool().machine(name, phase, at(-age_secs))
}

fn ann(mut m: Machine, k: &str, v: &str) -> Machine {
    m.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(k.into(), v.into());
    m
}

fn lbl(mut m: Machine, k: &str, v: &str) -> Machine {
    m.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(k.into(), v.into());
    m
}

fn preserved_until(mut m: Machine, offset_secs: i64) -> Machine {
    if let Some(cs) = m.status.as_mut().and_then(|s| s.current_status.as_mut()) {
        cs.preserve_expiry_time = Some(Time(at(offset_secs)));
    }
    m
}

fn running(name: &str) -> Machine {
    machine(name, Some(MachinePhase::Running), 60)
}

fn shared(machines: &[Machine]) -> Vec<Arc<Machine>> {
    machines.iter().cloned().map(Arc::new).collect()
}

fn names(machines: &[Machine]) -> Vec<String> {
    machines
        .iter()
        .map(|m| m.metadata.name.clone().unwrap())
        .collect()
}

/// What a replica pass decided, in the terms upstream's fake client observes.
#[derive(Debug, PartialEq)]
enum Replicas {
    Nothing,
    Create(usize),
    Delete(Vec<&'static str>),
}

fn decided(actions: &[MachineSetAction]) -> Replicas {
    match actions {
        [] => Replicas::Nothing,
        [MachineSetAction::CreateMachines { count, batches, .. }] => {
            assert_eq!(batches.iter().sum::<usize>(), *count, "batches cover count");
            Replicas::Create(*count)
        }
        [MachineSetAction::DeleteMachines { machines }] => Replicas::Delete(
            machines
                .iter()
                .map(|m| &*String::leak(m.name.clone()))
                .collect(),
        ),
        other => panic!("unexpected actions {other:?}"),
    }
}

/// controller_utils_test.go `#controllerUtils / ##activeMachines / ###sort`: `ActiveMachines`
/// is our [`deletion_order`] (first = deleted first).
#[test]
fn controller_utils_active_machines_sort() {
    let priority = vec![
        ann(running("prio-1-running"), annotation::MACHINE_PRIORITY, "1"),
        machine("prio-default-pending", Some(MachinePhase::Pending), 60),
        ann(
            machine("prio-5-terminating", Some(MachinePhase::Terminating), 60),
            annotation::MACHINE_PRIORITY,
            "5",
        ),
    ];
    let phase = vec![
        machine("terminating", Some(MachinePhase::Terminating), 60),
        machine("failed", Some(MachinePhase::Failed), 60),
        machine("unknown", Some(MachinePhase::Unknown), 60),
        machine("pending", Some(MachinePhase::Pending), 60),
        machine("available", Some(MachinePhase::Available), 60),
        machine("running", Some(MachinePhase::Running), 60),
    ];
    let created = vec![
        machine("created-first", None, 30),
        machine("created-second", None, 20),
        machine("created-third", None, 10),
    ];
    let preserved = vec![
        machine("failed-not-preserved", Some(MachinePhase::Failed), 60),
        preserved_until(
            machine("failed-preserved", Some(MachinePhase::Failed), 60),
            600,
        ),
        preserved_until(running("running-preserved"), 600),
    ];
    // (upstream Entry, expected order, input permutation as upstream shuffles it)
    let rows: [(&str, Vec<Machine>, &[usize]); 4] = [
        ("sort on priority annotation", priority, &[2, 0, 1]),
        ("sort on phase", phase, &[5, 4, 1, 3, 2, 0]),
        ("sort on creation timestamp", created, &[1, 0, 2]),
        ("sort on preserved and unpreserved", preserved, &[2, 0, 1]),
    ];
    for (entry, sorted, permutation) in rows {
        let mut input: Vec<Machine> = permutation.iter().map(|&i| sorted[i].clone()).collect();
        input.sort_by(|a, b| deletion_order(a, b, now()));
        assert_eq!(names(&input), names(&sorted), "Entry {entry:?}");
    }
}

/// machineset_test.go `#getMachinesToDelete`: the first `diff` machines of the deletion order
/// ([`machines_to_delete`] with `replicas = machines - diff`).
#[test]
fn machineset_get_machines_to_delete() {
    let marked_now = rfc3339(0);
    let marked_later = rfc3339(60);
    let m1 = ann(running("machine-1"), annotation::MACHINE_PRIORITY, "1");
    let m2 = ann(
        ann(running("machine-2"), annotation::MACHINE_PRIORITY, "3"),
        annotation::MARKED_FOR_DELETION_TIME,
        &marked_now,
    );
    let m3 = ann(
        ann(
            machine("machine-3", Some(MachinePhase::Failed), 60),
            annotation::MACHINE_PRIORITY,
            "3",
        ),
        annotation::MARKED_FOR_DELETION_TIME,
        &marked_later,
    );
    let m4 = ann(
        ann(running("machine-4"), annotation::MACHINE_PRIORITY, "3"),
        annotation::MARKED_FOR_DELETION_TIME,
        &marked_later,
    );
    let m5 = ann(running("machine-5"), annotation::MACHINE_PRIORITY, "3");
    let preserved_failed = || {
        preserved_until(
            ann(
                machine("machine-1", Some(MachinePhase::Failed), 60),
                annotation::MACHINE_PRIORITY,
                "3",
            ),
            3600,
        )
    };
    let plain_running = || ann(running("machine-2"), annotation::MACHINE_PRIORITY, "3");
    // (upstream It, machines (upstream shuffles them), diff, expected deletions in order)
    let rows: [(&str, Vec<Machine>, usize, Vec<&str>); 3] = [
        (
            "should sort the machines in the correct order",
            vec![m5, m3.clone(), m1, m4, m2],
            4,
            vec!["machine-1", "machine-2", "machine-3", "machine-4"],
        ),
        (
            "should prioritise non-preserved machines for deletion.",
            vec![plain_running(), preserved_failed()],
            1,
            vec!["machine-2"],
        ),
        (
            "should include preserved machine when needed to maintain replica count",
            vec![plain_running(), preserved_failed()],
            2,
            vec!["machine-2", "machine-1"],
        ),
    ];
    for (it, machines, diff, want) in rows {
        let ms = machine_set(i32::try_from(machines.len() - diff).unwrap());
        let got: Vec<String> = machines_to_delete(&ms, &shared(&machines), &BTreeMap::new(), now())
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(got, want, "It {it:?}");
    }
}

/// machineset_test.go `#manageReplicas`: what the fake client saw created or deleted is what
/// [`manage_replicas`] decides.
#[test]
fn machineset_manage_replicas() {
    let failed4 = || machine("machine-4", Some(MachinePhase::Failed), 60);
    let marked = |name: &str| {
        ann(
            ann(running(name), annotation::MACHINE_PRIORITY, "1"),
            annotation::MARKED_FOR_DELETION_TIME,
            &rfc3339(0),
        )
    };
    let updated3 = || {
        lbl(
            running("machine-3"),
            label::UPDATE_RESULT,
            value::UPDATE_SUCCESSFUL,
        )
    };
    let scaler_in_a_minute = Some(rfc3339(60));
    // (upstream It, spec.replicas, last-replica-change-by-scaler annotation, machines, decision)
    type Row<'a> = (&'a str, i32, Option<String>, Vec<Machine>, Replicas);
    let rows: Vec<Row> = vec![
        (
            "should create new machines and should not return errors.",
            3,
            None,
            vec![running("machine-1"), running("machine-2")],
            Replicas::Create(1),
        ),
        (
            "should create new machines only equal to burstReplicas and should not return errors.",
            200,
            None,
            vec![running("machine-1"), running("machine-2")],
            Replicas::Create(BURST_REPLICAS),
        ),
        (
            "should not create or delete machines and should not return error",
            3,
            None,
            vec![
                running("machine-1"),
                running("machine-2"),
                running("machine-3"),
            ],
            Replicas::Nothing,
        ),
        (
            "should not return error and should delete extra failed machine.",
            3,
            None,
            vec![
                running("machine-1"),
                running("machine-2"),
                running("machine-3"),
                failed4(),
            ],
            Replicas::Delete(vec!["machine-4"]),
        ),
        (
            // Upstream's objects are those of the previous It (machine-4 Failed): the failed one
            // goes first by phase.
            "should not return error and should delete extra running machine.",
            3,
            None,
            vec![
                running("machine-1"),
                running("machine-2"),
                running("machine-3"),
                failed4(),
            ],
            Replicas::Delete(vec!["machine-4"]),
        ),
        (
            "should delete the marked machines with no change in machineSet replicas",
            2,
            scaler_in_a_minute.clone(),
            vec![marked("machine-1"), marked("machine-2")],
            Replicas::Delete(vec!["machine-1", "machine-2"]),
        ),
        (
            "should delete the marked machines after reducing machineSet replicas",
            1,
            scaler_in_a_minute,
            vec![marked("machine-1"), marked("machine-2")],
            Replicas::Delete(vec!["machine-1", "machine-2"]),
        ),
        (
            "machine with update-result label / should create new machines and should not return errors.",
            3,
            None,
            vec![running("machine-1"), updated3()],
            Replicas::Create(1),
        ),
        (
            "machine with update-result label / should not create or delete machines and should not return error",
            3,
            None,
            vec![running("machine-1"), running("machine-2"), updated3()],
            Replicas::Nothing,
        ),
        (
            // Upstream checks only the count (5 → 4); all candidates are equal, the first one in
            // list order goes, never the updated machine-3.
            "machine with update-result label / should not return error and delete extra running machine",
            3,
            None,
            vec![
                running("machine-1"),
                running("machine-2"),
                updated3(),
                running("machine-4"),
                running("machine-5"),
            ],
            Replicas::Delete(vec!["machine-1"]),
        ),
    ];
    for (it, replicas, scaler, machines, want) in rows {
        let mut ms = machine_set(replicas);
        if let Some(t) = scaler {
            ms.metadata.annotations = Some(BTreeMap::from([(
                annotation::LAST_DEPLOYMENT_REPLICA_CHANGE_BY_SCALER_TIME.to_owned(),
                t,
            )]));
        }
        let actions = manage_replicas(&ms, &shared(&machines), &BTreeMap::new(), now()).unwrap();
        assert_eq!(decided(&actions), want, "It {it:?}");
        if let [MachineSetAction::CreateMachines { machine, .. }] = actions.as_slice() {
            assert_eq!(
                machine.metadata.generate_name.as_deref(),
                Some("MachineSet-test-"),
                "It {it:?}: machines are named after the set"
            );
            assert_eq!(
                claim::controller_ref(&machine.metadata).map(|r| r.uid.as_str()),
                Some("1234567"),
                "It {it:?}: created machines are controlled by the set"
            );
        }
    }
}

/// machineset_test.go `#manageAutoPreservationOfFailedMachines`: how many of the failed
/// machines carry `preserve=auto-preserved` afterwards.
#[test]
fn machineset_manage_auto_preservation_of_failed_machines() {
    let hour = 3600;
    let base = || {
        vec![
            machine("machine-1", Some(MachinePhase::Failed), 2 * hour),
            machine("machine-2", Some(MachinePhase::Failed), hour),
            machine("machine-3", Some(MachinePhase::Running), 2 * hour),
            ann(
                machine("machine-4", Some(MachinePhase::Failed), 2 * hour),
                annotation::PRESERVE,
                preserve::FALSE,
            ),
        ]
    };
    let auto_preserved_5 = preserved_until(
        ann(
            machine("machine-5", Some(MachinePhase::Failed), 60),
            annotation::PRESERVE,
            preserve::AUTO_PRESERVED,
        ),
        hour,
    );
    // (upstream Entry, status.autoPreserveFailedMachineCount, spec.autoPreserveFailedMachineMax,
    //  additional machines, machines auto-preserved afterwards)
    let rows: Vec<(&str, i32, i32, Vec<Machine>, usize)> = vec![
        (
            "should trigger auto preservation of 1 failed machine if AutoPreserveFailedMachineMax is 1 and AutoPreserveFailedMachineCount is 0",
            0,
            1,
            vec![],
            1,
        ),
        (
            "should not trigger auto preservation of failed machines if AutoPreserveFailedMachineMax is 0",
            0,
            0,
            vec![],
            0,
        ),
        (
            "should not trigger auto preservation of failed machines if AutoPreserveFailedMachineCount has reached AutoPreserveFailedMachineMax",
            2,
            2,
            vec![],
            0,
        ),
        (
            "should trigger auto preservation of both failed machines if AutoPreserveFailedMachineCount is 0 and AutoPreserveFailedMachineMax is 2",
            0,
            2,
            vec![],
            2,
        ),
        (
            "should not trigger auto preservation of failed machine annotated with preserve=false even if AutoPreserveFailedMachineCount < AutoPreserveFailedMachineMax",
            0,
            3,
            vec![],
            2,
        ),
        (
            "should stop auto preservation of machines annotated with preserve=auto-preserve if AutoPreserveFailedMachineCount > AutoPreserveFailedMachineMax",
            1,
            0,
            vec![auto_preserved_5],
            0,
        ),
    ];
    for (entry, count, max, extra, want) in rows {
        let mut ms = machine_set(4);
        ms.spec.auto_preserve_failed_machine_max = Some(max);
        ms.status = Some(MachineSetStatus {
            auto_preserve_failed_machine_count: Some(count),
            ..MachineSetStatus::default()
        });
        let mut machines = base();
        machines.extend(extra);
        let arcs = shared(&machines);
        for (i, u) in auto_preservation(&ms, &arcs) {
            apply_update(&mut machines[i], &u);
        }
        let preserve_of =
            |m: &Machine| annotation_of(&m.metadata, annotation::PRESERVE).map(str::to_owned);
        let got = machines
            .iter()
            .filter(|m| preserve_of(m).as_deref() == Some(preserve::AUTO_PRESERVED))
            .count();
        assert_eq!(got, want, "Entry {entry:?}");
        assert_eq!(
            preserve_of(&machines[2]),
            None,
            "Entry {entry:?}: a running machine is never auto-preserved"
        );
        assert_eq!(
            preserve_of(&machines[3]).as_deref(),
            Some(preserve::FALSE),
            "Entry {entry:?}: preserve=false is kept"
        );
    }
}

/// machineset_test.go `#shouldFailedMachineBeTerminated`.
#[test]
fn machineset_should_failed_machine_be_terminated() {
    struct Row {
        entry: &'static str,
        /// Offset of `preserveExpiryTime` from now.
        expiry: Option<i64>,
        machine_value: &'static str,
        last_applied_node_value: &'static str,
        node_value: &'static str,
        terminate: bool,
    }
    let row = |entry, expiry, machine_value, node_value, terminate| Row {
        entry,
        expiry,
        machine_value,
        last_applied_node_value: "",
        node_value,
        terminate,
    };
    let rows = [
        row(
            "should return false if preserve expiry time is in the future",
            Some(3600),
            preserve::NOW,
            "",
            false,
        ),
        row(
            "should return true if machine is annotated with preserve=false",
            None,
            preserve::FALSE,
            "",
            true,
        ),
        row(
            "should return true if node is annotated with preserve=false",
            None,
            "",
            preserve::FALSE,
            true,
        ),
        row(
            "should return false if machine is annotated with preserve=now, and node has not been annotated, and preserveExpiryTime is not yet set",
            None,
            preserve::NOW,
            "",
            false,
        ),
        row(
            "should return false if node is annotated with preserve=now, and preserveExpiryTime is not yet set",
            None,
            "",
            preserve::NOW,
            false,
        ),
        row(
            "should return false if machine is annotated with preserve=when-failed, and node has not been annotated",
            None,
            preserve::WHEN_FAILED,
            "",
            false,
        ),
        row(
            "should return false if node is annotated with preserve=when-failed",
            None,
            "",
            preserve::WHEN_FAILED,
            false,
        ),
        row(
            "should return true if preservation has timed out",
            Some(-1),
            "",
            preserve::NOW,
            true,
        ),
        Row {
            last_applied_node_value: preserve::NOW,
            ..row(
                "should return true if laNodePreserveValue is not empty, machineAnnotationValue is not empty and nodeAnnotationValue is empty, indicating that node Annotation Value was deleted",
                None,
                preserve::WHEN_FAILED,
                "",
                true,
            )
        },
    ];
    for r in rows {
        // Upstream writes both annotations even when empty and always names node "test-node".
        let mut m = ann(
            ann(
                machine("test-machine", Some(MachinePhase::Failed), 60),
                annotation::PRESERVE,
                r.machine_value,
            ),
            annotation::LAST_APPLIED_NODE_PRESERVE_VALUE,
            r.last_applied_node_value,
        );
        m = lbl(m, label::NODE, "test-node");
        if let Some(offset) = r.expiry {
            m = preserved_until(m, offset);
        }
        let nodes = BTreeMap::from([("test-node".to_owned(), Some(r.node_value.to_owned()))]);
        assert_eq!(
            should_failed_machine_be_terminated(&m, &nodes, now()),
            r.terminate,
            "Entry {:?}",
            r.entry
        );
    }
}

fn plan_for(ms: &MachineSet, machines: &[Machine]) -> MachineSetPlan {
    let nodes: &'static BTreeMap<String, Option<String>> = Box::leak(Box::default());
    plan(MachineSetInput {
        machine_set: ms,
        machines: Box::leak(shared(machines).into_boxed_slice()),
        node_preserve: nodes,
        readiness: Readiness::Satisfied,
        now: now(),
    })
    .unwrap()
}

/// machineset_test.go `#reconcileClusterMachineSet`, the `It`s with a behavioural counterpart in
/// [`plan`] and [`machine_set_status`].
#[test]
fn machineset_reconcile_cluster_machine_set() {
    // It "should create new machines.": replicas 3, nothing yet → 3 created.
    let p = plan_for(&machine_set(3), &[]);
    assert_eq!(
        decided(&p.actions),
        Replicas::Create(3),
        "should create new machines."
    );

    // It "should return nil if machineset validation fails": upstream logs and drops the key; our
    // plan refuses the object (the shell logs it and does not requeue).
    let mut invalid = machine_set(3);
    invalid
        .spec
        .template
        .as_mut()
        .and_then(|t| t.spec.as_mut())
        .and_then(|s| s.class.as_mut())
        .unwrap()
        .kind = None;
    assert!(
        matches!(
            plan(MachineSetInput {
                machine_set: &invalid,
                machines: &[],
                node_preserve: &BTreeMap::new(),
                readiness: Readiness::Satisfied,
                now: now(),
            }),
            Err(MachineSetError::MissingClass { .. })
        ),
        "should return nil if machineset validation fails"
    );

    // It "should delete all the machines as DeletionTimestamp is set on MachineSet": upstream's
    // deleting set (finalizer present) has no machine and must create none: the finalizer goes.
    let mut deleting = machine_set(3);
    deleting.metadata.deletion_timestamp = Some(Time(now()));
    assert_eq!(
        plan_for(&deleting, &[]).actions,
        vec![MachineSetAction::RemoveFinalizer],
        "should delete all the machines as DeletionTimestamp is set on MachineSet (no machine)"
    );
    // The same with machines (what the name promises): every machine is deleted, none created.
    let p = plan_for(&deleting, &[running("machine-1"), running("machine-2")]);
    assert_eq!(
        decided(&p.actions),
        Replicas::Delete(vec!["machine-1", "machine-2"]),
        "should delete all the machines as DeletionTimestamp is set on MachineSet"
    );

    // It "should count preserved Failed Replicas and exclude these replicas from failed machines":
    // upstream's only machine is Failed and preserved for an hour.
    let preserved = preserved_until(machine("machine-1", Some(MachinePhase::Failed), 60), 3600);
    let status = machine_set_status(
        &machine_set(3),
        std::slice::from_ref(&preserved),
        None,
        now(),
    );
    assert_eq!(status.preserved_failed_replicas, Some(1));
    assert_eq!(status.failed_machines, None);
    // Also when its lastOperation failed (what would otherwise list it): still excluded, while an
    // unpreserved failed machine is listed.
    let failed_op = |mut m: Machine| {
        m.status.as_mut().unwrap().last_operation = Some(LastOperation {
            state: Some(MachineState::Failed),
            ..LastOperation::default()
        });
        m
    };
    let machines = [
        failed_op(preserved),
        failed_op(machine("machine-2", Some(MachinePhase::Failed), 60)),
    ];
    let status = machine_set_status(&machine_set(3), &machines, None, now());
    assert_eq!(status.preserved_failed_replicas, Some(1));
    let failed: Vec<_> = status
        .failed_machines
        .unwrap_or_default()
        .into_iter()
        .filter_map(|f| f.name)
        .collect();
    assert_eq!(
        failed,
        vec!["machine-2"],
        "should count preserved Failed Replicas and exclude these replicas from failed machines"
    );
}

/// machineset_test.go `#claimMachines`, `#addMachineSetFinalizers`, `#deleteMachineSetFinalizers`,
/// `#updateMachineSetFinalizers`: adoption, release and finalizer actions of [`plan`].
#[test]
fn machineset_claim_and_finalizers() {
    let ms = machine_set(1);
    // FIt "should adopt new machines." (commented out upstream, kept here): an orphan with
    // matching labels is adopted.
    let mut orphan = running("machine-1");
    orphan.metadata.owner_references = None;
    let p = plan_for(&ms, &[orphan]);
    assert!(
        p.actions.iter().any(|a| matches!(a,
            MachineSetAction::AdoptMachine { machine, owner }
                if machine.name == "machine-1" && owner.uid == "1234567" && owner.controller == Some(true))),
        "should adopt new machines. {:?}",
        p.actions
    );
    // It "should release the machine due to not matching machine-labels.".
    let mut foreign = running("machine-1");
    foreign.metadata.labels = Some(BTreeMap::from([("dummy".into(), "dummy".into())]));
    let p = plan_for(&ms, &[foreign]);
    assert!(
        p.actions.iter().any(|a| matches!(a,
            MachineSetAction::ReleaseMachine { machine } if machine.name == "machine-1")),
        "should release the machine due to not matching machine-labels. {:?}",
        p.actions
    );
    // It "should add finalizer on MachineSet.": upstream's MachineSet-test (replicas 2, no
    // finalizers) ends with one finalizer, MCM's. Ours plans one AddFinalizer, first; the shell
    // writes the current list with MCM's finalizer, from none that is `[MCM]`.
    let mut bare = machine_set(2);
    bare.metadata.finalizers = None;
    let actions = plan_for(&bare, &[]).actions;
    assert_eq!(
        actions.first(),
        Some(&MachineSetAction::AddFinalizer),
        "should add finalizer on MachineSet. {actions:?}"
    );
    assert_eq!(
        actions
            .iter()
            .filter(|a| matches!(
                a,
                MachineSetAction::AddFinalizer | MachineSetAction::RemoveFinalizer
            ))
            .count(),
        1,
        "should add finalizer on MachineSet. {actions:?}"
    );
    // It "should delete the finalizer from MachineSet.": upstream's set carries `["finalizer1"]`,
    // not MCM's, and `deleteMachineSetFinalizers` writes nothing (the set read back has no
    // finalizers, as stored). Ours removes only MCM's: a deleted set with upstream's list and no
    // machine plans no finalizer write.
    let mut foreign = machine_set(2);
    foreign.metadata.finalizers = Some(vec!["finalizer1".into()]);
    foreign.metadata.deletion_timestamp = Some(Time(now()));
    assert_eq!(
        plan_for(&foreign, &[]).actions,
        Vec::<MachineSetAction>::new(),
        "should delete the finalizer from MachineSet."
    );
    // Extra: with MCM's finalizer, a deleted set without machines removes it.
    let mut gone = machine_set(0);
    gone.metadata.deletion_timestamp = Some(Time(now()));
    assert_eq!(
        plan_for(&gone, &[]).actions,
        vec![MachineSetAction::RemoveFinalizer],
        "a deleted set without machines loses MCM's finalizer"
    );
}

/// machineset_test.go `#slowStartBatch`: batch sizes 1, 2, 4, … summing to the count.
#[test]
fn machineset_slow_start_batch() {
    // It "should return number of success call which should be equal to count.": upstream calls
    // with count 10 and initial batch 2 and counts 10 successes.
    let batches = slow_start_batches(10, 2);
    assert_eq!(batches, vec![2, 4, 4]);
    assert_eq!(batches.iter().sum::<usize>(), 10);
    // It "should fail initialBatchSize is 0": upstream's loop never runs (0 successes, no error).
    // Deviation on an input nothing passes (both use the constant 1): we start at 1.
    assert_eq!(SLOW_START_INITIAL_BATCH, 1);
    assert_eq!(slow_start_batches(3, 0), vec![1, 2]);
}

/// machineset_test.go `#terminateMachines` and `#prepareMachineForDeletion`: which machines a
/// pass deletes and the status written on them ([`terminating_status`]).
#[test]
fn machineset_terminate_machines() {
    // It "should delete the inactive machines.": two Failed machines of a set of 2 are replaced.
    let failed = [
        machine("machine-1", Some(MachinePhase::Failed), 60),
        machine("machine-2", Some(MachinePhase::Failed), 60),
    ];
    let actions =
        manage_replicas(&machine_set(2), &shared(&failed), &BTreeMap::new(), now()).unwrap();
    assert_eq!(
        decided(&actions),
        Replicas::Delete(vec!["machine-1", "machine-2"]),
        "should delete the inactive machines."
    );
    // It "should delete the target machine." (prepareMachineForDeletion): the status written with
    // the deletion.
    let st = terminating_status(&running("machine-1"), now()).unwrap();
    let cs = st.current_status.unwrap();
    assert_eq!(cs.phase, Some(MachinePhase::Terminating));
    let lo = st.last_operation.unwrap();
    assert_eq!(lo.type_, Some(MachineOperationType::Delete));
    assert_eq!(lo.state, Some(MachineState::Processing));
    assert_eq!(
        lo.description.as_deref(),
        Some(last_operation::DELETING_MACHINE_FROM_CLOUD_PROVIDER)
    );
}

/// Metadata of an object of namespace `test` with `labels`, resourceVersion `rv` and a
/// controller reference to `kind`/`owner` with UID `uid`.
fn routed_meta(
    labels: Option<BTreeMap<String, String>>,
    rv: &str,
    owner: Option<(&str, &str, &str)>,
) -> ObjectMeta {
    ObjectMeta {
        namespace: Some("test".into()),
        labels,
        resource_version: Some(rv.into()),
        owner_references: owner
            .map(|(kind, name, uid)| vec![claim::owner_reference(kind, name, uid)]),
        ..ObjectMeta::default()
    }
}

/// machineset_test.go `#getMachineMachineSets`, `#addMachineToMachineSet`,
/// `#updateMachineToMachineSet` and `#resolveMachineSetControllerRef`: which MachineSets a machine
/// event enqueues ([`crate::machine_set::routing::owners_to_sync`]).
#[test]
fn machineset_machine_event_routing() {
    use crate::machine_set::routing::owners_to_sync;
    let sets = vec![machine_set(1)];
    let owned =
        |rv: &str| routed_meta(Some(pool()), rv, Some((KIND, "MachineSet-test", "1234567")));
    let deleting = |mut m: ObjectMeta| {
        m.deletion_timestamp = Some(Time(now()));
        m
    };
    let one = vec!["MachineSet-test".to_owned()];
    let none: Vec<String> = Vec::new();
    // (Describe / It or Entry, old, new, enqueued)
    let rows: Vec<(&str, Option<ObjectMeta>, ObjectMeta, &Vec<String>)> = vec![
        (
            "#getMachineMachineSets / should return error (machine without labels)",
            None,
            routed_meta(None, "1", None),
            &none,
        ),
        (
            "#getMachineMachineSets / should not return error",
            None,
            routed_meta(Some(pool()), "1", None),
            &one,
        ),
        (
            "#addMachineToMachineSet / should enqueue the machineset as controllerRef matches",
            None,
            owned("1"),
            &one,
        ),
        (
            "#addMachineToMachineSet / should enqueue the machineset though controllerRef is not set but orphan is created",
            None,
            owned("1"),
            &one,
        ),
        (
            "#addMachineToMachineSet / should enqueue the machineset while machine is being deleted",
            None,
            deleting(owned("1")),
            &one,
        ),
        (
            "#addMachineToMachineSet / shouldn't enqueue the machineset if machineset is not found via cotrollerRef",
            None,
            routed_meta(Some(pool()), "1", Some((KIND, "dummy-one", "1234567"))),
            &none,
        ),
        (
            "#updateMachineToMachineSet / shouldn't enqueue the machineset if resource version matches",
            Some(owned("123")),
            owned("123"),
            &none,
        ),
        (
            "#updateMachineToMachineSet / ResourceVersion is different for new machine",
            Some(owned("123")),
            owned("3456"),
            &one,
        ),
        (
            "#updateMachineToMachineSet / newMachine is being deleted",
            Some(deleting(owned("123"))),
            owned("345"),
            &one,
        ),
        (
            "#updateMachineToMachineSet / labels on newMachine has changed",
            Some(owned("123")),
            routed_meta(
                Some(BTreeMap::from([("dummy".into(), "dummy".into())])),
                "345",
                Some((KIND, "MachineSet-test", "1234567")),
            ),
            &one,
        ),
        (
            "#updateMachineToMachineSet / if controllerRef has changed and new ref is nil",
            Some(owned("123")),
            routed_meta(Some(pool()), "345", None),
            &one,
        ),
        (
            "#updateMachineToMachineSet / if controllerRef has changed and new ref points to valid machineSet",
            Some(owned("123")),
            routed_meta(
                Some(pool()),
                "345",
                Some((KIND, "MachineSet-test-dummy", "1234567")),
            ),
            &one,
        ),
    ];
    for (case, old, new, want) in rows {
        assert_eq!(&owners_to_sync(old.as_ref(), &new, &sets), want, "{case}");
    }
    // #resolveMachineSetControllerRef: a reference resolves when name and UID match.
    let mut other_uid = machine_set(1);
    other_uid.metadata.uid = Some("1234".into());
    let reference = routed_meta(None, "1", Some((KIND, "MachineSet-test", "1234567")));
    assert!(
        owners_to_sync(None, &reference, &[other_uid]).is_empty(),
        "#resolveMachineSetControllerRef / should not return MachineSet (UID differs)"
    );
    assert_eq!(
        owners_to_sync(None, &reference, &sets),
        one,
        "#resolveMachineSetControllerRef / should return MachineSet"
    );
    let wrong_kind = routed_meta(
        None,
        "1",
        Some(("MachineDeployment", "MachineSet-test", "1234567")),
    );
    assert!(
        owners_to_sync(None, &wrong_kind, &sets).is_empty(),
        "#resolveMachineSetControllerRef / should not return MachineSet (kind differs)"
    );
}

/// deployment_test.go `#addMachineSetToDeployment`, `#updateMachineSetToDeployment` and
/// `#deleteMachineSetToDeployment`: which deployments a MachineSet event enqueues.
#[test]
fn deployment_machine_set_event_routing() {
    use crate::machine_set::routing::owners_to_sync;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as Selector;
    let mut md = mcm_api::v1alpha1::MachineDeployment::new(
        "MachineDeployment-test",
        mcm_api::v1alpha1::MachineDeploymentSpec {
            selector: Some(Selector {
                match_labels: Some(pool()),
                match_expressions: None,
            }),
            ..Default::default()
        },
    );
    md.metadata.namespace = Some("test".into());
    md.metadata.uid = Some("1234567".into());
    let deployments = vec![md];
    const MD: &str = "MachineDeployment";
    let owned = |rv: &str| {
        routed_meta(
            Some(pool()),
            rv,
            Some((MD, "MachineDeployment-test", "1234567")),
        )
    };
    let deleting = |mut m: ObjectMeta| {
        m.deletion_timestamp = Some(Time(now()));
        m
    };
    let one = vec!["MachineDeployment-test".to_owned()];
    let none: Vec<String> = Vec::new();
    let rows: Vec<(&str, Option<ObjectMeta>, ObjectMeta, &Vec<String>)> = vec![
        (
            "#addMachineSetToDeployment / be enqueued as MachineSet is added",
            None,
            owned("1"),
            &one,
        ),
        (
            "#addMachineSetToDeployment / be enqueued as MachineSet is deleted",
            None,
            deleting(owned("1")),
            &one,
        ),
        (
            "#addMachineSetToDeployment / be enqueued as controllerRef is nil, and it should find it via label",
            None,
            routed_meta(Some(pool()), "1", None),
            &one,
        ),
        (
            "#addMachineSetToDeployment / not be enqueued as controllerRef is nil, and labels are also not matching",
            None,
            routed_meta(None, "1", None),
            &none,
        ),
        (
            "#addMachineSetToDeployment / not be enqueued as controllerRef is not nil, but doesnt match any machine-deployment",
            None,
            routed_meta(
                Some(pool()),
                "1",
                Some((MD, "MachineDeployment-test-dummy", "1234567")),
            ),
            &none,
        ),
        (
            "#updateMachineSetToDeployment / not be enqueued as ResourceVersion is same",
            Some(owned("123")),
            owned("123"),
            &none,
        ),
        (
            "#updateMachineSetToDeployment / be enqueued as newMachineSet is being deleted",
            Some(deleting(owned("123"))),
            owned("345"),
            &one,
        ),
        (
            "#updateMachineSetToDeployment / be enqueued as newMachineSet's label has changed",
            Some(owned("123")),
            routed_meta(
                Some(BTreeMap::from([("dummy".into(), "dummy".into())])),
                "345",
                Some((MD, "MachineDeployment-test", "1234567")),
            ),
            &one,
        ),
        (
            "#updateMachineSetToDeployment / be enqueued as newMachineSet's controllerRef has changed",
            Some(owned("123")),
            routed_meta(Some(pool()), "345", None),
            &one,
        ),
        (
            "#updateMachineSetToDeployment / not be enqueued as both oldMachineSet and newMachineSet has nil controllerRef",
            Some(routed_meta(Some(pool()), "123", None)),
            routed_meta(Some(pool()), "345", None),
            &none,
        ),
        (
            "#updateMachineSetToDeployment / be enqueued as newMachineSet's controllerRef has changed and points to a other valid MachineDeployment",
            Some(owned("123")),
            routed_meta(
                Some(pool()),
                "345",
                Some((MD, "MachineSet-test-dummy", "1234567")),
            ),
            &one,
        ),
        // Deletions reach `owners_to_sync` as an event without an old object.
        (
            "#deleteMachineSetToDeployment / be enqueued as MachineSet is deleted",
            None,
            deleting(owned("1")),
            &one,
        ),
        (
            "#deleteMachineSetToDeployment / not be enqueued as MachineDeployment's UID is different in controllerRef",
            None,
            deleting(routed_meta(
                Some(pool()),
                "1",
                Some((MD, "MachineDeployment-test", "111-dummy")),
            )),
            &none,
        ),
    ];
    for (case, old, new, want) in rows {
        assert_eq!(
            &owners_to_sync(old.as_ref(), &new, &deployments),
            want,
            "{case}"
        );
    }
}
