//! Integration tests of the safety shells (the three safety controllers only): orphan VM collection (docs/behaviour.md#machine-safety), the
//! API-server freeze (docs/behaviour.md#machine-safety) and the overshooting freeze (docs/behaviour.md#overshooting), against the sandboxes with
//! provider-virtual in-process. VMs are made orphans by creating them directly through the driver.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use mcm_api::v1alpha1::{Machine, MachineClass, MachineDeployment, MachinePhase, MachineSet};
use mcm_decisions::safety::apiserver::HEALTH_TIMEOUT_RESET;
use mcm_provider_proto::{DriverClient, SecretData};
use mcm_sandbox::faults::{ErrorRule, UnavailableMode, Verb};
use serde_json::json;

use crate::harness::{NAMESPACE, World, events_with_reason, eventually};

const LIMIT: Duration = Duration::from_secs(60);

fn safety() -> Vec<mcm_controller::manager::compose::ControllerSpec> {
    mcm_controller::manager::compose::named(&[
        "machinesafetyorphanvms",
        "machinesafetyapiserver",
        "machinesafetyovershooting",
    ])
}

async fn driver(world: &World) -> DriverClient {
    DriverClient::connect(&world.driver_endpoint, Duration::from_secs(10))
        .await
        .expect("driver client")
}

fn secret() -> SecretData {
    SecretData::from([("userData".to_owned(), b"#!/bin/sh\n".to_vec())])
}

/// Creates a VM for machine `name` of `class` directly in provider-virtual; returns its
/// providerID.
async fn create_vm(driver: &DriverClient, class: &MachineClass, name: &str) -> String {
    let mut machine = Machine::new(name, Default::default());
    machine.metadata.namespace = Some(NAMESPACE.to_owned());
    driver
        .create_machine(&machine, class, &secret())
        .await
        .expect("VM created")
        .provider_id
}

fn vm_exists(world: &World, provider_id: &str) -> bool {
    world
        .fleet
        .vms()
        .iter()
        .any(|vm| vm.provider_id == provider_id)
}

async fn create_machine(world: &World, name: &str, labels: serde_json::Value) -> Machine {
    let machine: Machine = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {"class": {"kind": "MachineClass", "name": "c"}}
    }))
    .expect("machine");
    world
        .machines()
        .create(&PostParams::default(), &machine)
        .await
        .expect("create machine")
}

async fn set_machine_status(world: &World, name: &str, phase: &str, provider_id: Option<&str>) {
    if let Some(provider_id) = provider_id {
        world
            .machines()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"providerID": provider_id}})),
            )
            .await
            .expect("set providerID");
    }
    world
        .machines()
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "currentStatus": {"phase": phase, "lastUpdateTime": "2024-01-01T00:00:00Z", "timeoutActive": true},
                "lastOperation": {"description": "Machine is unhealthy", "state": "Processing", "type": "HealthCheck", "lastUpdateTime": "2024-01-01T00:00:00Z"}
            }})),
        )
        .await
        .expect("set machine status");
}

/// The manager's `/metrics` text (both ports: the freeze gauge is a machine-level series).
async fn metrics(world: &World) -> String {
    crate::harness::scrape(world).await
}

fn metric_value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (key, value) = line.split_once(' ')?;
            (key == name).then(|| value.trim().parse().ok())?
        })
}

async fn frozen(world: &World) -> Option<f64> {
    metric_value(&metrics(world).await, "mcm_machine_controller_frozen")
}

// ----- orphan VMs (docs/behaviour.md#machine-safety) ------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_vm_is_collected_and_vms_of_creating_or_owning_machines_are_kept() {
    let mut world = World::start().await;
    let class = world.create_class("c", json!({})).await;
    let driver = driver(&world).await;
    let ghost = create_vm(&driver, &class, "ghost").await;
    // A machine whose creation is in flight (no status yet) and a running machine owning its VM.
    create_machine(&world, "creating", json!({})).await;
    let creating = create_vm(&driver, &class, "creating").await;
    create_machine(&world, "owned", json!({})).await;
    let owned = create_vm(&driver, &class, "owned").await;
    set_machine_status(&world, "owned", "Running", Some(&owned)).await;
    // A running machine whose VM was replaced: the old VM is an orphan too.
    let replaced_old = create_vm(&driver, &class, "replaced").await;
    create_machine(&world, "replaced", json!({})).await;
    set_machine_status(
        &world,
        "replaced",
        "Running",
        Some("virtual:///default/other"),
    )
    .await;

    world
        .start_manager(safety(), &["--machine-safety-orphan-vms-period=1s"])
        .await;
    eventually("the orphan VMs to be deleted", LIMIT, || async {
        (!vm_exists(&world, &ghost) && !vm_exists(&world, &replaced_old)).then_some(())
    })
    .await;
    // The run that deleted the orphans listed every VM of the class in the same answer.
    assert!(
        vm_exists(&world, &creating),
        "a creating machine's VM is kept"
    );
    assert!(vm_exists(&world, &owned), "an owned VM is kept");
    let stale = eventually("the stale machines counter", LIMIT, || async {
        metric_value(&metrics(&world).await, "mcm_machine_stale_machines_total")
            .filter(|v| *v >= 2.0)
    })
    .await;
    assert_eq!(stale, 2.0);
    eventually("an OrphanVMDeleted event", LIMIT, || async {
        (!events_with_reason(&world, "OrphanVMDeleted")
            .await
            .is_empty())
        .then_some(())
    })
    .await;
    world.stop_manager().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_machine_triggers_the_collection_of_its_vm() {
    let mut world = World::start().await;
    let class = world.create_class("c", json!({})).await;
    let driver = driver(&world).await;
    create_machine(&world, "m", json!({})).await;
    let vm = create_vm(&driver, &class, "m").await;
    // Default period (15m): only the delete trigger can run the collection again.
    world.start_manager(safety(), &[]).await;
    // Kept while its machine (being created: no status yet) exists.
    assert!(vm_exists(&world, &vm));
    world
        .machines()
        .delete("m", &DeleteParams::default())
        .await
        .expect("delete machine");
    eventually(
        "the VM of the deleted machine to be collected",
        LIMIT,
        || async { (!vm_exists(&world, &vm)).then_some(()) },
    )
    .await;
    world.stop_manager().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_list_machines_skips_only_its_class() {
    let mut world = World::start().await;
    // "a-broken" sorts first; provider-virtual refuses its ListMachines (wrong provider).
    world.create_class("a-broken", json!({})).await;
    world
        .machine_classes()
        .patch(
            "a-broken",
            &PatchParams::default(),
            &Patch::Merge(json!({"provider": "not-virtual"})),
        )
        .await
        .expect("break the class");
    let good = world.create_class("b-good", json!({})).await;
    let driver = driver(&world).await;
    let ghost = create_vm(&driver, &good, "ghost").await;
    world
        .start_manager(safety(), &["--machine-safety-orphan-vms-period=1s"])
        .await;
    eventually(
        "the orphan of the good class to be deleted",
        LIMIT,
        || async { (!vm_exists(&world, &ghost)).then_some(()) },
    )
    .await;
    eventually("a warning event on the broken class", LIMIT, || async {
        (!events_with_reason(&world, "OrphanCollectionFailed")
            .await
            .is_empty())
        .then_some(())
    })
    .await;
    // Runs kept failing for the broken class meanwhile; the manager is still up and stops cleanly.
    world
        .stop_manager()
        .await
        .expect("the safety controller survived ListMachines errors");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_without_machines_are_marked_unmanaged_and_unmarked_when_claimed() {
    let mut world = World::start().await;
    world
        .create_node(json!({
            "metadata": {"name": "stray", "finalizers": ["example.com/keep", mcm_api::keys::finalizer::NODE]}
        }))
        .await;
    world
        .start_manager(
            safety(),
            &[
                "--machine-safety-orphan-vms-period=1s",
                "--machine-creation-timeout=0s",
            ],
        )
        .await;
    let marked = eventually("the stray node to be marked unmanaged", LIMIT, || async {
        let node = world.nodes().get("stray").await.expect("node");
        let annotated = node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(mcm_api::keys::annotation::NOT_MANAGED_BY_MCM))
            .is_some_and(|v| v == "1");
        annotated.then_some(node)
    })
    .await;
    assert_eq!(
        marked.metadata.finalizers,
        Some(vec!["example.com/keep".to_owned()]),
        "only MCM's finalizer is removed"
    );
    // A machine claims the node: the mark goes away.
    create_machine(&world, "claimer", json!({"node": "stray"})).await;
    eventually("the mark to be removed", LIMIT, || async {
        let node = world.nodes().get("stray").await.expect("node");
        let annotated = node
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(mcm_api::keys::annotation::NOT_MANAGED_BY_MCM));
        (!annotated).then_some(())
    })
    .await;
    world.stop_manager().await.expect("clean stop");
}

// ----- API-server freeze (docs/behaviour.md#machine-safety) ------------------------------------------------------------------

async fn outage_freezes_then_recovery_unfreezes_and_resets(control_down: bool) {
    let mut world = World::start().await;
    let (Some(control), Some(target)) = (&world.control_sandbox, &world.target_sandbox) else {
        eprintln!("SKIPPED: API-server outage test needs the sandboxes (external cluster given)");
        return;
    };
    let control_faults = Arc::clone(control.faults());
    let faults = if control_down {
        Arc::clone(control.faults())
    } else {
        Arc::clone(target.faults())
    };
    create_machine(&world, "sick", json!({})).await;
    set_machine_status(&world, "sick", "Unknown", Some("virtual:///default/x")).await;
    create_machine(&world, "failed", json!({})).await;
    set_machine_status(&world, "failed", "Failed", Some("virtual:///default/y")).await;
    world
        .start_manager(
            safety(),
            &[
                "--machine-safety-apiserver-statuscheck-timeout=1s",
                "--machine-safety-apiserver-statuscheck-period=1s",
            ],
        )
        .await;
    assert_eq!(frozen(&world).await, Some(0.0));
    // Long enough never to end by itself: the test ends it.
    faults.set_unavailable(
        Duration::from_secs(600),
        UnavailableMode::ServiceUnavailable,
    );
    eventually("the machine controller to freeze", LIMIT, || async {
        (frozen(&world).await == Some(1.0)).then_some(())
    })
    .await;
    // The first reset write conflicts: the controller must stay frozen and retry, not unfreeze
    // with the machine's health timeout still running.
    control_faults.inject_errors(ErrorRule {
        verb: Some(Verb::Patch),
        resource: Some("machines/status".into()),
        status: 409,
        rate: 1.0,
        count: Some(1),
    });
    faults.clear_unavailable();
    eventually("the machine controller to unfreeze", LIMIT, || async {
        (frozen(&world).await == Some(0.0)).then_some(())
    })
    .await;
    assert_eq!(
        control_faults
            .counters()
            .get(Verb::Patch, "machines/status", 409),
        1,
        "the conflicting reset was attempted (and retried)"
    );
    // The unfreeze happens only after the reset of Unknown machines succeeded.
    let sick = world.machines().get("sick").await.expect("machine");
    assert_eq!(sick.phase(), Some(&MachinePhase::Running));
    let operation = sick.status.as_ref().and_then(|s| s.last_operation.clone());
    assert_eq!(
        operation.and_then(|o| o.description).as_deref(),
        Some(HEALTH_TIMEOUT_RESET)
    );
    let failed = world.machines().get("failed").await.expect("machine");
    assert_eq!(
        failed.phase(),
        Some(&MachinePhase::Failed),
        "only Unknown machines are reset"
    );
    world.stop_manager().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_api_server_outage_freezes_and_recovery_unfreezes() {
    outage_freezes_then_recovery_unfreezes_and_resets(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_api_server_outage_freezes_and_recovery_unfreezes() {
    outage_freezes_then_recovery_unfreezes_and_resets(true).await;
}

// ----- overshooting (docs/behaviour.md#overshooting) ------------------------------------------------------------------------

async fn create_machine_set(
    world: &World,
    name: &str,
    pool: &str,
    replicas: i32,
    owner: Option<&MachineDeployment>,
) -> MachineSet {
    let owner_references = owner.map(|md| {
        json!([{
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "MachineDeployment",
            "name": md.metadata.name,
            "uid": md.metadata.uid,
            "controller": true,
            "blockOwnerDeletion": true
        }])
    });
    let ms: MachineSet = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineSet",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"pool": pool},
                     "ownerReferences": owner_references.unwrap_or(json!([]))},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"pool": pool}},
            "template": {
                "metadata": {"labels": {"pool": pool}},
                "spec": {"class": {"kind": "MachineClass", "name": "c"}}
            }
        }
    }))
    .expect("machine set");
    world
        .machine_sets()
        .create(&PostParams::default(), &ms)
        .await
        .expect("create machine set")
}

async fn create_deployment(
    world: &World,
    name: &str,
    pool: &str,
    rolling: bool,
) -> MachineDeployment {
    create_deployment_of(world, name, pool, rolling, 1, "c").await
}

async fn create_deployment_of(
    world: &World,
    name: &str,
    pool: &str,
    rolling: bool,
    replicas: i32,
    class: &str,
) -> MachineDeployment {
    let strategy = if rolling {
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}})
    } else {
        json!({"type": "Recreate"})
    };
    let md: MachineDeployment = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"pool": pool}},
            "strategy": strategy,
            "template": {
                "metadata": {"labels": {"pool": pool}},
                "spec": {"class": {"kind": "MachineClass", "name": class}}
            }
        }
    }))
    .expect("machine deployment");
    world
        .machine_deployments()
        .create(&PostParams::default(), &md)
        .await
        .expect("create machine deployment")
}

/// A machine of `ms` (template labels and an owner reference), as the MachineSet controller
/// would create it.
async fn create_owned_machine(world: &World, name: &str, ms: &MachineSet, pool: &str) {
    let machine: Machine = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {
            "name": name, "namespace": NAMESPACE, "labels": {"pool": pool},
            "ownerReferences": [{
                "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
                "name": ms.metadata.name, "uid": ms.metadata.uid, "controller": true,
                "blockOwnerDeletion": true
            }]
        },
        "spec": {"class": {"kind": "MachineClass", "name": "c"}}
    }))
    .expect("machine");
    world
        .machines()
        .create(&PostParams::default(), &machine)
        .await
        .expect("create machine");
}

fn label_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<String> {
    meta.labels.as_ref().and_then(|l| l.get("freeze").cloned())
}

fn has_unfreeze_annotation(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> bool {
    meta.annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("safety.machine.sapcloud.io/unfreeze"))
}

fn set_frozen_reason(ms: &MachineSet) -> Option<String> {
    ms.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| format!("{:?}", c.type_) == "Frozen")
        .map(|c| c.reason.clone().unwrap_or_default())
}

fn deployment_frozen_reason(md: &MachineDeployment) -> Option<String> {
    md.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| format!("{:?}", c.type_) == "Frozen")
        .map(|c| c.reason.clone().unwrap_or_default())
}

async fn machine_set(world: &World, name: &str) -> MachineSet {
    world.machine_sets().get(name).await.expect("machine set")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overshooting_machine_set_is_frozen_and_unfrozen_when_back_under() {
    let mut world = World::start().await;
    // No deployment: high = 2 × 1 + safety-up 1 = 3, low = high − safety-down 1 = 2.
    if let Some(control) = &world.control_sandbox {
        // The first status and object writes conflict: the run retries with a fresh plan.
        for resource in ["machinesets/status", "machinesets"] {
            control.faults().inject_errors(ErrorRule {
                verb: Some(Verb::Update),
                resource: Some(resource.into()),
                status: 409,
                rate: 1.0,
                count: Some(1),
            });
        }
    }
    let ms = create_machine_set(&world, "ms", "a", 1, None).await;
    for i in 0..3 {
        create_owned_machine(&world, &format!("ms-{i}"), &ms, "a").await;
    }
    world
        .start_manager(
            safety(),
            &[
                "--safety-up=1",
                "--safety-down=1",
                "--machine-safety-overshooting-period=1s",
            ],
        )
        .await;
    let frozen = eventually("the MachineSet to be frozen", LIMIT, || async {
        let ms = machine_set(&world, "ms").await;
        (label_of(&ms.metadata).as_deref() == Some("True")).then_some(ms)
    })
    .await;
    assert_eq!(
        set_frozen_reason(&frozen).as_deref(),
        Some("OverShootingReplicaCount")
    );
    eventually("a FrozeMachineSet event", LIMIT, || async {
        (!events_with_reason(&world, "FrozeMachineSet")
            .await
            .is_empty())
        .then_some(())
    })
    .await;

    world
        .machines()
        .delete("ms-0", &DeleteParams::default())
        .await
        .expect("delete machine");
    let unfrozen = eventually("the MachineSet to be unfrozen", LIMIT, || async {
        let ms = machine_set(&world, "ms").await;
        (label_of(&ms.metadata).is_none() && set_frozen_reason(&ms).is_none()).then_some(ms)
    })
    .await;
    assert!(!has_unfreeze_annotation(&unfrozen.metadata));
    world.stop_manager().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfreeze_annotations_and_deployment_state_sync() {
    let mut world = World::start().await;
    // Recreate deployment of 1: high = 1 + 0 + 1 = 2, low = 2 − 2 = 0; one machine is within
    // bounds, so only the operator's annotation may unfreeze.
    let md = create_deployment(&world, "d", "p", false).await;
    let ms = create_machine_set(&world, "d-ms", "p", 1, Some(&md)).await;
    create_owned_machine(&world, "d-ms-0", &ms, "p").await;
    // An operator froze the MachineSet by hand.
    world
        .machine_sets()
        .patch(
            "d-ms",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"freeze": "True"}}})),
        )
        .await
        .expect("freeze label");
    world
        .start_manager(
            safety(),
            &[
                "--safety-up=1",
                "--safety-down=2",
                "--machine-safety-overshooting-period=1s",
            ],
        )
        .await;
    // docs/behaviour.md#overshooting step 2: the deployment follows its frozen set.
    let frozen_md = eventually(
        "the deployment to be frozen by state sync",
        LIMIT,
        || async {
            let md = world.machine_deployments().get("d").await.expect("md");
            (label_of(&md.metadata).as_deref() == Some("True")
                && deployment_frozen_reason(&md).is_some())
            .then_some(md)
        },
    )
    .await;
    assert_eq!(
        deployment_frozen_reason(&frozen_md).as_deref(),
        Some("MachineDeploymentStateSync")
    );
    assert_eq!(
        label_of(&machine_set(&world, "d-ms").await.metadata).as_deref(),
        Some("True"),
        "within bounds, the hand-made freeze is kept"
    );

    // docs/behaviour.md#overshooting steps 3–4: the annotation on the deployment unfreezes it and its set.
    world
        .machine_deployments()
        .patch(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"safety.machine.sapcloud.io/unfreeze": "True"}}})),
        )
        .await
        .expect("annotate deployment");
    eventually(
        "the set and the deployment to be unfrozen",
        LIMIT,
        || async {
            let ms = machine_set(&world, "d-ms").await;
            let md = world.machine_deployments().get("d").await.expect("md");
            (label_of(&ms.metadata).is_none()
                && !has_unfreeze_annotation(&ms.metadata)
                && label_of(&md.metadata).is_none()
                && !has_unfreeze_annotation(&md.metadata)
                && deployment_frozen_reason(&md).is_none())
            .then_some(())
        },
    )
    .await;
    world.stop_manager().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfreeze_annotation_on_a_machine_set() {
    let mut world = World::start().await;
    // No deployment: high = 2 × 1 + 1 = 3, low = 3 − 2 = 1; two machines are within bounds.
    let ms = create_machine_set(&world, "solo", "s", 1, None).await;
    create_owned_machine(&world, "solo-0", &ms, "s").await;
    create_owned_machine(&world, "solo-1", &ms, "s").await;
    world
        .machine_sets()
        .patch(
            "solo",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"freeze": "True"}}})),
        )
        .await
        .expect("freeze label");
    world
        .start_manager(
            safety(),
            &[
                "--safety-up=1",
                "--safety-down=2",
                "--machine-safety-overshooting-period=1s",
            ],
        )
        .await;
    world
        .machine_sets()
        .patch(
            "solo",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"safety.machine.sapcloud.io/unfreeze": "True"}}})),
        )
        .await
        .expect("annotate");
    eventually(
        "the set to be unfrozen by the annotation",
        LIMIT,
        || async {
            let ms = machine_set(&world, "solo").await;
            (label_of(&ms.metadata).is_none() && !has_unfreeze_annotation(&ms.metadata))
                .then_some(())
        },
    )
    .await;
    eventually("an UnfrozeMachineSet event", LIMIT, || async {
        (!events_with_reason(&world, "UnfrozeMachineSet")
            .await
            .is_empty())
        .then_some(())
    })
    .await;
    world.stop_manager().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreate_deployment_does_not_stop_the_check_of_other_sets() {
    let mut world = World::start().await;
    // "a-recreate" is checked first (sets are checked by name); upstream would abort there.
    let md = create_deployment(&world, "a-recreate", "r", false).await;
    let recreate_set = create_machine_set(&world, "a-recreate-ms", "r", 1, Some(&md)).await;
    create_owned_machine(&world, "a-recreate-ms-0", &recreate_set, "r").await;
    let over = create_machine_set(&world, "b-over", "o", 0, None).await;
    // high = 2 × 0 + 1 = 1: one machine already overshoots.
    create_owned_machine(&world, "b-over-0", &over, "o").await;
    world
        .start_manager(
            safety(),
            &[
                "--safety-up=1",
                "--safety-down=1",
                "--machine-safety-overshooting-period=1s",
            ],
        )
        .await;
    eventually("the overshooting set to be frozen", LIMIT, || async {
        let ms = machine_set(&world, "b-over").await;
        (label_of(&ms.metadata).as_deref() == Some("True")).then_some(())
    })
    .await;
    let recreate = machine_set(&world, "a-recreate-ms").await;
    assert_eq!(
        label_of(&recreate.metadata),
        None,
        "the Recreate set (1 machine, high 1 + 0 + 1) is within bounds"
    );
    world.stop_manager().await.expect("clean stop");
}

/// docs/behaviour.md#overshooting: the check runs at start, on Machine add and every period, and
/// does not count machines being deleted, so a scale-down (5 → 2: high 2 + 1 + 2 = 5 while the
/// five machines drain) never freezes the set or the deployment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scale_down_never_freezes_the_deployment() {
    let mut world = World::start().await;
    // Each VM's first DeleteMachine fails: the scaled-down machines stay Terminating for a
    // backoff, long after the MachineSet and deployment changes of the scale-down.
    world
        .create_class(
            "shrink",
            json!({"failures": {"delete": {"code": "Unavailable", "times": 1}}}),
        )
        .await;
    world
        .start_manager(mcm_controller::manager::compose::registry(), &[])
        .await;
    create_deployment_of(&world, "shrink", "shrink", true, 5, "shrink").await;
    eventually("5 available machines", LIMIT, || async {
        let md = world.machine_deployments().get("shrink").await.ok()?;
        (md.status?.available_replicas == Some(5)).then_some(())
    })
    .await;

    world
        .machine_deployments()
        .patch_scale(
            "shrink",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 2}})),
        )
        .await
        .expect("scale down");
    // Sampled every 50 ms from the scale-down until the three machines are gone, and 1 s on.
    let mut frozen_seen = std::collections::BTreeSet::new();
    let mut remaining = usize::MAX;
    let mut settled_at = None;
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let md = world
            .machine_deployments()
            .get("shrink")
            .await
            .expect("deployment");
        if label_of(&md.metadata).is_some() || deployment_frozen_reason(&md).is_some() {
            frozen_seen.insert(format!("deployment: {:?}", deployment_frozen_reason(&md)));
        }
        for ms in world
            .machine_sets()
            .list(&Default::default())
            .await
            .expect("sets")
        {
            if label_of(&ms.metadata).is_some() || set_frozen_reason(&ms).is_some() {
                frozen_seen.insert(format!("set: {:?}", set_frozen_reason(&ms)));
            }
        }
        let machines = world
            .machines()
            .list(&Default::default())
            .await
            .expect("machines")
            .items;
        if machines.len() < remaining {
            remaining = machines.len();
        }
        if remaining == 2 && settled_at.is_none() {
            settled_at = Some(tokio::time::Instant::now());
        }
        if settled_at.is_some_and(|at| at.elapsed() >= Duration::from_secs(1)) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the scale-down did not finish: {remaining} machines left"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        frozen_seen.is_empty(),
        "the scale-down froze: {frozen_seen:?}"
    );
    assert!(
        events_with_reason(&world, "FrozeMachineSet")
            .await
            .is_empty(),
        "no FrozeMachineSet event"
    );
    world.stop_manager().await.expect("clean stop");
}
