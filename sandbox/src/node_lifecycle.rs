//! Node lifecycle: the part of kube-controller-manager's node lifecycle controller that marks a
//! Node whose kubelet stopped heartbeating. A kubelet heartbeats two ways, by renewing its Lease
//! (`kube-node-lease/<node>`) and by posting node status (the `Ready` condition's
//! `lastHeartbeatTime`); the controller remembers *when it saw* either change (its own clock,
//! never the timestamps' values, so clock skew does not matter) and, once neither changed for the
//! grace period (`--node-monitor-grace-period`, 40 s; `--node-startup-grace-period`, 60 s, for a
//! Node that never posted `Ready`), sets `Ready`, `MemoryPressure`, `DiskPressure` and
//! `PIDPressure` to `Unknown` (reason `NodeStatusUnknown`, message
//! `Kubelet stopped posting node status.`; a missing one is added with `NodeStatusNeverUpdated`,
//! `Kubelet never posted node status.`), keeping `lastHeartbeatTime` and moving
//! `lastTransitionTime` to now. The `Ready` condition is mirrored in taints, as kube's NoSchedule
//! and NoExecute tainting passes do: `Unknown` → `node.kubernetes.io/unreachable`, `False` →
//! `node.kubernetes.io/not-ready`, both effects, each with `timeAdded`; `True` removes them
//! (the kubelet posting `Ready=True` again is what brings a Node back). When no Node at all is
//! `Ready` (kube's "full disruption", e.g. the API server was unreachable for every kubelet), no
//! NoExecute taint is kept, as kube stops evicting then.
//!
//! Pure decisions here; [`crate::Sandbox`] runs [`NodeMonitor::pass`] every `period`.

use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::gc::ObjKey;
use crate::store::Store;

/// Taint key of a Node whose `Ready` condition is `Unknown`.
pub const UNREACHABLE_TAINT: &str = "node.kubernetes.io/unreachable";
/// Taint key of a Node whose `Ready` condition is `False`.
pub const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";
/// Namespace of the kubelets' Leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";
/// Reason of a condition the monitor turned `Unknown`.
pub const UNKNOWN_REASON: &str = "NodeStatusUnknown";
/// Message of a condition the monitor turned `Unknown`.
pub const UNKNOWN_MESSAGE: &str = "Kubelet stopped posting node status.";
/// Reason of a condition the kubelet never posted.
pub const NEVER_UPDATED_REASON: &str = "NodeStatusNeverUpdated";
/// Message of a condition the kubelet never posted.
pub const NEVER_UPDATED_MESSAGE: &str = "Kubelet never posted node status.";
/// The conditions set to `Unknown` (kube leaves `NetworkUnavailable` to the network plugin).
pub const MONITORED_CONDITIONS: [&str; 4] =
    ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

/// Timing of the monitor (kube-controller-manager's flags of the same names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeMonitorConfig {
    /// `--node-monitor-grace-period`: no heartbeat for this long makes a Node `Unknown` (40 s).
    pub grace_period: Duration,
    /// `--node-startup-grace-period`: the same for a Node that never posted `Ready` (60 s).
    pub startup_grace_period: Duration,
    /// `--node-monitor-period`: how often Nodes are checked (5 s).
    pub period: Duration,
}

impl Default for NodeMonitorConfig {
    fn default() -> Self {
        Self {
            grace_period: Duration::from_secs(40),
            startup_grace_period: Duration::from_secs(60),
            period: Duration::from_secs(5),
        }
    }
}

impl NodeMonitorConfig {
    /// kube's defaults with another grace period; the period is shortened to a fifth of it
    /// (at most 5 s, at least 100 ms) so short test grace periods are honoured promptly.
    pub fn with_grace_period(grace_period: Duration) -> Self {
        Self {
            grace_period,
            period: (grace_period / 5).clamp(Duration::from_millis(100), Duration::from_secs(5)),
            ..Self::default()
        }
    }
}

/// What the monitor last saw of one Node's heartbeats, and when (its own clock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The Node's uid (a re-created Node starts afresh).
    pub uid: String,
    /// `lastHeartbeatTime` of the `Ready` condition (None: no `Ready` condition).
    pub heartbeat: Option<String>,
    /// `spec.renewTime` of the Lease.
    pub renew: Option<Timestamp>,
    /// When a heartbeat was last seen (or assumed).
    pub at: Timestamp,
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

fn condition<'a>(node: &'a Value, type_: &str) -> Option<&'a Value> {
    node.pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

/// The `Ready` condition's status (`True`, `False`, `Unknown`), if the Node has one.
pub fn ready_status(node: &Value) -> Option<&str> {
    condition(node, "Ready")
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
}

fn heartbeat_of(node: &Value) -> Option<String> {
    condition(node, "Ready")
        .and_then(|c| c.get("lastHeartbeatTime"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

fn timestamp(s: &str) -> Option<Timestamp> {
    s.parse().ok()
}

/// Updates the probe of a Node from its current object and Lease (kube's `tryUpdateNodeHealth`
/// bookkeeping) and returns it with the grace period the Node is entitled to.
pub fn observe(
    saved: Option<&Probe>,
    node: &Value,
    lease: Option<&Value>,
    now: Timestamp,
    config: &NodeMonitorConfig,
) -> (Probe, Duration) {
    let uid = str_at(node, "/metadata/uid").unwrap_or_default().to_owned();
    let ready = condition(node, "Ready");
    let heartbeat = ready
        .and_then(|c| c.get("lastHeartbeatTime"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let saved = saved.filter(|p| p.uid == uid);
    let grace = if ready.is_some() {
        config.grace_period
    } else {
        config.startup_grace_period
    };
    let mut probe = match saved {
        // First sight: a Node that never posted Ready counts from its creation, any other
        // from now (the monitor may have started after the Node).
        None => Probe {
            uid,
            heartbeat: heartbeat.clone(),
            renew: None,
            at: if ready.is_none() {
                str_at(node, "/metadata/creationTimestamp")
                    .and_then(timestamp)
                    .unwrap_or(now)
            } else {
                now
            },
        },
        Some(p) if p.heartbeat != heartbeat => Probe {
            heartbeat: heartbeat.clone(),
            at: now,
            ..p.clone()
        },
        Some(p) => p.clone(),
    };
    let renew = lease
        .and_then(|l| str_at(l, "/spec/renewTime"))
        .and_then(timestamp);
    if let Some(renew) = renew
        && probe.renew.is_none_or(|seen| seen < renew)
    {
        probe.renew = Some(renew);
        probe.at = now;
    }
    (probe, grace)
}

/// Whether the probe is older than the grace period at `now`.
pub fn lapsed(probe: &Probe, grace: Duration, now: Timestamp) -> bool {
    let Ok(grace) = jiff::SignedDuration::try_from(grace) else {
        return false;
    };
    probe
        .at
        .checked_add(grace)
        .is_ok_and(|deadline| now > deadline)
}

/// Kube's time format for conditions and taints.
pub fn format_time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The conditions of a lapsed Node: the [`MONITORED_CONDITIONS`] `Unknown`, others untouched.
/// `None` when `Ready` is already `Unknown` (kube writes only when `Ready` changes).
pub fn unknown_conditions(node: &Value, now: &str) -> Option<Vec<Value>> {
    if ready_status(node) == Some("Unknown") {
        return None;
    }
    let created = str_at(node, "/metadata/creationTimestamp").unwrap_or(now);
    let mut conditions: Vec<Value> = node
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for type_ in MONITORED_CONDITIONS {
        match conditions
            .iter_mut()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
        {
            Some(c) => {
                if c.get("status").and_then(Value::as_str) != Some("Unknown") {
                    c["status"] = json!("Unknown");
                    c["reason"] = json!(UNKNOWN_REASON);
                    c["message"] = json!(UNKNOWN_MESSAGE);
                    c["lastTransitionTime"] = json!(now);
                }
            }
            None => conditions.push(json!({
                "type": type_,
                "status": "Unknown",
                "reason": NEVER_UPDATED_REASON,
                "message": NEVER_UPDATED_MESSAGE,
                "lastHeartbeatTime": created,
                "lastTransitionTime": now,
            })),
        }
    }
    Some(conditions)
}

fn is_lifecycle_taint(t: &Value) -> bool {
    matches!(
        t.get("key").and_then(Value::as_str),
        Some(UNREACHABLE_TAINT | NOT_READY_TAINT)
    ) && matches!(
        t.get("effect").and_then(Value::as_str),
        Some("NoSchedule" | "NoExecute")
    )
}

/// The taints a Node should carry for its `Ready` status: the lifecycle taints replaced by those
/// the status calls for (existing ones keep their `timeAdded`), other taints untouched. `None`
/// when nothing changes. `no_execute` is false in full disruption (no Node Ready).
pub fn taints(node: &Value, no_execute: bool, now: &str) -> Option<Vec<Value>> {
    let current: Vec<Value> = node
        .pointer("/spec/taints")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let key = match ready_status(node) {
        Some("Unknown") => Some(UNREACHABLE_TAINT),
        Some("False") => Some(NOT_READY_TAINT),
        _ => None,
    };
    let wanted: Vec<(&str, &str)> = key
        .into_iter()
        .flat_map(|k| {
            std::iter::once((k, "NoSchedule")).chain(no_execute.then_some((k, "NoExecute")))
        })
        .collect();
    let has = |t: &Value, (k, e): (&str, &str)| {
        t.get("key").and_then(Value::as_str) == Some(k)
            && t.get("effect").and_then(Value::as_str) == Some(e)
    };
    let mut next: Vec<Value> = current
        .iter()
        .filter(|t| !is_lifecycle_taint(t) || wanted.iter().any(|w| has(t, *w)))
        .cloned()
        .collect();
    for w in &wanted {
        if !next.iter().any(|t| has(t, *w)) {
            next.push(json!({"key": w.0, "effect": w.1, "timeAdded": now}));
        }
    }
    (next != current).then_some(next)
}

/// The monitor's memory between passes.
#[derive(Debug, Default)]
pub struct NodeMonitor {
    probes: HashMap<String, Probe>,
}

impl NodeMonitor {
    /// One pass over every Node at `now`: heartbeats observed, lapsed Nodes marked `Unknown`,
    /// taints brought in line with `Ready`. Returns the names of the Nodes it wrote.
    pub fn pass(
        &mut self,
        store: &Store,
        config: &NodeMonitorConfig,
        now: Timestamp,
    ) -> Vec<String> {
        let nodes_gr = (String::new(), "nodes".to_owned());
        let leases_gr = ("coordination.k8s.io".to_owned(), "leases".to_owned());
        let (_, nodes) = store.list(&nodes_gr, None);
        let now_text = format_time(now);
        let mut seen = std::collections::HashSet::new();
        let mut status_changes: HashMap<String, Vec<Value>> = HashMap::new();
        for node in &nodes {
            let Some(name) = str_at(node, "/metadata/name") else {
                continue;
            };
            seen.insert(name.to_owned());
            let lease = store.get(&leases_gr, LEASE_NAMESPACE, name);
            let (probe, grace) =
                observe(self.probes.get(name), node, lease.as_deref(), now, config);
            if lapsed(&probe, grace, now)
                && let Some(conditions) = unknown_conditions(node, &now_text)
            {
                tracing::info!(
                    node = name,
                    grace_seconds = grace.as_secs(),
                    "node stopped heartbeating: marking it Unknown"
                );
                status_changes.insert(name.to_owned(), conditions);
            }
            self.probes.insert(name.to_owned(), probe);
        }
        self.probes.retain(|name, _| seen.contains(name));
        // Full disruption is judged on the statuses after this pass's changes.
        let any_ready = nodes.iter().any(|n| {
            let name = str_at(n, "/metadata/name").unwrap_or_default();
            !status_changes.contains_key(name) && ready_status(n) == Some("True")
        });
        let mut written = Vec::new();
        for node in &nodes {
            let Some(name) = str_at(node, "/metadata/name") else {
                continue;
            };
            let mut next = (**node).clone();
            if let Some(conditions) = status_changes.get(name) {
                next["status"]["conditions"] = json!(conditions);
            }
            let new_taints = taints(&next, any_ready, &now_text);
            if !status_changes.contains_key(name) && new_taints.is_none() {
                continue;
            }
            let lapsed_heartbeat = status_changes
                .contains_key(name)
                .then(|| heartbeat_of(node));
            let key = ObjKey {
                group: String::new(),
                resource: "nodes".into(),
                namespace: String::new(),
                name: name.to_owned(),
            };
            let now_text = now_text.clone();
            // Re-derived on the current object: the kubelet may have posted in between, and a
            // fresh heartbeat wins.
            let updated = store.modify(&key, move |obj| {
                if lapsed_heartbeat.as_ref() == Some(&heartbeat_of(obj))
                    && let Some(c) = unknown_conditions(obj, &now_text)
                {
                    obj["status"]["conditions"] = json!(c);
                }
                if let Some(t) = taints(obj, any_ready, &now_text) {
                    if t.is_empty() {
                        if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                            spec.remove("taints");
                        }
                    } else {
                        obj["spec"]["taints"] = json!(t);
                    }
                }
            });
            if updated.is_some() {
                written.push(name.to_owned());
            }
        }
        written
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
