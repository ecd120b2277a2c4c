//! Server-side apply, approximated: per-manager field sets kept in `metadata.managedFields`
//! (FieldsV1 encoding), conflicts with every other manager (appliers and updaters; 409 unless
//! forced), removal of fields a manager stops applying, and a strategic merge of the applied
//! configuration. Plain updates take ownership of the fields they change.

use crate::patch::{is_set_list, merge_key, strategic_merge};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// One path segment in FieldsV1 form: `f:name`, `k:{"name":"a"}` or `v:"x"`.
pub type Path = Vec<String>;

fn walk(v: &Value, field: &str, path: &mut Path, out: &mut BTreeSet<Path>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, c) in m {
                path.push(format!("f:{k}"));
                walk(c, k, path, out);
                path.pop();
            }
        }
        Value::Array(a) if !a.is_empty() && is_set_list(field) => {
            for el in a {
                path.push(format!("v:{el}"));
                out.insert(path.clone());
                path.pop();
            }
        }
        Value::Array(a) if !a.is_empty() && a.iter().all(Value::is_object) => {
            match merge_key(field, a.first()) {
                Some(key) if a.iter().all(|e| e.get(key).is_some()) => {
                    for el in a {
                        let mut kobj = Map::new();
                        kobj.insert(key.to_string(), el.get(key).cloned().unwrap_or(Value::Null));
                        path.push(format!("k:{}", Value::Object(kobj)));
                        walk(el, "", path, out);
                        path.pop();
                    }
                }
                _ => {
                    out.insert(path.clone());
                }
            }
        }
        _ => {
            out.insert(path.clone());
        }
    }
}

/// The fields an applied configuration sets (apiVersion, kind and identity metadata excluded).
pub fn field_set(applied: &Value) -> BTreeSet<Path> {
    let mut out = BTreeSet::new();
    let Some(m) = applied.as_object() else {
        return out;
    };
    for (k, v) in m {
        match k.as_str() {
            "apiVersion" | "kind" => {}
            "metadata" => {
                for mk in ["labels", "annotations", "finalizers", "ownerReferences"] {
                    if let Some(mv) = v.get(mk) {
                        let mut p = vec!["f:metadata".to_string(), format!("f:{mk}")];
                        walk(mv, mk, &mut p, &mut out);
                    }
                }
            }
            _ => {
                let mut p = vec![format!("f:{k}")];
                walk(v, k, &mut p, &mut out);
            }
        }
    }
    out
}

/// Encodes a field set as FieldsV1.
pub fn to_fields_v1(set: &BTreeSet<Path>) -> Value {
    let mut root = Value::Object(Map::new());
    for p in set {
        let mut cur = &mut root;
        for seg in p {
            if !cur.is_object() {
                *cur = json!({});
            }
            let next = cur
                .as_object_mut()
                .map(|m| m.entry(seg.clone()).or_insert_with(|| json!({})));
            match next {
                Some(n) => cur = n,
                None => break,
            }
        }
    }
    root
}

/// Decodes FieldsV1 into a field set (leaves are empty objects; `.` marks are ignored).
pub fn from_fields_v1(v: &Value) -> BTreeSet<Path> {
    fn rec(v: &Value, path: &mut Path, out: &mut BTreeSet<Path>) {
        let Some(m) = v.as_object() else { return };
        let children: Vec<(&String, &Value)> =
            m.iter().filter(|(k, _)| k.as_str() != ".").collect();
        if children.is_empty() {
            if !path.is_empty() {
                out.insert(path.clone());
            }
            return;
        }
        for (k, c) in children {
            path.push(k.clone());
            rec(c, path, out);
            path.pop();
        }
    }
    let mut out = BTreeSet::new();
    rec(v, &mut Vec::new(), &mut out);
    out
}

fn step<'a>(v: &'a Value, seg: &str) -> Option<&'a Value> {
    if let Some(f) = seg.strip_prefix("f:") {
        return v.get(f);
    }
    let arr = v.as_array()?;
    if let Some(k) = seg.strip_prefix("k:") {
        let key: Value = serde_json::from_str(k).ok()?;
        let km = key.as_object()?;
        return arr
            .iter()
            .find(|e| km.iter().all(|(kk, kv)| e.get(kk) == Some(kv)));
    }
    if let Some(x) = seg.strip_prefix("v:") {
        let want: Value = serde_json::from_str(x).ok()?;
        return arr.iter().find(|e| **e == want);
    }
    None
}

/// Value at a path, if present.
pub fn value_at<'a>(v: &'a Value, path: &Path) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, seg| step(cur, seg))
}

/// Removes the value at a path (no-op when absent).
pub fn remove_path(v: &mut Value, path: &Path) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for seg in parents {
        let next = if let Some(f) = seg.strip_prefix("f:") {
            cur.get_mut(f)
        } else {
            let idx = cur.as_array().and_then(|a| {
                let target = step(&Value::Array(a.clone()), seg)?.clone();
                a.iter().position(|e| *e == target)
            });
            match idx {
                Some(i) => cur.get_mut(i),
                None => None,
            }
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    if let Some(f) = last.strip_prefix("f:") {
        if let Some(m) = cur.as_object_mut() {
            m.remove(f);
        }
    } else if let Some(a) = cur.as_array() {
        let target = step(&Value::Array(a.clone()), last).cloned();
        if let (Some(t), Some(arr)) = (target, cur.as_array_mut()) {
            arr.retain(|e| *e != t);
        }
    }
}

/// Human-readable form of a path (`.data.a`, `.spec.containers[name="a"].image`).
pub fn describe(path: &Path) -> String {
    path.iter()
        .map(|s| {
            if let Some(f) = s.strip_prefix("f:") {
                format!(".{f}")
            } else if let Some(k) = s.strip_prefix("k:") {
                let kv: Value = serde_json::from_str(k).unwrap_or(Value::Null);
                let inner = kv
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(a, b)| format!("{a}={b}"))
                            .collect::<Vec<_>>()
                            .join(",")
                    })
                    .unwrap_or_default();
                format!("[{inner}]")
            } else {
                format!("[={}]", s.trim_start_matches("v:"))
            }
        })
        .collect()
}

/// The outcome of an apply.
#[derive(Debug, Clone, PartialEq)]
pub enum ApplyOutcome {
    /// The object to write.
    Apply(Value),
    /// Conflicts: (other manager, paths).
    Conflicts(Vec<(String, Vec<String>)>),
}

fn managers(obj: &Value) -> Vec<Value> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Applies `applied` for `manager` to `live` (an empty object when creating).
pub fn server_side_apply(
    live: &Value,
    applied: &Value,
    manager: &str,
    force: bool,
    api_version: &str,
    now: &str,
) -> Result<ApplyOutcome, String> {
    let new_set = field_set(applied);
    let entries = managers(live);
    let mut old_mine = BTreeSet::new();
    let mut others: BTreeMap<usize, BTreeSet<Path>> = BTreeMap::new();
    for (i, e) in entries.iter().enumerate() {
        let set = e.get("fieldsV1").map(from_fields_v1).unwrap_or_default();
        let name = e.get("manager").and_then(Value::as_str).unwrap_or_default();
        let op = e
            .get("operation")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if name == manager && op == "Apply" {
            old_mine = set;
        } else {
            // Like kube, an applier conflicts with every other manager, Update managers too.
            others.insert(i, set);
        }
    }
    let mut conflicts: Vec<(String, Vec<String>)> = Vec::new();
    for (i, set) in &others {
        let clash: Vec<&Path> = set
            .intersection(&new_set)
            .filter(|p| value_at(live, p) != value_at(applied, p))
            .collect();
        if !clash.is_empty() {
            let name = entries[*i]
                .get("manager")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            conflicts.push((name, clash.iter().map(|p| describe(p)).collect()));
        }
    }
    if !conflicts.is_empty() && !force {
        return Ok(ApplyOutcome::Conflicts(conflicts));
    }
    // Fields any other manager (Apply or Update) owns are never removed by this applier.
    let others_union: BTreeSet<Path> = entries
        .iter()
        .filter(|e| {
            !(e.get("manager").and_then(Value::as_str) == Some(manager)
                && e.get("operation").and_then(Value::as_str) == Some("Apply"))
        })
        .flat_map(|e| e.get("fieldsV1").map(from_fields_v1).unwrap_or_default())
        .collect();
    let mut base = live.clone();
    for p in old_mine.difference(&new_set) {
        if !others_union.contains(p) {
            remove_path(&mut base, p);
        }
    }
    let mut merged = strategic_merge(&base, applied)?;
    let mut new_entries = Vec::new();
    let mut placed = false;
    for (i, e) in entries.iter().enumerate() {
        let name = e.get("manager").and_then(Value::as_str).unwrap_or_default();
        let op = e
            .get("operation")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if name == manager && op == "Apply" {
            placed = true;
            new_entries.push(json!({"manager": manager, "operation": "Apply", "apiVersion": api_version, "time": now, "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(&new_set)}));
        } else if let Some(set) = others.get(&i) {
            let kept: BTreeSet<Path> = if force {
                set.difference(&new_set).cloned().collect()
            } else {
                set.clone()
            };
            if !kept.is_empty() {
                let mut e = e.clone();
                e["fieldsV1"] = to_fields_v1(&kept);
                new_entries.push(e);
            }
        } else {
            new_entries.push(e.clone());
        }
    }
    if !placed {
        new_entries.push(json!({"manager": manager, "operation": "Apply", "apiVersion": api_version, "time": now, "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(&new_set)}));
    }
    if !merged.get("metadata").is_some_and(Value::is_object) {
        merged["metadata"] = json!({});
    }
    merged["metadata"]["managedFields"] = Value::Array(new_entries);
    Ok(ApplyOutcome::Apply(merged))
}

/// Records a non-apply write in managedFields: `manager` (operation Update) takes ownership of
/// the fields it changed; removed fields leave every field set.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    api_version: &str,
    subresource: Option<&str>,
    now: &str,
) {
    let new_set = field_set(new);
    let old_set = old.map(field_set).unwrap_or_default();
    let changed: BTreeSet<Path> = new_set
        .iter()
        .filter(|p| old.is_none_or(|o| value_at(o, p) != value_at(new, p)))
        .cloned()
        .collect();
    let removed: BTreeSet<Path> = old_set.difference(&new_set).cloned().collect();
    if changed.is_empty() && removed.is_empty() {
        return;
    }
    let mut entries = Vec::new();
    let mut found = false;
    for e in managers(new) {
        let mut set = e.get("fieldsV1").map(from_fields_v1).unwrap_or_default();
        let mine = e.get("manager").and_then(Value::as_str) == Some(manager)
            && e.get("operation").and_then(Value::as_str) == Some("Update")
            && e.get("subresource").and_then(Value::as_str) == subresource;
        set.retain(|p| !removed.contains(p));
        if mine {
            set.extend(changed.iter().cloned());
            found = true;
        } else {
            set.retain(|p| !changed.contains(p));
        }
        if set.is_empty() {
            continue;
        }
        let mut e = e.clone();
        e["fieldsV1"] = to_fields_v1(&set);
        if mine {
            e["time"] = json!(now);
            e["apiVersion"] = json!(api_version);
        }
        entries.push(e);
    }
    if !found && !changed.is_empty() {
        let mut e = json!({"manager": manager, "operation": "Update", "apiVersion": api_version, "time": now, "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(&changed)});
        if let Some(s) = subresource {
            e["subresource"] = json!(s);
        }
        entries.push(e);
    }
    if !new.get("metadata").is_some_and(Value::is_object) {
        new["metadata"] = json!({});
    }
    if entries.is_empty() {
        if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
        }
    } else {
        new["metadata"]["managedFields"] = Value::Array(entries);
    }
}

/// kube-apiserver's conflict message.
pub fn conflict_message(conflicts: &[(String, Vec<String>)]) -> String {
    let n: usize = conflicts.iter().map(|(_, p)| p.len()).sum();
    let parts: Vec<String> = conflicts
        .iter()
        .map(|(m, paths)| format!("conflict with \"{m}\": {}", paths.join(", ")))
        .collect();
    format!(
        "Apply failed with {n} conflict{}: {}",
        if n == 1 { "" } else { "s" },
        parts.join("; ")
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn cm(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data})
    }

    #[test]
    fn ownership_conflicts_force_and_removal() {
        let ApplyOutcome::Apply(live) = server_side_apply(
            &json!({}),
            &cm(json!({"a": "1", "b": "2"})),
            "a",
            false,
            "v1",
            "t",
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(live["data"], json!({"a": "1", "b": "2"}));
        assert_eq!(
            live["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:data": {"f:a": {}, "f:b": {}}})
        );
        match server_side_apply(&live, &cm(json!({"a": "x"})), "b", false, "v1", "t").unwrap() {
            ApplyOutcome::Conflicts(c) => {
                assert_eq!(c, vec![("a".to_string(), vec![".data.a".to_string()])]);
                assert!(conflict_message(&c).contains("conflict with \"a\""));
            }
            other => panic!("{other:?}"),
        }
        // Same value is shared ownership, not a conflict.
        assert!(matches!(
            server_side_apply(&live, &cm(json!({"a": "1"})), "b", false, "v1", "t").unwrap(),
            ApplyOutcome::Apply(_)
        ));
        let ApplyOutcome::Apply(live) =
            server_side_apply(&live, &cm(json!({"a": "x"})), "b", true, "v1", "t").unwrap()
        else {
            panic!()
        };
        let ApplyOutcome::Apply(live) =
            server_side_apply(&live, &cm(json!({})), "a", false, "v1", "t").unwrap()
        else {
            panic!()
        };
        assert_eq!(live["data"], json!({"a": "x"}));
    }

    #[test]
    fn updates_take_ownership_of_changed_fields() {
        let mut created = cm(json!({"k": "v"}));
        record_update(None, &mut created, "writer", "v1", None, "t");
        assert_eq!(
            created["metadata"]["managedFields"][0]["operation"],
            "Update"
        );
        assert_eq!(
            created["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:data": {"f:k": {}}})
        );
        let mut next = created.clone();
        next["data"] = json!({"k": "v", "other": "x"});
        record_update(Some(&created), &mut next, "second", "v1", None, "t");
        let mf = next["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(mf.len(), 2);
        assert_eq!(mf[1]["fieldsV1"], json!({"f:data": {"f:other": {}}}));
        let mut same = next.clone();
        record_update(Some(&next), &mut same, "third", "v1", None, "t");
        assert_eq!(same, next, "a no-op write records nothing");
    }

    #[test]
    fn apply_conflicts_with_update_managers_unless_forced() {
        let mut live = cm(json!({"a": "1"}));
        record_update(None, &mut live, "updater", "v1", None, "t");
        match server_side_apply(&live, &cm(json!({"a": "2"})), "applier", false, "v1", "t") {
            Ok(ApplyOutcome::Conflicts(c)) => {
                assert!(conflict_message(&c).contains("conflict with \"updater\""));
            }
            other => panic!("expected a conflict, got {other:?}"),
        }
        let Ok(ApplyOutcome::Apply(forced)) =
            server_side_apply(&live, &cm(json!({"a": "2"})), "applier", true, "v1", "t")
        else {
            panic!("force takes the field")
        };
        assert_eq!(forced["data"]["a"], "2");
        let mf = forced["metadata"]["managedFields"].as_array().unwrap();
        assert!(
            mf.iter().all(|e| e["manager"] != "updater"),
            "the updater lost its only field: {mf:?}"
        );
    }

    #[test]
    fn keyed_lists_and_round_trip() {
        let obj = json!({"spec": {"containers": [{"name": "a", "image": "x"}], "finalizers": ["p"]}, "metadata": {"labels": {"l": "v"}}});
        let set = field_set(&obj);
        assert!(set.contains(&vec![
            "f:spec".to_string(),
            "f:containers".to_string(),
            "k:{\"name\":\"a\"}".to_string(),
            "f:image".to_string()
        ]));
        assert!(set.contains(&vec![
            "f:metadata".to_string(),
            "f:labels".to_string(),
            "f:l".to_string()
        ]));
        assert_eq!(from_fields_v1(&to_fields_v1(&set)), set);
        let p = vec![
            "f:spec".to_string(),
            "f:containers".to_string(),
            "k:{\"name\":\"a\"}".to_string(),
            "f:image".to_string(),
        ];
        assert_eq!(value_at(&obj, &p), Some(&json!("x")));
        let mut o = obj.clone();
        remove_path(&mut o, &p);
        assert_eq!(o["spec"]["containers"][0], json!({"name": "a"}));
        assert_eq!(describe(&p), ".spec.containers[name=\"a\"].image");
    }
}
