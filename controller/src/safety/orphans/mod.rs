//! Orphan VM collection: VMs reported by the driver that no Machine accounts for, and nodes no
//! Machine accounts for.
//!
//! | Reference | Function(s) | Tests |
//! |---|---|---|
//! | §3.14 orphan VMs (ListMachines map vs machines; creating machines are never touched) | [`plan::orphan_vms`], [`plan::classify_vm`] | `plan::tests::vm_classification`, `prop_never_deletes_vms_of_creating_machines` |
//! | §3.14 nodes not managed by MCM (flag creation timeout, finalizer removal, annotation) | [`plan::orphan_nodes`] | `plan::tests::orphan_node_rules` |
//!
//! Left for the shell: ListMachines per class (an error aborts the run), DeleteMachine with a
//! synthetic machine, node patches, the 15-minute period and the triggers (machine delete,
//! `OutOfRange`, see [`crate::machine::plan::routing::triggers_orphan_collection`]).

pub mod plan;
