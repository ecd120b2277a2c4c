//! The manager process: flags, clients for the control and target clusters, leader election, the
//! admin server (health, readiness, metrics), logging and graceful shutdown.
//!
//! [`run`] is the process skeleton (docs/behaviour.md#machine-process and docs/behaviour.md#manager-process, merged):
//! 1. start the admin server on `--address:--port` (healthy, not ready);
//! 2. build the control and target clients ([`clients`]);
//! 3. wait for the control API server to serve `machine.sapcloud.io/v1alpha1` machines, failing
//!    clearly otherwise; log the target API server's version;
//! 4. warm up every [`Controller`] (start reflectors, wait for their caches) on **every** replica,
//!    then report ready;
//! 5. with `--leader-elect`, wait for the `machine-controller-manager` Lease ([`leader`]);
//! 6. run the controllers until shutdown (a leadership term). A controller that ends is fatal:
//!    [`run`] returns an error and the binary exits non-zero so the pod restarts clean. A lost
//!    Lease is not: the write gate ([`gate`]) closes at once, the controllers are cancelled and
//!    their tasks aborted, and the manager campaigns again (step 5) with its caches kept; the
//!    next term starts its controllers afresh. See `docs/operations.md`, "Leader election and API
//!    outages", for why this rather than exiting as upstream does.
//!
//! The control API server is waited for as long as it takes at step 3 (an outage must not make
//! the process exit and back off), reporting not-ready meanwhile.
//!
//! Shutdown (the token given to [`run`], cancelled on SIGTERM/SIGINT by the binary): readiness
//! goes off, controllers are cancelled and awaited (bounded), the lease is released (a standby
//! acquires it at its next check, within one lease duration), and the admin server stops last.

pub mod admin;
pub mod clients;
pub mod compose;
pub mod gate;
pub mod leader;
pub mod throttle;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use kube::Client;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use self::admin::Health;
use self::clients::ClientError;
use self::leader::{LeaderElector, LeaderError, LeaderSettings};
use crate::platform::BoxError;
use crate::platform::config::Config;
use crate::platform::informer::Rewatch;
use crate::platform::metrics::{Metrics, MetricsPort};

/// What a controller gets to work with.
#[derive(Clone)]
pub struct ControllerContext {
    /// The validated configuration.
    pub config: Arc<Config>,
    /// Control cluster client (of the Machine-side controllers).
    pub control: Client,
    /// Target cluster client (of the Machine-side controllers); `None` with
    /// `--target-kubeconfig=none`.
    pub target: Option<Client>,
    /// The clients of upstream's `machine-controller-manager` share (MachineSet,
    /// MachineDeployment, overshooting safety), with throttle buckets of their own.
    pub controller_manager: clients::ShareClients,
    /// Metrics to update.
    pub metrics: Metrics,
    /// Kicked when the API server answers again (a Lease attempt succeeded after failures):
    /// informers whose watch broke start over at once.
    pub rewatch: Rewatch,
    /// Cancelled when the controller must stop.
    pub shutdown: CancellationToken,
}

/// A controller plugged into the manager.
pub trait Controller: Send + 'static {
    /// Name for logs, `/healthz` and errors (upstream's queue name where there is one).
    fn name(&self) -> &str;

    /// Runs on every replica before leader election: start reflectors and return once their
    /// caches are synced (they keep running in tasks the controller spawned). Default: nothing.
    fn warm_up<'a>(
        &'a mut self,
        context: &'a ControllerContext,
    ) -> BoxFuture<'a, Result<(), BoxError>> {
        let _ = context;
        Box::pin(async { Ok(()) })
    }

    /// Runs the controller on the leader until `context.shutdown` is cancelled: one leadership
    /// term. Called again for every term (after a lost Lease was won back); the future of an
    /// ended term is dropped, so nothing of it outlives the term but what it spawned, which must
    /// end on `context.shutdown`. Returning before the cancellation, with or without an error,
    /// is treated as fatal.
    fn run(&mut self, context: ControllerContext) -> BoxFuture<'static, Result<(), BoxError>>;
}

/// Process-level knobs of [`run`] that are not flags.
pub struct RunOptions {
    /// Lease holder identity (see [`leader::default_identity`]); the same identity takes its own
    /// Lease again at once.
    pub identity: String,
    /// An already bound admin listener (tests bind port 0); `None` binds `--address:--port`.
    pub admin_listener: Option<TcpListener>,
    /// An already bound listener for the machine-level metrics (tests bind port 0); `None` binds
    /// `--address:--machine-metrics-port`. Unused when no machine-controller controller runs.
    pub machine_metrics_listener: Option<TcpListener>,
    /// How long a control API server that answers 404 for the machine API is waited for before
    /// the manager fails (upstream: 10 s). An unreachable one is waited for without limit.
    pub api_wait: Duration,
    /// First interval between attempts to reach it; it doubles up to
    /// [`clients::API_RETRY_CAP`].
    pub api_poll: Duration,
    /// How long controllers get to finish after shutdown was requested.
    pub shutdown_grace: Duration,
    /// Health shared with the admin server.
    pub health: Health,
    /// Metrics served by the admin server and handed to the controllers.
    pub metrics: Metrics,
}

impl RunOptions {
    /// Upstream's waits, a fresh health and metrics registry, and `identity`.
    pub fn new(identity: impl Into<String>) -> Self {
        Self {
            identity: identity.into(),
            admin_listener: None,
            machine_metrics_listener: None,
            api_wait: Duration::from_secs(10),
            api_poll: Duration::from_millis(100),
            shutdown_grace: Duration::from_secs(30),
            health: Health::new(),
            metrics: Metrics::new(),
        }
    }
}

/// Why the manager stopped other than by a requested shutdown.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    /// The admin address could not be bound.
    #[error("cannot listen on the admin address {address}: {source}")]
    AdminBind {
        /// `--address:--port`.
        address: std::net::SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The admin server failed while running.
    #[error("the admin server failed: {0}")]
    AdminServer(String),
    /// Building clients or reaching an API server failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// Leader election could not start, or the lease was lost.
    #[error(transparent)]
    Leader(#[from] LeaderError),
    /// A controller's warm-up failed.
    #[error("controller {name} failed to warm up: {source}")]
    WarmUp {
        /// Controller name.
        name: String,
        /// Cause.
        #[source]
        source: BoxError,
    },
    /// A controller ended while the manager was running.
    #[error("controller {name} stopped: {reason}")]
    ControllerStopped {
        /// Controller name.
        name: String,
        /// Its error, panic message, or "returned early".
        reason: String,
    },
}

/// Runs the manager until `shutdown` is cancelled (`Ok`) or something fatal happens (`Err`).
pub async fn run(
    config: Config,
    controllers: Vec<Box<dyn Controller>>,
    options: RunOptions,
    shutdown: CancellationToken,
) -> Result<(), ManagerError> {
    let RunOptions {
        identity,
        admin_listener,
        machine_metrics_listener,
        api_wait,
        api_poll,
        shutdown_grace,
        health,
        metrics,
    } = options;
    let machine_listener = match (config.machine_metrics_address, machine_metrics_listener) {
        (None, _) => None,
        (Some(_), Some(listener)) => Some(listener),
        (Some(address), None) => Some(
            TcpListener::bind(address)
                .await
                .map_err(|source| ManagerError::AdminBind { address, source })?,
        ),
    };
    let listener = match admin_listener {
        Some(listener) => listener,
        None => TcpListener::bind(config.admin_address)
            .await
            .map_err(|source| ManagerError::AdminBind {
                address: config.admin_address,
                source,
            })?,
    };
    if let Ok(address) = listener.local_addr() {
        tracing::info!(%address, "admin server listening (/healthz, /readyz, /metrics)");
    }
    // Counter families with known label values are exported at 0 from the start.
    metrics.declare_controllers(&config.controllers.names);
    if let Some(election) = &config.leader_election {
        metrics.set_leader(&election.lease_name, false);
    }
    if config.profiling {
        tracing::warn!("--profiling is accepted for compatibility; no pprof endpoints are served");
    }
    let admin_stop = CancellationToken::new();
    // Upstream serves the two binaries' series on two ports; with `--machine-metrics-port=0`
    // the machine series join --port; without machine controllers --port has only its own.
    let main_view = if machine_listener.is_none()
        && config
            .controllers
            .runs(crate::platform::selection::Share::MachineController)
    {
        MetricsPort::Both
    } else {
        MetricsPort::ControllerManager
    };
    let mut admin_task = tokio::spawn(admin::serve(
        listener,
        admin::router_for(health.clone(), metrics.clone(), main_view),
        admin_stop.clone(),
    ));
    let machine_task = machine_listener.map(|listener| {
        if let Ok(address) = listener.local_addr() {
            tracing::info!(%address, "machine metrics listening (/metrics, /healthz)");
        }
        tokio::spawn(admin::serve(
            listener,
            admin::router_for(
                health.clone(),
                metrics.clone(),
                MetricsPort::MachineController,
            ),
            admin_stop.clone(),
        ))
    });

    let managed = manage(
        Arc::new(config),
        controllers,
        Managed {
            identity,
            api_wait,
            api_poll,
            shutdown_grace,
            health: health.clone(),
            metrics,
        },
        shutdown,
    );
    let (result, admin_done) = tokio::select! {
        result = managed => (result, false),
        admin = &mut admin_task => {
            let reason = match admin {
                Ok(Ok(())) => "it stopped unexpectedly".to_owned(),
                Ok(Err(error)) => error.to_string(),
                Err(error) => error.to_string(),
            };
            (Err(ManagerError::AdminServer(reason)), true)
        }
    };
    if let Err(error) = &result {
        tracing::error!(%error, "manager stopping");
    }
    admin_stop.cancel();
    if let Some(task) = machine_task
        && tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .is_err()
    {
        tracing::warn!("the machine metrics server did not stop within 5s");
    }
    if !admin_done
        && tokio::time::timeout(Duration::from_secs(5), admin_task)
            .await
            .is_err()
    {
        tracing::warn!("the admin server did not stop within 5s");
    }
    result
}

struct Managed {
    identity: String,
    api_wait: Duration,
    api_poll: Duration,
    shutdown_grace: Duration,
    health: Health,
    metrics: Metrics,
}

async fn manage(
    config: Arc<Config>,
    mut controllers: Vec<Box<dyn Controller>>,
    options: Managed,
    shutdown: CancellationToken,
) -> Result<(), ManagerError> {
    let Managed {
        identity,
        api_wait,
        api_poll,
        shutdown_grace,
        health,
        metrics,
    } = options;

    health.set_not_ready("connecting to the control API server");
    // Without leader election this replica always leads; with it, nothing is written until the
    // Lease is held.
    let gate = gate::WriteGate::new(config.leader_election.is_none());
    let clients = clients::build(
        &config.control_kubeconfig,
        config.target_kubeconfig.as_ref(),
        &config.client,
        &gate,
    )
    .await?;
    match clients::wait_for_control_api(&clients.control, api_wait, api_poll, &shutdown).await {
        Ok(()) => {}
        Err(ClientError::Cancelled { .. }) => return Ok(()),
        Err(error) => return Err(error.into()),
    }
    match &clients.target {
        Some(target) => match clients::target_version(target).await {
            Ok(version) => tracing::info!(%version, "target cluster reached"),
            Err(error) => tracing::warn!(%error, "cannot read the target cluster's version"),
        },
        None => tracing::info!(
            "no target cluster (--target-kubeconfig=none): machines become Available without a Node"
        ),
    }

    let controller_shutdown = CancellationToken::new();
    let rewatch = Rewatch::new();
    let context = ControllerContext {
        config: config.clone(),
        control: clients.control.clone(),
        target: clients.target.clone(),
        controller_manager: clients.controller_manager.clone(),
        metrics: metrics.clone(),
        rewatch: rewatch.clone(),
        shutdown: controller_shutdown.clone(),
    };
    health.set_not_ready("waiting for controller caches to sync");
    for controller in &mut controllers {
        let name = controller.name().to_owned();
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            warmed = controller.warm_up(&context) => {
                warmed.map_err(|source| ManagerError::WarmUp { name: name.clone(), source })?;
                tracing::info!(controller = %name, "caches synced");
            }
        }
    }
    health.set_ready();
    if controllers.is_empty() {
        tracing::warn!(
            "no controllers are wired into this build yet: the manager only serves the admin endpoints{}",
            if config.leader_election.is_some() {
                " and holds the lease"
            } else {
                ""
            }
        );
    }

    let Some(election) = &config.leader_election else {
        tracing::info!("leader election disabled (--leader-elect=false)");
        let term = run_term(&mut controllers, &context, None, &shutdown, shutdown_grace).await;
        return finish(term, &health, &controller_shutdown, None).await;
    };
    let mut terms: u64 = 0;
    loop {
        let settings = LeaderSettings::new(election, identity.clone());
        let mut elector = LeaderElector::start_gated(
            clients.leader_election.clone(),
            settings,
            Some(gate.clone()),
            Some(rewatch.clone()),
        )
        .await?;
        tracing::info!(identity = %elector.identity(), "waiting for leadership");
        tokio::select! {
            () = shutdown.cancelled() => {
                elector.stop().await;
                return Ok(());
            }
            leading = elector.became_leader() => leading?,
        }
        terms += 1;
        metrics.set_leader(&election.lease_name, true);
        let term = run_term(
            &mut controllers,
            &context,
            Some(&mut elector),
            &shutdown,
            shutdown_grace,
        )
        .await;
        metrics.set_leader(&election.lease_name, false);
        match term {
            Term::Lost(reason) => {
                tracing::warn!(
                    %reason,
                    term = terms,
                    "leadership lost: controllers stopped (no write after the loss); campaigning again with the caches kept"
                );
                elector.stop().await;
            }
            other => return finish(other, &health, &controller_shutdown, Some(elector)).await,
        }
    }
}

/// How a leadership term ended.
enum Term {
    /// Shutdown was requested; the controllers were drained (bounded by the grace).
    Shutdown,
    /// The Lease was lost; the controllers were cancelled and aborted.
    Lost(String),
    /// Something fatal happened; the controllers were aborted.
    Fatal(ManagerError),
}

/// Runs every controller until shutdown, the loss of the Lease or a fatal error, and stops them.
async fn run_term(
    controllers: &mut [Box<dyn Controller>],
    context: &ControllerContext,
    elector: Option<&mut LeaderElector>,
    shutdown: &CancellationToken,
    shutdown_grace: Duration,
) -> Term {
    let term_stop = context.shutdown.child_token();
    let term_context = ControllerContext {
        shutdown: term_stop.clone(),
        ..context.clone()
    };
    let mut running = JoinSet::new();
    for controller in controllers.iter_mut() {
        let name = controller.name().to_owned();
        tracing::info!(controller = %name, "starting controller");
        let future = AssertUnwindSafe(controller.run(term_context.clone())).catch_unwind();
        running.spawn(async move { (name, future.await) });
    }

    // A branch whose pattern fails (an empty set yields `None`) is disabled, so with no
    // controllers this waits for shutdown or the lease.
    let term = tokio::select! {
        () = shutdown.cancelled() => Term::Shutdown,
        reason = lost_lease(elector) => Term::Lost(reason),
        Some(joined) = running.join_next() => {
            let (name, reason) = match joined {
                Ok((name, Ok(Ok(())))) => (name, "it returned before shutdown".to_owned()),
                Ok((name, Ok(Err(error)))) => (name, error.to_string()),
                Ok((name, Err(panic))) => (name, format!("it panicked: {}", panic_message(&*panic))),
                Err(error) => ("unknown".to_owned(), error.to_string()),
            };
            Term::Fatal(ManagerError::ControllerStopped { name, reason })
        }
    };
    term_stop.cancel();
    match &term {
        Term::Shutdown => {
            tracing::info!("shutdown requested: stopping controllers");
            let drained = tokio::time::timeout(shutdown_grace, async {
                while let Some(joined) = running.join_next().await {
                    if let Ok((name, Ok(Err(error)))) = joined {
                        tracing::warn!(controller = %name, %error, "controller ended with an error during shutdown");
                    }
                }
            })
            .await;
            if drained.is_err() {
                tracing::warn!("controllers did not stop within {shutdown_grace:?}; aborting them");
                running.abort_all();
            }
        }
        // Lost or fatal: do not wait for in-flight work (the write gate already refuses its
        // writes after a loss); abort every task and wait only for the aborts.
        Term::Lost(_) | Term::Fatal(_) => {
            running.abort_all();
            while running.join_next().await.is_some() {}
        }
    }
    term
}

/// Ends the manager after a term that did not end with a lost Lease.
async fn finish(
    term: Term,
    health: &Health,
    controller_shutdown: &CancellationToken,
    elector: Option<LeaderElector>,
) -> Result<(), ManagerError> {
    if let Term::Fatal(ManagerError::ControllerStopped { name, .. }) = &term {
        health.controller_stopped(name.clone());
    }
    health.set_not_ready("shutting down");
    controller_shutdown.cancel();
    if let Some(elector) = elector {
        elector.stop().await;
    }
    match term {
        Term::Fatal(error) => Err(error),
        Term::Lost(reason) => Err(ManagerError::Leader(LeaderError::Lost(reason))),
        Term::Shutdown => {
            tracing::info!("manager stopped");
            Ok(())
        }
    }
}

async fn lost_lease(elector: Option<&mut LeaderElector>) -> String {
    match elector {
        Some(elector) => elector.lost().await,
        None => std::future::pending().await,
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-text panic".to_owned())
}

/// Resolves with the signal's name on SIGTERM or SIGINT.
pub async fn shutdown_signal() -> std::io::Result<&'static str> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = terminate.recv() => Ok("SIGTERM"),
        interrupted = tokio::signal::ctrl_c() => interrupted.map(|()| "SIGINT"),
    }
}

#[cfg(test)]
mod sandbox_tests;
