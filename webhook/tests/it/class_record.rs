//! A MachineDeployment or MachineSet naming a class the MachineClass controller recorded invalid
//! is admitted with a warning naming the class and its field errors
//! (docs/webhook-rules.md#invalid-class-warning), read from the sandbox API server.

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::PostParams;
use mcm_api::keys::annotation::CLASS_VALIDATION;
use mcm_api::v1alpha1::MachineClass;
use mcm_sandbox::{Sandbox, SandboxConfig};
use serde_json::{Value, json};

use crate::common::{admission_review, machine_deployment, machine_set, post, set, state};

async fn sandbox_with_classes(classes: &[(&str, Option<&str>)]) -> Sandbox {
    let sandbox = Sandbox::start(SandboxConfig::default()).await.unwrap();
    let client = sandbox.client();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(
        &PostParams::default(),
        &mcm_api::crd::machine_class().unwrap(),
    )
    .await
    .unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "shoot--a"}})).unwrap();
    let _ = namespaces.create(&PostParams::default(), &namespace).await;
    let api: Api<MachineClass> = Api::namespaced(client, "shoot--a");
    for (name, record) in classes {
        let mut class = crate::common::machine_class();
        set(&mut class, "/metadata/name", json!(name));
        if let Some(record) = record {
            set(
                &mut class,
                "/metadata/annotations",
                json!({CLASS_VALIDATION: record}),
            );
        }
        let class: MachineClass = serde_json::from_value(class).unwrap();
        let mut created = false;
        for _ in 0..100 {
            if api.create(&PostParams::default(), &class).await.is_ok() {
                created = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(created, "class {name} created");
    }
    sandbox
}

fn warnings(answer: &Value) -> Vec<String> {
    answer["response"]["warnings"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|w| w.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_naming_a_class_recorded_invalid_is_admitted_with_a_warning() {
    let sandbox = sandbox_with_classes(&[
        (
            "bad",
            Some("invalid: providerSpec.bootDelay: not a duration: \"soon\""),
        ),
        ("good", Some("valid")),
        ("unrecorded", None),
    ])
    .await;
    let state = state();
    state.preview.set_client(sandbox.client());

    for (kind, object) in [
        ("MachineDeployment", machine_deployment()),
        ("MachineSet", machine_set()),
    ] {
        let path = format!("/validate-machine-sapcloud-io-{}", kind.to_lowercase());
        let mut bad = object.clone();
        set(&mut bad, "/spec/template/spec/class/name", json!("bad"));
        let body = admission_review(kind, "v1alpha1", "CREATE", &bad, None, false);
        let (status, answer) = post(&state, &path, body).await;
        assert_eq!(status, 200);
        assert_eq!(answer["response"]["allowed"], json!(true), "{answer}");
        let lines = warnings(&answer);
        assert!(
            lines
                .iter()
                .any(|line| line.contains("machineclass shoot--a/bad")
                    && line.contains("providerSpec.bootDelay: not a duration")),
            "{kind}: {lines:?}"
        );

        // An UPDATE keeps warning while the record says invalid.
        let body = admission_review(kind, "v1alpha1", "UPDATE", &bad, Some(&bad), false);
        let (_, answer) = post(&state, &path, body).await;
        assert_eq!(answer["response"]["allowed"], json!(true), "{answer}");
        assert!(
            warnings(&answer)
                .iter()
                .any(|line| line.contains("shoot--a/bad")),
            "{kind} update: {answer}"
        );

        for class in ["good", "unrecorded", "missing"] {
            let mut object = object.clone();
            set(&mut object, "/spec/template/spec/class/name", json!(class));
            let body = admission_review(kind, "v1alpha1", "CREATE", &object, None, false);
            let (_, answer) = post(&state, &path, body).await;
            assert_eq!(answer["response"]["allowed"], json!(true), "{answer}");
            assert!(
                warnings(&answer)
                    .iter()
                    .all(|line| !line.contains("found invalid")),
                "{kind} with class {class}: {answer}"
            );
        }
    }
}

#[tokio::test]
async fn without_an_api_client_there_is_no_warning_and_no_denial() {
    let state = state();
    let mut bad = machine_deployment();
    set(&mut bad, "/spec/template/spec/class/name", json!("bad"));
    let body = admission_review("MachineDeployment", "v1alpha1", "CREATE", &bad, None, false);
    let (status, answer) = post(
        &state,
        "/validate-machine-sapcloud-io-machinedeployment",
        body,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(answer["response"]["allowed"], json!(true), "{answer}");
    assert!(
        warnings(&answer)
            .iter()
            .all(|line| !line.contains("found invalid")),
        "{answer}"
    );
}
