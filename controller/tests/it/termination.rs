//! Integration tests of the deletion flow (docs/behaviour.md#deletion-flow, docs/behaviour.md#drain, docs/behaviour.md#reaction-matrix deletion rows), the Node controller
//! (docs/behaviour.md#node-controller, docs/behaviour.md#machine-safety not-managed nodes) and the MachineClass/Secret finalizers (docs/behaviour.md#class-and-secret-controllers), against the
//! sandboxes with provider-virtual in-process.
//!
//! Running machines are set up without the Machine controller: the VM is created through the
//! driver (provider-virtual registers its Node, named after the machine) and the Machine is
//! written with finalizer, providerID, `node` label and phase Running, so these tests exercise
//! only the termination, node and class shells.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event as CoreEvent, Namespace, Node, Pod, Secret};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use mcm_api::keys::{annotation, finalizer, label};
use mcm_api::v1alpha1::{Machine, MachineClass, MachineState};
use mcm_controller::manager::compose::{ControllerSpec, named};
use mcm_provider_proto::{DriverClient, SecretData};
use mcm_sandbox::faults::{ErrorRule, Verb};
use serde_json::{Value, json};

use crate::harness::{NAMESPACE, World, events_with_reason, eventually, kubectl, scrape};

const LIMIT: Duration = Duration::from_secs(60);
/// Namespace of the workload pods in the target cluster.
const PODS: &str = "workload";

fn termination_shells() -> Vec<ControllerSpec> {
    named(&["machinetermination", "node"])
}

/// A provider-virtual class with its finalizer already set (the class controller is not part of
/// the termination tests).
async fn ready_class(world: &World, name: &str, spec: Value) -> MachineClass {
    world.create_class(name, spec).await;
    world
        .machine_classes()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"finalizers": [finalizer::MACHINE_CONTROLLER_MANAGER]}}),
            ),
        )
        .await
        .unwrap()
}

async fn ensure_target_namespace(world: &World) {
    let api: Api<Namespace> = Api::all(world.target.clone());
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": PODS}})).unwrap();
    match api.create(&PostParams::default(), &namespace).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => panic!("namespace: {error}"),
    }
}

/// Creates the VM of machine `name` through the driver, waits for its Node and writes a Running
/// Machine (finalizer, providerID, `node` label, `labels`). Returns the providerID.
async fn running_machine(world: &World, name: &str, class: &MachineClass, labels: Value) -> String {
    let driver = DriverClient::connect(&world.driver_endpoint, Duration::from_secs(10))
        .await
        .unwrap();
    let mut bare = Machine::new(name, Default::default());
    bare.metadata.namespace = Some(NAMESPACE.to_owned());
    let secret = SecretData::from([("userData".to_owned(), b"#!/bin/sh\n".to_vec())]);
    let provider_id = driver
        .create_machine(&bare, class, &secret)
        .await
        .expect("VM created")
        .provider_id;
    eventually(&format!("node {name} to register"), LIMIT, || async {
        world.nodes().get_opt(name).await.ok().flatten().map(|_| ())
    })
    .await;
    let mut all_labels = json!({"node": name});
    if let (Some(all), Value::Object(extra)) = (all_labels.as_object_mut(), labels) {
        all.extend(extra);
        // `"node": null` asks for a machine without the node label.
        all.retain(|_, value| !value.is_null());
    }
    let machine: Machine = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {
            "name": name, "namespace": NAMESPACE, "labels": all_labels,
            "finalizers": [finalizer::MACHINE_CONTROLLER_MANAGER],
        },
        "spec": {
            "class": {"kind": "MachineClass", "name": class.metadata.name},
            "providerID": provider_id,
        }
    }))
    .unwrap();
    world
        .machines()
        .create(&PostParams::default(), &machine)
        .await
        .unwrap();
    let now = jiff::Timestamp::now().to_string();
    world
        .machines()
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "currentStatus": {"phase": "Running", "lastUpdateTime": now, "timeoutActive": false},
                "lastOperation": {"description": "Machine joined the cluster", "state": "Successful", "type": "Create", "lastUpdateTime": now}
            }})),
        )
        .await
        .unwrap();
    provider_id
}

fn vm_exists(world: &World, provider_id: &str) -> bool {
    world
        .fleet
        .vms()
        .iter()
        .any(|vm| vm.provider_id == provider_id)
}

fn description(machine: &Machine) -> String {
    machine
        .last_operation()
        .and_then(|op| op.description.clone())
        .unwrap_or_default()
}

fn state(machine: &Machine) -> Option<MachineState> {
    machine.last_operation().and_then(|op| op.state.clone())
}

async fn wait_machine(
    world: &World,
    name: &str,
    what: &str,
    check: impl Fn(&Machine) -> bool,
) -> Machine {
    // Like `eventually`, but the failure names the machine's last lastOperation.
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let last = match world.machines().get_opt(name).await {
            Ok(Some(machine)) => {
                if check(&machine) {
                    return machine;
                }
                format!("{:?}", machine.last_operation())
            }
            Ok(None) => "machine gone".to_owned(),
            Err(error) => error.to_string(),
        };
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {LIMIT:?} waiting for machine {name}: {what}; last seen: {last}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until machine `name` satisfies `check` or is gone: a deletion flow may finish between
/// two polls, so a machine already gone counts as having passed through the state.
async fn wait_machine_or_gone(
    world: &World,
    name: &str,
    what: &str,
    check: impl Fn(&Machine) -> bool,
) {
    eventually(&format!("machine {name}: {what}"), LIMIT, || async {
        match world.machines().get_opt(name).await.ok()? {
            None => Some(()),
            Some(machine) => check(&machine).then_some(()),
        }
    })
    .await;
}

async fn wait_gone<K>(api: &Api<K>, name: &str, what: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    eventually(&format!("{what} {name} to be gone"), LIMIT, || async {
        matches!(api.get_opt(name).await, Ok(None)).then_some(())
    })
    .await;
}

/// The machine's "why is it stuck" condition.
fn blocked_condition(machine: &Machine) -> Option<&k8s_openapi::api::core::v1::NodeCondition> {
    machine
        .status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == "Blocked"))
}

async fn delete_machine(world: &World, name: &str) {
    world
        .machines()
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

async fn wait_event(world: &World, reason: &str, about: &str) -> CoreEvent {
    eventually(&format!("event {reason} about {about}"), LIMIT, || async {
        events_with_reason(world, reason)
            .await
            .into_iter()
            .find(|e| e.involved_object.name.as_deref() == Some(about))
    })
    .await
}

/// Waits until pod `pod` is Ready and budget `budget` (in [`PODS`]) has observed it: one
/// expected, healthy pod and no disruption allowed. Before that an eviction is not refused
/// deterministically (a Pending pod is evicted whatever its budget; a budget not yet computed
/// does not look misconfigured).
async fn wait_budget_blocks(world: &World, pod: &str, budget: &str) {
    let budgets: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(world.target.clone(), PODS);
    eventually(
        &format!("pod {pod} Ready and budget {budget} blocking it"),
        LIMIT,
        || async {
            let ready = pods(world)
                .get_opt(pod)
                .await
                .ok()
                .flatten()
                .is_some_and(|p| {
                    p.status
                        .and_then(|status| status.conditions)
                        .is_some_and(|conditions| {
                            conditions
                                .iter()
                                .any(|c| c.type_ == "Ready" && c.status == "True")
                        })
                });
            let found = budgets.get_opt(budget).await.ok().flatten()?;
            let status = found.status.as_ref()?;
            let observed = found.metadata.generation.is_some()
                && status.observed_generation == found.metadata.generation;
            (ready
                && observed
                && status.expected_pods == 1
                && status.current_healthy == 1
                && status.disruptions_allowed == 0)
                .then_some(())
        },
    )
    .await;
}

fn pods(world: &World) -> Api<Pod> {
    Api::namespaced(world.target.clone(), PODS)
}

/// A workload pod bound to `node`.
async fn create_pod(world: &World, name: &str, node: &str, extra: Value) -> Pod {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": PODS, "labels": {"app": name}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "busybox"}],
        }
    });
    merge(&mut pod, extra);
    pods(world)
        .create(
            &PostParams::default(),
            &serde_json::from_value(pod).unwrap(),
        )
        .await
        .unwrap()
}

fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(base), Value::Object(extra)) => {
            for (key, value) in extra {
                merge(base.entry(key).or_insert(Value::Null), value);
            }
        }
        (base, extra) => *base = extra,
    }
}

/// Creates a namespaced object in namespace [`PODS`] of the target cluster.
async fn create_target<K>(world: &World, object: Value) -> K
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(world.target.clone(), PODS);
    api.create(
        &PostParams::default(),
        &serde_json::from_value(object).unwrap(),
    )
    .await
    .unwrap()
}

async fn create_cluster_scoped<K>(world: &World, object: Value) -> K
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::all(world.target.clone());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(object).unwrap(),
    )
    .await
    .unwrap()
}

/// A CSI PersistentVolume `pv` bound to claim `pvc` (namespace [`PODS`]).
/// A pod on node `m1` using a new volume (`pv`/`pvc` with CSI handle `handle`), and the wait until
/// the node reports the volume attached.
async fn volume_pod_on_m1(world: &World, pod: &str, pv: &str, pvc: &str, handle: &str, grace: i64) {
    create_volume(world, pv, pvc, handle).await;
    create_pod(
        world,
        pod,
        "m1",
        json!({"spec": {
            "terminationGracePeriodSeconds": grace,
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": pvc}}]
        }}),
    )
    .await;
    eventually("the volume to be attached", LIMIT, || async {
        let node = world.nodes().get("m1").await.ok()?;
        volumes_attached(&node)
            .iter()
            .any(|v| v.contains(handle))
            .then_some(())
    })
    .await;
}

async fn create_volume(world: &World, pv: &str, pvc: &str, handle: &str) {
    create_cluster_scoped::<k8s_openapi::api::core::v1::PersistentVolume>(
        world,
        json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": pv},
            "spec": {
                "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                "csi": {"driver": "disk.csi.virtual", "volumeHandle": handle},
                "claimRef": {"namespace": PODS, "name": pvc},
            }
        }),
    )
    .await;
    create_target::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(
        world,
        json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": pvc, "namespace": PODS},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "volumeName": pv}
        }),
    )
    .await;
}

fn volumes_attached(node: &Node) -> Vec<String> {
    node.status
        .as_ref()
        .and_then(|s| s.volumes_attached.as_ref())
        .map(|v| v.iter().map(|v| v.name.clone()).collect())
        .unwrap_or_default()
}

fn eviction_requests(world: &World) -> Option<u64> {
    world.target_sandbox.as_ref().map(|s| {
        s.faults()
            .counters()
            .by_verb_resource(Verb::Create, "pods/eviction")
    })
}

// ----- docs/behaviour.md#deletion-flow happy path, docs/behaviour.md#drain pod selection ---------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_running_machine_drains_then_removes_vm_node_and_machine() {
    let mut world = World::start().await;
    ensure_target_namespace(&world).await;
    let class = ready_class(&world, "c", json!({})).await;
    let provider_id = running_machine(&world, "m1", &class, json!({})).await;
    // A workload pod with a grace period (evicted, completed by the virtual kubelet later), a
    // DaemonSet pod and a mirror pod (both left alone by the drain).
    create_pod(
        &world,
        "web",
        "m1",
        json!({"spec": {"terminationGracePeriodSeconds": 3}}),
    )
    .await;
    let daemon_set: k8s_openapi::api::apps::v1::DaemonSet = create_target(
        &world,
        json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "ds", "namespace": PODS},
            "spec": {"selector": {"matchLabels": {"app": "ds"}},
                     "template": {"metadata": {"labels": {"app": "ds"}},
                                  "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
        }),
    )
    .await;
    create_pod(
        &world,
        "ds-pod",
        "m1",
        json!({"metadata": {"labels": {"app": "ds"}, "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds",
            "uid": daemon_set.metadata.uid, "controller": true
        }]}}),
    )
    .await;
    create_pod(
        &world,
        "static",
        "m1",
        json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "hash"}}}),
    )
    .await;
    world.start_manager(termination_shells(), &[]).await;
    // The Node controller puts its finalizer on the machine's node.
    eventually("the node finalizer", LIMIT, || async {
        let node = world.nodes().get("m1").await.ok()?;
        node.metadata
            .finalizers
            .unwrap_or_default()
            .contains(&finalizer::NODE.to_owned())
            .then_some(())
    })
    .await;

    delete_machine(&world, "m1").await;
    // While the evicted pod terminates, the node is cordoned and marked Terminating.
    let node = eventually("the node to be cordoned and marked", LIMIT, || async {
        let node = world.nodes().get_opt("m1").await.ok().flatten()?;
        let cordoned = node.spec.as_ref()?.unschedulable == Some(true);
        let terminating = node
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .any(|c| c.type_ == "Terminating" && c.status == "True");
        (cordoned && terminating).then_some(node)
    })
    .await;
    assert!(node.spec.unwrap().unschedulable == Some(true));

    wait_gone(&world.machines(), "m1", "machine").await;
    assert!(!vm_exists(&world, &provider_id), "the VM is deleted");
    assert!(
        world.nodes().get_opt("m1").await.unwrap().is_none(),
        "the node object is deleted"
    );
    assert!(
        pods(&world).get_opt("web").await.unwrap().is_none(),
        "the workload pod was drained"
    );
    // DaemonSet and mirror pods are never evicted nor deleted by the drain.
    for name in ["ds-pod", "static"] {
        let pod = pods(&world).get(name).await.unwrap();
        assert!(
            pod.metadata.deletion_timestamp.is_none(),
            "{name} was left alone"
        );
    }
    if let Some(evictions) = eviction_requests(&world) {
        assert!(evictions >= 1, "the workload pod was evicted, not deleted");
    }
    assert!(world.fleet.is_empty(), "no VM leaked");
    // Routine steps of a deletion write no events (they are in lastOperation); only the
    // decisions and failures a user looks for do.
    for routine in [
        "MachineTerminating",
        "NodeCordoned",
        "DrainSucceeded",
        "MachineDeleted",
    ] {
        let about_m1: Vec<_> = events_with_reason(&world, routine)
            .await
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some("m1"))
            .collect();
        assert!(about_m1.is_empty(), "no {routine} event: {about_m1:?}");
    }
}

// ----- docs/behaviour.md#drain PDBs, docs/behaviour.md#deletion-flow force after the drain timeout ----------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pdb_refuses_eviction_until_the_drain_timeout_forces_the_drain() {
    let mut world = World::start().await;
    ensure_target_namespace(&world).await;
    let class = ready_class(&world, "c", json!({})).await;
    let provider_id = running_machine(&world, "m1", &class, json!({})).await;
    create_pod(&world, "guarded", "m1", json!({})).await;
    // minAvailable 1 of 1 pod: no voluntary eviction is ever allowed; the drain is forced after
    // the drain timeout.
    create_target::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(
        &world,
        json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "guard", "namespace": PODS},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}
        }),
    )
    .await;
    wait_budget_blocks(&world, "guarded", "guard").await;
    // 20s lets one eviction happen: max evict retries = min(360, timeout / 20s) (docs/behaviour.md#deletion-flow).
    world
        .start_manager(termination_shells(), &["--machine-drain-timeout=20s"])
        .await;
    delete_machine(&world, "m1").await;
    if let Some(sandbox) = &world.target_sandbox {
        let faults = sandbox.faults();
        eventually("an eviction refused by the PDB (429)", LIMIT, || async {
            (faults.counters().get(Verb::Create, "pods/eviction", 429) >= 1).then_some(())
        })
        .await;
    } else {
        eprintln!("SKIPPED (partly): no sandbox counters to see the refused eviction");
    }
    // Every pod is healthy and the budget still allows nothing: upstream's "misconfigured" budget
    // fails the drain at once instead of retrying (docs/behaviour.md#drain).
    let failed = wait_machine(&world, "m1", "drain failed on the misconfigured PDB", |m| {
        description(m).contains("pod disruption budget workload/guard is misconfigured")
    })
    .await;
    assert_eq!(state(&failed), Some(MachineState::Failed));
    assert!(
        description(&failed).ends_with("Will retry in next sync. Initiate node drain"),
        "{}",
        description(&failed)
    );
    assert!(
        vm_exists(&world, &provider_id),
        "no VM deletion before the drain ends"
    );
    assert!(
        pods(&world)
            .get_opt("guarded")
            .await
            .unwrap()
            .is_some_and(|p| p.metadata.deletion_timestamp.is_none()),
        "the PDB protected the pod"
    );
    // After the drain timeout the drain is forced: the pod is deleted and the flow finishes.
    wait_event(&world, "ForceDrain", "m1").await;
    wait_gone(&world.machines(), "m1", "machine").await;
    assert!(pods(&world).get_opt("guarded").await.unwrap().is_none());
    assert!(!vm_exists(&world, &provider_id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_pdb_is_retried_until_it_allows_the_eviction() {
    let mut world = World::start().await;
    ensure_target_namespace(&world).await;
    let class = ready_class(&world, "c", json!({})).await;
    let provider_id = running_machine(&world, "m1", &class, json!({})).await;
    create_pod(
        &world,
        "pair-a",
        "m1",
        json!({"metadata": {"labels": {"app": "pair"}}}),
    )
    .await;
    // Its twin is not scheduled (never healthy): the budget blocks for now but is not
    // misconfigured, so the eviction is retried every 20s.
    pods(&world)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "pair-b", "namespace": PODS, "labels": {"app": "pair"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    create_target::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(
        &world,
        json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "pair", "namespace": PODS},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "pair"}}}
        }),
    )
    .await;
    // A Pending pod may always be evicted (as in kube): the budget only guards pair-a once the
    // provider's kubelet reports it Running and Ready.
    eventually("pair-a Running and Ready", LIMIT, || async {
        let pod = pods(&world).get("pair-a").await.ok()?;
        let status = pod.status?;
        let ready = status
            .conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        (status.phase.as_deref() == Some("Running") && ready).then_some(())
    })
    .await;
    world
        .start_manager(termination_shells(), &["--machine-drain-timeout=2m"])
        .await;
    delete_machine(&world, "m1").await;
    let Some(faults) = world.target_faults() else {
        eprintln!("SKIPPED: no sandbox counters to see the refused eviction");
        return;
    };
    eventually("an eviction refused by the PDB (429)", LIMIT, || async {
        (faults.counters().get(Verb::Create, "pods/eviction", 429) >= 1).then_some(())
    })
    .await;
    // The eviction may be tried before the drain stage is stored (a stage that progresses in
    // memory is written with the drain's waiting condition or when the pass stops): the stored
    // stage is awaited, not read once. The budget keeps the flow in it.
    wait_machine(&world, "m1", "the drain stage stored", |m| {
        description(m).contains("Initiate node drain")
    })
    .await;
    assert!(vm_exists(&world, &provider_id));
    // The machine says what blocks it and until when, in its Blocked condition.
    let blocked = wait_machine(&world, "m1", "the drain-blocked condition", |m| {
        blocked_condition(m).is_some_and(|c| c.reason.as_deref() == Some("DrainBlockedByPDB"))
    })
    .await;
    let message = blocked_condition(&blocked)
        .and_then(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains(&format!("{PODS}/pair-a (PodDisruptionBudget {PODS}/pair)")),
        "{message}"
    );
    assert!(message.contains("the drain is forced at "), "{message}");
    // The budget is lifted: the next retry's eviction goes through and the flow finishes
    // without forcing anything.
    let budgets: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(world.target.clone(), PODS);
    budgets
        .delete("pair", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&world.machines(), "m1", "machine").await;
    assert!(!vm_exists(&world, &provider_id));
    assert!(
        faults.counters().get(Verb::Create, "pods/eviction", 201) >= 1,
        "the retried eviction was accepted"
    );
    assert!(
        events_with_reason(&world, "ForceDrain").await.is_empty(),
        "no force drain was needed"
    );
}

// ----- docs/behaviour.md#drain pods with volumes: evicted, then wait for detach ----------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_with_a_volume_is_evicted_and_its_detach_awaited() {
    let mut world = World::start().await;
    ensure_target_namespace(&world).await;
    let class = ready_class(&world, "c", json!({})).await;
    let provider_id = running_machine(&world, "m1", &class, json!({})).await;
    volume_pod_on_m1(&world, "db", "pv-1", "data", "vol-0001", 4).await;
    // Nothing attaches the volume elsewhere here: the re-attach wait ends at
    // its timeout, logged and counted.
    world
        .start_manager(termination_shells(), &["--machine-pv-reattach-timeout=2s"])
        .await;
    delete_machine(&world, "m1").await;
    // The drain waits while the volume is still attached: the VM stays until the pod is gone and
    // the node reports the volume detached.
    eventually("the pod to be evicted", LIMIT, || async {
        let pod = pods(&world).get_opt("db").await.ok()?;
        pod.is_none_or(|p| p.metadata.deletion_timestamp.is_some())
            .then_some(())
    })
    .await;
    // The pod terminates for 4s; while the node still reports its volume attached, the flow
    // stays in the drain stage and the VM exists. The evictions may be issued before the drain
    // stage is stored (a stage that progresses in memory is written with the next stage's write
    // or when the pass stops), so the stored stage is awaited, not read once.
    let observed = eventually(
        "the drain stage stored while the volume is attached, or the volume detached",
        LIMIT,
        || async {
            let node = world.nodes().get_opt("m1").await.ok()?;
            let attached = node.is_some_and(|node| {
                volumes_attached(&node)
                    .iter()
                    .any(|v| v.contains("vol-0001"))
            });
            if !attached {
                return Some(false);
            }
            let machine = world.machines().get_opt("m1").await.ok()??;
            if !description(&machine).contains("Initiate node drain") {
                return None;
            }
            assert!(
                vm_exists(&world, &provider_id),
                "the VM is not deleted while the volume is attached"
            );
            Some(true)
        },
    )
    .await;
    if !observed {
        eprintln!("note: the volume detached before it could be observed attached");
    }
    wait_gone(&world.machines(), "m1", "machine").await;
    assert!(!vm_exists(&world, &provider_id));
    if let Some(evictions) = eviction_requests(&world) {
        assert!(evictions >= 1, "the volume pod was evicted");
    }
    let text = scrape(&world).await;
    assert!(
        text.lines()
            .any(|l| l.contains("GetVolumeIDs") && !l.starts_with('#')),
        "GetVolumeIDs was called for the pod's volume"
    );
    assert!(
        text.contains(r#"mcm_drain_volume_reattach_total{result="timeout"} 1"#),
        "{text}"
    );
}

/// Upstream's `waitForReattach`: once the evicted pod's volume is detached, the
/// drain waits until a VolumeAttachment shows it attached on another node, well before the
/// (here 5 minute) `--machine-pv-reattach-timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_volume_is_awaited_until_it_is_attached_elsewhere() {
    let mut world = World::start().await;
    ensure_target_namespace(&world).await;
    let class = ready_class(&world, "c", json!({})).await;
    let provider_id = running_machine(&world, "m1", &class, json!({})).await;
    volume_pod_on_m1(&world, "db-r", "pv-r", "data-r", "vol-0002", 1).await;
    world
        .start_manager(termination_shells(), &["--machine-pv-reattach-timeout=5m"])
        .await;
    delete_machine(&world, "m1").await;
    eventually("the pod gone and its volume detached", LIMIT, || async {
        let pod = pods(&world).get_opt("db-r").await.ok()?;
        let node = world.nodes().get_opt("m1").await.ok()??;
        (pod.is_none()
            && !volumes_attached(&node)
                .iter()
                .any(|v| v.contains("vol-0002")))
        .then_some(())
    })
    .await;
    // Detached, not attached elsewhere yet: the flow waits in the drain step.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let waiting = world.machines().get("m1").await.unwrap();
    assert!(
        description(&waiting).contains("Initiate node drain"),
        "{}",
        description(&waiting)
    );
    assert!(vm_exists(&world, &provider_id));
    // The pod's replacement runs elsewhere: its volume is attached to another node.
    create_cluster_scoped::<VolumeAttachment>(
        &world,
        json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
            "metadata": {"name": "va-r"},
            "spec": {"attacher": "disk.csi.virtual", "nodeName": "other-node",
                     "source": {"persistentVolumeName": "pv-r"}}
        }),
    )
    .await;
    let attachments: Api<VolumeAttachment> = Api::all(world.target.clone());
    attachments
        .patch_status(
            "va-r",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"attached": true}})),
        )
        .await
        .unwrap();
    wait_gone(&world.machines(), "m1", "machine").await;
    assert!(!vm_exists(&world, &provider_id));
    let text = scrape(&world).await;
    assert!(
        text.contains(r#"mcm_drain_volume_reattach_total{result="reattached"} 1"#),
        "{text}"
    );
}

// ----- force-deletion label, VolumeAttachments after a force drain -----------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_deletion_label_deletes_pods_and_volume_attachments_without_eviction() {
    let mut world = World::start().await;
    ensure_target_namespace(&world).await;
    let class = ready_class(&world, "c", json!({})).await;
    let provider_id =
        running_machine(&world, "m1", &class, json!({label::FORCE_DELETION: "true"})).await;
    create_pod(&world, "guarded", "m1", json!({})).await;
    create_target::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(
        &world,
        json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "guard", "namespace": PODS},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}
        }),
    )
    .await;
    // A mirror pod with a volume keeps the volume attached through the force drain, so the
    // VolumeAttachment stage has something to delete.
    create_volume(&world, "pv-1", "data", "vol-0002").await;
    create_pod(
        &world,
        "static",
        "m1",
        json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "hash"}},
               "spec": {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}}),
    )
    .await;
    create_cluster_scoped::<VolumeAttachment>(
        &world,
        json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
            "metadata": {"name": "va-1"},
            "spec": {"attacher": "disk.csi.virtual", "nodeName": "m1",
                     "source": {"persistentVolumeName": "pv-1"}}
        }),
    )
    .await;
    eventually("the volume to be attached", LIMIT, || async {
        let node = world.nodes().get("m1").await.ok()?;
        (!volumes_attached(&node).is_empty()).then_some(())
    })
    .await;
    if let Some(sandbox) = &world.target_sandbox {
        sandbox.faults().reset_counters();
    }
    world.start_manager(termination_shells(), &[]).await;
    delete_machine(&world, "m1").await;
    wait_gone(&world.machines(), "m1", "machine").await;
    assert!(!vm_exists(&world, &provider_id));
    assert!(pods(&world).get_opt("guarded").await.unwrap().is_none());
    assert_eq!(
        eviction_requests(&world).unwrap_or(0),
        0,
        "a force drain deletes without evicting"
    );
    let attachments: Api<VolumeAttachment> = Api::all(world.target.clone());
    assert!(
        attachments.get_opt("va-1").await.unwrap().is_none(),
        "the node's VolumeAttachment was deleted after the force drain"
    );
    wait_event(&world, "ForceDrain", "m1").await;
    wait_event(&world, "VolumeAttachmentsDeleted", "m1").await;
}

// ----- a fixed class resumes a blocked deletion at once ------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creating_the_missing_class_resumes_a_blocked_deletion_at_once() {
    let mut world = World::start().await;
    // The VM is created with a class object that is not stored: the machine refers to class
    // "late", which does not exist when the deletion starts.
    let template = ready_class(&world, "template", json!({})).await;
    let mut late = template.clone();
    late.metadata.name = Some("late".to_owned());
    let provider_id = running_machine(&world, "m1", &late, json!({})).await;
    world.start_manager(termination_shells(), &[]).await;
    delete_machine(&world, "m1").await;
    // Blocked with LongRetry (10 min): only an event on the class can resume it in time.
    wait_event(&world, "DeletionBlocked", "m1").await;
    let created = std::time::Instant::now();
    ready_class(&world, "late", json!({})).await;
    eventually(
        "machine m1 deleted after its class was created",
        Duration::from_secs(20),
        || async { matches!(world.machines().get_opt("m1").await, Ok(None)).then_some(()) },
    )
    .await;
    eprintln!(
        "deletion resumed and finished {:?} after the class was created",
        created.elapsed()
    );
    assert!(!vm_exists(&world, &provider_id));
}

/// The events we write (events.k8s.io/v1, the deprecated fields unset as kube-apiserver
/// demands) read back as core/v1 with their eventTime, and `kubectl get events
/// --sort-by=.lastTimestamp` prints them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_listed_by_kubectl_get_events() {
    let mut world = World::start().await;
    let template = ready_class(&world, "template", json!({})).await;
    let mut missing = template.clone();
    missing.metadata.name = Some("missing".to_owned());
    running_machine(&world, "m1", &missing, json!({})).await;
    world.start_manager(termination_shells(), &[]).await;
    delete_machine(&world, "m1").await;
    let event = wait_event(&world, "DeletionBlocked", "m1").await;
    assert!(event.event_time.is_some(), "core/v1 eventTime: {event:?}");
    assert_eq!(event.last_timestamp, None, "deprecated fields stay unset");
    let Some(sandbox) = world.control_sandbox.as_ref() else {
        return;
    };
    let listed = kubectl(sandbox)
        .args(["get", "events", "-n", NAMESPACE, "--sort-by=.lastTimestamp"])
        .output();
    match listed {
        Err(error) => eprintln!("SKIPPED: kubectl not runnable ({error}); the API check passed"),
        Ok(output) => {
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(
                output.status.success() && stdout.contains("DeletionBlocked"),
                "kubectl get events --sort-by=.lastTimestamp printed: {stdout}{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
}

// ----- docs/behaviour.md#reaction-matrix DeleteMachine rows -----------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_machine_errors_follow_the_reaction_matrix() {
    let mut world = World::start().await;
    let transient = ready_class(
        &world,
        "transient",
        json!({"failures": {"delete": {"code": "Unavailable", "times": 1}}}),
    )
    .await;
    let fatal = ready_class(
        &world,
        "fatal",
        json!({"failures": {"delete": {"code": "Internal", "times": 1}}}),
    )
    .await;
    let not_found = ready_class(
        &world,
        "notfound",
        json!({"failures": {"delete": {"code": "NotFound", "times": 1}}}),
    )
    .await;
    let transient_vm = running_machine(&world, "m-transient", &transient, json!({})).await;
    let fatal_vm = running_machine(&world, "m-fatal", &fatal, json!({})).await;
    let not_found_vm = running_machine(&world, "m-notfound", &not_found, json!({})).await;
    world.start_manager(termination_shells(), &[]).await;
    for name in ["m-transient", "m-fatal", "m-notfound"] {
        delete_machine(&world, name).await;
    }
    // Unavailable: Failed, retried after the machine's backoff (first delay: ShortRetry minus
    // jitter), then deleted.
    let event = wait_event(&world, "VMDeletionFailed", "m-transient").await;
    assert!(
        event
            .message
            .unwrap_or_default()
            .contains("However, will re-try in the next resync"),
    );
    wait_gone(&world.machines(), "m-transient", "machine").await;
    assert!(!vm_exists(&world, &transient_vm));
    let metrics = scrape(&world).await;
    assert!(
        metrics.contains(r#"mcm_machine_driver_retries_total{method="DeleteMachine"} 1"#),
        "{metrics}"
    );
    // NotFound: the flow continues as if the VM were gone.
    wait_gone(&world.machines(), "m-notfound", "machine").await;
    assert!(
        vm_exists(&world, &not_found_vm),
        "the provider said NotFound, so nothing was deleted (orphan collection's job)"
    );
    // Other codes: Failed with LongRetry; the machine stays at the VM deletion step.
    let stuck = wait_machine(&world, "m-fatal", "the aborted VM deletion", |m| {
        description(m).contains("Aborting operation. Initiate VM deletion")
    })
    .await;
    assert_eq!(state(&stuck), Some(MachineState::Failed));
    assert!(vm_exists(&world, &fatal_vm));
    assert!(
        stuck
            .metadata
            .finalizers
            .unwrap_or_default()
            .contains(&finalizer::MACHINE_CONTROLLER_MANAGER.to_owned())
    );
}

// ----- crash and restart during deletion --------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_during_drain_or_vm_deletion_resumes_without_leaking() {
    let mut world = World::start().await;
    ensure_target_namespace(&world).await;
    let class = ready_class(&world, "c", json!({})).await;
    let fatal = ready_class(
        &world,
        "fatal",
        json!({"failures": {"delete": {"code": "Internal", "times": 1}}}),
    )
    .await;
    let draining_vm = running_machine(&world, "m-drain", &class, json!({})).await;
    let deleting_vm = running_machine(&world, "m-delete", &fatal, json!({})).await;
    // A long grace period keeps the drain of m-drain busy while the manager is killed.
    create_pod(
        &world,
        "slow",
        "m-drain",
        json!({"spec": {"terminationGracePeriodSeconds": 6}}),
    )
    .await;
    world.start_manager(termination_shells(), &[]).await;
    delete_machine(&world, "m-drain").await;
    delete_machine(&world, "m-delete").await;
    wait_machine(&world, "m-drain", "draining", |m| {
        description(m).contains("Initiate node drain")
    })
    .await;
    // m-delete's first DeleteMachine failed (Internal ⇒ LongRetry): only a restart retries it now.
    wait_machine(&world, "m-delete", "VM deletion aborted", |m| {
        description(m).contains("Aborting operation. Initiate VM deletion")
    })
    .await;
    world.kill_manager().await;
    assert!(vm_exists(&world, &draining_vm));
    assert!(vm_exists(&world, &deleting_vm));

    world.start_manager(termination_shells(), &[]).await;
    wait_gone(&world.machines(), "m-drain", "machine").await;
    wait_gone(&world.machines(), "m-delete", "machine").await;
    assert!(world.fleet.is_empty(), "every VM deleted, none leaked");
    for node in ["m-drain", "m-delete"] {
        assert!(world.nodes().get_opt(node).await.unwrap().is_none());
    }
}

// ----- 409 conflicts -----------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_converges_under_injected_conflicts() {
    let mut world = World::start().await;
    if world.control_sandbox.is_none() {
        eprintln!("SKIPPED: no sandbox to inject conflicts into");
        return;
    }
    let class = ready_class(&world, "c", json!({})).await;
    let provider_id = running_machine(&world, "m1", &class, json!({})).await;
    world.start_manager(termination_shells(), &[]).await;
    let faults = world.control_sandbox.as_ref().unwrap().faults();
    faults.inject_errors(ErrorRule {
        verb: Some(Verb::Update),
        resource: Some("machines/status".to_owned()),
        status: 409,
        rate: 0.5,
        count: Some(6),
    });
    faults.inject_errors(ErrorRule {
        verb: Some(Verb::Update),
        resource: Some("machines".to_owned()),
        status: 409,
        rate: 1.0,
        count: Some(2),
    });
    delete_machine(&world, "m1").await;
    wait_gone(&world.machines(), "m1", "machine").await;
    assert!(!vm_exists(&world, &provider_id));
    assert!(world.nodes().get_opt("m1").await.unwrap().is_none());
    let conflicts = faults.counters().by_status(409);
    assert!(conflicts >= 2, "conflicts were injected ({conflicts})");
}

// ----- docs/behaviour.md#node-controller Node controller, docs/behaviour.md#machine-safety not-managed nodes --------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_node_deletes_its_machine_and_unmanaged_nodes_are_ignored() {
    let mut world = World::start().await;
    let class = ready_class(&world, "c", json!({})).await;
    let provider_id = running_machine(&world, "m1", &class, json!({})).await;
    // A node nobody claims, annotated as not managed: never gets the finalizer.
    let unmanaged: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "foreign", "annotations": {annotation::NOT_MANAGED_BY_MCM: "1"}}
    }))
    .unwrap();
    world
        .nodes()
        .create(&PostParams::default(), &unmanaged)
        .await
        .unwrap();
    world.start_manager(termination_shells(), &[]).await;
    eventually("the node finalizer", LIMIT, || async {
        let node = world.nodes().get("m1").await.ok()?;
        node.metadata
            .finalizers
            .unwrap_or_default()
            .contains(&finalizer::NODE.to_owned())
            .then_some(())
    })
    .await;
    let foreign = world.nodes().get("foreign").await.unwrap();
    assert!(foreign.metadata.finalizers.unwrap_or_default().is_empty());

    // kubectl delete node: the finalizer holds the Node, the Machine is deleted and its deletion
    // flow removes VM, node and machine.
    world
        .nodes()
        .delete("m1", &DeleteParams::default())
        .await
        .unwrap();
    // The whole deletion may finish between two polls: gone counts as triggered (nothing else
    // deletes m1 here, and the NodeDeleted event below shows the flow ran).
    wait_machine_or_gone(&world, "m1", "deletion triggered by the node", |m| {
        m.metadata.deletion_timestamp.is_some()
    })
    .await;
    wait_event(&world, "NodeDeleted", "m1").await;
    wait_gone(&world.machines(), "m1", "machine").await;
    wait_gone(&world.nodes(), "m1", "node").await;
    assert!(!vm_exists(&world, &provider_id));
}

// ----- docs/behaviour.md#class-and-secret-controllers MachineClass and Secret finalizers ----------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn class_and_secret_finalizers_follow_their_users() {
    let mut world = World::start().await;
    let class = world.create_class("c", json!({})).await;
    let secrets: Api<Secret> = Api::namespaced(world.control.clone(), NAMESPACE);
    world
        .start_manager(named(&["machineclass", "machinetermination"]), &[])
        .await;
    let has = |finalizers: Option<Vec<String>>, name: &str| {
        finalizers.unwrap_or_default().iter().any(|f| f == name)
    };
    // The class references the Secret: the Secret gets its finalizer.
    eventually("the secret finalizer", LIMIT, || async {
        let secret = secrets.get("c").await.ok()?;
        has(secret.metadata.finalizers, finalizer::MACHINE_CONTROLLER).then_some(())
    })
    .await;
    // No machine uses the class yet: no class finalizer.
    let unused = world.machine_classes().get("c").await.unwrap();
    assert!(!has(
        unused.metadata.finalizers,
        finalizer::MACHINE_CONTROLLER_MANAGER
    ));

    let provider_id = running_machine(&world, "m1", &class, json!({})).await;
    eventually("the class finalizer", LIMIT, || async {
        let class = world.machine_classes().get("c").await.ok()?;
        has(
            class.metadata.finalizers,
            finalizer::MACHINE_CONTROLLER_MANAGER,
        )
        .then_some(())
    })
    .await;
    // Deleting the class while a machine uses it is blocked.
    world
        .machine_classes()
        .delete("c", &DeleteParams::default())
        .await
        .unwrap();
    wait_event(&world, "DeletionBlocked", "c").await;
    assert!(
        world
            .machine_classes()
            .get_opt("c")
            .await
            .unwrap()
            .is_some()
    );

    // Once the machine is gone (its deletion still works with the class being deleted), the
    // class finalizer is removed and the class disappears; then the Secret is unreferenced.
    delete_machine(&world, "m1").await;
    wait_gone(&world.machines(), "m1", "machine").await;
    assert!(!vm_exists(&world, &provider_id));
    wait_gone(&world.machine_classes(), "c", "machine class").await;
    eventually("the secret finalizer to be removed", LIMIT, || async {
        let secret = secrets.get("c").await.ok()?;
        (!has(secret.metadata.finalizers, finalizer::MACHINE_CONTROLLER)).then_some(())
    })
    .await;
}

/// The class's `machine.sapcloud.io/class-validation` annotation, once it is `want`-like.
async fn wait_validation(world: &World, class: &str, starts_with: &str) -> String {
    eventually(
        &format!("class {class} recorded {starts_with}"),
        LIMIT,
        || async {
            let class = world.machine_classes().get(class).await.ok()?;
            class
                .metadata
                .annotations?
                .get(annotation::CLASS_VALIDATION)
                .filter(|value| value.starts_with(starts_with))
                .cloned()
        },
    )
    .await
}

// ----- docs/operations.md#a-machineclass-marked-invalid: ValidateMachineClass -------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_class_is_recorded_and_warned_about_before_any_machine() {
    let mut world = World::start().await;
    world
        .create_class("bad", json!({"bootDelay": "soon"}))
        .await;
    world.create_class("good", json!({"bootDelay": "1s"})).await;
    // A class of another provider (another manager's) is not judged by this driver.
    world.create_class("foreign", json!({"region": "x"})).await;
    world
        .machine_classes()
        .patch(
            "foreign",
            &PatchParams::default(),
            &Patch::Merge(json!({"provider": "AWS"})),
        )
        .await
        .unwrap();
    world.start_manager(named(&["machineclass"]), &[]).await;

    let record = wait_validation(&world, "bad", "invalid: ").await;
    assert!(
        record.starts_with("invalid: providerSpec.bootDelay: not a duration"),
        "{record}"
    );
    let event = wait_event(&world, "MachineClassInvalid", "bad").await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let message = event.message.unwrap_or_default();
    assert!(
        message.contains("providerSpec.bootDelay: not a duration"),
        "{message}"
    );
    assert_eq!(wait_validation(&world, "good", "valid").await, "valid");
    assert!(
        events_with_reason(&world, "MachineClassInvalid")
            .await
            .iter()
            .all(|event| event.involved_object.name.as_deref() != Some("good")),
        "no warning about a valid class"
    );

    let foreign = world.machine_classes().get("foreign").await.unwrap();
    assert!(
        !foreign
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key(annotation::CLASS_VALIDATION),
        "another provider's class is left alone"
    );

    // Fixing the providerSpec is validated again and recorded valid.
    world
        .machine_classes()
        .patch(
            "bad",
            &PatchParams::default(),
            &Patch::Merge(json!({"providerSpec": {"bootDelay": "2s"}})),
        )
        .await
        .unwrap();
    assert_eq!(wait_validation(&world, "bad", "valid").await, "valid");
    // Breaking it again (tags as a list) records the new field error.
    world
        .machine_classes()
        .patch(
            "bad",
            &PatchParams::default(),
            &Patch::Merge(json!({"providerSpec": {"tags": ["team=a"]}})),
        )
        .await
        .unwrap();
    let record = wait_validation(&world, "bad", "invalid: ").await;
    assert!(
        record.contains("providerSpec.tags: must be an object"),
        "{record}"
    );
}

// ----- docs/behaviour.md#deletion-flow GetVMStatus stage: node found through GetMachineStatus ------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_without_node_label_finds_its_node_through_the_driver() {
    let mut world = World::start().await;
    ensure_target_namespace(&world).await;
    let class = ready_class(&world, "c", json!({})).await;
    let provider_id = running_machine(&world, "m1", &class, json!({"node": null})).await;
    let unlabelled = world.machines().get("m1").await.unwrap();
    assert!(unlabelled.node_name().is_none());
    create_pod(&world, "web", "m1", json!({})).await;
    world.start_manager(termination_shells(), &[]).await;
    delete_machine(&world, "m1").await;
    // GetMachineStatus names the node; the label is set and the node is drained and deleted.
    // The whole deletion may finish between two polls; the node and pod checks below show the
    // node was found through the driver either way.
    wait_machine_or_gone(&world, "m1", "the node label from GetMachineStatus", |m| {
        m.node_name() == Some("m1")
    })
    .await;
    wait_gone(&world.machines(), "m1", "machine").await;
    assert!(!vm_exists(&world, &provider_id));
    assert!(world.nodes().get_opt("m1").await.unwrap().is_none());
    assert!(pods(&world).get_opt("web").await.unwrap().is_none());
}

// ----- with every shell: deletion during a slow creation (creation-flow guard) --------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_machine_during_its_creation_waits_and_leaks_no_vm() {
    let mut world = World::start().await;
    ready_class(&world, "slow", json!({"createLatency": "3s"})).await;
    world
        .start_manager(mcm_controller::manager::compose::registry(), &[])
        .await;
    let machine: Machine = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "Machine",
        "metadata": {"name": "slow-machine-1", "namespace": NAMESPACE},
        "spec": {"class": {"kind": "MachineClass", "name": "slow"}}
    }))
    .unwrap();
    world
        .machines()
        .create(&PostParams::default(), &machine)
        .await
        .unwrap();
    // Delete while CreateMachine (3s) is running: the VM it creates must still be deleted.
    // The Machine controller stores its finalizer and then calls CreateMachine in the same pass;
    // deleting a moment later lands inside the 3 s call (and earlier would be just as safe).
    wait_machine(
        &world,
        "slow-machine-1",
        "the machine finalizer (CreateMachine follows)",
        |m| {
            m.metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| f.iter().any(|f| f == finalizer::MACHINE_CONTROLLER_MANAGER))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    delete_machine(&world, "slow-machine-1").await;
    wait_gone(&world.machines(), "slow-machine-1", "machine").await;
    eventually("no VM left", LIMIT, || async {
        world.fleet.is_empty().then_some(())
    })
    .await;
    assert!(
        world
            .nodes()
            .get_opt("slow-machine-1")
            .await
            .unwrap()
            .is_none()
    );
}

// ----- docs/behaviour.md#deletion-flow a class without finalizer blocks the deletion --------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_class_without_finalizer_blocks_the_deletion_until_it_is_fixed() {
    let mut world = World::start().await;
    let class = world.create_class("c", json!({})).await;
    let provider_id = running_machine(&world, "m1", &class, json!({})).await;
    world.start_manager(termination_shells(), &[]).await;
    delete_machine(&world, "m1").await;
    let event = wait_event(&world, "DeletionBlocked", "m1").await;
    assert!(
        event
            .message
            .unwrap_or_default()
            .contains("has no finalizers set"),
        "the event says why"
    );
    let blocked = world.machines().get("m1").await.unwrap();
    assert_eq!(
        blocked.phase(),
        Some(&mcm_api::v1alpha1::MachinePhase::Running),
        "the deletion flow did not start"
    );
    assert!(vm_exists(&world, &provider_id));
    // Once the class is valid (finalizer set) the deletion runs to the end.
    world
        .machine_classes()
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"finalizers": [finalizer::MACHINE_CONTROLLER_MANAGER]}}),
            ),
        )
        .await
        .unwrap();
    wait_gone(&world.machines(), "m1", "machine").await;
    assert!(!vm_exists(&world, &provider_id));
}

// ----- force-deletion added to a stuck drain -----------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adding_force_deletion_to_a_stuck_drain_forces_it() {
    let mut world = World::start().await;
    ensure_target_namespace(&world).await;
    let class = ready_class(&world, "c", json!({})).await;
    let provider_id = running_machine(&world, "m1", &class, json!({})).await;
    create_pod(&world, "guarded", "m1", json!({})).await;
    create_target::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(
        &world,
        json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "guard", "namespace": PODS},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}
        }),
    )
    .await;
    wait_budget_blocks(&world, "guarded", "guard").await;
    // The drain timeout is far away: without the label the drain would stay stuck for an hour.
    world
        .start_manager(termination_shells(), &["--machine-drain-timeout=1h"])
        .await;
    delete_machine(&world, "m1").await;
    wait_machine(&world, "m1", "drain stuck on the budget", |m| {
        description(m).contains("misconfigured")
    })
    .await;
    assert!(vm_exists(&world, &provider_id));
    world
        .machines()
        .patch(
            "m1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {label::FORCE_DELETION: "True"}}})),
        )
        .await
        .unwrap();
    wait_event(&world, "ForceDrain", "m1").await;
    wait_gone(&world.machines(), "m1", "machine").await;
    assert!(!vm_exists(&world, &provider_id));
    assert!(pods(&world).get_opt("guarded").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misconfigured_pdb_deleted_later_lets_the_drain_finish() {
    let mut world = World::start().await;
    ensure_target_namespace(&world).await;
    let class = ready_class(&world, "c", json!({})).await;
    let provider_id = running_machine(&world, "m1", &class, json!({})).await;
    create_pod(&world, "guarded", "m1", json!({})).await;
    create_target::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(
        &world,
        json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "guard", "namespace": PODS},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}
        }),
    )
    .await;
    wait_budget_blocks(&world, "guarded", "guard").await;
    world
        .start_manager(termination_shells(), &["--machine-drain-timeout=1h"])
        .await;
    delete_machine(&world, "m1").await;
    wait_machine(&world, "m1", "drain failed on the misconfigured PDB", |m| {
        description(m).contains("pod disruption budget workload/guard is misconfigured")
    })
    .await;
    // The failure is not remembered: once the budget is gone the next drain's eviction goes
    // through, without any force.
    let budgets: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(world.target.clone(), PODS);
    budgets
        .delete("guard", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&world.machines(), "m1", "machine").await;
    assert!(!vm_exists(&world, &provider_id));
    assert!(pods(&world).get_opt("guarded").await.unwrap().is_none());
    assert!(
        events_with_reason(&world, "ForceDrain").await.is_empty(),
        "no force drain was needed"
    );
    if let Some(sandbox) = &world.target_sandbox {
        assert!(
            sandbox
                .faults()
                .counters()
                .get(Verb::Create, "pods/eviction", 201)
                >= 1,
            "the pod was evicted, not deleted"
        );
    }
}
