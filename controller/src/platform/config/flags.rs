//! The command-line flags ([`Args`], clap) and the Go-style parsers of their values.

use clap::{ArgAction, Parser};
use mcm_api::duration::Duration;
use mcm_decisions::vocabulary::flag_defaults as defaults;

use super::leader_election::LEASES_RESOURCE_LOCK;
use crate::platform::logging::LogFormat;

/// Go's `strconv.ParseBool`, so `--leader-elect=False` and `--profiling=1` work as with pflag.
fn parse_go_bool(text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("invalid boolean {text:?} (use true or false)")),
    }
}

/// Go's `time.ParseDuration` (`90s`, `1h30m`, `-5m`); negative values parse and are refused by
/// [`validate`](super::validate()), so every range error is reported together.
fn parse_go_duration(text: &str) -> Result<Duration, String> {
    text.parse::<Duration>().map_err(|error| error.to_string())
}

/// Raw command-line flags, parsed but not yet validated.
///
/// Field docs name the upstream binary a flag comes from: (MCM) `machine-controller-manager`,
/// (MC) `machine-controller`, (both), or (new) for flags of this implementation only.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "machine-controller-manager",
    version,
    about = "Runs the Machine, MachineSet, MachineDeployment and safety controllers",
    long_about = None
)]
pub struct Args {
    /// (both) Port of the admin HTTP server (/healthz, /readyz, /metrics). MC's default was 10259.
    #[arg(long, default_value_t = 10258, allow_negative_numbers = true)]
    pub port: i32,
    /// (new) Port of the machine-level series (upstream machine-controller's /metrics, Gardener's
    /// `providermetrics`), served with /healthz whenever a machine-controller controller runs.
    /// 0: serve them on --port with the rest.
    #[arg(long, default_value_t = 10259, allow_negative_numbers = true)]
    pub machine_metrics_port: i32,
    /// (both) IP address of the admin HTTP server (0.0.0.0 for all interfaces).
    #[arg(long, default_value = "0.0.0.0")]
    pub address: String,
    /// (both) Unused upstream; accepted for compatibility.
    #[arg(long, default_value = "")]
    pub cloud_provider: String,
    /// (both) Workers per queue. MC's default was 50.
    #[arg(long, default_value_t = 10, allow_negative_numbers = true)]
    pub concurrent_syncs: i32,
    /// (both) Informer resync period.
    #[arg(long, default_value = "12h", value_parser = parse_go_duration, allow_negative_numbers = true)]
    pub min_resync_period: Duration,
    /// (both) Enable profiling handlers. Accepted for compatibility; no pprof endpoints are served.
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true",
          action = ArgAction::Set, value_parser = parse_go_bool)]
    pub profiling: bool,
    /// (both) Lock contention profiling; requires --profiling. Accepted for compatibility.
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true",
          action = ArgAction::Set, value_parser = parse_go_bool)]
    pub contention_profiling: bool,
    /// (both) Kubeconfig of the target cluster (Nodes, Pods, volumes), or `none` for no target cluster.
    #[arg(long, default_value = "")]
    pub target_kubeconfig: String,
    /// (both) Kubeconfig of the control cluster (Machine objects), `inClusterConfig` for the pod's
    /// service account; empty means the same as --target-kubeconfig.
    #[arg(long, default_value = "")]
    pub control_kubeconfig: String,
    /// (both) Namespace of the control cluster holding the Machine objects.
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// (both) Content type of API requests; validated as a media type but not applied (as upstream).
    #[arg(long, default_value = "application/vnd.kubernetes.protobuf")]
    pub kube_api_content_type: String,
    /// (both) Client-side QPS towards the API servers (validated; see docs/operations-flags.md).
    #[arg(long, default_value_t = 20.0, allow_negative_numbers = true)]
    pub kube_api_qps: f32,
    /// (both) Client-side burst towards the API servers (validated; see docs/operations-flags.md).
    #[arg(long, default_value_t = 30, allow_negative_numbers = true)]
    pub kube_api_burst: i32,
    /// (both) Unused upstream; accepted for compatibility.
    #[arg(long, default_value = "0s", value_parser = parse_go_duration, allow_negative_numbers = true)]
    pub controller_start_interval: Duration,
    /// (MCM) Extra machines tolerated beyond desired + maxSurge before freezing a MachineSet.
    #[arg(long, default_value_t = defaults::SAFETY_UP, allow_negative_numbers = true)]
    pub safety_up: i32,
    /// (MCM) Upper limit minus this gives the limit below which a frozen MachineSet is unfrozen.
    #[arg(long, default_value_t = defaults::SAFETY_DOWN, allow_negative_numbers = true)]
    pub safety_down: i32,
    /// (MCM) Period of the overshooting safety check.
    #[arg(long, default_value = "1m", value_parser = parse_go_duration, allow_negative_numbers = true)]
    pub machine_safety_overshooting_period: Duration,
    /// (MCM) Annotate nodes with the cluster-autoscaler scale-down-disabled annotation during rollouts.
    #[arg(long, default_value_t = defaults::AUTOSCALER_SCALEDOWN_ANNOTATION_DURING_ROLLOUT, num_args = 0..=1, default_missing_value = "true",
          action = ArgAction::Set, value_parser = parse_go_bool)]
    pub autoscaler_scaledown_annotation_during_rollout: bool,
    /// (MC) Time a new machine has to join before it is declared Failed.
    #[arg(long, default_value = defaults::CREATION_TIMEOUT, value_parser = parse_go_duration, allow_negative_numbers = true)]
    pub machine_creation_timeout: Duration,
    /// (MC) Time an unhealthy machine has to recover before it is declared Failed.
    #[arg(long, default_value = defaults::HEALTH_TIMEOUT, value_parser = parse_go_duration, allow_negative_numbers = true)]
    pub machine_health_timeout: Duration,
    /// (MC) Drain timeout before the drain is forced.
    #[arg(long, default_value = defaults::DRAIN_TIMEOUT, value_parser = parse_go_duration, allow_negative_numbers = true)]
    pub machine_drain_timeout: Duration,
    /// (MC) Time an in-place update may take before the machine is declared Failed.
    #[arg(long, default_value = defaults::IN_PLACE_UPDATE_TIMEOUT, value_parser = parse_go_duration, allow_negative_numbers = true)]
    pub machine_inplace_update_timeout: Duration,
    /// (MC) Evictions per pod before it is deleted during a drain.
    #[arg(long, default_value_t = defaults::MAX_EVICT_RETRIES, allow_negative_numbers = true)]
    pub machine_max_evict_retries: i32,
    /// (MC) Wait for a PV to detach after its pod was evicted.
    #[arg(long, default_value = defaults::PV_DETACH_TIMEOUT, value_parser = parse_go_duration, allow_negative_numbers = true)]
    pub machine_pv_detach_timeout: Duration,
    /// (MC) Wait for a PV to reattach elsewhere.
    #[arg(long, default_value = defaults::PV_REATTACH_TIMEOUT, value_parser = parse_go_duration, allow_negative_numbers = true)]
    pub machine_pv_reattach_timeout: Duration,
    /// (MC) Time the control API server may be unreachable before the controllers freeze.
    #[arg(long, default_value = defaults::APISERVER_STATUSCHECK_TIMEOUT, value_parser = parse_go_duration, allow_negative_numbers = true)]
    pub machine_safety_apiserver_statuscheck_timeout: Duration,
    /// (MC) Period of the API server status check; must not be shorter than its timeout.
    #[arg(long, default_value = defaults::APISERVER_STATUSCHECK_PERIOD, value_parser = parse_go_duration, allow_negative_numbers = true)]
    pub machine_safety_apiserver_statuscheck_period: Duration,
    /// (MC) Period of the orphan VM and orphan node collection.
    #[arg(long, default_value = "15m", value_parser = parse_go_duration, allow_negative_numbers = true)]
    pub machine_safety_orphan_vms_period: Duration,
    /// (MC) How long a failed machine stays preserved when preservation has no explicit end.
    #[arg(long, default_value = defaults::PRESERVE_TIMEOUT, value_parser = parse_go_duration, allow_negative_numbers = true)]
    pub machine_preserve_timeout: Duration,
    /// (MC) Comma-separated, case-sensitive node condition types that make a machine unhealthy when True.
    #[arg(long, default_value = defaults::NODE_CONDITIONS)]
    pub node_conditions: String,
    /// (MC) Value of the bootstrap token's `auth-extra-groups`.
    #[arg(long, default_value = defaults::BOOTSTRAP_TOKEN_AUTH_EXTRA_GROUPS)]
    pub bootstrap_token_auth_extra_groups: String,
    /// (MC) Retry period after a ResourceExhausted driver error; 0 means the long retry (10m).
    #[arg(long, default_value = defaults::RESOURCE_EXHAUSTED_RETRY, value_parser = parse_go_duration, allow_negative_numbers = true)]
    pub resource_exhausted_retry: Duration,
    /// (new) Delay after the first failed CreateMachine/InitializeMachine/DeleteMachine call of a
    /// machine (upstream retries after a constant 5s).
    #[arg(long, default_value = defaults::RETRY_BACKOFF_INITIAL, value_parser = parse_go_duration, allow_negative_numbers = true)]
    pub machine_retry_backoff_initial: Duration,
    /// (new) Growth of the delay per consecutive failure of the same machine (1 = constant).
    #[arg(long, default_value_t = defaults::RETRY_BACKOFF_FACTOR, allow_negative_numbers = true)]
    pub machine_retry_backoff_factor: f64,
    /// (new) Largest delay between two failing driver calls of one machine (errors upstream
    /// retries after 3m are never retried sooner).
    #[arg(long, default_value = defaults::RETRY_BACKOFF_MAX, value_parser = parse_go_duration, allow_negative_numbers = true)]
    pub machine_retry_backoff_max: Duration,
    /// (new) Meltdown guard: when more than this share (0..1) of a MachineDeployment's machines,
    /// or of one zone's, is Unknown/Failed at once, unhealthy machines are not replaced until the
    /// share drops. 0 turns the guard off.
    #[arg(long, default_value_t = defaults::MELTDOWN_THRESHOLD, allow_negative_numbers = true)]
    pub machine_meltdown_threshold: f64,
    /// (both) Take part in leader election before running the controllers.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true",
          action = ArgAction::Set, value_parser = parse_go_bool)]
    pub leader_elect: bool,
    /// (both) How long a lease is valid after its last renewal.
    #[arg(long, default_value = "15s", value_parser = parse_go_duration, allow_negative_numbers = true)]
    pub leader_elect_lease_duration: Duration,
    /// (both) The leader gives up when it could not renew for this long.
    #[arg(long, default_value = "10s", value_parser = parse_go_duration, allow_negative_numbers = true)]
    pub leader_elect_renew_deadline: Duration,
    /// (both) Interval between acquisition attempts and renewals.
    #[arg(long, default_value = "2s", value_parser = parse_go_duration, allow_negative_numbers = true)]
    pub leader_elect_retry_period: Duration,
    /// (component-base) Name of the Lease; empty: `machine-controller-manager`, or
    /// `machine-controller` when only machine-controller controllers run.
    #[arg(long, default_value = "")]
    pub leader_elect_resource_name: String,
    /// (component-base) Namespace of the Lease; empty: --namespace.
    #[arg(long, default_value = "")]
    pub leader_elect_resource_namespace: String,
    /// (both) Lock object type; only `leases` is supported.
    #[arg(long, default_value = LEASES_RESOURCE_LOCK)]
    pub leader_elect_resource_lock: String,
    /// (new) gRPC endpoint of the provider driver: unix:///path/to.sock, tcp://IP:PORT or
    /// http://IP:PORT. Empty: no driver, and the default controller set is upstream's
    /// machine-controller-manager share (see --controllers).
    #[arg(long, default_value = "")]
    pub driver_endpoint: String,
    /// (kube-controller-manager's shape) Controllers to run: comma list, `*` = the default set,
    /// `name` enables, `-name` disables. Default set: everything with --driver-endpoint, else
    /// machineset, machinedeployment, machinesafetyovershooting. Names: machine,
    /// machinetermination, node, machineclass, machineset, machinedeployment,
    /// machinesafetyovershooting, machinesafetyorphanvms, machinesafetyapiserver.
    #[arg(long, default_value = "*")]
    pub controllers: String,
    /// (new) Log format. `--logging-format` (component-base's name) is accepted as an alias.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, alias = "logging-format")]
    pub log_format: LogFormat,
    /// (both, component-base) Log verbosity as klog: 0-3 info, 4 debug, 5+ trace. RUST_LOG overrides it.
    #[arg(
        short = 'v',
        long = "v",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    pub verbosity: i32,
    /// (both, component-base) Per-file verbosity, `pattern=N,...` (file base names, `*`/`?` globs).
    #[arg(long, default_value = "")]
    pub vmodule: String,
    /// (both, component-base) Maximum seconds between log flushes; accepted (lines are written
    /// unbuffered).
    #[arg(long, default_value = "5s", value_parser = parse_go_duration, allow_negative_numbers = true)]
    pub log_flush_frequency: Duration,
}
