//! Pure fleet view for `kubectl mcm status`: per MachineDeployment, machines by phase, nodes
//! Ready, frozen or paused, preserved machines, and machines stuck with the reason (phase, last
//! operation, how long). No I/O; `now` is a parameter.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Node;
use mcm_api::keys::annotation;
use mcm_api::v1alpha1::{Machine, MachineDeployment, MachinePhase, MachineSet};

use crate::rollout::{Progress, owned_by};
use crate::table::{age, render};

/// Phases in which a machine does its job; any other phase for long enough is "stuck".
const HEALTHY: [MachinePhase; 2] = [MachinePhase::Running, MachinePhase::Available];

/// Phases that mean trouble at once, whatever their age.
const FAILING: [MachinePhase; 3] = [
    MachinePhase::Failed,
    MachinePhase::CrashLoopBackOff,
    MachinePhase::InPlaceUpdateFailed,
];

/// A machine that does not make progress, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stuck {
    /// Machine name.
    pub machine: String,
    /// Phase (`<none>` before the first status).
    pub phase: String,
    /// Seconds in this phase (`currentStatus.lastUpdateTime`, else since creation).
    pub for_seconds: i64,
    /// The last operation's description and error code, or why there is none.
    pub reason: String,
}

/// A preserved machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preserved {
    /// Machine name.
    pub machine: String,
    /// Who asked: the machine's preserve annotation (`now`, `when-failed`, `auto-preserved`),
    /// else `node: <value>` from the node value MCM adopted, else `None`.
    pub requested: Option<String>,
    /// `preserveExpiryTime`, RFC 3339.
    pub until: String,
}

/// The summary of one MachineDeployment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Rollout counters.
    pub progress: Progress,
    /// Current revision annotation.
    pub revision: String,
    /// Machines by phase (`<none>` when no phase yet).
    pub phases: BTreeMap<String, usize>,
    /// Machines that have a node name.
    pub with_node: usize,
    /// Of those, nodes found and Ready; `None` when nodes could not be read.
    pub nodes_ready: Option<usize>,
    /// Preserved machines.
    pub preserved: Vec<Preserved>,
    /// Stuck machines.
    pub stuck: Vec<Stuck>,
}

fn seconds_since(then: Option<jiff::Timestamp>, now: jiff::Timestamp) -> i64 {
    then.map_or(0, |t| now.as_second() - t.as_second())
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// `status.currentStatus.preserveExpiryTime`: set while MCM preserves the machine.
#[must_use]
pub fn preserve_expiry(machine: &Machine) -> Option<jiff::Timestamp> {
    machine
        .status
        .as_ref()?
        .current_status
        .as_ref()?
        .preserve_expiry_time
        .as_ref()
        .map(|t| t.0)
}

/// Where a preservation comes from: the machine's own annotation, else the node's value that
/// MCM adopted (it moves a node request to `last-applied-node-preserve-value` on the machine).
fn preserve_request(machine: &Machine) -> Option<String> {
    let annotations = machine.metadata.annotations.as_ref()?;
    match annotations.get(annotation::PRESERVE) {
        Some(value) => Some(value.clone()),
        None => annotations
            .get(annotation::LAST_APPLIED_NODE_PRESERVE_VALUE)
            .filter(|v| !v.is_empty())
            .map(|v| format!("node: {v}")),
    }
}

/// Why a machine is stuck, or `None` when it is fine (or preserved, which is shown apart).
#[must_use]
pub fn stuck_reason(machine: &Machine, now: jiff::Timestamp, stuck_after: i64) -> Option<Stuck> {
    let status = machine.status.clone().unwrap_or_default();
    let current = status.current_status.clone().unwrap_or_default();
    if preserve_expiry(machine).is_some() {
        return None;
    }
    let since = current
        .last_update_time
        .map(|t| t.0)
        .or_else(|| machine.metadata.creation_timestamp.as_ref().map(|t| t.0));
    let for_seconds = seconds_since(since, now);
    let phase = current.phase.clone();
    let failing = phase.as_ref().is_some_and(|p| FAILING.contains(p));
    let deleting = machine.metadata.deletion_timestamp.is_some();
    let healthy = phase.as_ref().is_some_and(|p| HEALTHY.contains(p)) && !deleting;
    if healthy || (!failing && for_seconds < stuck_after) {
        return None;
    }
    let reason = match status.last_operation {
        Some(op) => {
            let mut text = op.description.unwrap_or_default();
            if let Some(code) = op.error_code.filter(|c| !c.is_empty()) {
                text.push_str(&format!(" (code {code})"));
            }
            if text.is_empty() {
                "<no description>".to_owned()
            } else {
                text
            }
        }
        None => "no status yet: the machine controller has not processed it".to_owned(),
    };
    Some(Stuck {
        machine: machine.metadata.name.clone().unwrap_or_default(),
        phase: phase.map_or_else(|| "<none>".to_owned(), |p| p.to_string()),
        for_seconds,
        reason,
    })
}

/// Summarises `md` from the MachineSets and Machines of its namespace and the target nodes
/// (`None` when nodes could not be read). Machines count when controlled by one of its sets.
#[must_use]
pub fn summarize(
    md: &MachineDeployment,
    sets: &[MachineSet],
    machines: &[Machine],
    nodes: Option<&[Node]>,
    now: jiff::Timestamp,
    stuck_after: i64,
) -> Summary {
    let set_uids: BTreeSet<&str> = sets
        .iter()
        .filter(|s| owned_by(s, md))
        .filter_map(|s| s.metadata.uid.as_deref())
        .collect();
    let mine: Vec<&Machine> = machines
        .iter()
        .filter(|m| {
            m.metadata
                .owner_references
                .as_deref()
                .unwrap_or_default()
                .iter()
                .any(|o| o.controller == Some(true) && set_uids.contains(o.uid.as_str()))
        })
        .collect();
    let mut phases = BTreeMap::new();
    for m in &mine {
        let phase = if m.metadata.deletion_timestamp.is_some() {
            MachinePhase::Terminating.to_string()
        } else {
            m.phase()
                .map_or_else(|| "<none>".to_owned(), ToString::to_string)
        };
        *phases.entry(phase).or_insert(0) += 1;
    }
    let node_names: Vec<&str> = mine.iter().filter_map(|m| m.node_name()).collect();
    let nodes_ready = nodes.map(|nodes| {
        node_names
            .iter()
            .filter(|n| {
                nodes
                    .iter()
                    .any(|node| node.metadata.name.as_deref() == Some(**n) && node_ready(node))
            })
            .count()
    });
    let preserved = mine
        .iter()
        .filter_map(|m| {
            let expiry = preserve_expiry(m)?;
            Some(Preserved {
                machine: m.metadata.name.clone().unwrap_or_default(),
                requested: preserve_request(m),
                until: expiry.to_string(),
            })
        })
        .collect();
    let mut stuck: Vec<Stuck> = mine
        .iter()
        .filter_map(|m| stuck_reason(m, now, stuck_after))
        .collect();
    stuck.sort_by(|a, b| {
        b.for_seconds
            .cmp(&a.for_seconds)
            .then(a.machine.cmp(&b.machine))
    });
    Summary {
        name: md.metadata.name.clone().unwrap_or_default(),
        namespace: md.metadata.namespace.clone().unwrap_or_default(),
        progress: Progress::of(md),
        revision: md
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotation::REVISION))
            .cloned()
            .unwrap_or_else(|| "<none>".to_owned()),
        phases,
        with_node: node_names.len(),
        nodes_ready,
        preserved,
        stuck,
    }
}

fn yes_no(flag: bool) -> &'static str {
    if flag { "yes" } else { "no" }
}

/// Renders one summary: a header line (with the namespace when `show_namespace`), the counters,
/// then one table of machines by phase and, when there are any, the preserved and the stuck
/// machines.
#[must_use]
pub fn render_summary(s: &Summary, show_namespace: bool) -> String {
    let p = &s.progress;
    let nodes = match s.nodes_ready {
        Some(ready) => format!("{ready}/{}", s.with_node),
        None => format!("unknown/{} (nodes not readable)", s.with_node),
    };
    let mut out = format!(
        "machinedeployment.machine.sapcloud.io/{}{}   revision {}   frozen: {}   paused: {}\n\
         Desired {}   Updated {}   Ready {}   Available {}   Old left {}   Nodes Ready {}\n",
        s.name,
        if show_namespace {
            format!("   namespace {}", s.namespace)
        } else {
            String::new()
        },
        s.revision,
        yes_no(p.frozen),
        yes_no(p.paused),
        p.desired,
        p.updated,
        p.ready,
        p.available,
        p.old_left(),
        nodes
    );
    let rows: Vec<Vec<String>> = s
        .phases
        .iter()
        .map(|(phase, n)| vec![phase.clone(), n.to_string()])
        .collect();
    out.push_str(&render(&["PHASE", "MACHINES"], &rows));
    if !s.preserved.is_empty() {
        let rows: Vec<Vec<String>> = s
            .preserved
            .iter()
            .map(|m| {
                vec![
                    m.machine.clone(),
                    m.requested
                        .clone()
                        .unwrap_or_else(|| "<unknown>".to_owned()),
                    m.until.clone(),
                ]
            })
            .collect();
        out.push_str(&render(&["PRESERVED MACHINE", "REQUEST", "UNTIL"], &rows));
    }
    if !s.stuck.is_empty() {
        let rows: Vec<Vec<String>> = s
            .stuck
            .iter()
            .map(|m| {
                vec![
                    m.machine.clone(),
                    m.phase.clone(),
                    age(m.for_seconds),
                    m.reason.clone(),
                ]
            })
            .collect();
        out.push_str(&render(
            &["STUCK MACHINE", "PHASE", "FOR", "LAST OPERATION"],
            &rows,
        ));
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use mcm_api::keys::label;
    use serde_json::json;

    const NOW: &str = "2026-11-25T10:00:00Z";

    fn now() -> jiff::Timestamp {
        NOW.parse().unwrap()
    }

    fn md() -> MachineDeployment {
        serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment",
            "metadata": {"name": "web", "namespace": "shoot", "uid": "md-uid", "generation": 1,
                         "annotations": {annotation::REVISION: "2"}},
            "spec": {"replicas": 3, "template": {}},
            "status": {"observedGeneration": 1, "replicas": 3, "updatedReplicas": 3,
                       "readyReplicas": 2, "availableReplicas": 2}
        }))
        .unwrap()
    }

    fn set(uid: &str, owner: &str) -> MachineSet {
        serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineSet",
            "metadata": {"name": format!("set-{uid}"), "uid": uid, "ownerReferences": [
                {"apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment",
                 "name": "x", "uid": owner, "controller": true}]},
            "spec": {}
        }))
        .unwrap()
    }

    fn machine(
        name: &str,
        owner: &str,
        phase: Option<&str>,
        since: &str,
        op: Option<&str>,
    ) -> Machine {
        let mut m = json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
            "metadata": {"name": name, "creationTimestamp": since,
                         "labels": {label::NODE: format!("node-{name}")},
                         "ownerReferences": [{"apiVersion": "machine.sapcloud.io/v1alpha1",
                             "kind": "MachineSet", "name": "s", "uid": owner, "controller": true}]},
            "spec": {}
        });
        if let Some(phase) = phase {
            m["status"]["currentStatus"] = json!({"phase": phase, "lastUpdateTime": since});
        }
        if let Some(op) = op {
            m["status"]["lastOperation"] = json!({"description": op, "errorCode": "Internal"});
        }
        serde_json::from_value(m).unwrap()
    }

    fn node(name: &str, ready: bool) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        }))
        .unwrap()
    }

    #[test]
    fn counts_phases_nodes_and_stuck_machines_of_the_deployment_only() {
        let sets = [set("s1", "md-uid"), set("s2", "other")];
        let machines = [
            machine("a", "s1", Some("Running"), "2026-11-25T09:00:00Z", None),
            machine("b", "s1", Some("Running"), "2026-11-25T09:00:00Z", None),
            machine(
                "c",
                "s1",
                Some("Pending"),
                "2026-11-25T09:30:00Z",
                Some("Creating machine on cloud provider"),
            ),
            machine("d", "s1", Some("Pending"), "2026-11-25T09:59:00Z", None),
            machine(
                "e",
                "s1",
                Some("CrashLoopBackOff"),
                "2026-11-25T09:59:30Z",
                Some("quota exceeded"),
            ),
            machine("z", "s2", Some("Failed"), "2026-11-25T09:00:00Z", None),
        ];
        let nodes = [node("node-a", true), node("node-b", false)];
        let s = summarize(&md(), &sets, &machines, Some(&nodes), now(), 600);
        assert_eq!(s.phases.get("Running"), Some(&2));
        assert_eq!(s.phases.get("Pending"), Some(&2));
        assert_eq!(
            s.phases.get("Failed"),
            None,
            "machine of another deployment counted"
        );
        assert_eq!((s.with_node, s.nodes_ready), (5, Some(1)));
        let stuck: Vec<(&str, i64)> = s
            .stuck
            .iter()
            .map(|m| (m.machine.as_str(), m.for_seconds))
            .collect();
        // c: Pending for 30m (over 10m); e: CrashLoopBackOff counts at once; d: too young.
        assert_eq!(stuck, [("c", 1800), ("e", 30)]);
        assert_eq!(s.stuck[1].reason, "quota exceeded (code Internal)");
        let text = render_summary(&s, false);
        assert!(text.contains("revision 2"), "{text}");
        assert!(!text.contains("namespace"), "{text}");
        assert!(render_summary(&s, true).contains("namespace shoot"));
        assert!(text.contains("Nodes Ready 1/5"), "{text}");
        assert!(text.contains("STUCK MACHINE"), "{text}");
        assert!(text.contains("30m"), "{text}");
    }

    #[test]
    fn preserved_machines_are_listed_apart_and_not_stuck() {
        let mut m = machine(
            "p",
            "s1",
            Some("Failed"),
            "2026-11-25T09:00:00Z",
            Some("failed"),
        );
        let status = m.status.as_mut().unwrap().current_status.as_mut().unwrap();
        status.preserve_expiry_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-11-26T10:00:00Z".parse().unwrap(),
        ));
        m.metadata.annotations = Some([(annotation::PRESERVE.to_owned(), "now".to_owned())].into());
        let s = summarize(&md(), &[set("s1", "md-uid")], &[m], None, now(), 600);
        assert!(s.stuck.is_empty());
        assert_eq!(s.preserved[0].requested.as_deref(), Some("now"));
        let mut m = machine("q", "s1", Some("Running"), "2026-11-25T09:00:00Z", None);
        m.metadata.annotations = Some(
            [(
                annotation::LAST_APPLIED_NODE_PRESERVE_VALUE.to_owned(),
                "now".to_owned(),
            )]
            .into(),
        );
        assert_eq!(preserve_request(&m).as_deref(), Some("node: now"));
        let text = render_summary(&s, false);
        assert!(text.contains("PRESERVED MACHINE"), "{text}");
        assert!(text.contains("unknown/1 (nodes not readable)"), "{text}");
    }

    #[test]
    fn machine_without_status_is_stuck_after_the_threshold_with_a_reason() {
        let m = machine("n", "s1", None, "2026-11-25T09:00:00Z", None);
        let stuck = stuck_reason(&m, now(), 600).unwrap();
        assert_eq!(stuck.phase, "<none>");
        assert!(stuck.reason.contains("no status yet"));
        assert!(stuck_reason(&m, now(), 7200).is_none());
    }
}
