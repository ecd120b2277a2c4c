//! Field paths: parsing them into JSON pointers, and translating the hub's (`v1alpha1`-shaped)
//! paths into the shape of the request's version, so errors name the fields the user wrote.

use serde_json::Value;

use crate::request::{Kind, Version};

/// Machine configuration fields: inlined in the machine spec in `v1alpha1`, nested under
/// `configuration` in `v1beta1`.
const CONFIGURATION_FIELDS: &[&str] = &[
    "drainTimeout",
    "healthTimeout",
    "creationTimeout",
    "inPlaceUpdateTimeout",
    "machinePreserveTimeout",
    "disableHealthTimeout",
    "maxEvictRetries",
    "nodeConditions",
];

/// v1alpha1 MachineClass fields that sit under `spec` in v1beta1.
const CLASS_SPEC_FIELDS: &[&str] = &[
    "nodeTemplate",
    "credentialsSecretRef",
    "providerSpec",
    "provider",
    "secretRef",
];

/// Splits `a.b[0].c[key.with.dots]` into `["a", "b", "0", "c", "key.with.dots"]`.
#[must_use]
pub fn segments(path: &str) -> Vec<String> {
    parts(path)
        .into_iter()
        .map(|(segment, _)| segment)
        .collect()
}

/// Like [`segments`], with whether each segment was written in brackets.
fn parts(path: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut chars = path.chars();
    while let Some(c) = chars.next() {
        match c {
            '.' => {
                if !current.is_empty() {
                    out.push((std::mem::take(&mut current), false));
                }
            }
            '[' => {
                if !current.is_empty() {
                    out.push((std::mem::take(&mut current), false));
                }
                let key: String = chars.by_ref().take_while(|c| *c != ']').collect();
                out.push((key, true));
            }
            other => current.push(other),
        }
    }
    if !current.is_empty() {
        out.push((current, false));
    }
    out
}

/// Joins parts back into a path.
fn join(parts: &[(String, bool)]) -> String {
    let mut out = String::new();
    for (segment, bracketed) in parts {
        if !bracketed {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(segment);
        } else {
            out.push('[');
            out.push_str(segment);
            out.push(']');
        }
    }
    out
}

/// The path in the shape of `version`.
#[must_use]
pub fn for_version(kind: Kind, version: Version, path: &str) -> String {
    if version == Version::V1alpha1 {
        return path.to_owned();
    }
    let mut parts = parts(path);
    if kind == Kind::MachineClass {
        if parts
            .first()
            .is_some_and(|(p, _)| CLASS_SPEC_FIELDS.contains(&p.as_str()))
        {
            parts.insert(0, ("spec".to_owned(), false));
        }
        return join(&parts);
    }
    // `spec.<config field>` of a machine spec: `spec` at the root of a Machine, or
    // `spec.template.spec` of a set or deployment.
    let machine_spec_depth = match kind {
        Kind::Machine => 1,
        _ => 3,
    };
    if parts.len() > machine_spec_depth
        && parts[machine_spec_depth - 1].0 == "spec"
        && CONFIGURATION_FIELDS.contains(&parts[machine_spec_depth].0.as_str())
    {
        parts.insert(machine_spec_depth, ("configuration".to_owned(), false));
    }
    join(&parts)
}

/// The value at `path` in `object`, if any.
#[must_use]
pub fn lookup<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    segments(path)
        .iter()
        .try_fold(object, |value, segment| match value {
            Value::Object(map) => map.get(segment),
            Value::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn segments_keep_dotted_keys_in_brackets() {
        assert_eq!(
            segments("metadata.annotations[node.machine.sapcloud.io/x].y"),
            ["metadata", "annotations", "node.machine.sapcloud.io/x", "y"]
        );
        assert_eq!(segments("a.b[2].c"), ["a", "b", "2", "c"]);
    }

    #[test]
    fn translation_to_v1beta1() {
        assert_eq!(
            for_version(
                Kind::MachineDeployment,
                Version::V1beta1,
                "spec.template.spec.drainTimeout"
            ),
            "spec.template.spec.configuration.drainTimeout"
        );
        assert_eq!(
            for_version(Kind::Machine, Version::V1beta1, "spec.maxEvictRetries"),
            "spec.configuration.maxEvictRetries"
        );
        assert_eq!(
            for_version(
                Kind::MachineClass,
                Version::V1beta1,
                "nodeTemplate.capacity[cpu]"
            ),
            "spec.nodeTemplate.capacity[cpu]"
        );
        assert_eq!(
            for_version(
                Kind::MachineDeployment,
                Version::V1beta1,
                "spec.strategy.rollingUpdate.maxSurge"
            ),
            "spec.strategy.rollingUpdate.maxSurge"
        );
        assert_eq!(
            for_version(
                Kind::MachineDeployment,
                Version::V1alpha1,
                "spec.template.spec.drainTimeout"
            ),
            "spec.template.spec.drainTimeout"
        );
    }

    #[test]
    fn lookup_follows_indices_and_keys() {
        let object = json!({ "spec": { "taints": [{ "key": "a" }], "m": { "x.y/z": 1 } } });
        assert_eq!(lookup(&object, "spec.taints[0].key"), Some(&json!("a")));
        assert_eq!(lookup(&object, "spec.m[x.y/z]"), Some(&json!(1)));
        assert_eq!(lookup(&object, "spec.missing"), None);
    }
}
