//! Tests of scaling: proportional scale-in, scaling events and paused deployments.
#![allow(clippy::unwrap_used)]

use crate::machine_deployment::decide::plan;
use crate::machine_deployment::scaling::*;
use crate::machine_deployment::status;
use crate::machine_deployment::tests::fixtures::*;
use crate::machine_deployment::types::*;
use mcm_api::keys::{annotation, deployment_reason};
use mcm_api::v1alpha1::{
    ConditionStatus, MachineDeploymentConditionType as CondType,
    MachineDeploymentStrategyType as Strategy,
};

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

/// A zero divisor (docs/upstream-conformance.md#deviations, D7): sets largest first as
/// `(spec.replicas, max-replicas annotation)`, the deployment's replicas, maxSurge and
/// `status.replicas`; upstream's sizes where they are defined.
#[test]
fn proportional_scale_in_with_a_zero_divisor() {
    // (name, sets, replicas, maxSurge, status.replicas, expected sizes)
    #[rustfmt::skip]
    let rows = [
        ("largest set annotated 0: the others take their share, it keeps the rest (as upstream)",
            vec![(6, Some(0)), (4, Some(10))], 5, 0, 10, vec![3, 2]),
        ("largest set annotated 0 among three (as upstream)",
            vec![(6, Some(0)), (4, Some(10)), (2, Some(10))], 5, 1, 12, vec![3, 2, 1]),
        ("largest set without annotation and status.replicas 0 (as upstream)",
            vec![(6, None), (4, Some(10))], 5, 0, 0, vec![3, 2]),
        ("a smaller set annotated 0 keeps its size (upstream writes -2147483648 on amd64)",
            vec![(6, Some(10)), (4, Some(0))], 5, 0, 10, vec![1, 4]),
        ("every set without annotation and status.replicas 0 (upstream: -2147483648 on amd64)",
            vec![(4, None), (4, None)], 3, 1, 0, vec![0, 4]),
        ("the others' shares stay within the scale-in (upstream: the largest grows to 9, the other empties)",
            vec![(6, Some(0)), (4, Some(100))], 9, 0, 10, vec![6, 3]),
        ("scaling to zero never divides",
            vec![(6, Some(0)), (4, None)], 0, 1, 0, vec![0, 0]),
    ];
    for (name, sets, replicas, surge, status_replicas, expected) in rows {
        assert_eq!(
            proportional_scale_in(&sets, replicas, surge, status_replicas),
            expected,
            "{name}"
        );
    }
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
