//! Patch application: JSON merge patch, JSON patch, strategic merge patch (with a documented table
//! of list merge keys) and the server-side-apply approximation. Pure functions.

use serde_json::{Map, Value};

/// Patch flavours, chosen by the request Content-Type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply, approximated).
    Apply,
}

impl PatchKind {
    /// Maps a Content-Type to a patch kind.
    pub fn from_content_type(ct: &str) -> Option<Self> {
        let base = ct.split(';').next().unwrap_or_default().trim();
        match base {
            "application/merge-patch+json" => Some(PatchKind::Merge),
            "application/json-patch+json" => Some(PatchKind::Json),
            "application/strategic-merge-patch+json" => Some(PatchKind::Strategic),
            "application/apply-patch+yaml"
            | "application/apply-patch+json"
            | "application/apply-patch+cbor" => Some(PatchKind::Apply),
            _ => None,
        }
    }
}

/// The list-merge key used by strategic merge for a field name, if the list merges by key.
///
/// kube-apiserver takes merge keys from Go struct tags per type; the sandbox approximates by
/// field name, which covers the fields kubectl and our components patch.
pub fn merge_key(field: &str, sample: Option<&Value>) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims"
        | "volumesAttached" => "name",
        "ports" => {
            if sample.is_some_and(|s| s.get("containerPort").is_some()) {
                "containerPort"
            } else {
                "port"
            }
        }
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "conditions" => "type",
        "ownerReferences" => "uid",
        "addresses" => "type",
        "hostAliases" => "ip",
        "topologySpreadConstraints" => "topologyKey",
        _ => return None,
    })
}

/// Primitive lists that strategic merge treats as sets (union instead of replace).
pub fn is_set_list(field: &str) -> bool {
    matches!(field, "finalizers")
}

/// Applies a strategic merge patch to `original`.
pub fn strategic_merge(original: &Value, patch: &Value) -> Result<Value, String> {
    match (original, patch) {
        (Value::Object(o), Value::Object(p)) => Ok(Value::Object(merge_map(o, p)?)),
        (_, p) => Ok(strip_directives(p)),
    }
}

fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| {
                    !k.starts_with('$')
                        && !k.starts_with("$setElementOrder/")
                        && !k.starts_with("$deleteFromPrimitiveList/")
                })
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

fn merge_map(
    orig: &Map<String, Value>,
    patch: &Map<String, Value>,
) -> Result<Map<String, Value>, String> {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut p = patch.clone();
            p.remove("$patch");
            return match strip_directives(&Value::Object(p)) {
                Value::Object(m) => Ok(m),
                _ => Ok(Map::new()),
            };
        }
        Some("delete") => return Ok(Map::new()),
        Some("merge") | None => {}
        Some(other) => return Err(format!("unknown patch type: {other}")),
    }
    let mut out = orig.clone();
    for (k, pv) in patch {
        if k == "$patch" || k == "$retainKeys" || k.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(cur)), Value::Array(del)) = (out.get_mut(field), pv) {
                cur.retain(|x| !del.contains(x));
            }
            continue;
        }
        if pv.is_null() {
            out.remove(k);
            continue;
        }
        let merged = match (out.get(k), pv) {
            (Some(Value::Object(o)), Value::Object(p)) => {
                if p.get("$patch").and_then(Value::as_str) == Some("delete") {
                    out.remove(k);
                    continue;
                }
                Value::Object(merge_map(o, p)?)
            }
            (Some(Value::Array(o)), Value::Array(p)) => merge_list(k, o, p)?,
            (_, p) => strip_directives(p),
        };
        out.insert(k.clone(), merged);
    }
    Ok(out)
}

fn merge_list(field: &str, orig: &[Value], patch: &[Value]) -> Result<Value, String> {
    // A `{"$patch": "replace"}` element means: replace the whole list with the other elements.
    if patch
        .iter()
        .any(|e| e.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        return Ok(Value::Array(
            patch
                .iter()
                .filter(|e| e.get("$patch").is_none())
                .map(strip_directives)
                .collect(),
        ));
    }
    if is_set_list(field) {
        let mut patched: Vec<Value> = Vec::new();
        for p in patch {
            if !patched.contains(p) {
                patched.push(p.clone());
            }
        }
        let server_only: Vec<Value> = orig
            .iter()
            .filter(|o| !patched.contains(o))
            .cloned()
            .collect();
        let position = |v: &Value| orig.iter().position(|o| o == v);
        return Ok(Value::Array(merge_in_server_order(
            server_only,
            patched,
            position,
        )));
    }
    let sample = patch.first().or(orig.first());
    let Some(key) = merge_key(field, sample) else {
        return Ok(Value::Array(patch.iter().map(strip_directives).collect()));
    };
    let mut patched: Vec<Value> = Vec::new();
    let mut deleted: Vec<&Value> = Vec::new();
    for p in patch {
        let Some(pk) = p.get(key) else {
            return Err(format!(
                "map: {p} does not contain declared merge key: {key}"
            ));
        };
        if p.get("$patch").and_then(Value::as_str) == Some("delete") {
            deleted.push(pk);
            continue;
        }
        let merged = match orig.iter().find(|o| o.get(key) == Some(pk)) {
            Some(o) => strategic_merge(o, p)?,
            None => strip_directives(p),
        };
        match patched.iter().position(|q| q.get(key) == Some(pk)) {
            Some(i) => patched[i] = strategic_merge(&patched[i], p)?,
            None => patched.push(merged),
        }
    }
    let server_only: Vec<Value> = orig
        .iter()
        .filter(|o| {
            let k = o.get(key);
            !patched.iter().any(|q| q.get(key) == k) && !deleted.iter().any(|d| Some(*d) == k)
        })
        .cloned()
        .collect();
    let position = |v: &Value| orig.iter().position(|o| o.get(key) == v.get(key));
    Ok(Value::Array(merge_in_server_order(
        server_only,
        patched,
        position,
    )))
}

/// Orders a merged list as kube's strategic merge does without `$setElementOrder`: the items the
/// patch names in its own order, the others in the server's, interleaved where both are on the
/// server; a patch item new to the server comes before the server's items (so a patch adding
/// `b` to finalizers `[a]` gives `[b, a]`).
fn merge_in_server_order(
    server_only: Vec<Value>,
    patched: Vec<Value>,
    position: impl Fn(&Value) -> Option<usize>,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(server_only.len() + patched.len());
    let mut server = server_only.into_iter().peekable();
    let mut patch = patched.into_iter().peekable();
    while let (Some(s), Some(p)) = (server.peek(), patch.peek()) {
        let server_first = matches!((position(s), position(p)), (Some(si), Some(pi)) if si < pi);
        let next = if server_first {
            server.next()
        } else {
            patch.next()
        };
        out.extend(next);
    }
    out.extend(server);
    out.extend(patch);
    out
}

/// Server-side apply, approximated: the applied configuration is merged into the live object with
/// strategic-merge list semantics (keyed lists merge, others are replaced). No field ownership,
/// no conflicts (as with `force=true`), no removal of fields the manager stopped applying.
pub fn apply(live: &Value, applied: &Value) -> Result<Value, String> {
    strategic_merge(live, applied)
}

/// Applies a patch of the given kind.
pub fn apply_patch(kind: PatchKind, original: &Value, patch: &Value) -> Result<Value, String> {
    match kind {
        PatchKind::Merge => {
            let mut doc = original.clone();
            json_patch::merge(&mut doc, patch);
            Ok(doc)
        }
        PatchKind::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch.clone()).map_err(|e| {
                format!("the server rejected our request due to an error in our request: {e}")
            })?;
            let mut doc = original.clone();
            json_patch::patch(&mut doc, &ops).map_err(|e| e.to_string())?;
            Ok(doc)
        }
        PatchKind::Strategic => strategic_merge(original, patch),
        PatchKind::Apply => apply(original, patch),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategic_merges_containers_by_name() {
        let orig = json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}});
        let p = json!({"spec": {"containers": [{"name": "b", "image": "z"}, {"name": "c", "image": "w"}]}});
        let r = strategic_merge(&orig, &p).unwrap();
        assert_eq!(
            r["spec"]["containers"],
            json!([{"name": "a", "image": "x"}, {"name": "b", "image": "z"}, {"name": "c", "image": "w"}])
        );
    }

    #[test]
    fn strategic_directives() {
        let orig = json!({"metadata": {"finalizers": ["a", "b"]}, "spec": {"volumes": [{"name": "k", "emptyDir": {}}], "args": ["1"], "taints": [{"key": "t1"}]}});
        let p = json!({"metadata": {"finalizers": ["c"], "$deleteFromPrimitiveList/finalizers": ["a"]},
            "spec": {"volumes": [{"name": "k", "$patch": "delete"}], "args": ["2"], "$setElementOrder/volumes": [], "taints": [{"key": "t2"}]}});
        let r = strategic_merge(&orig, &p).unwrap();
        assert_eq!(r["metadata"]["finalizers"], json!(["c", "b"]));
        assert_eq!(r["spec"]["volumes"], json!([]));
        assert_eq!(
            r["spec"]["taints"],
            json!([{"key": "t2"}]),
            "node taints have no merge strategy: replaced"
        );
        assert_eq!(r["spec"]["args"], json!(["2"]));
        assert!(r["spec"].get("$setElementOrder/taints").is_none());
        let r = strategic_merge(&orig, &json!({"spec": {"$patch": "replace", "x": 1}})).unwrap();
        assert_eq!(r["spec"], json!({"x": 1}));
        assert!(strategic_merge(&orig, &json!({"spec": {"volumes": [{"emptyDir": {}}]}})).is_err());
    }

    #[test]
    fn conditions_merge_by_type_and_null_deletes() {
        let orig =
            json!({"status": {"conditions": [{"type": "Ready", "status": "False"}], "phase": "x"}});
        let r = strategic_merge(&orig, &json!({"status": {"conditions": [{"type": "Ready", "status": "True"}], "phase": null}})).unwrap();
        assert_eq!(
            r,
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
        );
    }

    #[test]
    fn merge_and_json_patch() {
        let orig = json!({"a": {"b": 1, "c": [1, 2]}});
        assert_eq!(
            apply_patch(
                PatchKind::Merge,
                &orig,
                &json!({"a": {"b": null, "c": [3]}})
            )
            .unwrap(),
            json!({"a": {"c": [3]}})
        );
        let r = apply_patch(
            PatchKind::Json,
            &orig,
            &json!([{"op": "replace", "path": "/a/b", "value": 2}]),
        )
        .unwrap();
        assert_eq!(r["a"]["b"], 2);
        assert!(
            apply_patch(
                PatchKind::Json,
                &orig,
                &json!([{"op": "test", "path": "/a/b", "value": 9}])
            )
            .is_err()
        );
        assert!(apply_patch(PatchKind::Json, &orig, &json!({"not": "a list"})).is_err());
    }

    #[test]
    fn content_types() {
        assert_eq!(
            PatchKind::from_content_type("application/merge-patch+json; charset=utf-8"),
            Some(PatchKind::Merge)
        );
        assert_eq!(PatchKind::from_content_type("text/plain"), None);
    }
}
