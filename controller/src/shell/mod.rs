//! What every reconcile shell shares: the clients, the driver, one informer per watched kind, the
//! event recorder and the freeze switch of the safety controller; and [`ControllerSet`], which
//! plugs all controllers into the manager as one [`Controller`].
//!
//! The shells themselves live next to their plans (`machine/reconcile.rs`,
//! `machine_set/reconcile.rs`, ...). Each exposes a [`RunFn`]: it subscribes to the informers it
//! needs, runs its [`queue::WorkQueue`] until shutdown and returns.

pub mod events;
pub mod informer;
pub mod queue;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use mcm_api::v1alpha1::{Machine, MachineClass, MachineDeployment, MachineSet};
use mcm_provider_proto::DriverClient;
use tokio_util::sync::CancellationToken;

pub use self::events::EVENT_REPEAT_SUPPRESSION;
use self::events::EventSink;
use self::informer::Informer;
use crate::manager::config::Config;
use crate::manager::metrics::Metrics;
use crate::manager::{BoxError, Controller, ControllerContext};

/// The component name on Events and field managers.
pub const COMPONENT: &str = "machine-controller-manager";

/// Everything a reconcile shell works with. Shared as `Arc<Shell>`.
pub struct Shell {
    /// Validated flags.
    pub config: Arc<Config>,
    /// Control cluster client (Machine* objects, Secrets, Events).
    pub control: Client,
    /// Target cluster client (Nodes, Pods, volumes); `None` with `--target-kubeconfig=none`.
    pub target: Option<Client>,
    /// The control namespace (`--namespace`).
    pub namespace: String,
    /// The provider driver (lazy connection; every call has a deadline).
    pub driver: DriverClient,
    /// Metrics to update.
    pub metrics: Metrics,
    /// Machines of the control namespace.
    pub machines: Informer<Machine>,
    /// MachineSets of the control namespace.
    pub machine_sets: Informer<MachineSet>,
    /// MachineDeployments of the control namespace.
    pub machine_deployments: Informer<MachineDeployment>,
    /// MachineClasses of the control namespace.
    pub machine_classes: Informer<MachineClass>,
    /// Nodes of the target cluster (always empty and synced without a target cluster).
    pub nodes: Informer<Node>,
    events: EventSink,
    machine_controller_frozen: AtomicBool,
    creations_in_flight: std::sync::Mutex<std::collections::HashSet<String>>,
    secrets: std::sync::Mutex<HashMap<(String, String), SecretRead>>,
}

/// A Secret (or its absence) and when it was read.
type SecretRead = (Instant, Option<Arc<Secret>>);

/// How long a Secret read for a MachineClass is reused before it is read again. Every driver call
/// needs the class's Secrets; reading them once per call costed several GETs per machine, while
/// caching every Secret of the namespace would hold unrelated data in memory.
pub const SECRET_REUSE: Duration = Duration::from_secs(10);

/// A Secret referenced by a MachineClass could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the Secret {namespace}/{name}: {source}")]
pub struct SecretReadError {
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the Secret.
    pub name: String,
    /// The API error.
    #[source]
    pub source: kube::Error,
}

/// How a shell is started: subscribe, run its queue until `shutdown`, return.
pub type RunFn = fn(Arc<Shell>, CancellationToken) -> BoxFuture<'static, Result<(), BoxError>>;

impl Shell {
    /// A shell over the manager's context. Informers are created empty; see [`Shell::start`].
    pub async fn new(context: &ControllerContext) -> Result<Self, BoxError> {
        let config = Arc::clone(&context.config);
        let driver = DriverClient::connect(
            &config.driver_endpoint,
            mcm_provider_proto::client::DEFAULT_DEADLINE,
        )
        .await?;
        Ok(Self::with_driver(context, driver))
    }

    /// A shell with an already connected driver (tests).
    pub fn with_driver(context: &ControllerContext, driver: DriverClient) -> Self {
        Self {
            namespace: context.config.namespace.clone(),
            config: Arc::clone(&context.config),
            control: context.control.clone(),
            target: context.target.clone(),
            driver,
            metrics: context.metrics.clone(),
            machines: Informer::new("machines"),
            machine_sets: Informer::new("machinesets"),
            machine_deployments: Informer::new("machinedeployments"),
            machine_classes: Informer::new("machineclasses"),
            nodes: Informer::new("nodes"),
            events: EventSink::new(context.control.clone(), COMPONENT),
            machine_controller_frozen: AtomicBool::new(false),
            creations_in_flight: std::sync::Mutex::default(),
            secrets: std::sync::Mutex::default(),
        }
    }

    /// Starts one watch per kind (tasks end on `shutdown`) and waits until every cache is synced.
    pub async fn start(&self, shutdown: &CancellationToken) {
        let every = watcher::Config::default;
        tokio::spawn(
            self.machines
                .clone()
                .run(self.namespaced(), every(), shutdown.clone()),
        );
        tokio::spawn(
            self.machine_sets
                .clone()
                .run(self.namespaced(), every(), shutdown.clone()),
        );
        tokio::spawn(self.machine_deployments.clone().run(
            self.namespaced(),
            every(),
            shutdown.clone(),
        ));
        tokio::spawn(self.machine_classes.clone().run(
            self.namespaced(),
            every(),
            shutdown.clone(),
        ));
        match &self.target {
            Some(target) => {
                tokio::spawn(self.nodes.clone().run(
                    Api::all(target.clone()),
                    every(),
                    shutdown.clone(),
                ));
            }
            None => self.nodes.replace(Vec::new()),
        }
        self.machines.wait_synced().await;
        self.machine_sets.wait_synced().await;
        self.machine_deployments.wait_synced().await;
        self.machine_classes.wait_synced().await;
        self.nodes.wait_synced().await;
        tracing::info!(
            machines = self.machines.len(),
            machine_sets = self.machine_sets.len(),
            machine_deployments = self.machine_deployments.len(),
            machine_classes = self.machine_classes.len(),
            nodes = self.nodes.len(),
            "caches synced"
        );
    }

    /// An API of kind `K` in the control namespace.
    pub fn namespaced<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.control.clone(), &self.namespace)
    }

    /// True while the API-server safety check has frozen the Machine controller.
    pub fn machine_controller_frozen(&self) -> bool {
        self.machine_controller_frozen.load(Ordering::SeqCst)
    }

    /// Freezes or unfreezes the Machine controller (the API-server safety check).
    pub fn set_machine_controller_frozen(&self, frozen: bool) {
        self.machine_controller_frozen
            .store(frozen, Ordering::SeqCst);
        self.metrics.set_machine_controller_frozen(frozen);
    }

    /// Marks the Machine `name` as inside the creation flow (a CreateMachine/InitializeMachine
    /// call may be running); the termination shell and the orphan collector leave it alone until
    /// [`Shell::creation_finished`]. Returns false if it already was.
    pub fn creation_started(&self, name: &str) -> bool {
        self.creations_in_flight
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(name.to_owned())
    }

    /// Ends what [`Shell::creation_started`] began.
    pub fn creation_finished(&self, name: &str) {
        self.creations_in_flight
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(name);
    }

    /// True while the Machine `name` is inside the creation flow.
    pub fn in_creation_flow(&self, name: &str) -> bool {
        self.creations_in_flight
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .contains(name)
    }

    /// The merged data of the Secrets a MachineClass references (`secretRef`, then
    /// `credentialsSecretRef`; `stringData` is folded in for servers that do not). Missing Secrets
    /// contribute nothing. Reads are reused for [`SECRET_REUSE`].
    pub async fn class_secret_data(
        &self,
        class: &MachineClass,
    ) -> Result<BTreeMap<String, Vec<u8>>, SecretReadError> {
        let mut data = BTreeMap::new();
        for reference in [&class.secret_ref, &class.credentials_secret_ref]
            .into_iter()
            .flatten()
        {
            let Some(name) = reference.name.as_deref().filter(|name| !name.is_empty()) else {
                continue;
            };
            let namespace = reference
                .namespace
                .as_deref()
                .filter(|namespace| !namespace.is_empty())
                .unwrap_or(&self.namespace);
            let Some(secret) = self.secret(namespace, name).await? else {
                continue;
            };
            for (key, value) in secret.data.clone().unwrap_or_default() {
                data.insert(key, value.0);
            }
            for (key, value) in secret.string_data.clone().unwrap_or_default() {
                data.insert(key, value.into_bytes());
            }
        }
        Ok(data)
    }

    async fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Secret>>, SecretReadError> {
        let key = (namespace.to_owned(), name.to_owned());
        let now = Instant::now();
        {
            let cache = self
                .secrets
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if let Some((read_at, secret)) = cache.get(&key)
                && now.duration_since(*read_at) < SECRET_REUSE
            {
                return Ok(secret.clone());
            }
        }
        let api: Api<Secret> = Api::namespaced(self.control.clone(), namespace);
        let secret = api
            .get_opt(name)
            .await
            .map_err(|source| SecretReadError {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                source,
            })?
            .map(Arc::new);
        let mut cache = self
            .secrets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        cache.retain(|_, (read_at, _)| now.duration_since(*read_at) < SECRET_REUSE);
        cache.insert(key, (now, secret.clone()));
        Ok(secret)
    }

    /// Records an Event on `object` (best effort: failures are logged, never returned, and the
    /// caller does not wait). `action` is a PascalCase verb, `reason` the `kubectl describe`
    /// reason.
    pub fn event<K>(&self, object: &K, warning: bool, reason: &str, action: &str, note: String)
    where
        K: Resource<DynamicType = ()>,
    {
        self.events
            .publish(object.object_ref(&()), warning, reason, action, note);
    }
}

/// All shells as one manager [`Controller`]: the informers start during warm-up (every replica),
/// the shells run on the leader.
pub struct ControllerSet {
    shells: Vec<(&'static str, RunFn)>,
    shell: Option<Arc<Shell>>,
    driver: Option<DriverClient>,
    informers_stop: CancellationToken,
}

impl ControllerSet {
    /// The set of every controller this build has.
    pub fn all() -> Self {
        Self::with(registry())
    }

    /// A set of the given shells (tests run a subset).
    pub fn with(shells: Vec<(&'static str, RunFn)>) -> Self {
        Self {
            shells,
            shell: None,
            driver: None,
            informers_stop: CancellationToken::new(),
        }
    }

    /// Uses `driver` instead of connecting to `--driver-endpoint` (tests).
    pub fn with_driver_client(mut self, driver: DriverClient) -> Self {
        self.driver = Some(driver);
        self
    }
}

/// Every shell of this build, with its name.
pub fn registry() -> Vec<(&'static str, RunFn)> {
    vec![
        ("machine", crate::machine::reconcile::run),
        ("machine-termination", crate::machine::terminate::run),
        ("node", crate::machine::node_reconcile::run),
        ("machineclass", crate::machine::class_reconcile::run),
        ("machineset", crate::machine_set::reconcile::run),
        (
            "machinedeployment",
            crate::machine_deployment::reconcile::run,
        ),
        ("safety", crate::safety::reconcile::run),
    ]
}

impl Controller for ControllerSet {
    fn name(&self) -> &str {
        COMPONENT
    }

    fn warm_up<'a>(
        &'a mut self,
        context: &'a ControllerContext,
    ) -> BoxFuture<'a, Result<(), BoxError>> {
        Box::pin(async move {
            let shell = match self.driver.take() {
                Some(driver) => Shell::with_driver(context, driver),
                None => Shell::new(context).await?,
            };
            // Informers stop with the manager's shutdown or when this set is dropped.
            let stop = context.shutdown.child_token();
            self.informers_stop = stop.clone();
            shell.start(&stop).await;
            self.shell = Some(Arc::new(shell));
            Ok(())
        })
    }

    fn run(
        self: Box<Self>,
        context: ControllerContext,
    ) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(async move {
            let Some(shell) = self.shell.clone() else {
                return Err("the controllers were run without a warm-up".into());
            };
            // One failing shell stops the others (and then the manager) without cancelling the
            // manager's own token.
            let stop = context.shutdown.child_token();
            let mut running = tokio::task::JoinSet::new();
            for (name, run) in &self.shells {
                let name = *name;
                let future = run(Arc::clone(&shell), stop.clone());
                running.spawn(async move { (name, future.await) });
                // Upstream staggers controller starts (`--controller-start-interval`).
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let mut result = Ok(());
            while let Some(joined) = running.join_next().await {
                match joined {
                    Ok((name, Err(error))) => {
                        tracing::error!(controller = name, %error, "controller failed");
                        result = Err(format!("controller {name} failed: {error}").into());
                        stop.cancel();
                    }
                    Ok((name, Ok(()))) if !stop.is_cancelled() => {
                        result = Err(format!("controller {name} stopped unexpectedly").into());
                        stop.cancel();
                    }
                    Ok(_) => {}
                    Err(error) => {
                        result = Err(format!("a controller task failed: {error}").into());
                        stop.cancel();
                    }
                }
            }
            self.informers_stop.cancel();
            result
        })
    }
}
