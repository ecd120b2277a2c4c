//! Tests of validation.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use crate::machine_set::decide::plan;
use crate::machine_set::tests::fixtures::*;
use crate::machine_set::types::*;
use mcm_api::v1alpha1::Machine;

#[test]
fn invalid_sets_are_rejected_not_panicking() {
    let nodes = BTreeMap::new();
    let mut s = ms(1);
    s.spec.selector = None;
    assert!(matches!(
        plan(input::<Machine>(&s, &[], &nodes)),
        Err(MachineSetError::MissingSelector { .. })
    ));
    let mut s = ms(-1);
    assert!(matches!(
        plan(input::<Machine>(&s, &[], &nodes)),
        Err(MachineSetError::NegativeReplicas { .. })
    ));
    s.spec.replicas = Some(1);
    s.spec.template.as_mut().unwrap().metadata = None;
    assert!(matches!(
        plan(input::<Machine>(&s, &[], &nodes)),
        Err(MachineSetError::SelectorTemplateMismatch { .. })
    ));
    let mut s = ms(1);
    s.spec
        .template
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
        .class = None;
    assert!(matches!(
        plan(input::<Machine>(&s, &[], &nodes)),
        Err(MachineSetError::MissingClass { field: "kind", .. })
    ));
    let mut s = ms(1);
    s.spec.selector.as_mut().unwrap().match_expressions = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
            key: "a".into(),
            operator: "Near".into(),
            values: None,
        },
    ]);
    assert!(matches!(
        plan(input::<Machine>(&s, &[], &nodes)),
        Err(MachineSetError::Selector { .. })
    ));
}
