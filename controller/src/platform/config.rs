//! Command-line flags of `machine-controller-manager` and their validation.
//!
//! Upstream ships two binaries: `machine-controller-manager` (MachineSet, MachineDeployment and
//! overshooting safety; docs/behaviour.md#flags-mcm) and the provider's `machine-controller` (Machine, Node,
//! MachineClass, Secret and the other safety controllers; docs/behaviour.md#flags-mc). Our single binary can run either
//! share or both (`--controllers`, [`super::selection`]), so it accepts the union of both flag
//! sets with upstream names, types and defaults. Where the two
//! binaries disagree (`--port`, `--concurrent-syncs`, `--profiling`) the `machine-controller-manager`
//! default wins, because this binary takes that name, its lease and its admin port.
//!
//! Parsing ([`Args`], clap) only checks syntax; [`validate`] is pure and reports **every** violated
//! rule at once (as upstream's aggregated `Validate()` does), producing a typed [`Config`].

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use clap::{ArgAction, Parser};
use mcm_api::duration::Duration;
use mcm_decisions::vocabulary::{BackoffSettings, ControllerSettings, flag_defaults as defaults};
use mcm_provider_proto::Endpoint;

use super::selection::{Selection, Share, select};

/// The value of `--target-kubeconfig` that disables the target cluster.
pub const TARGET_KUBECONFIG_DISABLED: &str = "none";
/// The value of `--control-kubeconfig` (and, as an extension, `--target-kubeconfig`) that selects
/// the service-account credentials of the pod.
pub const IN_CLUSTER_CONFIG: &str = "inClusterConfig";
/// Name of the Lease used for leader election (upstream's lock name) unless only the machine
/// share runs ([`Selection::lease_name`]).
pub const LEASE_NAME: &str = super::selection::CONTROLLER_MANAGER_LEASE;
/// The only supported `--leader-elect-resource-lock`.
pub const LEASES_RESOURCE_LOCK: &str = "leases";
/// client-go's `JitterFactor`: the renew deadline must exceed this many retry periods.
const LEADER_ELECTION_JITTER_FACTOR: f64 = 1.2;

/// Go's `strconv.ParseBool`, so `--leader-elect=False` and `--profiling=1` work as with pflag.
fn parse_go_bool(text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("invalid boolean {text:?} (use true or false)")),
    }
}

/// Go's `time.ParseDuration` (`90s`, `1h30m`, `-5m`); negative values parse and are refused by
/// [`validate`], so every range error is reported together.
fn parse_go_duration(text: &str) -> Result<Duration, String> {
    text.parse::<Duration>().map_err(|error| error.to_string())
}

pub use super::logging::LogFormat;

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

/// Where a cluster's credentials come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KubeconfigSource {
    /// Empty flag: `KUBECONFIG`, then `~/.kube/config`, then the in-cluster service account.
    Default,
    /// `inClusterConfig`: the pod's service account.
    InCluster,
    /// A kubeconfig file.
    File(PathBuf),
}

/// Leader-election timing, present only with `--leader-elect=true`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElectionConfig {
    /// Lease name ([`LEASE_NAME`]).
    pub lease_name: String,
    /// Namespace of the Lease (the control namespace).
    pub namespace: String,
    /// `--leader-elect-lease-duration`.
    pub lease_duration: std::time::Duration,
    /// `--leader-elect-renew-deadline`.
    pub renew_deadline: std::time::Duration,
    /// `--leader-elect-retry-period`.
    pub retry_period: std::time::Duration,
}

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

/// One violated rule: the flag, the value given and why it was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("--{flag}={value}: {reason}")]
pub struct FieldError {
    /// Flag name without the leading dashes.
    pub flag: &'static str,
    /// The value as given (or as parsed, for durations and numbers).
    pub value: String,
    /// Why it was refused.
    pub reason: String,
}

impl FieldError {
    fn new(flag: &'static str, value: impl ToString, reason: impl Into<String>) -> Self {
        Self {
            flag,
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}

/// Collects violations so [`validate`] can report all of them together.
#[derive(Default)]
struct Violations(Vec<FieldError>);

impl Violations {
    fn push(&mut self, flag: &'static str, value: impl ToString, reason: impl Into<String>) {
        self.0.push(FieldError::new(flag, value, reason));
    }

    fn non_negative_duration(&mut self, flag: &'static str, value: Duration) {
        if value.is_negative() {
            self.push(flag, value, "must not be negative");
        }
    }

    /// A positive duration, converted for runtime use (`None` when refused).
    fn positive_std_duration(
        &mut self,
        flag: &'static str,
        value: Duration,
    ) -> Option<std::time::Duration> {
        match value.to_std() {
            Some(duration) if !duration.is_zero() => Some(duration),
            _ => {
                self.push(flag, value, "must be greater than zero");
                None
            }
        }
    }

    fn non_negative_int(&mut self, flag: &'static str, value: i32) -> u32 {
        u32::try_from(value).unwrap_or_else(|_| {
            self.push(flag, value, "must not be negative");
            0
        })
    }
}

/// Whether `text` parses as a media type (`type/subtype` with optional `; key=value` parameters),
/// the check upstream performs with Go's `mime.ParseMediaType`.
fn is_media_type(text: &str) -> bool {
    fn is_token(text: &str) -> bool {
        !text.is_empty()
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c))
    }
    let mut parts = text.split(';');
    let essence = parts.next().unwrap_or_default().trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    if !is_token(kind) || !is_token(subtype) {
        return false;
    }
    parts.all(|parameter| {
        let parameter = parameter.trim();
        // Go tolerates a trailing `;` but not empty parameters in the middle; accepting both is harmless.
        if parameter.is_empty() {
            return true;
        }
        match parameter.split_once('=') {
            Some((key, value)) => {
                let quoted = value.len() >= 2 && value.starts_with('"') && value.ends_with('"');
                is_token(key.trim()) && (quoted || is_token(value.trim()))
            }
            None => false,
        }
    })
}

/// Whether `name` is a DNS-1123 label, the form Kubernetes requires of namespace names.
fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// Whether `name` is a DNS-1123 subdomain, the form Kubernetes requires of most object names.
fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_dns_label)
}

fn kubeconfig_source(flag_value: &str) -> KubeconfigSource {
    match flag_value {
        "" => KubeconfigSource::Default,
        IN_CLUSTER_CONFIG => KubeconfigSource::InCluster,
        path => KubeconfigSource::File(PathBuf::from(path)),
    }
}

/// Validates the flags and resolves them into a [`Config`]; returns **all** violations at once.
pub fn validate(args: &Args) -> Result<Config, Vec<FieldError>> {
    let mut violations = Violations::default();

    // Admin server.
    let port = match u16::try_from(args.port) {
        Ok(port) if port >= 1 => port,
        _ => {
            violations.push("port", args.port, "must be between 1 and 65535");
            0
        }
    };
    let machine_metrics_port = match u16::try_from(args.machine_metrics_port) {
        Ok(port) => port,
        Err(_) => {
            violations.push(
                "machine-metrics-port",
                args.machine_metrics_port,
                "must be between 0 and 65535",
            );
            0
        }
    };
    if machine_metrics_port != 0 && machine_metrics_port == port {
        violations.push(
            "machine-metrics-port",
            args.machine_metrics_port,
            "must differ from --port (use 0 to serve the machine series on --port)",
        );
    }
    let address = match args.address.parse::<IpAddr>() {
        Ok(address) => address,
        Err(_) => {
            violations.push("address", &args.address, "must be an IPv4 or IPv6 address");
            IpAddr::from([0, 0, 0, 0])
        }
    };

    // Generic controller flags (both binaries).
    let concurrent_syncs = match usize::try_from(args.concurrent_syncs) {
        Ok(workers) if workers > 0 => workers,
        _ => {
            violations.push(
                "concurrent-syncs",
                args.concurrent_syncs,
                "must be greater than zero",
            );
            0
        }
    };
    violations.non_negative_duration("min-resync-period", args.min_resync_period);
    if args.contention_profiling && !args.profiling {
        violations.push(
            "contention-profiling",
            true,
            "cannot be enabled without --profiling",
        );
    }
    if !is_media_type(&args.kube_api_content_type) {
        violations.push(
            "kube-api-content-type",
            &args.kube_api_content_type,
            "must be a media type such as application/json",
        );
    }
    if !(args.kube_api_qps.is_finite() && args.kube_api_qps > 0.0) {
        violations.push(
            "kube-api-qps",
            args.kube_api_qps,
            "must be greater than zero",
        );
    }
    let burst = violations.non_negative_int("kube-api-burst", args.kube_api_burst);
    if let Err(reason) = super::logging::validate_vmodule(&args.vmodule) {
        violations.push("vmodule", &args.vmodule, reason);
    }
    violations.non_negative_duration("log-flush-frequency", args.log_flush_frequency);
    violations.non_negative_duration("controller-start-interval", args.controller_start_interval);
    if !is_dns_label(&args.namespace) {
        violations.push(
            "namespace",
            &args.namespace,
            "must be a valid namespace name (lower-case DNS label, at most 63 characters)",
        );
    }

    // Kubeconfigs.
    let target_kubeconfig = match args.target_kubeconfig.as_str() {
        TARGET_KUBECONFIG_DISABLED => None,
        other => Some(kubeconfig_source(other)),
    };
    let control_kubeconfig = match args.control_kubeconfig.as_str() {
        "" => match &target_kubeconfig {
            Some(source) => source.clone(),
            None => {
                violations.push(
                    "control-kubeconfig",
                    "",
                    "must be set when --target-kubeconfig=none",
                );
                KubeconfigSource::Default
            }
        },
        TARGET_KUBECONFIG_DISABLED => {
            violations.push(
                "control-kubeconfig",
                TARGET_KUBECONFIG_DISABLED,
                "the control cluster cannot be disabled; `none` is only valid for --target-kubeconfig",
            );
            KubeconfigSource::Default
        }
        other => kubeconfig_source(other),
    };

    // Safety (MCM and MC).
    let safety_up = violations.non_negative_int("safety-up", args.safety_up);
    let safety_down = violations.non_negative_int("safety-down", args.safety_down);
    for (flag, value) in [
        (
            "machine-safety-overshooting-period",
            args.machine_safety_overshooting_period,
        ),
        (
            "machine-safety-apiserver-statuscheck-timeout",
            args.machine_safety_apiserver_statuscheck_timeout,
        ),
        (
            "machine-safety-apiserver-statuscheck-period",
            args.machine_safety_apiserver_statuscheck_period,
        ),
        (
            "machine-safety-orphan-vms-period",
            args.machine_safety_orphan_vms_period,
        ),
        // Machine controller timeouts (MC).
        ("machine-creation-timeout", args.machine_creation_timeout),
        ("machine-health-timeout", args.machine_health_timeout),
        ("machine-drain-timeout", args.machine_drain_timeout),
        (
            "machine-inplace-update-timeout",
            args.machine_inplace_update_timeout,
        ),
        ("machine-pv-detach-timeout", args.machine_pv_detach_timeout),
        (
            "machine-pv-reattach-timeout",
            args.machine_pv_reattach_timeout,
        ),
        ("machine-preserve-timeout", args.machine_preserve_timeout),
        ("resource-exhausted-retry", args.resource_exhausted_retry),
    ] {
        violations.non_negative_duration(flag, value);
    }
    if args.machine_retry_backoff_initial <= Duration::ZERO {
        violations.push(
            "machine-retry-backoff-initial",
            args.machine_retry_backoff_initial,
            "must be positive",
        );
    }
    if !(args.machine_retry_backoff_factor.is_finite() && args.machine_retry_backoff_factor >= 1.0)
    {
        violations.push(
            "machine-retry-backoff-factor",
            args.machine_retry_backoff_factor,
            "must be a number of at least 1",
        );
    }
    if !(0.0..=1.0).contains(&args.machine_meltdown_threshold) {
        violations.push(
            "machine-meltdown-threshold",
            args.machine_meltdown_threshold,
            "must be a share between 0 (off) and 1",
        );
    }
    if args.machine_retry_backoff_max < args.machine_retry_backoff_initial {
        violations.push(
            "machine-retry-backoff-max",
            args.machine_retry_backoff_max,
            format!(
                "must not be shorter than --machine-retry-backoff-initial ({})",
                args.machine_retry_backoff_initial
            ),
        );
    }
    if args.machine_safety_apiserver_statuscheck_period
        < args.machine_safety_apiserver_statuscheck_timeout
    {
        violations.push(
            "machine-safety-apiserver-statuscheck-period",
            args.machine_safety_apiserver_statuscheck_period,
            format!(
                "must not be shorter than --machine-safety-apiserver-statuscheck-timeout ({})",
                args.machine_safety_apiserver_statuscheck_timeout
            ),
        );
    }
    violations.non_negative_int("machine-max-evict-retries", args.machine_max_evict_retries);

    // The selection decides the Lease name; its violation is reported after the driver's.
    let controllers = select(&args.controllers, !args.driver_endpoint.is_empty());
    // Leader election: client-go's rules, checked only when it is on (as client-go does).
    let leader_election = if args.leader_elect {
        let lease_name = match args.leader_elect_resource_name.as_str() {
            "" => controllers
                .as_ref()
                .map_or(LEASE_NAME, Selection::lease_name),
            name => name,
        };
        validate_leader_election(args, lease_name, &mut violations)
    } else {
        None
    };

    let driver_endpoint = match args.driver_endpoint.as_str() {
        "" => None,
        text => match text.parse::<Endpoint>() {
            Ok(endpoint) => Some(endpoint),
            Err(error) => {
                violations.push("driver-endpoint", &args.driver_endpoint, error.reason);
                None
            }
        },
    };
    let controllers = match controllers {
        Ok(selection) => Some(selection),
        Err(reason) => {
            violations.push("controllers", &args.controllers, reason);
            None
        }
    };

    let violations = violations.0;
    let Some(controllers) = controllers.filter(|_| violations.is_empty()) else {
        return Err(violations);
    };
    let target_cluster = target_kubeconfig.is_some();
    let machine_metrics_address = (machine_metrics_port != 0
        && controllers.runs(Share::MachineController))
    .then(|| SocketAddr::new(address, machine_metrics_port));
    Ok(Config {
        admin_address: SocketAddr::new(address, port),
        machine_metrics_address,
        concurrent_syncs,
        min_resync_period: args.min_resync_period,
        profiling: args.profiling,
        control_kubeconfig,
        target_kubeconfig,
        namespace: args.namespace.clone(),
        client: ClientSettings {
            qps: args.kube_api_qps,
            burst,
            content_type: args.kube_api_content_type.clone(),
        },
        safety: SafetySettings {
            safety_up,
            safety_down,
            overshooting_period: args.machine_safety_overshooting_period,
            apiserver_statuscheck_timeout: args.machine_safety_apiserver_statuscheck_timeout,
            apiserver_statuscheck_period: args.machine_safety_apiserver_statuscheck_period,
            orphan_vms_period: args.machine_safety_orphan_vms_period,
        },
        machine: ControllerSettings {
            creation_timeout: args.machine_creation_timeout,
            health_timeout: args.machine_health_timeout,
            drain_timeout: args.machine_drain_timeout,
            in_place_update_timeout: args.machine_inplace_update_timeout,
            preserve_timeout: args.machine_preserve_timeout,
            max_evict_retries: args.machine_max_evict_retries,
            node_conditions: args.node_conditions.clone(),
            pv_detach_timeout: args.machine_pv_detach_timeout,
            pv_reattach_timeout: args.machine_pv_reattach_timeout,
            resource_exhausted_retry: args.resource_exhausted_retry,
            retry_backoff: BackoffSettings {
                initial: args.machine_retry_backoff_initial,
                factor: args.machine_retry_backoff_factor,
                max: args.machine_retry_backoff_max,
            },
            meltdown_threshold: args.machine_meltdown_threshold,
            bootstrap_token_auth_extra_groups: args.bootstrap_token_auth_extra_groups.clone(),
            target_cluster,
        },
        autoscaler_scaledown_annotation_during_rollout: args
            .autoscaler_scaledown_annotation_during_rollout,
        leader_election,
        driver_endpoint,
        controllers,
        log_format: args.log_format,
        verbosity: args.verbosity,
        vmodule: args.vmodule.clone(),
    })
}

fn validate_leader_election(
    args: &Args,
    lease_name: &str,
    violations: &mut Violations,
) -> Option<LeaderElectionConfig> {
    if args.leader_elect_resource_lock != LEASES_RESOURCE_LOCK {
        violations.push(
            "leader-elect-resource-lock",
            &args.leader_elect_resource_lock,
            "only `leases` is supported (endpoints and configmaps locks were removed from Kubernetes)",
        );
    }
    let lease = violations.positive_std_duration(
        "leader-elect-lease-duration",
        args.leader_elect_lease_duration,
    );
    let renew = violations.positive_std_duration(
        "leader-elect-renew-deadline",
        args.leader_elect_renew_deadline,
    );
    let retry = violations
        .positive_std_duration("leader-elect-retry-period", args.leader_elect_retry_period);
    let (lease, renew, retry) = (lease?, renew?, retry?);
    let mut valid = true;
    if lease <= renew {
        violations.push(
            "leader-elect-lease-duration",
            args.leader_elect_lease_duration,
            format!(
                "must be greater than --leader-elect-renew-deadline ({})",
                args.leader_elect_renew_deadline
            ),
        );
        valid = false;
    }
    if renew.as_secs_f64() <= LEADER_ELECTION_JITTER_FACTOR * retry.as_secs_f64() {
        violations.push(
            "leader-elect-renew-deadline",
            args.leader_elect_renew_deadline,
            format!(
                "must be greater than 1.2 x --leader-elect-retry-period ({})",
                args.leader_elect_retry_period
            ),
        );
        valid = false;
    }
    // Leases carry whole seconds: the renewal happens `retry` (rounded up) after the last one,
    // which must leave at least one second before the lease (rounded up) expires.
    if valid && whole_seconds_up(lease) <= whole_seconds_up(retry) {
        violations.push(
            "leader-elect-lease-duration",
            args.leader_elect_lease_duration,
            format!(
                "rounded up to whole seconds must exceed --leader-elect-retry-period ({}) rounded up",
                args.leader_elect_retry_period
            ),
        );
        valid = false;
    }
    let namespace = match args.leader_elect_resource_namespace.as_str() {
        "" => args.namespace.clone(),
        namespace if is_dns_label(namespace) => namespace.to_owned(),
        namespace => {
            violations.push(
                "leader-elect-resource-namespace",
                namespace,
                "must be a valid namespace name (lower-case DNS label, at most 63 characters)",
            );
            return None;
        }
    };
    if !is_dns_subdomain(lease_name) {
        violations.push(
            "leader-elect-resource-name",
            lease_name,
            "must be a valid object name (lower-case DNS subdomain)",
        );
        return None;
    }
    valid.then(|| LeaderElectionConfig {
        lease_name: lease_name.to_owned(),
        namespace,
        lease_duration: lease,
        renew_deadline: renew,
        retry_period: retry,
    })
}

/// Seconds of `duration`, rounded up (a Lease stores `leaseDurationSeconds` as an integer).
pub fn whole_seconds_up(duration: std::time::Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
