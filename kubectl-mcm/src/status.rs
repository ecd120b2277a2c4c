//! Pure fleet view for `kubectl mcm status`: per MachineDeployment, machines by phase, nodes
//! Ready, frozen or paused, preserved machines, and machines stuck with the reason (phase, last
//! operation, how long). No I/O; `now` is a parameter.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Node;
use mcm_api::keys::{annotation, preserve};
use mcm_api::v1alpha1::{Machine, MachineClass, MachineDeployment, MachinePhase, MachineSet};
use mcm_decisions::machine::class_validation::recorded_invalid;

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

/// Widest `LAST OPERATION` cell of the stuck-machine table, in characters. A description can be
/// kilobytes (a provider's error, a dump of every node condition); the table shows its gist and
/// `kubectl get mc <machine> -o jsonpath='{.status.lastOperation}'` the whole text.
pub const LAST_OPERATION_WIDTH: usize = 110;

/// A machine that does not make progress, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stuck {
    /// Machine name.
    pub machine: String,
    /// Phase (`<none>` before the first status).
    pub phase: String,
    /// Seconds in this phase (`currentStatus.lastUpdateTime`, else since creation).
    pub for_seconds: i64,
    /// The last operation's description (summarised by [`summarize_description`]) and error
    /// code, or why there is none.
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
    /// The template's class and its field errors, when the MachineClass controller recorded the
    /// class invalid (docs/operations.md#a-machineclass-marked-invalid).
    pub invalid_class: Option<(String, String)>,
}

/// The template class of `md` and its recorded field errors, when `classes` holds it and it is
/// recorded invalid.
#[must_use]
pub fn invalid_class(md: &MachineDeployment, classes: &[MachineClass]) -> Option<(String, String)> {
    let name = md
        .spec
        .template
        .spec
        .as_ref()?
        .class
        .as_ref()?
        .name
        .as_deref()?;
    let class = classes.iter().find(|class| {
        class.metadata.name.as_deref() == Some(name)
            && class.metadata.namespace == md.metadata.namespace
    })?;
    recorded_invalid(class.metadata.annotations.as_ref())
        .map(|errors| (name.to_owned(), errors.to_owned()))
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
            let description = op.description.unwrap_or_default();
            // "Machine <name> is unhealthy ...": the name is in the first column already.
            let own_name = format!(
                "Machine {} ",
                machine.metadata.name.as_deref().unwrap_or("")
            );
            let description = match description.strip_prefix(&own_name) {
                Some(rest) => format!("Machine {rest}"),
                None => description,
            };
            // The error code is kept whole (the description gets the rest of the width), unless
            // the condensed provider error starts with it already.
            let suffix = match op.error_code.filter(|c| !c.is_empty()) {
                Some(code)
                    if !summarize_description(&description, usize::MAX)
                        .starts_with(&format!("{code}: ")) =>
                {
                    format!(" (code {code})")
                }
                _ => String::new(),
            };
            let width = LAST_OPERATION_WIDTH.saturating_sub(suffix.chars().count());
            let text = format!("{}{suffix}", summarize_description(&description, width));
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

/// Marker of the node-condition dump the health check appends to a description (upstream writes
/// `Node conditions:` when a machine turns Unknown and `Node Conditions:` when it fails).
const CONDITIONS_MARKER: &str = "node conditions: [";

/// A lastOperation description made readable in one table cell of at most `width` characters:
/// a provider error in the driver contract's wording (`Cloud provider message - machine codes
/// error: code = [<code>] message = [<message>]`) becomes `<code>: <message>`; a dump of node
/// conditions (`Node conditions: [{Type:Ready Status:False Reason:... Message:...}
/// ...]`, also Go's `%+v` with timestamps as the Go MCM writes it) becomes `Type=Status` pairs,
/// those that make a node unhealthy first (`Ready` not `True`, any other not `False`); only the
/// first line is kept (` …` marks dropped lines); runs of blanks become one space; a longer text
/// is cut at a word boundary and ends with `…`.
#[must_use]
pub fn summarize_description(description: &str, width: usize) -> String {
    let condensed = condense_conditions(&condense_provider_error(description));
    let mut lines = condensed.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or_default();
    let mut text = first.split_whitespace().collect::<Vec<_>>().join(" ");
    if lines.next().is_some() {
        text.push_str(" …");
    }
    truncate_at_word(&text, width)
}

/// Marker of a provider error in the wording of the driver contract
/// (`mcm_provider_proto::codes`), after upstream's `Cloud provider message - ` prefix.
const PROVIDER_ERROR_MARKER: &str = "machine codes error: code = [";

/// `... machine codes error: code = [C] message = [M] rest` as `C: M rest`, dropping upstream's
/// `Cloud provider message - ` prefix; other text is returned as it is.
fn condense_provider_error(description: &str) -> String {
    let Some(at) = description.find(PROVIDER_ERROR_MARKER) else {
        return description.to_owned();
    };
    let after = &description[at + PROVIDER_ERROR_MARKER.len()..];
    let Some((code, rest)) = after.split_once("] message = [") else {
        return description.to_owned();
    };
    // The message may hold brackets itself: it ends at the last `]` of its line.
    let line_end = rest.find('\n').unwrap_or(rest.len());
    let Some(close) = rest[..line_end].rfind(']') else {
        return description.to_owned();
    };
    let before = description[..at]
        .trim_end()
        .trim_end_matches("Cloud provider message -")
        .trim_end();
    let before = if before.is_empty() {
        String::new()
    } else {
        format!("{before} ")
    };
    format!("{before}{code}: {}{}", &rest[..close], &rest[close + 1..])
}

/// Replaces the first node-condition dump of `description` by `Type=Status` pairs (unhealthy
/// first); the text around it stays. A dump cut short (no closing `}]`) is condensed up to the
/// end.
fn condense_conditions(description: &str) -> String {
    // ASCII lower-casing keeps byte offsets, so positions found in `lower` index `description`.
    let lower = description.to_ascii_lowercase();
    let Some(start) = lower.find(CONDITIONS_MARKER) else {
        return description.to_owned();
    };
    let dump_start = start + CONDITIONS_MARKER.len() - 1; // at '['
    let (dump, rest) = match description[dump_start..].rfind("}]") {
        Some(end) => (
            &description[dump_start..dump_start + end + 2],
            &description[dump_start + end + 2..],
        ),
        None => (&description[dump_start..], ""),
    };
    let pairs = condition_pairs(dump);
    if pairs.is_empty() {
        return description.to_owned();
    }
    let (unhealthy, healthy): (Vec<_>, Vec<_>) = pairs.into_iter().partition(|(type_, status)| {
        if type_ == "Ready" {
            status != "True"
        } else {
            status != "False"
        }
    });
    let listed: Vec<String> = unhealthy
        .into_iter()
        .chain(healthy)
        .map(|(type_, status)| format!("{type_}={status}"))
        .collect();
    // The marker as written (its case), without the '['.
    let label = description[start..dump_start].trim_end();
    format!(
        "{}{label} {}{rest}",
        &description[..start],
        listed.join(", ")
    )
}

/// `(type, status)` of every `{Type:<type> Status:<status> ...}` entry of a dump.
fn condition_pairs(dump: &str) -> Vec<(String, String)> {
    dump.split("{Type:")
        .skip(1)
        .filter_map(|entry| {
            let mut words = entry.split_whitespace();
            let type_ = words.next()?.trim_end_matches(['}', ']']);
            let status = words.next()?.strip_prefix("Status:")?;
            let status = status.trim_end_matches(['}', ']']);
            (!type_.is_empty() && !status.is_empty()).then(|| (type_.to_owned(), status.to_owned()))
        })
        .collect()
}

/// `text` when it fits in `width` characters, else its longest prefix ending at a word boundary
/// that fits with a trailing `…` (a hard cut when the first word alone is too long).
fn truncate_at_word(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let keep = width.saturating_sub(1);
    let prefix: String = text.chars().take(keep).collect();
    // Cut before the word that does not fit entirely.
    let next_is_break = text.chars().nth(keep).is_some_and(char::is_whitespace);
    let cut = if next_is_break {
        prefix.trim_end()
    } else {
        match prefix.rfind(char::is_whitespace) {
            Some(at) if !prefix[..at].trim_end().is_empty() => prefix[..at].trim_end(),
            _ => prefix.as_str(),
        }
    };
    let cut = cut.trim_end_matches([',', ';', ':', '-', ' ']);
    format!("{cut}…")
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
    // Preserved now (an expiry is set), or armed: `when-failed` on the machine or its node is
    // preserved only once the machine fails, and has no expiry until then.
    let preserved = mine
        .iter()
        .filter_map(|m| {
            let requested = preserve_request(m);
            let until = match preserve_expiry(m) {
                Some(expiry) => expiry.to_string(),
                None if requested
                    .as_deref()
                    .is_some_and(|r| r.ends_with(preserve::WHEN_FAILED)) =>
                {
                    "when it fails (then --machine-preserve-timeout)".to_owned()
                }
                None => return None,
            };
            Some(Preserved {
                machine: m.metadata.name.clone().unwrap_or_default(),
                requested,
                until,
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
        invalid_class: None,
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
    if let Some((class, errors)) = &s.invalid_class {
        out.push_str(&format!("class {class}: invalid providerSpec: {errors}\n"));
    }
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
        assert!(!text.contains("invalid providerSpec"), "{text}");
    }

    #[test]
    fn a_template_class_recorded_invalid_is_shown() {
        let class = |name: &str, record: Option<&str>| -> MachineClass {
            let mut value = json!({
                "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineClass",
                "metadata": {"name": name, "namespace": "shoot"},
                "providerSpec": {},
            });
            if let Some(record) = record {
                value["metadata"]["annotations"] = json!({annotation::CLASS_VALIDATION: record});
            }
            serde_json::from_value(value).unwrap()
        };
        let mut md = md();
        md.spec.template.spec = Some(
            serde_json::from_value(
                json!({"class": {"kind": "MachineClass", "name": "virtual-small"}}),
            )
            .unwrap(),
        );
        let bad = class(
            "virtual-small",
            Some("invalid: providerSpec.bootDelay: not a duration: \"soon\""),
        );
        assert_eq!(
            invalid_class(&md, &[class("virtual-small", Some("valid"))]),
            None
        );
        assert_eq!(invalid_class(&md, &[class("virtual-small", None)]), None);
        assert_eq!(
            invalid_class(&md, &[class("other", Some("invalid: x: y"))]),
            None
        );
        let mut s = summarize(&md, &[], &[], None, now(), 600);
        s.invalid_class = invalid_class(&md, &[bad]);
        let text = render_summary(&s, false);
        assert!(
            text.contains(
                "class virtual-small: invalid providerSpec: providerSpec.bootDelay: not a duration: \"soon\""
            ),
            "{text}"
        );
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
        // Armed `when-failed` preservations of running machines are listed too, without expiry.
        let mut armed = machine("w", "s1", Some("Running"), "2026-11-25T09:00:00Z", None);
        armed.metadata.annotations =
            Some([(annotation::PRESERVE.to_owned(), "when-failed".to_owned())].into());
        let mut by_node = machine("v", "s1", Some("Running"), "2026-11-25T09:00:00Z", None);
        by_node.metadata.annotations = Some(
            [(
                annotation::LAST_APPLIED_NODE_PRESERVE_VALUE.to_owned(),
                "when-failed".to_owned(),
            )]
            .into(),
        );
        let with_armed = summarize(
            &md(),
            &[set("s1", "md-uid")],
            &[armed, by_node],
            None,
            now(),
            600,
        );
        let listed: Vec<(&str, Option<&str>)> = with_armed
            .preserved
            .iter()
            .map(|p| (p.machine.as_str(), p.requested.as_deref()))
            .collect();
        assert_eq!(
            listed,
            vec![("w", Some("when-failed")), ("v", Some("node: when-failed"))]
        );
        assert!(with_armed.preserved[0].until.starts_with("when it fails"));
        let text = render_summary(&s, false);
        assert!(text.contains("PRESERVED MACHINE"), "{text}");
        assert!(text.contains("unknown/1 (nodes not readable)"), "{text}");
    }

    /// What the health check writes when a node turns NotReady (controller's
    /// `render_conditions`), for a node with the five conditions a kubelet reports.
    const UNKNOWN: &str = "Machine worker-a-5d8f7c9b4-x2k8q is unhealthy - changing MachinePhase to Unknown. Node conditions: [{Type:MemoryPressure Status:False Reason:KubeletHasSufficientMemory Message:kubelet has sufficient memory available} {Type:DiskPressure Status:False Reason:KubeletHasNoDiskPressure Message:kubelet has no disk pressure} {Type:PIDPressure Status:False Reason:KubeletHasSufficientPID Message:kubelet has sufficient PID available} {Type:Ready Status:False Reason:KubeletNotReady Message:container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized} {Type:NetworkUnavailable Status:False Reason:RouteCreated Message:RouteController created a route}]";

    #[test]
    fn node_condition_dump_becomes_type_status_pairs_unhealthy_first() {
        assert_eq!(
            summarize_description(UNKNOWN, 1000),
            "Machine worker-a-5d8f7c9b4-x2k8q is unhealthy - changing MachinePhase to Unknown. \
             Node conditions: Ready=False, MemoryPressure=False, DiskPressure=False, \
             PIDPressure=False, NetworkUnavailable=False"
        );
        // Cut after a whole pair, the unhealthy one kept (the table drops the machine's name
        // first: `stuck_table_shows_the_summary_and_keeps_the_error_code`).
        assert_eq!(
            summarize_description(UNKNOWN, 120),
            "Machine worker-a-5d8f7c9b4-x2k8q is unhealthy - changing MachinePhase to Unknown. \
             Node conditions: Ready=False…"
        );
    }

    #[test]
    fn go_dump_with_timestamps_and_the_failed_variant_are_condensed_too() {
        // The Go MCM formats the conditions with %+v: timestamps with spaces, zero values.
        let failed = "Machine shoot--p--c-worker-z1-6b7c8-abcde health checks failing since last 10 minutes. Updating machine phase to Failed. Node Conditions: [{Type:KernelDeadlock Status:True LastHeartbeatTime:2026-11-25 09:58:00 +0000 UTC LastTransitionTime:2026-11-25 09:40:00 +0000 UTC Reason:KernelHasDeadlock Message:kernel: INFO: task docker:20744 blocked for more than 120 seconds.} {Type:Ready Status:Unknown LastHeartbeatTime:2026-11-25 09:50:00 +0000 UTC LastTransitionTime:2026-11-25 09:51:00 +0000 UTC Reason:NodeStatusUnknown Message:Kubelet stopped posting node status.}]";
        assert_eq!(
            summarize_description(failed, 1000),
            "Machine shoot--p--c-worker-z1-6b7c8-abcde health checks failing since last 10 \
             minutes. Updating machine phase to Failed. Node Conditions: KernelDeadlock=True, \
             Ready=Unknown"
        );
        // A dump cut short (no closing "}]") still yields its pairs; text after a dump stays.
        let cut = "Machine m is unhealthy. Node conditions: [{Type:Ready Status:False Reason:Kube";
        assert_eq!(
            summarize_description(cut, 1000),
            "Machine m is unhealthy. Node conditions: Ready=False"
        );
        let after = "x. Node conditions: [{Type:Ready Status:True Reason:a Message:b}] (attempt 2)";
        assert_eq!(
            summarize_description(after, 1000),
            "x. Node conditions: Ready=True (attempt 2)"
        );
        // No entry to read: the text is left as it is.
        assert_eq!(
            summarize_description("Node conditions: [] seen", 1000),
            "Node conditions: [] seen"
        );
    }

    #[test]
    fn first_line_only_and_cut_at_a_word_boundary() {
        // A drain error: one line per pod that could not be evicted.
        let drain = "Drain failed due to - error when evicting pods/\"web-7d4b9c-2xk4p\" -n \"shop\": Cannot evict pod as it would violate the pod's disruption budget.\nerror when evicting pods/\"web-7d4b9c-9qv2m\" -n \"shop\": Cannot evict pod as it would violate the pod's disruption budget. Will retry in next sync. Initiate node drain";
        assert_eq!(
            summarize_description(drain, 1000),
            "Drain failed due to - error when evicting pods/\"web-7d4b9c-2xk4p\" -n \"shop\": \
             Cannot evict pod as it would violate the pod's disruption budget. …"
        );
        let long = "Drain failed due to - error when evicting pods/\"web-7d4b9c-2xk4p\" -n \"shop\": Cannot evict pod as it would violate the pod's disruption budget.";
        let cell = summarize_description(long, 80);
        assert_eq!(
            cell,
            "Drain failed due to - error when evicting pods/\"web-7d4b9c-2xk4p\" -n \"shop\"…"
        );
        assert!(cell.chars().count() <= 80);
        // Exactly the width: unchanged; blanks collapse.
        assert_eq!(summarize_description("a  b\tc", 5), "a b c");
        // One word longer than the width: a hard cut.
        assert_eq!(summarize_description("abcdefghij", 5), "abcd…");
        assert_eq!(summarize_description("", 10), "");
        assert_eq!(summarize_description("\n\nsecond", 10), "second");
    }

    #[test]
    fn provider_errors_become_code_and_message() {
        // The driver contract's wording (upstream's), with the backoff suffix we append.
        let provider = "Cloud provider message - machine codes error: code = [Unavailable] message = [cloud API down: dial tcp [fd00::1]:443: connect: connection refused] (attempt 4, next retry at 2026-11-26T03:04:05.123Z)";
        assert_eq!(
            summarize_description(provider, 1000),
            "Unavailable: cloud API down: dial tcp [fd00::1]:443: connect: connection refused \
             (attempt 4, next retry at 2026-11-26T03:04:05.123Z)"
        );
        // A deletion step keeps its text around the error.
        let deletion = "Machine deletion failed: machine codes error: code = [Internal] message = [VM is locked] Initiate VM deletion";
        assert_eq!(
            summarize_description(deletion, 1000),
            "Machine deletion failed: Internal: VM is locked Initiate VM deletion"
        );
        // Not the contract's wording: unchanged.
        let plain = "Cloud provider message - quota exceeded in zone a";
        assert_eq!(summarize_description(plain, 1000), plain);
        let cut = "machine codes error: code = [Internal] message = [no end";
        assert_eq!(summarize_description(cut, 1000), cut);
        // In the table the code is not repeated when the summary starts with it.
        let mut m = machine(
            "kd-md-wkhv4-8l5fl",
            "s1",
            Some("CrashLoopBackOff"),
            "2026-11-25T09:59:00Z",
            Some(
                "Cloud provider message - machine codes error: code = [ResourceExhausted] message = [injected failure 2/100000 of create for machine e2e/kd-md-wkhv4-8l5fl (providerSpec.failures.create)]",
            ),
        );
        m.status
            .as_mut()
            .unwrap()
            .last_operation
            .as_mut()
            .unwrap()
            .error_code = Some("ResourceExhausted".to_owned());
        assert_eq!(
            stuck_reason(&m, now(), 600).unwrap().reason,
            "ResourceExhausted: injected failure 2/100000 of create for machine \
             e2e/kd-md-wkhv4-8l5fl…"
        );
    }

    #[test]
    fn stuck_table_shows_the_summary_and_keeps_the_error_code() {
        let m = machine(
            "worker-a-5d8f7c9b4-x2k8q",
            "s1",
            Some("Unknown"),
            "2026-11-25T09:00:00Z",
            Some(UNKNOWN),
        );
        let stuck = stuck_reason(&m, now(), 600).unwrap();
        // The machine's own name is dropped (it is the first column); the pair that makes the
        // node unhealthy stays whole, and the error code is never cut.
        assert_eq!(
            stuck.reason,
            "Machine is unhealthy - changing MachinePhase to Unknown. Node conditions: \
             Ready=False… (code Internal)"
        );
        let text = render_summary(
            &summarize(&md(), &[set("s1", "md-uid")], &[m], None, now(), 600),
            false,
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with("worker-a-5d8f7c9b4-x2k8q")
                    && l.ends_with("Node conditions: Ready=False… (code Internal)")),
            "{text}"
        );
        // Another machine's name in the text is not touched.
        let other = machine(
            "x",
            "s1",
            Some("Failed"),
            "2026-11-25T09:00:00Z",
            Some(UNKNOWN),
        );
        assert!(
            stuck_reason(&other, now(), 600)
                .unwrap()
                .reason
                .starts_with("Machine worker-a-5d8f7c9b4-x2k8q is unhealthy")
        );
        assert!(!stuck.reason.contains("{Type:"), "{}", stuck.reason);
        assert!(
            stuck.reason.chars().count() <= LAST_OPERATION_WIDTH,
            "{} is {} characters",
            stuck.reason,
            stuck.reason.chars().count()
        );
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
