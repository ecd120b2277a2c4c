//! Self-managed certificates against the sandbox API server: only the leader writes, the bundle
//! is injected into our webhook configuration and the CRD conversion clientConfig, rotation keeps
//! the previous CA for the overlap, followers load the certificate from the Secret.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use mcm_api::crd::{ConversionWebhook, all_with_conversion};
use mcm_sandbox::{Sandbox, SandboxConfig};
use mcm_webhook::self_managed::{Policy, Settings, from_secret, reconcile_once};
use mcm_webhook::tls::CertStore;
use serde_json::json;

use crate::common::install_provider;

const CRD: &str = "machinedeployments.machine.sapcloud.io";

fn ca_bundle_of(value: &serde_json::Value) -> String {
    let encoded = value.as_str().unwrap_or_default();
    String::from_utf8(
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, encoded).unwrap(),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_issues_rotates_and_injects_followers_only_load() {
    install_provider();
    let sandbox = Sandbox::start(SandboxConfig::default()).await.unwrap();
    let client = sandbox.client();
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let config: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": { "name": "machine-controller-manager" },
        "webhooks": [{
            "name": "validate.machinedeployment.machine.sapcloud.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "clientConfig": { "service": { "namespace": "default", "name": "mcm-webhook", "path": "/validate-machine-sapcloud-io-machinedeployment" } },
            "rules": [{ "apiGroups": ["machine.sapcloud.io"], "apiVersions": ["*"], "operations": ["CREATE"], "resources": ["machinedeployments"] }],
        }],
    }))
    .unwrap();
    configs
        .create(&PostParams::default(), &config)
        .await
        .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let webhook = ConversionWebhook {
        service_namespace: "default".into(),
        service_name: "mcm-webhook".into(),
        path: "/convert".into(),
        port: None,
        ca_bundle: None,
    };
    let crd = all_with_conversion(&webhook)
        .unwrap()
        .remove("machine.sapcloud.io_machinedeployments.yaml")
        .unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();

    let settings = Settings {
        namespace: "default".into(),
        secret_name: "mcm-webhook-certs".into(),
        lease_name: "mcm-webhook-certs".into(),
        identity: "test".into(),
        dns_names: vec!["mcm-webhook.default.svc".into()],
        mutating_configuration: None,
        validating_configuration: Some("machine-controller-manager".into()),
        crds: vec![CRD.into()],
        period: Duration::from_secs(300),
        policy: Policy::default(),
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let t0 = Timestamp::now();

    // A follower writes nothing and has nothing to serve yet.
    let follower = CertStore::default();
    assert!(
        !reconcile_once(&client, &settings, &follower, false, t0)
            .await
            .unwrap()
    );
    assert!(
        secrets
            .get_opt("mcm-webhook-certs")
            .await
            .unwrap()
            .is_none()
    );

    // The leader issues the CA and injects its bundle everywhere.
    let leader = CertStore::default();
    assert!(
        reconcile_once(&client, &settings, &leader, true, t0)
            .await
            .unwrap()
    );
    let first = from_secret(&secrets.get("mcm-webhook-certs").await.unwrap()).unwrap();
    let config =
        serde_json::to_value(configs.get("machine-controller-manager").await.unwrap()).unwrap();
    assert_eq!(
        ca_bundle_of(&config["webhooks"][0]["clientConfig"]["caBundle"]),
        first.ca_cert
    );
    let crd = serde_json::to_value(crds.get(CRD).await.unwrap()).unwrap();
    assert_eq!(
        ca_bundle_of(&crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"]),
        first.ca_cert
    );
    // The follower now loads the certificate from the Secret.
    assert!(
        reconcile_once(&client, &settings, &follower, false, t0)
            .await
            .unwrap()
    );

    // 25 days later the CA is due (80 % of 30 days): rotated, both CAs in the bundle.
    let t1 = t0.checked_add(SignedDuration::from_hours(25 * 24)).unwrap();
    assert!(
        reconcile_once(&client, &settings, &leader, true, t1)
            .await
            .unwrap()
    );
    let second = from_secret(&secrets.get("mcm-webhook-certs").await.unwrap()).unwrap();
    assert_ne!(second.ca_cert, first.ca_cert);
    assert_ne!(second.tls_cert, first.tls_cert);
    let crd = serde_json::to_value(crds.get(CRD).await.unwrap()).unwrap();
    let bundle = ca_bundle_of(&crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"]);
    assert!(
        bundle.contains(&second.ca_cert) && bundle.contains(&first.ca_cert),
        "overlap keeps both CAs"
    );

    // After the overlap the old CA leaves the bundle; nothing is re-issued.
    let t2 = t1.checked_add(SignedDuration::from_hours(25)).unwrap();
    assert!(
        reconcile_once(&client, &settings, &leader, true, t2)
            .await
            .unwrap()
    );
    assert_eq!(
        from_secret(&secrets.get("mcm-webhook-certs").await.unwrap()).unwrap(),
        second
    );
    let config =
        serde_json::to_value(configs.get("machine-controller-manager").await.unwrap()).unwrap();
    assert_eq!(
        ca_bundle_of(&config["webhooks"][0]["clientConfig"]["caBundle"]),
        second.ca_cert
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_holder_issues_the_certificate_in_the_running_loop() {
    install_provider();
    let sandbox = Sandbox::start(SandboxConfig::default()).await.unwrap();
    let settings = Settings {
        namespace: "default".into(),
        secret_name: "loop-certs".into(),
        lease_name: "loop-certs".into(),
        identity: "replica-a".into(),
        dns_names: vec!["mcm-webhook.default.svc".into()],
        mutating_configuration: None,
        validating_configuration: None,
        crds: Vec::new(),
        period: Duration::from_millis(200),
        policy: Policy::default(),
    };
    let store = std::sync::Arc::new(CertStore::default());
    let task = tokio::spawn(mcm_webhook::self_managed::run(
        sandbox.client(),
        settings,
        store.clone(),
    ));
    // Wait (bounded) for the loop to win the Lease and load a certificate; the bound only turns
    // a hang into a failure, it does not measure speed.
    for _ in 0..600 {
        if store.is_loaded() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        store.is_loaded(),
        "the only replica must become leader and issue a certificate"
    );
    let secrets: Api<Secret> = Api::namespaced(sandbox.client(), "default");
    assert!(from_secret(&secrets.get("loop-certs").await.unwrap()).is_ok());
    task.abort();
}
