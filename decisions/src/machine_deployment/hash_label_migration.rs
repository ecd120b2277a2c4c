//! Migration of legacy MachineSets whose selector lacks `machine-template-hash` (docs/behaviour.md#revisions,
//! `getAllMachineSetsAndSyncRevision` step 1). Pure: one step per call, the shell executes it and
//! reconciles again.
//!
//! Order, as upstream: hash label on the set's template, then on its active machines, then on
//! the set's labels and selector. Upstream waits for `fullyLabeledReplicas == spec.replicas`
//! before the last step; here the last step waits until every active machine of the set carries
//! the label in the cache, which is what `fullyLabeledReplicas` counts.

use mcm_api::keys::label;
use mcm_api::v1alpha1::{Machine, MachineDeployment, MachineSet};

use super::revision;
use crate::machine_set::claim::controller_ref;
use crate::machine_set::types::MachineRef;

/// The next migration step of one legacy MachineSet.
#[derive(Debug, Clone, PartialEq)]
pub enum LegacyStep {
    /// Update the set (template labels, or labels and selector) with its cached resourceVersion.
    UpdateSet(Box<MachineSet>),
    /// Add `machine-template-hash=<value>` to these machines.
    LabelMachines {
        /// The machines.
        machines: Vec<MachineRef>,
        /// The hash label value.
        value: String,
    },
}

fn has_hash_label(labels: Option<&std::collections::BTreeMap<String, String>>) -> bool {
    labels.is_some_and(|l| l.contains_key(label::MACHINE_TEMPLATE_HASH))
}

/// The next step for `ms` (controlled by `md`), given the machines of the namespace; `None` when
/// the set is not legacy (its selector has the hash label) or not controlled by `md`.
#[must_use]
pub fn next_step<M: std::borrow::Borrow<Machine>>(
    md: &MachineDeployment,
    ms: &MachineSet,
    machines: &[M],
) -> Option<LegacyStep> {
    let machines: Vec<&Machine> = machines.iter().map(std::borrow::Borrow::borrow).collect();
    let selector = ms.spec.selector.as_ref()?;
    if has_hash_label(selector.match_labels.as_ref()) {
        return None;
    }
    let controlled =
        controller_ref(&ms.metadata).is_some_and(|r| Some(&r.uid) == md.metadata.uid.as_ref());
    if !controlled || ms.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let template = ms.spec.template.clone().unwrap_or_default();
    let collision = md.status.as_ref().and_then(|s| s.collision_count);
    let existing = template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.as_ref())
        .and_then(|l| l.get(label::MACHINE_TEMPLATE_HASH))
        .cloned();
    let Some(value) = existing else {
        let value = revision::template_hash(&template, collision).label;
        let mut updated = ms.clone();
        let t = updated.spec.template.get_or_insert_with(Default::default);
        t.metadata
            .get_or_insert_with(Default::default)
            .labels
            .get_or_insert_with(Default::default)
            .insert(label::MACHINE_TEMPLATE_HASH.to_owned(), value);
        return Some(LegacyStep::UpdateSet(Box::new(updated)));
    };
    let set_uid = ms.metadata.uid.as_deref();
    let unlabelled: Vec<MachineRef> = machines
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .filter(|m| controller_ref(&m.metadata).is_some_and(|r| Some(r.uid.as_str()) == set_uid))
        .filter(|m| {
            m.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(label::MACHINE_TEMPLATE_HASH))
                != Some(&value)
        })
        .map(|m| MachineRef {
            name: m.metadata.name.clone().unwrap_or_default(),
            uid: m.metadata.uid.clone().unwrap_or_default(),
        })
        .collect();
    if !unlabelled.is_empty() {
        return Some(LegacyStep::LabelMachines {
            machines: unlabelled,
            value,
        });
    }
    let mut updated = ms.clone();
    updated
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(label::MACHINE_TEMPLATE_HASH.to_owned(), value.clone());
    updated
        .spec
        .selector
        .get_or_insert_with(Default::default)
        .match_labels
        .get_or_insert_with(Default::default)
        .insert(label::MACHINE_TEMPLATE_HASH.to_owned(), value);
    Some(LegacyStep::UpdateSet(Box::new(updated)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::machine_set::claim::owner_reference;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use mcm_api::v1alpha1::{MachineDeploymentSpec, MachineSetSpec, MachineTemplateSpec};
    use std::collections::BTreeMap;

    fn pool() -> BTreeMap<String, String> {
        BTreeMap::from([("name".to_owned(), "pool".to_owned())])
    }

    fn md() -> MachineDeployment {
        let mut md = MachineDeployment::new("pool", MachineDeploymentSpec::default());
        md.metadata.uid = Some("md-uid".into());
        md
    }

    fn legacy_set() -> MachineSet {
        let mut ms = MachineSet::new(
            "pool-old",
            MachineSetSpec {
                replicas: Some(2),
                selector: Some(LabelSelector {
                    match_labels: Some(pool()),
                    match_expressions: None,
                }),
                template: Some(MachineTemplateSpec {
                    metadata: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                        labels: Some(pool()),
                        ..Default::default()
                    }),
                    spec: None,
                }),
                ..MachineSetSpec::default()
            },
        );
        ms.metadata.uid = Some("ms-uid".into());
        ms.metadata.owner_references =
            Some(vec![owner_reference("MachineDeployment", "pool", "md-uid")]);
        ms
    }

    fn machine(name: &str, labels: BTreeMap<String, String>) -> Machine {
        let mut m: Machine = serde_json::from_value(serde_json::json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "Machine",
            "metadata": {"name": name, "uid": format!("uid-{name}")},
            "spec": {}
        }))
        .unwrap();
        m.metadata.labels = Some(labels);
        m.metadata.owner_references =
            Some(vec![owner_reference("MachineSet", "pool-old", "ms-uid")]);
        m
    }

    #[test]
    fn template_then_machines_then_selector() {
        let md = md();
        let ms = legacy_set();
        let machines = vec![machine("a", pool()), machine("b", pool())];
        // 1. The template gets the hash label.
        let Some(LegacyStep::UpdateSet(step1)) = next_step(&md, &ms, &machines) else {
            panic!("template step expected");
        };
        let value = step1
            .spec
            .template
            .as_ref()
            .unwrap()
            .metadata
            .as_ref()
            .unwrap()
            .labels
            .as_ref()
            .unwrap()[label::MACHINE_TEMPLATE_HASH]
            .clone();
        assert!(!has_hash_label(
            step1.spec.selector.as_ref().unwrap().match_labels.as_ref()
        ));
        // 2. Active machines get it.
        let Some(LegacyStep::LabelMachines {
            machines: names,
            value: v,
        }) = next_step(&md, &step1, &machines)
        else {
            panic!("machine step expected");
        };
        assert_eq!(v, value);
        assert_eq!(
            names.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        // 3. Once every machine carries it, labels and selector get it.
        let mut labelled = pool();
        labelled.insert(label::MACHINE_TEMPLATE_HASH.into(), value.clone());
        let machines = vec![machine("a", labelled.clone()), machine("b", labelled)];
        let Some(LegacyStep::UpdateSet(step3)) = next_step(&md, &step1, &machines) else {
            panic!("selector step expected");
        };
        assert_eq!(
            step3
                .spec
                .selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()[label::MACHINE_TEMPLATE_HASH],
            value
        );
        assert_eq!(
            step3.metadata.labels.as_ref().unwrap()[label::MACHINE_TEMPLATE_HASH],
            value
        );
        // Migrated: nothing more.
        assert_eq!(next_step(&md, &step3, &machines), None);
    }

    #[test]
    fn sets_of_other_owners_are_left_alone() {
        let mut ms = legacy_set();
        ms.metadata.owner_references = Some(vec![owner_reference(
            "MachineDeployment",
            "other",
            "other-uid",
        )]);
        assert_eq!(next_step::<Machine>(&md(), &ms, &[]), None);
    }
}
