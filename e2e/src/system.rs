//! The system under test: either the four real binaries started as processes against a fresh
//! sandbox API server (the default), or an existing cluster where the Helm chart is installed
//! (`MCM_E2E_KUBECONFIG`, namespace `MCM_E2E_NAMESPACE`, default `machine-controller-manager`).
//!
//! Sandbox start-up, in order: `mcm-sandbox serve` (ready on `/readyz`); the scenario namespace,
//! the CRDs of `mcm_api::crd` serving `v1alpha1` and `v1beta1` with a conversion webhook at
//! `https://localhost:<port>/convert`, and both webhook configurations with `url` clientConfigs;
//! `machine-webhook` in self-managed certificate mode, which injects its CA into those
//! configurations and CRDs (ready on the admin `/readyz` once it serves a certificate);
//! `provider-virtual` on a Unix socket with the sandbox as target cluster (`/healthz`);
//! `machine-controller-manager` with short timeouts (admin `/readyz`). The sandbox is both the
//! control and the target cluster. Logs go to `<tempdir>/logs/<component>.log`; on failure
//! [`System::report_failure`] prints their ends and keeps the directory.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::admin_http;
use crate::binaries::{binary, go_provider};
use crate::control_plane::{ApiServerKind, ControlPlane};
use crate::error::{E2eError, Result};
use crate::ports::free_port;
use crate::process::Process;
use crate::wait::{Probe, eventually};

/// Name of the Secret (user data) every MachineClass of the scenarios references.
pub const USERDATA_SECRET: &str = "e2e-userdata";
/// Namespace of the webhook's certificate Secret and Lease in sandbox mode.
const WEBHOOK_NAMESPACE: &str = "mcm-system";
/// Name of both webhook configurations in sandbox mode (the chart's `fullname`, which its
/// caBundle ClusterRole names).
const WEBHOOK_CONFIGURATION: &str = "machine-controller-manager";
/// The webhook's Service, as the chart names it; the sandbox maps it to the local webhook port.
const WEBHOOK_SERVICE: &str = "machine-controller-manager-webhook";
/// The four kinds: (singular used in webhook paths, plural).
const KINDS: [(&str, &str); 4] = [
    ("machine", "machines"),
    ("machineset", "machinesets"),
    ("machinedeployment", "machinedeployments"),
    ("machineclass", "machineclasses"),
];

/// Settings of a sandbox system.
#[derive(Debug, Clone)]
pub struct SystemConfig {
    /// A short name for messages and the temp dir (`shared`, `disruptive`).
    pub name: String,
    /// Namespace of the Machine objects (the manager's `--namespace`).
    pub namespace: String,
    /// Extra flags of the manager, after the wiring flags (later flags win).
    pub manager_flags: Vec<String>,
    /// Whether the system starts its manager (a scenario that starts its own, e.g. `gardener`,
    /// sets `false`).
    pub start_manager: bool,
    /// Whether the CRDs also serve `v1beta1` through the conversion webhook (default); `false`
    /// installs the v1alpha1-only CRDs, as the chart's default and `make run` do.
    pub serve_v1beta1: bool,
    /// Extra flags of `mcm-sandbox serve` (e.g. `--node-monitor-grace-period=30s`).
    pub sandbox_flags: Vec<String>,
    /// The driver behind the manager's gRPC endpoint.
    pub provider: ProviderKind,
}

/// The driver a system runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ProviderKind {
    /// provider-virtual (Rust), MachineClass provider `virtual`.
    #[default]
    Virtual,
    /// The Go in-memory provider (upstream's `driver.Driver`) behind the Go bridge of
    /// `provider-go/`, MachineClass provider `Memory`. Its admin address serves `/healthz` and
    /// `/admin/vms` only.
    GoBridge,
}

impl SystemConfig {
    /// Defaults: namespace `e2e`, the short timeouts of [`default_manager_flags`].
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            namespace: "e2e".to_owned(),
            manager_flags: default_manager_flags(),
            start_manager: true,
            serve_v1beta1: true,
            sandbox_flags: Vec::new(),
            provider: ProviderKind::Virtual,
        }
    }
}

/// Short timeouts and periods so every scenario finishes in seconds to a minute on 2 cores.
pub fn default_manager_flags() -> Vec<String> {
    [
        "--machine-creation-timeout=3m",
        "--machine-health-timeout=20s",
        "--machine-drain-timeout=60s",
        "--machine-pv-detach-timeout=20s",
        "--machine-safety-orphan-vms-period=5s",
        "--machine-safety-overshooting-period=2s",
        "--machine-safety-apiserver-statuscheck-timeout=4s",
        "--machine-safety-apiserver-statuscheck-period=4s",
        // One manager per sandbox: no standby to hand over to, and on a loaded 2-core machine
        // lease reads can time out and stop the only manager (see the README).
        "--leader-elect=false",
        "--concurrent-syncs=20",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// Loopback addresses of the processes' listeners.
#[derive(Debug, Clone, Copy)]
pub struct Addresses {
    /// Webhook HTTPS.
    pub webhook: SocketAddr,
    /// Webhook admin (`/readyz`).
    pub webhook_admin: SocketAddr,
    /// provider-virtual metrics and `/admin`.
    pub provider_admin: SocketAddr,
    /// Manager admin (`/readyz`, `/metrics`).
    pub manager_admin: SocketAddr,
}

/// The API server of a system whose processes run here.
#[derive(Debug)]
enum ApiServer {
    /// `mcm-sandbox serve`.
    Sandbox(Process),
    /// A real control plane of `scripts/control-plane.sh`.
    Kube(ControlPlane),
}

/// The processes of a system started here, in start order.
#[derive(Debug)]
struct Processes {
    api: ApiServer,
    webhook: Process,
    provider: Process,
    manager: Option<Process>,
}

impl Processes {
    fn manager(&mut self) -> Result<&mut Process> {
        self.manager.as_mut().ok_or_else(|| E2eError::Process {
            name: "manager".to_owned(),
            message: "was never started".to_owned(),
        })
    }
}

/// A running system (processes started here against the sandbox or a real control plane, or an
/// existing cluster).
pub struct System {
    name: String,
    namespace: String,
    kubeconfig: PathBuf,
    client: kube::Client,
    api_kind: ApiServerKind,
    sandbox: Option<SandboxParts>,
}

struct SandboxParts {
    dir: Option<tempfile::TempDir>,
    dir_path: PathBuf,
    addresses: Addresses,
    socket: PathBuf,
    processes: Mutex<Processes>,
}

impl std::fmt::Debug for System {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("System")
            .field("name", &self.name)
            .field("namespace", &self.namespace)
            .field("kubeconfig", &self.kubeconfig)
            .field("sandbox", &self.sandbox.is_some())
            .finish()
    }
}

/// The kubeconfig of an existing cluster when `MCM_E2E_KUBECONFIG` is set.
pub fn cluster_kubeconfig() -> Option<PathBuf> {
    std::env::var_os("MCM_E2E_KUBECONFIG")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// A kube client for a kubeconfig file.
pub async fn client_for(kubeconfig: &Path) -> Result<kube::Client> {
    let fail = |message: String| E2eError::Kubeconfig {
        path: kubeconfig.to_path_buf(),
        message,
    };
    let config =
        kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| fail(e.to_string()))?;
    let config =
        kube::Config::from_custom_kubeconfig(config, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| fail(e.to_string()))?;
    kube::Client::try_from(config).map_err(|e| fail(e.to_string()))
}

impl System {
    /// Starts a sandbox system, or connects to the cluster of `MCM_E2E_KUBECONFIG`.
    pub async fn start(config: SystemConfig) -> Result<Self> {
        match cluster_kubeconfig() {
            Some(kubeconfig) => Self::connect(&config.name, kubeconfig).await,
            None => Self::start_sandbox(config).await,
        }
    }

    /// Uses an existing cluster where the chart is installed.
    async fn connect(name: &str, kubeconfig: PathBuf) -> Result<Self> {
        let namespace = std::env::var("MCM_E2E_NAMESPACE")
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "machine-controller-manager".to_owned());
        let client = client_for(&kubeconfig).await?;
        let system = Self {
            name: name.to_owned(),
            namespace,
            kubeconfig,
            client,
            api_kind: ApiServerKind::Sandbox,
            sandbox: None,
        };
        let crds: Api<CustomResourceDefinition> = Api::all(system.client.clone());
        crds.get("machines.machine.sapcloud.io")
            .await
            .map_err(E2eError::kube(
                "get CRD machines.machine.sapcloud.io (is the chart installed?)",
            ))?;
        system.ensure_userdata_secret().await?;
        println!(
            "mcm-e2e[{name}]: using the cluster of {} (namespace {})",
            system.kubeconfig.display(),
            system.namespace
        );
        Ok(system)
    }

    async fn start_sandbox(config: SystemConfig) -> Result<Self> {
        let api_kind = ApiServerKind::from_env()?;
        let sandbox_bin = binary("mcm-sandbox")?;
        let webhook_bin = binary("machine-webhook")?;
        let provider_bin = match config.provider {
            ProviderKind::Virtual => binary("provider-virtual")?,
            ProviderKind::GoBridge => go_provider()?,
        };
        let manager_bin = binary("machine-controller-manager")?;
        let dir = tempfile::Builder::new()
            .prefix(&format!("mcm-e2e-{}-", config.name))
            .tempdir()
            .map_err(E2eError::io("create a temp dir in", std::env::temp_dir()))?;
        let dir_path = dir.path().to_path_buf();
        let logs = dir_path.join("logs");
        std::fs::create_dir_all(&logs).map_err(E2eError::io("create", &logs))?;
        std::fs::create_dir_all(dir_path.join("provider"))
            .map_err(E2eError::io("create", dir_path.join("provider")))?;
        let kubeconfig = dir_path.join("kubeconfig");
        let addresses = Addresses {
            webhook: free_port()?,
            webhook_admin: free_port()?,
            provider_admin: free_port()?,
            manager_admin: free_port()?,
        };
        let socket = dir_path.join("driver.sock");
        let name = config.name.clone();
        println!(
            "mcm-e2e[{name}]: starting the system in {}",
            dir_path.display()
        );

        // 1. API server.
        let (api, kubeconfig, client) = match api_kind {
            ApiServerKind::Sandbox => {
                let mut sandbox_args: Vec<String> = vec![
                    "serve".into(),
                    "--port".into(),
                    "0".into(),
                    "--kubeconfig".into(),
                    kubeconfig.display().to_string(),
                    "--service".into(),
                    format!(
                        "{WEBHOOK_NAMESPACE}/{WEBHOOK_SERVICE}={}",
                        addresses.webhook
                    ),
                ];
                sandbox_args.extend(config.sandbox_flags.iter().cloned());
                let mut sandbox = Process::start(
                    "sandbox",
                    sandbox_bin,
                    sandbox_args,
                    vec![],
                    logs.join("sandbox.log"),
                )?;
                let client = match wait_sandbox_ready(&mut sandbox, &kubeconfig).await {
                    Ok(client) => client,
                    Err(e) => {
                        eprintln!("--- sandbox log ---\n{}", sandbox.tail(60));
                        return Err(e);
                    }
                };
                (ApiServer::Sandbox(sandbox), kubeconfig, client)
            }
            ApiServerKind::Kube => {
                // The sandbox's node-monitor grace period is kube-controller-manager's flag of
                // the same name.
                let grace = config
                    .sandbox_flags
                    .iter()
                    .find_map(|flag| flag.strip_prefix("--node-monitor-grace-period="));
                let control_plane = ControlPlane::start(
                    &dir_path.join("control-plane"),
                    grace,
                    &logs.join("control-plane.log"),
                )
                .await?;
                let kubeconfig = control_plane.admin_kubeconfig();
                let client = client_for(&kubeconfig).await?;
                (ApiServer::Kube(control_plane), kubeconfig, client)
            }
        };
        // Webhooks and conversion: through the Service as the chart registers them (the sandbox
        // resolves it to the local port), or by URL on a real API server, which would resolve
        // the Service to a cluster address this host does not have.
        let webhook_url = (api_kind == ApiServerKind::Kube)
            .then(|| format!("https://127.0.0.1:{}", addresses.webhook.port()));

        // 2. Namespaces, CRDs, webhook configurations.
        for ns in [config.namespace.as_str(), WEBHOOK_NAMESPACE] {
            create_namespace(&client, ns).await?;
        }
        install_crds(&client, config.serve_v1beta1, webhook_url.as_deref()).await?;
        install_webhook_configurations(&client, webhook_url.as_deref()).await?;
        // Each component runs as its own ServiceAccount bound to the chart's RBAC.
        let identities = dir_path.join("identities");
        create_identities(&kubeconfig, &identities, &config.namespace, &logs).await?;

        // 3. Webhook (self-managed certificates, injected into configurations and CRDs).
        let mut webhook_args: Vec<String> = [
            "--cert-mode",
            "self-managed",
            "--namespace",
            WEBHOOK_NAMESPACE,
            "--service-name",
            WEBHOOK_SERVICE,
            "--secret-name",
            "machine-controller-manager-webhook-certs",
            "--lease-name",
            "machine-controller-manager-webhook-certs",
            "--identity",
            "machine-webhook-e2e",
            "--mutating-webhook-configuration",
            WEBHOOK_CONFIGURATION,
            "--validating-webhook-configuration",
            WEBHOOK_CONFIGURATION,
            "--cert-reload-seconds",
            "2",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        // The CA goes into the CRDs' conversion stanzas, which only the v1beta1 CRDs have.
        for (_, plural) in KINDS.iter().filter(|_| config.serve_v1beta1) {
            webhook_args.push("--crd".into());
            webhook_args.push(format!("{plural}.machine.sapcloud.io"));
        }
        if webhook_url.is_some() {
            webhook_args.extend(["--certificate-host".into(), "127.0.0.1".into()]);
        }
        webhook_args.extend([
            "--bind-address".into(),
            addresses.webhook.to_string(),
            "--admin-address".into(),
            addresses.webhook_admin.to_string(),
        ]);
        let webhook = Process::start(
            "webhook",
            webhook_bin,
            webhook_args,
            vec![(
                "KUBECONFIG".into(),
                identities.join("webhook.kubeconfig").display().to_string(),
            )],
            logs.join("webhook.log"),
        )?;

        // 4. Provider.
        let provider_kubeconfig = identities.join("provider.kubeconfig").display().to_string();
        let provider_args: Vec<String> = match config.provider {
            ProviderKind::Virtual => vec![
                "--endpoint".into(),
                format!("unix://{}", socket.display()),
                "--target-kubeconfig".into(),
                provider_kubeconfig,
                "--state-file".into(),
                dir_path.join("provider/state.json").display().to_string(),
                "--metrics-address".into(),
                addresses.provider_admin.to_string(),
            ],
            ProviderKind::GoBridge => vec![
                "--endpoint".into(),
                format!("unix://{}", socket.display()),
                "--target-kubeconfig".into(),
                provider_kubeconfig,
                "--admin-address".into(),
                addresses.provider_admin.to_string(),
                // Short heartbeats, for the sandbox's short node-monitor grace period.
                "--lease-interval=2s".into(),
                "--status-interval=10s".into(),
            ],
        };
        let provider = Process::start(
            "provider",
            provider_bin,
            provider_args,
            vec![],
            logs.join("provider.log"),
        )?;

        let mut processes = Processes {
            api,
            webhook,
            provider,
            manager: None,
        };
        let ready = async {
            wait_http_ready(&mut processes.webhook, addresses.webhook_admin, "/readyz").await?;
            if config.serve_v1beta1 {
                wait_ca_injected(&client).await?;
            }
            wait_http_ready(
                &mut processes.provider,
                addresses.provider_admin,
                "/healthz",
            )
            .await
        }
        .await;
        let system_parts = |processes| SandboxParts {
            dir: Some(dir),
            dir_path: dir_path.clone(),
            addresses,
            socket: socket.clone(),
            processes: Mutex::new(processes),
        };
        if let Err(e) = ready {
            let system = Self {
                name,
                namespace: config.namespace,
                kubeconfig,
                client,
                api_kind,
                sandbox: Some(system_parts(processes)),
            };
            system.report_failure(&e.to_string()).await;
            return Err(e);
        }

        // 5. Manager.
        let manager_kubeconfig = identities.join("manager.kubeconfig").display().to_string();
        let mut manager_args = vec![
            "--control-kubeconfig".to_owned(),
            manager_kubeconfig.clone(),
            "--target-kubeconfig".into(),
            manager_kubeconfig,
            "--namespace".into(),
            config.namespace.clone(),
            "--driver-endpoint".into(),
            format!("unix://{}", socket.display()),
            "--address".into(),
            addresses.manager_admin.ip().to_string(),
            "--port".into(),
            addresses.manager_admin.port().to_string(),
            // Every series on the admin port (several systems may run side by side).
            "--machine-metrics-port=0".into(),
        ];
        manager_args.extend(config.manager_flags.iter().cloned());
        // A scenario that starts its own manager (`gardener`) gets none.
        let ready = if config.start_manager {
            let mut manager = Process::start(
                "manager",
                manager_bin,
                manager_args,
                vec![],
                logs.join("manager.log"),
            )?;
            let ready = wait_http_ready(&mut manager, addresses.manager_admin, "/readyz").await;
            processes.manager = Some(manager);
            ready
        } else {
            Ok(())
        };
        let system = Self {
            name,
            namespace: config.namespace,
            kubeconfig,
            client,
            api_kind,
            sandbox: Some(system_parts(processes)),
        };
        if let Err(e) = ready {
            system.report_failure(&e.to_string()).await;
            return Err(e);
        }
        system.ensure_userdata_secret().await?;
        println!("mcm-e2e[{}]: system ready", system.name);
        Ok(system)
    }

    /// Whether the processes run here against the sandbox (its admin API: fault injection,
    /// request counters, denials).
    pub fn is_sandbox(&self) -> bool {
        self.sandbox.is_some() && self.api_kind == ApiServerKind::Sandbox
    }

    /// Whether the processes run here (against the sandbox or a real control plane): process
    /// control, the provider's admin API and the manager's metrics are available then.
    pub fn has_local_processes(&self) -> bool {
        self.sandbox.is_some()
    }

    /// Which API server the processes run against.
    pub fn api_server_kind(&self) -> ApiServerKind {
        self.api_kind
    }

    /// The requests the API server's authorizer refused (403) to the system's own identities, per
    /// user: the sandbox's `/sandbox/admin/denials`, or kube-apiserver's audit log. `{}` when none.
    pub async fn rbac_denials(&self) -> Result<Value> {
        let parts = self.sandbox_parts("the API server's denials")?;
        let processes = parts.processes.lock().await;
        match &processes.api {
            ApiServer::Sandbox(_) => {
                drop(processes);
                self.sandbox_admin(::http::Method::GET, "denials", None)
                    .await
            }
            ApiServer::Kube(control_plane) => {
                control_plane.denials(&format!("system:serviceaccount:{WEBHOOK_NAMESPACE}:"))
            }
        }
    }

    /// The requests kube-apiserver completed with `code` (from its audit log), as `(verb,
    /// resource, namespace, name)`; an error on the sandbox or a cluster of one's own.
    pub async fn completed_requests(
        &self,
        code: u64,
    ) -> Result<Vec<(String, String, String, String)>> {
        let parts = self.sandbox_parts("kube-apiserver's audit log")?;
        let processes = parts.processes.lock().await;
        match &processes.api {
            ApiServer::Kube(control_plane) => control_plane.completed_requests(code),
            ApiServer::Sandbox(_) => Err(E2eError::Binary {
                name: "kube-apiserver".to_owned(),
                message: "the audit log exists on the real control plane only".to_owned(),
            }),
        }
    }

    /// Begins an API outage: the sandbox answers 503 to everything (ended by
    /// [`System::end_api_outage`], or after `bound` seconds if that is never called), or
    /// kube-apiserver is stopped.
    pub async fn begin_api_outage(&self, bound: u64) -> Result<()> {
        if self.is_sandbox() {
            self.sandbox_admin(
                ::http::Method::POST,
                "unavailable",
                Some(json!({"seconds": bound})),
            )
            .await
            .map(drop)
        } else {
            self.set_kube_apiserver_running(false).await
        }
    }

    /// Ends the outage of [`System::begin_api_outage`]; returns once the API answers again.
    pub async fn end_api_outage(&self) -> Result<()> {
        if self.is_sandbox() {
            self.sandbox_admin(::http::Method::DELETE, "unavailable", None)
                .await
                .map(drop)
        } else {
            self.set_kube_apiserver_running(true).await
        }
    }

    /// Stops kube-apiserver for an outage, or starts it again on the same port and etcd
    /// (`running`); etcd and kube-controller-manager keep running, as when an API server
    /// instance is replaced. The sandbox's outages go through its admin API instead.
    async fn set_kube_apiserver_running(&self, running: bool) -> Result<()> {
        let parts = self.sandbox_parts("stopping or starting the API server")?;
        let processes = parts.processes.lock().await;
        let ApiServer::Kube(control_plane) = &processes.api else {
            return Err(E2eError::Assertion(
                "the sandbox's outages go through its admin API (/sandbox/admin/unavailable)"
                    .to_owned(),
            ));
        };
        if running {
            control_plane.start_component("kube-apiserver").await
        } else {
            control_plane.stop_component("kube-apiserver").await
        }
    }

    /// Short name of the system.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Namespace of the Machine objects.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The kubeconfig (for kubectl).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// A kube client (control and target are the same cluster).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// Loopback addresses of the processes (sandbox mode).
    pub fn addresses(&self) -> Option<Addresses> {
        self.sandbox.as_ref().map(|s| s.addresses)
    }

    /// The system's temp dir (logs in `logs/`; sandbox mode).
    pub fn dir(&self) -> Option<&Path> {
        self.sandbox.as_ref().map(|s| s.dir_path.as_path())
    }

    /// The provider's gRPC socket (sandbox mode).
    pub fn driver_socket(&self) -> Option<&Path> {
        self.sandbox.as_ref().map(|s| s.socket.as_path())
    }

    fn sandbox_parts(&self, what: &str) -> Result<&SandboxParts> {
        self.sandbox.as_ref().ok_or_else(|| {
            E2eError::Assertion(format!("{what} is only available with the sandbox system"))
        })
    }

    async fn ensure_userdata_secret(&self) -> Result<()> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let secret: Secret = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": USERDATA_SECRET, "namespace": self.namespace},
            "type": "Opaque",
            "stringData": {"userData": "#cloud-config\nhostname: <<MACHINE_NAME>>\n"}
        }))
        .map_err(E2eError::decode("the user data Secret"))?;
        match secrets.create(&PostParams::default(), &secret).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            Err(e) => Err(E2eError::kube(format!("create Secret {USERDATA_SECRET}"))(
                e,
            )),
        }
    }

    /// Fails when a process of the system has exited.
    pub async fn check_processes(&self) -> Result<()> {
        let Some(parts) = &self.sandbox else {
            return Ok(());
        };
        let mut processes = parts.processes.lock().await;
        if let ApiServer::Sandbox(sandbox) = &mut processes.api {
            sandbox.check_alive()?;
        }
        processes.webhook.check_alive()?;
        processes.provider.check_alive()?;
        match processes.manager.as_mut() {
            Some(manager) => manager.check_alive(),
            None => Ok(()),
        }
    }

    /// A call to the sandbox's `/sandbox/admin/<path>` (fault injection, counters).
    pub async fn sandbox_admin(
        &self,
        method: ::http::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value> {
        if !self.is_sandbox() {
            return Err(E2eError::Assertion(
                "the sandbox admin API is only available with the sandbox system".to_owned(),
            ));
        }
        let uri = format!("/sandbox/admin/{}", path.trim_start_matches('/'));
        let body = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let request = ::http::Request::builder()
            .method(method.clone())
            .uri(&uri)
            .header(::http::header::CONTENT_TYPE, "application/json")
            .body(body)
            .map_err(|e| E2eError::Assertion(format!("request {uri}: {e}")))?;
        let text = self
            .client
            .request_text(request)
            .await
            .map_err(E2eError::kube(format!("{method} {uri}")))?;
        serde_json::from_str(&text).map_err(E2eError::decode(format!("answer of {uri}")))
    }

    /// The VMs of provider-virtual (`GET /admin/vms`).
    pub async fn vms(&self) -> Result<Vec<Value>> {
        let parts = self.sandbox_parts("the provider's VM list")?;
        let text = admin_http::get_ok(parts.addresses.provider_admin, "/admin/vms").await?;
        let value: Value =
            serde_json::from_str(&text).map_err(E2eError::decode("GET /admin/vms"))?;
        match value {
            Value::Array(items) => Ok(items),
            other => Err(E2eError::Decode {
                what: "GET /admin/vms".to_owned(),
                message: format!("expected a list, got {other}"),
            }),
        }
    }

    /// Overrides node conditions through provider-virtual's admin endpoint
    /// (`{"Ready":"False"}`); `None` removes the overrides.
    pub async fn set_node_conditions(&self, node: &str, conditions: Option<Value>) -> Result<()> {
        let parts = self.sandbox_parts("node condition overrides")?;
        let path = format!("/admin/nodes/{node}/conditions");
        let (method, body) = match conditions {
            Some(c) => (::http::Method::PUT, Some(c.to_string())),
            None => (::http::Method::DELETE, None),
        };
        let answer =
            admin_http::call(method.clone(), parts.addresses.provider_admin, &path, body).await?;
        if answer.ok() {
            Ok(())
        } else {
            Err(E2eError::Http {
                method: method.to_string(),
                url: path,
                message: format!("{}: {}", answer.status, answer.body),
            })
        }
    }

    /// The manager's `/metrics` text.
    pub async fn manager_metrics(&self) -> Result<String> {
        let parts = self.sandbox_parts("the manager's metrics")?;
        admin_http::get_ok(parts.addresses.manager_admin, "/metrics").await
    }

    /// Stops the manager gracefully (SIGTERM; it releases its Lease) and returns its exit code.
    pub async fn stop_manager(&self) -> Result<Option<i32>> {
        let parts = self.sandbox_parts("stopping the manager")?;
        let mut processes = parts.processes.lock().await;
        processes.manager()?.stop(Duration::from_secs(40)).await
    }

    /// Starts the manager again with the same flags and waits until it is ready.
    pub async fn start_manager(&self) -> Result<()> {
        let parts = self.sandbox_parts("starting the manager")?;
        let mut processes = parts.processes.lock().await;
        let manager = processes.manager()?;
        manager.restart()?;
        wait_http_ready(manager, parts.addresses.manager_admin, "/readyz").await
    }

    /// Prints why the system failed, the end of every log, and keeps the temp dir.
    pub async fn report_failure(&self, why: &str) {
        eprintln!("mcm-e2e[{}]: FAILED: {why}", self.name);
        let Some(parts) = &self.sandbox else {
            return;
        };
        let processes = parts.processes.lock().await;
        let sandbox = match &processes.api {
            ApiServer::Sandbox(sandbox) => Some(sandbox),
            ApiServer::Kube(control_plane) => {
                eprintln!(
                    "----- logs of the control plane: {} -----",
                    control_plane.logs().display()
                );
                None
            }
        };
        for process in [
            sandbox,
            Some(&processes.webhook),
            Some(&processes.provider),
            processes.manager.as_ref(),
        ]
        .into_iter()
        .flatten()
        {
            eprintln!(
                "----- last lines of {} ({}) -----\n{}",
                process.name(),
                process.log_path().display(),
                process.tail(80)
            );
        }
        eprintln!(
            "mcm-e2e[{}]: logs and state kept in {}",
            self.name,
            parts.dir_path.display()
        );
    }

    /// Keeps the temp dir (logs, state file, kubeconfig) after the system is dropped.
    pub fn keep_files(&mut self) {
        if let Some(parts) = self.sandbox.as_mut()
            && let Some(dir) = parts.dir.take()
        {
            let _ = dir.keep();
        }
    }

    /// Stops every process, the manager first and the API server last.
    pub async fn shutdown(&self) {
        let Some(parts) = &self.sandbox else {
            return;
        };
        let mut processes = parts.processes.lock().await;
        let grace = Duration::from_secs(10);
        if let Some(manager) = processes.manager.as_mut() {
            let _ = manager.stop(grace).await;
        }
        let _ = processes.provider.stop(grace).await;
        let _ = processes.webhook.stop(grace).await;
        match &mut processes.api {
            ApiServer::Sandbox(sandbox) => {
                let _ = sandbox.stop(grace).await;
            }
            ApiServer::Kube(control_plane) => {
                if let Err(error) = control_plane.stop().await {
                    eprintln!(
                        "mcm-e2e[{}]: stopping the control plane: {error}",
                        self.name
                    );
                }
            }
        }
    }
}

async fn create_namespace(client: &kube::Client, name: &str) -> Result<()> {
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
async fn create_identities(admin: &Path, out: &Path, namespace: &str, logs: &Path) -> Result<()> {
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
async fn install_crds(
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

async fn install_webhook_configurations(
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
async fn wait_ca_injected(client: &kube::Client) -> Result<()> {
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

async fn wait_http_ready(process: &mut Process, address: SocketAddr, path: &str) -> Result<()> {
    let what = format!("{} answers {path} on {address}", process.name());
    let deadline = tokio::time::Instant::now() + crate::wait::limit(90);
    let mut last: String;
    loop {
        process.check_alive()?;
        match admin_http::call(::http::Method::GET, address, path, None).await {
            Ok(answer) if answer.ok() => return Ok(()),
            Ok(answer) => last = format!("{}: {}", answer.status, answer.body),
            Err(e) => last = e.to_string(),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(E2eError::Timeout {
                what,
                seconds: 90,
                last: format!("{last}\n--- log ---\n{}", process.tail(40)),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn wait_sandbox_ready(sandbox: &mut Process, kubeconfig: &Path) -> Result<kube::Client> {
    let deadline = tokio::time::Instant::now() + crate::wait::limit(60);
    let mut last = String::from("no kubeconfig yet");
    loop {
        sandbox.check_alive()?;
        let written = std::fs::metadata(kubeconfig).is_ok_and(|m| m.len() > 0);
        if written {
            let client = client_for(kubeconfig).await?;
            let request = ::http::Request::get("/readyz")
                .body(Vec::new())
                .map_err(|e| E2eError::Assertion(e.to_string()))?;
            match client.request_text(request).await {
                Ok(_) => return Ok(client),
                Err(e) => last = e.to_string(),
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(E2eError::Timeout {
                what: "the sandbox API server answers /readyz".to_owned(),
                seconds: 60,
                last,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
