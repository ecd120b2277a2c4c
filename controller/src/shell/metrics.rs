//! Prometheus metrics of the manager, served on `/metrics` of the admin servers.
//!
//! Every upstream metric of reference §9.1 (machine-controller) and §9.2
//! (machine-controller-manager) is registered under its upstream name and labels, so existing
//! dashboards and alerts carry over, in one registry per upstream binary ([`MetricsPort`]): the
//! machine-controller-manager's on `--port`, the machine-controller's on
//! `--machine-metrics-port`. client-go's workqueue families (§9.3) are registered on both and fed
//! by the queue of each controller ([`Metrics::workqueue_added`], ...), routed to the port of that
//! controller's binary; `process_*` comes from [`super::process_metrics`]. On top of those, two
//! metrics of our own: `mcm_reconcile_duration_seconds{controller}` and
//! `mcm_driver_call_duration_seconds{method,code}`, plus the retry backoff's
//! `mcm_machine_driver_retries_total{method}` and `mcm_machine_driver_retry_backoff_seconds{method}`
//! (and a `queue` label on the workqueue families
//! repeating `name`).
//!
//! The controllers fill the values through the methods of [`Metrics`]:
//! * event-driven metrics (durations, failed joins, driver calls, reconciles) are updated where the
//!   event happens (`machine_created`, `driver_call`, ...);
//! * upstream's scrape-time metrics (`*_items_total`, `*_info`, `*_status_*`, ...) are replaced as a
//!   whole from a snapshot of the cache (`replace_machines`, `replace_machine_sets`,
//!   `replace_machine_deployments`). A controller registers an [`Metrics::on_scrape`] hook that
//!   takes the snapshot, so the values are as fresh as upstream's collectors'; series of deleted
//!   objects disappear (upstream keeps `mcm_machine_info` and the deployment's failed-machine series
//!   forever).
//!
//! Encoding differences, all forced by OpenMetrics and chosen to keep the upstream names:
//! * counters are written with a `_total` suffix: the upstream counters named `*_total` keep their
//!   name; `mcm_machine_num_failed_join` has no suffix upstream, so it is exposed as a gauge that
//!   only ever grows (`increase()`/`rate()` work on it the same way);
//! * upstream's `mcm_machine_set_status_replicas` reports `readyReplicas` (a bug); ours reports
//!   `status.replicas`.
//!
//! Upstream's provider-side cloud metrics (`mcm_cloud_api_requests_total`,
//! `mcm_cloud_api_requests_failed_total`, `mcm_cloud_api_api_request_duration_seconds`) measure
//! calls the provider makes to its cloud; they belong to the provider sidecar's own `/metrics`.
//! The driver-call metrics (`mcm_cloud_api_driver_request_duration_seconds`,
//! `mcm_cloud_api_driver_requests_failed_total`) are recorded here, around every gRPC driver call.

use std::fmt;
use std::sync::{Arc, Mutex};

use mcm_api::v1alpha1::Machine;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::process_metrics::ProcessCollector;
use super::selection::{Share, share_of};

/// Content type of the text exposition written by [`Metrics::encode`].
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Buckets of the upstream driver-request histogram (client_golang's default buckets).
const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;
type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn histogram_family<L: Clone + std::hash::Hash + Eq>(
    constructor: fn() -> Histogram,
) -> HistogramFamily<L> {
    Family::new_with_constructor(constructor)
}

fn default_buckets() -> Histogram {
    Histogram::new(DEFAULT_BUCKETS)
}

/// 5 ms .. ~82 s: reconciles and driver calls range from cache-only passes to VM creations.
fn latency_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

// ---------------------------------------------------------------------------------------------
// Label sets (names as upstream; `createdAt` is camel case there).

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ObjectLabels {
    name: String,
    namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConditionLabels {
    name: String,
    namespace: String,
    condition: String,
}

#[allow(non_snake_case)]
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MachineInfoLabels {
    name: String,
    namespace: String,
    createdAt: String,
    spec_provider_id: String,
    spec_class_api_group: String,
    spec_class_kind: String,
    spec_class_name: String,
    node_name: String,
}

#[allow(non_snake_case)]
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MachineSetInfoLabels {
    name: String,
    namespace: String,
    createdAt: String,
    spec_machine_class_api_group: String,
    spec_machine_class_kind: String,
    spec_machine_class_name: String,
}

#[allow(non_snake_case)]
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MachineDeploymentInfoLabels {
    name: String,
    namespace: String,
    createdAt: String,
    spec_strategy_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailedMachineLabels {
    name: String,
    namespace: String,
    failed_machine_name: String,
    failed_machine_provider_id: String,
    failed_machine_owner_ref: String,
    failed_machine_last_operation_state: String,
    failed_machine_last_operation_machine_operation_type: String,
}

/// Labels of the machine lifecycle duration metrics (`mcm_machine_*_duration_seconds` and
/// `mcm_machine_num_failed_join`).
///
/// All four labels are always present; unknown values are empty strings (upstream passes fewer
/// labels when the class has no node template, which panics in client_golang).
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MachineDurationLabels {
    /// Namespace of the machine.
    pub namespace: String,
    /// Value of the machine's `name` label (the MachineDeployment's name).
    pub machine_deployment: String,
    /// MachineClass `nodeTemplate.instanceType`.
    pub instance_type: String,
    /// Machine `spec.nodeTemplate.metadata.labels["topology.kubernetes.io/zone"]`.
    pub zone: String,
}

/// Labels of `mcm_machine_drain_duration_seconds`.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DrainLabels {
    /// Namespace of the machine.
    pub namespace: String,
    /// Value of the machine's `name` label.
    pub machine_deployment: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderOperationLabels {
    provider: String,
    operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderOperationErrorLabels {
    provider: String,
    operation: String,
    error_code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ScrapeFailureLabels {
    kind: String,
    binary: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

/// Upstream's label is `name`; the issue asked for `queue`. Both carry the queue name, so
/// dashboards written for either keep working.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    name: String,
    queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabels {
    name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabels {
    method: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodCodeLabels {
    method: String,
    code: String,
}

// ---------------------------------------------------------------------------------------------
// Snapshots handed in by the controllers.

/// A status condition as counted by the `*_status_condition` metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConditionSample {
    /// Condition type (`Ready`, `Available`, ...).
    pub condition_type: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
}

/// One machine of the control namespace, for the scrape-time machine metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachineSample {
    /// Machine name.
    pub name: String,
    /// Machine namespace.
    pub namespace: String,
    /// `metadata.creationTimestamp` in unix seconds.
    pub created_at: i64,
    /// `spec.providerID`.
    pub provider_id: String,
    /// `spec.class.apiGroup`.
    pub class_api_group: String,
    /// `spec.class.kind`.
    pub class_kind: String,
    /// `spec.class.name`.
    pub class_name: String,
    /// Node name (`node` label).
    pub node_name: String,
    /// `status.currentStatus.phase` (empty when unset).
    pub phase: String,
    /// `status.conditions` (the node's conditions).
    pub conditions: Vec<ConditionSample>,
}

/// A failed machine owned by a MachineSet or MachineDeployment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FailedMachineSample {
    /// Machine name.
    pub name: String,
    /// Provider ID.
    pub provider_id: String,
    /// Name of the owner reference.
    pub owner_ref: String,
    /// `lastOperation.state`.
    pub last_operation_state: String,
    /// `lastOperation.type`.
    pub last_operation_type: String,
}

/// One MachineSet, for the scrape-time MachineSet metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachineSetSample {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// `metadata.creationTimestamp` in unix seconds.
    pub created_at: i64,
    /// `spec.machineClass.apiGroup` (usually empty).
    pub class_api_group: String,
    /// `spec.machineClass.kind`.
    pub class_kind: String,
    /// `spec.machineClass.name`.
    pub class_name: String,
    /// `spec.replicas`.
    pub spec_replicas: i64,
    /// `spec.minReadySeconds`.
    pub min_ready_seconds: i64,
    /// `status.conditions`.
    pub conditions: Vec<ConditionSample>,
    /// `status.failedMachines`.
    pub failed_machines: Vec<FailedMachineSample>,
    /// `status.availableReplicas`.
    pub available_replicas: i64,
    /// `status.fullyLabeledReplicas`.
    pub fully_labelled_replicas: i64,
    /// `status.readyReplicas`.
    pub ready_replicas: i64,
    /// `status.replicas`.
    pub replicas: i64,
}

/// One MachineDeployment, for the scrape-time MachineDeployment metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachineDeploymentSample {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// `metadata.creationTimestamp` in unix seconds.
    pub created_at: i64,
    /// `spec.strategy.type`.
    pub strategy_type: String,
    /// `spec.paused`.
    pub paused: bool,
    /// `spec.replicas`.
    pub spec_replicas: i64,
    /// `spec.minReadySeconds`.
    pub min_ready_seconds: i64,
    /// `(maxSurge, maxUnavailable)` as upstream's `IntOrString.IntValue()` (percentages give 0);
    /// only for the RollingUpdate strategy.
    pub rolling_update: Option<(i64, i64)>,
    /// `spec.revisionHistoryLimit`, if set.
    pub revision_history_limit: Option<i64>,
    /// `spec.progressDeadlineSeconds`, if set.
    pub progress_deadline_seconds: Option<i64>,
    /// `spec.rollbackTo.revision`, if set.
    pub rollback_to_revision: Option<i64>,
    /// `status.conditions`.
    pub conditions: Vec<ConditionSample>,
    /// `status.availableReplicas`.
    pub available_replicas: i64,
    /// `status.unavailableReplicas`.
    pub unavailable_replicas: i64,
    /// `status.readyReplicas`.
    pub ready_replicas: i64,
    /// `status.updatedReplicas`.
    pub updated_replicas: i64,
    /// `status.replicas`.
    pub replicas: i64,
    /// `status.collisionCount`, if set.
    pub collision_count: Option<i64>,
    /// `status.failedMachines`.
    pub failed_machines: Vec<FailedMachineSample>,
}

impl MachineSample {
    /// The sample of `machine` as upstream's collector reads it.
    pub fn from_machine(machine: &Machine) -> Self {
        let class = machine.spec.class.clone().unwrap_or_default();
        let status = machine.status.as_ref();
        Self {
            name: machine.metadata.name.clone().unwrap_or_default(),
            namespace: machine.metadata.namespace.clone().unwrap_or_default(),
            created_at: machine
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(0, |time| time.0.as_second()),
            provider_id: machine.spec.provider_id.clone().unwrap_or_default(),
            class_api_group: class.api_group.unwrap_or_default(),
            class_kind: class.kind.unwrap_or_default(),
            class_name: class.name.unwrap_or_default(),
            node_name: machine
                .metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get(mcm_api::keys::label::NODE))
                .cloned()
                .unwrap_or_default(),
            phase: status
                .and_then(|status| status.current_status.as_ref())
                .and_then(|current| current.phase.as_ref())
                .map(|phase| phase.as_str().to_owned())
                .unwrap_or_default(),
            conditions: status
                .and_then(|status| status.conditions.as_ref())
                .map(|conditions| {
                    conditions
                        .iter()
                        .map(|condition| ConditionSample {
                            condition_type: condition.type_.clone(),
                            status: condition.status.clone(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

impl MachineDurationLabels {
    /// Labels for `machine`, with `instance_type` from its MachineClass's node template.
    /// `None` when the machine has no `name` label (upstream skips the metric then).
    pub fn for_machine(machine: &Machine, instance_type: Option<&str>) -> Option<Self> {
        let drain = DrainLabels::for_machine(machine)?;
        let zone = machine.zone().unwrap_or_default().to_owned();
        Some(Self {
            namespace: drain.namespace,
            machine_deployment: drain.machine_deployment,
            instance_type: instance_type.unwrap_or_default().to_owned(),
            zone,
        })
    }
}

impl DrainLabels {
    /// Labels for `machine`; `None` when it has no `name` label.
    pub fn for_machine(machine: &Machine) -> Option<Self> {
        let deployment = machine
            .metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(mcm_api::keys::label::NAME))?;
        Some(Self {
            namespace: machine.metadata.namespace.clone().unwrap_or_default(),
            machine_deployment: deployment.clone(),
        })
    }
}

/// Which object count failed to be listed at scrape time (`mcm_misc_scrape_failure_total{kind}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScrapeKind {
    /// Machines (`Machine-count`, upstream binary `machine-controller-manager-provider`).
    Machine,
    /// MachineSets (`Machineset-count`).
    MachineSet,
    /// MachineDeployments (`Machinedeployment-count`).
    MachineDeployment,
}

impl ScrapeKind {
    /// `(kind, binary)` label values as upstream's two binaries write them.
    fn labels(self) -> ScrapeFailureLabels {
        let (kind, binary) = match self {
            ScrapeKind::Machine => ("Machine-count", "machine-controller-manager-provider"),
            ScrapeKind::MachineSet => ("Machineset-count", "machine-controller-manager"),
            ScrapeKind::MachineDeployment => {
                ("Machinedeployment-count", "machine-controller-manager")
            }
        };
        ScrapeFailureLabels {
            kind: kind.to_owned(),
            binary: binary.to_owned(),
        }
    }
}

/// Value of `mcm_machine_current_status_phase` for a phase (upstream's mapping; every phase not
/// listed, including `Available`, empty and the in-place phases, counts as 0).
pub fn phase_value(phase: &str) -> i64 {
    match phase {
        "Terminating" => -4,
        "Failed" => -3,
        "CrashLoopBackOff" => -2,
        "Unknown" => -1,
        "Running" => 1,
        _ => 0,
    }
}

/// Value of a `*_status_condition` series: True 1, False 0, Unknown (or anything else) 2.
pub fn condition_value(status: &str) -> i64 {
    match status {
        "True" => 1,
        "False" => 0,
        _ => 2,
    }
}

// ---------------------------------------------------------------------------------------------

/// Gauges keyed by `name`/`namespace` for one object kind, registered under upstream names.
struct ObjectGauges {
    families: Vec<(&'static str, Family<ObjectLabels, Gauge>)>,
}

impl ObjectGauges {
    fn register(registry: &mut Registry, metrics: &[(&'static str, &'static str)]) -> Self {
        let families = metrics
            .iter()
            .map(|(name, help)| {
                let family = Family::<ObjectLabels, Gauge>::default();
                registry.register(*name, *help, family.clone());
                (*name, family)
            })
            .collect();
        Self { families }
    }

    fn clear(&self) {
        for (_, family) in &self.families {
            family.clear();
        }
    }

    fn set(&self, metric: &str, labels: &ObjectLabels, value: i64) {
        if let Some((_, family)) = self.families.iter().find(|(name, _)| *name == metric) {
            family.get_or_create(labels).set(value);
        }
    }
}

const MACHINE_SET_GAUGES: &[(&str, &str)] = &[
    (
        "mcm_machine_set_info_spec_replicas",
        "Desired replicas of the MachineSet",
    ),
    (
        "mcm_machine_set_info_spec_min_ready_seconds",
        "minReadySeconds of the MachineSet",
    ),
    (
        "mcm_machine_set_status_available_replicas",
        "Available replicas of the MachineSet",
    ),
    (
        "mcm_machine_set_status_fully_labelled_replicas",
        "Fully labelled replicas of the MachineSet",
    ),
    (
        "mcm_machine_set_status_ready_replicas",
        "Ready replicas of the MachineSet",
    ),
    (
        "mcm_machine_set_status_replicas",
        "Current replicas of the MachineSet",
    ),
];

const MACHINE_DEPLOYMENT_GAUGES: &[(&str, &str)] = &[
    (
        "mcm_machine_deployment_info_spec_paused",
        "1 if the MachineDeployment is paused",
    ),
    (
        "mcm_machine_deployment_info_spec_replicas",
        "Desired replicas of the MachineDeployment",
    ),
    (
        "mcm_machine_deployment_info_spec_min_ready_seconds",
        "minReadySeconds of the MachineDeployment",
    ),
    (
        "mcm_machine_deployment_info_spec_rolling_update_max_surge",
        "maxSurge of a RollingUpdate MachineDeployment (percentages count as 0)",
    ),
    (
        "mcm_machine_deployment_info_spec_rolling_update_max_unavailable",
        "maxUnavailable of a RollingUpdate MachineDeployment (percentages count as 0)",
    ),
    (
        "mcm_machine_deployment_info_spec_revision_history_limit",
        "revisionHistoryLimit of the MachineDeployment, if set",
    ),
    (
        "mcm_machine_deployment_info_spec_progress_deadline_seconds",
        "progressDeadlineSeconds of the MachineDeployment, if set",
    ),
    (
        "mcm_machine_deployment_info_spec_rollback_to_revision",
        "rollbackTo.revision of the MachineDeployment, if set",
    ),
    (
        "mcm_machine_deployment_status_available_replicas",
        "Available replicas of the MachineDeployment",
    ),
    (
        "mcm_machine_deployment_status_unavailable_replicas",
        "Unavailable replicas of the MachineDeployment",
    ),
    (
        "mcm_machine_deployment_status_ready_replicas",
        "Ready replicas of the MachineDeployment",
    ),
    (
        "mcm_machine_deployment_status_updated_replicas",
        "Updated replicas of the MachineDeployment",
    ),
    (
        "mcm_machine_deployment_status_replicas",
        "Current replicas of the MachineDeployment",
    ),
    (
        "mcm_machine_deployment_status_collision_count",
        "collisionCount of the MachineDeployment, if set",
    ),
];

/// A hook run before every scrape, typically refreshing snapshot metrics from a cache.
pub type ScrapeHook = Box<dyn Fn(&Metrics) + Send + Sync>;

struct Inner {
    /// Upstream machine-controller-manager's series (`--port`).
    manager_registry: Registry,
    /// Upstream machine-controller's series (`--machine-metrics-port`).
    machine_registry: Registry,
    scrape_hooks: Mutex<Vec<ScrapeHook>>,

    // §9.1, scrape time.
    machine_items: Gauge,
    machine_phase: Family<ObjectLabels, Gauge>,
    machine_frozen: Gauge,
    machine_info: Family<MachineInfoLabels, Gauge>,
    machine_condition: Family<ConditionLabels, Gauge>,
    // §9.1, event driven.
    machine_create_duration: Family<MachineDurationLabels, FloatGauge>,
    machine_initialize_duration: Family<MachineDurationLabels, FloatGauge>,
    machine_join_duration: Family<MachineDurationLabels, FloatGauge>,
    machine_drain_duration: Family<DrainLabels, FloatGauge>,
    machine_delete_duration: Family<MachineDurationLabels, FloatGauge>,
    machine_failed_join: Family<MachineDurationLabels, Gauge>,
    driver_request_duration: HistogramFamily<ProviderOperationLabels>,
    driver_requests_failed: Family<ProviderOperationErrorLabels, Counter>,
    scrape_failures: Family<ScrapeFailureLabels, Counter>,
    // §9.2.
    stale_machines: Counter,
    machine_set_items: Gauge,
    machine_set_info: Family<MachineSetInfoLabels, Gauge>,
    machine_set_condition: Family<ConditionLabels, Gauge>,
    machine_set_failed_machines: Family<FailedMachineLabels, Gauge>,
    machine_set_gauges: ObjectGauges,
    machine_deployment_items: Gauge,
    machine_deployment_info: Family<MachineDeploymentInfoLabels, Gauge>,
    machine_deployment_condition: Family<ConditionLabels, Gauge>,
    machine_deployment_failed_machines: Family<FailedMachineLabels, Gauge>,
    machine_deployment_gauges: ObjectGauges,
    // Ours.
    driver_call_duration: HistogramFamily<MethodCodeLabels>,
    driver_retries: Family<MethodLabels, Counter>,
    driver_retry_backoff: Family<MethodLabels, FloatGauge>,
    volume_reattach: Family<ResultLabels, Counter>,
    // client-go's leader-election gauge (component-base), on both ports.
    leader: Family<LeaseLabels, Gauge>,
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

fn register<M>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M
where
    M: prometheus_client::registry::Metric + Clone,
{
    registry.register(name, help, metric.clone());
    metric
}

impl Metrics {
    /// A registry with every metric registered and no values yet.
    pub fn new() -> Self {
        let mut r = Registry::default();
        let mut m = Registry::default();
        for registry in [&mut r, &mut m] {
            registry.register_collector(Box::new(ProcessCollector));
        }
        let inner = Inner {
            machine_items: register(
                &mut m,
                "mcm_machine_items_total",
                "Count of machines currently managed by the mcm",
                Gauge::default(),
            ),
            machine_phase: register(
                &mut m,
                "mcm_machine_current_status_phase",
                "Current phase of the machine: Terminating -4, Failed -3, CrashLoopBackOff -2, Unknown -1, Pending 0, Running 1 (other phases 0)",
                Family::default(),
            ),
            machine_frozen: register(
                &mut m,
                "mcm_machine_controller_frozen",
                "1 if the machine controller is frozen by the API server safety check, else 0",
                Gauge::default(),
            ),
            machine_info: register(
                &mut m,
                "mcm_machine_info",
                "Information of the machines managed by the mcm (always 1)",
                Family::default(),
            ),
            machine_condition: register(
                &mut m,
                "mcm_machine_status_condition",
                "Status conditions of the machines: True 1, False 0, Unknown 2",
                Family::default(),
            ),
            machine_create_duration: register(
                &mut m,
                "mcm_machine_create_duration_seconds",
                "Seconds from creation of the Machine object to a successful CreateMachine call",
                Family::default(),
            ),
            machine_initialize_duration: register(
                &mut m,
                "mcm_machine_initialize_duration_seconds",
                "Seconds from creation of the Machine object to a successful InitializeMachine call",
                Family::default(),
            ),
            machine_join_duration: register(
                &mut m,
                "mcm_machine_join_duration_seconds",
                "Seconds from creation of the Machine object until it first became Running",
                Family::default(),
            ),
            machine_drain_duration: register(
                &mut m,
                "mcm_machine_drain_duration_seconds",
                "Seconds a successful drain of the machine's node took",
                Family::default(),
            ),
            machine_delete_duration: register(
                &mut m,
                "mcm_machine_delete_duration_seconds",
                "Seconds from the deletion timestamp to a successful DeleteMachine call",
                Family::default(),
            ),
            machine_failed_join: register(
                &mut m,
                "mcm_machine_num_failed_join",
                "Machines that failed to join before the creation timeout (monotonic; a gauge only because OpenMetrics requires counters to end in _total)",
                Family::default(),
            ),
            driver_request_duration: register(
                &mut m,
                "mcm_cloud_api_driver_request_duration_seconds",
                "Duration of driver calls by provider and operation",
                histogram_family(default_buckets),
            ),
            driver_requests_failed: register(
                &mut m,
                "mcm_cloud_api_driver_requests_failed",
                "Failed driver calls by provider, operation and error code",
                Family::default(),
            ),
            scrape_failures: {
                let help = "Failures to list objects while collecting metrics";
                let family = register(&mut r, "mcm_misc_scrape_failure", help, Family::default());
                m.register("mcm_misc_scrape_failure", help, family.clone());
                family
            },
            stale_machines: register(
                &mut r,
                "mcm_machine_stale_machines",
                "Failed machines (health check) deleted by MachineSets",
                Counter::default(),
            ),
            machine_set_items: register(
                &mut r,
                "mcm_machine_set_items_total",
                "Count of MachineSets in the control namespace",
                Gauge::default(),
            ),
            machine_set_info: register(
                &mut r,
                "mcm_machine_set_info",
                "Information of the MachineSets (always 1)",
                Family::default(),
            ),
            machine_set_condition: register(
                &mut r,
                "mcm_machine_set_status_condition",
                "Status conditions of the MachineSets: True 1, False 0, Unknown 2",
                Family::default(),
            ),
            machine_set_failed_machines: register(
                &mut r,
                "mcm_machine_set_failed_machines",
                "Failed machines of the MachineSets (always 1)",
                Family::default(),
            ),
            machine_set_gauges: ObjectGauges::register(&mut r, MACHINE_SET_GAUGES),
            machine_deployment_items: register(
                &mut r,
                "mcm_machine_deployment_items_total",
                "Count of MachineDeployments in the control namespace",
                Gauge::default(),
            ),
            machine_deployment_info: register(
                &mut r,
                "mcm_machine_deployment_info",
                "Information of the MachineDeployments (always 1)",
                Family::default(),
            ),
            machine_deployment_condition: register(
                &mut r,
                "mcm_machine_deployment_status_condition",
                "Status conditions of the MachineDeployments: True 1, False 0, Unknown 2",
                Family::default(),
            ),
            machine_deployment_failed_machines: register(
                &mut r,
                "mcm_machine_deployment_failed_machines",
                "Failed machines of the MachineDeployments (always 1)",
                Family::default(),
            ),
            machine_deployment_gauges: ObjectGauges::register(&mut r, MACHINE_DEPLOYMENT_GAUGES),
            driver_call_duration: register(
                &mut m,
                "mcm_driver_call_duration_seconds",
                "Duration of gRPC driver calls by method and result code",
                histogram_family(latency_buckets),
            ),
            driver_retries: register(
                &mut m,
                "mcm_machine_driver_retries",
                "Failed CreateMachine/InitializeMachine/DeleteMachine calls that were scheduled for a retry with backoff, by method",
                Family::default(),
            ),
            driver_retry_backoff: register(
                &mut m,
                "mcm_machine_driver_retry_backoff_seconds",
                "Backoff delay chosen after the most recent failed driver call, by method",
                Family::default(),
            ),
            volume_reattach: register(
                &mut m,
                "mcm_drain_volume_reattach",
                "Re-attach waits of evicted pods' volumes during drains, by result (reattached, timeout)",
                Family::default(),
            ),
            leader: {
                let help = "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease.";
                let family = register(
                    &mut r,
                    "leader_election_master_status",
                    help,
                    Family::default(),
                );
                m.register("leader_election_master_status", help, family.clone());
                family
            },
            manager_queues: QueueMetrics::register(&mut r),
            machine_queues: QueueMetrics::register(&mut m),
            manager_registry: r,
            machine_registry: m,
            scrape_hooks: Mutex::new(Vec::new()),
        };
        Self(Arc::new(inner))
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
    /// ([`CONTENT_TYPE`]).
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
        self.0
            .leader
            .get_or_create(&LeaseLabels {
                name: lease.to_owned(),
            })
            .set(i64::from(leading));
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
            let families = self.queues(name);
            let labels = QueueLabels::of(name);
            let _ = families.adds.get_or_create(&labels);
            let _ = families.retries.get_or_create(&labels);
            let _ = families.depth.get_or_create(&labels);
            let _ = families.unfinished.get_or_create(&labels);
            let _ = families.longest.get_or_create(&labels);
        }
        if manager_share {
            for kind in [ScrapeKind::MachineSet, ScrapeKind::MachineDeployment] {
                let _ = self.0.scrape_failures.get_or_create(&kind.labels());
            }
        }
        if machine_share {
            let _ = self
                .0
                .scrape_failures
                .get_or_create(&ScrapeKind::Machine.labels());
            for method in ["CreateMachine", "InitializeMachine", "DeleteMachine"] {
                let _ = self.0.driver_retries.get_or_create(&MethodLabels {
                    method: method.to_owned(),
                });
            }
            for result in ["reattached", "timeout"] {
                let _ = self.0.volume_reattach.get_or_create(&ResultLabels {
                    result: result.to_owned(),
                });
            }
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
        self.0
            .machine_create_duration
            .get_or_create(labels)
            .set(seconds.round());
    }

    /// After a successful InitializeMachine: seconds since the Machine's creation timestamp.
    pub fn machine_initialized(&self, labels: &MachineDurationLabels, seconds: f64) {
        self.0
            .machine_initialize_duration
            .get_or_create(labels)
            .set(seconds.round());
    }

    /// When a machine first becomes Running after creation: seconds since its creation timestamp.
    pub fn machine_joined(&self, labels: &MachineDurationLabels, seconds: f64) {
        self.0
            .machine_join_duration
            .get_or_create(labels)
            .set(seconds.round());
    }

    /// After a successful drain (deletion, in-place update or preservation): its duration.
    pub fn machine_drained(&self, labels: &DrainLabels, seconds: f64) {
        self.0
            .machine_drain_duration
            .get_or_create(labels)
            .set(seconds.round());
    }

    /// After a successful DeleteMachine: seconds since the deletion timestamp.
    pub fn machine_deleted(&self, labels: &MachineDurationLabels, seconds: f64) {
        self.0
            .machine_delete_duration
            .get_or_create(labels)
            .set(seconds.round());
    }

    /// A failed CreateMachine, InitializeMachine or DeleteMachine call was scheduled for a retry
    /// after `seconds` of backoff (issue 14).
    pub fn driver_retry_backoff(&self, method: &str, seconds: f64) {
        let labels = MethodLabels {
            method: method.to_owned(),
        };
        self.0.driver_retries.get_or_create(&labels).inc();
        self.0
            .driver_retry_backoff
            .get_or_create(&labels)
            .set(seconds);
    }

    /// A drain's wait for an evicted pod's volumes to be attached elsewhere ended: `result` is
    /// `reattached` or `timeout` (`--machine-pv-reattach-timeout`).
    pub fn volume_reattach(&self, result: &str) {
        self.0
            .volume_reattach
            .get_or_create(&ResultLabels {
                result: result.to_owned(),
            })
            .inc();
    }

    /// A Pending machine turned Failed because the creation timeout passed.
    pub fn machine_failed_join(&self, labels: &MachineDurationLabels) {
        self.0.machine_failed_join.get_or_create(labels).inc();
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
        self.0
            .driver_call_duration
            .get_or_create(&MethodCodeLabels {
                method: method.to_owned(),
                code: code.to_owned(),
            })
            .observe(seconds);
        self.0
            .driver_request_duration
            .get_or_create(&ProviderOperationLabels {
                provider: provider.to_owned(),
                operation: method.to_owned(),
            })
            .observe(seconds);
        if code != "OK" {
            self.0
                .driver_requests_failed
                .get_or_create(&ProviderOperationErrorLabels {
                    provider: provider.to_owned(),
                    operation: method.to_owned(),
                    error_code: code.to_owned(),
                })
                .inc();
        }
    }

    /// Listing objects for the scrape-time metrics failed.
    pub fn scrape_failed(&self, kind: ScrapeKind) {
        self.0.scrape_failures.get_or_create(&kind.labels()).inc();
    }

    /// The API server safety check froze (`true`) or unfroze (`false`) the machine controller.
    pub fn set_machine_controller_frozen(&self, frozen: bool) {
        self.0.machine_frozen.set(i64::from(frozen));
    }

    // ----- snapshots ---------------------------------------------------------------------------

    /// Replaces the scrape-time machine metrics with `machines` (all machines of the namespace).
    pub fn replace_machines(&self, machines: &[MachineSample]) {
        let inner = &self.0;
        inner.machine_phase.clear();
        inner.machine_info.clear();
        inner.machine_condition.clear();
        inner
            .machine_items
            .set(i64::try_from(machines.len()).unwrap_or(i64::MAX));
        for machine in machines {
            let object = ObjectLabels {
                name: machine.name.clone(),
                namespace: machine.namespace.clone(),
            };
            inner
                .machine_phase
                .get_or_create(&object)
                .set(phase_value(&machine.phase));
            inner
                .machine_info
                .get_or_create(&MachineInfoLabels {
                    name: machine.name.clone(),
                    namespace: machine.namespace.clone(),
                    createdAt: machine.created_at.to_string(),
                    spec_provider_id: machine.provider_id.clone(),
                    spec_class_api_group: machine.class_api_group.clone(),
                    spec_class_kind: machine.class_kind.clone(),
                    spec_class_name: machine.class_name.clone(),
                    node_name: machine.node_name.clone(),
                })
                .set(1);
            set_conditions(&inner.machine_condition, &object, &machine.conditions);
        }
    }

    /// Replaces the scrape-time MachineSet metrics with `machine_sets`.
    pub fn replace_machine_sets(&self, machine_sets: &[MachineSetSample]) {
        let inner = &self.0;
        inner.machine_set_info.clear();
        inner.machine_set_condition.clear();
        inner.machine_set_failed_machines.clear();
        inner.machine_set_gauges.clear();
        inner
            .machine_set_items
            .set(i64::try_from(machine_sets.len()).unwrap_or(i64::MAX));
        for set in machine_sets {
            let object = ObjectLabels {
                name: set.name.clone(),
                namespace: set.namespace.clone(),
            };
            inner
                .machine_set_info
                .get_or_create(&MachineSetInfoLabels {
                    name: set.name.clone(),
                    namespace: set.namespace.clone(),
                    createdAt: set.created_at.to_string(),
                    spec_machine_class_api_group: set.class_api_group.clone(),
                    spec_machine_class_kind: set.class_kind.clone(),
                    spec_machine_class_name: set.class_name.clone(),
                })
                .set(1);
            let gauges = &inner.machine_set_gauges;
            for (metric, value) in [
                ("mcm_machine_set_info_spec_replicas", set.spec_replicas),
                (
                    "mcm_machine_set_info_spec_min_ready_seconds",
                    set.min_ready_seconds,
                ),
                (
                    "mcm_machine_set_status_available_replicas",
                    set.available_replicas,
                ),
                (
                    "mcm_machine_set_status_fully_labelled_replicas",
                    set.fully_labelled_replicas,
                ),
                ("mcm_machine_set_status_ready_replicas", set.ready_replicas),
                ("mcm_machine_set_status_replicas", set.replicas),
            ] {
                gauges.set(metric, &object, value);
            }
            set_conditions(&inner.machine_set_condition, &object, &set.conditions);
            set_failed_machines(
                &inner.machine_set_failed_machines,
                &object,
                &set.failed_machines,
            );
        }
    }

    /// Replaces the scrape-time MachineDeployment metrics with `deployments`.
    pub fn replace_machine_deployments(&self, deployments: &[MachineDeploymentSample]) {
        let inner = &self.0;
        inner.machine_deployment_info.clear();
        inner.machine_deployment_condition.clear();
        inner.machine_deployment_failed_machines.clear();
        inner.machine_deployment_gauges.clear();
        inner
            .machine_deployment_items
            .set(i64::try_from(deployments.len()).unwrap_or(i64::MAX));
        for deployment in deployments {
            let object = ObjectLabels {
                name: deployment.name.clone(),
                namespace: deployment.namespace.clone(),
            };
            inner
                .machine_deployment_info
                .get_or_create(&MachineDeploymentInfoLabels {
                    name: deployment.name.clone(),
                    namespace: deployment.namespace.clone(),
                    createdAt: deployment.created_at.to_string(),
                    spec_strategy_type: deployment.strategy_type.clone(),
                })
                .set(1);
            let gauges = &inner.machine_deployment_gauges;
            let always = [
                (
                    "mcm_machine_deployment_info_spec_paused",
                    i64::from(deployment.paused),
                ),
                (
                    "mcm_machine_deployment_info_spec_replicas",
                    deployment.spec_replicas,
                ),
                (
                    "mcm_machine_deployment_info_spec_min_ready_seconds",
                    deployment.min_ready_seconds,
                ),
                (
                    "mcm_machine_deployment_status_available_replicas",
                    deployment.available_replicas,
                ),
                (
                    "mcm_machine_deployment_status_unavailable_replicas",
                    deployment.unavailable_replicas,
                ),
                (
                    "mcm_machine_deployment_status_ready_replicas",
                    deployment.ready_replicas,
                ),
                (
                    "mcm_machine_deployment_status_updated_replicas",
                    deployment.updated_replicas,
                ),
                (
                    "mcm_machine_deployment_status_replicas",
                    deployment.replicas,
                ),
            ];
            let optional = [
                (
                    "mcm_machine_deployment_info_spec_rolling_update_max_surge",
                    deployment.rolling_update.map(|(surge, _)| surge),
                ),
                (
                    "mcm_machine_deployment_info_spec_rolling_update_max_unavailable",
                    deployment
                        .rolling_update
                        .map(|(_, unavailable)| unavailable),
                ),
                (
                    "mcm_machine_deployment_info_spec_revision_history_limit",
                    deployment.revision_history_limit,
                ),
                (
                    "mcm_machine_deployment_info_spec_progress_deadline_seconds",
                    deployment.progress_deadline_seconds,
                ),
                (
                    "mcm_machine_deployment_info_spec_rollback_to_revision",
                    deployment.rollback_to_revision,
                ),
                (
                    "mcm_machine_deployment_status_collision_count",
                    deployment.collision_count,
                ),
            ];
            for (metric, value) in always {
                gauges.set(metric, &object, value);
            }
            for (metric, value) in optional {
                if let Some(value) = value {
                    gauges.set(metric, &object, value);
                }
            }
            set_conditions(
                &inner.machine_deployment_condition,
                &object,
                &deployment.conditions,
            );
            set_failed_machines(
                &inner.machine_deployment_failed_machines,
                &object,
                &deployment.failed_machines,
            );
        }
    }

    // ----- machine set controller, event driven ----------------------------------------------

    /// A MachineSet deleted `count` Failed machines whose last operation was a health check.
    pub fn stale_machines_deleted(&self, count: u64) {
        self.0.stale_machines.inc_by(count);
    }

    // ----- ours -------------------------------------------------------------------------------

    fn queues(&self, queue: &str) -> &QueueMetrics {
        match share_of(queue) {
            Some(Share::MachineController) => &self.0.machine_queues,
            _ => &self.0.manager_queues,
        }
    }

    /// One reconcile of `controller` finished after `duration`.
    pub fn reconcile_finished(&self, controller: &str, duration: std::time::Duration) {
        self.queues(controller)
            .reconcile_duration
            .get_or_create(&ControllerLabels {
                controller: controller.to_owned(),
            })
            .observe(duration.as_secs_f64());
    }

    /// The work queue `queue` now holds `depth` keys.
    pub fn set_workqueue_depth(&self, queue: &str, depth: usize) {
        self.queues(queue)
            .depth
            .get_or_create(&QueueLabels::of(queue))
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
    }

    /// A key entered the work queue `queue` (client-go's `adds`).
    pub fn workqueue_added(&self, queue: &str) {
        self.queues(queue)
            .adds
            .get_or_create(&QueueLabels::of(queue))
            .inc();
    }

    /// A key of `queue` was handed to a worker after waiting `waited`.
    pub fn workqueue_started(&self, queue: &str, waited: std::time::Duration) {
        self.queues(queue)
            .queue_duration
            .get_or_create(&QueueLabels::of(queue))
            .observe(waited.as_secs_f64());
    }

    /// A worker of `queue` finished a key after `worked`.
    pub fn workqueue_finished(&self, queue: &str, worked: std::time::Duration) {
        self.queues(queue)
            .work_duration
            .get_or_create(&QueueLabels::of(queue))
            .observe(worked.as_secs_f64());
    }

    /// A key of `queue` was re-added rate limited (client-go's `retries`).
    pub fn workqueue_retried(&self, queue: &str) {
        self.queues(queue)
            .retries
            .get_or_create(&QueueLabels::of(queue))
            .inc();
    }

    /// The work in progress of `queue`: the sum of the running keys' ages and the oldest one's
    /// (client-go's `unfinished_work_seconds` and `longest_running_processor_seconds`).
    pub fn set_workqueue_in_progress(&self, queue: &str, unfinished: f64, longest: f64) {
        let families = self.queues(queue);
        let labels = QueueLabels::of(queue);
        families.unfinished.get_or_create(&labels).set(unfinished);
        families.longest.get_or_create(&labels).set(longest);
    }
}

/// Which exposition a series belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricsPort {
    /// Upstream machine-controller-manager's series, on `--port`.
    ControllerManager,
    /// Upstream machine-controller's series, on `--machine-metrics-port` (Gardener's
    /// `providermetrics` port).
    MachineController,
    /// Both in one exposition.
    Both,
}

/// The work queue families of one port: client-go's workqueue metrics with upstream names
/// (`mcm_` prefix, label `name`; `queue` repeats it for dashboards written against our earlier
/// label) and our reconcile durations.
struct QueueMetrics {
    depth: Family<QueueLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
    queue_duration: HistogramFamily<QueueLabels>,
    work_duration: HistogramFamily<QueueLabels>,
    unfinished: Family<QueueLabels, FloatGauge>,
    longest: Family<QueueLabels, FloatGauge>,
    retries: Family<QueueLabels, Counter>,
    reconcile_duration: HistogramFamily<ControllerLabels>,
}

/// client-go's workqueue latency buckets: 10 ns times powers of ten, ten of them.
fn workqueue_buckets() -> Histogram {
    Histogram::new(exponential_buckets(10e-9, 10.0, 10))
}

impl QueueMetrics {
    fn register(r: &mut Registry) -> Self {
        Self {
            depth: register(
                r,
                "mcm_workqueue_depth",
                "Current depth of workqueue",
                Family::default(),
            ),
            adds: register(
                r,
                "mcm_workqueue_adds",
                "Total number of adds handled by workqueue",
                Family::default(),
            ),
            queue_duration: register(
                r,
                "mcm_workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested",
                histogram_family(workqueue_buckets),
            ),
            work_duration: register(
                r,
                "mcm_workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes",
                histogram_family(workqueue_buckets),
            ),
            unfinished: register(
                r,
                "mcm_workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been observed by work_duration",
                Family::default(),
            ),
            longest: register(
                r,
                "mcm_workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running",
                Family::default(),
            ),
            retries: register(
                r,
                "mcm_workqueue_retries",
                "Total number of retries handled by workqueue",
                Family::default(),
            ),
            reconcile_duration: register(
                r,
                "mcm_reconcile_duration_seconds",
                "Duration of one reconcile by controller",
                histogram_family(latency_buckets),
            ),
        }
    }
}

impl QueueLabels {
    fn of(queue: &str) -> Self {
        Self {
            name: queue.to_owned(),
            queue: queue.to_owned(),
        }
    }
}

/// The families of an exposition (without `# EOF`) as (name, block), each block starting at its
/// `# HELP` line.
fn families(text: &str) -> Vec<(&str, &str)> {
    let mut blocks: Vec<(&str, &str)> = Vec::new();
    let mut start: Option<(&str, usize)> = None;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            if let Some((name, begin)) = start {
                blocks.push((name, &text[begin..offset]));
            }
            let name = rest.split_whitespace().next().unwrap_or_default();
            start = Some((name, offset));
        }
        offset += line.len();
    }
    if let Some((name, begin)) = start {
        blocks.push((name, &text[begin..]));
    }
    blocks
}

/// Two expositions (without `# EOF`) as one: a family present in both keeps its first header
/// and gets the second's samples it lacks; the process families, identical in both, appear once.
fn merge_expositions(first: &str, second: &str) -> String {
    let mut merged: Vec<(&str, String)> = families(first)
        .into_iter()
        .map(|(name, block)| (name, block.to_owned()))
        .collect();
    for (name, block) in families(second) {
        match merged.iter_mut().find(|(known, _)| *known == name) {
            Some(_) if name.starts_with("process_") => {}
            Some((_, existing)) => {
                // Families registered on both ports (scrape failures) hold the same series.
                let samples: Vec<&str> = block
                    .split_inclusive('\n')
                    .filter(|line| {
                        !line.starts_with('#')
                            && !existing.split_inclusive('\n').any(|known| known == *line)
                    })
                    .collect();
                existing.extend(samples);
            }
            None => merged.push((name, block.to_owned())),
        }
    }
    merged.into_iter().map(|(_, block)| block).collect()
}

fn set_conditions(
    family: &Family<ConditionLabels, Gauge>,
    object: &ObjectLabels,
    conditions: &[ConditionSample],
) {
    for condition in conditions {
        family
            .get_or_create(&ConditionLabels {
                name: object.name.clone(),
                namespace: object.namespace.clone(),
                condition: condition.condition_type.clone(),
            })
            .set(condition_value(&condition.status));
    }
}

fn set_failed_machines(
    family: &Family<FailedMachineLabels, Gauge>,
    owner: &ObjectLabels,
    failed: &[FailedMachineSample],
) {
    for machine in failed {
        family
            .get_or_create(&FailedMachineLabels {
                name: owner.name.clone(),
                namespace: owner.namespace.clone(),
                failed_machine_name: machine.name.clone(),
                failed_machine_provider_id: machine.provider_id.clone(),
                failed_machine_owner_ref: machine.owner_ref.clone(),
                failed_machine_last_operation_state: machine.last_operation_state.clone(),
                failed_machine_last_operation_machine_operation_type: machine
                    .last_operation_type
                    .clone(),
            })
            .set(1);
    }
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
