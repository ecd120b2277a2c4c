//! Property tests: defaulting keeps every input field and is idempotent; random or malformed
//! AdmissionReview and ConversionReview bodies never panic and always get an answer; every field
//! of the wrong type gets its own cause.

use mcm_api::arbitrary;
use mcm_webhook::admission::{self, Action, Kind, Version};
use mcm_webhook::defaulting;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Every (pointer, leaf value) of a JSON document.
fn leaves(value: &Value, pointer: String, out: &mut Vec<(String, Value)>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, child) in map {
                leaves(
                    child,
                    format!("{pointer}/{}", key.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for (i, child) in items.iter().enumerate() {
                leaves(child, format!("{pointer}/{i}"), out);
            }
        }
        other => out.push((pointer, other.clone())),
    }
}

fn strategy_json() -> impl Strategy<Value = Value> {
    let limit = prop_oneof![Just(json!(1)), Just(json!("25%")), Just(json!(0))];
    prop_oneof![
        Just(Value::Null),
        Just(json!({})),
        Just(json!("not an object")),
        prop::option::of(prop_oneof![
            Just("RollingUpdate"),
            Just("InPlaceUpdate"),
            Just("Recreate"),
            Just("Other")
        ])
        .prop_flat_map(move |type_| {
            (
                prop::option::of(limit.clone()),
                prop::option::of(prop_oneof![Just("Auto"), Just("Manual")]),
                any::<bool>(),
            )
                .prop_map(move |(surge, orchestration, block)| {
                    let mut strategy = Map::new();
                    if let Some(t) = type_ {
                        strategy.insert("type".into(), json!(t));
                    }
                    strategy.insert("xFuture".into(), json!({ "kept": [1, 2] }));
                    if block {
                        let mut params = Map::new();
                        if let Some(s) = &surge {
                            params.insert("maxSurge".into(), s.clone());
                        }
                        if let Some(o) = orchestration {
                            params.insert("orchestrationType".into(), json!(o));
                        }
                        strategy.insert("rollingUpdate".into(), Value::Object(params.clone()));
                        strategy.insert("inPlaceUpdate".into(), Value::Object(params));
                    }
                    Value::Object(strategy)
                })
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Defaulting only adds: every field of the input keeps its value (unknown fields and status
    /// included), and defaulting the result again yields no operations.
    #[test]
    fn defaulting_keeps_every_field_and_is_idempotent(
        md in arbitrary::machine_deployment(),
        strategy in strategy_json(),
        beta in any::<bool>(),
    ) {
        let mut object = serde_json::to_value(&md).unwrap();
        object["spec"]["xUnknownField"] = json!({ "nested": true });
        object["spec"]["template"]["xUnknown"] = json!("kept");
        if strategy.is_null() {
            object["spec"].as_object_mut().unwrap().remove("strategy");
        } else {
            object["spec"]["strategy"] = strategy;
        }
        let version = if beta { Version::V1beta1 } else { Version::V1alpha1 };
        let ops = default_ops(&object, version);
        prop_assert!(ops.iter().all(|op| op["op"] == "add"));
        prop_assert!(ops.iter().all(|op| !op["path"].as_str().unwrap().starts_with("/status")));
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops)).unwrap();
        let mut patched = object.clone();
        json_patch::patch(&mut patched, &patch).unwrap();
        let mut before = Vec::new();
        leaves(&object, String::new(), &mut before);
        for (pointer, value) in before {
            let after = patched.pointer(&pointer);
            // An empty object/array leaf may have been filled by a default; anything else is kept.
            if value == json!({}) {
                prop_assert!(after.is_some_and(Value::is_object), "{pointer} lost");
            } else {
                prop_assert_eq!(after, Some(&value), "{} changed", pointer);
            }
        }
        prop_assert_eq!(default_ops(&patched, version), Vec::<Value>::new());
    }
}

/// The defaulting patch as the JSON operations the API server receives.
fn default_ops(object: &Value, version: Version) -> Vec<Value> {
    let patch = defaulting::machine_deployment(object, version);
    patch
        .0
        .iter()
        .map(|op| serde_json::to_value(op).unwrap())
        .collect()
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        prop_oneof![
            Just("CREATE".to_owned()),
            Just("UPDATE".to_owned()),
            Just("machine.sapcloud.io".to_owned()),
            Just("v1alpha1".to_owned()),
            Just("v1beta1".to_owned()),
            Just("MachineDeployment".to_owned()),
            Just("MachineClass".to_owned()),
            ".{0,8}",
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("request".to_owned()),
                    Just("uid".to_owned()),
                    Just("kind".to_owned()),
                    Just("group".to_owned()),
                    Just("version".to_owned()),
                    Just("operation".to_owned()),
                    Just("object".to_owned()),
                    Just("oldObject".to_owned()),
                    Just("spec".to_owned()),
                    Just("metadata".to_owned()),
                    Just("selector".to_owned()),
                    Just("strategy".to_owned()),
                    Just("template".to_owned()),
                    Just("dryRun".to_owned()),
                    Just("objects".to_owned()),
                    Just("desiredAPIVersion".to_owned()),
                    "[a-zA-Z]{1,6}",
                ],
                inner,
                0..6,
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A review that is close to valid: a real request frame around random content.
fn near_review() -> impl Strategy<Value = Value> {
    (json_value(), json_value(), prop_oneof![Just("CREATE"), Just("UPDATE"), Just("DELETE")], any::<bool>()).prop_map(
        |(object, old, operation, beta)| {
            json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": "u",
                    "kind": { "group": "machine.sapcloud.io", "version": if beta { "v1beta1" } else { "v1alpha1" }, "kind": "MachineDeployment" },
                    "operation": operation,
                    "object": { "metadata": { "name": "x" }, "spec": object },
                    "oldObject": { "metadata": { "name": "x" }, "spec": old },
                },
            })
        },
    )
}

/// Typed fields of a v1alpha1 MachineDeployment: JSON pointer, kubectl path, and values of the
/// wrong type or out of range for it.
const TYPED_FIELDS: &[(&str, &str, &[&str])] = &[
    (
        "/spec/replicas",
        "spec.replicas",
        &["\"two\"", "2147483648", "1.5", "true"],
    ),
    (
        "/spec/minReadySeconds",
        "spec.minReadySeconds",
        &["-2147483649", "\"5\""],
    ),
    (
        "/spec/revisionHistoryLimit",
        "spec.revisionHistoryLimit",
        &["[]", "{}"],
    ),
    ("/spec/paused", "spec.paused", &["\"yes\"", "1"]),
    (
        "/spec/progressDeadlineSeconds",
        "spec.progressDeadlineSeconds",
        &["1e3", "\"x\""],
    ),
    (
        "/spec/template/spec/healthTimeout",
        "spec.template.spec.healthTimeout",
        &["\"soon\"", "5", "\"10\""],
    ),
    (
        "/spec/template/spec/drainTimeout",
        "spec.template.spec.drainTimeout",
        &["\"1x\"", "false"],
    ),
    (
        "/spec/template/spec/maxEvictRetries",
        "spec.template.spec.maxEvictRetries",
        &["\"3\"", "99999999999"],
    ),
    (
        "/spec/template/spec/disableHealthTimeout",
        "spec.template.spec.disableHealthTimeout",
        &["\"true\"", "0"],
    ),
];

/// Sets the member at `pointer`, creating missing parent objects.
fn set_creating(object: &mut Value, pointer: &str, value: Value) {
    let mut current = object;
    let keys: Vec<&str> = pointer.split('/').skip(1).collect();
    for key in &keys[..keys.len() - 1] {
        if !current.get(*key).is_some_and(Value::is_object) {
            current[*key] = json!({});
        }
        current = &mut current[*key];
    }
    current[keys[keys.len() - 1]] = value;
}

fn assert_answered(answer: &admission::Answer) -> Result<(), TestCaseError> {
    prop_assert_eq!(&answer.review["kind"], "AdmissionReview");
    prop_assert!(answer.review["response"]["allowed"].is_boolean());
    if !answer.allowed {
        prop_assert!(answer.review["response"]["status"]["code"].is_u64());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_admission_reviews_never_panic(body in json_value(), bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        for kind in Kind::ALL {
            for action in [Action::Validate, Action::Mutate] {
                assert_answered(&admission::review(kind, action, &serde_json::to_vec(&body).unwrap()))?;
                assert_answered(&admission::review(kind, action, &bytes))?;
            }
        }
    }

    #[test]
    fn near_valid_admission_reviews_never_panic(review in near_review()) {
        let body = serde_json::to_vec(&review).unwrap();
        for action in [Action::Validate, Action::Mutate] {
            assert_answered(&admission::review(Kind::MachineDeployment, action, &body))?;
        }
    }

    /// Any set of typed fields given values that do not decode yields one
    /// `FieldValueInvalid` cause per field, with its path, as a 422.
    #[test]
    fn every_field_of_the_wrong_type_gets_its_own_cause(
        md in arbitrary::machine_deployment(),
        picks in prop::collection::btree_map(0..TYPED_FIELDS.len(), any::<prop::sample::Index>(), 1..5),
    ) {
        let mut object = serde_json::to_value(&md).unwrap();
        // Terminating objects always pass; this property is about the ones that are judged.
        if let Some(metadata) = object["metadata"].as_object_mut() {
            metadata.remove("deletionTimestamp");
        }
        let mut expected = Vec::new();
        for (field, which) in &picks {
            let (pointer, path, bad) = TYPED_FIELDS[*field];
            let value: Value = serde_json::from_str(bad[which.index(bad.len())]).unwrap();
            set_creating(&mut object, pointer, value);
            expected.push(path.to_owned());
        }
        let review = json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": { "uid": "u", "operation": "CREATE", "object": object,
                "kind": { "group": "machine.sapcloud.io", "version": "v1alpha1", "kind": "MachineDeployment" } },
        });
        let answer = admission::review(Kind::MachineDeployment, Action::Validate, &serde_json::to_vec(&review).unwrap());
        let status = &answer.review["response"]["status"];
        prop_assert_eq!(&status["code"], 422, "{:#}", answer.review);
        let causes: Vec<(String, String)> = status["details"]["causes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["field"].as_str().unwrap().to_owned(), c["reason"].as_str().unwrap().to_owned()))
            .collect();
        for path in &expected {
            let on_path: Vec<&(String, String)> = causes.iter().filter(|(f, _)| f == path).collect();
            prop_assert_eq!(on_path.len(), 1, "{} in {:?}", path, causes);
            prop_assert_eq!(on_path[0].1.as_str(), "FieldValueInvalid");
        }
    }

    #[test]
    fn random_conversion_reviews_never_panic(objects in prop::collection::vec(json_value(), 0..4), frame in json_value()) {
        let review = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": { "uid": "u", "desiredAPIVersion": "machine.sapcloud.io/v1beta1", "objects": objects },
        });
        for body in [review, frame] {
            if let Ok(review) = serde_json::from_value::<kube::core::conversion::ConversionReview>(body) {
                let answer = mcm_conversion::convert_review(review);
                prop_assert!(answer.response.is_some());
            }
        }
    }
}
