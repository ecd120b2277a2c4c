//! API clients for the control cluster (Machine objects) and the target cluster (Nodes, Pods).
//!
//! Kubeconfig handling follows upstream (reference §3.1 step 1): `inClusterConfig` selects the pod's
//! service account, an empty `--control-kubeconfig` means the same as the target's (resolved by
//! [`super::config::validate`]), and `--target-kubeconfig=none` means no target client. An empty
//! value uses `kube::Config::infer` (`KUBECONFIG`, `~/.kube/config`, then in-cluster), where
//! client-go tries in-cluster first: the same result inside a pod, more useful outside one.
//!
//! `--kube-api-qps`/`--kube-api-burst` are **not applied**: kube-rs has no client-side rate
//! limiter, and the API server's priority and fairness already protects it. Upstream's low default
//! (20 QPS) is a known source of slow drains and scale-ups, so not throttling on the client is
//! deliberate; the flags stay accepted and validated for drop-in compatibility. Likewise
//! upstream's one-minute client timeout is not set: kube's defaults (connect 30 s, read 295 s)
//! fit its long-running watches, which a one-minute read timeout would cut.

use std::path::PathBuf;
use std::time::Duration;

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio_util::sync::CancellationToken;

use super::config::{ClientSettings, KubeconfigSource};
use super::throttle::Throttle;

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
    /// Control cluster client.
    pub control: Client,
    /// Target cluster client; `None` with `--target-kubeconfig=none`.
    pub target: Option<Client>,
    /// Control cluster client for leader election only, with its own throttle bucket (upstream
    /// also gives leader election its own client): lease renewals must never queue behind a
    /// burst of controller requests, or a busy leader loses its lease.
    pub leader_election: Client,
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
        KubeconfigSource::InCluster => {
            kube::Config::incluster().map_err(|source| ClientError::InCluster { cluster, source })
        }
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

async fn client(
    source: &KubeconfigSource,
    cluster: Cluster,
    throttle: &Throttle,
) -> Result<Client, ClientError> {
    let mut config = kube_config(source, cluster).await?;
    // kube retries 429/503/504 inside the client for up to minutes. The reconcilers requeue with
    // their own backoff, a PodDisruptionBudget's 429 on an eviction is an answer to act on, and
    // the API-server safety check must see an unavailable server at once.
    config.default_retry = false;
    let builder = kube::client::ClientBuilder::try_from(config)
        .map_err(|source| ClientError::Build { cluster, source })?;
    Ok(builder.with_layer(throttle).build())
}

/// Builds the control client and, unless disabled, the target client. When both use the same
/// credentials, one client (and its connection pool) serves both.
///
/// Each cluster gets its own `--kube-api-qps`/`--kube-api-burst` bucket (client-go keeps one per
/// rest config); a shared client shares its bucket.
pub async fn build(
    control: &KubeconfigSource,
    target: Option<&KubeconfigSource>,
    settings: &ClientSettings,
) -> Result<Clients, ClientError> {
    let control_client = client(
        control,
        Cluster::Control,
        &Throttle::new(settings.qps, settings.burst),
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
            )
            .await?,
        ),
    };
    let leader_election = client(
        control,
        Cluster::Control,
        &Throttle::new(settings.qps, settings.burst),
    )
    .await?;
    Ok(Clients {
        control: control_client,
        target: target_client,
        leader_election,
    })
}

/// Waits until the control API server answers and serves `machine.sapcloud.io/v1alpha1`
/// machines (reference §3.1 step 4: upstream polls every second for up to ten seconds).
///
/// Transient errors are retried every `poll` until `wait` has passed; a served group without a
/// `machines` resource fails at once.
pub async fn wait_for_control_api(
    client: &Client,
    wait: Duration,
    poll: Duration,
    cancel: &CancellationToken,
) -> Result<(), ClientError> {
    let started = tokio::time::Instant::now();
    loop {
        let error = match client.list_api_group_resources(MACHINE_API_VERSION).await {
            Ok(list) => {
                return if list.resources.iter().any(|r| r.name == "machines") {
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
        if started.elapsed() + poll > wait {
            return Err(match error {
                kube::Error::Api(status) if status.is_not_found() => {
                    ClientError::MachinesNotServed {
                        detail: format!("GET /apis/{MACHINE_API_VERSION} answered 404"),
                    }
                }
                source => ClientError::Unreachable {
                    cluster: Cluster::Control,
                    waited: started.elapsed(),
                    source,
                },
            });
        }
        tracing::info!(%error, "waiting for the control API server to serve {MACHINE_API_VERSION}");
        tokio::select! {
            () = cancel.cancelled() => return Err(ClientError::Cancelled { cluster: Cluster::Control }),
            () = tokio::time::sleep(poll) => {}
        }
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
