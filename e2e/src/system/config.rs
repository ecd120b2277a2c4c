//! Settings of a system: [`SystemConfig`] and its [`ProviderKind`], the manager's short default
//! timeouts, the processes' loopback [`Addresses`] and the user data Secret's name.

use std::net::SocketAddr;

/// Name of the Secret (user data) every MachineClass of the scenarios references.
pub const USERDATA_SECRET: &str = "e2e-userdata";

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
