//! Claim, adopt and release (upstream's controller-ref manager, docs/behaviour.md#claim), for machines
//! claimed by a MachineSet and MachineSets claimed by a MachineDeployment.
//!
//! Unlike upstream (quirk docs/behaviour.md#q9), a release really removes the controller reference: the shell
//! executes [`ClaimDecision::Release`] with a JSON patch that removes the owner reference whose
//! UID matches (with a `test` on the object's UID), not with upstream's ineffective merge patch.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use mcm_api::v1alpha1::API_VERSION;

use crate::selector::{self, SelectorError};

/// What to do with one object relative to one owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimDecision {
    /// Controlled by the owner and selected: it is the owner's.
    Owned,
    /// An orphan the owner selects: adopt it (set the controller reference), then it is owned.
    Adopt,
    /// Controlled by the owner but no longer selected: remove the controller reference.
    Release,
    /// Not the owner's business (other controller, not selected, or being deleted).
    Ignore,
}

// Only upstream's tables ask this (the decisions match on the variants), so it is test code.
#[cfg(test)]
impl ClaimDecision {
    /// Whether the object belongs to the owner in this pass (after adoption).
    #[must_use]
    pub fn is_claimed(self) -> bool {
        matches!(self, Self::Owned | Self::Adopt)
    }
}

/// The controller owner reference of `meta`, if any.
#[must_use]
pub fn controller_ref(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
}

/// The owner, as seen by the claim logic.
#[derive(Debug, Clone, Copy)]
pub struct Owner<'a> {
    /// UID of the owner.
    pub uid: &'a str,
    /// Whether the owner has a deletion timestamp.
    pub deleting: bool,
    /// The owner's selector.
    pub selector: Option<&'a LabelSelector>,
}

/// Decides whether `object` belongs to `owner` (docs/behaviour.md#claim).
///
/// # Errors
/// A malformed owner selector.
pub fn claim(owner: Owner<'_>, object: &ObjectMeta) -> Result<ClaimDecision, SelectorError> {
    let selected = selector::matches(owner.selector, object.labels.as_ref())?;
    if let Some(cref) = controller_ref(object) {
        if cref.uid != owner.uid {
            return Ok(ClaimDecision::Ignore);
        }
        return Ok(if selected {
            ClaimDecision::Owned
        } else if !owner.deleting {
            ClaimDecision::Release
        } else {
            ClaimDecision::Ignore
        });
    }
    if owner.deleting || !selected || object.deletion_timestamp.is_some() {
        return Ok(ClaimDecision::Ignore);
    }
    Ok(ClaimDecision::Adopt)
}

/// The controller reference an owner of `kind` puts on what it creates or adopts.
#[must_use]
pub fn owner_reference(kind: &str, name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: API_VERSION.to_owned(),
        kind: kind.to_owned(),
        name: name.to_owned(),
        uid: uid.to_owned(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn meta(labels: &[(&str, &str)], owner_uid: Option<&str>, deleting: bool) -> ObjectMeta {
        ObjectMeta {
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).into(), (*v).into()))
                    .collect(),
            ),
            owner_references: owner_uid.map(|u| vec![owner_reference("MachineSet", "o", u)]),
            deletion_timestamp: deleting.then_some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
            ),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn claim_table() {
        let sel = LabelSelector {
            match_labels: Some(BTreeMap::from([("a".to_owned(), "1".to_owned())])),
            match_expressions: None,
        };
        let live = Owner {
            uid: "u1",
            deleting: false,
            selector: Some(&sel),
        };
        let dying = Owner {
            deleting: true,
            ..live
        };
        let cases = [
            (
                live,
                meta(&[("a", "1")], Some("u1"), false),
                ClaimDecision::Owned,
            ),
            (
                live,
                meta(&[("a", "2")], Some("u1"), false),
                ClaimDecision::Release,
            ),
            (
                dying,
                meta(&[("a", "2")], Some("u1"), false),
                ClaimDecision::Ignore,
            ),
            (
                dying,
                meta(&[("a", "1")], Some("u1"), false),
                ClaimDecision::Owned,
            ),
            (
                live,
                meta(&[("a", "1")], Some("u2"), false),
                ClaimDecision::Ignore,
            ),
            (live, meta(&[("a", "1")], None, false), ClaimDecision::Adopt),
            (live, meta(&[("a", "1")], None, true), ClaimDecision::Ignore),
            (
                dying,
                meta(&[("a", "1")], None, false),
                ClaimDecision::Ignore,
            ),
            (
                live,
                meta(&[("a", "2")], None, false),
                ClaimDecision::Ignore,
            ),
        ];
        for (i, (owner, m, want)) in cases.iter().enumerate() {
            assert_eq!(claim(*owner, m).unwrap(), *want, "case {i}");
        }
    }

    #[test]
    fn non_controller_refs_do_not_count_and_nil_selector_adopts_nothing() {
        let mut m = meta(&[("a", "1")], Some("u1"), false);
        if let Some(refs) = m.owner_references.as_mut() {
            refs[0].controller = Some(false);
        }
        assert!(controller_ref(&m).is_none());
        let owner = Owner {
            uid: "u1",
            deleting: false,
            selector: None,
        };
        assert_eq!(claim(owner, &m).unwrap(), ClaimDecision::Ignore);
    }
}
