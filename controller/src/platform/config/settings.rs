//! The validated configuration ([`Config`]) and the settings it hands the controllers.

use std::net::SocketAddr;

use mcm_api::duration::Duration;
use mcm_decisions::vocabulary::ControllerSettings;
use mcm_provider_proto::Endpoint;

use super::cluster::KubeconfigSource;
use super::leader_election::LeaderElectionConfig;
use crate::platform::logging::LogFormat;
use crate::platform::selection::Selection;

/// Settings of the safety controllers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SafetySettings {
    /// `--safety-up`.
    pub safety_up: u32,
    /// `--safety-down`.
    pub safety_down: u32,
    /// `--machine-safety-overshooting-period`.
    pub overshooting_period: Duration,
    /// `--machine-safety-apiserver-statuscheck-timeout`.
    pub apiserver_statuscheck_timeout: Duration,
    /// `--machine-safety-apiserver-statuscheck-period`.
    pub apiserver_statuscheck_period: Duration,
    /// `--machine-safety-orphan-vms-period`.
    pub orphan_vms_period: Duration,
}

/// API client settings shared by both clusters.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientSettings {
    /// `--kube-api-qps`: the client-side token bucket's refill rate (`manager::throttle`).
    pub qps: f32,
    /// `--kube-api-burst`: the token bucket's size.
    pub burst: u32,
    /// `--kube-api-content-type` (validated only, as upstream).
    pub content_type: String,
}

/// Validated configuration of the manager.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// `--address`:`--port` of the admin server.
    pub admin_address: SocketAddr,
    /// `--address`:`--machine-metrics-port`, when machine-controller controllers run and the
    /// port is not 0.
    pub machine_metrics_address: Option<SocketAddr>,
    /// `--concurrent-syncs`.
    pub concurrent_syncs: usize,
    /// `--min-resync-period`.
    pub min_resync_period: Duration,
    /// `--profiling` (accepted; no pprof endpoints exist).
    pub profiling: bool,
    /// Control cluster credentials (empty `--control-kubeconfig` resolved to the target's source).
    pub control_kubeconfig: KubeconfigSource,
    /// Target cluster credentials; `None` for `--target-kubeconfig=none`.
    pub target_kubeconfig: Option<KubeconfigSource>,
    /// `--namespace`.
    pub namespace: String,
    /// API client settings.
    pub client: ClientSettings,
    /// Safety controller settings.
    pub safety: SafetySettings,
    /// The Machine controller's settings, as its plans take them (docs/behaviour.md#flags-mc).
    pub machine: ControllerSettings,
    /// `--autoscaler-scaledown-annotation-during-rollout`.
    pub autoscaler_scaledown_annotation_during_rollout: bool,
    /// Leader election; `None` with `--leader-elect=false`.
    pub leader_election: Option<LeaderElectionConfig>,
    /// `--driver-endpoint`; `None` when empty (no controller that calls the driver can run).
    pub driver_endpoint: Option<Endpoint>,
    /// `--controllers`, resolved.
    pub controllers: Selection,
    /// `--log-format`.
    pub log_format: LogFormat,
    /// `-v`.
    pub verbosity: i32,
    /// `--vmodule` (validated).
    pub vmodule: String,
}
