//! Admission webhooks: a local HTTPS webhook (self-signed CA, `caBundle`) registered through
//! Validating/MutatingWebhookConfigurations; denial messages, mutations, failure policies,
//! selectors, dryRun and warnings.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ApiResource, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::ObjectMeta;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls_pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::common::{
    EVENTUALLY, Target, api_error, configmap, raw, wait_crd_established, wait_for,
};

const DENY_LABEL: &str = "conformance/deny";
const MUTATED_LABEL: &str = "conformance/mutated";
const WEBHOOK_NS_LABEL: &str = "conformance/webhooks";
const DENY_MESSAGE: &str = "denied by conformance test";
const WARNING: &str = "conformance warning: checked by validator";

/// A running test webhook server and the AdmissionReview requests it received.
struct Webhook {
    addr: SocketAddr,
    ca_bundle: String,
    requests: Arc<Mutex<Vec<Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Webhook {
    fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    fn requests(&self, path: &str) -> Vec<Value> {
        self.requests
            .lock()
            .expect("requests lock")
            .iter()
            .filter(|r| r["path"] == path)
            .map(|r| r["request"].clone())
            .collect()
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Clone)]
struct HookState {
    requests: Arc<Mutex<Vec<Value>>>,
}

fn review_response(request: &Value, response: Value) -> axum::Json<Value> {
    let mut response = response;
    response["uid"] = request["uid"].clone();
    axum::Json(
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}),
    )
}

async fn validate(
    State(state): State<HookState>,
    axum::Json(review): axum::Json<Value>,
) -> axum::Json<Value> {
    let request = review["request"].clone();
    state
        .requests
        .lock()
        .expect("lock")
        .push(json!({"path": "/validate", "request": request}));
    let object = if request["operation"] == "DELETE" {
        &request["oldObject"]
    } else {
        &request["object"]
    };
    match object["metadata"]["labels"][DENY_LABEL].as_str() {
        Some("nocode") => review_response(
            &request,
            json!({"allowed": false, "status": {"message": DENY_MESSAGE}}),
        ),
        Some(_) => review_response(
            &request,
            json!({"allowed": false, "status": {"code": 403, "reason": "Forbidden", "message": DENY_MESSAGE}}),
        ),
        None => review_response(&request, json!({"allowed": true, "warnings": [WARNING]})),
    }
}

async fn mutate(
    State(state): State<HookState>,
    axum::Json(review): axum::Json<Value>,
) -> axum::Json<Value> {
    let request = review["request"].clone();
    state
        .requests
        .lock()
        .expect("lock")
        .push(json!({"path": "/mutate", "request": request}));
    let patch = if request["object"]["metadata"]["labels"].is_object() {
        json!([{"op": "add", "path": "/metadata/labels/conformance~1mutated", "value": "true"}])
    } else {
        json!([{"op": "add", "path": "/metadata/labels", "value": {MUTATED_LABEL: "true"}}])
    };
    review_response(
        &request,
        json!({"allowed": true, "patchType": "JSONPatch", "patch": BASE64.encode(patch.to_string())}),
    )
}

/// Converts Gadgets between v1 (`spec.size`) and v1beta1 (`spec.dimension`).
async fn convert(
    State(state): State<HookState>,
    axum::Json(review): axum::Json<Value>,
) -> axum::Json<Value> {
    let request = review["request"].clone();
    state
        .requests
        .lock()
        .expect("lock")
        .push(json!({"path": "/convert", "request": request}));
    let desired = request["desiredAPIVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (from, to) = if desired.ends_with("/v1beta1") {
        ("size", "dimension")
    } else {
        ("dimension", "size")
    };
    let converted: Vec<Value> = request["objects"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|mut o| {
            if let Some(value) = o["spec"].as_object_mut().and_then(|spec| spec.remove(from)) {
                o["spec"][to] = value;
            }
            o["apiVersion"] = json!(desired);
            o
        })
        .collect();
    axum::Json(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "response": {"uid": request["uid"], "convertedObjects": converted, "result": {"status": "Success"}}
    }))
}

/// Starts an HTTPS webhook on 127.0.0.1 with a fresh CA; `ca_bundle` is that CA (base64 PEM).
async fn start_webhook() -> Webhook {
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "conformance webhook CA");
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).expect("CA certificate");
    let leaf_key = KeyPair::generate().expect("serving key");
    let mut leaf_params =
        CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .expect("serving params");
    leaf_params
        .distinguished_name
        .push(DnType::CommonName, "127.0.0.1");
    let leaf = leaf_params
        .signed_by(&leaf_key, &*ca)
        .expect("serving certificate");
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone()], key)
        .expect("rustls server config");
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let app = Router::new()
        .route("/validate", post(validate))
        .route("/mutate", post(mutate))
        .route("/convert", post(convert))
        .with_state(HookState {
            requests: requests.clone(),
        });
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind webhook");
    let addr = listener.local_addr().expect("webhook addr");
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            let app = app.clone();
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), TowerToHyperService::new(app))
                        .await;
                }
            });
        }
    });
    Webhook {
        addr,
        ca_bundle: BASE64.encode(ca.pem()),
        requests,
        task,
    }
}

/// A free local port with nothing listening (for an unreachable webhook).
async fn dead_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    format!("https://{addr}/validate")
}

fn webhook_entry(
    name: &str,
    url: &str,
    ca_bundle: &str,
    failure_policy: &str,
    object_selector: Value,
) -> Value {
    json!({
        "name": name,
        "clientConfig": {"url": url, "caBundle": ca_bundle},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE", "DELETE"],
                   "resources": ["configmaps"], "scope": "Namespaced"}],
        "namespaceSelector": {"matchLabels": {WEBHOOK_NS_LABEL: "on"}},
        "objectSelector": object_selector,
        "failurePolicy": failure_policy,
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 5
    })
}

async fn enable_webhooks_in(t: &Target, ns: &str) {
    let namespaces: Api<Namespace> = Api::all(t.client.clone());
    namespaces
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {WEBHOOK_NS_LABEL: "on"}}})),
        )
        .await
        .expect("label namespace for webhooks");
}

async fn register_validating(t: &Target, webhooks: Vec<Value>) -> String {
    let name = t.cluster_name("validating");
    let api: Api<ValidatingWebhookConfiguration> = Api::all(t.client.clone());
    let config: ValidatingWebhookConfiguration =
        serde_json::from_value(json!({"metadata": {"name": name}, "webhooks": webhooks}))
            .expect("vwc literal");
    api.create(&PostParams::default(), &config)
        .await
        .expect("create ValidatingWebhookConfiguration");
    t.delete_at_end(
        ApiResource::erase::<ValidatingWebhookConfiguration>(&()),
        &name,
    );
    name
}

async fn register_mutating(t: &Target, webhooks: Vec<Value>) -> String {
    let name = t.cluster_name("mutating");
    let api: Api<MutatingWebhookConfiguration> = Api::all(t.client.clone());
    let webhooks: Vec<Value> = webhooks
        .into_iter()
        .map(|mut w| {
            w["reinvocationPolicy"] = json!("Never");
            w
        })
        .collect();
    let config: MutatingWebhookConfiguration =
        serde_json::from_value(json!({"metadata": {"name": name}, "webhooks": webhooks}))
            .expect("mwc literal");
    api.create(&PostParams::default(), &config)
        .await
        .expect("create MutatingWebhookConfiguration");
    t.delete_at_end(
        ApiResource::erase::<MutatingWebhookConfiguration>(&()),
        &name,
    );
    name
}

/// Waits until a create of a probe object is denied (webhook configurations take effect
/// asynchronously in kube-apiserver).
async fn wait_until_denying(cms: &Api<ConfigMap>) {
    wait_for("validating webhook becomes active", EVENTUALLY, || {
        let cms = cms.clone();
        async move {
            let probe = configmap("probe", &[(DENY_LABEL, "yes")], &[]);
            match cms.create(&PostParams::default(), &probe).await {
                Err(kube::Error::Api(s)) if s.message.contains(DENY_MESSAGE) => Some(()),
                Ok(_) => {
                    let _ = cms.delete("probe", &DeleteParams::default()).await;
                    None
                }
                Err(_) => None,
            }
        }
    })
    .await;
}

/// The webhooks of these tests listen on this host's loopback: an API server elsewhere cannot
/// call them.
fn skip_on_real_cluster(t: &Target, test: &str) -> bool {
    if t.reaches_this_host() {
        return false;
    }
    eprintln!(
        "SKIPPED (real cluster): {test}: a remote API server cannot reach a webhook on this host"
    );
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validating_webhook_denial_message_and_code() {
    let t = Target::sandbox_or_env().await;
    if skip_on_real_cluster(&t, "validating_webhook_denial_message_and_code") {
        return t.finish().await;
    }
    let hook = start_webhook().await;
    enable_webhooks_in(&t, &t.ns).await;
    register_validating(
        &t,
        vec![webhook_entry(
            "deny.conformance.example.com",
            &hook.url("/validate"),
            &hook.ca_bundle,
            "Fail",
            json!({}),
        )],
    )
    .await;
    let cms = t.api::<ConfigMap>();
    wait_until_denying(&cms).await;

    let err = api_error(
        cms.create(
            &PostParams::default(),
            &configmap("x", &[(DENY_LABEL, "yes")], &[]),
        )
        .await,
        "denied create",
    );
    assert_eq!(
        err.code, 403,
        "the webhook's status code is passed through: {err:?}"
    );
    assert_eq!(
        err.message,
        format!(
            "admission webhook \"deny.conformance.example.com\" denied the request: {DENY_MESSAGE}"
        ),
        "kube-apiserver denial message format"
    );
    let err = api_error(
        cms.create(
            &PostParams::default(),
            &configmap("y", &[(DENY_LABEL, "nocode")], &[]),
        )
        .await,
        "denied without code",
    );
    assert_eq!(
        err.code, 400,
        "a denial without a code (or below 400) becomes 400: {err:?}"
    );
    assert!(
        err.message
            .starts_with("admission webhook \"deny.conformance.example.com\" denied the request")
    );
    cms.create(&PostParams::default(), &configmap("ok", &[], &[]))
        .await
        .expect("allowed create");
    let err = api_error(
        cms.patch(
            "ok",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {DENY_LABEL: "yes"}}})),
        )
        .await,
        "denied update",
    );
    assert_eq!(err.code, 403, "updates go through the webhook too: {err:?}");
    assert!(
        cms.get("ok")
            .await
            .expect("get")
            .metadata
            .labels
            .is_none_or(|l| !l.contains_key(DENY_LABEL))
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutating_webhook_patch_is_applied_before_validation() {
    let t = Target::sandbox_or_env().await;
    if skip_on_real_cluster(&t, "mutating_webhook_patch_is_applied_before_validation") {
        return t.finish().await;
    }
    let hook = start_webhook().await;
    enable_webhooks_in(&t, &t.ns).await;
    register_mutating(
        &t,
        vec![webhook_entry(
            "mutate.conformance.example.com",
            &hook.url("/mutate"),
            &hook.ca_bundle,
            "Fail",
            json!({}),
        )],
    )
    .await;
    register_validating(
        &t,
        vec![webhook_entry(
            "deny.conformance.example.com",
            &hook.url("/validate"),
            &hook.ca_bundle,
            "Fail",
            json!({}),
        )],
    )
    .await;
    let cms = t.api::<ConfigMap>();
    wait_until_denying(&cms).await;
    let created = cms
        .create(&PostParams::default(), &configmap("m1", &[], &[]))
        .await
        .expect("create");
    assert_eq!(
        created
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(MUTATED_LABEL))
            .map(String::as_str),
        Some("true"),
        "the mutating webhook's JSONPatch is applied to the created object"
    );
    let created = cms
        .create(&PostParams::default(), &configmap("m2", &[("a", "b")], &[]))
        .await
        .expect("create");
    let labels = created.metadata.labels.unwrap_or_default();
    assert_eq!(
        (
            labels.get("a").map(String::as_str),
            labels.get(MUTATED_LABEL).map(String::as_str)
        ),
        (Some("b"), Some("true"))
    );
    let stored = cms.get("m2").await.expect("get");
    assert!(
        stored
            .metadata
            .labels
            .is_some_and(|l| l.contains_key(MUTATED_LABEL)),
        "the mutation is stored"
    );
    let validated = hook.requests("/validate");
    let seen_m2 = validated
        .iter()
        .find(|r| r["name"] == "m2" && r["operation"] == "CREATE")
        .expect("validating webhook saw m2");
    assert_eq!(
        seen_m2["object"]["metadata"]["labels"][MUTATED_LABEL], "true",
        "validating webhooks run after mutation and see the mutated object"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_policy_fail_vs_ignore_with_unreachable_webhook() {
    let t = Target::sandbox_or_env().await;
    if skip_on_real_cluster(&t, "failure_policy_fail_vs_ignore_with_unreachable_webhook") {
        return t.finish().await;
    }
    let hook = start_webhook().await;
    enable_webhooks_in(&t, &t.ns).await;
    let dead = dead_url().await;
    register_validating(
        &t,
        vec![
            webhook_entry(
                "fail.conformance.example.com",
                &dead,
                &hook.ca_bundle,
                "Fail",
                json!({"matchLabels": {"policy": "fail"}}),
            ),
            webhook_entry(
                "ignore.conformance.example.com",
                &dead,
                &hook.ca_bundle,
                "Ignore",
                json!({"matchLabels": {"policy": "ignore"}}),
            ),
        ],
    )
    .await;
    let cms = t.api::<ConfigMap>();
    let err = wait_for("Fail policy webhook is active", EVENTUALLY, || {
        let cms = cms.clone();
        async move {
            match cms
                .create(
                    &PostParams::default(),
                    &configmap("f", &[("policy", "fail")], &[]),
                )
                .await
            {
                Err(kube::Error::Api(s)) => Some(*s),
                Ok(_) => {
                    let _ = cms.delete("f", &DeleteParams::default()).await;
                    None
                }
                Err(_) => None,
            }
        }
    })
    .await;
    assert_eq!(
        (err.code, err.reason.as_str()),
        (500, "InternalError"),
        "unreachable webhook with Fail: {err:?}"
    );
    assert!(
        err.message.starts_with(
            "Internal error occurred: failed calling webhook \"fail.conformance.example.com\""
        ),
        "kube message: {}",
        err.message
    );
    cms.create(
        &PostParams::default(),
        &configmap("i", &[("policy", "ignore")], &[]),
    )
    .await
    .expect("unreachable webhook with failurePolicy Ignore lets the request through");
    cms.create(&PostParams::default(), &configmap("n", &[], &[]))
        .await
        .expect("objects outside both objectSelectors are not sent to either webhook");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_and_object_selectors_scope_webhook_calls() {
    let t = Target::sandbox_or_env().await;
    if skip_on_real_cluster(&t, "namespace_and_object_selectors_scope_webhook_calls") {
        return t.finish().await;
    }
    let hook = start_webhook().await;
    enable_webhooks_in(&t, &t.ns).await;
    register_validating(
        &t,
        vec![webhook_entry(
            "deny.conformance.example.com",
            &hook.url("/validate"),
            &hook.ca_bundle,
            "Fail",
            json!({"matchExpressions": [{"key": "skip-webhook", "operator": "DoesNotExist"}]}),
        )],
    )
    .await;
    let cms = t.api::<ConfigMap>();
    wait_until_denying(&cms).await;
    cms.create(
        &PostParams::default(),
        &configmap(
            "skipped",
            &[(DENY_LABEL, "yes"), ("skip-webhook", "1")],
            &[],
        ),
    )
    .await
    .expect("objectSelector excludes this object: the webhook is not called");
    assert!(
        hook.requests("/validate")
            .iter()
            .all(|r| r["name"] != "skipped"),
        "the webhook never saw the excluded object"
    );
    let other = t.cluster_name("plain");
    let namespaces: Api<Namespace> = Api::all(t.client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(other.clone()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .expect("create unlabelled namespace");
    let other_cms: Api<ConfigMap> = Api::namespaced(t.client.clone(), &other);
    other_cms
        .create(
            &PostParams::default(),
            &configmap("elsewhere", &[(DENY_LABEL, "yes")], &[]),
        )
        .await
        .expect("namespaceSelector excludes the namespace: the webhook is not called");
    assert!(
        hook.requests("/validate")
            .iter()
            .all(|r| r["name"] != "elsewhere")
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_review_carries_operation_objects_and_dry_run() {
    let t = Target::sandbox_or_env().await;
    if skip_on_real_cluster(&t, "admission_review_carries_operation_objects_and_dry_run") {
        return t.finish().await;
    }
    let hook = start_webhook().await;
    enable_webhooks_in(&t, &t.ns).await;
    register_validating(
        &t,
        vec![webhook_entry(
            "deny.conformance.example.com",
            &hook.url("/validate"),
            &hook.ca_bundle,
            "Fail",
            json!({}),
        )],
    )
    .await;
    let cms = t.api::<ConfigMap>();
    wait_until_denying(&cms).await;
    cms.create(
        &PostParams {
            dry_run: true,
            ..Default::default()
        },
        &configmap("dry", &[], &[]),
    )
    .await
    .expect("dry-run create");
    assert!(
        matches!(cms.get("dry").await, Err(kube::Error::Api(s)) if s.code == 404),
        "dry run stores nothing"
    );
    cms.create(
        &PostParams::default(),
        &configmap("real", &[], &[("v", "1")]),
    )
    .await
    .expect("create");
    cms.patch(
        "real",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "2"}})),
    )
    .await
    .expect("update");
    cms.delete("real", &DeleteParams::default())
        .await
        .expect("delete");

    let requests = hook.requests("/validate");
    let find = |name: &str, op: &str| {
        requests
            .iter()
            .find(|r| r["name"] == name && r["operation"] == op)
            .unwrap_or_else(|| panic!("webhook received {op} of {name}; got {requests:?}"))
            .clone()
    };
    let dry = find("dry", "CREATE");
    assert_eq!(
        dry["dryRun"], true,
        "dryRun=All reaches the webhook as request.dryRun=true"
    );
    let create = find("real", "CREATE");
    assert_eq!(create["dryRun"], false);
    assert!(
        create["uid"].as_str().is_some_and(|u| !u.is_empty()),
        "request.uid is set"
    );
    assert_eq!(
        create["kind"],
        json!({"group": "", "version": "v1", "kind": "ConfigMap"})
    );
    assert_eq!(
        create["resource"],
        json!({"group": "", "version": "v1", "resource": "configmaps"})
    );
    assert_eq!(create["namespace"], t.ns.as_str());
    assert_eq!(create["object"]["data"]["v"], "1");
    assert!(create["oldObject"].is_null(), "CREATE has no oldObject");
    assert_eq!(create["options"]["kind"], "CreateOptions");
    assert!(
        create["userInfo"]["username"]
            .as_str()
            .is_some_and(|u| !u.is_empty()),
        "userInfo.username is set"
    );
    let update = find("real", "UPDATE");
    assert_eq!(
        update["oldObject"]["data"]["v"], "1",
        "UPDATE carries oldObject"
    );
    assert_eq!(update["object"]["data"]["v"], "2");
    assert_eq!(update["options"]["kind"], "UpdateOptions");
    let delete = find("real", "DELETE");
    assert!(delete["object"].is_null(), "DELETE has no object");
    assert_eq!(
        delete["oldObject"]["metadata"]["name"], "real",
        "DELETE carries oldObject"
    );
    assert_eq!(delete["options"]["kind"], "DeleteOptions");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_warnings_are_returned_as_warning_headers() {
    let t = Target::sandbox_or_env().await;
    if skip_on_real_cluster(&t, "webhook_warnings_are_returned_as_warning_headers") {
        return t.finish().await;
    }
    let hook = start_webhook().await;
    enable_webhooks_in(&t, &t.ns).await;
    register_validating(
        &t,
        vec![webhook_entry(
            "deny.conformance.example.com",
            &hook.url("/validate"),
            &hook.ca_bundle,
            "Fail",
            json!({}),
        )],
    )
    .await;
    wait_until_denying(&t.api::<ConfigMap>()).await;
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "warned"}});
    let response = raw(
        &t.client,
        "POST",
        &format!("/api/v1/namespaces/{}/configmaps", t.ns),
        &[("content-type", "application/json")],
        body.to_string().into_bytes(),
    )
    .await;
    assert_eq!(
        response.status,
        201,
        "allowed create: {}",
        String::from_utf8_lossy(&response.body)
    );
    let warnings: Vec<String> = response
        .headers
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_string))
        .collect();
    assert!(
        warnings.contains(&format!("299 - \"{WARNING}\"")),
        "webhook warnings are sent as `Warning: 299 - \"<text>\"` headers: {warnings:?}"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversion_webhook_converts_between_versions() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{DynamicObject, ListParams};
    let t = Target::sandbox_or_env().await;
    if skip_on_real_cluster(&t, "conversion_webhook_converts_between_versions") {
        return t.finish().await;
    }
    let hook = start_webhook().await;
    let group = format!("{}.conversion.example.com", t.ns);
    let schema = |field: &str| {
        json!({"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "properties": {field: {"type": "string"}}}}}})
    };
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": format!("gadgets.{group}")},
        "spec": {
            "group": group,
            "names": {"kind": "Gadget", "listKind": "GadgetList", "plural": "gadgets", "singular": "gadget"},
            "scope": "Namespaced",
            "conversion": {"strategy": "Webhook", "webhook": {
                "clientConfig": {"url": hook.url("/convert"), "caBundle": hook.ca_bundle},
                "conversionReviewVersions": ["v1"]}},
            "versions": [
                {"name": "v1", "served": true, "storage": true, "schema": schema("size")},
                {"name": "v1beta1", "served": true, "storage": false, "schema": schema("dimension")}
            ]
        }
    }))
    .expect("gadget CRD literal");
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("create CRD with conversion webhook");
    t.delete_at_end(
        ApiResource::erase::<CustomResourceDefinition>(&()),
        &format!("gadgets.{group}"),
    );
    wait_crd_established(&t.client, &format!("gadgets.{group}")).await;
    let resource = |version: &str| ApiResource {
        group: group.clone(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: "Gadget".into(),
        plural: "gadgets".into(),
    };
    let (v1, beta) = (resource("v1"), resource("v1beta1"));
    let api_v1 = t.dyn_api(&v1);
    let api_beta = t.dyn_api(&beta);
    let gadget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": beta.api_version, "kind": "Gadget", "metadata": {"name": "g1"}, "spec": {"dimension": "large"}
    }))
    .expect("gadget literal");
    let created = wait_for("the v1beta1 endpoint is served", EVENTUALLY, || {
        let api_beta = api_beta.clone();
        let gadget = gadget.clone();
        async move { api_beta.create(&PostParams::default(), &gadget).await.ok() }
    })
    .await;
    assert_eq!(
        created.data["spec"]["dimension"], "large",
        "the response is in the requested version"
    );
    let stored = api_v1
        .get("g1")
        .await
        .expect("get through the storage version");
    assert_eq!(
        stored.data["spec"]["size"], "large",
        "the webhook converted v1beta1 to v1 for storage"
    );
    assert!(
        stored.data["spec"].get("dimension").is_none(),
        "{:?}",
        stored.data
    );
    let back = api_beta.get("g1").await.expect("get through v1beta1");
    assert_eq!(back.data["spec"]["dimension"], "large");
    assert_eq!(
        back.types.map(|t| t.api_version),
        Some(beta.api_version.clone())
    );
    let listed = api_beta
        .list(&ListParams::default())
        .await
        .expect("list through v1beta1");
    assert_eq!(
        listed.items[0].data["spec"]["dimension"], "large",
        "lists are converted too"
    );
    let reviews = hook.requests("/convert");
    assert!(
        reviews
            .iter()
            .any(|r| r["desiredAPIVersion"] == v1.api_version.as_str()),
        "ConversionReview to v1 was sent: {reviews:?}"
    );
    assert!(
        reviews
            .iter()
            .any(|r| r["desiredAPIVersion"] == beta.api_version.as_str()),
        "ConversionReview to v1beta1 was sent"
    );
    assert!(
        reviews
            .iter()
            .all(|r| r["uid"].as_str().is_some_and(|u| !u.is_empty())),
        "each review has a uid"
    );
    t.finish().await;
}
