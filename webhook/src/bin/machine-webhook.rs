//! `machine-webhook`: serves admission (`/validate-*`, `/mutate-*`) and conversion (`/convert`)
//! over HTTPS, and `/healthz`, `/readyz`, `/metrics` on a plain-HTTP admin port.
//!
//! Certificates come from files (a mounted Secret, e.g. issued by cert-manager; polled and
//! hot-reloaded) or are managed by the webhook itself (`--cert-mode self-managed`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, ValueEnum};
use mcm_webhook::limits::ConnectionLimits;
use mcm_webhook::preview::Preview;
use mcm_webhook::self_managed::{Policy, Settings};
use mcm_webhook::server::{self, AppState};
use mcm_webhook::tls::{CertStore, FileReloader, server_config};
use tokio::net::TcpListener;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum CertMode {
    /// Certificate and key files (mounted Secret, e.g. from cert-manager), hot-reloaded.
    File,
    /// Own CA in a Secret, rotated by the Lease holder, caBundle injected.
    SelfManaged,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Admission and conversion webhook of the machine-controller-manager"
)]
struct Args {
    /// Address of the HTTPS webhook listener.
    #[arg(long, default_value = "0.0.0.0:9443")]
    bind_address: SocketAddr,
    /// Address of the plain-HTTP admin listener (/healthz, /readyz, /metrics).
    #[arg(long, default_value = "0.0.0.0:10260")]
    admin_address: SocketAddr,
    /// Where the serving certificate comes from.
    #[arg(long, value_enum, default_value = "file")]
    cert_mode: CertMode,
    /// PEM certificate chain (file mode).
    #[arg(long, default_value = "/tmp/k8s-webhook-server/serving-certs/tls.crt")]
    tls_cert_file: PathBuf,
    /// PEM private key (file mode).
    #[arg(long, default_value = "/tmp/k8s-webhook-server/serving-certs/tls.key")]
    tls_private_key_file: PathBuf,
    /// How often the certificate files (file mode) or the Secret (self-managed) are checked, in seconds.
    #[arg(long, default_value_t = 30)]
    cert_reload_seconds: u64,
    /// Namespace of the webhook (self-managed: Secret and Lease live here).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    namespace: String,
    /// Name of the webhook Service (self-managed: DNS names of the certificate).
    #[arg(long, default_value = "machine-controller-manager-webhook")]
    service_name: String,
    /// More names or IP addresses of the self-managed serving certificate, for API servers that
    /// call the webhook by `url` instead of through its Service (e.g. `127.0.0.1` for a
    /// kube-apiserver on the same host; repeatable).
    #[arg(long = "certificate-host")]
    certificate_hosts: Vec<String>,
    /// Secret holding the self-managed CA and serving certificate.
    #[arg(long, default_value = "machine-webhook-certs")]
    secret_name: String,
    /// Lease whose holder writes certificates and caBundles.
    #[arg(long, default_value = "machine-webhook-certs")]
    lease_name: String,
    /// Identity in the Lease.
    #[arg(long, env = "POD_NAME", default_value = "machine-webhook")]
    identity: String,
    /// MutatingWebhookConfiguration that gets the caBundle (self-managed).
    #[arg(long)]
    mutating_webhook_configuration: Option<String>,
    /// ValidatingWebhookConfiguration that gets the caBundle (self-managed).
    #[arg(long)]
    validating_webhook_configuration: Option<String>,
    /// CRDs whose conversion webhook gets the caBundle (self-managed; repeatable).
    #[arg(long = "crd")]
    crds: Vec<String>,
    /// Seconds a client has to complete the TLS handshake after connecting.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    tls_handshake_timeout_seconds: u64,
    /// Seconds a client has to send a request's complete headers, counted from its first byte.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    header_read_timeout_seconds: u64,
    /// Seconds a connection may stay without traffic before it is closed.
    #[arg(long, default_value_t = 90, value_parser = clap::value_parser!(u64).range(1..))]
    idle_timeout_seconds: u64,
    /// Most open connections of the webhook listener; when reached, a new connection takes the
    /// place of one stuck in a step for longer than --eviction-grace-millis (preferably of the
    /// client address holding the most), or of any connection not serving a request of an
    /// address holding more than the newcomer's; it is refused only if there is none.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    max_connections: u64,
    /// Most open connections from one client IP address; a new one from an address holding
    /// this many takes the place of one of the address's own connections that neither serves a
    /// request nor has delivered a review (stuck ones first, then the one longest in its step),
    /// and is refused only if there is none. An API server holds one connection per webhook call
    /// in flight (HTTP/1.1).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..))]
    max_connections_per_peer: u64,
    /// Milliseconds a connection may take for one step (sending its ClientHello, finishing the
    /// TLS handshake, starting a request, completing a request head) before it counts as stuck
    /// and is the first to be given up for a new connection when a connection limit is reached.
    #[arg(long, default_value_t = 1000)]
    eviction_grace_millis: u64,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Milliseconds the rollout preview of a MachineDeployment or MachineClass update may spend
    /// reading machines (keep it below the webhooks' timeoutSeconds); 0 turns the reads off
    /// (the preview then estimates from spec.replicas and says so).
    #[arg(long, default_value_t = 3000)]
    preview_deadline_millis: u64,
}

/// A Kubernetes client named as this component in the API server's audit log.
async fn client() -> anyhow::Result<kube::Client> {
    let mut config = kube::Config::infer()
        .await
        .context("cannot find Kubernetes credentials")?;
    // Name ourselves in the API server's audit log, as client-go components do.
    let agent = mcm_api::user_agent::user_agent("machine-webhook", env!("CARGO_PKG_VERSION"));
    if let Ok(agent) = axum::http::HeaderValue::from_str(&agent) {
        config.headers.push((axum::http::header::USER_AGENT, agent));
    }
    kube::Client::try_from(config).context("cannot build a Kubernetes client")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // ring is the only provider compiled in; installing it explicitly keeps it that way even if
    // a dependency ever pulls in a second one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    match args.log_format {
        LogFormat::Text => tracing_subscriber::fmt().with_env_filter(filter).init(),
        LogFormat::Json => tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init(),
    }

    let certs = Arc::new(CertStore::default());
    let state = AppState::with_preview(
        certs.clone(),
        Preview::new(Duration::from_millis(args.preview_deadline_millis)),
    );
    let period = Duration::from_secs(args.cert_reload_seconds.max(1));
    match args.cert_mode {
        CertMode::File => {
            let mut reloader = FileReloader::new(&args.tls_cert_file, &args.tls_private_key_file);
            // Load once before serving so the first handshake already has a certificate;
            // a missing file is fine (not ready until it appears).
            let first = reloader.reload(&certs);
            tracing::info!(outcome = ?first, cert = %args.tls_cert_file.display(), "initial certificate load");
            tokio::spawn(reloader.run(certs.clone(), period));
            // The preview reads with a client when credentials are around; without one it
            // estimates and says so.
            if args.preview_deadline_millis > 0 {
                match client().await {
                    Ok(client) => state.preview.set_client(client),
                    Err(error) => {
                        tracing::warn!(%error, "rollout preview without an API client");
                    }
                }
            }
        }
        CertMode::SelfManaged => {
            let client = client().await?;
            state.preview.set_client(client.clone());
            let svc = &args.service_name;
            let ns = &args.namespace;
            let settings = Settings {
                namespace: ns.clone(),
                secret_name: args.secret_name.clone(),
                lease_name: args.lease_name.clone(),
                identity: args.identity.clone(),
                dns_names: [
                    svc.clone(),
                    format!("{svc}.{ns}"),
                    format!("{svc}.{ns}.svc"),
                    format!("{svc}.{ns}.svc.cluster.local"),
                ]
                .into_iter()
                .chain(args.certificate_hosts.iter().cloned())
                .collect(),
                mutating_configuration: args.mutating_webhook_configuration.clone(),
                validating_configuration: args.validating_webhook_configuration.clone(),
                crds: args.crds.clone(),
                period,
                policy: Policy::default(),
            };
            let store = certs.clone();
            tokio::spawn(async move {
                if let Err(error) = mcm_webhook::self_managed::run(client, settings, store).await {
                    tracing::error!(%error, "self-managed certificates stopped");
                }
            });
        }
    }

    let listener = TcpListener::bind(args.bind_address)
        .await
        .with_context(|| format!("cannot listen on {}", args.bind_address))?;
    let admin = TcpListener::bind(args.admin_address)
        .await
        .with_context(|| format!("cannot listen on {}", args.admin_address))?;
    tracing::info!(webhook = %args.bind_address, admin = %args.admin_address, "serving");
    let limits = ConnectionLimits {
        tls_handshake_timeout: Duration::from_secs(args.tls_handshake_timeout_seconds),
        header_read_timeout: Duration::from_secs(args.header_read_timeout_seconds),
        idle_timeout: Duration::from_secs(args.idle_timeout_seconds),
        max_connections: usize::try_from(args.max_connections).unwrap_or(usize::MAX),
        max_connections_per_peer: usize::try_from(args.max_connections_per_peer)
            .unwrap_or(usize::MAX),
        eviction_grace: Duration::from_millis(args.eviction_grace_millis),
    };
    tracing::info!(?limits, "connection limits");
    let webhook = server::serve_tls_with_limits(
        listener,
        server::router(state.clone()),
        server_config(certs),
        limits,
        state.metrics.connections.clone(),
    );
    let admin = server::serve_plain(admin, server::admin_router(state));
    tokio::select! {
        () = webhook => {}
        result = admin => result.context("admin server failed")?,
        _ = tokio::signal::ctrl_c() => tracing::info!("shutting down"),
    }
    Ok(())
}
