//! Composing controllers into the manager: the registry of every controller this build has, which
//! upstream binary's share each belongs to, and [`ControllerSet`], which builds each selected
//! controller's context (only the informers, driver and handles it uses) and runs them as one
//! manager [`Controller`].
//!
//! The informers are shared: one watch per kind, started only for the kinds a selected
//! controller reads. The driver is connected only when a selected controller calls it, so the
//! `machine-controller-manager` share (MachineSet, MachineDeployment, overshooting safety) runs
//! without one. The small handles shared between controllers are created here and handed out by
//! owner: the freeze switch to the API-server check (readers to the Machine and termination
//! controllers), the creation-flow registry to the Machine controller (a reader to termination),
//! the class Secret cache to the Machine controller (shared with the other driver callers).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::runtime::watcher;
use mcm_api::v1alpha1::{Machine, MachineClass, MachineDeployment, MachineSet};
use mcm_provider_proto::DriverClient;
use tokio_util::sync::CancellationToken;

use super::{BoxError, Controller, ControllerContext};
use crate::machine::class_secrets::ClassSecrets;
use crate::machine::context::{MachineClassContext, MachineContext, NodeContext};
use crate::machine::creation_flows::CreationFlows;
use crate::machine_deployment::context::MachineDeploymentContext;
use crate::machine_set::context::MachineSetContext;
use crate::platform::freeze::FreezeSwitch;
use crate::platform::index::Index;
use crate::platform::informer::{Informer, Rewatch};
use crate::platform::node_cache;
use crate::platform::selection::CONTROLLERS;
use crate::platform::{COMPONENT, Platform};
use crate::safety::context::{ApiServerContext, OrphanContext, OvershootContext};

/// A wired controller: each call runs it (one leadership term) until the token is cancelled.
pub type Runner =
    Arc<dyn Fn(CancellationToken) -> BoxFuture<'static, Result<(), BoxError>> + Send + Sync>;

/// Builds one controller's context from the shared [`Wiring`] and returns its runner.
pub type WireFn = fn(&mut Wiring) -> Result<Runner, BoxError>;

pub use crate::platform::selection::Share;

/// One controller of the registry.
#[derive(Clone, Copy)]
pub struct ControllerSpec {
    /// Name for `--controllers`, logs and errors (upstream's queue name).
    pub name: &'static str,
    /// The upstream binary it belongs to.
    pub share: Share,
    /// Whether it calls the driver.
    pub needs_driver: bool,
    wire: WireFn,
}

impl std::fmt::Debug for ControllerSpec {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ControllerSpec")
            .field("name", &self.name)
            .field("share", &self.share)
            .field("needs_driver", &self.needs_driver)
            .finish()
    }
}

/// Every controller of this build, in start order ([`CONTROLLERS`]).
pub fn registry() -> Vec<ControllerSpec> {
    CONTROLLERS
        .iter()
        .map(|info| ControllerSpec {
            name: info.name,
            share: info.share,
            needs_driver: info.needs_driver,
            wire: wire_fn(info.name),
        })
        .collect()
}

fn wire_fn(name: &str) -> WireFn {
    match name {
        "machine" => wire_machine,
        "machinetermination" => wire_termination,
        "node" => wire_node,
        "machineclass" => wire_machine_class,
        "machineset" => wire_machine_set,
        "machinedeployment" => wire_machine_deployment,
        "machinesafetyovershooting" => wire_overshoot,
        "machinesafetyorphanvms" => wire_orphans,
        "machinesafetyapiserver" => wire_apiserver,
        _ => wire_unknown,
    }
}

fn wire_unknown(_wiring: &mut Wiring) -> Result<Runner, BoxError> {
    Err("a controller of the selection has no implementation in this build".into())
}

/// The registry's controllers with these names, in registry order (tests run subsets).
pub fn named(names: &[&str]) -> Vec<ControllerSpec> {
    registry()
        .into_iter()
        .filter(|spec| names.contains(&spec.name))
        .collect()
}

/// What the wire functions draw from: the common [`Platform`], the shared informers (created on
/// first use), the driver (when connected) and the shared handles.
pub struct Wiring {
    platform: Arc<Platform>,
    controller_manager_platform: Arc<Platform>,
    driver: Option<DriverClient>,
    freeze: FreezeSwitch,
    creation_flows: CreationFlows,
    secrets: ClassSecrets,
    machines: Option<Informer<Machine>>,
    machine_sets: Option<Informer<MachineSet>>,
    machine_deployments: Option<Informer<MachineDeployment>>,
    machine_classes: Option<Informer<MachineClass>>,
    nodes: Option<Informer<Node>>,
    machines_by_node: Option<Index>,
    nodes_by_machine_name: Option<Index>,
}

impl Wiring {
    /// Wiring over `platform` (the Machine-side controllers') and `controller_manager_platform`
    /// (the MachineSet, MachineDeployment and overshooting controllers', with clients of their
    /// own, see [`super::clients::build`]; tests may pass the same platform twice); `driver` is
    /// needed only by controllers that call it.
    pub fn new(
        platform: Arc<Platform>,
        controller_manager_platform: Arc<Platform>,
        driver: Option<DriverClient>,
    ) -> Self {
        Self {
            freeze: FreezeSwitch::new(platform.metrics.clone()),
            creation_flows: CreationFlows::default(),
            secrets: ClassSecrets::new(platform.control.clone(), platform.namespace.clone()),
            platform,
            controller_manager_platform,
            driver,
            machines: None,
            machine_sets: None,
            machine_deployments: None,
            machine_classes: None,
            nodes: None,
            machines_by_node: None,
            nodes_by_machine_name: None,
        }
    }

    /// Machine names by their `node` label; subscribed while wiring, so it outlives the
    /// leadership terms as the caches do.
    fn machines_by_node(&mut self) -> Index {
        if let Some(index) = &self.machines_by_node {
            return index.clone();
        }
        let index = Index::subscribe(&self.machines(), Machine::node_name);
        self.machines_by_node = Some(index.clone());
        index
    }

    /// Node names by their machine-name label, subscribed once for both machine controllers.
    fn nodes_by_machine_name(&mut self) -> Index {
        if let Some(index) = &self.nodes_by_machine_name {
            return index.clone();
        }
        let index = Index::subscribe(
            &self.nodes(),
            mcm_decisions::machine::node_sync::machine_name_label,
        );
        self.nodes_by_machine_name = Some(index.clone());
        index
    }

    fn platform(&self) -> Arc<Platform> {
        Arc::clone(&self.platform)
    }

    fn controller_manager_platform(&self) -> Arc<Platform> {
        Arc::clone(&self.controller_manager_platform)
    }

    fn driver(&self, controller: &str) -> Result<DriverClient, BoxError> {
        self.driver.clone().ok_or_else(|| {
            format!("controller {controller} calls the driver, but no --driver-endpoint is set")
                .into()
        })
    }

    fn machines(&mut self) -> Informer<Machine> {
        self.machines
            .get_or_insert_with(|| Informer::new("machines"))
            .clone()
    }

    fn machine_sets(&mut self) -> Informer<MachineSet> {
        self.machine_sets
            .get_or_insert_with(|| Informer::new("machinesets"))
            .clone()
    }

    fn machine_deployments(&mut self) -> Informer<MachineDeployment> {
        self.machine_deployments
            .get_or_insert_with(|| Informer::new("machinedeployments"))
            .clone()
    }

    fn machine_classes(&mut self) -> Informer<MachineClass> {
        self.machine_classes
            .get_or_insert_with(|| Informer::new("machineclasses"))
            .clone()
    }

    fn nodes(&mut self) -> Informer<Node> {
        self.nodes
            .get_or_insert_with(|| Informer::pruning("nodes", node_cache::prune))
            .clone()
    }

    /// For each informer in use, a function that drops the handlers subscribed after now: run at
    /// the start of a leadership term, it removes those of the previous term's controllers.
    fn handler_resets(&self) -> Vec<HandlerReset> {
        fn reset<K>(informer: &Option<Informer<K>>) -> Option<HandlerReset>
        where
            K: kube::Resource
                + Clone
                + std::fmt::Debug
                + serde::de::DeserializeOwned
                + Send
                + Sync
                + 'static,
        {
            let informer = informer.clone()?;
            let baseline = informer.handler_count();
            Some(Box::new(move || informer.truncate_handlers(baseline)))
        }
        [
            reset(&self.machines),
            reset(&self.machine_sets),
            reset(&self.machine_deployments),
            reset(&self.machine_classes),
            reset(&self.nodes),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// Exports since when each cache in use is stale (`mcm_cache_stale_since_seconds`), read at
    /// every scrape.
    fn export_staleness(&self) {
        let mut views: Vec<
            Box<dyn Fn() -> mcm_decisions::vocabulary::CacheView<'static> + Send + Sync>,
        > = Vec::new();
        if let Some(informer) = self.machines.clone() {
            views.push(Box::new(move || informer.view()));
        }
        if let Some(informer) = self.machine_sets.clone() {
            views.push(Box::new(move || informer.view()));
        }
        if let Some(informer) = self.machine_deployments.clone() {
            views.push(Box::new(move || informer.view()));
        }
        if let Some(informer) = self.machine_classes.clone() {
            views.push(Box::new(move || informer.view()));
        }
        if let Some(informer) = self.nodes.clone() {
            views.push(Box::new(move || informer.view()));
        }
        for view in &views {
            self.platform
                .metrics
                .set_cache_stale_since(view().kind, None);
        }
        self.platform.metrics.on_scrape(Box::new(move |metrics| {
            for view in &views {
                let view = view();
                metrics.set_cache_stale_since(view.kind, view.stale_since);
            }
        }));
    }

    /// Starts one watch per kind a controller asked for (tasks end on `shutdown`; a broken watch
    /// starts over at once when `rewatch` is kicked) and waits until their caches are synced.
    /// Without a target cluster the Node cache is empty.
    pub async fn start_informers(&self, shutdown: &CancellationToken, rewatch: &Rewatch) {
        self.export_staleness();
        let platform = &self.platform;
        let every = watcher::Config::default;
        if let Some(informer) = &self.machines {
            tokio::spawn(informer.clone().run(
                platform.namespaced(),
                every(),
                shutdown.clone(),
                rewatch.clone(),
            ));
        }
        if let Some(informer) = &self.machine_sets {
            tokio::spawn(informer.clone().run(
                platform.namespaced(),
                every(),
                shutdown.clone(),
                rewatch.clone(),
            ));
        }
        if let Some(informer) = &self.machine_deployments {
            tokio::spawn(informer.clone().run(
                platform.namespaced(),
                every(),
                shutdown.clone(),
                rewatch.clone(),
            ));
        }
        if let Some(informer) = &self.machine_classes {
            tokio::spawn(informer.clone().run(
                platform.namespaced(),
                every(),
                shutdown.clone(),
                rewatch.clone(),
            ));
        }
        if let Some(informer) = &self.nodes {
            match &platform.target {
                Some(target) => {
                    tokio::spawn(informer.clone().run(
                        Api::all(target.clone()),
                        every(),
                        shutdown.clone(),
                        rewatch.clone(),
                    ));
                }
                None => informer.replace(Vec::new()),
            }
        }
        let mut synced = Vec::new();
        if let Some(informer) = &self.machines {
            informer.wait_synced().await;
            synced.push(format!("machines={}", informer.len()));
        }
        if let Some(informer) = &self.machine_sets {
            informer.wait_synced().await;
            synced.push(format!("machinesets={}", informer.len()));
        }
        if let Some(informer) = &self.machine_deployments {
            informer.wait_synced().await;
            synced.push(format!("machinedeployments={}", informer.len()));
        }
        if let Some(informer) = &self.machine_classes {
            informer.wait_synced().await;
            synced.push(format!("machineclasses={}", informer.len()));
        }
        if let Some(informer) = &self.nodes {
            informer.wait_synced().await;
            synced.push(format!("nodes={}", informer.len()));
        }
        tracing::info!(caches = %synced.join(" "), "caches synced");
    }
}

fn runner<C: Send + Sync + 'static>(
    context: C,
    run: fn(Arc<C>, CancellationToken) -> BoxFuture<'static, Result<(), BoxError>>,
) -> Runner {
    let context = Arc::new(context);
    Arc::new(move |shutdown| run(Arc::clone(&context), shutdown))
}

fn wire_machine(wiring: &mut Wiring) -> Result<Runner, BoxError> {
    let context = MachineContext {
        platform: wiring.platform(),
        machines: wiring.machines(),
        machine_classes: wiring.machine_classes(),
        nodes: wiring.nodes(),
        driver: wiring.driver("machine")?,
        secrets: wiring.secrets.clone(),
        creation_flows: wiring.creation_flows.clone(),
        frozen: wiring.freeze.reader(),
        machines_by_node: wiring.machines_by_node(),
        nodes_by_machine_name: wiring.nodes_by_machine_name(),
    };
    Ok(runner(context, crate::machine::reconcile::run))
}

fn wire_termination(wiring: &mut Wiring) -> Result<Runner, BoxError> {
    let context = MachineContext {
        platform: wiring.platform(),
        machines: wiring.machines(),
        machine_classes: wiring.machine_classes(),
        nodes: wiring.nodes(),
        driver: wiring.driver("machinetermination")?,
        secrets: wiring.secrets.clone(),
        creation_flows: wiring.creation_flows.clone(),
        frozen: wiring.freeze.reader(),
        machines_by_node: wiring.machines_by_node(),
        nodes_by_machine_name: wiring.nodes_by_machine_name(),
    };
    Ok(runner(context, crate::machine::terminate::run))
}

fn wire_node(wiring: &mut Wiring) -> Result<Runner, BoxError> {
    let context = NodeContext {
        platform: wiring.platform(),
        machines: wiring.machines(),
        nodes: wiring.nodes(),
        machines_by_node: wiring.machines_by_node(),
    };
    Ok(runner(context, crate::machine::node_reconcile::run))
}

fn wire_machine_class(wiring: &mut Wiring) -> Result<Runner, BoxError> {
    let context = MachineClassContext {
        platform: wiring.platform(),
        machines: wiring.machines(),
        machine_classes: wiring.machine_classes(),
        driver: wiring.driver.clone(),
        secrets: wiring.secrets.clone(),
        validated: std::sync::Mutex::default(),
        driver_provider: tokio::sync::OnceCell::new(),
    };
    Ok(runner(context, crate::machine::class_reconcile::run))
}

fn wire_machine_set(wiring: &mut Wiring) -> Result<Runner, BoxError> {
    let context = MachineSetContext {
        platform: wiring.controller_manager_platform(),
        machines: wiring.machines(),
        machine_sets: wiring.machine_sets(),
        nodes: wiring.nodes(),
    };
    Ok(runner(context, crate::machine_set::reconcile::run))
}

fn wire_machine_deployment(wiring: &mut Wiring) -> Result<Runner, BoxError> {
    let context = MachineDeploymentContext {
        platform: wiring.controller_manager_platform(),
        machines: wiring.machines(),
        machine_sets: wiring.machine_sets(),
        machine_deployments: wiring.machine_deployments(),
        machine_classes: wiring.machine_classes(),
        nodes: wiring.nodes(),
    };
    Ok(runner(context, crate::machine_deployment::reconcile::run))
}

fn wire_overshoot(wiring: &mut Wiring) -> Result<Runner, BoxError> {
    let context = OvershootContext {
        platform: wiring.controller_manager_platform(),
        machines: wiring.machines(),
        machine_sets: wiring.machine_sets(),
        machine_deployments: wiring.machine_deployments(),
    };
    Ok(runner(context, crate::safety::reconcile::run_overshoot))
}

fn wire_orphans(wiring: &mut Wiring) -> Result<Runner, BoxError> {
    let context = OrphanContext {
        platform: wiring.platform(),
        machines: wiring.machines(),
        machine_classes: wiring.machine_classes(),
        nodes: wiring.nodes(),
        driver: wiring.driver("machinesafetyorphanvms")?,
        secrets: wiring.secrets.clone(),
    };
    Ok(runner(context, crate::safety::reconcile::run_orphans))
}

fn wire_apiserver(wiring: &mut Wiring) -> Result<Runner, BoxError> {
    let context = ApiServerContext {
        platform: wiring.platform(),
        machines: wiring.machines(),
        freeze: wiring.freeze.clone(),
    };
    Ok(runner(context, crate::safety::reconcile::run_apiserver))
}

type HandlerReset = Box<dyn Fn() + Send + Sync>;

/// The selected controllers as one manager [`Controller`]: contexts are built and the informers
/// start during warm-up (every replica), the controllers run on the leader, once per leadership
/// term. Between terms the caches (informers, the freeze switch, the class Secret cache) live
/// on; each term starts with fresh queues and workers, and the previous term's informer handlers
/// and scrape hooks are dropped first.
pub struct ControllerSet {
    specs: Vec<ControllerSpec>,
    runners: Vec<(&'static str, Runner)>,
    driver: Option<DriverClient>,
    informers_stop: CancellationToken,
    handler_resets: Arc<Vec<HandlerReset>>,
    scrape_hooks: usize,
}

impl ControllerSet {
    /// The set of every controller this build has.
    pub fn all() -> Self {
        Self::with(registry())
    }

    /// A set of the given controllers.
    pub fn with(specs: Vec<ControllerSpec>) -> Self {
        Self {
            specs,
            runners: Vec::new(),
            driver: None,
            informers_stop: CancellationToken::new(),
            handler_resets: Arc::new(Vec::new()),
            scrape_hooks: 0,
        }
    }

    /// Uses `driver` instead of connecting to `--driver-endpoint` (tests).
    pub fn with_driver_client(mut self, driver: DriverClient) -> Self {
        self.driver = Some(driver);
        self
    }

    /// Names of the selected controllers.
    pub fn names(&self) -> Vec<&'static str> {
        self.specs.iter().map(|spec| spec.name).collect()
    }
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
            let needs_driver = self.specs.iter().any(|spec| spec.needs_driver);
            let driver = match (self.driver.take(), needs_driver) {
                (Some(driver), _) => Some(driver),
                (None, false) => None,
                (None, true) => {
                    let Some(endpoint) = &context.config.driver_endpoint else {
                        return Err("the selected controllers call the driver, but no --driver-endpoint is set".into());
                    };
                    Some(
                        DriverClient::connect(
                            endpoint,
                            mcm_provider_proto::client::DEFAULT_DEADLINE,
                        )
                        .await?,
                    )
                }
            };
            let platform = Arc::new(Platform::new(
                Arc::clone(&context.config),
                context.control.clone(),
                context.target.clone(),
                context.metrics.clone(),
            ));
            let controller_manager_platform = Arc::new(Platform::new(
                Arc::clone(&context.config),
                context.controller_manager.control.clone(),
                context.controller_manager.target.clone(),
                context.metrics.clone(),
            ));
            let mut wiring = Wiring::new(platform, controller_manager_platform, driver);
            let mut runners = Vec::with_capacity(self.specs.len());
            for spec in &self.specs {
                runners.push((spec.name, (spec.wire)(&mut wiring)?));
            }
            self.runners = runners;
            // Informers stop with the manager's shutdown or when this set is dropped.
            let stop = context.shutdown.child_token();
            self.informers_stop = stop.clone();
            wiring.start_informers(&stop, &context.rewatch).await;
            self.handler_resets = Arc::new(wiring.handler_resets());
            self.scrape_hooks = context.metrics.scrape_hook_count();
            Ok(())
        })
    }

    fn run(&mut self, context: ControllerContext) -> BoxFuture<'static, Result<(), BoxError>> {
        let runners = self.runners.clone();
        let informers_stop = self.informers_stop.clone();
        // The previous term's controllers are gone: so are their handlers and hooks.
        for reset in self.handler_resets.iter() {
            reset();
        }
        context.metrics.truncate_scrape_hooks(self.scrape_hooks);
        Box::pin(async move {
            if runners.is_empty() {
                return Err("the controllers were run without a warm-up".into());
            }
            // One failing controller stops the others (and then the manager) without cancelling
            // the manager's own token.
            let stop = context.shutdown.child_token();
            let mut running = tokio::task::JoinSet::new();
            for (name, runner) in runners {
                let future = runner(stop.clone());
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
            // A term that ended on request (lost Lease) keeps the caches for the next one; a
            // failure ends the manager, and the informers with it.
            if result.is_err() {
                informers_stop.cancel();
            }
            result
        })
    }
}
