//! What the virtual kubelet decides about a VM's Node (pure: time is a parameter).
//!
//! - the Node object registered when the VM has booted (labels from the class's nodeTemplate,
//!   providerID, capacity/allocatable, addresses);
//! - its conditions: healthy by default, Ready=False after `providerSpec.unhealthyAfter`, and
//!   runtime overrides from the Node annotation [`CONDITIONS_ANNOTATION`] or the admin endpoint;
//! - the heartbeat schedule: renew the Lease every lease interval, post the node status when it
//!   changes or when the status report interval has passed (as the kubelet does, so that a
//!   thousand nodes cost about `1000 × (6 + 0.2)` requests per minute, not a status post every 10 s);
//! - the status post itself ([`status_patch`]): a strategic merge patch that, like the kubelet's,
//!   touches only the condition types the kubelet reports, so conditions other components own
//!   (the Machine controller's `Preserved`, the in-place update agent's `InPlaceUpdate`) survive.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{
    AttachedVolume, Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use crate::state::Vm;

/// Label on every Node the provider registers (its node watch selects on it).
pub const MANAGED_LABEL: &str = "provider-virtual.mcm.gardener.cloud/managed";

/// Node annotation that switches conditions at runtime: `Ready=False,DiskPressure=True`.
/// Each entry overrides one condition type's status (`True`, `False`, `Unknown`); removing the
/// annotation (or an entry) restores the computed value.
pub const CONDITIONS_ANNOTATION: &str = "provider-virtual.mcm.gardener.cloud/conditions";

/// Node annotation that stops the node's heartbeat while it is `stopped` (fault injection: the
/// kubelet of that node can no longer reach the API server): no Lease renewal, no status post, so
/// the control plane's node lifecycle controller marks the Node `Unknown` after its grace period.
/// Removing the annotation resumes the heartbeat with a status post at once.
pub const HEARTBEAT_ANNOTATION: &str = "provider-virtual.mcm.gardener.cloud/heartbeat";

/// The value of [`HEARTBEAT_ANNOTATION`] that stops the heartbeat.
pub const HEARTBEAT_STOPPED: &str = "stopped";

/// The condition types the virtual kubelet reports.
pub const CONDITION_TYPES: [&str; 4] = ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

/// Timing of the heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatConfig {
    /// How often the Lease is renewed (kubelet: 10 s).
    pub lease_interval: SignedDuration,
    /// `spec.leaseDurationSeconds` of the Lease (kubelet: 40).
    pub lease_duration_seconds: i32,
    /// Longest time between two status posts when nothing changes (kubelet: 5 min).
    pub status_report_interval: SignedDuration,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        Self {
            lease_interval: SignedDuration::from_secs(10),
            lease_duration_seconds: 40,
            status_report_interval: SignedDuration::from_mins(5),
        }
    }
}

/// One condition as decided (timestamps are added when posting).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionState {
    /// `Ready`, `MemoryPressure`...
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Machine-readable reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

/// Everything of the node status that, when it changes, must be posted at once.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StatusKey {
    /// The conditions.
    pub conditions: Vec<ConditionState>,
    /// Unique names of attached (and in-use) volumes, sorted.
    pub volumes: Vec<String>,
}

/// Condition overrides: condition type → status.
pub type ConditionOverrides = BTreeMap<String, String>;

/// An override text that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid condition override {entry:?}: {reason} (expected e.g. \"Ready=False,DiskPressure=True\")"
)]
pub struct OverrideError {
    /// The offending entry.
    pub entry: String,
    /// Why.
    pub reason: String,
}

/// Parses `Ready=False,DiskPressure=True` (whitespace around entries is ignored).
pub fn parse_condition_overrides(text: &str) -> Result<ConditionOverrides, OverrideError> {
    let mut overrides = ConditionOverrides::new();
    for entry in text
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
    {
        let error = |reason: &str| OverrideError {
            entry: entry.to_owned(),
            reason: reason.to_owned(),
        };
        let (type_, status) = entry.split_once('=').ok_or_else(|| error("missing '='"))?;
        let (type_, status) = (type_.trim(), status.trim());
        if type_.is_empty() {
            return Err(error("empty condition type"));
        }
        if !["True", "False", "Unknown"].contains(&status) {
            return Err(error("status must be True, False or Unknown"));
        }
        overrides.insert(type_.to_owned(), status.to_owned());
    }
    Ok(overrides)
}

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> ConditionState {
    ConditionState {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
    }
}

/// The conditions of a VM's Node at `now`.
pub fn conditions(vm: &Vm, overrides: &ConditionOverrides, now: Timestamp) -> Vec<ConditionState> {
    let unhealthy = vm.spec.unhealthy_after.is_some_and(|after| {
        vm.booted_at()
            .saturating_add(after.to_signed_duration())
            .is_ok_and(|since| now >= since)
    });
    let mut result = vec![
        if unhealthy {
            condition(
                "Ready",
                "False",
                "KubeletNotReady",
                "virtual VM turned unhealthy (providerSpec.unhealthyAfter)",
            )
        } else {
            condition(
                "Ready",
                "True",
                "KubeletReady",
                "kubelet is posting ready status",
            )
        },
        condition(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        condition(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
        ),
        condition(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        ),
    ];
    for (type_, status) in overrides {
        let overridden = condition(
            type_,
            status,
            "OverriddenByTest",
            "condition set through provider-virtual",
        );
        match result.iter_mut().find(|existing| existing.type_ == *type_) {
            Some(existing) if existing.status == *status => {}
            Some(existing) => *existing = overridden,
            None => result.push(overridden),
        }
    }
    result
}

/// The Node's labels: hostname, instance type, zone, region, arch, os, and [`MANAGED_LABEL`].
pub fn node_labels(vm: &Vm) -> BTreeMap<String, String> {
    let template = &vm.node_template;
    let mut labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_owned(), vm.node_name.clone()),
        ("kubernetes.io/os".to_owned(), "linux".to_owned()),
        (
            "kubernetes.io/arch".to_owned(),
            template
                .architecture
                .clone()
                .unwrap_or_else(|| "amd64".to_owned()),
        ),
        (MANAGED_LABEL.to_owned(), "true".to_owned()),
    ]);
    for (key, value) in [
        ("node.kubernetes.io/instance-type", &template.instance_type),
        ("topology.kubernetes.io/zone", &template.zone),
        ("topology.kubernetes.io/region", &template.region),
    ] {
        if !value.is_empty() {
            labels.insert(key.to_owned(), value.clone());
        }
    }
    labels
}

/// The Node's addresses.
pub fn node_addresses(vm: &Vm) -> Vec<NodeAddress> {
    vec![
        NodeAddress {
            type_: "InternalIP".into(),
            address: vm.internal_ip.clone(),
        },
        NodeAddress {
            type_: "Hostname".into(),
            address: vm.node_name.clone(),
        },
    ]
}

/// The transition times of conditions: kept from the previous post unless the status changed.
pub fn transition_times(
    previous: &BTreeMap<String, (String, Timestamp)>,
    conditions: &[ConditionState],
    now: Timestamp,
) -> BTreeMap<String, (String, Timestamp)> {
    conditions
        .iter()
        .map(|condition| {
            let since = match previous.get(&condition.type_) {
                Some((status, since)) if *status == condition.status => *since,
                _ => now,
            };
            (condition.type_.clone(), (condition.status.clone(), since))
        })
        .collect()
}

/// The transition memory with the statuses the stored Node holds where they differ from what
/// this kubelet last posted (another component, the node lifecycle controller, marked the node
/// `Unknown`): the next post of the kubelet's own status is then a transition again, at its
/// time, as a kubelet that compares with the stored Node does.
pub fn with_stored_statuses(
    transitions: &BTreeMap<String, (String, Timestamp)>,
    stored: &[NodeCondition],
) -> BTreeMap<String, (String, Timestamp)> {
    let mut adopted = transitions.clone();
    for condition in stored {
        if let Some((status, since)) = adopted.get_mut(&condition.type_)
            && *status != condition.status
        {
            *status = condition.status.clone();
            if let Some(at) = &condition.last_transition_time {
                *since = at.0;
            }
        }
    }
    adopted
}

/// The node status to post at `now`.
pub fn node_status(
    vm: &Vm,
    key: &StatusKey,
    transitions: &BTreeMap<String, (String, Timestamp)>,
    now: Timestamp,
) -> NodeStatus {
    let capacity = vm.node_template.capacity.clone();
    NodeStatus {
        addresses: Some(node_addresses(vm)),
        allocatable: Some(capacity.clone()),
        capacity: Some(capacity),
        conditions: Some(
            key.conditions
                .iter()
                .map(|condition| NodeCondition {
                    type_: condition.type_.clone(),
                    status: condition.status.clone(),
                    reason: Some(condition.reason.clone()),
                    message: Some(condition.message.clone()),
                    last_heartbeat_time: Some(Time(now)),
                    last_transition_time: Some(Time(
                        transitions
                            .get(&condition.type_)
                            .map_or(now, |(_, since)| *since),
                    )),
                })
                .collect(),
        ),
        node_info: Some(NodeSystemInfo {
            architecture: vm
                .node_template
                .architecture
                .clone()
                .unwrap_or_else(|| "amd64".into()),
            boot_id: vm.id.clone(),
            machine_id: vm.id.clone(),
            system_uuid: vm.id.clone(),
            container_runtime_version: "virtual://1.0".into(),
            kernel_version: "virtual".into(),
            kube_proxy_version: String::new(),
            kubelet_version: "v1.33.0-virtual".into(),
            operating_system: "linux".into(),
            os_image: "provider-virtual".into(),
            ..NodeSystemInfo::default()
        }),
        volumes_attached: Some(
            key.volumes
                .iter()
                .map(|name| AttachedVolume {
                    name: name.clone(),
                    device_path: String::new(),
                })
                .collect(),
        ),
        volumes_in_use: Some(key.volumes.clone()),
        ..NodeStatus::default()
    }
}

/// The strategic merge patch that posts `key` as the node status at `now`.
///
/// Conditions merge by `type` (the Node API's merge key), so types the kubelet does not report are
/// left to their owners; types it reported last time (`previous`) but no longer reports (an
/// override that was removed) are deleted explicitly, as the kubelet's two-way diff would. The
/// volume lists are the kubelet's own and are replaced whole so that detached volumes disappear.
pub fn status_patch(
    vm: &Vm,
    key: &StatusKey,
    previous: Option<&StatusKey>,
    transitions: &BTreeMap<String, (String, Timestamp)>,
    now: Timestamp,
) -> serde_json::Value {
    let status = node_status(vm, key, transitions, now);
    let mut conditions: Vec<serde_json::Value> = status
        .conditions
        .iter()
        .flatten()
        .map(|condition| serde_json::json!(condition))
        .collect();
    for dropped in previous
        .into_iter()
        .flat_map(|previous| &previous.conditions)
        .filter(|old| !key.conditions.iter().any(|new| new.type_ == old.type_))
    {
        conditions.push(serde_json::json!({"type": dropped.type_, "$patch": "delete"}));
    }
    let mut volumes_attached: Vec<serde_json::Value> = status
        .volumes_attached
        .iter()
        .flatten()
        .map(|volume| serde_json::json!({"name": volume.name, "devicePath": volume.device_path}))
        .collect();
    volumes_attached.push(serde_json::json!({"$patch": "replace"}));
    serde_json::json!({
        "status": {
            "addresses": status.addresses,
            "allocatable": status.allocatable,
            "capacity": status.capacity,
            "conditions": conditions,
            "nodeInfo": status.node_info,
            "volumesAttached": volumes_attached,
            "volumesInUse": status.volumes_in_use,
        }
    })
}

/// The Node registered for a VM (status included; it is posted again right after).
pub fn registration_node(vm: &Vm, key: &StatusKey, now: Timestamp) -> Node {
    let transitions = transition_times(&BTreeMap::new(), &key.conditions, now);
    Node {
        metadata: ObjectMeta {
            name: Some(vm.node_name.clone()),
            labels: Some(node_labels(vm)),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(vm.provider_id.clone()),
            ..NodeSpec::default()
        }),
        status: Some(node_status(vm, key, &transitions, now)),
    }
}

/// What the kubelet remembers about one node between ticks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeClock {
    /// The Node exists (created by us or found at start).
    pub registered: bool,
    /// The Node disappeared while the VM runs (deleted by someone); heartbeats stop, like a kubelet
    /// whose Node object was removed.
    pub lost: bool,
    /// Last successful Lease renewal.
    pub last_lease_renewal: Option<Timestamp>,
    /// Last successful status post.
    pub last_status_post: Option<Timestamp>,
    /// The status posted last.
    pub last_posted: Option<StatusKey>,
    /// Condition transition times as posted last.
    pub transitions: BTreeMap<String, (String, Timestamp)>,
}

/// Whether the Node as stored disagrees with the kubelet's view: a condition it reports has
/// another status on the server (the node lifecycle controller marked it `Unknown` after missed
/// heartbeats, or someone edited it). The real kubelet compares the Node it reads from the API
/// server every status update and posts on any difference; this one posts when this is true.
pub fn server_disagrees(stored: &[NodeCondition], key: &StatusKey) -> bool {
    key.conditions.iter().any(|own| {
        stored
            .iter()
            .any(|c| c.type_ == own.type_ && c.status != own.status)
    })
}

/// One heartbeat action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeAction {
    /// Create the Node.
    Register,
    /// Renew (or create) the Lease.
    RenewLease,
    /// Post the node status.
    PostStatus,
}

/// The actions due for a running VM's node at `now`.
pub fn node_actions(
    clock: &NodeClock,
    key: &StatusKey,
    now: Timestamp,
    config: &HeartbeatConfig,
) -> Vec<NodeAction> {
    if clock.lost {
        return Vec::new();
    }
    let mut actions = Vec::new();
    if !clock.registered {
        actions.push(NodeAction::Register);
    }
    let elapsed = |since: Option<Timestamp>, interval: SignedDuration| {
        since.is_none_or(|since| now.duration_since(since) >= interval)
    };
    if elapsed(clock.last_lease_renewal, config.lease_interval) {
        actions.push(NodeAction::RenewLease);
    }
    if clock.last_posted.as_ref() != Some(key)
        || elapsed(clock.last_status_post, config.status_report_interval)
    {
        actions.push(NodeAction::PostStatus);
    }
    actions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_again_after_being_marked_unknown_is_a_new_transition() {
        let ready = vec![condition("Ready", "True", "KubeletReady", "ok")];
        let before = transition_times(&BTreeMap::new(), &ready, secs(10));
        // The node lifecycle controller marked the node Unknown at 100 s.
        let stored = vec![NodeCondition {
            type_: "Ready".into(),
            status: "Unknown".into(),
            last_transition_time: Some(Time(secs(100))),
            ..NodeCondition::default()
        }];
        let adopted = with_stored_statuses(&before, &stored);
        assert_eq!(adopted["Ready"], ("Unknown".to_owned(), secs(100)));
        let after = transition_times(&adopted, &ready, secs(130));
        assert_eq!(
            after["Ready"],
            ("True".to_owned(), secs(130)),
            "not the old 10 s"
        );
        // A stored status equal to ours changes nothing.
        let same = vec![NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            last_transition_time: Some(Time(secs(50))),
            ..NodeCondition::default()
        }];
        assert_eq!(with_stored_statuses(&before, &same), before);
    }

    #[test]
    fn the_server_disagrees_when_a_reported_condition_has_another_status() {
        let key = StatusKey {
            conditions: vec![
                condition("Ready", "True", "KubeletReady", "ok"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "ok"),
            ],
            volumes: Vec::new(),
        };
        let stored = |ready: &str, other: &str| {
            vec![
                NodeCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    ..NodeCondition::default()
                },
                NodeCondition {
                    type_: other.into(),
                    status: "Unknown".into(),
                    ..NodeCondition::default()
                },
            ]
        };
        assert!(server_disagrees(&stored("Unknown", "Preserved"), &key));
        assert!(
            !server_disagrees(&stored("True", "Preserved"), &key),
            "other owners' conditions do not count"
        );
        assert!(server_disagrees(&stored("True", "DiskPressure"), &key));
        assert!(
            !server_disagrees(&[], &key),
            "nothing stored yet: the schedule decides"
        );
    }
    use crate::spec::parse_provider_spec;
    use crate::state::{CreateInput, FleetState, NodeTemplateInfo};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use serde_json::json;

    fn t0() -> Timestamp {
        "2026-01-01T00:00:00Z".parse().unwrap()
    }

    fn vm(spec: serde_json::Value) -> Vm {
        let mut state = FleetState::default();
        state
            .create(
                CreateInput {
                    namespace: "ns".into(),
                    machine_name: "machine-a".into(),
                    class_namespace: "ns".into(),
                    class_name: "c".into(),
                    spec: parse_provider_spec(&spec).unwrap(),
                    node_template: NodeTemplateInfo {
                        capacity: BTreeMap::from([
                            ("cpu".to_owned(), Quantity("4".into())),
                            ("memory".to_owned(), Quantity("16Gi".into())),
                        ]),
                        instance_type: "m5.xlarge".into(),
                        region: "eu-1".into(),
                        zone: "eu-1a".into(),
                        architecture: None,
                    },
                },
                t0(),
            )
            .0
    }

    fn secs(seconds: i64) -> Timestamp {
        t0() + SignedDuration::from_secs(seconds)
    }

    #[test]
    fn the_registered_node_carries_identity_topology_and_capacity() {
        let vm = vm(json!({}));
        let key = StatusKey {
            conditions: conditions(&vm, &ConditionOverrides::new(), t0()),
            volumes: vec![],
        };
        let node = registration_node(&vm, &key, t0());
        assert_eq!(node.metadata.name.as_deref(), Some("machine-a"));
        assert_eq!(
            node.spec.as_ref().and_then(|s| s.provider_id.as_deref()),
            Some("virtual:///ns/vm-00000000")
        );
        let labels = node.metadata.labels.unwrap();
        assert_eq!(labels["kubernetes.io/hostname"], "machine-a");
        assert_eq!(labels["node.kubernetes.io/instance-type"], "m5.xlarge");
        assert_eq!(labels["topology.kubernetes.io/zone"], "eu-1a");
        assert_eq!(labels["topology.kubernetes.io/region"], "eu-1");
        assert_eq!(labels[MANAGED_LABEL], "true");
        let status = node.status.unwrap();
        assert_eq!(
            status.capacity.as_ref().unwrap()["memory"],
            Quantity("16Gi".into())
        );
        assert_eq!(
            status.allocatable.as_ref().unwrap()["cpu"],
            Quantity("4".into())
        );
        let ready = status
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(ready.status, "True");
        assert_eq!(status.addresses.unwrap()[0].address, "10.0.0.0");
    }

    #[test]
    fn ready_turns_false_after_unhealthy_after_counted_from_boot() {
        let vm = vm(json!({"bootDelay": "10s", "unhealthyAfter": "1m"}));
        let ready = |now| {
            conditions(&vm, &ConditionOverrides::new(), now)[0]
                .status
                .clone()
        };
        assert_eq!(ready(secs(69)), "True");
        assert_eq!(ready(secs(70)), "False");
    }

    #[test]
    fn overrides_switch_conditions_and_add_new_types() {
        let vm = vm(json!({}));
        let overrides =
            parse_condition_overrides("Ready=False, DiskPressure=True,NetworkUnavailable=True")
                .unwrap();
        let result = conditions(&vm, &overrides, t0());
        let status_of = |type_: &str| {
            result
                .iter()
                .find(|c| c.type_ == type_)
                .map(|c| c.status.as_str())
        };
        assert_eq!(status_of("Ready"), Some("False"));
        assert_eq!(status_of("DiskPressure"), Some("True"));
        assert_eq!(status_of("MemoryPressure"), Some("False"));
        assert_eq!(status_of("NetworkUnavailable"), Some("True"));
    }

    #[test]
    fn malformed_overrides_are_refused() {
        for bad in ["Ready", "Ready=Maybe", "=True"] {
            assert!(parse_condition_overrides(bad).is_err(), "{bad}");
        }
        assert!(parse_condition_overrides("").unwrap().is_empty());
    }

    #[test]
    fn heartbeat_schedule_renews_the_lease_every_interval_and_posts_status_on_change_or_report_interval()
     {
        let config = HeartbeatConfig::default();
        let key = StatusKey::default();
        let mut clock = NodeClock::default();
        assert_eq!(
            node_actions(&clock, &key, secs(0), &config),
            vec![
                NodeAction::Register,
                NodeAction::RenewLease,
                NodeAction::PostStatus
            ]
        );
        clock.registered = true;
        clock.last_lease_renewal = Some(secs(0));
        clock.last_status_post = Some(secs(0));
        clock.last_posted = Some(key.clone());
        assert!(node_actions(&clock, &key, secs(9), &config).is_empty());
        assert_eq!(
            node_actions(&clock, &key, secs(10), &config),
            vec![NodeAction::RenewLease]
        );
        clock.last_lease_renewal = Some(secs(295));
        assert!(node_actions(&clock, &key, secs(299), &config).is_empty());
        assert_eq!(
            node_actions(&clock, &key, secs(300), &config),
            vec![NodeAction::PostStatus]
        );
        let changed = StatusKey {
            volumes: vec!["kubernetes.io/csi/d^v1".into()],
            ..key.clone()
        };
        assert_eq!(
            node_actions(&clock, &changed, secs(296), &config),
            vec![NodeAction::PostStatus]
        );
        clock.lost = true;
        assert!(node_actions(&clock, &changed, secs(1000), &config).is_empty());
    }

    #[test]
    fn requests_per_minute_for_a_thousand_idle_nodes_follow_the_schedule() {
        // Simulate one hour at 1 s ticks for one node and scale: lease every 10 s + status every 5 min.
        let config = HeartbeatConfig::default();
        let key = StatusKey::default();
        let mut clock = NodeClock {
            registered: true,
            ..NodeClock::default()
        };
        let mut requests = 0;
        for second in 0..3600 {
            let now = secs(second);
            for action in node_actions(&clock, &key, now, &config) {
                requests += 1;
                match action {
                    NodeAction::RenewLease => clock.last_lease_renewal = Some(now),
                    NodeAction::PostStatus => {
                        clock.last_status_post = Some(now);
                        clock.last_posted = Some(key.clone());
                    }
                    NodeAction::Register => clock.registered = true,
                }
            }
        }
        assert_eq!(
            requests,
            360 + 12,
            "6 lease renewals and 0.2 status posts per minute"
        );
    }

    #[test]
    fn transition_times_move_only_when_the_status_changes() {
        let vm = vm(json!({}));
        let healthy = conditions(&vm, &ConditionOverrides::new(), t0());
        let first = transition_times(&BTreeMap::new(), &healthy, secs(0));
        let same = transition_times(&first, &healthy, secs(50));
        assert_eq!(same["Ready"].1, secs(0));
        let overrides = parse_condition_overrides("Ready=False").unwrap();
        let switched = transition_times(&same, &conditions(&vm, &overrides, secs(60)), secs(60));
        assert_eq!(switched["Ready"], ("False".to_owned(), secs(60)));
        assert_eq!(switched["DiskPressure"].1, secs(0));
    }

    fn applied(original: &serde_json::Value, patch: &serde_json::Value) -> Node {
        serde_json::from_value(mcm_sandbox::patch::strategic_merge(original, patch).unwrap())
            .unwrap()
    }

    fn status_of(node: &Node, type_: &str) -> Option<(String, Option<String>)> {
        node.status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| (c.status.clone(), c.reason.clone()))
    }

    #[test]
    fn the_status_patch_keeps_conditions_the_kubelet_does_not_own() {
        let vm = vm(json!({}));
        let key = StatusKey {
            conditions: conditions(&vm, &ConditionOverrides::new(), t0()),
            volumes: vec![],
        };
        let mut registered = serde_json::to_value(registration_node(&vm, &key, t0())).unwrap();
        registered["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .extend([
                json!({"type": "Preserved", "status": "True", "reason": "PreservedByMCM"}),
                json!({"type": "InPlaceUpdate", "status": "True", "reason": "SelectedForUpdate"}),
            ]);
        let overrides = parse_condition_overrides("Ready=False").unwrap();
        let sick = StatusKey {
            conditions: conditions(&vm, &overrides, secs(5)),
            volumes: vec![],
        };
        let transitions = transition_times(&BTreeMap::new(), &sick.conditions, secs(5));
        let node = applied(
            &registered,
            &status_patch(&vm, &sick, Some(&key), &transitions, secs(5)),
        );
        assert_eq!(
            status_of(&node, "Ready"),
            Some(("False".into(), Some("OverriddenByTest".into())))
        );
        assert_eq!(
            status_of(&node, "Preserved"),
            Some(("True".into(), Some("PreservedByMCM".into())))
        );
        assert_eq!(
            status_of(&node, "InPlaceUpdate"),
            Some(("True".into(), Some("SelectedForUpdate".into())))
        );
        assert_eq!(
            node.status.unwrap().conditions.unwrap().len(),
            6,
            "no duplicate entries per type"
        );
    }

    #[test]
    fn the_status_patch_deletes_a_type_the_kubelet_stopped_reporting_and_replaces_volumes() {
        let vm = vm(json!({}));
        let with_extra = StatusKey {
            conditions: conditions(
                &vm,
                &parse_condition_overrides("NetworkUnavailable=True").unwrap(),
                t0(),
            ),
            volumes: vec![
                "kubernetes.io/csi/d^v1".into(),
                "kubernetes.io/csi/d^v2".into(),
            ],
        };
        let mut registered =
            serde_json::to_value(registration_node(&vm, &with_extra, t0())).unwrap();
        registered["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "Preserved", "status": "True"}));
        let plain = StatusKey {
            conditions: conditions(&vm, &ConditionOverrides::new(), secs(1)),
            volumes: vec!["kubernetes.io/csi/d^v2".into()],
        };
        let transitions = transition_times(&BTreeMap::new(), &plain.conditions, secs(1));
        let node = applied(
            &registered,
            &status_patch(&vm, &plain, Some(&with_extra), &transitions, secs(1)),
        );
        assert_eq!(status_of(&node, "NetworkUnavailable"), None);
        assert_eq!(
            status_of(&node, "Preserved").map(|s| s.0).as_deref(),
            Some("True")
        );
        let status = node.status.unwrap();
        let attached: Vec<String> = status
            .volumes_attached
            .unwrap()
            .into_iter()
            .map(|v| v.name)
            .collect();
        assert_eq!(attached, vec!["kubernetes.io/csi/d^v2".to_owned()]);
        assert_eq!(
            status.volumes_in_use.unwrap(),
            vec!["kubernetes.io/csi/d^v2".to_owned()]
        );
    }

    #[test]
    fn an_empty_volume_list_clears_the_attached_volumes() {
        let vm = vm(json!({}));
        let attached = StatusKey {
            conditions: conditions(&vm, &ConditionOverrides::new(), t0()),
            volumes: vec!["kubernetes.io/csi/d^v1".into()],
        };
        let registered = serde_json::to_value(registration_node(&vm, &attached, t0())).unwrap();
        let detached = StatusKey {
            volumes: vec![],
            ..attached.clone()
        };
        let node = applied(
            &registered,
            &status_patch(&vm, &detached, Some(&attached), &BTreeMap::new(), secs(1)),
        );
        let status = node.status.unwrap();
        assert!(status.volumes_attached.unwrap_or_default().is_empty());
        assert!(status.volumes_in_use.unwrap_or_default().is_empty());
    }
}
