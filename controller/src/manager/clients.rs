//! API clients for the control cluster (Machine objects) and the target cluster (Nodes, Pods).
//!
//! Kubeconfig handling follows upstream (docs/behaviour.md#machine-process step 1): `inClusterConfig` selects the pod's
//! service account, an empty `--control-kubeconfig` means the same as the target's (resolved by
//! [`crate::platform::config::validate`]), and `--target-kubeconfig=none` means no target client. An empty
//! value uses `kube::Config::infer` (`KUBECONFIG`, `~/.kube/config`, then in-cluster), where
//! client-go tries in-cluster first: the same result inside a pod, more useful outside one.
//!
//! `--kube-api-qps`/`--kube-api-burst` feed a client-side token bucket per cluster
//! ([`super::throttle`]), as client-go's rate limiter does. Upstream's one-minute client timeout
//! is not set: kube's defaults (connect 30 s, read 295 s) fit its long-running watches, which a
//! one-minute read timeout would cut.
//!
//! **HTTP/2.** Like client-go, the clients offer `h2` (and `http/1.1`) in TLS ALPN, so one
//! connection per API server carries every request and watch. kube-rs's own builder speaks
//! HTTP/1.1 only, where each concurrent request holds a connection of its own: with 50 workers the
//! manager kept about 120 connections per cluster open, their buffers a quarter of its memory.
//! `DISABLE_HTTP2` (any non-empty value, client-go's switch) and kubeconfigs with a
//! proxy or an exec credential plugin use kube's HTTP/1.1 builder, which handles those.

use std::path::PathBuf;
use std::time::Duration;

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio_util::sync::CancellationToken;

use super::gate::WriteGate;
use super::throttle::Throttle;
use crate::platform::config::{ClientSettings, KubeconfigSource};

/// API version whose `machines` resource must be served by the control cluster.
pub const MACHINE_API_VERSION: &str = "machine.sapcloud.io/v1alpha1";

/// Which cluster a client talks to (used in error messages and logs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cluster {
    /// The cluster holding the Machine objects.
    Control,
    /// The cluster the machines join as Nodes.
    Target,
}

impl std::fmt::Display for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Cluster::Control => "control",
            Cluster::Target => "target",
        })
    }
}

/// Building a client or reaching an API server failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig file could not be read or parsed.
    #[error("cannot read the {cluster} kubeconfig {}: {source}", path.display())]
    ReadKubeconfig {
        /// Which cluster.
        cluster: Cluster,
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The kubeconfig was read but does not describe a usable cluster.
    #[error("cannot use the {cluster} kubeconfig {}: {source}", path.display())]
    LoadKubeconfig {
        /// Which cluster.
        cluster: Cluster,
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// `inClusterConfig` outside a pod, or without a service account token.
    #[error("cannot use in-cluster credentials for the {cluster} cluster: {source}")]
    InCluster {
        /// Which cluster.
        cluster: Cluster,
        /// Cause.
        #[source]
        source: kube::config::InClusterError,
    },
    /// `inClusterConfig` with [`SERVICE_ACCOUNT_DIR_ENV`] set, but the environment or the
    /// directory does not describe a usable cluster.
    #[error(
        "cannot use in-cluster credentials from {} ({SERVICE_ACCOUNT_DIR_ENV}) for the {cluster} cluster: {message}",
        dir.display()
    )]
    ServiceAccountDir {
        /// Which cluster.
        cluster: Cluster,
        /// The directory.
        dir: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// No kubeconfig flag and nothing to infer from.
    #[error(
        "cannot find credentials for the {cluster} cluster (no kubeconfig flag, KUBECONFIG, ~/.kube/config or in-cluster service account): {source}"
    )]
    Infer {
        /// Which cluster.
        cluster: Cluster,
        /// Cause.
        #[source]
        source: kube::config::InferConfigError,
    },
    /// The HTTP client could not be built (TLS material, proxy settings).
    #[error("cannot build the {cluster} API client: {source}")]
    Build {
        /// Which cluster.
        cluster: Cluster,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// The API server did not answer within the wait.
    #[error("the {cluster} API server did not answer within {waited:?}: {source}")]
    Unreachable {
        /// Which cluster.
        cluster: Cluster,
        /// How long we tried.
        waited: Duration,
        /// The last error.
        #[source]
        source: kube::Error,
    },
    /// The control cluster does not serve `machine.sapcloud.io/v1alpha1` machines.
    #[error(
        "the control cluster does not serve {MACHINE_API_VERSION} machines ({detail}); install the machine.sapcloud.io CRDs"
    )]
    MachinesNotServed {
        /// What was found instead.
        detail: String,
    },
    /// Shutdown was requested while waiting for the API server.
    #[error("shutdown requested while waiting for the {cluster} API server")]
    Cancelled {
        /// Which cluster.
        cluster: Cluster,
    },
}

/// The clients of one manager process.
#[derive(Clone)]
pub struct Clients {
    /// Control cluster client of the Machine-side controllers (upstream's `machine-controller`).
    pub control: Client,
    /// Target cluster client of the Machine-side controllers; `None` with
    /// `--target-kubeconfig=none`.
    pub target: Option<Client>,
    /// The clients of the MachineSet, MachineDeployment and overshooting controllers (upstream's
    /// separate `machine-controller-manager` process), with throttle buckets of their own.
    pub controller_manager: ShareClients,
    /// Control cluster client for leader election only, with its own throttle bucket (upstream
    /// also gives leader election its own client): lease renewals must never queue behind a
    /// burst of controller requests, or a busy leader loses its lease.
    pub leader_election: Client,
}

/// Environment variable naming a directory that replaces the pod's service-account directory
/// (`/var/run/secrets/kubernetes.io/serviceaccount`) for `inClusterConfig`: it holds `token`,
/// `ca.crt` and optionally `namespace`; the API server is still `KUBERNETES_SERVICE_HOST` and
/// `KUBERNETES_SERVICE_PORT`. client-go has no such override; ours lets a test or a non-pod
/// process run Gardener's unchanged `--control-kubeconfig=inClusterConfig` (the e2e scenario
/// `gardener` does). Unset or empty: the standard directory.
pub const SERVICE_ACCOUNT_DIR_ENV: &str = "MCM_SERVICE_ACCOUNT_DIR";

fn service_account_dir() -> Option<PathBuf> {
    std::env::var_os(SERVICE_ACCOUNT_DIR_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The in-cluster configuration with the credentials of `dir` (see [`SERVICE_ACCOUNT_DIR_ENV`])
/// and the API server `service` (`KUBERNETES_SERVICE_HOST`, `KUBERNETES_SERVICE_PORT`). Built as
/// a kubeconfig with `tokenFile`, so a rotated token is re-read as in a pod.
async fn in_cluster_from(
    dir: &std::path::Path,
    service: (Option<String>, Option<String>),
    cluster: Cluster,
) -> Result<kube::Config, ClientError> {
    use kube::config::{AuthInfo, Context, NamedAuthInfo, NamedCluster, NamedContext};
    let fail = |message: String| ClientError::ServiceAccountDir {
        cluster,
        dir: dir.to_path_buf(),
        message,
    };
    let (host, port) = service;
    let host = host.ok_or_else(|| fail("KUBERNETES_SERVICE_HOST is not set".to_owned()))?;
    let port: u16 = port
        .ok_or_else(|| fail("KUBERNETES_SERVICE_PORT is not set".to_owned()))?
        .parse()
        .map_err(|e| fail(format!("KUBERNETES_SERVICE_PORT: {e}")))?;
    // As client-go: an IPv6 host goes in brackets.
    let server = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => format!("https://{}", std::net::SocketAddr::new(ip, port)),
        Err(_) => format!("https://{host}:{port}"),
    };
    let token = dir.join("token");
    let ca = dir.join("ca.crt");
    for file in [&token, &ca] {
        if !file.is_file() {
            return Err(fail(format!("{} does not exist", file.display())));
        }
    }
    // The namespace file is optional: our clients always name the namespace (`--namespace`).
    let namespace = std::fs::read_to_string(dir.join("namespace"))
        .ok()
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty());
    const NAME: &str = "in-cluster";
    let kubeconfig = Kubeconfig {
        clusters: vec![NamedCluster {
            name: NAME.to_owned(),
            cluster: Some(kube::config::Cluster {
                server: Some(server),
                certificate_authority: Some(ca.display().to_string()),
                ..Default::default()
            }),
            other: Default::default(),
        }],
        auth_infos: vec![NamedAuthInfo {
            name: NAME.to_owned(),
            auth_info: Some(AuthInfo {
                token_file: Some(token.display().to_string()),
                ..Default::default()
            }),
            other: Default::default(),
        }],
        contexts: vec![NamedContext {
            name: NAME.to_owned(),
            context: Some(Context {
                cluster: NAME.to_owned(),
                user: Some(NAME.to_owned()),
                namespace,
                ..Default::default()
            }),
            other: Default::default(),
        }],
        current_context: Some(NAME.to_owned()),
        ..Default::default()
    };
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| fail(e.to_string()))
}

/// The kube client configuration for `source`.
pub async fn kube_config(
    source: &KubeconfigSource,
    cluster: Cluster,
) -> Result<kube::Config, ClientError> {
    match source {
        KubeconfigSource::Default => kube::Config::infer()
            .await
            .map_err(|source| ClientError::Infer { cluster, source }),
        KubeconfigSource::InCluster => match service_account_dir() {
            Some(dir) => {
                let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
                let service = (
                    env("KUBERNETES_SERVICE_HOST"),
                    env("KUBERNETES_SERVICE_PORT"),
                );
                in_cluster_from(&dir, service, cluster).await
            }
            None => kube::Config::incluster()
                .map_err(|source| ClientError::InCluster { cluster, source }),
        },
        KubeconfigSource::File(path) => {
            let kubeconfig =
                Kubeconfig::read_from(path).map_err(|source| ClientError::ReadKubeconfig {
                    cluster,
                    path: path.clone(),
                    source,
                })?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|source| ClientError::LoadKubeconfig {
                    cluster,
                    path: path.clone(),
                    source,
                })
        }
    }
}

/// The User-Agent of the manager's API requests (client-go's form, see [`mcm_api::user_agent`]).
pub fn user_agent() -> String {
    mcm_api::user_agent::user_agent(crate::platform::COMPONENT, env!("CARGO_PKG_VERSION"))
}

async fn client(
    source: &KubeconfigSource,
    cluster: Cluster,
    throttle: &Throttle,
    gate: Option<&WriteGate>,
) -> Result<Client, ClientError> {
    let mut config = kube_config(source, cluster).await?;
    // kube retries 429/503/504 inside the client for up to minutes. The reconcilers requeue with
    // their own backoff, a PodDisruptionBudget's 429 on an eviction is an answer to act on, and
    // the API-server safety check must see an unavailable server at once.
    config.default_retry = false;
    // kube sends no User-Agent of its own; name ourselves as client-go components do.
    if let Ok(agent) = axum::http::HeaderValue::from_str(&user_agent()) {
        config.headers.push((axum::http::header::USER_AGENT, agent));
    }
    let gate = gate.cloned().unwrap_or_else(|| WriteGate::new(true));
    let http1_only = std::env::var_os("DISABLE_HTTP2").is_some_and(|value| !value.is_empty());
    if http1_only || config.proxy_url.is_some() || config.auth_info.exec.is_some() {
        let builder = kube::client::ClientBuilder::try_from(config)
            .map_err(|source| ClientError::Build { cluster, source })?;
        return Ok(builder.with_layer(&gate).with_layer(throttle).build());
    }
    http2_client(config, throttle, &gate).map_err(|source| ClientError::Build { cluster, source })
}

/// A client whose connector negotiates HTTP/2 by ALPN (HTTP/1.1 when the server offers only
/// that), with kube's layers: base URI, authentication (token refresh included), extra headers
/// (impersonation) and the connect/read/write timeouts.
fn http2_client(
    config: kube::Config,
    throttle: &Throttle,
    gate: &WriteGate,
) -> Result<Client, kube::Error> {
    use kube::client::ConfigExt as _;

    let tls = config.rustls_client_config()?;
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let builder = match &config.tls_server_name {
        Some(name) => {
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(
                rustls_pki_types::ServerName::try_from(name.clone()).map_err(|error| {
                    kube::Error::Service(
                        format!("invalid tls-server-name {name:?} in the kubeconfig: {error}")
                            .into(),
                    )
                })?,
            ))
        }
        None => builder,
    };
    let https = builder.enable_all_versions().wrap_connector(http);
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http_client: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            // A dead connection must not hold every request and watch: ping it.
            .http2_keep_alive_interval(Duration::from_secs(30))
            .http2_keep_alive_timeout(Duration::from_secs(15))
            .timer(hyper_util::rt::TokioTimer::new())
            .build(connector);
    let service = tower::ServiceBuilder::new()
        .layer(throttle.clone())
        .layer(gate.clone())
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(http_client);
    Ok(Client::new(service, config.default_namespace))
}

/// The control and target clients of one upstream binary's share of the controllers.
#[derive(Clone)]
pub struct ShareClients {
    /// Control cluster client.
    pub control: Client,
    /// Target cluster client; `None` with `--target-kubeconfig=none`.
    pub target: Option<Client>,
}

/// Builds the control client and, unless disabled, the target client. When both use the same
/// credentials, one client (and its connection pool) serves both.
///
/// Each cluster gets its own `--kube-api-qps`/`--kube-api-burst` bucket (client-go keeps one per
/// rest config); a shared client shares its bucket. The controllers' clients carry `gate`
/// ([`WriteGate`]): their writes fail while it is closed. The leader-election client has none.
///
/// Upstream runs the controllers as two processes, `machine-controller-manager` (MachineSet,
/// MachineDeployment, overshooting safety) and the provider's `machine-controller` (the rest),
/// each with these buckets. Each share here has its own too, so the two together may send what
/// the Go pair sends with the same flags, no more: in one shared bucket the Machine controller's
/// four writes per new machine queued behind the MachineSet's creations, and a large scale-up
/// took the time of one process's budget for both (docs/performance.md).
pub async fn build(
    control: &KubeconfigSource,
    target: Option<&KubeconfigSource>,
    settings: &ClientSettings,
    gate: &WriteGate,
) -> Result<Clients, ClientError> {
    let machine_controller = share_clients(control, target, settings, gate).await?;
    let controller_manager = share_clients(control, target, settings, gate).await?;
    let leader_election = client(
        control,
        Cluster::Control,
        &Throttle::new(settings.qps, settings.burst),
        None,
    )
    .await?;
    Ok(Clients {
        control: machine_controller.control,
        target: machine_controller.target,
        controller_manager,
        leader_election,
    })
}

async fn share_clients(
    control: &KubeconfigSource,
    target: Option<&KubeconfigSource>,
    settings: &ClientSettings,
    gate: &WriteGate,
) -> Result<ShareClients, ClientError> {
    let control_client = client(
        control,
        Cluster::Control,
        &Throttle::new(settings.qps, settings.burst),
        Some(gate),
    )
    .await?;
    let target_client = match target {
        None => None,
        Some(source) if source == control => Some(control_client.clone()),
        Some(source) => Some(
            client(
                source,
                Cluster::Target,
                &Throttle::new(settings.qps, settings.burst),
                Some(gate),
            )
            .await?,
        ),
    };
    Ok(ShareClients {
        control: control_client,
        target: target_client,
    })
}

/// Longest pause between two attempts to reach the control API server at start-up: once it is
/// back, the manager notices within this.
pub const API_RETRY_CAP: Duration = Duration::from_secs(1);

/// Waits until the control API server answers and serves `machine.sapcloud.io/v1alpha1`
/// machines (docs/behaviour.md#machine-process step 4).
///
/// Upstream polls for ten seconds and exits, so after an outage its restarts back off (a
/// kubelet's CrashLoopBackOff reaches minutes) and the pool stays unmanaged long after the API
/// server is back. Here an unreachable server is waited for as long as it takes: attempts start
/// `poll` apart and double up to [`API_RETRY_CAP`], each failure logged with the time waited so
/// far (the caller reports not-ready meanwhile). Only a server that answers and does not serve
/// the machines fails: at once when the group lacks `machines`, after `wait` of 404s (the CRDs may
/// be being installed).
pub async fn wait_for_control_api(
    client: &Client,
    wait: Duration,
    poll: Duration,
    cancel: &CancellationToken,
) -> Result<(), ClientError> {
    let started = tokio::time::Instant::now();
    let floor = Duration::from_millis(50);
    let mut pause = poll.clamp(floor, API_RETRY_CAP);
    let mut attempts: u64 = 0;
    loop {
        attempts += 1;
        let error = match client.list_api_group_resources(MACHINE_API_VERSION).await {
            Ok(list) => {
                return if list.resources.iter().any(|r| r.name == "machines") {
                    if attempts > 1 {
                        tracing::info!(
                            waited = ?started.elapsed(),
                            attempts,
                            "the control API server is reachable"
                        );
                    }
                    Ok(())
                } else {
                    let served: Vec<&str> =
                        list.resources.iter().map(|r| r.name.as_str()).collect();
                    Err(ClientError::MachinesNotServed {
                        detail: format!("the group serves only [{}]", served.join(", ")),
                    })
                };
            }
            Err(error) => error,
        };
        // A group nobody serves gets kube-apiserver's plain-text "404 page not found", which
        // kube-rs reports with code 404 but without the NotFound reason.
        let not_served = matches!(&error, kube::Error::Api(status) if status.code == 404);
        if not_served && started.elapsed() + pause > wait {
            return Err(ClientError::MachinesNotServed {
                detail: format!("GET /apis/{MACHINE_API_VERSION} answered 404"),
            });
        }
        tracing::info!(
            %error,
            waited = ?started.elapsed(),
            attempts,
            retry_in = ?pause,
            "waiting for the control API server to serve {MACHINE_API_VERSION}"
        );
        tokio::select! {
            () = cancel.cancelled() => return Err(ClientError::Cancelled { cluster: Cluster::Control }),
            () = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).clamp(floor, API_RETRY_CAP);
    }
}

/// Reads the target API server's version (logged at start, as upstream does to pick PDB support).
pub async fn target_version(client: &Client) -> Result<String, ClientError> {
    client
        .apiserver_version()
        .await
        .map(|info| info.git_version)
        .map_err(|source| ClientError::Unreachable {
            cluster: Cluster::Target,
            waited: Duration::ZERO,
            source,
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod service_account_dir_tests {
    use super::*;

    fn service(host: &str, port: &str) -> (Option<String>, Option<String>) {
        (Some(host.to_owned()), Some(port.to_owned()))
    }

    #[tokio::test]
    async fn a_service_account_dir_stands_in_for_the_pods() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "t0ken").unwrap();
        std::fs::write(dir.path().join("namespace"), "shoot--p--s\n").unwrap();
        // Only the PEM framing is read here; TLS would check the certificate itself.
        std::fs::write(
            dir.path().join("ca.crt"),
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();

        let config = in_cluster_from(dir.path(), service("127.0.0.1", "6443"), Cluster::Control)
            .await
            .expect("a complete directory");
        assert_eq!(config.cluster_url.to_string(), "https://127.0.0.1:6443/");
        assert_eq!(config.default_namespace, "shoot--p--s");
        assert_eq!(
            config.auth_info.token_file.as_deref(),
            Some(dir.path().join("token").display().to_string().as_str())
        );
        assert!(config.root_cert.is_some_and(|c| c.len() == 1));

        let v6 = in_cluster_from(dir.path(), service("fd00::1", "443"), Cluster::Control)
            .await
            .unwrap();
        assert_eq!(v6.cluster_url.to_string(), "https://[fd00::1]:443/");

        let missing_env = in_cluster_from(dir.path(), (None, None), Cluster::Control).await;
        assert!(
            matches!(&missing_env, Err(ClientError::ServiceAccountDir { message, .. }) if message.contains("KUBERNETES_SERVICE_HOST")),
            "{missing_env:?}"
        );
        std::fs::remove_file(dir.path().join("token")).unwrap();
        let no_token =
            in_cluster_from(dir.path(), service("127.0.0.1", "6443"), Cluster::Target).await;
        assert!(
            matches!(&no_token, Err(ClientError::ServiceAccountDir { message, .. }) if message.contains("token")),
            "{no_token:?}"
        );
    }
}
