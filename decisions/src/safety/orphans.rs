//! Orphan collection (docs/behaviour.md#machine-safety): VMs the driver lists that no Machine accounts for, and Nodes no
//! Machine accounts for.
//!
//! A VM is never deleted while its machine may still be creating it: phase "" or
//! CrashLoopBackOff, no providerID yet, or the create intent recorded
//! ([`crate::machine::creation::has_create_intent`]).

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use mcm_api::duration::Duration;
use mcm_api::keys::{annotation, finalizer, value};
use mcm_api::v1alpha1::{Machine, MachinePhase};

use crate::machine::creation::has_create_intent;
use crate::vocabulary::{add, phase_of, provider_id_of};

/// A VM to delete through the driver with a synthetic machine
/// `{name, namespace = class namespace, spec.providerID}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrphanVm {
    /// The VM's providerID.
    pub provider_id: String,
    /// The machine name the driver reported.
    pub machine_name: String,
}

/// Why a listed VM is kept (for logs and tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepReason {
    /// Its machine has this providerID.
    Owned,
    /// Its machine is still being created.
    Creating,
}

/// Decision for one listed VM.
#[must_use]
pub fn classify_vm(provider_id: &str, machine: Option<&Machine>) -> Option<KeepReason> {
    let machine = machine?;
    if provider_id_of(machine) == Some(provider_id) {
        return Some(KeepReason::Owned);
    }
    let creating = matches!(
        phase_of(machine),
        None | Some(MachinePhase::CrashLoopBackOff)
    ) || provider_id_of(machine).is_none()
        || has_create_intent(machine);
    creating.then_some(KeepReason::Creating)
}

/// VMs to delete from one class's `ListMachines` answer (providerID → machine name);
/// `machines` are the machines of the control namespace (cache).
#[must_use]
pub fn orphan_vms<M: Borrow<Machine>>(
    listed: &BTreeMap<String, String>,
    machines: &[M],
) -> Vec<OrphanVm> {
    let by_name: BTreeMap<&str, &Machine> = machines
        .iter()
        .map(Borrow::borrow)
        .filter_map(|m| m.metadata.name.as_deref().map(|name| (name, m)))
        .collect();
    listed
        .iter()
        .filter(|(provider_id, name)| {
            classify_vm(provider_id, by_name.get(name.as_str()).copied()).is_none()
        })
        .map(|(provider_id, name)| OrphanVm {
            provider_id: provider_id.clone(),
            machine_name: name.clone(),
        })
        .collect()
}

/// What to do with a node in the orphan-node pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OrphanNodeAction {
    /// No machine and older than the creation timeout: remove MCM's node finalizer (sorted
    /// remaining list, merge patch) and annotate `not-managed-by-mcm: "1"` if absent.
    MarkUnmanaged {
        /// Node name.
        node: String,
        /// Finalizers after removing MCM's, when it was present.
        finalizers: Option<Vec<String>>,
        /// Whether the annotation must be added.
        annotate: bool,
    },
    /// A machine exists again: remove the annotation.
    RemoveUnmanagedAnnotation {
        /// Node name.
        node: String,
    },
}

/// `AnnotateNodesUnmanagedByMCM`: nodes without a machine (label `node=<name>`) older than the
/// *flag* creation timeout are marked not managed; marked nodes that have a machine again are
/// unmarked. Nodes claimed by several machines are skipped (logged by the shell).
#[must_use]
pub fn orphan_nodes<N: Borrow<Node>, M: Borrow<Machine>>(
    nodes: &[N],
    machines: &[M],
    flag_creation_timeout: Duration,
    now: Timestamp,
) -> Vec<OrphanNodeAction> {
    // Counted once: a scan of every machine per node made each pass O(nodes × machines), most
    // of the manager's CPU while 5,000 machines were deleted (docs/performance.md).
    let mut owners_by_node: HashMap<&str, usize> = HashMap::new();
    for node_name in machines
        .iter()
        .filter_map(|machine| machine.borrow().node_name())
    {
        *owners_by_node.entry(node_name).or_default() += 1;
    }
    let mut actions = Vec::new();
    for node in nodes.iter().map(Borrow::borrow) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let owners = owners_by_node.get(name.as_str()).copied().unwrap_or(0);
        let annotated = node
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(annotation::NOT_MANAGED_BY_MCM));
        match owners {
            0 => {
                let created = node
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map_or(now, |t| t.0);
                if add(created, flag_creation_timeout) > now {
                    continue;
                }
                let current = node.metadata.finalizers.clone().unwrap_or_default();
                let finalizers = current.iter().any(|f| f == finalizer::NODE).then(|| {
                    let mut rest: Vec<String> = current
                        .into_iter()
                        .filter(|f| f != finalizer::NODE)
                        .collect();
                    rest.sort();
                    rest
                });
                if finalizers.is_some() || !annotated {
                    actions.push(OrphanNodeAction::MarkUnmanaged {
                        node: name,
                        finalizers,
                        annotate: !annotated,
                    });
                }
            }
            1 if annotated => {
                actions.push(OrphanNodeAction::RemoveUnmanagedAnnotation { node: name })
            }
            _ => {}
        }
    }
    actions
}

/// The annotation value written on orphan nodes.
pub const NOT_MANAGED_VALUE: &str = value::NOT_MANAGED_BY_MCM;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::machine::creation::CREATE_INTENT_DESCRIPTION;
    use crate::test_support::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use mcm_api::v1alpha1::{MachineOperationType, MachineState};
    use proptest::prelude::*;

    #[test]
    fn vm_classification() {
        let machines = vec![
            machine("owned")
                .with_provider_id("p1")
                .with_phase(MachinePhase::Running, at(0)),
            machine("replaced")
                .with_provider_id("p-new")
                .with_phase(MachinePhase::Running, at(0)),
            machine("new"),
            machine("clbo")
                .with_provider_id("p-old")
                .with_phase(MachinePhase::CrashLoopBackOff, at(0)),
            machine("intent")
                .with_provider_id("p-x")
                .with_phase(MachinePhase::Failed, at(0))
                .with_operation(
                    CREATE_INTENT_DESCRIPTION,
                    MachineState::Processing,
                    MachineOperationType::Create,
                    at(0),
                ),
        ];
        let listed = BTreeMap::from([
            ("p1".to_owned(), "owned".to_owned()),
            ("p2".to_owned(), "replaced".to_owned()),
            ("p3".to_owned(), "new".to_owned()),
            ("p4".to_owned(), "clbo".to_owned()),
            ("p5".to_owned(), "intent".to_owned()),
            ("p6".to_owned(), "vanished".to_owned()),
        ]);
        let orphans = orphan_vms(&listed, &machines);
        assert_eq!(
            orphans,
            vec![
                OrphanVm {
                    provider_id: "p2".into(),
                    machine_name: "replaced".into()
                },
                OrphanVm {
                    provider_id: "p6".into(),
                    machine_name: "vanished".into()
                },
            ]
        );
    }

    #[test]
    fn orphan_node_rules() {
        let mut old = node("old", vec![], vec![]);
        old.metadata.finalizers = Some(vec!["z".into(), finalizer::NODE.into(), "a".into()]);
        let young = {
            let mut n = node("young", vec![], vec![]);
            n.metadata.creation_timestamp = Some(Time(at(1000)));
            n
        };
        let mut marked_owned = node("owned", vec![], vec![]);
        marked_owned.metadata.annotations =
            Some([(annotation::NOT_MANAGED_BY_MCM.to_owned(), "1".to_owned())].into());
        let machines = vec![machine("m").with_label("node", "owned")];
        let actions = orphan_nodes(
            &[old, young, marked_owned.clone()],
            &machines,
            Duration::from_mins(20),
            at(1300),
        );
        assert_eq!(
            actions,
            vec![
                OrphanNodeAction::MarkUnmanaged {
                    node: "old".into(),
                    finalizers: Some(vec!["a".into(), "z".into()]),
                    annotate: true
                },
                OrphanNodeAction::RemoveUnmanagedAnnotation {
                    node: "owned".into()
                },
            ]
        );
        // Already marked, no finalizer: nothing more to do.
        let mut done = marked_owned;
        done.metadata.name = Some("done".into());
        assert!(orphan_nodes(&[done], &machines, Duration::from_mins(20), at(1300)).is_empty());
    }

    proptest! {
        /// A VM whose machine is still being created (phase "" or CrashLoopBackOff) is
        /// never selected for deletion, whatever providerIDs are involved.
        #[test]
        fn prop_never_deletes_vms_of_creating_machines(
            phase in prop_oneof![Just(None), Just(Some(MachinePhase::CrashLoopBackOff)), Just(Some(MachinePhase::Running))],
            machine_pid in proptest::option::of("[a-c]"),
            listed_pid in "[a-c]",
        ) {
            let mut m = machine("m");
            if let Some(phase) = phase.clone() { m = m.with_phase(phase, at(0)); }
            if let Some(pid) = &machine_pid { m = m.with_provider_id(pid); }
            let machines = vec![m];
            let listed = BTreeMap::from([(listed_pid.clone(), "m".to_owned())]);
            let orphans = orphan_vms(&listed, &machines);
            let creating = phase != Some(MachinePhase::Running) || machine_pid.is_none();
            if creating || machine_pid.as_deref() == Some(listed_pid.as_str()) {
                prop_assert!(orphans.is_empty());
            } else {
                prop_assert_eq!(orphans.len(), 1);
            }
        }
    }
}
