//! [`Metrics`]: the handle the controllers update. It owns both registries (one per upstream
//! binary, see [`MetricsPort`]), the scrape hooks and every family, registered in the order they
//! are exposed; its methods hand each update to the family it belongs to.

use std::fmt;
use std::sync::{Arc, Mutex};

use prometheus_client::registry::Registry;

use super::caches::CacheFamily;
use super::drain::VolumeReattachFamily;
use super::driver::{DriverCallFamilies, DriverRequestFamilies};
use super::exposition::{MetricsPort, merge_expositions};
use super::leader_election::LeaderElectionFamily;
use super::machine::{DrainLabels, MachineDurationLabels, MachineFamilies, MachineSample};
use super::machine_deployment::{MachineDeploymentFamilies, MachineDeploymentSample};
use super::machine_set::{MachineSetFamilies, MachineSetSample};
use super::scrape_failures::{ScrapeFailures, ScrapeKind};
use super::work_queue::QueueMetrics;
use crate::platform::process_metrics::ProcessCollector;
use crate::platform::selection::{Share, share_of};

/// A hook run before every scrape, typically refreshing snapshot metrics from a cache.
pub type ScrapeHook = Box<dyn Fn(&Metrics) + Send + Sync>;

struct Inner {
    /// Upstream machine-controller-manager's series (`--port`).
    manager_registry: Registry,
    /// Upstream machine-controller's series (`--machine-metrics-port`).
    machine_registry: Registry,
    scrape_hooks: Mutex<Vec<ScrapeHook>>,

    // docs/behaviour.md#metrics-mc.
    machines: MachineFamilies,
    driver_requests: DriverRequestFamilies,
    scrape_failures: ScrapeFailures,
    // docs/behaviour.md#metrics-mcm.
    machine_sets: MachineSetFamilies,
    machine_deployments: MachineDeploymentFamilies,
    // Ours.
    driver_calls: DriverCallFamilies,
    volume_reattach: VolumeReattachFamily,
    // client-go's leader-election gauge (component-base), on both ports.
    leader: LeaderElectionFamily,
    // Since when each cache is stale (ours), on both ports.
    caches: CacheFamily,
    // client-go workqueue families (and our reconcile durations), one set per port.
    manager_queues: QueueMetrics,
    machine_queues: QueueMetrics,
}

/// The manager's metrics. Cheap to clone; every clone updates the same registry.
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every metric registered and no values yet.
    pub fn new() -> Self {
        let mut r = Registry::default();
        let mut m = Registry::default();
        for registry in [&mut r, &mut m] {
            registry.register_collector(Box::new(ProcessCollector));
        }
        // The registration order is the exposition order.
        let machines = MachineFamilies::register(&mut m);
        let driver_requests = DriverRequestFamilies::register(&mut m);
        let scrape_failures = ScrapeFailures::register(&mut r, &mut m);
        let machine_sets = MachineSetFamilies::register(&mut r);
        let machine_deployments = MachineDeploymentFamilies::register(&mut r);
        let driver_calls = DriverCallFamilies::register(&mut m);
        let volume_reattach = VolumeReattachFamily::register(&mut m);
        let leader = LeaderElectionFamily::register(&mut r, &mut m);
        let caches = CacheFamily::register(&mut r, &mut m);
        let manager_queues = QueueMetrics::register(&mut r);
        let machine_queues = QueueMetrics::register(&mut m);
        Self(Arc::new(Inner {
            manager_registry: r,
            machine_registry: m,
            scrape_hooks: Mutex::new(Vec::new()),
            machines,
            driver_requests,
            scrape_failures,
            machine_sets,
            machine_deployments,
            driver_calls,
            volume_reattach,
            leader,
            caches,
            manager_queues,
            machine_queues,
        }))
    }

    /// Registers a hook run before every scrape (for example one that calls
    /// [`Metrics::replace_machines`] with a snapshot of the machine cache).
    pub fn on_scrape(&self, hook: ScrapeHook) {
        self.0
            .scrape_hooks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(hook);
    }

    /// Runs the scrape hooks, then encodes the series of `port` in the OpenMetrics text format
    /// (`CONTENT_TYPE`).
    ///
    /// Scrapes are serialized (the hook list stays locked while encoding), so two concurrent
    /// scrapes never see a snapshot half replaced by the other's hooks. Hooks must not call
    /// [`Metrics::on_scrape`] or [`Metrics::encode`].
    pub fn encode_port(&self, port: MetricsPort) -> Result<String, fmt::Error> {
        let hooks = self
            .0
            .scrape_hooks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for hook in hooks.iter() {
            hook(self);
        }
        let mut text = String::new();
        match port {
            MetricsPort::ControllerManager => {
                prometheus_client::encoding::text::encode(&mut text, &self.0.manager_registry)?;
            }
            MetricsPort::MachineController => {
                prometheus_client::encoding::text::encode(&mut text, &self.0.machine_registry)?;
            }
            MetricsPort::Both => {
                let mut manager = String::new();
                prometheus_client::encoding::text::encode_registry(
                    &mut manager,
                    &self.0.manager_registry,
                )?;
                let mut machine = String::new();
                prometheus_client::encoding::text::encode_registry(
                    &mut machine,
                    &self.0.machine_registry,
                )?;
                text = merge_expositions(&manager, &machine);
                prometheus_client::encoding::text::encode_eof(&mut text)?;
            }
        }
        // Once encoded, the machine snapshot would only hold memory until the next scrape's
        // hooks take a new one.
        if port != MetricsPort::ControllerManager {
            self.0.machines.scraped();
        }
        drop(hooks);
        Ok(text)
    }

    /// Every series (both ports) in one exposition, as served on `--port` when the machine
    /// series have no port of their own (`--machine-metrics-port=0`).
    pub fn encode(&self) -> Result<String, fmt::Error> {
        self.encode_port(MetricsPort::Both)
    }

    /// Whether this replica holds the Lease `lease` (client-go's
    /// `leader_election_master_status{name}`: 1 leading, 0 standby).
    pub fn set_leader(&self, lease: &str, leading: bool) {
        self.0.leader.set(lease, leading);
    }

    /// Since when the cache of `kind` has not caught up after its watch broke (`None`: it
    /// follows the API server); `mcm_cache_stale_since_seconds{kind}`.
    pub fn set_cache_stale_since(&self, kind: &str, stale_since: Option<jiff::Timestamp>) {
        self.0.caches.set(kind, stale_since);
    }

    /// Creates the series of every counter family whose label values are known before anything
    /// happened, at 0, for the controllers `names` run: the work queues' adds and retries (and
    /// their gauges) per queue, the scrape failures per kind, the driver retries per method and
    /// the volume re-attach results. client-go and client_golang export these from the start;
    /// `rate()` and `increase()` need the 0 before the first increment, and an alert on a
    /// missing series never fires. Only `mcm_cloud_api_driver_requests_failed` stays empty until
    /// a call fails: its labels name the provider and the error code.
    pub fn declare_controllers(&self, names: &[&str]) {
        let mut manager_share = false;
        let mut machine_share = false;
        for name in names {
            match share_of(name) {
                Some(Share::MachineController) => machine_share = true,
                _ => manager_share = true,
            }
            self.queues(name).declare(name);
        }
        if manager_share {
            for kind in [ScrapeKind::MachineSet, ScrapeKind::MachineDeployment] {
                self.0.scrape_failures.declare(kind);
            }
        }
        if machine_share {
            self.0.scrape_failures.declare(ScrapeKind::Machine);
            self.0.driver_calls.declare_retries();
            self.0.volume_reattach.declare();
        }
    }

    /// How many scrape hooks are registered (see [`Metrics::truncate_scrape_hooks`]).
    pub fn scrape_hook_count(&self) -> usize {
        self.0
            .scrape_hooks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .len()
    }

    /// Drops the hooks registered after the first `count`: those of controllers that stopped
    /// (a leadership term that ended), so the next term's controllers do not add to them.
    pub fn truncate_scrape_hooks(&self, count: usize) {
        self.0
            .scrape_hooks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .truncate(count);
    }

    // ----- machine controller, event driven -------------------------------------------------

    /// After a successful CreateMachine: seconds since the Machine's creation timestamp.
    pub fn machine_created(&self, labels: &MachineDurationLabels, seconds: f64) {
        self.0.machines.created(labels, seconds);
    }

    /// After a successful InitializeMachine: seconds since the Machine's creation timestamp.
    pub fn machine_initialized(&self, labels: &MachineDurationLabels, seconds: f64) {
        self.0.machines.initialized(labels, seconds);
    }

    /// When a machine first becomes Running after creation: seconds since its creation timestamp.
    pub fn machine_joined(&self, labels: &MachineDurationLabels, seconds: f64) {
        self.0.machines.joined(labels, seconds);
    }

    /// After a successful drain (deletion, in-place update or preservation): its duration.
    pub fn machine_drained(&self, labels: &DrainLabels, seconds: f64) {
        self.0.machines.drained(labels, seconds);
    }

    /// After a successful DeleteMachine: seconds since the deletion timestamp.
    pub fn machine_deleted(&self, labels: &MachineDurationLabels, seconds: f64) {
        self.0.machines.deleted(labels, seconds);
    }

    /// A failed CreateMachine, InitializeMachine or DeleteMachine call was scheduled for a retry
    /// after `seconds` of backoff.
    pub fn driver_retry_backoff(&self, method: &str, seconds: f64) {
        self.0.driver_calls.retry_backoff(method, seconds);
    }

    /// A drain's wait for an evicted pod's volumes to be attached elsewhere ended: `result` is
    /// `reattached` or `timeout` (`--machine-pv-reattach-timeout`).
    pub fn volume_reattach(&self, result: &str) {
        self.0.volume_reattach.record(result);
    }

    /// A Pending machine turned Failed because the creation timeout passed.
    pub fn machine_failed_join(&self, labels: &MachineDurationLabels) {
        self.0.machines.failed_join(labels);
    }

    /// One gRPC driver call finished. `code` is the gRPC/machine code name (`OK`, `Unavailable`,
    /// `ResourceExhausted`, `Uninitialized`, ...); anything but `OK` also counts as failed.
    pub fn driver_call(
        &self,
        provider: &str,
        method: &str,
        code: &str,
        duration: std::time::Duration,
    ) {
        let seconds = duration.as_secs_f64();
        self.0.driver_calls.record(method, code, seconds);
        self.0
            .driver_requests
            .record(provider, method, code, seconds);
    }

    /// Listing objects for the scrape-time metrics failed.
    pub fn scrape_failed(&self, kind: ScrapeKind) {
        self.0.scrape_failures.record(kind);
    }

    /// The API server safety check froze (`true`) or unfroze (`false`) the machine controller.
    pub fn set_machine_controller_frozen(&self, frozen: bool) {
        self.0.machines.set_frozen(frozen);
    }

    // ----- snapshots ---------------------------------------------------------------------------

    /// Replaces the scrape-time machine metrics with `machines` (all machines of the namespace).
    pub fn replace_machines(&self, machines: Vec<MachineSample>) {
        self.0.machines.replace(machines);
    }

    /// Replaces the scrape-time MachineSet metrics with `machine_sets`.
    pub fn replace_machine_sets(&self, machine_sets: &[MachineSetSample]) {
        self.0.machine_sets.replace(machine_sets);
    }

    /// Replaces the scrape-time MachineDeployment metrics with `deployments`.
    pub fn replace_machine_deployments(&self, deployments: &[MachineDeploymentSample]) {
        self.0.machine_deployments.replace(deployments);
    }

    // ----- machine set controller, event driven ----------------------------------------------

    /// A MachineSet deleted `count` Failed machines whose last operation was a health check.
    pub fn stale_machines_deleted(&self, count: u64) {
        self.0.machine_sets.stale_machines_deleted(count);
    }

    // ----- work queues -----------------------------------------------------------------------

    fn queues(&self, queue: &str) -> &QueueMetrics {
        match share_of(queue) {
            Some(Share::MachineController) => &self.0.machine_queues,
            _ => &self.0.manager_queues,
        }
    }

    /// One reconcile of `controller` finished after `duration`.
    pub fn reconcile_finished(&self, controller: &str, duration: std::time::Duration) {
        self.queues(controller)
            .reconcile_finished(controller, duration);
    }

    /// The work queue `queue` now holds `depth` keys.
    pub fn set_workqueue_depth(&self, queue: &str, depth: usize) {
        self.queues(queue).set_depth(queue, depth);
    }

    /// A key entered the work queue `queue` (client-go's `adds`).
    pub fn workqueue_added(&self, queue: &str) {
        self.queues(queue).added(queue);
    }

    /// A key of `queue` was handed to a worker after waiting `waited`.
    pub fn workqueue_started(&self, queue: &str, waited: std::time::Duration) {
        self.queues(queue).started(queue, waited);
    }

    /// A worker of `queue` finished a key after `worked`.
    pub fn workqueue_finished(&self, queue: &str, worked: std::time::Duration) {
        self.queues(queue).finished(queue, worked);
    }

    /// A key of `queue` was re-added rate limited (client-go's `retries`).
    pub fn workqueue_retried(&self, queue: &str) {
        self.queues(queue).retried(queue);
    }

    /// The work in progress of `queue`: the sum of the running keys' ages and the oldest one's
    /// (client-go's `unfinished_work_seconds` and `longest_running_processor_seconds`).
    pub fn set_workqueue_in_progress(&self, queue: &str, unfinished: f64, longest: f64) {
        self.queues(queue)
            .set_in_progress(queue, unfinished, longest);
    }
}
