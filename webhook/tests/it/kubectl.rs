//! kubectl against the sandbox API server, which calls this webhook (admission and conversion)
//! over TLS exactly as a kube-apiserver would: the webhook's answers must come out of kubectl as
//! per-field error lists, warnings and converted objects.
//!
//! These tests always use the in-process sandbox (the API server must reach the in-process
//! webhook at a loopback address); they print `SKIPPED: kubectl not found` without kubectl.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Output;

use base64::Engine as _;
use mcm_api::crd::{ConversionWebhook, all_with_conversion, to_yaml};
use mcm_sandbox::{Sandbox, SandboxConfig};
use mcm_webhook::server::{self, AppState};
use mcm_webhook::tls::server_config;

use crate::common::{install_provider, serving_certificate};

const NAMESPACE: &str = "mcm";
const SERVICE: &str = "mcm-webhook";

fn kubectl_path() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("kubectl"))
            .find(|candidate| candidate.is_file())
    })
}

struct Env {
    sandbox: Sandbox,
    dir: tempfile::TempDir,
    kubectl: PathBuf,
    _server: tokio::task::JoinHandle<()>,
}

impl Env {
    async fn kubectl(&self, args: &[&str]) -> Output {
        let kubectl = self.kubectl.clone();
        let kubeconfig = self.sandbox.kubeconfig_path().to_owned();
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(kubectl)
                .arg("--kubeconfig")
                .arg(kubeconfig)
                .args(&args)
                .output()
                .unwrap()
        })
        .await
        .unwrap()
    }

    fn write(&self, name: &str, content: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        path.display().to_string()
    }

    /// Runs kubectl, prints a transcript (command, stdout, stderr) and returns the output.
    async fn transcript(&self, args: &[&str], shown: &str) -> Output {
        let output = self.kubectl(args).await;
        println!("$ kubectl {shown}");
        print!("{}", String::from_utf8_lossy(&output.stdout));
        print!("{}", String::from_utf8_lossy(&output.stderr));
        output
    }
}

fn webhook_configurations(ca_bundle_b64: &str) -> String {
    let mut out = String::new();
    for (config_kind, prefix, path_prefix) in [
        ("ValidatingWebhookConfiguration", "validate", "validate"),
        ("MutatingWebhookConfiguration", "default", "mutate"),
    ] {
        out.push_str(&format!(
            "---\napiVersion: admissionregistration.k8s.io/v1\nkind: {config_kind}\nmetadata:\n  name: machine-controller-manager\nwebhooks:\n"
        ));
        for (kind, plural) in [
            ("machinedeployment", "machinedeployments"),
            ("machineset", "machinesets"),
            ("machine", "machines"),
            ("machineclass", "machineclasses"),
        ] {
            out.push_str(&format!(
                "- name: {prefix}.{kind}.machine.sapcloud.io
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  matchPolicy: Equivalent
  timeoutSeconds: 5
  clientConfig:
    caBundle: {ca_bundle_b64}
    service: {{ namespace: {NAMESPACE}, name: {SERVICE}, path: /{path_prefix}-machine-sapcloud-io-{kind} }}
  rules:
  - apiGroups: [machine.sapcloud.io]
    apiVersions: ['*']
    operations: [CREATE, UPDATE]
    resources: [{plural}]
    scope: Namespaced
"
            ));
        }
    }
    out
}

/// Starts the webhook (TLS, own CA) and a sandbox that reaches it as `mcm/mcm-webhook`, and
/// installs the CRDs (with conversion) and webhook configurations with kubectl.
async fn start() -> Option<Env> {
    install_provider();
    let Some(kubectl) = kubectl_path() else {
        println!("SKIPPED: kubectl not found");
        return None;
    };
    let (store, ca_cert) =
        serving_certificate("kubectl-test-ca", &format!("{SERVICE}.{NAMESPACE}.svc"));
    let state = AppState::new(store.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(server::serve_tls(
        listener,
        server::router(state),
        server_config(store),
    ));

    let config = SandboxConfig {
        service_addresses: HashMap::from([((NAMESPACE.to_owned(), SERVICE.to_owned()), addr)]),
        ..SandboxConfig::default()
    };
    let sandbox = Sandbox::start(config).await.unwrap();
    let env = Env {
        sandbox,
        dir: tempfile::tempdir().unwrap(),
        kubectl,
        _server: server,
    };
    let crd_dir = env.dir.path().join("crds");
    std::fs::create_dir_all(&crd_dir).unwrap();
    let webhook = ConversionWebhook {
        service_namespace: NAMESPACE.to_owned(),
        service_name: SERVICE.to_owned(),
        path: "/convert".to_owned(),
        port: None,
        ca_bundle: Some(ca_cert.as_bytes().to_vec()),
    };
    for (file, crd) in all_with_conversion(&webhook).unwrap() {
        std::fs::write(crd_dir.join(file), to_yaml(&crd).unwrap()).unwrap();
    }
    let applied = env
        .kubectl(&["apply", "-f", &crd_dir.display().to_string()])
        .await;
    assert!(
        applied.status.success(),
        "CRDs: {}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let bundle = base64::engine::general_purpose::STANDARD.encode(ca_cert.as_bytes());
    let configs = env.write("webhooks.yaml", &webhook_configurations(&bundle));
    let applied = env.kubectl(&["apply", "-f", &configs]).await;
    assert!(
        applied.status.success(),
        "webhooks: {}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let namespace = env.kubectl(&["create", "namespace", "shoot--demo"]).await;
    assert!(
        namespace.status.success(),
        "{}",
        String::from_utf8_lossy(&namespace.stderr)
    );
    Some(env)
}

const INVALID_MD: &str = "apiVersion: machine.sapcloud.io/v1alpha1
kind: MachineDeployment
metadata:
  name: worker-a
  namespace: shoot--demo
spec:
  replicas: -1
  selector:
    matchLabels:
      pool: a
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 0
      maxUnavailable: 0%
  template:
    metadata:
      labels:
        pool: b
    spec:
      class:
        kind: AWSMachineClass
        name: worker-a
      drainTimeout: 0s
";

const VALID_MD: &str = "apiVersion: machine.sapcloud.io/v1alpha1
kind: MachineDeployment
metadata:
  name: worker-b
  namespace: shoot--demo
spec:
  replicas: 2
  rollbackTo:
    revision: 1
  selector:
    matchLabels:
      pool: b
  template:
    metadata:
      labels:
        pool: b
    spec:
      class:
        kind: MachineClass
        name: worker-b
      drainTimeout: 2h0m0s
      maxEvictRetries: 10
";

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_of_an_invalid_machine_deployment_prints_per_field_errors() {
    let Some(env) = start().await else { return };
    let file = env.write("invalid.yaml", INVALID_MD);
    for dry_run in [true, false] {
        let mut args = vec!["apply", "-f", file.as_str()];
        if dry_run {
            args.push("--dry-run=server");
        }
        let shown = if dry_run {
            "apply -f invalid-md.yaml --dry-run=server"
        } else {
            "apply -f invalid-md.yaml"
        };
        let output = env.transcript(&args, shown).await;
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("The MachineDeployment \"worker-a\" is invalid:"),
            "{stderr}"
        );
        for line in [
            "* spec.replicas: Invalid value: -1: must be greater than or equal to 0",
            "* spec.template.metadata.labels: Invalid value: {\"pool\":\"b\"}: `selector` does not match template `labels`",
            "* spec.strategy.rollingUpdate.maxUnavailable: Invalid value: \"0%\": may not be 0 when `maxSurge` is 0",
            "* spec.template.spec.class.kind: Unsupported value: \"AWSMachineClass\": supported values: \"MachineClass\"",
            "* spec.template.spec.drainTimeout: Invalid value: \"0s\": must be greater than 0",
        ] {
            assert!(stderr.contains(line), "missing {line:?} in:\n{stderr}");
        }
    }
    let get = env
        .kubectl(&[
            "get",
            "machinedeployments",
            "-n",
            "shoot--demo",
            "-o",
            "name",
        ])
        .await;
    assert_eq!(
        String::from_utf8_lossy(&get.stdout).trim(),
        "",
        "nothing was stored"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_objects_are_defaulted_warned_about_and_served_as_v1beta1() {
    let Some(env) = start().await else { return };
    let file = env.write("valid.yaml", VALID_MD);
    let output = env
        .transcript(&["apply", "-f", &file], "apply -f valid-md.yaml")
        .await;
    assert!(output.status.success(), "{}", text(&output));
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("Warning: spec.rollbackTo is deprecated and ignored"),
        "{}",
        text(&output)
    );
    // Defaults were applied by the mutating webhook on CREATE.
    let stored = env
        .kubectl(&[
            "get",
            "machinedeployments.v1alpha1.machine.sapcloud.io",
            "worker-b",
            "-n",
            "shoot--demo",
            "-o",
            "json",
        ])
        .await;
    let stored: serde_json::Value = serde_json::from_slice(&stored.stdout).unwrap();
    assert_eq!(
        stored["spec"]["strategy"],
        serde_json::json!({ "type": "RollingUpdate", "rollingUpdate": { "maxSurge": 1, "maxUnavailable": 0 } })
    );
    // Read back as v1beta1: converted by the webhook.
    let output = env
        .transcript(
            &[
                "get",
                "machinedeployments.v1beta1.machine.sapcloud.io",
                "worker-b",
                "-n",
                "shoot--demo",
                "-o",
                "yaml",
            ],
            "get machinedeployments.v1beta1.machine.sapcloud.io worker-b -n shoot--demo -o yaml",
        )
        .await;
    assert!(output.status.success(), "{}", text(&output));
    let beta = env
        .kubectl(&[
            "get",
            "machinedeployments.v1beta1.machine.sapcloud.io",
            "-n",
            "shoot--demo",
            "-o",
            "json",
        ])
        .await;
    let list: serde_json::Value = serde_json::from_slice(&beta.stdout).unwrap();
    let item = &list["items"][0];
    assert_eq!(item["apiVersion"], "machine.sapcloud.io/v1beta1");
    assert_eq!(
        item["spec"]["template"]["spec"]["configuration"]["drainTimeout"],
        "2h0m0s"
    );
    assert!(item["spec"].get("rollbackTo").is_none());
    assert_eq!(
        item["metadata"]["annotations"]["machine.sapcloud.io/conversion-data"],
        "{\"rollbackTo\":{\"revision\":1}}"
    );
    // Write through v1beta1: stored as v1alpha1 with rollbackTo restored from the annotation.
    let mut edited = item.clone();
    edited["spec"]["replicas"] = serde_json::json!(3);
    for key in [
        "resourceVersion",
        "managedFields",
        "uid",
        "creationTimestamp",
        "generation",
    ] {
        edited["metadata"].as_object_mut().unwrap().remove(key);
    }
    let beta_file = env.write("beta.json", &edited.to_string());
    let output = env
        .transcript(&["apply", "-f", &beta_file], "apply -f md-v1beta1.json")
        .await;
    assert!(output.status.success(), "{}", text(&output));
    let stored = env
        .kubectl(&[
            "get",
            "machinedeployments.v1alpha1.machine.sapcloud.io",
            "worker-b",
            "-n",
            "shoot--demo",
            "-o",
            "json",
        ])
        .await;
    let stored: serde_json::Value = serde_json::from_slice(&stored.stdout).unwrap();
    assert_eq!(stored["spec"]["replicas"], 3);
    assert_eq!(
        stored["spec"]["rollbackTo"],
        serde_json::json!({ "revision": 1 })
    );
    assert_eq!(stored["spec"]["template"]["spec"]["drainTimeout"], "2h0m0s");
}
