//! The MachineSet controller: claim, adopt and release machines, keep the replica count, status.
//!
//! Pure parts (no I/O, no clock: `now` is a parameter). Map of reference sections
//! (`docs/behaviour.md`) to code and tests:
//!
//! | Reference | Function | Tests |
//! |---|---|---|
//! | docs/behaviour.md#machine-set-reconcile reconcile order, finalizer, deletion | [`mcm_decisions::machine_set::decide::plan`] | `decide::tests::finalizer_added_once_and_deleting_set_deletes_machines_then_releases_finalizer` |
//! | docs/behaviour.md#machine-set-reconcile steps 6–8 node template / config / class kind propagation | `machine_updates::sync_update` via [`mcm_decisions::machine_set::decide::plan`] | `machine_updates::tests::propagates_in_place_fields_to_active_machines_only` |
//! | docs/behaviour.md#manage-replicas manageReplicas, burst 100, freeze, scale-up-disabled | [`mcm_decisions::machine_set::scaling::manage_replicas`] | `scaling::tests::scale_up_*`, `frozen_*`, `prop_*` |
//! | docs/behaviour.md#manage-replicas slow start 1, 2, 4, … | [`mcm_decisions::machine_set::scaling::slow_start_batches`] | `scaling::tests::slow_start_table`, `prop_slow_start` |
//! | docs/behaviour.md#manage-replicas stale machines (diff, CA-marked, failed) | [`mcm_decisions::machine_set::deletion::machines_to_delete`] | `deletion::tests::deletes_*`, `scaling::tests::prop_scale_down_*` |
//! | docs/behaviour.md#deletion-order deletion order | [`mcm_decisions::machine_set::deletion::deletion_order`], [`mcm_decisions::machine_set::deletion::phase_rank`] | `deletion::tests::deletion_order_*`, `scaling::tests::prop_deletion_order_consistent` |
//! | docs/behaviour.md#auto-preservation auto-preservation, failed-machine termination | `machine_updates::auto_preservation`, [`mcm_decisions::machine_set::deletion::should_failed_machine_be_terminated`] | `machine_updates::tests::auto_preserve_*`, `deletion::tests::failed_*` |
//! | docs/behaviour.md#claim claim / adopt / release (real release, docs/behaviour.md#q9) | [`mcm_decisions::machine_set::claim::claim`] | `claim::tests::claim_table` |
//! | docs/behaviour.md#machine-set-status status and write suppression | [`mcm_decisions::machine_set::status::machine_set_status`], [`mcm_decisions::machine_set::status::status_needs_update`] | `status::tests::*` |
//! | docs/behaviour.md#machine-from-template machine from template | [`mcm_decisions::machine_set::scaling::machine_from_template`] | `scaling::tests::template_*` |
//! | docs/behaviour.md#manage-replicas terminateMachines status | [`mcm_decisions::machine_set::deletion::terminating_status`] | `deletion::tests::terminating_status_*` |
//! | docs/behaviour.md#manager-process, docs/behaviour.md#q5 expectations (consulted here, unlike upstream) | [`mcm_decisions::machine_set::expectations::Expectations`] | `expectations::tests::*` |
//! | docs/behaviour.md#machine-set-routing, docs/behaviour.md#deployment-routing event routing (machine → sets, set → deployments) | [`mcm_decisions::machine_set::routing::owners_to_sync`] | `routing::tests::routing_table` |
//! | docs/behaviour.md#validation MachineSet validation | [`mcm_decisions::machine_set::validation::validate`] | `validation::tests::invalid_*` |
//! | docs/behaviour.md#machine-set shell: watches, routing, execution, expectations, status, docs/behaviour.md#metrics-mcm gauges | [`reconcile::run`] | `tests/it/machine_set.rs` |

pub mod context;
pub mod reconcile;
