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
        server::router(state.clone()),
        server_config(store),
    ));

    let config = SandboxConfig {
        service_addresses: HashMap::from([((NAMESPACE.to_owned(), SERVICE.to_owned()), addr)]),
        ..SandboxConfig::default()
    };
    let sandbox = Sandbox::start(config).await.unwrap();
    // The rollout preview reads the deployment's machines from this API server.
    state.preview.set_client(sandbox.client());
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
  replicas: 1
  minReadySeconds: -1
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
            "* spec.minReadySeconds: Invalid value: -1: must be greater than or equal to 0",
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
        String::from_utf8_lossy(&output.stderr).contains(
            "Warning: spec.rollbackTo on a new machinedeployment has no earlier revision"
        ),
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

/// A MachineDeployment `worker-p` on class `class` with `replicas` and maxSurge 1.
fn preview_md(class: &str, replicas: u32) -> String {
    serde_json::json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment",
        "metadata": {"name": "worker-p", "namespace": "shoot--demo"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"pool": "p"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {"metadata": {"labels": {"pool": "p"}},
                         "spec": {"class": {"kind": "MachineClass", "name": class}}}
        }
    })
    .to_string()
}

impl Env {
    async fn uid(&self, kind: &str, name: &str) -> String {
        let out = self
            .kubectl(&[
                "get",
                kind,
                name,
                "-n",
                "shoot--demo",
                "-o",
                "jsonpath={.metadata.uid}",
            ])
            .await;
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    async fn apply_json(&self, file: &str, value: &serde_json::Value) {
        let path = self.write(file, &value.to_string());
        let out = self.kubectl(&["apply", "-f", &path]).await;
        assert!(out.status.success(), "{file}: {}", text(&out));
    }
}

fn owner(kind: &str, name: &str, uid: &str) -> serde_json::Value {
    serde_json::json!([{"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": kind, "name": name,
                        "uid": uid, "controller": true, "blockOwnerDeletion": true}])
}

/// Know before you roll: a dry-run apply of a template change prints the verdict as a warning
/// and stores nothing; a class change names the deployment that uses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_apply_of_a_template_change_prints_the_rollout_verdict() {
    let Some(env) = start().await else { return };
    let spec = serde_json::json!({"tags": {"team": "a"}});
    for class in ["small", "large"] {
        env.apply_json(
            &format!("class-{class}.json"),
            &serde_json::json!({"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
                                "metadata": {"name": class, "namespace": "shoot--demo"},
                                "provider": "virtual", "secretRef": {"name": "cloud", "namespace": "shoot--demo"},
                                "providerSpec": spec}),
        )
        .await;
    }
    let md_file = env.write("md.json", &preview_md("small", 3));
    let out = env.kubectl(&["apply", "-f", &md_file]).await;
    assert!(out.status.success(), "{}", text(&out));
    let md_uid = env.uid("machinedeployment", "worker-p").await;
    env.apply_json(
        "set.json",
        &serde_json::json!({"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
            "metadata": {"name": "worker-p-old", "namespace": "shoot--demo", "labels": {"pool": "p"},
                         "ownerReferences": owner("MachineDeployment", "worker-p", &md_uid)},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"pool": "p"}},
                     "template": {"metadata": {"labels": {"pool": "p"}},
                                  "spec": {"class": {"kind": "MachineClass", "name": "small"}}}}}),
    )
    .await;
    let set_uid = env.uid("machineset", "worker-p-old").await;
    for i in 0..3 {
        let name = format!("worker-p-old-{i}");
        env.apply_json(
            &format!("{name}.json"),
            &serde_json::json!({"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
                "metadata": {"name": name, "namespace": "shoot--demo", "labels": {"pool": "p"},
                             "annotations": {"node.machine.sapcloud.io/last-applied-providerspec": spec.to_string()},
                             "ownerReferences": owner("MachineSet", "worker-p-old", &set_uid)},
                "spec": {"class": {"kind": "MachineClass", "name": "small"}, "providerID": format!("virtual:///{name}")}}),
        )
        .await;
        let status = env
            .kubectl(&[
                "patch",
                "machine",
                &name,
                "-n",
                "shoot--demo",
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"currentStatus":{"phase":"Running"}}}"#,
            ])
            .await;
        assert!(status.status.success(), "{}", text(&status));
    }

    // A template change (class rename), asked without changing anything.
    let changed = env.write("md-large.json", &preview_md("large", 3));
    let out = env
        .transcript(
            &["apply", "-f", &changed, "--dry-run=server"],
            "apply -f worker-p-large.yaml --dry-run=server",
        )
        .await;
    assert!(out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Warning: this change replaces 3 machines of machinedeployment shoot--demo/worker-p by a rolling update (maxSurge 1, maxUnavailable 0: about 3 batches)"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("does not exist"),
        "class large exists: {stderr}"
    );
    let class = env
        .kubectl(&[
            "get",
            "machinedeployment",
            "worker-p",
            "-n",
            "shoot--demo",
            "-o",
            "jsonpath={.spec.template.spec.class.name}",
        ])
        .await;
    assert_eq!(
        String::from_utf8_lossy(&class.stdout),
        "small",
        "dry run stored nothing"
    );

    // A class that does not exist: said at admission, with what happens meanwhile.
    let missing = env.write("md-huge.json", &preview_md("huge", 3));
    let out = env
        .kubectl(&["apply", "-f", &missing, "--dry-run=server"])
        .await;
    assert!(out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Warning: machineclass shoot--demo/huge does not exist: new machines of machinedeployment shoot--demo/worker-p cannot be created until it does (they stay without a phase, event MachineClassNotFound); no old machine goes meanwhile (the 3 old machines stay until the class exists; only surge machines are created); reverting the template deletes the new machines at once"),
        "{stderr}"
    );

    // A hot-updatable class change names the deployment that uses the class.
    let hot = env.write(
        "class-small-hot.json",
        &serde_json::json!({"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
                            "metadata": {"name": "small", "namespace": "shoot--demo"},
                            "provider": "virtual", "secretRef": {"name": "cloud", "namespace": "shoot--demo"},
                            "providerSpec": {"tags": {"team": "b"}}})
        .to_string(),
    );
    let out = env
        .transcript(
            &["apply", "-f", &hot, "--dry-run=server"],
            "apply -f class-small-tags.yaml --dry-run=server",
        )
        .await;
    assert!(out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Warning: providerSpec.tags.team is hot-updatable: 3 machines of machinedeployment shoot--demo/worker-p are updated in place through UpdateMachine, none is replaced"),
        "{stderr}"
    );
    // A class nobody uses.
    let unused = env.write(
        "class-large-hot.json",
        &serde_json::json!({"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
                            "metadata": {"name": "large", "namespace": "shoot--demo"},
                            "provider": "virtual", "secretRef": {"name": "cloud", "namespace": "shoot--demo"},
                            "providerSpec": {"tags": {"team": "c"}}})
        .to_string(),
    );
    let out = env
        .kubectl(&["apply", "-f", &unused, "--dry-run=server"])
        .await;
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("Warning: no MachineDeployment uses machineclass shoot--demo/large: no machine is touched"),
        "{}",
        text(&out)
    );
}
