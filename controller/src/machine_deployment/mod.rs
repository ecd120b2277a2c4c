//! The MachineDeployment controller: revisions, rollouts (RollingUpdate, Recreate), scaling,
//! pause, rollback, progress, status and history cleanup.
//!
//! Pure parts (no I/O, no clock). Map of reference sections
//! (`/work/shared/reference/mcm-behaviour.md`) to code and tests:
//!
//! | Reference | Function | Tests |
//! |---|---|---|
//! | §5.2 reconcile order, finalizer, deleting, selecting-all | [`decide::plan`] | `decide::tests::deleting_*`, `selecting_all_*` |
//! | §5.3 new/old sets, EqualIgnoreHash (Q2), revisions | [`revision::find_new_machine_set`], [`revision::equal_ignore_hash`], [`revision::sync_new_machine_set`], [`revision::bump_revision`] | `revision::tests::*`, `new_machine_set::tests::in_place_fields_*` |
//! | §5.3 legacy MachineSets without the hash label in their selector | [`hash_label_migration::next_step`] | `hash_label_migration::tests::*`, `it::machine_deployment::legacy_machine_sets_are_migrated_to_the_hash_label` |
//! | §5.3 naming `<md>-<5 chars>` and collisionCount (Q1) | [`revision::template_hash`], [`new_machine_set::create_conflict`], [`new_machine_set::create_failure`] | `revision::tests::hash_is_pinned_across_versions`, `new_machine_set::tests::collision_*`, `create_failure_*` |
//! | §5.3 fenceposts (surge up, unavailable down) | [`fencepost::resolve_fenceposts`], [`fencepost::max_surge`], [`fencepost::max_unavailable`] | `fencepost::tests::fencepost_table` |
//! | §5.3 NewISNewReplicas | [`new_machine_set::new_machine_set_replicas`] | `new_machine_set::tests::new_replicas_table` |
//! | §5.4 isScalingEvent, scale, proportional scaling | [`scaling::is_scaling_event`], [`scaling::proportional_scale_in`] | `scaling::tests::proportional_*`, `prop_proportional_conserves_total` |
//! | §5.5 RollingUpdate | `rolling` (`Work::rolling`) | `rolling::tests::rolling_*`, `decide::tests::sim::prop_rolling_update_invariants` |
//! | §5.6 Recreate | `recreate` (`Work::recreate`) | `recreate::tests::recreate_*`, `decide::tests::sim::prop_recreate_never_mixes` |
//! | §5.7 rollback | `rollback` (`Work::rollback`) | `rollback::tests::rollback_*`, `decide::tests::sim::rollback_restores_previous_template` |
//! | §5.8 pause, progress deadline | [`status::paused_conditions`], [`status::rollout_status`], `progress` (`Work::rollout_status`) | `scaling::tests::paused_*`, `progress::tests::progress_deadline_*` |
//! | §5.10 trigger-deletion-by-mcm | [`autoscaler::stamp_trigger_entries`], [`autoscaler::apply_trigger_entries`] | `autoscaler::tests::*`, `decide::tests::trigger_deletion_*` |
//! | §5.5 steps 2, 3, 6 PreferNoSchedule taints, CA annotations | `node_marks` (`Work::taint_old_sets`, `autoscaler_annotations_for_rollout`), `cleanup` (`Work::on_complete`) | `rolling::tests::rolling_creates_named_new_set_with_surge_and_taints_old_nodes` |
//! | §5.11 status | [`status::calculate_status`], [`status::status_update_required`] | `status::tests::status_*` |
//! | §5.12 revisionHistoryLimit | `cleanup` (`Work::cleanup`) | `cleanup::tests::cleanup_*` |
//! | §5.9 InPlaceUpdate (Auto and Manual) | `in_place` (`Work::in_place`), [`types::NodeView`] | `in_place::tests::in_place_*`, `decide::tests::sim::prop_in_place_update_invariants` |

pub mod context;
pub mod reconcile;
