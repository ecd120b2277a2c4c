//! Defaulting (docs/behaviour.md#defaulting) as JSON Patch `add` operations computed on the raw request JSON.
//!
//! The patch is built from the request's own JSON, never from a re-serialised typed object, so
//! fields this version of the webhook does not know are never removed (controller-runtime's
//! "unknown field" trap). Only absent members are added, `status` is never touched, and the
//! result is idempotent: applying the patch and defaulting again yields no operations.
//!
//! Only MachineDeployments get defaults, and only on CREATE:
//! - `spec.strategy.type` = `RollingUpdate`;
//! - RollingUpdate: `maxSurge` = 1, `maxUnavailable` = 0;
//! - InPlaceUpdate: `orchestrationType` = `Auto`; with Auto: `maxSurge` = 0, `maxUnavailable` = 1;
//!   `disableHealthTimeout` = true in the machine template.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use serde_json::{Map, Value, json};

use crate::request::Version;

/// Computes the defaulting patch (JSON Patch `add` operations) for a MachineDeployment object;
/// empty when nothing is missing.
#[must_use]
pub fn machine_deployment(object: &Value, version: Version) -> Patch {
    // Work on a copy of only the members the defaults look at or add to, not the whole object.
    let mut doc = members_on_paths(object, DEFAULTED_PATHS);
    let mut ops = Vec::new();
    if !doc.get("spec").is_some_and(Value::is_object) {
        // Not a usable object; leave it to schema validation.
        return Patch(ops);
    }
    ensure(
        &mut doc,
        &mut ops,
        &["spec", "strategy", "type"],
        json!("RollingUpdate"),
    );
    let strategy_type = doc
        .pointer("/spec/strategy/type")
        .and_then(Value::as_str)
        .map(str::to_owned);
    match strategy_type.as_deref() {
        Some("RollingUpdate") => {
            ensure(
                &mut doc,
                &mut ops,
                &["spec", "strategy", "rollingUpdate", "maxSurge"],
                json!(1),
            );
            ensure(
                &mut doc,
                &mut ops,
                &["spec", "strategy", "rollingUpdate", "maxUnavailable"],
                json!(0),
            );
        }
        Some("InPlaceUpdate") => {
            ensure(
                &mut doc,
                &mut ops,
                &["spec", "strategy", "inPlaceUpdate", "orchestrationType"],
                json!("Auto"),
            );
            if doc.pointer("/spec/strategy/inPlaceUpdate/orchestrationType") == Some(&json!("Auto"))
            {
                ensure(
                    &mut doc,
                    &mut ops,
                    &["spec", "strategy", "inPlaceUpdate", "maxSurge"],
                    json!(0),
                );
                ensure(
                    &mut doc,
                    &mut ops,
                    &["spec", "strategy", "inPlaceUpdate", "maxUnavailable"],
                    json!(1),
                );
            }
            let path: &[&str] = match version {
                Version::V1alpha1 => &["spec", "template", "spec", "disableHealthTimeout"],
                Version::V1beta1 => &[
                    "spec",
                    "template",
                    "spec",
                    "configuration",
                    "disableHealthTimeout",
                ],
            };
            ensure(&mut doc, &mut ops, path, json!(true));
        }
        _ => {}
    }
    Patch(ops)
}

/// Every path `machine_deployment` reads or may add (a prefix keeps its whole subtree).
const DEFAULTED_PATHS: &[&[&str]] = &[
    &["spec", "strategy"],
    &["spec", "template", "spec", "disableHealthTimeout"],
    &[
        "spec",
        "template",
        "spec",
        "configuration",
        "disableHealthTimeout",
    ],
];

/// A copy of `value` holding only the members on `paths`: objects along a path keep just the
/// members leading on, the value at a path's end is copied whole, and a non-object on the way is
/// copied as is (so presence and type, all [`ensure`] looks at, stay as in `value`).
fn members_on_paths(value: &Value, paths: &[&[&str]]) -> Value {
    let Value::Object(map) = value else {
        return value.clone();
    };
    if paths.iter().any(|path| path.is_empty()) {
        return value.clone();
    }
    let mut out = Map::new();
    for (key, child) in map {
        let rest: Vec<&[&str]> = paths
            .iter()
            .filter(|path| path[0] == key)
            .map(|path| &path[1..])
            .collect();
        if !rest.is_empty() {
            out.insert(key.clone(), members_on_paths(child, &rest));
        }
    }
    Value::Object(out)
}

/// Adds `value` at `path` unless something is there. Missing parent objects are created in the
/// same operation; a parent that exists but is not an object stops the walk (schema validation
/// reports it), so nothing the user wrote is ever replaced.
fn ensure(doc: &mut Value, ops: &mut Vec<PatchOperation>, path: &[&str], value: Value) {
    let mut current = doc;
    let mut pointer = PointerBuf::new();
    for (depth, segment) in path.iter().enumerate() {
        let Value::Object(map) = current else {
            return;
        };
        // The token escapes `~` and `/` in keys as RFC 6901 requires.
        pointer.push_back(*segment);
        if !map.contains_key(*segment) {
            let nested = path[depth + 1..].iter().rev().fold(value, |inner, key| {
                let mut object = Map::new();
                object.insert((*key).to_owned(), inner);
                Value::Object(object)
            });
            ops.push(PatchOperation::Add(AddOperation {
                path: pointer,
                value: nested.clone(),
            }));
            map.insert((*segment).to_owned(), nested);
            return;
        }
        let Some(next) = map.get_mut(*segment) else {
            return;
        };
        current = next;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The operations as JSON, the form the API server receives.
    fn as_json(patch: Patch) -> Vec<Value> {
        patch
            .0
            .iter()
            .map(|op| serde_json::to_value(op).unwrap())
            .collect()
    }

    #[test]
    fn empty_strategy_gets_rolling_update_with_surge_first() {
        let object = json!({ "spec": { "template": {} } });
        let ops = as_json(machine_deployment(&object, Version::V1alpha1));
        assert_eq!(
            ops,
            vec![
                json!({ "op": "add", "path": "/spec/strategy", "value": {
                "type": "RollingUpdate" } }),
                json!({ "op": "add", "path": "/spec/strategy/rollingUpdate", "value": { "maxSurge": 1 } }),
                json!({ "op": "add", "path": "/spec/strategy/rollingUpdate/maxUnavailable", "value": 0 }),
            ]
        );
    }

    #[test]
    fn in_place_defaults_follow_the_version_shape() {
        let object = json!({ "spec": { "strategy": { "type": "InPlaceUpdate" }, "template": { "spec": {} } } });
        let alpha = as_json(machine_deployment(&object, Version::V1alpha1));
        assert!(alpha.contains(&json!({ "op": "add", "path": "/spec/template/spec/disableHealthTimeout", "value": true })));
        let beta = as_json(machine_deployment(&object, Version::V1beta1));
        assert!(beta.contains(&json!({ "op": "add", "path": "/spec/template/spec/configuration", "value": { "disableHealthTimeout": true } })));
        assert!(beta.contains(&json!({ "op": "add", "path": "/spec/strategy/inPlaceUpdate", "value": { "orchestrationType": "Auto" } })));
    }

    #[test]
    fn manual_orchestration_gets_no_limits_and_user_values_stay() {
        let object = json!({ "spec": { "strategy": { "type": "InPlaceUpdate", "inPlaceUpdate": { "orchestrationType": "Manual" } }, "template": { "spec": { "disableHealthTimeout": false } } } });
        assert!(machine_deployment(&object, Version::V1alpha1).0.is_empty());
    }

    #[test]
    fn members_on_paths_keeps_only_the_defaulted_subtrees() {
        let object = json!({
            "metadata": { "name": "a" },
            "spec": { "replicas": 3, "strategy": { "type": "X", "y": [1] },
                "template": { "metadata": {}, "spec": { "class": {}, "configuration": 5 } } },
            "status": {},
        });
        assert_eq!(
            members_on_paths(&object, DEFAULTED_PATHS),
            json!({ "spec": { "strategy": { "type": "X", "y": [1] },
                "template": { "spec": { "configuration": 5 } } } })
        );
    }

    #[test]
    fn non_object_parents_are_left_alone() {
        let object = json!({ "spec": { "strategy": "RollingUpdate" } });
        assert!(machine_deployment(&object, Version::V1alpha1).0.is_empty());
        assert!(
            machine_deployment(&json!({ "spec": 3 }), Version::V1alpha1)
                .0
                .is_empty()
        );
    }
}
