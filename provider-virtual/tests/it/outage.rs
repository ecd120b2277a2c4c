//! Recovery of the virtual kubelet after an API outage injected through the sandbox's admin
//! endpoint (`POST /sandbox/admin/unavailable`, 503 for every request): Leases renew and the Node
//! of a VM created during the outage becomes Ready within seconds of the API coming back.
//!
//! The kubelet's client is built by `target_client` from the kubeconfig, as the binary builds it,
//! so kube's in-request retries (off there) would show here as a late recovery.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use mcm_provider_proto::conformance::machine;
use mcm_provider_proto::{Driver, MachineRequest, SecretData};
use mcm_provider_virtual::driver::{Fleet, VirtualDriver};
use mcm_provider_virtual::kubelet::{Kubelet, KubeletConfig, target_client};
use mcm_provider_virtual::metrics::Metrics;
use mcm_provider_virtual::node::HeartbeatConfig;
use mcm_sandbox::{Sandbox, SandboxConfig};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common::class;

/// Long enough that kube's retry backoff (5 ms doubling) would reach seconds per attempt.
const OUTAGE: Duration = Duration::from_secs(10);
/// What "within seconds" means here: a few lease intervals (1 s) after the API is back.
const RECOVERY_BOUND: Duration = Duration::from_secs(4);

fn request(name: &str) -> MachineRequest {
    MachineRequest {
        machine: machine("shoot--test", name, "c", None),
        class: class("c", json!({})),
        secret: SecretData::new(),
    }
}

async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn ready(client: &Client, name: &str) -> bool {
    let Ok(Some(node)) = Api::<Node>::all(client.clone()).get_opt(name).await else {
        return false;
    };
    node.status
        .and_then(|status| status.conditions)
        .unwrap_or_default()
        .iter()
        .any(|condition| condition.type_ == "Ready" && condition.status == "True")
}

async fn renewed_after(client: &Client, name: &str, after: Timestamp) -> bool {
    let Ok(Some(lease)) = Api::<Lease>::namespaced(client.clone(), "kube-node-lease")
        .get_opt(name)
        .await
    else {
        return false;
    };
    lease
        .spec
        .and_then(|spec| spec.renew_time)
        .is_some_and(|time| time.0 > after)
}

async fn start_outage(client: &Client, seconds: u64) {
    let request = http::Request::builder()
        .method(http::Method::POST)
        .uri("/sandbox/admin/unavailable")
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(json!({"seconds": seconds}).to_string().into_bytes())
        .unwrap();
    client.request_text(request).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_and_a_new_node_recover_within_seconds_after_an_api_outage() {
    let sandbox = Sandbox::start(SandboxConfig::default()).await.unwrap();
    let kubeconfig = Kubeconfig::read_from(sandbox.kubeconfig_path()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    let kubelet_client = target_client(config).unwrap();
    // The test's own reads use the sandbox's client (no retries either).
    let client = sandbox.client();
    let fleet = Arc::new(Fleet::in_memory());
    let driver = VirtualDriver::new(Arc::clone(&fleet));
    let stop = CancellationToken::new();
    let config = KubeletConfig {
        tick: Duration::from_millis(20),
        heartbeat: HeartbeatConfig {
            lease_interval: jiff::SignedDuration::from_secs(1),
            ..HeartbeatConfig::default()
        },
        concurrency: 8,
        request_timeout: Duration::from_secs(2),
    };
    tokio::spawn(
        Kubelet::new(kubelet_client, fleet, config, Arc::new(Metrics::new())).run(stop.clone()),
    );
    let before = ["worker-1", "worker-2"];
    for name in before {
        driver.create_machine(request(name)).await.unwrap();
    }
    for name in before {
        wait_for(
            &format!("{name} Ready"),
            Duration::from_secs(30),
            || async { ready(&client, name).await.then_some(()) },
        )
        .await;
    }

    start_outage(&client, OUTAGE.as_secs()).await;
    let outage_started = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    driver.create_machine(request("worker-3")).await.unwrap();
    tokio::time::sleep(OUTAGE.saturating_sub(outage_started.elapsed())).await;
    // The API answers again from here on.
    let back = Instant::now();
    let back_at = Timestamp::now();

    for name in before {
        wait_for(
            &format!("lease of {name} renewed after the outage"),
            Duration::from_secs(60),
            || async { renewed_after(&client, name, back_at).await.then_some(()) },
        )
        .await;
    }
    let leases_recovered = back.elapsed();
    wait_for(
        "worker-3 (created during the outage) Ready",
        Duration::from_secs(60),
        || async { ready(&client, "worker-3").await.then_some(()) },
    )
    .await;
    let node_ready = back.elapsed();
    stop.cancel();
    eprintln!(
        "after a {OUTAGE:?} outage: leases renewed {leases_recovered:?} and the new node Ready \
         {node_ready:?} after the API came back"
    );
    assert!(
        leases_recovered < RECOVERY_BOUND && node_ready < RECOVERY_BOUND,
        "recovery took {leases_recovered:?} (leases) and {node_ready:?} (new node); bound {RECOVERY_BOUND:?}"
    );
}
