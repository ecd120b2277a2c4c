//! `kubectl` (from PATH) against the target: apply, wait, get (printer columns), describe,
//! label, annotate, patch, scale, explain and delete on the MCM CRDs.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{Target, mcm_crd_dir, mcm_crds};

struct Kubectl {
    kubeconfig: PathBuf,
    cache: tempfile::TempDir,
}

struct Output {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Kubectl {
    /// Runs kubectl off the async runtime (the sandbox serves on the same runtime).
    async fn run(&self, args: &[&str]) -> Output {
        let mut all: Vec<String> = vec![
            format!("--kubeconfig={}", self.kubeconfig.display()),
            format!("--cache-dir={}", self.cache.path().display()),
            "--request-timeout=30s".to_string(),
        ];
        all.extend(args.iter().map(|s| s.to_string()));
        let output =
            tokio::task::spawn_blocking(move || Command::new("kubectl").args(&all).output())
                .await
                .expect("kubectl task")
                .expect("spawn kubectl");
        Output {
            ok: output.status.success(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert!(
            out.ok,
            "kubectl {} failed\nstdout: {}\nstderr: {}",
            args.join(" "),
            out.stdout,
            out.stderr
        );
        out.stdout
    }
}

fn kubectl_available() -> bool {
    Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn write_manifest(dir: &Path, ns: &str) -> PathBuf {
    let manifest = format!(
        r#"apiVersion: v1
kind: Secret
metadata:
  name: cloud
  namespace: {ns}
stringData:
  userData: "echo hello"
---
apiVersion: machine.sapcloud.io/v1alpha1
kind: MachineClass
metadata:
  name: mc1
  namespace: {ns}
provider: virtual
providerSpec:
  flavor: small
  zone: z1
secretRef:
  name: cloud
  namespace: {ns}
---
apiVersion: machine.sapcloud.io/v1alpha1
kind: MachineDeployment
metadata:
  name: md1
  namespace: {ns}
spec:
  replicas: 1
  selector:
    matchLabels:
      name: md1
  template:
    metadata:
      labels:
        name: md1
    spec:
      class:
        kind: MachineClass
        name: mc1
"#
    );
    let path = dir.join("machines.yaml");
    std::fs::write(&path, manifest).expect("write manifest");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_workflow_on_mcm_crds() {
    if !kubectl_available() {
        eprintln!("\n**********\nSKIPPED: kubectl not found on PATH\n**********\n");
        return;
    }
    let t = Target::sandbox_or_env().await;
    let k = Kubectl {
        kubeconfig: t.kubeconfig.clone(),
        cache: tempfile::tempdir().expect("cache dir"),
    };
    let ns = t.ns.as_str();
    let crds = mcm_crds();
    let crd_dir = mcm_crd_dir();
    let out = k.ok(&["apply", "-f", &crd_dir.display().to_string()]).await;
    for (_, crd) in &crds {
        let name = crd.metadata.name.clone().expect("crd name");
        assert!(out.contains(&name), "apply reports {name}: {out}");
    }
    let names: Vec<String> = crds
        .iter()
        .map(|(_, c)| format!("crd/{}", c.metadata.name.clone().expect("name")))
        .collect();
    let mut wait_args = vec!["wait", "--for=condition=Established", "--timeout=60s"];
    wait_args.extend(names.iter().map(String::as_str));
    let out = k.ok(&wait_args).await;
    assert_eq!(
        out.matches("condition met").count(),
        4,
        "kubectl wait reports every CRD: {out}"
    );

    let dir = tempfile::tempdir().expect("tmp");
    let manifest = write_manifest(dir.path(), ns);
    let out = k
        .ok(&["apply", "-f", &manifest.display().to_string()])
        .await;
    assert!(
        out.contains("machineclass.machine.sapcloud.io/mc1 created"),
        "{out}"
    );
    assert!(
        out.contains("machinedeployment.machine.sapcloud.io/md1 created"),
        "{out}"
    );
    // Re-applying an unchanged manifest is a no-op.
    let out = k
        .ok(&["apply", "-f", &manifest.display().to_string()])
        .await;
    assert!(
        out.contains("machinedeployment.machine.sapcloud.io/md1 unchanged"),
        "second apply: {out}"
    );

    let md_crd = &crds
        .iter()
        .find(|(_, c)| c.spec.names.kind == "MachineDeployment")
        .expect("MachineDeployment CRD")
        .1;
    let version = md_crd
        .spec
        .versions
        .iter()
        .find(|v| v.storage)
        .expect("storage version");
    let mut expected_header = vec!["NAME".to_string()];
    expected_header.extend(
        version
            .additional_printer_columns
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.priority.unwrap_or(0) == 0)
            .map(|c| c.name.to_uppercase()),
    );
    let out = k.ok(&["get", "machinedeployments", "-n", ns]).await;
    let header: Vec<String> = out
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert_eq!(
        header, expected_header,
        "kubectl get shows the CRD printer columns:\n{out}"
    );
    assert!(
        out.lines().nth(1).is_some_and(|l| l.starts_with("md1")),
        "row for md1:\n{out}"
    );
    let out = k.ok(&["get", "mcd", "-n", ns]).await;
    assert!(out.contains("md1"), "short name mcd works: {out}");

    let yaml = k
        .ok(&["get", "machinedeployment", "md1", "-n", ns, "-o", "yaml"])
        .await;
    assert!(
        yaml.contains("kind: MachineDeployment") && yaml.contains("name: md1"),
        "{yaml}"
    );
    assert!(
        yaml.contains("uid:") && yaml.contains("resourceVersion:"),
        "{yaml}"
    );

    let describe = k
        .ok(&["describe", "machinedeployment", "md1", "-n", ns])
        .await;
    assert!(
        describe
            .lines()
            .any(|l| l.starts_with("Name:") && l.contains("md1")),
        "{describe}"
    );
    assert!(
        describe
            .lines()
            .any(|l| l.starts_with("Namespace:") && l.contains(ns)),
        "{describe}"
    );

    k.ok(&["label", "machinedeployment", "md1", "tier=gold", "-n", ns])
        .await;
    k.ok(&[
        "annotate",
        "machinedeployment",
        "md1",
        "note=hello",
        "-n",
        ns,
    ])
    .await;
    let out = k
        .ok(&[
            "get",
            "mcd",
            "md1",
            "-n",
            ns,
            "-o",
            "jsonpath={.metadata.labels.tier}/{.metadata.annotations.note}",
        ])
        .await;
    assert_eq!(out, "gold/hello");

    k.ok(&[
        "patch",
        "mcd",
        "md1",
        "-n",
        ns,
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"minReadySeconds":7}}"#,
    ])
    .await;
    k.ok(&[
        "patch",
        "mcd",
        "md1",
        "-n",
        ns,
        "--type",
        "json",
        "-p",
        r#"[{"op":"replace","path":"/spec/replicas","value":2}]"#,
    ])
    .await;
    let out = k
        .ok(&[
            "get",
            "mcd",
            "md1",
            "-n",
            ns,
            "-o",
            "jsonpath={.spec.minReadySeconds}/{.spec.replicas}",
        ])
        .await;
    assert_eq!(out, "7/2", "merge and json patches applied");

    let out = k
        .ok(&[
            "scale",
            "machinedeployment",
            "md1",
            "--replicas=3",
            "-n",
            ns,
        ])
        .await;
    assert!(out.contains("scaled"), "{out}");
    let out = k
        .ok(&[
            "get",
            "mcd",
            "md1",
            "-n",
            ns,
            "-o",
            "jsonpath={.spec.replicas}",
        ])
        .await;
    assert_eq!(
        out, "3",
        "kubectl scale writes through the scale subresource"
    );

    let explain = k.ok(&["explain", "machinedeployment.spec"]).await;
    assert!(
        explain.contains("KIND:") && explain.contains("MachineDeployment"),
        "{explain}"
    );
    assert!(
        explain.contains("FIELDS:") && explain.contains("replicas"),
        "explain lists spec fields:\n{explain}"
    );

    // Issue 16 item 7: the default the mutating webhook applies is what explain says.
    let explain = k.ok(&["explain", "mcd.spec.strategy.type"]).await;
    assert!(
        explain.contains("Default: RollingUpdate"),
        "explain shows the strategy default:\n{explain}"
    );

    let resources = k
        .ok(&["api-resources", "--api-group=machine.sapcloud.io"])
        .await;
    assert!(
        resources
            .lines()
            .any(|l| l.starts_with("machinedeployments") && l.contains("mcd")),
        "{resources}"
    );

    let out = k
        .ok(&["delete", "machinedeployment", "md1", "-n", ns])
        .await;
    assert!(out.contains("deleted"), "{out}");
    let gone = k.run(&["get", "machinedeployment", "md1", "-n", ns]).await;
    assert!(
        !gone.ok && gone.stderr.contains("NotFound"),
        "get after delete: {}",
        gone.stderr
    );
    k.ok(&[
        "delete",
        "-f",
        &manifest.display().to_string(),
        "--ignore-not-found",
    ])
    .await;
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_core_resources_and_short_names() {
    if !kubectl_available() {
        eprintln!("\n**********\nSKIPPED: kubectl not found on PATH\n**********\n");
        return;
    }
    let t = Target::sandbox_or_env().await;
    let k = Kubectl {
        kubeconfig: t.kubeconfig.clone(),
        cache: tempfile::tempdir().expect("cache dir"),
    };
    let ns = t.ns.as_str();
    let out = k.ok(&["get", "ns", ns]).await;
    assert!(out.contains(ns) && out.contains("Active"), "{out}");
    k.ok(&["create", "configmap", "kc", "--from-literal=a=b", "-n", ns])
        .await;
    let out = k.ok(&["get", "cm", "-n", ns]).await;
    let header: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        vec!["NAME", "DATA", "AGE"],
        "server-side Table columns for ConfigMaps:\n{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("kc") && l.split_whitespace().nth(1) == Some("1")),
        "{out}"
    );
    let out = k.ok(&["get", "po", "-n", ns]).await;
    let _ = out;
    k.ok(&["get", "no"]).await;
    let out = k.ok(&["version", "-o", "json"]).await;
    assert!(
        out.contains("serverVersion"),
        "kubectl version reaches /version: {out}"
    );
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("ssa.yaml");
    std::fs::write(&file, format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n  namespace: {ns}\ndata:\n  k: v\n"))
        .expect("write");
    let out = k
        .ok(&["apply", "--server-side", "-f", &file.display().to_string()])
        .await;
    assert!(out.contains("configmap/ssa serverside-applied"), "{out}");
    let out = k
        .ok(&["get", "cm", "ssa", "-n", ns, "-o", "jsonpath={.data.k}"])
        .await;
    assert_eq!(out, "v");

    let node = t.cluster_name("cordon");
    let node_file = dir.path().join("node.yaml");
    std::fs::write(
        &node_file,
        format!("apiVersion: v1\nkind: Node\nmetadata:\n  name: {node}\n"),
    )
    .expect("write");
    k.ok(&["create", "-f", &node_file.display().to_string()])
        .await;
    let out = k.ok(&["cordon", &node]).await;
    assert!(out.contains("cordoned"), "{out}");
    let out = k
        .ok(&["get", "node", &node, "-o", "jsonpath={.spec.unschedulable}"])
        .await;
    assert_eq!(out, "true", "kubectl cordon sets spec.unschedulable");
    k.ok(&["uncordon", &node]).await;
    k.ok(&["delete", "node", &node]).await;

    let out = k.ok(&["delete", "cm", "kc", "-n", ns]).await;
    assert!(out.contains("deleted"), "{out}");
    t.finish().await;
}

/// Whitespace-normalised header line of a `kubectl get` table.
fn header(out: &str) -> String {
    out.lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_builtin_tables_have_kube_columns() {
    if !kubectl_available() {
        eprintln!("\n**********\nSKIPPED: kubectl not found on PATH\n**********\n");
        return;
    }
    let t = Target::sandbox_or_env().await;
    let k = Kubectl {
        kubeconfig: t.kubeconfig.clone(),
        cache: tempfile::tempdir().expect("cache dir"),
    };
    let ns = t.ns.as_str();
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("objs.yaml");
    std::fs::write(
        &file,
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: {ns}\nspec:\n  schedulingGates:\n  - name: conformance.example.com/hold\n  containers:\n  - name: c\n    image: busybox:1.36\n---\napiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: pdb\n  namespace: {ns}\nspec:\n  minAvailable: 1\n  selector:\n    matchLabels:\n      app: x\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n  namespace: {ns}\nstringData:\n  a: b\n"
        ),
    )
    .expect("write");
    k.ok(&["apply", "-f", &file.display().to_string()]).await;
    let mut wrong = Vec::new();
    for (args, expected) in [
        (
            vec!["get", "pods", "-n", ns],
            "NAME READY STATUS RESTARTS AGE",
        ),
        (vec!["get", "secrets", "-n", ns], "NAME TYPE DATA AGE"),
        (
            vec!["get", "pdb", "-n", ns],
            "NAME MIN AVAILABLE MAX UNAVAILABLE ALLOWED DISRUPTIONS AGE",
        ),
        (vec!["get", "ns", ns], "NAME STATUS AGE"),
    ] {
        let out = k.ok(&args).await;
        if header(&out) != expected {
            wrong.push(format!(
                "kubectl {}: got {:?}, kube prints {expected:?}",
                args.join(" "),
                header(&out)
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "server-side Table columns differ from kube-apiserver:\n{}",
        wrong.join("\n")
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_typed_create_commands() {
    if !kubectl_available() {
        eprintln!("\n**********\nSKIPPED: kubectl not found on PATH\n**********\n");
        return;
    }
    let t = Target::sandbox_or_env().await;
    let k = Kubectl {
        kubeconfig: t.kubeconfig.clone(),
        cache: tempfile::tempdir().expect("cache dir"),
    };
    let ns = t.ns.as_str();
    let out = k
        .ok(&[
            "create",
            "deployment",
            "web",
            "--image=busybox:1.36",
            "--replicas=0",
            "-n",
            ns,
        ])
        .await;
    assert!(out.contains("deployment.apps/web created"), "{out}");
    let out = k
        .ok(&[
            "create",
            "poddisruptionbudget",
            "web",
            "--selector=app=web",
            "--min-available=1",
            "-n",
            ns,
        ])
        .await;
    assert!(
        out.contains("poddisruptionbudget.policy/web created"),
        "{out}"
    );
    let out = k
        .ok(&[
            "create",
            "secret",
            "generic",
            "creds",
            "--from-literal=user=me",
            "-n",
            ns,
        ])
        .await;
    assert!(out.contains("secret/creds created"), "{out}");
    let out = k
        .ok(&["scale", "deployment", "web", "--replicas=0", "-n", ns])
        .await;
    assert!(out.contains("scaled"), "{out}");
    let out = k
        .ok(&[
            "get",
            "deployment",
            "web",
            "-n",
            ns,
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ])
        .await;
    assert_eq!(out, "busybox:1.36");
    t.finish().await;
}
