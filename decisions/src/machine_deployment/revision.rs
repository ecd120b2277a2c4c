//! Revisions, template equality and naming of MachineSets (docs/behaviour.md#revisions, quirks docs/behaviour.md#q1, docs/behaviour.md#q2).
//!
//! Upstream hashes a go-spew dump of the template (not reproducible). We hash the canonical JSON
//! (keys sorted, nulls and empty containers dropped) of the template **without** the fields that
//! are propagated in place (`spec.nodeTemplate`, the inlined machine configuration,
//! `spec.class.kind`) and without the `machine-template-hash` label, with 64-bit FNV-1a, plus the
//! collision count as upstream appends it. Equal templates (in the [`equal_ignore_hash`] sense)
//! therefore always get the same name `<md>-<5 characters>`, across restarts and versions; the new
//! MachineSet is nevertheless found by template equality, never by name or hash.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use mcm_api::keys::{annotation, label};
use mcm_api::v1alpha1::{MachineDeployment, MachineSet, MachineSetSpec, MachineTemplateSpec};

use crate::machine_set::{claim, semantic_equality};

/// Kind of the MachineDeployment owner reference.
pub const KIND: &str = "MachineDeployment";

/// Alphabet of name suffixes (Kubernetes' `SafeEncodeString`: no vowels, no confusable digits).
pub const SAFE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The template without the hash label and the fields propagated in place.
#[must_use]
pub fn hashable_template(t: &MachineTemplateSpec) -> MachineTemplateSpec {
    let mut t = t.clone();
    if let Some(meta) = t.metadata.as_mut()
        && let Some(labels) = meta.labels.as_mut()
    {
        labels.remove(label::MACHINE_TEMPLATE_HASH);
    }
    if let Some(spec) = t.spec.as_mut() {
        spec.node_template = None;
        spec.configuration = Default::default();
        if let Some(class) = spec.class.as_mut() {
            class.kind = None;
        }
    }
    t
}

/// Upstream `EqualIgnoreHash`: equal after [`hashable_template`].
#[must_use]
pub fn equal_ignore_hash(a: &MachineTemplateSpec, b: &MachineTemplateSpec) -> bool {
    semantic_equality::equal(&hashable_template(a), &hashable_template(b))
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME))
}

/// A template hash: the `machine-template-hash` label value and the 5-character name suffix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateHash {
    /// Decimal label value.
    pub label: String,
    /// Five characters of [`SAFE_ALPHABET`].
    pub suffix: String,
}

/// Hash of `template` with the deployment's collision count.
#[must_use]
pub fn template_hash(template: &MachineTemplateSpec, collision_count: Option<i32>) -> TemplateHash {
    let mut bytes = semantic_equality::canonical_json(&hashable_template(template)).into_bytes();
    if let Some(count) = collision_count {
        bytes.extend_from_slice(&count.to_le_bytes());
        bytes.extend_from_slice(&[0; 4]);
    }
    let h = fnv1a64(&bytes);
    let base = u64::try_from(SAFE_ALPHABET.len()).unwrap_or(27);
    let mut rest = h;
    let suffix = (0..5)
        .map(|_| {
            let i = usize::try_from(rest % base).unwrap_or(0);
            rest /= base;
            char::from(SAFE_ALPHABET[i])
        })
        .collect();
    // Fold to 32 bits so the label looks like upstream's (a decimal uint32).
    let folded = (h >> 32) ^ (h & 0xffff_ffff);
    TemplateHash {
        label: folded.to_string(),
        suffix,
    }
}

/// `<md>-<suffix>`.
#[must_use]
pub fn machine_set_name(md_name: &str, hash: &TemplateHash) -> String {
    format!("{md_name}-{}", hash.suffix)
}

/// The revision annotation: missing ⇒ 0, unparsable ⇒ `None` (skipped, as upstream logs and skips).
#[must_use]
pub fn revision(meta: &ObjectMeta) -> Option<i64> {
    match meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotation::REVISION))
    {
        None => Some(0),
        Some(v) => v.parse().ok(),
    }
}

/// Highest revision among `sets`.
#[must_use]
pub fn max_revision<'a>(sets: impl IntoIterator<Item = &'a MachineSet>) -> i64 {
    sets.into_iter()
        .filter_map(|s| revision(&s.metadata))
        .max()
        .unwrap_or(0)
}

/// Second highest revision (upstream `LastRevision`), 0 if there is none.
#[must_use]
pub fn last_revision(sets: &[MachineSet]) -> i64 {
    let (mut max, mut second) = (0, 0);
    for r in sets.iter().filter_map(|s| revision(&s.metadata)) {
        if r > max {
            second = max;
            max = r;
        } else if r > second && r < max {
            second = r;
        }
    }
    second
}

/// Index of the new MachineSet: oldest (creation time, then name) whose template equals the
/// deployment's ignoring the hash (`FindNewMachineSet`).
#[must_use]
pub fn find_new_machine_set(md: &MachineDeployment, sets: &[MachineSet]) -> Option<usize> {
    let mut order: Vec<usize> = (0..sets.len()).collect();
    order.sort_by(|&a, &b| creation_order(&sets[a], &sets[b]));
    order.into_iter().find(|&i| {
        sets[i]
            .spec
            .template
            .as_ref()
            .is_some_and(|t| equal_ignore_hash(t, &md.spec.template))
    })
}

/// Oldest first; ties by name.
#[must_use]
pub fn creation_order(a: &MachineSet, b: &MachineSet) -> std::cmp::Ordering {
    let created = |s: &MachineSet| s.metadata.creation_timestamp.as_ref().map(|t| t.0);
    created(a)
        .cmp(&created(b))
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// Copies the deployment's annotations (except [`annotation::NOT_COPIED_TO_MACHINE_SET`]) onto a
/// MachineSet's annotations; returns whether anything changed.
pub fn copy_deployment_annotations(
    md: &MachineDeployment,
    target: &mut BTreeMap<String, String>,
) -> bool {
    let mut changed = false;
    for (k, v) in md.metadata.annotations.iter().flatten() {
        if annotation::NOT_COPIED_TO_MACHINE_SET.contains(&k.as_str()) {
            continue;
        }
        if target.get(k) != Some(v) {
            target.insert(k.clone(), v.clone());
            changed = true;
        }
    }
    changed
}

/// Sets the revision annotation to `new_revision` when lower, recording the previous one in the
/// revision history; returns whether anything changed.
pub fn bump_revision(target: &mut BTreeMap<String, String>, new_revision: i64) -> bool {
    let old = target.get(annotation::REVISION).cloned();
    let old_num = old.as_deref().map_or(Some(0), |v| v.parse::<i64>().ok());
    if old_num.is_some_and(|o| o >= new_revision) {
        return false;
    }
    if let Some(old) = old.filter(|o| !o.is_empty()) {
        let history = match target.get(annotation::REVISION_HISTORY) {
            Some(h) if !h.is_empty() => format!("{h},{old}"),
            _ => old,
        };
        target.insert(annotation::REVISION_HISTORY.to_owned(), history);
    }
    target.insert(annotation::REVISION.to_owned(), new_revision.to_string());
    true
}

/// Brings an existing new MachineSet in line with the deployment (docs/behaviour.md#revisions step 3): annotations,
/// revision, minReadySeconds, autoPreserveFailedMachineMax and the fields propagated in place.
/// Returns the updated copy when something changed.
#[must_use]
pub fn sync_new_machine_set(
    md: &MachineDeployment,
    ms: &MachineSet,
    new_revision: i64,
) -> Option<MachineSet> {
    let mut out = ms.clone();
    let annotations = out.metadata.annotations.get_or_insert_with(BTreeMap::new);
    let mut changed = copy_deployment_annotations(md, annotations);
    changed |= bump_revision(annotations, new_revision);
    if out.spec.min_ready_seconds != md.spec.min_ready_seconds {
        out.spec.min_ready_seconds = md.spec.min_ready_seconds;
        changed = true;
    }
    if out.spec.auto_preserve_failed_machine_max != md.spec.auto_preserve_failed_machine_max {
        out.spec.auto_preserve_failed_machine_max = md.spec.auto_preserve_failed_machine_max;
        changed = true;
    }
    let want = md.spec.template.spec.clone().unwrap_or_default();
    let template = out.spec.template.get_or_insert_with(Default::default);
    let spec = template.spec.get_or_insert_with(Default::default);
    if !semantic_equality::equal(&spec.node_template, &want.node_template) {
        spec.node_template = want.node_template.clone();
        changed = true;
    }
    if !semantic_equality::equal(&spec.configuration, &want.configuration) {
        spec.configuration = want.configuration.clone();
        changed = true;
    }
    let want_kind = want.class.as_ref().and_then(|c| c.kind.clone());
    let have_kind = spec.class.as_ref().and_then(|c| c.kind.clone());
    if want_kind != have_kind {
        spec.class.get_or_insert_with(Default::default).kind = want_kind;
        changed = true;
    }
    changed.then_some(out)
}

/// The new MachineSet of a deployment (docs/behaviour.md#revisions step 4).
#[must_use]
pub fn new_machine_set(
    md: &MachineDeployment,
    hash: &TemplateHash,
    new_revision: i64,
    replicas: i32,
    max_surge: i32,
) -> MachineSet {
    let md_name = md.metadata.name.clone().unwrap_or_default();
    let mut template = md.spec.template.clone();
    let tmeta = template.metadata.get_or_insert_with(Default::default);
    let mut labels = tmeta.labels.clone().unwrap_or_default();
    labels.insert(label::MACHINE_TEMPLATE_HASH.to_owned(), hash.label.clone());
    tmeta.labels = Some(labels.clone());
    let mut selector = md.spec.selector.clone().unwrap_or_default();
    selector
        .match_labels
        .get_or_insert_with(BTreeMap::new)
        .insert(label::MACHINE_TEMPLATE_HASH.to_owned(), hash.label.clone());
    let mut annotations = BTreeMap::new();
    copy_deployment_annotations(md, &mut annotations);
    annotations.insert(annotation::REVISION.to_owned(), new_revision.to_string());
    let desired = md.spec.replicas.unwrap_or(0);
    annotations.insert(annotation::DESIRED_REPLICAS.to_owned(), desired.to_string());
    annotations.insert(
        annotation::MAX_REPLICAS.to_owned(),
        desired.saturating_add(max_surge).to_string(),
    );
    let mut ms = MachineSet::new(
        &machine_set_name(&md_name, hash),
        MachineSetSpec {
            replicas: Some(replicas),
            selector: Some(selector),
            machine_class: None,
            template: Some(template),
            min_ready_seconds: md.spec.min_ready_seconds,
            auto_preserve_failed_machine_max: md.spec.auto_preserve_failed_machine_max,
        },
    );
    ms.metadata.namespace = md.metadata.namespace.clone();
    ms.metadata.labels = Some(labels);
    ms.metadata.annotations = Some(annotations);
    ms.metadata.owner_references = Some(vec![claim::owner_reference(
        KIND,
        &md_name,
        md.metadata.uid.as_deref().unwrap_or(""),
    )]);
    ms
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use mcm_api::v1alpha1::{ClassSpec, MachineSpec, NodeTemplateSpec};
    use proptest::prelude::*;

    fn template(class: &str, label_value: &str) -> MachineTemplateSpec {
        MachineTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(BTreeMap::from([("name".into(), label_value.into())])),
                ..ObjectMeta::default()
            }),
            spec: Some(MachineSpec {
                class: Some(ClassSpec {
                    api_group: None,
                    kind: Some("MachineClass".into()),
                    name: Some(class.into()),
                }),
                ..MachineSpec::default()
            }),
        }
    }

    #[test]
    fn in_place_fields_and_hash_label_do_not_change_identity() {
        let a = template("small", "pool");
        let mut b = a.clone();
        let spec = b.spec.as_mut().unwrap();
        spec.node_template = Some(NodeTemplateSpec::default());
        spec.configuration.drain_timeout = Some("1h".parse().unwrap());
        spec.class.as_mut().unwrap().kind = Some("AWSMachineClass".into());
        b.metadata
            .as_mut()
            .unwrap()
            .labels
            .as_mut()
            .unwrap()
            .insert(label::MACHINE_TEMPLATE_HASH.into(), "123".into());
        assert!(equal_ignore_hash(&a, &b));
        assert_eq!(template_hash(&a, None), template_hash(&b, None));
        // Class name and labels do change it.
        assert!(!equal_ignore_hash(&a, &template("large", "pool")));
        assert!(!equal_ignore_hash(&a, &template("small", "other")));
    }

    #[test]
    fn names_are_stable_and_collision_count_changes_them() {
        let t = template("small", "pool");
        let h = template_hash(&t, None);
        assert_eq!(machine_set_name("md", &h), format!("md-{}", h.suffix));
        assert_eq!(h.suffix.len(), 5);
        assert!(h.suffix.bytes().all(|c| SAFE_ALPHABET.contains(&c)));
        assert_eq!(h, template_hash(&t.clone(), None));
        assert_ne!(h, template_hash(&t, Some(1)));
        assert_ne!(template_hash(&t, Some(1)), template_hash(&t, Some(2)));
    }

    #[test]
    fn hash_is_pinned_across_versions() {
        let h = template_hash(&template("small", "pool"), None);
        let json =
            semantic_equality::canonical_json(&hashable_template(&template("small", "pool")));
        assert_eq!(
            json,
            r#"{"metadata":{"labels":{"name":"pool"}},"spec":{"class":{"name":"small"}}}"#
        );
        // Published FNV-1a 64 test vectors, and the values for this template computed with an
        // independent implementation: a change here renames every existing MachineSet.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(h.label, "3330265232");
        assert_eq!(h.suffix, "df2sf");
    }

    #[test]
    fn revisions_and_history() {
        let mut a = BTreeMap::new();
        assert!(bump_revision(&mut a, 1));
        assert_eq!(a[annotation::REVISION], "1");
        assert!(!a.contains_key(annotation::REVISION_HISTORY));
        assert!(bump_revision(&mut a, 3));
        assert!(!bump_revision(&mut a, 2));
        assert!(bump_revision(&mut a, 5));
        assert_eq!(a[annotation::REVISION_HISTORY], "1,3");
        assert_eq!(a[annotation::REVISION], "5");

        let ms = |r: Option<&str>| {
            let mut s = MachineSet::new("x", MachineSetSpec::default());
            s.metadata.annotations =
                r.map(|r| BTreeMap::from([(annotation::REVISION.to_owned(), r.to_owned())]));
            s
        };
        let sets = vec![ms(Some("4")), ms(Some("garbage")), ms(None), ms(Some("2"))];
        assert_eq!(max_revision(&sets), 4);
        assert_eq!(last_revision(&sets), 2);
        assert_eq!(last_revision(&sets[..1]), 0);
    }

    proptest! {
        /// Changing only in-place fields never changes the name; changing the class name does.
        #[test]
        fn prop_name_depends_only_on_rollout_fields(class in "[a-z]{1,8}", other in "[a-z]{1,8}", secs in 1i64..100_000) {
            let a = template(&class, "pool");
            let mut b = a.clone();
            b.spec.as_mut().unwrap().configuration.health_timeout =
                Some(mcm_api::duration::Duration::from_secs(secs));
            prop_assert_eq!(template_hash(&a, None), template_hash(&b, None));
            if class != other {
                prop_assert!(!equal_ignore_hash(&a, &template(&other, "pool")));
            }
        }
    }
}
