//! `meta.k8s.io/v1` Table output for `kubectl get`: printer columns evaluated with a small JSONPath
//! subset (`.a.b`, `[n]`, `[*]`, `[?(@.k=="v")]`). Pure functions; the current time is a parameter.

use serde_json::{Value, json};

/// Evaluates a printer-column JSONPath against an object, returning all matches.
pub fn jsonpath(obj: &Value, path: &str) -> Vec<Value> {
    let path = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim();
    let path = path.strip_prefix('$').unwrap_or(path);
    let mut cur = vec![obj.clone()];
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let key = &r[..end];
            rest = &r[end..];
            if key.is_empty() {
                continue;
            }
            cur = cur.iter().filter_map(|v| v.get(key).cloned()).collect();
        } else if let Some(r) = rest.strip_prefix('[') {
            let Some(end) = find_close(r) else {
                return Vec::new();
            };
            let inner = r[..end].trim();
            rest = &r[end + 1..];
            cur = cur.iter().flat_map(|v| index(v, inner)).collect();
        } else {
            return Vec::new();
        }
    }
    cur
}

fn find_close(s: &str) -> Option<usize> {
    let mut depth = 0;
    let mut in_str = None;
    for (i, c) in s.char_indices() {
        match (c, in_str) {
            ('"' | '\'', None) => in_str = Some(c),
            (q, Some(open)) if q == open => in_str = None,
            ('[', None) => depth += 1,
            (']', None) if depth == 0 => return Some(i),
            (']', None) => depth -= 1,
            _ => {}
        }
    }
    None
}

fn index(v: &Value, inner: &str) -> Vec<Value> {
    let Some(arr) = v.as_array() else {
        if let Some(key) = inner.strip_prefix('\'').and_then(|k| k.strip_suffix('\'')) {
            return v.get(key).cloned().into_iter().collect();
        }
        return Vec::new();
    };
    if inner == "*" {
        return arr.clone();
    }
    if let Ok(i) = inner.parse::<i64>() {
        let idx = if i < 0 { arr.len() as i64 + i } else { i };
        return usize::try_from(idx)
            .ok()
            .and_then(|i| arr.get(i))
            .cloned()
            .into_iter()
            .collect();
    }
    if let Some(filter) = inner.strip_prefix("?(").and_then(|f| f.strip_suffix(')')) {
        let (lhs, rhs, negate) = if let Some((l, r)) = filter.split_once("!=") {
            (l, r, true)
        } else if let Some((l, r)) = filter.split_once("==") {
            (l, r, false)
        } else {
            return Vec::new();
        };
        let lhs = lhs.trim().strip_prefix('@').unwrap_or(lhs.trim());
        let want = rhs.trim().trim_matches('"').trim_matches('\'');
        return arr
            .iter()
            .filter(|el| {
                let got = jsonpath(el, lhs);
                let eq = got.first().is_some_and(|g| match g {
                    Value::String(s) => s == want,
                    other => *other == want,
                });
                eq != negate
            })
            .cloned()
            .collect();
    }
    Vec::new()
}

/// kube's `HumanDuration` for ages.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    let s = seconds.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86400);
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        if s % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", s % 60)
        }
    } else if h < 3 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if h < 48 {
        format!("{h}h")
    } else if d < 8 {
        if h % 24 == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{}h", h % 24)
        }
    } else if d < 365 * 2 {
        format!("{d}d")
    } else if d < 365 * 8 {
        let y = d / 365;
        if d % 365 == 0 {
            format!("{y}y")
        } else {
            format!("{y}y{}d", d % 365)
        }
    } else {
        format!("{}y", d / 365)
    }
}

fn age(ts: &Value, now: jiff::Timestamp) -> Value {
    match ts.as_str().and_then(|s| s.parse::<jiff::Timestamp>().ok()) {
        Some(t) => Value::String(human_duration(now.as_second() - t.as_second())),
        None => Value::String("<unknown>".into()),
    }
}

/// Cells kube's built-in printers compute rather than read from one field: `pod-ready`
/// ("ready/total" containers), `pod-restarts` (sum of restart counts), `pod-status` (the reason
/// kubectl shows, e.g. SchedulingGated, Terminating, CrashLoopBackOff) and `or-na` fields.
fn computed_cell(o: &Value, kind: &str, now: jiff::Timestamp) -> Value {
    let statuses = o
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    match kind {
        "pod-ready" => {
            let total = o
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let ready = statuses
                .iter()
                .filter(|s| s.get("ready").and_then(Value::as_bool) == Some(true))
                .count();
            json!(format!("{ready}/{total}"))
        }
        "pod-restarts" => json!(
            statuses
                .iter()
                .filter_map(|s| s.get("restartCount").and_then(Value::as_i64))
                .sum::<i64>()
                .to_string()
        ),
        "pod-status" => json!(pod_status(o, statuses)),
        "node-status" => json!(node_status(o)),
        "node-roles" => json!(node_roles(o)),
        // kube's event printer: LAST SEEN from lastTimestamp, else eventTime (events written
        // through events.k8s.io without the deprecated fields); OBJECT as kind/name.
        "event-last-seen" => {
            let seen = [
                "/lastTimestamp",
                "/eventTime",
                "/metadata/creationTimestamp",
            ]
            .iter()
            .find_map(|p| o.pointer(p).filter(|v| v.is_string()));
            seen.map_or(json!("<unknown>"), |t| age(t, now))
        }
        "event-object" => {
            let field = |f: &str| {
                o.pointer(&format!("/involvedObject/{f}"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            };
            json!(format!(
                "{}/{}",
                field("kind").to_lowercase(),
                field("name")
            ))
        }
        other => match other.strip_prefix("or-na:") {
            Some(path) => match jsonpath(o, path).into_iter().next() {
                Some(Value::String(s)) => json!(s),
                Some(v) if !v.is_null() => json!(v.to_string()),
                _ => json!("N/A"),
            },
            None => Value::Null,
        },
    }
}

/// kube's node STATUS: `Ready` when the Ready condition is True, `NotReady` for any other status
/// (Unknown included), `Unknown` without a Ready condition; `,SchedulingDisabled` when cordoned.
fn node_status(o: &Value) -> String {
    let ready = o
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|conditions| {
            conditions
                .iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        })
        .map(|c| c.get("status").and_then(Value::as_str) == Some("True"));
    let mut status = match ready {
        Some(true) => "Ready".to_owned(),
        Some(false) => "NotReady".to_owned(),
        None => "Unknown".to_owned(),
    };
    if o.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push_str(",SchedulingDisabled");
    }
    status
}

/// kube's node ROLES: the `<role>` of every `node-role.kubernetes.io/<role>` label (and the
/// legacy `kubernetes.io/role` value), sorted and comma-separated, `<none>` without any.
fn node_roles(o: &Value) -> String {
    let mut roles: Vec<&str> = o
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .filter_map(
                    |(key, value)| match key.strip_prefix("node-role.kubernetes.io/") {
                        Some(role) if !role.is_empty() => Some(role),
                        _ if key == "kubernetes.io/role" => {
                            value.as_str().filter(|v| !v.is_empty())
                        }
                        _ => None,
                    },
                )
                .collect()
        })
        .unwrap_or_default();
    roles.sort_unstable();
    roles.dedup();
    if roles.is_empty() {
        "<none>".to_owned()
    } else {
        roles.join(",")
    }
}

fn pod_status(o: &Value, statuses: &[Value]) -> String {
    let str_at = |p: &str| o.pointer(p).and_then(Value::as_str);
    let mut reason = str_at("/status/reason")
        .or_else(|| str_at("/status/phase"))
        .unwrap_or("Pending")
        .to_string();
    let gated = o
        .pointer("/spec/schedulingGates")
        .and_then(Value::as_array)
        .is_some_and(|g| !g.is_empty());
    if gated && str_at("/spec/nodeName").is_none_or(str::is_empty) {
        reason = "SchedulingGated".into();
    }
    for s in statuses.iter().rev() {
        if let Some(r) = s
            .pointer("/state/waiting/reason")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty())
        {
            reason = r.to_string();
        } else if let Some(r) = s
            .pointer("/state/terminated/reason")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty())
        {
            reason = r.to_string();
        }
    }
    if o.pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
    {
        reason = "Terminating".into();
    }
    reason
}

/// Printer columns of built-in kinds whose kube printer computes cells (see [`computed_cell`]),
/// `None` for the others. A column with `"x-name-priority"` sets the priority of the Name column
/// (kube shows an Event's name only with `-o wide`).
#[must_use]
pub fn builtin_columns(group: &str, plural: &str) -> Option<Vec<Value>> {
    match (group, plural) {
        ("", "events") => Some(vec![
            json!({"name": "Last Seen", "type": "string", "x-compute": "event-last-seen", "x-name-priority": 1}),
            json!({"name": "Type", "type": "string", "jsonPath": ".type"}),
            json!({"name": "Reason", "type": "string", "jsonPath": ".reason"}),
            json!({"name": "Object", "type": "string", "x-compute": "event-object"}),
            json!({"name": "Message", "type": "string", "jsonPath": ".message"}),
            json!({"name": "Count", "type": "integer", "jsonPath": ".count", "priority": 1}),
        ]),
        _ => None,
    }
}

/// The object of one watch event for a client that asked for a Table (`kubectl get -w`): a Table
/// with the column definitions and the object's row, as kube-apiserver sends it.
#[must_use]
pub fn watch_row(columns: &[Value], obj: &Value, include: IncludeObject) -> Value {
    let resource_version = obj
        .pointer("/metadata/resourceVersion")
        .cloned()
        .unwrap_or(Value::Null);
    build_table(
        columns,
        std::slice::from_ref(obj),
        json!({"resourceVersion": resource_version}),
        include,
        jiff::Timestamp::now(),
    )
}

/// How rows carry the object (`includeObject` query parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    /// No object.
    None,
    /// `PartialObjectMetadata` (default).
    Metadata,
    /// The full object.
    Object,
}

/// Builds a Table from objects. `columns` are CRD printer columns (empty = Name and Age only).
pub fn build_table(
    columns: &[Value],
    objects: &[Value],
    list_meta: Value,
    include: IncludeObject,
    now: jiff::Timestamp,
) -> Value {
    let name_priority = columns
        .iter()
        .find_map(|c| c.get("x-name-priority").cloned())
        .unwrap_or(json!(0));
    let mut defs = vec![
        json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names", "priority": name_priority}),
    ];
    let cols: Vec<Value> = if columns.is_empty() {
        vec![json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"})]
    } else {
        columns.to_vec()
    };
    for c in &cols {
        defs.push(json!({
            "name": c.get("name").cloned().unwrap_or(Value::Null),
            "type": c.get("type").cloned().unwrap_or(json!("string")),
            "format": c.get("format").cloned().unwrap_or(json!("")),
            "description": c.get("description").cloned().unwrap_or(json!("")),
            "priority": c.get("priority").cloned().unwrap_or(json!(0)),
        }));
    }
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut cells = vec![o.pointer("/metadata/name").cloned().unwrap_or(Value::Null)];
            for c in &cols {
                let path = c.get("jsonPath").and_then(Value::as_str).unwrap_or_default();
                let ty = c.get("type").and_then(Value::as_str).unwrap_or("string");
                if let Some(kind) = c.get("x-compute").and_then(Value::as_str) {
                    cells.push(computed_cell(o, kind, now));
                    continue;
                }
                if let Some(paths) = c.get("x-count").and_then(Value::as_array) {
                    let n: usize = paths.iter().filter_map(Value::as_str).flat_map(|p| jsonpath(o, p)).map(|v| v.as_object().map_or(0, |m| m.len())).sum();
                    cells.push(json!(n));
                    continue;
                }
                let found = jsonpath(o, path).into_iter().next();
                cells.push(match (found, ty) {
                    (Some(v), "date") => age(&v, now),
                    (Some(Value::Object(_) | Value::Array(_)), _) => Value::String(found_to_string(o, path)),
                    (Some(v), _) => v,
                    (None, _) => Value::Null,
                });
            }
            let mut row = json!({"cells": cells});
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => {
                    row["object"] = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o.get("metadata").cloned().unwrap_or(json!({}))});
                }
                IncludeObject::Object => row["object"] = o.clone(),
            }
            row
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta, "columnDefinitions": defs, "rows": rows})
}

fn found_to_string(o: &Value, path: &str) -> String {
    jsonpath(o, path)
        .first()
        .map(|v| v.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn jsonpath_subset() {
        let o = json!({"spec": {"replicas": 3}, "status": {"conditions": [{"type": "A", "status": "False"}, {"type": "Ready", "status": "True"}]}, "metadata": {"labels": {"a.b/c": "x"}}});
        assert_eq!(jsonpath(&o, ".spec.replicas"), vec![json!(3)]);
        assert_eq!(
            jsonpath(&o, ".status.conditions[?(@.type==\"Ready\")].status"),
            vec![json!("True")]
        );
        assert_eq!(jsonpath(&o, ".status.conditions[0].type"), vec![json!("A")]);
        assert_eq!(jsonpath(&o, ".status.conditions[*].type").len(), 2);
        assert_eq!(jsonpath(&o, ".metadata.labels['a.b/c']"), vec![json!("x")]);
        assert!(jsonpath(&o, ".spec.missing").is_empty());
    }

    #[test]
    fn computed_node_cells_follow_kubes_node_printer() {
        let at = jiff::Timestamp::UNIX_EPOCH;
        let node = |ready: Option<&str>, unschedulable: bool, labels: Value| {
            let conditions: Vec<Value> = ready
                .map(|status| json!({"type": "Ready", "status": status}))
                .into_iter()
                .chain([json!({"type": "MemoryPressure", "status": "False"})])
                .collect();
            json!({"metadata": {"name": "n", "labels": labels},
                "spec": {"unschedulable": unschedulable},
                "status": {"conditions": conditions}})
        };
        let none = json!({});
        assert_eq!(
            computed_cell(&node(Some("True"), false, none.clone()), "node-status", at),
            json!("Ready")
        );
        assert_eq!(
            computed_cell(&node(Some("False"), false, none.clone()), "node-status", at),
            json!("NotReady")
        );
        assert_eq!(
            computed_cell(
                &node(Some("Unknown"), true, none.clone()),
                "node-status",
                at
            ),
            json!("NotReady,SchedulingDisabled")
        );
        assert_eq!(
            computed_cell(&node(None, false, none.clone()), "node-status", at),
            json!("Unknown")
        );
        assert_eq!(
            computed_cell(&node(Some("True"), false, none), "node-roles", at),
            json!("<none>")
        );
        let labelled = json!({"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/control-plane": "",
            "kubernetes.io/role": "worker", "other": "x"});
        assert_eq!(
            computed_cell(&node(Some("True"), false, labelled), "node-roles", at),
            json!("control-plane,worker")
        );
    }

    #[test]
    fn computed_pod_and_pdb_cells() {
        let pod = json!({"metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 2},
                {"name": "b", "ready": false, "restartCount": 1,
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}});
        assert_eq!(
            computed_cell(&pod, "pod-ready", jiff::Timestamp::UNIX_EPOCH),
            json!("1/2")
        );
        assert_eq!(
            computed_cell(&pod, "pod-restarts", jiff::Timestamp::UNIX_EPOCH),
            json!("3")
        );
        assert_eq!(
            computed_cell(&pod, "pod-status", jiff::Timestamp::UNIX_EPOCH),
            json!("CrashLoopBackOff")
        );
        let gated = json!({"spec": {"schedulingGates": [{"name": "g"}], "containers": [{"name": "a"}]},
                           "status": {"phase": "Pending"}});
        assert_eq!(
            computed_cell(&gated, "pod-status", jiff::Timestamp::UNIX_EPOCH),
            json!("SchedulingGated")
        );
        assert_eq!(
            computed_cell(&gated, "pod-ready", jiff::Timestamp::UNIX_EPOCH),
            json!("0/1")
        );
        let mut deleting = gated.clone();
        deleting["metadata"] = json!({"deletionTimestamp": "2026-01-01T00:00:00Z"});
        assert_eq!(
            computed_cell(&deleting, "pod-status", jiff::Timestamp::UNIX_EPOCH),
            json!("Terminating")
        );
        let pdb = json!({"spec": {"minAvailable": 1}});
        assert_eq!(
            computed_cell(
                &pdb,
                "or-na:.spec.minAvailable",
                jiff::Timestamp::UNIX_EPOCH
            ),
            json!("1")
        );
        assert_eq!(
            computed_cell(
                &pdb,
                "or-na:.spec.maxUnavailable",
                jiff::Timestamp::UNIX_EPOCH
            ),
            json!("N/A")
        );
    }

    #[test]
    fn event_rows_show_last_seen_type_reason_object_and_message() {
        let columns = builtin_columns("", "events").unwrap();
        let event = json!({
            "metadata": {"name": "m1.abc", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "eventTime": "2020-01-01T00:00:00.000000Z", "type": "Warning", "reason": "Blocked",
            "involvedObject": {"kind": "Machine", "name": "m1"}, "message": "why", "count": 1
        });
        let table = build_table(
            &columns,
            &[event],
            json!({}),
            IncludeObject::None,
            "2020-01-01T01:00:00Z".parse().unwrap(),
        );
        assert_eq!(
            table["columnDefinitions"][0]["priority"], 1,
            "Name only with -o wide"
        );
        let cells = &table["rows"][0]["cells"];
        assert_eq!(cells[2], "Warning");
        assert_eq!(cells[3], "Blocked");
        assert_eq!(cells[4], "machine/m1");
        assert_eq!(cells[5], "why");
        assert_eq!(cells[1], "60m", "LAST SEEN from eventTime");
    }

    #[test]
    fn durations() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(3600 * 5 + 60), "5h1m");
        assert_eq!(human_duration(86400 * 3), "3d");
    }

    #[test]
    fn table_rows_follow_columns() {
        let now: jiff::Timestamp = "2026-01-01T00:10:00Z".parse().unwrap();
        let objs = vec![
            json!({"metadata": {"name": "m1", "creationTimestamp": "2026-01-01T00:00:00Z"}, "status": {"phase": "Running"}}),
        ];
        let cols = vec![
            json!({"name": "Status", "type": "string", "jsonPath": ".status.phase"}),
            json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}),
        ];
        let t = build_table(&cols, &objs, json!({}), IncludeObject::Metadata, now);
        assert_eq!(t["rows"][0]["cells"], json!(["m1", "Running", "10m"]));
        assert_eq!(t["columnDefinitions"][1]["name"], "Status");
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    }
}
