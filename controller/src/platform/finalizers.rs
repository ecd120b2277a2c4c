//! Adding and removing a shell's own finalizer, the one way every shell does it.
//!
//! Upstream keeps finalizers as a string set and writes its sorted list
//! (`sets.NewString(...).Insert/Delete(...).List()`); the decisions crate's
//! [`finalizers_with`] encodes that list, so a shell never builds one itself. As kube-runtime's
//! finalizer helper, each function answers `None` when the object already is as wanted: no
//! write at all then.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use mcm_decisions::vocabulary::finalizers_with;
use serde_json::{Value, json};

/// The finalizer list of `meta` with `name` present (`true`) or absent, as upstream writes it;
/// `None` when it already is.
#[must_use]
pub fn list(meta: &ObjectMeta, name: &str, present: bool) -> Option<Vec<String>> {
    finalizers_with(
        meta.finalizers.as_deref().unwrap_or_default(),
        name,
        present,
    )
}

/// The merge patch that makes `name` present on `meta`, guarded by its resourceVersion (a
/// concurrent change makes it fail with 409); `None` when it is present already.
#[must_use]
pub fn ensure_present(meta: &ObjectMeta, name: &str) -> Option<Value> {
    patch(meta, name, true)
}

/// The merge patch that makes `name` absent from `meta`, guarded by its resourceVersion;
/// `None` when it is absent already.
#[must_use]
pub fn ensure_absent(meta: &ObjectMeta, name: &str) -> Option<Value> {
    patch(meta, name, false)
}

/// [`ensure_present`] or [`ensure_absent`] by `present`.
#[must_use]
pub fn patch(meta: &ObjectMeta, name: &str, present: bool) -> Option<Value> {
    list(meta, name, present)
        .map(|finalizers| patch_of(meta.resource_version.as_deref(), &finalizers))
}

/// The merge patch that writes `finalizers`, a list a decision computed with [`finalizers_with`],
/// guarded by `resource_version`.
#[must_use]
pub fn patch_of(resource_version: Option<&str>, finalizers: &[String]) -> Value {
    json!({"metadata": {
        "resourceVersion": resource_version,
        "finalizers": finalizers,
    }})
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn meta(finalizers: Option<&[&str]>) -> ObjectMeta {
        ObjectMeta {
            resource_version: Some("7".into()),
            finalizers: finalizers.map(|f| f.iter().map(|&s| s.to_owned()).collect()),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn adding_writes_the_sorted_list_guarded_by_the_version() {
        let patch = ensure_present(&meta(Some(&["z", "a"])), "m").unwrap();
        assert_eq!(
            patch,
            json!({"metadata": {"resourceVersion": "7", "finalizers": ["a", "m", "z"]}})
        );
        let patch = ensure_present(&meta(None), "m").unwrap();
        assert_eq!(patch["metadata"]["finalizers"], json!(["m"]));
    }

    #[test]
    fn removing_writes_the_sorted_rest_even_when_empty() {
        let patch = ensure_absent(&meta(Some(&["z", "m", "a"])), "m").unwrap();
        assert_eq!(patch["metadata"]["finalizers"], json!(["a", "z"]));
        let patch = ensure_absent(&meta(Some(&["m"])), "m").unwrap();
        assert_eq!(patch["metadata"]["finalizers"], json!([]));
    }

    #[test]
    fn nothing_to_write_when_already_as_wanted() {
        assert_eq!(ensure_present(&meta(Some(&["z", "m"])), "m"), None);
        assert_eq!(ensure_absent(&meta(Some(&["z"])), "m"), None);
        assert_eq!(ensure_absent(&meta(None), "m"), None);
        assert_eq!(list(&meta(Some(&["m"])), "m", true), None);
    }

    #[test]
    fn the_list_is_the_decisions_crates() {
        let current = ["b".to_owned(), "a".to_owned()];
        let meta = ObjectMeta {
            finalizers: Some(current.to_vec()),
            ..ObjectMeta::default()
        };
        assert_eq!(list(&meta, "m", true), finalizers_with(&current, "m", true));
    }
}
