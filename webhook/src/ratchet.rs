//! Ratcheting (docs/behaviour.md#admission-fast-paths item 3): on UPDATE, an error is dropped when the old object had the same
//! error on the same field and the value at that field did not change. Errors on changed fields,
//! and errors that the change introduced elsewhere (old object valid there), are kept.

use serde_json::Value;

use crate::field::FieldError;
use crate::paths;

/// Keeps the errors of `new_errors` that the update is responsible for.
#[must_use]
pub fn ratchet<T: Clone>(
    new_errors: Vec<(T, FieldError)>,
    old_errors: &[FieldError],
    new_object: &Value,
    old_object: &Value,
) -> Vec<(T, FieldError)> {
    new_errors
        .into_iter()
        .filter(|(_, error)| {
            let had_it = old_errors
                .iter()
                .any(|old| old.field == error.field && old.reason() == error.reason());
            let unchanged =
                paths::lookup(new_object, &error.field) == paths::lookup(old_object, &error.field);
            !(had_it && unchanged)
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unchanged_preexisting_errors_are_dropped_and_new_ones_kept() {
        let old = json!({ "spec": { "replicas": -1, "minReadySeconds": 5 } });
        let new = json!({ "spec": { "replicas": -1, "minReadySeconds": -5 } });
        let replicas = FieldError::invalid(
            "spec.replicas",
            json!(-1),
            "must be greater than or equal to 0",
        );
        let min_ready = FieldError::invalid(
            "spec.minReadySeconds",
            json!(-5),
            "must be greater than or equal to 0",
        );
        let kept = ratchet(
            vec![("r", replicas.clone()), ("m", min_ready.clone())],
            std::slice::from_ref(&replicas),
            &new,
            &old,
        );
        assert_eq!(kept, vec![("m", min_ready)]);
    }

    #[test]
    fn a_changed_field_keeps_its_error_even_if_it_was_invalid_before() {
        let old = json!({ "spec": { "replicas": -1 } });
        let new = json!({ "spec": { "replicas": -2 } });
        let error = FieldError::invalid(
            "spec.replicas",
            json!(-2),
            "must be greater than or equal to 0",
        );
        let kept = ratchet(
            vec![((), error.clone())],
            std::slice::from_ref(&error),
            &new,
            &old,
        );
        assert_eq!(kept.len(), 1);
    }
}
