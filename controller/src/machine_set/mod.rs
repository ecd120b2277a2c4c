//! The MachineSet controller: claim, adopt and release machines, keep the replica count, status.
//!
//! Pure parts (no I/O, no clock: `now` is a parameter). Map of reference sections
//! (`/work/shared/reference/mcm-behaviour.md`) to code and tests:
//!
//! | Reference | Function | Tests |
//! |---|---|---|
//! | §4.3 reconcile order, finalizer, deletion | [`decide::plan`] | `decide::tests::finalizer_added_once_and_deleting_set_deletes_machines_then_releases_finalizer` |
//! | §4.3 steps 6–8 node template / config / class kind propagation | `machine_updates::sync_update` via [`decide::plan`] | `machine_updates::tests::propagates_in_place_fields_to_active_machines_only` |
//! | §4.4 manageReplicas, burst 100, freeze, scale-up-disabled | [`scaling::manage_replicas`] | `scaling::tests::scale_up_*`, `frozen_*`, `prop_*` |
//! | §4.4 slow start 1, 2, 4, … | [`scaling::slow_start_batches`] | `scaling::tests::slow_start_table`, `prop_slow_start` |
//! | §4.4 stale machines (diff, CA-marked, failed) | [`deletion::machines_to_delete`] | `deletion::tests::deletes_*`, `scaling::tests::prop_scale_down_*` |
//! | §4.5 deletion order | [`deletion::deletion_order`], [`deletion::phase_rank`] | `deletion::tests::deletion_order_*`, `scaling::tests::prop_deletion_order_consistent` |
//! | §4.6 auto-preservation, failed-machine termination | `machine_updates::auto_preservation`, [`deletion::should_failed_machine_be_terminated`] | `machine_updates::tests::auto_preserve_*`, `deletion::tests::failed_*` |
//! | §4.7 claim / adopt / release (real release, Q9) | [`claim::claim`] | `claim::tests::claim_table` |
//! | §4.8 status and write suppression | [`status::machine_set_status`], [`status::status_needs_update`] | `status::tests::*` |
//! | §4.9 machine from template | [`scaling::machine_from_template`] | `scaling::tests::template_*` |
//! | §4.4 terminateMachines status | [`deletion::terminating_status`] | `deletion::tests::terminating_status_*` |
//! | §4.1/Q5 expectations (consulted here, unlike upstream) | [`expectations::Expectations`] | `expectations::tests::*` |
//! | §4.2/§5.1 event routing (machine → sets, set → deployments) | [`routing::owners_to_sync`] | `routing::tests::routing_table` |
//! | §11 MachineSet validation | [`validation::validate`] | `validation::tests::invalid_*` |
//! | §4.1–§4.9 shell: watches, routing, execution, expectations, status, §9.2 gauges | [`reconcile::run`] | `tests/it/machine_set.rs` |

pub mod context;
pub mod reconcile;
