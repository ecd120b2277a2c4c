//! Semantic equality and canonical JSON of API values.
//!
//! Go's `equality.Semantic.DeepEqual` treats nil and empty maps/slices (and nil pointers to empty
//! structs serialised away) as equal; comparing the JSON with nulls and empty containers removed
//! gives the same answer for our serde types, and the canonical text (sorted keys, as
//! `serde_json::Value` keeps objects in a `BTreeMap`) is stable across processes and versions.

use serde::Serialize;
use serde_json::Value;

/// `value` as JSON with nulls, empty objects and empty arrays removed recursively.
#[must_use]
pub fn normalized<T: Serialize>(value: &T) -> Value {
    let v = serde_json::to_value(value).unwrap_or(Value::Null);
    prune(v).unwrap_or(Value::Null)
}

fn prune(v: Value) -> Option<Value> {
    match v {
        Value::Null => None,
        Value::Object(map) => {
            // Sorted explicitly: with serde_json's `preserve_order` feature (enabled by any crate
            // of the build) maps keep insertion order instead.
            let sorted: std::collections::BTreeMap<String, Value> = map
                .into_iter()
                .filter_map(|(k, v)| prune(v).map(|v| (k, v)))
                .collect();
            let out: serde_json::Map<String, Value> = sorted.into_iter().collect();
            (!out.is_empty()).then_some(Value::Object(out))
        }
        Value::Array(items) => {
            // Elements keep their positions (an element pruned to nothing stays as `{}`).
            let out: Vec<Value> = items
                .into_iter()
                .map(|i| prune(i).unwrap_or(Value::Object(serde_json::Map::new())))
                .collect();
            (!out.is_empty()).then_some(Value::Array(out))
        }
        other => Some(other),
    }
}

/// Semantic equality of two API values (nil and empty are the same).
#[must_use]
pub fn equal<T: Serialize>(a: &T, b: &T) -> bool {
    normalized(a) == normalized(b)
}

/// The canonical JSON text of `value` (normalised, keys sorted).
#[must_use]
pub fn canonical_json<T: Serialize>(value: &T) -> String {
    normalized(value).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcm_api::v1alpha1::NodeTemplateSpec;

    #[test]
    fn nil_and_empty_are_equal_but_content_is_not() {
        let none: Option<NodeTemplateSpec> = None;
        let empty = Some(NodeTemplateSpec::default());
        assert!(equal(&none, &empty));
        let mut with_labels = NodeTemplateSpec {
            metadata: Some(Default::default()),
            spec: None,
        };
        assert!(equal(&none, &Some(with_labels.clone())));
        if let Some(m) = with_labels.metadata.as_mut() {
            m.labels = Some([("a".to_owned(), "b".to_owned())].into());
        }
        assert!(!equal(&none, &Some(with_labels)));
    }

    #[test]
    fn canonical_json_sorts_keys() {
        let a: Value = serde_json::from_str(r#"{"b":1,"a":{"d":[],"c":2}}"#).unwrap_or_default();
        assert_eq!(canonical_json(&a), r#"{"a":{"c":2},"b":1}"#);
    }
}
