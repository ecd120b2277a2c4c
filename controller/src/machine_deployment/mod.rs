//! The MachineDeployment controller: revisions, rollouts (RollingUpdate, Recreate), scaling,
//! pause, rollback, progress, status and history cleanup.
//!
//! Pure parts (no I/O, no clock). Map of reference sections
//! (`docs/behaviour.md`) to code and tests:
//!
//! | Reference | Function | Tests |
//! |---|---|---|
//! | docs/behaviour.md#deployment-reconcile reconcile order, finalizer, deleting, selecting-all | [`decide::plan`] | `decide::tests::deleting_*`, `selecting_all_*` |
//! | docs/behaviour.md#revisions new/old sets, EqualIgnoreHash (docs/behaviour.md#q2), revisions | [`revision::find_new_machine_set`], [`revision::equal_ignore_hash`], [`revision::sync_new_machine_set`], [`revision::bump_revision`] | `revision::tests::*`, `new_machine_set::tests::in_place_fields_*` |
//! | docs/behaviour.md#revisions legacy MachineSets without the hash label in their selector | [`hash_label_migration::next_step`] | `hash_label_migration::tests::*`, `it::machine_deployment::legacy_machine_sets_are_migrated_to_the_hash_label` |
//! | docs/behaviour.md#revisions naming `<md>-<5 chars>` and collisionCount (docs/behaviour.md#q1) | [`revision::template_hash`], [`new_machine_set::create_conflict`], [`new_machine_set::create_failure`] | `revision::tests::hash_is_pinned_across_versions`, `new_machine_set::tests::collision_*`, `create_failure_*` |
//! | docs/behaviour.md#revisions fenceposts (surge up, unavailable down) | [`fencepost::resolve_fenceposts`], [`fencepost::max_surge`], [`fencepost::max_unavailable`] | `fencepost::tests::fencepost_table` |
//! | docs/behaviour.md#revisions NewISNewReplicas | [`new_machine_set::new_machine_set_replicas`] | `new_machine_set::tests::new_replicas_table` |
//! | docs/behaviour.md#scaling isScalingEvent, scale, proportional scaling | [`scaling::is_scaling_event`], [`scaling::proportional_scale_in`] | `scaling::tests::proportional_*`, `prop_proportional_conserves_total` |
//! | docs/behaviour.md#rolling-update RollingUpdate | `rolling` (`Work::rolling`) | `rolling::tests::rolling_*`, `decide::tests::sim::prop_rolling_update_invariants` |
//! | docs/behaviour.md#recreate Recreate | `recreate` (`Work::recreate`) | `recreate::tests::recreate_*`, `decide::tests::sim::prop_recreate_never_mixes` |
//! | docs/behaviour.md#rollback rollback | `rollback` (`Work::rollback`) | `rollback::tests::rollback_*`, `decide::tests::sim::rollback_restores_previous_template` |
//! | docs/behaviour.md#pause-and-progress pause, progress deadline | [`status::paused_conditions`], [`status::rollout_status`], `progress` (`Work::rollout_status`) | `scaling::tests::paused_*`, `progress::tests::progress_deadline_*` |
//! | docs/behaviour.md#autoscaler-deletion trigger-deletion-by-mcm | [`autoscaler::stamp_trigger_entries`], [`autoscaler::apply_trigger_entries`] | `autoscaler::tests::*`, `decide::tests::trigger_deletion_*` |
//! | docs/behaviour.md#rolling-update steps 2, 3, 6 PreferNoSchedule taints, CA annotations | `node_marks` (`Work::taint_old_sets`, `autoscaler_annotations_for_rollout`), `cleanup` (`Work::on_complete`) | `rolling::tests::rolling_creates_named_new_set_with_surge_and_taints_old_nodes` |
//! | docs/behaviour.md#deployment-status status | [`status::calculate_status`], [`status::status_update_required`] | `status::tests::status_*` |
//! | docs/behaviour.md#cleanup revisionHistoryLimit | `cleanup` (`Work::cleanup`) | `cleanup::tests::cleanup_*` |
//! | docs/behaviour.md#in-place-rollout InPlaceUpdate (Auto and Manual) | `in_place` (`Work::in_place`), [`types::NodeView`] | `in_place::tests::in_place_*`, `decide::tests::sim::prop_in_place_update_invariants` |

pub mod context;
pub mod reconcile;
