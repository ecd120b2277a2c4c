//! The virtual kubelet against the in-process sandbox API server: node registration, lease
//! renewal, condition switching, pod completion, volume bookkeeping, and a deleted VM that stops
//! heartbeating. The loop runs with a tick of a few milliseconds (no test waits 10 s).
//!
//! Waiting uses `eventually` (poll until a condition holds, failing after a generous bound), so
//! nothing asserts on timing.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use mcm_provider_proto::conformance::machine;
use mcm_provider_proto::{Driver, MachineRequest, SecretData};
use mcm_provider_virtual::driver::{Fleet, VirtualDriver};
use mcm_provider_virtual::kubelet::{Kubelet, KubeletConfig};
use mcm_provider_virtual::metrics::Metrics;
use mcm_provider_virtual::node::{
    CONDITIONS_ANNOTATION, HeartbeatConfig, parse_condition_overrides,
};
use mcm_sandbox::{Sandbox, SandboxConfig};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common::class;

struct Setup {
    _sandbox: Sandbox,
    client: Client,
    driver: VirtualDriver,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
}

impl Drop for Setup {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn setup(lease_interval: jiff::SignedDuration) -> Setup {
    let sandbox = Sandbox::start(SandboxConfig::default()).await.unwrap();
    let client = sandbox.client();
    let fleet = Arc::new(Fleet::in_memory());
    let metrics = Arc::new(Metrics::new());
    let stop = CancellationToken::new();
    let config = KubeletConfig {
        tick: Duration::from_millis(20),
        heartbeat: HeartbeatConfig {
            lease_interval,
            ..HeartbeatConfig::default()
        },
        concurrency: 8,
        ..KubeletConfig::default()
    };
    tokio::spawn(
        Kubelet::new(client.clone(), fleet.clone(), config, metrics.clone()).run(stop.clone()),
    );
    Setup {
        _sandbox: sandbox,
        client,
        driver: VirtualDriver::new(fleet),
        metrics,
        stop,
    }
}

fn request(name: &str, spec: serde_json::Value) -> MachineRequest {
    MachineRequest {
        machine: machine("shoot--test", name, "c", None),
        class: class("c", spec),
        secret: SecretData::new(),
    }
}

/// Polls `check` until it returns Some, failing after 60 s.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    for _ in 0..3000 {
        if let Some(value) = check().await {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for: {what}");
}

async fn node(client: &Client, name: &str) -> Option<Node> {
    Api::<Node>::all(client.clone())
        .get_opt(name)
        .await
        .ok()
        .flatten()
}

fn condition_status(node: &Node, type_: &str) -> Option<String> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|condition| condition.type_ == type_)
        .map(|condition| condition.status.clone())
}

async fn renew_time(client: &Client, name: &str) -> Option<Timestamp> {
    let lease = Api::<Lease>::namespaced(client.clone(), "kube-node-lease")
        .get_opt(name)
        .await
        .ok()??;
    lease.spec?.renew_time.map(|time| time.0)
}

fn counter(metrics: &Metrics, action: &str) -> u64 {
    let text = metrics.encode();
    let prefix =
        format!("provider_virtual_kube_requests_total{{action=\"{action}\",result=\"ok\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_booted_vm_registers_its_node_with_identity_topology_capacity_and_a_lease() {
    let setup = setup(jiff::SignedDuration::from_secs(10)).await;
    let created = setup
        .driver
        .create_machine(request("worker-1", json!({})))
        .await
        .unwrap();
    let node = eventually("node registered and Ready", || async {
        node(&setup.client, "worker-1")
            .await
            .filter(|node| condition_status(node, "Ready").as_deref() == Some("True"))
    })
    .await;
    assert_eq!(
        node.spec
            .as_ref()
            .and_then(|spec| spec.provider_id.as_deref()),
        Some(created.provider_id.as_str())
    );
    let labels = node.metadata.labels.clone().unwrap();
    assert_eq!(labels["kubernetes.io/hostname"], "worker-1");
    assert_eq!(labels["node.kubernetes.io/instance-type"], "v.small");
    assert_eq!(labels["topology.kubernetes.io/zone"], "virt-1a");
    assert_eq!(labels["topology.kubernetes.io/region"], "virt-1");
    let status = node.status.clone().unwrap();
    assert_eq!(status.capacity.as_ref().unwrap()["memory"].0, "8Gi");
    assert_eq!(status.allocatable.as_ref().unwrap()["pods"].0, "110");
    let addresses: Vec<_> = status
        .addresses
        .unwrap()
        .into_iter()
        .map(|a| (a.type_, a.address))
        .collect();
    assert!(
        addresses.contains(&("Hostname".to_owned(), "worker-1".to_owned())),
        "{addresses:?}"
    );
    assert!(
        addresses.iter().any(|(type_, _)| type_ == "InternalIP"),
        "{addresses:?}"
    );
    let lease = eventually("lease created", || async {
        Api::<Lease>::namespaced(setup.client.clone(), "kube-node-lease")
            .get_opt("worker-1")
            .await
            .ok()
            .flatten()
    })
    .await;
    let spec = lease.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("worker-1"));
    assert_eq!(spec.lease_duration_seconds, Some(40));
}

#[tokio::test]
async fn a_vm_awaiting_boot_or_initialisation_has_no_node_yet() {
    let setup = setup(jiff::SignedDuration::from_secs(10)).await;
    setup
        .driver
        .create_machine(request(
            "needs-init",
            json!({"requiresInitialization": true}),
        ))
        .await
        .unwrap();
    setup
        .driver
        .create_machine(request("control", json!({})))
        .await
        .unwrap();
    // Once the control VM's node exists, the kubelet has ticked with both VMs present.
    eventually("control node", || async {
        node(&setup.client, "control").await
    })
    .await;
    assert!(
        node(&setup.client, "needs-init").await.is_none(),
        "registered before InitializeMachine"
    );
    setup
        .driver
        .initialize_machine(request(
            "needs-init",
            json!({"requiresInitialization": true}),
        ))
        .await
        .unwrap();
    eventually("node after initialisation", || async {
        node(&setup.client, "needs-init").await
    })
    .await;
}

#[tokio::test]
async fn the_lease_is_renewed_while_status_is_posted_only_on_change() {
    let setup = setup(jiff::SignedDuration::from_millis(100)).await;
    setup
        .driver
        .create_machine(request("worker-1", json!({})))
        .await
        .unwrap();
    let first = eventually("lease", || async {
        renew_time(&setup.client, "worker-1").await
    })
    .await;
    let mut last = first;
    for round in 0..3 {
        last = eventually(&format!("renewal {round}"), || async {
            renew_time(&setup.client, "worker-1")
                .await
                .filter(|renewed| *renewed > last)
        })
        .await;
    }
    assert!(last > first);
    assert!(counter(&setup.metrics, "renew_lease") >= 3);
    assert_eq!(
        counter(&setup.metrics, "post_node_status"),
        1,
        "an unchanged status is not posted again within the report interval"
    );
}

#[tokio::test]
async fn conditions_switch_through_the_annotation_and_the_admin_override() {
    let setup = setup(jiff::SignedDuration::from_secs(10)).await;
    setup
        .driver
        .create_machine(request("worker-1", json!({})))
        .await
        .unwrap();
    eventually("node", || async { node(&setup.client, "worker-1").await }).await;
    let nodes = Api::<Node>::all(setup.client.clone());
    let annotate = |value: serde_json::Value| {
        let nodes = nodes.clone();
        async move {
            nodes
                .patch(
                    "worker-1",
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"metadata": {"annotations": {CONDITIONS_ANNOTATION: value}}}),
                    ),
                )
                .await
                .unwrap();
        }
    };
    annotate(json!("Ready=False,DiskPressure=True")).await;
    eventually("Ready=False from the annotation", || async {
        node(&setup.client, "worker-1").await.filter(|node| {
            condition_status(node, "Ready").as_deref() == Some("False")
                && condition_status(node, "DiskPressure").as_deref() == Some("True")
        })
    })
    .await;
    annotate(serde_json::Value::Null).await;
    eventually("Ready=True again", || async {
        node(&setup.client, "worker-1")
            .await
            .filter(|node| condition_status(node, "Ready").as_deref() == Some("True"))
    })
    .await;
    setup.driver.fleet().set_overrides(
        "worker-1",
        parse_condition_overrides("MemoryPressure=True").unwrap(),
    );
    eventually("MemoryPressure=True from the admin override", || async {
        node(&setup.client, "worker-1")
            .await
            .filter(|node| condition_status(node, "MemoryPressure").as_deref() == Some("True"))
    })
    .await;
}

#[tokio::test]
async fn conditions_other_components_own_survive_status_posts() {
    let setup = setup(jiff::SignedDuration::from_secs(10)).await;
    setup
        .driver
        .create_machine(request("worker-1", json!({})))
        .await
        .unwrap();
    eventually("node", || async { node(&setup.client, "worker-1").await }).await;
    let nodes = Api::<Node>::all(setup.client.clone());
    nodes
        .patch_status(
            "worker-1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {"conditions": [
                {"type": "Preserved", "status": "True", "reason": "PreservedByMCM"},
            ]}})),
        )
        .await
        .unwrap();
    // Each switch makes the kubelet post the node status again.
    for (round, overrides) in [
        "Ready=False",
        "DiskPressure=True",
        "",
        "NetworkUnavailable=True",
        "",
    ]
    .into_iter()
    .enumerate()
    {
        let posts_before = counter(&setup.metrics, "post_node_status");
        setup
            .driver
            .fleet()
            .set_overrides("worker-1", parse_condition_overrides(overrides).unwrap());
        let node = eventually(&format!("status post {round} ({overrides:?})"), || async {
            if counter(&setup.metrics, "post_node_status") <= posts_before {
                return None;
            }
            let node = node(&setup.client, "worker-1").await?;
            let expected_ready = if overrides == "Ready=False" {
                "False"
            } else {
                "True"
            };
            (condition_status(&node, "Ready").as_deref() == Some(expected_ready)).then_some(node)
        })
        .await;
        assert_eq!(
            condition_status(&node, "Preserved").as_deref(),
            Some("True"),
            "the Preserved condition survives status post {round}"
        );
        assert_eq!(
            condition_status(&node, "NetworkUnavailable").is_some(),
            overrides.contains("NetworkUnavailable"),
            "a type the kubelet stopped reporting is removed (round {round})"
        );
    }
    assert!(counter(&setup.metrics, "post_node_status") >= 6);
}

#[tokio::test]
async fn unhealthy_after_turns_ready_false() {
    let setup = setup(jiff::SignedDuration::from_secs(10)).await;
    setup
        .driver
        .create_machine(request("sick", json!({"unhealthyAfter": "300ms"})))
        .await
        .unwrap();
    eventually("Ready=False after unhealthyAfter", || async {
        node(&setup.client, "sick")
            .await
            .filter(|node| condition_status(node, "Ready").as_deref() == Some("False"))
    })
    .await;
}

async fn ensure_namespace(client: &Client, name: &str) {
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    let _ = Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await;
}

fn pod_on(name: &str, node: &str, claim: Option<&str>) -> Pod {
    let volumes: Vec<_> = claim
        .map(|claim| json!({"name": "data", "persistentVolumeClaim": {"claimName": claim}}))
        .into_iter()
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "apps"},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "nginx"}], "volumes": volumes},
    }))
    .unwrap()
}

fn pod_ready(pod: &Pod) -> bool {
    let Some(status) = &pod.status else {
        return false;
    };
    status.phase.as_deref() == Some("Running")
        && status
            .conditions
            .iter()
            .flatten()
            .any(|condition| condition.type_ == "Ready" && condition.status == "True")
}

#[tokio::test]
async fn pods_become_ready_and_deleted_pods_complete_after_their_grace_period() {
    let setup = setup(jiff::SignedDuration::from_secs(10)).await;
    setup
        .driver
        .create_machine(request("worker-1", json!({})))
        .await
        .unwrap();
    eventually("node", || async { node(&setup.client, "worker-1").await }).await;
    ensure_namespace(&setup.client, "apps").await;
    let pods = Api::<Pod>::namespaced(setup.client.clone(), "apps");
    pods.create(&PostParams::default(), &pod_on("web", "worker-1", None))
        .await
        .unwrap();
    pods.create(
        &PostParams::default(),
        &pod_on("elsewhere", "not-ours", None),
    )
    .await
    .unwrap();
    eventually("pod Running and Ready", || async {
        pods.get_opt("web").await.ok().flatten().filter(pod_ready)
    })
    .await;
    assert!(
        !pods
            .get("elsewhere")
            .await
            .map(|pod| pod_ready(&pod))
            .unwrap(),
        "pods of other nodes are left alone"
    );

    let params = DeleteParams {
        grace_period_seconds: Some(1),
        ..DeleteParams::default()
    };
    let marked = pods
        .delete("web", &params)
        .await
        .unwrap()
        .left()
        .expect("graceful deletion marks the pod");
    let deadline = marked
        .metadata
        .deletion_timestamp
        .expect("deletionTimestamp")
        .0;
    eventually("pod completed", || async {
        matches!(pods.get_opt("web").await, Ok(None)).then_some(())
    })
    .await;
    assert!(
        Timestamp::now() >= deadline,
        "completed only after the grace period"
    );
}

#[tokio::test]
async fn volumes_attached_follow_the_pvc_backed_pods_on_the_node() {
    let setup = setup(jiff::SignedDuration::from_secs(10)).await;
    setup
        .driver
        .create_machine(request("worker-1", json!({})))
        .await
        .unwrap();
    eventually("node", || async { node(&setup.client, "worker-1").await }).await;
    ensure_namespace(&setup.client, "apps").await;
    let volume: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "pv-1"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "csi": {"driver": "virtual.csi", "volumeHandle": "vol-1"}},
    }))
    .unwrap();
    Api::<PersistentVolume>::all(setup.client.clone())
        .create(&PostParams::default(), &volume)
        .await
        .unwrap();
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data", "namespace": "apps"},
        "spec": {"volumeName": "pv-1", "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .unwrap();
    Api::<PersistentVolumeClaim>::namespaced(setup.client.clone(), "apps")
        .create(&PostParams::default(), &claim)
        .await
        .unwrap();
    let pods = Api::<Pod>::namespaced(setup.client.clone(), "apps");
    pods.create(
        &PostParams::default(),
        &pod_on("db", "worker-1", Some("data")),
    )
    .await
    .unwrap();
    let expected = "kubernetes.io/csi/virtual.csi^vol-1";
    let attached = |node: &Node| -> (Vec<String>, Vec<String>) {
        let status = node.status.clone().unwrap_or_default();
        (
            status
                .volumes_attached
                .unwrap_or_default()
                .into_iter()
                .map(|v| v.name)
                .collect(),
            status.volumes_in_use.unwrap_or_default(),
        )
    };
    eventually("volume attached", || async {
        node(&setup.client, "worker-1")
            .await
            .filter(|node| attached(node) == (vec![expected.to_owned()], vec![expected.to_owned()]))
    })
    .await;
    let immediately = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    let _ = pods.delete("db", &immediately).await.unwrap();
    eventually("volume detached", || async {
        node(&setup.client, "worker-1")
            .await
            .filter(|node| attached(node) == (vec![], vec![]))
    })
    .await;
}

#[tokio::test]
async fn a_deleted_vm_stops_heartbeating_and_leaves_the_node_to_the_controller() {
    let setup = setup(jiff::SignedDuration::from_millis(100)).await;
    setup
        .driver
        .create_machine(request("doomed", json!({})))
        .await
        .unwrap();
    setup
        .driver
        .create_machine(request("witness", json!({})))
        .await
        .unwrap();
    eventually("both leases", || async {
        Some((
            renew_time(&setup.client, "doomed").await?,
            renew_time(&setup.client, "witness").await?,
        ))
    })
    .await;
    setup
        .driver
        .delete_machine(request("doomed", json!({})))
        .await
        .unwrap();
    // Let the kubelet finish any renewal that was in flight when the VM went away.
    let mut witness = renew_time(&setup.client, "witness").await.unwrap();
    for _ in 0..2 {
        witness = eventually("witness renewal", || async {
            renew_time(&setup.client, "witness")
                .await
                .filter(|renewed| *renewed > witness)
        })
        .await;
    }
    let frozen = renew_time(&setup.client, "doomed").await.unwrap();
    for _ in 0..3 {
        witness = eventually("witness renewal", || async {
            renew_time(&setup.client, "witness")
                .await
                .filter(|renewed| *renewed > witness)
        })
        .await;
    }
    assert_eq!(
        renew_time(&setup.client, "doomed").await,
        Some(frozen),
        "the deleted VM's lease is not renewed"
    );
    assert!(
        node(&setup.client, "doomed").await.is_some(),
        "the provider does not delete the Node"
    );
}
