//! The MachineSet controller: claim, adopt and release machines, keep the replica count, status.
//!
//! Pure parts (no I/O, no clock: `now` is a parameter). Map of reference sections
//! (`/work/shared/reference/mcm-behaviour.md`) to code and tests:
//!
//! | Reference | Function | Tests |
//! |---|---|---|
//! | §4.3 reconcile order, finalizer, deletion | [`plan::plan`] | `plan::tests::deleting_*`, `finalizer_added_once` |
//! | §4.3 steps 6–8 node template / config / class kind propagation | `plan::sync_update` via [`plan::plan`] | `plan::tests::propagates_in_place_fields` |
//! | §4.4 manageReplicas, burst 100, freeze, scale-up-disabled | [`plan::manage_replicas`] | `plan::tests::scale_up_*`, `frozen_*`, `prop_*` |
//! | §4.4 slow start 1, 2, 4, … | [`plan::slow_start_batches`] | `plan::tests::slow_start_table`, `prop_slow_start` |
//! | §4.4 stale machines (diff, CA-marked, failed) | [`plan::machines_to_delete`] | `plan::tests::deletes_*`, `prop_scale_down_*` |
//! | §4.5 deletion order | [`plan::deletion_order`], [`plan::phase_rank`] | `plan::tests::deletion_order_*`, `prop_preserved_last` |
//! | §4.6 auto-preservation, failed-machine termination | `plan::auto_preservation`, [`plan::should_failed_machine_be_terminated`] | `plan::tests::auto_preserve_*`, `failed_*` |
//! | §4.7 claim / adopt / release (real release, Q9) | [`claim::claim`] | `claim::tests::claim_table` |
//! | §4.8 status and write suppression | [`plan::machine_set_status`], [`plan::status_needs_update`] | `plan::tests::status_*` |
//! | §4.9 machine from template | [`plan::machine_from_template`] | `plan::tests::template_*` |
//! | §4.4 terminateMachines status | [`plan::terminating_status`] | `plan::tests::terminating_status_*` |
//! | §4.1/Q5 expectations (consulted here, unlike upstream) | [`expectations::Expectations`] | `expectations::tests::*` |
//! | §4.2/§5.1 event routing (machine → sets, set → deployments) | [`routing::owners_to_sync`] | `routing::tests::routing_table` |
//! | §11 MachineSet validation | [`plan::validate`] | `plan::tests::invalid_*` |
//! | §4.1–§4.9 shell: watches, routing, execution, expectations, status, §9.2 gauges | [`reconcile::run`] | `tests/it/machine_set.rs` |

pub mod context;
pub mod reconcile;
