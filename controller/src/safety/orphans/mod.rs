//! Orphan VM collection: VMs reported by the driver that no Machine accounts for, and nodes no
//! Machine accounts for.
//!
//! | Reference | Function(s) | Tests |
//! |---|---|---|
//! | docs/behaviour.md#machine-safety orphan VMs (ListMachines map vs machines; creating machines are never touched) | [`mcm_decisions::safety::orphans::orphan_vms`], [`mcm_decisions::safety::orphans::classify_vm`] | `plan::tests::vm_classification`, `prop_never_deletes_vms_of_creating_machines` |
//! | docs/behaviour.md#machine-safety nodes not managed by MCM (flag creation timeout, finalizer removal, annotation) | [`mcm_decisions::safety::orphans::orphan_nodes`] | `plan::tests::orphan_node_rules` |
//!
//! | docs/behaviour.md#machine-safety ListMachines per class, DeleteMachine with a synthetic machine, `mcm_machine_stale_machines` | [`collect::collect`] | `it::safety::orphan_vm_is_collected_and_vms_of_creating_or_owning_machines_are_kept`, `a_failing_list_machines_skips_only_its_class` |
//! | docs/behaviour.md#machine-safety triggers: period, machine delete, `OutOfRange` ([`mcm_decisions::machine::routing::triggers_orphan_collection`]) | [`crate::safety::reconcile::run_orphans`] | `it::safety::deleting_a_machine_triggers_the_collection_of_its_vm` |
//! | docs/behaviour.md#machine-safety orphan node patches | [`collect::collect`] | `it::safety::nodes_without_machines_are_marked_unmanaged_and_unmarked_when_claimed` |
//!
//! Deviation: a class whose Secret or ListMachines fails is skipped; the others are still checked
//! (upstream aborts the whole run).

pub mod collect;
