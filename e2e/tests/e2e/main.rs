//! End-to-end scenarios: the real binaries as processes against the sandbox (default), or an
//! existing cluster with the chart installed (`MCM_E2E_KUBECONFIG`). One test binary, two
//! systems: most scenarios share one system and run concurrently (separate object names);
//! the disruptive ones (API server outage, manager restart) get their own and run in sequence.
//! See `e2e/README.md`.

#![allow(clippy::unwrap_used)]

mod admission;
mod bridge;
mod conversion;
mod documented_commands;
mod drain;
mod gardener;
mod harness;
mod health;
mod heartbeat;
mod hot_update;
mod kubectl_plugin;
mod lifecycle;
mod outage;
mod preservation;
mod preview;
mod restart;
mod rollout;
mod safety;
mod support;

use harness::{Needs, Scenario, run_all};
use mcm_e2e::SystemConfig;

fn shared_scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "admission_rejects_invalid_objects_with_per_field_errors",
            needs: Needs::AnyCluster,
            run: |s| Box::pin(admission::invalid_objects_rejected(s)),
        },
        Scenario {
            name: "conversion_v1beta1_reads_and_writes",
            needs: Needs::AnyCluster,
            run: |s| Box::pin(conversion::v1beta1_reads_and_writes(s)),
        },
        Scenario {
            name: "lifecycle_deployment_reaches_running_nodes",
            needs: Needs::AnyCluster,
            run: |s| Box::pin(lifecycle::deployment_reaches_running_nodes(s)),
        },
        Scenario {
            name: "lifecycle_scale_up_and_down_respects_priority",
            needs: Needs::AnyCluster,
            run: |s| Box::pin(lifecycle::scale_up_and_down_respects_priority(s)),
        },
        Scenario {
            name: "lifecycle_force_deletion",
            needs: Needs::AnyCluster,
            run: |s| Box::pin(lifecycle::force_deletion(s)),
        },
        Scenario {
            name: "lifecycle_foreground_deletion_cascades",
            needs: Needs::AnyCluster,
            run: |s| Box::pin(lifecycle::foreground_deletion_cascades(s)),
        },
        Scenario {
            name: "rollout_rolling_update_to_new_class",
            needs: Needs::AnyCluster,
            run: |s| Box::pin(rollout::rolling_update_to_new_class(s)),
        },
        Scenario {
            name: "rollout_recreate",
            needs: Needs::AnyCluster,
            run: |s| Box::pin(rollout::recreate(s)),
        },
        Scenario {
            name: "rollout_pause_and_resume",
            needs: Needs::AnyCluster,
            run: |s| Box::pin(rollout::pause_and_resume(s)),
        },
        Scenario {
            name: "rollout_rollback",
            needs: Needs::AnyCluster,
            run: |s| Box::pin(rollout::rollback(s)),
        },
        Scenario {
            name: "hot_update_of_tags_without_rollout",
            needs: Needs::AnyCluster,
            run: |s| Box::pin(hot_update::tags_without_rollout(s)),
        },
        Scenario {
            name: "health_unhealthy_node_replaced",
            needs: Needs::AnyCluster,
            run: |s| Box::pin(health::unhealthy_node_replaced(s)),
        },
        Scenario {
            name: "drain_respects_pdb_and_volume",
            needs: Needs::AnyCluster,
            run: |s| Box::pin(drain::respects_pdb_and_volume(s)),
        },
        Scenario {
            name: "preservation_now",
            needs: Needs::AnyCluster,
            run: |s| Box::pin(preservation::now(s)),
        },
        Scenario {
            name: "preservation_when_failed",
            needs: Needs::AnyCluster,
            run: |s| Box::pin(preservation::when_failed(s)),
        },
        Scenario {
            name: "preservation_false",
            needs: Needs::AnyCluster,
            run: |s| Box::pin(preservation::false_value(s)),
        },
        Scenario {
            name: "preservation_auto",
            needs: Needs::AnyCluster,
            run: |s| Box::pin(preservation::auto(s)),
        },
        Scenario {
            name: "safety_orphan_vm_collected",
            needs: Needs::LocalProcesses,
            run: |s| Box::pin(safety::orphan_vm_collected(s)),
        },
        Scenario {
            name: "kubectl_plugin_rollout_status_history_undo",
            needs: Needs::AnyCluster,
            run: |s| Box::pin(kubectl_plugin::rollout_status_history_undo(s)),
        },
        Scenario {
            name: "kubectl_plugin_deadline_exceeded_and_stuck",
            needs: Needs::AnyCluster,
            run: |s| Box::pin(kubectl_plugin::deadline_exceeded_and_stuck(s)),
        },
        Scenario {
            name: "safety_overshoot_freeze",
            needs: Needs::AnyCluster,
            run: |s| Box::pin(safety::overshoot_freeze(s)),
        },
    ]
}

fn disruptive_scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "safety_freeze_when_api_server_unreachable",
            needs: Needs::Sandbox,
            run: |s| Box::pin(safety::freeze_when_api_server_unreachable(s)),
        },
        Scenario {
            name: "restart_manager_mid_rollout_no_leaked_vm",
            needs: Needs::LocalProcesses,
            run: |s| Box::pin(restart::manager_restart_mid_rollout(s)),
        },
    ]
}

/// Everything that can share one system, concurrently.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scenarios_on_a_shared_system() {
    run_all(SystemConfig::new("shared"), shared_scenarios(), true).await;
}

/// API server outage and manager restart: their own system, one after the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disruptive_scenarios_on_their_own_system() {
    if mcm_e2e::system::cluster_kubeconfig().is_some() {
        for scenario in disruptive_scenarios() {
            println!(
                "  SKIPPED {}: needs the sandbox system (MCM_E2E_KUBECONFIG is set)",
                scenario.name
            );
        }
        return;
    }
    let mut config = SystemConfig::new("disruptive");
    config.namespace = "e2e-disruptive".to_owned();
    run_all(config, disruptive_scenarios(), false).await;
}

/// Every command the README, docs/ and examples/README.md show and `make run` prints, run as
/// written on a system set up like `make run` (v1alpha1 only, `examples/` in `default`), each
/// with its effect checked. Run alone: `cargo nextest run -p mcm-e2e documented`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documented_commands_on_a_make_run_system() {
    let scenario = Scenario {
        name: "documented_commands",
        needs: Needs::Sandbox,
        run: |s| Box::pin(documented_commands::run_on_make_run_system(s)),
    };
    if mcm_e2e::system::cluster_kubeconfig().is_some() {
        println!(
            "  SKIPPED {}: needs the sandbox system (MCM_E2E_KUBECONFIG is set)",
            scenario.name
        );
        return;
    }
    let mut config = SystemConfig::new("make-run");
    config.namespace = documented_commands::NAMESPACE.to_owned();
    config.serve_v1beta1 = false;
    config.manager_flags = documented_commands::make_run_manager_flags();
    run_all(config, vec![scenario], false).await;
}

/// Node heartbeats (a 150 s API outage, a node whose heartbeat stops): their own system with a
/// short node-monitor grace period, in parallel with the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_scenarios_on_their_own_system() {
    if mcm_e2e::system::cluster_kubeconfig().is_some() {
        for scenario in heartbeat::scenarios() {
            println!(
                "  SKIPPED {}: needs the sandbox system (MCM_E2E_KUBECONFIG is set)",
                scenario.name
            );
        }
        return;
    }
    run_all(heartbeat::system_config(), heartbeat::scenarios(), false).await;
}

/// Gardener's MCM pod: our manager with Gardener's exact arguments in split
/// mode beside our machine-only manager as the provider sidecar, on a system of its own (no
/// system manager). Run alone: `cargo nextest run -p mcm-e2e gardener`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gardener_split_mode_pod_with_gardeners_arguments() {
    let scenario = Scenario {
        name: "gardener_split_mode_pod",
        needs: Needs::Sandbox,
        run: |s| Box::pin(gardener::gardener_pod(s)),
    };
    if mcm_e2e::system::cluster_kubeconfig().is_some() {
        println!(
            "  SKIPPED {}: needs the sandbox system (MCM_E2E_KUBECONFIG is set)",
            scenario.name
        );
        return;
    }
    let mut config = SystemConfig::new("gardener");
    config.namespace = "shoot--e2e--gardener".to_owned();
    config.start_manager = false;
    run_all(config, vec![scenario], false).await;
}

/// Know before you roll: the webhook's previewed counts of machines updated in place
/// and replaced equal what the controllers then did. Its own system, so it runs alone:
/// `cargo nextest run -p mcm-e2e rollout_preview`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_preview_on_its_own_system() {
    let scenario = Scenario {
        name: "rollout_preview_matches_what_happened",
        needs: Needs::AnyCluster,
        run: |s| Box::pin(preview::preview_matches_what_happened(s)),
    };
    let in_place = Scenario {
        name: "rollout_preview_in_place_matches_what_happened",
        needs: Needs::LocalProcesses,
        run: |s| Box::pin(preview::in_place_preview_matches_what_happened(s)),
    };
    let mut config = SystemConfig::new("preview");
    config.namespace = "e2e-preview".to_owned();
    run_all(config, vec![scenario, in_place], false).await;
}

/// The preview of an undo, a resume with a pending template, a class that does not exist (and
/// its revert) and a drifted fleet against what the controllers then did. Its own system:
/// `cargo test -p mcm-e2e rollout_preview_of_undo`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_preview_of_undo_resume_missing_class_and_drift() {
    let scenario = Scenario {
        name: "rollout_preview_of_undo_resume_missing_class_and_drift",
        needs: Needs::AnyCluster,
        run: |s| {
            Box::pin(preview::undo_resume_missing_class_and_drift_previews_match(
                s,
            ))
        },
    };
    let mut config = SystemConfig::new("preview-undo");
    config.namespace = "e2e-preview-undo".to_owned();
    run_all(config, vec![scenario], false).await;
}

/// API-server outages of 20, 60 and 150 s against a manager that elects a leader: prints how
/// long after the API's return it leads and reconciles again; fails if it exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outages_on_their_own_system() {
    let scenario = Scenario {
        name: "outage_manager_leads_again_after_api_outages",
        needs: Needs::LocalProcesses,
        run: |s| Box::pin(outage::leads_again_after_outages(s)),
    };
    if mcm_e2e::system::cluster_kubeconfig().is_some() {
        println!(
            "  SKIPPED {}: needs the sandbox system (MCM_E2E_KUBECONFIG is set)",
            scenario.name
        );
        return;
    }
    let mut config = SystemConfig::new("outage");
    config.namespace = "e2e-outage".to_owned();
    // Leader election as in production (upstream's timings), so the Lease is lost in the outage.
    config
        .manager_flags
        .retain(|flag| !flag.starts_with("--leader-elect="));
    config.manager_flags.push("--leader-elect=true".to_owned());
    run_all(config, vec![scenario], false).await;
}

/// A 3 → 30 scale-up in flight through a 150 s API outage that closes every watch, against a
/// manager that elects a leader: no machine created, failed or kept on a stale view. Its own
/// system, in parallel with the others: `cargo test -p mcm-e2e stale_view`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_view_outage_on_its_own_system() {
    let scenario = Scenario {
        name: "outage_no_stale_view_after_an_outage_with_closed_watches",
        // On the sandbox the Machines' history across the outage is replayed from its watch
        // history; on kube-apiserver, whose restart starts that history afresh, it comes from
        // the audit log (creations) and the test's own polling (phases).
        needs: Needs::LocalProcesses,
        run: |s| Box::pin(outage::no_stale_view_after_an_outage_with_closed_watches(s)),
    };
    if mcm_e2e::system::cluster_kubeconfig().is_some() {
        println!(
            "  SKIPPED {}: needs the sandbox system (MCM_E2E_KUBECONFIG is set)",
            scenario.name
        );
        return;
    }
    let mut config = SystemConfig::new("stale-view");
    config.namespace = "e2e-stale-view".to_owned();
    config
        .manager_flags
        .retain(|flag| !flag.starts_with("--leader-elect="));
    config.manager_flags.push("--leader-elect=true".to_owned());
    run_all(config, vec![scenario], false).await;
}

/// The manager against upstream's driver interface: the Go in-memory driver of `provider-go/`
/// behind the Go bridge, on its own system (`cargo test -p mcm-e2e go_bridge`). Without Go it
/// is skipped with a banner, and fails under `CI=true`, where Go is part of the machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_bridge_on_its_own_system() {
    let scenario = Scenario {
        name: "go_bridge_create_scale_roll_errors_delete",
        needs: Needs::LocalProcesses,
        run: |s| Box::pin(bridge::machines_through_the_go_bridge(s)),
    };
    if mcm_e2e::system::cluster_kubeconfig().is_some() {
        println!(
            "  SKIPPED {}: needs the processes started here (MCM_E2E_KUBECONFIG is set)",
            scenario.name
        );
        return;
    }
    if !mcm_e2e::binaries::go_available() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{}: Go is not installed, and CI must run the bridge's scenario",
            scenario.name
        );
        println!(
            "  ********\n  SKIPPED {}: `go` is not on the PATH (the Go provider cannot be built)\n  ********",
            scenario.name
        );
        return;
    }
    let mut config = SystemConfig::new("go-bridge");
    config.namespace = "e2e-go-bridge".to_owned();
    config.provider = mcm_e2e::ProviderKind::GoBridge;
    config
        .manager_flags
        .push("--resource-exhausted-retry=5s".to_owned());
    run_all(config, vec![scenario], false).await;
}
