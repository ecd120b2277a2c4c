//! Tests of the status formulas.
#![allow(clippy::unwrap_used)]

use crate::machine_deployment::status;
use crate::machine_deployment::test_fixtures::*;
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
