//! Gardener's two MCM containers as processes (scenario `gardener`, issue 12 item 7):
//!
//! - **the manager** in split mode, started as Gardener starts its container: program
//!   `./machine-controller-manager` in the binaries' directory with Gardener's exact arguments
//!   ([`gardener_args`]). `--control-kubeconfig=inClusterConfig` reads the pod's service account;
//!   outside a pod the test sets `KUBERNETES_SERVICE_HOST`/`KUBERNETES_SERVICE_PORT` (the sandbox)
//!   and `MCM_SERVICE_ACCOUNT_DIR` (a directory with `token`, `ca.crt`, `namespace`), the
//!   manager's documented stand-in for `/var/run/secrets/kubernetes.io/serviceaccount`;
//! - **the provider sidecar**: our manager in machine-only mode (`--controllers` without the
//!   machine-controller-manager share) with provider-virtual as its gRPC driver, Lease
//!   `machine-controller`, machine-level series on `--machine-metrics-port`.
//!
//! In Gardener both containers share the pod's service account and the generic target
//! kubeconfig. Here every (process, cluster) pair gets its own bearer token so the sandbox's
//! request record (`/sandbox/admin/requesters`) tells them apart; [`GARDENER_ROLE`] and
//! [`GARDENER_TARGET_CLUSTER_ROLE`] are Gardener's grants to check them against
//! (`/work/shared/reference/gardener-deployment.md`, `docs/gardener.md`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use serde::Deserialize;

use crate::admin_http;
use crate::binaries::{bin_dir, binary};
use crate::error::{E2eError, Result};
use crate::process::Process;
use crate::system::System;

/// Token of the manager's control-cluster identity (the pod's service account).
pub const MANAGER_CONTROL_USER: &str = "gardener-mcm-serviceaccount";
/// Token of the manager's target-cluster identity (Gardener's generic token kubeconfig).
pub const MANAGER_TARGET_USER: &str = "gardener-mcm-target";
/// Token of the machine controller's control-cluster identity.
pub const MACHINE_CONTROLLER_CONTROL_USER: &str = "gardener-mc-serviceaccount";
/// Token of the machine controller's target-cluster identity.
pub const MACHINE_CONTROLLER_TARGET_USER: &str = "gardener-mc-target";

/// One rule of an RBAC role: API groups, resources (`plural` or `plural/sub`), verbs.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// API groups (`""` is core).
    pub groups: &'static [&'static str],
    /// Resources.
    pub resources: &'static [&'static str],
    /// Verbs.
    pub verbs: &'static [&'static str],
}

const ALL_WRITE: &[&str] = &[
    "create",
    "get",
    "list",
    "patch",
    "update",
    "watch",
    "delete",
    "deletecollection",
];

/// Gardener's Role for MCM in the shoot namespace of the seed (the control cluster). Leases:
/// `create` for any name, `get`/`watch`/`update` only on `machine-controller` and
/// `machine-controller-manager` (the names are not in the request record; the scenario checks
/// the two Leases themselves).
pub const GARDENER_ROLE: &[Rule] = &[
    Rule {
        groups: &["machine.sapcloud.io"],
        resources: &[
            "machineclasses",
            "machineclasses/status",
            "machinedeployments",
            "machinedeployments/status",
            "machines",
            "machines/status",
            "machinesets",
            "machinesets/status",
        ],
        verbs: ALL_WRITE,
    },
    Rule {
        groups: &[""],
        resources: &["secrets"],
        verbs: ALL_WRITE,
    },
    Rule {
        groups: &["", "events.k8s.io"],
        resources: &["events"],
        verbs: &["get", "list", "create", "patch", "update"],
    },
    Rule {
        groups: &["coordination.k8s.io"],
        resources: &["leases"],
        verbs: &["create", "get", "watch", "update"],
    },
];

/// Gardener's ClusterRole `gardener.cloud:target:machine-controller-manager` in the shoot (the
/// target cluster).
pub const GARDENER_TARGET_CLUSTER_ROLE: &[Rule] = &[
    Rule {
        groups: &[""],
        resources: &[
            "nodes",
            "nodes/status",
            "endpoints",
            "replicationcontrollers",
            "pods",
            "persistentvolumes",
            "persistentvolumeclaims",
        ],
        verbs: ALL_WRITE,
    },
    Rule {
        groups: &[""],
        resources: &["pods/eviction"],
        verbs: &["create"],
    },
    Rule {
        groups: &["apps"],
        resources: &["replicasets", "statefulsets", "daemonsets", "deployments"],
        verbs: ALL_WRITE,
    },
    Rule {
        groups: &["batch"],
        resources: &["jobs", "cronjobs"],
        verbs: ALL_WRITE,
    },
    Rule {
        groups: &["policy"],
        resources: &["poddisruptionbudgets"],
        verbs: &["list", "watch"],
    },
    Rule {
        groups: &["storage.k8s.io"],
        resources: &["volumeattachments"],
        verbs: &["delete", "get", "list", "watch"],
    },
];

/// Gardener's Role in `kube-system` of the shoot (bootstrap token Secrets of the machine
/// controller).
pub const GARDENER_TARGET_KUBE_SYSTEM_ROLE: &[Rule] = &[Rule {
    groups: &[""],
    resources: &["secrets"],
    verbs: &["create", "delete", "get", "list"],
}];

/// Whether Gardener's grants in the shoot (the target cluster) allow `request`: the ClusterRole,
/// or in `kube-system` the Role there.
pub fn granted_in_target(request: &Request) -> bool {
    granted(GARDENER_TARGET_CLUSTER_ROLE, request)
        || (request.namespace == "kube-system"
            && granted(GARDENER_TARGET_KUBE_SYSTEM_ROLE, request))
}

/// One line of the sandbox's request record (`GET /sandbox/admin/requesters`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    /// Bearer token (the identity).
    pub user: String,
    /// User-Agent.
    #[serde(default)]
    pub user_agent: String,
    /// RBAC verb.
    pub verb: String,
    /// API group.
    pub group: String,
    /// Plural resource.
    pub resource: String,
    /// Subresource, empty for none.
    #[serde(default)]
    pub subresource: String,
    /// Namespace, empty for cluster-scoped and all-namespace requests.
    #[serde(default)]
    pub namespace: String,
    /// How many.
    pub count: u64,
}

impl Request {
    /// `resource` or `resource/subresource`.
    pub fn full_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }

    /// Whether the verb changes state.
    pub fn is_write(&self) -> bool {
        !matches!(self.verb.as_str(), "get" | "list" | "watch")
    }

    /// `verb group/resource[/sub] (ns) ×count`, for messages and the report.
    pub fn describe(&self) -> String {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        let ns = if self.namespace.is_empty() {
            "cluster-wide".to_owned()
        } else {
            format!("ns {}", self.namespace)
        };
        format!(
            "{} {group}/{} ({ns}) x{}",
            self.verb,
            self.full_resource(),
            self.count
        )
    }
}

/// Whether `rules` grant `request` (groups, resource with subresource, verb).
pub fn granted(rules: &[Rule], request: &Request) -> bool {
    let resource = request.full_resource();
    rules.iter().any(|rule| {
        rule.groups.contains(&request.group.as_str())
            && rule.resources.contains(&resource.as_str())
            && rule.verbs.contains(&request.verb.as_str())
    })
}

/// The sandbox's request record.
pub async fn requests(system: &System) -> Result<Vec<Request>> {
    let value = system
        .sandbox_admin(::http::Method::GET, "requesters", None)
        .await?;
    serde_json::from_value(value).map_err(E2eError::decode("GET /sandbox/admin/requesters"))
}

/// Gardener's argument list of the `machine-controller-manager` container, with our port and
/// target kubeconfig file.
pub fn gardener_args(namespace: &str, port: u16, target_kubeconfig: &Path) -> Vec<String> {
    vec![
        "--control-kubeconfig=inClusterConfig".to_owned(),
        "--machine-safety-overshooting-period=1m".to_owned(),
        format!("--namespace={namespace}"),
        format!("--port={port}"),
        "--safety-up=2".to_owned(),
        "--safety-down=1".to_owned(),
        format!("--target-kubeconfig={}", target_kubeconfig.display()),
        "--concurrent-syncs=30".to_owned(),
        "--kube-api-qps=150".to_owned(),
        "--kube-api-burst=200".to_owned(),
        "--v=3".to_owned(),
    ]
}

/// The two processes of Gardener's MCM pod.
#[derive(Debug)]
pub struct GardenerPod {
    manager: Process,
    machine_controller: Process,
    /// The manager's `--port` (bound on all addresses, scraped on loopback).
    pub manager_port: SocketAddr,
    /// The machine controller's `--port` (`/readyz`, the share-independent series).
    pub machine_controller_admin: SocketAddr,
    /// The machine controller's `--machine-metrics-port` (Gardener's `providermetrics`).
    pub machine_metrics: SocketAddr,
}

fn free_port() -> Result<SocketAddr> {
    // Bound and released: a small race with other programs, acceptable for a test machine.
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(E2eError::io("bind a free port on", "127.0.0.1"))?;
    listener
        .local_addr()
        .map_err(E2eError::io("read the address of", "127.0.0.1"))
}

/// The sandbox's kubeconfig with `token` as the user's bearer token.
fn kubeconfig_with_token(admin: &str, token: &str) -> Result<String> {
    const ADMIN_TOKEN: &str = "token: sandbox-admin-token";
    if !admin.contains(ADMIN_TOKEN) {
        return Err(E2eError::Assertion(format!(
            "the sandbox kubeconfig has no `{ADMIN_TOKEN}` line to replace"
        )));
    }
    Ok(admin.replace(ADMIN_TOKEN, &format!("token: {token}")))
}

fn write(path: &Path, content: &str) -> Result<()> {
    std::fs::write(path, content).map_err(E2eError::io("write", path))
}

/// The sandbox's address and CA (PEM) read off the kubeconfig.
fn server_and_ca(kubeconfig: &Path) -> Result<(SocketAddr, String)> {
    let fail = |message: String| E2eError::Kubeconfig {
        path: kubeconfig.to_path_buf(),
        message,
    };
    let config =
        kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| fail(e.to_string()))?;
    let cluster = config
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| fail("no cluster".to_owned()))?;
    let server = cluster
        .server
        .as_deref()
        .ok_or_else(|| fail("no server".to_owned()))?;
    let address: SocketAddr = server
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .parse()
        .map_err(|e| fail(format!("server {server}: {e}")))?;
    let data = cluster
        .certificate_authority_data
        .as_deref()
        .ok_or_else(|| fail("no certificate-authority-data (TLS off?)".to_owned()))?;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| fail(format!("certificate-authority-data: {e}")))?;
    let pem = String::from_utf8(pem).map_err(|e| fail(format!("CA is not text: {e}")))?;
    Ok((address, pem))
}

impl GardenerPod {
    /// Starts both processes against `system`'s sandbox (whose own manager must not run) and
    /// waits until both answer `/readyz`.
    pub async fn start(system: &System) -> Result<Self> {
        let dir = system
            .dir()
            .ok_or_else(|| E2eError::Assertion("the gardener pod needs the sandbox".to_owned()))?
            .join("gardener");
        let logs = dir.join("logs");
        let serviceaccount = dir.join("serviceaccount");
        for d in [&logs, &serviceaccount] {
            std::fs::create_dir_all(d).map_err(E2eError::io("create", d))?;
        }
        let socket = system
            .driver_socket()
            .ok_or_else(|| E2eError::Assertion("no driver socket".to_owned()))?;
        let admin_kubeconfig = std::fs::read_to_string(system.kubeconfig())
            .map_err(E2eError::io("read", system.kubeconfig()))?;
        let (api_server, ca) = server_and_ca(system.kubeconfig())?;
        let namespace = system.namespace().to_owned();

        // The manager's service account, as the kubelet projects it into a pod.
        write(&serviceaccount.join("token"), MANAGER_CONTROL_USER)?;
        write(&serviceaccount.join("ca.crt"), &ca)?;
        write(&serviceaccount.join("namespace"), &namespace)?;
        let kubeconfig = |file: &str, token: &str| -> Result<PathBuf> {
            let path = dir.join(file);
            write(&path, &kubeconfig_with_token(&admin_kubeconfig, token)?)?;
            Ok(path)
        };
        let manager_target = kubeconfig("generic-kubeconfig", MANAGER_TARGET_USER)?;
        let mc_control = kubeconfig(
            "machine-controller-control-kubeconfig",
            MACHINE_CONTROLLER_CONTROL_USER,
        )?;
        let mc_target = kubeconfig(
            "machine-controller-target-kubeconfig",
            MACHINE_CONTROLLER_TARGET_USER,
        )?;

        let manager_port = free_port()?;
        let machine_controller_admin = free_port()?;
        let machine_metrics = free_port()?;

        // Built (once, shared with the system) before the relative start below.
        binary("machine-controller-manager")?;
        let manager = Process::start_in(
            "gardener-manager",
            bin_dir()?,
            PathBuf::from("./machine-controller-manager"),
            gardener_args(&namespace, manager_port.port(), &manager_target),
            vec![
                (
                    "KUBERNETES_SERVICE_HOST".into(),
                    api_server.ip().to_string(),
                ),
                (
                    "KUBERNETES_SERVICE_PORT".into(),
                    api_server.port().to_string(),
                ),
                (
                    "MCM_SERVICE_ACCOUNT_DIR".into(),
                    serviceaccount.display().to_string(),
                ),
            ],
            logs.join("manager.log"),
        )?;
        let machine_controller = Process::start(
            "gardener-machine-controller",
            binary("machine-controller-manager")?,
            vec![
                format!("--control-kubeconfig={}", mc_control.display()),
                format!("--target-kubeconfig={}", mc_target.display()),
                format!("--namespace={namespace}"),
                format!("--driver-endpoint=unix://{}", socket.display()),
                // Everything but upstream machine-controller-manager's share: Lease
                // `machine-controller`.
                "--controllers=*,-machineset,-machinedeployment,-machinesafetyovershooting"
                    .to_owned(),
                format!("--address={}", machine_controller_admin.ip()),
                format!("--port={}", machine_controller_admin.port()),
                format!("--machine-metrics-port={}", machine_metrics.port()),
                // Short timeouts so the scenario's machines come and go in seconds.
                "--machine-creation-timeout=3m".to_owned(),
                "--machine-health-timeout=20s".to_owned(),
                "--machine-drain-timeout=60s".to_owned(),
                "--machine-pv-detach-timeout=20s".to_owned(),
                "--machine-safety-orphan-vms-period=30s".to_owned(),
                "--concurrent-syncs=20".to_owned(),
                "--v=3".to_owned(),
            ],
            vec![],
            logs.join("machine-controller.log"),
        )?;
        let mut pod = Self {
            manager,
            machine_controller,
            manager_port: SocketAddr::from(([127, 0, 0, 1], manager_port.port())),
            machine_controller_admin,
            machine_metrics,
        };
        let manager_admin = pod.manager_port;
        wait_ready(&mut pod.manager, manager_admin).await?;
        wait_ready(&mut pod.machine_controller, machine_controller_admin).await?;
        Ok(pod)
    }

    /// Fails when one of the two processes has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        self.manager.check_alive()?;
        self.machine_controller.check_alive()
    }

    /// `/metrics` of the manager's `--port` (Gardener's `metrics`, 10258).
    pub async fn manager_metrics(&self) -> Result<String> {
        admin_http::get_ok(self.manager_port, "/metrics").await
    }

    /// `/metrics` of the machine controller's `--machine-metrics-port` (Gardener's
    /// `providermetrics`, 10259).
    pub async fn machine_metrics(&self) -> Result<String> {
        admin_http::get_ok(self.machine_metrics, "/metrics").await
    }

    /// The split-mode manager's whole log.
    pub fn manager_log(&self) -> Result<String> {
        std::fs::read_to_string(self.manager.log_path())
            .map_err(E2eError::io("read", self.manager.log_path()))
    }

    /// The end of both logs, for a failure report.
    pub fn tails(&self, lines: usize) -> String {
        [&self.manager, &self.machine_controller]
            .iter()
            .map(|p| {
                format!(
                    "----- last lines of {} ({}) -----\n{}",
                    p.name(),
                    p.log_path().display(),
                    p.tail(lines)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Stops both (SIGTERM: each releases its Lease) and returns their exit codes (manager,
    /// machine controller).
    pub async fn stop(&mut self) -> Result<(Option<i32>, Option<i32>)> {
        let grace = Duration::from_secs(40);
        let manager = self.manager.stop(grace).await?;
        let machine_controller = self.machine_controller.stop(grace).await?;
        Ok((manager, machine_controller))
    }
}

async fn wait_ready(process: &mut Process, address: SocketAddr) -> Result<()> {
    let seconds = 90;
    let deadline = tokio::time::Instant::now() + crate::wait::limit(seconds);
    let mut last: String;
    loop {
        process.check_alive()?;
        match admin_http::call(::http::Method::GET, address, "/readyz", None).await {
            Ok(answer) if answer.ok() => return Ok(()),
            Ok(answer) => last = format!("{}: {}", answer.status, answer.body),
            Err(e) => last = e.to_string(),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(E2eError::Timeout {
                what: format!("{} answers /readyz on {address}", process.name()),
                seconds,
                last: format!("{last}\n--- log ---\n{}", process.tail(40)),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn request(verb: &str, group: &str, resource: &str, sub: &str) -> Request {
        Request {
            user: "u".to_owned(),
            user_agent: String::new(),
            verb: verb.to_owned(),
            group: group.to_owned(),
            resource: resource.to_owned(),
            subresource: sub.to_owned(),
            namespace: "ns".to_owned(),
            count: 1,
        }
    }

    #[test]
    fn gardeners_role_has_no_lease_patch_and_grants_machine_status() {
        assert!(granted(
            GARDENER_ROLE,
            &request("update", "coordination.k8s.io", "leases", "")
        ));
        assert!(!granted(
            GARDENER_ROLE,
            &request("patch", "coordination.k8s.io", "leases", "")
        ));
        assert!(!granted(
            GARDENER_ROLE,
            &request("list", "coordination.k8s.io", "leases", "")
        ));
        assert!(granted(
            GARDENER_ROLE,
            &request("patch", "machine.sapcloud.io", "machines", "status")
        ));
        assert!(!granted(GARDENER_ROLE, &request("get", "", "nodes", "")));
        assert!(granted(
            GARDENER_TARGET_CLUSTER_ROLE,
            &request("create", "", "pods", "eviction")
        ));
        assert!(!granted(
            GARDENER_TARGET_CLUSTER_ROLE,
            &request("create", "policy", "poddisruptionbudgets", "")
        ));
        let mut token = request("create", "", "secrets", "");
        assert!(!granted_in_target(&token), "secrets only in kube-system");
        token.namespace = "kube-system".to_owned();
        assert!(granted_in_target(&token));
        token.verb = "update".to_owned();
        assert!(!granted_in_target(&token));
    }

    #[test]
    fn gardeners_arguments_are_exact() {
        let args = gardener_args("shoot--p--s", 10258, Path::new("/k"));
        assert_eq!(
            args.join(" "),
            "--control-kubeconfig=inClusterConfig --machine-safety-overshooting-period=1m \
             --namespace=shoot--p--s --port=10258 --safety-up=2 --safety-down=1 \
             --target-kubeconfig=/k --concurrent-syncs=30 --kube-api-qps=150 \
             --kube-api-burst=200 --v=3"
        );
    }

    #[test]
    fn token_replaced() {
        let k = "users:\n- name: a\n  user:\n    token: sandbox-admin-token\n";
        assert!(
            kubeconfig_with_token(k, "x")
                .unwrap()
                .contains("token: x\n")
        );
        assert!(kubeconfig_with_token("no token", "x").is_err());
    }
}
