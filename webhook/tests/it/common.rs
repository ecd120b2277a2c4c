//! Shared helpers: crypto provider, review bodies, router calls, valid base objects.

use std::sync::{Arc, Once};

use axum::body::Body;
use http_body_util::BodyExt;
use mcm_webhook::server::{self, AppState};
use mcm_webhook::tls::CertStore;
use serde_json::{Value, json};
use tower::ServiceExt;

static PROVIDER: Once = Once::new();

/// Installs ring as the process-wide rustls provider (once per test binary).
pub fn install_provider() {
    PROVIDER.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

pub fn state() -> Arc<AppState> {
    AppState::new(Arc::new(CertStore::default()))
}

/// A certificate store serving a certificate for `dns_name` issued by a new CA named `ca_name`;
/// returns the store and the CA certificate (PEM) clients must trust.
pub fn serving_certificate(ca_name: &str, dns_name: &str) -> (Arc<CertStore>, String) {
    install_provider();
    let names = vec![dns_name.to_owned()];
    let certs = mcm_webhook::self_managed::rotate(
        None,
        jiff::Timestamp::now(),
        &mcm_webhook::self_managed::Policy::default(),
        ca_name,
        &names,
    )
    .unwrap();
    let store = Arc::new(CertStore::default());
    store
        .set_pem(certs.tls_cert.as_bytes(), certs.tls_key.as_bytes())
        .unwrap();
    (store, certs.ca_cert)
}

/// A TLS client configuration trusting only the CAs in `ca_pem`, offering h2 and http/1.1.
pub fn client_config(ca_pem: &str) -> Result<rustls::ClientConfig, String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// POSTs `body` to `path` of the webhook router and returns the status and JSON answer.
pub async fn post(state: &Arc<AppState>, path: &str, body: Vec<u8>) -> (u16, Value) {
    let request = http::Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    let response = server::router(state.clone())
        .oneshot(request)
        .await
        .unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

pub async fn get_admin(state: &Arc<AppState>, path: &str) -> (u16, String) {
    let request = http::Request::get(path).body(Body::empty()).unwrap();
    let response = server::admin_router(state.clone())
        .oneshot(request)
        .await
        .unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// An AdmissionReview request body.
pub fn admission_review(
    kind: &str,
    version: &str,
    operation: &str,
    object: &Value,
    old: Option<&Value>,
    dry_run: bool,
) -> Vec<u8> {
    let mut request = json!({
        "uid": "e911857d-c318-11e8-bbad-025000000001",
        "kind": { "group": "machine.sapcloud.io", "version": version, "kind": kind },
        "resource": { "group": "machine.sapcloud.io", "version": version, "resource": format!("{}s", kind.to_lowercase()) },
        "name": object.pointer("/metadata/name").cloned().unwrap_or(json!("")),
        "namespace": "shoot--a",
        "operation": operation,
        "userInfo": { "username": "alice" },
        "object": object,
        "dryRun": dry_run,
    });
    if let Some(old) = old {
        request["oldObject"] = old.clone();
    }
    serde_json::to_vec(&json!({ "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request }))
        .unwrap()
}

pub fn machine_deployment() -> Value {
    json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineDeployment",
        "metadata": { "name": "md-a", "namespace": "shoot--a" },
        "spec": {
            "replicas": 2,
            "selector": { "matchLabels": { "pool": "a" } },
            "strategy": { "type": "RollingUpdate", "rollingUpdate": { "maxSurge": 1, "maxUnavailable": 0 } },
            "template": {
                "metadata": { "labels": { "pool": "a" } },
                "spec": {
                    "class": { "kind": "MachineClass", "name": "class-a" },
                    "drainTimeout": "2h0m0s",
                    "nodeTemplate": { "spec": { "taints": [{ "key": "dedicated", "value": "a", "effect": "NoSchedule" }] } },
                },
            },
        },
    })
}

pub fn machine_set() -> Value {
    json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineSet",
        "metadata": { "name": "ms-a", "namespace": "shoot--a" },
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": { "pool": "a" } },
            "template": {
                "metadata": { "labels": { "pool": "a" } },
                "spec": { "class": { "kind": "MachineClass", "name": "class-a" } },
            },
        },
    })
}

pub fn machine() -> Value {
    json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {
            "name": "m-a", "namespace": "shoot--a",
            "ownerReferences": [{ "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet", "name": "ms-a", "uid": "u", "controller": true }],
        },
        "spec": { "class": { "kind": "MachineClass", "name": "class-a" }, "providerID": "aws:///eu-west-1a/i-1" },
    })
}

pub fn machine_class() -> Value {
    json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineClass",
        "metadata": { "name": "class-a", "namespace": "shoot--a" },
        "provider": "AWS",
        "providerSpec": { "machineType": "m5.large" },
        "secretRef": { "name": "s", "namespace": "shoot--a" },
        "nodeTemplate": { "capacity": { "cpu": "2", "memory": "8Gi" }, "instanceType": "m5.large", "region": "eu-west-1", "zone": "eu-west-1a" },
    })
}

/// Sets (or with `Value::Null` removes) the member at a JSON pointer, creating parents.
pub fn set(object: &mut Value, pointer: &str, value: Value) {
    let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    let (last, parents) = parts.split_last().unwrap();
    let mut current = object;
    for part in parents {
        current = match current {
            Value::Array(items) => &mut items[part.parse::<usize>().unwrap()],
            other => other
                .as_object_mut()
                .unwrap()
                .entry(part.replace("~1", "/"))
                .or_insert_with(|| json!({})),
        };
    }
    let map = current.as_object_mut().unwrap();
    let key = last.replace("~1", "/");
    if value.is_null() {
        map.remove(&key);
    } else {
        map.insert(key, value);
    }
}

/// `(field, reason)` of every cause of a denial.
pub fn causes(answer: &Value) -> Vec<(String, String)> {
    answer
        .pointer("/response/status/details/causes")
        .and_then(Value::as_array)
        .map(|causes| {
            causes
                .iter()
                .map(|c| {
                    (
                        c["field"].as_str().unwrap_or_default().to_owned(),
                        c["reason"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}
