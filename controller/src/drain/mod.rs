//! Node drain: which pods to evict, in which order, and when a drain is done or must be forced.
//!
//! Map of reference sections to code and tests ([`mcm_decisions::drain::plan`] is pure):
//!
//! | Reference | Function(s) | Tests |
//! |---|---|---|
//! | docs/behaviour.md#deletion-flow `drainNode` preamble: timeout, `min(maxEvictRetries, timeout/20s)`, `force-deletion` (ParseBool), drain timeout since deletionTimestamp, NotReady/ReadonlyFilesystem > 5 min | [`mcm_decisions::drain::plan::deletion_drain_config`] | `plan::tests::drain_config_rules` |
//! | docs/behaviour.md#preservation preserved-node drain (`force-drain=True`, lastUpdateTime + drain timeout) | [`mcm_decisions::drain::plan::preserved_drain_config`] | `machine::plan::preservation::tests::preserved_drain_forced_by_label` |
//! | docs/behaviour.md#drain pod selection (mirror, DaemonSet, completed, terminating, PVC pods) | [`mcm_decisions::drain::plan::classify_pod`], [`mcm_decisions::drain::plan::pvc_claims`] | `plan::tests::classification`, `prop_never_touches_daemon_set_or_mirror_pods` |
//! | docs/behaviour.md#drain force mode (delete, grace 0, no wait) | [`mcm_decisions::drain::plan::plan_drain`] | `plan::tests::force_mode_deletes_everything_but_daemon_set_and_mirror_pods` |
//! | docs/behaviour.md#drain eviction retries (20s, 429, misconfigured PDB fails the pass and is asked again in the next one, delete after budget) | [`mcm_decisions::drain::plan::plan_drain`], [`mcm_decisions::drain::plan::DrainLedger::record`], [`mcm_decisions::drain::plan::misconfigured_refusals`] | `eviction_retries_then_deletion`, `misconfigured_pdb_fails_the_drain`, `misconfigured_pdb_is_asked_again_in_the_next_pass`, `stuck_terminating_pod_fails_after_grace_and_slack` |
//! | docs/behaviour.md#drain volume pods serially by priority, detach wait, shared PVs excluded | [`mcm_decisions::drain::plan::plan_drain`], [`mcm_decisions::drain::plan::exclude_shared_volumes`] | `volume_pods_are_drained_one_by_one_waiting_for_detach`, `shared_volumes_are_excluded` |
//! | docs/architecture.md#bounded-drain bounded drain: next decision never after the deadline | [`mcm_decisions::drain::plan::DrainOutcome::InProgress`] | `deadline_fails_normal_drain`, `prop_never_touches_daemon_set_or_mirror_pods` (asserts `next_check_at <= deadline`) |
//!
//! Integration tests (`controller/tests/it/termination.rs`, through the termination shell):
//! `deleting_a_running_machine_drains_then_removes_vm_node_and_machine` (cordon, eviction,
//! DaemonSet and mirror pods left alone), `a_pdb_refuses_eviction_until_the_drain_timeout_forces_the_drain`
//! (misconfigured budget, force after the timeout), `a_blocking_pdb_is_retried_until_it_allows_the_eviction`,
//! `a_misconfigured_pdb_deleted_later_lets_the_drain_finish`, `adding_force_deletion_to_a_stuck_drain_forces_it`,
//! `a_pod_with_a_volume_is_evicted_and_its_detach_awaited` (GetVolumeIDs, detach wait),
//! `force_deletion_label_deletes_pods_and_volume_attachments_without_eviction`.
//!
//! The shell part is [`reconcile::drain_pass`]: it lists the node's pods live (field selector),
//! resolves PVC → PV → GetVolumeIDs, POSTs evictions and deletions, classifies 429 answers with
//! [`mcm_decisions::drain::pdb`] into [`mcm_decisions::drain::plan::EvictionFailure`] and records results in the [`mcm_decisions::drain::plan::DrainLedger`] the
//! termination shell keeps per node ([`reconcile::NodeDrainState`]).

pub mod reconcile;
