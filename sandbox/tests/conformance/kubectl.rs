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

    // The default the mutating webhook applies is what explain says.
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

/// kubectl's typed clients send protobuf: every `kubectl create <kind>` subcommand for a kind the
/// sandbox serves works (kube-apiserver accepts protobuf for every built-in kind), and the stored
/// object has what the command set. Kinds without a subcommand go through `kubectl create -f`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_works_for_every_served_builtin_kind() {
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
    let sfx = crate::common::unique_suffix();
    let (cr, crb) = (format!("kc-reader-{sfx}"), format!("kc-readers-{sfx}"));
    let (agg, ns2) = (format!("kc-agg-{sfx}"), format!("kc-ns-{sfx}"));
    let commands: Vec<(Vec<String>, &str)> = vec![
        (vec!["namespace".into(), ns2.clone()], "namespace/"),
        (
            vec!["configmap".into(), "cm".into(), "--from-literal=k=v".into()],
            "configmap/cm",
        ),
        (
            vec![
                "secret".into(),
                "generic".into(),
                "s1".into(),
                "--from-literal=k=v".into(),
            ],
            "secret/s1",
        ),
        (
            vec![
                "secret".into(),
                "docker-registry".into(),
                "s2".into(),
                "--docker-server=r.example".into(),
                "--docker-username=u".into(),
                "--docker-password=p".into(),
            ],
            "secret/s2",
        ),
        (
            vec!["serviceaccount".into(), "sa".into()],
            "serviceaccount/sa",
        ),
        (
            vec![
                "service".into(),
                "clusterip".into(),
                "svc1".into(),
                "--tcp=80:8080".into(),
            ],
            "service/svc1",
        ),
        (
            vec![
                "service".into(),
                "nodeport".into(),
                "svc2".into(),
                "--tcp=81:8081".into(),
            ],
            "service/svc2",
        ),
        (
            vec![
                "service".into(),
                "externalname".into(),
                "svc3".into(),
                "--external-name=db.example".into(),
            ],
            "service/svc3",
        ),
        (
            vec![
                "deployment".into(),
                "web".into(),
                "--image=busybox:1.36".into(),
                "--replicas=0".into(),
            ],
            "deployment.apps/web",
        ),
        (
            vec![
                "poddisruptionbudget".into(),
                "pdb".into(),
                "--selector=app=web".into(),
                "--min-available=1".into(),
            ],
            "poddisruptionbudget.policy/pdb",
        ),
        (
            vec![
                "role".into(),
                "pod-reader".into(),
                "--verb=get,list".into(),
                "--resource=pods".into(),
                "--resource-name=p1".into(),
            ],
            "role.rbac.authorization.k8s.io/pod-reader",
        ),
        (
            vec![
                "rolebinding".into(),
                "pod-readers".into(),
                "--role=pod-reader".into(),
                "--user=alice".into(),
                format!("--serviceaccount={ns}:sa"),
            ],
            "rolebinding.rbac.authorization.k8s.io/pod-readers",
        ),
        (
            vec![
                "clusterrole".into(),
                cr.clone(),
                "--verb=get".into(),
                "--resource=nodes".into(),
                "--non-resource-url=/healthz".into(),
                "--verb=get".into(),
            ],
            "clusterrole.rbac.authorization.k8s.io/",
        ),
        (
            vec![
                "clusterrole".into(),
                agg.clone(),
                "--aggregation-rule=agg=true".into(),
            ],
            "clusterrole.rbac.authorization.k8s.io/",
        ),
        (
            vec![
                "clusterrolebinding".into(),
                crb.clone(),
                format!("--clusterrole={cr}"),
                "--group=devs".into(),
            ],
            "clusterrolebinding.rbac.authorization.k8s.io/",
        ),
    ];
    for (args, expect) in &commands {
        let mut all: Vec<&str> = vec!["create"];
        all.extend(args.iter().map(String::as_str));
        all.extend(["-n", ns]);
        let out = k.ok(&all).await;
        assert!(
            out.contains(expect) && out.contains("created"),
            "kubectl create {}: {out}",
            args.join(" ")
        );
    }
    let json_of =
        |out: String| -> serde_json::Value { serde_json::from_str(&out).expect("kubectl -o json") };
    let role = json_of(
        k.ok(&["get", "role", "pod-reader", "-n", ns, "-o", "json"])
            .await,
    );
    assert_eq!(
        role["rules"],
        serde_json::json!([{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["p1"]}])
    );
    let rb = json_of(
        k.ok(&["get", "rolebinding", "pod-readers", "-n", ns, "-o", "json"])
            .await,
    );
    assert_eq!(
        rb["roleRef"],
        serde_json::json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"})
    );
    assert_eq!(
        rb["subjects"],
        serde_json::json!([
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"},
            {"kind": "ServiceAccount", "name": "sa", "namespace": ns}
        ])
    );
    let c = json_of(k.ok(&["get", "clusterrole", &cr, "-o", "json"]).await);
    assert_eq!(c["rules"][0]["resources"], serde_json::json!(["nodes"]));
    assert_eq!(
        c["rules"][1]["nonResourceURLs"],
        serde_json::json!(["/healthz"])
    );
    let a = json_of(k.ok(&["get", "clusterrole", &agg, "-o", "json"]).await);
    assert_eq!(
        a["aggregationRule"]["clusterRoleSelectors"],
        serde_json::json!([{"matchLabels": {"agg": "true"}}])
    );
    let b = json_of(
        k.ok(&["get", "clusterrolebinding", &crb, "-o", "json"])
            .await,
    );
    assert_eq!(b["roleRef"]["name"], serde_json::json!(cr));
    assert_eq!(b["subjects"][0]["name"], "devs");
    let svc = json_of(
        k.ok(&["get", "service", "svc2", "-n", ns, "-o", "json"])
            .await,
    );
    assert_eq!(svc["spec"]["type"], "NodePort");
    assert_eq!(svc["spec"]["ports"][0]["port"], 81);
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 8081);
    let svc = json_of(
        k.ok(&["get", "service", "svc3", "-n", ns, "-o", "json"])
            .await,
    );
    assert_eq!(svc["spec"]["externalName"], "db.example");
    let s2 = json_of(k.ok(&["get", "secret", "s2", "-n", ns, "-o", "json"]).await);
    assert_eq!(s2["type"], "kubernetes.io/dockerconfigjson");
    // kubectl run builds a Pod with its typed client too.
    let out = k
        .ok(&[
            "run",
            "runner",
            "--image=busybox:1.36",
            "--restart=Never",
            "-n",
            ns,
        ])
        .await;
    assert!(out.contains("pod/runner created"), "{out}");

    // The kinds without a create subcommand, from YAML.
    let node = format!("kc-node-{sfx}");
    let pv = format!("kc-pv-{sfx}");
    let sc = format!("kc-sc-{sfx}");
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: p1, namespace: {ns}}}
spec: {{containers: [{{name: c, image: busybox}}]}}
---
apiVersion: v1
kind: Node
metadata: {{name: {node}}}
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {{name: l1, namespace: {ns}}}
spec: {{holderIdentity: me, leaseDurationSeconds: 10}}
---
apiVersion: v1
kind: Endpoints
metadata: {{name: svc1, namespace: {ns}}}
---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: {pv}}}
spec: {{capacity: {{storage: 1Gi}}, accessModes: [ReadWriteOnce], hostPath: {{path: /tmp}}}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: pvc1, namespace: {ns}}}
spec: {{accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 1Gi}}}}}}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {{name: {sc}}}
provisioner: example.com/none
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {{name: rs1, namespace: {ns}}}
spec:
  replicas: 0
  selector: {{matchLabels: {{app: rs1}}}}
  template: {{metadata: {{labels: {{app: rs1}}}}, spec: {{containers: [{{name: c, image: busybox}}]}}}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: ss1, namespace: {ns}}}
spec:
  replicas: 0
  serviceName: svc1
  selector: {{matchLabels: {{app: ss1}}}}
  template: {{metadata: {{labels: {{app: ss1}}}}, spec: {{containers: [{{name: c, image: busybox}}]}}}}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: ds1, namespace: {ns}}}
spec:
  selector: {{matchLabels: {{app: ds1}}}}
  template: {{metadata: {{labels: {{app: ds1}}}}, spec: {{containers: [{{name: c, image: busybox}}]}}}}
---
apiVersion: v1
kind: Event
metadata: {{name: e1, namespace: {ns}}}
involvedObject: {{kind: Pod, name: p1, namespace: {ns}}}
reason: Test
message: hello
"#
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("kinds.yaml");
    std::fs::write(&path, manifest).expect("write manifest");
    let out = k.ok(&["create", "-f", &path.display().to_string()]).await;
    for expect in [
        "pod/p1 created",
        "node/",
        "lease.coordination.k8s.io/l1 created",
        "endpoints/svc1 created",
        "persistentvolume/",
        "persistentvolumeclaim/pvc1 created",
        "storageclass.storage.k8s.io/",
        "replicaset.apps/rs1 created",
        "statefulset.apps/ss1 created",
        "daemonset.apps/ds1 created",
        "event/e1 created",
    ] {
        assert!(out.contains(expect), "missing {expect:?} in:\n{out}");
    }
    for (kind, name) in [
        ("clusterrole", cr.as_str()),
        ("clusterrole", agg.as_str()),
        ("clusterrolebinding", crb.as_str()),
        ("namespace", ns2.as_str()),
        ("node", node.as_str()),
        ("persistentvolume", pv.as_str()),
        ("storageclass", sc.as_str()),
    ] {
        k.ok(&["delete", kind, name, "--wait=false"]).await;
    }
    t.finish().await;
}
