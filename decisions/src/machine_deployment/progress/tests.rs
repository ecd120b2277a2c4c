//! Tests of rollout progress and the progress deadline.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use crate::machine_deployment::decide::plan;
use crate::machine_deployment::status;
use crate::machine_deployment::tests::fixtures::*;
use crate::vocabulary::Retry;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use mcm_api::keys::{annotation, deployment_reason};
use mcm_api::v1alpha1::{
    ConditionStatus, MachineDeploymentConditionType as CondType,
    MachineDeploymentStrategyType as Strategy, MachineSetStatus,
};

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

/// A rollout whose first status is written, then fed back with the Progressing condition's
/// lastUpdateTime `last_update`; the plan of the second pass.
fn second_pass(last_update: jiff::Timestamp) -> crate::machine_deployment::types::DeploymentPlan {
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
    let p = plan(i).unwrap();
    let mut st = status_written(&p.actions).unwrap().clone();
    for c in st.conditions.as_mut().unwrap() {
        if c.type_ == CondType::Progressing {
            c.last_update_time = Some(Time(last_update));
        }
    }
    let mut md2 = md.clone();
    md2.status = Some(st);
    let p = plan(input(&md2, &sets, &[])).unwrap();
    assert!(status_written(&p.actions).is_none(), "{:?}", p.actions);
    p
}

#[test]
fn progress_deadline_requeue_when_nothing_changes() {
    // Progressing 100s ago, deadline 600s: the time left plus a second.
    let p = second_pass(t(-100));
    assert_eq!(
        p.requeue_after.period(),
        mcm_api::duration::Duration::from_secs(501)
    );
}

#[test]
fn progress_deadline_within_a_second_requeues_now() {
    // Half a second left, and the deadline exactly now: not yet timed out (nothing to write),
    // come back at once (the shell rate-limits it), not after a second.
    let half_second_left = t(-600)
        .checked_add(jiff::SignedDuration::from_millis(500))
        .unwrap();
    for last_update in [half_second_left, t(-600)] {
        let p = second_pass(last_update);
        assert_eq!(p.requeue_after, Retry::Immediate, "{last_update}");
    }
}
