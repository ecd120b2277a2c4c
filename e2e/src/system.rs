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

mod cluster;
mod config;
mod controls;
mod install;
mod kubeconfig;
mod processes;
mod start;

use std::path::{Path, PathBuf};

use tokio::sync::Mutex;

use crate::control_plane::{ApiServerKind, ControlPlane};
use crate::error::{E2eError, Result};
use crate::process::Process;

pub use config::{Addresses, ProviderKind, SystemConfig, USERDATA_SECRET, default_manager_flags};
pub use kubeconfig::{client_for, cluster_kubeconfig};

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

impl System {
    /// Starts a sandbox system, or connects to the cluster of `MCM_E2E_KUBECONFIG`.
    pub async fn start(config: SystemConfig) -> Result<Self> {
        match cluster_kubeconfig() {
            Some(kubeconfig) => Self::connect(&config.name, kubeconfig).await,
            None => Self::start_sandbox(config).await,
        }
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
}
