//! The node lifecycle monitor (sandbox configuration, kube-controller-manager's behaviour): a
//! Node whose Lease and status are not renewed for the grace period goes `Ready=Unknown` with the
//! unreachable taints; a kubelet that posts `Ready=True` again clears them; Lease renewals alone
//! keep a Node alive; an injected API outage lapses every heartbeat.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use mcm_sandbox::node_lifecycle::NodeMonitorConfig;
use mcm_sandbox::{Sandbox, SandboxConfig, UnavailableMode};
use serde_json::{Value, json};

use crate::common::{REAL_CLUSTER_ENV, install_crypto};

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

async fn post_ready(nodes: &Api<Node>, name: &str) {
    let t = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready",
                 "lastHeartbeatTime": t, "lastTransitionTime": t}
            ]}})),
        )
        .await
        .expect("post status");
}

async fn renew(leases: &Api<Lease>, name: &str) {
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now()}
    }))
    .expect("node lifecycle test");
    if leases.create(&PostParams::default(), &lease).await.is_err() {
        leases
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"renewTime": now()}})),
            )
            .await
            .expect("renew lease");
    }
}

fn ready(n: &Node) -> Value {
    let v = serde_json::to_value(n).expect("node lifecycle test");
    v["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready").cloned())
        .unwrap_or(Value::Null)
}

fn taints(n: &Node) -> Vec<(String, String)> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.key, t.effect))
        .collect()
}

async fn wait_for(what: &str, mut f: impl AsyncFnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !f().await {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_nodes_go_unknown_and_come_back_when_the_kubelet_posts() {
    if std::env::var_os(REAL_CLUSTER_ENV).is_some() {
        eprintln!("SKIPPED (real cluster): the node monitor's grace period is the sandbox's own");
        return;
    }
    install_crypto();
    let sb = Sandbox::start(SandboxConfig {
        node_monitor: Some(NodeMonitorConfig::with_grace_period(Duration::from_secs(2))),
        ..Default::default()
    })
    .await
    .expect("start sandbox");
    let client = sb.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    for name in ["leased", "silent"] {
        let n: Node = serde_json::from_value(json!({"metadata": {"name": name}}))
            .expect("node lifecycle test");
        nodes
            .create(&PostParams::default(), &n)
            .await
            .expect("node lifecycle test");
        post_ready(&nodes, name).await;
    }
    // "leased" renews its Lease only (as a kubelet between status reports); "silent" nothing.
    let started = std::time::Instant::now();
    wait_for("the silent node is Unknown and tainted", async || {
        renew(&leases, "leased").await;
        let n = nodes.get("silent").await.expect("node lifecycle test");
        ready(&n)["status"] == "Unknown"
            && taints(&n).contains(&("node.kubernetes.io/unreachable".into(), "NoExecute".into()))
    })
    .await;
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "not before the grace period"
    );
    let n = nodes.get("silent").await.expect("node lifecycle test");
    let r = ready(&n);
    assert_eq!(r["reason"], "NodeStatusUnknown");
    assert_eq!(r["message"], "Kubelet stopped posting node status.");
    assert_eq!(
        taints(&n),
        vec![
            (
                "node.kubernetes.io/unreachable".to_owned(),
                "NoSchedule".to_owned()
            ),
            (
                "node.kubernetes.io/unreachable".to_owned(),
                "NoExecute".to_owned()
            )
        ]
    );
    let conditions =
        serde_json::to_value(&n).expect("node lifecycle test")["status"]["conditions"].clone();
    for ty in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
        let c = conditions
            .as_array()
            .expect("node lifecycle test")
            .iter()
            .find(|c| c["type"] == ty)
            .expect("node lifecycle test");
        assert_eq!(c["status"], "Unknown", "{ty}");
        assert_eq!(c["reason"], "NodeStatusNeverUpdated", "{ty}");
    }
    let leased = nodes.get("leased").await.expect("node lifecycle test");
    assert_eq!(
        ready(&leased)["status"],
        "True",
        "Lease renewals keep a node alive"
    );
    assert!(taints(&leased).is_empty());

    // The kubelet is back: Ready=True, taints gone.
    post_ready(&nodes, "silent").await;
    wait_for("the taints are removed", async || {
        renew(&leases, "leased").await;
        taints(&nodes.get("silent").await.expect("node lifecycle test")).is_empty()
    })
    .await;
    assert_eq!(
        ready(&nodes.get("silent").await.expect("node lifecycle test"))["status"],
        "True"
    );

    // An outage refuses every heartbeat, but kube-controller-manager cannot write either: the
    // monitor pauses, nothing is marked during the outage (longer than the grace period), and
    // the grace period counts from the API's return, as after the controller's own restart.
    sb.faults()
        .set_unavailable(Duration::from_secs(5), UnavailableMode::ServiceUnavailable);
    tokio::time::sleep(Duration::from_secs(5)).await;
    sb.faults().clear_unavailable();
    let back = std::time::Instant::now();
    for name in ["leased", "silent"] {
        let n = nodes.get(name).await.expect("node lifecycle test");
        assert_eq!(ready(&n)["status"], "True", "{name} right after the outage");
        assert!(taints(&n).is_empty(), "{name} right after the outage");
    }
    // Nobody heartbeats after it: both Unknown a grace period after the return, and with no
    // node Ready left, without the NoExecute taint (kube's full disruption).
    wait_for("both nodes Unknown after the return", async || {
        let mut unknown = 0;
        for name in ["leased", "silent"] {
            let n = nodes.get(name).await.expect("node lifecycle test");
            if ready(&n)["status"] == "Unknown" {
                unknown += 1;
            }
        }
        unknown == 2
    })
    .await;
    assert!(
        back.elapsed() >= Duration::from_secs(2),
        "the grace period counts from the API's return"
    );
    for name in ["leased", "silent"] {
        let n = nodes.get(name).await.expect("node lifecycle test");
        assert_eq!(
            taints(&n),
            vec![(
                "node.kubernetes.io/unreachable".to_owned(),
                "NoSchedule".to_owned()
            )],
            "{name}"
        );
    }
}
