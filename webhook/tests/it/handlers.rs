//! Table tests of every rule through the router (axum `oneshot`), plus ratcheting, fast paths,
//! dry run, version-specific field paths, defaulting patches and malformed bodies.

use base64::Engine as _;
use serde_json::{Value, json};

use crate::common::*;

type Edit = (&'static str, Value);

/// Runs a validation and returns the answer.
async fn validate(kind: &str, object: &Value, old: Option<&Value>, dry_run: bool) -> Value {
    let state = state();
    let operation = if old.is_some() { "UPDATE" } else { "CREATE" };
    let path = format!("/validate-machine-sapcloud-io-{}", kind.to_lowercase());
    let version = object["apiVersion"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap();
    let (status, answer) = post(
        &state,
        &path,
        admission_review(kind, version, operation, object, old, dry_run),
    )
    .await;
    assert_eq!(status, 200, "policy decisions are always HTTP 200");
    answer
}

fn edited(base: &Value, edits: &[Edit]) -> Value {
    let mut object = base.clone();
    for (pointer, value) in edits {
        set(&mut object, pointer, value.clone());
    }
    object
}

/// Each case: edits of a valid object and the one cause (field, reason) they must produce.
async fn check_table(kind: &str, base: Value, cases: Vec<(&str, Vec<Edit>, &str, &str)>) {
    let answer = validate(kind, &base, None, false).await;
    assert_eq!(
        answer["response"]["allowed"], true,
        "base {kind} must be valid: {answer:#}"
    );
    for (name, edits, field, reason) in cases {
        let object = edited(&base, &edits);
        let answer = validate(kind, &object, None, false).await;
        let response = &answer["response"];
        assert_eq!(
            response["allowed"], false,
            "{name}: expected a denial, got {answer:#}"
        );
        assert_eq!(response["status"]["code"], 422, "{name}");
        assert_eq!(response["status"]["reason"], "Invalid", "{name}");
        assert_eq!(response["status"]["details"]["kind"], kind, "{name}");
        let found = causes(&answer);
        assert!(
            found.contains(&(field.to_owned(), reason.to_owned())),
            "{name}: expected cause ({field}, {reason}), got {found:?}"
        );
    }
}

#[tokio::test]
async fn machine_deployment_rules() {
    let cases: Vec<(&str, Vec<Edit>, &str, &str)> = vec![
        (
            "1 selector missing",
            vec![("/spec/selector", Value::Null)],
            "spec.selector",
            "FieldValueRequired",
        ),
        (
            "1 selector empty",
            vec![("/spec/selector", json!({}))],
            "spec.selector",
            "FieldValueInvalid",
        ),
        (
            "2 bad operator",
            vec![(
                "/spec/selector/matchExpressions",
                json!([{ "key": "pool", "operator": "Near" }]),
            )],
            "spec.selector.matchExpressions[0].operator",
            "FieldValueNotSupported",
        ),
        (
            "2 In without values",
            vec![(
                "/spec/selector/matchExpressions",
                json!([{ "key": "pool", "operator": "In" }]),
            )],
            "spec.selector.matchExpressions[0].values",
            "FieldValueRequired",
        ),
        (
            "2 Exists with values",
            vec![(
                "/spec/selector/matchExpressions",
                json!([{ "key": "pool", "operator": "Exists", "values": ["a"] }]),
            )],
            "spec.selector.matchExpressions[0].values",
            "FieldValueForbidden",
        ),
        (
            "2 bad label key",
            vec![("/spec/selector/matchLabels", json!({ "-bad": "a" }))],
            "spec.selector.matchLabels",
            "FieldValueInvalid",
        ),
        (
            "3 labels mismatch",
            vec![("/spec/template/metadata/labels", json!({ "pool": "b" }))],
            "spec.template.metadata.labels",
            "FieldValueInvalid",
        ),
        (
            "3 expression mismatch",
            vec![(
                "/spec/selector/matchExpressions",
                json!([{ "key": "zone", "operator": "Exists" }]),
            )],
            "spec.template.metadata.labels",
            "FieldValueInvalid",
        ),
        (
            "5 negative replicas",
            vec![("/spec/replicas", json!(-1))],
            "spec.replicas",
            "FieldValueInvalid",
        ),
        (
            "6 strategy missing",
            vec![("/spec/strategy", Value::Null)],
            "spec.strategy",
            "FieldValueRequired",
        ),
        (
            "6 unknown strategy",
            vec![("/spec/strategy/type", json!("Surprise"))],
            "spec.strategy.type",
            "FieldValueNotSupported",
        ),
        (
            "7 rollingUpdate with Recreate",
            vec![("/spec/strategy/type", json!("Recreate"))],
            "spec.strategy.rollingUpdate",
            "FieldValueForbidden",
        ),
        (
            "7 inPlaceUpdate missing",
            vec![("/spec/strategy", json!({ "type": "InPlaceUpdate" }))],
            "spec.strategy.inPlaceUpdate",
            "FieldValueRequired",
        ),
        (
            "7 rollingUpdate missing",
            vec![("/spec/strategy", json!({ "type": "RollingUpdate" }))],
            "spec.strategy.rollingUpdate",
            "FieldValueRequired",
        ),
        (
            "8 surge not a percent",
            vec![("/spec/strategy/rollingUpdate/maxSurge", json!("lots"))],
            "spec.strategy.rollingUpdate.maxSurge",
            "FieldValueInvalid",
        ),
        (
            "8 negative surge",
            vec![("/spec/strategy/rollingUpdate/maxSurge", json!(-1))],
            "spec.strategy.rollingUpdate.maxSurge",
            "FieldValueInvalid",
        ),
        (
            "9 unavailable over 100%",
            vec![("/spec/strategy/rollingUpdate/maxUnavailable", json!("150%"))],
            "spec.strategy.rollingUpdate.maxUnavailable",
            "FieldValueInvalid",
        ),
        (
            "10 both zero",
            vec![("/spec/strategy/rollingUpdate/maxSurge", json!(0))],
            "spec.strategy.rollingUpdate.maxUnavailable",
            "FieldValueInvalid",
        ),
        (
            "10 both zero percent",
            vec![(
                "/spec/strategy/rollingUpdate",
                json!({ "maxSurge": "0%", "maxUnavailable": 0 }),
            )],
            "spec.strategy.rollingUpdate.maxUnavailable",
            "FieldValueInvalid",
        ),
        (
            "10 in-place auto both zero",
            vec![(
                "/spec/strategy",
                json!({ "type": "InPlaceUpdate", "inPlaceUpdate": { "orchestrationType": "Auto", "maxSurge": 0, "maxUnavailable": "0%" } }),
            )],
            "spec.strategy.inPlaceUpdate.maxUnavailable",
            "FieldValueInvalid",
        ),
        (
            "11 unknown orchestration",
            vec![(
                "/spec/strategy",
                json!({ "type": "InPlaceUpdate", "inPlaceUpdate": { "orchestrationType": "Sometimes", "maxUnavailable": 1 } }),
            )],
            "spec.strategy.inPlaceUpdate.orchestrationType",
            "FieldValueNotSupported",
        ),
        (
            "13 class kind missing",
            vec![("/spec/template/spec/class/kind", Value::Null)],
            "spec.template.spec.class.kind",
            "FieldValueRequired",
        ),
        (
            "13 legacy class kind",
            vec![("/spec/template/spec/class/kind", json!("AWSMachineClass"))],
            "spec.template.spec.class.kind",
            "FieldValueNotSupported",
        ),
        (
            "13 class name invalid",
            vec![("/spec/template/spec/class/name", json!("Class_A"))],
            "spec.template.spec.class.name",
            "FieldValueInvalid",
        ),
        (
            "13 template spec missing",
            vec![("/spec/template/spec", Value::Null)],
            "spec.template.spec",
            "FieldValueRequired",
        ),
        (
            "14 negative minReadySeconds",
            vec![("/spec/minReadySeconds", json!(-5))],
            "spec.minReadySeconds",
            "FieldValueInvalid",
        ),
        (
            "14 negative revisionHistoryLimit",
            vec![("/spec/revisionHistoryLimit", json!(-1))],
            "spec.revisionHistoryLimit",
            "FieldValueInvalid",
        ),
        (
            "14 deadline not above minReady",
            vec![
                ("/spec/minReadySeconds", json!(600)),
                ("/spec/progressDeadlineSeconds", json!(300)),
            ],
            "spec.progressDeadlineSeconds",
            "FieldValueInvalid",
        ),
        (
            "15 template label value",
            vec![("/spec/template/metadata/labels/tier", json!("not ok!"))],
            "spec.template.metadata.labels",
            "FieldValueInvalid",
        ),
        (
            "15 annotation key",
            vec![(
                "/spec/template/metadata/annotations",
                json!({ "bad key": "x" }),
            )],
            "spec.template.metadata.annotations",
            "FieldValueInvalid",
        ),
        (
            "15 taint effect",
            vec![(
                "/spec/template/spec/nodeTemplate/spec/taints/0/effect",
                json!("Sometimes"),
            )],
            "spec.template.spec.nodeTemplate.spec.taints[0].effect",
            "FieldValueNotSupported",
        ),
        (
            "15 duplicate taint",
            vec![(
                "/spec/template/spec/nodeTemplate/spec/taints",
                json!([{ "key": "a", "effect": "NoSchedule" }, { "key": "a", "value": "x", "effect": "NoSchedule" }]),
            )],
            "spec.template.spec.nodeTemplate.spec.taints[1]",
            "FieldValueDuplicate",
        ),
        (
            "15 node label",
            vec![(
                "/spec/template/spec/nodeTemplate/metadata",
                json!({ "labels": { "a/b/c": "x" } }),
            )],
            "spec.template.spec.nodeTemplate.metadata.labels",
            "FieldValueInvalid",
        ),
        (
            "15 zero drain timeout",
            vec![("/spec/template/spec/drainTimeout", json!("0s"))],
            "spec.template.spec.drainTimeout",
            "FieldValueInvalid",
        ),
        (
            "15 negative health timeout",
            vec![("/spec/template/spec/healthTimeout", json!("-10m"))],
            "spec.template.spec.healthTimeout",
            "FieldValueInvalid",
        ),
        (
            "15 negative evict retries",
            vec![("/spec/template/spec/maxEvictRetries", json!(-1))],
            "spec.template.spec.maxEvictRetries",
            "FieldValueInvalid",
        ),
        (
            "5.2 control annotation",
            vec![(
                "/metadata/annotations",
                json!({ "node.machine.sapcloud.io/effective-creation-timeout": "soon" }),
            )],
            "metadata.annotations[node.machine.sapcloud.io/effective-creation-timeout]",
            "FieldValueInvalid",
        ),
        (
            "5.2 autoPreserve negative",
            vec![("/spec/autoPreserveFailedMachineMax", json!(-1))],
            "spec.autoPreserveFailedMachineMax",
            "FieldValueInvalid",
        ),
    ];
    check_table("MachineDeployment", machine_deployment(), cases).await;
}

#[tokio::test]
async fn machine_set_rules() {
    let cases: Vec<(&str, Vec<Edit>, &str, &str)> = vec![
        (
            "1 selector missing",
            vec![("/spec/selector", Value::Null)],
            "spec.selector",
            "FieldValueRequired",
        ),
        (
            "3 labels mismatch",
            vec![("/spec/template/metadata/labels", json!({}))],
            "spec.template.metadata.labels",
            "FieldValueInvalid",
        ),
        (
            "5 negative replicas",
            vec![("/spec/replicas", json!(-3))],
            "spec.replicas",
            "FieldValueInvalid",
        ),
        (
            "template missing",
            vec![("/spec/template", Value::Null)],
            "spec.template",
            "FieldValueRequired",
        ),
        (
            "13 class name missing",
            vec![("/spec/template/spec/class/name", Value::Null)],
            "spec.template.spec.class.name",
            "FieldValueRequired",
        ),
        (
            "14 negative minReadySeconds",
            vec![("/spec/minReadySeconds", json!(-1))],
            "spec.minReadySeconds",
            "FieldValueInvalid",
        ),
    ];
    check_table("MachineSet", machine_set(), cases).await;
}

#[tokio::test]
async fn machine_rules() {
    let cases: Vec<(&str, Vec<Edit>, &str, &str)> = vec![
        (
            "class missing",
            vec![("/spec/class", Value::Null)],
            "spec.class",
            "FieldValueRequired",
        ),
        (
            "class kind",
            vec![("/spec/class/kind", json!("Other"))],
            "spec.class.kind",
            "FieldValueNotSupported",
        ),
        (
            "taint key",
            vec![(
                "/spec/nodeTemplate",
                json!({ "spec": { "taints": [{ "key": "", "effect": "NoSchedule" }] } }),
            )],
            "spec.nodeTemplate.spec.taints[0].key",
            "FieldValueRequired",
        ),
        (
            "creation timeout",
            vec![("/spec/creationTimeout", json!("0s"))],
            "spec.creationTimeout",
            "FieldValueInvalid",
        ),
    ];
    check_table("Machine", machine(), cases).await;
}

#[tokio::test]
async fn machine_class_rules() {
    let cases: Vec<(&str, Vec<Edit>, &str, &str)> = vec![
        (
            "providerSpec not an object",
            vec![("/providerSpec", json!("m5.large"))],
            "providerSpec",
            "FieldValueInvalid",
        ),
        (
            "provider missing",
            vec![("/provider", Value::Null)],
            "provider",
            "FieldValueRequired",
        ),
        (
            "no secret reference",
            vec![("/secretRef", Value::Null)],
            "secretRef",
            "FieldValueRequired",
        ),
        (
            "secret namespace",
            vec![("/secretRef", json!({ "name": "s" }))],
            "secretRef.namespace",
            "FieldValueRequired",
        ),
        (
            "credentials name",
            vec![("/credentialsSecretRef", json!({ "namespace": "n" }))],
            "credentialsSecretRef.name",
            "FieldValueRequired",
        ),
        (
            "region",
            vec![("/nodeTemplate/region", json!(""))],
            "nodeTemplate.region",
            "FieldValueRequired",
        ),
        (
            "capacity empty",
            vec![("/nodeTemplate/capacity", json!({}))],
            "nodeTemplate.capacity",
            "FieldValueRequired",
        ),
        (
            "capacity negative",
            vec![("/nodeTemplate/capacity/cpu", json!("-2"))],
            "nodeTemplate.capacity[cpu]",
            "FieldValueInvalid",
        ),
    ];
    check_table("MachineClass", machine_class(), cases).await;
}

#[tokio::test]
async fn denial_lists_every_field_and_aggregates_the_message() {
    let object = edited(
        &machine_deployment(),
        &[
            ("/spec/replicas", json!(-1)),
            ("/spec/strategy/rollingUpdate/maxSurge", json!(0)),
        ],
    );
    let answer = validate("MachineDeployment", &object, None, false).await;
    let status = &answer["response"]["status"];
    assert_eq!(
        answer["response"]["uid"],
        "e911857d-c318-11e8-bbad-025000000001"
    );
    assert_eq!(status["details"]["name"], "md-a");
    assert_eq!(status["details"]["group"], "machine.sapcloud.io");
    assert_eq!(
        status["message"],
        "MachineDeployment.machine.sapcloud.io \"md-a\" is invalid: [spec.replicas: Invalid value: -1: must be greater than or equal to 0, spec.strategy.rollingUpdate.maxUnavailable: Invalid value: 0: may not be 0 when `maxSurge` is 0]"
    );
    assert_eq!(
        status["details"]["causes"][1]["message"],
        "Invalid value: 0: may not be 0 when `maxSurge` is 0"
    );
}

#[tokio::test]
async fn manual_in_place_may_have_zero_limits_but_gets_a_warning() {
    let object = edited(
        &machine_deployment(),
        &[(
            "/spec/strategy",
            json!({ "type": "InPlaceUpdate", "inPlaceUpdate": { "orchestrationType": "Manual", "maxSurge": 0, "maxUnavailable": 0 } }),
        )],
    );
    let answer = validate("MachineDeployment", &object, None, false).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer:#}");
    let warnings = answer["response"]["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains("orchestrationType Manual"))
    );
}

#[tokio::test]
async fn warnings_are_short_and_do_not_deny() {
    let object = edited(
        &machine_deployment(),
        &[("/spec/rollbackTo", json!({ "revision": 1 }))],
    );
    let answer = validate("MachineDeployment", &object, None, false).await;
    assert_eq!(answer["response"]["allowed"], true);
    assert_eq!(
        answer["response"]["warnings"],
        json!([mcm_webhook::validation::ROLLBACK_ON_CREATE])
    );

    let old = machine_class();
    let new = edited(&old, &[("/providerSpec/machineType", json!("m5.xlarge"))]);
    let answer = validate("MachineClass", &new, Some(&old), false).await;
    assert_eq!(answer["response"]["allowed"], true);
    let warning = answer["response"]["warnings"][0].as_str().unwrap();
    assert!(
        warning.contains("hot-updatable fields reach existing machines via UpdateMachine")
            && warning.len() <= 120,
        "{warning}"
    );

    let mut owned = machine_set();
    set(
        &mut owned,
        "/metadata/ownerReferences",
        json!([{ "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment", "name": "md-a", "uid": "u", "controller": true }]),
    );
    let changed = edited(
        &owned,
        &[("/spec/template/spec/drainTimeout", json!("1h0m0s"))],
    );
    let answer = validate("MachineSet", &changed, Some(&owned), false).await;
    assert_eq!(
        answer["response"]["warnings"],
        json!(["spec.template will be overwritten by MachineDeployment md-a"])
    );
}

#[tokio::test]
async fn update_rules_immutable_selector_provider_id_and_strategy_switch() {
    let old = machine_deployment();
    let new = edited(
        &old,
        &[
            ("/spec/selector/matchLabels/pool", json!("b")),
            ("/spec/template/metadata/labels/pool", json!("b")),
        ],
    );
    let answer = validate("MachineDeployment", &new, Some(&old), false).await;
    assert!(
        causes(&answer).contains(&("spec.selector".to_owned(), "FieldValueInvalid".to_owned())),
        "{answer:#}"
    );

    let old_machine = machine();
    let new_machine = edited(
        &old_machine,
        &[("/spec/providerID", json!("aws:///eu-west-1a/i-2"))],
    );
    let answer = validate("Machine", &new_machine, Some(&old_machine), false).await;
    assert_eq!(
        causes(&answer),
        vec![(
            "spec.providerID".to_owned(),
            "FieldValueForbidden".to_owned()
        )]
    );
    // From "" to a value is how a machine gets its VM.
    let unset = edited(&old_machine, &[("/spec/providerID", Value::Null)]);
    let answer = validate("Machine", &old_machine, Some(&unset), false).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer:#}");

    let mut rolling = old.clone();
    set(&mut rolling, "/status", json!({ "updatedReplicas": 1 }));
    let in_place = edited(
        &rolling,
        &[(
            "/spec/strategy",
            json!({ "type": "InPlaceUpdate", "inPlaceUpdate": { "orchestrationType": "Auto", "maxUnavailable": 1 } }),
        )],
    );
    let answer = validate("MachineDeployment", &in_place, Some(&rolling), false).await;
    assert_eq!(
        causes(&answer),
        vec![(
            "spec.strategy.type".to_owned(),
            "FieldValueInvalid".to_owned()
        )]
    );
    // Same switch after the rollout finished: allowed with a warning.
    set(&mut rolling, "/status/updatedReplicas", json!(2));
    let in_place = edited(
        &rolling,
        &[(
            "/spec/strategy",
            json!({ "type": "InPlaceUpdate", "inPlaceUpdate": { "orchestrationType": "Auto", "maxUnavailable": 1 } }),
        )],
    );
    let answer = validate("MachineDeployment", &in_place, Some(&rolling), false).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer:#}");
    assert!(answer["response"]["warnings"].is_array());
}

#[tokio::test]
async fn ratcheting_lets_legacy_objects_change_other_fields() {
    // A legacy object stored before the webhook existed: negative replicas and no strategy.
    let legacy = edited(
        &machine_deployment(),
        &[
            ("/spec/replicas", json!(-1)),
            ("/spec/strategy", Value::Null),
        ],
    );
    // The autoscaler changes only minReadySeconds: allowed despite the old problems.
    let scaled = edited(&legacy, &[("/spec/minReadySeconds", json!(30))]);
    let answer = validate("MachineDeployment", &scaled, Some(&legacy), false).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer:#}");
    // Changing an already-invalid field to another invalid value is reported.
    let worse = edited(&legacy, &[("/spec/replicas", json!(-2))]);
    let answer = validate("MachineDeployment", &worse, Some(&legacy), false).await;
    assert_eq!(
        causes(&answer),
        vec![("spec.replicas".to_owned(), "FieldValueInvalid".to_owned())]
    );
    // A new problem in a field that was fine is reported.
    let new_problem = edited(&legacy, &[("/spec/minReadySeconds", json!(-1))]);
    let answer = validate("MachineDeployment", &new_problem, Some(&legacy), false).await;
    assert_eq!(
        causes(&answer),
        vec![(
            "spec.minReadySeconds".to_owned(),
            "FieldValueInvalid".to_owned()
        )]
    );
}

#[tokio::test]
async fn terminating_and_spec_unchanged_updates_always_pass() {
    let invalid = edited(&machine_deployment(), &[("/spec/replicas", json!(-1))]);
    let mut terminating = edited(&invalid, &[("/spec/replicas", json!(-7))]);
    set(
        &mut terminating,
        "/metadata/deletionTimestamp",
        json!("2026-11-21T10:00:00Z"),
    );
    set(&mut terminating, "/metadata/finalizers", json!([]));
    let answer = validate("MachineDeployment", &terminating, Some(&invalid), false).await;
    assert_eq!(
        answer["response"]["allowed"], true,
        "finalizer removal must pass: {answer:#}"
    );

    let relabelled = edited(&invalid, &[("/metadata/labels", json!({ "x": "y" }))]);
    let answer = validate("MachineDeployment", &relabelled, Some(&invalid), false).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer:#}");
    // The fast path covers the top-level MachineClass fields too.
    let class = edited(&machine_class(), &[("/provider", Value::Null)]);
    let annotated = edited(&class, &[("/metadata/annotations", json!({ "a": "b" }))]);
    let answer = validate("MachineClass", &annotated, Some(&class), false).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer:#}");
    assert!(answer["response"].get("warnings").is_none());
}

#[tokio::test]
async fn dry_run_gets_the_same_decision_without_denial_metrics() {
    let state = state();
    let invalid = edited(&machine_deployment(), &[("/spec/replicas", json!(-1))]);
    let path = "/validate-machine-sapcloud-io-machinedeployment";
    let (_, dry) = post(
        &state,
        path,
        admission_review(
            "MachineDeployment",
            "v1alpha1",
            "CREATE",
            &invalid,
            None,
            true,
        ),
    )
    .await;
    assert_eq!(dry["response"]["allowed"], false);
    assert_eq!(
        causes(&dry),
        vec![("spec.replicas".to_owned(), "FieldValueInvalid".to_owned())]
    );
    let (_, metrics) = get_admin(&state, "/metrics").await;
    assert!(metrics.contains("machine_webhook_requests_total{endpoint=\"validate\",kind=\"MachineDeployment\",outcome=\"denied\"} 1"), "{metrics}");
    // Denial series exist from the start (at 0); a dry run must not raise any of them.
    let counted_denials: Vec<&str> = metrics
        .lines()
        .filter(|line| line.starts_with("machine_webhook_denials_total{") && !line.ends_with(" 0"))
        .collect();
    assert!(
        counted_denials.is_empty(),
        "dry run must not count denials: {counted_denials:?}"
    );
    let (_, real) = post(
        &state,
        path,
        admission_review(
            "MachineDeployment",
            "v1alpha1",
            "CREATE",
            &invalid,
            None,
            false,
        ),
    )
    .await;
    assert_eq!(real["response"], dry["response"]);
    let (_, metrics) = get_admin(&state, "/metrics").await;
    assert!(
        metrics.contains(
            "machine_webhook_denials_total{kind=\"MachineDeployment\",rule=\"replicas\"} 1"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("machine_webhook_request_duration_seconds_bucket{"),
        "{metrics}"
    );
}

#[tokio::test]
async fn v1beta1_requests_get_v1beta1_field_paths() {
    let md = json!({
        "apiVersion": "machine.sapcloud.io/v1beta1",
        "kind": "MachineDeployment",
        "metadata": { "name": "md-b" },
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": { "pool": "b" } },
            "strategy": { "type": "RollingUpdate", "rollingUpdate": { "maxSurge": 1, "maxUnavailable": 0 } },
            "template": { "metadata": { "labels": { "pool": "b" } }, "spec": { "class": { "kind": "MachineClass", "name": "c" }, "configuration": { "drainTimeout": "0s" } } },
        },
    });
    let answer = validate("MachineDeployment", &md, None, false).await;
    assert_eq!(
        causes(&answer),
        vec![(
            "spec.template.spec.configuration.drainTimeout".to_owned(),
            "FieldValueInvalid".to_owned()
        )]
    );
    let class = json!({
        "apiVersion": "machine.sapcloud.io/v1beta1",
        "kind": "MachineClass",
        "metadata": { "name": "c" },
        "spec": { "providerSpec": {}, "secretRef": { "name": "s", "namespace": "n" } },
    });
    let answer = validate("MachineClass", &class, None, false).await;
    assert_eq!(
        causes(&answer),
        vec![("spec.provider".to_owned(), "FieldValueRequired".to_owned())]
    );
}

/// A field that does not decode is one more field error (422 with its path),
/// not a 400 that hides every other error.
#[tokio::test]
async fn every_undecodable_field_gets_its_own_cause_beside_the_rules() {
    let object = edited(
        &machine_deployment(),
        &[
            ("/spec/template/spec/healthTimeout", json!("soon")),
            ("/spec/replicas", json!(-1)),
        ],
    );
    let answer = validate("MachineDeployment", &object, None, false).await;
    let status = &answer["response"]["status"];
    assert_eq!(status["code"], 422, "{answer:#}");
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(
        causes(&answer),
        vec![
            (
                "spec.template.spec.healthTimeout".to_owned(),
                "FieldValueInvalid".to_owned()
            ),
            ("spec.replicas".to_owned(), "FieldValueInvalid".to_owned()),
        ]
    );
    assert_eq!(
        status["details"]["causes"][0]["message"],
        "Invalid value: \"soon\": time: invalid duration \"soon\""
    );

    for (replicas, detail) in [
        (
            json!(2_147_483_648_u64),
            "must be an integer between -2147483648 and 2147483647",
        ),
        (
            json!("two"),
            "must be an integer between -2147483648 and 2147483647",
        ),
    ] {
        let object = edited(
            &machine_deployment(),
            &[("/spec/replicas", replicas.clone())],
        );
        let answer = validate("MachineDeployment", &object, None, false).await;
        assert_eq!(answer["response"]["status"]["code"], 422, "{answer:#}");
        assert_eq!(
            causes(&answer),
            vec![("spec.replicas".to_owned(), "FieldValueInvalid".to_owned())]
        );
        assert_eq!(
            answer["response"]["status"]["details"]["causes"][0]["message"],
            format!("Invalid value: {replicas}: {detail}")
        );
    }

    // The path follows the version sent, like every rule's.
    let beta = json!({
        "apiVersion": "machine.sapcloud.io/v1beta1",
        "kind": "Machine",
        "metadata": { "name": "m" },
        "spec": { "class": { "kind": "MachineClass", "name": "c" },
            "configuration": { "drainTimeout": "later", "maxEvictRetries": 1.5 } },
    });
    let answer = validate("Machine", &beta, None, false).await;
    let mut found = causes(&answer);
    found.sort();
    assert_eq!(
        found,
        vec![
            (
                "spec.configuration.drainTimeout".to_owned(),
                "FieldValueInvalid".to_owned()
            ),
            (
                "spec.configuration.maxEvictRetries".to_owned(),
                "FieldValueInvalid".to_owned()
            ),
        ]
    );
}

#[tokio::test]
async fn undecodable_fields_ratchet_like_every_rule() {
    let old = edited(
        &machine_deployment(),
        &[("/spec/template/spec/healthTimeout", json!("soon"))],
    );
    let scaled = edited(&old, &[("/spec/replicas", json!(5))]);
    let answer = validate("MachineDeployment", &scaled, Some(&old), false).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer:#}");
    let worse = edited(
        &old,
        &[("/spec/template/spec/healthTimeout", json!("later"))],
    );
    let answer = validate("MachineDeployment", &worse, Some(&old), false).await;
    assert_eq!(
        causes(&answer),
        vec![(
            "spec.template.spec.healthTimeout".to_owned(),
            "FieldValueInvalid".to_owned()
        )]
    );
}

/// Changing `provider` of a class that machines use is warned about with its
/// consequence (see docs/webhook-rules.md for why it is not refused).
#[tokio::test]
async fn provider_change_of_a_class_in_use_warns_with_the_consequence() {
    let unused = machine_class();
    let mut in_use = unused.clone();
    set(
        &mut in_use,
        "/metadata/finalizers",
        json!(["machine.sapcloud.io/machine-controller-manager"]),
    );
    for (old, warned) in [(&in_use, true), (&unused, false)] {
        let new = edited(old, &[("/provider", json!("other-driver"))]);
        let answer = validate("MachineClass", &new, Some(old), false).await;
        assert_eq!(answer["response"]["allowed"], true, "{answer:#}");
        let warnings: Vec<&str> = answer["response"]["warnings"]
            .as_array()
            .map(|w| w.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let about_provider = warnings.iter().any(|w| {
            w.contains("provider") && w.contains("other-driver") && w.contains("machines")
        });
        assert_eq!(about_provider, warned, "{warnings:?}");
    }
}

fn decode_patch(answer: &Value) -> json_patch::Patch {
    assert_eq!(answer["response"]["patchType"], "JSONPatch");
    let encoded = answer["response"]["patch"]
        .as_str()
        .expect("patch is a base64 string");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test]
async fn mutation_defaults_on_create_only_and_keeps_unknown_fields() {
    let state = state();
    let mut object = edited(&machine_deployment(), &[("/spec/strategy", Value::Null)]);
    set(&mut object, "/spec/futureField", json!({ "keep": true }));
    set(&mut object, "/status", json!({ "replicas": 9 }));
    let path = "/mutate-machine-sapcloud-io-machinedeployment";
    let (status, answer) = post(
        &state,
        path,
        admission_review(
            "MachineDeployment",
            "v1alpha1",
            "CREATE",
            &object,
            None,
            false,
        ),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(answer["response"]["allowed"], true);
    let patch = decode_patch(&answer);
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &patch).unwrap();
    assert_eq!(
        patched["spec"]["strategy"],
        json!({ "type": "RollingUpdate", "rollingUpdate": { "maxSurge": 1, "maxUnavailable": 0 } })
    );
    assert_eq!(patched["spec"]["futureField"], json!({ "keep": true }));
    assert_eq!(patched["status"], object["status"]);

    let (_, update) = post(
        &state,
        path,
        admission_review(
            "MachineDeployment",
            "v1alpha1",
            "UPDATE",
            &object,
            Some(&object),
            false,
        ),
    )
    .await;
    assert_eq!(update["response"]["allowed"], true);
    assert!(
        update["response"].get("patch").is_none(),
        "no defaults on UPDATE"
    );

    let (_, set_answer) = post(
        &state,
        "/mutate-machine-sapcloud-io-machineset",
        admission_review(
            "MachineSet",
            "v1alpha1",
            "CREATE",
            &machine_set(),
            None,
            false,
        ),
    )
    .await;
    assert_eq!(set_answer["response"]["allowed"], true);
    assert!(set_answer["response"].get("patch").is_none());
}

#[tokio::test]
async fn malformed_reviews_get_400_answers_with_http_200() {
    let state = state();
    let path = "/validate-machine-sapcloud-io-machinedeployment";
    let wrong_kind = admission_review(
        "MachineSet",
        "v1alpha1",
        "CREATE",
        &machine_set(),
        None,
        false,
    );
    let no_object = serde_json::to_vec(&json!({ "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": { "uid": "u", "kind": { "group": "machine.sapcloud.io", "version": "v1alpha1", "kind": "MachineDeployment" }, "operation": "CREATE" } })).unwrap();
    for body in [b"not json".to_vec(), b"{}".to_vec(), wrong_kind, no_object] {
        let (status, answer) = post(&state, path, body.clone()).await;
        assert_eq!(status, 200);
        assert_eq!(
            answer["response"]["allowed"],
            false,
            "{}",
            String::from_utf8_lossy(&body)
        );
        assert_eq!(answer["response"]["status"]["code"], 400);
    }
    let delete = admission_review(
        "MachineDeployment",
        "v1alpha1",
        "DELETE",
        &machine_deployment(),
        None,
        false,
    );
    let (_, answer) = post(&state, path, delete).await;
    assert_eq!(
        answer["response"]["allowed"], true,
        "DELETE is never judged"
    );
    let (status, answer) = post(&state, "/convert", b"[]".to_vec()).await;
    assert_eq!(status, 200);
    assert_eq!(answer["response"]["result"]["status"], "Failure");
}

#[tokio::test]
async fn conversion_endpoint_converts_and_readiness_follows_the_certificate() {
    let state = state();
    let review = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": { "uid": "c-1", "desiredAPIVersion": "machine.sapcloud.io/v1beta1", "objects": [machine_deployment(), machine_class()] },
    });
    let (status, answer) = post(&state, "/convert", serde_json::to_vec(&review).unwrap()).await;
    assert_eq!(status, 200);
    let response = &answer["response"];
    assert_eq!(response["uid"], "c-1");
    assert_eq!(
        response["convertedObjects"][0]["spec"]["template"]["spec"]["configuration"]["drainTimeout"],
        "2h0m0s"
    );
    assert_eq!(response["convertedObjects"][1]["spec"]["provider"], "AWS");
    assert_eq!(get_admin(&state, "/readyz").await.0, 503);
    assert_eq!(get_admin(&state, "/healthz").await.0, 200);
}

#[tokio::test]
async fn editing_the_conversion_data_annotation_warns() {
    let old = machine_deployment();
    let mut new = old.clone();
    set(
        &mut new,
        "/metadata/annotations",
        json!({ "machine.sapcloud.io/conversion-data": "{}" }),
    );
    let answer = validate("MachineDeployment", &new, Some(&old), false).await;
    assert_eq!(answer["response"]["allowed"], true);
    assert_eq!(
        answer["response"]["warnings"],
        json!([
            "machine.sapcloud.io/conversion-data is written by the conversion webhook; do not edit it"
        ])
    );
}

/// Every counter family is on /metrics before anything happened, its series at 0 (as Go's
/// Prometheus client exports counters): dashboards and `increase()` need the 0 before the first
/// event to see it.
#[tokio::test]
async fn every_counter_family_is_exported_at_zero_before_any_event() {
    let state = state();
    let (status, metrics) = get_admin(&state, "/metrics").await;
    assert_eq!(status, 200);
    let counter_families: Vec<&str> = metrics
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.strip_suffix(" counter"))
        .collect();
    for family in [
        "machine_webhook_requests",
        "machine_webhook_denials",
        "machine_webhook_converted_objects",
        "machine_webhook_closed_connections",
    ] {
        assert!(
            counter_families.contains(&family),
            "{family} is not a counter family: {metrics}"
        );
    }
    for family in &counter_families {
        let samples: Vec<&str> = metrics
            .lines()
            .filter(|line| line.starts_with(&format!("{family}_total")))
            .collect();
        assert!(!samples.is_empty(), "{family} has no series: {metrics}");
        for sample in samples {
            assert!(sample.ends_with(" 0"), "not 0 before any event: {sample}");
        }
    }
    for series in [
        "machine_webhook_requests_total{endpoint=\"validate\",kind=\"MachineDeployment\",outcome=\"denied\"} 0",
        "machine_webhook_requests_total{endpoint=\"mutate\",kind=\"Machine\",outcome=\"patched\"} 0",
        "machine_webhook_requests_total{endpoint=\"convert\",kind=\"\",outcome=\"converted\"} 0",
        "machine_webhook_denials_total{kind=\"MachineClass\",rule=\"decode\"} 0",
        "machine_webhook_converted_objects_total 0",
        "machine_webhook_closed_connections_total{reason=\"per_peer_limit\"} 0",
        "machine_webhook_closed_connections_total{reason=\"global_limit\"} 0",
        "machine_webhook_closed_connections_total{reason=\"global_limit_evicted_idle\"} 0",
        "machine_webhook_closed_connections_total{reason=\"tls_handshake_timeout\"} 0",
        "machine_webhook_closed_connections_total{reason=\"header_read_timeout\"} 0",
        "machine_webhook_closed_connections_total{reason=\"idle_timeout\"} 0",
    ] {
        assert!(metrics.contains(series), "missing {series}: {metrics}");
    }
    // The latency histogram of each endpoint is there too, empty.
    for endpoint in ["validate", "mutate", "convert"] {
        let count =
            format!("machine_webhook_request_duration_seconds_count{{endpoint=\"{endpoint}\"}} 0");
        assert!(metrics.contains(&count), "missing {count}: {metrics}");
    }
}
