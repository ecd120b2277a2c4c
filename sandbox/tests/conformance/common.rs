//! Shared helpers: the per-test target (sandbox or real cluster), error extraction, polling,
//! raw HTTP requests and the CRDs the tests install.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ObjectMeta, Status};
use kube::{Client, Config};
use mcm_sandbox::{Sandbox, SandboxConfig};
use serde_json::{Value, json};

/// Environment variable naming a kubeconfig of a real cluster to run the suite against.
pub const REAL_CLUSTER_ENV: &str = "SANDBOX_CONFORMANCE_KUBECONFIG";

/// Generous bound for eventual conditions (GC, controllers, watches). Not a performance target.
pub const EVENTUALLY: Duration = Duration::from_secs(20);

/// Installs the ring crypto provider once per test binary (rustls panics without one when two
/// providers could be compiled in).
pub fn install_crypto() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Returns a short string unique within this process run (and very likely across runs).
pub fn unique_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{:x}{:x}{n}", std::process::id() % 0xfff, nanos % 0xfffff)
}

/// The API server one test talks to: a fresh sandbox, or the real cluster from
/// [`REAL_CLUSTER_ENV`], plus a namespace created for this test.
pub struct Target {
    /// Client for the target.
    pub client: Client,
    /// A namespace created for this test (unique per test).
    pub ns: String,
    /// Kubeconfig file that reaches the target (for kubectl).
    pub kubeconfig: PathBuf,
    sandbox: Option<Sandbox>,
    cluster_scoped: Mutex<Vec<(ApiResource, String)>>,
}

impl Target {
    /// A fresh sandbox with the default configuration, or the real cluster when configured.
    pub async fn sandbox_or_env() -> Target {
        Self::with_config(SandboxConfig::default()).await
    }

    /// A fresh sandbox built from `config`, or the real cluster (which ignores `config`).
    pub async fn with_config(config: SandboxConfig) -> Target {
        install_crypto();
        let (kubeconfig, sandbox) = match std::env::var_os(REAL_CLUSTER_ENV) {
            Some(path) => (PathBuf::from(path), None),
            None => {
                let sb = Sandbox::start(config)
                    .await
                    .expect("Sandbox::start succeeds");
                (sb.kubeconfig_path().to_path_buf(), Some(sb))
            }
        };
        let client = client_from_kubeconfig(&kubeconfig).await;
        let ns = format!("conf-{}", unique_suffix());
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(ns.clone()),
                labels: Some(
                    [(
                        "conformance.mcm.gardener.cloud/test".to_string(),
                        "true".to_string(),
                    )]
                    .into(),
                ),
                ..Default::default()
            },
            ..Default::default()
        };
        namespaces
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap_or_else(|e| panic!("creating test namespace {ns}: {e}"));
        Target {
            client,
            ns,
            kubeconfig,
            sandbox,
            cluster_scoped: Mutex::new(Vec::new()),
        }
    }

    /// True when running against a real cluster.
    pub fn is_real(&self) -> bool {
        self.sandbox.is_none()
    }

    /// True when the API server runs on this host (the sandbox, or a real cluster on loopback
    /// such as `scripts/control-plane.sh`'s): it can then call webhooks the tests serve here.
    pub fn reaches_this_host(&self) -> bool {
        if self.sandbox.is_some() {
            return true;
        }
        let Ok(kubeconfig) = Kubeconfig::read_from(&self.kubeconfig) else {
            return false;
        };
        let current = kubeconfig.current_context.as_deref();
        let context = kubeconfig
            .contexts
            .iter()
            .find(|c| Some(c.name.as_str()) == current)
            .and_then(|c| c.context.as_ref());
        let cluster = kubeconfig
            .clusters
            .iter()
            .find(|c| context.is_none_or(|ctx| ctx.cluster == c.name));
        let server = cluster
            .and_then(|c| c.cluster.as_ref())
            .and_then(|c| c.server.as_deref())
            .and_then(|s| s.parse::<http::Uri>().ok());
        server
            .as_ref()
            .and_then(http::Uri::host)
            .is_some_and(|host| {
                let host = host.trim_start_matches('[').trim_end_matches(']');
                host == "localhost"
                    || host
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback())
            })
    }

    /// The sandbox, when the test runs against one.
    pub fn sandbox(&self) -> Option<&Sandbox> {
        self.sandbox.as_ref()
    }

    /// The sandbox or `None` after printing why the test is skipped on a real cluster.
    pub fn sandbox_only(&self, test: &str, why: &str) -> Option<&Sandbox> {
        if self.sandbox.is_none() {
            eprintln!("SKIPPED (real cluster): {test}: {why}");
        }
        self.sandbox.as_ref()
    }

    /// A name for a cluster-scoped object that is unique per test (real clusters are shared).
    pub fn cluster_name(&self, base: &str) -> String {
        format!("{}-{base}", self.ns)
    }

    /// Remembers a cluster-scoped object to delete when the test finishes on a real cluster.
    pub fn delete_at_end(&self, resource: ApiResource, name: &str) {
        self.cluster_scoped
            .lock()
            .expect("cleanup list lock")
            .push((resource, name.to_string()));
    }

    /// Namespaced typed API in the test namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Dynamic API for `resource` in the test namespace.
    pub fn dyn_api(&self, resource: &ApiResource) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.ns, resource)
    }

    /// Ends the test: on a real cluster deletes what it created; the sandbox shuts down.
    pub async fn finish(self) {
        if let Some(sb) = self.sandbox {
            sb.shutdown().await;
            return;
        }
        let items = std::mem::take(&mut *self.cluster_scoped.lock().expect("cleanup list lock"));
        for (resource, name) in items {
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
            let _ = api.delete(&name, &DeleteParams::default()).await;
        }
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let _ = namespaces.delete(&self.ns, &DeleteParams::default()).await;
    }
}

/// A client built from a kubeconfig file, with kube's default retry of 429/503/504 turned off:
/// the suite asserts those codes, and retries with exponential backoff would hide them (and
/// take minutes).
pub async fn client_from_kubeconfig(path: &Path) -> Client {
    let kc = Kubeconfig::read_from(path)
        .unwrap_or_else(|e| panic!("reading kubeconfig {}: {e}", path.display()));
    let mut cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("kubeconfig {} is usable: {e}", path.display()));
    cfg.default_retry = false;
    Client::try_from(cfg).expect("client from kubeconfig")
}

/// Extracts the API `Status` of a failed call; panics (naming `what`) on success or on a
/// transport error.
pub fn api_error<T: std::fmt::Debug>(result: kube::Result<T>, what: &str) -> Status {
    match result {
        Ok(value) => panic!("{what}: expected an API error, got success: {value:?}"),
        Err(kube::Error::Api(status)) => *status,
        Err(other) => {
            panic!("{what}: expected an API error (a Status), got a client error: {other}")
        }
    }
}

/// Asserts code and reason of an API error in one line with a readable message.
pub fn assert_status(status: &Status, code: u16, reason: &str, what: &str) {
    assert_eq!(
        (status.code, status.reason.as_str()),
        (code, reason),
        "{what}: kube-apiserver answers {code} with reason {reason:?}; got {status:?}"
    );
}

/// Polls `probe` every 100 ms until it returns `Some`, or panics after `timeout` naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Response of a raw request: status, headers and body.
pub struct RawResponse {
    /// HTTP status.
    pub status: http::StatusCode,
    /// Response headers.
    pub headers: http::HeaderMap,
    /// Response body.
    pub body: Bytes,
}

impl RawResponse {
    /// The body as JSON; panics with the body text when it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "response body (HTTP {}) is not JSON ({e}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// Asserts that the body is a `meta/v1 Status` failure with `code` and `reason`.
    pub fn assert_status_object(&self, code: u16, reason: &str, what: &str) -> Value {
        assert_eq!(
            self.status.as_u16(),
            code,
            "{what}: kube-apiserver answers HTTP {code} ({reason}); got {} with body {}",
            self.status,
            String::from_utf8_lossy(&self.body)
        );
        let body = self.json();
        assert_eq!(
            body["kind"], "Status",
            "{what}: error bodies are metav1.Status objects: {body}"
        );
        assert_eq!(
            body["apiVersion"], "v1",
            "{what}: Status apiVersion is v1: {body}"
        );
        assert_eq!(body["status"], "Failure", "{what}: {body}");
        assert_eq!(
            body["code"], code,
            "{what}: Status.code equals the HTTP status: {body}"
        );
        assert_eq!(body["reason"], reason, "{what}: Status.reason: {body}");
        body
    }
}

/// The texts of `Warning: 299 - "<text>"` headers, unquoted (RFC 7234 quoted-string).
pub fn warning_texts(headers: &http::HeaderMap) -> Vec<String> {
    headers
        .get_all("warning")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(|v| {
            let quoted = v.strip_prefix("299 - ").unwrap_or(v).trim();
            let inner = quoted
                .strip_prefix('"')
                .and_then(|q| q.strip_suffix('"'))
                .unwrap_or(quoted);
            let mut text = String::new();
            let mut chars = inner.chars();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => text.extend(chars.next()),
                    other => text.push(other),
                }
            }
            text
        })
        .collect()
}

/// Sends a raw request through the client (its TLS and auth), never hanging longer than 30 s.
pub async fn raw(
    client: &Client,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> RawResponse {
    let mut builder = http::Request::builder().method(method).uri(path);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let request = builder
        .body(kube::client::Body::from(body))
        .expect("valid raw request");
    let response = tokio::time::timeout(Duration::from_secs(30), client.send(request))
        .await
        .unwrap_or_else(|_| {
            panic!("{method} {path}: no response within 30 s (the server must answer, not hang)")
        })
        .unwrap_or_else(|e| panic!("{method} {path}: transport error {e}"));
    let (parts, body) = response.into_parts();
    let body = tokio::time::timeout(Duration::from_secs(30), body.collect())
        .await
        .unwrap_or_else(|_| panic!("{method} {path}: body not finished within 30 s"))
        .unwrap_or_else(|e| panic!("{method} {path}: reading body: {e}"))
        .to_bytes();
    RawResponse {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

/// A ConfigMap with a name, labels and data.
pub fn configmap(name: &str, labels: &[(&str, &str)], data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: (!labels.is_empty()).then(|| {
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            }),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
}

/// Parses a resourceVersion as a number (etcd revisions are; the suite relies on their order).
pub fn rv_number(rv: Option<&String>, what: &str) -> u64 {
    let rv = rv.unwrap_or_else(|| panic!("{what}: metadata.resourceVersion must be set"));
    rv.parse()
        .unwrap_or_else(|_| panic!("{what}: resourceVersion {rv:?} is not an etcd revision number"))
}

/// The test CRD `Widget` in `group`: two versions (v1 storage, v1beta1), status and scale
/// subresources, defaults, an enum, a minimum, a preserved subtree and printer columns.
pub fn widget_crd(group: &str) -> CustomResourceDefinition {
    let schema = json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "replicas": {"type": "integer", "minimum": 0, "default": 1},
                    "size": {"type": "string", "enum": ["small", "large"], "default": "small"},
                    "color": {"type": "string", "maxLength": 10},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "items": {"type": "array", "items": {"type": "string"}}
                }
            },
            "status": {
                "type": "object",
                "properties": {
                    "replicas": {"type": "integer"},
                    "phase": {"type": "string"},
                    "labelSelector": {"type": "string"}
                }
            }
        }
    });
    let columns = json!([
        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas", "description": "desired replicas"},
        {"name": "Size", "type": "string", "jsonPath": ".spec.size"},
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    ]);
    let subresources = json!({
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.labelSelector"
        }
    });
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {
            "group": group,
            "names": {
                "kind": "Widget",
                "listKind": "WidgetList",
                "plural": "widgets",
                "singular": "widget",
                "shortNames": ["wg"],
                "categories": ["conformance"]
            },
            "scope": "Namespaced",
            "conversion": {"strategy": "None"},
            "versions": [
                {
                    "name": "v1",
                    "served": true,
                    "storage": true,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": subresources,
                    "additionalPrinterColumns": columns
                },
                {
                    "name": "v1beta1",
                    "served": true,
                    "storage": false,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": subresources,
                    "additionalPrinterColumns": columns
                }
            ]
        }
    }))
    .expect("widget CRD literal is a valid CustomResourceDefinition")
}

/// Group of this test's Widget CRD (unique per test: CRDs are cluster-scoped).
pub fn widget_group(t: &Target) -> String {
    format!("{}.conformance.example.com", t.ns)
}

/// `ApiResource` of the Widget CRD at `version`.
pub fn widget_resource(group: &str, version: &str) -> ApiResource {
    ApiResource {
        group: group.to_string(),
        version: version.to_string(),
        api_version: format!("{group}/{version}"),
        kind: "Widget".to_string(),
        plural: "widgets".to_string(),
    }
}

/// Creates the Widget CRD for this test, waits until it is Established and served, and
/// returns the v1 `ApiResource`.
pub async fn install_widget_crd(t: &Target) -> ApiResource {
    let group = widget_group(t);
    let crd = widget_crd(&group);
    let name = crd.metadata.name.clone().expect("crd name");
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    crds.create(&PostParams::default(), &crd)
        .await
        .unwrap_or_else(|e| panic!("creating CRD {name}: {e}"));
    t.delete_at_end(ApiResource::erase::<CustomResourceDefinition>(&()), &name);
    wait_crd_established(&t.client, &name).await;
    let resource = widget_resource(&group, "v1");
    let api = t.dyn_api(&resource);
    wait_for("the Widget endpoint serves lists", EVENTUALLY, || {
        let api = api.clone();
        async move { api.list(&Default::default()).await.ok().map(|_| ()) }
    })
    .await;
    resource
}

/// Waits until CRD `name` has condition Established=True.
pub async fn wait_crd_established(client: &Client, name: &str) -> CustomResourceDefinition {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    wait_for(&format!("CRD {name} Established=True"), EVENTUALLY, || {
        let crds = crds.clone();
        async move {
            let crd = crds.get(name).await.ok()?;
            let established = crd
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            established.then_some(crd)
        }
    })
    .await
}

/// A Widget object as JSON for `resource`.
pub fn widget(resource: &ApiResource, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": resource.api_version,
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": spec
    }))
    .expect("widget literal")
}

/// Directory of the generated MCM CRDs in the chart.
pub fn mcm_crd_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../charts/machine-controller-manager/files/crds/v1alpha1")
}

/// The four MCM CRDs from the chart; panics with a clear message if they are not generated.
pub fn mcm_crds() -> Vec<(PathBuf, CustomResourceDefinition)> {
    let dir = mcm_crd_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| {
            panic!(
                "MCM CRDs missing: cannot read {} ({e}); generate them (make crds)",
                dir.display()
            )
        })
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .is_some_and(|ext| ext == "yaml" || ext == "yml")
        })
        .collect();
    files.sort();
    let crds: Vec<_> = files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("read CRD file");
            let crd: CustomResourceDefinition = serde_saphyr::from_str(&text).unwrap_or_else(|e| {
                panic!("{} is not a CustomResourceDefinition: {e}", path.display())
            });
            (path, crd)
        })
        .collect();
    assert!(
        crds.len() >= 4,
        "expected the four MCM CRDs (machines, machinesets, machinedeployments, machineclasses) in {}, found {}",
        dir.display(),
        crds.len()
    );
    crds
}

/// Creates the MCM CRDs (if absent) and waits until each is Established.
pub async fn install_mcm_crds(client: &Client) -> Vec<CustomResourceDefinition> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut out = Vec::new();
    for (path, crd) in mcm_crds() {
        let name = crd.metadata.name.clone().expect("CRD has a name");
        match api.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.reason == "AlreadyExists" => {}
            Err(e) => panic!("creating CRD {name} from {}: {e}", path.display()),
        }
        out.push(wait_crd_established(client, &name).await);
    }
    out
}

/// The storage-version `ApiResource` of an installed CRD.
pub fn crd_resource(crd: &CustomResourceDefinition) -> ApiResource {
    let version = crd
        .spec
        .versions
        .iter()
        .find(|v| v.storage)
        .expect("CRD has a storage version");
    ApiResource {
        group: crd.spec.group.clone(),
        version: version.name.clone(),
        api_version: format!("{}/{}", crd.spec.group, version.name),
        kind: crd.spec.names.kind.clone(),
        plural: crd.spec.names.plural.clone(),
    }
}

/// Runs kube-rs discovery, retrying while it fails: on a shared real cluster another test's new
/// CRD group can be listed in `/apis` a moment before its version is served (404), and one such
/// group fails the whole discovery run.
pub async fn discover(client: &Client) -> kube::Discovery {
    wait_for("a complete discovery run", EVENTUALLY, || async {
        kube::Discovery::new(client.clone()).run().await.ok()
    })
    .await
}
