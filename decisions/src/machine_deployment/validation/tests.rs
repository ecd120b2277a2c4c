//! Tests of validation.
#![allow(clippy::unwrap_used)]

use crate::machine_deployment::decide::plan;
use crate::machine_deployment::tests::fixtures::*;
use crate::machine_deployment::types::*;
use mcm_api::v1alpha1::MachineDeploymentStrategyType as Strategy;

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
