//! `mcm-sandbox`: runs the sandbox API server until Ctrl-C.

use anyhow::Context;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// mimalloc rather than glibc's allocator: a quarter of the sandbox's CPU in a 1,000-machine
/// scale-up went to glibc's malloc and free (docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "mcm-sandbox",
    about = "An embedded Kubernetes-compatible API server for local runs and tests"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve until Ctrl-C.
    Serve {
        /// Port on 127.0.0.1 (0 = pick a free one).
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// Where to write the kubeconfig.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Serve plain HTTP instead of HTTPS.
        #[arg(long)]
        insecure_http: bool,
        /// Cluster/context name.
        #[arg(long, default_value = "mcm-sandbox")]
        name: String,
        /// Events kept per resource type for watch replay.
        #[arg(long, default_value_t = 10_000)]
        watch_history: usize,
        /// Bound of the watch history per resource type in bytes (estimated JSON size).
        #[arg(long, default_value_t = mcm_sandbox::store::DEFAULT_HISTORY_BYTES)]
        watch_history_bytes: usize,
        /// Require authentication and enforce RBAC, as kube-apiserver does
        /// (`--authorization=false` lets every request in as the admin).
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
        authorization: bool,
        /// kube-apiserver's static token file: `token,user,uid[,"group1,group2"]` per line.
        #[arg(long)]
        token_auth_file: Option<PathBuf>,
        /// Where a Service of webhook or conversion configurations is served:
        /// `namespace/name=127.0.0.1:port` (repeatable).
        #[arg(long = "service", value_parser = parse_service)]
        services: Vec<((String, String), std::net::SocketAddr)>,
        /// kube-controller-manager's `--node-monitor-grace-period`: a Node whose Lease and status
        /// were not renewed for this long is marked `Ready=Unknown` and tainted unreachable
        /// (`40s`, `2m`; `0s` turns the node monitor off).
        #[arg(long, default_value = "40s", value_parser = parse_duration)]
        node_monitor_grace_period: std::time::Duration,
        /// kube-controller-manager's `--node-startup-grace-period`: the same for a Node that never
        /// posted a `Ready` condition.
        #[arg(long, default_value = "60s", value_parser = parse_duration)]
        node_startup_grace_period: std::time::Duration,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Serve {
            port,
            kubeconfig,
            insecure_http,
            name,
            watch_history,
            watch_history_bytes,
            authorization,
            token_auth_file,
            services,
            node_monitor_grace_period,
            node_startup_grace_period,
        } => {
            let node_monitor = (!node_monitor_grace_period.is_zero()).then(|| {
                mcm_sandbox::node_lifecycle::NodeMonitorConfig {
                    startup_grace_period: node_startup_grace_period,
                    ..mcm_sandbox::node_lifecycle::NodeMonitorConfig::with_grace_period(
                        node_monitor_grace_period,
                    )
                }
            });
            let config = mcm_sandbox::SandboxConfig {
                port,
                tls: !insecure_http,
                kubeconfig_path: kubeconfig,
                name,
                watch_history,
                watch_history_bytes,
                authorization,
                service_addresses: services.into_iter().collect(),
                node_monitor,
                ..Default::default()
            };
            let sb = mcm_sandbox::Sandbox::start(config)
                .await
                .context("starting the sandbox")?;
            if let Some(path) = token_auth_file {
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let n = sb
                    .authenticator()
                    .add_token_file(&text)
                    .with_context(|| format!("parsing {}", path.display()))?;
                tracing::info!(tokens = n, file = %path.display(), "static tokens loaded");
            }
            println!("URL: {}", sb.url());
            println!("KUBECONFIG: {}", sb.kubeconfig_path().display());
            tokio::signal::ctrl_c()
                .await
                .context("waiting for Ctrl-C")?;
            sb.shutdown().await;
        }
    }
    Ok(())
}

/// Parses `namespace/name=host:port`.
fn parse_service(s: &str) -> Result<((String, String), std::net::SocketAddr), String> {
    let (svc, addr) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: want namespace/name=127.0.0.1:port"))?;
    let (ns, name) = svc
        .split_once('/')
        .ok_or_else(|| format!("{svc:?}: want namespace/name"))?;
    let addr = addr
        .parse()
        .map_err(|e| format!("{addr:?}: not an address: {e}"))?;
    Ok(((ns.to_string(), name.to_string()), addr))
}

/// Parses `40s`, `2m`, `1m30s` (or ISO 8601 `PT40S`).
fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let d: jiff::SignedDuration = s
        .parse()
        .map_err(|e| format!("{s:?}: not a duration (e.g. 40s, 2m): {e}"))?;
    std::time::Duration::try_from(d).map_err(|_| format!("{s:?}: must not be negative"))
}
