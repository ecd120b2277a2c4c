//! The Machine families of docs/behaviour.md#metrics-mc (machine-controller binary): the scrape-time series
//! replaced from the machine cache (`mcm_machine_items_total`, `_current_status_phase`, `_info`,
//! `_status_condition`), the frozen flag, and the lifecycle durations recorded as they happen
//! (`mcm_machine_{create,initialize,join,drain,delete}_duration_seconds`,
//! `mcm_machine_num_failed_join`).

use std::sync::{Arc, Mutex, MutexGuard};

use mcm_api::v1alpha1::Machine;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

use super::object_series::{ConditionSample, condition_value};
use super::registration::{
    FloatGauge, HistogramFamily, histogram_family, register, rollout_step_buckets,
};

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

impl MachineDurationLabels {
    /// The deployment's part: the labels of the `mcm_rollout_*_seconds` distributions.
    #[must_use]
    pub fn deployment(&self) -> DrainLabels {
        DrainLabels {
            namespace: self.namespace.clone(),
            machine_deployment: self.machine_deployment.clone(),
        }
    }
}

/// Labels of `mcm_machine_drain_duration_seconds` and the `mcm_rollout_*_seconds`
/// distributions.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DrainLabels {
    /// Namespace of the machine.
    pub namespace: String,
    /// Value of the machine's `name` label.
    pub machine_deployment: String,
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

/// The Machine families, registered on the machine-controller's registry.
pub(super) struct MachineFamilies {
    // docs/behaviour.md#metrics-mc, scrape time.
    items: Gauge,
    frozen: Gauge,
    /// `mcm_machine_current_status_phase`, `_info` and `_status_condition`.
    snapshot: MachineSnapshot,
    // docs/behaviour.md#metrics-mc, event driven.
    create_duration: Family<MachineDurationLabels, FloatGauge>,
    initialize_duration: Family<MachineDurationLabels, FloatGauge>,
    join_duration: Family<MachineDurationLabels, FloatGauge>,
    drain_duration: Family<DrainLabels, FloatGauge>,
    delete_duration: Family<MachineDurationLabels, FloatGauge>,
    failed_join: Family<MachineDurationLabels, Gauge>,
    /// Distributions of the same three steps per deployment (ours; upstream's gauges above keep
    /// only the latest value): the rollout preview's estimate range.
    create_seconds: HistogramFamily<DrainLabels>,
    join_seconds: HistogramFamily<DrainLabels>,
    drain_seconds: HistogramFamily<DrainLabels>,
}

impl MachineFamilies {
    /// Registers the families on `m` (in the order they are exposed).
    pub(super) fn register(m: &mut Registry) -> Self {
        Self {
            items: register(
                m,
                "mcm_machine_items_total",
                "Count of machines currently managed by the mcm",
                Gauge::default(),
            ),
            frozen: register(
                m,
                "mcm_machine_controller_frozen",
                "1 if the machine controller is frozen by the API server safety check, else 0",
                Gauge::default(),
            ),
            snapshot: {
                let snapshot = MachineSnapshot::default();
                m.register_collector(Box::new(snapshot.clone()));
                snapshot
            },
            create_duration: register(
                m,
                "mcm_machine_create_duration_seconds",
                "Seconds from creation of the Machine object to a successful CreateMachine call",
                Family::default(),
            ),
            initialize_duration: register(
                m,
                "mcm_machine_initialize_duration_seconds",
                "Seconds from creation of the Machine object to a successful InitializeMachine call",
                Family::default(),
            ),
            join_duration: register(
                m,
                "mcm_machine_join_duration_seconds",
                "Seconds from creation of the Machine object until it first became Running",
                Family::default(),
            ),
            drain_duration: register(
                m,
                "mcm_machine_drain_duration_seconds",
                "Seconds a successful drain of the machine's node took",
                Family::default(),
            ),
            delete_duration: register(
                m,
                "mcm_machine_delete_duration_seconds",
                "Seconds from the deletion timestamp to a successful DeleteMachine call",
                Family::default(),
            ),
            failed_join: register(
                m,
                "mcm_machine_num_failed_join",
                "Machines that failed to join before the creation timeout (monotonic; a gauge only because OpenMetrics requires counters to end in _total)",
                Family::default(),
            ),
            create_seconds: register(
                m,
                "mcm_rollout_create_seconds",
                "Distribution of the seconds from creation of a Machine object to a successful CreateMachine call, per deployment",
                histogram_family(rollout_step_buckets),
            ),
            join_seconds: register(
                m,
                "mcm_rollout_join_seconds",
                "Distribution of the seconds from creation of a Machine object until it first became Running, per deployment",
                histogram_family(rollout_step_buckets),
            ),
            drain_seconds: register(
                m,
                "mcm_rollout_drain_seconds",
                "Distribution of the seconds a successful drain of a machine's node took, per deployment",
                histogram_family(rollout_step_buckets),
            ),
        }
    }

    /// See `Metrics::machine_created`.
    pub(super) fn created(&self, labels: &MachineDurationLabels, seconds: f64) {
        self.create_duration
            .get_or_create(labels)
            .set(seconds.round());
        self.create_seconds
            .get_or_create(&labels.deployment())
            .observe(seconds);
    }

    /// See `Metrics::machine_initialized`.
    pub(super) fn initialized(&self, labels: &MachineDurationLabels, seconds: f64) {
        self.initialize_duration
            .get_or_create(labels)
            .set(seconds.round());
    }

    /// See `Metrics::machine_joined`.
    pub(super) fn joined(&self, labels: &MachineDurationLabels, seconds: f64) {
        self.join_duration
            .get_or_create(labels)
            .set(seconds.round());
        self.join_seconds
            .get_or_create(&labels.deployment())
            .observe(seconds);
    }

    /// See `Metrics::machine_drained`.
    pub(super) fn drained(&self, labels: &DrainLabels, seconds: f64) {
        self.drain_duration
            .get_or_create(labels)
            .set(seconds.round());
        self.drain_seconds.get_or_create(labels).observe(seconds);
    }

    /// See `Metrics::machine_deleted`.
    pub(super) fn deleted(&self, labels: &MachineDurationLabels, seconds: f64) {
        self.delete_duration
            .get_or_create(labels)
            .set(seconds.round());
    }

    /// See `Metrics::machine_failed_join`.
    pub(super) fn failed_join(&self, labels: &MachineDurationLabels) {
        self.failed_join.get_or_create(labels).inc();
    }

    /// See `Metrics::set_machine_controller_frozen`.
    pub(super) fn set_frozen(&self, frozen: bool) {
        self.frozen.set(i64::from(frozen));
    }

    /// See `Metrics::replace_machines`.
    pub(super) fn replace(&self, machines: Vec<MachineSample>) {
        self.items
            .set(i64::try_from(machines.len()).unwrap_or(i64::MAX));
        *self.snapshot.lock() = machines;
    }

    /// Drops the snapshot once a scrape has encoded it.
    pub(super) fn scraped(&self) {
        *self.snapshot.lock() = Vec::new();
    }
}

/// The per-machine series of the latest snapshot, encoded straight from it at the scrape and
/// dropped after it (`MachineFamilies::scraped`). Families would keep every series' label strings
/// and their hash tables between scrapes: 5.5 MiB of the manager's memory at 2,000 machines
/// (docs/performance.md).
#[derive(Clone, Debug, Default)]
struct MachineSnapshot(Arc<Mutex<Vec<MachineSample>>>);

impl MachineSnapshot {
    fn lock(&self) -> MutexGuard<'_, Vec<MachineSample>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The `name` and `namespace` labels of `machine`.
fn object(machine: &MachineSample) -> [(&'static str, &str); 2] {
    [
        ("name", machine.name.as_str()),
        ("namespace", machine.namespace.as_str()),
    ]
}

/// Encodes one gauge series of `labels`.
fn gauge_series(
    family: &mut prometheus_client::encoding::MetricEncoder,
    labels: &impl EncodeLabelSet,
    value: i64,
) -> Result<(), std::fmt::Error> {
    ConstGauge::new(value).encode(family.encode_family(labels)?)
}

impl Collector for MachineSnapshot {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let machines = self.lock();
        // As an empty family, nothing is exposed without machines.
        if machines.is_empty() {
            return Ok(());
        }
        {
            let mut family = encoder.encode_descriptor(
                "mcm_machine_current_status_phase",
                "Current phase of the machine: Terminating -4, Failed -3, CrashLoopBackOff -2, Unknown -1, Pending 0, Running 1 (other phases 0)",
                None,
                MetricType::Gauge,
            )?;
            for machine in machines.iter() {
                gauge_series(&mut family, &object(machine), phase_value(&machine.phase))?;
            }
        }
        {
            let mut family = encoder.encode_descriptor(
                "mcm_machine_info",
                "Information of the machines managed by the mcm (always 1)",
                None,
                MetricType::Gauge,
            )?;
            for machine in machines.iter() {
                let labels = (
                    object(machine),
                    (
                        [("createdAt", machine.created_at)],
                        [
                            ("spec_provider_id", machine.provider_id.as_str()),
                            ("spec_class_api_group", machine.class_api_group.as_str()),
                            ("spec_class_kind", machine.class_kind.as_str()),
                            ("spec_class_name", machine.class_name.as_str()),
                            ("node_name", machine.node_name.as_str()),
                        ],
                    ),
                );
                gauge_series(&mut family, &labels, 1)?;
            }
        }
        if machines
            .iter()
            .any(|machine| !machine.conditions.is_empty())
        {
            let mut family = encoder.encode_descriptor(
                "mcm_machine_status_condition",
                "Status conditions of the machines: True 1, False 0, Unknown 2",
                None,
                MetricType::Gauge,
            )?;
            for machine in machines.iter() {
                for condition in &machine.conditions {
                    let labels = (
                        object(machine),
                        [("condition", condition.condition_type.as_str())],
                    );
                    gauge_series(&mut family, &labels, condition_value(&condition.status))?;
                }
            }
        }
        Ok(())
    }
}
