//! Machine benchmark: N standalone Machines (default 1,000) with
//! provider-virtual at zero boot delay, every controller of the manager running in-process against
//! two in-process sandboxes (control and target).
//!
//! Prints: time until all machines are Running, time until all are deleted (objects and VMs), API
//! requests by verb and resource from the sandbox counters for each phase, and memory: the
//! manager runs in a child process (this example started again with `--manager-child`), so its
//! RSS is measured on its own, apart from the sandboxes and the provider (this process).
//!
//! `cargo run --release -p mcm-controller --example machine_bench -- --machines 50`
//! Options: `--machines N`, `--timeout SECONDS` (per phase, default 900), `--qps Q` (client QPS of
//! the manager, default 500; burst is 2×), `--concurrent-syncs N` (default 50).
//! It asserts nothing; a phase that does not complete is reported as INCOMPLETE.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Parser as _;
use futures::{StreamExt as _, stream};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use mcm_api::v1alpha1::{Machine, MachineClass, MachinePhase};
use mcm_controller::manager::compose::{ControllerSet, registry};
use mcm_controller::manager::{self, Controller, RunOptions};
use mcm_controller::platform::config::{Args, validate};
use mcm_provider_proto::{BoundServer, DriverClient, Endpoint};
use mcm_provider_virtual::driver::{Fleet, VirtualDriver};
use mcm_provider_virtual::kubelet::{Kubelet, KubeletConfig};
use mcm_provider_virtual::metrics::Metrics as ProviderMetrics;
use mcm_sandbox::{RequestCounters, Sandbox, SandboxConfig};
use serde_json::json;
use std::io::{BufRead as _, Read as _};
use tokio_util::sync::CancellationToken;

/// The sandboxes run in this process: mimalloc, as the manager, rather than glibc's allocator,
/// whose malloc and free took a quarter of their CPU in a 1,000-machine scale-up.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const NAMESPACE: &str = "default";
const CLASS: &str = "bench";

struct Options {
    machines: usize,
    timeout: Duration,
    qps: u32,
    concurrent_syncs: u32,
}

fn options() -> Result<Options> {
    let mut options = Options {
        machines: 1000,
        timeout: Duration::from_secs(900),
        qps: 500,
        concurrent_syncs: 50,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--machines" => options.machines = value("--machines")?.parse()?,
            "--timeout" => options.timeout = Duration::from_secs(value("--timeout")?.parse()?),
            "--qps" => options.qps = value("--qps")?.parse()?,
            "--concurrent-syncs" => {
                options.concurrent_syncs = value("--concurrent-syncs")?.parse()?;
            }
            // `cargo bench`-style harness flags are ignored.
            "--bench" => {}
            other => bail!("unknown argument {other}"),
        }
    }
    Ok(options)
}

/// `VmRSS` in KiB from a `/proc/<pid>/status` file.
fn rss_of(path: &str) -> Option<u64> {
    let status = std::fs::read_to_string(path).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

/// This process's RSS in KiB (sandboxes + provider).
fn rss_kib() -> Option<u64> {
    rss_of("/proc/self/status")
}

fn mib(kib: Option<u64>) -> String {
    kib.map_or_else(
        || "n/a".to_owned(),
        |k| format!("{:.1} MiB", k as f64 / 1024.0),
    )
}

async fn client_for(path: &Path) -> Result<Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    Ok(Client::try_from(config)?)
}

async fn create_ignoring_conflict<K>(api: &Api<K>, object: &K) -> Result<()>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(error) => Err(error.into()),
    }
}

async fn install(control: &Client) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(control.clone());
    for crd in mcm_api::crd::all()?.into_values() {
        create_ignoring_conflict(&crds, &crd).await?;
    }
    let namespaces: Api<Namespace> = Api::all(control.clone());
    let namespace: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}
    }))?;
    create_ignoring_conflict(&namespaces, &namespace).await?;
    let machines: Api<Machine> = Api::namespaced(control.clone(), NAMESPACE);
    let deadline = Instant::now() + Duration::from_secs(30);
    while machines.list(&ListParams::default()).await.is_err() {
        if Instant::now() > deadline {
            bail!("the CRDs are not served");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": CLASS, "namespace": NAMESPACE},
        "stringData": {"userData": "#!/bin/sh\necho <<MACHINE_NAME>>\n"}
    }))?;
    create_ignoring_conflict(&Api::namespaced(control.clone(), NAMESPACE), &secret).await?;
    let class: MachineClass = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
        "metadata": {"name": CLASS, "namespace": NAMESPACE},
        "provider": "virtual",
        "providerSpec": {"bootDelay": "0s"},
        "secretRef": {"name": CLASS, "namespace": NAMESPACE},
        "credentialsSecretRef": {"name": CLASS, "namespace": NAMESPACE}
    }))?;
    create_ignoring_conflict(&Api::namespaced(control.clone(), NAMESPACE), &class).await?;
    Ok(())
}

/// The manager's flags for this benchmark.
fn manager_argv(
    control_kubeconfig: &str,
    target_kubeconfig: &str,
    endpoint: &str,
    qps: u32,
    concurrent_syncs: u32,
) -> Vec<String> {
    vec![
        "machine-controller-manager".to_owned(),
        format!("--control-kubeconfig={control_kubeconfig}"),
        format!("--target-kubeconfig={target_kubeconfig}"),
        format!("--driver-endpoint={endpoint}"),
        format!("--namespace={NAMESPACE}"),
        "--leader-elect=false".to_owned(),
        format!("--kube-api-qps={qps}"),
        format!("--kube-api-burst={}", qps.saturating_mul(2)),
        format!("--concurrent-syncs={concurrent_syncs}"),
    ]
}

/// The child process: runs the manager with the flags given after `--manager-child`, prints
/// `READY` once it is ready and stops gracefully when its stdin closes.
async fn manager_child(argv: Vec<String>) -> Result<()> {
    let config = validate(&Args::try_parse_from(&argv)?).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let endpoint = config
        .driver_endpoint
        .clone()
        .ok_or_else(|| anyhow::anyhow!("the machine bench needs --driver-endpoint"))?;
    let driver = DriverClient::connect(&endpoint, Duration::from_secs(10)).await?;
    let set: Box<dyn Controller> =
        Box::new(ControllerSet::with(registry()).with_driver_client(driver));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let mut run_options = RunOptions::new("machine-bench");
    run_options.admin_listener = Some(listener);
    run_options.api_wait = Duration::from_secs(30);
    run_options.api_poll = Duration::from_millis(100);
    run_options.shutdown_grace = Duration::from_secs(10);
    let health = run_options.health.clone();
    let shutdown = CancellationToken::new();
    let mut handle = tokio::spawn(manager::run(
        config,
        vec![set],
        run_options,
        shutdown.clone(),
    ));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !health.is_ready() {
        if handle.is_finished() || Instant::now() > deadline {
            bail!("the manager did not become ready");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("READY");
    // The parent closes our stdin to stop us (tokio's io-std feature is not enabled here).
    let stdin_closed = tokio::task::spawn_blocking(|| {
        let mut buffer = [0u8; 64];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut buffer), Ok(n) if n > 0) {}
    });
    tokio::select! {
        _ = stdin_closed => {}
        ended = &mut handle => bail!("the manager stopped by itself: {ended:?}"),
    }
    shutdown.cancel();
    match handle.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => bail!("manager ended with an error: {error}"),
        Err(error) => bail!("manager task failed: {error}"),
    }
}

/// The manager in a child process (std::process: tokio's process feature is not enabled here).
struct ManagerProcess {
    child: std::process::Child,
}

impl ManagerProcess {
    async fn start(argv: Vec<String>) -> Result<Self> {
        let mut child = std::process::Command::new(std::env::current_exe()?)
            .arg("--manager-child")
            .args(argv)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().context("child stdout")?;
        let mut process = Self { child };
        let ready = tokio::time::timeout(
            Duration::from_secs(90),
            tokio::task::spawn_blocking(move || {
                std::io::BufReader::new(stdout)
                    .lines()
                    .map_while(Result::ok)
                    .any(|line| line.trim() == "READY")
            }),
        )
        .await;
        match ready {
            Ok(Ok(true)) => Ok(process),
            other => {
                process.kill();
                bail!("the manager process did not become ready: {other:?}")
            }
        }
    }

    fn rss_kib(&self) -> Option<u64> {
        rss_of(&format!("/proc/{}/status", self.child.id()))
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Graceful stop: close its stdin, wait up to 30 s, else kill.
    async fn stop(mut self) {
        drop(self.child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    if !status.success() {
                        eprintln!("manager process ended with {status}");
                    }
                    return;
                }
                Ok(None) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(None) => {
                    eprintln!("manager process did not stop in time; killing it");
                    break;
                }
                Err(error) => {
                    eprintln!("cannot wait for the manager process: {error}");
                    break;
                }
            }
        }
        self.kill();
    }
}

impl Drop for ManagerProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill();
        }
    }
}

fn phase_counts(machines: &[Machine]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for machine in machines {
        let phase = machine
            .phase()
            .map_or_else(|| "<none>".to_owned(), |p| format!("{p:?}"));
        *counts.entry(phase).or_insert(0) += 1;
    }
    counts
}

/// Polls until `done` says so or the timeout passes; returns the elapsed time if done.
async fn wait_for(
    what: &str,
    timeout: Duration,
    started: Instant,
    mut done: impl AsyncFnMut() -> (bool, String),
) -> Option<Duration> {
    let mut last_report = Instant::now();
    loop {
        let (finished, progress) = done().await;
        if finished {
            return Some(started.elapsed());
        }
        if started.elapsed() > timeout {
            println!("INCOMPLETE: {what} after {timeout:?}: {progress}");
            return None;
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            eprintln!("  … {what}: {progress} ({:.0?})", started.elapsed());
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn print_counters(title: &str, control: &RequestCounters, target: &RequestCounters) {
    println!("  API requests during {title}:");
    for (cluster, counters) in [("control", control), ("target", target)] {
        let mut by_verb_resource: BTreeMap<(String, String), u64> = BTreeMap::new();
        for ((verb, resource, _code), count) in &counters.counts {
            *by_verb_resource
                .entry((verb.to_string(), resource.clone()))
                .or_insert(0) += count;
        }
        println!("    {cluster}: {} requests", counters.total());
        for ((verb, resource), count) in by_verb_resource {
            println!("      {verb:<8} {resource:<40} {count}");
        }
        let errors: u64 = counters
            .counts
            .iter()
            .filter(|((_, _, code), _)| *code >= 400)
            .map(|(_, count)| count)
            .sum();
        if errors > 0 {
            println!("      (answers ≥ 400: {errors})");
        }
    }
}

fn main() -> Result<()> {
    let mut args: Vec<String> = std::env::args().collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    if args.get(1).map(String::as_str) == Some("--manager-child") {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let argv = args.split_off(2);
        return runtime.block_on(manager_child(argv));
    }
    runtime.block_on(bench(options()?))
}

/// Highest RSS of the manager process seen while sampling.
#[derive(Default)]
struct Peak(Option<u64>);

impl Peak {
    fn sample(&mut self, manager: &ManagerProcess) {
        if let Some(rss) = manager.rss_kib() {
            self.0 = Some(self.0.map_or(rss, |peak| peak.max(rss)));
        }
    }
}

async fn bench(options: Options) -> Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let n = options.machines;
    println!(
        "machine_bench: {n} standalone machines, provider-virtual boot delay 0s, manager QPS {} burst {}, concurrent-syncs {}",
        options.qps,
        options.qps * 2,
        options.concurrent_syncs
    );

    let control_sandbox = Sandbox::start(SandboxConfig {
        name: "control".into(),
        ..SandboxConfig::default()
    })
    .await?;
    let target_sandbox = Sandbox::start(SandboxConfig {
        name: "target".into(),
        ..SandboxConfig::default()
    })
    .await?;
    let control_path = control_sandbox.kubeconfig_path().to_path_buf();
    let target_path = target_sandbox.kubeconfig_path().to_path_buf();
    let control = client_for(&control_path).await?;
    let target = client_for(&target_path).await?;
    install(&control).await?;

    let fleet = Arc::new(Fleet::in_memory());
    let provider_stop = CancellationToken::new();
    let kubelet = Kubelet::new(
        target.clone(),
        Arc::clone(&fleet),
        KubeletConfig::default(),
        Arc::new(ProviderMetrics::new()),
    );
    tokio::spawn(kubelet.run(provider_stop.clone()));
    let bound = BoundServer::bind(&Endpoint::Tcp("127.0.0.1:0".parse()?)).await?;
    let endpoint = bound.local_endpoint().clone();
    let driver = VirtualDriver::new(Arc::clone(&fleet));
    {
        let stop = provider_stop.clone();
        tokio::spawn(async move {
            let _ = bound.serve(Arc::new(driver), stop.cancelled_owned()).await;
        });
    }
    let rss_infrastructure = rss_kib();

    let manager = ManagerProcess::start(manager_argv(
        &control_path.display().to_string(),
        &target_path.display().to_string(),
        &endpoint.to_string(),
        options.qps,
        options.concurrent_syncs,
    ))
    .await?;
    let manager_idle = manager.rss_kib();
    control_sandbox.faults().reset_counters();
    target_sandbox.faults().reset_counters();

    // ----- creation -------------------------------------------------------------------------
    let machines: Api<Machine> = Api::namespaced(control.clone(), NAMESPACE);
    let mut creation_peak = Peak::default();
    let started = Instant::now();
    let failed_creates = stream::iter(0..n)
        .map(|i| {
            let machines = machines.clone();
            async move {
                let machine: Machine = serde_json::from_value(json!({
                    "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
                    "metadata": {"name": format!("bench-{i:05}"), "namespace": NAMESPACE},
                    "spec": {"class": {"kind": "MachineClass", "name": CLASS}}
                }))?;
                machines.create(&PostParams::default(), &machine).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .filter(|result| std::future::ready(result.is_err()))
        .count()
        .await;
    if failed_creates > 0 {
        println!("{failed_creates} machine creations failed");
    }
    let submitted = started.elapsed();
    let running = wait_for(
        "all machines Running",
        options.timeout,
        started,
        async || {
            creation_peak.sample(&manager);
            match machines.list(&ListParams::default()).await {
                Ok(list) => {
                    let counts = phase_counts(&list.items);
                    let running = counts.get(&format!("{:?}", MachinePhase::Running)).copied();
                    (running == Some(n), format!("{counts:?}"))
                }
                Err(error) => (false, format!("list failed: {error}")),
            }
        },
    )
    .await;
    let creation_control = control_sandbox.faults().counters();
    let creation_target = target_sandbox.faults().counters();
    // Let in-flight work settle so the figures reflect the steady state with N machines.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let manager_running = manager.rss_kib();
    let rss_running = rss_kib();

    println!("creation:");
    println!("  {n} Machine objects submitted in {submitted:.2?}");
    match running {
        Some(elapsed) => println!(
            "  all {n} Running after {elapsed:.2?} ({:.1} machines/s)",
            n as f64 / elapsed.as_secs_f64()
        ),
        None => println!("  INCOMPLETE: not all machines reached Running"),
    }
    print_counters("creation", &creation_control, &creation_target);

    // ----- deletion -------------------------------------------------------------------------
    control_sandbox.faults().reset_counters();
    target_sandbox.faults().reset_counters();
    let mut deletion_peak = Peak::default();
    let started = Instant::now();
    let names: Vec<String> = machines
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|m| m.metadata.name)
        .collect();
    let failed_deletes = stream::iter(names)
        .map(|name| {
            let machines = machines.clone();
            async move { machines.delete(&name, &DeleteParams::default()).await }
        })
        .buffer_unordered(32)
        .filter(|result| std::future::ready(result.is_err()))
        .count()
        .await;
    if failed_deletes > 0 {
        println!("{failed_deletes} machine deletions failed");
    }
    let deleted = wait_for(
        "all machines deleted",
        options.timeout,
        started,
        async || {
            deletion_peak.sample(&manager);
            match machines.list(&ListParams::default()).await {
                Ok(list) => (
                    list.items.is_empty() && fleet.is_empty(),
                    format!(
                        "{} machines left {:?}, {} VMs left",
                        list.items.len(),
                        phase_counts(&list.items),
                        fleet.len()
                    ),
                ),
                Err(error) => (false, format!("list failed: {error}")),
            }
        },
    )
    .await;
    let deletion_control = control_sandbox.faults().counters();
    let deletion_target = target_sandbox.faults().counters();
    let manager_after = manager.rss_kib();
    manager.stop().await;

    println!("deletion:");
    match deleted {
        Some(elapsed) => println!(
            "  all {n} machines and VMs gone after {elapsed:.2?} ({:.1} machines/s)",
            n as f64 / elapsed.as_secs_f64()
        ),
        None => println!("  INCOMPLETE: not all machines were deleted"),
    }
    print_counters("deletion", &deletion_control, &deletion_target);

    println!("memory (VmRSS):");
    println!("  manager process (alone):");
    println!("    idle, no machines:               {}", mib(manager_idle));
    println!(
        "    peak while creating:             {}",
        mib(creation_peak.0)
    );
    println!(
        "    with {n} machines Running:       {}",
        mib(manager_running)
    );
    println!(
        "    peak while deleting:             {}",
        mib(deletion_peak.0)
    );
    println!(
        "    after deleting all:              {}",
        mib(manager_after)
    );
    println!("  benchmark process (sandboxes + provider-virtual, not the manager):");
    println!(
        "    no objects:                      {}",
        mib(rss_infrastructure)
    );
    println!("    with {n} machines Running:       {}", mib(rss_running));
    provider_stop.cancel();
    drop(control_sandbox);
    drop(target_sandbox);
    Ok(())
}
