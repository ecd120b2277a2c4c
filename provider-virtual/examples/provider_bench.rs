//! Benchmark of provider-virtual (run in release):
//!
//! ```text
//! cargo run --release -p mcm-provider-virtual --example provider_bench [-- --vms 1000 --rounds 3 --window-secs 30]
//! ```
//!
//! 1. Creates N VMs over gRPC on loopback (Unix socket, state file on disk, 32 concurrent calls) and
//!    prints creates per second (median of the rounds) and the process RSS.
//! 2. Runs the virtual kubelet for N VMs against the in-process sandbox with the production
//!    heartbeat (Lease every 10 s, status every 5 min), waits until every Node is registered, and
//!    measures the API requests spent keeping them alive over a window, scaled to a minute.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use mcm_provider_proto::conformance::machine;
use mcm_provider_proto::{BoundServer, DriverClient, Endpoint, SecretData};
use mcm_provider_virtual::driver::{Fleet, VirtualDriver};
use mcm_provider_virtual::kubelet::{Kubelet, KubeletConfig};
use mcm_provider_virtual::metrics::Metrics;
use mcm_sandbox::{Sandbox, SandboxConfig, Verb};
use tokio_util::sync::CancellationToken;

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| {
            value
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

fn class(name: &str) -> mcm_api::v1alpha1::MachineClass {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineClass",
        "metadata": {"name": name, "namespace": "bench"},
        "provider": "virtual",
        "providerSpec": {"tags": {"bench": "true"}},
        "nodeTemplate": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                         "instanceType": "v.large", "region": "virt-1", "zone": "virt-1a"},
    }))
    .unwrap()
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|arg| arg == name)
        .and_then(|index| args.get(index + 1))
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

async fn create_round(vms: u64, round: u64) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let fleet = Arc::new(Fleet::open(dir.path().join("state.json")).unwrap());
    let socket = dir.path().join("driver.sock");
    let bound = BoundServer::bind(&Endpoint::Unix(socket.clone()))
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let server = tokio::spawn(bound.serve(
        Arc::new(VirtualDriver::new(fleet.clone())),
        stop.clone().cancelled_owned(),
    ));
    let client = DriverClient::connect(&Endpoint::Unix(socket), Duration::from_secs(60))
        .await
        .unwrap();
    let class = class("bench");
    let secret = SecretData::from([("userData".to_owned(), vec![b'x'; 2048])]);
    let started = Instant::now();
    let failures = futures::stream::iter(0..vms)
        .map(|index| {
            let (client, class, secret) = (&client, &class, &secret);
            async move {
                let machine = machine("bench", &format!("bench-{round}-{index}"), "bench", None);
                client
                    .create_machine(&machine, class, secret)
                    .await
                    .is_err()
            }
        })
        .buffer_unordered(32)
        .filter(|failed| futures::future::ready(*failed))
        .count()
        .await;
    let elapsed = started.elapsed();
    assert_eq!(failures, 0, "every create succeeds");
    assert_eq!(fleet.len() as u64, vms);
    let rate = vms as f64 / elapsed.as_secs_f64();
    println!(
        "round {round}: {vms} creates in {:.2} s = {rate:.0} creates/s, RSS {:.1} MiB, state file {} KiB",
        elapsed.as_secs_f64(),
        rss_mib(),
        std::fs::metadata(dir.path().join("state.json"))
            .map(|m| m.len() / 1024)
            .unwrap_or(0)
    );
    stop.cancel();
    server.await.unwrap().unwrap();
    rate
}

async fn keep_alive(vms: u64, window: Duration) {
    let sandbox = Sandbox::start(SandboxConfig::default()).await.unwrap();
    let fleet = Arc::new(Fleet::in_memory());
    let driver = VirtualDriver::new(fleet.clone());
    let class = class("bench");
    for index in 0..vms {
        let request = mcm_provider_proto::MachineRequest {
            machine: machine("bench", &format!("node-{index}"), "bench", None),
            class: class.clone(),
            secret: SecretData::new(),
        };
        mcm_provider_proto::Driver::create_machine(&driver, request)
            .await
            .unwrap();
    }
    let metrics = Arc::new(Metrics::new());
    let stop = CancellationToken::new();
    let kubelet = Kubelet::new(
        sandbox.client(),
        fleet,
        KubeletConfig::default(),
        metrics.clone(),
    );
    tokio::spawn(kubelet.run(stop.clone()));
    let registering = Instant::now();
    let registered = |text: &str| -> u64 {
        text.lines()
            .find_map(|line| {
                line.strip_prefix(
                    "provider_virtual_kube_requests_total{action=\"register_node\",result=\"ok\"} ",
                )
            })
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0)
    };
    while registered(&metrics.encode()) < vms {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "{vms} nodes registered in {:.1} s",
        registering.elapsed().as_secs_f64()
    );
    // Let the registration burst (first status post and lease creation) settle.
    tokio::time::sleep(Duration::from_secs(12)).await;
    sandbox.faults().reset_counters();
    tokio::time::sleep(window).await;
    let counters = sandbox.faults().counters();
    let per_minute = 60.0 / window.as_secs_f64();
    let total = counters.total() as f64 * per_minute;
    println!(
        "keeping {vms} nodes alive: {total:.0} API requests/minute (window {} s scaled): lease patches {:.0}/min, node status patches {:.0}/min, other {:.0}/min; RSS {:.1} MiB",
        window.as_secs(),
        counters.by_verb_resource(Verb::Patch, "leases") as f64 * per_minute,
        counters.by_verb_resource(Verb::Patch, "nodes/status") as f64 * per_minute,
        (counters.total()
            - counters.by_verb_resource(Verb::Patch, "leases")
            - counters.by_verb_resource(Verb::Patch, "nodes/status")) as f64
            * per_minute,
        rss_mib()
    );
    println!(
        "expected from the schedule: {:.0}/min (6 lease renewals + 0.2 status posts per node per minute)",
        vms as f64 * 6.2
    );
    stop.cancel();
}

#[tokio::main]
async fn main() {
    let vms = arg("--vms", 1000);
    let rounds = arg("--rounds", 3);
    let window = Duration::from_secs(arg("--window-secs", 30));
    println!(
        "provider-virtual benchmark: {vms} VMs, {rounds} rounds; RSS at start {:.1} MiB",
        rss_mib()
    );
    let mut rates = Vec::new();
    for round in 0..rounds {
        rates.push(create_round(vms, round).await);
    }
    println!(
        "creates over gRPC (Unix socket, state file fsynced, 32 in flight): median {:.0} creates/s; RSS {:.1} MiB",
        median(&mut rates),
        rss_mib()
    );
    keep_alive(vms, window).await;
}
