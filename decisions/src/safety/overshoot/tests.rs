//! Table tests of the overshooting safety plan.
#![allow(clippy::unwrap_used)]

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use mcm_api::v1alpha1::{
    MachineDeploymentSpec, MachineDeploymentStrategy, MachineDeploymentStrategyType,
    MachineSetSpec, MachineSpec, MachineTemplateSpec, RollingUpdateMachineDeployment,
    UpdateConfiguration,
};

fn t() -> Timestamp {
    Timestamp::from_second(1_700_000_000).unwrap()
}

fn labels(pool: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("name".to_owned(), pool.to_owned())])
}

fn ms(name: &str, pool: &str, replicas: i32, md_uid: Option<&str>) -> MachineSet {
    let mut s = MachineSet::new(
        name,
        MachineSetSpec {
            replicas: Some(replicas),
            selector: Some(LabelSelector {
                match_labels: Some(labels(pool)),
                match_expressions: None,
            }),
            template: Some(MachineTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(pool)),
                    ..ObjectMeta::default()
                }),
                spec: None,
            }),
            ..MachineSetSpec::default()
        },
    );
    s.metadata.namespace = Some("ns".into());
    s.metadata.labels = Some(labels(pool));
    s.metadata.uid = Some(format!("uid-{name}"));
    s.metadata.owner_references =
        md_uid.map(|u| vec![claim::owner_reference("MachineDeployment", pool, u)]);
    s
}

fn md(pool: &str, replicas: i32, surge: Option<i32>) -> MachineDeployment {
    let mut d = MachineDeployment::new(
        pool,
        MachineDeploymentSpec {
            replicas: Some(replicas),
            selector: Some(LabelSelector {
                match_labels: Some(labels(pool)),
                match_expressions: None,
            }),
            strategy: Some(MachineDeploymentStrategy {
                type_: Some(if surge.is_some() {
                    MachineDeploymentStrategyType::RollingUpdate
                } else {
                    MachineDeploymentStrategyType::Recreate
                }),
                rolling_update: surge.map(|s| RollingUpdateMachineDeployment {
                    update_configuration: UpdateConfiguration {
                        max_surge: Some(IntOrString::Int(s)),
                        max_unavailable: Some(IntOrString::Int(0)),
                    },
                }),
                in_place_update: None,
            }),
            ..MachineDeploymentSpec::default()
        },
    );
    d.metadata.namespace = Some("ns".into());
    d.metadata.uid = Some(format!("md-{pool}"));
    d
}

fn machines(set: &str, pool: &str, n: usize) -> Vec<Machine> {
    (0..n)
        .map(|i| {
            let mut m = Machine::new(&format!("{set}-{i}"), MachineSpec::default());
            m.metadata.namespace = Some("ns".into());
            m.metadata.labels = Some(labels(pool));
            m.metadata.owner_references =
                Some(vec![claim::owner_reference("MachineSet", set, "x")]);
            m
        })
        .collect()
}

fn frozen(mut s: MachineSet) -> MachineSet {
    freeze_machine_set(&mut s, REASON_OVERSHOOTING, "m", t());
    s
}

#[test]
fn thresholds_table() {
    let cfg = OvershootConfig::default();
    let cases = [
        // (set replicas, deployment (replicas, surge)) → high
        (3, None, 8),
        (0, None, 2),
        (3, Some((3, Some(1))), 6),
        (3, Some((10, Some(3))), 15),
        // Recreate: surge 0 instead of an abort.
        (3, Some((3, None)), 5),
    ];
    for (r, d, want) in cases {
        let deployment = d.map(|(dr, s)| md("a", dr, s));
        assert_eq!(
            high_threshold(&ms("s", "a", r, None), deployment.as_ref(), cfg).unwrap(),
            want,
            "{r} {d:?}"
        );
    }
}

#[test]
fn freezes_set_and_deployment_at_threshold_only() {
    let d = md("a", 3, Some(1));
    let sets = vec![ms("a-1", "a", 3, Some("md-a"))];
    let p = plan(
        &sets,
        std::slice::from_ref(&d),
        &machines("a-1", "a", 5),
        OvershootConfig::default(),
        t(),
    );
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    let p = plan(
        &sets,
        std::slice::from_ref(&d),
        &machines("a-1", "a", 6),
        OvershootConfig::default(),
        t(),
    );
    assert!(
        matches!(&p.actions[0], OvershootAction::FreezeMachineSet { name, reason, message, event }
        if name == "a-1" && reason == REASON_OVERSHOOTING
            && message == "The number of machines backing MachineSet: a-1 is 6 >= 6 which is the Max-ScaleUp-Limit"
            && event.reason == "FrozeMachineSet")
    );
    assert!(
        matches!(&p.actions[1], OvershootAction::FreezeMachineDeployment { name, .. } if name == "a")
    );
    assert_eq!(
        p.actions.len(),
        2,
        "state sync sees the deployment already frozen: {:?}",
        p.actions
    );
}

#[test]
fn recreate_deployment_does_not_abort_the_others() {
    let recreate = md("r", 3, None);
    let rolling = md("a", 3, Some(1));
    let sets = vec![
        ms("r-1", "r", 3, Some("md-r")),
        ms("a-1", "a", 3, Some("md-a")),
    ];
    let mut all = machines("r-1", "r", 1);
    all.extend(machines("a-1", "a", 7));
    let p = plan(
        &sets,
        &[recreate, rolling],
        &all,
        OvershootConfig::default(),
        t(),
    );
    assert!(p.errors.is_empty());
    assert!(
        matches!(&p.actions[0], OvershootAction::FreezeMachineSet { name, .. } if name == "a-1")
    );
}

#[test]
fn malformed_surge_skips_only_that_set() {
    let mut bad = md("b", 3, Some(1));
    bad.spec
        .strategy
        .as_mut()
        .unwrap()
        .rolling_update
        .as_mut()
        .unwrap()
        .update_configuration
        .max_surge = Some(IntOrString::String("lots".into()));
    let sets = vec![ms("b-1", "b", 3, Some("md-b")), ms("c-1", "c", 1, None)];
    let mut all = machines("b-1", "b", 50);
    all.extend(machines("c-1", "c", 4));
    let p = plan(&sets, &[bad], &all, OvershootConfig::default(), t());
    assert_eq!(p.errors.len(), 1);
    assert!(
        matches!(&p.actions[0], OvershootAction::FreezeMachineSet { name, .. } if name == "c-1")
    );
}

#[test]
fn one_overshoot_change_per_run() {
    let sets = vec![ms("x-1", "x", 1, None), ms("y-1", "y", 1, None)];
    let mut all = machines("x-1", "x", 9);
    all.extend(machines("y-1", "y", 9));
    let p = plan(&sets, &[], &all, OvershootConfig::default(), t());
    assert_eq!(p.actions.len(), 1);
}

#[test]
fn unfreezes_when_back_below_low_threshold() {
    let d = {
        let mut d = md("a", 3, Some(1));
        freeze_machine_deployment(&mut d, REASON_OVERSHOOTING, "m", t());
        d
    };
    let sets = vec![frozen(ms("a-1", "a", 3, Some("md-a")))];
    // high 6, low 5: 5 machines unfreeze, deployment first.
    let p = plan(
        &sets,
        std::slice::from_ref(&d),
        &machines("a-1", "a", 5),
        OvershootConfig::default(),
        t(),
    );
    assert!(
        matches!(&p.actions[0], OvershootAction::UnfreezeMachineDeployment { reason, .. } if reason == REASON_UNDERSHOOTING)
    );
    assert!(
        matches!(&p.actions[1], OvershootAction::UnfreezeMachineSet { name, event } if name == "a-1" && event.reason == "UnfrozeMachineSet")
    );
    assert_eq!(p.actions.len(), 2);
    // Still 6: stays frozen (no flapping between the thresholds).
    let p = plan(
        &sets,
        std::slice::from_ref(&d),
        &machines("a-1", "a", 6),
        OvershootConfig::default(),
        t(),
    );
    assert!(p.actions.is_empty(), "{:?}", p.actions);
}

#[test]
fn deployment_state_follows_its_sets() {
    let d = md("a", 3, Some(1));
    let sets = vec![frozen(ms("a-1", "a", 3, Some("md-a")))];
    let p = plan(
        &sets,
        std::slice::from_ref(&d),
        &machines("a-1", "a", 6),
        OvershootConfig::default(),
        t(),
    );
    assert_eq!(
        p.actions,
        vec![OvershootAction::FreezeMachineDeployment {
            name: "a".into(),
            reason: REASON_STATE_SYNC.into(),
            message: MESSAGE_STATE_SYNC.into()
        }]
    );
    let mut d2 = d.clone();
    d2.metadata.labels = Some(BTreeMap::from([(
        label::FREEZE.to_owned(),
        "True".to_owned(),
    )]));
    let sets = vec![ms("a-1", "a", 3, Some("md-a"))];
    let p = plan(
        &sets,
        &[d2],
        &machines("a-1", "a", 3),
        OvershootConfig::default(),
        t(),
    );
    assert_eq!(
        p.actions,
        vec![OvershootAction::UnfreezeMachineDeployment {
            name: "a".into(),
            reason: REASON_STATE_SYNC.into()
        }]
    );
}

#[test]
fn unfreeze_annotation_on_deployment_unfreezes_it_and_its_sets() {
    let mut d = md("a", 3, Some(1));
    freeze_machine_deployment(&mut d, REASON_OVERSHOOTING, "m", t());
    d.metadata.annotations = Some(BTreeMap::from([(
        annotation::UNFREEZE.to_owned(),
        String::new(),
    )]));
    let sets = vec![frozen(ms("a-1", "a", 3, Some("md-a")))];
    let p = plan(
        &sets,
        &[d],
        &machines("a-1", "a", 6),
        OvershootConfig::default(),
        t(),
    );
    assert_eq!(
        p.actions,
        vec![
            OvershootAction::UnfreezeMachineDeployment {
                name: "a".into(),
                reason: REASON_UNFREEZE_ANNOTATION.into()
            },
            OvershootAction::RequestMachineSetUnfreeze { name: "a-1".into() },
            OvershootAction::UnfreezeMachineSet {
                name: "a-1".into(),
                event: unfroze_event("a-1")
            },
        ]
    );
    let mut s = sets[0].clone();
    unfreeze_machine_set(&mut s);
    assert!(!is_set_frozen(&s));
}

#[test]
fn count_needs_template_labels_and_owner_name_and_counts_double_refs() {
    let s = ms("a-1", "a", 3, None);
    let mut all = machines("a-1", "a", 2);
    all.extend(machines("a-1", "other", 3));
    all.extend(machines("b-1", "a", 3));
    all[0]
        .metadata
        .owner_references
        .as_mut()
        .unwrap()
        .push(claim::owner_reference("Other", "a-1", "y"));
    assert_eq!(machine_count(&s, &all), 3);
}

#[test]
fn machines_being_deleted_do_not_count_so_a_scale_down_never_freezes() {
    // Scaled 9 → 4 (surge 1, safety-up 2: high 7): five machines are still draining.
    let d = md("a", 4, Some(1));
    let sets = vec![ms("a-1", "a", 4, Some("md-a"))];
    let mut fleet = machines("a-1", "a", 9);
    for m in fleet.iter_mut().take(5) {
        m.metadata.deletion_timestamp = Some(Time(t()));
    }
    let p = plan(
        &sets,
        std::slice::from_ref(&d),
        &fleet,
        OvershootConfig::default(),
        t(),
    );
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert_eq!(machine_count(&sets[0], &fleet), 4);
    // The same nine machines, none being deleted, still overshoot.
    let p = plan(
        &sets,
        std::slice::from_ref(&d),
        &machines("a-1", "a", 9),
        OvershootConfig::default(),
        t(),
    );
    assert!(
        matches!(&p.actions[0], OvershootAction::FreezeMachineSet { name, .. } if name == "a-1"),
        "{:?}",
        p.actions
    );
}

#[test]
fn only_an_appearing_unfreeze_annotation_triggers_a_run() {
    let plain = ms("a-1", "a", 4, Some("md-a")).metadata;
    let mut scaled = plain.clone();
    scaled.generation = Some(7);
    let mut annotated = plain.clone();
    annotated.annotations = Some(BTreeMap::from([(
        annotation::UNFREEZE.to_owned(),
        value::TRUE_CAPITALISED.to_owned(),
    )]));
    assert!(!triggers_overshoot_check(Some(&plain), &scaled));
    assert!(!triggers_overshoot_check(None, &plain));
    assert!(triggers_overshoot_check(Some(&plain), &annotated));
    assert!(triggers_overshoot_check(None, &annotated));
    assert!(!triggers_overshoot_check(Some(&annotated), &annotated));
}
