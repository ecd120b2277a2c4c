//! Tests of the status formulas.
#![allow(clippy::unwrap_used)]

use crate::machine_deployment::status;
use crate::machine_deployment::tests::fixtures::*;
use mcm_api::keys::deployment_reason;
use mcm_api::v1alpha1::{
    ConditionStatus, MachineDeploymentConditionType as CondType,
    MachineDeploymentStrategyType as Strategy,
};

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

/// `requeueStuckMachineDeployment`'s cases (docs/upstream-conformance.md#deployment-progress):
/// upstream's inputs and expected results, with `now` relative to the Progressing condition's
/// lastUpdateTime.
#[test]
fn progress_check_follows_requeue_stuck_machine_deployment() {
    use jiff::SignedDuration;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use mcm_api::v1alpha1::{MachineDeploymentCondition, MachineDeploymentStatus};

    use crate::machine_deployment::status::ProgressCheck;
    use crate::vocabulary::Retry;

    let last_update = t(0);
    let progressing = |status, reason: Option<&str>, last_update_time| MachineDeploymentCondition {
        type_: CondType::Progressing,
        status,
        last_update_time,
        last_transition_time: None,
        reason: reason.map(str::to_owned),
        message: None,
    };
    let failed = progressing(
        ConditionStatus::False,
        Some(deployment_reason::PROGRESS_DEADLINE_EXCEEDED),
        None,
    );
    let stuck = progressing(ConditionStatus::True, None, Some(Time(last_update)));
    let counts = |replicas, updated, available| MachineDeploymentStatus {
        replicas: Some(replicas),
        updated_replicas: Some(updated),
        available_replicas: Some(available),
        observed_generation: Some(1),
        ..MachineDeploymentStatus::default()
    };
    let ms = SignedDuration::from_millis;
    let (none, now_) = (ProgressCheck::NotNeeded, ProgressCheck::Now);
    let without_update_time = MachineDeploymentCondition {
        last_update_time: None,
        ..stuck.clone()
    };
    // (name, deadline, replicas, stored Progressing, new (replicas, updated, available), now
    // after the last update, expected)
    #[rustfmt::skip]
    let rows = [
        ("nil progressDeadlineSeconds specified", None, 4, None, (3, 3, 2), ms(0), none),
        ("no progressing condition found", Some(60), 4, None, (3, 3, 2), ms(0), none),
        ("complete deployment does not need to be requeued", Some(60), 3, None, (3, 3, 3), ms(0), none),
        ("already failed deployment does not need to be requeued", Some(60), 3, Some(failed), (3, 3, 0), ms(0), none),
        ("stuck deployment - 30s", Some(60), 3, Some(stuck.clone()), (3, 3, 1), ms(30_000), ProgressCheck::After(ms(30_000))),
        ("stuck deployment - 1s", Some(60), 3, Some(stuck.clone()), (3, 3, 1), ms(59_000), ProgressCheck::After(ms(1_000))),
        ("failed deployment - less than a second => now", Some(60), 3, Some(stuck.clone()), (3, 3, 1), SignedDuration::new(59, 1), now_),
        ("failed deployment - now", Some(60), 3, Some(stuck.clone()), (3, 3, 1), ms(60_000), now_),
        ("failed deployment - 1s after deadline", Some(60), 3, Some(stuck.clone()), (3, 3, 1), ms(61_000), now_),
        ("failed deployment - 60s after deadline", Some(60), 3, Some(stuck.clone()), (3, 3, 1), ms(120_000), now_),
        // Ours: complete wins over a deadline long past.
        ("complete deployment past its deadline", Some(60), 3, Some(stuck), (3, 3, 3), ms(120_000), none),
        // Ours: a stored condition without lastUpdateTime is Go's zero time, long past.
        ("progressing condition without lastUpdateTime", Some(60), 3, Some(without_update_time), (3, 3, 1), ms(0), now_),
    ];
    for (name, deadline, replicas, stored, (total, updated, available), after, expected) in rows {
        let mut md = deployment(Strategy::RollingUpdate, replicas, 1, 0);
        md.spec.progress_deadline_seconds = deadline;
        let mut stored_status = counts(total, updated, available);
        stored_status.conditions = stored.map(|c| vec![c]);
        md.status = Some(stored_status);
        let new = counts(total, updated, available);
        let now = last_update.checked_add(after).unwrap();
        let got = status::progress_check(&md, &new, now);
        assert_eq!(got, expected, "{name}");
        let retry = match expected {
            ProgressCheck::NotNeeded => None,
            ProgressCheck::Now => Some(Retry::Immediate),
            ProgressCheck::After(left) => Some(Retry::After(crate::vocabulary::go_duration(
                left + SignedDuration::from_secs(1),
            ))),
        };
        assert_eq!(got.retry(), retry, "{name}: requeue");
    }
}
