//! Unit, table and simulation tests of the MachineDeployment plan.
#![allow(clippy::unwrap_used)]

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use mcm_api::keys::condition;
use mcm_api::v1alpha1::{
    ClassSpec, CurrentStatus, MachineDeploymentSpec, MachineDeploymentStrategy, MachinePhase,
    MachineSetSpec, MachineSetStatus, MachineSpec, MachineStatus, MachineTemplateSpec,
    RollbackConfig, RollingUpdateMachineDeployment, UpdateConfiguration,
};

#[path = "plan_sim_tests.rs"]
mod sim;

static NO_NODES: BTreeMap<String, NodeView> = BTreeMap::new();

pub(super) fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).unwrap()
}

fn pool_labels() -> BTreeMap<String, String> {
    BTreeMap::from([("name".to_owned(), "pool".to_owned())])
}

pub(super) fn template(class: &str) -> MachineTemplateSpec {
    MachineTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(pool_labels()),
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

pub(super) fn deployment(
    strategy: Strategy,
    replicas: i32,
    surge: i32,
    unavailable: i32,
) -> MachineDeployment {
    let mut md = MachineDeployment::new(
        "pool",
        MachineDeploymentSpec {
            replicas: Some(replicas),
            selector: Some(LabelSelector {
                match_labels: Some(pool_labels()),
                match_expressions: None,
            }),
            template: template("small"),
            strategy: Some(MachineDeploymentStrategy {
                type_: Some(strategy),
                rolling_update: Some(RollingUpdateMachineDeployment {
                    update_configuration: UpdateConfiguration {
                        max_surge: Some(IntOrString::Int(surge)),
                        max_unavailable: Some(IntOrString::Int(unavailable)),
                    },
                }),
                in_place_update: None,
            }),
            ..MachineDeploymentSpec::default()
        },
    );
    md.metadata.namespace = Some("ns".into());
    md.metadata.uid = Some("md-uid".into());
    md.metadata.generation = Some(1);
    md.metadata.finalizers = Some(vec![finalizer::MACHINE_CONTROLLER_MANAGER.into()]);
    md
}

/// A MachineSet owned by the deployment for `class`, with `spec` replicas and `available`
/// available (and existing) replicas.
fn set(
    md: &MachineDeployment,
    class: &str,
    rev: i64,
    spec: i32,
    available: i32,
    age: i64,
) -> MachineSet {
    let mut tmpl_md = md.clone();
    tmpl_md.spec.template = template(class);
    let hash = revision::template_hash(&tmpl_md.spec.template, None);
    let mut ms = revision::new_machine_set(&tmpl_md, &hash, rev, spec, 1);
    ms.metadata.uid = Some(format!("uid-{class}"));
    ms.metadata.creation_timestamp = Some(Time(t(-age)));
    ms.metadata.generation = Some(1);
    ms.status = Some(MachineSetStatus {
        replicas: Some(available),
        available_replicas: Some(available),
        ready_replicas: Some(available),
        fully_labeled_replicas: Some(available),
        observed_generation: Some(1),
        ..MachineSetStatus::default()
    });
    ms
}

/// The plan's input; the machines are shared as the cache shares them (leaked: tests only).
fn input<'a>(
    md: &'a MachineDeployment,
    sets: &'a [MachineSet],
    machines: &[Machine],
) -> DeploymentInput<'a> {
    let shared: Vec<std::sync::Arc<Machine>> =
        machines.iter().cloned().map(std::sync::Arc::new).collect();
    DeploymentInput {
        deployment: md,
        machine_sets: sets,
        machines: Box::leak(shared.into_boxed_slice()),
        config: DeploymentConfig::default(),
        nodes: &NO_NODES,
        now: t(0),
    }
}

fn scaled(actions: &[DeploymentAction]) -> BTreeMap<String, i32> {
    actions
        .iter()
        .filter_map(|a| match a {
            DeploymentAction::UpdateMachineSet(ms) | DeploymentAction::CreateMachineSet(ms) => {
                Some((
                    ms.metadata.name.clone().unwrap(),
                    ms.spec.replicas.unwrap_or(0),
                ))
            }
            _ => None,
        })
        .collect()
}

fn events(actions: &[DeploymentAction]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            DeploymentAction::Event(e) => Some(e.reason.clone()),
            _ => None,
        })
        .collect()
}

fn status_written(actions: &[DeploymentAction]) -> Option<&MachineDeploymentStatus> {
    actions.iter().find_map(|a| match a {
        DeploymentAction::UpdateDeploymentStatus(s) => Some(&**s),
        _ => None,
    })
}

#[test]
fn new_replicas_table() {
    // (strategy, md replicas, surge, Σ spec of all sets, new spec) → new size
    let cases = [
        (Strategy::RollingUpdate, 3, 1, 3, 0, 1),
        (Strategy::RollingUpdate, 3, 1, 4, 1, 1),
        (Strategy::RollingUpdate, 3, 2, 3, 0, 2),
        (Strategy::RollingUpdate, 3, 5, 3, 0, 3),
        (Strategy::RollingUpdate, 3, 1, 2, 2, 3),
        (Strategy::RollingUpdate, 10, 3, 12, 4, 5),
        (Strategy::RollingUpdate, 0, 1, 0, 0, 0),
        (Strategy::Recreate, 7, 0, 3, 0, 7),
    ];
    for (strategy, r, surge, total, new, want) in cases {
        let md = deployment(strategy.clone(), r, surge, 0);
        assert_eq!(
            new_machine_set_replicas(&md, total, new, surge),
            want,
            "{strategy} replicas {r} surge {surge} total {total} new {new}"
        );
    }
}

#[test]
fn proportional_table() {
    // Scale 10 → 5 (surge 1) of sets 6 and 5 annotated max 11: sizes follow 6/11 and 5/11.
    assert_eq!(
        proportional_scale_in(&[(6, Some(11)), (5, Some(11))], 5, 1, 11),
        vec![3, 3]
    );
    // Scale to zero empties everything.
    assert_eq!(
        proportional_scale_in(&[(4, Some(5)), (1, Some(5))], 0, 1, 5),
        vec![0, 0]
    );
    // Missing annotation falls back to status.replicas; zero fallback leaves all to the leftover.
    assert_eq!(
        proportional_scale_in(&[(4, None), (4, None)], 3, 1, 0),
        vec![0, 4]
    );
    // Not a scale-in: unchanged.
    assert_eq!(proportional_scale_in(&[(2, Some(3))], 5, 1, 3), vec![2]);
}

proptest::proptest! {
    /// Proportional scaling conserves the total: the sizes always sum to `replicas + maxSurge`
    /// (0 when scaling to 0) and never go negative nor grow.
    #[test]
    fn prop_proportional_conserves_total(
        sizes in proptest::collection::vec(0i32..50, 1..6),
        old_replicas in 1i32..100,
        replicas in 0i32..60,
        surge in 0i32..5,
        stale in proptest::bool::ANY,
    ) {
        let old_max = old_replicas + surge;
        let sets: Vec<(i32, Option<i32>)> = sizes.iter().map(|s| (*s, (!stale).then_some(old_max))).collect();
        let total: i32 = sizes.iter().sum();
        let allowed = if replicas == 0 { 0 } else { replicas + surge };
        let out = proportional_scale_in(&sets, replicas, surge, total);
        if total > allowed {
            proptest::prop_assert_eq!(out.iter().sum::<i32>(), allowed);
        } else {
            proptest::prop_assert_eq!(&out, &sizes);
        }
        for (o, s) in out.iter().zip(&sizes) {
            proptest::prop_assert!(*o >= 0 && o <= s);
        }
    }
}

#[test]
fn rolling_creates_named_new_set_with_surge_and_taints_old_nodes() {
    let mut md = deployment(Strategy::RollingUpdate, 3, 1, 0);
    let old = set(&md, "small", 1, 3, 3, 100);
    md.status = Some(status::calculate_status(
        &md,
        &[&old],
        Some(&old),
        0,
        t(-50),
    ));
    md.spec.template = template("large");
    let mut machine = Machine::new("m1", MachineSpec::default());
    machine.metadata.namespace = Some("ns".into());
    machine.metadata.labels = Some(BTreeMap::from([
        ("name".to_owned(), "pool".to_owned()),
        (label::NODE.to_owned(), "node-1".to_owned()),
    ]));
    machine.metadata.owner_references =
        Some(vec![claim::owner_reference("MachineSet", "x", "uid-small")]);
    let sets = vec![old];
    let machines = vec![machine];
    let p = plan(input(&md, &sets, &machines)).unwrap();
    let created: Vec<&MachineSet> = p
        .actions
        .iter()
        .filter_map(|a| match a {
            DeploymentAction::CreateMachineSet(ms) => Some(&**ms),
            _ => None,
        })
        .collect();
    assert_eq!(created.len(), 1);
    let hash = revision::template_hash(&template("large"), None);
    assert_eq!(
        created[0].metadata.name.as_deref(),
        Some(format!("pool-{}", hash.suffix).as_str())
    );
    assert_eq!(created[0].spec.replicas, Some(1));
    assert_eq!(
        created[0].metadata.annotations.as_ref().unwrap()[annotation::REVISION],
        "2"
    );
    assert!(
        p.actions
            .contains(&DeploymentAction::TaintNodesPreferNoSchedule(vec![
                "node-1".into()
            ]))
    );
    assert!(
        p.actions
            .contains(&DeploymentAction::DisableAutoscalerScaleDown(vec![
                "node-1".into()
            ]))
    );
    // Old set marked as tainted, not scaled (maxUnavailable 0 and the new one is not available).
    let old_update = p
        .actions
        .iter()
        .find_map(|a| match a {
            DeploymentAction::UpdateMachineSet(ms) => Some(ms),
            _ => None,
        })
        .unwrap();
    assert_eq!(old_update.spec.replicas, Some(3));
    assert_eq!(
        old_update.metadata.annotations.as_ref().unwrap()[annotation::PREFER_NO_SCHEDULE],
        "True"
    );
    let st = status_written(&p.actions).unwrap();
    let progressing = status::condition(st.conditions.as_ref(), &CondType::Progressing).unwrap();
    assert_eq!(
        progressing.reason.as_deref(),
        Some(REASON_NEW_MACHINE_SET_CREATED)
    );
    // The deployment records the new revision.
    assert!(
        p.actions
            .iter()
            .any(|a| matches!(a, DeploymentAction::UpdateDeployment(d)
        if d.metadata.annotations.as_ref().unwrap()[annotation::REVISION] == "2"))
    );
}

#[test]
fn rolling_scales_old_down_within_max_unavailable() {
    let mut md = deployment(Strategy::RollingUpdate, 4, 1, 1);
    let old = set(&md, "small", 1, 4, 4, 100);
    md.spec.template = template("large");
    let mut new = set(&md, "large", 2, 1, 1, 10);
    new.spec.template = Some(md.spec.template.clone());
    let sets = vec![old.clone(), new];
    let p = plan(input(&md, &sets, &[])).unwrap();
    // Σspec 5, min available 3, new fully available: scale old down by 5-3-0 = 2 capped by
    // available budget 5-3 = 2.
    assert_eq!(scaled(&p.actions)[old.metadata.name.as_deref().unwrap()], 2);
}

#[test]
fn stale_availability_of_a_scaled_down_old_set_is_not_counted_twice() {
    // The old set was just scaled 4 → 3 but its status still reports 4 available (the machine
    // set controller has not caught up). New set: 1 of 2 available; Σspec 5 = replicas + surge,
    // so the new set cannot grow. Minimum available = 4 - 1 = 3.
    let mut md = deployment(Strategy::RollingUpdate, 4, 1, 1);
    let old = set(&md, "small", 1, 3, 4, 100);
    md.spec.template = template("large");
    let mut new = set(&md, "large", 2, 2, 1, 10);
    new.spec.template = Some(md.spec.template.clone());
    let sets = vec![old.clone(), new];
    let p = plan(input(&md, &sets, &[])).unwrap();
    // Counting the stale 4 gives a budget of 4 + 1 - 3 = 2 and old → 1 (really 1 + 1 available);
    // capped at spec, 3 + 1 - 3 = 1 and old → 2 (really 2 + 1 = the minimum).
    assert_eq!(scaled(&p.actions)[old.metadata.name.as_deref().unwrap()], 2);
}

/// Deployment of 5, maxSurge 2, maxUnavailable 0, rolled from `small` to `large`: the new set
/// has 2 machines (booting), the old set has just been scaled 5 → 4 but its fifth machine still
/// exists. Σ spec is 6 < 7, yet 7 machines exist: the new set must not grow.
fn mid_rollout_with_a_terminating_old_machine() -> (MachineDeployment, MachineSet, MachineSet) {
    let mut md = deployment(Strategy::RollingUpdate, 5, 2, 0);
    let mut old = set(&md, "small", 1, 4, 4, 100);
    md.spec.template = template("large");
    let mut new = set(&md, "large", 2, 2, 0, 10);
    new.spec.template = Some(md.spec.template.clone());
    new.status.as_mut().unwrap().replicas = Some(2);
    old.status.as_mut().unwrap().replicas = Some(5);
    (md, old, new)
}

#[test]
fn new_set_does_not_grow_while_old_machines_still_exist() {
    let (md, old, new) = mid_rollout_with_a_terminating_old_machine();
    let new_name = new.metadata.name.clone().unwrap();
    let sets = vec![old, new];
    let p = plan(input(&md, &sets, &[])).unwrap();
    assert_eq!(
        scaled(&p.actions).get(&new_name).copied().unwrap_or(2),
        2,
        "7 machines exist (old status 5 + new 2) = replicas + maxSurge"
    );
}

#[test]
fn new_set_does_not_grow_when_the_cache_sees_more_machines_than_the_status_says() {
    // The old set's status was already rewritten to 4, but the fifth (terminating) machine is
    // still in the cache: it exists, so it counts.
    let (md, mut old, new) = mid_rollout_with_a_terminating_old_machine();
    old.status.as_mut().unwrap().replicas = Some(4);
    let mut machines = machines_of(&old, 5);
    machines[4].metadata.deletion_timestamp = Some(Time(t(-1)));
    let new_name = new.metadata.name.clone().unwrap();
    let sets = vec![old, new];
    let p = plan(input(&md, &sets, &machines)).unwrap();
    assert_eq!(scaled(&p.actions).get(&new_name).copied().unwrap_or(2), 2);
    // Once that machine is gone, the new set takes the freed slot.
    let p = plan(input(&md, &sets, &machines[..4])).unwrap();
    assert_eq!(scaled(&p.actions).get(&new_name).copied(), Some(3));
}

#[test]
fn new_set_counts_issued_creations_before_its_status_catches_up() {
    // The new set was grown to 3 a moment ago; its status still says 0 machines. Σ status is
    // 4 + 0, but 3 creations are on their way: 4 + 3 = 7 is the ceiling already.
    let (md, mut old, mut new) = mid_rollout_with_a_terminating_old_machine();
    old.status.as_mut().unwrap().replicas = Some(4);
    new.spec.replicas = Some(3);
    new.status.as_mut().unwrap().replicas = Some(0);
    let new_name = new.metadata.name.clone().unwrap();
    let sets = vec![old, new];
    let p = plan(input(&md, &sets, &[])).unwrap();
    assert_eq!(scaled(&p.actions).get(&new_name).copied().unwrap_or(3), 3);
}

#[test]
fn in_place_fields_are_pushed_to_the_new_set_without_rollout() {
    let mut md = deployment(Strategy::RollingUpdate, 2, 1, 0);
    let current = set(&md, "small", 1, 2, 2, 100);
    md.spec
        .template
        .spec
        .as_mut()
        .unwrap()
        .configuration
        .drain_timeout = Some("3m".parse().unwrap());
    let sets = vec![current.clone()];
    let p = plan(input(&md, &sets, &[])).unwrap();
    assert!(
        !p.actions
            .iter()
            .any(|a| matches!(a, DeploymentAction::CreateMachineSet(_)))
    );
    let updated = p
        .actions
        .iter()
        .find_map(|a| match a {
            DeploymentAction::UpdateMachineSet(ms) => Some(ms),
            _ => None,
        })
        .unwrap();
    assert_eq!(updated.metadata.name, current.metadata.name);
    assert_eq!(
        updated
            .spec
            .template
            .as_ref()
            .unwrap()
            .spec
            .as_ref()
            .unwrap()
            .configuration
            .drain_timeout,
        Some("3m".parse().unwrap())
    );
}

#[test]
fn recreate_scales_old_to_zero_then_waits_then_creates_full_size() {
    let mut md = deployment(Strategy::Recreate, 3, 0, 0);
    let old = set(&md, "small", 1, 3, 3, 100);
    md.spec.template = template("large");
    let sets = vec![old.clone()];
    let p = plan(input(&md, &sets, &[])).unwrap();
    assert_eq!(
        scaled(&p.actions),
        BTreeMap::from([(old.metadata.name.clone().unwrap(), 0)])
    );
    // Old scaled to zero but its machines still exist: wait.
    let mut drained = old.clone();
    drained.spec.replicas = Some(0);
    let sets = vec![drained.clone()];
    let p = plan(input(&md, &sets, &[])).unwrap();
    assert!(
        !p.actions
            .iter()
            .any(|a| matches!(a, DeploymentAction::CreateMachineSet(_)))
    );
    // Gone: the new set is created at full size.
    drained.status = Some(MachineSetStatus::default());
    let sets = vec![drained];
    let p = plan(input(&md, &sets, &[])).unwrap();
    let created = p.actions.iter().find_map(|a| match a {
        DeploymentAction::CreateMachineSet(ms) => Some(ms),
        _ => None,
    });
    assert_eq!(created.unwrap().spec.replicas, Some(3));
    assert!(
        !p.actions
            .iter()
            .any(|a| matches!(a, DeploymentAction::TaintNodesPreferNoSchedule(_)))
    );
}

#[test]
fn paused_deployment_only_scales() {
    let mut md = deployment(Strategy::RollingUpdate, 5, 1, 0);
    let old = set(&md, "small", 1, 3, 3, 100);
    md.spec.template = template("large");
    md.spec.paused = Some(true);
    let sets = vec![old.clone()];
    let p = plan(input(&md, &sets, &[])).unwrap();
    assert!(
        !p.actions
            .iter()
            .any(|a| matches!(a, DeploymentAction::CreateMachineSet(_)))
    );
    assert_eq!(scaled(&p.actions)[old.metadata.name.as_deref().unwrap()], 5);
    let st = status_written(&p.actions).unwrap();
    let c = status::condition(st.conditions.as_ref(), &CondType::Progressing).unwrap();
    assert_eq!(
        c.reason.as_deref(),
        Some(deployment_reason::DEPLOYMENT_PAUSED)
    );
    assert_eq!(c.status, ConditionStatus::Unknown);
    // Resume.
    let mut resumed = md.clone();
    resumed.spec.paused = Some(false);
    resumed.status = Some(st.clone());
    assert_eq!(
        status::paused_conditions(&resumed, t(1))
            .and_then(|c| c.into_iter().find(|c| c.type_ == CondType::Progressing))
            .and_then(|c| c.reason),
        Some(deployment_reason::DEPLOYMENT_RESUMED.to_owned())
    );
}

#[test]
fn rollback_restores_template_of_requested_revision_and_clears_request() {
    let mut md = deployment(Strategy::RollingUpdate, 2, 1, 0);
    let mut old = set(&md, "small", 1, 0, 0, 100);
    old.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("team".into(), "a".into());
    md.spec.template = template("large");
    let new = set(&md, "large", 2, 2, 2, 10);
    md.spec.rollback_to = Some(RollbackConfig { revision: Some(0) });
    md.metadata.annotations = Some(BTreeMap::from([(
        annotation::REVISION.to_owned(),
        "2".to_owned(),
    )]));
    let sets = vec![old, new];
    let p = plan(input(&md, &sets, &[])).unwrap();
    let updated = p
        .actions
        .iter()
        .find_map(|a| match a {
            DeploymentAction::UpdateDeployment(d) => Some(d),
            _ => None,
        })
        .unwrap();
    assert!(updated.spec.rollback_to.is_none());
    assert!(revision::equal_ignore_hash(
        &updated.spec.template,
        &template("small")
    ));
    let labels = updated
        .spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .as_ref()
        .unwrap();
    assert!(!labels.contains_key(label::MACHINE_TEMPLATE_HASH));
    let a = updated.metadata.annotations.as_ref().unwrap();
    assert_eq!(a["team"], "a");
    assert_eq!(
        a[annotation::REVISION],
        "2",
        "skip-list annotations of the deployment are kept"
    );
    assert!(events(&p.actions).contains(&"DeploymentRollback".to_owned()));

    // Unknown revision.
    let mut md2 = md.clone();
    md2.spec.rollback_to = Some(RollbackConfig { revision: Some(42) });
    let p = plan(input(&md2, &sets, &[])).unwrap();
    assert!(events(&p.actions).contains(&"DeploymentRollbackRevisionNotFound".to_owned()));
    // Same template.
    let mut md3 = md.clone();
    md3.spec.rollback_to = Some(RollbackConfig { revision: Some(2) });
    let p = plan(input(&md3, &sets, &[])).unwrap();
    assert!(events(&p.actions).contains(&"DeploymentRollbackTemplateUnchanged".to_owned()));
}

#[test]
fn progress_deadline_exceeded_when_stuck() {
    let mut md = deployment(Strategy::RollingUpdate, 2, 1, 0);
    md.spec.progress_deadline_seconds = Some(600);
    let old = set(&md, "small", 1, 2, 2, 1000);
    md.spec.template = template("large");
    let mut new = set(&md, "large", 2, 1, 0, 900);
    new.status = Some(MachineSetStatus {
        replicas: Some(1),
        observed_generation: Some(1),
        ..MachineSetStatus::default()
    });
    let previous = status::calculate_status(&md, &[&old, &new], Some(&new), 0, t(-900));
    let mut previous = previous;
    status::set_condition(
        previous.conditions.get_or_insert_with(Vec::new),
        status::new_condition(
            CondType::Progressing,
            ConditionStatus::True,
            deployment_reason::MACHINE_SET_UPDATED,
            "x".into(),
            t(-900),
        ),
    );
    md.status = Some(previous);
    md.metadata.annotations = Some(BTreeMap::from([(
        annotation::REVISION.to_owned(),
        "2".to_owned(),
    )]));
    let sets = vec![old, new];
    let p = plan(input(&md, &sets, &[])).unwrap();
    let st = status_written(&p.actions).unwrap();
    let c = status::condition(st.conditions.as_ref(), &CondType::Progressing).unwrap();
    assert_eq!(
        c.reason.as_deref(),
        Some(deployment_reason::PROGRESS_DEADLINE_EXCEEDED)
    );
    assert_eq!(c.status, ConditionStatus::False);
}

#[test]
fn progress_deadline_requeue_when_nothing_changes() {
    let mut md = deployment(Strategy::RollingUpdate, 2, 1, 0);
    md.spec.progress_deadline_seconds = Some(600);
    let old = set(&md, "small", 1, 2, 2, 1000);
    md.spec.template = template("large");
    let mut new = set(&md, "large", 2, 1, 0, 900);
    new.status = Some(MachineSetStatus {
        replicas: Some(1),
        observed_generation: Some(1),
        ..MachineSetStatus::default()
    });
    md.metadata.annotations = Some(BTreeMap::from([(
        annotation::REVISION.to_owned(),
        "2".to_owned(),
    )]));
    let mut i = input(&md, &[], &[]);
    let sets = vec![old, new];
    i.machine_sets = &sets;
    // First pass writes a status; feed it back with the Progressing time 100s ago.
    let p = plan(i).unwrap();
    let mut st = status_written(&p.actions).unwrap().clone();
    for c in st.conditions.as_mut().unwrap() {
        if c.type_ == CondType::Progressing {
            c.last_update_time = Some(Time(t(-100)));
        }
    }
    let mut md2 = md.clone();
    md2.status = Some(st);
    let p = plan(input(&md2, &sets, &[])).unwrap();
    assert!(status_written(&p.actions).is_none(), "{:?}", p.actions);
    assert_eq!(
        p.requeue_after.period(),
        mcm_api::duration::Duration::from_secs(501)
    );
}

#[test]
fn status_formulas() {
    let md = deployment(Strategy::RollingUpdate, 4, 1, 1);
    let mut a = set(&md, "small", 1, 3, 2, 100);
    a.status.as_mut().unwrap().preserved_failed_replicas = Some(1);
    let b = set(&md, "large", 2, 2, 1, 10);
    let st = status::calculate_status(&md, &[&a, &b], Some(&b), 1, t(0));
    assert_eq!(st.replicas, Some(3));
    assert_eq!(st.updated_replicas, Some(1));
    assert_eq!(st.available_replicas, Some(3));
    // Σ spec (5) − available (3), not md.replicas − available.
    assert_eq!(st.unavailable_replicas, Some(2));
    // min required = 4 − 1 − 1 preserved = 2 ≤ 3.
    let c = status::condition(st.conditions.as_ref(), &CondType::Available).unwrap();
    assert_eq!(c.status, ConditionStatus::True);
    let st2 = status::calculate_status(&md, &[&b], Some(&b), 1, t(0));
    let c = status::condition(st2.conditions.as_ref(), &CondType::Available).unwrap();
    assert_eq!(
        c.reason.as_deref(),
        Some(deployment_reason::MINIMUM_REPLICAS_UNAVAILABLE)
    );
}

#[test]
fn cleanup_deletes_oldest_empty_sets_beyond_history_limit() {
    let mut md = deployment(Strategy::RollingUpdate, 2, 1, 0);
    md.spec.revision_history_limit = Some(1);
    let mut oldest = set(&md, "a", 1, 0, 0, 300);
    oldest.status = Some(MachineSetStatus {
        observed_generation: Some(1),
        ..MachineSetStatus::default()
    });
    let mut busy = set(&md, "b", 2, 0, 0, 200);
    busy.status = Some(MachineSetStatus {
        replicas: Some(1),
        observed_generation: Some(1),
        ..MachineSetStatus::default()
    });
    let mut recent = set(&md, "c", 3, 0, 0, 150);
    recent.status = Some(MachineSetStatus {
        observed_generation: Some(1),
        ..MachineSetStatus::default()
    });
    md.spec.template = template("d");
    let current = set(&md, "d", 4, 2, 2, 100);
    md.metadata.annotations = Some(BTreeMap::from([(
        annotation::REVISION.to_owned(),
        "4".to_owned(),
    )]));
    // The previous status says complete.
    md.status = Some(MachineDeploymentStatus {
        observed_generation: Some(1),
        replicas: Some(2),
        updated_replicas: Some(2),
        available_replicas: Some(2),
        ..MachineDeploymentStatus::default()
    });
    let sets = vec![oldest.clone(), busy, recent, current];
    let p = plan(input(&md, &sets, &[])).unwrap();
    let deleted: Vec<String> = p
        .actions
        .iter()
        .filter_map(|a| match a {
            DeploymentAction::DeleteMachineSet(r) => Some(r.name.clone()),
            _ => None,
        })
        .collect();
    // 3 old sets, limit 1: the 2 oldest are candidates; the busy one is kept.
    assert_eq!(deleted, vec![oldest.metadata.name.clone().unwrap()]);
}

#[test]
fn deleting_deployment_deletes_sets_then_drops_finalizer() {
    let mut md = deployment(Strategy::RollingUpdate, 2, 1, 0);
    md.metadata.deletion_timestamp = Some(Time(t(0)));
    let s = set(&md, "small", 1, 2, 2, 100);
    let sets = vec![s.clone()];
    let p = plan(input(&md, &sets, &[])).unwrap();
    assert!(p.actions.iter().any(|a| matches!(a, DeploymentAction::DeleteMachineSet(r) if Some(&r.name) == s.metadata.name.as_ref())));
    assert!(!p.actions.contains(&DeploymentAction::AddFinalizer));
    let p = plan(input(&md, &[], &[])).unwrap();
    assert_eq!(p.actions, vec![DeploymentAction::RemoveFinalizer]);
}

#[test]
fn selecting_all_is_refused_with_event() {
    let mut md = deployment(Strategy::RollingUpdate, 2, 1, 0);
    md.spec.selector = Some(LabelSelector::default());
    md.spec.template.metadata = None;
    let p = plan(input(&md, &[], &[])).unwrap();
    assert_eq!(events(&p.actions), vec!["SelectingAll"]);
    assert_eq!(
        status_written(&p.actions).unwrap().observed_generation,
        Some(1)
    );
}

#[test]
fn invalid_deployments_are_errors() {
    let mut md = deployment(Strategy::RollingUpdate, 2, 1, 0);
    md.spec.strategy.as_mut().unwrap().type_ = None;
    assert!(matches!(
        plan(input(&md, &[], &[])),
        Err(DeploymentError::InvalidStrategy { .. })
    ));
    let mut md = deployment(Strategy::RollingUpdate, 2, 1, 0);
    md.spec
        .strategy
        .as_mut()
        .unwrap()
        .rolling_update
        .as_mut()
        .unwrap()
        .update_configuration
        .max_surge = None;
    assert!(matches!(
        plan(input(&md, &[], &[])),
        Err(DeploymentError::Fencepost { .. })
    ));
    let mut md = deployment(Strategy::RollingUpdate, 2, 1, 0);
    md.spec.selector = None;
    assert!(matches!(
        plan(input(&md, &[], &[])),
        Err(DeploymentError::MissingSelector { .. })
    ));
    let md = deployment(Strategy::RollingUpdate, -2, 1, 0);
    assert!(matches!(
        plan(input(&md, &[], &[])),
        Err(DeploymentError::NegativeReplicas { .. })
    ));
    let mut md = deployment(Strategy::RollingUpdate, 2, 1, 0);
    md.spec
        .template
        .spec
        .as_mut()
        .unwrap()
        .class
        .as_mut()
        .unwrap()
        .name = None;
    assert!(matches!(
        plan(input(&md, &[], &[])),
        Err(DeploymentError::MissingClass { field: "name", .. })
    ));
    // In-place without its parameters.
    let md = deployment(Strategy::InPlaceUpdate, 2, 1, 0);
    assert!(matches!(
        plan(input(&md, &[], &[])),
        Err(DeploymentError::Fencepost { .. })
    ));
}

#[test]
fn collision_with_foreign_set_bumps_count_and_picks_free_name() {
    let md = deployment(Strategy::RollingUpdate, 2, 1, 0);
    let hash = revision::template_hash(&md.spec.template, None);
    let mut foreign = MachineSet::new(
        &revision::machine_set_name("pool", &hash),
        MachineSetSpec::default(),
    );
    foreign.metadata.namespace = Some("ns".into());
    let sets = vec![foreign.clone()];
    let p = plan(input(&md, &sets, &[])).unwrap();
    let created = p
        .actions
        .iter()
        .find_map(|a| match a {
            DeploymentAction::CreateMachineSet(ms) => Some(ms),
            _ => None,
        })
        .unwrap();
    assert_ne!(created.metadata.name, foreign.metadata.name);
    assert_eq!(status_written(&p.actions).unwrap().collision_count, Some(1));
    match create_conflict(&md, &foreign) {
        CreateConflict::BumpCollisionCount(st) => assert_eq!(st.collision_count, Some(1)),
        other => panic!("{other:?}"),
    }
    let mut ours = (**created).clone();
    ours.metadata.owner_references = Some(vec![claim::owner_reference(KIND, "pool", "md-uid")]);
    assert_eq!(create_conflict(&md, &ours), CreateConflict::UseExisting);
}

#[test]
fn create_failure_sets_progressing_false_with_reason() {
    let md = deployment(Strategy::RollingUpdate, 2, 1, 0);
    let (st, event) = create_failure(&md, "pool-abcde", "quota exceeded", t(0));
    let c = status::condition(st.conditions.as_ref(), &CondType::Progressing).unwrap();
    assert_eq!(c.status, ConditionStatus::False);
    assert_eq!(c.reason.as_deref(), Some(REASON_MACHINE_SET_CREATE_ERROR));
    assert_eq!(
        c.message.as_deref(),
        Some("Failed to create new machine set \"pool-abcde\": quota exceeded")
    );
    assert_eq!(event.reason, REASON_MACHINE_SET_CREATE_ERROR);
}

#[test]
fn trigger_deletion_marks_machines() {
    let mut md = deployment(Strategy::RollingUpdate, 2, 1, 0);
    md.metadata.annotations = Some(BTreeMap::from([(
        annotation::TRIGGER_DELETION_BY_MCM.to_owned(),
        "m1".to_owned(),
    )]));
    let s = set(&md, "small", 1, 2, 2, 100);
    let mut m = Machine::new("m1", MachineSpec::default());
    m.metadata.namespace = Some("ns".into());
    m.status = Some(MachineStatus {
        current_status: Some(CurrentStatus {
            phase: Some(MachinePhase::Running),
            ..CurrentStatus::default()
        }),
        ..MachineStatus::default()
    });
    let sets = vec![s];
    let machines = vec![m];
    let p = plan(input(&md, &sets, &machines)).unwrap();
    let d = p
        .actions
        .iter()
        .find_map(|a| match a {
            DeploymentAction::UpdateDeployment(d) => Some(d),
            _ => None,
        })
        .unwrap();
    let a = d.metadata.annotations.as_ref().unwrap();
    assert_eq!(
        a[annotation::TRIGGER_DELETION_BY_MCM],
        "m1~2023-11-14T22:13:20Z"
    );
    assert_eq!(
        a[annotation::LAST_DEPLOYMENT_REPLICA_CHANGE_BY_SCALER_TIME],
        "2023-11-14T22:13:20Z"
    );
    assert!(p.actions.iter().any(
        |a| matches!(a, DeploymentAction::AnnotateMachine { machine, annotations }
        if machine.name == "m1" && annotations[annotation::MACHINE_PRIORITY] == "1")
    ));
}

#[test]
fn scaling_event_detection() {
    let md = deployment(Strategy::RollingUpdate, 3, 1, 0);
    let mut s = set(&md, "small", 1, 3, 3, 100);
    assert!(!is_scaling_event(&md, std::slice::from_ref(&s)));
    s.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(annotation::DESIRED_REPLICAS.into(), "5".into());
    assert!(is_scaling_event(&md, std::slice::from_ref(&s)));
    s.spec.replicas = Some(0);
    assert!(is_scaling_event(&md, std::slice::from_ref(&s)));
    // No new set: never a scaling event.
    let mut md2 = md.clone();
    md2.spec.template = template("other");
    assert!(!is_scaling_event(&md2, &[s]));
}

fn in_place_md(replicas: i32, surge: i32, unavailable: i32, manual: bool) -> MachineDeployment {
    let mut md = deployment(Strategy::InPlaceUpdate, replicas, surge, unavailable);
    let strategy = md.spec.strategy.as_mut().unwrap();
    strategy.in_place_update = Some(mcm_api::v1alpha1::InPlaceUpdateMachineDeployment {
        update_configuration: strategy.rolling_update.take().unwrap().update_configuration,
        orchestration_type: Some(if manual {
            mcm_api::v1alpha1::OrchestrationType::Manual
        } else {
            mcm_api::v1alpha1::OrchestrationType::Auto
        }),
    });
    md
}

/// Machines of `ms` on nodes `n-<class>-<i>`, Running.
fn machines_of(ms: &MachineSet, n: usize) -> Vec<Machine> {
    (0..n)
        .map(|i| {
            let name = format!("{}-{i}", ms.metadata.name.as_deref().unwrap());
            let mut m = Machine::new(&name, MachineSpec::default());
            m.metadata.namespace = Some("ns".into());
            m.metadata.uid = Some(format!("uid-{name}"));
            let mut labels = ms
                .spec
                .template
                .as_ref()
                .unwrap()
                .metadata
                .as_ref()
                .unwrap()
                .labels
                .clone()
                .unwrap();
            labels.insert(label::NODE.into(), format!("node-{i}"));
            m.metadata.labels = Some(labels);
            m.metadata.owner_references = Some(vec![claim::owner_reference(
                "MachineSet",
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
        })
        .collect()
}

fn node_view(labels: &[(&str, &str)], reason: Option<&str>) -> NodeView {
    NodeView {
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        in_place_update_reason: reason.map(str::to_owned),
    }
}

#[test]
fn in_place_manual_creates_empty_new_set_disables_old_scale_up_and_marks_candidates() {
    let mut md = in_place_md(2, 1, 0, true);
    let old = set(&md, "small", 1, 2, 2, 100);
    md.status = Some(status::calculate_status(
        &md,
        &[&old],
        Some(&old),
        0,
        t(-50),
    ));
    md.spec.template = template("large");
    let machines = machines_of(&old, 2);
    let nodes = BTreeMap::from([
        ("node-0".to_owned(), node_view(&[], None)),
        (
            "node-1".to_owned(),
            node_view(&[(label::CANDIDATE_FOR_UPDATE, "true")], None),
        ),
    ]);
    let sets = vec![old.clone()];
    let mut i = input(&md, &sets, &machines);
    i.nodes = &nodes;
    let p = plan(i).unwrap();
    let created = p.actions.iter().find_map(|a| match a {
        DeploymentAction::CreateMachineSet(ms) => Some(ms),
        _ => None,
    });
    assert_eq!(created.unwrap().spec.replicas, Some(0));
    let old_update = p
        .actions
        .iter()
        .find_map(|a| match a {
            DeploymentAction::UpdateMachineSet(ms) if ms.metadata.name == old.metadata.name => {
                Some(ms)
            }
            _ => None,
        })
        .unwrap();
    assert_eq!(
        old_update.metadata.labels.as_ref().unwrap()[label::SCALE_UP_DISABLED],
        "true"
    );
    assert!(p.actions.contains(&DeploymentAction::LabelNodes {
        nodes: vec!["node-0".into()],
        label: label::CANDIDATE_FOR_UPDATE.into(),
        value: "true".into()
    }));
    // Manual: nothing selected.
    assert!(!p.actions.iter().any(|a| matches!(a, DeploymentAction::LabelNodes { label, .. } if label == label::SELECTED_FOR_UPDATE)));
}

#[test]
fn in_place_auto_selects_nodes_within_unavailability_budget() {
    let mut md = in_place_md(3, 0, 1, false);
    let old = set(&md, "small", 1, 3, 3, 100);
    md.spec.template = template("large");
    let new = set(&md, "large", 2, 0, 0, 10);
    md.metadata.annotations = Some(BTreeMap::from([(
        annotation::REVISION.to_owned(),
        "2".to_owned(),
    )]));
    let machines = machines_of(&old, 3);
    let candidate = [(label::CANDIDATE_FOR_UPDATE, "true")];
    let nodes: BTreeMap<String, NodeView> = (0..3)
        .map(|i| (format!("node-{i}"), node_view(&candidate, None)))
        .collect();
    let sets = vec![old, new];
    let mut i = input(&md, &sets, &machines);
    i.nodes = &nodes;
    let p = plan(i).unwrap();
    assert!(
        p.actions.contains(&DeploymentAction::LabelNodes {
            nodes: vec!["node-0".into()],
            label: label::SELECTED_FOR_UPDATE.into(),
            value: "true".into()
        }),
        "{:?}",
        p.actions
    );
    // One node already undergoing the update: the budget is used up.
    let mut busy = nodes.clone();
    busy.insert(
        "node-0".into(),
        node_view(
            &[
                (label::CANDIDATE_FOR_UPDATE, "true"),
                (label::SELECTED_FOR_UPDATE, "true"),
            ],
            None,
        ),
    );
    let mut i = input(&md, &sets, &machines);
    i.nodes = &busy;
    let p = plan(i).unwrap();
    assert!(!p.actions.iter().any(|a| matches!(a, DeploymentAction::LabelNodes { label, .. } if label == label::SELECTED_FOR_UPDATE)));
}

#[test]
fn in_place_transfers_updated_machines_to_the_new_set() {
    let mut md = in_place_md(2, 0, 1, false);
    let old = set(&md, "small", 1, 2, 2, 100);
    md.spec.template = template("large");
    let new = set(&md, "large", 2, 0, 0, 10);
    md.metadata.annotations = Some(BTreeMap::from([(
        annotation::REVISION.to_owned(),
        "2".to_owned(),
    )]));
    let mut machines = machines_of(&old, 2);
    machines[0].status.as_mut().unwrap().conditions =
        Some(vec![k8s_openapi::api::core::v1::NodeCondition {
            type_: condition::IN_PLACE_UPDATE.into(),
            status: "True".into(),
            reason: Some(condition::UPDATE_SUCCESSFUL.into()),
            ..Default::default()
        }]);
    let nodes = BTreeMap::from([
        (
            "node-0".to_owned(),
            node_view(
                &[
                    (label::UPDATE_RESULT, value::UPDATE_SUCCESSFUL),
                    (label::SELECTED_FOR_UPDATE, "true"),
                ],
                Some(condition::UPDATE_SUCCESSFUL),
            ),
        ),
        (
            "node-1".to_owned(),
            node_view(&[(label::CANDIDATE_FOR_UPDATE, "true")], None),
        ),
    ]);
    let sets = vec![old.clone(), new.clone()];
    let mut i = input(&md, &sets, &machines);
    i.nodes = &nodes;
    let p = plan(i).unwrap();
    let (owner, labels) = p
        .actions
        .iter()
        .find_map(|a| match a {
            DeploymentAction::TransferMachine {
                machine,
                owner,
                labels,
            } if machine.name == machines[0].metadata.name.clone().unwrap() => {
                Some((owner, labels))
            }
            _ => None,
        })
        .unwrap();
    assert_eq!(Some(&owner.uid), new.metadata.uid.as_ref());
    let new_hash = &new
        .spec
        .selector
        .as_ref()
        .unwrap()
        .match_labels
        .as_ref()
        .unwrap()[label::MACHINE_TEMPLATE_HASH];
    assert_eq!(&labels[label::MACHINE_TEMPLATE_HASH], new_hash);
    assert_eq!(labels[label::UPDATE_RESULT], value::UPDATE_SUCCESSFUL);
    assert_eq!(labels[label::NODE], "node-0");
    assert!(
        p.actions
            .contains(&DeploymentAction::UncordonNode("node-0".into()))
    );
    let sizes = scaled(&p.actions);
    assert_eq!(sizes[old.metadata.name.as_deref().unwrap()], 1);
    assert_eq!(sizes[new.metadata.name.as_deref().unwrap()], 1);
}

#[test]
fn in_place_completes_updated_nodes_of_the_new_set_and_needs_a_target() {
    let mut md = in_place_md(1, 0, 1, false);
    md.spec.template = template("large");
    let new = set(&md, "large", 2, 1, 1, 10);
    md.metadata.annotations = Some(BTreeMap::from([(
        annotation::REVISION.to_owned(),
        "2".to_owned(),
    )]));
    let machines = machines_of(&new, 1);
    let nodes = BTreeMap::from([(
        "node-0".to_owned(),
        node_view(
            &[(label::UPDATE_RESULT, value::UPDATE_SUCCESSFUL)],
            Some(condition::UPDATE_SUCCESSFUL),
        ),
    )]);
    let sets = vec![new];
    let mut i = input(&md, &sets, &machines);
    i.nodes = &nodes;
    let p = plan(i).unwrap();
    assert!(
        p.actions
            .contains(&DeploymentAction::CompleteNodeInPlaceUpdate(
                "node-0".into()
            ))
    );
    i.config.target_cluster = false;
    assert!(matches!(
        plan(i),
        Err(DeploymentError::InPlaceWithoutTarget { .. })
    ));
}
