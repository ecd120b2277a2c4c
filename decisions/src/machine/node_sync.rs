//! Node metadata sync (docs/behaviour.md#node-sync): the machine-name label on the Node, the node template's labels,
//! annotations and taints ("ALT") tracked through the last-applied annotation, and the class's
//! virtual capacity in `node.status.capacity`.
//!
//! The plans compute the desired Node; the shell writes `status` first (capacity) and then the
//! object (`Update` with the cached resourceVersion, so a concurrent change conflicts instead of
//! being overwritten).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeStatus, Taint};
use mcm_api::keys::{annotation, label};
use mcm_api::v1alpha1::{Machine, MachineClass, NodeTemplateSpec, ResourceList};

use crate::vocabulary::name_of;

/// Errors of the node sync.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeSyncError {
    /// The last-applied annotation on the Node is not valid JSON of a node template.
    #[error("node {node:?}: annotation {key} is not valid JSON: {message}")]
    LastApplied {
        /// Node name.
        node: String,
        /// Annotation key.
        key: &'static str,
        /// Parser message.
        message: String,
    },
    /// The machine's node template cannot be serialised (cannot happen for decoded objects).
    #[error("machine {machine:?}: node template cannot be encoded: {message}")]
    Encode {
        /// Machine name.
        machine: String,
        /// Encoder message.
        message: String,
    },
}

/// A node to write back.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeUpdate {
    /// The desired node.
    pub node: Node,
    /// `status.capacity` changed: `UpdateStatus` first.
    pub status_changed: bool,
    /// Metadata or spec changed: `Update`.
    pub object_changed: bool,
}

fn node_name(node: &Node) -> String {
    node.metadata.name.clone().unwrap_or_default()
}

/// The machine a Node names in its label `node.gardener.cloud/machine-name`.
#[must_use]
pub fn machine_name_label(node: &Node) -> Option<&str> {
    node.metadata
        .labels
        .as_ref()?
        .get(label::NODE_MACHINE_NAME)
        .map(String::as_str)
}

/// `syncMachineNameToNode`: the Node with label `node.gardener.cloud/machine-name=<machine>`, or
/// `None` when it already has it.
#[must_use]
pub fn sync_machine_name_label(machine: &Machine, node: &Node) -> Option<Node> {
    let name = name_of(machine);
    if machine_name_label(node) == Some(name) {
        return None;
    }
    let mut updated = node.clone();
    updated
        .metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(label::NODE_MACHINE_NAME.to_owned(), name.to_owned());
    Some(updated)
}

fn sync_map(
    node_map: &mut Option<BTreeMap<String, String>>,
    last_applied: Option<&BTreeMap<String, String>>,
    desired: Option<&BTreeMap<String, String>>,
) -> bool {
    let mut changed = false;
    let empty = BTreeMap::new();
    let desired = desired.unwrap_or(&empty);
    if let Some(previous) = last_applied {
        for key in previous.keys() {
            if !desired.contains_key(key)
                && let Some(map) = node_map.as_mut()
            {
                changed |= map.remove(key).is_some();
            }
        }
    }
    for (key, value) in desired {
        let map = node_map.get_or_insert_with(BTreeMap::new);
        if map.get(key) != Some(value) {
            map.insert(key.clone(), value.clone());
            changed = true;
        }
    }
    changed
}

fn sync_taints(node: &mut Node, last_applied: &[Taint], desired: &[Taint]) -> bool {
    let spec = node.spec.get_or_insert_with(Default::default);
    let mut taints = spec.taints.clone().unwrap_or_default();
    let before = taints.clone();
    let same_id = |a: &Taint, b: &Taint| a.key == b.key && a.effect == b.effect;
    taints.retain(|taint| {
        let was_applied = last_applied.iter().any(|old| same_id(old, taint));
        let still_desired = desired.iter().any(|new| same_id(new, taint));
        !was_applied || still_desired
    });
    for wanted in desired {
        match taints.iter_mut().find(|taint| same_id(taint, wanted)) {
            Some(existing) => {
                if existing != wanted {
                    *existing = wanted.clone();
                }
            }
            None => taints.push(wanted.clone()),
        }
    }
    let changed = taints != before;
    if changed {
        spec.taints = (!taints.is_empty()).then_some(taints);
    }
    changed
}

/// Labels, annotations and taints of a node template.
type TemplateParts = (
    Option<BTreeMap<String, String>>,
    Option<BTreeMap<String, String>>,
    Vec<Taint>,
);

fn template_parts(template: Option<&NodeTemplateSpec>) -> TemplateParts {
    let metadata = template.and_then(|template| template.metadata.as_ref());
    (
        metadata.and_then(|metadata| metadata.labels.clone()),
        metadata.and_then(|metadata| metadata.annotations.clone()),
        template
            .and_then(|template| template.spec.as_ref())
            .and_then(|spec| spec.taints.clone())
            .unwrap_or_default(),
    )
}

/// [`sync_node_templates`] for the node the machine names, which may not exist (yet, or any
/// more): no node means nothing to sync and no error, so the pass goes on with its other steps, as
/// upstream's `syncNodeTemplates` does when the node object is missing.
///
/// # Errors
/// As [`sync_node_templates`].
pub fn sync_node_templates_if_present(
    machine: &Machine,
    class: Option<&MachineClass>,
    node: Option<&Node>,
) -> Result<Option<NodeUpdate>, NodeSyncError> {
    node.map_or(Ok(None), |node| sync_node_templates(machine, class, node))
}

/// `syncNodeTemplates`: labels, annotations and taints of `machine.spec.nodeTemplate` and the
/// class's virtual capacity, removing what was applied before and is no longer wanted and never
/// touching keys MCM did not apply. `None` when the node is already in sync.
///
/// # Errors
/// [`NodeSyncError::LastApplied`] when a last-applied annotation cannot be parsed.
pub fn sync_node_templates(
    machine: &Machine,
    class: Option<&MachineClass>,
    node: &Node,
) -> Result<Option<NodeUpdate>, NodeSyncError> {
    let annotations = node.metadata.annotations.as_ref();
    let last_applied: NodeTemplateSpec = match annotations
        .and_then(|map| map.get(annotation::LAST_APPLIED_ANNO_LABELS_TAINTS))
    {
        None => NodeTemplateSpec::default(),
        Some(text) => serde_json::from_str(text).map_err(|error| NodeSyncError::LastApplied {
            node: node_name(node),
            key: annotation::LAST_APPLIED_ANNO_LABELS_TAINTS,
            message: error.to_string(),
        })?,
    };
    let last_capacity: ResourceList = match annotations
        .and_then(|map| map.get(annotation::LAST_APPLIED_VIRTUAL_CAPACITY))
    {
        None => ResourceList::new(),
        Some(text) => serde_json::from_str(text).map_err(|error| NodeSyncError::LastApplied {
            node: node_name(node),
            key: annotation::LAST_APPLIED_VIRTUAL_CAPACITY,
            message: error.to_string(),
        })?,
    };

    let mut updated = node.clone();
    let annotations_initialised = updated.metadata.annotations.is_none();
    let (old_labels, old_annotations, old_taints) = template_parts(Some(&last_applied));
    let (labels, wanted_annotations, taints) = template_parts(machine.spec.node_template.as_ref());
    let mut alt_changed = sync_map(
        &mut updated.metadata.labels,
        old_labels.as_ref(),
        labels.as_ref(),
    );
    alt_changed |= sync_map(
        &mut updated.metadata.annotations,
        old_annotations.as_ref(),
        wanted_annotations.as_ref(),
    );
    alt_changed |= sync_taints(&mut updated, &old_taints, &taints);

    let mut capacity_changed = false;
    let desired_capacity = class
        .and_then(|class| class.node_template.as_ref())
        .map(|template| template.virtual_capacity.clone().unwrap_or_default());
    if let Some(desired) = &desired_capacity {
        let status = updated.status.get_or_insert_with(NodeStatus::default);
        let capacity = status.capacity.get_or_insert_with(BTreeMap::new);
        for key in last_capacity.keys() {
            if !desired.contains_key(key) {
                capacity_changed |= capacity.remove(key).is_some();
            }
        }
        for (key, quantity) in desired {
            if capacity.get(key) != Some(quantity) {
                capacity.insert(key.clone(), quantity.clone());
                capacity_changed = true;
            }
        }
    }

    if !(annotations_initialised || alt_changed || capacity_changed) {
        return Ok(None);
    }
    let node_annotations = updated
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new);
    if alt_changed || annotations_initialised {
        let template = machine.spec.node_template.clone().unwrap_or_default();
        let text = serde_json::to_string(&template).map_err(|error| NodeSyncError::Encode {
            machine: name_of(machine).to_owned(),
            message: error.to_string(),
        })?;
        node_annotations.insert(annotation::LAST_APPLIED_ANNO_LABELS_TAINTS.to_owned(), text);
    }
    if capacity_changed {
        match desired_capacity
            .as_ref()
            .filter(|desired| !desired.is_empty())
        {
            Some(desired) => {
                let text =
                    serde_json::to_string(desired).map_err(|error| NodeSyncError::Encode {
                        machine: name_of(machine).to_owned(),
                        message: error.to_string(),
                    })?;
                node_annotations.insert(annotation::LAST_APPLIED_VIRTUAL_CAPACITY.to_owned(), text);
            }
            None => {
                node_annotations.remove(annotation::LAST_APPLIED_VIRTUAL_CAPACITY);
            }
        }
    }
    Ok(Some(NodeUpdate {
        node: updated,
        status_changed: capacity_changed,
        object_changed: true,
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::test_support::*;
    use k8s_openapi::api::core::v1::NodeSpec;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use mcm_api::v1alpha1::NodeTemplate;

    fn template(
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
        taints: Vec<Taint>,
    ) -> NodeTemplateSpec {
        let map = |pairs: &[(&str, &str)]| {
            (!pairs.is_empty()).then(|| {
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect()
            })
        };
        NodeTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: map(labels),
                annotations: map(annotations),
                ..ObjectMeta::default()
            }),
            spec: Some(NodeSpec {
                taints: (!taints.is_empty()).then_some(taints),
                ..NodeSpec::default()
            }),
        }
    }

    fn with_template(t: NodeTemplateSpec) -> Machine {
        let mut m = machine("m1");
        m.spec.node_template = Some(t);
        m
    }

    fn labels(node: &Node) -> BTreeMap<String, String> {
        node.metadata.labels.clone().unwrap_or_default()
    }

    #[test]
    fn machine_name_label() {
        let m = machine("m1");
        let n = node("n1", vec![], vec![]);
        let updated = sync_machine_name_label(&m, &n).unwrap();
        assert_eq!(labels(&updated)["node.gardener.cloud/machine-name"], "m1");
        assert_eq!(sync_machine_name_label(&m, &updated), None);
    }

    #[test]
    fn applies_template_and_removes_only_what_it_applied() {
        let first = with_template(template(
            &[("role", "worker"), ("pool", "a")],
            &[("team", "x")],
            vec![taint("dedicated", "NoSchedule")],
        ));
        let mut n = node("n1", vec![], vec![taint("user", "NoExecute")]);
        n.metadata.labels = Some([("kubernetes.io/hostname".to_owned(), "n1".to_owned())].into());
        let update = sync_node_templates(&first, None, &n).unwrap().unwrap();
        assert!(update.object_changed && !update.status_changed);
        let synced = update.node;
        assert_eq!(labels(&synced)["role"], "worker");
        assert_eq!(
            synced.spec.as_ref().unwrap().taints.as_ref().unwrap().len(),
            2
        );
        assert!(
            synced
                .metadata
                .annotations
                .as_ref()
                .unwrap()
                .contains_key(annotation::LAST_APPLIED_ANNO_LABELS_TAINTS)
        );
        // In sync now.
        assert_eq!(sync_node_templates(&first, None, &synced).unwrap(), None);

        // Template drops "pool" and the taint, changes "role".
        let second = with_template(template(&[("role", "infra")], &[], vec![]));
        let resynced = sync_node_templates(&second, None, &synced)
            .unwrap()
            .unwrap()
            .node;
        let l = labels(&resynced);
        assert_eq!(l["role"], "infra");
        assert!(!l.contains_key("pool"));
        assert_eq!(
            l["kubernetes.io/hostname"], "n1",
            "labels MCM never applied stay"
        );
        let a = resynced.metadata.annotations.clone().unwrap();
        assert!(!a.contains_key("team"));
        let taints = resynced.spec.as_ref().unwrap().taints.clone().unwrap();
        assert_eq!(taints, vec![taint("user", "NoExecute")], "user taints stay");
    }

    #[test]
    fn taint_identity_is_key_and_effect() {
        let mut valued = taint("dedicated", "NoSchedule");
        valued.value = Some("gpu".into());
        let m = with_template(template(&[], &[], vec![valued.clone()]));
        let n = node(
            "n1",
            vec![],
            vec![
                taint("dedicated", "NoSchedule"),
                taint("dedicated", "NoExecute"),
            ],
        );
        let synced = sync_node_templates(&m, None, &n).unwrap().unwrap().node;
        let taints = synced.spec.unwrap().taints.unwrap();
        assert_eq!(taints.len(), 2);
        assert!(taints.contains(&valued));
    }

    #[test]
    fn virtual_capacity() {
        let m = with_template(template(&[], &[], vec![]));
        let mut class = MachineClass::new("c", serde_json::json!({}));
        class.node_template = Some(NodeTemplate {
            virtual_capacity: Some(
                [("hc.hana.com/memory".to_owned(), Quantity("1234".into()))].into(),
            ),
            ..NodeTemplate::default()
        });
        let n = node("n1", vec![], vec![]);
        let update = sync_node_templates(&m, Some(&class), &n).unwrap().unwrap();
        assert!(update.status_changed);
        let capacity = update
            .node
            .status
            .as_ref()
            .unwrap()
            .capacity
            .clone()
            .unwrap();
        assert_eq!(capacity["hc.hana.com/memory"], Quantity("1234".into()));
        // Dropped from the class: removed from the node and the annotation deleted.
        class.node_template.as_mut().unwrap().virtual_capacity = None;
        let update = sync_node_templates(&m, Some(&class), &update.node)
            .unwrap()
            .unwrap();
        assert!(update.status_changed);
        assert!(
            !update
                .node
                .status
                .as_ref()
                .unwrap()
                .capacity
                .as_ref()
                .unwrap()
                .contains_key("hc.hana.com/memory")
        );
        assert!(
            !update
                .node
                .metadata
                .annotations
                .unwrap()
                .contains_key(annotation::LAST_APPLIED_VIRTUAL_CAPACITY)
        );
    }

    #[test]
    fn malformed_last_applied_is_an_error() {
        let m = with_template(template(&[("a", "b")], &[], vec![]));
        let mut n = node("n1", vec![], vec![]);
        n.metadata.annotations = Some(
            [(
                annotation::LAST_APPLIED_ANNO_LABELS_TAINTS.to_owned(),
                "{not json".to_owned(),
            )]
            .into(),
        );
        assert!(matches!(
            sync_node_templates(&m, None, &n),
            Err(NodeSyncError::LastApplied { .. })
        ));
    }
}
