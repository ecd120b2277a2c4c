//! Upstream `pkg/controller` table tests replayed against the pure MachineDeployment plan.
//!
//! Sources: `deployment_util_test.go`, `deployment_sync_test.go`, `deployment_test.go` and
//! `deployment_inplace_test.go` of gardener/machine-controller-manager. Every test function
//! below covers one upstream `Describe`; every row names the upstream `It` or `Entry` it ports.
//! Upstream drives a controller with fake clients; we restate each case as data (our own code):
//! the observed objects go into [`plan`] (or the pure helper the upstream function corresponds
//! to) and what the fake clients saw written (MachineSet sizes, annotations, created sets,
//! node labels, the returned boolean or count) is asserted on the planned actions. The full
//! mapping, with deviations and upstream cases without a counterpart, is
//! `docs/upstream-conformance.md` (part 2).
#![allow(clippy::unwrap_used)]

use crate::machine_deployment::plan::*;
use std::collections::{BTreeMap, BTreeSet};

use crate::machine_deployment::fencepost;
use crate::machine_deployment::revision::{self, KIND};
use crate::machine_deployment::work::Work;
use crate::machine_deployment::{autoscaler, in_place, status};
use crate::machine_set::claim;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use mcm_api::keys::condition;
use mcm_api::keys::{annotation, finalizer, label, value};
use mcm_api::v1alpha1::{
    ClassSpec, CurrentStatus, InPlaceUpdateMachineDeployment, MachineDeploymentSpec,
    MachineDeploymentStrategy, MachinePhase, MachineSetSpec, MachineSetStatus, MachineSpec,
    MachineStatus, MachineTemplateSpec, OrchestrationType, RollbackConfig,
    RollingUpdateMachineDeployment, UpdateConfiguration,
};
use mcm_api::v1alpha1::{
    ConditionStatus, Machine, MachineDeployment, MachineDeploymentConditionType as CondType,
    MachineDeploymentStatus, MachineDeploymentStrategyType as Strategy, MachineSet,
};
use std::sync::Arc;

fn now() -> Timestamp {
    Timestamp::from_second(1_750_000_000).unwrap()
}

fn pool() -> BTreeMap<String, String> {
    BTreeMap::from([("test-label".to_owned(), "test-label".to_owned())])
}

fn int(v: i32) -> Option<IntOrString> {
    Some(IntOrString::Int(v))
}

fn config(surge: Option<IntOrString>, unavailable: Option<IntOrString>) -> UpdateConfiguration {
    UpdateConfiguration {
        max_surge: surge,
        max_unavailable: unavailable,
    }
}

fn rolling(
    surge: Option<IntOrString>,
    unavailable: Option<IntOrString>,
) -> MachineDeploymentStrategy {
    MachineDeploymentStrategy {
        type_: Some(Strategy::RollingUpdate),
        rolling_update: Some(RollingUpdateMachineDeployment {
            update_configuration: config(surge, unavailable),
        }),
        in_place_update: None,
    }
}

fn in_place_strategy(
    surge: Option<IntOrString>,
    unavailable: Option<IntOrString>,
    orchestration: OrchestrationType,
) -> MachineDeploymentStrategy {
    MachineDeploymentStrategy {
        type_: Some(Strategy::InPlaceUpdate),
        rolling_update: None,
        in_place_update: Some(InPlaceUpdateMachineDeployment {
            update_configuration: config(surge, unavailable),
            orchestration_type: Some(orchestration),
        }),
    }
}

fn strategy_of(kind: Strategy) -> MachineDeploymentStrategy {
    MachineDeploymentStrategy {
        type_: Some(kind),
        rolling_update: None,
        in_place_update: None,
    }
}

fn template(class: &str) -> MachineTemplateSpec {
    MachineTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(pool()),
            ..ObjectMeta::default()
        }),
        spec: Some(MachineSpec {
            class: Some(ClassSpec {
                api_group: None,
                kind: Some("MachineClass".into()),
                name: Some(class.into()),
            }),
            ..MachineSpec::default()
        }),
    }
}

/// Upstream's `testMachineDeployment` of `#reconcileClusterMachineDeployment` (the other
/// Describes use the same shape): 5 replicas, RollingUpdate 1/1, class `MachineClass-test`.
fn deployment(replicas: i32, strategy: MachineDeploymentStrategy) -> MachineDeployment {
    let mut md = MachineDeployment::new(
        "MachineDeployment-test",
        MachineDeploymentSpec {
            replicas: Some(replicas),
            selector: Some(LabelSelector {
                match_labels: Some(pool()),
                match_expressions: None,
            }),
            template: template("MachineClass-test"),
            strategy: Some(strategy),
            ..MachineDeploymentSpec::default()
        },
    );
    md.metadata.namespace = Some("test".into());
    md.metadata.uid = Some("1234567".into());
    md.metadata.generation = Some(5);
    md.metadata.labels = Some(pool());
    md.metadata.finalizers = Some(vec![finalizer::MACHINE_CONTROLLER_MANAGER.into()]);
    md
}

/// A MachineSet claimed by `md`, of template class `class`, created `age` seconds ago.
fn machine_set(
    md: &MachineDeployment,
    name: &str,
    class: &str,
    replicas: i32,
    annotations: &[(&str, &str)],
    age: i64,
) -> MachineSet {
    let mut ms = MachineSet::new(
        name,
        MachineSetSpec {
            replicas: Some(replicas),
            selector: md.spec.selector.clone(),
            template: Some(template(class)),
            ..MachineSetSpec::default()
        },
    );
    ms.metadata.namespace = Some("test".into());
    ms.metadata.uid = Some(format!("uid-{name}"));
    ms.metadata.labels = Some(pool());
    ms.metadata.generation = Some(1);
    ms.metadata.creation_timestamp = Some(Time(now() - SignedDuration::from_secs(age)));
    ms.metadata.annotations = Some(
        annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    ms.metadata.owner_references = Some(vec![claim::owner_reference(
        KIND,
        md.metadata.name.as_deref().unwrap(),
        md.metadata.uid.as_deref().unwrap(),
    )]);
    ms.status = Some(MachineSetStatus {
        observed_generation: Some(1),
        ..MachineSetStatus::default()
    });
    ms
}

fn with_status(mut ms: MachineSet, replicas: i32, available: i32) -> MachineSet {
    let st = ms.status.get_or_insert_with(Default::default);
    st.replicas = Some(replicas);
    st.available_replicas = Some(available);
    st.ready_replicas = Some(available);
    st.fully_labeled_replicas = Some(replicas);
    ms
}

/// A machine controlled by `ms`, backed by node `node`.
fn machine_of(ms: &MachineSet, name: &str, node: Option<&str>) -> Machine {
    let mut m = Machine::new(name, MachineSpec::default());
    m.metadata.namespace = Some("test".into());
    m.metadata.uid = Some(format!("uid-{name}"));
    let mut labels = pool();
    if let Some(n) = node {
        labels.insert(label::NODE.to_owned(), n.to_owned());
    }
    m.metadata.labels = Some(labels);
    m.metadata.owner_references = Some(vec![claim::owner_reference(
        crate::machine_set::types::KIND,
        ms.metadata.name.as_deref().unwrap(),
        ms.metadata.uid.as_deref().unwrap(),
    )]);
    m.status = Some(MachineStatus {
        current_status: Some(CurrentStatus {
            phase: Some(MachinePhase::Running),
            ..CurrentStatus::default()
        }),
        ..MachineStatus::default()
    });
    m
}

fn run(
    md: &MachineDeployment,
    sets: &[MachineSet],
    machines: &[Machine],
    nodes: &BTreeMap<String, NodeView>,
) -> Result<DeploymentPlan, DeploymentError> {
    let machines: Vec<Arc<Machine>> = machines.iter().cloned().map(Arc::new).collect();
    plan(DeploymentInput {
        deployment: md,
        machine_sets: sets,
        machines: &machines,
        config: DeploymentConfig::default(),
        nodes,
        now: now(),
        template_class_missing: false,
    })
}

fn run_ok(md: &MachineDeployment, sets: &[MachineSet], machines: &[Machine]) -> DeploymentPlan {
    run(md, sets, machines, &BTreeMap::new()).unwrap()
}

/// The MachineSets as the fake client holds them after the pass: the observed ones overwritten
/// by every update and creation of the plan.
fn sets_after(sets: &[MachineSet], actions: &[DeploymentAction]) -> BTreeMap<String, MachineSet> {
    let mut out: BTreeMap<String, MachineSet> = sets
        .iter()
        .map(|s| (s.metadata.name.clone().unwrap(), s.clone()))
        .collect();
    for a in actions {
        match a {
            DeploymentAction::UpdateMachineSet(ms) | DeploymentAction::CreateMachineSet(ms) => {
                out.insert(ms.metadata.name.clone().unwrap(), (**ms).clone());
            }
            DeploymentAction::DeleteMachineSet(r) => {
                out.remove(&r.name);
            }
            _ => {}
        }
    }
    out
}

fn created(actions: &[DeploymentAction]) -> Vec<&MachineSet> {
    actions
        .iter()
        .filter_map(|a| match a {
            DeploymentAction::CreateMachineSet(ms) => Some(&**ms),
            _ => None,
        })
        .collect()
}

fn class_of(ms: &MachineSet) -> String {
    ms.spec
        .template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .and_then(|s| s.class.as_ref())
        .and_then(|c| c.name.clone())
        .unwrap_or_default()
}

fn ann_of<'a>(ms: &'a MachineSet, key: &str) -> Option<&'a str> {
    ms.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// deployment_util_test.go `#MaxUnavailable` ([`fencepost::max_unavailable`]).
#[test]
fn deployment_util_max_unavailable() {
    let rows: Vec<(&str, MachineDeploymentStrategy, i32, i32)> = vec![
        (
            "strategy is neither RollingUpdate nor InPlaceUpdate",
            MachineDeploymentStrategy {
                type_: Some(Strategy::Other(String::new())),
                rolling_update: None,
                in_place_update: None,
            },
            2,
            0,
        ),
        (
            "strategy is RollingUpdate and replicas is zeros",
            strategy_of(Strategy::RollingUpdate),
            0,
            0,
        ),
        (
            "strategy is RollingUpdate with maxUnavailable=1, replicas=5",
            rolling(int(1), int(1)),
            5,
            1,
        ),
        (
            "strategy is RollingUpdate with maxUnavailable=10, replicas=5",
            rolling(int(2), int(10)),
            5,
            5,
        ),
        (
            "strategy is InPlaceUpdate with ManualUpdate=true, maxUnavailable=2, replicas=5",
            in_place_strategy(int(1), int(2), OrchestrationType::Manual),
            5,
            2,
        ),
        (
            "strategy is InPlaceUpdate with ManualUpdate=false, maxUnavailable=10, replicas=3",
            in_place_strategy(int(1), int(10), OrchestrationType::Auto),
            3,
            3,
        ),
        (
            "strategy is InPlaceUpdate with ManualUpdate=true, replicas=0",
            MachineDeploymentStrategy {
                type_: Some(Strategy::InPlaceUpdate),
                rolling_update: None,
                in_place_update: Some(InPlaceUpdateMachineDeployment {
                    update_configuration: config(None, None),
                    orchestration_type: Some(OrchestrationType::Manual),
                }),
            },
            0,
            0,
        ),
    ];
    for (entry, strategy, replicas, want) in rows {
        let md = deployment(replicas, strategy);
        assert_eq!(fencepost::max_unavailable(&md), Ok(want), "Entry {entry:?}");
    }
}

/// deployment_util_test.go `#NewISNewReplicas / #table` ([`new_machine_set_replicas`]; the
/// machines counted are the sets' `status.replicas`, equal to their spec in every row).
#[test]
fn deployment_util_new_is_new_replicas() {
    // (Entry, strategy, deployment replicas, old set, new set, expected new size)
    let rows: Vec<(&str, MachineDeploymentStrategy, i32, i32, i32, i32)> = vec![
        (
            "RollingUpdate, scale up within max surge",
            rolling(int(2), None),
            5,
            4,
            2,
            3,
        ),
        (
            "RollingUpdate, max surge reached",
            rolling(int(2), None),
            5,
            4,
            3,
            3,
        ),
        (
            "Recreate strategy",
            strategy_of(Strategy::Recreate),
            5,
            4,
            2,
            5,
        ),
        (
            "InPlaceUpdate with ManualUpdate=true",
            in_place_strategy(None, None, OrchestrationType::Manual),
            5,
            4,
            2,
            0,
        ),
        (
            "InPlaceUpdate, scale up within max surge",
            in_place_strategy(int(2), None, OrchestrationType::Auto),
            5,
            4,
            2,
            3,
        ),
        (
            "InPlaceUpdate with ManualUpdate=false, max surge already reached",
            in_place_strategy(int(1), None, OrchestrationType::Auto),
            5,
            4,
            2,
            2,
        ),
    ];
    for (entry, strategy, replicas, old, new, want) in rows {
        let md = deployment(replicas, strategy);
        let surge = match md.spec.strategy.as_ref().and_then(|s| s.type_.as_ref()) {
            Some(Strategy::RollingUpdate) => fencepost::scaled_value(
                md.spec
                    .strategy
                    .as_ref()
                    .and_then(|s| s.rolling_update.as_ref())
                    .and_then(|r| r.update_configuration.max_surge.as_ref())
                    .unwrap(),
                replicas,
                true,
            )
            .unwrap(),
            _ => fencepost::in_place_surge(&md),
        };
        assert_eq!(
            new_machine_set_replicas(&md, old + new, new, surge),
            want,
            "Entry {entry:?}"
        );
    }
    // Entry "Unsupported strategy type": upstream returns an error; ours refuses the deployment
    // before any replica is computed.
    let md = deployment(5, strategy_of(Strategy::Other("UnsupportedType".into())));
    assert!(
        matches!(validate(&md), Err(DeploymentError::InvalidStrategy { .. })),
        "Entry \"Unsupported strategy type\""
    );
}

/// deployment_sync_test.go `#scale / ##table`: upstream calls `scale` directly; a paused
/// deployment runs exactly `sync` (scale, no rollout), so the rows go through [`plan`] paused.
/// Sets ms1 and ms2 are old (another class), ms3 is the new one; maxSurge 2, maxUnavailable 0.
#[test]
fn deployment_sync_scale() {
    type Sets<'a> = &'a [(&'a str, i32, &'a str, &'a str)];
    // (Entry, deployment replicas, sets before (name, replicas, desired, max) — ms3 new —,
    //  sets after)
    let rows: [(&str, i32, Sets, Sets); 5] = [
        (
            "if scale-up, then only new machineSet should be scaled-up",
            10,
            &[
                ("ms1", 1, "7", "9"),
                ("ms2", 3, "7", "9"),
                ("ms3", 5, "7", "9"),
            ],
            &[
                ("ms1", 1, "10", "12"),
                ("ms2", 3, "10", "12"),
                ("ms3", 8, "10", "12"),
            ],
        ),
        (
            "if scale-down such that leftover replicas to add > 0, then proportional scale-down, left over to be adjusted in latest machineSet",
            3,
            &[
                ("ms1", 1, "7", "9"),
                ("ms2", 3, "7", "9"),
                ("ms3", 5, "7", "9"),
            ],
            &[
                ("ms1", 1, "3", "5"),
                ("ms2", 2, "3", "5"),
                ("ms3", 2, "3", "5"),
            ],
        ),
        (
            "if scale-down such that leftover replicas after proportional scaling =0, then proportional scale-down should be done",
            5,
            &[
                ("ms1", 1, "8", "10"),
                ("ms2", 3, "8", "10"),
                ("ms3", 6, "8", "10"),
            ],
            &[
                ("ms1", 1, "5", "7"),
                ("ms2", 2, "5", "7"),
                ("ms3", 4, "5", "7"),
            ],
        ),
        (
            "if no scaling happened, but still for edge cases, machineSet replicas shouldn't change",
            7,
            &[
                ("ms1", 1, "7", "9"),
                ("ms2", 3, "7", "9"),
                ("ms3", 5, "7", "9"),
            ],
            &[
                ("ms1", 1, "7", "9"),
                ("ms2", 3, "7", "9"),
                ("ms3", 5, "7", "9"),
            ],
        ),
        (
            // Only ms1 exists, and it is old (upstream passes newIS = nil).
            "if no scaling needed but DesiredReplicas Annotation for the only active machineSet is outdated, it should be updated with the correct value",
            1,
            &[("ms1", 1, "2", "3")],
            &[("ms1", 1, "1", "3")],
        ),
    ];
    for (entry, replicas, before, after) in rows {
        let mut md = deployment(replicas, rolling(int(2), int(0)));
        md.spec.paused = Some(true);
        let sets: Vec<MachineSet> = before
            .iter()
            .enumerate()
            .map(|(i, (name, size, desired, max))| {
                let class = if *name == "ms3" {
                    "MachineClass-test".to_owned()
                } else {
                    format!("old-class-{i}")
                };
                machine_set(
                    &md,
                    name,
                    &class,
                    *size,
                    &[
                        (annotation::DESIRED_REPLICAS, desired),
                        (annotation::MAX_REPLICAS, max),
                    ],
                    100 - i64::try_from(i).unwrap(),
                )
            })
            .collect();
        let p = run_ok(&md, &sets, &[]);
        assert!(
            created(&p.actions).is_empty(),
            "Entry {entry:?}: nothing created"
        );
        let got = sets_after(&sets, &p.actions);
        assert_eq!(got.len(), after.len(), "Entry {entry:?}");
        for (name, size, desired, max) in after {
            let ms = &got[*name];
            assert_eq!(
                (
                    ms.spec.replicas.unwrap_or(0),
                    ann_of(ms, annotation::DESIRED_REPLICAS),
                    ann_of(ms, annotation::MAX_REPLICAS)
                ),
                (*size, Some(*desired), Some(*max)),
                "Entry {entry:?}: {name}"
            );
        }
    }
}

/// deployment_sync_test.go `#getNewMachineSet`.
#[test]
fn deployment_sync_get_new_machine_set() {
    let md = deployment(1, rolling(int(1), int(1)));
    // It "when new MachineSet is not found in isList": the only set has another template (and
    // labels the deployment does not select), so a new one is created under another name.
    let mut foreign = machine_set(&md, "machineset-0", "test-machine-class", 3, &[], 10);
    let dummy = BTreeMap::from([("test-label-dummy".to_owned(), "test-label-dummy".to_owned())]);
    foreign.metadata.labels = Some(dummy.clone());
    foreign.metadata.owner_references = None;
    foreign.spec.selector = Some(LabelSelector {
        match_labels: Some(dummy.clone()),
        match_expressions: None,
    });
    foreign
        .spec
        .template
        .as_mut()
        .unwrap()
        .metadata
        .as_mut()
        .unwrap()
        .labels = Some(dummy);
    let p = run_ok(&md, std::slice::from_ref(&foreign), &[]);
    let new = created(&p.actions);
    assert_eq!(new.len(), 1, "when new MachineSet is not found in isList");
    assert_ne!(new[0].metadata.name, foreign.metadata.name);

    // Entries "when newMachineSet is found in isList and nodeTemplate is added" and "when
    // newMachineSet's nodeTemplate is modified": the found set takes the deployment's node
    // template (labels, annotations, taints), nothing is created.
    let node_template =
        |label: &str, anno: &str, taint: &str| mcm_api::v1alpha1::NodeTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(BTreeMap::from([("key1".to_owned(), label.to_owned())])),
                annotations: Some(BTreeMap::from([("anno1".to_owned(), anno.to_owned())])),
                ..ObjectMeta::default()
            }),
            spec: Some(k8s_openapi::api::core::v1::NodeSpec {
                taints: Some(vec![k8s_openapi::api::core::v1::Taint {
                    key: "taintKey".into(),
                    value: Some(taint.into()),
                    effect: "NoSchedule".into(),
                    time_added: None,
                }]),
                ..Default::default()
            }),
        };
    let mut md = deployment(1, rolling(int(1), int(1)));
    md.spec.template.spec.as_mut().unwrap().node_template =
        Some(node_template("value1", "anno1", "taintValue"));
    for (entry, existing) in [
        (
            "when newMachineSet is found in isList and nodeTemplate is added",
            None,
        ),
        (
            "when newMachineSet's nodeTemplate is modified",
            Some(node_template(
                "value1-dummy",
                "anno1-dummy",
                "taintValue-dummy",
            )),
        ),
    ] {
        let mut ms = machine_set(&md, "machineset-0", "MachineClass-test", 3, &[], 10);
        ms.spec
            .template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .node_template = existing;
        let p = run_ok(&md, std::slice::from_ref(&ms), &[]);
        assert!(created(&p.actions).is_empty(), "Entry {entry:?}");
        let after = &sets_after(std::slice::from_ref(&ms), &p.actions)["machineset-0"];
        assert!(
            crate::machine_set::semantic_equality::equal(
                &after
                    .spec
                    .template
                    .as_ref()
                    .unwrap()
                    .spec
                    .as_ref()
                    .unwrap()
                    .node_template,
                &md.spec.template.spec.as_ref().unwrap().node_template
            ),
            "Entry {entry:?}"
        );
    }
}

/// Upstream's objects of `#reconcileClusterMachineDeployment`: the deployment, its set
/// `MachineSet-test` (revision 1, 5 replicas, all available) and machine `Machine-test` on node
/// `Node1-test`.
fn reconcile_fixture() -> (MachineDeployment, MachineSet, Machine) {
    let mut md = deployment(5, rolling(int(1), int(1)));
    md.status = Some(MachineDeploymentStatus {
        available_replicas: Some(5),
        observed_generation: Some(5),
        ready_replicas: Some(5),
        replicas: Some(5),
        updated_replicas: Some(5),
        conditions: Some(vec![status::new_condition(
            CondType::Available,
            ConditionStatus::True,
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.".into(),
            now(),
        )]),
        ..MachineDeploymentStatus::default()
    });
    let ms = with_status(
        machine_set(
            &md,
            "MachineSet-test",
            "MachineClass-test",
            5,
            &[(annotation::REVISION, "1")],
            3600,
        ),
        5,
        5,
    );
    let m = machine_of(&ms, "Machine-test", Some("Node1-test"));
    (md, ms, m)
}

/// deployment_test.go `#reconcileClusterMachineDeployment / This should`.
#[test]
fn deployment_reconcile_cluster_machine_deployment() {
    let new_class = "MachineClass-test-new";

    // Entry "reconcile the machineDeployment and return nil": steady state, nothing to change.
    let (md, ms, m) = reconcile_fixture();
    let p = run_ok(&md, std::slice::from_ref(&ms), std::slice::from_ref(&m));
    assert!(created(&p.actions).is_empty());
    assert_eq!(
        sets_after(std::slice::from_ref(&ms), &p.actions)["MachineSet-test"]
            .spec
            .replicas,
        Some(5)
    );

    // Entry "create a machineSet while reconciling": no set → one created.
    let p = run_ok(&md, &[], &[]);
    assert_eq!(
        created(&p.actions).len(),
        1,
        "create a machineSet while reconciling"
    );

    // Entry "should not create new machineSet if labelSelector is empty".
    let mut all = md.clone();
    all.spec.selector = Some(LabelSelector::default());
    let p = run_ok(&all, std::slice::from_ref(&ms), &[]);
    assert!(created(&p.actions).is_empty(), "labelSelector is empty");

    // Entry "should remove the finalizer from deployment when deleted and no machineSets are
    // available.": upstream's deployment carries no finalizer, so none is added and none stays.
    let mut deleting = md.clone();
    deleting.metadata.deletion_timestamp = Some(Time(now()));
    deleting.metadata.finalizers = None;
    let p = run_ok(&deleting, std::slice::from_ref(&ms), &[]);
    assert!(
        !p.actions
            .iter()
            .any(|a| matches!(a, DeploymentAction::AddFinalizer)),
        "no finalizer added to a deleted deployment"
    );
    // With the finalizer and no set left, it is removed.
    deleting.metadata.finalizers = Some(vec![finalizer::MACHINE_CONTROLLER_MANAGER.into()]);
    assert_eq!(
        run_ok(&deleting, &[], &[]).actions,
        vec![DeploymentAction::RemoveFinalizer],
        "should remove the finalizer from deployment when deleted and no machineSets are available."
    );

    // Entry "should not create new machineSet with dummy-unknown strategy".
    let mut dummy = md.clone();
    dummy.spec.strategy = Some(strategy_of(Strategy::Other("Dummy".into())));
    assert!(
        matches!(
            run(&dummy, &[], &[], &BTreeMap::new()),
            Err(DeploymentError::InvalidStrategy { .. })
        ),
        "should not create new machineSet with dummy-unknown strategy"
    );

    // Entry "Recreate case: should create new machineSet with recreate strategy".
    let mut recreate = md.clone();
    recreate.spec.strategy = Some(strategy_of(Strategy::Recreate));
    let p = run_ok(&recreate, &[], &[]);
    assert_eq!(
        created(&p.actions).len(),
        1,
        "Recreate case: should create new machineSet"
    );

    // Entry "Recreate case: should completely scale-down the old machineSet".
    recreate.spec.template = template(new_class);
    let p = run_ok(
        &recreate,
        std::slice::from_ref(&ms),
        std::slice::from_ref(&m),
    );
    let after = sets_after(std::slice::from_ref(&ms), &p.actions);
    assert_eq!(after.len(), 1);
    assert_eq!(
        after["MachineSet-test"].spec.replicas,
        Some(0),
        "Recreate case: should completely scale-down the old machineSet"
    );

    // Entry "Recreate case: should fully scale-up the new machineSet": the old set is empty.
    let empty_old = with_status(
        machine_set(
            &md,
            "MachineSet-test",
            "MachineClass-test",
            0,
            &[(annotation::REVISION, "1")],
            3600,
        ),
        0,
        0,
    );
    let p = run_ok(&recreate, std::slice::from_ref(&empty_old), &[]);
    let new = created(&p.actions);
    assert_eq!(new.len(), 1);
    assert_eq!(
        (class_of(new[0]).as_str(), new[0].spec.replicas),
        (new_class, Some(5)),
        "Recreate case: should fully scale-up the new machineSet"
    );

    // Entries "rolling-update case: should create new machine-set with rolling-update" and
    // "rolling-update case: both new and old machineSet should have appropriate desired
    // replicas". Upstream's first pass leaves new = maxSurge + 1 = 2 and old = 5 (7 machines
    // wanted, above replicas + maxSurge = 6, as its own comment notes). Deviation (surge
    // bound): ours creates the new set with 1 and, within maxUnavailable, takes the old to 4.
    let mut rolled = md.clone();
    rolled.spec.template = template(new_class);
    let p = run_ok(&rolled, std::slice::from_ref(&ms), std::slice::from_ref(&m));
    let new = created(&p.actions);
    assert_eq!(
        new.len(),
        1,
        "rolling-update case: should create new machine-set"
    );
    let after = sets_after(std::slice::from_ref(&ms), &p.actions);
    let new_name = new[0].metadata.name.clone().unwrap();
    assert_eq!(
        (
            after[&new_name].spec.replicas,
            after["MachineSet-test"].spec.replicas
        ),
        (Some(1), Some(4)),
        "rolling-update case: both new and old machineSet should have appropriate desired replicas"
    );

    // Entry "rolling-back case: machine-deployment should point to old machine class and
    // RollbackTo should be removed".
    let mut back = rolled.clone();
    back.spec.rollback_to = Some(RollbackConfig { revision: Some(1) });
    let p = run_ok(&back, std::slice::from_ref(&ms), std::slice::from_ref(&m));
    let written = p
        .actions
        .iter()
        .find_map(|a| match a {
            DeploymentAction::UpdateDeployment(d) => Some(d),
            _ => None,
        })
        .expect("deployment written");
    assert_eq!(
        written.spec.rollback_to, None,
        "RollbackTo should be removed"
    );
    assert_eq!(
        written
            .spec
            .template
            .spec
            .as_ref()
            .unwrap()
            .class
            .as_ref()
            .unwrap()
            .name
            .as_deref(),
        Some("MachineClass-test"),
        "machine-deployment should point to old machine class"
    );

    // Entry "paused case: Replicas of the machineSet should not change after the paused field
    // is set".
    let mut paused = rolled.clone();
    paused.spec.paused = Some(true);
    let p = run_ok(&paused, std::slice::from_ref(&ms), std::slice::from_ref(&m));
    let after = sets_after(std::slice::from_ref(&ms), &p.actions);
    assert_eq!(after.len(), 1, "paused: no new machine set");
    assert_eq!(
        after["MachineSet-test"].spec.replicas,
        Some(5),
        "paused case"
    );

    // Entry "should set MachinePriority=1 for the machines named in TriggerDeletionByMCM
    // annotation in the MachineDeployment".
    let stamp = now().to_string();
    let mut trigger = md.clone();
    trigger.metadata.annotations = Some(BTreeMap::from([(
        annotation::TRIGGER_DELETION_BY_MCM.to_owned(),
        format!("Machine-test~{stamp}"),
    )]));
    let p = run_ok(
        &trigger,
        std::slice::from_ref(&ms),
        std::slice::from_ref(&m),
    );
    assert!(
        p.actions.iter().any(|a| matches!(a,
            DeploymentAction::AnnotateMachine { machine, annotations }
                if machine.name == "Machine-test"
                    && annotations.get(annotation::MACHINE_PRIORITY).map(String::as_str) == Some("1"))),
        "should set MachinePriority=1: {:?}",
        p.actions
    );

    // Entry "set LDRCBST annotation on the machineSet and TriggerDeletionByMCM annotation is not
    // set on the machineSet".
    trigger.metadata.annotations.as_mut().unwrap().insert(
        annotation::LAST_DEPLOYMENT_REPLICA_CHANGE_BY_SCALER_TIME.to_owned(),
        stamp.clone(),
    );
    let p = run_ok(
        &trigger,
        std::slice::from_ref(&ms),
        std::slice::from_ref(&m),
    );
    let after = &sets_after(std::slice::from_ref(&ms), &p.actions)["MachineSet-test"];
    assert_eq!(
        ann_of(
            after,
            annotation::LAST_DEPLOYMENT_REPLICA_CHANGE_BY_SCALER_TIME
        ),
        Some(stamp.as_str()),
        "LDRCBST annotation copied to the machineSet"
    );
    assert_eq!(
        ann_of(after, annotation::TRIGGER_DELETION_BY_MCM),
        None,
        "TriggerDeletionByMCM not copied to the machineSet"
    );
}

/// The working state of one pass, built as [`plan`] builds it, so that one upstream function
/// (`syncMachineSets`, `reconcileNewMachineSetInPlace`, …) can be run alone as upstream's tests
/// do. `new` is the index of the new set in `input.machine_sets`.
fn work<'a>(input: DeploymentInput<'a>, new: usize) -> Work<'a> {
    let md = input.deployment;
    let sets = input.machine_sets.to_vec();
    let mut machines_by_set: BTreeMap<String, Vec<&'a Machine>> = sets
        .iter()
        .filter_map(|s| s.metadata.uid.clone())
        .map(|u| (u, Vec::new()))
        .collect();
    for m in input.machines {
        if let Some(list) =
            claim::controller_ref(&m.metadata).and_then(|r| machines_by_set.get_mut(&r.uid))
        {
            list.push(&**m);
        }
    }
    Work {
        input,
        md: md.clone(),
        md_changed: false,
        original_status: md.status.clone().unwrap_or_default(),
        sets,
        created: None,
        new: Some(new),
        max_surge: fencepost::max_surge(md).unwrap(),
        max_unavailable: fencepost::max_unavailable(md).unwrap(),
        actions: Vec::new(),
        dirty: BTreeSet::new(),
        machines_by_set,
        requeue_after: crate::vocabulary::Retry::Immediate,
    }
}

/// Upstream's in-place deployment of deployment_inplace_test.go: 3 replicas, automatic
/// orchestration, maxUnavailable 1, maxSurge 0.
fn in_place_deployment() -> MachineDeployment {
    deployment(
        3,
        in_place_strategy(int(0), int(1), OrchestrationType::Auto),
    )
}

/// An old set (index 0) and the new set (index 1) with their spec and available replicas.
fn in_place_sets(md: &MachineDeployment, old: (i32, i32), new: (i32, i32)) -> Vec<MachineSet> {
    vec![
        with_status(
            machine_set(md, "machineset-0", "old-class", old.0, &[], 20),
            old.0,
            old.1,
        ),
        with_status(
            machine_set(md, "machineset-1", "MachineClass-test", new.0, &[], 10),
            new.0,
            new.1,
        ),
    ]
}

fn node(labels: &[(&str, &str)], update_successful: bool) -> NodeView {
    NodeView {
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        in_place_update_reason: update_successful.then(|| condition::UPDATE_SUCCESSFUL.to_owned()),
    }
}

fn update_successful(mut m: Machine) -> Machine {
    m.status.get_or_insert_with(Default::default).conditions =
        Some(vec![k8s_openapi::api::core::v1::NodeCondition {
            type_: condition::IN_PLACE_UPDATE.into(),
            reason: Some(condition::UPDATE_SUCCESSFUL.into()),
            status: "True".into(),
            ..Default::default()
        }]);
    m
}

fn shared(machines: &[Machine]) -> &'static [Arc<Machine>] {
    Box::leak(
        machines
            .iter()
            .cloned()
            .map(Arc::new)
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    )
}

fn leak<T>(v: T) -> &'static T {
    Box::leak(Box::new(v))
}

fn in_place_input(
    md: &'static MachineDeployment,
    sets: &'static [MachineSet],
    machines: &[Machine],
    nodes: BTreeMap<String, NodeView>,
) -> DeploymentInput<'static> {
    DeploymentInput {
        deployment: md,
        machine_sets: sets,
        machines: shared(machines),
        config: DeploymentConfig::default(),
        nodes: leak(nodes),
        now: now(),
        template_class_missing: false,
    }
}

fn selected_nodes(actions: &[DeploymentAction]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            DeploymentAction::LabelNodes {
                nodes, label: l, ..
            } if l == label::SELECTED_FOR_UPDATE => Some(nodes.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// deployment_inplace_test.go `syncMachineSets / ##table`: the new set grows by the machines
/// handed over to it (update-result label and condition), the old set shrinks to the machines it
/// still has; handed-over machines lose the label and their nodes are completed (labels removed,
/// uncordoned).
#[test]
fn deployment_inplace_sync_machine_sets() {
    // (Entry, old spec, old machines moved away, new spec, extra new machines updated,
    //  expected old spec, expected new spec)
    let rows = [
        (
            "no scaling required as there are no extra machines affiliated to new machine set with update successful label",
            2,
            0,
            3,
            0,
            2,
            3,
        ),
        (
            "scale up new machine set because there are machines with update successful condition",
            2,
            0,
            2,
            1,
            2,
            3,
        ),
        (
            "scale down old machine set because there are less machines than the replicas count",
            2,
            1,
            3,
            0,
            1,
            3,
        ),
    ];
    for (entry, old, moved, new, updated, want_old, want_new) in rows {
        let md = leak(in_place_deployment());
        let sets: &'static [MachineSet] =
            Box::leak(in_place_sets(md, (old, 1), (new, 1)).into_boxed_slice());
        let mut machines = Vec::new();
        for i in 0..old - moved {
            machines.push(machine_of(
                &sets[0],
                &format!("old-{i}"),
                Some(&format!("old-node-{i}")),
            ));
        }
        let mut nodes = BTreeMap::new();
        for i in 0..new + updated {
            let name = format!("node-{i}");
            let mut m = machine_of(&sets[1], &format!("new-{i}"), Some(&name));
            if i < updated {
                m = update_successful(m);
                m.metadata.labels.as_mut().unwrap().insert(
                    label::UPDATE_RESULT.to_owned(),
                    value::UPDATE_SUCCESSFUL.to_owned(),
                );
                nodes.insert(
                    name,
                    node(
                        &[
                            (label::CANDIDATE_FOR_UPDATE, "true"),
                            (label::SELECTED_FOR_UPDATE, "true"),
                            (label::UPDATE_RESULT, value::UPDATE_SUCCESSFUL),
                        ],
                        true,
                    ),
                );
            } else {
                nodes.insert(name, node(&[], false));
            }
            machines.push(m);
        }
        let mut w = work(in_place_input(md, sets, &machines, nodes), 1);
        w.sync_in_place_sets();
        let after = sets_after(sets, &w.actions);
        assert_eq!(
            (
                after["machineset-0"].spec.replicas,
                after["machineset-1"].spec.replicas
            ),
            (Some(want_old), Some(want_new)),
            "Entry {entry:?}"
        );
        let unlabeled: Vec<&str> = w
            .actions
            .iter()
            .filter_map(|a| match a {
                DeploymentAction::RemoveMachineLabel { machine, label: l }
                    if l == label::UPDATE_RESULT =>
                {
                    Some(machine.name.as_str())
                }
                _ => None,
            })
            .collect();
        let completed: Vec<&str> = w
            .actions
            .iter()
            .filter_map(|a| match a {
                DeploymentAction::CompleteNodeInPlaceUpdate(n) => Some(n.as_str()),
                _ => None,
            })
            .collect();
        let want: Vec<String> = (0..updated).map(|i| format!("new-{i}")).collect();
        assert_eq!(
            unlabeled, want,
            "Entry {entry:?}: update-result label removed"
        );
        let want: Vec<String> = (0..updated).map(|i| format!("node-{i}")).collect();
        assert_eq!(completed, want, "Entry {entry:?}: nodes completed");
    }
}

/// deployment_inplace_test.go `reconcileNewMachineSetInPlace / ##table`: whether the new set is
/// scaled (or receives machines), and the handed-over machines carry the update-result label.
#[test]
fn deployment_inplace_reconcile_new_machine_set_in_place() {
    // (Entry, old spec, new spec, old machines whose update succeeded, scaled, new spec after)
    let rows = [
        (
            "no scaling required as newMachineSet replicas match deployment replicas",
            2,
            3,
            0,
            false,
            3,
        ),
        (
            "scale down newMachineSet as it has more replicas than deployment",
            2,
            4,
            0,
            true,
            3,
        ),
        (
            "scale up newMachineSet by transferring machines from oldMachineSet",
            2,
            1,
            1,
            true,
            2,
        ),
        (
            "scale up newMachineSet by scaling up newMachineSet if there are zero machines in oldMachineSet",
            0,
            1,
            0,
            true,
            3,
        ),
        (
            "scale up newMachineSet to max possible replicas when oldMachinesCount+newMachineSet.Spec.Replicas < deployment.Spec.Replicas",
            1,
            1,
            0,
            true,
            2,
        ),
    ];
    for (entry, old, new, succeeded, want_scaled, want_new) in rows {
        let md = leak(in_place_deployment());
        let sets: &'static [MachineSet] =
            Box::leak(in_place_sets(md, (old, 1), (new, 1)).into_boxed_slice());
        let mut machines = Vec::new();
        let mut nodes = BTreeMap::new();
        for i in 0..old {
            let name = format!("node-{i}");
            let mut m = machine_of(&sets[0], &format!("old-{i}"), Some(&name));
            if i < succeeded {
                m = update_successful(m);
                nodes.insert(
                    name,
                    node(&[(label::UPDATE_RESULT, value::UPDATE_SUCCESSFUL)], true),
                );
            } else {
                nodes.insert(name, node(&[], false));
            }
            machines.push(m);
        }
        for i in 0..new {
            machines.push(machine_of(&sets[1], &format!("new-{i}"), None));
        }
        let mut w = work(in_place_input(md, sets, &machines, nodes), 1);
        let scaled = w.reconcile_new_in_place();
        assert_eq!(scaled, want_scaled, "Entry {entry:?}");
        let after = sets_after(sets, &w.actions);
        assert_eq!(
            after["machineset-1"].spec.replicas,
            Some(want_new),
            "Entry {entry:?}"
        );
        let transferred: Vec<&str> = w
            .actions
            .iter()
            .filter_map(|a| match a {
                DeploymentAction::TransferMachine {
                    machine,
                    owner,
                    labels,
                } => {
                    assert_eq!(owner.uid, "uid-machineset-1", "Entry {entry:?}");
                    assert_eq!(
                        labels.get(label::UPDATE_RESULT).map(String::as_str),
                        Some(value::UPDATE_SUCCESSFUL),
                        "Entry {entry:?}: transferred machines carry the update-result label"
                    );
                    Some(machine.name.as_str())
                }
                _ => None,
            })
            .collect();
        let want: Vec<String> = (0..succeeded).map(|i| format!("old-{i}")).collect();
        assert_eq!(transferred, want, "Entry {entry:?}");
    }
}

/// Machines of the old set (index 0) then of the new set, each on its own node `node-<i>`; the
/// first `candidates` nodes are candidates for update, of which the first `selected` are
/// selected already (as upstream labels them, in list order).
fn selection_fixture(
    old: (i32, i32),
    new: (i32, i32),
    candidates: usize,
    selected: usize,
) -> (
    &'static [MachineSet],
    Vec<Machine>,
    BTreeMap<String, NodeView>,
    &'static MachineDeployment,
) {
    let md = leak(in_place_deployment());
    let sets: &'static [MachineSet] = Box::leak(in_place_sets(md, old, new).into_boxed_slice());
    let mut machines = Vec::new();
    let mut nodes = BTreeMap::new();
    let owners = std::iter::repeat_n(0, usize::try_from(old.0).unwrap())
        .chain(std::iter::repeat_n(1, usize::try_from(new.0).unwrap()));
    for (i, set) in owners.enumerate() {
        let name = format!("node-{i}");
        machines.push(machine_of(&sets[set], &format!("machine-{i}"), Some(&name)));
        let mut labels = vec![];
        if i < candidates {
            labels.push((label::CANDIDATE_FOR_UPDATE, "true"));
            if i < selected {
                labels.push((label::SELECTED_FOR_UPDATE, "true"));
            }
        }
        nodes.insert(name, node(&labels, false));
    }
    (sets, machines, nodes, md)
}

/// deployment_inplace_test.go `reconcileOldMachineSetsInPlace / ##table` (whether work was done:
/// nodes selected for update or old sets scaled down) and `selectNumOfMachineForUpdate /
/// ##table` (how many nodes are selected).
#[test]
fn deployment_inplace_reconcile_old_machine_sets_in_place() {
    struct Row {
        describe: &'static str,
        entry: &'static str,
        old: (i32, i32),
        new: (i32, i32),
        candidates: usize,
        selected: usize,
        work_done: bool,
        newly_selected: usize,
        old_after: i32,
    }
    let row =
        |describe, entry, old, new, candidates, selected, work_done, newly_selected, old_after| {
            Row {
                describe,
                entry,
                old,
                new,
                candidates,
                selected,
                work_done,
                newly_selected,
                old_after,
            }
        };
    let r = "reconcileOldMachineSetsInPlace";
    let s = "selectNumOfMachineForUpdate";
    let rows = [
        row(
            r,
            "no machines selected for update because there is no machines with candidate for update label",
            (2, 2),
            (1, 1),
            0,
            0,
            false,
            0,
            2,
        ),
        row(
            r,
            "no machines selected for update because there is not enough available replicas because some of new machines are unavailable",
            (2, 2),
            (1, 0),
            1,
            0,
            false,
            0,
            2,
        ),
        row(
            r,
            "no machines selected for update because there is still old replicas undergoing update respecting min available",
            (2, 2),
            (1, 1),
            1,
            1,
            false,
            0,
            2,
        ),
        row(
            r,
            "select one machine even though mutiple machines can be updated respecting min available",
            (2, 2),
            (1, 1),
            2,
            0,
            true,
            1,
            2,
        ),
        // Upstream scales every old set to 0 at once here; ours scales them down within
        // maxUnavailable (deviation, see the doc) — with all 5 machines available that is 0 too.
        row(
            r,
            "scale down all old machine sets if new machine set already has replicas equal to deployment replicas",
            (2, 2),
            (3, 3),
            2,
            0,
            true,
            0,
            0,
        ),
        row(
            r,
            "no scale down because there is no old machine set with replicas > 0",
            (0, 0),
            (3, 3),
            0,
            0,
            false,
            0,
            0,
        ),
        row(
            s,
            "no machines selected for update because there is no machines with candidate for update label",
            (2, 2),
            (1, 1),
            0,
            0,
            false,
            0,
            2,
        ),
        row(
            s,
            "no machines selected for update because there is not enough available replicas because some of new machines are unavailable",
            (2, 2),
            (1, 0),
            1,
            0,
            false,
            0,
            2,
        ),
        // Upstream passes "1 machine undergoing update" as an argument; here the second old
        // machine's node carries the selected label (it is not a candidate any more).
        row(
            s,
            "no machines selected for update because there is still old replicas undergoing update respecting min avaialble",
            (2, 2),
            (1, 1),
            1,
            0,
            false,
            0,
            2,
        ),
        row(
            s,
            "select one machine even though multiple machines can be updated respecting min available",
            (2, 2),
            (1, 1),
            2,
            0,
            true,
            1,
            2,
        ),
    ];
    for (i, r) in rows.iter().enumerate() {
        let (sets, machines, mut nodes, md) =
            selection_fixture(r.old, r.new, r.candidates, r.selected);
        if i == 8 {
            nodes.insert(
                "node-1".into(),
                node(&[(label::SELECTED_FOR_UPDATE, "true")], false),
            );
        }
        let mut w = work(in_place_input(md, sets, &machines, nodes), 1);
        let done = w.reconcile_old_in_place();
        let selected = selected_nodes(&w.actions);
        let after = sets_after(sets, &w.actions);
        assert_eq!(
            (done, selected.len(), after["machineset-0"].spec.replicas),
            (r.work_done, r.newly_selected, Some(r.old_after)),
            "{} Entry {:?}",
            r.describe,
            r.entry
        );
        // Only candidates that are not selected yet are selected, oldest set first.
        for n in &selected {
            assert!(
                n.as_str() < "node-2",
                "{}: {n} is an old machine's node",
                r.entry
            );
        }
    }
}

/// deployment_inplace_test.go `getMachinesUndergoingUpdate / ##table`
/// ([`in_place::machines_undergoing_update`]).
#[test]
fn deployment_inplace_get_machines_undergoing_update() {
    let md = deployment(
        3,
        in_place_strategy(int(0), int(1), OrchestrationType::Auto),
    );
    let ms = machine_set(&md, "machineset-0", "test-machine-class", 3, &[], 10);
    // (Entry, selected label on each machine's node)
    let rows: [(&str, &[bool], i32); 5] = [
        ("no machines undergoing update", &[false], 0),
        ("one machine undergoing update", &[true], 1),
        ("multiple machines undergoing update", &[true, true], 2),
        ("only one machines is undergoing update", &[true, false], 1),
        ("there are no machines", &[], 0),
    ];
    // Not an upstream row: upstream counts a node as undergoing update when it carries the
    // selected-for-update label whatever its value (`_, ok := node.Labels[...]`).
    let mut nodes = BTreeMap::new();
    nodes.insert(
        "node-0".to_owned(),
        node(&[(label::SELECTED_FOR_UPDATE, "")], false),
    );
    let machines = [machine_of(&ms, "machine-0", Some("node-0"))];
    assert_eq!(
        in_place::machines_undergoing_update(machines.iter(), &nodes),
        1,
        "label presence counts, not its value"
    );
    for (entry, selected, want) in rows {
        let mut machines = Vec::new();
        let mut nodes = BTreeMap::new();
        for (i, sel) in selected.iter().enumerate() {
            let name = format!("node-{i}");
            machines.push(machine_of(&ms, &format!("machine-{i}"), Some(&name)));
            let labels: &[(&str, &str)] = if *sel {
                &[(label::SELECTED_FOR_UPDATE, "true")]
            } else {
                &[]
            };
            nodes.insert(name, node(labels, false));
        }
        assert_eq!(
            in_place::machines_undergoing_update(machines.iter(), &nodes),
            want,
            "Entry {entry:?}"
        );
    }
}

/// deployment_inplace_test.go `getMachinesForDrain / ##table` ([`in_place::machines_for_drain`]).
#[test]
fn deployment_inplace_get_machines_for_drain() {
    let md = deployment(
        3,
        in_place_strategy(int(0), int(1), OrchestrationType::Auto),
    );
    let ms = machine_set(&md, "machineset-0", "test-machine-class", 3, &[], 10);
    // (Entry, (candidate, selected) per machine's node — None: machine without a node —,
    //  count asked, machines expected)
    type Nodes<'a> = &'a [Option<(bool, bool)>];
    let rows: [(&str, Nodes, usize, &[&str]); 6] = [
        (
            "select machines for drain",
            &[Some((true, false)), Some((true, true))],
            1,
            &["machine-0"],
        ),
        (
            "select all machines for drain",
            &[Some((true, false)), Some((true, false))],
            2,
            &["machine-0", "machine-1"],
        ),
        (
            "select only required count of machines even though more machines can be selected",
            &[Some((true, false)), Some((true, false))],
            1,
            &["machine-0"],
        ),
        (
            "select only machines which has label candidate for update",
            &[Some((true, false)), None],
            2,
            &["machine-0"],
        ),
        (
            "no machines available for drain all are already selected",
            &[Some((true, true)), Some((true, true))],
            1,
            &[],
        ),
        ("no machines available for drain", &[None], 1, &[]),
    ];
    for (entry, layout, count, want) in rows {
        let mut machines = Vec::new();
        let mut nodes = BTreeMap::new();
        for (i, n) in layout.iter().enumerate() {
            let name = format!("node-{i}");
            machines.push(machine_of(
                &ms,
                &format!("machine-{i}"),
                n.map(|_| name.as_str()),
            ));
            if let Some((candidate, selected)) = n {
                let mut labels = vec![];
                if *candidate {
                    labels.push((label::CANDIDATE_FOR_UPDATE, "true"));
                }
                if *selected {
                    labels.push((label::SELECTED_FOR_UPDATE, "true"));
                }
                nodes.insert(name, node(&labels, false));
            }
        }
        let refs: Vec<&Machine> = machines.iter().collect();
        let got: Vec<&str> = in_place::machines_for_drain(&refs, &nodes, count)
            .into_iter()
            .map(|m| m.metadata.name.as_deref().unwrap())
            .collect();
        assert_eq!(got, want, "Entry {entry:?}");
    }
}

/// Upstream's objects of the trigger-deletion Describes: deployment of 2 replicas, its set and
/// machines `Machine-test1` and `Machine-test2`; `ts` is upstream's `time.Now()`.
fn trigger_fixture() -> (MachineDeployment, Vec<Machine>, String) {
    let md = deployment(2, rolling(int(1), int(1)));
    let ms = machine_set(
        &md,
        "MachineSet-test",
        "MachineClass-test",
        2,
        &[(annotation::REVISION, "1")],
        60,
    );
    let machines = vec![
        machine_of(&ms, "Machine-test1", Some("Node1-test")),
        machine_of(&ms, "Machine-test2", Some("Node1-test")),
    ];
    (md, machines, now().to_string())
}

fn with_trigger(
    md: &MachineDeployment,
    trigger: &str,
    scaler_time: Option<String>,
) -> MachineDeployment {
    let mut md = md.clone();
    let mut a = BTreeMap::from([(
        annotation::TRIGGER_DELETION_BY_MCM.to_owned(),
        trigger.to_owned(),
    )]);
    if let Some(t) = scaler_time {
        a.insert(
            annotation::LAST_DEPLOYMENT_REPLICA_CHANGE_BY_SCALER_TIME.to_owned(),
            t,
        );
    }
    md.metadata.annotations = Some(a);
    md
}

/// deployment_test.go `#updateMachineAndMachineDeploymentDeletionAnnotations`,
/// `#computeMachineTriggerDeletionData` and `#adjustingMachineDeploymentDeletionAnnotations`
/// ([`autoscaler::apply_trigger_entries`], [`autoscaler::stamp_trigger_entries`]).
#[test]
fn deployment_trigger_deletion_by_mcm() {
    let (md, machines, ts) = trigger_fixture();
    let in_an_hour = Some((now() + SignedDuration::from_hours(1)).to_string());
    let both = format!("Machine-test1~{ts},Machine-test2~{ts}");
    let md_both = with_trigger(&md, &both, in_an_hour.clone());

    // Entry "marks the machines named in TriggerDeletionByMCM annotation for deletion by setting
    // their MachinePriority annotation to 1 and also set their MarkedForDeletionTime to the same
    // value passed with the annotation".
    let out = autoscaler::apply_trigger_entries(&md_both, &machines);
    let want: Vec<(String, BTreeMap<String, String>)> = ["Machine-test1", "Machine-test2"]
        .iter()
        .map(|n| {
            (
                (*n).to_owned(),
                BTreeMap::from([
                    (annotation::MACHINE_PRIORITY.to_owned(), "1".to_owned()),
                    (annotation::MARKED_FOR_DELETION_TIME.to_owned(), ts.clone()),
                ]),
            )
        })
        .collect();
    assert_eq!(
        out.machine_annotations, want,
        "updateMachineAndMachineDeploymentDeletionAnnotations"
    );

    // Entry "should return tgd.triggerDeletionAnnotationValueChanged = false for no change in
    // triggerDeletionData".
    assert_eq!(
        out.deployment_annotations, None,
        "no change in triggerDeletionData"
    );

    // Entry "should remove Machine-test2 from annotation": Machine-test2 is being deleted.
    let mut terminating = machines.clone();
    terminating[1].metadata.deletion_timestamp = Some(Time(now()));
    terminating[1].status.as_mut().unwrap().current_status = Some(CurrentStatus {
        phase: Some(MachinePhase::Terminating),
        ..CurrentStatus::default()
    });
    let out = autoscaler::apply_trigger_entries(&md_both, &terminating);
    assert_eq!(
        out.machine_annotations.len(),
        1,
        "should remove Machine-test2 from annotation"
    );
    assert_eq!(
        out.deployment_annotations
            .as_ref()
            .and_then(|a| a.get(annotation::TRIGGER_DELETION_BY_MCM))
            .map(String::as_str),
        Some(format!("Machine-test1~{ts}").as_str()),
        "should remove Machine-test2 from annotation"
    );

    // Entry "do nothing when TriggerDeletionByMCM annotation does not exist on the
    // MachineDeployment".
    assert_eq!(autoscaler::stamp_trigger_entries(&md, now()), None);

    // Entry "modify TriggerDeletionByMCM annotation of MachineDeployment from old format
    // [M1,M2,...] to [M1~T1,M2~T2,...]".
    let old_format = with_trigger(&md, "Machine-test", None);
    let stamped = autoscaler::stamp_trigger_entries(&old_format, now()).expect("rewritten");
    let value = &stamped[annotation::TRIGGER_DELETION_BY_MCM];
    assert_ne!(value, "Machine-test");
    let (name, time) = value.split_once('~').unwrap();
    assert_eq!(name, "Machine-test");
    assert!(
        time.parse::<Timestamp>().is_ok(),
        "entry carries a time: {value}"
    );
}

/// deployment_util_test.go `#SetNewMachineSetNodeTemplate` and
/// `#copyMachineDeploymentNodeTemplatesToMachineSet` ([`revision::sync_new_machine_set`], which
/// does both: node template propagation and the revision annotation).
#[test]
fn deployment_util_set_new_machine_set_node_template() {
    let node_template = |suffix: &str| mcm_api::v1alpha1::NodeTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(BTreeMap::from([(
                "key1".to_owned(),
                format!("value1{suffix}"),
            )])),
            annotations: Some(BTreeMap::from([(
                "anno1".to_owned(),
                format!("anno1{suffix}"),
            )])),
            ..ObjectMeta::default()
        }),
        spec: Some(k8s_openapi::api::core::v1::NodeSpec {
            taints: Some(vec![k8s_openapi::api::core::v1::Taint {
                key: "taintKey".into(),
                value: Some(format!("taintValue{suffix}")),
                effect: "NoSchedule".into(),
                time_added: None,
            }]),
            ..Default::default()
        }),
    };
    let mut md = deployment(1, rolling(int(1), int(1)));
    md.spec.template.spec.as_mut().unwrap().node_template = Some(node_template(""));
    // (Describe / It, the set's node template, revision passed, changed)
    let rows = [
        (
            "#SetNewMachineSetNodeTemplate / when nodeTemplate is updated in MachineSet",
            "-dummy",
            2,
            true,
        ),
        (
            "#SetNewMachineSetNodeTemplate / when nodeTemplate is not updated in MachineSet",
            "",
            0,
            false,
        ),
        (
            "#copyMachineDeploymentNodeTemplatesToMachineSet / when nodeTemplate is updated in MachineSet",
            "-dummy",
            0,
            true,
        ),
        (
            "#copyMachineDeploymentNodeTemplatesToMachineSet / when nodeTemplate is not updated in MachineSet",
            "",
            0,
            false,
        ),
    ];
    for (it, suffix, rev, changed) in rows {
        let mut ms = machine_set(&md, "machineset-0", "MachineClass-test", 3, &[], 10);
        ms.spec
            .template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .node_template = Some(node_template(suffix));
        let out = revision::sync_new_machine_set(&md, &ms, rev);
        assert_eq!(out.is_some(), changed, "It {it:?}");
        let after = out.unwrap_or(ms);
        assert!(
            crate::machine_set::semantic_equality::equal(
                &after
                    .spec
                    .template
                    .as_ref()
                    .unwrap()
                    .spec
                    .as_ref()
                    .unwrap()
                    .node_template,
                &md.spec.template.spec.as_ref().unwrap().node_template
            ),
            "It {it:?}: node template is the deployment's"
        );
        if rev > 0 {
            assert_eq!(
                ann_of(&after, annotation::REVISION),
                Some("2"),
                "It {it:?}: revision"
            );
        }
    }
}

/// deployment_test.go `#terminateMachineSets` and `#deleteMachineDeploymentFinalizers`: a
/// deleted deployment deletes its sets, then drops its finalizer once none is left.
#[test]
fn deployment_terminate_machine_sets_and_finalizers() {
    let mut md = deployment(2, rolling(int(1), int(1)));
    md.metadata.deletion_timestamp = Some(Time(now()));
    let sets = [
        machine_set(&md, "MachineSet-test-1", "MachineClass-test", 1, &[], 20),
        machine_set(&md, "MachineSet-test-2", "old-class", 1, &[], 30),
    ];
    let p = run_ok(&md, &sets, &[]);
    let mut deleted: Vec<&str> = p
        .actions
        .iter()
        .filter_map(|a| match a {
            DeploymentAction::DeleteMachineSet(r) => Some(r.name.as_str()),
            _ => None,
        })
        .collect();
    deleted.sort_unstable();
    assert_eq!(
        deleted,
        vec!["MachineSet-test-1", "MachineSet-test-2"],
        "#terminateMachineSets / delete all the machineSets"
    );
    assert!(
        !p.actions.contains(&DeploymentAction::RemoveFinalizer),
        "the finalizer stays while sets exist"
    );
    assert_eq!(
        run_ok(&md, &[], &[]).actions,
        vec![DeploymentAction::RemoveFinalizer],
        "#deleteMachineDeploymentFinalizers / remove the finalizer from the machine-deployment"
    );
}

/// Not an upstream row: upstream's `selectNumOfMachineForUpdate` takes from each old set (oldest
/// first) at most its `spec.replicas`. Old set A (spec 1) still holds 2 machines on candidate
/// nodes, B (spec 2) holds 2; 2 may be selected: one from each, not both of A's.
#[test]
fn deployment_inplace_selection_takes_at_most_spec_replicas_per_old_set() {
    let md = leak(deployment(
        3,
        in_place_strategy(int(0), int(2), OrchestrationType::Auto),
    ));
    let sets: &'static [MachineSet] = Box::leak(
        vec![
            with_status(machine_set(md, "set-a", "class-a", 1, &[], 30), 2, 1),
            with_status(machine_set(md, "set-b", "class-b", 2, &[], 20), 2, 2),
            with_status(
                machine_set(md, "set-new", "MachineClass-test", 0, &[], 10),
                0,
                0,
            ),
        ]
        .into_boxed_slice(),
    );
    let mut machines = Vec::new();
    let mut nodes = BTreeMap::new();
    for (set, prefix) in [(0, "a"), (1, "b")] {
        for i in 0..2 {
            let node_name = format!("node-{prefix}{i}");
            machines.push(machine_of(
                &sets[set],
                &format!("{prefix}-{i}"),
                Some(&node_name),
            ));
            nodes.insert(
                node_name,
                node(&[(label::CANDIDATE_FOR_UPDATE, "true")], false),
            );
        }
    }
    let mut w = work(in_place_input(md, sets, &machines, nodes), 2);
    assert!(w.reconcile_old_in_place());
    assert_eq!(selected_nodes(&w.actions), vec!["node-a0", "node-b0"]);
}

/// deployment_test.go `#getMachineSetsForMachineDeployment / this should`: the sets a deployment
/// claims ([`claim::claim`] as [`plan`] calls it: owned or adopted).
#[test]
fn deployment_get_machine_sets_for_machine_deployment() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    let label1 = BTreeMap::from([("test-label-1".to_owned(), "test-label-1".to_owned())]);
    let selector = LabelSelector {
        match_labels: Some(label1.clone()),
        match_expressions: None,
    };
    let invalid = LabelSelector {
        match_labels: Some(BTreeMap::from([(
            "test-label-1".to_owned(),
            "dummy".to_owned(),
        )])),
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "dummy-key".into(),
            operator: "dummy".into(),
            values: Some(vec!["dummy-value".into()]),
        }]),
    };
    let set = |name: &str, labels: Option<BTreeMap<String, String>>, owned: bool| ObjectMeta {
        name: Some(name.into()),
        namespace: Some("test".into()),
        labels,
        owner_references: owned.then(|| {
            vec![claim::owner_reference(
                KIND,
                "MachineDeployment-test",
                "1234567",
            )]
        }),
        ..ObjectMeta::default()
    };
    let mut label12 = label1.clone();
    label12.insert("test-label-2".into(), "test-label-2".into());
    // (Entry, selector, sets, claimed names — None: error)
    type Row<'a> = (
        &'a str,
        &'a LabelSelector,
        Vec<ObjectMeta>,
        Option<Vec<&'a str>>,
    );
    let rows: Vec<Row> = vec![
        (
            "return both machineSets as selector matches.",
            &selector,
            vec![
                set("MachineSet-test-1", Some(label1.clone()), true),
                set("MachineSet-test-2", Some(label12.clone()), true),
            ],
            Some(vec!["MachineSet-test-1", "MachineSet-test-2"]),
        ),
        (
            "return no machineSets as selector matches none.",
            &selector,
            vec![
                set("MachineSet-test-1", None, false),
                set("MachineSet-test-2", None, false),
            ],
            Some(vec![]),
        ),
        (
            "return no machineSets as selector is invalid.",
            &invalid,
            vec![
                set("MachineSet-test-1", Some(label1.clone()), true),
                set("MachineSet-test-2", Some(label12.clone()), true),
            ],
            None,
        ),
        (
            "return only one machineSet as other one doesnt match the selector",
            &selector,
            vec![
                set("MachineSet-test-1", None, false),
                set("MachineSet-test-2", Some(label12.clone()), true),
            ],
            Some(vec!["MachineSet-test-2"]),
        ),
    ];
    for (entry, selector, sets, want) in rows {
        let owner = claim::Owner {
            uid: "1234567",
            deleting: false,
            selector: Some(selector),
        };
        let got: Result<Vec<&str>, _> = sets
            .iter()
            .filter_map(|meta| match claim::claim(owner, meta) {
                Ok(d) if d.is_claimed() => Some(Ok(meta.name.as_deref().unwrap())),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            })
            .collect();
        assert_eq!(got.ok(), want, "Entry {entry:?}");
    }
}

/// deployment_rolling_test.go `#taintNodesBackingMachineSets` and deployment_util_test.go
/// `#removeTaintNodesBackingMachineSet`: which nodes get the PreferNoSchedule taint (those of old
/// sets, during a rollout) and which lose it (those of the new set, once complete); the shell
/// applies the taint to each named node.
#[test]
fn deployment_rolling_taint_and_untaint_nodes() {
    let (md, ms, m) = reconcile_fixture();
    // Entry "taints on nodes backing machineSet": a rollout taints the old set's nodes once.
    let mut rolled = md.clone();
    rolled.spec.template = template("MachineClass-test-new");
    let p = run_ok(&rolled, std::slice::from_ref(&ms), std::slice::from_ref(&m));
    assert!(
        p.actions
            .contains(&DeploymentAction::TaintNodesPreferNoSchedule(vec![
                "Node1-test".into()
            ])),
        "taints on nodes backing machineSet: {:?}",
        p.actions
    );
    let old = &sets_after(std::slice::from_ref(&ms), &p.actions)["MachineSet-test"];
    assert_eq!(
        ann_of(old, annotation::PREFER_NO_SCHEDULE),
        Some(value::TRUE_CAPITALISED),
        "the old set is marked as tainted"
    );

    // Entry "removed taints on nodes backing machineSet": the rollout is complete and the
    // (new) set still carries the mark: its nodes are untainted and the mark goes.
    let mut marked = ms.clone();
    marked
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(
            annotation::PREFER_NO_SCHEDULE.to_owned(),
            value::TRUE_CAPITALISED.to_owned(),
        );
    let p = run_ok(&md, std::slice::from_ref(&marked), std::slice::from_ref(&m));
    assert!(
        p.actions
            .contains(&DeploymentAction::UntaintNodesPreferNoSchedule(vec![
                "Node1-test".into()
            ])),
        "removed taints on nodes backing machineSet: {:?}",
        p.actions
    );
    let after = &sets_after(std::slice::from_ref(&marked), &p.actions)["MachineSet-test"];
    assert_eq!(ann_of(after, annotation::PREFER_NO_SCHEDULE), None);
}
