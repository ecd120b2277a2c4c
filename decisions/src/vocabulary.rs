//! Shared vocabulary of the machine plans: retry periods, events, status writes, the "similar
//! status" rule that suppresses redundant writes (§3.3), effective per-machine settings (§3.15),
//! driver error classification (§8.4) and small parsing helpers.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{NodeAddress, NodeCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use mcm_api::duration::Duration;
use mcm_api::keys::{annotation, retry};
use mcm_api::v1alpha1::{
    CurrentStatus, LastOperation, Machine, MachineOperationType, MachinePhase, MachineState,
    MachineStatus,
};
use mcm_provider_proto::{Code, MachineError};

/// Upstream default of `--node-conditions`.
pub const DEFAULT_NODE_CONDITIONS: &str =
    "KernelDeadlock,ReadonlyFilesystem,DiskPressure,NetworkUnavailable";

/// How long after a status write the "similar status" suppression stops applying (§3.3).
pub const SIMILARITY_FRESHNESS: SignedDuration = SignedDuration::from_mins(30);

/// Descriptions are treated as equal above this Levenshtein similarity ratio (§3.3).
pub const SIMILARITY_RATIO: f64 = 0.75;

/// When the next reconcile of the machine is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Right away (upstream returns a zero period, e.g. after skipping the volume-attachment
    /// stage).
    Immediate,
    /// After an API conflict: 200ms.
    Conflict,
    /// After a successful write or a transient error: 5s.
    Short,
    /// 3m.
    Medium,
    /// Steady state: 10m.
    Long,
    /// A computed period (a deadline, `--resource-exhausted-retry`, the 1-minute health poll).
    After(Duration),
}

impl Retry {
    /// The period as a duration.
    #[must_use]
    pub fn period(self) -> Duration {
        match self {
            Retry::Immediate => Duration::ZERO,
            Retry::Conflict => retry::CONFLICT,
            Retry::Short => retry::SHORT,
            Retry::Medium => retry::MEDIUM,
            Retry::Long => retry::LONG,
            Retry::After(period) => period,
        }
    }

    /// The earlier of two retries (a pass that produced several wishes honours the soonest).
    #[must_use]
    pub fn min(self, other: Retry) -> Retry {
        if other.period() < self.period() {
            other
        } else {
            self
        }
    }
}

/// Kubernetes event type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

impl EventType {
    /// The wire value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// An event to record on the object the plan is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Normal or Warning.
    pub type_: EventType,
    /// CamelCase reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

impl Event {
    /// A `Normal` event.
    #[must_use]
    pub fn normal(reason: &str, message: impl Into<String>) -> Self {
        Self {
            type_: EventType::Normal,
            reason: reason.to_owned(),
            message: message.into(),
        }
    }

    /// A `Warning` event.
    #[must_use]
    pub fn warning(reason: &str, message: impl Into<String>) -> Self {
        Self {
            type_: EventType::Warning,
            reason: reason.to_owned(),
            message: message.into(),
        }
    }
}

/// A write of `machine.status` (through the status subresource).
///
/// `last_operation` and `current_status` replace the old values; `None` in the other fields means
/// "keep what is there".
#[derive(Clone, Debug, PartialEq)]
pub struct StatusWrite {
    /// New `status.lastOperation`.
    pub last_operation: LastOperation,
    /// New `status.currentStatus`.
    pub current_status: CurrentStatus,
    /// New `status.lastKnownState` (`Some("")` clears it).
    pub last_known_state: Option<String>,
    /// New `status.addresses` (only written without a target cluster).
    pub addresses: Option<Vec<NodeAddress>>,
    /// New `status.conditions` (copied from the Node by the health check).
    pub conditions: Option<Vec<NodeCondition>>,
    /// Skip the write when the result is "similar" to the current status (§3.3); upstream's
    /// `machineStatusUpdate`. Termination and health writes always go through.
    pub skip_if_similar: bool,
}

impl StatusWrite {
    /// A write of lastOperation and currentStatus only.
    #[must_use]
    pub fn new(last_operation: LastOperation, current_status: CurrentStatus) -> Self {
        Self {
            last_operation,
            current_status,
            last_known_state: None,
            addresses: None,
            conditions: None,
            skip_if_similar: false,
        }
    }

    /// Same, with the similarity check of `machineStatusUpdate`.
    #[must_use]
    pub fn similar_checked(last_operation: LastOperation, current_status: CurrentStatus) -> Self {
        Self {
            skip_if_similar: true,
            ..Self::new(last_operation, current_status)
        }
    }

    /// The status after the write.
    #[must_use]
    pub fn apply(&self, old: Option<&MachineStatus>) -> MachineStatus {
        let mut status = old.cloned().unwrap_or_default();
        status.last_operation = Some(self.last_operation.clone());
        status.current_status = Some(self.current_status.clone());
        if let Some(state) = &self.last_known_state {
            status.last_known_state = Some(state.clone());
        }
        if let Some(addresses) = &self.addresses {
            status.addresses = Some(addresses.clone());
        }
        if let Some(conditions) = &self.conditions {
            status.conditions = Some(conditions.clone());
        }
        status
    }

    /// Whether the shell may skip this write because nothing meaningful would change.
    #[must_use]
    pub fn is_redundant(&self, machine: &Machine, now: Timestamp) -> bool {
        if !self.skip_if_similar {
            return false;
        }
        let Some(old) = machine.status.as_ref() else {
            return false;
        };
        let new = self.apply(Some(old));
        is_status_similar(old, &new, now)
    }
}

/// Converts a timestamp to the Kubernetes wire type.
#[must_use]
pub fn time(at: Timestamp) -> Time {
    Time(at)
}

/// `at + duration`, saturating at the end of representable time.
#[must_use]
pub fn add(at: Timestamp, duration: Duration) -> Timestamp {
    at.checked_add(duration.to_signed_duration())
        .unwrap_or(Timestamp::MAX)
}

/// `later − earlier` as a Go-style duration (for texts and comparisons).
#[must_use]
pub fn elapsed(earlier: Timestamp, later: Timestamp) -> Duration {
    let nanos = later.duration_since(earlier).as_nanos();
    Duration::from_nanos(i64::try_from(nanos).unwrap_or(if nanos < 0 {
        i64::MIN
    } else {
        i64::MAX
    }))
}

/// A `LastOperation` stamped `now`.
#[must_use]
pub fn last_operation(
    description: impl Into<String>,
    state: MachineState,
    type_: MachineOperationType,
    now: Timestamp,
) -> LastOperation {
    LastOperation {
        description: Some(description.into()),
        error_code: None,
        last_update_time: Some(time(now)),
        state: Some(state),
        type_: Some(type_),
    }
}

/// A `CurrentStatus` with the given phase stamped `now`.
#[must_use]
pub fn current_status(
    phase: MachinePhase,
    timeout_active: bool,
    now: Timestamp,
    preserve_expiry_time: Option<Time>,
) -> CurrentStatus {
    CurrentStatus {
        phase: Some(phase),
        timeout_active: Some(timeout_active),
        last_update_time: Some(time(now)),
        preserve_expiry_time,
    }
}

/// The machine's current status, or an empty one.
#[must_use]
pub fn current_of(machine: &Machine) -> CurrentStatus {
    machine
        .status
        .as_ref()
        .and_then(|status| status.current_status.clone())
        .unwrap_or_default()
}

/// The machine's phase; `None` for "not created yet" (absent or empty text).
#[must_use]
pub fn phase_of(machine: &Machine) -> Option<MachinePhase> {
    machine
        .phase()
        .filter(|phase| !phase.as_str().is_empty())
        .cloned()
}

/// `status.currentStatus.preserveExpiryTime`.
#[must_use]
pub fn preserve_expiry_of(machine: &Machine) -> Option<Time> {
    machine
        .status
        .as_ref()
        .and_then(|status| status.current_status.as_ref())
        .and_then(|current| current.preserve_expiry_time.clone())
}

/// `status.lastOperation.description` (empty when absent).
#[must_use]
pub fn description_of(machine: &Machine) -> &str {
    machine
        .last_operation()
        .and_then(|operation| operation.description.as_deref())
        .unwrap_or("")
}

/// `status.lastOperation.type`.
#[must_use]
pub fn operation_type_of(machine: &Machine) -> Option<MachineOperationType> {
    machine
        .last_operation()
        .and_then(|operation| operation.type_.clone())
}

/// `status.lastKnownState` (empty when absent).
#[must_use]
pub fn last_known_state_of(machine: &Machine) -> String {
    machine
        .status
        .as_ref()
        .and_then(|status| status.last_known_state.clone())
        .unwrap_or_default()
}

/// A label of the machine.
#[must_use]
pub fn label<'a>(machine: &'a Machine, key: &str) -> Option<&'a str> {
    machine
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(key))
        .map(String::as_str)
}

/// An annotation of the machine.
#[must_use]
pub fn machine_annotation<'a>(machine: &'a Machine, key: &str) -> Option<&'a str> {
    machine
        .metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(key))
        .map(String::as_str)
}

/// The machine name (empty when missing; the API server never serves such objects).
#[must_use]
pub fn name_of(machine: &Machine) -> &str {
    machine.metadata.name.as_deref().unwrap_or("")
}

/// The node label value, `None` when absent or empty.
#[must_use]
pub fn node_name_of(machine: &Machine) -> Option<&str> {
    machine.node_name().filter(|name| !name.is_empty())
}

/// `spec.providerID`, `None` when absent or empty.
#[must_use]
pub fn provider_id_of(machine: &Machine) -> Option<&str> {
    machine
        .spec
        .provider_id
        .as_deref()
        .filter(|provider_id| !provider_id.is_empty())
}

/// Whether the machine carries a finalizer.
#[must_use]
pub fn has_finalizer(machine: &Machine, finalizer: &str) -> bool {
    machine
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|finalizers| finalizers.iter().any(|f| f == finalizer))
}

/// Byte-based Levenshtein distance (upstream compares Go strings, which are bytes).
#[must_use]
pub fn levenshtein(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for (i, &byte_a) in a.iter().enumerate() {
        current[0] = i + 1;
        for (j, &byte_b) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(byte_a != byte_b);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

/// `1 − distance / mean length`; identical texts (including two empty ones) are 1.
#[must_use]
pub fn similarity_ratio(a: &str, b: &str) -> f64 {
    if a == b {
        return 1.0;
    }
    #[allow(clippy::cast_precision_loss)]
    let mean = (a.len() + b.len()) as f64 / 2.0;
    #[allow(clippy::cast_precision_loss)]
    let distance = levenshtein(a, b) as f64;
    1.0 - distance / mean
}

/// Upstream `isMachineStatusSimilar`: both lastOperation timestamps are younger than 30 minutes,
/// the descriptions are more than 75% similar, and everything else of lastOperation and
/// currentStatus is equal ignoring the two `lastUpdateTime` fields. `lastKnownState`, addresses and
/// conditions are not compared (as upstream).
#[must_use]
pub fn is_status_similar(old: &MachineStatus, new: &MachineStatus, now: Timestamp) -> bool {
    let fresh = |operation: Option<&LastOperation>| {
        operation
            .and_then(|operation| operation.last_update_time.as_ref())
            .is_some_and(|at| at.0 >= now - SIMILARITY_FRESHNESS)
    };
    if !fresh(old.last_operation.as_ref()) || !fresh(new.last_operation.as_ref()) {
        return false;
    }
    let old_operation = old.last_operation.clone().unwrap_or_default();
    let new_operation = new.last_operation.clone().unwrap_or_default();
    let old_text = old_operation.description.clone().unwrap_or_default();
    let new_text = new_operation.description.clone().unwrap_or_default();
    if similarity_ratio(&old_text, &new_text) <= SIMILARITY_RATIO {
        return false;
    }
    let strip_operation = |operation: LastOperation| LastOperation {
        description: None,
        last_update_time: None,
        ..operation
    };
    let strip_current = |current: Option<CurrentStatus>| CurrentStatus {
        last_update_time: None,
        ..current.unwrap_or_default()
    };
    strip_operation(old_operation) == strip_operation(new_operation)
        && strip_current(old.current_status.clone()) == strip_current(new.current_status.clone())
}

/// Go's `strconv.ParseBool`: `None` for text it rejects.
#[must_use]
pub fn parse_go_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Controller-wide settings (flags of reference §7.2) the plans need.
#[derive(Clone, Debug, PartialEq)]
pub struct ControllerSettings {
    /// `--machine-creation-timeout` (20m).
    pub creation_timeout: Duration,
    /// `--machine-health-timeout` (10m).
    pub health_timeout: Duration,
    /// `--machine-drain-timeout` (2h).
    pub drain_timeout: Duration,
    /// `--machine-inplace-update-timeout` (20m).
    pub in_place_update_timeout: Duration,
    /// `--machine-preserve-timeout` (96h).
    pub preserve_timeout: Duration,
    /// `--machine-max-evict-retries` (360).
    pub max_evict_retries: i32,
    /// `--node-conditions`.
    pub node_conditions: String,
    /// `--machine-pv-detach-timeout` (2m).
    pub pv_detach_timeout: Duration,
    /// `--machine-pv-reattach-timeout` (90s).
    pub pv_reattach_timeout: Duration,
    /// `--resource-exhausted-retry` (10m; 0 means LongRetry).
    pub resource_exhausted_retry: Duration,
    /// `--machine-retry-backoff-{initial,factor,max}` (5s, 2, 60s): backoff of failing
    /// CreateMachine, InitializeMachine and DeleteMachine calls.
    pub retry_backoff: BackoffSettings,
    /// `--machine-meltdown-threshold` (0 = off): share of a deployment's (or zone's) machines
    /// Unknown/Failed above which unhealthy machines are not replaced.
    pub meltdown_threshold: f64,
    /// `--bootstrap-token-auth-extra-groups`.
    pub bootstrap_token_auth_extra_groups: String,
    /// False with `--target-kubeconfig=none`.
    pub target_cluster: bool,
}

impl Default for ControllerSettings {
    fn default() -> Self {
        Self {
            creation_timeout: Duration::from_mins(20),
            health_timeout: Duration::from_mins(10),
            drain_timeout: Duration::from_hours(2),
            in_place_update_timeout: Duration::from_mins(20),
            preserve_timeout: Duration::from_hours(96),
            max_evict_retries: 360,
            node_conditions: DEFAULT_NODE_CONDITIONS.to_owned(),
            pv_detach_timeout: Duration::from_mins(2),
            pv_reattach_timeout: Duration::from_secs(90),
            resource_exhausted_retry: Duration::from_mins(10),
            retry_backoff: BackoffSettings::default(),
            meltdown_threshold: 0.0,
            bootstrap_token_auth_extra_groups: String::new(),
            target_cluster: true,
        }
    }
}

/// Per-machine settings after resolution (§3.15).
#[derive(Clone, Debug, PartialEq)]
pub struct EffectiveSettings {
    /// Creation timeout: machine annotation, then `spec.creationTimeout`, then the flag.
    pub creation_timeout: Duration,
    /// Health timeout.
    pub health_timeout: Duration,
    /// Drain timeout.
    pub drain_timeout: Duration,
    /// In-place update timeout.
    pub in_place_update_timeout: Duration,
    /// Preserve timeout.
    pub preserve_timeout: Duration,
    /// Max evict retries before capping to `drainTimeout / 20s`.
    pub max_evict_retries: i32,
    /// Node condition types that must be `False` for a healthy node (split on `,`, no trimming).
    pub node_conditions: Vec<String>,
    /// `spec.disableHealthTimeout`.
    pub disable_health_timeout: bool,
    /// Problems found while resolving (an unparsable annotation); the shell logs them.
    pub warnings: Vec<String>,
}

/// Resolves the effective settings of one machine: machine spec fields override the flags; the
/// `effective-creation-timeout` annotation overrides both for the creation timeout (an unparsable
/// value is ignored with a warning).
#[must_use]
pub fn effective_settings(machine: &Machine, settings: &ControllerSettings) -> EffectiveSettings {
    let config = &machine.spec.configuration;
    let mut warnings = Vec::new();
    let annotated_creation_timeout =
        machine_annotation(machine, annotation::EFFECTIVE_CREATION_TIMEOUT).and_then(|text| {
            match text.parse::<Duration>() {
                Ok(duration) => Some(duration),
                Err(error) => {
                    warnings.push(format!(
                        "machine {:?}: ignoring annotation {}: {error}",
                        name_of(machine),
                        annotation::EFFECTIVE_CREATION_TIMEOUT
                    ));
                    None
                }
            }
        });
    let node_conditions = config
        .node_conditions
        .clone()
        .unwrap_or_else(|| settings.node_conditions.clone());
    EffectiveSettings {
        creation_timeout: annotated_creation_timeout
            .or(config.creation_timeout)
            .unwrap_or(settings.creation_timeout),
        health_timeout: config.health_timeout.unwrap_or(settings.health_timeout),
        drain_timeout: config.drain_timeout.unwrap_or(settings.drain_timeout),
        in_place_update_timeout: config
            .in_place_update_timeout
            .unwrap_or(settings.in_place_update_timeout),
        preserve_timeout: config
            .machine_preserve_timeout
            .unwrap_or(settings.preserve_timeout),
        max_evict_retries: config
            .max_evict_retries
            .unwrap_or(settings.max_evict_retries),
        node_conditions: node_conditions.split(',').map(str::to_owned).collect(),
        disable_health_timeout: config.disable_health_timeout.unwrap_or(false),
        warnings,
    }
}

/// A failed driver call as the controller sees it (§8.3/§8.4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DriverError {
    /// The driver answered with a machine code.
    Coded(MachineError),
    /// The error carried no decodable machine code (upstream: the text did not have exactly two
    /// bracket groups; for us: a transport failure the client could not classify).
    Undecodable(String),
}

impl DriverError {
    /// The code, `Unknown` for undecodable errors (as upstream `status.FromError`).
    #[must_use]
    pub fn code(&self) -> Code {
        match self {
            DriverError::Coded(error) => error.code,
            DriverError::Undecodable(_) => Code::Unknown,
        }
    }

    /// Whether the error was decodable.
    #[must_use]
    pub fn is_decodable(&self) -> bool {
        matches!(self, DriverError::Coded(_))
    }

    /// A coded error (test and shell convenience).
    #[must_use]
    pub fn coded(code: Code, message: &str) -> Self {
        DriverError::Coded(MachineError::new(code, message))
    }
}

impl std::fmt::Display for DriverError {
    /// The upstream `err.Error()` text, which status descriptions embed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DriverError::Coded(error) => write!(f, "{error}"),
            DriverError::Undecodable(text) => f.write_str(text),
        }
    }
}

/// The codes upstream retries quickly (ShortRetry) and for which it keeps `lastKnownState`.
#[must_use]
pub fn is_transient(code: Code) -> bool {
    matches!(
        code,
        Code::Unknown | Code::DeadlineExceeded | Code::Aborted | Code::Unavailable
    )
}

/// A failed API write, as far as the plans care.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteFailure {
    /// The API server answered 409 Conflict (retry after ConflictRetry).
    pub conflict: bool,
    /// The error text.
    pub message: String,
}

impl WriteFailure {
    /// The retry upstream uses after a failed write.
    #[must_use]
    pub fn retry(&self) -> Retry {
        if self.conflict {
            Retry::Conflict
        } else {
            Retry::Short
        }
    }
}

/// A time as Go's `time.Time.String()` prints it (`fmt`'s `%v` of a `metav1.Time`), which
/// upstream's texts embed: `2023-11-15 00:13:20 +0000 UTC`, with the nanoseconds after the seconds
/// only when they are not zero (`00:13:20.5 +0000 UTC`, trailing zeros dropped).
///
/// Upstream prints the time in the process's local zone; the controllers run in containers without
/// a zone database or `TZ`, where local time is UTC, so this prints UTC. Upstream's times come from
/// the API server (whole seconds), so the fraction rarely shows.
#[must_use]
pub fn go_time_string(at: Timestamp) -> String {
    let civil = at.to_zoned(jiff::tz::TimeZone::UTC).datetime();
    let year = i32::from(civil.year());
    let year = if year < 0 {
        format!("-{:04}", year.unsigned_abs())
    } else {
        format!("{year:04}")
    };
    let nanos = civil.subsec_nanosecond();
    let fraction = if nanos == 0 {
        String::new()
    } else {
        let digits = format!("{nanos:09}");
        format!(".{}", digits.trim_end_matches('0'))
    };
    format!(
        "{year}-{:02}-{:02} {:02}:{:02}:{:02}{fraction} +0000 UTC",
        civil.month(),
        civil.day(),
        civil.hour(),
        civil.minute(),
        civil.second()
    )
}

/// Go's `time.Time{}.String()`: what `%v` prints for an unset `metav1.Time`.
const GO_ZERO_TIME: &str = "0001-01-01 00:00:00 +0000 UTC";

/// Renders node conditions as upstream's `%+v` of `[]v1.NodeCondition` does, field by field in
/// the Go struct's order, times as [`go_time_string`]:
/// `[{Type:Ready Status:False LastHeartbeatTime:2023-11-15 00:13:20 +0000 UTC LastTransitionTime:…
/// Reason:KubeletNotReady Message:…}]`.
#[must_use]
pub fn render_conditions(conditions: &[NodeCondition]) -> String {
    let time_text = |time: Option<&Time>| {
        time.map_or_else(|| GO_ZERO_TIME.to_owned(), |time| go_time_string(time.0))
    };
    let parts: Vec<String> = conditions
        .iter()
        .map(|condition| {
            format!(
                "{{Type:{} Status:{} LastHeartbeatTime:{} LastTransitionTime:{} Reason:{} Message:{}}}",
                condition.type_,
                condition.status,
                time_text(condition.last_heartbeat_time.as_ref()),
                time_text(condition.last_transition_time.as_ref()),
                condition.reason.as_deref().unwrap_or(""),
                condition.message.as_deref().unwrap_or("")
            )
        })
        .collect();
    format!("[{}]", parts.join(" "))
}

/// Inserts or removes (value `None`) entries of an optional string map; returns whether it changed.
pub fn set_entries(
    map: &mut Option<BTreeMap<String, String>>,
    changes: &BTreeMap<String, Option<String>>,
) -> bool {
    let mut changed = false;
    for (key, value) in changes {
        match value {
            Some(value) => {
                let entries = map.get_or_insert_with(BTreeMap::new);
                if entries.get(key) != Some(value) {
                    entries.insert(key.clone(), value.clone());
                    changed = true;
                }
            }
            None => {
                if let Some(entries) = map.as_mut() {
                    changed |= entries.remove(key).is_some();
                }
            }
        }
    }
    changed
}

/// The backoff flags (`--machine-retry-backoff-initial`, `-factor`, `-max`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BackoffSettings {
    /// Delay after the first failure of a call that upstream retries after ShortRetry.
    pub initial: Duration,
    /// Growth per consecutive failure (≥ 1; 1 gives upstream's constant retry).
    pub factor: f64,
    /// Upper bound of the delay. Errors that upstream retries after MediumRetry are never retried
    /// sooner than that, whatever this bound says.
    pub max: Duration,
}

impl Default for BackoffSettings {
    /// 5s (today's ShortRetry), doubling, at most 60s: a recovered provider is picked up within a
    /// minute.
    fn default() -> Self {
        Self {
            initial: retry::SHORT,
            factor: 2.0,
            max: Duration::from_secs(60),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use mcm_api::v1alpha1::MachineSpec;
    use proptest::prelude::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn status(description: &str, written: Timestamp, phase: MachinePhase) -> MachineStatus {
        MachineStatus {
            last_operation: Some(last_operation(
                description,
                MachineState::Failed,
                MachineOperationType::Create,
                written,
            )),
            current_status: Some(current_status(phase, false, written, None)),
            ..MachineStatus::default()
        }
    }

    /// Expected values are Go's own output (`time.Unix(s, ns).UTC().String()`, `fmt.Sprintf("%+v",
    /// []v1.NodeCondition{...})`), as upstream's tests compare them.
    #[test]
    fn times_print_like_go_time_string() {
        let time = |seconds: i64, nanos: i32| Timestamp::new(seconds, nanos).unwrap();
        assert_eq!(
            go_time_string(time(1_700_007_200, 0)),
            "2023-11-15 00:13:20 +0000 UTC"
        );
        assert_eq!(
            go_time_string(time(1_700_007_200, 500_000_000)),
            "2023-11-15 00:13:20.5 +0000 UTC"
        );
        assert_eq!(
            go_time_string(time(1_700_007_200, 120)),
            "2023-11-15 00:13:20.00000012 +0000 UTC"
        );
        assert_eq!(go_time_string(time(0, 0)), "1970-01-01 00:00:00 +0000 UTC");
        assert_eq!(go_time_string(time(-62_135_596_800, 0)), GO_ZERO_TIME);
        assert_eq!(
            go_time_string(time(-62_198_755_200, 0)),
            "-0001-01-01 00:00:00 +0000 UTC",
            "Go pads negative years to four digits after the sign"
        );
    }

    #[test]
    fn conditions_render_like_go_plus_v() {
        assert_eq!(render_conditions(&[]), "[]");
        let ready = NodeCondition {
            type_: "Ready".into(),
            status: "False".into(),
            last_heartbeat_time: Some(Time(Timestamp::new(1_700_007_200, 0).unwrap())),
            last_transition_time: Some(Time(Timestamp::new(1_700_000_000, 0).unwrap())),
            reason: Some("KubeletNotReady".into()),
            message: Some("kubelet stopped posting node status.".into()),
        };
        let disk = NodeCondition {
            type_: "DiskPressure".into(),
            status: "Unknown".into(),
            ..NodeCondition::default()
        };
        assert_eq!(
            render_conditions(&[ready, disk]),
            "[{Type:Ready Status:False LastHeartbeatTime:2023-11-15 00:13:20 +0000 UTC \
             LastTransitionTime:2023-11-14 22:13:20 +0000 UTC Reason:KubeletNotReady \
             Message:kubelet stopped posting node status.} {Type:DiskPressure Status:Unknown \
             LastHeartbeatTime:0001-01-01 00:00:00 +0000 UTC LastTransitionTime:0001-01-01 \
             00:00:00 +0000 UTC Reason: Message:}]"
        );
    }

    #[test]
    fn levenshtein_table() {
        assert_eq!(levenshtein("", ""), 0);
        assert_eq!(levenshtein("kitten", "sitting"), 3);
        assert_eq!(levenshtein("abc", ""), 3);
        assert_eq!(levenshtein("flaw", "lawn"), 2);
        // Byte based: a two-byte character counts as two edits against ASCII.
        assert_eq!(levenshtein("µ", "u"), 2);
    }

    #[test]
    fn similar_descriptions_within_30_minutes_are_skipped() {
        let old = status(
            "Cloud provider message - quota exceeded in zone a",
            at(0),
            MachinePhase::CrashLoopBackOff,
        );
        let new = status(
            "Cloud provider message - quota exceeded in zone b",
            at(60),
            MachinePhase::CrashLoopBackOff,
        );
        assert!(is_status_similar(&old, &new, at(60)));
        // The same change 31 minutes after the old write goes through.
        let late = status(
            "Cloud provider message - quota exceeded in zone b",
            at(31 * 60),
            MachinePhase::CrashLoopBackOff,
        );
        assert!(!is_status_similar(&old, &late, at(31 * 60)));
    }

    #[test]
    fn different_phase_or_text_is_not_similar() {
        let old = status("Creating machine", at(0), MachinePhase::CrashLoopBackOff);
        let other_phase = status("Creating machine", at(10), MachinePhase::Failed);
        assert!(!is_status_similar(&old, &other_phase, at(10)));
        let other_text = status(
            "VM deletion was successful",
            at(10),
            MachinePhase::CrashLoopBackOff,
        );
        assert!(!is_status_similar(&old, &other_text, at(10)));
        // Without a timestamp on the old status there is nothing fresh to compare with.
        let mut no_time = old.clone();
        no_time.last_operation.as_mut().unwrap().last_update_time = None;
        assert!(!is_status_similar(&no_time, &old, at(10)));
    }

    #[test]
    fn redundant_writes_are_detected_only_when_asked() {
        let mut machine = Machine::new("m", MachineSpec::default());
        machine.status = Some(status(
            "Cloud provider message - quota a",
            at(0),
            MachinePhase::CrashLoopBackOff,
        ));
        let similar = StatusWrite::similar_checked(
            last_operation(
                "Cloud provider message - quota b",
                MachineState::Failed,
                MachineOperationType::Create,
                at(30),
            ),
            current_status(MachinePhase::CrashLoopBackOff, false, at(30), None),
        );
        assert!(similar.is_redundant(&machine, at(30)));
        let forced = StatusWrite {
            skip_if_similar: false,
            ..similar.clone()
        };
        assert!(!forced.is_redundant(&machine, at(30)));
        // lastKnownState is not compared (as upstream).
        let mut with_state = similar.clone();
        with_state.last_known_state = Some("x".into());
        assert!(with_state.is_redundant(&machine, at(30)));
        // A machine without status always gets the write.
        assert!(!similar.is_redundant(&Machine::new("m", MachineSpec::default()), at(30)));
        let applied = similar.apply(machine.status.as_ref());
        assert_eq!(applied.last_operation, Some(similar.last_operation.clone()));
    }

    #[test]
    fn effective_settings_prefer_annotation_then_spec_then_flag() {
        let mut machine = Machine::new("m", MachineSpec::default());
        let flags = ControllerSettings::default();
        let resolved = effective_settings(&machine, &flags);
        assert_eq!(resolved.creation_timeout, Duration::from_mins(20));
        assert_eq!(resolved.node_conditions.len(), 4);
        assert!(!resolved.disable_health_timeout);

        machine.spec.configuration.creation_timeout = Some(Duration::from_mins(5));
        machine.spec.configuration.health_timeout = Some(Duration::from_mins(3));
        machine.spec.configuration.node_conditions = Some("A, B".into());
        machine.spec.configuration.disable_health_timeout = Some(true);
        let resolved = effective_settings(&machine, &flags);
        assert_eq!(resolved.creation_timeout, Duration::from_mins(5));
        assert_eq!(resolved.health_timeout, Duration::from_mins(3));
        // No trimming, case sensitive (as upstream).
        assert_eq!(
            resolved.node_conditions,
            vec!["A".to_owned(), " B".to_owned()]
        );
        assert!(resolved.disable_health_timeout);

        machine.metadata = ObjectMeta {
            name: Some("m".into()),
            annotations: Some(BTreeMap::from([(
                annotation::EFFECTIVE_CREATION_TIMEOUT.to_owned(),
                "7m".to_owned(),
            )])),
            ..ObjectMeta::default()
        };
        assert_eq!(
            effective_settings(&machine, &flags).creation_timeout,
            Duration::from_mins(7)
        );

        machine.metadata.annotations.as_mut().unwrap().insert(
            annotation::EFFECTIVE_CREATION_TIMEOUT.into(),
            "seven".into(),
        );
        let resolved = effective_settings(&machine, &flags);
        assert_eq!(resolved.creation_timeout, Duration::from_mins(5));
        assert_eq!(resolved.warnings.len(), 1);
    }

    #[test]
    fn go_parse_bool() {
        for text in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_go_bool(text), Some(true), "{text}");
        }
        for text in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_go_bool(text), Some(false), "{text}");
        }
        for text in ["yes", "", "tRUE", " true"] {
            assert_eq!(parse_go_bool(text), None, "{text}");
        }
    }

    #[test]
    fn retry_periods_match_upstream() {
        assert_eq!(Retry::Conflict.period(), Duration::from_millis(200));
        assert_eq!(Retry::Short.period(), Duration::from_secs(5));
        assert_eq!(Retry::Medium.period(), Duration::from_mins(3));
        assert_eq!(Retry::Long.period(), Duration::from_mins(10));
        assert_eq!(Retry::Long.min(Retry::Short), Retry::Short);
    }

    proptest! {
        #[test]
        fn prop_levenshtein_is_a_metric(a in "[a-c]{0,8}", b in "[a-c]{0,8}", c in "[a-c]{0,8}") {
            prop_assert_eq!(levenshtein(&a, &b), levenshtein(&b, &a));
            prop_assert_eq!(levenshtein(&a, &a), 0);
            prop_assert!(levenshtein(&a, &c) <= levenshtein(&a, &b) + levenshtein(&b, &c));
            prop_assert!(levenshtein(&a, &b) <= a.len().max(b.len()));
        }

        #[test]
        fn prop_identical_fresh_status_is_similar(text in ".{0,40}", offset in 0i64..1800) {
            let old = status(&text, at(0), MachinePhase::Pending);
            let new = status(&text, at(offset), MachinePhase::Pending);
            prop_assert!(is_status_similar(&old, &new, at(offset)));
        }
    }
}
