//! `provider-virtual`: serves the virtual driver over gRPC and runs the virtual kubelet.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use mcm_api::duration::Duration;
use mcm_provider_proto::Endpoint;
use mcm_provider_virtual::driver::{Fleet, VirtualDriver};
use mcm_provider_virtual::kubelet::{Kubelet, KubeletConfig};
use mcm_provider_virtual::metrics::{Metered, Metrics};
use mcm_provider_virtual::node::HeartbeatConfig;
use tokio_util::sync::CancellationToken;

/// mimalloc rather than glibc's allocator, as the manager: the simulated kubelets allocate a
/// request and a response per heartbeat of every node (docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A machine driver whose VMs are simulated and whose Nodes join the target cluster.
#[derive(Debug, Parser)]
#[command(name = "provider-virtual", version)]
struct Args {
    /// Driver endpoint: unix:///path/to.sock or tcp://ip:port.
    #[arg(
        long,
        env = "PROVIDER_VIRTUAL_ENDPOINT",
        default_value = "unix:///run/mcm/driver.sock"
    )]
    endpoint: Endpoint,
    /// Kubeconfig of the target cluster where Nodes register; without it no Node is registered.
    #[arg(long, env = "PROVIDER_VIRTUAL_TARGET_KUBECONFIG")]
    target_kubeconfig: Option<PathBuf>,
    /// The VM state file (written atomically).
    #[arg(
        long,
        env = "PROVIDER_VIRTUAL_STATE_FILE",
        default_value = "/var/lib/provider-virtual/state.json"
    )]
    state_file: PathBuf,
    /// Address of /metrics, /healthz and /admin.
    #[arg(long, default_value = "0.0.0.0:10259")]
    metrics_address: SocketAddr,
    /// Log format.
    #[arg(long, value_parser = ["text", "json"], default_value = "text")]
    log_format: String,
    /// How often the virtual kubelet wakes up.
    #[arg(long, default_value = "1s")]
    kubelet_tick: Duration,
    /// Node Lease renewal interval.
    #[arg(long, default_value = "10s")]
    lease_interval: Duration,
    /// Longest interval between two node status posts when nothing changes.
    #[arg(long, default_value = "5m")]
    status_report_interval: Duration,
    /// Concurrent API requests of the virtual kubelet.
    #[arg(long, default_value_t = 32)]
    kubelet_concurrency: usize,
    /// Deadline of each API call of the virtual kubelet (a hung call is abandoned and retried at
    /// the next heartbeat).
    #[arg(long, default_value = "10s")]
    kubelet_request_timeout: Duration,
}

fn init_logging(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn shutdown_signal(token: CancellationToken) {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
    tracing::info!("shutting down");
    token.cancel();
}

async fn target_client(path: &PathBuf) -> anyhow::Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading target kubeconfig {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .with_context(|| format!("loading target kubeconfig {}", path.display()))?;
    mcm_provider_virtual::kubelet::target_client(config)
        .context("building the target cluster client")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    init_logging(&args.log_format);
    let to_std = |duration: Duration, flag: &str| {
        duration
            .to_std()
            .filter(|duration| !duration.is_zero())
            .with_context(|| format!("--{flag} must be positive"))
    };
    let kubelet_config = KubeletConfig {
        tick: to_std(args.kubelet_tick, "kubelet-tick")?,
        heartbeat: HeartbeatConfig {
            lease_interval: args.lease_interval.to_signed_duration(),
            status_report_interval: args.status_report_interval.to_signed_duration(),
            ..HeartbeatConfig::default()
        },
        concurrency: args.kubelet_concurrency,
        request_timeout: to_std(args.kubelet_request_timeout, "kubelet-request-timeout")?,
    };
    to_std(args.lease_interval, "lease-interval")?;
    to_std(args.status_report_interval, "status-report-interval")?;

    let fleet = Arc::new(Fleet::open(args.state_file.clone()).context("opening the VM state")?);
    let metrics = Arc::new(Metrics::new());
    let shutdown = CancellationToken::new();
    tokio::spawn(shutdown_signal(shutdown.clone()));

    let mut tasks = tokio::task::JoinSet::new();
    match &args.target_kubeconfig {
        Some(path) => {
            let client = target_client(path).await?;
            let kubelet = Kubelet::new(client, fleet.clone(), kubelet_config, metrics.clone());
            let token = shutdown.clone();
            tasks.spawn(async move {
                kubelet.run(token).await;
                Ok(())
            });
        }
        None => tracing::warn!("no --target-kubeconfig: VMs run without Nodes"),
    }

    let listener = tokio::net::TcpListener::bind(args.metrics_address)
        .await
        .with_context(|| format!("binding the metrics address {}", args.metrics_address))?;
    tracing::info!(address = %args.metrics_address, "serving /metrics, /healthz and /admin");
    let router = mcm_provider_virtual::admin::router(fleet.clone(), metrics.clone());
    let token = shutdown.clone();
    tasks.spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(token.cancelled_owned())
            .await
            .context("metrics endpoint failed")
    });

    let vm_fleet = fleet.clone();
    let driver = Metered::new(VirtualDriver::new(fleet), metrics, move || vm_fleet.len());
    let served =
        mcm_provider_proto::serve(driver, &args.endpoint, shutdown.clone().cancelled_owned()).await;
    shutdown.cancel();
    while let Some(result) = tasks.join_next().await {
        result.context("task panicked")??;
    }
    served.context("driver endpoint failed")
}
