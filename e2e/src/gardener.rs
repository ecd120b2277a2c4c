//! Gardener's two MCM containers as processes (scenario `gardener`):
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
//! kubeconfig. Here every (process, cluster) pair is a ServiceAccount of its own ([`Identities`],
//! tokens from the TokenRequest API) so that the sandbox's request record
//! (`/sandbox/admin/requesters`) tells them apart by user name. Each holds exactly Gardener's
//! grants, created from [`GARDENER_ROLE`], [`GARDENER_TARGET_CLUSTER_ROLE`] and
//! [`GARDENER_TARGET_KUBE_SYSTEM_ROLE`] (`docs/behaviour.md#gardener-deployment`,
//! `docs/gardener.md`), plus what kube-apiserver's bootstrap policy gives every authenticated
//! user (discovery, `/version`, health); the sandbox enforces them, so a missing grant is a 403.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use serde::Deserialize;

use crate::admin_http;
use crate::binaries::{bin_dir, binary};
use crate::error::{E2eError, Result};
use crate::ports::free_port;
use crate::process::Process;
use crate::system::System;

/// ServiceAccount of the manager's control-cluster identity (the pod's service account), in the
/// control namespace.
pub const MANAGER_SERVICE_ACCOUNT: &str = "gardener-mcm";
/// ServiceAccount of the manager's target-cluster identity (Gardener's generic token
/// kubeconfig), in [`TARGET_NAMESPACE`].
pub const MANAGER_TARGET_SERVICE_ACCOUNT: &str = "gardener-mcm-target";
/// ServiceAccount of the machine controller's control-cluster identity, in the control namespace.
pub const MACHINE_CONTROLLER_SERVICE_ACCOUNT: &str = "gardener-mc";
/// ServiceAccount of the machine controller's target-cluster identity, in [`TARGET_NAMESPACE`].
pub const MACHINE_CONTROLLER_TARGET_SERVICE_ACCOUNT: &str = "gardener-mc-target";
/// Namespace of the target identities: Gardener's generic token kubeconfig is a ServiceAccount in
/// the shoot's `kube-system`.
pub const TARGET_NAMESPACE: &str = "kube-system";
/// Name of the scenario's Role (control namespace), ClusterRole and `kube-system` Role, and of
/// their bindings; unique to the scenario so no other identity gains or loses anything.
pub const ROLE_NAME: &str = "e2e-gardener:machine-controller-manager";

/// The user name kube-apiserver gives a ServiceAccount's tokens.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// One rule of an RBAC role: API groups, resources (`plural` or `plural/sub`), verbs, and the
/// object names it is limited to.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// API groups (`""` is core).
    pub groups: &'static [&'static str],
    /// Resources.
    pub resources: &'static [&'static str],
    /// Verbs.
    pub verbs: &'static [&'static str],
    /// `resourceNames`; empty for any name.
    pub names: &'static [&'static str],
}

impl Rule {
    /// The rule as an RBAC `PolicyRule`.
    pub fn policy_rule(&self) -> PolicyRule {
        let strings = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        PolicyRule {
            api_groups: Some(strings(self.groups)),
            resources: Some(strings(self.resources)),
            verbs: strings(self.verbs),
            resource_names: (!self.names.is_empty()).then(|| strings(self.names)),
            non_resource_urls: None,
        }
    }
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
/// `machine-controller-manager` (the names are not in the request record, so [`granted`] ignores
/// them; the sandbox enforces them, and the scenario checks the two Leases themselves).
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
        names: &[],
    },
    Rule {
        groups: &[""],
        resources: &["secrets"],
        verbs: ALL_WRITE,
        names: &[],
    },
    Rule {
        groups: &["", "events.k8s.io"],
        resources: &["events"],
        verbs: &["get", "list", "create", "patch", "update"],
        names: &[],
    },
    Rule {
        groups: &["coordination.k8s.io"],
        resources: &["leases"],
        verbs: &["create"],
        names: &[],
    },
    Rule {
        groups: &["coordination.k8s.io"],
        resources: &["leases"],
        verbs: &["get", "watch", "update"],
        names: &["machine-controller", "machine-controller-manager"],
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
        names: &[],
    },
    Rule {
        groups: &[""],
        resources: &["pods/eviction"],
        verbs: &["create"],
        names: &[],
    },
    Rule {
        groups: &["apps"],
        resources: &["replicasets", "statefulsets", "daemonsets", "deployments"],
        verbs: ALL_WRITE,
        names: &[],
    },
    Rule {
        groups: &["batch"],
        resources: &["jobs", "cronjobs"],
        verbs: ALL_WRITE,
        names: &[],
    },
    Rule {
        groups: &["policy"],
        resources: &["poddisruptionbudgets"],
        verbs: &["list", "watch"],
        names: &[],
    },
    Rule {
        groups: &["storage.k8s.io"],
        resources: &["volumeattachments"],
        verbs: &["delete", "get", "list", "watch"],
        names: &[],
    },
];

/// Gardener's Role in `kube-system` of the shoot (bootstrap token Secrets of the machine
/// controller).
pub const GARDENER_TARGET_KUBE_SYSTEM_ROLE: &[Rule] = &[Rule {
    groups: &[""],
    resources: &["secrets"],
    verbs: &["create", "delete", "get", "list"],
    names: &[],
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
    /// User name as authentication identified it (`system:serviceaccount:<ns>:<name>`).
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

/// The user names of the four (process, cluster) identities, as the sandbox records them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identities {
    /// The manager in the control cluster (the pod's service account).
    pub manager_control: String,
    /// The manager in the target cluster (the generic token kubeconfig).
    pub manager_target: String,
    /// The machine controller in the control cluster.
    pub machine_controller_control: String,
    /// The machine controller in the target cluster.
    pub machine_controller_target: String,
}

impl Identities {
    /// The identities of ServiceAccounts in `control_namespace` and [`TARGET_NAMESPACE`].
    pub fn new(control_namespace: &str) -> Self {
        Self {
            manager_control: service_account_user(control_namespace, MANAGER_SERVICE_ACCOUNT),
            manager_target: service_account_user(TARGET_NAMESPACE, MANAGER_TARGET_SERVICE_ACCOUNT),
            machine_controller_control: service_account_user(
                control_namespace,
                MACHINE_CONTROLLER_SERVICE_ACCOUNT,
            ),
            machine_controller_target: service_account_user(
                TARGET_NAMESPACE,
                MACHINE_CONTROLLER_TARGET_SERVICE_ACCOUNT,
            ),
        }
    }

    /// All four user names.
    pub fn all(&self) -> [&str; 4] {
        [
            &self.manager_control,
            &self.manager_target,
            &self.machine_controller_control,
            &self.machine_controller_target,
        ]
    }
}

/// Bearer tokens of the four identities (TokenRequest API).
struct Tokens {
    manager_control: String,
    manager_target: String,
    machine_controller_control: String,
    machine_controller_target: String,
}

/// Creates `object` unless one of that name exists (a rerun against the same cluster).
async fn create_if_absent<K>(api: &Api<K>, what: &str, object: &K) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(E2eError::kube(format!("create {what}"))(e)),
    }
}

fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        ..Default::default()
    }
}

fn service_account_subject(namespace: &str, name: &str) -> Subject {
    Subject {
        kind: "ServiceAccount".to_owned(),
        name: name.to_owned(),
        namespace: Some(namespace.to_owned()),
        api_group: None,
    }
}

fn rules(rules: &[Rule]) -> Vec<PolicyRule> {
    rules.iter().map(Rule::policy_rule).collect()
}

/// A token of ServiceAccount `namespace/name` from its TokenRequest subresource, as the kubelet
/// obtains the projected token of a pod (and Gardener the generic token kubeconfig's).
async fn token(client: &kube::Client, namespace: &str, name: &str) -> Result<String> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            // One day: longer than any run of the scenario.
            expiration_seconds: Some(86_400),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .map_err(E2eError::kube(format!(
            "create serviceaccounts/{name}/token in {namespace}"
        )))?;
    answer
        .status
        .map(|s| s.token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            E2eError::Assertion(format!(
                "TokenRequest of {namespace}/{name} answered no token"
            ))
        })
}

/// Creates the four ServiceAccounts and Gardener's grants for them: [`GARDENER_ROLE`] as a Role
/// in the control namespace bound to both control identities, [`GARDENER_TARGET_CLUSTER_ROLE`]
/// as a ClusterRole and [`GARDENER_TARGET_KUBE_SYSTEM_ROLE`] as a Role in `kube-system`, both
/// bound to both target identities (in Gardener both containers share each identity, so both get
/// the same grants). Nothing else is granted beyond the bootstrap policy every authenticated user
/// has. Returns their tokens.
async fn create_identities(system: &System) -> Result<Tokens> {
    let client = system.client();
    let control = system.namespace();
    let control_subjects = vec![
        service_account_subject(control, MANAGER_SERVICE_ACCOUNT),
        service_account_subject(control, MACHINE_CONTROLLER_SERVICE_ACCOUNT),
    ];
    let target_subjects = vec![
        service_account_subject(TARGET_NAMESPACE, MANAGER_TARGET_SERVICE_ACCOUNT),
        service_account_subject(TARGET_NAMESPACE, MACHINE_CONTROLLER_TARGET_SERVICE_ACCOUNT),
    ];
    for subject in control_subjects.iter().chain(&target_subjects) {
        let namespace = subject.namespace.as_deref().unwrap_or(control);
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
        let account = ServiceAccount {
            metadata: meta(&subject.name, Some(namespace)),
            ..Default::default()
        };
        let what = format!("ServiceAccount {namespace}/{}", subject.name);
        create_if_absent(&accounts, &what, &account).await?;
    }
    let role_ref = |kind: &str| RoleRef {
        api_group: "rbac.authorization.k8s.io".to_owned(),
        kind: kind.to_owned(),
        name: ROLE_NAME.to_owned(),
    };
    for (namespace, role_rules, subjects) in [
        (control, GARDENER_ROLE, &control_subjects),
        (
            TARGET_NAMESPACE,
            GARDENER_TARGET_KUBE_SYSTEM_ROLE,
            &target_subjects,
        ),
    ] {
        let role = Role {
            metadata: meta(ROLE_NAME, Some(namespace)),
            rules: Some(rules(role_rules)),
        };
        let roles: Api<Role> = Api::namespaced(client.clone(), namespace);
        create_if_absent(&roles, &format!("Role {namespace}/{ROLE_NAME}"), &role).await?;
        let binding = RoleBinding {
            metadata: meta(ROLE_NAME, Some(namespace)),
            role_ref: role_ref("Role"),
            subjects: Some(subjects.clone()),
        };
        let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), namespace);
        let what = format!("RoleBinding {namespace}/{ROLE_NAME}");
        create_if_absent(&bindings, &what, &binding).await?;
    }
    let cluster_role = ClusterRole {
        metadata: meta(ROLE_NAME, None),
        rules: Some(rules(GARDENER_TARGET_CLUSTER_ROLE)),
        aggregation_rule: None,
    };
    let what = format!("ClusterRole {ROLE_NAME}");
    create_if_absent(&Api::all(client.clone()), &what, &cluster_role).await?;
    let cluster_binding = ClusterRoleBinding {
        metadata: meta(ROLE_NAME, None),
        role_ref: role_ref("ClusterRole"),
        subjects: Some(target_subjects),
    };
    let what = format!("ClusterRoleBinding {ROLE_NAME}");
    create_if_absent(&Api::all(client.clone()), &what, &cluster_binding).await?;
    Ok(Tokens {
        manager_control: token(&client, control, MANAGER_SERVICE_ACCOUNT).await?,
        manager_target: token(&client, TARGET_NAMESPACE, MANAGER_TARGET_SERVICE_ACCOUNT).await?,
        machine_controller_control: token(&client, control, MACHINE_CONTROLLER_SERVICE_ACCOUNT)
            .await?,
        machine_controller_target: token(
            &client,
            TARGET_NAMESPACE,
            MACHINE_CONTROLLER_TARGET_SERVICE_ACCOUNT,
        )
        .await?,
    })
}

/// Deletes what [`GardenerPod::start`] created for the identities (ServiceAccounts, roles,
/// bindings); absent objects are fine. Call after the processes stopped: they lose their grants.
pub async fn delete_identities(system: &System) -> Result<()> {
    let client = system.client();
    let control = system.namespace();
    let params = DeleteParams::default();
    // 404 is the goal state, not an error.
    let gone = |r: std::result::Result<(), kube::Error>, what: String| match r {
        Ok(()) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(E2eError::kube(format!("delete {what}"))(e)),
    };
    for (namespace, name) in [
        (control, MANAGER_SERVICE_ACCOUNT),
        (control, MACHINE_CONTROLLER_SERVICE_ACCOUNT),
        (TARGET_NAMESPACE, MANAGER_TARGET_SERVICE_ACCOUNT),
        (TARGET_NAMESPACE, MACHINE_CONTROLLER_TARGET_SERVICE_ACCOUNT),
    ] {
        let api: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
        let r = api.delete(name, &params).await.map(|_| ());
        gone(r, format!("ServiceAccount {namespace}/{name}"))?;
    }
    for namespace in [control, TARGET_NAMESPACE] {
        let api: Api<RoleBinding> = Api::namespaced(client.clone(), namespace);
        let r = api.delete(ROLE_NAME, &params).await.map(|_| ());
        gone(r, format!("RoleBinding {namespace}/{ROLE_NAME}"))?;
        let api: Api<Role> = Api::namespaced(client.clone(), namespace);
        let r = api.delete(ROLE_NAME, &params).await.map(|_| ());
        gone(r, format!("Role {namespace}/{ROLE_NAME}"))?;
    }
    let api: Api<ClusterRoleBinding> = Api::all(client.clone());
    let r = api.delete(ROLE_NAME, &params).await.map(|_| ());
    gone(r, format!("ClusterRoleBinding {ROLE_NAME}"))?;
    let api: Api<ClusterRole> = Api::all(client);
    let r = api.delete(ROLE_NAME, &params).await.map(|_| ());
    gone(r, format!("ClusterRole {ROLE_NAME}"))
}

/// 403 answers per user so far (`GET /sandbox/admin/denials`).
pub async fn denials(system: &System) -> Result<std::collections::BTreeMap<String, u64>> {
    let value = system
        .sandbox_admin(::http::Method::GET, "denials", None)
        .await?;
    serde_json::from_value(value).map_err(E2eError::decode("GET /sandbox/admin/denials"))
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
    /// Whom the sandbox sees as each process in each cluster.
    pub identities: Identities,
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

        let tokens = create_identities(system).await?;
        // The manager's service account, as the kubelet projects it into a pod.
        write(&serviceaccount.join("token"), &tokens.manager_control)?;
        write(&serviceaccount.join("ca.crt"), &ca)?;
        write(&serviceaccount.join("namespace"), &namespace)?;
        let kubeconfig = |file: &str, token: &str| -> Result<PathBuf> {
            let path = dir.join(file);
            write(&path, &kubeconfig_with_token(&admin_kubeconfig, token)?)?;
            Ok(path)
        };
        let manager_target = kubeconfig("generic-kubeconfig", &tokens.manager_target)?;
        let mc_control = kubeconfig(
            "machine-controller-control-kubeconfig",
            &tokens.machine_controller_control,
        )?;
        let mc_target = kubeconfig(
            "machine-controller-target-kubeconfig",
            &tokens.machine_controller_target,
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
            identities: Identities::new(&namespace),
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
    fn lease_names_limit_only_get_watch_update() {
        let leases: Vec<PolicyRule> = GARDENER_ROLE
            .iter()
            .filter(|r| r.resources.contains(&"leases"))
            .map(Rule::policy_rule)
            .collect();
        assert_eq!(leases.len(), 2);
        assert_eq!(leases[0].verbs, ["create"]);
        assert_eq!(leases[0].resource_names, None, "create: any name");
        assert_eq!(leases[1].verbs, ["get", "watch", "update"]);
        assert_eq!(
            leases[1].resource_names.as_deref(),
            Some(
                &[
                    "machine-controller".to_owned(),
                    "machine-controller-manager".to_owned()
                ][..]
            )
        );
        assert_eq!(
            Identities::new("shoot--p--s").all()[0],
            "system:serviceaccount:shoot--p--s:gardener-mcm"
        );
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
