#![allow(clippy::unwrap_used)]

use clap::Parser;
use mcm_api::duration::Duration;
use mcm_decisions::vocabulary::{BackoffSettings, ControllerSettings};
use mcm_provider_proto::Endpoint;

use super::*;

fn parse(flags: &[&str]) -> Args {
    let mut argv = vec!["machine-controller-manager"];
    argv.extend_from_slice(flags);
    Args::try_parse_from(argv).unwrap()
}

fn errors(flags: &[&str]) -> Vec<FieldError> {
    validate(&parse(flags)).expect_err("validation should fail")
}

/// The flags named by the errors, in order.
fn flags_of(errors: &[FieldError]) -> Vec<&'static str> {
    errors.iter().map(|error| error.flag).collect()
}

fn assert_only_error(flags: &[&str], flag: &str, reason_part: &str) {
    let errors = errors(flags);
    assert_eq!(flags_of(&errors), vec![flag], "{errors:?}");
    assert!(
        errors[0].reason.contains(reason_part),
        "reason {:?} should mention {reason_part:?}",
        errors[0].reason
    );
}

#[test]
fn defaults_equal_upstream() {
    let args = parse(&[]);
    // docs/behaviour.md#flags-mcm (machine-controller-manager).
    assert_eq!(args.port, 10258);
    assert_eq!(args.address, "0.0.0.0");
    assert_eq!(args.cloud_provider, "");
    assert_eq!(args.concurrent_syncs, 10);
    assert_eq!(args.min_resync_period, Duration::from_hours(12));
    assert!(!args.profiling);
    assert!(!args.contention_profiling);
    assert_eq!(args.target_kubeconfig, "");
    assert_eq!(args.control_kubeconfig, "");
    assert_eq!(args.namespace, "default");
    assert_eq!(
        args.kube_api_content_type,
        "application/vnd.kubernetes.protobuf"
    );
    assert_eq!(args.kube_api_qps, 20.0);
    assert_eq!(args.kube_api_burst, 30);
    assert_eq!(args.controller_start_interval, Duration::ZERO);
    assert_eq!(args.safety_up, 2);
    assert_eq!(args.safety_down, 1);
    assert_eq!(
        args.machine_safety_overshooting_period,
        Duration::from_mins(1)
    );
    assert!(args.autoscaler_scaledown_annotation_during_rollout);
    assert!(args.leader_elect);
    assert_eq!(args.leader_elect_lease_duration, Duration::from_secs(15));
    assert_eq!(args.leader_elect_renew_deadline, Duration::from_secs(10));
    assert_eq!(args.leader_elect_retry_period, Duration::from_secs(2));
    assert_eq!(args.leader_elect_resource_lock, "leases");
    // docs/behaviour.md#flags-mc (machine-controller).
    assert_eq!(args.machine_creation_timeout, Duration::from_mins(20));
    assert_eq!(args.machine_health_timeout, Duration::from_mins(10));
    assert_eq!(args.machine_drain_timeout, Duration::from_hours(2));
    assert_eq!(args.machine_inplace_update_timeout, Duration::from_mins(20));
    assert_eq!(args.machine_max_evict_retries, 360);
    assert_eq!(args.machine_pv_detach_timeout, Duration::from_mins(2));
    assert_eq!(args.machine_pv_reattach_timeout, Duration::from_secs(90));
    assert_eq!(
        args.machine_safety_apiserver_statuscheck_timeout,
        Duration::from_secs(30)
    );
    assert_eq!(
        args.machine_safety_apiserver_statuscheck_period,
        Duration::from_mins(1)
    );
    assert_eq!(
        args.machine_safety_orphan_vms_period,
        Duration::from_mins(15)
    );
    assert_eq!(args.machine_preserve_timeout, Duration::from_hours(96));
    assert_eq!(
        args.node_conditions,
        "KernelDeadlock,ReadonlyFilesystem,DiskPressure,NetworkUnavailable"
    );
    assert_eq!(args.bootstrap_token_auth_extra_groups, "");
    assert_eq!(args.resource_exhausted_retry, Duration::from_mins(10));
    // Ours.
    assert_eq!(args.driver_endpoint, "");
    assert_eq!(args.log_format, LogFormat::Text);
    assert_eq!(args.verbosity, 0);
}

#[test]
fn defaults_validate_into_the_expected_config() {
    let config = validate(&parse(&[])).unwrap();
    assert_eq!(config.admin_address, "0.0.0.0:10258".parse().unwrap());
    assert_eq!(config.concurrent_syncs, 10);
    assert_eq!(config.control_kubeconfig, KubeconfigSource::Default);
    assert_eq!(config.target_kubeconfig, Some(KubeconfigSource::Default));
    assert_eq!(config.namespace, "default");
    assert_eq!(config.client.burst, 30);
    assert_eq!(config.machine.max_evict_retries, 360);
    assert_eq!(config.safety.safety_up, 2);
    assert_eq!(
        config.leader_election,
        Some(LeaderElectionConfig {
            lease_name: "machine-controller-manager".to_owned(),
            namespace: "default".to_owned(),
            lease_duration: std::time::Duration::from_secs(15),
            renew_deadline: std::time::Duration::from_secs(10),
            retry_period: std::time::Duration::from_secs(2),
        })
    );
    assert_eq!(config.driver_endpoint, None);
}

#[test]
fn go_style_booleans_and_durations_parse() {
    let args = parse(&[
        "--leader-elect=false",
        "--profiling",
        "--contention-profiling=T",
        "--autoscaler-scaledown-annotation-during-rollout=0",
        "--machine-drain-timeout=1h30m",
        "--machine-pv-reattach-timeout",
        "1.5s",
    ]);
    assert!(!args.leader_elect);
    assert!(args.profiling);
    assert!(args.contention_profiling);
    assert!(!args.autoscaler_scaledown_annotation_during_rollout);
    assert_eq!(args.machine_drain_timeout, Duration::from_mins(90));
    assert_eq!(
        args.machine_pv_reattach_timeout,
        Duration::from_millis(1500)
    );
    let config = validate(&args).unwrap();
    assert_eq!(config.leader_election, None);
}

#[test]
fn malformed_values_are_refused_by_the_parser() {
    for flags in [
        &["--leader-elect=yes"][..],
        &["--machine-drain-timeout=10"],
        &["--machine-drain-timeout=10 minutes"],
        &["--port=http"],
        &["--log-format=xml"],
        &["--unknown-flag"],
    ] {
        let mut argv = vec!["machine-controller-manager"];
        argv.extend_from_slice(flags);
        assert!(Args::try_parse_from(argv).is_err(), "{flags:?} should fail");
    }
}

#[test]
fn logging_flags_accept_component_base_spellings() {
    let args = parse(&["--logging-format=json", "-v", "3"]);
    assert_eq!(args.log_format, LogFormat::Json);
    assert_eq!(args.verbosity, 3);
    assert_eq!(parse(&["--v=4", "--log-format", "text"]).verbosity, 4);
}

#[test]
fn port_must_be_in_range() {
    for port in ["0", "-1", "65536"] {
        assert_only_error(&[&format!("--port={port}")], "port", "between 1 and 65535");
    }
    let config = validate(&parse(&["--port=65535", "--address=::1"])).unwrap();
    assert_eq!(config.admin_address, "[::1]:65535".parse().unwrap());
}

#[test]
fn address_must_be_an_ip() {
    assert_only_error(&["--address=localhost"], "address", "IPv4 or IPv6");
}

#[test]
fn concurrent_syncs_must_be_positive() {
    assert_only_error(
        &["--concurrent-syncs=0"],
        "concurrent-syncs",
        "greater than zero",
    );
    assert_only_error(
        &["--concurrent-syncs=-3"],
        "concurrent-syncs",
        "greater than zero",
    );
}

#[test]
fn contention_profiling_requires_profiling() {
    assert_only_error(
        &["--contention-profiling"],
        "contention-profiling",
        "--profiling",
    );
    assert!(validate(&parse(&["--contention-profiling", "--profiling"])).is_ok());
}

#[test]
fn content_type_must_be_a_media_type() {
    for bad in [
        "protobuf",
        "application/",
        "/json",
        "application/json; charset",
    ] {
        assert_only_error(
            &[&format!("--kube-api-content-type={bad}")],
            "kube-api-content-type",
            "media type",
        );
    }
    for good in [
        "application/json",
        "application/json; charset=utf-8",
        "application/vnd.kubernetes.protobuf",
        "text/plain; charset=\"utf-8\"",
    ] {
        assert!(
            validate(&parse(&[&format!("--kube-api-content-type={good}")])).is_ok(),
            "{good}"
        );
    }
}

#[test]
fn qps_must_be_positive_and_burst_non_negative() {
    assert_only_error(&["--kube-api-qps=0"], "kube-api-qps", "greater than zero");
    assert_only_error(&["--kube-api-qps=-5"], "kube-api-qps", "greater than zero");
    assert_only_error(&["--kube-api-qps=NaN"], "kube-api-qps", "greater than zero");
    assert_only_error(&["--kube-api-burst=-1"], "kube-api-burst", "negative");
    assert_eq!(
        validate(&parse(&["--kube-api-burst=0"]))
            .unwrap()
            .client
            .burst,
        0
    );
}

#[test]
fn namespace_must_be_a_dns_label() {
    for bad in ["", "Shoot--Foo", "-a", "a_b", &"x".repeat(64)] {
        assert_only_error(
            &[&format!("--namespace={bad}")],
            "namespace",
            "namespace name",
        );
    }
    let config = validate(&parse(&["--namespace=shoot--project--cluster"])).unwrap();
    assert_eq!(config.namespace, "shoot--project--cluster");
    assert_eq!(
        config.leader_election.unwrap().namespace,
        "shoot--project--cluster"
    );
}

#[test]
fn every_duration_flag_must_not_be_negative() {
    for flag in [
        "min-resync-period",
        "controller-start-interval",
        "machine-safety-overshooting-period",
        "machine-creation-timeout",
        "machine-health-timeout",
        "machine-drain-timeout",
        "machine-inplace-update-timeout",
        "machine-pv-detach-timeout",
        "machine-pv-reattach-timeout",
        "machine-safety-orphan-vms-period",
        "machine-preserve-timeout",
        "resource-exhausted-retry",
        "machine-safety-apiserver-statuscheck-period",
    ] {
        let errors = errors(&[&format!("--{flag}=-1s")]);
        assert!(
            errors
                .iter()
                .any(|e| e.flag == flag && e.reason.contains("negative")),
            "{flag}: {errors:?}"
        );
    }
    // A negative status-check timeout is refused as such (and still below the period).
    assert_only_error(
        &["--machine-safety-apiserver-statuscheck-timeout=-1s"],
        "machine-safety-apiserver-statuscheck-timeout",
        "negative",
    );
    // Zero is allowed, as upstream.
    assert!(
        validate(&parse(&[
            "--machine-drain-timeout=0s",
            "--min-resync-period=0s"
        ]))
        .is_ok()
    );
}

#[test]
fn integer_safety_flags_must_not_be_negative() {
    assert_only_error(&["--safety-up=-1"], "safety-up", "negative");
    assert_only_error(&["--safety-down=-1"], "safety-down", "negative");
    assert_only_error(
        &["--machine-max-evict-retries=-1"],
        "machine-max-evict-retries",
        "negative",
    );
}

#[test]
fn statuscheck_period_must_not_be_shorter_than_timeout() {
    assert_only_error(
        &[
            "--machine-safety-apiserver-statuscheck-timeout=2m",
            "--machine-safety-apiserver-statuscheck-period=1m",
        ],
        "machine-safety-apiserver-statuscheck-period",
        "statuscheck-timeout (2m0s)",
    );
    // Equal is fine.
    assert!(
        validate(&parse(&[
            "--machine-safety-apiserver-statuscheck-timeout=1m",
            "--machine-safety-apiserver-statuscheck-period=60s",
        ]))
        .is_ok()
    );
}

#[test]
fn kubeconfigs_resolve_like_upstream() {
    let config = validate(&parse(&[
        "--target-kubeconfig=/etc/target/kubeconfig",
        "--control-kubeconfig=inClusterConfig",
    ]))
    .unwrap();
    assert_eq!(config.control_kubeconfig, KubeconfigSource::InCluster);
    assert_eq!(
        config.target_kubeconfig,
        Some(KubeconfigSource::File("/etc/target/kubeconfig".into()))
    );

    // Empty control kubeconfig means the same as the target's.
    let config = validate(&parse(&["--target-kubeconfig=/etc/target/kubeconfig"])).unwrap();
    assert_eq!(
        config.control_kubeconfig,
        KubeconfigSource::File("/etc/target/kubeconfig".into())
    );

    // `none` disables the target cluster.
    let config = validate(&parse(&[
        "--target-kubeconfig=none",
        "--control-kubeconfig=/etc/control/kubeconfig",
    ]))
    .unwrap();
    assert_eq!(config.target_kubeconfig, None);
    assert_eq!(
        config.control_kubeconfig,
        KubeconfigSource::File("/etc/control/kubeconfig".into())
    );
}

#[test]
fn control_kubeconfig_is_required_without_target_cluster() {
    assert_only_error(
        &["--target-kubeconfig=none"],
        "control-kubeconfig",
        "--target-kubeconfig=none",
    );
    assert_only_error(
        &["--control-kubeconfig=none"],
        "control-kubeconfig",
        "cannot be disabled",
    );
}

/// Without flags the Machine controller's plans get the settings their tests start from.
#[test]
fn default_flags_give_the_plans_default_settings() {
    let config = validate(&parse(&[])).unwrap();
    assert_eq!(config.machine, ControllerSettings::default());
}

/// Each machine flag lands in its field of the plans' settings.
#[test]
fn machine_flags_map_to_the_plans_settings() {
    let config = validate(&parse(&[
        "--machine-creation-timeout=21m",
        "--machine-health-timeout=11m",
        "--machine-drain-timeout=3h",
        "--machine-inplace-update-timeout=22m",
        "--machine-preserve-timeout=97h",
        "--machine-max-evict-retries=7",
        "--node-conditions=A,B",
        "--machine-pv-detach-timeout=3m",
        "--machine-pv-reattach-timeout=91s",
        "--resource-exhausted-retry=4m",
        "--machine-retry-backoff-initial=2s",
        "--machine-retry-backoff-factor=3",
        "--machine-retry-backoff-max=70s",
        "--machine-meltdown-threshold=0.25",
        "--bootstrap-token-auth-extra-groups=system:extra",
        "--target-kubeconfig=none",
        "--control-kubeconfig=/control",
    ]))
    .unwrap();
    assert_eq!(
        config.machine,
        ControllerSettings {
            creation_timeout: Duration::from_mins(21),
            health_timeout: Duration::from_mins(11),
            drain_timeout: Duration::from_hours(3),
            in_place_update_timeout: Duration::from_mins(22),
            preserve_timeout: Duration::from_hours(97),
            max_evict_retries: 7,
            node_conditions: "A,B".to_owned(),
            pv_detach_timeout: Duration::from_mins(3),
            pv_reattach_timeout: Duration::from_secs(91),
            resource_exhausted_retry: Duration::from_mins(4),
            retry_backoff: BackoffSettings {
                initial: Duration::from_secs(2),
                factor: 3.0,
                max: Duration::from_secs(70),
            },
            meltdown_threshold: 0.25,
            bootstrap_token_auth_extra_groups: "system:extra".to_owned(),
            target_cluster: false,
        }
    );
}

#[test]
fn retry_backoff_flags_default_and_validate() {
    let config = validate(&parse(&[])).unwrap();
    assert_eq!(config.machine.retry_backoff.initial, Duration::from_secs(5));
    assert!((config.machine.retry_backoff.factor - 2.0).abs() < f64::EPSILON);
    assert_eq!(config.machine.retry_backoff.max, Duration::from_secs(60));
    let config = validate(&parse(&[
        "--machine-retry-backoff-initial=1s",
        "--machine-retry-backoff-factor=1.5",
        "--machine-retry-backoff-max=2m",
    ]))
    .unwrap();
    assert_eq!(config.machine.retry_backoff.initial, Duration::from_secs(1));
    assert!((config.machine.retry_backoff.factor - 1.5).abs() < f64::EPSILON);
    assert_eq!(config.machine.retry_backoff.max, Duration::from_mins(2));
    assert_only_error(
        &["--machine-retry-backoff-initial=0s"],
        "machine-retry-backoff-initial",
        "must be positive",
    );
    assert_only_error(
        &["--machine-retry-backoff-factor=0.5"],
        "machine-retry-backoff-factor",
        "at least 1",
    );
    assert_only_error(
        &["--machine-retry-backoff-max=1s"],
        "machine-retry-backoff-max",
        "must not be shorter",
    );
}

#[test]
fn meltdown_threshold_is_off_by_default_and_a_share() {
    let config = validate(&parse(&[])).unwrap();
    assert!(config.machine.meltdown_threshold.abs() < f64::EPSILON);
    let config = validate(&parse(&["--machine-meltdown-threshold=0.3"])).unwrap();
    assert!((config.machine.meltdown_threshold - 0.3).abs() < f64::EPSILON);
    assert_only_error(
        &["--machine-meltdown-threshold=1.5"],
        "machine-meltdown-threshold",
        "between 0 (off) and 1",
    );
}

/// 0 is kept as given: what it means (the long retry) is the creation plan's rule, tested there.
#[test]
fn resource_exhausted_retry_is_passed_as_given() {
    let config = validate(&parse(&["--resource-exhausted-retry=0s"])).unwrap();
    assert_eq!(config.machine.resource_exhausted_retry, Duration::ZERO);
    let config = validate(&parse(&["--resource-exhausted-retry=30s"])).unwrap();
    assert_eq!(
        config.machine.resource_exhausted_retry,
        Duration::from_secs(30)
    );
}

#[test]
fn leader_election_rules_follow_client_go() {
    assert_only_error(
        &["--leader-elect-resource-lock=endpoints"],
        "leader-elect-resource-lock",
        "only `leases`",
    );
    assert_only_error(
        &["--leader-elect-lease-duration=0s"],
        "leader-elect-lease-duration",
        "greater than zero",
    );
    assert_only_error(
        &["--leader-elect-retry-period=-2s"],
        "leader-elect-retry-period",
        "greater than zero",
    );
    assert_only_error(
        &["--leader-elect-lease-duration=10s"],
        "leader-elect-lease-duration",
        "greater than --leader-elect-renew-deadline (10s)",
    );
    assert_only_error(
        &["--leader-elect-renew-deadline=2400ms"],
        "leader-elect-renew-deadline",
        "1.2 x --leader-elect-retry-period (2s)",
    );
    // Whole-second rounding: 1.9s and 1.4s both round up to 2s, leaving no time to renew.
    assert_only_error(
        &[
            "--leader-elect-lease-duration=1900ms",
            "--leader-elect-renew-deadline=1800ms",
            "--leader-elect-retry-period=1400ms",
        ],
        "leader-elect-lease-duration",
        "whole seconds",
    );
    let config = validate(&parse(&[
        "--leader-elect-lease-duration=2s",
        "--leader-elect-renew-deadline=1500ms",
        "--leader-elect-retry-period=1s",
    ]))
    .unwrap();
    assert_eq!(
        config.leader_election.unwrap().renew_deadline,
        std::time::Duration::from_millis(1500)
    );
}

#[test]
fn leader_election_rules_are_skipped_when_it_is_off() {
    let config = validate(&parse(&[
        "--leader-elect=false",
        "--leader-elect-lease-duration=0s",
        "--leader-elect-resource-lock=configmaps",
    ]))
    .unwrap();
    assert_eq!(config.leader_election, None);
}

#[test]
fn driver_endpoint_must_be_unix_or_tcp() {
    let config = validate(&parse(&["--driver-endpoint=tcp://127.0.0.1:7000"])).unwrap();
    assert_eq!(
        config.driver_endpoint,
        Some(Endpoint::Tcp("127.0.0.1:7000".parse().unwrap()))
    );
    let config = validate(&parse(&["--driver-endpoint=http://[::1]:7000"])).unwrap();
    assert_eq!(
        config.driver_endpoint,
        Some(Endpoint::Tcp("[::1]:7000".parse().unwrap()))
    );
    assert_only_error(&["--driver-endpoint=unix://"], "driver-endpoint", "empty");
    assert_only_error(
        &["--driver-endpoint=https://driver:443"],
        "driver-endpoint",
        "IP:port",
    );
}

#[test]
fn all_violations_are_reported_together() {
    let errors = errors(&[
        "--port=0",
        "--address=nowhere",
        "--concurrent-syncs=0",
        "--kube-api-qps=0",
        "--safety-up=-1",
        "--machine-drain-timeout=-1m",
        "--target-kubeconfig=none",
        "--leader-elect-lease-duration=5s",
        "--driver-endpoint=ftp://x",
    ]);
    assert_eq!(
        flags_of(&errors),
        vec![
            "port",
            "address",
            "concurrent-syncs",
            "kube-api-qps",
            "control-kubeconfig",
            "safety-up",
            "machine-drain-timeout",
            "leader-elect-lease-duration",
            "driver-endpoint",
        ]
    );
    assert_eq!(
        errors[0].to_string(),
        "--port=0: must be between 1 and 65535"
    );
}

#[test]
fn whole_seconds_round_up() {
    assert_eq!(whole_seconds_up(std::time::Duration::from_secs(15)), 15);
    assert_eq!(whole_seconds_up(std::time::Duration::from_millis(1001)), 2);
    assert_eq!(whole_seconds_up(std::time::Duration::from_millis(999)), 1);
}

/// Gardener's container args, exactly as its machine-controller-manager Deployment passes them.
const GARDENER_ARGS: &[&str] = &[
    "--control-kubeconfig=inClusterConfig",
    "--machine-safety-overshooting-period=1m",
    "--namespace=shoot--core--aws",
    "--port=10258",
    "--safety-up=2",
    "--safety-down=1",
    "--target-kubeconfig=/var/run/secrets/gardener.cloud/shoot/generic-kubeconfig/kubeconfig",
    "--concurrent-syncs=30",
    "--kube-api-qps=150",
    "--kube-api-burst=200",
    "--v=3",
];

#[test]
fn gardener_args_select_the_controller_manager_share() {
    let config = validate(&parse(GARDENER_ARGS)).unwrap();
    assert_eq!(config.driver_endpoint, None);
    assert_eq!(
        config.controllers.names,
        [
            "machineset",
            "machinedeployment",
            "machinesafetyovershooting"
        ]
    );
    let election = config.leader_election.unwrap();
    assert_eq!(election.lease_name, "machine-controller-manager");
    assert_eq!(election.namespace, "shoot--core--aws");
    assert_eq!(config.concurrent_syncs, 30);
    assert_eq!(config.verbosity, 3);
}

#[test]
fn a_driver_endpoint_runs_everything_and_machine_only_takes_the_machine_controller_lease() {
    let config = validate(&parse(&["--driver-endpoint=unix:///run/mcm/driver.sock"])).unwrap();
    assert_eq!(
        config.controllers.names.len(),
        super::super::selection::CONTROLLERS.len()
    );
    let config = validate(&parse(&[
        "--driver-endpoint=unix:///run/mcm/driver.sock",
        "--controllers=*,-machineset,-machinedeployment,-machinesafetyovershooting",
    ]))
    .unwrap();
    assert_eq!(
        config.leader_election.unwrap().lease_name,
        "machine-controller"
    );
}

#[test]
fn controllers_that_call_the_driver_need_an_endpoint() {
    assert_only_error(
        &["--controllers=*,machine"],
        "controllers",
        "--driver-endpoint",
    );
    assert_only_error(
        &["--controllers=machinesets"],
        "controllers",
        "unknown controller",
    );
}

#[test]
fn component_base_logging_flags_and_underscored_names_are_accepted() {
    let argv = super::super::logging::normalize_flag_names(
        [
            "machine-controller-manager",
            "--kube_api_qps=150",
            "--vmodule=reconcile=4,plan*=5",
            "--log_flush_frequency=5s",
            "--log-format=json",
        ]
        .map(std::ffi::OsString::from),
    );
    let config = validate(&Args::try_parse_from(argv).unwrap()).unwrap();
    assert!((config.client.qps - 150.0).abs() < f32::EPSILON);
    assert_eq!(config.log_format, LogFormat::Json);
    assert_only_error(&["--vmodule=reconcile"], "vmodule", "pattern=N");
    assert_only_error(
        &["--log-flush-frequency=-1s"],
        "log-flush-frequency",
        "negative",
    );
}

#[test]
fn the_machine_metrics_port_is_served_only_with_machine_controllers() {
    let config = validate(&parse(&["--driver-endpoint=unix:///run/mcm/driver.sock"])).unwrap();
    assert_eq!(
        config.machine_metrics_address,
        Some("0.0.0.0:10259".parse().unwrap())
    );
    let config = validate(&parse(&[
        "--driver-endpoint=unix:///run/mcm/driver.sock",
        "--machine-metrics-port=0",
    ]))
    .unwrap();
    assert_eq!(config.machine_metrics_address, None);
    // Gardener's split mode: the provider's machine-controller owns 10259.
    let config = validate(&parse(GARDENER_ARGS)).unwrap();
    assert_eq!(config.machine_metrics_address, None);
    assert_only_error(
        &["--machine-metrics-port=10258"],
        "machine-metrics-port",
        "must differ from --port",
    );
    assert_only_error(
        &["--machine-metrics-port=70000"],
        "machine-metrics-port",
        "between 0 and 65535",
    );
}

#[test]
fn the_lease_name_and_namespace_can_be_set() {
    let config = validate(&parse(&[
        "--leader-elect-resource-name=mcm-shadow",
        "--leader-elect-resource-namespace=garden",
    ]))
    .unwrap();
    let election = config.leader_election.unwrap();
    assert_eq!(election.lease_name, "mcm-shadow");
    assert_eq!(election.namespace, "garden");
    assert_only_error(
        &["--leader-elect-resource-name=Bad_Name"],
        "leader-elect-resource-name",
        "DNS subdomain",
    );
    assert_only_error(
        &["--leader-elect-resource-namespace=a.b"],
        "leader-elect-resource-namespace",
        "namespace name",
    );
}
