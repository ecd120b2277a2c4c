//! `machine_util_test.go` `#SyncMachineLabels`, `#SyncMachineAnnotations` and
//! `#SyncMachineTaints`, replayed through `node_sync::sync_node_templates` (upstream's three
//! helpers are its parts): the node's current values, the last-applied annotation (upstream's JSON
//! text), the machine's node template, and the node values and "changed" flag expected after.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSpec, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use mcm_api::keys::annotation;
use mcm_api::v1alpha1::NodeTemplateSpec;

use crate::machine::node_sync::{sync_node_templates, sync_node_templates_if_present};
use crate::test_support::{machine, node};

type Pairs = &'static [(&'static str, &'static str)];

/// `(entry, node, last applied, machine template, node after, changed)`.
type MapRow = (&'static str, Pairs, Pairs, Pairs, Pairs, bool);

const K1: (&str, &str) = ("key1", "value1");
const K2: (&str, &str) = ("key2", "value2");

const LABELS: &[MapRow] = &[
    (
        "when labels have not been updated",
        &[K1],
        &[K1],
        &[K1],
        &[K1],
        false,
    ),
    (
        "when labels values are updated ",
        &[K1],
        &[K1],
        &[("key1", "valueChanged")],
        &[("key1", "valueChanged")],
        true,
    ),
    (
        "when new label keys are added ",
        &[K1],
        &[K1],
        &[K1, K2],
        &[K1, K2],
        true,
    ),
    (
        "when label is deleted from machine object",
        &[K1, K2],
        &[K1, K2],
        &[K1],
        &[K1],
        true,
    ),
    (
        "when labels values are updated manually on node object",
        &[("key1", "value2")],
        &[K1],
        &[K1],
        &[K1],
        true,
    ),
    (
        "when new labels are added on node-object ",
        &[K1, ("keyNew", "valueNew")],
        &[K1],
        &[K1],
        &[K1, ("keyNew", "valueNew")],
        false,
    ),
    (
        "when existing labels are deleted from node-object ",
        &[],
        &[K1],
        &[K1, K2],
        &[K1, K2],
        true,
    ),
];

const A1: (&str, &str) = ("anno1", "anno1");
const A2: (&str, &str) = ("anno2", "anno2");

const ANNOTATIONS: &[MapRow] = &[
    (
        "when annotations have not been updated",
        &[A1],
        &[A1],
        &[A1],
        &[A1],
        false,
    ),
    (
        "when annotations values are updated ",
        &[A1],
        &[A1],
        &[("anno1", "annoChanged")],
        &[("anno1", "annoChanged")],
        true,
    ),
    (
        "when new annotation keys are added ",
        &[A1],
        &[A1],
        &[A1, A2],
        &[A1, A2],
        true,
    ),
    (
        "when annotations are deleted ",
        &[A1, A2],
        &[A1, A2],
        &[A1],
        &[A1],
        true,
    ),
    (
        "when annotations values are updated manually on node object",
        &[("anno1", "anno2")],
        &[A1],
        &[A1],
        &[A1],
        true,
    ),
    (
        "when new annotations are added on node-objects.",
        &[A1, ("annoNew", "annoNew")],
        &[A1],
        &[A1],
        &[A1, ("annoNew", "annoNew")],
        false,
    ),
    (
        "when existing annotations are deleted from node-objects. ",
        &[],
        &[A1],
        &[A1, A2],
        &[A1, A2],
        true,
    ),
];

fn map(pairs: Pairs) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
        .collect()
}

fn last_applied_json(template: &NodeTemplateSpec) -> String {
    serde_json::to_string(template).unwrap()
}

#[test]
fn sync_machine_labels_table() {
    for (entry, on_node, applied, wanted, after, changed) in LABELS {
        let template = |pairs: Pairs| NodeTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(map(pairs)),
                ..ObjectMeta::default()
            }),
            spec: None,
        };
        let mut m = machine("machine-0");
        m.spec.node_template = Some(template(wanted));
        let mut n = node("test-node-0", Vec::new(), Vec::new());
        n.metadata.labels = Some(map(on_node));
        n.metadata.annotations = Some(BTreeMap::from([(
            annotation::LAST_APPLIED_ANNO_LABELS_TAINTS.to_owned(),
            last_applied_json(&template(applied)),
        )]));
        let update = sync_node_templates(&m, None, &n).unwrap();
        assert_eq!(update.is_some(), *changed, "{entry}");
        let labels = update.map_or(n.metadata.labels.clone(), |u| u.node.metadata.labels);
        assert_eq!(labels.unwrap_or_default(), map(after), "{entry}");
    }
}

#[test]
fn sync_machine_annotations_table() {
    for (entry, on_node, applied, wanted, after, changed) in ANNOTATIONS {
        let template = |pairs: Pairs| NodeTemplateSpec {
            metadata: Some(ObjectMeta {
                annotations: Some(map(pairs)),
                ..ObjectMeta::default()
            }),
            spec: None,
        };
        let mut m = machine("machine-0");
        m.spec.node_template = Some(template(wanted));
        let mut n = node("test-node-0", Vec::new(), Vec::new());
        let mut annotations = map(on_node);
        annotations.insert(
            annotation::LAST_APPLIED_ANNO_LABELS_TAINTS.to_owned(),
            last_applied_json(&template(applied)),
        );
        n.metadata.annotations = Some(annotations);
        let update = sync_node_templates(&m, None, &n).unwrap();
        assert_eq!(update.is_some(), *changed, "{entry}");
        let mut annotations = update
            .map_or(n.metadata.annotations.clone(), |u| {
                u.node.metadata.annotations
            })
            .unwrap_or_default();
        // Upstream ignores the last-applied annotation itself in the comparison.
        annotations.remove(annotation::LAST_APPLIED_ANNO_LABELS_TAINTS);
        assert_eq!(annotations, map(after), "{entry}");
    }
}

type Taints = &'static [(&'static str, &'static str, &'static str)];

const T1: (&str, &str, &str) = ("Key1", "Value1", "NoSchedule");
const T2: (&str, &str, &str) = ("Key2", "Value2", "NoSchedule");

/// `(entry, node taints, last applied, machine template, node taints after (any order), changed)`.
const TAINTS: &[(&str, Taints, Taints, Taints, Taints, bool)] = &[
    (
        "when taints have not been updated",
        &[T1],
        &[T1],
        &[T1],
        &[T1],
        false,
    ),
    (
        "when taints values are updated ",
        &[("Key1", "OldValue", "NoSchedule")],
        &[("Key1", "OldValue", "NoSchedule")],
        &[("Key1", "NewValue", "NoSchedule")],
        &[("Key1", "NewValue", "NoSchedule")],
        true,
    ),
    (
        "when new taints are added ",
        &[T1],
        &[T1],
        &[T1, T2],
        &[T1, T2],
        true,
    ),
    (
        "when taints are deleted ",
        &[T1, T2],
        &[T1, T2],
        &[T1],
        &[T1],
        true,
    ),
    (
        "when node taint value is overwritten manually & new taint was added with same key & value but different effect",
        &[("Key1", "Value2", "NoSchedule")],
        &[T1],
        &[T1, ("Key1", "Value1", "NoExecute")],
        &[T1, ("Key1", "Value1", "NoExecute")],
        true,
    ),
    (
        "when new taints are added on node-object ",
        &[T1, ("KeyNew", "ValueNew", "NoSchedule")],
        &[T1],
        &[T1],
        &[T1, ("KeyNew", "ValueNew", "NoSchedule")],
        false,
    ),
    (
        "when existing taints are deleted from node-objects ",
        &[],
        &[T1],
        &[T1, T2],
        &[T1, T2],
        true,
    ),
];

fn taints(list: Taints) -> Vec<Taint> {
    list.iter()
        .map(|(key, value, effect)| Taint {
            key: (*key).to_owned(),
            value: Some((*value).to_owned()),
            effect: (*effect).to_owned(),
            time_added: None,
        })
        .collect()
}

fn sorted(
    mut list: Vec<(String, Option<String>, String)>,
) -> Vec<(String, Option<String>, String)> {
    list.sort();
    list
}

fn identity(list: &[Taint]) -> Vec<(String, Option<String>, String)> {
    sorted(
        list.iter()
            .map(|t| (t.key.clone(), t.value.clone(), t.effect.clone()))
            .collect(),
    )
}

#[test]
fn sync_machine_taints_table() {
    for (entry, on_node, applied, wanted, after, changed) in TAINTS {
        let template = |list: Taints| NodeTemplateSpec {
            metadata: None,
            spec: Some(NodeSpec {
                taints: Some(taints(list)),
                ..NodeSpec::default()
            }),
        };
        let mut m = machine("machine-0");
        m.spec.node_template = Some(template(wanted));
        let mut n = node("test-node-0", Vec::new(), Vec::new());
        n.spec.as_mut().unwrap().taints = Some(taints(on_node));
        n.metadata.annotations = Some(BTreeMap::from([(
            annotation::LAST_APPLIED_ANNO_LABELS_TAINTS.to_owned(),
            last_applied_json(&template(applied)),
        )]));
        let update = sync_node_templates(&m, None, &n).unwrap();
        assert_eq!(update.is_some(), *changed, "{entry}");
        let node_after = update.map_or(n, |u| u.node);
        let result = node_after
            .spec
            .and_then(|spec| spec.taints)
            .unwrap_or_default();
        assert_eq!(identity(&result), identity(&taints(after)), "{entry}");
    }
}

#[test]
fn upstream_last_applied_json_is_understood() {
    // The rows above write the last-applied annotation with our encoder; upstream's own text
    // (with `creationTimestamp: null`) must decode to the same template.
    let mut m = machine("machine-0");
    m.spec.node_template = Some(NodeTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(map(&[K1])),
            ..ObjectMeta::default()
        }),
        spec: None,
    });
    let mut n = node("test-node-0", Vec::new(), Vec::new());
    n.metadata.labels = Some(map(&[K1]));
    n.metadata.annotations = Some(BTreeMap::from([(
        annotation::LAST_APPLIED_ANNO_LABELS_TAINTS.to_owned(),
        "{\"metadata\":{\"creationTimestamp\":null,\"labels\":{\"key1\":\"value1\"}}}".to_owned(),
    )]));
    assert_eq!(sync_node_templates(&m, None, &n).unwrap(), None);
}

// ---------------------------------------------------------------------------------------------
// machine_util_test.go: #SyncVirtualCapacity / ##table
// ---------------------------------------------------------------------------------------------

type Resources = &'static [(&'static str, &'static str)];

/// `(entry, class virtualCapacity, last applied, node capacity, node capacity after, changed)`;
/// after a change the last-applied annotation equals the desired virtual capacity.
const VIRTUAL_CAPACITY: &[(&str, Resources, Resources, Resources, Resources, bool)] = &[
    (
        "when node.status.capacity has not been changed",
        &[("hc.hana.com/memory", "1234567")],
        &[("hc.hana.com/memory", "1234567")],
        &[("memory", "1234567"), ("hc.hana.com/memory", "1234567")],
        &[("memory", "1234567"), ("hc.hana.com/memory", "1234567")],
        false,
    ),
    (
        "when virtual resource value is changed in virtualCapacity",
        &[("hc.hana.com/memory", "2234567")],
        &[("hc.hana.com/memory", "1234567")],
        &[("memory", "1234567"), ("hc.hana.com/memory", "1234567")],
        &[("memory", "1234567"), ("hc.hana.com/memory", "2234567")],
        true,
    ),
    (
        "when virtual resources are added in virtualCapacity",
        &[("hc.hana.com/memory", "1111111"), ("hc.hana.com/cpu", "2")],
        &[("hc.hana.com/memory", "1111111")],
        &[("memory", "1234567"), ("hc.hana.com/memory", "1111111")],
        &[
            ("memory", "1234567"),
            ("hc.hana.com/memory", "1111111"),
            ("hc.hana.com/cpu", "2"),
        ],
        true,
    ),
    (
        "when virtual resources are deleted in virtualCapacity",
        &[("hc.hana.com/cpu", "2")],
        &[("hc.hana.com/cpu", "2"), ("hc.hana.com/memory", "1111111")],
        &[
            ("memory", "1234567"),
            ("hc.hana.com/cpu", "2"),
            ("hc.hana.com/memory", "1111111"),
        ],
        &[("memory", "1234567"), ("hc.hana.com/cpu", "2")],
        true,
    ),
];

fn resources(list: Resources) -> mcm_api::v1alpha1::ResourceList {
    list.iter()
        .map(|(name, quantity)| {
            (
                (*name).to_owned(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity((*quantity).to_owned()),
            )
        })
        .collect()
}

#[test]
fn sync_virtual_capacity_table() {
    use mcm_api::v1alpha1::{MachineClass, NodeTemplate};
    for (entry, desired, applied, capacity, after, changed) in VIRTUAL_CAPACITY {
        let mut class = MachineClass::new("class", serde_json::Value::Null);
        class.node_template = Some(NodeTemplate {
            virtual_capacity: Some(resources(desired)),
            ..NodeTemplate::default()
        });
        let m = machine("machine-0");
        let mut n = node("test-node-0", Vec::new(), Vec::new());
        n.metadata.annotations = Some(BTreeMap::from([
            (
                annotation::LAST_APPLIED_VIRTUAL_CAPACITY.to_owned(),
                serde_json::to_string(&resources(applied)).unwrap(),
            ),
            // The node template part is in sync (nothing applied, nothing wanted).
            (
                annotation::LAST_APPLIED_ANNO_LABELS_TAINTS.to_owned(),
                last_applied_json(&NodeTemplateSpec::default()),
            ),
        ]));
        n.status.as_mut().unwrap().capacity = Some(resources(capacity));
        let update = sync_node_templates(&m, Some(&class), &n).unwrap();
        assert_eq!(update.is_some(), *changed, "{entry}");
        let Some(update) = update else { continue };
        assert!(update.status_changed, "{entry}");
        assert_eq!(
            update.node.status.as_ref().and_then(|s| s.capacity.clone()),
            Some(resources(after)),
            "{entry}"
        );
        let stored = update
            .node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotation::LAST_APPLIED_VIRTUAL_CAPACITY))
            .unwrap();
        let stored: mcm_api::v1alpha1::ResourceList = serde_json::from_str(stored).unwrap();
        assert_eq!(stored, resources(desired), "{entry}");
    }
}

#[test]
fn upstream_last_applied_virtual_capacity_json_is_understood() {
    use mcm_api::v1alpha1::{MachineClass, NodeTemplate};
    let mut class = MachineClass::new("class", serde_json::Value::Null);
    class.node_template = Some(NodeTemplate {
        virtual_capacity: Some(resources(&[("hc.hana.com/memory", "1234567")])),
        ..NodeTemplate::default()
    });
    let mut n = node("test-node-0", Vec::new(), Vec::new());
    n.metadata.annotations = Some(BTreeMap::from([
        (
            annotation::LAST_APPLIED_VIRTUAL_CAPACITY.to_owned(),
            "{\"hc.hana.com/memory\":\"1234567\"}".to_owned(),
        ),
        (
            annotation::LAST_APPLIED_ANNO_LABELS_TAINTS.to_owned(),
            "{\"metadata\":{\"creationTimestamp\":null}}".to_owned(),
        ),
    ]));
    n.status.as_mut().unwrap().capacity = Some(resources(&[
        ("memory", "1234567"),
        ("hc.hana.com/memory", "1234567"),
    ]));
    assert_eq!(
        sync_node_templates(&machine("machine-0"), Some(&class), &n).unwrap(),
        None
    );
}

/// `#syncNodeTemplates` rows: `(entry, template labels, template annotations, template taints,
/// class virtual capacity, node labels, node annotations, node taints, expected labels,
/// expected annotations without the last-applied node-template annotation (upstream deletes it
/// before comparing), expected taints (any order), expected capacity)`.
type TemplatesRow = (
    &'static str,
    Pairs,
    Pairs,
    Taints,
    Option<Resources>,
    Pairs,
    Pairs,
    Taints,
    Pairs,
    Pairs,
    Taints,
    Resources,
);

/// The template annotation upstream's first entry carries (its text is not valid JSON; it is
/// only copied to the node, never parsed).
const TEMPLATE_ALT_1: (&str, &str) = (
    annotation::LAST_APPLIED_ANNO_LABELS_TAINTS,
    "{\"metadata\":{\"creationTimestamp\":null,\"annotations\":{\"anno1\":\"anno1\"}}}}",
);
const TEMPLATE_ALT_2: (&str, &str) = (
    annotation::LAST_APPLIED_ANNO_LABELS_TAINTS,
    "{\"metadata\":{\"creationTimestamp\":null,\"labels\":{\"key1\":\"value1\"},\"annotations\":{\"anno1\":\"anno1\"}}}",
);
const ANNO1: (&str, &str) = ("anno1", "anno1");
const NO_SCHEDULE: (&str, &str, &str) = ("key1", "value1", "NoSchedule");
const NO_EXECUTE: (&str, &str, &str) = ("key1", "value1", "NoExecute");

const SYNC_NODE_TEMPLATES: &[TemplatesRow] = &[
    (
        "when nodeTemplate is not updated in node-object",
        &[K1],
        &[ANNO1, TEMPLATE_ALT_1],
        &[NO_SCHEDULE],
        Some(&[("virtual.com/dongle", "2")]),
        &[K1],
        &[ANNO1],
        &[NO_SCHEDULE],
        &[K1],
        &[
            ANNO1,
            (
                annotation::LAST_APPLIED_VIRTUAL_CAPACITY,
                "{\"virtual.com/dongle\":\"2\"}",
            ),
        ],
        &[NO_SCHEDULE],
        &[("virtual.com/dongle", "2")],
    ),
    (
        "when nodeTemplate is updated in node-object",
        &[K1],
        &[ANNO1, TEMPLATE_ALT_2],
        &[NO_SCHEDULE],
        None,
        &[],
        &[],
        &[],
        &[K1],
        &[ANNO1],
        &[NO_SCHEDULE],
        &[],
    ),
    (
        "Multiple taints with same key and value added to taint",
        &[K1],
        &[ANNO1],
        &[NO_EXECUTE, NO_SCHEDULE],
        None,
        &[K1],
        &[ANNO1, TEMPLATE_ALT_2],
        &[],
        &[K1],
        &[ANNO1],
        &[NO_EXECUTE, NO_SCHEDULE],
        &[],
    ),
];

/// `#syncNodeTemplates` "when node object does not exist": a machine with a node template whose
/// node is missing gets no update and no error, so the rest of the pass runs.
#[test]
fn sync_node_templates_when_node_object_does_not_exist() {
    let mut m = machine("machine-0");
    m.spec.node_template = Some(NodeTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(map(&[K1])),
            annotations: Some(BTreeMap::from([("anno1".to_owned(), "anno1".to_owned())])),
            ..ObjectMeta::default()
        }),
        spec: Some(NodeSpec {
            taints: Some(vec![Taint {
                key: "key1".to_owned(),
                value: Some("value1".to_owned()),
                effect: "NoSchedule".to_owned(),
                time_added: None,
            }]),
            ..NodeSpec::default()
        }),
    });
    assert_eq!(
        sync_node_templates_if_present(&m, None, None).unwrap(),
        None
    );
    // The same machine with its node present does get an update: the missing node is what
    // makes the first call a no-op.
    let n = node("test-node-0", Vec::new(), Vec::new());
    assert!(
        sync_node_templates_if_present(&m, None, Some(&n))
            .unwrap()
            .is_some()
    );
}

#[test]
fn sync_node_templates_table() {
    use mcm_api::v1alpha1::{MachineClass, NodeTemplate};
    for &(
        entry,
        template_labels,
        template_annotations,
        template_taints,
        virtual_capacity,
        node_labels,
        node_annotations,
        node_taints,
        labels_after,
        annotations_after,
        taints_after,
        capacity_after,
    ) in SYNC_NODE_TEMPLATES
    {
        let mut m = machine("machine-0");
        m.spec.node_template = Some(NodeTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(map(template_labels)),
                annotations: Some(map(template_annotations)),
                ..ObjectMeta::default()
            }),
            spec: Some(NodeSpec {
                taints: Some(taints(template_taints)),
                ..NodeSpec::default()
            }),
        });
        let class = virtual_capacity.map(|capacity| {
            let mut class = MachineClass::new("test-machine-class", serde_json::Value::Null);
            class.node_template = Some(NodeTemplate {
                virtual_capacity: Some(resources(capacity)),
                ..NodeTemplate::default()
            });
            class
        });
        let mut n = node("test-node-0", Vec::new(), taints(node_taints));
        n.metadata.labels = (!node_labels.is_empty()).then(|| map(node_labels));
        n.metadata.annotations = (!node_annotations.is_empty()).then(|| map(node_annotations));
        // Upstream's entries all end in errSuccessfulALTsync: the node is written.
        let update = sync_node_templates(&m, class.as_ref(), &n)
            .unwrap()
            .unwrap_or_else(|| panic!("{entry}: the node is not written"));
        let after = update.node;
        assert_eq!(
            after.metadata.labels.clone().unwrap_or_default(),
            map(labels_after),
            "{entry}"
        );
        let mut annotations = after.metadata.annotations.clone().unwrap_or_default();
        let stored = annotations
            .remove(annotation::LAST_APPLIED_ANNO_LABELS_TAINTS)
            .unwrap_or_else(|| panic!("{entry}: no last-applied annotation"));
        // What is recorded as applied is the machine's template.
        let stored: NodeTemplateSpec = serde_json::from_str(&stored).unwrap();
        assert_eq!(Some(stored), m.spec.node_template, "{entry}");
        assert_eq!(annotations, map(annotations_after), "{entry}");
        assert_eq!(
            identity(
                &after
                    .spec
                    .as_ref()
                    .and_then(|spec| spec.taints.clone())
                    .unwrap_or_default()
            ),
            identity(&taints(taints_after)),
            "{entry}"
        );
        assert_eq!(
            after
                .status
                .as_ref()
                .and_then(|status| status.capacity.clone())
                .unwrap_or_default(),
            resources(capacity_after),
            "{entry}"
        );
        assert_eq!(update.status_changed, !capacity_after.is_empty(), "{entry}");
    }
}
