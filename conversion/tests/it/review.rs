//! `ConversionReview` handling: order, metadata, partial objects, failures, malformed input.

use kube::core::conversion::ConversionReview;
use kube::core::response::StatusSummary;
use mcm_conversion::convert_review;
use proptest::prelude::*;
use serde_json::{Value, json};

fn review(desired: &str, objects: Vec<Value>) -> ConversionReview {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": { "uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "desiredAPIVersion": desired, "objects": objects },
    }))
    .unwrap()
}

fn md(name: &str, version: &str) -> Value {
    json!({
        "apiVersion": format!("machine.sapcloud.io/{version}"),
        "kind": "MachineDeployment",
        "metadata": {
            "name": name, "namespace": "shoot--a", "uid": format!("uid-{name}"),
            "resourceVersion": "42", "generation": 2, "creationTimestamp": "2026-11-20T10:00:00Z",
            "labels": { "pool": "a" },
            "managedFields": [{ "manager": "kubectl", "operation": "Apply", "apiVersion": "machine.sapcloud.io/v1alpha1" }],
        },
        "spec": {
            "replicas": 2,
            "selector": { "matchLabels": { "pool": "a" } },
            "strategy": { "type": "Surprise" },
            "template": {
                "metadata": { "labels": { "pool": "a" } },
                "spec": { "class": { "kind": "MachineClass", "name": "c" }, "drainTimeout": "10m0s" },
            },
        },
    })
}

#[test]
fn keeps_order_and_metadata_and_changes_only_the_version() {
    let objects = vec![
        md("a", "v1alpha1"),
        md("b", "v1alpha1"),
        md("c", "v1alpha1"),
    ];
    let out = convert_review(review("machine.sapcloud.io/v1beta1", objects.clone()));
    let response = out.response.unwrap();
    assert_eq!(response.uid, "705ab4f5-6393-11e8-b7cc-42010a800002");
    assert_eq!(response.result.status, Some(StatusSummary::Success));
    let names: Vec<_> = response
        .converted_objects
        .iter()
        .map(|o| o["metadata"]["name"].clone())
        .collect();
    assert_eq!(names, [json!("a"), json!("b"), json!("c")]);
    for (input, output) in objects.iter().zip(&response.converted_objects) {
        assert_eq!(output["apiVersion"], "machine.sapcloud.io/v1beta1");
        assert_eq!(
            output["metadata"], input["metadata"],
            "metadata must not change"
        );
        // The inlined configuration moved under `configuration`; the unknown strategy stayed.
        assert_eq!(
            output["spec"]["template"]["spec"]["configuration"]["drainTimeout"],
            "10m0s"
        );
        assert_eq!(output["spec"]["strategy"]["type"], "Surprise");
    }
}

#[test]
fn objects_in_the_desired_version_are_returned_untouched() {
    let object = md("a", "v1beta1");
    let out = convert_review(review("machine.sapcloud.io/v1beta1", vec![object.clone()]));
    assert_eq!(out.response.unwrap().converted_objects, vec![object]);
}

#[test]
fn objects_without_spec_only_change_version() {
    let partial = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineClass",
        "metadata": { "name": "c", "labels": { "x": "y" } },
    });
    let machine = json!({
        "apiVersion": "machine.sapcloud.io/v1beta1",
        "kind": "Machine",
        "metadata": { "name": "m" },
    });
    let out = convert_review(review("machine.sapcloud.io/v1beta1", vec![partial.clone()]));
    let mut expected = partial;
    expected["apiVersion"] = json!("machine.sapcloud.io/v1beta1");
    assert_eq!(out.response.unwrap().converted_objects, vec![expected]);

    let out = convert_review(review(
        "machine.sapcloud.io/v1alpha1",
        vec![machine.clone()],
    ));
    let mut expected = machine;
    expected["apiVersion"] = json!("machine.sapcloud.io/v1alpha1");
    assert_eq!(out.response.unwrap().converted_objects, vec![expected]);
}

#[test]
fn status_only_objects_convert() {
    let object = json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineSet",
        "metadata": { "name": "s" },
        "status": { "replicas": 3, "machineSetCondition": [{ "type": "Weird", "status": "True" }] },
    });
    let out = convert_review(review("machine.sapcloud.io/v1beta1", vec![object]));
    let converted = &out.response.unwrap().converted_objects[0];
    assert_eq!(converted["status"]["replicas"], 3);
    assert_eq!(
        converted["status"]["machineSetCondition"][0]["type"],
        "Weird"
    );
}

#[test]
fn unsupported_versions_and_kinds_fail_the_review() {
    for (desired, object) in [
        ("machine.sapcloud.io/v2", md("a", "v1alpha1")),
        ("machine.sapcloud.io/v1beta1", md("a", "v0")),
        (
            "machine.sapcloud.io/v1beta1",
            json!({ "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Pod", "spec": {} }),
        ),
        ("machine.sapcloud.io/v1beta1", json!([1, 2])),
        (
            "machine.sapcloud.io/v1beta1",
            json!({ "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine", "spec": { "class": 7 } }),
        ),
    ] {
        let out = convert_review(review(desired, vec![md("ok", "v1alpha1"), object.clone()]));
        let response = out.response.unwrap();
        assert_eq!(
            response.result.status,
            Some(StatusSummary::Failure),
            "{object}"
        );
        assert!(!response.result.message.is_empty());
        assert!(response.converted_objects.is_empty());
    }
}

#[test]
fn a_review_without_request_is_answered_with_a_failure() {
    let review: ConversionReview = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
    }))
    .unwrap();
    let response = convert_review(review).response.unwrap();
    assert_eq!(response.result.status, Some(StatusSummary::Failure));
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        prop_oneof![
            Just("machine.sapcloud.io/v1alpha1".to_owned()),
            Just("machine.sapcloud.io/v1beta1".to_owned()),
            Just("MachineDeployment".to_owned()),
            Just("MachineClass".to_owned()),
            "[a-z]{0,6}",
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("apiVersion".to_owned()),
                    Just("kind".to_owned()),
                    Just("metadata".to_owned()),
                    Just("spec".to_owned()),
                    Just("template".to_owned()),
                    Just("status".to_owned()),
                    Just("providerSpec".to_owned()),
                    "[a-z]{1,5}",
                ],
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    /// Random objects never panic the converter: they are converted or the review fails.
    #[test]
    fn random_objects_never_panic(objects in prop::collection::vec(json_value(), 0..4), beta in any::<bool>()) {
        let desired = if beta { "machine.sapcloud.io/v1beta1" } else { "machine.sapcloud.io/v1alpha1" };
        let out = convert_review(review(desired, objects.clone()));
        let response = out.response.unwrap();
        if response.result.status == Some(StatusSummary::Success) {
            prop_assert_eq!(response.converted_objects.len(), objects.len());
        }
    }
}
