//! What a sandbox system installs before its processes start: namespaces, the components'
//! ServiceAccounts and token kubeconfigs, the CRDs and both webhook configurations; and the wait
//! for the webhook's CA in the CRDs.

use std::path::Path;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use super::{KINDS, WEBHOOK_CONFIGURATION, WEBHOOK_NAMESPACE, WEBHOOK_SERVICE};
use crate::error::{E2eError, Result};
use crate::wait::{Probe, eventually};

pub(super) async fn create_namespace(client: &kube::Client, name: &str) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))
        .map_err(E2eError::decode("a Namespace"))?;
    match namespaces.create(&PostParams::default(), &namespace).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(E2eError::kube(format!("create namespace {name}"))(e)),
    }
}

/// Runs scripts/sandbox-identities.sh: ServiceAccounts of the manager, the webhook and
/// provider-virtual bound to the chart's rendered RBAC (release namespace [`WEBHOOK_NAMESPACE`],
/// control namespace `namespace`), with token kubeconfigs in `out`.
pub(super) async fn create_identities(
    admin: &Path,
    out: &Path,
    namespace: &str,
    logs: &Path,
) -> Result<()> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/sandbox-identities.sh");
    let output = tokio::process::Command::new(&script)
        .arg(admin)
        .arg(out)
        .arg(WEBHOOK_NAMESPACE)
        .arg(namespace)
        .output()
        .await
        .map_err(E2eError::io("run", &script))?;
    let log = logs.join("identities.log");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::write(&log, &text).map_err(E2eError::io("write", &log))?;
    if !output.status.success() {
        return Err(E2eError::Assertion(format!(
            "{} failed: {text}",
            script.display()
        )));
    }
    Ok(())
}

/// The CRDs with `v1beta1` served through the conversion webhook by Service reference, as the
/// chart configures them (the sandbox resolves the Service to the local webhook port); the
/// webhook injects the caBundle. Without `serve_v1beta1`, the v1alpha1-only CRDs.
pub(super) async fn install_crds(
    client: &kube::Client,
    serve_v1beta1: bool,
    webhook_url: Option<&str>,
) -> Result<()> {
    let service = mcm_api::crd::ConversionWebhook {
        service_namespace: WEBHOOK_NAMESPACE.to_owned(),
        service_name: WEBHOOK_SERVICE.to_owned(),
        path: "/convert".to_owned(),
        port: None,
        ca_bundle: None,
    };
    let crds = if serve_v1beta1 {
        mcm_api::crd::all_with_conversion(&service)
    } else {
        mcm_api::crd::all()
    };
    let crds = crds.map_err(|e| E2eError::Decode {
        what: "the CRDs of mcm_api::crd".to_owned(),
        message: e.to_string(),
    })?;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (file, mut crd) in crds {
        if let (Some(url), Some(config)) = (
            webhook_url,
            crd.spec
                .conversion
                .as_mut()
                .and_then(|c| c.webhook.as_mut())
                .and_then(|w| w.client_config.as_mut()),
        ) {
            config.service = None;
            config.url = Some(format!("{url}/convert"));
        }
        api.create(&PostParams::default(), &crd)
            .await
            .map_err(E2eError::kube(format!("create CRD {file}")))?;
    }
    for (_, plural) in KINDS {
        let name = format!("{plural}.machine.sapcloud.io");
        let api = api.clone();
        eventually(&format!("CRD {name} Established"), 60, || {
            let api = api.clone();
            let name = name.clone();
            async move {
                let crd = api
                    .get(&name)
                    .await
                    .map_err(E2eError::kube(format!("get CRD {name}")))?;
                let established = crd
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                Ok(if established {
                    Probe::Done(())
                } else {
                    Probe::Waiting("not Established".to_owned())
                })
            }
        })
        .await?;
    }
    Ok(())
}

pub(super) async fn install_webhook_configurations(
    client: &kube::Client,
    webhook_url: Option<&str>,
) -> Result<()> {
    let entries = |action: &str| -> Vec<Value> {
        KINDS
            .iter()
            .map(|(kind, plural)| {
                json!({
                    "name": format!("{action}-{kind}.machine.sapcloud.io"),
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Fail",
                    "matchPolicy": "Equivalent",
                    "timeoutSeconds": 10,
                    "clientConfig": match webhook_url {
                        Some(url) => json!({"url": format!("{url}/{action}-machine-sapcloud-io-{kind}")}),
                        None => json!({"service": {
                            "namespace": WEBHOOK_NAMESPACE,
                            "name": WEBHOOK_SERVICE,
                            "path": format!("/{action}-machine-sapcloud-io-{kind}"),
                            "port": 443,
                        }}),
                    },
                    "rules": [{
                        "apiGroups": ["machine.sapcloud.io"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": [plural],
                        "scope": "Namespaced"
                    }]
                })
            })
            .collect()
    };
    let mutating: k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration =
        serde_json::from_value(json!({
            "metadata": {"name": WEBHOOK_CONFIGURATION},
            "webhooks": entries("mutate"),
        }))
        .map_err(E2eError::decode("the MutatingWebhookConfiguration"))?;
    let validating: k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration =
        serde_json::from_value(json!({
            "metadata": {"name": WEBHOOK_CONFIGURATION},
            "webhooks": entries("validate"),
        }))
        .map_err(E2eError::decode("the ValidatingWebhookConfiguration"))?;
    Api::all(client.clone())
        .create(&PostParams::default(), &mutating)
        .await
        .map_err(E2eError::kube("create the MutatingWebhookConfiguration"))?;
    Api::all(client.clone())
        .create(&PostParams::default(), &validating)
        .await
        .map_err(E2eError::kube("create the ValidatingWebhookConfiguration"))?;
    Ok(())
}

/// Waits until every CRD's conversion webhook has a caBundle (written by the webhook).
pub(super) async fn wait_ca_injected(client: &kube::Client) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    eventually("the webhook injected its CA into the CRDs", 60, || {
        let api = api.clone();
        async move {
            let mut missing = Vec::new();
            for (_, plural) in KINDS {
                let name = format!("{plural}.machine.sapcloud.io");
                let crd = api
                    .get(&name)
                    .await
                    .map_err(E2eError::kube(format!("get CRD {name}")))?;
                let injected = crd
                    .spec
                    .conversion
                    .and_then(|c| c.webhook)
                    .and_then(|w| w.client_config)
                    .and_then(|c| c.ca_bundle)
                    .is_some_and(|b| !b.0.is_empty());
                if !injected {
                    missing.push(name);
                }
            }
            Ok(if missing.is_empty() {
                Probe::Done(())
            } else {
                Probe::Waiting(format!("no caBundle in {missing:?}"))
            })
        }
    })
    .await
}
