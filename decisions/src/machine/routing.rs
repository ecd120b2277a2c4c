//! Event routing (docs/behaviour.md#machine-routing) and the node controller (docs/behaviour.md#node-controller), as pure functions over old/new objects.
//!
//! Differences from upstream, on purpose: a change of `status.currentStatus.preserveExpiryTime`
//! (e.g. a user editing it) routes the machine even though it is a status-only update, so it is
//! acted on without waiting for a resync (upstream ignores status-only updates, docs/behaviour.md#q3).

use std::borrow::Borrow;

use k8s_openapi::api::core::v1::Node;
use mcm_api::keys::{annotation, finalizer, label, taint};
use mcm_api::v1alpha1::{Machine, MachinePhase};

use super::health::node_conditions_changed;
use super::hot_update::in_flight;
use crate::vocabulary::{
    description_of, finalizers_with, machine_annotation, phase_of, preserve_expiry_of,
};

/// Which machine queue an event goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MachineQueue {
    /// Creation/health/metadata work.
    Machine,
    /// Deletion work (separate worker pool: no head-of-line blocking).
    Termination,
}

/// Machine add (and the last rule of update).
#[must_use]
pub fn route_machine_add(machine: &Machine, in_creation_flow: bool) -> MachineQueue {
    if machine.metadata.deletion_timestamp.is_some() && !in_creation_flow {
        MachineQueue::Termination
    } else {
        MachineQueue::Machine
    }
}

/// Machine update, rules in order; `None` = ignore. `node_in_cache`: whether the Node named by
/// the new machine's `node` label is in the target cluster's cache.
#[must_use]
pub fn route_machine_update(
    old: &Machine,
    new: &Machine,
    in_creation_flow: bool,
    node_in_cache: bool,
) -> Option<MachineQueue> {
    let old_preserve = machine_annotation(old, annotation::PRESERVE);
    let new_preserve = machine_annotation(new, annotation::PRESERVE);
    if old_preserve != new_preserve {
        return Some(MachineQueue::Machine);
    }
    if new_preserve.is_some() && phase_of(old) != phase_of(new) {
        return Some(MachineQueue::Machine);
    }
    if preserve_expiry_of(old) != preserve_expiry_of(new) {
        return Some(
            if new.metadata.deletion_timestamp.is_some() && !in_creation_flow {
                MachineQueue::Termination
            } else {
                MachineQueue::Machine
            },
        );
    }
    // Ours: a hot update whose intent the cache shows only now is finished now. A pass that
    // planned on the older cache (the retry after a conflicting write, 200 ms later) found the
    // annotation equal to the class and nothing in flight, and would not come back for 10 minutes
    // while the VM kept the previous value.
    if in_flight(new) && !in_flight(old) && new.metadata.deletion_timestamp.is_none() {
        return Some(MachineQueue::Machine);
    }
    // Ours: a creation pass that ended (its Pending status is in the cache now) after its Node had
    // already registered is followed by the health check at once. The Node's own events found no
    // machine while the `node` label was not yet in the cache, and upstream's ShortRetry (5 s)
    // was the slowest link between a Ready node and a Running machine in a large scale-up.
    if node_in_cache
        && phase_of(new) == Some(MachinePhase::Pending)
        && phase_of(old) != Some(MachinePhase::Pending)
        && new.metadata.deletion_timestamp.is_none()
    {
        return Some(MachineQueue::Machine);
    }
    if old.metadata.generation == new.metadata.generation
        && old.metadata.deletion_timestamp == new.metadata.deletion_timestamp
    {
        return None;
    }
    Some(route_machine_add(new, in_creation_flow))
}

/// Machine deletes always go to the termination queue (post-deletion reconcile).
#[must_use]
pub fn route_machine_delete() -> MachineQueue {
    MachineQueue::Termination
}

/// Whether an update should trigger the orphan-VM collector: `OutOfRange` newly in the description.
#[must_use]
pub fn triggers_orphan_collection(old: &Machine, new: &Machine) -> bool {
    !description_of(old).contains("OutOfRange") && description_of(new).contains("OutOfRange")
}

/// Key of the MachineClass queue for a machine add/delete (class name, when the kind is
/// `MachineClass`).
#[must_use]
pub fn class_key_for_machine(machine: &Machine) -> Option<String> {
    let class = machine.spec.class.as_ref()?;
    (class.kind.as_deref() == Some(mcm_api::keys::misc::MACHINE_CLASS_KIND))
        .then(|| class.name.clone())
        .flatten()
}

/// The machines to requeue when MachineClass `class` is added or updated, with their queue: every
/// machine of the class, as upstream does. Deleting ones go to the termination queue, because a
/// missing or invalid class is exactly what blocks a deletion (with LongRetry = 10 min); fixing it
/// must resume the deletion at once rather than at the next resync.
#[must_use]
pub fn route_class_change<'a>(
    class: &str,
    machines: impl IntoIterator<Item = &'a Machine>,
) -> Vec<(String, MachineQueue)> {
    machines
        .into_iter()
        .filter(|machine| class_key_for_machine(machine).as_deref() == Some(class))
        .filter_map(|machine| {
            let name = machine.metadata.name.clone()?;
            Some((name, route_machine_add(machine, false)))
        })
        .collect()
}

fn node_annotation<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

fn node_label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata
        .labels
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// Whether the node is excluded from MCM's node handling.
#[must_use]
pub fn is_not_managed(node: &Node) -> bool {
    node_annotation(node, annotation::NOT_MANAGED_BY_MCM).is_some()
}

fn has_node_finalizer(node: &Node) -> bool {
    node.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == finalizer::NODE))
}

/// Something to do on a node event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeRoute {
    /// Enqueue the node key (node controller), after the delay if given.
    EnqueueNode {
        /// Delay (MediumRetry when the finalizer is missing).
        delay: Option<crate::vocabulary::Retry>,
    },
    /// Enqueue the machine (machine queue).
    EnqueueMachine(String),
    /// Delete the Machine object (node deleted or being deleted).
    DeleteMachine(String),
}

/// The machine backing a node: exactly one machine with label `node=<node name>`.
///
/// # Errors
/// When several machines carry the label.
pub fn machine_for_node<'a, M: Borrow<Machine>>(
    node_name: &str,
    machines: &'a [M],
) -> Result<Option<&'a Machine>, String> {
    let matching: Vec<&Machine> = machines
        .iter()
        .map(Borrow::borrow)
        .filter(|m: &&Machine| m.node_name() == Some(node_name))
        .collect();
    match matching.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one)),
        many => Err(format!(
            "{} machines have label node={node_name}: {:?}",
            many.len(),
            many.iter()
                .map(|m| m.metadata.name.clone().unwrap_or_default())
                .collect::<Vec<_>>()
        )),
    }
}

/// Node add.
#[must_use]
pub fn route_node_add(node: &Node) -> Vec<NodeRoute> {
    if is_not_managed(node) {
        return Vec::new();
    }
    vec![NodeRoute::EnqueueNode { delay: None }]
}

fn taint_keys(node: &Node) -> Vec<(String, String)> {
    let mut keys: Vec<(String, String)> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|t| {
            t.iter()
                .filter(|t| taint::ESSENTIAL.contains(&t.key.as_str()))
                .map(|t| (t.key.clone(), t.effect.clone()))
                .collect()
        })
        .unwrap_or_default();
    keys.sort();
    keys
}

/// Node update; `machines` are the machines of the namespace (the lookup by `node` label happens
/// here).
#[must_use]
pub fn route_node_update<M: Borrow<Machine>>(
    old: &Node,
    new: &Node,
    machines: &[M],
) -> Vec<NodeRoute> {
    if is_not_managed(new) {
        return Vec::new();
    }
    let name = new.metadata.name.as_deref().unwrap_or("");
    let Ok(Some(machine)) = machine_for_node(name, machines) else {
        return Vec::new();
    };
    let machine_name = machine.metadata.name.clone().unwrap_or_default();
    if new.metadata.deletion_timestamp.is_some() {
        return if machine.metadata.deletion_timestamp.is_none() {
            vec![NodeRoute::DeleteMachine(machine_name)]
        } else {
            Vec::new()
        };
    }
    let mut routes = Vec::new();
    if !has_node_finalizer(new) {
        routes.push(NodeRoute::EnqueueNode {
            delay: Some(crate::vocabulary::Retry::Medium),
        });
    }
    let in_place_label_appeared =
        |key: &str| node_label(old, key).is_none() && node_label(new, key).is_some();
    let machine_conditions = machine
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let node_conditions = new
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let phase = phase_of(machine);
    let route = taint_keys(old) != taint_keys(new)
        || in_place_label_appeared(label::CANDIDATE_FOR_UPDATE)
        || in_place_label_appeared(label::SELECTED_FOR_UPDATE)
        || node_label(old, label::UPDATE_RESULT) != node_label(new, label::UPDATE_RESULT)
        || (node_conditions_changed(&machine_conditions, &node_conditions)
            && !matches!(phase, Some(MachinePhase::CrashLoopBackOff | MachinePhase::Terminating)))
        || node_annotation(old, annotation::PRESERVE) != node_annotation(new, annotation::PRESERVE)
        // Ours: the machine's own node-sync writes (the machine-name label, the last-applied
        // template and capacity) bring its next step when the cache shows them, where upstream
        // waits ShortRetry (5 s) after each: two such waits stood between a registered node and
        // a Running machine.
        || node_label(old, label::NODE_MACHINE_NAME) != node_label(new, label::NODE_MACHINE_NAME)
        || node_annotation(old, annotation::LAST_APPLIED_ANNO_LABELS_TAINTS)
            != node_annotation(new, annotation::LAST_APPLIED_ANNO_LABELS_TAINTS)
        || node_annotation(old, annotation::LAST_APPLIED_VIRTUAL_CAPACITY)
            != node_annotation(new, annotation::LAST_APPLIED_VIRTUAL_CAPACITY)
        // Ours: a user flipping the CA annotation of a preserved node gets it re-asserted promptly.
        || (preserve_expiry_of(machine).is_some()
            && node_annotation(old, annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED)
                != node_annotation(new, annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED));
    if route {
        routes.push(NodeRoute::EnqueueMachine(machine_name));
    }
    routes
}

/// Node delete: delete the owning machine (if not already deleting).
#[must_use]
pub fn route_node_delete(node: &Node, machines: &[Machine]) -> Vec<NodeRoute> {
    if is_not_managed(node) {
        return Vec::new();
    }
    let name = node.metadata.name.as_deref().unwrap_or("");
    match machine_for_node(name, machines) {
        Ok(Some(machine)) if machine.metadata.deletion_timestamp.is_none() => {
            vec![NodeRoute::DeleteMachine(
                machine.metadata.name.clone().unwrap_or_default(),
            )]
        }
        _ => Vec::new(),
    }
}

/// Node controller decision (docs/behaviour.md#node-controller).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeControllerAction {
    /// Nothing.
    Nothing,
    /// Delete the machine (the node is being deleted).
    DeleteMachine(String),
    /// Set the node finalizers to this sorted list (merge patch).
    SetFinalizers(Vec<String>),
    /// Several machines claim the node: an error (retried, rate limited).
    Error(String),
}

/// `reconcileClusterNodeKey`.
#[must_use]
pub fn plan_node_controller(node: Option<&Node>, machines: &[Machine]) -> NodeControllerAction {
    let Some(node) = node else {
        return NodeControllerAction::Nothing;
    };
    if is_not_managed(node) {
        return NodeControllerAction::Nothing;
    }
    let name = node.metadata.name.as_deref().unwrap_or("");
    let machine = match machine_for_node(name, machines) {
        Ok(Some(machine)) => machine,
        Ok(None) => return NodeControllerAction::Nothing,
        Err(error) => return NodeControllerAction::Error(error),
    };
    if node.metadata.deletion_timestamp.is_some() {
        return if machine.metadata.deletion_timestamp.is_none() {
            NodeControllerAction::DeleteMachine(machine.metadata.name.clone().unwrap_or_default())
        } else {
            NodeControllerAction::Nothing
        };
    }
    if machine.metadata.deletion_timestamp.is_none()
        && let Some(finalizers) = finalizers_with(
            node.metadata.finalizers.as_deref().unwrap_or_default(),
            finalizer::NODE,
            true,
        )
    {
        return NodeControllerAction::SetFinalizers(finalizers);
    }
    NodeControllerAction::Nothing
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::test_support::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn with_generation(m: Machine, generation: i64) -> Machine {
        let mut m = m;
        m.metadata.generation = Some(generation);
        m
    }

    #[test]
    fn machine_update_rules() {
        let old = with_generation(machine("m").with_phase(MachinePhase::Running, at(0)), 1);
        // Status-only change: ignored.
        let status_only = old.clone().with_phase(MachinePhase::Unknown, at(5));
        assert_eq!(route_machine_update(&old, &status_only, false, false), None);
        // Preserve annotation changed: machine queue.
        let annotated = old.clone().with_annotation(annotation::PRESERVE, "now");
        assert_eq!(
            route_machine_update(&old, &annotated, false, false),
            Some(MachineQueue::Machine)
        );
        // Annotated and phase changed.
        let moved = annotated.clone().with_phase(MachinePhase::Failed, at(9));
        assert_eq!(
            route_machine_update(&annotated, &moved, false, false),
            Some(MachineQueue::Machine)
        );
        // A user edits preserveExpiryTime (status only): acted on now.
        let edited = old.clone().with_preserve_expiry(Some(at(100)));
        assert_eq!(
            route_machine_update(&old, &edited, false, false),
            Some(MachineQueue::Machine)
        );
        // Generation bump: routed like add; deletion goes to termination.
        let bumped = with_generation(old.clone(), 2);
        assert_eq!(
            route_machine_update(&old, &bumped, false, false),
            Some(MachineQueue::Machine)
        );
        let deleting = with_generation(old.clone().deleting_since(at(3)), 2);
        assert_eq!(
            route_machine_update(&old, &deleting, false, false),
            Some(MachineQueue::Termination)
        );
        assert_eq!(
            route_machine_update(&old, &deleting, true, false),
            Some(MachineQueue::Machine)
        );
        assert_eq!(route_machine_delete(), MachineQueue::Termination);
        // A hot update's intent appearing in the cache (status only): machine queue.
        let updating = old.clone().with_operation(
            crate::machine::hot_update::HOT_UPDATE_INTENT,
            mcm_api::v1alpha1::MachineState::Processing,
            mcm_api::v1alpha1::MachineOperationType::Update,
            at(6),
        );
        assert_eq!(
            route_machine_update(&old, &updating, false, false),
            Some(MachineQueue::Machine)
        );
        // The creation pass's Pending status reaches the cache after the Node registered: machine
        // queue at once; without the Node, or when already Pending, the pass's own retry does.
        let fresh = with_generation(machine("m"), 1);
        let pending = fresh.clone().with_phase(MachinePhase::Pending, at(7));
        assert_eq!(
            route_machine_update(&fresh, &pending, false, true),
            Some(MachineQueue::Machine)
        );
        assert_eq!(route_machine_update(&fresh, &pending, false, false), None);
        let crashed = fresh
            .clone()
            .with_phase(MachinePhase::CrashLoopBackOff, at(6));
        assert_eq!(
            route_machine_update(&crashed, &pending, false, true),
            Some(MachineQueue::Machine)
        );
        let relabelled = pending.clone().with_annotation("a", "b");
        assert_eq!(
            route_machine_update(&pending, &relabelled, false, true),
            None
        );
        let deleting_pending = with_generation(pending.clone().deleting_since(at(8)), 1);
        assert_eq!(
            route_machine_update(&fresh, &deleting_pending, false, true),
            Some(MachineQueue::Termination)
        );
        // Still in flight on the next status change: nothing new to route.
        assert_eq!(
            route_machine_update(&updating, &updating.clone(), false, false),
            None
        );
    }

    #[test]
    fn orphan_trigger_and_class_key() {
        let old = machine("m");
        let new = old.clone().with_operation(
            "machine codes error: code = [OutOfRange] message = [2 VMs]",
            mcm_api::v1alpha1::MachineState::Failed,
            mcm_api::v1alpha1::MachineOperationType::Create,
            at(0),
        );
        assert!(triggers_orphan_collection(&old, &new));
        assert!(!triggers_orphan_collection(&new, &new));
        let mut m = machine("m");
        assert_eq!(class_key_for_machine(&m), None);
        m.spec.class = Some(mcm_api::v1alpha1::ClassSpec {
            api_group: None,
            kind: Some("MachineClass".into()),
            name: Some("c".into()),
        });
        assert_eq!(class_key_for_machine(&m), Some("c".into()));
    }

    #[test]
    fn a_class_change_requeues_every_machine_of_the_class_deleting_ones_to_termination() {
        let of_class = |name: &str, class: &str| {
            let mut m = machine(name);
            m.spec.class = Some(mcm_api::v1alpha1::ClassSpec {
                api_group: None,
                kind: Some("MachineClass".into()),
                name: Some(class.into()),
            });
            m
        };
        let machines = [
            of_class("live", "c"),
            of_class("deleting", "c").deleting_since(at(3)),
            of_class("other", "d"),
        ];
        assert_eq!(
            route_class_change("c", &machines),
            vec![
                ("live".to_owned(), MachineQueue::Machine),
                ("deleting".to_owned(), MachineQueue::Termination),
            ]
        );
    }

    #[test]
    fn node_routes() {
        let m = machine("m1")
            .with_label("node", "n1")
            .with_phase(MachinePhase::Running, at(0))
            .with_conditions(healthy_conditions());
        let machines = vec![m.clone()];
        let mut old = node("n1", healthy_conditions(), vec![]);
        old.metadata.finalizers = Some(vec![finalizer::NODE.into()]);
        // Nothing relevant changed.
        assert!(route_node_update(&old, &old.clone(), &machines).is_empty());
        // Essential taint added.
        let mut tainted = old.clone();
        tainted.spec.as_mut().unwrap().taints = Some(vec![taint(
            taint::CRITICAL_COMPONENTS_NOT_READY,
            "NoSchedule",
        )]);
        assert_eq!(
            route_node_update(&old, &tainted, &machines),
            vec![NodeRoute::EnqueueMachine("m1".into())]
        );
        // Condition change.
        let mut sick = old.clone();
        sick.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "False".into();
        assert_eq!(
            route_node_update(&old, &sick, &machines),
            vec![NodeRoute::EnqueueMachine("m1".into())]
        );
        // The node-sync steps' own writes: the next step comes at once.
        let mut named = old.clone();
        named
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(label::NODE_MACHINE_NAME.into(), "m1".into());
        assert_eq!(
            route_node_update(&old, &named, &machines),
            vec![NodeRoute::EnqueueMachine("m1".into())]
        );
        for key in [
            annotation::LAST_APPLIED_ANNO_LABELS_TAINTS,
            annotation::LAST_APPLIED_VIRTUAL_CAPACITY,
        ] {
            let mut synced = named.clone();
            synced
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(key.into(), "{}".into());
            assert_eq!(
                route_node_update(&named, &synced, &machines),
                vec![NodeRoute::EnqueueMachine("m1".into())],
                "{key}"
            );
        }
        // Other labels and annotations (a user's, the kubelet's) do not requeue the machine.
        let mut relabelled = named.clone();
        relabelled
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("team".into(), "a".into());
        assert!(route_node_update(&named, &relabelled, &machines).is_empty());
        // Missing finalizer: node requeued after MediumRetry.
        let mut bare = old.clone();
        bare.metadata.finalizers = None;
        assert_eq!(
            route_node_update(&bare, &bare.clone(), &machines),
            vec![NodeRoute::EnqueueNode {
                delay: Some(crate::vocabulary::Retry::Medium)
            }]
        );
        // Node being deleted: delete the machine.
        let mut going = old.clone();
        going.metadata.deletion_timestamp = Some(Time(at(5)));
        assert_eq!(
            route_node_update(&old, &going, &machines),
            vec![NodeRoute::DeleteMachine("m1".into())]
        );
        assert_eq!(
            route_node_delete(&old, &machines),
            vec![NodeRoute::DeleteMachine("m1".into())]
        );
        // Not managed: ignored everywhere.
        let mut unmanaged = going.clone();
        unmanaged.metadata.annotations =
            Some([(annotation::NOT_MANAGED_BY_MCM.to_owned(), "1".to_owned())].into());
        assert!(route_node_update(&old, &unmanaged, &machines).is_empty());
        assert!(route_node_delete(&unmanaged, &machines).is_empty());
        assert!(route_node_add(&unmanaged).is_empty());
        // Two machines claim the node: nothing routed.
        let twice = vec![m.clone(), machine("m2").with_label("node", "n1")];
        assert!(route_node_update(&old, &tainted, &twice).is_empty());
    }

    #[test]
    fn node_controller() {
        let m = machine("m1").with_label("node", "n1");
        let n = node("n1", vec![], vec![]);
        assert_eq!(
            plan_node_controller(Some(&n), std::slice::from_ref(&m)),
            NodeControllerAction::SetFinalizers(vec![finalizer::NODE.into()])
        );
        assert_eq!(
            plan_node_controller(Some(&n), &[]),
            NodeControllerAction::Nothing
        );
        assert_eq!(
            plan_node_controller(None, &[]),
            NodeControllerAction::Nothing
        );
        let mut deleting = n.clone();
        deleting.metadata.deletion_timestamp = Some(Time(at(1)));
        assert_eq!(
            plan_node_controller(Some(&deleting), std::slice::from_ref(&m)),
            NodeControllerAction::DeleteMachine("m1".into())
        );
        // Machine already deleting: no finalizer added.
        let gone = m.clone().deleting_since(at(0));
        assert_eq!(
            plan_node_controller(Some(&n), &[gone]),
            NodeControllerAction::Nothing
        );
        let two = vec![m.clone(), machine("m2").with_label("node", "n1")];
        assert!(matches!(
            plan_node_controller(Some(&n), &two),
            NodeControllerAction::Error(_)
        ));
    }
}
