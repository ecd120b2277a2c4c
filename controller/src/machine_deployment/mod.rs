//! The MachineDeployment controller: revisions, rollouts (RollingUpdate, Recreate), scaling,
//! pause, rollback, progress, status and history cleanup.
//!
//! Pure parts (no I/O, no clock). Map of reference sections
//! (`docs/behaviour.md`) to code and tests:
//!
//! | Reference | Function | Tests |
//! |---|---|---|
//! | docs/behaviour.md#deployment-reconcile reconcile order, finalizer, deleting, selecting-all | [`mcm_decisions::machine_deployment::decide::plan`] | `decide::tests::deleting_*`, `selecting_all_*` |
//! | docs/behaviour.md#revisions new/old sets, EqualIgnoreHash (docs/behaviour.md#q2), revisions | [`mcm_decisions::machine_deployment::revision::find_new_machine_set`], [`mcm_decisions::machine_deployment::revision::equal_ignore_hash`], [`mcm_decisions::machine_deployment::revision::sync_new_machine_set`], [`mcm_decisions::machine_deployment::revision::bump_revision`] | `revision::tests::*`, `new_machine_set::tests::in_place_fields_*` |
//! | docs/behaviour.md#revisions legacy MachineSets without the hash label in their selector | [`mcm_decisions::machine_deployment::hash_label_migration::next_step`] | `hash_label_migration::tests::*`, `it::machine_deployment::legacy_machine_sets_are_migrated_to_the_hash_label` |
//! | docs/behaviour.md#revisions naming `<md>-<5 chars>` and collisionCount (docs/behaviour.md#q1) | [`mcm_decisions::machine_deployment::revision::template_hash`], [`mcm_decisions::machine_deployment::new_machine_set::create_conflict`], [`mcm_decisions::machine_deployment::new_machine_set::create_failure`] | `revision::tests::hash_is_pinned_across_versions`, `new_machine_set::tests::collision_*`, `create_failure_*` |
//! | docs/behaviour.md#revisions fenceposts (surge up, unavailable down) | [`mcm_decisions::machine_deployment::fencepost::resolve_fenceposts`], [`mcm_decisions::machine_deployment::fencepost::max_surge`], [`mcm_decisions::machine_deployment::fencepost::max_unavailable`] | `fencepost::tests::fencepost_table` |
//! | docs/behaviour.md#revisions NewISNewReplicas | [`mcm_decisions::machine_deployment::new_machine_set::new_machine_set_replicas`] | `new_machine_set::tests::new_replicas_table` |
//! | docs/behaviour.md#scaling isScalingEvent, scale, proportional scaling | [`mcm_decisions::machine_deployment::scaling::is_scaling_event`], [`mcm_decisions::machine_deployment::scaling::proportional_scale_in`] | `scaling::tests::proportional_*`, `prop_proportional_conserves_total` |
//! | docs/behaviour.md#rolling-update RollingUpdate | `rolling` (`Work::rolling`) | `rolling::tests::rolling_*`, `decide::tests::sim::prop_rolling_update_invariants` |
//! | docs/behaviour.md#recreate Recreate | `recreate` (`Work::recreate`) | `recreate::tests::recreate_*`, `decide::tests::sim::prop_recreate_never_mixes` |
//! | docs/behaviour.md#rollback rollback | `rollback` (`Work::rollback`) | `rollback::tests::rollback_*`, `decide::tests::sim::rollback_restores_previous_template` |
//! | docs/behaviour.md#pause-and-progress pause, progress deadline | [`mcm_decisions::machine_deployment::status::paused_conditions`], [`mcm_decisions::machine_deployment::status::rollout_status`], `progress` (`Work::rollout_status`) | `scaling::tests::paused_*`, `progress::tests::progress_deadline_*` |
//! | docs/behaviour.md#autoscaler-deletion trigger-deletion-by-mcm | [`mcm_decisions::machine_deployment::autoscaler::stamp_trigger_entries`], [`mcm_decisions::machine_deployment::autoscaler::apply_trigger_entries`] | `autoscaler::tests::*`, `decide::tests::trigger_deletion_*` |
//! | docs/behaviour.md#rolling-update steps 2, 3, 6 PreferNoSchedule taints, CA annotations | `node_marks` (`Work::taint_old_sets`, `autoscaler_annotations_for_rollout`), `cleanup` (`Work::on_complete`) | `rolling::tests::rolling_creates_named_new_set_with_surge_and_taints_old_nodes` |
//! | docs/behaviour.md#deployment-status status | [`mcm_decisions::machine_deployment::status::calculate_status`], [`mcm_decisions::machine_deployment::status::status_update_required`] | `status::tests::status_*` |
//! | docs/behaviour.md#cleanup revisionHistoryLimit | `cleanup` (`Work::cleanup`) | `cleanup::tests::cleanup_*` |
//! | docs/behaviour.md#in-place-rollout InPlaceUpdate (Auto and Manual) | `in_place` (`Work::in_place`), [`mcm_decisions::machine_deployment::types::NodeView`] | `in_place::tests::in_place_*`, `decide::tests::sim::prop_in_place_update_invariants` |

pub mod context;
pub mod reconcile;
