//! The rules on the flags ([`validate`], with client-go's leader-election rules) and the
//! resolution of valid flags into the [`Config`] handed to the controllers.

use std::net::{IpAddr, SocketAddr};

use mcm_api::duration::Duration;
use mcm_decisions::vocabulary::{BackoffSettings, ControllerSettings};
use mcm_provider_proto::Endpoint;

use super::cluster::{KubeconfigSource, TARGET_KUBECONFIG_DISABLED, kubeconfig_source};
use super::flags::Args;
use super::leader_election::{
    LEASE_NAME, LEASES_RESOURCE_LOCK, LeaderElectionConfig, whole_seconds_up,
};
use super::settings::{ClientSettings, Config, SafetySettings};
use super::violations::{FieldError, Violations, is_dns_label, is_dns_subdomain, is_media_type};
use crate::platform::selection::{Selection, Share, select};

/// client-go's `JitterFactor`: the renew deadline must exceed this many retry periods.
const LEADER_ELECTION_JITTER_FACTOR: f64 = 1.2;

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
    if let Err(reason) = crate::platform::logging::validate_vmodule(&args.vmodule) {
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
