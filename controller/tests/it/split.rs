//! Split mode: without `--driver-endpoint` the manager runs upstream's machine-controller-manager
//! share only and writes nothing the provider's machine-controller owns (Machine status and
//! finalizers, MachineClass finalizers, VMs, Nodes).

use std::time::Duration;

use kube::api::{ListParams, Patch, PatchParams, PostParams};
use mcm_api::keys::finalizer;
use mcm_api::v1alpha1::MachineDeployment;
use mcm_controller::manager::compose::{ControllerSet, named};
use mcm_controller::platform::selection::default_set;
use mcm_sandbox::Verb;
use serde_json::json;

use crate::harness::{NAMESPACE, World, eventually};

const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_driver_only_the_controller_manager_share_runs_and_machines_are_left_alone() {
    let mut world = World::start().await;
    world.create_class("c", json!({})).await;
    let config = world.config_without_driver(&["--v=3"]);
    assert_eq!(config.controllers.names, default_set(false));
    // No driver client is given and none is configured: the share must not need one.
    let set = ControllerSet::with(named(&config.controllers.names));
    world.start_manager_with(Box::new(set), config).await;
    if let Some(target) = &world.target_sandbox {
        target.faults().reset_counters();
    }

    let deployment: MachineDeployment = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineDeployment",
        "metadata": {"name": "split", "namespace": NAMESPACE},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"name": "split"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"name": "split"}},
                "spec": {"class": {"kind": "MachineClass", "name": "c"}}
            }
        }
    }))
    .unwrap();
    world
        .machine_deployments()
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    // The MachineSet controller creates the machines and reports them in its status: the
    // controllers of the share did run.
    eventually("two machines and a MachineSet status", LIMIT, || {
        let world = &world;
        async move {
            let machines = world.machines().list(&ListParams::default()).await.ok()?;
            let sets = world
                .machine_sets()
                .list(&ListParams::default())
                .await
                .ok()?;
            let reported = sets
                .items
                .iter()
                .any(|ms| ms.status.as_ref().and_then(|s| s.replicas) == Some(2));
            (machines.items.len() == 2 && reported).then_some(())
        }
    })
    .await;
    // Scale down: the MachineSet deletes one machine (its own Terminating status write is
    // upstream MCM behaviour); without a machine finalizer it goes at once.
    world
        .machine_deployments()
        .patch(
            "split",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    eventually("one machine left", LIMIT, || {
        let world = &world;
        async move {
            let machines = world.machines().list(&ListParams::default()).await.ok()?;
            (machines.items.len() == 1).then_some(())
        }
    })
    .await;

    for machine in world.machines().list(&ListParams::default()).await.unwrap() {
        let finalizers = machine.metadata.finalizers.clone().unwrap_or_default();
        assert!(
            !finalizers
                .iter()
                .any(|f| f == finalizer::MACHINE_CONTROLLER),
            "the machine finalizer belongs to the machine-controller: {finalizers:?}"
        );
        let phase = machine
            .status
            .as_ref()
            .and_then(|status| status.current_status.as_ref())
            .and_then(|current| current.phase.clone());
        assert_eq!(
            phase, None,
            "Machine phases belong to the machine-controller"
        );
    }
    let class = world.machine_classes().get("c").await.unwrap();
    assert!(
        class.metadata.finalizers.unwrap_or_default().is_empty(),
        "class finalizers belong to the machine-controller"
    );
    assert!(world.fleet.vms().is_empty(), "no VM may be created");
    // No machine port without machine controllers; the main port has only its own series.
    let manager = world.manager().expect("running");
    assert!(
        crate::harness::scrape_port(manager.machine_metrics)
            .await
            .is_none()
    );
    let main = crate::harness::scrape_port(manager.admin).await.unwrap();
    assert!(main.contains("mcm_machine_set_items_total "), "{main}");
    assert!(!main.contains("mcm_machine_items_total "), "{main}");
    if let Some(target) = &world.target_sandbox {
        let counters = target.faults().counters();
        let node_writes: Vec<_> = counters
            .counts
            .iter()
            .filter(|((verb, resource, _), _)| {
                resource == "nodes"
                    && matches!(
                        verb,
                        Verb::Create | Verb::Update | Verb::Patch | Verb::Delete
                    )
            })
            .collect();
        assert!(
            node_writes.is_empty(),
            "Node writes in split mode: {node_writes:?}"
        );
    }
    world.stop_manager().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_port_serves_its_binarys_series_when_everything_runs() {
    let mut world = World::start().await;
    world
        .start_manager(mcm_controller::manager::compose::registry(), &[])
        .await;
    let manager = world.manager().expect("running");
    let (admin, machine_port) = (manager.admin, manager.machine_metrics);
    // The safety queues add their key at start: one per port.
    let (main, machine) = eventually("work queue series on both ports", LIMIT, || async move {
        let main = crate::harness::scrape_port(admin).await?;
        let machine = crate::harness::scrape_port(machine_port).await?;
        (main.contains(r#"mcm_workqueue_adds_total{name="machinesafetyovershooting""#)
            && machine.contains(r#"mcm_workqueue_adds_total{name="machinesafetyorphanvms""#))
        .then_some((main, machine))
    })
    .await;
    for name in ["mcm_machine_items_total ", "mcm_machine_controller_frozen "] {
        assert!(
            machine.contains(name),
            "{name} missing on the machine port:\n{machine}"
        );
        assert!(!main.contains(name), "{name} on the main port:\n{main}");
    }
    for name in [
        "mcm_machine_set_items_total ",
        "mcm_machine_deployment_items_total ",
        "mcm_machine_stale_machines_total ",
    ] {
        assert!(
            main.contains(name),
            "{name} missing on the main port:\n{main}"
        );
        assert!(
            !machine.contains(name),
            "{name} on the machine port:\n{machine}"
        );
    }
    assert!(!main.contains(r#"name="machinesafetyorphanvms""#), "{main}");
    if std::path::Path::new("/proc/self/stat").exists() {
        for text in [&main, &machine] {
            assert!(text.contains("process_open_fds "), "{text}");
            assert!(text.contains("process_max_fds "), "{text}");
        }
    }
    world.stop_manager().await.unwrap();
}
