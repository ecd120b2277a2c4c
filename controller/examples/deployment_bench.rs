//! Benchmark of the MachineDeployment path end to end (run in release; prints figures, asserts
//! nothing):
//!
//! ```text
//! cargo run --release -p mcm-controller --example deployment_bench [-- --machines 1000]
//!     [--qps 500] [--concurrent-syncs 50] [--limit-secs 1800]
//! ```
//!
//! The manager runs with `--kube-api-qps` 500 (burst 2×) and `--concurrent-syncs` 50 unless told
//! otherwise: upstream's defaults (20/30 and 10) make any fleet of this size a test of the
//! client throttle.
//!
//! In one process: a control and a target sandbox, provider-virtual (zero boot delay) with its
//! kubelet, and the manager with every shell (`compose::registry()`).
//! 1. Scales a MachineDeployment from 0 to N Running machines.
//! 2. Rolls all N to a new MachineClass with maxSurge 10 % (maxUnavailable 0).
//!
//! For each phase it prints the wall time, the API requests counted by both sandboxes (minus the
//! benchmark's own polls) and the peak RSS (VmRSS of this process, which includes both sandboxes
//! and the provider, so it is an upper bound for the manager).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser as _;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use mcm_api::v1alpha1::{Machine, MachineClass, MachineDeployment};
use mcm_controller::manager::compose::{self, ControllerSet};
use mcm_controller::manager::config::{Args, validate};
use mcm_controller::manager::{self, Controller, RunOptions};
use mcm_provider_proto::{BoundServer, DriverClient, Endpoint};
use mcm_provider_virtual::driver::{Fleet, VirtualDriver};
use mcm_provider_virtual::kubelet::{Kubelet, KubeletConfig};
use mcm_provider_virtual::metrics::Metrics as ProviderMetrics;
use mcm_sandbox::{Sandbox, SandboxConfig, Verb};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const NAMESPACE: &str = "default";
const DEPLOYMENT: &str = "bench";

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

async fn client_for(path: &Path) -> Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    Client::try_from(config).unwrap()
}

async fn setup_control(control: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(control.clone());
    for crd in mcm_api::crd::all().unwrap().into_values() {
        let _ = crds.create(&PostParams::default(), &crd).await;
    }
    let namespaces: Api<Namespace> = Api::all(control.clone());
    let ns: Namespace = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
    )
    .unwrap();
    let _ = namespaces.create(&PostParams::default(), &ns).await;
    let machines: Api<Machine> = Api::namespaced(control.clone(), NAMESPACE);
    while machines.list(&ListParams::default()).await.is_err() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let secrets: Api<Secret> = Api::namespaced(control.clone(), NAMESPACE);
    let classes: Api<MachineClass> = Api::namespaced(control.clone(), NAMESPACE);
    for name in ["bench-a", "bench-b"] {
        let secret: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "stringData": {"userData": "#!/bin/sh\necho <<MACHINE_NAME>>\n"}
        }))
        .unwrap();
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        let class: MachineClass = serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "provider": "virtual", "providerSpec": {},
            "secretRef": {"name": name, "namespace": NAMESPACE},
            "credentialsSecretRef": {"name": name, "namespace": NAMESPACE}
        }))
        .unwrap();
        classes
            .create(&PostParams::default(), &class)
            .await
            .unwrap();
    }
}

struct Phase {
    name: &'static str,
    seconds: f64,
    control_requests: u64,
    control_writes: u64,
    target_requests: u64,
    peak_rss_kib: u64,
}

fn writes(counters: &mcm_sandbox::RequestCounters) -> u64 {
    [Verb::Create, Verb::Update, Verb::Patch, Verb::Delete]
        .into_iter()
        .map(|v| counters.by_verb(v))
        .sum()
}

/// Polls the deployment (one GET per poll, counted in `polls`) until `done`, with a peak RSS
/// sampler running meanwhile.
async fn measure(
    name: &'static str,
    control_sb: &Sandbox,
    target_sb: &Sandbox,
    deployments: &Api<MachineDeployment>,
    limit: Duration,
    done: impl Fn(&MachineDeployment) -> bool,
) -> Phase {
    control_sb.faults().reset_counters();
    target_sb.faults().reset_counters();
    let peak = Arc::new(AtomicU64::new(rss_kib()));
    let stop = CancellationToken::new();
    let sampler = {
        let (peak, stop) = (Arc::clone(&peak), stop.clone());
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                peak.fetch_max(rss_kib(), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let started = Instant::now();
    let mut polls = 0u64;
    let mut last = String::new();
    loop {
        polls += 1;
        if let Ok(md) = deployments.get(DEPLOYMENT).await {
            if done(&md) {
                break;
            }
            let st = md.status.unwrap_or_default();
            let now = format!(
                "replicas={} updated={} available={}",
                st.replicas.unwrap_or(0),
                st.updated_replicas.unwrap_or(0),
                st.available_replicas.unwrap_or(0)
            );
            if now != last {
                eprintln!("  [{name} {:>6.1}s] {now}", started.elapsed().as_secs_f64());
                last = now;
            }
        }
        if started.elapsed() > limit {
            eprintln!("  [{name}] gave up after {limit:?}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    stop.cancel();
    let _ = sampler.await;
    let control = control_sb.faults().counters();
    let target = target_sb.faults().counters();
    Phase {
        name,
        seconds,
        control_requests: control.total().saturating_sub(polls),
        control_writes: writes(&control),
        target_requests: target.total(),
        peak_rss_kib: peak.load(Ordering::Relaxed),
    }
}

fn complete(n: i32, class: &'static str) -> impl Fn(&MachineDeployment) -> bool {
    move |md| {
        let st = md.status.clone().unwrap_or_default();
        let template_class = md
            .spec
            .template
            .spec
            .as_ref()
            .and_then(|s| s.class.as_ref())
            .and_then(|c| c.name.as_deref());
        template_class == Some(class)
            && st.observed_generation >= md.metadata.generation
            && st.replicas == Some(n)
            && st.updated_replicas == Some(n)
            && st.available_replicas == Some(n)
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .init();
    }
    let n = i32::try_from(arg("--machines", 1000)).unwrap_or(1000);
    let limit = Duration::from_secs(arg("--limit-secs", 1800));
    let baseline_rss = rss_kib();

    let control_sb = Sandbox::start(SandboxConfig {
        name: "control".into(),
        ..SandboxConfig::default()
    })
    .await
    .unwrap();
    let target_sb = Sandbox::start(SandboxConfig {
        name: "target".into(),
        ..SandboxConfig::default()
    })
    .await
    .unwrap();
    let control = client_for(control_sb.kubeconfig_path()).await;
    let target = client_for(target_sb.kubeconfig_path()).await;
    setup_control(&control).await;

    let stop = CancellationToken::new();
    let fleet = Arc::new(Fleet::in_memory());
    let kubelet = Kubelet::new(
        target.clone(),
        Arc::clone(&fleet),
        KubeletConfig {
            tick: Duration::from_millis(200),
            ..KubeletConfig::default()
        },
        Arc::new(ProviderMetrics::new()),
    );
    tokio::spawn(kubelet.run(stop.clone()));
    let bound = BoundServer::bind(&Endpoint::Tcp("127.0.0.1:0".parse().unwrap()))
        .await
        .unwrap();
    let endpoint = bound.local_endpoint().clone();
    let driver = VirtualDriver::new(Arc::clone(&fleet));
    let serve_stop = stop.clone();
    tokio::spawn(async move {
        let _ = bound
            .serve(Arc::new(driver), serve_stop.cancelled_owned())
            .await;
    });

    let control_flag = format!(
        "--control-kubeconfig={}",
        control_sb.kubeconfig_path().display()
    );
    let target_flag = format!(
        "--target-kubeconfig={}",
        target_sb.kubeconfig_path().display()
    );
    let driver_flag = format!("--driver-endpoint={endpoint}");
    // Upstream's default client QPS (20) would make this a benchmark of the throttle.
    let qps = arg("--qps", 500);
    let qps_flag = format!("--kube-api-qps={qps}");
    let burst_flag = format!("--kube-api-burst={}", qps * 2);
    let syncs_flag = format!("--concurrent-syncs={}", arg("--concurrent-syncs", 50));
    let args = Args::try_parse_from([
        "machine-controller-manager",
        control_flag.as_str(),
        target_flag.as_str(),
        driver_flag.as_str(),
        "--namespace=default",
        "--leader-elect=false",
        qps_flag.as_str(),
        burst_flag.as_str(),
        syncs_flag.as_str(),
    ])
    .unwrap();
    let config = validate(&args).unwrap();
    let driver_client = DriverClient::connect(&endpoint, Duration::from_secs(10))
        .await
        .unwrap();
    let set: Box<dyn Controller> =
        Box::new(ControllerSet::with(compose::registry()).with_driver_client(driver_client));
    let mut options = RunOptions::new("deployment-bench");
    options.admin_listener = Some(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap());
    let health = options.health.clone();
    let manager_stop = CancellationToken::new();
    let manager = tokio::spawn(manager::run(
        config,
        vec![set],
        options,
        manager_stop.clone(),
    ));
    while !health.is_ready() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let idle_rss = rss_kib();

    let deployments: Api<MachineDeployment> = Api::namespaced(control.clone(), NAMESPACE);
    let md: MachineDeployment = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment",
        "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"name": DEPLOYMENT}},
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": "10%", "maxUnavailable": 0}},
            "template": {"metadata": {"labels": {"name": DEPLOYMENT}},
                         "spec": {"class": {"kind": "MachineClass", "name": "bench-a"}}}
        }
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &md)
        .await
        .unwrap();
    // Let the empty deployment settle (its set exists at 0) before timing the scale-up.
    measure(
        "settle",
        &control_sb,
        &target_sb,
        &deployments,
        Duration::from_secs(60),
        |md| {
            md.status
                .as_ref()
                .is_some_and(|s| s.observed_generation >= md.metadata.generation)
        },
    )
    .await;

    deployments
        .patch_scale(
            DEPLOYMENT,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": n}})),
        )
        .await
        .unwrap();
    let scale_up = measure(
        "scale 0 → N",
        &control_sb,
        &target_sb,
        &deployments,
        limit,
        complete(n, "bench-a"),
    )
    .await;

    deployments
        .patch(
            DEPLOYMENT,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"template": {"spec": {"class": {"name": "bench-b"}}}}})),
        )
        .await
        .unwrap();
    let roll = measure(
        "roll N → new class",
        &control_sb,
        &target_sb,
        &deployments,
        limit,
        complete(n, "bench-b"),
    )
    .await;

    let machines: Api<Machine> = Api::namespaced(control.clone(), NAMESPACE);
    let left = machines
        .list(&ListParams::default())
        .await
        .map(|l| l.items.len())
        .unwrap_or(0);

    println!("deployment_bench: N = {n} machines, provider-virtual zero boot delay, maxSurge 10%");
    println!(
        "RSS: process start {:.0} MiB, manager idle {:.0} MiB (includes both sandboxes and the provider)",
        baseline_rss as f64 / 1024.0,
        idle_rss as f64 / 1024.0
    );
    println!(
        "{:<22} {:>9} {:>14} {:>13} {:>14} {:>13} {:>14}",
        "phase",
        "seconds",
        "control reqs",
        "control wr",
        "target reqs",
        "reqs/machine",
        "peak RSS MiB"
    );
    for p in [&scale_up, &roll] {
        println!(
            "{:<22} {:>9.1} {:>14} {:>13} {:>14} {:>13.1} {:>14.0}",
            p.name,
            p.seconds,
            p.control_requests,
            p.control_writes,
            p.target_requests,
            (p.control_requests + p.target_requests) as f64 / f64::from(n.max(1)),
            p.peak_rss_kib as f64 / 1024.0
        );
    }
    println!("machines left after the rollout: {left} (want {n})");

    manager_stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(30), manager).await;
    stop.cancel();
}
