#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcm_api::v1alpha1::Machine;

use super::exposition::merge_expositions;
use super::*;

/// Upstream sample names of docs/behaviour.md#metrics-mc, docs/behaviour.md#metrics-mcm (the names dashboards query), plus ours.
const UPSTREAM_SAMPLE_NAMES: &[&str] = &[
    "mcm_machine_items_total",
    "mcm_machine_current_status_phase",
    "mcm_machine_controller_frozen",
    "mcm_machine_info",
    "mcm_machine_status_condition",
    "mcm_machine_create_duration_seconds",
    "mcm_machine_initialize_duration_seconds",
    "mcm_machine_join_duration_seconds",
    "mcm_machine_drain_duration_seconds",
    "mcm_machine_delete_duration_seconds",
    "mcm_machine_num_failed_join",
    "mcm_cloud_api_driver_request_duration_seconds_count",
    "mcm_cloud_api_driver_requests_failed_total",
    "mcm_misc_scrape_failure_total",
    "mcm_machine_stale_machines_total",
    "mcm_machine_set_items_total",
    "mcm_machine_set_info",
    "mcm_machine_set_info_spec_replicas",
    "mcm_machine_set_info_spec_min_ready_seconds",
    "mcm_machine_set_status_condition",
    "mcm_machine_set_failed_machines",
    "mcm_machine_set_status_available_replicas",
    "mcm_machine_set_status_fully_labelled_replicas",
    "mcm_machine_set_status_ready_replicas",
    "mcm_machine_set_status_replicas",
    "mcm_machine_deployment_items_total",
    "mcm_machine_deployment_info",
    "mcm_machine_deployment_info_spec_paused",
    "mcm_machine_deployment_info_spec_replicas",
    "mcm_machine_deployment_info_spec_min_ready_seconds",
    "mcm_machine_deployment_info_spec_rolling_update_max_surge",
    "mcm_machine_deployment_info_spec_rolling_update_max_unavailable",
    "mcm_machine_deployment_info_spec_revision_history_limit",
    "mcm_machine_deployment_info_spec_progress_deadline_seconds",
    "mcm_machine_deployment_info_spec_rollback_to_revision",
    "mcm_machine_deployment_status_condition",
    "mcm_machine_deployment_status_available_replicas",
    "mcm_machine_deployment_status_unavailable_replicas",
    "mcm_machine_deployment_status_ready_replicas",
    "mcm_machine_deployment_status_updated_replicas",
    "mcm_machine_deployment_status_replicas",
    "mcm_machine_deployment_status_collision_count",
    "mcm_machine_deployment_failed_machines",
    "mcm_reconcile_duration_seconds_count",
    "mcm_workqueue_depth",
    "mcm_driver_call_duration_seconds_count",
];

fn sample_lines(text: &str) -> Vec<&str> {
    text.lines().filter(|line| !line.starts_with('#')).collect()
}

/// The value of the one sample line that starts with `prefix` (name plus labels).
fn value_of(text: &str, prefix: &str) -> Option<String> {
    let lines: Vec<&str> = sample_lines(text)
        .into_iter()
        .filter(|line| line.starts_with(prefix))
        .collect();
    assert!(lines.len() <= 1, "{prefix} matches {lines:?}");
    lines
        .first()
        .and_then(|line| line.rsplit(' ').next())
        .map(str::to_owned)
}

fn conditions() -> Vec<ConditionSample> {
    vec![
        ConditionSample {
            condition_type: "Ready".into(),
            status: "True".into(),
        },
        ConditionSample {
            condition_type: "DiskPressure".into(),
            status: "Unknown".into(),
        },
    ]
}

fn failed() -> Vec<FailedMachineSample> {
    vec![FailedMachineSample {
        name: "m-1".into(),
        provider_id: "virtual:///m-1".into(),
        owner_ref: "set-a".into(),
        last_operation_state: "Failed".into(),
        last_operation_type: "HealthCheck".into(),
    }]
}

fn machine(name: &str, phase: &str) -> MachineSample {
    MachineSample {
        name: name.into(),
        namespace: "shoot--a".into(),
        created_at: 1_700_000_000,
        provider_id: format!("virtual:///{name}"),
        class_api_group: "machine.sapcloud.io".into(),
        class_kind: "MachineClass".into(),
        class_name: "small".into(),
        node_name: format!("node-{name}"),
        phase: phase.into(),
        conditions: conditions(),
    }
}

fn populate(metrics: &Metrics) {
    let labels = MachineDurationLabels {
        namespace: "shoot--a".into(),
        machine_deployment: "worker".into(),
        instance_type: "m5.large".into(),
        zone: "eu-1a".into(),
    };
    metrics.machine_created(&labels, 61.4);
    metrics.machine_initialized(&labels, 70.0);
    metrics.machine_joined(&labels, 120.0);
    metrics.machine_deleted(&labels, 30.0);
    metrics.machine_drained(
        &DrainLabels {
            namespace: "shoot--a".into(),
            machine_deployment: "worker".into(),
        },
        12.0,
    );
    metrics.machine_failed_join(&labels);
    metrics.driver_call(
        "virtual",
        "CreateMachine",
        "Unavailable",
        Duration::from_millis(30),
    );
    metrics.scrape_failed(ScrapeKind::Machine);
    metrics.set_machine_controller_frozen(true);
    metrics.replace_machines(vec![machine("a", "Running")]);
    metrics.stale_machines_deleted(2);
    metrics.replace_machine_sets(&[MachineSetSample {
        name: "set-a".into(),
        namespace: "shoot--a".into(),
        spec_replicas: 3,
        replicas: 3,
        ready_replicas: 2,
        conditions: conditions(),
        failed_machines: failed(),
        ..Default::default()
    }]);
    metrics.replace_machine_deployments(&[MachineDeploymentSample {
        name: "worker".into(),
        namespace: "shoot--a".into(),
        strategy_type: "RollingUpdate".into(),
        spec_replicas: 3,
        rolling_update: Some((1, 0)),
        revision_history_limit: Some(10),
        progress_deadline_seconds: Some(600),
        rollback_to_revision: Some(2),
        collision_count: Some(1),
        conditions: conditions(),
        failed_machines: failed(),
        ..Default::default()
    }]);
    metrics.reconcile_finished("machine", Duration::from_millis(3));
    metrics.set_workqueue_depth("machine", 7);
}

#[test]
fn every_upstream_name_is_exposed_once_populated() {
    let metrics = Metrics::new();
    populate(&metrics);
    let text = metrics.encode().unwrap();
    let samples = sample_lines(&text);
    for name in UPSTREAM_SAMPLE_NAMES {
        assert!(
            samples
                .iter()
                .any(|line| line.starts_with(&format!("{name}{{"))
                    || line.starts_with(&format!("{name} "))),
            "no sample named {name} in\n{text}"
        );
    }
    assert!(text.ends_with("# EOF\n"));
    // Help texts are written once per metric, without a doubled full stop.
    assert!(!text.contains(".."), "{text}");
}

#[test]
fn an_empty_registry_shows_the_scalar_metrics_only() {
    // Label families without series are omitted (as client_golang omits empty vectors).
    let text = Metrics::new().encode().unwrap();
    assert!(text.contains("mcm_machine_items_total 0\n"), "{text}");
    assert!(
        text.contains("mcm_machine_stale_machines_total 0\n"),
        "{text}"
    );
    assert!(!text.contains("mcm_machine_info"), "{text}");
}

#[test]
fn metric_types_are_as_documented() {
    let metrics = Metrics::new();
    populate(&metrics);
    let text = metrics.encode().unwrap();
    for (name, kind) in [
        ("mcm_machine_items_total", "gauge"),
        ("mcm_machine_num_failed_join", "gauge"),
        ("mcm_machine_stale_machines", "counter"),
        ("mcm_misc_scrape_failure", "counter"),
        ("mcm_cloud_api_driver_requests_failed", "counter"),
        ("mcm_cloud_api_driver_request_duration_seconds", "histogram"),
        ("mcm_reconcile_duration_seconds", "histogram"),
        ("mcm_driver_call_duration_seconds", "histogram"),
        ("mcm_workqueue_depth", "gauge"),
        ("mcm_machine_deployment_status_collision_count", "gauge"),
        ("mcm_rollout_create_seconds", "histogram"),
        ("mcm_rollout_join_seconds", "histogram"),
        ("mcm_rollout_drain_seconds", "histogram"),
    ] {
        assert!(
            text.contains(&format!("# TYPE {name} {kind}\n")),
            "{name} is not a {kind}:\n{text}"
        );
    }
}

#[test]
fn labels_and_values_follow_upstream() {
    let metrics = Metrics::new();
    populate(&metrics);
    let text = metrics.encode().unwrap();
    let duration_labels = r#"{namespace="shoot--a",machine_deployment="worker",instance_type="m5.large",zone="eu-1a"}"#;
    assert_eq!(
        value_of(
            &text,
            &format!("mcm_machine_create_duration_seconds{duration_labels}")
        )
        .as_deref(),
        Some("61.0"),
        "rounded to seconds"
    );
    // The distribution keeps the exact figure, per deployment (the gauge only the latest).
    assert_eq!(
        value_of(
            &text,
            r#"mcm_rollout_create_seconds_sum{namespace="shoot--a",machine_deployment="worker"}"#
        )
        .as_deref(),
        Some("61.4")
    );
    assert_eq!(
        value_of(
            &text,
            r#"mcm_rollout_create_seconds_bucket{le="90.0",namespace="shoot--a",machine_deployment="worker"}"#
        )
        .as_deref(),
        Some("1")
    );
    assert_eq!(
        value_of(
            &text,
            &format!("mcm_machine_num_failed_join{duration_labels}")
        )
        .as_deref(),
        Some("1")
    );
    assert_eq!(
        value_of(
            &text,
            r#"mcm_machine_current_status_phase{name="a",namespace="shoot--a"}"#
        )
        .as_deref(),
        Some("1")
    );
    assert_eq!(
        value_of(
            &text,
            r#"mcm_machine_info{name="a",namespace="shoot--a",createdAt="1700000000",spec_provider_id="virtual:///a",spec_class_api_group="machine.sapcloud.io",spec_class_kind="MachineClass",spec_class_name="small",node_name="node-a"}"#
        )
        .as_deref(),
        Some("1")
    );
    assert_eq!(
        value_of(
            &text,
            r#"mcm_machine_status_condition{name="a",namespace="shoot--a",condition="DiskPressure"}"#
        )
        .as_deref(),
        Some("2")
    );
    assert_eq!(
        value_of(&text, "mcm_machine_controller_frozen ").as_deref(),
        Some("1")
    );
    assert_eq!(
        value_of(&text, "mcm_machine_stale_machines_total ").as_deref(),
        Some("2")
    );
    assert_eq!(
        value_of(
            &text,
            r#"mcm_misc_scrape_failure_total{kind="Machine-count",binary="machine-controller-manager-provider"}"#
        )
        .as_deref(),
        Some("1")
    );
    assert_eq!(
        value_of(
            &text,
            r#"mcm_cloud_api_driver_requests_failed_total{provider="virtual",operation="CreateMachine",error_code="Unavailable"}"#
        )
        .as_deref(),
        Some("1")
    );
    assert_eq!(
        value_of(
            &text,
            r#"mcm_driver_call_duration_seconds_count{method="CreateMachine",code="Unavailable"}"#
        )
        .as_deref(),
        Some("1")
    );
    // Status replicas carries status.replicas (upstream wrote readyReplicas there).
    assert_eq!(
        value_of(
            &text,
            r#"mcm_machine_set_status_replicas{name="set-a",namespace="shoot--a"}"#
        )
        .as_deref(),
        Some("3")
    );
    assert_eq!(
        value_of(
            &text,
            r#"mcm_machine_set_failed_machines{name="set-a",namespace="shoot--a",failed_machine_name="m-1",failed_machine_provider_id="virtual:///m-1",failed_machine_owner_ref="set-a",failed_machine_last_operation_state="Failed",failed_machine_last_operation_machine_operation_type="HealthCheck"}"#
        )
        .as_deref(),
        Some("1")
    );
    assert_eq!(
        value_of(
            &text,
            r#"mcm_machine_deployment_info{name="worker",namespace="shoot--a",createdAt="0",spec_strategy_type="RollingUpdate"}"#
        )
        .as_deref(),
        Some("1")
    );
    assert_eq!(
        value_of(
            &text,
            r#"mcm_workqueue_depth{name="machine",queue="machine"}"#
        )
        .as_deref(),
        Some("7")
    );
}

#[test]
fn successful_driver_calls_are_not_counted_as_failed() {
    let metrics = Metrics::new();
    metrics.driver_call("virtual", "DeleteMachine", "OK", Duration::from_millis(5));
    let text = metrics.encode().unwrap();
    assert!(!text.contains("mcm_cloud_api_driver_requests_failed_total{"));
    assert_eq!(
        value_of(
            &text,
            r#"mcm_cloud_api_driver_request_duration_seconds_count{provider="virtual",operation="DeleteMachine"}"#
        )
        .as_deref(),
        Some("1")
    );
}

#[test]
fn snapshots_replace_series_of_deleted_objects() {
    let metrics = Metrics::new();
    metrics.replace_machines(vec![machine("a", "Running"), machine("b", "Failed")]);
    metrics.replace_machines(vec![machine("b", "Terminating")]);
    let text = metrics.encode().unwrap();
    assert!(!text.contains(r#"name="a""#), "{text}");
    assert_eq!(
        value_of(&text, "mcm_machine_items_total ").as_deref(),
        Some("1")
    );
    assert_eq!(
        value_of(
            &text,
            r#"mcm_machine_current_status_phase{name="b",namespace="shoot--a"}"#
        )
        .as_deref(),
        Some("-4")
    );

    // Optional deployment gauges are absent when the field is unset.
    metrics.replace_machine_deployments(&[MachineDeploymentSample {
        name: "worker".into(),
        namespace: "shoot--a".into(),
        strategy_type: "Recreate".into(),
        ..Default::default()
    }]);
    let text = metrics.encode().unwrap();
    for absent in [
        "mcm_machine_deployment_info_spec_rolling_update_max_surge{",
        "mcm_machine_deployment_info_spec_revision_history_limit{",
        "mcm_machine_deployment_status_collision_count{",
    ] {
        assert!(!text.contains(absent), "{absent} present:\n{text}");
    }
}

#[test]
fn scrape_hooks_refresh_snapshots_at_every_scrape() {
    let metrics = Metrics::new();
    let machines = Arc::new(Mutex::new(vec![machine("a", "Pending")]));
    let source = machines.clone();
    metrics.on_scrape(Box::new(move |m: &Metrics| {
        let snapshot = source.lock().unwrap().clone();
        m.replace_machines(snapshot);
    }));
    let first = metrics.encode().unwrap();
    assert_eq!(
        value_of(&first, "mcm_machine_items_total ").as_deref(),
        Some("1")
    );
    machines.lock().unwrap().push(machine("b", "Running"));
    let second = metrics.encode().unwrap();
    assert_eq!(
        value_of(&second, "mcm_machine_items_total ").as_deref(),
        Some("2")
    );
}

#[test]
fn the_machine_snapshot_is_held_only_until_a_scrape_of_the_machine_series() {
    let metrics = Metrics::new();
    metrics.replace_machines(vec![machine("a", "Running")]);
    let manager = metrics.encode_port(MetricsPort::ControllerManager).unwrap();
    assert!(!has_sample(&manager, "mcm_machine_info"), "{manager}");
    let first = metrics.encode_port(MetricsPort::MachineController).unwrap();
    assert!(has_sample(&first, "mcm_machine_info"), "{first}");
    // Without a hook taking a new snapshot, the next scrape has no per-machine series left.
    let second = metrics.encode().unwrap();
    for name in [
        "mcm_machine_info",
        "mcm_machine_current_status_phase",
        "mcm_machine_status_condition",
    ] {
        assert!(!has_sample(&second, name), "{name} kept:\n{second}");
    }
    assert_eq!(
        value_of(&second, "mcm_machine_items_total ").as_deref(),
        Some("1")
    );
}

#[test]
fn phase_and_condition_values_match_upstream() {
    for (phase, value) in [
        ("Terminating", -4),
        ("Failed", -3),
        ("CrashLoopBackOff", -2),
        ("Unknown", -1),
        ("Pending", 0),
        ("Running", 1),
        ("Available", 0),
        ("", 0),
        ("InPlaceUpdating", 0),
    ] {
        assert_eq!(phase_value(phase), value, "{phase}");
    }
    assert_eq!(condition_value("True"), 1);
    assert_eq!(condition_value("False"), 0);
    assert_eq!(condition_value("Unknown"), 2);
    assert_eq!(condition_value("garbage"), 2);
}

fn api_machine(json: serde_json::Value) -> Machine {
    serde_json::from_value(json).unwrap()
}

#[test]
fn machine_samples_are_read_from_machine_objects() {
    let machine = api_machine(serde_json::json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {
            "name": "worker-abc",
            "namespace": "shoot--a",
            "creationTimestamp": "2023-11-14T22:13:20Z",
            "labels": {"name": "worker", "node": "ip-10-0-0-1"}
        },
        "spec": {
            "class": {"kind": "MachineClass", "name": "small"},
            "providerID": "aws:///eu-1a/i-1",
            "nodeTemplate": {"metadata": {"labels": {"topology.kubernetes.io/zone": "eu-1a"}}}
        },
        "status": {
            "currentStatus": {"phase": "CrashLoopBackOff"},
            "conditions": [{"type": "Ready", "status": "False"}]
        }
    }));
    let sample = MachineSample::from_machine(&machine);
    assert_eq!(
        sample,
        MachineSample {
            name: "worker-abc".into(),
            namespace: "shoot--a".into(),
            created_at: 1_700_000_000,
            provider_id: "aws:///eu-1a/i-1".into(),
            class_api_group: String::new(),
            class_kind: "MachineClass".into(),
            class_name: "small".into(),
            node_name: "ip-10-0-0-1".into(),
            phase: "CrashLoopBackOff".into(),
            conditions: vec![ConditionSample {
                condition_type: "Ready".into(),
                status: "False".into(),
            }],
        }
    );
    assert_eq!(phase_value(&sample.phase), -2);
    assert_eq!(
        MachineDurationLabels::for_machine(&machine, Some("m5.large")),
        Some(MachineDurationLabels {
            namespace: "shoot--a".into(),
            machine_deployment: "worker".into(),
            instance_type: "m5.large".into(),
            zone: "eu-1a".into(),
        })
    );
}

#[test]
fn machines_without_a_name_label_get_no_duration_labels() {
    let machine = api_machine(serde_json::json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {"name": "bare", "namespace": "ns"},
        "spec": {}
    }));
    assert_eq!(MachineDurationLabels::for_machine(&machine, None), None);
    assert_eq!(DrainLabels::for_machine(&machine), None);
    // A bare machine still yields a sample (empty fields, phase value 0).
    let sample = MachineSample::from_machine(&machine);
    assert_eq!(sample.name, "bare");
    assert_eq!(sample.created_at, 0);
    assert_eq!(phase_value(&sample.phase), 0);
}

/// Gardener's ServiceMonitor keeps these only from the `providermetrics` port (10259).
const MACHINE_PORT_NAMES: &[&str] = &[
    "mcm_machine_items_total",
    "mcm_machine_current_status_phase",
    "mcm_machine_info",
    "mcm_machine_status_condition",
    "mcm_machine_controller_frozen",
    "mcm_cloud_api_driver_request_duration_seconds_count",
    "mcm_cloud_api_driver_requests_failed_total",
];

/// ... and these only from the `metrics` port (10258).
const MANAGER_PORT_NAMES: &[&str] = &[
    "mcm_machine_set_items_total",
    "mcm_machine_set_info",
    "mcm_machine_deployment_items_total",
    "mcm_machine_deployment_info",
    "mcm_machine_stale_machines_total",
];

fn has_sample(text: &str, name: &str) -> bool {
    sample_lines(text)
        .iter()
        .any(|line| line.starts_with(&format!("{name}{{")) || line.starts_with(&format!("{name} ")))
}

#[test]
fn each_port_serves_its_binarys_series() {
    let metrics = Metrics::new();
    populate(&metrics);
    metrics.set_workqueue_depth("machineset", 2);
    let manager = metrics.encode_port(MetricsPort::ControllerManager).unwrap();
    let machine = metrics.encode_port(MetricsPort::MachineController).unwrap();
    for name in MACHINE_PORT_NAMES {
        assert!(
            has_sample(&machine, name),
            "{name} missing on the machine port:\n{machine}"
        );
        assert!(
            !has_sample(&manager, name),
            "{name} on the manager port:\n{manager}"
        );
    }
    for name in MANAGER_PORT_NAMES {
        assert!(
            has_sample(&manager, name),
            "{name} missing on the manager port:\n{manager}"
        );
        assert!(
            !has_sample(&machine, name),
            "{name} on the machine port:\n{machine}"
        );
    }
    // Work queues go with their controller's binary.
    assert!(
        machine.contains(r#"mcm_workqueue_depth{name="machine",queue="machine"} 7"#),
        "{machine}"
    );
    assert!(
        manager.contains(r#"mcm_workqueue_depth{name="machineset",queue="machineset"} 2"#),
        "{manager}"
    );
    assert!(!manager.contains(r#"name="machine","#), "{manager}");
    // Both ports describe the process (Linux).
    if std::path::Path::new("/proc/self/stat").exists() {
        for text in [&manager, &machine] {
            for name in [
                "process_open_fds",
                "process_max_fds",
                "process_cpu_seconds_total",
                "process_resident_memory_bytes",
            ] {
                assert!(has_sample(text, name), "{name} missing:\n{text}");
            }
        }
    } else {
        println!("SKIPPED process_* checks: no /proc");
    }
}

#[test]
fn the_combined_exposition_has_every_family_once() {
    let metrics = Metrics::new();
    populate(&metrics);
    metrics.set_workqueue_depth("machineset", 2);
    let text = metrics.encode().unwrap();
    let mut helps: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("# HELP "))
        .map(|rest| rest.split_whitespace().next().unwrap())
        .collect();
    let count = helps.len();
    helps.sort_unstable();
    helps.dedup();
    assert_eq!(helps.len(), count, "a family is described twice:\n{text}");
    // The merged work queue family holds both ports' series.
    assert!(text.contains(r#"mcm_workqueue_depth{name="machine",queue="machine"} 7"#));
    assert!(text.contains(r#"mcm_workqueue_depth{name="machineset",queue="machineset"} 2"#));
    assert_eq!(text.matches("# EOF").count(), 1);
    assert!(text.ends_with("# EOF\n"));
}

#[test]
fn workqueue_families_follow_client_go() {
    let metrics = Metrics::new();
    metrics.workqueue_added("machineset");
    metrics.workqueue_added("machineset");
    metrics.workqueue_retried("machineset");
    metrics.workqueue_started("machineset", Duration::from_millis(2));
    metrics.workqueue_finished("machineset", Duration::from_millis(5));
    metrics.set_workqueue_in_progress("machineset", 1.5, 1.0);
    let text = metrics.encode_port(MetricsPort::ControllerManager).unwrap();
    let labels = r#"{name="machineset",queue="machineset"}"#;
    for (name, kind) in [
        ("mcm_workqueue_adds", "counter"),
        ("mcm_workqueue_retries", "counter"),
        ("mcm_workqueue_queue_duration_seconds", "histogram"),
        ("mcm_workqueue_work_duration_seconds", "histogram"),
        ("mcm_workqueue_unfinished_work_seconds", "gauge"),
        ("mcm_workqueue_longest_running_processor_seconds", "gauge"),
    ] {
        assert!(
            text.contains(&format!("# TYPE {name} {kind}\n")),
            "{name}:\n{text}"
        );
    }
    assert!(
        text.contains(&format!("mcm_workqueue_adds_total{labels} 2\n")),
        "{text}"
    );
    assert!(
        text.contains(&format!("mcm_workqueue_retries_total{labels} 1\n")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "mcm_workqueue_queue_duration_seconds_count{labels} 1\n"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "mcm_workqueue_unfinished_work_seconds{labels} 1.5\n"
        )),
        "{text}"
    );
    // client-go's buckets: 10 ns .. 1 s by powers of ten (ten of them), then +Inf.
    let bounds: Vec<f64> = text
        .lines()
        .filter(|line| line.starts_with("mcm_workqueue_work_duration_seconds_bucket{"))
        .filter_map(|line| line.split("le=\"").nth(1)?.split('"').next())
        .filter(|bound| *bound != "+Inf")
        .map(|bound| bound.parse().unwrap())
        .collect();
    assert_eq!(bounds.len(), 10, "{text}");
    for (index, bound) in bounds.iter().enumerate() {
        let expected = 1e-8 * 10f64.powi(i32::try_from(index).unwrap());
        assert!(
            (bound / expected - 1.0).abs() < 1e-9,
            "{bound} != {expected}"
        );
    }
}

#[test]
fn merging_keeps_first_headers_and_appends_samples() {
    let first = "# HELP a A.\n# TYPE a gauge\na{x=\"1\"} 1\n# HELP process_open_fds P.\n# TYPE process_open_fds gauge\nprocess_open_fds 5\n";
    let second = "# HELP a A.\n# TYPE a gauge\na{x=\"2\"} 2\n# HELP b B.\n# TYPE b gauge\nb 3\n# HELP process_open_fds P.\n# TYPE process_open_fds gauge\nprocess_open_fds 6\n";
    assert_eq!(
        merge_expositions(first, second),
        "# HELP a A.\n# TYPE a gauge\na{x=\"1\"} 1\na{x=\"2\"} 2\n# HELP process_open_fds P.\n# TYPE process_open_fds gauge\nprocess_open_fds 5\n# HELP b B.\n# TYPE b gauge\nb 3\n"
    );
}
