//! Upstream `pkg/controller` table tests replayed against the pure MachineSet plan.
//!
//! Sources: `machineset_test.go` and `controller_utils_test.go` of gardener/machine-controller-manager.
//! Every test function below covers one upstream `Describe`; every row names the upstream `It` or
//! `Entry` it ports, so a failure points at the upstream case. The observed objects and expected
//! outcomes are restated as data (our own code, no upstream code): what the fake clients of the
//! Go test observed (machines created or deleted, annotations written, the boolean returned)
//! is what our plan functions must decide. The full mapping, with the upstream cases that have
//! no counterpart here, is `docs/upstream-conformance-controllers.md`.
#![allow(clippy::unwrap_used)]

use super::*;
use crate::machine_set::expectations::Readiness;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use mcm_api::v1alpha1::{ClassSpec, MachineSetSpec, MachineSpec, MachineTemplateSpec};

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

/// Upstream's `testMachineSet`: `MachineSet-test`, UID 1234567, selector and template label
/// `test-label`.
fn machine_set(replicas: i32) -> MachineSet {
    let mut ms = MachineSet::new(
        "MachineSet-test",
        MachineSetSpec {
            replicas: Some(replicas),
            selector: Some(LabelSelector {
                match_labels: Some(pool()),
                match_expressions: None,
            }),
            template: Some(MachineTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pool()),
                    ..ObjectMeta::default()
                }),
                spec: Some(MachineSpec {
                    class: Some(ClassSpec {
                        api_group: None,
                        kind: Some("MachineClass".into()),
                        name: Some("test-machine-class".into()),
                    }),
                    ..MachineSpec::default()
                }),
            }),
            ..MachineSetSpec::default()
        },
    );
    ms.metadata.namespace = Some("test".into());
    ms.metadata.uid = Some("1234567".into());
    ms.metadata.labels = Some(pool());
    ms.metadata.generation = Some(1);
    ms.metadata.finalizers = Some(vec![finalizer::MACHINE_CONTROLLER_MANAGER.into()]);
    ms
}

/// A machine of the pool, created `age_secs` before [`now`], owned by `MachineSet-test`.
fn machine(name: &str, phase: Option<MachinePhase>, age_secs: i64) -> Machine {
    let mut m = Machine::new(
        name,
        MachineSpec {
            class: Some(ClassSpec {
                api_group: None,
                kind: Some("MachineClass".into()),
                name: Some("test-machine-class".into()),
            }),
            ..MachineSpec::default()
        },
    );
    m.metadata.namespace = Some("test".into());
    m.metadata.uid = Some(format!("uid-{name}"));
    m.metadata.labels = Some(pool());
    m.metadata.creation_timestamp = Some(Time(at(-age_secs)));
    m.metadata.owner_references = Some(vec![claim::owner_reference(
        KIND,
        "MachineSet-test",
        "1234567",
    )]);
    m.status = Some(MachineStatus {
        current_status: Some(CurrentStatus {
            phase,
            ..CurrentStatus::default()
        }),
        ..MachineStatus::default()
    });
    m
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
    let rows: Vec<(&str, i32, Option<String>, Vec<Machine>, Replicas)> = vec![
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
    assert_eq!(decided(&p.actions), Replicas::Create(3), "should create new machines.");

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
    let status = machine_set_status(&machine_set(3), std::slice::from_ref(&preserved), None, now());
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
    // It "should add finalizer on MachineSet." / "should update the finalizer on MachineSet.".
    let mut bare = machine_set(0);
    bare.metadata.finalizers = None;
    assert_eq!(
        plan_for(&bare, &[]).actions,
        vec![MachineSetAction::AddFinalizer],
        "should add finalizer on MachineSet."
    );
    // It "should delete the finalizer from MachineSet.": deleting and no machine left.
    let mut gone = machine_set(0);
    gone.metadata.deletion_timestamp = Some(Time(now()));
    assert_eq!(
        plan_for(&gone, &[]).actions,
        vec![MachineSetAction::RemoveFinalizer],
        "should delete the finalizer from MachineSet."
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
    let actions = manage_replicas(&machine_set(2), &shared(&failed), &BTreeMap::new(), now()).unwrap();
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
