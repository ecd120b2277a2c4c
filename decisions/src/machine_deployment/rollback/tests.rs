//! Tests of rollback.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use crate::machine_deployment::decide::plan;
use crate::machine_deployment::revision::{self};
use crate::machine_deployment::tests::fixtures::*;
use crate::machine_deployment::types::*;
use mcm_api::keys::{annotation, label};
use mcm_api::v1alpha1::{MachineDeploymentStrategyType as Strategy, RollbackConfig};

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
