//! Which owners to reconcile after a watch event (docs/behaviour.md#machine-set-routing for machines → MachineSets,
//! docs/behaviour.md#deployment-routing for MachineSets → MachineDeployments). Pure: the shell feeds the old and new object and
//! the owners from its cache, and enqueues the returned names.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use mcm_api::v1alpha1::{MachineDeployment, MachineSet};

use super::claim::controller_ref;
use crate::selector;

/// An owner candidate: its metadata and selector.
pub trait Owner {
    /// Metadata of the owner.
    fn meta(&self) -> &ObjectMeta;
    /// Selector of the owner.
    fn selector(&self) -> Option<&LabelSelector>;
    /// Kind written in controller references to it.
    const KIND: &'static str;
}

impl Owner for MachineSet {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn selector(&self) -> Option<&LabelSelector> {
        self.spec.selector.as_ref()
    }
    const KIND: &'static str = "MachineSet";
}

impl Owner for MachineDeployment {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn selector(&self) -> Option<&LabelSelector> {
        self.spec.selector.as_ref()
    }
    const KIND: &'static str = "MachineDeployment";
}

/// The owner named by `object`'s controller reference, if it exists in the cache with the same
/// UID and kind.
fn resolve_controller<'a, O: Owner>(object: &ObjectMeta, owners: &'a [O]) -> Option<&'a O> {
    let r = controller_ref(object)?;
    if r.kind != O::KIND {
        return None;
    }
    owners.iter().find(|o| {
        o.meta().namespace == object.namespace
            && o.meta().name.as_deref() == Some(r.name.as_str())
            && o.meta().uid.as_deref() == Some(r.uid.as_str())
    })
}

/// Owners of the namespace whose non-empty selector matches the object's labels.
fn matching<'a, O: Owner>(object: &ObjectMeta, owners: &'a [O]) -> Vec<&'a O> {
    owners
        .iter()
        .filter(|o| o.meta().namespace == object.namespace)
        .filter(|o| {
            o.selector().is_some_and(|s| !selector::is_empty(s))
                && selector::matches(o.selector(), object.labels.as_ref()).unwrap_or(false)
        })
        .collect()
}

fn names<O: Owner>(owners: Vec<&O>) -> Vec<String> {
    let mut out: Vec<String> = owners
        .into_iter()
        .filter_map(|o| o.meta().name.clone())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Owners to reconcile after an add (`old` = `None`), update or delete of `object`.
///
/// - resourceVersion unchanged: nothing (resync);
/// - controller reference changed (any field): the old owner too;
/// - controlled: its owner only (if it resolves);
/// - orphan: every matching owner, on add/delete or when labels or the reference changed.
#[must_use]
pub fn owners_to_sync<O: Owner>(
    old: Option<&ObjectMeta>,
    new: &ObjectMeta,
    owners: &[O],
) -> Vec<String> {
    if let Some(old) = old
        && old.resource_version.is_some()
        && old.resource_version == new.resource_version
    {
        return Vec::new();
    }
    let mut out = Vec::new();
    let old_ref = old.and_then(controller_ref);
    let new_ref = controller_ref(new);
    // The whole reference is compared, as upstream does (`reflect.DeepEqual`): a reference that
    // changed its name but kept the UID still concerns the old owner.
    if let Some(old) = old
        && old_ref != new_ref
        && let Some(o) = resolve_controller(old, owners)
    {
        out.push(o);
    }
    if new_ref.is_some() {
        out.extend(resolve_controller(new, owners));
    } else {
        let changed = old.is_none_or(|o| o.labels != new.labels || old_ref.is_some());
        if changed {
            out.extend(matching(new, owners));
        }
    }
    names(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::machine_set::claim::owner_reference;
    use mcm_api::v1alpha1::MachineSetSpec;
    use std::collections::BTreeMap;

    fn set(name: &str, pool: &str) -> MachineSet {
        let mut s = MachineSet::new(
            name,
            MachineSetSpec {
                selector: Some(LabelSelector {
                    match_labels: Some(BTreeMap::from([("name".into(), pool.into())])),
                    match_expressions: None,
                }),
                ..MachineSetSpec::default()
            },
        );
        s.metadata.namespace = Some("ns".into());
        s.metadata.uid = Some(format!("uid-{name}"));
        s
    }

    fn meta(pool: &str, owner: Option<&str>, rv: &str) -> ObjectMeta {
        ObjectMeta {
            namespace: Some("ns".into()),
            labels: Some(BTreeMap::from([("name".into(), pool.into())])),
            owner_references: owner
                .map(|o| vec![owner_reference("MachineSet", o, &format!("uid-{o}"))]),
            resource_version: Some(rv.into()),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn routing_table() {
        let mut other_ns = set("c", "a");
        other_ns.metadata.namespace = Some("elsewhere".into());
        let mut empty_selector = set("d", "a");
        empty_selector.spec.selector = Some(LabelSelector::default());
        let sets = vec![
            set("a", "a"),
            set("b", "a"),
            other_ns,
            empty_selector,
            set("e", "x"),
        ];
        // Add of a controlled machine: its owner only.
        assert_eq!(
            owners_to_sync(None, &meta("a", Some("a"), "1"), &sets),
            vec!["a"]
        );
        // Add of an orphan: every matching set of the namespace with a non-empty selector.
        assert_eq!(
            owners_to_sync(None, &meta("a", None, "1"), &sets),
            vec!["a", "b"]
        );
        // Resync: nothing.
        let m = meta("a", Some("a"), "7");
        assert!(owners_to_sync(Some(&m), &m, &sets).is_empty());
        // Owner changed from a to b: both.
        assert_eq!(
            owners_to_sync(
                Some(&meta("a", Some("a"), "1")),
                &meta("a", Some("b"), "2"),
                &sets
            ),
            vec!["a", "b"]
        );
        // Orphan whose labels did not change: nothing; whose labels changed: the matches.
        assert!(
            owners_to_sync(Some(&meta("a", None, "1")), &meta("a", None, "2"), &sets).is_empty()
        );
        assert_eq!(
            owners_to_sync(Some(&meta("a", None, "1")), &meta("x", None, "2"), &sets),
            vec!["e"]
        );
        // Reference to an owner with another UID: not resolved.
        let mut stale = meta("a", Some("a"), "1");
        stale.owner_references.as_mut().unwrap()[0].uid = "old".into();
        assert!(owners_to_sync(None, &stale, &sets).is_empty());
    }
}
