//! Upstream conformance tables of `machine_safety_test.go` (see `docs/upstream-conformance.md`):
//! `#machine_safety` `##reconcileClusterMachineSafetyAPIServer` and `#Event Handling functions`
//! `##updateMachineToSafety` / `##deleteMachineToSafety`.

#![allow(clippy::unwrap_used)]

use jiff::Timestamp;
use mcm_api::v1alpha1::{LastOperation, Machine, MachineStatus};

use crate::machine::routing::triggers_orphan_collection;
use crate::safety::apiserver::{ApiServerSafetySettings, FreezeState, plan_apiserver_check};
use crate::test_support::{at, machine};

/// How long the API servers have been seen unreachable before the check (upstream's
/// `apiServerInactiveDuration`: zero, five seconds, five minutes against the 30s timeout).
#[derive(Clone, Copy, Debug)]
enum Inactive {
    /// The timer is not running.
    NotStarted,
    /// Started 5s ago.
    Started,
    /// Started 5m ago.
    Elapsed,
}

/// `(control up, target up, inactive timer, frozen before, frozen after)`.
const API_SERVER: &[(bool, bool, Inactive, bool, bool)] = &[
    (true, true, Inactive::NotStarted, false, false),
    (true, true, Inactive::NotStarted, true, false),
    (true, true, Inactive::Started, false, false),
    (true, true, Inactive::Started, true, false),
    (true, true, Inactive::Elapsed, false, false),
    (true, true, Inactive::Elapsed, true, false),
    (true, false, Inactive::NotStarted, false, false),
    (true, false, Inactive::NotStarted, true, true),
    (true, false, Inactive::Started, false, false),
    (true, false, Inactive::Started, true, true),
    (true, false, Inactive::Elapsed, false, true),
    (true, false, Inactive::Elapsed, true, true),
    (false, true, Inactive::NotStarted, false, false),
    (false, true, Inactive::NotStarted, true, true),
    (false, true, Inactive::Started, false, false),
    (false, true, Inactive::Started, true, true),
    (false, true, Inactive::Elapsed, false, true),
    (false, true, Inactive::Elapsed, true, true),
    (false, false, Inactive::NotStarted, false, false),
    (false, false, Inactive::NotStarted, true, true),
    (false, false, Inactive::Started, false, false),
    (false, false, Inactive::Started, true, true),
    (false, false, Inactive::Elapsed, false, true),
    (false, false, Inactive::Elapsed, true, true),
];

fn reachable(up: bool) -> &'static str {
    if up { "Reachable" } else { "UnReachable" }
}

#[test]
fn reconcile_cluster_machine_safety_api_server_table() {
    let now = at(1_000);
    for (control, target, inactive, before, after) in API_SERVER {
        // Upstream's entry names, rebuilt from the row.
        let timer = match inactive {
            Inactive::NotStarted => "Inactive",
            Inactive::Started => "Started",
            Inactive::Elapsed => "Elapsed",
        };
        let entry = format!(
            "Control APIServer: {}, Target APIServer: {}, Inactive Timer: {timer}, Pre-Frozen: {before} = Post-Frozen: {after}",
            reachable(*control),
            reachable(*target)
        );
        let down_since: Option<Timestamp> = match inactive {
            Inactive::NotStarted => None,
            Inactive::Started => Some(at(1_000 - 5)),
            Inactive::Elapsed => Some(at(1_000 - 300)),
        };
        let state = FreezeState {
            frozen: *before,
            down_since,
        };
        let decision = plan_apiserver_check(
            state,
            *control,
            *target,
            ApiServerSafetySettings::default(),
            now,
        );
        assert_eq!(decision.state.frozen, *after, "{entry}");
        // Unfreezing resets the health timeouts of Unknown machines (upstream: the Unknown test
        // machine is reset to Running) and re-enqueues every machine.
        assert_eq!(
            decision.reset_unknown_machines,
            *before && !*after,
            "{entry}"
        );
    }
}

fn with_description(description: &str) -> Machine {
    let mut m = machine("testmachine");
    m.status = Some(MachineStatus {
        last_operation: Some(LastOperation {
            description: Some(description.to_owned()),
            ..LastOperation::default()
        }),
        ..MachineStatus::default()
    });
    m
}

/// `(entry, old lastOperation description, new lastOperation description, orphan collection
/// triggered?)`.
const MULTIPLE_VMS_NOT_FOUND: &str = "Cloud provider message - machine codes error: code = [NotFound] message = [AWS plugin is returning multiple VM instances backing this machine object. IDs for all backing VMs - [i-1234abcd i-5678efgh]";
const MULTIPLE_VMS_OUT_OF_RANGE: &str = "Cloud provider message - machine codes error: code = [OutOfRange] message = [AWS plugin is returning multiple VM instances backing this machine object. IDs for all backing VMs - [i-1234abcd i-5678efgh]";

/// `(entry, old lastOperation description, new lastOperation description, orphan collection
/// triggered?)`.
const UPDATE_TO_SAFETY: &[(&str, &str, &str, bool)] = &[
    (
        "shouldn't enqueue machine key if OutOfRange error not there in last reconciliation",
        "",
        "",
        false,
    ),
    (
        "shouldn't enqueue machine key if no OutOfRange error in last reconciliation",
        "",
        MULTIPLE_VMS_NOT_FOUND,
        false,
    ),
    (
        "should enqueue machine key if OutOfRange error in last reconciliation",
        "",
        MULTIPLE_VMS_OUT_OF_RANGE,
        true,
    ),
    (
        "shouldn't enqueue if new machine obj doesn't have OutOfRange error which old machine obj had",
        MULTIPLE_VMS_OUT_OF_RANGE,
        "Machine abc successfully joined the cluster",
        false,
    ),
];

#[test]
fn update_machine_to_safety_table() {
    for (entry, old, new, expected) in UPDATE_TO_SAFETY {
        assert_eq!(
            triggers_orphan_collection(&with_description(old), &with_description(new)),
            *expected,
            "{entry}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// machine_safety_test.go: #Orphan VM collection / ##reconcileClusterMachineSafetyOrphanVMs
// ---------------------------------------------------------------------------------------------

/// `(entry, machine "testmachine_1" (phase, providerID) if it exists, VM deleted?)`; the provider
/// lists one VM `testmachine-ip1` named `testmachine_1`.
#[allow(clippy::type_complexity)]
const ORPHAN_VMS: &[(&str, Option<(&str, Option<&str>)>, bool)] = &[
    ("machine object not found", None, true),
    (
        "machine object in CrashLoopBackOff state,so machine should NOT be deleted",
        Some(("CrashLoopBackOff", None)),
        false,
    ),
    // Documented deviation: upstream deletes the VM of a Running machine without a stored
    // providerID; ours keeps it, as the machine may still be recording its creation (the
    // providerID is written after CreateMachine returns). The entry's intent — a Running
    // machine that refers to another VM loses this one — holds: see the next row.
    (
        "machine object in Running state but doesn't refer to machine, so machine should be deleted",
        Some(("Running", None)),
        false,
    ),
    (
        "machine object in Running state but doesn't refer to machine, so machine should be deleted (machine has another providerID)",
        Some(("Running", Some("testmachine-ip2"))),
        true,
    ),
];

#[test]
fn reconcile_cluster_machine_safety_orphan_vms_table() {
    use crate::safety::orphans::{OrphanVm, orphan_vms};
    use crate::test_support::MachineExt;
    let listed = std::collections::BTreeMap::from([(
        "testmachine-ip1".to_owned(),
        "testmachine_1".to_owned(),
    )]);
    for (entry, existing, deleted) in ORPHAN_VMS {
        let machines: Vec<Machine> = existing
            .iter()
            .map(|(phase, provider_id)| {
                let mut m = machine("testmachine_1")
                    .with_phase(mcm_api::v1alpha1::MachinePhase::from(*phase), at(0));
                if let Some(id) = provider_id {
                    m = m.with_provider_id(id);
                }
                m
            })
            .collect();
        let expected: Vec<OrphanVm> = if *deleted {
            vec![OrphanVm {
                provider_id: "testmachine-ip1".to_owned(),
                machine_name: "testmachine_1".to_owned(),
            }]
        } else {
            Vec::new()
        };
        assert_eq!(orphan_vms(&listed, &machines), expected, "{entry}");
    }
}

// ---------------------------------------------------------------------------------------------
// machine_safety_test.go: #AnnotateNodesUnmanagedByMCM / ##table
// ---------------------------------------------------------------------------------------------

struct UnmanagedRow {
    entry: &'static str,
    /// Minutes since test-node-0 was created (`None`: no creation timestamp).
    created_minutes_ago: Option<i64>,
    annotated: bool,
    mcm_finalizer: bool,
    /// A machine names test-node-0.
    has_machine: bool,
    /// test-node-0's annotation `not-managed-by-mcm` after the pass.
    annotated_after: bool,
    /// test-node-0's finalizers after the pass, when changed.
    finalizers_after: Option<Vec<String>>,
}

#[test]
fn annotate_nodes_unmanaged_by_mcm_table() {
    use crate::safety::orphans::{OrphanNodeAction, orphan_nodes};
    use mcm_api::duration::Duration;
    use mcm_api::keys::{annotation, finalizer, label};
    let rows = [
        UnmanagedRow {
            entry: "Annotate node object when creation time is older than machineCreationTimeout (21mins old)",
            created_minutes_ago: Some(21),
            annotated: false,
            mcm_finalizer: false,
            has_machine: false,
            annotated_after: true,
            finalizers_after: None,
        },
        UnmanagedRow {
            entry: "Don't annotate node object when creation time is less than machineCreationTimeout (19mins old)",
            created_minutes_ago: Some(19),
            annotated: false,
            mcm_finalizer: false,
            has_machine: false,
            annotated_after: false,
            finalizers_after: None,
        },
        UnmanagedRow {
            entry: "Node already has NotManagedByMCM annotation",
            created_minutes_ago: None,
            annotated: true,
            mcm_finalizer: false,
            has_machine: false,
            annotated_after: true,
            finalizers_after: None,
        },
        UnmanagedRow {
            entry: "Annotate orphan node and remove its MCM finalizer",
            created_minutes_ago: Some(21),
            annotated: false,
            mcm_finalizer: true,
            has_machine: false,
            annotated_after: true,
            finalizers_after: Some(Vec::new()),
        },
        UnmanagedRow {
            entry: "Node incorrectly assigned NotManagedByMCM annotation",
            created_minutes_ago: None,
            annotated: true,
            mcm_finalizer: false,
            has_machine: true,
            annotated_after: false,
            finalizers_after: None,
        },
    ];
    let now = at(10_000);
    for row in rows {
        let entry = row.entry;
        let mut node0 = crate::test_support::node("test-node-0", Vec::new(), Vec::new());
        node0.metadata.creation_timestamp = row.created_minutes_ago.map(|minutes| {
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(10_000 - minutes * 60))
        });
        if row.annotated {
            node0.metadata.annotations =
                Some([(annotation::NOT_MANAGED_BY_MCM.to_owned(), "1".to_owned())].into());
        }
        if row.mcm_finalizer {
            node0.metadata.finalizers = Some(vec![finalizer::NODE.to_owned()]);
        }
        let node1 = crate::test_support::node("test-node-1", Vec::new(), Vec::new());
        let node2 = crate::test_support::node("test-node-2", Vec::new(), Vec::new());
        let owner = |name: &str, node: &str| {
            use crate::test_support::MachineExt;
            machine(name).with_label(label::NODE, node)
        };
        let mut machines = vec![
            owner("testmachine_1", "test-node-1"),
            owner("testmachine_2", "test-node-2"),
            owner("testmachine_3", "test-node-2"),
        ];
        if row.has_machine {
            machines.push(owner("testmachine_0", "test-node-0"));
        }
        let actions = orphan_nodes(
            &[node0, node1, node2],
            &machines,
            Duration::from_mins(20),
            now,
        );
        // Only test-node-0 is ever touched: test-node-1 has one machine, test-node-2 two.
        let mut annotated = row.annotated;
        let mut finalizers = None;
        for action in &actions {
            match action {
                OrphanNodeAction::MarkUnmanaged {
                    node,
                    finalizers: after,
                    annotate,
                } => {
                    assert_eq!(node, "test-node-0", "{entry}");
                    annotated |= *annotate;
                    finalizers.clone_from(after);
                }
                OrphanNodeAction::RemoveUnmanagedAnnotation { node } => {
                    assert_eq!(node, "test-node-0", "{entry}");
                    annotated = false;
                }
            }
        }
        assert_eq!(annotated, row.annotated_after, "{entry}: {actions:?}");
        assert_eq!(finalizers, row.finalizers_after, "{entry}");
    }
}
