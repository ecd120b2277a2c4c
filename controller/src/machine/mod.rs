//! The Machine controller: creation, health, node metadata sync, preservation, hot update and
//! deletion flows.
//!
//! The pure decision logic lives in [`mcm_decisions::machine`] (no I/O, no async, no clock: `now`
//! is a parameter; the crate's dependencies and `scripts/check-decisions-purity.sh` keep it so). Map of reference sections (`docs/behaviour.md`) to code and
//! tests:
//!
//! | Reference | Function(s) | Tests |
//! |---|---|---|
//! | docs/behaviour.md#machine-reconcile reconcile order, finalizer first, frozen, validation (docs/behaviour.md#validation) | [`mcm_decisions::machine::order::plan_entry`], [`mcm_decisions::machine::order::plan_reconcile_order`], [`mcm_decisions::machine::order::validate_machine`] | `order::tests::entry_decisions`, `order_follows_upstream`, `invalid_machine_is_blocked` |
//! | docs/behaviour.md#machine-reconcile status "similarity" (Levenshtein > 0.75, 30 min) | [`mcm_decisions::vocabulary::is_status_similar`], [`mcm_decisions::vocabulary::StatusWrite::is_redundant`] | `vocabulary::status::tests::similar_descriptions_within_30_minutes_are_skipped`, `different_phase_or_text_is_not_similar`, `prop_levenshtein_is_a_metric` |
//! | docs/behaviour.md#effective-settings effective settings | [`mcm_decisions::vocabulary::effective_settings`] | `vocabulary::settings::tests::effective_settings_prefer_annotation_then_spec_then_flag` |
//! | docs/behaviour.md#class-validation MachineClass checks | [`mcm_decisions::machine::order::validate_machine_class`] | `order::tests::class_validation` |
//! | docs/behaviour.md#creation-flow creation steps, intent before CreateMachine | [`mcm_decisions::machine::creation::next_creation_step`], [`mcm_decisions::machine::creation::has_create_intent`] | `creation::tests::happy_path_*`, `second_pass_with_vm_sets_pending`, `prop_create_only_after_intent` |
//! | docs/behaviour.md#reaction-matrix GetMachineStatus (creation) / CreateMachine / InitializeMachine rows | [`mcm_decisions::machine::creation::create_error_outcome`], [`mcm_decisions::machine::creation::next_creation_step`] | `get_status_matrix_in_creation`, `create_machine_matrix`, `initialize_matrix`, `resource_exhausted_retry_zero_means_long` |
//! | docs/behaviour.md#creation-flow stale node, CLBO vs Failed, no target ⇒ Available | [`mcm_decisions::machine::creation::create_failure_phase`] | `stale_node_deletes_new_vm_and_fails_machine`, `create_failure_after_creation_timeout_is_failed`, `without_target_cluster_machine_becomes_available_with_addresses` |
//! | docs/behaviour.md#creation-flow user data placeholders, bootstrap token | [`mcm_decisions::machine::creation::patch_user_data`], [`mcm_decisions::machine::creation::bootstrap_token_id`], [`mcm_decisions::machine::creation::bootstrap_token_secret`], [`mcm_decisions::machine::creation::bootstrap_token_from_secret`] | `user_data_placeholders`, `bootstrap_token_id_and_secret` |
//! | docs/behaviour.md#health-check health, permit, meltdown, timeouts, in-place results, startup taint | [`mcm_decisions::machine::health::plan_health`], [`mcm_decisions::machine::health::is_healthy`], [`mcm_decisions::machine::health::node_conditions_changed`], [`mcm_decisions::machine::health::can_mark_machine_failed`] | `health::tests::*` (12 tests) |
//! | docs/behaviour.md#node-sync node metadata | [`mcm_decisions::machine::node_sync::sync_machine_name_label`], [`mcm_decisions::machine::node_sync::sync_node_templates`] | `node_sync::tests::*` |
//! | docs/behaviour.md#deletion-flow deletion state machine, docs/behaviour.md#reaction-matrix deletion rows | [`mcm_decisions::machine::deletion::deletion_stage`] and the `plan_*` stage functions | `deletion::tests::dispatch_*`, `get_vm_status_stage_matrix`, `delete_machine_matrix`, `drain_stage_steps`, `volume_attachment_stage`, `node_deletion_stage`, `prop_deletion_reaches_finalizer_removal` |
//! | docs/behaviour.md#in-place-machine in-place update (node condition from labels, drain, hand-off) | [`mcm_decisions::machine::in_place::plan_in_place_node_condition`], [`mcm_decisions::machine::in_place::plan_in_place_update`] | `in_place::tests::*` |
//! | docs/behaviour.md#preservation, docs/behaviour.md#preservation-scope preservation; docs/behaviour.md#auto-preservation auto-preservation budget (counts are inputs) | [`mcm_decisions::machine::preservation::plan_preservation`], [`mcm_decisions::machine::preservation::plan_auto_preservation`] | `preservation::tests::*`, `prop_never_more_than_max` |
//! | docs/behaviour.md#hot-update hot update | [`mcm_decisions::machine::hot_update::plan_hot_update`], [`mcm_decisions::machine::hot_update::changed_paths`] | `hot_update::tests::*`, `prop_update_only_after_intent` |
//! | docs/behaviour.md#machine-routing event routing (+ preserveExpiryTime rule), docs/behaviour.md#node-controller node controller, not-managed nodes | [`mcm_decisions::machine::routing`] | `routing::tests::*` |
//! | docs/behaviour.md#phase-transitions phase transitions | spread over the above | transitions asserted in the tests above |
//! | "why is this machine stuck?" condition `Blocked` | [`mcm_decisions::machine::waiting::waiting_condition`], [`mcm_decisions::machine::waiting::merge_waiting_condition`], [`mcm_decisions::machine::waiting::refresh_waiting_condition`], [`mcm_decisions::machine::waiting::drain_view`] | `waiting::tests::*` (incl. `prop_condition_does_not_depend_on_now`), `it::machine::failing_create_machine_backs_off_exponentially_and_says_why`, `it::termination::a_blocking_pdb_is_retried_until_it_allows_the_eviction` |
//! | Meltdown guard (share of a deployment's/zone's machines Unknown/Failed) | [`mcm_decisions::machine::meltdown::assess`], [`mcm_decisions::machine::meltdown::condition_change`], used in [`mcm_decisions::machine::health::plan_health`] and the MachineDeployment shell | `meltdown::tests::*`, `health::tests::meltdown_guard_keeps_unknown_machines_from_being_failed`, `it::machine_deployment::a_mass_failure_trips_the_meltdown_guard_and_nothing_is_replaced` |
//! | docs/behaviour.md#drain re-attach wait after a volume pod's eviction | [`mcm_decisions::drain::plan::volume_progress`], [`mcm_decisions::drain::plan::DrainLedger::record_volume_event`] (shell: `drain::reconcile`) | `drain::plan::tests::detached_volumes_are_awaited_on_another_node_until_the_reattach_timeout`, `it::termination::an_evicted_volume_is_awaited_until_it_is_attached_elsewhere`, `it::termination::a_pod_with_a_volume_is_evicted_and_its_detach_awaited` |
//! | docs/behaviour.md#retry-classes retry periods | [`mcm_decisions::vocabulary::Retry`] | `vocabulary::requeue::tests::retry_periods_match_upstream` |
//! | Per-machine backoff of failing Create/Initialize/DeleteMachine | [`mcm_decisions::machine::backoff`] (used by [`mcm_decisions::machine::creation::create_error_outcome`], [`mcm_decisions::machine::creation::next_creation_step`], [`mcm_decisions::machine::deletion::plan_delete_vm_result`], [`mcm_decisions::machine::deletion::plan_delete_vm_wait`]) | `backoff::tests::*` (incl. `twenty_failures_schedule_versus_constant_retry`), `deletion::tests::delete_machine_matrix`, `it::machine::failing_create_machine_backs_off_exponentially_and_says_why` |
//!
//! Shell of the Machine controller ([`reconcile`]; integration tests in
//! `controller/tests/it/machine.rs`, named `it::machine::<test>` below):
//!
//! | Reference | Shell | Tests |
//! |---|---|---|
//! | docs/behaviour.md#machine-process, docs/behaviour.md#machine-routing queue, routing of machines/nodes/classes, status-only changes that matter | [`reconcile::run`] | every `it::machine` test (event-driven progress); `preservation_follows_the_annotations` (user edit of preserveExpiryTime acted on at once) |
//! | docs/behaviour.md#machine-reconcile finalizer first, order, frozen | `reconcile::MachineController::reconcile` | `machine_is_created_and_runs_with_its_node` |
//! | docs/behaviour.md#creation-flow creation flow, intent before CreateMachine, placeholders, bootstrap token | [`reconcile::creation`] | `machine_is_created_and_runs_with_its_node`, `crashes_during_creation_leave_exactly_one_vm_per_machine`, `reconcile::creation::tests::*` |
//! | docs/behaviour.md#reaction-matrix GetMachineStatus (creation) / CreateMachine / InitializeMachine rows | [`reconcile::creation`] | `driver_errors_follow_the_reaction_matrix` (13 cells) |
//! | docs/behaviour.md#health-check Pending → Running, startup taint, Unknown → Failed with the permit, creation timeout | [`reconcile::health`], [`reconcile::permits`] | `machine_is_created_and_runs_with_its_node`, `unhealthy_nodes_fail_one_machine_per_deployment_at_a_time`, `creation_timeout_fails_a_pending_machine`, `permits::tests::*` |
//! | docs/behaviour.md#node-sync node metadata | [`reconcile::node_sync`] | `node_template_is_synced_to_the_node`, `machine_is_created_and_runs_with_its_node` (machine-name label) |
//! | Issue item 5 hot update | [`reconcile::hot_update`] | `hot_update_changes_tags_in_place` |
//! | docs/behaviour.md#preservation, docs/behaviour.md#preservation-scope preservation (now / when-failed / false, Node wins, expiry, CA annotation, drain of a preserved failed node, recovery) | [`reconcile::preservation`] | `preservation_follows_the_annotations`, `unhealthy_nodes_fail_one_machine_per_deployment_at_a_time` |
//! | docs/behaviour.md#metrics-mc metrics (driver calls, durations, machine gauges on scrape) | [`reconcile::driver`], [`reconcile::run`] | `machine_is_created_and_runs_with_its_node` (scrape) |
//! | Shell rules: 409 conflicts | [`reconcile::writes`] | `machine_writes_converge_under_conflicts` |
//!
//! Not in the Machine controller shell yet: the in-place update steps (docs/behaviour.md#in-place-machine).

pub mod class_reconcile;
pub mod class_secrets;
pub mod context;
pub mod creation_flows;
pub mod node_reconcile;
pub mod reconcile;
pub mod settings;
pub mod terminate;
